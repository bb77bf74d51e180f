"""`jaxprtool explain`: the whole differentiation pipeline on one program, stage by stage.

`explain_data(jaxpr, args, mode, argnums, seed, consts)` runs the pipeline and returns an
`ExplainData` (the structured walk, with the arrays); `render(data, console)` shows it with rich.

The walk shown is the real one: the program is transformed by `jvp_jaxpr` (mode jvp),
`vjp_jaxpr` (vjp) or `grad_jaxpr` (grad), exactly as the `jvp`/`vjp`/`grad` commands do,
under a `record.Recorder` that observes the AD walks (`ad/observe.py`): `jvp_eval` inside
`linearize_jaxpr` (or `jvp_jaxpr`), then `backward_pass` over the linear program.  The
program shown in the last stage is the one those walks built.

Stages:

1. the primal program, printed as JAX prints it;
2. forward: for each primal equation, the step `jvp_eval` took: the helper that registered
   its JVP rule (as the walk reports it), the primal-side work the rule added (future residuals),
   the tangent equations, and the output tangents with a value summary for a random input
   direction; equations whose input tangents are all symbolically zero get no rule ("no
   tangent (all inputs constant)");
3. (vjp/grad) the linear program of `linearize_jaxpr` and its residuals: where each comes from
   and a summary of its value;
4. (vjp/grad) the reverse walk over the linear program (`backward_pass`): the cotangent
   reaching each equation, the equations its transpose rule emitted, every cotangent that moves
   to a linear input, and every accumulation (`add_any`) into a value that receives several
   contributions;
5. the program built, and the derivative from running it (jvp: the output tangents for the
   random direction; vjp: the input cotangents for a random output cotangent; grad: the
   gradient), checked against central finite differences and, for a program made of one
   elementwise primitive, an analytic formula.

Every part differentiated by a fallback (a custom rule replaced by its body's derivative,
`--custom-rules`) or by a plugin's rule is reported at its step and listed in stage 5.

A stage that cannot go on (a primitive without a JVP or transpose rule) records where it stopped
and the error; later stages are not run.

Modules: `record` (the data and the observers that fill it), `checks` (running the recorded
programs, finite differences, analytic formulas), `render` (rich output).
"""

from __future__ import annotations

from ...core import Jaxpr, JaxprError, ShapedArray, Var, is_float, is_inexact
from ...lazy import np
from ..checkgrad import _nonfinite, _random_like
from . import checks
from .record import (  # noqa: F401  (the data model, re-exported)
    SEGMENT,
    SUMMARY_OVER,
    Accumulation,
    ExplainData,
    ForwardStep,
    Move,
    Recorder,
    ResidualInfo,
    ReverseStep,
    Value,
    Zoom,
    err_text,
    literal_array,
    summarize,
)
from .render import HEADINGS, render  # noqa: F401

MODES = ("jvp", "vjp", "grad")


def default_mode(jaxpr: Jaxpr) -> str:
    """grad for one scalar float output, else vjp."""
    outs = jaxpr.outvars
    if len(outs) == 1:
        t = outs[0].type
        if isinstance(t, ShapedArray) and tuple(t.shape) == () and is_float(t):
            return "grad"
    return "vjp"


def _check_grad_output(jaxpr: Jaxpr) -> None:
    from ...ad.api import _scalar_error

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
        raise _Stop(stage, e if isinstance(e, JaxprError) else JaxprError(err_text(e))) from None


def explain_data(
    jaxpr: Jaxpr,
    args,
    mode: str | None = None,
    argnums=None,
    seed: int = 0,
    consts=None,
    label: str = "f",
    width: int = 100,
    style=None,
    eqns: tuple[int, int] | None = None,
    only: str | None = None,
    every: bool = False,
) -> ExplainData:
    """Run the whole pipeline on `jaxpr` at `args`.

    Bad usage (mode, argnums, no float inputs/outputs) raises JaxprError; anything that stops
    the walk later (a missing JVP or transpose rule, a program that does not run) is recorded in
    `.error`, with the stage in `.stopped_in`.  `style`: the printing style (default: the one
    detected from `jaxpr`).  The custom-rule policy is the registry's
    (`registry.set_custom_rule_policy`, `--custom-rules`).

    A program of more than `SUMMARY_OVER` equations (or one zoomed into by `eqns`, the
    primal equations A..B, or `only`, a primitive) is walked whole but its steps get
    values only where shown one by one: the others are summarised per segment, so that
    a thousand equations are explained in seconds (`every`: every step, as a small
    program's)."""
    from ...ad.jvp import diff_mask
    from ...text.printer import Namer
    from ...text.style import detect_style

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
    if style is None:
        try:
            style = detect_style(jaxpr)
        except Exception:  # noqa: BLE001
            style = None
    data = ExplainData(mode, label, args=args, in_mask=mask)
    if eqns is not None or only is not None or (len(jaxpr.eqns) > SUMMARY_OVER and not every):
        data.zoom = Zoom(eqns, only)
    data.primal_of = {e.loc: (i, e.prim) for i, e in enumerate(jaxpr.eqns) if e.loc is not None}
    namer = Namer(style)
    data.keep.append(namer)
    data.primal_text = namer.jaxpr_text(jaxpr)
    data.input_names = [namer.atom(v) for v in jaxpr.invars]
    data.output_names = [namer.atom(x) for x in jaxpr.outvars]
    rec = Recorder(data, namer, width)
    data.keep.append(rec)
    try:
        _pipeline(data, rec, jaxpr, args, consts, mask, seed, namer.style)
    except _Stop as stop:
        data.error, data.stopped_in = stop.error, stop.stage
    return data


def _transform(jaxpr: Jaxpr, mode: str, diff: list[int]) -> tuple[Jaxpr, str]:
    """The transformation the command of the same name runs (before its clean-up pipeline),
    and that command."""
    from ...ad.api import grad_jaxpr, jvp_jaxpr, vjp_jaxpr

    command = f"jaxprtool {mode} --argnums {','.join(map(str, diff))} --opt none"
    if mode == "jvp":
        return jvp_jaxpr(jaxpr, diff, instantiate=True), command
    if mode == "vjp":
        return vjp_jaxpr(jaxpr, diff), command
    return grad_jaxpr(jaxpr, diff), command


class _Walk:
    """One run of the pipeline: the program, its inputs, the data recorded, and what the
    stages pass on (the program built, where the transformation failed, the finite
    differences, the primal outputs)."""

    def __init__(self, data: ExplainData, rec: Recorder, jaxpr, args, consts, mask, seed):
        self.data, self.rec, self.jaxpr = data, rec, jaxpr
        self.args, self.consts = args, consts
        self.mode = data.mode
        self.rng = np.random.default_rng(seed)
        self.diff = [i for i, m in enumerate(mask) if m]
        self.n_out = len(jaxpr.outvars)
        self.program: Jaxpr | None = None
        self.failure: JaxprError | None = None
        #: the stage the transformation's failure belongs to (when it failed)
        self.failed_in = 0
        #: the program's outputs, as Values to fill from running it
        self.derivative: list[Value] = []

    def stop_if_failed(self, stage: int, err) -> None:
        """Stop at `stage` when the transformation failed there, or a value could not be
        computed (`err`)."""
        if self.failure is not None and self.failed_in == stage:
            raise _Stop(stage, self.failure)
        if err is not None:
            raise _Stop(stage, err)


def _pipeline(data: ExplainData, rec: Recorder, jaxpr, args, consts, mask, seed, style):
    walk = _Walk(data, rec, jaxpr, args, consts, mask, seed)
    _transform_observed(walk, style)  # stages 2 to 4 at once
    fd, primal_outs, fwd_inputs = _forward_values(walk)
    nonfinite = _nonfinite(primal_outs, fd.outs)
    if walk.mode == "jvp":
        _check_jvp(walk, fd, fwd_inputs, nonfinite)
        return
    res_values = _residuals(walk)
    w, final_inputs = _reverse_values(walk, primal_outs, res_values)
    _check_reverse(walk, fd, w, final_inputs, nonfinite)


def _transform_observed(walk: _Walk, style) -> None:
    """The real transformation, observed: the program built (printed), or the failure and
    the stage it stops."""
    from ...ad.api import restyle
    from ...ad.observe import observing
    from ...text.printer import print_jaxpr

    rec, data = walk.rec, walk.data
    try:
        with observing(rec):
            walk.program, command = _transform(walk.jaxpr, walk.mode, walk.diff)
        rec.finish_reverse()
    except Exception as e:  # noqa: BLE001 - shown as where the walk stops
        walk.failure = rec.error or (e if isinstance(e, JaxprError) else JaxprError(err_text(e)))
        if rec.failed == "transpose" or rec.walk == "transpose":
            walk.failed_in = 4
        elif rec.failed == "jvp" or walk.mode == "jvp":
            walk.failed_in = 2
        else:
            walk.failed_in = 3
    else:
        data.program = walk.program
        data.program_command = command
        data.program_text = print_jaxpr(restyle(walk.program, style), style)


def _forward_values(walk: _Walk):
    """Stage 2: the forward walk's values (jvp: from the program built, where it has
    them); (the finite differences, the primal outputs, the forward program's inputs)."""
    from ...backend import reference_device

    data, rec, program, args, consts = walk.data, walk.rec, walk.program, walk.args, walk.consts
    data.direction = [_random_like(args[i], walk.rng) for i in walk.diff]
    shown = [s for s in data.forward if data.forward_shown(s)]
    tangent_values = data.tangent_inputs + [
        v for s in shown for v in s.tangents_in + s.tangents_out
    ]
    fwd_inputs = list(args) + data.direction
    walk.derivative = [Value("", x) for x in program.outvars] if program is not None else []
    sources = [(rec.forward_program(), fwd_inputs, consts)]
    if walk.mode == "jvp" and program is not None:
        sources.insert(0, (program, fwd_inputs, consts))
    jvp_values = walk.derivative if walk.mode == "jvp" else []
    walk.stop_if_failed(2, checks.fill_values(tangent_values + jvp_values, *sources))
    run = _guard(2, checks.runner, walk.jaxpr, consts)
    primal_outs = _guard(2, run, args)
    reference = reference_device(walk.jaxpr)  # the finite differences' (the CPU's)
    fd = checks.FiniteDifferences(
        walk.jaxpr,
        lambda xs: run(xs, device=reference),
        args,
        walk.diff,
        lambda e: _stop_with(5, e),
        consts,
    )
    return fd, primal_outs, fwd_inputs


def _check_jvp(walk: _Walk, fd, fwd_inputs, nonfinite: bool) -> None:
    """Stage 5 of jvp: the output tangents, checked."""
    data = walk.data
    data.derivative = [
        (f"tangent of {data.output_names[j]}", np.asarray(t.array))
        for j, t in zip(fd.outs, walk.derivative[walk.n_out :])
    ]
    judged = _guard(5, fd.judged, walk.program, fwd_inputs, walk.n_out)
    checks.jvp_checks(data, fd, judged, nonfinite)
    checks.analytic_check(data, walk.jaxpr, walk.args, walk.consts, walk.diff, fd.dtype)


def _residuals(walk: _Walk) -> list[Value]:
    """Stage 3: the residuals (a residual's value is that of a primal program variable)."""
    data, rec = walk.data, walk.rec
    if rec.linear is None:
        raise _Stop(3, walk.failure or JaxprError("linearize did not run"))
    info = rec.info
    n_res = len(info.residuals)
    by_loc = {e.loc: (i, e) for i, e in enumerate(walk.jaxpr.eqns) if e.loc is not None}
    for r, v in zip(info.residuals, rec.linear.invars[:n_res]):
        val = Value(rec.lnamer.name(v), v)
        if r.source == "input":
            val.array = np.asarray(walk.args[r.index])
            origin = f"primal input {r.index} ({data.input_names[r.index]})"
        elif r.source == "const":
            val.array, origin = np.asarray(walk.consts[r.index]), f"constant {r.index}"
        elif r.source == "output":
            val.atom = rec.primal.outvars[r.index]
            origin = f"primal output {r.index} ({data.output_names[r.index]})"
        else:
            val.atom = rec.primal.outvars[walk.n_out + r.index]
            origin = _residual_origin(data, r, by_loc)
        data.residuals.append(ResidualInfo(val, origin))
    return [r.value for r in data.residuals]


def _reverse_values(walk: _Walk, primal_outs, res_values):
    """Stage 4: the seeds, and every value of the reverse walk (from the program built,
    where it has them); (the output cotangents w, the final program's inputs)."""
    data, rec, mode = walk.data, walk.rec, walk.mode
    outs_with_ct = [j for j, m in enumerate(rec.info.out_mask) if m]
    for j, s in zip(outs_with_ct, data.seeds):
        like = np.asarray(primal_outs[j])
        s.array = np.ones_like(like) if mode == "grad" else _random_like(like, walk.rng)
    w = [s.array for s in data.seeds]
    walk_values = []
    for s in filter(data.reverse_shown, data.reverse):
        walk_values += s.cts_out + [m.value for m in s.moves]
        for a in s.accumulations:
            walk_values += [a.previous, a.contribution, a.result]
    if data.zoom is not None and not walk_values:  # a summary: no residual is shown
        res_values = []
    final_error = None
    final_inputs = list(walk.args) + (w if mode == "vjp" else [])
    if walk.program is not None:
        final_error = checks.fill_values(
            res_values + walk_values + walk.derivative, (walk.program, final_inputs, walk.consts)
        )
    walk.stop_if_failed(3, checks.fill_values(res_values, (rec.primal, walk.args, walk.consts)))
    rev_inputs = [r.value.array for r in data.residuals]
    rev_inputs += [s.array for s in data.seeds if isinstance(s.atom, Var)]
    err = checks.fill_values(walk_values, (rec.reverse_program(), rev_inputs, []))
    if walk.failure is not None:
        raise _Stop(4, walk.failure)
    if err is not None:
        raise _Stop(4, err)
    if final_error is not None:
        raise _Stop(5, final_error)
    return w, final_inputs


def _check_reverse(walk: _Walk, fd, w, final_inputs, nonfinite: bool) -> None:
    """Stage 5 of vjp and grad: the derivative, from running the program built, checked."""
    data, mode = walk.data, walk.mode
    grads = walk.derivative[walk.n_out :] if mode == "vjp" else walk.derivative
    what = "gradient" if mode == "grad" else "cotangent"
    data.derivative = [
        (f"{what} of {data.input_names[i]}", np.asarray(g.array)) for i, g in zip(walk.diff, grads)
    ]
    n_out = walk.n_out if mode == "vjp" else 0
    judged = _guard(5, fd.judged, walk.program, final_inputs, n_out)
    checks.vjp_checks(data, fd, w, judged, nonfinite)
    checks.analytic_check(data, walk.jaxpr, walk.args, walk.consts, walk.diff, fd.dtype, w)


def _stop_with(stage: int, e: Exception) -> _Stop:
    return _Stop(stage, e if isinstance(e, JaxprError) else JaxprError(err_text(e)))


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
