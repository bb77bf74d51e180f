"""Texts read without lark: `parse_plain` reads a text that is one jaxpr (one `lambda`) whose
equations the fast path reads all (`fast.FastPath.read_run`, `read_inline`), handing its
header, outputs and jaxpr to the grammar's rule callbacks (`build._Build`) as lark would
hand them.  So a small program costs no lark import and no grammar load (start-up), and a
large flat one no LALR loop.  At anything else (a nested or shared jaxpr, another layout,
an error) the text is read by the grammar afresh (`lalr.parse_lark`).

It is a driver of the parse, as `lalr` is: it sits above the builder and the parse state,
which know nothing of it.
"""

from __future__ import annotations

from ...core import Jaxpr, JaxprError, Var
from .. import grammar as G
from .build import _Build
from .diagnostics import jax_column, warn_misindented
from .param_values import Nested
from .state import ParseState


class _Tok:
    """A token as `_Build`'s callbacks read lark's: kind, text, position (line and column
    from the position)."""

    __slots__ = ("type", "value", "start_pos", "end_pos", "_st")

    def __init__(self, st: ParseState, kind: str, value: str, start_pos: int):
        self.type = kind
        self.value = value
        self.start_pos = start_pos
        self.end_pos = start_pos + len(value)
        self._st = st

    @property
    def line(self) -> int:
        return self._st.loc(self.start_pos).line

    @property
    def column(self) -> int:
        return self._st.loc(self.start_pos).col


def parse_plain(st: ParseState) -> Jaxpr | None:
    """The jaxpr of a text that is one jaxpr whose equations the fast path reads all
    (`FastPath.read_run`, `read_inline`), read without building lark: the grammar's callbacks
    (`_Build`) are called as lark would call them, so the IR is the same.  None (with `st`
    spent) at anything else: another layout, a nested or shared jaxpr, an error; the
    grammar then reads the text afresh, and reports errors in its words."""
    try:
        return _plain(st)
    except (JaxprError, Nested):
        return None


def _plain(st: ParseState) -> Jaxpr | None:
    s = st.s
    n = st.n
    b = _Build()
    b.st = st
    i = st.ws(0)
    m = G.LAMBDA.match(s, i)
    if m is None:
        return None
    lam = b.lam([_Tok(st, "LAMBDA", m.group(), i)])
    consts, j = _plain_binders(st, b, m.end())
    if not s.startswith(";", j):
        return None
    invars, j = _plain_binders(st, b, j + 1)
    if not s.startswith(".", j):
        return None
    j = G.BLANK.match(s, j + 1).end()
    if not G.LET.match(s, j):
        return None
    j += 3
    if s.startswith("\n", j):  # equations on their own lines
        e = G.BLANK.match(s, j).end()
        if G.IN_KW.match(s, e):
            eqns, k = [], e
        else:
            col = e - s.rfind("\n", 0, e)
            r = st.read_run(e, s.count("\n", 0, e) + 1, col)
            if r is None:
                return None
            if col != (jax := jax_column(s, i, False)):
                warn_misindented(st, e, f"JAX prints this block's equations at column {jax}")
            eqns, q = r
            k = G.INDENT.match(s, q + 1).end()
            if not G.IN_KW.match(s, k):
                return None  # the run ended before an equation it does not read
    else:  # on the line of `let`
        e = G.INDENT.match(s, j).end()
        if e == j:
            return None
        if G.IN_KW.match(s, e):
            eqns, k = [], e
        else:
            r = st.read_inline(e, s.count("\n", 0, e) + 1)
            if r is None:
                return None
            eqns, k = r[0], r[1] + 1
    r = _plain_outvars(st, k + 4)  # after `in (`
    if r is None:
        return None
    outs, j = r
    j = G.BLANK.match(s, j).end()
    if not s.startswith("}", j) or st.ws(j + 1) != n:
        return None
    rbrace = _Tok(st, "RBRACE", "}", j)
    jaxpr = b.jaxpr([lam, consts, invars, None, tuple(eqns), None, b.outvars(outs), rbrace])
    return b.start([jaxpr])


def _plain_binders(st: ParseState, b: _Build, j: int) -> tuple[list[Var], int]:
    """The binders from s[j] on, bound as `_Build.constvars` binds them, and where the text
    after them is."""
    s = st.s
    lst = b.constvars([])
    while True:
        j = G.BLANK.match(s, j).end()
        m = G.FAST_BINDER_TOKEN.match(s, j)
        if m is None:
            return lst, j
        lst = b.constvars([lst, _Tok(st, "BINDER", m.group(), j)])
        j = m.end()


def _plain_outvars(st: ParseState, j: int) -> tuple[list[_Tok], int] | None:
    """The tokens of an output list from s[j] on (after its `(`), and where its `)` ends;
    None where the grammar would read other tokens there."""
    s = st.s
    toks = []
    j = G.BLANK.match(s, j).end()
    if s.startswith(")", j):
        return toks, j + 1
    while True:
        m = G.OUTVAR_TOKEN.match(s, j)
        if m is None:
            return None
        kind = "LITERAL" if m.group(1) else "ULITERAL" if m.group(2) else "VAR"
        toks.append(_Tok(st, kind, m.group(), j))
        j = G.BLANK.match(s, m.end()).end()
        if s.startswith(",", j):
            j = G.BLANK.match(s, j + 1).end()
        elif not s.startswith(")", j):
            return None
        if s.startswith(")", j):
            return toks, j + 1
