"""The fast path: most equations, and most whole texts, read without lark's lexer and LALR
loop, giving exactly what the grammar gives.

* `FastPath.read_run`: where the post-lexer starts an equation (after an EQSEP, or on the
  line after `let`), it reads the run of *simple* equations from there with a few regular
  expressions (grammar.py `FAST_HEAD`, `FAST_OPS`, ...), each matching what the grammar's
  terminals match there or less, and hands the parser the whole run as ONE EQNS token (the
  lexer moved past it); the rule `eqn: EQNS` gives its equations.  A simple equation is
  `binders = prim[params] operands` with array types, all on its line but for its
  parameter list, whose parameters hold no jaxpr, followed by a line at the equation column
  or by the block's `in (`.  What it finds is read by the readers the grammar's rules use
  (readers.py: `new_var`, `operand_atoms`, `bind`; param_values.py: `read_value`), so the
  two paths share every rule but how tokens are found.  The first equation that is not
  simple, or has an error, ends the run untouched (warnings it added are dropped) and is
  read by the grammar: every error is the grammar's, in its words.  The commonest equation
  (one result, all on its line, a parameter list read before or none) is matched a line at
  a time by one expression (`_plain_line`) before the general reading.  A block all on the line
  of `let` (`let EQN; EQN in (`, how JAX prints small jaxprs) is read whole by
  `read_inline`, or not at all.  A parameter list of plain values is remembered with its
  text and reused, with fresh lists (`marshal` copies), where the text recurs.
* Whole texts (shared definitions and nested jaxprs included) are read with these readers
  and no lark at all by `plain.parse_plain`, which drives the builder and reads the
  equations with jaxprs among their parameters; this module knows nothing of either.

The commonest lines (`_plain_line`, and those whose parameter list alone goes over lines)
have a compiled twin (text/twin.py, docs/COMPILED.md), which reads those it is sure of with
the same readers and hands every other line back to `read_run`'s loop.

tests/test_parser_fast.py compares the two paths on the corpus, generated programs and
damaged texts.
"""

from __future__ import annotations

import functools
import marshal
import re
from sys import intern

from ...core import Eqn, JaxprError, Loc, Var
from ...lazy import LazyPattern
from .. import grammar as G
from ..twin import twin
from .param_values import Nested, ParamValues, fresh, memoizable
from .readers import Readers, define, fix_untyped_operands
from .scopes import SharedRef


class FastPath(Readers, ParamValues):
    """The fast path's readers of one parse.  `fast`: whether it is used at all; the
    parameter lists read so far (`param_lists`, by text).  It sets the post-lexer's
    `eqn_start` (for messages) at each equation it reads."""

    def __init__(self, text: str, path: str, fast: bool = True):
        super().__init__(text, path)
        self.fast = fast
        self.param_lists: dict[str, tuple[dict, list]] = {}
        # the compiled twin of `read_run`'s first loop (text/twin.py), or None
        lines = twin() if fast else None
        self.compiled_lines = lines.read_lines if lines is not None else None

    def read_run(self, p: int, line: int, eqcol: int) -> tuple[list[Eqn], int] | None:
        """The simple equations from s[p] on, which starts an equation on line `line` at
        the block's equation column `eqcol`: (the equations, where the last one's line
        break is), or None when the first one is not simple.

        An equation is simple when it is all on its line, or its parameter list alone goes
        on over lines, its parameters hold no jaxpr, and the next line starts at the
        equation column (another equation) or is the block's `in (`.  It is read with the
        grammar's readers into the same `Eqn` as the grammar's rules build, and its results
        are bound.  The first equation that is not simple (or has an error) ends the run,
        untouched, for the grammar.

        One function of over 80 lines on purpose: its loop over plain lines is the reference
        the compiled twin (`_twin.c`'s `read_lines`) mirrors step for step, and the reader's
        hottest loop, its state in locals; split, each piece would take that state as
        arguments on every equation, and the twin would no longer read against one loop."""
        s = self.s
        n = self.n
        table = self.tables[-1]
        path = self.path
        warnings = self.warnings
        head = G.FAST_HEAD.match
        indent = s[p - eqcol + 1 : p]  # of the block's equations
        compiled = self.compiled_lines
        # (on the compiled path the line the twin stops at is one `plain` refuses too: it goes
        # to the general way directly, and `plain` is never compiled)
        plain = _plain_line(indent) if compiled is None else None
        types = self.types
        new_tuple = tuple.__new__
        eqns = []
        end = -1
        remembered = self.remembered_params
        operands = self.plain_operands
        if compiled is not None:  # (what it reads with: the same state and readers)
            readers = (indent, table, types, remembered, self.line_operands, eqns, path)
            readers += (self.typed_literal, JaxprError, self.param_lists)
        while True:
            # the commonest equation first, a line at a time (`_plain_line`): the compiled
            # twin reads the lines it is sure of (the general way below the one it stops
            # at), this loop all of them on the Python path
            while True:
                if compiled is not None:
                    p, line, end = compiled(self, s, p, line, end, eqcol, *readers)
                    break
                if (m := plain(s, p)) is None:
                    break
                name, type_text, prim, params_text, ops = m.groups()
                t = types.get(type_text)
                if t is None:
                    break  # a type not read yet: the general way below reads it
                if params_text is None:
                    prm = {}
                elif (prm := remembered(params_text)) is None:
                    break  # a list not read yet
                if not ops:
                    inputs = ()
                elif (
                    ":" in ops
                    or "_" in ops
                    or "(" in ops
                    or None in (ins := [table.get(o) for o in ops[1:].split(" ")])
                ):  # a literal, `_`, `a_`, `inf`, an undefined name: as the twin reads them
                    if (inputs := operands(m.start(5), ops, table)) is None:
                        break
                else:
                    inputs = tuple(ins)
                out = Var(t, name)
                table[name] = out  # (`bind`: the name is not `_`)
                loc = new_tuple(Loc, (path, line, eqcol))  # (Loc(...) without its frame)
                e = Eqn(intern(prim), inputs, (out,), prm, loc)
                plain_params(e, True)
                eqns.append(e)
                self.eqn_start = p
                end = m.end() - 1
                p = end + eqcol  # (the next line starts with `indent`)
                line += 1
            m = head(s, p)
            if m is None:
                break
            nw = len(warnings)
            try:
                r = self.fast_eqn(m, table)
            except (JaxprError, Nested):
                r = None
            if r is not None:
                # the next line: another equation, the block's `in (`, or something else
                q = r[4]
                k = q + eqcol
                if k < n and s.startswith(indent, q + 1) and s[k] not in " \t":
                    c = s[k]
                    more = not (c == "i" and G.IN_KW.match(s, k))
                    if more and not ("a" <= c <= "z" or c == "_"):
                        r = None
                else:
                    k = G.INDENT.match(s, q + 1).end()
                    more = False
                    if not (k < n and k - q <= eqcol and G.IN_KW.match(s, k)):
                        r = None
            if r is None:
                del warnings[nw:]  # read again by the grammar
                break
            prim, inputs, outs, prm, q = r
            e = define(table, prim, inputs, outs, prm, Loc(path, line, eqcol))
            plain_params(e, True)
            eqns.append(e)
            self.eqn_start = p
            end = q
            if not more:
                break
            line += s.count("\n", p, k)
            p = k
        return (eqns, end) if eqns else None

    def read_inline(self, p: int, line: int) -> tuple[list[Eqn], int] | None:
        """The equations of a block on one line, `let EQN; EQN in (...)`, from s[p] on: (the
        equations, where the ` in (` after them is), or None (nothing bound) unless all are
        simple."""
        s = self.s
        table = self.tables[-1]
        bound = dict(table)
        nw = len(self.warnings)
        eqns = []
        # where the current line starts (found again only past a line break: a search back
        # from each equation would cross the whole line of equations before it)
        line_start = s.rfind("\n", 0, p)
        while True:
            m = G.FAST_HEAD.match(s, p)
            try:
                r = self.fast_eqn(m, table, True) if m is not None else None
            except (JaxprError, Nested):
                r = None
            if r is None:
                break
            prim, inputs, outs, prm, q = r
            col = p - line_start
            e = define(table, prim, inputs, outs, prm, Loc(self.path, line, col))
            plain_params(e, True)
            eqns.append(e)
            self.eqn_start = p
            if s.startswith("; ", q):
                breaks = s.count("\n", p, q)
                if breaks:
                    line += breaks
                    line_start = s.rfind("\n", p, q)
                p = q + 2
            elif s.startswith(" in (", q) and G.IN_KW.match(s, q + 1):
                return eqns, q
            else:
                break
        # the grammar reads the block: as it was
        table.clear()
        table.update(bound)
        del self.warnings[nw:]
        return None

    def fast_eqn(self, m, table: dict, inline: bool = False):
        """The equation whose binders and primitive `G.FAST_HEAD` matched: (primitive,
        inputs, outputs, parameters, where it ends), or None where it is not simple after
        all.  It ends at its line break, or `inline` (`read_inline`) at the first `;`, ` in (`
        or line break."""
        s = self.s
        e = m.end()
        c = s[e : e + 1]
        prm = {}
        if c == "[":
            r = self.fast_params(e + 1)
            if r is None:
                return None
            prm, e = r
            c = s[e : e + 1]
        if c == "\n" and not inline:
            q = e
            inputs = ()
        elif c == " ":
            q = s.find("\n", e) if not inline else _inline_end(s, e)
            if q < 0:
                return None
            k = q
            while s[k - 1] in " \t":
                k -= 1  # blanks before the line break (skipped by the grammar)
            inputs = () if k <= e else self.fast_operands(e, k, table)
            if inputs is None:
                return None
        elif c == ";" and inline:
            q = e
            inputs = ()
        else:
            return None
        name, type_text, more, prim = m.groups()  # one call: this runs per equation
        prim = intern(prim)  # one string per primitive, not one per equation (memory)
        t = self.types.get(type_text)
        out = Var(t, name) if t is not None else self.new_var(name, type_text, m.start(2))
        if not more:
            return prim, inputs, (out,), prm, q
        outs = [out]
        base = m.start(3)
        for b in G.FAST_BINDER.finditer(more):
            outs.append(self.new_var(b.group(1), b.group(2), base + b.start(2)))
        return prim, inputs, tuple(outs), prm, q

    def fast_params(self, j: int) -> tuple[dict, int] | None:
        """The parameters of the list whose `[` ends at s[j]: (dict, end of its `]`), or None
        where a value is left to the grammar (a jaxpr, a shared-jaxpr name).  A list of plain
        values is remembered with its text (the parse of a list depends on nothing else; the
        text goes up to the first `]` before a space or line break) and reused, with fresh
        lists, where that text recurs."""
        s = self.s
        a = s.find("] ", j)
        # only a `]` line end before `a` matters: searching the rest of the text each time is
        # quadratic where no `]` ends a line (programs whose lists all close mid-line)
        b = s.find("]\n", j, a if a >= 0 else len(s))
        stop = a if b < 0 or 0 <= a < b else b
        text = s[j - 1 : stop + 1] if stop >= 0 else None
        known = self.remembered_params(text) if text is not None else None
        if known is not None:
            return known, stop + 1
        broken = self.list_is_broken(j)
        d = {}
        while True:
            mk = G.KEY_TOKEN.match(s, j)
            if mk is None:
                break
            r = self.read_value(mk.end(), mk.group(1), broken)
            if r is None or type(r[0]) is SharedRef:
                return None
            d[mk.group(1)], j = r
        mr = G.RSQB_TOKEN.match(s, j)
        if mr is None:
            return None
        if text is not None and mr.end() == stop + 1 and all(map(memoizable, d.values())):
            self.param_lists[text] = _remembered(d)
        return d, mr.end()

    def remembered_params(self, text: str) -> dict | None:
        """The parameters of the list `text` (`[...]`) if one was read before (`fast_params`),
        with fresh lists inside, or None."""
        known = self.param_lists.get(text)
        if known is None:
            return None
        d, lists = known
        d = d.copy()
        for k, blob, v in lists:
            d[k] = marshal.loads(blob) if blob is not None else fresh(v)
        return d

    def plain_operands(self, e: int, ops: str, table: dict) -> tuple | None:
        """The operands `ops` of a plain line at s[e] (` x y 2.0:f32[]`), as the compiled
        twin's `plain_operands` reads them: each a variable `table` binds or a typed literal
        of the simplest kind (`G.SIMPLE_LITERAL`, read by `typed_literal`), else all of them by
        `line_operands` (`_`, `a_`, an untyped literal, a name not bound: the general way,
        whose regular expressions the commonest lines never need)."""
        out = []
        pos = e + 1
        simple = G.SIMPLE_LITERAL.fullmatch
        typed_literal = self.typed_literal
        for tok in ops[1:].split(" "):
            if ":" not in tok and "_" not in tok and "(" not in tok:
                v = table.get(tok)
            elif (m := simple(tok)) is not None:
                value = m.group(1)
                try:
                    v = typed_literal(value, pos, m.group(2), pos + len(value) + 1)
                except JaxprError:
                    v = None  # (worded by the general way)
            else:
                v = None
            if v is None:
                return self.line_operands(e, e + len(ops), table)
            out.append(v)
            pos += len(tok) + 1
        return tuple(out)

    def line_operands(self, e: int, q: int, table: dict) -> tuple | None:
        """`fast_operands` of a plain line's operands, or None (its warnings dropped) where
        the line is read another way."""
        warnings = self.warnings
        nw = len(warnings)
        try:
            inputs = self.fast_operands(e, q, table)
        except JaxprError:
            inputs = None
        if inputs is None:
            del warnings[nw:]
        return inputs

    def fast_operands(self, e: int, q: int, table: dict) -> tuple | None:
        """The atoms of the operands s[e:q] (` a b 1.0:f32[]`) as the grammar's OPERANDS
        reads them; None where that token would end elsewhere."""
        s = self.s
        ops = s[e:q]
        if ":" not in ops and "(" not in ops:
            out = []
            for name in ops[1:].split(" "):
                v = table.get(name)
                if v is None or name == "_":
                    break  # a literal, `_`, an undefined name, or not an operand
                out.append(v)  # (the names in the table are variable names)
            else:
                return tuple(out)
        mo = G.FAST_OPS.match(s, e)
        if mo is None or mo.end() != q:
            return None
        out = []
        if self.operand_atoms(ops, e, 0, table, out):
            fix_untyped_operands(out)
        return tuple(out)


#: `plain_params(e, True)`: the equation's parameters hold no jaxpr (`Eqn.no_subjaxprs`,
#: which `core.eqn_subjaxprs` would otherwise find out, value by value, at the first walk):
#: the fast path's parameter lists hold plain values only (`fast_params` leaves a list with a
#: jaxpr or a shared jaxpr's name to the grammar)
plain_params = Eqn.__dict__["no_subjaxprs"].__set__


@functools.cache
def _plain_line(indent: str):
    """The `match` of the commonest equation, at a block's `indent`: `name:TYPE =
    prim[params] operands` with one result (not `_`), a parameter list without `]` inside
    (or none), all on its line, the next line another equation or the block's `in (` at the
    same indentation.  Groups: name, type text, primitive, parameter list (`[...]`, or
    None), operands (with a leading space, or empty).  It matches less than `read_run`'s
    general reading takes, and its parts are read by the same readers."""
    return re.compile(
        rf"([a-z]+_?):({G.FAST_TYPE}) = ([A-Za-z_][A-Za-z0-9_.\-]*+)(\[[^\]\n]*\])?"
        rf"((?: [^ \n]+)*)\n(?={re.escape(indent)}[a-z_])"
    ).match


_INLINE_END = LazyPattern(r";| in \(|\n")


def _inline_end(s: str, e: int) -> int:
    """Where the operands of an equation on one line may end: the first `;`, ` in (` or line
    break from s[e] on (`fast_operands` checks that they do), or -1.  One search that stops
    at the first of them: three `find`s would each scan to their own (the end of a long line
    of equations, for every equation on it)."""
    m = _INLINE_END.search(s, e)
    return m.start() if m is not None else -1


def _remembered(d: dict) -> tuple[dict, list]:
    """A parameter list of memoizable values, as `fast_params` remembers it: the dict, and
    for each value with lists inside, (key, its marshal bytes or None, the value) to make
    fresh copies from (`marshal` rebuilds plain data, lists included, in C)."""
    lists = []
    for k, v in d.items():
        if type(v) in (list, tuple) and _has_list(v):
            lists.append((k, marshal.dumps(v) if _marshalable(v) else None, fresh(v)))
    return dict(d), lists


def _has_list(v) -> bool:
    t = type(v)
    return t is list or (t is tuple and any(map(_has_list, v)))


_MARSHALABLE = frozenset({int, float, complex, bool, str, type(None)})


def _marshalable(v) -> bool:
    """Plain data that `marshal` gives back with the same types: Python scalars, tuples and
    lists of them."""
    t = type(v)
    return t in _MARSHALABLE or (t in (tuple, list) and all(map(_marshalable, v)))
