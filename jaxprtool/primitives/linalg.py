"""Contractions, convolutions, matrix decompositions and FFTs."""

from __future__ import annotations

from ..core import ShapedArray
from ..record import define
from . import ShapeError, shape_rule
from .util import (
    arr,
    complex_dtype,
    dilate_dim,
    dim_add,
    dim_eq,
    dim_floordiv,
    dtype_bits,
    field,
    fill_sym_from_hint,
    fmt_shape,
    int_param,
    ints,
    is_complex_dtype,
    is_float_dtype,
    mk,
    nargs,
    need,
    one_arr,
    opt_dtype_param,
    pairs,
    real_dtype,
    static_ints,
    strided_dim,
)


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


@shape_rule("ragged_dot")
def _ragged_dot(in_types, params, out_hint):
    nargs(in_types, 3, "ragged_dot")
    lhs, rhs, gs = (arr(t, "ragged_dot", i) for i, t in enumerate(in_types))
    d = _result_dtype("ragged_dot", lhs, rhs, opt_dtype_param(params.get("preferred_element_type")))
    return [mk((lhs.shape[0], rhs.shape[-1]), d, False, [lhs, rhs])]


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
    fgc = int_param(params, "feature_group_count", 1)
    bgc = int_param(params, "batch_group_count", 1)
    if not (len(strides) == len(ldil) == len(rdil) == nsp) or (
        pads is not None and len(pads) != nsp
    ):
        raise ShapeError(
            f"conv_general_dilated: window_strides, padding and dilations must have {nsp} entries"
        )
    if fgc < 1 or bgc < 1:
        raise ShapeError("conv_general_dilated: group counts must be positive")
    lfeat = lhs.shape[ls[1]]
    rin = rhs.shape[rs[1]]
    rout = rhs.shape[rs[0]]
    if isinstance(lfeat, int) and isinstance(rin, int):
        if lfeat % fgc:
            raise ShapeError(
                f"conv_general_dilated: feature_group_count {fgc} does not divide lhs feature size {lfeat}"
            )
        if lfeat // fgc != rin:
            raise ShapeError(
                f"conv_general_dilated: lhs feature size {lfeat} / feature_group_count {fgc} "
                f"must equal rhs input feature size {rin}"
            )
    if isinstance(rout, int) and (rout % fgc or rout % bgc):
        raise ShapeError(
            f"conv_general_dilated: rhs output feature size {rout} must be a multiple of the group counts"
        )
    lbatch = lhs.shape[ls[0]]
    if bgc > 1 and isinstance(lbatch, int) and lbatch % bgc:
        raise ShapeError(
            f"conv_general_dilated: batch_group_count {bgc} does not divide lhs batch size {lbatch}"
        )
    # canonical order: spatial dims in rhs_spec order
    out_trans = [dim_floordiv(lbatch, bgc) if bgc > 1 else lbatch, rout]
    for k in range(nsp):
        ld = dilate_dim(lhs.shape[ls[2 + k]], ldil[k])
        rd = dilate_dim(rhs.shape[rs[2 + k]], rdil[k])
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
    d = _result_dtype(
        "conv_general_dilated", lhs, rhs, opt_dtype_param(params.get("preferred_element_type"))
    )
    return [fill_sym_from_hint(mk(shape, d, lhs.weak_type and rhs.weak_type, [lhs, rhs]), out_hint)]


# ---------------------------------------------------------------- decompositions


def _matrix(prim, t, square=False):
    x = arr(t, prim, 0)
    if x.ndim < 2:
        raise ShapeError(f"{prim} expects an operand of rank >= 2, got {x}")
    m, n = x.shape[-2:]
    if square and isinstance(m, int) and isinstance(n, int) and m != n:
        raise ShapeError(f"{prim} expects square matrices, got {x}")
    return x, x.shape[:-2], m, n


def _min(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return min(a, b)
    return f"min({a}, {b})"


@shape_rule("cholesky")
def _cholesky(in_types, params, out_hint):
    nargs(in_types, 1, "cholesky")
    x, _, _, _ = _matrix("cholesky", in_types[0], square=True)
    return [x]


@shape_rule("eigh")
def _eigh(in_types, params, out_hint):
    nargs(in_types, 1, "eigh")
    x, b, m, n = _matrix("eigh", in_types[0], square=True)
    sub = params.get("subset_by_index")
    d = n if sub is None else int(sub[1]) - int(sub[0])
    return [x.update(shape=b + (n, d)), x.update(shape=b + (d,), dtype=real_dtype(x.dtype))]


@shape_rule("eig")
def _eig(in_types, params, out_hint):
    nargs(in_types, 1, "eig")
    x, b, m, n = _matrix("eig", in_types[0], square=True)
    c = complex_dtype(x.dtype)
    k = int(bool(params.get("compute_left_eigenvectors", True))) + int(
        bool(params.get("compute_right_eigenvectors", True))
    )
    return [x.update(shape=b + (n,), dtype=c)] + [x.update(dtype=c)] * k


@shape_rule("lu")
def _lu(in_types, params, out_hint):
    nargs(in_types, 1, "lu")
    x, b, m, n = _matrix("lu", in_types[0])
    return [
        x,
        x.update(shape=b + (_min(m, n),), dtype="i32", weak_type=False),
        x.update(shape=b + (m,), dtype="i32", weak_type=False),
    ]


@shape_rule("qr")
def _qr(in_types, params, out_hint):
    nargs(in_types, 1, "qr")
    x, b, m, n = _matrix("qr", in_types[0])
    k = m if params.get("full_matrices") else _min(m, n)
    outs = [x.update(shape=b + (m, k)), x.update(shape=b + (k, n))]
    if params.get("pivoting"):
        outs.append(x.update(shape=b + (n,), dtype="i32", weak_type=False))
    return outs


@shape_rule("svd")
def _svd(in_types, params, out_hint):
    nargs(in_types, 1, "svd")
    x, b, m, n = _matrix("svd", in_types[0])
    r = _min(m, n)
    sub = params.get("subset_by_index")
    if sub is not None:
        r = _min(r, int(sub[1]) - int(sub[0]))
    full = bool(params.get("full_matrices"))
    s = x.update(shape=b + (r,), dtype=real_dtype(x.dtype))
    if not params.get("compute_uv", True):
        return [s]
    return [s, x.update(shape=b + (m, m if full else r)), x.update(shape=b + (n if full else r, n))]


@shape_rule("triangular_solve")
def _triangular_solve(in_types, params, out_hint):
    nargs(in_types, 2, "triangular_solve")
    a, _, m, n = _matrix("triangular_solve", in_types[0], square=True)
    bt = arr(in_types[1], "triangular_solve", 1)
    if bt.ndim < 2:
        raise ShapeError(f"triangular_solve: b must have rank >= 2, got {bt}")
    common = bt.shape[-2] if params.get("left_side") else bt.shape[-1]
    if not dim_eq(n, common):
        raise ShapeError(f"triangular_solve: incompatible shapes {a} and {bt}")
    if a.dtype != bt.dtype:
        raise ShapeError(f"triangular_solve: dtypes differ ({a.dtype} and {bt.dtype})")
    return [bt]


@shape_rule("tridiagonal_solve")
def _tridiagonal_solve(in_types, params, out_hint):
    nargs(in_types, 4, "tridiagonal_solve")
    return [arr(in_types[3], "tridiagonal_solve", 3)]


@shape_rule("tridiagonal")
def _tridiagonal(in_types, params, out_hint):
    nargs(in_types, 1, "tridiagonal")
    x, b, m, n = _matrix("tridiagonal", in_types[0], square=True)
    r = real_dtype(x.dtype)
    n1 = dim_add(n, -1)
    return [
        x,
        x.update(shape=b + (n,), dtype=r),
        x.update(shape=b + (n1,), dtype=r),
        x.update(shape=b + (n1,)),
    ]


@shape_rule("hessenberg")
def _hessenberg(in_types, params, out_hint):
    nargs(in_types, 1, "hessenberg")
    x, b, m, n = _matrix("hessenberg", in_types[0], square=True)
    return [x, x.update(shape=b + (dim_add(n, -1),))]


@shape_rule("schur")
def _schur(in_types, params, out_hint):
    nargs(in_types, 1, "schur")
    x, _, _, _ = _matrix("schur", in_types[0], square=True)
    return [x, x] if params.get("compute_schur_vectors", True) else [x]


@shape_rule("householder_product")
def _householder_product(in_types, params, out_hint):
    nargs(in_types, 2, "householder_product")
    return [arr(in_types[0], "householder_product", 0)]


@shape_rule("lu_pivots_to_permutation")
def _lu_pivots_to_permutation(in_types, params, out_hint):
    x = one_arr(in_types, "lu_pivots_to_permutation")
    size = int_param(params, "permutation_size")
    return [x.update(shape=x.shape[:-1] + (size,))]


@shape_rule("fft")
def _fft(in_types, params, out_hint):
    x = one_arr(in_types, "fft")
    ft = params.get("fft_type")
    kind = (
        str(ft).rsplit(".", 1)[-1].upper()
        if not isinstance(ft, int)
        else ["FFT", "IFFT", "RFFT", "IRFFT"][ft]
    )
    if kind in ("0", "1", "2", "3"):
        kind = ["FFT", "IFFT", "RFFT", "IRFFT"][int(kind)]
    lengths = ints(need(params, "fft_lengths"))
    if len(lengths) > x.ndim:
        raise ShapeError(f"fft: fft_lengths {fmt_shape(lengths)} exceed the rank of {x}")
    if kind == "RFFT":
        if not is_float_dtype(x.dtype):
            raise ShapeError(f"fft: RFFT expects a real operand, got {x.dtype}")
        last = lengths[-1]
        shape = x.shape[:-1] + (
            last // 2 + 1 if isinstance(last, int) else f"floordiv({last}, 2) + 1",
        )
        return [fill_sym_from_hint(x.update(shape=shape, dtype=complex_dtype(x.dtype)), out_hint)]
    if kind == "IRFFT":
        if not is_complex_dtype(x.dtype):
            raise ShapeError(f"fft: IRFFT expects a complex operand, got {x.dtype}")
        shape = x.shape[:-1] + (lengths[-1],)
        return [x.update(shape=shape, dtype=real_dtype(x.dtype))]
    if not is_complex_dtype(x.dtype):
        raise ShapeError(f"fft: {kind} expects a complex operand, got {x.dtype}")
    return [x]


# ---------------------------------------------------------------- printing


def _print_dot_general(e, style):
    d = {k: v for k, v in e.params.items() if v is not None}
    d.pop("out_sharding", None)
    dn = d.get("dimension_numbers")
    if (
        isinstance(dn, tuple)
        and len(dn) == 2
        and all(isinstance(x, tuple) and len(x) == 2 for x in dn)
    ):
        (lc, rc), (lb, rb) = dn
        d["dimension_numbers"] = ((list(lc), list(rc)), (list(lb), list(rb)))
    return sorted(d.items())


define("dot_general", print_params=_print_dot_general)
