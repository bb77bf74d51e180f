"""Element-wise primitives: unary, binary and n-ary maps, comparisons, conversions."""

from __future__ import annotations

from ..core import Literal
from ..passes import simplify as S
from ..record import define
from ..text.param_rules import drop, drop_if_none
from . import ShapeError, shape_rule
from .util import (
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

# dtype classes accepted by an operand
FLOAT, COMPLEX, INT, SINT, BOOL, ANY = "float", "complex", "int", "signed int", "bool", "any"


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


NUM = (INT, FLOAT, COMPLEX)
INEXACT = (FLOAT, COMPLEX)

# ---------------------------------------------------------------- unary

_UNARY = {
    # name: accepted classes, result-dtype function (None: same as operand)
    **{
        n: (INEXACT, None)
        for n in (
            "sin",
            "cos",
            "tan",
            "asin",
            "acos",
            "atan",
            "sinh",
            "cosh",
            "tanh",
            "asinh",
            "acosh",
            "atanh",
            "exp",
            "exp2",
            "log",
            "log2",
            "log1p",
            "expm1",
            "logistic",
            "sqrt",
            "rsqrt",
        )
    },
    **{
        n: ((FLOAT,), None)
        for n in (
            "floor",
            "ceil",
            "round",
            "cbrt",
            "erf",
            "erfc",
            "erf_inv",
            "lgamma",
            "digamma",
            "bessel_i0e",
            "bessel_i1e",
        )
    },
    "neg": (NUM, None),
    "sign": (NUM, None),
    "square": (NUM, None),
    "one_minus_square": (NUM, None),
    "not": ((BOOL, INT), None),
    "population_count": ((INT,), None),
    "clz": ((INT,), None),
    "is_finite": ((FLOAT,), lambda d: "bool"),
    "real": ((COMPLEX,), real_dtype),
    "imag": ((COMPLEX,), real_dtype),
    "abs": ((SINT, FLOAT, COMPLEX), real_dtype),
    "conj": ((FLOAT, COMPLEX), complex_dtype),
    "reduce_precision": ((FLOAT,), None),
    "integer_pow": (NUM, None),
    # identity-typed
    "copy": ((ANY,), None),
    "copy_p": ((ANY,), None),
    "stop_gradient": ((ANY,), None),
    "reciprocal": (INEXACT, None),
}


def _unary(prim):
    classes, res = _UNARY[prim]

    def rule(in_types, params, out_hint):
        x = one_arr(in_types, prim)
        if not is_key_dtype(x.dtype):
            _check_dtype(prim, x, 0, classes)
        if prim == "integer_pow":
            y = int(params.get("y", 1))
            if y < 0 and is_int_dtype(x.dtype):
                raise ShapeError(
                    f"integer_pow: integers cannot be raised to negative powers (y={y})"
                )
        if res is None:
            return [x]
        d = res(x.dtype)
        weak = x.weak_type
        return [x.update(dtype=d, weak_type=weak)]

    return rule


for _n in _UNARY:
    shape_rule(_n)(_unary(_n))


# ---------------------------------------------------------------- binary / n-ary

_NARY = {
    # name: (per-operand classes, result: None=same | "bool" | fn, require same dtypes)
    "add": (NUM + (BOOL,), None, True),
    "sub": (NUM, None, True),
    "mul": (NUM + (BOOL,), None, True),
    "div": (NUM, None, True),
    "rem": ((INT, FLOAT), None, True),
    "max": ((ANY,), None, True),
    "min": ((ANY,), None, True),
    "atan2": (INEXACT, None, True),
    "nextafter": ((FLOAT,), None, True),
    "and": ((BOOL, INT), None, True),
    "or": ((BOOL, INT), None, True),
    "xor": ((BOOL, INT), None, True),
    "shift_left": ((INT,), None, True),
    "shift_right_arithmetic": ((INT,), None, True),
    "shift_right_logical": ((INT,), None, True),
    "mulhi": ((INT,), None, True),
    "igamma": ((FLOAT,), None, True),
    "igammac": ((FLOAT,), None, True),
    "igamma_grad_a": ((FLOAT,), None, True),
    "random_gamma_grad": ((FLOAT,), None, True),
    "polygamma": ((FLOAT,), None, True),
    "zeta": ((FLOAT,), None, True),
    "regularized_incomplete_beta": ((FLOAT,), None, True),
    "_copysign": ((FLOAT,), None, True),
    "copysign": ((FLOAT,), None, True),
    "polynomial": (NUM, None, True),
    **{n: ((ANY,), "bool", True) for n in ("eq", "ne", "eq_to")},
    **{n: ((INT, FLOAT, BOOL), "bool", True) for n in ("lt", "le", "gt", "ge", "le_to", "lt_to")},
    "complex": ((FLOAT,), complex_dtype, True),
}
_ARITY = {"regularized_incomplete_beta": 3}


def _nary(prim):
    classes, res, same = _NARY[prim]

    def rule(in_types, params, out_hint):
        if prim == "polynomial":
            if not in_types:
                raise ShapeError("polynomial expects at least 1 operand, got 0")
        else:
            nargs(in_types, _ARITY.get(prim, 2), prim)
        ts = [arr(t, prim, i) for i, t in enumerate(in_types)]
        for i, t in enumerate(ts):
            if not (prim in ("eq", "ne", "eq_to") and is_key_dtype(t.dtype)):
                _check_dtype(prim, t, i, classes)
        out_dtype = opt_dtype_param(params.get("out_dtype")) if prim == "mul" else None
        if same and out_dtype is None:
            same_dtypes(prim, ts)
        shape = broadcast_shapes(prim, ts)
        if out_dtype is not None:
            d = out_dtype
        elif res is None:
            d = ts[0].dtype
        elif res == "bool":
            d = "bool"
        else:
            d = res(ts[0].dtype)
        weak = all(t.weak_type for t in ts)
        return [mk(shape, d, weak, ts)]

    return rule


for _n in _NARY:
    shape_rule(_n)(_nary(_n))


@shape_rule("pow")
def _pow(in_types, params, out_hint):
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


@shape_rule("add_any", "add_jaxvals")
def _add_any(in_types, params, out_hint):
    nargs(in_types, 2, "add_any")
    x, y = in_types
    if x != y:
        xa, ya = arr(x, "add_any", 0), arr(y, "add_any", 1)
        if (
            xa.dtype != ya.dtype
            or xa.ndim != ya.ndim
            or any(
                isinstance(a, int) and isinstance(b, int) and a != b
                for a, b in zip(xa.shape, ya.shape)
            )
        ):
            raise ShapeError(f"add_any requires operands of the same type, got {x} and {y}")
    return [x]


@shape_rule("select_n")
def _select_n(in_types, params, out_hint):
    if len(in_types) < 2:
        raise ShapeError(
            f"select_n expects a predicate and at least 1 case, got {len(in_types)} operands"
        )
    ts = [arr(t, "select_n", i) for i, t in enumerate(in_types)]
    which, cases = ts[0], ts[1:]
    if which.dtype != "bool" and which.dtype != "i32":
        raise ShapeError(f"select_n: the predicate must be bool or i32, got {which.dtype}")
    c0 = cases[0]
    for c in cases[1:]:
        if c.dtype != c0.dtype:
            raise ShapeError(
                f"select_n: cases must have the same dtype, got {c0.dtype} and {c.dtype}"
            )
        if c.ndim != c0.ndim or any(
            isinstance(a, int) and isinstance(b, int) and a != b for a, b in zip(c.shape, c0.shape)
        ):
            raise ShapeError(f"select_n: cases must have the same shape, got {c0} and {c}")
    if which.ndim and (
        which.ndim != c0.ndim
        or any(
            isinstance(a, int) and isinstance(b, int) and a != b
            for a, b in zip(which.shape, c0.shape)
        )
    ):
        raise ShapeError(
            f"select_n: the predicate must be a scalar or have the cases' shape, got {which} and {c0}"
        )
    return [c0.update(weak_type=all(c.weak_type for c in cases))]


@shape_rule("clamp")
def _clamp(in_types, params, out_hint):
    nargs(in_types, 3, "clamp")
    lo, x, hi = (arr(t, "clamp", i) for i, t in enumerate(in_types))
    for name, b in (("min", lo), ("max", hi)):
        if b.dtype != x.dtype:
            raise ShapeError(f"clamp: {name} has dtype {b.dtype}, operand has {x.dtype}")
        if b.ndim and (
            b.ndim != x.ndim
            or any(
                isinstance(p, int) and isinstance(q, int) and p != q
                for p, q in zip(b.shape, x.shape)
            )
        ):
            raise ShapeError(
                f"clamp: {name} must be a scalar or have the operand's shape, got {b} and {x}"
            )
    return [x]


@shape_rule("convert_element_type")
def _convert(in_types, params, out_hint):
    x = one_arr(in_types, "convert_element_type")
    d = dtype_param(params.get("new_dtype"))
    return [x.update(dtype=d, weak_type=bool(params.get("weak_type", False)))]


@shape_rule("bitcast_convert_type")
def _bitcast(in_types, params, out_hint):
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


# ---------------------------------------------------------------- printing


def _bind_accuracy(eqn, p, dims):
    from ..backend.prims import accuracy_param

    return {"accuracy": accuracy_param(p.get("accuracy"))}


#: unary primitives with JAX's `accuracy` parameter (printed only when not None)
for _n in "exp exp2 log expm1 log1p tanh logistic sin cos tan sqrt rsqrt cbrt erfc".split():
    define(_n, print_params=drop_if_none("accuracy"), bind_params=_bind_accuracy)
define("convert_element_type", print_params=drop("sharding"))
define("mul", print_params=drop_if_none("out_dtype"))


# ---------------------------------------------------------------- simplification
# (each rule keeps value, dtype and shape exactly: see passes/simplify.py)


def _simplify_mul(e, ctx):
    if len(e.inputs) != 2 or S.kind(e.outputs[0]) not in "iufc":
        return None
    x, y = e.inputs
    if S.is_one(ctx.scalar_const(y)):
        return x
    if S.is_one(ctx.scalar_const(x)):
        return y
    return None


def _simplify_div(e, ctx):
    if len(e.inputs) != 2 or S.kind(e.outputs[0]) not in "iufc":
        return None
    x, y = e.inputs
    return x if S.is_one(ctx.scalar_const(y)) else None


def _simplify_additive(e, ctx):
    """`add`, `add_any`, `sub` with an identity operand: 0 for integers, -0.0 for floats
    (the exact additive identity), any zero for `add_any` (AD's zeros)."""
    if len(e.inputs) != 2:
        return None
    x, y = e.inputs
    k = S.kind(e.outputs[0])
    cy, cx = ctx.scalar_const(y), ctx.scalar_const(x)
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


def _simplify_neg(e, ctx):
    if len(e.inputs) != 1:
        return None
    p = ctx.producer(e.inputs[0])
    if p is not None and p.prim == e.prim and len(p.inputs) == 1:
        return p.inputs[0]
    return None


def _simplify_convert(e, ctx):
    if len(e.inputs) != 1 or e.params.get("sharding") is not None:
        return None
    (x,) = e.inputs
    if bool(e.params.get("weak_type", False)) != bool(getattr(x.type, "weak_type", False)):
        return None
    return x  # kept only when the type (dtype and weak_type) is unchanged


def _simplify_identity(e, ctx):
    return e.inputs[0] if len(e.inputs) == 1 else None


def _simplify_select_n(e, ctx):
    if len(e.inputs) < 2:
        return None
    pred, *cases = e.inputs
    if isinstance(pred, Literal) and isinstance(pred.value, (bool, int)):
        i = int(pred.value)
        return cases[i] if 0 <= i < len(cases) else None
    first = cases[0]
    if all(c is first or (isinstance(c, Literal) and c == first) for c in cases):
        return first
    return None


define("mul", simplify=_simplify_mul)
define("div", simplify=_simplify_div)
for _n in ("add", "add_any", "sub"):
    define(_n, simplify=_simplify_additive)
define("neg", simplify=_simplify_neg)
define("convert_element_type", simplify=_simplify_convert)
define("copy", simplify=_simplify_identity)
define("select_n", simplify=_simplify_select_n)
