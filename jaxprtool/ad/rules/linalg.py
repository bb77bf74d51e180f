"""JVP and transpose rules for dot_general and conv_general_dilated (both bilinear).

The transposes follow JAX's `_dot_general_transpose_lhs/rhs` and
`_conv_general_dilated_transpose_lhs/rhs`: a cotangent of one side is another dot_general /
convolution of the output cotangent with the other side (for convolutions: the reversed kernel,
with the roles of strides and lhs dilation exchanged, and feature/batch groups swapped).
"""

from __future__ import annotations

import numpy as np

from ...core import ShapedArray, short_dtype_name
from ...params import Record
from .. import ops
from ..ops import bind_convert, bind_reshape, bind_rev, bind_transpose, ints, shape, ty
from ..registry import defbilinear, primitive_jvps, primitive_transposes, rule_kind
from ..zeros import Zero, is_zero, tangent_type

# ---------------------------------------------------------------- dot_general


def _dims(dimension_numbers):
    (xc, yc), (xb, yb) = dimension_numbers
    return ints(xc), ints(yc), ints(xb), ints(yb)


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


def _dot_transpose_lhs(g, x, y, *, dimension_numbers, swap_ans=False, **params):
    if is_zero(g):
        return Zero(tangent_type(ty(x)))
    xc, yc, xb, yb = _dims(dimension_numbers)
    x_ndim, y_ndim = len(shape(x)), len(shape(y))
    x_kept = _remaining(x_ndim, xc, xb)
    y_kept = _remaining(y_ndim, yc, yb)
    if swap_ans:
        ans_batch, ans_y, _ = _ranges_like(xb, y_kept, x_kept)
    else:
        ans_batch, _, ans_y = _ranges_like(xb, x_kept, y_kept)
    dims = ((list(ans_y), list(y_kept)), (list(ans_batch), list(yb)))
    x_contract_sorted_by_y = [xc[i] for i in np.argsort(yc)] if yc else []
    unsorted_axes = list(xb) + x_kept + x_contract_sorted_by_y
    out_axes = [int(i) for i in np.argsort(unsorted_axes)]
    p = dict(params)
    p.setdefault("precision", None)
    p.setdefault("preferred_element_type", None)
    out = ops.bind("dot_general", g, y, dimension_numbers=dims, **p)
    x_bar = bind_transpose(out, out_axes)
    return bind_convert(x_bar, ty(x).dtype)


def _dot_transpose_rhs(g, x, y, *, dimension_numbers, **params):
    if is_zero(g):
        return Zero(tangent_type(ty(y)))
    xc, yc, xb, yb = _dims(dimension_numbers)
    swapped = ((list(yc), list(xc)), (list(yb), list(xb)))
    return _dot_transpose_lhs(g, y, x, dimension_numbers=swapped, swap_ans=True, **params)


defbilinear("dot_general", _dot_transpose_lhs, _dot_transpose_rhs)

# ---------------------------------------------------------------- conv_general_dilated


def dilate_shape(shp, dilation):
    dilation = (1,) * (len(shp) - len(dilation)) + tuple(dilation)
    return tuple(0 if d == 0 else 1 + r * (d - 1) for d, r in zip(shp, dilation))


def conv_vjp_lhs_padding(
    in_shape, window_dimensions, window_strides, out_shape, padding, lhs_dilation, rhs_dilation
):
    lhs_d = dilate_shape(in_shape, lhs_dilation)
    rhs_d = dilate_shape(window_dimensions, rhs_dilation)
    out_d = dilate_shape(out_shape, window_strides)
    before = [r - lo - 1 for r, (lo, _) in zip(rhs_d, padding)]
    after = [ld + r - 1 - od - b for ld, r, od, b in zip(lhs_d, rhs_d, out_d, before)]
    return list(zip(before, after))


def conv_vjp_rhs_padding(
    in_shape, window_dimensions, window_strides, out_shape, padding, lhs_dilation, rhs_dilation
):
    if len(in_shape) == 0:
        return []
    lhs_d = dilate_shape(in_shape, lhs_dilation)
    rhs_d = dilate_shape(window_dimensions, rhs_dilation)
    out_d = dilate_shape(out_shape, window_strides)
    lo = [p[0] for p in padding]
    hi = [(od - ld) + (r - p - 1) for od, ld, r, p in zip(out_d, lhs_d, rhs_d, lo)]
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


def _reshape_axis_out_of(src, size1, x):
    shp = list(shape(x))
    size2 = shp[src] // size1
    shp[src : src + 1] = [size1, size2]
    return bind_reshape(x, shp)


def _reshape_axis_into(src, dst, x):
    shp = shape(x)
    perm = [i for i in range(len(shp)) if i != src]
    perm.insert(dst, src)
    new_shape = [d for i, d in enumerate(shp) if i != src]
    new_shape[dst] *= shp[src]
    return bind_reshape(bind_transpose(x, perm), new_shape)


def _conv_common(params):
    p = dict(params)
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
        [shape(lhs)[d] for d in lhs_spec[2:]],
        [shape(rhs)[d] for d in rhs_spec[2:]],
        ints(strides),
        [shape(g)[d] for d in out_spec[2:]],
        [ints(p) for p in padding],
        ints(lhs_dil),
        ints(rhs_dil),
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
    fgc, bgc = int(feature_group_count), int(batch_group_count)
    lhs_spec, rhs_spec, out_spec = _specs(dimension_numbers)
    rhs_sd = rhs_spec[2:]
    t_rhs_spec = _spec_t(rhs_spec)
    kernel = rhs
    if fgc > 1:
        kernel = _reshape_axis_out_of(rhs_spec[0], fgc, kernel)
        kernel = _reshape_axis_into(rhs_spec[0], rhs_spec[1], kernel)
    elif bgc > 1:
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
        padding=tuple((int(a), int(b)) for a, b in pads),
        lhs_dilation=ints(window_strides),
        rhs_dilation=ints(rhs_dilation),
        dimension_numbers=_conv_dnums(out_spec, t_rhs_spec, lhs_spec),
        feature_group_count=fgc,
        batch_group_count=1,
        **_conv_common(params),
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
    if is_zero(g) or int(np.prod(shape(g))) == 0:
        return Zero(tangent_type(ty(rhs)))
    fgc, bgc = int(feature_group_count), int(batch_group_count)
    lhs_spec, rhs_spec, out_spec = _specs(dimension_numbers)
    if bgc > 1:
        fgc, bgc = bgc, 1
    elif fgc > 1:
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
        padding=tuple((int(a), int(b)) for a, b in pads),
        lhs_dilation=ints(lhs_dilation),
        rhs_dilation=ints(window_strides),
        dimension_numbers=dnums,
        feature_group_count=fgc,
        batch_group_count=bgc,
        **_conv_common(params),
    )
    return bind_convert(out, ty(rhs).dtype)


defbilinear("conv_general_dilated", _conv_transpose_lhs, _conv_transpose_rhs)


# ---------------------------------------------------------------- ragged_dot_general


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
    from ...core import JaxprError

    if params.get("group_offset") is not None:
        raise JaxprError("Unimplemented group_offset support.")


def _ragged_dot_jvp(primals, tangents, **params):
    from ..registry import rebind_primal
    from ..zeros import add_tangents

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
    from ...core import JaxprError
    from ..ops import und

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
        dtype = short_dtype_name(np.dtype(pet).name) if pet is not None else ty(lhs).dtype
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
        return bind_convert(
            bind_transpose(out, [int(i) for i in np.argsort(unsorted_axes)]), ty(like).dtype
        )

    x_bar = y_bar = None
    if und(x):
        ans_batch, _, ans_y = _ranges_like(xb, x_kept, y_kept)
        dnums = _ragged_dnums(
            ((ans_y, y_kept), (ans_batch, yb)), [len(xb) + x_kept.index(rd)], y_group
        )
        x_contract_sorted_by_y = [xc[i] for i in np.argsort(yc)] if yc else []
        x_bar = grad(ct, y, dnums, list(xb) + x_kept + x_contract_sorted_by_y, x)
    if und(y):
        ans_batch, ans_x, _ = _ranges_like(xb, x_kept, y_kept)
        dnums = _ragged_dnums(((x_kept, ans_x), (xb, ans_batch)), [rd], ())
        y_contract_sorted_by_x = [yc[i] for i in np.argsort(xc)] if xc else []
        y_bar = grad(x, ct, dnums, list(y_group) + list(yb) + y_contract_sorted_by_x + y_kept, y)
    return [x_bar, y_bar, None]


primitive_jvps["ragged_dot_general"] = _ragged_dot_jvp
rule_kind["ragged_dot_general"] = "jvp+linearization"
primitive_transposes["ragged_dot_general"] = _ragged_dot_transpose
