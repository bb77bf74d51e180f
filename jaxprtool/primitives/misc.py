"""Collectives, sharding/placement annotations, refs and other small primitives."""

from __future__ import annotations

from ..core import RefType, ShapedArray
from . import ShapeError, shape_rule
from .util import arr, canon_axis, dim_floordiv, dim_mul, int_param, nargs


@shape_rule("psum", "pmax", "pmin", "pmean", "psum_invariant", "pvary", "pbroadcast", "ppermute",
            "device_put", "unreduced_psum", "preduced", "reduced_vary_cast", "reduced_vary_cast_p",
            "vary_unreduced_cast", "vary_unreduced_cast_p", "psum2", "all_reduce")
def _same_types(in_types, params, out_hint):
    return [_strip_vma(t) for t in in_types]


def _strip_vma(t):
    return t


@shape_rule("sharding_constraint", "reshard", "mesh_cast", "layout_constraint", "name", "shard_alike",
            "zeros_like", "with_memory_space_constraint", "tie", "pin", "unpin", "trace_value",
            "remove_memory_space", "multiple_of", "max_contiguous", "inspect_sharding_p")
def _identity(in_types, params, out_hint):
    if len(in_types) != 1 and not out_hint:
        return list(in_types)
    return list(in_types[:1]) if len(in_types) == 1 else list(in_types)


@shape_rule("axis_index", "platform_index", "program_id", "num_programs")
def _i32_scalar(in_types, params, out_hint):
    return [ShapedArray((), "i32")]


@shape_rule("all_gather")
def _all_gather(in_types, params, out_hint):
    nargs(in_types, 1, "all_gather")
    x = arr(in_types[0], "all_gather", 0)
    n = int_param(params, "axis_size")
    dim = int_param(params, "all_gather_dimension", 0)
    shape = list(x.shape)
    if params.get("tiled"):
        dim = canon_axis(dim, x.ndim, "all_gather_dimension")
        shape[dim] = dim_mul(shape[dim], n)
    else:
        shape.insert(dim, n)
    return [x.update(shape=shape, weak_type=False)]


@shape_rule("reduce_scatter")
def _reduce_scatter(in_types, params, out_hint):
    nargs(in_types, 1, "reduce_scatter")
    x = arr(in_types[0], "reduce_scatter", 0)
    n = int_param(params, "axis_size")
    dim = canon_axis(int_param(params, "scatter_dimension", 0), x.ndim, "scatter_dimension")
    shape = list(x.shape)
    if params.get("tiled"):
        if isinstance(shape[dim], int) and shape[dim] % n:
            raise ShapeError(f"reduce_scatter: dimension {dim} of {x} is not divisible by axis_size {n}")
        shape[dim] = dim_floordiv(shape[dim], n)
    else:
        if isinstance(shape[dim], int) and shape[dim] != n:
            raise ShapeError(f"reduce_scatter: dimension {dim} of {x} must equal axis_size {n}")
        del shape[dim]
    return [x.update(shape=shape, weak_type=False)]


@shape_rule("all_to_all")
def _all_to_all(in_types, params, out_hint):
    nargs(in_types, 1, "all_to_all")
    x = arr(in_types[0], "all_to_all", 0)
    split = int_param(params, "split_axis")
    concat = int_param(params, "concat_axis")
    if split == concat:
        return [x.update(weak_type=False)]
    groups = params.get("axis_index_groups")
    if groups:
        n = len(groups[0])
    elif out_hint and isinstance(out_hint[0], ShapedArray) and isinstance(x.shape[split], int) \
            and isinstance(out_hint[0].shape[split], int) and out_hint[0].shape[split]:
        n = x.shape[split] // out_hint[0].shape[split]  # the axis size is not a parameter
    else:
        raise ShapeError("all_to_all: the mesh axis size is not known")
    shape = list(x.shape)
    shape[split] = dim_floordiv(shape[split], n)
    shape[concat] = dim_mul(shape[concat], n)
    return [x.update(shape=shape, weak_type=False)]


@shape_rule("new_ref")
def _new_ref(in_types, params, out_hint):
    nargs(in_types, 1, "new_ref")
    x = arr(in_types[0], "new_ref", 0)
    if out_hint and isinstance(out_hint[0], RefType):
        return [out_hint[0]] if out_hint[0].inner == x else [RefType(x, out_hint[0].memory_space)]
    return [RefType(x)]


@shape_rule("freeze")
def _freeze(in_types, params, out_hint):
    nargs(in_types, 1, "freeze")
    r = in_types[0]
    if not isinstance(r, RefType):
        raise ShapeError(f"freeze expects a Ref operand, got {r}")
    return [r.inner]
