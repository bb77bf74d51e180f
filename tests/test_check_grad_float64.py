"""check-grad judges the rules, not the round-off (issue 46): the derivative programs run
in float64 copies, the program's own float32 precision (and JAX's) is reported beside the
verdict, and the random point is drawn as the program needs it (indices in range, positive
logs, weights scaled by their fan-in), kept by --save-inputs.

The programs are traced by JAX here; JAX computes the expected values at the saved point."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from jaxprtool.cli import main

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench" / "device"))
import models  # noqa: E402  (the TPU script's transformer)


def _invoke(*args):
    return CliRunner(env={"COLUMNS": "200"}).invoke(main, ["--no-color", *map(str, args)])


def _write(tmp_path, name, fn, *args) -> Path:
    path = tmp_path / f"{name}.jaxpr"
    path.write_text(str(jax.make_jaxpr(fn)(*args)))
    return path


def cross_entropy(logits, labels):
    """Softmax cross-entropy with integer labels (take_along_axis: a gather)."""
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=-1))


def _transformer(tmp_path, layers: int, d: int, s: int = 8, heads: int = 4) -> Path:
    ws = []
    for _ in range(layers):
        ws += [np.zeros(sh, np.float32) for sh in [(d, d)] * 4 + [(d, 4 * d), (4 * d, d)]]
    x = np.zeros((1, s, d), np.float32)
    return _write(tmp_path, f"transformer{layers}x{d}", models.transformer(heads), x, *ws)


@pytest.fixture(scope="module")
def ce(tmp_path_factory):
    """The cross-entropy program, and its `check-grad --json` at its own random point (one
    call for the two tests that read it)."""
    prog = _write(
        tmp_path_factory.mktemp("ce"),
        "ce",
        cross_entropy,
        np.zeros((4, 3), np.float32),
        np.zeros(4, np.int32),
    )
    return prog, _invoke("check-grad", prog, "--json")


def test_cross_entropy_with_integer_labels_passes_at_its_own_random_point(ce, tmp_path):
    """The labels index 3 classes: drawn from [1, 5) the gather read out of range, the
    loss was NaN and both checks FAILed; drawn in [0, 3) every check passes, and `run
    --random 0` gives JAX's loss at the point it saves."""
    prog, r = ce
    assert r.exit_code == 0, r.output
    checks = json.loads(r.stdout)["files"][0]["checks"]
    assert [c["result"] for c in checks] == ["pass"] * 3, checks
    assert all(np.isfinite(c["error"]) for c in checks), checks
    assert "nan" not in r.stdout.lower(), r.stdout
    assert "integers in [0, 3) (gather at" in r.stderr, r.stderr
    point, out = tmp_path / "point.npz", tmp_path / "out.npz"
    r = _invoke("run", prog, "--random", 0, "--save-inputs", point, "-o", out)
    assert r.exit_code == 0, r.output
    assert "seed 0" in r.stderr and str(point) in r.stderr, r.stderr
    saved = np.load(point, allow_pickle=False)
    labels = saved["arg1"]
    assert labels.min() >= 0 and labels.max() < 3
    want = jax.jit(cross_entropy)(saved["arg0"], labels)  # (one compilation: not one an op)
    got = np.load(out, allow_pickle=False)["out0"]
    assert np.isfinite(got)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_explain_of_the_cross_entropy_passes(ce):
    prog, _ = ce
    r = _invoke("explain", prog)
    assert r.exit_code == 0, r.output
    assert "result: all checks pass" in r.stdout, r.stdout[-2000:]


def test_the_verdict_is_judged_in_float64_and_the_own_precision_reported(ce):
    """Every check judged in float64, the float32 derivative's distance from it and JAX's
    own (information) in the JSON: the cross-entropy's report (a 1-layer transformer's
    compiles took 2.4 CPU-s; the issue's transformers are checked so in `make test-full`:
    test_transformers_of_the_issue_pass)."""
    _, r = ce
    assert r.exit_code == 0, r.output
    checks = json.loads(r.stdout)["files"][0]["checks"]
    assert [c["result"] for c in checks] == ["pass"] * 3
    assert all(c["judged_in"] == "f64" for c in checks)
    # float64 judges the rules: far below float32's round-off, which is reported apart
    assert all(c["error"] < 1e-6 for c in checks), checks
    assert all(c["own_error"] is not None for c in checks)
    assert all(c["error"] < c["own_error"] for c in checks), checks
    assert checks[0]["jax_error"] is not None


@pytest.mark.slow
@pytest.mark.parametrize("layers, d", [(2, 512), (8, 256)])
def test_transformers_of_the_issue_pass(tmp_path, layers, d):
    """The issue's 2-layer width-512 transformer (16 tokens) failed at 1.14e-2 in float32
    (and its dot-product test at 6.6e-5); in float64 each check is below 1e-6."""
    prog = _transformer(tmp_path, layers, d, s=16)
    r = _invoke("check-grad", prog, "--json")
    assert r.exit_code == 0, r.output
    checks = json.loads(r.stdout)["files"][0]["checks"]
    assert all(c["result"] == "pass" and c["error"] < 1e-6 for c in checks), checks


def _needs(x, w, i, labels):
    """A log (positive x), a dynamic slice at i, a one-hot of labels (eq with iota) and a
    matrix product (w scaled by its fan-in)."""
    one_hot = (labels[:, None] == jnp.arange(6)[None, :]).astype(jnp.float32)
    part = jax.lax.dynamic_slice(x, (i,), (3,))
    return jnp.sum(jnp.log(x)) + jnp.sum(part) + jnp.sum(jnp.tanh(one_hot @ w))


def test_inputs_are_drawn_as_the_program_needs_them(tmp_path):
    """--save-inputs keeps the point; each input is drawn as the program uses it, and the
    note names the seed and what was drawn."""
    args = (
        np.ones(10, np.float32),
        np.zeros((6, 64), np.float32),
        np.int32(0),
        np.zeros(5, np.int32),
    )
    prog = _write(tmp_path, "needs", _needs, *args)
    point = tmp_path / "p.npz"
    # (the point is drawn before any check: forward mode alone, half the compiles)
    r = _invoke("check-grad", prog, "--random", 3, "--save-inputs", point, "--modes", "fwd")
    assert r.exit_code == 0, r.output
    assert "seed 3" in r.stderr, r.stderr
    p = np.load(point, allow_pickle=False)
    assert (p["arg0"] > 0).all()  # log
    assert 0 <= int(p["arg2"]) <= 10 - 3  # dynamic_slice's start
    assert p["arg3"].min() >= 0 and p["arg3"].max() < 6  # compared with iota(6)
    # w multiplied directly: N(0, 1) / sqrt(6) (its product contracts 6 values)
    assert 0.25 < float(np.std(p["arg1"])) < 0.55
    # the same point read back gives the same verdicts
    again = _invoke("check-grad", prog, "--args", point, "--random", 3, "--modes", "fwd")
    assert again.exit_code == 0, again.output


def test_save_inputs_takes_one_file(tmp_path):
    prog = _write(tmp_path, "sin", jnp.sin, np.ones(3, np.float32))
    r = _invoke("check-grad", prog, prog, "--save-inputs", tmp_path / "p.npz")
    assert r.exit_code == 2
    assert "--save-inputs keeps the point of one FILE, got 2" in r.output
    assert not (tmp_path / "p.npz").exists()


def test_a_point_the_finite_differences_cannot_resolve_is_inconclusive(tmp_path):
    """tanh(1e6 x) at x = 1e-6: the step (1e-5) crosses the whole of tanh, so the finite
    differences at h and h/2 disagree as much as with the (right) derivative: the checks
    against them FAILed; now they are inconclusive, saying why, and nothing fails."""
    f = lambda x: jnp.tanh(1e6 * x)  # noqa: E731
    prog = _write(tmp_path, "steep", f, np.ones(2, np.float32))
    point = tmp_path / "x.npz"
    np.savez(point, arg0=np.array([1e-6, -2e-6], np.float32))
    r = _invoke("check-grad", prog, "--args", point)
    assert r.exit_code == 0, r.output
    rows = [ln for ln in r.stdout.splitlines() if ln.startswith("steep.jaxpr  ")]
    assert len(rows) == 3, r.stdout
    for row in rows[:2]:
        assert "inconclusive (finite differences do not settle at the point" in row, row
    assert rows[2].endswith("pass"), rows[2]  # the adjoint identity needs no differences


def test_scatter_indices_are_drawn_within_the_operand():
    """x.at[i].add(u) into 3 places: i in [0, 3), as the integers a gather reads."""
    import jaxprtool.api as jt
    from jaxprtool.draw import input_needs

    f = lambda x, i, u: jnp.sum(jnp.sin(x.at[i].add(u)))  # noqa: E731
    text = str(jax.make_jaxpr(f)(np.ones(3, np.float32), np.zeros(4, np.int32), np.ones(4)))
    j = jt.parse(text).jaxpr
    x, i, u = input_needs(j, j.invars)
    assert x is None and u is None
    assert i.index_bound == 3 and "scatter-add at" in i.describe(), i.describe()
