"""Texts read without lark: `parse_plain` reads the texts of JAX's common forms (shared
definitions `let NAME = { lambda ... } in`, nested jaxprs as parameter values, `jaxpr=NAME`
references) whose equations the fast path reads (`fast.FastPath.read_run`, `read_inline`)
or, for an equation with a jaxpr among its parameters, this module, handing the headers,
outputs and jaxprs to the grammar's rule callbacks (`build._Build`) as lark would hand
them.  So a program costs no lark import and no grammar load (start-up), and a large one no
LALR loop.  At anything else (another layout, a block not where JAX prints it but the
outermost, a comment, a value with jaxprs inside, an error) the text is
read by the grammar afresh (`lalr.parse_lark`): this module never words an error.

It is a driver of the parse, as `lalr` is: it sits above the builder and the parse state,
which know nothing of it.
"""

from __future__ import annotations

from ...core import Jaxpr, JaxprError, Loc, Var
from .. import grammar as G
from .build import _Build
from .diagnostics import MAX_NESTING, jax_column, warn_misindented
from .param_values import Nested
from .readers import define
from .scopes import SharedRef, check_shared, has_ref, resolve_dropped_outvars
from .state import ParseState


class _Refused(Exception):
    """The text is left to the grammar (something this module does not read)."""


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


class _Lines:
    """Line numbers of positions met in increasing order, each found from the last one (a
    count from the start of the text for each nested jaxpr would be quadratic)."""

    __slots__ = ("s", "pos", "line")

    def __init__(self, s: str):
        self.s = s
        self.pos = 0
        self.line = 1

    def at(self, pos: int) -> int:
        if pos >= self.pos:
            self.line += self.s.count("\n", self.pos, pos)
        else:
            self.line -= self.s.count("\n", pos, self.pos)
        self.pos = pos
        return self.line


def parse_plain(st: ParseState) -> Jaxpr | None:
    """The jaxpr of a text of JAX's common forms, read without building lark: the grammar's
    callbacks (`_Build`) are called as lark would call them, so the IR is the same.  None
    (with `st` spent) at anything else: another layout, a value with jaxprs inside, an error; the
    grammar then reads the text afresh, and reports errors in its words."""
    try:
        return _Plain(st).text()
    except (JaxprError, Nested, _Refused, RecursionError):
        return None


class _Plain:
    """One text read without lark: its shared definitions, then its jaxpr."""

    def __init__(self, st: ParseState):
        self.st = st
        self.s = st.s
        self.b = _Build()
        self.b.st = st
        self.lines = _Lines(st.s)

    def text(self) -> Jaxpr:
        st, s, b = self.st, self.s, self.b
        i = st.ws(0)
        shareds = []
        while (m := G.SHARED_DEF.match(s, i)) is not None:
            name = _Tok(st, "NAME", m.group(1), m.start(1))
            j, e = self.jaxpr(m.end(), 1, False)
            k = G.SHARED_IN.match(s, e)
            if k is None:
                raise _Refused
            let = _Tok(st, "LET_S", "let", i)
            shareds.append(b.shared([let, name, j, _Tok(st, "IN_SHARED", "in", k.end() - 2)]))
            i = G.BLANK.match(s, k.end()).end()
        j, e = self.jaxpr(i, 1, not shareds)
        if st.ws(e) != st.n:
            raise _Refused
        top = b.start([*shareds, j])
        if st.shared_defs:
            check_shared(st, top)
        return top

    def jaxpr(self, i: int, depth: int, outermost: bool) -> tuple[Jaxpr, int]:
        """The jaxpr `{ lambda ...}` at s[i], and where its `}` ends.  Its equations go on
        the line of `let` or on the lines after it at the column JAX prints them at (the
        outermost one's elsewhere with JAX's warning, as the grammar warns)."""
        st, s, b = self.st, self.s, self.b
        if depth > MAX_NESTING:
            raise _Refused
        m = G.LAMBDA.match(s, i)
        if m is None:
            raise _Refused
        lam = b.lam([_Tok(st, "LAMBDA", m.group(), i)])
        consts, j = _plain_binders(st, b, m.end())
        if not s.startswith(";", j):
            raise _Refused
        invars, j = _plain_binders(st, b, j + 1)
        if not s.startswith(".", j):
            raise _Refused
        j = G.BLANK.match(s, j + 1).end()
        if not G.LET.match(s, j):
            raise _Refused
        let = _Tok(st, "LET", "let", j)
        j += 3
        if s.startswith("\n", j):  # equations on their own lines
            e = G.BLANK.match(s, j).end()
            if G.IN_KW.match(s, e):
                eqns, k = [], e
            else:
                col = e - s.rfind("\n", 0, e)
                jax = jax_column(s, i, False)
                if col != jax:
                    if not outermost:
                        raise _Refused
                    warn_misindented(st, e, f"JAX prints this block's equations at column {jax}")
                eqns, k = self.block(e, col, depth)
        else:  # on the line of `let`
            e = G.INDENT.match(s, j).end()
            if e == j:
                raise _Refused
            if G.IN_KW.match(s, e):
                eqns, k = [], e
            else:
                r = st.read_inline(e, self.lines.at(e))
                if r is None:
                    raise _Refused
                eqns, k = r[0], r[1] + 1
        in_kw = _Tok(st, "IN_KW", "in", k)
        r = _plain_outvars(st, k + 4)  # after `in (`
        if r is None:
            raise _Refused
        outs, j = r
        j = G.BLANK.match(s, j).end()
        if not s.startswith("}", j):
            raise _Refused
        rbrace = _Tok(st, "RBRACE", "}", j)
        c = [lam, consts, invars, let, tuple(eqns), in_kw, b.outvars(outs), rbrace]
        return b.jaxpr(c), j + 1

    def block(self, p: int, col: int, depth: int) -> tuple[list, int]:
        """The equations of a block from s[p] on (the first one's, at column `col`) to its
        `in (`: runs of the fast path's, and between them the equations with jaxprs among
        their parameters.  (the equations, where `in (` is)"""
        st, s = self.st, self.s
        eqns = []
        while True:
            line = self.lines.at(p)
            r = st.read_run(p, line, col)
            if r is None:
                r = self.nested_eqn(p, line, col, depth)
                if r is None:
                    raise _Refused
                eqns.append(r[0])
                q = r[1]
            else:
                eqns.extend(r[0])
                q = r[1]
            # the next line: the block's `in (`, or another equation at the column
            k = G.INDENT.match(s, q + 1).end()
            if k - q <= col and G.IN_KW.match(s, k):
                return eqns, k
            if s[q + 1 : k] != " " * (col - 1) or not (
                "a" <= s[k : k + 1] <= "z" or s[k : k + 1] == "_"
            ):
                raise _Refused
            p = k

    def nested_eqn(self, p: int, line: int, col: int, depth: int):
        """The equation at s[p] whose parameter list holds a jaxpr or a shared jaxpr's name,
        read as `eqn_plain` reads it: (the equation, where its line break is), or None."""
        st, s = self.st, self.s
        m = G.FAST_HEAD.match(s, p)
        if m is None or not s.startswith("[", m.end()):
            return None
        prm, e = self.params(m.end() + 1, depth)
        table = st.tables[-1]
        q = s.find("\n", e)
        if q < 0:
            return None
        k = q
        while s[k - 1] in " \t":
            k -= 1  # blanks before the line break (skipped by the grammar)
        if k <= e:
            inputs = ()
        elif s[e] == " ":
            inputs = st.fast_operands(e, k, table)
            if inputs is None:
                return None
        else:
            return None
        name, type_text, more, prim = m.groups()
        outs = [st.new_var(name, type_text, m.start(2))]
        for x in G.FAST_BINDER.finditer(more):
            outs.append(st.new_var(x.group(1), x.group(2), m.start(3) + x.start(2)))
        if st.outvar_pending:
            resolve_dropped_outvars(st, prim, prm, outs)
        st.eqn_start = p
        return define(table, prim, inputs, outs, prm, Loc(st.path, line, col)), q

    def params(self, j: int, depth: int) -> tuple[dict, int]:
        """The parameter list whose `[` ends at s[j], its jaxprs read here and its other
        values by the readers both paths share: (dict, end of its `]`).  A shared jaxpr's
        name waits, as the grammar's does, for the end of the text (`SharedScopes`)."""
        st, s = self.st, self.s
        broken = st.list_is_broken(j)
        d = {}
        while (mk := G.KEY_TOKEN.match(s, j)) is not None:
            key, i = mk.group(1), mk.end()
            if G.LAMBDA.match(s, i):
                d[key], j = self.jaxpr(i, depth + 1, False)
                continue
            if s.startswith("(", i) and (m := G.JAXPR_TUPLE.match(s, i)):
                if m.group(1) or m.group(2) in st.shared_names:
                    d[key], j = self.jaxpr_tuple(i + 1, depth)
                    if has_ref(d[key]):
                        st.pending.append((mk.start(1), d, key))
                    continue
            r = st.read_value(i, key, broken)
            if r is None:
                raise _Refused  # `let ... in {...}`
            d[key], j = r
            if type(r[0]) is SharedRef:
                st.pending.append((mk.start(1), d, key))
        mr = G.RSQB_TOKEN.match(s, j)
        if mr is None:
            raise _Refused
        return d, mr.end()

    def jaxpr_tuple(self, k: int, depth: int) -> tuple[tuple, int]:
        """The tuple of jaxprs and shared jaxprs' names after its `(` at s[k] (`branches=(`),
        as the grammar's `jtuple` reads it: (the tuple, where its `)` ends)."""
        st, s = self.st, self.s
        items = []
        while True:
            k = G.BLANK.match(s, k).end()
            if s.startswith(")", k):
                return tuple(items), k + 1
            if G.LAMBDA.match(s, k):
                j, k = self.jaxpr(k, depth + 1, False)
                items.append(j)
                continue
            m = G.BARE_NAME.match(s, k)
            if m is None or m.group() not in st.shared_names:
                raise _Refused
            items.append(SharedRef(m.group(), k))
            k = m.end()


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


#: the first characters of a variable's name (`grammar.VARNAME`)
_NAME_START = frozenset("abcdefghijklmnopqrstuvwxyz_")
#: the words a literal that starts as a name does (`inf:f32[]`, `nanj`)
_LITERAL_WORDS = ("inf", "nan")


def _plain_outvars(st: ParseState, j: int) -> tuple[list[_Tok], int] | None:
    """The tokens of an output list from s[j] on (after its `(`), and where its `)` ends;
    None where the grammar would read other tokens there."""
    s = st.s
    toks = []
    j = G.BLANK.match(s, j).end()
    if s.startswith(")", j):
        return toks, j + 1
    while True:
        if s[j : j + 1] in _NAME_START and not s.startswith(_LITERAL_WORDS, j):
            # a variable: no literal starts so (OUTVAR_TOKEN, ~0.5 ms to compile, would
            # read the same token)
            m, kind = G.VARNAME.match(s, j), "VAR"
        else:
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
