"""Helpers shared by commands: read and parse an input file, reporting parser warnings."""

from __future__ import annotations

import sys

import click

from ..core import Jaxpr
from ..io import read_source, remember_source, report, warn


def load(file: str | None, verify: bool = True) -> tuple[Jaxpr, str, str]:
    """Parse FILE (or standard input): (jaxpr, text, display path); warnings go to stderr.

    With `verify` (the default for every command that transforms or runs a
    program) the checker runs first, so an ill-typed input is rejected with
    located errors (exit 1) instead of failing somewhere inside a pass.
    """
    from ..text.parser import parse

    text, path = read_source(file)
    remember_source(path, text)
    result = parse(text, path)
    for w in result.warnings:
        warn(w.message, w.loc)
    if verify:
        from ..check import check

        errors = [d for d in check(result.jaxpr, path, check_names=True) if d.kind == "error"]
        if errors:
            for e in errors:
                report(e)
            sys.exit(1)
    return result.jaxpr, text, path


def output_style(jaxpr: Jaxpr):
    """The printing style: the global --jax-style, else the one detected from the input."""
    from ..cli import OPTIONS
    from ..text.style import Style, detect_style

    if OPTIONS.jax_style:
        try:
            return Style.parse(OPTIONS.jax_style)
        except ValueError as e:
            raise click.UsageError(f"--jax-style: {e}") from None
    return detect_style(jaxpr)


def int_list(ctx, param, value):
    """click callback: `0,2` -> (0, 2); None stays None."""
    if value is None:
        return None
    try:
        out = tuple(int(p) for p in value.split(",") if p.strip())
    except ValueError:
        raise click.BadParameter(
            f"expected integers separated by commas, e.g. 0,2 (got '{value}')"
        ) from None
    if not out:
        raise click.BadParameter("expected at least one index")
    return out
