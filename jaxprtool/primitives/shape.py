"""Shape-manipulating primitives: broadcast, reshape, transpose, slice, pad, concatenate, ..."""

from __future__ import annotations

from ..ad.registry import defjvp_zero
from ..core import ShapedArray
from ..passes import simplify as S
from ..record import define
from ..text.param_rules import sorted_params
from . import ShapeError, shape_rule
from .util import (
    arr,
    canon_axis,
    dilate_dim,
    dim_add,
    dim_eq,
    dim_mul,
    dim_param,
    dims_eq,
    dtype_param,
    fill_sym_from_hint,
    fmt_shape,
    int_param,
    ints,
    is_int_dtype,
    min_args,
    mk,
    nargs,
    need,
    one_arr,
    pairs,
    prod,
    same_dtypes,
    static_ints,
    strided_dim,
)


def _hint_shape(out_hint, prim):
    if out_hint and isinstance(out_hint[0], ShapedArray):
        return out_hint[0].shape
    raise ShapeError(
        f"{prim}: the result shape is not given (no 'shape' parameter and no declared result type)"
    )


@shape_rule("broadcast_in_dim")
def _broadcast_in_dim(in_types, params, out_hint):
    min_args(in_types, 1, "broadcast_in_dim")
    x = arr(in_types[0], "broadcast_in_dim", 0)
    bdims = static_ints(params.get("broadcast_dimensions", ()))
    if params.get("shape") is not None:
        shape = ints(params["shape"])
    else:
        shape = tuple(_hint_shape(out_hint, "broadcast_in_dim"))
    if len(bdims) != x.ndim:
        raise ShapeError(
            f"broadcast_in_dim: broadcast_dimensions {fmt_shape(bdims)} must have one entry per operand "
            f"dimension (operand {x})"
        )
    for i, d in enumerate(bdims):
        if not 0 <= d < len(shape):
            raise ShapeError(
                f"broadcast_in_dim: broadcast dimension {d} is out of range for result rank {len(shape)}"
            )
        od = x.shape[i]
        if isinstance(od, int) and isinstance(shape[d], int) and od != 1 and od != shape[d]:
            raise ShapeError(
                f"broadcast_in_dim: operand dimension {i} of size {od} cannot be broadcast "
                f"to result dimension {d} of size {shape[d]}"
            )
    if list(bdims) != sorted(set(bdims)):
        raise ShapeError(
            f"broadcast_in_dim: broadcast_dimensions {fmt_shape(bdims)} must be strictly increasing"
        )
    return [x.update(shape=shape)]


@shape_rule("broadcast_to")
def _broadcast_to(in_types, params, out_hint):
    x = one_arr(in_types, "broadcast_to")
    shape = ints(need(params, "shape"))
    return [x.update(shape=shape)]


@shape_rule("reshape")
def _reshape(in_types, params, out_hint):
    min_args(in_types, 1, "reshape")
    x = arr(in_types[0], "reshape", 0)
    new = ints(need(params, "new_sizes"))
    if x.is_static and all(isinstance(d, int) for d in new):
        if prod(x.shape) != prod(new):
            raise ShapeError(f"reshape: cannot reshape {x} to {fmt_shape(new)} (sizes differ)")
    dims = params.get("dimensions")
    if dims is not None:
        dims = static_ints(dims)
        if sorted(dims) != list(range(x.ndim)):
            raise ShapeError(
                f"reshape: dimensions {fmt_shape(dims)} must be a permutation of the operand axes"
            )
    return [fill_sym_from_hint(x.update(shape=new), out_hint)]


@shape_rule("squeeze")
def _squeeze(in_types, params, out_hint):
    x = one_arr(in_types, "squeeze")
    dims = [
        canon_axis(d, x.ndim, "squeeze dimension") for d in static_ints(need(params, "dimensions"))
    ]
    if len(set(dims)) != len(dims):
        raise ShapeError(f"squeeze: dimensions are not unique: {tuple(dims)}")
    for d in dims:
        if isinstance(x.shape[d], int) and x.shape[d] != 1:
            raise ShapeError(f"squeeze: dimension {d} of {x} has size {x.shape[d]}, not 1")
    return [x.update(shape=tuple(s for i, s in enumerate(x.shape) if i not in dims))]


@shape_rule("expand_dims")
def _expand_dims(in_types, params, out_hint):
    x = one_arr(in_types, "expand_dims")
    dims = static_ints(need(params, "dimensions"))
    n = x.ndim + len(dims)
    dims = sorted(canon_axis(d, n, "expand_dims dimension") for d in dims)
    shape = list(x.shape)
    for d in dims:
        shape.insert(d, 1)
    return [x.update(shape=shape)]


@shape_rule("transpose")
def _transpose(in_types, params, out_hint):
    x = one_arr(in_types, "transpose")
    perm = static_ints(need(params, "permutation"))
    if sorted(perm) != list(range(x.ndim)):
        raise ShapeError(
            f"transpose: permutation {fmt_shape(perm)} is not a permutation of the axes of {x}"
        )
    return [x.update(shape=tuple(x.shape[p] for p in perm))]


@shape_rule("concatenate")
def _concatenate(in_types, params, out_hint):
    min_args(in_types, 1, "concatenate")
    ts = [arr(t, "concatenate", i) for i, t in enumerate(in_types)]
    same_dtypes("concatenate", ts)
    dim = int_param(params, "dimension")
    t0 = ts[0]
    if not 0 <= dim < t0.ndim:
        raise ShapeError(f"concatenate: dimension {dim} is out of range for rank {t0.ndim}")
    total = 0
    for t in ts:
        if t.ndim != t0.ndim:
            raise ShapeError(f"concatenate: operands must have the same rank, got {t0} and {t}")
        for i, (a, b) in enumerate(zip(t.shape, t0.shape)):
            if i != dim and not dim_eq(a, b):
                raise ShapeError(
                    f"concatenate: operands must agree except in dimension {dim}, got {t0} and {t}"
                )
        total = dim_add(total, t.shape[dim])
    shape = list(t0.shape)
    shape[dim] = total
    return [fill_sym_from_hint(mk(shape, t0.dtype, all(t.weak_type for t in ts), ts), out_hint)]


@shape_rule("pad")
def _pad(in_types, params, out_hint):
    nargs(in_types, 2, "pad")
    x, pv = (arr(t, "pad", i) for i, t in enumerate(in_types))
    if pv.ndim != 0:
        raise ShapeError(f"pad: the padding value must be a scalar, got {pv}")
    if pv.dtype != x.dtype:
        raise ShapeError(f"pad: the padding value has dtype {pv.dtype}, operand has {x.dtype}")
    cfg = pairs(need(params, "padding_config"), "padding_config")
    if len(cfg) != x.ndim:
        raise ShapeError(f"pad: padding_config has {len(cfg)} entries for operand rank {x.ndim}")
    shape = []
    if any(len(c) != 3 for c in cfg):
        raise ShapeError("pad: each padding_config entry must be (low, high, interior)")
    for (lo, hi, interior), d in zip(cfg, x.shape):
        if isinstance(interior, int) and interior < 0:
            raise ShapeError(f"pad: interior padding must be nonnegative, got {interior}")
        r = dim_add(dim_add(lo, hi), dilate_dim(d, interior + 1))
        if isinstance(r, int) and r < 0:
            raise ShapeError(f"pad: result dimension is negative ({r})")
        shape.append(r)
    return [fill_sym_from_hint(x.update(shape=shape), out_hint)]


@shape_rule("slice")
def _slice(in_types, params, out_hint):
    x = one_arr(in_types, "slice")
    start = ints(need(params, "start_indices"))
    limit = ints(need(params, "limit_indices"))
    strides = static_ints(params.get("strides")) or (1,) * x.ndim
    if not (len(start) == len(limit) == len(strides) == x.ndim):
        raise ShapeError(
            f"slice: start_indices, limit_indices and strides must have one entry per axis of {x}"
        )
    if any(isinstance(st, int) and st <= 0 for st in strides):
        raise ShapeError(f"slice: strides must be positive, got {fmt_shape(strides)}")
    shape = []
    for d, s, lim, st in zip(x.shape, start, limit, strides):
        if isinstance(d, int) and isinstance(lim, int) and lim > d:
            raise ShapeError(f"slice: limit index {lim} exceeds dimension size {d} of {x}")
        if isinstance(s, int) and isinstance(lim, int):
            if s < 0 or lim < s:
                raise ShapeError(f"slice: invalid slice [{s}:{lim}] of {x}")
            shape.append(0 if lim == s else (lim - s - 1) // st + 1)
        else:
            shape.append(strided_dim(dim_add(lim, f"-({s})") if s else lim, 1, st))
    return [fill_sym_from_hint(x.update(shape=shape), out_hint)]


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
    for d, s in zip(x.shape, sizes):
        if isinstance(d, int) and isinstance(s, int) and (s > d or s < 0):
            raise ShapeError(f"dynamic_slice: slice_sizes {fmt_shape(sizes)} do not fit in {x}")
    return [fill_sym_from_hint(x.update(shape=sizes), out_hint)]


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
    for d, s in zip(x.shape, u.shape):
        if isinstance(d, int) and isinstance(s, int) and s > d:
            raise ShapeError(f"dynamic_update_slice: update {u} does not fit in operand {x}")
    return [x]


@shape_rule("rev")
def _rev(in_types, params, out_hint):
    x = one_arr(in_types, "rev")
    dims = static_ints(need(params, "dimensions"))
    for d in dims:
        if not 0 <= d < x.ndim:
            raise ShapeError(f"rev: dimension {d} is out of range for {x}")
    return [x]


@shape_rule("iota")
def _iota(in_types, params, out_hint):
    nargs(in_types, (0,) + tuple(range(1, 8)), "iota")
    d = dtype_param(need(params, "dtype"))
    shape = ints(need(params, "shape"))
    dim = int_param(params, "dimension", 0)
    if shape and not 0 <= dim < len(shape):
        raise ShapeError(f"iota: dimension {dim} is out of range for shape {fmt_shape(shape)}")
    return [fill_sym_from_hint(ShapedArray(shape, d), out_hint)]


@shape_rule("split")
def _split(in_types, params, out_hint):
    x = one_arr(in_types, "split")
    axis = canon_axis(int_param(params, "axis"), x.ndim, "split axis")
    sizes = ints(need(params, "sizes"))
    if all(isinstance(s, int) for s in sizes) and isinstance(x.shape[axis], int):
        if sum(sizes) != x.shape[axis]:
            raise ShapeError(
                f"split: sizes {fmt_shape(sizes)} do not sum to dimension {axis} of {x}"
            )
    outs = []
    for s in sizes:
        shape = list(x.shape)
        shape[axis] = s
        outs.append(x.update(shape=shape))
    return outs


@shape_rule("stack")
def _stack(in_types, params, out_hint):
    min_args(in_types, 1, "stack")
    ts = [arr(t, "stack", i) for i, t in enumerate(in_types)]
    same_dtypes("stack", ts)
    for t in ts[1:]:
        if not dims_eq(t.shape, ts[0].shape):
            raise ShapeError(f"stack: operands must have the same shape, got {ts[0]} and {t}")
    axis = int_param(params, "axis", 0)
    shape = list(ts[0].shape)
    shape.insert(canon_axis(axis, len(shape) + 1, "stack axis"), len(ts))
    return [mk(shape, ts[0].dtype, all(t.weak_type for t in ts), ts)]


@shape_rule("unstack")
def _unstack(in_types, params, out_hint):
    x = one_arr(in_types, "unstack")
    if x.ndim == 0:
        raise ShapeError("unstack requires an operand of rank > 0")
    axis = canon_axis(int_param(params, "axis", 0), x.ndim, "unstack axis")
    n = x.shape[axis]
    if not isinstance(n, int):
        if out_hint is None:
            raise ShapeError(f"unstack: cannot unstack along symbolic dimension {n}")
        n = len(out_hint)
    shape = x.shape[:axis] + x.shape[axis + 1 :]
    return [x.update(shape=shape)] * n


@shape_rule("tile")
def _tile(in_types, params, out_hint):
    x = one_arr(in_types, "tile")
    reps = ints(need(params, "reps"))
    if len(reps) != x.ndim:
        raise ShapeError(f"tile: reps {fmt_shape(reps)} must have one entry per axis of {x}")
    return [
        fill_sym_from_hint(x.update(shape=[dim_mul(d, r) for d, r in zip(x.shape, reps)]), out_hint)
    ]


@shape_rule("dim_as_value")
def _dim_as_value(in_types, params, out_hint):
    return [ShapedArray((), "i64" if out_hint and out_hint[0].dtype == "i64" else "i32")]


__all__ = ["dim_param"]


# ---------------------------------------------------------------- properties

for _n in ("split", "unstack"):
    define(_n, multiple_results=True)


# ---------------------------------------------------------------- printing


def _print_broadcast_in_dim(e, style):
    if style.broadcast_shape_param:
        return sorted_params(e.params)
    d = dict(e.params)
    d.pop("shape", None)
    d.pop("sharding", None)
    if "broadcast_dimensions" in d and not d["broadcast_dimensions"]:
        del d["broadcast_dimensions"]
    return sorted(d.items())


define("broadcast_in_dim", print_params=_print_broadcast_in_dim)


def _restyle_broadcast_in_dim(prim, params, e, style):
    if style.broadcast_shape_param:
        params.setdefault("broadcast_dimensions", ())
        params.setdefault("shape", tuple(e.outputs[0].type.shape))
        if tuple(style.version) >= (0, 5):
            params.setdefault("sharding", None)
        else:
            params.pop("sharding", None)
    return prim, params


def _restyle_reshape(prim, params, e, style):
    if tuple(style.version) < (0, 5) and params.get("sharding", 0) is None:
        del params["sharding"]
    return prim, params


define("broadcast_in_dim", restyle=_restyle_broadcast_in_dim)
define("reshape", restyle=_restyle_reshape)


# ---------------------------------------------------------------- simplification


def _simplify_broadcast_in_dim(e, ctx):
    x = e.inputs[0] if len(e.inputs) == 1 else None
    if x is None or e.params.get("sharding") is not None or not isinstance(x.type, ShapedArray):
        return None
    return x if S.identity_perm(e.params.get("broadcast_dimensions", ()), x.type.ndim) else None


def _broadcast_fills_with(e):
    return e.inputs[0] if e.params.get("sharding") is None and len(e.inputs) == 1 else None


def _simplify_reshape(e, ctx):
    if len(e.inputs) != 1:
        return None
    if e.params.get("dimensions") is not None or e.params.get("sharding") is not None:
        return None
    return e.inputs[0]


def _simplify_transpose(e, ctx):
    x = e.inputs[0] if len(e.inputs) == 1 else None
    if x is not None and isinstance(x.type, ShapedArray):
        return x if S.identity_perm(e.params.get("permutation"), x.type.ndim) else None
    return None


def _simplify_squeeze(e, ctx):
    if len(e.inputs) == 1 and S.identity_perm(e.params.get("dimensions"), 0):
        return e.inputs[0]
    return None


define("broadcast_in_dim", simplify=_simplify_broadcast_in_dim, fills_with=_broadcast_fills_with)
define("reshape", simplify=_simplify_reshape)
define("transpose", simplify=_simplify_transpose)
define("squeeze", simplify=_simplify_squeeze)
defjvp_zero("dim_as_value")
