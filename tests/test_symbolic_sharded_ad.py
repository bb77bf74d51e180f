"""vmap, jvp, linearize/transpose, vjp and grad of dims both symbolic and sharded (issue 25).

JAX 0.12 types an input `f32[2*b@x,3]` when it is traced at a symbolic shape
(`jax.export.symbolic_shape`) under an Explicit mesh whose axis divides the size.  The tool
transforms the printed text; JAX is the oracle: (a) the result types of
`jax.make_jaxpr(jax.vmap(f))` / `jax.jvp` / `jax.vjp` / `jax.grad` on the same symbolic,
sharded input (and no more equations than JAX's vmap and grad), (b) the numbers of the tool's programs run on the mesh at b = 3 (`run --mesh
x=2 --dim b=3`) against jax.vmap / jax.jvp / jax.vjp / jax.grad of f on a concrete array of
that size sharded the same way, and the dot-product test <w, L t> = <L^T w, t> of the
linearized program and its transpose.  What JAX's sharding rules refuse is refused, at the
equation."""

from __future__ import annotations

import re

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax import export, lax  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402
from jax_oracle import close, run  # noqa: E402

from jaxprtool import api  # noqa: E402
from jaxprtool.core import all_eqns  # noqa: E402
from jaxprtool.params import SymExpr  # noqa: E402
from jaxprtool.shapes import ShapeError, infer_types  # noqa: E402
from jaxprtool.shapes.util import dim_add, dim_mul, dim_sub  # noqa: E402
from jaxprtool.shardings import (  # noqa: E402
    axis_sizes_of,
    is_sharded_dim,
    sharded_like,
    sharded_size,
)

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


def _jax_result(mesh, shape, spec, fn):
    """(the tool's reading of the operand's type, the result type JAX prints for `fn` or
    None, JAX's refusal's text or None) on a symbolic input sharded by `spec`."""
    with jax.set_mesh(mesh):
        x = struct(mesh, shape, spec)
        operand = api.parse(str(jax.make_jaxpr(lambda a: a)(x))).jaxpr.invars[0].type
        try:
            jaxpr = jax.make_jaxpr(fn)(x).jaxpr
        except Exception as e:  # noqa: BLE001 - JAX's refusal
            return operand, None, str(e)
    return operand, jaxpr.outvars[0].aval.str_short(True), None


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
        y = jax.eval_shape(f, x)
        ct = concrete(mesh, 3, y.shape, y.sharding.spec)
        # JAX's numbers in one compile (eagerly, one per operation)
        want = jax.jit(
            lambda x, t, xb, ct: {
                "vmap": [jax.vmap(f)(xb)],
                "jvp": list(jax.jvp(f, (x,), (t,))),
                "vjp": (lambda y, pull: [y, *pull(ct)])(*jax.vjp(f, x)),
                "grad": [jax.grad(loss)(x)],
            }
        )(x, t, xb, ct)
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
    for how in ("vmap", "grad"):  # no more equations than JAX's (the clean-up folds some)
        jax_eqns = all_eqns(api.parse(str(want_types[how])).jaxpr)
        assert len(list(all_eqns(got[how].jaxpr))) <= len(list(jax_eqns)), how
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


# ---------------------------------------------------------------- reshape's sharding rule

#: (mesh, operand shape, spec, new sizes): JAX's `_reshape_sharding_rule` on symbolic sizes
#: keeps singletons, merges a sharded major dim (`6*b@x`), and finds most splits
#: inconclusive (`'b' > '1'`) or refuses them
RESHAPES = [
    ("x=2", (2 * B, 3), P("x"), (2 * B, 3, 1)),
    ("x=2", (2 * B, 3), P("x"), (1, 2 * B, 3)),
    ("x=2", (2 * B, 3), P("x"), (6 * B,)),
    ("x=2", (4, 2 * B, 1, 3), P(None, "x"), (8 * B, 1, 3)),
    ("x=2", (3, 2 * B), P(None, "x"), (6 * B,)),
    ("x=2", (2 * B, 3), P("x"), (B, 2, 3)),
    ("x=2", (2 * B, 3), P("x"), (2, B, 3)),
    ("x=2", (2 * B, 3), P("x"), (2, 3, B)),
    ("x=2", (2 * B, B), P("x"), (2 * B * B,)),
    ("x=2,y=2", (4 * B, 3), P(("x", "y")), (2, 2 * B, 3)),
    ("x=2,y=2", (2 * B, 2), P("x", "y"), (4 * B,)),
]


@pytest.mark.parametrize("case", RESHAPES, ids=lambda c: f"{c[0]}:{c[1]}{tuple(c[2])}->{c[3]}")
def test_reshape_sharding_rule_on_symbolic_sizes_is_jax(case, explicit_mesh):
    """The result type JAX prints, or a refusal where JAX raises: ShardingTypeError as the
    rule's refusal, InconclusiveDimensionOperation in JAX's words (a product of symbols,
    which the tool bounds by 1 only, refused as such)."""
    name, shape, spec, new = case
    mesh = explicit_mesh(name)
    operand, want, why = _jax_result(mesh, shape, spec, lambda a: lax.reshape(a, new))
    sizes = tuple(d if isinstance(d, int) else SymExpr(str(d)) for d in new)
    params = {"new_sizes": sizes, "dimensions": None, "sharding": None}
    with axis_sizes_of(None, dict(mesh.shape)):
        if want is None:
            with pytest.raises(ShapeError) as e:
                infer_types("reshape", [operand], params)
            msg = str(e.value)
            if "is inconclusive" in why:  # a product of symbols: bounded by 1 only
                assert "is inconclusive" in msg or "not a polynomial" in msg, msg
            else:
                assert "reshape sharding rule refuses" in msg, msg
        else:
            (got,) = infer_types("reshape", [operand], params)
            assert str(got) == want


# ---------------------------------------------------------------- refusals, dims


def test_vmap_of_a_conv_over_the_sharded_batch_refuses_as_jax_does(tmp_path, explicit_mesh):
    """vmap folds its batch into the conv's sharded batch dim (JAX's `_reshape_axis_into`),
    which JAX's reshape sharding rule refuses: the tool refuses that reshape, located at the
    conv, no program written."""
    mesh = explicit_mesh(MESH)

    def g(x):
        return lax.conv(x[:, None, :], jnp.ones((1, 1, 2)), (1,), "VALID")

    with jax.set_mesh(mesh):
        text = str(jax.make_jaxpr(g)(struct(mesh, (2 * B, 3), P("x"))))
        with pytest.raises(Exception, match="reshape is not supported"):
            jax.make_jaxpr(jax.vmap(g))(struct(mesh, (BATCH, 2 * B, 3), P(None, "x")))
    src = tmp_path / "c.jaxpr"
    src.write_text(text + "\n")
    out = tmp_path / "c.vmap.jaxpr"
    r = run(["--no-color", "vmap", "--axis-size", str(BATCH), str(src), "-o", str(out)])
    assert r.exit_code == 1 and not out.exists() and "Traceback" not in r.output
    line = 1 + text.splitlines().index(
        next(s for s in text.splitlines() if "conv_general_dilated" in s)
    )
    assert f"{src}:{line}:5: error: while batching: reshape: the sharding of f32[4,2*b@x,1,3]" in (
        r.output
    )
    assert "an unsharded dim is merged ahead of a sharded one" in r.output


def test_a_merge_of_the_sharded_dim_asks_for_the_mesh_size(tmp_path, explicit_mesh):
    """`6*b@x` depends on the size of x, which a top-level printout does not give: refused
    at the reshape, asking for --mesh; with it, JAX's type."""
    mesh = explicit_mesh(MESH)
    f = CASES["reshape_merge"]
    with jax.set_mesh(mesh):
        text = str(jax.make_jaxpr(f)(struct(mesh, (2 * B, 3), P("x"))))
        want = str(jax.make_jaxpr(jax.vmap(f))(struct(mesh, (BATCH, 2 * B, 3), P(None, "x"))))
    src = tmp_path / "m.jaxpr"
    src.write_text(text + "\n")
    argv = ["--no-color", "vmap", "--axis-size", str(BATCH), str(src)]
    r = run(argv)
    assert r.exit_code == 1 and f"{src}:2:5: error: while batching: reshape:" in r.output
    assert "give it with --mesh x=SIZE" in r.output
    r = run([*argv, "--mesh", MESH])
    assert r.exit_code == 0, r.output
    assert outvar_types(r.output) == outvar_types(want) == ["f32[4,6*b@x]"]


def test_symbolic_sharded_dims_read_print_and_never_come_from_arithmetic():
    """`2*b@x` and `2*b - 2@x` are sharded dims of symbolic size, printed back as read; a
    sum or product with a sharded operand is written in parentheses, so it never reads as
    one (the AD and vmap builders refuse such a result type at its equation)."""
    text = "{ lambda ; a:f32[2*b@x,3] b:f32[2*b - 2@(x,y)]. let  in (a, b) }"
    assert (
        api.format(api.parse(text))
        == "{ lambda ; a:f32[2*b@x,3] b:f32[2*b - 2@(x,y)]. let  in (a, b) }"
    )
    assert sharded_size("2*b - 2@(x,y)") == "2*b - 2" and sharded_size("8@x") == 8
    assert sharded_like("2*b@x", "2*b - 2") == "2*b - 2@x"
    for d in (
        dim_add("b", "2*b@x"),
        dim_add("2*b@x", 1),
        dim_sub("2*b@x", 1),
        dim_mul(4, "2*b@x"),
        dim_add("8@x", "8@x"),
    ):
        assert "@" in d and not is_sharded_dim(d), d


#: (operand shape, spec, start, limit): JAX's `_slice_sharding_rule` keeps the axes where they
#: divide the result dim, refuses where they do not, and replicates a result of ones
SLICES = [
    ((2 * B, 3), (2, 0), (2 * B, 3)),
    ((2 * B, 3), (0, 1), (2 * B, 3)),
    ((2 * B, 3), (1, 0), (2 * B, 3)),
    ((2 * B, 3), (1, 0), (2, 3)),
    ((2 * B, 3), (0, 0), (2, 3)),
    ((2 * B, 3), (0, 0), (1, 1)),
    ((8, 3), (0, 0), (1, 1)),
    ((8, 3), (0, 0), (4, 2)),
]


@pytest.mark.parametrize("case", SLICES, ids=lambda c: f"{c[0]}[{c[1]}:{c[2]}]")
def test_slice_sharding_rule_on_symbolic_sizes_is_jax(case, explicit_mesh):
    shape, start, limit = case
    mesh = explicit_mesh(MESH)
    operand, want, why = _jax_result(mesh, shape, P("x"), lambda a: lax.slice(a, start, limit))
    limit_p = tuple(d if isinstance(d, int) else SymExpr(str(d)) for d in limit)
    params = {"start_indices": start, "limit_indices": limit_p, "strides": None}
    with axis_sizes_of(None, dict(mesh.shape)):
        if want is None:
            assert "not divisible by mesh axes" in why or "inconclusive" in why, why
            with pytest.raises(ShapeError, match="not divisible by mesh axes|inconclusive"):
                infer_types("slice", [operand], params)
        else:
            (got,) = infer_types("slice", [operand], params)
            assert str(got) == want


def test_min_cut_remat_sizes_the_global_dims(tmp_path, explicit_mesh):
    """`--remat min-cut --dim b=3` weighs `f32[2*b@x,3]` residuals at their global size
    (2*b = 6 rows); without --dim it asks for the size.  The gradient is jax.grad's."""
    mesh = explicit_mesh(MESH)

    def loss(x):
        return jnp.sum(jnp.sin(jnp.sin(x)) * jnp.sin(x))

    with jax.set_mesh(mesh):
        text = str(jax.make_jaxpr(loss)(struct(mesh, (2 * B, 3), P("x"))))
        x = concrete(mesh, 7, (2 * SIZE, 3), P("x"))
        want = jax.jit(jax.grad(loss))(x)  # (one compile, not one per operation)
    src = tmp_path / "r.jaxpr"
    src.write_text(text + "\n")
    r = run(["--no-color", "grad", "--remat", "min-cut", str(src)])
    assert r.exit_code == 1 and "has a symbolic dimension: give its size" in r.output
    out = tmp_path / "r.grad.jaxpr"
    argv = ["grad", "--remat", "min-cut", "--dim", f"b={SIZE}", str(src), "-o", str(out)]
    r = run(argv)
    assert r.exit_code == 0, r.output
    held = int(re.search(r"at b=3: residual bytes held (\d+) ->", r.output)[1])
    assert held > 0 and held % (2 * SIZE * 3 * 4) == 0, r.output  # whole f32[6,3] residuals
    (got,) = run_on_mesh(tmp_path, api.parse(out.read_text()), [x])
    close(got, want)


@pytest.mark.parametrize(
    "command",
    [
        pytest.param("jacfwd", marks=pytest.mark.slow),
        "jacrev",
        pytest.param("hessian", marks=pytest.mark.slow),
    ],
)
def test_jacobians_match_jax(tmp_path, command, explicit_mesh):
    """The basis of a symbolic number of rows (6*b) over `f32[2*b@x,3]`: JAX's result types
    (jacfwd's replicated, as JAX's is) and, at b = 3 on the mesh, its values."""
    mesh = explicit_mesh(MESH)

    def loss(x):
        return jnp.sum(jnp.sin(x) * x)

    jax_fn = getattr(jax, command)(loss)
    with jax.set_mesh(mesh):
        sym = struct(mesh, (2 * B, 3), P("x"))
        text = str(jax.make_jaxpr(loss)(sym))
        want_types = [v.aval.str_short(True) for v in jax.make_jaxpr(jax_fn)(sym).jaxpr.outvars]
        x = concrete(mesh, 8, (2 * SIZE, 3), P("x"))
        want = jax.jit(jax_fn)(x)  # (eagerly: a compile per operation)
    src = tmp_path / "j.jaxpr"
    src.write_text(text + "\n")
    out = tmp_path / "j.out.jaxpr"
    r = run([command, str(src), "-o", str(out)])
    assert r.exit_code == 0, r.output
    program = api.parse(out.read_text())
    assert outvar_types(program) == want_types
    (got,) = run_on_mesh(tmp_path, program, [x])
    close(got, want)


def test_a_result_of_arithmetic_on_a_sharded_dim_is_refused_at_the_equation():
    """A rule that would scale a sharded dim as if it were symbolic (`4*(2*b@x)`) does not get
    its result type printed: the builders refuse it, located at the equation."""
    from jaxprtool.ad.builder import require_shardings_known
    from jaxprtool.core import JaxprError, Loc, ShapedArray

    loc = Loc("f.jaxpr", 3, 5)
    ok = ShapedArray(("2*b@x", dim_sub("2*b", 2)), "f32")
    require_shardings_known("reshape", [ok], loc)
    garbled = ShapedArray((dim_mul(4, "2*b@x"), 3), "f32")
    with pytest.raises(JaxprError) as e:
        require_shardings_known("reshape", [garbled], loc, "batching")
    assert str(e.value).startswith("f.jaxpr:3:5: error: while batching: 'reshape' on explicitly")
    assert "f32[4*(2*b@x),3]" in str(e.value)
