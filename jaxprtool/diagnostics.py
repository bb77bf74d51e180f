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

Each format is one emitter (`EMITTERS`: `TextEmitter`, `GithubEmitter`, `JsonEmitter`,
`SarifEmitter`); a `Sink` holds the invocation's emitter and where its document goes.
`begin()` and `end()` bracket one invocation of the command line (its sink is on the
invocation's options, `cli.Options.diagnostics`); `io.report(err, kind)` hands each diagnostic
to it.
"""

from __future__ import annotations

import sys

from .core import JaxprError, shown_path

FORMATS = ("text", "json", "github", "sarif")

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
    out = []
    for p in (x.strip().upper() for item in prefixes for x in item.split(",")):
        if not p:
            continue
        if p != "ALL" and not any(c.startswith(p) for c in CODES):
            import difflib

            import click

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


class Emitter:
    """How one output format writes an invocation's diagnostics (ruff's emitters): `add`
    takes each as it happens, `document()` is what is left to write when the command ends."""

    #: whether the diagnostic records are a machine document (no summary line, located
    #: before they are recorded)
    machine = True

    def __init__(self, sink: Sink):
        self.sink = sink

    def add(self, err: JaxprError, kind: str, text) -> None:
        """One diagnostic; `text` is how `io` writes one as text (`io.TextForm`: handed in,
        so that this module imports nothing from `io`)."""
        raise NotImplementedError

    def document(self) -> str:
        return ""

    def listed_path(self, path: str) -> str:
        """A file name on a line of its own (`Would reformat: NAME`), its control
        characters shown escaped: a name never starts a line of output."""
        return shown_path(path)


class TextEmitter(Emitter):
    """`FILE:LINE:COL: error: message` and the source line (`io.format_error`), on standard
    error as they happen (coloured on a terminal), or kept for --output-file."""

    machine = False

    def __init__(self, sink: Sink):
        super().__init__(sink)
        self.lines: list[str] = []

    def add(self, err: JaxprError, kind: str, text) -> None:
        msg = text.format(err, kind, code_of(err, kind) if self.sink.show_codes else None)
        if self.sink.to_file():
            self.lines.append(msg + "\n")
        else:
            text.show(msg, kind)

    def add_line(self, text: str) -> None:
        """A line of the command's own (`check`'s summary) among the diagnostics."""
        if self.sink.to_file():
            self.lines.append(text + "\n")
        else:
            from .echo import echo

            echo(text, err=True)  # (flushed: click 8.2.0's CliRunner misses a print)

    def document(self) -> str:
        return "".join(self.lines)


class GithubEmitter(TextEmitter):
    """One GitHub Actions workflow command per diagnostic, as it happens."""

    machine = True

    def add(self, err: JaxprError, kind: str, text) -> None:
        line = github_line(as_record(err, kind)) + "\n"
        if self.sink.to_file():
            self.lines.append(line)
            return
        out = self.sink.stream()
        out.write(line)
        out.flush()

    def listed_path(self, path: str) -> str:
        return _escape(path, False)  # (a line of its own must not read as a command)


class JsonEmitter(Emitter):
    """One JSON array of the diagnostic records, written when the command ends."""

    def __init__(self, sink: Sink):
        super().__init__(sink)
        self.records: list[dict] = []

    def add(self, err: JaxprError, kind: str, text) -> None:
        self.records.append(as_record(err, kind))

    def document(self) -> str:
        import json  # here: ~1.5 ms of the start-up of every command, for two formats

        return json.dumps(self.records, indent=2) + "\n"


class SarifEmitter(JsonEmitter):
    """One SARIF 2.1.0 log of the diagnostic records, written when the command ends."""

    def document(self) -> str:
        import json

        return json.dumps(sarif_log(self.records), indent=2) + "\n"


#: --output-format -> its emitter
EMITTERS = {
    "text": TextEmitter,
    "json": JsonEmitter,
    "github": GithubEmitter,
    "sarif": SarifEmitter,
}


class Sink:
    """Where one invocation's diagnostics go: its format's emitter and where the document
    is written.  The command line makes one per invocation (`begin`); a library call
    reports through the default one (text on standard error)."""

    def __init__(self, fmt: str = "text"):
        #: --output-file: where the diagnostics go instead (None, "-": a standard stream)
        self.output_file: str | None = None
        #: whether the running command leaves standard output to the document (it writes
        #: its result to a file, or has none: `check`)
        self.to_stdout = False
        #: whether text diagnostics end with their code (`check`'s, as a linter's; the
        #: machine formats always carry it)
        self.show_codes = False
        #: a child process runs the command and writes the document (`run --coordinator`):
        #: this one writes none unless it reports a diagnostic itself
        self.delegated = False
        #: (kind, file) of each diagnostic reported (`check`'s summary line)
        self.reported: list[tuple[str, str | None]] = []
        self.set_format(fmt)

    def set_format(self, fmt: str) -> None:
        self.format = fmt
        self.emitter: Emitter = EMITTERS[fmt](self)

    def command_starts(self, name: str, params: dict) -> None:
        """What the command run decides: whether it leaves standard output to the
        document (`stdout_free`), and whether its text diagnostics show their codes."""
        self.to_stdout = stdout_free(name, params)
        self.show_codes = name == "check"

    def stream(self):
        """Where a machine document goes without --output-file."""
        return sys.stdout if self.to_stdout else sys.stderr

    def to_file(self) -> bool:
        """Whether the diagnostics are collected for --output-file."""
        return self.output_file not in (None, "-")

    def report(self, err: JaxprError, kind: str, text) -> None:
        """One diagnostic (`text`: `io.TextForm`, see `Emitter.add`)."""
        self.reported.append((kind, err.loc.file if err.loc is not None else None))
        if self.emitter.machine:
            text.locate(err)
        self.emitter.add(err, kind, text)

    def finish(self, stream_=None, write_file=None) -> None:
        """Write what is left of the document (json, sarif; github and text lines for
        --output-file, through `write_file(text, path)`: `io.write_output`)."""
        text = self.emitter.document()
        if self.delegated and not self.reported:
            return
        if self.to_file():
            write_file(text, self.output_file)
            return
        out = stream_ or self.stream()
        if text:
            out.write(text)
        out.flush()


def stdout_free(name: str, params: dict) -> bool:
    """Whether a command leaves standard output to the machine diagnostics: `check`, whose
    result is its diagnostics, or a command told to write its result to a file (`-o OUT`);
    a command whose result goes to standard output (a program, a table, a diff) keeps the
    diagnostics on standard error, as `ruff check --fix -` does."""
    if name == "check":
        return True
    out = params.get("out", params.get("output"))
    return isinstance(out, str) and out != "-"


#: the sink of the running command-line invocation (`begin`...`end`); a library call never
#: installs one and reports as text on standard error.
#: (why a value cannot carry it: diagnostics are reported from deep inside the reader, the
#: checker, the rules and the passes (warnings), which take no invocation value)
_current = Sink()


def current() -> Sink:
    return _current


def begin(fmt: str = "text") -> Sink:
    """Start an invocation whose diagnostics take format `fmt`; its sink."""
    global _current  # (see `_current`)
    _current = Sink(fmt)
    return _current


def delegate() -> None:
    """The command runs again in a child process (`run --coordinator`), whose document is
    the invocation's."""
    _current.delegated = True


def end(stream_=None, write_file=None) -> None:
    """Write the running invocation's document and go back to the default sink."""
    global _current  # (see `_current`)
    sink, _current = _current, Sink()
    sink.finish(stream_, write_file)


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
    """A file name on a line of its own, as the running invocation's format writes it."""
    return _current.emitter.listed_path(path)


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
