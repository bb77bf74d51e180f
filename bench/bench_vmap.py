"""vmap against JAX, in one run: equation counts and time, side by side.

For each model (an MLP, an attention block, a CNN, and their per-example gradients) the
per-example function is traced once; then
  tool: `jaxprtool vmap` in-process (parse, vmap, canonicalize, print) of that text;
  JAX:  `make_jaxpr(jax.vmap(f, in_axes))` on the batched arguments, plus printing.
Equation counts include nested jaxprs; `tool raw` is before the clean-up pipeline.
"""

from __future__ import annotations

import os
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_ad import attention, block_params, flat_fn, make_cnn, mlp  # noqa: E402

from jaxprtool.ad.batching import vmap_jaxpr  # noqa: E402
from jaxprtool.core import all_eqns  # noqa: E402
from jaxprtool.passes.registry import run_pipeline  # noqa: E402
from jaxprtool.text.parser import parse  # noqa: E402
from jaxprtool.text.printer import print_jaxpr  # noqa: E402

BATCH = 16


def cases():
    """(name, per-example function, params, per-example data): params are shared (None)."""
    key = jax.random.PRNGKey(0)
    mlp_params = [
        (jnp.ones((8, 16)) * 0.1, jnp.zeros(16)),
        (jnp.ones((16, 16)) * 0.1, jnp.zeros(16)),
        (jnp.ones((16, 4)) * 0.1, jnp.zeros(4)),
    ]
    yield "mlp", (lambda ps, x, y: mlp(ps, x, y)), mlp_params, (jnp.ones(8), jnp.ones(4))
    x = jax.random.normal(key, (6, 16))
    yield "attention", attention, block_params(key), (x,)
    ks = jax.random.split(key, 4)
    cnn_params = (
        0.3 * jax.random.normal(ks[0], (3, 3, 1, 4)),
        0.3 * jax.random.normal(ks[1], (3, 3, 4, 8)),
        0.1 * jax.random.normal(ks[2], (4 * 4 * 8, 10)),
    )
    cnn = make_cnn(lambda h: jnp.maximum(h, 0.0))
    yield "cnn", (lambda p, x: cnn(*p, x)), cnn_params, (jax.random.normal(ks[3], (1, 8, 8, 1)),)
    # a classifier's cross entropy: the take-along-axis gather of the labels' log-probabilities
    labels = jnp.array([1, 0, 3, 2, 9], jnp.int32)
    yield "xent", xent, (0.1 * jnp.ones((8, 10)),), (jnp.ones((5, 8)), labels)


def xent(params, x, labels):
    """Mean cross entropy of a linear classifier, as tests/zoo.py's `_xent`."""
    (w,) = params
    logp = jax.nn.log_softmax(jnp.tanh(x @ w))
    return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=-1))


def count(jaxpr) -> int:
    """Equations at every level of one of the tool's jaxprs (JAX's are counted through their
    printed text: `all_eqns` walks the tool's IR)."""
    return sum(1 for _ in all_eqns(jaxpr))


def best_of(fn, *args, n=3):
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        out = fn(*args)
        times.append(time.perf_counter() - t0)
    return min(times), out


def tool_vmap(text: str, in_axes):
    j = parse(text).jaxpr
    raw = vmap_jaxpr(j, in_axes, 0, BATCH)
    v = run_pipeline(raw, "canonicalize")
    return raw, v, print_jaxpr(v)


def jax_vmap(f, in_axes, args):
    closed = jax.make_jaxpr(jax.vmap(f, in_axes=tuple(in_axes)))(*args)
    return closed, str(closed)


def rows():
    for name, fn, params, data in cases():
        for what in ("forward", "per-example grad"):
            g = fn if what == "forward" else jax.grad(fn)
            f, leaves = flat_fn(lambda p, d, g=g: g(p, *d), (params, data))
            n_params = len(jax.tree_util.tree_leaves(params))
            n_data = len(leaves) - n_params
            in_axes = [None] * n_params + [0] * n_data
            batched = leaves[:n_params] + [
                jnp.broadcast_to(x, (BATCH, *x.shape))
                + (0.01 * i if jnp.issubdtype(x.dtype, jnp.floating) else 0)
                for i, x in enumerate(leaves[n_params:])
            ]
            text = str(jax.make_jaxpr(f)(*leaves))
            t_jax, (jv, _) = best_of(jax_vmap, f, in_axes, batched)
            t_tool, (raw, tv, _) = best_of(tool_vmap, text, in_axes)
            yield name, what, count(parse(str(jv)).jaxpr), count(raw), count(tv), t_jax, t_tool


def table():
    print(f"batch size {BATCH}; counts include nested jaxprs\n")
    print(
        f"{'program':10} {'':17} {'JAX eqns':>9} {'tool raw':>9} {'tool eqns':>9} "
        f"{'JAX s':>8} {'tool s':>8} {'ratio':>6}"
    )
    worst = 0
    for name, what, nj, nraw, nt, tj, tt in rows():
        worst = max(worst, nt - nj)
        print(f"{name:10} {what:17} {nj:9d} {nraw:9d} {nt:9d} {tj:8.3f} {tt:8.3f} {tt / tj:6.2f}")
    print("\ntool eqns <= JAX eqns everywhere" if worst <= 0 else f"\ntool has up to {worst} more")
    return 0


if __name__ == "__main__":
    np.set_printoptions(precision=3)
    sys.exit(table())
