"""Liveness: how many bytes a program holds while it runs, step by step, in JAX's order.

The model (static, from the types alone; what `jaxprtool memory` reports):

* A *step* is one equation, in the order the text lists them.  The bodies of calls (records
  with a `call_body`: `jit`, `closed_call`, `remat2`, ...) are inlined: their equations are
  steps of the caller, their binders are the caller's operands (no copy) and their results
  are the caller's.  So the linear call of a linearize form is walked too, and the step where
  it starts is the forward/backward boundary.
* A value is allocated by the step that defines it and freed after the last step that uses
  it.  The program's inputs and constants are live from the start to the end (the caller
  holds them: nothing is donated); its outputs are live from their step to the end.  A result
  nothing uses is freed after its own step.  Literals hold nothing.
* An equation with nested jaxprs that is not an inlined call (cond, while, scan, custom_jvp
  and custom_vjp calls, shard_map, ...) holds, while it runs, its operands, its results, and
  the largest *inner peak* of its jaxprs: the most bytes live at once among the values
  defined inside one run of the jaxpr (its binders excluded: they are the operands, or the
  previous iteration's carry).  For a scan that is one iteration of the body, whose new carry
  is part of it; the stacked outputs (`ys`, among them a linearized scan's stacked
  residuals: length times one iteration's) are the equation's results, counted in full from
  the start of the loop.  For a cond it is the larger branch; for a while loop the larger of
  its condition and body.  A shard_map's body values are one device's shards: its inner peak
  counts once per device of its manual axes (the record's `body_copies`), so every figure is
  of the whole (logical) program, all devices together; XLA's figures are per device.
* The bytes of a value: elements times the dtype's item size (4-bit types: half a byte,
  rounded up); a `Ref` counts its contents; tokens and opaque types hold nothing; a sharded
  dim (`8@x`) counts its global size, as JAX's `nbytes` does; symbolic dimensions count as 0 (the figures are then lower bounds, `Timeline.symbolic` says so).
  The figures are of device memory: a value in host memory (`f32<host>[...]`, the copies an
  offloading remat policy makes) holds none.

API (used by `jaxprtool memory` and the rematerialization planner):

* `liveness(jaxpr, boundary=None) -> Timeline`: per-step live bytes, the peak, the step and
  equation where it peaks, the values live there with the equations that made them, and the
  forward/backward boundary (found in a linearize form, or given as a top-level equation
  index for a flat vjp/grad program: `ad.api.grad_jaxpr(..., boundary=[])` reports it).
* `residual_bytes(program, boundary=None) -> Residuals`: the values held across that
  boundary, by residual (in a linearize form: the linear call's non-tangent operands, as
  `linearize --stats` lists them).
* `analyse(jaxpr, boundary=None) -> (Timeline, Residuals | None)`: both from one walk.
* `value_bytes(type) -> int`.

The walk is linear in the number of equations (inlined call bodies counted at each call; the
inner peak of a loop or branch body is computed once per jaxpr object).
"""

from __future__ import annotations

from .core import (
    Eqn,
    Jaxpr,
    JaxprError,
    Loc,
    ShapedArray,
    Type,
    Var,
    eqn_subjaxprs,
    value_bytes,
)
from .expansion import refuse_large
from .frozen import Frozen, set_field
from .lazy import np
from .record import call_body
from .record import prim as record_of

__all__ = [
    "LiveValue",
    "Residuals",
    "Timeline",
    "analyse",
    "liveness",
    "residual_bytes",
    "value_bytes",
]


class LiveValue(Frozen):
    """One value live at a step: its variable, bytes, and the equation that made it.

    `kind`: "input" or "const" (of the program; `eqn` is None), "value" (defined by `eqn`), or
    "inside" (the inner peak of `eqn`'s nested jaxprs while it runs; `var` is None)."""

    __slots__ = ("var", "nbytes", "eqn", "kind", "origin")
    var: Var | None
    nbytes: int
    eqn: Eqn | None
    kind: str
    #: "input 2", "const 0": which binder of the program (for kind input/const)
    origin: str

    def __init__(
        self, var: Var | None, nbytes: int, eqn: Eqn | None, kind: str, origin: str = ""
    ) -> None:
        set_field(self, "var", var)
        set_field(self, "nbytes", nbytes)
        set_field(self, "eqn", eqn)
        set_field(self, "kind", kind)
        set_field(self, "origin", origin)

    @property
    def loc(self) -> Loc | None:
        return self.eqn.loc if self.eqn is not None else None


class Timeline:
    """The program's liveness, one entry per step (equations, call bodies inlined)."""

    def __init__(
        self,
        eqns: list[Eqn],
        live_bytes: list[int],
        peak_bytes: int,
        peak_index: int | None,
        peak_values: list[LiveValue],
        boundary: int | None = None,
        input_bytes: int = 0,
        symbolic: bool = False,
        inside: list[int] | None = None,
    ) -> None:
        #: the equation of each step
        self.eqns = eqns
        #: bytes live while each step runs (its operands, its results, everything still needed)
        self.live_bytes = live_bytes
        #: the most bytes live at once (the inputs alone for a program without equations)
        self.peak_bytes = peak_bytes
        #: the step where the peak is reached first (None without equations)
        self.peak_index = peak_index
        #: the values live at the peak, largest first (ties in definition order)
        self.peak_values = peak_values
        #: the step where the linear (backward) part begins, when the program has one
        self.boundary = boundary
        #: bytes of the program's inputs and constants (live throughout)
        self.input_bytes = input_bytes
        #: some type has a symbolic dimension: the figures count it as 0
        self.symbolic = symbolic
        #: of each step's live bytes, what its nested jaxprs hold inside (0 for most steps)
        self.inside = [] if inside is None else inside

    @property
    def peak_eqn(self) -> Eqn | None:
        return None if self.peak_index is None else self.eqns[self.peak_index]

    def __repr__(self) -> str:
        where = "" if self.peak_index is None else f" at step {self.peak_index}"
        return f"<Timeline: {len(self.live_bytes)} steps, peak {self.peak_bytes} bytes{where}>"


class Residuals:
    """The values held across the forward/backward boundary, in the linear part's order."""

    def __init__(self, values: list[LiveValue], boundary: int) -> None:
        self.values = values
        #: the step of the boundary in the program's timeline
        self.boundary = boundary

    def __repr__(self) -> str:
        n = len(self.values)
        return (
            f"<Residuals: {n} value{'s' if n != 1 else ''}, {self.total} bytes held across "
            f"the boundary at step {self.boundary}>"
        )

    @property
    def total(self) -> int:
        return sum(v.nbytes for v in self.values)


# ---------------------------------------------------------------- the walk


class _Walk:
    """Flattens a jaxpr into steps and buffers.

    Buffers are numbered; a variable maps to the buffer it names (a call body's binder
    names its operand's buffer), so an alias is never counted twice.  The loop over
    equations is the hot path of `jaxprtool memory` on large programs: per-buffer facts are
    kept in flat lists, the bytes of each type object are computed once, and what is the
    same for most buffers or steps is not stored for each: a buffer's equation is the step
    that defines it (`made_by` holds the others), a step's inner peak is 0 (`transient`
    holds the others)."""

    def __init__(self, inner: dict):
        self.steps: list[Eqn] = []
        self.transient: dict[int, int] = {}  # step -> its nested jaxprs' inner peak, if any
        self.buf_bytes: list[int] = []
        self.buf_var: list[Var] = []
        #: buffer -> its equation where that is not its defining step's (None: an input or
        #: constant; a call's result that its body does not define: the call)
        self.made_by: dict[int, Eqn | None] = {}
        self.buf_def: list[int] = []  # the step that defines it
        self.buf_read: list[int] = []  # the last step that reads it (-1: none)
        self.pinned: list[int] = []  # live to the end (inputs, constants, outputs)
        self.origin: dict[int, str] = {}  # "input 2", "const 0"
        self.read_before: set[int] = set()  # inputs and constants read before the boundary
        self.inner = inner  # id(jaxpr) -> inner peak
        self.sizes: dict[int, tuple[Type, int]] = {}  # id(type) -> (type, bytes)
        self.symbolic = False
        self.boundary: int | None = None
        self.calls: dict[str, bool] = {}  # primitive -> whether it is a call (a body inlined)
        self.made_spans = None  # (`spans`)

    def size(self, t: Type) -> int:
        got = self.sizes.get(id(t))
        if got is None:
            if isinstance(t, ShapedArray) and not t.is_sized:
                self.symbolic = True
            host = isinstance(t, ShapedArray) and t.memory_space == "host"
            got = self.sizes[id(t)] = (t, 0 if host else value_bytes(t))
        return got[1]

    def held(self, v: Var, origin: str) -> int:
        """A new buffer for an input or constant, live from the start to the end."""
        b = len(self.buf_bytes)
        self.buf_bytes.append(self.size(v.type))
        self.buf_var.append(v)
        self.made_by[b] = None
        self.buf_def.append(0)
        self.buf_read.append(-1)
        self.pinned.append(b)
        self.origin[b] = origin
        return b

    def mark_boundary(self) -> None:
        self.boundary = len(self.steps)
        read = self.buf_read
        self.read_before = {b for b in self.origin if read[b] >= 0}

    def jaxpr(self, j: Jaxpr, env: dict, linear_index: int | None = None) -> None:
        """Walk j's equations with `env` (var -> buffer; a Var hashes by identity) holding
        its binders; the boundary is marked before equation `linear_index`."""
        if linear_index is None:
            self.eqns(j.eqns, env)
            return
        self.eqns(j.eqns[:linear_index], env)
        self.mark_boundary()
        self.eqns(j.eqns[linear_index:], env)

    def eqns(self, eqns, env: dict) -> None:
        """The steps of `eqns` (the hot loop of `jaxprtool memory` on a large program)."""
        steps, get = self.steps, env.get
        buf_bytes, buf_var, buf_def, buf_read = (
            self.buf_bytes,
            self.buf_var,
            self.buf_def,
            self.buf_read,
        )
        sizes, calls = self.sizes, self.calls
        add_step, add_bytes, add_var = steps.append, buf_bytes.append, buf_var.append
        add_def, add_read = buf_def.append, buf_read.append
        n, nb = len(steps), len(buf_bytes)  # the next step's and the next buffer's numbers
        last_type, last_bytes = None, 0  # (most results have the type of the one before)
        for e in eqns:
            if e.params:  # (a call has its body among them)
                call = calls.get(e.prim)
                if call is None:
                    call = calls[e.prim] = record_of(e.prim).call_body is not None
                if call:
                    body = _inlined_body(e)
                    if body is not None:
                        self.call(e, body, env)
                        n, nb = len(steps), len(buf_bytes)
                        continue
            for a in e.inputs:
                if a.__class__ is Var:  # (a literal holds nothing, and hashes slowly)
                    b = get(a)
                    if b is not None:
                        buf_read[b] = n
            add_step(e)
            if not e.no_subjaxprs:  # (eqn_subjaxprs' remembered answer, asked inline)
                subs = eqn_subjaxprs(e)
                if subs:
                    self.transient[n] = self.nested_peak(e, subs)
            for o in e.outputs:
                t = o.type
                if t is not last_type:
                    got = sizes.get(id(t))
                    last_type, last_bytes = t, got[1] if got is not None else self.size(t)
                env[o] = nb
                nb += 1
                add_bytes(last_bytes)
                add_var(o)
                add_def(n)
                add_read(-1)
            n += 1

    def call(self, e: Eqn, body: Jaxpr, env: dict) -> None:
        inner: dict = {}
        for v in body.constvars:  # a nested jaxpr's own constants: held like the program's
            inner[v] = self.held(v, "const of a call body")
        for bv, a in zip(body.invars, e.inputs):
            if isinstance(a, Var) and a in env:
                inner[bv] = env[a]
        self.jaxpr(body, inner)
        for o, r in zip(e.outputs, body.outvars):
            b = inner.get(r) if isinstance(r, Var) else None
            if b is None:  # a literal (or unbound) result becomes an array here
                b = len(self.buf_bytes)
                self.buf_bytes.append(self.size(o.type))
                self.buf_var.append(o)
                self.made_by[b] = e
                self.buf_def.append(max(len(self.steps) - 1, 0))
                self.buf_read.append(-1)
            env[o] = b

    def nested_peak(self, e: Eqn, subs: list[Jaxpr]) -> int:
        """What an equation with nested jaxprs holds inside while it runs: the largest inner
        peak, times the instances that run at once (the record's `body_copies`)."""
        copies = record_of(e.prim).body_copies
        return max(map(self.inner_peak, subs)) * (copies(e) if copies is not None else 1)

    def inner_peak(self, j: Jaxpr) -> int:
        """The most bytes live at once among the values defined inside one run of j."""
        got = self.inner.get(id(j))
        if got is not None:
            return got
        w = _Walk(self.inner)
        w.sizes = self.sizes
        env: dict = {}
        w.jaxpr(j, env)
        w.pinned.extend(env[a] for a in j.outvars if isinstance(a, Var) and a in env)
        peak = max(w.sweep(), default=0)
        self.symbolic |= w.symbolic
        self.inner[id(j)] = peak
        return peak

    def spans(self):
        """The step that defines each buffer and the last step it is live in (numpy arrays),
        made once the walk is done (the sweep and the values at the peak both read them)."""
        if self.made_spans is None:
            defined = np.asarray(self.buf_def, np.int64)
            last = np.maximum(defined, np.asarray(self.buf_read, np.int64))
            last[np.asarray(self.pinned, np.int64)] = max(len(self.steps) - 1, 0)
            self.made_spans = defined, last
        return self.made_spans

    def sweep(self) -> list[int]:
        """Bytes live at each step: what is allocated by then, less what was freed before it,
        plus the step's inner peak."""
        n = len(self.steps)
        if n == 0:
            return []
        defined, last = self.spans()
        nbytes = np.asarray(self.buf_bytes, np.float64)  # exact below 2**53 bytes
        added = np.bincount(defined, nbytes, n).astype(np.int64)
        freed = np.bincount(last, nbytes, n).astype(np.int64)
        freed_before = np.concatenate(([0], np.cumsum(freed)[:-1]))
        live = np.cumsum(added) - freed_before
        for k, t in self.transient.items():
            live[k] += t
        return live.tolist()

    def inside(self) -> list[int]:
        """The inner peak of each step (0 for most)."""
        out = [0] * len(self.steps)
        for k, t in self.transient.items():
            out[k] = t
        return out

    def eqn_of(self, b: int) -> Eqn | None:
        """The equation that made buffer b (None: a program input or constant)."""
        made = self.made_by
        return made[b] if b in made else self.steps[self.buf_def[b]]


def _inlined_body(e: Eqn) -> Jaxpr | None:
    """The body of a call whose equations are walked in place, or None."""
    body = call_body(e)
    if body is None:
        return None
    if len(body.invars) != len(e.inputs) or len(body.outvars) != len(e.outputs):
        return None
    return body


def _cut(jaxpr: Jaxpr, boundary: int | None):
    """(the top-level equation index where the backward part begins, or None; the linearize
    form's `(linear call index, tangent count)` where it was looked for and found)."""
    from .ad.linearize import find_linear_eqn

    if boundary is None:
        found = find_linear_eqn(jaxpr)
        return (None if found is None else found[0]), found
    if not 0 <= boundary <= len(jaxpr.eqns):
        raise JaxprError(
            f"boundary {boundary}: the program has {len(jaxpr.eqns)} top-level equations"
        )
    return boundary, None


def _walk(jaxpr: Jaxpr, linear_index: int | None) -> tuple[_Walk, dict]:
    refuse_large(jaxpr)
    w = _Walk({})
    env: dict = {}
    for i, v in enumerate(jaxpr.constvars):
        env[v] = w.held(v, f"const {i}")
    for i, v in enumerate(jaxpr.invars):
        env[v] = w.held(v, f"input {i}")
    w.jaxpr(jaxpr, env, linear_index)
    w.pinned.extend(env[a] for a in jaxpr.outvars if isinstance(a, Var) and a in env)
    return w, env


def liveness(jaxpr: Jaxpr, boundary: int | None = None) -> Timeline:
    """The program's timeline (see the module docstring for the model).

    `boundary`: the index of the top-level equation where the backward part begins (for a
    flat vjp/grad program); by default the linear call of a linearize form, if any."""
    return _timeline(_walk(jaxpr, _cut(jaxpr, boundary)[0])[0])


def analyse(jaxpr: Jaxpr, boundary: int | None = None) -> tuple[Timeline, Residuals | None]:
    """`liveness` and `residual_bytes` (None where the program has no boundary) from one walk
    (`jaxprtool memory` reports both)."""
    index, found = _cut(jaxpr, boundary)
    w, env = _walk(jaxpr, index)
    held = None if index is None else _residuals(jaxpr, w, env, found)
    return _timeline(w), held


def _timeline(w: _Walk) -> Timeline:
    live = w.sweep()
    inputs = sum(w.buf_bytes[b] for b in w.origin)
    if not live:
        return Timeline([], [], inputs, None, _values_at(w, None), w.boundary, inputs, w.symbolic)
    peak = max(live)
    at = live.index(peak)
    return Timeline(
        w.steps, live, peak, at, _values_at(w, at), w.boundary, inputs, w.symbolic, w.inside()
    )


def _values_at(w: _Walk, step: int | None) -> list[LiveValue]:
    """The buffers live at `step` (every input when None), largest first, and the step's inner
    peak as one entry."""
    if step is None:
        live = list(w.origin)
    else:
        defined, last = w.spans()
        live = np.flatnonzero((defined <= step) & (last >= step)).tolist()
    found = [(w.buf_bytes[b], b, _buffer_value(w, b)) for b in live]
    if step is not None and w.transient.get(step):
        t = w.transient[step]
        found.append((t, len(w.buf_bytes), LiveValue(None, t, w.steps[step], "inside")))
    found.sort(key=lambda x: (-x[0], x[1]))
    return [v for _, _, v in found]


def residual_bytes(program: Jaxpr, boundary: int | None = None) -> Residuals:
    """The values held across the forward/backward boundary of a linearize or vjp/grad program.

    In a linearize form (found without `boundary`): the operands of the linear call before its
    tangents, each once.  With `boundary` (a top-level equation index, e.g. from
    `ad.api.grad_jaxpr(..., boundary=[])`): every value defined before it that a step at or
    after it uses, and the program inputs and constants that steps on both sides read (a
    cotangent input, read only after it, is no residual).  Raises JaxprError when the program
    has no boundary to measure."""
    index, found = _cut(program, boundary)
    if index is None:
        raise JaxprError(
            "the program has no forward/backward boundary: it is not in linearize form "
            "(one `jit[name=linear]` equation); run `jaxprtool memory --of linearize|vjp|grad` "
            "on the original program, or give the boundary"
        )
    w, env = _walk(program, index)
    return _residuals(program, w, env, found)


def _residuals(program: Jaxpr, w: _Walk, env: dict, found) -> Residuals:
    """`residual_bytes` of the walk `w` of `program`: the linear call's operands where the
    linearize form was `found`, else the values crossing the walk's boundary."""
    cut = w.boundary if w.boundary is not None else len(w.steps)
    if found is not None:
        k, n_tan = found
        e = program.eqns[k]
        seen: set[int] = set()
        values = []
        for a in e.inputs[: len(e.inputs) - n_tan]:
            if not isinstance(a, Var) or a not in env or env[a] in seen:
                continue
            b = env[a]
            seen.add(b)
            values.append(_buffer_value(w, b))
        return Residuals(values, cut)
    values = [
        _buffer_value(w, b)
        for b in range(len(w.buf_bytes))
        if w.buf_def[b] < cut <= w.buf_read[b] and (w.eqn_of(b) is not None or b in w.read_before)
    ]
    return Residuals(values, cut)


def _buffer_value(w: _Walk, b: int) -> LiveValue:
    eqn = w.eqn_of(b)
    origin = w.origin.get(b, "")
    kind = "value" if eqn is not None else origin.split(" ")[0]
    return LiveValue(w.buf_var[b], w.buf_bytes[b], eqn, kind, origin)
