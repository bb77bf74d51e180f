"""The README's first example block runs as written (issue 39, item 16), after `make demo`: each command, each
pipeline (`a | b`, standard output fed to the next) and each `;`-separated command exits 0,
run in-process from a copy of `samples/`.  The expected value its `run --expected-output`
line gives is JAX's own (checked here against the function the sample was traced from)."""

from __future__ import annotations

import re
import shlex
import shutil
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from jaxprtool.cli import main

ROOT = Path(__file__).resolve().parents[1]


def _commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = re.search(r"```\n(jaxprtool .*?)```", text, re.S).group(1)
    out = []
    for line in block.splitlines():
        line = re.sub(r"\s+#.*$", "", line)
        out += [c.strip() for c in line.split(" ; ") if c.strip()]
    return out


def _run_pipeline(pipeline: str):
    data = None
    for stage in pipeline.split(" | "):
        argv = shlex.split(stage)
        assert argv[0] == "jaxprtool", stage
        r = CliRunner().invoke(main, ["--no-color", *argv[1:]], input=data)
        assert r.exit_code == 0, f"{stage}\n{r.output}"
        data = r.stdout
    return data


@pytest.mark.parametrize("command", _commands())
def test_the_readme_example_runs(command, tmp_path, monkeypatch):
    """As after `make demo` (issue 45, item 13): the tool and JAX, but neither matplotlib
    (`make test`'s) nor Graphviz's `dot` (a system package)."""
    shutil.copytree(ROOT / "samples", tmp_path / "samples")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib fails
    (tmp_path / "bin").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))  # no `dot` found
    _run_pipeline(command)


def test_the_expected_output_in_the_readme_is_jaxs():
    import jax.numpy as jnp

    line = next(c for c in _commands() if "--expected-output" in c)
    want = float(re.search(r"--expected-output 'f32\[\]=([0-9.]+)'", line).group(1))
    w, x, y = jnp.full((4, 2), 0.5), jnp.array([1.0, 2, 3, 4]), jnp.array([0.0, 1])
    assert abs(float(jnp.sum((jnp.tanh(x @ w) - y) ** 2)) - want) <= 1e-5 * want
