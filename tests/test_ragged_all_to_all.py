"""ragged_all_to_all (issue 25): the shape rule against JAX's abstract eval, fmt/check on the
text JAX prints, the JVP against the program `jax.jvp` traces, and the located refusals:
`run` on CPU (XLA:CPU has no ragged-all-to-all, so JAX cannot run it here either) and the
transpose (not implemented yet)."""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
from click.testing import CliRunner  # noqa: E402
from jax import lax  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

from jaxprtool.ad.api import jvp_jaxpr, vjp_jaxpr  # noqa: E402
from jaxprtool.check import check  # noqa: E402
from jaxprtool.cli import main  # noqa: E402
from jaxprtool.core import JaxprError  # noqa: E402
from jaxprtool.text.parser import parse  # noqa: E402

pytestmark = pytest.mark.skipif(
    len(jax.devices("cpu")) < 4, reason="needs 4 host CPU devices (conftest sets XLA_FLAGS)"
)

MESH = jax.make_mesh((4,), ("x",), axis_types=(jax.sharding.AxisType.Auto,))
F32 = np.zeros((4, 8, 2), np.float32)
I32 = np.zeros((4, 4), np.int32)


def exchange(op, out, io, ss, oo, rs):
    """One ragged_all_to_all per device of a 4-device mesh."""

    def body(op, out, io, ss, oo, rs):
        r = lax.ragged_all_to_all(op[0], out[0], io[0], ss[0], oo[0], rs[0], axis_name="x")
        return r[None]

    return jax.shard_map(body, mesh=MESH, in_specs=P("x"), out_specs=P("x"))(
        op, out, io, ss, oo, rs
    )


def traced(fn, *args) -> str:
    return str(jax.make_jaxpr(fn)(*args)) + "\n"


@pytest.fixture(scope="module")
def text():
    return traced(exchange, F32, F32, I32, I32, I32, I32)


def errors(j):
    return [str(d) for d in check(j, "<t>") if d.kind == "error"]


def test_check_and_fmt_on_the_text_jax_printed(text, tmp_path):
    f = tmp_path / "r.jaxpr"
    f.write_text(text)
    res = CliRunner().invoke(main, ["check", str(f)])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(main, ["fmt", str(f)])
    assert res.exit_code == 0 and res.output == text


def test_shape_rule_gives_the_type_of_output():
    """JAX's abstract eval: the result is `output`'s type, whatever the operand's shape."""
    op = np.zeros((4, 5, 3), np.float32)
    out = np.zeros((4, 9, 3), np.float32)
    t = traced(exchange, op, out, I32, I32, I32, I32)
    assert "f32[9,3]{V:x} = ragged_all_to_all" in t  # what JAX inferred
    assert errors(parse(t, "<t>").jaxpr) == []
    wrong = t.replace("f32[9,3]{V:x} = ragged_all_to_all", "f32[5,3]{V:x} = ragged_all_to_all")
    assert any("ragged_all_to_all: result type" in e for e in errors(parse(wrong, "<t>").jaxpr))


@pytest.mark.parametrize("bad", ["dtype", "rank"])
def test_shape_rule_refuses_what_jax_refuses(bad):
    sizes = np.zeros((4, 4), np.float32) if bad == "dtype" else np.zeros((4, 4, 1), np.int32)

    with pytest.raises(ValueError, match="send_sizes must be"):  # JAX refuses
        jax.make_jaxpr(exchange)(F32, F32, I32, sizes, I32, I32)
    good = traced(exchange, F32, F32, I32, I32, I32, I32)
    if bad == "dtype":
        text = good.replace("d:i32[4,4]", "d:f32[4,4]").replace("k:i32[1,4]", "k:f32[1,4]")
        text = text.replace("q:i32[4]{V:x}", "q:f32[4]{V:x}")
        want = "send_sizes must be of integer type"
    else:
        text = good.replace("q:i32[4]{V:x} = squeeze[dimensions=(0,)]", "q:i32[1,4]{V:x} = copy")
        want = "send_sizes must be rank 1"
    assert any(want in e for e in errors(parse(text, "<t>").jaxpr)), errors(
        parse(text, "<t>").jaxpr
    )


def test_jvp_is_the_program_jax_traces(text):
    """Linear in (operand, output): the same exchange on the tangents with the primal offsets
    and sizes, exactly what `jax.jvp` traces."""
    ones = np.ones_like(F32)

    def jvp(op, out, io, ss, oo, rs, t_op, t_out):
        return jax.jvp(lambda a, b: exchange(a, b, io, ss, oo, rs), (op, out), (t_op, t_out))

    want = parse(traced(jvp, F32, F32, I32, I32, I32, I32, ones, ones), "<jax>").jaxpr
    got = jvp_jaxpr(parse(text, "<t>").jaxpr)
    assert errors(got) == []
    assert dataflow(got) == dataflow(want)


def dataflow(j):
    """The shard_map body as (primitive, where each operand comes from) per equation: the
    tool spells broadcast_in_dim's shape/sharding parameters out, JAX's printing elides them."""
    (sm,) = j.eqns
    body = sm.params["jaxpr"]
    where = {v: ("in", k) for k, v in enumerate(body.invars)}
    flow = []
    for n, e in enumerate(body.eqns):
        flow.append((e.prim, tuple(where[a] for a in e.inputs)))
        where.update({v: ("eqn", n, k) for k, v in enumerate(e.outputs)})
    return flow, [where[v] for v in body.outvars], [type(v).__name__ for v in j.invars]


def test_run_on_cpu_is_refused_located(text, tmp_path):
    with pytest.raises(Exception, match="not supported by XLA:CPU"):  # JAX cannot either
        jax.jit(exchange)(F32, F32, I32, I32, I32, I32)
    f = tmp_path / "r.jaxpr"
    f.write_text(text)
    res = CliRunner().invoke(main, ["run", str(f), "--random", "0"])
    assert res.exit_code == 1
    assert f"{f}:13:11: error: cannot run 'ragged_all_to_all' on CPU" in res.output
    assert "Traceback" not in res.output


def test_transpose_is_refused_located(text):
    with pytest.raises(JaxprError, match="ragged_all_to_all") as e:
        vjp_jaxpr(parse(text, "<t>").jaxpr)
    assert e.value.loc is not None and e.value.loc.line == 13
