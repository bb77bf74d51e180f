"""`jaxprtool memory` (issue 24; its speed target from issue 26), JAX side by side.

    .venv/bin/python bench/bench_memory.py [--equations 1000000] [--layers 24]

Rows:
* the whole `jaxprtool memory --no-xla --json` process on a generated program of N
  equations (target: 1M in at most 10 s), and the liveness walk alone on the parsed program
  (CPU seconds: the machine may be shared);
* for the transformer's gradient (bench_ad's blocks, `--layers`): the tool's peak live bytes
  and residual bytes beside the residual bytes JAX keeps (`jax.vjp`'s residual leaves) and
  XLA's temp bytes for the tool's grad program and for `jax.jit(jax.grad(f))`.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

import jax  # noqa: E402
from bench_ad import the_transformer  # noqa: E402
from children import run_child, tool  # noqa: E402

from jaxprtool.ad.api import grad_jaxpr, linearize_combined  # noqa: E402
from jaxprtool.memory import liveness, residual_bytes  # noqa: E402
from jaxprtool.text.parser import parse  # noqa: E402


def name(i: int) -> str:
    """q + i in bijective base 26 (qa, qb, ..., qz, qaa, ...): letters only, as JAX names, and
    never a keyword."""
    out = ""
    i += 1
    while i:
        i, r = divmod(i - 1, 26)
        out = chr(97 + r) + out
    return "q" + out


def chain_text(n: int) -> str:
    """n elementwise equations, each reading the last one or two results."""
    lines = ["{ lambda ; a:f32[8] b:f32[8]. let", f"    {name(0)}:f32[8] = mul a b"]
    for i in range(1, n):
        two = i % 3 == 0 and i > 1
        ops = f"{name(i - 1)} {name(i - 2)}" if two else name(i - 1)
        prim = "mul" if two else ("sin", "neg", "exp")[i % 3]
        lines.append(f"    {name(i)}:f32[8] = {prim} {ops}")
    lines.append(f"  in ({name(n - 1)},) }}")
    return "\n".join(lines) + "\n"


def speed(n: int) -> None:
    text = chain_text(n)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "chain.jaxpr")
        Path(path).write_text(text)
        cpu, wall, r = run_child(tool("memory", "--no-xla", "--json", "-o", os.devnull, path))
        if r.returncode != 0:
            print(r.stderr)
    j = parse(text).jaxpr
    c0 = time.process_time()
    liveness(j)
    walk = time.process_time() - c0
    met = ("met" if cpu <= 10 else "MISSED") if n >= 1_000_000 else "(applies at 1M equations)"
    print(f"memory of {n} equations: process {cpu:.2f} CPU s ({wall:.2f} s wall), liveness walk")
    print(f"  {walk:.2f} CPU s; target 10 s for 1M equations: {met}")


def transformer_table(layers: int) -> None:
    f, leaves = the_transformer(layers)
    j = parse(str(jax.make_jaxpr(f)(*leaves))).jaxpr
    argnums = tuple(range(len(leaves) - 1))
    lin = linearize_combined(j, argnums)
    boundary: list[int] = []
    g = grad_jaxpr(j, argnums, boundary=boundary)
    t = liveness(g, boundary[0])
    _, vjp_fn = jax.vjp(lambda *ps: f(*ps, leaves[-1]), *leaves[:-1])
    jax_res = sum(leaf.nbytes for leaf in jax.tree_util.tree_leaves(vjp_fn))
    jg = jax.jit(jax.grad(f, argnums=argnums)).lower(*leaves).compile().memory_analysis()
    from jaxprtool.backend import as_jax_function

    tg = jax.jit(as_jax_function(g)).lower(*leaves).compile().memory_analysis()
    print(f"transformer, {layers} layers, grad:")
    print(f"  tool: peak live {t.peak_bytes} B, residuals {residual_bytes(lin).total} B")
    print(f"  JAX residuals (jax.vjp): {jax_res} B")
    print(
        f"  XLA temp bytes: tool's grad {tg.temp_size_in_bytes}, jax.grad {jg.temp_size_in_bytes}"
    )


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--equations", type=int, default=1_000_000)
    ap.add_argument("--layers", type=int, default=24)
    a = ap.parse_args()
    speed(a.equations)
    transformer_table(a.layers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
