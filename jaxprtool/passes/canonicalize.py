"""`canonicalize`: simplify, fold, cse and dce repeated until nothing changes."""

from __future__ import annotations

from ..core import Jaxpr, alpha_equal
from .base import Pass, PassOption
from .cse import cse
from .dce import dce
from .fold import fold
from .simplify import simplify

MAX_ROUNDS = 20


def canonicalize(jaxpr: Jaxpr, max_iterations: int = MAX_ROUNDS) -> Jaxpr:
    """simplify,fold,cse,dce to a fixed point (at most `max_iterations` rounds)."""
    cur = jaxpr
    dced = None  # the program dce last returned: dce is idempotent, so it is dce's own
    for _ in range(max_iterations):
        nxt = cse(fold(simplify(cur)))
        if nxt is not dced:  # the confirming round's dce, when nothing else changed, is not run
            nxt = dced = dce(nxt)
        if nxt is cur or alpha_equal(nxt, cur):
            return cur
        cur = nxt
    return cur


CANONICALIZE = Pass(
    name="canonicalize",
    help="simplify, fold, cse and dce repeated to a fixed point.",
    doc="""simplify, fold, cse and dce repeated to a fixed point.

    \b
    Example:
      jaxprtool vjp f.jaxpr | jaxprtool canonicalize
    """,
    fn=canonicalize,
    options=(
        PassOption(
            "max-iterations",
            int,
            MAX_ROUNDS,
            f"At most N rounds of the four passes (default: {MAX_ROUNDS}).",
            metavar="N",
            minimum=1,
        ),
    ),
)
