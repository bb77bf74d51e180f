"""Parse throughput: MB/s and equations/s, and start-up time.

    .venv/bin/python bench/bench_parse.py [--n 10000] [--repeat 5]

Measures (1) the largest file of the reference corpus and (2) a generated
jaxpr of N equations (a chain of `sin`/`mul`/`add` plus a nested `jit` every
500 equations, so layout and nested scopes are exercised), each by wall time
and by CPU time (the CPU figure is the one to compare on a loaded machine);
then (3) the start-up cost in a fresh interpreter: `import
jaxprtool.text.parser` plus parsing a small file, which includes importing
lark and loading the cached LALR tables of `grammars/jaxpr.lark` (the first
run after a grammar change builds the cache).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from jaxprtool import core  # noqa: E402
from jaxprtool.text.parser import parse  # noqa: E402

CORPUS = (
    Path(os.environ.get("JAXPR_FORMAT_DIR", ROOT.parent / "shared" / "jaxpr-format")) / "corpus"
)


def var_name(k: int) -> str:
    """JAX's naming: base 26 with digits a-z."""
    s = ""
    while True:
        s = chr(97 + k % 26) + s
        k //= 26
        if k == 0:
            return s


def generate(n: int) -> str:
    """A printed jaxpr with n top-level equations (variable names as JAX would number them)."""
    counter = 0

    def fresh() -> str:
        nonlocal counter
        name = var_name(counter)
        counter += 1
        return name

    x = fresh()
    lines = [f"{{ lambda ; {x}:f32[8,128]. let"]
    prev = x
    for k in range(n):
        out = fresh()
        if k % 500 == 499:
            a = fresh()
            b = fresh()
            lines += [
                f"    {out}:f32[8,128] = jit[",
                "      name=body",
                f"      jaxpr={{ lambda ; {a}:f32[8,128]. let {b}:f32[8,128] = cos {a} in ({b},) }}",
                f"    ] {prev}",
            ]
        elif k % 3 == 0:
            lines.append(f"    {out}:f32[8,128] = sin {prev}")
        elif k % 3 == 1:
            lines.append(f"    {out}:f32[8,128] = mul {prev} 2.0:f32[]")
        else:
            lines.append(f"    {out}:f32[8,128] = add {prev} {x}")
        prev = out
    lines.append(f"  in ({prev},) }}")
    return "\n".join(lines) + "\n"


def measure(label: str, text: str, repeat: int) -> None:
    parse(text, label)  # warm up
    best = cpu = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        c0 = time.process_time()
        r = parse(text, label)
        cpu = min(cpu, time.process_time() - c0)
        best = min(best, time.perf_counter() - t0)
    neqns = sum(1 for _ in core.all_eqns(r.jaxpr))
    mb = len(text.encode()) / 1e6
    print(
        f"{label}: {mb * 1e3:.1f} kB, {neqns} eqns, best of {repeat}: {best * 1e3:.1f} ms wall, "
        f"{mb / best:.2f} MB/s, {neqns / best:,.0f} eqns/s (by CPU time: {mb / cpu:.2f} MB/s)"
    )


STARTUP = """
import time
t0 = time.perf_counter(); c0 = time.process_time()
from jaxprtool.text.parser import parse
parse("{ lambda ; a:f32[3]. let\\n    b:f32[3] = sin a\\n  in (b,) }\\n")
print(time.perf_counter() - t0, time.process_time() - c0)
"""


def startup(repeat: int) -> None:
    runs = []
    for _ in range(repeat + 1):  # the first run may build the grammar cache
        out = subprocess.run(
            [sys.executable, "-c", STARTUP], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.split()
        runs.append((float(out[0]), float(out[1])))
    wall, cpu = min(r[0] for r in runs[1:]), min(r[1] for r in runs[1:])
    print(
        f"start-up (import jaxprtool.text.parser + parse a small file), best of {repeat}: "
        f"{wall * 1e3:.0f} ms wall, {cpu * 1e3:.0f} ms CPU"
    )


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--n", type=int, default=10000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    files = (
        sorted(CORPUS.glob("**/*.jaxpr"), key=lambda p: p.stat().st_size) if CORPUS.is_dir() else []
    )
    if files:
        big = files[-1]
        measure(str(big.relative_to(CORPUS)), big.read_text(), args.repeat)
    else:
        print(f"corpus not found at {CORPUS}; skipping the corpus measurement")
    measure(f"generated ({args.n} eqns)", generate(args.n), args.repeat)
    startup(args.repeat)


if __name__ == "__main__":
    main()
