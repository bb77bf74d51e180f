"""`jaxprtool graph`: DOT written by the graphviz package, SVG through Graphviz when present.

The rendering tests read the SVG: the text elements of each node, and the edges."""

from __future__ import annotations

import itertools
import re
import shutil
import string
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner

from jaxprtool.cli import main

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
SVG = "{http://www.w3.org/2000/svg}"
needs_dot = pytest.mark.skipif(
    shutil.which("dot") is None, reason="Graphviz `dot` not installed; SVG rendering untested"
)

WHILE = """\
{ lambda ; a:f32[3] b:i32[]. let
    _:i32[] c:f32[3] = while[
      body_jaxpr={ lambda ; d:f32[3] e:i32[] f:f32[3]. let
          g:i32[] = add e 1:i32[]
          h:f32[3] = mul f d
        in (g, h) }
      body_nconsts=1
      cond_jaxpr={ lambda ; i:i32[] j:i32[] k:f32[3]. let
          l:bool[] = lt j i
        in (l,) }
      cond_nconsts=1
    ] b a 0:i32[] a
  in (c,) }
"""


def _graph(args, input=None):
    return CliRunner().invoke(main, ["graph", *args], input=input)


def _edges(dot: str) -> set[tuple[str, str]]:
    return set(re.findall(r"^\s*(\w+) -> (\w+)", dot, re.M))


def _labels(dot: str) -> dict[str, str]:
    return dict(re.findall(r'^\s*(\w+) \[label="((?:[^"\\]|\\.)*)"', dot, re.M))


def _svg_nodes(path: Path) -> dict[str, list[str]]:
    """node id (its <title>) -> the strings of its <text> elements, in order."""
    root = ET.parse(path).getroot()
    nodes = {}
    for g in root.iter(f"{SVG}g"):
        if g.get("class") == "node":
            title = g.find(f"{SVG}title").text
            nodes[title] = [t.text or "" for t in g.iter(f"{SVG}text")]
    return nodes


def _svg_edges(path: Path) -> set[tuple[str, str]]:
    root = ET.parse(path).getroot()
    out = set()
    for g in root.iter(f"{SVG}g"):
        if g.get("class") == "edge":
            a, _, b = g.find(f"{SVG}title").text.partition("->")
            out.add((a, b))
    return out


def test_dot_on_stdout_without_output():
    r = _graph([str(SAMPLES / "cond.jaxpr")])
    assert r.exit_code == 0, r.output
    assert r.output.startswith("digraph jaxpr {")
    labels = _labels(r.output)
    # primitive, then the result type on the next line (DOT's \n escape, not a doubled one)
    assert labels and all("\\\\" not in v for v in labels.values())
    assert "reduce_sum\\nk:f32[]" in labels.values()
    again = _graph([str(SAMPLES / "cond.jaxpr")])
    assert again.output == r.output, "graph output must be deterministic"


def test_cond_branches_are_wired_to_the_operands():
    r = _graph([str(SAMPLES / "cond.jaxpr")])
    dot, labels, edges = r.output, _labels(r.output), _edges(r.output)
    assert dot.count("subgraph cluster_") == 2  # one per branch
    (call,) = [n for n, v in labels.items() if v.startswith("cond\\n")]
    # `a` feeds each branch's input (`f`, `h`: the file's names, one per value)
    top_in0 = next(n for n, v in labels.items() if v == "a:f32[3]")
    branch_ins = [n for n, v in labels.items() if v in ("f:f32[3]", "h:f32[3]")]
    assert len(branch_ins) == 2
    assert all((top_in0, b) in edges for b in branch_ins)
    assert sorted(labels.values()) == sorted(
        ["a:f32[3]", "b:i32[]", "0:i32[]", "gt\\nc:bool[]", "convert_element_type\\nd:i32[]",
         "cond\\ne:f32[3]", "f:f32[3]", "exp\\ng:f32[3]", "h:f32[3]", "sin\\ni:f32[3]",
         "2.0:f32[]", "mul\\nj:f32[3]", "reduce_sum\\nk:f32[]", "out0 = k:f32[]"]
    )  # fmt: skip
    # each branch's output (exp, mul) leads to the call node; the index goes straight in
    exp = next(n for n, v in labels.items() if v.startswith("exp\\n"))
    mul = next(n for n, v in labels.items() if v.startswith("mul\\n"))
    conv = next(n for n, v in labels.items() if v.startswith("convert_element_type\\n"))
    assert {(exp, call), (mul, call), (conv, call)} <= edges
    # the cond's result feeds reduce_sum
    red = next(n for n, v in labels.items() if v.startswith("reduce_sum\\n"))
    assert (call, red) in edges


def test_while_bodies_bind_their_consts_and_carry():
    r = _graph(["-"], input=WHILE)
    assert r.exit_code == 0, r.output
    labels, edges = _labels(r.output), _edges(r.output)
    # the program's own inputs come first in the DOT text
    a, b = (next(n for n, v in labels.items() if v == lbl) for lbl in ("a:f32[3]", "b:i32[]"))
    ins = {n: v for n, v in labels.items() if n.startswith("in") and n not in (a, b)}
    feeds = {}
    for src, dst in edges:
        if dst in ins:
            feeds.setdefault(src, set()).add(ins[dst])
    # cond binds (b; carry) as i, j, k, body binds (a; carry) as d, e, f: a feeds the body's
    # const d and both carries' f32[3] (f, k)
    assert feeds[b] == {"i:i32[]"}
    assert feeds[a] == {"d:f32[3]", "f:f32[3]", "k:f32[3]"}


def test_collapse_nested():
    r = _graph([str(SAMPLES / "cond.jaxpr"), "--collapse-nested"])
    assert r.exit_code == 0, r.output
    assert "subgraph" not in r.output


def test_huge_graph_refused_up_front():
    n = 6000
    names = ["".join(t) for t in itertools.product(string.ascii_lowercase, repeat=3)][:n]
    lines = ["{ lambda ; a:f32[]. let"]
    prev = "a"
    for v in names:
        lines.append(f"    {v}:f32[] = sin {prev}")
        prev = v
    lines.append(f"  in ({prev},) }}")
    text = "\n".join(lines) + "\n"
    t0 = time.process_time()
    r = _graph(["-", "-o", "never.svg"], input=text)
    assert r.exit_code == 1
    assert "error:" in r.output and "--max-nodes" in r.output and "Traceback" not in r.output
    assert time.process_time() - t0 < 30
    small = _graph([str(SAMPLES / "mlp.jaxpr"), "--max-nodes", "3"])
    assert small.exit_code == 1 and "more than 3 nodes" in small.output
    ok = _graph(["-", "--max-nodes", "7000"], input=text)
    assert ok.exit_code == 0, ok.output[:300]


@needs_dot
def test_svg_labels_have_primitive_and_type_on_separate_lines(tmp_path):
    out = tmp_path / "g.svg"
    r = _graph([str(SAMPLES / "mlp.jaxpr"), "-o", str(out)])
    assert r.exit_code == 0, r.output
    nodes = _svg_nodes(out)
    texts = [t for ts in nodes.values() for t in ts]
    assert texts and not any("\\" in t for t in texts), [t for t in texts if "\\" in t]
    # the first dot_general of mlp.jaxpr: f32[5,4] x f32[4,8] -> f32[5,8]
    assert ["dot_general", "g:f32[5,8]"] in nodes.values()
    assert ["tanh", "j:f32[5,8]"] in nodes.values()
    assert ["out0 = q:f32[]"] in nodes.values()
    assert ["e:f32[5,4]"] in nodes.values()  # an input: its name and type


@needs_dot
def test_svg_of_nested_program_is_connected(tmp_path):
    out = tmp_path / "g.svg"
    r = _graph([str(SAMPLES / "cond.jaxpr"), "-o", str(out)])
    assert r.exit_code == 0, r.output
    nodes, edges = _svg_nodes(out), _svg_edges(out)
    into = {b for _, b in edges}
    # every node but the program's own inputs and literals has an incoming edge
    for n, texts in nodes.items():
        if n.startswith("lit") or n in ("in1", "in2"):  # literals, the program's inputs
            continue
        assert n in into, (n, texts)
    assert ["exp", "g:f32[3]"] in nodes.values() and ["cond", "e:f32[3]"] in nodes.values()


def test_missing_graphviz_message(tmp_path, monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    out = tmp_path / "g.svg"
    r = _graph([str(SAMPLES / "mlp.jaxpr"), "-o", str(out)])
    assert r.exit_code == 1
    assert "error: rendering needs Graphviz's `dot` program" in r.output
    assert "graphviz" in r.output and not out.exists()


def test_unknown_format_is_usage_error(tmp_path):
    r = _graph([str(SAMPLES / "mlp.jaxpr"), "-o", str(tmp_path / "g.jpeg")])
    assert r.exit_code == 2 and "unknown graph format" in r.output
