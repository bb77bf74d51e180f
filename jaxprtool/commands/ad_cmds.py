"""`jaxprtool jvp`, `linearize`, `transpose`, `vjp` and `grad`: automatic differentiation of a
printed jaxpr (see docs/AD_DESIGN.md and docs/LINEARIZE_FORM.md)."""

from __future__ import annotations

import sys

import click

from ..cli import guarded
from ..io import UsageError, write_output
from .common import int_list

_OPT_HELP = (
    "Clean-up pipeline run on the result (passes separated by commas; `none` for the raw result)."
)


def _common(f):
    f = click.option(
        "--diff",
        "show_diff",
        is_flag=True,
        help="Show a coloured unified diff of input and result on standard error.",
    )(f)
    f = click.option(
        "--opt",
        "opt",
        default="canonicalize",
        show_default=True,
        metavar="PIPELINE",
        help=_OPT_HELP,
    )(f)
    f = click.option(
        "-o",
        "--output",
        "out",
        metavar="OUT",
        help="Write to OUT (atomically) instead of standard output.",
    )(f)
    f = click.argument("file", required=False, default="-", metavar="[FILE|-]")(f)
    return f


_argnums = click.option(
    "--argnums",
    callback=int_list,
    metavar="I,J",
    help="Inputs to differentiate (default: every float input).",
)


def _optimizer(spec):
    from ..passes.registry import parse_pipeline, run_pipeline

    parse_pipeline(spec)  # reports an unknown pass before any work
    return lambda j: run_pipeline(j, spec)


def _require_static_shapes(jaxpr) -> None:
    from ..core import JaxprError, ShapedArray, all_eqns

    for v in jaxpr.invars:
        if isinstance(v.type, ShapedArray) and not v.type.is_static:
            raise JaxprError(
                f"automatic differentiation needs static shapes; input type {v.type} has a symbolic or sharded dimension"
            )
    for e in all_eqns(jaxpr):
        for o in e.outputs:
            if isinstance(o.type, ShapedArray) and not o.type.is_static:
                raise JaxprError(
                    f"automatic differentiation needs static shapes; {e.prim} result type {o.type} "
                    "has a symbolic or sharded dimension",
                    e.loc,
                )


class _Job:
    """One AD command: the input program, its printing style, the clean-up pipeline, --diff."""

    def __init__(self, file, opt: str, show_diff: bool):
        from .common import load, output_style

        self.input, self.text, self.path = load(file)
        _require_static_shapes(self.input)
        self.style = output_style(self.input)
        self.optimize = _optimizer(opt)
        self.show_diff = show_diff

    def emit(self, jaxpr, out) -> None:
        """Print `jaxpr` in the input's style to `out`; with --diff, the change on stderr."""
        from ..ad.api import restyle
        from ..text.printer import print_jaxpr

        text = print_jaxpr(restyle(jaxpr, self.style), self.style) + "\n"
        if self.show_diff:
            from ..ui.diff import show_diff

            show_diff(print_jaxpr(self.input, self.style) + "\n", text, "input", "result")
        write_output(text, out)


def _note(msg: str) -> None:
    click.echo(f"note: {msg}", err=True)


# ---------------------------------------------------------------- jvp


@click.command()
@_common
@_argnums
@click.option(
    "--no-instantiate", is_flag=True, help="Leave out output tangents that are known to be zero."
)
def jvp(file, out, opt, show_diff, argnums, no_instantiate):
    """Forward mode: (x..., tx...) -> (y..., ty...).

    Only float/complex inputs (among --argnums) get a tangent input, and only float/complex
    outputs a tangent output.  Apply it twice for second derivatives.

    \b
    Example:
      jaxprtool jvp f.jaxpr
      jaxprtool jvp --argnums 0 f.jaxpr | jaxprtool jvp
    """
    guarded(_jvp)(file, out, opt, show_diff, argnums, no_instantiate)


def _jvp(file, out, opt, show_diff, argnums, no_instantiate):
    from ..ad.api import jvp_jaxpr_info
    from ..core import is_inexact

    job = _Job(file, opt, show_diff)
    j = job.input
    res, _mask, out_nz = jvp_jaxpr_info(j, argnums, instantiate=not no_instantiate)
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
    job.emit(job.optimize(res), out)


# ---------------------------------------------------------------- linearize


@click.command()
@_common
@_argnums
@click.option(
    "--split",
    nargs=2,
    metavar="PRIMAL LINEAR",
    help="Write the primal program and the linear program to two files instead.",
)
@click.option(
    "--stats",
    is_flag=True,
    help="Report the residuals on standard error (count, bytes, producers).",
)
def linearize(file, out, opt, show_diff, argnums, split, stats):
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
    """
    guarded(_linearize)(file, out, opt, show_diff, argnums, split, stats)


def _linearize(file, out, opt, show_diff, argnums, split, stats):
    from ..ad.linearize import combine, linearize_jaxpr

    job = _Job(file, opt, show_diff)
    j = job.input
    if split and out:
        raise UsageError("-o cannot be combined with --split")
    primal, linear, info = linearize_jaxpr(j, argnums)
    linear = job.optimize(linear)
    if stats:
        _report_stats(info)
    if split:
        job.emit(job.optimize(primal), split[0])
        job.emit(linear, split[1])
        return
    job.emit(combine(primal, linear, info), out)


def _report_stats(info) -> None:
    total = sum(r.nbytes for r in info.residuals)
    lines = [
        f"residuals: {len(info.residuals)} ({total} bytes); "
        f"{info.num_new_residuals} new primal outputs, the others forwarded"
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
    click.echo("\n".join(lines), err=True)


# ---------------------------------------------------------------- transpose


@click.command()
@_common
@click.option(
    "--linear",
    "linear",
    callback=int_list,
    metavar="I,J",
    help="The linear inputs (the others are residuals).",
)
@click.option(
    "--residuals",
    type=click.IntRange(min=0),
    metavar="K",
    help="The first K inputs are residuals; the rest are linear.",
)
def transpose(file, out, opt, show_diff, linear, residuals):
    """Transpose a linear program.

    Default: the combined form printed by `linearize` is recognised (its `jit[name=linear]`
    equation) and transposed into a VJP (x..., ct_y...) -> (y..., ct_x...); any other jaxpr is
    taken as linear in every input: (ct_y...) -> (ct_x...).  With --linear or --residuals the
    non-linear inputs come first: (residuals..., ct_y...) -> (ct_x...).

    \b
    Example:
      jaxprtool linearize f.jaxpr | jaxprtool transpose
      jaxprtool transpose --residuals 2 lin.jaxpr
    """
    guarded(_transpose)(file, out, opt, show_diff, linear, residuals)


def _transpose(file, out, opt, show_diff, linear, residuals):
    from ..ad.transpose import transpose_auto

    if linear is not None and residuals is not None:
        raise UsageError("--linear and --residuals are mutually exclusive")
    job = _Job(file, opt, show_diff)
    j = job.input
    res, _mask, _lo = transpose_auto(j, linear, residuals)
    job.emit(job.optimize(res), out)


# ---------------------------------------------------------------- vjp, grad


@click.command()
@_common
@_argnums
def vjp(file, out, opt, show_diff, argnums):
    """Reverse mode: (x..., ct_y...) -> (y..., ct_x...).

    One cotangent input per float/complex output; one cotangent output per differentiated input.

    \b
    Example:
      jaxprtool vjp --argnums 0 f.jaxpr
    """
    guarded(_vjp)(file, out, opt, show_diff, argnums)


def _vjp(file, out, opt, show_diff, argnums):
    from ..ad.api import vjp_jaxpr

    job = _Job(file, opt, show_diff)
    j = job.input
    job.emit(job.optimize(vjp_jaxpr(j, argnums)), out)


@click.command()
@_common
@click.option(
    "--argnums",
    callback=int_list,
    default="0",
    show_default=True,
    metavar="I,J",
    help="Inputs to differentiate.",
)
@click.option("--with-value", is_flag=True, help="Also return the value (first output).")
@click.option(
    "--has-aux",
    is_flag=True,
    help="Differentiate the first output; return the other outputs as auxiliary data.",
)
def grad(file, out, opt, show_diff, argnums, with_value, has_aux):
    """Gradient of a scalar float output: (x...) -> ([value,] [aux...,] grads...).

    The output must be one scalar (or the first output, with --has-aux); the cotangent is 1.
    Apply it twice for second derivatives.

    \b
    Example:
      jaxprtool grad --argnums 0,2 loss.jaxpr
      jaxprtool grad f.jaxpr | jaxprtool grad
    """
    guarded(_grad)(file, out, opt, show_diff, argnums, with_value, has_aux)


def _grad(file, out, opt, show_diff, argnums, with_value, has_aux):
    from ..ad.api import grad_jaxpr

    job = _Job(file, opt, show_diff)
    j = job.input
    job.emit(job.optimize(grad_jaxpr(j, argnums, has_aux=has_aux, with_value=with_value)), out)


_ = sys
