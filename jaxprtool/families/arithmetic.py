"""The element-wise family, arithmetic half: neg, sign, abs, rounding, powers, complex
parts, bitwise logic, add/sub/mul/div/rem/pow/max/min, comparisons, select_n, clamp and
dtype conversions (the transcendental and special functions are in `transcendental.py`).

Each block holds everything about its primitives: the shape rule, the JVP and transpose
rules (formulas from JAX's `lax.py`), the batching rule (`vectorized` / `broadcasting`, given
by `unary_shapes` / `nary_shapes` as JAX's `unop` / `naryop` do, or JAX's own), printing and
binding of parameters, simplification and constant-folding rules, FLOPs (one per result
element unless set), and the analytic derivative `explain` checks against.  The dtype classes, the shape rules of plain
element-wise maps (`unary_shapes`, `nary_shapes`) and `c` are shared with
`transcendental.py`.
"""

from __future__ import annotations

import math

from ..ad import ops
from ..ad.builder import current
from ..ad.ops import (
    add,
    add_tangents,
    div,
    eq,
    gt,
    instantiate,
    integer_pow,
    lit,
    log,
    lt,
    mul,
    neg,
    select_n,
    square,
    sub,
)
from ..ad.registry import (
    defjvp,
    defjvp2,
    defjvp_zero,
    deflinear,
    deflinear2,
    linear_jvp,
    rebind_primal,
)
from ..ad.zeros import Zero, is_undefined_primal, is_zero, tangent_type
from ..core import (
    Eqn,
    JaxprError,
    Literal,
    NotLinear,
    ShapedArray,
    Var,
    dtype_value,
    is_complex,
)
from ..lazy import lazy_module, np
from ..params import EnumValue
from ..record import batching_rule, define
from ..shapes import ShapeError, shape_rule
from ..shapes.util import (
    arr,
    broadcast_shapes,
    complex_dtype,
    dtype_bits,
    dtype_param,
    is_complex_dtype,
    is_float_dtype,
    is_int_dtype,
    is_key_dtype,
    mk,
    nargs,
    one_arr,
    opt_dtype_param,
    real_dtype,
    same_dtypes,
)
from ..shardings import sharded_size, sharding_param_spec, with_spec
from ..text.param_rules import drop, drop_if_none

#: the vmap machinery, executed when a batching rule first runs
BT = lazy_module("jaxprtool.ad.batching")

#: the passes' helpers that the simplification and folding rules below call, imported when
#: a pass first runs them (reading and printing a program loads this family without them)
F = lazy_module("jaxprtool.passes.fold")
S = lazy_module("jaxprtool.passes.simplify")

# ---------------------------------------------------------------- dtype classes, shape rules

# dtype classes accepted by an operand
FLOAT, COMPLEX, INT, SINT, BOOL, ANY = "float", "complex", "int", "signed int", "bool", "any"
NUM = (INT, FLOAT, COMPLEX)
INEXACT = (FLOAT, COMPLEX)


def _accepts(d: str, classes: tuple[str, ...]) -> bool:
    for c in classes:
        if c == ANY:
            return True
        if c == FLOAT and is_float_dtype(d):
            return True
        if c == COMPLEX and is_complex_dtype(d):
            return True
        if c == INT and is_int_dtype(d):
            return True
        if c == SINT and is_int_dtype(d) and d.startswith("i"):
            return True
        if c == BOOL and d == "bool":
            return True
    return False


def _check_dtype(prim: str, t, i: int, classes: tuple[str, ...]) -> None:
    if t.dtype == "float0":
        raise ShapeError(f"{prim} does not accept a float0 operand (position {i})")
    if not _accepts(t.dtype, classes):
        raise ShapeError(f"{prim} does not accept dtype {t.dtype} at position {i}")


def _to_bool(d: str) -> str:
    return "bool"


def _unary_rule(prim: str, classes, result=None, check=None):
    """One operand of dtype `classes` (any key dtype too); the result has its type, or the
    dtype `result(dtype)`; `check(x, params)` raises on bad parameters."""

    def rule(in_types, params, out_hint):
        x = one_arr(in_types, prim)
        if not is_key_dtype(x.dtype):
            _check_dtype(prim, x, 0, classes)
        if check is not None:
            check(x, params)
        if result is None:
            return [x]
        return [x.update(dtype=result(x.dtype), weak_type=x.weak_type)]

    return rule


def unary_shapes(names: str, classes, result=None, family=None):
    """Register the shape rule of the unary primitives `names` (space separated) and their
    batching rule (`vectorized`, as JAX's `unop` does); `family`: the record's family when
    another module of the family registers them."""
    for n in names.split():
        shape_rule(n)(_unary_rule(n, classes, result))
        define(n, batching=batching_rule("vectorized", n))
        if family is not None:
            define(n, family=family)


def _nary_rule(prim: str, classes, result=None, *, arity=2, keys=False, out_dtype=False):
    """`arity` operands (None: at least one) of one dtype of `classes`, broadcast together
    (scalars against arrays); the result has their dtype or `result(dtype)`.  `keys`: key
    dtypes accepted; `out_dtype`: the parameter of that name, when set, is the result's dtype
    and the operands' dtypes may differ."""

    def rule(in_types, params, out_hint):
        if arity is None:
            if not in_types:
                raise ShapeError(f"{prim} expects at least 1 operand, got 0")
        else:
            nargs(in_types, arity, prim)
        ts = [arr(t, prim, i) for i, t in enumerate(in_types)]
        for i, t in enumerate(ts):
            if not (keys and is_key_dtype(t.dtype)):
                _check_dtype(prim, t, i, classes)
        d = opt_dtype_param(params.get("out_dtype")) if out_dtype else None
        if d is None:
            same_dtypes(prim, ts)
            d = ts[0].dtype if result is None else result(ts[0].dtype)
        shape = broadcast_shapes(prim, ts)
        return [mk(shape, d, all(t.weak_type for t in ts), ts)]

    return rule


def nary_shapes(names: str, classes, result=None, family=None, **kw):
    """Register the shape rule of the n-ary primitives `names` (space separated) and their
    batching rule (`broadcasting`, as JAX's `naryop` does); `family` as for `unary_shapes`."""
    for n in names.split():
        shape_rule(n)(_nary_rule(n, classes, result, **kw))
        define(n, batching=batching_rule("broadcasting", n))
        if family is not None:
            define(n, family=family)


def _same_shape(a, b) -> bool:
    """Equal ranks and equal static sizes (symbolic sizes match anything)."""
    return a.ndim == b.ndim and not any(
        isinstance(p, int) and isinstance(q, int) and p != q for p, q in zip(a.shape, b.shape)
    )


# ---------------------------------------------------------------- shared AD helpers


def c(x, v):
    """A scalar literal of x's dtype."""
    return lit(v, x)


def zeros_of(x):
    return ops.full(ShapedArray(x.type.shape, x.type.dtype), 0)


def replace_zero(x):
    """x, with zeros replaced by ones (JAX's `_replace_zero`)."""
    return select_n(eq(x, c(x, 0)), x, ops.full(ShapedArray(x.type.shape, x.type.dtype), 1))


def _maybe_real(x):
    return ops.real(x) if is_complex(x.type) else x


def _maybe_conj(x):
    return ops.conj(x) if is_complex(x.type) else x


def _shape(x):
    return x.type.shape


def _ub(a, t):
    return ops.unbroadcast(a.type, t)


def _zero_cts(x, y):
    return [Zero(tangent_type(a.type)) if is_undefined_primal(a) else None for a in (x, y)]


# ---------------------------------------------------------------- shared FLOPs and folding


def _no_flops(eqn) -> int:
    return 0


# Constant folding (passes/fold.py): a rule gets the literal operands as numpy scalars and
# returns the result as a numpy scalar of the result's dtype, or None.  Only where numpy
# computes bit for bit what XLA computes: never transcendental functions, rounding, shifts,
# float->int conversions or complex numbers; the pass checks the result is exact (finite,
# not subnormal) and never passes a subnormal operand.


def _folds_in(kinds: str):
    """Decorator: `compute(xs, dtype)` folds when every operand has the result's dtype,
    of a kind in `kinds` ('b' bool, 'i' signed, 'u' unsigned integer, 'f' float)."""

    def wrap(compute):
        def rule(e, xs):
            dt = F.result_dtype(e)
            if any(x.dtype != dt for x in xs) or F.kind(dt) not in kinds:
                return None
            return compute(xs, dt)

        return rule

    return wrap


def _int_division_defined(a, b, dt) -> bool:
    """Integer `a / b` and `a % b` fold unless b == 0 or INT_MIN / -1 (XLA's results)."""
    ia, ib = int(a), int(b)
    return not (ib == 0 or (F.kind(dt) == "i" and ib == -1 and ia == int(np.iinfo(dt).min)))


# ---------------------------------------------------------------- neg


def _simplify_neg(e, ctx):
    if len(e.inputs) != 1:
        return None
    p = ctx.producer(e.inputs[0])
    if p is not None and p.prim == e.prim and len(p.inputs) == 1:
        return p.inputs[0]
    return None


@_folds_in("iuf")
def _fold_neg(xs, dt):
    return np.negative(xs[0])


unary_shapes("neg", NUM)
deflinear2("neg", lambda t, x: [neg(t)])
define(
    "neg",
    simplify=_simplify_neg,
    fold=_fold_neg,
    derivative_formula=("-1", lambda x: -np.ones_like(x)),
)

# ---------------------------------------------------------------- sign, abs


def _sign_jvp(g, ans, x, **p):
    if not is_complex(x.type):
        return Zero(tangent_type(ans.type))
    dtheta = div(ops.imag(mul(ops.conj(ans), g)), replace_zero(ops.abs(x)))
    return mul(ans, ops.complex(zeros_of(dtheta), dtheta))


def _abs_jvp(g, ans, x, **p):
    if is_complex(x.type):
        return _maybe_real(
            mul(g, div(_maybe_conj(x), replace_zero(ops.convert_element_type(ans, x.type.dtype))))
        )
    return select_n(ops.ge(x, c(x, 0)), neg(g), g)


@_folds_in("iu")
def _fold_sign(xs, dt):
    return np.sign(xs[0]).astype(dt)


@_folds_in("iu")
def _fold_abs(xs, dt):
    return np.abs(xs[0])


unary_shapes("sign", NUM)
defjvp2("sign", _sign_jvp)
define("sign", fold=_fold_sign, kink_indicator=lambda e: [ops.sign(e.inputs[0])])

unary_shapes("abs", (SINT, FLOAT, COMPLEX), real_dtype)
defjvp2("abs", _abs_jvp)
define(
    "abs",
    fold=_fold_abs,
    derivative_formula=("sign(x)", lambda x: np.sign(x)),
    kink_indicator=lambda e: [ops.sign(e.inputs[0])],  # not differentiable at 0
)

# ---------------------------------------------------------------- floor, ceil, round, is_finite


def _bind_round(eqn, p, dims):
    import jax

    m = p.get("rounding_method", 0)
    if isinstance(m, EnumValue):
        return {"rounding_method": jax.lax.RoundingMethod[m.member]}
    if isinstance(m, str):
        return {"rounding_method": jax.lax.RoundingMethod[m.split(".")[-1]]}
    return {"rounding_method": jax.lax.RoundingMethod(int(m))}


unary_shapes("floor ceil round", (FLOAT,))
unary_shapes("is_finite", (FLOAT,), _to_bool)
for _n in ("floor", "ceil", "round", "is_finite"):
    defjvp_zero(_n)
define("round", bind_params=_bind_round)
for _n in ("floor", "ceil", "round"):
    define(_n, kink_indicator=lambda e: [e.outputs[0]])  # jumps where the result changes

# ---------------------------------------------------------------- powers
# square, one_minus_square, integer_pow, reciprocal


def _check_integer_pow(x, params):
    y = int(params.get("y", 1))
    if y < 0 and is_int_dtype(x.dtype):
        raise ShapeError(f"integer_pow: integers cannot be raised to negative powers (y={y})")


def _integer_pow_jvp(g, x, *, y):
    if y == 0:
        return Zero(tangent_type(x.type))
    if y == 1:
        return g
    if y == 2:
        return mul(g, mul(c(x, 2), x))
    return mul(g, mul(c(x, y), integer_pow(x, y - 1)))


unary_shapes("square one_minus_square", NUM)
unary_shapes("reciprocal", INEXACT)
shape_rule("integer_pow")(_unary_rule("integer_pow", NUM, check=_check_integer_pow))

defjvp2("square", lambda g, ans, x, **p: mul(g, mul(c(x, 2), x)))
defjvp("one_minus_square", lambda g, x, **p: mul(g, mul(c(x, -2), x)))


def _expand_one_minus_square(prim, params, e, style):
    """`add` 1 and `sub` from 1, then `mul`: (1 + x) * (1 - x), as JAX 0.12 lowers it (bit
    for bit the same; tanh's, asin's, acos's and atanh's derivatives).  Not `1 - square(x)`: near |x| = 1 (tanh's derivative where it saturates)
    that loses the low bits, which a TPU's tanh makes worse (check-grad failed there)."""
    (x,), (out,) = e.inputs, e.outputs
    one = ops.lit(1, out.type.dtype)
    plus, minus = Var(out.type), Var(out.type)
    return [
        Eqn("add", [one, x], [plus], {}, loc=e.loc),
        Eqn("sub", [one, x], [minus], {}, loc=e.loc),
        Eqn("mul", [plus, minus], [out], {}, loc=e.loc),
    ]


define("one_minus_square", restyle=_expand_one_minus_square, first_version=(0, 12))
defjvp("integer_pow", _integer_pow_jvp)
define("integer_pow", batching=batching_rule("vectorized", "integer_pow"))
defjvp2("reciprocal", lambda g, ans, x, **p: mul(g, neg(square(ans))))

define("square", derivative_formula=("2x", lambda x: 2 * x))

# ---------------------------------------------------------------- real, imag, conj, complex


def _real_t(t, x):
    return [ops.complex(t, lit(0, t))]


def _imag_t(t, x):
    return [ops.complex(lit(0, t), neg(t))]


def _conj_jvp(primals, tangents, **params):
    return linear_jvp("conj", primals, tangents, **params)


def _conj_transpose(cts, x, **params):
    (t,) = cts
    if is_zero(t):
        return [Zero(x.type)]
    if is_complex(x.type):
        return [ops.conj(t)]
    return [ops.real(t)]


def _bind_conj(eqn, p, dims):
    from ..backend.prims import dtype_param

    return {"input_dtype": dtype_param(p.get("input_dtype", eqn.inputs[0].type.np_dtype))}


def _complex_t(t, x, y):
    out = []
    for a, part in ((x, ops.real), (y, lambda v: ops.imag(neg(v)))):
        out.append(ops.unbroadcast(a.type, part(t)) if is_undefined_primal(a) else None)
    return out


unary_shapes("real imag", (COMPLEX,), real_dtype)
deflinear2("real", _real_t)
deflinear2("imag", _imag_t)

unary_shapes("conj", (FLOAT, COMPLEX), complex_dtype)
define(
    "conj",
    jvp=_conj_jvp,
    transpose=_conj_transpose,
    jvp_kind="deflinear",
    bind_params=_bind_conj,
)

nary_shapes("complex", (FLOAT,), complex_dtype)
deflinear2("complex", _complex_t)

# ---------------------------------------------------------------- bitwise logic
# not, and, or, xor, shift_left, shift_right_*, population_count, clz, mulhi


@_folds_in("biu")
def _fold_not(xs, dt):
    return np.logical_not(xs[0]) if F.kind(dt) == "b" else np.invert(xs[0])


def _fold_bitwise(ufunc: str):
    """Folding by the numpy ufunc named `ufunc` (looked up when folding: numpy loads lazily)."""
    return _folds_in("biu")(lambda xs, dt: getattr(np, ufunc)(xs[0], xs[1]))


unary_shapes("not", (BOOL, INT))
unary_shapes("population_count clz", (INT,))
nary_shapes("and or xor", (BOOL, INT))
nary_shapes("shift_left shift_right_arithmetic shift_right_logical mulhi", (INT,))
for _n in (
    "not population_count clz and or xor "
    "shift_left shift_right_arithmetic shift_right_logical mulhi"
).split():
    defjvp_zero(_n)
define("not", fold=_fold_not)
define("and", fold=_fold_bitwise("bitwise_and"))
define("or", fold=_fold_bitwise("bitwise_or"))
define("xor", fold=_fold_bitwise("bitwise_xor"))

# ---------------------------------------------------------------- reduce_precision

unary_shapes("reduce_precision", (FLOAT,))
deflinear(
    "reduce_precision",
    lambda t, **p: [ops.reduce_precision(t, p["exponent_bits"], p["mantissa_bits"])],
)

# ---------------------------------------------------------------- copy, copy_p, stop_gradient


def _simplify_identity(e, ctx):
    return e.inputs[0] if len(e.inputs) == 1 else None


def _stop_gradient_jvp(primals, tangents, **params):
    (ans,) = rebind_primal("stop_gradient", primals, params)
    return [ans], [Zero(tangent_type(ans.type))]


unary_shapes("copy copy_p stop_gradient", (ANY,))
deflinear("copy", lambda t, **p: [ops.copy(t)])
deflinear("copy_p", lambda t, **p: [ops.bind("copy_p", t)])
define("stop_gradient", jvp=_stop_gradient_jvp, jvp_kind="defjvp_zero", hides_derivative=True)
define("copy", simplify=_simplify_identity)
for _n in ("copy", "copy_p", "stop_gradient"):
    define(_n, flops=_no_flops)

# ---------------------------------------------------------------- add, sub, add_any, add_jaxvals


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


def _add_transpose(cts, x, y, **params):
    (t,) = cts
    if is_zero(t):
        return _zero_cts(x, y)
    return [
        _ub(x, t) if is_undefined_primal(x) else None,
        _ub(y, t) if is_undefined_primal(y) else None,
    ]


def _sub_transpose(cts, x, y, **params):
    (t,) = cts
    if is_zero(t):
        return _zero_cts(x, y)
    return [
        _ub(x, t) if is_undefined_primal(x) else None,
        _ub(y, neg(t)) if is_undefined_primal(y) else None,
    ]


def _add_any_jvp(primals, tangents, **params):
    (ans,) = rebind_primal("add_any", primals, params)  # add_jaxvals too: rebound as add_any
    tx, ty = tangents
    if is_zero(tx):
        return [ans], [ty]
    if is_zero(ty):
        return [ans], [tx]
    return [ans], [ops.add_any(tx, ty)]


@shape_rule("add_any", "add_jaxvals")
def _add_any_shape(in_types, params, out_hint):
    nargs(in_types, 2, "add_any")
    x, y = in_types
    if x != y:
        xa, ya = arr(x, "add_any", 0), arr(y, "add_any", 1)
        if xa.dtype != ya.dtype or not _same_shape(xa, ya):
            raise ShapeError(f"add_any requires operands of the same type, got {x} and {y}")
    return [x]


def _add_any_batching(name):
    """JAX's `add_batched`: the operands' batch dimensions are matched directly."""

    def rule(args, dims, **params):
        (x, y), (dx, dy) = args, dims
        if dx == dy:
            d = dx
        elif dx is None:
            x, d = BT.broadcast(x, BT.axis_size(), dy), dy
        elif dy is None:
            y, d = BT.broadcast(y, BT.axis_size(), dx), dx
        else:
            x, d = BT.moveaxis(x, dx, dy), dy
        return BT.bind(name, x, y, **params), [d]

    return rule


def _simplify_additive(e, ctx):
    """`add`, `add_any`, `sub` with an identity operand: 0 for integers, -0.0 for floats
    (the exact additive identity), any zero for `add_any` (AD's zeros)."""
    if len(e.inputs) != 2:
        return None
    x, y = e.inputs
    cy, cx = ctx.scalar_const(y), ctx.scalar_const(x)
    if cy is None and cx is None:  # (most equations: no identity among the operands)
        return None
    k = S.kind(e.outputs[0])
    commutes = e.prim != "sub"
    if k in "iu" or (k in "fc" and e.prim == "add_any"):
        if S.is_zero(cy):
            return x
        return y if commutes and S.is_zero(cx) else None
    if k != "f":
        return None
    if e.prim == "add":
        if S.is_neg_zero(cy):
            return x
        return y if S.is_neg_zero(cx) else None
    return x if S.is_pos_zero(cy) else None  # sub x +0.0 == x + -0.0 == x


@_folds_in("iuf")
def _fold_add(xs, dt):
    a, b = xs
    return np.add(a, b)


@_folds_in("iuf")
def _fold_sub(xs, dt):
    a, b = xs
    return np.subtract(a, b)


def _ones(x, y):
    return np.ones_like(x + y)


nary_shapes("add", NUM + (BOOL,))
define(
    "add",
    jvp=_additive_jvp("add", add, lambda t: t),
    transpose=_add_transpose,
    jvp_kind="jvp+linearization",
    simplify=_simplify_additive,
    simplify_needs_constant=True,
    fold=_fold_add,
    derivative_formula=("d/dx = 1, d/dy = 1", lambda x, y: (_ones(x, y), _ones(x, y))),
)
nary_shapes("sub", NUM)
define(
    "sub",
    jvp=_additive_jvp("sub", sub, neg),
    transpose=_sub_transpose,
    jvp_kind="jvp+linearization",
    simplify=_simplify_additive,
    simplify_needs_constant=True,
    fold=_fold_sub,
    derivative_formula=("d/dx = 1, d/dy = -1", lambda x, y: (_ones(x, y), -_ones(x, y))),
)
define(
    "add_any",
    jvp=_add_any_jvp,
    transpose=_add_transpose,
    jvp_kind="deflinear",
    simplify=_simplify_additive,
    simplify_needs_constant=True,
    batching=_add_any_batching("add_any"),
)
define(
    "add_jaxvals",
    jvp=_add_any_jvp,
    transpose=_add_transpose,
    jvp_kind="deflinear",
    batching=_add_any_batching("add_jaxvals"),
)

# ---------------------------------------------------------------- mul


def _out_dtype_for(a, params):
    """JAX: the transpose of `mul[out_dtype=D]` multiplies into the operand's own dtype."""
    if params.get("out_dtype") is None:
        return {}
    return {"out_dtype": dtype_value(a.type.dtype)}


def _mul_t_left(ct, x, y, **params):
    return _ub(x, mul(ct, y, **_out_dtype_for(x, params)))


def _mul_t_right(ct, x, y, **params):
    return _ub(y, mul(x, ct, **_out_dtype_for(y, params)))


def _mul_jvp(primals, tangents, **params):
    x, y = primals
    tx, ty = tangents
    (ans,) = rebind_primal("mul", primals, params)
    out = Zero(tangent_type(ans.type))
    if not is_zero(tx):
        out = add_tangents(out, ops.maybe_broadcast(_shape(ans), mul(tx, y, **params)))
    if not is_zero(ty):
        out = add_tangents(out, ops.maybe_broadcast(_shape(ans), mul(x, ty, **params)))
    return [ans], [out]


def _mul_transpose(cts, x, y, **params):
    (ct,) = cts
    if is_undefined_primal(x) and is_undefined_primal(y):
        raise NotLinear(
            "'mul' is not linear: both operands depend on the linear inputs", current().loc
        )
    if is_undefined_primal(x):
        return [
            Zero(tangent_type(x.type)) if is_zero(ct) else _mul_t_left(ct, x, y, **params),
            None,
        ]
    return [None, Zero(tangent_type(y.type)) if is_zero(ct) else _mul_t_right(ct, x, y, **params)]


def _bind_mul(eqn, p, dims):
    """`out_dtype` always: the text leaves it out where it is None, and JAX's transpose of
    mul requires it (every JAX the tool runs on has it: 0.10 added it, jax-ml/jax#36092);
    bound without it, the program ran, but `jax.vjp` of it failed (check-grad's report of
    JAX's own vjp said nothing of it)."""
    from ..backend.prims import dtype_param

    d = p.get("out_dtype")
    return {"out_dtype": dtype_param(d) if d is not None else None}


def _simplify_mul(e, ctx):
    if len(e.inputs) != 2:
        return None
    x, y = e.inputs
    cy, cx = ctx.scalar_const(y), ctx.scalar_const(x)
    if (cy is None and cx is None) or S.kind(e.outputs[0]) not in "iufc":
        return None
    if S.is_one(cy):
        return x
    if S.is_one(cx):
        return y
    return None


@_folds_in("iuf")
def _fold_mul(xs, dt):
    a, b = xs
    return np.multiply(a, b)


shape_rule("mul")(_nary_rule("mul", NUM + (BOOL,), out_dtype=True))
define(
    "mul",
    jvp=_mul_jvp,
    transpose=_mul_transpose,
    jvp_kind="defbilinear",
    print_params=drop_if_none("out_dtype"),
    bind_params=_bind_mul,
    simplify=_simplify_mul,
    simplify_needs_constant=True,
    fold=_fold_mul,
    derivative_formula=("d/dx = y, d/dy = x", lambda x, y: (y, x)),
    batching=batching_rule("broadcasting", "mul"),
)

# ---------------------------------------------------------------- div, rem


def _div_transpose(cts, x, y, **params):
    (ct,) = cts
    if is_undefined_primal(y):
        raise JaxprError("nonlinear div can't be transposed", current().loc)
    if is_zero(ct):
        return [Zero(tangent_type(x.type)), None]
    return [_ub(x, div(ct, y)), None]


def _simplify_div(e, ctx):
    if len(e.inputs) != 2 or S.kind(e.outputs[0]) not in "iufc":
        return None
    x, y = e.inputs
    return x if S.is_one(ctx.scalar_const(y)) else None


@_folds_in("iuf")
def _fold_div(xs, dt):
    a, b = xs
    if F.kind(dt) in "iu":  # XLA rounds the quotient towards zero
        if not _int_division_defined(a, b, dt):
            return None
        ia, ib = int(a), int(b)
        q = abs(ia) // abs(ib)
        if (ia < 0) != (ib < 0):
            q = -q
        return np.array(q, dtype=dt)
    if float(b) == 0.0:
        return None  # inf/nan: leave alone
    return np.divide(a, b)


def _rem_rhs(g, x, y, **p):
    q = div(x, y)
    return mul(neg(g), mul(ops.sign(q), ops.floor(ops.abs(q))))


@_folds_in("iu")
def _fold_rem(xs, dt):
    a, b = xs
    return np.fmod(a, b).astype(dt) if _int_division_defined(a, b, dt) else None


nary_shapes("div", NUM)
defjvp(
    "div",
    lambda g, x, y, **p: div(g, y),
    lambda g, x, y, **p: mul(mul(neg(g), x), integer_pow(y, -2)),
)
define(
    "div",
    transpose=_div_transpose,
    simplify=_simplify_div,
    simplify_needs_constant=True,
    fold=_fold_div,
    derivative_formula=(
        "d/dx = 1/y, d/dy = -x/y^2",
        lambda x, y: (1 / y + 0 * x, -x / y**2),
    ),
)

nary_shapes("rem", (INT, FLOAT))
defjvp("rem", lambda g, x, y, **p: g, _rem_rhs)
define("rem", fold=_fold_rem)

# ---------------------------------------------------------------- pow


@shape_rule("pow")
def _pow_shape(in_types, params, out_hint):
    nargs(in_types, 2, "pow")
    x, y = (arr(t, "pow", i) for i, t in enumerate(in_types))
    _check_dtype("pow", x, 0, INEXACT)
    _check_dtype("pow", y, 1, NUM)
    if not (is_int_dtype(y.dtype) or x.dtype == y.dtype):
        raise ShapeError(
            f"pow: the exponent must be an integer or have the base's dtype, got {x.dtype} and {y.dtype}"
        )
    shape = broadcast_shapes("pow", [x, y])
    return [mk(shape, x.dtype, x.weak_type and y.weak_type, [x, y])]


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
define(
    "pow",
    draw_domain=lambda e: {0: ("positive",)},  # a fractional power: a positive base
    derivative_formula=(
        "d/dx = y x^(y-1), d/dy = log(x) x^y",
        lambda x, y: (y * x ** (y - 1), np.log(x) * x**y),
    ),
    batching=batching_rule("broadcasting", "pow"),
)

# ---------------------------------------------------------------- max, min


def _balanced_cmp(x, y):
    """1 where x > y, 0.5 where x == y, 0 where x < y (JAX's tie splitting), in the shape
    of the comparison (operands with size-1 dimensions broadcast against each other)."""
    greater, equal = gt(x, y), eq(x, y)
    t = ShapedArray(tuple(greater.type.shape), x.type.dtype)
    return select_n(greater, select_n(equal, ops.full(t, 0), ops.full(t, 0.5)), ops.full(t, 1))


nary_shapes("max min", (ANY,))
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


def _operand_order(e):
    """max/min are not differentiable where the operands tie."""
    x, y = e.inputs
    return [gt(x, y)]


define(
    "max",
    fold=_folds_in("iu")(lambda xs, dt: np.maximum(xs[0], xs[1])),
    kink_indicator=_operand_order,
)
define(
    "min",
    fold=_folds_in("iu")(lambda xs, dt: np.minimum(xs[0], xs[1])),
    kink_indicator=_operand_order,
)

# ---------------------------------------------------------------- nextafter, copysign

nary_shapes("nextafter copysign _copysign", (FLOAT,))
defjvp("nextafter", lambda g, x, y, **p: g, None)

# ---------------------------------------------------------------- comparisons


def _fold_compare(ufunc: str):
    def rule(e, xs):
        a, b = xs
        return getattr(np, ufunc)(a, b) if a.dtype == b.dtype else None

    return rule


nary_shapes("eq ne eq_to", (ANY,), _to_bool, keys=True)
nary_shapes("lt le gt ge le_to lt_to", (INT, FLOAT, BOOL), _to_bool)
for _n in "eq ne lt le gt ge eq_to le_to lt_to".split():
    defjvp_zero(_n)
for _n, _fn in (
    ("eq", "equal"),
    ("ne", "not_equal"),
    ("lt", "less"),
    ("le", "less_equal"),
    ("gt", "greater"),
    ("ge", "greater_equal"),
):
    # random inputs: an integer compared with a counter (`eq labels iota`, a one-hot) is
    # drawn in the counter's range (`draw.py`)
    define(_n, fold=_fold_compare(_fn), draw_domain=lambda e: {0: ("like", 1), 1: ("like", 0)})

# ---------------------------------------------------------------- select_n


@shape_rule("select_n")
def _select_n_shape(in_types, params, out_hint):
    if len(in_types) < 2:
        raise ShapeError(
            f"select_n expects a predicate and at least 1 case, got {len(in_types)} operands"
        )
    ts = [arr(t, "select_n", i) for i, t in enumerate(in_types)]
    which, cases = ts[0], ts[1:]
    if which.dtype != "bool" and which.dtype != "i32":
        raise ShapeError(f"select_n: the predicate must be bool or i32, got {which.dtype}")
    c0 = cases[0]
    for case in cases[1:]:
        if case.dtype != c0.dtype:
            raise ShapeError(
                f"select_n: cases must have the same dtype, got {c0.dtype} and {case.dtype}"
            )
        if not _same_shape(case, c0):
            raise ShapeError(f"select_n: cases must have the same shape, got {c0} and {case}")
    if which.ndim and not _same_shape(which, c0):
        raise ShapeError(
            f"select_n: the predicate must be a scalar or have the cases' shape, got {which} and {c0}"
        )
    return [c0.update(weak_type=all(case.weak_type for case in cases))]


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


def _simplify_select_n(e, ctx):
    if len(e.inputs) < 2:
        return None
    pred, *cases = e.inputs
    if isinstance(pred, Literal) and isinstance(pred.value, (bool, int)):
        i = int(pred.value)
        return cases[i] if 0 <= i < len(cases) else None
    first = cases[0]
    if all(case is first or (isinstance(case, Literal) and case == first) for case in cases):
        return first
    return None


def _fold_select_n(e, xs):
    pred, *cases = xs
    if F.kind(pred.dtype) not in "bi" or not cases:
        return None
    i = int(pred)
    if not 0 <= i < len(cases):
        return None
    case = cases[i]
    return case if case.dtype == F.result_dtype(e) else None


def _select_n_literal_type(e, pos):
    return ShapedArray((), "i32") if pos == 0 else None  # the predicate; cases follow each other


def _select_n_batching(args, dims, **params):
    """JAX's `_select_batch_rule`."""
    which, *cases = args
    wd, *cds = dims
    size = BT.axis_size()
    shape, ndim = BT.shape_of, BT.ndim
    if all(wd == d for d in cds):
        if shape(which) == shape(cases[0]):
            return BT.bind("select_n", which, *cases), [wd]
        which = ops.broadcast_in_dim(which, shape(cases[0]), (wd,))
        return BT.bind("select_n", which, *cases), [wd]
    if ndim(which) == 0 and all(d is not None for d in cds):
        if all(cds[0] == d for d in cds[1:]):
            return BT.bind("select_n", which, *cases), [cds[0]]
        if all(shape(cases[0]) == shape(c) for c in cases):
            d0 = cds[0]
            rest = [BT.moveaxis(c, d, d0) for c, d in zip(cases[1:], cds[1:])]
            return BT.bind("select_n", which, cases[0], *rest), [d0]
    which = BT.bdim_at_front(which, wd, size) if ndim(which) else which
    if not all(shape(c) == () for c in cases):
        cases = [BT.bdim_at_front(c, d, size) for c, d in zip(cases, cds)]
    if 0 < ndim(which) < ndim(cases[0]):
        which = ops.broadcast_in_dim(which, shape(cases[0]), (0,))
    if ndim(which) > ndim(cases[0]):
        cases = [ops.broadcast_in_dim(c, shape(which), ()) for c in cases]
    return BT.bind("select_n", which, *cases), [0]


define(
    "select_n",
    literal_type=_select_n_literal_type,
    jvp=_select_jvp,
    transpose=_select_transpose,
    jvp_kind="jvp+linearization",
    simplify=_simplify_select_n,
    fold=_fold_select_n,
    batching=_select_n_batching,
)

# ---------------------------------------------------------------- clamp


@shape_rule("clamp")
def _clamp_shape(in_types, params, out_hint):
    nargs(in_types, 3, "clamp")
    lo, x, hi = (arr(t, "clamp", i) for i, t in enumerate(in_types))
    for name, b in (("min", lo), ("max", hi)):
        if b.dtype != x.dtype:
            raise ShapeError(f"clamp: {name} has dtype {b.dtype}, operand has {x.dtype}")
        if b.ndim and not _same_shape(b, x):
            raise ShapeError(
                f"clamp: {name} must be a scalar or have the operand's shape, got {b} and {x}"
            )
    return [x]


def _clamp_lo(g, lo, x, hi, **p):
    g = ops.maybe_broadcast(_shape(x), g) if x.type.ndim > g.type.ndim else g
    return select_n(ops.and_(gt(lo, x), lt(lo, hi)), zeros_of(g), g)


def _clamp_x(g, lo, x, hi, **p):
    return select_n(ops.and_(gt(x, lo), lt(x, hi)), zeros_of(g), g)


def _clamp_hi(g, lo, x, hi, **p):
    g = ops.maybe_broadcast(_shape(x), g) if x.type.ndim > g.type.ndim else g
    return select_n(lt(hi, x), zeros_of(g), g)


def _clamp_bounds(e):
    """clamp is not differentiable where x meets a bound."""
    lo, x, hi = e.inputs
    return [gt(x, lo), lt(x, hi)]


def _clamp_batching(args, dims, **params):
    """JAX's `_clamp_batch_rule`."""
    lo, x, hi = args
    ld, xd, hd = dims
    size = BT.axis_size()
    shape, ndim, front = BT.shape_of, BT.ndim, BT.bdim_at_front
    if ld == xd == hd:
        if shape(lo) == shape(x) == shape(hi) or ndim(lo) == ndim(hi) == 0:
            return BT.bind("clamp", lo, x, hi), [xd]
        if ndim(lo) == ndim(hi) == 1:
            lo = ops.broadcast_in_dim(lo, shape(x), (ld,))
            hi = ops.broadcast_in_dim(hi, shape(x), (hd,))
            return BT.bind("clamp", lo, x, hi), [xd]
    elif ndim(lo) == 0 and ndim(hi) == 0 and xd is not None:
        return BT.bind("clamp", lo, x, hi), [xd]
    lo = front(lo, ld, size) if shape(lo) else lo
    hi = front(hi, hd, size) if shape(hi) else hi
    x = front(x, xd, size) if shape(x) else x
    if ndim(lo) == 0 and ndim(x) > 0:
        lo = ops.broadcast_in_dim(lo, shape(x), ())
    if ndim(hi) == 0 and ndim(x) > 0:
        hi = ops.broadcast_in_dim(hi, shape(x), ())
    if 0 < ndim(lo) < ndim(x):
        lo = ops.broadcast_in_dim(lo, shape(x), (0,))
    if 0 < ndim(hi) < ndim(x):
        hi = ops.broadcast_in_dim(hi, shape(x), (0,))
    if ndim(lo) > ndim(x):
        x = ops.broadcast_in_dim(x, shape(lo), ())
    return BT.bind("clamp", lo, x, hi), [0]


defjvp("clamp", _clamp_lo, _clamp_x, _clamp_hi)
define("clamp", kink_indicator=_clamp_bounds, batching=_clamp_batching)

# ---------------------------------------------------------------- convert_element_type


@shape_rule("convert_element_type")
def _convert_shape(in_types, params, out_hint):
    x = one_arr(in_types, "convert_element_type")
    d = dtype_param(params.get("new_dtype"))
    out = x.update(dtype=d, weak_type=bool(params.get("weak_type", False)))
    spec = sharding_param_spec(params.get("sharding"))
    if spec is not None:
        return [out.update(shape=with_spec(x.shape, spec))]
    # JAX prints a `sharding` only in the binder's type (`_convert_elt_type_pp_rule`)
    hint = out_hint[0] if out_hint else None
    if isinstance(hint, ShapedArray) and _global(hint.shape) == _global(x.shape):
        return [out.update(shape=hint.shape)]
    return [out]


def _global(shape) -> tuple:
    return tuple(map(sharded_size, shape))


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


def _bind_convert(eqn, p, dims):
    from ..backend.prims import dtype_param
    from ..backend.sharding import explicit_result_sharding

    return {
        "new_dtype": dtype_param(p.get("new_dtype", eqn.outputs[0].type.np_dtype)),
        "weak_type": bool(p.get("weak_type", False)),
        # a conversion that reshards (a jacfwd basis) binds its result's sharding
        "sharding": explicit_result_sharding(eqn) if _reshards(eqn) else None,
    }


def _reshards(eqn) -> bool:
    x = eqn.inputs[0]
    return hasattr(x, "type") and x.type.shape != eqn.outputs[0].type.shape


def _simplify_convert(e, ctx):
    if len(e.inputs) != 1 or e.params.get("sharding") is not None:
        return None
    (x,) = e.inputs
    if bool(e.params.get("weak_type", False)) != bool(getattr(x.type, "weak_type", False)):
        return None
    return x  # kept only when the type (dtype and weak_type) is unchanged


def _fold_convert(e, xs):
    """Only exact conversions: the value survives the round trip; never float->int/bool."""
    (x,) = xs
    out_dt = F.result_dtype(e)
    k_in, k_out = F.kind(x.dtype), F.kind(out_dt)
    if k_in == "f" and k_out != "f":
        return None  # never float->int / float->bool
    if k_in == "f" and not math.isfinite(float(x)):
        return None
    r = x.astype(out_dt)
    # exact: the value survives the round trip (and, for ints, compares equal)
    if k_out == "b":
        return r if k_in in "iub" else None
    if k_in == "b":
        return r
    back = r.astype(x.dtype)
    if back != x:
        return None
    if k_in in "iu" and k_out in "iu" and int(r) != int(x):
        return None
    if k_in in "iu" and k_out == "f" and int(x) != float(r):
        return None
    return r


define(
    "convert_element_type",
    jvp=_convert_jvp,
    transpose=_convert_transpose,
    jvp_kind="defjvp2",
    print_params=drop("sharding"),
    bind_params=_bind_convert,
    simplify=_simplify_convert,
    fold=_fold_convert,
    batching=batching_rule("vectorized", "convert_element_type"),
)

# ---------------------------------------------------------------- bitcast_convert_type


@shape_rule("bitcast_convert_type")
def _bitcast_shape(in_types, params, out_hint):
    x = one_arr(in_types, "bitcast_convert_type")
    d = dtype_param(params.get("new_dtype"))
    if (
        x.dtype == "bool" or is_complex_dtype(x.dtype) or d == "bool" or is_complex_dtype(d)
    ) and d != x.dtype:
        raise ShapeError(
            f"bitcast_convert_type does not support bool or complex unless the dtypes match "
            f"({x.dtype} -> {d})"
        )
    ob, nb = dtype_bits(x.dtype), dtype_bits(d)
    if ob == nb or not ob or not nb:
        shape = x.shape
    elif ob > nb:
        shape = (*x.shape, ob // nb)
    else:
        last = x.shape[-1] if x.shape else 1
        if isinstance(last, int) and last * ob != nb:
            raise ShapeError(
                f"bitcast_convert_type: cannot convert {x} to {d}: {last} * {ob} != {nb} bits"
            )
        shape = x.shape[:-1]
    return [x.update(shape=shape, dtype=d, weak_type=False)]


def _bind_new_dtype(eqn, p, dims):
    from ..backend.prims import dtype_param

    return {"new_dtype": dtype_param(p["new_dtype"])} if "new_dtype" in p else {}


def _bitcast_batching(args, dims, **params):
    # a narrowing bitcast reads the last axis: the batch axis must not be it
    (x,), (d,) = args, dims
    eqn = BT.current_eqn()
    if d == BT.ndim(x) - 1 and eqn.outputs[0].type.ndim < eqn.inputs[0].type.ndim:
        x, d = BT.moveaxis(x, d, 0), 0
    return BT.bind("bitcast_convert_type", x, _out_types=BT.result_types([d]), **params), [d]


defjvp_zero("bitcast_convert_type")
define(
    "bitcast_convert_type",
    bind_params=_bind_new_dtype,
    flops=_no_flops,
    batching=_bitcast_batching,
)

# ---------------------------------------------------------------- polynomial
# polynomial x c0 c1 ... cN = c0 + c1 x + ... + cN x^N (JAX 0.12, behind jnp.sinc and others);
# the JVP and the transpose (linear in the coefficients) follow JAX's `_polynomial_jvp` and
# `_polynomial_transpose`

nary_shapes("polynomial", NUM, arity=None)


def _polynomial(x, coeffs, params):
    """JAX's `lax.polynomial` wrapper: zeros for no coefficient, the broadcast coefficient for
    one, the primitive otherwise."""
    if not coeffs:
        return zeros_of(x)
    if len(coeffs) == 1:
        return ops.maybe_broadcast(ops.shape(x), coeffs[0])
    return ops.bind("polynomial", x, *coeffs, **params)


def _polynomial_jvp(primals, tangents, **params):
    x, *coeffs = primals
    dx, *dcoeffs = tangents
    y = ops.bind("polynomial", x, *coeffs, **params)
    dy = Zero(tangent_type(y.type))
    if not is_zero(dx):
        deriv = [mul(c(cf, k), cf) for k, cf in enumerate(coeffs[1:], 1)]
        dy = add_tangents(dy, mul(dx, _polynomial(x, deriv, params)))
    if any(not is_zero(t) for t in dcoeffs):
        concrete = [
            ops.zeros(ShapedArray(ops.shape(cf), ops.ty(cf).dtype)) if is_zero(t) else t
            for cf, t in zip(coeffs, dcoeffs)
        ]
        dy = add_tangents(dy, _polynomial(x, concrete, params))
    return [y], [dy]


def _polynomial_transpose(cts, x, *coeffs, **params):
    (ct,) = cts
    if is_undefined_primal(x):
        raise JaxprError(
            "polynomial is linear in its coefficients only: its point x cannot be transposed",
            current().loc,
        )
    if is_zero(ct):
        return [None] + [Zero(cf.type) if is_undefined_primal(cf) else None for cf in coeffs]
    out, xk_ct = [None], ct
    for k, cf in enumerate(coeffs):
        out.append(ops.unbroadcast(cf.type, xk_ct) if is_undefined_primal(cf) else None)
        if k + 1 < len(coeffs):
            xk_ct = mul(xk_ct, x)
    return out


def _older_polynomial(prim, params, e, style):
    """`mul` and `add` by Horner's rule (JAX 0.12's lowering)."""
    x, *coeffs = e.inputs
    (out,) = e.outputs

    def broadcast(a, b):  # the shape of `add a b` (an axis of size 1 stretches)
        return tuple(m if n == 1 else n for n, m in zip(a, b)) if a and b else a or b

    eqns = []
    acc = coeffs[-1]
    for k in range(len(coeffs) - 2, -1, -1):
        cf = coeffs[k]
        shape = broadcast(acc.type.shape, x.type.shape)
        prod = Var(out.type.update(shape=shape, weak_type=False))
        eqns.append(Eqn("mul", [acc, x], [prod], {}, loc=e.loc))
        acc = out if k == 0 else Var(prod.type.update(shape=broadcast(shape, cf.type.shape)))
        eqns.append(Eqn("add", [prod, cf], [acc], {}, loc=e.loc))
    return eqns


define(
    "polynomial",
    jvp=_polynomial_jvp,
    transpose=_polynomial_transpose,
    first_version=(0, 12),
    restyle=_older_polynomial,
)


# ---------------------------------------------------------------- sinpi, cospi, tanpi, ...
# sinpi, cospi, tanpi, asinpi, acospi, atanpi, atan2pi, exp2m1, log2p1 (JAX 0.12.1, in
# `trig.py` and `exp_log.py`): real floats only; the JVPs are JAX's (atanpi's and atan2pi's
# as the tool's atan2: the same quotient, without JAX's overflow-safe `hypot`).  JAX lowers
# each as a long range reduction and polynomial, which no older primitive computes bit for
# bit: no older form (`restyle`), an older installed JAX refuses them at their equation.

_PI, _INV_PI, _LN2 = math.pi, 1.0 / math.pi, math.log(2.0)


def _one_minus_square(x):
    return ops.bind("one_minus_square", x)


def _hypot_sq(x, y):
    return add(square(x), square(y))


unary_shapes("sinpi cospi tanpi asinpi acospi atanpi exp2m1 log2p1", (FLOAT,))
nary_shapes("atan2pi", (FLOAT,))

defjvp("sinpi", lambda g, x, **p: mul(g, mul(c(x, _PI), ops.bind("cospi", x))))
defjvp("cospi", lambda g, x, **p: mul(neg(g), mul(c(x, _PI), ops.bind("sinpi", x))))
defjvp2("tanpi", lambda g, ans, x, **p: mul(g, mul(c(x, _PI), add(c(x, 1), mul(ans, ans)))))
defjvp("asinpi", lambda g, x, **p: mul(g, mul(c(x, _INV_PI), ops.rsqrt(_one_minus_square(x)))))
defjvp("acospi", lambda g, x, **p: mul(neg(g), mul(c(x, _INV_PI), ops.rsqrt(_one_minus_square(x)))))
defjvp("atanpi", lambda g, x, **p: div(mul(g, c(x, _INV_PI)), add(c(x, 1), square(x))))
defjvp(
    "atan2pi",
    lambda g, x, y, **p: mul(g, div(mul(c(y, _INV_PI), y), _hypot_sq(x, y))),
    lambda g, x, y, **p: mul(g, div(mul(c(x, -_INV_PI), x), _hypot_sq(x, y))),
)
defjvp("exp2m1", lambda g, x, **p: mul(g, mul(c(x, _LN2), ops.exp2(x))))
defjvp("log2p1", lambda g, x, **p: div(g, mul(add(x, c(x, 1)), c(x, _LN2))))

for _n, _formula in (
    ("sinpi", ("pi cos(pi x)", lambda x: np.pi * np.cos(np.pi * x))),
    ("cospi", ("-pi sin(pi x)", lambda x: -np.pi * np.sin(np.pi * x))),
    ("tanpi", ("pi (1 + tan(pi x)^2)", lambda x: np.pi * (1 + np.tan(np.pi * x) ** 2))),
    ("asinpi", ("1/(pi sqrt(1-x^2))", lambda x: 1 / (np.pi * np.sqrt(1 - x**2)))),
    ("acospi", ("-1/(pi sqrt(1-x^2))", lambda x: -1 / (np.pi * np.sqrt(1 - x**2)))),
    ("atanpi", ("1/(pi (1+x^2))", lambda x: 1 / (np.pi * (1 + x**2)))),
    (
        "atan2pi",
        (
            "d/dx = y/(pi (x^2+y^2)), d/dy = -x/(pi (x^2+y^2))",
            lambda x, y: (y / (np.pi * (x**2 + y**2)), -x / (np.pi * (x**2 + y**2))),
        ),
    ),
    ("exp2m1", ("log(2) 2^x", lambda x: np.log(2) * np.exp2(x))),
    ("log2p1", ("1/((1+x) log(2))", lambda x: 1 / ((1 + x) * np.log(2)))),
):
    define(_n, derivative_formula=_formula, first_version=(0, 12, 1))

# ---------------------------------------------------------------- fma, fmuladd
# a * b + c (JAX 0.12.1): fma rounds once; fmuladd may round the product or not.  Linear in
# c, and in a or b while the other is fixed: JAX's `_fma_jvp` accumulates the tangents with
# the primitive itself, its `_fma_transpose` is mul's for a and b and the identity for c.
# fma has no older form (a product rounded apart from its sum is not fma); fmuladd runs as
# `mul` then `add`, JAX's own lowering of it on TPU and with an older jaxlib.


def _fma_jvp(name):
    def rule(primals, tangents, **params):
        a, b, _ = primals
        ta, tb, tc = tangents
        (ans,) = rebind_primal(name, primals, params)
        acc = tc
        if not is_zero(tb):
            acc = mul(a, tb) if is_zero(acc) else ops.bind(name, a, tb, acc)
        if not is_zero(ta):
            acc = mul(ta, b) if is_zero(acc) else ops.bind(name, ta, b, acc)
        if is_zero(acc):
            return [ans], [Zero(tangent_type(ans.type))]
        return [ans], [ops.maybe_broadcast(_shape(ans), acc)]

    return rule


def _fma_transpose(name):
    def rule(cts, a, b, c_, **params):
        (ct,) = cts
        if is_undefined_primal(a) and is_undefined_primal(b):
            raise NotLinear(
                f"'{name}' is not linear: both factors depend on the linear inputs", current().loc
            )
        args = (a, b, c_)
        if is_zero(ct):
            return [Zero(tangent_type(x.type)) if is_undefined_primal(x) else None for x in args]
        return [
            _ub(a, mul(ct, b)) if is_undefined_primal(a) else None,
            _ub(b, mul(a, ct)) if is_undefined_primal(b) else None,
            _ub(c_, ct) if is_undefined_primal(c_) else None,
        ]

    return rule


def _older_fmuladd(prim, params, e, style):
    """`mul` then `add`: a * b + c, as JAX 0.12.1 lowers fmuladd on a TPU and with an older
    jaxlib (fmuladd lets the product round or not)."""
    a, b, c_ = e.inputs
    (out,) = e.outputs
    prod = Var(out.type.update(shape=broadcast_shapes("mul", [a.type, b.type]), weak_type=False))
    return [
        Eqn("mul", [a, b], [prod], {}, loc=e.loc),
        Eqn("add", [prod, c_], [out], {}, loc=e.loc),
    ]


nary_shapes("fma fmuladd", (FLOAT,), arity=3)
for _n in ("fma", "fmuladd"):
    define(
        _n,
        jvp=_fma_jvp(_n),
        transpose=_fma_transpose(_n),
        jvp_kind="jvp+linearization",
        first_version=(0, 12, 1),
    )
define("fmuladd", restyle=_older_fmuladd)


# ---------------------------------------------------------------- cheap constants
# linearize recomputes residuals built only from literals with these (AD's zeros, the 0.5 of
# a square root's derivative) in the linear program, instead of passing them as residuals
for _n in ("convert_element_type", "select_n", "eq", "ne", "gt", "lt", "ge", "le"):
    define(_n, recompute_constant=True)
for _n in ("neg", "mul", "add", "sub", "div"):
    define(_n, recompute_constant=True)

# rematerialization (ad/remat/): element-wise equations are cheap to recompute
for _n in """abs acos acosh asin asinh atan atanh bessel_i0e bessel_i1e cbrt ceil clz conj copy
copy_p cos cosh digamma erf erf_inv erfc exp exp2 expm1 floor imag integer_pow is_finite lgamma
log log1p log2 logistic neg not one_minus_square population_count real reciprocal
reduce_precision round rsqrt sign sin sinh sqrt square tan tanh convert_element_type
stop_gradient add sub mul div rem pow max min atan2 nextafter and or xor eq ne lt le gt ge eq_to
lt_to le_to shift_left shift_right_arithmetic shift_right_logical mulhi complex igamma igammac
igamma_grad_a polygamma zeta regularized_incomplete_beta copysign _copysign polynomial select_n
clamp add_any add_jaxvals sinpi cospi tanpi asinpi acospi atanpi atan2pi exp2m1 log2p1
fma fmuladd""".split():
    define(_n, remat="cheap")
