"""jaxprtool: a command-line toolchain for jaxprs."""

from .interrupt import exit_on_interrupt as _exit_on_interrupt  # noqa: E402
from .interrupt import hold_collector as _hold_collector  # noqa: E402
from .interrupt import program_starting as _program_starting  # noqa: E402
from .version import __version__ as __version__  # noqa: E402

# Ctrl-C is the tool's from the package's first line when this process is the `jaxprtool`
# program (its console script or `python -m jaxprtool`, read from the interpreter's command
# line); `import jaxprtool` anywhere else installs nothing and starts no thread.  The
# program's start-up runs without the collector (`interrupt.hold_collector`), and click's
# `import inspect` leaves that module unexecuted
if _program_starting():
    _exit_on_interrupt()
    _hold_collector()
    from .lazy import lazy_module as _lazy_module

    # click imports `inspect` (with ast, dis and tokenize: ~27M instructions, 4% of a grad
    # of a 24-layer transformer) for `cleandoc`, which the tool's options do themselves
    # (`cli.Option`): executed only where something reads one of its attributes
    _lazy_module("inspect", import_binds=True)


def _load_families(name: str | None = None) -> None:
    from .families import load

    load(name)


def _install_loader() -> None:
    # the entry point installs the loader: the machinery never imports a family module
    from .record import set_loader

    set_loader(_load_families)


_install_loader()


# the public API (jaxprtool/api.py).  `jaxprtool.check` and `jaxprtool.memory` are its
# functions; the checker and liveness modules stay importable by name
# (`from jaxprtool.check import check`, `from jaxprtool.memory import liveness`).
from .api import *  # noqa: E402, F403
from .api import __all__ as __all__  # noqa: E402
