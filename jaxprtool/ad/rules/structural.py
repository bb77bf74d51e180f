"""JVP and transpose rules for shape, indexing, gather/scatter, pad and concatenate primitives.

Each rule follows the algebra of the primitive (JAX's `lax.py` / `slicing.py` are the reference
for formulas and edge cases); the registration helper states it: linear primitives use
`deflinear2` (their JVP rebinds them on the tangents), gather and dynamic_slice transpose into
an accumulator (scatter-add / dynamic_update_slice of the cotangent).  The small emit helpers
at the top (`bind_slice`, `bind_gather`, `bind_scatter`, `take_along`, ...) are shared with the
other rule modules of this family (reductions, linalg).
"""

from __future__ import annotations

import numpy as np

from ...core import Eqn, Jaxpr, JaxprError, ShapedArray, Var
from ...params import EnumValue, Record
from .. import ops
from ..registry import (
    defjvp,
    defjvp_zero,
    deflinear2,
    fancy_transposes,
    primitive_jvps,
    primitive_transposes,
    rebind_primal,
    rule_kind,
)
from ..zeros import Zero, instantiate, is_undefined_primal, is_zero, tangent_type

LOW_LEVEL = "jvp+linearization"

# ---------------------------------------------------------------- small helpers


def ty(x) -> ShapedArray:
    """The type of an atom, an UndefinedPrimal or a Zero."""
    t = getattr(x, "type", None)
    if t is None:
        t = getattr(x, "aval", None)
    return t


def shape(x) -> tuple[int, ...]:
    return tuple(ty(x).shape)


def ints(v) -> tuple[int, ...]:
    return tuple(int(i) for i in v)


def sdims(v) -> tuple:
    """A shape-like tuple: ints stay ints, symbolic / sharded dims (`'b'`, `'8@x'`) stay strings."""
    return tuple(d if isinstance(d, str) else int(d) for d in v)


def und(x) -> bool:
    return is_undefined_primal(x)


def zero_cts(args) -> list:
    """The all-Zero answer of a transpose rule: Zero for undefined args, None for the others."""
    return [Zero(tangent_type(ty(a))) if und(a) else None for a in args]


def set_kind(name: str, kind: str = LOW_LEVEL) -> None:
    rule_kind[name] = kind


def lit0(like):
    return ops.lit(0, like)


def one_output(r):
    return r[0] if isinstance(r, list) else r


def bind_slice(x, start, limit, strides=None):
    start, limit = sdims(start), sdims(limit)
    if strides is not None:
        strides = ints(strides)
        if all(s == 1 for s in strides):
            strides = None
    if start == (0,) * len(start) and limit == shape(x) and strides is None:
        return x
    return ops.bind("slice", x, start_indices=start, limit_indices=limit, strides=strides)


def slice_in_dim(x, start, limit, stride=1, axis=0):
    shp = shape(x)
    s = [0] * len(shp)
    lim = list(shp)
    st = [1] * len(shp)
    s[axis], lim[axis], st[axis] = start, limit, stride
    return bind_slice(x, s, lim, st)


def bind_pad(x, value, config):
    config = tuple((int(lo), int(hi), int(i)) for lo, hi, i in config)
    if all(c == (0, 0, 0) for c in config):
        return x
    return ops.bind("pad", x, value, padding_config=config)


def bind_reshape(x, new_shape):
    new_shape = sdims(new_shape)
    if new_shape == shape(x):
        return x
    return ops.bind("reshape", x, new_sizes=new_shape, dimensions=None, sharding=None)


def bind_transpose(x, perm):
    perm = ints(perm)
    if perm == tuple(range(len(perm))):
        return x
    return ops.bind("transpose", x, permutation=perm)


def bind_broadcast(x, new_shape, dims):
    new_shape, dims = sdims(new_shape), ints(dims)
    if new_shape == shape(x) and dims == tuple(range(len(new_shape))):
        return x
    return ops.bind(
        "broadcast_in_dim", x, shape=new_shape, broadcast_dimensions=dims, sharding=None
    )


def bind_reduce_sum(x, axes):
    axes = tuple(sorted(ints(axes)))
    if not axes:
        return x
    return ops.bind("reduce_sum", x, axes=axes, out_sharding=None)


def bind_concatenate(xs, dimension):
    if len(xs) == 1:
        return xs[0]
    return ops.bind("concatenate", *xs, dimension=int(dimension))


def bind_rev(x, dims):
    dims = ints(dims)
    if not dims:
        return x
    return ops.bind("rev", x, dimensions=dims)


def bind_convert(x, dtype: str):
    if ty(x).dtype == dtype:
        return x
    return ops.convert_element_type(x, dtype)


def bind_iota(dtype: str, shp, dimension: int):
    from ...core import np_dtype

    return ops.bind(
        "iota", dtype=np_dtype(dtype), shape=sdims(shp), dimension=int(dimension), sharding=None
    )


def zeros_of(t: ShapedArray):
    return ops.zeros(ShapedArray(tuple(t.shape), t.dtype))


def gather_dnums(
    offset_dims,
    collapsed_slice_dims,
    start_index_map,
    operand_batching_dims=(),
    start_indices_batching_dims=(),
) -> Record:
    return Record(
        "GatherDimensionNumbers",
        (
            ("offset_dims", ints(offset_dims)),
            ("collapsed_slice_dims", ints(collapsed_slice_dims)),
            ("start_index_map", ints(start_index_map)),
            ("operand_batching_dims", ints(operand_batching_dims)),
            ("start_indices_batching_dims", ints(start_indices_batching_dims)),
        ),
    )


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
            ("update_window_dims", ints(update_window_dims)),
            ("inserted_window_dims", ints(inserted_window_dims)),
            ("scatter_dims_to_operand_dims", ints(scatter_dims_to_operand_dims)),
            ("operand_batching_dims", ints(operand_batching_dims)),
            ("scatter_indices_batching_dims", ints(scatter_indices_batching_dims)),
        ),
    )


def dn(rec, name):
    """A tuple-of-ints field of a dimension-numbers Record (absent fields are empty)."""
    v = rec.get(name, ()) if hasattr(rec, "get") else getattr(rec, name, ())
    return ints(v or ())


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


def mode_enum(member: str) -> EnumValue:
    return EnumValue("GatherScatterMode", member)


def mode_name(mode) -> str:
    if mode is None:
        return "FILL_OR_DROP"
    if isinstance(mode, EnumValue):
        return mode.member
    if isinstance(mode, int):
        return {0: "CLIP", 1: "FILL_OR_DROP", 2: "PROMISE_IN_BOUNDS", 3: "ONE_HOT"}.get(
            mode, "FILL_OR_DROP"
        )
    return str(mode).rsplit(".", 1)[-1]


def gather_fill_value(mode, fill_value, dtype: str):
    """The fill_value JAX's `lax.gather` binds: only FILL_OR_DROP has one (default by dtype)."""
    if mode_name(mode) != "FILL_OR_DROP":
        return None
    if fill_value is not None:
        return fill_value
    if dtype.startswith(("f", "bf", "c")):
        return float("nan")
    if dtype == "bool":
        return True
    from ...core import np_dtype

    info = np.iinfo(np_dtype(dtype))
    return int(info.min) if dtype.startswith("i") else int(info.max)


def bind_gather(
    operand,
    indices,
    dnums,
    slice_sizes,
    *,
    mode=None,
    fill_value=None,
    indices_are_sorted=False,
    unique_indices=False,
):
    mode = mode if mode is not None else mode_enum("PROMISE_IN_BOUNDS")
    return ops.bind(
        "gather",
        operand,
        indices,
        dimension_numbers=dnums,
        fill_value=gather_fill_value(mode, fill_value, ty(operand).dtype),
        indices_are_sorted=indices_are_sorted,
        mode=mode,
        slice_sizes=sdims(slice_sizes),
        unique_indices=unique_indices,
    )


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


def take_along(x, idx, axis):
    """`x` gathered along `axis` at `idx` (same shape as the result), all other dims batched."""
    rank = len(shape(idx))
    others = tuple(i for i in range(rank) if i != axis)
    idx2 = bind_reshape(idx, shape(idx) + (1,))
    dnums = gather_dnums((), (axis,), (axis,), others, others)
    return bind_gather(x, idx2, dnums, (1,) * rank)


# ---------------------------------------------------------------- shape ops


def _broadcast_in_dim_transpose(
    ct, operand, *dyn, shape=None, broadcast_dimensions=(), sharding=None, **_
):
    if not und(operand):
        return [None] * (1 + len(dyn))
    if is_zero(ct):
        return [Zero(tangent_type(ty(operand)))] + [None] * len(dyn)
    op_shape = tuple(ty(operand).shape)
    bdims = ints(broadcast_dimensions)
    out_shape = tuple(ty(ct).shape)
    # operand dims of size 1 broadcast to a larger dim are summed too (then reshaped back)
    kept = [d for i, d in enumerate(bdims) if not (op_shape[i] == 1 and out_shape[d] != 1)]
    axes = [d for d in range(len(out_shape)) if d not in kept]
    r = bind_reduce_sum(ct, axes)
    r = bind_reshape(r, op_shape)
    return [r] + [None] * len(dyn)


def _broadcast_in_dim_jvp(primals, tangents, **params):
    x, *dyn = primals
    (t, *_) = tangents
    (y,) = rebind_primal("broadcast_in_dim", primals, params)
    if is_zero(t):
        return [y], [Zero(tangent_type(ty(y)))]
    p = dict(params)
    p["shape"] = shape(y)
    p.setdefault("sharding", None)
    return [y], [ops.bind("broadcast_in_dim", t, *dyn, **p)]


deflinear2("broadcast_in_dim", _broadcast_in_dim_transpose)
primitive_jvps["broadcast_in_dim"] = _broadcast_in_dim_jvp  # fills the hidden `shape`


def _reshape_transpose(ct, operand, *dyn, new_sizes=None, dimensions=None, **_):
    if is_zero(ct):
        return [Zero(tangent_type(ty(operand)))] + [None] * len(dyn)
    if dimensions is None:
        return [bind_reshape(ct, shape(operand))] + [None] * len(dyn)
    dims = ints(dimensions)
    r = bind_reshape(ct, tuple(shape(operand)[d] for d in dims))
    return [bind_transpose(r, np.argsort(dims))] + [None] * len(dyn)


deflinear2("reshape", _reshape_transpose)


def _squeeze_transpose(ct, operand, *, dimensions=(), **_):
    if is_zero(ct):
        return [Zero(tangent_type(ty(operand)))]
    return [bind_reshape(ct, shape(operand))]


deflinear2("squeeze", _squeeze_transpose)


def _expand_dims_transpose(ct, operand, *, dimensions=(), **_):
    if is_zero(ct):
        return [Zero(tangent_type(ty(operand)))]
    return [bind_reshape(ct, shape(operand))]


deflinear2("expand_dims", _expand_dims_transpose)


def _transpose_transpose(ct, operand, *, permutation, **_):
    if is_zero(ct):
        return [Zero(tangent_type(ty(operand)))]
    return [bind_transpose(ct, np.argsort(ints(permutation)))]


deflinear2("transpose", _transpose_transpose)


def _rev_transpose(ct, operand, *, dimensions, **_):
    if is_zero(ct):
        return [Zero(tangent_type(ty(operand)))]
    return [bind_rev(ct, dimensions)]


deflinear2("rev", _rev_transpose)


def _concatenate_transpose(ct, *operands, dimension, **_):
    if is_zero(ct):
        return zero_cts(operands)
    dim = int(dimension)
    out, start = [], 0
    for o in operands:
        n = shape(o)[dim]
        out.append(slice_in_dim(ct, start, start + n, 1, dim) if und(o) else None)
        start += n
    return out


deflinear2("concatenate", _concatenate_transpose)


def _split_transpose(cts, operand, *, sizes, axis, **_):
    if not und(operand):
        return [None]
    if all(is_zero(c) for c in cts):
        return [Zero(tangent_type(ty(operand)))]
    parts = [instantiate(c) for c in cts]
    return [bind_concatenate(parts, int(axis))]


deflinear2("split", _split_transpose)


def _pad_transpose(ct, operand, padding_value, *, padding_config, **_):
    if is_zero(ct):
        return zero_cts([operand, padding_value])
    config = [tuple(int(v) for v in c) for c in padding_config]
    lo = [c[0] for c in config]
    hi = [c[1] for c in config]
    interior = [c[2] for c in config]
    unpadded = bind_pad(ct, lit0(ct), [(-a, -b, 0) for a, b in zip(lo, hi)])
    t_op = bind_slice(unpadded, [0] * len(lo), shape(unpadded), [i + 1 for i in interior])
    t_operand = t_op if und(operand) else None
    t_padv = None
    if und(padding_value):
        all_axes = range(len(shape(ct)))
        t_padv = ops.sub(bind_reduce_sum(ct, all_axes), bind_reduce_sum(t_op, all_axes))
    return [t_operand, t_padv]


deflinear2("pad", _pad_transpose)


def _slice_transpose(ct, operand, *, start_indices, limit_indices, strides=None, **_):
    if is_zero(ct):
        return [Zero(tangent_type(ty(operand)))]
    op_shape = shape(operand)
    start = ints(start_indices)
    if strides is None or all(int(s) == 1 for s in strides):
        pads = [(s, d - lim, 0) for s, d, lim in zip(start, op_shape, ints(limit_indices))]
    else:
        st = ints(strides)
        ct_shape = shape(ct)
        real_limits = [
            s + (0 if n == 0 else 1 + (n - 1) * k) for s, n, k in zip(start, ct_shape, st)
        ]
        pads = [(s, d - r, k - 1) for s, d, r, k in zip(start, op_shape, real_limits, st)]
    return [bind_pad(ct, lit0(ct), pads)]


deflinear2("slice", _slice_transpose)

defjvp_zero("iota")

# ---------------------------------------------------------------- dynamic_slice / dynamic_update_slice


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
    zeros = zeros_of(ShapedArray(shape(operand), ty(ct).dtype))
    acc.add(ops.bind("dynamic_update_slice", zeros, ct, *idx, _out_types=[ty(zeros)]))
    return None


def _dynamic_slice_transpose(cts, operand, *idx, slice_sizes, **params):
    (ct,) = cts
    if is_zero(ct):
        return zero_cts([operand, *idx])
    zeros = zeros_of(ShapedArray(shape(operand), ty(ct).dtype))
    return [ops.bind("dynamic_update_slice", zeros, ct, *idx, _out_types=[ty(zeros)])] + [
        None
    ] * len(idx)


primitive_jvps["dynamic_slice"] = _dynamic_slice_jvp
set_kind("dynamic_slice")
fancy_transposes["dynamic_slice"] = _dynamic_slice_transpose_fancy
primitive_transposes["dynamic_slice"] = _dynamic_slice_transpose


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
    ushape = shape(update)
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

# ---------------------------------------------------------------- gather


def _gather_jvp(g, operand, indices, **params):
    p = dict(params)
    p["fill_value"] = gather_fill_value(p.get("mode"), 0, ty(g).dtype)
    return ops.bind("gather", g, indices, **p)


defjvp("gather", _gather_jvp, None)


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


fancy_transposes["gather"] = _gather_transpose_fancy
primitive_transposes["gather"] = _gather_transpose

# ---------------------------------------------------------------- scatters


def _scatter_params(params):
    return dict(
        dnums=params["dimension_numbers"],
        mode=params.get("mode"),
        indices_are_sorted=params.get("indices_are_sorted", False),
        unique_indices=params.get("unique_indices", False),
    )


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
            sizes = scatter_slice_sizes(shape(ct), shape(updates), sd)
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
        sizes = scatter_slice_sizes(shape(ct), shape(updates), sd)
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
        sizes = scatter_slice_sizes(shape(operand), shape(updates), sd)
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
    # Overlapping updates: tag each update with an id, scatter the ids, read them back and keep
    # only the winning update (and the untouched operand entries); then scatter-add.
    sd = params["dimension_numbers"]
    sp = _scatter_params(params)
    sp.pop("dnums")
    ushape = shape(updates)
    ids_shape = list(ushape)
    for d in dn(sd, "update_window_dims"):
        ids_shape[d] = 1
    num_ids = int(np.prod(ids_shape))
    id_dtype = "u32" if num_ids < 2**31 else "u64"
    ids = bind_reshape(bind_iota(id_dtype, (num_ids,), 0), ids_shape)
    ids = ops.add(ids, ops.lit(1, ids))
    ids_b = bind_broadcast(ids, ushape, range(len(ushape)))  # size-1 window dims broadcast
    zeros_ids = ops.full(ShapedArray(shape(operand), id_dtype), 0)
    scattered_ids = bind_scatter("scatter", zeros_ids, indices, ids_b, sd, **sp)
    sizes = scatter_slice_sizes(shape(operand), ushape, sd)
    gathered_ids = bind_gather(
        scattered_ids, indices, scatter_to_gather_dnums(sd), sizes, mode=sp["mode"]
    )
    untouched = ops.eq(scattered_ids, ops.full(ShapedArray(shape(operand), id_dtype), 0))
    won = ops.eq(ids_b, gathered_ids)
    z_op, z_up = _full_like(operand, 0), _full_like(updates, 0)
    masked_operand = ops.select_n(untouched, z_op, operand)
    masked_updates = ops.select_n(won, z_up, updates)
    masked_g_operand = ops.select_n(untouched, z_op, g_operand)
    masked_g_updates = ops.select_n(won, z_up, g_updates)
    y = bind_scatter("scatter-add", masked_operand, indices, masked_updates, sd, **sp)
    t = bind_scatter("scatter-add", masked_g_operand, indices, masked_g_updates, sd, **sp)
    return [y], [t]


def _scatter_transpose(cts, operand, indices, updates, **params):
    (ct,) = cts
    if not params.get("unique_indices", False):
        raise JaxprError("scatter transpose is only implemented where unique_indices=True")
    if is_zero(ct):
        return zero_cts([operand, indices, updates])
    sd = params["dimension_numbers"]
    op_t = up_t = None
    if und(operand):
        zu = zeros_of(ShapedArray(shape(updates), ty(ct).dtype))
        op_t = ops.bind("scatter", ct, indices, zu, **params)
    if und(updates):
        sizes = scatter_slice_sizes(shape(ct), shape(updates), sd)
        up_t = bind_gather(
            ct, indices, scatter_to_gather_dnums(sd), sizes, mode=params.get("mode"), fill_value=0
        )
    return [op_t, None, up_t]


primitive_jvps["scatter"] = _scatter_jvp
set_kind("scatter")
primitive_transposes["scatter"] = _scatter_transpose

# ---------------------------------------------------------------- stack, unstack, tile


def _stack_transpose(ct, *operands, axis, **_):
    ax = int(axis)
    out = []
    for i, o in enumerate(operands):
        if not und(o):
            out.append(None)
            continue
        part = slice_in_dim(ct, i, i + 1, 1, ax)
        out.append(bind_reshape(part, shape(o)))
    return out


deflinear2("stack", _stack_transpose)


def _unstack_transpose(cts, operand, *, axis, **_):
    if not und(operand):
        return [None]
    ax = int(axis)
    parts = [instantiate(c) for c in cts]
    return [ops.bind("stack", *parts, axis=ax)]


deflinear2("unstack", _unstack_transpose)


def _tile_transpose(ct, operand, *, reps, **_):
    if not und(operand):
        return [None]
    reps = ints(reps)
    op_shape = shape(operand)
    split = [k for pair in zip(reps, op_shape) for k in pair]
    r = bind_reshape(ct, split)
    return [bind_reduce_sum(r, [2 * i for i in range(len(op_shape))])]


deflinear2("tile", _tile_transpose)
