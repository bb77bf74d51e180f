"""A differentiation rule's results are checked against the types their primal implies as
they are emitted (issue 22, item 2): a plugin's JVP rule returning an `f32[]` tangent for an
`f32[4]` result, or a transpose rule returning a wrongly shaped cotangent, is a located error
naming the rule, never a tangent broadcast (or summed) into shape.  JAX raises on both."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from jaxprtool.cli import main

PROGRAM = """{ lambda ; a:f32[4]. let
    b:f32[4] = {prim} a
    c:f32[] = reduce_sum[axes=(0,) out_sharding=None] b
  in (c,) }
"""

JVP_PLUGIN = """
from jaxprtool.plugins import ops, primitive_jvps, register_shape_rule


def same_type(in_types, params, out_hint):
    return [in_types[0]]


def wrong_tangent_jvp(primals, tangents, **params):
    (x,), (t,) = primals, tangents
    y = ops.bind("{prim}", x)
    return [y], [ops.reduce_sum(t, (0,))]  # f32[]: the tangent of an f32[4] result is f32[4]


register_shape_rule("{prim}", same_type)
primitive_jvps["{prim}"] = wrong_tangent_jvp
"""

TRANSPOSE_PLUGIN = """
from jaxprtool.plugins import deflinear2, ops, register_shape_rule


def same_type(in_types, params, out_hint):
    return [in_types[0]]


def wrong_cotangent(ct, x, **params):
    return [ops.reduce_sum(ct, (0,))]  # f32[] for an f32[4] operand


register_shape_rule("{prim}", same_type)
deflinear2("{prim}", wrong_cotangent)
"""


def _invoke(tmp_path, plugin_text, prim, *command):
    plugin = tmp_path / f"{prim}_rules.py"
    plugin.write_text(plugin_text.replace("{prim}", prim))
    prog = tmp_path / "f.jaxpr"
    prog.write_text(PROGRAM.replace("{prim}", prim))
    return prog, CliRunner().invoke(main, ["--plugin", str(plugin), *command, str(prog)])


@pytest.mark.parametrize("command", [("jvp",), ("linearize",), ("grad",), ("jvp", "--verify-each")])
def test_a_jvp_rule_returning_a_wrong_tangent_type_is_a_located_error(tmp_path, command):
    prim = "badtangent" + str(abs(hash(command)) % 1000)  # a fresh primitive per plugin
    prog, r = _invoke(tmp_path, JVP_PLUGIN, prim, *command)
    assert r.exit_code == 1, r.output
    assert "Traceback" not in r.output
    assert re.search(
        rf"{re.escape(str(prog))}:2:5: error: the JVP rule of '{prim}' "
        rf"\(jaxprtool_plugin_\d+_{prim}_rules\.wrong_tangent_jvp\) returned a tangent for "
        r"result 0 of type f32\[\] where the primal implies f32\[4\]",
        r.output,
    ), r.output


def test_a_transpose_rule_returning_a_wrong_cotangent_type_is_a_located_error(tmp_path):
    prim = "badcotangent"
    prog, r = _invoke(tmp_path, TRANSPOSE_PLUGIN, prim, "grad")
    assert r.exit_code == 1, r.output
    assert "Traceback" not in r.output
    assert re.search(
        rf"{re.escape(str(prog))}:2:5: error: the transpose rule of '{prim}' "
        r"\(.*wrong_cotangent\) returned a cotangent of type f32\[\] where the primal implies "
        r"f32\[4\]",
        r.output,
    ), r.output


DEFJVP_PLUGIN = """
from jaxprtool.plugins import defjvp, ops, register_shape_rule


def same_type(in_types, params, out_hint):
    return [in_types[0]]


def summed_tangent(g, x, **params):
    return ops.reduce_sum(g, (0,))  # f32[] for an f32[4] operand and result


register_shape_rule("{prim}", same_type)
defjvp("{prim}", summed_tangent)
"""


def test_a_defjvp_contribution_of_the_wrong_shape_is_not_broadcast(tmp_path):
    """`defjvp` broadcasts a scalar operand's contribution, never a wrong one."""
    prim = "badcontribution"
    prog, r = _invoke(tmp_path, DEFJVP_PLUGIN, prim, "jvp")
    assert r.exit_code == 1, r.output
    assert re.search(
        rf"{re.escape(str(prog))}:2:5: error: the JVP rule of '{prim}' "
        r"\(.*summed_tangent\) returned a tangent of type f32\[\] where the primal implies "
        r"f32\[4\]",
        r.output,
    ), r.output


BATCHING_PLUGIN = """
from jaxprtool.plugins import ops, register_shape_rule
from jaxprtool.record import define


def same_type(in_types, params, out_hint):
    return [in_types[0]]


def dropped_batch_axis(args, dims, **params):
    return [ops.reduce_sum(args[0], (dims[0],))], [0]  # f32[4] claimed batched along 0


register_shape_rule("{prim}", same_type)
define("{prim}", batching=dropped_batch_axis)
"""


def test_a_batching_rule_returning_a_wrong_shape_is_a_located_error(tmp_path):
    prim = "badbatch"
    prog, r = _invoke(tmp_path, BATCHING_PLUGIN, prim, "vmap", "--axis-size", "3")
    assert r.exit_code == 1, r.output
    assert "Traceback" not in r.output
    assert re.search(
        rf"{re.escape(str(prog))}:2:5: error: internal error: the batching rule of '{prim}' "
        r"\(.*dropped_batch_axis\) returned f32\[4\] with batch dimension 0 for a result of "
        r"type f32\[4\]",
        r.output,
    ), r.output
