"""JVP and transpose rules for element-wise primitives (formulas from JAX's `lax.py`/`special.py`)."""

from __future__ import annotations

import math

from ...core import JaxprError, ShapedArray, is_complex
from .. import ops
from ..builder import current
from ..ops import (
    add,
    cos,
    cosh,
    div,
    eq,
    exp,
    gt,
    integer_pow,
    lit,
    log,
    lt,
    mul,
    neg,
    rsqrt,
    select_n,
    sin,
    sinh,
    square,
    sub,
)
from ..registry import (
    defjvp,
    defjvp2,
    defjvp_zero,
    deflinear,
    deflinear2,
    primitive_jvps,
    primitive_transposes,
    rebind_primal,
    rule_kind,
)
from ..zeros import Zero, instantiate, is_undefined_primal, is_zero, tangent_type


def c(x, v):
    """A scalar literal of x's dtype."""
    return lit(v, x)


def one_minus_square(x):
    return sub(c(x, 1), square(x))


def _acc(params):
    return {"accuracy": params.get("accuracy")}


def zeros_of(x):
    return ops.full(ShapedArray(x.type.shape, x.type.dtype), 0)


def replace_zero(x):
    """x, with zeros replaced by ones (JAX's `_replace_zero`)."""
    return select_n(eq(x, c(x, 0)), x, ops.full(ShapedArray(x.type.shape, x.type.dtype), 1))


def _maybe_real(x):
    return ops.real(x) if is_complex(x.type) else x


def _maybe_conj(x):
    return ops.conj(x) if is_complex(x.type) else x


# ---------------------------------------------------------------- unary

defjvp("sin", lambda g, x, **p: mul(g, cos(x, **_acc(p))))
defjvp("cos", lambda g, x, **p: neg(mul(g, sin(x, **_acc(p)))))
defjvp2("tan", lambda g, ans, x, **p: mul(g, add(c(x, 1), square(ans))))
defjvp("asin", lambda g, x, **p: mul(g, rsqrt(one_minus_square(x))))
defjvp("acos", lambda g, x, **p: mul(g, neg(rsqrt(one_minus_square(x)))))
defjvp("atan", lambda g, x, **p: div(g, add(c(x, 1), square(x))))
defjvp("sinh", lambda g, x, **p: mul(g, cosh(x)))
defjvp("cosh", lambda g, x, **p: mul(g, sinh(x)))
defjvp2("tanh", lambda g, ans, x, **p: mul(g, one_minus_square(ans)))
defjvp("asinh", lambda g, x, **p: mul(g, rsqrt(add(square(x), c(x, 1)))))
defjvp("acosh", lambda g, x, **p: mul(g, mul(rsqrt(sub(x, c(x, 1))), rsqrt(add(x, c(x, 1))))))
defjvp("atanh", lambda g, x, **p: div(g, one_minus_square(x)))
defjvp2("exp", lambda g, ans, x, **p: mul(g, ans))
defjvp2("exp2", lambda g, ans, x, **p: mul(c(x, math.log(2.0)), mul(g, ans)))
defjvp("log", lambda g, x, **p: div(g, x))
defjvp("log2", lambda g, x, **p: div(g, mul(x, c(x, math.log(2.0)))))
defjvp("log1p", lambda g, x, **p: div(g, add(x, c(x, 1))))
defjvp2("expm1", lambda g, ans, x, **p: mul(g, exp(x, **_acc(p))))
defjvp2("logistic", lambda g, ans, x, **p: mul(g, mul(ans, sub(c(ans, 1), ans))))
defjvp2("sqrt", lambda g, ans, x, **p: mul(g, div(c(x, 0.5), ans)))
defjvp2("rsqrt", lambda g, ans, x, **p: mul(g, mul(c(x, -0.5), div(ans, x))))
defjvp2("cbrt", lambda g, ans, x, **p: mul(g, mul(c(x, 1 / 3), integer_pow(ans, -2))))
defjvp2("square", lambda g, ans, x, **p: mul(g, mul(c(x, 2), x)))
defjvp("one_minus_square", lambda g, x, **p: mul(g, mul(c(x, -2), x)))


def _abs_jvp(g, ans, x, **p):
    if is_complex(x.type):
        return _maybe_real(
            mul(g, div(_maybe_conj(x), replace_zero(ops.convert_element_type(ans, x.type.dtype))))
        )
    return select_n(ops.ge(x, c(x, 0)), neg(g), g)


defjvp2("abs", _abs_jvp)


def _sign_jvp(g, ans, x, **p):
    if not is_complex(x.type):
        return Zero(tangent_type(ans.type))
    dtheta = div(ops.imag(mul(ops.conj(ans), g)), replace_zero(ops.abs(x)))
    return mul(ans, ops.complex(zeros_of(dtheta), dtheta))


defjvp2("sign", _sign_jvp)
for _n in ("floor", "ceil", "round", "is_finite", "population_count", "clz", "not"):
    defjvp_zero(_n)

_SQRT_PI = math.sqrt(math.pi)
defjvp("erf", lambda g, x, **p: mul(c(x, 2.0 / _SQRT_PI), mul(g, exp(neg(square(x))))))
defjvp("erfc", lambda g, x, **p: mul(c(x, -2.0 / _SQRT_PI), mul(g, exp(neg(square(x))))))
defjvp2("erf_inv", lambda g, ans, x, **p: mul(c(x, _SQRT_PI / 2.0), mul(g, exp(square(ans)))))
defjvp("lgamma", lambda g, x, **p: mul(g, ops.digamma(x)))
defjvp("digamma", lambda g, x, **p: mul(g, ops.bind("polygamma", c(x, 1), x)))


def _integer_pow_jvp(g, x, *, y):
    if y == 0:
        return Zero(tangent_type(x.type))
    if y == 1:
        return g
    if y == 2:
        return mul(g, mul(c(x, 2), x))
    return mul(g, mul(c(x, y), integer_pow(x, y - 1)))


defjvp("integer_pow", _integer_pow_jvp)


def _real_t(t, x):
    return [ops.complex(t, lit(0, t))]


def _imag_t(t, x):
    return [ops.complex(lit(0, t), neg(t))]


deflinear2("real", _real_t)
deflinear2("imag", _imag_t)


def _conj_jvp(primals, tangents, **params):
    from ..registry import linear_jvp

    return linear_jvp("conj", primals, tangents, **params)


def _conj_transpose(cts, x, **params):
    (t,) = cts
    if is_zero(t):
        return [Zero(x.type)]
    if is_complex(x.type):
        return [ops.conj(t)]
    return [ops.real(t)]


primitive_jvps["conj"] = _conj_jvp
primitive_transposes["conj"] = _conj_transpose
rule_kind["conj"] = "deflinear"


def _complex_t(t, x, y):
    out = []
    for a, part in ((x, ops.real), (y, lambda v: ops.imag(neg(v)))):
        out.append(ops.unbroadcast(a.type, part(t)) if is_undefined_primal(a) else None)
    return out


deflinear2("complex", _complex_t)
deflinear2("neg", lambda t, x: [neg(t)])
deflinear("copy", lambda t, **p: [ops.copy(t)])
deflinear("copy_p", lambda t, **p: [ops.bind("copy_p", t)])
deflinear(
    "reduce_precision",
    lambda t, **p: [ops.reduce_precision(t, p["exponent_bits"], p["mantissa_bits"])],
)


# ---------------------------------------------------------------- binary


def _shape(x):
    return x.type.shape


def _additive_jvp(name, combine, y_sign):
    """JVP of `add` / `sub`: `combine(tx, ty)`, or the lone nonzero tangent (`ty` through
    `y_sign`) broadcast to the result's shape."""

    def rule(primals, tangents, **params):
        tx, ty = tangents
        (ans,) = rebind_primal(name, primals, params)
        if is_zero(tx) and is_zero(ty):
            return [ans], [Zero(tangent_type(ans.type))]
        if is_zero(tx):
            return [ans], [ops.maybe_broadcast(_shape(ans), y_sign(ty))]
        if is_zero(ty):
            return [ans], [ops.maybe_broadcast(_shape(ans), tx)]
        return [ans], [combine(tx, ty)]

    return rule


_add_jvp = _additive_jvp("add", add, lambda t: t)
_sub_jvp = _additive_jvp("sub", sub, neg)


def _ub(a, t):
    return ops.unbroadcast(a.type, t)


def _add_transpose(cts, x, y, **params):
    (t,) = cts
    if is_zero(t):
        return [Zero(tangent_type(a.type)) if is_undefined_primal(a) else None for a in (x, y)]
    return [
        _ub(x, t) if is_undefined_primal(x) else None,
        _ub(y, t) if is_undefined_primal(y) else None,
    ]


def _sub_transpose(cts, x, y, **params):
    (t,) = cts
    if is_zero(t):
        return [Zero(tangent_type(a.type)) if is_undefined_primal(a) else None for a in (x, y)]
    return [
        _ub(x, t) if is_undefined_primal(x) else None,
        _ub(y, neg(t)) if is_undefined_primal(y) else None,
    ]


primitive_jvps["add"] = _add_jvp
primitive_transposes["add"] = _add_transpose
rule_kind["add"] = "jvp+linearization"
primitive_jvps["sub"] = _sub_jvp
primitive_transposes["sub"] = _sub_transpose
rule_kind["sub"] = "jvp+linearization"


def _add_any_jvp(primals, tangents, **params):
    (ans,) = rebind_primal("add_any", primals, params)
    tx, ty = tangents
    if is_zero(tx):
        return [ans], [ty]
    if is_zero(ty):
        return [ans], [tx]
    return [ans], [ops.add_any(tx, ty)]


primitive_jvps["add_any"] = _add_any_jvp
primitive_transposes["add_any"] = _add_transpose
rule_kind["add_any"] = "deflinear"


def _out_dtype_for(a, params):
    """JAX: the transpose of `mul[out_dtype=D]` multiplies into the operand's own dtype."""
    if params.get("out_dtype") is None:
        return {}
    import numpy as np

    from ...core import long_dtype_name

    return {"out_dtype": np.dtype(long_dtype_name(a.type.dtype))}


def _mul_t_left(ct, x, y, **params):
    return _ub(x, mul(ct, y, **_out_dtype_for(x, params)))


def _mul_t_right(ct, x, y, **params):
    return _ub(y, mul(x, ct, **_out_dtype_for(y, params)))


def _mul_jvp(primals, tangents, **params):
    x, y = primals
    tx, ty = tangents
    (ans,) = rebind_primal("mul", primals, params)
    out = Zero(tangent_type(ans.type))
    from ..zeros import add_tangents

    if not is_zero(tx):
        out = add_tangents(out, ops.maybe_broadcast(_shape(ans), mul(tx, y, **params)))
    if not is_zero(ty):
        out = add_tangents(out, ops.maybe_broadcast(_shape(ans), mul(x, ty, **params)))
    return [ans], [out]


def _mul_transpose(cts, x, y, **params):
    (ct,) = cts
    if is_undefined_primal(x) and is_undefined_primal(y):
        raise JaxprError(
            "'mul' is not linear: both operands depend on the linear inputs", current().loc
        )
    if is_undefined_primal(x):
        return [
            Zero(tangent_type(x.type)) if is_zero(ct) else _mul_t_left(ct, x, y, **params),
            None,
        ]
    return [None, Zero(tangent_type(y.type)) if is_zero(ct) else _mul_t_right(ct, x, y, **params)]


primitive_jvps["mul"] = _mul_jvp
primitive_transposes["mul"] = _mul_transpose
rule_kind["mul"] = "defbilinear"

defjvp(
    "div",
    lambda g, x, y, **p: div(g, y),
    lambda g, x, y, **p: mul(mul(neg(g), x), integer_pow(y, -2)),
)


def _div_transpose(cts, x, y, **params):
    (ct,) = cts
    if is_undefined_primal(y):
        raise JaxprError("nonlinear div can't be transposed", current().loc)
    if is_zero(ct):
        return [Zero(tangent_type(x.type)), None]
    return [_ub(x, div(ct, y)), None]


primitive_transposes["div"] = _div_transpose


def _rem_rhs(g, x, y, **p):
    q = div(x, y)
    return mul(neg(g), mul(ops.sign(q), ops.floor(ops.abs(q))))


defjvp("rem", lambda g, x, y, **p: g, _rem_rhs)


def _pow_lhs(g, ans, x, y, **p):
    ydt = y.type.dtype
    if not ydt.startswith(("f", "bf", "c")):
        yc = ops.convert_element_type(y, x.type.dtype)
        shape = _shape(ans)
        xb, yb = ops.maybe_broadcast(shape, x), ops.maybe_broadcast(shape, yc)
        jac = select_n(
            eq(yb, c(yb, 0)), mul(replace_zero(yb), ops.pow(xb, sub(yb, c(yb, 1)))), zeros_of(yb)
        )
        return mul(g, jac)
    return mul(g, mul(y, ops.pow(x, sub(y, c(y, 1)))))


def _pow_rhs(g, ans, x, y, **p):
    return ops.convert_element_type(mul(g, mul(log(replace_zero(x)), ans)), y.type.dtype)


defjvp2("pow", _pow_lhs, _pow_rhs)


def _balanced_cmp(x, y):
    """1 where x > y, 0.5 where x == y, 0 where x < y (JAX's tie splitting)."""
    shape = tuple(x.type.shape) if x.type.ndim >= y.type.ndim else tuple(y.type.shape)
    dt = x.type.dtype
    t = ShapedArray(shape, dt)
    return select_n(gt(x, y), select_n(eq(x, y), ops.full(t, 0), ops.full(t, 0.5)), ops.full(t, 1))


defjvp(
    "max",
    lambda g, x, y, **p: mul(g, _balanced_cmp(x, y)),
    lambda g, x, y, **p: mul(g, _balanced_cmp(y, x)),
)
defjvp(
    "min",
    lambda g, x, y, **p: mul(g, _balanced_cmp(y, x)),
    lambda g, x, y, **p: mul(g, _balanced_cmp(x, y)),
)
defjvp(
    "atan2",
    lambda g, x, y, **p: mul(g, div(y, add(square(x), square(y)))),
    lambda g, x, y, **p: mul(g, div(neg(x), add(square(x), square(y)))),
)
defjvp("nextafter", lambda g, x, y, **p: g, None)

for _n in (
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "eq_to",
    "le_to",
    "lt_to",
    "and",
    "or",
    "xor",
    "shift_left",
    "shift_right_arithmetic",
    "shift_right_logical",
    "mulhi",
    "bitcast_convert_type",
):
    defjvp_zero(_n)


# ---------------------------------------------------------------- select, clamp


def _select_jvp(primals, tangents, **params):
    which, *cases = primals
    (ans,) = rebind_primal("select_n", primals, params)
    ctans = tangents[1:]
    if all(is_zero(t) for t in ctans):
        return [ans], [Zero(tangent_type(ans.type))]
    shape = _shape(ans)
    ts = [ops.maybe_broadcast(shape, instantiate(t)) for t in ctans]
    return [ans], [select_n(which, *ts)]


def _select_transpose(cts, which, *cases, **params):
    (t,) = cts
    if is_undefined_primal(which):
        raise JaxprError("select_n: the predicate cannot be linear", current().loc)
    out = [None]
    if is_zero(t):
        return out + [Zero(tangent_type(x.type)) if is_undefined_primal(x) else None for x in cases]
    z = zeros_of(t)
    for i, x in enumerate(cases):
        if not is_undefined_primal(x):
            out.append(None)
            continue
        branches = [t if j == i else z for j in range(len(cases))]
        out.append(_ub(x, select_n(which, *branches)))
    return out


primitive_jvps["select_n"] = _select_jvp
primitive_transposes["select_n"] = _select_transpose
rule_kind["select_n"] = "jvp+linearization"


def _clamp_lo(g, lo, x, hi, **p):
    g = ops.maybe_broadcast(_shape(x), g) if x.type.ndim > g.type.ndim else g
    return select_n(ops.and_(gt(lo, x), lt(lo, hi)), zeros_of(g), g)


def _clamp_x(g, lo, x, hi, **p):
    return select_n(ops.and_(gt(x, lo), lt(x, hi)), zeros_of(g), g)


def _clamp_hi(g, lo, x, hi, **p):
    g = ops.maybe_broadcast(_shape(x), g) if x.type.ndim > g.type.ndim else g
    return select_n(lt(hi, x), zeros_of(g), g)


defjvp("clamp", _clamp_lo, _clamp_x, _clamp_hi)


# ---------------------------------------------------------------- conversions


def _is_inexact_dtype(dt: str) -> bool:
    return dt.startswith(("f", "bf", "c")) and dt != "float0"


def _convert_jvp(primals, tangents, **params):
    (x,) = primals
    (t,) = tangents
    (ans,) = rebind_primal("convert_element_type", primals, params)
    new, old = ans.type.dtype, x.type.dtype
    if not _is_inexact_dtype(new) or not _is_inexact_dtype(old) or is_zero(t):
        return [ans], [Zero(tangent_type(ans.type))]
    if old.startswith("c") and not new.startswith("c"):
        t = ops.real(t)
    return [ans], [ops.convert_element_type(t, new)]


def _convert_transpose(cts, x, **params):
    (ct,) = cts
    if is_zero(ct):
        return [Zero(tangent_type(x.type))]
    old, new = x.type.dtype, ct.type.dtype
    if not _is_inexact_dtype(old):
        return [Zero(tangent_type(x.type))]
    if new.startswith("c") and not old.startswith("c"):
        ct = ops.real(ct)
    return [ops.convert_element_type(ct, old)]


primitive_jvps["convert_element_type"] = _convert_jvp
primitive_transposes["convert_element_type"] = _convert_transpose
rule_kind["convert_element_type"] = "defjvp2"


def _stop_gradient_jvp(primals, tangents, **params):
    (ans,) = rebind_primal("stop_gradient", primals, params)
    return [ans], [Zero(tangent_type(ans.type))]


primitive_jvps["stop_gradient"] = _stop_gradient_jvp
rule_kind["stop_gradient"] = "defjvp_zero"


defjvp2("reciprocal", lambda g, ans, x, **p: mul(g, neg(square(ans))))
primitive_jvps["add_jaxvals"] = _add_any_jvp
primitive_transposes["add_jaxvals"] = _add_transpose
rule_kind["add_jaxvals"] = "deflinear"
defjvp_zero("iota_2x32_shape")


# ---------------------------------------------------------------- special functions (JAX's special.py)


def _unsupported(msg):
    def fn(g, *args, **params):
        raise JaxprError(msg, current().loc)

    return fn


def _igamma_gradx(g, a, x, **p):
    return mul(g, exp(add(neg(x), sub(mul(sub(a, c(a, 1)), log(x)), ops.lgamma(a)))))


def _igamma_grada(g, a, x, **p):
    return mul(g, ops.bind("igamma_grad_a", a, x))


defjvp("igamma", _igamma_grada, _igamma_gradx)
defjvp(
    "igammac",
    lambda g, a, x, **p: neg(_igamma_grada(g, a, x)),
    lambda g, a, x, **p: neg(_igamma_gradx(g, a, x)),
)
defjvp(
    "polygamma",
    _unsupported("polygamma gradient with respect to m is not supported"),
    lambda g, m, x, **p: mul(g, ops.bind("polygamma", add(m, c(m, 1)), x)),
)


def _betainc_gradx(g, a, b, x, **p):
    lbeta = sub(add(ops.lgamma(a), ops.lgamma(b)), ops.lgamma(add(a, b)))
    return mul(
        exp(sub(add(mul(sub(b, c(b, 1)), log1p_(neg(x))), mul(sub(a, c(a, 1)), log(x))), lbeta)), g
    )


def log1p_(x):
    return ops.log1p(x)


_BETAINC = "Betainc gradient with respect to a and b not supported."
defjvp(
    "regularized_incomplete_beta", _unsupported(_BETAINC), _unsupported(_BETAINC), _betainc_gradx
)
defjvp2(
    "bessel_i0e",
    lambda g, y, x, **p: mul(g, sub(ops.bind("bessel_i1e", x), mul(ops.sign(x), y))),
)


def _bessel_i1e_jvp(g, y, x, **p):
    import numpy as np

    from ...core import long_dtype_name

    eps = float(np.finfo(np.dtype(long_dtype_name(x.type.dtype))).eps)
    not_tiny = gt(ops.abs(x), c(x, eps))
    safe_x = select_n(not_tiny, ops.full(ShapedArray(x.type.shape, x.type.dtype), eps), x)
    dy = sub(ops.bind("bessel_i0e", safe_x), mul(y, add(ops.sign(safe_x), div(c(x, 1), safe_x))))
    dy = select_n(not_tiny, ops.full(ShapedArray(x.type.shape, x.type.dtype), 0.5), dy)
    return mul(g, dy)


defjvp2("bessel_i1e", _bessel_i1e_jvp)
