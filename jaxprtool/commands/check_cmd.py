"""`jaxprtool check`: parse a jaxpr and check it against the shape rules."""

from __future__ import annotations

from .. import io
from ..cli import ExitStatus, argument, command, guarded, option, options_of
from ..core import JaxprError
from .common import FILE_ARG
from .driver import split_option, timing_option


@command("check")
@argument("files", nargs=-1, metavar="[FILE|DIR|-]...", type=FILE_ARG)
@option(
    "--werror",
    is_flag=True,
    help="Treat warnings as errors: report them as errors and exit 1 (as a compiler's -Werror).",
)
@option(
    "--select",
    multiple=True,
    metavar="CODES",
    help="Report only the diagnostics whose code starts with one of CODES (comma-separated "
    "codes or prefixes, repeatable: `--select E1,W001`; docs/CI.md lists the codes).",
)
@option(
    "--ignore",
    multiple=True,
    metavar="CODES",
    help="Do not report the diagnostics whose code starts with one of CODES (as ruff's: the "
    "longest matching prefix of --select and --ignore decides).  The E0 codes (a text that "
    "does not read) are always reported.",
)
@option("-q", "--quiet", is_flag=True, help="No summary line at the end (only the diagnostics).")
@split_option
@timing_option
@guarded
def check(files, werror, select, ignore, quiet, split_input, timing):
    """Check printed jaxprs: scoping, operand counts and types, nested jaxprs.

    Reads each FILE (or standard input when FILE is `-` or absent); a DIR stands for the
    jaxpr files under it (`*.jaxpr`, and the `*.jaxpr.txt` files JAX writes with
    JAX_DUMP_IR_TO=DIR JAX_DUMP_IR_MODES=jaxpr).  Prints nothing when every program is well
    formed but the summary line on standard error, as ruff's ("All checks passed." or
    "Found 2 errors in 1 file.", `-q` leaves it out); otherwise prints located diagnostics (`FILE:LINE:COL: error: ...`) on
    standard error, for every file, each with its code (`... error: message [E111]`);
    `--output-format json|github|sarif` writes them for CI on standard output (or
    `--output-file`).  Unknown primitives are warnings (errors with --werror), with the
    closest known name.  `--select`/`--ignore` choose codes.  Exit status: 0 when there are
    no errors reported, 1 otherwise.

    \b
    Example:
      jaxprtool check f.jaxpr
      jaxprtool check a.jaxpr b.jaxpr dumps/
      jaxprtool check --werror --output-format github samples/
      jaxprtool check --ignore W001 --select E1,W f.jaxpr
      python -c 'import jax; print(jax.make_jaxpr(jax.numpy.sin)(1.0))' | jaxprtool check -
    """
    from ..check import check as run_check
    from ..diagnostics import check_prefixes, code_of, selected
    from ..text.values import light_dtypes
    from .common import parse_at
    from .driver import Instruments, expand_inputs, given_or_default, run_parts, timed

    select = check_prefixes("--select", select) if select else ()
    ignore = check_prefixes("--ignore", ignore)

    def body(part):
        with timed("parse"):
            try:
                result = parse_at(part.source, part.path, part.line)
            except JaxprError as e:
                if not selected(code_of(e), select, ignore):  # (E101 from the parser)
                    e.message += " (not ignored: the text cannot be read past it)"
                raise
        with timed("check"):
            diags = run_check(result.jaxpr, part.path, check_names=True)
        found = [*((w, "warning") for w in result.warnings), *((d, d.kind) for d in diags)]
        found = [(d, k) for d, k in found if selected(code_of(d, k), select, ignore)]
        kinds = ["error" if werror else k for _, k in found]
        for (d, _), kind in zip(found, kinds):
            io.report(d, kind)
        if "error" in kinds:
            raise io.Reported()
        return None

    sink = options_of().diagnostics
    before = len(sink.reported)  # every diagnostic reported from here on, for the summary
    inputs = expand_inputs(given_or_default(files, "check"))  # W003: a file skipped
    with light_dtypes():  # dtype parameters stay names: no numpy import
        ok = run_parts(inputs, split_input, body, inst=Instruments(timing=timing), keep_going=True)
    if not quiet and not sink.emitter.machine:  # a machine document has no summary
        sink.emitter.add_line(_summary(sink.reported[before:]))
    return None if ok else ExitStatus.FAILURE


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _summary(reported: list[tuple[str, str | None]]) -> str:
    """ruff's last line: what `check` reported, in how many files, warnings apart."""
    errors = [f for kind, f in reported if kind == "error"]
    warnings = len(reported) - len(errors)
    warned = f" ({_plural(warnings, 'warning')})" if warnings else ""
    if not errors:
        return f"All checks passed{warned}."
    files = _plural(len(set(errors)), "file")
    return f"Found {_plural(len(errors), 'error')} in {files}{warned}."
