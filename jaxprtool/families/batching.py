"""Batching (vmap) rules of every primitive family, one section per family.

Each rule is `rule(args, dims, **params) -> (outs, out_dims)` (see `jaxprtool/ad/batching.py`)
and is registered with `define(name, batching=rule)`; the rules follow JAX's
(`jax/_src/lax/lax.py`, `slicing.py`, `convolution.py`, `windowed_reductions.py`,
`control_flow/*.py`, `pjit.py`, `ad_checkpoint.py`, `random/prng.py`), including where they
leave the batch dimension, so that a batched program has no more equations than JAX's.
"""

from __future__ import annotations

from ..ad import batching as BT
from ..ad import builder as B
from ..ad import ops
from ..ad.batching import (
    INFER,
    ZERO_IF_MAPPED,
    axis_size,
    batch_jaxpr,
    batch_jaxpr2,
    batch_jaxpr_axes,
    bdim_at_front,
    bind,
    broadcast,
    broadcasting,
    current_eqn,
    inline_jaxpr,
    leading_batch,
    loop_fallback,
    moveaxis,
    reducer,
    vectorized,
)
from ..core import Jaxpr, JaxprError, Literal, ShapedArray
from ..lazy import np
from ..params import EnumValue, Record
from ..record import define


def _ndim(x) -> int:
    return x.type.ndim if isinstance(x.type, ShapedArray) else 0


def _shape(x) -> tuple:
    return tuple(x.type.shape)


def _ints(v) -> tuple[int, ...]:
    return tuple(int(i) for i in v)


def _bump(dims, b: int) -> tuple[int, ...]:
    """Axes of an unbatched operand, renumbered for the operand with a batch axis at `b`."""
    return tuple(int(d) + (int(d) >= b) for d in dims)


def _record(rec: Record, **changes) -> Record:
    """`rec` with some fields replaced (fields it lacks are appended)."""
    fields = [(k, changes.pop(k) if k in changes else v) for k, v in rec.fields]
    fields.extend(changes.items())
    return Record(rec.cls, tuple(fields))


def _field(rec, name, default=()):
    try:
        return rec[name]
    except (KeyError, TypeError, IndexError):
        return default


def _out_types(dims):
    """The current equation's result types with a batch axis at each of `dims`."""
    eqn = current_eqn()
    return [BT.batched_type(o.type, d) for o, d in zip(eqn.outputs, dims)]


def _unbatched(name):
    """For primitives without operands (iota, axis_index...): never called with a batched
    operand; rebinding them is their batching."""

    def rule(args, dims, **params):
        outs = bind(name, *args, **params)
        return outs, [None] * len(outs)

    return rule


# ================================================================ elementwise

UNARY = """
abs acos acosh asin asinh atan atanh bessel_i0e bessel_i1e cbrt ceil clz conj copy copy_p cos
cosh digamma erf erf_inv erfc exp exp2 expm1 floor imag integer_pow is_finite lgamma log log1p
log2 logistic neg not one_minus_square population_count real reciprocal reduce_precision round
rsqrt sign sin sinh sqrt square tan tanh convert_element_type stop_gradient
""".split()

NARY = """
add sub mul div rem pow max min atan2 nextafter and or xor eq ne lt le gt ge eq_to lt_to le_to
shift_left shift_right_arithmetic shift_right_logical mulhi complex igamma igammac igamma_grad_a
random_gamma_grad polygamma zeta regularized_incomplete_beta copysign _copysign polynomial
""".split()

for _n in UNARY:
    define(_n, batching=vectorized(_n))
for _n in NARY:
    define(_n, batching=broadcasting(_n))


def _add_any_rule(name):
    """JAX's `add_batched`: the operands' batch dimensions are matched directly."""

    def rule(args, dims, **params):
        (x, y), (dx, dy) = args, dims
        if dx == dy:
            d = dx
        elif dx is None:
            x, d = broadcast(x, axis_size(), dy), dy
        elif dy is None:
            y, d = broadcast(y, axis_size(), dx), dx
        else:
            x, d = moveaxis(x, dx, dy), dy
        return bind(name, x, y, **params), [d]

    return rule


for _n in ("add_any", "add_jaxvals"):
    define(_n, batching=_add_any_rule(_n))


def _bitcast_rule(args, dims, **params):
    # a narrowing bitcast reads the last axis: the batch axis must not be it
    (x,), (d,) = args, dims
    eqn = current_eqn()
    if d == _ndim(x) - 1 and eqn.outputs[0].type.ndim < eqn.inputs[0].type.ndim:
        x, d = moveaxis(x, d, 0), 0
    return bind("bitcast_convert_type", x, _out_types=_out_types([d]), **params), [d]


define("bitcast_convert_type", batching=_bitcast_rule)


def _select_n_rule(args, dims, **params):
    """JAX's `_select_batch_rule`."""
    which, *cases = args
    wd, *cds = dims
    size = axis_size()
    if all(wd == d for d in cds):
        if _shape(which) == _shape(cases[0]):
            return bind("select_n", which, *cases), [wd]
        which = ops.broadcast_in_dim(which, _shape(cases[0]), (wd,))
        return bind("select_n", which, *cases), [wd]
    if _ndim(which) == 0 and all(d is not None for d in cds):
        if all(cds[0] == d for d in cds[1:]):
            return bind("select_n", which, *cases), [cds[0]]
        if all(_shape(cases[0]) == _shape(c) for c in cases):
            d0 = cds[0]
            rest = [moveaxis(c, d, d0) for c, d in zip(cases[1:], cds[1:])]
            return bind("select_n", which, cases[0], *rest), [d0]
    which = bdim_at_front(which, wd, size) if _ndim(which) else which
    if not all(_shape(c) == () for c in cases):
        cases = [bdim_at_front(c, d, size) for c, d in zip(cases, cds)]
    if 0 < _ndim(which) < _ndim(cases[0]):
        which = ops.broadcast_in_dim(which, _shape(cases[0]), (0,))
    if _ndim(which) > _ndim(cases[0]):
        cases = [ops.broadcast_in_dim(c, _shape(which), ()) for c in cases]
    return bind("select_n", which, *cases), [0]


define("select_n", batching=_select_n_rule)


def _clamp_rule(args, dims, **params):
    """JAX's `_clamp_batch_rule`."""
    lo, x, hi = args
    ld, xd, hd = dims
    size = axis_size()
    if ld == xd == hd:
        if _shape(lo) == _shape(x) == _shape(hi) or _ndim(lo) == _ndim(hi) == 0:
            return bind("clamp", lo, x, hi), [xd]
        if _ndim(lo) == _ndim(hi) == 1:
            lo = ops.broadcast_in_dim(lo, _shape(x), (ld,))
            hi = ops.broadcast_in_dim(hi, _shape(x), (hd,))
            return bind("clamp", lo, x, hi), [xd]
    elif _ndim(lo) == 0 and _ndim(hi) == 0 and xd is not None:
        return bind("clamp", lo, x, hi), [xd]
    lo = bdim_at_front(lo, ld, size) if _shape(lo) else lo
    hi = bdim_at_front(hi, hd, size) if _shape(hi) else hi
    x = bdim_at_front(x, xd, size) if _shape(x) else x
    if _ndim(lo) == 0 and _ndim(x) > 0:
        lo = ops.broadcast_in_dim(lo, _shape(x), ())
    if _ndim(hi) == 0 and _ndim(x) > 0:
        hi = ops.broadcast_in_dim(hi, _shape(x), ())
    if 0 < _ndim(lo) < _ndim(x):
        lo = ops.broadcast_in_dim(lo, _shape(x), (0,))
    if 0 < _ndim(hi) < _ndim(x):
        hi = ops.broadcast_in_dim(hi, _shape(x), (0,))
    if _ndim(lo) > _ndim(x):
        x = ops.broadcast_in_dim(x, _shape(lo), ())
    return bind("clamp", lo, x, hi), [0]


define("clamp", batching=_clamp_rule)


# ================================================================ shape

for _n in ("iota", "dim_as_value", "empty2"):
    define(_n, batching=_unbatched(_n))


def _broadcast_in_dim_rule(args, dims, **params):
    x, d = args[0], dims[0]
    if any(e is not None for e in dims[1:]):
        return loop_fallback(args, dims)  # batched dynamic shapes
    eqn = current_eqn()
    shape = _ints(params["shape"]) if "shape" in params else _shape(eqn.outputs[0])
    bdims = _ints(params.get("broadcast_dimensions", ()))
    x = moveaxis(x, d, 0)
    new_shape = (axis_size(), *shape)
    new_dims = (0,) + tuple(1 + i for i in bdims)
    p = dict(params, broadcast_dimensions=new_dims)
    if "shape" in p:
        p["shape"] = new_shape
    out = bind(
        "broadcast_in_dim",
        x,
        *args[1:],
        _out_types=[ShapedArray(new_shape, x.type.dtype, eqn.outputs[0].type.weak_type)],
        **p,
    )
    return out, [0]


define("broadcast_in_dim", batching=_broadcast_in_dim_rule)


def _reshape_rule(args, dims, **params):
    (x,), (d,) = args[:1], dims[:1]
    if any(e is not None for e in dims[1:]):
        return loop_fallback(args, dims)
    x = moveaxis(x, d, 0)
    new = (axis_size(), *_ints(params["new_sizes"]))
    dm = params.get("dimensions")
    if dm is not None:
        dm = (0,) + tuple(1 + int(i) for i in dm)
    if _shape(x) == new and dm is None:
        return [x], [0]
    return bind("reshape", x, *args[1:], **dict(params, new_sizes=new, dimensions=dm)), [0]


define("reshape", batching=_reshape_rule)


def _squeeze_rule(args, dims, *, dimensions, **params):
    (x,), (d,) = args, dims
    x = moveaxis(x, d, 0)
    nd = _ndim(x) - 1
    dm = tuple(1 + (int(i) % nd if nd else int(i)) for i in dimensions)
    return bind("squeeze", x, dimensions=dm, **params), [0]


define("squeeze", batching=_squeeze_rule)


def _expand_dims_rule(args, dims, *, dimensions, **params):
    (x,), (d,) = args, dims
    x = moveaxis(x, d, 0)
    nd = _ndim(x) - 1 + len(dimensions)
    dm = tuple(1 + (int(i) % nd) for i in dimensions)
    return bind("expand_dims", x, dimensions=dm, **params), [0]


define("expand_dims", batching=_expand_dims_rule)


def _transpose_rule(args, dims, *, permutation, **params):
    (x,), (d,) = args, dims
    perm = (d,) + tuple(int(i) if int(i) < d else int(i) + 1 for i in permutation)
    if perm == tuple(range(len(perm))):
        return [x], [0]
    return bind("transpose", x, permutation=perm, **params), [0]


define("transpose", batching=_transpose_rule)


def _rev_rule(args, dims, *, dimensions, **params):
    (x,), (d,) = args, dims
    return bind("rev", x, dimensions=_bump(dimensions, d), **params), [d]


define("rev", batching=_rev_rule)


def _slice_rule(args, dims, *, start_indices, limit_indices, strides=None, **params):
    (x,), (d,) = args, dims
    start = list(_ints(start_indices))
    start.insert(d, 0)
    limit = list(_ints(limit_indices))
    limit.insert(d, _shape(x)[d])
    if strides is not None:
        strides = list(_ints(strides))
        strides.insert(d, 1)
        strides = tuple(strides)
    out = bind(
        "slice",
        x,
        start_indices=tuple(start),
        limit_indices=tuple(limit),
        strides=strides,
        **params,
    )
    return out, [d]


define("slice", batching=_slice_rule)


def _pad_rule(args, dims, *, padding_config, **params):
    """JAX's `_pad_batch_rule` (a batched padding value: pad with zeros, then select)."""
    (x, pv), (xd, pd) = args, dims
    if xd is None:
        xd = 0
        x = broadcast(x, axis_size(), 0)
    cfg = list(padding_config)
    cfg.insert(xd, (0, 0, 0))
    cfg = tuple(cfg)
    if pd is None:
        return bind("pad", x, pv, padding_config=cfg, **params), [xd]
    (y,) = bind("pad", x, ops.lit(0, x), padding_config=cfg, **params)
    ones = ops.broadcast_in_dim(Literal(True, ShapedArray((), "bool")), _shape(x), ())
    (mask,) = bind(
        "pad", ones, Literal(False, ShapedArray((), "bool")), padding_config=cfg, **params
    )
    bpv = ops.broadcast_in_dim(pv, _shape(y), (xd,))
    return bind("select_n", mask, bpv, y), [xd]


define("pad", batching=_pad_rule)


def _concatenate_rule(args, dims, *, dimension, **params):
    size = axis_size()
    xs = [moveaxis(x, d, 0) if d is not None else broadcast(x, size, 0) for x, d in zip(args, dims)]
    return bind("concatenate", *xs, dimension=int(dimension) + 1, **params), [0]


define("concatenate", batching=_concatenate_rule)


def _split_rule(args, dims, *, sizes, axis, **params):
    (x,), (d,) = args, dims
    axis = int(axis)
    outs = bind("split", x, sizes=sizes, axis=axis + 1 if axis >= d else axis, **params)
    return outs, [d] * len(outs)


define("split", batching=_split_rule)


def _tile_rule(args, dims, *, reps, **params):
    (x,), (d,) = args, dims
    r = list(_ints(reps))
    r.insert(d, 1)
    return bind("tile", x, reps=tuple(r), **params), [d]


define("tile", batching=_tile_rule)


def _stack_rule(args, dims, *, axis, **params):
    axis = int(axis)
    d = dims[0]
    if d is not None and all(e == d for e in dims):
        if axis <= d:
            return bind("stack", *args, axis=axis, **params), [d + 1]
        return bind("stack", *args, axis=axis + 1, **params), [d]
    xs = [
        moveaxis(x, e, 0) if e is not None else broadcast(x, axis_size(), 0)
        for x, e in zip(args, dims)
    ]
    return bind("stack", *xs, axis=axis + 1, **params), [0]


define("stack", batching=_stack_rule)


def _unstack_rule(args, dims, *, axis=0, **params):
    (x,), (d,) = args, dims
    axis = int(axis)
    if axis < d:
        out_axis, out_d = axis, d - 1
    else:
        out_axis, out_d = axis + 1, d
    outs = bind("unstack", x, axis=out_axis, **params)
    return outs, [out_d] * len(outs)


define("unstack", batching=_unstack_rule)


# ================================================================ indexing

CLIP = EnumValue("GatherScatterMode", "CLIP")


def _gather_dnums(dn, **changes):
    return _record(dn, **changes)


def gather_rule(args, dims, *, dimension_numbers, slice_sizes, **params):
    """JAX's `_gather_batching_rule` (the three cases: operand, indices, or both batched)."""
    (x, idx), (xd, id_) = args, dims
    dn = dimension_numbers
    offset = _ints(_field(dn, "offset_dims"))
    collapsed = _ints(_field(dn, "collapsed_slice_dims"))
    sim = _ints(_field(dn, "start_index_map"))
    obd = _ints(_field(dn, "operand_batching_dims"))
    sibd = _ints(_field(dn, "start_indices_batching_dims"))
    sizes = _ints(slice_sizes)
    p = dict(params)
    if xd is not None and id_ is None:
        x = moveaxis(x, xd, 0)
        new = _gather_dnums(
            dn,
            offset_dims=(0,) + tuple(1 + d for d in offset),
            collapsed_slice_dims=tuple(1 + d for d in collapsed),
            start_index_map=tuple(1 + d for d in sim),
            operand_batching_dims=tuple(1 + d for d in obd),
            start_indices_batching_dims=sibd,
        )
        out = bind("gather", x, idx, dimension_numbers=new, slice_sizes=(_shape(x)[0], *sizes), **p)
        return out, [0]
    if xd is None and id_ is not None:
        idx = moveaxis(idx, id_, 0)
        new = _gather_dnums(
            dn,
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
        out = bind("gather", x, idx, dimension_numbers=new, slice_sizes=sizes, **p)
        return out, [0]
    x = moveaxis(x, xd, 0)
    idx = moveaxis(idx, id_, 0)
    new = _gather_dnums(
        dn,
        offset_dims=tuple(1 + d for d in offset),
        collapsed_slice_dims=tuple(1 + d for d in collapsed),
        start_index_map=tuple(1 + d for d in sim),
        operand_batching_dims=(0,) + tuple(1 + d for d in obd),
        start_indices_batching_dims=(0,) + tuple(1 + d for d in sibd),
    )
    first = 0 if _shape(x)[0] == 0 else 1
    out = bind("gather", x, idx, dimension_numbers=new, slice_sizes=(first, *sizes), **p)
    return out, [0]


define("gather", batching=gather_rule)


def _batch_dynamic_slice_indices(indices, dims):
    """JAX's `_batch_dynamic_slice_indices`: the scalar start indices as one index vector
    (batched: one row per example)."""
    size = axis_size()
    if all(d is None for d in dims):
        parts = [ops.broadcast_in_dim(i, (1,), ()) for i in indices]
        return (parts[0] if len(parts) == 1 else bind("concatenate", *parts, dimension=0)[0]), None
    parts = [
        ops.broadcast_in_dim(i, (size, 1), (0,) if d is not None else ())
        for i, d in zip(indices, dims)
    ]
    return (parts[0] if len(parts) == 1 else bind("concatenate", *parts, dimension=1)[0]), 0


def _gather_record(n: int) -> Record:
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


def _dynamic_slice_rule(args, dims, *, slice_sizes, **params):
    """JAX's `_dynamic_slice_batching_rule`: a gather."""
    x, *starts = args
    xd, *sds = dims
    nd = _ndim(x) - (0 if xd is None else 1)
    if nd == 0 or len(starts) != nd:
        return loop_fallback(args, dims, warn=len(starts) != nd)
    idx, idd = _batch_dynamic_slice_indices(starts, sds)
    return gather_rule(
        [x, idx],
        [xd, idd],
        dimension_numbers=_gather_record(nd),
        slice_sizes=_ints(slice_sizes),
        fill_value=None,
        indices_are_sorted=True,
        mode=CLIP,
        unique_indices=True,
    )


define("dynamic_slice", batching=_dynamic_slice_rule)


def scatter_rule(name):
    """JAX's `_scatter_batching_rule`."""

    def rule(args, dims, *, dimension_numbers, **params):
        (x, idx, upd), (xd, id_, ud) = args, dims
        dn = dimension_numbers
        uwd = _ints(_field(dn, "update_window_dims"))
        iwd = _ints(_field(dn, "inserted_window_dims"))
        sdod = _ints(_field(dn, "scatter_dims_to_operand_dims"))
        obd = _ints(_field(dn, "operand_batching_dims"))
        sibd = _ints(_field(dn, "scatter_indices_batching_dims"))
        size = axis_size()
        x = bdim_at_front(x, xd, size)
        upd = bdim_at_front(upd, ud, size)
        if id_ is None:
            new = _record(
                dn,
                update_window_dims=(0,) + tuple(1 + d for d in uwd),
                inserted_window_dims=tuple(1 + d for d in iwd),
                scatter_dims_to_operand_dims=tuple(1 + d for d in sdod),
                operand_batching_dims=tuple(1 + d for d in obd),
                scatter_indices_batching_dims=sibd,
            )
            return bind(name, x, idx, upd, dimension_numbers=new, **params), [0]
        idx = bdim_at_front(idx, id_, size)
        new = _record(
            dn,
            update_window_dims=tuple(1 + d for d in uwd),
            inserted_window_dims=tuple(1 + d for d in iwd),
            scatter_dims_to_operand_dims=tuple(1 + d for d in sdod),
            operand_batching_dims=(0,) + tuple(1 + d for d in obd),
            scatter_indices_batching_dims=(0,) + tuple(1 + d for d in sibd),
        )
        return bind(name, x, idx, upd, dimension_numbers=new, **params), [0]

    return rule


for _n in (
    "scatter",
    "scatter-add",
    "scatter-sub",
    "scatter-mul",
    "scatter-min",
    "scatter-max",
    "scatter_add",
    "scatter_sub",
    "scatter_mul",
    "scatter_min",
    "scatter_max",
):
    define(_n, batching=scatter_rule(_n))


def _dynamic_update_slice_rule(args, dims, **params):
    """JAX's `_dynamic_update_slice_batching_rule`: a scatter."""
    x, upd, *starts = args
    xd, ud, *sds = dims
    nd = _ndim(upd) - (0 if ud is None else 1)
    if nd == 0 or len(starts) != nd:
        return loop_fallback(args, dims, warn=len(starts) != nd)
    r = tuple(range(nd))
    dn = Record(
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
    return scatter_rule("scatter")(
        [x, idx, upd],
        [xd, idd, ud],
        dimension_numbers=dn,
        indices_are_sorted=True,
        mode=CLIP,
        unique_indices=True,
        update_consts=(),
        update_jaxpr=None,
    )


define("dynamic_update_slice", batching=_dynamic_update_slice_rule)


# ================================================================ reductions

for _n in (
    "reduce_sum",
    "reduce_prod",
    "reduce_max",
    "reduce_min",
    "reduce_and",
    "reduce_or",
    "reduce_xor",
    "argmax",
    "argmin",
):
    define(_n, batching=reducer(_n))


def _cumulative_rule(name):
    def rule(args, dims, *, axis, **params):
        (x,), (d,) = args, dims
        axis = int(axis)
        return bind(name, x, axis=axis if axis < d else axis + 1, **params), [d]

    return rule


for _n in ("cumsum", "cumprod", "cummax", "cummin", "cumlogsumexp"):
    define(_n, batching=_cumulative_rule(_n))


def _reduce_rule(args, dims, *, dimensions, **params):
    """JAX's `_reduce_batch_rule` (batched init values: a loop)."""
    n = len(args) // 2
    if any(d is not None for d in dims[n:]):
        return loop_fallback(args, dims)
    size = axis_size()
    xs = [bdim_at_front(x, d, size) for x, d in zip(args[:n], dims[:n])]
    dm = tuple(int(d) + 1 for d in dimensions)
    outs = bind("reduce", *xs, *args[n:], dimensions=dm, **params)
    return outs, [0] * len(outs)


define("reduce", batching=_reduce_rule)


def _window_params(params, d: int):
    p = dict(params)
    for k, one in (
        ("window_dimensions", 1),
        ("window_strides", 1),
        ("base_dilation", 1),
        ("window_dilation", 1),
    ):
        if k in p and p[k] is not None:
            v = list(p[k])
            v.insert(d, one)
            p[k] = tuple(v)
    if "padding" in p:
        v = list(p["padding"])
        v.insert(d, (0, 0))
        p["padding"] = tuple(v)
    return p


def _reduce_window_monoid_rule(name):
    """JAX's `_reduce_window_batch_rule`: a window of 1 along the batch axis."""

    def rule(args, dims, **params):
        (x,), (d,) = args, dims
        return bind(name, x, **_window_params(params, d)), [d]

    return rule


for _n in ("reduce_window_sum", "reduce_window_max", "reduce_window_min"):
    define(_n, batching=_reduce_window_monoid_rule(_n))


def _reduce_window_rule(args, dims, **params):
    """JAX's `_generic_reduce_window_batch_rule`."""
    n = len(args) // 2
    if any(d is not None for d in dims[n:]):
        return loop_fallback(args, dims)
    xs = [bdim_at_front(x, d) for x, d in zip(args[:n], dims[:n])]
    outs = bind("reduce_window", *xs, *args[n:], **_window_params(params, 0))
    return outs, [0] * len(outs)


define("reduce_window", batching=_reduce_window_rule)


def _select_and_window_rule(name):
    """JAX's `_select_and_{gather,scatter}_add_batch_rule`: both operands batched first."""

    def rule(args, dims, **params):
        xs = [bdim_at_front(x, d) for x, d in zip(args, dims)]
        return bind(name, *xs, **_window_params(params, 0)), [0]

    return rule


for _n in ("select_and_gather_add", "select_and_scatter_add"):
    define(_n, batching=_select_and_window_rule(_n))


def _sort_rule(args, dims, *, dimension, **params):
    """JAX's `_sort_batch_rule`: every operand batched along the first batched one's axis."""
    proto, nd = next((x, d) for x, d in zip(args, dims) if d is not None)
    new = []
    for x, d in zip(args, dims):
        if d is None:
            keep = tuple(i for i in range(_ndim(proto)) if i != nd)
            new.append(ops.broadcast_in_dim(x, _shape(proto), keep))
        else:
            new.append(moveaxis(x, d, nd))
    dimension = int(dimension)
    outs = bind("sort", *new, dimension=dimension + (nd <= dimension), **params)
    return outs, [nd] * len(outs)


define("sort", batching=_sort_rule)


def _top_k_rule(args, dims, **params):
    (x,), (d,) = args, dims
    p = dict(params)
    if "axis" in p:
        axis = int(p["axis"]) % (_ndim(x) - 1) if _ndim(x) > 1 else 0
        p["axis"] = axis + 1 if d <= axis else axis
    elif d == _ndim(x) - 1:  # older JAX: top_k works on the last axis
        x, d = moveaxis(x, d, 0), 0
    outs = bind("top_k", x, **p)
    return outs, [d] * len(outs)


define("top_k", batching=_top_k_rule)


def _approx_top_k_rule(args, dims, *, reduction_dimension, **params):
    (x,), (d,) = args, dims
    dim_map = [i for i in range(_ndim(x)) if i != d]
    rd = dim_map[int(reduction_dimension) % len(dim_map)]
    outs = bind("approx_top_k", x, reduction_dimension=rd, **params)
    return outs, [d] * len(outs)


define("approx_top_k", batching=_approx_top_k_rule)


# ================================================================ linalg


def _dot_batch_dim_nums(ndims, bdims, dimension_numbers):
    """JAX's `_dot_general_batch_dim_nums`: the new dimension numbers and the result's batch
    dimension (a shared batch axis becomes a dot_general batch dimension, in front; a batch
    axis of one operand becomes one of its free dimensions)."""
    lnd, rnd = ndims
    lbd, rbd = bdims
    (lc, rc), (lb, rb) = dimension_numbers
    lc, rc, lb, rb = _ints(lc), _ints(rc), _ints(lb), _ints(rb)
    if lbd is not None and rbd is not None:
        lb = (lbd,) + _bump(lb, lbd)
        rb = (rbd,) + _bump(rb, rbd)
        lc = _bump(lc, lbd)
        rc = _bump(rc, rbd)
        out = 0
    elif lbd is not None:
        lt = [d for d in range(lnd) if d not in lb and d not in lc]
        out = len(lb) + sum(1 for d in lt if d < lbd)
        lb = _bump(lb, lbd)
        lc = _bump(lc, lbd)
    else:
        rt = [d for d in range(rnd) if d not in rb and d not in rc]
        out = lnd - len(lc) + sum(1 for d in rt if d < rbd)
        rb = _bump(rb, rbd)
        rc = _bump(rc, rbd)
    return ((list(lc), list(rc)), (list(lb), list(rb))), out


def _dot_general_rule(args, dims, *, dimension_numbers, **params):
    (x, y), (xd, yd) = args, dims
    new, out = _dot_batch_dim_nums((_ndim(x), _ndim(y)), (xd, yd), dimension_numbers)
    return bind("dot_general", x, y, dimension_numbers=new, **params), [out]


define("dot_general", batching=_dot_general_rule)


def _reshape_axis_into(src: int, dst: int, x):
    """Merge axis `src` of `x` into axis `dst` (numbered after removing `src`): one reshape."""
    n = _ndim(x)
    perm = [i for i in range(n) if i != src]
    perm.insert(dst, src)
    shape = [s for i, s in enumerate(_shape(x)) if i != src]
    shape[dst] *= _shape(x)[src]
    dm = None if perm == list(range(n)) else tuple(perm)
    return bind("reshape", x, new_sizes=tuple(shape), dimensions=dm, sharding=None)[0]


def _reshape_axis_out_of(src: int, size1: int, x):
    shape = list(_shape(x))
    size2, ragged = divmod(shape[src], size1)
    assert not ragged
    shape[src : src + 1] = [size1, size2]
    return ops.reshape(x, tuple(shape))


def _conv_rule(args, dims, **params):
    """JAX's `_conv_general_dilated_batch_rule`: the batch axis is folded into the batch
    dimension (lhs), the output features (rhs), or the feature groups (both)."""
    (lhs, rhs), (ld, rd) = args, dims
    dn = params["dimension_numbers"]
    lhs_spec = _ints(_field(dn, "lhs_spec"))
    rhs_spec = _ints(_field(dn, "rhs_spec"))
    out_spec = _ints(_field(dn, "out_spec"))
    fgc = int(params.get("feature_group_count", 1))
    bgc = int(params.get("batch_group_count", 1))
    if (ld is not None and _shape(lhs)[ld] == 0) or (rd is not None and _shape(rhs)[rd] == 0):
        return loop_fallback(args, dims)

    def conv(a, b, **changes):
        return bind("conv_general_dilated", a, b, **dict(params, **changes))[0]

    if ld is not None and rd is not None:
        b = _shape(lhs)[ld]
        if bgc > 1:
            new_lhs = _reshape_axis_into(ld, lhs_spec[0], lhs)
            changes = {"batch_group_count": bgc * b}
        else:
            new_lhs = _reshape_axis_into(ld, lhs_spec[1], lhs)
            changes = {"feature_group_count": fgc * b}
        new_rhs = _reshape_axis_into(rd, rhs_spec[0], rhs)
        out = conv(new_lhs, new_rhs, **changes)
        return [_reshape_axis_out_of(out_spec[1], b, out)], [out_spec[1]]
    if ld is not None:
        b = _shape(lhs)[ld]
        if bgc == 1:
            new_lhs = _reshape_axis_into(ld, lhs_spec[0], lhs)
            out = conv(new_lhs, rhs)
            return [_reshape_axis_out_of(out_spec[0], b, out)], [out_spec[0]]
        new_lhs = _reshape_axis_out_of(lhs_spec[0] + int(ld <= lhs_spec[0]), bgc, lhs)
        new_lhs = _reshape_axis_into(ld + int(lhs_spec[0] < ld), lhs_spec[0] + 1, new_lhs)
        new_lhs = _reshape_axis_into(lhs_spec[0], lhs_spec[0], new_lhs)
        out = conv(new_lhs, rhs)
        return [_reshape_axis_out_of(out_spec[0], b, out)], [out_spec[0]]
    b = _shape(rhs)[rd]
    if fgc == 1 and bgc == 1:
        new_rhs = _reshape_axis_into(rd, rhs_spec[0], rhs)
        out = conv(lhs, new_rhs)
        return [_reshape_axis_out_of(out_spec[1], b, out)], [out_spec[1]]
    group = fgc if fgc > 1 else bgc
    new_rhs = _reshape_axis_out_of(rhs_spec[0] + int(rd <= rhs_spec[0]), group, rhs)
    new_rhs = _reshape_axis_into(rd + int(rhs_spec[0] < rd), rhs_spec[0] + 1, new_rhs)
    new_rhs = _reshape_axis_into(rhs_spec[0], rhs_spec[0], new_rhs)
    out = conv(lhs, new_rhs)
    out = _reshape_axis_out_of(out_spec[1], group, out)
    out = _reshape_axis_out_of(out_spec[1] + 1, b, out)
    out = _reshape_axis_into(out_spec[1], out_spec[1] + 1, out)
    return [out], [out_spec[1]]


define("conv_general_dilated", batching=_conv_rule)


# ================================================================ random

for _n in ("random_bits", "random_seed", "random_split", "random_unwrap", "random_clone"):
    define(_n, batching=vectorized(_n))
define("threefry2x32", batching=broadcasting("threefry2x32"))


def _fold_in_rule(args, dims, **params):
    """JAX's rule is `defbroadcasting`; the checker's `random_fold_in` takes operands of one
    shape (or a scalar message), so an unbatched operand is broadcast to the batch."""
    (k, m), (kd, md) = args, dims
    if kd is not None and (md is None and _ndim(m) == 0 or md == kd and _shape(m) == _shape(k)):
        return bind("random_fold_in", k, m, **params), [kd]
    k, m = bdim_at_front(k, kd), bdim_at_front(m, md)
    if _ndim(m) < _ndim(k):
        m = ops.broadcast_in_dim(m, _shape(k), tuple(range(_ndim(m))))
    if _ndim(k) < _ndim(m):
        k = ops.broadcast_in_dim(k, _shape(m), tuple(range(_ndim(k))))
    return bind("random_fold_in", k, m, **params), [0]


define("random_fold_in", batching=_fold_in_rule)
define("iota_2x32_shape", batching=_unbatched("iota_2x32_shape"))


def _random_wrap_rule(args, dims, **params):
    (x,), (d,) = args, dims
    x = moveaxis(x, d, 0)
    return bind("random_wrap", x, _out_types=_out_types([0]), **params), [0]


define("random_wrap", batching=_random_wrap_rule)
define("random_gamma", batching=leading_batch("random_gamma"))


def _rng_bit_generator_rule(args, dims, *, shape, **params):
    """JAX's `_rng_bit_generator_batching_rule`: one generator call for the whole batch from
    the first example's key; every example's new key is that call's new key at row 0."""
    (keys,), (d,) = args, dims
    keys = moveaxis(keys, d, 0)
    size = axis_size()
    kshape = _shape(keys)[1:]
    first = bind(
        "slice",
        keys,
        start_indices=(0,) * (len(kshape) + 1),
        limit_indices=(1, *kshape),
        strides=None,
    )[0]
    (key,) = bind("squeeze", first, dimensions=(0,))
    new_key, bits = bind("rng_bit_generator", key, shape=(size, *_ints(shape)), **params)
    upd = ops.broadcast_in_dim(new_key, (1, *kshape), tuple(range(1, len(kshape) + 1)))
    zero = Literal(0, ShapedArray((), "i32"))
    (new_keys,) = bind("dynamic_update_slice", keys, upd, *([zero] * (len(kshape) + 1)))
    return [new_keys, bits], [0, 0]


define("rng_bit_generator", batching=_rng_bit_generator_rule)


# ================================================================ misc (identities, sharding)

for _n in (
    "name",
    "zeros_like",
    "sharding_constraint",
    "reshard",
    "mesh_cast",
    "layout_constraint",
    "with_memory_space_constraint",
    "remove_memory_space",
    "pin",
    "unpin",
    "multiple_of",
    "max_contiguous",
    "shard_alike",
    "trace_value",
):
    define(_n, batching=vectorized(_n))
for _n in ("platform_index", "program_id", "num_programs"):
    define(_n, batching=_unbatched(_n))


def _tie_rule(args, dims, **params):
    (x, y), (xd, yd) = args, dims
    if xd != yd:
        x, y = bdim_at_front(x, xd), bdim_at_front(y, yd)
        yd = 0
    return bind("tie", x, y, **params), [yd]


define("tie", batching=_tie_rule)


def _same_dims_rule(name):
    """Each operand's batch dimension passes to the matching result (device_put,
    optimization_barrier)."""

    def rule(args, dims, **params):
        outs = bind(name, *args, _out_types=_out_types(dims), **params)
        return outs, list(dims)

    return rule


for _n in ("device_put", "optimization_barrier"):
    define(_n, batching=_same_dims_rule(_n))

COLLECTIVES = """
psum pmax pmin ppermute pshuffle all_gather all_gather_invariant all_to_all ragged_all_to_all
reduce_scatter psum_scatter psum_invariant pbroadcast pvary pcast axis_index unreduced_pmax
unreduced_pmin
""".split()


def _collective_rule(name):
    def rule(args, dims, **params):
        axis = params.get("axis_name", params.get("axes"))
        what = f" over axis_name {axis}" if axis is not None else ""
        raise JaxprError(
            f"vmap: '{name}' is a collective{what}; batching collectives (axis_name) is not "
            "supported yet",
            B.current().loc,
        )

    return rule


for _n in COLLECTIVES:
    define(_n, batching=_collective_rule(_n))


# ================================================================ calls


def _body_key(name, params) -> str:
    from ..record import prim

    k = prim(name).call_body
    if k in params:
        return k
    for alt in ("jaxpr", "call_jaxpr", "fun_jaxpr"):
        if alt in params and isinstance(params[alt], Jaxpr):
            return alt
    raise JaxprError(f"vmap: '{name}': no body jaxpr in its parameters", B.current().loc)


def _emit_call(name, args, params, key, body: Jaxpr):
    return B.current().emit(name, args, dict(params, **{key: body}), [v.type for v in body.outvars])


def _call_rule(name):
    """JAX's `_pjit_batcher` / `_eval_jaxpr_batch` / custom_jvp/vjp calls: the body is
    batched with the operands' batch dimensions where they are, and the results keep theirs."""

    def rule(args, dims, **params):
        key = _body_key(name, params)
        body, out_dims = batch_jaxpr2(params[key], dims)
        return _emit_call(name, args, params, key, body), out_dims

    return rule


for _n in (
    "jit",
    "pjit",
    "closed_call",
    "core_call",
    "named_call",
    "call",
    "xla_call",
    "eval_jaxpr",
    "compute_on",
    "compute_on2",
    "xla_metadata_call",
    "custom_jvp_call",
    "custom_jvp_call_jaxpr",
    "custom_vjp_call",
    "custom_vjp_call_jaxpr",
):
    define(_n, batching=_call_rule(_n))


def _remat_rule(name):
    """JAX's `remat_vmap`: batched results at axis 0."""

    def rule(args, dims, **params):
        key = _body_key(name, params)
        inner = params[key]
        body, out_dims = batch_jaxpr_axes(inner, dims, [ZERO_IF_MAPPED] * len(inner.outvars))
        return _emit_call(name, args, params, key, body), out_dims

    return rule


for _n in ("remat2", "checkpoint", "remat", "remat_call"):
    define(_n, batching=_remat_rule(_n))


def _debug_rule(args, dims, **params):
    # JAX's `debug_batching_rule` runs the callback once per example
    return loop_fallback(args, dims)


for _n in ("debug_print", "debug_callback"):
    define(_n, batching=_debug_rule)


# ================================================================ cond


def _bcast_select_n(pred, *cases):
    if _ndim(pred) != _ndim(cases[0]):
        pred = ops.broadcast_in_dim(pred, _shape(cases[0]), tuple(range(_ndim(pred))))
    return bind("select_n", pred, *cases)[0]


def _cond_rule(args, dims, *, branches, **params):
    """JAX's `_cond_batching_rule`.  A batched index: every branch runs on every example and
    `select_n` picks each example's results (the operands given to the branches not taken pass
    through `stop_gradient`, as JAX does for reverse mode); otherwise one cond of the batched
    branches."""
    branches = list(branches) if isinstance(branches, (tuple, list)) else [branches]
    index, *xs = args
    idd, *xds = dims
    size = axis_size()
    if idd is not None:
        index, *xs = (bdim_at_front(x, d, size) for x, d in zip(args, dims))
        n_in, n_out = len(branches[0].invars), len(branches[0].outvars)
        batched = [batch_jaxpr(br, [True] * n_in, [True] * n_out)[0] for br in branches]
        branch_outs = []
        for i, br in enumerate(batched):
            (pred,) = bind("eq", index, ops.lit(i, index))
            sel = [_bcast_select_n(pred, ops.stop_gradient(x), x) for x in xs]
            branch_outs.append(inline_jaxpr(br, sel))
        outs = [_bcast_select_n(index, *o) for o in zip(*branch_outs)]
        return outs, [0] * len(outs)
    bat = [d is not None for d in xds]
    xs = [moveaxis(x, d, 0) if d is not None else x for x, d in zip(xs, xds)]
    out_bat = [any(z) for z in zip(*(batch_jaxpr(br, bat, False)[1] for br in branches))]
    new = [batch_jaxpr(br, bat, out_bat)[0] for br in branches]
    p = dict(params, branches=tuple(new))
    outs = B.current().emit("cond", [index, *xs], p, [v.type for v in new[0].outvars])
    return outs, [0 if b else None for b in out_bat]


define("cond", batching=_cond_rule)


# ================================================================ scan


def _scan_counts(params, n_in: int):
    """(consts, carries) of a scan in any encoding, including 0.12's `Pytree(...)` ft_in."""
    from ..text.style import scan_counts

    counts = scan_counts(params)
    if counts is not None:
        return counts
    ft = params.get("ft_in")
    if isinstance(ft, Record) and ft.cls == "Pytree":
        tree = str(ft.get("tree", ""))
        inner = tree[tree.find("(") + 1 : tree.rfind(")")].strip()
        if inner.startswith("(") and inner.endswith(")"):
            groups, depth, cur = [], 0, ""
            for ch in inner[1:-1]:
                depth += ch in "([{"
                depth -= ch in ")]}"
                if ch == "," and depth == 0:
                    groups.append(cur)
                    cur = ""
                else:
                    cur += ch
            groups.append(cur)
            sizes = [g.count("*") for g in groups if g.strip()]
            if len(sizes) == 3 and sum(sizes) == n_in:
                return sizes[0], sizes[1]
    return None


def _scan_rule(args, dims, **params):
    """JAX's `_scan_batching_rule`: constants keep their batch axes, carries are batched at
    axis 0 (to a fixed point of which carries the body makes batched), scanned inputs and
    outputs at axis 1 outside (0 inside the body)."""
    body: Jaxpr = params["jaxpr"]
    counts = _scan_counts(params, len(args))
    if counts is None:
        raise JaxprError(
            "scan: cannot tell its constants, carries and scanned inputs apart", B.current().loc
        )
    nc, nk = counts
    ny = len(body.outvars) - nk
    cd, kd, xd = dims[:nc], dims[nc : nc + nk], dims[nc + nk :]
    consts, init, xs = args[:nc], args[nc : nc + nk], args[nc + nk :]
    xs_axes = [None if d is None else 0 for d in xd]
    carry_b = [d is not None for d in kd]
    for _ in range(nk + 1):
        in_axes = list(cd) + [0 if b else None for b in carry_b] + xs_axes
        dest = [0 if b else ZERO_IF_MAPPED for b in carry_b] + [ZERO_IF_MAPPED] * ny
        jb, out_dims = batch_jaxpr_axes(body, in_axes, dest)
        carry_out = [d is not None for d in out_dims[:nk]]
        if carry_out == carry_b:
            break
        carry_b = [a or b for a, b in zip(carry_b, carry_out)]
    size = axis_size()
    new_init = [
        broadcast(x, size, 0) if b and d is None else moveaxis(x, d, 0) if b else x
        for x, d, b in zip(init, kd, carry_b)
    ]
    new_xs = [x if d is None or d == 1 else moveaxis(x, d, 1) for x, d in zip(xs, xd)]
    length = params["length"]
    out_types = [v.type for v in jb.outvars[:nk]] + [
        v.type.update(shape=(int(length), *v.type.shape)) for v in jb.outvars[nk:]
    ]
    outs = B.current().emit(
        "scan", [*consts, *new_init, *new_xs], dict(params, jaxpr=jb), out_types
    )
    ys_d = [None if d is None else 1 for d in out_dims[nk:]]
    return outs, [0 if b else None for b in carry_b] + ys_d


define("scan", batching=_scan_rule)


# ================================================================ while


def _while_rule(args, dims, *, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts, **params):
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
        _, out_b = batch_jaxpr(body_jaxpr, bc_bat + carry_b, carry_b)
        if out_b == carry_b:
            break
        carry_b = [a or b for a, b in zip(carry_b, out_b)]
    _, (pred_b,) = batch_jaxpr(cond_jaxpr, cb_bat + carry_b, False)
    if pred_b:
        carry_dims = [0] * nk
        body_b, _ = batch_jaxpr_axes(body_jaxpr, list(bcd) + carry_dims, carry_dims)
        cond_b, _ = batch_jaxpr_axes(cond_jaxpr, list(ccd) + carry_dims, [0])
    else:
        rank = cond_jaxpr.outvars[0].type.ndim
        carry_dims = [rank if b else None for b in carry_b]
        body_b, _ = batch_jaxpr_axes(body_jaxpr, list(bcd) + carry_dims, carry_dims)
        cond_b, _ = batch_jaxpr_axes(cond_jaxpr, list(ccd) + carry_dims, [None])
    size = axis_size()
    new_init = []
    for x, old, new in zip(init, kd, carry_dims):
        if old is None and new is not None:
            new_init.append(broadcast(x, size, new))
        elif old is None:
            new_init.append(x)
        else:
            new_init.append(moveaxis(x, old, new))
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


define("while", batching=_while_rule)

_ = (INFER, np)
