"""`jaxprtool fmt`: parse a printed jaxpr and print it back in JAX's layout."""

from __future__ import annotations

import sys

import click

from ..cli import guarded
from .common import FILE_ARG, OUT_ARG
from .driver import split_option, timing_option


@click.command()
@click.argument("files", nargs=-1, metavar="[FILE|-]...", type=FILE_ARG)
@click.option(
    "-o",
    "--output",
    "out",
    metavar="OUT",
    type=OUT_ARG,
    help="Write to OUT (atomically) instead of standard output.",
)
@click.option(
    "--width",
    type=click.IntRange(min=1),
    default=80,
    show_default=True,
    help="Line width of the layout.",
)
@click.option(
    "--check",
    "check_only",
    is_flag=True,
    help="Write nothing; list the FILES (or folders' jaxpr files) whose text is not in "
    "canonical form and exit 1 if there are any (as `ruff format --check`).",
)
@split_option
@timing_option
def fmt(files, out, width, check_only, split_input, timing):
    """Re-print a jaxpr exactly as JAX's str(jaxpr) would.

    Reads FILE (or standard input), and prints it in the style of the JAX
    version it was printed by (detected), or of --jax-style VERSION.  Text
    printed by JAX comes back byte-identical; where JAX's own text would be
    ambiguous (a `_` used inside a nested jaxpr), fresh names are printed.
    With --check, several FILES (and folders) are read and compared with their
    canonical form (a missing final newline is allowed, as JAX's dumps have none).

    \b
    Example:
      jaxprtool fmt f.jaxpr
      jaxprtool --jax-style 0.4.35 fmt f.jaxpr -o old.jaxpr
      jaxprtool fmt --width 120 - < f.jaxpr
      jaxprtool fmt --check samples/ tests/golden/
    """
    if check_only:
        if out:
            raise click.UsageError("--check writes nothing; it does not take -o")
        guarded(_fmt_check)(files, width, split_input, timing)
        return
    if len(files) > 1:
        raise click.UsageError(
            "fmt prints one program (or one --split-input-file); give one FILE, or --check FILES"
        )
    guarded(_fmt)(files[0] if files else "-", out, width, split_input, timing)


def _formatted(part, width) -> str:
    """The canonical text of one part (without the final newline)."""
    from ..cli import OPTIONS
    from ..core import JaxprError
    from ..text.printer import print_jaxpr
    from .common import output_style, parse_text
    from .driver import timed

    jaxpr = parse_text(part.text, part.path, verify=False)
    style = output_style(jaxpr)
    if OPTIONS.jax_style:
        from ..ad.api import restyle

        jaxpr = restyle(_without_traced_rules(jaxpr), style)
    try:
        with timed("print"):
            return print_jaxpr(jaxpr, style, width)
    except RecursionError:
        raise JaxprError("input nests too deeply") from None


def _fmt(file, out, width, split_input, timing):
    from .driver import Instruments, run_parts

    ok = run_parts(
        [file], split_input, lambda p: _formatted(p, width) + "\n", out, Instruments(timing=timing)
    )
    if not ok:
        sys.exit(1)


def _fmt_check(files, width, split_input, timing):
    from .driver import Instruments, expand_inputs, run_parts

    inputs = expand_inputs(files or ("-",))
    changed: list[str] = []
    seen: list[str] = []

    def body(part):
        text = _formatted(part, width)
        if part.path not in seen:
            seen.append(part.path)
        if part.source.strip("\n") != text and part.path not in changed:
            changed.append(part.path)
        return None

    ok = run_parts(inputs, split_input, body, inst=Instruments(timing=timing), keep_going=True)
    for path in changed:
        click.echo(f"Would reformat: {path}")
    n, m = len(changed), len(seen) - len(changed)
    summary = [f"{n} file{'s' if n != 1 else ''} would be reformatted"] if n else []
    if m:
        summary.append(f"{m} file{'s' if m != 1 else ''} already formatted")
    if not ok:
        summary.append("some files could not be read (errors above)")
    click.echo(", ".join(summary) or "no files", err=False)
    if changed or not ok:
        sys.exit(1)


def _without_traced_rules(jaxpr):
    """The program without the custom rules `jaxprtool trace` records (JAX never prints
    them), with a warning per equation that had one."""
    from ..ad.registry import EXTENSION_PARAMS
    from ..core import map_param_jaxprs
    from ..io import warn

    memo: dict[int, object] = {}

    def clean(j):
        if id(j) in memo:
            return memo[id(j)]
        eqns = []
        for e in j.eqns:
            params = {k: map_param_jaxprs(v, clean) for k, v in e.params.items()}
            dropped = [k for k in EXTENSION_PARAMS if k in params]
            if dropped:
                warn(
                    f"{e.prim}: dropping the traced custom rule ({', '.join(dropped)}): "
                    "JAX's text has no place for it",
                    e.loc,
                )
                params = {k: v for k, v in params.items() if k not in dropped}
            eqns.append(e.replace(params=params))
        memo[id(j)] = out = j.replace(eqns=eqns)
        return out

    return clean(jaxpr)
