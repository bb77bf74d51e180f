"""jaxprtool: a command-line toolchain for jaxprs."""

__version__ = "0.1.0"
