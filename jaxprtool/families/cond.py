"""`cond` (JAX's `lax.cond` / `lax.switch`): operand 0 picks one of `branches`, which all take
the other operands and return results of the same types.

AD (mirrors jax/_src/lax/control_flow/conditionals.py): branches are differentiated with a
common nonzero-tangent mask (an output tangent is nonzero if it is in some branch; the others
instantiate zeros).  Linearized (`linearization`), every branch returns the union of the
residuals of all branches, branch inputs forwarded.  Transpose: each branch transposed, index
and residuals kept.
"""

from __future__ import annotations

from ..ad import builder as B
from ..ad import ops
from ..ad.jvp import jvp_masked
from ..ad.linearize import linearize_masked
from ..ad.ops import instantiate
from ..ad.transpose import backward_pass, transposed_inputs
from ..ad.zeros import (
    Zero,
    is_undefined_primal,
    is_zero,
    nonzero_mask,
    tangent_type,
    writes_tangent_ref,
    zero_tangents,
)
from ..core import Jaxpr, JaxprError, RefType, ShapedArray, Var
from ..lazy import lazy_module
from ..params import EnumValue
from ..record import define
from ..shapes import ShapeError, shape_rule
from ..shapes.util import arr, check_call_operands, is_int_dtype, out_types_of, types_agree

#: the vmap machinery, executed when a batching rule first runs
BT = lazy_module("jaxprtool.ad.batching")

# ---------------------------------------------------------------- shape


def _branches_of(params) -> tuple | None:
    """The `branches` parameter when it is a non-empty sequence of jaxprs, else None."""
    branches = params.get("branches")
    if (
        not isinstance(branches, (tuple, list))
        or not branches
        or not all(isinstance(b, Jaxpr) for b in branches)
    ):
        return None
    return branches


@shape_rule("cond")
def _cond_shape(in_types, params, out_hint):
    branches = _branches_of(params)
    if branches is None:
        raise ShapeError("cond: missing or malformed 'branches' parameter")
    if not in_types:
        raise ShapeError("cond expects an index operand")
    idx = arr(in_types[0], "cond", 0)
    if idx.ndim != 0 or not (is_int_dtype(idx.dtype) or idx.dtype == "bool"):
        raise ShapeError(f"cond: the index operand must be an integer scalar, got {idx}")
    ops = in_types[1:]
    for k, b in enumerate(branches):
        check_call_operands("cond", b, ops, what=f"branch {k}")
    outs = out_types_of(branches[0])
    for k, b in enumerate(branches[1:], 1):
        bo = out_types_of(b)
        if len(bo) != len(outs) or not all(types_agree(x, y) for x, y in zip(bo, outs)):
            raise ShapeError(
                f"cond: branch {k} returns ({', '.join(map(str, bo))}), "
                f"but branch 0 returns ({', '.join(map(str, outs))})"
            )
    return outs


# ---------------------------------------------------------------- JVP, linearization, transpose


def _cond_params(params, branches):
    p = dict(params)
    p["branches"] = tuple(branches)
    return p


def _cond_masks(branches, ops_t):
    """(branches, operand tangent mask, output tangent mask, output types)."""
    branches = list(branches)
    out_types = [o.type for o in branches[0].outvars]
    nz = nonzero_mask(branches[0].invars, ops_t)
    out_nz = [False] * len(out_types)
    if any(nz):
        per_branch = [jvp_masked(br, nz, instantiate=False)[1] for br in branches]
        out_nz = [any(z) for z in zip(*per_branch)]
    return branches, nz, out_nz, out_types


def _cond_jvp(primals, tangents, *, branches, **params):
    b = B.current()
    index, *ops = primals
    _, *ops_t = tangents
    branches, nz, out_nz, out_types = _cond_masks(branches, ops_t)
    if not any(out_nz) and not writes_tangent_ref(branches[0].invars, nz):
        outs = b.emit("cond", primals, _cond_params(params, branches), out_types)
        return outs, zero_tangents(out_types)
    jvps = [jvp_masked(br, nz, instantiate=out_nz)[0] for br in branches]
    tan_ops = [t for t, m in zip(ops_t, nz) if m]
    outs = b.emit(
        "cond",
        [index, *ops, *tan_ops],
        _cond_params(params, jvps),
        [o.type for o in jvps[0].outvars],
    )
    n = len(out_types)
    it = iter(outs[n:])
    return outs[:n], [next(it) if m else Zero(tangent_type(t)) for t, m in zip(out_types, out_nz)]


def _cond_linearize(primals, tangents, *, branches, **params):
    """Every branch returns the union of the residuals of all branches (zeros for the
    others'), matched by (type, occurrence) as JAX's `_merge_branch_residuals` does; residuals
    that are branch inputs are forwarded."""
    b = B.current()
    index, *ops = primals
    _, *ops_t = tangents
    branches, nz, out_nz, out_types = _cond_masks(branches, ops_t)
    if not any(out_nz) and not writes_tangent_ref(branches[0].invars, nz):
        outs = b.emit("cond", primals, _cond_params(params, branches), out_types)
        return outs, zero_tangents(out_types)
    n_out = len(out_nz)
    lins = [linearize_masked(br, nz, instantiate=out_nz, rerun=True) for br in branches]
    # Unify the residuals: new ones matched by (type, occurrence) as JAX's
    # _merge_branch_residuals does; branch inputs are forwarded (one slot per input).
    new_slots: list = []
    fwd_slots: list[int] = []
    keys: dict = {}
    branch_res = []  # per branch: [("new", slot) | ("fwd", slot)] per residual
    for pj, _lj, _onz, _nres in lins:
        in_pos = {id(v): i for i, v in enumerate(pj.invars)}
        counts: dict = {}
        mine = []
        for r in pj.outvars[n_out:]:
            if isinstance(r, Var) and id(r) in in_pos:
                k = in_pos[id(r)]
                if k not in fwd_slots:
                    fwd_slots.append(k)
                mine.append(("fwd", fwd_slots.index(k)))
            else:
                c = counts.get(r.type, 0)
                counts[r.type] = c + 1
                key = (r.type, c)
                if key not in keys:
                    keys[key] = len(new_slots)
                    new_slots.append(r.type)
                mine.append(("new", keys[key]))
        branch_res.append(mine)

    primal_branches, linear_branches = [], []
    for (pj, lj, _onz, nres), mine in zip(lins, branch_res):
        own_new = {s: r for (kind, s), r in zip(mine, pj.outvars[n_out:]) if kind == "new"}
        bb = B.Builder()
        with B.use(bb):
            res_out = [own_new[s] if s in own_new else _filler(t) for s, t in enumerate(new_slots)]
        primal_branches.append(
            pj.replace(eqns=list(pj.eqns) + bb.eqns, outvars=list(pj.outvars[:n_out]) + res_out)
        )
        res_in = lj.invars[:nres]
        own_new_in = {s: v for (kind, s), v in zip(mine, res_in) if kind == "new"}
        own_fwd_in = {s: v for (kind, s), v in zip(mine, res_in) if kind == "fwd"}
        inv = [own_new_in.get(s) or Var(t, None) for s, t in enumerate(new_slots)]
        inv += [own_fwd_in.get(s) or Var(ops[k].type, None) for s, k in enumerate(fwd_slots)]
        linear_branches.append(lj.replace(invars=inv + list(lj.invars[nres:])))

    outs = b.emit(
        "cond", [index, *ops], _cond_params(params, primal_branches), out_types + new_slots
    )
    prim_outs, new_res = outs[:n_out], outs[n_out:]
    res = new_res + [ops[k] for k in fwd_slots]
    tan_ops = [t for t, m in zip(ops_t, nz) if m]
    with b.tangent_mode():
        touts = b.emit(
            "cond",
            [index, *res, *tan_ops],
            _cond_params(params, linear_branches),
            [o.type for o in linear_branches[0].outvars],
        )
    it = iter(touts)
    return prim_outs, [next(it) if m else Zero(tangent_type(t)) for t, m in zip(out_types, out_nz)]


def _filler(t):
    """What a branch returns for another branch's residual: zeros, or for one in host memory
    (an offloaded copy) JAX's `empty2` there, broadcast (zeros would be device values)."""
    if getattr(t, "memory_space", None) != "host":
        return instantiate(Zero(t))
    space = EnumValue("MemorySpace", "Host")
    (x,) = B.current().emit(
        "empty2",
        [],
        {"dtype": t.np_dtype, "memory_space": space},
        [ShapedArray((), t.dtype, memory_space="host")],
    )
    return ops.broadcast_in_dim(x, t.shape, ())


def _transpose_body(j: Jaxpr, lin: list[bool], ct_mask: list[bool], ref_lin: list[bool]):
    """`(non-linear inputs and cotangent Refs..., nonzero output cts...) -> (cts of the
    linear inputs...)`; `ref_lin`: the differentiated Ref operands, whose cotangent Refs the
    branch writes into."""
    consts = [B.fresh_like(v) for v in j.constvars]
    nl, args = transposed_inputs(j.invars, lin, ref_lin)
    ctv = [Var(tangent_type(o.type), None) for o, m in zip(j.outvars, ct_mask) if m]
    it2 = iter(ctv)
    cts = [next(it2) if m else Zero(tangent_type(o.type)) for o, m in zip(j.outvars, ct_mask)]
    bb = B.Builder(loc=B.current().loc)
    with B.use(bb):
        _, cts_in = backward_pass(j, lin, args, cts, consts)
        outs = [instantiate(c) for c, m, r in zip(cts_in, lin, ref_lin) if m and not r]
    return B.make_jaxpr(nl + ctv, B.dce_eqns(bb.eqns, outs), outs, consts)


def _cond_transpose(cts, index, *args, branches, **params):
    """A differentiated Ref operand enters the transposed branches as its cotangent Ref."""
    if is_undefined_primal(index):
        raise JaxprError("cond: the branch index cannot be linear", B.current().loc)
    lin = [is_undefined_primal(a) for a in args]
    ref_lin = [m and a.ct_ref is not None for a, m in zip(args, lin)]
    values = [m and not r for m, r in zip(lin, ref_lin)]
    ct_mask = [not is_zero(c) for c in cts]
    if not any(lin) or not (any(ct_mask) or any(ref_lin)):
        return [None] + [Zero(tangent_type(a.type)) if m else None for a, m in zip(args, lin)]
    tbranches = [_transpose_body(br, lin, ct_mask, ref_lin) for br in branches]
    res = [a.ct_ref if r else a for a, m, r in zip(args, lin, ref_lin) if r or not m]
    ct_atoms = [c for c in cts if not is_zero(c)]
    outs = B.current().emit(
        "cond",
        [index, *res, *ct_atoms],
        _cond_params(params, tbranches),
        [o.type for o in tbranches[0].outvars],
    )
    it = iter(outs)
    return [None] + [next(it) if v else None for v in values]


# ---------------------------------------------------------------- batching


def _bcast_select_n(pred, *cases):
    if BT.ndim(pred) != BT.ndim(cases[0]):
        pred = ops.broadcast_in_dim(pred, BT.shape_of(cases[0]), tuple(range(BT.ndim(pred))))
    return BT.bind("select_n", pred, *cases)[0]


def _cond_batching(args, dims, *, branches, **params):
    """JAX's `_cond_batching_rule`.  A batched index: every branch runs on every example and
    `select_n` picks each example's results (the operands given to the branches not taken pass
    through `stop_gradient`, as JAX does for reverse mode); otherwise one cond of the batched
    branches."""
    branches = list(branches) if isinstance(branches, (tuple, list)) else [branches]
    index, *xs = args
    idd, *xds = dims
    size = BT.axis_size()
    if idd is not None:
        if any(isinstance(x.type, RefType) for x in xs):
            raise JaxprError(
                "vmap of a cond with a batched predicate whose branches use a Ref is not "
                "supported (every branch would run and write it); JAX refuses vmap of a cond "
                "with Refs too: select between the values instead",
                B.current().loc,
            )
        index, *xs = (BT.bdim_at_front(x, d, size) for x, d in zip(args, dims))
        n_in, n_out = len(branches[0].invars), len(branches[0].outvars)
        batched = [BT.batch_jaxpr(br, [True] * n_in, [True] * n_out)[0] for br in branches]
        branch_outs = []
        for i, br in enumerate(batched):
            (pred,) = BT.bind("eq", index, ops.lit(i, index))
            sel = [_bcast_select_n(pred, ops.stop_gradient(x), x) for x in xs]
            branch_outs.append(BT.inline_jaxpr(br, sel))
        outs = [_bcast_select_n(index, *o) for o in zip(*branch_outs)]
        return outs, [0] * len(outs)
    bat = [d is not None for d in xds]
    xs = [BT.moveaxis(x, d, 0) if d is not None else x for x, d in zip(xs, xds)]
    out_bat = [any(z) for z in zip(*(BT.batch_jaxpr(br, bat, False)[1] for br in branches))]
    new = [BT.batch_jaxpr(br, bat, out_bat)[0] for br in branches]
    p = dict(params, branches=tuple(new))
    outs = B.current().emit("cond", [index, *xs], p, [v.type for v in new[0].outvars])
    return outs, [0 if b else None for b in out_bat]


# ---------------------------------------------------------------- DCE


def _cond_dce(used_outs, e, dce_jaxpr, live_ins):
    """Results unused outside are pruned from every branch; an operand is kept when any
    branch uses it; a branch's write into a Ref dead after the cond is dead (as in JAX)."""
    from ..passes.dce import Unsupported, filter_param, rebuild

    branches = e.params.get("branches")
    if not (isinstance(branches, (tuple, list)) and len(branches) > 0):
        raise Unsupported
    if not all(isinstance(x, Jaxpr) for x in branches):
        raise Unsupported
    nops = len(e.inputs) - 1
    for b in branches:
        if len(b.invars) != nops or len(b.outvars) != len(e.outputs):
            raise Unsupported
    live_ops = tuple(live_ins[1:])
    used_ops = [False] * nops
    for b in branches:
        _, u = dce_jaxpr(b, tuple(used_outs), (False,) * nops, live_ops)
        used_ops = [x or y for x, y in zip(used_ops, u)]
    new_branches = tuple(
        dce_jaxpr(b, tuple(used_outs), tuple(used_ops), live_ops)[0] for b in branches
    )
    used_ins = [True, *used_ops]
    if all(used_ops) and all(used_outs) and all(n is b for n, b in zip(new_branches, branches)):
        return used_ins, e
    params = dict(e.params, branches=type(branches)(new_branches))
    if "linear" in params:
        params["linear"] = filter_param(params, "linear", used_ops)
    return used_ins, rebuild(e, used_ins, used_outs, params)


# ---------------------------------------------------------------- evaluation


def _cond_evaluate(interp, eqn, invals, path):
    """`jax.lax.switch` (jit), or the chosen branch only (eager; the index is clamped)."""
    branches = eqn.params["branches"]
    if isinstance(branches, Jaxpr):
        branches = (branches,)
    idx, ops = invals[0], invals[1:]
    platforms = eqn.params.get("branches_platforms")
    if platforms is not None:
        return _platform_dependent(interp, eqn, branches, platforms, ops, path)
    if interp.mode == "eager":
        import numpy as np

        i = int(np.asarray(idx))
        i = min(max(i, 0), len(branches) - 1)
        return interp.fn(branches[i], eqn, path, f"cond branch {i}")(*ops)
    import jax
    import jax.numpy as jnp

    from ..backend.evaluator import ThreadedRefs

    fns = [interp.fn(b, eqn, path) for b in branches]
    if len(fns) == 1:
        return fns[0](*ops)
    idx = jnp.asarray(idx)
    if idx.dtype == jnp.bool_:
        idx = idx.astype(jnp.int32)
    refs = ThreadedRefs(ops)  # Refs the branches use: their values go in and come out
    if not refs.boxes:
        return list(jax.lax.switch(idx, fns, *ops))
    out = jax.lax.switch(idx, [refs.threaded(f, ops) for f in fns], *refs.arguments(ops))
    return refs.results(out)


def _platform_dependent(interp, eqn, branches, platforms, ops, path):
    """A `lax.platform_dependent` cond: JAX lowers only the branch of the platform it compiles
    for (the index operand is ignored), so `run` calls `lax.platform_dependent` too."""
    import jax

    fns = [interp.fn(b, eqn, path) for b in branches]
    per_platform, default = {}, None
    for fn, names in zip(fns, platforms):
        if names is None:
            default = fn
        for name in names or ():
            per_platform[str(name)] = fn
    try:
        return list(jax.lax.platform_dependent(*ops, default=default, **per_platform))
    except (ValueError, NotImplementedError) as e:
        raise JaxprError(f"'cond' with branches_platforms={platforms}: {e}", eqn.loc) from None


def _cond_binder_type(eqn, pos):
    """The index is an i32 scalar; the other operands feed the branches' binders."""
    if pos == 0:
        return ShapedArray((), "i32")
    br = eqn.params["branches"]
    br = br[0] if isinstance(br, (tuple, list)) else br
    return br.invars[pos - 1].type


def _cond_cost(e, costs):
    """The most expensive branch."""
    return max(costs) if costs else (0, 0)


def _cond_body_operands(eqn, key, body):
    """The branch index selects; the branches bind the rest."""
    return list(eqn.inputs[1:])


# ---------------------------------------------------------------- constants of the branches


def _cond_hoist_consts(e, outer):
    """The constants of every branch (a hoisted call's), branch by branch, become operands
    after the index that every branch takes (each ignoring the others')."""
    branches = _branches_of(e.params)
    if branches is None:
        return e
    unique = list({id(b): b for b in branches}.values())
    consts = [v for b in unique for v in b.constvars]
    new_ops = outer(consts)

    def closed(b):
        own = {id(v) for v in b.constvars}
        binders = [v if id(v) in own else Var(v.type, v.hint) for v in consts]
        return b.replace(constvars=(), invars=tuple(binders) + tuple(b.invars))

    rewritten = {id(b): closed(b) for b in unique}
    params = _cond_params(e.params, [rewritten[id(b)] for b in branches])
    lin = params.get("linear")
    if isinstance(lin, tuple) and len(lin) == len(e.inputs) - 1:
        params["linear"] = (False,) * len(new_ops) + lin
    return e.replace(inputs=(e.inputs[0], *new_ops, *e.inputs[1:]), params=params)


# ---------------------------------------------------------------- rematerialization


def _cond_remat_saves(e, body_saves):
    """Per result: saved when the policy saves the value a branch gives it (a residual the
    other branches fill with zeros included), else a policy runs the cond again, as JAX's
    `_cond_partial_eval_custom` recomputes it."""
    branches = _branches_of(e.params)
    if branches is None:
        return [True] * len(e.outputs)
    per = [body_saves(b) for b in branches]
    return [any(bool(p[k]) for p in per) for k in range(len(e.outputs))]


def _cond_remat_feed(e, saved):
    """The cond reading its saved results as new operands (after the others) in every
    branch; unchanged when a branch gives two of them one value (the branches would take
    different operands, and the rerun recomputes them)."""
    from ..ad.remat import feed_results  # (the planner is loaded only where one runs)

    ks = [k for k, s in enumerate(saved) if s]
    fed = [feed_results(b, ks) for b in _branches_of(e.params)]
    if any(read != ks for _, read in fed):
        return e
    params = _cond_params(e.params, [b for b, _ in fed])
    lin = params.get("linear")
    if isinstance(lin, tuple) and len(lin) == len(e.inputs) - 1:
        params["linear"] = lin + (False,) * len(ks)
    return e.replace(inputs=(*e.inputs, *(e.outputs[k] for k in ks)), params=params)


# ---------------------------------------------------------------- registration

define(
    "cond",
    multiple_results=True,
    jvp=_cond_jvp,
    jvp_kind="jvp+linearization",
    linearization=_cond_linearize,
    transpose=_cond_transpose,
    transposes_refs=True,
    dce=_cond_dce,
    evaluate=_cond_evaluate,
    # `linear` (older texts) is AD's bookkeeping
    evaluated_params=frozenset({"branches", "branches_platforms", "linear"}),
    binder_type=_cond_binder_type,
    body_cost=_cond_cost,
    body_operands=_cond_body_operands,
    batching=_cond_batching,
    hoist_consts=_cond_hoist_consts,
    remat_saves=_cond_remat_saves,
    remat_feed=_cond_remat_feed,
)
