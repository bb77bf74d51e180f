"""Reductions, cumulative ops, windowed reductions, sort and top_k."""

from __future__ import annotations

from ..core import Jaxpr, ShapedArray
from ..passes import simplify as S
from ..record import define
from . import ShapeError, shape_rule
from .util import (
    arr,
    canon_axis,
    dilate_dim,
    dim_add,
    dims_eq,
    dtype_param,
    fill_sym_from_hint,
    fmt_shape,
    int_param,
    is_complex_dtype,
    is_int_dtype,
    min_args,
    mk,
    nargs,
    need,
    one_arr,
    pairs,
    static_ints,
    strided_dim,
)


def _reduce_axes(prim, x, axes):
    for a in axes:
        if not 0 <= a < x.ndim:
            raise ShapeError(f"{prim}: axis {a} is out of range for {x}")
    if len(set(axes)) != len(axes):
        raise ShapeError(f"{prim}: duplicate axes {fmt_shape(axes)}")
    return tuple(d for i, d in enumerate(x.shape) if i not in axes)


@shape_rule(
    "reduce_sum", "reduce_max", "reduce_min", "reduce_prod", "reduce_and", "reduce_or", "reduce_xor"
)
def _reduce_monoid(in_types, params, out_hint):
    x = one_arr(in_types, "reduce")
    shape = _reduce_axes("reduce", x, static_ints(need(params, "axes")))
    return [x.update(shape=shape)]


@shape_rule("argmax", "argmin")
def _argminmax(in_types, params, out_hint):
    x = one_arr(in_types, "argmax")
    axes = static_ints(need(params, "axes"))
    if len(axes) != 1:
        raise ShapeError(f"argmax/argmin expects exactly one axis, got {fmt_shape(axes)}")
    d = dtype_param(need(params, "index_dtype"))
    if not is_int_dtype(d):
        raise ShapeError(f"argmax/argmin: index_dtype must be an integer type, got {d}")
    shape = _reduce_axes("argmax", x, axes)
    return [x.update(shape=shape, dtype=d, weak_type=False)]


@shape_rule("cumsum", "cumprod", "cummax", "cummin", "cumlogsumexp")
def _cumulative(in_types, params, out_hint):
    x = one_arr(in_types, "cumulative reduction")
    axis = int_param(params, "axis", 0)
    if x.ndim and not 0 <= axis < x.ndim:
        raise ShapeError(f"cumulative reduction: axis {axis} is out of range for {x}")
    return [x]


def _window_shape(prim, x: ShapedArray, params):
    wd = static_ints(need(params, "window_dimensions"))
    ws = static_ints(need(params, "window_strides"))
    pad = pairs(need(params, "padding"), "padding")
    bd = static_ints(params.get("base_dilation")) or (1,) * x.ndim
    wdl = static_ints(params.get("window_dilation")) or (1,) * x.ndim
    if not (len(wd) == len(ws) == len(pad) == len(bd) == len(wdl) == x.ndim):
        raise ShapeError(
            f"{prim}: window_dimensions {fmt_shape(wd)}, strides, padding and dilations must have one "
            f"entry per axis of {x}"
        )
    out = []
    for d, w, s, (lo, hi), b, wdi in zip(x.shape, wd, ws, pad, bd, wdl):
        padded = dim_add(dim_add(dilate_dim(d, b), lo), hi)
        out.append(strided_dim(padded, dilate_dim(w, wdi), s))
    return tuple(out)


@shape_rule("reduce_window_sum", "reduce_window_max", "reduce_window_min")
def _reduce_window_monoid(in_types, params, out_hint):
    x = one_arr(in_types, "reduce_window")
    return [fill_sym_from_hint(x.update(shape=_window_shape("reduce_window", x, params)), out_hint)]


@shape_rule("reduce_window")
def _reduce_window(in_types, params, out_hint):
    if len(in_types) % 2:
        raise ShapeError(
            f"reduce_window expects operands and init values in equal numbers, got {len(in_types)}"
        )
    n = len(in_types) // 2
    ts = [arr(t, "reduce_window", i) for i, t in enumerate(in_types)]
    ops, inits = ts[:n], ts[n:]
    for o, iv in zip(ops, inits):
        if o.dtype != iv.dtype:
            raise ShapeError(
                f"reduce_window: operand dtype {o.dtype} differs from init value dtype {iv.dtype}"
            )
        if iv.ndim:
            raise ShapeError(f"reduce_window: init values must be scalars, got {iv}")
    _check_reducer(
        "reduce_window", params.get("jaxpr"), inits, extra=len(params.get("consts") or ())
    )
    return [
        fill_sym_from_hint(o.update(shape=_window_shape("reduce_window", o, params)), out_hint, i)
        for i, o in enumerate(ops)
    ]


def _check_reducer(prim, j, inits, extra=0):
    if not isinstance(j, Jaxpr):
        return
    n = len(inits)
    if len(j.invars) != 2 * n + 0 and len(j.invars) != 2 * n + extra:
        raise ShapeError(
            f"{prim}: the reducer jaxpr takes {len(j.invars)} inputs, expected {2 * n}"
        )
    if len(j.outvars) != n:
        raise ShapeError(
            f"{prim}: the reducer jaxpr returns {len(j.outvars)} results, expected {n}"
        )


@shape_rule("select_and_scatter_add")
def _select_and_scatter_add(in_types, params, out_hint):
    nargs(in_types, 2, "select_and_scatter_add")
    src = arr(in_types[0], "select_and_scatter_add", 0)
    x = arr(in_types[1], "select_and_scatter_add", 1)
    return [x.update(dtype=src.dtype, weak_type=src.weak_type)]


@shape_rule("select_and_scatter")
def _select_and_scatter(in_types, params, out_hint):
    min_args(in_types, 3, "select_and_scatter")
    x = arr(in_types[0], "select_and_scatter", 0)
    return [x]


@shape_rule("select_and_gather_add")
def _select_and_gather_add(in_types, params, out_hint):
    nargs(in_types, 2, "select_and_gather_add")
    t = arr(in_types[0], "select_and_gather_add", 0)
    x = arr(in_types[1], "select_and_gather_add", 1)
    if not dims_eq(t.shape, x.shape):
        raise ShapeError(f"select_and_gather_add: tangents {t} and operand {x} shapes must match")
    return [
        fill_sym_from_hint(
            t.update(shape=_window_shape("select_and_gather_add", x, params)), out_hint
        )
    ]


@shape_rule("sort")
def _sort(in_types, params, out_hint):
    min_args(in_types, 1, "sort")
    ts = [arr(t, "sort", i) for i, t in enumerate(in_types)]
    for t in ts[1:]:
        if not dims_eq(t.shape, ts[0].shape):
            raise ShapeError(f"sort: operands must have the same shape, got {ts[0]} and {t}")
    dim = int_param(params, "dimension", -1)
    if ts[0].ndim:
        canon_axis(dim, ts[0].ndim, "sort dimension")
    nk = int_param(params, "num_keys", 1)
    if not 1 <= nk <= len(ts):
        raise ShapeError(
            f"sort: num_keys={nk} must be between 1 and the number of operands ({len(ts)})"
        )
    return list(ts)


@shape_rule("top_k")
def _top_k(in_types, params, out_hint):
    min_args(in_types, 1, "top_k")
    x = arr(in_types[0], "top_k", 0)
    if is_complex_dtype(x.dtype):
        raise ShapeError("top_k does not accept complex operands")
    if x.ndim == 0:
        raise ShapeError("top_k operand must have at least 1 dimension")
    axis = canon_axis(int_param(params, "axis", -1), x.ndim, "top_k axis")
    if "k" in params:
        k = int_param(params, "k")
    elif out_hint and isinstance(out_hint[0], ShapedArray):
        k = out_hint[0].shape[axis]
    else:
        raise ShapeError("top_k: missing parameter 'k'")
    d = x.shape[axis]
    if isinstance(d, int) and isinstance(k, int) and (k < 0 or k > d):
        raise ShapeError(f"top_k: k={k} must be between 0 and the size {d} of axis {axis}")
    shape = list(x.shape)
    shape[axis] = k
    return [x.update(shape=shape), x.update(shape=shape, dtype="i32", weak_type=False)]


@shape_rule("approx_top_k")
def _approx_top_k(in_types, params, out_hint):
    min_args(in_types, 1, "approx_top_k")
    x = arr(in_types[0], "approx_top_k", 0)
    if x.ndim == 0:
        raise ShapeError("approx_top_k operand must have at least 1 dimension")
    axis = canon_axis(int_param(params, "reduction_dimension", -1), x.ndim, "reduction_dimension")
    k = int_param(params, "k")
    shape = list(x.shape)
    if out_hint and isinstance(out_hint[0], ShapedArray) and out_hint[0].ndim == x.ndim:
        shape[axis] = out_hint[0].shape[axis]  # aggregate_to_topk / recall target decide the size
    else:
        shape[axis] = k
    return [x.update(shape=shape), x.update(shape=shape, dtype="i32", weak_type=False)]


@shape_rule("reduce")
def _reduce(in_types, params, out_hint):
    if len(in_types) % 2 or not in_types:
        raise ShapeError(
            f"reduce expects operands and init values in equal numbers, got {len(in_types)}"
        )
    n = len(in_types) // 2
    ts = [arr(t, "reduce", i) for i, t in enumerate(in_types)]
    ops, inits = ts[:n], ts[n:]
    dims = static_ints(need(params, "dimensions"))
    for o in ops[1:]:
        if not dims_eq(o.shape, ops[0].shape):
            raise ShapeError(f"reduce: operands must have the same shape, got {ops[0]} and {o}")
    for iv in inits:
        if iv.ndim:
            raise ShapeError(f"reduce: init values must be scalars, got {iv}")
    j = params.get("jaxpr")
    _check_reducer("reduce", j, inits)
    shape = _reduce_axes("reduce", ops[0], dims)
    if isinstance(j, Jaxpr):
        dts = [
            t.dtype if isinstance(t, ShapedArray) else iv.dtype for t, iv in zip(j.out_types, inits)
        ]
    else:
        dts = [iv.dtype for iv in inits]
    return [mk(shape, d, False, [o]) for d, o in zip(dts, ops)]


# ---------------------------------------------------------------- properties

for _n in ("approx_top_k", "reduce", "sort", "top_k", "reduce_precision_multi"):
    define(_n, multiple_results=True)


# ---------------------------------------------------------------- printing


def _restyle_out_sharding(since: tuple[int, ...]):
    """Versions before `since` had no `out_sharding` parameter."""

    def rule(prim, params, e, style):
        if tuple(style.version) < since and params.get("out_sharding", 0) is None:
            del params["out_sharding"]
        return prim, params

    return rule


define("reduce_sum", restyle=_restyle_out_sharding((0, 8)))
define("reduce_max", restyle=_restyle_out_sharding((0, 11)))
define("reduce_min", restyle=_restyle_out_sharding((0, 11)))


# ---------------------------------------------------------------- simplification


def _simplify_reduce_nothing(e, ctx):
    """A reduction over no axes is the identity."""
    if len(e.inputs) != 1:
        return None
    if S.identity_perm(e.params.get("axes"), 0) and e.params.get("out_sharding") is None:
        return e.inputs[0]
    return None


for _n in ("reduce_sum", "reduce_max", "reduce_min", "reduce_prod", "reduce_and", "reduce_or"):
    define(_n, simplify=_simplify_reduce_nothing)
