"""`jaxprtool memory` and the liveness library (jaxprtool/memory.py).

Expected peaks are worked out by hand from each program (bytes = elements * 4 for f32); the
residuals are compared with the ones JAX keeps (`jax.vjp`'s residual leaves, which
`jax.ad_checkpoint.print_saved_residuals` lists); XLA's figures with memory_analysis() called
here on JAX's own jit of the same function."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from click.testing import CliRunner
from conftest import JAX_VERSION
from jax import lax

from jaxprtool.ad.api import grad_jaxpr, linearize_combined, vjp_jaxpr
from jaxprtool.cli import main
from jaxprtool.memory import liveness, residual_bytes
from jaxprtool.text.parser import parse


def cli(*args, **kw):
    return CliRunner().invoke(main, ["--no-color", *args], **kw)


def read(text: str):
    return parse(text, "t.jaxpr").jaxpr


def traced(fn, *args):
    """The tool's reading of the text JAX prints for fn."""
    return read(str(jax.make_jaxpr(fn)(*args)))


F4 = 16  # bytes of an f32[4]

SIMPLE = """{ lambda ; a:f32[4] b:f32[4]. let
    c:f32[4] = sin a
    d:f32[4] = mul c b
    e:f32[] = reduce_sum[axes=(0,) out_sharding=None] d
  in (e,) }
"""


def test_straight_line_peak_by_hand():
    t = liveness(read(SIMPLE))
    # inputs a, b (32) live throughout; step 0 adds c (16); step 1 adds d while c is still
    # read: 64; c dies; step 2 adds e (4) while d is read: 32 + 16 + 4
    assert t.live_bytes == [2 * F4 + F4, 2 * F4 + 2 * F4, 2 * F4 + F4 + 4]
    assert t.peak_bytes == 64 and t.peak_index == 1
    assert t.peak_eqn.prim == "mul" and tuple(t.peak_eqn.loc)[1:] == (3, 5)
    assert sorted(v.nbytes for v in t.peak_values) == [F4] * 4
    made_by = {v.eqn.prim for v in t.peak_values if v.eqn is not None}
    assert made_by == {"sin", "mul"}
    assert t.input_bytes == 32 and t.boundary is None


CALL = """{ lambda ; a:f32[4]. let
    b:f32[4] = jit[
      name=f
      jaxpr={ lambda ; c:f32[4]. let
          d:f32[4] = sin c
          e:f32[4] = cos d
        in (e,) }
    ] a
    f:f32[4] = neg b
  in (f,) }
"""


def test_call_body_is_inlined():
    t = liveness(read(CALL))
    # steps: sin, cos (the body, inlined), neg.  a (16) throughout; sin: +d; cos: +e, d dies;
    # neg: +f, b (= e, the same buffer) dies
    assert [e.prim for e in t.eqns] == ["sin", "cos", "neg"]
    assert t.live_bytes == [2 * F4, 3 * F4, 3 * F4]


COND = """{ lambda ; a:i32[] b:f32[4]. let
    c:f32[4] = cond[
      branches=(
        { lambda ; d:f32[4]. let e:f32[4] = neg d in (e,) }
        { lambda ; f:f32[4]. let
            g:f32[4] = sin f
            h:f32[4] = cos f
            i:f32[4] = mul g h
          in (i,) }
      )
    ] a b
  in (c,) }
"""


def test_cond_holds_its_larger_branch():
    t = liveness(read(COND))
    # a (4) and b (16) live, the result c (16), and inside: branch 0 peaks at e (16), branch 1
    # at its mul step: g, h and i (48)
    assert t.live_bytes == [4 + F4 + F4 + 3 * F4]
    inside = [v for v in t.peak_values if v.kind == "inside"]
    assert [v.nbytes for v in inside] == [3 * F4] and t.inside == [3 * F4]


def _scan_fn(c, xs):
    def body(c, x):
        y = jnp.sin(x) * c
        return c + y, c * x

    c2, ys = lax.scan(body, c, xs)
    return jnp.sum(c2) + jnp.sum(ys)


SCAN_ARGS = (np.ones(8, np.float32), np.ones((5, 8), np.float32))


def test_scan_one_iteration_and_stacked_outputs():
    j = traced(_scan_fn, *SCAN_ARGS)
    t = liveness(j)
    assert t.eqns[0].prim == "scan"
    # inputs c (32) and xs (160) throughout; the scan's results: the carry (32) and the
    # stacked ys (5 * 32 = 160), counted from the loop's start; one iteration of the body
    # (g = sin x; h = g * c, g dies; i = c + h, h dies; j = c * x with i kept as the new
    # carry: never more than two f32[8] at once, 64)
    assert t.live_bytes[0] == 32 + 160 + 32 + 160 + 64


def test_while_holds_its_larger_jaxpr():
    def f(x):
        return lax.while_loop(
            lambda c: c[0] < 3, lambda c: (c[0] + 1, jnp.sin(c[1]) * c[1]), (0, x)
        )[1]

    t = liveness(traced(f, np.ones(4, np.float32)))
    # a (16); the results, the counter (4, unused but made) and the value (16); inside: the
    # body at its mul holds e (4), f (16) and g (16); the condition only a bool (1)
    assert t.live_bytes == [16 + 4 + 16 + (4 + 16 + 16)]


def _remat_fn(x):
    return jnp.sum(jax.checkpoint(lambda y: jnp.sin(jnp.sin(y)))(x))


def _jax_residuals(fn, *args) -> list:
    """What JAX's vjp of fn keeps, as zero arrays of its residuals' types: traced, not run
    (eagerly, JAX compiles each operation)."""
    leaves = jax.eval_shape(lambda *a: jax.tree_util.tree_leaves(jax.vjp(fn, *a)[1]), *args)
    return [np.zeros(leaf.shape, leaf.dtype) for leaf in leaves]


def test_residuals_match_jax_vjp():
    def f(x, w):
        return jnp.sum(jnp.sin(x @ w))

    def g(x, w):
        return jnp.sum(jnp.tanh(x @ w) * x[:, :1])

    x, w = np.ones((5, 4), np.float32), np.ones((4, 3), np.float32)
    cases = [
        (f, (x, w)),
        (g, (x, w)),
        (_scan_fn, SCAN_ARGS),
        (_remat_fn, (np.ones(4, np.float32),)),
    ]
    for fn, args in cases:
        jax_saved = sorted(leaf.nbytes for leaf in _jax_residuals(fn, *args))
        lin = linearize_combined(traced(fn, *args))
        r = residual_bytes(lin)
        assert sorted(v.nbytes for v in r.values) == jax_saved, fn.__name__
        assert r.total == sum(jax_saved)


def test_sharded_values_count_their_global_bytes(explicit_mesh):
    """A value of type `f32[8@x,4]` holds 8*4 floats over the mesh, as JAX's `nbytes` of
    the sharded array counts them (it once counted 0, as a symbolic dim does)."""
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = explicit_mesh("x=2")
    x = jax.device_put(np.linspace(0.5, 1.5, 32, dtype=np.float32).reshape(8, 4),
                       NamedSharding(mesh, P("x")))  # fmt: skip

    def f(x):
        return jnp.sum(jnp.sin(x) * jnp.tanh(x))

    _, vjp_fn = jax.vjp(f, x)
    jax_saved = sorted(leaf.nbytes for leaf in jax.tree_util.tree_leaves(vjp_fn))
    j = traced(f, x)
    assert str(j.invars[0].type) == "f32[8@x,4]"
    r = residual_bytes(linearize_combined(j))
    assert sorted(v.nbytes for v in r.values) == jax_saved
    t = liveness(j)
    assert not t.symbolic and t.input_bytes == x.nbytes


def test_residuals_of_flat_vjp_and_grad_programs():
    def f(x, w):
        return jnp.sum(jnp.sin(x @ w))

    x, w = np.ones((5, 4), np.float32), np.ones((4, 3), np.float32)
    _, vjp_fn = jax.vjp(f, x, w)
    jax_saved = sum(leaf.nbytes for leaf in jax.tree_util.tree_leaves(vjp_fn))
    j = traced(f, x, w)
    for build in (vjp_jaxpr, lambda p, boundary: grad_jaxpr(p, (0, 1), boundary=boundary)):
        b: list[int] = []
        program = build(j, boundary=b)
        assert residual_bytes(program, b[0]).total == jax_saved
        assert liveness(program, b[0]).boundary == b[0]


def test_linearize_form_boundary_is_the_linear_call():
    lin = linearize_combined(read(SIMPLE))
    t = liveness(lin)
    k = next(i for i, e in enumerate(lin.eqns) if e.params.get("name") == "linear")
    assert t.boundary == k  # the primal equations before it are one step each
    with pytest.raises(Exception, match="no forward/backward boundary"):
        residual_bytes(read(SIMPLE))


def test_xla_figures_equal_memory_analysis(tmp_path):
    def f(x, w):
        return jnp.sum(jnp.tanh(x @ w))

    args = (np.ones((64, 32), np.float32), np.ones((32, 16), np.float32))
    p = tmp_path / "f.jaxpr"
    p.write_text(str(jax.make_jaxpr(f)(*args)))
    r = cli("memory", str(p), "--json")
    assert r.exit_code == 0, r.output
    got = json.loads(r.output)["xla"]
    mem = jax.jit(f).lower(*args).compile().memory_analysis()
    assert got["temp_bytes"] == mem.temp_size_in_bytes
    assert got["argument_bytes"] == mem.argument_size_in_bytes
    assert got["output_bytes"] == mem.output_size_in_bytes
    assert got["alias_bytes"] == mem.alias_size_in_bytes
    assert got["device"] == "cpu" and got["devices"] == 1


def test_json_keys_and_text(tmp_path):
    p = tmp_path / "s.jaxpr"
    p.write_text(SIMPLE)
    r = cli("memory", str(p), "--json", "--no-xla", "--of", "linearize")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    for key in ("peak_bytes", "peak_at", "residual_bytes", "xla", "timeline"):
        assert key in d
    assert d["xla"] is None and d["peak_bytes"] == max(d["timeline"])
    # the tangent of d = c * b is dc * b + c * db, with dc = cos(a) * da: cos a, b and c
    assert d["residual_bytes"] == 3 * F4
    assert d["peak_at"]["loc"].startswith(str(p))
    text = cli("memory", str(p), "--no-xla")
    assert text.exit_code == 0 and "peak: 64 bytes" in text.output
    assert "^ peak (step 1)" in text.output


@pytest.mark.parametrize("steps", [0, 1, 3])
def test_json_is_what_json_dumps_writes(tmp_path, steps):
    # --json joins the timeline itself (json's indenting encoder is slow for 1M steps):
    # the text is byte for byte json.dumps(report, indent=1)
    from jaxprtool.ui import memory as ui

    eqns = "".join(f"    {chr(99 + i)}:f32[4] = sin {chr(98 + i)}\n" for i in range(steps))
    text = "{ lambda ; a:f32[4] b:f32[4]. let\n" + eqns + f"  in ({chr(98 + steps)},) }}\n"
    p = tmp_path / "s.jaxpr"
    p.write_text(text)
    r = cli("memory", str(p), "--json", "--no-xla", "--of", "vjp")
    assert r.exit_code == 0, r.output
    report = json.loads(r.output)
    assert len(report["timeline"]) == report["steps"] and report["residuals"] is not None
    assert r.output == json.dumps(report, indent=1) + "\n"
    assert ui.to_json(report) == json.dumps(report, indent=1)
    reordered = {"timeline": report["timeline"], **report}
    assert ui.to_json(reordered) == json.dumps(reordered, indent=1)


def test_plot_svg_valid_and_deterministic(tmp_path):
    pytest.importorskip("matplotlib", reason="memory --plot draws with matplotlib (the plot extra)")
    p = tmp_path / "s.jaxpr"
    p.write_text(SIMPLE)
    outs = []
    for k in range(2):
        svg = tmp_path / f"t{k}.svg"
        r = cli("memory", str(p), "--no-xla", "--of", "grad", "--plot", str(svg))
        assert r.exit_code == 0, r.output
        root = ET.fromstring(svg.read_bytes())
        assert root.tag.endswith("svg")
        outs.append(svg.read_bytes())
    assert outs[0] == outs[1]
    png = tmp_path / "t.png"
    assert cli("memory", str(p), "--no-xla", "--plot", str(png)).exit_code == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_errors(tmp_path):
    p = tmp_path / "s.jaxpr"
    p.write_text(SIMPLE)
    r = cli("memory", str(p), "--no-xla", "--plot", str(tmp_path / "x.gif"))
    assert r.exit_code == 2 and "unknown image format" in r.output
    bad = tmp_path / "bad.jaxpr"
    bad.write_text(SIMPLE.replace("mul c b", "mul c zz"))
    r = cli("memory", str(bad), "--no-xla")
    assert r.exit_code == 1 and "Traceback" not in r.output


@pytest.mark.skipif(len(jax.devices("cpu")) < 4, reason="needs 4 host CPU devices (conftest)")
def test_sharded_program_per_device(tmp_path):
    from jax.sharding import PartitionSpec as P

    mesh = jax.make_mesh((4,), ("x",), axis_types=(jax.sharding.AxisType.Auto,))
    f = jax.shard_map(
        lambda a: jnp.sum(jnp.sin(a) * 2, keepdims=True),
        mesh=mesh,
        in_specs=P("x"),
        out_specs=P("x"),
    )
    x = np.ones((64, 32), np.float32)
    p = tmp_path / "sm.jaxpr"
    p.write_text(str(jax.make_jaxpr(f)(x)))
    r = cli("memory", str(p), "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    # a (64*32*4 = 8192) and the result (4 * 1 * 4 = 16), and the body on each of the 4
    # devices: its shard f32[16,32] is 2048 bytes; the body peaks at its mul (sin's result,
    # the scalar 2.0 and the product: 2048 + 4 + 2048)
    assert d["peak_bytes"] == 8192 + 16 + 4 * (2048 + 4 + 2048)
    mem = jax.jit(f).lower(x).compile().memory_analysis()
    xla = d["xla"]
    assert xla["per_device"] and xla["devices"] == 4
    assert xla["temp_bytes"] == mem.temp_size_in_bytes
    assert xla["argument_bytes"] == mem.argument_size_in_bytes
    assert xla["output_bytes"] == mem.output_size_in_bytes


def _block(wq, wk, wv, w1, w2, x):
    """A pre-norm attention + gelu MLP block (layer norm, softmax, tanh-gelu), summed."""

    def norm(h):
        mu = h.mean(-1, keepdims=True)
        return (h - mu) * lax.rsqrt(((h - mu) ** 2).mean(-1, keepdims=True) + 1e-5)

    h = norm(x)
    a = jax.nn.softmax((h @ wq) @ (h @ wk).T / 4.0, axis=-1) @ (h @ wv)
    x = x + a
    return jnp.sum((x + jax.nn.gelu(norm(x) @ w1) @ w2) ** 2)


def test_residuals_of_a_transformer_block_match_jax_but_its_literals():
    rng = np.random.default_rng(0)
    shapes = [(16, 16), (16, 16), (16, 16), (16, 32), (32, 16), (6, 16)]
    args = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    leaves = _jax_residuals(_block, *args)
    lin = linearize_combined(traced(_block, *args))
    tool_saved = [v.nbytes for v in residual_bytes(lin).values]
    # JAX also keeps f32[] scalars (print_saved_residuals: "from a literal") that the tool's
    # linear program holds as literals; every array residual is the same
    jax_saved = sorted(leaf.nbytes for leaf in leaves if leaf.ndim > 0)
    if JAX_VERSION < (0, 11, 2):
        # tanh's JVP before JAX 0.11.2, (g + g*ans) * (1 - ans), keeps tanh's f32[6,32] result
        # besides 1 - ans; the tool's (0.11.2's) g * one_minus_square(ans) keeps one
        jax_saved.remove(6 * 32 * 4)
    assert sorted(tool_saved) == jax_saved
    assert all(leaf.nbytes == 4 for leaf in leaves if leaf.ndim == 0)


def test_the_report_counts_residuals_apart_from_their_bytes_and_names_colours_only_when_shown():
    """`4 residuals, 344 B (344 bytes)`, not `4, 344 bytes` (which read as 4,344); the count
    and the bytes are those of the residual lines below it; the plot's legend says 'in cyan'
    only where the cyan shows (issue 39, item 3)."""
    import re
    from pathlib import Path

    from jaxprtool.cli import main

    sample = Path(__file__).resolve().parents[1] / "samples" / "mlp.jaxpr"
    argv = ["memory", "--of", "grad", str(sample), "--no-xla"]
    r = CliRunner().invoke(main, ["--color", "never", *argv])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    head = next(x for x in lines if x.startswith("residuals"))
    m = re.search(r"\): (\d+) residuals?, ([\d.]+ [KMG]?B) \((\d+) bytes\)$", head)
    assert m, head
    each = [int(x) for x in re.findall(r"^  residual \d+: .* \((\d+) bytes\)", r.output, re.M)]
    assert len(each) == int(m.group(1)) and sum(each) == int(m.group(3))
    assert "backward part after it" in r.output and "cyan" not in r.output
    r = CliRunner().invoke(main, ["--color", "always", *argv])
    assert "backward part in cyan" in r.output


def test_a_symbolic_dim_counts_as_0_and_the_figures_say_they_are_lower_bounds():
    """`ShapedArray.size` counts a symbolic dim as 0 outside `sized_dims` (as its sizer
    says inside): the liveness figures of a symbolic program are then lower bounds, and
    `Timeline.symbolic` says so; the same program at b=4 counts JAX's bytes."""
    from jaxprtool.core import sized_dims

    def f(x, y):
        return jnp.sin(x), jnp.tanh(y)

    x, y = np.ones((4, 3), np.float32), np.ones((8, 3), np.float32)
    text = str(jax.make_jaxpr(f)(x, y)).replace("f32[4,3]", "f32[b,3]")
    symbolic = parse(text, "s.jaxpr").jaxpr
    (a, b) = (v.type for v in symbolic.invars)
    assert (a.shape, a.size, b.size) == (("b", 3), 0, 24)
    with sized_dims(lambda d: {"b": 4}[d]):
        assert a.size == 12
    assert a.size == 0  # the sizer is the block's alone
    t = liveness(symbolic)
    concrete = liveness(parse(str(jax.make_jaxpr(f)(x, y)), "c.jaxpr").jaxpr)
    assert t.symbolic and not concrete.symbolic
    assert concrete.input_bytes == x.nbytes + y.nbytes
    assert t.input_bytes == y.nbytes < concrete.input_bytes
    assert t.peak_bytes < concrete.peak_bytes
