"""Diagnostics for machines: `--output-format text|json|github|sarif` (ruff's formats), and
the diagnostics' stable codes (`CODES`, listed in docs/CI.md; `check --select/--ignore`).

`text` is the tool's usual `FILE:LINE:COL: error: message` with the source line
(`io.format_error`; `check` ends the line with the code, ` [E111]`), on standard error.  The
others serve CI jobs; each record carries its code:

* `github`: one GitHub Actions workflow command per diagnostic, as it happens
  (`::error file=f.jaxpr,line=2,col=5,title=jaxprtool::message [E111]`), so the job's page
  annotates the offending line;
* `json`: one JSON array of `{"file", "line", "column", "severity", "code", "message"}`
  objects (`null` location fields for a diagnostic about no place in a file), written when
  the command ends, `[]` when there were none;
* `sarif`: one SARIF 2.1.0 log (what code-scanning services upload; its rules are the
  codes), written when the command ends.

They go to standard output when the command leaves it free (`check`; `-o OUT` given:
`cli._stdout_free`), else to standard error (the program keeps standard output), or with
`--output-file FILE` to FILE when the command ends (the text diagnostics too).

`begin()` and `end()` bracket one invocation of the command line; `emit(err, kind)` takes
each diagnostic.
"""

from __future__ import annotations

import sys

from .core import JaxprError, shown_path

FORMATS = ("text", "json", "github", "sarif")
#: the format of the running invocation
FORMAT = "text"
#: --output-file: where the diagnostics go instead (None: standard output or error)
OUTPUT_FILE: str | None = None
#: whether the running command leaves standard output to the document
TO_STDOUT = False
#: a child process runs the command and writes the document (`run --coordinator`)
DELEGATED = False
#: whether text diagnostics end with their code (`check`'s, as a linter's; the machine
#: formats always carry it)
SHOW_CODES = False
_collected: list[dict] = []
#: github or text lines kept for --output-file
_lines: list[str] = []

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
#: every diagnostic's stable code -> what it means (docs/CI.md's table; SARIF's rules).
#: E0xx: the input is not a readable jaxpr; E1xx: the checker's errors; E2xx: a command's
#: refusal of a program it read; E9xx: trouble that is not the program's (exit 2, internal);
#: Wxxx: warnings.  A code is never reused for another meaning.
CODES = {
    "E001": "syntax error: the text does not read as a jaxpr",
    "E002": "not jaxpr text: a binary file, invalid UTF-8, a NUL byte",
    "E003": "over a limit: input size, nesting depth, number length, equations once expanded",
    "E101": "a variable used before its definition",
    "E102": "a variable bound more than once",
    "E103": "an output variable that is not defined",
    "E104": "a binder that is not a typed variable",
    "E105": "a literal whose value cannot have its type",
    "E110": "the primitive's shape rule rejects the operands or parameters",
    "E111": "a declared result type differs from the inferred one",
    "E112": "the equation binds more or fewer results than the primitive returns",
    "E113": "the equation cannot be checked (a malformed parameter)",
    "E200": "the command cannot do this with the program (a missing rule, bad arrays, ...)",
    "E201": "transpose: an equation is not linear in the linear inputs",
    "E202": "reverse mode of what JAX has no reverse mode of (a while loop)",
    "E203": "the program's inputs or outputs do not suit the command",
    "E900": "bad usage or environment: a missing file, an unwritable output (exit 2)",
    "E999": "internal error of the tool",
    "W001": "unknown primitive (a close known name is suggested): types taken from the binders",
    "W002": "ambiguous use of '_' bound twice in one jaxpr",
    "W003": "a file of a folder walk skipped",
    "W004": "equations misindented: read by their brackets, not in JAX's layout (fmt rewrites it)",
    "W100": "other warning (a fallback rule, invented constants, ...)",
}
#: the codes whose diagnostic says the input could not be read: never deselected
UNREAD = ("E0",)


def code_of(err: JaxprError, kind: str = "error") -> str:
    """The stable code of a diagnostic: its own (`err.code`), else its class's."""
    from .core import NoReverseMode, NotLinear, ProgramError, UsageProblem

    code = getattr(err, "code", None)
    if code:
        return code
    if kind == "warning":
        return "W100"
    for cls, c in ((UsageProblem, "E900"), (NotLinear, "E201"), (NoReverseMode, "E202")):
        if isinstance(err, cls):
            return c
    return "E203" if isinstance(err, ProgramError) else "E200"


def matches(code: str, prefixes) -> bool:
    return any(code.startswith(p) for p in prefixes)


def check_prefixes(option: str, prefixes) -> tuple[str, ...]:
    """`--select E1,W001`'s codes and prefixes, upper-cased; one that names no code is bad
    usage, with the closest code."""
    import click

    out = []
    for p in (x.strip().upper() for item in prefixes for x in item.split(",")):
        if not p:
            continue
        if p != "ALL" and not any(c.startswith(p) for c in CODES):
            import difflib

            close = difflib.get_close_matches(p, list(CODES), n=1, cutoff=0.5)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            raise click.BadParameter(
                f"'{p}' is no diagnostic code or prefix of one (docs/CI.md lists them){hint}",
                param_hint=option,
            )
        out.append("" if p == "ALL" else p)
    return tuple(out)


def selected(code: str, select, ignore) -> bool:
    """Whether `check --select/--ignore` keep a diagnostic: the longest matching prefix
    decides (ruff's rule: `--select E --ignore E1 --select E111` keeps E111); selected by
    default; the E0 codes (the text was not read) always."""
    if matches(code, UNREAD):
        return True
    best_sel = max((len(p) for p in select if code.startswith(p)), default=-1) if select else 0
    best_ign = max((len(p) for p in ignore if code.startswith(p)), default=-1)
    return best_sel > best_ign


def begin(fmt: str = "text") -> None:
    """Start an invocation whose diagnostics take format `fmt`."""
    global FORMAT, OUTPUT_FILE, TO_STDOUT, SHOW_CODES, DELEGATED
    FORMAT = fmt
    OUTPUT_FILE = None
    TO_STDOUT = SHOW_CODES = DELEGATED = False
    _collected.clear()
    _lines.clear()


def set_format(fmt: str) -> None:
    global FORMAT
    FORMAT = fmt


def set_output_file(path: str | None) -> None:
    global OUTPUT_FILE
    OUTPUT_FILE = path


def delegate() -> None:
    """The command runs again in a child process (`run --coordinator`), whose document is
    the invocation's: this process writes none unless it reports a diagnostic itself."""
    global DELEGATED
    DELEGATED = True


def set_show_codes(show: bool) -> None:
    global SHOW_CODES
    SHOW_CODES = show


def set_stdout_free(free: bool) -> None:
    """Whether the running command leaves standard output to the document (it writes its
    own result to a file, or has none: `check`)."""
    global TO_STDOUT
    TO_STDOUT = free


def stream():
    """Where a machine document goes without --output-file."""
    return sys.stdout if TO_STDOUT else sys.stderr


def to_file() -> bool:
    """Whether the diagnostics are collected for --output-file."""
    return OUTPUT_FILE not in (None, "-")


def emit(err: JaxprError, kind: str, stream_=None) -> None:
    """One diagnostic (`err.loc` already resolved) in a machine format."""
    record = as_record(err, kind)
    if FORMAT == "github":
        line = github_line(record) + "\n"
        if to_file():
            _lines.append(line)
            return
        out = stream_ or stream()
        out.write(line)
        out.flush()
    else:
        _collected.append(record)


def collect_text(text: str) -> None:
    """A text diagnostic, for --output-file."""
    _lines.append(text + "\n")


def end(stream_=None, write_file=None) -> None:
    """Write the collected document (json, sarif; github and text lines for --output-file,
    through `write_file(text, path)`: `io.write_output`) and start afresh."""
    global FORMAT, OUTPUT_FILE, SHOW_CODES, DELEGATED
    text = "".join(_lines)
    if FORMAT in ("json", "sarif"):
        import json  # here: ~1.5 ms of the start-up of every command, for two formats

        doc = _collected if FORMAT == "json" else sarif_log(_collected)
        text = json.dumps(doc, indent=2) + "\n"
    delegated = DELEGATED and not _collected and not _lines
    path, FORMAT, OUTPUT_FILE, SHOW_CODES = OUTPUT_FILE, "text", None, False
    DELEGATED = False
    _collected.clear()
    _lines.clear()
    if delegated:
        return
    if path not in (None, "-"):
        write_file(text, path)
        return
    out = stream_ or stream()
    if text:
        out.write(text)
    out.flush()


def as_record(err: JaxprError, kind: str) -> dict:
    loc = err.loc
    return {
        "file": loc.file if loc else None,
        "line": loc.line if loc else None,
        "column": loc.col if loc else None,
        "severity": kind,
        "code": code_of(err, kind),
        "message": err.message,
    }


def github_line(r: dict) -> str:
    """A GitHub Actions workflow command (`::error file=...,line=...,col=...::message`),
    escaped as the runner reads it (`%`, CR, LF; also `:` and `,` in properties)."""
    props = []
    if r["file"] is not None and not r["file"].startswith("<"):
        props += [f"file={_escape(r['file'], True)}", f"line={r['line']}", f"col={r['column']}"]
    props.append("title=jaxprtool")
    message = f"{r['message']} [{r['code']}]"
    return f"::{r['severity']} {','.join(props)}::{_escape(message, False)}"


def listed_path(path: str) -> str:
    """A file name on a line of its own (`Would reformat: NAME`): escaped as a workflow
    command's message under `github`, its control characters shown escaped otherwise; a
    name never starts a line of output."""
    return _escape(path, False) if FORMAT == "github" else shown_path(path)


def _escape(text: str, prop: bool) -> str:
    """GitHub's workflow-command escaping (`%`, CR and LF as `%25`, `%0D`, `%0A`; in a
    property `:` and `,` too), then every other character that is not printable (ESC, BEL,
    NUL, NEL, U+2028) as `shown_path` writes it, `\\x1b`: the runner decodes no other
    `%XX`, and the job's log would show them raw."""
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    if prop:
        text = text.replace(":", "%3A").replace(",", "%2C")
    return shown_path(text)


def _uri(path: str) -> str:
    """A file's SARIF artifact URI: `file:///...` for an absolute path, else the relative
    path, percent-encoded (the bytes of a name that is not UTF-8 as they are)."""
    import os
    from pathlib import PurePath
    from urllib.parse import quote

    p = PurePath(path)
    return p.as_uri() if p.is_absolute() else quote(os.fsencode(p.as_posix()))


def sarif_log(records: list[dict]) -> dict:
    from .version import __version__

    results = []
    for r in records:
        result = {
            "ruleId": r["code"],
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
        "rules": [
            {
                "id": k,
                "shortDescription": {"text": v},
                "defaultConfiguration": {"level": "warning" if k[0] == "W" else "error"},
            }
            for k, v in CODES.items()
        ],
    }
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [{"tool": {"driver": driver}, "results": results}],
    }
