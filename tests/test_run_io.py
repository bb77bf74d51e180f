"""`run` for scripts and CI: inline --input, --expected-output with --rtol/--atol,
--print-values, --output-format.  Expected values come from numpy, never from the tool."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from jaxprtool.cli import main

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
SIN_COS = str(SAMPLES / "sin_cos.jaxpr")  # f(a, b) = sin(a) * cos(b) + a

#: two outputs of different dtypes: (a * 2 + b, argmax-like integer sum)
TWO = """\
{ lambda ; a:f32[2,3] b:f32[]. let
    c:f32[2,3] = mul a 2.0:f32[]
    d:f32[2,3] = add c b
    e:i32[2,3] = convert_element_type[new_dtype=int32 weak_type=False] d
    f:i32[] = reduce_sum[axes=(0, 1) out_sharding=None] e
  in (d, f) }
"""

A = np.arange(1, 7, dtype=np.float32).reshape(2, 3)


def sin_cos(a, b):
    return (np.sin(a) * np.cos(b) + a).astype(np.float32)


def two(a, b):
    d = (a * np.float32(2) + np.float32(b)).astype(np.float32)
    return d, np.int32(d.astype(np.int32).sum())


def invoke(*args, input=None):
    return CliRunner().invoke(main, ["--no-color", "run", *args], input=input)


@pytest.fixture
def two_file(tmp_path):
    p = tmp_path / "two.jaxpr"
    p.write_text(TWO)
    return str(p)


def test_inline_inputs_and_json(two_file):
    r = invoke(
        two_file, "--input", "f32[2,3]=1 2 3 4 5 6", "--input", "f32[]=0.5",
        "--output-format", "json",
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)["outputs"]
    d, f = two(A, 0.5)
    assert [o["name"] for o in data] == ["out0", "out1"]
    assert data[0]["dtype"] == "float32" and data[0]["shape"] == [2, 3]
    np.testing.assert_array_equal(np.array(data[0]["data"], np.float32), d)
    assert data[1] == {"name": "out1", "dtype": "int32", "shape": [], "data": int(f)}


def test_inline_splat_commas_and_bad_inputs(tmp_path):
    out = tmp_path / "o.npz"
    r = invoke(SIN_COS, "--input", "f32[3]=0.25,-1,2e-1", "--input", "f32[3]=3", "-o", str(out))
    assert r.exit_code == 0, r.output
    assert r.stdout == ""  # with -o: no table unless asked
    a = np.array([0.25, -1, 0.2], np.float32)
    want = sin_cos(a, np.full(3, 3, np.float32))
    np.testing.assert_allclose(np.load(out)["out0"], want, rtol=1e-6, atol=1e-6)
    for spec, why in [
        ("f32[3]=1 2", "2 values for 3 elements"),
        ("f32[3]=1 x 3", "'x' is not a number"),
        ("q7[3]=1", "unknown dtype 'q7'"),
        ("f32[3]", "expected TYPE=VALUES"),
        ("i8[2]=1 300", "300 does not fit int8"),
        ("bool[2]=true maybe", "'maybe' is not a boolean"),
    ]:
        r = invoke(SIN_COS, "--input", spec, "--input", "f32[3]=1")
        assert r.exit_code == 2 and why in r.output, (spec, r.output)
    # a well-formed input of the wrong type is the program's complaint (exit 1)
    r = invoke(SIN_COS, "--input", "f32[4]=1", "--input", "f32[3]=1")
    assert r.exit_code == 1 and "argument 0 (a): expected f32[3], got f32[4]" in r.output
    r = invoke(SIN_COS, "--input", "f32[3]=1", "--input", "f32[3]=1", "--random", "0")
    assert r.exit_code == 2 and "give only one of" in r.output


def test_input_from_a_file(tmp_path):
    a = tmp_path / "a.npy"
    np.save(a, np.array([1.5, 2.5, -3], np.float32))
    r = invoke(SIN_COS, "--input", f"@{a}", "--input", "f32[3]=0", "--output-format", "json")
    assert r.exit_code == 0, r.output
    got = np.array(json.loads(r.stdout)["outputs"][0]["data"], np.float32)
    np.testing.assert_allclose(got, sin_cos(np.load(a), np.zeros(3, np.float32)), 1e-6)


def test_expected_output_passes_and_fails(tmp_path, two_file):
    d, f = two(A, 0.5)
    ok = tmp_path / "ok.npz"
    np.savez(ok, out0=d, out1=f)
    args = [two_file, "--input", "f32[2,3]=1 2 3 4 5 6", "--input", "f32[]=0.5"]
    r = invoke(*args, "--expected-output", str(ok), "--print-values", "none")
    assert r.exit_code == 0, r.output
    assert r.stdout == "" and "all 2 outputs match" in r.stderr
    wrong = tmp_path / "wrong.npz"
    d2 = d.copy()
    d2[1, 2] += 0.01
    np.savez(wrong, out0=d2, out1=f + 1)
    r = invoke(*args, "--expected-output", str(wrong), "--print-values", "none")
    assert r.exit_code == 1
    assert "error: 2 of 2 outputs differ from" in r.stderr and "Traceback" not in r.output
    # a plain aligned table (not a terminal): a title, a header, one line per output
    lines = r.stdout.splitlines()
    assert lines[0] == f"outputs that differ from {wrong} (rtol=1e-05, atol=1e-08)"
    assert lines[1].split() == "output type differ max abs max rel first got expected".split()
    rows = {ln.split()[0]: f" {ln} " for ln in lines[2:]}
    assert set(rows) == {"out0", "out1"}
    assert "1/6" in rows["out0"] and "[1,2]" in rows["out0"]
    assert "0.01" in rows["out0"]  # the largest absolute error
    assert (
        "1/1" in rows["out1"]
        and f" {int(f)} " in rows["out1"]
        and f" {int(f) + 1} " in rows["out1"]
    )
    # within the tolerance the same file matches
    r = invoke(*args, "--expected-output", str(wrong), "--atol", "0.02", "--print-values", "none")
    assert r.exit_code == 1 and "the output" not in r.stderr and "1 of 2 outputs differ" in r.stderr
    short = tmp_path / "short.npz"
    np.savez(short, out0=d)
    r = invoke(*args, "--expected-output", str(short))
    assert r.exit_code == 1 and "holds 1 expected output; the program has 2" in r.stderr


def test_print_values_full_and_none(two_file):
    args = [two_file, "--input", "f32[2,3]=1 2 3 4 5 6", "--input", "f32[]=-0.25"]
    r = invoke(*args, "--print-values", "full")
    assert r.exit_code == 0, r.output
    d, f = two(A, -0.25)
    head0, body0, head1, body1 = re.split(r"^(out\d: .*=)\n", r.stdout, flags=re.M)[1:]
    assert head0 == "out0: f32[2,3] =" and head1 == "out1: i32[] ="
    got = np.array([float(x) for x in re.findall(r"-?\d+\.?\d*", body0)], np.float32)
    np.testing.assert_array_equal(got.reshape(2, 3), d)
    assert int(body1) == int(f)
    assert invoke(*args, "--print-values", "none").stdout == ""
    assert "2 outputs" in invoke(*args).stdout  # the summary table by default


def test_output_formats(tmp_path, two_file):
    args = [two_file, "--input", "f32[2,3]=1 2 3 4 5 6", "--input", "f32[]=0.5"]
    d, f = two(A, 0.5)
    folder = tmp_path / "outs"
    r = invoke(*args, "-o", str(folder), "--output-format", "npy-dir")
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in folder.iterdir()) == ["out0.npy", "out1.npy"]
    np.testing.assert_array_equal(np.load(folder / "out0.npy"), d)
    assert np.load(folder / "out1.npy") == f and np.load(folder / "out1.npy").dtype == np.int32
    npz = tmp_path / "o.npz"
    assert invoke(*args, "-o", str(npz), "--output-format", "npz").exit_code == 0
    np.testing.assert_array_equal(np.load(npz)["out0"], d)
    js = tmp_path / "o.json"
    assert invoke(*args, "-o", str(js)).exit_code == 0  # the format follows the name
    assert json.loads(js.read_text())["outputs"][1]["data"] == int(f)
    r = invoke(*args, "--output-format", "npy-dir")
    assert r.exit_code == 2 and "needs -o" in r.output
    blocker = tmp_path / "file"
    blocker.write_text("x")
    r = invoke(*args, "-o", str(blocker), "--output-format", "npy-dir")
    assert r.exit_code == 2 and "not a directory" in r.output


def test_json_non_finite_values(tmp_path):
    prog = tmp_path / "log.jaxpr"
    prog.write_text("{ lambda ; a:f32[3]. let b:f32[3] = log a in (b,) }\n")
    r = invoke(str(prog), "--input", "f32[3]=0 -1 1", "--output-format", "json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["outputs"][0]["data"] == ["-Infinity", "NaN", 0.0]


# ---------------------------------------------------------------- iree-run-module's spellings


def test_iree_input_spelling_and_inline_expected_outputs(two_file):
    """`2x3xf32=...` (iree-run-module) reads as `f32[2,3]=...`; `--expected-output` takes
    the outputs inline, `;`-separated, in either spelling (issue 27)."""
    d, f = two(A, 0.5)
    want_d = " ".join(repr(float(x)) for x in d.reshape(-1))
    ins = ["--input", "2x3xf32=[1 2 3][4 5 6]", "--input", "f32=0.5"]
    r = invoke(two_file, *ins, "--expected-output", f"f32[2,3]={want_d}; i32[]={int(f)}")
    assert r.exit_code == 0, r.output
    assert r.stderr.startswith("all 2 outputs match 'f32[2,3]=")
    r = invoke(
        two_file, *ins, "--expected-output", f"2x3xf32={want_d}; i32={int(f) + 1}",
        "--print-values", "none",
    )  # fmt: skip
    assert r.exit_code == 1
    assert "error: 1 of 2 outputs differ from '2x3xf32=" in r.stderr
    lines = r.stdout.splitlines()
    row = next(ln for ln in lines if ln.startswith("out1 "))
    assert row.split() == ["out1", "i32[]", "1/1", "1", f"{1 / (int(f) + 1):.3g}", "[]",
                           str(int(f)), str(int(f) + 1)]  # fmt: skip
    r = invoke(two_file, *ins, "--expected-output", "f32[2,3]=0")
    assert r.exit_code == 1
    assert (
        "--expected-output gives 1 output inline; the program has 2 (separate them with ';')"
        in r.stderr
    )
    one = invoke(SIN_COS, "--input", "3xf32=1 2 3", "--input", "3xf32=0.5", "--print-values", "none",
                 "--expected-output", "3xf32=" + " ".join(repr(float(x)) for x in sin_cos(
                     np.array([1, 2, 3], np.float32), np.float32(0.5))))  # fmt: skip
    assert one.exit_code == 0, one.output


def test_args_archive_keyed_by_the_programs_input_names(tmp_path):
    """`--args` keys may be the text's input names (as iree-run-module names inputs)."""
    prog = tmp_path / "ab.jaxpr"
    prog.write_text("{ lambda ; a:f32[3] b:f32[3]. let c:f32[3] = sub a b in (c,) }\n")
    a, b = np.arange(3, dtype=np.float32), np.ones(3, np.float32)
    np.savez(tmp_path / "named.npz", b=b, a=a)  # order in the archive does not matter
    r = CliRunner().invoke(
        main, ["run", str(prog), "--args", str(tmp_path / "named.npz"), "--output-format", "json"]
    )
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["outputs"][0]["data"] == list(a - b)
    np.savez(tmp_path / "wrong.npz", a=a, c=b)  # neither the names nor arg0, arg1
    r = CliRunner().invoke(main, ["run", str(prog), "--args", str(tmp_path / "wrong.npz")])
    assert r.exit_code == 1
    assert "expected keys arg0, arg1, ... (or arr_0, ...), found a, c" in r.stderr


def test_too_few_inline_inputs_is_located(tmp_path):
    prog = tmp_path / "ab.jaxpr"
    prog.write_text("{ lambda ; a:f32[3] b:f32[3]. let c:f32[3] = sub a b in (c,) }\n")
    r = CliRunner().invoke(main, ["run", str(prog), "--input", "f32[3]=1 2 3"])
    assert r.exit_code == 1
    assert r.stderr.startswith(f"{prog}:1:")
    assert "error: expected 2 arguments (a b), got 1" in r.stderr


def test_json_rows_are_lines_and_numbers_are_the_dtypes_shortest(tmp_path):
    """A 3x3 output is three lines of numbers (it was 29 lines, one number each), each
    number the shortest text of its float32 value (`0.1`, not `0.10000000149011612`)."""
    prog = tmp_path / "tenth.jaxpr"
    prog.write_text("{ lambda ; a:f32[3,3]. let b:f32[3,3] = mul a 0.1:f32[] in (b,) }\n")
    r = invoke(str(prog), "--input", "f32[3,3]=1 2 3 4 5 6 7 8 9", "--output-format", "json")
    assert r.exit_code == 0, r.output
    want = np.arange(1, 10, dtype=np.float32).reshape(3, 3) * np.float32(0.1)
    rows = ["[" + ", ".join(str(x) for x in row) + "]" for row in want]
    lines = r.stdout.splitlines()
    at = lines.index('      "data": [')
    assert [ln.strip().rstrip(",") for ln in lines[at + 1 : at + 4]] == rows
    assert lines[at + 4].strip() == "]" and "0.1," in lines[at + 1]
    data = json.loads(r.stdout)["outputs"][0]["data"]
    np.testing.assert_array_equal(np.array(data, np.float32), want)  # the same float32 values
