"""Sharded programs: `run` vs jax.jit on the same device mesh, compiled execution time.

    .venv/bin/python bench/bench_sharded.py [--repeat 30] [--devices 8]

For a data-parallel MLP training step (shard_map + psum, its gradient taken by jaxprtool),
a tensor-parallel MLP block (all_gather / psum_scatter) and a jit with input/output
shardings (XLA's SPMD partitioner): JAX traces the function, jaxprtool parses the printout
and runs it the way `jaxprtool run` does (inputs placed on the mesh, shard_map through
jax.shard_map); both executables run on the same placed inputs; the table shows median and
min execution times and the ratio run/jax (1.00 = same speed).  On CPU the mesh is made of
host devices (`--devices`, default 8).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("JAX_PLATFORMS", "cpu")


def programs(n_dev: int):
    import jax
    import jax.numpy as jnp
    from jax import lax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    auto = (jax.sharding.AxisType.Auto,)
    mesh = jax.make_mesh((n_dev,), ("x",), axis_types=auto)
    rng = np.random.default_rng(0)

    def r(*shape):
        return (rng.standard_normal(shape) * 0.1).astype(np.float32)

    def dp_loss(w1, b1, w2, x, y):
        def local(w1, b1, w2, x, y):
            h = jnp.tanh(x @ w1 + b1)
            return lax.psum(jnp.mean((h @ w2 - y) ** 2), "x")

        return jax.shard_map(
            local, mesh=mesh, in_specs=(P(), P(), P(), P("x"), P("x")), out_specs=P()
        )(w1, b1, w2, x, y)

    dp_step = jax.grad(dp_loss, argnums=(0, 1, 2))
    batch = 64 * n_dev
    yield (
        f"dp mlp grad b{batch} 512-512-64",
        dp_loss,
        "grad",
        dp_step,
        [r(512, 512), r(512), r(512, 64), r(batch, 512), r(batch, 64)],
    )

    def tp_block(x, w1, w2):
        def local(x, w1, w2):
            h = jax.nn.gelu(lax.all_gather(x, "x", axis=1, tiled=True) @ w1)
            return lax.psum_scatter(h @ w2, "x", scatter_dimension=0, tiled=True)

        return jax.shard_map(
            local,
            mesh=mesh,
            in_specs=(P(None, "x"), P(None, "x"), P("x", None)),
            out_specs=P("x", None),
        )(x, w1, w2)

    d = 128 * n_dev
    yield (f"tp block b256 d{d}", tp_block, "run", tp_block, [r(256, d), r(d, d), r(d, d)])

    sh = NamedSharding(mesh, P("x", None))

    def spmd(x, w):
        y = lax.with_sharding_constraint(jnp.tanh(x @ w), sh)
        return jnp.sum(y * y, axis=0)

    spmd_jit = jax.jit(spmd, in_shardings=(sh, NamedSharding(mesh, P())))
    yield ("jit in_shardings b1024 d512", spmd_jit, "run", spmd_jit, [r(1024, 512), r(512, 512)])


def timeit_pair(fa, fb, args_a, args_b, repeat):
    import jax

    jax.block_until_ready(fa(*args_a))
    jax.block_until_ready(fb(*args_b))
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(repeat):
        for fn, xs, ts in ((fa, args_a, times[0]), (fb, args_b, times[1])):
            t0 = time.perf_counter()
            jax.block_until_ready(fn(*xs))
            ts.append(time.perf_counter() - t0)
    return [(float(np.median(ts)), float(min(ts))) for ts in times]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--devices", type=int, default=8)
    opts = ap.parse_args()

    import jax

    jax.config.update("jax_num_cpu_devices", opts.devices)
    from jaxprtool import backend
    from jaxprtool.ad.api import grad_jaxpr
    from jaxprtool.backend import sharding
    from jaxprtool.text.parser import parse

    rows = []
    for name, f, mode, ref_fn, args in programs(opts.devices):
        ir = parse(str(jax.make_jaxpr(f)(*args)) + "\n", name).jaxpr
        if mode == "grad":
            ir = grad_jaxpr(ir, argnums=(0, 1, 2))
        with sharding.run_scope(ir):
            xs = sharding.placed_inputs(ir, args)
            t0 = time.perf_counter()
            ours = jax.jit(backend.as_jax_function(ir)).lower(*xs).compile()
            c_ours = time.perf_counter() - t0
        t0 = time.perf_counter()
        ref = jax.jit(ref_fn).lower(*xs).compile()
        c_ref = time.perf_counter() - t0
        out_ref = ref(*xs)
        out_ref = out_ref if isinstance(out_ref, (list, tuple)) else [out_ref]
        for a, b in zip(ours(*xs), out_ref):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-3, atol=2e-3)
        (m_ours, lo_ours), (m_ref, lo_ref) = timeit_pair(ours, ref, xs, xs, opts.repeat)
        rows.append((name, len(ir.eqns), c_ours, c_ref, m_ours, lo_ours, m_ref, lo_ref))

    devs = jax.devices()
    print(f"mesh: {len(devs)} {devs[0].platform} devices  repeat: {opts.repeat}")
    head = (
        f"{'program':30} {'eqns':>5} {'compile run':>12} {'compile jax':>12} "
        f"{'run median':>11} {'run min':>9} {'jax median':>11} {'jax min':>9} {'ratio':>6}"
    )
    print(head)
    print("-" * len(head))
    for name, n, cr, cj, mr, lr, mj, lj in rows:
        print(
            f"{name:30} {n:5d} {cr * 1e3:10.1f}ms {cj * 1e3:10.1f}ms "
            f"{mr * 1e3:9.3f}ms {lr * 1e3:7.3f}ms {mj * 1e3:9.3f}ms {lj * 1e3:7.3f}ms {mr / mj:6.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
