"""A file's name in CI logs (issue 45, item 5): a name holding a line break and
`::error file=...` must not start a line of output in any command, and ESC or BEL in a name
must never reach the output raw, in the text format or under `--output-format github`.

Each command runs in-process on files in tmp_path whose names carry the attack; every line
of its output (standard output and error together) is checked, and so is the escaped name
the line shows instead (`\\n`, `\\x1b`, `\\x07`, as Python writes them; `%0A` for a line
break in a GitHub workflow command or a listed name under `github`).
"""

from __future__ import annotations

import os
import re

import pytest
from click.testing import CliRunner

from jaxprtool.cli import main

#: a line break, then a workflow command, then an OSC sequence that retitles a terminal
NAME = "x\n::error file=x::pwned\x1b]0;t\x07"
#: NAME as a line of text output shows it
SHOWN = "x\\n::error file=x::pwned\\x1b]0;t\\x07"

#: not canonical (two spaces before `let`) and with a dead equation: fmt and dce change it
PROGRAM = "{ lambda ; a:f32[3].  let b:f32[3] = sin a; c:f32[3] = cos a in (b,) }\n"
OTHER = "{ lambda ; a:f32[3]. let b:f32[3] = cos a in (b,) }\n"


def tool(*argv):
    return CliRunner().invoke(main, ["--no-color", *map(str, argv)])


def injected_lines(output: str) -> list[str]:
    """The lines GitHub's runner would read as a workflow command (`::` at the start of a
    line, after spaces), but the tool's own annotations."""
    ours = re.compile(r"::(error|warning) (file=[^\n]*,)?title=jaxprtool::")
    lines = (s.lstrip() for s in output.splitlines())
    return [s for s in lines if s.startswith("::") and not ours.match(s)]


def assert_safe(r, shown: str = SHOWN):
    assert "Traceback" not in r.output, r.output
    assert injected_lines(r.output) == [], r.output
    assert "\x1b" not in r.output and "\x07" not in r.output, repr(r.output)
    assert shown in r.output, r.output  # the name is still there, escaped


@pytest.fixture
def files(tmp_path):
    a, b = tmp_path / f"{NAME}.jaxpr", tmp_path / f"{NAME}b.jaxpr"
    a.write_text(PROGRAM)
    b.write_text(OTHER)
    return a, b


COMMANDS = {
    "fmt --diff": (["fmt", "--diff", "A"], 1),
    "stats": (["stats", "A"], 0),
    "diff": (["diff", "A", "B"], 1),
    "memory": (["memory", "--no-xla", "A"], 0),
    "explain": (["explain", "B"], 0),
    "opt --diff=text": (["opt", "-p", "dce", "--diff=text", "A"], 0),
    "opt --diff=text, no change": (["opt", "-p", "dce", "--diff=text", "B"], 0),
    "opt --diff": (["opt", "-p", "dce", "--diff", "A"], 0),
    "canonicalize --diff, split": (["canonicalize", "--diff", "--split-input-file", "A"], 0),
    "check-grad": (["check-grad", "B"], 0),
}


@pytest.mark.parametrize("fmt", ["text", "github"])
@pytest.mark.parametrize("cmd", list(COMMANDS))
def test_a_name_never_starts_a_line_nor_reaches_the_output_raw(files, cmd, fmt):
    argv, code = COMMANDS[cmd]
    paths = {"A": files[0], "B": files[1]}
    r = tool("--output-format", fmt, *(paths.get(x, x) for x in argv))
    assert r.exit_code == code, r.output
    assert_safe(r)


def test_a_location_in_a_name_is_escaped(files):
    """`memory` and `explain` name equations by their location, FILE:LINE:COL."""
    r = tool("memory", "--no-xla", files[0])
    assert f"'sin' at {files[0].parent}/{SHOWN}.jaxpr:1:27" in r.stdout, r.output


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes on this system")
@pytest.mark.parametrize("fmt", ["text", "github"])
def test_a_warning_naming_a_skipped_file_is_escaped(tmp_path, fmt):
    """A folder walk's `skipped NAME: not a regular file` warning quotes the name."""
    os.mkfifo(tmp_path / f"{NAME}.jaxpr")
    (tmp_path / "ok.jaxpr").write_text(OTHER)
    r = tool("--output-format", fmt, "check", tmp_path)
    assert r.exit_code == 0, r.output
    # (under github the line break is the workflow command's own escape, %0A)
    assert_safe(r, SHOWN.replace("\\n", "%0A") if fmt == "github" else SHOWN)


def test_github_escapes_control_characters_in_a_file_property(tmp_path):
    (tmp_path / f"{NAME}.jaxpr").write_text("{ lambda ; a:f32[3]. let b:f32[3] = sin c in (b,) }\n")
    r = tool("--output-format", "github", "check", tmp_path)
    assert r.exit_code == 1, r.output
    (line,) = r.stdout.splitlines()
    where = f"{tmp_path}/x%0A%3A%3Aerror file=x%3A%3Apwned\\x1b]0;t\\x07.jaxpr"
    assert line.startswith(f"::error file={where},line=1,col=41,title=jaxprtool::"), line
    assert_safe(r, "pwned\\x1b]0;t\\x07.jaxpr")


def test_github_fmt_check_lists_a_name_without_esc_or_bel(files):
    r = tool("--output-format", "github", "fmt", "--check", files[0])
    assert r.exit_code == 1, r.output
    assert f"Would reformat: {files[0].parent}/x%0A::error file=x::pwned\\x1b]0;t\\x07" in r.stdout
    assert_safe(r, "x%0A::error")
