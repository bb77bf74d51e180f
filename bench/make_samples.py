"""Regenerate samples/*.jaxpr with the installed JAX (the samples are JAX's own printouts)."""

from pathlib import Path

import jax
import jax.numpy as jnp

OUT = Path(__file__).resolve().parents[1] / "samples"


def mlp_loss(w1, b1, w2, b2, x, y):
    h = jnp.tanh(x @ w1 + b1)
    pred = h @ w2 + b2
    return jnp.mean((pred - y) ** 2)


def loss(w, x, y):
    """One example's loss: the README's examples run on it (per-example grads with vmap)."""
    return jnp.sum((jnp.tanh(x @ w) - y) ** 2)


def sin_cos(x, y):
    return jnp.sin(x) * jnp.cos(y) + x


def attention(q, k, v):
    s = q @ k.T / jnp.sqrt(q.shape[-1])
    p = jax.nn.softmax(s, axis=-1)
    return jnp.sum(p @ v)


def rnn(h0, xs, w):
    def step(h, x):
        h = jnp.tanh(h @ w + x)
        return h, h

    h, hs = jax.lax.scan(step, h0, xs)
    return jnp.sum(hs)


def piecewise(x, n):
    return jax.lax.cond(n > 0, lambda x: jnp.sin(x) * 2.0, lambda x: jnp.exp(x), x).sum()


f32 = jnp.float32
SAMPLES = {
    "mlp": (
        mlp_loss,
        [
            jnp.ones((4, 8), f32),
            jnp.ones(8, f32),
            jnp.ones((8, 2), f32),
            jnp.ones(2, f32),
            jnp.ones((5, 4), f32),
            jnp.ones((5, 2), f32),
        ],
    ),
    "loss": (loss, [jnp.ones((4, 2), f32), jnp.ones(4, f32), jnp.ones(2, f32)]),
    "sin_cos": (sin_cos, [jnp.ones(3, f32), jnp.ones(3, f32)]),
    "attention": (attention, [jnp.ones((4, 8), f32), jnp.ones((6, 8), f32), jnp.ones((6, 8), f32)]),
    "rnn": (rnn, [jnp.ones(4, f32), jnp.ones((5, 4), f32), jnp.ones((4, 4), f32)]),
    "cond": (piecewise, [jnp.ones(3, f32), jnp.int32(1)]),
}

if __name__ == "__main__":
    for name, (fn, args) in SAMPLES.items():
        (OUT / f"{name}.jaxpr").write_text(str(jax.make_jaxpr(fn)(*args)) + "\n")
        print("wrote", name)
