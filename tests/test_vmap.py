"""vmap, jacfwd, jacrev, hessian: JAX is the oracle.

Each primitive family is checked in one go: every (function, in_axes) case of the family is
traced per example with `jax.make_jaxpr`, batched by the tool, and the batched programs are
merged into one program run once by the tool's evaluator; the reference is one `jax.jit` of
every `jax.vmap(f, in_axes)` of the family (one compile on each side)."""

from __future__ import annotations

import re

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402
from jax_oracle import ir, run, together  # noqa: E402

from jaxprtool import backend  # noqa: E402
from jaxprtool.ad import batching  # noqa: E402
from jaxprtool.ad.batching import vmap_jaxpr  # noqa: E402
from jaxprtool.check import check  # noqa: E402
from jaxprtool.core import Jaxpr, JaxprError, all_eqns  # noqa: E402
from jaxprtool.record import records  # noqa: E402
from jaxprtool.text.parser import parse  # noqa: E402
from jaxprtool.text.printer import print_jaxpr  # noqa: E402

B = 3  # batch size


def f32(*shape, lo=-1.0, hi=1.0):
    return lambda r: r.uniform(lo, hi, shape).astype(np.float32)


def f64(*shape, lo=-1.0, hi=1.0):
    return lambda r: r.uniform(lo, hi, shape).astype(np.float64)


def ints(*shape, hi=3, dtype=np.int32):
    return lambda r: r.integers(0, hi, shape).astype(dtype)


def bools(*shape):
    return lambda r: r.integers(0, 2, shape).astype(bool)


def key():
    """Key data of the default PRNG implementation (any words are a key's): drawn by numpy,
    its shape and dtype from an abstract trace (a key made eagerly compiles two programs)."""
    kd = jax.eval_shape(lambda: jax.random.key_data(jax.random.key(0)))
    return lambda r: r.integers(0, 1000, kd.shape).astype(kd.dtype)


def const(v):
    return lambda r: v


def _batched(gen, ax, rng):
    if ax is None:
        return gen(rng)
    return np.moveaxis(np.stack([gen(rng) for _ in range(B)]), 0, ax)


def merge(progs: list[Jaxpr]) -> Jaxpr:
    """One program running several programs side by side (their variables are distinct)."""
    return Jaxpr(
        (),
        tuple(v for p in progs for v in p.invars),
        tuple(e for p in progs for e in p.eqns),
        tuple(x for p in progs for x in p.outvars),
    )


def check_cases(cases, seed=0, tol=2e-4, counts=None):
    """cases: (label, f, gens, [in_axes, ...]).  Batch, merge, run once; compare with JAX."""
    rng = np.random.default_rng(seed)
    items = []
    for label, f, gens, axes_list in cases:
        ex = [g(rng) for g in gens]
        j = ir(f, *ex)
        for axes in axes_list:
            args = [_batched(g, a, rng) for g, a in zip(gens, axes)]
            vj = vmap_jaxpr(j, axes, 0, B)
            errs = [d for d in check(vj, "<vmap>") if d.kind == "error"]
            assert not errs, f"{label} {axes}: {errs}\n{print_jaxpr(vj)}"
            items.append((label, f, axes, args, vj))
    prog = merge([it[4] for it in items])
    flat = [a for it in items for a in it[3]]

    def reference(*xs):
        outs, k = [], 0
        for _, f, axes, args, _ in items:
            part = xs[k : k + len(args)]
            k += len(args)
            outs.extend(jax.tree_util.tree_leaves(jax.vmap(f, in_axes=tuple(axes))(*part)))
        return outs

    got, ref = together((prog, flat), (reference, flat))  # one compilation for both
    assert len(got) == len(ref)
    k = 0
    for label, f, axes, args, vj in items:
        n = len(vj.outvars)
        for g, r in zip(got[k : k + n], ref[k : k + n]):
            r = np.asarray(r)
            assert g.shape == r.shape and g.dtype == r.dtype, (label, axes, g.shape, r.shape)
            if g.dtype.kind in "fc":
                np.testing.assert_allclose(g, r, rtol=tol, atol=tol, err_msg=f"{label} {axes}")
            elif g.dtype.kind in "iub":
                np.testing.assert_array_equal(g, r, err_msg=f"{label} {axes}")
        k += n
        if counts is not None:
            mine = len(vj.eqns)
            theirs = len(jax.make_jaxpr(jax.vmap(f, in_axes=tuple(axes)))(*args).jaxpr.eqns)
            counts.append((label, tuple(axes), mine, theirs))


X = f32(3, 4)
Y = f32(3, 4)
POS = f32(3, 4, lo=0.5, hi=2.0)
UNIT = f32(3, 4, lo=-0.9, hi=0.9)
BIG = f32(3, 4, lo=1.1, hi=3.0)


C64 = lambda r: (X(r) + 1j * Y(r)).astype(np.complex64)  # noqa: E731
I8 = ints(3, 4, hi=100)
UNARY = [
    (lax.abs, X),
    (lax.neg, X),
    (lax.sign, X),
    (lax.floor, X),
    (lax.ceil, X),
    (lax.round, X),
    (lax.is_finite, X),
    (lax.exp, X),
    (lax.exp2, X),
    (lax.expm1, X),
    (lax.log, POS),
    (lax.log1p, POS),
    (lax.sqrt, POS),
    (lax.rsqrt, POS),
    (lax.cbrt, X),
    (lax.sin, X),
    (lax.cos, X),
    (lax.tan, UNIT),
    (lax.asin, UNIT),
    (lax.acos, UNIT),
    (lax.atan, X),
    (lax.sinh, X),
    (lax.cosh, X),
    (lax.tanh, X),
    (lax.asinh, X),
    (lax.acosh, BIG),
    (lax.atanh, UNIT),
    (lax.logistic, X),
    (lax.square, X),
    (lambda x: lax.integer_pow(x, 3), X),
    (lax.erf, X),
    (lax.erfc, X),
    (lax.erf_inv, UNIT),
    (lax.lgamma, POS),
    (lax.digamma, POS),
    (lax.bessel_i0e, X),
    (lax.bessel_i1e, X),
    (lambda x: lax.reduce_precision(x, exponent_bits=5, mantissa_bits=10), X),
    (lambda x: lax.convert_element_type(x, jnp.int32), X),
    (lambda x: lax.bitcast_convert_type(x, jnp.int32), X),
    (lambda x: lax.bitcast_convert_type(x, jnp.uint8), X),
    (lambda x: lax.bitcast_convert_type(lax.bitcast_convert_type(x, jnp.uint8), jnp.float32), X),
    (lax.stop_gradient, X),
    (lax.real, C64),
    (lax.imag, C64),
    (lax.conj, C64),
    (lax.abs, C64),
    (lax.population_count, I8),
    (lax.clz, I8),
    (lax.bitwise_not, I8),
    (lax.bitwise_not, bools(3, 4)),
    (lambda x: jnp.array(x, copy=True), X),
]

XI = [X, ints(3, 4, hi=8)]
BINARY = [
    (lax.add, [X, Y]),
    (lax.sub, [X, Y]),
    (lax.mul, [X, Y]),
    (lambda x, y: lax.div(x, y + 3.0), [X, Y]),
    (lambda x, y: lax.rem(x, y + 3.0), [X, Y]),
    (lambda x, y: lax.pow(jnp.abs(x) + 0.5, y), [X, Y]),
    (lax.max, [X, Y]),
    (lax.min, [X, Y]),
    (lax.atan2, [X, Y]),
    (lax.nextafter, [X, Y]),
    (lax.eq, [X, Y]),
    (lax.ne, [X, Y]),
    (lax.lt, [X, Y]),
    (lax.le, [X, Y]),
    (lax.gt, [X, Y]),
    (lax.ge, [X, Y]),
    (lax.bitwise_and, [ints(3, 4, hi=8), ints(3, 4, hi=8)]),
    (lax.bitwise_or, [bools(3, 4), bools(3, 4)]),
    (lax.bitwise_xor, [ints(3, 4, hi=8), ints(3, 4, hi=8)]),
    (lax.shift_left, [ints(3, 4, hi=8), ints(3, 4, hi=5)]),
    (lax.shift_right_arithmetic, [ints(3, 4, hi=8), ints(3, 4, hi=5)]),
    (lax.shift_right_logical, [ints(3, 4, hi=8), ints(3, 4, hi=5)]),
    (lax.complex, [X, Y]),
    (lambda x, y: lax.polygamma(jnp.floor(jnp.abs(x) * 2), jnp.abs(y) + 0.5), [X, Y]),
    (lambda x, y: lax.zeta(jnp.abs(x) + 2.0, jnp.abs(y) + 0.5), [X, Y]),
    (lambda x, y: (x + 2.0, 3.0 * y, x * y[0, 0]), [X, Y]),
]
# XLA takes seconds to compile each of these: batched by the broadcasting rule of the other
# binary elementwise primitives, in the slow sweep only (test_elementwise_every_in_axes)
SPECIAL = [
    (lambda x, y: lax.igamma(jnp.abs(x) + 0.5, jnp.abs(y) + 0.5), [X, Y]),
    (lambda x, y: lax.igammac(jnp.abs(x) + 0.5, jnp.abs(y) + 0.5), [X, Y]),
    (
        lambda x, y: lax.betainc(
            jnp.abs(x) + 0.5, jnp.abs(y) + 0.5, jnp.clip(jnp.abs(x), 0.1, 0.9)
        ),
        [X, Y],
    ),
]
UNARY_AXES = [[0], [1], [-1]]
BINARY_AXES = [[0, 0], [1, None], [None, -1], [0, 2]]


def _cycle(ops, axes, every: bool):
    """One case per op: every in_axes variant, or (default) one, cycling through them."""
    cases = []
    for k, (f, gens) in enumerate(ops):
        gens = gens if isinstance(gens, list) else [gens]
        mine = axes if every else [axes[k % len(axes)]]
        cases.append((getattr(f, "__name__", "op") + f"#{k}", f, gens, mine))
    return cases


#: the default run batches each case of a family along one of its in_axes, case by case in
#: turn (as the elementwise tests do); `make test-full` along every one (`every`)
EVERY_IN_AXES = pytest.mark.parametrize(
    "every",
    [False, pytest.param(True, marks=pytest.mark.slow)],
    ids=["one_in_axes", "every_in_axes"],
)


def _axes(cases, every: bool):
    if every:
        return cases
    return [
        (label, f, gens, [axes_list[k % len(axes_list)]])
        for k, (label, f, gens, axes_list) in enumerate(cases)
    ]


#: the default run's unary cases (by their index in UNARY): every batching rule and kind of
#: operand the family has: `vectorized` on float (abs, exp, sin), boolean (is_finite's
#: result, not), integer (population_count) and complex (real, abs) values, with parameters
#: (integer_pow, reduce_precision), changing the dtype (convert_element_type) and as
#: stop_gradient and copy; `_bitcast_batching` adding, removing and keeping a dimension; each
#: along every one of UNARY_AXES.  The other float functions are batched by the same
#: `vectorized` rule as sin and exp: they run in `make test-full`
#: (test_elementwise_every_in_axes, every case along every in_axes)
UNARY_DEFAULT = (0, 6, 7, 15, 29, 37, 38, 39, 40, 41, 42, 43, 46, 47, 50, 51)
#: the default run's binary cases (by their index in BINARY): `broadcasting` on float (add,
#: div, pow, max, nextafter, polygamma), comparisons (eq), integer (and, shift_left) and
#: boolean (or) values, a complex result and a case with several outputs and other rules;
#: each along every one of BINARY_AXES.  The others (sub, mul, rem, min, atan2, ne, lt, le,
#: gt, ge, xor, the right shifts, zeta) share `broadcasting` and run in `make test-full`
#: (test_elementwise_every_in_axes)
BINARY_DEFAULT = (0, 3, 5, 6, 9, 10, 16, 17, 19, 22, 23, 25)


def test_elementwise_unary():
    cases = _cycle(UNARY, UNARY_AXES, every=False)
    check_cases([cases[k] for k in UNARY_DEFAULT])


def test_elementwise_binary():
    cases = _cycle(BINARY, BINARY_AXES, every=False)
    check_cases([cases[k] for k in BINARY_DEFAULT])


@pytest.mark.slow
def test_elementwise_every_in_axes():
    check_cases(_cycle(UNARY, UNARY_AXES, every=True))
    check_cases(_cycle(BINARY + SPECIAL, BINARY_AXES, every=True))


@EVERY_IN_AXES
def test_select_clamp_add_any(every):
    cases = [
        (
            "select_n",
            lambda p, x, y: (jnp.where(p, x, y), lax.select_n(jnp.int32(1), x, y)),
            [bools(3, 4), X, Y],
            [[0, 0, 0], [0, None, None], [None, 1, 0], [2, 1, None], [None, None, 0]],
        ),
        (
            "select_n scalar pred",
            lambda p, x, y: lax.select(p, x, y),
            [bools(), X, Y],
            [[0, 0, 0], [0, None, 1], [None, 1, 0], [None, 0, 0]],
        ),
        (
            "select_n 3 cases",
            lambda i, x, y: lax.select_n(i, x, y, x * y),
            [ints(3, 4, hi=3), X, Y],
            [[0, 1, None], [None, 0, 1]],
        ),
        (
            "clamp",
            lambda lo, x, hi: (lax.clamp(lo, x, hi), lax.clamp(-0.5, x, 0.5)),
            [f32(lo=-1, hi=0), X, f32(lo=0, hi=1)],
            [[0, 0, 0], [None, 1, None], [0, None, None], [None, None, 0], [0, -1, 0]],
        ),
        (
            "clamp arrays",
            lambda lo, x, hi: lax.clamp(lo, x, hi),
            [f32(3, 4, lo=-1, hi=0), X, f32(3, 4, lo=0, hi=1)],
            [[0, 1, None], [2, 2, 2]],
        ),
        (
            "add_any",
            lambda x, y: jax.grad(lambda a: jnp.sum(a * y + a * a))(x),
            [X, Y],
            BINARY_AXES,
        ),
    ]
    check_cases(_axes(cases, every))


@EVERY_IN_AXES
def test_shape_ops(every):
    cases = [
        ("broadcast_in_dim", lambda x: jnp.broadcast_to(x[:, None, :], (3, 2, 4)), [X], UNARY_AXES),
        ("reshape", lambda x: x.reshape(2, 6), [X], UNARY_AXES),
        ("reshape dimensions", lambda x: lax.reshape(x, (12,), (1, 0)), [X], UNARY_AXES),
        (
            "squeeze/expand_dims",
            lambda x: lax.squeeze(lax.expand_dims(x, (1,)), (1,)),
            [X],
            UNARY_AXES,
        ),
        ("transpose", lambda x: x.T, [X], UNARY_AXES),
        ("rev", lambda x: lax.rev(x, (0, 1)), [X], UNARY_AXES),
        ("slice", lambda x: (x[1:3, ::2], lax.slice(x, (0, 1), (2, 4), (1, 2))), [X], UNARY_AXES),
        (
            "pad",
            lambda x, v: (jnp.pad(x, ((1, 1), (0, 2))), lax.pad(x, v, ((1, 0, 1), (-1, 2, 0)))),
            [X, f32()],
            [[0, None], [1, 0], [None, 0], [-1, None]],
        ),
        ("concatenate", lambda x, y: jnp.concatenate([x, y, x], axis=1), [X, Y], BINARY_AXES),
        ("split", lambda x: jnp.split(x, [1, 3], axis=1), [X], UNARY_AXES),
        ("tile", lambda x: jnp.tile(x, (2, 1)), [X], UNARY_AXES),
        ("iota", lambda x: x + jnp.arange(4.0), [X], UNARY_AXES),
        ("convert + weak", lambda x: x.astype(jnp.float16) * 2, [X], UNARY_AXES),
    ]
    check_cases(_axes(cases, every))


@EVERY_IN_AXES
def test_indexing(every):
    cases = [
        (
            "dynamic_slice",
            lambda x, i: lax.dynamic_slice(x, (i, 1), (2, 2)),
            [X, ints(hi=3)],
            BINARY_AXES[:3],
        ),
        (
            "dynamic_update_slice",
            lambda x, u, i: lax.dynamic_update_slice(x, u, (i, 0)),
            [X, f32(2, 4), ints(hi=2)],
            [[0, 0, 0], [1, None, None], [None, 0, None], [None, None, 0], [-1, 1, 0]],
        ),
        (
            "gather",
            lambda x, i: (x[i], x[i, 1:3], x[:, i]),
            [X, ints(2, hi=3)],
            [[0, 0], [1, None], [None, 0], [-1, 0]],
        ),
        (
            "scatter-add",
            lambda x, i, u: (x.at[i].add(u), x.at[i].set(u), x.at[i].mul(u)),
            [X, ints(2, hi=3), f32(2, 4)],
            [[0, 0, 0], [1, None, None], [None, 0, None], [None, None, 0], [-1, 0, 1]],
        ),
        (
            "scatter min/max",
            lambda x, i, u: (x.at[i].min(u), x.at[i].max(u)),
            [X, ints(2, hi=3), f32(2, 4)],
            [[0, 0, 0], [None, 0, 1]],
        ),
    ]
    check_cases(_axes(cases, every))


@EVERY_IN_AXES
def test_reductions(every):
    cases = [
        (
            "reduce_*",
            lambda x, b, i: (
                jnp.sum(x, 0),
                jnp.prod(x, 1),
                jnp.max(x),
                jnp.min(x, 0),
                jnp.all(b, 1),
                jnp.any(b),
                lax.reduce_xor_p.bind(i, axes=(0,)),
            ),
            [X, bools(3, 4), ints(3, 4, hi=9)],
            [[0, 0, 0], [1, 1, None], [-1, None, 2]],
        ),
        ("argmax/argmin", lambda x: (jnp.argmax(x, 0), jnp.argmin(x, 1)), [X], UNARY_AXES),
        (
            "cumulative",
            # the five share `_cumulative_batching`: the default run batches cumsum and a
            # reversed cummin; cumprod, cummax and cumlogsumexp in `make test-full`
            lambda x: (
                (jnp.cumsum(x, 1), lax.cummin(x, 0, reverse=True))
                + ((jnp.cumprod(x, 0), lax.cummax(x, 1), lax.cumlogsumexp(x, 1)) if every else ())
            ),
            [X],
            UNARY_AXES,
        ),
        (
            "reduce (generic)",
            lambda x, y: lax.reduce(
                (x, y), (0.0, 1.0), lambda a, b: (a[0] + b[0], a[1] * b[1]), (1,)
            ),
            [X, Y],
            [[0, 0], [1, None]],
        ),
        (
            "reduce_window",
            lambda x: (
                lax.reduce_window(x, 0.0, lax.add, (2, 1), (1, 1), "VALID"),
                lax.reduce_window(x, -jnp.inf, lax.max, (2, 2), (1, 2), "SAME"),
                lax.reduce_window(x, jnp.inf, lax.min, (1, 2), (1, 1), "VALID"),
                lax.reduce_window(x, 1.0, lax.mul, (2, 2), (1, 1), "VALID"),
            ),
            [X],
            UNARY_AXES,
        ),
        (
            "select_and_*_add (max-pool grads)",
            lambda x: jax.jvp(
                lambda a: lax.reduce_window(a, -jnp.inf, lax.max, (2, 2), (1, 1), "VALID"),
                (x,),
                (x * 2,),
            )[1],
            [X],
            UNARY_AXES,
        ),
        (
            "select_and_scatter_add",
            lambda x: jax.grad(
                lambda a: jnp.sum(lax.reduce_window(a, -jnp.inf, lax.max, (2, 2), (1, 1), "VALID"))
            )(x),
            [X],
            UNARY_AXES,
        ),
        (
            "sort",
            lambda x, y: (
                jnp.sort(x, 0),
                lax.sort((x, y), dimension=1, num_keys=1),
                jnp.argsort(x, 1),
            ),
            [X, Y],
            BINARY_AXES,
        ),
        ("top_k", lambda x: lax.top_k(x, 2), [X], UNARY_AXES),
    ]
    check_cases(_axes(cases, every))


@EVERY_IN_AXES
def test_linalg(every):
    cases = [
        ("matmul", lambda x, w: x @ w, [X, f32(4, 5)], [[0, 0], [1, None], [None, -1], [2, 1]]),
        ("matvec", lambda w, v: w @ v, [X, f32(4)], [[0, 0], [None, 0], [2, None]]),
        (
            "dot_general batch dims",
            lambda a, b: lax.dot_general(a, b, (((2,), (1,)), ((0,), (0,)))),
            [f32(2, 3, 4), f32(2, 4, 5)],
            [[0, 0], [1, None], [None, 3], [3, 2]],
        ),
        (
            "conv",
            lambda x, w: lax.conv_general_dilated(
                x, w, (1, 1), "SAME", dimension_numbers=("NCHW", "OIHW", "NCHW")
            ),
            [f32(2, 2, 5, 5), f32(3, 2, 3, 3)],
            [[0, None], [None, 0], [0, 0], [4, 1], [2, None]],
        ),
        (
            "conv NHWC strided",
            lambda x, w: lax.conv_general_dilated(
                x,
                w,
                (2, 1),
                ((1, 0), (0, 1)),
                rhs_dilation=(1, 2),
                dimension_numbers=("NHWC", "HWIO", "NHWC"),
            ),
            [f32(1, 5, 6, 2), f32(2, 2, 2, 3)],
            [[0, None], [None, -1], [3, 0]],
        ),
        (
            "conv feature groups",
            lambda x, w: lax.conv_general_dilated(
                x,
                w,
                (1, 1),
                "VALID",
                feature_group_count=2,
                dimension_numbers=("NCHW", "OIHW", "NCHW"),
            ),
            [f32(1, 4, 4, 4), f32(4, 2, 2, 2)],
            [[0, None], [None, 0], [0, 0]],
        ),
        (
            "conv batch groups",
            lambda x, w: lax.conv_general_dilated(
                x,
                w,
                (1, 1),
                "VALID",
                batch_group_count=2,
                dimension_numbers=("NCHW", "OIHW", "NCHW"),
            ),
            [f32(2, 2, 4, 4), f32(4, 2, 2, 2)],
            [[0, None], [None, 0]],
        ),
    ]
    check_cases(_axes(cases, every), tol=1e-3)


def _loop_fns():
    def scan_f(x, y):
        def body(c, xi):
            return c * xi + y[0], c + xi

        return lax.scan(body, x[0], x)

    def scan_rev(x):
        return lax.scan(lambda c, xi: (c + xi, c * xi), jnp.zeros(4), x, reverse=True)

    def while_f(x):
        return lax.while_loop(
            lambda c: c[0] < 3.0, lambda c: (c[0] + 1.0, c[1] * 1.5), (x.sum() * 0.1, x)
        )

    def while_static(x, n):
        return lax.fori_loop(0, n, lambda i, c: c * 0.5 + i, x)

    def cond_f(x, y):
        return lax.cond(
            x.sum() > 0, lambda a, b: (a * 2.0 + b, b), lambda a, b: (a - 1.0, b * b), x, y
        )

    def switch_f(i, x):
        return lax.switch(i, [lambda a: a * 2.0, jnp.sin, lambda a: a - 1.0], x)

    return scan_f, scan_rev, while_f, while_static, cond_f, switch_f


@EVERY_IN_AXES
def test_control_flow(every):
    scan_f, scan_rev, while_f, while_static, cond_f, switch_f = _loop_fns()
    cases = [
        ("scan", scan_f, [X, Y], [[0, 0], [1, None], [None, 0], [2, 1]]),
        ("scan reverse", scan_rev, [X], UNARY_AXES),
        ("while (batched predicate)", while_f, [X], UNARY_AXES),
        (
            "while (unbatched predicate)",
            while_static,
            [X, const(np.int32(3))],
            [[0, None], [-1, None]],
        ),
        ("while (batched trip count)", while_static, [X, ints(hi=4)], [[None, 0], [1, 0]]),
        ("cond", cond_f, [X, Y], [[0, 0], [None, 0], [1, None]]),
        ("switch", switch_f, [ints(hi=3), X], [[0, 0], [0, None], [None, 1]]),
    ]
    check_cases(_axes(cases, every))


@jax.jit
def _inner(a, b):
    return jnp.tanh(a) @ b


@jax.custom_vjp
def _cvjp(x):
    return jnp.sin(x)


_cvjp.defvjp(lambda x: (jnp.sin(x), x), lambda r, ct: (ct * jnp.cos(r),))


@EVERY_IN_AXES
def test_calls_and_custom_rules(every):
    cases = [
        (
            "jit (shared body)",
            lambda x, w: _inner(x, w) + _inner(x * 2.0, w),
            [X, f32(4)],
            BINARY_AXES[:3],
        ),
        (
            "custom_jvp (relu, gelu)",
            lambda x: jax.nn.relu(x) + jax.nn.gelu(x) + jax.nn.softplus(x),
            [X],
            UNARY_AXES,
        ),
        ("custom_vjp", lambda x: _cvjp(x) * 2.0, [X], UNARY_AXES),
        ("remat", lambda x: jax.checkpoint(lambda y: jnp.sin(y) * 2.0)(x), [X], UNARY_AXES),
        (
            "optimization_barrier",
            lambda x, y: lax.optimization_barrier((x, y)),
            [X, Y],
            BINARY_AXES,
        ),
        (
            "name",
            lambda x: __import__("jax.ad_checkpoint").ad_checkpoint.checkpoint_name(x * 2.0, "h"),
            [X],
            UNARY_AXES,
        ),
    ]
    check_cases(_axes(cases, every))


@EVERY_IN_AXES
def test_random(every):
    def normal(kd, x):
        k = jax.random.wrap_key_data(kd)
        return jax.random.normal(k, (3, 4)) * x, jax.random.bits(jax.random.split(k, 2)[1], (2,))

    def fold(kd, i):
        return jax.random.key_data(jax.random.fold_in(jax.random.wrap_key_data(kd), i))

    def gamma(kd, a):
        return jax.random.gamma(jax.random.wrap_key_data(kd), a)

    cases = [
        ("random bits/split/wrap", normal, [key(), X], [[0, None], [None, 0], [0, 1]]),
        ("fold_in", fold, [key(), ints(hi=10)], [[0, None], [None, 0], [0, 0]]),
    ]
    if every:
        # XLA compiles gamma's rejection loop for seconds, on both sides: batched by the
        # `leading_batch` rule, which `make test` checks on random_poisson (keys and rates
        # batched: test_jax_0_12_1.py::test_random_poisson_runs_and_batches_as_jax) and on
        # the decompositions (test_ad_linalg.py::test_vmap_matches_jax, one operand unbatched)
        cases.append(("random_gamma", gamma, [key(), f32(3, lo=0.5, hi=2)], [[0, None], [None, 0]]))
    check_cases(_axes(cases, every))


@EVERY_IN_AXES
def test_misc_primitives(every):
    try:
        from jax._src.random.threefry2x32 import threefry_2x32
    except ImportError:  # JAX 0.10.0-0.10.1
        from jax._src.prng import threefry_2x32

    dev = jax.sharding.make_single_device_sharding(jax.devices()[0])
    cases = [
        ("device_put", lambda x: jax.device_put(x) * 2, [X], UNARY_AXES[:2]),
        (
            "sharding_constraint",
            lambda x: lax.with_sharding_constraint(x, dev) * 2,
            [X],
            UNARY_AXES[:2],
        ),
        ("expand_dims", lambda x: lax.expand_dims(x, [0, 2]), [X], UNARY_AXES),
        ("approx_max_k", lambda x: lax.approx_max_k(x, 2), [X], UNARY_AXES),
        (
            "rng_bit_generator",
            lambda k: lax.rng_bit_generator(k, (2, 3)),
            [ints(4, hi=99, dtype=np.uint32)],
            [[0], [1]],
        ),
        ("random_seed", lambda s: jax.random.key_data(jax.random.key(s)), [ints(hi=9)], [[0]]),
        (
            "random_clone",
            lambda kd: jax.random.key_data(jax.random.clone(jax.random.wrap_key_data(kd))),
            [key()],
            [[0], [1]],
        ),
        (
            "threefry2x32",
            threefry_2x32,
            [ints(2, hi=99, dtype=np.uint32), ints(4, hi=99, dtype=np.uint32)],
            [[0, None], [None, 0], [0, 1]],
        ),
        ("nested vmap", lambda x: jax.vmap(jnp.outer)(x, x), [X], UNARY_AXES),
        ("lax.map", lambda x: lax.map(jnp.sin, x), [X], UNARY_AXES[:2]),
    ]
    check_cases(_axes(cases, every))


@EVERY_IN_AXES
def test_float64(every):
    """float64 batched at 1e-10; the default run one in_axes a case (the axes' handling is
    the float32 tests' above), `make test-full` every one."""
    with jax.enable_x64(True):
        cases = [
            (
                "f64 elementwise",
                lambda x, y: jnp.sin(x) * y + jnp.exp(x) / (1.0 + y * y),
                [f64(3, 4), f64(3, 4)],
                BINARY_AXES,
            ),
            (
                "f64 dot + reductions",
                lambda x, w: (jnp.sum(x @ w, 1), jnp.cumsum(x, 0)),
                [f64(3, 4), f64(4, 2)],
                BINARY_AXES[:3],
            ),
        ]
        check_cases(_axes(cases, every), tol=1e-10)


# ---------------------------------------------------------------- equation counts


def test_equation_counts_not_above_jax():
    """Batch dimensions are placed as JAX places them: never more equations than JAX."""
    counts: list = []
    scan_f, _, while_f, _, cond_f, _ = _loop_fns()
    cases = [
        (
            "mlp layer",
            lambda x, w, b: jnp.tanh(x @ w + b),
            [f32(4), f32(4, 5), f32(5)],
            [[0, None, None], [None, 0, 0], [0, 0, None]],
        ),
        (
            "attention",
            _attention,
            [f32(5, 8), f32(8, 8), f32(8, 8)],
            [[0, None, None], [1, None, None]],
        ),
        (
            "conv",
            lambda x, w: lax.conv_general_dilated(x, w, (1, 1), "SAME"),
            [f32(1, 2, 5, 5), f32(3, 2, 3, 3)],
            [[0, None], [None, 0]],
        ),
        ("scan", scan_f, [X, Y], [[0, 0], [2, 1]]),
        ("while", while_f, [X], [[0]]),
        ("cond", cond_f, [X, Y], [[0, 0], [None, 0]]),
        # the new axis at the batch one: after it, as JAX's rule puts it (no transpose)
        ("stack", lambda x, y: jnp.stack([x, y]), [f32(2, 3), f32(2, 3)], [[0, 0], [1, 1]]),
    ]
    check_cases(cases, counts=counts)
    over = [c for c in counts if c[2] > c[3]]
    assert not over, over


def _attention(x, wq, wk):
    q, k = x @ wq, x @ wk
    s = q @ k.T / jnp.sqrt(8.0)
    return jax.nn.softmax(s, axis=-1) @ x


# ---------------------------------------------------------------- rules and fallback


def test_every_primitive_with_a_jvp_rule_has_a_batching_rule():
    from jaxprtool.families.index import FAMILIES_OF

    recs = records()  # (only the families' primitives: other tests register plugin ones)
    no_rule = sorted(
        n for n, r in recs.items() if n in FAMILIES_OF and r.jvp is not None and r.batching is None
    )
    # the callbacks and these two run one example at a time (the fallback, with a warning);
    # so does custom_vmap_call, whose custom rule is Python that the text lacks; and
    # Equinox's noinline and lineax's linear_solve (Python objects: run and AD refuse them).
    # (pallas_call has a rule of its own that loops and says why: test_run_pallas.py)
    expected = [
        "custom_vmap_call",
        "io_callback",
        "linear_solve",
        "noinline",
        "pure_callback",
        "ragged_dot_general",
        "rng_uniform",
    ]
    assert no_rule == sorted(expected), no_rule


def test_fallback_loops_with_a_warning(tmp_path, monkeypatch):
    """A primitive without a batching rule runs once per example in a scan, with a warning."""
    monkeypatch.setattr(records()["cumsum"], "batching", None)
    f = lambda x: jnp.cumsum(jnp.sin(x), axis=1)  # noqa: E731
    src = tmp_path / "f.jaxpr"
    src.write_text(str(jax.make_jaxpr(f)(np.ones((3, 4), np.float32))) + "\n")
    batching._MEMO.clear()
    r = run(["vmap", "--in-axes", "1", "--axis-size", "2", str(src)])
    assert r.exit_code == 0, r.output
    assert "warning: vmap: no batching rule for 'cumsum'" in r.output
    j = parse(r.stdout, "<out>").jaxpr
    assert any(e.prim == "scan" for e in all_eqns(j))
    xs = np.random.default_rng(0).normal(size=(3, 2, 4)).astype(np.float32)
    np.testing.assert_allclose(
        backend.evaluate(j, [xs])[0], jax.jit(jax.vmap(f, in_axes=1))(xs), rtol=1e-5, atol=1e-5
    )
    batching._MEMO.clear()


def test_rank0_dynamic_slices_and_empty_conv_batches_without_a_loop(capsys):
    """dynamic_slice / dynamic_update_slice of rank-0 operands and conv with an empty batch
    batch without a scan (JAX uses a gather, a scatter, and zeros of the empty result)."""
    cases = [
        (lambda x: lax.dynamic_slice(x, (), ()), [np.arange(3.0, dtype=np.float32)], (0,)),
        (
            lambda x, u: lax.dynamic_update_slice(x, u, ()),
            [np.arange(3.0, dtype=np.float32), np.float32(5)],
            (0, None),
        ),
        (
            lambda x, u: lax.dynamic_update_slice(x, u, ()),
            [np.float32(2), np.arange(3.0, dtype=np.float32)],
            (None, 0),
        ),
    ]
    calls = []  # the batched programs and jax.vmap's: one compilation
    for f, args, axes in cases:
        per = [a[0] if d == 0 else a for a, d in zip(args, axes)]
        vj = vmap_jaxpr(ir(f, *per), list(axes), 0, 3)
        assert not any(e.prim == "scan" for e in all_eqns(vj)), print_jaxpr(vj)
        calls += [(vj, args), (jax.vmap(f, in_axes=axes), args)]
    outs = together(*calls)
    for (got,), want in zip(outs[::2], outs[1::2], strict=True):
        np.testing.assert_array_equal(got, want)
    conv = lambda x, w: lax.conv_general_dilated(x, w, (1, 1), "SAME")  # noqa: E731
    j = ir(conv, np.ones((1, 2, 5, 5), np.float32), np.ones((3, 2, 3, 3), np.float32))
    a, b = np.ones((0, 1, 2, 5, 5), np.float32), np.ones((0, 3, 2, 3, 3), np.float32)
    vj = vmap_jaxpr(j, 0, 0, 0)
    assert print_jaxpr(vj) == str(jax.make_jaxpr(jax.vmap(conv))(a, b))
    assert backend.evaluate(vj, [a, b])[0].shape == jax.eval_shape(jax.vmap(conv), a, b).shape
    assert "warning" not in capsys.readouterr().err


@pytest.mark.parametrize("shape,axis,size", [((5,), 0, 3), ((4, 5), 1, 3), ((4, 5), 2, 6)])
def test_nonzero_batches_as_jax(shape, axis, size):
    """jnp.nonzero(size=...) prints as the 0.12 HiPrim Nonzero: batched as JAX's
    Nonzero.batch (the batch axis first, one more dimension searched separately)."""
    f = lambda x: jnp.nonzero(x, size=size)  # noqa: E731
    bshape = list(shape)
    bshape.insert(axis, B)
    xs = (np.random.default_rng(0).uniform(size=bshape) > 0.5).astype(np.float32)
    vj = vmap_jaxpr(ir(f, np.ones(shape, np.float32)), axis, 0, B)
    want = jax.jit(jax.vmap(f, in_axes=axis))(xs)
    for a, r in zip(backend.evaluate(vj, [xs]), want, strict=True):
        np.testing.assert_array_equal(a, r)
    assert len(vj.eqns) <= len(jax.make_jaxpr(jax.vmap(f, in_axes=axis))(xs).eqns)
    assert not any(e.prim == "scan" for e in all_eqns(vj))


# ---------------------------------------------------------------- named axes: collectives


N_I, N_J = 4, 3


def _jax_eqns(f, *args) -> int:
    """JAX's equation count, nested bodies included (its ppermute takes with a jit)."""
    return len(list(all_eqns(parse(str(jax.make_jaxpr(f)(*args)), "<jax>").jaxpr)))


_NAMED = [
    ("psum", lambda x: x - lax.psum(x, "i"), (3,)),
    ("pmax", lambda x: lax.pmax(x, "i"), (3,)),
    ("pmin", lambda x: lax.pmin(x, "i") * x, (3,)),
    ("pmean", lambda x: lax.pmean(x, "i"), (3,)),
    ("axis_index", lambda x: x * lax.axis_index("i"), (3,)),
    ("all_gather", lambda x: lax.all_gather(x, "i"), (3,)),
    ("all_gather axis 1", lambda x: lax.all_gather(x, "i", axis=1), (3, 2)),
    ("all_gather tiled", lambda x: lax.all_gather(x, "i", tiled=True), (3,)),
    ("ppermute shift", lambda x: lax.ppermute(x, "i", [(0, 1), (1, 2), (2, 3), (3, 0)]), (3,)),
    ("ppermute", lambda x: lax.ppermute(x, "i", [(0, 3), (1, 0), (2, 2), (3, 1)]), (3,)),
    ("psum_scatter", lambda x: lax.psum_scatter(x, "i"), (4, 3)),
    ("psum_scatter tiled", lambda x: lax.psum_scatter(x, "i", tiled=True), (8, 3)),
    (
        "psum_scatter tiled 1",
        lambda x: lax.psum_scatter(x, "i", scatter_dimension=1, tiled=True),
        (3, 8),
    ),
    ("all_to_all", lambda x: lax.all_to_all(x, "i", 0, 0), (4, 3)),
    ("all_to_all 0 1", lambda x: lax.all_to_all(x, "i", 0, 1, tiled=True), (4, 3)),
    ("all_to_all 1 0", lambda x: lax.all_to_all(x, "i", 1, 0, tiled=True), (3, 8)),
]


@pytest.mark.parametrize("in_axis", [0, None])
def test_collectives_over_the_vmap_axis(in_axis):
    """`vmap --axis-name i` of a program printed with the axis 'i' in its environment is
    `jax.vmap(f, axis_name='i')`: same values, no more equations than JAX's."""
    rng = np.random.default_rng(1)
    calls = []  # the tool's program and JAX's for every case, run in one compilation
    for label, f, shape in _NAMED:
        x0 = rng.normal(size=shape).astype(np.float32)
        j = parse(str(jax.make_jaxpr(f, axis_env=[("i", N_I)])(x0)), "<jax>").jaxpr
        vj = vmap_jaxpr(j, in_axis, 0, N_I, axis_name="i")
        assert not [d for d in check(vj, "<vmap>") if d.kind == "error"], label
        xs = rng.normal(size=(N_I, *shape)).astype(np.float32) if in_axis == 0 else x0
        g = jax.vmap(f, in_axes=in_axis, axis_name="i", axis_size=N_I)
        if in_axis is None and label.startswith("all_to_all"):
            # JAX's batcher broadcasts an unbatched all_to_all operand with lax.broadcast,
            # which prepends the per-example shape twice (its TODO); the oracle is the same
            # value given to every example
            xb = np.broadcast_to(x0, (N_I, *shape))
            calls += [(vj, [xs]), (jax.vmap(f, axis_name="i"), [xb])]
        else:
            calls += [(vj, [xs]), (g, [xs])]
            assert len(list(all_eqns(vj))) <= _jax_eqns(g, xs), (label, print_jaxpr(vj))
    outs = together(*calls)
    for (label, _, _), (got,), ref in zip(_NAMED, outs[::2], outs[1::2], strict=True):
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5, err_msg=label)


def _wl(x):
    def body(c):
        k, v = c
        return k + 1, v + lax.axis_index("j")

    return lax.while_loop(lambda c: c[0] < lax.axis_index("j"), body, (0, x))


_TWO_AXES = [
    ("psum over i", lambda x: lax.psum(x, "i"), (3,)),
    ("psum over i, j", lambda x: lax.psum(x, ("i", "j")), (3,)),
    ("pmax over i", lambda x: x + lax.pmax(x, "i"), (3,)),
    ("axis_index i", lambda x: x * lax.axis_index("i"), (3,)),
    ("all_gather over i", lambda x: lax.all_gather(x, "i", axis=1, tiled=True), (3, 2)),
    ("ppermute over i", lambda x: lax.ppermute(x, "i", [(0, 1), (1, 2), (2, 3), (3, 0)]), (3,)),
    ("psum_scatter over i", lambda x: lax.psum_scatter(x, "i", scatter_dimension=1), (3, 4)),
    ("all_to_all over i", lambda x: lax.all_to_all(x, "i", 0, 1), (4, 3)),
    ("all_to_all over i, j", lambda x: lax.all_to_all(x, ("i", "j"), 0, 1, tiled=True), (12, 3)),
    ("all_to_all over j, i", lambda x: lax.all_to_all(x, ("j", "i"), 1, 0, tiled=True), (3, 12)),
    ("while on axis_index", _wl, (3,)),  # JAX's testWhileLoopAxisIndexBatched
    ("jit of an unbatched psum", lambda x: x + jax.jit(lambda: lax.psum(1.0, "j"))(), (3,)),
    ("scan", lambda x: lax.scan(lambda c, y: (c + lax.psum(y, "j"), None), x[0], x)[0], (3,)),
    (
        "cond on axis_index",
        lambda x: lax.cond(lax.axis_index("j") > 0, lambda y: lax.psum(y, "j"), lambda y: y, x),
        (3,),
    ),
]


def test_collectives_over_other_axes_and_inside_bodies():
    """vmap over 'j' keeps the collectives over 'i' (their positions shifted), which a second
    vmap over 'i' then batches: jax.vmap(jax.vmap(f, axis_name='j'), axis_name='i')."""
    rng = np.random.default_rng(2)
    calls = []  # the tool's program and JAX's for every case, run in one compilation
    for label, f, shape in _TWO_AXES:
        x0 = np.ones(shape, np.float32)
        text = str(jax.make_jaxpr(f, axis_env=[("i", N_I), ("j", N_J)])(x0))
        inner = vmap_jaxpr(parse(text, "<jax>").jaxpr, 0, 0, N_J, axis_name="j")
        vj = vmap_jaxpr(inner, 0, 0, N_I, axis_name="i")
        xs = rng.normal(size=(N_I, N_J, *shape)).astype(np.float32)
        g = jax.vmap(jax.vmap(f, axis_name="j"), axis_name="i")
        calls += [(vj, [xs]), (g, [xs])]
        assert len(list(all_eqns(vj))) <= _jax_eqns(g, xs), (label, print_jaxpr(vj))
    outs = together(*calls)
    for (label, _, _), got, ref in zip(_TWO_AXES, outs[::2], outs[1::2], strict=True):
        for a, r in zip(got, jax.tree_util.tree_leaves(ref), strict=True):
            np.testing.assert_allclose(a, r, rtol=1e-5, atol=1e-5, err_msg=label)


_LINEAR_NAMED = [
    c
    for c in _NAMED
    if c[0].split()[0] in ("psum", "all_gather", "ppermute", "psum_scatter", "all_to_all")
]


def _vjp_of(f):
    """x, ct -> the cotangent of f's input (jax.vjp)."""
    return lambda x, ct: jax.vjp(f, x)[1](ct)


def test_batched_collectives_transpose_as_jax_s_vjp():
    """The batched programs of the linear collectives are linear: their transposes pass the
    dot-product test and are jax.vjp of jax.vmap(f, axis_name='i')."""
    from jaxprtool.ad.api import transpose_jaxpr

    rng = np.random.default_rng(3)
    calls, inputs = [], []  # every case's three programs run in one compilation
    for _, f, shape in _LINEAR_NAMED:
        x0 = np.ones(shape, np.float32)
        j = parse(str(jax.make_jaxpr(f, axis_env=[("i", N_I)])(x0)), "<jax>").jaxpr
        vj = vmap_jaxpr(j, 0, 0, N_I, axis_name="i")
        xs = rng.normal(size=(N_I, *shape)).astype(np.float32)
        g = jax.vmap(f, axis_name="i")
        w = rng.normal(size=jax.eval_shape(g, xs).shape).astype(np.float32)
        calls += [(vj, [xs]), (transpose_jaxpr(vj, [True]), [w]), (_vjp_of(g), [xs, w])]
        inputs.append((xs, w))
    outs = together(*calls)
    for (label, _, _), (xs, w), k in zip(_LINEAR_NAMED, inputs, range(0, len(outs), 3)):
        (lv,), (ltw,), (ref,) = outs[k : k + 3]
        lhs, rhs = float(np.sum(w * lv)), float(np.sum(ltw * xs))
        assert abs(lhs - rhs) <= 1e-4 * max(1.0, abs(lhs)), label
        np.testing.assert_allclose(ltw, ref, rtol=1e-5, atol=1e-5, err_msg=label)


def test_vmap_axis_name_on_the_command_line(tmp_path):
    src = tmp_path / "p.jaxpr"
    f = lambda x: x - lax.pmean(x, "i")  # noqa: E731
    src.write_text(str(jax.make_jaxpr(f, axis_env=[("i", 4)])(np.ones(3, np.float32))) + "\n")
    r = run(["vmap", "--axis-size", "4", "--axis-name", "i", str(src)])
    assert r.exit_code == 0, r.output
    xs = np.random.default_rng(0).normal(size=(4, 3)).astype(np.float32)
    (got,), want = together(  # one compilation for both
        (parse(r.stdout, "<out>").jaxpr, [xs]), (jax.vmap(f, axis_name="i"), [xs])
    )
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    # without the name, 'i' is another (mesh) axis: the psum stays, batched
    r = run(["vmap", "--axis-size", "4", str(src)])
    assert r.exit_code == 0, r.output
    assert "psum[axes=('i',)" in r.stdout


def test_collective_refusals_are_jax_s_and_located(tmp_path):
    """What JAX's batchers refuse (NotImplementedError) is refused with the location."""
    src = tmp_path / "g.jaxpr"
    f = lambda x: lax.all_gather(x, ("i", "j"))  # noqa: E731
    src.write_text(
        str(jax.make_jaxpr(f, axis_env=[("i", 2), ("j", 2)])(np.ones(3, np.float32))) + "\n"
    )
    r = run(["vmap", "--axis-size", "2", "--axis-name", "i", str(src)])
    assert r.exit_code == 1
    assert "g.jaxpr:2:" in r.output and "over several axes including the vmap axis" in r.output
    assert "Traceback" not in r.output


def test_all_to_all_whose_other_axis_sizes_the_text_lacks_is_refused_not_as_jax_s(tmp_path):
    """JAX batches an all_to_all over ('i', 'j') with split_axis == concat_axis, knowing both
    axes' sizes; the per-example text does not state the other axis's size, so the tool
    refuses, located, saying so (not claiming that JAX refuses it)."""
    f = lambda x: lax.all_to_all(x, ("i", "j"), 0, 0, tiled=True)  # noqa: E731
    xs = np.arange(2 * 3 * 6, dtype=np.float32).reshape(2, 3, 6)
    jax.jit(jax.vmap(jax.vmap(f, axis_name="j"), axis_name="i"))(xs)  # JAX batches it
    src = tmp_path / "a.jaxpr"
    src.write_text(str(jax.make_jaxpr(f, axis_env=[("i", 2), ("j", 3)])(xs[0, 0])) + "\n")
    r = run(["vmap", "--axis-size", "3", "--axis-name", "j", str(src)])
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert f"{src}:2:5: error: vmap: 'all_to_all' over the vmap axis" in r.output, r.output
    assert "needs the sizes of its other axes, which the program does not state" in r.output


# ---------------------------------------------------------------- the command and its errors


@pytest.fixture
def fxy(tmp_path):
    p = tmp_path / "f.jaxpr"
    p.write_text(
        str(
            jax.make_jaxpr(lambda x, y: jnp.sin(x) * y)(
                np.ones(3, np.float32), np.ones(3, np.float32)
            )
        )
        + "\n"
    )
    return p


def test_errors_in_jax_words_with_a_location(fxy):
    r = run(["vmap", "--in-axes", "0,2", "--axis-size", "4", str(fxy)])
    assert r.exit_code == 1
    assert (
        f"{fxy}:1:21: error: vmap was requested to map its argument along axis 2, which implies "
        "that its rank should be at least 3, but is only 2 (its shape is (3, 4))"
    ) in r.output
    r = run(["vmap", "--in-axes", "0,0,0", "--axis-size", "4", str(fxy)])
    assert r.exit_code == 1 and "but got len(in_axes)=3, len(args)=2." in r.output
    assert r.stderr.startswith(f"{fxy}:1:1: error: vmap in_axes must be")  # at the inputs
    r = run(["vmap", "--out-axes", "0,0", "--axis-size", "4", str(fxy)])
    assert r.exit_code == 1 and "got len(out_axes)=2 for 1 outputs." in r.stderr
    assert re.match(rf"{re.escape(str(fxy))}:\d+:\d+: error: vmap out_axes", r.stderr)
    r = run(["vmap", "--in-axes", "None", str(fxy)])
    assert r.exit_code == 1
    assert (
        "vmap must have at least one non-None value in in_axes or axis_size must be specified"
        in r.output
    )
    r = run(["vmap", str(fxy)])
    assert (
        r.exit_code == 2
        and (
            "vmap needs the batch size: give --axis-size N (a per-example program does not "
            "contain it)"
        )
        in r.output
    )
    r = run(["vmap", "--axis-size", "4", "--out-axes", "2", str(fxy)])
    assert r.exit_code == 1 and "axis 2 is out of bounds for array of dimension 2" in r.output
    r = run(["vmap", "--in-axes", "0,None", "--out-axes", "None", "--axis-size", "4", str(fxy)])
    assert r.exit_code == 1
    assert "at vmap out_axes, got axis spec None but output was batched on axis 0" in r.output
    r = run(["vmap", "--in-axes", "0,x", str(fxy)])
    assert r.exit_code == 2


def test_unbatched_inputs_and_out_axes(fxy):
    r = run(["vmap", "--in-axes", "None,None", "--axis-size", "2", "--out-axes", "-1", str(fxy)])
    assert r.exit_code == 0, r.output
    j = parse(r.stdout, "<out>").jaxpr
    x, y = np.arange(3, dtype=np.float32), np.ones(3, np.float32)
    ref = jax.vmap(lambda a, b: jnp.sin(a) * b, in_axes=(None, None), out_axes=-1, axis_size=2)(
        x, y
    )
    np.testing.assert_allclose(backend.evaluate(j, [x, y])[0], ref, rtol=1e-6)


def test_help_has_examples():
    for cmd in ("vmap", "jacfwd", "jacrev", "hessian"):
        r = run([cmd, "--help"])
        assert r.exit_code == 0 and "Example:" in r.output and f"jaxprtool {cmd}" in r.output


# ---------------------------------------------------------------- compositions by piping


def _mlp_loss(w1, b1, w2, x, y):
    h = jnp.tanh(x @ w1 + b1)
    return jnp.mean((h @ w2 - y) ** 2)


def _cnn_loss(k, w, x, y):
    h = lax.conv_general_dilated(
        x[None], k, (1, 1), "SAME", dimension_numbers=("NCHW", "OIHW", "NCHW")
    )
    h = lax.reduce_window(jax.nn.relu(h), -jnp.inf, lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")
    return jnp.sum((h.reshape(-1) @ w - y) ** 2)


def _text(f, *args):
    return str(jax.make_jaxpr(f)(*args)) + "\n"


def _pipe(text, *commands):
    for cmd in commands:
        r = run(cmd, stdin=text)
        assert r.exit_code == 0, (cmd, r.output)
        text = r.stdout
    return parse(text, "<pipe>").jaxpr


def _close(got, ref, tol=2e-4):
    ref = jax.tree_util.tree_leaves(ref)
    assert len(got) == len(ref)
    for g, r in zip(got, ref):
        np.testing.assert_allclose(g, np.asarray(r), rtol=tol, atol=tol)


@pytest.mark.parametrize("model", ["mlp", pytest.param("cnn", marks=pytest.mark.slow)])
def test_per_example_gradients(model):
    """`grad f | vmap --in-axes None,..,0,0`: per-example gradients, as vmap(grad(f))."""
    rng = np.random.default_rng(1)
    n = 4
    if model == "mlp":
        f = _mlp_loss
        params = [rng.normal(size=s).astype(np.float32) * 0.5 for s in ((3, 6), (6,), (6, 2))]
        x, y = (
            rng.normal(size=(n, 3)).astype(np.float32),
            rng.normal(size=(n, 2)).astype(np.float32),
        )
    else:
        f = _cnn_loss
        params = [
            rng.normal(size=(2, 1, 3, 3)).astype(np.float32),
            rng.normal(size=(18, 2)).astype(np.float32),
        ]
        x, y = (
            rng.normal(size=(n, 1, 6, 6)).astype(np.float32),
            rng.normal(size=(n, 2)).astype(np.float32),
        )
    np_ = len(params)
    argnums = ",".join(str(i) for i in range(np_))
    axes = ",".join(["None"] * np_ + ["0", "0"])
    j = _pipe(
        _text(f, *params, x[0], y[0]),
        ["grad", "--argnums", argnums],
        ["vmap", "--in-axes", axes, "--axis-size", str(n)],
    )
    oracle = jax.vmap(jax.grad(f, argnums=tuple(range(np_))), in_axes=(None,) * np_ + (0, 0))
    got, ref = together((j, [*params, x, y]), (oracle, [*params, x, y]))
    _close(got, ref)


def test_vmap_then_grad_and_vjp():
    """`vmap f | vjp` and `vmap f | grad` (an output left unbatched with --out-axes None)."""
    rng = np.random.default_rng(2)
    params = [rng.normal(size=s).astype(np.float32) * 0.5 for s in ((3, 6), (6,), (6, 2))]
    x, y = rng.normal(size=(4, 3)).astype(np.float32), rng.normal(size=(4, 2)).astype(np.float32)
    text = _text(_mlp_loss, *params, x[0], y[0])
    j = _pipe(
        text,
        ["vmap", "--in-axes", "None,None,None,0,0", "--axis-size", "4"],
        ["vjp", "--argnums", "0,1,2"],
    )
    ct = rng.normal(size=(4,)).astype(np.float32)

    def vjp_oracle(params, x, y, ct):
        batched = lambda *w: jax.vmap(_mlp_loss, in_axes=(None, None, None, 0, 0))(*w, x, y)  # noqa: E731
        out, pull = jax.vjp(batched, *params)
        return [out, *pull(ct)]

    def f(w, x):
        return jnp.sum(w * w), jnp.sin(w) * x

    def grad_oracle(w0, xs):
        (v, aux), g = jax.value_and_grad(
            lambda w: jax.vmap(f, in_axes=(None, 0), out_axes=(None, 0))(w, xs), has_aux=True
        )(w0)
        return [v, aux, g]

    w0, xs = rng.normal(size=3).astype(np.float32), rng.normal(size=(4, 3)).astype(np.float32)
    j2 = _pipe(
        _text(f, w0, xs[0]),
        ["vmap", "--in-axes", "None,0", "--out-axes", "None,0", "--axis-size", "4"],
        ["grad", "--has-aux", "--with-value"],
    )
    # the two programs and their oracles in one compilation
    got, want, got2, want2 = together(
        (j, [*params, x, y, ct]),
        (vjp_oracle, [params, x, y, ct]),
        (j2, [w0, xs]),
        (grad_oracle, [w0, xs]),
    )
    _close(got, want)
    _close(got2, want2)


def test_vmap_of_vmap_and_jvp_block_and_linearize_transpose():
    rng = np.random.default_rng(3)

    def f(x, y):
        return jnp.tanh(x) * y, jnp.sum(x * y)

    x, y = rng.normal(size=3).astype(np.float32), rng.normal(size=3).astype(np.float32)
    text = _text(f, x, y)
    # two batch dimensions: vmap over axis 0 (size 4), then over axis 1 (size 2)
    j = _pipe(text, ["vmap", "--axis-size", "4"], ["vmap", "--in-axes", "1", "--axis-size", "2"])
    xs, ys = (
        rng.normal(size=(4, 2, 3)).astype(np.float32),
        rng.normal(size=(4, 2, 3)).astype(np.float32),
    )
    # jvp | vmap: a block of Jacobian columns (tangents batched, primals shared)
    jb = _pipe(text, ["jvp"], ["vmap", "--in-axes", "None,None,0,0", "--axis-size", "5"])
    tx, ty = rng.normal(size=(5, 3)).astype(np.float32), rng.normal(size=(5, 3)).astype(np.float32)

    def block_oracle(x, y, tx, ty):
        return jax.vmap(lambda a, b: jax.jvp(f, (x, y), (a, b)), in_axes=(0, 0))(tx, ty)

    # vmap of linearize's output, then transpose: many cotangents pulled back at once
    jt = _pipe(
        text,
        ["linearize"],
        ["vmap", "--in-axes", "None,None,0,0", "--axis-size", "5"],
        ["transpose"],
    )
    c1, c2 = rng.normal(size=(5, 3)).astype(np.float32), rng.normal(size=(5,)).astype(np.float32)

    def pulled_oracle(x, y, c1, c2):
        out, pull = jax.vjp(f, x, y)
        return [jnp.broadcast_to(o, (5, *np.shape(o))) for o in out] + list(
            jax.vmap(lambda a, b: pull((a, b)))(c1, c2)
        )

    # the three programs and their oracles in one compilation
    got, want, got_b, want_b, got_t, want_t = together(
        (j, [xs, ys]),
        (jax.vmap(jax.vmap(f), in_axes=1), [xs, ys]),
        (jb, [x, y, tx, ty]),
        (block_oracle, [x, y, tx, ty]),
        (jt, [x, y, c1, c2]),
        (pulled_oracle, [x, y, c1, c2]),
    )
    _close(got, want)
    _close(got_b, want_b)
    _close(got_t, want_t)


#: each command on reordered argnums in the default run, on the others in `make test-full`
JACOBIAN_CASES = [
    pytest.param(kind, argnums, marks=[] if argnums == "1,0" else [pytest.mark.slow])
    for kind in ("jacfwd", "jacrev", "hessian")
    for argnums in ("0", "0,1", "1,0")
]


@pytest.mark.parametrize("kind, argnums", JACOBIAN_CASES)
def test_jacobians_match_jax(kind, argnums):
    rng = np.random.default_rng(4)

    def f(x, m):
        return m @ jnp.sin(x), jnp.sum(jnp.tanh(m @ x) ** 2)

    x, m = rng.normal(size=3).astype(np.float32), rng.normal(size=(2, 3)).astype(np.float32)
    text = _text(f, x, m)
    j = _pipe(text, [kind, "--argnums", argnums])
    nums = tuple(int(a) for a in argnums.split(","))
    ref_fn = getattr(jax, kind)(f, argnums=nums if len(nums) > 1 else nums[0])
    got, ref = together((j, [x, m]), (ref_fn, [x, m]))  # one compilation for both
    _close(got, ref, tol=1e-3)


def _one_row_cases():
    """Jacobians whose standard basis has one row: a scalar (or one-element) output under
    jacrev, a scalar (or one-element) input under jacfwd, both under hessian; an integer
    output's zero Jacobian beside them."""
    rng = np.random.default_rng(7)
    x, m = rng.normal(size=3).astype(np.float32), rng.normal(size=(2, 3)).astype(np.float32)
    s = np.float32(0.7)
    e = rng.normal(size=(1, 1)).astype(np.float32)

    def loss(x, m):
        return jnp.sum(jnp.tanh(m @ x) ** 2)

    def curve(t, x):
        return jnp.sin(t * x), (t * 3).astype(jnp.int32), jnp.cos(t) * x[0]

    def scalar(t):
        return jnp.sin(t) * jnp.exp(t / 2)

    return [
        ("jacrev", loss, (x, m), "0,1", True),
        ("jacrev", lambda x, m: (m @ x)[:1], (x, m), "0,1", True),  # an f32[1] output
        ("jacfwd", curve, (s, x), "0", True),
        ("jacfwd", lambda e, x: jnp.sum(e) * x, (e, x), "0", True),  # an f32[1,1] input
        ("hessian", scalar, (s,), "0", True),
        ("hessian", loss, (x, m), "0", False),  # (jacfwd's basis: 3 rows)
    ]


@pytest.mark.parametrize("case", range(6))
def test_one_row_jacobians_are_the_jvp_or_vjp_at_ones(case):
    """One row of the basis: the Jacobian is the one jvp or vjp at a tangent of ones,
    reshaped, with JAX's values and no more equations than JAX's vmap over an axis of size
    1 (a jacrev of a loss has the gradient's equations)."""
    kind, f, args, argnums, one_row_only = _one_row_cases()[case]
    nums = tuple(int(a) for a in argnums.split(","))
    j = _pipe(_text(f, *args), [kind, "--argnums", argnums])
    ref_fn = getattr(jax, kind)(f, argnums=nums if len(nums) > 1 else nums[0])
    got, ref = together((j, list(args)), (ref_fn, list(args)))  # one compilation for both
    _close(got, ref, tol=1e-4)
    theirs = parse(_text(ref_fn, *args), "<jax>").jaxpr
    assert sum(1 for _ in all_eqns(j)) <= sum(1 for _ in all_eqns(theirs))
    if one_row_only:
        assert not any(e.prim == "iota" for e in all_eqns(j)), "no basis is built for one row"


def test_jacobian_errors(fxy, tmp_path):
    p = tmp_path / "int.jaxpr"
    p.write_text(_text(lambda x, n: (x * n).astype(jnp.int32), np.ones(3, np.float32), np.int32(2)))
    r = run(["jacfwd", "--argnums", "1", str(p)])
    assert r.exit_code == 1 and "jacfwd requires real-valued inputs" in r.output
    r = run(["jacrev", str(p)])
    assert r.exit_code == 1 and "jacrev requires real-valued outputs" in r.output


def test_jacobians_of_a_program_without_outputs_are_jax_s(tmp_path):
    """No outputs: jacfwd is the empty tuple, as JAX's; jacrev and hessian are refused at the
    outputs with JAX's ValueError (its standard basis over no outputs has no dtype)."""

    def f(a, n):
        return ()

    args = (np.ones(2, np.float32), np.int32(1))
    p = tmp_path / "none.jaxpr"
    p.write_text(_text(f, *args))
    assert jax.eval_shape(jax.jacfwd(f), *args) == ()
    assert _pipe(p.read_text(), ["jacfwd"]).outvars == ()
    for kind in ("jacrev", "hessian"):
        with pytest.raises(ValueError, match="at least one array or dtype is required"):
            getattr(jax, kind)(f)(*args)
        r = run([kind, str(p)])
        assert r.exit_code == 1, r.output
        assert "none.jaxpr:1:" in r.output and "at least one array or dtype is required" in r.output
        assert "internal error" not in r.output


def test_check_grad_and_explain_on_batched_programs(tmp_path, fxy):
    out = tmp_path / "batched.jaxpr"
    r = run(["vmap", "--in-axes", "0,None", "--axis-size", "3", str(fxy), "-o", str(out)])
    assert r.exit_code == 0, r.output
    r = run(["--no-color", "check-grad", str(out)])
    assert r.exit_code == 0, r.output
    assert "FAIL" not in r.output and "pass" in r.output
    r = run(["explain", "--no-color", str(out), "--mode", "vjp"])
    assert r.exit_code == 0, r.output


# ---------------------------------------------------------------- the reference corpus


def _corpus_cases(sub):
    from conftest import corpus_files

    out = []
    for p in corpus_files(sub):
        j = parse(p.read_text(), str(p)).jaxpr
        if j.constvars or not j.invars:
            continue
        if all(getattr(v.type, "is_static", False) for v in j.invars):
            out.append((p, j))
    return out


@pytest.mark.parametrize("sub", ["jax-0.12.0.1", "older/jax-0.4.35"])
def test_corpus_batches_checks_and_prints_in_its_style(sub):
    """Every corpus program batches (every input at axis 0), type-checks, and prints back in
    its JAX version's style as text that parses to a program that type-checks."""
    from jaxprtool.ad.api import restyle
    from jaxprtool.text.style import detect_style

    cases = _corpus_cases(sub)
    if not cases:
        pytest.skip("reference corpus not found")
    for p, j in cases:
        st = detect_style(j)
        vj = vmap_jaxpr(j, 0, 0, 2, st)
        text = print_jaxpr(restyle(vj, st), st)
        again = parse(text, "<printed>").jaxpr
        errs = [d for d in check(again, p.name) if d.kind == "error"]
        assert not errs, (p.name, errs)


#: corpus programs that never finish on random inputs, under JAX as under the tool
NONTERMINATING = {
    "vmap_cond_while.jaxpr": "its while loop doubles each value until all reach 10: the sine of "
    "a negative input is negative and never does (jax.vmap loops forever too)",
    "nested_control_flow.jaxpr": "its while loop triples the values until their sum reaches "
    "100: a negative sum never does (JAX loops forever too); which random inputs it gets "
    "depends on the cases before it, which grew as more corpus programs became runnable",
}


@pytest.mark.slow
def test_corpus_matches_jax_vmap():
    """JAX batches the same program (its primitives bound by the evaluator under jax.vmap)."""
    from jaxprtool.backend.values import random_array

    rng = np.random.default_rng(0)
    cases = _corpus_cases("jax-0.12.0.1")
    if not cases:
        pytest.skip("reference corpus not found")
    assert set(NONTERMINATING) <= {p.name for p, _ in cases}, "stale NONTERMINATING entry"
    for p, j in cases:
        if p.name in NONTERMINATING:
            continue
        try:
            backend.check_runnable(j)
        except JaxprError:
            continue
        vj = vmap_jaxpr(j, 0, 0, 2)
        args = [np.stack([random_array(v.type, rng) for _ in range(2)]) for v in j.invars]
        with backend.x64_scope(j):
            got = backend.evaluate(vj, args)
            fn = backend.as_jax_function(j)
            ref = jax.jit(jax.vmap(lambda *xs, fn=fn: fn(*xs)))(*args)
        for g, r in zip(got, ref):
            r = np.asarray(r)
            assert g.shape == r.shape, p.name
            if g.dtype.kind in "fc":
                np.testing.assert_allclose(g, r, rtol=1e-3, atol=1e-3, err_msg=p.name)
            else:
                np.testing.assert_array_equal(g, r, err_msg=p.name)
