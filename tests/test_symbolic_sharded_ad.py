"""vmap, jvp, linearize/transpose, vjp and grad of dims both symbolic and sharded (issue 25).

JAX 0.12 types an input `f32[2*b@x,3]` when it is traced at a symbolic shape
(`jax.export.symbolic_shape`) under an Explicit mesh whose axis divides the size.  The tool
transforms the printed text; JAX is the oracle: (a) the result types of
`jax.make_jaxpr(jax.vmap(f))` / `jax.jvp` / `jax.vjp` / `jax.grad` on the same symbolic,
sharded input, (b) the numbers of the tool's programs run on the mesh at b = 3 (`run --mesh
x=2 --dim b=3`) against jax.vmap / jax.jvp / jax.vjp / jax.grad of f on a concrete array of
that size sharded the same way, and the dot-product test <w, L t> = <L^T w, t> of the
linearized program and its transpose.  What JAX's sharding rules refuse is refused, at the
equation."""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax import export, lax  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402
from jax_oracle import close, run  # noqa: E402

from jaxprtool import api  # noqa: E402
from jaxprtool.shardings import axis_sizes_of  # noqa: E402

MESH = "x=2"
(B,) = export.symbolic_shape("b")
SIZE = 3  # b at run time: 6 rows over 2 devices
BATCH = 4


def weights():
    return jnp.arange(12.0, dtype=jnp.float32).reshape(3, 4) / 10


CASES = {
    "elementwise": lambda x: jnp.sin(x) * x + 2.0,
    "reduce_rows": lambda x: x.sum(1),
    "reduce_max": lambda x: x.max(1),
    "mean": lambda x: x.mean() * x,
    "dot": lambda x: jnp.tanh(x @ weights()),
    "dot_batch": lambda x: jnp.einsum("bi,bj->bij", x, x),
    "broadcast": lambda x: jnp.broadcast_to(x[:, None, :], (x.shape[0], 2, 3)) * 2.0,
    "reshape_keep": lambda x: jnp.sin(x.reshape(x.shape[0], 3, 1)),
    "reshape_merge": lambda x: jnp.sin(x.reshape(-1)),  # f32[6*b@x]: the axis size matters
    "transpose": lambda x: jnp.cos(x.T),
    "conv_spatial": lambda x: lax.conv(x.T[None, None], jnp.ones((2, 1, 2, 1)), (1, 1), "VALID"),
    "concatenate": lambda x: jnp.concatenate([x, jnp.sin(x)], 1),
    "pad": lambda x: jnp.pad(x, ((0, 0), (1, 2))),
    "slice_rows": lambda x: lax.slice_in_dim(x, 2, x.shape[0], axis=0) * 2.0,  # 2*b - 2@x
    "softmax": lambda x: jax.nn.softmax(x, 1),
}
FAST = ("dot", "reshape_merge", "slice_rows")


def _params(names):
    return [n if n in FAST else pytest.param(n, marks=pytest.mark.slow) for n in names]


def struct(mesh, shape, spec):
    return jax.ShapeDtypeStruct(shape, jnp.float32, sharding=NamedSharding(mesh, spec))


def concrete(mesh, seed, shape, spec):
    a = np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)
    return jax.device_put(a, NamedSharding(mesh, spec))


def outvar_types(text_or_program):
    p = text_or_program if isinstance(text_or_program, api.Program) else api.parse(text_or_program)
    return [str(v.type) for v in p.jaxpr.outvars]


def transformed(program, how):
    """The tool's transformation of `program`, printed and read back (what a user pipes on);
    the mesh axis sizes as `--mesh x=2` gives them (a top-level printout names no mesh)."""
    with axis_sizes_of(program.jaxpr, {"x": 2}):
        return api.parse(api.format(how(program)), "<result>")


def run_on_mesh(tmp_path, program, args):
    """`jaxprtool run --mesh x=2 --dim b=3` of the program on `args`."""
    src = tmp_path / "p.jaxpr"
    src.write_text(api.format(program))
    files = []
    for i, a in enumerate(args):
        np.save(tmp_path / f"arg{i}.npy", np.asarray(a))
        files += ["--arg", str(tmp_path / f"arg{i}.npy")]
    out = tmp_path / "out.npz"
    r = run(["run", str(src), "--mesh", MESH, "--dim", f"b={SIZE}", *files, "-o", str(out)])
    assert r.exit_code == 0, r.output
    got = np.load(out)
    return [got[f"out{i}"] for i in range(len(got.files))]


@pytest.mark.parametrize("name", _params(CASES))
def test_transformations_match_jax(tmp_path, name, explicit_mesh):
    f = CASES[name]
    mesh = explicit_mesh(MESH)

    def loss(x):
        return jnp.sum(jnp.sin(f(x)))

    sym = struct(mesh, (2 * B, 3), P("x"))
    sym_batch = struct(mesh, (BATCH, 2 * B, 3), P(None, "x"))
    with jax.set_mesh(mesh):
        text, loss_text = str(jax.make_jaxpr(f)(sym)), str(jax.make_jaxpr(loss)(sym))
        out_sym = jax.eval_shape(f, sym)
        want_types = {
            "vmap": jax.make_jaxpr(jax.vmap(f))(sym_batch),
            "jvp": jax.make_jaxpr(lambda x, t: jax.jvp(f, (x,), (t,)))(sym, sym),
            "vjp": jax.make_jaxpr(lambda x, c: jax.vjp(f, x)[1](c))(sym, out_sym),
            "grad": jax.make_jaxpr(jax.grad(loss))(sym),
        }
        x, t = concrete(mesh, 0, (2 * SIZE, 3), P("x")), concrete(mesh, 1, (2 * SIZE, 3), P("x"))
        xb = concrete(mesh, 2, (BATCH, 2 * SIZE, 3), P(None, "x"))
        y, pullback = jax.vjp(f, x)
        ct = concrete(mesh, 3, y.shape, y.sharding.spec)
        want = {
            "vmap": [jax.vmap(f)(xb)],
            "jvp": list(jax.jvp(f, (x,), (t,))),
            "vjp": [y, *pullback(ct)],
            "grad": [jax.grad(loss)(x)],
        }
    assert "a:f32[2*b@x,3]" in text
    program, loss_program = api.parse(text), api.parse(loss_text)
    got = {
        "vmap": transformed(program, lambda p: api.vmap(p, 0, 0, BATCH)),
        "jvp": transformed(program, api.jvp),
        "vjp": transformed(program, api.vjp),
        "grad": transformed(loss_program, api.grad),
    }
    for how, jaxpr in want_types.items():
        n = len(jaxpr.jaxpr.outvars)
        assert outvar_types(got[how])[-n:] == [
            str(v.aval.str_short(True)) for v in jaxpr.jaxpr.outvars
        ]
    args = {"vmap": [xb], "jvp": [x, t], "vjp": [x, ct], "grad": [x]}
    for how, values in want.items():
        results = run_on_mesh(tmp_path, got[how], args[how])
        assert len(results) == len(values), how
        for g, w in zip(results, values):
            close(g, w)
    # the linearized program and its transpose: jax.jvp's tangent, and <ct, L t> = <L^T ct, t>
    combined = transformed(program, api.linearize)
    y_lin, lt = run_on_mesh(tmp_path, combined, [x, t])
    close(lt, want["jvp"][1])
    _, lt_ct = run_on_mesh(tmp_path, transformed(combined, api.transpose), [x, ct])
    lhs = float(np.vdot(np.asarray(ct, np.float64), lt))
    rhs = float(np.vdot(lt_ct.astype(np.float64), np.asarray(t)))
    assert abs(lhs - rhs) <= 1e-4 * max(1.0, abs(lhs)), (lhs, rhs)
