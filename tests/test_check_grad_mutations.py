"""check-grad fails wrong rules and only wrong rules (issue 46): twenty deliberately wrong
JVP and transpose rules (a flipped sign, a wrong factor, a missing term, a wrong axis or
permutation), each loaded as a plugin over the tool's own rule, are each FAILed by
check-grad at its own random point; the same programs with the tool's rules pass.

The programs are traced by JAX here (small, so that a check is a few compilations).  Four
mutations run in the default suite; the other sixteen are marked slow."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
from click.testing import CliRunner

from jaxprtool.cli import main
from jaxprtool.record import prim

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

HEADER = "from jaxprtool.plugins import Zero, is_zero, ops, defjvp, defjvp2, deflinear2\n"

X3 = np.zeros((2, 3, 4), np.float32)
V5 = np.zeros(5, np.float32)

#: name: (the wrong rule, a plugin's source; the primitives it replaces; the program; inputs)
MUTATIONS = {
    "sin: flipped sign": (
        "defjvp('sin', lambda g, x, **p: ops.neg(ops.mul(g, ops.cos(x))))",
        ["sin"],
        lambda x: jnp.sin(x) * x,
        (V5,),
    ),
    "cos: missing sign": (
        "defjvp('cos', lambda g, x, **p: ops.mul(g, ops.sin(x)))",
        ["cos"],
        lambda x: jnp.cos(x),
        (V5,),
    ),
    "exp: wrong factor": (
        "defjvp2('exp', lambda g, ans, x, **p: ops.mul(ops.lit(2.0, x), ops.mul(g, ans)))",
        ["exp"],
        lambda x: jnp.exp(x),
        (V5,),
    ),
    "log: wrong power": (
        "defjvp('log', lambda g, x, **p: ops.div(g, ops.square(x)))",
        ["log"],
        lambda x: jnp.log(x),
        (V5,),
    ),
    "tanh: missing square": (
        "defjvp2('tanh', lambda g, ans, x, **p: ops.mul(g, ops.sub(ops.lit(1.0, x), ans)))",
        ["tanh"],
        lambda x: jnp.tanh(x),
        (V5,),
    ),
    "logistic: missing factor": (
        "defjvp2('logistic', lambda g, ans, x, **p: ops.mul(g, ans))",
        ["logistic"],
        lambda x: jax.nn.sigmoid(x),
        (V5,),
    ),
    "sqrt: wrong factor": (
        "defjvp2('sqrt', lambda g, ans, x, **p: ops.mul(g, ops.div(ops.lit(1.0, x), ans)))",
        ["sqrt"],
        lambda x: jnp.sqrt(x),
        (V5,),
    ),
    "rsqrt: flipped sign": (
        "defjvp2('rsqrt', lambda g, ans, x, **p: "
        "ops.mul(g, ops.mul(ops.lit(0.5, x), ops.div(ans, x))))",
        ["rsqrt"],
        lambda x: jax.lax.rsqrt(x),
        (V5,),
    ),
    "log1p: missing term": (
        "defjvp('log1p', lambda g, x, **p: ops.div(g, x))",
        ["log1p"],
        lambda x: jnp.log1p(x),
        (V5,),
    ),
    "erf: missing factor": (
        "defjvp('erf', lambda g, x, **p: ops.mul(g, ops.exp(ops.neg(ops.square(x)))))",
        ["erf"],
        lambda x: jax.lax.erf(x),
        (V5,),
    ),
    "mul: missing term": (
        "defjvp('mul', lambda g, x, y, **p: ops.mul(g, y), None)",
        ["mul"],
        lambda x, y: x * y,
        (V5, V5),
    ),
    "div: flipped sign": (
        "defjvp('div', lambda g, x, y, **p: ops.div(g, y),"
        " lambda g, x, y, **p: ops.div(ops.mul(g, x), ops.square(y)))",
        ["div"],
        lambda x, y: x / (2.0 + y * y),
        (V5, V5),
    ),
    "integer_pow: wrong factor": (
        "defjvp('integer_pow', lambda g, x, *, y, **p: "
        "ops.mul(g, ops.mul(ops.lit(float(y - 1), x), ops.integer_pow(x, y - 1))))",
        ["integer_pow"],
        lambda x: x**3,
        (V5,),
    ),
    "cosh: wrong function": (
        "defjvp('cosh', lambda g, x, **p: ops.mul(g, ops.cosh(x)))",
        ["cosh"],
        lambda x: jnp.cosh(x),
        (V5,),
    ),
    "neg: transpose keeps the sign": (
        "deflinear2('neg', lambda t, x: [t])",
        ["neg"],
        lambda x: -jnp.sin(x),
        (V5,),
    ),
    "cumsum: transpose in the same direction": (
        "deflinear2('cumsum', lambda ct, x, *, axis, reverse=False, **p: "
        "[ops.bind('cumsum', ct, axis=int(axis), reverse=bool(reverse))])",
        ["cumsum"],
        lambda x: jnp.cumsum(jnp.sin(x)),
        (V5,),
    ),
    "transpose: transposed by the permutation, not its inverse": (
        "deflinear2('transpose', lambda ct, x, *, permutation, **p: "
        "[ops.bind('transpose', ct, permutation=ops.ints(permutation))])",
        ["transpose"],
        lambda x: jnp.sin(jnp.transpose(x, (1, 2, 0))).reshape(-1)[:8],
        (np.zeros((2, 2, 2), np.float32),),
    ),
    "rev: transpose reverses nothing": (
        "deflinear2('rev', lambda ct, x, *, dimensions, **p: [ct])",
        ["rev"],
        lambda x: jnp.sin(x)[::-1] * jnp.arange(5.0),
        (V5,),
    ),
    "reduce_sum: transpose with a wrong factor": (
        "from jaxprtool.families.reductions import _reduce_sum_transpose\n"
        "deflinear2('reduce_sum', lambda ct, x, **p: "
        "[ops.mul(ops.lit(2.0, r), r) for r in _reduce_sum_transpose(ct, x, **p)])",
        ["reduce_sum"],
        lambda x: jnp.sum(jnp.sin(x), axis=1),
        (np.zeros((3, 4), np.float32),),
    ),
    "softsign (a plugin primitive): the square missing": (
        "from jaxprtool.plugins import register_impl, register_shape_rule\n"
        "register_shape_rule('softsign', lambda in_types, params, out_hint: [in_types[0]])\n"
        "register_impl('softsign', lambda x, **p: x / (1 + __import__('jax').numpy.abs(x)))\n"
        "defjvp('softsign', lambda g, x, **p: ops.div(g, ops.add(ops.lit(1.0, x), ops.abs(x))))",
        ["softsign"],
        None,  # the README's softsign program (text: JAX has no such primitive)
        (V5,),
    ),
}
FAST = {
    "sin: flipped sign",
    "tanh: missing square",
    "transpose: transposed by the permutation, not its inverse",
    "softsign (a plugin primitive): the square missing",
}
SOFTSIGN = """{ lambda ; a:f32[5]. let
    b:f32[5] = softsign a
    c:f32[5] = mul b a
  in (c,) }
"""
#: the right softsign rule: its program passes
RIGHT_SOFTSIGN = MUTATIONS["softsign (a plugin primitive): the square missing"][0].replace(
    "ops.div(g, ops.add(ops.lit(1.0, x), ops.abs(x)))",
    "ops.div(g, ops.square(ops.add(ops.lit(1.0, x), ops.abs(x))))",
)


@contextlib.contextmanager
def _restored(names):
    """The records of `names` and the back end's plugin implementations as they were,
    whatever a plugin put in them (softsign's plugin adds an implementation)."""
    from jaxprtool.backend import IMPLS

    saved = {n: dict(vars(prim(n))) for n in names}
    impls = dict(IMPLS)
    try:
        yield
    finally:
        for n, fields in saved.items():
            rec = prim(n)
            rec.__dict__.clear()
            rec.__dict__.update(fields)
        IMPLS.clear()
        IMPLS.update(impls)


@pytest.fixture(scope="module")
def programs(tmp_path_factory):
    """The mutation's program, written once to a folder of its own (`f.jaxpr`): the wrong
    rule's check and the right one's read the same file, so that what does not depend on
    the rule (the program's float64 copy, JAX's own derivatives) is compiled once
    (`backend.jit_cache` keys on the content and the file name)."""
    folder = tmp_path_factory.mktemp("mutations")
    made = {}

    def program(name) -> str:
        if name not in made:
            _, _, f, inputs = MUTATIONS[name]
            path = folder / str(len(made)) / "f.jaxpr"
            path.parent.mkdir()
            path.write_text(SOFTSIGN if f is None else str(jax.make_jaxpr(f)(*inputs)))
            made[name] = str(path)
        return made[name]

    return program


def _check_grad(tmp_path, program, plugin_source=None):
    cmd = ["--no-color"]
    if plugin_source is not None:
        plugin = tmp_path / "rules.py"
        plugin.write_text(HEADER + plugin_source + "\n")
        cmd += ["--plugin", str(plugin)]
    return CliRunner(env={"COLUMNS": "300"}).invoke(main, [*cmd, "check-grad", program])


def _cases():
    for name in MUTATIONS:
        marks = () if name in FAST else (pytest.mark.slow,)
        yield pytest.param(name, marks=marks, id=name.split(":")[0])


@pytest.mark.parametrize("name", list(_cases()))
def test_a_wrong_rule_fails(tmp_path, programs, name):
    source, names, _, _ = MUTATIONS[name]
    program = programs(name)
    with _restored(names):
        r = _check_grad(tmp_path, program, source)
    assert r.exit_code == 1, r.output
    assert "FAIL" in r.stdout, r.stdout
    # judged in float64: the failure is the rule's, not float32 round-off
    assert "f.jaxpr: judged in float64" in r.stdout, r.stdout


@pytest.mark.parametrize("name", list(_cases()))
def test_the_right_rule_passes(tmp_path, programs, name):
    """The same program with the tool's own rule (a plugin primitive: the right one)."""
    source, names, f, _ = MUTATIONS[name]
    program = programs(name)
    with _restored(names):
        r = _check_grad(tmp_path, program, RIGHT_SOFTSIGN if f is None else None)
    assert r.exit_code == 0, r.output
    assert "FAIL" not in r.stdout and "inconclusive" not in r.stdout, r.stdout


def test_twenty_mutations():
    assert len(MUTATIONS) == 20
