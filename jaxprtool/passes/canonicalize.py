"""`canonicalize`: simplify, fold, cse and dce repeated until nothing changes."""

from __future__ import annotations

from ..core import Jaxpr, alpha_equal
from .cse import cse
from .dce import dce
from .fold import fold
from .simplify import simplify

MAX_ROUNDS = 20


def canonicalize(jaxpr: Jaxpr) -> Jaxpr:
    """simplify,fold,cse,dce to a fixed point (at most MAX_ROUNDS rounds)."""
    cur = jaxpr
    for _ in range(MAX_ROUNDS):
        nxt = dce(cse(fold(simplify(cur))))
        if nxt is cur or alpha_equal(nxt, cur):
            return cur
        cur = nxt
    return cur
