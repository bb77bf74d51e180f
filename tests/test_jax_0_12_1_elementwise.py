"""The element-wise primitives JAX 0.12.1 added: sinpi, cospi, tanpi, asinpi, acospi, atanpi,
atan2pi, exp2m1, log2p1 (one or two operands) and fma, fmuladd (a * b + c).

For each: JAX's printout parses and prints back byte for byte (style 0.12.1), and the tool's
run, jvp, vjp, grad and vmap give JAX's numbers (`jax.jit`, `jax.jvp`, `jax.vjp`, `jax.grad`,
`jax.vmap` on the same inputs, all computed in one compiled oracle); the linear program of
linearize passes the dot-product test <w, L v> = <L^T w, v>.  Inputs keep away from the
singular points (tanpi's half-integers, asinpi/acospi's +-1, log2p1's -1, atan2pi's origin).
An older installed JAX runs fmuladd as `mul` then `add` and refuses the others at their
equation (simulated on the newest JAX).
"""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
if not hasattr(jax.lax, "sinpi"):
    pytest.skip(
        "the installed JAX lacks lax.sinpi (the element-wise primitives of JAX 0.12.1)",
        allow_module_level=True,
    )
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402
from jax_oracle import together  # noqa: E402

from jaxprtool import backend  # noqa: E402
from jaxprtool.ad.api import grad_jaxpr, jvp_jaxpr, vjp_jaxpr  # noqa: E402
from jaxprtool.ad.batching import vmap_jaxpr  # noqa: E402
from jaxprtool.ad.linearize import linearize_jaxpr  # noqa: E402
from jaxprtool.ad.transpose import transpose_jaxpr  # noqa: E402
from jaxprtool.backend import prims  # noqa: E402
from jaxprtool.core import JaxprError  # noqa: E402
from jaxprtool.text.parser import parse  # noqa: E402
from jaxprtool.text.printer import print_jaxpr  # noqa: E402
from jaxprtool.text.style import detect_style  # noqa: E402

F32 = np.float32
SHAPE = (3, 4)


def _uniform(lo, hi, seed, shape=SHAPE):
    return np.random.default_rng(seed).uniform(lo, hi, shape).astype(F32)


def _away_from_zero(seed, shape=SHAPE):
    x = _uniform(0.3, 2.0, seed, shape)
    return np.where(np.random.default_rng(seed + 50).random(shape) < 0.5, -x, x).astype(F32)


#: name -> (args, vmap in_axes); the function is `lax.<name>`.  fma's b has a size-1 axis
#: (broadcast by the primitive: its cotangent is summed back)
CASES = {
    "sinpi": ([_uniform(-2.0, 2.0, 1)], (1,)),
    "cospi": ([_uniform(-2.0, 2.0, 2)], (1,)),
    "tanpi": ([_uniform(-0.4, 0.4, 3)], (1,)),
    "asinpi": ([_uniform(-0.9, 0.9, 4)], (1,)),
    "acospi": ([_uniform(-0.9, 0.9, 5)], (1,)),
    "atanpi": ([_uniform(-3.0, 3.0, 6)], (1,)),
    "atan2pi": ([_away_from_zero(7), _away_from_zero(8)], (None, 0)),
    "exp2m1": ([_uniform(-2.0, 2.0, 9)], (1,)),
    "log2p1": ([_uniform(-0.5, 2.0, 10)], (1,)),
    "fma": ([_uniform(-2, 2, 11), _uniform(-2, 2, 12, (1, 4)), _uniform(-2, 2, 13)], (0, None, 1)),
    "fmuladd": ([_uniform(-2, 2, 14), _uniform(-2, 2, 15), _uniform(-2, 2, 16)], (1, 0, None)),
}
NAMES = sorted(CASES)
RTOL, ATOL = 2e-5, 2e-6


def _fn(name):
    return getattr(lax, name)


def _quarters(shape, seed):
    """Quarter-integer (co)tangents: exact in f32."""
    return (np.round(np.random.default_rng(seed).standard_normal(shape) * 4) / 4).astype(F32)


def _tangents(name):
    return [_quarters(a.shape, 100 + k) for k, a in enumerate(CASES[name][0])]


def _cotangent(name):
    args = CASES[name][0]
    return _quarters(np.broadcast_shapes(*(a.shape for a in args)), 200)


def _vmap_args(name):
    """(per-example args, batched args): a batch of 3 examples at each in_axes entry; an
    unbatched operand is the first example's."""
    args, in_axes = CASES[name]
    example = [a[0] for a in args]
    batched = [a[0] if ax is None else np.moveaxis(a, 0, ax) for a, ax in zip(args, in_axes)]
    return example, batched


def _text(name, args):
    return str(jax.make_jaxpr(_fn(name))(*args)) + "\n"


def _jaxpr(name, args=None):
    text = _text(name, CASES[name][0] if args is None else args)
    assert f"= {name} " in text, text
    return parse(text, f"<{name}>").jaxpr


def _jax_answers(name, args, tans, ct, batched, asked) -> dict:
    """JAX's answer to each check of a case that is asked for (traced in the oracle's jit)."""
    f, in_axes = _fn(name), CASES[name][1]
    argnums = tuple(range(len(args)))
    checks = {
        "run": lambda: f(*args),
        "jvp": lambda: jax.jvp(f, tuple(args), tuple(tans)),
        "vjp": lambda: jax.vjp(f, *args)[1](ct),
        "grad": lambda: jax.grad(lambda *a: jnp.sum(f(*a)), argnums)(*args),
        "vmap": lambda: jax.vmap(f, in_axes=in_axes)(*batched),
    }
    return {k: make() for k, make in checks.items() if k in asked}


def _asked(request) -> dict[str, set[str]]:
    """The checks of each case that this run's tests of the module ask for: `make test` runs
    a sample of them (conftest's SAMPLED), and the two fixtures below compute only those (a
    check not computed fails its test with a KeyError, never passes)."""
    asked: dict[str, set[str]] = {n: {"run"} for n in NAMES}  # (the vjp and fmuladd tests')
    for item in request.session.items:
        spec = getattr(item, "callspec", None)
        if item.module is request.module and spec is not None and "name" in spec.params:
            asked[spec.params["name"]].add(item.originalname.removeprefix("test_"))
    return asked


def _oracle_call(asked) -> tuple:
    """JAX's numbers for every case and check asked for: a `together` call."""

    def compute(cases):
        return {n: _jax_answers(n, *inputs, asked[n]) for n, inputs in cases.items()}

    inputs = {n: (CASES[n][0], _tangents(n), _cotangent(n), _vmap_args(n)[1]) for n in NAMES}
    return compute, (inputs,)


@pytest.fixture(scope="module")
def oracle(both):
    """JAX's numbers for every case and check asked for."""
    return both[0]


def _checks(name) -> dict:
    """The tool's program of each check of a case (a function making it) and its inputs."""
    args = CASES[name][0]
    f = _fn(name)
    example, batched = _vmap_args(name)

    def grad_program():  # the gradient of sum(f(...)): the program reduces
        text = str(jax.make_jaxpr(lambda *a: jnp.sum(f(*a)))(*args)) + "\n"
        return grad_jaxpr(parse(text, f"<grad {name}>").jaxpr, argnums=list(range(len(args))))

    def vmap_program():
        return vmap_jaxpr(_jaxpr(name, example), in_axes=list(CASES[name][1]), axis_size=3)

    return {
        "run": (lambda: _jaxpr(name), args),
        "jvp": (lambda: jvp_jaxpr(_jaxpr(name)), args + _tangents(name)),
        "vjp": (lambda: vjp_jaxpr(_jaxpr(name)), args + [_cotangent(name)]),
        "grad": (grad_program, args),
        "vmap": (vmap_program, batched),
    }


@pytest.fixture(scope="module")
def tool(both):
    """The tool's outputs of every case and check asked for; a check whose program the tool
    could not make holds the exception it raised, which its test raises."""
    return both[1]


@pytest.fixture(scope="module")
def both(request):
    """(JAX's numbers, the tool's outputs) of every case and check asked for, in one
    compilation (the two sides evaluate the same functions on the same inputs: one XLA
    program for both: the module took 1.6 CPU-s, 2.2 with one program each)."""
    asked = _asked(request)
    made, calls = {}, []
    for name in NAMES:
        for check, (make, inputs) in _checks(name).items():
            if check not in asked[name]:
                continue
            try:
                program = make()
            except Exception as e:  # noqa: BLE001 - raised again by the check's test
                made[name, check] = e
                continue
            made[name, check] = len(calls)
            calls.append((program, inputs))
    want, *outs = together(_oracle_call(asked), *calls)
    return want, {k: v if isinstance(v, Exception) else outs[v] for k, v in made.items()}


def _tool(tool, name, check):
    out = tool[name, check]
    if isinstance(out, Exception):
        raise out
    return out


def _close(got, want, what):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=what)


@pytest.mark.parametrize("name", NAMES)
def test_prints_back_byte_identically(name):
    text = _text(name, CASES[name][0])
    j = parse(text, f"<{name}>").jaxpr
    style = detect_style(j)
    assert tuple(style.version) >= (0, 12, 1)  # the primitive is 0.12.1's
    assert print_jaxpr(j, style) + "\n" == text


@pytest.mark.parametrize("name", NAMES)
def test_run(name, oracle, tool):
    (got,) = _tool(tool, name, "run")
    _close(got, oracle[name]["run"], f"{name}: run")


@pytest.mark.parametrize("name", NAMES)
def test_jvp(name, oracle, tool):
    got_out, got_t = _tool(tool, name, "jvp")
    want_out, want_t = oracle[name]["jvp"]
    _close(got_out, want_out, f"{name}: jvp primal")
    _close(got_t, want_t, f"{name}: jvp tangent")


@pytest.mark.parametrize("name", NAMES)
def test_vjp(name, oracle, tool):
    got = _tool(tool, name, "vjp")
    _close(got[0], oracle[name]["run"], f"{name}: vjp primal")
    want = oracle[name]["vjp"]
    assert len(got) - 1 == len(want)
    for k, (g, w) in enumerate(zip(got[1:], want)):
        _close(g, w, f"{name}: cotangent of operand {k}")


@pytest.mark.parametrize("name", NAMES)
def test_grad(name, oracle, tool):
    """The gradient of sum(f(...)) (the program reduces; the tool differentiates it all)."""
    got = _tool(tool, name, "grad")
    want = oracle[name]["grad"]
    assert len(got) == len(want)
    for k, (gk, w) in enumerate(zip(got, want)):
        _close(gk, w, f"{name}: gradient of operand {k}")


@pytest.mark.parametrize("name", NAMES)
def test_vmap(name, oracle, tool):
    (got,) = _tool(tool, name, "vmap")
    _close(got, oracle[name]["vmap"], f"{name}: vmap")


@pytest.mark.parametrize("name", NAMES)
def test_dot_product(name):
    """<w, L v> = <L^T w, v> for the linear program of linearize and its transpose."""
    args = CASES[name][0]
    j = _jaxpr(name)
    primal, linear, info = linearize_jaxpr(j)
    outs = backend.evaluate(primal, args)
    n_out = len(j.outvars)
    src = {"input": args, "output": outs[:n_out], "new": outs[n_out:]}
    res = [np.asarray(src[r.source][r.index]) for r in info.residuals]
    n_res = len(res)
    n_tan = len(linear.invars) - n_res
    lt = transpose_jaxpr(linear, [False] * n_res + [True] * n_tan)
    v = [_quarters(var.type.shape, 300 + k) for k, var in enumerate(linear.invars[n_res:])]
    w = [_quarters(tuple(x.type.shape), 400 + k) for k, x in enumerate(linear.outvars)]
    lv, ltw = together((linear, res + v), (lt, res + w))  # one compilation
    assert len(ltw) == len(v) == len(args)

    def dot(xs, ys):
        return sum(float(np.vdot(np.float64(x), np.float64(y))) for x, y in zip(xs, ys))

    scale = sum(float(np.abs(np.float64(a) * np.float64(b)).sum()) for a, b in zip(w, lv))
    assert abs(dot(w, lv) - dot(ltw, v)) <= 1e-5 * scale + 1e-5, (dot(w, lv), dot(ltw, v))


def test_fma_is_not_linear_in_both_factors():
    """Transposing a program where a and b are both linear is refused, as JAX asserts."""
    a, b, c = CASES["fma"][0]
    j = _jaxpr("fma", [a, a, c])
    with pytest.raises(JaxprError, match="'fma' is not linear"):
        transpose_jaxpr(j, [True, True, False])


# ---------------------------------------------------------------- an older installed JAX


def _bound(j, args) -> set[str]:
    """The primitives JAX traces from the tool's function for `j`: what the back end binds."""
    fn = backend.as_jax_function(j)
    return {e.primitive.name for e in jax.make_jaxpr(fn)(*args).jaxpr.eqns}


def test_fmuladd_runs_as_mul_then_add_before_0_12_1(monkeypatch, oracle):
    args = CASES["fmuladd"][0]
    j = _jaxpr("fmuladd")
    assert "fmuladd" in _bound(j, args)
    monkeypatch.setattr(prims, "installed_version", lambda: (0, 12, 0))
    assert {"mul", "add"} <= _bound(j, args) and "fmuladd" not in _bound(j, args)
    (got,) = backend.evaluate(_jaxpr("fmuladd"), args)
    _close(got, oracle["fmuladd"]["run"], "fmuladd as mul and add")


@pytest.mark.parametrize("name", [n for n in NAMES if n != "fmuladd"])
def test_refused_at_its_equation_by_a_jax_that_lacks_it(monkeypatch, name):
    """No older form (JAX's lowering is no older primitive's): refused, located."""
    table = dict(prims.primitive_table())
    del table[name]
    monkeypatch.setattr(prims, "_TABLE", table)
    with pytest.raises(JaxprError, match=rf"cannot run '{name}'.*JAX 0\.12\.1 added it") as e:
        backend.evaluate(_jaxpr(name), CASES[name][0])
    assert e.value.loc is not None
