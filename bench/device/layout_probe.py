"""What XLA:TPU stores for a saved value (issue 48): the tiled layouts and temp bytes.

Part 1: jax.jit(x * 2) for arrays whose minor dimensions are not multiples of the TPU's
(8, 128) tile: the entry layout XLA picks and its output bytes against the logical bytes.
Part 2: the scan twin's gradient (bench/device/models.py's layers at the TPU script's
sizes) under jax.checkpoint with one named value saved per layer: the transposed key
f32[8,16,64,512], the untransposed key, a residual-stream value of the same bytes, or
nothing.  For each: XLA's temp bytes, and every array of the optimized HLO of at least half
a stacked saved value's bytes, with its layout, logical and tiled bytes.

    python3 bench/device/layout_probe.py [--small]     (on the chip; the CPU has no tiles)
"""

import re
import sys
from math import prod

import jax
import jax.numpy as jnp
import numpy as np
from jax.ad_checkpoint import checkpoint_name

SMALL = "--small" in sys.argv
L, D, S, B, H = (2, 64, 16, 2, 4) if SMALL else (8, 1024, 512, 8, 16)
WIDTH = {"f32": 4, "s32": 4, "bf16": 2, "s8": 1, "pred": 1, "u32": 4}
ARRAY = re.compile(r"\b(f32|s32|bf16|s8|pred|u32)\[([\d,]*)\]\{([\d,]*):T\((\d+),(\d+)\)")


def tiled_bytes(dtype, dims, minor_to_major, tile):
    """Bytes of an array in a layout whose two most minor dimensions are padded to `tile`."""
    if not dims:
        return WIDTH[dtype]
    order = list(minor_to_major)
    padded = list(dims)
    padded[order[0]] = -(-dims[order[0]] // tile[1]) * tile[1]
    if len(order) > 1:
        padded[order[1]] = -(-dims[order[1]] // tile[0]) * tile[0]
    return prod(padded) * WIDTH[dtype]


def large_arrays(hlo: str, least: int):
    """Each distinct shape{layout} of the HLO of at least `least` bytes: (text, logical, tiled)."""
    seen = {}
    for m in ARRAY.finditer(hlo):
        dtype, dims, layout, t0, t1 = m.groups()
        dims = [int(d) for d in dims.split(",")] if dims else []
        order = [int(d) for d in layout.split(",")] if layout else []
        logical = prod(dims) * WIDTH[dtype]
        tiled = tiled_bytes(dtype, dims, order, (int(t0), int(t1)))
        if logical >= least:
            seen[m.group(0)] = (logical, tiled)
    return seen


def part1():
    for shape in [(8, 16, 512, 64), (8, 16, 64, 512), (5, 1024), (3, 7)]:
        for dt in (jnp.float32, jnp.bfloat16):
            c = jax.jit(lambda x: x * 2).lower(jax.ShapeDtypeStruct(shape, dt)).compile()
            logical = prod(shape) * jnp.dtype(dt).itemsize
            out = c.memory_analysis().output_size_in_bytes
            lay = re.search(r"->\(?(\w+\[[\d,]*\]\{[^}]*\})", c.as_text()).group(1)
            print(
                f"jit x*2 {shape} {jnp.dtype(dt).name}: logical {logical} out {out} ({out / logical:.3f}x) {lay}"
            )


def layer(p, x):
    """models.layer with the transposed key, the key and the attention's output named."""
    wq, wk, wv, wo, w1, w2 = p

    def ln(t):
        m = t.mean(-1, keepdims=True)
        return (t - m) * jax.lax.rsqrt(((t - m) ** 2).mean(-1, keepdims=True) + 1e-5)

    def split(t):
        return t.reshape(B, S, H, D // H).transpose(0, 2, 1, 3)

    h = ln(x)
    q, k, v = split(h @ wq), checkpoint_name(split(h @ wk), "k"), split(h @ wv)
    kt = checkpoint_name(k.transpose(0, 1, 3, 2), "kt")
    a = jax.nn.softmax(q @ kt / np.sqrt(D // H).astype(np.float32), axis=-1)
    x = checkpoint_name(x + (a @ v).transpose(0, 2, 1, 3).reshape(B, S, D) @ wo, "resid")
    return x + jax.nn.gelu(ln(x) @ w1) @ w2


def part2():
    shapes = [(L, D, D)] * 4 + [(L, D, 4 * D), (L, 4 * D, D)]
    args = [jax.ShapeDtypeStruct((B, S, D), jnp.float32)] + [
        jax.ShapeDtypeStruct(s, jnp.float32) for s in shapes
    ]
    for names in [(), ("kt",), ("k",), ("resid",), ("kt", "resid")]:
        policy = jax.checkpoint_policies.save_only_these_names(*names)
        body = jax.checkpoint(lambda x, p: (layer(p, x), None), policy=policy)

        def loss(x, *ws, body=body):
            return jnp.mean(jax.lax.scan(body, x, ws)[0] ** 2)

        c = jax.jit(jax.grad(loss, argnums=tuple(range(1, 7)))).lower(*args).compile()
        temp = c.memory_analysis().temp_size_in_bytes
        print(f"scan twin grad saving {names or 'nothing'}: XLA temp {temp} B")
        for text, (logical, tiled) in sorted(large_arrays(c.as_text(), L * B * S * D * 2).items()):
            print(
                f"    {'PADDED' if tiled > logical else 'array'}: {text}: logical {logical} B, tiled {tiled} B ({tiled / logical:.2f}x)"
            )


if __name__ == "__main__":
    print("jax", jax.__version__, jax.devices())
    part1()
    part2()
