"""Equinox and diffrax programs, end to end, against JAX on the same inputs.

- Equinox's own primitives (`jaxprtool/families/equinox.py`): run, JVP, VJP, the dot-product
  test on select_if_vmap's linear part, and vmap, each against `jax.jit` / `jax.jvp` /
  `jax.vjp` / `jax.vmap` of the same function.
- Real programs printed by `jaxprtool trace` (with `--consts-out`), run and differentiated
  from their text: a diffrax neural ODE (Tsit5 on an `eqx.nn.MLP` vector field,
  EQX_ON_ERROR=nan; run, grad), the same ODE closing over its weights (constants of nested
  jaxprs; vjp), an `eqx.nn.MLP` loss (run, grad), an `eqx.filter_grad` program (run, jvp)
  and an `eqx.internal.while_loop(kind="checkpointed")` (run, grad; jvp refused as by JAX).
- Constants the text lacks: the located message naming them, `trace --consts-out` feeding
  `run --consts`; Python callbacks: the refusal names EQX_ON_ERROR=nan.

Each program is traced once per module: about 30 s of CPU in all (the closed-over ODE, 25 s more,
is marked slow).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from click.testing import CliRunner  # noqa: E402
from conftest import written_module  # noqa: E402
from jax_oracle import close, ir, together, vec  # noqa: E402

from jaxprtool import backend  # noqa: E402
from jaxprtool.ad.api import (  # noqa: E402
    jvp_jaxpr,
    linearize_jaxpr,
    transpose_jaxpr,
    vjp_jaxpr,
)
from jaxprtool.ad.batching import vmap_jaxpr  # noqa: E402
from jaxprtool.cli import main  # noqa: E402
from jaxprtool.consts_order import number_constants  # noqa: E402
from jaxprtool.core import JaxprError, all_eqns  # noqa: E402
from jaxprtool.text.parser import parse  # noqa: E402

HAVE_EQX = all(importlib.util.find_spec(m) is not None for m in ("equinox", "diffrax"))
needs_eqx = pytest.mark.skipif(
    not HAVE_EQX,
    reason="equinox and diffrax are not installed (pip install -e '.[zoo]', as make test does)",
)


def _equinox():
    """equinox with its run-time checks returning NaN (EQX_ON_ERROR=nan: no callbacks).
    The variable is read when equinox is first imported; if another test imported it
    before, the module constant it set is switched too."""
    os.environ["EQX_ON_ERROR"] = "nan"
    import equinox
    import equinox._errors as errors

    errors.EQX_ON_ERROR = "nan"
    return equinox


# ---------------------------------------------------------------- Equinox's primitives


def _prims():
    _equinox()
    import equinox.internal as eqxi
    from equinox.internal._loop.common import _maybe_set, select_if_vmap_p
    from equinox.internal._nontraceable import nondifferentiable_backward

    def select(x, y):
        pred = eqxi.unvmap_any(x > 0)
        return select_if_vmap_p.bind(pred, jnp.sin(x) * y, y * y)

    def set_row(xs, v, i):
        return _maybe_set(
            jnp.bool_(True), xs * 2.0, jnp.cos(v), i, kwargs={}, makes_false_steps=False
        )

    def set_row_masked(xs, v, i):  # makes_false_steps: a real select by the predicate
        pred = v[0] > 0
        return _maybe_set(pred, xs * 2.0, jnp.cos(v), i, kwargs={}, makes_false_steps=True)

    def unvmaps(x, k):
        a = eqxi.unvmap_all(x > -5.0).astype(jnp.float32)
        m = eqxi.unvmap_max(k).astype(jnp.float32)
        return jnp.sin(x) * (a + m)

    def backward_only(x):  # forward-differentiable, refused in reverse mode (as JAX)
        return jnp.sum(nondifferentiable_backward(x) * 2.0)

    return select, set_row, set_row_masked, unvmaps, backward_only


X3 = vec(3, 0)
Y3 = vec(3, 1)
XS = vec((4, 3), 2)


def _jvp_and_vjp(f):
    """(primals, tangents, ct) -> (jax.jvp's tangent, jax.vjp's cotangents)."""
    return lambda ps, ts, ct: (jax.jvp(f, ps, ts)[1], jax.vjp(f, *ps)[1](ct))


@needs_eqx
def test_equinox_primitives_run_jvp_vjp_as_jax():
    select, set_row, set_row_masked, unvmaps, backward_only = _prims()
    cases = [
        ("select_if_vmap", select, [X3, Y3], [0, 1]),
        ("maybe_set", set_row, [XS, Y3, np.int32(2)], [0, 1]),
        ("maybe_set negative index", set_row, [XS, Y3, np.int32(-1)], [0, 1]),
        ("maybe_set makes_false_steps", set_row_masked, [XS, Y3, np.int32(1)], [0, 1]),
        ("maybe_set makes_false_steps off", set_row_masked, [XS, -Y3, np.int32(1)], [0, 1]),
        ("unvmap_all unvmap_max", unvmaps, [X3, np.int32(4)], [0]),
    ]
    calls = []  # every case's programs and JAX's, run in one compilation
    for label, f, args, diff in cases:
        j = ir(f, *args)
        prims = {e.prim for e in all_eqns(j)}
        assert prims & {"select_if_vmap", "maybe_set", "unvmap_all"}, (label, prims)
        tangents = [vec(np.shape(args[k]), 10 + k) for k in diff]

        def restricted(*ds, f=f, args=args, diff=diff):
            full = list(args)
            for k, d in zip(diff, ds):
                full[k] = d
            return f(*full)

        ct = vec(jax.eval_shape(f, *args).shape, 20)
        calls += [
            (j, args),
            (f, args),
            (jvp_jaxpr(j, diff), args + tangents),
            (vjp_jaxpr(j, diff), args + [ct]),
            (_jvp_and_vjp(restricted), ([args[k] for k in diff], tangents, ct)),
        ]
    outs = together(*calls)
    for k in range(0, len(outs), 5):
        (got,), ref, jv, vj, (ref_t, ref_ct) = outs[k : k + 5]
        close(got, ref)
        close(jv[1], ref_t)
        for a, b in zip(vj[1:], ref_ct):
            close(a, b)
    j = ir(backward_only, X3)
    jv = backend.evaluate(jvp_jaxpr(j), [X3, Y3])
    close(jv[1], jax.jit(lambda x, t: jax.jvp(backward_only, [x], [t])[1])(X3, Y3))
    with pytest.raises(RuntimeError, match="cannot be reverse-mode"):
        jax.grad(backward_only)(X3)
    with pytest.raises(JaxprError, match="cannot be reverse-mode autodifferentiated"):
        vjp_jaxpr(j)


@needs_eqx
def test_what_equinox_refuses_the_tool_refuses():
    eqx = _equinox()
    from equinox.internal._nontraceable import nonbatchable

    def nondiff(x):
        return jnp.sum(eqx.internal.nondifferentiable(x) * 2.0)

    with pytest.raises(RuntimeError, match="cannot be autodifferentiated"):
        jax.jvp(nondiff, (X3,), (Y3,))
    with pytest.raises(JaxprError, match="Unexpected tangent") as err:
        jvp_jaxpr(ir(nondiff, X3))
    assert err.value.loc is not None
    got = backend.evaluate(jvp_jaxpr(ir(nondiff, X3), []), [X3])  # no tangent reaches it
    close(got[0], nondiff(X3))

    def unbatchable(x):
        return nonbatchable(x) * 2.0

    with pytest.raises(ValueError, match="cannot be vmap'd"):
        jax.vmap(unbatchable)(vec((5, 3), 3))
    with pytest.raises(JaxprError, match="cannot be vmap'd"):
        vmap_jaxpr(ir(unbatchable, X3), [0], 0, 5)


@needs_eqx
def test_nonbatchable_constant_across_batch_checks_as_equinox_with_nan(capsys):
    """`allow_constant_across_batch`: the first example of a constant batch, and, as under
    EQX_ON_ERROR=nan, NaN (the integer maximum) for a nonconstant one, against jax.vmap."""
    _equinox()
    from equinox.internal._nontraceable import nonbatchable

    def scaled(x):
        return nonbatchable(x, allow_constant_across_batch=True) * 2.0

    def shifted(i):
        return nonbatchable(i, allow_constant_across_batch=True) + 1

    ints = np.arange(3, dtype=np.int32)
    cases = [
        (scaled, X3, np.stack([X3] * 5)),
        (scaled, X3, vec((5, 3), 42)),
        (shifted, ints, np.stack([ints] * 5)),
        (shifted, ints, np.arange(15, dtype=np.int32).reshape(5, 3)),
    ]
    for f, x, xb in cases:
        (got,) = backend.evaluate(vmap_jaxpr(ir(f, x), [0], 0, 5), [xb])
        want = np.asarray(jax.jit(jax.vmap(f))(xb))  # (eagerly, a compile an op)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
    want_nan = np.asarray(jax.jit(jax.vmap(scaled))(vec((5, 3), 42)))
    assert np.isnan(want_nan).all(), want_nan
    assert "EQX_ON_ERROR=nan" in capsys.readouterr().err


@needs_eqx
def test_select_if_vmap_linear_part_passes_the_dot_product_test():
    select = _prims()[0]
    j = ir(select, X3, Y3)
    primal, linear, info = linearize_jaxpr(j)
    outs = backend.evaluate(primal, [X3, Y3])
    n_out = len(info.out_mask)
    src = {"input": [X3, Y3], "output": outs[:n_out], "new": outs[n_out:]}
    res = [np.asarray(src[r.source][r.index]) for r in info.residuals]
    vs, w = [vec(3, 30), vec(3, 31)], vec(3, 32)
    (lv,) = backend.evaluate(linear, res + vs)
    lt = transpose_jaxpr(linear, [False] * len(res) + [True, True])
    ltw = backend.evaluate(lt, res + [w])
    lhs = float(np.sum(w * lv))
    rhs = sum(float(np.sum(a * v)) for a, v in zip(ltw, vs))
    assert abs(lhs - rhs) <= 1e-4 * max(1.0, abs(lhs))


@needs_eqx
def test_equinox_primitives_vmap_as_jax():
    select, _, _, unvmaps, _ = _prims()
    xb, yb = vec((5, 3), 40), vec((5, 3), 41)
    for f, args, axes in [
        (select, [xb, yb], (0, 0)),
        (select, [xb, Y3], (0, None)),
        (unvmaps, [xb, np.arange(5, dtype=np.int32)], (0, 0)),
    ]:
        j = ir(f, *[a[0] if ax == 0 else a for a, ax in zip(args, axes)])
        (got,) = backend.evaluate(vmap_jaxpr(j, list(axes), 0, 5), args)
        close(got, jax.jit(jax.vmap(f, in_axes=axes))(*args))  # (eagerly, a compile an op)


@needs_eqx
def test_maybe_set_vmaps_as_equinox():
    """Equinox batches maybe_set by `jax.vmap` of its implementation, where select_if_vmap
    selects by the predicate once it is batched (unbatched, Equinox takes it as True): the
    tool's per-example loop gives jax.vmap's numbers for batched and unbatched predicates,
    indices and buffers, and its vjp is jax.vjp of the vmapped function."""
    _equinox()
    from equinox.internal._loop.common import _maybe_set

    def set_if(xs, v, i, k):  # written where v[k] > 0, batched; always, unbatched
        xs = jnp.asarray(xs) * 2.0
        return _maybe_set(v[k] > 0, xs, jnp.cos(v), i, kwargs={}, makes_false_steps=False)

    n = 5
    xs, vs = vec((n, 4, 3), 50), vec((n, 3), 51)
    idx, ks = np.array([0, 3, 1, 2, -1], np.int32), np.array([0, 1, 2, 0, 1], np.int32)
    assert (vs[np.arange(n), ks] > 0).any() and (vs[np.arange(n), ks] <= 0).any()
    every = [(None, 0, None, 0), (0, None, 0, None), (None, 0, 0, None), (0, 0, 0, 0)]
    cases = []
    for axes in every:
        args = [a if d == 0 else a[0] for a, d in zip([xs, vs, idx, ks], axes)]
        j = vmap_jaxpr(ir(set_if, *[a[0] if d == 0 else a for a, d in zip(args, axes)]),
                       list(axes), 0, n)  # fmt: skip
        cases.append((axes, args, j))
    # reverse mode, all batched (Equinox's own transpose fails with an unbatched buffer)
    ct = vec((n, 4, 3), 52)

    def jax_answers(all_args, a, b, c):  # (every case's and the vjp's: one compilation)
        vmapped = [jax.vmap(set_if, in_axes=axes)(*xs) for (axes, _, _), xs in zip(cases, all_args)]
        pull = jax.vjp(lambda a, b: jax.vmap(set_if)(a, b, idx, ks), a, b)[1]
        return vmapped, pull(c)

    wants, want = jax.jit(jax_answers)([args for _, args, _ in cases], xs, vs, ct)
    for (_, args, j), w in zip(cases, wants, strict=True):
        (got,) = backend.evaluate(j, args)
        close(got, w)
    got = backend.evaluate(vjp_jaxpr(cases[-1][2], [0, 1]), [xs, vs, idx, ks, ct])
    for g, w in zip(got[1:], want):
        close(g, w)


# ---------------------------------------------------------------- real programs, traced

ZOO = """
import os

os.environ["EQX_ON_ERROR"] = "nan"  # before equinox is imported: no callbacks

import diffrax
import equinox as eqx
import equinox._errors
import equinox.internal as eqxi
import jax
import jax.numpy as jnp
import numpy as np

equinox._errors.EQX_ON_ERROR = "nan"  # in case equinox was imported before
# its shapes from an abstract trace and its weights drawn by numpy: no XLA compilation (drawn
# by jax.random, jitted, one: 0.4 CPU-s; eagerly, one an operation)
_RNG = np.random.default_rng(0)
MLP = jax.tree_util.tree_map(
    lambda s: jnp.asarray(_RNG.uniform(-0.5, 0.5, s.shape).astype(s.dtype))
    if isinstance(s, jax.ShapeDtypeStruct) else s,
    eqx.filter_eval_shape(
        lambda: eqx.nn.MLP(2, 2, 8, 1, activation=jnp.tanh, key=jax.random.PRNGKey(0))
    ),
)
PARAMS, STATIC = eqx.partition(MLP, eqx.is_array)
LEAVES, TREEDEF = jax.tree_util.tree_flatten(PARAMS)


def model(leaves):
    return eqx.combine(jax.tree_util.tree_unflatten(TREEDEF, list(leaves)), STATIC)


def node(y0, *leaves):
    m = model(leaves)
    term = diffrax.ODETerm(lambda t, y, args: m(y))
    sol = diffrax.diffeqsolve(
        term, diffrax.Tsit5(), t0=0.0, t1=1.0, dt0=0.25, y0=y0,
        saveat=diffrax.SaveAt(t1=True), max_steps=8,
    )
    return jnp.sum(sol.ys**2)


def node_closed(y0):
    return node(y0, *LEAVES)


def mlp_loss(x, *leaves):
    return jnp.mean((jax.vmap(model(leaves))(x) - 1.0) ** 2)


def filter_grads(x, *leaves):
    def loss(m, x):
        return jnp.mean(jax.vmap(m)(x) ** 2)

    return jax.tree_util.tree_leaves(eqx.filter_grad(loss)(model(leaves), x))


def checkpointed(x, w):
    def cond(c):
        return c[0] < 6

    def body(c):
        i, y = c
        return i + 1, jnp.sin(w * y) + 0.1 * y

    _, y = eqxi.while_loop(cond, body, (0, x), max_steps=8, kind="checkpointed", checkpoints=3)
    return jnp.sum(y**2)


def error_checked(x):
    return jnp.sin(eqx.error_if(x, x < 0, "negative", on_error="raise"))


def callback(x):
    return jax.pure_callback(lambda v: v * 2, jax.ShapeDtypeStruct((), jnp.float32), x) + x


def not_inlined(x):
    return jnp.sum(eqxi.noinline(jnp.sin)(x))


def lineax_solve(b):
    import lineax as lx

    a = jnp.array([[3.0, 1.0], [1.0, 4.0]])
    return jnp.sum(lx.linear_solve(lx.MatrixLinearOperator(a), b, solver=lx.LU()).value)
"""


class Zoo:
    """The module above, importable from a temporary folder, traced once per program."""

    def __init__(self, folder):
        self.folder = folder
        self.mod = written_module(folder, "eqx_zoo", ZOO)
        self.leaves = [np.asarray(x) for x in self.mod.LEAVES]
        self.leaf_types = [
            f"f32[{','.join(map(str, x.shape))}]" for x in self.leaves
        ]  # f32[8,2] f32[8] f32[2,8] f32[2]
        self._traced = {}

    def trace(self, fn: str, *types: str):
        """(text path, constants path) of `jaxprtool trace --consts-out`."""
        if fn not in self._traced:
            out, consts = self.folder / f"{fn}.jaxpr", self.folder / f"{fn}.consts.npz"
            args = [a for t in types for a in ("--arg", t)]
            traced = f"{self.mod.__name__}:{fn}"
            with contextlib.chdir(self.folder):
                r = CliRunner().invoke(
                    main, ["trace", traced, *args, "-o", str(out), "--consts-out", str(consts)]
                )
            assert r.exit_code == 0, r.output
            self._traced[fn] = (out, consts, r.stderr)
        return self._traced[fn]


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    if not HAVE_EQX:
        pytest.skip("equinox and diffrax are not installed (pip install -e '.[zoo]')")
    _equinox()
    return Zoo(tmp_path_factory.mktemp("eqx_zoo"))


def tool(*argv):
    r = CliRunner().invoke(main, ["--no-color", *map(str, argv)])
    return r


def tool_outputs(tmp_path, prog, args, consts, label="out"):
    """`jaxprtool run PROG --args --consts -o`: the outputs as a list."""
    a, o = tmp_path / f"{label}.args.npz", tmp_path / f"{label}.npz"
    np.savez(a, *args)
    r = tool("run", prog, "--args", a, "--consts", consts, "-o", o)
    assert r.exit_code == 0, r.output
    with np.load(o) as d:
        return [d[f"out{i}"] for i in range(len(d.files))]


def derived(tmp_path, command, prog, *flags, label):
    out = tmp_path / f"{label}.jaxpr"
    r = tool(command, *flags, prog, "-o", out)
    assert r.exit_code == 0, r.output
    return out


Y0 = np.array([0.5, -0.3], np.float32)


@pytest.mark.slow  # the zoo's diffrax programs too; the Equinox primitives have the tests above
@needs_eqx
def test_diffrax_neural_ode_runs_and_differentiates_as_jax(zoo, tmp_path):
    prog, consts, _ = zoo.trace("node", "f32[2]", *zoo.leaf_types)
    text = prog.read_text()
    for p in ("select_if_vmap", "unvmap_any", "maybe_set", "custom_vjp_call", "while"):
        assert f" {p}" in text, p
    assert "pure_callback" not in text
    assert "jaxprtool_bwd=" in text  # the checkpointed loop's rule travels with the text
    args = [Y0, *zoo.leaves]
    f = zoo.mod.node
    (got,) = tool_outputs(tmp_path, prog, args, consts, "run")
    close(got, jax.jit(f)(*args))
    g = derived(tmp_path, "grad", prog, "--with-value", "--argnums", "0,1,2,3,4", label="grad")
    outs = tool_outputs(tmp_path, g, args, consts, "grad")
    val, ref = jax.jit(jax.value_and_grad(f, argnums=(0, 1, 2, 3, 4)))(*args)
    assert len(outs) == 6
    close(outs[0], val)
    for a, b in zip(outs[1:], ref):
        close(a, b)


@needs_eqx
@pytest.mark.slow  # about 25 s of CPU; test_trace_consts_out_feeds_run_consts is the fast check
def test_diffrax_ode_closing_over_its_weights_needs_the_nested_constants(zoo, tmp_path):
    prog, consts, _ = zoo.trace("node_closed", "f32[2]")
    j = parse(prog.read_text(), str(prog)).jaxpr
    every = number_constants(j).constvars  # the `--consts` numbering (consts_order.py)
    assert len(every) > len(j.constvars)  # the weights are nested constants
    with np.load(consts) as d:
        assert len(d.files) == len(every)
    np.save(tmp_path / "y0.npy", Y0)
    r = tool("run", prog, "--arg", tmp_path / "y0.npy")
    assert r.exit_code == 1
    # the jitted bodies' weights are hoisted to the program's constants, named with them
    assert f"the program has {len(every)} constants" in r.output
    for part in ("f32[8,2]", "const", "--consts-out C.npz", "--consts C.npz"):
        assert part in r.output, part
    f = zoo.mod.node_closed
    v = derived(tmp_path, "vjp", prog, label="vjp")
    ct = np.float32(0.75)
    outs = tool_outputs(tmp_path, v, [Y0, ct], consts, "vjp")

    def value_and_pullback(y):
        val, pull = jax.vjp(f, y)
        return val, pull(jnp.float32(ct))[0]

    val, ref = jax.jit(value_and_pullback)(Y0)
    assert len(outs) == 2
    close(outs[0], val)
    close(outs[1], ref)


@needs_eqx
def test_equinox_mlp_and_filter_grad_programs(zoo, tmp_path):
    x = vec((5, 2), 50)
    args = [x, *zoo.leaves]
    prog, consts, _ = zoo.trace("mlp_loss", "f32[5,2]", *zoo.leaf_types)
    f = zoo.mod.mlp_loss
    (got,) = tool_outputs(tmp_path, prog, args, consts, "mlp")
    # JAX's value and gradient, jitted: one compilation (eagerly, one a primitive)
    val, grads = jax.jit(jax.value_and_grad(f, argnums=(1, 2, 3, 4)))(*args)
    close(got, val)
    g = derived(tmp_path, "grad", prog, "--argnums", "1,2,3,4", label="mlp_grad")
    for a, b in zip(tool_outputs(tmp_path, g, args, consts, "mlp_grad"), grads):
        close(a, b)
    prog, consts, _ = zoo.trace("filter_grads", "f32[5,2]", *zoo.leaf_types)
    got = tool_outputs(tmp_path, prog, args, consts, "fg")
    ts = [vec(np.shape(a), 60 + k) for k, a in enumerate(args)]
    ref, ref_t = jax.jit(lambda a, t: jax.jvp(zoo.mod.filter_grads, a, t))(args, ts)
    assert len(got) == len(ref) == 4
    for a, b in zip(got, ref):
        close(a, b)
    jv = derived(tmp_path, "jvp", prog, label="fg_jvp")  # forward over reverse
    outs = tool_outputs(tmp_path, jv, args + ts, consts, "fg_jvp")
    for a, b in zip(outs[4:], ref_t):
        close(a, b)


@needs_eqx
def test_checkpointed_while_loop(zoo, tmp_path):
    prog, consts, _ = zoo.trace("checkpointed", "f32[3]", "f32[3]")
    assert "jaxprtool_bwd=" in prog.read_text()  # the checkpointed rule, recorded
    r = tool("fmt", prog)
    assert r.exit_code == 0 and r.stdout == prog.read_text()  # trace prints canonical text
    x, w = vec(3, 70), vec(3, 71, 0.5, 1.5)
    f = zoo.mod.checkpointed
    (got,) = tool_outputs(tmp_path, prog, [x, w], consts, "run")
    val, grads = jax.jit(jax.value_and_grad(f, argnums=(0, 1)))(x, w)  # (one compilation)
    close(got, val)
    g = derived(tmp_path, "grad", prog, "--argnums", "0,1", label="grad")
    for a, b in zip(tool_outputs(tmp_path, g, [x, w], consts, "grad"), grads):
        close(a, b)
    # the recorded rule states which operands it takes as perturbed; a tangent on another one
    # is refused (here the text is edited so that the loop's initial value is not perturbed)
    text = prog.read_text()
    assert text.count("jaxprtool_perturbed=(True, True,") == 1
    edited = tmp_path / "edited.jaxpr"
    edited.write_text(
        text.replace("jaxprtool_perturbed=(True, True,", "jaxprtool_perturbed=(False, True,")
    )
    r = tool("grad", "--argnums", "0", edited)
    assert r.exit_code == 1 and "operand 0 has a tangent, but the rule" in r.output
    assert tool("grad", "--argnums", "1", edited).exit_code == 0
    r = tool("jvp", prog)  # JAX refuses forward mode through a custom_vjp, and so does the tool
    assert (
        r.exit_code == 1 and "can't apply forward-mode autodiff (jvp) to a custom_vjp" in r.output
    )
    with pytest.raises(TypeError, match="can't apply forward-mode autodiff"):  # (traced only:
        jax.jit(lambda x, w: jax.jvp(f, (x, w), (x, w)))(x, w)  # eagerly, the loop ran first)


@needs_eqx
def test_callbacks_and_python_level_primitives_are_refused_saying_why(zoo, tmp_path):
    prog, _, _ = zoo.trace("error_checked", "f32[]")
    r = tool("run", prog, "--input", "f32[]=1.0")
    assert r.exit_code == 1
    assert "cannot run 'pure_callback' is an Equinox run-time error check" in r.output
    assert "EQX_ON_ERROR=nan" in r.output
    prog, _, _ = zoo.trace("callback", "f32[]")
    r = tool("run", prog, "--input", "f32[]=1.0")
    assert r.exit_code == 1 and "calls back into Python" in r.output
    assert "EQX_ON_ERROR=nan" in r.output
    r = tool("grad", prog)
    assert r.exit_code == 1 and "Pure callbacks do not support JVP" in r.output
    assert "EQX_ON_ERROR=nan" in r.output
    prog, _, _ = zoo.trace("not_inlined", "f32[3]")  # its function is a Python object
    r = tool("run", prog, "--random", "0")
    assert r.exit_code == 1 and "cannot run 'noinline' is an Equinox noinline call" in r.output
    r = tool("grad", prog)
    assert r.exit_code == 1 and "cannot differentiate an Equinox noinline call" in r.output
    prog, _, _ = zoo.trace("lineax_solve", "f32[2]")  # JAX with lineax runs it; the text
    r = tool("run", prog, "--random", "0")  # holds its operator and solver as reprs only
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert "cannot run 'linear_solve' is lineax's linear_solve (an Equinox primitive)" in r.output
    r = tool("grad", prog)
    assert r.exit_code == 1 and "cannot differentiate lineax's linear_solve" in r.output


# ---------------------------------------------------------------- constants (plain JAX)

CLOSES = """
import jax
import jax.numpy as jnp
import numpy as np

W = (np.arange(6.0, dtype=np.float32).reshape(2, 3) - 2.0) / 7
MASK = np.array([True, False, True])


@jax.jit
def inner(x):
    return jnp.where(MASK, jnp.sin(x @ W), 0.0)


def f(x):
    return jnp.sum(inner(x) ** 2) + jax.lax.cond(x[0] > 0, lambda: jnp.sum(W), lambda: 0.0)
"""


def test_trace_consts_out_feeds_run_consts(tmp_path):
    mod = written_module(tmp_path, "closes", CLOSES)
    with contextlib.chdir(tmp_path):
        r = CliRunner().invoke(
            main,
            ["trace", f"{mod.__name__}:f", "--arg", "f32[2]", "-o", "f.jaxpr"]
            + ["--consts-out", "c.npz"],
        )
    assert r.exit_code == 0, r.output
    prog = tmp_path / "f.jaxpr"
    j = parse(prog.read_text(), str(prog)).jaxpr
    # W, then inner's W and MASK (hoisted: consts_order.py's numbering)
    assert len(j.constvars) == 1 and len(number_constants(j).constvars) == 3
    x = np.array([0.5, -0.3], np.float32)
    (got,) = tool_outputs(tmp_path, prog, [x], tmp_path / "c.npz", "run")
    val, want = jax.jit(jax.value_and_grad(mod.f))(x)  # (one compilation)
    close(got, val)
    g = derived(tmp_path, "grad", prog, label="grad")
    (grad,) = tool_outputs(tmp_path, g, [x], tmp_path / "c.npz", "grad")
    close(grad, want)
    # (check-grad and explain take such an archive of hoisted call-body constants:
    # test_consts_order.py's test_check_grad_takes_the_traced_constants and
    # test_explain_takes_the_constants_of_cond_and_loop_bodies; a bool constant too:
    # test_check_grad_verdicts.py's test_invented_constants_are_said_and_their_values_pass)
    np.save(tmp_path / "x.npy", x)
    r = tool("run", prog, "--arg", tmp_path / "x.npy")  # no values at all
    assert r.exit_code == 1
    # the jitted body's constants are hoisted after the program's own (passes/hoist_consts.py)
    assert "the program has 3 constants" in r.output
    assert "f32[2,3], d:f32[2,3], e:bool[3]" in r.output
    assert "--consts-out C.npz" in r.output
    with np.load(tmp_path / "c.npz") as d:
        np.savez(tmp_path / "top.npz", const0=d["const0"])
        np.savez(tmp_path / "two.npz", const0=d["const0"], const1=d["const1"])
    for partial, n in (("top.npz", 1), ("two.npz", 2)):
        r = tool("run", prog, "--arg", tmp_path / "x.npy", "--consts", tmp_path / partial)
        assert r.exit_code == 1
        assert f"--consts: expected 3 constants (const0, const1, ...), got {n}" in r.output
