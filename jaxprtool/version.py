"""The tool's version, in a module of its own: what reports it (`diagnostics.sarif_log`)
imports it from here, not from the package, whose `__init__` imports the whole API."""

__version__ = "0.1.0"
