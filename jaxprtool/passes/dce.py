"""Dead-code elimination, following JAX's `pe.dce_jaxpr` and its rules for jit, cond, while, scan.

* An equation none of whose results is used is removed, unless it has effects
  (`primitives.EFFECTFUL`, Ref operands, or such an equation nested inside).
* jit/pjit/closed_call/remat bodies: unused results are pruned, then unused
  operands (body binders, the equation's operands and the per-operand
  parameters `in_shardings`, `donated_invars`, ... follow).  Body constvars are
  never pruned (as in JAX).
* cond: results unused outside are pruned from every branch; an operand is kept
  when any branch uses it.
* while: a carry is removed only when it is unused outside, not read by the cond
  and not needed by the body to compute a live carry (fixpoint, as in JAX).
* scan: same fixpoint over carries; unused `ys` and unused consts/xs are
  pruned; `num_consts`/`num_carry`/`linear` (JAX <= 0.10) or `ft_in`/`ft_out`
  (JAX 0.12 flat trees, see `flattree.py`) are updated.  When the flat-tree
  text is not understood the scan keeps its signature (only its body is cleaned).
* Any other equation with nested jaxprs keeps its signature; its bodies are
  cleaned with every result and operand kept.

The top-level jaxpr keeps all its inputs and constvars.
"""

from __future__ import annotations

from ..core import Eqn, Jaxpr, OpaqueType, RefType, Var, eqn_subjaxprs
from . import flattree
from .base import Pass, PassOption, PassOptionError
from .common import (
    CALL_IN_PARAMS,
    CALL_OUT_PARAMS,
    JaxprMemo,
    call_body_param,
    eqn_has_effects,
    map_eqn_jaxprs,
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
    JAX does).  Effectful equations are kept.

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


def _is_ref(v) -> bool:
    return isinstance(v.type, RefType)


class _DCE:
    def __init__(self):
        self.memo = JaxprMemo()

    def run(
        self, jaxpr: Jaxpr, used_outputs: tuple, instantiate: tuple
    ) -> tuple[Jaxpr, list[bool]]:
        """(new jaxpr, used_inputs); the new jaxpr has the outputs where used_outputs and the
        inputs where used_inputs (instantiate forces an input to stay)."""
        used_outputs, instantiate = tuple(used_outputs), tuple(instantiate)
        key = (jaxpr, used_outputs, instantiate)
        hit = self.memo.get(key)
        if hit is not None:
            return hit
        live: set[int] = set()
        for v, u in zip(jaxpr.outvars, used_outputs):
            if u and isinstance(v, Var):
                live.add(id(v))
        new_eqns: list[Eqn] = []
        changed = False
        for e in reversed(jaxpr.eqns):
            used_outs = [id(o) in live for o in e.outputs]
            used_ins, ne = self.rule(e, used_outs)
            if ne is not e:
                changed = True
            if ne is not None:
                new_eqns.append(ne)
                for a, u in zip(e.inputs, used_ins):
                    if u and isinstance(a, Var):
                        live.add(id(a))
        used_inputs = [
            bool(i) or id(v) in live or _is_ref(v) for v, i in zip(jaxpr.invars, instantiate)
        ]
        if not changed and all(used_inputs) and all(used_outputs):
            return self.memo.put(key, (jaxpr, used_inputs))
        new = jaxpr.replace(
            invars=[v for v, u in zip(jaxpr.invars, used_inputs) if u],
            eqns=new_eqns[::-1],
            outvars=[v for v, u in zip(jaxpr.outvars, used_outputs) if u],
        )
        return self.memo.put(key, (new, used_inputs))

    def clean(self, j: Jaxpr) -> Jaxpr:
        """DCE inside a nested jaxpr, keeping its signature."""
        return self.run(j, (True,) * len(j.outvars), (True,) * len(j.invars))[0]

    # ------------------------------------------------------------ rules

    def rule(self, e: Eqn, used_outs: list[bool]) -> tuple[list[bool], Eqn | None]:
        if not any(used_outs) and not eqn_has_effects(e):
            return [False] * len(e.inputs), None
        if not eqn_subjaxprs(e):  # the rules below are for equations with nested jaxprs
            return [True] * len(e.inputs), e
        try:
            body_param = call_body_param(e.prim)
            if body_param is not None and isinstance(e.params.get(body_param), Jaxpr):
                return self.call_rule(e, used_outs)
            if e.prim == "cond" and _is_jaxpr_tuple(e.params.get("branches")):
                return self.cond_rule(e, used_outs)
            if e.prim == "while" and isinstance(e.params.get("body_jaxpr"), Jaxpr):
                return self.while_rule(e, used_outs)
            if e.prim == "scan" and isinstance(e.params.get("jaxpr"), Jaxpr):
                return self.scan_rule(e, used_outs)
        except (_Unsupported, ValueError, TypeError, IndexError, KeyError):
            pass  # malformed or unmodelled parameters: keep the signature
        return [True] * len(e.inputs), map_eqn_jaxprs(e, self.clean)

    def call_rule(self, e: Eqn, used_outs):
        pname = call_body_param(e.prim)
        body: Jaxpr = e.params[pname]
        _check_arity(body, e)
        inst = tuple(_is_ref(v) or isinstance(v.type, OpaqueType) for v in body.invars)
        new_body, used_ins = self.run(body, tuple(used_outs), inst)
        if new_body is body and all(used_ins) and all(used_outs):
            return used_ins, e
        params = dict(e.params)
        params[pname] = new_body
        for k in CALL_IN_PARAMS:
            params[k] = _filter_param(params, k, used_ins)
        for k in CALL_OUT_PARAMS:
            params[k] = _filter_param(params, k, used_outs)
        params = {k: v for k, v in params.items() if k in e.params}
        return used_ins, _rebuild(e, used_ins, used_outs, params)

    def cond_rule(self, e: Eqn, used_outs):
        branches = e.params["branches"]
        nops = len(e.inputs) - 1
        for b in branches:
            if len(b.invars) != nops or len(b.outvars) != len(e.outputs):
                raise _Unsupported
        used_ops = [False] * nops
        for b in branches:
            _, u = self.run(b, tuple(used_outs), tuple(_is_ref(v) for v in b.invars))
            used_ops = [x or y for x, y in zip(used_ops, u)]
        new_branches = tuple(self.run(b, tuple(used_outs), tuple(used_ops))[0] for b in branches)
        used_ins = [True, *used_ops]
        if all(used_ops) and all(used_outs) and all(n is b for n, b in zip(new_branches, branches)):
            return used_ins, e
        params = dict(e.params, branches=type(branches)(new_branches))
        if "linear" in params:
            params["linear"] = _filter_param(params, "linear", used_ops)
        return used_ins, _rebuild(e, used_ins, used_outs, params)

    def while_rule(self, e: Eqn, used_outs):
        cond_j: Jaxpr = e.params["cond_jaxpr"]
        body_j: Jaxpr = e.params["body_jaxpr"]
        cn, bn = int(e.params["cond_nconsts"]), int(e.params["body_nconsts"])
        ncarry = len(e.outputs)
        if (
            len(e.inputs) != cn + bn + ncarry
            or len(body_j.invars) != bn + ncarry
            or len(cond_j.invars) != cn + ncarry
        ):
            raise _Unsupported
        if len(body_j.outvars) != ncarry:
            raise _Unsupported
        carry_ref = [_is_ref(v) for v in body_j.invars[bn:]]
        used_carry = [u or r for u, r in zip(used_outs, carry_ref)]
        cond_inst = tuple(_is_ref(v) for v in cond_j.invars)
        for _ in range(ncarry + 2):
            _, cu = self.run(cond_j, (True,), cond_inst)
            used_carry = [x or y for x, y in zip(used_carry, cu[cn:])]
            binst = tuple([_is_ref(v) for v in body_j.invars[:bn]] + used_carry)
            new_body, bu = self.run(body_j, tuple(used_carry), binst)
            carry_in = bu[bn:]
            if carry_in == used_carry:
                break
            used_carry = [x or y for x, y in zip(used_carry, carry_in)]
        else:  # pragma: no cover - the fixpoint is reached in ncarry+1 steps
            raise _Unsupported
        new_cond, cu = self.run(
            cond_j, (True,), tuple([_is_ref(v) for v in cond_j.invars[:cn]] + used_carry)
        )
        used_ins = [*cu[:cn], *bu[:bn], *used_carry]
        if all(used_ins) and new_cond is cond_j and new_body is body_j:
            return used_ins, e
        params = dict(
            e.params,
            cond_jaxpr=new_cond,
            body_jaxpr=new_body,
            cond_nconsts=sum(cu[:cn]),
            body_nconsts=sum(bu[:bn]),
        )
        return used_ins, _rebuild(e, used_ins, used_carry, params)

    def scan_rule(self, e: Eqn, used_outs):
        body: Jaxpr = e.params["jaxpr"]
        p = e.params
        if "num_consts" in p and "num_carry" in p:
            nconsts, ncarry = int(p["num_consts"]), int(p["num_carry"])
            ft_in = ft_out = None
        elif "ft_in" in p and "ft_out" in p:
            ft_in, ft_out = flattree.parse_param(p["ft_in"]), flattree.parse_param(p["ft_out"])
            if ft_in is None or ft_out is None:
                raise _Unsupported
            parts_in, parts_out = flattree.unpack(ft_in), flattree.unpack(ft_out)
            if parts_in is None or parts_out is None or len(parts_in) != 3 or len(parts_out) != 2:
                raise _Unsupported
            nconsts, ncarry = flattree.length(parts_in[0]), flattree.length(parts_in[1])
            if flattree.length(parts_out[0]) != ncarry or flattree.length(ft_in) != len(e.inputs):
                raise _Unsupported
            if flattree.length(ft_out) != len(e.outputs):
                raise _Unsupported
        else:
            raise _Unsupported
        nin = len(e.inputs)
        if len(body.invars) != nin or len(body.outvars) != len(e.outputs) or nconsts + ncarry > nin:
            raise _Unsupported
        if ncarry > len(e.outputs):
            raise _Unsupported
        used_carry = [
            u or _is_ref(v)
            for u, v in zip(used_outs[:ncarry], body.invars[nconsts : nconsts + ncarry])
        ]
        used_ys = list(used_outs[ncarry:])
        refs = [_is_ref(v) for v in body.invars]
        for _ in range(ncarry + 2):
            inst = tuple(refs[:nconsts] + used_carry + refs[nconsts + ncarry :])
            new_body, used_ins = self.run(body, tuple(used_carry + used_ys), inst)
            carry_in = used_ins[nconsts : nconsts + ncarry]
            if carry_in == used_carry:
                break
            used_carry = [x or y for x, y in zip(used_carry, carry_in)]
        else:  # pragma: no cover
            raise _Unsupported
        new_used_outs = used_carry + used_ys
        if all(used_ins) and all(new_used_outs) and new_body is body:
            return used_ins, e
        params = dict(p, jaxpr=new_body)
        if ft_in is not None:
            params["ft_in"] = flattree.to_param(
                flattree.filter_with_mask(ft_in, used_ins), p["ft_in"]
            )
            params["ft_out"] = flattree.to_param(
                flattree.filter_with_mask(ft_out, new_used_outs), p["ft_out"]
            )
        else:
            params["num_consts"] = _like(p["num_consts"], sum(used_ins[:nconsts]))
            params["num_carry"] = _like(p["num_carry"], sum(used_carry))
            if "linear" in params:
                params["linear"] = _filter_param(params, "linear", used_ins)
        return used_ins, _rebuild(e, used_ins, new_used_outs, params)


class _Unsupported(Exception):
    pass


def _is_jaxpr_tuple(v) -> bool:
    return isinstance(v, (tuple, list)) and len(v) > 0 and all(isinstance(x, Jaxpr) for x in v)


def _check_arity(body: Jaxpr, e: Eqn) -> None:
    if len(body.invars) != len(e.inputs) or len(body.outvars) != len(e.outputs):
        raise _Unsupported


def _filter_param(params: dict, key: str, mask: list[bool]):
    v = params.get(key)
    if isinstance(v, (tuple, list)) and len(v) == len(mask):
        return type(v)(x for x, m in zip(v, mask) if m)
    return v


def _like(old, n: int):
    """n in the representation of `old` (an int, or a numpy-scalar param value)."""
    if isinstance(old, int):
        return n
    try:
        return type(old)(old.dtype, n)
    except Exception:
        return n


def _rebuild(e: Eqn, used_ins, used_outs, params) -> Eqn:
    return Eqn(
        e.prim,
        tuple(a for a, u in zip(e.inputs, used_ins) if u),
        tuple(o for o, u in zip(e.outputs, used_outs) if u),
        params,
        e.loc,
    )
