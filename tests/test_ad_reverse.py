"""Reverse mode: linearize + transpose, vjp and grad against JAX; the dot-product test; transpose
twice; the combined linearize form through `transpose`; custom_vjp (with and without a plugin),
checkpoint policies; the exact error texts; the `transpose`, `vjp` and `grad` commands."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest
from click.testing import CliRunner

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax_oracle import close, ir, run, together, vec  # noqa: E402

from jaxprtool import backend  # noqa: E402
from jaxprtool.ad.api import (  # noqa: E402
    grad_jaxpr,
    linearize_combined,
    linearize_jaxpr,
    transpose_auto,
    transpose_jaxpr,
    vjp_jaxpr,
)
from jaxprtool.cli import main  # noqa: E402
from jaxprtool.core import JaxprError  # noqa: E402
from jaxprtool.text.parser import parse  # noqa: E402

X, Y = vec(4, 0), vec(4, 1, 0.5, 2.0)
W = vec((4, 3), 2)


def mlp_loss(w, x, y):
    h = jnp.tanh(x @ w)
    return jnp.mean((jnp.sin(h) * 2.0 - y[:3]) ** 2) + 0.1 * jnp.sum(w * w)


FUNCS = [
    ("poly", lambda x, y: jnp.sum(x**3 * y - jnp.exp(x) / y), (X, Y)),
    ("select_max", lambda x, y: jnp.sum(jnp.where(x > 0, x * y, jnp.maximum(x, -y))), (X, Y)),
    ("mlp", mlp_loss, (W, X, Y)),
    ("nested_jit", lambda x, y: jnp.sum(jax.jit(lambda a, b: jnp.sin(a) * b)(x, y) ** 2), (X, Y)),
]


def _residual_values(primal, info, args):
    outs = backend.evaluate(primal, args)
    n_out = len(info.out_mask)
    new = outs[n_out:]
    src = {"input": args, "output": outs[:n_out], "new": new}
    return [np.asarray(src[r.source][r.index]) for r in info.residuals]


@pytest.mark.parametrize("case", FUNCS, ids=[c[0] for c in FUNCS])
def test_vjp_and_grad_match_jax(case):
    name, f, args = case
    args = list(args)
    j = ir(f, *args)
    ct = np.float32(0.7)

    def oracle(args, ct):
        return (
            jax.value_and_grad(f, argnums=tuple(range(len(args))))(*args),
            jax.vjp(f, *args)[1](ct),
        )

    # JAX's and the tool's two programs: one compilation
    ((ref_val, ref_grads), ref), got, got_vjp = together(
        (oracle, (args, ct)),
        (grad_jaxpr(j, tuple(range(len(args))), with_value=True), args),
        (vjp_jaxpr(j), args + [ct]),
    )
    close(got[0], ref_val)
    for a, b in zip(got[1:], ref_grads):
        close(a, b)
    for a, b in zip(got_vjp[1:], ref):
        close(a, b)


@pytest.mark.parametrize("case", FUNCS, ids=[c[0] for c in FUNCS])
def test_dot_product_and_double_transpose(case):
    """<w, L v> = <L^T w, v> on the linear program, and (L^T)^T = L."""
    name, f, args = case
    args = list(args)
    j = ir(lambda *a: jnp.atleast_1d(f(*a)) * jnp.arange(1.0, 3.0), *args)  # two outputs per input
    primal, linear, info = linearize_jaxpr(j)
    res = _residual_values(primal, info, args)
    n_res = len(res)
    rng = np.random.default_rng(5)
    vs = [rng.uniform(-1, 1, np.shape(a)).astype(np.float32) for a in args]
    ws = [rng.uniform(-1, 1, tuple(v.type.shape)).astype(np.float32) for v in linear.outvars]
    lt = transpose_jaxpr(linear, [False] * n_res + [True] * len(vs))
    ltt = transpose_jaxpr(lt, [False] * n_res + [True] * len(ws))
    lv, ltw, lttv = together((linear, res + vs), (lt, res + ws), (ltt, res + vs))
    lhs = sum(float(np.sum(w * a)) for w, a in zip(ws, lv))
    rhs = sum(float(np.sum(a * v)) for a, v in zip(ltw, vs))
    assert abs(lhs - rhs) <= 1e-3 * max(1.0, abs(lhs))
    for a, b in zip(lttv, lv):
        close(a, b)


def test_linearize_then_transpose_is_vjp():
    f = FUNCS[2][1]
    args = [W, X, Y]
    j = ir(f, *args)
    lc = linearize_combined(j)
    t, mask, lin_out = transpose_auto(lc)
    assert mask == [False] * 3 + [True] * 3 and lin_out == [False, True]
    ct = np.float32(1.5)
    got, (ref_val, ref_ct) = together(
        (t, args + [ct]), (lambda args, ct: _value_and_pullback(f, args, ct), (args, ct))
    )
    close(got[0], ref_val)
    for a, b in zip(got[1:], ref_ct):
        close(a, b)


def _value_and_pullback(f, args, ct):
    out, pull = jax.vjp(f, *args)
    return out, pull(ct)


def test_grad_of_grad_matches_jax():
    def f(x):
        return jnp.sin(x) * x**3 + jnp.exp(-x * x)

    x = np.float32(0.7)
    j = ir(f, x)
    g2 = grad_jaxpr(grad_jaxpr(j))
    (got, *_), want = together((g2, [x]), (jax.grad(jax.grad(f)), [x]))
    close(got, want)


def test_grad_has_aux_and_argnums_order():
    def f(x, y):
        return jnp.sum(x * y), x + 1.0

    j = ir(f, X, Y)
    out = backend.evaluate(grad_jaxpr(j, (1, 0), has_aux=True, with_value=True), [X, Y])
    assert len(out) == 4
    close(out[0], np.sum(X * Y))
    close(out[1], X + 1.0)
    close(out[2], X)
    close(out[3], Y)


# ---------------------------------------------------------------- custom_vjp, checkpoint


@jax.custom_vjp
def scaled_sin(x, y):
    return jnp.sin(x) * y


def scaled_sin_fwd(x, y):
    return scaled_sin(x, y), (jnp.cos(x), jnp.sin(x), y)


def scaled_sin_bwd(res, g):
    c, s, y = res
    return (3.0 * c * g * y, s * g)  # deliberately three times the true d/dx


scaled_sin.defvjp(scaled_sin_fwd, scaled_sin_bwd)


def _f_cv(x, y):
    return jnp.sum(scaled_sin(x, y))


def test_custom_vjp_without_its_rule_is_refused_unless_the_body_is_asked_for():
    from jaxprtool.ad.registry import set_custom_rule_policy

    j = ir(_f_cv, X, Y)
    with pytest.raises(JaxprError, match="scaled_sin.*does not contain it.*--custom-rules body"):
        grad_jaxpr(j, (0, 1))
    set_custom_rule_policy("body")
    try:
        got = backend.evaluate(grad_jaxpr(j, (0, 1)), [X, Y])
    finally:
        set_custom_rule_policy("default")
    # the body's derivative (sin(x) * y), not the custom rule's (which triples the first)
    close(got[0], np.cos(X) * Y)
    close(got[1], np.sin(X))


def test_custom_vjp_with_plugin(tmp_path):
    from jaxprtool.ad.registry import custom_vjps
    from jaxprtool.plugins import load_plugins

    plugin = tmp_path / "cv_rules.py"
    plugin.write_text(
        textwrap.dedent("""\
        from jaxprtool.plugins import ops, register_custom_vjp

        def fwd(x, y):
            out = ops.mul(ops.sin(x), y)
            return [out], [ops.cos(x), ops.sin(x), y]

        def bwd(res, cts):
            c, s, y = res
            (g,) = cts
            return [ops.mul(ops.mul(ops.mul(ops.lit(3.0, g), c), g), y), ops.mul(s, g)]

        register_custom_vjp("scaled_sin_fwd", fwd, bwd)
        """)
    )
    try:
        load_plugins([str(plugin)])
        j = ir(_f_cv, X, Y)
        # the tool's gradient (the plugin's rule) and JAX's: one compilation
        got, ref = together((grad_jaxpr(j, (0, 1)), [X, Y]), (jax.grad(_f_cv, (0, 1)), [X, Y]))
        close(got[0], ref[0])
        close(got[1], ref[1])
        # linearize shows custom_lin; transpose turns it into bwd
        r = run(["linearize", "-"], str(jax.make_jaxpr(_f_cv)(X, Y)))
        assert r.exit_code == 0, r.output
        assert "custom_lin" in r.stdout
        r2 = run(["transpose", "-"], r.stdout)
        assert r2.exit_code == 0, r2.output
        vj = parse(r2.stdout, "t").jaxpr
        got = backend.evaluate(vj, [X, Y, np.float32(1.0)])
        close(got[1], ref[0])
    finally:
        custom_vjps.pop("scaled_sin_fwd", None)


@pytest.mark.parametrize("policy", ["none", "dots", "names"])
def test_checkpoint_grad(policy):
    from jax.ad_checkpoint import checkpoint_name

    pol = {
        "none": None,
        "dots": jax.checkpoint_policies.dots_saveable,
        "names": jax.checkpoint_policies.save_only_these_names("h"),
    }[policy]

    def f(w, x):
        def body(w, x):
            h = checkpoint_name(jnp.tanh(x @ w), "h")
            return jnp.sum(jnp.sin(h) ** 2)

        return jax.checkpoint(body, policy=pol)(w, x)

    j = ir(f, W, X)
    # the tool's gradient and JAX's: one compilation
    got, ref = together((grad_jaxpr(j, (0, 1)), [W, X]), (jax.grad(f, (0, 1)), [W, X]))
    close(got[0], ref[0])
    close(got[1], ref[1])


def test_checkpoint_named_policy_record_saves_the_name():
    """0.10.2 prints `SaveOnlyTheseNames(...)`: the named value becomes a residual."""
    src = textwrap.dedent("""\
        { lambda ; a:f32[4]. let
            b:f32[4] = remat2[
              differentiated=False
              jaxpr={ lambda ; c:f32[4]. let
                  d:f32[4] = sin c
                  e:f32[4] = name[name=y] d
                  f:f32[4] = sin e
                in (f,) }
              policy=SaveOnlyTheseNames(saveable_names=frozenset({'y'}))
              prevent_cse=True
            ] a
          in (b,) }""")
    j = parse(src, "r").jaxpr
    primal, linear, info = linearize_jaxpr(j)
    lin_remat = [e for e in linear.eqns if e.prim == "remat2"]
    body = [e.prim for e in lin_remat[0].params["jaxpr"].eqns]
    assert "sin" not in body and body.count("cos") == 2  # sin(c) is saved by name, not recomputed
    assert [e.prim for e in primal.eqns] == ["remat2"]
    got = backend.evaluate(vjp_jaxpr(j), [X, Y])
    close(got[1], np.cos(np.sin(X)) * np.cos(X) * Y)


# ---------------------------------------------------------------- errors


def test_grad_of_non_scalar_message():
    j = ir(lambda x: jnp.sin(x), X)
    with pytest.raises(JaxprError) as e:
        grad_jaxpr(j)
    assert e.value.message == (
        "Gradient only defined for scalar-output functions. Output had shape: (4,). To get the gradient, "
        "reduce the output to a scalar with output.sum(), or use jax.jacobian (`jaxprtool jacrev`) to differentiate a function "
        "with a non-scalar output."
    )
    with pytest.raises(TypeError) as te:  # the same text as JAX's
        jax.grad(lambda x: jnp.sin(x))(X)
    # JAX's text, with the tool's equivalent of the JAX feature it points to; JAX 0.11.0 and
    # earlier stop after the shape (the tool gives the later text, with its hint)
    jax_text = str(te.value).replace("jax.jacobian", "jax.jacobian (`jaxprtool jacrev`)")
    if "To get the gradient" in jax_text:
        assert jax_text == e.value.message
    else:
        assert e.value.message.startswith(jax_text.rstrip())


def test_grad_of_int_input_message():
    j = ir(lambda x, n: jnp.sum(x) * n, X, np.int32(2))
    with pytest.raises(JaxprError) as e:
        grad_jaxpr(j, 1)
    with pytest.raises(TypeError) as te:
        jax.grad(lambda x, n: jnp.sum(x) * n, 1)(X, np.int32(2))
    # JAX's words, but for its allow_int=True, which the tool has no option of (issue 45)
    jax_words = str(te.value).replace(
        "use vjp or set allow_int to True.",
        "use vjp (`jaxprtool vjp`), which gives them no cotangent.",
    )
    assert e.value.message == jax_words and "allow_int" not in e.value.message


def test_missing_transpose_rule_is_located():
    src = "{ lambda ; a:f32[3]. let\n    b:f32[3] = neg a\n    c:f32[3] = sin b\n  in (c,) }"
    j = parse(src, "lin.jaxpr").jaxpr
    with pytest.raises(JaxprError) as e:
        transpose_jaxpr(j, [True])
    assert (
        e.value.message
        == "Transpose rule (for reverse-mode differentiation) for 'sin' not implemented"
    )
    assert (e.value.loc.file, e.value.loc.line, e.value.loc.col) == ("lin.jaxpr", 3, 5)
    r = run(["transpose", "-"], src)
    assert r.exit_code == 1
    assert (
        "<stdin>:3:5: error: Transpose rule (for reverse-mode differentiation) for 'sin' not implemented"
        in r.stderr
    )


# ---------------------------------------------------------------- commands


SRC = textwrap.dedent("""\
    { lambda ; a:f32[4] b:f32[4]. let
        c:f32[4] = sin a
        d:f32[4] = mul c b
        e:f32[] = reduce_sum[axes=(0,) out_sharding=None] d
      in (e,) }
    """)


def test_grad_vjp_transpose_commands(tmp_path):
    p = tmp_path / "f.jaxpr"
    p.write_text(SRC)
    r = run(["grad", "--argnums", "0,1", "--with-value", str(p)])
    assert r.exit_code == 0, r.output
    got = backend.evaluate(parse(r.stdout, "g").jaxpr, [X, Y])
    close(got[0], np.sum(np.sin(X) * Y))
    close(got[1], np.cos(X) * Y)
    close(got[2], np.sin(X))
    r = run(["vjp", "--argnums", "1", str(p)])
    assert r.exit_code == 0, r.output
    got = backend.evaluate(parse(r.stdout, "v").jaxpr, [X, Y, np.float32(2.0)])
    assert len(got) == 2
    close(got[1], 2.0 * np.sin(X))
    # a plain linear program: all inputs linear, then --residuals
    lin = "{ lambda ; a:f32[4] b:f32[4]. let\n    c:f32[4] = mul a b\n    d:f32[4] = neg c\n  in (d,) }\n"
    r = run(["transpose", "--residuals", "1", "-"], lin)
    assert r.exit_code == 0, r.output
    got = backend.evaluate(parse(r.stdout, "t").jaxpr, [X, Y])
    close(got[0], -X * Y)
    r = run(["transpose", "--linear", "1", "-"], lin)
    assert r.exit_code == 0
    r = run(["transpose", "--linear", "1", "--residuals", "1", "-"], lin)
    assert r.exit_code == 2
    r = run(["grad", "-"], str(jax.make_jaxpr(jnp.sin)(X)))
    assert r.exit_code == 1 and "Gradient only defined for scalar-output functions" in r.stderr


def test_grad_twice_through_the_cli():
    f = lambda x: jnp.sin(x) * x * x  # noqa: E731
    x = np.float32(0.3)
    r1 = run(["grad", "-"], str(jax.make_jaxpr(f)(x)))
    r2 = run(["grad", "-"], r1.stdout)
    assert r2.exit_code == 0, r2.output
    want = jax.jit(jax.grad(jax.grad(f)))(x)  # (eagerly: a compile per operation)
    close(backend.evaluate(parse(r2.stdout, "g").jaxpr, [x])[0], want)


def test_plugin_loading_errors(tmp_path):
    from jaxprtool.plugins import load_plugins

    bad = tmp_path / "bad_rules.py"
    bad.write_text("raise RuntimeError('boom')\n")
    with pytest.raises(JaxprError, match="cannot load plugin '.*bad_rules.py': RuntimeError: boom"):
        load_plugins([str(bad)])
    with pytest.raises(JaxprError, match="no such file"):
        load_plugins([str(tmp_path / "missing.py")])
    r = run(["--plugin", str(bad), "grad", "-"], SRC)
    assert r.exit_code == 1 and "cannot load plugin" in r.stderr


def test_diff_flag(tmp_path):
    """(Symbolic dims, once refused here, are transformed: tests/test_symbolic_ad.py.)"""
    prog = tmp_path / "f.jaxpr"
    prog.write_text(
        "{ lambda ; a:f32[3]. let b:f32[3] = sin a; c:f32[] = reduce_sum[axes=(0,) out_sharding=None] b in (c,) }\n"
    )
    r = CliRunner().invoke(main, ["--no-color", "grad", str(prog), "--diff=text"])
    assert r.exit_code == 0, r.output
    assert (
        "--- input" in r.output
        and "+++ result" in r.output
        and "+{ lambda ; a:f32[3]. let b:f32[3] = cos a in (b,) }" in r.output
    )


def test_transposing_a_split_linear_half_takes_its_residuals_first(tmp_path):
    """`linearize --split P L f; transpose L` failed with 'mul is not linear' (issue 45,
    item 21): the linear half takes its residuals first, so transpose takes the fewest
    leading inputs that make it linear as residuals, says so, and writes what
    `--residuals K` writes, K being the residuals linearize wrote (L's inputs less one
    tangent per input of f).  The transpose with --residuals is tested against JAX above."""
    from pathlib import Path

    f = Path(__file__).resolve().parents[1] / "samples" / "mlp.jaxpr"
    p, lin = tmp_path / "P.jaxpr", tmp_path / "L.jaxpr"
    r = CliRunner().invoke(main, ["linearize", "--split", str(p), str(lin), str(f)])
    assert r.exit_code == 0, r.output
    from jaxprtool.text.parser import parse

    n_in = len(parse(f.read_text(), str(f)).jaxpr.invars)
    k = len(parse(lin.read_text(), str(lin)).jaxpr.invars) - n_in
    r = CliRunner().invoke(main, ["--no-color", "transpose", str(lin)])
    assert r.exit_code == 0, r.output
    assert f"taking the first {k} as residuals" in r.stderr
    assert f"--residuals {k} says so" in r.stderr
    told = CliRunner().invoke(main, ["transpose", "--residuals", str(k), str(lin)])
    assert told.exit_code == 0 and told.stderr == "", told.output
    assert r.stdout == told.stdout


def test_transpose_of_a_program_no_prefix_makes_linear_is_refused():
    """Where no leading residuals make a program linear, the error is the checker's."""
    text = "{ lambda ; a:f32[3] b:f32[3]. let c:f32[3] = mul b b in (c,) }\n"
    r = CliRunner().invoke(main, ["--no-color", "transpose", "-"], input=text)
    assert r.exit_code == 1 and "not linear" in r.output, r.output


def test_the_two_reverse_routes_agree_on_an_integer_only_program():
    """vjp gave an integer-only program back as it was (the primals in, the outputs out),
    while `linearize | transpose` wrote `(i32[5], bool[5], 5 x float0[5]) -> ()` (issue 45,
    item 24).  The tool's one convention: an integer or boolean value carries no tangent
    and no cotangent (jax.vjp's pullback takes and gives float0 ones instead, checked
    below); both routes write the same program, whose outputs are f's, as JAX computes them."""
    from jaxprtool import api as jt
    from jaxprtool.core import alpha_equal

    def f(a, b):
        c = a + a
        d = jnp.where(b, a, c)
        e = c * d
        return c, d, e, -e, -e - a

    a, b = np.arange(5, dtype=np.int32), np.array([True, False, True, True, False])
    text = str(jax.make_jaxpr(f)(a, b))
    vjp_r = run(["vjp", "-"], text)
    lin = run(["linearize", "-"], text)
    tr = run(["transpose", "-"], lin.stdout)
    assert vjp_r.exit_code == lin.exit_code == tr.exit_code == 0, tr.output
    assert "float0" not in tr.stdout
    got_vjp, got_tr = parse(vjp_r.stdout).jaxpr, parse(tr.stdout).jaxpr
    assert alpha_equal(got_vjp, got_tr), (vjp_r.stdout, tr.stdout)
    assert [str(v.type) for v in got_tr.invars] == ["i32[5]", "bool[5]"]
    for got, want in zip(jt.run(got_tr, a, b), jax.jit(f)(a, b)):
        np.testing.assert_array_equal(got, want)
    # JAX's convention, documented beside the tool's (docs/TRANSFORMATIONS.md): the types of
    # the cotangents its pullback gives (traced: eagerly, JAX compiles each operation)

    def pulled(a, b):
        outs, pullback = jax.vjp(f, a, b)
        return pullback(tuple(np.zeros(o.shape, jax.dtypes.float0) for o in outs))

    cts = jax.eval_shape(pulled, a, b)
    assert [c.dtype for c in cts] == [jax.dtypes.float0] * 2
