"""`jaxprtool explain`: the whole differentiation pipeline on one program, stage by stage.

`explain_data(jaxpr, args, mode, argnums, seed, consts)` runs the pipeline and returns an
`ExplainData` (the structured walk, with the arrays); `render(data, console)` shows it with rich.

Stages:

1. the primal program, printed as JAX prints it;
2. forward: for each primal equation, its JVP rule run alone (in a fresh split builder, as
   linearize runs it): the helper that registered the rule (`registry.rule_kind`), the primal-side
   work the rule added (future residuals), the tangent equations, and the output tangents with a
   value summary for a random input direction; equations whose input tangents are all
   symbolically zero get no rule ("no tangent (all inputs constant)");
3. (vjp/grad) the linear program of `linearize_jaxpr` and its residuals: where each comes from and
   a summary of its value;
4. (vjp/grad) the reverse walk over the linear program (JAX's `backward_pass`, re-run one
   equation at a time): the cotangent reaching each equation, the equations its transpose rule
   emitted, every cotangent that moves to a linear input, and every accumulation (`add_any`) into
   a value that receives several contributions;
5. the derivative (jvp: the output tangents for the random direction; vjp: the input cotangents
   for a random output cotangent; grad: the gradient), checked against central finite
   differences and, for a program made of one elementwise primitive, an analytic formula.

A stage that cannot go on (a primitive without a JVP or transpose rule) records where it stopped
and the error; later stages are not run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..core import (
    Eqn,
    Jaxpr,
    JaxprError,
    Literal,
    ShapedArray,
    Var,
    is_float,
    is_inexact,
    short_dtype_name,
)
from ..record import prim
from .checkgrad import EPS, TOLERANCE, Check, _random_like, _rel_err, _vdot, least_precise_dtype

MODES = ("jvp", "vjp", "grad")

HEADINGS = {
    1: "1. Primal equations",
    2: "2. Forward: JVP rules",
    3: "3. Linear program and residuals",
    4: "4. Reverse walk (transpose)",
    5: "5. Derivative",
}

#: name and print equations through the printer's internals (same names as the program printout);
#: False: a plain `outs = prim[params] ins` formatter
USE_PRINTER_INTERNALS = True
#: coordinate-wise finite differences of the gradient only up to this many input elements
FD_COORDS_LIMIT = 128
#: analytic formula vs the tool: both exact up to rounding
ANALYTIC_TOLERANCE = {"float16": 1e-2, "bfloat16": 1e-1, "float32": 1e-5, "float64": 1e-10}


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


# ---------------------------------------------------------------- naming and printing


class Namer:
    """Prints programs and single equations with one consistent set of names.

    Uses the printer's own naming (so equations print exactly as in the program printout); if
    the printer's internals are not available, a plain `outs = prim[params] ins` formatter."""

    def __init__(self, style=None, width: int = 100):
        self.width = width
        self.keep: list = []  # names are keyed by id(): keep the objects alive
        self._names: dict[int, str] = {}
        self._counter = 0
        self._p = None
        try:
            from ..text import pretty, printer
            from ..text.style import DEFAULT_STYLE

            if not USE_PRINTER_INTERNALS:
                raise ImportError("plain formatter requested")

            p = printer._Printer(style or DEFAULT_STYLE)
            for attr in ("names", "toplevel", "_name_eqn", "_eqn", "fresh", "style"):
                getattr(p, attr)
            self._p, self._pp, self._printer = p, pretty, printer
        except Exception:  # noqa: BLE001 - fall back to the plain formatter
            self._p = None

    def continue_after(self, other: Namer) -> None:
        """Start fresh names after those `other` has used."""
        if self._p is not None and other._p is not None:
            self._p.counter = max(self._p.counter, other._p.counter)
        else:
            self._names.update({-1 - i: n for i, n in enumerate(other.names.values())})
            self._counter = max(self._counter, other._counter)

    # names
    def _fresh(self) -> str:
        if self._p is not None:
            return self._p.fresh()
        from ..text.printer import encode_name

        used = set(self._names.values())
        while True:
            n = encode_name(self._counter)
            self._counter += 1
            if n not in used:
                return n

    @property
    def names(self) -> dict[int, str]:
        return self._p.names if self._p is not None else self._names

    def set(self, v, name: str) -> None:
        if isinstance(v, Var) and id(v) not in self.names:
            self.keep.append(v)
            self.names[id(v)] = name

    def alias(self, v, like) -> None:
        if isinstance(v, Var) and isinstance(like, Var) and v is not like:
            self.set(v, self.name(like))

    def name(self, a) -> str:
        if isinstance(a, Literal):
            from ..text.printer import literal_text

            return literal_text(a)
        n = self.names.get(id(a))
        if n is None:
            self.keep.append(a)
            n = self.names[id(a)] = self._fresh()
        return n

    # printing
    def program(self, jaxpr: Jaxpr) -> str:
        self.keep.append(jaxpr)
        if self._p is not None:
            try:
                return self._pp.format(self._p.toplevel(jaxpr), 80)
            except Exception:  # noqa: BLE001
                pass
        from ..text.printer import print_jaxpr

        for v in list(jaxpr.constvars) + list(jaxpr.invars):
            self.name(v)
        for e in jaxpr.eqns:
            self.eqn(e)
        return print_jaxpr(jaxpr)

    def eqn(self, e: Eqn) -> str:
        self.keep.append(e)
        if self._p is not None:
            try:
                self._p._name_eqn(e)
                return self._pp.format(self._p._eqn(e), self.width)
            except Exception:  # noqa: BLE001
                pass
        from ..params import format_value

        outs = " ".join(f"{self.name(o)}:{o.type}" for o in e.outputs)
        ins = " ".join(
            self.name(x) + (f":{x.type}" if isinstance(x, Literal) else "") for x in e.inputs
        )
        ps = " ".join(
            f"{k}={'{...}' if isinstance(v, Jaxpr) else format_value(v)}"
            for k, v in sorted(e.params.items())
        )
        rhs = e.prim + (f"[{ps}]" if ps else "") + (" " + ins if ins else "")
        return f"{outs} = {rhs}" if outs else rhs


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
    kind: str | None = None  # the helper that registered the JVP rule; None: no rule ran
    constant: bool = False  # every input tangent is a symbolic zero
    tangents_in: list[Value] = field(default_factory=list)
    primal_side: list[str] = field(default_factory=list)  # extra primal work (future residuals)
    tangent_eqns: list[str] = field(default_factory=list)
    tangents_out: list[Value] = field(default_factory=list)
    zero_outs: list[str] = field(default_factory=list)  # outputs whose tangent stays zero
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
    index: int  # position of the equation in the linear program
    text: str
    prim: str
    cts_out: list[Value] = field(default_factory=list)
    eqns: list[str] = field(default_factory=list)
    moves: list[Move] = field(default_factory=list)
    accumulations: list[Accumulation] = field(default_factory=list)
    skipped: bool = False  # no cotangent reaches it
    error: JaxprError | None = None


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
    direction: list[np.ndarray] = field(default_factory=list)  # v, one per differentiated input
    jvp_program: Jaxpr | None = None
    linear_text: str = ""
    residuals: list[ResidualInfo] = field(default_factory=list)
    seeds: list[Value] = field(default_factory=list)  # output cotangents (vjp: w; grad: 1)
    constant_outputs: list[str] = field(default_factory=list)  # seeds that reach no linear value
    reverse: list[ReverseStep] = field(default_factory=list)
    #: the derivative: jvp -> one output tangent per float output; vjp/grad -> one cotangent per
    #: differentiated input (in input order), as (label, array)
    derivative: list[tuple[str, np.ndarray]] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    analytic: str | None = None  # the formula used, when the analytic check ran
    error: JaxprError | None = None
    stopped_in: int | None = None  # the stage where the walk stopped
    keep: list = field(default_factory=list)

    @property
    def gradient(self) -> list[np.ndarray]:
        return [a for _, a in self.derivative]

    @property
    def passed(self) -> bool:
        return self.error is None and all(c.passed for c in self.checks)


# ---------------------------------------------------------------- running programs


def _runner(jaxpr: Jaxpr, consts):
    """run(args) -> list of arrays, compiled once."""
    import jax

    from ..backend import as_jax_function, check_runnable, evaluate

    check_runnable(jaxpr)
    fn = jax.jit(as_jax_function(jaxpr, None, enable_x64=False))
    consts = list(consts or [])
    return lambda args: evaluate(jaxpr, args, consts, jitted=fn)


def _err_text(err: Exception) -> str:
    if isinstance(err, JaxprError):
        return err.message
    first = (str(err).splitlines() or [""])[0]
    return f"{type(err).__name__}: {first}" if first else type(err).__name__


def _rule_error(err: Exception, kind: str, eqn: Eqn) -> JaxprError:
    if isinstance(err, JaxprError):
        return err if err.loc else JaxprError(err.message, eqn.loc)
    return JaxprError(f"the {kind} rule of '{eqn.prim}' failed: {_err_text(err)}", eqn.loc)


def _eval_values(
    eqns, invars, in_values, values: list[Value], consts=(), constvars=()
) -> JaxprError | None:
    """Fill `values[i].array` by running `eqns` on (invars = in_values).

    When the program does not run, its equations are run one at a time (eagerly) to find the
    one that fails: the values before it are filled, and the error (at its location) returned."""
    from ..ad import builder as B

    known = {id(v): np.asarray(x) for v, x in zip(invars, in_values)}
    outs, seen = [], set()
    for val in values:
        a = val.atom
        if isinstance(a, Literal):
            val.array = literal_array(a)
        elif isinstance(a, Var) and id(a) in known:
            val.array = known[id(a)]
        elif isinstance(a, Var) and id(a) not in seen:
            seen.add(id(a))
            outs.append(a)
    if not outs:
        return None
    eqns = B.dce_eqns(list(eqns), outs)
    prog = B.make_jaxpr(invars, eqns, outs, constvars)
    from ..backend import eval_eager, evaluate

    try:
        res = evaluate(prog, list(in_values), list(consts))
        got = {id(v): r for v, r in zip(outs, res)}
        error = None
    except Exception as first:  # noqa: BLE001 - located below, equation by equation
        got = dict(known)
        got.update({id(v): np.asarray(x) for v, x in zip(constvars, consts)})
        error = JaxprError(f"cannot evaluate: {_err_text(first)}")
        for e in eqns:
            ins = B.free_vars([e], [])
            try:
                res = eval_eager(B.make_jaxpr(ins, [e], list(e.outputs)), [got[id(v)] for v in ins])
            except Exception as err:  # noqa: BLE001
                error = JaxprError(f"cannot evaluate '{e.prim}': {_err_text(err)}", e.loc)
                break
            got.update({id(v): r for v, r in zip(e.outputs, res)})
    for val in values:
        if val.array is None and isinstance(val.atom, Var):
            val.array = got.get(id(val.atom))
    return error


# ---------------------------------------------------------------- stage 2: forward


def _forward(jaxpr: Jaxpr, mask, namer: Namer, data: ExplainData):
    """Run each JVP rule alone; returns (jvp program eqns, tangent inputs, output tangents)."""
    from ..ad import builder as B
    from ..ad.jvp import jvp_rule, missing_jvp
    from ..ad.registry import rule_kind
    from ..ad.zeros import Zero, is_zero, tangent_type

    env: dict[int, Any] = {}
    tenv: dict[int, Any] = {}
    for v in jaxpr.constvars:
        env[id(v)] = v
    tan_in = []
    for v, m in zip(jaxpr.invars, mask):
        env[id(v)] = v
        if m:
            t = Var(tangent_type(v.type), None)
            namer.set(t, "t_" + namer.name(v))
            tenv[id(v)] = t
            tan_in.append(t)

    def read(x):
        return x if isinstance(x, Literal) else env[id(x)]

    def tread(x):
        if isinstance(x, Literal):
            return Zero(tangent_type(x.type))
        return tenv.get(id(x)) or Zero(tangent_type(x.type))

    eqns: list[Eqn] = []
    for i, eqn in enumerate(jaxpr.eqns):
        ins = [read(x) for x in eqn.inputs]
        tins = [tread(x) for x in eqn.inputs]
        step = ForwardStep(i, eqn, namer.eqn(eqn))
        data.forward.append(step)
        step.tangents_in = [
            Value(namer.name(t), t) for x, t in zip(eqn.inputs, tins) if not is_zero(t)
        ]
        if all(is_zero(t) for t in tins):
            step.constant = True
            eqns.append(eqn.replace(inputs=ins))
            for o in eqn.outputs:
                env[id(o)] = o
            continue
        rule = jvp_rule(eqn.prim, True)  # run in a split builder below
        step.kind = rule_kind.get(eqn.prim, "primitive_jvps" if rule else None)
        if rule is None:
            step.error = missing_jvp(eqn)
            return eqns, tan_in, None
        b = B.Builder(split=True, loc=eqn.loc)
        b.cur_eqn = eqn
        b.mark_tangent(*[t for t in tins if not is_zero(t)])
        try:
            with B.use(b):
                pouts, touts = rule(ins, tins, **eqn.params)
        except Exception as e:  # noqa: BLE001 - a failing rule is where the walk stops
            step.error = _rule_error(e, "JVP", eqn)
            return eqns, tan_in, None
        pouts, touts = list(pouts), list(touts)
        if len(pouts) != len(eqn.outputs) or len(touts) != len(eqn.outputs):
            step.error = JaxprError(
                f"internal error: the JVP rule of '{eqn.prim}' returned the wrong number of results",
                eqn.loc,
            )
            return eqns, tan_in, None
        pids = {id(p) for p in pouts if isinstance(p, Var)}
        for o, p in zip(eqn.outputs, pouts):
            env[id(o)] = p
            namer.alias(p, o)
        for o, t in zip(eqn.outputs, touts):
            if t is not None and not is_zero(t) and is_inexact(o.type):
                tenv[id(o)] = t
                namer.set(t, "t_" + namer.name(o))
                step.tangents_out.append(Value(namer.name(t), t))
            elif is_inexact(o.type):
                step.zero_outs.append(namer.name(o))
        for e in b.primal_eqns:
            if not (e.outputs and all(id(o) in pids for o in e.outputs)):
                step.primal_side.append(namer.eqn(e))
        step.tangent_eqns = [namer.eqn(e) for e in b.tangent_eqns]
        eqns.extend(b.primal_eqns)
        eqns.extend(b.tangent_eqns)
    touts = [tread(x) for x in jaxpr.outvars]
    outs = [read(x) for x in jaxpr.outvars]
    return eqns, tan_in, (outs, touts)


# ---------------------------------------------------------------- stage 4: reverse walk


def _reverse(linear: Jaxpr, n_res: int, seeds, namer: Namer, data: ExplainData):
    """JAX's backward_pass, one equation at a time; returns (emitted eqns, input cts or None)."""
    from ..ad import builder as B
    from ..ad import ops
    from ..ad.registry import Accumulator, fancy_transposes, primitive_transposes
    from ..ad.transpose import missing_transpose
    from ..ad.zeros import UndefinedPrimal, Zero, add_tangents, is_zero, tangent_type

    lin: set[int] = {id(v) for v in linear.invars[n_res:]}
    uses: dict[int, int] = {}
    for e in linear.eqns:
        for x in e.inputs:
            if isinstance(x, Var):
                uses[id(x)] = uses.get(id(x), 0) + 1
    for x in linear.outvars:
        if isinstance(x, Var):
            uses[id(x)] = uses.get(id(x), 0) + 1

    def is_lin(x):
        return isinstance(x, Var) and id(x) in lin

    emitted: list[Eqn] = []
    lin_eqns = []
    for k, e in enumerate(linear.eqns):
        if any(is_lin(x) for x in e.inputs):
            lin.update(id(o) for o in e.outputs)
            lin_eqns.append((k, e))
        else:
            emitted.append(e)  # non-linear work (same variables: the walk reads them directly)
    ct_env: dict[int, Any] = {}
    n_acc: dict[int, int] = {}

    def add_ct(v, ct, step: ReverseStep):
        if ct is None or is_zero(ct):
            return
        if tuple(getattr(ct.type, "shape", ())) != tuple(getattr(v.type, "shape", ())):
            ct = ops.unbroadcast(v.type, ct)
        target = namer.name(v)
        step.moves.append(Move(target, Value(namer.name(ct), ct)))
        prev = ct_env.get(id(v))
        if prev is None:
            ct_env[id(v)] = ct
            return
        new = add_tangents(prev, ct)
        n_acc[id(v)] = n_acc.get(id(v), 0) + 1
        namer.set(new, f"ct_{target}_{n_acc[id(v)]}")
        ct_env[id(v)] = new
        step.accumulations.append(
            Accumulation(
                target,
                uses.get(id(v), 0),
                Value(namer.name(prev), prev),
                Value(namer.name(ct), ct),
                Value(namer.name(new), new),
            )
        )

    seed_step = ReverseStep(-1, "output cotangents", "seed")
    b = B.Builder()
    with B.use(b):
        for v, ct in zip(linear.outvars, seeds):
            if is_lin(v):
                add_ct(v, ct, seed_step)
            else:
                data.constant_outputs.append(namer.name(ct))
    emitted.extend(b.eqns)
    seed_step.eqns = [namer.eqn(e) for e in b.eqns]
    data.reverse.append(seed_step)

    for k, e in reversed(lin_eqns):
        step = ReverseStep(k, namer.eqn(e), e.prim)
        data.reverse.append(step)
        cts = [ct_env.pop(id(o), None) or Zero(tangent_type(o.type)) for o in e.outputs]
        step.cts_out = [Value(namer.name(c), c) for c in cts if not is_zero(c)]
        if all(is_zero(c) for c in cts) and e.prim not in fancy_transposes:
            step.skipped = True
            continue
        targs = [UndefinedPrimal(x.type) if is_lin(x) else x for x in e.inputs]
        b = B.Builder(loc=e.loc)
        try:
            with B.use(b):
                if e.prim in fancy_transposes:
                    accums = [Accumulator(x.type) if is_lin(x) else None for x in e.inputs]
                    fancy_transposes[e.prim](cts, *targs, accums=accums, **e.params)
                    for x, acc in zip(e.inputs, accums):
                        if acc is not None:
                            add_ct(x, acc.get(), step)
                else:
                    rule = primitive_transposes.get(e.prim)
                    if rule is None:
                        step.error = missing_transpose(e)
                        return emitted, None
                    res = list(rule(cts, *targs, **e.params))
                    if len(res) != len(e.inputs):
                        step.error = JaxprError(
                            f"internal error: the transpose rule of '{e.prim}' returned {len(res)} "
                            f"cotangents for {len(e.inputs)} operands",
                            e.loc,
                        )
                        return emitted, None
                    for x, r in zip(e.inputs, res):
                        if is_lin(x):
                            add_ct(x, r, step)
        except Exception as err:  # noqa: BLE001 - a failing rule is where the walk stops
            step.error = _rule_error(err, "transpose", e)
            return emitted, None
        step.eqns = [namer.eqn(q) for q in b.eqns]
        emitted.extend(b.eqns)
    cts_in = [ct_env.get(id(v)) or Zero(tangent_type(v.type)) for v in linear.invars[n_res:]]
    return emitted, cts_in


# ---------------------------------------------------------------- stage 5: analytic formulas


def _unbroadcast_np(g, shape):
    g = np.asarray(g)
    while g.ndim > len(shape):
        g = g.sum(axis=0)
    for i, d in enumerate(shape):
        if d == 1 and g.shape[i] != 1:
            g = g.sum(axis=i, keepdims=True)
    return g.reshape(shape)


def analytic_partials(jaxpr: Jaxpr, args, consts=()):
    """(formula, [partial derivative array per eqn input]) for a single elementwise primitive
    program `out = prim x [y]` (inputs: invars, constvars or literals); None otherwise."""
    if len(jaxpr.eqns) != 1 or len(jaxpr.outvars) != 1:
        return None
    e = jaxpr.eqns[0]
    if jaxpr.outvars[0] is not e.outputs[0] or len(e.outputs) != 1 or e.params:
        return None
    if not is_float(e.outputs[0].type):
        return None
    vals = {id(v): np.asarray(a, np.float64) for v, a in zip(jaxpr.invars, args)}
    vals.update({id(v): np.asarray(a, np.float64) for v, a in zip(jaxpr.constvars, consts)})
    xs = []
    for x in e.inputs:
        if isinstance(x, Literal):
            xs.append(np.asarray(literal_array(x), np.float64))
        elif id(x) in vals:
            xs.append(vals[id(x)])
        else:
            return None
    rule = prim(e.prim).derivative_formula
    if rule is None:
        return None
    formula, fn = rule
    if len(xs) == 1:
        return f"d {e.prim}(x)/dx = {formula}", [fn(xs[0])]
    if len(xs) == 2:
        return f"{e.prim}(x, y): {formula}", list(fn(xs[0], xs[1]))
    return None


# ---------------------------------------------------------------- the pipeline


def _labels(namer: Namer, vs) -> list[str]:
    return [namer.name(v) for v in vs]


class _Stop(Exception):
    def __init__(self, stage: int, error: JaxprError):
        super().__init__(error.message)
        self.stage = stage
        self.error = error


def _guard(stage: int, fn, *args):
    """fn(*args); any failure stops the walk at `stage` with a located JaxprError."""
    try:
        return fn(*args)
    except _Stop:
        raise
    except Exception as e:  # noqa: BLE001 - shown as where the walk stops
        raise _Stop(stage, e if isinstance(e, JaxprError) else JaxprError(_err_text(e))) from None


def explain_data(
    jaxpr: Jaxpr,
    args,
    mode: str | None = None,
    argnums=None,
    seed: int = 0,
    consts=None,
    label: str = "f",
    width: int = 100,
) -> ExplainData:
    """Run the whole pipeline on `jaxpr` at `args`.

    Bad usage (mode, argnums, no float inputs/outputs) raises JaxprError; anything that stops
    the walk later (a missing JVP or transpose rule, a program that does not run) is recorded in
    `.error`, with the stage in `.stopped_in`."""
    from ..ad.jvp import diff_mask
    from ..text.style import detect_style

    mode = mode or default_mode(jaxpr)
    if mode not in MODES:
        raise JaxprError(f"unknown mode '{mode}' (expected jvp, vjp or grad)")
    consts = list(consts or [])
    args = [np.asarray(a) for a in args]
    if mode == "grad":
        _check_grad_output(jaxpr)
    mask = diff_mask(jaxpr, argnums)
    if not any(mask):
        raise JaxprError("no float or complex inputs to differentiate")
    if not any(is_inexact(v.type) for v in jaxpr.outvars):
        raise JaxprError("no float or complex outputs to differentiate")
    try:
        style = detect_style(jaxpr)
    except Exception:  # noqa: BLE001
        style = None
    data = ExplainData(mode, label, args=args, in_mask=mask)
    namer = Namer(style, width)
    data.keep.append(namer)
    data.primal_text = namer.program(jaxpr)
    data.input_names = _labels(namer, jaxpr.invars)
    data.output_names = _labels(namer, jaxpr.outvars)
    try:
        _pipeline(data, jaxpr, args, consts, mask, seed, namer, style, width)
    except _Stop as stop:
        data.error, data.stopped_in = stop.error, stop.stage
    return data


def _pipeline(data: ExplainData, jaxpr, args, consts, mask, seed, namer, style, width):
    from ..ad import builder as B
    from ..ad.linearize import linearize_jaxpr
    from ..ad.zeros import instantiate

    mode = data.mode
    rng = np.random.default_rng(seed)
    diff = [i for i, m in enumerate(mask) if m]

    # ---- stage 2
    fwd_eqns, tan_in, result = _forward(jaxpr, mask, namer, data)
    data.keep.append(fwd_eqns)
    data.direction = [_random_like(args[i], rng) for i in diff]
    tangent_values = [v for s in data.forward for v in s.tangents_in + s.tangents_out]
    fwd_in = list(jaxpr.invars) + tan_in
    fwd_vals = list(args) + data.direction
    if result is None:
        err = next(s.error for s in data.forward if s.error is not None)
        try:
            _eval_values(fwd_eqns, fwd_in, fwd_vals, tangent_values, consts, jaxpr.constvars)
        except Exception:  # noqa: BLE001 - the stop itself is what is reported
            pass
        raise _Stop(2, err)
    outs, touts = result
    b = B.Builder()
    t_out_atoms = []
    with B.use(b):
        for o, t in zip(jaxpr.outvars, touts):
            if is_inexact(o.type):
                t_out_atoms.append(instantiate(t))
    jvp_eqns = fwd_eqns + b.eqns
    data.jvp_program = B.make_jaxpr(fwd_in, jvp_eqns, list(outs) + t_out_atoms, jaxpr.constvars)
    out_tangents = [Value(namer.name(t), t) for t in t_out_atoms]
    err = _guard(
        2,
        _eval_values,
        jvp_eqns,
        fwd_in,
        fwd_vals,
        tangent_values + out_tangents,
        consts,
        jaxpr.constvars,
    )
    if err is not None:
        raise _Stop(2, err)

    run = _guard(2, _runner, jaxpr, consts)
    primal_outs = _guard(2, run, args)
    outs_inexact = [j for j, v in enumerate(jaxpr.outvars) if is_inexact(v.type)]
    dtype = least_precise_dtype(jaxpr)
    tol = TOLERANCE.get(dtype, 2e-3)
    eps = EPS.get(dtype.replace("complex64", "float32").replace("complex128", "float64"), 1e-3)

    def shifted(vs, sign):
        xs = list(args)
        for i, d in zip(diff, vs):
            xs[i] = (np.asarray(args[i]) + sign * eps * d).astype(args[i].dtype)
        return _guard(5, run, xs)

    def fd_along(vs):
        plus, minus = shifted(vs, +1), shifted(vs, -1)
        return [
            (np.asarray(plus[j], np.complex128) - np.asarray(minus[j], np.complex128)) / (2 * eps)
            for j in outs_inexact
        ]

    if mode == "jvp":
        data.derivative = [
            (f"tangent of {data.output_names[j]}", np.asarray(t.array))
            for j, t in zip(outs_inexact, out_tangents)
        ]
        fd = fd_along(data.direction)
        err = max(_rel_err(a, b_) for (_, a), b_ in zip(data.derivative, fd))
        data.checks.append(Check("jvp vs central finite differences", err, tol))
        _analytic(data, jaxpr, args, consts, diff, dtype)
        return

    # ---- stage 3
    if mode == "grad":
        inst = [True] + [False] * (len(jaxpr.outvars) - 1)
    else:
        inst = [is_inexact(v.type) for v in jaxpr.outvars]
    primal, linear, info = _guard(3, linearize_jaxpr, jaxpr, diff, inst)
    data.keep.extend([primal, linear])
    lnamer = Namer(style, width)
    lnamer.continue_after(namer)  # no name of the linear program reads as a primal one
    data.keep.append(lnamer)
    n_res = len(info.residuals)
    n_out = len(jaxpr.outvars)
    res_vars = list(linear.invars[:n_res])
    for k, v in enumerate(res_vars):
        lnamer.set(v, f"r{k}")
    for v, i in zip(linear.invars[n_res:], diff):
        lnamer.set(v, "t_" + data.input_names[i])
    data.linear_text = lnamer.program(linear)
    pvals = _guard(3, lambda: _runner(primal, consts)(args)) if n_res else []
    by_loc = {e.loc: (i, e) for i, e in enumerate(jaxpr.eqns) if e.loc is not None}
    for r, v in zip(info.residuals, res_vars):
        if r.source == "input":
            arr, origin = args[r.index], f"primal input {r.index} ({data.input_names[r.index]})"
        elif r.source == "const":
            arr, origin = consts[r.index], f"constant {r.index}"
        elif r.source == "output":
            arr = pvals[r.index]
            origin = f"primal output {r.index} ({data.output_names[r.index]})"
        else:
            arr = pvals[n_out + r.index]
            origin = _residual_origin(data, r, by_loc)
        data.residuals.append(ResidualInfo(Value(lnamer.name(v), v, np.asarray(arr)), origin))

    # ---- stage 4
    seeds = []
    seed_vals = []
    outs_with_ct = [j for j, m in enumerate(info.out_mask) if m]
    for j, lv in zip(outs_with_ct, linear.outvars):
        s = Var(lv.type, None)
        lnamer.set(s, f"ct_{data.output_names[j]}")
        seeds.append(s)
        like = np.asarray(primal_outs[j])
        if mode == "grad":
            seed_vals.append(np.ones_like(like))
        else:
            seed_vals.append(_random_like(like, rng))
    data.seeds = [Value(lnamer.name(s), s, a) for s, a in zip(seeds, seed_vals)]
    rev_eqns, cts_in = _reverse(linear, n_res, seeds, lnamer, data)
    data.keep.append(rev_eqns)
    b = B.Builder()
    ct_atoms = []
    if cts_in is not None:
        with B.use(b):
            ct_atoms = [instantiate(c) for c in cts_in]
    final = [Value(lnamer.name(c), c) for c in ct_atoms]
    walk_values = []
    for s in data.reverse:
        walk_values += s.cts_out + [m.value for m in s.moves]
        for a in s.accumulations:
            walk_values += [a.previous, a.contribution, a.result]
    lin_in = res_vars + seeds
    lin_vals = [r.value.array for r in data.residuals] + seed_vals
    try:
        err = _eval_values(rev_eqns + b.eqns, lin_in, lin_vals, walk_values + final)
    except Exception as e:  # noqa: BLE001
        err = e if isinstance(e, JaxprError) else JaxprError(_err_text(e))
    if cts_in is None:
        raise _Stop(4, next(s.error for s in data.reverse if s.error is not None))
    if err is not None:
        raise _Stop(4, err)
    data.derivative = [
        (f"{'gradient' if mode == 'grad' else 'cotangent'} of {data.input_names[i]}", f.array)
        for i, f in zip(diff, final)
    ]

    # ---- stage 5: checks
    w = seed_vals
    g = [np.asarray(a) for _, a in data.derivative]
    fd = fd_along(data.direction)
    lhs = sum(_vdot(a, b_) for a, b_ in zip(w, fd))
    rhs = sum(_vdot(a, b_) for a, b_ in zip(g, data.direction))
    data.checks.append(
        Check(
            "<w, FD(J v)> = <J^T w, v> (central differences, random v)",
            abs(lhs - rhs) / max(1.0, abs(lhs)),
            tol,
        )
    )
    n_coords = sum(int(args[i].size) for i in diff)
    complex_in = any(np.iscomplexobj(args[i]) for i in diff)
    if n_coords <= FD_COORDS_LIMIT and not complex_in:
        fd_g = []
        for i in diff:
            gi = np.zeros(args[i].shape, np.float64)
            for idx in np.ndindex(args[i].shape):
                basis = [np.zeros_like(args[k]) for k in diff]
                basis[diff.index(i)][idx] = 1
                d = fd_along(basis)
                gi[idx] = sum(_vdot(a, b_) for a, b_ in zip(w, d))
            fd_g.append(gi)
        err = max(_rel_err(a, b_) for a, b_ in zip(g, fd_g))
        data.checks.append(Check("J^T w vs central finite differences, coordinate-wise", err, tol))
    _analytic(data, jaxpr, args, consts, diff, dtype, w)


def _residual_origin(data: ExplainData, r, by_loc) -> str:
    hit = by_loc.get(r.loc)
    where = f" at {r.loc}" if r.loc else ""
    step = data.forward[hit[0]] if hit is not None and hit[0] < len(data.forward) else None
    if step is None:
        return f"'{r.prim}'{where}"
    first = step.text.splitlines()[0] + (" ..." if "\n" in step.text else "")
    if step.constant:
        return f"'{r.prim}': primal value of eqn {step.index}: {first}{where}"
    if r.prim == step.eqn.prim:
        return f"'{r.prim}': primal half of eqn {step.index}: {first}{where}"
    return f"'{r.prim}' from the JVP rule of eqn {step.index}: {first}{where}"


def _analytic(data: ExplainData, jaxpr, args, consts, diff, dtype, w=None):
    got = analytic_partials(jaxpr, args, consts)
    if got is None:
        return
    formula, partials = got
    e = jaxpr.eqns[0]
    out_shape = tuple(e.outputs[0].type.shape)
    pos = {id(v): i for i, v in enumerate(jaxpr.invars)}
    tol = ANALYTIC_TOLERANCE.get(dtype, 1e-5)
    if data.mode == "jvp":
        v_of = {i: d for i, d in zip(diff, data.direction)}
        expected = np.zeros(out_shape, np.float64)
        for x, p in zip(e.inputs, partials):
            i = pos.get(id(x)) if isinstance(x, Var) else None
            if i in v_of:
                expected = expected + p * np.asarray(v_of[i], np.float64)
        err = _rel_err(data.derivative[0][1], np.broadcast_to(expected, out_shape))
    else:
        wv = np.asarray(w[0], np.float64)
        expected_by_input = {i: np.zeros(args[i].shape, np.float64) for i in diff}
        for x, p in zip(e.inputs, partials):
            i = pos.get(id(x)) if isinstance(x, Var) else None
            if i in expected_by_input:
                contrib = np.broadcast_to(p, out_shape) * wv
                expected_by_input[i] = expected_by_input[i] + _unbroadcast_np(
                    contrib, tuple(args[i].shape)
                )
        err = max(_rel_err(a, expected_by_input[i]) for i, (_, a) in zip(diff, data.derivative))
    data.analytic = formula
    data.checks.append(Check(f"analytic formula: {formula}", err, tol))


def default_mode(jaxpr: Jaxpr) -> str:
    """grad for one scalar float output, else vjp."""
    outs = jaxpr.outvars
    if len(outs) == 1:
        t = outs[0].type
        if isinstance(t, ShapedArray) and tuple(t.shape) == () and is_float(t):
            return "grad"
    return "vjp"


def _check_grad_output(jaxpr: Jaxpr) -> None:
    from ..ad.api import _scalar_error

    outs = jaxpr.outvars
    if len(outs) != 1:
        raise JaxprError(
            f"--mode grad: gradient only defined for scalar-output functions; the program has "
            f"{len(outs)} outputs (use --mode vjp)"
        )
    t = outs[0].type
    if not isinstance(t, ShapedArray) or tuple(t.shape) != ():
        raise JaxprError("--mode grad: " + _scalar_error(t) + " (or use --mode vjp)")
    if not is_float(t):
        raise JaxprError(
            f"--mode grad: the output must be a real float scalar, got {t} (use --mode vjp)"
        )


# ---------------------------------------------------------------- rendering


def _small(a) -> str | None:
    a = np.asarray(a)
    if a.size == 0 or a.size > 12 or a.dtype.kind == "V":
        return None
    return np.array2string(a, precision=5, separator=", ", suppress_small=False).replace("\n", "")


def render(data: ExplainData, console) -> None:
    """Print the walk on a rich Console (Text objects only: program text is never markup)."""
    from rich.table import Table
    from rich.text import Text

    def line(*parts, indent=0):
        t = Text(" " * indent)
        for p in parts:
            if isinstance(p, tuple):
                t.append(p[0], style=p[1])
            else:
                t.append(p)
        console.print(t, soft_wrap=False)

    def code(text, indent=4, style="cyan"):
        for ln in text.splitlines():
            line((ln, style), indent=indent)

    def heading(n):
        console.print()
        console.rule(Text(HEADINGS[n], style="bold"), align="left")

    def stop(err: JaxprError, indent=2):
        loc = f"{err.loc}: " if err.loc else ""
        line(("walk stops here: ", "bold red"), loc + err.message, indent=indent)

    console.print(
        Text(f"explain {data.label}  (mode {data.mode})", style="bold underline"), soft_wrap=True
    )
    # ---- 1
    heading(1)
    code(data.primal_text, indent=2, style="")
    # ---- 2
    heading(2)
    diff_names = [n for n, m in zip(data.input_names, data.in_mask) if m]
    line("tangent inputs: ", ", ".join(f"t_{n}" for n in diff_names), "  (random direction v)")
    for s in data.forward:
        console.print()
        line((f"eqn {s.index}  ", "bold"), (s.text.splitlines()[0], "cyan"))
        for extra in s.text.splitlines()[1:]:
            line((extra, "cyan"), indent=6)
        if s.constant:
            line(("no tangent (all inputs constant)", "dim"), indent=4)
            continue
        kind = s.kind or "no rule"
        line("rule: ", (kind, "bold magenta"), f" ({s.eqn.prim})", indent=4)
        if s.error is not None:
            stop(s.error, indent=4)
            break
        line("tangents in: ", ", ".join(f"{v.name}  {v.summary}" for v in s.tangents_in), indent=4)
        if s.primal_side:
            line("primal side (residual work):", indent=4)
            for t in s.primal_side:
                code(t, indent=6, style="green")
        if s.tangent_eqns:
            line("tangent equations:", indent=4)
            for t in s.tangent_eqns:
                code(t, indent=6, style="yellow")
        for v in s.tangents_out:
            line("tangent out: ", (v.name, "bold"), "  ", v.summary, indent=4)
        for n in s.zero_outs:
            line(f"tangent of {n}: symbolic zero", indent=4)

    def final_stop(stage_shown_by_a_step: bool):
        if not stage_shown_by_a_step:
            console.print()
            stop(data.error)
        _render_final_error(data, line)

    if data.stopped_in == 2:
        final_stop(any(s.error is not None for s in data.forward))
        return
    if data.mode != "jvp":
        # ---- 3
        heading(3)
        if data.stopped_in == 3:
            final_stop(False)
            return
        code(data.linear_text, indent=2, style="")
        console.print()
        table = Table(title="residuals", show_lines=False, title_justify="left")
        for col in ("residual", "value", "origin"):
            table.add_column(col, overflow="fold")
        for r in data.residuals:
            table.add_row(Text(r.value.name), Text(r.value.summary), Text(r.origin))
        if not data.residuals:
            line("no residuals: the linear program uses no primal values", indent=2)
        else:
            console.print(table)
        # ---- 4
        heading(4)
        for s in data.reverse:
            console.print()
            if s.index < 0:
                line(
                    ("seed  ", "bold"),
                    "output cotangents",
                    f" ({'1.0 for grad' if data.mode == 'grad' else 'random w'})",
                )
                for v in data.seeds:
                    note = (
                        "  (constant output: no cotangent flows back)"
                        if v.name in data.constant_outputs
                        else ""
                    )
                    line((v.name, "bold"), "  ", v.summary, note, indent=4)
                for t in s.eqns:
                    code(t, indent=6, style="yellow")
                for m in s.moves:
                    line(f"ct[{m.target}] <- ", (m.value.name, "bold"), indent=4)
                continue
            first, *rest = s.text.splitlines()
            line((f"linear eqn {s.index}  ", "bold"), (first, "cyan"))
            for extra in rest:
                line((extra, "cyan"), indent=6)
            if s.skipped:
                line(("no cotangent reaches it: skipped", "dim"), indent=4)
                continue
            for v in s.cts_out:
                line("cotangent in: ", (v.name, "bold"), "  ", v.summary, indent=4)
            if s.error is not None:
                stop(s.error, indent=4)
                break
            if s.eqns:
                line("transpose equations:", indent=4)
                for t in s.eqns:
                    code(t, indent=6, style="yellow")
            for m in s.moves:
                line(f"ct[{m.target}] <- ", (m.value.name, "bold"), "  ", m.value.summary, indent=4)
            for a in s.accumulations:
                line(
                    ("accumulation: ", "bold magenta"),
                    f"ct[{a.target}] = add_any {a.previous.name} {a.contribution.name} -> ",
                    (a.result.name, "bold"),
                    f"  ({a.target} is used {a.uses} times)  ",
                    a.result.summary,
                    indent=4,
                )
        if data.stopped_in == 4:
            final_stop(any(s.error is not None for s in data.reverse))
            return
    # ---- 5
    heading(5)
    if data.mode == "jvp":
        line("output tangents J v for the random direction v:")
    elif data.mode == "vjp":
        line("input cotangents J^T w for the random output cotangent w:")
    else:
        line("the gradient:")
    for name, arr in data.derivative:
        line((name, "bold"), "  ", summarize(arr), indent=2)
        small = _small(arr)
        if small:
            line(small, indent=4)
    console.print()
    table = Table(title="checks", title_justify="left")
    for col in ("check", "error", "tolerance", "result"):
        table.add_column(col, overflow="fold")
    for c in data.checks:
        verdict = Text("pass", style="green") if c.passed else Text("FAIL", style="bold red")
        table.add_row(Text(c.name), f"{c.error:.2e}", f"{c.tolerance:.0e}", verdict)
    console.print(table)
    if data.stopped_in == 5:
        final_stop(False)
        return
    if not data.analytic:
        line(("no analytic formula: the program is not a single elementwise primitive", "dim"))
    verdict = "all checks pass" if data.passed else "a check FAILED"
    line(("result: ", "bold"), (verdict, "bold green" if data.passed else "bold red"))


def _render_final_error(data: ExplainData, line) -> None:
    stage = {
        2: "forward (JVP)",
        3: "linearize",
        4: "reverse (transpose)",
        5: "derivative check",
    }.get(data.stopped_in, "")
    line(("stopped in the ", "bold red"), (stage, "bold red"), (" stage", "bold red"))
