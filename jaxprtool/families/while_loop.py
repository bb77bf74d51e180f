"""`while` (JAX's `lax.while_loop`): `cond_jaxpr` tests the carry, `body_jaxpr` updates it.

Operands: the cond's consts, the body's consts, then the carry (`cond_nconsts`,
`body_nconsts`); `WhileParams` decodes them once for the shape rule, AD, DCE and the
evaluator.  AD is forward mode only (mirrors jax/_src/lax/control_flow/loops.py): tangent
carries go alongside (the cond jaxpr ignores them); linearized (`linearization`), a primal loop
plus a forward-mode tangent loop; transposing raises JAX's error.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ad import builder as B
from ..ad.jvp import jvp_masked
from ..ad.ops import instantiate
from ..ad.zeros import Zero, nonzero_mask, tangent_type, writes_tangent_ref, zero_tangents
from ..core import Jaxpr, JaxprError, NoReverseMode, ShapedArray, Var
from ..lazy import lazy_module
from ..record import define
from ..shapes import ShapeError, shape_rule
from ..shapes.util import check_call_operands, int_param, jaxpr_param, out_types_of, types_agree

#: the vmap machinery, executed when a batching rule first runs
BT = lazy_module("jaxprtool.ad.batching")

WHILE_TRANSPOSE_ERROR = (
    "Reverse-mode differentiation does not work for lax.while_loop or lax.fori_loop with dynamic "
    "start/stop values. Try using lax.scan, or using fori_loop with static start/stop."
)


# ---------------------------------------------------------------- the parameters, decoded once


@dataclass
class WhileParams:
    """A while equation's parameters, decoded: operands `cond consts, body consts, carry`."""

    params: dict
    cond_jaxpr: Jaxpr
    body_jaxpr: Jaxpr
    cond_nconsts: int
    body_nconsts: int

    @classmethod
    def read(cls, params: dict) -> WhileParams:
        """Raises `ShapeError` when a jaxpr is missing or a count is not an integer."""
        return cls(
            params,
            jaxpr_param(params, "cond_jaxpr"),
            jaxpr_param(params, "body_jaxpr"),
            int_param(params, "cond_nconsts", 0),
            int_param(params, "body_nconsts", 0),
        )

    @classmethod
    def from_eqn(cls, e) -> WhileParams:
        return cls.read(e.params)

    def split(self, xs) -> tuple[list, list, list]:
        """(cond consts, body consts, carry) of a list with one entry per operand."""
        cn, bn = self.cond_nconsts, self.body_nconsts
        return list(xs[:cn]), list(xs[cn : cn + bn]), list(xs[cn + bn :])

    def to_params(self, **changes) -> dict:
        """The parameters with `cond_jaxpr`, `body_jaxpr`, `cond_nconsts`, `body_nconsts`
        replaced by those given (the others kept, in order)."""
        return {k: changes.get(k, v) for k, v in self.params.items()} | {
            k: v for k, v in changes.items() if k not in self.params
        }


# ---------------------------------------------------------------- shape


@shape_rule("while")
def _while_shape(in_types, params, out_hint):
    wp = WhileParams.read(params)
    cj, bj, cn, bn = wp.cond_jaxpr, wp.body_jaxpr, wp.cond_nconsts, wp.body_nconsts
    if len(in_types) < cn + bn:
        raise ShapeError(
            f"while: expects at least {cn + bn} operands (consts), got {len(in_types)}"
        )
    cconsts, bconsts, carry = wp.split(in_types)
    check_call_operands("while", cj, list(cconsts) + list(carry), what="cond_jaxpr")
    check_call_operands("while", bj, list(bconsts) + list(carry), what="body_jaxpr")
    co = out_types_of(cj)
    if len(co) != 1 or not (isinstance(co[0], ShapedArray) and co[0].dtype == "bool"):
        raise ShapeError(
            f"while: cond_jaxpr must return one bool value, got ({', '.join(map(str, co))})"
        )
    bo = out_types_of(bj)
    if len(bo) != len(carry):
        raise ShapeError(
            f"while: body_jaxpr returns {len(bo)} results for {len(carry)} carried values"
        )
    for i, (a, b) in enumerate(zip(bo, carry)):
        if not types_agree(a, b):
            raise ShapeError(
                f"while: body_jaxpr result {i} has type {a}, but the carried value has type {b}"
            )
    return list(carry)


# ---------------------------------------------------------------- JVP, linearization, transpose


def _while_tangent_loop(primals, tangents, params):
    """The forward-mode loop: (primal out types, carry tangent mask, and the tangent loop's
    operands, params and extra result types), or None when no carry gets a tangent."""
    wp = WhileParams.read(params)
    cond_jaxpr, body_jaxpr = wp.cond_jaxpr, wp.body_jaxpr
    ncc, nbc = wp.cond_nconsts, wp.body_nconsts
    nk = len(primals) - ncc - nbc
    out_types = [o.type for o in body_jaxpr.outvars]
    bnz = nonzero_mask(body_jaxpr.invars, tangents[ncc:])
    bconst_nz, init_nz = bnz[:nbc], bnz[nbc:]
    carry_nz = list(init_nz)
    out_nz: list[bool] = []
    if any(bnz):
        for _ in range(nk + 1):
            jv, out_nz = jvp_masked(body_jaxpr, bconst_nz + carry_nz, instantiate=carry_nz)
            if out_nz == carry_nz:
                break  # `jv` is the body's JVP at the fixed point
            carry_nz = [x or y for x, y in zip(carry_nz, out_nz)]
        else:
            jv, out_nz = jvp_masked(body_jaxpr, bconst_nz + carry_nz, instantiate=carry_nz)
    if not any(carry_nz) and not writes_tangent_ref(body_jaxpr.invars, bnz):
        return out_types, carry_nz, None
    P, T = list(jv.invars[: nbc + nk]), list(jv.invars[nbc + nk :])
    s1 = sum(bconst_nz)
    jv = jv.replace(invars=P[:nbc] + T[:s1] + P[nbc:] + T[s1:])
    cj = B.clone_jaxpr(cond_jaxpr)
    cj = cj.replace(
        invars=list(cj.invars)
        + [Var(tangent_type(t), None) for t, m in zip(out_types, carry_nz) if m]
    )
    cconst, bconst, init = wp.split(primals)
    bconst_t = [t for t, m in zip(tangents[ncc : ncc + nbc], bconst_nz) if m]
    init_t = [instantiate(t) for t, m in zip(tangents[ncc + nbc :], carry_nz) if m]
    jparams = wp.to_params(cond_jaxpr=cj, body_jaxpr=jv, body_nconsts=nbc + s1)
    t_types = [tangent_type(t) for t, m in zip(out_types, carry_nz) if m]
    operands = [*cconst, *bconst, *bconst_t, *init, *init_t]
    return out_types, carry_nz, (operands, jparams, t_types)


def _carry_tangents(outs, out_types, carry_nz):
    it = iter(outs)
    return [next(it) if m else Zero(tangent_type(t)) for t, m in zip(out_types, carry_nz)]


def _while_jvp(primals, tangents, **params):
    b = B.current()
    out_types, carry_nz, loop = _while_tangent_loop(primals, tangents, params)
    if loop is None:
        return b.emit("while", primals, params, out_types), zero_tangents(out_types)
    operands, jparams, t_types = loop
    nk = len(out_types)
    outs = b.emit("while", operands, jparams, out_types + t_types)
    return outs[:nk], _carry_tangents(outs[nk:], out_types, carry_nz)


def _while_linearize(primals, tangents, **params):
    """A primal loop (primal program) and the forward-mode loop (tangent program)."""
    b = B.current()
    out_types, carry_nz, loop = _while_tangent_loop(primals, tangents, params)
    if loop is None:
        return b.emit("while", primals, params, out_types), zero_tangents(out_types)
    operands, jparams, t_types = loop
    nk = len(out_types)
    prim_outs = b.emit("while", primals, params, out_types)
    with b.tangent_mode():
        outs = b.emit("while", operands, jparams, out_types + t_types)
    return prim_outs, _carry_tangents(outs[nk:], out_types, carry_nz)


def _while_transpose(cts, *args, **params):
    raise NoReverseMode(WHILE_TRANSPOSE_ERROR, B.current().loc)


# ---------------------------------------------------------------- batching


def _while_batching(args, dims, *, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts, **params):
    """JAX's `_while_loop_batching_rule`.  A batched predicate: every carry is batched at axis
    0 and the loop runs until every example is done, each example's carry frozen once its
    predicate is false (the `while` primitive's semantics for a predicate of rank > 0, as JAX
    lowers it); otherwise the carries are batched at the predicate's rank."""
    ncc, nbc = int(cond_nconsts), int(body_nconsts)
    ccd, bcd, kd = dims[:ncc], dims[ncc : ncc + nbc], dims[ncc + nbc :]
    init = args[ncc + nbc :]
    nk = len(kd)
    carry_b = [d is not None for d in kd]
    cb_bat, bc_bat = [d is not None for d in ccd], [d is not None for d in bcd]
    for _ in range(nk + 1):
        _, out_b = BT.batch_jaxpr(body_jaxpr, bc_bat + carry_b, carry_b)
        if out_b == carry_b:
            break
        carry_b = [a or b for a, b in zip(carry_b, out_b)]
    _, (pred_b,) = BT.batch_jaxpr(cond_jaxpr, cb_bat + carry_b, False)
    if pred_b:
        carry_dims = [0] * nk
        body_b, _ = BT.batch_jaxpr_axes(body_jaxpr, list(bcd) + carry_dims, carry_dims)
        cond_b, _ = BT.batch_jaxpr_axes(cond_jaxpr, list(ccd) + carry_dims, [0])
    else:
        rank = cond_jaxpr.outvars[0].type.ndim
        carry_dims = [rank if b else None for b in carry_b]
        body_b, _ = BT.batch_jaxpr_axes(body_jaxpr, list(bcd) + carry_dims, carry_dims)
        cond_b, _ = BT.batch_jaxpr_axes(cond_jaxpr, list(ccd) + carry_dims, [None])
    size = BT.axis_size()
    new_init = []
    for x, old, new in zip(init, kd, carry_dims):
        if old is None and new is not None:
            new_init.append(BT.broadcast(x, size, new))
        elif old is None:
            new_init.append(x)
        else:
            new_init.append(BT.moveaxis(x, old, new))
    p = dict(
        params,
        cond_jaxpr=cond_b,
        body_jaxpr=body_b,
        cond_nconsts=cond_nconsts,
        body_nconsts=body_nconsts,
    )
    outs = B.current().emit(
        "while", [*args[: ncc + nbc], *new_init], p, [v.type for v in body_b.outvars]
    )
    return outs, carry_dims


# ---------------------------------------------------------------- DCE


def _while_dce(used_outs, e, dce_jaxpr, live_ins):
    """A carry is removed only when it is unused outside, not read by the cond and not needed
    by the body to compute a live carry; a Ref is live in the loop when it is live after it or
    used anywhere in it (the cond and body run again), so only writes into the others are
    dead (fixed points, as in JAX)."""
    from ..passes.dce import Unsupported, is_ref, rebuild

    if not isinstance(e.params.get("body_jaxpr"), Jaxpr):
        raise Unsupported
    if "cond_nconsts" not in e.params or "body_nconsts" not in e.params:
        raise Unsupported
    try:
        wp = WhileParams.from_eqn(e)
    except ShapeError:
        raise Unsupported from None
    cond_j, body_j, cn, bn = wp.cond_jaxpr, wp.body_jaxpr, wp.cond_nconsts, wp.body_nconsts
    ncarry = len(e.outputs)
    if (
        len(e.inputs) != cn + bn + ncarry
        or len(body_j.invars) != bn + ncarry
        or len(cond_j.invars) != cn + ncarry
    ):
        raise Unsupported
    if len(body_j.outvars) != ncarry:
        raise Unsupported
    carry_ref = [is_ref(v) for v in body_j.invars[bn:]]
    used_carry = [u or r for u, r in zip(used_outs, carry_ref)]
    # by operand identity: one Ref can be both a cond const and a body const
    live_ids = {id(a) for a, u in zip(e.inputs, live_ins) if u}
    c_ops, b_ops = e.inputs[:cn], e.inputs[cn : cn + bn]

    def live_of(ops):
        return tuple(id(a) in live_ids for a in ops) + (True,) * ncarry

    for _ in range(ncarry + 2 + live_ins.count(False)):
        _, cu = dce_jaxpr(cond_j, (True,), (False,) * (cn + ncarry), live_of(c_ops))
        used_carry = [x or y for x, y in zip(used_carry, cu[cn:])]
        binst = tuple([False] * bn + used_carry)
        new_body, bu = dce_jaxpr(body_j, tuple(used_carry), binst, live_of(b_ops))
        carry_in = bu[bn:]
        used = [a for a, u in zip(c_ops + b_ops, cu[:cn] + bu[:bn]) if u]
        new_ids = live_ids | {id(a) for a in used if is_ref(a)}
        if carry_in == used_carry and new_ids == live_ids:
            break
        used_carry = [x or y for x, y in zip(used_carry, carry_in)]
        live_ids = new_ids
    else:  # pragma: no cover - the fixpoint is reached in ncarry+1 steps
        raise Unsupported
    new_cond, cu = dce_jaxpr(cond_j, (True,), tuple([False] * cn + used_carry), live_of(c_ops))
    used_ins = [*cu[:cn], *bu[:bn], *used_carry]
    if all(used_ins) and new_cond is cond_j and new_body is body_j:
        return used_ins, e
    params = wp.to_params(
        cond_jaxpr=new_cond,
        body_jaxpr=new_body,
        cond_nconsts=sum(cu[:cn]),
        body_nconsts=sum(bu[:bn]),
    )
    return used_ins, rebuild(e, used_ins, used_carry, params)


# ---------------------------------------------------------------- evaluation


def _while_evaluate(interp, eqn, invals, path):
    """`jax.lax.while_loop` (jit), or the loop in Python (eager); a batched predicate (vmap
    of a while) advances only the rows still running."""
    p = eqn.params
    cj, bj = interp.body(p.get("cond_jaxpr"), eqn), interp.body(p.get("body_jaxpr"), eqn)
    try:
        wp = WhileParams.from_eqn(eqn)
    except ShapeError as e:
        raise JaxprError(f"'while': {e}", eqn.loc) from None
    cconsts, bconsts, init = wp.split(invals)
    batched = (
        bool(cj.outvars)
        and isinstance(cj.outvars[0].type, ShapedArray)
        and cj.outvars[0].type.ndim > 0
    )

    import jax.numpy as jnp

    def select(pred, new, old):
        return [
            jnp.where(jnp.reshape(pred, pred.shape + (1,) * (jnp.ndim(n) - pred.ndim)), n, o)
            for n, o in zip(new, old)
        ]

    if interp.mode == "eager":
        import numpy as np

        carry, i = list(init), 0
        while True:
            (pred,) = interp.run(cj, [], list(cconsts) + carry, path + (f"while cond {i}",))
            if not bool(np.asarray(pred).any()):
                return carry
            new = interp.run(bj, [], list(bconsts) + carry, path + (f"while iter {i}",))
            carry = select(jnp.asarray(pred), new, carry) if batched else new
            i += 1
    import jax

    from ..backend.evaluator import ThreadedRefs

    n, nc = len(init), len(cconsts)
    refs = ThreadedRefs(list(cconsts) + list(bconsts))  # Refs it uses: their values are carried

    def consts_inside(c):
        cs, boxes = refs.inside(list(cconsts) + list(bconsts), c[n:])
        return cs[:nc], cs[nc:], boxes

    def cond_fun(c):
        cc, _, _ = consts_inside(c)
        pred = interp.run(cj, [], cc + list(c[:n]), path)[0]
        return jnp.any(pred) if batched else pred

    def body_fun(c):
        cc, bc, boxes = consts_inside(c)
        new = interp.run(bj, [], bc + list(c[:n]), path)
        if batched:
            pred = interp.run(cj, [], cc + list(c[:n]), path)[0]
            new = select(pred, new, list(c[:n]))
        return tuple(new) + tuple(b.value for b in boxes)

    out = jax.lax.while_loop(cond_fun, body_fun, tuple(init) + refs.values())
    refs.write_back(out[n:])
    return list(out[:n])


def _while_binder_type(eqn, pos):
    """Operand `pos` feeds the cond's binder (cond consts) or the body's (the others)."""
    try:
        wp = WhileParams.from_eqn(eqn)
    except ShapeError:
        return None
    if pos < wp.cond_nconsts:
        v = wp.cond_jaxpr.invars[pos]
    else:
        v = wp.body_jaxpr.invars[pos - wp.cond_nconsts]
    return v.type if isinstance(v.type, ShapedArray) else None


# ---------------------------------------------------------------- the graph's edges into the bodies


def _while_body_operands(eqn, key, body):
    nc = int(eqn.params.get("cond_nconsts", 0))
    nb = int(eqn.params.get("body_nconsts", 0))
    ops = list(eqn.inputs)
    carry = ops[nc + nb :]
    if key == "cond_jaxpr":
        return ops[:nc] + carry
    if key == "body_jaxpr":
        return ops[nc : nc + nb] + carry
    return None


# ---------------------------------------------------------------- registration


def _while_hoist_consts(e, outer):
    """The cond jaxpr's constants become cond consts and the body's body consts (new
    operands before the others of their group)."""
    wp = WhileParams.from_eqn(e)
    cj, bj = wp.cond_jaxpr, wp.body_jaxpr
    cconsts, bconsts, carry = wp.split(e.inputs)
    new_c, new_b = outer(cj.constvars), outer(bj.constvars)

    def closed(j):
        return j.replace(constvars=(), invars=tuple(j.constvars) + tuple(j.invars))

    params = wp.to_params(
        cond_jaxpr=closed(cj),
        body_jaxpr=closed(bj),
        cond_nconsts=wp.cond_nconsts + len(new_c),
        body_nconsts=wp.body_nconsts + len(new_b),
    )
    return e.replace(inputs=(*new_c, *cconsts, *new_b, *bconsts, *carry), params=params)


define(
    "while",
    multiple_results=True,
    jvp=_while_jvp,
    jvp_kind="jvp+linearization",
    linearization=_while_linearize,
    transpose=_while_transpose,
    dce=_while_dce,
    evaluate=_while_evaluate,
    evaluated_params=frozenset("cond_jaxpr body_jaxpr cond_nconsts body_nconsts".split()),
    binder_type=_while_binder_type,
    batching=_while_batching,
    body_operands=_while_body_operands,
    unbounded_loop=True,
    hoist_consts=_while_hoist_consts,
    # (JAX binds cond_nconsts, cond_jaxpr, body_nconsts, body_jaxpr: the printer hoists a
    # large cond_jaxpr before a large body_jaxpr)
    jaxpr_params_order=("cond_jaxpr", "body_jaxpr"),
)
