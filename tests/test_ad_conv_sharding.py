"""AD of conv_general_dilated on explicitly sharded operands (issue 25): the conv's shape rule
gives JAX's result sharding (`_conv_general_dilated_sharding_rule`: the `out_sharding`
parameter, else the lhs's spec position by position), its transposes carry the operand's
sharding as `out_sharding` as JAX's do, and reshape keeps the axes of the dims it does not
split or merge.  grad/jvp/vjp of JAX's printouts give the types `jax.make_jaxpr(jax.grad(f))`
prints and, run on the same mesh, jax.grad's / jax.jvp's / jax.vjp's numbers."""

from __future__ import annotations

import re

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402
from jax_oracle import close, run  # noqa: E402

from jaxprtool.text.parser import parse  # noqa: E402

# Programs sharded over x alone run on a mesh of x alone: XLA:CPU's SPMD partitioner gives a
# kernel gradient summed over a dim sharded on x times the size of an unused y axis (jax.grad
# on a (2, 2) mesh as much as the tool's program: an upstream bug, see `truth`).
# Meshes are named by their `--mesh` text (conftest's `explicit_mesh` makes them).
MESH_X, MESH_XY = "x=2", "x=2,y=2"


def rnd(mesh, seed, shape, spec=P()):
    a = np.random.default_rng(seed).uniform(0.5, 1.5, shape).astype(np.float32)
    return jax.device_put(a, NamedSharding(mesh, spec))


def conv(x, w, strides=(1, 1), padding="VALID", **kw):
    return lax.conv_general_dilated(x, w, strides, padding, **kw)


def spatial(x, w):
    """NCHW, the height sharded: the result keeps `@x` there, the kernel's grad is replicated."""
    return jnp.sum(jnp.tanh(conv(x, w)) ** 2)


def nhwc_to_nchw(x, w):
    """JAX gives the result the lhs's spec by position, not by dimension numbers."""
    return jnp.sum(conv(x, w, dimension_numbers=("NHWC", "OIHW", "NCHW")) ** 2)


def two_axes_same(x, w):
    return jnp.sum(jnp.sin(conv(x, w, padding="SAME")) * 2.0)


def strided(x, w):
    return jnp.sum(conv(x, w, (2, 1), "SAME", rhs_dilation=(1, 2)) ** 2)


def feature_groups(x, w):
    return jnp.sum(conv(x, w, feature_group_count=2) ** 2)


def batch_groups(x, w):
    """Its lhs transpose splits and merges the unsharded batch and feature dims (reshape)."""
    return jnp.sum(conv(x, w, batch_group_count=2) ** 2)


def replicated_result(x, w):
    """An explicit `out_sharding`: the forward prints the mesh, the transposes reuse it."""
    return jnp.sum(conv(x, w, out_sharding=P()) ** 2)


def sharded_features(x, w):
    """lhs features over x: JAX needs `out_sharding`; the lhs grad comes back `@x` there."""
    return jnp.sum(conv(x, w, out_sharding=P()) ** 2)


def sharded_kernel(x, w):
    """The kernel's output features over x (tensor parallel), the result's features too."""
    return jnp.sum(conv(x, w, out_sharding=P(None, "x")) ** 2)


PROGRAMS = {  # name: (function, mesh, (seed, shape, spec) of each argument)
    "spatial": (spatial, MESH_X, [(0, (2, 1, 8, 4), P(None, None, "x")), (1, (3, 1, 3, 2))]),
    "nhwc_to_nchw": (nhwc_to_nchw, MESH_X, [(2, (2, 8, 4, 2), P(None, "x")), (3, (4, 2, 3, 1))]),
    "two_axes_same": (
        two_axes_same,
        MESH_XY,
        [(4, (1, 1, 8, 4), P(None, None, ("x", "y"))), (5, (1, 1, 3, 1))],
    ),
    "strided": (strided, MESH_X, [(6, (1, 2, 8, 6), P(None, None, "x")), (7, (2, 2, 3, 2))]),
    "feature_groups": (
        feature_groups,
        MESH_XY,
        [(8, (2, 4, 8, 4), P("y", None, "x")), (9, (4, 2, 3, 1))],
    ),
    "batch_groups": (
        batch_groups,
        MESH_X,
        [(10, (4, 2, 8, 4), P(None, None, "x")), (11, (4, 2, 3, 1))],
    ),
    "sharded_features": (
        sharded_features,
        MESH_X,
        [(14, (2, 4, 8, 4), P(None, "x")), (15, (3, 4, 3, 2))],
    ),
    "sharded_kernel": (
        sharded_kernel,
        MESH_X,
        [(16, (2, 1, 8, 4)), (17, (4, 1, 3, 2), P("x"))],
    ),
    "replicated_result": (
        replicated_result,
        MESH_X,
        [(12, (2, 1, 8, 4), P("x")), (13, (3, 1, 3, 2))],
    ),
}


def make_args(mesh, specs):
    return [rnd(mesh, *spec) for spec in specs]


def _outs_and_cts(f, ct, *args):
    """f's outputs and jax.vjp's cotangents of `ct` (to be jitted: one compilation)."""
    out, pullback = jax.vjp(f, *args)
    return out, pullback(ct)


def truth(mesh, fn, args):
    """`fn` (a jax.grad / jax.vjp of the program) on replicated copies of `args`: no sharded
    contraction, so no partitioner in the way."""
    replicated = [jax.device_put(np.asarray(a), NamedSharding(mesh, P())) for a in args]
    return jax.jit(fn)(*replicated)  # (eagerly, one compilation a primitive)


def conv_result_types(text):
    """The result types of the program's convolutions and reshapes, in order."""
    eqns = parse(text, "<text>").jaxpr.eqns
    return [str(e.outputs[0].type) for e in eqns if e.prim in ("conv_general_dilated", "reshape")]


def outvar_types(text):
    return [str(v.type) for v in parse(text, "<text>").jaxpr.outvars]


def transform(tmp_path, command, text, *options):
    src = tmp_path / "f.jaxpr"
    src.write_text(text)
    out = tmp_path / f"f.{command}.jaxpr"
    r = run([command, str(src), *options, "-o", str(out)])
    assert r.exit_code == 0, r.output
    return out


def run_on_mesh(tmp_path, mesh_text, program, args):
    files = []
    for i, a in enumerate(args):
        np.save(tmp_path / f"arg{i}.npy", np.asarray(a))
        files += ["--arg", str(tmp_path / f"arg{i}.npy")]
    out = tmp_path / "out.npz"
    r = run(["run", str(program), "--mesh", mesh_text, *files, "-o", str(out)])
    assert r.exit_code == 0, r.output
    got = np.load(out)
    return [got[f"out{i}"] for i in range(len(got.files))]


def grad_case(tmp_path, name, explicit_mesh):
    f, mesh_text, specs = PROGRAMS[name]
    mesh = explicit_mesh(mesh_text)
    with jax.set_mesh(mesh):
        args = make_args(mesh, specs)
        text = str(jax.make_jaxpr(f)(*args))
        jax_text = str(jax.make_jaxpr(jax.grad(f, (0, 1)))(*args))
        want = jax.jit(jax.grad(f, (0, 1)))(*args)
        exact = truth(mesh, jax.grad(f, (0, 1)), args)
    assert "@" in text
    program = transform(tmp_path, "grad", text, "--argnums", "0,1")
    got_text = program.read_text()
    assert outvar_types(got_text) == outvar_types(jax_text)
    assert conv_result_types(got_text) == conv_result_types(jax_text)
    got = run_on_mesh(tmp_path, mesh_text, program, args)
    assert len(got) == len(want)
    for g, w, e in zip(got, want, exact):
        close(g, w)
        close(g, e)


def test_grad_over_a_sharded_spatial_dim(tmp_path, explicit_mesh):
    grad_case(tmp_path, "spatial", explicit_mesh)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(set(PROGRAMS) - {"spatial"}))
def test_grad_matches_jax(tmp_path, name, explicit_mesh):
    grad_case(tmp_path, name, explicit_mesh)


def test_grad_with_groups_and_two_axes(tmp_path, explicit_mesh):
    """The fast representative of the sweep: feature groups, batch over y, height over x."""
    grad_case(tmp_path, "feature_groups", explicit_mesh)


def test_jvp_and_vjp_match_jax(tmp_path, explicit_mesh):
    f, mesh_text, specs = PROGRAMS["strided"]
    mesh = explicit_mesh(mesh_text)
    ct = np.float32(0.5)
    with jax.set_mesh(mesh):
        x, w = make_args(mesh, specs)
        tx, tw = rnd(mesh, 20, x.shape, P(None, None, "x")), rnd(mesh, 21, w.shape)
        text = str(jax.make_jaxpr(f)(x, w))
        jvp_text = str(jax.make_jaxpr(lambda *a: jax.jvp(f, a[:2], a[2:]))(x, w, tx, tw))
        want_jvp, (out, want_vjp) = jax.jit(  # JAX's jvp and vjp: one compilation
            lambda x, w, tx, tw: (jax.jvp(f, (x, w), (tx, tw)), _outs_and_cts(f, ct, x, w))
        )(x, w, tx, tw)
        exact_vjp = truth(mesh, lambda x, w: jax.vjp(f, x, w)[1](ct), [x, w])
    program = transform(tmp_path, "jvp", text)
    assert outvar_types(program.read_text()) == outvar_types(jvp_text)
    for g, w_ in zip(run_on_mesh(tmp_path, mesh_text, program, [x, w, tx, tw]), want_jvp):
        close(g, w_)
    program = transform(tmp_path, "vjp", text)
    types = [str(v.type) for v in parse(program.read_text(), "<vjp>").jaxpr.outvars]
    assert types[-2:] == ["f32[1,2,8@x,6]", "f32[2,2,3,2]"]
    got = run_on_mesh(tmp_path, mesh_text, program, [x, w, ct])
    close(got[0], out)
    for g, w_, e in zip(got[1:], want_vjp, exact_vjp):
        close(g, w_)
        close(g, e)


@pytest.mark.parametrize("linear", [0, 1], ids=["lhs", "rhs"])
def test_transpose_passes_the_dot_product_test(tmp_path, linear, explicit_mesh):
    """The conv linear in one operand (the other a residual), transposed: `<w, L v> = <L^T w,
    v>` on the mesh, L v is JAX's conv, L^T w is jax.vjp's cotangent with its type."""
    f = lambda x, w: conv(x, w, (2, 1), "SAME")  # noqa: E731
    mesh = explicit_mesh(MESH_X)
    with jax.set_mesh(mesh):
        x, w = rnd(mesh, 30, (2, 1, 8, 4), P(None, None, "x")), rnd(mesh, 31, (3, 1, 3, 2))
        ct = rnd(mesh, 32, jax.eval_shape(f, x, w).shape, P(None, None, "x"))
        y, cts = jax.jit(lambda x, w, ct: _outs_and_cts(f, ct, x, w))(x, w, ct)
        want = cts[linear]
        text = str(jax.make_jaxpr(f)(x, w))
        vjp_text = str(jax.make_jaxpr(lambda x, w, ct: jax.vjp(f, x, w)[1](ct))(x, w, ct))
    program = transform(tmp_path, "transpose", text, "--linear", str(linear))
    residual, v = (w, x) if linear == 0 else (x, w)
    got_t = run_on_mesh(tmp_path, MESH_X, program, [residual, ct])[0]
    assert outvar_types(program.read_text()) == [outvar_types(vjp_text)[linear]]
    close(got_t, want)
    got_lv = run_on_mesh(tmp_path, MESH_X, tmp_path / "f.jaxpr", [x, w])[0]
    close(got_lv, y)
    lhs = float(np.sum(np.asarray(ct, np.float64) * got_lv))
    rhs = float(np.sum(got_t.astype(np.float64) * np.asarray(v)))
    assert abs(lhs - rhs) <= 1e-4 * max(1.0, abs(lhs)), (lhs, rhs)


@pytest.mark.parametrize("jit", [False, True], ids=["top", "jit"])
def test_reshape_merging_a_sharded_dim_refuses_as_jax_does(tmp_path, jit, explicit_mesh):
    """batch groups over a sharded batch dim: the lhs transpose merges the feature groups
    into the `@y` batch dim in one reshape with `dimensions` (JAX's `_reshape_axis_into`),
    which JAX's reshape sharding rule refuses; the tool refuses the same reshape, of the
    operand type JAX names (with the mesh sizes printed, under jit, as well)."""
    f, mesh = batch_groups, explicit_mesh(MESH_XY)
    with jax.set_mesh(mesh):
        x, w = rnd(mesh, 14, (4, 2, 8, 4), P("y", None, "x")), rnd(mesh, 15, (4, 2, 3, 1))
        text = str(jax.make_jaxpr(jax.jit(f) if jit else f)(x, w))
        with pytest.raises(Exception, match="reshape is not supported") as ei:
            jax.jit(jax.grad(f))(x, w)  # (refused as it is traced: no operation runs first)
    m = re.search(r"operand type: float32(\[[^\]]*\]), new sizes: (\([^)]*\))", str(ei.value))
    src = tmp_path / "b.jaxpr"
    src.write_text(text)
    out = tmp_path / "b.grad.jaxpr"
    r = run(["grad", str(src), "-o", str(out)])
    assert r.exit_code == 1 and not out.exists()
    assert f"{src}:" in r.output and "Traceback" not in r.output
    assert (
        f"error: while differentiating: reshape: the sharding of f32{m[1]} reshaped to {m[2]} "
        "is one JAX's reshape sharding rule refuses"
    ) in r.output


def test_grad_of_feature_groups_over_a_sharded_batch_on_four_devices(tmp_path, explicit_mesh):
    """Feature groups with the batch over x=4, under jit (the text prints ctx_mesh): the
    kernel's reshapes split and merge unsharded dims; types and numbers are jax.grad's."""
    mesh = explicit_mesh("x=4")
    with jax.set_mesh(mesh):
        x, w = rnd(mesh, 50, (8, 4, 8, 4), P("x")), rnd(mesh, 51, (4, 2, 3, 1))
        g = jax.jit(feature_groups)
        text = str(jax.make_jaxpr(g)(x, w))
        jax_text = str(jax.make_jaxpr(jax.grad(g, (0, 1)))(x, w))
        want = jax.jit(jax.grad(g, (0, 1)))(x, w)
        exact = truth(mesh, jax.grad(feature_groups, (0, 1)), [x, w])
    program = transform(tmp_path, "grad", text, "--argnums", "0,1")
    assert (
        outvar_types(program.read_text())
        == outvar_types(jax_text)
        == ["f32[8@x,4,8,4]", "f32[4,2,3,1]"]
    )
    files = []
    for i, a in enumerate([x, w]):
        np.save(tmp_path / f"arg{i}.npy", np.asarray(a))
        files += ["--arg", str(tmp_path / f"arg{i}.npy")]
    r = run(["run", str(program), *files, "-o", str(tmp_path / "out.npz")])  # ctx_mesh's
    assert r.exit_code == 0, r.output
    got = np.load(tmp_path / "out.npz")
    for i, (w_, e) in enumerate(zip(want, exact)):
        close(got[f"out{i}"], w_)
        close(got[f"out{i}"], e)


def test_sharded_kernel_without_out_sharding_is_refused(tmp_path):
    """JAX refuses to trace a conv with a sharded kernel unless given `out_sharding`; a text
    that has one without it is refused at the equation."""
    src = tmp_path / "k.jaxpr"
    src.write_text(
        "{ lambda ; a:f32[1,1,8,4] b:f32[2@x,1,3,1]. let\n"
        "    c:f32[1,2,6,4] = conv_general_dilated[batch_group_count=1"
        " dimension_numbers=ConvDimensionNumbers(lhs_spec=(0, 1, 2, 3), rhs_spec=(0, 1, 2, 3),"
        " out_spec=(0, 1, 2, 3)) feature_group_count=1 lhs_dilation=(1, 1) out_sharding=None"
        " padding=((0, 0), (0, 0)) precision=None preferred_element_type=None"
        " rhs_dilation=(1, 1) window_strides=(1, 1)] a b\n"
        "  in (c,) }\n"
    )
    r = run(["check", str(src)])
    assert r.exit_code == 1
    assert f"{src}:2:" in r.output
    assert "a sharded kernel or lhs feature dimension needs the result sharding" in r.output


def split_rows(x):
    return jnp.sum(jnp.sin(x.reshape(2, 4, 4)))


def merge_rows(x):
    return jnp.sum(jnp.sin(x.reshape(32)) * jnp.arange(32.0))


@pytest.mark.parametrize("f", [split_rows, merge_rows], ids=["split", "merge"])
def test_reshape_of_a_sharded_dim_keeps_jax_types(tmp_path, f, explicit_mesh):
    """A reshape that splits or merges the sharded dim: its tangent has the primal result's
    type (the sharding JAX chose, `f32[2@x,4,4]`), its cotangent the operand's."""
    mesh = explicit_mesh(MESH_X)
    with jax.set_mesh(mesh):
        x, t = rnd(mesh, 40, (8, 4), P("x")), rnd(mesh, 41, (8, 4), P("x"))
        text = str(jax.make_jaxpr(f)(x))
        jvp_text = str(jax.make_jaxpr(lambda x, t: jax.jvp(f, (x,), (t,)))(x, t))
        grad_text = str(jax.make_jaxpr(jax.grad(f))(x))
        want_jvp, want_grad = jax.jit(lambda x, t: (jax.jvp(f, (x,), (t,)), jax.grad(f)(x)))(x, t)
    program = transform(tmp_path, "jvp", text)
    assert conv_result_types(program.read_text()) == conv_result_types(jvp_text)
    for g, w in zip(run_on_mesh(tmp_path, MESH_X, program, [x, t]), want_jvp):
        close(g, w)
    program = transform(tmp_path, "grad", text)
    assert outvar_types(program.read_text()) == outvar_types(grad_text) == ["f32[8@x,4]"]
    close(run_on_mesh(tmp_path, MESH_X, program, [x])[0], want_grad)
