"""Common-subexpression elimination.

Two equations are equal when they have the same primitive, equal parameters as
JAX prints them (`printer.printed_params`: a parameter JAX leaves implicit does not
count; nested jaxprs compared with `core.alpha_equal`) and the same operands after
substitution; the later one is dropped and its results renamed to the earlier
one's.  Effectful equations (`primitives.EFFECTFUL`, callbacks, Refs, or such an
equation nested inside) and random-number equations (`primitives.RANDOM`) are
never merged.  Nested jaxprs are handled separately (they are closed).
"""

from __future__ import annotations

from ..core import Jaxpr, Literal, _AlphaEq
from ..text.printer import printed_params
from .base import Pass
from .common import EqnRewrite, eqn_is_pure, recursive_pass, same_type


def cse(jaxpr: Jaxpr) -> Jaxpr:
    """Compute equal equations once."""
    return recursive_pass(jaxpr, _cse)


CSE = Pass(
    name="cse",
    help="Compute equal equations once (never effectful or random ones).",
    doc="""Common-subexpression elimination: equal equations (same primitive, parameters and
    operands) are computed once.  Effectful and random-number equations are never merged.

    \b
    Example:
      jaxprtool cse f.jaxpr --diff
    """,
    fn=cse,
)


def _atom_key(a):
    if isinstance(a, Literal):
        return ("lit", a)
    return ("var", id(a))


def _cse(jaxpr: Jaxpr, go) -> Jaxpr:
    rw = EqnRewrite(jaxpr, go)
    table: dict = {}
    for e in rw:
        if _mergeable(e):
            params = dict(printed_params(e))
            key = (e.prim, tuple(map(_atom_key, e.inputs)), tuple(sorted(params)))
            bucket = table.get(key)
            if bucket is None:
                table[key] = [(e, params)]
            else:
                prev = next((p for p, pp in bucket if _params_equal(pp, params)), None)
                if prev is not None and _same_outputs(prev, e):
                    rw.drop(e.outputs, prev.outputs)
                    continue
                bucket.append((e, params))
        rw.keep(e)
    return rw.result()


def _mergeable(e) -> bool:
    """Equations with results and without effects, random numbers or callbacks."""
    return bool(e.outputs) and "callback" not in e.prim and eqn_is_pure(e)


def _same_outputs(a, b) -> bool:
    return len(a.outputs) == len(b.outputs) and all(
        same_type(x, y) for x, y in zip(a.outputs, b.outputs)
    )


def _params_equal(a: dict, b: dict) -> bool:
    try:
        return _AlphaEq().params(a, b)
    except Exception:
        return False
