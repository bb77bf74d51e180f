"""A float64 copy of a program, for finite differences that are not limited by float32.

`widen(jaxpr)` rewrites every float16/bfloat16/float32 type (and complex64) into float64
(complex128): binders, literals and dtype-valued parameters, nested jaxprs included.  The
copy is checked; an equation that does not allow it (a bitcast of random bits, a dtype-specific primitive)
stays in its own precision, converted at its edges, so that the copy computes the same
discrete choices (dropout masks) as the program; where the copy still does not type-check,
`widen` returns None and the caller keeps the original precision.
"""

from __future__ import annotations

from ..core import Jaxpr, Literal, RefType, ShapedArray, Var, eqn_subjaxprs, map_param_jaxprs
from ..lazy import np

_WIDER = {"f16": "f64", "bf16": "f64", "f32": "f64", "c64": "c128"}
_WIDER_NP = {
    np.dtype("float16"): np.dtype("float64"),
    np.dtype("float32"): np.dtype("float64"),
    np.dtype("complex64"): np.dtype("complex128"),
}


def widen(jaxpr: Jaxpr) -> Jaxpr | None:
    """The float64 copy of `jaxpr`, or None when it does not type-check."""
    from ..check import check

    try:
        wide = _Widen().jaxpr(jaxpr)
    except (TypeError, ValueError):
        return None
    errors = [d for d in check(wide, "<float64 copy>") if d.kind == "error"]
    return None if errors else wide


def wide_dtype(a: np.ndarray) -> np.dtype:
    a = np.asarray(a)
    if a.dtype.kind == "c":
        return np.dtype("complex128")
    if a.dtype.kind == "f" or a.dtype.name == "bfloat16":
        return np.dtype("float64")
    return a.dtype


class _Widen:
    def __init__(self):
        self.memo: dict[int, Jaxpr] = {}

    def jaxpr(self, j: Jaxpr) -> Jaxpr:
        if id(j) in self.memo:
            return self.memo[id(j)]
        env: dict[int, Var] = {}

        def bind(v: Var) -> Var:
            env[id(v)] = w = Var(_type(v.type), v.hint)
            return w

        def read(a):
            if isinstance(a, Literal):
                return Literal(a.value, _type(a.type), a.typed)
            return env.get(id(a), a)

        constvars = tuple(map(bind, j.constvars))
        invars = tuple(map(bind, j.invars))
        eqns = []
        for e in j.eqns:
            params = {k: self.param(v) for k, v in e.params.items()}
            ins = tuple(map(read, e.inputs))
            outs = tuple(map(bind, e.outputs))
            if _widens(e, ins, params, outs):
                eqns.append(e.replace(inputs=ins, outputs=outs, params=params))
            else:
                narrow, wide_outs = _kept_narrow(e, ins)
                eqns.extend(narrow)
                env.update((id(o), w) for o, w in zip(e.outputs, wide_outs))
        out = j.replace(
            constvars=constvars,
            invars=invars,
            eqns=tuple(eqns),
            outvars=tuple(map(read, j.outvars)),
        )
        self.memo[id(j)] = out
        return out

    def param(self, v):
        if isinstance(v, np.dtype):
            return _WIDER_NP.get(v, np.dtype("float64") if v.name == "bfloat16" else v)
        if isinstance(v, tuple) and type(v) is tuple:
            return tuple(self.param(x) for x in v)
        return map_param_jaxprs(v, self.jaxpr)


def _widens(e, ins, params, outs) -> bool:
    """Whether equation `e` type-checks in float64: its shape rule, on the widened operands
    and parameters, gives the widened result types.  (An equation with bodies is widened
    as a whole: its bodies' equations are decided one by one.)"""
    if eqn_subjaxprs(e):
        return True
    if all(a.type is b.type for a, b in zip(ins + outs, tuple(e.inputs) + tuple(e.outputs))):
        return True  # nothing to widen
    from ..record import prim
    from ..shapes import infer_with_rule
    from ..shapes.util import types_agree

    rule = prim(e.prim).shape_rule
    if rule is None:
        return True  # nothing known against it (the checker has the last word)
    try:
        got = infer_with_rule(rule, [a.type for a in ins], params, [o.type for o in outs])
    except Exception:  # noqa: BLE001 - any rule's refusal: the equation stays narrow
        return False
    return len(got) == len(outs) and all(types_agree(g, o.type) for g, o in zip(got, outs))


def _kept_narrow(e, ins):
    """`e` in its own precision inside the float64 copy (a bitcast of random bits to f32, a
    dtype-specific primitive): its widened operands converted back, its results converted
    to float64; returns (equations, the results to read on).  Its values are then those of
    the original program (dropout masks drawn from the same bits), so finite differences of
    the copy are those of the program."""
    from ..ad import builder as B

    b = B.Builder(loc=e.loc)
    with B.use(b):
        narrow_ins = [
            orig
            if isinstance(orig, Literal)
            else wide
            if wide.type is orig.type
            else _cast(wide, orig.type)
            for orig, wide in zip(e.inputs, ins)
        ]
        outs = [Var(o.type, o.hint) for o in e.outputs]
        b.add_eqn(e.replace(inputs=tuple(narrow_ins), outputs=tuple(outs)))
        wide_outs = [_cast(o, _type(o.type)) if _type(o.type) != o.type else o for o in outs]
    return b.eqns, wide_outs


def _cast(x, t):
    """`x` converted to the dtype (and weak type) of `t` (emitted into the current builder)."""
    from ..ad import ops

    return ops.convert_element_type(x, t.dtype, bool(t.weak_type))


def _type(t):
    if isinstance(t, ShapedArray) and t.dtype in _WIDER:
        return ShapedArray(t.shape, _WIDER[t.dtype], t.weak_type, t.memory_space, t.vma)
    if isinstance(t, RefType) and t.inner.dtype in _WIDER:
        return RefType(_type(t.inner), t.memory_space)
    return t
