"""`jaxprtool check`: parse a jaxpr and check it against the shape rules."""

from __future__ import annotations

import sys

import click

from .. import io
from ..cli import guarded


@click.command("check")
@click.argument("file", required=False, metavar="[FILE|-]")
@guarded
def check(file):
    """Check a printed jaxpr: scoping, operand counts and types, nested jaxprs.

    Reads FILE (or standard input when FILE is `-` or absent). Prints nothing
    when the jaxpr is well formed; otherwise prints located diagnostics
    (`FILE:LINE:COL: error: ...`) on standard error. Unknown primitives are
    warnings. Exit status: 0 when there are no errors, 1 otherwise.

    \b
    Example:
      jaxprtool check f.jaxpr
      python -c 'import jax; print(jax.make_jaxpr(jax.numpy.sin)(1.0))' | jaxprtool check -
    """
    from ..check import check as run_check
    from ..text.parser import parse

    text, path = io.read_source(file)
    io.remember_source(path, text)
    result = parse(text, path)
    for w in result.warnings:
        io.report(w, "warning")
    diags = run_check(result.jaxpr, path, check_names=True)
    for d in diags:
        io.report(d, d.kind)
    if any(d.kind == "error" for d in diags):
        sys.exit(1)
