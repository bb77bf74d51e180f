"""Parameter values (H3, H4, H5): after `key=`, where the value ends and what it is.

Both paths read a value with `ParamValues.read_value`: the post-lexer (`layout._Layout`)
hands the grammar `key=value` as one PARAM token, the fast path (`fast.FastPath`) puts the
value in the equation's parameters directly.  A value that is a jaxpr, a tuple of jaxprs or
`let NAME = {...} in {...}` is left to the grammar (`read_value` gives None); a value with
jaxprs inside (`_LinearSolveTuple(matvec={ lambda ...}, ...)`, H5) raises `Nested` at the
first jaxpr, and the post-lexer reads it piece by piece (`rescan`).  values.py interprets
the balanced text.
"""

from __future__ import annotations

from ... import params
from ...lazy import LazyPattern, is_dtype
from .. import grammar as G
from ..values import ValueError_, parse_value
from .diagnostics import Source
from .scopes import SharedRef

# parameter keys whose value is always an unquoted string (may contain anything, H3)
_STRING_KEYS = frozenset({"name", "fmt"})
#: keys whose value is one symbolic dimension, printed bare (`dim_as_value[dim=2*b + 1]`,
#: `conv_general_dilated[feature_group_count=3*b]`, JAX's vmap of a conv over a symbolic size)
_DIM_KEYS = frozenset({"dim", "feature_group_count", "batch_group_count"})
_DIM_EXPR = LazyPattern(r"(?:- )?[\w(][\w*+\-^(),/ ]*")
_DIM_OPERATOR = LazyPattern(r"[*+^/]|\w\(| - |^- ")
#: two operands side by side (`b c`): no expression
_ADJACENT = LazyPattern(r"[\w)]\s+[\w(]")

_CONSTS = {"True": True, "False": False, "None": None}


def _jaxpr_key(key: str) -> bool:
    """Parameter keys whose value is a jaxpr (a bare name there is a shared-jaxpr reference)."""
    return "jaxpr" in key or key in ("call", "branches")


class Nested(Exception):
    """Raised by the value scanner at a jaxpr nested inside a parameter value."""

    def __init__(self, pos: int):
        self.pos = pos


class ParamValues(Source):
    """The value reader of one parse: the names of its shared jaxprs (found by a pre-scan,
    so a value may name one defined later) and the values read so far (`value_memo`)."""

    def __init__(self, text: str, path: str):
        super().__init__(text, path)
        # (the search needs its ` = {`: most texts have none)
        self.shared_names = set(G.SHARED_DEF_NAME.findall(text)) if " = {" in text else set()
        self.value_memo: dict[tuple, list] = {}
        self.first_hook = self.scan_hook({})

    def list_is_broken(self, j: int) -> bool:
        """Whether the parameter list whose `[` ends at s[j] is broken over lines (its first
        key on the next line): then a top-level string value may hold spaces (H3)."""
        k = G.SP.match(self.s, j).end()
        return self.s[k : k + 1] in ("\n", "#")

    def at_delim(self, e: int) -> bool:
        """A value ends at `]`, or at blanks and comments before `]` or the next `key=`.  A
        `#` right after the value (`sharding=N#one`) is part of it, not a comment, on one
        line as over several (where a comment would end before the line break)."""
        s = self.s
        if s.startswith("]", e):
            return True
        if s.startswith("#", e):
            return False
        j = self.ws(e)
        if j == e:
            return False
        return s.startswith("]", j) or G.KEY.match(s, j) is not None

    def raw_end(self, i: int, broken: bool) -> int:
        """End of an unquoted top-level string value (H3): up to the next `key=` or `]`; on
        one line, the first such place where the value's own brackets are balanced (a jit
        named `0:u32[]`), else the first."""
        s = self.s
        if broken:
            m = G.RAW_END_BROKEN.search(s, i)
        else:
            line_end = s.find("\n", i)
            ends = G.RAW_END_FLAT.finditer(s, i, len(s) if line_end < 0 else line_end)
            m = first = next(ends, None)
            while m is not None and s.count("[", i, m.start()) != s.count("]", i, m.start()):
                m = next(ends, None)
            m = m or first or G.RAW_END_FLAT.search(s, i)
        if m is None:
            self.fail("unterminated parameter list: expected ']'", i)
        return m.start()

    def scan_hook(self, done: dict | None):
        """values.py's hook: the values already read (`done`, by position), and `Nested` at
        a jaxpr not yet read."""
        s = self.s

        def hook(i: int):
            r = done.get(i)
            if r is not None:
                return r
            if G.LAMBDA.match(s, i) or G.SHARED_DEF.match(s, i):
                raise Nested(i)
            return None

        return hook

    def read_value(self, i: int, key: str, broken: bool):
        """`_read_value`, remembered: a program repeats the same parameter values
        (`dimension_numbers=...`) many times.  A value is remembered with the text that
        decided it (the value and the delimiter after it, `]` or the next `key=`, on the same
        line: `_read_value` looks no further) and reused where that text recurs; each reuse
        gets fresh lists."""
        s = self.s
        head = (key, broken, G.VALUE_HEAD.match(s, i).group())
        for window, v, length in self.value_memo.get(head, ()):
            if s.startswith(window, i):
                return fresh(v), i + length
        r = self._read_value(i, key, broken)
        if r is not None and memoizable(r[0]):
            w = self.delimiter_end(r[1])
            known = self.value_memo.setdefault(head, [])
            if w is not None and len(known) < 8:
                known.append((s[i:w], r[0], r[1] - i))
        return r

    def delimiter_end(self, e: int) -> int | None:
        """The end of the `]` or `key=` that follows a value ending at s[e], when it is on the
        value's line; else None."""
        s = self.s
        if s.startswith("]", e):
            return e + 1
        j = G.SP.match(s, e).end()
        if j == e:
            return None
        if s.startswith("]", j):
            return j + 1
        m = G.KEY.match(s, j)
        return m.end() if m is not None else None

    def _read_value(self, i: int, key: str, broken: bool):
        """The value after `key=` at s[i]: (value, end), or None when the grammar reads it
        (a jaxpr, a tuple of jaxprs, `let ... in {...}`).  Raises Nested for a value with
        jaxprs inside."""
        s = self.s
        c = s[i : i + 1]
        if c == "{" and G.LAMBDA.match(s, i):
            return None
        if (
            c == "("
            and (m := G.JAXPR_TUPLE.match(s, i))
            and (m.group(1) or m.group(2) in self.shared_names)
        ):
            return None
        if c == "l" and G.SHARED_DEF.match(s, i):
            return None
        if key in _DIM_KEYS and (r := self.dim_expression(i)) is not None:
            return r
        if key in _STRING_KEYS:
            m = G.BARE_NAME.match(s, i)
            e = m.end() if m and self.at_delim(m.end()) else self.raw_end(i, broken)
            return (None if s[i:e] == "None" else s[i:e]), e
        m = G.SIMPLE_VALUE.match(s, i)
        if m is not None:
            # the common simple values: an int, True/False/None, a tuple of ints
            if m.group(1) is not None:
                return int(m.group(1)), m.end()
            if m.group(2) is not None:
                return _CONSTS[m.group(2)], m.end()
            if m.group(3) is not None:
                return (int(m.group(3)),), m.end()
            if m.group(4) is not None:
                return tuple(int(x) for x in m.group(4).split(", ")), m.end()
            return (), m.end()
        m = G.BARE_NAME.match(s, i)
        if m and m.group() in self.shared_names and _jaxpr_key(key) and self.at_delim(m.end()):
            return SharedRef(m.group(), i), m.end()
        if m and _jaxpr_key(key) and m.group() != "None" and self.at_delim(m.end()):
            self.fail(f"shared jaxpr '{m.group()}' is referenced but never defined", i)
        structured = c in "([{'\"" or c.isdigit() or c == "-"
        e = i
        try:
            v, e = parse_value(s, i, True, self.first_hook)
            ok = self.at_delim(e)
        except ValueError_ as err:
            if structured:
                self.fail(err.message, err.pos)
            ok = False
        except RecursionError:
            self.fail(f"the value of '{key}' is nested too deeply", i)
        if not ok and structured:
            self.not_at_delim(e, key)
        if (
            not ok
            and e > i
            and G.SP.match(s, e).end() < self.n
            and s[G.SP.match(s, e).end()] == "\n"
        ):
            # a whole value, then a line that is no `key=value` (`None` then a broken key)
            self.not_at_delim(e, key)
        if not ok:
            e = self.raw_end(i, broken)
            self.balanced_raw(i, e, key)
            return s[i:e], e
        raw = s[i:e]
        if params.format_value(v) != raw and not _broken_empty_tuple(v, raw):
            v = raw if isinstance(v, str) else params.Opaque(raw)
        return v, e

    def dim_expression(self, i: int):
        """A symbolic dimension expression at s[i] (`2*b`, `floordiv(b, 2) - 1`) as the
        `SymExpr` a tuple element of that text reads as, or None (a plain value)."""
        m = _DIM_EXPR.match(self.s, i)
        if m is None:
            return None
        text = m.group().rstrip()
        end = i + len(text)
        if not _DIM_OPERATOR.search(text) or _ADJACENT.search(text) or not self.at_delim(end):
            return None
        depth = 0
        for c in text:
            depth += {"(": 1, ")": -1}.get(c, 0)
            if depth < 0:
                return None
        return (params.SymExpr(text), end) if depth == 0 else None

    def balanced_raw(self, i: int, e: int, key: str) -> None:
        """An unquoted value kept as text (`jvp_jaxpr_fun=Wrapped function:...`) has
        balanced brackets; an unmatched one is a broken value (`jaxpr=f32 lambda ... }`)."""
        stack = []
        for k in range(i, e):
            c = self.s[k]
            if c in "([{":
                stack.append(k)
            elif c in ")]}":
                if not stack or "([{"[")]}".index(c)] != self.s[stack[-1]]:
                    self.fail(f"unmatched '{c}' in the value of '{key}'", k)
                stack.pop()
        if stack:
            self.fail(f"unclosed '{self.s[stack[-1]]}' in the value of '{key}'", stack[-1])

    def not_at_delim(self, e: int, key: str):
        k = self.ws(e)
        if k > e:
            self.expected(f"another parameter 'name=value' or ']' after the value of '{key}'", k)
        self.expected(f"a space, a newline or ']' after the value of '{key}'", e)

    def rescan(self, i: int, key: str, done: dict) -> int:
        """End of a value with nested jaxprs once all of them are read (else raises Nested)."""
        try:
            _, e = parse_value(self.s, i, True, self.scan_hook(done))
        except ValueError_ as err:
            self.fail(err.message, err.pos)
        except RecursionError:
            self.fail(f"the value of '{key}' is nested too deeply", i)
        if not self.at_delim(e):
            self.not_at_delim(e, key)
        return e

    def value_with_jaxprs(self, i: int, key: str, jaxpr_at: dict):
        """The value after `key=` at s[i] once the grammar has read the jaxprs in it (by
        position in `jaxpr_at`)."""
        try:
            v, _ = parse_value(self.s, i, True, jaxpr_at.get)
        except ValueError_ as err:
            self.fail(err.message, err.pos)
        except RecursionError:
            self.fail(f"the value of '{key}' is nested too deeply", i)
        return v


def _broken_empty_tuple(v, raw: str) -> bool:
    """`(` and `)` on lines of their own: JAX prints an empty tuple as a tuple of jaxprs
    (pp_jaxprs), which a narrow `--width` breaks; it is the empty tuple."""
    return v == () and type(v) is tuple and raw[1:-1].isspace()


_PLAIN_VALUES = frozenset({int, float, complex, bool, str, type(None)})
_PLAIN_VALUES |= {params.EnumValue, params.NpScalar, params.SymExpr, params.Opaque}


def memoizable(v) -> bool:
    """Built of immutable values (dtypes too), tuples, lists and frozensets (no jaxpr, no
    reference)."""
    t = type(v)
    if t in _PLAIN_VALUES:
        return True
    if t in (tuple, list, frozenset):
        return all(memoizable(x) for x in v)
    return is_dtype(v)


def fresh(v):
    """A remembered parameter value with new lists (a pass may change one in place)."""
    t = type(v)
    if t is list:
        return [fresh(x) for x in v]
    if t is tuple and any(type(x) in (list, tuple) for x in v):
        return tuple(fresh(x) for x in v)
    return v
