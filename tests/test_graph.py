"""`jaxprtool graph`: DOT always, SVG through Graphviz when present."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from jaxprtool.cli import main

SAMPLES = Path(__file__).resolve().parents[1] / "samples"


def test_dot_has_every_equation_and_cluster(tmp_path):
    out = tmp_path / "g.dot"
    r = CliRunner().invoke(main, ["graph", str(SAMPLES / "cond.jaxpr"), "-o", str(out)])
    assert r.exit_code == 0, r.output
    dot = out.read_text()
    assert dot.startswith("digraph jaxpr {")
    for prim in ("gt", "convert_element_type", "cond", "exp", "sin", "mul", "reduce_sum"):
        assert f'label="{prim}' in dot, prim
    assert dot.count("subgraph cluster_") == 1
    again = tmp_path / "h.dot"
    CliRunner().invoke(main, ["graph", str(SAMPLES / "cond.jaxpr"), "-o", str(again)])
    assert again.read_bytes() == out.read_bytes(), "graph output must be deterministic"


def test_collapse_nested(tmp_path):
    out = tmp_path / "g.dot"
    r = CliRunner().invoke(
        main, ["graph", str(SAMPLES / "cond.jaxpr"), "-o", str(out), "--collapse-nested"]
    )
    assert r.exit_code == 0, r.output
    assert "subgraph" not in out.read_text()


@pytest.mark.skipif(
    shutil.which("dot") is None, reason="Graphviz `dot` not installed; SVG rendering untested"
)
def test_svg_rendering(tmp_path):
    out = tmp_path / "g.svg"
    r = CliRunner().invoke(main, ["graph", str(SAMPLES / "mlp.jaxpr"), "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert b"<svg" in out.read_bytes()


def test_missing_graphviz_message(tmp_path, monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    out = tmp_path / "g.svg"
    r = CliRunner().invoke(main, ["graph", str(SAMPLES / "mlp.jaxpr"), "-o", str(out)])
    assert r.exit_code == 1
    assert "error: rendering needs Graphviz's `dot` program" in r.output
    assert "graphviz" in r.output and not out.exists()
