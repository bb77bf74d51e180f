"""The indexing family: primitives that read or write an array at computed indices.

dynamic_slice, dynamic_update_slice, gather, the scatter family (scatter, scatter-add, -sub,
-mul, -min, -max; also spelled with `_`), and the 0.12 jnp HiPrims that compute indices
(SearchSorted, Nonzero).  Each block holds the shape rule, the JVP and transpose rules (JAX's
`slicing.py` is the reference: gather and dynamic_slice transpose into an accumulator, a
scatter-add / dynamic_update_slice of the cotangent), the batching rule (JAX's: dynamic_slice
and dynamic_update_slice batch into a gather and a scatter), evaluation and FLOPs.  `bind_gather` and
the gather dimension numbers live in `jaxprtool.ad.ops` (the sort JVP gathers too).
"""

from __future__ import annotations

from ..ad import ops
from ..ad.ops import (
    bind_broadcast,
    bind_gather,
    bind_iota,
    bind_reshape,
    gather_dnums,
    gather_fill_value,
    instantiate,
    mode_enum,
    ty,
    und,
    zero_cts,
)
from ..ad.registry import (
    defjvp,
    fancy_transposes,
    primitive_jvps,
    primitive_transposes,
    rebind_primal,
    set_kind,
)
from ..ad.zeros import Zero, is_zero, tangent_type
from ..core import Eqn, Jaxpr, JaxprError, ShapedArray, Var, long_dtype_name
from ..lazy import lazy_module, np
from ..params import EnumValue, Record
from ..record import define
from ..shapes import ShapeError, shape_rule
from ..shapes.sizes import check_all_ge
from ..shapes.util import (
    arr,
    dim_param,
    dtype_param,
    field,
    fill_sym_from_hint,
    fmt_shape,
    ints,
    is_int_dtype,
    min_args,
    nargs,
    need,
    static_ints,
)
from ..shardings import sharded_size

#: the vmap machinery, executed when a batching rule first runs
BT = lazy_module("jaxprtool.ad.batching")


def _no_flops(e) -> int:
    return 0  # data movement


def zeros_of(t: ShapedArray):
    return ops.zeros(ShapedArray(tuple(t.shape), t.dtype))


# ---------------------------------------------------------------- dynamic_slice


@shape_rule("dynamic_slice")
def _dynamic_slice(in_types, params, out_hint):
    min_args(in_types, 1, "dynamic_slice")
    x = arr(in_types[0], "dynamic_slice", 0)
    sizes = ints(need(params, "slice_sizes"))
    idx = in_types[1:]
    if len(sizes) != x.ndim:
        raise ShapeError(
            f"dynamic_slice: slice_sizes {fmt_shape(sizes)} must have one entry per axis of {x}"
        )
    if len(idx) < x.ndim:
        raise ShapeError(f"dynamic_slice expects {x.ndim} start indices for {x}, got {len(idx)}")
    for i, t in enumerate(idx[: x.ndim], 1):
        t = arr(t, "dynamic_slice", i)
        if t.ndim != 0 or not is_int_dtype(t.dtype):
            raise ShapeError(
                f"dynamic_slice: start indices must be integer scalars, got {t} at position {i}"
            )
    shape = tuple(sharded_size(d) for d in x.shape)
    check_all_ge(
        zip(shape, sizes),
        "slice slice_sizes must be less than or equal to operand shape, got slice_sizes "
        f"{fmt_shape(sizes)} for operand shape {fmt_shape(shape)}.",
    )
    check_all_ge(
        ((s, 0) for s in sizes),
        f"slice slice_sizes must be greater than or equal to zero, got slice_sizes of {fmt_shape(sizes)}.",
    )
    return [fill_sym_from_hint(x.update(shape=sizes), out_hint)]


def _dynamic_slice_jvp(primals, tangents, *, slice_sizes, **params):
    x, *idx = primals
    t = tangents[0]
    (y,) = rebind_primal("dynamic_slice", primals, dict(params, slice_sizes=slice_sizes))
    if is_zero(t):
        return [y], [Zero(tangent_type(ty(y)))]
    # the result type is the primal's: untyped index literals (old text) need no inference
    return [y], [
        ops.bind("dynamic_slice", t, *idx, slice_sizes=slice_sizes, _out_types=[ty(y)], **params)
    ]


def _dynamic_slice_transpose_fancy(cts, operand, *idx, accums, slice_sizes, **params):
    (ct,) = cts
    acc = accums[0]
    if acc is None or is_zero(ct):
        return None
    zeros = zeros_of(ShapedArray(ops.shape(operand), ty(ct).dtype))
    acc.add(ops.bind("dynamic_update_slice", zeros, ct, *idx, _out_types=[ty(zeros)]))
    return None


def _dynamic_slice_transpose(cts, operand, *idx, slice_sizes, **params):
    (ct,) = cts
    if is_zero(ct):
        return zero_cts([operand, *idx])
    zeros = zeros_of(ShapedArray(ops.shape(operand), ty(ct).dtype))
    return [ops.bind("dynamic_update_slice", zeros, ct, *idx, _out_types=[ty(zeros)])] + [
        None
    ] * len(idx)


primitive_jvps["dynamic_slice"] = _dynamic_slice_jvp
set_kind("dynamic_slice")
fancy_transposes["dynamic_slice"] = _dynamic_slice_transpose_fancy
primitive_transposes["dynamic_slice"] = _dynamic_slice_transpose


def _batch_dynamic_slice_indices(indices, dims):
    """JAX's `_batch_dynamic_slice_indices`: the scalar start indices as one index vector
    (batched: one row per example)."""
    size = BT.axis_size()
    if all(d is None for d in dims):
        parts = [ops.broadcast_in_dim(i, (1,), ()) for i in indices]
        if len(parts) == 1:
            return parts[0], None
        return BT.bind("concatenate", *parts, dimension=0)[0], None
    parts = [
        ops.broadcast_in_dim(i, (size, 1), (0,) if d is not None else ())
        for i, d in zip(indices, dims)
    ]
    return (parts[0] if len(parts) == 1 else BT.bind("concatenate", *parts, dimension=1)[0]), 0


def _identity_gather_dnums(n: int) -> Record:
    r = tuple(range(n))
    return Record(
        "GatherDimensionNumbers",
        (
            ("offset_dims", r),
            ("collapsed_slice_dims", ()),
            ("start_index_map", r),
            ("operand_batching_dims", ()),
            ("start_indices_batching_dims", ()),
        ),
    )


#: the mode of the gathers and scatters that batch dynamic_slice and dynamic_update_slice
CLIP = EnumValue("GatherScatterMode", "CLIP")


def _dynamic_slice_batching(args, dims, *, slice_sizes, **params):
    """JAX's `_dynamic_slice_batching_rule`: a gather."""
    x, *starts = args
    xd, *sds = dims
    nd = BT.ndim(x) - (0 if xd is None else 1)
    if nd == 0:
        return [x], [xd]  # a rank-0 operand has no start indices: the slice is the operand
    if len(starts) != nd:
        return BT.loop_fallback(args, dims, why="start indices that do not match the rank")
    idx, idd = _batch_dynamic_slice_indices(starts, sds)
    return _gather_batching(
        [x, idx],
        [xd, idd],
        dimension_numbers=_identity_gather_dnums(nd),
        slice_sizes=ops.sdims(slice_sizes),
        fill_value=None,
        indices_are_sorted=True,
        mode=CLIP,
        unique_indices=True,
    )


define("dynamic_slice", flops=_no_flops, index_operands=1, batching=_dynamic_slice_batching)
define(
    "dynamic_slice",
    draw_domain=lambda e: {
        1 + k: need
        for k, (n, s) in enumerate(zip(e.inputs[0].type.shape, ints(e.params["slice_sizes"])))
        for need in _index_need(1 + k, [(n, s)]).values()
    },
)


# ---------------------------------------------------------------- dynamic_update_slice


@shape_rule("dynamic_update_slice")
def _dynamic_update_slice(in_types, params, out_hint):
    min_args(in_types, 2, "dynamic_update_slice")
    x = arr(in_types[0], "dynamic_update_slice", 0)
    u = arr(in_types[1], "dynamic_update_slice", 1)
    idx = in_types[2:]
    if u.ndim != x.ndim:
        raise ShapeError(f"dynamic_update_slice: update {u} must have the rank of operand {x}")
    if len(idx) != x.ndim:
        raise ShapeError(
            f"dynamic_update_slice expects {x.ndim} start indices for {x}, got {len(idx)}"
        )
    if u.dtype != x.dtype:
        raise ShapeError(
            f"dynamic_update_slice: update dtype {u.dtype} differs from operand dtype {x.dtype}"
        )
    for i, t in enumerate(idx, 2):
        t = arr(t, "dynamic_update_slice", i)
        if t.ndim != 0 or not is_int_dtype(t.dtype):
            raise ShapeError(
                f"dynamic_update_slice: start indices must be integer scalars, got {t} at position {i}"
            )
    shape, ushape = (tuple(sharded_size(d) for d in t.shape) for t in (x, u))
    check_all_ge(
        zip(shape, ushape),
        "dynamic_update_slice update shape must be smaller than operand shape, got update "
        f"shape {fmt_shape(ushape)} for operand shape {fmt_shape(shape)}.",
    )
    return [x]


def _dynamic_update_slice_jvp(primals, tangents, **params):
    x, u, *idx = primals
    tx, tu = tangents[:2]
    (y,) = rebind_primal("dynamic_update_slice", primals, params)
    if is_zero(tx) and is_zero(tu):
        return [y], [Zero(tangent_type(ty(y)))]
    tx, tu = instantiate(tx), instantiate(tu)
    return [y], [ops.bind("dynamic_update_slice", tx, tu, *idx, _out_types=[ty(y)], **params)]


def _dynamic_update_slice_transpose(cts, operand, update, *idx, **params):
    (ct,) = cts
    if is_zero(ct):
        return zero_cts([operand, update, *idx])
    ushape = ops.shape(update)
    op_t = None
    if und(operand):
        zu = zeros_of(ShapedArray(ushape, ty(ct).dtype))
        op_t = ops.bind("dynamic_update_slice", ct, zu, *idx, _out_types=[ty(ct)])
    up_t = None
    if und(update):
        ut = ShapedArray(ushape, ty(ct).dtype)
        up_t = ops.bind("dynamic_slice", ct, *idx, slice_sizes=ushape, _out_types=[ut])
    return [op_t, up_t] + [None] * len(idx)


primitive_jvps["dynamic_update_slice"] = _dynamic_update_slice_jvp
set_kind("dynamic_update_slice")
primitive_transposes["dynamic_update_slice"] = _dynamic_update_slice_transpose


def _dynamic_update_slice_batching(args, dims, **params):
    """JAX's `_dynamic_update_slice_batching_rule`: a scatter."""
    x, upd, *starts = args
    xd, ud, *sds = dims
    nd = BT.ndim(upd) - (0 if ud is None else 1)
    if nd == 0:
        return [upd], [ud]  # a rank-0 update replaces the whole rank-0 operand
    if len(starts) != nd:
        return BT.loop_fallback(args, dims, why="start indices that do not match the rank")
    r = tuple(range(nd))
    dnums = Record(
        "ScatterDimensionNumbers",
        (
            ("update_window_dims", r),
            ("inserted_window_dims", ()),
            ("scatter_dims_to_operand_dims", r),
            ("operand_batching_dims", ()),
            ("scatter_indices_batching_dims", ()),
        ),
    )
    idx, idd = _batch_dynamic_slice_indices(starts, sds)
    return _scatter_batching("scatter")(
        [x, idx, upd],
        [xd, idd, ud],
        dimension_numbers=dnums,
        indices_are_sorted=True,
        mode=CLIP,
        unique_indices=True,
        update_consts=(),
        update_jaxpr=None,
    )


define(
    "dynamic_update_slice",
    flops=_no_flops,
    index_operands=2,
    batching=_dynamic_update_slice_batching,
    draw_domain=lambda e: {
        2 + k: need
        for k, (n, s) in enumerate(zip(e.inputs[0].type.shape, e.inputs[1].type.shape))
        for need in _index_need(2 + k, [(n, s)]).values()
    },
)


# ---------------------------------------------------------------- dimension numbers


def scatter_dnums(
    update_window_dims,
    inserted_window_dims,
    scatter_dims_to_operand_dims,
    operand_batching_dims=(),
    scatter_indices_batching_dims=(),
) -> Record:
    return Record(
        "ScatterDimensionNumbers",
        (
            ("update_window_dims", ops.ints(update_window_dims)),
            ("inserted_window_dims", ops.ints(inserted_window_dims)),
            ("scatter_dims_to_operand_dims", ops.ints(scatter_dims_to_operand_dims)),
            ("operand_batching_dims", ops.ints(operand_batching_dims)),
            ("scatter_indices_batching_dims", ops.ints(scatter_indices_batching_dims)),
        ),
    )


def dn(rec, name):
    """A tuple-of-ints field of a dimension-numbers Record (absent fields are empty)."""
    v = rec.get(name, ()) if hasattr(rec, "get") else getattr(rec, name, ())
    return ops.ints(v or ())


def scatter_to_gather_dnums(sd) -> Record:
    return gather_dnums(
        dn(sd, "update_window_dims"),
        dn(sd, "inserted_window_dims"),
        dn(sd, "scatter_dims_to_operand_dims"),
        dn(sd, "operand_batching_dims"),
        dn(sd, "scatter_indices_batching_dims"),
    )


def gather_to_scatter_dnums(gd) -> Record:
    return scatter_dnums(
        dn(gd, "offset_dims"),
        dn(gd, "collapsed_slice_dims"),
        dn(gd, "start_index_map"),
        dn(gd, "operand_batching_dims"),
        dn(gd, "start_indices_batching_dims"),
    )


# ---------------------------------------------------------------- gather


@shape_rule("gather")
def _gather(in_types, params, out_hint):
    nargs(in_types, 2, "gather")
    x = arr(in_types[0], "gather", 0)
    idx = arr(in_types[1], "gather", 1)
    if not is_int_dtype(idx.dtype):
        raise ShapeError(f"gather: indices must have an integer dtype, got {idx.dtype}")
    dn = need(params, "dimension_numbers")
    offset_dims = static_ints(field(dn, "offset_dims"))
    collapsed = set(static_ints(field(dn, "collapsed_slice_dims")))
    start_index_map = static_ints(field(dn, "start_index_map"))
    obatch = set(static_ints(field(dn, "operand_batching_dims", ())))
    sizes = ints(need(params, "slice_sizes"))
    if len(sizes) != x.ndim:
        raise ShapeError(
            f"gather: slice_sizes {fmt_shape(sizes)} must have one entry per axis of {x}"
        )
    if idx.ndim == 0:
        raise ShapeError("gather: indices must have rank at least 1")
    nvec = idx.shape[-1]
    if isinstance(nvec, int) and nvec != len(start_index_map):
        raise ShapeError(
            f"gather: the last dimension of indices ({nvec}) must equal len(start_index_map) ({len(start_index_map)})"
        )
    for i in collapsed | obatch:
        if not 0 <= i < x.ndim:
            raise ShapeError(f"gather: collapsed/batching dimension {i} is out of range for {x}")
    for i, (d, s) in enumerate(zip(x.shape, sizes)):
        if isinstance(d, int) and isinstance(s, int) and s > d:
            raise ShapeError(f"gather: slice size {s} exceeds dimension {i} of {x}")
    rank = len(offset_dims) + idx.ndim - 1
    batch_shape = iter(idx.shape[:-1])
    slice_shape = iter(s for i, s in enumerate(sizes) if i not in collapsed and i not in obatch)
    try:
        shape = tuple(
            next(slice_shape) if i in offset_dims else next(batch_shape) for i in range(rank)
        )
    except StopIteration:
        raise ShapeError(
            "gather: offset_dims do not match slice_sizes and collapsed_slice_dims"
        ) from None
    return [fill_sym_from_hint(x.update(shape=shape), out_hint)]


def _gather_jvp(g, operand, indices, **params):
    p = dict(params)
    p["fill_value"] = gather_fill_value(p.get("mode"), 0, ty(g).dtype)
    return ops.bind("gather", g, indices, **p)


def _gather_scatter_add(
    ct,
    operand_type,
    indices,
    *,
    dimension_numbers,
    indices_are_sorted=False,
    unique_indices=False,
    mode=None,
    **_,
):
    zeros = zeros_of(ShapedArray(tuple(operand_type.shape), ty(ct).dtype))
    return bind_scatter(
        "scatter-add",
        zeros,
        indices,
        ct,
        gather_to_scatter_dnums(dimension_numbers),
        mode=mode,
        indices_are_sorted=indices_are_sorted,
        unique_indices=unique_indices,
    )


def _gather_transpose_fancy(cts, operand, indices, *, accums, **params):
    (ct,) = cts
    acc = accums[0]
    if acc is None or is_zero(ct):
        return None
    acc.add(_gather_scatter_add(ct, ty(operand), indices, **params))
    return None


def _gather_transpose(cts, operand, indices, **params):
    (ct,) = cts
    if is_zero(ct):
        return [Zero(tangent_type(ty(operand))), None]
    return [_gather_scatter_add(ct, ty(operand), indices, **params), None]


defjvp("gather", _gather_jvp, None)
fancy_transposes["gather"] = _gather_transpose_fancy
primitive_transposes["gather"] = _gather_transpose


def _gather_batching(args, dims, *, dimension_numbers, slice_sizes, **params):
    """JAX's `_gather_batching_rule` (the three cases: operand, indices, or both batched)."""
    (x, idx), (xd, id_) = args, dims
    dnums = dimension_numbers
    offset = BT.ints(BT.field_or(dnums, "offset_dims"))
    collapsed = BT.ints(BT.field_or(dnums, "collapsed_slice_dims"))
    sim = BT.ints(BT.field_or(dnums, "start_index_map"))
    obd = BT.ints(BT.field_or(dnums, "operand_batching_dims"))
    sibd = BT.ints(BT.field_or(dnums, "start_indices_batching_dims"))
    sizes = ops.sdims(slice_sizes)
    p = dict(params)
    if xd is not None and id_ is None:
        x = BT.moveaxis(x, xd, 0)
        new = BT.replace_fields(
            dnums,
            offset_dims=(0,) + tuple(1 + d for d in offset),
            collapsed_slice_dims=tuple(1 + d for d in collapsed),
            start_index_map=tuple(1 + d for d in sim),
            operand_batching_dims=tuple(1 + d for d in obd),
            start_indices_batching_dims=sibd,
        )
        sizes = (ops.sdims(BT.shape_of(x))[0], *sizes)
        out = BT.bind("gather", x, idx, dimension_numbers=new, slice_sizes=sizes, **p)
        return out, [0]
    if xd is None and id_ is not None:
        idx = BT.moveaxis(idx, id_, 0)
        new = BT.replace_fields(
            dnums,
            offset_dims=tuple(1 + d for d in offset),
            collapsed_slice_dims=collapsed,
            start_index_map=sim,
            operand_batching_dims=obd,
            start_indices_batching_dims=tuple(1 + d for d in sibd),
        )
        if "unique_indices" in p:
            p["unique_indices"] = False
        if "indices_are_sorted" in p:
            p["indices_are_sorted"] = False
        out = BT.bind("gather", x, idx, dimension_numbers=new, slice_sizes=sizes, **p)
        return out, [0]
    x = BT.moveaxis(x, xd, 0)
    idx = BT.moveaxis(idx, id_, 0)
    new = BT.replace_fields(
        dnums,
        offset_dims=tuple(1 + d for d in offset),
        collapsed_slice_dims=tuple(1 + d for d in collapsed),
        start_index_map=tuple(1 + d for d in sim),
        operand_batching_dims=(0,) + tuple(1 + d for d in obd),
        start_indices_batching_dims=(0,) + tuple(1 + d for d in sibd),
    )
    first = 0 if BT.shape_of(x)[0] == 0 else 1
    out = BT.bind("gather", x, idx, dimension_numbers=new, slice_sizes=(first, *sizes), **p)
    return out, [0]


#: JAX 0.12.1 added `out_sharding` to gather and the scatters (None: the sharding JAX
#: infers, all that older versions knew)
OUT_SHARDING_SINCE = {"out_sharding": ((0, 12, 1), None)}


def _gather_draw(e):
    """Random inputs (`draw.py`): its indices within the axes they start slices of."""
    dn, x = e.params["dimension_numbers"], e.inputs[0].type
    sizes = ints(e.params["slice_sizes"])
    return _index_need(
        1, [(x.shape[d], sizes[d]) for d in static_ints(field(dn, "start_index_map"))]
    )


def _index_need(pos, extents):
    """{pos: ("index", n)}: n the fewest starting places among (axis size, slice size)."""
    ns = [a - b + 1 for a, b in extents if isinstance(a, int) and isinstance(b, int)]
    return {pos: ("index", min(ns))} if ns and min(ns) > 0 else {}


define(
    "gather",
    draw_domain=_gather_draw,
    flops=_no_flops,
    index_operands=1,
    batching=_gather_batching,
    params_since=OUT_SHARDING_SINCE,
)


# ---------------------------------------------------------------- scatters


@shape_rule(
    "scatter",
    "scatter-add",
    "scatter-mul",
    "scatter-min",
    "scatter-max",
    "scatter-sub",
    "scatter_add",
    "scatter_mul",
    "scatter_min",
    "scatter_max",
    "scatter_sub",
)
def _scatter(in_types, params, out_hint):
    nargs(in_types, 3, "scatter")
    x = arr(in_types[0], "scatter", 0)
    idx = arr(in_types[1], "scatter", 1)
    upd = arr(in_types[2], "scatter", 2)
    if not is_int_dtype(idx.dtype):
        raise ShapeError(f"scatter: indices must have an integer dtype, got {idx.dtype}")
    if upd.dtype != x.dtype:
        raise ShapeError(f"scatter: updates dtype {upd.dtype} differs from operand dtype {x.dtype}")
    dn = params.get("dimension_numbers")
    if dn is not None:
        uwd = static_ints(field(dn, "update_window_dims", ()))
        iwd = static_ints(field(dn, "inserted_window_dims", ()))
        obd = static_ints(field(dn, "operand_batching_dims", ()))
        if len(uwd) + len(iwd) + len(obd) != x.ndim:
            raise ShapeError(
                f"scatter: update_window_dims, inserted_window_dims and operand_batching_dims must "
                f"account for every axis of {x}"
            )
        if upd.ndim != len(uwd) + max(idx.ndim - 1, 0):
            raise ShapeError(f"scatter: updates {upd} have the wrong rank for indices {idx}")
    return [x]


def _scalar_combiner(prim: str, dtype: str) -> Jaxpr:
    a, b = Var(ShapedArray((), dtype)), Var(ShapedArray((), dtype))
    c = Var(ShapedArray((), dtype))
    return Jaxpr((), (a, b), (Eqn(prim, (a, b), (c,), {}),), (c,))


def bind_scatter(
    prim,
    operand,
    indices,
    updates,
    dnums,
    *,
    mode=None,
    indices_are_sorted=False,
    unique_indices=False,
):
    comb = {
        "scatter-add": "add",
        "scatter-sub": "sub",
        "scatter-mul": "mul",
        "scatter-min": "min",
        "scatter-max": "max",
    }.get(prim)
    return ops.bind(
        prim,
        operand,
        indices,
        updates,
        dimension_numbers=dnums,
        indices_are_sorted=indices_are_sorted,
        mode=mode if mode is not None else mode_enum("FILL_OR_DROP"),
        unique_indices=unique_indices,
        update_consts=(),
        update_jaxpr=_scalar_combiner(comb, ty(operand).dtype) if comb else None,
    )


def scatter_slice_sizes(operand_shape, updates_shape, sd) -> tuple[int, ...]:
    """slice_sizes of the gather that reads back, per update, the window a scatter wrote."""
    inserted = set(dn(sd, "inserted_window_dims")) | set(dn(sd, "operand_batching_dims"))
    uwd = dn(sd, "update_window_dims")
    out, pos = [], 0
    for i in range(len(operand_shape)):
        if i in inserted:
            out.append(1)
        else:
            out.append(updates_shape[uwd[pos]])
            pos += 1
    return tuple(out)


def _evaluate_scatter(fn_name):
    """Without an update jaxpr, through `jax.lax.<fn_name>` (it builds the combiner the
    primitive's name implies: overwrite, add, ...); with one (`lax.scatter_apply`, or any
    combiner the text spells out), JAX's primitive is bound with the text's body traced as
    the combiner, as `scatter_apply` binds it."""

    def rule(interp, eqn, invals, path):
        import jax

        from ..backend.prims import lookup, to_jax, versioned_params

        p = eqn.params
        if tuple(p.get("update_consts") or ()):
            raise JaxprError(
                f"cannot run '{eqn.prim}': update_consts={p['update_consts']} (constants of the "
                "update jaxpr) cannot be reconstructed from the text; make the combiner close "
                "over no arrays",
                eqn.loc,
            )
        operand, indices, updates = invals
        kw = dict(
            dimension_numbers=to_jax(p["dimension_numbers"]),
            indices_are_sorted=bool(p.get("indices_are_sorted", False)),
            unique_indices=bool(p.get("unique_indices", False)),
            mode=to_jax(p.get("mode")),
        )
        if "out_sharding" in p:
            kw["out_sharding"] = to_jax(p["out_sharding"])
        versioned_params(eqn, kw)
        body = p.get("update_jaxpr")
        if body is None:
            return [getattr(jax.lax, fn_name)(operand, indices, updates, **kw)]
        combiner = _traced_combiner(interp, interp.body(body, eqn), eqn, operand.dtype, path)
        kw["mode"] = jax.lax.GatherScatterMode.from_any(kw["mode"])
        try:
            return [
                lookup(fn_name.replace("_", "-")).bind(
                    operand,
                    indices,
                    updates,
                    update_jaxpr=combiner,
                    update_consts=tuple(combiner.consts),
                    **kw,
                )
            ]
        except Exception as e:  # noqa: BLE001 - JAX's complaint, located at the equation
            raise JaxprError(f"'{eqn.prim}' failed in JAX: {type(e).__name__}: {e}", eqn.loc) from e

    return rule


def _traced_combiner(interp, body: Jaxpr, eqn: Eqn, dtype, path):
    """The text's scalar update jaxpr as a JAX ClosedJaxpr (what `lax.scatter_apply` binds)."""
    import jax

    if len(body.invars) != 2 or len(body.outvars) != 1:
        raise JaxprError(
            f"'{eqn.prim}': its update_jaxpr must take two scalars and return one, got "
            f"{len(body.invars)} inputs and {len(body.outvars)} outputs",
            eqn.loc,
        )
    scalar = jax.ShapeDtypeStruct((), dtype)

    def combine(a, b):
        return tuple(interp.run(body, [], [a, b], path))

    return jax.make_jaxpr(combine)(scalar, scalar)


def _scatter_draw(e):
    """Random inputs (`draw.py`): its indices within the operand axes they scatter into
    (a start past an axis less its window: the axis size for an inserted axis of 1)."""
    dn, x = e.params["dimension_numbers"], e.inputs[0].type
    inserted = set(static_ints(field(dn, "inserted_window_dims")))
    dims = static_ints(field(dn, "scatter_dims_to_operand_dims"))
    return _index_need(1, [(x.shape[d], 1) for d in dims if d in inserted])


for _p in ("", "-add", "-mul", "-min", "-max", "-sub"):
    for _name in {"scatter" + _p, "scatter" + _p.replace("-", "_")}:
        define(
            _name,
            evaluate=_evaluate_scatter("scatter" + _p.replace("-", "_")),
            evaluated_params=frozenset(
                "dimension_numbers indices_are_sorted unique_indices mode update_jaxpr "
                "update_consts out_sharding".split()
            ),
            params_since=OUT_SHARDING_SINCE,
            draw_domain=_scatter_draw,
        )
define("scatter", index_operands=1)
define("scatter-add", index_operands=1)


def _scatter_batching(name):
    """JAX's `_scatter_batching_rule`."""

    def rule(args, dims, *, dimension_numbers, **params):
        (x, idx, upd), (xd, id_, ud) = args, dims
        dnums = dimension_numbers
        uwd = BT.ints(BT.field_or(dnums, "update_window_dims"))
        iwd = BT.ints(BT.field_or(dnums, "inserted_window_dims"))
        sdod = BT.ints(BT.field_or(dnums, "scatter_dims_to_operand_dims"))
        obd = BT.ints(BT.field_or(dnums, "operand_batching_dims"))
        sibd = BT.ints(BT.field_or(dnums, "scatter_indices_batching_dims"))
        size = BT.axis_size()
        x = BT.bdim_at_front(x, xd, size)
        upd = BT.bdim_at_front(upd, ud, size)
        if id_ is None:
            new = BT.replace_fields(
                dnums,
                update_window_dims=(0,) + tuple(1 + d for d in uwd),
                inserted_window_dims=tuple(1 + d for d in iwd),
                scatter_dims_to_operand_dims=tuple(1 + d for d in sdod),
                operand_batching_dims=tuple(1 + d for d in obd),
                scatter_indices_batching_dims=sibd,
            )
            return BT.bind(name, x, idx, upd, dimension_numbers=new, **params), [0]
        idx = BT.bdim_at_front(idx, id_, size)
        new = BT.replace_fields(
            dnums,
            update_window_dims=tuple(1 + d for d in uwd),
            inserted_window_dims=tuple(1 + d for d in iwd),
            scatter_dims_to_operand_dims=tuple(1 + d for d in sdod),
            operand_batching_dims=(0,) + tuple(1 + d for d in obd),
            scatter_indices_batching_dims=(0,) + tuple(1 + d for d in sibd),
        )
        return BT.bind(name, x, idx, upd, dimension_numbers=new, **params), [0]

    return rule


for _p in ("", "-add", "-mul", "-min", "-max", "-sub"):
    for _name in ("scatter" + _p, "scatter" + _p.replace("-", "_")):
        define(_name, batching=_scatter_batching(_name))


def _scatter_params(params):
    return dict(
        dnums=params["dimension_numbers"],
        mode=params.get("mode"),
        indices_are_sorted=params.get("indices_are_sorted", False),
        unique_indices=params.get("unique_indices", False),
    )


# scatter-add, scatter-sub: linear in the operand and the updates


def _scatter_addsub_jvp(prim):
    def rule(primals, tangents, **params):
        x, i, u = primals
        tx, _, tu = tangents
        (y,) = rebind_primal(prim, primals, params)
        if is_zero(tx) and is_zero(tu):
            return [y], [Zero(tangent_type(ty(y)))]
        return [y], [ops.bind(prim, instantiate(tx), i, instantiate(tu), **params)]

    return rule


def _scatter_addsub_transpose(prim):
    def rule(cts, operand, indices, updates, **params):
        (ct,) = cts
        if is_zero(ct):
            return zero_cts([operand, indices, updates])
        sd = params["dimension_numbers"]
        op_t = ct if und(operand) else None
        up_t = None
        if und(updates):
            sizes = scatter_slice_sizes(ops.shape(ct), ops.shape(updates), sd)
            up_t = bind_gather(
                ct,
                indices,
                scatter_to_gather_dnums(sd),
                sizes,
                mode=params.get("mode"),
                fill_value=0,
                indices_are_sorted=params.get("indices_are_sorted", False),
                unique_indices=params.get("unique_indices", False),
            )
            if prim == "scatter-sub":
                up_t = ops.neg(up_t)
        return [op_t, None, up_t]

    return rule


for _p in ("scatter-add", "scatter-sub"):
    primitive_jvps[_p] = _scatter_addsub_jvp(_p)
    set_kind(_p)
    primitive_transposes[_p] = _scatter_addsub_transpose(_p)


# scatter-mul


def _require_unique(
    params, what="scatter_mul gradients are only implemented if `unique_indices=True`"
):
    if not params.get("unique_indices", False):
        raise JaxprError(what)


def _scatter_mul_jvp_operand(g, x, i, y, **params):
    return ops.bind("scatter-mul", g, i, y, **params)


def _scatter_mul_jvp_updates(g, x, i, y, **params):
    _require_unique(params)
    sp = _scatter_params(params)
    sp.pop("dnums")
    added = bind_scatter("scatter-add", zeros_of(ty(x)), i, g, params["dimension_numbers"], **sp)
    return ops.mul(x, added)


defjvp("scatter-mul", _scatter_mul_jvp_operand, None, _scatter_mul_jvp_updates)


def _scatter_mul_transpose(cts, operand, indices, updates, **params):
    (ct,) = cts
    if is_zero(ct):
        return zero_cts([operand, indices, updates])
    sd = params["dimension_numbers"]
    op_t = up_t = None
    if und(operand):
        op_t = ops.bind("scatter-mul", ct, indices, updates, **params)
    if und(updates):
        _require_unique(params)
        sizes = scatter_slice_sizes(ops.shape(ct), ops.shape(updates), sd)
        up_t = bind_gather(
            ops.mul(ct, operand),
            indices,
            scatter_to_gather_dnums(sd),
            sizes,
            mode=params.get("mode"),
            fill_value=0,
        )
    return [op_t, None, up_t]


primitive_transposes["scatter-mul"] = _scatter_mul_transpose


# scatter-min, scatter-max: the tangent of the winning value (ties share it)


def _full_like(x, value):
    t = ty(x)
    return ops.full(ShapedArray(tuple(t.shape), t.dtype), value)


def _scatter_extremal_jvp(prim):
    def rule(primals, tangents, **params):
        operand, indices, updates = primals
        g_operand, _, g_updates = tangents
        (y,) = rebind_primal(prim, primals, params)
        if is_zero(g_operand) and is_zero(g_updates):
            return [y], [Zero(tangent_type(ty(y)))]
        g_operand, g_updates = instantiate(g_operand), instantiate(g_updates)
        sd = params["dimension_numbers"]
        gd = scatter_to_gather_dnums(sd)
        sp = _scatter_params(params)
        sp.pop("dnums")
        gp = dict(
            mode=sp["mode"],
            indices_are_sorted=sp["indices_are_sorted"],
            unique_indices=sp["unique_indices"],
        )
        sizes = scatter_slice_sizes(ops.shape(operand), ops.shape(updates), sd)
        initial_vals = bind_gather(operand, indices, gd, sizes, **gp)
        target_vals = bind_gather(y, indices, gd, sizes, **gp)
        successful = ops.eq(updates, target_vals)
        retained = ops.eq(initial_vals, target_vals)
        one_u, zero_u = _full_like(updates, 1), _full_like(updates, 0)
        num_updates = bind_gather(
            bind_scatter(
                "scatter-add",
                _full_like(operand, 0),
                indices,
                ops.select_n(successful, zero_u, one_u),
                sd,
                **sp,
            ),
            indices,
            gd,
            sizes,
            **gp,
        )
        num_refs = bind_gather(
            bind_scatter("scatter-add", _full_like(operand, 0), indices, one_u, sd, **sp),
            indices,
            gd,
            sizes,
            **gp,
        )
        one = ops.lit(1.0, num_updates)
        inv_n1 = ops.div(one, ops.add(num_updates, one))
        inv_n = ops.div(one, num_updates)
        updates_normalizer = ops.select_n(retained, inv_n, inv_n1)
        updates_coef = ops.select_n(successful, zero_u, updates_normalizer)
        operand_normalizer = ops.select_n(retained, _full_like(num_updates, 0), inv_n1)
        operand_coef = ops.div(ops.add(ops.lit(-1.0, num_updates), operand_normalizer), num_refs)
        target_tangents = bind_gather(g_operand, indices, gd, sizes, **gp)
        tangent_updates = ops.add(
            ops.mul(target_tangents, operand_coef), ops.mul(g_updates, updates_coef)
        )
        t_out = bind_scatter("scatter-add", g_operand, indices, tangent_updates, sd, **sp)
        return [y], [t_out]

    return rule


for _p in ("scatter-min", "scatter-max"):
    primitive_jvps[_p] = _scatter_extremal_jvp(_p)
    set_kind(_p)


# scatter: overlapping updates keep one winner


def _scatter_jvp(primals, tangents, **params):
    operand, indices, updates = primals
    g_operand, _, g_updates = tangents
    if params.get("update_jaxpr") is not None:
        raise JaxprError("scatter_apply JVP not implemented")
    if is_zero(g_operand) and is_zero(g_updates):
        (y,) = rebind_primal("scatter", primals, params)
        return [y], [Zero(tangent_type(ty(y)))]
    g_operand, g_updates = instantiate(g_operand), instantiate(g_updates)
    if params.get("unique_indices", False):
        (y,) = rebind_primal("scatter", primals, params)
        return [y], [ops.bind("scatter", g_operand, indices, g_updates, **params)]
    # Overlapping updates: keep only the winning update (and the untouched operand entries);
    # then scatter-add.
    untouched, won = _scatter_winners(ops.shape(operand), indices, ops.shape(updates), params)
    sd = params["dimension_numbers"]
    sp = _scatter_params(params)
    sp.pop("dnums")
    z_op, z_up = _full_like(operand, 0), _full_like(updates, 0)
    masked_operand = ops.select_n(untouched, z_op, operand)
    masked_updates = ops.select_n(won, z_up, updates)
    masked_g_operand = ops.select_n(untouched, z_op, g_operand)
    masked_g_updates = ops.select_n(won, z_up, g_updates)
    y = bind_scatter("scatter-add", masked_operand, indices, masked_updates, sd, **sp)
    t = bind_scatter("scatter-add", masked_g_operand, indices, masked_g_updates, sd, **sp)
    return [y], [t]


def _scatter_winners(operand_shape, indices, ushape, params):
    """(operand entries no update reaches, updates that win where several land on one entry):
    each update is tagged with an id, the ids are scattered and read back (JAX's
    _scatter_jvp)."""
    sd = params["dimension_numbers"]
    sp = _scatter_params(params)
    sp.pop("dnums")
    ids_shape = list(ushape)
    for d in dn(sd, "update_window_dims"):
        ids_shape[d] = 1
    num_ids = int(np.prod(ids_shape))
    id_dtype = "u32" if num_ids < 2**31 else "u64"
    ids = bind_reshape(bind_iota(id_dtype, (num_ids,), 0), ids_shape)
    ids = ops.add(ids, ops.lit(1, ids))
    ids_b = bind_broadcast(ids, ushape, range(len(ushape)))  # size-1 window dims broadcast
    zeros_ids = ops.full(ShapedArray(tuple(operand_shape), id_dtype), 0)
    scattered_ids = bind_scatter("scatter", zeros_ids, indices, ids_b, sd, **sp)
    sizes = scatter_slice_sizes(tuple(operand_shape), ushape, sd)
    gathered_ids = bind_gather(
        scattered_ids, indices, scatter_to_gather_dnums(sd), sizes, mode=sp["mode"]
    )
    untouched = ops.eq(scattered_ids, ops.full(ShapedArray(tuple(operand_shape), id_dtype), 0))
    return untouched, ops.eq(ids_b, gathered_ids)


def _scatter_transpose(cts, operand, indices, updates, **params):
    """Updates that later ones overwrite get no cotangent (JAX transposes only the unique
    case; its JVP of the general case is this masked form)."""
    (ct,) = cts
    if is_zero(ct):
        return zero_cts([operand, indices, updates])
    sd = params["dimension_numbers"]
    op_t = up_t = None
    if und(operand):
        zu = zeros_of(ShapedArray(ops.shape(updates), ty(ct).dtype))
        op_t = ops.bind("scatter", ct, indices, zu, **params)
    if und(updates):
        sizes = scatter_slice_sizes(ops.shape(ct), ops.shape(updates), sd)
        up_t = bind_gather(
            ct, indices, scatter_to_gather_dnums(sd), sizes, mode=params.get("mode"), fill_value=0
        )
        if not params.get("unique_indices", False):
            _, won = _scatter_winners(ops.shape(ct), indices, ops.shape(up_t), params)
            up_t = ops.select_n(won, _full_like(up_t, 0), up_t)
    return [op_t, None, up_t]


primitive_jvps["scatter"] = _scatter_jvp
set_kind("scatter")
primitive_transposes["scatter"] = _scatter_transpose


# ---------------------------------------------------------------- 0.12 jnp HiPrims (indices)


@shape_rule("SearchSorted")
def _search_sorted(in_types, params, out_hint):
    nargs(in_types, 2, "SearchSorted")
    a = arr(in_types[0], "SearchSorted", 0)
    q = arr(in_types[1], "SearchSorted", 1)
    if a.dtype != q.dtype:
        raise ShapeError(
            f"SearchSorted: dtypes of sorted_arr and query must match, got {a.dtype} and {q.dtype}"
        )
    # out_dtype is not printed: int32 unless the binder says otherwise (x64)
    d = "i32"
    if out_hint and isinstance(out_hint[0], ShapedArray) and out_hint[0].dtype in ("i32", "i64"):
        d = out_hint[0].dtype
    nb, dim = int(params.get("batch_dims", 0)), int(params.get("dimension", a.ndim - 1))
    if not 0 <= nb <= dim < a.ndim or a.shape[:nb] != q.shape[:nb]:
        raise ShapeError(
            f"SearchSorted: batch_dims={nb} and dimension={dim} do not fit {a} and {q}"
        )
    # JAX's out_aval: the batch dimensions, the sorted array's other dimensions, the queries'
    rest = tuple(n for i, n in enumerate(a.shape) if i >= nb and i != dim)
    return [q.update(shape=a.shape[:nb] + rest + q.shape[nb:], dtype=d, weak_type=False)]


@shape_rule("Nonzero")
def _nonzero(in_types, params, out_hint):
    if not in_types:
        raise ShapeError("Nonzero expects an operand")
    a = arr(in_types[0], "Nonzero", 0)
    axes = static_ints(params.get("axes", ()))
    if not all(0 <= ax < a.ndim for ax in axes) or len(set(axes)) != len(axes):
        raise ShapeError(f"Nonzero: axes {axes} are out of range or repeated for {a}")
    size = dim_param(params.get("size"))
    d = dtype_param(params.get("out_dtype", "int32"))
    batch = tuple(s for i, s in enumerate(a.shape) if i not in axes)
    return [a.update(shape=(*batch, size), dtype=d, weak_type=False)] * len(axes)


def _hiprim_evaluate(make):
    """Run a jnp HiPrim through JAX's own class (`make(operand avals, params, out dtype)`
    builds it), so that JAX expands it as when it traced the program."""

    def evaluate(interp, eqn, invals, path):
        import jax

        avals = [jax.typeof(v) for v in invals]
        out = make(avals, eqn.params, np.dtype(long_dtype_name(eqn.outputs[0].type.dtype)))
        res = out(*invals)
        return list(res) if isinstance(res, (list, tuple)) else [res]

    return evaluate


def _search_sorted_prim(avals, p, out_dtype):
    from jax._src.numpy.hijax import SearchSorted

    return SearchSorted(
        *avals,
        side=str(p["side"]),
        dimension=int(p["dimension"]),
        batch_dims=int(p["batch_dims"]),
        method=str(p["method"]),
        out_dtype=out_dtype,
    )


def _nonzero_prim(avals, p, out_dtype):
    from jax._src.numpy.hijax import Nonzero

    return Nonzero(
        *avals, size=int(p["size"]), axes=tuple(int(a) for a in p["axes"]), out_dtype=out_dtype
    )


def _search_sorted_batching(args, dims, **params):
    """JAX's `SearchSorted.batch`: the batch axis joins the batch dimensions (both operands
    batched), the sorted array's dimensions (it alone), or the queries' (they alone)."""
    a, q = args
    da, dq = dims
    dimension, batch_dims = int(params["dimension"]), int(params["batch_dims"])
    if dq is None:
        a, dimension, out = BT.moveaxis(a, da, batch_dims), dimension + 1, batch_dims
    elif da is None:
        q, out = BT.moveaxis(q, dq, batch_dims), a.type.ndim - 1
    else:
        a, q, out = BT.moveaxis(a, da, 0), BT.moveaxis(q, dq, 0), 0
        dimension, batch_dims = dimension + 1, batch_dims + 1
    new = {**params, "dimension": dimension, "batch_dims": batch_dims}  # keeps JAX's order
    return BT.bind("SearchSorted", a, q, **new), [out]


# integer results: no JVP rule needed (the JVP walk gives them no tangent)
define(
    "SearchSorted",
    evaluate=_hiprim_evaluate(_search_sorted_prim),
    batching=_search_sorted_batching,
    evaluated_params=frozenset("side dimension batch_dims method".split()),
)
define(
    "Nonzero",
    evaluate=_hiprim_evaluate(_nonzero_prim),
    evaluated_params=frozenset({"size", "axes", "out_dtype"}),
)


def _nonzero_batching(args, dims, **params):
    """JAX's `Nonzero.batch`: the batch axis is one more of the dimensions searched
    separately (not in `axes`); it goes first, as JAX moves it, and so do the results'."""
    (x,), (d,) = args, dims
    x = BT.moveaxis(x, d, 0)
    axes = tuple(int(a) + 1 for a in params["axes"])
    outs = BT.bind(
        "Nonzero", x, _out_types=BT.result_types([0] * len(axes)), **{**params, "axes": axes}
    )
    return outs, [0] * len(outs)


define("Nonzero", batching=_nonzero_batching)
