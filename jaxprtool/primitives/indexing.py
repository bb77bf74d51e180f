"""gather and the scatter family."""

from __future__ import annotations

from . import ShapeError, shape_rule
from .util import (
    arr,
    field,
    fill_sym_from_hint,
    fmt_shape,
    ints,
    is_int_dtype,
    nargs,
    need,
    static_ints,
)


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
