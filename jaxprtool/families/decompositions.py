"""The matrix decompositions and solves (cholesky, lu, qr, eigh, svd, eig, triangular_solve,
tridiagonal_solve, tridiagonal, hessenberg, schur, householder_product,
lu_pivots_to_permutation) and FFTs: the linear-algebra primitives other than the
contractions and convolutions (`linalg.py`), in a family of their own so that a program
without them (a model's gradient) does not load them.

The decompositions and solves carry JAX's JVP rules (`jax/_src/lax/linalg.py`: cholesky, lu,
qr, eigh, svd, eig, triangular_solve, tridiagonal_solve; lu_pivots_to_permutation has an
integer result), written with the matrix emitters of `ops` (tril, triu, eye, batch_matmul,
adjoint, diagonal).  Their tangents are linear maps of the input tangents with primal
coefficients, so linearize splits them and only the two solves need transpose rules (in their
right-hand side).  tridiagonal, hessenberg, schur and householder_product have no rule in JAX
either and refuse at the equation.  All batch by moving the batch dimension in front (JAX's
`expand_dims_batcher`).
"""

from __future__ import annotations

from ..ad import ops
from ..ad.builder import current
from ..ad.ops import shape, ty
from ..ad.registry import (
    LOW_LEVEL,
    defjvp2,
    defjvp_zero,
    deflinear2,
    rebind_primal,
)
from ..ad.zeros import Zero, is_zero, tangent_type
from ..core import JaxprError, ShapedArray, dtype_value
from ..params import EnumValue, SymExpr
from ..record import batching_rule, define
from ..shapes import ShapeError, shape_rule
from ..shapes.util import (
    arr,
    complex_dtype,
    dim_add,
    dim_eq,
    dim_floordiv,
    fill_sym_from_hint,
    fmt_shape,
    int_param,
    is_complex_dtype,
    is_float_dtype,
    nargs,
    need,
    one_arr,
    prod,
    real_dtype,
)
from ..shapes.util import ints as param_dims

# ---------------------------------------------------------------- decompositions and solves


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


def _bind_defaults(**defaults):
    """Params that texts of older JAX versions do not print: the installed JAX's defaults."""

    def rule(eqn, p, dims):
        return {k: v for k, v in defaults.items() if k not in p}

    return rule


# The JVP rules below are JAX's (`jax/_src/lax/linalg.py`), written with `ops`; their
# tangents are linear in the input tangents with primal coefficients, so linearize splits them
# and transpose needs rules only for the linear primitives they bind (triangular_solve and
# tridiagonal_solve in their right-hand side).  Batching: the primitives take leading batch
# dimensions (JAX's `expand_dims_batcher`).


def _hmm(a, b):
    """`a @ b` at `Precision.HIGHEST`, as JAX's rules multiply."""
    return ops.batch_matmul(a, b, precision=ops.HIGHEST)


def _multi_bind(name, inputs, **params):
    """Bind `name` on `inputs`; always the list of its results."""
    return current().bind(name, inputs, params)


def _int_zeros(outs):
    return [Zero(tangent_type(ty(o))) for o in outs]


def _refuse_jvp(name, why):
    """JAX has no JVP rule for `name`: refuse at the equation, saying how to proceed."""

    def rule(primals, tangents, **params):

        raise JaxprError(
            f"Differentiation rule for '{name}' not implemented ({why}; JAX has none either: "
            "stop the gradient of its operand, or give the function that calls it a "
            "jax.custom_jvp / custom_vjp rule and trace it with `jaxprtool trace`)",
            current().loc,
        )

    return rule


def _tri_solve(
    a, b, *, left_side=False, lower=False, transpose_a=False, conjugate_a=False, unit_diagonal=False
):
    """JAX's `triangular_solve` wrapper (its defaults: right side, upper)."""
    return ops.bind(
        "triangular_solve",
        a,
        b,
        conjugate_a=bool(conjugate_a),
        left_side=bool(left_side),
        lower=bool(lower),
        transpose_a=bool(transpose_a),
        unit_diagonal=bool(unit_diagonal),
    )


@shape_rule("cholesky")
def _cholesky(in_types, params, out_hint):
    nargs(in_types, 1, "cholesky")
    x, _, _, _ = _matrix("cholesky", in_types[0], square=True)
    return [x]


def _cholesky_jvp(primals, tangents, **params):
    """JAX's `_cholesky_jvp_rule` (arXiv:1602.07527): L' = L phi(L^-1 sym(A') L^-H)."""
    (x,), (sigma_dot,) = primals, tangents
    if is_complex_dtype(ty(x).dtype):
        r, i = ops.real(sigma_dot), ops.imag(sigma_dot)
        sigma_dot = ops.complex(
            ops.add(ops.tril(r), ops.matrix_transpose(ops.tril(r, -1))),
            ops.sub(ops.tril(i, -1), ops.matrix_transpose(ops.tril(i, -1))),
        )
    else:
        sigma_dot = ops.add(ops.tril(sigma_dot), ops.matrix_transpose(ops.tril(sigma_dot, -1)))
    (chol,) = rebind_primal("cholesky", primals, params)
    L = ops.tril(chol)
    tmp = _tri_solve(L, sigma_dot, left_side=False, transpose_a=True, conjugate_a=True, lower=True)
    inner = _tri_solve(L, tmp, left_side=True, transpose_a=False, lower=True)
    phi = ops.div(ops.tril(inner), ops.add(ops.eye_like(inner), ops.lit(1, inner)))
    return [L], [_hmm(L, phi)]


define(
    "cholesky",
    jvp=_cholesky_jvp,
    jvp_kind=LOW_LEVEL,
    batching=batching_rule("leading_batch", "cholesky"),
)


@shape_rule("eigh")
def _eigh(in_types, params, out_hint):
    nargs(in_types, 1, "eigh")
    x, b, m, n = _matrix("eigh", in_types[0], square=True)
    sub = params.get("subset_by_index")
    d = n if sub is None else int(sub[1]) - int(sub[0])
    return [x.update(shape=b + (n, d)), x.update(shape=b + (d,), dtype=real_dtype(x.dtype))]


def _eigh_jvp(primals, tangents, *, lower, sort_eigenvalues, subset_by_index=None, algorithm=None):
    """JAX's `_eigh_jvp_rule`: nondegenerate perturbation theory (distinct eigenvalues)."""
    (a,), (a_dot,) = primals, tangents
    n = shape(a)[-1]
    if not (subset_by_index is None or tuple(int(i) for i in subset_by_index) == (0, n)):
        from ..core import JaxprError

        raise JaxprError(
            "Derivatives not defined for partial eigen decomposition (eigh with "
            "subset_by_index): differentiate the full decomposition and slice it",
            current().loc,
        )
    v, w_real = _multi_bind(
        "eigh",
        [ops.div(ops.add(a, ops.adjoint(a)), ops.lit(2, a))],
        algorithm=algorithm,
        lower=lower,
        sort_eigenvalues=sort_eigenvalues,
        subset_by_index=subset_by_index,
    )
    w = ops.bind_convert(w_real, ty(a).dtype)
    eye = ops.eye_like(a)
    delta_w = ops.sub(ops.row_vector(w), ops.col_vector(w))
    fmat = ops.sub(ops.integer_pow(ops.add(delta_w, eye), -1), eye)
    vdag_adot_v = _hmm(_hmm(ops.adjoint(v), a_dot), v)
    dv = _hmm(v, ops.mul(fmat, vdag_adot_v))
    re = ops.real(vdag_adot_v) if is_complex_dtype(ty(a).dtype) else vdag_adot_v
    return [v, w_real], [dv, ops.diagonal(re)]


define("eigh", jvp=_eigh_jvp, jvp_kind=LOW_LEVEL, batching=batching_rule("leading_batch", "eigh"))


define(
    "eigh",
    bind_params=_bind_defaults(algorithm=None, subset_by_index=None, sort_eigenvalues=True),
)


@shape_rule("eig")
def _eig(in_types, params, out_hint):
    nargs(in_types, 1, "eig")
    x, b, m, n = _matrix("eig", in_types[0], square=True)
    c = complex_dtype(x.dtype)
    k = int(bool(params.get("compute_left_eigenvectors", True))) + int(
        bool(params.get("compute_right_eigenvectors", True))
    )
    return [x.update(shape=b + (n,), dtype=c)] + [x.update(dtype=c)] * k


def _lu_solve_square(a, rhs):
    """a^-1 rhs through an LU of `a` (the factorization JAX's `_solve` uses; its tangent is
    linear in `rhs` only)."""
    lu, _, permutation = _multi_bind("lu", [a])
    y = _tri_solve(lu, _take_rows(rhs, permutation), left_side=True, lower=True, unit_diagonal=True)
    return _tri_solve(lu, y, left_side=True, lower=False)


def _eig_vec_jvp(w, v, da):
    """JAX's `_eig_vec_jvp`: nondegenerate perturbation theory, with LAPACK's normalisation of
    each eigenvector (unit norm, real largest component) differentiated through."""
    nd = len(shape(v))
    eye = ops.eye_like(v)
    fmat = ops.sub(
        ops.div(ops.lit(1, w), ops.add(eye, ops.sub(ops.row_vector(w), ops.col_vector(w)))), eye
    )
    P = _hmm(_lu_solve_square(v, da), v)
    dw = ops.diagonal(P)
    U = _hmm(v, ops.mul(fmat, P))
    k = ops.bind("argmax", ops.abs(v), axes=(nd - 2,), index_dtype=dtype_value("i32"))
    rows = ops.bind_iota("i32", shape(v), nd - 2)
    mask = ops.convert_element_type(ops.eq(rows, ops.row_vector(k)), ty(v).dtype)
    col_sum = lambda x: ops.reduce_sum(x, (nd - 2,))  # noqa: E731
    re = ops.neg(ops.real(col_sum(ops.mul(ops.conj(v), U))))
    im = ops.div(ops.neg(ops.imag(col_sum(ops.mul(mask, U)))), ops.real(col_sum(ops.mul(mask, v))))
    return dw, ops.add(U, ops.mul(v, ops.row_vector(ops.complex(re, im))))


def _eig_jvp(
    primals,
    tangents,
    *,
    compute_left_eigenvectors=False,
    compute_right_eigenvectors=True,
    enable_eigvec_derivs=False,
    implementation=None,
):
    """JAX's `eig_jvp_rule`: eigenvalues always; eigenvectors only with enable_eigvec_derivs."""
    (a,), (da,) = primals, tangents
    left, right = bool(compute_left_eigenvectors), bool(compute_right_eigenvectors)
    if (left or right) and not enable_eigvec_derivs:
        from ..core import JaxprError

        raise JaxprError(
            "Derivatives of non-symmetric eigenvectors are only valid under assumptions on the "
            "input that JAX cannot check (see the enable_eigvec_derivs argument to "
            "jax.lax.linalg.eig). Pass enable_eigvec_derivs=True to jax.lax.linalg.eig to opt "
            "in. See https://github.com/jax-ml/jax/issues/2748 for discussion.",
            current().loc,
        )
    outs = _multi_bind(
        "eig",
        [a],
        compute_left_eigenvectors=left,
        compute_right_eigenvectors=True,
        enable_eigvec_derivs=enable_eigvec_derivs,
        implementation=implementation,
    )
    w, vr = outs[0], outs[-1]
    da = ops.bind_convert(da, ty(vr).dtype)
    if not (left or right):
        dw = ops.reduce_sum(
            ops.mul(_lu_solve_square(vr, da), ops.matrix_transpose(vr)), (len(shape(vr)) - 1,)
        )
        return [w], [dw]
    dw, dvr = _eig_vec_jvp(w, vr, da)
    primal_out, tangent_out = [w], [dw]
    if left:
        _, dvl = _eig_vec_jvp(ops.conj(w), outs[1], ops.adjoint(da))
        primal_out.append(outs[1])
        tangent_out.append(dvl)
    if right:
        primal_out.append(vr)
        tangent_out.append(dvr)
    return primal_out, tangent_out


define("eig", jvp=_eig_jvp, jvp_kind=LOW_LEVEL, batching=batching_rule("leading_batch", "eig"))


@shape_rule("lu")
def _lu(in_types, params, out_hint):
    nargs(in_types, 1, "lu")
    x, b, m, n = _matrix("lu", in_types[0])
    return [
        x,
        x.update(shape=b + (_min(m, n),), dtype="i32", weak_type=False),
        x.update(shape=b + (m,), dtype="i32", weak_type=False),
    ]


def _lu_factors(lu):
    """The unit lower L (m x m) and upper U (n x n) of a packed LU (m x n), as JAX pads them."""
    *_, m, n = shape(lu)
    k = min(m, n)
    nd = len(shape(lu))
    zero = ops.lit(0, lu)
    keep = [(0, 0, 0)] * (nd - 2)
    l_part = ops.tril(ops.slice_in_dim(lu, 0, k, axis=nd - 1), -1)
    l = ops.add(ops.bind_pad(l_part, zero, keep + [(0, 0, 0), (0, m - k, 0)]), _eye_over(lu, m))
    u = ops.bind_pad(
        ops.triu(ops.slice_in_dim(lu, 0, k, axis=nd - 2)), zero, keep + [(0, n - k, 0), (0, 0, 0)]
    )
    if n > k:
        pad = ops.bind_pad(ops.eye(ty(lu).dtype, n - k), zero, ((k, 0, 0), (k, 0, 0)))
        u = ops.add(u, ops.broadcast_in_dim(pad, shape(u), (nd - 2, nd - 1)))
    return l, u


def _eye_over(x, n):
    """I_n broadcast over `x`'s batch dimensions."""
    nd = len(shape(x))
    return ops.broadcast_in_dim(ops.eye(ty(x).dtype, n), shape(x)[:-2] + (n, n), (nd - 2, nd - 1))


def _take_rows(x, perm):
    """`x[..., perm, :]` per batch element (`perm`: `...,m` indices)."""
    nd = len(shape(x))
    idx = ops.broadcast_in_dim(perm, shape(x), tuple(range(nd - 1)))
    return ops.take_along(x, idx, nd - 2)


def _take_cols(x, perm):
    """`x[..., :, perm]` per batch element (`perm`: `...,n` indices)."""
    nd = len(shape(x))
    idx = ops.broadcast_in_dim(perm, shape(x), (*range(nd - 2), nd - 1))
    return ops.take_along(x, idx, nd - 1)


def _lu_jvp(primals, tangents, **params):
    """JAX's `_lu_jvp_rule` (De Hoog, Anderssen, Lukas): with X = L^-1 P A' U^-1,
    LU' = L tril(X, -1) + triu(X) U."""
    (a_dot,) = tangents
    outs = rebind_primal("lu", primals, params)
    lu, _, permutation = outs
    l, u = _lu_factors(lu)
    la = _tri_solve(
        l, _take_rows(a_dot, permutation), left_side=True, lower=True, unit_diagonal=True
    )
    lau = _tri_solve(u, la, left_side=False, lower=False)
    lu_dot = ops.add(_hmm(l, ops.tril(lau, -1)), _hmm(ops.triu(lau), u))
    return outs, [lu_dot] + _int_zeros(outs[1:])


define("lu", jvp=_lu_jvp, jvp_kind=LOW_LEVEL, batching=batching_rule("leading_batch", "lu"))


@shape_rule("qr")
def _qr(in_types, params, out_hint):
    nargs(in_types, 1, "qr")
    x, b, m, n = _matrix("qr", in_types[0])
    k = m if params.get("full_matrices") else _min(m, n)
    outs = [x.update(shape=b + (m, k)), x.update(shape=b + (k, n))]
    if params.get("pivoting"):
        outs.append(x.update(shape=b + (n,), dtype="i32", weak_type=False))
    return outs


def _thin_qr_jvp(q, r, dx):
    """JAX's `_thin_qr_jvp` (m >= n): see j-towns.github.io/papers/qr-derivative.pdf."""
    dx_rinv = _tri_solve(r, dx)
    qt_dx_rinv = ops.batch_matmul(ops.adjoint(q), dx_rinv)
    lower = ops.tril(qt_dx_rinv, -1)
    do = ops.sub(lower, ops.adjoint(lower))
    if is_complex_dtype(ty(q).dtype):
        im = ops.sub(qt_dx_rinv, ops.bind_convert(ops.real(qt_dx_rinv), ty(q).dtype))
        do = ops.add(do, ops.mul(ops.eye_like(do), im))
    dq = ops.add(ops.batch_matmul(q, ops.sub(do, qt_dx_rinv)), dx_rinv)
    dr = ops.batch_matmul(ops.sub(qt_dx_rinv, do), r)
    return dq, dr


def _qr_jvp(primals, tangents, *, pivoting=False, full_matrices=False, use_magma=None):
    """JAX's `qr_jvp_rule`: thin and square QR, the wide case (m < n) by blocks, and full
    matrices of a tall one (m > n)."""
    (x,), (dx,) = primals, tangents
    params = {"full_matrices": full_matrices, "pivoting": pivoting, "use_magma": use_magma}
    outs = rebind_primal("qr", primals, params)
    q, r = outs[:2]
    *_, m, n = shape(x)
    nd = len(shape(x))
    if pivoting:
        dx = _take_cols(dx, outs[2])
    if m < n:
        x2 = ops.slice_in_dim(x, m, n, axis=nd - 1)
        dx1 = ops.slice_in_dim(dx, 0, m, axis=nd - 1)
        dx2 = ops.slice_in_dim(dx, m, n, axis=nd - 1)
        dq, dr1 = _thin_qr_jvp(q, ops.slice_in_dim(r, 0, m, axis=nd - 1), dx1)
        dr2 = ops.add(ops.batch_matmul(ops.adjoint(dq), x2), ops.batch_matmul(ops.adjoint(q), dx2))
        return outs, [dq, ops.bind_concatenate([dr1, dr2], nd - 1)] + _int_zeros(outs[2:])
    if full_matrices and m != n:
        return outs, list(_full_qr_jvp(q, r, dx, m, n, nd)) + _int_zeros(outs[2:])
    dq, dr = _thin_qr_jvp(q, r, dx)
    return outs, [dq, dr] + _int_zeros(outs[2:])


def _full_qr_jvp(q, r, dx, m, n, nd):
    """JAX's full-matrices QR JVP for m > n (arXiv:2409.13374, eqs. 32-33): the thin JVP
    of the first n columns, the other m - n columns of dQ from it, dR padded with zero rows."""
    rows, cols = nd - 2, nd - 1
    q_mn = ops.slice_in_dim(q, 0, n, axis=cols)
    q_mp = ops.slice_in_dim(q, n, m, axis=cols)
    dq_mn, dr_nn = _thin_qr_jvp(q_mn, ops.slice_in_dim(r, 0, n, axis=rows), dx)
    q_nn = ops.slice_in_dim(q_mn, 0, n, axis=rows)
    q_pn = ops.slice_in_dim(q_mn, n, m, axis=rows)
    dq_nn = ops.slice_in_dim(dq_mn, 0, n, axis=rows)
    dq_pn = ops.slice_in_dim(dq_mn, n, m, axis=rows)
    # Eq 33: Z_pn = Q_pn (Q_nn - I)^-1, as Z_pn^H = (Q_nn - I)^-H Q_pn^H (a solve, no inverse)
    z_pn_h = _lu_solve_square(ops.adjoint(ops.sub(q_nn, ops.eye_like(q_nn))), ops.adjoint(q_pn))
    z_pn = ops.adjoint(z_pn_h)
    # Eq 32: dQ_mp = dQ_mn Z_pn^H - (Q_mn + Q_mp Z_pn) (dQ_pn - Z_pn dQ_nn)^H
    mm = ops.batch_matmul
    dq_mp = ops.sub(
        mm(dq_mn, z_pn_h),
        mm(ops.add(q_mn, mm(q_mp, z_pn)), ops.adjoint(ops.sub(dq_pn, mm(z_pn, dq_nn)))),
    )
    zero_rows = ops.zeros(ty(dr_nn).update(shape=shape(dr_nn)[:-2] + (m - n, n)))
    return (
        ops.bind_concatenate([dq_mn, dq_mp], cols),
        ops.bind_concatenate([dr_nn, zero_rows], rows),
    )


define(
    "qr",
    bind_params=_bind_defaults(pivoting=False, use_magma=None),
    jvp=_qr_jvp,
    jvp_kind=LOW_LEVEL,
    batching=batching_rule("leading_batch", "qr"),
)


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


def _svd_jvp(
    primals, tangents, *, full_matrices, compute_uv=True, subset_by_index=None, algorithm=None
):
    """JAX's `_svd_jvp_rule` (distinct nonzero singular values for U and V)."""

    (A,), (dA,) = primals, tangents
    *_, m, n = shape(A)
    k = min(m, n)
    if compute_uv and full_matrices and m != n:
        raise JaxprError(
            "Singular value decomposition JVP not implemented for full matrices (as in JAX): "
            "use full_matrices=False",
            current().loc,
        )
    if compute_uv and not (
        subset_by_index is None or tuple(int(i) for i in subset_by_index) == (0, k)
    ):
        raise JaxprError(
            "Singular value decomposition JVP not implemented for subset_by_index with "
            "compute_uv=True (as in JAX)",
            current().loc,
        )
    s, U, Vt = _multi_bind(
        "svd",
        [A],
        algorithm=algorithm,
        compute_uv=True,
        full_matrices=False,
        subset_by_index=subset_by_index,
    )
    dtype = ty(A).dtype
    cplx = is_complex_dtype(dtype)
    Ut, V = ops.adjoint(U), ops.adjoint(Vt)
    dS = ops.batch_matmul(ops.batch_matmul(Ut, dA), V)
    ds = ops.diagonal(ops.real(dS) if cplx else dS)
    if not compute_uv:
        return [s], [ds]
    s_row, s_col = ops.row_vector(s), ops.col_vector(s)
    s_diffs = ops.mul(ops.add(s_row, s_col), ops.sub(s_row, s_col))
    eye = ops.eye_like(s_diffs)
    F = ops.sub(ops.div(ops.lit(1, s), ops.add(s_diffs, eye)), eye)
    s_row_a, s_col_a = ops.bind_convert(s_row, dtype), ops.bind_convert(s_col, dtype)
    dSS = ops.mul(s_row_a, dS)
    SdS = ops.mul(s_col_a, dS)
    s_zeros = ops.convert_element_type(ops.eq(s, ops.lit(0, s)), ty(s).dtype)
    s_inv = ops.sub(ops.div(ops.lit(1, s), ops.add(s, s_zeros)), s_zeros)
    s_inv_mat = ops.bind_convert(ops.diag_matrix(s_inv), dtype)
    dUdV_diag = ops.mul(ops.mul(ops.lit(0.5, dS), ops.sub(dS, ops.adjoint(dS))), s_inv_mat)
    Fa = ops.bind_convert(F, dtype)
    dU = ops.batch_matmul(U, ops.add(ops.mul(Fa, ops.add(dSS, ops.adjoint(dSS))), dUdV_diag))
    dV = ops.batch_matmul(V, ops.mul(Fa, ops.add(SdS, ops.adjoint(SdS))))
    if m > n:
        dAV = ops.batch_matmul(dA, V)
        proj = ops.sub(dAV, ops.batch_matmul(U, ops.batch_matmul(Ut, dAV)))
        dU = ops.add(dU, ops.div(proj, _rows_like(s, dtype, m)))
    if n > m:
        dAHU = ops.batch_matmul(ops.adjoint(dA), U)
        proj = ops.sub(dAHU, ops.batch_matmul(V, ops.batch_matmul(Vt, dAHU)))
        dV = ops.add(dV, ops.div(proj, _rows_like(s, dtype, n)))
    outs = [s, U, Vt]
    return outs, [ds, dU, ops.adjoint(dV)]


def _rows_like(s, dtype, rows):
    """`s[..., None, :]` broadcast to `rows` rows, in `dtype`."""
    shp = shape(s)
    nd = len(shp)
    out = shp[:-1] + (rows, shp[-1])
    return ops.bind_convert(ops.broadcast_in_dim(s, out, (*range(nd - 1), nd)), dtype)


define(
    "svd",
    bind_params=_bind_defaults(algorithm=None, subset_by_index=None),
    jvp=_svd_jvp,
    jvp_kind=LOW_LEVEL,
    batching=batching_rule("leading_batch", "svd"),
)


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


def _triangular_solve_jvp_a(
    g_a, ans, a, b, *, left_side, lower, transpose_a, conjugate_a, unit_diagonal
):
    """JAX's `_triangular_solve_jvp_rule_a`: -A^-1 A' X (or -X A' A^-1), in the cheaper order."""
    m, n = shape(b)[-2:]
    k = 1 if unit_diagonal else 0
    g_a = ops.tril(g_a, -k) if lower else ops.triu(g_a, k)
    g_a = ops.neg(g_a)
    g_a = ops.matrix_transpose(g_a) if transpose_a else g_a
    g_a = ops.conj(g_a) if conjugate_a and is_complex_dtype(ty(g_a).dtype) else g_a
    kws = dict(
        left_side=left_side,
        lower=lower,
        transpose_a=transpose_a,
        conjugate_a=conjugate_a,
        unit_diagonal=unit_diagonal,
    )

    def a_inverse(rhs):
        return _tri_solve(a, rhs, **kws)

    if left_side:
        return a_inverse(_hmm(g_a, ans)) if m > n else _hmm(a_inverse(g_a), ans)
    return a_inverse(_hmm(ans, g_a)) if m < n else _hmm(ans, a_inverse(g_a))


def _triangular_solve_jvp_b(g_b, ans, a, b, **params):
    return _tri_solve(a, g_b, **params)


def _triangular_solve_transpose(cts, a, b, *, transpose_a, **params):
    """JAX's `_triangular_solve_transpose_rule`: linear in b only; solve with op(A)^T."""
    ops.require_primal("'triangular_solve' in its matrix operand", [a])
    (ct,) = cts
    if is_zero(ct):
        return [None, Zero(tangent_type(ty(b)))]
    return [None, _tri_solve(a, ct, transpose_a=not transpose_a, **params)]


defjvp2("triangular_solve", _triangular_solve_jvp_a, _triangular_solve_jvp_b)
define(
    "triangular_solve",
    transpose=_triangular_solve_transpose,
    batching=batching_rule("leading_batch", "triangular_solve"),
)


@shape_rule("tridiagonal_solve")
def _tridiagonal_solve(in_types, params, out_hint):
    nargs(in_types, 4, "tridiagonal_solve")
    return [arr(in_types[3], "tridiagonal_solve", 3)]


def _tridiagonal_product(dl, d, du, b):
    """The tridiagonal matrix (dl, d, du) times b (JAX's `_tridiagonal_product`)."""
    nd = len(shape(b))
    m = shape(b)[-2]
    keep = [(0, 0, 0)] * (nd - 2)

    def col(v):
        return ops.broadcast_in_dim(v, shape(v) + (shape(b)[-1],), tuple(range(nd - 1)))

    def rows(x, lo, hi, axis):
        return ops.slice_in_dim(x, lo, hi, axis=axis)

    y = ops.mul(col(d), b)
    below = ops.mul(col(rows(dl, 1, m, nd - 2)), rows(b, 0, m - 1, nd - 2))
    above = ops.mul(col(rows(du, 0, m - 1, nd - 2)), rows(b, 1, m, nd - 2))
    zero = ops.lit(0, b)
    y = ops.add(y, ops.bind_pad(below, zero, keep + [(1, 0, 0), (0, 0, 0)]))
    return ops.add(y, ops.bind_pad(above, zero, keep + [(0, 1, 0), (0, 0, 0)]))


def _tridiagonal_solve_jvp(primals, tangents, *, perturb_singular=False):
    """JAX's `_tridiagonal_solve_jvp_rule`: x' = T^-1 (b' - T' x)."""
    from ..ad.ops import add_tangents, instantiate

    *diags, _ = primals
    *diags_dot, b_dot = tangents
    params = {"perturb_singular": perturb_singular}
    (ans,) = rebind_primal("tridiagonal_solve", primals, params)
    if all(is_zero(t) for t in diags_dot):
        rhs = b_dot
    else:
        matvec_dot = _tridiagonal_product(*[instantiate(t) for t in diags_dot], ans)
        rhs = add_tangents(b_dot, ops.neg(matvec_dot))
    return [ans], [ops.bind("tridiagonal_solve", *diags, instantiate(rhs), **params)]


def _tridiagonal_solve_transpose(cts, dl, d, du, b, *, perturb_singular=False):
    """JAX's `_tridiagonal_solve_transpose_rule`: solve with the transposed matrix, whose
    sub-diagonal is du shifted down and super-diagonal dl shifted up."""
    ops.require_primal("'tridiagonal_solve' in its diagonals", [dl, d, du])
    (ct,) = cts
    if is_zero(ct):
        return [None, None, None, Zero(tangent_type(ty(b)))]
    nd = len(shape(dl))
    m = shape(dl)[-1]
    keep = [(0, 0, 0)] * (nd - 1)
    zero = ops.lit(0, dl)
    dl_t = ops.bind_pad(ops.slice_in_dim(du, 0, m - 1, axis=nd - 1), zero, keep + [(1, 0, 0)])
    du_t = ops.bind_pad(ops.slice_in_dim(dl, 1, m, axis=nd - 1), zero, keep + [(0, 1, 0)])
    out = ops.bind("tridiagonal_solve", dl_t, d, du_t, ct, perturb_singular=perturb_singular)
    return [None, None, None, out]


define(
    "tridiagonal_solve",
    jvp=_tridiagonal_solve_jvp,
    jvp_kind=LOW_LEVEL,
    transpose=_tridiagonal_solve_transpose,
    batching=batching_rule("leading_batch", "tridiagonal_solve"),
)


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


define(
    "tridiagonal",
    jvp=_refuse_jvp("tridiagonal", "a reduction to tridiagonal form"),
    batching=batching_rule("leading_batch", "tridiagonal"),
)


@shape_rule("hessenberg")
def _hessenberg(in_types, params, out_hint):
    nargs(in_types, 1, "hessenberg")
    x, b, m, n = _matrix("hessenberg", in_types[0], square=True)
    return [x, x.update(shape=b + (dim_add(n, -1),))]


define(
    "hessenberg",
    jvp=_refuse_jvp("hessenberg", "a reduction to Hessenberg form"),
    batching=batching_rule("leading_batch", "hessenberg"),
)


@shape_rule("schur")
def _schur(in_types, params, out_hint):
    nargs(in_types, 1, "schur")
    x, _, _, _ = _matrix("schur", in_types[0], square=True)
    return [x, x] if params.get("compute_schur_vectors", True) else [x]


define(
    "schur",
    jvp=_refuse_jvp("schur", "a Schur decomposition"),
    batching=batching_rule("leading_batch", "schur"),
)


@shape_rule("householder_product")
def _householder_product(in_types, params, out_hint):
    nargs(in_types, 2, "householder_product")
    return [arr(in_types[0], "householder_product", 0)]


define(
    "householder_product",
    jvp=_refuse_jvp("householder_product", "a product of Householder reflectors"),
    batching=batching_rule("leading_batch", "householder_product"),
)


@shape_rule("lu_pivots_to_permutation")
def _lu_pivots_to_permutation(in_types, params, out_hint):
    x = one_arr(in_types, "lu_pivots_to_permutation")
    size = int_param(params, "permutation_size")
    return [x.update(shape=x.shape[:-1] + (size,))]


defjvp_zero("lu_pivots_to_permutation")
define(
    "lu_pivots_to_permutation", batching=batching_rule("leading_batch", "lu_pivots_to_permutation")
)


# ---------------------------------------------------------------- fft
# fft[fft_type, fft_lengths]: FFT, IFFT (complex -> complex), RFFT (real -> half spectrum),
# IRFFT (half spectrum -> real).  Linear: the JVP rebinds it on the tangent; the transposes
# are JAX's `_fft_transpose_rule` (FFT and IFFT are their own transposes: the DFT matrix is
# symmetric), `_rfft_transpose` (an IRFFT of the conjugated cotangent halved off the DC and
# Nyquist bins, times N) and `_irfft_transpose` (an RFFT of the cotangent, twice off those
# bins, over N, conjugated: JAX's convention for complex cotangents).  A symbolic length
# keeps them symbolic as JAX's do (N a `dim_as_value`, the mask over floordiv(b, 2) + 1 bins),
# with the Nyquist bin JAX 0.12 leaves out (`_nyquist_index`).  The batching rule moves the
# batch axis to the front (the transformed axes are the minor ones).

_FFT_KINDS = ("FFT", "IFFT", "RFFT", "IRFFT")


def _fft_kind(ft) -> str:
    """FFT / IFFT / RFFT / IRFFT from the printed `fft_type` (an int, `FftType.X` or a name)."""
    if isinstance(ft, EnumValue):
        return ft.member.upper()
    if isinstance(ft, int) or str(ft).isdigit():
        return _FFT_KINDS[int(ft)]
    return str(ft).rsplit(".", 1)[-1].upper()


def _fft_type_like(ft, kind: str):
    """The `fft_type` value of `kind`, written as `ft` is (int, enum or name)."""
    if isinstance(ft, EnumValue):
        return EnumValue(ft.cls, kind)
    if isinstance(ft, int) or str(ft).isdigit():
        return _FFT_KINDS.index(kind)
    prefix = str(ft).rpartition(".")[0]
    return f"{prefix}.{kind}" if prefix else kind


@shape_rule("fft")
def _fft(in_types, params, out_hint):
    x = one_arr(in_types, "fft")
    kind = _fft_kind(params.get("fft_type"))
    lengths = param_dims(need(params, "fft_lengths"))
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


def _bind_fft(eqn, p, dims):
    import jax

    from ..backend.prims import to_jax
    from ..backend.values import eval_dim

    ft = jax.lax.FftType[_fft_kind(p["fft_type"])]
    # a symbolic length (`fft_lengths=(b,)`) takes its run's size (`--dim b=5`)
    lengths = tuple(
        n if isinstance(n, int) else eval_dim(str(n), dims) for n in param_dims(p["fft_lengths"])
    )
    return {"fft_type": ft, "fft_lengths": to_jax(lengths)}


def _size_value(n, dtype: str, weak_type: bool = False):
    """The size `n` as a scalar of `dtype`: a literal, or for a symbolic size JAX's
    `dim_as_value[dim=n]` converted to `dtype` (as JAX's `N * x` on a symbolic N binds)."""
    if isinstance(n, int):
        return ops.lit(n, dtype)
    value = ops.bind("dim_as_value", dim=SymExpr(str(n)))
    return ops.convert_element_type(value, dtype, weak_type=weak_type)


def _nyquist_index(n_last):
    """Where the mask's Nyquist 1 goes: the last bin `m - 1` of an even length; for a
    symbolic length `floordiv(n, 2)*mod(n + 1, 2)`, which is that bin when n is even and the
    DC bin (already 1) when it is odd.  JAX 0.12 takes every symbolic length as odd (its
    `not n % 2` is `not` of a non-zero expression) and so divides the Nyquist bin of an
    even one by 2, halving that bin's share of its gradient; this mask does not."""
    if isinstance(n_last, int):
        return None if n_last % 2 else ops.lit(n_last // 2, "i32")
    index = f"{dim_floordiv(n_last, 2)}*mod({dim_add(n_last, 1)}, 2)"
    return ops.bind("dim_as_value", dim=SymExpr(index))


def _hermitian_mask(like, n_last, dtype: str):
    """JAX's mask over the half spectrum of an n_last-point transform (`like`'s last axis):
    1 at the DC bin and, for even n_last, at the Nyquist bin, 2 elsewhere; broadcast to
    `like`'s shape."""
    m = shape(like)[-1]
    mask = ops.full(ShapedArray((m,), dtype), 2.0)
    index = ShapedArray((), "i32")
    for k in (ops.lit(0, index), _nyquist_index(n_last)):
        if k is not None:
            one = ops.full(ShapedArray((1,), dtype), 1.0)
            mask = ops.bind("dynamic_update_slice", mask, one, k)
    return ops.broadcast_in_dim(mask, shape(like), (len(shape(like)) - 1,))


def _fft_transpose(ct, operand, *, fft_type, fft_lengths):
    kind = _fft_kind(fft_type)
    if kind in ("FFT", "IFFT"):
        return [ops.bind("fft", ct, fft_type=fft_type, fft_lengths=fft_lengths)]
    lengths = param_dims(fft_lengths)
    size = prod(lengths)
    if kind == "RFFT":
        cdt = ty(ct).dtype
        mask = _hermitian_mask(ct, lengths[-1], cdt)
        half = ops.div(ops.conj(ct), mask)
        out = ops.bind(
            "fft", half, fft_type=_fft_type_like(fft_type, "IRFFT"), fft_lengths=fft_lengths
        )
        return [ops.mul(_size_value(size, ty(out).dtype), out)]
    spec = ops.bind("fft", ct, fft_type=_fft_type_like(fft_type, "RFFT"), fft_lengths=fft_lengths)
    cdt = ty(spec).dtype
    mask = _hermitian_mask(spec, lengths[-1], cdt)
    scaled = ops.mul(ops.mul(_inverse_size(size, ty(ct).dtype, cdt), mask), spec)
    return [ops.conj(scaled)]


def _inverse_size(size, real: str, cdt: str):
    """1 / size as a scalar of the complex dtype `cdt`; a symbolic size is divided at run
    time, in the real dtype, as JAX's `1 / math.prod(fft_lengths)` binds."""
    if isinstance(size, int):
        return ops.lit(1 / size, cdt)
    inverse = ops.div(ops.lit(1.0, real), _size_value(size, real, weak_type=True))
    return ops.convert_element_type(inverse, cdt)


def _fft_batching(args, dims, **params):
    from ..ad.batching import bind as bind_batched
    from ..ad.batching import moveaxis

    x = moveaxis(args[0], dims[0], 0)
    return bind_batched("fft", x, **params), [0]


deflinear2("fft", _fft_transpose)
define("fft", bind_params=_bind_fft, batching=_fft_batching)
