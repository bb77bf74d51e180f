"""`jaxprtool explain`: every stage shown, rule helpers named, values checked against jax.grad."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from jax_oracle import explain_walks

from jaxprtool.cli import main
from jaxprtool.text.parser import parse
from jaxprtool.ui.explain import HEADINGS, explain_data

SAMPLES = Path(__file__).resolve().parents[1] / "samples"

TWICE = """{ lambda ; a:f32[3]. let
    b:f32[3] = mul a a
    c:f32[] = reduce_sum[axes=(0,) out_sharding=None] b
  in (c,) }
"""

NEG = """{ lambda ; a:f32[3]. let
    b:f32[3] = sin a
    c:f32[3] = neg b
    d:f32[] = reduce_sum[axes=(0,) out_sharding=None] c
  in (d,) }
"""


def invoke(*args):
    return CliRunner().invoke(main, ["explain", *args])


def _mlp_args(seed=0):
    rng = np.random.default_rng(seed)
    shapes = [(4, 8), (8,), (8, 2), (2,), (5, 4), (5, 2)]
    return [rng.standard_normal(s).astype(np.float32) for s in shapes]


def _mlp_jax(a, b, c, d, e, f):
    import jax.numpy as jnp

    h = jnp.tanh(e @ a + b[None, :])
    m = h @ c + d[None, :]
    return jnp.sum((m - f) ** 2) / 10.0


def _mlp_program():
    """The mlp sample, named as the command names it (`explain` of `SAMPLES / mlp.jaxpr`):
    the programs a walk compiles are keyed by their content and file name
    (`backend.jit_cache`), so that the tests' walks and the commands' share them."""
    path = SAMPLES / "mlp.jaxpr"
    return parse(path.read_text(), str(path)).jaxpr


@pytest.fixture(scope="module")
def mlp_grad(tmp_path_factory):
    """`explain --mode grad` of the mlp sample at `_mlp_args()`: (the command's result, its
    walk, JAX's gradient, jitted: one compilation instead of one per operation)."""
    import jax

    args = _mlp_args()
    npz = tmp_path_factory.mktemp("mlp") / "in.npz"
    np.savez(npz, **{f"arg{i}": a for i, a in enumerate(args)})
    with explain_walks() as walks:
        r = invoke(str(SAMPLES / "mlp.jaxpr"), "--args", str(npz), "--mode", "grad", "--no-color")
    (data,) = walks
    expected = jax.jit(jax.grad(_mlp_jax, argnums=tuple(range(6))))(*args)
    return r, data, [np.asarray(g) for g in expected]


def test_sin_cos_stages_and_rules():
    # piped, rich's width is 80 columns; 120 keeps the residual notes on one line
    r = invoke(str(SAMPLES / "sin_cos.jaxpr"), "--no-color", "--mode", "vjp", "--width", "120")
    assert r.exit_code == 0, r.output
    out = r.output
    for n in (1, 2, 3, 4, 5):
        assert HEADINGS[n] in out
    assert out.index(HEADINGS[1]) < out.index(HEADINGS[2]) < out.index(HEADINGS[5])
    assert "c:f32[3] = sin a" in out  # the primal equations, printed as JAX does
    assert "rule: defjvp (sin)" in out
    assert "rule: defbilinear (mul)" in out
    assert "residuals" in out and "'cos' from the JVP rule of eqn 0" in out
    assert "pass" in out and "FAIL" not in out
    assert "\x1b[" not in out
    # the checks table, piped: plain aligned text (issue 27)
    lines = out.splitlines()
    at = lines.index("checks")
    first = "<w, FD(J v)> = <J^T w, v> (central differences, random v)"
    assert lines[at + 1] == "check".ljust(len(first)) + "  error     tolerance  result"
    assert re.fullmatch(re.escape(first) + r"  \d\.\d\de-\d\d  2e-03      pass", lines[at + 2])


def test_the_rule_kind_is_the_walks(monkeypatch):
    """The kind shown is what the walk reported: a rule no helper registered shows as
    `primitive_jvps`."""
    from jaxprtool.ad import registry

    monkeypatch.delitem(registry.rule_kind, "sin")
    r = invoke(str(SAMPLES / "sin_cos.jaxpr"), "--no-color", "--mode", "jvp")
    assert r.exit_code == 0, r.output
    assert "rule: primitive_jvps (sin)" in r.output and "rule: defjvp (cos)" in r.output


def test_mlp_grad_matches_jax(mlp_grad):
    r, data, expected = mlp_grad
    assert r.exit_code == 0, r.output
    assert "rule: defbilinear (dot_general)" in r.output
    assert "rule: defjvp2 (tanh)" in r.output
    assert "J^T w vs central finite differences" in r.output
    assert "result: all checks pass" in r.output

    assert data.passed and [c.passed for c in data.checks] == [True] * len(data.checks)
    assert data.residuals and all(r.value.array is not None for r in data.residuals)
    for got, want in zip(data.gradient, expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    # the printed summary of the gradient of d (2 elements) shows JAX's numbers
    d = expected[3]
    assert f"{d[0]:.4f}"[:-1] in r.output.replace(" ", "")


def test_values_asked_in_runs_of_bounded_bytes_are_the_same(monkeypatch, mlp_grad):
    """A walk's values are asked in programs of at most `checks.FILL_BYTES` of results each
    (the TPU's 16 GB did not hold the 8-layer transformer's 210 at once): with a bound of
    512 bytes the mlp's values come from five programs, and they are the values asked in
    one (the `explain` command's walk), with the gradient JAX's."""
    from jaxprtool.core import value_bytes
    from jaxprtool.ui.explain import checks

    _, whole, expected = mlp_grad
    groups: list = []
    by_bytes = checks._by_bytes
    monkeypatch.setattr(checks, "FILL_BYTES", 512)
    monkeypatch.setattr(
        checks, "_by_bytes", lambda outs: groups.extend(by_bytes(outs)) or by_bytes(outs)
    )
    split = explain_data(_mlp_program(), _mlp_args(), "grad")
    assert len(groups) > 3
    for g in groups:
        asked = sum(value_bytes(v.type) for v in g)
        assert asked <= 512 or len(g) == 1, (asked, len(g))
    assert split.passed and len(split.residuals) == len(whole.residuals)
    for a, b in zip(split.residuals, whole.residuals):
        np.testing.assert_allclose(a.value.array, b.value.array, rtol=1e-6, atol=1e-7)
    for got, want in zip(split.gradient, expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_sin_cos_vjp_and_jvp_match_jax():
    import jax
    import jax.numpy as jnp

    # (named as the commands name it: their compiled programs serve)
    path = SAMPLES / "sin_cos.jaxpr"
    jaxpr = parse(path.read_text(), str(path)).jaxpr
    rng = np.random.default_rng(1)
    a, b = (rng.standard_normal(3).astype(np.float32) for _ in range(2))

    def f(a, b):
        return jnp.sin(a) * jnp.cos(b) + a

    data = explain_data(jaxpr, [a, b], "vjp", seed=5)
    assert data.passed
    (w,) = [s.array for s in data.seeds]
    # JAX's answers jitted: one compilation each (eagerly, one an operation)
    want = jax.jit(lambda a, b, w: jax.vjp(f, a, b)[1](w))(a, b, w)
    for got, x in zip(data.gradient, want):
        np.testing.assert_allclose(got, np.asarray(x), rtol=1e-5, atol=1e-6)

    data = explain_data(jaxpr, [a, b], "jvp", seed=5)
    assert data.passed and data.stopped_in is None
    jv = jax.jit(lambda a, b, t: jax.jvp(f, (a, b), t)[1])(a, b, tuple(data.direction))
    np.testing.assert_allclose(data.derivative[0][1], np.asarray(jv), rtol=1e-5, atol=1e-6)


def test_value_used_twice_accumulates(tmp_path):
    import jax
    import jax.numpy as jnp

    p = tmp_path / "twice.jaxpr"
    p.write_text(TWICE)
    x = np.array([0.5, -1.0, 2.0], np.float32)
    np.savez(tmp_path / "x.npz", x)
    with explain_walks() as walks:
        r = invoke(str(p), "--no-color", "--args", str(tmp_path / "x.npz"))
    assert r.exit_code == 0, r.output
    assert "accumulation: ct[t_a] = add_any" in r.output
    assert "(t_a is used 2 times)" in r.output

    (data,) = walks  # (the command's walk: grad, the default for one scalar output)
    assert data.mode == "grad"
    accs = [a for s in data.reverse for a in s.accumulations]
    assert len(accs) == 1 and accs[0].uses == 2
    np.testing.assert_allclose(accs[0].result.array, 2 * x, rtol=1e-6)
    want = jax.jit(jax.grad(lambda a: jnp.sum(a * a)))(x)
    np.testing.assert_allclose(data.gradient[0], np.asarray(want), rtol=1e-6)


def test_single_elementwise_analytic(tmp_path):
    p = tmp_path / "sin.jaxpr"
    p.write_text("{ lambda ; a:f32[4]. let b:f32[4] = sin a in (b,) }\n")
    for mode in ("jvp", "vjp"):
        r = invoke(str(p), "--no-color", "--mode", mode)
        assert r.exit_code == 0, r.output
        assert "analytic formula: d sin(x)/dx = cos(x)" in r.output
        assert "FAIL" not in r.output


def test_a_single_equation_without_results_has_no_analytic_check(tmp_path):
    """One equation that has no results (a debug_print) beside the program's output: no
    analytic formula applies, and explain says so (it indexed the missing result)."""
    p = tmp_path / "print.jaxpr"
    p.write_text(
        "{ lambda ; a:f32[2]. let\n"
        "    debug_print[fmt=x={} has_placeholders=True in_tree=PyTreeDef(((*,), {})) "
        "logging_record=None np_printoptions=(('edgeitems', 3), ('threshold', 1000), "
        "('floatmode', 'maxprec'), ('precision', 8), ('suppress', False), ('linewidth', 75), "
        "('nanstr', 'nan'), ('infstr', 'inf'), ('sign', '-'), ('formatter', None), "
        "('legacy', False), ('override_repr', None)) ordered=False partitioned=False "
        "static_args=()] a\n"
        "  in (a,) }\n"
    )
    r = invoke(str(p), "--no-color", "--mode", "vjp")
    assert r.exit_code == 0, r.output
    assert "no analytic formula: the program is not a single elementwise primitive" in r.output
    assert "internal error" not in r.output


def test_html(tmp_path):
    out = tmp_path / "walk.html"
    r = invoke(str(SAMPLES / "sin_cos.jaxpr"), "--html", str(out))
    assert r.exit_code == 0, r.output
    page = out.read_text()
    assert "<html" in page and "<title>jaxprtool explain sin_cos.jaxpr</title>" in page
    for n in (1, 2, 3, 4, 5):
        assert HEADINGS[n] in page
    assert "defbilinear" in page
    assert not list(tmp_path.glob(".jaxprtool-*"))  # written atomically, no temp file left
    assert r.stdout == ""  # the page alone, as `graph -o` (issue 39, item 2)


def test_piped_output_never_wraps():
    """Piped, no line of the walk is cut at rich's 80 columns (the README: piped output never
    wraps); the same lines as at 400 columns, but for the headings' rules (issue 39, 2)."""

    def lines(*width):
        r = invoke(str(SAMPLES / "sin_cos.jaxpr"), "--no-color", "--mode", "vjp", *width)
        assert r.exit_code == 0, r.output
        return [ln.rstrip() for ln in r.stdout.splitlines() if "──" not in ln]

    piped = lines()
    assert max(map(len, piped)) > 80
    assert piped == lines("--width", "400")


def test_missing_transpose_stops_the_walk(tmp_path, monkeypatch):
    from jaxprtool.ad import registry

    monkeypatch.delitem(registry.primitive_transposes, "neg")
    p = tmp_path / "neg.jaxpr"
    p.write_text(NEG)
    r = invoke(str(p), "--no-color")
    assert r.exit_code == 1, r.output
    out = r.output
    msg = "Transpose rule (for reverse-mode differentiation) for 'neg' not implemented"
    assert msg in out
    assert HEADINGS[4] in out and HEADINGS[5] not in out
    # the walk went through reduce_sum (transposed first) and stops at neg, with its location
    assert out.index("= reduce_sum") < out.index("walk stops here") < out.rindex(msg)
    assert f"{p}:3:5" in out


def test_missing_jvp_stops_forward(tmp_path, monkeypatch):
    from jaxprtool.ad import registry

    monkeypatch.delitem(registry.primitive_jvps, "sin")
    r = invoke(str(SAMPLES / "sin_cos.jaxpr"), "--no-color")
    assert r.exit_code == 1, r.output
    assert "Differentiation rule for 'sin' not implemented" in r.output
    assert HEADINGS[2] in r.output and HEADINGS[3] not in r.output


def test_bad_usage(tmp_path):
    r = invoke(str(SAMPLES / "sin_cos.jaxpr"), "--mode", "grad")
    assert r.exit_code == 1 and "Gradient only defined for scalar-output" in r.output
    r = invoke(str(SAMPLES / "sin_cos.jaxpr"), "--mode", "sideways")
    assert r.exit_code == 2


@pytest.mark.slow  # (make test-full; test_consts_order.py's test_explain_takes_the_constants_
# of_cond_and_loop_bodies[some] keeps explain's grad walk through a cond (its switch) to the
# last stage, all checks passing, test_installed_jax.py's test_explain_and_memory[cond] a
# cond's grad walk, test_program_shown_is_the_one_the_command_builds[rnn.jaxpr-vjp] rnn's
# walk to the last stage)
@pytest.mark.parametrize("sample", ["cond.jaxpr", "rnn.jaxpr"])
def test_other_samples_run(sample):
    r = invoke(str(SAMPLES / sample), "--no-color")
    assert r.exit_code == 0, r.output
    assert HEADINGS[5] in r.output


def test_colour_rendering_keeps_program_text(mlp_grad):
    """On a terminal: escape codes, and `prim[params]` is never read as rich markup.  (The
    grad walk of `mlp_grad`: explain's vjp walk of the mlp compiles 30 programs, its grad
    walk 5.)"""
    import io

    from rich.console import Console

    from jaxprtool.ui.explain import render

    buf = io.StringIO()
    render(mlp_grad[1], Console(file=buf, force_terminal=True, color_system="truecolor", width=200))
    out = buf.getvalue()
    assert "\x1b[" in out
    assert "dot_general[dimension_numbers=(([1], [0]), ([], []))" in out
    assert "broadcast_in_dim[broadcast_dimensions=(1,)]" in out


def test_failing_rule_is_where_the_walk_stops(monkeypatch):
    from jaxprtool.ad import registry

    def broken(primals, tangents, **params):
        raise ValueError("boom")

    monkeypatch.setitem(registry.primitive_jvps, "cos", broken)
    r = invoke(str(SAMPLES / "sin_cos.jaxpr"), "--no-color")
    assert r.exit_code == 1, r.output
    assert "rule: defjvp (sin)" in r.output  # eqn 0 went through
    assert "the JVP rule of 'cos' failed: ValueError: boom" in r.output
    assert "sin_cos.jaxpr:3:5" in r.output
    assert "internal error" not in r.output


def _program_block(out: str) -> str:
    """The program explain's last stage prints (indented by 2, ended by a blank line)."""
    lines = out.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("the program the walks built"))
    block = []
    for ln in lines[start + 1 :]:
        if not ln.strip():
            break
        block.append(ln[2:])
    return "\n".join(block) + "\n"


@pytest.mark.parametrize(
    "sample,mode",
    [
        ("sin_cos.jaxpr", "vjp"),
        ("sin_cos.jaxpr", "jvp"),
        ("mlp.jaxpr", "grad"),
        ("cond.jaxpr", "grad"),
        ("rnn.jaxpr", "vjp"),
    ],
)
def test_program_shown_is_the_one_the_command_builds(sample, mode):
    """The last stage shows the program the observed walks built: `jaxprtool MODE --opt none`
    prints the same program (up to names)."""
    from jaxprtool.core import alpha_equal

    path = str(SAMPLES / sample)
    r = invoke(path, "--no-color", "--mode", mode, "--width", "400")  # no line wrapped
    assert r.exit_code == 0, r.output
    shown = parse(_program_block(r.output), "shown").jaxpr
    jaxpr = parse((SAMPLES / sample).read_text(), sample).jaxpr
    argnums = ",".join(str(i) for i, v in enumerate(jaxpr.invars) if v.type.dtype[0] in "fc")
    assert f"`jaxprtool {mode} --argnums {argnums} --opt none`" in r.output
    cli = CliRunner().invoke(main, [mode, path, "--argnums", argnums, "--opt", "none"])
    assert cli.exit_code == 0, cli.output
    assert alpha_equal(shown, parse(cli.output, "cli").jaxpr)


def _outs(eqns) -> set[int]:
    return {id(o) for e in eqns for o in e.outputs}


def _constant(e) -> bool:
    from jaxprtool.core import Var

    return not any(isinstance(x, Var) for x in e.inputs)


@pytest.mark.parametrize("mode", ["grad", "jvp"])
def test_steps_are_the_walks_that_built_the_program(mode, request):
    """The equations the steps show are the ones the walks emitted into the program shown:
    every equation of the program comes from a recorded step (or is the primal program
    inlined, or an instantiated zero).  (The reverse walk: `mlp_grad`'s, the command's
    grad walk; its vjp walk compiles 30 programs, the grad walk 5.)"""
    jaxpr = _mlp_program()
    data = (
        request.getfixturevalue("mlp_grad")[1]
        if mode == "grad"
        else explain_data(jaxpr, _mlp_args(), mode)
    )
    assert data.passed and data.program is not None
    rec = next(k for k in data.keep if hasattr(k, "reverse_program"))
    assert len(data.forward) == len(jaxpr.eqns)
    fwd = rec.forward_program()[2]
    assert sum(len(s.primal_side) + len(s.tangent_eqns) for s in data.forward) <= len(fwd)
    if mode == "jvp":
        ids = {id(e) for e in fwd}
        assert all(id(e) in ids or _constant(e) for e in data.program.eqns)
        return
    # linearize: the primal and linear programs are made of the forward walk's equations
    made = _outs(fwd)
    assert _outs(rec.primal.eqns) <= made
    assert all(
        id(e.outputs[0]) in made or e.prim in ("broadcast_in_dim", "mul") for e in rec.linear.eqns
    )
    # vjp: the program is the primal program inlined, then the reverse walk's equations
    rev = rec.reverse_program()[2]
    assert sum(len(s.eqns) for s in data.reverse) == len(rev) - len(
        [e for e in rec.linear.eqns if id(e) in rec._forward_ids]
    )
    known = _outs(rev) | _outs(rec.primal.eqns)
    assert all(_outs([e]) <= known or _constant(e) for e in data.program.eqns)


CUSTOM = """{ lambda ; a:f32[3]. let
    b:f32[3] = custom_jvp_call[
      name=mysin
      call_jaxpr={ lambda ; c:f32[3]. let d:f32[3] = sin c in (d,) }
      jvp=mysin_jvp
      symbolic_zeros=False
    ] a
    e:f32[] = reduce_sum[axes=(0,) out_sharding=None] b
  in (e,) }
"""


def test_custom_rule_fallback_is_reported(tmp_path):
    p = tmp_path / "custom.jaxpr"
    p.write_text(CUSTOM)
    with explain_walks() as walks:
        r = invoke(str(p), "--no-color", "--width", "200")
    assert r.exit_code == 0, r.output
    note = "custom_jvp_call 'mysin' (jvp=mysin_jvp): custom rule replaced by the derivative"
    assert f"fallback: {note}" in r.output  # at the step
    assert "differentiated by a fallback or a plugin rule:" in r.output
    assert f"eqn 0 (custom_jvp_call): {note}" in r.output  # and in the summary

    (data,) = walks  # (the command's walk)
    assert (
        data.mode == "grad"
        and data.passed
        and [w for w, _ in data.fallbacks] == ["eqn 0 (custom_jvp_call)"]
    )
    assert data.forward[0].fallbacks and not data.forward[1].fallbacks


def test_custom_rules_strict_stops_the_walk(tmp_path):
    p = tmp_path / "custom.jaxpr"
    p.write_text(CUSTOM)
    try:
        r = invoke(str(p), "--no-color", "--custom-rules", "strict")
        assert r.exit_code == 1, r.output
        assert "walk stops here" in r.output and "does not contain it" in r.output
        assert HEADINGS[2] in r.output and HEADINGS[3] not in r.output
        assert f"{p}:2:5" in r.output
        r = invoke(str(p), "--no-color", "--custom-rules", "sideways")
        assert r.exit_code == 2
    finally:
        from jaxprtool.ad.registry import set_custom_rule_policy

        set_custom_rule_policy("default")


def test_plugin_rule_is_reported(tmp_path):
    plugin = tmp_path / "softsign_explain_rules.py"
    plugin.write_text(
        "from jaxprtool.plugins import defjvp, ops, register_impl, register_shape_rule\n"
        "register_shape_rule('softsign_x', lambda in_types, params, out_hint: [in_types[0]])\n"
        "def impl(x, **params):\n"
        "    import jax.numpy as jnp\n"
        "    return x / (1 + jnp.abs(x))\n"
        "register_impl('softsign_x', impl)\n"
        "defjvp('softsign_x', lambda g, x, **p: ops.div(g, ops.square("
        "ops.add(ops.lit(1.0, x), ops.abs(x)))))\n"
    )
    p = tmp_path / "f.jaxpr"
    p.write_text(NEG.replace("sin", "softsign_x"))
    r = CliRunner().invoke(
        main, ["--plugin", str(plugin), "explain", str(p), "--no-color", "--width", "200"]
    )
    assert r.exit_code == 0, r.output
    assert f"fallback: JVP rule of 'softsign_x' from plugin {plugin}" in r.output
    assert f"eqn 0 (softsign_x): JVP rule of 'softsign_x' from plugin {plugin}" in r.output


def test_plugin_rule_in_a_nested_equation_is_reported_at_the_call(tmp_path):
    """The walk nested in jit's rule uses the plugin's rule: the jit step says so."""
    plugin = tmp_path / "softsign_nested_rules.py"
    plugin.write_text(
        "from jaxprtool.plugins import defjvp, ops, register_impl, register_shape_rule\n"
        "register_shape_rule('softsign_y', lambda in_types, params, out_hint: [in_types[0]])\n"
        "def impl(x, **params):\n"
        "    import jax.numpy as jnp\n"
        "    return x / (1 + jnp.abs(x))\n"
        "register_impl('softsign_y', impl)\n"
        "defjvp('softsign_y', lambda g, x, **p: ops.div(g, ops.square("
        "ops.add(ops.lit(1.0, x), ops.abs(x)))))\n"
    )
    p = tmp_path / "f.jaxpr"
    p.write_text(
        "{ lambda ; a:f32[3]. let\n"
        "    b:f32[3] = jit[\n"
        "      jaxpr={ lambda ; c:f32[3]. let d:f32[3] = softsign_y c in (d,) }\n"
        "      name=inner\n"
        "    ] a\n"
        "    e:f32[] = reduce_sum[axes=(0,) out_sharding=None] b\n"
        "  in (e,) }\n"
    )
    r = CliRunner().invoke(
        main, ["--plugin", str(plugin), "explain", str(p), "--no-color", "--width", "200"]
    )
    assert r.exit_code == 0, r.output
    note = f"JVP rule of 'softsign_y' from plugin {plugin} (in a nested equation)"
    assert f"eqn 0 (jit): {note}" in r.output
    assert "eqn 1 (reduce_sum)" not in r.output  # only the step whose walk used it
