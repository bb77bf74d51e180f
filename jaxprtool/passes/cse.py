"""Common-subexpression elimination.

Two equations are equal when they have the same primitive, equal parameters
(nested jaxprs compared with `core.alpha_equal`) and the same operands after
substitution; the later one is dropped and its results renamed to the earlier
one's.  Effectful equations (`primitives.EFFECTFUL`, callbacks, Refs, or such an
equation nested inside) and random-number equations (`primitives.RANDOM`) are
never merged.  Nested jaxprs are handled separately (they are closed).
"""

from __future__ import annotations

from ..core import Jaxpr, Literal, _AlphaEq
from .common import (
    JaxprMemo,
    Subst,
    eqn_is_pure,
    map_eqn_jaxprs,
    rewrite_nested,
)


def cse(jaxpr: Jaxpr) -> Jaxpr:
    """Compute equal equations once."""
    memo = JaxprMemo()
    go = rewrite_nested(memo, lambda j: _cse(j, go))
    return go(jaxpr)


def _atom_key(a):
    if isinstance(a, Literal):
        return ("lit", a)
    return ("var", id(a))


def _cse(jaxpr: Jaxpr, go) -> Jaxpr:
    sub = Subst()
    table: dict = {}
    eqns = []
    changed = False
    for e in jaxpr.eqns:
        ne = sub.eqn(map_eqn_jaxprs(e, go))
        if ne is not e:
            changed = True
        if _mergeable(ne):
            key = (ne.prim, tuple(map(_atom_key, ne.inputs)), tuple(sorted(ne.params)))
            bucket = table.get(key)
            if bucket is None:
                table[key] = [ne]
            else:
                prev = next((p for p in bucket if _params_equal(p, ne)), None)
                if prev is not None and _same_outputs(prev, ne):
                    for o, po in zip(ne.outputs, prev.outputs):
                        sub.set(o, po)
                    changed = True
                    continue
                bucket.append(ne)
        eqns.append(ne)
    outvars = sub.atoms(jaxpr.outvars)
    if not changed and outvars is jaxpr.outvars:
        return jaxpr
    return jaxpr.replace(eqns=eqns, outvars=outvars)


def _mergeable(e) -> bool:
    """Equations with results and without effects, random numbers or callbacks."""
    return bool(e.outputs) and "callback" not in e.prim and eqn_is_pure(e)


def _same_outputs(a, b) -> bool:
    return len(a.outputs) == len(b.outputs) and all(
        _same_out_type(x, y) for x, y in zip(a.outputs, b.outputs)
    )


def _same_out_type(a, b) -> bool:
    return a.type == b.type and getattr(a.type, "weak_type", False) == getattr(
        b.type, "weak_type", False
    )


def _params_equal(a, b) -> bool:
    try:
        return _AlphaEq().params(a.params, b.params)
    except Exception:
        return False
