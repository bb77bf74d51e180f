"""The programs the accelerator checks run (issue 38), written with jax.numpy and lax only (no
Flax: the TPU machine has JAX alone), each with its inputs at a given size.

`cases(size)` yields (name, f, args, argnums, batched) where f(*args) returns a scalar loss,
`argnums` are the inputs to differentiate and `batched` is (per-example function, in_axes,
its batched args) for the vmap check, or None.  Sizes: "small" (a CPU smoke run) and "full"
(the issue's: a transformer of 8 layers, width 1024, sequence 512, batch 8, f32).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

SIZES = {
    "small": dict(d=64, s=16, b=2, heads=4, layers=2, mlp_batch=32, img=8, rnn_t=8),
    "full": dict(d=1024, s=512, b=8, heads=16, layers=8, mlp_batch=1024, img=32, rnn_t=64),
}


def _rand(seed: int, *shape, scale: float = 1.0, dtype=np.float32):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(dtype)


def layernorm(x):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) * jax.lax.rsqrt(v + 1e-5)


def attention(x, wq, wk, wv, wo, heads):
    b, s, d = x.shape
    dh = d // heads

    def split(t):
        return t.reshape(b, s, heads, dh).transpose(0, 2, 1, 3)

    q, k, v = split(x @ wq), split(x @ wk), split(x @ wv)
    a = jax.nn.softmax(q @ k.transpose(0, 1, 3, 2) / np.sqrt(dh).astype(x.dtype), axis=-1)
    return (a @ v).transpose(0, 2, 1, 3).reshape(b, s, d) @ wo


def layer(p, x, heads):
    """A pre-norm transformer layer: attention and a 4x MLP, each on a residual branch."""
    wq, wk, wv, wo, w1, w2 = p
    x = x + attention(layernorm(x), wq, wk, wv, wo, heads)
    return x + jax.nn.gelu(layernorm(x) @ w1) @ w2


def layer_params(seed: int, d: int):
    s = 1 / np.sqrt(d)
    shapes = [(d, d)] * 4 + [(d, 4 * d), (4 * d, d)]
    return [_rand(seed + i, *sh, scale=s) for i, sh in enumerate(shapes)]


def transformer(heads, wrap=None):
    """loss(x, *weights): the layers one after the other (each under `wrap`, e.g.
    jax.checkpoint)."""
    f = (lambda p, x: layer(p, x, heads)) if wrap is None else wrap(lambda p, x: layer(p, x, heads))

    def loss(x, *ws):
        for i in range(0, len(ws), 6):
            x = f(ws[i : i + 6], x)
        return jnp.mean(x**2)

    return loss


def transformer_scan(heads, wrap=None):
    """loss(x, *stacked weights): the layers as one scan over their stacked weights."""

    def body(x, p):
        return layer(p, x, heads), None

    body = body if wrap is None else wrap(body)

    def loss(x, *ws):
        x, _ = jax.lax.scan(body, x, ws)
        return jnp.mean(x**2)

    return loss


def transformer_args(z: dict, stacked: bool = False):
    ws = [w for i in range(z["layers"]) for w in layer_params(10 * i, z["d"])]
    x = _rand(1, z["b"], z["s"], z["d"])
    if stacked:
        ws = [np.stack(ws[k::6]) for k in range(6)]
    return [x, *ws]


def mlp(x, w1, b1, w2, b2, w3, b3):
    h = jnp.tanh(x @ w1 + b1)
    h = jax.nn.gelu(h @ w2 + b2)
    return jnp.mean(jax.nn.log_softmax(h @ w3 + b3))


def mlp_example(x, w1, b1, w2, b2, w3, b3):
    """One example's loss (x: one row), for the vmap check."""
    return mlp(x[None], w1, b1, w2, b2, w3, b3)


def cnn(x, w1, w2, wd):
    dn = ("NHWC", "HWIO", "NHWC")
    h = jnp.tanh(jax.lax.conv_general_dilated(x, w1, (1, 1), "SAME", dimension_numbers=dn))
    h = jax.lax.reduce_window(h, -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
    h = jnp.tanh(jax.lax.conv_general_dilated(h, w2, (1, 1), "SAME", dimension_numbers=dn))
    return jnp.mean((h.reshape(h.shape[0], -1) @ wd) ** 2)


def rnn(xs, h0, wx, wh):
    def step(h, x):
        h = jnp.tanh(x @ wx + h @ wh)
        return h, jnp.sum(h)

    h, ys = jax.lax.scan(step, h0, xs)
    return jnp.mean(h**2) + jnp.mean(ys)


def fori(x, w):
    """A fori_loop (a while loop: forward mode only in JAX)."""
    return jnp.sum(jax.lax.fori_loop(0, 5, lambda i, h: jnp.sin(h @ w), x) ** 2)


def attention_bf16(x, wq, wk, wv, wo, heads):
    return jnp.mean(attention(x, wq, wk, wv, wo, heads).astype(jnp.float32) ** 2)


def cases(size: str):
    z = SIZES[size]
    d, b, n = z["d"], z["mlp_batch"], z["heads"]
    mlp_args = [
        _rand(1, b, d, scale=1.0),
        _rand(2, d, 2 * d, scale=1 / np.sqrt(d)),
        _rand(3, 2 * d, scale=0.1),
        _rand(4, 2 * d, d, scale=1 / np.sqrt(2 * d)),
        _rand(5, d, scale=0.1),
        _rand(6, d, 10, scale=1 / np.sqrt(d)),
        _rand(7, 10, scale=0.1),
    ]
    yield "mlp", mlp, mlp_args, tuple(range(1, 7)), (mlp_example, (0,) + (None,) * 6)
    ta = transformer_args(z)
    name = f"transformer L{z['layers']} d{d} s{z['s']} b{z['b']}"
    yield name, transformer(n), ta, tuple(range(1, len(ta))), None
    tsa = transformer_args(z, stacked=True)
    yield "transformer scan twin", transformer_scan(n), tsa, tuple(range(1, 7)), None
    c = 16 if size == "full" else 4
    cnn_args = [
        _rand(11, 64 if size == "full" else 4, z["img"], z["img"], 3),
        _rand(12, 3, 3, 3, c, scale=0.3),
        _rand(13, 3, 3, c, 2 * c, scale=0.3 / np.sqrt(c)),
        _rand(14, (z["img"] // 2) ** 2 * 2 * c, 10, scale=0.01),
    ]
    yield "cnn", cnn, cnn_args, (1, 2, 3), None
    rnn_args = [
        _rand(21, z["rnn_t"], 16, d // 4),
        _rand(22, 16, d // 4, scale=0.1),
        _rand(23, d // 4, d // 4, scale=1 / np.sqrt(d)),
        _rand(24, d // 4, d // 4, scale=1 / np.sqrt(d)),
    ]
    yield "scan rnn", rnn, rnn_args, (2, 3), None
    yield "fori_loop", fori, [_rand(31, 8, d // 4), _rand(32, d // 4, d // 4, scale=0.1)], (), None
    bf = [a.astype(jnp.bfloat16) for a in transformer_args(z)[:5]]
    yield "attention bf16", lambda *a: attention_bf16(*a, n), bf, (1, 2, 3, 4), None
