"""Observers of the AD walks (in the manner of xDSL's builder and rewriter listeners).

`jvp_eval` (forward mode, and linearize through it) and `backward_pass` (transpose) report
each step to the observer installed with `observing(obs)`: the equation, what the rule
received and returned, and the equations the step emitted.  Only the outermost walk reports
(a rule that differentiates a nested body runs the walk again, unobserved), so `explain`
shows exactly the steps that built the program it shows.

An observer derives from `Observer` (every method a no-op) and overrides any of:

- `jvp_begin(jaxpr, primals, tangents, consts)`: the walk's input atoms (tangents: Atom or
  Zero per input);
- `jvp_step(eqn, kind, primals, tangents, primal_outs, tangent_outs, emitted)`; `kind` is
  the helper that registered the rule (`defjvp`, `defjvp2`, `deflinear`, ...;
  "primitive_jvps" for a rule assigned to that registry directly: `registry.jvp_kind_of`)
  or "copy" when every tangent is zero;
- `linearized(primal, linear, info)`: the two programs `linearize_jaxpr` returns;
- `transpose_begin(jaxpr, linear_mask, args, cts_out, consts)`: the program transposed, the
  non-linear inputs' atoms and the output cotangents;
- `forward_step(eqn, emitted)`: a non-linear equation re-emitted by the transpose;
- `cotangent(eqn, var, ct, previous, result)`: `ct` added to the cotangent of `var` (a
  linear value of the program transposed) by the transpose of `eqn` (None: an output's
  cotangent); `previous` is what it had (Zero at first), `result` what it has now;
- `transpose_step(eqn, cts, cts_in, emitted)`; `cts_in` per operand (None: not linear);
- `step_notes(eqn, kind, notes)`: after the rule of `eqn` ran (or raised), before
  `jvp_step`/`transpose_step`/`step_failed`: `kind` the helper that registered the rule
  ("transpose" for a transpose rule), `notes` what the rules noted while they ran (`note`:
  a plugin's rule used, a custom rule replaced by its body's derivative), those made in a
  walk nested in the rule ending in " (in a nested equation)";
- `step_failed(eqn, error)`: the walk stops with `error` at `eqn` (None: outside any
  equation); the error propagates as it would unobserved.

`emitted` is an `Emitted`: the equations the step added to the builder.
"""

from __future__ import annotations

import contextlib

from . import builder as B
from .invocation import entry_observer


class Observer:
    """An observer of the AD walks whose every step is a no-op: an observer overrides the
    steps it watches (the module's docstring says what each receives)."""

    def jvp_begin(self, jaxpr, primals, tangents, consts) -> None:
        pass

    def jvp_step(self, eqn, kind, primals, tangents, primal_outs, tangent_outs, emitted) -> None:
        pass

    def linearized(self, primal, linear, info) -> None:
        pass

    def transpose_begin(self, jaxpr, linear_mask, args, cts_out, consts) -> None:
        pass

    def forward_step(self, eqn, emitted) -> None:
        pass

    def cotangent(self, eqn, var, ct, previous, result) -> None:
        pass

    def transpose_step(self, eqn, cts, cts_in, emitted) -> None:
        pass

    def step_notes(self, eqn, kind, notes) -> None:
        pass

    def step_failed(self, eqn, error) -> None:
        pass


class StepCounter(Observer):
    """An observer that reports how far the outermost walk is: `stage("jvp"|"transpose")`
    when a walk begins, `count(done, total)` every few equations (the progress line)."""

    EVERY = 64

    def __init__(self, count, stage):
        self.count, self.stage = count, stage
        self.done = self.total = 0

    def _begin(self, name: str, jaxpr) -> None:
        self.done, self.total = 0, len(jaxpr.eqns)
        self.stage(name)

    def jvp_begin(self, jaxpr, *_):
        self._begin("forward (jvp) walk", jaxpr)

    def transpose_begin(self, jaxpr, *_):
        self._begin("transpose walk", jaxpr)

    def _step(self, *_):
        self.done += 1
        if self.done % self.EVERY == 0 or self.done == self.total:
            self.count(self.done, self.total)

    jvp_step = transpose_step = forward_step = _step


def observing(observer):
    """`observer` (an `Observer`: the walks call its methods without asking whether it has
    them) watches the outermost walks started in the block; it rides the invocation the
    walks' builders carry (`Invocation.observer`)."""
    if not isinstance(observer, Observer):
        raise TypeError(f"an AD observer derives from observe.Observer, not {type(observer)!r}")
    return entry_observer(observer)


@contextlib.contextmanager
def take():
    """The observer for this walk (or None); nested walks inside see none (the walk's
    invocation holds none until it ends)."""
    inv = B.invocation()
    obs, nested = inv.observer, inv.nested
    inv.observer = None
    inv.nested = nested or inv.step_notes is not None
    try:
        yield obs
    finally:
        inv.observer, inv.nested = obs, nested


_UNOBSERVED = contextlib.nullcontext()


def noting(obs, eqn, kind: str | None):
    """Around the rule of `eqn` in an observed walk (`obs` not None): collect what it notes
    and report it (`step_notes`) when it returns or raises.  An unobserved walk (every AD
    command) gets a shared null context: no generator per equation."""
    return _UNOBSERVED if obs is None else _noting(obs, eqn, kind)


@contextlib.contextmanager
def _noting(obs, eqn, kind: str | None):
    notes: list[str] = []
    inv = B.invocation()
    saved, inv.step_notes = inv.step_notes, notes
    try:
        yield
    finally:
        inv.step_notes = saved
        obs.step_notes(eqn, kind, notes)


def note(text: str) -> None:
    """Tell the observer of the step under way how its rule differentiated (once per step;
    nothing when no walk is observed)."""
    inv = B.invocation()
    notes = inv.step_notes
    if notes is None:
        return
    if inv.nested:
        text += " (in a nested equation)"
    if text not in notes:
        notes.append(text)


def note_plugin_rule(rec, field: str) -> None:
    """Note that the rule `field` ("jvp" or "transpose") of the record `rec` is a plugin's."""
    source = (rec.plugin_sources or {}).get(field)
    if source is not None:
        what = "JVP" if field == "jvp" else "transpose"
        note(f"{what} rule of '{rec.name}' from plugin {source}")


def observed() -> bool:
    """Whether an observer is installed here (a walk reports its steps)."""
    return B.invocation().observer is not None


def notify(hook: str, *args) -> None:
    """Call the `Observer` method `hook(*args)` on the observer, if there is one here."""
    obs = B.invocation().observer
    if obs is not None:
        getattr(obs, hook)(*args)


class Emitted:
    """The equations a builder gains during one step (both programs of a split builder)."""

    def __init__(self, b):
        self.b = b
        self.n_primal = len(b.primal_eqns)
        self.n_tangent = len(b.tangent_eqns)

    @property
    def split(self) -> bool:
        """The builder sorts equations into a primal and a tangent program (linearize)."""
        return self.b.split

    def primal(self) -> list:
        """The new equations of the primal program (every one, for an unsplit builder)."""
        return self.b.primal_eqns[self.n_primal :]

    def tangent(self) -> list:
        """The new equations of the tangent program (none for an unsplit builder)."""
        return self.b.tangent_eqns[self.n_tangent :]

    def eqns(self) -> list:
        """All of them, in an order where each one comes after the ones it uses."""
        return self.primal() + self.tangent()
