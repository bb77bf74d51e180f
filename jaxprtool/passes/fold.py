"""Constant folding of scalar equations whose operands are all literals.

Which primitives fold, and how, is the `fold` rule of each primitive's record
(`jaxprtool.record`; the element-wise family sets them): `rule(eqn, xs)` gets the operands
as numpy scalars and returns the result as a numpy scalar of the result's dtype, or None to
leave the equation alone.  The rules fold only where numpy computes bit for bit what XLA
computes (arithmetic is done in the result dtype; integers wrap as XLA's do).

This module keeps the loop and what every rule shares: only scalar operands and results of
a foldable dtype (bool, 8- to 64-bit integers, f16/bf16/f32/f64: never complex numbers,
sub-byte integers or fp8 formats), literals that denote exactly their value, no subnormal
operand, and float results that are finite and not subnormal (XLA may flush those).
"""

from __future__ import annotations

import math

from ..core import Eqn, Jaxpr, Literal, ShapedArray, eqn_subjaxprs, np_dtype
from ..lazy import np
from ..record import prim
from .base import Pass
from .common import EqnRewrite, eqn_has_effects, recursive_pass, unseen_eqns


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


def fold_settled(last: Jaxpr, program: Jaxpr, made: list | None = None) -> bool:
    """Whether `fold(program)` is `program`, where `last` is a program fold returned and
    `program` differs from it by equations removed or replaced (`canonicalize`'s next
    round): fold looks at each equation alone, so only those made anew are looked at
    (`made`: `unseen_eqns(last, program)`, if the caller has it)."""
    if program is last:
        return True
    return _nothing_to_fold(unseen_eqns(last, program) if made is None else made)


def _fold(jaxpr: Jaxpr, go) -> Jaxpr:
    if _nothing_to_fold(jaxpr.eqns, go):
        return jaxpr  # what the walk below returns when it folds nothing
    rw = EqnRewrite(jaxpr, go)
    for e in rw:
        if _may_fold(e):
            lit = fold_eqn(e)
            if lit is not None and not eqn_has_effects(e):
                rw.drop(e.outputs, (lit,))
                continue
        rw.keep(e)
    return rw.result()


def _nothing_to_fold(eqns, go=None) -> bool:
    """No equation may fold (`_may_fold`) and none has a nested jaxpr that `go` (the pass on
    nested jaxprs) changes, or none at all without `go`: a cheap look that spares the
    rewrite in the common case (AD's gradients of a program with custom_jvp calls)."""
    for e in eqns:
        inputs = e.inputs
        if inputs and isinstance(inputs[0], Literal) and _may_fold(e):
            return False
        if not e.no_subjaxprs:
            subs = eqn_subjaxprs(e)
            if subs and (go is None or any(go(s) is not s for s in subs)):
                return False
    return True


def _may_fold(e: Eqn) -> bool:
    """Literal operands only, one result and a fold rule: `fold_eqn` is asked (AD's
    `broadcast_in_dim 1.0` seeds have no rule)."""
    return _all_literals(e.inputs) and len(e.outputs) == 1 and prim(e.prim).fold is not None


def _all_literals(inputs) -> bool:
    """Operands that are all literals (and at least one): the only equations that fold."""
    for a in inputs:
        if not isinstance(a, Literal):
            return False
    return bool(inputs)


def kind(dt: np.dtype) -> str:
    """'b' bool, 'i' signed or 'u' unsigned integer, 'f' float, '?' anything else."""
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
    k = kind(dt)
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


def result_dtype(e: Eqn) -> np.dtype:
    """The numpy dtype of the (single) result of `e`."""
    return np_dtype(e.outputs[0].type.dtype)


def fold_eqn(e: Eqn) -> Literal | None:
    """The literal result of `e` (its primitive's fold rule on its literal operands), or None
    when it must not be folded."""
    rule = prim(e.prim).fold
    inputs, out_type = e.inputs, e.outputs[0].type
    if rule is None:
        return None
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
    with np.errstate(all="ignore"):
        try:
            # XLA may flush denormal operands to zero
            r = None if any(_subnormal(x) for x in xs) else rule(e, xs)
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
    if kind(x.dtype) != "f":
        return False
    f = float(x)
    return f != 0.0 and math.isfinite(f) and abs(f) < float(_tiny(x.dtype))
