"""The collectives family: primitives over the named axes of a device mesh (shard_map, pmap).

psum and its kin reduce over mesh axes, all_gather / reduce_scatter / all_to_all / ppermute
move data between devices, axis_index tells a device its position, and pvary / pbroadcast and
the `*_cast` primitives only change which axes a value varies over (its `vma` type tag).  The
shape rules keep the type's vma up to date.  The back end runs on one device, so it refuses
the collectives that need several (supply them with a plugin).
"""

from __future__ import annotations

from ..ad.registry import defidentity, defjvp_zero
from ..core import ShapedArray
from ..primitives import ShapeError, shape_rule
from ..primitives.util import (
    canon_axis,
    dim_floordiv,
    dim_mul,
    input_elements,
    int_param,
    one_arr,
    vma_format,
    vma_parts,
)
from ..record import define

_MULTI_DEVICE = "is a multi-device primitive; running on several devices is not supported"


def _no_flops(e) -> int:
    return 0  # data movement


def _axes_param(params) -> list[str]:
    v = params.get("axes", params.get("axis_name", ()))
    if isinstance(v, (tuple, list, frozenset)):
        return [str(a) for a in v]
    return [str(v)]


def _with_vma(t, fn):
    if not isinstance(t, ShapedArray):
        return t
    parts = vma_parts(t.vma)
    parts["V"] = fn(parts.get("V", []))
    return ShapedArray(t.shape, t.dtype, t.weak_type, t.memory_space, vma_format(parts))


# ---------------------------------------------------------------- pvary, and the type-keeping ones
# (pbroadcast, ppermute, the vma casts, psum2, all_reduce)


@shape_rule("pvary")
def _pvary(in_types, params, out_hint):
    axes = _axes_param(params)
    return [_with_vma(t, lambda v: v + [a for a in axes if a not in v]) for t in in_types]


@shape_rule(
    "pbroadcast",
    "ppermute",
    "unreduced_psum",
    "preduced",
    "reduced_vary_cast",
    "reduced_vary_cast_p",
    "vary_unreduced_cast",
    "vary_unreduced_cast_p",
    "psum2",
    "all_reduce",
)
def _same_types(in_types, params, out_hint):
    return [_strip_vma(t) for t in in_types]


def _strip_vma(t):
    return t


for _n in ("pvary", "pbroadcast"):
    defidentity(_n)
    define(_n, refusal=_MULTI_DEVICE)


# ---------------------------------------------------------------- psum, pmax, pmin, pmean


@shape_rule("psum", "pmax", "pmin", "pmean", "psum_invariant")
def _psum(in_types, params, out_hint):
    axes = _axes_param(params)
    return [_with_vma(t, lambda v: [a for a in v if a not in axes]) for t in in_types]


for _n in ("psum", "pmax", "pmin", "psum_invariant"):
    define(_n, refusal=_MULTI_DEVICE)
define("psum", flops=_no_flops)


# ---------------------------------------------------------------- data movement between devices


@shape_rule("all_gather")
def _all_gather(in_types, params, out_hint):
    x = one_arr(in_types, "all_gather")
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
    x = one_arr(in_types, "reduce_scatter")
    n = int_param(params, "axis_size")
    dim = canon_axis(int_param(params, "scatter_dimension", 0), x.ndim, "scatter_dimension")
    shape = list(x.shape)
    if params.get("tiled"):
        if isinstance(shape[dim], int) and shape[dim] % n:
            raise ShapeError(
                f"reduce_scatter: dimension {dim} of {x} is not divisible by axis_size {n}"
            )
        shape[dim] = dim_floordiv(shape[dim], n)
    else:
        if isinstance(shape[dim], int) and shape[dim] != n:
            raise ShapeError(f"reduce_scatter: dimension {dim} of {x} must equal axis_size {n}")
        del shape[dim]
    return [x.update(shape=shape, weak_type=False)]


define("reduce_scatter", flops=input_elements)  # a reduction: one FLOP per operand element


@shape_rule("all_to_all")
def _all_to_all(in_types, params, out_hint):
    x = one_arr(in_types, "all_to_all")
    split = int_param(params, "split_axis")
    concat = int_param(params, "concat_axis")
    if split == concat:
        return [x.update(weak_type=False)]
    groups = params.get("axis_index_groups")
    if groups:
        n = len(groups[0])
    elif (
        out_hint
        and isinstance(out_hint[0], ShapedArray)
        and isinstance(x.shape[split], int)
        and isinstance(out_hint[0].shape[split], int)
        and out_hint[0].shape[split]
    ):
        n = x.shape[split] // out_hint[0].shape[split]  # the axis size is not a parameter
    else:
        raise ShapeError("all_to_all: the mesh axis size is not known")
    shape = list(x.shape)
    shape[split] = dim_floordiv(shape[split], n)
    shape[concat] = dim_mul(shape[concat], n)
    return [x.update(shape=shape, weak_type=False)]


for _n in ("ppermute", "all_gather", "all_to_all", "reduce_scatter"):
    define(_n, refusal=_MULTI_DEVICE)
for _n in ("ppermute", "all_gather", "all_to_all"):
    define(_n, flops=_no_flops)


# ---------------------------------------------------------------- axis_index


@shape_rule("axis_index")
def _axis_index(in_types, params, out_hint):
    return [ShapedArray((), "i32")]


defjvp_zero("axis_index")
define("axis_index", refusal=_MULTI_DEVICE)


# ---------------------------------------------------------------- collectives without a shape rule
# (the tool cannot check or differentiate them; `run` explains why it does not run them)

for _n in (
    "pshuffle",
    "all_gather_invariant",
    "ragged_all_to_all",
    "psum_scatter",
    "pcast",
    "unreduced_pmax",
    "unreduced_pmin",
):
    define(_n, family="collectives", refusal=_MULTI_DEVICE)
