"""Every primitive of every family that JAX can trace runs under `jaxprtool run` and
`run --eager` and gives JAX's numbers.

The table is `test_shapes._cases()` (one small jax function per primitive, or a few
primitives per function) plus the cases below for the primitives it does not reach.  Each case
is traced with `jax.make_jaxpr`, its text, inputs and constants written to files, run through
the CLI in-process (`run FILE --args IN.npz [--consts C.npz] -o OUT.npz`, compiled and
`--eager`), and its outputs compared with `jax.jit(fn)` on the same inputs (JAX is the
oracle).  A case the back end cannot run must be refused with a located error, listed in
`REFUSED` with the reason; the whole table is marked `slow` but for the cases in `FAST`.
`test_every_family_primitive_is_run_or_listed` checks that every
primitive of every family is either run here or listed in `NOT_TRACED` with the reason.
"""

from __future__ import annotations

import functools
import re

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402
from jax.ad_checkpoint import checkpoint_name  # noqa: E402
from jax_oracle import run  # noqa: E402
from test_shapes import _cases  # noqa: E402

from jaxprtool.core import all_eqns  # noqa: E402
from jaxprtool.record import records  # noqa: E402
from jaxprtool.text.parser import parse  # noqa: E402

JAX_0_12_1 = hasattr(lax, "sinpi")


@functools.cache
def _extra_cases():
    """The primitives `test_shapes._cases()` does not trace (made once per process, as
    `_cases()`)."""
    f32 = jnp.float32
    put = jax.device_put  # (numpy's arrays placed: no XLA compile, as test_shapes._cases)
    nx = np.linspace(0.1, 0.9, 12, dtype=np.float32).reshape(3, 4)
    x = put(nx)
    i = put(np.arange(12, dtype=np.int32).reshape(3, 4))
    k = put(np.array([0, 2, 1], np.int32))
    cases = {
        "log2_exp2": (lambda a: (jnp.log2(a), jnp.exp2(a)), (x,)),
        "polynomial": (lambda a: (jnp.sinc(a), lax.polynomial(a, [1.0, 2.0, 0.5, a[0, 0]])), (x,)),
        "copysign": (lambda a, b: jnp.copysign(a, b), (x, put(-nx))),
        "scatter_sub": (lambda a: a.at[k].subtract(1.0), (x,)),
        "lu_pivots_to_permutation": (
            lambda p: lax.linalg.lu_pivots_to_permutation(p, 5),
            (put(np.array([2, 2, 3], np.int32)),),
        ),
        "checkpoint_name": (
            lambda a: checkpoint_name(jnp.sin(a), "s") * 2,
            (x,),
        ),
        "searchsorted_digitize": (
            lambda s, q: (
                jnp.searchsorted(s, q, side="right"),
                jnp.digitize(q, s),
                jnp.interp(q, s, s * s),
            ),
            (put(np.linspace(0.0, 1.0, 7, dtype=np.float32)), x),
        ),
        "nonzero": (lambda a: jnp.nonzero(a > 0.5, size=5), (x,)),
        "integer_ops": (lambda a, b: (lax.rem(a, b + 1), lax.div(a, b + 1), a // 3), (i, i)),
    }
    m4 = put(np.eye(4, dtype=np.float32) + np.float32(0.1))
    cases["more_linalg_cpu"] = (  # test_shapes' more_linalg without eigh's subset_by_index
        lambda a: (
            jnp.linalg.eig(a),
            lax.linalg.tridiagonal(a),
            lax.linalg.schur(a),
            lax.linalg.hessenberg(a),
            lax.linalg.householder_product(a, jnp.ones(3, f32)),
            lax.linalg.tridiagonal_solve(a[0], a[1], a[2], a),
        ),
        (m4,),
    )
    u = put(np.arange(1, 5, dtype=np.uint32) * np.uint32(0x9E3779B9))
    cases["mulhi"] = (lambda a: lax.mulhi(a, a), (u,))
    cv = jax.custom_batching.custom_vmap(lambda a: jnp.sin(a))
    cv.def_vmap(lambda axis_size, in_batched, a: (jnp.sin(a), in_batched[0]))
    cases["custom_vmap"] = (lambda a: cv(a) + 1, (x,))
    if JAX_0_12_1:
        cases["jax_0_12_1_elementwise"] = (
            lambda a, b: (
                *(f(a) for f in (lax.sinpi, lax.cospi, lax.asinpi, lax.acospi, lax.atanpi)),
                *(f(a) for f in (lax.exp2m1, lax.log2p1)),
                lax.tanpi(a * 0.3),
                lax.atan2pi(a, b),
                lax.fma(a, b, a),
                lax.fmuladd(a, b, a),
            ),
            (x, put(-nx)),
        )
        cases["poisson"] = (lambda a: jax.random.poisson(jax.random.key(3), a * 5.0), (x,))
        cases["frexp_ldexp"] = (
            lambda a: (
                jnp.frexp(a * 40.0),
                jnp.ldexp(a, jnp.arange(12, dtype=jnp.int32).reshape(3, 4) - 6),
            ),
            (x,),
        )
    return cases


@functools.cache
def _all_cases():
    """Both tables (made once per process: test_run_params takes it too; copy it to add)."""
    cases = dict(_cases())
    cases.update(_extra_cases())
    return cases


#: cases the back end refuses, with the reason its located error gives
REFUSED = {
    "callbacks": "'pure_callback' calls back into Python",
}
#: cases JAX itself cannot run on CPU: the tool's error must be a clean, located one
JAX_CANNOT = {"more_linalg": "subset_by_index not supported on CPU"}

#: the primitives JAX 0.12.1 added (the cases above trace them where it is installed)
ADDED_IN_0_12_1 = (
    "sinpi cospi tanpi asinpi acospi atanpi atan2pi exp2m1 log2p1 fma fmuladd random_poisson "
    "Frexp Ldexp".split()
)

#: primitives of the families that no case runs, and why
NOT_TRACED = {
    **dict.fromkeys(
        () if JAX_0_12_1 else ADDED_IN_0_12_1,
        "JAX 0.12.1 added it: the installed JAX does not trace it",
    ),
    **dict.fromkeys(
        "call closed_call core_call named_call remat_call xla_call pjit remat checkpoint "
        "custom_jvp_call_jaxpr custom_vjp_call_jaxpr custom_vmap_call_jaxpr eq_to le_to lt_to "
        "ragged_dot copysign add_jaxvals copy_p reduced_vary_cast_p vary_unreduced_cast_p psum2 pmean "
        "pbroadcast xla_pmap".split(),
        "a name of older JAX versions (the installed 0.12 no longer traces it)",
    ),
    **dict.fromkeys(
        "all_gather_invariant all_reduce pcast preduced pshuffle psum_scatter "
        "reduced_vary_cast unreduced_pmax unreduced_pmin unreduced_psum vary_unreduced_cast "
        "mesh_cast reshard shard_alike sharding_constraint layout_constraint "
        "inspect_sharding_p pin unpin remove_memory_space with_memory_space_constraint "
        "compute_on compute_on2 xla_metadata_call".split(),
        "needs a device mesh, explicit shardings or memory kinds (tests/test_multidevice.py)",
    ),
    "ragged_all_to_all": "XLA:CPU has no ragged-all-to-all (as JAX's own jit fails): "
    "tests/test_ragged_all_to_all.py checks its located refusal",
    **dict.fromkeys(
        "buffer_callback ffi_call pure_callback_ordered debug_callback check "
        "call_hi_primitive call_hi_primitive_linearized core_map custom_call mosaic_gpu_p "
        "tpu_custom_call triton_kernel_call".split(),
        "calls back into Python or a custom kernel: refused by the back end",
    ),
    "pallas_call": "whole-array kernels run as JAX's interpret mode (tests/test_run_pallas.py)",
    **dict.fromkeys(
        "max_contiguous multiple_of num_programs program_id tie trace_value".split(),
        "exists only inside Pallas kernels",
    ),
    **dict.fromkeys(
        "custom_lin eval_jaxpr run_state addupdate select_and_scatter zeros_like "
        "reduce_precision_multi _copysign reciprocal broadcast_to expand_dims dim_as_value "
        "iota_2x32_shape rng_uniform random_gamma_grad scatter_add scatter_max scatter_min "
        "scatter_mul scatter_sub".split(),
        "not emitted by the installed JAX's public API at trace time (an internal form, an "
        "alias of another spelling, or a transformation-only primitive)",
    ),
    **dict.fromkeys(
        "maybe_set nonbatchable nondifferentiable_backward nontraceable select_if_vmap "
        "unvmap_all unvmap_any unvmap_max".split(),
        "Equinox's own primitives: run against Equinox in tests/test_equinox.py",
    ),
    **dict.fromkeys(
        "composite empty2".split(),
        "traced through JAX's grad of cond / lax.composite: run against JAX in "
        "tests/test_printer_jax_grads.py",
    ),
}


_CASES = _all_cases()
_TRACED: dict = {}


def _traced(name):
    """(text, flat inputs, constants) of a case, traced once."""
    if name not in _TRACED:
        fn, args = _CASES[name]
        closed = jax.make_jaxpr(fn)(*args)
        flat = [_as_numpy(a) for a in jax.tree_util.tree_leaves(args)]
        _TRACED[name] = (str(closed), flat, [_as_numpy(c) for c in closed.consts])
    return _TRACED[name]


def _jax_outputs(fn, args):
    """JAX's flat outputs: jitted, else op by op (JAX cannot jit a function returning a frozen
    Ref), else the exception JAX raised."""
    for f in (jax.jit(fn), fn):
        try:
            return [_as_numpy(o) for o in jax.tree_util.tree_leaves(f(*args))]
        except Exception as e:  # noqa: BLE001 - recorded and checked against JAX_CANNOT
            err = e
    return err


def _as_numpy(x):
    if hasattr(x, "dtype") and jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
        x = jax.random.key_data(x)
    return np.asarray(x)


def _run_case(tmp_path, name, text, flat, consts, eager):
    prog = tmp_path / f"{name}.jaxpr"
    prog.write_text(text)
    np.savez(tmp_path / "in.npz", **{f"arg{k}": a for k, a in enumerate(flat)})
    args = ["run", str(prog), "--args", str(tmp_path / "in.npz"), "-o", str(tmp_path / "o.npz")]
    if consts:
        np.savez(tmp_path / "c.npz", **{f"const{k}": c for k, c in enumerate(consts)})
        args += ["--consts", str(tmp_path / "c.npz")]
    return prog, run(args + (["--eager"] if eager else []))


def _compare(got, want, name):
    assert got.shape == want.shape, (name, got.shape, want.shape)
    if got.dtype.kind == "V":  # ml_dtypes (bf16) come back from an .npz as raw bytes
        got = got.view(want.dtype)
    if np.issubdtype(want.dtype, np.inexact):
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6, err_msg=name)
    else:
        np.testing.assert_array_equal(got, want, err_msg=name)


#: run by the default suite: the cases of primitives whose parameters the back end completes
#: (accuracy, fft_type, HiPrims, ...); the whole table is `slow` (make test-full).  `poisson`
#: too (its rejection loop: ~1 CPU-s of XLA compiles): test_jax_0_12_1.py's
#: test_random_poisson_runs_and_batches_as_jax runs random_poisson against JAX in make test.
#: So are JAX 0.12.1's elementwise primitives (0.6 CPU-s: test_jax_0_12_1_elementwise.py
#: runs each one's printed text against JAX in make test, test_run and test_jvp's primal
#: outputs) and frexp/ldexp (test_frexp.py::test_runs_like_jax)
FAST = (set(_extra_cases()) - {"poisson", "jax_0_12_1_elementwise", "frexp_ldexp"}) | {
    "fft",
    "unary_exp",
    "unary_tan",
    "unary_erfc",
    "callbacks",
}
NAMES = [n if n in FAST else pytest.param(n, marks=pytest.mark.slow) for n in sorted(_CASES)]


@pytest.mark.parametrize("eager", [False, True], ids=["compiled", "eager"])
@pytest.mark.parametrize("name", NAMES)
def test_run_matches_jax(tmp_path, name, eager):
    text, flat, consts = _traced(name)
    want = _jax_outputs(*_CASES[name])
    prog, r = _run_case(tmp_path, name, text, flat, consts, eager)
    if name in REFUSED or name in JAX_CANNOT:
        reason = REFUSED.get(name) or JAX_CANNOT[name]
        if name in JAX_CANNOT:
            assert isinstance(want, Exception) and reason in str(want), want
        assert r.exit_code == 1, r.output
        assert reason in r.output, r.output
        assert "Traceback" not in r.output
        if name in REFUSED or eager:
            assert re.search(rf"{re.escape(str(prog))}:\d+:\d+: error:", r.output), r.output
        return
    assert not isinstance(want, Exception), want
    assert r.exit_code == 0, r.output
    with np.load(tmp_path / "o.npz", allow_pickle=False) as z:
        got = [z[f"out{k}"] for k in range(len(z.files))]
    assert len(got) == len(want), (len(got), len(want))
    for k, (g, w) in enumerate(zip(got, want)):
        _compare(g, w, f"{name} output {k}")


def test_every_family_primitive_is_run_or_listed():
    seen = set()
    for name in _CASES:
        if name not in JAX_CANNOT:  # a refused case's primitives are checked by their refusal
            seen |= {e.prim for e in all_eqns(parse(_traced(name)[0], name).jaxpr)}
    family_prims = {n for n, r in records().items() if r.family is not None}
    missing = sorted(family_prims - seen - set(NOT_TRACED))
    assert not missing, f"primitives neither run by a case nor listed in NOT_TRACED: {missing}"
    stale = sorted(set(NOT_TRACED) & seen)
    assert not stale, f"listed in NOT_TRACED but run by a case: {stale}"
