"""Helpers shared by commands: read and parse an input file, reporting parser warnings."""

from __future__ import annotations

from ..core import Jaxpr
from ..io import read_source, remember_source, warn


def load(file: str | None) -> tuple[Jaxpr, str, str]:
    """Parse FILE (or standard input): (jaxpr, text, display path); warnings go to stderr."""
    from ..text.parser import parse

    text, path = read_source(file)
    remember_source(path, text)
    result = parse(text, path)
    for w in result.warnings:
        warn(w.message, w.loc)
    return result.jaxpr, text, path
