"""DCE of custom_jvp_call, custom_vjp_call, run_state, pallas_call and xla_pmap as JAX's
rules do it (issue 25): the `dce` pass leaves as many equations as `pe.dce_jaxpr` does on
JAX-traced programs that write a Ref made outside the call and read nowhere afterwards.

* custom_jvp/custom_vjp: JAX prunes a result nothing uses but keeps every operand and the
  body's writes into Ref operands (it cleans the body with every input live);
* run_state and pallas_call: JAX has no body rule: unused and writing no live Ref, the call
  goes; used, it stays whole (its body too);
* xla_pmap (JAX <= 0.7): pmap's rule prunes unused results and operands with their in_axes,
  out_axes and donated_invars; the body's dead Ref writes go, as JAX 0.12's pmap (a
  shard_map) drops them: checked against `pe.dce_jaxpr` of the same body with those results
  used and the Ref dead (`live_inputs`).

JAX 0.12 differentiates none of these in reverse (a custom rule closing over a Ref leaks a
tracer; run_state and pallas_call fail to linearize): the jvp is checked against jax.jvp,
with no more equations than JAX's."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from conftest import written_module  # noqa: E402
from jax._src.interpreters import partial_eval as pe  # noqa: E402
from jax._src.state.discharge import run_state  # noqa: E402
from jax.experimental import pallas as pl  # noqa: E402
from jax_oracle import close, ir, run, together  # noqa: E402

from jaxprtool import backend  # noqa: E402
from jaxprtool.ad.api import grad_jaxpr, jvp_jaxpr  # noqa: E402
from jaxprtool.core import all_eqns  # noqa: E402
from jaxprtool.passes.dce import dce  # noqa: E402
from jaxprtool.text.parser import parse  # noqa: E402

X = np.array([0.1, 0.4, -0.7, 1.0], np.float32)
T = np.array([0.2, 0.1, -0.4, 0.6], np.float32)
WRITES = {"swap", "addupdate"}


def custom_jvp_writes(x):
    """A custom_jvp function writes a Ref made outside it; its second result is unused."""
    r = jax.new_ref(x * 0.0)

    @jax.custom_jvp
    def g(y):
        r[...] += jnp.sin(y)
        return y * 3.0, jnp.cos(y)

    @g.defjvp
    def g_jvp(p, t):
        return g(p[0]), (t[0] * 3.0, -jnp.sin(p[0]) * t[0])

    return (jnp.cos(g(x)[0]) * x).sum()


def custom_vjp_writes(x):
    r = jax.new_ref(x * 0.0)

    @jax.custom_vjp
    def g(y):
        r[...] += jnp.sin(y)
        return y * 3.0, jnp.cos(y)

    g.defvjp(lambda y: (g(y), None), lambda _, c: (c[0] * 3.0,))
    return (jnp.cos(g(x)[0]) * x).sum()


def run_state_used(x):
    """run_state writes a Ref made outside (never read again) and computes a value unused
    inside its body: JAX keeps the whole equation."""
    r = jax.new_ref(x * 0.0)

    def body(refs):
        (a,) = refs
        r[...] += jnp.sin(a[...])
        jnp.cos(a[...])
        a[...] = a[...] * 2.0

    return (run_state(body)((x,))[0] * x).sum()


def run_state_dead(x):
    r = jax.new_ref(x * 0.0)

    def body(refs):
        (a,) = refs
        r[...] += jnp.sin(a[...])

    run_state(body)((x,))
    return x.sum()


def _sin_kernel(x_ref, o_ref):
    o_ref[...] = jnp.sin(x_ref[...])


def _pallas(x):
    out = jax.ShapeDtypeStruct((4,), jnp.float32)
    return pl.pallas_call(_sin_kernel, out_shape=out, interpret=True)(x)


def pallas_used(x):
    return (_pallas(x) * x).sum()


def pallas_dead(x):
    _pallas(x)
    return x.sum()


def custom_twin(x):
    """The custom functions' values without the Ref (JAX 0.12 cannot run a custom function
    writing a Ref: "No state discharge rule implemented for primitive: custom_jvp_call")."""
    return (jnp.cos(x * 3.0) * x).sum()


CALLS = [custom_jvp_writes, custom_vjp_writes]
KEPT_WHOLE = [run_state_used, pallas_used]
DEAD = [run_state_dead, pallas_dead]


def _count(j) -> int:
    return sum(1 for _ in all_eqns(j))


def _jax_dce_count(f) -> int:
    closed = jax.make_jaxpr(f)(X).jaxpr
    theirs, _ = pe.dce_jaxpr(closed, [True] * len(closed.outvars))
    return _count(parse(str(theirs), "<jax>").jaxpr)


@pytest.mark.parametrize("f", CALLS + KEPT_WHOLE + DEAD, ids=lambda f: f.__name__)
def test_the_dce_pass_leaves_what_jax_s_dce_leaves(f):
    j = ir(f, X)
    d = dce(j)
    (got,), want = together((d, [X]), (custom_twin if f in CALLS else f, [X]))  # (one compile)
    close(got, want)
    assert _count(d) == _jax_dce_count(f)
    if f in DEAD:
        assert [e.prim for e in d.eqns] == ["reduce_sum"]
    if f in KEPT_WHOLE:  # the equation and its body exactly as traced
        assert d.eqns[-3] is j.eqns[-3]


@pytest.mark.parametrize("f", CALLS, ids=lambda f: f.__name__)
def test_a_custom_call_loses_its_unused_result_but_keeps_its_ref_write(f):
    d = dce(ir(f, X))
    (call,) = [e for e in d.eqns if e.prim.startswith("custom_")]
    assert len(call.outputs) == 1 and len(call.params["call_jaxpr"].outvars) == 1
    assert len(call.inputs) == 2  # every operand stays, the Ref included
    assert any(e.prim in WRITES for e in call.params["call_jaxpr"].eqns)


def _jax_jvp(f):
    return lambda x, t: jax.jvp(f, (x,), (t,))


@pytest.mark.parametrize("f", KEPT_WHOLE + DEAD, ids=lambda f: f.__name__)
def test_jvp_as_jax_s_and_no_dead_call_left(f):
    jj = jvp_jaxpr(ir(f, X))
    got, want = together((jj, [X, T]), (_jax_jvp(f), [X, T]))  # (one compile)
    for a, b in zip(got, want, strict=True):
        close(a, b)
    assert _count(jj) <= _count(ir(_jax_jvp(f), X, T))
    if f in DEAD:
        assert not any(e.prim in ("run_state", "pallas_call") for e in jj.eqns)


def test_a_kernel_with_side_effects_stays():
    """JAX's `_has_side_effects(compiler_params)` keeps an unused kernel."""
    text = str(jax.make_jaxpr(pallas_dead)(X))
    marked = text.replace(
        "compiler_params=None",
        "compiler_params={'mosaic_tpu': CompilerParams(has_side_effects=True)}",
    )
    assert marked != text
    for src, n in ((text, 1), (marked, 2)):
        res = run(["dce", "-"], stdin=src)
        assert res.exit_code == 0, res.output
        assert len(parse(res.stdout, "<dce>").jaxpr.eqns) == n


# JAX <= 0.7 printed pmap as xla_pmap; the body writes a Ref the program makes and reads
# nowhere after the pmap, and its second result is unused
PMAP = """{ lambda ; a:f32[2,3]. let
    z:f32[2,3] = mul a 0.0:f32[]
    r:Ref{f32[2,3]} = new_ref z
    b:f32[2,3] c:f32[2,3] = xla_pmap[
      axis_name=d
      axis_size=2
      backend=None
      call_jaxpr={ lambda ; s:Ref{f32[3]} x:f32[3]. let
          y:f32[3] = integer_pow[y=2] x
          s[...] += y
          w:f32[3] = sin x
        in (y, w) }
      devices=None
      donated_invars=(False, False)
      global_axis_size=2
      in_axes=(0, 0)
      is_explicit_global_axis_size=False
      name=<lambda>
      out_axes=(0, 0)
    ] r a
    f:f32[2,3] = mul a b
  in (f,) }
"""


def _pmap_body(s, x):
    y = x**2
    s[...] += y
    return y, jnp.sin(x)


def test_xla_pmap_drops_its_unused_result_and_dead_ref_write():
    d = dce(parse(PMAP, "<pmap>").jaxpr)
    (pm,) = [e for e in d.eqns if e.prim == "xla_pmap"]
    assert len(pm.inputs) == 1 and len(pm.outputs) == 1
    assert pm.params["in_axes"] == (0,) and pm.params["out_axes"] == (0,)
    assert pm.params["donated_invars"] == (False,)
    body = jax.make_jaxpr(_pmap_body)(jax.new_ref(np.ones(3, np.float32)), X[:3]).jaxpr
    theirs, used = pe.dce_jaxpr(body, [True, False], live_inputs=[False, True])
    assert used == [False, True]
    assert _count(pm.params["call_jaxpr"]) == _count(parse(str(theirs), "<jax>").jaxpr)
    assert [e.prim for e in d.eqns] == ["xla_pmap", "mul"]  # the Ref went with its write
    x = np.arange(6, dtype=np.float32).reshape(2, 3) / 4
    close(backend.evaluate(d, [x])[0], x * jax.pmap(lambda v: v**2)(x))


@jax.custom_jvp
def _two(y):
    return y * 3.0, jnp.cos(y)


@_two.defjvp
def _two_rule_dce_calls(p, t):
    return _two(p[0]), (t[0] * 3.0, -jnp.sin(p[0]) * t[0])


def uses_one_of_two(x):
    return jnp.sin(_two(x)[0]).sum()


PLUGIN = """from jaxprtool.plugins import ops, register_custom_jvp

def rule(primals, tangents):
    (y,), (t,) = primals, tangents
    return None, [ops.mul(t, ops.lit(3.0, t)), ops.neg(ops.mul(ops.sin(y), t))]

register_custom_jvp("_two_rule_dce_calls", rule)
"""


def test_a_plugin_rule_for_a_pruned_custom_call_is_refused(tmp_path):
    """A plugin rule gives every result of its function: before `dce` it is JAX's
    derivative; after `dce` pruned the call's unused result, it is refused, located (which
    result remains is no longer known), never matched to the wrong one."""
    from jaxprtool.ad.registry import custom_jvps
    from jaxprtool.core import JaxprError
    from jaxprtool.plugins import load_plugins

    plugin = tmp_path / "two_rules.py"
    plugin.write_text(PLUGIN)
    try:
        load_plugins([str(plugin)])
        j = ir(uses_one_of_two, X)
        got, want = together((jvp_jaxpr(j), [X, T]), (_jax_jvp(uses_one_of_two), [X, T]))
        for a, b in zip(got, want, strict=True):
            close(a, b)
        d = dce(j)
        (call,) = [e for e in d.eqns if e.prim == "custom_jvp_call"]
        assert len(call.outputs) == 1
        with pytest.raises(JaxprError, match="the plugin rule gives 2 results and the call has 1"):
            jvp_jaxpr(d)
    finally:
        custom_jvps.pop("_two_rule_dce_calls", None)


TRACED_MODULE = """
import jax
import jax.numpy as jnp


@jax.custom_jvp
def two(y):
    return y * 3.0, jnp.cos(y)


@two.defjvp
def two_jvp(p, t):
    return two(p[0]), (t[0] * 5.0, -jnp.sin(p[0]) * t[0])


@jax.custom_vjp
def two_v(y):
    return y * 3.0, jnp.cos(y)


two_v.defvjp(lambda y: (two_v(y), y), lambda y, c: (c[0] * 5.0 - jnp.sin(y) * c[1],))


def uses_first(x):
    return jnp.sin(two(x)[0]).sum()


def uses_first_v(x):
    return jnp.sin(two_v(x)[0]).sum()
"""


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    """`jaxprtool trace` of the module's functions (their rules recorded), and the module."""
    folder = tmp_path_factory.mktemp("traced_dce")
    mod = written_module(folder, "dce_traced_rules", TRACED_MODULE)
    texts = {}
    with contextlib.chdir(folder):
        for fn in ("uses_first", "uses_first_v"):
            r = run(["trace", f"{mod.__name__}:{fn}", "--arg", "f32[4]"])
            assert r.exit_code == 0, r.output
            texts[fn] = parse(r.stdout, f"<{fn}>").jaxpr
    return mod, texts


def test_dce_prunes_a_recorded_jvp_rule_with_its_call(traced):
    """The recorded rule loses the unused result and its tangent; the jvp is still JAX's
    (the rule's own tangent, 5, not the body's 3)."""
    mod, texts = traced
    d = dce(texts["uses_first"])
    (call,) = [e for e in d.eqns if e.prim == "custom_jvp_call"]
    assert len(call.outputs) == 1 and len(call.params["jaxprtool_jvp"].outvars) == 2
    got, want = together((jvp_jaxpr(d), [X, T]), (_jax_jvp(mod.uses_first), [X, T]))
    for a, b in zip(got, want, strict=True):
        close(a, b)


def test_a_recorded_fwd_bwd_pair_keeps_its_results(traced):
    """bwd takes every result's cotangent: the call keeps both results, and grad is JAX's."""
    mod, texts = traced
    d = dce(texts["uses_first_v"])
    (call,) = [e for e in d.eqns if e.prim == "custom_vjp_call"]
    assert len(call.outputs) == 2
    g = grad_jaxpr(d, (0,))
    (got,), want = together((g, [X]), (jax.grad(mod.uses_first_v), [X]))  # (one compile)
    close(got, want)
    assert _count(g) <= _count(ir(jax.grad(mod.uses_first_v), X))
