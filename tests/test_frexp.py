"""`jnp.frexp` and `jnp.ldexp` as JAX 0.12 prints them: the high-level primitives
`Frexp[x_aval=...]` and `Ldexp[x1_aval=... x2_aval=...]` (behind
`jax.scipy.sparse.linalg.cg`, whose AD tests/test_ad_linalg.py checks).

JAX is the oracle: each function is traced with `jax.make_jaxpr`, parsed, printed back
byte-identically, run by the tool's back end, and differentiated and batched by the tool
(jvp_jaxpr, grad_jaxpr, vjp_jaxpr, vmap_jaxpr) against jax.jvp / jax.grad / jax.vjp /
jax.vmap of the same function (a test's programs and JAX's in one compile: `together`), on zeros of both signs, negatives, infinities, and normal
values across many binades (JAX flushes subnormals; none is used).  JAX's mantissa tangent
is `ldexp(x_dot, -e)`, an exact power-of-two scaling: the tool's numbers must equal JAX's
bit for bit.
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

if "Frexp[" not in str(jax.make_jaxpr(jnp.frexp)(np.float32(1.0))):
    pytest.skip(
        "the installed JAX lowers jnp.frexp to ordinary primitives; only JAX 0.12 prints the "
        "high-level primitives Frexp and Ldexp",
        allow_module_level=True,
    )

import ml_dtypes  # noqa: E402
from jax_oracle import together  # noqa: E402

from jaxprtool.ad.api import grad_jaxpr, jvp_jaxpr, vjp_jaxpr  # noqa: E402
from jaxprtool.ad.batching import vmap_jaxpr  # noqa: E402
from jaxprtool.check import check, errors  # noqa: E402
from jaxprtool.text.parser import parse  # noqa: E402
from jaxprtool.text.printer import print_jaxpr  # noqa: E402
from jaxprtool.text.style import detect_style  # noqa: E402

#: zeros of both signs, negatives, infinities and normal values over many binades
X = np.array(
    [0.0, -0.0, 1.0, -1.0, 0.75, -3.0, 5.5, 1e-3, -2.5e-7, 6e4, -1.2e20, 3e37, 3e38, -np.inf],
    np.float32,
)
#: the tangents (and a second batch row): no two alike, zeros among them
T = np.linspace(-2.0, 3.0, X.size).astype(np.float32)
#: Ldexp's exponents: within range, overflowing to inf and underflowing to zero
N = np.array([0, 1, -1, 3, -7, 20, -20, 100, -100, 130, -130, 200, -200, 5], np.int32)


def _arith(x):
    """The mantissa and exponent in ordinary arithmetic."""
    m, e = jnp.frexp(x)
    return jnp.sin(m) * x + e


def _roundtrip(x):
    """frexp then ldexp: x again (both primitives, the mantissa scaled)."""
    m, e = jnp.frexp(x)
    return jnp.ldexp(m * 3.0, e - 1)


FUNCS = {
    "frexp": (jnp.frexp, (X,)),
    "arith": (_arith, (X,)),
    "ldexp": (jnp.ldexp, (X, N)),
    "roundtrip": (_roundtrip, (X,)),
}


def _parse(text):
    return parse(text, "<jax>").jaxpr


def _ir(name):
    f, args = FUNCS[name]
    return _parse(str(jax.make_jaxpr(f)(*args)) + "\n")


def _floats(values):
    """The floating-point values among `values` (JAX's float0 tangents of integers left out)."""
    return [np.asarray(v) for v in values if jnp.issubdtype(np.asarray(v).dtype, jnp.floating)]


def _equal(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


@pytest.mark.parametrize("name", FUNCS)
def test_prints_back_identically_and_checks(name):
    f, args = FUNCS[name]
    text = str(jax.make_jaxpr(f)(*args)) + "\n"
    assert "Frexp[" in text or "Ldexp[" in text
    j = _parse(text)
    assert print_jaxpr(j, detect_style(j)) + "\n" == text
    assert not errors(check(j))


@pytest.mark.slow  # (make test-full; test_jvp_like_jax keeps it: its program's first outputs
# are the function's, the same Frexp and Ldexp equations run, equal to jax.jvp's bit for bit)
@pytest.mark.parametrize("name", FUNCS)
def test_runs_like_jax(name):
    f, args = FUNCS[name]
    got, want = together((_ir(name), list(args)), (f, args))
    _equal(got, want if isinstance(want, tuple) else [want])


@pytest.mark.parametrize("name", FUNCS)
def test_jvp_like_jax(name):
    f, args = FUNCS[name]
    tangents = (T,) + tuple(np.zeros(a.shape, jax.dtypes.float0) for a in args[1:])
    got, (outs, touts) = together(
        (jvp_jaxpr(_ir(name), argnums=[0]), [*args, T]),
        (lambda *a: jax.jvp(f, a, tangents), args),  # (float0 tangents closed over)
    )
    outs = outs if isinstance(outs, tuple) else (outs,)
    touts = touts if isinstance(touts, tuple) else (touts,)
    _equal(got, [*outs, *_floats(touts)])


@pytest.mark.parametrize("name", ["arith", "ldexp", "roundtrip"])
def test_grad_and_vjp_like_jax(name):
    f, args = FUNCS[name]
    finite = np.where(np.isfinite(X), X, 2.0).astype(np.float32)  # sum() of infinities: nan
    args = (finite, *args[1:])
    j = _ir(name)
    total = _parse(str(jax.make_jaxpr(lambda *a: jnp.sum(f(*a)))(*args)))

    def jax_vjp(x, t):
        out, pullback = jax.vjp(lambda x: f(x, *args[1:]), x)
        return [out, *pullback(t)]

    (g,), want_g, got, want = together(
        (grad_jaxpr(total, 0), list(args)),
        (jax.grad(lambda *a: jnp.sum(f(*a))), args),
        (vjp_jaxpr(j, argnums=[0]), [*args, T]),
        (jax_vjp, (args[0], T)),
    )
    np.testing.assert_array_equal(g, want_g)
    _equal(got, want)


@pytest.mark.parametrize("in_axes", [0, 1])
def test_vmap_frexp_like_jax(in_axes):
    xs = np.stack([X, -T]) if in_axes == 0 else np.stack([X, -T], 1)
    for name in ("frexp", "arith"):
        f, _ = FUNCS[name]
        batched = vmap_jaxpr(_ir(name), in_axes=(in_axes,), axis_size=2)
        assert not errors(check(batched))
        text = print_jaxpr(batched, detect_style(batched))
        if name == "frexp":
            # JAX's Frexp.batch: the batched operand's type as x_aval
            shape = ",".join(map(str, xs.shape))
            assert f"Frexp[x_aval=f32[{shape}]]" in text, text
        got, want = together((_parse(text), [xs]), (jax.vmap(f, in_axes=in_axes), (xs,)))
        _equal(got, want if isinstance(want, tuple) else [want])


@pytest.mark.parametrize("in_axes", [(0, None), (None, 0), (0, 0), (0, 1)], ids=str)
def test_vmap_ldexp_like_jax(in_axes):
    x = np.stack([X, T]) if in_axes[0] == 0 else X
    n = {None: N, 0: np.stack([N, -N]), 1: np.stack([N, -N], 1)}[in_axes[1]]
    batched = vmap_jaxpr(_ir("ldexp"), in_axes=in_axes, axis_size=2)
    assert not errors(check(batched))
    (got,), want = together((batched, [x, n]), (jax.vmap(jnp.ldexp, in_axes=in_axes), (x, n)))
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64"])
def test_jvp_other_dtypes_like_jax(dtype):
    """Each float format's exponent range (float64 with x64 on): f16's 2**-16 tangent of 6e4
    underflows, and JAX's ldexp flushes it to zero, as the tool's must."""
    dt = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
    finite = X[np.abs(X) < 6e4] if dtype == "float16" else X
    x = np.concatenate([finite, [6e4]]).astype(dt)
    t = np.linspace(-2.0, 3.0, x.size).astype(dt)
    with jax.enable_x64(True) if dtype == "float64" else contextlib.nullcontext():
        j = _parse(str(jax.make_jaxpr(jnp.frexp)(x)) + "\n")
        got, ((m, e), (dm, _)) = together(
            (jvp_jaxpr(j), [x, t]), (lambda x, t: jax.jvp(jnp.frexp, (x,), (t,)), (x, t))
        )
        _equal(got, [m, e, dm])


def test_a_printed_aval_that_does_not_match_its_operand_is_diagnosed():
    text = str(jax.make_jaxpr(jnp.frexp)(X))
    bad = text.replace(f"x_aval=f32[{X.size}]", "x_aval=f32[2]")
    assert bad != text
    found = errors(check(_parse(bad)))
    assert found and "x_aval=f32[2]" in found[0].message
