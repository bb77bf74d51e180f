"""Reverse mode against JAX, in one run: time, residuals, equation counts, scaling.

Table 1: `jaxprtool grad` in-process (parse, grad, canonicalize, print) against
JAX's `make_jaxpr(jax.grad(f))` plus printing, on the same function.
Table 2: residuals kept by `linearize` (tool) and `jax.linearize` (JAX), and the
equation count of `grad` after canonicalize against JAX's grad jaxpr.
Table 3: time and peak memory of fmt/jvp/vjp/dce/grad on generated programs of
10k and 100k equations (each in a fresh process), to show linear growth.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from jaxprtool.ad.api import grad_jaxpr, linearize_jaxpr  # noqa: E402
from jaxprtool.core import all_eqns  # noqa: E402
from jaxprtool.passes.registry import run_pipeline  # noqa: E402
from jaxprtool.text.parser import parse  # noqa: E402
from jaxprtool.text.printer import print_jaxpr  # noqa: E402


def mlp(params, x, y):
    h = x
    for w, b in params[:-1]:
        h = jnp.tanh(h @ w + b)
    w, b = params[-1]
    return jnp.mean((h @ w + b - y) ** 2)


def layernorm(x):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) * jax.lax.rsqrt(v + 1e-5)


def attention_block(p, x):
    q, k, v = x @ p["wq"], x @ p["wk"], x @ p["wv"]
    s = jax.nn.softmax(q @ k.T / np.sqrt(q.shape[-1]), axis=-1)
    h = layernorm(x + s @ v @ p["wo"])
    return layernorm(h + jax.nn.gelu(h @ p["w1"]) @ p["w2"])


def attention(p, x):
    return jnp.sum(attention_block(p, x) ** 2)


def transformer(ps, x):
    for p in ps:
        x = attention_block(p, x)
    return jnp.sum(x**2)


def make_cnn(relu):
    def cnn(w1, w2, wd, x):
        dn = ("NHWC", "HWIO", "NHWC")
        h = relu(jax.lax.conv_general_dilated(x, w1, (1, 1), "SAME", dimension_numbers=dn))
        h = jax.lax.reduce_window(h, -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
        h = relu(jax.lax.conv_general_dilated(h, w2, (1, 1), "SAME", dimension_numbers=dn))
        return jnp.mean((h.reshape(h.shape[0], -1) @ wd) ** 2)

    return cnn


def block_params(key, d=16, f=32):
    ks = jax.random.split(key, 6)
    shapes = {"wq": (d, d), "wk": (d, d), "wv": (d, d), "wo": (d, d), "w1": (d, f), "w2": (f, d)}
    return {n: 0.1 * jax.random.normal(k, s) for k, (n, s) in zip(ks, shapes.items())}


def cases():
    key = jax.random.PRNGKey(0)
    mlp_params = [
        (jnp.ones((8, 16)) * 0.1, jnp.zeros(16)),
        (jnp.ones((16, 16)) * 0.1, jnp.zeros(16)),
        (jnp.ones((16, 4)) * 0.1, jnp.zeros(4)),
    ]
    x = jax.random.normal(key, (6, 16))
    yield "mlp", (lambda ps, x, y: mlp(ps, x, y)), (mlp_params, jnp.ones((5, 8)), jnp.ones((5, 4)))
    yield "attention", attention, (block_params(key), x)
    ks = jax.random.split(key, 4)
    cnn_args = (
        0.3 * jax.random.normal(ks[0], (3, 3, 1, 4)),
        0.3 * jax.random.normal(ks[1], (3, 3, 4, 8)),
        0.1 * jax.random.normal(ks[2], (4 * 4 * 8, 10)),
        jax.random.normal(ks[3], (2, 8, 8, 1)),
    )
    yield "cnn", make_cnn(lambda h: jnp.maximum(h, 0.0)), cnn_args
    # jax.nn.relu is a custom_jvp whose rule the text does not contain: the tool recognises
    # JAX's relu by name and body and uses JAX's rule (families/jax_library.py)
    yield "cnn-nn.relu", make_cnn(jax.nn.relu), cnn_args
    yield "transformer-64", transformer, ([block_params(k) for k in jax.random.split(key, 64)], x)


def the_transformer(layers: int):
    """The transformer of `layers` blocks as a flat function, and its arguments."""
    key = jax.random.PRNGKey(0)
    x = jax.random.normal(key, (6, 16))
    args = ([block_params(k) for k in jax.random.split(key, layers)], x)
    return flat_fn(transformer, args)


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


def tool_grad(text: str):
    j = parse(text).jaxpr
    g = grad_jaxpr(j, list(range(len(j.invars))))
    g = run_pipeline(g, "canonicalize")
    return g, print_jaxpr(g)


def jax_grad(fn, args):
    n = len(args)
    closed = jax.make_jaxpr(jax.grad(fn, argnums=tuple(range(n))))(*args)
    return closed, str(closed)


def flat_fn(fn, args):
    """f over flat array arguments, so both tools see the same signature."""
    leaves, tree = jax.tree_util.tree_flatten(args)
    return (lambda *flat: fn(*jax.tree_util.tree_unflatten(tree, flat))), leaves


def table_speed_and_counts():
    print(
        f"{'program':16} {'JAX eqns':>9} {'tool eqns':>9} {'JAX s':>8} {'tool s':>8} {'ratio':>6}   "
        f"{'JAX res':>7} {'tool res':>8} {'tool res MB':>11}"
    )
    for name, fn, args in cases():
        f, leaves = flat_fn(fn, args)
        text = str(jax.make_jaxpr(f)(*leaves))
        t_jax, (jg, _) = best_of(jax_grad, f, leaves)
        t_tool, (tg, _) = best_of(tool_grad, text)
        _, f_lin = jax.linearize(f, *leaves)
        jax_res = len(jax.tree_util.tree_leaves(f_lin))
        j = parse(text).jaxpr
        _, _, info = linearize_jaxpr(j, list(range(len(j.invars))))
        res_bytes = sum(
            np.prod([int(d) for d in r.type.shape]) * r.type.np_dtype.itemsize
            for r in info.residuals
        )
        print(
            f"{name:16} {count(parse(str(jg)).jaxpr):9d} {count(tg):9d} {t_jax:8.3f} {t_tool:8.3f} {t_tool / t_jax:6.2f}   "
            f"{jax_res:7d} {len(info.residuals):8d} {res_bytes / 1e6:11.3f}"
        )


CHAIN_PRIMS = ["sin", "cos", "tanh", "exp"]


def jax_name(i: int) -> str:
    """JAX's variable naming: the counter in base 26 with digits a..z (26 -> 'ba')."""
    s = ""
    while True:
        s = chr(97 + i % 26) + s
        i //= 26
        if i == 0:
            return s


def chain_text(n: int) -> str:
    """A generated program of n + 1 equations: an elementwise chain with some fan-in."""
    lines = ["{ lambda ; a:f32[8] b:f32[8]. let"]
    names = ["a", "b"]
    for i in range(n):
        v = jax_name(i + 2)
        if v in ("in", "let", "nan", "inf"):
            v = v + "z"
        if i % 3 == 0:
            lines.append(f"    {v}:f32[8] = mul {names[-1]} {names[-2]}")
        else:
            lines.append(f"    {v}:f32[8] = {CHAIN_PRIMS[i % 4]} {names[-1]}")
        names.append(v)
    lines.append(f"    zzzzz:f32[] = reduce_sum[axes=(0,) out_sharding=None] {names[-1]}")
    lines.append("  in (zzzzz,) }")
    return "\n".join(lines) + "\n"


SCALE_SCRIPT = r"""
import sys, time
from jaxprtool.text.parser import parse
from jaxprtool.text.printer import print_jaxpr
from jaxprtool.ad.api import jvp_jaxpr, vjp_jaxpr, grad_jaxpr
from jaxprtool.passes.registry import run_pipeline
text = open(sys.argv[1]).read(); cmd = sys.argv[2]
def hwm_kb():  # this process's peak resident memory (ru_maxrss would include the parent's, kept over exec)
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
before = hwm_kb()
t0 = time.perf_counter()
j = parse(text).jaxpr
out = {"fmt": lambda: j, "jvp": lambda: jvp_jaxpr(j, [0, 1]), "vjp": lambda: vjp_jaxpr(j, [0, 1]),
       "dce": lambda: run_pipeline(j, "dce"), "grad": lambda: grad_jaxpr(j, [0])}[cmd]()
s = print_jaxpr(out)
t = time.perf_counter() - t0
peak = hwm_kb()
print(f"{t:.2f} {peak / 1024:.0f} {(peak - before) / 1024:.0f} {len(out.eqns)}")
"""


def table_scaling(sizes=(10_000, 100_000)):
    import tempfile

    print(
        f"\n{'eqns':>8} {'command':8} {'time s':>8} {'peak MB':>8} {'growth MB':>9} {'out eqns':>9}"
    )
    for n in sizes:
        with tempfile.NamedTemporaryFile("w", suffix=".jaxpr", delete=False) as f:
            f.write(chain_text(n))
        for cmd in ("fmt", "jvp", "vjp", "dce", "grad"):
            r = subprocess.run(
                [sys.executable, "-c", SCALE_SCRIPT, f.name, cmd], capture_output=True, text=True
            )
            if r.returncode:
                print(f"{n:8d} {cmd:8} failed: {r.stderr.strip().splitlines()[-1:]}")
                continue
            t, mb, grow, k = r.stdout.split()
            print(f"{n:8d} {cmd:8} {float(t):8.2f} {float(mb):8.0f} {float(grow):9.0f} {int(k):9d}")
        os.unlink(f.name)


if __name__ == "__main__":
    sys.setrecursionlimit(10000)
    table_speed_and_counts()
    table_scaling()
