"""Printer throughput: MB/s of text produced by `print_jaxpr` (target >= 1.5 MB/s).

Inputs: the largest corpus file (parsed once, printed repeatedly) and a
generated 10 000-equation program (elementwise chains with literals, nested
jits and long parameter lists), built directly as IR.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from jaxprtool.core import Eqn, Jaxpr, Literal, ShapedArray, Var  # noqa: E402
from jaxprtool.text.parser import parse  # noqa: E402
from jaxprtool.text.printer import print_jaxpr  # noqa: E402
from jaxprtool.text.style import DEFAULT_STYLE, detect_style  # noqa: E402

CORPUS = ROOT.parent / "shared" / "jaxpr-format" / "corpus"
TARGET = 1.5


def big_program(n_eqns: int = 10_000) -> Jaxpr:
    t = ShapedArray((8, 128), "f32")
    s = ShapedArray((128,), "f32")
    x, w = Var(t), Var(s)
    env = [x]
    eqns = []
    prims = ["sin", "cos", "tanh", "exp", "neg"]
    i = 0
    while len(eqns) < n_eqns:
        a = env[-1]
        k = i % 7
        if k == 0:
            inner_in = Var(t)
            inner_mid, inner_out = Var(t), Var(t)
            inner = Jaxpr(
                (),
                (inner_in,),
                (
                    Eqn("mul", (inner_in, Literal(0.5, ShapedArray((), "f32"))), (inner_mid,), {}),
                    Eqn("tanh", (inner_mid,), (inner_out,), {}),
                ),
                (inner_out,),
            )
            out = Var(t)
            eqns.append(Eqn("jit", (a,), (out,), {"name": f"layer{i}", "jaxpr": inner}))
        elif k == 1:
            b, out = Var(t), Var(t)
            eqns.append(Eqn("broadcast_in_dim", (w,), (b,), {"broadcast_dimensions": (1,)}))
            eqns.append(Eqn("add", (a, b), (out,), {}))
        elif k == 2:
            out = Var(t)
            eqns.append(
                Eqn(
                    "convert_element_type",
                    (a,),
                    (out,),
                    {"new_dtype": np.dtype("float32"), "weak_type": False},
                )
            )
        elif k == 3:
            out = Var(t)
            eqns.append(Eqn("mul", (a, env[-2] if len(env) > 1 else a), (out,), {}))
        else:
            out = Var(t)
            eqns.append(Eqn(prims[i % len(prims)], (a,), (out,), {}))
        env.append(out)
        i += 1
    return Jaxpr((), (x, w), tuple(eqns), (env[-1], env[len(env) // 2]))


def measure(label: str, jaxpr: Jaxpr, style, min_time: float = 1.0) -> float:
    text = print_jaxpr(jaxpr, style)
    # best of several runs: the figure is the printer's speed, not the machine's load
    times, walls = [], []
    start = time.perf_counter()
    while len(times) < 3 or time.perf_counter() - start < min_time:
        t0, w0 = time.process_time(), time.perf_counter()  # CPU time: robust to machine load
        print_jaxpr(jaxpr, style)
        times.append(time.process_time() - t0)
        walls.append(time.perf_counter() - w0)
    per = min(times)
    size = len(text.encode())
    mbs = size / per / 1e6
    print(
        f"{label:44s} {size / 1e3:8.1f} kB  {per * 1e3:7.1f} ms  {mbs:5.2f} MB/s"
        f"  (wall: {min(walls) * 1e3:.1f} ms, {size / min(walls) / 1e6:.2f} MB/s)"
    )
    return mbs


def main() -> int:
    print(f"{'input':44s} {'size':>11s}  {'CPU time':>10s}  {'rate':>10s}")
    rates = []
    files = (
        sorted(CORPUS.glob("*/*.jaxpr"), key=lambda p: p.stat().st_size) if CORPUS.is_dir() else []
    )
    if files:
        big = files[-1]
        j = parse(big.read_text(), str(big)).jaxpr
        rates.append(measure(f"corpus {big.parent.name}/{big.name}", j, detect_style(j)))
    else:
        print("(corpus absent: skipping the corpus file)")
    j = big_program()
    n = sum(1 for _ in __import__("jaxprtool.core", fromlist=["all_eqns"]).all_eqns(j))
    rates.append(measure(f"generated program ({n} equations)", j, DEFAULT_STYLE))
    ok = all(r >= TARGET for r in rates)
    print(f"target >= {TARGET} MB/s: {'met' if ok else 'NOT met'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
