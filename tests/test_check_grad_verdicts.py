"""check-grad's verdicts (issue 22, item 6): a linalg program is checked (it was an internal
error from the lazy numpy loader), relu's kink at 0 is "non-smooth at FILE:LINE:COL" as for
max/abs, and an MLP with dropout (Haiku's structure) is checked in float64 with the same
dropout masks as the program (it failed: the float64 copy was refused, and float32
differences crossed relu kinks nobody saw)."""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from jaxprtool.cli import main

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402


def _check_grad(*args):
    return CliRunner(env={"COLUMNS": "400"}).invoke(main, ["--no-color", "check-grad", *args])


def _write(tmp_path, name, fn, *args):
    path = tmp_path / f"{name}.jaxpr"
    path.write_text(str(jax.make_jaxpr(fn)(*args)))
    return path


_SUBMODULE_FIRST = """
import sys
from jaxprtool.lazy import np  # numpy lazy, as a command that has not needed it yet
assert type(sys.modules["numpy"]).__name__ != "module"
import numpy._core._multiarray_umath  # what jaxlib's C extension imports as it starts
import scipy.linalg  # what check-grad of a linalg program imports next
print("ok")
"""


def test_a_numpy_submodule_imported_while_numpy_is_lazy_is_loaded_once():
    """jaxlib imports `numpy._core._multiarray_umath` as it starts; with numpy still lazy,
    importlib loaded `numpy._core` a second time, without that attribute, and check-grad of
    a linalg program failed in a fresh process (`AttributeError: module 'numpy._core' has
    no attribute '_multiarray_umath'` in scipy, at f3da3db's parent).  Those imports in a
    fresh process: `check-grad` in one no longer meets them in that order (it passed
    with the guard, `lazy._LoadedDuringImport`, taken out), these do."""
    r = subprocess.run(
        [sys.executable, "-c", _SUBMODULE_FIRST], capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ["ok"]


def test_relu_kink_at_zero_is_non_smooth_at_its_location(tmp_path):
    """JAX's relu rule gives 0 at 0; central differences give 0.5: a kink, located at the
    `max` inside relu's body (as for a plain max)."""
    prog = _write(tmp_path, "relu", lambda x: jnp.sum(jax.nn.relu(x)), jnp.zeros(3, jnp.float32))
    np.savez(tmp_path / "x.npz", arg0=np.array([0.0, 1.0, -1.0], np.float32))
    r = _check_grad(str(prog), "--args", str(tmp_path / "x.npz"))
    assert r.exit_code == 0, r.output
    line, col = _max_location(prog.read_text())
    text = " ".join(r.output.split())
    assert "FAIL" not in text, r.output
    assert text.count(f"non-smooth at {prog}:{line}:{col}") == 2, r.output


def _max_location(text: str) -> tuple[int, int]:
    for n, row in enumerate(text.splitlines(), 1):
        m = re.search(r"\S+ = max ", row)
        if m:
            return n, m.start() + 1
    raise AssertionError("no max in relu's printout")


def _dropout(rng, rate, x):
    """Haiku's hk.dropout: keep * x / keep_rate with keep ~ Bernoulli(1 - rate)."""
    keep_rate = 1.0 - rate
    keep = jax.random.bernoulli(rng, keep_rate, shape=x.shape)
    return keep * x / keep_rate


def _haiku_style_mlp(w1, b1, w2, b2, key, x, y):
    """hk.nets.MLP([64, 10])(x, dropout_rate=0.2, rng=...): Linear, dropout, relu per
    hidden layer; softmax cross-entropy.  (One hidden layer: its dropout and relu are what
    the float64 copy and the kinks are about; a second one made the compiles 1.5 times
    as long.)"""
    h = jax.nn.relu(_dropout(key, 0.2, x @ w1 + b1))
    logits = h @ w2 + b2
    return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * y, -1))


@pytest.mark.parametrize("seed", ["0", "2"])
def test_mlp_with_dropout_passes_in_float64(tmp_path, seed):
    rng = np.random.default_rng(1)
    shapes = [(32, 64), (64,), (64, 10), (10,)]
    params = [rng.normal(size=s).astype(np.float32) / 4 for s in shapes]
    x = rng.normal(size=(16, 32)).astype(np.float32)
    y = np.eye(10, dtype=np.float32)[np.arange(16) % 10]
    args = (*params, jax.random.PRNGKey(0), x, y)
    prog = _write(tmp_path, "mlp", _haiku_style_mlp, *args)
    r = _check_grad(str(prog), "--random", seed)
    assert r.exit_code == 0, r.output
    assert len(re.findall(r" pass\s*$", r.output, re.M)) == 3, r.output
    errors = [float(e) for e in re.findall(r"differences\s+([0-9.e+-]+)", r.output)]
    assert len(errors) == 2 and max(errors) < 1e-4, r.output  # float64 differences


def test_the_float64_copy_keeps_dropout_masks(tmp_path):
    """The float64 copy of a dropout program exists and draws the program's masks: its
    outputs equal JAX's on the float32 program to float32 rounding."""
    from jaxprtool.backend import evaluate
    from jaxprtool.text.parser import parse
    from jaxprtool.ui.widen import widen

    x = np.random.default_rng(2).normal(size=(4, 8)).astype(np.float32)
    key = jax.random.PRNGKey(3)
    fn = lambda k, a: _dropout(k, 0.5, a)  # noqa: E731
    prog = parse(str(jax.make_jaxpr(fn)(key, x)), "dropout").jaxpr
    wide = widen(prog)
    assert wide is not None
    (got,) = evaluate(wide, [np.asarray(key), x.astype(np.float64)], None)
    want = jax.jit(fn)(key, x)  # (jitted: one compilation, eagerly one a primitive)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6)
    assert np.asarray(got).dtype == np.float64


def test_branch_indicators_leave_out_what_the_step_cannot_move():
    """The finite differences' branch indicators (which branch each non-smooth equation
    takes at x - h v and x + h v) leave out the equations that no perturbed input reaches:
    the dropout mask's random bits (u32) and its bool take the same values at both ends.
    The relu's `max` on the perturbed input stays: which operand is larger."""
    from jaxprtool.text.parser import parse
    from jaxprtool.ui.checkgrad import kink_indicators

    x = np.linspace(-1, 1, 8, dtype=np.float32)
    fn = lambda k, a: _dropout(k, 0.5, jax.nn.relu(a))  # noqa: E731
    prog = parse(str(jax.make_jaxpr(fn)(jax.random.PRNGKey(3), x)), "dropout").jaxpr
    every = {str(v.type) for v in kink_indicators(prog)[0].outvars}
    moved = [str(v.type) for v in kink_indicators(prog, [1])[0].outvars]
    assert any(t.startswith("u32") for t in every), every  # (all of them: the random bits)
    assert moved == ["bool[8]"], moved


BROKEN_RULE = """
from jaxprtool.plugins import defjvp, register_impl, register_shape_rule


def same_type(in_types, params, out_hint):
    return [in_types[0]]


def broken_jvp(g, x, **params):
    raise ValueError("the plugin's rule is broken")


register_shape_rule("brokenrule", same_type)
register_impl("brokenrule", lambda x, **params: x * 2)
defjvp("brokenrule", broken_jvp)
"""


def test_an_internal_error_shows_its_traceback_under_debug(tmp_path):
    plugin = tmp_path / "broken_rules.py"
    plugin.write_text(BROKEN_RULE)
    prog = tmp_path / "f.jaxpr"
    prog.write_text("{ lambda ; a:f32[3]. let b:f32[3] = brokenrule a in (b,) }\n")
    for debug in (False, True):
        flags = ["--debug"] if debug else []
        r = _check_grad(str(prog), "--plugin", str(plugin), *flags)
        assert r.exit_code == 2, r.output
        assert "internal error: ValueError: the plugin's rule is broken" in r.output
        assert ("Traceback" in r.output) is debug, r.output


def test_invented_constants_are_said_and_their_values_pass(tmp_path):
    """Boolean-mask indexing: JAX prints the indices the mask makes (and a mask of their
    signs) as constants without values.  check-grad's random ones can break the gather's
    promise of in-bounds indices (the corpus's gather_fancy_indexing fails so), so
    it says that the constants were invented; with their values (`trace --consts-out`)
    every check passes, without the warning."""
    import contextlib

    from conftest import written_module

    source = (
        "import numpy as np\n"
        "def f(x):\n"
        "    return x[np.array([True, False, True, False, True])] * 2.0\n"
    )
    mod = written_module(tmp_path, "masked", source)
    prog, consts = tmp_path / "masked.jaxpr", tmp_path / "masked.npz"
    with contextlib.chdir(tmp_path):
        r = CliRunner().invoke(
            main,
            ["trace", f"{mod.__name__}:f", "--arg", "f32[5,4]", "-o", str(prog)]
            + ["--consts-out", str(consts)],
        )
    assert r.exit_code == 0, r.output
    with np.load(consts) as d:
        np.testing.assert_array_equal(d["const0"], [0, 2, 4])
    r = _check_grad(str(prog))
    assert "warning: check-grad: the program's constants (a:i32[3], b:bool[3])" in r.stderr
    assert "have no values in the text and get random ones (seed 0)" in r.stderr
    r = _check_grad(str(prog), "--consts", str(consts))
    assert r.exit_code == 0, r.output
    assert "check-grad: 1 file, 3 checks, 0 failures" in r.stdout
    assert "warning" not in r.stderr


COMPLEX_PROGRAMS = {
    "fft": (lambda c: jnp.fft.fft(c) * 1j, "c64"),
    "rfft": (lambda x: jnp.fft.rfft(jnp.sin(x)), "f32"),
    "irfft": (lambda c: jnp.fft.irfft(c * c), "c64"),
    "abs": (lambda c: jnp.abs(c) ** 2 + jnp.real(c * c), "c64"),
}


def _jvp_and_vjp(f):
    return jax.jit(lambda x, v, w: (jax.jvp(f, (x,), (v,))[1], jax.vjp(f, x)[1](w)))


def test_the_adjoint_pairing_is_jax_s():
    """JAX's vjp transposes its jvp under Re(sum(a * b)), without conjugation (its
    check_vjp conjugates the cotangent around the vjp for vdot): the pairing check-grad
    uses, which vdot is not on complex values."""
    from jaxprtool.ui.checkgrad import _pairing

    rng = np.random.default_rng(5)
    for f, dt in COMPLEX_PROGRAMS.values():
        x = rng.normal(size=8).astype(np.float32)
        if dt == "c64":
            x = (x + 1j * rng.normal(size=8)).astype(np.complex64)
        v = (rng.normal(size=8) + (1j * rng.normal(size=8) if dt == "c64" else 0)).astype(x.dtype)
        y = jax.eval_shape(f, x)
        w = rng.normal(size=y.shape)
        if jnp.iscomplexobj(y):
            w = w + 1j * rng.normal(size=y.shape)
        w = w.astype(y.dtype)
        # JAX's jvp and vjp, one jitted function (eagerly, one compilation a primitive)
        jv, (jtw,) = _jvp_and_vjp(f)(x, v, w)
        np.testing.assert_allclose(_pairing(w, jv), _pairing(jtw, v), rtol=1e-4)
        if jnp.iscomplexobj(y):  # (a real output's cotangent is real: there they agree)
            vdot = lambda a, b: np.real(np.vdot(a, b))  # noqa: E731
            assert not np.isclose(vdot(w, jv), vdot(jtw, v), rtol=1e-3)


#: `make test` runs the first and third (conftest.SAMPLED): a complex input with a real output
#: (abs) and a complex output (rfft, of the kind that failed); sorted, both were real outputs
@pytest.mark.parametrize("name", ["abs", "fft", "rfft", "irfft"])
def test_complex_programs_pass(tmp_path, name):
    """check-grad of complex programs (complex to complex, real to complex, complex to
    real): every check passes (those with complex outputs failed with the conjugating
    vdot)."""
    f, dt = COMPLEX_PROGRAMS[name]
    x = np.ones(8, np.complex64 if dt == "c64" else np.float32)
    prog = _write(tmp_path, name, f, x)
    r = _check_grad(str(prog))
    assert r.exit_code == 0, r.output
    assert "check-grad: 1 file, 3 checks, 0 failures" in r.stdout, r.stdout


def test_a_nan_at_the_point_makes_the_finite_difference_checks_inconclusive(tmp_path):
    """log of a negative input: the program is NaN there, as JAX's value is; the jvp
    check's NaN error counted as no error beside the finite output's (Python's max) and it
    passed; then both checks against finite differences failed; now (issue 46: a NaN point
    says nothing about the rules) both are inconclusive, saying that the point is not
    finite, and no check fails (the dot-product test of the derivative programs, finite
    there, passes)."""
    f = lambda x: (jnp.sin(x), jnp.log(x))  # noqa: E731
    x = np.array([0.5, -0.5], np.float32)
    assert np.isnan(np.asarray(jax.jit(f)(x)[1])).any()  # JAX's value there
    prog = _write(tmp_path, "log", f, x)
    args = tmp_path / "args.npz"
    np.savez(args, x)
    r = _check_grad(str(prog), "--args", str(args))
    assert r.exit_code == 0, r.output
    jvp, vjp, dot = (line for line in r.stdout.splitlines() if "log.jaxpr  " in line)
    assert jvp.endswith("inconclusive (NaN/inf at the point)"), r.stdout
    assert vjp.endswith("inconclusive (NaN/inf at the point)"), r.stdout
    assert dot.endswith("pass"), r.stdout  # the derivative programs are finite, and adjoint
    # reverse mode alone: the vjp program's run says that the point is not finite
    r = _check_grad(str(prog), "--args", str(args), "--modes", "rev")
    assert r.exit_code == 0, r.output
    (vjp,) = (line for line in r.stdout.splitlines() if "log.jaxpr  " in line)
    assert vjp.endswith("inconclusive (NaN/inf at the point)"), r.stdout


def test_stop_gradient_failures_say_that_finite_differences_see_through_it(tmp_path):
    """x * stop_gradient(x): JAX's gradient is x, finite differences give 2x; the checks
    against them fail naming the primitive, and the dot-product test passes."""
    f = lambda x: jnp.sum(x * jax.lax.stop_gradient(x))  # noqa: E731
    x = np.array([0.5, -1.5, 2.0], np.float32)
    np.testing.assert_allclose(jax.jit(jax.grad(f))(x), x)
    prog = _write(tmp_path, "stopped", f, x)
    r = _check_grad(str(prog))
    assert r.exit_code == 1, r.output
    jvp, vjp, dot = (line for line in r.stdout.splitlines() if "stopped.jaxpr  " in line)
    for line in (jvp, vjp):
        assert line.endswith("FAIL (stop_gradient: finite differences see through it)"), line
    assert dot.endswith("pass"), r.stdout


def test_an_eight_bit_float_inside_sets_the_adjoint_tolerance(tmp_path):
    """A float8 cast in the middle: JAX's own jvp and vjp satisfy the adjoint identity only
    to float8 rounding (beyond float32's 2e-5), and JAX's gradient tolerance for float8 is
    1e-1: check-grad's dot-product test uses it and passes."""
    from jaxprtool.ui.checkgrad import _pairing

    f8 = jnp.float8_e4m3fn
    f = lambda x: (x.astype(f8).astype(jnp.float32) * 3.0) ** 2  # noqa: E731
    rng = np.random.default_rng(0)
    x, v, w = (rng.normal(size=8).astype(np.float32) for _ in range(3))
    jv, (jtw,) = _jvp_and_vjp(f)(x, v, w)
    lhs, rhs = _pairing(w, jv), _pairing(jtw, v)
    assert 2e-5 < abs(lhs - rhs) / max(1.0, abs(lhs)) < 1e-1
    prog = _write(tmp_path, "f8", f, x)
    r = _check_grad(str(prog), "--modes", "fwd,rev")
    dot = next(line for line in r.stdout.splitlines() if "dot product" in line)
    assert "1e-01" in dot and dot.endswith("pass"), r.stdout
