"""The programs whose printouts the older-JAX tests read: tanh, asin, acos and atanh (whose
derivatives JAX 0.12 writes with `one_minus_square`, which JAX 0.10 and 0.11.0 lack), a scan,
a while loop, a cond, a top_k (whose `is_stable` JAX 0.10 does not take) and stack/unstack
(which JAX 0.10.0 lacks).

`tests/test_installed_jax.py` traces them with the installed JAX; `tests/data/jax-0.11.0/`
holds what JAX 0.11.0 printed for them, written by

    python tests/oldjax_programs.py tests/data/jax-0.11.0     # (with JAX 0.11.0 installed)
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

#: the argument of every program: inside asin's, acos's and atanh's domains (scaled below)
X = np.array([-0.9, -0.3, 0.2, 0.8], np.float32)


def f_tanh(x):
    return jnp.sum(jnp.tanh(x) + jnp.arcsin(x * 0.5) + jnp.arccos(x * 0.3) + jnp.arctanh(x * 0.4))


def f_scan(x):
    def body(c, xi):
        return c * jnp.tanh(xi) + 1.0, jnp.arcsin(c * 0.1)

    c, ys = lax.scan(body, 0.5, x)
    return c + jnp.sum(ys)


def f_while(x):
    """A loop whose trip count the program does not fix: JAX differentiates it in forward
    mode only."""
    return lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, jnp.tanh(c[1]) * 1.1), (0, x))[
        1
    ].sum()


def f_cond(x):
    return lax.cond(
        x.sum() > 0, lambda y: jnp.tanh(y).sum(), lambda y: jnp.arcsin(y * 0.5).sum(), x
    )


def f_topk(x):
    v, _ = lax.top_k(x, 2)
    return jnp.sum(v * jnp.tanh(v)) + jnp.max(x)


def f_stack(x):
    """stack and unstack: primitives since JAX 0.10.1 (0.10.0 prints concatenate, slices)."""
    a, b = jnp.unstack(jnp.stack([x, jnp.tanh(x)], axis=1), axis=1)
    return jnp.sum(a * b)


#: name -> (function, reverse mode: whether JAX differentiates it in reverse)
PROGRAMS = {
    "tanh": (f_tanh, True),
    "scan": (f_scan, True),
    "while": (f_while, False),
    "cond": (f_cond, True),
    "topk": (f_topk, True),
    "stack": (f_stack, True),
}


def printout(name: str) -> str:
    """JAX's printout of program `name` (the installed JAX's), as a file holds it."""
    import jax

    return str(jax.make_jaxpr(PROGRAMS[name][0])(X)) + "\n"


if __name__ == "__main__":
    import sys
    from pathlib import Path

    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    for name in PROGRAMS:
        (out / f"{name}.jaxpr").write_text(printout(name))
