"""The post-lexer: what a context-free grammar cannot say, applied to lark's token stream.

* The layout rule of FORMAT.md §5.5: inside the equation block of the innermost
  `{ lambda`, outside brackets, a line break followed by *exactly* the column of the
  block's first equation becomes an EQSEP token (a deeper line continues the equation, a
  shallower one must be the block's `in`); `;` between equations becomes EQSEP too.
  The rule decides only whether a line starts an equation or continues the one before.
  A line at another column that nothing but an equation can start (`_misplaced_equation`)
  starts one all the same: the text means the same without its layout.  That, and a
  block whose equations sit at one column other than JAX's (`diagnostics.jax_column`),
  give one warning per text (W004, `warn_misindented`); `fmt` prints JAX's layout.
* Parameter values (H3, H4): after `key=` it finds the end of the value and reads it
  (param_values.py) and hands the parser one PARAM token.  A value that is a jaxpr, a
  tuple of jaxprs or `let NAME = {...} in {...}` is left to the grammar; a value with
  jaxprs inside (`_LinearSolveTuple(matvec={ lambda ...}, ...)`, H5) goes to the parser
  as VPIECE tokens (the raw text between the jaxprs) and the nested jaxprs themselves, so
  every nested jaxpr is parsed by the grammar, in place, with its own locations.
* The fast path's runs (fast.py): where an equation starts, the simple equations from
  there on as one EQNS token.

`connector` plugs it into lark: lark's own post-lexer interface passes only the token
stream, and the layout needs the lexer's state too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...lazy import LazyPattern
from .. import grammar as G
from .diagnostics import MAX_NESTING, block_ended, jax_column, too_deep, warn_misindented
from .param_values import Nested

if TYPE_CHECKING:
    from .state import ParseState


def _bare_eq_at(s: str, e: int, col: int, eqcol: int) -> bool:
    """A line that starts one column right of the equation column with `= `: an equation
    without results printed by JAX < 0.4.22 (` = prim ...`, empty binders before the `=`)."""
    return col == eqcol + 1 and s.startswith("= ", e)


#: a binder that no operand can be (`nan:` and `inf:` start literals too: FORMAT H1)
_EQUATION_START = LazyPattern(r"(?!(?:nan|inf):)(?:[a-z]+_?|_):")
#: a line of `nan:T` and `inf:T` only: literals, or the binders of an equation (H1)
_LITERALS_OR_BINDERS = LazyPattern(r"[ \t]*(?:(?:nan|inf):\S+[ \t]*)+(?:#.*)?")


def _misplaced_equation(s: str, e: int, col: int, eqcol: int, last: str) -> bool:
    """The line at s[e], at column `col`, is not at its block's equation column `eqcol`
    (known: not 0) but can only start an equation: it starts with a binder no operand can
    be, the equation before has its binders done (`last`, the token before the line
    break, is not a binder or the comma of a swap's), and the line before is not one an
    equation could start at (`nan:T inf:T`: binders or literals, H1).  Read as an
    equation, the text means what it would in JAX's layout; read as a continuation, it
    would not read; only the layout could tell the readings of H1 apart."""
    if col == eqcol or eqcol == 0 or last in ("BINDER", "COMMA"):
        return False
    if _EQUATION_START.match(s, e) is None:
        return False
    a, b = _line_before(s, e)
    return _LITERALS_OR_BINDERS.fullmatch(s, a, b) is None


def _line_before(s: str, e: int) -> tuple[int, int]:
    """Where the last line before the one holding s[e] that is not blank starts and ends."""
    end = s.rfind("\n", 0, e)
    while end > 0:
        start = s.rfind("\n", 0, end) + 1
        if not s[start:end].isspace() and start < end:
            return start, end
        end = start - 1
    return 0, 0


class Frame:
    """One open `{ lambda` of the text: where its equation block stands (§5.5)."""

    __slots__ = ("in_block", "depth", "eqcol", "start", "jax_eqcol")

    def __init__(self, start: int, jax_eqcol: int):
        self.in_block = False  # between its `let` and its `in`
        self.depth = 0  # brackets open inside it (the layout rule holds outside them)
        self.eqcol = 0  # the column of its equations: its first one's, once read
        self.start = start  # where its `{ lambda` starts
        self.jax_eqcol = jax_eqcol  # the column JAX prints its equations at (`jax_column`)


class _Mixed:
    """A parameter value with jaxprs inside, being read (H5)."""

    __slots__ = ("start", "key", "depth", "done", "tl_start")

    def __init__(self, start: int, key: str, depth: int):
        self.start = start
        self.key = key
        self.depth = depth
        self.done: dict[int, tuple[None, int]] = {}
        self.tl_start: int | None = None


class _Layout:
    """Post-lexer: the §5.5 layout rule (`_EQSEP`), and parameter values as raw text."""

    always_accept = ("NL", "SEMICOLON")

    Token: type  # the lark token class of its parser (set by _build)

    def __init__(self):
        self.st: ParseState | None = None

    def process(self, stream, lexer_state):
        """The tokens of `stream` with the layout applied; `lexer_state` is the lexer's
        position (a value read here is skipped by advancing it)."""
        return _Reading(self.st, self.Token, lexer_state.line_ctr).tokens(stream)


class _Reading:
    """The layout applied to the token stream of one text: the open jaxprs (`Frame`s),
    parameter lists and values with jaxprs inside, and what the tokens so far say of the
    next one.  Each token type the layout acts on has its method (`_ON`), which returns
    None where the token passes on as it is, else the tokens passed on in its place: a
    generator where work waits until the parser has taken a token (the code after a
    `yield` runs once the parser has taken the token, and reduced what it ends).  Most
    tokens are spared a generator, which costs more than the call.  Line breaks (NL, and
    the one operands end with, the commonest tokens after `key=`) are tested in `tokens`
    itself, before any call: the post-lexer's whole cost is a few per cent of a text read
    with `fast=False`, and calls per token add up."""

    def __init__(self, st: ParseState, Token: type, line_ctr):
        self.st = st
        self.s = st.s
        self.n = len(st.s)
        self.Token = Token
        self.line_ctr = line_ctr  # the lexer's position
        self.fast = st.fast
        self.frames: list[Frame] = st.frames  # per open `{ lambda`
        self.broken: list[bool] = []  # per open parameter list: broken over lines?
        self.mixed: list[_Mixed] = []  # per open value with jaxprs inside (H5)
        self.head = False  # the next token starts an equation
        self.after_let = False  # the next token is the first of an equation block
        self.let_line = 0  # the line of the last `let`

    def tokens(self, stream):
        """The tokens of `stream` with the layout applied."""
        st, frames, on = self.st, self.frames, _ON
        last = ""  # the type of the last token that is not a line break
        for t in stream:
            tt = t.type
            if tt == "NL":
                # decided before the next token is lexed, so it is lexed in the right state
                if frames and (r := self._newline(t, last)) is not None:
                    yield from r
                continue
            last = tt
            if self.after_let:
                self._first_of_block(t, tt)
            if st.block_end >= 0 and tt != "IN_KW":
                block_ended(st)
            if self.head:
                self.head = False
                st.eqn_start = t.start_pos
            if tt == "OPERANDS" or tt == "HEAD_OPS":
                # the line break they end with: as for NL, once the parser has taken them
                yield t
                if frames and "\n" in t.value and (r := self._after_operands(t)) is not None:
                    yield from r
                continue
            act = on.get(tt)
            if act is None or (r := act(self, t)) is None:
                yield t
            else:
                yield from r

    # ---------------------------------------------------------------- tokens made here

    def _emit(self, kind: str, a: int, b: int):
        """A `kind` token of s[a:b], which the lexer is moved past."""
        line_ctr = self.line_ctr
        text = self.s[a:b]
        t = self.Token(kind, text, a, line_ctr.line, line_ctr.column)
        line_ctr.feed(text, True)
        t.end_line, t.end_column, t.end_pos = line_ctr.line, line_ctr.column, b
        return t

    def _run(self, e: int, line: int, col: int):
        """The simple equations from s[e] on as one EQNS token (the lexer moved past
        them), or None (`FastPath.read_run`)."""
        st = self.st
        r = st.read_run(e, line, col)
        if r is None:
            return None
        st.runs[e] = r[0]
        return self._emit("EQNS", e, r[1])

    def _inline(self, j: int):
        """The block after `let` (at s[j]) when it is all on that line (`read_inline`)
        as one EQNS token, or None."""
        s, st, line_ctr = self.s, self.st, self.line_ctr
        e = G.INDENT.match(s, j).end()
        if e == j or G.IN_KW.match(s, e):
            return None
        r = st.read_inline(e, line_ctr.line)
        if r is None:
            return None
        line_ctr.feed(s[j:e], False)  # the blanks the grammar skips
        self.frames[-1].eqcol = line_ctr.column  # the first equation's column
        st.runs[e] = r[0]
        return self._emit("EQNS", e, r[1])

    # ---------------------------------------------------------------- the layout rule

    def _newline(self, t, last: str):
        """A line break (NL) with a jaxpr open (`last`: the type of the token before it): in
        its equation block, outside brackets and not before its `in`, the block's first
        equation on the line after `let` as the fast path's run, else the layout rule
        (`_line_break`); elsewhere None."""
        f = self.frames[-1]
        e = t.end_pos
        if not (f.in_block and not f.depth and e < self.n and not G.IN_KW.match(self.s, e)):
            return None
        if (
            self.after_let
            and self.fast
            and self.st.block_end < 0
            and (r := self._run(e, t.end_line, t.end_column)) is not None
        ):
            # the block's first equation, on the line after `let`
            self.after_let = False
            f.eqcol = t.end_column
            self._check_jax_column(f, e)
            return (r,)
        return self._line_break(t, f, last)

    def _line_break(self, t, f: Frame, last: str):
        """The layout rule (§5.5) at the line break that token `t` ends with, in the
        equation block of frame `f` outside brackets (`last`: the token before the
        break): a line at the equation column (or ` = prim` one column right of it), or
        a misplaced one only an equation can start (`_misplaced_equation`, warned),
        starts an equation: EQSEP, then the fast path's run from there where it reads
        one (`head`: whether the token after them starts an equation); another line left
        of it ends the block (its `in (` must follow); a deeper one goes on with the
        equation.  Yields the tokens to pass on."""
        s, st = self.s, self.st
        e, col = t.end_pos, t.end_column
        starts = col == f.eqcol or _bare_eq_at(s, e, col, f.eqcol)
        if not starts and _misplaced_equation(s, e, col, f.eqcol, last):
            warn_misindented(st, e, f"the first of its block at column {f.eqcol}")
            starts = True
        if starts:
            yield self.Token("EQSEP", "", e, t.end_line, col)
            # (only now: taking EQSEP, the parser reduced the equation before it, whose
            # results the run may use)
            r = self._run(e, t.end_line, col) if self.fast and st.block_end < 0 else None
            if r is None:
                self.head = True
                return
            yield r
            self.head = False
        elif col < f.eqcol:
            st.block_end = e

    def _first_of_block(self, t, tt: str) -> None:
        """The first token after `let`: its column is the block's equation column (`in`:
        the block is empty)."""
        self.after_let = False
        f = self.frames[-1]
        if tt != "IN_KW":
            # ` = prim` (JAX < 0.4.22): the empty binder list sits one column left
            f.eqcol = t.column - 1 if tt == "EQ_PRIM" and t.value[0] == "=" else t.column
            self.st.eqn_start = t.start_pos
            if t.line != self.let_line:
                self._check_jax_column(f, t.start_pos)
        else:
            f.in_block = False

    def _check_jax_column(self, f: Frame, e: int) -> None:
        """Warn where the block of frame `f`, its first equation (at s[e]) on the line
        after `let`, is not at the column JAX prints it at (`jax_column`)."""
        if f.eqcol != f.jax_eqcol:
            warn_misindented(
                self.st, e, f"JAX prints this block's equations at column {f.jax_eqcol}"
            )

    # ---------------------------------------------------------------- one method per token type

    def _after_operands(self, t):
        """OPERANDS, HEAD_OPS: the line break they end with is one as for NL (in the
        equation block, outside brackets, not before a comment or `in`)."""
        f = self.frames[-1]
        e = t.end_pos
        s = self.s
        if f.in_block and not f.depth and e < self.n and s[e] != "#" and not G.IN_KW.match(s, e):
            return self._line_break(t, f, t.type)
        return None

    def _key(self, t):
        """`key=`: the value after it read (`read_value`) and passed on with it as one
        PARAM token; a value with jaxprs inside (H5) as VPIECE tokens around them, the
        jaxprs left to the grammar (`_rbrace`); one that is a jaxpr left to the grammar."""
        i = t.end_pos
        key = t.value.lstrip()[:-1]
        broken = self.broken
        try:
            r = self.st.read_value(i, key, broken[-1] if broken else False)
        except Nested as nested:
            return self._value_with_jaxprs(t, key, nested.pos)
        if r is None:
            return None
        # `key=value` as one token, the value read here
        self.st.values[t.start_pos] = (key, r[0])
        e = r[1]
        text = self.s[i:e]
        t.type = "PARAM"
        t.value += text
        line_ctr = self.line_ctr
        if "\n" in text:
            line_ctr.feed(text, True)
        else:
            line_ctr.char_pos = e
            line_ctr.column += e - i
        t.end_line, t.end_column, t.end_pos = line_ctr.line, line_ctr.column, e
        return None

    def _value_with_jaxprs(self, t, key: str, first: int):
        """`key=` (token `t`) followed by a value with jaxprs inside, the first at s[first]
        (H5): its text up to there as VPIECE."""
        yield t
        i = t.end_pos
        self.mixed.append(_Mixed(i, key, len(self.frames)))
        yield self._emit("VPIECE", i, first)

    def _lambda(self, t):
        """`{ lambda`: a frame opens (at most MAX_NESTING)."""
        frames, mixed = self.frames, self.mixed
        in_value = bool(mixed) and len(frames) == mixed[-1].depth
        frames.append(Frame(t.start_pos, jax_column(self.s, t.start_pos, in_value)))
        if len(frames) > MAX_NESTING:
            self.st.over_limit(too_deep(), t.start_pos)

    def _rbrace(self, t):
        """`}`: its frame closes; a jaxpr inside a parameter value (H5) is done."""
        yield t
        frames = self.frames
        if not frames:
            return  # (the parser rejects it)
        f = frames.pop()
        mixed = self.mixed
        if mixed and len(frames) == mixed[-1].depth:
            yield from self._value_jaxpr_done(f, t.end_pos)

    def _value_jaxpr_done(self, f: Frame, q: int):
        """The jaxpr of frame `f` in the value being read (H5) ended at s[q]: the value's
        text from there to its next jaxpr, or to its end (the value then read), as VPIECE."""
        m = self.mixed[-1]
        if G.SHARED_IN.match(self.s, q):
            return  # a shared definition inside the value: its `in` follows
        m.done[m.tl_start if m.tl_start is not None else f.start] = (None, q)
        m.tl_start = None
        try:
            e = self.st.rescan(m.start, m.key, m.done)
        except Nested as nested:
            if nested.pos > q:
                yield self._emit("VPIECE", q, nested.pos)
            return
        self.mixed.pop()
        if e > q:
            yield self._emit("VPIECE", q, e)

    def _let(self, t):
        """`let`: the equation block opens; all on its line, it is the fast path's run."""
        self.let_line = t.line
        yield t
        if self.frames:
            self.frames[-1].in_block = True
            self.after_let = True
            if self.fast and self.st.block_end < 0 and (r := self._inline(t.end_pos)) is not None:
                self.after_let = False
                yield r

    def _in(self, t):
        """`in (`: outside brackets, the equation block closes."""
        frames = self.frames
        if frames and not frames[-1].depth:
            frames[-1].in_block = False
            self.st.block_end = -1

    def _open_params(self, t):
        """`[`: a parameter list opens (broken over lines or not: `list_is_broken`)."""
        if self.frames:
            self.frames[-1].depth += 1
        self.broken.append(self.st.list_is_broken(t.end_pos))

    def _close_params(self, t):
        if self.frames:
            self.frames[-1].depth -= 1
        if self.broken:
            self.broken.pop()

    def _open_paren(self, t):
        if self.frames:
            self.frames[-1].depth += 1

    def _close_paren(self, t):
        if self.frames:
            self.frames[-1].depth -= 1

    def _semicolon(self, t):
        """`;`: between equations (their single-line form), EQSEP."""
        frames = self.frames
        if frames and frames[-1].in_block and not frames[-1].depth:
            self.head = True
            yield self.Token.new_borrow_pos("EQSEP", ";", t)
        else:
            yield t

    def _let_shared(self, t):
        """`let NAME =`: a shared definition (its name for messages; inside a value with
        jaxprs, H5, where its jaxpr starts)."""
        m = G.SHARED_DEF.match(self.s, t.start_pos)
        self.st.last_shared_name = m.group(1) if m else ""
        mixed = self.mixed
        if mixed and len(self.frames) == mixed[-1].depth and mixed[-1].tl_start is None:
            mixed[-1].tl_start = t.start_pos


#: the token types the layout acts on -> the method of `_Reading` for them (the others pass
#: on as they are)
_ON = {
    "KEY": _Reading._key,
    "LAMBDA": _Reading._lambda,
    "RBRACE": _Reading._rbrace,
    "LET": _Reading._let,
    "IN_KW": _Reading._in,
    "LSQB": _Reading._open_params,
    "RSQB": _Reading._close_params,
    "LPAR": _Reading._open_paren,
    "RPAR": _Reading._close_paren,
    "SEMICOLON": _Reading._semicolon,
    "LET_S": _Reading._let_shared,
}


def connector(base: type):
    """A connector of the lexer to the post-lexer that hands the post-lexer the lexer's
    state with the token stream (lark's own passes only the stream); a subclass of the
    lexer class lark-cython's lexer thread requires."""

    class Connector(base):
        def __init__(self, lexer, postlex: _Layout):
            self.lexer = lexer
            self.postlex = postlex
            self._state = self._tokens = None

        def make_lexer_state(self, text):
            return self.lexer.make_lexer_state(text)

        def lex(self, lexer_state, parser_state):
            return self.postlex.process(self.lexer.lex(lexer_state, parser_state), lexer_state)

        def next_token(self, lexer_state, parser_state):
            # lark-cython's lexer thread pulls one token at a time
            if self._state is not lexer_state:
                self._state = lexer_state
                self._tokens = self.lex(lexer_state, parser_state)
            try:
                return next(self._tokens)
            except StopIteration:
                self._state = self._tokens = None
                raise EOFError from None

    return Connector
