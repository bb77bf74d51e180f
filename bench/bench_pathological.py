"""Hostile input: time and peak memory of `check` and `fmt` on each pathological class.

    .venv/bin/python bench/bench_pathological.py [--scale 1.0] [--only REGEX] [--timeout 300]

The classes (tests/fuzzgen.py `pathological`): 10 MB lines (one parameter, one token, one
variable name, a comment, a number, equations joined by `;`, a million operands),
1,000-deep nesting (`{ lambda` written out, chained shared jaxprs, `[`, `(`, `{`, unclosed),
100k equations, 20k type errors, binary data, NUL bytes, CR and CRLF line endings, a
byte-order mark, invalid UTF-8, UTF-16, ANSI colours, recursive shared jaxprs.  Each must
end with exit 0 or a located error (exit 1) in bounded time and memory.  Every run is a
fresh process (`python -m jaxprtool CMD FILE`); its CPU time and peak resident size
come from wait4(2) (compare CPU times on a loaded machine).  The first row is a small
program, for the start-up cost.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from fuzzgen import SMALL, pathological  # noqa: E402


def run_one(cmd: str | list[str], path: str, timeout: float):
    """(exit status or None on timeout, wall seconds, CPU seconds, peak RSS in MB, the first
    message line); `cmd`: the command, or it and its options."""
    env = dict(os.environ, NO_COLOR="1", PYTHONPATH=str(ROOT))
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(
            [sys.executable, "-m", "jaxprtool", *([cmd] if isinstance(cmd, str) else cmd), path],
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=env,
        )
        deadline = t0 + timeout
        status = None
        while True:
            pid, st, ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                status = os.waitstatus_to_exitcode(st)
                break
            if time.perf_counter() > deadline:
                p.kill()
                _, st, ru = os.wait4(p.pid, 0)
                break
            time.sleep(0.01)
        dt = time.perf_counter() - t0
        p.returncode = status if status is not None else -9  # reaped by wait4
        err.seek(0)
        first = err.read(400).decode("utf-8", "replace").split("\n", 1)[0]
    first = re.sub(r"^\S*?p\.jaxpr:", "", first)
    return status, dt, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024, first


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=float, default=1.0, help="size factor (1.0: 10 MB lines)")
    ap.add_argument("--only", default="", help="classes matching this regex")
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--commands", default="check,fmt")
    a = ap.parse_args()
    classes = {"(small program: start-up)": SMALL.encode(), **pathological(a.scale)}
    bad = 0
    print(f"{'class':42s} {'cmd':6s} {'exit':>4s} {'wall s':>7s} {'cpu s':>7s} {'MB':>6s}  message")
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "p.jaxpr")
        for name, data in classes.items():
            if a.only and not re.search(a.only, name):
                continue
            Path(path).write_bytes(data)
            for cmd in a.commands.split(","):
                code, dt, cpu, mb, first = run_one(cmd, path, a.timeout)
                ok = code in (0, 1) and (code == 0 or re.match(r"\d+:\d+: error: ", first))
                bad += not ok
                shown = "TIME" if code is None else str(code)
                print(
                    f"{name[:42]:42s} {cmd:6s} {shown:>4s} {dt:7.2f} {cpu:7.2f} {mb:6.0f}  "
                    f"{'' if ok else '!! '}{first[:70]}",
                    flush=True,
                )
    print(f"{bad} run(s) without exit 0 or a located error")
    if not a.only:
        bad += type_errors_linear(a.timeout)
    return 1 if bad else 0


def type_errors_linear(timeout: float) -> int:
    """`check` of 5k and 20k ill-typed equations (every one reported, each with its source
    excerpt, which once took quadratic time): the CPU time of 4x the errors, at most 6x
    (+0.5 s); the best of three runs of each.  Returns 1 when missed."""
    from fuzzgen import chain

    cpu = {}
    with tempfile.TemporaryDirectory() as d:
        for n in (5000, 20000):
            path = os.path.join(d, f"e{n}.jaxpr")
            Path(path).write_text(chain(n, bad_every=1))
            cpu[n] = min(run_one("check", path, timeout)[2] for _ in range(3))
    met = cpu[20000] < 6 * cpu[5000] + 0.5
    print(
        f"type errors: check of 5k {cpu[5000]:.2f} CPU s, of 20k {cpu[20000]:.2f} CPU s: "
        f"{cpu[20000] / max(cpu[5000], 1e-9):.2f}x for 4x the errors (<= 6x + 0.5 s: "
        f"{'met' if met else 'MISSED'})"
    )
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
