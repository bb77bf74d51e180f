"""Forward mode and the AD machinery: Zero handling, instantiation, argnums, higher order,
call primitives (jit, checkpoint, custom_jvp with and without a plugin rule), error texts, and
the `jvp` / `linearize` commands.  JAX is the oracle."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax_oracle import close, ir, run, together, vec  # noqa: E402

from jaxprtool import backend  # noqa: E402
from jaxprtool.ad.api import jvp_jaxpr, jvp_jaxpr_info, linearize_combined, linearize_jaxpr  # noqa: E402
from jaxprtool.core import JaxprError  # noqa: E402
from jaxprtool.text.parser import parse  # noqa: E402
from jaxprtool.text.printer import print_jaxpr  # noqa: E402

X, Y, TX, TY = vec(4, 0), vec(4, 1, 0.5, 2.0), vec(4, 2), vec(4, 3)


def prims(j):
    return [e.prim for e in j.eqns]


# ---------------------------------------------------------------- zeros


def test_constant_subgraph_emits_no_tangent_equations():
    src = textwrap.dedent("""\
        { lambda ; a:f32[4]. let
            b:f32[] = cos 1.0:f32[]
            c:f32[] = exp b
            d:f32[4] = mul a c
          in (d,) }""")
    j = parse(src, "t").jaxpr
    jj = jvp_jaxpr(j)
    # primal: cos, exp, mul; tangent: one mul.  No sin (the derivative of cos), no second exp.
    assert prims(jj).count("cos") == 1 and prims(jj).count("exp") == 1
    assert "sin" not in prims(jj) and "neg" not in prims(jj)
    assert prims(jj).count("mul") == 2
    out = backend.evaluate(jj, [X, TX])
    close(out[1], TX * np.exp(np.cos(1.0)))


def test_argnums_restricts_tangents_and_zero_eqns_are_primal_only():
    def f(x, y):
        return jnp.sin(x) * jnp.exp(y)

    j = ir(f, X, Y)
    jj = jvp_jaxpr(j, argnums=[1])
    assert len(jj.invars) == 3  # x, y, ty
    assert "cos" not in prims(jj)  # sin x has a zero tangent: no rule ran
    out, ref = together(
        (jj, [X, Y, TY]), (lambda y, ty: jax.jvp(lambda y: f(X, y), (y,), (ty,)), [Y, TY])
    )
    close(out[0], ref[0])
    close(out[1], ref[1])


def test_instantiated_and_missing_zero_outputs():
    def f(x, y):
        return jnp.sin(x), y * 2.0, jnp.int32(3)

    j = ir(f, X, Y)
    jj, _, out_nz = jvp_jaxpr_info(j, argnums=[0])
    assert out_nz == [True, True, False]  # the int output has no tangent
    out = backend.evaluate(jj, [X, Y, TX])
    assert len(out) == 5
    close(out[3], np.cos(X) * TX)
    np.testing.assert_array_equal(out[4], np.zeros(4, np.float32))
    jn, _, out_nz = jvp_jaxpr_info(j, argnums=[0], instantiate=False)
    assert out_nz == [True, False, False] and len(jn.outvars) == 4


def test_int_inputs_take_no_tangent_and_cannot_be_named():
    def f(x, n):
        return x * n.astype(jnp.float32)

    n = np.arange(4, dtype=np.int32)
    j = ir(f, X, n)
    jj = jvp_jaxpr(j)
    assert len(jj.invars) == 3
    close(backend.evaluate(jj, [X, n, TX])[1], TX * n)
    with pytest.raises(
        JaxprError, match="input 1 has type i32\\[4\\]; only float and complex inputs"
    ):
        jvp_jaxpr(j, argnums=[1])


# ---------------------------------------------------------------- higher order


def test_jvp_of_jvp_matches_jax():
    def f(x):
        return jnp.sin(x) * x**3 + jnp.tanh(x)

    j = ir(f, X)
    jj = jvp_jaxpr(jvp_jaxpr(j))  # (x, t1, t2, t12) -> (y, dy, dy', d2y)
    out, ref = together(
        (jj, [X, TX, TY, np.zeros_like(X)]),
        (
            lambda *a: jax.jvp(lambda x, t: jax.jvp(f, (x,), (t,)), a[:2], a[2:]),
            [X, TX, TY, np.zeros_like(X)],
        ),
    )
    close(out[0], ref[0][0])
    close(out[1], ref[0][1])
    close(out[2], ref[1][0])
    close(out[3], ref[1][1])


# ---------------------------------------------------------------- calls


@jax.jit
def _inner(x, y):
    return jnp.sin(x) * y


def test_nested_jit_jvp_and_linearize():
    def f(x, y):
        return jax.jit(lambda a: _inner(a, y) * 2.0)(x) + y

    j = ir(f, X, Y)
    jj = jvp_jaxpr(j)
    assert "jit" in prims(jj)
    lc = linearize_combined(j)
    ref, out, out_lc = together(
        (lambda *a: jax.jvp(f, a[:2], a[2:]), [X, Y, TX, TY]),
        (jj, [X, Y, TX, TY]),
        (lc, [X, Y, TX, TY]),
    )
    close(out[0], ref[0])
    close(out[1], ref[1])
    close(out_lc[1], ref[1])


def test_checkpoint_jvp():
    def f(x, y):
        return jax.checkpoint(lambda a: jnp.sin(jnp.sin(a)) * y)(x)

    j = ir(f, X, Y)
    ref, out, out_lc = together(
        (lambda *a: jax.jvp(f, a[:2], a[2:]), [X, Y, TX, TY]),
        (jvp_jaxpr(j), [X, Y, TX, TY]),
        (linearize_combined(j), [X, Y, TX, TY]),
    )
    close(out[1], ref[1])
    primal, linear, info = linearize_jaxpr(j)
    # remat: the linear program recomputes sin(x); the only residuals are the inputs
    assert {r.source for r in info.residuals} == {"input"}
    close(out_lc[1], ref[1])


@jax.custom_jvp
def softplus2(x):
    return jnp.log1p(jnp.exp(x))


@softplus2.defjvp
def softplus2_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return softplus2(x), 2.0 * t * jax.nn.sigmoid(x)  # deliberately twice the true derivative


def test_custom_jvp_without_plugin_differentiates_the_body(capsys):
    j = ir(lambda x: softplus2(x) * 3.0, X)
    assert "custom_jvp_call" in prims(j)
    out = backend.evaluate(jvp_jaxpr(j), [X, TX])
    close(out[1], 3.0 * TX / (1 + np.exp(-X)))  # the body's derivative, not the custom rule


def test_custom_jvp_with_plugin_rule(tmp_path):
    from jaxprtool.ad.registry import custom_jvps
    from jaxprtool.plugins import load_plugins

    plugin = tmp_path / "sp_rules.py"
    plugin.write_text(
        textwrap.dedent("""\
        from jaxprtool.plugins import ops, register_custom_jvp

        def softplus2_jvp(primals, tangents):
            (x,), (t,) = primals, tangents
            return None, [ops.mul(ops.mul(ops.lit(2.0, t), t), ops.logistic(x))]

        register_custom_jvp("softplus2_jvp", softplus2_jvp)
        """)
    )
    try:
        load_plugins([str(plugin)])
        f = lambda x: softplus2(x) * 3.0  # noqa: E731
        j = ir(f, X)
        ref, out, out_lc = together(
            (lambda x, t: jax.jvp(f, (x,), (t,)), [X, TX]),
            (jvp_jaxpr(j), [X, TX]),
            (linearize_combined(j), [X, TX]),
        )
        close(out[0], ref[0])
        close(out[1], ref[1])  # JAX uses the custom rule too
        close(out_lc[1], ref[1])
    finally:
        custom_jvps.pop("softplus2_jvp", None)


# ---------------------------------------------------------------- errors


def test_missing_jvp_rule_is_located():
    src = "{ lambda ; a:f32[3]. let\n    b:f32[3] = sin a\n    c:f32[3] = frobnicate b\n  in (c,) }"
    try:
        j = parse(src, "f.jaxpr").jaxpr
    except JaxprError:
        pytest.skip("the parser rejects unknown primitives")
    with pytest.raises(JaxprError) as e:
        jvp_jaxpr(j)
    assert e.value.message == "Differentiation rule for 'frobnicate' not implemented"
    assert (e.value.loc.file, e.value.loc.line) == ("f.jaxpr", 3)
    r = run(["jvp", "-"], src)
    assert r.exit_code == 1
    assert (
        "f.jaxpr" not in r.output
        and "Differentiation rule for 'frobnicate' not implemented" in r.output
    )


# ---------------------------------------------------------------- commands


SRC = textwrap.dedent("""\
    { lambda ; a:f32[4] b:f32[4] n:i32[]. let
        c:f32[4] = sin a
        d:f32[4] = mul c b
        e:f32[] = reduce_sum[axes=(0,) out_sharding=None] d
      in (e, n, b) }
    """)


def test_jvp_command(tmp_path):
    p = tmp_path / "f.jaxpr"
    p.write_text(SRC)
    r = run(["jvp", "--argnums", "0", str(p)])
    assert r.exit_code == 0, r.output
    j = parse(r.stdout, "out").jaxpr
    assert len(j.invars) == 4 and len(j.outvars) == 5
    r = run(["jvp", "--argnums", "0", "--no-instantiate", str(p)])
    assert r.exit_code == 0
    assert len(parse(r.stdout, "out").jaxpr.outvars) == 4
    assert "no tangent output for outputs 1 (i32[]), 2 (f32[4])" in r.stderr
    r = run(["jvp", "--argnums", "2", str(p)])
    assert r.exit_code == 1 and "only float and complex inputs can be differentiated" in r.stderr
    r = run(["jvp", "--argnums", "x", str(p)])
    assert r.exit_code == 2
    out = tmp_path / "o.jaxpr"
    r = run(["jvp", str(p), "-o", str(out), "--opt", "none"])
    assert r.exit_code == 0 and r.stdout == "" and out.read_text().startswith("{ lambda")


def test_jvp_twice_through_the_cli():
    def f(x):
        return jnp.sum(jnp.exp(x) * x)

    text = str(jax.make_jaxpr(f)(X))
    r1 = run(["jvp", "-"], text)
    r2 = run(["jvp", "-"], r1.stdout)
    assert r2.exit_code == 0, r2.output
    j = parse(r2.stdout, "o").jaxpr
    args = [X, TX, TY, np.zeros_like(X)]
    out, ref = together(  # (one compile; eagerly, JAX compiles each operation)
        (j, args),
        (lambda x, t, a, b: jax.jvp(lambda x, t: jax.jvp(f, (x,), (t,)), (x, t), (a, b)), args),
    )
    close(out[3], ref[1][1])


def test_linearize_command_split_and_stats(tmp_path):
    p = tmp_path / "f.jaxpr"
    p.write_text(SRC)
    r = run(["linearize", "--stats", str(p)])
    assert r.exit_code == 0, r.output
    assert "jit[" in r.stdout and "name=linear" in r.stdout
    assert "residuals: 3 (48 bytes); 2 new primal outputs" in r.stderr
    assert "from 'cos' at " in r.stderr and "primal input 1" in r.stderr
    pp, lp = tmp_path / "p.jaxpr", tmp_path / "l.jaxpr"
    r = run(["linearize", "--split", str(pp), str(lp), str(p)])
    assert r.exit_code == 0, r.output
    primal = parse(pp.read_text(), "p").jaxpr
    linear = parse(lp.read_text(), "l").jaxpr
    assert len(primal.outvars) == 3 + 2  # outs + the new residuals cos(a), sin(a)
    assert len(linear.invars) == 3 + 2
    # the combined form runs with jvp's calling convention
    j = parse(r.stdout or run(["linearize", str(p)]).stdout, "c").jaxpr
    out = backend.evaluate(j, [X, Y, np.int32(2), TX, TY])
    close(out[3], np.sum(np.cos(X) * TX * Y + np.sin(X) * TY))


def test_combined_form_printout():
    j = parse(SRC, "f").jaxpr
    text = print_jaxpr(linearize_combined(j, argnums=[0]))
    assert "name=linear" in text


def test_older_styles_get_their_parameters(tmp_path):
    p = tmp_path / "f.jaxpr"
    p.write_text(SRC)
    r = run(["--jax-style", "0.4.35", "linearize", str(p)])
    assert r.exit_code == 0, r.output
    assert "pjit[" in r.stdout and "name=linear" in r.stdout
    assert "out_sharding" not in r.stdout
    r = run(["--jax-style", "0.6.2", "grad", "--has-aux", "--opt", "none", str(p)])
    assert r.exit_code == 0, r.output
    assert (
        "broadcast_in_dim[" in r.stdout and "shape=(4,)" in r.stdout and "sharding=None" in r.stdout
    )
    r2 = run(
        ["--jax-style", "0.6.2", "transpose", "-"],
        run(["--jax-style", "0.6.2", "linearize", str(p)]).stdout,
    )
    assert r2.exit_code == 0, r2.output
    got = backend.evaluate(
        parse(r2.stdout, "t").jaxpr, [X, Y, np.int32(1), np.float32(1.0), np.ones(4, np.float32)]
    )
    close(got[3], np.cos(X) * Y)
