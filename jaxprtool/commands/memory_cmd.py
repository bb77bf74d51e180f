"""`jaxprtool memory`: where a program's memory goes (liveness), beside XLA's own figures."""

from __future__ import annotations

import os

import click

from ..ad.forms import FORMS, transformed
from ..cli import argument, command, guarded, option
from ..io import UsageError, write_output
from .ad_cmds import _byte_weighted, _check_names, _remat, _remat_budget, _remat_segments
from .common import FILE_ARG, OUT_ARG, int_list, load
from .mesh_options import mesh_options
from .run_options import device_options
from .xla_figures import xla_figures as _xla


def _fitted_transform(jaxpr, of, argnums, spec, plans, device, no_xla, dim_specs):
    """`transformed` under a byte budget, in XLA's temp bytes as `grad` plans it (the
    compile loop, `ad_cmds._fitted`): (the program, its boundary)."""
    from .ad_cmds import _fitted

    bounds: dict[int, int | None] = {}

    def build(s, p):
        program, boundary = transformed(jaxpr, of, argnums, s, p)
        bounds[id(program)] = boundary
        return program

    program = _fitted(build, spec, plans, device, no_xla, dim_specs)
    return program, bounds[id(program)]


def _plot_format(plot: str | None) -> str | None:
    if plot is None:
        return None
    ext = os.path.splitext(plot)[1].lower()
    if ext not in (".svg", ".png"):
        raise UsageError(f"--plot: unknown image format '{ext}' (use .svg or .png)")
    return ext[1:]


@command()
@argument("file", required=False, type=FILE_ARG)
@option(
    "--of",
    type=click.Choice(FORMS),
    default="program",
    show_default=True,
    help="Analyse FILE itself, or the program `jaxprtool linearize|vjp|grad` makes of it.",
)
@option(
    "--argnums",
    callback=int_list,
    metavar="I,J",
    help="With --of: the inputs to differentiate (grad: 0; the others: every float input).",
)
@option("--no-xla", is_flag=True, help="Leave out XLA's figures (no JAX needed).")
@option(
    "--dim", "dim_specs", multiple=True, metavar="b=4,n=8", help="Sizes of symbolic dimensions."
)
@option(
    "--plot",
    metavar="OUT.svg|OUT.png",
    type=OUT_ARG,
    help="Also draw the timeline into an image (matplotlib).",
)
@option("--json", "as_json", is_flag=True, help="Print every figure as JSON.")
@option(
    "--top",
    type=click.IntRange(min=0),
    default=10,
    show_default=True,
    help="How many of the values live at the peak to list.",
)
@option("-o", "--output", metavar="OUT", type=OUT_ARG, help="Write the report here.")
@_remat
@_remat_budget
@_remat_segments
@guarded
@device_options(precision=False, help="Where XLA's figures are compiled for.")
@mesh_options(distributed=False, show=False)
def memory(
    file,
    of,
    argnums,
    device,
    no_xla,
    dim_specs,
    plot,
    as_json,
    top,
    output,
    remat,
    remat_budget,
    remat_segments,
):
    """Where FILE's memory goes: live bytes step by step, the peak, the residuals.

    Liveness in JAX's order (call bodies inlined, a loop body's or cond branch's peak inside
    its equation), the values live at the peak with the equations that made them, the bytes
    held across the forward/backward boundary of a linearize, vjp or grad program (its
    residuals), and XLA's own figures for the same program (lower().compile()
    .memory_analysis(): argument, output, alias and temp bytes; per device when sharded).

    \b
    Example:
      jaxprtool memory mlp.jaxpr
      jaxprtool memory --of grad mlp.jaxpr --plot grad.svg
      jaxprtool memory --of grad --remat nothing_saveable layers.jaxpr
      jaxprtool linearize mlp.jaxpr | jaxprtool memory --json --no-xla

    With --of and --remat/--remat-budget (as `grad` takes them), the program analysed is
    the rematerialized one, and the plan (with its planned peak, segments found) is printed
    on standard error, beside the liveness peak and XLA's temp bytes of the report.
    """
    from ..memory import analyse
    from ..ui import memory as ui

    fmt = _plot_format(plot)
    spec = _remat_request(of, remat, remat_budget, remat_segments)
    jaxpr, _, path = load(file)
    program, boundary = _analysed_program(jaxpr, of, argnums, spec, device, no_xla, dim_specs)
    timeline, residuals = analyse(program, boundary)  # (no boundary: no residuals measured)
    xla = None if no_xla else _xla(program, device, dim_specs)
    r = ui.report(path, timeline, residuals, xla, top)
    if fmt is not None:
        write_output(ui.write_plot(r, fmt), plot)
    if as_json:
        write_output(ui.to_json(r) + "\n", output)
        return
    _print_text(r, output)


def _remat_request(of, remat, remat_budget, remat_segments):
    """The remat request of --remat/--remat-budget/--remat-segments (None: none); bad
    usage when they do not go together."""
    spec = remat or remat_budget
    if remat is not None and remat_budget is not None:
        raise UsageError("--remat and --remat-budget are mutually exclusive")
    if spec is not None and of == "program":
        raise UsageError("--remat and --remat-budget need --of linearize, vjp or grad")
    if remat_segments is not None:
        from ..ad.remat import with_segments

        if spec is None:
            raise UsageError("--remat-segments needs --remat or --remat-budget")
        try:
            spec = with_segments(spec, remat_segments)
        except ValueError as e:
            raise UsageError(str(e)) from None
    return spec


def _analysed_program(jaxpr, of, argnums, spec, device, no_xla, dim_specs):
    """(the program --of makes of `jaxpr`, rematerialized as `spec` asks; its forward /
    backward boundary), the remat plans printed on standard error."""
    from ..backend import sharding as backend
    from ..shardings import axis_sizes_of

    if spec is not None:
        _check_names(spec, jaxpr)
    if spec is not None and _byte_weighted(spec):
        import dataclasses

        from .ad_cmds import _require_static_bytes
        from .run_options import parse_dims

        dims = parse_dims(dim_specs)
        _require_static_bytes(jaxpr, dims)
        spec = dataclasses.replace(spec, dims=tuple(sorted(dims.items())))
    plans: list = []
    with axis_sizes_of(jaxpr, backend.CONFIG.mesh):  # --mesh: a text without its mesh
        if spec is not None and spec.budget is not None:
            fitted = _fitted_transform(jaxpr, of, argnums, spec, plans, device, no_xla, dim_specs)
            program, boundary = fitted
        else:
            program, boundary = transformed(jaxpr, of, argnums, spec, plans)
    for plan in plans:
        click.echo(plan.render(), err=True)
    return program, boundary


def _print_text(r: dict, output) -> None:
    import sys

    from ..io import console
    from ..ui import memory as ui

    text = "\n".join(ui.text_lines(r)) + "\n"
    if output not in (None, "-"):
        write_output(text, output)
        return
    c = console(sys.stdout)
    c.print(text, end="", markup=False, soft_wrap=True)
    shown = c.color_system is not None
    c.print(ui.terminal_plot(r, c.width, color=shown), end="", soft_wrap=True)
