"""Inputs the text does not place, on a 4-device CPU mesh (issue 25): JAX leaves a numpy
argument of `jax.jit` uncommitted and XLA's sharding propagation chooses its sharding; `run`
does the same.  One fresh process (`placement_cases.py`: 4 host devices, where this one has
8) runs JAX and the tool on each case; here `--show-sharding` is compared line by line with
`compiled.input_shardings` and the outputs' `.sharding`, the values with JAX's, and the
arguments' shardings in `compile --emit stablehlo` with those of `jax.jit(f).lower(...)`."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("jax")
from jax_oracle import close  # noqa: E402
from placement_cases import CASES  # noqa: E402

TESTS = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """The fresh process runs once per session: xdist's workers share its output folder
    in the session's temporary folder, the first to take the lock running it."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    out = root / "placement"
    with open(root / "placement.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (out / "result.json").exists():
            out.mkdir(exist_ok=True)
            _run_cases(out)
    return out, json.loads((out / "result.json").read_text())


def _run_cases(out: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env.update(JAX_PLATFORMS="cpu", PYTHONPATH=os.pathsep.join([str(TESTS.parent), str(TESTS)]))
    p = subprocess.run(
        [sys.executable, str(TESTS / "placement_cases.py"), str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr[-3000:]


@pytest.mark.parametrize("name", list(CASES))
def test_show_sharding_and_values_are_jax_s(results, name):
    out, all_cases = results
    case = all_cases[name]
    assert case["tool_exit"] == 0, case["tool"]
    want = []
    for i, s in enumerate(case["inputs"]):
        chosen = case["chosen_by_xla"] and i not in case["placed"] and not s.startswith("unused")
        want.append(f"arg{i}: {s}{', chosen by XLA' if chosen else ''}")
    want += [f"out{i}: {s}" for i, s in enumerate(case["outputs"])]
    shown = [ln for ln in case["tool"].splitlines() if ln.startswith(("arg", "out"))]
    assert shown == want, case["tool"]
    got, jax_outs = np.load(out / f"{name}_tool.npz"), np.load(out / f"{name}_jax.npz")
    assert sorted(got.files) == sorted(jax_outs.files)
    for k in jax_outs.files:
        close(got[k], jax_outs[k])


@pytest.mark.parametrize(
    "name", [n for n, c in CASES.items() if c[5] == "jit" and "--repeat" not in c[4]]
)
def test_compile_leaves_the_same_arguments_unsharded_as_jax(results, name):
    _, all_cases = results
    case = all_cases[name]
    assert case["tool_arg_shardings"] == case["jax_arg_shardings"]


def test_the_cases_cover_what_the_tool_used_to_replicate(results):
    """The divergences the issue reported: before, these inputs were replicated and these
    outputs read P(); JAX's are sharded (so the comparisons above can fail)."""
    _, all_cases = results
    assert all_cases["rows"]["inputs"] == ["P('x',) over mesh x=4 (4 devices)"]
    assert all_cases["later"]["outputs"][1] == "P(None, 'x') over mesh x=4 (4 devices)"
    assert all_cases["replicated_reader_first"]["inputs"][0].startswith("P('x',)")
    assert all_cases["psum_plus"]["inputs"][1] == "P() over mesh x=4 (4 devices)"
    assert all_cases["later_eager"]["outputs"][1] == "single device cpu:0"
