"""Observers of the AD walks (in the manner of xDSL's builder and rewriter listeners).

`jvp_eval` (forward mode, and linearize through it) and `backward_pass` (transpose) report
each step to the observer installed with `observing(obs)`: the equation, what the rule
received and returned, and the equations the step emitted.  Only the outermost walk reports
(a rule that differentiates a nested body runs the walk again, unobserved), so `explain`
shows exactly the steps that built the program it shows.

An observer implements any of:

- `jvp_step(eqn, kind, primals, tangents, primal_outs, tangent_outs, emitted)`; `kind` is
  the helper that registered the rule (`defjvp`, ...) or "copy" when every tangent is zero;
- `forward_step(eqn, emitted)`: a non-linear equation re-emitted by the transpose;
- `transpose_step(eqn, cts, cts_in, emitted)`; `cts_in` per operand (None: not linear).
"""

from __future__ import annotations

import contextlib
import contextvars

_OBSERVER: contextvars.ContextVar = contextvars.ContextVar("jaxprtool_ad_observer", default=None)


@contextlib.contextmanager
def observing(observer):
    token = _OBSERVER.set(observer)
    try:
        yield observer
    finally:
        _OBSERVER.reset(token)


@contextlib.contextmanager
def take():
    """The observer for this walk (or None); nested walks inside see none."""
    obs = _OBSERVER.get()
    token = _OBSERVER.set(None)
    try:
        yield obs
    finally:
        _OBSERVER.reset(token)


class Emitted:
    """The equations a builder gains during one step (both programs of a split builder)."""

    def __init__(self, b):
        self.b = b
        self.n_primal = len(b.primal_eqns)
        self.n_tangent = len(b.tangent_eqns)

    def eqns(self) -> list:
        return self.b.primal_eqns[self.n_primal :] + self.b.tangent_eqns[self.n_tangent :]
