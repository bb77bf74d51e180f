"""`run --profile DIR`: the device time of each XLA operation, with the equations of the file
it computes (issue 39, item 15).  The times are the trace's own (JAX's profiler, read here
independently); the operations and equations are those of `compile --emit optimized-hlo`."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from jaxprtool.cli import main
from jaxprtool.ui import profile_table

MLP = (Path(__file__).parent / "data" / "device" / "mlp_tanh.jaxpr").read_text()

HLO = """\
HloModule jit_f, is_scheduled=true

%region_0 (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %add.9 = f32[] add(%x, %y), metadata={op_name="jit(f)/f.jaxpr:9:5/reduce_sum"}
}

%fused_computation (p: f32[4]) -> f32[] {
  %p = f32[4]{0} parameter(0)
  %tanh.0 = f32[4]{0} tanh(%p), metadata={op_name="jit(f)/f.jaxpr:8:5/tanh"}
  %c = f32[] constant(0)
  ROOT %r = f32[] reduce(%tanh.0, %c), dimensions={0}, to_apply=%region_0, metadata={op_name="jit(f)/f.jaxpr:9:5/reduce_sum"}
}

%body (s: f32[4]) -> f32[4] {
  %s = f32[4]{0} parameter(0)
  ROOT %sin.1 = f32[4]{0} sine(%s), metadata={op_name="jit(f)/while/body/f.jaxpr:4:11/sin"}
}

%cond (t: f32[4]) -> pred[] {
  %t = f32[4]{0} parameter(0)
  ROOT %k = pred[] constant(false)
}

ENTRY %main (a.1: f32[4]) -> f32[] {
  %a.1 = f32[4]{0} parameter(0), metadata={op_name="a"}
  %while.2 = f32[4]{0} while(%a.1), condition=%cond, body=%body, metadata={op_name="jit(f)/f.jaxpr:3:5/while"}
  ROOT %tanh_reduce_fusion = f32[] fusion(%while.2), kind=kLoop, calls=%fused_computation, metadata={op_name="jit(f)/f.jaxpr:9:5/reduce_sum"}
}
"""


def test_the_hlo_says_which_equations_each_operation_computes():
    hlo = profile_table.read_hlo(HLO)
    assert hlo.module == "jit_f"
    assert hlo.entry == ["a.1", "while.2", "tanh_reduce_fusion"]
    assert profile_table.equations_of(hlo, "tanh_reduce_fusion") == [
        "f.jaxpr:8:5 tanh",
        "f.jaxpr:9:5 reduce_sum",
    ]
    assert profile_table.equations_of(hlo, "while.2") == ["f.jaxpr:3:5 while", "f.jaxpr:4:11 sin"]
    assert profile_table.equations_of(hlo, "a.1") == []
    owner = profile_table.top_level_of(hlo)
    assert owner["sin.1"] == "while.2" and owner["add.9"] == "tanh_reduce_fusion"


def test_a_loop_body_timed_alone_counts_toward_its_loop(tmp_path):
    hlo = profile_table.read_hlo(HLO)
    trace = tmp_path / "t.trace.json.gz"
    events = [
        {"ph": "X", "name": n, "dur": d, "args": {"hlo_op": n, "hlo_module": "jit_f"}}
        for n, d in (("sin.1", 2.0), ("sin.1", 3.0), ("tanh_reduce_fusion", 7.0))
    ]
    events.append({"ph": "X", "name": "x", "dur": 99.0, "args": {"hlo_op": "x", "hlo_module": "g"}})
    with gzip.open(trace, "wt") as f:
        json.dump({"traceEvents": events}, f)
    assert profile_table.op_times(trace, hlo) == {
        "while.2": (5.0, 2),
        "tanh_reduce_fusion": (7.0, 1),
    }


def _trace_durations(folder) -> dict[str, list[float]]:
    (path,) = list(folder.glob("plugins/profile/*/*.trace.json.gz"))
    with gzip.open(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    out: dict[str, list[float]] = {}
    for e in events:
        op = (e.get("args") or {}).get("hlo_op")
        if e.get("ph") == "X" and op:
            out.setdefault(op, []).append(e["dur"])
    return out


def test_run_profile_prints_each_operations_time_and_equations(tmp_path):
    pytest.importorskip("jax")
    prog = tmp_path / "mlp.jaxpr"
    prog.write_text(MLP)
    folder = tmp_path / "prof"
    runner = CliRunner()
    r = runner.invoke(
        main, ["run", str(prog), "--random", "0", "--repeat", "3", "--profile", str(folder)]
    )
    assert r.exit_code == 0, r.output
    hlo_text = runner.invoke(main, ["compile", str(prog), "--emit", "optimized-hlo"]).output
    rows = re.findall(r"^\s+([\d.]+) ms\s+[\d.]+%\s+(\d+)\s+(\S+)\s+(.*)$", r.stderr, re.M)
    assert rows, r.stderr
    durations = _trace_durations(folder)
    equations = set()
    for ms, calls, op, eqns in rows:
        assert f"%{op} = " in hlo_text  # an operation of the executable XLA compiled
        assert int(calls) == len(durations[op]) == 3  # once per run
        assert float(ms) == pytest.approx(sum(durations[op]) / 1e3, abs=1.5e-3)
        equations.update(eqns.split(", "))
    # every equation of the file is computed by one of the operations timed
    assert {f"mlp.jaxpr:{n}:5" for n in range(2, 7)} - {e.split(" ")[0] for e in equations} <= {
        "mlp.jaxpr:3:5"  # broadcast_in_dim: XLA may fold it into its readers' indexing
    }
    assert "mlp.jaxpr:2:5 dot_general" in equations


def test_run_profile_eager_says_there_is_no_table(tmp_path):
    pytest.importorskip("jax")
    prog = tmp_path / "mlp.jaxpr"
    prog.write_text(MLP)
    r = CliRunner().invoke(
        main, ["run", str(prog), "--random", "0", "--eager", "--profile", str(tmp_path / "p")]
    )
    assert r.exit_code == 0, r.output
    assert "profile: no per-equation table: the program ran op by op (--eager)" in r.stderr


DEVICE = Path(__file__).parent / "data" / "device"


def test_a_tpu_trace_times_the_operations_of_its_device_thread(tmp_path):
    """A TPU's trace names no `hlo_op`: its operations are the events of the device's "XLA
    Ops" thread, named after them, inside the module's event on its "XLA Modules" thread.
    The data are the TPU's (v5e, JAX 0.10.2, 2026-12-06): `compile --emit optimized-hlo
    --device tpu` of mlp_tanh.jaxpr, and the device's events of `run --profile` there; an
    operation of another module run later is added here and must not count."""
    hlo = profile_table.read_hlo((DEVICE / "mlp_tanh.tpu.hlo").read_text())
    with gzip.open(DEVICE / "mlp_tanh.tpu.trace.json.gz", "rt") as f:
        trace = json.load(f)
    later = 691100.0
    trace["traceEvents"] += [
        {"ph": "X", "pid": 3, "tid": 2, "ts": later, "dur": 5.0, "name": "jit_other(1)"},
        {"ph": "X", "pid": 3, "tid": 3, "ts": later + 1, "dur": 4.0, "name": "fusion.1"},
    ]
    path = tmp_path / "tpu.trace.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump(trace, f)
    # the durations JAX's profiler wrote for this module's three operations
    assert profile_table.op_times(path, hlo) == {
        "copy-start": (0.01375, 1),
        "copy-done": (0.30625, 1),
        "fusion.1": (0.746328, 1),
    }
    lines = profile_table.render(hlo, profile_table.op_times(path, hlo), path)
    (fusion,) = [ln for ln in lines if "fusion.1" in ln]
    found = re.findall(r"mlp_tanh\.jaxpr:(\d+):(\d+) (\w+)", fusion)
    assert len(found) == 4  # the dot, the bias, tanh and the sum: one fusion on the TPU
    text = MLP.splitlines()
    for line, col, prim in found:  # each is the file's equation at that place
        assert text[int(line) - 1][int(col) - 1 :].split(" = ")[1].startswith(prim), (line, prim)
