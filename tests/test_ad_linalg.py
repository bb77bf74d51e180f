"""Differentiation and batching of the linear-algebra primitives against JAX.

Functions users write (jnp.linalg.solve / inv / det / slogdet / cholesky / eigh / qr / svd / eig,
jax.scipy.linalg.solve_triangular / lu_factor + lu_solve, tridiagonal_solve, a Gaussian-process
negative log-likelihood) are traced with JAX; the tool's jvp, vjp, grad and linearize|transpose
(dot-product test) are compared with jax.jvp / jax.vjp / jax.grad, second order with
jax.jvp(jax.grad(f)), and vmap with jax.vmap.  Inputs are well conditioned (SPD matrices for
cholesky/eigh, distinct eigenvalues and singular values); eigenvectors and singular vectors
enter through gauge-invariant functions.  Tolerances follow JAX's linalg_test.py (float32: a
few 1e-3 for derivatives of decompositions).
"""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
import jax.scipy.linalg as jsl  # noqa: E402
from jax_oracle import ir, run, together  # noqa: E402

from jaxprtool.ad.api import (  # noqa: E402
    grad_jaxpr,
    jvp_jaxpr,
    linearize_jaxpr,
    transpose_jaxpr,
    vjp_jaxpr,
)
from jaxprtool.ad.batching import vmap_jaxpr  # noqa: E402
from jaxprtool.ad.jacobians import jacfwd, jacrev  # noqa: E402
from jaxprtool.core import Jaxpr, JaxprError  # noqa: E402
from jaxprtool.text.printer import print_jaxpr  # noqa: E402

F32 = np.float32
#: XLA's fastest compilation (the programs are small; compiling dominates the run time)
FAST = {"xla_backend_optimization_level": 0}


def _jax_jit(f):
    return jax.jit(f, compiler_options=FAST)


def _mat(m, n, seed):
    return np.random.default_rng(seed).uniform(-1, 1, (m, n)).astype(F32)


def _spd(n, seed):
    m = _mat(n, n, seed)
    return (m @ m.T + n * np.eye(n)).astype(F32)


def _well(n, seed):
    """A well-conditioned general matrix."""
    return (_mat(n, n, seed) + 3 * np.eye(n)).astype(F32)


def _distinct_sym(n, seed):
    """Symmetric with well-separated eigenvalues 1..n (times 2)."""
    q, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((n, n)))
    return (q @ np.diag(2.0 * np.arange(1, n + 1)) @ q.T).astype(F32)


def _distinct_sv(m, n, seed):
    """Singular values well apart (1..k, times 2)."""
    k = min(m, n)
    rng = np.random.default_rng(seed)
    u, _ = np.linalg.qr(rng.standard_normal((m, k)))
    v, _ = np.linalg.qr(rng.standard_normal((n, k)))
    return (u @ np.diag(2.0 * np.arange(1, k + 1)) @ v.T).astype(F32)


def _eigh_fn(a):
    w, v = jnp.linalg.eigh(a)
    return w, v**2, (v * jnp.sin(w)) @ v.T  # values; sign-invariant; a matrix function


def _svd_fn(a):
    u, s, vt = jnp.linalg.svd(a, full_matrices=False)
    return s, u**2, (u * jnp.sqrt(s)) @ vt  # values; sign-invariant; gauge-invariant product


def _gp_nll(log_ls, x, y):
    """Negative log-likelihood of a GP with an RBF kernel: cholesky + solve_triangular."""
    d = x[:, None] - x[None, :]
    k = jnp.exp(-0.5 * d**2 / jnp.exp(2 * log_ls)) + 0.1 * jnp.eye(x.shape[0])
    chol = jnp.linalg.cholesky(k)
    alpha = jsl.solve_triangular(chol, y, lower=True)
    return 0.5 * jnp.sum(alpha**2) + jnp.sum(jnp.log(jnp.diagonal(chol)))


def _tridiag(n, seed):
    rng = np.random.default_rng(seed)
    dl = rng.uniform(-1, 1, n).astype(F32)
    du = rng.uniform(-1, 1, n).astype(F32)
    dl[0], du[-1] = 0, 0
    d = (rng.uniform(-1, 1, n) + 4).astype(F32)
    return dl, d, du, _mat(n, 2, seed + 1)


def _eigvals_fn(a):
    w = jnp.linalg.eigvals(a)
    return jnp.real(w), jnp.imag(w)


def _eig_vec_fn(a):
    w, v = jax.lax.linalg.eig(a, compute_left_eigenvectors=False, enable_eigvec_derivs=True)
    return jnp.abs(v) ** 2, jnp.real(w)


def _solve(a, b):
    return jnp.linalg.solve(a, b)


def _symmetric_solve(a, b):
    """lax.custom_linear_solve with symmetric=True (transpose_solve is solve)."""
    factor = jsl.cho_factor(a)
    return jax.lax.custom_linear_solve(
        lambda x: a @ x, b, lambda _, x: jsl.cho_solve(factor, x), symmetric=True
    )


def _cg(a, b):
    """jax.scipy.sparse.linalg.cg: a symmetric custom_linear_solve around a while loop."""
    return jax.scipy.sparse.linalg.cg(lambda x: a @ x, b, tol=1e-10, maxiter=40)[0]


def _complex_args():
    rng = np.random.default_rng(37)
    m = (rng.standard_normal((3, 3)) + 1j * rng.standard_normal((3, 3))).astype(np.complex64)
    return (m @ m.conj().T + 3 * np.eye(3)).astype(np.complex64), m + 2 * np.eye(3, dtype=m.dtype)


def _complex_fn(h, m):
    """Hermitian and general complex matrices through the complex branches of the rules."""
    return (
        jnp.linalg.cholesky(h),
        jnp.linalg.eigh(h)[0],
        jnp.linalg.qr(m),
        jnp.linalg.solve(h + m, m[:, 0]),
    )


def _batched_fn(s, w):
    """Stacks of matrices: the rules on leading batch dimensions."""
    return (
        jnp.linalg.cholesky(s),
        jnp.linalg.qr(w),
        jsl.lu_factor(w)[0],
        jnp.linalg.solve(w, s[..., :1]),
        jnp.linalg.eigh(s)[0],
        jnp.linalg.svd(w, compute_uv=False),
    )


#: (name, f, args, tolerance)
CASES = [
    ("complex", _complex_fn, _complex_args(), 5e-3),
    (
        "batched",
        _batched_fn,
        (np.stack([_spd(4, 38), _spd(4, 39)]), np.stack([_well(4, 38), _well(4, 39)])),
        5e-3,
    ),
    ("custom_linear_solve_symmetric", _symmetric_solve, (_spd(4, 33), _mat(4, 1, 34)[:, 0]), 2e-3),
    ("cg", _cg, (_spd(4, 35), _mat(4, 1, 36)[:, 0]), 2e-3),
    ("solve_vec", lambda a, b: jnp.linalg.solve(a, b), (_well(4, 1), _mat(4, 1, 2)[:, 0]), 2e-3),
    ("solve_mat", lambda a, b: jnp.linalg.solve(a, b), (_well(4, 3), _mat(4, 2, 4)), 2e-3),
    ("inv", jnp.linalg.inv, (_well(4, 5),), 2e-3),
    ("det", jnp.linalg.det, (_well(3, 6),), 5e-3),
    ("slogdet", lambda a: jnp.linalg.slogdet(a)[1], (_well(4, 7),), 2e-3),
    ("cholesky", jnp.linalg.cholesky, (_spd(4, 8),), 2e-3),
    ("eigh", _eigh_fn, (_distinct_sym(4, 9),), 5e-3),
    ("qr_square", jnp.linalg.qr, (_well(4, 10),), 2e-3),
    ("qr_tall", jnp.linalg.qr, (_mat(5, 3, 11),), 2e-3),
    ("qr_wide", jnp.linalg.qr, (_mat(3, 5, 12),), 2e-3),
    ("qr_tall_complete", lambda a: jnp.linalg.qr(a, mode="complete"), (_mat(5, 3, 37),), 2e-3),
    ("svd_values", lambda a: jnp.linalg.svd(a, compute_uv=False), (_distinct_sv(5, 3, 13),), 2e-3),
    ("svd_square", _svd_fn, (_distinct_sv(4, 4, 14),), 5e-3),
    ("svd_tall", _svd_fn, (_distinct_sv(5, 3, 15),), 5e-3),
    ("svd_wide", _svd_fn, (_distinct_sv(3, 5, 16),), 5e-3),
    (
        "solve_triangular",
        lambda a, b: jsl.solve_triangular(a, b, lower=True),
        (np.tril(_well(4, 17)), _mat(4, 2, 18)),
        2e-3,
    ),
    (
        "solve_triangular_upper_T",
        lambda a, b: jsl.solve_triangular(a, b, trans=1, lower=False, unit_diagonal=True),
        (np.triu(_well(4, 19)), _mat(4, 5, 20)),
        2e-3,
    ),
    (
        "triangular_solve_right",
        lambda a, b: jax.lax.linalg.triangular_solve(a, b, left_side=False, lower=True),
        (np.tril(_well(3, 21)), _mat(5, 3, 22)),
        2e-3,
    ),
    (
        "lu_solve",
        lambda a, b: jsl.lu_solve(jsl.lu_factor(a), b),
        (_well(4, 23), _mat(4, 2, 24)),
        2e-3,
    ),
    ("lu_factor", lambda a: jsl.lu_factor(a)[0], (_well(4, 25),), 2e-3),
    ("lu_tall", lambda a: jsl.lu(a)[1:], (_mat(5, 3, 29) + np.eye(5, 3, dtype=F32),), 2e-3),
    ("lu_wide", lambda a: jsl.lu(a)[1:], (_mat(3, 5, 29) + np.eye(3, 5, dtype=F32),), 2e-3),
    ("gp_nll", _gp_nll, (F32(0.3), _mat(6, 1, 26)[:, 0] * 2, _mat(6, 1, 27)[:, 0]), 2e-3),
    (
        "tridiagonal_solve",
        jax.lax.linalg.tridiagonal_solve,
        _tridiag(5, 28),
        2e-3,
    ),
    ("eigvals", _eigvals_fn, (_well(4, 30),), 5e-3),
    ("eig_vectors", _eig_vec_fn, (_distinct_sym(3, 31) + np.triu(_mat(3, 3, 32), 1) * 0.3,), 5e-3),
]
IDS = [c[0] for c in CASES]


def _leaves(x):
    return [np.asarray(v) for v in jax.tree_util.tree_leaves(x)]


def _close(a, b, tol, what):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=tol, rtol=tol, err_msg=what)


def _like(x, seed):
    """Random values of x's shape and dtype (x: an array or a jax.ShapeDtypeStruct)."""
    x = x if hasattr(x, "dtype") else np.asarray(x)
    vals = np.random.default_rng(seed).uniform(-1, 1, x.shape)
    if np.issubdtype(x.dtype, np.complexfloating):
        vals = vals + 1j * np.random.default_rng(seed + 1).uniform(-1, 1, x.shape)
    return vals.astype(x.dtype)


def _evaluate_together(*items, oracle=None):
    """Run several (program, args) pairs as one program, and JAX's `oracle` (a (function,
    args) pair) beside it, in one XLA compilation; the programs' outputs, one list per pair,
    then the oracle's result when there is one."""
    progs = [p for p, _ in items]
    merged = Jaxpr(
        (),
        tuple(v for p in progs for v in p.invars),
        tuple(e for p in progs for e in p.eqns),
        tuple(x for p in progs for x in p.outvars),
    )
    calls = [(merged, [a for _, args in items for a in args])]
    flat, *want = together(*calls, *([oracle] if oracle else []))
    outs, k = [], 0
    for p in progs:
        outs.append(flat[k : k + len(p.outvars)])
        k += len(p.outvars)
    return outs + want


def _scalar(f):
    """A scalar loss of f's outputs (a fixed nonlinear summary, no captured constants)."""

    def loss(*a):
        leaves = jax.tree_util.tree_leaves(f(*a))
        return sum(jnp.sum(jnp.real(jnp.sin(o)) * (k + 1)) for k, o in enumerate(leaves))

    return loss


def _check_case(name, f, args, tol, grad=True):
    """jvp, vjp, grad (with value; grad=False: not) and linearize|transpose of f against
    JAX."""
    n = len(args)
    j = ir(f, *args)
    loss = _scalar(f)
    argnums = tuple(range(n))
    tangents = [_like(a, 100 + i) for i, a in enumerate(args)]
    tree = jax.tree_util.tree_structure(jax.eval_shape(f, *args))
    cts = [
        _like(o, 200 + i) for i, o in enumerate(jax.tree_util.tree_leaves(jax.eval_shape(f, *args)))
    ]

    def reference(args, tangents, cts):
        out, tan = jax.jvp(f, tuple(args), tuple(tangents))
        _, pull = jax.vjp(f, *args)
        ct = pull(jax.tree_util.tree_unflatten(tree, cts))
        return out, tan, ct, jax.value_and_grad(loss, argnums=argnums)(*args) if grad else ()

    primal, linear, info = linearize_jaxpr(j)
    g = grad_jaxpr(ir(loss, *args), argnums, with_value=True) if grad else Jaxpr((), (), (), ())
    got_jvp, got_vjp, got_grad, got_primal, want = _evaluate_together(
        (jvp_jaxpr(j), args + tangents),
        (vjp_jaxpr(j), args + cts),
        (g, args if grad else []),
        (primal, args),
        oracle=(reference, (args, tangents, cts)),
    )
    ref_out, ref_tan, ref_ct, value_and_grad = want
    ref_out, ref_tan, ref_ct = _leaves(ref_out), _leaves(ref_tan), _leaves(ref_ct)
    for g, r in zip(got_jvp[: len(ref_out)], ref_out):
        _close(g, r, tol, f"{name}: primal")
    for g, r in zip(got_jvp[len(ref_out) :], ref_tan):
        _close(g, r, tol, f"{name}: jvp")
    for g, r in zip(got_vjp[len(ref_out) :], ref_ct):
        _close(g, r, tol, f"{name}: vjp")
    if grad:
        ref_val, ref_grad = value_and_grad
        assert len(got_grad) == 1 + n, name
        _close(got_grad[0], ref_val, tol, f"{name}: value")
        for g, r in zip(got_grad[1:], ref_grad):
            _close(g, r, tol, f"{name}: grad")
    # linearize: the linear program is jax.jvp's tangent map, and passes the dot-product test
    src = {
        "input": args,
        "output": got_primal[: len(info.out_mask)],
        "new": got_primal[len(info.out_mask) :],
    }
    res = [np.asarray(src[r.source][r.index]) for r in info.residuals]
    lt = transpose_jaxpr(linear, [False] * len(res) + [True] * n)
    lv, ltw = _evaluate_together((linear, res + tangents), (lt, res + cts))
    for g, r in zip(lv, ref_tan):
        _close(g, r, tol, f"{name}: linearize")
    for g, r in zip(ltw, ref_ct):
        _close(g, r, tol, f"{name}: linearize|transpose")
    # the bilinear pairing (no conjugation) JAX's transposes satisfy, real part for complex
    lhs = sum(float(np.sum(w * a).real) for w, a in zip(cts, lv))
    rhs = sum(float(np.sum(a * v).real) for a, v in zip(ltw, tangents))
    assert abs(lhs - rhs) <= 1e-3 * max(1.0, abs(lhs)), (name, lhs, rhs)


#: the default run's cases (`make test-full` runs them all): the complex branches of
#: cholesky, eigh, qr and solve (lu, triangular_solve) and a wide svd (cholesky has its
#: second order below, float64 svd beside it).  The symmetric custom_linear_solve around a
#: while loop (cg), the tridiagonal solve and eig's eigenvectors run in `make test-full` only
FAST_CASES = ("complex", "svd_wide")


def _marks(name: str) -> list:
    return [] if name in FAST_CASES else [pytest.mark.slow]


def _in_full_run_only(request) -> bool:
    """Whether this case runs in `make test-full` only (marked slow here or by conftest's
    sampling of the sweep)."""
    return request.node.get_closest_marker("slow") is not None


@pytest.mark.parametrize("case", [pytest.param(c, id=c[0], marks=_marks(c[0])) for c in CASES])
def test_jvp_vjp_grad_linearize_transpose(case, request):
    """The default run's cases leave grad (a third of their compiling: a forward and a
    reverse pass more, the tool's and JAX's) to test_grad_of_the_default_run_s_cases in
    `make test-full`: their vjp, through the same transpose rules, stays here."""
    name, f, args, tol = case
    _check_case(name, f, [np.asarray(a) for a in args], tol, grad=_in_full_run_only(request))


SECOND_ORDER = [
    (
        "cholesky_logdet",
        lambda a: 2 * jnp.sum(jnp.log(jnp.diagonal(jnp.linalg.cholesky(a)))),
        _spd(4, 40),
    ),
    ("solve", lambda a: jnp.sum(jnp.sin(jnp.linalg.solve(a, jnp.arange(1.0, 5.0)))), _well(4, 41)),
    ("det", jnp.linalg.det, _well(3, 42)),
    ("inv", lambda a: jnp.sum(jnp.linalg.inv(a) ** 2), _well(3, 43)),
    ("eigh", lambda a: jnp.sum(jnp.linalg.eigh(a)[0] ** 3), _distinct_sym(3, 44)),
]


#: second order in the default run: through cholesky; `make test-full` through det (lu),
#: eigh, solve and inv too
SECOND_ORDER_FAST = ("cholesky_logdet",)


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(c, id=c[0], marks=() if c[0] in SECOND_ORDER_FAST else pytest.mark.slow)
        for c in SECOND_ORDER
    ],
)
def test_second_order(case):
    """jvp of grad (a Hessian-vector product) against jax.jvp(jax.grad(f)); grad of grad on a
    scalar path through the matrix."""
    name, f, a = case
    t, b, s = _like(a, 50), _like(a, 51), F32(0.1)

    def along(s, a, b):
        return f(a + s * b)

    hvp, gg, (ref_hvp, ref_gg) = _evaluate_together(
        (jvp_jaxpr(grad_jaxpr(ir(f, a))), [a, t]),
        (grad_jaxpr(grad_jaxpr(ir(along, s, a, b))), [s, a, b]),
        oracle=(
            lambda a, t, s, b: (
                jax.jvp(jax.grad(f), (a,), (t,))[1],
                jax.grad(jax.grad(along))(s, a, b),
            ),
            (a, t, s, b),
        ),
    )
    _close(hvp[1], ref_hvp, 5e-3, f"{name}: hvp")
    _close(gg[0], ref_gg, 5e-3, f"{name}: grad of grad")


FLOAT64 = [
    pytest.param(
        "solve",
        lambda a, b: jnp.linalg.solve(a, b),
        [_well(4, 60), _mat(4, 2, 61)],
        marks=pytest.mark.slow,
    ),
    pytest.param("cholesky", jnp.linalg.cholesky, [_spd(4, 62)], marks=pytest.mark.slow),
    pytest.param("svd", _svd_fn, [_distinct_sv(4, 3, 63)]),  # the default run's
]


@pytest.mark.parametrize("name,f,args", FLOAT64, ids=["solve", "cholesky", "svd"])
def test_float64(name, f, args, request):
    """float64 (jax.enable_x64): jvp, vjp, grad, linearize|transpose with tight tolerances
    (grad of the default run's case in test_grad_of_the_default_run_s_cases, as above)."""
    _check_float64(name, f, args, grad=_in_full_run_only(request))


def _check_float64(name, f, args, grad):
    with jax.enable_x64(True):
        args = [a.astype(np.float64) for a in args]
        assert ir(f, *args).invars[0].type.dtype == "f64"
        _check_case(f"{name} f64", f, args, 1e-9, grad=grad)


#: the cases the default run checks without grad (above): their grad, in `make test-full`
GRAD_OF_THE_DEFAULT_RUN_S = [
    pytest.param(c, id=c[0]) for c in CASES if c[0] in ("complex", "svd_wide")
] + [pytest.param(("svd f64", _svd_fn, FLOAT64[2].values[2], None), id="svd_f64")]


@pytest.mark.slow  # (make test-full; grad through the linalg rules stays in make test in
# test_second_order, test_vmap_matches_jax's grad cases and test_grad_output_runs_under_run,
# and these cases' vjp, the same transpose rules, in test_jvp_vjp_grad_linearize_transpose)
@pytest.mark.parametrize("case", GRAD_OF_THE_DEFAULT_RUN_S)
def test_grad_of_the_default_run_s_cases(case):
    """The whole check, grad with value included, of the cases the default run checks
    without grad: test_jvp_vjp_grad_linearize_transpose's and test_float64's."""
    name, f, args, tol = case
    if tol is None:
        _check_float64("svd", f, args, grad=True)
    else:
        _check_case(name, f, [np.asarray(a) for a in args], tol)


BATCH = 3


def _stack(x, seed, spd=False):
    xs = [np.asarray(x) + 0.05 * _like(x, seed + k) for k in range(BATCH)]
    if spd:
        xs = [(m + m.T) / 2 for m in xs]
    return np.stack(xs)


VMAP = [
    ("cholesky", jnp.linalg.cholesky, [_spd(4, 80)], [0], True),
    (
        "solve",
        lambda a, b: jnp.linalg.solve(a, b),
        [_well(4, 81), _mat(4, 1, 82)[:, 0]],
        [0, 0],
        False,
    ),
    (
        "solve_b_only",
        lambda a, b: jnp.linalg.solve(a, b),
        [_well(4, 83), _mat(4, 1, 84)[:, 0]],
        [None, 0],
        False,
    ),
    ("eigh", _eigh_fn, [_distinct_sym(4, 87)], [0], True),
    ("qr", jnp.linalg.qr, [_mat(5, 3, 88)], [0], False),
    ("svd", _svd_fn, [_distinct_sv(4, 3, 89)], [0], False),
    (
        "solve_triangular",
        lambda a, b: jsl.solve_triangular(a, b, lower=True),
        [np.tril(_well(4, 90)), _mat(4, 2, 91)],
        [None, 0],
        False,
    ),
    (
        "lu_solve",
        lambda a, b: jsl.lu_solve(jsl.lu_factor(a), b),
        [_well(4, 92), _mat(4, 2, 93)],
        [0, 0],
        False,
    ),
    (
        "tridiagonal_solve",
        jax.lax.linalg.tridiagonal_solve,
        list(_tridiag(4, 94)),
        [0, 0, 0, 0],
        False,
    ),
]


#: in `make test-full` only: an unbatched operand broadcast again, at another position
#: (`make test` checks it in test_vmap_matches_jax: solve_b_only and solve_triangular's
#: unbatched matrix, grad gp's unbatched scalar)
VMAP_MORE = [
    (
        "solve_a_only",
        lambda a, b: jnp.linalg.solve(a, b),
        [_well(4, 85), _mat(4, 2, 86)],
        [0, None],
        False,
    ),
    (
        "tridiagonal_solve_b_only",
        jax.lax.linalg.tridiagonal_solve,
        list(_tridiag(4, 95)),
        [None, None, None, 0],
        False,
    ),
]

#: per-example gradients: the tool's vmap of the tool's grad, against jax.vmap(jax.grad(f))
VMAP_GRAD = [
    ("gp", _gp_nll, [F32(0.3), _mat(5, 1, 96)[:, 0], _mat(5, 1, 97)[:, 0]], [None, 0, 0]),
    (
        "solve",
        lambda a, b: jnp.sum(jnp.linalg.solve(a, b) ** 2),
        [_well(3, 98), _mat(3, 1, 99)[:, 0]],
        [0, 0],
    ),
]
#: in `make test-full` only: det's (a 3x3: JAX's closed form, whose gradient is elementwise
#: arithmetic, slices and pads, batched by the rules test_vmap.py keeps; JAX's reference goes
#: through its custom rule, an LU solve: 0.9 of the 1.9 CPU-s of test_vmap_matches_jax);
#: per-example gradients through the linalg rules stay there (gp: cholesky, triangular
#: solves; solve: lu, custom_linear_solve transposed)
VMAP_GRAD_MORE = [("det", jnp.linalg.det, [_well(3, 100)], [0])]


def _no_loop(vj, capsys):
    """Batched by the rules: no per-example scan fallback, no warning."""
    assert "vmap: no batching rule" not in capsys.readouterr().err
    text = print_jaxpr(vj)
    assert " scan[" not in text, text


def test_vmap_matches_jax(capsys):
    _check_vmap(VMAP, VMAP_GRAD, capsys)


@pytest.mark.slow  # (make test-full; test_vmap_matches_jax keeps these rules batched)
def test_vmap_matches_jax_more(capsys):
    _check_vmap(VMAP_MORE, VMAP_GRAD_MORE, capsys)


def _check_vmap(cases, grad_cases, capsys):
    """The tool's vmap of each case (and of each grad case's grad) against JAX's."""
    items, refs = [], []
    for name, f, args, axes, spd in cases:
        batched = [a if ax is None else _stack(a, 300, spd) for a, ax in zip(args, axes)]
        vj = vmap_jaxpr(ir(f, *args), axes, 0, BATCH)
        _no_loop(vj, capsys)
        items.append((vj, batched))
        refs.append((name, jax.vmap(f, in_axes=tuple(axes)), batched))
    for name, f, args, axes in grad_cases:
        argnums = tuple(range(len(args)))
        batched = [a if ax is None else _stack(a, 400) for a, ax in zip(args, axes)]
        vj = vmap_jaxpr(grad_jaxpr(ir(f, *args), argnums), axes, 0, BATCH)
        _no_loop(vj, capsys)
        items.append((vj, batched))
        refs.append((f"grad {name}", jax.vmap(jax.grad(f, argnums=argnums), axes), batched))
    *gots, want = _evaluate_together(*items, oracle=(lambda: [fn(*xs) for _, fn, xs in refs], ()))
    for got, (name, _, _), ref in zip(gots, refs, want):
        ref = _leaves(ref)
        assert len(got) == len(ref), name
        for g, r in zip(got, ref):
            _close(g, r, 2e-3, f"vmap {name}")


def test_jacobians_of_cholesky_and_solve():
    """jacfwd / jacrev (vmap of jvp / vjp) of linalg functions against JAX's."""
    spd = _spd(3, 110)
    a, b = _well(3, 111), _mat(3, 1, 112)[:, 0]
    chol = ir(jnp.linalg.cholesky, spd)
    j = ir(_solve, a, b)
    *got, want = _evaluate_together(
        (jacfwd(chol), [spd]),
        (jacrev(chol), [spd]),
        (jacrev(j), [a, b]),
        (jacfwd(j, argnums=1), [a, b]),
        oracle=(
            lambda: [
                jax.jacfwd(jnp.linalg.cholesky)(spd),
                jax.jacrev(jnp.linalg.cholesky)(spd),
                jax.jacrev(_solve)(a, b),
                jax.jacfwd(_solve, argnums=1)(a, b),
            ],
            (),
        ),
    )
    for what, g, r in zip(["jacfwd", "jacrev", "jacrev solve", "jacfwd solve"], got, want):
        _close(g[0], r, 2e-3, what)


GRAD_RUN = [
    pytest.param(
        "gp",
        _gp_nll,
        [F32(0.3), _mat(5, 1, 120)[:, 0], _mat(5, 1, 121)[:, 0]],
        # (make test-full; test_zoo.py's test_grad_equals_jax_grad[gp_nll] keeps a GP
        # likelihood's `grad` text, cholesky and solve_triangular, run under `run`)
        marks=pytest.mark.slow,
    ),
    pytest.param(
        "solve",
        lambda a, b: jnp.sum(jnp.linalg.solve(a, b) ** 2),
        [_well(3, 122), _mat(3, 1, 123)[:, 0]],
    ),
]


@pytest.mark.parametrize("name,f,args", GRAD_RUN, ids=["gp", "solve"])
def test_grad_output_runs_under_run(tmp_path, name, f, args):
    """The `grad` command's text parses back and runs under `run` with JAX's numbers."""
    src = tmp_path / f"{name}.jaxpr"
    src.write_text(str(jax.make_jaxpr(f)(*args)))
    r = run(["grad", str(src), "--argnums", ",".join(str(i) for i in range(len(args)))])
    assert r.exit_code == 0, r.output
    prog = tmp_path / f"{name}_grad.jaxpr"
    prog.write_text(r.output)
    np.savez(tmp_path / f"{name}.npz", *args)
    out = tmp_path / f"{name}_out.npz"
    r = run(["run", str(prog), "--args", str(tmp_path / f"{name}.npz"), "-o", str(out)])
    assert r.exit_code == 0, r.output
    ref = _jax_jit(jax.grad(f, argnums=tuple(range(len(args)))))(*args)
    with np.load(out, allow_pickle=False) as got:
        for k, want in enumerate(ref):
            _close(got[f"out{k}"], want, 2e-3, f"run {name}")


def test_equation_counts_stay_near_jax():
    """The tool's grad program is not much larger than JAX's `make_jaxpr(jax.grad(f))`
    (counted through nested bodies after the tool's default cleanups)."""
    from jaxprtool.core import all_eqns

    cases = [
        (
            "solve",
            lambda a, b: jnp.sum(jnp.linalg.solve(a, b) ** 2),
            [_well(3, 130), _mat(3, 1, 131)[:, 0]],
        ),
        ("inv", lambda a: jnp.sum(jnp.linalg.inv(a) ** 2), [_well(3, 132)]),
        ("det", jnp.linalg.det, [_well(3, 133)]),
        ("gp", _gp_nll, [F32(0.3), _mat(5, 1, 134)[:, 0], _mat(5, 1, 135)[:, 0]]),
    ]
    for name, f, args in cases:
        argnums = tuple(range(len(args)))
        ours = len(list(all_eqns(grad_jaxpr(ir(f, *args), argnums))))
        theirs = len(list(all_eqns(ir(jax.grad(f, argnums=argnums), *args))))
        assert ours <= 2 * theirs + 20, (name, ours, theirs)


NO_RULE = [
    ("schur", lambda a: jsl.schur(a)[0], _well(3, 140)),
    ("hessenberg", lambda a: jsl.hessenberg(a), _well(3, 141)),
]


@pytest.mark.parametrize("case", NO_RULE, ids=[c[0] for c in NO_RULE])
def test_primitives_without_a_jax_rule_refuse_at_the_equation(case):
    name, f, a = case
    with pytest.raises(NotImplementedError):  # JAX has no rule either
        jax.jvp(f, (a,), (a,))
    with pytest.raises(JaxprError) as e:
        jvp_jaxpr(ir(f, a))
    msg = str(e.value)
    assert f"Differentiation rule for '{name}' not implemented" in msg
    assert "stop the gradient" in msg and "custom_jvp" in msg
    assert e.value.loc is not None


def test_eig_vectors_need_the_opt_in_as_in_jax():
    a = _well(3, 150)
    f = lambda a: jnp.abs(jnp.linalg.eig(a)[1])  # noqa: E731
    with pytest.raises(Exception, match="enable_eigvec_derivs"):
        jax.jvp(f, (a,), (a,))
    with pytest.raises(JaxprError, match="enable_eigvec_derivs=True"):
        jvp_jaxpr(ir(f, a))
