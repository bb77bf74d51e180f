"""The element-wise family, the 0.12 jnp HiPrims of binary exponents: `Frexp` (`jnp.frexp`)
and `Ldexp` (`jnp.ldexp`, its inverse and its derivative), both behind
`jax.scipy.sparse.linalg.cg`, which scales its operands by a power of two:

    m:f32[3] e:i32[3] = Frexp[x_aval=f32[3]] x          (x == m * 2**e, |m| in [0.5, 1))
    y:f32[3] = Ldexp[x1_aval=f32[3] x2_aval=i32[3]] x n   (y == x * 2**n)

Zeros, infinities and NaNs give themselves (and e = 0); subnormal operands, and Ldexp's
underflowing results, are flushed to signed zero.  JAX's classes (`jax/_src/numpy/ufuncs.py`,
JAX 0.12.0.1 and 0.12.1) are the reference:

* the shape rules are their `out_aval`s: the (first) operand's type without weak type, and
  Frexp's exponent int32 of its shape; the printed avals must be the operands' types;
* evaluation runs `jax.numpy.frexp` / `jax.numpy.ldexp` on the operands (JAX's own HiPrims on
  0.12, its older lowerings on older JAX);
* `Frexp.jvp`: the mantissa's tangent is `ldexp(x_dot, -e)`, the exponent's a float0 zero (an
  integer result); `Ldexp.jvp`: `ldexp(x1_dot, x2)` (the integer x2 has no tangent).  Both
  emit `Ldexp`, linear in its first operand, so linearize needs nothing more (JAX's
  `linearize_from_jvp`), and `Ldexp.transpose` is `ldexp(ct, x2)` (JAX's `vjp_from_jvp`
  transposes that);
* `batch`: element-wise, the batch axis stays where it is (Ldexp's operands moved to the
  front when their axes differ, the unbatched one broadcast), the avals the batched types.

The capitalised names mark a program as 0.12's (`text.style.detect_style`).
"""

from __future__ import annotations

from ..ad import ops
from ..ad.builder import current
from ..ad.registry import LOW_LEVEL, defjvp, primitive_transposes, rebind_primal
from ..ad.zeros import Zero, is_undefined_primal, is_zero, tangent_type
from ..core import ShapedArray, long_dtype_name
from ..lazy import lazy_module
from ..record import define
from ..shapes import ShapeError, shape_rule
from ..shapes.util import arr, is_int_dtype, nargs

#: the vmap machinery, executed when a batching rule first runs
BT = lazy_module("jaxprtool.ad.batching")


def _aval(t: ShapedArray) -> str:
    """The aval JAX prints for an operand of type `t` (its type, never weak)."""
    return str(t.update(weak_type=False))


def _is_real_float(dtype: str) -> bool:
    return dtype.startswith(("f", "bf")) and dtype != "float0"


def _check_aval(name: str, key: str, printed, t: ShapedArray) -> None:
    """The printed aval `key` must be the operand's type (compared where the type carries
    no mesh or memory annotation the two may spell differently)."""
    if (
        isinstance(printed, str)
        and t.vma is None
        and t.memory_space is None
        and printed != _aval(t)
    ):
        raise ShapeError(f"{name}: {key}={printed} does not match its operand {t}")


def _as_printed(value, out: ShapedArray):
    """A JAX result with the dtype the text gives it (older JAX may differ)."""
    want = long_dtype_name(out.dtype)
    return value if str(value.dtype) == want else value.astype(want)


# ---------------------------------------------------------------- Frexp


@shape_rule("Frexp", multiple_results=True)
def _frexp_shape(in_types, params, out_hint):
    nargs(in_types, 1, "Frexp")
    x = arr(in_types[0], "Frexp", 0)
    if not _is_real_float(x.dtype):
        raise ShapeError(f"Frexp expects a real floating-point operand, got {x}")
    _check_aval("Frexp", "x_aval", params.get("x_aval"), x)
    # JAX's out_aval: x_aval.update(weak_type=False), ShapedArray(x_aval.shape, int32)
    return [x.update(weak_type=False), ShapedArray(x.shape, "i32")]


def _frexp_evaluate(interp, eqn, invals, path):
    import jax.numpy as jnp

    m, e = jnp.frexp(invals[0])
    return [_as_printed(m, eqn.outputs[0].type), _as_printed(e, eqn.outputs[1].type)]


def _frexp_jvp(primals, tangents, **params):
    """JAX's `Frexp.jvp`: m_dot = ldexp(x_dot, -e), the exponent's tangent zero."""
    (t,) = tangents
    m, e = rebind_primal("Frexp", list(primals), params)
    dm = Zero(tangent_type(m.type)) if is_zero(t) else _ldexp(t, ops.neg(e))
    return [m, e], [dm, Zero(tangent_type(e.type))]


def _frexp_batching(args, dims, **params):
    """JAX's `Frexp.batch`: `Frexp(typeof(x))(x)`, both results at the operand's axis."""
    (x,), (d,) = args, dims
    outs = BT.bind(
        "Frexp", x, _out_types=BT.result_types([d, d]), **{**params, "x_aval": _aval(x.type)}
    )
    return outs, [d, d]


define(
    "Frexp",
    evaluate=_frexp_evaluate,
    evaluated_params=frozenset({"x_aval"}),
    jvp=_frexp_jvp,
    jvp_kind=LOW_LEVEL,
    batching=_frexp_batching,
)


# ---------------------------------------------------------------- Ldexp


@shape_rule("Ldexp")
def _ldexp_shape(in_types, params, out_hint):
    nargs(in_types, 2, "Ldexp")
    x1 = arr(in_types[0], "Ldexp", 0)
    x2 = arr(in_types[1], "Ldexp", 1)
    if not _is_real_float(x1.dtype) or not is_int_dtype(x2.dtype):
        raise ShapeError(
            f"Ldexp expects a real floating-point and an integer operand, got {x1}, {x2}"
        )
    if tuple(x1.shape) != tuple(x2.shape):
        raise ShapeError(f"Ldexp: the operands' shapes differ: {x1} and {x2}")
    _check_aval("Ldexp", "x1_aval", params.get("x1_aval"), x1)
    _check_aval("Ldexp", "x2_aval", params.get("x2_aval"), x2)
    return [x1.update(weak_type=False)]  # JAX's out_aval: x1_aval.update(weak_type=False)


def _ldexp(x1, x2):
    """Emit JAX's `Ldexp(typeof(x1), typeof(x2))(x1, x2)`."""
    return ops.bind("Ldexp", x1, x2, x1_aval=_aval(x1.type), x2_aval=_aval(x2.type))


def _ldexp_evaluate(interp, eqn, invals, path):
    import jax.numpy as jnp

    return [_as_printed(jnp.ldexp(*invals), eqn.outputs[0].type)]


def _ldexp_transpose(cts, x1, x2, **params):
    """JAX's `Ldexp.transpose`: the cotangent of x1 is ldexp(ct, x2); x2 is never linear."""
    (ct,) = cts
    if not is_undefined_primal(x1):
        return [None, None]
    if is_undefined_primal(x2):
        from ..core import NotLinear

        raise NotLinear("'Ldexp' is not linear in its integer operand", current().loc)
    return [Zero(tangent_type(x1.type)) if is_zero(ct) else _ldexp(ct, x2), None]


def _ldexp_batching(args, dims, **params):
    """JAX's `Ldexp.batch`: operands batched at different axes (or one not at all) go to
    the front; the result is batched where the first operand is."""
    (x1, x2), (d1, d2) = args, dims
    if d1 != d2:
        x1, x2, d1 = BT.bdim_at_front(x1, d1), BT.bdim_at_front(x2, d2), 0
    return [_ldexp(x1, x2)], [d1]


defjvp("Ldexp", lambda g, x1, x2, **params: _ldexp(g, x2), None)
primitive_transposes["Ldexp"] = _ldexp_transpose
define(
    "Ldexp",
    evaluate=_ldexp_evaluate,
    evaluated_params=frozenset({"x1_aval", "x2_aval"}),
    batching=_ldexp_batching,
)
