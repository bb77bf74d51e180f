"""Equation counts of the zoo's gradients (tests/zoo.py): for each program, the tool's
`grad` (after its default canonicalize), JAX's `make_jaxpr(jax.grad(f))`, and JAX's program
after the tool's own `canonicalize` pass (the fair comparison: the same clean-up on both).
Equations inside nested jaxprs count, each jaxpr object once (`core.all_eqns`: a shared
`let` definition once).

`--by-primitive`: where the tool's count is above JAX's canonicalized one, the primitives
whose counts differ (tool minus JAX).
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import jax  # noqa: E402
import zoo  # noqa: E402

from jaxprtool.ad.api import grad_jaxpr  # noqa: E402
from jaxprtool.core import JaxprError, all_eqns  # noqa: E402
from jaxprtool.passes.registry import run_pipeline  # noqa: E402
from jaxprtool.text.parser import parse  # noqa: E402


def by_primitive(jaxpr) -> collections.Counter:
    return collections.Counter(e.prim for e in all_eqns(jaxpr))


def tool_grad(program: zoo.Program):
    j = parse(zoo.trace(program), "<jax>").jaxpr
    g = grad_jaxpr(j, program.argnums, has_aux=program.has_aux)
    return run_pipeline(g, "canonicalize")


def jax_grad(program: zoo.Program):
    loss = program.fn
    if program.has_aux:

        def loss(*args):
            out = program.fn(*args)
            return out[0], out[1:]

    g = jax.grad(loss, argnums=program.argnums, has_aux=program.has_aux)
    text = str(jax.make_jaxpr(g)(*program.jax_args()))
    return parse(text, "<jax grad>").jaxpr


def count(jaxpr) -> int:
    return sum(1 for _ in all_eqns(jaxpr))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--by-primitive", action="store_true")
    opts = ap.parse_args()
    print(f"{'program':18} {'tool grad':>9} {'JAX grad':>9} {'JAX canon':>9}   note")
    details = []
    for name in zoo.NAMES:
        missing = [p for p in zoo.NEEDS[name] if not zoo.have(p)]
        if missing:
            print(f"{name:18} {'-':>9} {'-':>9} {'-':>9}   needs {', '.join(missing)}")
            continue
        program = zoo.build(name)
        jg = jax_grad(program)
        canon = run_pipeline(jg, "canonicalize")
        try:
            tg = tool_grad(program)
        except JaxprError as e:
            first = e.message.splitlines()[0]
            print(f"{name:18} {'-':>9} {count(jg):9d} {count(canon):9d}   tool: {first[:70]}")
            continue
        n_tool, n_canon = count(tg), count(canon)
        note = f"tool +{n_tool - n_canon}" if n_tool > n_canon else ""
        print(f"{name:18} {n_tool:9d} {count(jg):9d} {n_canon:9d}   {note}", flush=True)
        if n_tool > n_canon:
            diff = by_primitive(tg)
            diff.subtract(by_primitive(canon))
            details.append((name, {p: n for p, n in sorted(diff.items()) if n}))
    if opts.by_primitive:
        for name, diff in details:
            print(f"\n{name}: tool minus JAX canonicalized, by primitive")
            for prim, n in diff.items():
                print(f"  {prim:28} {n:+d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
