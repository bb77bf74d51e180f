"""Shared jaxprs (`let NAME = { lambda ... } in`) and the `_` outvars of nested jaxprs: how
names of jaxprs are resolved, and the checks made once the whole text is read.

A parameter value naming a shared jaxpr is read as a `SharedRef`; the reference is
resolved when the scope holding the definition closes (`SharedScopes.close_scope`), so a
name may be used before its definition (JAX hoists definitions to the top of the text).
"""

from __future__ import annotations

from ... import core, params
from ...core import Jaxpr, JaxprError, OverLimit
from ...record import prim as record_of
from ..style import walk_jaxprs
from .diagnostics import MAX_NESTING, NOT_READ, Source, too_deep


class SharedRef:
    """A shared jaxpr's name in a parameter value, until its scope closes."""

    __slots__ = ("name", "pos")

    def __init__(self, name: str, pos: int):
        self.name = name
        self.pos = pos


def has_ref(v) -> bool:
    if isinstance(v, SharedRef):
        return True
    if isinstance(v, tuple):
        return any(has_ref(x) for x in v)
    if isinstance(v, params.Record):
        return any(has_ref(x) for _, x in v.fields)
    return False


class SharedScopes(Source):
    """The shared-jaxpr scopes of one parse: the definitions open now (`open_defs`, by
    name, innermost last), every definition (`shared_defs`, for messages), the parameter
    values still holding references (`pending`), and the `_` outvars of nested jaxprs
    whose warnings wait for the equation holding the jaxpr (`outvar_pending`)."""

    def __init__(self, text: str, path: str):
        super().__init__(text, path)
        # (position of the value's key, its parameter dict, key) of values with references
        self.pending: list[tuple[int, dict, str]] = []
        self.open_defs: dict[str, list[Jaxpr]] = {}
        # id(jaxpr) -> (name, position of `let NAME =`) of every shared definition
        self.shared_defs: dict[int, tuple[str, int]] = {}
        # warnings of `_` outvars held back until the equation holding the jaxpr is read:
        # id(jaxpr) -> (jaxpr, [(outvar index, warning)])
        self.outvar_pending: dict[int, tuple[Jaxpr, list]] = {}
        self.last_outvar_pending: list = []

    def close_scope(self, shareds: list, start: int, end: int, document: bool):
        """The definitions `shareds` (name, jaxpr, position) go out of scope: resolve the
        references to them in the values between s[start] and s[end].  At the end of the
        `document` a reference nothing defines is an error."""
        own = {name: j for name, j, _ in shareds}
        for name, j, _ in shareds:
            lst = self.open_defs.get(name)
            if lst and lst[-1] is j:
                lst.pop()
        if not self.pending:
            return
        keep = []
        for entry in self.pending:
            pos, d, key = entry
            if not start <= pos < end:
                keep.append(entry)
                continue
            d[key] = self.subst(d[key], own, document)
            if has_ref(d[key]):
                keep.append(entry)
        self.pending = keep

    def subst(self, v, own: dict, document: bool):
        if isinstance(v, SharedRef):
            j = own.get(v.name)
            if j is not None:
                return j
            lst = self.open_defs.get(v.name)
            if lst:
                return lst[-1]
            if not document:
                return v
            self.fail(f"shared jaxpr '{v.name}' is referenced but never defined", v.pos)
        if isinstance(v, tuple):
            return tuple(self.subst(x, own, document) for x in v)
        if isinstance(v, params.Record):
            return params.Record(
                v.cls, tuple((k, self.subst(x, own, document)) for k, x in v.fields)
            )
        return v


def resolve_dropped_outvars(st, prim: str, prm: dict, outs) -> None:
    """`_:f32[3] b:f32[3] _:f32[] = jit[jaxpr={ ... in (_, b, _) }]`: JAX names the nested
    jaxpr's outvars after the equation's results, so an outvar `_` is one of the nested
    jaxpr's `_` binders of that result's type.  Read the first such outvar as the most recent
    such binder (instead of the most recent `_`), and the later ones as the other binders of
    that type that an equation reads, in binding order, then the most recent again: a `_`
    binder that is read is no dropped binder (JAX never reads one), so JAX named it after a
    result (`_:f32[5] = exp b; _:f32[5] = mul _ 2.0:f32[] in (_, _)`: the product, then the
    exponential).  Warn only where several have that type and the result may be used (a
    top-level `_` result is not: JAX's `_dropvars`)."""
    key = record_of(prim).suggest_names
    inner = prm.get(key) if key is not None else None
    entry = st.outvar_pending.pop(id(inner), None) if isinstance(inner, Jaxpr) else None
    if entry is None:
        return
    pending = entry[1]
    if len(inner.outvars) != len(outs):
        st.warnings.extend(w for _, w in pending)
        return
    bound = [v for v in (*inner.constvars, *inner.invars) if v.hint == "_"]
    bound += [v for e in inner.eqns for v in e.outputs if v.hint == "_"]
    outvars = list(inner.outvars)
    top = len(st.tables) == 1  # a top-level `_` result is unused: any such binder will do
    read = None
    taken: dict = {}  # type -> how many `_` outvars of that type were read so far
    for i, w in pending:
        t = outs[i].type
        same = [v for v in bound if v.type == t]
        if same:
            if read is None:
                read = {id(a) for e in inner.eqns for a in e.inputs}
                binders = {id(v) for e in inner.eqns for v in e.outputs}
            k = taken[t] = taken.get(t, -1) + 1
            order = [same[-1], *(v for v in same[:-1] if id(v) in read and id(v) in binders)]
            outvars[i] = order[k] if k < len(order) else same[-1]
        if len(same) != 1 and not (top and same and outs[i].hint == "_"):
            st.warnings.append(w)
    prm[key] = inner.replace(outvars=tuple(outvars))


def share_unreferenced(top: Jaxpr, defs: list[Jaxpr]) -> None:
    """H5: JAX hoists a jaxpr it finds twice inside `str()`-ed values (custom_linear_solve's
    `_LinearSolveTuple`: the forward and the transposed solve hold the same objects) and
    then prints it inline there, so its `let NAME = ... in` is referenced by nothing.  Such
    a definition is the same object as a jaxpr alpha-equal to it inside each of those
    values (a field, or a jaxpr nested in one): make them one object, so that the printer
    finds it shared and hoists it again.

    A value whose fields are all alpha-equal to the definitions an earlier value took holds
    those objects again (the transposed solve's roles are the forward one's, exchanged).
    Otherwise its fields take the definitions in the order JAX printed them: a field takes
    the next one not taken yet when it is alpha-equal to it, else one the value's earlier
    fields took (`sl.solve(assume_a='pos')`: matvec and vecmat are one object, `jaxpr`,
    while solve and transpose_solve are two, `jaxpr1` and `jaxpr2`)."""
    reached = {id(j) for j in walk_jaxprs(top, core.eqn_subjaxprs)}
    loose = [j for j in defs if id(j) not in reached]
    if not loose:
        return
    matcher = _LooseDefs(loose)
    for e in list(core.all_eqns(top)):
        for k, v in e.params.items():
            if isinstance(v, params.Record) and any(isinstance(x, Jaxpr) for _, x in v.fields):
                e.params[k] = params.Record(v.cls, matcher.fields(v.fields))


class _LooseDefs:
    """The unreferenced definitions, given out to the fields of `str()`-ed values."""

    def __init__(self, loose: list[Jaxpr]):
        self.order = loose  # in the text's order
        self.taken: set[int] = set()
        self.values: list[list[Jaxpr]] = []  # the definitions each earlier value took

    def fields(self, fields) -> tuple:
        for earlier in self.values:
            again = self._again(fields, earlier)
            if again is not None:
                return again
        took: list[Jaxpr] = []
        out = tuple((f, self._field(x, took)) for f, x in fields)
        if took:
            self.values.append(took)
        return out

    def _again(self, fields, earlier: list[Jaxpr]) -> tuple | None:
        """`fields` as the objects of `earlier`, each jaxpr field alpha-equal to one of them
        (distinct ones preferred, as the roles are exchanged), or None."""
        given: list[Jaxpr] = []
        out = []
        for f, x in fields:
            if not isinstance(x, Jaxpr):
                out.append((f, x))
                continue
            d = self._among(x, [d for d in earlier if all(g is not d for g in given)])
            if d is None:
                d = self._among(x, given)
            if d is None:
                return None
            given.append(d)
            out.append((f, d))
        return tuple(out)

    @staticmethod
    def _among(x, defs: list[Jaxpr]) -> Jaxpr | None:
        if not isinstance(x, Jaxpr):
            return None
        return next((d for d in defs if d is x or core.alpha_equal(d, x)), None)

    def _field(self, x, took: list[Jaxpr]):
        """`x` (a field value), or the definition it stands for; a jaxpr nested in it
        (itself not one) likewise."""
        if not isinstance(x, Jaxpr):
            return x
        free = [d for d in self.order if id(d) not in self.taken]
        d = self._among(x, free[:1])
        if d is None:
            d = self._among(x, took)
        if d is None:
            d = self._among(x, free)
        if d is not None:
            self.taken.add(id(d))
            if all(t is not d for t in took):
                took.append(d)
            return d
        for e in x.eqns:
            for k, v in e.params.items():
                if isinstance(v, Jaxpr):
                    e.params[k] = self._field(v, took)
                elif type(v) is tuple and any(isinstance(y, Jaxpr) for y in v):
                    e.params[k] = tuple(self._field(y, took) for y in v)
        return x


def check_shared(st, top: Jaxpr) -> None:
    """Shared jaxprs may not use themselves, directly or through other shared jaxprs
    (`let f = {... jaxpr=g ...} in let g = {... jaxpr=f ...} in`): JAX never prints such
    text, and every command would recurse forever.  Refused at the equation that closes the
    cycle.  A chain of shared jaxprs may not nest deeper than MAX_NESTING either (nesting
    written out in the text is limited by the post-lexer).  Depth first without recursion;
    each jaxpr once.  The names of the shared jaxprs found go to `expansion`, for its
    messages."""
    from ...expansion import remember_shared

    named: dict[int, tuple[Jaxpr, str]] = {}
    on_path: dict[int, int] = {}  # id(jaxpr) -> index in `path`
    path: list[Jaxpr] = []
    height: dict[int, int] = {}  # id(jaxpr) -> levels of jaxprs from it down (itself: 1)
    stack = []  # per jaxpr on the path: (jaxpr, iterator over (equation, nested jaxpr))

    def enter(j: Jaxpr) -> None:
        if id(j) in st.shared_defs:
            named[id(j)] = (j, st.shared_defs[id(j)][0])
        on_path[id(j)] = len(path)
        path.append(j)
        height[id(j)] = 1
        stack.append((j, ((e, sub) for e in j.eqns for sub in core.eqn_subjaxprs(e))))

    enter(top)
    while stack:
        j, it = stack[-1]
        nxt = next(it, None)
        if nxt is None:
            stack.pop()
            path.pop()
            del on_path[id(j)]
            if path:
                p = id(path[-1])
                height[p] = max(height[p], height[id(j)] + 1)
            continue
        e, sub = nxt
        k = id(sub)
        if k in on_path:
            cycle = path[on_path[k] :] + [sub]
            names = [st.shared_defs[id(x)][0] for x in cycle if id(x) in st.shared_defs]
            name = names[0] if names else "?"
            raise JaxprError(
                f"shared jaxpr '{name}' uses itself ({' -> '.join(names)}): "
                "shared jaxprs cannot be recursive",
                e.loc or st.loc(st.shared_defs.get(k, ("", 0))[1]),
                NOT_READ,
            )
        if k in height:
            height[id(j)] = max(height[id(j)], height[k] + 1)
            continue
        enter(sub)
    remember_shared(named)
    if height[id(top)] > MAX_NESTING:
        # follow the deepest chain down to the equation that goes one level too deep
        j, level = top, 1
        while True:
            e, sub = max(
                ((e, sub) for e in j.eqns for sub in core.eqn_subjaxprs(e)),
                key=lambda es: height[id(es[1])],
            )
            level += 1
            if level > MAX_NESTING:
                raise OverLimit(too_deep(), e.loc)
            j = sub
