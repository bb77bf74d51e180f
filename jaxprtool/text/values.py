"""Interpretation of printed parameter values (`key=VALUE` inside `prim[...]`).

`parse_value(s, i, ...)` reads one Python-repr-like value starting at `s[i]`
and returns `(value, end)`.  The value is a typed Python value as described in
`jaxprtool.params`; the design goal is that `params.format_value(value)` gives
back the printed text exactly.  Mapping:

* `None`, `True`, `False`, ints, floats (`nan`, `inf`, `-inf`) -> Python values
* `'x'` / `"x"` -> str (inside containers; a top-level unquoted string is the
  caller's business)
* `(..)` -> tuple, `[..]` -> list (`SpacedList` when laid out other than `[a, b]`, e.g. a
  list of jaxprs over several lines), `frozenset({..})` -> frozenset
* `np.int64(1)` -> `NpScalar("int64", 1)`
* `Cls.MEMBER` -> `EnumValue`
* `Name(k=v, ...)` (keyword arguments only, at least one) -> `Record`
* inside a tuple or list, a symbolic dimension expression (`b*n`,
  `floordiv(b, 2)`, `2*b + 1`, a lower-case name) -> `SymExpr`
* a bare dtype name at top level -> `np.dtype` (one of numpy's own: a
  `lazy.DTypeName` within `light_dtypes`); other bare names at top level -> str
* anything else (`<function ... at 0x...>`, `Mesh(...)`, `PyTreeDef(...)`,
  `P('x')`, dicts, bare capitalised names inside containers, ...) ->
  `Opaque(exact text)`.

Where the interpretation would not print back exactly, the caller wraps the
whole printed text in `Opaque` instead (see the parser's package docstring).

`hook(i)` lets the jaxpr parser take over where a value position holds a
jaxpr (`{ lambda ...}` or `let NAME = {...} in {...}`, H5); it returns
`(jaxpr, end)` or None.
"""

from __future__ import annotations

from .. import core
from ..lazy import LIGHT_DTYPES, DTypeName, LazyPattern, np
from ..params import EnumValue, NpScalar, Opaque, Record, SpacedList, SymExpr

_IDENT = LazyPattern(r"[^\W\d]\w*")
_NUM = LazyPattern(r"-?(?:\d+\.\d*(?:e[+-]?\d+)?|\d+e[+-]?\d+|inf\b|nan\b|\d+)")
_WS = LazyPattern(r"\s*")
_ENUM = LazyPattern(r"([A-Z]\w*)\.([A-Za-z_]\w*)")
_SYMFUN = frozenset({"floordiv", "mod", "max", "min", "non_negative"})
_OPEN = {"(": ")", "[": "]", "{": "}", "<": ">"}
_OBJ_REPR = LazyPattern(r"<(?:function|class|bound|built-in|module|method)\b|<[\w.]+ object\b")
_DTYPE_CACHE: dict[str, np.dtype | None] = {}
_CLOSERS = ",)]}"
#: the text of a dimension expression (`2*b + 1`, `floordiv(b, 2) - 1`)
_SYM_TEXT = LazyPattern(r"[\w\s*+\-^(),/]+")
#: two operands side by side (`0 0`, `b (`): not an expression
_ADJACENT = LazyPattern(r"[\w)]\s+[\w(]")


class ValueError_(Exception):
    """A value that could not be read; carries the offending position."""

    def __init__(self, message: str, pos: int):
        super().__init__(message)
        self.message = message
        self.pos = pos


class light_dtypes:
    """Within (when `on`): a dtype parameter numpy itself defines is read, and made by the
    rules (`core.dtype_value`), as a `DTypeName`: for a command that reads, transforms and
    prints a program (`fmt`, `check`, the AD commands), no numpy import."""

    def __init__(self, on: bool = True) -> None:
        self.on = on

    def __enter__(self):
        self.before = LIGHT_DTYPES[0]
        LIGHT_DTYPES[0] = self.on

    def __exit__(self, *exc):
        LIGHT_DTYPES[0] = self.before


#: a sized numpy dtype name (`float32`, `int4`, `float8_e4m3fn`)
_DTYPE_NAME = LazyPattern(r"(?:float|int|uint|complex|bfloat)\d+(?:_\w+)?")


def dtype_of_name(name: str) -> np.dtype | DTypeName | None:
    """np.dtype for a numpy dtype name (`float32`, `bfloat16`, `int4`, `bool`), else None."""
    if LIGHT_DTYPES[0] and name in core.NUMPY_DTYPES:
        return core.dtype_value(core.short_dtype_name(name))
    if name in _DTYPE_CACHE:
        return _DTYPE_CACHE[name]
    dt = None
    if name == "bool" or name == "float0" or _DTYPE_NAME.fullmatch(name):
        try:
            dt = core.np_dtype(core.short_dtype_name(name))
        except (KeyError, TypeError):
            dt = None
        if dt is not None and name != "float0" and dt.name != name:
            dt = None
    _DTYPE_CACHE[name] = dt
    return dt


def balanced_end(s: str, i: int) -> int:
    """End of the bracketed group opening at s[i] (quotes respected); raises ValueError_."""
    stack = [_OPEN[s[i]]]
    j = i + 1
    n = len(s)
    while j < n:
        c = s[j]
        if c in "'\"" and stack[-1] != ">":
            j = _string_end(s, j)
            continue
        if stack[-1] == ">":
            if c == "<":
                stack.append(">")
            elif c == ">":
                stack.pop()
                if not stack:
                    return j + 1
            j += 1
            continue
        if c in "([{":
            stack.append(_OPEN[c])
        elif c in ")]}":
            if c != stack[-1]:
                raise ValueError_(f"unbalanced '{c}' in parameter value", j)
            stack.pop()
            if not stack:
                return j + 1
        j += 1
    raise ValueError_(f"unterminated '{s[i]}' in parameter value", i)


def _string_end(s: str, i: int) -> int:
    q = s[i]
    j = i + 1
    n = len(s)
    while j < n:
        c = s[j]
        if c == "\\":
            j += 2
            continue
        if c == q:
            return j + 1
        if c == "\n":
            break
        j += 1
    raise ValueError_("unterminated string in parameter value", i)


_ESC = {"\\": "\\", "'": "'", '"': '"', "n": "\n", "t": "\t", "r": "\r"}


def _unquote(body: str) -> str | None:
    if "\\" not in body:
        return body
    out = []
    j = 0
    while j < len(body):
        c = body[j]
        if c == "\\":
            e = body[j + 1 : j + 2]
            if e not in _ESC:
                return None
            out.append(_ESC[e])
            j += 2
        else:
            out.append(c)
            j += 1
    return "".join(out)


def _expr_end(s: str, i: int) -> int:
    """End of a dimension expression inside a container: up to a top-level `,` or closer."""
    j = i
    n = len(s)
    while j < n:
        c = s[j]
        if c in "([{":
            j = balanced_end(s, j)
            continue
        if c in _CLOSERS:
            return j
        if c == "\n":
            return j
        j += 1
    return j


def parse_value(s: str, i: int, top: bool = False, hook=None) -> tuple[object, int]:
    """Read one value at s[i]; returns (value, end).  Raises ValueError_."""
    if i >= len(s):
        raise ValueError_("unexpected end of input in parameter value", i)
    c = s[i]
    if c == "(":
        return _seq(s, i, ")", hook)
    if c == "[":
        if s.startswith("[...]", i):
            return Opaque("[...]"), i + 5
        return _seq(s, i, "]", hook)
    if c == "{":
        if hook is not None:
            r = hook(i)
            if r is not None:
                return r
        e = balanced_end(s, i)
        return Opaque(s[i:e]), e
    if c in "'\"":
        e = _string_end(s, i)
        body = _unquote(s[i + 1 : e - 1])
        if body is None or repr(body) != s[i:e]:
            return Opaque(s[i:e]), e
        return body, e
    if c == "<":
        e = balanced_end(s, i)
        text = s[i:e]
        if top and " at 0x" not in text and not _OBJ_REPR.match(text):
            return text, e  # a function name such as `<lambda>`
        return Opaque(text), e
    if c == "-" or c.isdigit():
        m = _NUM.match(s, i)
        if m is None:
            raise ValueError_("malformed number in parameter value", i)
        t = m.group()
        if t.lstrip("-").isdigit():
            return int(t), m.end()
        return float(t), m.end()
    return _named_value(s, i, top, hook)


def _named_value(s: str, i: int, top: bool, hook) -> tuple[object, int]:
    """`parse_value` of a value that starts with a name: a constant, a dtype or name, a
    numpy scalar, an enum member or dotted name, a call, a symbolic dimension."""
    m = _IDENT.match(s, i)
    if m is None:
        raise ValueError_(f"unexpected character {s[i]!r} in parameter value", i)
    name = m.group()
    e = m.end()
    nxt = s[e : e + 1]
    if name in ("None", "True", "False") and nxt not in ("(", "."):
        return {"None": None, "True": True, "False": False}[name], e
    if name in ("nan", "inf") and not nxt.isalnum() and nxt != "_" and nxt != "(":
        return float(name), e
    if name == "b" and nxt in ("'", '"'):
        e2 = _string_end(s, e)
        return Opaque(s[i:e2]), e2
    if name == "let" and nxt == " " and hook is not None:
        r = hook(i)
        if r is not None:
            return r
    if name == "np" and nxt == ".":
        r = _np_scalar(s, i, e)
        if r is not None:
            return r
    if nxt == ".":
        return _dotted(s, i, e)
    if nxt == "(":
        if name == "frozenset" and s.startswith("({", e):
            return _frozenset(s, i, e, hook)
        if name in _SYMFUN and not top:
            end = balanced_end(s, e)
            return SymExpr(s[i:end]), end
        return _call(s, i, name, e, hook)
    if top:
        dt = dtype_of_name(name)
        if dt is not None:
            return dt, e
        return name, e
    if name[0].islower():
        return SymExpr(name), e
    return Opaque(name), e


def _np_scalar(s: str, i: int, e: int) -> tuple[object, int] | None:
    """`np.int64(0)` at s[i] (`np` ends at s[e]): a numpy scalar of a number or a bool, the
    call verbatim otherwise; None where no call follows `np.NAME`."""
    m2 = _IDENT.match(s, e + 1)
    if not (m2 and s[m2.end() : m2.end() + 1] == "("):
        return None
    end = balanced_end(s, m2.end())
    inner = s[m2.end() + 1 : end - 1]
    mn = _NUM.fullmatch(inner)
    if mn:
        v = int(inner) if inner.lstrip("-").isdigit() else float(inner)
        return NpScalar(m2.group(), v), end
    if inner in ("True", "False"):
        return NpScalar(m2.group(), inner == "True"), end
    return Opaque(s[i:end]), end


def _dotted(s: str, i: int, e: int) -> tuple[object, int]:
    """A name followed by `.` at s[e]: an enum member `Cls.NAME`, else the dotted name (and
    its call) verbatim."""
    me = _ENUM.match(s, i)
    if me and s[me.end() : me.end() + 1] not in ("(", "."):
        return EnumValue(me.group(1), me.group(2)), me.end()
    j = e
    while j < len(s) and (s[j].isalnum() or s[j] in "._"):
        j += 1
    if s[j : j + 1] == "(":
        j = balanced_end(s, j)
    return Opaque(s[i:j]), j


def _elements(s: str, i: int, close: str, hook):
    """Elements of a container whose opener is at s[i]: ([values], trailing_comma, end,
    separators): the text around the elements (after the opener, between elements, before the
    closer), for lists laid out over several lines."""
    out = []
    j = _WS.match(s, i + 1).end()
    trailing = False
    bounds: list[tuple[int, int]] = []
    while True:
        if j >= len(s):
            raise ValueError_(f"unterminated '{s[i]}' in parameter value", i)
        if s[j] == close:
            return out, trailing, j + 1, _separators(s, i + 1, bounds, j)
        start = j
        if s.startswith("- ", j):  # `- floordiv(- b, 2)`: an expression, read as one below
            v, j = None, j + 1
        else:
            v, j = parse_value(s, j, False, hook)
        k = j
        while k < len(s) and s[k] == " ":
            k += 1
        w = _WS.match(s, k).end()
        if w < len(s) and s[w] in (",", close):
            k = w  # `,` or the closer on the next line (a list laid out over lines)
        if k < len(s) and s[k] not in ",)]}":
            # an expression such as `2*b + 1` or `b - 2`
            j = _expr_end(s, start)
            text = s[start:j].rstrip()
            if _SYM_TEXT.fullmatch(text):
                bad = _ADJACENT.search(text)
                if bad:  # `0 0`: two operands without an operator is no expression
                    raise ValueError_(
                        f"expected ',' or '{close}' in parameter value, found {text[bad.end() - 1]!r}",
                        start + bad.end() - 1,
                    )
                v = SymExpr(text)
            else:
                v = Opaque(text)
            j = start + len(text)
            k = j
            while k < len(s) and s[k] == " ":
                k += 1
        out.append(v)
        bounds.append((start, j))
        j = k
        if j < len(s) and s[j] == ",":
            j = _WS.match(s, j + 1).end()
            trailing = True
        elif j < len(s) and s[j] == close:
            trailing = False
        else:
            if j >= len(s):
                raise ValueError_(f"unterminated '{s[i]}' in parameter value", i)
            raise ValueError_(f"expected ',' or '{close}' in parameter value, found {s[j]!r}", j)


def _separators(s: str, begin: int, bounds, close_at: int) -> tuple[str, ...]:
    """The text before each element, and before the closer (from `begin`, after the opener)."""
    out = []
    for start, end in bounds:
        out.append(s[begin:start])
        begin = end
    out.append(s[begin:close_at])
    return tuple(out)


def _seq(s: str, i: int, close: str, hook):
    vals, trailing, end, seps = _elements(s, i, close, hook)
    if close == "]":
        if seps != SpacedList.standard(len(vals)):
            return SpacedList(vals, seps), end
        return vals, end
    if len(vals) == 1 and not trailing:
        # a parenthesised expression, not a tuple
        return Opaque(s[i:end]), end
    return tuple(vals), end


def _frozenset(s: str, i: int, e: int, hook):
    vals, _, end, _ = _elements(s, e + 1, "}", hook)
    if s[end : end + 1] != ")":
        end2 = balanced_end(s, e)
        return Opaque(s[i:end2]), end2
    return frozenset(vals), end + 1


_KW = LazyPattern(r"([A-Za-z_]\w*)=")


def _call(s: str, i: int, name: str, e: int, hook):
    """`Name(...)`: a Record when all arguments are `key=value`, else Opaque."""
    j = _WS.match(s, e + 1).end()
    fields = []
    try:
        while s[j] != ")":
            m = _KW.match(s, j)
            if m is None:
                break
            v, j = parse_value(s, m.end(), True, hook)
            if isinstance(v, str):
                break
            fields.append((m.group(1), v))
            if s[j] == ",":
                j = _WS.match(s, j + 1).end()
            elif s[j] != ")":
                break
        else:
            if fields:
                return Record(name, tuple(fields)), j + 1
    except (ValueError_, IndexError):
        pass
    end = balanced_end(s, e)
    return Opaque(s[i:end]), end
