"""`jaxprtool graph`: draw a program as a Graphviz data-flow graph."""

from __future__ import annotations

import os
import shutil
import subprocess

import click

from ..cli import guarded
from ..core import JaxprError
from ..io import write_output
from .common import load


@click.command()
@click.argument("file", required=False)
@click.option(
    "-o", "--output", required=True, metavar="OUT.svg|.png|.dot", help="Where to write the graph."
)
@click.option("--collapse-nested", is_flag=True, help="Draw each nested jaxpr as one node.")
@guarded
def graph(file, output, collapse_nested):
    """Draw FILE as a data-flow graph: DOT always, SVG/PNG through Graphviz's `dot`.

    \b
    Example:
      jaxprtool linearize f.jaxpr | jaxprtool graph -o lin.svg
    """
    from ..ui.graph import to_dot

    jaxpr, _, _ = load(file)
    dot = to_dot(jaxpr, collapse_nested)
    ext = os.path.splitext(output)[1].lower()
    if ext in ("", ".dot", ".gv"):
        write_output(dot, output)
        return
    if ext not in (".svg", ".png", ".pdf"):
        raise click.BadParameter(
            f"unknown graph format '{ext}' (use .dot, .svg, .png or .pdf)", param_hint="-o"
        )
    exe = shutil.which("dot")
    if exe is None:
        raise JaxprError(
            "rendering needs Graphviz's `dot` program, which is not on the PATH "
            "(install the 'graphviz' package, e.g. `apt-get install graphviz`), or write .dot instead"
        )
    proc = subprocess.run(
        [exe, f"-T{ext[1:]}"], input=dot.encode(), capture_output=True, timeout=120
    )
    if proc.returncode != 0:
        raise JaxprError(f"graphviz failed: {proc.stderr.decode(errors='replace').strip()}")
    write_output(proc.stdout, output)
