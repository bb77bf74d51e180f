"""Ambient state (issue 47): every context variable and every `global` statement in the
package says why a value passed down cannot carry it, so that new ambient state cannot slip
in silently.

The convention: the line that makes a `contextvars.ContextVar(...)`, says `global NAME`,
or sets another module's setting (`module.NAME = ...`, an upper-case NAME: what the command
line sets and the library reads), or the comment lines right above it, hold `(why a value
cannot carry it: ...)`; a `global` line may instead say `(see `NAME`)`, and then NAME's
module-level definition (or the comment lines above it) holds the reason.
"""

from __future__ import annotations

import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "jaxprtool"
MARK = "why a value cannot carry it"
AMBIENT = re.compile(r"ContextVar\(|^\s*global\s+(\w+)|^\s*[a-z_]+\.[A-Z][A-Z_]+\s*=[^=]")


def _comment_block(lines: list[str], i: int) -> str:
    """Line `i` and the comment lines right above it."""
    j = i
    while j > 0 and lines[j - 1].lstrip().startswith("#"):
        j -= 1
    return "\n".join(lines[j : i + 1])


def _definition_block(lines: list[str], name: str) -> str | None:
    for i, line in enumerate(lines):
        if re.match(rf"{re.escape(name)}\s*(:|=)", line):
            return _comment_block(lines, i)
    return None


def _unexplained(path: Path, root: Path = PACKAGE.parent) -> list[str]:
    lines = path.read_text().splitlines()
    bad = []
    for i, line in enumerate(lines):
        if line.lstrip().startswith("#") or not AMBIENT.search(line):
            continue
        if "ContextVar(" in line and not re.search(r"=\s*contextvars\.ContextVar\(", line):
            continue  # (an annotation or a mention, not a definition)
        block = _comment_block(lines, i)
        if MARK in block:
            continue
        see = re.search(r"\(see `(\w+)`\)", line)
        if see is not None and MARK in (_definition_block(lines, see.group(1)) or ""):
            continue
        bad.append(f"{path.relative_to(root)}:{i + 1}: {line.strip()}")
    return bad


def _ambient_sites() -> list[str]:
    return [
        f"{p}:{i + 1}"
        for p in sorted(PACKAGE.rglob("*.py"))
        for i, line in enumerate(p.read_text().splitlines())
        if not line.lstrip().startswith("#") and AMBIENT.search(line)
    ]


def test_every_context_variable_and_global_says_why():
    bad = [b for p in sorted(PACKAGE.rglob("*.py")) for b in _unexplained(p)]
    assert not bad, "ambient state without its reason:\n" + "\n".join(bad)


def test_the_check_sees_the_package():
    # the scan finds the builder's context variable and the entry point's global: a
    # broken pattern or path would otherwise pass the test above with nothing to check
    sites = _ambient_sites()
    assert any("ad/builder.py" in s for s in sites)
    assert any("cli.py" in s for s in sites)
    assert any("commands/explain_cmd.py" in s for s in sites)  # (a setting: io.COLOR_MODE)


def test_an_unexplained_one_is_caught(tmp_path):
    f = tmp_path / "m.py"
    f.write_text(
        "import contextvars\n"
        "# a comment without the reason\n"
        'X = contextvars.ContextVar("x", default=None)\n'
        "Y = 0\n"
        "def f():\n"
        "    global Y  # (see `Y`)\n"
        "    Y = 1\n"
        "# (why a value cannot carry it: a test)\n"
        'Z = contextvars.ContextVar("z", default=None)\n'
        "def g():\n"
        "    io.COLOR_MODE = 'never'\n"
    )
    bad = _unexplained(f, tmp_path)
    assert [b.split(": ", 1)[1] for b in bad] == [
        'X = contextvars.ContextVar("x", default=None)',
        "global Y  # (see `Y`)",
        "io.COLOR_MODE = 'never'",
    ]
