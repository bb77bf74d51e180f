"""`canonicalize`: simplify, fold, cse and dce repeated until nothing changes.

A pass is not run again on a program that it is known to leave alone: the program it
returned last (each pass is idempotent), or one that differs from it only where its
`settled` check finds nothing for it to do (the equations the other passes made anew since).
The programs of each round are those of running every pass: only the runs that would return
their input are left out (the round that confirms the fixed point, most of all)."""

from __future__ import annotations

from ..core import Jaxpr, alpha_equal
from .base import Pass, PassOption
from .common import unseen_eqns
from .cse import cse, cse_settled
from .dce import dce
from .fold import fold, fold_settled
from .simplify import simplify, simplify_settled

MAX_ROUNDS = 20

#: the passes of a round, in order, each with its check `settled(last, program, made)`:
#: whether the pass returns `program` unchanged, where `last` is a program it returned,
#: `program` differs from it by equations removed or replaced, and `made` is
#: `unseen_eqns(last, program)` (None: only `program is last` is known)
ROUND = ((simplify, simplify_settled), (fold, fold_settled), (cse, cse_settled), (dce, None))


def canonicalize(jaxpr: Jaxpr, max_iterations: int = MAX_ROUNDS) -> Jaxpr:
    """simplify,fold,cse,dce to a fixed point (at most `max_iterations` rounds)."""
    cur = jaxpr
    last: dict = {}  # pass -> the program it returned last, or was found to leave alone
    for _ in range(max_iterations):
        nxt = cur
        made = _MadeAnew()
        for run, settled in ROUND:
            done = last.get(run)
            if done is not None and (
                nxt is done or (settled is not None and settled(done, nxt, made(done, nxt)))
            ):
                last[run] = nxt
                continue
            nxt = last[run] = run(nxt)
        if nxt is cur or alpha_equal(nxt, cur):
            return cur
        cur = nxt
    return cur


class _MadeAnew:
    """`unseen_eqns(done, program)`, found again for the same two programs (compared by
    identity, and held): the checks of a round often ask about the same pair, where no pass
    changed anything between them (after a gradient, all three: one walk over 1.3M
    equations at grad of 400k, not three)."""

    def __init__(self):
        self.done = self.program = self.made = None

    def __call__(self, done: Jaxpr, program: Jaxpr) -> list:
        if done is not self.done or program is not self.program:
            self.done, self.program, self.made = done, program, unseen_eqns(done, program)
        return self.made


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
