"""The shape family: primitives that move data without arithmetic.

broadcast_in_dim, broadcast_to, reshape, squeeze, expand_dims, transpose, rev, concatenate,
pad, slice, iota, empty2, split, stack, unstack, tile and dim_as_value.  Each block holds the
primitive's shape rule, its JVP and transpose rules (JAX's `lax.py` / `slicing.py` are the
reference: every one of them is linear, `deflinear2`, its transpose moves the cotangent back),
its batching rule (JAX's, `lax.py`), its printing, simplification and binding rules, and no
FLOPs.  The emitters the rules use
(`bind_reshape`, `bind_pad`, ...) live in `jaxprtool.ad.ops`, shared with the other families.
"""

from __future__ import annotations

from ..ad import ops
from ..ad.ops import (
    bind_concatenate,
    bind_pad,
    bind_reduce_sum,
    bind_reshape,
    bind_rev,
    bind_slice,
    bind_transpose,
    instantiate,
    slice_in_dim,
    ty,
    und,
    zero_cts,
)
from ..ad.registry import defjvp_zero, deflinear2, primitive_jvps, rebind_primal
from ..ad.zeros import Zero, is_zero, tangent_type
from ..core import Eqn, Literal, ShapedArray, Var
from ..lazy import lazy_module
from ..record import batching_rule, define
from ..shapes import ShapeError, shape_rule
from ..shapes.sizes import Size, check_all_ge
from ..shapes.util import (
    argsort,
    arr,
    canon_axis,
    dilate_dim,
    dim_add,
    dim_eq,
    dim_mul,
    dim_param,
    dim_sub,
    dims_eq,
    dtype_param,
    fill_sym_from_hint,
    fmt_shape,
    int_param,
    ints,
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
from ..shardings import (
    AxisSizeUnknown,
    SpecText,
    axis_size,
    dim_axes,
    is_sharded_dim,
    sharded_dim,
    sharded_like,
    sharded_size,
    sharding_param_spec,
    type_spec,
    with_batch_dim,
    with_spec,
)
from ..text import style as ST
from ..text.param_rules import sorted_params

#: the vmap machinery, executed when a batching rule first runs
BT = lazy_module("jaxprtool.ad.batching")

#: the passes' helpers that the simplification rules below call, imported when a pass first
#: runs them (reading and printing a program loads this family without them)
S = lazy_module("jaxprtool.passes.simplify")


def _no_flops(e) -> int:
    return 0  # data movement


def _lit0(like):
    return ops.lit(0, like)


def _hint_shape(out_hint, prim):
    if out_hint and isinstance(out_hint[0], ShapedArray):
        return out_hint[0].shape
    raise ShapeError(
        f"{prim}: the result shape is not given (no 'shape' parameter and no declared result type)"
    )


# ---------------------------------------------------------------- broadcast_in_dim


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


def _print_broadcast_in_dim(e, style):
    if style.broadcast_shape_param:
        return sorted_params(e.params)
    d = dict(e.params)
    d.pop("shape", None)
    d.pop("sharding", None)
    if "broadcast_dimensions" in d and not d["broadcast_dimensions"]:
        del d["broadcast_dimensions"]
    return sorted(d.items())


def _restyle_broadcast_in_dim(prim, params, e, style):
    if style.broadcast_shape_param:
        params.setdefault("broadcast_dimensions", ())
        params.setdefault("shape", tuple(e.outputs[0].type.shape))
        if tuple(style.version) >= (0, 5):
            params.setdefault("sharding", None)
        else:
            params.pop("sharding", None)
    return prim, params


def _simplify_broadcast_in_dim(e, ctx):
    x = e.inputs[0] if len(e.inputs) == 1 else None
    if x is None or e.params.get("sharding") is not None or not isinstance(x.type, ShapedArray):
        return None
    if x.type.shape != e.outputs[0].type.shape:  # (a broadcast that adds or grows dims)
        return None
    return x if S.identity_perm(e.params.get("broadcast_dimensions", ()), x.type.ndim) else None


def _broadcast_fills_with(e):
    return e.inputs[0] if e.params.get("sharding") is None and len(e.inputs) == 1 else None


def _broadcast_in_dim_transpose(
    ct, operand, *dyn, shape=None, broadcast_dimensions=(), sharding=None, **_
):
    if not und(operand):
        return [None] * (1 + len(dyn))
    if is_zero(ct):
        return [Zero(tangent_type(ty(operand)))] + [None] * len(dyn)
    op_shape = tuple(ty(operand).shape)
    bdims = ops.ints(broadcast_dimensions)
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
    p["shape"] = ops.shape(y)
    p.setdefault("sharding", None)
    # a tangent of the operand's tangent type: the result's is the primal result's (as
    # `linear_jvp` has it)
    want = [tangent_type(y.type)] if not dyn and t.type == tangent_type(x.type) else None
    return [y], [ops.bind("broadcast_in_dim", t, *dyn, _out_types=want, **p)]


def _bind_broadcast_in_dim(eqn, p, dims):
    from ..backend.prims import to_jax
    from ..backend.sharding import explicit_result_sharding
    from ..backend.values import static_shape

    return {
        "shape": static_shape(eqn.outputs[0].type, dims),
        "broadcast_dimensions": to_jax(p.get("broadcast_dimensions", ())),
        "sharding": explicit_result_sharding(eqn),
    }


def _broadcast_in_dim_batching(args, dims, **params):
    x, d = args[0], dims[0]
    if any(e is not None for e in dims[1:]):
        return BT.loop_fallback(args, dims, why="'broadcast_in_dim' with a batched dynamic shape")
    eqn = BT.current_eqn()
    shape = ops.sdims(params["shape"] if "shape" in params else BT.shape_of(eqn.outputs[0]))
    bdims = BT.ints(params.get("broadcast_dimensions", ()))
    x = BT.moveaxis(x, d, 0)
    new_shape = ops.sdims((BT.axis_size(), *shape))
    out_shape = (BT.axis_size(), *BT.shape_of(eqn.outputs[0]))  # symbolic dims as types hold them
    new_dims = (0,) + tuple(1 + i for i in bdims)
    p = dict(params, broadcast_dimensions=new_dims)
    if "shape" in p:
        p["shape"] = new_shape
    out = BT.bind(
        "broadcast_in_dim",
        x,
        *args[1:],
        _out_types=[ShapedArray(out_shape, x.type.dtype, eqn.outputs[0].type.weak_type)],
        **p,
    )
    return out, [0]


deflinear2("broadcast_in_dim", _broadcast_in_dim_transpose)
primitive_jvps["broadcast_in_dim"] = _broadcast_in_dim_jvp  # fills the hidden `shape`
define(
    "broadcast_in_dim",
    print_params=_print_broadcast_in_dim,
    restyle=_restyle_broadcast_in_dim,
    simplify=_simplify_broadcast_in_dim,
    fills_with=_broadcast_fills_with,
    bind_params=_bind_broadcast_in_dim,
    flops=_no_flops,
    literal_like_result=True,
    batching=_broadcast_in_dim_batching,
    # `shape=` printed: 0.7.2 and before
    version_clues=lambda e: {ST.CLUE_0_7_2} if "shape" in e.params else set(),
)


# ---------------------------------------------------------------- broadcast_to


@shape_rule("broadcast_to")
def _broadcast_to(in_types, params, out_hint):
    x = one_arr(in_types, "broadcast_to")
    shape = ints(need(params, "shape"))
    return [x.update(shape=shape)]


define("broadcast_to", flops=_no_flops)


# ---------------------------------------------------------------- reshape


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
    given = sharding_param_spec(params.get("sharding"))
    try:
        new = with_spec(new, given) if given is not None else _reshape_sharding(x, new, dims)
    except ShapeError:
        if not out_hint:
            raise
        return [out_hint[0]]  # JAX printed the result type: the sharding it chose
    return [fill_sym_from_hint(x.update(shape=new), out_hint)]


def _reshape_sharding(x: ShapedArray, new: tuple, dimensions) -> tuple:
    """`new` with the mesh axes JAX's `_reshape_sharding_rule` gives the result of reshaping
    the explicitly sharded `x`: dims kept keep their axes; a dim split (or dims merged)
    hands its axes to the result dims in order, as far as the mesh axis sizes divide them
    (`split_partitions`), the sizes read from the meshes the program prints (`axis_size`).
    What JAX refuses is refused.  Sizes given already sharded (`8@x`, a transpose's) are
    kept.  Symbolic sizes (`2*b@x`) compare and divide as JAX's do (`sizes.Size`)."""
    spec = type_spec(x)
    if spec is None or any(map(is_sharded_dim, new)):
        return new
    given, op = new, tuple(map(sharded_size, x.shape))
    if not all(isinstance(d, int) for d in (*op, *new)):
        op, new = tuple(map(Size.of, op)), tuple(map(Size.of, new))
    parts = [spec.dim_axes(i) for i in range(len(op))]
    kept = [(s, p) for s, p in zip(op, parts) if s != 1]
    non1_new = [n for n in new if n != 1]
    if [s for s, _ in kept] == non1_new:
        it = iter(p for _, p in kept)
        out = [() if n == 1 else next(it) for n in new]
    else:
        it = iter(_split_or_merge_parts(kept, non1_new, x, new, dimensions))
        out = [
            (parts[i] if i < len(op) and op[i] == 1 else ()) if n == 1 else next(it)
            for i, n in enumerate(new)
        ]
    return tuple(sharded_dim(n, a) for n, a in zip(given, out))


def _split_or_merge_parts(kept, non1_new, x, new, dimensions) -> list:
    """The mesh axes of the non-1 result dims when one operand dim splits into several (JAX's
    `_split_an_axis_sharding_rule`) or several merge into one (`_merge_an_axis_...`)."""
    sizes = [s for s, _ in kept]
    split = _one_axis_groups(sizes, non1_new, x, new)
    moved: list = []
    if split is not None:
        outs = iter(non1_new)
        for (_, p), g in zip(kept, split):
            group = [next(outs) for _ in range(g)]
            if g == 1 or not p:
                moved += [p] if g == 1 else [()] * g
            elif dimensions is not None:
                raise _reshape_refusal(
                    x, new, "a sharded dim is split by a reshape with `dimensions`"
                )
            else:
                moved += _split_partitions(p, group, x, new)
        return moved
    merge = _one_axis_groups(non1_new, sizes, x, new)
    if merge is None:
        raise _reshape_refusal(x, new, "it is neither one dim split nor dims merged into one")
    parts = iter(p for _, p in kept)
    for n, g in zip(non1_new, merge):
        group = [next(parts) for _ in range(g)]
        if g == 1 or not any(group):
            moved.append(group[0] if g == 1 else ())
        elif dimensions is not None:
            raise _reshape_refusal(x, new, "sharded dims are merged by a reshape with `dimensions`")
        else:
            moved += _split_partitions(_merged_axes(group, x, new), [n], x, new)
    return moved


def _merged_axes(group, x, new) -> tuple:
    """The mesh axes of merged dims, major to minor (JAX: unsharded dims only after them)."""
    axes: list = [a for p in group for a in (p or (None,))]
    while axes[-1] is None:
        axes.pop()
    if None in axes:
        raise _reshape_refusal(x, new, "an unsharded dim is merged ahead of a sharded one")
    return tuple(axes)


def _split_partitions(axes, outs, x, new) -> list:
    """JAX's `split_partitions`: `axes` handed, in order, to the dims of sizes `outs`, each
    taking axes while its size is above 1 and the axis size divides it."""
    it = iter(axes)
    parts = []
    for o in outs:
        got = []
        while o > 1:
            a = next(it, None)
            if a is None:
                break
            o, rest = divmod(o, _axis_size(a, x, new))
            if rest:
                raise _reshape_refusal(x, new, f"mesh axis '{a}' does not divide the dims")
            got.append(a)
        parts.append(tuple(got))
    if next(it, None) is not None:
        raise _reshape_refusal(x, new, "the dims are too small for the mesh axes")
    return parts


def _axis_size(name, x, new) -> int:
    try:
        return axis_size(name)
    except AxisSizeUnknown as e:
        raise ShapeError(
            f"the sharding of {x} reshaped to {fmt_shape(new)} depends on the mesh axis "
            f"sizes (a sharded dim is split or merged), and {e.advice()}"
        ) from None


def _one_axis_groups(few, many, x, new) -> list[int] | None:
    """JAX's `_split_on_one_axis` on non-1 sizes: how many of `many` each of `few` becomes,
    where exactly one of `few` splits; None when `many` is no such split of `few`."""
    if len(many) <= len(few):
        return None
    groups: list[int] = []
    i = j = 0
    while j < len(many):
        if i >= len(few):
            return None
        if few[i] == many[j]:
            groups.append(1)
        else:
            if any(g > 1 for g in groups):
                raise _reshape_refusal(x, new, "more than one dim is split or merged")
            k, size = 1, many[j]
            while size != few[i]:
                if size > few[i] or j + 1 >= len(many):
                    return None
                j += 1
                k += 1
                size *= many[j]
            groups.append(k)
        i += 1
        j += 1
    return groups if len(groups) == len(few) else None


def _reshape_refusal(x, new, why: str) -> ShapeError:
    return ShapeError(
        f"the sharding of {x} reshaped to {fmt_shape(new)} is one JAX's reshape sharding "
        f"rule refuses ({why}): give the reshape a `sharding` (jax.lax.reshape's "
        "out_sharding), or reshard the operand to replicated first "
        "(`jax.sharding.reshard(x, P())`)"
    )


def _restyle_reshape(prim, params, e, style):
    if tuple(style.version) < (0, 5) and params.get("sharding", 0) is None:
        del params["sharding"]
    return prim, params


def _simplify_reshape(e, ctx):
    if len(e.inputs) != 1:
        return None
    if e.params.get("dimensions") is not None or e.params.get("sharding") is not None:
        return None
    x = e.inputs[0]
    if getattr(x.type, "shape", None) != getattr(e.outputs[0].type, "shape", None):
        return None  # (most reshapes: the result's type is not the operand's)
    return x


def _reshape_transpose(ct, operand, *dyn, new_sizes=None, dimensions=None, **_):
    if is_zero(ct):
        return [Zero(tangent_type(ty(operand)))] + [None] * len(dyn)
    if dimensions is None:
        return [_reshape_to(ct, ty(operand).shape)] + [None] * len(dyn)
    dims = ops.ints(dimensions)
    r = _reshape_to(ct, tuple(ty(operand).shape[d] for d in dims))
    return [bind_transpose(r, argsort(dims))] + [None] * len(dyn)


def _reshape_to(x, dims):
    """`x` reshaped to `dims`; explicitly sharded ones given as the `sharding` of a reshape to
    their global sizes, as JAX's transpose passes the operand's sharding."""
    if not any(map(is_sharded_dim, dims)):
        return bind_reshape(x, dims)
    sizes = ops.sdims(map(sharded_size, dims))
    spec = SpecText(tuple(dim_axes(d)[1] or None for d in dims))
    return ops.bind("reshape", x, new_sizes=sizes, dimensions=None, sharding=spec.as_param())


def _bind_reshape(eqn, p, dims):
    from ..backend.prims import to_jax
    from ..backend.sharding import explicit_result_sharding
    from ..backend.values import static_shape

    return {
        "new_sizes": static_shape(eqn.outputs[0].type, dims),
        "dimensions": to_jax(p.get("dimensions")),
        "sharding": explicit_result_sharding(eqn),
    }


def _reshape_batching(args, dims, **params):
    (x,), (d,) = args[:1], dims[:1]
    if any(e is not None for e in dims[1:]):
        return BT.loop_fallback(args, dims, why="'reshape' with a batched dynamic shape")
    x = BT.moveaxis(x, d, 0)
    new = ops.sdims((BT.axis_size(), *params["new_sizes"]))
    dm = params.get("dimensions")
    if dm is not None:
        dm = (0,) + tuple(1 + int(i) for i in dm)
    if ops.sdims(BT.shape_of(x)) == new and dm is None:
        return [x], [0]
    # a given result sharding gets the (unsharded) batch dim, as JAX's get_sharding_for_vmap
    sharding = with_batch_dim(params["sharding"], 0) if params.get("sharding") else None
    params = dict(params, new_sizes=new, dimensions=dm, sharding=sharding)
    return BT.bind("reshape", x, *args[1:], **params), [0]


deflinear2("reshape", _reshape_transpose)
define(
    "reshape",
    restyle=_restyle_reshape,
    simplify=_simplify_reshape,
    bind_params=_bind_reshape,
    flops=_no_flops,
    literal_like_result=True,
    batching=_reshape_batching,
)


# ---------------------------------------------------------------- squeeze, expand_dims


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


def _simplify_squeeze(e, ctx):
    if len(e.inputs) == 1 and S.identity_perm(e.params.get("dimensions"), 0):
        return e.inputs[0]
    return None


def _squeeze_transpose(ct, operand, *, dimensions=(), **_):
    if is_zero(ct):
        return [Zero(tangent_type(ty(operand)))]
    return [bind_reshape(ct, ops.shape(operand))]


deflinear2("squeeze", _squeeze_transpose)


def _squeeze_batching(args, dims, *, dimensions, **params):
    (x,), (d,) = args, dims
    x = BT.moveaxis(x, d, 0)
    nd = BT.ndim(x) - 1
    dm = tuple(1 + (int(i) % nd if nd else int(i)) for i in dimensions)
    return BT.bind("squeeze", x, dimensions=dm, **params), [0]


define("squeeze", simplify=_simplify_squeeze, flops=_no_flops, batching=_squeeze_batching)


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


def _expand_dims_transpose(ct, operand, *, dimensions=(), **_):
    if is_zero(ct):
        return [Zero(tangent_type(ty(operand)))]
    return [bind_reshape(ct, ops.shape(operand))]


deflinear2("expand_dims", _expand_dims_transpose)


def _expand_dims_batching(args, dims, *, dimensions, **params):
    (x,), (d,) = args, dims
    x = BT.moveaxis(x, d, 0)
    nd = BT.ndim(x) - 1 + len(dimensions)
    dm = tuple(1 + (int(i) % nd) for i in dimensions)
    return BT.bind("expand_dims", x, dimensions=dm, **params), [0]


define("expand_dims", flops=_no_flops, batching=_expand_dims_batching)


# ---------------------------------------------------------------- transpose


@shape_rule("transpose")
def _transpose(in_types, params, out_hint):
    x = one_arr(in_types, "transpose")
    perm = static_ints(need(params, "permutation"))
    if sorted(perm) != list(range(x.ndim)):
        raise ShapeError(
            f"transpose: permutation {fmt_shape(perm)} is not a permutation of the axes of {x}"
        )
    return [x.update(shape=tuple(x.shape[p] for p in perm))]


def _simplify_transpose(e, ctx):
    x = e.inputs[0] if len(e.inputs) == 1 else None
    if x is not None and isinstance(x.type, ShapedArray):
        return x if S.identity_perm(e.params.get("permutation"), x.type.ndim) else None
    return None


def _transpose_transpose(ct, operand, *, permutation, **_):
    if is_zero(ct):
        return [Zero(tangent_type(ty(operand)))]
    return [bind_transpose(ct, argsort(ops.ints(permutation)))]


deflinear2("transpose", _transpose_transpose)


def _transpose_batching(args, dims, *, permutation, **params):
    (x,), (d,) = args, dims
    perm = (d,) + tuple(int(i) if int(i) < d else int(i) + 1 for i in permutation)
    if perm == tuple(range(len(perm))):
        return [x], [0]
    return BT.bind("transpose", x, permutation=perm, **params), [0]


define("transpose", simplify=_simplify_transpose, flops=_no_flops, batching=_transpose_batching)


# ---------------------------------------------------------------- rev


@shape_rule("rev")
def _rev(in_types, params, out_hint):
    x = one_arr(in_types, "rev")
    dims = static_ints(need(params, "dimensions"))
    for d in dims:
        if not 0 <= d < x.ndim:
            raise ShapeError(f"rev: dimension {d} is out of range for {x}")
    return [x]


def _rev_transpose(ct, operand, *, dimensions, **_):
    if is_zero(ct):
        return [Zero(tangent_type(ty(operand)))]
    return [bind_rev(ct, dimensions)]


deflinear2("rev", _rev_transpose)


def _rev_batching(args, dims, *, dimensions, **params):
    (x,), (d,) = args, dims
    return BT.bind("rev", x, dimensions=BT.bump(dimensions, d), **params), [d]


define("rev", flops=_no_flops, batching=_rev_batching)


# ---------------------------------------------------------------- concatenate


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
        total = dim_add(total, sharded_size(t.shape[dim]))
    shape = list(t0.shape)
    shape[dim] = sharded_like(t0.shape[dim], total)
    return [fill_sym_from_hint(mk(shape, t0.dtype, all(t.weak_type for t in ts), ts), out_hint)]


def _concatenate_transpose(ct, *operands, dimension, **_):
    if is_zero(ct):
        return zero_cts(operands)
    dim = int(dimension)
    out, start = [], 0
    for o in operands:
        n = sharded_size(ops.shape(o)[dim])
        out.append(slice_in_dim(ct, start, dim_add(start, n), 1, dim) if und(o) else None)
        start = dim_add(start, n)
    return out


deflinear2("concatenate", _concatenate_transpose)


def _concatenate_batching(args, dims, *, dimension, **params):
    size = BT.axis_size()
    xs = [
        BT.moveaxis(x, d, 0) if d is not None else BT.broadcast(x, size, 0)
        for x, d in zip(args, dims)
    ]
    return BT.bind("concatenate", *xs, dimension=int(dimension) + 1, **params), [0]


define("concatenate", flops=_no_flops, batching=_concatenate_batching)


# ---------------------------------------------------------------- pad


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
        r = dim_add(dim_add(lo, hi), dilate_dim(sharded_size(d), interior + 1))
        if isinstance(r, int) and r < 0:
            raise ShapeError(f"pad: result dimension is negative ({r})")
        shape.append(sharded_like(d, r))
    return [fill_sym_from_hint(x.update(shape=shape), out_hint)]


def _pad_transpose(ct, operand, padding_value, *, padding_config, **_):
    if is_zero(ct):
        return zero_cts([operand, padding_value])
    config = [tuple(int(v) for v in c) for c in padding_config]
    lo = [c[0] for c in config]
    hi = [c[1] for c in config]
    interior = [c[2] for c in config]
    unpadded = bind_pad(ct, _lit0(ct), [(-a, -b, 0) for a, b in zip(lo, hi)])
    t_op = bind_slice(unpadded, [0] * len(lo), ops.shape(unpadded), [i + 1 for i in interior])
    t_operand = t_op if und(operand) else None
    t_padv = None
    if und(padding_value):
        all_axes = range(len(ops.shape(ct)))
        t_padv = ops.sub(bind_reduce_sum(ct, all_axes), bind_reduce_sum(t_op, all_axes))
    return [t_operand, t_padv]


deflinear2("pad", _pad_transpose)


def _pad_batching(args, dims, *, padding_config, **params):
    """JAX's `_pad_batch_rule` (a batched padding value: pad with zeros, then select)."""
    (x, pv), (xd, pd) = args, dims
    if xd is None:
        xd = 0
        x = BT.broadcast(x, BT.axis_size(), 0)
    cfg = list(padding_config)
    cfg.insert(xd, (0, 0, 0))
    cfg = tuple(cfg)
    if pd is None:
        return BT.bind("pad", x, pv, padding_config=cfg, **params), [xd]
    (y,) = BT.bind("pad", x, ops.lit(0, x), padding_config=cfg, **params)
    ones = ops.broadcast_in_dim(Literal(True, ShapedArray((), "bool")), BT.shape_of(x), ())
    (mask,) = BT.bind(
        "pad", ones, Literal(False, ShapedArray((), "bool")), padding_config=cfg, **params
    )
    bpv = ops.broadcast_in_dim(pv, BT.shape_of(y), (xd,))
    return BT.bind("select_n", mask, bpv, y), [xd]


define("pad", flops=_no_flops, batching=_pad_batching)


# ---------------------------------------------------------------- slice


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
    start = tuple(map(sharded_size, start))  # a rule's bound: a type's dim
    limit = tuple(map(sharded_size, limit))
    _check_slice_bounds(x, start, limit)
    sizes = []
    for s, lim, st in zip(start, limit, strides):
        if isinstance(s, int) and isinstance(lim, int):
            sizes.append(0 if lim == s else (lim - s - 1) // st + 1)
        else:
            sizes.append(strided_dim(dim_sub(lim, s) if s else lim, 1, st))
    if all(n == 1 for n in sizes):  # JAX: a result of ones is replicated
        return [x.update(shape=tuple(sizes))]
    shape = [
        sharded_like(d, n)
        if isinstance(sharded_size(d), int) and isinstance(n, int)
        # a size or bound of symbolic size: whether the axes divide the result decides
        else _symbolic_slice_like(d, n, x, out_hint)
        for d, n in zip(x.shape, sizes)
    ]
    return [fill_sym_from_hint(x.update(shape=shape), out_hint)]


def _check_slice_bounds(x, start, limit) -> None:
    """JAX's `_slice_shape_rule` checks, in its order and words, symbolic sizes compared as
    JAX compares them (`2*b >= 3` is inconclusive: refused, as JAX refuses it)."""
    shape = tuple(sharded_size(d) for d in x.shape)
    check_all_ge(
        zip(shape, limit),
        "slice limit_indices must be less than or equal to operand shape, got "
        f"limit_indices {fmt_shape(limit)} for operand shape {fmt_shape(shape)}.",
    )
    check_all_ge(
        ((s, 0) for s in start),
        f"slice start_indices must be greater than or equal to zero, got start_indices of "
        f"{fmt_shape(start)}.",
    )
    check_all_ge(
        zip(limit, start),
        "slice limit_indices must be greater than or equal to start_indices, got "
        f"start_indices {fmt_shape(start)} and limit_indices {fmt_shape(limit)}.",
    )


def _symbolic_slice_like(d, n, x, out_hint):
    """Dim `d` of `x`, of symbolic size, sliced to size `n`: a sharded dim keeps its mesh axes
    where `n` is its size or they divide `n`, and is refused where they do not, as JAX's
    `_get_sharding_for_varying_out_shape` decides (structurally, as its symbolic `%`).
    Without the mesh axis sizes, or for a size outside the linear algebra of `Size`, JAX's
    printed result type (`out_hint`) says it."""
    if not is_sharded_dim(d):
        return n
    try:
        if Size.of(n) == Size.of(sharded_size(d)):
            return sharded_like(d, n)
        k = prod([axis_size(a) for a in dim_axes(d)[1]])
    except (AxisSizeUnknown, ShapeError) as e:
        if out_hint:
            return sharded_like(d, n)  # JAX traced it: its axes divide the size
        if isinstance(e, ShapeError):
            raise
        raise ShapeError(
            f"slicing {x}'s dim {d} to size {n}: whether the mesh axes divide it depends on "
            f"their sizes, and {e.advice()}"
        ) from None
    if divmod(Size.of(n), k)[1]:
        raise ShapeError(
            f"slicing on sharded dims where out dim ({n}) is not divisible by mesh axes ({k}) "
            f"is not implemented (as JAX refuses it): reshard {x} to replicated first "
            "(`jax.sharding.reshard(x, P())`)"
        )
    return sharded_like(d, n)


def _slice_transpose(ct, operand, *, start_indices, limit_indices, strides=None, **_):
    if is_zero(ct):
        return [Zero(tangent_type(ty(operand)))]
    op_shape = [sharded_size(d) for d in ops.shape(operand)]
    if strides is None or all(int(s) == 1 for s in strides):  # symbolic bounds allowed
        start, limit = (tuple(map(dim_param, v)) for v in (start_indices, limit_indices))
        pads = [(s, dim_sub(d, lim), 0) for s, d, lim in zip(start, op_shape, limit)]
        return [bind_pad(ct, _lit0(ct), pads)]
    start, st = ops.ints(start_indices), ops.ints(strides)
    ct_shape = [sharded_size(d) for d in ops.shape(ct)]
    real_limits = [s + (0 if n == 0 else 1 + (n - 1) * k) for s, n, k in zip(start, ct_shape, st)]
    pads = [(s, d - r, k - 1) for s, d, r, k in zip(start, op_shape, real_limits, st)]
    return [bind_pad(ct, _lit0(ct), pads)]


deflinear2("slice", _slice_transpose)


def _slice_batching(args, dims, *, start_indices, limit_indices, strides=None, **params):
    (x,), (d,) = args, dims
    start = list(ops.sdims(start_indices))
    start.insert(d, 0)
    limit = list(ops.sdims(limit_indices))
    limit.insert(d, ops.sdims(BT.shape_of(x))[d])
    if strides is not None:
        strides = list(BT.ints(strides))
        strides.insert(d, 1)
        strides = tuple(strides)
    out = BT.bind(
        "slice",
        x,
        start_indices=tuple(start),
        limit_indices=tuple(limit),
        strides=strides,
        **params,
    )
    return out, [d]


define("slice", flops=_no_flops, batching=_slice_batching)


# ---------------------------------------------------------------- iota


@shape_rule("iota")
def _iota(in_types, params, out_hint):
    nargs(in_types, (0,) + tuple(range(1, 8)), "iota")
    d = dtype_param(need(params, "dtype"))
    shape = ints(need(params, "shape"))
    dim = params.get("dimension", 0)  # absent in old printouts
    if dim is None:  # JAX's bind refuses it
        raise ShapeError("iota: dimension=None: give the axis that counts up (dimension=0, ...)")
    dim = int_param(params, "dimension", 0)
    if shape and not 0 <= dim < len(shape):
        raise ShapeError(f"iota: dimension {dim} is out of range for shape {fmt_shape(shape)}")
    return [fill_sym_from_hint(ShapedArray(shape, d), out_hint)]


def _bind_iota(eqn, p, dims):
    from ..backend.prims import dtype_param
    from ..backend.values import static_shape

    t = eqn.outputs[0].type
    return {
        "dtype": dtype_param(p.get("dtype", t.np_dtype)),
        "shape": static_shape(t, dims),
        "dimension": int(p.get("dimension", 0)),
        "sharding": None,
    }


defjvp_zero("iota")
define("iota", bind_params=_bind_iota, flops=_no_flops, batching=batching_rule("unbatched", "iota"))


def _iota_range(e):
    """[0, n) along its counting axis (random inputs compared with it, `draw.py`)."""
    t = e.outputs[0].type
    dim = int(e.params.get("dimension", 0) or 0)
    n = t.shape[dim] if t.shape else 1
    return (0, n) if isinstance(n, int) else (0, 0)


define("iota", draw_range=_iota_range)


# ---------------------------------------------------------------- empty2

# `empty2[dtype=float32 memory_space=MemorySpace.Device]`: an uninitialised scalar (JAX's
# partial evaluation of cond fills the residuals a branch does not compute with it).


@shape_rule("empty2")
def _empty2(in_types, params, out_hint):
    nargs(in_types, (0,), "empty2")
    space = params.get("memory_space")
    member = getattr(space, "member", "Device")
    return [ShapedArray((), dtype_param(need(params, "dtype")), memory_space=_SPACES.get(member))]


#: MemorySpace member -> the memory space a type prints (`f32<host>[]`; Device prints none)
_SPACES = {"Host": "host", "Any": "any"}


defjvp_zero("empty2")
define("empty2", flops=_no_flops, batching=batching_rule("unbatched", "empty2"))


# ---------------------------------------------------------------- split


@shape_rule("split")
def _split(in_types, params, out_hint):
    x = one_arr(in_types, "split")
    axis = canon_axis(int_param(params, "axis"), x.ndim, "split axis")
    sizes = ints(need(params, "sizes"))
    whole = sharded_size(x.shape[axis])
    if all(isinstance(s, int) for s in sizes) and isinstance(whole, int):
        if sum(sizes) != whole:
            raise ShapeError(
                f"split: sizes {fmt_shape(sizes)} do not sum to dimension {axis} of {x}"
            )
    outs = []
    for s in sizes:
        shape = list(x.shape)
        shape[axis] = sharded_like(x.shape[axis], s)
        outs.append(x.update(shape=shape))
    return outs


def _split_transpose(cts, operand, *, sizes, axis, **_):
    if not und(operand):
        return [None]
    if all(is_zero(c) for c in cts):
        return [Zero(tangent_type(ty(operand)))]
    parts = [instantiate(c) for c in cts]
    return [bind_concatenate(parts, int(axis))]


def _bind_split(eqn, p, dims):
    """The part sizes as JAX binds them: a symbolic size (`sizes=(b, b)`) takes its run's
    value, read off the result types as `reshape`'s `new_sizes`."""
    from ..backend.values import static_shape

    axis = int(p["axis"])
    sizes = tuple(static_shape(o.type, dims)[axis] for o in eqn.outputs)
    return {"sizes": sizes, "axis": axis}


deflinear2("split", _split_transpose)


def _split_batching(args, dims, *, sizes, axis, **params):
    (x,), (d,) = args, dims
    axis = int(axis)
    outs = BT.bind("split", x, sizes=sizes, axis=axis + 1 if axis >= d else axis, **params)
    return outs, [d] * len(outs)


define(
    "split",
    multiple_results=True,
    bind_params=_bind_split,
    flops=_no_flops,
    batching=_split_batching,
)


# ---------------------------------------------------------------- stack, unstack, tile


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


def _stack_transpose(ct, *operands, axis, **_):
    ax = int(axis)
    out = []
    for i, o in enumerate(operands):
        if not und(o):
            out.append(None)
            continue
        part = slice_in_dim(ct, i, i + 1, 1, ax)
        out.append(bind_reshape(part, ops.shape(o)))
    return out


deflinear2("stack", _stack_transpose)


def _stack_batching(args, dims, *, axis, **params):
    axis = int(axis)
    d = dims[0]
    if d is not None and all(e == d for e in dims):
        if axis < d:  # JAX's: at axis == d the new axis goes after the batch one (no moveaxis)
            return BT.bind("stack", *args, axis=axis, **params), [d + 1]
        return BT.bind("stack", *args, axis=axis + 1, **params), [d]
    xs = [
        BT.moveaxis(x, e, 0) if e is not None else BT.broadcast(x, BT.axis_size(), 0)
        for x, e in zip(args, dims)
    ]
    return BT.bind("stack", *xs, axis=axis + 1, **params), [0]


#: JAX 0.10.1 added the stack and unstack primitives (0.10.0's jnp.stack: reshapes and a
#: concatenate; its unstack: slices and squeezes)
_STACK_SINCE = (0, 10, 1)


def _older_stack(prim, params, e, style):
    """`reshape` of each operand to a unit axis, then one `concatenate` (JAX 0.10.0's
    jnp.stack)."""
    if tuple(style.version) >= _STACK_SINCE:
        return prim, params
    (out,) = e.outputs
    ax = canon_axis(int(params.get("axis", 0)), out.type.ndim, "stack axis")
    eqns, parts = [], []
    for x in e.inputs:
        shape = list(out.type.shape)
        shape[ax] = 1
        part = Var(out.type.update(shape=tuple(shape)))
        rp = {"dimensions": None, "new_sizes": tuple(shape), "sharding": None}
        eqns.append(Eqn("reshape", [x], [part], rp, loc=e.loc))
        parts.append(part)
    eqns.append(Eqn("concatenate", parts, [out], {"dimension": ax}, loc=e.loc))
    return eqns


def _older_unstack(prim, params, e, style):
    """`slice` and `squeeze` per result (JAX 0.10.0's random split)."""
    if tuple(style.version) >= _STACK_SINCE:
        return prim, params
    (x,) = e.inputs
    shape = list(x.type.shape)
    ax = canon_axis(int(params.get("axis", 0)), len(shape), "unstack axis")
    eqns = []
    for i, out in enumerate(e.outputs):
        start, limit = [0] * len(shape), list(shape)
        start[ax], limit[ax] = i, i + 1
        part = Var(x.type.update(shape=tuple(limit[:ax] + [1] + limit[ax + 1 :])))
        sp = {"limit_indices": tuple(limit), "start_indices": tuple(start), "strides": None}
        eqns.append(Eqn("slice", [x], [part], sp, loc=e.loc))
        eqns.append(Eqn("squeeze", [part], [out], {"dimensions": (ax,)}, loc=e.loc))
    return eqns


define(
    "stack",
    flops=_no_flops,
    batching=_stack_batching,
    first_version=_STACK_SINCE,
    restyle=_older_stack,
)


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


def _unstack_transpose(cts, operand, *, axis, **_):
    if not und(operand):
        return [None]
    ax = int(axis)
    parts = [instantiate(c) for c in cts]
    return [ops.bind("stack", *parts, axis=ax)]


deflinear2("unstack", _unstack_transpose)


def _unstack_batching(args, dims, *, axis=0, **params):
    (x,), (d,) = args, dims
    axis = int(axis)
    if axis < d:
        out_axis, out_d = axis, d - 1
    else:
        out_axis, out_d = axis + 1, d
    outs = BT.bind("unstack", x, axis=out_axis, **params)
    return outs, [out_d] * len(outs)


define(
    "unstack",
    multiple_results=True,
    flops=_no_flops,
    batching=_unstack_batching,
    first_version=_STACK_SINCE,
    restyle=_older_unstack,
)


@shape_rule("tile")
def _tile(in_types, params, out_hint):
    x = one_arr(in_types, "tile")
    reps = ints(need(params, "reps"))
    if len(reps) != x.ndim:
        raise ShapeError(f"tile: reps {fmt_shape(reps)} must have one entry per axis of {x}")
    return [
        fill_sym_from_hint(x.update(shape=[dim_mul(d, r) for d, r in zip(x.shape, reps)]), out_hint)
    ]


def _tile_transpose(ct, operand, *, reps, **_):
    if not und(operand):
        return [None]
    reps = ops.ints(reps)
    op_shape = ops.shape(operand)
    split = [k for pair in zip(reps, op_shape) for k in pair]
    r = bind_reshape(ct, split)
    return [bind_reduce_sum(r, [2 * i for i in range(len(op_shape))])]


deflinear2("tile", _tile_transpose)


def _tile_batching(args, dims, *, reps, **params):
    (x,), (d,) = args, dims
    r = list(BT.ints(reps))
    r.insert(d, 1)
    return BT.bind("tile", x, reps=tuple(r), **params), [d]


define("tile", flops=_no_flops, batching=_tile_batching)


# ---------------------------------------------------------------- dim_as_value


@shape_rule("dim_as_value")
def _dim_as_value(in_types, params, out_hint):
    return [ShapedArray((), "i64" if out_hint and out_hint[0].dtype == "i64" else "i32")]


def _dim_as_value_evaluate(interp, eqn, invals, path):
    """The size of the symbolic dim `dim` in this run (`run --dim b=5`, or read off the
    arguments), as a scalar of the result's dtype (JAX has no primitive to bind outside an
    export)."""
    import numpy as np

    from ..backend.values import eval_dim

    size = eval_dim(str(eqn.params["dim"]), interp.dims)
    return [np.asarray(size, eqn.outputs[0].type.np_dtype)]


defjvp_zero("dim_as_value")
define(
    "dim_as_value",
    batching=batching_rule("unbatched", "dim_as_value"),
    evaluate=_dim_as_value_evaluate,
    evaluated_params=frozenset({"dim"}),
)


# linearize recomputes residuals built only from literals with these (broadcast zeros)
for _n in ("broadcast_in_dim", "iota", "reshape"):
    define(_n, recompute_constant=True)

# rematerialization (ad/remat/): shape equations are cheap to recompute
for _n in "broadcast_in_dim reshape squeeze expand_dims transpose rev concatenate pad slice iota broadcast_to".split():
    define(_n, remat="cheap")
