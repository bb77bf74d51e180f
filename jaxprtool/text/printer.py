"""The printer: IR -> the text JAX's `str(jaxpr)` produces.

`print_jaxpr(jaxpr, style=None, width=80)` reproduces `jax._src.core.pp_toplevel_jaxpr`
followed by `Doc.format(width)` (no trailing newline):

1. Shared jaxprs.  A breadth-first walk over the parameters counts how often
   each nested jaxpr object occurs (paths, not objects: a jaxpr inside a
   shared one counts once per occurrence of its parent).  It visits an
   equation's jaxprs in the order of JAX's parameter dict (the record's
   `jaxpr_params_order`: while's cond_jaxpr before body_jaxpr).  Jaxprs occurring
   more than once, or (0.10+) with more than 10 equations, are printed first
   as `let NAME = { ... } in`, in discovery order, and referenced by NAME.
   NAME is the `name` parameter of the first equation holding it, `<>`
   stripped, else `jaxpr`; repeated names get suffixes 1, 2, ...
2. Naming.  One counter for the whole printout (`a`..`z`, `ba`, ...), skipping
   shared-jaxpr names; names are assigned in printing order.  Top-level
   equation outputs that the top-level jaxpr never uses print as `_`.  For
   `jit`/`pjit` (0.6.2+) the inner jaxpr's invars/outvars take the names of the
   equation's operands/results (JAX's `suggest_same_var_names`).  JAX names
   Var objects: a jaxpr holding the same Vars as one printed before (a copy)
   prints its names again; the text shows it as binders named exactly as that
   jaxpr's, and such a jaxpr takes its names (`_same_vars`).
3. Safety.  JAX's naming can produce text that reads back as a different
   program (FORMAT.md §2: a name, `_` included, bound twice in one scope
   before a use: `_` is bound again and again inside nested jaxprs, where it
   comes from the outer `_` by name suggestion).  After naming, every printed
   scope is checked with the reader's rule ("a use refers to the most recent
   binding of that name in its own jaxpr", for `_` as for any name; a jit
   body's `_` outvars as `resolve_dropped_outvars` reads them) and every
   variable that would be misread, or whose use of `_` the reader would warn
   about (after two `_` bindings), gets a fresh name from the counter.  So
   `parse(print_jaxpr(ir))` is alpha-equal to `ir`, and the text equals JAX's
   whenever JAX's text is unambiguous.
4. Layout.  Documents mirror JAX's (`pp_jaxpr_skeleton`, `pp_eqn`,
   `pp_kv_pairs`, `pp_vars`, the custom `pp_eqn_rules`) and are laid out by
   `pretty.format`, which reproduces JAX's Wadler-Lindig printer exactly.
   An ordinary equation (no nested jaxpr, no syntax of its own) is one lazy
   document: its flat line, built while naming it (passes 2 and 3 read the
   scope in the same walk), and its full form laid out directly by
   `_render_eqn` only where the line does not fit.  `_Printer(style,
   fast=False)` builds every equation's document as JAX does instead; the
   two print the same text (tests/test_printer_fast.py).  The loop over
   ordinary equations has a compiled twin (text/twin.py, docs/COMPILED.md)
   that calls back here for every text it does not copy.

Parameters print sorted by key (`name=` first for jit/pjit/custom_jvp_call/
custom_vjp_call; 0.12 HiPrims such as `CustomRoot` keep their order), and the
parameters JAX's print rules hide are hidden here too when an equation built
by the tool carries them (FORMAT.md §9).  Jaxprs inside other parameter
objects (`_LinearSolveTuple(matvec={...})`) are printed by a fresh `str()`, as
JAX does (own names, own shared jaxprs, column 0, width 80).
"""

from __future__ import annotations

import functools
import marshal
from typing import Any

from .. import core
from ..core import Jaxpr, Literal, Var
from ..lazy import DTypeName, LazyPattern, is_dtype, is_numpy_scalar
from ..params import EnumValue, Record, SpacedList, format_value
from ..record import prim as record_of
from . import pretty as pp
from .style import DEFAULT_STYLE, Style, walk_jaxprs
from .twin import twin

__all__ = ["print_jaxpr", "encode_name", "literal_text", "Namer"]

#: namedtuple parameter classes: JAX's shared-jaxpr walk looks inside them (they are tuples)
_NAMEDTUPLES = frozenset({"_LinearSolveTuple"})
_ADDR = LazyPattern(r" at 0x([0-9a-fA-F]+)")


def encode_name(n: int) -> str:
    """JAX's `_encode_digits_alphabetic`: 0 -> a, 25 -> z, 26 -> ba, 676 -> baa."""
    s = ""
    while not s or n:
        n, i = divmod(n, 26)
        s = chr(97 + i) + s
    return s


def print_jaxpr(jaxpr: Jaxpr, style: Style | None = None, width: int = 80, end: str = "") -> str:
    """The text of `jaxpr` exactly as JAX's `str(jaxpr)` (no trailing newline), then `end`
    (a command's final newline: joined with the lines, not added to a copy of the text)."""
    with core.gc_paused():
        return pp.format(_document(jaxpr, style, width), width, end)


def _document(jaxpr: Jaxpr, style: Style | None, width: int) -> pp.Doc:
    """The printout's document, its names given and its lines built for `width`."""
    printer = _Printer(style or DEFAULT_STYLE)
    printer.width = width
    return printer.toplevel(jaxpr)


def print_jaxpr_pieces(jaxpr: Jaxpr, style: Style | None = None, width: int = 80, end: str = ""):
    """`print_jaxpr`'s text in pieces (`pretty.format_pieces`), for a writer that writes
    each before it asks for the next: the names and lines are made now, the layout as the
    pieces are asked for."""
    with core.gc_paused():
        doc = _document(jaxpr, style, width)
    return _paused(pp.format_pieces(doc, width, end))


def _paused(pieces):
    with core.gc_paused():
        yield from pieces


def literal_text(lit: Literal, typed: bool = True) -> str:
    v = lit.value
    if v is True or v is False:
        s = "True" if v else "False"
    elif isinstance(v, float):
        s = repr(v)
    elif isinstance(v, int):
        s = str(v)
    elif isinstance(v, complex):
        s = str(v)
    elif isinstance(v, str):
        s = "(b'',)" if v == "float0" else v
    elif v is Ellipsis:
        s = "[...]"
    elif is_numpy_scalar(v):
        s = str(v.item())
    else:
        s = str(v)
    if typed:
        return s + ":" + str(lit.type)
    return s


class Namer:
    """One set of names for several printouts: a program, then equations of it (or of
    programs derived from it) shown one at a time, as `explain` shows a walk.

    The names are the printer's own: `jaxpr_text(j)` prints `j` exactly as `print_jaxpr`
    does (naming the variables that have no name yet in printing order), and
    `eqn_text(e)` prints one equation as it appears in a program printout, so names agree
    between the two.  `name(v)` is the name of a variable (a fresh one from the printout's
    counter on first sight), `atom(x)` also gives the text of a literal, `set_name(v, n)`
    chooses the name of a variable not named yet.  `Namer(style, after=other)` takes its
    fresh names after the ones `other` has used, so no name reads as one of `other`'s.
    Names are keyed by the variables themselves (a Var is equal only to itself), and the
    Namer keeps the programs and equations it printed alive (texts of their parameter
    values are kept by the values' ids)."""

    def __init__(self, style: Style | None = None, after: Namer | None = None):
        self._p = _Printer(style or DEFAULT_STYLE)
        if after is not None:
            self._p.counter = max(self._p.counter, after._p.counter)
        self._keep: list = []

    @property
    def style(self) -> Style:
        return self._p.style

    def named(self, v) -> bool:
        """`v` already has a name."""
        return isinstance(v, Var) and v in self._p.names

    def name(self, v: Var) -> str:
        return self._p.name(v)

    def atom(self, a) -> str:
        """The name of a variable, or the text of a literal (typed as the style prints it)."""
        if isinstance(a, Var):
            return self.name(a)
        return literal_text(a, a.typed and self._p.style.typed_literals)

    def set_name(self, v, name: str) -> None:
        """Name `v` (a Var not named yet; anything else is ignored)."""
        if isinstance(v, Var) and v not in self._p.names:
            self._p.names[v] = name

    def eqn_text(self, e: core.Eqn, width: int = 80) -> str:
        """`e` as a program printout shows it (its variables named if they are not yet)."""
        self._keep.append(e)
        self._p.value_ids = {}  # (a value may have changed since the last printout)
        self._p._name_eqn(e)
        return pp.format(self._p._eqn(e), width)

    def jaxpr_text(self, j: Jaxpr, width: int = 80) -> str:
        """`j` as `print_jaxpr` prints it, keeping the names already given."""
        self._keep.append(j)
        self._p.width = width
        with core.gc_paused():
            return pp.format(self._p.toplevel(j), width)


def printed_names(jaxpr: Jaxpr, style: Style | None = None):
    """`name(var)`: the name `print_jaxpr(jaxpr, style)` gives each variable of `jaxpr`
    (for what shows a program beside its printout: diffs, graphs)."""
    namer = Namer(style)
    namer.jaxpr_text(jaxpr)
    return namer.name


# ---------------------------------------------------------------- params


def printed_params(e: core.Eqn, style: Style = DEFAULT_STYLE) -> list[tuple[str, Any]]:
    """The (key, value) pairs JAX prints for this equation, in order (the primitive's
    `print_params` rule, else every parameter sorted by key).  Two equations whose printed
    parameters are equal are the same equation to JAX, whatever the IR holds besides (a
    parameter that JAX leaves implicit, such as broadcast_in_dim's shape in 0.12)."""
    return _printed_params(e, style, record_of(e.prim))


def _printed_params(e: core.Eqn, style: Style, rec) -> list[tuple[str, Any]]:
    """`printed_params(e, style)`, `rec` the record of `e`'s primitive."""
    if rec.params_since:
        e = _params_in_style(e, rec.params_since, style)
    p = e.params
    if not p:
        return []
    rule = rec.print_params
    if rule is not None:
        return rule(e, style)
    if e.prim[:1].isupper():  # 0.12 HiPrims print their params in declaration order
        return list(p.items())
    return sorted(p.items())


def _params_in_style(e: core.Eqn, since: dict, style: Style) -> core.Eqn:
    """`e` with the parameters JAX added after it first had the primitive as `style`'s
    version prints them: from that version on, printed (with the value older versions always
    used where the IR lacks it: a text of an older version); before, hidden at that value."""
    p = e.params
    for k, (first, old) in since.items():
        if style.version >= tuple(first) and k not in p:
            p = {**p, k: old}
        elif style.version < tuple(first) and k in p and p[k] == old:
            p = {key: v for key, v in p.items() if key != k}
    return e if p is e.params else e.replace(params=p)


def _is_jaxpr_tuple(v) -> bool:
    return type(v) is tuple and all(isinstance(j, Jaxpr) for j in v)


def _hoist_name(e: core.Eqn) -> str | None:
    rule = record_of(e.prim).hoist_name
    if rule is not None:
        return rule(e)
    n = e.params.get("name")
    return n if isinstance(n, str) else None


def _bfs_subjaxprs(
    e: core.Eqn, first: tuple[str, ...] | None = None, in_values: list | None = None
) -> list[Jaxpr]:
    """The jaxprs JAX's shared-jaxpr walk finds in an equation (`jaxprs_in_params`), in the
    order of JAX's parameter dict: the parameters `first` (the primitive's
    `jaxpr_params_order`), then the others in the IR's order.  Those that are fields of a
    `str()`-ed value are also appended to `in_values`."""
    out = []
    p = e.params
    if first is None:
        values = p.values()
    else:
        values = [p[k] for k in first if k in p] + [v for k, v in p.items() if k not in first]
    for v in values:
        if isinstance(v, tuple):
            for x in v:
                if isinstance(x, Jaxpr):
                    out.append(x)
        elif isinstance(v, Jaxpr):
            out.append(v)
        elif isinstance(v, Record) and v.cls in _NAMEDTUPLES:
            for _, x in v.fields:
                if isinstance(x, Jaxpr):
                    out.append(x)
                    if in_values is not None:
                        in_values.append(x)
    return out


def _int_tree_text(v) -> str | None:
    """`format_value(v)` of tuples and lists of ints and None (dimension numbers, axes), in one
    walk; None for anything else."""
    parts = []
    for x in v:
        c = x.__class__
        if c is int:
            parts.append(str(x))
        elif x is None:
            parts.append("None")
        elif c is tuple or c is list:
            t = _int_tree_text(x)
            if t is None:
                return None
            parts.append(t)
        else:
            return None
    if v.__class__ is list:
        return "[" + ", ".join(parts) + "]"
    if len(parts) == 1:
        return "(" + parts[0] + ",)"
    return "(" + ", ".join(parts) + ")"


def _has_jaxpr(v) -> bool:
    if isinstance(v, Jaxpr):
        return True
    if isinstance(v, (tuple, list, frozenset)):
        return any(_has_jaxpr(x) for x in v)
    if isinstance(v, Record):
        return any(_has_jaxpr(x) for _, x in v.fields)
    return False


# ---------------------------------------------------------------- the printer


class _Printer:
    """`fast=False` prints every equation through the generic document path (`_name_eqn`,
    `_check_scope`, `_eqn`); the default builds the line of an ordinary equation while
    naming it (tests check that both print the same text)."""

    def __init__(self, style: Style, fast: bool = True):
        # (no reference cycles: a printout's structures go as soon as it is printed,
        # rather than on the collector's next pass over everything allocated meanwhile)
        self.style = style
        self.fast = fast
        self.names: dict[Var, str] = {}  # var -> printed name (see `_scope_table`)
        self.shared: dict[int, str] = {}  # id(jaxpr) -> hoisted name
        self.shared_names: set[str] = set()
        self.counter = 0
        self.type_str: dict[int, str] = {}
        self.keep: list = []
        self.pairs_cache: dict[int, list] = {}
        self.drop_hints: set[Var] = set()
        # jaxprs whose outvars take the names of an equation's results (id -> those results):
        # the reader takes an outvar `_` there to be the most recent `_` binder of that
        # result's type
        self.typed_outvars: dict[int, tuple] = {}
        self.scopes: list[Jaxpr] = []  # every jaxpr printed in full (each is one naming scope)
        # (number of binders, first and last binder's hint) -> the jaxprs named so far with
        # such binders, and the ids of the jaxprs already looked up (`_same_vars`)
        self.twins: dict[tuple, list[Jaxpr]] = {}
        self.twin_keys: dict[int, tuple | None] = {}
        self.no_twins: set[int] = set()
        self.value_cache: dict = {}
        self.tree_texts: dict[bytes, str | None] = {}  # `_tree_text`'s
        # id(value) -> printed text, for one printout (`keep` holds the values alive)
        self.value_ids: dict[int, str] = {}
        self.recs: dict[str, Any] = {}  # prim -> its record
        # id(jaxpr) -> the line documents of its equations (None: built by `_eqn`; a string:
        # the flat text of one that fits at the equations' least indentation, its document
        # built by `_eqn` only where it does not fit), and their flat width
        self.lines: dict[int, list] = {}
        self.lines_width: dict[int, int] = {}
        #: the layout width the lines are built for (any other still prints right)
        self.width = 80
        # id(jaxpr) -> what the naming pass saw of its scope (`_Scope`), this printout
        self.scope_state: dict[int, _Scope] = {}
        self.suffixes = style.version < (0, 5)
        self.typed_literals = style.typed_literals
        # the compiled twin of `_name_eqns`' loop (text/twin.py), or None; which of its
        # lines it builds, by primitive (`_line_kind`)
        compiled = twin() if fast else None
        self.compiled_lines = compiled.name_var_lines if compiled is not None else None
        self.compiled_drop = compiled.drop_unread_vars if compiled is not None else None
        # what each line the compiled twin builds holds besides its texts: its full form
        # laid out by the twin of `_render_eqn` too
        self.line_head = _LINE_HEAD
        if compiled is not None:
            self.line_head = (pp.LAZY, _build_eqn, compiled.render_eqn, _REBOUND)
        self.line_kinds: dict[str, int] = {}

    def _rec(self, prim: str):
        """`record.prim(prim)`, looked up once per printout."""
        rec = self.recs.get(prim)
        if rec is None:
            rec = self.recs[prim] = record_of(prim)
        return rec

    # ------------------------------------------------------------ naming
    def fresh(self) -> str:
        """The next name of the counter that no shared jaxpr has taken."""
        c = self.counter
        self.counter = c + 1
        if c >= len(_NAMES):
            _grow_names(c + (c >> 2) + 64)  # (a quarter more: names made, not all used)
        n = _NAMES[c]
        if n in self.shared_names:
            return self.fresh()
        return n

    def name(self, v: Var) -> str:
        n = self.names.get(v)
        if n is None:
            # a dropped binder (JAX's DropVar) prints `_` without taking a name
            n = self.names[v] = "_" if v in self.drop_hints else self.fresh()
        return n

    def suggest(self, for_vars, like_vars) -> None:
        if len(for_vars) != len(like_vars):
            return
        used: set[Var] = set()
        names = self.names
        for f, like in zip(for_vars, like_vars):
            if isinstance(like, Var) and like not in used and isinstance(f, Var) and f not in names:
                used.add(like)
                names[f] = self.name(like)

    # ------------------------------------------------------------ pass 1: names
    def toplevel(self, top: Jaxpr) -> pp.Doc:
        self.value_ids = {}
        self.lines = {}
        self.scope_state = {}
        self._find_shared(top)
        shared = [(self.shared[id(j)], j) for j in self.shared_order]
        # 0.4.35 registered a shared jaxpr only once its definition was printed:
        # earlier definitions print later-defined ones inline.
        progressive = self.style.version < (0, 5)
        if progressive:
            self.shared = {}
        for name, j in shared:
            self._name_jaxpr(j)
            self.shared[id(j)] = name
        self._name_jaxpr(top)
        self._fix_ambiguities()
        docs = []
        if progressive:
            self.shared = {}
        for name, j in shared:
            head = [pp.text("let "), pp.text(name), pp.text(" = ")]
            docs.append(pp.concat([*head, self._skeleton(j), pp.text(" in"), pp.brk()]))
            self.shared[id(j)] = name
        docs.append(self._jaxpr_doc(top))
        return pp.concat(docs)

    def _find_shared(self, top: Jaxpr) -> None:
        """JAX's breadth-first count of sub-jaxpr occurrences (see module docstring); on the
        way, JAX's `_dropvars` of `top` and the binders that print `_` as JAX's DropVar
        (`drop_hints`)."""
        from collections import deque

        order: list[Jaxpr] = []
        index: dict[int, int] = {id(top): -1}
        parents: dict[int, list[int]] = {}  # id(child) -> ids of parents (one per occurrence)
        hint: dict[int, str] = {}
        drops = self.drop_hints = set()
        in_values: list[Jaxpr] = []
        q = deque([top])
        while q:
            j = q.popleft()
            if j is top:
                with_params, cand, used = self._drop_unused(top)
            else:
                with_params, cand, used = [], [], None
                for e in j.eqns:
                    for v in e.outputs:
                        if v.hint == "_":
                            cand.append(v)
                    if e.params:
                        with_params.append(e)
            for e in with_params:
                if e.no_subjaxprs:  # (known once a walk or pass has asked)
                    continue
                nm = None
                rec = self.recs.get(e.prim) or self._rec(e.prim)
                for sub in _bfs_subjaxprs(e, rec.jaxpr_params_order, in_values):
                    if id(sub) not in index:
                        index[id(sub)] = len(order)
                        order.append(sub)
                        q.append(sub)
                    parents.setdefault(id(sub), []).append(id(j))
                    if id(sub) not in hint:
                        if nm is None:
                            nm = _hoist_name(e) or ""
                        if nm:
                            hint[id(sub)] = nm.strip("<>")
            if cand:
                drops.update(self._unused(j, cand, used))
        # the jaxprs of `str()`-ed values: their names are a fresh printout's, no clue to
        # Vars shared with another jaxpr of this one (`_same_vars`)
        self.no_twins = {id(x) for r in in_values for x in walk_jaxprs(r, core.eqn_subjaxprs)}
        multi: dict[int, bool] = {id(top): False}
        for j in order:  # BFS order is not topological in general: resolve lazily
            self._multi(id(j), parents, multi)
        big = self.style.hoist_large
        counts: dict[str, int] = {}
        self.shared_order = []
        for j in order:
            if not (multi[id(j)] or (big and len(j.eqns) > 10)):
                continue
            name = hint.get(id(j), "jaxpr")
            c = counts.get(name, 0)
            if c > 0:
                counts[name] = c + 1
                name = name + str(c)
                counts[name] = counts.get(name, 0) + 1
            else:
                counts[name] = 1
            self.shared[id(j)] = name
            self.shared_names.add(name)
            self.shared_order.append(j)

    def _multi(self, jid: int, parents, multi) -> bool:
        stack = [jid]
        while stack:
            x = stack[-1]
            if x in multi:
                stack.pop()
                continue
            ps = parents[x]
            if len(ps) > 1:
                multi[x] = True
                stack.pop()
                continue
            p = ps[0]
            if p in multi:
                multi[x] = multi[p]
                stack.pop()
            else:
                stack.append(p)
        return multi[jid]

    def _drop_unused(self, top: Jaxpr) -> tuple[list[core.Eqn], list[Var], set]:
        """JAX's `_dropvars`: the results of `top`'s equations that no later equation reads
        and `top` does not return are `_`; in the same (backward) walk, what `_find_shared`
        needs of `top`: its equations with parameters, in order, the binders whose hint is
        `_`, and every atom `top` reads."""
        names = self.names
        # the atoms read, themselves (Vars hash by identity, a literal remembers its hash): no
        # int made per operand, as its id would be
        used = set(top.outvars)
        with_params = []
        cand = []
        if self.compiled_drop is not None and type(top.eqns) is tuple:
            self.compiled_drop(top.eqns, used, names, cand, with_params)  # (this loop's twin)
            with_params.reverse()
            return with_params, cand, used
        for e in reversed(top.eqns):
            for v in e.outputs:
                if v not in used:
                    names[v] = "_"
                if v.hint == "_":
                    cand.append(v)
            used.update(e.inputs)
            if e.params:
                with_params.append(e)
        with_params.reverse()
        return with_params, cand, used

    @staticmethod
    def _unused(j: Jaxpr, cand: list[Var], used: set | None) -> list[Var]:
        """The binders in `cand` that `j` never reads (`used`: the atoms it
        reads)."""
        if used is None:
            used = set(j.outvars)
            for e in j.eqns:
                used.update(e.inputs)
        return [v for v in cand if v not in used]

    def _name_binders(self, vs) -> None:
        names = self.names
        drops = self.drop_hints
        for v in vs:
            if v not in names:
                if v in drops:
                    names[v] = "_"
                else:
                    n = self.fresh()
                    h = v.hint
                    if self.suffixes and h and h[-1] == "_" and len(h) > 1:
                        n += "_"  # 0.4.35 printed Var.suffix (unused cond-branch inputs: `f_`)
                    names[v] = n

    def _name_uses(self, atoms) -> None:
        names = self.names
        for a in atoms:
            if isinstance(a, Var) and a not in names:
                names[a] = self.fresh()

    def _name_jaxpr(self, j: Jaxpr) -> None:
        """Assign names in JAX's printing order (a walk mirroring the document build)."""
        self.scopes.append(j)
        self._same_vars(j)
        self._name_binders(j.constvars)
        self._name_binders(j.invars)
        if self.fast:
            self._name_eqns(j)
        else:
            for e in j.eqns:
                self._name_eqn(e)
        self._name_uses(j.outvars)
        key = self.twin_keys.get(id(j))
        if key is not None:
            self.twins.setdefault(key, []).append(j)

    def _same_vars(self, j: Jaxpr) -> None:
        """JAX names Var objects, once per printout: a jaxpr that is another object than one
        printed before but holds the same Vars (a copy with one equation rebuilt, as JAX's
        partial evaluation makes of a jitted function called twice) prints that one's names
        again, its binders restarting at `a` (`let softplus2 = { lambda ; a:f32[3,4]. let`),
        where a jaxpr with Vars of its own continues the counter.  The text shows such a
        copy as binders named exactly as an earlier jaxpr's, in the same order and of the
        same types: those binders (not named yet) take that jaxpr's names, when it was
        printed with the names the text gave it.  Runs before the name suggestions of the
        equation holding `j` (JAX suggests names only for Vars that have none); keeps the key
        under which `j` is looked up, once it is named, in `twin_keys`."""
        if id(j) in self.twin_keys:
            return
        n, first, last = _binder_ends(j)
        if not n or first.hint is None or last.hint is None or id(j) in self.no_twins:
            self.twin_keys[id(j)] = None
            return
        key = self.twin_keys[id(j)] = (n, first.hint, last.hint)
        twins = self.twins.get(key)
        if not twins:  # (most jaxprs: their binders are not gathered)
            return
        bs = _jaxpr_binders(j)
        names = self.names
        for k in twins:
            ks = _jaxpr_binders(k)
            if all(
                v.hint == w.hint and v.type == w.type and (w.hint == "_" or names.get(w) == w.hint)
                for v, w in zip(bs, ks)
            ) and any(w.hint != "_" for w in ks):
                for v, w in zip(bs, ks):
                    if v not in names:
                        names[v] = names[w]
                return

    def _name_eqns(self, j: Jaxpr) -> None:
        """`_name_eqn` of each equation of `j`, in one walk that also builds the line document
        of each ordinary equation (what `_eqn` builds, kept in `lines`) and reads the scope
        as `_check_scope` does (kept in `scope_state`, finished by `_fix_ambiguities`).

        One function of over 80 lines on purpose: its loop is the reference the compiled
        twin (`_twin.c`'s `name_var_lines`) mirrors step for step, and the printer's hottest
        loop, its state in locals; split, each piece would take that state as arguments on
        every equation, and the twin would no longer read against one loop."""
        names = self.names
        scope = _scope_table()
        watched: set[Var] = set()  # (see `_bind`)
        for v in (*j.constvars, *j.invars):
            _bind(scope, names[v], v, watched)
        bad: list[Var] = []
        style = self.style
        typed = style.typed_literals
        untyped = not typed
        eq_empty = style.eq_without_outputs
        recs = self.recs
        vids = self.value_ids
        ts = self.type_str
        drops = self.drop_hints
        suffixes = self.suffixes
        fresh = self.fresh
        docs: list = []
        eqns = j.eqns
        fits = self.width - _EQN_INDENT  # (a line this wide fits where it is least indented)
        total = 0  # the lines' flat width
        compiled = self.compiled_lines
        if compiled is not None:  # the equations the compiled twin leaves to this loop
            seen = [False, 0]
            eqns = self._compiled_lines(compiled, eqns, docs, scope, watched, bad, seen)
        for e in eqns:
            prim = e.prim
            rec = recs.get(prim) or self._rec(prim)
            line = None
            if rec.print_eqn is None and rec.suggest_names is None:
                # an ordinary equation: its parameters' texts, unless one is a jaxpr
                kvs = []
                p = e.params
                if p:
                    if rec.print_params is not None or rec.params_since:
                        pairs = self._kept_pairs(e)
                    elif prim[:1].isupper():
                        pairs = list(p.items())
                    else:
                        pairs = sorted(p.items())
                    for k, v in pairs:
                        t = vids.get(id(v))
                        if t is None and (t := self._param_text(v)) is None:  # a jaxpr
                            self.pairs_cache[id(e)] = pairs
                            kvs = None
                            break
                        kvs.append(k + "=" + t)
                if kvs is not None:
                    # the uses as the reader sees them (before the results are bound)
                    ins = []
                    late = False  # a use not named yet: named after the results
                    for a in e.inputs:
                        if a.__class__ is Var:
                            n = names.get(a)
                            if n is None:
                                late = True
                            elif (scope.get(n) is not a or (n == "_" and _REBOUND in scope)) and (
                                a in watched
                            ):
                                bad.append(a)
                            ins.append(n)
                        else:
                            ins.append(self._literal(a))
                            if not a.typed:
                                untyped = True
                    outs = []
                    for v in e.outputs:
                        n = names.get(v)
                        if n is None:
                            if v in drops:
                                n = "_"
                            else:
                                n = fresh()
                                if suffixes:
                                    h = v.hint
                                    if h and h[-1] == "_" and len(h) > 1:
                                        n += "_"  # as `_name_binders`
                            names[v] = n
                        _bind(scope, n, v, watched)
                        t = v.type
                        outs.append(n + ":" + (ts.get(id(t)) or self._type(t)))
                    if late:
                        self._name_uses(e.inputs)
                        ins = [names[a] if n is None else n for a, n in zip(e.inputs, ins)]
                    name = prim if rec.print_name is None else rec.print_name(e, style)
                    if outs or eq_empty:
                        if kvs:
                            flat = f"{' '.join(outs)} = {name}[{' '.join(kvs)}] {' '.join(ins)}"
                        else:
                            flat = f"{' '.join(outs)} = {name} {' '.join(ins)}"
                        eq = True
                    else:
                        if kvs:
                            flat = f"{name}[{' '.join(kvs)}] {' '.join(ins)}"
                        else:
                            flat = f"{name} {' '.join(ins)}"
                        eq = False
                    w = len(flat) if flat.isascii() else len(flat.encode("utf-8"))
                    total += w
                    if w <= fits:
                        line = flat
                    else:
                        args = (name, kvs, ins, outs, eq)
                        line = (pp.LAZY, flat, _build_eqn, args, _render_eqn, w)
            if line is None:
                self._name_eqn(e)
                untyped = _read_scope(e, names, scope, watched, bad) or untyped
            docs.append(line)
        if compiled is not None:
            untyped = untyped or seen[0]
            total += seen[1]
        self.lines[id(j)] = docs
        self.lines_width[id(j)] = total
        if id(j) not in self.scope_state:
            self.scope_state[id(j)] = _Scope(scope, watched, bad, untyped)

    def _compiled_lines(self, compiled, eqns, docs, scope, watched, bad, seen):
        """The equations of `eqns` that the compiled twin of `_name_eqns`' loop
        (`_twin.name_var_lines`) leaves to the Python loop, in order; it builds the lines of the
        others, in between, with the same state and the same callbacks for every text
        (`_line_kind`, `_kept_pairs`, `_param_text`, `_literal`, `_type`; `fresh`'s names
        taken from `_NAMES` as it takes them, itself called where it makes more), sets
        `seen[0]` where one prints an untyped literal and adds their flat width to
        `seen[1]`."""
        if type(eqns) is not tuple:
            eqns = tuple(eqns)
        state = (docs, scope, watched, bad, self.names, self.value_ids, self.type_str)
        state += (self.drop_hints, self.line_kinds, self._line_kind, self._kept_pairs)
        state += (self._param_text, self._literal, self._type, self.fresh, self.suffixes)
        state += (self.style.eq_without_outputs, self.line_head, self.width - _EQN_INDENT)
        state += (self, _NAMES, self.shared_names)  # (`fresh`'s state)
        state += (self.tree_texts,)  # (`_param_text`'s texts found again, as it finds them)
        k, n = 0, len(eqns)
        while True:
            k, untyped, width = compiled(eqns, k, *state)
            if untyped:
                seen[0] = True
            seen[1] += width
            if k >= n:
                return
            yield eqns[k]
            k += 1

    def _line_kind(self, prim: str) -> int:
        """How the compiled twin builds the line of an equation of `prim`: 0, it leaves it to
        `_name_eqns` (its own syntax, names suggested, a printed name, or a 0.12 HiPrim's
        parameter order); 1, its parameters sorted by key; 2, `_kept_pairs`.  The
        conditions are `_name_eqns`' own."""
        rec = self._rec(prim)
        if rec.print_eqn is not None or rec.suggest_names is not None:
            return 0
        if rec.print_name is not None:
            return 0
        if rec.print_params is not None or rec.params_since:
            return 2
        return 0 if prim[:1].isupper() else 1

    def _kept_pairs(self, e: core.Eqn) -> list:
        """`printed_params(e)`, each value that is not the equation's own kept alive for the
        printout (the texts are kept by the ids of the values; the equation's own live as
        long as the program printed)."""
        pairs = _printed_params(e, self.style, self.recs.get(e.prim) or self._rec(e.prim))
        own = e.params
        for k, v in pairs:
            if own.get(k, _UNSEEN) is not v:
                self.keep.append(v)
        return pairs

    def _param_text(self, v) -> str | None:
        """The text of a parameter value, kept by its id for the printout (`value_ids`), or
        None for a jaxpr or a tuple of them (printed as a document)."""
        c = v.__class__
        if (c is list or (c is tuple and v)) and (t := self._tree_text(v)) is not None:
            pass  # (as `_value_str`, without its cache)
        elif isinstance(v, Jaxpr) or _is_jaxpr_tuple(v):
            return None
        else:
            t = self._value_str(v)
        self.value_ids[id(v)] = t
        return t

    def _tree_text(self, v) -> str | None:
        """`_int_tree_text(v)`, found again by the value's `marshal` bytes (version 2: no
        back-references), which tell the exact type of every element, as that function reads
        them: equal parameter lists of different equations (the reader gives each its own
        lists, as `dot_general`'s `dimension_numbers`) are read once."""
        try:
            key = marshal.dumps(v, 2)
        except ValueError:  # (an element of another type: not a tree of ints)
            return _int_tree_text(v)
        t = self.tree_texts.get(key, _UNSEEN)
        if t is _UNSEEN:
            t = self.tree_texts[key] = _int_tree_text(v)
        return t

    def _literal(self, a: Literal) -> str:
        """`literal_text(a, a.typed and style.typed_literals)`, its type text cached."""
        v = a.value
        c = v.__class__
        if c is float:
            s = repr(v)
        elif c is int:
            s = str(v)
        else:
            s = literal_text(a, False)
        if a.typed and self.typed_literals:
            t = a.type
            return s + ":" + (self.type_str.get(id(t)) or self._type(t))
        return s

    def _name_sub(self, v) -> None:
        if isinstance(v, Jaxpr):
            if id(v) not in self.shared:
                self._name_jaxpr(v)
        elif _is_jaxpr_tuple(v):
            for j in v:
                if id(j) not in self.shared:
                    self._name_jaxpr(j)

    def _name_eqn(self, e: core.Eqn) -> None:
        prim = e.prim
        rec = self._rec(prim)
        own = rec.print_eqn
        if own is not None and own(e, _NamingHandle(self)) is not None:
            return
        key = rec.suggest_names
        if key is not None and self.style.suggest_names:
            inner = e.params.get(key)
            if isinstance(inner, Jaxpr) and id(inner) not in self.shared:
                self._same_vars(inner)
                self.suggest(inner.invars, e.inputs)
                self.suggest(inner.outvars, e.outputs)
                self.typed_outvars[id(inner)] = tuple(e.outputs)
        self._name_binders(e.outputs)
        for _, v in self._pairs(e):
            self._name_sub(v)
        self._name_uses(e.inputs)

    # ------------------------------------------------------------ pass 2: safety
    def _fix_ambiguities(self) -> None:
        scopes = list({id(j): j for j in self.scopes}.values())
        state = self.scope_state
        for r in range(100):
            bad: dict[Var, None] = {}  # ordered: fresh names must not depend on ids
            for j in scopes:
                st = state.get(id(j)) if r == 0 else None
                if st is None:
                    self._check_scope(j, bad)
                else:  # read by the naming walk
                    self._finish_scope(j, st, bad)
            if not bad:
                return
            self.lines.clear()  # their names change
            for vid in bad:
                self.names[vid] = self.fresh()

    def _check_scope(self, j: Jaxpr, bad: dict[Var, None]) -> None:
        """Mark the variables whose use would be read as another binding, and
        variables named `nan`/`inf` where a bare (untyped) `nan`/`inf` literal is printed."""
        names = self.names
        scope = _scope_table()
        watched: set[Var] = set()
        shadowed: list[Var] = []
        untyped = not self.style.typed_literals
        for v in j.constvars + j.invars:
            _bind(scope, names[v], v, watched)
        for e in j.eqns:
            untyped = _read_scope(e, names, scope, watched, shadowed) or untyped
        self._finish_scope(j, _Scope(scope, watched, shadowed, untyped), bad)

    def _finish_scope(self, j: Jaxpr, st: _Scope, bad: dict[Var, None]) -> None:
        """`_check_scope` after the equations: the shadowed uses `st` found, the outvars, and
        the variables named `nan`/`inf` when an untyped literal is printed."""
        names = self.names
        for i in st.shadowed:
            bad[i] = None
        untyped = st.untyped
        if id(j) in self.typed_outvars:
            self._check_typed_outvars(j, bad)
            if any(a.__class__ is Literal and not a.typed for a in j.outvars):
                untyped = True
        else:
            scope, watched = st.scope, st.watched
            for a in j.outvars:
                if a.__class__ is not Literal:
                    n = names[a]
                    if (scope.get(n) is not a or (n == "_" and _REBOUND in scope)) and a in watched:
                        bad[a] = None
                elif not a.typed:
                    untyped = True
        if untyped:
            for v in (*j.constvars, *j.invars, *(o for e in j.eqns for o in e.outputs)):
                if names[v] in ("nan", "inf"):
                    bad[v] = None

    def _check_typed_outvars(self, j: Jaxpr, bad: dict[Var, None]) -> None:
        """The outvars of a jaxpr named after an equation's results (`jit`): `_` reads as
        the most recent `_` binder of the type of the equation's result (the reader's
        `resolve_dropped_outvars`; in an ill-typed program not the outvar's own type), or
        the most recent `_` where none has that type; any other name as its most recent
        binder."""
        names = self.names
        last: dict[str, Var] = {}  # name -> its most recent binder
        unders: dict[str, list] = {}  # type -> its `_` binders: (Var, read by an equation)
        bound: set[Var] = set()
        reads: set[Var] | None = None
        nin = len(j.constvars) + len(j.invars)
        for k, v in enumerate((*j.constvars, *j.invars, *(o for e in j.eqns for o in e.outputs))):
            n = names[v]
            if n == "_":
                if reads is None:
                    reads = {a for e in j.eqns for a in e.inputs if a.__class__ is Var}
                unders.setdefault(self._type(v.type), []).append((v, k >= nin and v in reads))
            last[n] = v
            bound.add(v)
        results = self.typed_outvars[id(j)]
        matched = len(results) == len(j.outvars)
        taken: dict[str, int] = {}
        for k, a in enumerate(j.outvars):
            if a.__class__ is Literal:
                continue
            n = names[a]
            if n == "_" and matched:
                r = results[k]
                t = self._type(r.type)
                same = unders.get(t)
                if same:
                    # the reader's `resolve_dropped_outvars`: the most recent `_` binder of
                    # that type, then the others an equation reads, then the most recent
                    c = taken[t] = taken.get(t, -1) + 1
                    order = [same[-1][0], *(b for b, used in same[:-1] if used)]
                    read = order[c] if c < len(order) else same[-1][0]
                else:
                    read = last.get("_")
            else:  # (where the counts differ, `_` reads as the most recent `_`)
                read = last.get(n)
            if read is not a and a in bound:
                bad[a] = None

    # ------------------------------------------------------------ pass 3: documents
    def _type(self, t) -> str:
        s = self.type_str.get(id(t))
        if s is None:
            s = self.type_str[id(t)] = str(t)
            self.keep.append(t)
        return s

    def _binder_strs(self, vs) -> list[str]:
        names = self.names
        ts = self.type_str
        out = []
        for v in vs:
            t = v.type
            s = ts.get(id(t))
            if s is None:
                s = self._type(t)
            out.append(names[v] + ":" + s)
        return out

    def _binders(self, vs) -> pp.Doc:
        return pp.fill(self._binder_strs(vs))

    def _atom(self, a) -> str:
        if isinstance(a, Var):
            return self.names[a]
        return literal_text(a, a.typed and self.style.typed_literals)

    def _atom_strs(self, atoms) -> list[str]:
        names = self.names
        typed = self.style.typed_literals
        return [names[a] if type(a) is Var else literal_text(a, a.typed and typed) for a in atoms]

    def _atoms(self, atoms, sep: str = "") -> pp.Doc:
        return pp.fill(self._atom_strs(atoms), sep)

    def _jaxpr_doc(self, j: Jaxpr) -> pp.Doc:
        name = self.shared.get(id(j))
        if name is not None:
            return pp.text(name)
        return self._skeleton(j)

    def _skeleton(self, j: Jaxpr) -> pp.Doc:
        constvars = self._binders(j.constvars)
        invars = self._binders(j.invars)
        lines = self.lines.get(id(j)) if self.fast else None
        if lines is None:
            docs = [self._eqn(e) for e in j.eqns]
            eqns = pp.lines(docs) if self.fast else pp.join(pp.brk("; "), docs)
        else:
            width = self.lines_width[id(j)]
            docs = lines
            if None in lines:
                docs = [d if d is not None else self._eqn(e) for d, e in zip(lines, j.eqns)]
                width += sum([d[-1] for d, line in zip(docs, lines) if line is None])
            eqns = pp.lines(docs, "; ", functools.partial(_eqn_doc, self, j.eqns), width)
        n_out = len(j.outvars)
        outvars = pp.concat(
            [pp.text("("), self._atoms(j.outvars, ","), pp.text(",)" if n_out == 1 else ")")]
        )
        parts = [
            pp.text("{ "),
            pp.text("lambda "),
            constvars,
            pp.text("; "),
            invars,
            pp.text(". "),
            pp.text("let"),
            pp.nest(2, pp.concat([pp.brk(), eqns])),
            pp.brk(),
            pp.text("in "),
            outvars,
        ]
        if j.effects is not None:
            parts.append(pp.text(" : { " + ", ".join(j.effects) + " }"))
        return pp.group(pp.concat([pp.nest(2, pp.concat(parts)), pp.text(" }")]))

    def _value(self, v) -> pp.Doc:
        if isinstance(v, Jaxpr):
            return self._jaxpr_doc(v)
        if _is_jaxpr_tuple(v):
            return pp.group(
                pp.concat(
                    [
                        pp.nest(
                            2,
                            pp.concat(
                                [
                                    pp.text("("),
                                    pp.brk(""),
                                    pp.join(pp.brk(), [self._jaxpr_doc(j) for j in v]),
                                ]
                            ),
                        ),
                        pp.brk(""),
                        pp.text(")"),
                    ]
                )
            )
        return pp.text(self._value_str(v))

    def _value_str(self, v) -> str:
        # cache scalars and int tuples (keys must not confuse True with 1 or 1.0)
        cls = v.__class__
        if cls is DTypeName:  # its name, without numpy (hashing it would import numpy)
            return v.name
        key = s = None
        if (
            cls in _CACHEABLE
            or is_dtype(v)
            or (cls is tuple and all(x.__class__ is int for x in v))
        ):
            key = (cls, v)
            s = self.value_cache.get(key)
            if s is not None:
                return s
        if isinstance(v, (int, str, float)) or v is None or is_dtype(v):
            s = format_value(v)
        elif (cls is tuple or cls is list) and (t := _int_tree_text(v)) is not None:
            s = t
        elif _has_jaxpr(v):
            s = self._str_with_jaxprs(v, nested=False)
        elif isinstance(v, frozenset):
            # pp_kv_pair: the reprs of the *sorted values* (numbers sort numerically)
            try:
                items = sorted(v)
            except TypeError:
                s = format_value(v)
            else:
                s = "frozenset({" + ", ".join(format_value(x, nested=True) for x in items) + "})"
        else:
            s = format_value(v)
        if self.style.mask_addresses and " at 0x" in s:
            s = _ADDR.sub(lambda m: " at 0x" + "X" * len(m.group(1)), s)
        if key is not None:
            self.value_cache[key] = s
        return s

    def _str_with_jaxprs(self, v, nested: bool) -> str:
        """str(value) for a value holding jaxprs: each one printed by a fresh str(), width 80."""
        if isinstance(v, Jaxpr):
            return print_jaxpr(v, self.style)
        if isinstance(v, tuple) and type(v) is tuple:
            items = [self._str_with_jaxprs(x, True) for x in v]
            return "(" + items[0] + ",)" if len(items) == 1 else "(" + ", ".join(items) + ")"
        if isinstance(v, SpacedList):
            return v.join([self._str_with_jaxprs(x, True) for x in v])
        if isinstance(v, list):
            return "[" + ", ".join(self._str_with_jaxprs(x, True) for x in v) + "]"
        if isinstance(v, Record):
            inner = ", ".join(f"{k}={self._str_with_jaxprs(x, True)}" for k, x in v.fields)
            return f"{v.cls}({inner})"
        return format_value(v, nested=nested)

    def _kv_pairs(self, pairs) -> pp.Doc:
        return _kv_doc([pp.concat([pp.text(k + "="), self._value(v)]) for k, v in pairs])

    def _eqn(self, e: core.Eqn) -> pp.Doc:
        prim = e.prim
        rec = self._rec(prim)
        own = rec.print_eqn
        if own is not None:
            doc = own(e, _DocHandle(self))
            if doc is not None:
                return doc
        name = prim
        print_name = rec.print_name
        if print_name is not None:
            name = print_name(e, self.style)
        pairs = self._pairs(e)
        for _, v in pairs:
            if isinstance(v, Jaxpr) or _is_jaxpr_tuple(v):
                break
        else:
            # no nested jaxpr: a lazy document (the flat text, the full form on demand)
            kvs = [k + "=" + self._value_str(v) for k, v in pairs]
            outs = self._binder_strs(e.outputs)
            ins = self._atom_strs(e.inputs)
            flat = name + ("[" + " ".join(kvs) + "]" if kvs else "") + " " + " ".join(ins)
            eq = bool(outs) or self.style.eq_without_outputs
            if eq:
                flat = " ".join(outs) + " = " + flat

            render = _render_eqn if self.fast else None
            return pp.lazy(flat, _build_eqn, (name, kvs, ins, outs, eq), render)
        rhs = [
            pp.text(name),
            self._kv_pairs(pairs),
            pp.concat([_SPACE, self._atoms(e.inputs)]),
        ]
        if e.outputs or self.style.eq_without_outputs:
            return pp.concat([self._binders(e.outputs), _EQ, *rhs])
        return pp.concat(rhs)

    def _pairs(self, e: core.Eqn) -> list:
        c = self.pairs_cache.get(id(e))
        if c is None:
            c = self.pairs_cache[id(e)] = printed_params(e, self.style)
        return c


# ---------------------------------------------------------------- equations in their own syntax


def _read_scope(e, names, scope: dict, watched: set, shadowed: list) -> bool:
    """One equation of the scope check, in the order the reader sees it: each use that
    would read another binding of its name goes into `shadowed`, then the results are bound.
    True when the equation prints an untyped literal."""
    untyped = False
    for a in e.inputs:
        if a.__class__ is not Literal:
            n = names[a]
            if (scope.get(n) is not a or (n == "_" and _REBOUND in scope)) and a in watched:
                shadowed.append(a)
        elif not a.typed:
            untyped = True
    for v in e.outputs:
        _bind(scope, names[v], v, watched)
    return untyped


#: scope key (never a name) present once `_` is bound twice in the scope: from then on the
#: reader warns at a use of `_` (`parser.readers.REBOUND`), so such a use gets a fresh name
_REBOUND = " _"


def _bind(scope: dict, n: str, v: Var, watched: set) -> None:
    """`v` bound to its name `n` in `scope`.  A use reads another binding (the check's
    question) only where its Var was bound in this scope and its name bound again since, or
    named `_` once `_` is bound twice: `watched` gets every binder of `_` and every binder
    whose name is bound again, and the check asks it, not a set of every binder (1.3M at
    grad of 400k, a set whose every insertion missed the caches).  One probe of `scope`
    for a name bound the first time (`setdefault`)."""
    if n == "_":
        if n in scope:
            scope[_REBOUND] = v
        scope[n] = v
        watched.add(v)
        return
    old = scope.setdefault(n, v)
    if old is not v:
        watched.add(old)
        scope[n] = v


def _scope_table() -> dict:
    """An empty scope (name -> its most recent binder) holding one key that is not a
    string, and never a name: CPython keeps a dict of string keys only without their hashes
    beside them, so a probe that meets another name must read that name's string for its
    hash; with the hashes kept, it compares them.  Grad of 400k equations binds 1.3M names
    in one scope, and those strings are far apart in memory: with this key the printout of
    that gradient took 4.6 CPU-s, not 4.9 (1.0 s, not 1.05, at 100k)."""
    return {None: None}


class _Scope:
    """What `_check_scope` reads of a jaxpr's equations: the most recent binder of each name,
    the binders it must still find bound (`_bind`), the uses read as another binding,
    whether an untyped literal is printed."""

    __slots__ = ("scope", "watched", "shadowed", "untyped")

    def __init__(self, scope: dict[str, Var], watched: set[Var], shadowed: list[Var], untyped):
        self.scope = scope
        self.watched = watched
        self.shadowed = shadowed
        self.untyped = untyped


class _DocHandle:
    """What a `print_eqn` rule (`jaxprtool.record`) builds its document with.  The naming pass
    runs the rule too, with a `_NamingHandle`: the rule asks for binders and atoms in printing
    order (and decides whether it prints the equation before asking for any)."""

    __slots__ = ("pr",)

    def __init__(self, pr: _Printer):
        self.pr = pr

    def dropped(self, v: Var) -> bool:
        """The binder `v` prints as `_`."""
        return self.pr.names.get(v) == "_"

    def binders(self, vs) -> pp.Doc:
        """`a:f32[3] b:i32[]`."""
        return self.pr._binders(vs)

    def atom(self, a, typed: bool = True) -> str:
        """The name of a use, or the text of a literal (`typed=False`: without its type)."""
        if isinstance(a, Var):
            return self.pr.names[a]
        return literal_text(a, typed and a.typed and self.pr.style.typed_literals)


class _NamingHandle(_DocHandle):
    """The same calls in the naming pass: they name the atoms, in the order they are asked."""

    __slots__ = ()

    def binders(self, vs) -> pp.Doc:
        self.pr._name_binders(vs)
        return pp.NIL

    def atom(self, a, typed: bool = True) -> str:
        self.pr._name_uses([a])
        return ""


_NAMES: list[str] = []  # encode_name(i), grown on demand (`_grow_names`)


def _jaxpr_binders(j: Jaxpr) -> tuple:
    """The binders of `j` in printing order: its constvars, invars and equation results."""
    return (*j.constvars, *j.invars, *[o for e in j.eqns for o in e.outputs])


def _binder_ends(j: Jaxpr) -> tuple:
    """(how many binders `j` has, its first, its last) as `_jaxpr_binders(j)` gives them (None,
    None where it has none), without gathering them: `_same_vars` asks it of every jaxpr."""
    n = len(j.constvars) + len(j.invars) + sum([len(e.outputs) for e in j.eqns])
    if not n:
        return 0, None, None
    heads = (*j.constvars, *j.invars)
    first = heads[0] if heads else next(e.outputs[0] for e in j.eqns if e.outputs)
    last = next((e.outputs[-1] for e in reversed(j.eqns) if e.outputs), None)
    return n, first, heads[-1] if last is None else last


def _name_chunks():
    """encode_name(0), encode_name(1), ... in lists: `a`..`z`, then for each width the names
    whose first letter is not `a` (a leading zero digit), in order, 26 at a time (each
    prefix of the width before, followed by every letter: one concatenation a name)."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    yield list(letters)
    prefixes = list(letters[1:])
    while True:
        longer: list[str] = []
        for p in prefixes:
            chunk = [p + c for c in letters]
            longer += chunk
            yield chunk
        prefixes = longer


_NAME_CHUNKS = _name_chunks()


def _grow_names(n: int) -> None:
    """Make `_NAMES` at least `n` names long."""
    while len(_NAMES) < n:
        _NAMES.extend(next(_NAME_CHUNKS))


_UNSEEN = object()
_CACHEABLE = frozenset({int, bool, str, EnumValue})
_SPACE = pp.text(" ")
_EQ = pp.text(" = ")
_OPEN = pp.text("[")
_CLOSE = pp.text("]")
_BRK0 = pp.brk("")
_BRK1 = pp.brk()


def _build_eqn(name: str, kvs: list[str], ins: list[str], outs: list[str], eq: bool) -> pp.Doc:
    """The full document of an equation without nested jaxprs (JAX's `_pp_eqn`); `eq`: the
    ` = ` is printed (JAX < 0.4.22 printed it after an empty binder list too)."""
    rhs = [pp.text(name), _kv_doc([pp.text(x) for x in kvs]), pp.concat([_SPACE, pp.fill(ins)])]
    if eq:
        return pp.concat([pp.fill(outs), _EQ, *rhs])
    return pp.concat(rhs)


def _render_eqn(out: list[str], k: int, indent: int, width: int, name, kvs, ins, outs, eq) -> int:
    """`pp.format` of `_build_eqn(name, kvs, ins, outs, eq)` from column `k` in break mode at
    `indent`, appended to `out` directly; the new column."""
    app = out.append
    if eq and outs:
        flat = " ".join(outs)
        w = len(flat) if flat.isascii() else len(flat.encode("utf-8"))
        if w <= width - k:
            app(flat)
            k += w
        else:
            k = pp.fill_broken(out, k, indent, width, outs, "")
    if eq:
        app(" = ")
        k += 3
    app(name)
    k += len(name) if name.isascii() else len(name.encode("utf-8"))
    if kvs:  # _kv_doc: a group
        flat = "[" + " ".join(kvs) + "]"
        w = len(flat) if flat.isascii() else len(flat.encode("utf-8"))
        if w <= width - k:
            app(flat)
            k += w
        else:
            nl = "\n" + " " * (indent + 2)
            app("[")
            for x in kvs:
                app(nl)
                app(x)
                k = indent + 2 + (len(x) if x.isascii() else len(x.encode("utf-8")))
            app("\n" + " " * indent + "]")
            k = indent + 1
    app(" ")
    k += 1
    if ins:
        flat = " ".join(ins)
        w = len(flat) if flat.isascii() else len(flat.encode("utf-8"))
        if w <= width - k:
            app(flat)
            k += w
        else:
            k = pp.fill_broken(out, k, indent, width, ins, "")
    return k


def _eqn_doc(printer: _Printer, eqns: tuple, i: int) -> pp.Doc:
    """The document of the i-th equation of a jaxpr, whose line `_name_eqns` kept as its flat
    text only (`pp.lines`' `rebuild`: the line does not fit where it is)."""
    return printer._eqn(eqns[i])


def _kv_doc(kvs: list) -> pp.Doc:
    """JAX's `pp_kv_pairs`: `[k=v ...]` flat, else one pair per line and `]` back."""
    if not kvs:
        return pp.NIL
    return pp.group(
        pp.concat([pp.nest(2, pp.concat([_OPEN, _BRK0, pp.join(_BRK1, kvs)])), _BRK0, _CLOSE])
    )


#: the least indentation of a jaxpr's equations laid out one a line (`{ lambda ... let` and
#: its equations are nested twice by 2): a line kept as its flat text fits there
_EQN_INDENT = 4
#: what each line the compiled twin builds holds besides its texts (`_compiled_lines`)
_LINE_HEAD = (pp.LAZY, _build_eqn, _render_eqn, _REBOUND)
