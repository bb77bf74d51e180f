"""`jaxprtool jvp`, `linearize`, `transpose`, `vjp` and `grad`: automatic differentiation of a
printed jaxpr (see docs/AD_DESIGN.md and docs/LINEARIZE_FORM.md)."""

from __future__ import annotations

import contextlib
import itertools

from .. import io
from ..cli import ExitStatus, argument, command, guarded, option, options_of
from ..declare import Choice, IntRange
from ..io import Pieces, check_writable, write_output
from .common import FILE_ARG, OUT_ARG, int_list
from .driver import complete_pass_list, manager_options

_OPT_HELP = (
    "Clean-up pipeline run on the result (passes separated by commas; `none` for the raw result)."
)


def _common(f):
    f = option(
        "--diff",
        "show_diff",
        optional_value=True,
        metavar="[=text]",
        type=Choice(["semantic", "text"]),
        flag_value="semantic",
        default=None,
        help="Show what changed on standard error: the equations removed, added or changed "
        "(input and result aligned up to renaming); --diff=text: a unified diff of the "
        "printouts.",
    )(f)
    f = option(
        "--opt",
        "opt",
        default="canonicalize",
        show_default=True,
        metavar="PIPELINE",
        shell_complete=complete_pass_list,
        help=_OPT_HELP,
    )(f)
    f = option(
        "-o",
        "--output",
        "out",
        metavar="OUT",
        type=OUT_ARG,
        help="Write to OUT (atomically) instead of standard output.",
    )(f)
    f = custom_rules_option(f)
    f = option(
        "--mesh",
        "mesh",
        metavar="x=2,y=4",
        default=None,
        help="Mesh axis sizes, for an explicitly sharded program whose text does not print "
        "its mesh (no jit ctx_mesh, shard_map mesh or NamedSharding) where a rule needs them "
        "(a reshape that splits or merges a sharded dim).",
    )(f)
    f = argument("file", required=False, default="-", metavar="[FILE|-]", type=FILE_ARG)(f)
    return f


def _mesh_sizes(text: str | None) -> dict[str, int] | None:
    from ..core import JaxprError
    from ..shardings import parse_mesh_option

    if text is None:
        return None
    try:
        return parse_mesh_option(text)
    except JaxprError as e:
        raise io.UsageError(e.message) from None


def custom_rules_option(f):
    """`--custom-rules default|body|strict`: what to do with a custom_jvp/custom_vjp rule the
    text does not contain (docs/AD_DESIGN.md, "Custom rules")."""
    return option(
        "--custom-rules",
        "custom_rules",
        type=Choice(["default", "body", "strict"]),
        default="default",
        show_default=True,
        help="A custom_jvp/custom_vjp rule the text lacks: default = error for custom_vjp, "
        "body derivative with a warning for custom_jvp; body = body derivative for both "
        "(recorded in a comment line of the output); strict = error for both.",
    )(f)


def fallback_comment_lines(invocation) -> str:
    """`# jaxprtool: ...` lines (the parser skips them) for each custom rule that
    `invocation`'s walks replaced by the derivative of its function's body."""
    return "".join(f"# jaxprtool: {n}\n" for n in invocation.fallbacks.notes)


_argnums = option(
    "--argnums",
    callback=int_list,
    metavar="I,J",
    help="Inputs to differentiate (default: every float input).",
)


def _remat_spec(ctx, param, value):
    """--remat POLICY / --remat-budget B, parsed (a bad value is a usage error)."""
    if value is None:
        return None
    from ..ad.remat import parse_budget, parse_policy

    try:
        return parse_budget(value) if param.name == "remat_budget" else parse_policy(value)
    except ValueError as e:
        import click

        raise click.BadParameter(str(e)) from None


_remat = option(
    "--remat",
    metavar="POLICY",
    callback=_remat_spec,
    help="Rematerialize: save only what POLICY lets save and recompute the rest in the "
    "backward part (JAX's policies: everything_saveable, nothing_saveable, dots_saveable, "
    "dots_with_no_batch_dims_saveable, save_only_these_names=a,b, "
    "save_any_names_but_these=a,b, and as JAX's calls: "
    "'offload_dot_with_no_batch_dims(device, pinned_host)', "
    "'save_and_offload_only_these_names(names_which_can_be_saved=[a], "
    "names_which_can_be_offloaded=[b], offload_src=device, offload_dst=pinned_host)', "
    "'save_from_both_policies(P1, P2)'), or min-cut (the fewest bytes held, recomputing only "
    "element-wise and shape equations).  The plan is printed on standard error.",
)
_remat_budget = option(
    "--remat-budget",
    "remat_budget",
    metavar="B",
    callback=_remat_spec,
    help="Hold at most B bytes, recomputing what costs the fewest FLOPs: with JAX (grad, vjp, "
    "memory), XLA's temp bytes on --device (a fraction of the plain gradient's: 0.5; bytes: "
    "2GiB, 300MB; device: the memory it has free), each plan compiled and tightened until "
    "XLA's figure fits; with --no-xla, --dim or linearize, the tool's liveness model (exact "
    "ILP when small, a greedy heuristic beyond).  The plan is printed on standard error.",
)


_remat_segments = option(
    "--remat-segments",
    "remat_segments",
    metavar="auto|none|N",
    help="Plan and recompute segment by segment, each segment's recomputation in its own "
    "call just before the backward part that needs it (the values crossing segments are "
    "saved): auto (default) finds them: each iteration of a scan body, each call, the "
    "repeated layers of the program, else about sqrt(n) stretches; N: N stretches; none: "
    "the whole program at once, as jax.checkpoint(f) does.  Needs --remat or --remat-budget.",
)


_remat_dims = option(
    "--dim",
    "dim_specs",
    multiple=True,
    metavar="b=4,n=8",
    help="Sizes of symbolic dimensions for the residual bytes and FLOPs that --remat-budget "
    "and --remat min-cut weigh: the plan is the best at those sizes; the program stays "
    "symbolic (and right at any size).",
)


_remat_device = option(
    "--device",
    "device",
    type=Choice(["cpu", "gpu", "tpu", "auto"]),
    default="cpu",
    show_default=True,
    help="With --remat-budget: the device whose XLA temp bytes the budget is in (a fraction "
    "is of the plain gradient's there; `--remat-budget device`: the memory it has free); the "
    "plan is compiled for it and tightened until XLA's figure fits, each compile reported.",
)
_remat_no_xla = option(
    "--no-xla",
    "no_xla",
    is_flag=True,
    help="With --remat-budget: budget the tool's own liveness model, no compile (the "
    "default without JAX).",
)
#: the remat options of linearize; vjp and grad add the device their budget is in
_REMAT_OPTIONS = (_remat, _remat_budget, _remat_segments, _remat_dims)
_REVERSE_REMAT_OPTIONS = (*_REMAT_OPTIONS, _remat_device, _remat_no_xla)


class Remat:
    """The rematerialization a command was asked for, from its flags: the policy (`--remat`)
    or the budget (`--remat-budget`), `--remat-segments`, the `--dim` sizes, and for the
    reverse commands the device a byte budget is measured on and `--no-xla`."""

    __slots__ = ("policy", "budget", "segments", "dim_specs", "device", "no_xla")

    def __init__(
        self, remat=None, remat_budget=None, remat_segments=None, dim_specs=(), device="cpu",
        no_xla=False, **_,
    ):  # fmt: skip
        self.policy, self.budget, self.segments = remat, remat_budget, remat_segments
        self.dim_specs, self.device, self.no_xla = dim_specs, device, no_xla


def _remat_usage(r: Remat) -> None:
    remat, remat_budget, dim_specs, remat_segments = (
        r.policy, r.budget, r.dim_specs, r.segments
    )  # fmt: skip
    if remat is not None and remat_budget is not None:
        raise io.UsageError("--remat and --remat-budget are mutually exclusive")
    spec = remat or remat_budget
    if remat_segments is not None:
        if spec is None:
            raise io.UsageError("--remat-segments needs --remat or --remat-budget")
        from ..ad.remat import with_segments

        try:
            with_segments(spec, remat_segments)
        except ValueError as e:
            raise io.UsageError(str(e)) from None
    if _dims(dim_specs) and not (spec is not None and _byte_weighted(spec)):
        raise io.UsageError(
            "--dim sizes the residual bytes of --remat-budget and --remat min-cut; "
            "without one of them it has no use"
        )


def _dims(dim_specs) -> dict[str, int]:
    """The `--dim` sizes (the option parser is loaded only when one is given)."""
    if not dim_specs:
        return {}
    from .run_options import parse_dims

    return parse_dims(dim_specs)


def _check_names(spec, program) -> None:
    """A checkpoint name the policy asks for that the program lacks is a usage error."""
    from ..ad.remat import check_names

    try:
        check_names(spec, program)
    except ValueError as e:
        raise io.UsageError(str(e)) from None


def _byte_weighted(spec) -> bool:
    return spec.budget is not None or spec.policy == "min-cut"


def _with_remat(job, r: Remat, fn):
    """fn(spec, plans): the transformation under the rematerialization asked for (the spec,
    or None), given a list to collect the plans into; they are printed on standard error.
    A byte budget is fitted on `r.device` (`_fitted`)."""
    spec = r.policy or r.budget
    if spec is None:
        return fn(None, None)
    import dataclasses

    _check_names(spec, job.input)
    if _byte_weighted(spec):
        dims = _dims(r.dim_specs)
        _require_static_bytes(job.input, dims)
        spec = dataclasses.replace(spec, dims=tuple(sorted(dims.items())))
    if r.segments is not None:
        from ..ad.remat import with_segments

        spec = with_segments(spec, r.segments)
    plans: list = []
    out = fn(spec, plans)
    for plan in plans:
        io.echo(plan.render(), err=True)
    return out


def _require_static_bytes(jaxpr, dims: dict[str, int]) -> None:
    """--remat-budget and --remat min-cut weigh residuals by their bytes, which a symbolic
    dimension leaves unknown unless `--dim` sizes it: refused rather than planned as if the
    dimension were 0.  Every symbolic dim is evaluated at the sizes given (a negative or
    overflowing size is an error here, located at its equation)."""
    from ..backend.values import UnsizedDim, eval_dim
    from ..core import JaxprError, ProgramError, ShapedArray, all_eqns
    from ..shardings import dim_axes, sharded_size

    typed = [(v.type, None) for v in jaxpr.invars]
    typed += [(o.type, e.loc) for e in all_eqns(jaxpr) for o in e.outputs]
    seen: set = set()
    for t, loc in typed:
        if not isinstance(t, ShapedArray):
            continue
        for d in t.shape:
            if d in seen or dim_axes(d)[0] is not None:
                continue
            try:
                eval_dim(str(sharded_size(d)), dims)
            except JaxprError as e:
                why = (
                    f"and {t} has a symbolic dimension: give its size (--dim b=N; the plan "
                    "is then the best at that size, the program stays symbolic), or use a "
                    "policy (--remat dots_saveable, ...)"
                    if isinstance(e, UnsizedDim)
                    else f"and {t}'s dimension {d} at the --dim sizes: {e.message}"
                )
                msg = f"--remat-budget and --remat min-cut weigh residuals by their bytes, {why}"
                err = ProgramError(msg, "inputs") if loc is None else JaxprError(msg, loc)
                raise err from None
            seen.add(d)


def _pipeline_steps(spec):
    """The parsed --opt pipeline: an unknown pass or option is a usage error (exit 2),
    reported before any work."""
    from ..core import JaxprError
    from ..passes.registry import parse_pipeline_steps

    try:
        return parse_pipeline_steps(spec)
    except JaxprError as e:
        import click

        raise click.BadParameter(e.message, param_hint="--opt") from None


class _Job:
    """One AD command on one input program: its printing style, the transformation and the
    clean-up pipeline as instrumented steps (--verify-each, --print-after, --timing), and
    --diff."""

    def __init__(self, part, steps, show_diff, custom_rules, inst, name: str, jax_style):
        from ..ad.inputs import require_transformable
        from ..ad.invocation import enter, for_call
        from ..consts_order import for_ad
        from .common import output_style, parse_text

        #: this command's request to the walks (its --custom-rules), theirs from here on
        self.invocation = options_of().invocation = enter(for_call(custom_rules))
        # nested jaxprs' constants become the program's (`run --consts` gives their values)
        self.input = for_ad(parse_text(part.source, part.path, first_line=part.line))
        self.input_path = part.path
        self.source_text, self.source_path, self.source_line = part.source, part.path, part.line
        require_transformable(self.input)
        self.style = output_style(self.input, jax_style)
        self.steps = steps
        self.show_diff = show_diff
        self.inst = inst
        self.name = name
        inst.start(self.render, 1 + len(steps))

    def render(self, jaxpr, end: str = "", pieces: bool = False):
        """`jaxpr` printed in the input's style: its text, or with `pieces` the text in
        pieces (`printer.print_jaxpr_pieces`)."""
        from ..ad.api import restyle
        from ..text.printer import print_jaxpr, print_jaxpr_pieces

        printed = print_jaxpr_pieces if pieces else print_jaxpr
        return printed(restyle(jaxpr, self.style), self.style, end=end)

    def transform(self, fn, view=None):
        """fn(input) as the command's own step; `view(result)` is the program to verify and
        print when the result is not one (linearize's parts)."""
        return self.inst.run_step(self.name, self.name, self.input, fn, view)

    def optimize(self, jaxpr):
        return self.inst.pipeline(jaxpr, self.steps)

    def finish(self, box: list) -> str:
        """The program in `box` (its one item, taken out) cleaned up and printed.  Neither
        it nor the input program (unless --diff shows it) is kept meanwhile: each is freed
        once nothing needs it, not held through the clean-up and the printing (the peak
        memory of a large program)."""
        if not self.show_diff:
            self.input = None
        return self.text(self.inst.pipeline(box.pop(), self.steps))

    def text(self, jaxpr) -> str | Pieces:
        """`jaxpr` printed in the input's style; with --diff, the change on stderr.  Without
        --diff, the text in pieces: its names and lines made here ("print" of --timing), its
        layout as it is written ("write")."""
        from ..text.printer import print_jaxpr
        from .driver import timed

        comments = fallback_comment_lines(self.invocation)
        if not self.show_diff:
            with timed("print"):
                pieces = self.render(jaxpr, "\n", pieces=True)
            return Pieces(itertools.chain((comments,), pieces) if comments else pieces)
        from ..ui.diff import show_change

        with timed("print"):
            text = comments + self.render(jaxpr, "\n")
        before = print_jaxpr(self.input, self.style, end="\n")
        show_change(self.input, jaxpr, self.show_diff, before, text, "input", "result", self.style)
        return text


def _drive(file, out, opt, show_diff, custom_rules, inst, split, name, body) -> None:
    """Run body(job) -> output text on each input program (each part of a split input)."""
    from ..text.values import light_dtypes
    from .driver import run_parts

    steps = _pipeline_steps(opt)
    jax_style = options_of().jax_style

    def each(part):
        from ..ad import observe
        from ..io import progress

        with progress(f"{name} {part.path}") as line:
            counting = observe.StepCounter(line.count, line.stage) if line.active else None
            with observe.observing(counting) if counting else contextlib.nullcontext():
                return body(_Job(part, steps, show_diff, custom_rules, inst, name, jax_style))

    with light_dtypes():  # dtype parameters stay names: no numpy import
        ok = run_parts([file], split, each, out, inst)
    return None if ok else ExitStatus.FAILURE


def ad_command(name: str, *options, usage=None):
    """Decorator: `body(job, **own options) -> output text` becomes the command `name`
    (`declare.Declared`: click's command is built from it only where click parses the
    command line) with the common AD options (FILE, -o, --opt, --diff, --custom-rules), the
    pass-manager flags and `options`, run on every input through `_drive`.  `usage(out,
    split_input, **own)` may refuse a combination of flags before any work."""

    def wrap(body):
        def run_command(file, out, opt, show_diff, custom_rules, mesh, inst, split_input, **own):
            inst.mesh = _mesh_sizes(mesh)
            if usage is not None:
                usage(out, split_input, **own)
            run = lambda job: body(job, **own)  # noqa: E731
            return guarded(_drive)(
                file, out, opt, show_diff, custom_rules, inst, split_input, name, run
            )

        run_command.__doc__, run_command.__name__ = body.__doc__, body.__name__
        made = run_command
        for decorate in reversed(options):
            made = decorate(made)
        return command(name)(manager_options((name,))(_common(made)))

    return wrap


def _note(msg: str) -> None:
    io.echo(f"note: {msg}", err=True)


# ---------------------------------------------------------------- jvp


@ad_command(
    "jvp",
    _argnums,
    option(
        "--no-instantiate",
        is_flag=True,
        help="Leave out output tangents that are known to be zero.",
    ),
)
def jvp(job, argnums, no_instantiate):
    """Forward mode: (x..., tx...) -> (y..., ty...).

    Only float/complex inputs (among --argnums) get a tangent input, and only float/complex
    outputs a tangent output.  Apply it twice for second derivatives.

    \b
    Example:
      jaxprtool jvp f.jaxpr
      jaxprtool jvp --argnums 0 f.jaxpr | jaxprtool jvp
    """
    return _jvp(job, argnums, no_instantiate)


def _jvp(job, argnums, no_instantiate):
    from ..ad.api import jvp_jaxpr_info
    from ..core import is_inexact

    j = job.input
    info = {}

    def fn(j):
        res, _mask, info["out_nz"] = jvp_jaxpr_info(j, argnums, instantiate=not no_instantiate)
        return res

    res = job.transform(fn)
    out_nz = info["out_nz"]
    if no_instantiate:
        missing = [f"{k} ({v.type})" for k, (v, nz) in enumerate(zip(j.outvars, out_nz)) if not nz]
        if missing:
            zero = [
                k
                for k, (v, nz) in enumerate(zip(j.outvars, out_nz))
                if not nz and is_inexact(v.type)
            ]
            why = "zero tangent" if len(zero) == len(missing) else "zero tangent or not float"
            _note(
                f"no tangent output for output{'s' if len(missing) > 1 else ''} {', '.join(missing)} ({why})"
            )
    return job.text(job.optimize(res))


# ---------------------------------------------------------------- linearize


def _linearize_usage(out, split_input, split, **flags):
    _remat_usage(Remat(**flags))
    if split and out:
        raise io.UsageError("-o cannot be combined with --split")
    if split and split_input:
        raise io.UsageError("--split PRIMAL LINEAR cannot be combined with --split-input-file")


@ad_command(
    "linearize",
    _argnums,
    option(
        "--split",
        nargs=2,
        type=OUT_ARG,
        metavar="PRIMAL LINEAR",
        help="Write the primal program and the linear program to two files instead.",
    ),
    option(
        "--stats",
        is_flag=True,
        help="Report the residuals on standard error (count, bytes, producers).",
    ),
    *_REMAT_OPTIONS,
    usage=_linearize_usage,
)
def linearize(job, argnums, split, stats, remat, remat_budget, remat_segments, dim_specs):
    """Linearize: the primal computation plus a linear program for the tangents.

    The default output has jvp's calling convention (x..., tx...) -> (y..., ty...): the primal
    equations inline, then one `jit[name=linear]` equation whose operands are the residuals and
    then the tangents (docs/LINEARIZE_FORM.md).  `transpose` recognises this form.

    With --split, PRIMAL maps (x...) -> (y..., new residuals...) and LINEAR maps
    (residuals..., tx...) -> (ty...); --stats says where each residual comes from.

    \b
    Example:
      jaxprtool linearize f.jaxpr | jaxprtool transpose
      jaxprtool linearize --split p.jaxpr l.jaxpr --stats f.jaxpr
      jaxprtool linearize --remat min-cut --stats f.jaxpr
    """
    r = Remat(remat, remat_budget, remat_segments, dim_specs)
    return _linearize(job, argnums, split, stats, r)


def _linearize(job, argnums, split, stats, r: Remat):
    from ..ad.linearize import combine, linearize_jaxpr

    primal, linear, info = _with_remat(
        job,
        r,
        lambda spec, plans: job.transform(
            lambda j: linearize_jaxpr(j, argnums, remat=spec, plans=plans),
            view=lambda res: combine(*res),
        ),
    )
    linear = job.optimize(linear)
    if stats:
        _report_stats(info)
    if split:  # both texts made and both places checked before either file is written
        texts = [job.text(job.optimize(primal)), job.text(linear)]
        for path in split:
            check_writable(path)
        for text, path in zip(texts, split):
            write_output(text, path)
        return None
    return job.text(combine(primal, linear, info))


def _report_stats(info) -> None:
    total = sum(r.nbytes for r in info.residuals)
    host = sum(r.nbytes for r in info.residuals if getattr(r.type, "memory_space", None) == "host")
    lines = [
        f"residuals: {len(info.residuals)} ({total} bytes"
        + (f", {host} of them in host memory" if host else "")
        + f"); {info.num_new_residuals} new primal outputs, the others forwarded"
    ]
    for k, r in enumerate(info.residuals):
        if r.source == "input":
            src = f"primal input {r.index}"
        elif r.source == "const":
            src = f"constvar {r.index}"
        else:
            what = "primal output" if r.source == "output" else "new output"
            at = f" at {r.loc}" if r.loc else ""
            src = f"{what} {r.index}, from '{r.prim}'{at}" if r.prim else f"{what} {r.index}"
        lines.append(f"  residual {k}: {r.type} ({r.nbytes} bytes): {src}")
    io.echo("\n".join(lines), err=True)


# ---------------------------------------------------------------- transpose


def _transpose_usage(out, split_input, linear, residuals):
    if linear is not None and residuals is not None:
        raise io.UsageError("--linear and --residuals are mutually exclusive")


@ad_command(
    "transpose",
    option(
        "--linear",
        "linear",
        callback=int_list,
        metavar="I,J",
        help="The linear inputs (the others are residuals).",
    ),
    option(
        "--residuals",
        type=IntRange(min=0),
        metavar="K",
        help="The first K inputs are residuals; the rest are linear.",
    ),
    usage=_transpose_usage,
)
def transpose(job, linear, residuals):
    """Transpose a linear program.

    Default: the combined form printed by `linearize` is recognised (its `jit[name=linear]`
    equation) and transposed into a VJP (x..., ct_y...) -> (y..., ct_x...); any other jaxpr is
    taken as linear in every float input: (ct_y...) -> (ct_x...), or, where it is not, in all
    but its fewest leading inputs that make it linear, with a warning naming them (the linear
    half `linearize --split` writes takes its residuals first).  With --linear or --residuals
    the non-linear inputs come first: (residuals..., ct_y...) -> (ct_x...).  Integer and
    boolean values take and give no cotangent, as in `vjp`.

    \b
    Example:
      jaxprtool linearize f.jaxpr | jaxprtool transpose
      jaxprtool linearize --split P.jaxpr L.jaxpr f.jaxpr ; jaxprtool transpose L.jaxpr
      jaxprtool transpose --residuals 2 lin.jaxpr
    """
    return _transpose(job, linear, residuals)


def _transpose(job, linear, residuals):
    from ..ad.transpose import transpose_auto

    res = job.transform(lambda j: transpose_auto(j, linear, residuals)[0])
    return job.text(job.optimize(res))


# ---------------------------------------------------------------- vjp, grad


def _vjp_usage(out, split_input, **flags):
    r = Remat(**flags)
    _remat_usage(r)
    if r.budget is not None and r.budget.on_device and r.no_xla:
        raise io.UsageError(
            "--remat-budget device is the device's memory: it needs XLA, not --no-xla"
        )


def _fitted(build, spec, plans, device, no_xla, dim_specs):
    """`build(spec, plans)`, the gradient under `spec`; a byte budget in XLA's temp bytes on
    `device` (`ad/remat/fit.py`: a bounded compile loop, reported on standard error) unless
    `--no-xla`, `--dim` (a symbolic program) or without JAX, where it is in the tool's
    liveness model."""
    # (a symbolic program's XLA bytes are those of one size: its budget stays the model's)
    if spec is None or spec.budget is None or no_xla or spec.dims or not _has_jax():
        if spec is not None and spec.on_device:
            raise io.UsageError(
                "--remat-budget device is the device's memory: it needs XLA (JAX, and no --no-xla)"
            )
        return build(spec, plans)
    from ..ad.remat.fit import PRIORS, fit_budget
    from ..ui.stats import flops
    from .xla_figures import xla_figures as _xla

    figures: dict[int, dict] = {}  # id(program) -> XLA's figures: each program compiled once

    def measure(program):  # None: out of the device's memory (the loop counts it over)
        try:
            figures[id(program)] = _xla(program, device, dim_specs, flops=True)
        except Exception as e:
            from ..cli import out_of_memory

            if out_of_memory(e) is None:
                raise
            return None
        # (XLA's FLOPs too: the loop compares the plans it compiled by both, issue 48 item 2)
        return figures[id(program)]["temp_bytes"], figures[id(program)]["flops"]

    def device_free(program):  # (the plain gradient's compile, made by `measure` already)
        return _device_free(program, device, dim_specs, figures.get(id(program)))

    echo = lambda text: io.echo(text, err=True)  # noqa: E731
    prior = PRIORS.get(str(device).split(":")[0])
    program, chosen, _ = fit_budget(build, spec, measure, flops, device_free, echo, prior)
    plans.extend(chosen)
    return program


def _device_free(program, device, dim_specs, figures: dict | None = None) -> int:
    """The bytes `device` has free for a program's temporaries: its memory limit less the
    program's arguments and outputs (XLA's `figures` where the loop compiled it already)
    and what is in use already."""
    from .. import backend
    from ..core import JaxprError
    from .xla_figures import xla_figures as _xla

    stats = backend.get_device(device).memory_stats() or {}
    limit = stats.get("bytes_limit")
    if not limit:
        raise JaxprError(
            f"--remat-budget device: the {device} device reports no memory limit; give the "
            "budget in bytes (--remat-budget 2GB)"
        )
    try:
        x = figures or _xla(program, device, dim_specs)
        held = x["argument_bytes"] + x["output_bytes"] - x["alias_bytes"]
    except Exception as e:  # it does not compile there: its arguments' and results' bytes
        from ..ad.remat.records import all_bytes
        from ..cli import out_of_memory

        if out_of_memory(e) is None:
            raise
        held = sum(all_bytes(v) for v in (*program.invars, *program.outvars))
    return int(limit) - int(stats.get("bytes_in_use", 0)) - held


def _value_dropped(spec, dropped: bool):
    """`spec` told that the gradient does not return the function's outputs (the planner's
    last segment then runs its forward only for what it saves)."""
    if spec is None or not dropped:
        return spec
    import dataclasses

    return dataclasses.replace(spec, value_dropped=True)


def _has_jax() -> bool:
    import importlib.util

    return importlib.util.find_spec("jax") is not None


@ad_command(
    "vjp",
    _argnums,
    *_REVERSE_REMAT_OPTIONS,
    usage=_vjp_usage,
)
def vjp(job, argnums, remat, remat_budget, remat_segments, dim_specs, device, no_xla):
    """Reverse mode: (x..., ct_y...) -> (y..., ct_x...).

    One cotangent input per float/complex output; one cotangent output per differentiated input.

    \b
    Example:
      jaxprtool vjp --argnums 0 f.jaxpr
      jaxprtool vjp --remat dots_saveable f.jaxpr
    """
    r = Remat(remat, remat_budget, remat_segments, dim_specs, device, no_xla)
    return _vjp(job, argnums, r)


def _vjp(job, argnums, r: Remat):
    from ..ad.api import vjp_jaxpr

    res = _with_remat(
        job,
        r,
        lambda spec, plans: job.transform(
            lambda j: _fitted(
                lambda s, p: vjp_jaxpr(j, argnums, remat=s, plans=p),
                spec,
                plans,
                r.device,
                r.no_xla,
                r.dim_specs,
            )
        ),
    )
    return job.text(job.optimize(res))


@ad_command(
    "grad",
    option(
        "--argnums",
        callback=int_list,
        default="0",
        show_default=True,
        metavar="I,J",
        help="Inputs to differentiate.",
    ),
    option("--with-value", is_flag=True, help="Also return the value (first output)."),
    option(
        "--has-aux",
        is_flag=True,
        help="Differentiate the first output; return the other outputs as auxiliary data.",
    ),
    *_REVERSE_REMAT_OPTIONS,
    usage=_vjp_usage,
)
def grad(
    job,
    argnums,
    with_value,
    has_aux,
    remat,
    remat_budget,
    remat_segments,
    dim_specs,
    device,
    no_xla,
):
    """Gradient of a scalar float output: (x...) -> ([value,] [aux...,] grads...).

    The output must be one scalar (or the first output, with --has-aux); the cotangent is 1.
    Applied twice it gives the second derivative of a function of a scalar input (the
    gradient must be a scalar again); `hessian` takes any input.

    \b
    Example:
      jaxprtool grad --argnums 0,2 loss.jaxpr
      jaxprtool grad f.jaxpr | jaxprtool grad       # f''(x), for a scalar x; else hessian
      jaxprtool grad f.jaxpr --verify-each --timing
      jaxprtool grad --remat min-cut f.jaxpr ; jaxprtool grad --remat-budget 0.5 f.jaxpr
    """
    r = Remat(remat, remat_budget, remat_segments, dim_specs, device, no_xla)
    return _grad(job, argnums, with_value, has_aux, r)


def _grad(job, argnums, with_value, has_aux, r: Remat):
    from ..ad.api import grad_jaxpr
    from ..io import progress

    with progress(f"differentiating {job.input_path}") as prog:
        res = _with_remat(
            job,
            r,
            lambda spec, plans: job.transform(
                lambda j: _fitted(
                    lambda s, p: grad_jaxpr(
                        j,
                        argnums,
                        has_aux=has_aux,
                        with_value=with_value,
                        remat=_value_dropped(s, not (with_value or has_aux)),
                        plans=p,
                    ),
                    spec,
                    plans,
                    r.device,
                    r.no_xla,
                    r.dim_specs,
                )
            ),
        )
        prog.update(f"cleaning up the gradient of {job.input_path}")
        box = [res]
        del res
        return job.finish(box)
