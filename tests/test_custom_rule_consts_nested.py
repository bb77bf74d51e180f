"""AD through recorded custom rules that close over constants, in programs that also keep
nested constants of another kind (issue 25).

A shard_map body and a custom call's body keep the constants of a jit inside them (JAX 0.12
prints them as constvars of the nested jaxpr, and hoisting stops at those primitives), so
`run` numbers them among the recorded rules' (`consts_order.py`, step 3).  The AD commands
make all of them constants of the program they write, in that same order, so that the
archive `trace --consts-out` wrote is the derived program's too.  The arrays are distinct and
of the same types, so that a wrong numbering gives wrong numbers rather than a type error.
JAX is the oracle: `jax.grad`, `jax.vjp`, `jax.jvp`, and the dot-product test on linearize's
linear map and its transpose.
"""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
from jax_oracle import close, explain_and_check_grad_give, jax_value_and_vjp, run  # noqa: E402
from traced import (  # noqa: E402
    CT,
    X,
    check_dot_product,
    check_jvp,
    check_numbered_as_archive,
    derive,
    run_with_consts,
    traced_programs,
)

from jaxprtool.consts_order import for_ad, nested_with_consts  # noqa: E402
from jaxprtool.text.parser import parse  # noqa: E402

SOURCE = """
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

W = jnp.array([[1.5, -0.5, 2.0], [0.25, 1.0, -1.0]], np.float32)  # the program's own
C = jnp.array([0.5, 2.0, -1.0], np.float32)  # fwd's and jvp's
K = jnp.array([1.0, 3.0, -2.0], np.float32)  # a jit's in a shard_map body
R = jnp.array([-0.5, 1.5, 0.75], np.float32)  # a jit's in a checkpoint (hoisted)
B = jnp.array([2.0, -1.0, 0.5], np.float32)  # a jit's in a custom call's body
M = jnp.array([[0.5, 1.0, -2.0], [1.0, 0.0, 0.5], [-1.0, 2.0, 1.0]], np.float32)  # bwd's
MESH = jax.make_mesh((1,), ("i",))


def sharded_sin(y):
    body = jax.jit(lambda z: jnp.sin(z) * K)
    return jax.shard_map(body, mesh=MESH, in_specs=P(), out_specs=P())(y)


@jax.custom_vjp
def g(x):
    return jnp.sin(x) * 2.0


g.defvjp(lambda x: (g(x), jnp.cos(x) * C), lambda r, ct: (ct * r @ M,))


@jax.custom_vjp
def q(x):  # its body keeps B
    return jax.jit(lambda y: jnp.sin(y) * B)(x)


q.defvjp(lambda x: (q(x), jnp.cos(x) * C), lambda r, ct: (ct * r @ M,))


@jax.custom_jvp
def h(x):  # its body keeps B
    return jax.jit(lambda y: jnp.tanh(y) * B)(x)


h.defjvp(lambda p, t: (h(p[0]), t[0] * C))


@jax.custom_vjp
def sin_b(x):  # true rules: fwd closes over B, the body's jit too
    return jax.jit(lambda y: jnp.sin(y) * B)(x)


sin_b.defvjp(lambda x: (sin_b(x), jnp.cos(x) * B), lambda r, ct: (ct * r,))


def rematted(y):
    return jax.checkpoint(jax.jit(lambda z: jnp.cos(z) * R))(y)


def before(x):
    return sharded_sin(g(rematted(W.T @ x))) * 3.0


def after(x):
    return g(sharded_sin(W.T @ x)) * 3.0


def bodies(x):
    return jnp.sum(q(W.T @ x) * sharded_sin(W.T @ x))


def forward(x):
    return h(sharded_sin(W.T @ x)) ** 2


def true_rule(x):
    return jnp.sum(sin_b(sharded_sin(W.T @ x)) ** 2)


def false_rule(x):
    return jnp.sum(g(sharded_sin(W.T @ x)) ** 2)
"""

FUNCTIONS = ("before", "after", "bodies", "forward", "true_rule", "false_rule")


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    """{function: (text path, archive path)} from `trace --consts-out`, the module, the folder."""
    yield from traced_programs(tmp_path_factory, "rule_consts_nested", SOURCE, FUNCTIONS)


@pytest.mark.parametrize(
    "fn, kinds, arrays",
    [
        # own, the checkpoint's (hoisted), then by equation: bwd, fwd, the shard_map's
        ("before", ["custom_vjp_call"] * 2 + ["shard_map"], ("W", "R", "M", "C", "K")),
        ("after", ["shard_map"] + ["custom_vjp_call"] * 2, ("W", "K", "M", "C")),
        # q's body, bwd, fwd, the body of the q that fwd calls; then the shard_map's
        ("bodies", ["custom_vjp_call"] * 4 + ["shard_map"], ("W", "B", "M", "C", "B", "K")),
    ],
)
def test_every_constant_is_the_programs_in_the_archives_order(traced, fn, kinds, arrays):
    """The program the AD commands read has every constant as its own, in the order `run`
    reads the archive: the rules' and the bodies' kept constants interleaved as numbered."""
    check_numbered_as_archive(traced, fn, kinds, arrays)


@pytest.mark.parametrize("fn", ["before", "after"])
def test_vjp_equals_jax(traced, fn):
    progs, mod, folder = traced
    prog, consts = progs[fn]
    got_y, got_ct = run_with_consts(folder, derive(folder, "vjp", prog), [X, CT], consts)
    y, ct = jax_value_and_vjp(getattr(mod, fn), X, CT)
    close(got_y, y)
    close(got_ct, ct)


def test_grad_through_bodies_that_keep_constants(traced):
    """A custom_vjp whose body keeps constants (and whose fwd calls it), beside a shard_map
    that keeps its own: grad as jax.grad."""
    progs, mod, folder = traced
    prog, consts = progs["bodies"]
    (got,) = run_with_consts(folder, derive(folder, "grad", prog), [X], consts)
    close(got, jax.jit(jax.grad(mod.bodies))(X))  # (one compilation)


def test_jvp_equals_jax(traced):
    check_jvp(traced, "forward")


def test_linearize_passes_the_dot_product_test(traced):
    """linearize's linear map L and its transpose: <w, L t> = <L^T w, t>, and L^T w is
    JAX's vjp (bwd's constants and the shard_map's reach the linear program)."""
    check_dot_product(traced, "before")


@pytest.mark.parametrize(
    "fn, verdict",
    [
        ("true_rule", 0),
        # (make test-full; test_custom_rule_consts.py's test_explain_and_check_grad_take_the_
        # archive keeps that with an archive they find false rules: its `both`)
        pytest.param("false_rule", 1, marks=pytest.mark.slow),
    ],
)
def test_explain_and_check_grad_take_the_archive(traced, fn, verdict):
    """explain and check-grad read the program as the AD commands do: their finite
    differences agree with true rules, and find that false ones differ from them."""
    progs, _, folder = traced
    np.savez(folder / "x.npz", arg0=X)
    explain_and_check_grad_give(*progs[fn], folder / "x.npz", verdict)


KEPT = """{ lambda ; a:f32[4]. let
    z:f32[4] = broadcast_in_dim[broadcast_dimensions=() shape=(4,) sharding=None] 1.0:f32[]
    b:f32[4] = pallas_call[
      compiler_params=None
      cost_estimate=None
      debug=False
      grid_mapping=GridMapping(grid=(2,), block_mappings=(BlockMapping(block_shape=(Blocked(block_size=2),)), BlockMapping(block_shape=(Blocked(block_size=2),))))
      input_output_aliases=()
      interpret=True
      jaxpr={ lambda k:f32[2]; c:Ref<default>{f32[2]} d:Ref<default>{f32[2]}. let
          e:f32[2] <- c[...]
          f:f32[2] = mul e k
          g:f32[2], d[...] <- d[...], f
        in () }
      mesh=None
      metadata=None
      name=None
      out_avals=(ShapedArray(float32[4]),)
    ] z
    e:f32[4] = custom_jvp_call[
      name=h
      call_jaxpr={ lambda ; d:f32[4]. let e:f32[4] = tanh d in (e,) }
      jaxprtool_jvp={ lambda f:f32[4]; g:f32[4] h:f32[4]. let
          i:f32[4] = tanh g
          j:f32[4] = mul h f
        in (i, j) }
      jvp=jvp
      symbolic_zeros=False
    ] a
    y:f32[4] = mul b e
  in (y,) }
"""


def test_rule_constants_beside_constants_no_rule_lifts_are_refused(tmp_path):
    """A primitive whose jaxpr keeps constants that the AD commands do not make the
    program's (a Pallas kernel with a grid: its blocks' index maps are not in the text, so
    no block can be added for a constant; its operand has no tangent, so that the kernel
    itself, which the back end cannot run, needs no JVP): the rule keeps its constants, and AD through it
    is refused where it is, saying what works, never misnumbered."""
    prog = tmp_path / "kept.jaxpr"
    prog.write_text(KEPT)
    j = parse(KEPT, str(prog)).jaxpr
    assert [e.prim for _, e in nested_with_consts(for_ad(j))] == ["pallas_call", "custom_jvp_call"]
    r = run(["jvp", str(prog)])
    assert r.exit_code == 1, r.output
    assert "kept.jaxpr:20:5: error: 'custom_jvp_call': its recorded rule jaxprtool_jvp" in r.output
    assert "nested jaxprs that the AD commands cannot make the program's" in r.output
    assert "a Pallas kernel's with a grid" in r.output
    r = run(["explain", str(prog)])
    assert r.exit_code == 1, r.output
    assert "kept.jaxpr:3:5: error: explain cannot use the constants that 'pallas_call'" in r.output
