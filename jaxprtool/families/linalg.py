"""The linear-algebra family: contractions (dot_general, ragged dots) and convolutions (the
decompositions, solves and FFTs are `decompositions.py`'s).

dot_general and conv_general_dilated are bilinear; their transposes follow JAX's
`_dot_general_transpose_lhs/rhs` and `_conv_general_dilated_transpose_lhs/rhs`: a cotangent of
one side is another dot_general / convolution of the output cotangent with the other side (for
convolutions: the reversed kernel, with the roles of strides and lhs dilation exchanged, and
feature/batch groups swapped).  A contraction costs 2 FLOPs per multiply-add (`flops`).
"""

from __future__ import annotations

import math

from ..ad import ops
from ..ad.builder import current
from ..ad.ops import (
    bind_convert,
    bind_reshape,
    bind_rev,
    bind_transpose,
    ints,
    shape,
    ty,
    und,
)
from ..ad.registry import (
    defbilinear,
    primitive_jvps,
    primitive_transposes,
    rebind_primal,
    rule_kind,
)
from ..ad.zeros import Zero, is_zero, tangent_type
from ..core import JaxprError, ShapedArray
from ..lazy import lazy_module
from ..params import Record, as_int_tuple
from ..record import define
from ..shapes import ShapeError, params_key, shape_rule
from ..shapes.util import (
    arr,
    conv_vjp_lhs_padding,
    dilate_dim,
    dilate_shape,
    dim_add,
    dim_div_exact,
    dim_eq,
    dim_floordiv,
    dim_mul,
    dim_param,
    dim_sub,
    dtype_bits,
    field,
    fill_sym_from_hint,
    is_complex_dtype,
    is_float_dtype,
    mk,
    nargs,
    need,
    num_elements,
    opt_dtype_param,
    output_elements,
    pairs,
    static_ints,
    strided_dim,
)
from ..shardings import (
    full_type_spec,
    sharded_size,
    sharding_like,
    sharding_param_spec,
    type_spec,
    with_spec,
)

#: the vmap machinery, executed when a batching rule first runs
BT = lazy_module("jaxprtool.ad.batching")

# ---------------------------------------------------------------- shared by the contractions


def _dtype_rank(d: str):
    if is_complex_dtype(d):
        return (1, 3, dtype_bits(d))
    if is_float_dtype(d):
        exp = {"f16": 5, "bf16": 8, "f32": 8, "f64": 11}.get(d, 4)
        return (0, 2, exp, dtype_bits(d))
    if d == "bool":
        return (0, 0, 0, 0)
    return (0, 1, dtype_bits(d), 0 if d.startswith("u") else 1)


def _result_dtype(prim, lhs: ShapedArray, rhs: ShapedArray, preferred) -> str:
    if preferred is not None:
        return preferred
    a, b = _dtype_rank(lhs.dtype), _dtype_rank(rhs.dtype)
    if a > b:
        return lhs.dtype
    if b > a:
        return rhs.dtype
    if lhs.dtype != rhs.dtype:
        raise ShapeError(f"{prim}: operand dtypes {lhs.dtype} and {rhs.dtype} do not agree")
    return lhs.dtype


def _dot_dims(dn):
    try:
        (lc, rc), (lb, rb) = dn
    except (TypeError, ValueError):
        raise ShapeError(f"dot_general: malformed dimension_numbers {dn}") from None
    return static_ints(lc), static_ints(rc), static_ints(lb), static_ints(rb)


def _dot_result(prim, lhs, rhs, dims, params, rskip=()):
    """Result of a dot: batch dims, then lhs free dims, then rhs free dims (minus ``rskip``)."""
    lc, rc, lb, rb = dims
    batch = tuple(lhs.shape[i] for i in lb)
    lfree = tuple(d for i, d in enumerate(lhs.shape) if i not in lc and i not in lb)
    rfree = tuple(
        d for i, d in enumerate(rhs.shape) if i not in rc and i not in rb and i not in rskip
    )
    d = _result_dtype(prim, lhs, rhs, opt_dtype_param(params.get("preferred_element_type")))
    return [mk(batch + lfree + rfree, d, lhs.weak_type and rhs.weak_type, [lhs, rhs])]


def _remaining(n, *excluded):
    ex = set()
    for e in excluded:
        ex |= set(e)
    return [i for i in range(n) if i not in ex]


def _ranges_like(*xs):
    start = 0
    for x in xs:
        yield list(range(start, start + len(x)))
        start += len(x)


def _bind_precision(eqn, p, dims):
    """dot_general and conv_general_dilated: enum / dtype params; the result type's sharding
    under an explicit mesh."""
    from ..backend.prims import dtype_param
    from ..backend.sharding import explicit_result_sharding

    out = {
        "precision": _precision_param(eqn, p.get("precision")),
        "preferred_element_type": dtype_param(p.get("preferred_element_type")),
        "out_sharding": explicit_result_sharding(eqn),
    }
    if eqn.prim == "conv_general_dilated":
        out.update(_sized_group_counts(p, dims))
    return out


def _precision_param(eqn, v):
    """JAX's `precision` of the printed one: None, a pair of `Precision`s, or a dot
    algorithm preset, which JAX prints as its bare name (`precision=BF16_BF16_F32`) and
    which must be bound as the preset: XLA aborts the process on the name as a string."""
    from jax import lax

    from ..backend.precision import unspecified_precision
    from ..backend.prims import to_jax

    if v is None:
        return unspecified_precision()  # --matmul-precision, else None
    if not isinstance(v, str):
        return to_jax(v)

    try:
        return lax.DotAlgorithmPreset[v]
    except KeyError:
        presets = ", ".join(p.name for p in lax.DotAlgorithmPreset)
        raise JaxprError(
            f"{eqn.prim}: precision={v} is not a dot algorithm preset of the installed JAX "
            f"({presets})",
            eqn.loc,
        ) from None


# ---------------------------------------------------------------- dot_general


@shape_rule("dot_general")
def _dot_general(in_types, params, out_hint):
    nargs(in_types, 2, "dot_general")
    lhs, rhs = (arr(t, "dot_general", i) for i, t in enumerate(in_types))
    lc, rc, lb, rb = _dot_dims(need(params, "dimension_numbers"))
    for side, t, dims in (("lhs", lhs, lc + lb), ("rhs", rhs, rc + rb)):
        for d in dims:
            if not 0 <= d < t.ndim:
                raise ShapeError(f"dot_general: {side} dimension {d} is out of range for {t}")
        if len(set(dims)) != len(dims):
            raise ShapeError(f"dot_general: {side} contracting and batch dimensions repeat an axis")
    if len(lb) != len(rb):
        raise ShapeError(
            f"dot_general: lhs and rhs have different numbers of batch dimensions ({len(lb)} and {len(rb)})"
        )
    if len(lc) != len(rc):
        raise ShapeError(
            f"dot_general: lhs and rhs have different numbers of contracting dimensions ({len(lc)} and {len(rc)})"
        )
    for a, b in zip(lb, rb):
        if not dim_eq(lhs.shape[a], rhs.shape[b]):
            raise ShapeError(
                f"dot_general: batch dimensions differ: lhs {lhs} dim {a} vs rhs {rhs} dim {b}"
            )
    for a, b in zip(lc, rc):
        if not dim_eq(lhs.shape[a], rhs.shape[b]):
            raise ShapeError(
                f"dot_general: contracting dimensions differ: lhs {lhs} dim {a} vs rhs {rhs} dim {b}"
            )
    return _dot_result("dot_general", lhs, rhs, (lc, rc, lb, rb), params)


def _print_dot_general(e, style):
    # (one loop over the parameters, no dict made: every printout prints every dot_general)
    pairs = []
    for k, v in e.params.items():
        if v is None or k == "out_sharding":
            continue
        if k == "dimension_numbers":
            v = _printed_dimension_numbers(v)
        pairs.append((k, v))
    pairs.sort()  # (by key: no two are equal)
    return pairs


def _printed_dimension_numbers(dn):
    """`dimension_numbers` as JAX prints them: `(([1], [0]), ([], []))`, lists inside."""
    # (checks written out, not `all(...)` over generators: `fmt` prints every dot_general)
    if isinstance(dn, tuple) and len(dn) == 2:
        contracting, batch = dn
        if (
            isinstance(contracting, tuple)
            and isinstance(batch, tuple)
            and len(contracting) == 2
            and len(batch) == 2
        ):
            (lc, rc), (lb, rb) = contracting, batch
            if lc.__class__ is rc.__class__ is lb.__class__ is rb.__class__ is list:
                pass  # (the transpose rule's and the parser's: printed as they are)
            elif all(isinstance(axes, (tuple, list)) for axes in (lc, rc, lb, rb)):
                return (list(lc), list(rc)), (list(lb), list(rb))
    return dn


def _dims(dimension_numbers):
    (xc, yc), (xb, yb) = dimension_numbers
    return ints(xc), ints(yc), ints(xb), ints(yb)


def _argsort(xs) -> list[int]:
    """`np.argsort` of distinct axis numbers (no ties: any sort gives numpy's order), without
    numpy's per-call cost: the transpose rule runs once per dot_general."""
    return sorted(range(len(xs)), key=xs.__getitem__)


def _dot_transpose_lhs(g, x, y, *, dimension_numbers, **params):
    if is_zero(g):
        return Zero(tangent_type(ty(x)))
    return _dot_transposed(g, x, y, _dims(dimension_numbers), False, params)


def _dot_transposed(g, x, y, dims_ints, swap_ans, params):
    """The cotangent of the dot_general operand `x` (`swap_ans`: its rhs), the other being
    `y`, its dimension numbers `dims_ints` (as `_dims` gives them, `x`'s side first)."""
    key = (*dims_ints, len(shape(x)), len(shape(y)), swap_ans)
    plan = _DOT_TRANSPOSES.get(key)
    if plan is None:
        plan = _DOT_TRANSPOSES[key] = _dot_transpose_plan(*key)
    (ans_y, y_kept), (ans_batch, yb), out_axes = plan
    # fresh lists for each equation: parameter values are not shared
    dims = ((list(ans_y), list(y_kept)), (list(ans_batch), list(yb)))
    p = dict(params)
    p.setdefault("precision", None)
    p.setdefault("preferred_element_type", None)
    # the result type, remembered by the plan and the other parameters (their frozen key:
    # a dtype by its name, whose hash would import numpy): no shape inference
    others = params_key(p)
    types_key = None if others is None else (key, others)
    out = ops.bind("dot_general", g, y, dimension_numbers=dims, _params_key=types_key, **p)
    # (the permutation, a tuple of ints, is shared by the equations of one plan)
    x_bar = (
        out
        if out_axes is None
        else ops.bind("transpose", out, permutation=out_axes, _params_key=out_axes)
    )
    return bind_convert(x_bar, ty(x).dtype)


#: `_dot_transpose_plan`'s answers, by its arguments
_DOT_TRANSPOSES: dict[tuple, tuple] = {}


def _dot_transpose_plan(xc, yc, xb, yb, x_ndim, y_ndim, swap_ans):
    """The dimension numbers (as tuples) of the dot_general that transposes a dot_general
    into its lhs `x`, and the permutation of its result into `x`'s axes (None: none)."""
    x_kept = _remaining(x_ndim, xc, xb)
    y_kept = _remaining(y_ndim, yc, yb)
    if swap_ans:
        ans_batch, ans_y, _ = _ranges_like(xb, y_kept, x_kept)
    else:
        ans_batch, _, ans_y = _ranges_like(xb, x_kept, y_kept)
    x_contract_sorted_by_y = [xc[i] for i in _argsort(yc)] if yc else []
    unsorted_axes = list(xb) + x_kept + x_contract_sorted_by_y
    out_axes = tuple(_argsort(unsorted_axes))
    if out_axes == tuple(range(len(out_axes))):
        out_axes = None
    return (tuple(ans_y), tuple(y_kept)), (tuple(ans_batch), tuple(yb)), out_axes


def _dot_transpose_rhs(g, x, y, *, dimension_numbers, **params):
    if is_zero(g):
        return Zero(tangent_type(ty(y)))
    xc, yc, xb, yb = _dims(dimension_numbers)
    return _dot_transposed(g, y, x, (yc, xc, yb, xb), True, params)


def _dot_general_flops(e):
    """2 * result elements * contracted size (2*M*N*K per batch)."""
    outs = output_elements(e)
    try:
        (lc, _rc), _ = e.params["dimension_numbers"]
        lhs = e.inputs[0].type
        k = 1
        for d in as_int_tuple(lc):
            k *= lhs.shape[d] if isinstance(lhs.shape[d], int) else 0
        return 2 * outs * k
    except Exception:
        return 2 * outs


def _dot_batch_dim_nums(ndims, bdims, dimension_numbers):
    """JAX's `_dot_general_batch_dim_nums`: the new dimension numbers and the result's batch
    dimension (a shared batch axis becomes a dot_general batch dimension, in front; a batch
    axis of one operand becomes one of its free dimensions)."""
    lnd, rnd = ndims
    lbd, rbd = bdims
    (lc, rc), (lb, rb) = dimension_numbers
    lc, rc, lb, rb = BT.ints(lc), BT.ints(rc), BT.ints(lb), BT.ints(rb)
    if lbd is not None and rbd is not None:
        lb = (lbd,) + BT.bump(lb, lbd)
        rb = (rbd,) + BT.bump(rb, rbd)
        lc = BT.bump(lc, lbd)
        rc = BT.bump(rc, rbd)
        out = 0
    elif lbd is not None:
        lt = [d for d in range(lnd) if d not in lb and d not in lc]
        out = len(lb) + sum(1 for d in lt if d < lbd)
        lb = BT.bump(lb, lbd)
        lc = BT.bump(lc, lbd)
    else:
        rt = [d for d in range(rnd) if d not in rb and d not in rc]
        out = lnd - len(lc) + sum(1 for d in rt if d < rbd)
        rb = BT.bump(rb, rbd)
        rc = BT.bump(rc, rbd)
    return ((list(lc), list(rc)), (list(lb), list(rb))), out


def _dot_general_batching(args, dims, *, dimension_numbers, **params):
    (x, y), (xd, yd) = args, dims
    new, out = _dot_batch_dim_nums((BT.ndim(x), BT.ndim(y)), (xd, yd), dimension_numbers)
    return BT.bind("dot_general", x, y, dimension_numbers=new, **params), [out]


def _dot_remat(e) -> str:
    """Rematerialization's class: batch dimensions or not (`dots_with_no_batch_dims_saveable`)."""
    _, _, lb, rb = _dims(e.params["dimension_numbers"])
    return "dot" if (lb or rb) else "dot_unbatched"


defbilinear("dot_general", _dot_transpose_lhs, _dot_transpose_rhs)
define("dot_general", remat=_dot_remat)


def _dot_fan_in(e):
    """Random inputs (`draw.py`): an input multiplied directly is scaled by 1/sqrt of the
    number of values each result sums, so that a layer of them keeps unit size."""
    lc = _dot_dims(e.params["dimension_numbers"])[0]
    shape = e.inputs[0].type.shape
    n = math.prod(shape[d] for d in lc) if all(isinstance(shape[d], int) for d in lc) else 0
    return {0: ("fan_in", n), 1: ("fan_in", n)} if n > 1 else {}


define("dot_general", draw_domain=_dot_fan_in)
define(
    "dot_general",
    print_params=_print_dot_general,
    bind_params=_bind_precision,
    flops=_dot_general_flops,
    batching=_dot_general_batching,
)

# ---------------------------------------------------------------- ragged_dot_general


@shape_rule("ragged_dot_general")
def _ragged_dot_general(in_types, params, out_hint):
    nargs(in_types, 3, "ragged_dot_general")
    lhs, rhs, gs = (arr(t, "ragged_dot_general", i) for i, t in enumerate(in_types))
    rdn = need(params, "ragged_dot_dimension_numbers")
    lc, rc, lb, rb = _dot_dims(field(rdn, "dot_dimension_numbers"))
    lrag = static_ints(field(rdn, "lhs_ragged_dimensions", ()))
    rgrp = static_ints(field(rdn, "rhs_group_dimensions", ()))
    del lrag
    return _dot_result("ragged_dot_general", lhs, rhs, (lc, rc, lb, rb), params, rgrp)


def _ragged_parts(rdn):
    (xc, yc), (xb, yb) = rdn["dot_dimension_numbers"]
    return (
        ints(xc),
        ints(yc),
        ints(xb),
        ints(yb),
        ints(rdn["lhs_ragged_dimensions"]),
        ints(rdn["rhs_group_dimensions"]),
    )


def _ragged_dnums(dot, lhs_ragged, rhs_group) -> Record:
    (a, b), (c, d) = dot
    dot = ((ints(a), ints(b)), (ints(c), ints(d)))
    return Record(
        "RaggedDotDimensionNumbers",
        (
            ("dot_dimension_numbers", dot),
            ("lhs_ragged_dimensions", ints(lhs_ragged)),
            ("rhs_group_dimensions", ints(rhs_group)),
        ),
    )


def _ragged_check(params):
    from ..core import JaxprError

    if params.get("group_offset") is not None:
        raise JaxprError("Unimplemented group_offset support.")


def _ragged_dot_jvp(primals, tangents, **params):
    from ..ad.ops import add_tangents

    _ragged_check(params)
    x, y, gs = primals
    dx, dy, _ = tangents
    (ans,) = rebind_primal("ragged_dot_general", primals, params)
    out = Zero(tangent_type(ty(ans)))
    if not is_zero(dx):
        out = add_tangents(
            out, ops.bind("ragged_dot_general", dx, y, gs, _out_types=[ty(ans)], **params)
        )
    if not is_zero(dy):
        out = add_tangents(
            out, ops.bind("ragged_dot_general", x, dy, gs, _out_types=[ty(ans)], **params)
        )
    return [ans], [out]


def _ragged_dot_transpose(cts, x, y, gs, *, ragged_dot_dimension_numbers, **params):
    from ..core import JaxprError

    _ragged_check(params)
    (ct,) = cts
    if is_zero(ct):
        return [
            Zero(tangent_type(ty(x))) if und(x) else None,
            Zero(tangent_type(ty(y))) if und(y) else None,
            None,
        ]
    xc, yc, xb, yb, lhs_ragged, y_group = _ragged_parts(ragged_dot_dimension_numbers)
    x_ndim, y_ndim = len(shape(x)), len(shape(y))
    x_kept = _remaining(x_ndim, xc, xb)
    y_kept = _remaining(y_ndim, yc, yb, y_group)
    (rd,) = lhs_ragged
    if rd not in x_kept:
        raise JaxprError(
            "Unimplemented transpose for ragged dot general in mode RAGGED_CONTRACTING/RAGGED_BATCH."
        )
    p = dict(params)
    p.setdefault("precision", None)
    p.setdefault("preferred_element_type", None)

    def grad(lhs, rhs, dnums, unsorted_axes, like):
        # typed here: the result of the ragged-contracting form has a leading group dimension
        pet = p.get("preferred_element_type")
        dtype = opt_dtype_param(pet) or ty(lhs).dtype
        out_t = ShapedArray(tuple(shape(like)[a] for a in unsorted_axes), dtype)
        out = ops.bind(
            "ragged_dot_general",
            lhs,
            rhs,
            gs,
            ragged_dot_dimension_numbers=dnums,
            _out_types=[out_t],
            **p,
        )
        return bind_convert(bind_transpose(out, _argsort(unsorted_axes)), ty(like).dtype)

    x_bar = y_bar = None
    if und(x):
        ans_batch, _, ans_y = _ranges_like(xb, x_kept, y_kept)
        dnums = _ragged_dnums(
            ((ans_y, y_kept), (ans_batch, yb)), [len(xb) + x_kept.index(rd)], y_group
        )
        x_contract_sorted_by_y = [xc[i] for i in _argsort(yc)] if yc else []
        x_bar = grad(ct, y, dnums, list(xb) + x_kept + x_contract_sorted_by_y, x)
    if und(y):
        ans_batch, ans_x, _ = _ranges_like(xb, x_kept, y_kept)
        dnums = _ragged_dnums(((x_kept, ans_x), (xb, ans_batch)), [rd], ())
        y_contract_sorted_by_x = [yc[i] for i in _argsort(xc)] if xc else []
        y_bar = grad(x, ct, dnums, list(y_group) + list(yb) + y_contract_sorted_by_x + y_kept, y)
    return [x_bar, y_bar, None]


def _bind_ragged(eqn, p, dims):
    return {**_bind_precision(eqn, p, dims), "group_offset": None}


primitive_jvps["ragged_dot_general"] = _ragged_dot_jvp
rule_kind["ragged_dot_general"] = "jvp+linearization"
primitive_transposes["ragged_dot_general"] = _ragged_dot_transpose
# JAX 0.10.1 added out_sharding (None: the sharding JAX infers, all 0.10.0 knew)
define(
    "ragged_dot_general",
    bind_params=_bind_ragged,
    params_since={"out_sharding": ((0, 10, 1), None)},
)

# ---------------------------------------------------------------- ragged_dot (older JAX versions)


@shape_rule("ragged_dot")
def _ragged_dot(in_types, params, out_hint):
    nargs(in_types, 3, "ragged_dot")
    lhs, rhs, gs = (arr(t, "ragged_dot", i) for i, t in enumerate(in_types))
    d = _result_dtype("ragged_dot", lhs, rhs, opt_dtype_param(params.get("preferred_element_type")))
    return [mk((lhs.shape[0], rhs.shape[-1]), d, False, [lhs, rhs])]


def _evaluate_ragged_dot(interp, eqn, invals, path):
    """The installed JAX has no `ragged_dot` primitive: call `lax.ragged_dot`."""
    import jax

    from ..backend.prims import dtype_param, to_jax

    p = eqn.params
    return [
        jax.lax.ragged_dot(
            *invals[:3],
            precision=to_jax(p.get("precision")),
            preferred_element_type=dtype_param(p.get("preferred_element_type")),
        )
    ]


define(
    "ragged_dot",
    evaluate=_evaluate_ragged_dot,
    evaluated_params=frozenset({"precision", "preferred_element_type"}),
    default_params={"group_offset": None},
)

# ---------------------------------------------------------------- conv_general_dilated


def _conv_specs(dn, nd):
    if dn is None:
        s = tuple(range(nd))
        return s, s, s
    try:
        return (
            static_ints(field(dn, "lhs_spec")),
            static_ints(field(dn, "rhs_spec")),
            static_ints(field(dn, "out_spec")),
        )
    except ShapeError:
        try:
            lhs, rhs, out = dn
            return static_ints(lhs), static_ints(rhs), static_ints(out)
        except (TypeError, ValueError, KeyError, IndexError):
            raise ShapeError(f"conv_general_dilated: malformed dimension_numbers {dn}") from None


@shape_rule("conv_general_dilated")
def _conv(in_types, params, out_hint):
    nargs(in_types, 2, "conv_general_dilated")
    lhs, rhs = (arr(t, "conv_general_dilated", i) for i, t in enumerate(in_types))
    if lhs.ndim != rhs.ndim:
        raise ShapeError(f"conv_general_dilated: lhs {lhs} and rhs {rhs} must have the same rank")
    nd = lhs.ndim
    ls, rs, os_ = _conv_specs(params.get("dimension_numbers"), nd)
    if not all(sorted(spec) == list(range(nd)) for spec in (ls, rs, os_)):
        raise ShapeError(f"conv_general_dilated: dimension_numbers do not match rank {nd}")
    nsp = nd - 2
    strides = static_ints(params.get("window_strides")) or (1,) * nsp
    padding = params.get("padding")
    if isinstance(padding, str) or padding is None:
        pads = None
    else:
        pads = pairs(padding, "padding")
    ldil = static_ints(params.get("lhs_dilation")) or (1,) * nsp
    rdil = static_ints(params.get("rhs_dilation")) or (1,) * nsp
    fgc, bgc = _group_count(params, "feature"), _group_count(params, "batch")
    if not (len(strides) == len(ldil) == len(rdil) == nsp) or (
        pads is not None and len(pads) != nsp
    ):
        raise ShapeError(
            f"conv_general_dilated: window_strides, padding and dilations must have {nsp} entries"
        )
    if any(isinstance(g, int) and g < 1 for g in (fgc, bgc)):
        raise ShapeError("conv_general_dilated: group counts must be positive")
    lg, rg = tuple(map(sharded_size, lhs.shape)), tuple(map(sharded_size, rhs.shape))
    lfeat = lg[ls[1]]
    rin = rg[rs[1]]
    rout = rg[rs[0]]
    if isinstance(lfeat, int) and isinstance(rin, int) and isinstance(fgc, int):
        if lfeat % fgc:
            raise ShapeError(
                f"conv_general_dilated: feature_group_count {fgc} does not divide lhs feature size {lfeat}"
            )
        if lfeat // fgc != rin:
            raise ShapeError(
                f"conv_general_dilated: lhs feature size {lfeat} / feature_group_count {fgc} "
                f"must equal rhs input feature size {rin}"
            )
    if all(isinstance(d, int) for d in (rout, fgc, bgc)) and (rout % fgc or rout % bgc):
        raise ShapeError(
            f"conv_general_dilated: rhs output feature size {rout} must be a multiple of the group counts"
        )
    lbatch = lg[ls[0]]
    if isinstance(bgc, int) and bgc > 1 and isinstance(lbatch, int) and lbatch % bgc:
        raise ShapeError(
            f"conv_general_dilated: batch_group_count {bgc} does not divide lhs batch size {lbatch}"
        )
    # canonical order: spatial dims in rhs_spec order
    out_trans = [_grouped_batch(lbatch, bgc), rout]
    for k in range(nsp):
        ld = dilate_dim(lg[ls[2 + k]], ldil[k])
        rd = dilate_dim(rg[rs[2 + k]], rdil[k])
        if pads is None:
            # 'SAME'/'VALID' strings are not expected in a jaxpr: fall back to the declared type
            if out_hint:
                return [out_hint[0]]
            raise ShapeError("conv_general_dilated: padding must be explicit pairs")
        lo, hi = pads[k]
        padded = dim_add(dim_add(ld, lo), hi)
        if isinstance(padded, int) and padded < 0:
            raise ShapeError(
                f"conv_general_dilated: negative padding larger than the dimension ({padded})"
            )
        out_trans.append(strided_dim(padded, rd, strides[k]))
    shape = [None] * nd
    for k, p in enumerate(os_):
        shape[p] = out_trans[k]
    shape = _conv_result_sharding(lhs, rhs, ls, params, shape)
    d = _result_dtype(
        "conv_general_dilated", lhs, rhs, opt_dtype_param(params.get("preferred_element_type"))
    )
    return [fill_sym_from_hint(mk(shape, d, lhs.weak_type and rhs.weak_type, [lhs, rhs]), out_hint)]


def _group_count(params, kind: str):
    """`feature_group_count` / `batch_group_count`: an int, or a symbolic size (JAX 0.12
    traces `feature_group_count=b`, and a vmap over a symbolic batch of both operands makes
    one, but cannot lower it: `symbolic_group_count` refuses it where a rule computes)."""
    v = params.get(f"{kind}_group_count")
    return 1 if v is None else dim_param(v)


def _sized_group_counts(params, dims) -> dict:
    """The group counts to run a conv with: a symbolic one (`feature_group_count=3*b`) at the
    sizes of this run, as JAX's conv traced at those sizes has it (JAX itself lowers no
    symbolic count: "Convolutions with non-static strides, dilation, feature_group_count,
    or batch_group_count")."""
    from ..backend.values import eval_dim

    out = {}
    for kind in ("feature", "batch"):
        g = _group_count(params, kind)
        out[f"{kind}_group_count"] = g if isinstance(g, int) else eval_dim(g, dims)
    return out


def _more_than_one(count, kind: str) -> bool:
    """JAX's `count > 1` on a group count, which its conv rules (transposes, batching over
    the kernel) test: on a symbolic count JAX 0.12 fails, and so does the tool."""
    if isinstance(count, int):
        return count > 1
    raise JaxprError(
        f"'conv_general_dilated': Symbolic dimension comparison '{count}' > '1' is "
        f"inconclusive (JAX 0.12's rule compares the {kind}_group_count with 1 here and "
        "fails so too): trace the program at concrete sizes",
        current().loc,
    )


def _grouped_batch(lbatch, bgc):
    """The result's batch size, `lbatch // bgc` (exact when `bgc` divides it symbolically)."""
    if bgc == 1:
        return lbatch
    exact = dim_div_exact(lbatch, bgc)
    return exact if exact is not None else dim_floordiv(lbatch, bgc)


def _conv_result_sharding(lhs, rhs, lhs_spec, params, shape):
    """JAX's `_conv_general_dilated_sharding_rule`: the `out_sharding` parameter when given
    (the transposes give the operand's), else the lhs's spec position by position (not by
    dimension numbers, as JAX's `_get_sharding_for_varying_out_shape`), replicated for an
    all-ones result; JAX refuses a sharded kernel or lhs feature dim without one.  The mesh
    axis sizes are not in the types, so JAX's check that a resized sharded dim stays divisible
    by them is left to JAX (it made the printout)."""
    given = params.get("out_sharding")
    spec = sharding_param_spec(given)
    if given is not None:
        if spec is None or spec.extra:
            raise ShapeError(f"conv_general_dilated: unsupported out_sharding {given}")
        return with_spec(shape, spec)
    lspec = type_spec(lhs)
    if type_spec(rhs) is not None or (lspec is not None and lspec.dim_axes(lhs_spec[1])):
        raise ShapeError(
            "conv_general_dilated: a sharded kernel or lhs feature dimension needs the result "
            "sharding as `out_sharding` (JAX refuses it without one)"
        )
    if lspec is None or all(d == 1 for d in shape):
        return shape
    return list(with_spec(shape, lspec))


def conv_vjp_rhs_padding(
    in_shape, window_dimensions, window_strides, out_shape, padding, lhs_dilation, rhs_dilation
):
    if len(in_shape) == 0:
        return []
    lhs_d = dilate_shape(in_shape, lhs_dilation)
    rhs_d = dilate_shape(window_dimensions, rhs_dilation)
    out_d = dilate_shape(out_shape, window_strides)
    lo = [p[0] for p in padding]
    hi = [
        dim_add(dim_sub(od, ld), dim_sub(dim_sub(r, p), 1))
        for od, ld, r, p in zip(out_d, lhs_d, rhs_d, lo)
    ]
    return list(zip(lo, hi))


def _specs(dnums):
    return ints(dnums["lhs_spec"]), ints(dnums["rhs_spec"]), ints(dnums["out_spec"])


def _conv_dnums(lhs, rhs, out) -> Record:
    return Record(
        "ConvDimensionNumbers",
        (("lhs_spec", ints(lhs)), ("rhs_spec", ints(rhs)), ("out_spec", ints(out))),
    )


def _spec_t(spec):
    return (spec[1], spec[0]) + tuple(spec[2:])


def _global_shape(x) -> list:
    """`x`'s sizes with any explicitly sharded dim's global size (reshape finds the axes)."""
    return [sharded_size(d) for d in shape(x)]


def _reshape_axis_out_of(src, size1, x):
    """JAX's `_reshape_axis_out_of`: axis `src` split into (size1, the rest), a symbolic size
    divided exactly as JAX's dimension expressions divide (`9*b` by 3 is `3*b`)."""
    shp = _global_shape(x)
    size2 = dim_div_exact(shp[src], size1)
    if size2 is None:
        raise JaxprError(
            f"'conv_general_dilated': splitting the dimension {shp[src]} of {ty(x)} into "
            f"{size1} groups needs a size that {size1} divides, which the tool cannot show "
            "for these symbolic sizes: give the dimensions sizes (trace the program at "
            "concrete sizes)",
            current().loc,
        )
    shp[src : src + 1] = [size1, size2]
    return bind_reshape(x, shp)


def _reshape_axis_into(src, dst, x):
    """JAX's `_reshape_axis_into`: one reshape that reads the axes in the order `perm` (on
    explicitly sharded operands JAX's reshape sharding rule refuses it when it merges a
    sharded dim, and so does the tool's)."""
    shp = _global_shape(x)
    perm = [i for i in range(len(shp)) if i != src]
    perm.insert(dst, src)
    new_shape = [d for i, d in enumerate(shp) if i != src]
    new_shape[dst] = dim_mul(new_shape[dst], shp[src])
    return ops.reshape(x, new_shape, None if perm == list(range(len(shp))) else tuple(perm))


def _conv_common(params, target, *others):
    """The forward conv's other parameters for a transpose giving the cotangent of `target`:
    `out_sharding` is `target`'s sharding in an explicitly sharded program (JAX passes
    `lhs.aval.sharding` / `rhs.aval.sharding`), in the spelling of the forward's."""
    p = dict(params)
    forward = p.get("out_sharding")
    if forward is not None or any(type_spec(ty(x)) is not None for x in (target, *others)):
        p["out_sharding"] = sharding_like(forward, full_type_spec(ty(target)))
    for k in (
        "window_strides",
        "padding",
        "lhs_dilation",
        "rhs_dilation",
        "dimension_numbers",
        "feature_group_count",
        "batch_group_count",
    ):
        p.pop(k, None)
    p.setdefault("precision", None)
    p.setdefault("preferred_element_type", None)
    return p


def _vjp_pads(pad_fn, lhs, rhs, g, dimension_numbers, strides, padding, lhs_dil, rhs_dil):
    """`pad_fn` (`conv_vjp_lhs_padding` / `_rhs_padding`) on the spatial sizes of lhs, rhs, g."""
    lhs_spec, rhs_spec, out_spec = _specs(dimension_numbers)
    return pad_fn(
        [_global_shape(lhs)[d] for d in lhs_spec[2:]],
        [_global_shape(rhs)[d] for d in rhs_spec[2:]],
        ints(strides),
        [_global_shape(g)[d] for d in out_spec[2:]],
        [ints(p) for p in padding],
        ints(lhs_dil),
        ints(rhs_dil),
    )


def _static_pads(pads) -> tuple[tuple[int, int], ...]:
    """A transpose's padding, which a symbolic kernel window makes symbolic: JAX 0.12 takes
    a conv's padding as integers only and refuses it so, as the tool does."""
    if all(isinstance(d, int) for pair in pads for d in pair):
        return tuple((int(lo), int(hi)) for lo, hi in pads)
    raise JaxprError(
        "'conv_general_dilated': padding argument to conv_general_dilated should be a string "
        "or a sequence of (low, high) pairs, got symbolic ones: JAX 0.12 refuses so the "
        "transpose of a conv whose kernel window is symbolic (its padding is computed from "
        "the window); trace the program at concrete sizes",
        current().loc,
    )


def _conv_transpose_lhs(
    g,
    lhs,
    rhs,
    *,
    window_strides,
    padding,
    lhs_dilation,
    rhs_dilation,
    dimension_numbers,
    feature_group_count=1,
    batch_group_count=1,
    **params,
):
    if is_zero(g):
        return Zero(tangent_type(ty(lhs)))
    fgc, bgc = dim_param(feature_group_count), dim_param(batch_group_count)
    lhs_spec, rhs_spec, out_spec = _specs(dimension_numbers)
    rhs_sd = rhs_spec[2:]
    t_rhs_spec = _spec_t(rhs_spec)
    kernel = rhs
    if _more_than_one(fgc, "feature"):
        kernel = _reshape_axis_out_of(rhs_spec[0], fgc, kernel)
        kernel = _reshape_axis_into(rhs_spec[0], rhs_spec[1], kernel)
    elif _more_than_one(bgc, "batch"):
        kernel = _reshape_axis_out_of(rhs_spec[0], bgc, kernel)
        kernel = _reshape_axis_into(rhs_spec[0], rhs_spec[1], kernel)
        fgc = bgc
    pads = _vjp_pads(
        conv_vjp_lhs_padding,
        lhs,
        rhs,
        g,
        dimension_numbers,
        window_strides,
        padding,
        lhs_dilation,
        rhs_dilation,
    )
    revd = bind_convert(bind_rev(kernel, rhs_sd), ty(g).dtype)
    out = ops.bind(
        "conv_general_dilated",
        g,
        revd,
        window_strides=ints(lhs_dilation),
        padding=_static_pads(pads),
        lhs_dilation=ints(window_strides),
        rhs_dilation=ints(rhs_dilation),
        dimension_numbers=_conv_dnums(out_spec, t_rhs_spec, lhs_spec),
        feature_group_count=fgc,
        batch_group_count=1,
        **_conv_common(params, lhs, g, rhs),
    )
    out = bind_convert(out, ty(lhs).dtype)
    if bgc > 1:
        out = _reshape_axis_out_of(lhs_spec[1], bgc, out)
        out = _reshape_axis_into(lhs_spec[1], lhs_spec[0], out)
    return out


def _conv_transpose_rhs(
    g,
    lhs,
    rhs,
    *,
    window_strides,
    padding,
    lhs_dilation,
    rhs_dilation,
    dimension_numbers,
    feature_group_count=1,
    batch_group_count=1,
    **params,
):
    if is_zero(g) or math.prod(_global_shape(g)) == 0:
        return Zero(tangent_type(ty(rhs)))
    fgc, bgc = dim_param(feature_group_count), dim_param(batch_group_count)
    lhs_spec, rhs_spec, out_spec = _specs(dimension_numbers)
    if _more_than_one(bgc, "batch"):
        fgc, bgc = bgc, 1
    elif _more_than_one(fgc, "feature"):
        fgc, bgc = 1, fgc
    dnums = _conv_dnums(_spec_t(lhs_spec), _spec_t(out_spec), _spec_t(rhs_spec))
    pads = _vjp_pads(
        conv_vjp_rhs_padding,
        lhs,
        rhs,
        g,
        dimension_numbers,
        window_strides,
        padding,
        lhs_dilation,
        rhs_dilation,
    )
    x = bind_convert(lhs, ty(g).dtype)
    out = ops.bind(
        "conv_general_dilated",
        x,
        g,
        window_strides=ints(rhs_dilation),
        padding=_static_pads(pads),
        lhs_dilation=ints(lhs_dilation),
        rhs_dilation=ints(window_strides),
        dimension_numbers=dnums,
        feature_group_count=fgc,
        batch_group_count=bgc,
        **_conv_common(params, rhs, g, lhs),
    )
    return bind_convert(out, ty(rhs).dtype)


def _conv_flops(e):
    """2 * result elements * kernel window * input features / groups (= 2 * result elements
    * rhs size / rhs output features)."""
    outs = output_elements(e)
    rhs = e.inputs[1].type
    try:
        dn = e.params.get("dimension_numbers")
        spec = dn["rhs_spec"] if isinstance(dn, Record) else None
        out_feat = rhs.shape[int(spec[0])] if spec is not None else rhs.shape[0]
        return 2 * outs * (num_elements(rhs) // max(int(out_feat), 1))
    except Exception:
        return 2 * outs * max(num_elements(rhs) // max(rhs.shape[0] if rhs.shape else 1, 1), 1)


def _merge_axis_into(src: int, dst: int, x):
    """Merge axis `src` of `x` into axis `dst` (numbered after removing `src`): one reshape
    (JAX's batching `_reshape_axis_into`), of global sizes: on explicitly sharded operands
    the reshape's sharding rule gives the result's sharding, or refuses as JAX's does (a
    batch merged ahead of a sharded dim)."""
    n = BT.ndim(x)
    perm = [i for i in range(n) if i != src]
    perm.insert(dst, src)
    full = _global_shape(x)
    shp = [s for i, s in enumerate(full) if i != src]
    shp[dst] = dim_mul(shp[dst], full[src])
    dims = None if perm == list(range(n)) else tuple(perm)
    return bind_reshape(x, shp, dims)


def _split_batch_out_of(axis: int, b, out):
    """Axis `axis` of the batched conv's result, `b` examples merged into it, split into
    (b, the equation's own size there): the reshape JAX's rule makes, which a symbolic `b`
    (a Jacobian's basis) leaves no integer to divide by."""
    shp = list(BT.shape_of(out))
    shp[axis : axis + 1] = [b, BT.shape_of(BT.current_eqn().outputs[0])[axis]]
    return ops.reshape(out, shp)


def _conv_batching(args, dims, **params):
    """JAX's `_conv_general_dilated_batch_rule`: the batch axis is folded into the batch
    dimension (lhs), the output features (rhs), or the feature groups (both)."""
    (lhs, rhs), (ld, rd) = args, dims
    dnums = params["dimension_numbers"]
    lhs_spec = BT.ints(BT.field_or(dnums, "lhs_spec"))
    rhs_spec = BT.ints(BT.field_or(dnums, "rhs_spec"))
    out_spec = BT.ints(BT.field_or(dnums, "out_spec"))
    fgc, bgc = _group_count(params, "feature"), _group_count(params, "batch")
    lshape, rshape = BT.shape_of(lhs), BT.shape_of(rhs)
    if (ld is not None and lshape[ld] == 0) or (rd is not None and rshape[rd] == 0):
        # an empty batch: JAX's rule returns the (empty) zeros of the batched result type
        (t,) = BT.result_types([0])
        return [ops.full(t, 0)], [0]
    into, out_of = _merge_axis_into, _reshape_axis_out_of

    def conv(a, b, **changes):
        return BT.bind("conv_general_dilated", a, b, **dict(params, **changes))[0]

    if ld is not None and rd is not None:
        b = lshape[ld]
        if _more_than_one(bgc, "batch"):
            new_lhs = into(ld, lhs_spec[0], lhs)
            changes = {"batch_group_count": dim_mul(bgc, b)}
        else:  # a symbolic size makes a symbolic count (`3*b`), as in JAX
            new_lhs = into(ld, lhs_spec[1], lhs)
            changes = {"feature_group_count": dim_mul(fgc, b)}
        new_rhs = into(rd, rhs_spec[0], rhs)
        out = conv(new_lhs, new_rhs, **changes)
        return [out_of(out_spec[1], b, out)], [out_spec[1]]
    if ld is not None:
        b = lshape[ld]
        if bgc == 1:
            new_lhs = into(ld, lhs_spec[0], lhs)
            out = conv(new_lhs, rhs)
            return [_split_batch_out_of(out_spec[0], b, out)], [out_spec[0]]
        new_lhs = out_of(lhs_spec[0] + int(ld <= lhs_spec[0]), bgc, lhs)
        new_lhs = into(ld + int(lhs_spec[0] < ld), lhs_spec[0] + 1, new_lhs)
        new_lhs = into(lhs_spec[0], lhs_spec[0], new_lhs)
        out = conv(new_lhs, rhs)
        return [_split_batch_out_of(out_spec[0], b, out)], [out_spec[0]]
    b = rshape[rd]
    if fgc == 1 and bgc == 1:
        new_rhs = into(rd, rhs_spec[0], rhs)
        out = conv(lhs, new_rhs)
        return [_split_batch_out_of(out_spec[1], b, out)], [out_spec[1]]
    group = fgc if _more_than_one(fgc, "feature") else bgc
    new_rhs = out_of(rhs_spec[0] + int(rd <= rhs_spec[0]), group, rhs)
    new_rhs = into(rd + int(rhs_spec[0] < rd), rhs_spec[0] + 1, new_rhs)
    new_rhs = into(rhs_spec[0], rhs_spec[0], new_rhs)
    out = conv(lhs, new_rhs)
    out = out_of(out_spec[1], group, out)
    out = out_of(out_spec[1] + 1, b, out)
    out = into(out_spec[1], out_spec[1] + 1, out)
    return [out], [out_spec[1]]


defbilinear("conv_general_dilated", _conv_transpose_lhs, _conv_transpose_rhs)
define(
    "conv_general_dilated", bind_params=_bind_precision, flops=_conv_flops, batching=_conv_batching
)
define("conv_general_dilated", remat="dot")  # what dots_saveable saves
