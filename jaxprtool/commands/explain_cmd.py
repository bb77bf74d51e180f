"""`jaxprtool explain`: show, stage by stage, how the tool differentiates a program."""

from __future__ import annotations

import html
import io
import os
import sys

import click

from ..cli import ExitStatus, argument, command, guarded, option, options_of
from ..io import write_output
from .ad_cmds import custom_rules_option
from .common import FILE_ARG, OUT_ARG, int_list
from .mesh_options import mesh_options
from .run_options import device_options, dim_option, parse_dims, save_inputs_option


@command("explain")
@argument("file", required=False, default="-", metavar="[FILE|-]", type=FILE_ARG)
@option(
    "--args",
    "args_npz",
    metavar="IN.npz",
    type=FILE_ARG,
    help="Inputs arg0..argN (default: random).",
)
@option(
    "--random",
    "seed",
    type=click.IntRange(min=0),
    default=None,
    metavar="SEED",
    help="Seed for random inputs (default 0) and for the random direction / cotangent.",
)
@option(
    "--consts",
    "consts_npz",
    metavar="C.npz",
    type=FILE_ARG,
    help="Constants: const0, const1, ... (`trace --consts-out`; default: random).",
)
@option(
    "--mode",
    type=click.Choice(["jvp", "vjp", "grad"]),
    default=None,
    help="What to explain (default: grad for one scalar float output, else vjp).",
)
@option(
    "--argnums",
    callback=int_list,
    metavar="I,J",
    help="Inputs to differentiate (default: every float input).",
)
@option("--no-color", is_flag=True, help="Plain text, no escape codes (for logs).")
@option(
    "--html",
    "html_out",
    metavar="OUT.html",
    type=OUT_ARG,
    help="Write the walk as an HTML page instead of printing it (as `graph -o` writes only "
    "its file; errors and a failed check are still said on standard error).",
)
@option("--width", type=click.IntRange(60, 400), default=None, help="Output width.")
@option(
    "--eqns",
    "eqn_range",
    metavar="A-B",
    callback=lambda ctx, param, value: _eqn_range(value),
    help="Show the steps of primal equations A to B (0-based, as the summary numbers them) "
    "one by one; a program of more than 200 equations is otherwise summarised per segment.",
)
@option(
    "--only", "only", metavar="PRIM", help="Show the steps of the equations of PRIM one by one."
)
@option("--all", "every", is_flag=True, help="Every step one by one, however large the program.")
@save_inputs_option
@custom_rules_option
@dim_option
@device_options(
    highest_on_tpu=True,
    require_device=True,
    help="Where the derivatives run (the finite differences: on the CPU).",
)
@mesh_options(distributed=False, show=False)
def explain(file, dim_specs, device, **options):
    """Walk through the differentiation of FILE: primal equations, the JVP rule of each
    equation and the tangent equations it emits, the linear program and its residuals, the
    reverse (transpose) walk with every cotangent and accumulation, and the derivative checked
    against finite differences (and an analytic formula for a single elementwise primitive).
    The walks shown are the ones `jvp`, `vjp` and `grad` run, and the last stage shows the
    program they built; every part differentiated by a fallback (see --custom-rules) or by a
    plugin's rule is reported.

    Exit 1 when a rule is missing (the walk is shown up to where it stops) or a check fails.

    \b
    Example:
      jaxprtool explain samples/sin_cos.jaxpr --mode vjp
      jaxprtool explain loss.jaxpr --args in.npz --html walk.html
    """
    del device  # the checks run where mesh_options pointed the back end
    return guarded(_explain)(file, dims=parse_dims(dim_specs), **options)


def _explain(file, *, custom_rules, no_color, html_out, width, dims, **walk) -> ExitStatus | None:
    """Read FILE and its inputs, walk its differentiation (`_walk`), show the walk on the
    terminal or as an HTML page; exit 1 when a check failed."""
    from ..ad.invocation import enter, for_call
    from ..jax_required import require_jax

    require_jax()
    options_of().invocation = enter(for_call(custom_rules))
    data, path = _walk(file, width=width, dims=dims, **walk)
    if no_color:
        from .. import io as _io

        _io.COLOR_MODE = "never"  # (why a value cannot carry it: as cli's io.COLOR_MODE)
    if html_out:
        _write_html(data, path, html_out, width)
    else:
        _render_terminal(data, width)
    return _verdict(data, html_out)


def _walk(
    file,
    *,
    args_npz,
    seed,
    consts_npz,
    mode,
    argnums,
    width,
    save_inputs,
    eqn_range,
    only,
    every,
    dims,
):
    """(`explain_data` of FILE at its inputs: --args, else random ones; the path read)."""
    from ..backend import sharding as backend
    from ..commands.common import load, output_style
    from ..consts_order import for_ad, refuse_kept_consts
    from ..run_inputs import gather_inputs, keep_point, warn_invented_consts
    from ..shardings import axis_sizes_of
    from ..ui.explain import explain_data

    read, _, path = load(file)
    jaxpr = for_ad(read)  # as the AD commands read it: every constant the program's
    refuse_kept_consts(read, jaxpr)
    input_seed = None if args_npz is not None else (seed or 0)  # with --args: seeds v / w only
    drawn: list[str] = []
    args, consts, _ = gather_inputs(
        jaxpr, args_npz, None, input_seed, consts_npz, dims, drawn=drawn
    )
    warn_invented_consts(jaxpr, consts_npz, seed or 0, "explain")
    keep_point(save_inputs, args, consts, seed or 0, args_npz is None, drawn)
    with axis_sizes_of(jaxpr, backend.CONFIG.mesh):  # a text without its mesh
        data = explain_data(
            jaxpr,
            args,
            mode,
            argnums,
            seed=seed or 0,
            consts=consts,
            label=path,
            width=width or 100,
            style=output_style(jaxpr, options_of().jax_style),
            eqns=eqn_range,
            only=only,
            every=every,
        )
    return data, path


def _render_terminal(data, width) -> None:
    """The walk on standard output: rich decides the width (the terminal's; else COLUMNS,
    else 80) unless --width says; only a terminal or --width wraps lines (piped, a line is
    never cut)."""
    from .. import io as _io
    from ..ui.explain import render

    console = _io.console(sys.stdout, width=width)
    render(data, console, wrap=width is not None or _io.is_terminal(sys.stdout))


def _write_html(data, path: str, html_out: str, width) -> None:
    from rich.console import Console

    rec = Console(
        record=True,
        file=io.StringIO(),
        width=width or 120,
        force_terminal=True,
        color_system="truecolor",
        highlight=False,
        emoji=False,
    )
    title = f"jaxprtool explain {os.path.basename(path)}"
    write_output(_html_page(data, rec, title), html_out)


def _verdict(data, html_out) -> ExitStatus | None:
    """The walk's error (raised: a missing rule), else exit 1 when a check failed."""
    from ..core import JaxprError

    if data.error is not None:
        raise data.error
    if not data.passed:
        if html_out:
            raise JaxprError(f"a check failed: the walk in '{html_out}' shows which")
        return ExitStatus.FAILURE
    return None


#: the stages a large program's page opens collapsed (the program texts and their steps)
_OPEN_STAGES = ("4.", "5.")


def _html_page(data, rec, title: str) -> str:
    """The walk as an HTML page of collapsible sections, one per stage (`<details>`): a
    thousand equations stay usable, the stages a large program's reader zooms into closed
    until opened.  Every text comes from rich's export (escaped there)."""
    from rich.terminal_theme import MONOKAI

    from ..ui.explain import render

    sections: list[tuple[str, str]] = []
    fmt = "<pre style=\"font-family:Menlo,'DejaVu Sans Mono',consolas,monospace\">{code}</pre>"

    def cut(next_title: str) -> None:
        sections.append(
            (
                cut.title,
                rec.export_html(inline_styles=True, theme=MONOKAI, code_format=fmt, clear=True),
            )
        )
        cut.title = next_title

    cut.title = title
    render(data, rec, on_section=cut)
    cut("")
    large = data.zoom is not None
    body = []
    for k, (name, code) in enumerate(sections):
        opened = k == 0 or not large or name.startswith(_OPEN_STAGES)
        body.append(
            f"<details{' open' if opened else ''}><summary><b>{html.escape(name)}</b></summary>"
            f"{code}</details>"
        )
    bg = MONOKAI.background_color.hex
    fg = MONOKAI.foreground_color.hex
    return (
        f'<!DOCTYPE html>\n<html>\n<head>\n<meta charset="UTF-8">\n<title>{html.escape(title)}'
        f'</title>\n</head>\n<body style="color:{fg};background-color:{bg}">\n'
        + "\n".join(body)
        + "\n</body>\n</html>\n"
    )


def _eqn_range(value: str | None) -> tuple[int, int] | None:
    """--eqns A-B (or one index A) as (A, B); bad usage exits 2."""
    if value is None:
        return None
    import re

    m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", value)
    if m is None or (m[2] is not None and int(m[2]) < int(m[1])):
        raise click.BadParameter(f"expected A-B with A <= B (equation indices), got '{value}'")
    return int(m[1]), int(m[2] if m[2] is not None else m[1])
