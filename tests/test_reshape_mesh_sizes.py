"""Reshapes that split or merge an explicitly sharded dim (issue 25): the result's sharding
depends on the mesh axis sizes, which the types (`f32[8@x,4]`) do not give.  The rules read
them from the meshes the text prints (a jit's `ctx_mesh`, a shard_map's `mesh`, a
`NamedSharding(mesh=AbstractMesh(...))`), or from `--mesh`, and give JAX's
`_reshape_sharding_rule` result, refusing what it refuses.  JAX is the oracle: the shape
rule against the types `jax.make_jaxpr` prints, vmap / jacrev / grad against jax.vmap /
jax.jacrev / jax.grad on the same mesh (printed types and numbers)."""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402
from jax_oracle import close, run  # noqa: E402

from jaxprtool.core import ShapedArray  # noqa: E402
from jaxprtool.shapes import ShapeError, infer_types  # noqa: E402
from jaxprtool.shardings import axis_sizes_of  # noqa: E402
from jaxprtool.text.parser import parse  # noqa: E402

# (mesh, operand shape, operand spec, new sizes, dimensions)
CASES = [
    ("x=2", (8, 4), P("x"), (2, 4, 4), None),
    ("x=4", (8, 4), P("x"), (2, 4, 4), None),
    ("x=4", (8, 4), P("x"), (4, 2, 4), None),
    ("x=2", (8, 4), P("x"), (32,), None),
    ("x=2", (8, 4), P(None, "x"), (32,), None),
    ("x=2", (8, 4), P(None, "x"), (8, 2, 2), None),
    ("x=2,y=2", (8, 4), P("x", "y"), (32,), None),
    ("x=2,y=2", (8, 4), P(("x", "y")), (2, 4, 4), None),
    ("x=2,y=2", (8, 4), P(("x", "y")), (4, 2, 4), None),
    ("x=2,y=2", (2, 4), P("x", "y"), (8,), None),
    ("x=2", (2, 1, 4), P("x"), (8,), None),
    ("x=2", (1, 8), P(None, "x"), (2, 1, 4), None),
    ("x=4", (16,), P("x"), (2, 8), None),
    ("x=4", (16,), P("x"), (4, 2, 2), None),
    ("x=2", (4, 2, 3), P("x"), (8, 3), None),
    ("x=2", (4, 2, 3), P("x"), (4, 6), None),
    ("x=2", (8, 4), P("x"), (4, 8), (1, 0)),
    ("x=2", (2, 2, 4), P("x"), (4, 4), (1, 0, 2)),
    ("x=2", (2, 4, 4), P(None, "x"), (8, 4), None),
    ("x=2", (8, 4), P("x"), (2, 2, 2, 4), None),
]


def jax_type(mesh, shape, spec, new, dims):
    """The result type JAX prints for the reshape, or None when JAX refuses it."""
    with jax.set_mesh(mesh):
        x = jax.ShapeDtypeStruct(shape, np.float32, sharding=NamedSharding(mesh, spec))
        try:
            text = str(jax.make_jaxpr(lambda a: lax.reshape(a, new, dims))(x))
        except Exception as e:  # noqa: BLE001 - JAX's refusal
            assert "reshape is not supported" in str(e) or "does not evenly divide" in str(e)
            return None
    return str(parse(text, "<jax>").jaxpr.eqns[0].outputs[0].type)


def sharded_type(shape, spec):
    entries = list(spec) + [None] * (len(shape) - len(spec))
    dims = []
    for n, e in zip(shape, entries):
        axes = (e,) if isinstance(e, str) else tuple(e or ())
        dims.append(
            n if not axes else f"{n}@{axes[0]}" if len(axes) == 1 else f"{n}@({','.join(axes)})"
        )
    return ShapedArray(tuple(dims), "f32")


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}:{c[1]}{tuple(c[2])}->{c[3]}")
def test_reshape_sharding_rule_is_jax(case, explicit_mesh):
    name, shape, spec, new, dims = case
    mesh = explicit_mesh(name)
    want = jax_type(mesh, shape, spec, new, dims)
    params = {"new_sizes": new, "dimensions": dims, "sharding": None}
    sizes = dict(mesh.shape)
    with axis_sizes_of(None, sizes):
        if want is None:
            with pytest.raises(ShapeError, match="reshape sharding rule refuses"):
                infer_types("reshape", [sharded_type(shape, spec)], params)
        else:
            (got,) = infer_types("reshape", [sharded_type(shape, spec)], params)
            assert str(got) == want


def test_the_size_is_asked_for_when_the_text_does_not_print_it():
    params = {"new_sizes": (2, 4, 4), "dimensions": None, "sharding": None}
    with pytest.raises(ShapeError, match=r"give it with --mesh x=SIZE"):
        infer_types("reshape", [sharded_type((8, 4), P("x"))], params)


# ---------------------------------------------------------------- the commands, against JAX


def rnd(mesh, seed, shape, spec=P()):
    a = np.random.default_rng(seed).uniform(0.5, 1.5, shape).astype(np.float32)
    return jax.device_put(a, NamedSharding(mesh, spec))


def split_rows(x):
    return jnp.sum(jnp.sin(x.reshape(2, 4, 4)))


def merge_rows(x):
    return jnp.sum(jnp.sin(x.reshape(32)) * jnp.arange(32.0))


def types(text, prims=("reshape",)):
    """The printed result types of the program's `prims` equations, nested ones too."""
    from jaxprtool.core import all_eqns

    return [str(e.outputs[0].type) for e in all_eqns(parse(text, "<t>").jaxpr) if e.prim in prims]


def tool(tmp_path, args, text):
    src = tmp_path / "f.jaxpr"
    src.write_text(text)
    out = tmp_path / "out.jaxpr"
    r = run([*args, str(src), "-o", str(out)])
    assert r.exit_code == 0, r.output
    return out


def run_on_mesh(tmp_path, program, args, mesh_text="x=2"):
    files = []
    for i, a in enumerate(args):
        np.save(tmp_path / f"arg{i}.npy", np.asarray(a))
        files += ["--arg", str(tmp_path / f"arg{i}.npy")]
    out = tmp_path / "out.npz"
    r = run(["run", str(program), "--mesh", mesh_text, *files, "-o", str(out)])
    assert r.exit_code == 0, r.output
    got = np.load(out)
    return [got[f"out{i}"] for i in range(len(got.files))]


@pytest.mark.parametrize("f", [split_rows, merge_rows], ids=["split", "merge"])
def test_vmap_reads_the_mesh_of_a_jit(tmp_path, f, explicit_mesh):
    """vmap's reshape splits (merges) the sharded dim: the size of x comes from the jit's
    ctx_mesh; the types and the numbers are jax.vmap's."""
    mesh = explicit_mesh("x=2")
    with jax.set_mesh(mesh):
        xb = rnd(mesh, 1, (3, 8, 4), P(None, "x"))
        text = str(jax.make_jaxpr(jax.jit(f))(xb[0]))
        want_text = str(jax.make_jaxpr(jax.vmap(f))(xb))
        want = jax.jit(jax.vmap(f))(xb)
    assert "ctx_mesh=Mesh('x': 2" in text
    program = tool(tmp_path, ["vmap", "--in-axes", "0", "--axis-size", "3"], text)
    assert types(program.read_text()) == types(want_text)
    close(run_on_mesh(tmp_path, program, [xb])[0], want)


def test_vmap_takes_the_sizes_from_the_mesh_option(tmp_path, explicit_mesh):
    """A top-level printout names no mesh: the refusal asks for --mesh, which gives it."""
    mesh = explicit_mesh("x=2")
    with jax.set_mesh(mesh):
        xb = rnd(mesh, 2, (3, 8, 4), P(None, "x"))
        text = str(jax.make_jaxpr(split_rows)(xb[0]))
        want_text = str(jax.make_jaxpr(jax.vmap(split_rows))(xb))
    src = tmp_path / "f.jaxpr"
    src.write_text(text)
    r = run(["vmap", "--in-axes", "0", "--axis-size", "3", str(src)])
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert f"{src}:2:5: error: while batching: reshape: the sharding of f32[3,8@x,4]" in r.output
    assert "give it with --mesh x=SIZE" in r.output
    program = tool(tmp_path, ["vmap", "--in-axes", "0", "--axis-size", "3", "--mesh", "x=2"], text)
    assert types(program.read_text()) == types(want_text)
    r = run(["vmap", "--in-axes", "0", "--axis-size", "3", "--mesh", "x=4", str(src)])
    assert r.exit_code == 1 and "does not divide" in r.output  # as JAX: 2 rows over 4 devices


def test_vmap_on_a_four_device_mesh(tmp_path, explicit_mesh):
    """x=4: 8 rows split as (4, 2) keep x on the 4 (2 would not take it: see the table)."""
    mesh = explicit_mesh("x=4")
    f = lambda x: jnp.sum(jnp.sin(x.reshape(4, 2, 4)))  # noqa: E731
    with jax.set_mesh(mesh):
        xb = rnd(mesh, 3, (3, 8, 4), P(None, "x"))
        text = str(jax.make_jaxpr(jax.jit(f))(xb[0]))
        want_text = str(jax.make_jaxpr(jax.vmap(f))(xb))
        want = jax.jit(jax.vmap(f))(xb)
    program = tool(tmp_path, ["vmap", "--in-axes", "0", "--axis-size", "3"], text)
    assert types(program.read_text()) == types(want_text) == ["f32[3,4@x,2,4]"]
    close(run_on_mesh(tmp_path, program, [xb], "x=4")[0], want)


def test_jacrev_of_a_sharded_split(tmp_path, explicit_mesh):
    mesh = explicit_mesh("x=2")
    with jax.set_mesh(mesh):
        x = rnd(mesh, 4, (8, 4), P("x"))
        text = str(jax.make_jaxpr(jax.jit(split_rows))(x))
        want_text = str(jax.make_jaxpr(jax.jacrev(split_rows))(x))
        want = jax.jit(jax.jacrev(split_rows))(x)
    program = tool(tmp_path, ["jacrev"], text)
    got_text = program.read_text()
    assert "new_sizes=(8, 4)" in got_text and "'8@x'" not in got_text
    assert types(got_text)[-1] == types(want_text)[-1] == "f32[8@x,4]"
    close(run_on_mesh(tmp_path, program, [x])[0], want)


@pytest.mark.parametrize("command", ["jacfwd", "hessian"])
def test_jacfwd_and_hessian_of_a_sharded_input(tmp_path, command, explicit_mesh):
    """The basis rows are converted to the input's sharding (JAX's `convert_element_type`
    whose sharding the binder type implies), then split as the input's reshape splits it."""
    mesh = explicit_mesh("x=2")
    jax_fn = getattr(jax, command)
    with jax.set_mesh(mesh):
        x = rnd(mesh, 5, (8, 4), P("x"))
        text = str(jax.make_jaxpr(jax.jit(split_rows))(x))
        want_text = str(jax.make_jaxpr(jax_fn(split_rows))(x))
        want = jax.jit(jax_fn(split_rows))(x)
    program = tool(tmp_path, [command], text)
    got_text = program.read_text()
    assert [str(v.type) for v in parse(got_text, "<t>").jaxpr.outvars] == [
        str(v.type) for v in parse(want_text, "<t>").jaxpr.outvars
    ]
    if command == "jacfwd":  # the basis and its batched split: JAX's types
        assert types(got_text, ("convert_element_type",))[-1] == "f32[32,8@x,4]"
        assert "f32[32,2@x,4,4]" in types(want_text) and "f32[32,2@x,4,4]" in types(got_text)
    close(run_on_mesh(tmp_path, program, [x])[0], want)
