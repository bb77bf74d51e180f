"""`.gitignore` patterns, read and matched as Git reads and matches them (gitignore(5); Git's
`dir.c` and `wildmatch.c`), on the bytes of the file and of the path.

Git's rules, which a glob library does not follow:

* a pattern matches the path itself, never "a folder above it": a path under an ignored
  folder is ignored because Git never enters that folder (`walk._Ignores`), so `build/*`
  with `!build/keep.jaxpr` keeps `build/keep.jaxpr`, and `*.jaxpr` with `!foo/` does not
  bring back `foo/a.jaxpr`;
* a pattern with no `/` but a trailing one is matched against the base name, any other
  against the path relative to the `.gitignore`'s folder; a trailing `/` matches folders only;
* `*`, `?` and a bracket expression never match `/`; `**` is "any folders" only as a whole
  component (`**/x`, `x/**/y`, `x/**`), elsewhere a `*`; a bracket expression reads ranges,
  `!`/`^` negation, backslash escapes and the POSIX classes (`[[:upper:]]`, ASCII only); a
  pattern with an unclosed bracket, an unknown class or a trailing backslash matches nothing;
* each line is cut at a NUL byte, a CR before its line break is dropped, and trailing spaces
  are trimmed unless escaped.

A `.gitignore` comes with the checkout, so its author may be hostile.  Its read is bounded
(`MAX_BYTES`, `MAX_PATTERNS`: a located error past them).  Matching is linear in the path:
a glob compiled the plain way (`*a*a*...*b` as `[^/]*a[^/]*a...[^/]*b`) backtracks over every
way of placing its stars, so every star of a component but the last, and every `**` but the
last, takes the leftmost place where what follows it fits, inside an atomic group (`(?>...)`):
leftmost is always right for such a piece, since the next star can absorb whatever a later
place would have skipped.  Patterns are indexed by their literal part (a name, a suffix, a
prefix), so a path is tried only against the few patterns that can match it, and a pattern's
regex is compiled the first time it is tried: 300,000 patterns cost what Git's do.
"""

from __future__ import annotations

import os
import re
import stat

from ..core import Loc, OverLimit
from ..io import warn
from ..lazy import LazyPattern

#: the largest `.gitignore` read (Git reads any size; a 3 GB one is an attack)
MAX_BYTES = 32 * 2**20
#: the most patterns of one `.gitignore`
MAX_PATTERNS = 1_000_000

#: wildmatch's special characters: a pattern without them is a literal
_SPECIAL = LazyPattern(rb"[*?\[\\]")
#: a line that may hold a pattern: not empty, not a comment (the others are skipped in C: a
#: file of 32 MiB of line breaks costs nothing)
_PATTERN_LINE = LazyPattern(rb"^[^#\n][^\n]*", re.M)
#: a run of literal bytes in a path component (`**/` may stand for no folder at all)
_RUN = LazyPattern(rb"[^*?/]+")
_CLASS_OR_ESCAPE = LazyPattern(rb"[\[\\]")
_ANY = rb"[^/]*"
#: whole path components, zero or more (a `**/`)
_DIRS = rb"(?:[^/]*/)*"
#: the POSIX classes of a bracket expression (Git's: ASCII only)
_CLASSES = {
    b"alnum": lambda c: chr(c).isalnum(),
    b"alpha": lambda c: chr(c).isalpha(),
    b"blank": lambda c: c in b" \t",
    b"cntrl": lambda c: c < 0x20 or c == 0x7F,
    b"digit": lambda c: chr(c).isdigit(),
    b"graph": lambda c: 0x21 <= c <= 0x7E,
    b"lower": lambda c: chr(c).islower(),
    b"print": lambda c: 0x20 <= c <= 0x7E,
    b"punct": lambda c: 0x21 <= c <= 0x7E and not chr(c).isalnum(),
    b"space": lambda c: c in b" \t\n\r",
    b"upper": lambda c: chr(c).isupper(),
    b"xdigit": lambda c: chr(c) in "0123456789abcdefABCDEF",
}


#: the regex of a pattern that matches nothing
_NOTHING = LazyPattern(rb"(?!)")


class Never(Exception):
    """The pattern can match nothing (Git's wildmatch aborts on it)."""


class Pattern:
    """One line's pattern: its position in the file, whether it ignores (else re-includes),
    whether it matches folders only, whether it is matched against the base name, and its
    glob (without `!`, the trailing `/` and, for a path pattern, the leading `/`)."""

    __slots__ = ("index", "ignores", "dir_only", "basename", "glob", "_regex")

    def __init__(self, index, ignores, dir_only, basename, glob):
        self.index, self.ignores = index, ignores
        self.dir_only, self.basename, self.glob = dir_only, basename, glob
        self._regex = None

    def matches(self, subject: bytes) -> bool:
        """Whether the glob matches `subject` (compiled the first time it is asked)."""
        if self._regex is None:
            try:
                glob = _translate(self.glob) if self.basename else _path_glob(self.glob)
                self._regex = re.compile(glob + rb"\Z", re.S)
            except Never:
                self._regex = _NOTHING
        return self._regex.match(subject) is not None


def parse_line(raw: bytes, index: int) -> Pattern | None:
    """The pattern of one line (Git's `add_patterns_from_buffer`, `parse_path_pattern`), or
    None: a blank line, a comment."""
    if not raw or raw.startswith(b"#"):
        return None
    if raw.endswith(b"\r"):
        raw = raw[:-1]
    text = _trim_spaces(raw.split(b"\0", 1)[0])
    ignores = not text.startswith(b"!")
    text = text if ignores else text[1:]
    dir_only = text.endswith(b"/")
    if dir_only:
        text = text[:-1]
    basename = b"/" not in text
    if not basename and text.startswith(b"/"):
        text = text[1:]
    if not text:
        return None
    return Pattern(index, ignores, dir_only, basename, text)


def _trim_spaces(text: bytes) -> bytes:
    """`text` less its trailing spaces, but not an escaped one (Git's `trim_trailing_spaces`)."""
    if not text.endswith(b" "):
        return text
    last_space, i = None, 0
    while i < len(text):
        c = text[i]
        if c == 0x20:
            last_space = i if last_space is None else last_space
        elif c == 0x5C:
            if i + 1 == len(text):
                return text
            i += 1
            last_space = None
        else:
            last_space = None
        i += 1
    return text if last_space is None else text[:last_space]


class _Table:
    """Patterns indexed by a literal the path or name must hold, where `kind` says
    (`exact`: it is the whole subject, `prefix`, `suffix`, `inside`: somewhere in it)."""

    def __init__(self, kind: str):
        self.kind = kind
        self.by_key: dict[bytes, list[Pattern]] = {}
        self.lengths: set[int] = set()

    def add(self, key: bytes, p: Pattern) -> None:
        self.by_key.setdefault(key, []).append(p)
        self.lengths.add(len(key))

    def keys(self, subject: bytes):
        """The keys under which a pattern for `subject` can be."""
        n = len(subject)
        if self.kind == "exact":
            return (subject,)
        if self.kind == "prefix":
            return (subject[:k] for k in self.lengths if k <= n)
        if self.kind == "suffix":
            return (subject[n - k :] for k in self.lengths if k <= n)
        return (subject[i : i + k] for k in self.lengths for i in range(n - k + 1))


class Spec:
    """The patterns of one `.gitignore`: `check(rel, is_dir)` is True (ignored), False
    (re-included by a `!` pattern) or None (no pattern matches), from the last pattern that
    matches the path `rel` (relative to the file's folder, `/`-separated bytes).

    Each pattern is indexed by a literal (`_place`), so a path is tried against the patterns
    whose literal it holds: a pattern with no literal at all is tried against every path."""

    def __init__(self, patterns: list[Pattern]):
        #: (base-name tables, path tables)
        self.tables = {
            b: {k: _Table(k) for k in ("exact", "prefix", "suffix", "inside")}
            for b in (True, False)
        }
        for p in patterns:
            kind, key = _place(p.glob)
            self.tables[p.basename][kind].add(key, p)

    @classmethod
    def from_lines(cls, lines: list[str | bytes]) -> Spec:
        """The spec of a `.gitignore`'s lines (tests)."""
        raw = [x if isinstance(x, bytes) else os.fsencode(x) for x in lines]
        return cls([p for i, x in enumerate(raw) if (p := parse_line(x, i))])

    def last_match(self, rel: bytes, is_dir: bool) -> Pattern | None:
        """The last pattern that matches `rel`, or None."""
        name = rel.rsplit(b"/", 1)[-1]
        best: Pattern | None = None
        for basename, tables in self.tables.items():
            subject = name if basename else rel
            for table in tables.values():
                if not table.by_key:
                    continue
                # (a star of a base name's `*.jaxpr` takes anything; of a path's, no `/`)
                glob = table.kind != "exact" and not (basename and table.kind == "suffix")
                for key in table.keys(subject):
                    for p in reversed(table.by_key.get(key, ())):  # the last pattern first
                        if best is not None and p.index < best.index:
                            break
                        if (is_dir or not p.dir_only) and (not glob or p.matches(subject)):
                            best = p
                            break
        return best

    def check(self, rel: bytes | str, is_dir: bool) -> bool | None:
        if isinstance(rel, str):
            rel = os.fsencode(rel)
        p = self.last_match(rel, is_dir)
        return None if p is None else p.ignores


def _place(glob: bytes) -> tuple[str, bytes]:
    """The table of a glob and its key there: a literal is its own key; `*.jaxpr`'s the
    suffix it needs and nothing else; else the literal it starts with, or the longest
    literal run it holds (empty: none)."""
    m = _SPECIAL.search(glob)
    if m is None:
        return "exact", glob
    if m.start():
        return "prefix", glob[: m.start()]
    if glob[0] == 0x2A and _SPECIAL.search(glob, 1) is None:
        return "suffix", glob[1:]
    cut = _CLASS_OR_ESCAPE.search(glob)  # (past it a byte may not stand for itself)
    runs = _RUN.findall(glob, 0, cut.start() if cut else len(glob))
    return "inside", max(runs, key=len, default=b"")


def read_spec(path: str) -> Spec | None:
    """The spec of the `.gitignore` at `path`, or None when there is none (or it is not a
    regular file: Git does not read a FIFO or a link in the work tree either).  Past
    MAX_BYTES or MAX_PATTERNS, a located error (E003)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as e:
        warn(f"skipped {path}: {e.strerror}", code="W003")  # (a link: ELOOP, as Git says)
        return None
    with open(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            warn(f"skipped {path}: not a regular file", code="W003")
            return None
        data = f.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise _limit(f"a .gitignore larger than {MAX_BYTES // 2**20} MiB, the most read", path, 1)
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    patterns, lines = [], 0
    for m in _PATTERN_LINE.finditer(data):
        if lines == MAX_PATTERNS:
            line = data.count(b"\n", 0, m.start()) + 1
            raise _limit(f"more than {MAX_PATTERNS:,} patterns in one .gitignore", path, line)
        lines += 1
        p = parse_line(m.group(), len(patterns))
        if p is not None:
            patterns.append(p)
    return Spec(patterns)


def _limit(message: str, path: str, line: int) -> OverLimit:
    return OverLimit(message, Loc(path, line, 1))


# ---------------------------------------------------------------- glob -> regex


def _path_glob(glob: bytes) -> bytes:
    """The regex of a path pattern.  Git compares the literal part a path pattern starts
    with first and matches the rest alone (`match_pathname`), so a `**` right after that
    part is at the start of what it matches: `a**/x` is `a`, any folders, `x`."""
    m = _SPECIAL.search(glob)
    if m is None or glob[m.start() : m.start() + 2] != b"**" or m.start() == 0:
        return _translate(glob)
    end = m.start() + 2
    while glob[end : end + 1] == b"*":
        end += 1
    rest = glob[end:]
    if rest and not rest.startswith((b"/", b"\\/")):
        return _translate(glob)
    return re.escape(glob[: m.start()]) + _translate(b"**" + rest)


def _translate(glob: bytes) -> bytes:
    """The regex of a glob matched with WM_PATHNAME (raises Never): its components, `**`
    ones standing for any folders."""
    comps: list[bytes | None] = []  # None: a `**` component
    for part in _split(glob):
        if len(part) > 1 and part.strip(b"*") == b"":
            if not comps or comps[-1] is not None:  # (`**/**` is one `**`)
                comps.append(None)
        else:
            comps.append(_component(part))
    blocks: list[list[bytes]] = [[]]
    for c in comps:
        if c is None:
            blocks.append([])
        else:
            blocks[-1].append(c)
    out = [b"/".join(blocks[0])] if blocks[0] else []
    for i, block in enumerate(blocks[1:], 1):
        if i == 1 and blocks[0]:
            out.append(b"/")  # the slash before the first `**` (a later block ends at one)
        if not block:  # a trailing `**`: anything, folders included
            out.append(b".*")
        elif i < len(blocks) - 1:  # another `**` follows: its leftmost place
            out.append(b"(?>" + _DIRS + b"?" + b"/".join(block) + b"/)")
        else:
            out.append(_DIRS + b"/".join(block))
    return b"".join(out)


def _split(glob: bytes) -> list[bytes]:
    """The glob's components, split at its slashes (an escaped `\\/` is one too; one inside
    a bracket expression is not: the expression is one byte, never `/`)."""
    parts, cur, i = [], bytearray(), 0
    while i < len(glob):
        c = glob[i : i + 1]
        if c == b"\\" and glob[i + 1 : i + 2] == b"/":
            c, i = b"/", i + 1
        if c == b"/":
            parts.append(bytes(cur))
            cur = bytearray()
        elif c == b"\\":
            cur += glob[i : i + 2]
            i += 1
        elif c == b"[":
            end = _bracket(glob, i)[0]
            cur += glob[i:end]
            i = end - 1
        else:
            cur += c
        i += 1
    parts.append(bytes(cur))
    return parts


def _component(glob: bytes) -> bytes:
    """The regex of one path component's glob: stars but the last take their leftmost
    place (atomic, lazy)."""
    pieces = _pieces(glob)
    if len(pieces) == 1:
        return pieces[0]
    middle = b"".join(b"(?>" + _ANY + b"?" + p + b")" for p in pieces[1:-1])
    return pieces[0] + middle + _ANY + pieces[-1]


def _pieces(glob: bytes) -> list[bytes]:
    """The regexes of the glob's pieces between its stars (`*`, `**`, ... alike)."""
    pieces, cur, i = [], [], 0
    while i < len(glob):
        c = glob[i : i + 1]
        if c == b"\\":
            if i + 1 == len(glob):
                raise Never  # a trailing backslash matches nothing
            cur.append(re.escape(glob[i + 1 : i + 2]))
            i += 2
        elif c == b"*":
            pieces.append(b"".join(cur))
            cur = []
            while glob[i : i + 1] == b"*":
                i += 1
        elif c == b"[":
            i, cls = _bracket(glob, i)
            cur.append(cls)
        else:
            cur.append(b"[^/]" if c == b"?" else re.escape(c))
            i += 1
    pieces.append(b"".join(cur))
    return pieces


def _bracket(glob: bytes, start: int) -> tuple[int, bytes]:
    """(end, regex) of the bracket expression at `start`, read as wildmatch reads it: the
    first member may be `]`, `a-z` a range, `\\x` the byte x, `[:name:]` a class.  Raises
    Never when it is unclosed or names no class."""
    i = start + 1
    negate = glob[i : i + 1] in (b"!", b"^")
    i += negate
    members: set[int] = set()
    prev = None
    first = True
    while first or glob[i : i + 1] != b"]":
        first = False
        if i >= len(glob):
            raise Never
        c = glob[i]
        if c == 0x5C:  # backslash
            i += 1
            if i >= len(glob):
                raise Never
            c = glob[i]
            members.add(c)
            prev = c
        elif c == 0x2D and prev is not None and i + 1 < len(glob) and glob[i + 1] != 0x5D:
            i += 1
            hi = glob[i]
            if hi == 0x5C:
                i += 1
                if i >= len(glob):
                    raise Never
                hi = glob[i]
            members.update(range(prev, hi + 1))
            prev = None
        elif c == 0x5B and glob[i + 1 : i + 2] == b":":
            end = glob.find(b"]", i + 2)
            if end < 0:
                raise Never
            if end - (i + 2) < 1 or glob[end - 1] != 0x3A:  # no `:]`: a plain `[`
                members.add(c)
                prev = c
            else:
                name = glob[i + 2 : end - 1]
                if name not in _CLASSES:
                    raise Never
                members.update(filter(_CLASSES[name], range(128)))
                prev = None
                i = end
        else:
            members.add(c)
            prev = c
        i += 1
    chosen = (set(range(256)) - members) if negate else members
    chosen.discard(0x2F)  # never `/`
    return i + 1, _byte_class(chosen)


def _byte_class(chosen: set[int]) -> bytes:
    """The regex of a set of bytes, as ranges (`(?!)`: none)."""
    if not chosen:
        return b"(?!)"
    out, bytes_ = [], sorted(chosen)
    lo = prev = bytes_[0]
    for b in bytes_[1:] + [None]:
        if b is not None and b == prev + 1:
            prev = b
            continue
        out.append(b"\\x%02x" % lo + (b"-\\x%02x" % prev if prev > lo else b""))
        if b is not None:
            lo = prev = b
    return b"[" + b"".join(out) + b"]"
