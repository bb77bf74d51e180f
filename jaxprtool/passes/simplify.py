"""Algebraic identities that AD leaves behind.

Every rule keeps the value, dtype and shape exactly, for every input (NaN,
infinities and signed zeros included), except for the one freedom of the
issue: the sign of a zero produced by adding AD's zeros (`add_any`).  A result
is replaced only by an atom of exactly the same type (weak_type included).

| rule | condition |
|---|---|
| `mul x 1`, `mul 1 x`, `div x 1` -> x | any dtype (x*1 == x bit for bit) |
| `add x 0`, `add 0 x`, `sub x 0` -> x | integers |
| `add x -0.0`, `add -0.0 x`, `sub x +0.0` -> x | floats (exact: -0.0 is the additive identity) |
| `add_any x z`, `add_any z x` -> x | z a zero (literal or `broadcast_in_dim` of one): AD's zeros |
| `neg (neg x)` -> x | |
| `convert_element_type x` -> x | same dtype, same weak_type, no sharding |
| `broadcast_in_dim`, `reshape`, `transpose`, `squeeze`, `reduce_*` that change nothing -> x | |
| `copy x` -> x | |
| `select_n p c0 c1 ...` -> c_p | p a literal |
| `select_n p c c ...` -> c | every case the same atom |

`mul x 0` -> 0 is not a rule (NaN * 0 is NaN, inf * 0 is NaN).  The equations
left unused are removed by `dce`.
"""

from __future__ import annotations

import math

from ..core import Jaxpr, Literal, ShapedArray, Var
from ..params import as_int_tuple
from .base import Pass
from .common import EqnRewrite, recursive_pass, same_type


def simplify(jaxpr: Jaxpr) -> Jaxpr:
    """Apply the algebraic identities above (then run dce to drop what became dead)."""
    return recursive_pass(jaxpr, _simplify)


SIMPLIFY = Pass(
    name="simplify",
    help="Exact algebraic identities: mul x 1, neg (neg x), ...",
    doc="""Algebraic identities that keep every value exactly: mul x 1, add_any x zeros,
    neg (neg x), no-op converts/broadcasts/reshapes/transposes, select_n with a literal
    predicate.  Run dce afterwards (or canonicalize) to drop what became dead.

    \b
    Example:
      jaxprtool simplify f.jaxpr | jaxprtool dce
    """,
    fn=simplify,
)


def _simplify(jaxpr: Jaxpr, go) -> Jaxpr:
    rw = EqnRewrite(jaxpr, go)
    producer: dict[int, object] = {}
    for e in rw:
        if len(e.outputs) == 1:
            r = _rule(e, producer)
            if r is not None and same_type(r, e.outputs[0]):
                rw.drop(e.outputs, (r,))
                continue
        for o in e.outputs:
            producer[id(o)] = e
        rw.keep(e)
    return rw.result()


def _scalar_const(a, producer):
    """The scalar value an atom holds everywhere when it is a literal or a broadcast of one."""
    if isinstance(a, Literal):
        return a.value
    if isinstance(a, Var):
        p = producer.get(id(a))
        if p is not None and p.prim == "broadcast_in_dim" and p.params.get("sharding") is None:
            x = p.inputs[0]
            if isinstance(x, Literal) and _dtype(x) == _dtype(a):
                return x.value
    return None


def _dtype(a):
    return a.type.dtype if isinstance(a.type, ShapedArray) else None


def _kind(a) -> str:
    d = _dtype(a)
    if d is None:
        return "?"
    if d == "bool":
        return "b"
    if d.startswith("i"):
        return "i"
    if d.startswith("u"):
        return "u"
    if d.startswith("c"):
        return "c"
    if d.startswith(("f", "bf")) and d != "float0":
        return "f"
    return "?"


def _is_one(v) -> bool:
    return v is not None and not isinstance(v, (bool, str)) and v == 1


def _is_zero(v) -> bool:
    return v is not None and not isinstance(v, (bool, str)) and v == 0


def _is_neg_zero(v) -> bool:
    return isinstance(v, float) and v == 0.0 and math.copysign(1.0, v) < 0


def _is_pos_zero(v) -> bool:
    return (
        isinstance(v, (float, int))
        and not isinstance(v, bool)
        and v == 0
        and math.copysign(1.0, v) > 0
    )


def _identity_perm(p, n) -> bool:
    try:
        return as_int_tuple(p) == tuple(range(n))
    except (TypeError, ValueError):
        return False


def _rule(e, producer):
    prim, ins, out = e.prim, e.inputs, e.outputs[0]
    if prim == "mul" and len(ins) == 2:
        x, y = ins
        if _kind(out) in "iufc" and _is_one(_scalar_const(y, producer)):
            return x
        if _kind(out) in "iufc" and _is_one(_scalar_const(x, producer)):
            return y
        return None
    if prim == "div" and len(ins) == 2:
        x, y = ins
        if _kind(out) in "iufc" and _is_one(_scalar_const(y, producer)):
            return x
        return None
    if prim in ("add", "add_any", "sub") and len(ins) == 2:
        x, y = ins
        k = _kind(out)
        cy, cx = _scalar_const(y, producer), _scalar_const(x, producer)
        if k in "iu":
            if _is_zero(cy):
                return x
            if prim != "sub" and _is_zero(cx):
                return y
            return None
        if k not in "fc":
            return None
        if prim == "add_any":
            if _is_zero(cy):
                return x
            if _is_zero(cx):
                return y
            return None
        if k != "f":
            return None
        if prim == "add":
            if _is_neg_zero(cy):
                return x
            if _is_neg_zero(cx):
                return y
            return None
        if _is_pos_zero(cy):  # sub x +0.0 == x + -0.0 == x
            return x
        return None
    if prim == "neg" and len(ins) == 1:
        x = ins[0]
        p = producer.get(id(x)) if isinstance(x, Var) else None
        if p is not None and p.prim == "neg" and len(p.inputs) == 1:
            return p.inputs[0]
        return None
    if prim == "convert_element_type" and len(ins) == 1:
        if e.params.get("sharding") is not None:
            return None
        if bool(e.params.get("weak_type", False)) != bool(getattr(ins[0].type, "weak_type", False)):
            return None
        return ins[0]  # kept only when the type (dtype and weak_type) is unchanged
    if prim == "broadcast_in_dim" and len(ins) == 1:
        x = ins[0]
        if e.params.get("sharding") is not None or not isinstance(x.type, ShapedArray):
            return None
        if _identity_perm(e.params.get("broadcast_dimensions", ()), x.type.ndim):
            return x
        return None
    if prim == "reshape" and len(ins) == 1:
        if e.params.get("dimensions") is not None or e.params.get("sharding") is not None:
            return None
        return ins[0]
    if prim == "transpose" and len(ins) == 1:
        x = ins[0]
        if isinstance(x.type, ShapedArray) and _identity_perm(
            e.params.get("permutation"), x.type.ndim
        ):
            return x
        return None
    if prim == "squeeze" and len(ins) == 1:
        if _identity_perm(e.params.get("dimensions"), 0):
            return ins[0]
        return None
    if (
        prim in ("reduce_sum", "reduce_max", "reduce_min", "reduce_prod", "reduce_and", "reduce_or")
        and len(ins) == 1
    ):
        if _identity_perm(e.params.get("axes"), 0) and e.params.get("out_sharding") is None:
            return ins[0]
        return None
    if prim == "copy" and len(ins) == 1:
        return ins[0]
    if prim == "select_n" and len(ins) >= 2:
        pred, *cases = ins
        if isinstance(pred, Literal) and isinstance(pred.value, (bool, int)):
            i = int(pred.value)
            if 0 <= i < len(cases):
                return cases[i]
            return None
        first = cases[0]
        if all(c is first or (isinstance(c, Literal) and c == first) for c in cases):
            return first
        return None
    return None
