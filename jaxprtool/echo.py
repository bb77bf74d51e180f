"""click's `echo` of a line of text, without importing click (its import: ~42M
instructions of a command's start, `quickstart`)."""

from __future__ import annotations

import sys


def echo(text: str, err: bool = False) -> None:
    """`click.echo(text, err=err)`: the line written to standard output (error) and flushed.
    click itself (its import: ~42M instructions) only where it would change the text: the
    ANSI styles it strips on a stream that is no terminal, a stream in an ASCII encoding it
    wraps."""
    stream = sys.stderr if err else sys.stdout
    if stream is None:
        return
    if "\x1b" in text or _ascii_stream(stream):
        import click

        click.echo(text, err=err)
        return
    stream.write(text + "\n")
    stream.flush()


def _ascii_stream(stream) -> bool:
    import codecs

    try:
        return codecs.lookup(getattr(stream, "encoding", None) or "ascii").name == "ascii"
    except LookupError:
        return False
