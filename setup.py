"""The compiled twin of the reader's and printer's per-line loops (jaxprtool/_twin.c,
text/twin.py), built where a C compiler is found; elsewhere the package installs without it,
quietly, and the Python loops run.  Everything else is in pyproject.toml."""

import shutil

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """Builds the extension when a compiler runs; otherwise leaves it out without a word
    (no compiler found) or with setuptools' one-line note (a compiler that fails)."""

    def build_extension(self, ext):
        exe = getattr(self.compiler, "compiler_so", None)  # (unix compilers: its command)
        if exe and shutil.which(exe[0]) is None:
            return
        try:
            super().build_extension(ext)
        except Exception:  # (a toolchain that fails: the Python loops run)
            pass


setup(
    ext_modules=[Extension("jaxprtool._twin", ["jaxprtool/_twin.c"], optional=True)],
    cmdclass={"build_ext": OptionalBuildExt},
)
