"""Constant folding of scalar equations whose operands are all literals.

Only where numpy computes bit for bit what XLA computes: add, sub, mul, div,
neg, comparisons, select_n, max/min/abs/sign/rem on integers, boolean and
integer bitwise logic (and, or, xor, not), and exact conversions
(`convert_element_type` whose value survives the round trip; never float->int).
Arithmetic is done in the result dtype with numpy (integers wrap as XLA's do);
integer division or remainder by zero (and INT_MIN / -1) is left alone, as are
float results that are not finite or are subnormal (XLA may flush those), and
complex numbers.  Never transcendental functions, rounding, shifts or
float->int conversions.
"""

from __future__ import annotations

import math

import numpy as np

from ..core import Jaxpr, Literal, ShapedArray, np_dtype
from .base import Pass
from .common import EqnRewrite, eqn_has_effects, recursive_pass

_ARITH = {"add", "sub", "mul", "div", "neg"}
_COMPARE = {
    "eq": np.equal,
    "ne": np.not_equal,
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
}
_INT_ONLY = {"max", "min", "abs", "sign", "rem"}
_LOGIC = {"and", "or", "xor", "not"}
FOLDABLE = _ARITH | set(_COMPARE) | _INT_ONLY | _LOGIC | {"select_n", "convert_element_type"}


def fold(jaxpr: Jaxpr) -> Jaxpr:
    """Replace scalar equations on literals by their literal result."""
    return recursive_pass(jaxpr, _fold)


FOLD = Pass(
    name="fold",
    help="Constant-fold scalar equations on literals, bit-exactly.",
    doc="""Constant-fold scalar equations whose operands are all literals, where numpy computes
    exactly what XLA does (add sub mul div neg, comparisons, select_n, integer and boolean
    arithmetic, exact conversions).  Never transcendental functions, rounding or float->int.

    \b
    Example:
      jaxprtool fold f.jaxpr
    """,
    fn=fold,
)


def _fold(jaxpr: Jaxpr, go) -> Jaxpr:
    rw = EqnRewrite(jaxpr, go)
    for e in rw:
        if e.prim in FOLDABLE and len(e.outputs) == 1:
            lit = fold_eqn(e.prim, e.inputs, e.params, e.outputs[0].type)
            if lit is not None and not eqn_has_effects(e):
                rw.drop(e.outputs, (lit,))
                continue
        rw.keep(e)
    return rw.result()


def _kind(dt: np.dtype) -> str:
    if dt == np.bool_:
        return "b"
    if np.issubdtype(dt, np.signedinteger):
        return "i"
    if np.issubdtype(dt, np.unsignedinteger):
        return "u"
    if dt.kind == "f" or dt.name in ("bfloat16", "float16") or _is_ml_float(dt):
        return "f"
    return "?"


def _is_ml_float(dt) -> bool:
    try:
        import ml_dtypes

        ml_dtypes.finfo(dt)
        return True
    except Exception:
        return False


_FLOATS = ("float16", "bfloat16", "float32", "float64")
_SUB_BYTE = ("int4", "uint4", "int2", "uint2")


def _fold_kind(dt: np.dtype) -> str | None:
    """The kind ('b', 'i', 'u', 'f') of a dtype fold computes in, else None (complex,
    sub-byte integers, fp8 formats)."""
    k = _kind(dt)
    if k == "?" or dt.name in _SUB_BYTE or (k == "f" and dt.name not in _FLOATS):
        return None
    return k


def _np_scalar(lit: Literal):
    t = lit.type
    if not isinstance(t, ShapedArray) or t.shape != () or isinstance(lit.value, (complex, str)):
        return None
    try:
        dt = np_dtype(t.dtype)
    except KeyError:
        return None
    k = _fold_kind(dt)
    if k is None or dt.itemsize * 8 < 8:
        return None
    v = lit.value
    try:
        arr = np.array(v, dtype=dt)
    except (OverflowError, ValueError, TypeError):
        return None
    # the literal must denote exactly this value
    if k in "iu" and (not isinstance(v, (int, bool)) or int(arr) != v):
        return None
    return arr


def fold_eqn(prim: str, inputs, params, out_type) -> Literal | None:
    """The literal result of `prim` on literal operands, or None when it must not be folded."""
    if not all(isinstance(a, Literal) for a in inputs) or not inputs:
        return None
    if not isinstance(out_type, ShapedArray) or out_type.shape != ():
        return None
    try:
        out_dt = np_dtype(out_type.dtype)
    except KeyError:
        return None
    ok = _fold_kind(out_dt)
    if ok is None:
        return None
    xs = [_np_scalar(a) for a in inputs]
    if any(x is None for x in xs):
        return None
    kinds = [_kind(x.dtype) for x in xs]
    with np.errstate(all="ignore"):
        try:
            r = _compute(prim, xs, kinds, params, out_dt, ok)
        except (ArithmeticError, ValueError, TypeError):
            return None
    if r is None:
        return None
    r = np.asarray(r)
    if r.shape != () or r.dtype != out_dt:
        return None
    if ok == "f":
        f = float(r)
        if not math.isfinite(f):
            return None
        if f != 0.0 and abs(f) < float(_tiny(out_dt)):
            return None
        value = f
    elif ok == "b":
        value = bool(r)
    else:
        value = int(r)
    return Literal(value, out_type.update(), typed=all(getattr(a, "typed", True) for a in inputs))


def _tiny(dt):
    try:
        return np.finfo(dt).tiny
    except Exception:
        import ml_dtypes

        return ml_dtypes.finfo(dt).tiny


def _subnormal(x) -> bool:
    if _kind(x.dtype) != "f":
        return False
    f = float(x)
    return f != 0.0 and math.isfinite(f) and abs(f) < float(_tiny(x.dtype))


def _compute(prim, xs, kinds, params, out_dt, k):
    """`kinds` are the operands' kinds, `k` the result's."""
    if any(_subnormal(x) for x in xs):
        return None  # XLA may flush denormal operands to zero
    if prim == "convert_element_type":
        (x,) = xs
        k_in, k_out = kinds[0], k
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
    if prim == "select_n":
        pred, *cases = xs
        if kinds[0] not in "bi" or not cases:
            return None
        i = int(pred)
        if not 0 <= i < len(cases):
            return None
        c = cases[i]
        return c if c.dtype == out_dt else None
    if prim in _COMPARE:
        a, b = xs
        if a.dtype != b.dtype:
            return None
        return _COMPARE[prim](a, b)
    # the rest compute in the result dtype; operands must have that dtype
    if any(x.dtype != out_dt for x in xs):
        return None
    if prim in _LOGIC:
        if k not in "biu":
            return None
        if prim == "not":
            return np.logical_not(xs[0]) if k == "b" else np.invert(xs[0])
        f = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[prim]
        return f(xs[0], xs[1])
    if prim in _INT_ONLY:
        if k not in "iu":
            return None
        if prim == "abs":
            return np.abs(xs[0])
        if prim == "sign":
            return np.sign(xs[0]).astype(out_dt)
        if prim in ("max", "min"):
            return (np.maximum if prim == "max" else np.minimum)(xs[0], xs[1])
        a, b = xs
        if int(b) == 0 or (k == "i" and int(b) == -1 and int(a) == int(np.iinfo(out_dt).min)):
            return None
        return np.fmod(a, b).astype(out_dt)
    if prim in _ARITH:
        if k == "b":
            return None
        if prim == "neg":
            return np.negative(xs[0])
        a, b = xs
        if prim == "add":
            return np.add(a, b)
        if prim == "sub":
            return np.subtract(a, b)
        if prim == "mul":
            return np.multiply(a, b)
        if k in "iu":
            ia, ib = int(a), int(b)
            if ib == 0 or (k == "i" and ib == -1 and ia == int(np.iinfo(out_dt).min)):
                return None
            q = abs(ia) // abs(ib)
            if (ia < 0) != (ib < 0):
                q = -q
            return np.array(q, dtype=out_dt)
        if float(b) == 0.0:
            return None  # inf/nan: leave alone
        return np.divide(a, b)
    return None
