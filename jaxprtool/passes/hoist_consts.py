"""Hoist the constants of nested call bodies to the program's constants.

JAX 0.12 prints the constants a jitted function closes over as constvars of the nested
jaxpr (`jit[jaxpr={ lambda c:f32[2]; a:f32[2]. ... }]`), and the text has no values for
them.  `hoist_consts` makes such a body take its constants as leading inputs, and the call
takes them as leading operands, up to the nearest enclosing jaxpr that is not a call body:
the top level, where they become constvars after the program's own, or a cond branch or
loop body, where they become that body's constvars after its own.  This is the first step
of the one numbering of the constants that `run --consts` reads and `trace --consts-out`
writes; `backend/consts.py` documents the whole of it.
"""

from __future__ import annotations

from ..core import Eqn, Jaxpr, Var
from ..params import Opaque
from .common import JaxprMemo, call_body_param, map_eqn_jaxprs

#: the value a new operand gets in each per-operand parameter of a call (as JAX's pjit adds
#: for an operand it closes over: unspecified sharding and layout, not donated)
_NEW_OPERAND = {
    "in_shardings": Opaque("UnspecifiedValue"),
    "in_layouts": None,
    "donated_invars": False,
}


def has_nested_consts(jaxpr: Jaxpr) -> bool:
    """Whether some nested jaxpr has constvars (values the text does not contain)."""
    from ..core import all_eqns, eqn_subjaxprs

    return any(s.constvars for e in all_eqns(jaxpr) for s in eqn_subjaxprs(e))


def hoistable_body(e: Eqn) -> Jaxpr | None:
    """The body of call `e` when it has constvars that hoisting makes operands of `e`."""
    key = call_body_param(e.prim)
    body = e.params.get(key) if key else None
    if not isinstance(body, Jaxpr) or not body.constvars or len(body.invars) != len(e.inputs):
        return None
    return body


def hoist_consts(jaxpr: Jaxpr) -> Jaxpr:
    """`jaxpr` with the constvars of its nested call bodies made operands of the calls and
    constvars of the top level (the same object when there are none).  Constvars of other
    nested jaxprs (cond branches, loop bodies) stay where they are."""
    return hoist_with_sources(jaxpr)[0]


def hoist_with_sources(jaxpr: Jaxpr) -> tuple[Jaxpr, dict[int, Var]]:
    """`hoist_consts(jaxpr)`, and for each constvar hoisting created (by `id`), the constvar
    of `jaxpr`'s call body whose value it carries (`trace --consts-out` reads the values of
    the hoisted program's constants off the traced program's by it)."""
    sources: dict[int, Var] = {}
    if not has_nested_consts(jaxpr):
        return jaxpr, sources
    memo = JaxprMemo()

    def lift(j: Jaxpr) -> Jaxpr:
        hit = memo.get(j)
        if hit is not None:
            return hit
        eqns, lifted = [], []
        for e in j.eqns:
            e2 = map_eqn_jaxprs(e, lift)
            e2, outer = _close_call(e2, sources)
            lifted.extend(outer)
            eqns.append(e2)
        if not lifted and all(a is b for a, b in zip(eqns, j.eqns)):
            return memo.put(j, j)
        return memo.put(j, j.replace(constvars=tuple(j.constvars) + tuple(lifted), eqns=eqns))

    return lift(jaxpr), sources


def _close_call(e: Eqn, sources: dict[int, Var]) -> tuple[Eqn, list[Var]]:
    """A call whose body has constvars, with them as the body's leading inputs and new
    leading operands (returned: they are constants of the enclosing jaxpr, and `sources`
    gets the original constvar each stands for)."""
    body = hoistable_body(e)
    if body is None:
        return e, []
    key = call_body_param(e.prim)
    outer = [Var(v.type, v.hint) for v in body.constvars]
    for new, inner in zip(outer, body.constvars):
        sources[id(new)] = sources.get(id(inner), inner)
    new_body = body.replace(constvars=(), invars=tuple(body.constvars) + tuple(body.invars))
    params = dict(e.params, **{key: new_body})
    for k, default in _NEW_OPERAND.items():
        v = params.get(k)
        if isinstance(v, tuple) and len(v) == len(e.inputs):
            params[k] = (default,) * len(outer) + v
    return e.replace(inputs=tuple(outer) + tuple(e.inputs), params=params), outer
