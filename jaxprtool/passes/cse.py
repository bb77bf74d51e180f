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

from ..core import Jaxpr, _AlphaEq, params_fingerprint
from ..text.printer import printed_params
from ..text.twin import twin
from .base import Pass
from .common import (
    EqnRewrite,
    eqn_is_pure,
    has_subjaxprs,
    recursive_pass,
    same_type,
    unseen_eqns,
)


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


def _cse(jaxpr: Jaxpr, go) -> Jaxpr:
    """Equations are bucketed by primitive and operands; whether one may be merged and its
    printed parameters are looked at only when another equation lands in its bucket (most
    equations of a program have operands of their own).  Inside a bucket the mergeable
    candidates are filed by a fingerprint of their parameters (`core.params_fingerprint`:
    equal parameters, equal fingerprints), so an equation is compared only with candidates
    that may be equal to it, not with every earlier one (the slices of one input, the
    broadcasts of one scalar: quadratic).  The first equal candidate is kept.  (Compiled,
    the loop files the equations of keys not seen before itself: `_twin.cse_sweep`.)"""
    rw = EqnRewrite(jaxpr, go)
    table: dict = {}  # key -> the one equation with it, or {fingerprint: candidates}
    tw = twin()
    for e in rw if tw is None else rw.handed_back(tw.cse_sweep, table):
        # Vars hash and compare by identity, literals by value: the operands are the key
        key = (e.prim, e.inputs)
        bucket = table.setdefault(key, e)  # (a key hashed once: a literal's hash is Python's)
        if bucket is e:
            rw.keep(e)
            continue
        if bucket.__class__ is not dict:
            first = _Candidate(bucket)
            bucket = table[key] = {}
            if first.mergeable():
                bucket[first.fingerprint()] = [first]
        cand = _Candidate(e)
        if cand.mergeable():
            params = cand.params()
            same = bucket.setdefault(cand.fingerprint(), [])
            prev = next((c.eqn for c in same if _params_equal(c.params(), params)), None)
            if prev is not None and _same_outputs(prev, e):
                rw.drop(e.outputs, prev.outputs)
                continue
            same.append(cand)
        rw.keep(e)
    return rw.result()


def cse_settled(last: Jaxpr, program: Jaxpr, made: list | None = None) -> bool:
    """Whether `cse(program)` is `program`, where `last` is a program cse returned and
    `program` differs from it by equations removed or replaced (`canonicalize`'s next
    round).  cse merges an equation only with one of the same primitive and operands, and
    merges none of `last`'s equations: only an equation made anew may merge, with another
    of its key (one with nested jaxprs made anew: not settled); `made`: `unseen_eqns(last,
    program)`, if the caller has it."""
    if program is last:
        return True
    new = unseen_eqns(last, program) if made is None else made
    if not new:
        return True
    keys = set()
    for e in new:
        key = (e.prim, e.inputs)
        if key in keys or has_subjaxprs(e):
            return False
        keys.add(key)
    fresh = set(new)
    prims = {p for p, _ in keys}  # (a tuple key made only for an equation that may match)
    return not any(
        e.prim in prims and (e.prim, e.inputs) in keys and e not in fresh for e in program.eqns
    )


class _Candidate:
    """An equation kept in a bucket; its mergeability and printed parameters are computed
    once, when first asked."""

    __slots__ = ("eqn", "_mergeable", "_params")

    def __init__(self, eqn):
        self.eqn = eqn
        self._mergeable = None
        self._params = None

    def mergeable(self) -> bool:
        if self._mergeable is None:
            self._mergeable = _mergeable(self.eqn)
        return self._mergeable

    def params(self) -> dict:
        if self._params is None:
            self._params = dict(printed_params(self.eqn))
        return self._params

    def fingerprint(self):
        try:
            return params_fingerprint(self.params())
        except Exception:  # (as `_params_equal`: a value that cannot be compared)
            return None


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
