"""The equation builder that rules emit into (one program, or two at once for linearize).

`Builder.bind` types a new equation with `shapes.infer_types` and appends it.  A *split*
builder (linearize) sends every equation that touches a tangent value to the tangent program and
every other one to the primal program; `tangent_mode()` forces equations (e.g. instantiated
zeros) into the tangent program.  `ops` functions emit into the *current* builder (`current()`),
set with `with use(builder): ...`.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterable

from .. import shapes
from ..core import (
    Atom,
    Eqn,
    Jaxpr,
    JaxprError,
    Literal,
    Loc,
    RefType,
    ShapedArray,
    Type,
    Var,
    eqn_subjaxprs,
)
from ..record import prim as record_of
from ..shardings import AXIS_SIZES_KEY, axis_sizes_key, is_sharded_dim
from ..text.twin import twin
from .invocation import Invocation, entry_invocation

#: the builder whose walk runs the rule under way (`use`).  (why a value cannot carry it:
#: the `ops` helpers every rule calls (`ops.add`, `ops.mul`, ...) emit into it, and passing
#: the builder instead would add a parameter to every rule and helper signature, JAX's
#: rule signatures included; the builder carries the call's `Invocation`, so this is the
#: only ambient state the rules see.)
_CURRENT: contextvars.ContextVar[Builder | None] = contextvars.ContextVar(
    "jaxprtool_ad_builder", default=None
)


class Builder:
    """Appends typed equations.  `split=True`: two programs (primal and tangent)."""

    def __init__(
        self, split: bool = False, loc: Loc | None = None, remat=None, plans=None, invocation=None
    ):
        self.split = split
        self.loc: Loc | None = loc
        #: the request of the command or API call (`Invocation`): the rematerialization
        #: request and its plans' list, the custom-rule policy.  A builder made while another
        #: runs a rule (a body's linearization, a rule's helper program) takes the running
        #: one's, so nested bodies follow it; `remat`/`plans` given: the same with that
        #: request (`linearize_jaxpr`'s own)
        if invocation is None:
            outer = _CURRENT.get()
            invocation = entry_invocation() if outer is None else outer.invocation
        if remat is not None or plans is not None:
            invocation = invocation.with_remat(
                remat if remat is not None else invocation.remat,
                plans if plans is not None else invocation.plans,
            )
        self.invocation: Invocation = invocation
        self.primal_eqns: list[Eqn] = []
        self.tangent_eqns: list[Eqn] = []
        #: the Vars of the tangent program (split mode), themselves: they hash by identity
        self._tangent_vars: set[Var] = set()
        self._force_tangent = 0
        #: the equation whose rule is running (the walks set it; rules read its types)
        self.cur_eqn: Eqn | None = None
        #: the compiled twin of `bind`'s lines (None: they run alone); it appends as
        #: `add_eqn` does, so a builder that checks what is appended (its own `add_eqn`)
        #: binds through the Python lines
        self._bind_fast = _compiled_bind() if type(self).add_eqn is Builder.add_eqn else None

    # one-program view
    @property
    def eqns(self) -> list[Eqn]:
        return self.primal_eqns

    def mark_tangent(self, *vs: Atom) -> None:
        self._tangent_vars.update([v for v in vs if isinstance(v, Var)])

    def is_tangent(self, x: Atom) -> bool:
        return isinstance(x, Var) and x in self._tangent_vars

    @contextlib.contextmanager
    def tangent_mode(self):
        self._force_tangent += 1
        try:
            yield
        finally:
            self._force_tangent -= 1

    def add_eqn(self, eqn: Eqn) -> None:
        """Append an already built equation (choosing the program in split mode)."""
        if self.split:
            tangent_vars = self._tangent_vars
            tangent = self._force_tangent
            if not tangent:
                for x in eqn.inputs:  # (a literal is never a tangent: not looked up)
                    if x.__class__ is not Literal and x in tangent_vars:
                        tangent = True
                        break
            if tangent:
                self.tangent_eqns.append(eqn)
                tangent_vars.update(eqn.outputs)
                return
        self.primal_eqns.append(eqn)

    def emit(
        self, prim: str, inputs: Iterable[Atom], params: dict, out_types: Iterable[Type], hints=None
    ) -> list[Var]:
        """Append `prim[params] inputs` with the given result types; returns the new Vars."""
        if hints is None:
            outs = [Var(t, None) for t in out_types]
        else:
            outs = [Var(t, h) for t, h in zip(out_types, hints)]
        self.add_eqn(Eqn(prim, tuple(inputs), tuple(outs), dict(params), self.loc))
        return outs

    def bind(
        self, prim: str, inputs: Iterable[Atom], params: dict, out_types=None, params_key=None
    ) -> list[Var]:
        """Append an equation, inferring result types unless `out_types` is given.

        `params_key`: a hashable value that stands for `params`, equal for two parameter sets
        only where they give the same result types on the same operand types (an ops helper's
        tuple of ints): the inferred types are then remembered by it and by the identities
        of the operand types, as those of an equation without parameters always are."""
        fast = self._bind_fast
        if fast is not None:  # (the lines below, compiled, where they are sure)
            outs = fast(
                prim, inputs, params, out_types, params_key, self.loc, self.primal_eqns,
                self.tangent_eqns if self.split else None, self._tangent_vars,
                self._force_tangent, _REMEMBERED, AXIS_SIZES_KEY, Literal,
            )  # fmt: skip
            if outs is not None:
                return outs
        inputs = tuple(inputs)
        for x in inputs:
            cls = x.__class__
            if cls is not Var and cls is not Literal and not isinstance(x, (Var, Literal)):
                raise TypeError(
                    f"ops.{prim}: operand {x!r} is not an Atom (instantiate Zero tangents first)"
                )
        if out_types is None:
            if params and params_key is None:
                out_types = _interned(infer([x.type for x in inputs], prim, params, self.loc))
            else:
                out_types = _remembered_types(inputs, prim, params, params_key, self.loc)
        outs = [Var(t, None) for t in out_types]
        self.add_eqn(Eqn(prim, inputs, tuple(outs), dict(params) if params else {}, self.loc))
        return outs


def _compiled_bind():
    """The compiled twin's `bind_fast_vars` (text/twin.py), or None (not built, or
    JAXPRTOOL_PURE_PYTHON set)."""
    tw = twin()
    return None if tw is None else tw.bind_fast_vars


#: the running builder or None, as one bound C call (no Python frame): `ops`' emitters, called
#: for every equation a rule emits, ask `running() or current()` (`current` raises for None)
running = _CURRENT.get


def current() -> Builder:
    b = _CURRENT.get()
    if b is None:
        raise RuntimeError("no current AD builder: ops must run inside `with builder.use(b)`")
    return b


def remat_request() -> tuple:
    """(the rematerialization request, the list its plans go to) of the linearization the
    running builder emits; (None, None) outside one."""
    b = _CURRENT.get()
    return (None, None) if b is None else (b.invocation.remat, b.invocation.plans)


def invocation() -> Invocation:
    """The request of the command or API call whose walk runs the rule (`Invocation`); a
    new one (this command's policy, no rematerialization) outside any walk."""
    b = _CURRENT.get()
    return entry_invocation() if b is None else b.invocation


def current_loc() -> Loc | None:
    """The location of the equation being differentiated, if any."""
    b = _CURRENT.get()
    return None if b is None else b.loc


@contextlib.contextmanager
def use(b: Builder):
    token = _CURRENT.set(b)
    try:
        yield b
    finally:
        _CURRENT.reset(token)


# ---------------------------------------------------------------- type inference


def infer(in_types: list[Type], prim: str, params: dict, loc: Loc | None = None) -> list[Type]:
    """Result types of a new equation, from the primitive's shape rule."""
    rule = record_of(prim).shape_rule
    if rule is None:
        raise JaxprError(f"cannot infer the result type of '{prim}' (no shape rule)", loc)
    try:
        types = shapes.infer_with_rule(rule, in_types, params, None)
    except shapes.ShapeError as e:
        raise JaxprError(f"while differentiating: {prim}: {e}", loc) from None
    require_shardings_known(prim, types, loc)
    return types


#: (primitive, the key of its parameters (None: none), the ids of the operand types) -> (the
#: operand types, kept so that their ids stay theirs; the result types): `infer` of
#: equations without parameters (add_any, mul, neg: most of what the rules emit) or with a
#: `params_key`, whose results passed `require_shardings_known` (`_remembered_types`)
_REMEMBERED: dict[tuple, tuple[tuple[Type, ...], tuple[Type, ...]]] = {}


def _remembered_types(
    inputs: tuple, prim: str, params: dict, params_key, loc: Loc | None
) -> tuple[Type, ...]:
    """`infer` of an equation without parameters, or with the parameters `params_key` stands
    for (`Builder.bind`), remembered by the identities of its operand types: types come out
    of the memo and pass on from operand to result."""
    n = len(inputs)
    if n == 2:
        key = (prim, params_key, id(inputs[0].type), id(inputs[1].type))
    elif n == 1:
        key = (prim, params_key, id(inputs[0].type))
    else:
        key = (prim, params_key, *[id(x.type) for x in inputs])
    try:
        hit = _REMEMBERED.get(key)
    except TypeError:  # (an unhashable key: a list among the parameters)
        return tuple(infer([x.type for x in inputs], prim, params, loc))
    if hit is not None and not axis_sizes_key():
        return hit[1]
    in_types = [x.type for x in inputs]
    _interned(in_types)  # (a result equal to an operand's type is that object)
    out = _interned(infer(in_types, prim, params, loc))
    if not axis_sizes_key():  # (a result may depend on the mesh axis sizes in force)
        if len(_REMEMBERED) > 100_000:
            _REMEMBERED.clear()
        _REMEMBERED[key] = (tuple(in_types), out)
    return out


#: one object per array type value (all its fields, weak_type included) among the operand
#: and result types of the equations whose types the builder inferred (`_interned`)
_INTERNED: dict[tuple, ShapedArray] = {}


def _interned(types) -> tuple[Type, ...]:
    """`types`, each array type replaced by the first object of its value the builder met:
    equal result types of different equations are one object, and so are a result's and an
    operand's, so that `_REMEMBERED`'s keys (the operand types' identities) and the walks'
    `is` tests of types (`same_tangent_type`'s shortcut) find them equal without a call."""
    if len(_INTERNED) > 100_000:
        _INTERNED.clear()
    out = []
    for t in types:
        if t.__class__ is ShapedArray:
            key = (t.shape, t.dtype, t.weak_type, t.memory_space, t.vma, t.named_shape)
            t = _INTERNED.setdefault(key, t)
        out.append(t)
    return tuple(out)


def require_shardings_known(
    prim: str, types: list[Type], loc: Loc | None, doing: str = "differentiating"
) -> None:
    """Refuse, at the equation, a result type that a rule computed by arithmetic on sharded
    dims (`4*(2*b@x)`, `8@x + 8@x`) rather than by JAX's sharding rule."""
    for t in types:
        for d in getattr(t, "shape", ()):
            if d.__class__ is str and "@" in d and not is_sharded_dim(d):
                raise JaxprError(_garbled_sharding(prim, t, doing), loc)


def _garbled_sharding(prim: str, t: Type, doing: str) -> str:
    """A shape rule that adds or scales sharded dims (`8@x + 8@x`) as if they were symbolic:
    the tool cannot say how JAX shards the result, so it refuses rather than print it."""
    return (
        f"while {doing}: '{prim}' on explicitly sharded operands gives {t}: the tool "
        "does not know the sharding of this result; reshard the operands to replicated before "
        "it (`jax.sharding.reshard(x, P())`) or differentiate the program traced without an "
        "explicit mesh"
    )


# ---------------------------------------------------------------- small jaxpr utilities


def dce_eqns(eqns: list[Eqn], live_out: Iterable[Atom]) -> list[Eqn]:
    """Drop equations whose results are not needed by `live_out`; effectful ones are kept
    (a jit or scan around a debug_print, as vmap's per-example loop makes), as JAX keeps
    them, and so are writes into a Ref unless the Ref is made here (new_ref) and nothing
    after the write reads it (JAX's Ref liveness: a Ref made elsewhere may be read later)."""
    from ..passes.common import eqn_has_live_effects, ref_allocs

    # (`live` holds the Vars themselves: they hash by identity)
    live = {v for v in live_out if isinstance(v, Var)}
    local = ref_allocs(eqns)

    def ref_live(r) -> bool:
        return r in live or id(r) not in local

    kept: list[Eqn] = []
    tw = twin()
    if tw is not None:  # (the loop below, compiled)
        prune = (lambda e: _prune_dead_refs(e, live, ref_live)) if local else None
        tw.dce_walk_vars(eqns, live, kept, lambda e: eqn_has_live_effects(e, ref_live), prune)
        kept.reverse()
        return kept
    add = live.add
    for e in reversed(eqns):
        if live.isdisjoint(e.outputs) and not eqn_has_live_effects(e, ref_live):
            continue
        if local and not e.no_subjaxprs:
            e = _prune_dead_refs(e, live, ref_live)
        kept.append(e)
        for x in e.inputs:  # (a literal is no result: never looked up, nor hashed)
            if x.__class__ is Var:
                add(x)
    kept.reverse()
    return kept


def _prune_dead_refs(e: Eqn, live: set, ref_live) -> Eqn:
    """A kept equation with bodies and a Ref operand dead after it: its bodies' writes into
    that Ref are dead (the passes' DCE rule, JAX's live_inputs); unused results and operands
    go with them."""
    from ..passes.dce import prune_dead_refs

    if all(ref_live(a) for a in e.inputs if isinstance(a.type, RefType)):
        return e
    if not eqn_subjaxprs(e):
        return e
    ne = prune_dead_refs(e, [o in live for o in e.outputs], ref_live)
    return e if ne is None else ne


def free_vars(eqns: list[Eqn], outvars: Iterable[Atom], bound: Iterable[Var] = ()) -> list[Var]:
    """Vars used by `eqns`/`outvars` but defined neither by them nor in `bound`, in first-use order."""
    # (no call per operand: this runs over every equation of a linear program; `defined`
    # holds the Vars themselves, bound, defined or found free: they hash by identity)
    defined = set(bound)
    out: list[Var] = []
    define = defined.add
    for e in eqns:
        for x in e.inputs:
            if x.__class__ is Var and x not in defined:
                define(x)
                out.append(x)
        defined.update(e.outputs)
    for x in outvars:
        if x.__class__ is Var and x not in defined:
            define(x)
            out.append(x)
    return out


def substitute(eqns: list[Eqn], mapping: dict[int, Atom]) -> list[Eqn]:
    """Rename the inputs (and outvars) of equations through `mapping` (id(Var) -> Atom); an
    equation none of whose operands is renamed is kept as it is (the keys are ids of live
    Vars, so no literal operand matches one)."""
    keys = mapping.keys()
    return [
        e
        if keys.isdisjoint(map(id, e.inputs))
        else e.replace(
            inputs=[mapping.get(id(x), x) if isinstance(x, Var) else x for x in e.inputs]
        )
        for e in eqns
    ]


def make_jaxpr(invars, eqns, outvars, constvars=()) -> Jaxpr:
    return Jaxpr(tuple(constvars), tuple(invars), tuple(eqns), tuple(outvars))


def fresh_like(v: Var) -> Var:
    return Var(v.type, v.hint)


def clone_eqn(e: Eqn, read, env: dict[int, Var]) -> Eqn:
    """The one equation cloner: `e` with each Var operand read through `read(var)` and
    fresh result Vars (the same types and hints), each recorded in `env` (id of `e`'s
    result -> the copy's), after the operands are read."""
    ins = [read(x) if isinstance(x, Var) else x for x in e.inputs]
    outs = [Var(o.type, o.hint) for o in e.outputs]
    env.update({id(o): n for o, n in zip(e.outputs, outs)})
    return e.replace(inputs=ins, outputs=outs)


def clone_eqns(eqns: Iterable[Eqn], mapping: dict[int, Var]) -> list[Eqn]:
    """Copies of `eqns` with fresh binders: an operand in `mapping` (id -> Var) reads its
    image, another its own Var; `mapping` gains each result's copy."""

    def read(x):
        return mapping.get(id(x), x)

    return [clone_eqn(e, read, mapping) for e in eqns]


def clone_jaxpr(j: Jaxpr) -> Jaxpr:
    """The same jaxpr with fresh top-level variables (to use it twice in one program)."""
    m: dict[int, Var] = {}

    def fresh(v):
        n = Var(v.type, v.hint)
        m[id(v)] = n
        return n

    cv = [fresh(v) for v in j.constvars]
    iv = [fresh(v) for v in j.invars]
    eqns = clone_eqns(j.eqns, m)
    outvars = [m.get(id(x), x) if isinstance(x, Var) else x for x in j.outvars]
    return j.replace(constvars=cv, invars=iv, eqns=eqns, outvars=outvars)
