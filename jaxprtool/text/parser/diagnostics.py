"""Diagnostics: positions in the text, the limits on what is read, and error and warning
messages in the words of the format (FORMAT.md), for both paths.

`Source` is the base of the parse state: the text, its path, positions as `Loc`s and the
located `JaxprError`s every reader raises.  `lark_error` turns lark's syntax errors into
such errors (`_diagnose` looks at what the parser expected and the text there); the fast
path never words an error itself: the grammar reads an equation the fast path refuses, so
every error is the grammar's.
"""

from __future__ import annotations

from ...core import JaxprError, Loc, OverLimit
from ...lazy import LazyPattern
from .. import grammar as G

#: the deepest nesting of jaxprs accepted (every command recurses once or more per level)
MAX_NESTING = 100

#: longer digit strings are refused before any int() (Python's limit is 4300 digits)
MAX_DIGITS = 400

#: a dimension must fit JAX's int64 shapes
MAX_DIM = 2**63 - 1

#: the code of an error in a text that does not read as a jaxpr (`diagnostics.CODES`); a
#: text over one of the limits above is an `OverLimit` (E003)
NOT_READ = "E001"

NO_TYPES = "jaxpr has no types (printed with print_shapes=False); a typed IR cannot be built"

#: the longest token quoted in a message (`found '...'`)
_SHOWN = 40


class Source:
    """The text being read and where things are in it: every reader raises its errors here."""

    def __init__(self, text: str, path: str):
        self.s = text
        self.n = len(text)
        self.path = path
        self._line_starts: list[int] | None = None

    def loc(self, pos: int) -> Loc:
        # (imported here: `bisect`'s C module's load, ~0.2 ms, is paid only by a text that
        # gets a location this way, mostly one with an error)
        from bisect import bisect_right

        if self._line_starts is None:
            self._line_starts = [0] + [m.end() for m in G.NEWLINE.finditer(self.s)]
        ls = self._line_starts
        line = bisect_right(ls, pos)
        return Loc(self.path, line, pos - ls[line - 1] + 1)

    def fail(self, message: str, pos: int, code: str = NOT_READ):
        """The text at s[pos] does not read as a jaxpr (E001, or a closer `code`: E101, a
        variable used before its definition)."""
        raise JaxprError(message, self.loc(pos), code)

    def over_limit(self, message: str, pos: int):
        """The text at s[pos] is over one of the limits on what is read (E003)."""
        raise OverLimit(message, self.loc(pos))

    def found(self, pos: int) -> str:
        """The token at s[pos] as a message quotes it."""
        if pos >= self.n:
            return "end of input"
        m = G.SHOW_TOKEN.match(self.s, pos, pos + _SHOWN + 1)
        t = m.group() if m else self.s[pos]
        if t == "\n":
            return "end of line"
        if len(t) > _SHOWN:
            t = t[:_SHOWN] + "..."
        if not t.isprintable():  # a NUL byte, a byte-order mark, a control character
            t = "".join(c if c.isprintable() else repr(c)[1:-1] for c in t)
        return f"'{t}'"

    def expected(self, what: str, pos: int):
        if pos >= self.n:
            self.fail(f"unexpected end of input: expected {what}", pos)
        self.fail(f"expected {what}, found {self.found(pos)}", pos)

    def ws(self, i: int) -> int:
        """Past the blanks, line breaks and comments at s[i]."""
        return G.WS.match(self.s, i).end()

    def no_type(self, pos: int):
        self.fail(NO_TYPES, pos)


#: a binder `name:` (an equation's start), for the mis-indented equation message
_BINDER_START = LazyPattern(r"(?:[a-z]+_?|_):")


def block_ended(st):
    """A line left of the block's equation column ended the block (at `st.block_end`, the
    post-lexer's), and no `in (` follows: an equation there is mis-indented (the block's
    first one sits further right), else the output list is missing."""
    pos = st.block_end
    if _BINDER_START.match(st.s, pos) and st.frames:
        col = pos - (st.s.rfind("\n", 0, pos) + 1) + 1
        st.fail(
            f"an equation must start at column {st.frames[-1].eqcol}, the column of the first "
            f"equation of this block (this one starts at column {col})",
            pos,
        )
    st.expected("'in (' followed by the output list", pos)


# ---------------------------------------------------------------- warnings and limits


def underscore_warning(loc: Loc) -> JaxprError:
    """The warning at a use of `_` after `_` was bound twice in its jaxpr (FORMAT §2)."""
    w = JaxprError(
        "use of '_' is ambiguous: it is read as the most recent '_' binding in this jaxpr, "
        "which may not be the value JAX meant (FORMAT.md §2)",
        loc,
        "W002",
    )
    return w


def warn_misindented(st, pos: int, reference: str) -> None:
    """Warn (once per text: W004) that the equation at s[pos] is not where JAX prints it
    (`reference` says where that is); it is read all the same (layout.py)."""
    if st.misindented:
        return
    st.misindented = True
    col = pos - (st.s.rfind("\n", 0, pos) + 1) + 1
    w = JaxprError(
        f"this equation starts at column {col}, {reference}: the layout is not JAX's; "
        "`jaxprtool fmt -i` rewrites it",
        st.loc(pos),
        "W004",
    )
    st.warnings.append(w)


def jax_column(s: str, lam: int, in_value: bool) -> int:
    """The column JAX prints the equations of the jaxpr at s[lam] (`{ lambda`) at when they
    go on the lines after its `let`: four right of the line holding its `{ lambda`, or 5
    for one `str()`-ed into a parameter value (H5), whose lines restart at column 1."""
    if in_value:
        return 5
    start = s.rfind("\n", 0, lam) + 1
    return G.INDENT.match(s, start).end() - start + 5


def too_deep() -> str:
    return f"jaxprs nest too deeply (at most {MAX_NESTING} levels of nested jaxprs)"


_HUGE_NUMBER = LazyPattern(r"[0-9]{%d,}" % (MAX_DIGITS + 1))
_TWO_DIGITS = LazyPattern(r"(?=[0-9]{2})")
_STEP = (MAX_DIGITS + 1) // 2


def huge_number(text: str):
    """The first run of more than MAX_DIGITS digits in `text`, or None.  Such a run holds two
    consecutive characters of those at multiples of `_STEP`, and all between them: the text
    is searched only where some two and all between them are digits."""
    for m in _TWO_DIGITS.finditer(text[::_STEP]):
        k = m.start() * _STEP
        if text[k : k + _STEP + 1].isdigit():
            return _HUGE_NUMBER.search(text)
    return None


# ---------------------------------------------------------------- lark's syntax errors


def lark_errors():
    import lark.exceptions

    return lark.exceptions.UnexpectedInput


# names of terminals in messages
_SHOW = {
    "LAMBDA": "'{ lambda'",
    "RBRACE": "'}'",
    "LET": "'let'",
    "IN_KW": "'in ('",
    "IN_SHARED": "'in'",
    "BINDER": "a binder 'name:type'",
    "LITERAL": "a literal",
    "VAR": "a variable",
    "PRIM": "a primitive name",
    "KEY": "a parameter 'name=value'",
    "SEMICOLON": "';'",
    "DOT": "'.'",
    "COMMA": "','",
    "LPAR": "'('",
    "RPAR": "')'",
    "LSQB": "'['",
    "RSQB": "']'",
    "EQUAL": "'='",
    "NAME": "a name",
    "REF": "a reference 'x[...]'",
    "REF_HEAD": "a reference 'x[...]'",
    "EFFECTS": "': { effects }'",
    "HEAD": "an equation",
    "HEAD_OPS": "an equation",
    "EQNS": "an equation",
    "OPERANDS": "an operand",
    "ULITERAL": "a literal",
    "PARAM": "a parameter 'name=value'",
    "EQSEP": "a new equation",
    "EQ_PRIM": "'=' and a primitive name",
    "VPIECE": "a parameter value",
    "$END": "end of input",
}


def lark_error(st, e) -> JaxprError:
    """A lark parse error as a located JaxprError in the words of the format (`st`: the
    parse state, whose post-lexer fields tell where the equation and its block began)."""
    tok = getattr(e, "token", None)
    if tok is not None:
        expected = set(e.expected)
        pos = st.n if tok.type == "$END" else tok.start_pos
    else:
        expected = set(e.allowed or ())
        pos = e.pos_in_stream
    ps = getattr(e, "state", None)
    if ps is not None:
        # what the parser accepts here (the lexer's set is wider: it is shared by states)
        expected = set(ps.parse_conf.parse_table.states[ps.position])
    expected.discard("NL")
    try:
        _diagnose(st, expected, pos)
    except JaxprError as err:
        return err
    return JaxprError("syntax error", st.loc(pos), NOT_READ)


def _diagnose(st, expected: set, pos: int):
    """Raise the error the grammar's `expected` terminals at s[pos] say, in words: the
    binders' clues first (`_binder_clues`), then the operands' (`_operand_clues`), then
    what each set of expected terminals means (`_expected_clues`)."""
    name_at = _binder_clues(st, expected, pos)
    if "HEAD" in expected:
        st.expected("an equation", pos)
    if "IN_KW" in expected and "OPERANDS" in expected:
        _operand_clues(st, pos, name_at)
    _expected_clues(st, expected, pos)


def _binder_clues(st, expected: set, pos: int) -> int:
    """The errors about binders at s[pos] (untyped, a malformed type, a binder list that
    does not end); where a binder's name starts there, else -1."""
    s = st.s
    # binders without types (print_shapes=False) at the start of the current equation
    k = st.eqn_start
    if 0 <= k <= pos and "\n" not in s[k:pos] and G.UNTYPED_BINDERS.match(s, k):
        st.no_type(G.VARNAME.match(s, k).end())
    # a malformed type in a binder: read it to say what is wrong with it
    m = G.VARNAME.match(s, pos)
    name_at = pos if m is not None and s.startswith(":", m.end()) else -1
    if name_at < 0 and s.startswith(":", pos):
        k = pos
        while k > 0 and (s[k - 1].islower() or s[k - 1] == "_"):
            k -= 1
        if k < pos and k == st.eqn_start:
            name_at = k
    if name_at >= 0 and (name_at == st.eqn_start or "BINDER" in expected):
        st.read_type(G.VARNAME.match(s, name_at).end() + 1)
    if "BINDER" in expected and ("SEMICOLON" in expected or "DOT" in expected):
        m = G.VARNAME.match(s, pos)
        if m is not None:
            name = m.group()
            j = m.end()
            k = G.SP.match(s, j).end()
            if name == "let" or s[k : k + 1] not in (".", ";", "_") and not s[k : k + 1].islower():
                st.expected(
                    "':' and a type after '" + name + "'" if name != "let" else "'.' before 'let'",
                    pos,
                )
            st.no_type(j)
        st.expected(
            "a binder 'name:type' or ';'"
            if "SEMICOLON" in expected
            else "a binder 'name:type' or '.'",
            pos,
        )
    return name_at


def _operand_clues(st, pos: int, name_at: int):
    """The errors among an equation's operands at s[pos] (`name_at`: a binder's name
    starts there)."""
    s = st.s
    n = st.n
    # among operands
    if 0 <= st.block_end <= pos:
        block_ended(st)
    if (
        pos > 0
        and s[pos - 1] not in " \t\n"
        and (G.VARNAME.match(s, pos) or G.LITERAL.match(s, pos))
    ):
        st.expected("a space between operands", pos)
    m = G.LITERAL.match(s, pos)
    if m is not None and name_at < 0:
        e = m.end()
        if s.startswith(":", e):
            st.read_type(e + 1)
        elif not G.ATOM_END.match(s, e):
            st.expected("':' and a type after the literal, or a separator", e)
    if name_at >= 0:
        eqcol = st.frames[-1].eqcol if st.frames else 0
        st.fail(
            f"a binder cannot appear among operands; a new equation must start at column {eqcol}, "
            "the column of the first equation of this block",
            name_at,
        )
    if pos >= n or s[pos] in "),}" or s[:pos].rstrip(" \t\r").endswith("\n"):
        st.expected("'in (' followed by the output list", pos)
    st.expected("an operand (a variable or a literal)", pos)


def _expected_clues(st, expected: set, pos: int):
    """The error each other set of expected terminals at s[pos] says, else the list of
    them."""
    s = st.s
    if "IN_KW" in expected:
        st.expected("'in (' followed by the output list", pos)
    if "RPAR" in expected and ("VAR" in expected or "COMMA" in expected):
        if "VAR" in expected:
            st.expected("an output variable or literal", pos)
        st.expected("',' or ')' in the output list", pos)
    if "RBRACE" in expected and "EFFECTS" in expected:
        st.expected("'}' closing the jaxpr", pos)
    if "$END" in expected and not st.frames:
        st.fail(f"unexpected text after the jaxpr: {st.found(pos)}", pos)
    if "KEY" in expected and "RSQB" in expected:
        st.expected("a parameter 'name=value' or ']'", pos)
    if "LAMBDA" in expected and "LET_S" in expected:
        if s.startswith("{", pos):
            st.expected("'{ lambda'", pos)
        st.expected("a jaxpr ('{ lambda ...')", pos)
    if "LAMBDA" in expected and "NAME" in expected:
        st.expected("a jaxpr or a shared-jaxpr name in the tuple", pos)
    if "IN_SHARED" in expected:
        st.expected(f"'in' after the definition of shared jaxpr '{st.last_shared_name}'", pos)
    if "LET" in expected:
        st.expected("'let'", pos)
    if "EQ_PRIM" in expected:
        k = G.SP.match(s, pos).end()
        if s.startswith("=", k):
            st.expected("a primitive name", st.ws(k + 1))
        st.expected("another binder or '=' after the equation's binders", pos)
    if "LAMBDA" in expected:
        st.expected("'{ lambda'", pos)
    names = sorted({_SHOW.get(x, x) for x in expected if not x.startswith("__")})
    st.expected(" or ".join(names) if len(names) < 4 else "one of " + ", ".join(names), pos)
