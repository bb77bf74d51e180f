"""Dead-code elimination, following JAX's `pe.dce_jaxpr` and its `dce_rules`.

* An equation none of whose results is used is removed, unless it has effects
  (an effectful primitive, or such an equation nested inside) or writes a live Ref.  Ref
  liveness is JAX's: a Ref is live where something later reads it or when the program did
  not make it (an input, unless the caller says it is dead: `live_inputs`); a read or a
  new_ref whose result is unused is dead.
* Calls (a record with `call_body`: jit/pjit/closed_call/remat...): unused results are
  pruned, then unused operands (body binders, the equation's operands and the per-operand
  parameters `in_shardings`, `donated_invars`, ... follow).  Body constvars are never
  pruned (as in JAX).
* A primitive with a `dce` rule on its record (cond, while, scan, shard_map, xla_pmap,
  custom_jvp_call, custom_vjp_call: see their family modules) prunes its own operands,
  results and bodies, its bodies' writes into Refs dead after it included where JAX's rule
  does; `keep_whole` is JAX's default rule (run_state, pallas_call); a rule raising
  `Unsupported` (or failing on malformed parameters) keeps the signature.
* Any other equation with nested jaxprs keeps its signature; its bodies are
  cleaned with every result and operand kept.

The top-level jaxpr keeps all its inputs and constvars.
"""

from __future__ import annotations

from ..core import Eqn, Jaxpr, OpaqueType, RefType, Var, eqn_subjaxprs
from ..record import prim
from ..shapes import ShapeError
from ..text.twin import twin
from .base import Pass, PassOption, PassOptionError
from .common import (
    CALL_IN_PARAMS,
    CALL_OUT_PARAMS,
    JaxprMemo,
    call_body_param,
    eqn_has_live_effects,
    map_eqn_jaxprs,
    ref_allocs,
)


def dce(jaxpr: Jaxpr) -> Jaxpr:
    """Remove equations whose results are unused (the outputs and inputs are kept)."""
    return _DCE().run(jaxpr, (True,) * len(jaxpr.outvars), (True,) * len(jaxpr.invars))[0]


def dce_keep_outputs(jaxpr: Jaxpr, keep: list[int]) -> Jaxpr:
    """Keep only the outputs at the given positions (in that order), then DCE."""
    n = len(jaxpr.outvars)
    for i in keep:
        if not 0 <= i < n:
            from ..core import JaxprError

            raise JaxprError(
                f"--keep-outputs: output index {i} out of range (the program has {n} outputs)"
            )
    return dce(jaxpr.replace(outvars=[jaxpr.outvars[i] for i in keep]))


def _dce_pass(jaxpr: Jaxpr, keep_outputs: tuple[int, ...] | None = None) -> Jaxpr:
    if keep_outputs is None:
        return dce(jaxpr)
    n = len(jaxpr.outvars)
    bad = [i for i in keep_outputs if not 0 <= i < n]
    if bad:
        raise PassOptionError(
            "dce",
            "keep-outputs",
            f"output index {bad[0]} out of range (the program has {n} outputs)",
        )
    return dce_keep_outputs(jaxpr, list(keep_outputs))


DCE = Pass(
    name="dce",
    help="Remove unused equations, also inside nested jaxprs.",
    doc="""Dead-code elimination: remove equations whose results are unused, also inside nested
    jaxprs (jit bodies, cond branches, scan/while bodies: unused carries and outputs pruned as
    JAX does).  Effectful equations are kept, except writes into a Ref the program makes
    that nothing reads afterwards (dead, as in JAX).

    \b
    Example:
      jaxprtool dce f.jaxpr --keep-outputs 0,2
    """,
    fn=_dce_pass,
    options=(
        PassOption(
            "keep-outputs",
            list[int],
            None,
            "Keep only these outputs (0-based), then DCE.",
            metavar="I,J,...",
            noun="output indices",
        ),
    ),
)


def is_ref(v) -> bool:
    return isinstance(v.type, RefType)


class _DCE:
    def __init__(self):
        self.memo = JaxprMemo()

    def run(
        self, jaxpr: Jaxpr, used_outputs: tuple, instantiate: tuple, live_inputs=None
    ) -> tuple[Jaxpr, list[bool]]:
        """(new jaxpr, used_inputs); the new jaxpr has the outputs where used_outputs and the
        inputs where used_inputs (instantiate forces an input to stay).  `live_inputs` (None:
        all): whether a Ref input may be read after the jaxpr returns; a write into one that
        may not, and that nothing in the jaxpr reads later, is dead (JAX's `live_inputs`)."""
        used_outputs, instantiate = tuple(used_outputs), tuple(instantiate)
        live_inputs = None if live_inputs is None or all(live_inputs) else tuple(live_inputs)
        key = (jaxpr, used_outputs, instantiate, live_inputs)
        hit = self.memo.get(key)
        if hit is not None:
            return hit
        live: set = set()  # the atoms read later (Vars hash by identity)
        for v, u in zip(jaxpr.outvars, used_outputs):
            if u and isinstance(v, Var):
                live.add(v)
        local = ref_allocs(jaxpr.eqns)
        if live_inputs is not None:
            local.update(id(v) for v, u in zip(jaxpr.invars, live_inputs) if not u)

        def ref_live(r) -> bool:
            return r in live or id(r) not in local

        new_eqns, changed = self._sweep(jaxpr.eqns, live, ref_live)
        used_inputs = [bool(i) or v in live for v, i in zip(jaxpr.invars, instantiate)]
        if not changed and all(used_inputs) and all(used_outputs):
            return self.memo.put(key, (jaxpr, used_inputs))
        new = jaxpr.replace(
            invars=[v for v, u in zip(jaxpr.invars, used_inputs) if u],
            eqns=new_eqns[::-1],
            outvars=[v for v, u in zip(jaxpr.outvars, used_outputs) if u],
        )
        return self.memo.put(key, (new, used_inputs))

    def _sweep(self, eqns, live: set, ref_live) -> tuple[list[Eqn], bool]:
        """The equations kept (pruned by their rules), last first, and whether any was
        removed or rewritten; `live` (the atoms read later) takes the operands of those
        kept.  (A set of the atoms, not of their ids: Vars hash by identity, a literal
        remembers its hash, and no int is made per operand: 58 -> 32 ms at 70k equations.)"""
        kept: list[Eqn] = []
        tw = twin()
        if tw is not None:
            return self._sweep_compiled(tw, eqns, live, ref_live, kept)
        changed = False
        for e in reversed(eqns):
            changed |= self._step(e, live, ref_live, kept)
        return kept, changed

    def _sweep_compiled(self, tw, eqns, live: set, ref_live, kept) -> tuple[list[Eqn], bool]:
        """`_sweep` with its loop compiled (`_twin.dce_sweep`), which hands back each
        equation that may hold a jaxpr to `_step`."""
        eqns = eqns if eqns.__class__ is tuple else tuple(eqns)
        effects = lambda e: eqn_has_live_effects(e, ref_live)  # noqa: E731
        k, changed = len(eqns) - 1, False
        while k >= 0:
            k, dropped = tw.dce_sweep(eqns, k, live, kept, effects)
            changed |= dropped
            if k < 0:
                break
            changed |= self._step(eqns[k], live, ref_live, kept)
            k -= 1
        return kept, changed

    def _step(self, e: Eqn, live: set, ref_live, kept: list) -> bool:
        """One equation of the backward sweep (the reference `_twin.dce_sweep` mirrors):
        dropped when no result is read later and it has no live effect, kept whole when it
        holds no jaxpr (rules are for bodies), else pruned by its rule; whether it was
        dropped or rewritten."""
        outs = e.outputs
        # (one result, most equations: looked up without a walk over the tuple)
        dead = outs[0] not in live if len(outs) == 1 else live.isdisjoint(outs)
        if dead and not eqn_has_live_effects(e, ref_live):
            return True
        if e.no_subjaxprs or not eqn_subjaxprs(e):
            kept.append(e)
            for a in e.inputs:  # (a literal is no result: never looked up, nor hashed)
                if a.__class__ is Var:
                    live.add(a)
            return False
        return self._with_bodies(e, live, ref_live, kept)

    def _with_bodies(self, e: Eqn, live: set, ref_live, kept: list) -> bool:
        """Keep `e`, an equation with nested jaxprs whose result or effect is live, as its
        rule prunes it (appended to `kept`, its used operands added to `live`); whether the
        rule changed it."""
        used_outs = [o in live for o in e.outputs]
        live_ins = [not is_ref(a) or ref_live(a) for a in e.inputs]
        used_ins, ne = self.rule(e, used_outs, live_ins)
        if ne is not None:
            kept.append(ne)
            for a, u in zip(e.inputs, used_ins):
                if u and isinstance(a, Var):
                    live.add(a)
        return ne is not e

    def clean(self, j: Jaxpr) -> Jaxpr:
        """DCE inside a nested jaxpr, keeping its signature."""
        return self.run(j, (True,) * len(j.outvars), (True,) * len(j.invars))[0]

    # ------------------------------------------------------------ rules

    def rule(
        self, e: Eqn, used_outs: list[bool], live_ins: list[bool]
    ) -> tuple[list[bool], Eqn | None]:
        """(used operands, the equation pruned or None); `live_ins`: whether each operand
        (a Ref's contents) may be read after the equation."""
        if not any(used_outs) and not eqn_has_live_effects(e, _live_by(e, live_ins)):
            return [False] * len(e.inputs), None
        if not eqn_subjaxprs(e):  # the rules below are for equations with nested jaxprs
            return [True] * len(e.inputs), e
        try:
            body_param = call_body_param(e.prim)
            if body_param is not None and isinstance(e.params.get(body_param), Jaxpr):
                return self.call_rule(e, used_outs, live_ins)
            rule = prim(e.prim).dce
            if rule is not None:
                return rule(used_outs, e, self.run, live_ins)
        except (Unsupported, ShapeError, ValueError, TypeError, IndexError, KeyError):
            pass  # malformed or unmodelled parameters: keep the signature
        return [True] * len(e.inputs), map_eqn_jaxprs(e, self.clean)

    def call_rule(self, e: Eqn, used_outs, live_ins):
        pname = call_body_param(e.prim)
        body: Jaxpr = e.params[pname]
        _check_arity(body, e)
        inst = tuple(isinstance(v.type, OpaqueType) for v in body.invars)
        new_body, used_ins = self.run(body, tuple(used_outs), inst, live_ins)
        if new_body is body and all(used_ins) and all(used_outs):
            return used_ins, e
        params = dict(e.params)
        params[pname] = new_body
        for k in CALL_IN_PARAMS:
            params[k] = filter_param(params, k, used_ins)
        for k in CALL_OUT_PARAMS:
            params[k] = filter_param(params, k, used_outs)
        params = {k: v for k, v in params.items() if k in e.params}
        return used_ins, rebuild(e, used_ins, used_outs, params)


def _live_by(e: Eqn, live_ins: list[bool]):
    """`ref_live` for the operands of `e`, from their flags."""
    live = {id(a) for a, u in zip(e.inputs, live_ins) if u}
    return lambda r: id(r) in live


def prune_dead_refs(e: Eqn, used_outs: list[bool], ref_live) -> Eqn | None:
    """The equation pruned by its DCE rule (a call's, or its record's), or None when it is
    dead: AD's flat DCE asks when a Ref operand is dead after the equation.  Any other
    equation is returned as it is."""
    if call_body_param(e.prim) is None and prim(e.prim).dce is None:
        return e
    live_ins = [not is_ref(a) or ref_live(a) for a in e.inputs]
    return _DCE().rule(e, used_outs, live_ins)[1]


def prune_eqn(e: Eqn, used_outs: list[bool]) -> Eqn | None:
    """The equation with the results `used_outs` only, its operands and bodies pruned by its
    DCE rule (None when it is dead); an equation without a rule keeps its signature."""
    return _DCE().rule(e, used_outs, [True] * len(e.inputs))[1]


def keep_whole(used_outs, e, dce_jaxpr, live_ins):
    """JAX's default DCE rule, for a primitive with bodies that JAX gives no rule of its own
    (run_state, pallas_call keep theirs): used, the equation keeps every operand and result
    and its bodies as they are."""
    return [True] * len(e.inputs), e


class Unsupported(Exception):
    """Raised by a DCE rule: the equation keeps its signature (only its bodies are cleaned)."""


def _check_arity(body: Jaxpr, e: Eqn) -> None:
    if len(body.invars) != len(e.inputs) or len(body.outvars) != len(e.outputs):
        raise Unsupported


def filter_param(params: dict, key: str, mask: list[bool]):
    """The per-operand (or per-result) parameter `key` with the entries where `mask` is False
    left out (unchanged when it is not a sequence of that length)."""
    v = params.get(key)
    if isinstance(v, (tuple, list)) and len(v) == len(mask):
        return type(v)(x for x, m in zip(v, mask) if m)
    return v


def rebuild(e: Eqn, used_ins, used_outs, params) -> Eqn:
    """The equation with the used operands and results only, and the given params."""
    return Eqn(
        e.prim,
        tuple(a for a, u in zip(e.inputs, used_ins) if u),
        tuple(o for o, u in zip(e.outputs, used_outs) if u),
        params,
        e.loc,
    )
