"""AD of the rules real programs need outside linear algebra: fft (all four types), the special
functions JAX differentiates, polynomial (behind jnp.sinc), and primitives with integer
results (SearchSorted, Nonzero) that need no JVP rule.

JAX is the oracle: each function is traced with `jax.make_jaxpr`, parsed, differentiated by the
tool (jvp_jaxpr, vjp_jaxpr, grad_jaxpr, linearize_jaxpr + transpose_jaxpr, vmap_jaxpr), run
with the tool's back end and compared with jax.jvp / jax.vjp / jax.grad /
jax.linear_transpose / jax.vmap on the same inputs, at the dtypes JAX's tests/fft_test.py and
tests/lax_autodiff_test.py use (float32/complex64 and, in 64-bit mode, float64/complex128),
first and second order.  The linear program of every fft passes the dot-product test in JAX's
convention for complex cotangents: Re <w, L v> = Re <L^T w, v> (bilinear, no conjugation).
"""

from __future__ import annotations

import contextlib
import zlib

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402
from jax_oracle import ir, together  # noqa: E402

from jaxprtool import backend  # noqa: E402
from jaxprtool.ad.api import grad_jaxpr, jvp_jaxpr, vjp_jaxpr  # noqa: E402
from jaxprtool.ad.batching import vmap_jaxpr  # noqa: E402
from jaxprtool.ad.linearize import linearize_jaxpr  # noqa: E402
from jaxprtool.ad.transpose import transpose_jaxpr  # noqa: E402
from jaxprtool.core import JaxprError, is_inexact  # noqa: E402
from jaxprtool.record import prim  # noqa: E402

TOL = {32: 2e-3, 64: 1e-8}


def _x64(bits):
    return jax.enable_x64(True) if bits == 64 else contextlib.nullcontext()


def _rand(shape, kind, bits, seed, lo=-1.0, hi=1.0):
    r = np.random.default_rng(seed)
    real = np.float32 if bits == 32 else np.float64
    if kind == "c":
        cplx = np.complex64 if bits == 32 else np.complex128
        return (r.uniform(lo, hi, shape) + 1j * r.uniform(lo, hi, shape)).astype(cplx)
    return r.uniform(lo, hi, shape).astype(real)


def _like(x, seed):
    x = np.asarray(x)
    kind = "c" if np.iscomplexobj(x) else "r"
    return _rand(x.shape, kind, x.dtype.itemsize * 8 // (2 if kind == "c" else 1), seed)


def _close(a, b, bits, what=""):
    tol = TOL[bits]
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol, err_msg=what)


def _seed(name):
    return zlib.crc32(name.encode()) % 1000


# ---------------------------------------------------------------- fft

#: (id, function, input kind (r: real, c: complex), input shape): fft_test's shapes, even and
#: odd lengths, 1-D and n-D, every fft_type
FFT_CASES = [
    ("fft", jnp.fft.fft, "c", (10,)),
    ("ifft", jnp.fft.ifft, "c", (9,)),
    ("rfft_even", jnp.fft.rfft, "r", (10,)),
    ("rfft_odd", jnp.fft.rfft, "r", (9,)),
    ("irfft_even", lambda a: jnp.fft.irfft(a, n=10), "c", (6,)),
    ("irfft_odd", lambda a: jnp.fft.irfft(a, n=9), "c", (5,)),
    ("fftn", lambda a: jnp.fft.fftn(a, axes=(1, 2)), "c", (2, 3, 4)),
    ("ifftn", jnp.fft.ifftn, "c", (2, 3, 4)),
    ("rfftn", lambda a: jnp.fft.rfftn(a, axes=(1, 2)), "r", (2, 3, 4)),
    ("irfftn", lambda a: jnp.fft.irfftn(a, s=(3, 4), axes=(1, 2)), "c", (2, 3, 3)),
]
BITS = [32, 64]


def _fft_params():
    return [
        pytest.param(c, b, id=f"{c[0]}-{'f32' if b == 32 else 'f64'}")
        for c in FFT_CASES
        for b in BITS
    ]


@pytest.mark.parametrize("case,bits", _fft_params())
def test_fft_jvp_and_vjp_match_jax(case, bits):
    name, f, kind, shape = case
    with _x64(bits):
        x = _rand(shape, kind, bits, _seed(name))
        j = ir(f, x)
        assert any(e.prim == "fft" for e in j.eqns) or "fft" in str(j)
        t = _like(x, 1)
        o = jax.eval_shape(f, x)
        w = _like(np.zeros(o.shape, o.dtype), 2)
        # the oracle and the tool's two programs in one compilation
        (out, tout, (ct,)), got, got_vjp = together(
            (lambda x, t, w: (*jax.jvp(f, (x,), (t,)), jax.vjp(f, x)[1](w)), (x, t, w)),
            (jvp_jaxpr(j), [x, t]),
            (vjp_jaxpr(j), [x, w]),
        )
        _close(got[0], out, bits, "primal")
        _close(got[1], tout, bits, "tangent")
        _close(got_vjp[1], ct, bits, "cotangent")


@pytest.mark.parametrize("case,bits", _fft_params())
def test_fft_linearize_transpose(case, bits):
    """linearize | transpose against jax.linear_transpose, and the dot-product test."""
    name, f, kind, shape = case
    with _x64(bits):
        x = _rand(shape, kind, bits, _seed(name))
        j = ir(f, x)
        _, linear, info = linearize_jaxpr(j)
        assert not info.residuals  # a linear function needs no residual
        lt = transpose_jaxpr(linear, [True])
        v = _like(x, 3)
        o = jax.eval_shape(f, x)
        w = _like(np.zeros(o.shape, o.dtype), 4)
        (f_v, (want,)), (lv,), (ltw,) = together(
            (lambda v, w: (f(v), jax.linear_transpose(f, x)(w)), (v, w)),
            (linear, [v]),
            (lt, [w]),
        )
        _close(lv, f_v, bits, "L v")
        _close(ltw, want, bits, "L^T w")
        lhs = np.real(np.sum(np.asarray(w, np.complex128) * np.asarray(lv, np.complex128)))
        rhs = np.real(np.sum(np.asarray(ltw, np.complex128) * np.asarray(v, np.complex128)))
        scale = np.sum(np.abs(np.asarray(w) * np.asarray(lv))) + 1e-6
        assert abs(lhs - rhs) <= TOL[bits] * scale, (lhs, rhs)


def _loss(f):
    """A real scalar of the transform's result, nonlinear so that second order is not zero."""

    def loss(x):
        y = f(x)
        if jnp.iscomplexobj(y):
            return jnp.sum(jnp.sin(y.real) * jnp.cos(y.imag))
        return jnp.sum(jnp.sin(y))

    return loss


@pytest.mark.parametrize("case", FFT_CASES, ids=[c[0] for c in FFT_CASES])
def test_fft_grad_and_second_order(case):
    """grad against jax.grad and the JVP of the tool's grad program against jax.jvp of jax.grad
    (fft_test's check_grads(order=2), in 64-bit mode as there)."""
    name, f, kind, shape = case
    loss = _loss(f)
    with _x64(64):
        x = _rand(shape, kind, 64, _seed(name))
        j = ir(loss, x)
        g = grad_jaxpr(j)
        t = _like(x, 5)
        (want_g, want), (got,), got2 = together(
            (lambda x, t: jax.jvp(jax.grad(loss), (x,), (t,)), (x, t)),
            (g, [x]),
            (jvp_jaxpr(g), [x, t]),
        )
        _close(got, want_g, 64, "grad")
        _close(got2[1], want, 64, "second order")


@pytest.mark.parametrize("case", FFT_CASES, ids=[c[0] for c in FFT_CASES])
def test_fft_vmap_matches_jax(case):
    name, f, kind, shape = case
    x = _rand(shape, kind, 32, _seed(name))
    j = ir(f, x)
    xs = np.stack([x, _like(x, 6), _like(x, 7)], axis=len(shape) - 1)  # batch axis inside
    b = vmap_jaxpr(j, in_axes=len(shape) - 1, out_axes=0, axis_size=3)
    ((got,), want) = together((b, [xs]), (jax.vmap(f, in_axes=len(shape) - 1), [xs]))
    _close(got, want, 32)


def test_irfft_transpose_regression():
    """JAX's testIrfftTranspose (issue 6223): the matrix of the transpose is the transpose of
    the matrix, for an irfft of a spectrum built from a real vector."""

    def func(x):
        x = x.astype(jnp.complex64)
        return jnp.fft.irfft(jnp.concatenate([jnp.zeros_like(x, shape=1), x[:2] + 1j * x[2:]]))

    x = np.ones(4, np.float32)
    j = ir(func, x)
    _, linear, info = linearize_jaxpr(j)
    lt = transpose_jaxpr(linear, [True])
    eye = np.eye(4, dtype=np.float32)
    m = np.stack([backend.evaluate(linear, [e])[0] for e in eye])
    n_out = m.shape[1]
    mt = np.stack([backend.evaluate(lt, [e])[0] for e in np.eye(n_out, dtype=np.float32)])
    _close(m, mt.T, 32)
    _close(m, jax.jit(jax.vmap(func))(jnp.eye(4)), 32)  # (one compilation, not one an op)


# ---------------------------------------------------------------- special functions, polynomial

R = (-2.0, 2.0)
POS = (0.3, 3.0)
UNIT = (-0.8, 0.8)
AWAY = "away"  # [-2, -0.2] u [0.2, 2]: away from bessel_i1e's kink at 0

_SLOW = pytest.mark.slow  # igamma / betainc take ~10 s each to compile

#: (id, function, input ranges, argnums of the second-order check or None when JAX has none)
SPECIAL = [
    ("lgamma", lax.lgamma, [POS], (0,)),
    ("digamma", lax.digamma, [POS], (0,)),
    ("polygamma_x", lambda x: lax.polygamma(jnp.full_like(x, 2.0), x), [POS], (0,)),
    ("bessel_i0e", lax.bessel_i0e, [AWAY], (0,)),
    ("bessel_i1e", lax.bessel_i1e, [AWAY], (0,)),
    ("erf_inv", lax.erf_inv, [UNIT], (0,)),
    ("sinc", jnp.sinc, [R], (0,)),
    (
        "polynomial_coeffs",
        lambda x, c0, c1: lax.polynomial(x, [c0, c1, 0.5 * jnp.ones_like(x), c0 * c1]),
        [R, R, R],
        (0, 1, 2),
    ),
    pytest.param(("igamma", lax.igamma, [POS, POS], (1,)), marks=_SLOW, id="igamma"),
    pytest.param(("igammac", lax.igammac, [POS, POS], (1,)), marks=_SLOW, id="igammac"),
    pytest.param(
        (
            "betainc_x",
            lambda x: lax.betainc(jnp.full_like(x, 2.0), jnp.full_like(x, 3.0), x),
            [(0.1, 0.9)],
            (0,),
        ),
        marks=_SLOW,
        id="betainc_x",
    ),
]


def _special_ids():
    return [c[0] if isinstance(c, tuple) else c.id for c in SPECIAL]


def _draw(spec, shape, bits, seed):
    if spec == AWAY:
        x = _rand(shape, "r", bits, seed, 0.2, 2.0)
        return x * np.where(_rand(shape, "r", bits, seed + 1) > 0, 1, -1).astype(x.dtype)
    return _rand(shape, "r", bits, seed, *spec)


@pytest.mark.parametrize("bits", BITS, ids=["f32", "f64"])
@pytest.mark.parametrize("case", SPECIAL, ids=_special_ids())
def test_special_first_and_second_order(case, bits):
    name, f, specs, second = case
    with _x64(bits):
        xs = [_draw(s, (2, 3), bits, _seed(name) + 11 * k) for k, s in enumerate(specs)]
        j = ir(f, *xs)
        ts = [_like(x, 20 + k) for k, x in enumerate(xs)]
        o = jax.eval_shape(f, *xs)
        w = _like(np.zeros(o.shape, o.dtype), 30)
        argnums = list(second)
        tp = [ts[i] for i in argnums]

        def oracle(xs, ts, w):
            def g(*a):  # second order: in the arguments JAX differentiates twice
                _, pb = jax.vjp(lambda *p: f(*_merge(xs, argnums, p)), *a)
                return pb(w)

            tp = [ts[i] for i in argnums]
            want2 = jax.jvp(g, tuple(xs[i] for i in argnums), tuple(tp))[1]
            return (*jax.jvp(f, tuple(xs), tuple(ts)), jax.vjp(f, *xs)[1](w), want2)

        # the oracle and the tool's three programs in one compilation; second order: the JVP
        # of the VJP program in the arguments JAX differentiates twice
        vj = vjp_jaxpr(j, argnums)
        (out, tout, want, want2), got, got_vjp, got2 = together(
            (oracle, (xs, ts, w)),
            (jvp_jaxpr(j), xs + ts),
            (vjp_jaxpr(j), xs + [w]),
            (jvp_jaxpr(vj, argnums), xs + [w] + tp),
        )
        tol = 64 if bits == 64 else 32
        _close(got[0], out, tol, "primal")
        _close(got[1], tout, tol, "tangent")
        for k, (a, b) in enumerate(zip(got_vjp[1:], want)):
            _close(a, b, tol, f"cotangent {k}")
        n = len(vj.outvars)
        for k, (a, b) in enumerate(zip(got2[n + 1 :], want2)):
            _close(a, b, tol, f"second-order tangent {k}")


def _merge(xs, argnums, vals):
    full = list(xs)
    for i, v in zip(argnums, vals):
        full[i] = v
    return full


#: JAX raises for these derivatives; the tool refuses at the equation, with JAX's words
REFUSED = [
    (
        "polygamma_m",
        lambda m, x: lax.polygamma(m, x),
        (0,),
        "polygamma gradient with respect to m is not supported",
    ),
    (
        "betainc_a",
        lambda a, x: lax.betainc(a, jnp.full_like(x, 2.0), x),
        (0,),
        "Betainc gradient with respect to a and b not supported.",
    ),
    (
        "zeta_x",
        lambda s, q: lax.zeta(s, q),
        (0,),
        "Differentiation rule for 'zeta' not implemented",
    ),
    (
        "zeta_q",
        lambda s, q: lax.zeta(s, q),
        (1,),
        "Differentiation rule for 'zeta' not implemented",
    ),
]


@pytest.mark.parametrize("case", REFUSED, ids=[c[0] for c in REFUSED])
def test_refused_derivatives_match_jax(case):
    name, f, argnums, message = case
    xs = [np.full((3,), 2.5, np.float32), np.full((3,), 0.5, np.float32)]
    with pytest.raises(Exception, match=message.replace(".", r"\.").replace("'", ".")):
        jax.jvp(
            lambda a: f(*_merge(xs, argnums, [a])),
            (xs[argnums[0]],),
            (np.ones(3, np.float32),),
        )
    j = ir(f, *xs)
    with pytest.raises(JaxprError) as err:
        jvp_jaxpr(j, argnums)
    assert message in str(err.value)
    assert err.value.loc is not None and err.value.loc.line > 0


def test_igamma_second_order_in_a_is_refused_like_jax():
    """JAX differentiates igamma in `a` once (through igamma_grad_a), not twice."""
    a, x = np.full((3,), 1.5, np.float32), np.full((3,), 0.7, np.float32)
    with pytest.raises(NotImplementedError, match="igamma_grad_a"):
        jax.jit(jax.grad(jax.grad(lambda p: lax.igamma(p, x).sum())))(a)  # (refused, traced)
    g = grad_jaxpr(ir(lambda p: lax.igamma(p, x).sum(), a))
    with pytest.raises(
        JaxprError, match="Differentiation rule for 'igamma_grad_a' not implemented"
    ):
        jvp_jaxpr(g)


# ---------------------------------------------------------------- integer results: no rule


def test_integer_valued_primitives_have_no_jvp_rule():
    """The walk gives them no tangent by itself, not through a rule of theirs."""
    assert prim("SearchSorted").jvp is None
    assert prim("Nonzero").jvp is None


#: the default run takes the second (tests/conftest.py's SAMPLED): SearchSorted's indices
#: into a gather, differentiated in both modes, as jnp.interp does with four gathers (four
#: scatter-adds in reverse mode, over a second of XLA compiles: interp is `make test-full`'s)
INTEGER_CASES = [
    ("searchsorted", lambda s, q: (jnp.searchsorted(s, q), s * q.sum())),
    ("searchsorted_gather", lambda s, q: jnp.sin(s)[jnp.searchsorted(s, q) % 7] * q),
    ("digitize", lambda s, q: (jnp.digitize(q, s), q * 2.0)),
    ("nonzero_gather", lambda s, q: q[jnp.nonzero(q > 0.3, size=4)] * s[0]),
    ("interp", lambda s, q: jnp.interp(q, s, jnp.sin(s))),
]


@pytest.mark.parametrize("case", INTEGER_CASES, ids=[c[0] for c in INTEGER_CASES])
def test_integer_valued_primitives_differentiate_like_jax(case):
    name, f = case
    s = np.linspace(-1.0, 1.0, 7).astype(np.float32)
    q = _rand((5,), "r", 32, _seed(name))
    j = ir(f, s, q)
    ts = [_like(s, 1), _like(q, 2)]
    shapes = jax.eval_shape(f, s, q)
    shapes = list(shapes) if isinstance(shapes, tuple) else [shapes]
    cts = [
        _like(np.zeros(o.shape, o.dtype), 40 + k)
        for k, o in enumerate(shapes)
        if is_inexact(j.outvars[k].type)
    ]
    full_cts = []
    it = iter(cts)
    for o, v in zip(shapes, j.outvars):
        full_cts.append(next(it) if is_inexact(v.type) else np.zeros(o.shape, jax.dtypes.float0))
    full_cts = tuple(full_cts) if len(shapes) > 1 else full_cts[0]
    # the oracle and the tool's two programs in one compilation
    (outs, touts, want), got, got_vjp = together(
        (
            lambda s, q, ts: (*jax.jvp(f, (s, q), tuple(ts)), jax.vjp(f, s, q)[1](full_cts)),
            (s, q, ts),
        ),
        (jvp_jaxpr(j), [s, q, *ts]),
        (vjp_jaxpr(j), [s, q, *cts]),
    )
    outs = list(outs) if isinstance(outs, tuple) else [outs]
    touts = list(touts) if isinstance(touts, tuple) else [touts]
    float_t = [t for o, t in zip(j.outvars, touts) if is_inexact(o.type)]
    assert len(got) == len(outs) + len(float_t)  # integer outputs get no tangent (float0)
    for a, b in zip(got, outs):
        # atol: one f32 rounding of unit-sized operands (interp's result near 0 cancels)
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=2e-7)
    for a, b in zip(got[len(outs) :], float_t):
        _close(a, b, 32)
    for a, b in zip(got_vjp[len(outs) :], want):
        _close(a, b, 32)


# ---------------------------------------------------------------- cumulative reductions

#: JAX's testCumulativeReduceGrad (cumsum, cumprod; order 2, float32 and float64, shapes [10]
#: and [3, 4, 5], every axis, reverse or not) extended to cummax, cummin and cumlogsumexp, and
#: an associative_scan (the form jnp's cumulative functions take on some back ends); the
#: default suite runs one float32 case of [3, 4, 5] an operation, the whole sweep is `slow`:
#: the middle axis (length 4: the tool's prefix scan, families/reductions.py, takes its even
#: branch at both levels) for cumsum and cumprod, the first (length 3: its odd branch, a level
#: less, compiled in half the time) for the others
CUMULATIVE = [lax.cumsum, lax.cumprod, lax.cummax, lax.cummin, lax.cumlogsumexp]
#: the operations whose default-run case is the first axis, not the middle one
CUMULATIVE_FIRST_AXIS = [lax.cummax, lax.cummin, lax.cumlogsumexp]


def _cumulative_params():
    out = []
    for op in CUMULATIVE:
        fast_axis = 0 if op in CUMULATIVE_FIRST_AXIS else 1
        for shape in [(10,), (3, 4, 5)]:
            for axis in range(len(shape)):
                for reverse in (False, True):
                    for bits, b in zip(BITS, ("f32", "f64")):
                        tag = f"{op.__name__}-{'x'.join(map(str, shape))}-ax{axis}-{'rev' if reverse else 'fwd'}-{b}"
                        fast = shape == (3, 4, 5) and axis == fast_axis and not reverse
                        marks = () if fast and b == "f32" else (pytest.mark.slow,)
                        out.append(
                            pytest.param(op, shape, axis, reverse, bits, id=tag, marks=marks)
                        )
    return out


@pytest.mark.parametrize("op,shape,axis,reverse,bits", _cumulative_params())
def test_cumulative_first_and_second_order(op, shape, axis, reverse, bits):
    def f(x):
        return op(x, axis=axis, reverse=reverse)

    _first_and_second_order(f, shape, bits, f"{op.__name__}{shape}{axis}{reverse}")


def test_associative_scan_first_and_second_order():
    def f(x):
        return lax.associative_scan(lambda a, b: a * b + jnp.sin(b), x, axis=1)

    # length 4: two levels of strided slices, interior pads and concatenations, as JAX
    # traces any length (8, three levels, compiled in twice the time)
    _first_and_second_order(f, (3, 4), 64, "associative_scan")


def _first_and_second_order(f, shape, bits, name):
    """jvp and vjp against JAX, and the JVP of the VJP program against jax.jvp of jax.vjp.
    Distinct values (a random permutation of a grid) keep cummax / cummin off their ties."""
    with _x64(bits):
        dtype = np.float32 if bits == 32 else np.float64
        n = int(np.prod(shape))
        grid = 0.5 + np.arange(n) / n  # positive: cumprod stays well conditioned
        x = np.random.default_rng(_seed(name)).permutation(grid).reshape(shape).astype(dtype)
        j = ir(f, x)
        t, w = _like(x, 1), _like(x, 2)
        # the oracle and the tool's three programs: one compilation for first and second order
        vj = vjp_jaxpr(j)
        (out, tout, (want,), (_, want2)), got, got_vjp, got2 = together(
            (
                lambda x, t, w: (
                    *jax.jvp(f, (x,), (t,)),
                    jax.vjp(f, x)[1](w),
                    jax.jvp(lambda p: jax.vjp(f, p)[1](w)[0], (x,), (t,)),
                ),
                (x, t, w),
            ),
            (jvp_jaxpr(j), [x, t]),
            (vj, [x, w]),
            (jvp_jaxpr(vj, [0]), [x, w, t]),
        )
        _close(got[0], out, bits, "primal")
        _close(got[1], tout, bits, "tangent")
        _close(got_vjp[1], want, bits, "cotangent")
        _close(got2[len(vj.outvars) + 1], want2, bits, "second order")


def test_custom_vmap_call_differentiates_like_jax():
    """JAX's custom_vmap JVP is the JVP of the call (its vmap rule only batches it)."""
    f = jax.custom_batching.custom_vmap(lambda a: jnp.sin(a) * a)
    f.def_vmap(lambda axis_size, in_batched, a: (jnp.sin(a) * a, in_batched[0]))

    def g(a):
        return f(a) + jnp.cos(a)

    x = _rand((2, 3), "r", 32, 1)
    j = ir(g, x)
    assert "custom_vmap_call" in str(jax.make_jaxpr(g)(x))
    t = _like(x, 2)
    # JAX refuses reverse mode through custom_vmap ("Linearization failed to produce known
    # values"); the tool transposes the body's JVP: compare with the undecorated function
    with pytest.raises(ValueError, match="Linearization failed"):
        jax.vjp(g, x)

    def undecorated(a):
        return jnp.sin(a) * a + jnp.cos(a)

    def oracle(x, t):  # (the tool's programs and JAX's answers: one compilation)
        return (*jax.jvp(g, (x,), (t,)), jax.vjp(undecorated, x)[1](t)[0])

    got, vjp, (out, tout, want) = together(
        (jvp_jaxpr(j), [x, t]), (vjp_jaxpr(j), [x, t]), (oracle, [x, t])
    )
    _close(got[0], out, 32)
    _close(got[1], tout, 32)
    _close(vjp[1], want, 32)


def _all_prims(jaxpr) -> set[str]:
    """The primitives of a program and of every jaxpr nested in it."""
    from jaxprtool.core import eqn_subjaxprs

    found = set()
    for eqn in jaxpr.eqns:
        found.add(eqn.prim)
        for sub in eqn_subjaxprs(eqn):
            found |= _all_prims(sub)
    return found


@pytest.mark.parametrize("in_axes", [(0, None), (None, 0), (0, 0), (1, None)], ids=str)
def test_search_sorted_batches_like_jax(in_axes):
    """The tool's vmap of SearchSorted (JAX's `SearchSorted.batch`) against jax.vmap, and JAX's
    own batched program (batch_dims > 0) type-checks and runs with JAX's numbers."""
    from jaxprtool.check import check

    r = np.random.default_rng(0)
    s2 = np.sort(r.uniform(0, 1, (3, 5)).astype(np.float32), 1)
    q2 = r.uniform(0, 1, (3, 4)).astype(np.float32)

    def f(q, s):
        return jnp.searchsorted(s, q, side="right")

    args = [q2 if in_axes[0] == 0 else q2.T.copy() if in_axes[0] == 1 else q2[0]]
    args.append(s2 if in_axes[1] == 0 else s2[0])
    j = ir(f, q2[0], s2[0])
    batched = vmap_jaxpr(j, in_axes=in_axes, axis_size=3)
    assert not {"scan", "while"} & _all_prims(batched), "batched SearchSorted must not loop"
    theirs = ir(jax.vmap(f, in_axes=in_axes), *args)
    check(theirs)
    # the tool's batched program, JAX's run by the tool, and jax.vmap: one compilation
    (got,), (got_theirs,), want = together(
        (batched, args), (theirs, args), (jax.vmap(f, in_axes=in_axes), args)
    )
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got_theirs, want)
