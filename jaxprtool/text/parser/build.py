"""The IR builder: the grammar's rule callbacks, passed to `Lark(transformer=...)`.

Each callback builds its piece of the IR from its children while the LALR parser reduces
(no parse tree is made).  Each `{ lambda` opens a symbol table when it is shifted
(`lam`); an equation's outputs enter the table after its operands are resolved.  The
callbacks read tokens with the shared readers (readers.py) and values with param_values.py,
as the fast path does; `plain.parse_plain` calls `lam`, `constvars`, `outvars`,
`jaxpr` and `start` itself, as lark would.

Ref-state syntax becomes ordinary equations (`eqn_get`, `eqn_set`, `eqn_swap`,
`eqn_addupdate`):
  - `y:T <- x[IDX]`            -> Eqn("get", (x, *ivars), (y,), {"indexer": Opaque(TPL)})
  - `x[IDX] <- v`              -> Eqn("swap", (x, v, *ivars), (Var(T_v, hint="_"),), {...})
                                  (the result is unused: the printer prints the
                                  set form when the output is printed as `_`)
  - `y:T, x[IDX] <- x[IDX], v` -> Eqn("swap", (x, v, *ivars), (y,), {...})
  - `x[IDX] += v`              -> Eqn("addupdate", (x, v, *ivars), (), {...})
TPL is the printed transform text after the ref name (`[...]`, `[0,:]`,
`[c,1:]`, `[0]{bitcast(f32)}`), with every *variable* inside it replaced by
`$0`, `$1`, ... in order of appearance; `ivars` are those variables (integer
indices stay in the text).  To print: substitute the names of `ivars` for
`$k`, then `NAME(x) + TPL`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ... import core, params
from ...core import Eqn, Jaxpr, Literal, Loc, Var
from .diagnostics import underscore_warning
from .readers import REBOUND, bind, define, fix_untyped
from .scopes import SharedRef, has_ref, resolve_dropped_outvars, share_unreferenced

if TYPE_CHECKING:
    from .state import ParseState


class _Build:
    """Rule callbacks: each builds its piece of the IR from its children."""

    Token: type  # the lark token class of its parser (set by _build)

    def __init__(self):
        self.st: ParseState | None = None

    def start(self, c):
        st = self.st
        st.close_scope(c[:-1], 0, st.n + 1, True)
        if len(c) > 1:
            share_unreferenced(c[-1], [j for _, j, _ in c[:-1]])
        return c[-1]

    def shared(self, c):
        st = self.st
        name = c[1].value
        j = c[2]
        for o in st.open_defs.get(name, ()):
            # H5: a str()-ed jaxpr re-prints a definition that JAX also hoisted to the
            # top (the same object): keep one object so printing can hoist it again
            if core.alpha_equal(o, j):
                j = o
        st.open_defs.setdefault(name, []).append(j)
        st.shared_defs.setdefault(id(j), (name, c[0].start_pos))
        return (name, j, c[0].start_pos)

    def vtoplevel(self, c):
        if len(c) == 1:
            return c[0]
        st = self.st
        start = c[0][2]
        st.close_scope(c[:-1], start, st.last_end, False)
        st.jaxpr_at[start] = (c[-1], st.last_end)
        return c[-1]

    def lam(self, c):
        self.st.tables.append({})
        return c[0]

    def constvars(self, c):
        if not c:
            return []
        st = self.st
        lst, t = c
        v = st.binder(t)
        bind(st.tables[-1], v)
        lst.append(v)
        return lst

    invars = constvars

    def jaxpr(self, c):
        st = self.st
        st.tables.pop()
        lam = c[0]
        end = c[-1].end_pos
        effects = None
        if len(c) == 9:
            inner = c[7].value
            inner = inner[inner.index("{") + 1 : -1].strip()
            effects = tuple(x.strip() for x in inner.split(", ")) if inner else ()
        j = Jaxpr(tuple(c[1]), tuple(c[2]), c[4], c[6], effects)
        if st.last_outvar_pending:
            st.outvar_pending[id(j)] = (j, st.last_outvar_pending)
            st.last_outvar_pending = []
        st.jaxpr_at[lam.start_pos] = (j, end)
        st.last_end = end
        return j

    def eqns(self, c):
        return tuple(c[0]) if c else ()

    def eqn_list(self, c):
        # an item is an equation, or a list of them (EQNS)
        if len(c) == 1:
            return c[0] if type(c[0]) is list else c
        lst = c[0]
        x = c[2]
        if type(x) is list:
            lst.extend(x)
        else:
            lst.append(x)
        return lst

    def eqn_run(self, c):
        return self.st.runs.pop(c[0].start_pos)

    def more_operands(self, c):
        if len(c) == 1:
            return c
        lst = c[0]
        lst.append(c[1])
        return lst

    def outvars(self, c):
        st = self.st
        table = st.tables[-1]
        if REBOUND in table:
            # `_` as an outvar after two `_` bindings: the jit equation holding this jaxpr
            # may tell which one from its result types (`resolve_dropped_outvars`)
            pending = [(i, t) for i, t in enumerate(c) if t.type == "VAR" and t.value == "_"]
            st.last_outvar_pending = [
                (i, underscore_warning(st.loc(t.start_pos))) for i, t in pending
            ]
            out = [
                table["_"] if t.type == "VAR" and t.value == "_" else st.atom(t, table) for t in c
            ]
        else:
            out = [st.atom(t, table) for t in c]
        if any(type(a) is Literal and not a.typed for a in out):
            fix_untyped(out, [])
        return tuple(out)

    def eqn_plain(self, c):
        st = self.st
        table = st.tables[-1]
        first = c[0]
        n = len(c)
        k = 0
        outs = []
        while True:
            t = c[k]
            if t.type != "BINDER":
                break
            outs.append(st.binder(t))
            k += 1
        prim = t.value
        prim = prim[prim.index("=") + 1 :].lstrip()
        k += 1
        prm = {}
        if k < n and type(c[k]) is dict:
            prm = c[k]
            k += 1
            if st.outvar_pending:
                resolve_dropped_outvars(st, prim, prm, outs)
        inputs = st.operands(c[k:], table) if k < n else ()
        return define(table, prim, inputs, outs, prm, self._loc(first))

    def eqn_head_ops(self, c):
        st = self.st
        t = c[0]
        text = t.value
        k = text.index(":")
        e = text.index(" = ", k)
        p = text.index(" ", e + 3)
        v = st.new_var(text[:k], text[k + 1 : e], t.start_pos + k + 1)
        table = st.tables[-1]
        inputs = st.operands([t, *c[1]] if len(c) > 1 else c, table, p)
        return define(table, text[e + 3 : p], inputs, (v,), {}, self._loc(t))

    def eqn_head(self, c):
        st = self.st
        t = c[0]
        text = t.value
        k = text.index(":")
        e = text.rindex(" = ")
        v = st.new_var(text[:k], text[k + 1 : e], t.start_pos + k + 1)
        prm = {}
        n = len(c)
        i = 1
        if n > 1 and type(c[1]) is dict:
            prm = c[1]
            i = 2
            if st.outvar_pending:
                resolve_dropped_outvars(st, text[e + 3 :], prm, (v,))
        table = st.tables[-1]
        if i < n:
            ops = c[i:]
            if type(ops[-1]) is list:
                ops = ops[:-1] + ops[-1]
            inputs = st.operands(ops, table)
        else:
            inputs = ()
        return define(table, text[e + 3 :], inputs, (v,), prm, self._loc(t))

    def eqn_noout(self, c):
        st = self.st
        first = c[0]
        prm = {}
        k = 1
        if len(c) > 1 and type(c[1]) is dict:
            prm = c[1]
            k = 2
        inputs = st.operands(c[k:], st.tables[-1])
        return Eqn(first.value, inputs, (), prm, self._loc(first))

    def eqn_bare(self, c):
        """` = prim[...] operands`: an equation without results as JAX < 0.4.22 printed it."""
        e = self.eqn_noout(c)
        return Eqn(c[0].value.lstrip(" =\t\n"), e.inputs, (), e.params, e.loc, bare_eq=True)

    def _loc(self, t) -> Loc:
        return Loc(self.st.path, t.line, t.column)

    def eqn_get(self, c):
        st = self.st
        table = st.tables[-1]
        y = st.binder(c[0])
        x, tpl, ivars = st.ref(c[1], table)
        prm = {"indexer": params.Opaque(tpl)}
        return define(table, "get", (x, *ivars), (y,), prm, self._loc(c[0]))

    def eqn_set(self, c):
        st = self.st
        table = st.tables[-1]
        x, tpl, ivars = st.ref(c[0], table)
        a = st.atom(c[1], table)
        dummy = Var(a.type, "_")  # (not a binder: it enters no table)
        prm = {"indexer": params.Opaque(tpl)}
        return Eqn("swap", (x, a, *ivars), (dummy,), prm, self._loc(c[0]))

    def eqn_addupdate(self, c):
        st = self.st
        table = st.tables[-1]
        x, tpl, ivars = st.ref(c[0], table)
        a = st.atom(c[1], table)
        prm = {"indexer": params.Opaque(tpl)}
        return Eqn("addupdate", (x, a, *ivars), (), prm, self._loc(c[0]))

    def eqn_swap(self, c):
        st = self.st
        table = st.tables[-1]
        y = st.binder(c[0])
        x, tpl, ivars = st.ref(c[1], table)
        x2, tpl2, ivars2 = st.ref(c[2], table)
        if x2 is not x or tpl2 != tpl or ivars2 != ivars:
            st.fail("the two sides of a swap equation index different references", c[0].start_pos)
        a = st.atom(c[3], table)
        prm = {"indexer": params.Opaque(tpl)}
        return define(table, "swap", (x, a, *ivars), (y,), prm, self._loc(c[0]))

    def params(self, c):
        d = {}
        if len(c) == 3:
            st = self.st
            values = st.values
            pending = st.pending
            for x in c[1]:
                if type(x) is tuple:
                    key, v, pos = x
                else:
                    pos = x.start_pos
                    key, v = values[pos]
                d[key] = v
                if type(v) is SharedRef or (type(v) is tuple and has_ref(v)):
                    pending.append((pos, d, key))
        return d

    def plist(self, c):
        if len(c) == 1:
            return c
        lst = c[0]
        lst.append(c[1])
        return lst

    def param_items(self, c):
        st = self.st
        k = c[0]
        key = k.value.lstrip()[:-1]
        if len(c) == 2 and not isinstance(c[1], self.Token):
            return (key, c[1], k.start_pos)
        return (key, st.value_with_jaxprs(k.end_pos, key, st.jaxpr_at), k.start_pos)

    def jtuple(self, c):
        st = self.st
        out = []
        for x in c:
            if isinstance(x, Jaxpr):
                out.append(x)
            elif x.value in st.shared_names:
                out.append(SharedRef(x.value, x.start_pos))
            else:
                st.expected("a jaxpr or a shared-jaxpr name in the tuple", x.start_pos)
        return tuple(out)
