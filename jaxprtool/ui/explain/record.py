"""Recording for `explain`: the structured walk, filled by observers of the real walks.

`Recorder` observes `jvp_eval` (run by `jvp_jaxpr` or `linearize_jaxpr`), the `linearized`
result and `backward_pass` (run by `vjp_jaxpr`/`grad_jaxpr`) through `ad.observe`, and turns
each step into a `ForwardStep` or `ReverseStep` of the `ExplainData`: the equations the step
emitted printed with one `text.printer.Namer` per program (so the names are those of the
printouts), the values it read and produced (`Value`; their arrays come later, from running
the recorded equations: `checks.fill_values`), and where a fallback rule differentiated it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...ad.observe import Observer
from ...core import (
    Eqn,
    Jaxpr,
    JaxprError,
    Literal,
    Var,
    is_inexact,
    short_dtype_name,
)
from ...lazy import np
from ..checkgrad import Check

# ---------------------------------------------------------------- value summaries


def summarize(x) -> str:
    """`f32[3] min=.. max=.. mean=..` (a scalar: `f32[] = v`)."""
    a = np.asarray(x)
    head = f"{short_dtype_name(a.dtype.name)}[{','.join(str(d) for d in a.shape)}]"
    if a.dtype.kind == "V":  # float0
        return head
    if a.size == 0:
        return head + " (empty)"
    if a.dtype.kind == "b":
        return f"{head} true={int(np.count_nonzero(a))}/{a.size}"
    if a.dtype.kind == "c":
        mag = np.abs(a.astype(np.complex128))
        if a.size == 1:
            return f"{head} = {complex(a.reshape(())):.6g}"
        return f"{head} |min|={mag.min():.4g} |max|={mag.max():.4g} mean={complex(a.mean()):.4g}"
    v = a.astype(np.float64)
    if a.size == 1:
        return f"{head} = {float(v.reshape(())):.6g}"
    return f"{head} min={v.min():.4g} max={v.max():.4g} mean={v.mean():.4g}"


def literal_array(lit: Literal) -> np.ndarray:
    t = lit.type
    if lit.value == "float0":
        return np.zeros(tuple(t.shape), dtype=t.np_dtype)
    return np.full(tuple(t.shape), lit.value, dtype=t.np_dtype)


# ---------------------------------------------------------------- the structured walk


@dataclass
class Value:
    """A named value of the walk; `array`/`summary` once the programs have run."""

    name: str
    atom: Any
    array: np.ndarray | None = None

    @property
    def summary(self) -> str:
        if self.array is None:
            return str(getattr(self.atom, "type", ""))
        return summarize(self.array)


@dataclass
class ForwardStep:
    index: int
    eqn: Eqn
    text: str
    kind: str | None = (
        None  # the helper that registered the JVP rule (the walk says); None: none ran
    )
    constant: bool = False  # every input tangent is a symbolic zero
    tangents_in: list[Value] = field(default_factory=list)
    primal_side: list[str] = field(default_factory=list)  # extra primal work (future residuals)
    tangent_eqns: list[str] = field(default_factory=list)
    tangents_out: list[Value] = field(default_factory=list)
    zero_outs: list[str] = field(default_factory=list)  # outputs whose tangent stays zero
    fallbacks: list[str] = field(default_factory=list)  # rules used instead of the built-in ones
    error: JaxprError | None = None


@dataclass
class ResidualInfo:
    value: Value
    origin: str


@dataclass
class Move:
    target: str  # the linear value receiving the cotangent
    value: Value


@dataclass
class Accumulation:
    target: str
    uses: int
    previous: Value
    contribution: Value
    result: Value


@dataclass
class ReverseStep:
    index: int  # position of the equation in the linear program (-1: the output cotangents)
    text: str
    prim: str
    cts_out: list[Value] = field(default_factory=list)
    eqns: list[str] = field(default_factory=list)
    moves: list[Move] = field(default_factory=list)
    accumulations: list[Accumulation] = field(default_factory=list)
    skipped: bool = False  # no cotangent reaches it
    fallbacks: list[str] = field(default_factory=list)
    error: JaxprError | None = None
    eqn: Eqn | None = None


#: a program of more equations than this is explained as a summary per segment of
#: SEGMENT equations unless --eqns/--only zoom in (or --all asks for every step)
SUMMARY_OVER = 200
SEGMENT = 64


@dataclass
class Zoom:
    """The primal equations shown one by one: indices A..B (`--eqns A-B`), a primitive
    (`--only PRIM`), both, or neither (a large program's summary: no step one by one)."""

    eqns: tuple[int, int] | None = None
    only: str | None = None

    def picks(self, index: int, prim: str) -> bool:
        if self.eqns is None and self.only is None:
            return False
        inside = self.eqns is None or self.eqns[0] <= index <= self.eqns[1]
        return inside and (self.only is None or prim == self.only)


@dataclass
class ExplainData:
    mode: str
    label: str
    primal_text: str = ""
    args: list = field(default_factory=list)
    in_mask: list[bool] = field(default_factory=list)
    input_names: list[str] = field(default_factory=list)
    output_names: list[str] = field(default_factory=list)
    forward: list[ForwardStep] = field(default_factory=list)
    tangent_inputs: list[Value] = field(default_factory=list)
    direction: list[np.ndarray] = field(default_factory=list)  # v, one per differentiated input
    linear_text: str = ""
    residuals: list[ResidualInfo] = field(default_factory=list)
    seeds: list[Value] = field(default_factory=list)  # output cotangents (vjp: w; grad: 1)
    constant_outputs: list[str] = field(default_factory=list)  # seeds that reach no linear value
    reverse: list[ReverseStep] = field(default_factory=list)
    #: the program the walks built (jvp: `jvp_jaxpr`, vjp: `vjp_jaxpr`, grad: `grad_jaxpr`),
    #: its text, and the command that prints the same program
    program: Jaxpr | None = None
    program_text: str = ""
    program_command: str = ""
    #: the derivative, from running `program`: jvp -> one output tangent per float output;
    #: vjp/grad -> one cotangent per differentiated input (in input order), as (label, array)
    derivative: list[tuple[str, np.ndarray]] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    analytic: str | None = None  # the formula used, when the analytic check ran
    #: (where, what): the parts differentiated by a fallback (a custom rule replaced by the
    #: derivative of its body) or by a plugin's rule
    fallbacks: list[tuple[str, str]] = field(default_factory=list)
    error: JaxprError | None = None
    stopped_in: int | None = None  # the stage where the walk stopped
    keep: list = field(default_factory=list)
    #: which steps are shown one by one (the others: in the summary per segment)
    zoom: Zoom | None = None
    #: the primal equation each linear equation comes from (by location), for the zoom
    primal_of: dict = field(default_factory=dict)

    def forward_shown(self, s: ForwardStep) -> bool:
        return self.zoom is None or self.zoom.picks(s.index, s.eqn.prim) or s.error is not None

    def reverse_shown(self, s: ReverseStep) -> bool:
        if self.zoom is None or s.index < 0 or s.error is not None:
            return True
        hit = self.primal_of.get(s.eqn.loc) if s.eqn is not None else None
        return hit is not None and self.zoom.picks(*hit)

    def __repr__(self) -> str:
        """One line (the dataclass's repr printed every array and step)."""
        state = (
            f"stopped in stage {self.stopped_in}"
            if self.error is not None
            else "passed"
            if self.passed
            else "a check failed"
        )
        return (
            f"<ExplainData {self.mode} of {self.label}: {len(self.forward)} forward steps, "
            f"{len(self.reverse)} reverse steps, {state}>"
        )

    @property
    def gradient(self) -> list[np.ndarray]:
        return [a for _, a in self.derivative]

    @property
    def passed(self) -> bool:
        return self.error is None and all(c.passed for c in self.checks)


# ---------------------------------------------------------------- errors


def err_text(err: Exception) -> str:
    if isinstance(err, JaxprError):
        return err.message
    first = (str(err).splitlines() or [""])[0]
    return f"{type(err).__name__}: {first}" if first else type(err).__name__


def rule_error(err: Exception, kind: str, eqn: Eqn | None) -> JaxprError:
    """The error a walk stopped with, located at the equation it stopped at."""
    loc = eqn.loc if eqn is not None else None
    if isinstance(err, JaxprError):
        return err if err.loc or loc is None else JaxprError(err.message, loc)
    if eqn is None:
        return JaxprError(err_text(err))
    return JaxprError(f"the {kind} rule of '{eqn.prim}' failed: {err_text(err)}", loc)


# ---------------------------------------------------------------- the recorder


def _zero(t) -> bool:
    from ...ad.zeros import is_zero

    return t is None or is_zero(t)


class Recorder(Observer):
    """Observer of the AD walks (`ad.observe`) that fills an `ExplainData`.

    `namer` names the primal program and the forward walk; the linear program and the reverse
    walk get their own `Namer`, whose fresh names follow the forward walk's.  After the walks,
    `forward_program()` and `reverse_program()` are the equations they emitted, in order,
    over the walks' inputs (for `checks.fill_values`)."""

    def __init__(self, data: ExplainData, namer, width: int = 100):
        self.data = data
        self.namer = namer
        self.lnamer = None
        self.width = width
        self.walk: str | None = None  # "jvp" | "transpose": the walk under way
        self.failed: str | None = None  # the walk that stopped (step_failed)
        self.error: JaxprError | None = None
        #: (eqn, kind, notes) of the step whose rule ran last (`step_notes`)
        self._rule_run: tuple | None = None
        # forward walk
        self.fwd_consts: list = []
        self.fwd_primals: list = []
        self.fwd_tangents: list = []
        self.fwd_eqns: list[Eqn] = []
        self._tangent_ids: set[int] = set()
        # linearize
        self.primal: Jaxpr | None = None
        self.linear: Jaxpr | None = None
        self.info = None
        # reverse walk
        self.rev_jaxpr: Jaxpr | None = None
        self.rev_args: list = []
        self.rev_consts: list = []
        self.seeds: list = []  # the output cotangents (Atom or Zero), one per output
        self.rev_eqns: list[Eqn] = []
        self._forward_ids: set[int] = set()
        self._lin_rev: list[tuple[int, Eqn]] | None = None
        self._pos = 0
        self._step: ReverseStep | None = None
        self._seed_step: ReverseStep | None = None
        self._seeded: set[int] = set()
        self._cts: dict[int, Any] = {}
        self._uses: dict[int, int] = {}
        self._n_acc: dict[int, int] = {}

    # ------------------------------------------------------------ naming
    def _alias(self, namer, v, like) -> None:
        if isinstance(v, Var) and isinstance(like, Var) and v is not like:
            namer.set_name(v, namer.name(like))

    def _value(self, namer, x) -> Value:
        return Value(namer.atom(x), x)

    def _eqn(self, namer, e: Eqn) -> str:
        return namer.eqn_text(e, self.width)

    def _fallbacks(self, where: str, eqn: Eqn) -> list[str]:
        """What the rule of `eqn` noted (a fallback, a plugin's rule), as the walk reported it
        (`step_notes`), also in the summary under `where`."""
        run = self._rule_run
        found = list(run[2]) if run is not None and run[0] is eqn else []
        self.data.fallbacks.extend((where, f) for f in found)
        return found

    # ------------------------------------------------------------ what the rules noted
    def step_notes(self, eqn, kind, notes) -> None:
        self._rule_run = (eqn, kind, list(notes))

    # ------------------------------------------------------------ forward (jvp_eval)
    def jvp_begin(self, jaxpr, primals, tangents, consts) -> None:
        n = self.namer
        self.walk = "jvp"
        self.fwd_consts = list(consts)
        self.fwd_primals = list(primals)
        for v, p in zip(jaxpr.constvars, consts):
            self._alias(n, p, v)
        for v, p, t in zip(jaxpr.invars, primals, tangents):
            self._alias(n, p, v)
            if not _zero(t):
                n.set_name(t, "t_" + n.name(v))
                self.fwd_tangents.append(t)
                self._tangent_ids.add(id(t))
        self.data.tangent_inputs = [self._value(n, t) for t in self.fwd_tangents]

    def jvp_step(self, eqn, kind, primals, tangents, primal_outs, tangent_outs, emitted) -> None:
        n = self.namer
        step = ForwardStep(len(self.data.forward), eqn, self._eqn(n, eqn))
        self.data.forward.append(step)
        step.tangents_in = [self._value(n, t) for t in tangents if not _zero(t)]
        eqns = emitted.eqns()
        self.fwd_eqns.extend(eqns)
        for o, p in zip(eqn.outputs, primal_outs):
            self._alias(n, p, o)
        step.fallbacks = self._fallbacks(f"eqn {step.index} ({eqn.prim})", eqn)
        if kind == "copy":
            step.constant = True
            return
        step.kind = kind
        for o, t in zip(eqn.outputs, tangent_outs):
            if not _zero(t) and is_inexact(o.type):
                n.set_name(t, "t_" + n.name(o))
                self._tangent_ids.add(id(t))
                step.tangents_out.append(self._value(n, t))
            elif is_inexact(o.type):
                step.zero_outs.append(n.atom(o))
        pids = {id(p) for p in primal_outs if isinstance(p, Var)}
        if emitted.split:
            primal_eqns, tangent_eqns = emitted.primal(), emitted.tangent()
        else:
            primal_eqns, tangent_eqns = self._sides(eqns, pids)
        for e in primal_eqns:
            if not (e.outputs and all(id(o) in pids for o in e.outputs)):
                step.primal_side.append(self._eqn(n, e))
        step.tangent_eqns = [self._eqn(n, e) for e in tangent_eqns]

    def _sides(self, eqns: list[Eqn], pids: set[int]) -> tuple[list[Eqn], list[Eqn]]:
        """The primal and tangent sides of one program's step (jvp), as a split builder
        sorts them: an equation reading a tangent is on the tangent side (the step's primal
        results stay primal), and so is a constant (zeros) only the tangent side reads."""
        tangent: list[bool] = []
        for e in eqns:
            t = any(isinstance(x, Var) and id(x) in self._tangent_ids for x in e.inputs)
            if t:
                self._tangent_ids.update(id(o) for o in e.outputs if id(o) not in pids)
            tangent.append(t)
        users: dict[int, list[int]] = {}
        for k, e in enumerate(eqns):
            for x in e.inputs:
                if isinstance(x, Var):
                    users.setdefault(id(x), []).append(k)
        for k, e in enumerate(eqns):
            if tangent[k] or any(isinstance(x, Var) for x in e.inputs):
                continue
            used = [u for o in e.outputs for u in users.get(id(o), [])]
            if used and all(tangent[u] for u in used) and not any(id(o) in pids for o in e.outputs):
                tangent[k] = True
        return [e for e, t in zip(eqns, tangent) if not t], [e for e, t in zip(eqns, tangent) if t]

    def forward_program(self) -> tuple[list, list, list[Eqn]]:
        """(constvars, invars: primals then tangents, the equations the forward walk emitted)."""
        return self.fwd_consts, self.fwd_primals + self.fwd_tangents, self.fwd_eqns

    # ------------------------------------------------------------ linearize
    def linearized(self, primal, linear, info) -> None:
        from ...text.printer import Namer

        self.primal, self.linear, self.info = primal, linear, info
        ln = self.lnamer = Namer(self.namer.style, after=self.namer)
        n_res = len(info.residuals)
        for k, v in enumerate(linear.invars[:n_res]):
            ln.set_name(v, f"r{k}")
        diff = [i for i, m in enumerate(info.in_mask) if m]
        for v, i in zip(linear.invars[n_res:], diff):
            ln.set_name(v, "t_" + self.data.input_names[i])
        self.data.linear_text = ln.jaxpr_text(linear)

    # ------------------------------------------------------------ reverse (backward_pass)
    def transpose_begin(self, jaxpr, linear_mask, args, cts_out, consts) -> None:
        from ...text.printer import Namer

        self.walk = "transpose"
        if self.lnamer is None:
            self.lnamer = Namer(self.namer.style, after=self.namer)
            self.data.linear_text = self.lnamer.jaxpr_text(jaxpr)
        ln = self.lnamer
        self.rev_jaxpr = jaxpr
        self._mask = list(linear_mask)
        self.rev_consts = list(consts)
        for v, x in zip(jaxpr.constvars, consts):
            self._alias(ln, x, v)
        for v, lin, a in zip(jaxpr.invars, linear_mask, args):
            if not lin:
                self._alias(ln, a, v)
                self.rev_args.append(a)
        outs = range(len(jaxpr.outvars))
        if self.info is not None and len(self.info.out_mask) >= len(jaxpr.outvars):
            outs = [j for j, m in enumerate(self.info.out_mask) if m]
        for j, ct in zip(outs, cts_out):
            if isinstance(ct, Var) and j < len(self.data.output_names):
                ln.set_name(ct, "ct_" + self.data.output_names[j])
        self.seeds = list(cts_out)
        self.data.seeds = [self._value(ln, c) for c in cts_out if not _zero(c)]
        for e in jaxpr.eqns:
            for x in e.inputs:
                if isinstance(x, Var):
                    self._uses[id(x)] = self._uses.get(id(x), 0) + 1
        for x in jaxpr.outvars:
            if isinstance(x, Var):
                self._uses[id(x)] = self._uses.get(id(x), 0) + 1
        self._seed_step = ReverseStep(-1, "output cotangents", "seed")
        self.data.reverse.append(self._seed_step)

    def forward_step(self, eqn, emitted) -> None:
        self._forward_ids.add(id(eqn))
        eqns = emitted.eqns()
        self.rev_eqns.extend(eqns)
        for q in eqns:
            if q.prim == eqn.prim and len(q.outputs) == len(eqn.outputs):
                for new, o in zip(q.outputs, eqn.outputs):
                    self._alias(self.lnamer, new, o)

    def _linear_eqns(self) -> list[tuple[int, Eqn]]:
        """The equations the reverse walk visits: the linear ones, last first."""
        if self._lin_rev is None:
            j = self.rev_jaxpr
            lin = [(k, e) for k, e in enumerate(j.eqns) if id(e) not in self._forward_ids]
            self._lin_rev = lin[::-1]
            seeds = [v for v, c in zip(j.outvars, self.seeds) if not _zero(c)]
            for v, s in zip(seeds, self.data.seeds):
                if id(v) not in self._seeded:
                    self.data.constant_outputs.append(s.name)
        return self._lin_rev

    def _is_linear(self, eqn: Eqn) -> bool:
        """`eqn` is one the reverse walk visits (it reads a value that depends on a linear
        input), whether or not the forward part of the walk has got to it."""
        if self._step is not None or self._lin_rev is not None:
            return any(e is eqn for _, e in self._linear_eqns())
        j = self.rev_jaxpr
        lin = {id(v) for v, a in zip(j.invars, self._mask) if a}
        for e in j.eqns:
            if any(isinstance(x, Var) and id(x) in lin for x in e.inputs):
                if e is eqn:
                    return True
                lin.update(id(o) for o in e.outputs)
        return False

    def _reverse_step(self, eqn) -> ReverseStep:
        """The step of `eqn`, after a skipped step for each linear equation before it."""
        if eqn is None:
            return self._seed_step
        if self._step is not None and self._step.eqn is eqn:
            return self._step
        lin = self._linear_eqns()
        while self._pos < len(lin) and lin[self._pos][1] is not eqn:
            self._skip(*lin[self._pos])
        k = lin[self._pos][0] if self._pos < len(lin) else -1
        self._pos += 1
        step = ReverseStep(k, self._eqn(self.lnamer, eqn), eqn.prim, eqn=eqn)
        self.data.reverse.append(step)
        self._step = step
        return step

    def _skip(self, k: int, e: Eqn) -> None:
        self.data.reverse.append(
            ReverseStep(k, self._eqn(self.lnamer, e), e.prim, skipped=True, eqn=e)
        )
        self._pos += 1

    def cotangent(self, eqn, var, ct, previous, result) -> None:
        ln = self.lnamer
        step = self._reverse_step(eqn)
        if eqn is None:
            self._seeded.add(id(var))
        target = ln.name(var)
        step.moves.append(Move(target, self._value(ln, ct)))
        if not _zero(previous):
            c = self._n_acc[id(var)] = self._n_acc.get(id(var), 0) + 1
            ln.set_name(result, f"ct_{target}_{c}")
            step.accumulations.append(
                Accumulation(
                    target,
                    self._uses.get(id(var), 0),
                    self._value(ln, previous),
                    self._value(ln, ct),
                    self._value(ln, result),
                )
            )
        self._cts[id(var)] = result

    def transpose_step(self, eqn, cts, cts_in, emitted) -> None:
        ln = self.lnamer
        step = self._reverse_step(eqn)
        step.cts_out = [self._value(ln, c) for c in cts if not _zero(c)]
        eqns = emitted.eqns()
        self.rev_eqns.extend(eqns)
        step.eqns = [self._eqn(ln, q) for q in eqns]
        step.fallbacks = self._fallbacks(f"linear eqn {step.index} ({eqn.prim})", eqn)

    def finish_reverse(self) -> None:
        """After a walk that went to the end: the linear equations no cotangent reached."""
        if self.rev_jaxpr is None:
            return
        lin = self._linear_eqns()
        while self._pos < len(lin):
            self._skip(*lin[self._pos])

    def reverse_program(self) -> tuple[list, list, list[Eqn]]:
        """(constvars, invars: the non-linear inputs then the output cotangents, equations)."""
        seeds = [c for c in self.seeds if isinstance(c, Var)]
        return self.rev_consts, self.rev_args + seeds, self.rev_eqns

    # ------------------------------------------------------------ failure
    def step_failed(self, eqn, error) -> None:
        self.failed = self.walk
        if self.walk == "jvp":
            self.error = rule_error(error, "JVP", eqn)
            if eqn is None:
                return
            n = self.namer
            step = ForwardStep(len(self.data.forward), eqn, self._eqn(n, eqn), error=self.error)
            run = self._rule_run
            if run is not None and run[0] is eqn:  # the rule ran and raised
                step.kind = run[1]
            step.fallbacks = self._fallbacks(f"eqn {step.index} ({eqn.prim})", eqn)
            self.data.forward.append(step)
        elif self.walk == "transpose":
            self.error = rule_error(error, "transpose", eqn)
            if eqn is None or not self._is_linear(eqn):
                return  # outside the reverse walk (a non-linear equation re-emitted)
            step = self._reverse_step(eqn)
            ln = self.lnamer
            cts = [self._cts.get(id(o)) for o in eqn.outputs]
            step.cts_out = [self._value(ln, c) for c in cts if not _zero(c)]
            step.error = self.error
