"""`lax.custom_root` as JAX 0.12 prints it (the `CustomRoot` HiPrim, only its `solve_jaxpr`
printed): run, jvp and vmap checked against JAX; the derivative through `f`'s closed-over
values, which needs the unprinted `f` and `tangent_solve`, is refused at the equation."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import jaxprtool as jt


def newton_sqrt(x, scale):
    """The root of y^2 - x; `scale` reaches only the solver (its first step), not `f`."""

    def f(y):
        return y * y - x

    def solve(g, y0):
        y = y0 * scale
        for _ in range(30):
            y = y - g(y) / (2 * y)
        return y

    return lax.custom_root(f, 1.0, solve, lambda g, y: y / g(1.0))


X, S = np.float32(2.0), np.float32(1.5)
TEXT = str(jax.make_jaxpr(newton_sqrt)(X, S))


@pytest.fixture(scope="module")
def prog():
    assert "CustomRoot[" in TEXT
    return jt.parse(TEXT, "root.jaxpr")


def test_custom_root_runs_as_jax(prog):
    (got,) = jt.run(prog, X, S)
    np.testing.assert_allclose(got, jax.jit(newton_sqrt)(X, S), rtol=1e-6)  # (not eagerly)


def test_custom_root_jvp_through_the_solver_only_is_zero_as_in_jax(prog):
    """The root does not move with what only the solver sees: JAX's tangent is 0."""
    _, want = jax.jit(lambda s, t: jax.jvp(lambda s: newton_sqrt(X, s), (s,), (t,)))(
        S, np.float32(1.0)
    )  # (one compile: eagerly, JAX compiles each operation)
    j = jt.jvp(prog, argnums=[1])
    outs = jt.run(j, X, S, np.float32(1.0))
    np.testing.assert_allclose(outs[-1], want, atol=0)
    assert float(want) == 0.0


def test_custom_root_grad_through_f_is_refused_at_the_equation(prog):
    with pytest.raises(jt.JaxprError) as e:
        jt.grad(prog, argnums=[0])
    assert "CustomRoot" in e.value.message and "tangent_solve" in e.value.message
    assert e.value.loc is not None and "CustomRoot[" in TEXT.splitlines()[e.value.loc.line - 1]


XS = np.array([1.0, 2.0, 4.0], np.float32)


@pytest.fixture(scope="module")
def vmap_want():
    """jax.vmap's roots at XS: one compile shared by the two vmap tests (not eagerly)."""
    return jax.jit(jax.vmap(newton_sqrt, in_axes=(0, None)))(XS, S)


def test_custom_root_vmap_is_one_batched_root_as_in_jax(prog, vmap_want):
    xs, want = XS, vmap_want
    b = jt.vmap(prog, in_axes=[0, None], axis_size=3)
    text = jt.format(b)
    assert text.count("CustomRoot[") == 1 and "scan[" not in text and "while[" not in text
    (got,) = jt.run(b, xs, S)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_hiprims_through_split_input_file_and_the_pass_manager(tmp_path, vmap_want):
    """CustomRoot and SearchSorted (0.12's HiPrims) in one file: `vmap --split-input-file
    --verify-each --timing` batches each part, and each part gives jax.vmap's numbers."""
    from click.testing import CliRunner

    from jaxprtool.cli import main

    def search(a, q):
        return jnp.searchsorted(a, q)

    sorted_rows = np.sort(np.random.default_rng(0).normal(size=(3, 5)).astype(np.float32), 1)
    q = np.float32(0.1)
    search_text = str(jax.make_jaxpr(search)(sorted_rows[0], q))
    path = tmp_path / "both.jaxpr"
    path.write_text(TEXT + "\n// -----\n" + search_text + "\n")
    argv = ["--no-color", "vmap", "--split-input-file", "--verify-each", "--timing"]
    r = CliRunner().invoke(main, [*argv, "--in-axes", "0,None", "--axis-size", "3", str(path)])
    assert r.exit_code == 0, r.output
    assert "vmap" in r.stderr
    root_part, search_part = r.stdout.split("\n# -----\n")
    (got,) = jt.run(jt.parse(root_part), XS, S)
    np.testing.assert_allclose(got, vmap_want, rtol=1e-6)
    (got,) = jt.run(jt.parse(search_part), sorted_rows, q)
    want = jax.jit(jax.vmap(search, in_axes=(0, None)))(sorted_rows, q)  # (not eagerly)
    np.testing.assert_array_equal(got, want)
