"""`jaxprtool check`: parse a jaxpr and check it against the shape rules."""

from __future__ import annotations

import sys

import click

from .. import io
from ..cli import guarded
from .common import FILE_ARG
from .driver import split_option, timing_option


@click.command("check")
@click.argument("files", nargs=-1, metavar="[FILE|DIR|-]...", type=FILE_ARG)
@split_option
@timing_option
@guarded
def check(files, split_input, timing):
    """Check printed jaxprs: scoping, operand counts and types, nested jaxprs.

    Reads each FILE (or standard input when FILE is `-` or absent); a DIR stands for the
    jaxpr files under it (`*.jaxpr`, and the `*.jaxpr.txt` files JAX writes with
    JAX_DUMP_IR_TO=DIR JAX_DUMP_IR_MODES=jaxpr).  Prints nothing when every program is well
    formed; otherwise prints located diagnostics (`FILE:LINE:COL: error: ...`) on
    standard error, for every file.  Unknown primitives are warnings.  Exit status: 0 when
    there are no errors, 1 otherwise.

    \b
    Example:
      jaxprtool check f.jaxpr
      jaxprtool check a.jaxpr b.jaxpr dumps/
      python -c 'import jax; print(jax.make_jaxpr(jax.numpy.sin)(1.0))' | jaxprtool check -
    """
    from ..check import check as run_check
    from ..text.parser import parse
    from .driver import Instruments, expand_inputs, run_parts, timed

    inputs = expand_inputs(files or ("-",))

    def body(part):
        with timed("parse"):
            result = parse(part.text, part.path)
        for w in result.warnings:
            io.report(w, "warning")
        with timed("check"):
            diags = run_check(result.jaxpr, part.path, check_names=True)
        for d in diags:
            io.report(d, d.kind)
        if any(d.kind == "error" for d in diags):
            raise io.Reported()
        return None

    ok = run_parts(inputs, split_input, body, inst=Instruments(timing=timing), keep_going=True)
    if not ok:
        sys.exit(1)
