"""Helpers shared by the clean-up passes: substitution, effects, per-pass memo tables.

Every pass builds new `Jaxpr`/`Eqn` objects and never mutates its input.  Nested
jaxprs are closed, so each pass handles them independently; a jaxpr object that
is shared (hoisted) stays shared because results are memoised by identity.
"""

from __future__ import annotations

from collections.abc import Callable

from ..core import Atom, Eqn, Jaxpr, Literal, RefType, Var, eqn_subjaxprs, map_param_jaxprs
from ..record import prim


def call_body_param(name: str) -> str | None:
    """The parameter of a call-like primitive that holds its body (one jaxpr taking the
    equation's operands), or None."""
    return prim(name).call_body


#: per-operand / per-result parameters of jit/pjit that must follow operand pruning
CALL_IN_PARAMS = ("in_shardings", "in_layouts", "donated_invars", "prevent_cse")
CALL_OUT_PARAMS = ("out_shardings", "out_layouts")


class JaxprMemo:
    """A memo table keyed by jaxpr identity (keeps the keys alive so ids stay unique)."""

    def __init__(self):
        self._d: dict = {}

    def get(self, key):
        hit = self._d.get(_key(key))
        return None if hit is None else hit[1]

    def put(self, key, value):
        self._d[_key(key)] = (key, value)
        return value

    def clear(self) -> None:
        """Let go of every key and value (see `recursive_pass`)."""
        self._d.clear()


def _key(key):
    if isinstance(key, tuple):
        return tuple(id(k) if isinstance(k, Jaxpr) else k for k in key)
    return id(key)


_effect_memo: dict[int, tuple[Jaxpr, bool]] = {}


def is_effectful_prim(name: str) -> bool:
    return prim(name).effectful


def jaxpr_has_effects(j: Jaxpr) -> bool:
    hit = _effect_memo.get(id(j))
    if hit is not None and hit[0] is j:
        return hit[1]
    res = bool(j.effects) or any(eqn_has_effects(e) for e in j.eqns)
    _remember(_effect_memo, j, res)
    return res


def eqn_has_effects(e: Eqn) -> bool:
    """An equation that must never be removed or merged: an effectful primitive, one that
    touches a Ref, or one with such an equation nested inside."""
    if is_effectful_prim(e.prim):
        return True
    if _touches_ref(e.inputs) or _touches_ref(e.outputs):
        return True
    return any(jaxpr_has_effects(s) for s in eqn_subjaxprs(e))


def eqn_has_live_effects(e: Eqn, ref_live: Callable[[Atom], bool]) -> bool:
    """Whether an equation none of whose results is used must stay (JAX's
    `pe.has_effects(eqn, live_ins)`): an effect other than on Refs, or a write into a Ref
    operand that `ref_live` says may be read afterwards.  A read or a new Ref is dead when
    unused; an equation whose bodies write Refs writes each of its Ref operands."""
    rec = prim(e.prim)
    if rec.ref_access is not None:
        return rec.ref_access == "write" and ref_live(e.inputs[0])
    kind = _eqn_effect_kind(e)
    if kind == _WRITES:
        return any(ref_live(a) for a in e.inputs if isinstance(a.type, RefType))
    return kind == _OTHER


def ref_allocs(eqns) -> set[int]:
    """The ids of the Refs the equations make (new_ref): local to the program, so a write
    into one that nothing reads later is dead."""
    names = {e.prim for e in eqns}  # a record per primitive, not per equation
    allocs = {n for n in names if prim(n).ref_access == "alloc"}
    if not allocs:
        return set()
    return {id(o) for e in eqns if e.prim in allocs for o in e.outputs}


_NONE, _WRITES, _OTHER = 0, 1, 2  # what an equation or body does besides computing values
_kind_memo: dict[int, tuple[Jaxpr, int]] = {}


def _jaxpr_effect_kind(j: Jaxpr) -> int:
    hit = _kind_memo.get(id(j))
    if hit is not None and hit[0] is j:
        return hit[1]
    ref_consts = any(isinstance(v.type, RefType) for v in j.constvars)
    kind = _OTHER if j.effects or ref_consts else _NONE
    for e in j.eqns:
        if kind == _OTHER:
            break
        kind = max(kind, _eqn_effect_kind(e))
    _remember(_kind_memo, j, kind)
    return kind


def _eqn_effect_kind(e: Eqn) -> int:
    """_OTHER: an effect other than on Refs; _WRITES: it (or a body) may write a Ref; a
    primitive that touches Refs without saying how (`ref_access`) counts as writing them."""
    rec = prim(e.prim)
    if rec.ref_access is not None:
        return _WRITES if rec.ref_access == "write" else _NONE
    if rec.effectful and (rec.effects_in_bodies is None or not rec.effects_in_bodies(e)):
        return _OTHER
    subs = eqn_subjaxprs(e)
    if not subs:
        return _WRITES if _touches_ref(e.inputs) or _touches_ref(e.outputs) else _NONE
    return max(_jaxpr_effect_kind(s) for s in subs)


def _touches_ref(atoms) -> bool:
    for a in atoms:
        if isinstance(a.type, RefType):
            return True
    return False


_random_memo: dict[int, tuple[Jaxpr, bool]] = {}


def jaxpr_has_random(j: Jaxpr) -> bool:
    hit = _random_memo.get(id(j))
    if hit is not None and hit[0] is j:
        return hit[1]
    res = any(eqn_has_random(e) for e in j.eqns)
    _remember(_random_memo, j, res)
    return res


def eqn_has_random(e: Eqn) -> bool:
    if prim(e.prim).random:
        return True
    return any(jaxpr_has_random(s) for s in eqn_subjaxprs(e))


def eqn_is_pure(e: Eqn) -> bool:
    """Neither effects nor random numbers, in the equation or nested inside it (the
    negation of `eqn_has_effects(e) or eqn_has_random(e)`, with one look at the params)."""
    rec = prim(e.prim)
    if rec.effectful or rec.random:
        return False
    if _touches_ref(e.inputs) or _touches_ref(e.outputs):
        return False
    return not any(jaxpr_has_effects(s) or jaxpr_has_random(s) for s in eqn_subjaxprs(e))


def _remember(memo: dict, j: Jaxpr, value: bool) -> None:
    if len(memo) > 200_000:  # these tables keep jaxprs alive: bound them
        memo.clear()
    memo[id(j)] = (j, value)


def same_type(a: Atom, b: Atom) -> bool:
    """Types equal, weak_type included (ShapedArray's == ignores weak_type)."""
    ta, tb = a.type, b.type
    if ta is tb:  # (the builder's types are one object per value: `builder._interned`)
        return True
    if ta != tb:
        return False
    return getattr(ta, "weak_type", False) == getattr(tb, "weak_type", False)


class Subst:
    """A substitution var -> atom, applied to operands and results.  Keyed by the Vars
    themselves (they hash by identity; a literal looked up remembers its hash), so that a
    tuple of operands is looked up as it is, without a map of `id` over it."""

    def __init__(self):
        self.env: dict[Var, Atom] = {}

    def __call__(self, a: Atom) -> Atom:
        if isinstance(a, Var):
            env = self.env
            while a in env:
                a = env[a]
        return a

    def set(self, v: Var, a: Atom) -> None:
        self.env[v] = a

    def atoms(self, atoms: tuple[Atom, ...]) -> tuple[Atom, ...]:
        """The atoms substituted: the same tuple object when none of them is replaced."""
        env = self.env
        if not env or env.keys().isdisjoint(atoms):
            return atoms
        return tuple(self(a) for a in atoms)

    def eqn(self, e: Eqn) -> Eqn:
        """The equation with its operands substituted (the same object when unchanged)."""
        inputs = self.atoms(e.inputs)
        return e if inputs is e.inputs else e.replace(inputs=inputs)


def map_eqn_jaxprs(e: Eqn, fn: Callable[[Jaxpr], Jaxpr]) -> Eqn:
    """The equation with every nested jaxpr replaced by fn(jaxpr) (same object when unchanged)."""
    if not eqn_subjaxprs(e):
        return e
    changed = False
    params = {}
    for k, v in e.params.items():
        nv = map_param_jaxprs(v, fn)
        changed |= nv is not v
        params[k] = nv
    return e.replace(params=params) if changed else e


def rewrite_nested(memo: JaxprMemo, fn: Callable[[Jaxpr], Jaxpr]) -> Callable[[Jaxpr], Jaxpr]:
    """fn memoised by jaxpr identity, so shared nested jaxprs stay shared."""

    def go(j: Jaxpr) -> Jaxpr:
        hit = memo.get(j)
        if hit is not None:
            return hit
        return memo.put(j, fn(j))

    return go


def recursive_pass(jaxpr: Jaxpr, fn: Callable[[Jaxpr, Callable[[Jaxpr], Jaxpr]], Jaxpr]) -> Jaxpr:
    """Run `fn(j, go)` on jaxpr, where `go` applies the same pass (memoised by identity)
    to the nested jaxprs."""
    memo = JaxprMemo()
    go = rewrite_nested(memo, lambda j: fn(j, go))
    try:
        return go(jaxpr)
    finally:
        # `go` and the lambda refer to each other, a cycle holding the memo: the pass's
        # input and result, which only the collector would free (never, in the program,
        # which freezes them: `core.FREEZE_AFTER_PAUSE`)
        memo.clear()


class EqnRewrite:
    """One rewrite of a jaxpr's equations in order.

    Iterating yields each equation with its nested jaxprs rewritten by `go` and its
    operands substituted; the pass then either `keep`s it (or appends to `eqns`) or
    `drop`s it, binding its results to atoms.  `result()` is the rewritten jaxpr (the
    same object when nothing changed).
    """

    def __init__(self, jaxpr: Jaxpr, go: Callable[[Jaxpr], Jaxpr]):
        self.jaxpr = jaxpr
        self.go = go
        self.sub = Subst()
        self.eqns: list[Eqn] = []
        #: `keep(e)`: the equation stays (the list's own append: called once per equation)
        self.keep = self.eqns.append
        self.changed = False

    def __iter__(self):
        # (`rewritten` of each equation, written out: a call fewer per equation of every
        # pass on the Python path, 5% of canonicalize's instructions)
        sub, go = self.sub, self.go
        env = sub.env
        for e in self.jaxpr.eqns:
            ne = e if e.no_subjaxprs else map_eqn_jaxprs(e, go)
            if env and not env.keys().isdisjoint(ne.inputs):
                ne = ne.replace(inputs=tuple(map(sub, ne.inputs)))
            if ne is not e:
                self.changed = True
            yield ne

    def rewritten(self, e: Eqn) -> Eqn:
        """`e` with its nested jaxprs rewritten by `go` and its operands substituted (the
        same object when neither changes it): what iterating yields for it."""
        ne = e if e.no_subjaxprs else map_eqn_jaxprs(e, self.go)
        env = self.sub.env
        if env and not env.keys().isdisjoint(ne.inputs):
            ne = ne.replace(inputs=tuple(map(self.sub, ne.inputs)))
        if ne is not e:
            self.changed = True
        return ne

    def handed_back(self, sweep, *state):
        """Iterating yields what iterating `self` yields, where a compiled loop of the pass
        (`_twin.cse_sweep`, `_twin.simplify_rules_sweep`) takes the equations it is sure of
        itself, in order: those that `rewritten` leaves as they are and the pass's step
        keeps as they are (appended to `eqns`, with the pass's `state` updated as the step
        updates it).  It hands each other equation back, to be yielded rewritten."""
        eqns = self.jaxpr.eqns
        if eqns.__class__ is not tuple:
            eqns = tuple(eqns)
        env, kept, n, k = self.sub.env, self.eqns, len(eqns), 0
        while True:
            k = sweep(eqns, k, env, kept, eqn_subjaxprs, *state)
            if k >= n:
                return
            yield self.rewritten(eqns[k])
            k += 1

    def drop(self, outputs, atoms) -> None:
        """Leave out the equation whose `outputs` are bound to `atoms`."""
        for o, a in zip(outputs, atoms):
            self.sub.set(o, a)
        self.changed = True

    def result(self) -> Jaxpr:
        jaxpr = self.jaxpr
        outvars = self.sub.atoms(jaxpr.outvars)
        if not self.changed and outvars is jaxpr.outvars:
            return jaxpr
        return jaxpr.replace(eqns=self.eqns, outvars=outvars)


def has_subjaxprs(e: Eqn) -> bool:
    return not e.no_subjaxprs and bool(eqn_subjaxprs(e))


def unseen_eqns(last: Jaxpr, program: Jaxpr) -> list[Eqn]:
    """The equations of `program` that are not (by identity) equations of `last`: in
    `canonicalize`, those that the passes run since `last` made anew.

    The passes only remove and replace equations, so the two programs hold the equations they
    share in the same order: one walk over both in step finds the others, without a set of
    every equation of `last` (at a million equations, a table of 64 MB made for each check).
    Where the two part, the nearest equation of `program` among the next `_SYNC` of `last`
    joins them again; past a longer gap, or once the programs have parted more than once
    in `_PARTED` equations (where the set costs less than the look-aheads), a set of the
    rest of `last` decides.  An equation of `last` that came back out of order would be
    counted as unseen: more for a `settled` check to look at, never a wrong answer."""
    old, new = last.eqns, program.eqns
    if old.__class__ is not tuple:
        old = tuple(old)
    if new.__class__ is not tuple:
        new = tuple(new)
    out: list[Eqn] = []
    i = k = 0
    partings = len(new) // _PARTED + _SYNC
    while True:
        run = _same_run(old, k, new, i)
        i += run
        k += run
        if i >= len(new):
            return out
        partings -= 1
        joined = _rejoin(old, k, new, i) if partings >= 0 else None
        if joined is None:
            rest = set(old[k:])  # (equations hash and compare by identity)
            out.extend(e for e in new[i:] if e not in rest)
            return out
        d, k = joined
        out.extend(new[i : i + d])
        i += d + 1
        k += 1


#: how far `unseen_eqns` looks ahead in each program for the next equation they share
_SYNC = 32
#: `unseen_eqns` looks ahead at most once in this many equations (then a set decides)
_PARTED = 128
#: the most equations `_same_run` compares at once (two tuple slices, compared in C)
_RUN_STEP = 4096


def _same_run(old: tuple, k: int, new: tuple, i: int) -> int:
    """How many equations from old[k] and new[i] on are the same objects, pairwise: compared
    in slices of 8, doubling up to `_RUN_STEP` while they agree (a short run, between two
    partings, copies little)."""
    n = 0
    step = 8
    while True:
        a = old[k + n : k + n + step]
        b = new[i + n : i + n + step]
        if len(a) == len(b) == step and a == b:  # (identical items: no __eq__ called)
            n += step
            step = min(2 * step, _RUN_STEP)
            continue
        for x, y in zip(a, b):
            if x is not y:
                return n
            n += 1
        return n


def _rejoin(old: tuple, k: int, new: tuple, i: int) -> tuple[int, int] | None:
    """(d, j) for the least d < `_SYNC` such that new[i + d] is old[j], j among the next
    `_SYNC` from k (by identity: equations compare so); None if there is none."""
    ahead = old[k : k + _SYNC]
    for d, x in enumerate(new[i : i + _SYNC]):
        if x in ahead:  # (equations compare by identity: the tuple's own search, in C)
            return d, k + ahead.index(x)
    return None


def literal_value(a: Atom):
    """The Python value of a scalar literal, else None."""
    return a.value if isinstance(a, Literal) else None


def eqn_count(j: Jaxpr) -> int:
    from ..core import all_eqns

    return sum(1 for _ in all_eqns(j))
