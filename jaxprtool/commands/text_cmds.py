"""`jaxprtool fmt`: parse a printed jaxpr and print it back in JAX's layout."""

from __future__ import annotations

import click

from ..cli import guarded


@click.command()
@click.argument("file", required=False, default="-", metavar="[FILE|-]")
@click.option(
    "-o",
    "--output",
    "out",
    metavar="OUT",
    help="Write to OUT (atomically) instead of standard output.",
)
@click.option(
    "--width",
    type=click.IntRange(min=1),
    default=80,
    show_default=True,
    help="Line width of the layout.",
)
def fmt(file, out, width):
    """Re-print a jaxpr exactly as JAX's str(jaxpr) would.

    Reads FILE (or standard input), and prints it in the style of the JAX
    version it was printed by (detected), or of --jax-style VERSION.  Text
    printed by JAX comes back byte-identical; where JAX's own text would be
    ambiguous (a `_` used inside a nested jaxpr), fresh names are printed.

    \b
    Example:
      jaxprtool fmt f.jaxpr
      jaxprtool --jax-style 0.4.35 fmt f.jaxpr -o old.jaxpr
      jaxprtool fmt --width 120 - < f.jaxpr
    """
    guarded(_fmt)(file, out, width)


def _fmt(file, out, width):
    from ..core import JaxprError
    from ..io import write_output
    from ..text.printer import print_jaxpr
    from .common import load, output_style

    jaxpr, _text, _path = load(file, verify=False)
    style = output_style(jaxpr)
    try:
        text = print_jaxpr(jaxpr, style, width)
    except RecursionError:
        raise JaxprError("input nests too deeply") from None
    write_output(text + "\n", out)
