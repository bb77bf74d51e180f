"""custom_jvp / custom_vjp rules the printed text does not contain (JAX is the oracle).

- custom_vjp without its rule: an error by default; `--custom-rules body` differentiates
  the body on purpose and says so in a comment line of the output;
- JAX's library rules (relu, relu6, logaddexp, xlogy, xlog1py, logit) recognised by name and
  body: JAX's gradients exactly (kinks included) from plain `make_jaxpr` text;
- `jaxprtool trace` records the rules, and the AD commands then match `jax.grad`/`jax.vjp`/
  `jax.jvp` exactly (clipping, straight-through, residuals, nondiff_argnums, symbolic zeros).
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
from click.testing import CliRunner

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from conftest import written_module  # noqa: E402

from jaxprtool import backend  # noqa: E402
from jaxprtool.cli import main  # noqa: E402
from jaxprtool.text.parser import parse  # noqa: E402

RULES_MODULE = """
import jax
import jax.numpy as jnp
from functools import partial


@jax.custom_vjp
def clip_grad(x):
    return 2.0 * x


def clip_fwd(x):
    return 2.0 * x, None


def clip_bwd(res, g):
    return (jnp.clip(g, -1.0, 1.0),)


clip_grad.defvjp(clip_fwd, clip_bwd)


def clipped(x):
    return clip_grad(x).sum()


@jax.custom_vjp
def straight_through_round(x):
    return jnp.round(x)


straight_through_round.defvjp(lambda x: (jnp.round(x), None), lambda _, g: (g,))


def ste(x):
    return (straight_through_round(x * 3.0) ** 2).sum()


@partial(jax.custom_vjp, nondiff_argnums=(1,))
def scaled(x, k):
    return jnp.sin(x) * k


def scaled_fwd(x, k):
    return jnp.sin(x) * k, (jnp.cos(x), x)


def scaled_bwd(k, res, g):
    c, x = res
    return (3.0 * c * g * k + 0.0 * x,)


scaled.defvjp(scaled_fwd, scaled_bwd)


def with_residuals(x, y):
    return (scaled(x, 2.0) * y).sum() + jax.nn.relu(y).sum()


@jax.custom_jvp
def sz(x, y):
    return jnp.sin(x) * y


@partial(sz.defjvp, symbolic_zeros=True)
def sz_jvp(primals, tangents):
    x, y = primals
    tx, ty = tangents
    out = sz(x, y)
    t = jnp.zeros_like(out)
    if type(tx) is not jax.custom_derivatives.SymbolicZero:
        t = t + 4.0 * jnp.cos(x) * y * tx
    if type(ty) is not jax.custom_derivatives.SymbolicZero:
        t = t + jnp.sin(x) * ty
    return out, t


def symbolic(x, y):
    return sz(x, y).sum()


@jax.custom_vjp
def looped(x):
    return jnp.sin(x)


def looped_fwd(x):
    return jnp.sin(x), jnp.cos(x)


def looped_bwd(c, g):
    # a while loop (as diffrax's adjoint solve has): the tool cannot transpose this bwd
    _, acc = jax.lax.while_loop(lambda s: s[0] < 3, lambda s: (s[0] + 1, s[1] + g * c), (0, g * 0))
    return (acc,)


looped.defvjp(looped_fwd, looped_bwd)


def with_loop(x):
    return looped(x) * x
"""

X = np.array([-2.0, -0.5, 0.0, 0.7, 3.0], np.float32)
Y = np.array([1.5, -1.0, 0.0, 2.0, 0.25], np.float32)


@pytest.fixture(scope="module")
def rules(tmp_path_factory):
    """The module above, importable, and a helper that traces one of its functions."""
    folder = tmp_path_factory.mktemp("rules")
    mod = written_module(folder, "custom_rules", RULES_MODULE)

    def trace(fn: str, *types: str) -> str:
        args = [a for t in types for a in ("--arg", t)]
        with contextlib.chdir(folder):
            r = CliRunner().invoke(main, ["trace", f"{mod.__name__}:{fn}", *args])
        assert r.exit_code == 0, r.output
        return r.stdout

    return mod, trace


def tool(*argv, text: str):
    return CliRunner().invoke(main, ["--no-color", *argv], input=text)


def run_text(text: str, *args):
    return backend.evaluate(parse(text, "<out>").jaxpr, list(args))


def plain(fn, *args) -> str:
    return str(jax.make_jaxpr(fn)(*args))


# ---------------------------------------------------------------- 1. never silent


def test_custom_vjp_without_its_rule_is_a_located_error(rules):
    mod, _ = rules
    r = tool("grad", "-", text=plain(mod.clipped, X))
    assert r.exit_code == 1
    assert r.stdout == ""
    assert "<stdin>:2:5: error: custom_vjp_call 'clip_grad' (fwd=clip_fwd bwd=clip_bwd)" in r.stderr
    for how in ("--plugin RULES.py", "jaxprtool trace MODULE:FUNCTION", "--custom-rules body"):
        assert how in r.stderr


def test_custom_rules_body_differentiates_the_body_and_records_it(rules):
    mod, _ = rules
    r = tool("grad", "--custom-rules", "body", "-", text=plain(mod.clipped, X))
    assert r.exit_code == 0, r.output
    first = r.stdout.splitlines()[0]
    assert first.startswith("# jaxprtool: custom_vjp_call 'clip_grad'")
    assert "replaced by the derivative of its body" in first
    assert "warning:" in r.stderr
    (g,) = run_text(r.stdout, X)  # the comment line parses
    np.testing.assert_allclose(g, np.full(5, 2.0))  # the body's derivative, not JAX's


def test_custom_jvp_without_a_rule_warns_once_per_function(rules):
    def f(x):
        @jax.custom_jvp
        def mine(x):
            return jnp.sin(x)

        mine.defjvp(lambda p, t: (jnp.sin(p[0]), 7.0 * t[0]))
        return mine(x) + mine(2.0 * x)

    r = tool("jvp", "-", text=plain(f, X))
    assert r.exit_code == 0, r.output
    assert r.stderr.count("warning: custom_jvp_call 'mine'") == 1
    # the rule (7 t) differs from the body's derivative (cos x t) everywhere, not at kinks
    assert (
        "the text does not contain its custom rule; the derivative here is its body's, which "
        "differs from JAX's wherever the custom rule does (a rule may differ everywhere, not "
        "only at kinks); for JAX's derivative, trace the function with `jaxprtool trace "
        "MODULE:FUNCTION` (its rule travels with the program) or give the rule with --plugin "
        "RULES.py (register_custom_jvp, docs/PLUGINS.md); --custom-rules strict makes this an "
        "error"
    ) in " ".join(r.stderr.split())
    strict = tool("jvp", "--custom-rules", "strict", "-", text=plain(f, X))
    assert strict.exit_code == 1 and "error: custom_jvp_call 'mine'" in strict.stderr


def test_check_grad_names_replaced_rules_and_refuses_under_strict(rules):
    mod, _ = rules
    text = plain(mod.clipped, X)
    body = tool("check-grad", "--custom-rules", "body", "-", text=text)
    assert body.exit_code == 0, body.output
    assert "checked against the body, not the custom rule" in body.stdout
    assert "clip_grad" in body.stdout
    strict = tool("check-grad", "--custom-rules", "strict", "-", text=text)
    assert strict.exit_code == 2  # a refusal: not checked (README, exit codes)
    assert "error: custom_vjp_call 'clip_grad'" in strict.stderr
    assert strict.stdout == ""  # nothing checked: the summary goes with the error
    assert strict.stderr.splitlines()[-1] == (
        "check-grad: 0 files, 0 checks, 0 failures, 1 not checked (errors above)"
    )


# ---------------------------------------------------------------- 2. JAX's library rules

LIBRARY = {
    "relu": lambda x: jax.nn.relu(x) * x,
    "relu6": lambda x: jax.nn.relu6(x * 3.0) * x,
    "logaddexp": lambda x: jnp.logaddexp(x, 1.0) + jnp.logaddexp(x, x * 0.5),
    "xlogy": lambda x: jax.scipy.special.xlogy(x, x * x + 1.0),
    "xlog1py": lambda x: jax.scipy.special.xlog1py(x, x * x),
    "logit": lambda x: jax.scipy.special.logit(0.1 * x + 0.5),
}
#: kinks and special points: relu at 0, relu6 at 0 and 6 (x*3 = 6 at x = 2)
KINKS = np.array([0.0, 2.0, -1.0, 1e-3, 0.5], np.float32)


@pytest.mark.parametrize("name", sorted(LIBRARY))
def test_library_rule_gives_jax_gradient_exactly_from_plain_text(name):
    fn = LIBRARY[name]

    def loss(x):
        return fn(x).sum()

    text = plain(loss, KINKS)
    assert f"name={name}" in text
    r = tool("grad", "-", text=text)
    assert r.exit_code == 0, r.output
    assert "warning" not in r.stderr, r.stderr
    (got,) = run_text(r.stdout, KINKS)
    expected = np.asarray(jax.jit(jax.grad(loss))(KINKS))
    np.testing.assert_allclose(got, expected, rtol=2e-6, atol=1e-7)
    tool_eqns = len(parse(r.stdout).jaxpr.eqns)
    jax_eqns = len(jax.make_jaxpr(jax.grad(loss))(KINKS).eqns)
    assert tool_eqns <= jax_eqns, (tool_eqns, jax_eqns)


@pytest.mark.parametrize("masked", [False, True], ids=["all", "where"])
@pytest.mark.parametrize("axis", [-1, 1, (0, 2)])
def test_softmax_rule_gives_jax_gradient_on_any_axis(axis, masked):
    """`jax.nn.softmax` is a custom_jvp function (by default from JAX 0.12.1): JAX's rule, on
    the axes the body reduces over, with or without `where=`, with no warning; its jaxpr is
    no longer than JAX's."""
    x = np.random.default_rng(3).standard_normal((2, 3, 4)).astype(np.float32)

    def loss(x):  # (weights and mask from iota: the text holds no constant)
        iota = jnp.arange(24.0).reshape(2, 3, 4)
        where = (iota % 5.0 != 1.0) if masked else None
        return (jax.nn.softmax(x, axis=axis, where=where) * iota).sum()

    before = jax.config.jax_softmax_custom_jvp
    jax.config.update("jax_softmax_custom_jvp", True)
    try:
        text = plain(loss, x)
        expected = np.asarray(jax.jit(jax.grad(loss))(x))
        jax_eqns = len(jax.make_jaxpr(jax.grad(loss))(x).eqns)
    finally:
        jax.config.update("jax_softmax_custom_jvp", before)
    assert "name=_softmax" in text
    r = tool("grad", "-", text=text)
    assert r.exit_code == 0 and "warning" not in r.stderr, r.output
    (got,) = run_text(r.stdout, x)
    np.testing.assert_allclose(got, expected, rtol=2e-6, atol=1e-6)
    assert len(parse(r.stdout).jaxpr.eqns) <= jax_eqns


def test_relu_at_exact_zero_is_jax_not_the_body():
    x = np.zeros(3, np.float32)
    r = tool("grad", "-", text=plain(lambda x: jax.nn.relu(x).sum(), x))
    (got,) = run_text(r.stdout, x)
    np.testing.assert_array_equal(got, np.zeros(3))  # the body max(x, 0) would give 0.5


def test_a_user_function_named_relu_with_another_body_gets_no_jax_rule():
    @jax.custom_jvp
    def relu(x):
        return jnp.maximum(x, 1.0)

    relu.defjvp(lambda p, t: (relu(p[0]), t[0]))
    r = tool("grad", "-", text=plain(lambda x: relu(x).sum(), X))
    assert r.exit_code == 0, r.output
    assert "warning: custom_jvp_call 'relu'" in r.stderr
    assert r.stdout.startswith("# jaxprtool: custom_jvp_call 'relu'")


def test_relu_network_has_at_most_jax_grad_equations():
    w = np.random.default_rng(0).normal(size=(4, 6)).astype(np.float32)
    x = np.random.default_rng(1).normal(size=(3, 4)).astype(np.float32)

    def loss(w, x):
        h = jax.nn.relu(x @ w)
        return (jax.nn.relu(h - 0.1) ** 2).sum()

    r = tool("grad", "-", text=plain(loss, w, x))
    assert r.exit_code == 0 and "warning" not in r.stderr, r.output
    (got,) = run_text(r.stdout, w, x)
    np.testing.assert_allclose(got, jax.jit(jax.grad(loss))(w, x), rtol=1e-5, atol=1e-6)
    assert len(parse(r.stdout).jaxpr.eqns) <= len(jax.make_jaxpr(jax.grad(loss))(w, x).eqns)


# ---------------------------------------------------------------- 3. rules that travel


def test_trace_records_the_rules_and_fmt_keeps_them(rules):
    _, trace = rules
    text = trace("clipped", "f32[5]")
    assert "jaxprtool_fwd={ lambda" in text and "jaxprtool_bwd={ lambda" in text
    r = tool("fmt", "-", text=text)
    assert r.exit_code == 0 and r.stdout == text
    old = tool("--jax-style", "0.12", "fmt", "-", text=text)
    assert "jaxprtool_" not in old.stdout
    assert "dropping the traced custom rule" in old.stderr


@pytest.mark.parametrize(
    "fn, types, argnums, make_args",
    [
        ("clipped", ("f32[5]",), (0,), lambda: (X * 3.0,)),
        ("ste", ("f32[5]",), (0,), lambda: (X,)),
        ("with_residuals", ("f32[5]", "f32[5]"), (0, 1), lambda: (X, Y)),
    ],
)
def test_grad_of_traced_custom_vjp_equals_jax(rules, fn, types, argnums, make_args):
    mod, trace = rules
    text = trace(fn, *types)
    args = make_args()
    r = tool("grad", "--argnums", ",".join(map(str, argnums)), "-", text=text)
    assert r.exit_code == 0, r.output
    assert "warning" not in r.stderr, r.stderr
    got = run_text(r.stdout, *args)
    expected = jax.jit(jax.grad(getattr(mod, fn), argnums=argnums))(*args)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-6, atol=1e-7)


def test_clipping_is_kept_exactly(rules):
    mod, trace = rules
    r = tool("grad", "-", text=trace("clipped", "f32[5]"))
    (got,) = run_text(r.stdout, X)
    np.testing.assert_array_equal(got, np.ones(5))  # jax.grad: the clipped 2.0 -> 1.0
    np.testing.assert_array_equal(np.asarray(jax.jit(jax.grad(mod.clipped))(X)), np.ones(5))


def test_linearize_then_transpose_through_files_equals_jax_vjp(rules):
    mod, trace = rules
    text = trace("with_residuals", "f32[5]", "f32[5]")
    lin = tool("linearize", "-", text=text)
    assert lin.exit_code == 0, lin.output
    assert "custom_lin[" in lin.stdout and "jaxprtool_bwd=" in lin.stdout
    vjp = tool("transpose", "-", text=lin.stdout)
    assert vjp.exit_code == 0, vjp.output
    ct = np.float32(1.5)
    # the combined form's transpose takes the primals and the output cotangent
    outs = run_text(vjp.stdout, X, Y, ct)
    pulled = jax.jit(lambda x, y, c: jax.vjp(mod.with_residuals, x, y)[1](c))(X, Y, ct)
    for g, e in zip(outs[-2:], pulled):
        np.testing.assert_allclose(g, e, rtol=1e-6, atol=1e-6)


def test_linearized_custom_vjp_runs_and_its_linear_program_transposes_alone(rules):
    """linearize | run: the custom_lin runs as the transpose of its recorded bwd, so the
    tangents are J t with J jax.jacrev's (JAX itself cannot run a linearized custom_vjp);
    the linear program runs and transposes on its own (the dot-product test, and
    its transpose is jax.vjp's pullback)."""
    mod, trace = rules
    text = trace("with_residuals", "f32[5]", "f32[5]")
    lin = tool("linearize", "-", text=text)
    assert lin.exit_code == 0, lin.output
    tx, ty = Y * 0.5 - 0.25, X * 0.25 + 0.5
    got = run_text(lin.stdout, X, Y, tx, ty)
    ct = np.float32(1.5)
    # JAX's value, Jacobian and pullback: one compilation
    value, (jx, jy), pulled = jax.jit(
        lambda x, y, c: (
            mod.with_residuals(x, y),
            jax.jacrev(mod.with_residuals, argnums=(0, 1))(x, y),
            jax.vjp(mod.with_residuals, x, y)[1](c),
        )
    )(X, Y, ct)
    np.testing.assert_allclose(got[0], value, rtol=1e-6)
    np.testing.assert_allclose(got[1], jx @ tx + jy @ ty, rtol=1e-5, atol=1e-5)
    from jaxprtool.ad.api import linearize_jaxpr, transpose_jaxpr
    from jaxprtool.text.printer import print_jaxpr

    primal, linear, info = linearize_jaxpr(parse(text, "<traced>").jaxpr)
    linear = parse(print_jaxpr(linear), "<linear>").jaxpr  # on its own, as a file holds it
    pouts = run_text(print_jaxpr(primal), X, Y)
    src = {"input": [X, Y], "output": pouts[:1], "new": pouts[1:]}
    res = [src[r.source][r.index] for r in info.residuals]
    (lin_out,) = backend.evaluate(linear, [*res, tx, ty])
    np.testing.assert_allclose(lin_out, got[1], rtol=1e-5, atol=1e-5)
    lt = transpose_jaxpr(linear, [False] * len(res) + [True, True])
    gx, gy = backend.evaluate(lt, [*res, ct])
    assert abs(float(lin_out * ct) - float(gx @ tx + gy @ ty)) <= 1e-4 * max(1.0, abs(lin_out))
    for g, e in zip((gx, gy), pulled):
        np.testing.assert_allclose(g, e, rtol=1e-6, atol=1e-6)


def test_linearized_custom_vjp_with_a_looping_bwd_runs_by_rows(rules):
    """A bwd with a while loop does not transpose: the custom_lin runs as J t from the rows
    of J (the bwd on each output basis vector); J is jax.jacrev's."""
    mod, trace = rules
    lin = tool("linearize", "-", text=trace("with_loop", "f32[5]"))
    assert lin.exit_code == 0, lin.output
    got = run_text(lin.stdout, X, Y)
    value, jac = jax.jit(lambda x: (mod.with_loop(x), jax.jacrev(mod.with_loop)(x)))(X)
    np.testing.assert_allclose(got[0], value, rtol=1e-6)
    np.testing.assert_allclose(got[1], jac @ Y, rtol=1e-5, atol=1e-5)


def test_jvp_of_traced_custom_jvp_with_symbolic_zeros_equals_jax(rules):
    mod, trace = rules
    text = trace("symbolic", "f32[5]", "f32[5]")
    assert "jaxprtool_jvp={ lambda" in text
    r = tool("jvp", "-", text=text)
    assert r.exit_code == 0, r.output
    tx, ty = Y * 0.5, X * 0.25
    got = run_text(r.stdout, X, Y, tx, ty)
    (out, tout), grad = jax.jit(  # JAX's jvp and gradient: one compilation
        lambda p, t: (jax.jvp(mod.symbolic, p, t), jax.grad(mod.symbolic, argnums=(0, 1))(*p))
    )((X, Y), (tx, ty))
    np.testing.assert_allclose(got[0], out, rtol=1e-6)
    np.testing.assert_allclose(got[1], tout, rtol=1e-6)
    g = tool("grad", "--argnums", "0,1", "-", text=text)
    got = run_text(g.stdout, X, Y)
    for a, e in zip(got, grad):
        np.testing.assert_allclose(a, e, rtol=1e-6, atol=1e-7)


def test_jvp_of_a_custom_vjp_function_is_refused_in_jax_words(rules):
    _, trace = rules
    r = tool("jvp", "-", text=trace("clipped", "f32[5]"))
    assert r.exit_code == 1
    assert "can't apply forward-mode autodiff (jvp) to a custom_vjp function." in r.stderr


def test_run_and_passes_keep_the_traced_rules(rules):
    mod, trace = rules
    text = trace("with_residuals", "f32[5]", "f32[5]")
    (value,) = run_text(text, X, Y)
    want, grad = jax.jit(  # JAX's value and gradient: one compilation
        lambda x, y: (mod.with_residuals(x, y), jax.grad(mod.with_residuals, argnums=(0, 1))(x, y))
    )(X, Y)
    np.testing.assert_allclose(value, want, rtol=1e-6)
    opt = tool("opt", "-p", "inline,simplify,cse,dce", "-", text=text)
    assert opt.exit_code == 0 and "jaxprtool_bwd=" in opt.stdout
    g = tool("grad", "--argnums", "0,1", "-", text=opt.stdout)
    got = run_text(g.stdout, X, Y)
    for a, e in zip(got, grad):
        np.testing.assert_allclose(a, e, rtol=1e-6, atol=1e-7)


def test_docs_document_the_extension():
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "docs" / "TRANSFORMATIONS.md").read_text()
    assert "jaxprtool_fwd" in readme and "--custom-rules" in readme
