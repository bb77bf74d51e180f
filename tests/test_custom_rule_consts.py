"""AD through recorded custom rules that close over constants (issue 25).

`jaxprtool trace` records a custom_vjp's fwd/bwd and a custom_jvp's jvp as jaxprs; when the
Python rule closes over an array, the recorded jaxpr has constvars, numbered after the
program's own in the `--consts` archive (`consts_order.py`, step 3).  The AD commands make
them constants of the program they write, in that same order, so that the archive `trace
--consts-out` wrote is the derived program's too.  The arrays below are all distinct, and
the ones the rules close over have the same types as others, so that a wrong numbering
gives wrong numbers rather than a type error.  JAX is the oracle: `jax.grad`, `jax.vjp`,
`jax.jvp`, and the dot-product test on linearize's linear map (whose transpose is also
compared with `jax.vjp`: JAX cannot run the linear map of a custom_vjp itself).
"""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
from jax_oracle import close, explain_and_check_grad_give, jax_value_and_vjp  # noqa: E402
from traced import CT, X, check_dot_product, check_jvp, derive, run_with_consts, traced_programs  # noqa: E402

from jaxprtool.consts_order import for_ad, nested_with_consts, number_constants  # noqa: E402
from jaxprtool.text.parser import parse  # noqa: E402

SOURCE = """
import jax
import jax.numpy as jnp
import numpy as np

W = jnp.array([[1.5, -0.5, 2.0], [0.25, 1.0, -1.0]], np.float32)  # the program's own
V = jnp.array([0.25, 3.0, -1.0], np.float32)  # fwd's residual scale; jvp's too
U = jnp.array([1.25, -0.75, 0.5], np.float32)  # same type as V: only in jvp
M = jnp.array([[0.5, 1.0, -2.0], [1.0, 0.0, 0.5], [-1.0, 2.0, 1.0]], np.float32)  # bwd
N = jnp.array([[2.0, -1.0, 0.0], [0.5, 1.5, -0.5], [1.0, 0.25, 3.0]], np.float32)  # jvp


@jax.custom_vjp
def g(x):
    return jnp.sin(x) * 2.0


g.defvjp(lambda x: (g(x), jnp.cos(x) * V), lambda r, ct: (ct * r @ M,))


@jax.custom_jvp
def h(x):
    return jnp.tanh(x)


h.defjvp(lambda p, t: (h(p[0]), (N @ t[0]) * U + t[0] * V))


TWO = jnp.full((3,), 2.0, np.float32)  # the true rules' constants
ONE = jnp.ones((3,), np.float32)


@jax.custom_vjp
def sin2(x):
    return jnp.sin(x) * 2.0


sin2.defvjp(lambda x: (sin2(x), jnp.cos(x) * TWO), lambda r, ct: (ct * r,))


@jax.custom_jvp
def tanh(x):
    return jnp.tanh(x)


tanh.defjvp(lambda p, t: (tanh(p[0]), t[0] * (ONE - jnp.tanh(p[0]) ** 2)))


def true_rule(x):
    return jnp.sum(tanh(sin2(W.T @ x)) ** 2)


def both(x):
    return jnp.sum(h(g(W.T @ x)) ** 2)


def vector(x):
    return h(g(W.T @ x)) * 3.0


def forward(x):
    return h(W.T @ x) ** 2


def jitted(x):
    return jnp.sum(jax.jit(lambda y: g(y) * h(y))(W.T @ x))


def scanned(x):
    y, _ = jax.lax.scan(lambda c, _: (h(c) + c, None), W.T @ x, None, length=2)
    return jnp.sum(g(y))
"""

FUNCTIONS = ("true_rule", "both", "vector", "forward", "jitted", "scanned")


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    """{function: (text path, archive path)} from `trace --consts-out`, the module, the folder."""
    yield from traced_programs(tmp_path_factory, "rule_consts", SOURCE, FUNCTIONS)


def _constvars(path):
    return parse(path.read_text(), str(path)).jaxpr.constvars


def test_rule_constants_are_numbered_as_run_reads_them(traced):
    """The program the AD commands read has every constant as its own, in the archive's
    order: the program's, then each recorded rule's (bwd before fwd: parameters by name)."""
    progs, mod, _ = traced
    prog, consts = progs["both"]
    j = parse(prog.read_text(), str(prog)).jaxpr
    numbered = number_constants(j)
    assert [e.prim for _, e in nested_with_consts(numbered.program)] == [
        "custom_vjp_call",  # its bwd
        "custom_vjp_call",  # its fwd
        "custom_jvp_call",
    ]
    lifted = for_ad(j)
    assert not nested_with_consts(lifted)
    assert [v.type for v in lifted.constvars] == [v.type for v in numbered.constvars]
    with np.load(consts) as d:
        got = [d[f"const{i}"] for i in range(len(d.files))]
    for a, b in zip(got, (mod.W, mod.M, mod.V, mod.N, mod.U, mod.V), strict=True):
        np.testing.assert_array_equal(a, np.asarray(b))


def test_grad_and_vjp_equal_jax(traced):
    """grad and vjp through a custom_vjp (fwd and bwd with constants) and a custom_jvp (jvp
    with constants), run with the archive `trace` wrote: JAX's numbers."""
    progs, mod, folder = traced
    prog, consts = progs["both"]
    grad = derive(folder, "grad", prog)
    assert len(_constvars(grad)) == 6
    (got,) = run_with_consts(folder, grad, [X], consts)
    close(got, jax.jit(jax.grad(mod.both))(X))
    prog, consts = progs["vector"]
    y, ct = jax_value_and_vjp(mod.vector, X, CT)
    got_y, got_ct = run_with_consts(folder, derive(folder, "vjp", prog), [X, CT], consts)
    close(got_y, y)
    close(got_ct, ct)


def test_jvp_equals_jax(traced):
    check_jvp(traced, "forward")


def test_linearize_passes_the_dot_product_test(traced):
    """linearize's linear map L and its transpose: <w, L t> = <L^T w, t>, and L^T w is
    JAX's vjp (the bwd's constants reach the linear program as residuals)."""
    check_dot_product(traced, "vector")


@pytest.mark.parametrize("fn", ["jitted", "scanned"])
def test_rules_inside_bodies(traced, fn):
    """A rule inside a jitted function or a scan body: its constants become operands of the
    body's equation, up to the program's constants, in the same order."""
    progs, mod, folder = traced
    prog, consts = progs[fn]
    (got,) = run_with_consts(folder, derive(folder, "grad", prog), [X], consts)
    close(got, jax.jit(jax.grad(getattr(mod, fn)))(X))


@pytest.mark.parametrize(
    "fn, verdict",
    [
        # (make test-full; test_custom_rule_consts_nested.py's test_explain_and_check_grad_
        # take_the_archive[true_rule-0] keeps a true custom_vjp rule whose fwd closes over a
        # constant passing both with its archive, test_kept_consts_lifted.py's [vmapped_loss]
        # a true custom_jvp rule's, in grad mode and reverse mode as here)
        pytest.param("true_rule", 0, marks=pytest.mark.slow),
        ("both", 1),
    ],
)
def test_explain_and_check_grad_take_the_archive(traced, fn, verdict):
    """explain and check-grad read the program as the AD commands do: the archive gives
    every constant.  Their finite differences agree with rules that are the true
    derivative, and find that the rules of `both`, which are not, differ from them."""
    progs, _, folder = traced
    np.savez(folder / "x.npz", arg0=X)
    explain_and_check_grad_give(*progs[fn], folder / "x.npz", verdict)


def test_vmap_keeps_the_calls_with_their_constants_as_operands(traced):
    """vmap reads the program as the AD commands do: the custom calls it keeps print with
    their rules' constants as leading operands (`jaxprtool_rule_consts`), read back by
    `run` with the same archive: jax.vmap's numbers."""
    progs, mod, folder = traced
    prog, consts = progs["both"]
    out = derive(folder, "vmap", prog, "--axis-size", "4")
    assert out.read_text().count("jaxprtool_rule_consts=") == 2
    xs = np.random.RandomState(0).randn(4, 2).astype(np.float32)
    (got,) = run_with_consts(folder, out, [xs], consts)
    close(got, jax.jit(jax.vmap(mod.both))(xs))
