"""explain at scale (issue 46, item 3): a program of more than 200 equations is
summarised per segment, --eqns A-B and --only PRIM show chosen steps one by one, and the
HTML page is made of collapsible sections.  The programs are traced by JAX here; the
derivative checks hold it to finite differences in float64."""

from __future__ import annotations

import re

import numpy as np
import pytest
from click.testing import CliRunner

from jaxprtool.cli import main

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402


def _invoke(*args):
    return CliRunner(env={"COLUMNS": "200"}).invoke(main, ["--no-color", *map(str, args)])


def _chain(x):
    """101 sin and 101 mul equations, one after the other: 203 equations with the sum."""
    for k in range(101):
        x = jnp.sin(x) * (1.0 + k / 1000)
    return jnp.sum(x)


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    path = tmp_path_factory.mktemp("scale") / "chain.jaxpr"
    path.write_text(str(jax.make_jaxpr(_chain)(np.ones(3, np.float32))))
    return path


def _steps(out: str) -> list[str]:
    return [ln for ln in out.splitlines() if ln.startswith("eqn ")]


def test_a_large_program_is_summarised_per_segment(chain):
    r = _invoke("explain", chain)
    assert r.exit_code == 0, r.output
    assert "forward steps per segment of primal equations" in r.stdout
    assert "reverse steps per segment of linear equations" in r.stdout
    first = next(ln for ln in r.stdout.splitlines() if ln.startswith("0-63 "))
    assert "sin x32, mul x32" in first and "defjvp x32, defbilinear x32" in first, r.stdout
    assert any(ln.startswith("192-202 ") for ln in r.stdout.splitlines()), r.stdout
    assert _steps(r.stdout) == []  # no step one by one
    assert "result: all checks pass" in r.stdout


def test_bad_eqns_is_a_usage_error(chain):
    r = _invoke("explain", chain, "--eqns", "9-3")
    assert r.exit_code == 2
    assert "expected A-B with A <= B" in r.output


def test_the_html_page_has_a_collapsible_section_per_stage_and_only_zooms(chain, tmp_path):
    page = tmp_path / "walk.html"
    r = _invoke("explain", chain, "--html", page, "--only", "mul", "--eqns", "0-9")
    assert r.exit_code == 0, r.output
    text = page.read_text()
    assert text.count("<details") == 6  # the title and five stages
    assert "<details><summary><b>1. Primal equations</b>" in text  # closed: 203 lines
    assert "<details open><summary><b>5. Derivative</b>" in text
    # --only mul within 0-9: the five mul steps, and their transposes in the reverse walk
    steps = re.findall(r"<span[^>]*>eqn (\d+)  </span><span[^>]*>([^<]*)</span>", text)
    assert [int(i) for i, _ in steps] == [1, 3, 5, 7, 9], steps
    assert all(" = mul " in eq for _, eq in steps), steps
    assert "tangents in:" in text  # values for the steps shown
    linear = re.findall(r"linear eqn \d+  </span><span[^>]*>([^<]*)</span>", text)
    assert linear and all(" = mul " in eq for eq in linear), linear
