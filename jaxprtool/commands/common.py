"""Helpers shared by commands: read and parse an input file, reporting parser warnings."""

from __future__ import annotations

from ..cli import keep_until_exit, options_of
from ..core import Eqn, Jaxpr, JaxprError, all_eqns
from ..declare import PathArg
from ..io import Reported, read_source, remember_source, report, warn

#: the type of a FILE argument: a path (shells complete file names), `-` for standard input;
#: reading it (and saying why it cannot be read) is `read_source`'s job
FILE_ARG = PathArg(writes=False, allow_dash=True)
#: the type of -o OUT (a path; `-` is standard output): never one of the inputs
OUT_ARG = PathArg(writes=True, allow_dash=True)


def load(file: str | None, verify: bool = True) -> tuple[Jaxpr, str, str]:
    """Parse FILE (or standard input): (jaxpr, text, display path); warnings go to stderr.

    With `verify` (the default for every command that transforms or runs a
    program) the checker runs first, so an ill-typed input is rejected with
    located errors (`io.Reported` once they are printed: exit 1 through `cli.guarded`;
    `diff` and `check-grad` catch it, for them trouble) instead of failing somewhere
    inside a pass.
    """
    from .driver import timed

    with timed("read"):
        text, path = read_source(file, options_of().max_input)
    remember_source(path, text)
    jaxpr = parse_text(text, path, verify)
    keep_until_exit(jaxpr)  # (not freed equation by equation at the end)
    return jaxpr, text, path


def parse_text(text: str, path: str, verify: bool = True, first_line: int = 1) -> Jaxpr:
    """Parse `text` (of the input `path`, already remembered for error excerpts; starting on
    line `first_line` of its file); parser warnings go to stderr.  With `verify`, checker
    errors are reported and Reported raised."""
    from .driver import timed

    with timed("parse"):
        result = parse_at(text, path, first_line)
    for w in result.warnings:
        warn(w.message, w.loc, w.code)
    if verify:
        from ..check import check

        with timed("check"):
            diags = check(result.jaxpr, path, check_names=True)
        errors = [d for d in diags if d.kind == "error"]
        if errors:
            for e in errors:
                report(e)
            raise Reported()
    return result.jaxpr


def parse_at(text: str, path: str, first_line: int = 1):
    """`parser.parse` of a text that starts on line `first_line` of the file `path` (a part
    of a split file): its equations, warnings and errors are located in the whole file."""
    from ..text.parser import parse

    by = first_line - 1
    try:
        result = parse(text, path)
    except JaxprError as e:
        if by and e.loc is not None and e.loc.file == path:
            e.loc = e.loc._replace(line=e.loc.line + by)
        raise
    if by:
        set_loc = Eqn.__dict__["loc"].__set__  # (frozen: no one else holds this IR yet)
        for e in all_eqns(result.jaxpr):
            if e.loc is not None and e.loc.file == path:
                set_loc(e, e.loc._replace(line=e.loc.line + by))
        for w in result.warnings:
            if w.loc is not None:
                w.loc = w.loc._replace(line=w.loc.line + by)
    return result


def output_style(jaxpr: Jaxpr, jax_style: str | None):
    """The printing style: the global --jax-style (`jax_style`, `cli.Options`), else the one
    detected from the input."""
    from ..text.style import Style, detect_style

    if jax_style:
        try:
            return Style.parse(jax_style)
        except ValueError as e:
            import click

            raise click.UsageError(f"--jax-style: {e}") from None
    return detect_style(jaxpr)


def int_list(ctx, param, value):
    """click callback: `0,2` -> (0, 2); None stays None."""
    if value is None:
        return None
    try:
        out = tuple(int(p) for p in value.split(",") if p.strip())
    except ValueError:
        import click

        raise click.BadParameter(
            f"expected integers separated by commas, e.g. 0,2 (got '{value}')"
        ) from None
    if not out:
        import click

        raise click.BadParameter("expected at least one index")
    return out
