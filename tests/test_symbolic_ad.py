"""vmap, jvp, linearize/transpose, vjp and grad of programs with symbolic dimensions (issue 25).

Programs are traced by `jax.make_jaxpr` on `jax.ShapeDtypeStruct(symbolic_shape("b, 3"))`,
as `jax.export` traces them; the tool transforms the printed text, prints the result, reads
it back and runs it at a concrete size (b = 5).  JAX is the oracle: `jax.vmap`,
`jax.jvp`, `jax.vjp` and `jax.grad` of the same function on concrete inputs of that size,
the result types of `jax.make_jaxpr(jax.vmap(f))` on the same symbolic shapes, the
dot-product test <w, L t> = <L^T w, t> on the linear program run at b = 5.  What a rule cannot do yet under
a symbolic size is refused at its equation (tested below)."""

from __future__ import annotations

import functools
import re

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from click.testing import CliRunner  # noqa: E402
from jax import export, lax  # noqa: E402

from jaxprtool import api, backend  # noqa: E402
from jaxprtool.ad import ops  # noqa: E402
from jaxprtool.ad.jacobians import hessian, jacfwd, jacrev  # noqa: E402
from jaxprtool.cli import main  # noqa: E402
from jaxprtool.consts_order import number_constants  # noqa: E402
from jaxprtool.core import all_eqns  # noqa: E402
from jaxprtool.params import SymExpr  # noqa: E402
from jaxprtool.run_inputs import bind_dims, check_arrays  # noqa: E402

(SYM_B,) = export.symbolic_shape("b")
PER_EXAMPLE = jax.ShapeDtypeStruct((SYM_B, 3), jnp.float32)
SIZE = 5  # the size b takes when the programs run
BATCH = 4  # vmap's batch size

CASES = {
    "elementwise": lambda x: jnp.sin(x) * 2 + x,
    "reshape": lambda x: x.reshape(-1),
    "reshape_split": lambda x: x.reshape(3, -1),
    "reduce_sum": lambda x: x.sum(0),
    "dot": lambda x: x @ x.T,
    "concatenate": lambda x: jnp.concatenate([x, x[:1], x], 0),
    "pad": lambda x: jnp.pad(x, ((1, 2), (0, 0))),
    "slice": lambda x: x[1:],
    "iota": lambda x: x + jnp.arange(x.shape[0])[:, None],
    "scan": lambda x: lax.scan(lambda c, t: (c + t, c), x[0], x),
    "dim_as_value": lambda x: x * x.shape[0],
    "mean": lambda x: x.mean(0),
    "cumsum": lambda x: jnp.cumsum(x, 0),
    "broadcast": lambda x: jnp.broadcast_to(x[:, None, :], (x.shape[0], 2, 3)),
    "transpose": lambda x: x.T,
    "cond": lambda x: lax.cond(x.sum() > 0, lambda y: y * 2, lambda y: -y, x),
    "gather": lambda x: x[jnp.array([0, 1])],
    "dynamic_slice": lambda x: lax.dynamic_slice_in_dim(x, 1, 1, 0),
    "sort": lambda x: jnp.sort(x, 0),
    "softmax": lambda x: jax.nn.softmax(x, 0),
    "split": lambda x: jnp.split(jnp.concatenate([x, x]), 2)[1],
    "rev": lambda x: jnp.flip(x, 0),
    "dynamic_update_slice": lambda x: lax.dynamic_update_slice(x, jnp.ones((1, 3)), (1, 0)),
    "tile": lambda x: jnp.tile(x, (2, 1)),
    "einsum": lambda x: jnp.einsum("bi,bj->ij", x, x),
    "var": lambda x: jnp.var(x, 0),
    "remat": lambda x: jax.checkpoint(lambda y: jnp.sin(jnp.sin(y)))(x),
    "jit": lambda x: jax.jit(lambda y: y.reshape(-1))(x),
    "roll": lambda x: jnp.roll(x, 1, 0),  # sizes `- mod(- 1, b) + b`: JAX's form kept
    "conv": lambda x: lax.conv(x[None, None], jnp.ones((1, 1, 2, 2)), (1, 1), "VALID"),
    "reduce_window": lambda x: lax.reduce_window(x, 0.0, lax.add, (2, 1), (1, 1), "VALID"),
    "cholesky": lambda x: jnp.linalg.cholesky(x @ x.T + 10 * jnp.eye(x.shape[0])),
    "repeat": lambda x: jnp.repeat(x, 2, 0),
    "segment_sum": lambda x: jax.ops.segment_sum(x, jnp.zeros(x.shape[0], jnp.int32), 2),
    "reverse_cumsum": lambda x: lax.cumsum(x, 0, reverse=True),
    "reverse_scan": lambda x: lax.scan(lambda c, t: (c * t, c), jnp.ones(3), x, reverse=True),
    "map": lambda x: lax.map(jnp.sin, x),
    "argsort": lambda x: jnp.argsort(x, 0).astype(jnp.float32) * x,
    "fft": lambda x: jnp.fft.fft(x, axis=0).real,  # fft_lengths=(b,)
    "mean_all": lambda x: jnp.mean(x) * x,  # dim_as_value[dim=3*b]
    "resize": lambda x: jax.image.resize(x, (x.shape[0] * 2, 6), "linear"),
    # padding=((floordiv(- 2*floordiv(- b, 2) - b, 2), - floordiv(...) ...), (0, 0))
    "max_pool_same": lambda x: lax.reduce_window(x, -jnp.inf, lax.max, (2, 1), (2, 1), "SAME"),
    "sum_pool_same": lambda x: lax.reduce_window(x, 0.0, lax.add, (2, 1), (2, 1), "SAME"),
    "rfft": lambda x: jnp.abs(jnp.fft.rfft(x, axis=0)),  # c64[floordiv(b, 2) + 1,3]
    "irfft": lambda x: lax.fft(jnp.fft.rfft(x.T) * 1j, lax.FftType.IRFFT, (x.shape[0],)).T,
    "depthwise_conv": lambda x: lax.conv_general_dilated(
        x.T[None], jnp.ones((3, 1, 2)), (1,), "VALID", feature_group_count=3
    ),
}
#: `lax.while_loop` has no reverse mode in JAX either (jax.grad raises the same message)
VMAP_JVP_ONLY = {
    "while": lambda x: lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1] * 2), (0, x))[
        1
    ],
}
#: the unmarked representatives: a reshape of a symbolic size, a scan of symbolic length,
#: `dim_as_value`, the symbolic offsets of concatenate's transpose, roll's sizes outside the
#: linear algebra of dims, and a two-symbol MLP (b, n)
FAST = ("reshape", "scan", "dim_as_value", "concatenate", "roll", "mlp")


def _params(names):
    return [n if n in FAST else pytest.param(n, marks=pytest.mark.slow) for n in names]


def traced(f, arg=PER_EXAMPLE):
    """The printed program of f on a symbolic shape, and its constants' values."""
    closed = jax.make_jaxpr(f)(arg)
    return api.parse(str(closed), "<traced>"), [np.asarray(c) for c in closed.consts]


def reread(program):
    """The tool's printout, read back (and checked): what a user pipes on.  A symbolic size
    in a parameter prints bare, as JAX prints it (`new_sizes=(b, 3)`, never `('b', 3)`)."""
    text = api.format(program)
    assert not re.search(r"'[^'\n]*\bb\b[^'\n]*'", text), text
    return api.parse(text, "<result>")


def run_at(program, *args, consts=(), sizes=None):
    """`jaxprtool run --dim b=5`: the program at the concrete size(s)."""
    j = number_constants(program.jaxpr).program
    dims = bind_dims(j.invars, args, dict(sizes or {"b": SIZE}))
    args = check_arrays(j.invars, args, dims, "argument")
    consts = check_arrays(list(j.constvars), consts, dims, "constant")
    return backend.evaluate(j, args, consts, device="cpu", dims=dims)


def floats(values):
    return [np.asarray(v) for v in values if np.asarray(v).dtype.kind == "f"]


def close(got, want):
    got, want = floats(got), floats(want)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def inputs(seed=0):
    r = np.random.RandomState(seed)
    return r.randn(SIZE, 3).astype(np.float32), r.randn(SIZE, 3).astype(np.float32)


def _cases(names):
    return {**CASES, **VMAP_JVP_ONLY}[names]


def _jitted_jvp(f):
    """JAX's jvp of f, jitted: one XLA compilation (eagerly, one a primitive)."""
    return jax.jit(lambda x, t: jax.jvp(f, (x,), (t,)))


# ---------------------------------------------------------------- vmap


@pytest.mark.parametrize("name", _params([*CASES, *VMAP_JVP_ONLY]))
def test_vmap_matches_jax(name):
    f = _cases(name)
    program, consts = traced(f)
    batched = reread(api.vmap(program, 0, 0, BATCH))
    # the result types JAX gives the batched function on the same symbolic shapes, and no
    # more equations than JAX's (the clean-up pipeline folds some of JAX's)
    batched_arg = jax.ShapeDtypeStruct((BATCH, SYM_B, 3), jnp.float32)
    want = traced(jax.vmap(f), batched_arg)[0].jaxpr
    assert [str(v.type) for v in batched.jaxpr.outvars] == [str(v.type) for v in want.outvars]
    assert len(list(all_eqns(batched.jaxpr))) <= len(list(all_eqns(want)))
    x = np.random.RandomState(1).randn(BATCH, SIZE, 3).astype(np.float32)
    close(run_at(batched, x, consts=consts), jax.tree.leaves(jax.jit(jax.vmap(f))(x)))


# ---------------------------------------------------------------- jvp


@pytest.mark.parametrize("name", _params([*CASES, *VMAP_JVP_ONLY]))
def test_jvp_matches_jax(name):
    f = _cases(name)
    program, consts = traced(f)
    jv = reread(api.jvp(program))
    x, t = inputs()
    y, ty = _jitted_jvp(f)(x, t)
    close(run_at(jv, x, t, consts=consts), jax.tree.leaves(y) + jax.tree.leaves(ty))


# ---------------------------------------------------------------- linearize, transpose


@pytest.mark.parametrize("name", _params(CASES))
def test_linearize_matches_jax_and_transposes(name):
    """linearize's combined program gives jax.jvp's tangents; its transpose (the VJP) passes
    the dot-product test at b = 5."""
    f = _cases(name)
    program, consts = traced(f)
    combined = reread(api.linearize(program))
    x, t = inputs()
    ys, tys = _jitted_jvp(f)(x, t)
    ys, tys = jax.tree.leaves(ys), jax.tree.leaves(tys)
    lt = run_at(combined, x, t, consts=consts)[len(ys) :]
    close(lt, tys)
    vjp = reread(api.transpose(combined))
    r = np.random.RandomState(2)
    ws = [r.randn(*np.shape(y)).astype(np.float32) for y in ys if y.dtype.kind == "f"]
    (ct_x,) = run_at(vjp, x, *ws, consts=consts)[len(ys) :]
    lhs = sum(float(np.vdot(w, a)) for w, a in zip(ws, floats(lt)))
    rhs = float(np.vdot(ct_x, t))
    assert abs(lhs - rhs) <= 1e-4 * (1 + abs(lhs))


# ---------------------------------------------------------------- vjp


@pytest.mark.parametrize("name", _params(CASES))
def test_vjp_matches_jax(name):
    """(x, ct_y) -> (y, ct_x) against jax.vjp's pullback on the same cotangents."""
    f = CASES[name]
    program, consts = traced(f)
    vjp = reread(api.vjp(program))
    x, _ = inputs()
    shapes = jax.eval_shape(f, x)
    r = np.random.RandomState(4)
    cts = [
        r.randn(*y.shape).astype(np.float32)
        if y.dtype.kind == "f"
        else np.zeros(y.shape, jax.dtypes.float0)
        for y in jax.tree.leaves(shapes)
    ]
    tree_cts = jax.tree.unflatten(jax.tree.structure(shapes), cts)

    def outs_and_cts(x):  # JAX's vjp, jitted (the cotangents closed over: float0 ones too)
        ys, pullback = jax.vjp(f, x)
        return ys, pullback(tree_cts)

    ys, (want,) = jax.jit(outs_and_cts)(x)
    leaves = jax.tree.leaves(ys)
    float_cts = [c for c, y in zip(cts, leaves) if y.dtype.kind == "f"]
    close(run_at(vjp, x, *float_cts, consts=consts), [*leaves, want])


# ---------------------------------------------------------------- grad


@pytest.mark.parametrize("name", _params(CASES))
def test_grad_matches_jax(name):
    f = CASES[name]

    def loss(x):
        return sum(jnp.sum(jnp.sin(y)) for y in jax.tree.leaves(f(x)))

    program, consts = traced(loss)
    g = reread(api.grad(program))
    x, _ = inputs()
    close(run_at(g, x, consts=consts), [jax.jit(jax.grad(loss))(x)])


# ---------------------------------------------------------------- two symbols


TWO = {
    "mlp": lambda x, w: jnp.tanh(x @ w).sum(),
    "mean": lambda x, w: jnp.mean(x @ w) * x.shape[1],  # dim_as_value[dim=4*b], [dim=n]
    "scan": lambda x, w: lax.scan(lambda c, r: (jnp.tanh(c + r @ w), None), jnp.zeros(4), x)[
        0
    ].sum(),
}


@pytest.mark.parametrize("name", _params(TWO))
def test_two_symbols_grad_vmap_jvp_match_jax(name):
    """x: f32[b,n], w: f32[n,4]; run at b = 5, n = 6."""
    f = TWO[name]
    b, n = export.symbolic_shape("b, n")
    xs = jax.ShapeDtypeStruct((b, n), jnp.float32), jax.ShapeDtypeStruct((n, 4), jnp.float32)
    closed = jax.make_jaxpr(f)(*xs)
    program, consts = api.parse(str(closed)), [np.asarray(c) for c in closed.consts]
    sizes = {"b": 5, "n": 6}
    r = np.random.RandomState(3)
    x, w = r.randn(5, 6).astype(np.float32), r.randn(6, 4).astype(np.float32)
    xb = r.randn(3, 5, 6).astype(np.float32)
    # JAX's gradient, vmap and jvp: one compilation
    want_g, want_v, want_jv = jax.jit(
        lambda x, w, xb: (
            jax.grad(f, (0, 1))(x, w),
            jax.vmap(f, (0, None))(xb, w),
            jax.jvp(f, (x, w), (x, w)),
        )
    )(x, w, xb)
    g = reread(api.grad(program, argnums=[0, 1]))
    close(run_at(g, x, w, consts=consts, sizes=sizes), want_g)
    v = reread(api.vmap(program, [0, None], 0, 3))
    close(run_at(v, xb, w, consts=consts, sizes=sizes), [want_v])
    jv = reread(api.jvp(program))
    close(run_at(jv, x, w, x, w, consts=consts, sizes=sizes), want_jv)


# ---------------------------------------------------------------- refusals


def _cli(tmp_path, argv, f):
    src = tmp_path / "p.jaxpr"
    src.write_text(str(jax.make_jaxpr(f)(PER_EXAMPLE)) + "\n")
    return CliRunner().invoke(main, ["--no-color", *argv, str(src)]), str(src)


def test_rule_without_symbolic_support_is_refused_at_its_equation(tmp_path):
    """triangular_solve's JVP compares its sizes (b > 3), as JAX's does (JAX raises
    InconclusiveDimensionOperation): refused at the equation, no output, no traceback."""

    def f(x):
        a = jnp.tril(x @ x.T) + 10 * jnp.eye(x.shape[0])
        return jax.scipy.linalg.solve_triangular(a, x, lower=True)

    r, src = _cli(tmp_path, ["jvp"], f)
    assert r.exit_code == 1
    assert f"{src}:" in r.output and ": error: 'triangular_solve': the tool's" in r.output
    assert "symbolic dimension of f32[b,b]" in r.output
    assert "Traceback" not in r.output and "lambda ; a" not in r.output.split("error:")[0]


@pytest.mark.parametrize("command", ["jvp", "grad"])
def test_cumulative_product_refused_in_jax_words(tmp_path, command):
    """JAX's JVP of cumprod is an associative scan, which refuses a symbolic axis
    (jax.jvp raises "associative scan over axis of non-constant size: b" too)."""

    def f(x):
        return jnp.sum(jnp.cumprod(x, 0))

    with pytest.raises(NotImplementedError, match="non-constant size: b"):
        jax.make_jaxpr(lambda x: jax.jvp(f, (x,), (x,)))(PER_EXAMPLE)
    r, src = _cli(tmp_path, [command], f)
    assert r.exit_code == 1
    assert "error: associative scan over axis of non-constant size: b" in r.output


# ---------------------------------------------------------------- real ffts, Jacobians

#: losses through a real fft of symbolic length b (`fft_lengths=(b,)`), whose transposes
#: JAX writes with a Hermitian mask over the floordiv(b, 2) + 1 bins
REAL_FFTS = {
    "rfft": lambda x: jnp.sum(jnp.abs(jnp.fft.rfft(x)) * jnp.cos(jnp.fft.rfft(x).real)),
    "irfft": lambda x: jnp.sum(
        jnp.sin(lax.fft(jnp.fft.rfft(x) * (1 + 2j), lax.FftType.IRFFT, (x.shape[-1],)))
    ),
    "rfft2": lambda x: jnp.sum(jnp.abs(jnp.fft.rfft2(x)) ** 2),  # fft_lengths=(3, b): N = 3*b
}
SHAPES = {"b": (SYM_B,), "3,b": (3, SYM_B)}


def _at(shape, n):
    return tuple(n if d is SYM_B else d for d in shape)


@pytest.mark.parametrize(
    ("name", "shape"),
    [
        ("rfft", "b"),
        ("irfft", "b"),
        ("rfft2", "3,b"),
        pytest.param("rfft", "3,b", marks=pytest.mark.slow),
        pytest.param("irfft", "3,b", marks=pytest.mark.slow),
    ],
)
def test_real_fft_grad_of_symbolic_length_matches_jax(name, shape):
    """The gradient through an rfft / irfft of symbolic length: the result types of
    jax.make_jaxpr(jax.grad(f)) on the symbolic shape, sizes printed as JAX prints them,
    and at b = 5 and b = 6 (an even length has a Nyquist bin, an odd one none) jax.grad's
    values at those concrete sizes."""
    f, shp = REAL_FFTS[name], SHAPES[shape]
    arg = jax.ShapeDtypeStruct(shp, jnp.float32)
    program, consts = traced(f, arg)
    g = reread(api.grad(program))
    want = traced(jax.grad(f), arg)[0].jaxpr
    assert [str(v.type) for v in g.jaxpr.outvars] == [str(v.type) for v in want.outvars]
    text = api.format(g)
    assert "dim_as_value[dim=" in text and "fft_type=3" in text
    for n in (5, 6):
        x, want = _jax_real_fft_grad(name, shape, n)
        close(run_at(g, x, consts=consts, sizes={"b": n}), [want])


@functools.cache
def _jax_real_fft_grad(name, shape, n):
    """The input at size b = n and jax.grad's value there (jitted), for the test above and
    the one below: compiled once for both."""
    x = np.random.RandomState(n).randn(*_at(SHAPES[shape], n)).astype(np.float32)
    return x, np.asarray(jax.jit(jax.grad(REAL_FFTS[name]))(x))


def test_jax_symbolic_rfft_transpose_masks_every_length_as_odd():
    """Why the tool's transpose is not JAX's text: JAX 0.12's `_rfft_transpose` asks
    `not n % 2` of a symbolic n, which is `not` of a non-zero expression, so it leaves out
    the Nyquist bin's mask.  Its own program, run at b = 6, is not jax.grad's at size 6 (at
    b = 5 it is); the tool's is at both (the test above)."""
    f = REAL_FFTS["rfft"]
    arg = jax.ShapeDtypeStruct((SYM_B,), jnp.float32)
    jaxs, consts = traced(jax.grad(f), arg)
    for n, agrees in ((5, True), (6, False)):
        x, want = _jax_real_fft_grad("rfft", "b", n)
        (got,) = run_at(jaxs, x, consts=consts, sizes={"b": n})
        assert np.allclose(got, want, rtol=1e-4, atol=1e-5) == agrees, n


#: the unmarked representatives of the Jacobians of a symbolic size
JAC_FAST = {("reshape", "jacfwd"), ("scan", "jacrev"), ("roll", "jacrev"), ("dot", "hessian")}
JACOBIANS = {"jacfwd": jacfwd, "jacrev": jacrev, "hessian": hessian}


def _jac_params():
    out = []
    for name in CASES:
        for how in JACOBIANS:
            fast = (name, how) in JAC_FAST
            out.append(pytest.param(name, how, marks=() if fast else pytest.mark.slow))
    return out


@pytest.mark.parametrize(("name", "how"), _jac_params())
def test_jacobians_of_symbolic_size_match_jax(name, how):
    """jacfwd / jacrev / hessian of f32[b,3]: JAX builds the standard basis over a symbolic
    number of rows (3*b) and vmaps over it, and so does the tool: the result types of
    jax.make_jaxpr(jax.jacfwd(f)) on the symbolic shape, and jax.jacfwd's values at b = 5."""
    f = CASES[name]
    program, consts = traced(f)
    got = reread(api.Program(JACOBIANS[how](program.jaxpr), program.style))
    jf = getattr(jax, how)(f)
    if (name, how) not in NO_JAX_TRACE:
        want = traced(jf)[0].jaxpr
        assert [str(v.type) for v in got.jaxpr.outvars] == [str(v.type) for v in want.outvars]
    x, _ = inputs()
    close(run_at(got, x, consts=consts), jax.tree.leaves(jax.jit(jf)(x)))


#: what JAX cannot trace on the symbolic shape (the values are still jax's, at b = 5)
NO_JAX_TRACE = {("cholesky", "hessian")}  # InconclusiveDimensionOperation: 'b' > 'b^3'


def test_jacfwd_command_of_symbolic_size(tmp_path):
    r, _ = _cli(tmp_path, ["jacfwd"], jnp.sin)
    assert r.exit_code == 0, r.output
    jac = api.parse(r.stdout, "<jacfwd>")
    assert [str(v.type) for v in jac.jaxpr.outvars] == ["f32[b,3,b,3]"]
    x, _ = inputs()
    close(run_at(jac, x), [jax.jit(jax.jacfwd(jnp.sin))(x)])


def test_symbolic_batch_size_is_no_python_string_in_arithmetic():
    """A rule multiplying the batch size as an integer gets a TypeError (the located
    refusal), never the text repeated (`'3*b3*b'`); in a parameter it prints bare."""
    from jaxprtool.ad import batching as BT

    with BT._context("3*b"):
        assert BT.axis_size() == "3*b"
        with pytest.raises(TypeError):
            _ = 2 * BT.axis_size()
        assert ops.sdims((BT.axis_size(), 3)) == (SymExpr("3*b"), 3)


def test_symbolic_kernel_window_jacfwd_runs_and_jacrev_is_refused_at_the_conv(tmp_path):
    """A grouped conv's kernel of window b: jacfwd batches the kernel over the basis 3*b
    (tests/test_symbolic_conv_batching.py compares it with JAX); the transposes' paddings
    are symbolic: jacrev is refused at the conv, as JAX refuses it, in its words."""

    def f(w):
        x = jnp.ones((1, 3, 4))
        return lax.conv_general_dilated(x, w, (1,), "VALID", feature_group_count=3)

    src = tmp_path / "w.jaxpr"
    w = jax.ShapeDtypeStruct((3, 1, SYM_B), jnp.float32)
    src.write_text(str(jax.make_jaxpr(f)(w)) + "\n")
    r = CliRunner().invoke(main, ["--no-color", "jacfwd", str(src)])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["--no-color", "jacrev", str(src)])
    assert r.exit_code == 1, r.output
    words = "padding argument to conv_general_dilated should be a string or a sequence"
    assert f"{src}:3:5: error: 'conv_general_dilated': {words}" in r.output
    assert "Traceback" not in r.output
    with pytest.raises(ValueError, match=words):
        jax.make_jaxpr(jax.jacrev(f))(w)


@pytest.mark.parametrize("option", [["--remat-budget", "0.5"], ["--remat", "min-cut"]])
def test_byte_weighted_remat_is_refused(tmp_path, option):
    """The residuals' bytes are unknown under a symbolic dim: no plan that counts it as 0,
    unless --dim gives the sizes; --dim without such a plan is bad usage."""
    r, src = _cli(tmp_path, ["grad", *option], lambda x: jnp.sum(jnp.sin(jnp.sin(x))))
    assert r.exit_code == 1
    assert "weigh residuals by their bytes, and f32[b,3] has a symbolic dimension" in r.output
    assert "--dim b=N" in r.output
    r = CliRunner().invoke(main, ["grad", "--dim", "b=4", src])
    assert r.exit_code == 2 and "--dim sizes the residual bytes" in r.output


def _remat_loss(x):
    h = jnp.sin(x) @ x.T
    return jnp.sum(jnp.tanh(jnp.sin(jnp.cos(h)) * 2) ** 2)


@pytest.mark.parametrize(
    "option", [["--remat", "min-cut"], ["--remat-budget", "0.5"], ["--remat-budget", "300"]]
)
def test_byte_weighted_remat_at_the_given_sizes(tmp_path, option):
    """`--dim b=100` sizes the bytes and FLOPs: the plan (bytes held, FLOPs, what is
    recomputed) is the one the same option makes on the program JAX traces at b = 100, and
    the symbolic gradient it writes is jax.grad's at other sizes too (b = 5)."""
    r, src = _cli(tmp_path, ["grad", *option, "--dim", "b=100"], _remat_loss)
    assert r.exit_code == 0, r.output
    concrete = tmp_path / "c.jaxpr"
    concrete.write_text(str(jax.make_jaxpr(_remat_loss)(np.zeros((100, 3), np.float32))) + "\n")
    # (the model's plan on both sides: a symbolic program's budget is the model's)
    no_xla = ["--no-xla"] if option[0] == "--remat-budget" else []
    c = CliRunner().invoke(main, ["--no-color", "grad", *option, *no_xla, str(concrete)])
    assert c.exit_code == 0, c.output
    plan = r.stderr.splitlines()[0]
    assert " on the program at b=100: residual bytes held " in plan
    assert plan.replace(" at b=100", "") == c.stderr.splitlines()[0]
    assert r.stderr.splitlines()[2] == c.stderr.splitlines()[2]  # the recomputed equations
    g = api.parse(r.stdout, "<grad>")
    assert "remat2" in r.stdout and "f32[b,b]" in r.stdout
    x, _ = inputs()
    close(run_at(g, x), [jax.jit(jax.grad(_remat_loss))(x)])


def test_policy_remat_runs_as_jax(tmp_path):
    def loss(x):
        return jnp.sum(jnp.sin(jnp.sin(x) @ x.T))

    r, _ = _cli(tmp_path, ["grad", "--remat", "dots_saveable"], loss)
    assert r.exit_code == 0, r.output
    x, _ = inputs()
    close(run_at(api.parse(r.stdout, "<grad>"), x), [jax.jit(jax.grad(loss))(x)])


@pytest.mark.parametrize("name", ["mean_all", "max_pool_same"])
def test_symbolic_parameter_values_print_back_as_jax_printed_them(name):
    """`dim_as_value[dim=3*b]` (a bare expression) and SAME padding's `- floordiv(- b, 2)`
    (an element with a leading minus) are read and printed back as JAX printed them."""
    text = str(jax.make_jaxpr(CASES[name])(PER_EXAMPLE))
    assert api.format(api.parse(text, name)) == text


def test_check_grad_and_explain_take_the_symbolic_sizes(tmp_path):
    """`--dim b=N` sizes check-grad's random inputs; explain runs its programs at the sizes
    read off `--args`, all its checks passing; the tool's gradient at that size is JAX's."""

    def f(x):
        return jnp.sum(jnp.sin(x) * x)

    src = tmp_path / "s.jaxpr"
    src.write_text(str(jax.make_jaxpr(f)(PER_EXAMPLE)) + "\n")
    r = CliRunner().invoke(main, ["check-grad", str(src), "--dim", f"b={SIZE}"])
    assert r.exit_code == 0, r.output
    assert "3 checks, 0 failures" in r.output
    x = np.linspace(-1, 1, SIZE * 3, dtype=np.float32).reshape(SIZE, 3)
    np.savez(tmp_path / "in.npz", arg0=x)
    r = CliRunner().invoke(main, ["explain", str(src), "--args", str(tmp_path / "in.npz")])
    assert r.exit_code == 0 and "result: all checks pass" in r.output, r.output
    (g,) = api.run(api.grad(api.parse(src.read_text())), x)
    np.testing.assert_allclose(g, jax.jit(jax.grad(f))(x), rtol=1e-5, atol=1e-6)
    r = CliRunner().invoke(main, ["check-grad", str(src)])
    assert r.exit_code == 2 and "pass --dim b=N" in r.output, r.output
