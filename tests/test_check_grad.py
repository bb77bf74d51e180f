"""check-grad: passes on correct rules, catches a wrong JVP rule shared by jvp and vjp."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from jaxprtool.cli import main

SAMPLES = Path(__file__).resolve().parents[1] / "samples"


def invoke(*args):
    return CliRunner().invoke(main, ["--no-color", "check-grad", *args])


@pytest.fixture(scope="module")
def samples(tmp_path_factory):
    """A folder of copies of three samples (sin_cos, mlp, cond), read by every test here that
    checks them: check-grad's programs are compiled once per program and file name
    (`backend.jit_cache`), so that the folder's check and the files' one share them."""
    folder = tmp_path_factory.mktemp("samples")
    for name in ("sin_cos.jaxpr", "mlp.jaxpr", "cond.jaxpr"):
        (folder / name).write_text((SAMPLES / name).read_text())
    return folder


def test_samples_pass(samples):
    r = invoke(
        str(samples / "sin_cos.jaxpr"), str(samples / "mlp.jaxpr"), str(samples / "cond.jaxpr")
    )
    assert r.exit_code == 0, r.output
    assert r.output.count("pass") == 9 and "FAIL" not in r.output


def test_second_order_passes(tmp_path):
    """--order 2 checks the derivative programs too, each as a program of its own.  (One
    equation, sin: jvp(sin) holds cos, whose rule the second order checks; sin_cos's
    derivative programs, with two inputs, took 10 compiles and 1.5 CPU-s more.)"""
    p = tmp_path / "sin.jaxpr"
    p.write_text("{ lambda ; a:f32[3]. let b:f32[3] = sin a in (b,) }\n")
    r = invoke(str(p), "--order", "2")
    assert r.exit_code == 0, r.output
    assert r.output.count(" pass") == 9 and "FAIL" not in r.output, r.output
    # the table names the program: the file, then the derivative programs checked at order 2
    assert "jvp(sin.jaxpr)" in r.output and "vjp(sin.jaxpr)" in r.output


def test_wrong_rule_is_caught(samples, wrong_sin_rule):
    r = invoke(str(samples / "sin_cos.jaxpr"), "--random", "3")
    assert r.exit_code == 1, r.output
    lines = [ln for ln in r.output.splitlines() if "FAIL" in ln]
    # the jvp check and the vjp projection both fail; the dot-product test (jvp vs vjp) cannot see it
    assert any("jvp vs finite differences" in ln for ln in lines)
    assert any("vjp vs finite differences" in ln for ln in lines)
    assert not any("dot product" in ln for ln in lines)


def test_trouble_is_exit_2(tmp_path):
    assert invoke(str(tmp_path / "missing.jaxpr")).exit_code == 2
    bad = tmp_path / "bad.jaxpr"
    bad.write_text("{ lambda ; a:f32[3]. let b:f32[3] = sin a in (b,) ")
    r = invoke(str(bad))
    assert r.exit_code == 2 and "bad.jaxpr:1:" in r.output
    r = invoke(str(SAMPLES / "sin_cos.jaxpr"), "--modes", "sideways")
    assert r.exit_code == 2 and "--modes must name fwd and/or rev" in r.output


def test_no_float_inputs_is_trouble(tmp_path):
    f = tmp_path / "int.jaxpr"
    f.write_text("{ lambda ; a:i32[3]. let b:i32[3] = mul a a in (b,) }\n")
    r = invoke(str(f))
    assert r.exit_code == 2 and "no float or complex inputs to differentiate" in r.output


def test_tolerance_follows_the_least_precise_dtype(tmp_path):
    """A bf16 cast inside makes FD only bf16-accurate: JAX's bf16 tolerance (1e-1) applies."""
    f = tmp_path / "bf16.jaxpr"
    f.write_text(
        "{ lambda ; a:f32[2,3] b:f32[3,4]. let\n"
        "    m:bf16[2,3] = convert_element_type[new_dtype=bfloat16 weak_type=False] a\n"
        "    n:bf16[3,4] = convert_element_type[new_dtype=bfloat16 weak_type=False] b\n"
        "    o:f32[2,4] = dot_general[dimension_numbers=(([1], [0]), ([], [])) preferred_element_type=float32] m n\n"
        "  in (o,) }\n"
    )
    r = invoke(str(f))
    assert r.exit_code == 0, r.output
    assert r.output.count("1e-01") == 3


def test_summary_line_and_width(tmp_path, samples):
    """One summary line at the end (files, checks, failures); the table fits the console's
    width (80 columns when not a terminal) instead of a fixed 140."""
    bad = tmp_path / "bad.jaxpr"
    bad.write_text("{ lambda ; a:f32[3]. let b:f32[3] = sin a in (b,) ")
    r = invoke(str(samples / "sin_cos.jaxpr"), str(samples / "cond.jaxpr"), str(bad))
    assert r.exit_code == 2
    lines = r.stdout.rstrip("\n").splitlines()
    assert lines[-1] == "check-grad: 2 files, 6 checks, 0 failures, 1 not checked (errors above)"
    assert max(len(ln) for ln in lines) <= 80
    assert "sin_cos.jaxpr" in r.stdout and "cond.jaxpr" in r.stdout


def test_folder_of_programs(samples):
    r = invoke(str(samples))
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines()[-1] == "check-grad: 3 files, 9 checks, 0 failures"
    for name in ("sin_cos.jaxpr", "mlp.jaxpr", "cond.jaxpr"):
        assert f"check-grad {samples / name}" in r.stdout, r.stdout


def test_table_is_plain_aligned_text_when_piped(samples):
    """Off a terminal the table is plain text: title, header and one line per check, columns
    two spaces apart, numbers right-aligned, no box-drawing (issue 27)."""
    r = invoke(str(samples / "sin_cos.jaxpr"))
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert lines[0] == f"check-grad {samples / 'sin_cos.jaxpr'}"
    assert lines[1] == "program        check                         error    tol  result"
    pattern = r"sin_cos\.jaxpr  (.{25})  \d\.\d\de[-+]\d\d  2e-0[35]  pass"
    names = [re.fullmatch(pattern, ln)[1].rstrip() for ln in lines[2:5]]
    assert names == [
        "jvp vs finite differences",
        "vjp vs finite differences",
        "dot product (adjoint)",
    ]
    # below the table: what the verdicts were judged in, and the program's own precision
    assert lines[5].startswith("sin_cos.jaxpr: judged in float64"), r.stdout
    assert lines[-1] == "check-grad: 1 file, 3 checks, 0 failures"


def test_json_report(tmp_path, samples, wrong_sin_rule):
    """--json: one document, the same checks as the table, the failure marked (exit 1)."""
    import json

    bad = tmp_path / "bad.jaxpr"
    bad.write_text("{ lambda ; a:f32[3]. let b:f32[3] = sin a in (b,) ")
    r = invoke("--json", str(samples / "sin_cos.jaxpr"), str(bad))
    assert r.exit_code == 2 and f"{bad}:1:" in r.stderr
    doc = json.loads(r.stdout)
    assert doc["summary"] == {
        "files": 1,
        "checks": 3,
        "failures": 2,
        "skipped": 0,
        "not_checked": 1,
    }
    (report,) = doc["files"]
    assert report["file"] == str(samples / "sin_cos.jaxpr") and report["replaced"] == []
    assert [(c["program"], c["check"]) for c in report["checks"]] == [
        ("sin_cos.jaxpr", "jvp vs finite differences"),
        ("sin_cos.jaxpr", "vjp vs finite differences"),
        ("sin_cos.jaxpr", "dot product (adjoint)"),
    ]
    # the wrong sin rule is caught by both finite-difference checks, not by the dot product
    assert [c["result"] for c in report["checks"]] == ["FAIL", "FAIL", "pass"]
    for c in report["checks"]:
        assert (c["result"] == "pass") == (c["error"] <= c["tolerance"])


def test_tolerances_and_step_can_be_given(samples):
    """--tol and --dot-tol replace JAX's default tolerances (as check_grads' atol/rtol), and
    --eps the finite-difference step (issue 39, item 13): a step of 0.5 leaves a truncation
    error far above f32's 2e-3, and a zero-width tolerance fails every inexact check."""
    import json

    f = str(samples / "sin_cos.jaxpr")
    doc = json.loads(invoke("--json", f).stdout)
    import numpy as np
    from jax._src.public_test_util import default_gradient_tolerance

    jax_tol = default_gradient_tolerance[np.dtype("float32")]  # JAX's own check_grads default
    assert [c["tolerance"] for c in doc["files"][0]["checks"]] == [jax_tol, jax_tol, 2e-5]
    r = invoke("--json", f, "--tol", "0.5", "--dot-tol", "1e-3")
    assert [c["tolerance"] for c in json.loads(r.stdout)["files"][0]["checks"]] == [0.5, 0.5, 1e-3]
    r = invoke("--json", f, "--eps", "0.5")
    checks = json.loads(r.stdout)["files"][0]["checks"]
    assert r.exit_code == 1 and [c["result"] for c in checks] == ["FAIL", "FAIL", "pass"]
    assert invoke(f, "--eps", "0.5", "--tol", "1.0").exit_code == 0
    assert invoke(f, "--tol", "0").exit_code == 2  # a tolerance is positive: usage


def test_a_while_loop_gets_its_forward_check_and_the_reverse_ones_skipped(tmp_path):
    """JAX has no reverse mode of a while loop with a dynamic trip count: check-grad runs
    the jvp check, reports the vjp and adjoint checks as skipped with JAX's reason, and
    counts the file (it refused the whole file: issue 39, item 12)."""
    import json

    import jax
    import jax.numpy as jnp
    import numpy as np

    def f(x, n):
        body = lambda c: (jnp.sin(c[0]) * 1.1, c[1] + 1)  # noqa: E731
        return jax.lax.while_loop(lambda c: c[1] < n, body, (x, 0))[0]

    ones = np.ones(3, np.float32)  # (numpy, and JAX's refusal under jit: nothing compiled)
    with pytest.raises(ValueError, match="Reverse-mode differentiation does not work"):
        jax.jit(jax.grad(lambda x: jnp.sum(f(x, 3))))(ones)
    p = tmp_path / "while.jaxpr"
    p.write_text(str(jax.make_jaxpr(f)(ones, 3)) + "\n")
    r = invoke(str(p))
    assert r.exit_code == 0, r.output
    assert "check-grad: 1 file, 3 checks, 0 failures, 2 skipped (reasons above)" in r.output
    doc = json.loads(invoke("--json", str(p)).stdout)
    results = [c["result"] for c in doc["files"][0]["checks"]]
    assert results[0] == "pass" and all(
        x.startswith("skipped: no reverse mode in JAX (Reverse-mode differentiation does not")
        for x in results[1:]
    )
    assert doc["summary"]["skipped"] == 2 and doc["summary"]["not_checked"] == 0


def test_the_program_itself_runs_only_where_its_sizes_are_not_written(samples):
    """The cotangent is drawn from the output types and the primal outputs (is the point
    finite?) come from the jvp program's run: the program itself is not compiled and run
    on its own (issue 49); with symbolic sizes it is, to learn them.  JAX's own jvp and vjp
    (the precision report) are one program."""
    import numpy as np

    from jaxprtool.backend.runner import consts_runner
    from jaxprtool.text.parser import parse
    from jaxprtool.ui.checkgrad import check_grad

    def ran(text, args, name="f"):
        f = parse(text, name).jaxpr
        runner, programs, kinds = consts_runner([]), [], []

        def run(jaxpr, xs, reference=False):
            programs.append(jaxpr)
            return runner(jaxpr, xs, reference)

        def jax_derivative(*call):
            kinds.append(call[-1])
            return runner.jax_derivative(*call)

        run.jax_derivative = jax_derivative
        checks = check_grad(f, args, run)
        assert [c.verdict for c in checks] == ["pass"] * 3, [c.verdict for c in checks]
        assert kinds == ["both"] and all(c.jax_error < 1e-5 for c in checks[:2]), kinds
        return sum(p is f for p in programs)

    written = samples / "sin_cos.jaxpr"
    x = np.linspace(-1, 1, 3, dtype=np.float32)
    # (named as the other tests' check-grad names it: their compiled programs serve)
    assert ran(written.read_text(), [x, x], str(written)) == 0
    symbolic = "{ lambda ; a:f32[n]. let b:f32[n] = sin a in (b,) }"
    assert ran(symbolic, [x]) == 1
