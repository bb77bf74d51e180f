"""`run` vs jax.jit: compiled execution time of the same program on the same inputs.

    .venv/bin/python bench/bench_run.py [--repeat 50] [--device cpu]

For an MLP and an attention block: JAX traces the function, its printed jaxpr is
parsed by jaxprtool and compiled by the back end (the path `jaxprtool run` takes,
in-process); both executables run on the same inputs; the table shows the median
(and min) execution times and the ratio run/jax (1.00 = same speed).
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


def programs():
    import jax
    import jax.numpy as jnp

    def mlp(x, w1, b1, w2, b2, w3, b3):
        h = jax.nn.relu(x @ w1 + b1)
        h = jax.nn.gelu(h @ w2 + b2)
        return jax.nn.log_softmax(h @ w3 + b3)

    def attention(x, wq, wk, wv, wo):
        b, s, d = x.shape
        nh = 8
        q = (x @ wq).reshape(b, s, nh, d // nh).transpose(0, 2, 1, 3)
        k = (x @ wk).reshape(b, s, nh, d // nh).transpose(0, 2, 1, 3)
        v = (x @ wv).reshape(b, s, nh, d // nh).transpose(0, 2, 1, 3)
        a = jax.nn.softmax(q @ k.transpose(0, 1, 3, 2) / jnp.sqrt(d // nh), axis=-1)
        o = (a @ v).transpose(0, 2, 1, 3).reshape(b, s, d)
        return jax.nn.layer_norm(x + o @ wo) if hasattr(jax.nn, "layer_norm") else x + o @ wo

    rng = np.random.default_rng(0)

    def r(*shape):
        return (rng.standard_normal(shape) * 0.1).astype(np.float32)

    yield (
        "mlp 256x512-1024-1024-10",
        mlp,
        [r(256, 512), r(512, 1024), r(1024), r(1024, 1024), r(1024), r(1024, 10), r(10)],
    )
    yield (
        "attention b4 s256 d256 h8",
        attention,
        [r(4, 256, 256), r(256, 256), r(256, 256), r(256, 256), r(256, 256)],
    )


def timeit_pair(fa, fb, args, repeat):
    """Median and min time of two executables, run alternately so that load drift hits both."""
    import jax

    jax.block_until_ready(fa(*args))  # warm up
    jax.block_until_ready(fb(*args))
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(repeat):
        for fn, ts in ((fa, times[0]), (fb, times[1])):
            t0 = time.perf_counter()
            jax.block_until_ready(fn(*args))
            ts.append(time.perf_counter() - t0)
    return [(float(np.median(ts)), float(min(ts))) for ts in times]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=50)
    ap.add_argument("--device", default="cpu")
    opts = ap.parse_args()

    import jax

    from jaxprtool import backend
    from jaxprtool.text.parser import parse

    dev = backend.get_device(opts.device)
    rows = []
    for name, f, args in programs():
        text = str(jax.make_jaxpr(f)(*args)) + "\n"
        ir = parse(text, name).jaxpr
        xs = [jax.device_put(a, dev) for a in args]
        t0 = time.perf_counter()
        ours = jax.jit(backend.as_jax_function(ir)).lower(*xs).compile()
        c_ours = time.perf_counter() - t0
        t0 = time.perf_counter()
        ref = jax.jit(f).lower(*xs).compile()
        c_ref = time.perf_counter() - t0
        out_ours = ours(*xs)
        out_ref = ref(*xs)
        out_ref = out_ref if isinstance(out_ref, (list, tuple)) else [out_ref]
        for a, b in zip(out_ours, out_ref):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-3, atol=2e-3)
        (m_ours, lo_ours), (m_ref, lo_ref) = timeit_pair(ours, ref, xs, opts.repeat)
        rows.append((name, len(ir.eqns), c_ours, c_ref, m_ours, lo_ours, m_ref, lo_ref))

    print(f"device: {dev}  repeat: {opts.repeat}")
    head = (
        f"{'program':28} {'eqns':>5} {'compile run':>12} {'compile jax':>12} "
        f"{'run median':>11} {'run min':>9} {'jax median':>11} {'jax min':>9} {'ratio':>6}"
    )
    print(head)
    print("-" * len(head))
    for name, n, cr, cj, mr, lr, mj, lj in rows:
        print(
            f"{name:28} {n:5d} {cr * 1e3:10.1f}ms {cj * 1e3:10.1f}ms "
            f"{mr * 1e3:9.3f}ms {lr * 1e3:7.3f}ms {mj * 1e3:9.3f}ms {lj * 1e3:7.3f}ms {mr / mj:6.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
