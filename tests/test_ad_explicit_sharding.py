"""AD of explicitly sharded types (issue 25): programs JAX traced under an Explicit mesh print
`f32[8@x]`; grad/vjp/jvp/linearize of their printouts keep the `@x` on the tangent and
cotangent types as `jax.make_jaxpr(jax.grad(f))` prints them, and `run --mesh x=2` of the
results gives jax.grad's/jax.jvp's numbers on the same mesh."""

from __future__ import annotations

import math

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402
from jax_oracle import close, run  # noqa: E402

from jaxprtool.text.parser import parse  # noqa: E402

pytestmark = pytest.mark.skipif(
    len(jax.devices("cpu")) < 2, reason="needs 2 host CPU devices (conftest sets XLA_FLAGS)"
)

MESH = jax.make_mesh(
    (2,), ("x",), axis_types=(jax.sharding.AxisType.Explicit,), devices=jax.devices("cpu")[:2]
)


def rnd(seed, shape, spec):
    a = np.random.default_rng(seed).uniform(0.5, 1.5, shape).astype(np.float32)
    return jax.device_put(a, NamedSharding(MESH, spec))


def sin_times_x(x):
    return jnp.sum(jnp.sin(x) * x)


def dot_sharded_contraction(a, w):
    return jnp.sum(jnp.tanh(jnp.dot(a, w, out_sharding=P())))


def reshard_then_square(x):
    return jnp.sum(jax.sharding.reshard(x, P()) ** 2)


def where_then_batch_dot(a, w):
    """A select on a sharded operand and a dot over a replicated contracting dim."""
    return jnp.sum(jnp.tanh(jnp.where(a > 1.0, a**2, jnp.exp(a)) @ w))


def slice_split_concatenate(x):
    """Rules that compute with sizes (slice -> pad, split -> concatenate, concatenate -> slice)."""
    return jnp.sum(jnp.concatenate([x[2:6] ** 2, jnp.split(x, 2)[1] * 3.0]) * jnp.arange(8.0))


def windows(x):
    """reduce_window sum and max over the unsharded dim (their transposes pad and window it)."""
    s = lax.reduce_window(x, 0.0, lax.add, (1, 2), (1, 1), "VALID")
    m = lax.reduce_window(x, -jnp.inf, lax.max, (1, 2), (1, 1), "VALID")
    return jnp.sum(s**2 + m)


def reduce_rows(a):
    return jnp.sum(jnp.cos(a) * 2.0, axis=0)


PROGRAMS = {
    "sin_times_x": (sin_times_x, lambda: [rnd(0, (8,), P("x"))]),
    "dot": (
        dot_sharded_contraction,
        lambda: [rnd(1, (4, 8), P(None, "x")), rnd(2, (8, 3), P("x", None))],
    ),
    "where_dot": (
        where_then_batch_dot,
        lambda: [rnd(7, (8, 4), P("x", None)), rnd(8, (4, 3), P())],
    ),
    "slice_split": (slice_split_concatenate, lambda: [rnd(10, (8,), P("x"))]),
    "reshard": (reshard_then_square, lambda: [rnd(3, (8,), P("x"))]),
    "reduce_window": (windows, lambda: [rnd(11, (8, 4), P("x", None))]),
}


def outvar_types(text):
    return [str(v.type) for v in parse(text, "<jax>").jaxpr.outvars]


def transform(tmp_path, command, text, name, *options):
    src = tmp_path / f"{name}.jaxpr"
    src.write_text(text)
    out = tmp_path / f"{name}.{command}.jaxpr"
    r = run([command, str(src), *options, "-o", str(out)])
    assert r.exit_code == 0, r.output
    return out


def run_on_mesh(tmp_path, program, args):
    files = []
    for i, a in enumerate(args):
        files += ["--arg", str(tmp_path / f"arg{i}.npy")]
        np.save(tmp_path / f"arg{i}.npy", np.asarray(a))
    out = tmp_path / "out.npz"
    r = run(["run", str(program), "--mesh", "x=2", *files, "-o", str(out)])
    assert r.exit_code == 0, r.output
    got = np.load(out)
    return [got[f"out{i}"] for i in range(len(got.files))]


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_grad_keeps_sharding_and_matches_jax(tmp_path, name):
    f, make_args = PROGRAMS[name]
    with jax.set_mesh(MESH):
        args = make_args()
        text = str(jax.make_jaxpr(f)(*args))
        argnums = tuple(range(len(args)))
        jax_grad_text = str(jax.make_jaxpr(jax.grad(f, argnums))(*args))
        want = jax.jit(jax.grad(f, argnums))(*args)  # (eagerly: a compile per operation)
    program = transform(tmp_path, "grad", text, name, "--argnums", ",".join(map(str, argnums)))
    assert "@x" in text
    assert outvar_types(program.read_text()) == outvar_types(jax_grad_text)
    got = run_on_mesh(tmp_path, program, args)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        close(g, w)


def test_jvp_and_linearize_match_jax(tmp_path):
    with jax.set_mesh(MESH):
        args = [rnd(4, (4, 8), P(None, "x"))]
        tangent = rnd(5, (4, 8), P(None, "x"))
        text = str(jax.make_jaxpr(reduce_rows)(*args))
        jvp_text = str(
            jax.make_jaxpr(lambda x, t: jax.jvp(reduce_rows, (x,), (t,)))(*args, tangent)
        )
        want = jax.jit(lambda a, t: jax.jvp(reduce_rows, a, t))(tuple(args), (tangent,))
    assert "@x" in text
    for command in ("jvp", "linearize"):
        program = transform(tmp_path, command, text, "rows")
        assert outvar_types(program.read_text()) == outvar_types(jvp_text)
        got = run_on_mesh(tmp_path, program, [*args, tangent])
        for g, w in zip(got, want):
            close(g, w)


def test_vjp_cotangent_types_are_sharded(tmp_path):
    """The vjp program takes the output cotangent and returns `f32[8@x]`, run on the mesh."""
    with jax.set_mesh(MESH):
        x = rnd(6, (8,), P("x"))
        text = str(jax.make_jaxpr(sin_times_x)(x))
        ct = np.float32(0.75)
        out, (want,) = jax.jit(
            lambda x, c: (lambda o, pull: (o, pull(c)))(*jax.vjp(sin_times_x, x))
        )(x, ct)
    program = transform(tmp_path, "vjp", text, "vjp")
    j = parse(program.read_text(), "<vjp>").jaxpr
    assert [str(v.type) for v in j.invars] == ["f32[8@x]", "f32[]"]
    assert str(j.outvars[-1].type) == "f32[8@x]"
    got = run_on_mesh(tmp_path, program, [x, ct])
    close(got[0], out)
    close(got[1], want)


def _split_rows(x):
    return jnp.sum(jnp.sin(x.reshape(2, 4, 4)) * 2.0)  # splits the sharded dim: needs x's size


def test_check_grad_explain_and_memory_take_the_mesh_a_text_does_not_print(tmp_path):
    """A top-level make_jaxpr of an explicitly sharded function prints `f32[8@x,4]` and no
    mesh: check-grad, explain and memory take `--mesh x=2` as the AD commands do."""
    import json

    x = rnd(7, (8, 4), P("x"))
    text = str(jax.make_jaxpr(_split_rows)(x))
    assert "f32[8@x,4]" in text and "mesh" not in text.lower()
    src = tmp_path / "split.jaxpr"
    src.write_text(text)

    refused = run(["check-grad", str(src)])
    assert refused.exit_code == 2 and "--mesh x=SIZE" in refused.output
    r = run(["check-grad", "--mesh", "x=2", "--json", str(src)])
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout[r.stdout.index("{") :])
    checks = report["files"][0]["checks"]
    assert len(checks) == 3 and all(c["result"] == "pass" for c in checks), checks

    r = run(["explain", "--mesh", "x=2", "--mode", "grad", "--width", "120", str(src)])
    assert r.exit_code == 0, r.output
    assert "all checks pass" in r.stdout

    # (JAX also keeps the literal 2.0 as an f32[] residual; the tool's program holds it as
    # a literal: every array residual is counted, at its global bytes; their types traced,
    # not run: eagerly, JAX compiles each operation)
    leaves = jax.eval_shape(lambda x: jax.tree_util.tree_leaves(jax.vjp(_split_rows, x)[1]), x)
    jax_saved = sum(math.prod(leaf.shape) * leaf.dtype.itemsize for leaf in leaves if leaf.shape)
    assert jax_saved == 128
    r = run(["memory", "--mesh", "x=2", "--of", "vjp", "--no-xla", "--json", str(src)])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["residual_bytes"] == jax_saved
