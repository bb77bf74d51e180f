"""Hoist the constants of nested jaxprs to the program's constants.

JAX 0.12 prints the constants a jitted function closes over as constvars of the nested
jaxpr (`jit[jaxpr={ lambda c:f32[2]; a:f32[2]. ... }]`), and the text has no values for
them.  `hoist_consts` makes such a body take its constants as leading inputs, and the call
take them as leading operands; a cond branch or loop body that has constants (those of a
call inside it, hoisted to it) passes them on the same way through its primitive's
`hoist_consts` rule (cond: new leading operands after the index, scan: new consts, while:
new cond/body consts), up to the top level, where they become constvars after the
program's own.  What is left nested (a recorded custom rule's constants, a primitive
without a rule) keeps its constvars: this is the first step of the one numbering of the
constants (`consts_order.py`).  `lift_kept_consts` makes those the program's too, for the
AD commands (numbered as before: `consts_order.for_ad`).
"""

from __future__ import annotations

from ..core import Eqn, Jaxpr, Var
from ..params import Opaque
from ..record import prim
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
    from ..core import nested_jaxprs

    return any(s.constvars for s in nested_jaxprs(jaxpr))


def hoistable_body(e: Eqn) -> Jaxpr | None:
    """The body of call `e` when it has constvars that hoisting makes operands of `e`."""
    key = call_body_param(e.prim)
    body = e.params.get(key) if key else None
    if not isinstance(body, Jaxpr) or not body.constvars or len(body.invars) != len(e.inputs):
        return None
    return body


def hoist_consts(jaxpr: Jaxpr) -> Jaxpr:
    """`jaxpr` with the constvars of its nested call bodies, cond branches and loop bodies
    made operands of their equations and constvars of the top level (the same object when
    there are none), equations in order, depth first (a body's own constants, then those
    of the equations inside it)."""
    return hoist_with_sources(jaxpr)[0]


def hoist_with_sources(jaxpr: Jaxpr) -> tuple[Jaxpr, dict[int, Var]]:
    """`hoist_consts(jaxpr)`, and for each constvar hoisting created (by `id`), the constvar
    of `jaxpr`'s call body whose value it carries (`trace --consts-out` reads the values of
    the hoisted program's constants off the traced program's by it)."""
    sources: dict[int, Var] = {}
    if not has_nested_consts(jaxpr):
        return jaxpr, sources

    def close(e: Eqn, lifted: list[Var]) -> Eqn:
        e, outer = _close_eqn(e, sources)
        lifted.extend(outer)
        return e

    return _lifting(close, jaxpr), sources


def _lifting(rewrite, jaxpr: Jaxpr) -> Jaxpr:
    """`jaxpr` with every equation, inner jaxprs first, rewritten by `rewrite(eqn, lifted)`,
    which appends to `lifted` the new constants of the enclosing jaxpr it makes; each jaxpr
    object once (a shared body stays shared), unchanged ones returned as they are."""
    memo = JaxprMemo()

    def lift(j: Jaxpr) -> Jaxpr:
        hit = memo.get(j)
        if hit is not None:
            return hit
        eqns, lifted = [], []
        for e in j.eqns:
            eqns.append(rewrite(map_eqn_jaxprs(e, lift), lifted))
        if not lifted and all(a is b for a, b in zip(eqns, j.eqns)):
            return memo.put(j, j)
        return memo.put(j, j.replace(constvars=tuple(j.constvars) + tuple(lifted), eqns=eqns))

    try:
        return lift(jaxpr)
    finally:
        memo.clear()  # (`lift` refers to itself, a cycle holding the memo: `recursive_pass`)


def hoistable(e: Eqn) -> bool:
    """Whether hoisting makes constants of nested jaxprs of `e` operands of `e`."""
    if hoistable_body(e) is not None:
        return True
    return prim(e.prim).hoist_consts is not None and _has_own_consts(e)


def _close_eqn(e: Eqn, sources: dict[int, Var]) -> tuple[Eqn, list[Var]]:
    """`e` with the constvars of its nested jaxprs made operands: new operands (returned:
    they are constants of the enclosing jaxpr, and `sources` gets the original constvar
    each stands for), by the call-body rule or the primitive's `hoist_consts` rule."""
    if not hoistable(e):
        return e, []
    rule = prim(e.prim).hoist_consts
    lifted: list[Var] = []

    def outer(binders) -> list[Var]:
        new = [Var(v.type, v.hint) for v in binders]
        for n, inner in zip(new, binders):
            sources[id(n)] = sources.get(id(inner), inner)
        lifted.extend(new)
        return new

    e2 = _close_call(e, outer) if hoistable_body(e) is not None else rule(e, outer)
    return e2, lifted


def _has_own_consts(e: Eqn) -> bool:
    from ..core import eqn_subjaxprs

    return any(s.constvars for s in eqn_subjaxprs(e))


def _close_call(e: Eqn, outer) -> Eqn:
    """A call whose body has constvars, with them as the body's leading inputs and new
    leading operands."""
    body = hoistable_body(e)
    key = call_body_param(e.prim)
    new_body = body.replace(constvars=(), invars=tuple(body.constvars) + tuple(body.invars))
    new_operands = outer(body.constvars)
    params = dict(e.params, **{key: new_body})
    for k, default in _NEW_OPERAND.items():
        v = params.get(k)
        if isinstance(v, tuple) and len(v) == len(e.inputs):
            params[k] = (default,) * len(new_operands) + v
    return e.replace(inputs=tuple(new_operands) + tuple(e.inputs), params=params)


def lift_kept_consts(jaxpr: Jaxpr) -> tuple[Jaxpr, dict[int, Var]]:
    """`jaxpr` (hoisted) with the constvars that hoisting leaves nested (a recorded custom
    rule's, a custom call's, shard_map's, custom_vmap's or run_state's body's, a kernel's)
    made leading operands of their equations (each primitive's `lift_kept_consts` rule)
    and constants of the enclosing jaxpr, then
    hoisted to the top level like a call body's; and for each new top-level constvar (by
    `id`), the nested constvar whose value it carries.  The AD commands inline a rule into
    the program they write, where its constants must be values that program takes, and
    number every constant as `run` does only when all of them are the program's
    (`consts_order.for_ad` orders them)."""
    sources: dict[int, Var] = {}

    def outer_for(lifted: list[Var]):
        def outer(binders) -> list[Var]:
            new = [Var(v.type, v.hint) for v in binders]
            sources.update((id(n), sources.get(id(i), i)) for n, i in zip(new, binders))
            lifted.extend(new)
            return new

        return outer

    def lift_kept(e: Eqn, lifted: list[Var]) -> Eqn:
        rule = prim(e.prim).lift_kept_consts
        if rule is not None and _has_own_consts(e):
            return rule(e, outer_for(lifted))
        return e

    lifted = _lifting(lift_kept, jaxpr)
    if lifted is jaxpr:
        return jaxpr, sources
    program, hoisted = hoist_with_sources(lifted)
    for k, v in hoisted.items():
        sources[k] = sources.get(id(v), v)
    return program, sources
