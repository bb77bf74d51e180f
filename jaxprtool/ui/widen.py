"""A float64 copy of a program, for finite differences that are not limited by float32.

`widen(jaxpr)` rewrites every float16/bfloat16/float32 type (and complex64) into float64
(complex128): binders, literals and dtype-valued parameters, nested jaxprs included.  The
copy is checked; where the program does not allow it (a bitcast to int32, a dtype-specific
primitive), `widen` returns None and the caller keeps the original precision.
"""

from __future__ import annotations

from ..core import Jaxpr, Literal, RefType, ShapedArray, Var, map_param_jaxprs
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
            eqns.append(e.replace(inputs=ins, outputs=tuple(map(bind, e.outputs)), params=params))
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


def _type(t):
    if isinstance(t, ShapedArray) and t.dtype in _WIDER:
        return ShapedArray(t.shape, _WIDER[t.dtype], t.weak_type, t.memory_space, t.vma)
    if isinstance(t, RefType) and t.inner.dtype in _WIDER:
        return RefType(_type(t.inner), t.memory_space)
    return t
