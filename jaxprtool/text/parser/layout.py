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

import re
from typing import TYPE_CHECKING

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
_EQUATION_START = re.compile(r"(?!(?:nan|inf):)(?:[a-z]+_?|_):")
#: a line of `nan:T` and `inf:T` only: literals, or the binders of an equation (H1)
_LITERALS_OR_BINDERS = re.compile(r"[ \t]*(?:(?:nan|inf):\S+[ \t]*)+(?:#.*)?")


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
        st = self.st
        s = st.s
        Token = self.Token
        line_ctr = lexer_state.line_ctr

        def emit(kind: str, a: int, b: int):
            text = s[a:b]
            t = Token(kind, text, a, line_ctr.line, line_ctr.column)
            line_ctr.feed(text, True)
            t.end_line, t.end_column, t.end_pos = line_ctr.line, line_ctr.column, b
            return t

        def run(e: int, line: int, col: int):
            """The simple equations from s[e] on as one EQNS token (the lexer moved past
            them), or None (`FastPath.read_run`)."""
            r = st.read_run(e, line, col)
            if r is None:
                return None
            st.runs[e] = r[0]
            return emit("EQNS", e, r[1])

        def line_break(t, f, last: str):
            """The layout rule (§5.5) at the line break that token `t` ends with, in the
            equation block of frame `f` outside brackets (`last`: the token before the
            break): a line at the equation column (or ` = prim` one column right of it), or
            a misplaced one only an equation can start (`_misplaced_equation`, warned),
            starts an equation: EQSEP, then the fast path's run from there where it reads
            one; another line left of it ends the block (its `in (` must follow); a deeper
            one goes on with the equation.  Yields the tokens to pass on; returns whether
            the next token starts an equation (None: as it was)."""
            e, col = t.end_pos, t.end_column
            starts = col == f[2] or _bare_eq_at(s, e, col, f[2])
            if not starts and _misplaced_equation(s, e, col, f[2], last):
                warn_misindented(st, e, f"the first of its block at column {f[2]}")
                starts = True
            if starts:
                yield Token("EQSEP", "", e, t.end_line, col)
                # (only now: taking EQSEP, the parser reduced the equation before it, whose
                # results the run may use)
                r = run(e, t.end_line, col) if fast and st.block_end < 0 else None
                if r is None:
                    return True
                yield r
                return False
            if col < f[2]:
                st.block_end = e
            return None

        def jax_layout(f, e: int):
            """Warn where the block of frame `f`, its first equation (at s[e]) on the line
            after `let`, is not at the column JAX prints it at (`jax_column`)."""
            if f[2] != f[4]:
                warn_misindented(st, e, f"JAX prints this block's equations at column {f[4]}")

        def inline(j: int):
            """The block after `let` (at s[j]) when it is all on that line (`read_inline`)
            as one EQNS token, or None."""
            e = G.INDENT.match(s, j).end()
            if e == j or G.IN_KW.match(s, e):
                return None
            r = st.read_inline(e, line_ctr.line)
            if r is None:
                return None
            line_ctr.feed(s[j:e], False)  # the blanks the grammar skips
            frames[-1][2] = line_ctr.column  # the first equation's column
            st.runs[e] = r[0]
            return emit("EQNS", e, r[1])

        fast = st.fast
        frames = st.frames  # per open `{ lambda`: [in_block, depth, eqcol, start, JAX's eqcol]
        broken: list[bool] = []  # per open parameter list: broken over lines?
        mixed: list[_Mixed] = []
        n = len(s)
        head = False  # the next token starts an equation
        after_let = False
        last = ""  # the type of the last token that is not a line break
        let_line = 0  # the line of the last `let`
        for t in stream:
            tt = t.type
            if tt == "NL":
                # decided before the next token is lexed, so it is lexed in the right state
                if frames:
                    f = frames[-1]
                    e = t.end_pos
                    if f[0] and not f[1] and e < n and not G.IN_KW.match(s, e):
                        if (
                            after_let
                            and fast
                            and st.block_end < 0
                            and (r := run(e, t.end_line, t.end_column)) is not None
                        ):
                            # the block's first equation, on the line after `let`
                            after_let = False
                            f[2] = t.end_column
                            jax_layout(f, e)
                            yield r
                        elif (starts := (yield from line_break(t, f, last))) is not None:
                            head = starts
                continue
            last = tt
            if after_let:
                # the first token of the equation block: its column is the equation column
                after_let = False
                f = frames[-1]
                if tt != "IN_KW":
                    # ` = prim` (JAX < 0.4.22): the empty binder list sits one column left
                    f[2] = t.column - 1 if tt == "EQ_PRIM" and t.value[0] == "=" else t.column
                    st.eqn_start = t.start_pos
                    if t.line != let_line:
                        jax_layout(f, t.start_pos)
                else:
                    f[0] = False
            if st.block_end >= 0 and tt != "IN_KW":
                block_ended(st)
            if head:
                head = False
                st.eqn_start = t.start_pos
            if tt == "OPERANDS" or tt == "HEAD_OPS":
                yield t
                if frames and "\n" in t.value:
                    # the line break after the operands: as for NL
                    f = frames[-1]
                    e = t.end_pos
                    if f[0] and not f[1] and e < n and s[e] != "#" and not G.IN_KW.match(s, e):
                        if (starts := (yield from line_break(t, f, tt))) is not None:
                            head = starts
            elif tt == "HEAD" or tt == "BINDER" or tt == "EQ_PRIM":
                yield t
            elif tt == "KEY":
                i = t.end_pos
                key = t.value.lstrip()[:-1]
                try:
                    r = st.read_value(i, key, broken[-1] if broken else False)
                except Nested as nested:
                    yield t
                    mixed.append(_Mixed(i, key, len(frames)))
                    yield emit("VPIECE", i, nested.pos)
                    continue
                if r is None:
                    yield t
                else:
                    # `key=value` as one token; the value read here
                    st.values[t.start_pos] = (key, r[0])
                    e = r[1]
                    text = s[i:e]
                    t.type = "PARAM"
                    t.value += text
                    if "\n" in text:
                        line_ctr.feed(text, True)
                    else:
                        line_ctr.char_pos = e
                        line_ctr.column += e - i
                    t.end_line, t.end_column, t.end_pos = line_ctr.line, line_ctr.column, e
                    yield t
            elif tt == "LAMBDA":
                in_value = bool(mixed) and len(frames) == mixed[-1].depth
                frames.append([False, 0, 0, t.start_pos, jax_column(s, t.start_pos, in_value)])
                if len(frames) > MAX_NESTING:
                    st.fail(too_deep(), t.start_pos, "E003")
                yield t
            elif tt == "RBRACE":
                yield t
                if not frames:
                    continue  # (the parser rejects it)
                f = frames.pop()
                if mixed and len(frames) == mixed[-1].depth:
                    m = mixed[-1]
                    q = t.end_pos
                    if G.SHARED_IN.match(s, q):
                        continue  # a shared definition inside the value: its `in` follows
                    m.done[m.tl_start if m.tl_start is not None else f[3]] = (None, q)
                    m.tl_start = None
                    try:
                        e = st.rescan(m.start, m.key, m.done)
                    except Nested as nested:
                        if nested.pos > q:
                            yield emit("VPIECE", q, nested.pos)
                        continue
                    mixed.pop()
                    if e > q:
                        yield emit("VPIECE", q, e)
            elif tt == "LET":
                let_line = t.line
                yield t
                if frames:
                    frames[-1][0] = True
                    after_let = True
                    if fast and st.block_end < 0 and (r := inline(t.end_pos)) is not None:
                        after_let = False
                        yield r
            elif tt == "IN_KW":
                if frames and not frames[-1][1]:
                    frames[-1][0] = False
                    st.block_end = -1
                yield t
            elif tt == "LSQB":
                if frames:
                    frames[-1][1] += 1
                broken.append(st.list_is_broken(t.end_pos))
                yield t
            elif tt == "RSQB":
                if frames:
                    frames[-1][1] -= 1
                if broken:
                    broken.pop()
                yield t
            elif tt == "LPAR":
                if frames:
                    frames[-1][1] += 1
                yield t
            elif tt == "RPAR":
                if frames:
                    frames[-1][1] -= 1
                yield t
            elif tt == "SEMICOLON":
                if frames and frames[-1][0] and not frames[-1][1]:
                    # `;` between equations (single-line form)
                    head = True
                    yield Token.new_borrow_pos("EQSEP", ";", t)
                else:
                    yield t
            elif tt == "LET_S":
                m = G.SHARED_DEF.match(s, t.start_pos)
                st.last_shared_name = m.group(1) if m else ""
                if mixed and len(frames) == mixed[-1].depth and mixed[-1].tl_start is None:
                    mixed[-1].tl_start = t.start_pos
                yield t
            else:
                yield t


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
