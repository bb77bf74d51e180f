"""Unreduced values (issue 25): a reduction JAX 0.12 leaves unreduced over a mesh axis
(`reduce_sum[out_sharding=NamedSharding(..., spec=P(unreduced={'x'}, ...))]`, a type
`f32[4]{U:x}`), a shard_map taking it with `in_specs=(P(unreduced={'x'}, ...),)`, and the
collectives that finish the reduction (`unreduced_psum`, `unreduced_pmax`,
`unreduced_pmin`) or a `reshard` to replicated.  `run` of what JAX prints gives
`jax.jit`'s numbers on the same 4-device CPU mesh; `vmap` refuses the collectives, as
JAX's batchers do, and so does the JVP of unreduced_pmax/pmin (JAX has none).  `pshuffle`
and `pcast`, which no JAX binds, are refused saying so."""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
from jax import lax  # noqa: E402
from jax._src.partition_spec import UnreducedKind  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402
from jax_oracle import run  # noqa: E402

pytestmark = pytest.mark.skipif(
    len(jax.devices("cpu")) < 4, reason="needs 4 host CPU devices (conftest sets XLA_FLAGS)"
)

MESH = jax.make_mesh(
    (4,), ("x",), axis_types=(jax.sharding.AxisType.Explicit,), devices=jax.devices("cpu")[:4]
)
X0 = np.ones(3, np.float32)
REDUCE = {"sum": lax.reduce_sum, "max": lax.reduce_max, "min": lax.reduce_min}
FINISH = {"sum": lax.psum, "max": lax.pmax, "min": lax.pmin}


def unreduced(kind: str):
    """Rows reduced over the sharded dim, left unreduced over x; a shard_map finishes it."""

    def f(a):
        spec = P(unreduced={"x"}, unreduced_kind=UnreducedKind[kind])
        m = REDUCE[kind](a * 2.0 - 7.0, (0,), out_sharding=spec)

        @jax.shard_map(mesh=MESH, in_specs=spec, out_specs=P())
        def finish(v):
            return FINISH[kind](v, "x")

        return finish(m)

    return f


def resharded(a):
    spec = P(unreduced={"x"}, unreduced_kind=UnreducedKind.max)
    return jax.sharding.reshard(lax.reduce_max(a, (0,), out_sharding=spec), P())


CASES = {**{f"unreduced_p{k}": unreduced(k) for k in REDUCE}, "reshard": resharded}
CASES["unreduced_psum"] = CASES.pop("unreduced_psum")


def traced(name, tmp_path):
    a = np.random.default_rng(3).uniform(-2.0, 2.0, (8, 4)).astype(np.float32)
    with jax.set_mesh(MESH):
        x = jax.device_put(a, NamedSharding(MESH, P("x", None)))
        text = str(jax.make_jaxpr(CASES[name])(x))
        want = np.asarray(jax.jit(CASES[name])(x))
    src = tmp_path / f"{name}.jaxpr"
    src.write_text(text + "\n")
    np.save(tmp_path / "a.npy", a)
    return src, want, text


@pytest.mark.parametrize("eager", [False, True], ids=["compiled", "eager"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_run_of_unreduced_values_is_jax_s(tmp_path, name, eager):
    src, want, text = traced(name, tmp_path)
    assert "unreduced={'x'}" in text and (name == "reshard" or f"= {name}[" in text), text
    out = tmp_path / "o.npz"
    argv = ["run", str(src), "--mesh", "x=4", "--arg", str(tmp_path / "a.npy"), "-o", str(out)]
    r = run(argv + (["--eager"] if eager else []))
    assert r.exit_code == 0, r.output
    with np.load(out, allow_pickle=False) as z:
        np.testing.assert_allclose(z["out0"], want, rtol=1e-6)


def test_vmap_and_jvp_refuse_what_jax_refuses(tmp_path):
    """JAX 0.12: `Batching rule ... not implemented` for the three collectives (their batchers
    raise NotImplementedError), no JVP rule for unreduced_pmax."""
    src, _, _ = traced("unreduced_pmax", tmp_path)
    r = run(["vmap", "--axis-size", "2", str(src)])
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert "error: Batching rule for 'unreduced_pmax' not implemented" in r.output, r.output
    r = run(["jvp", str(src)])
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert "error: Differentiation rule for 'unreduced_pmax' not implemented" in r.output, r.output


@pytest.mark.parametrize("name", ["pshuffle", "pcast"])
def test_names_no_jax_binds_are_refused_saying_so(tmp_path, name):
    """jax.lax.pshuffle binds ppermute and jax.lax.pcast one of the casts: no JAX from 0.10 to
    0.12 prints `pshuffle` or `pcast`, so a text that does is refused, naming that."""
    text = str(jax.make_jaxpr(lambda x: lax.pshuffle(x, "i", [1, 0]), axis_env=[("i", 2)])(X0))
    assert "ppermute[" in text and "pshuffle" not in text
    src = tmp_path / "p.jaxpr"
    src.write_text(f"{{ lambda ; a:f32[3]. let b:f32[3] = {name}[axis_name=i] a in (b,) }}\n")
    r = run(["run", str(src), "--random", "0"])
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert f"{src}:1:26: error: cannot run '{name}' is no primitive of JAX 0.10 to 0.12" in (
        r.output
    )
