"""JAX's own AD tests, reproduced against the tool: JAX is the oracle.

The tables follow tests/lax_autodiff_test.py (LAX_GRAD_OPS: op, order, dtypes, the shapes of
`compatible_shapes`, the input distributions; and the structural grad tests: clamp,
concatenate, split, pad, reductions, cumulative reductions, sort, gather/scatter, dynamic
slices, select, dot_general, conv) and the grad cases of tests/lax_control_flow_test.py
(cond, switch, scan, while/fori_loop, associative_scan, map, checkpoint), linear algebra and
fft excepted (their own test files).  For each case the program JAX prints is parsed, its
nested call bodies' constants hoisted (as the AD commands do), and the tool's programs are
printed and parsed again (every program it writes must be self-contained), run, and compared
with JAX:

- jvp with `jax.jvp`, vjp with `jax.vjp` (first order);
- order 2: the jvp of the tool's vjp program with `jax.jvp` of JAX's vjp function, and the
  vjp of the tool's jvp program with `jax.vjp` of JAX's jvp function;
- the linear program of linearize and its transpose: <w, L v> = <L^T w, v>.

The tool's derivative is compared with JAX's derivative (not with finite differences), so
the tolerances are tight: f32/c64 2e-3, f64/c128 1e-6 (JAX's check_grads tolerances, which
bound a finite-difference error, are looser).  The full sweep (every shape and dtype of
JAX's tables, f64 and c128 in 64-bit mode) is marked slow; the default run takes one shape
per op and group.
"""

from __future__ import annotations

import contextlib
import itertools
import re
from dataclasses import dataclass, field

import numpy as np
import pytest
from conftest import needs_corpus

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

from jaxprtool.consts_order import number_constants  # noqa: E402
from jaxprtool.passes.hoist_consts import has_nested_consts  # noqa: E402
from jaxprtool.text.parser import parse  # noqa: E402
from jaxprtool.text.printer import print_jaxpr  # noqa: E402

# ---------------------------------------------------------------- inputs (jtu.rand_*)


def rand_default(shape, dtype, rng):
    return _cast(rng.standard_normal(shape) * 3, rng, dtype, 3)


def rand_small(shape, dtype, rng):
    return _cast(rng.standard_normal(shape) * 1e-3, rng, dtype, 1e-3)


def rand_positive(shape, dtype, rng):
    return _cast(rng.uniform(0.1, 3.0, shape), rng, dtype, None)


def rand_not_small(shape, dtype, rng):
    x = rng.uniform(0.5, 3.0, shape) * rng.choice([-1.0, 1.0], shape)
    return _cast(x, rng, dtype, None)


def rand_uniform(low, high):
    def r(shape, dtype, rng):
        return _cast(rng.uniform(low, high, shape), rng, dtype, None)

    return r


def _cast(x, rng, dtype, imag_scale):
    x = np.asarray(x)
    if np.issubdtype(dtype, np.complexfloating):
        scale = imag_scale if imag_scale is not None else 1.0
        x = x + 1j * rng.standard_normal(np.shape(x)) * scale
    return np.asarray(x, dtype)


# ---------------------------------------------------------------- cases


@dataclass
class Case:
    name: str
    fn: object
    args: list
    order: int = 2
    modes: tuple = ("fwd", "rev")
    x64: bool = False
    tol: float | None = None
    fast: bool = False  # in the default run
    why_not: dict = field(default_factory=dict)  # check -> reason it is expected to fail

    @property
    def id(self):
        return self.name


F32, F64, C64, C128 = np.float32, np.float64, np.complex64, np.complex128
FLOAT = [F32, F64]
COMPLEX = [C64, C128]
INEXACT = FLOAT + COMPLEX
COMPATIBLE_SHAPES = [[(3,)], [(), (3, 4), (3, 1), (1, 4)], [(2, 3, 4), (2, 1, 4)]]

#: LAX_GRAD_OPS of lax_autodiff_test.py: (op, nargs, order, rng, dtypes)
LAX_GRAD_OPS = [
    (lax.neg, 1, 2, rand_default, INEXACT),
    (lax.floor, 1, 2, rand_uniform(0.1, 0.4), FLOAT),
    (lax.ceil, 1, 2, rand_uniform(0.1, 0.4), FLOAT),
    (lax.round, 1, 2, rand_uniform(0.1, 0.4), FLOAT),
    (lax.exp, 1, 2, rand_small, INEXACT),
    (lax.exp2, 1, 2, rand_small, INEXACT),
    (lax.expm1, 1, 2, rand_default, INEXACT),
    (lax.log, 1, 2, rand_positive, INEXACT),
    (lax.log1p, 1, 2, rand_positive, INEXACT),
    (lax.sinh, 1, 2, rand_default, FLOAT + [C64]),
    (lax.cosh, 1, 2, rand_default, INEXACT),
    (lax.tanh, 1, 2, rand_default, INEXACT),
    (lax.sin, 1, 2, rand_default, INEXACT),
    (lax.cos, 1, 2, rand_default, INEXACT),
    (lax.tan, 1, 2, rand_uniform(-1.3, 1.3), INEXACT),
    (lax.asin, 1, 2, rand_uniform(-1.3, 1.3), FLOAT),
    (lax.acos, 1, 2, rand_uniform(-1.3, 1.3), FLOAT),
    (lax.atan2, 2, 2, rand_default, FLOAT),
    (lax.erf, 1, 2, rand_small, FLOAT),
    (lax.erfc, 1, 2, rand_small, FLOAT),
    (lax.erf_inv, 1, 2, rand_small, FLOAT),
    (lax.bessel_i0e, 1, 2, rand_default, FLOAT),
    (lax.bessel_i1e, 1, 2, rand_default, FLOAT),
    (lax.real, 1, 2, rand_default, COMPLEX),
    (lax.imag, 1, 2, rand_default, COMPLEX),
    (lax.complex, 2, 2, rand_default, FLOAT),
    (lax.conj, 1, 2, rand_default, INEXACT),
    (lax.abs, 1, 2, rand_positive, INEXACT),
    (lax.pow, 2, 2, rand_positive, INEXACT),
    (lax.sqrt, 1, 2, rand_positive, FLOAT),
    (lax.sqrt, 1, 2, rand_default, COMPLEX),
    (lax.rsqrt, 1, 2, rand_positive, FLOAT),
    (lax.rsqrt, 1, 2, rand_default, COMPLEX),
    (lax.cbrt, 1, 2, rand_not_small, FLOAT),
    (lax.logistic, 1, 2, rand_default, INEXACT),
    (lax.add, 2, 2, rand_default, INEXACT),
    (lax.sub, 2, 2, rand_default, INEXACT),
    (lax.mul, 2, 2, rand_default, INEXACT),
    (lax.div, 2, 1, rand_not_small, INEXACT),
    (lax.max, 2, 2, rand_default, FLOAT),
    (lax.min, 2, 2, rand_default, FLOAT),
]


def _op_cases():
    out = []
    for k, (op, nargs, order, rng_f, dtypes) in enumerate(LAX_GRAD_OPS):
        first_dtype = True
        for dtype in dtypes:
            for group in COMPATIBLE_SHAPES:
                for shapes in itertools.combinations_with_replacement(group, nargs):
                    rng = np.random.default_rng(1000 + k)
                    args = [rng_f(s, dtype, rng) for s in shapes]
                    sh = "_".join("x".join(map(str, s)) or "s" for s in shapes)
                    name = f"{op.__name__}_{np.dtype(dtype).name}_{sh}"
                    x64 = dtype in (F64, C128)
                    # the default run: the first dtype, one shape (broadcasting for binary ops)
                    fast = first_dtype and shapes in (((3, 4),), ((3, 1), (1, 4)))
                    out.append(Case(name, op, args, order=order, x64=x64, fast=fast))
            first_dtype = False
    return out


def _r(shape, seed, dtype=F32, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(dtype)


def _structural_cases():
    x34, x4 = _r((3, 4), 1), _r((4,), 2)
    idx = np.array([[1], [1], [3]], np.int32)
    dn1 = lax.ScatterDimensionNumbers((), (0,), (0,))
    gdn = lax.GatherDimensionNumbers(
        offset_dims=(1,), collapsed_slice_dims=(0,), start_index_map=(0,)
    )
    return [
        Case("convert_f32_f64", lambda x: lax.convert_element_type(x, F64), [x34], x64=True),
        Case("convert_f32_c64", lambda x: lax.convert_element_type(x, C64), [x34]),
        Case("clamp_operand", lambda x: lax.clamp(x - 10, x, x + 10), [x34], fast=True),
        Case("clamp_all", lax.clamp, [x34 - 1, x34 * 2, x34 + 1], fast=True),
        Case(
            "concatenate",
            lambda a, b, c: lax.concatenate([a, b, c], 1),
            [_r((2, 3), 3), _r((2, 1), 4), _r((2, 4), 5)],
            fast=True,
        ),
        Case("split", lambda x: lax.split(x, (1, 0, 3), 0), [x4], fast=True),
        Case("pad", lambda x: lax.pad(x, 0.5, ((1, 2, 1), (-1, 0, 0))), [x34], fast=True),
        Case("reshape", lambda x: lax.reshape(x, (2, 6)), [x34]),
        Case("transpose", lambda x: lax.transpose(x, (1, 0)), [x34]),
        Case("rev", lambda x: lax.rev(x, (0,)), [x34]),
        Case("broadcast_in_dim", lambda x: lax.broadcast_in_dim(x, (2, 4, 3), (1,)), [x4]),
        Case("squeeze", lambda x: lax.squeeze(x, (0,)), [_r((1, 3), 6)]),
        Case("integer_pow", lambda x: lax.integer_pow(x, 3), [x34], fast=True),
        Case("integer_pow_neg", lambda x: lax.integer_pow(x, -2), [x34 + 5]),
        Case("rem", lax.rem, [x34, x34 * 0 + 0.7], fast=True),
        Case("select_n", lambda p, a, b: lax.select(p, a, b), [x34 > 0, x34, -x34 * 2]),
        Case("reduce_sum", lambda x: jnp.sum(x, 1), [x34], fast=True),
        Case("reduce_max", lambda x: jnp.max(x, 0), [x34], fast=True),
        Case("reduce_min", lambda x: jnp.min(x), [x34]),
        Case("reduce_prod", lambda x: jnp.prod(x, 1), [x34], fast=True),
        Case("argmax_take", lambda x: x[jnp.argmax(x)], [x4]),
        Case("cumsum", lambda x: lax.cumsum(x, 1), [x34], fast=True),
        Case("cumsum_reverse", lambda x: lax.cumsum(x, 0, reverse=True), [x34]),
        Case("cumprod", lambda x: lax.cumprod(x, 1), [x34]),
        Case("cummax", lambda x: lax.cummax(x, 1), [x34], fast=True),
        Case("cumlogsumexp", lambda x: lax.cumlogsumexp(x, 0), [x34]),
        Case(
            "reduce_window_sum",
            lambda x: lax.reduce_window(x, 0.0, lax.add, (2, 2), (1, 1), "VALID"),
            [x34],
            fast=True,
        ),
        Case(
            "reduce_window_max",
            lambda x: lax.reduce_window(x, -np.inf, lax.max, (2, 2), (1, 2), "SAME"),
            [x34],
        ),
        Case("sort", lambda x: lax.sort(x, dimension=1), [x34], fast=True),
        Case("sort_empty", lambda x: lax.sort(x, dimension=0), [_r((0, 3), 7)], fast=True),
        Case("sort_two", lambda x, y: lax.sort((x, y), dimension=0, num_keys=1), [x34, -x34]),
        Case("top_k", lambda x: lax.top_k(x, 2)[0], [x34], fast=True),
        Case("dynamic_slice", lambda x: lax.dynamic_slice(x, (1, 1), (2, 2)), [x34]),
        Case(
            "dynamic_update_slice",
            lambda x, u: lax.dynamic_update_slice(x, u, (1, 2)),
            [x34, _r((2, 2), 8)],
            fast=True,
        ),
        Case(
            "gather",
            lambda x: lax.gather(x, np.array([[2], [0]], np.int32), gdn, (1, 4)),
            [x34],
            fast=True,
        ),
        Case("index_take", lambda x: x[np.array([0, 2, 2])], [x34]),
        Case(
            "scatter_add",
            lambda x, u: lax.scatter_add(x, idx, u, dn1),
            [x4, _r((3,), 9)],
            fast=True,
        ),
        Case(
            "scatter_overlap",
            lambda x, u: lax.scatter(x, idx, u, dn1, unique_indices=False),
            [x4, _r((3,), 9)],
            fast=True,
        ),
        Case(
            "scatter_unique",
            lambda x, u: lax.scatter(
                x, np.array([[0], [2]], np.int32), u, dn1, unique_indices=True
            ),
            [x4, _r((2,), 10)],
        ),
        Case(
            "scatter_mul_unique",
            lambda x, u: lax.scatter_mul(
                x, np.array([[0], [2]], np.int32), u, dn1, unique_indices=True
            ),
            [x4, _r((2,), 10)],
        ),
        Case("at_set", lambda x, u: x.at[np.array([1, 1, 3])].set(u), [x4, _r((3,), 11)]),
        Case("dot_general", lambda a, b: lax.dot(a, b), [x34, _r((4, 2), 12)], fast=True),
        Case(
            "dot_general_batch",
            lambda a, b: lax.dot_general(a, b, (((2,), (1,)), ((0,), (0,)))),
            [_r((2, 3, 4), 13), _r((2, 4, 5), 14)],
        ),
        Case(
            "conv",
            lambda lhs, rhs: lax.conv(lhs, rhs, (1, 1), "SAME", precision=lax.Precision.HIGHEST),
            [_r((2, 2, 3, 4), 15, scale=0.3), _r((3, 2, 1, 2), 16, scale=0.3)],
            fast=True,
        ),
        Case(
            "conv_strided",
            lambda lhs, rhs: lax.conv(lhs, rhs, (2, 1), "VALID", precision=lax.Precision.HIGHEST),
            [_r((2, 3, 3, 4), 17, scale=0.3), _r((2, 3, 1, 2), 18, scale=0.3)],
        ),
        Case("max_broadcast", lax.max, [_r((3, 1), 19), _r((1, 4), 20)], fast=True),
        Case("min_broadcast", lax.min, [_r((3, 1), 21), _r((1, 4), 22)]),
    ]


# control flow: the grad cases of lax_control_flow_test.py


def cond_grad(x):
    return lax.cond(x < 3, lambda x: 3.0 * x, lambda x: jnp.sin(x), x)


def cond_grad2(x):
    """testCondGrad2: a jitted cond whose branch closes over an array (a nested constvar)."""

    def _f(x):
        return lax.cond(
            x[0] < 2, lambda x: jnp.array([1.0, 2.0], x.dtype) * x, lambda x: jnp.sin(x), x
        )

    return jax.jit(_f)(x).sum()


def cond_grad3(x):
    """testCondGrad3: a branch that ignores its operand."""
    return lax.cond(x < 3, lambda x: (x, x * 2.0), lambda x: (3.0, jnp.sin(x)), x)


def cond_grad4(x, y):
    """testCondGrad4: branches closing over the other input."""
    return lax.cond(x < 3, lambda _: jnp.sin(y) * x, lambda _: jnp.cos(x) * y, None)


def switch_grad(i, x):
    return lax.switch(i, [lambda x: jnp.sin(x), lambda x: jnp.cos(x) * x, lambda x: x * x], x)


W_SCAN = _r((3, 3), 30, scale=0.5)
D_SCAN = float(_r((), 31))


def scan_grad(c, as_):
    """testScanGrad: a scalar closed over (a literal) and sums in the body."""

    def f(c, a):
        b = jnp.cos(jnp.sum(jnp.sin(a)) + jnp.sum(jnp.cos(c)) + D_SCAN)
        c = jnp.sin(c * b)
        return c, b

    return lax.scan(f, c, as_)


def scan_jit_consts(c, as_):
    """A jitted scan closing over an array: the jit body has a constvar."""

    def f(c, a):
        return jnp.tanh(W_SCAN @ c + a), c.sum()

    return jax.jit(lambda c, as_: lax.scan(f, c, as_))(c, as_)


def scan_rnn(W, b, h0, xs):
    """testScanRnn."""

    def step(h, x):
        h = jnp.tanh(W @ h + x + b)
        return h, jnp.sum(h**2)

    return lax.scan(step, h0, xs)


def scan_reverse(c, xs):
    return lax.scan(lambda c, x: (c * jnp.cos(x) + x, c * c), c, xs, reverse=True)


def fori_static(x):
    return lax.fori_loop(0, 5, lambda i, c: c * jnp.sin(c) + 0.1, x)


def fori_index(x):
    return lax.fori_loop(0, 4, lambda i, c: c * (i + 1.0) + jnp.cos(c), x)


def while_jvp(x, y):
    """testWhileJVP: forward mode only (reverse mode of while_loop is refused, as JAX does)."""
    return lax.while_loop(
        lambda c: c[0] <= 8, lambda c: (c[0] + 1, c[1] * 2.0, jnp.sin(c[2]) * c[1]), (1, x, y)
    )[1:]


def while_closure(x):
    return lax.while_loop(lambda c: c < 10.0, lambda c: c * 1.5 + x, x)


def fori_dynamic(x, n):
    return lax.fori_loop(0, n, lambda i, c: c * jnp.sin(c) + 0.5, x)


def fori_weak_init(x):
    """A Python-float carry (weak-typed) that the body promotes with an input."""
    return lax.fori_loop(0, 3, lambda i, c: c + i * x, 0.0)


def while_weak_carry(x):
    return lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1] + x * c[0]), (0, 0.0))[1]


def assoc_scan(x):
    return lax.associative_scan(lax.add, x)


def assoc_scan_mul_reverse(x):
    return lax.associative_scan(lax.mul, x, reverse=True)


def map_grad(x):
    return lax.map(lambda r: jnp.sin(r) * r.sum(), x)


def checkpoint_cond(x):
    return jax.checkpoint(
        lambda x: lax.cond(x.sum() < 3, lambda x: W_SCAN @ x, lambda x: jnp.sin(x), x)
    )(x)


def checkpoint_scan(c, xs):
    return jax.checkpoint(lambda c, xs: lax.scan(lambda c, x: (jnp.sin(c) * x, c), c, xs))(c, xs)


def _control_cases():
    c3, xs53 = _r(3, 40), _r((5, 3), 41)
    return [
        Case("cond_grad_true", cond_grad, [F32(1.0)], fast=True),
        Case("cond_grad_false", cond_grad, [F32(4.0)]),
        Case("cond_grad2_jit_const", cond_grad2, [np.array([1.0, 2.0], F32)], fast=True),
        Case("cond_grad2_false", cond_grad2, [np.array([3.0, 2.0], F32)]),
        Case("cond_grad3", cond_grad3, [F32(1.0)], fast=True),
        Case("cond_grad4", cond_grad4, [F32(1.0), F32(0.5)]),
        Case("switch_0", switch_grad, [np.int32(0), c3], fast=True),
        Case("switch_1", switch_grad, [np.int32(1), c3]),
        Case("switch_clamped", switch_grad, [np.int32(7), c3]),
        Case("scan_grad", scan_grad, [_r(4, 47), xs53], fast=True),
        Case("scan_jit_consts", scan_jit_consts, [c3, xs53], fast=True),
        Case("scan_rnn", scan_rnn, [W_SCAN, _r(3, 42), c3, xs53]),
        Case("scan_reverse", scan_reverse, [c3, xs53]),
        Case("fori_static", fori_static, [c3], fast=True),
        Case("fori_index", fori_index, [c3]),
        Case("fori_static_x64", fori_static, [_r(3, 43, F64)], x64=True, fast=True),
        Case("fori_python_scalar_x64", fori_static, [0.5], x64=True, fast=True),
        Case("while_jvp", while_jvp, [F32(1.5), F32(0.3)], order=1, modes=("fwd",), fast=True),
        Case("while_jvp_x64", while_jvp, [1.5, 0.3], order=1, modes=("fwd",), x64=True, fast=True),
        Case("while_closure_x64", while_closure, [0.5], order=1, modes=("fwd",), x64=True),
        Case("fori_dynamic_x64", fori_dynamic, [0.5, 3], order=1, modes=("fwd",), x64=True),
        Case(
            "fori_dynamic_f32_x64",
            fori_dynamic,
            [F32(0.5), np.int32(3)],
            order=1,
            modes=("fwd",),
            x64=True,
            fast=True,
        ),
        Case("fori_weak_init_x64", fori_weak_init, [F32(0.5)], x64=True, fast=True),
        Case("fori_weak_init_f64", fori_weak_init, [0.5], x64=True),
        Case(
            "while_weak_carry_x64", while_weak_carry, [F32(0.5)], order=1, modes=("fwd",), x64=True
        ),
        Case("assoc_scan_add", assoc_scan, [_r(6, 44)], fast=True),
        Case("assoc_scan_mul_reverse", assoc_scan_mul_reverse, [_r(5, 45)]),
        Case("map", map_grad, [_r((4, 3), 46)], fast=True),
        Case("checkpoint_cond", checkpoint_cond, [c3], fast=True),
        Case("checkpoint_scan", checkpoint_scan, [c3, xs53]),
    ]


_OP_CASES = _op_cases()  # (made once: their random inputs are most of the collection's time)
ALL = _OP_CASES + _structural_cases() + _control_cases()

# ---------------------------------------------------------------- harness


def _x64(case):
    return jax.enable_x64(True) if case.x64 else contextlib.nullcontext()


def _inexact(x):
    dtype = x.dtype if hasattr(x, "dtype") else np.asarray(x).dtype
    return np.issubdtype(dtype, np.inexact)


def _leaves(out):
    return [np.asarray(x) for x in jax.tree_util.tree_leaves(out)]


def _closed_consts(closed):
    """The constants of a traced program in `consts_order.number_constants`' order: the
    program's own, then equation by equation, depth first, those of every nested closed
    jaxpr (a call body's, or a jitted call's inside a cond branch or loop body: JAX gives
    cond and loop bodies themselves no constants), parameters in JAX's order."""
    out = [np.asarray(c) for c in closed.consts]
    for e in closed.jaxpr.eqns:
        for v in e.params.values():
            for sub in v if isinstance(v, (tuple, list)) else (v,):
                if hasattr(sub, "consts") and hasattr(sub, "jaxpr"):
                    out += _closed_consts(sub)
    return out


class Program:
    """A program JAX traced, as the tool reads it (nested constants hoisted), with the values
    of its constants."""

    def __init__(self, fn, args, name):
        closed = jax.make_jaxpr(fn)(*args)
        self.jaxpr = number_constants(parse(str(closed), f"<{name}>").jaxpr).program
        self.consts = _closed_consts(closed)
        assert len(self.consts) == len(self.jaxpr.constvars), "hoisted constants' order"

    def written(self, derived):
        """The derived program as the tool writes it: printed, read back, self-contained."""
        back = parse(print_jaxpr(derived), "<derived>").jaxpr
        assert not has_nested_consts(back), "a nested jaxpr has constants the text lacks"
        # the program's constants, or none (linearize's linear part takes residuals instead)
        assert len(back.constvars) in (0, len(self.consts)), "constants the text lacks"
        return back

    def run(self, j, args):
        from jaxprtool import backend

        consts = self.consts if j.constvars else []
        return backend.evaluate(j, [np.asarray(a) for a in args], consts)


def _tol(case, *xs):
    if case.tol is not None:
        return case.tol
    wide = any(np.asarray(x).dtype in (np.float64, np.complex128) for x in xs)
    return 1e-6 if wide else 2e-3


def _close(got, want, tol, what):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
    np.testing.assert_allclose(got, want, atol=tol, rtol=tol, err_msg=what)


def _tangent_like(x, seed):
    x = np.asarray(x)
    rng = np.random.default_rng(seed)
    return _cast(rng.standard_normal(x.shape), rng, x.dtype.type, 1.0)


def _partial(fn, args):
    """fn of the inexact arguments only (the others fixed), its outputs as a flat list."""
    diff = [i for i, a in enumerate(args) if _inexact(a)]

    def f(*xs):
        full = list(args)
        for i, x in zip(diff, xs):
            full[i] = x
        return jax.tree_util.tree_leaves(fn(*full))

    return f, diff


def check_jvp(prog, j, fn, args, case, seed):
    """The tool's jvp of `j` against jax.jvp of `fn` (same inputs)."""
    from jaxprtool.ad.jvp import jvp_jaxpr

    f, diff = _partial(fn, args)
    tans = [_tangent_like(args[i], seed + k) for k, i in enumerate(diff)]
    # JAX's jvp, jitted: one compilation (eagerly, one a primitive)
    want_out, want_t = jax.jit(lambda p, t: jax.jvp(f, p, t))(
        tuple(jnp.asarray(args[i]) for i in diff), tuple(tans)
    )
    got = prog.run(prog.written(jvp_jaxpr(j, diff)), list(args) + tans)
    n = len(want_out)
    want_t = [t for o, t in zip(want_out, want_t) if _inexact(o)]
    assert len(got) == n + len(want_t), "number of outputs"
    tol = _tol(case, *args)
    for k, (g, w) in enumerate(zip(got, _leaves(want_out) + _leaves(want_t))):
        _close(g, w, tol, f"jvp output {k}")


def _cotangents(outs, seed):
    cts_jax, cts_ours = [], []
    for k, o in enumerate(outs):
        if _inexact(o):
            c = _tangent_like(o, seed + k)
            cts_jax.append(jnp.asarray(c))
            cts_ours.append(c)
        else:
            cts_jax.append(np.zeros(np.shape(o), jax.dtypes.float0))
    return cts_jax, cts_ours


def check_vjp(prog, j, fn, args, case, seed):
    """The tool's vjp of `j` against jax.vjp of `fn`."""
    from jaxprtool.ad.api import vjp_jaxpr

    f, diff = _partial(fn, args)
    prim = tuple(jnp.asarray(args[i]) for i in diff)
    shapes = jax.eval_shape(f, *prim)
    cts_jax, cts_ours = _cotangents([np.zeros(o.shape, o.dtype) for o in shapes], seed)

    def outs_and_cts(p):  # JAX's vjp, jitted (the cotangents closed over: float0 ones too)
        out, pull = jax.vjp(f, *p)
        return out, pull(cts_jax)

    want_out, want_ct = jax.jit(outs_and_cts)(prim)
    got = prog.run(prog.written(vjp_jaxpr(j, diff)), list(args) + cts_ours)
    want = _leaves(want_out) + _leaves(want_ct)
    assert len(got) == len(want), "number of outputs"
    tol = _tol(case, *args)
    for k, (g, w) in enumerate(zip(got, want)):
        _close(g, w, tol, f"vjp output {k}")


def check_dot_product(prog, j, args, case, seed):
    """<w, L v> = <L^T w, v> for linearize's linear program and its transpose."""
    from jaxprtool.ad.linearize import linearize_jaxpr
    from jaxprtool.ad.transpose import transpose_jaxpr

    diff = [i for i, a in enumerate(args) if _inexact(a)]
    primal, linear, info = linearize_jaxpr(j, diff)
    primal, linear = prog.written(primal), prog.written(linear)
    outs = prog.run(primal, args)
    n_out = len(j.outvars)
    src = {"input": list(args), "output": outs[:n_out], "new": outs[n_out:], "const": prog.consts}
    res = [np.asarray(src[r.source][r.index]) for r in info.residuals]
    n_res, n_tan = len(res), len(linear.invars) - len(res)
    lt = prog.written(transpose_jaxpr(linear, [False] * n_res + [True] * n_tan))
    v = [
        _tangent_like(np.zeros(x.type.shape, _np_dtype(x)), seed + k)
        for k, x in enumerate(linear.invars[n_res:])
    ]
    lv = prog.run(linear, res + v)
    w = [_tangent_like(x, seed + 50 + k) for k, x in enumerate(lv)]
    ltw = prog.run(lt, res + w)
    assert len(ltw) == len(v)
    # the bilinear pairing (no conjugate: JAX's transpose of a complex linear map)
    lhs = sum(np.sum(np.asarray(a) * np.asarray(b)) for a, b in zip(w, lv))
    rhs = sum(np.sum(np.asarray(a) * np.asarray(b)) for a, b in zip(ltw, v))
    if np.isnan(lhs) and np.isnan(rhs):
        return  # NaN inputs (asin outside [-1, 1], as JAX's table draws them) on both sides
    # real parts: a map between real and complex values (real, imag, conj, complex) is
    # transposed for the real inner product, as JAX transposes it
    lhs, rhs = np.real(lhs), np.real(rhs)
    scale = sum(float(np.abs(np.asarray(a) * np.asarray(b)).sum()) for a, b in zip(w, lv))
    assert abs(lhs - rhs) <= 1e-4 * scale + 1e-5, (lhs, rhs)


def _np_dtype(v):
    from jaxprtool.core import np_dtype

    return np_dtype(v.type.dtype)


def _vjp_fn(fn, args, seed):
    """(x..., ct...) -> (f(x)..., vjp(ct)...): JAX's counterpart of the tool's vjp program."""
    f, diff = _partial(fn, args)
    outs = f(*(jnp.asarray(args[i]) for i in diff))
    _, cts = _cotangents(outs, seed)
    n = len(args)

    def g(*xs_cts):
        xs, cts = list(xs_cts[:n]), list(xs_cts[n:])
        fx, diffx = _partial(fn, xs)
        out, pull = jax.vjp(fx, *(xs[i] for i in diffx))
        it = iter(cts)
        full = [next(it) if _inexact(o) else np.zeros(np.shape(o), jax.dtypes.float0) for o in out]
        return list(out) + list(pull(full))

    return g, list(args) + cts


def _jvp_fn(fn, args, seed):
    """(x..., t...) -> (f(x)..., jvp...): JAX's counterpart of the tool's jvp program."""
    _, diff = _partial(fn, args)
    tans = [_tangent_like(args[i], seed + k) for k, i in enumerate(diff)]
    n = len(args)

    def h(*xs_ts):
        xs, ts = list(xs_ts[:n]), list(xs_ts[n:])
        fx, diffx = _partial(fn, xs)
        out, tout = jax.jvp(fx, tuple(xs[i] for i in diffx), tuple(ts))
        return list(out) + [t for o, t in zip(out, tout) if _inexact(o)]

    return h, list(args) + tans


def run_case(case, check):
    with _x64(case):
        prog = Program(case.fn, case.args, case.name)
        j = prog.jaxpr
        if check == "jvp":
            check_jvp(prog, j, case.fn, case.args, case, 100)
        elif check == "vjp":
            check_vjp(prog, j, case.fn, case.args, case, 200)
        elif check == "dot":
            check_dot_product(prog, j, case.args, case, 300)
        elif check == "fwd_over_rev":
            from jaxprtool.ad.api import vjp_jaxpr

            g, gargs = _vjp_fn(case.fn, case.args, 400)
            diff = [i for i, a in enumerate(case.args) if _inexact(a)]
            j2 = prog.written(vjp_jaxpr(j, diff))
            check_jvp(prog, j2, g, gargs, case, 500)
        elif check == "rev_over_fwd":
            from jaxprtool.ad.jvp import jvp_jaxpr

            h, hargs = _jvp_fn(case.fn, case.args, 600)
            diff = [i for i, a in enumerate(case.args) if _inexact(a)]
            j3 = prog.written(jvp_jaxpr(j, diff))
            check_vjp(prog, j3, h, hargs, case, 700)
        else:
            raise AssertionError(check)


def _checks(case):
    out = []
    if "fwd" in case.modes:
        out.append("jvp")
    if "rev" in case.modes:
        out += ["vjp", "dot"]
    if case.order >= 2:
        if "rev" in case.modes:
            out += ["fwd_over_rev", "rev_over_fwd"]
        else:
            out.append("fwd_over_fwd")
    return out


#: checks of the elementwise ops' default cases left to the slow sweep (time budget)
_OP_CHECKS_SLOW = ("dot", "rev_over_fwd")
_OP_NAMES = {c.name for c in _OP_CASES}


def _params(cases, fast):
    out = []
    for c in cases:
        for chk in _checks(c):
            if chk == "fwd_over_fwd":
                continue  # forward-only loops: the first order is what JAX's tests check
            in_fast = c.fast and not (c.name in _OP_NAMES and chk in _OP_CHECKS_SLOW)
            if in_fast == fast:
                out.append(pytest.param(c, chk, id=f"{c.id}-{chk}"))
    return out


@pytest.mark.parametrize("case,check", _params(ALL, True))
def test_jax_ad(case, check):
    run_case(case, check)


@pytest.mark.slow
@pytest.mark.parametrize("case,check", _params(ALL, False))
def test_jax_ad_full(case, check):
    run_case(case, check)


# ---------------------------------------------------------------- the commands


def test_commands_hoist_nested_constants(tmp_path):
    """jvp, vjp, linearize and grad of a jitted cond closing over an array (JAX's
    testCondGrad2): the written programs take the nested constant as a program constant, and
    `run --consts` with its value gives JAX's numbers."""
    from jax_oracle import run as cli

    x = np.array([1.0, 2.0], F32)
    closed = jax.make_jaxpr(cond_grad2)(x)
    src = tmp_path / "f.jaxpr"
    src.write_text(str(closed))
    consts = _closed_consts(closed)
    np.savez(tmp_path / "c.npz", *consts)
    t = np.array([0.5, -1.0], F32)
    # JAX's numbers in one compile (eagerly, one per operation)
    y, y_t, dx = jax.jit(
        lambda x, t: (cond_grad2(x), jax.jvp(cond_grad2, (x,), (t,))[1], jax.grad(cond_grad2)(x))
    )(x, t)
    want = {"jvp": [y, y_t], "vjp": [y, dx * 0.5], "grad": [dx]}
    inputs = {"jvp": [x, t], "vjp": [x, np.float32(0.5)], "grad": [x]}
    for mode in ("jvp", "vjp", "grad", "linearize"):
        out = tmp_path / f"{mode}.jaxpr"
        r = cli([mode, str(src), "-o", str(out)])
        assert r.exit_code == 0, r.output
        derived = parse(out.read_text(), str(out)).jaxpr
        assert not has_nested_consts(derived) and len(derived.constvars) == len(consts)
        key = "jvp" if mode == "linearize" else mode
        np.savez(tmp_path / "a.npz", *inputs[key])
        r = cli(
            [
                "run",
                str(out),
                "--args",
                str(tmp_path / "a.npz"),
                "--consts",
                str(tmp_path / "c.npz"),
                "-o",
                str(tmp_path / "o.npz"),
            ]
        )
        assert r.exit_code == 0, r.output
        got = np.load(tmp_path / "o.npz")
        got = [got[f"out{k}"] for k in range(len(got.files))]
        for g, w in zip(got, want[key], strict=True):
            np.testing.assert_allclose(g, np.asarray(w), rtol=2e-3, atol=2e-3)


def test_linearize_transpose_without_float_inputs(tmp_path):
    """linearize | transpose of a program whose inputs are all integers follows vjp's
    convention: (x..., ct_y...) -> (y...), one cotangent per float output, none out."""
    from jax_oracle import run as cli

    def f(a):
        return (a * 2).astype(F32) + 1.0

    a = np.array([1, 2, 3], np.int32)
    src = tmp_path / "f.jaxpr"
    src.write_text(str(jax.make_jaxpr(f)(a)))
    lin = cli(["linearize", str(src)])
    assert lin.exit_code == 0, lin.output
    vt = cli(["transpose", "-"], stdin=lin.output)
    vjp = cli(["vjp", str(src)])
    assert vt.exit_code == 0 and vjp.exit_code == 0, vt.output + vjp.output
    got, want = parse(vt.output, "<t>").jaxpr, parse(vjp.output, "<vjp>").jaxpr
    assert [str(v.type) for v in got.invars] == ["i32[3]", "f32[3]"]
    assert [str(v.type) for v in got.outvars] == ["f32[3]"]
    assert [str(v.type) for v in want.invars] == [str(v.type) for v in got.invars]
    assert [str(v.type) for v in want.outvars] == [str(v.type) for v in got.outvars]
    from jaxprtool import backend

    ct = np.ones(3, F32)
    (y,) = backend.evaluate(got, [a, ct])
    np.testing.assert_array_equal(y, np.asarray(f(a)))


@pytest.mark.parametrize(
    "fn,args,drop,param",
    [
        (lambda x: lax.cumsum(x), [_r(3, 50)], ("axis=0 reverse=False", "axis=0"), None),
        (lambda x: lax.sort(x), [_r(3, 51)], ("is_stable=True num_keys=1", "is_stable=True"), None),
        (lambda x: lax.sort(x), [np.ones(3, F32)], r"dimension=0 ", "'dimension'"),
        (
            lambda c, xs: lax.scan(lambda c, x: (c * x, c), c, xs),
            [np.ones(3, F32), np.ones((4, 3), F32)],
            r"\n\s*length=4",
            "'length'",
        ),
    ],
    ids=["cumsum_reverse_default", "sort_num_keys_default", "sort_dimension", "scan_length"],
)
def test_missing_parameters(fn, args, drop, param):
    """A parameter JAX always prints but the text lacks: JAX's default where it has one,
    otherwise a located error that names it (never a crash)."""
    from jaxprtool.ad.api import vjp_jaxpr
    from jaxprtool.core import JaxprError

    text = str(jax.make_jaxpr(fn)(*args))
    if param is None:  # JAX's default: the derivative is JAX's
        full, short = drop
        j = parse(text.replace(full, short), "<cut>").jaxpr
        # the copied primal equation keeps the text as it was; give it back for the back end
        derived = print_jaxpr(vjp_jaxpr(j)).replace(f"[{short}]", f"[{full}]")
        ct = _r(3, 52)
        got = Program(fn, args, "x").run(parse(derived, "<vjp>").jaxpr, list(args) + [ct])
        want = jax.vjp(fn, *args)[1](jnp.asarray(ct))[0]
        np.testing.assert_allclose(got[-1], want, rtol=1e-6, atol=1e-6)
        return
    cut = re.sub(drop, "", text, count=1)
    assert cut != text
    j = parse(cut, "<cut>").jaxpr
    with pytest.raises(JaxprError) as ei:
        vjp_jaxpr(j)
    assert ei.value.loc is not None
    assert param in ei.value.message


#: a binder before the `;` of a `{ lambda`: a jaxpr with constants (the files without a
#: second `lambda` or without one have no nested constants and are not parsed)
_CONSTS_BINDER = re.compile(r"\{\s*lambda\s+[^;\s]")


def _corpus_with_nested_consts() -> list:
    """[(file, program)] of the corpus's printouts with constants inside nested jaxprs: read
    when the test runs (at collection, each xdist worker read them: ~0.5 CPU-s each)."""
    from conftest import CORPUS

    out = []
    for p in sorted(CORPUS.rglob("*.jaxpr")):
        text = p.read_text()
        if text.count("lambda") < 2 or not _CONSTS_BINDER.search(text):
            continue
        try:
            j = parse(text, str(p)).jaxpr
        except Exception:  # noqa: BLE001 - files the parser refuses are other tests' business
            continue
        if has_nested_consts(j):
            out.append((p, j))
    return out


@needs_corpus
def test_corpus_nested_constants_hoisted():
    """JAX's printouts with constants inside nested jaxprs: hoisted, they type-check, and
    every program derived from them is self-contained (the program's constants only)."""
    from jaxprtool.ad.api import vjp_jaxpr
    from jaxprtool.ad.jvp import jvp_jaxpr
    from jaxprtool.check import check, errors
    from jaxprtool.core import JaxprError

    found = _corpus_with_nested_consts()
    assert found  # (the corpus holds such printouts: not a test of nothing)
    for path, j in found:
        h = number_constants(j).program
        assert not has_nested_consts(h), path
        assert len(h.constvars) > len(j.constvars), path
        assert not errors(check(h)), (path, errors(check(h)))
        for transform in (jvp_jaxpr, vjp_jaxpr):
            try:
                derived = transform(h)
            except JaxprError as e:  # a rule the tool lacks, or reverse mode of a while loop
                assert e.loc is not None, path
                continue
            back = parse(print_jaxpr(derived), "<derived>").jaxpr
            assert not has_nested_consts(back), path
            assert len(back.constvars) in (0, len(h.constvars)), path


@pytest.mark.parametrize("window", [False, True], ids=["points", "rows"])
def test_transpose_overlapping_scatter(window):
    """`transpose` of a replacing scatter with repeated indices (a linear program as JAX
    prints it): the cotangent of an update that a later one overwrote is zero, as in JAX's
    vjp of the same function (JAX's own transpose rule takes only unique indices)."""
    from jaxprtool import backend
    from jaxprtool.ad.transpose import transpose_jaxpr

    idx = np.array([[1], [1], [3], [1]], np.int32)
    if window:
        x, u = _r((5, 2), 60), _r((4, 2), 61)
        dn = lax.ScatterDimensionNumbers((1,), (0,), (0,))
    else:
        x, u = _r(5, 60), _r(4, 61)
        dn = lax.ScatterDimensionNumbers((), (0,), (0,))

    def f(x, u):
        return lax.scatter(x, idx, u, dn, unique_indices=False)

    prog = Program(f, [x, u], "scatter")
    t = prog.written(transpose_jaxpr(prog.jaxpr, [True, True]))
    ct = _r(x.shape, 62)
    got = backend.evaluate(t, [ct], prog.consts)
    want = jax.jit(lambda x, u, c: jax.vjp(f, x, u)[1](c))(x, u, ct)  # (eagerly: one a step)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, np.asarray(w), rtol=1e-6, atol=1e-6)
    assert np.count_nonzero(np.asarray(want[1])) < np.asarray(want[1]).size  # losers masked
