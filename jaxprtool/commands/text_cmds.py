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
    from ..cli import OPTIONS
    from ..core import JaxprError
    from ..io import write_output
    from ..text.printer import print_jaxpr
    from .common import load, output_style

    jaxpr, _text, _path = load(file, verify=False)
    style = output_style(jaxpr)
    if OPTIONS.jax_style:
        jaxpr = _without_traced_rules(jaxpr)
    try:
        text = print_jaxpr(jaxpr, style, width)
    except RecursionError:
        raise JaxprError("input nests too deeply") from None
    write_output(text + "\n", out)


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
