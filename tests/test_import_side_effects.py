"""`import jaxprtool` has no side effect on the importing process (issue 47 item 3): no
signal blocked, no handler installed, no thread started, the collector left on, whether it is imported by `python
-c`, a script, or the parent package of a `python -m pkg.mod`; only the `jaxprtool` program
itself (its console script, `python -m jaxprtool`) takes Ctrl-C over (test_hostile_trust's
Ctrl-C tests)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import ROOT

_REPORT = (
    "import gc, signal, threading\n"
    "print(threading.active_count(), signal.SIGINT in signal.pthread_sigmask("
    "signal.SIG_BLOCK, []), signal.getsignal(signal.SIGINT) is signal.default_int_handler, "
    "gc.isenabled())\n"
)


#: runs the rest of its command line (`python -m ...`, `python -c ...`) as the same process
#: with SIGINT at its default, as an interactive shell leaves it: a test run started in the
#: background (`make test &`) ignores SIGINT, and its children would inherit that.  (Not a
#: preexec_fn: forking a process that runs JAX's threads and running Python in the child
#: may deadlock.)
_SIGINT_DEFAULT = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])"
)


def with_sigint_default(argv: list[str]) -> list[str]:
    """`argv` (a Python command line) started with SIGINT at its default (same process id)."""
    return [argv[0], "-c", _SIGINT_DEFAULT, *argv[1:]]


def _report(argv, cwd) -> str:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    argv = with_sigint_default(argv)
    r = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


@pytest.mark.skipif(not hasattr(__import__("signal"), "pthread_sigmask"), reason="POSIX only")
def test_importing_the_package_blocks_no_signal_and_starts_no_thread(tmp_path):
    untouched = "1 False True True"
    assert _report([sys.executable, "-c", "import jaxprtool\n" + _REPORT], tmp_path) == untouched
    # the parent package of `python -m pkg.mod` is imported while sys.argv[0] is "-m"
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("import jaxprtool\n")
    (pkg / "mod.py").write_text(_REPORT)
    assert _report([sys.executable, "-m", "pkg.mod"], tmp_path) == untouched
    assert _report([sys.executable, "-W", "ignore", "-m", "pkg.mod"], tmp_path) == untouched


@pytest.mark.parametrize(
    "orig_argv, argv0, program",
    [
        (["python", "-m", "jaxprtool", "fmt"], "-m", True),
        (["python", "-W", "ignore", "-m", "jaxprtool"], "-m", True),
        (["python", "-mjaxprtool"], "-m", True),
        (["python", "-I", "-m", "jaxprtool.__main__"], "-m", True),
        (["/v/bin/python", "/v/bin/jaxprtool", "fmt"], "/v/bin/jaxprtool", True),
        (["python", "-m", "pkg.mod"], "-m", False),
        (["python", "-W", "-m", "pkg.mod"], "-m", False),
        (["python", "-c", "import jaxprtool"], "-c", False),
        (["python", "script.py", "-m", "jaxprtool"], "script.py", False),
    ],
)
def test_the_program_is_read_from_the_interpreters_command_line(
    monkeypatch, orig_argv, argv0, program
):
    from jaxprtool import interrupt

    monkeypatch.setattr(sys, "orig_argv", orig_argv)
    monkeypatch.setattr(sys, "argv", [argv0])
    assert interrupt.program_starting() is program
