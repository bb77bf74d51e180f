"""Reading inputs, writing outputs atomically, and reporting located errors."""

from __future__ import annotations

import os
import sys
import tempfile

import click

from .core import JaxprError, Loc, UsageProblem


class UsageError(click.UsageError):
    """Bad usage: exit 2."""


def read_source(file: str | None) -> tuple[str, str]:
    """(text, display path) from a path, `-` or None (standard input)."""
    if file in (None, "-"):
        data = sys.stdin.buffer.read()
        path = "<stdin>"
    else:
        try:
            with open(file, "rb") as f:
                data = f.read()
        except OSError as e:
            raise UsageProblem(f"cannot read '{file}': {e.strerror}", None) from None
        path = file
    try:
        return data.decode("utf-8"), path
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        col = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise JaxprError("input is not valid UTF-8", Loc(path, line, col)) from None


def write_output(text: str | bytes, out: str | None) -> None:
    """Write to standard output, or atomically to `out` (a temp file renamed into place)."""
    data = text.encode("utf-8") if isinstance(text, str) else text
    if out in (None, "-"):
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        return
    folder = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(folder):
        raise UsageProblem(
            f"cannot write '{out}': folder '{os.path.dirname(out) or '.'}' does not exist"
        )
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".jaxprtool-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, out)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def use_color(stream=None) -> bool:
    stream = stream or sys.stderr
    return "NO_COLOR" not in os.environ and hasattr(stream, "isatty") and stream.isatty()


_sources: dict[str, str] = {}


def remember_source(path: str, text: str) -> None:
    """Keep the text of an input so that error messages can quote the offending line."""
    _sources[path] = text


def format_error(err: JaxprError, kind: str = "error") -> str:
    """`FILE:LINE:COL: error: message`, then the source line and a caret when known."""
    head = f"{err.loc}: {kind}: {err.message}" if err.loc else f"{kind}: {err.message}"
    lines = [head]
    if err.loc and err.loc.file in _sources:
        src = _sources[err.loc.file].splitlines()
        if 1 <= err.loc.line <= len(src):
            text = src[err.loc.line - 1].replace("\t", " ")
            lines.append(text)
            lines.append(" " * (err.loc.col - 1) + "^")
    return "\n".join(lines)


def report(err: JaxprError, kind: str = "error") -> None:
    """Print a located diagnostic on standard error (rich colour on a terminal)."""
    msg = format_error(err, kind)
    if use_color():
        from rich.console import Console
        from rich.markup import escape

        head, _, rest = msg.partition("\n")
        colour = "red" if kind == "error" else "yellow"
        Console(stderr=True, highlight=False).print(
            f"[bold]{escape(head.split(f' {kind}: ')[0])}[/bold] [bold {colour}]{kind}:[/] "
            + escape(head.split(f" {kind}: ", 1)[-1])
            + ("\n" + escape(rest) if rest else "")
        )
    else:
        click.echo(msg, err=True)


def warn(message: str, loc: Loc | None = None) -> None:
    report(JaxprError(message, loc), "warning")
