"""The commands that run a program in-process work with the installed JAX, whichever it is
(0.10.0 in the floor run, `make test-floor`; 0.10.2, 0.11.0 and 0.12 by hand): on programs
that JAX traces here (`oldjax_programs.py`: tanh, asin, acos, atanh, a scan, a while loop, a
cond, a top_k), `check-grad`, `memory --of grad`, `explain`, `grad | run`, `vmap | run` and
the API's `run(grad(...))` succeed, with JAX's numbers (`jax.grad`, `jax.jvp`, `jax.vmap` of
the same function).  What the tool writes for such a program is the installed JAX's style:
nothing the installed JAX lacks.  Cheap (a few seconds): one small program of each kind.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from jax_oracle import close, run
from oldjax_programs import PROGRAMS, X

jax = pytest.importorskip("jax")

import jaxprtool as jt  # noqa: E402
from jaxprtool.backend import prims  # noqa: E402
from jaxprtool.record import records  # noqa: E402

NAMES = list(PROGRAMS)
T = np.array([0.5, -1.0, 0.25, 2.0], np.float32)
BATCH = np.stack([X, X * 0.5, -X]).astype(np.float32)
TOL = 1e-5


@pytest.fixture(scope="module")
def programs(tmp_path_factory):
    """name -> the file holding the installed JAX's printout of that program."""
    folder = tmp_path_factory.mktemp("installed")
    paths = {}
    for name, (f, _) in PROGRAMS.items():
        paths[name] = folder / f"{name}.jaxpr"
        paths[name].write_text(str(jax.make_jaxpr(f)(X)) + "\n")
    return paths


def _lacking() -> list[str]:
    """Primitives the tool knows that the installed JAX has not got."""
    return [n for n, r in records().items() if r.first_version and prims.lookup(n) is None]


def _ok(r):
    assert r.exit_code == 0, r.output
    return r


@pytest.mark.parametrize("name", NAMES)
def test_check_grad(programs, name):
    modes = [] if PROGRAMS[name][1] else ["--modes", "fwd"]
    r = _ok(run(["--no-color", "check-grad", str(programs[name]), *modes]))
    assert "FAIL" not in r.output


@pytest.mark.parametrize("name", NAMES)
def test_explain_and_memory(programs, name):
    mode = "grad" if PROGRAMS[name][1] else "jvp"
    _ok(run(["--no-color", "explain", str(programs[name]), "--mode", mode]))
    of = "grad" if PROGRAMS[name][1] else "linearize"
    r = _ok(run(["memory", "--of", of, "--json", str(programs[name])]))
    assert json.loads(r.stdout)["xla"]["argument_bytes"] > 0


@pytest.mark.parametrize("name", NAMES)
def test_grad_or_jvp_then_run(programs, name, tmp_path):
    """`grad f | run -` (jvp for the while loop, which JAX differentiates forward only)."""
    f, reverse = PROGRAMS[name]
    out = tmp_path / "d.jaxpr"
    _ok(run(["grad" if reverse else "jvp", str(programs[name]), "-o", str(out)]))
    text = out.read_text()
    for missing in _lacking():
        assert not re.search(rf"= {missing}\b", text), (
            f"the tool wrote '{missing}', which this JAX lacks"
        )
    values = (X,) if reverse else (X, T)
    np.savez(tmp_path / "a.npz", *values)
    res = tmp_path / "o.npz"
    _ok(run(["run", "-", "--args", str(tmp_path / "a.npz"), "-o", str(res)], stdin=text))
    # JAX's derivative, jitted: one compilation (eagerly, one a primitive)
    want = (
        [jax.jit(jax.grad(f))(X)] if reverse else jax.jit(lambda x, t: jax.jvp(f, (x,), (t,)))(X, T)
    )
    with np.load(res) as d:
        for k, w in enumerate(want):
            close(d[f"out{k}"], w, TOL)


@pytest.mark.parametrize("name", NAMES)
def test_vmap_then_run(programs, name, tmp_path):
    out = tmp_path / "v.jaxpr"
    _ok(run(["vmap", "--axis-size", "3", str(programs[name]), "-o", str(out)]))
    np.save(tmp_path / "b.npy", BATCH)
    res = tmp_path / "o.npy"
    _ok(run(["run", str(out), "--arg", str(tmp_path / "b.npy"), "-o", str(res)]))
    close(np.load(res), jax.jit(jax.vmap(PROGRAMS[name][0]))(BATCH), TOL)


@pytest.mark.parametrize("name", [n for n in NAMES if PROGRAMS[n][1]])
def test_api_run_of_grad(programs, name):
    g = jt.grad(jt.load(str(programs[name])))
    close(jt.run(g, X)[0], jax.jit(jax.grad(PROGRAMS[name][0]))(X), TOL)


def test_eager_run_of_jvp(programs, tmp_path):
    """`--eager` binds primitive by primitive: the same older forms."""
    out = tmp_path / "d.jaxpr"
    _ok(run(["jvp", str(programs["tanh"]), "-o", str(out)]))
    np.savez(tmp_path / "a.npz", X, T)
    res = tmp_path / "o.npz"
    _ok(run(["run", str(out), "--eager", "--args", str(tmp_path / "a.npz"), "-o", str(res)]))
    with np.load(res) as d:
        want = jax.jit(lambda x, t: jax.jvp(PROGRAMS["tanh"][0], (x,), (t,)))(X, T)
        for k, w in enumerate(want):
            close(d[f"out{k}"], w, TOL)
