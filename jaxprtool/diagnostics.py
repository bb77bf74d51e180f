"""Diagnostics for machines: `--output-format text|json|github|sarif` (ruff's formats).

`text` is the tool's usual `FILE:LINE:COL: error: message` with the source line
(`io.format_error`).  The others serve CI jobs, on standard error as every diagnostic is
(standard output keeps the program):

* `github`: one GitHub Actions workflow command per diagnostic, as it happens
  (`::error file=f.jaxpr,line=2,col=5,title=jaxprtool::message`), so the job's page
  annotates the offending line;
* `json`: one JSON array of `{"file", "line", "column", "severity", "message"}` objects
  (`null` location fields for a diagnostic about no place in a file), written when the
  command ends, `[]` when there were none;
* `sarif`: one SARIF 2.1.0 log (what code-scanning services upload), written when the
  command ends.

`begin()` and `end()` bracket one invocation of the command line; `emit(err, kind)` takes
each diagnostic.
"""

from __future__ import annotations

import sys

from .core import JaxprError

FORMATS = ("text", "json", "github", "sarif")
#: the format of the running invocation
FORMAT = "text"
_collected: list[dict] = []

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
#: SARIF rule ids: the diagnostics have no codes; a result is an error or a warning
_RULES = {
    "error": "the input is rejected (parse, type or transformation error)",
    "warning": "the input is accepted with a warning",
}


def begin(fmt: str = "text") -> None:
    """Start an invocation whose diagnostics take format `fmt`."""
    global FORMAT
    FORMAT = fmt
    _collected.clear()


def set_format(fmt: str) -> None:
    global FORMAT
    FORMAT = fmt


def emit(err: JaxprError, kind: str, stream=None) -> None:
    """One diagnostic (`err.loc` already resolved) in a machine format."""
    record = as_record(err, kind)
    if FORMAT == "github":
        (stream or sys.stderr).write(github_line(record) + "\n")
        (stream or sys.stderr).flush()
    else:
        _collected.append(record)


def end(stream=None) -> None:
    """Write the collected document (json, sarif) and start afresh."""
    global FORMAT
    stream = stream or sys.stderr
    if FORMAT in ("json", "sarif"):
        import json  # here: ~1.5 ms of the start-up of every command, for two formats

        doc = _collected if FORMAT == "json" else sarif_log(_collected)
        stream.write(json.dumps(doc, indent=2) + "\n")
    stream.flush()
    _collected.clear()
    FORMAT = "text"


def as_record(err: JaxprError, kind: str) -> dict:
    loc = err.loc
    return {
        "file": loc.file if loc else None,
        "line": loc.line if loc else None,
        "column": loc.col if loc else None,
        "severity": kind,
        "message": err.message,
    }


def github_line(r: dict) -> str:
    """A GitHub Actions workflow command (`::error file=...,line=...,col=...::message`),
    escaped as the runner reads it (`%`, CR, LF; also `:` and `,` in properties)."""
    props = []
    if r["file"] is not None and not r["file"].startswith("<"):
        props += [f"file={_escape(r['file'], True)}", f"line={r['line']}", f"col={r['column']}"]
    props.append("title=jaxprtool")
    return f"::{r['severity']} {','.join(props)}::{_escape(r['message'], False)}"


def listed_path(path: str) -> str:
    """A file name on a line of its own (`Would reformat: NAME`): escaped as a workflow
    command's message under `github`, its control characters shown escaped otherwise; a
    name never starts a line of output."""
    return _escape(path, False) if FORMAT == "github" else shown_path(path)


def shown_path(path: str) -> str:
    """A file name as output lines show it: its control characters (a newline that would
    start a line of the file's choosing) escaped, as `\\n`."""
    if path.isprintable():
        return path
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in path)


def _escape(text: str, prop: bool) -> str:
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    if prop:
        text = text.replace(":", "%3A").replace(",", "%2C")
    return text


def _uri(path: str) -> str:
    """A file's SARIF artifact URI: `file:///...` for an absolute path, else the relative
    path, percent-encoded (the bytes of a name that is not UTF-8 as they are)."""
    import os
    from pathlib import PurePath
    from urllib.parse import quote

    p = PurePath(path)
    return p.as_uri() if p.is_absolute() else quote(os.fsencode(p.as_posix()))


def sarif_log(records: list[dict]) -> dict:
    from . import __version__

    results = []
    for r in records:
        result = {
            "ruleId": r["severity"],
            "level": r["severity"],
            "message": {"text": r["message"]},
        }
        if r["file"] is not None and not r["file"].startswith("<"):
            result["locations"] = [
                {
                    "physicalLocation": {
                        "artifactLocation": {"uri": _uri(r["file"])},
                        "region": {"startLine": r["line"], "startColumn": r["column"]},
                    }
                }
            ]
        results.append(result)
    driver = {
        "name": "jaxprtool",
        "version": __version__,
        "rules": [{"id": k, "shortDescription": {"text": v}} for k, v in _RULES.items()],
    }
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [{"tool": {"driver": driver}, "results": results}],
    }
