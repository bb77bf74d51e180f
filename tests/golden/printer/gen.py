"""Regenerate the printer golden files from JAX (the oracle): `python tests/golden/printer/gen.py`.

Each case is a JAX program chosen for a layout edge case; the file
`CASE.wWIDTH.jaxpr` holds `jaxpr.pretty_print(width=WIDTH)` + a newline, and
tests/test_printer.py checks that `jaxprtool fmt --width WIDTH` reproduces it
byte for byte.  The files were written by jax 0.12.
"""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

HERE = Path(__file__).resolve().parent


def many_args(*xs):  # fill-mode binder lists, wrapped operand lists
    return tuple(x * 2.0 for x in xs[::-1])


def zero_operand_and_literals(x):  # `iota[...] ` with a trailing space, literal outvars
    i = lax.iota(jnp.int32, 4)
    return x, 3.0, True, i, x


def unicode_name(x):  # widths are UTF-8 bytes: `name=fünction_名前` counts 17
    def f(a):
        return jnp.sin(a) + jnp.cos(a) * 2.0

    f.__name__ = "fünction_名前_with_a_rather_long_suffix"
    return jax.jit(f)(x)


def shared_suffixes(x, y):  # remainder, remainder1 ...; shared jaxprs used before definition
    a = jnp.remainder(x, 3.0)
    b = jnp.remainder(x.astype(jnp.int32), 3)
    c = jnp.remainder(y, 2.0)
    return a + c, b, jnp.remainder(x, 5.0)


def suggestion_with_literals(x):  # literal operands do not donate names; repeated operands
    @jax.jit
    def g(a, b, c):
        return a * b + c, a - c, b

    u, v, w = g(x, 2.0, x)
    return u + w, v


def deep_nesting(xs):  # scan > cond > jit > while, at small widths
    def body(c, x):
        def t(v):
            return jax.jit(
                lambda w: lax.while_loop(
                    lambda s: s[0] < 3, lambda s: (s[0] + 1, s[1] * w), (0, v)
                )[1]
            )(v)

        c = lax.cond(x > 0, t, lambda v: v - 1.0, c)
        return c, c * x

    return lax.scan(body, 1.0, xs)


def long_params(x, idx):  # unbreakable long values, params on their own lines
    return x[idx, 1:], x.at[idx].add(1.0)


def switch_branches(i, x):
    return lax.switch(i, [lambda a: a + 1.0, lambda a: a * 2.0, lambda a: jnp.sin(a)], x)


def empty_body(x, y):  # `let` with no equations, broken form (a line of 4 spaces)
    return x, y, x, y, x, y, x, y, x, y, x, y


CASES = {
    "many_args": (many_args, tuple(jnp.ones((2, 3)) for _ in range(24)), (80, 40)),
    "zero_operand_and_literals": (zero_operand_and_literals, (jnp.ones(3),), (80, 20)),
    "unicode_name": (unicode_name, (jnp.ones(3),), (80, 60, 49)),
    "shared_suffixes": (shared_suffixes, (jnp.ones(3), jnp.ones(3)), (80,)),
    "suggestion_with_literals": (suggestion_with_literals, (jnp.ones(3),), (80, 30)),
    "deep_nesting": (deep_nesting, (jnp.ones(5),), (80, 40, 20)),
    "long_params": (long_params, (jnp.ones((4, 3)), jnp.array([0, 2])), (80, 200)),
    "switch_branches": (switch_branches, (1, jnp.ones(3)), (80, 120, 30)),
    "empty_body": (empty_body, (jnp.ones((100, 100)), jnp.ones(3)), (80, 12)),
}


def main() -> None:
    for name, (fn, args, widths) in CASES.items():
        j = jax.make_jaxpr(fn)(*args)
        for w in widths:
            (HERE / f"{name}.w{w}.jaxpr").write_text(
                j.pretty_print(width=w, use_color=False) + "\n"
            )
    print(f"jax {jax.__version__}: wrote {sum(len(c[2]) for c in CASES.values())} files")


if __name__ == "__main__":
    main()
