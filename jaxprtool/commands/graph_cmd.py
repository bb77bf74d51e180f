"""`jaxprtool graph`: draw a program as a Graphviz data-flow graph."""

from __future__ import annotations

import os
import shutil
import subprocess

import click

from ..cli import argument, command, guarded, option, options_of
from ..core import JaxprError
from ..declare import PathArg
from ..io import write_output
from .common import FILE_ARG, load, output_style

#: seconds Graphviz may take to lay a graph out before it is stopped
RENDER_TIMEOUT = 60


@command()
@argument("file", required=False, default="-", metavar="[FILE|-]", type=FILE_ARG)
@option(
    "-o",
    "--output",
    metavar="OUT.svg|.png|.pdf|.dot",
    type=PathArg(writes=True, dir_okay=False, allow_dash=True),
    help="Where to write the graph (default: DOT text on standard output).",
)
@option("--collapse-nested", is_flag=True, help="Draw each nested jaxpr as one node.")
@option(
    "--max-nodes",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="Refuse graphs with more nodes than this (default 5000).",
)
@guarded
def graph(file, output, collapse_nested, max_nodes):
    """Draw FILE as a data-flow graph: DOT always, SVG/PNG/PDF through Graphviz's `dot`.

    Each equation is a node labelled with its primitive and result types; a nested jaxpr
    is a cluster whose inputs are connected to the operands of its call and whose outputs
    lead to the call's node.  Without -o the DOT text goes to standard output.

    \b
    Example:
      jaxprtool graph f.jaxpr | dot -Tsvg > f.svg
      jaxprtool linearize f.jaxpr | jaxprtool graph -o lin.svg
    """
    from ..ui.graph import MAX_NODES, to_dot

    ext = os.path.splitext(output)[1].lower() if output not in (None, "-") else ""
    if ext not in ("", ".dot", ".gv", ".svg", ".png", ".pdf"):
        raise click.BadParameter(
            f"unknown graph format '{ext}' (use .dot, .svg, .png or .pdf)", param_hint="-o"
        )
    jaxpr, _, _ = load(file)
    dot = to_dot(
        jaxpr, collapse_nested, max_nodes or MAX_NODES, output_style(jaxpr, options_of().jax_style)
    )
    if ext in ("", ".dot", ".gv"):
        write_output(dot, output)
        return
    exe = shutil.which("dot")
    if exe is None:
        raise JaxprError(
            "rendering needs Graphviz's `dot` program, which is not on the PATH "
            "(install the 'graphviz' package, e.g. `apt-get install graphviz`), or write .dot instead"
        )
    try:
        proc = subprocess.run(
            [exe, f"-T{ext[1:]}"], input=dot.encode(), capture_output=True, timeout=RENDER_TIMEOUT
        )
    except subprocess.TimeoutExpired:
        raise JaxprError(
            f"graphviz took more than {RENDER_TIMEOUT} s to lay the graph out: draw it with "
            "--collapse-nested, or write .dot and render it yourself"
        ) from None
    if proc.returncode != 0:
        raise JaxprError(f"graphviz failed: {proc.stderr.decode(errors='replace').strip()}")
    write_output(proc.stdout, output)
