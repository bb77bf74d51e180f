"""Running the tool in a child process and measuring it, for the benchmarks that time whole
commands (bench_targets, bench_memory): the child's CPU and wall seconds, with the
repository on its path and its bytecode cached outside the checkout."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def child_env(**extra) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT), **extra)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = os.path.join(tempfile.gettempdir(), "jaxprtool-bench-pyc")
    return env


def run_child(argv, env=None, stdin=None) -> tuple[float, float, subprocess.CompletedProcess]:
    """(CPU seconds of the child, wall seconds, result)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    r = subprocess.run(argv, env=env or child_env(), capture_output=True, text=True, input=stdin)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall, r


def tool(*args) -> list[str]:
    return [sys.executable, "-m", "jaxprtool", *args]
