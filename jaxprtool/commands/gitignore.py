"""`.gitignore` patterns, matched in time linear in the path (gitignore(5), git's wildmatch).

A `.gitignore` comes with the checkout, so its author may be hostile: a glob compiled the plain
way (`*a*a*...*b` as `[^/]*a[^/]*a...[^/]*b`) backtracks over every way of placing its stars,
and one 85-byte line took minutes per file name.  Here every star but the last of a path
component, and every `**` but the last, takes the leftmost place where what follows it up to
the next star fits, inside an atomic group (`(?>...)`, Python 3.11): leftmost is always right
for such a piece, since the next star can absorb whatever a later place would have skipped.
Each pattern is compiled once, when its file is read.
"""

from __future__ import annotations

import re

#: a path component: any characters but `/`
_ANY = "[^/]*"
#: whole path components, zero or more
_DIRS = "(?:[^/]+/)*"


class Spec:
    """The patterns of one `.gitignore`: `check(rel, is_dir)` is True (ignored), False
    (re-included by a `!` pattern) or None (no pattern matches), from the last pattern that
    matches the path `rel` (relative to the file's folder, `/`-separated)."""

    def __init__(self, lines: list[str]):
        self.patterns = [p for p in map(_pattern, lines) if p is not None]

    def check(self, rel: str, is_dir: bool) -> bool | None:
        subject = rel + "/" if is_dir else rel
        for regex, include in reversed(self.patterns):
            if regex.match(subject):
                return include
        return None


def _pattern(line: str) -> tuple[re.Pattern, bool] | None:
    """(regex, whether it ignores) of one line, or None (blank, comment, malformed)."""
    while line.endswith(" ") and not line.endswith("\\ "):
        line = line[:-1]
    if not line or line.startswith("#"):
        return None
    include = not line.startswith("!")
    line = line if include else line[1:]
    dir_only = line.endswith("/")
    line = line.rstrip("/")
    anchored = "/" in line
    parts = line.lstrip("/").split("/")
    if parts == [""]:
        return None
    # the pattern matches the path itself or a folder above it; a folder pattern, a folder
    tail = "/.*" if dir_only else "(?:/.*)?"
    lead = "" if anchored else "(?:.*/)?"
    try:
        return re.compile(lead + _path(parts) + tail + r"\Z", re.S), include
    except re.error:  # a character class git would not read either: the line is ignored
        return None


def _path(parts: list[str]) -> str:
    """The regex of a pattern's components, `**` ones standing for any folders."""
    if parts == ["**"]:
        return ".+"
    trail = parts[-1] == "**"
    blocks: list[list[str]] = [[]]
    for p in parts[:-1] if trail else parts:
        if p != "**":
            blocks[-1].append(_component(p))
        elif blocks[-1] or len(blocks) == 1:  # (`**/**` is one `**`)
            blocks.append([])
    if trail and len(blocks) > 1 and not blocks[-1]:
        blocks.pop()
    out = []
    for i, block in enumerate(blocks):
        body = "/".join(block)
        last = i == len(blocks) - 1 and not trail
        if i == 0:
            out.append(body)
        elif last:
            out.append(_DIRS + body)
        else:
            out.append(f"(?>{_DIRS}?{body})")
    return "/".join(b for b in out if b) + ("/.*" if trail else "")


def _component(glob: str) -> str:
    """The regex of one path component's glob: stars but the last take their leftmost
    place (atomic, lazy)."""
    pieces = _pieces(glob)
    if len(pieces) == 1:
        return pieces[0]
    middle = "".join(f"(?>{_ANY}?{p})" for p in pieces[1:-1])
    return pieces[0] + middle + _ANY + pieces[-1]


def _pieces(glob: str) -> list[str]:
    """The regexes of the glob's pieces between its stars (`*`, `**`, ... alike)."""
    pieces, cur, i = [], [], 0
    while i < len(glob):
        c = glob[i]
        if c == "\\" and i + 1 < len(glob):
            cur.append(re.escape(glob[i + 1]))
            i += 2
            continue
        if c == "*":
            pieces.append("".join(cur))
            cur = []
            while i < len(glob) and glob[i] == "*":
                i += 1
            continue
        if c == "[":
            end, cls = _char_class(glob, i)
            if cls is not None:
                cur.append(cls)
                i = end
                continue
        cur.append("[^/]" if c == "?" else re.escape(c))
        i += 1
    pieces.append("".join(cur))
    return pieces


def _char_class(glob: str, start: int) -> tuple[int, str | None]:
    """(end, regex) of the bracket expression at `start`, or (start, None) if unclosed."""
    i = start + 1
    negate = i < len(glob) and glob[i] in "!^"
    i += negate
    body = []
    first = True
    while i < len(glob) and (glob[i] != "]" or first):
        c = glob[i]
        if c == "\\" and i + 1 < len(glob):
            i += 1
            c = glob[i]
        body.append(c if c == "-" else re.escape(c))
        first = False
        i += 1
    if i >= len(glob):
        return start, None
    return i + 1, "[" + ("^/" if negate else "") + "".join(body) + "]"
