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
@click.option(
    "--werror",
    is_flag=True,
    help="Treat warnings as errors: report them as errors and exit 1 (as a compiler's -Werror).",
)
@split_option
@timing_option
@guarded
def check(files, werror, split_input, timing):
    """Check printed jaxprs: scoping, operand counts and types, nested jaxprs.

    Reads each FILE (or standard input when FILE is `-` or absent); a DIR stands for the
    jaxpr files under it (`*.jaxpr`, and the `*.jaxpr.txt` files JAX writes with
    JAX_DUMP_IR_TO=DIR JAX_DUMP_IR_MODES=jaxpr).  Prints nothing when every program is well
    formed; otherwise prints located diagnostics (`FILE:LINE:COL: error: ...`) on
    standard error, for every file (`--output-format json|github|sarif` for CI).  Unknown
    primitives are warnings (errors with --werror).  Exit status: 0 when there are no
    errors, 1 otherwise.

    \b
    Example:
      jaxprtool check f.jaxpr
      jaxprtool check a.jaxpr b.jaxpr dumps/
      jaxprtool check --werror --output-format github samples/
      python -c 'import jax; print(jax.make_jaxpr(jax.numpy.sin)(1.0))' | jaxprtool check -
    """
    from ..check import check as run_check
    from ..text.parser import parse
    from ..text.values import light_dtypes
    from .driver import Instruments, expand_inputs, given_or_default, run_parts, timed

    inputs = expand_inputs(given_or_default(files, "check"))

    def body(part):
        with timed("parse"):
            result = parse(part.text, part.path)
        with timed("check"):
            diags = run_check(result.jaxpr, part.path, check_names=True)
        kinds = [*(["warning"] * len(result.warnings)), *(d.kind for d in diags)]
        if werror:
            kinds = ["error"] * len(kinds)
        for d, kind in zip([*result.warnings, *diags], kinds):
            io.report(d, kind)
        if "error" in kinds:
            raise io.Reported()
        return None

    with light_dtypes():  # dtype parameters stay names: no numpy import
        ok = run_parts(inputs, split_input, body, inst=Instruments(timing=timing), keep_going=True)
    if not ok:
        sys.exit(1)
