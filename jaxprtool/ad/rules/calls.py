"""Rules for call-like primitives: jit/pjit, closed_call, core_call, eval_jaxpr, remat2 (with
policies), custom_jvp_call, custom_vjp_call (with plugin rules) and optimization_barrier.

In a split (linearize) builder a call becomes two calls: the primal one returns its outputs and
residuals, the linear one maps residuals and tangents to output tangents.  In a one-program
builder (jvp) a call becomes one call of its JVP jaxpr.
"""

from __future__ import annotations

import sys

from ...core import Eqn, Jaxpr, JaxprError, Var
from ...params import Opaque, Record
from .. import builder as B
from .. import ops
from ..builder import current
from ..jvp import jvp_eval, jvp_masked
from ..linearize import LINEAR_NAME, _split, linearize_masked
from ..registry import (
    custom_jvps,
    custom_vjps,
    deflinear2,
    fancy_transposes,
    primitive_jvps,
    primitive_transposes,
    rule_kind,
)
from ..transpose import backward_pass, transpose_jaxpr
from ..zeros import Zero, instantiate, is_undefined_primal, is_zero, tangent_type

LOW_LEVEL = "jvp+linearization"

#: call primitive -> parameter holding its jaxpr
CALLS = {
    "named_call": "call_jaxpr",
    "call": "call_jaxpr",
    "xla_call": "call_jaxpr",
    "remat_call": "call_jaxpr",
    "compute_on": "jaxpr",
    "compute_on2": "jaxpr",
    "xla_metadata_call": "jaxpr",
    "jit": "jaxpr",
    "pjit": "jaxpr",
    "closed_call": "call_jaxpr",
    "core_call": "call_jaxpr",
    "eval_jaxpr": "call_jaxpr",
    "remat2": "jaxpr",
    "checkpoint": "jaxpr",
}


def _key(prim, params):
    k = CALLS.get(prim, "jaxpr")
    if k not in params:
        for alt in ("jaxpr", "call_jaxpr"):
            if alt in params:
                return alt
    return k


def _emit(prim, inputs, params, jaxpr: Jaxpr):
    return current().bind(prim, list(inputs), params, [v.type for v in jaxpr.outvars])


#: per-operand / per-result tuple parameters of jit, and the value of an entry JAX adds
_IN_TUPLES = {
    "in_shardings": Opaque("UnspecifiedValue"),
    "in_layouts": None,
    "donated_invars": False,
}
_OUT_TUPLES = {"out_shardings": Opaque("UnspecifiedValue"), "out_layouts": None}


def _resized(params, ins, outs):
    """`params` with its per-operand and per-result tuples (in_shardings, donated_invars, ...)
    rebuilt for a new call: entry k copies the original entry `ins[k]` (`outs[k]`), or is
    the default (unspecified, not donated) when that is None (as JAX's pjit rules do)."""
    p = dict(params)
    for table, src in ((_IN_TUPLES, ins), (_OUT_TUPLES, outs)):
        for k, default in table.items():
            v = params.get(k)
            if not isinstance(v, tuple):
                continue
            p[k] = tuple(v[i] if i is not None and i < len(v) else default for i in src)
    return p


def _transposed(params, mask, n_cts):
    """The per-operand / per-result tuples of a transposed call: operands are the non-linear
    inputs then one cotangent per output (with the output's sharding), results the
    cotangents of the linear inputs (with their shardings)."""
    p = dict(params)
    for ik, ok in (("in_shardings", "out_shardings"), ("in_layouts", "out_layouts")):
        vi, vo = params.get(ik), params.get(ok)
        if not isinstance(vi, tuple) or not isinstance(vo, tuple):
            continue
        p[ik] = tuple(v for v, m in zip(vi, mask) if not m) + tuple(vo[:n_cts])
        p[ok] = tuple(v for v, m in zip(vi, mask) if m)
    if isinstance(params.get("donated_invars"), tuple):
        p["donated_invars"] = (False,) * (mask.count(False) + n_cts)
    return p


def _scatter(out_nz, vals, types):
    it = iter(vals)
    return [next(it) if nz else Zero(tangent_type(t)) for nz, t in zip(out_nz, types)]


def _forward_plan(pj: Jaxpr, n: int):
    """Residual outputs of a primal body that are just its inputs are taken from the operands:
    (the pruned body, where each residual comes from: ("in", operand) or ("out", output))."""
    pos = {id(v): i for i, v in enumerate(pj.invars)}
    src = []
    keep = list(pj.outvars[:n])
    for r in pj.outvars[n:]:
        if isinstance(r, Var) and id(r) in pos:
            src.append(("in", pos[id(r)]))
        else:
            src.append(("out", len(keep)))
            keep.append(r)
    return pj.replace(outvars=keep), src


def _residuals_from(src, primals):
    def residuals(outs):
        return [primals[i] if kind == "in" else outs[i] for kind, i in src]

    return residuals


def _forward_inputs(pj: Jaxpr, n: int, primals):
    body, src = _forward_plan(pj, n)
    return body, _residuals_from(src, primals)


_MEMO: dict = {}


def _memo(kind, fn, inner: Jaxpr, nz):
    """One JVP/linearization per (body, nonzero pattern): a body called twice gets one derivative
    jaxpr object, which the printer shares (`let NAME = { lambda ... }`) as JAX does."""
    key = (kind, id(inner), tuple(nz))
    hit = _MEMO.get(key)
    if hit is not None and hit[0] is inner:
        return hit[1]
    res = fn(inner, nz, instantiate=False)
    _MEMO[key] = (inner, res)
    return res


def _call_parts(prim, params, tangents):
    """What a call primitive's JVP rule reads first: the body's param name, the body, the
    tangents' nonzero mask, the nonzero tangents, the number of results and their types."""
    key = _key(prim, params)
    inner: Jaxpr = params[key]
    nz = [not is_zero(t) for t in tangents]
    nz_t = [t for t in tangents if not is_zero(t)]
    return key, inner, nz, nz_t, len(inner.outvars), [v.type for v in inner.outvars]


def _call_jvp(prim):
    def rule(primals, tangents, **params):
        key, inner, nz, nz_t, n, out_types = _call_parts(prim, params, tangents)
        b = current()
        ins, nz_in = list(range(len(primals))), [i for i, m in enumerate(nz) if m]
        if not b.split:
            jj, out_nz = _memo("jvp", jvp_masked, inner, nz)
            outs_ix = list(range(n)) + [j for j, m in enumerate(out_nz) if m]
            p = _resized(dict(params, **{key: jj}), ins + nz_in, outs_ix)
            outs = _emit(prim, list(primals) + nz_t, p, jj)
            return outs[:n], _scatter(out_nz, outs[n:], out_types)
        pj, lj, out_nz, _ = _memo("lin", linearize_masked, inner, nz)
        pj, src = _memo("fwd", lambda j, m, instantiate: _forward_plan(j, n), pj, ())
        residuals = _residuals_from(src, primals)
        n_new = len(pj.outvars) - n
        p = _resized(dict(params, **{key: pj}), ins, list(range(n)) + [None] * n_new)
        outs = _emit(prim, primals, p, pj)
        if not any(out_nz):
            return outs[:n], [Zero(tangent_type(t)) for t in out_types]
        lin_out = [j for j, m in enumerate(out_nz) if m]
        p = _resized(dict(params, **{key: lj}), [None] * len(src) + nz_in, lin_out)
        touts = _emit(prim, residuals(outs) + nz_t, p, lj)
        return outs[:n], _scatter(out_nz, touts, out_types)

    return rule


def _call_transpose(prim):
    def rule(cts, *args, **params):
        key = _key(prim, params)
        inner: Jaxpr = params[key]
        mask = [is_undefined_primal(a) for a in args]
        if prim in ("jit", "pjit") and str(params.get("name")) == LINEAR_NAME:
            # the combined linearize form: inline the transposed linear program
            _, cts_in = backward_pass(
                inner, mask, [None if m else a for a, m in zip(args, mask)], cts
            )
            return cts_in
        if all(is_zero(c) for c in cts):
            return [Zero(tangent_type(a.type)) if m else None for a, m in zip(args, mask)]
        tj = _memo("T", lambda j, m, instantiate: transpose_jaxpr(j, list(m)), inner, mask)
        ops_in = [a for a, m in zip(args, mask) if not m] + [instantiate(c) for c in cts]
        p = _transposed(dict(params, **{key: tj}), mask, len(cts))
        outs = iter(_emit(prim, ops_in, p, tj))
        return [next(outs) if m else None for m in mask]

    return rule


for _p in (
    "jit",
    "pjit",
    "closed_call",
    "core_call",
    "eval_jaxpr",
    "named_call",
    "call",
    "xla_call",
    "compute_on",
    "compute_on2",
    "xla_metadata_call",
):
    primitive_jvps[_p] = _call_jvp(_p)
    primitive_transposes[_p] = _call_transpose(_p)
    rule_kind[_p] = LOW_LEVEL


# ---------------------------------------------------------------- remat2 (checkpoint)


def _policy_saveable(policy):
    """A predicate eqn -> bool saying which primal values a remat policy lets us save."""
    if policy is None:
        return lambda e: False
    text = str(policy)
    if isinstance(policy, Record):
        cls = policy.cls
        if cls == "SaveOnlyTheseNames" or cls == "SaveAnyNames":
            names = {
                str(n)
                for n in (
                    policy.get("saveable_names") or policy.get("names_which_can_be_saved") or ()
                )
            }
            return lambda e: e.prim == "name" and str(e.params.get("name")) in names
        if cls == "DotsSaveable":
            return lambda e: e.prim == "dot_general"
        if cls in ("EverythingSaveable",):
            return lambda e: True
        if cls in ("NothingSaveable",):
            return lambda e: False
    for key, pred in (
        ("everything_saveable", lambda e: True),
        ("nothing_saveable", lambda e: False),
        ("dots_with_no_batch_dims_saveable", lambda e: e.prim == "dot_general"),
        ("dots_saveable", lambda e: e.prim == "dot_general"),
        ("checkpoint_dots", lambda e: e.prim == "dot_general"),
    ):
        if key in text:
            return pred
    _note_once(
        ("policy", text), f"remat2: policy {text} is not understood; recomputing every residual"
    )
    return lambda e: False


_noted: set = set()


def _note_once(key, msg):
    if key in _noted:
        return
    _noted.add(key)
    from ...io import warn

    warn(msg, current().loc)


def _clone(eqns, mapping):
    out = []
    for e in eqns:
        ins = [mapping.get(id(x), x) if isinstance(x, Var) else x for x in e.inputs]
        outs = [B.fresh_like(o) for o in e.outputs]
        mapping.update({id(o): n for o, n in zip(e.outputs, outs)})
        out.append(e.replace(inputs=ins, outputs=outs))
    return out


def _remat_split(inner: Jaxpr, nz, saveable):
    """Linearize a remat body: primal body (outs + saved residuals) and a linear body that
    recomputes every non-saveable residual from the saved ones."""
    consts, primals, outs, peqns, residuals, tan_in, teqns, touts, _, out_nz = _split(
        inner, nz, False
    )
    producer = {id(o): e for e in peqns for o in e.outputs}
    recompute: set[int] = set()
    saved: list[Var] = []
    saved_ids: set[int] = set()
    stack = list(residuals)
    while stack:
        r = stack.pop()
        e = producer.get(id(r))
        if e is None or saveable(e):
            if id(r) not in saved_ids:
                saved_ids.add(id(r))
                saved.append(r)
            continue
        if id(e) in recompute:
            continue
        recompute.add(id(e))
        stack.extend(x for x in e.inputs if isinstance(x, Var))
    rec_eqns = [e for e in peqns if id(e) in recompute]
    # order the saved residuals deterministically: inputs first, then by definition order
    order = {id(v): i for i, v in enumerate(list(consts) + list(primals))}
    for i, e in enumerate(peqns):
        for o in e.outputs:
            order.setdefault(id(o), len(order) + i)
    saved.sort(key=lambda v: order.get(id(v), 0))
    pe = B.dce_eqns(peqns, list(outs) + saved)
    primal = B.make_jaxpr(primals, pe, list(outs) + saved, consts)
    res_in = [B.fresh_like(r) for r in saved]
    tin = [B.fresh_like(t) for t in tan_in]
    mapping = {id(r): n for r, n in zip(saved, res_in)}
    mapping.update({id(t): n for t, n in zip(tan_in, tin)})
    body = _clone(rec_eqns, mapping) + _clone(teqns, mapping)
    lin = B.make_jaxpr(
        res_in + tin, body, [mapping.get(id(x), x) if isinstance(x, Var) else x for x in touts]
    )
    return primal, lin, out_nz


def _remat_jvp(prim):
    base = _call_jvp(prim)

    def rule(primals, tangents, **params):
        b = current()
        if not b.split:
            return base(primals, tangents, **params)
        key, inner, nz, nz_t, n, out_types = _call_parts(prim, params, tangents)
        pj, lj, out_nz = _remat_split(inner, nz, _policy_saveable(params.get("policy")))
        pj, residuals = _forward_inputs(pj, n, primals)
        outs = _emit(prim, primals, dict(params, **{key: pj}), pj)
        if not any(out_nz):
            return outs[:n], [Zero(tangent_type(t)) for t in out_types]
        lparams = dict(params, **{key: lj})
        if "differentiated" in lparams:
            lparams["differentiated"] = True
        touts = _emit(prim, residuals(outs) + nz_t, lparams, lj)
        return outs[:n], _scatter(out_nz, touts, out_types)

    return rule


def _effect_only_jvp(name):
    def rule(primals, tangents, /, **params):
        b = current()
        eqn = getattr(b, "cur_eqn", None)
        types = [o.type for o in eqn.outputs] if eqn is not None and eqn.prim == name else []
        outs = b.bind(name, list(primals), params, types)
        return outs, [Zero(tangent_type(o.type)) for o in outs]

    return rule


for _p in ("debug_print", "debug_callback"):
    primitive_jvps[_p] = _effect_only_jvp(_p)
    rule_kind[_p] = "defjvp_zero"


def _refuse(msg):
    def rule(*args, **params):
        raise JaxprError(msg, current().loc)

    return rule


primitive_jvps["pure_callback"] = _refuse(
    "Pure callbacks do not support JVP. Please use `jax.custom_jvp` to use callbacks while taking gradients."
)
primitive_transposes["pure_callback"] = _refuse(
    "Pure callbacks do not support transpose. Please use `jax.custom_vjp` to use callbacks while taking gradients."
)
primitive_jvps["io_callback"] = _refuse("IO callbacks do not support JVP.")
primitive_transposes["io_callback"] = _refuse("IO callbacks do not support transpose.")


def _name_transpose(ct, x, **params):
    return [ct]


deflinear2("name", _name_transpose)

for _p in ("remat2", "checkpoint", "remat", "remat_call"):
    primitive_jvps[_p] = _remat_jvp(_p)
    primitive_transposes[_p] = _call_transpose(_p)
    rule_kind[_p] = LOW_LEVEL


# ---------------------------------------------------------------- custom_jvp_call / custom_vjp_call


def _fn_name(v) -> str:
    s = str(v)
    if s.startswith("<function "):
        s = s[len("<function ") :].split(" at ")[0]
    return s


def _inline_body_jvp(primals, tangents, body: Jaxpr):
    return jvp_eval(body, list(primals), list(tangents), list(body.constvars))


def _custom_jvp_rule(primals, tangents, **params):
    body: Jaxpr = params["call_jaxpr"] if "call_jaxpr" in params else params["fun_jaxpr"]
    name = _fn_name(params.get("jvp", params.get("jvp_jaxpr_thunk")))
    fn = custom_jvps.get(name)
    if fn is None:
        who = f" '{params['name']}'" if "name" in params else ""
        _note_once(
            ("custom_jvp", name),
            f"custom_jvp_call{who}: no plugin rule for jvp={name}; differentiating "
            "its body instead (register one with register_custom_jvp, see docs/PLUGINS.md)",
        )
        return _inline_body_jvp(primals, tangents, body)
    ts = [instantiate(t) for t in tangents]
    outs, touts = fn(list(primals), ts)
    if outs is None:
        outs = current().bind(
            "custom_jvp_call", list(primals), params, [v.type for v in body.outvars]
        )
    return list(outs), list(touts)


primitive_jvps["custom_jvp_call"] = _custom_jvp_rule
rule_kind["custom_jvp_call"] = LOW_LEVEL
primitive_jvps["custom_jvp_call_jaxpr"] = _custom_jvp_rule
rule_kind["custom_jvp_call_jaxpr"] = LOW_LEVEL


def _custom_vjp_rule(primals, tangents, **params):
    body: Jaxpr = params["call_jaxpr"] if "call_jaxpr" in params else params["fun_jaxpr"]
    fwd_name, bwd_name = _fn_name(params.get("fwd")), _fn_name(params.get("bwd"))
    pair = custom_vjps.get(fwd_name) or custom_vjps.get(bwd_name)
    b = current()
    if pair is None or not b.split:
        why = (
            "no plugin rule for fwd=" + fwd_name
            if pair is None
            else "forward mode (jvp) cannot use a custom VJP"
        )
        _note_once(
            ("custom_vjp", fwd_name, b.split),
            f"custom_vjp_call '{params.get('name', '?')}': {why}; differentiating its body instead",
        )
        return _inline_body_jvp(primals, tangents, body)
    fwd, _ = pair
    outs, res = fwd(*primals)
    outs, res = list(outs), list(res)
    ts = [instantiate(t) for t in tangents]
    out_types = [tangent_type(o.type) for o in outs]
    touts = b.bind(
        "custom_lin",
        res + ts,
        {
            "bwd": bwd_name if bwd_name in custom_vjps else fwd_name,
            "in_zeros": [False] * len(ts),
            "num_res": len(res),
            "symbolic_zeros": False,
        },
        out_types,
    )
    return outs, touts


def _custom_lin_transpose(cts, *args, bwd, num_res, **params):
    pair = custom_vjps.get(_fn_name(bwd))
    if pair is None:
        raise JaxprError(
            f"Transpose rule (for reverse-mode differentiation) for 'custom_lin' not implemented "
            f"(no plugin rule for bwd={_fn_name(bwd)})",
            current().loc,
        )
    _, bwd_fn = pair
    res = list(args[:num_res])
    ct_in = bwd_fn(res, [instantiate(c) for c in cts])
    return [None] * num_res + list(ct_in)


primitive_jvps["custom_vjp_call"] = _custom_vjp_rule
primitive_jvps["custom_vjp_call_jaxpr"] = _custom_vjp_rule
rule_kind["custom_vjp_call_jaxpr"] = LOW_LEVEL
primitive_transposes["custom_lin"] = _custom_lin_transpose
rule_kind["custom_vjp_call"] = LOW_LEVEL


# ---------------------------------------------------------------- optimization_barrier


def _opt_barrier_jvp(primals, tangents, **params):
    outs = current().bind("optimization_barrier", list(primals), params, [x.type for x in primals])
    nz_t = [t for t in tangents if not is_zero(t)]
    if not nz_t:
        return outs, [Zero(tangent_type(o.type)) for o in outs]
    tout = iter(current().bind("optimization_barrier", nz_t, {}, [t.type for t in nz_t]))
    return outs, [next(tout) if not is_zero(t) else t for t in tangents]


def _opt_barrier_transpose(cts, *args, **params):
    nz = [c for c in cts if not is_zero(c)]
    if nz:
        outs = iter(current().bind("optimization_barrier", nz, {}, [c.type for c in nz]))
        cts = [next(outs) if not is_zero(c) else c for c in cts]
    return [c if is_undefined_primal(a) else None for c, a in zip(cts, args)]


primitive_jvps["optimization_barrier"] = _opt_barrier_jvp
primitive_transposes["optimization_barrier"] = _opt_barrier_transpose
rule_kind["optimization_barrier"] = LOW_LEVEL

_ = (Eqn, Opaque, fancy_transposes, ops, sys)
