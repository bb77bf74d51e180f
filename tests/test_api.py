"""The Python API (`jaxprtool/api.py`, re-exported as `jaxprtool.*`): every function checked
against JAX on the same function and inputs, its errors the CLI's, located (issue 27)."""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax_oracle import close, vec
from jax_oracle import run as cli

import jaxprtool as jt


def f(x, y):
    return jnp.sum(jnp.sin(x) * jnp.cos(y) + x * x)


X, Y = vec((3,), 0), vec((3,), 1)
TEXT = str(jax.make_jaxpr(f)(X, Y))
CT = np.float32(0.7)
TX, TY = vec((3,), 4), vec((3,), 5)
XS = vec((4, 3), 8)


@pytest.fixture
def prog():
    return jt.parse(TEXT, "f.jaxpr")


@pytest.fixture(scope="module")
def jax_s():
    """JAX's answers for f at (X, Y) that the tests compare with, jitted: one compilation
    (eagerly, one a primitive: 25 of them)."""

    def answers(x, y, ct, tx, ty, xs):
        y_, pullback = jax.vjp(f, x, y)
        return {
            "f": y_,
            "vjp": pullback(ct),
            "grad": jax.grad(f, argnums=(0, 1))(x, y),
            "jvp": jax.jvp(f, (x, y), (tx, ty))[1],
            "vmap": jax.vmap(f, in_axes=(0, None))(xs, y),
        }

    return jax.jit(answers)(X, Y, CT, TX, TY, XS)


def test_parse_and_format_give_back_jax_s_text(prog):
    assert jt.format(prog) == TEXT
    assert jt.parse(TEXT, check=False) is not None


def test_parse_errors_are_located():
    with pytest.raises(jt.JaxprError) as e:
        jt.parse("{ lambda ; a:f32[3]. let\n    b:f32[3] = sin\n  in (b,) }", "bad.jaxpr")
    assert e.value.loc is not None and e.value.loc.file == "bad.jaxpr"
    assert str(e.value).startswith(f"bad.jaxpr:{e.value.loc.line}:{e.value.loc.col}: error: ")


def test_check_error_carries_every_diagnostic():
    bad = "{ lambda ; a:f32[3]. let\n    b:f32[4] = sin a\n    c:f32[2] = cos a\n  in (b, c) }"
    with pytest.raises(jt.CheckError) as e:
        jt.parse(bad, "bad.jaxpr")
    assert (
        str(e.value)
        == "bad.jaxpr:2:5: error: sin: result type f32[4] does not match inferred f32[3]"
    )
    assert [(d.loc.line, d.loc.col) for d in e.value.diagnostics] == [(2, 5), (3, 5)]
    assert e.value.loc == jt.Loc("bad.jaxpr", 2, 5)


def test_warnings_are_python_warnings():
    text = "{ lambda ; a:f32[3]. let\n    b:f32[3] = my_prim a\n  in (b,) }"
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        j = jt.parse(text, "u.jaxpr")
    assert [w.category for w in seen] == [jt.JaxprWarning]
    assert str(seen[0].message).startswith("u.jaxpr:2:5: warning: unknown primitive 'my_prim'")
    assert j.jaxpr.eqns[0].prim == "my_prim" and j.path == "u.jaxpr"


def test_jvp_matches_jax(prog, jax_s):
    got = jt.run(jt.jvp(prog), X, Y, TX, TY)
    close(got[0], jax_s["f"])
    close(got[1], jax_s["jvp"])


def test_vjp_and_grad_match_jax(prog, jax_s):
    out = jt.run(jt.vjp(prog), X, Y, CT)
    close(out[0], jax_s["f"])
    for got, want in zip(out[1:], jax_s["vjp"]):
        close(got, want)
    (gx,) = jt.run(jt.grad(prog), X, Y)
    close(gx, jax_s["grad"][0])
    both = jt.run(jt.grad(prog, argnums=(0, 1), with_value=True), X, Y)
    close(both[0], jax_s["f"])
    for got, want in zip(both[1:], jax_s["grad"]):
        close(got, want)


def test_linearize_then_transpose_is_jax_s_vjp(prog, jax_s):
    lin = jt.linearize(prog)
    y, t = jt.run(lin, X, Y, TX, TY)
    close(y, jax_s["f"])
    close(t, jax_s["jvp"])
    out = jt.run(jt.transpose(lin), X, Y, np.float32(1.0))
    for got, want in zip(out[1:], jax_s["grad"]):
        close(got, want)
    primal, linear = jt.linearize(prog, split=True)
    assert len(primal.jaxpr.invars) == 2 and len(linear.jaxpr.outvars) == 1
    close(jt.run(primal, X, Y)[0], jax_s["f"])


def test_linear_program_passes_the_dot_product_test(prog):
    """At a fixed primal point, <ct, L(t)> == <T(ct), t> for linearize's program L and its
    transpose T."""
    lin = jt.linearize(prog)
    tx, ty, ct = vec((3,), 6), vec((3,), 7), np.float32(0.3)
    _, lt = jt.run(lin, X, Y, tx, ty)
    _, cx, cy = jt.run(jt.transpose(lin), X, Y, ct)
    close(float(ct * lt), float(np.dot(cx, tx) + np.dot(cy, ty)))


def test_vmap_matches_jax(prog, jax_s):
    batched = jt.vmap(prog, in_axes=(0, None), axis_size=4)
    (got,) = jt.run(batched, XS, Y)
    close(got, jax_s["vmap"])
    with pytest.raises(jt.JaxprError, match="vmap in_axes"):
        jt.vmap(prog, in_axes=(0, None, 0), axis_size=4)


def test_vmap_axis_name_binds_the_programs_collectives_as_jax_vmap():
    """A per-example program over a named axis 'i' (psum, axis_index): `axis_name` binds it
    to the batch axis, as jax.vmap(axis_name=...) and `jaxprtool vmap --axis-name` do."""

    def g(x):
        return x * jax.lax.axis_index("i") - jax.lax.psum(x, "i")

    text = str(jax.make_jaxpr(g, axis_env=[("i", 4)])(X))
    xs = vec((4, 3), 9)
    batched = jt.vmap(jt.parse(text), axis_size=4, axis_name="i")
    (got,) = jt.run(batched, xs)
    close(got, jax.jit(jax.vmap(g, axis_name="i"))(xs))  # (one compilation)


def test_run_passes_keep_the_numbers(prog, jax_s):
    opt = jt.run_passes(prog, "inline,simplify,cse,dce")
    close(jt.run(opt, X, Y)[0], jax_s["f"])
    assert jt.run_passes(prog, "none") is prog and jt.run_passes(prog, None) is prog
    with pytest.raises(jt.JaxprError, match="unknown pass 'nope'"):
        jt.run_passes(prog, "nope")


def test_the_api_prints_what_the_commands_print(tmp_path, prog):
    src = tmp_path / "f.jaxpr"
    src.write_text(TEXT + "\n")
    loaded = jt.load(str(src))
    for command, fn in (("grad", jt.grad), ("jvp", jt.jvp), ("vjp", jt.vjp)):
        r = cli([command, str(src)])
        assert r.exit_code == 0, r.output
        assert r.stdout == jt.format(fn(loaded)) + "\n", command
    r = cli(["compile", "--emit", "stablehlo", str(src)])
    assert r.exit_code == 0 and r.stdout == jt.to_stablehlo(loaded)
    assert "stablehlo.sine" in r.stdout and "stablehlo.cosine" in r.stdout


def test_run_errors_are_the_command_s(prog):
    with pytest.raises(jt.JaxprError) as e:
        jt.run(prog, X)
    assert e.value.message == "expected 2 arguments, got 1"
    with pytest.raises(jt.JaxprError) as e:
        jt.run(prog, X, vec((4,), 0))
    assert e.value.message == "argument 1 (b): expected f32[3], got f32[4]"
    # an error about the program as a whole is located where the CLI locates it
    text = "{ lambda ; a:f32[3]. let\n    b:f32[3] = sin a\n  in (b,) }"
    with pytest.raises(jt.JaxprError) as e:
        jt.grad(jt.parse(text, "v.jaxpr"))
    assert e.value.loc == jt.Loc("v.jaxpr", 3, 3)
    r = cli(["grad", "-"], stdin=text)
    assert r.exit_code == 1 and r.stderr.startswith(f"<stdin>:3:3: error: {e.value.message}\n")


def test_programs_keep_their_style_and_bare_jaxprs_are_taken():
    """A transformed program prints in its source's style (as the commands do), and a bare
    Jaxpr is accepted everywhere."""
    old = "{ lambda ; a:f32[3]. let b:f32[3] = sin a in (b,) }"
    p = jt.parse(old)
    g = jt.jvp(p)
    assert g.style == p.style and str(g) == jt.format(g)
    assert jt.format(jt.jvp(p.jaxpr)) == jt.format(g)
    with pytest.raises(TypeError, match="expected a jaxprtool Program or Jaxpr, got str"):
        jt.jvp(old)


def test_memory_peak_by_hand():
    """sin then cos of 1000 floats: the input (4000 B) lives throughout; the cos step holds
    a, b and c: 12000 B.  Its linearization holds cos a and sin b (the two derivatives'
    factors, 4000 B each) across the boundary."""
    p = jt.parse(
        "{ lambda ; a:f32[1000]. let\n    b:f32[1000] = sin a\n    c:f32[1000] = cos b\n  in (c,) }"
    )
    timeline, residuals = jt.memory(p)
    assert timeline.live_bytes == [8000, 12000] and timeline.peak_bytes == 12000
    assert residuals is None
    _, res = jt.memory(p, of="linearize")
    assert res is not None and res.total == 8000
    with pytest.raises(jt.JaxprError, match="memory of: expected one of"):
        jt.memory(p, of="hessian")


def test_api_names_survive_the_modules_of_the_same_name():
    import importlib

    importlib.import_module("jaxprtool.check")
    importlib.import_module("jaxprtool.memory")
    assert jt.check is jt.api.check and jt.memory is jt.api.memory
    from jaxprtool.memory import liveness  # the modules are still there by name

    assert callable(liveness)


def test_short_reprs_and_the_input_types():
    """repr of a program, a Timeline and Residuals: one short line each (the program's repr
    was the whole dataclass), and the inputs' types without reaching into `.jaxpr`
    (issue 39, item 17)."""
    import jaxprtool.api as api

    p = api.parse(
        "{ lambda ; a:f32[3] b:f32[]. let c:f32[3] = mul a b; d:f32[] = reduce_sum[axes=(0,) out_sharding=None] c in (d,) }"
    )
    assert repr(p) == "<Program <string>: (a:f32[3], b:f32[]) -> (f32[]), 2 equations>"
    assert [str(t) for t in p.input_types] == ["f32[3]", "f32[]"]
    assert [t.shape for t in p.input_types] == [(3,), ()]
    timeline, residuals = api.memory(p, of="grad")
    assert repr(timeline).startswith("<Timeline: ") and "peak" in repr(timeline)
    assert repr(residuals) == (
        f"<Residuals: {len(residuals.values)} value{'s' if len(residuals.values) != 1 else ''}, "
        f"{residuals.total} bytes held across the boundary at step {residuals.boundary}>"
    )
    assert issubclass(api.ProgramError, api.JaxprError) and "ProgramError" in api.__all__
