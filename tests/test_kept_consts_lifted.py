"""AD through recorded custom rules that close over constants, in programs that also keep the
constants of a jit inside a custom_vmap's body, a run_state's body or a Pallas kernel (issue
25).

Hoisting stops at those primitives (JAX 0.12 prints a jit's constants in its nested jaxpr),
so `run` numbers their constants among the recorded rules' (`consts_order.py`, step 3).
Their `lift_kept_consts` rules make them leading operands, as JAX binds what such a body
closes over (custom_vmap: operands; run_state: Refs read whole, `hoist_consts_to_refs`; a
whole-array kernel: inputs with whole-array blocks), so that the AD commands, check-grad and
explain take the archive `trace --consts-out` wrote.  The arrays are distinct and of one
type, so that a wrong numbering gives wrong numbers rather than a type error.  JAX is the
oracle: `jax.jvp`, and for reverse mode through custom_vmap (which JAX 0.12 refuses:
"Linearization failed") `jax.vjp` of the same function without the custom_vmap, whose rule
only batches; the dot-product test on linearize's map and its transpose.
"""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
from jax_oracle import close, jax_value_and_vjp, run  # noqa: E402
from traced import (  # noqa: E402
    CT,
    T,
    X,
    check_jvp,
    check_numbered_as_archive,
    derive,
    run_with_consts,
    traced_programs,
)

from jaxprtool.consts_order import for_ad, nested_with_consts, number_constants  # noqa: E402
from jaxprtool.text.parser import parse  # noqa: E402

SOURCE = """
import jax
import jax.numpy as jnp
import numpy as np
from jax._src.state.discharge import run_state
from jax.experimental import pallas as pl

W = jnp.array([[1.5, -0.5, 2.0], [0.25, 1.0, -1.0]], np.float32)  # the program's own
K = jnp.array([1.0, 3.0, -2.0], np.float32)  # a jit's in the custom_vmap body
S = jnp.array([-0.5, 1.5, 0.75], np.float32)  # a jit's in the run_state body
P = jnp.array([0.5, -1.0, 1.25], np.float32)  # a jit's in the Pallas kernel
C = jnp.array([2.0, 2.0, 2.0], np.float32)  # h's jvp's and g's fwd's (true rules)
M = jnp.array([1.0, 1.0, 1.0], np.float32)  # g's bwd's
A = jnp.array([[2.0, 0.5, 0.0], [0.5, 3.0, 0.25], [0.0, 0.25, 1.5]], np.float32)  # matvec's


def sin_k(y):
    return jax.jit(lambda z: jnp.sin(z) * K)(y)


cv = jax.custom_batching.custom_vmap(sin_k)
cv.def_vmap(lambda axis_size, in_batched, y: (sin_k(y), in_batched[0]))


@jax.custom_jvp
def h(x):
    return jnp.tanh(x) * 2.0


h.defjvp(lambda p, t: (h(p[0]), t[0] * (1.0 - jnp.tanh(p[0]) ** 2) * C))


@jax.custom_vjp
def g(x):
    return jnp.sin(x) * 2.0


g.defvjp(lambda x: (g(x), jnp.cos(x) * C), lambda r, ct: (ct * r * M,))


def stateful_cos(y):
    def body(refs):
        y_ref, out_ref = refs
        out_ref[...] = jax.jit(lambda z: jnp.cos(z) * S)(y_ref[...])

    return run_state(body)((y, jnp.zeros_like(y)))[1]


def kernel_sin(y):
    def kernel(y_ref, out_ref):
        out_ref[...] = jax.jit(lambda z: jnp.sin(z) * P)(y_ref[...])

    shape = jax.ShapeDtypeStruct(y.shape, y.dtype)
    return pl.pallas_call(kernel, out_shape=shape, interpret=True)(y)


def vmapped(x):
    return g(cv(W.T @ x)) * 3.0


def vmapped_plain(x):  # vmapped without the custom_vmap, for JAX's reverse mode
    return g(sin_k(W.T @ x)) * 3.0


def vmapped_loss(x):
    return jnp.sum(h(cv(W.T @ x)) ** 2)


def vmapped_loss_plain(x):
    return jnp.sum(h(sin_k(W.T @ x)) ** 2)


def forward(x):
    return h(kernel_sin(stateful_cos(cv(W.T @ x))))


def solved_loss(x):
    matvec = lambda v: jax.jit(lambda y: A @ y)(v)
    solve = lambda _, v: jnp.linalg.solve(A, v)
    y = jax.lax.custom_linear_solve(matvec, g(W.T @ x), solve, symmetric=True)
    return jnp.sum(y**2)
"""

FUNCTIONS = ("vmapped", "vmapped_loss", "forward", "solved_loss")


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    """{function: (text path, archive path)} from `trace --consts-out`, the module, the folder."""
    yield from traced_programs(tmp_path_factory, "kept_consts_lifted", SOURCE, FUNCTIONS)


@pytest.mark.parametrize(
    "fn, kinds, arrays",
    [
        # own, then by equation: the custom_vmap body's, bwd's, fwd's
        ("vmapped", ["custom_vmap_call"] + ["custom_vjp_call"] * 2, ("W", "K", "M", "C")),
        # the custom_vmap body's, run_state's, the kernel's, jvp's
        (
            "forward",
            ["custom_vmap_call", "run_state", "pallas_call", "custom_jvp_call"],
            ("W", "K", "S", "P", "C"),
        ),
    ],
)
def test_every_constant_is_the_programs_in_the_archives_order(traced, fn, kinds, arrays):
    """The program the AD commands read has every constant as its own, in the order `run`
    reads the archive."""
    check_numbered_as_archive(traced, fn, kinds, arrays)


def test_jvp_through_every_kept_kind_equals_jax(traced):
    """custom_vmap, run_state and a Pallas kernel in a row, then a custom_jvp whose rule
    closes over a constant: jvp as jax.jvp (reverse mode of run_state and pallas_call is
    refused, as JAX refuses it)."""
    check_jvp(traced, "forward")


def test_grad_through_custom_vmap_equals_jax(traced):
    progs, mod, folder = traced
    prog, consts = progs["vmapped_loss"]
    with pytest.raises(ValueError, match="Linearization failed"):
        jax.jit(jax.grad(mod.vmapped_loss))(X)  # (refused as it is traced: nothing compiled)
    (got,) = run_with_consts(folder, derive(folder, "grad", prog), [X], consts)
    close(got, jax.jit(jax.grad(mod.vmapped_loss_plain))(X))


def test_grad_through_a_linear_solve_whose_matvec_keeps_constants(traced):
    """custom_linear_solve's matvec closes over a jit's constant (its tangent map and its
    transpose need it), after a custom_vjp whose fwd and bwd close over theirs."""
    progs, mod, folder = traced
    prog, consts = progs["solved_loss"]
    j = parse(prog.read_text(), str(prog)).jaxpr
    kinds = [e.prim for _, e in nested_with_consts(number_constants(j).program)]
    assert "custom_linear_solve" in kinds and not nested_with_consts(for_ad(j))
    (got,) = run_with_consts(folder, derive(folder, "grad", prog), [X], consts)
    close(got, jax.jit(jax.grad(mod.solved_loss))(X))


def test_vjp_and_the_dot_product_test(traced):
    """vjp as JAX's; linearize's linear map L and its transpose: <w, L t> = <L^T w, t>, and
    L^T w is JAX's vjp (the custom_vmap body's, fwd's and bwd's constants reach them)."""
    progs, mod, folder = traced
    prog, consts = progs["vmapped"]
    want_y, want_ct = jax_value_and_vjp(mod.vmapped_plain, X, CT)
    got_y, got_ct = run_with_consts(folder, derive(folder, "vjp", prog), [X, CT], consts)
    close(got_y, want_y)
    close(got_ct, want_ct)
    lin = derive(folder, "linearize", prog)
    y, lt = run_with_consts(folder, lin, [X, T], consts)
    y2, ltw = run_with_consts(folder, derive(folder, "transpose", lin), [X, CT], consts)
    close(y, want_y)
    close(y2, want_y)
    close(ltw, want_ct)
    np.testing.assert_allclose(np.dot(CT, lt), np.dot(ltw, T), rtol=1e-5)


@pytest.mark.parametrize(
    "fn, extra", [("vmapped_loss", ["--mode", "grad"]), ("forward", ["--mode", "jvp"])]
)
def test_explain_and_check_grad_take_the_archive(traced, fn, extra):
    """explain and check-grad read the program as the AD commands do: with true rules, their
    finite differences agree."""
    progs, _, folder = traced
    prog, consts = progs[fn]
    np.savez(folder / "x.npz", arg0=X)
    args = ["--args", str(folder / "x.npz"), "--consts", str(consts)]
    r = run(["explain", str(prog), *args, *extra])
    assert r.exit_code == 0 and "a check FAILED" not in r.output, r.output
    modes = "rev" if extra[-1] == "grad" else "fwd"
    r = run(["check-grad", str(prog), *args, "--modes", modes])
    assert r.exit_code == 0 and "0 failure" in r.output, r.output
