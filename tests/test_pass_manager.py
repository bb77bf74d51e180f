"""The pass manager: --diff aligned up to renaming, --verify-each, --print-before/after dumps
(read back with --split-input-file), --split-input-file, --timing."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from jaxprtool.cli import main
from jaxprtool.core import Jaxpr, alpha_equal
from jaxprtool.passes.base import Pass
from jaxprtool.passes.registry import PASSES, parse_pipeline_steps, run_pipeline
from jaxprtool.text.parser import parse

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden" / "passes"
SAMPLES = ROOT / "samples"

#: cse removes `c` and rewires `d`; every later name shifts by one in the printout
CSE_INPUT = """\
{ lambda ; a:f32[3]. let
    b:f32[3] = sin a
    c:f32[3] = sin a
    d:f32[3] = mul b c
    e:f32[3] = cos d
    f:f32[3] = exp e
    g:f32[3] = tanh f
  in (g,) }
"""

#: three programs; the second is ill-typed at line 4 of the file
SPLIT = """\
{ lambda ; a:f32[3]. let b:f32[3] = sin a in (b,) }
# -----
{ lambda ; a:f32[3]. let
    b:f32[4] = cos a
  in (b,) }
// -----
{ lambda ; a:f32[3]. let b:f32[3] = exp a; c:f32[3] = exp a in (b,) }
"""


def invoke(*args, input=None):
    return CliRunner().invoke(main, ["--no-color", *args], input=input)


def jaxpr_of(text: str) -> Jaxpr:
    return parse(text, "<test>").jaxpr


def changed_lines(diff: str) -> list[str]:
    return [ln for ln in diff.splitlines() if ln[:1] in "+-" and ln[:3] not in ("+++", "---")]


# ---------------------------------------------------------------- --diff


def test_diff_shows_only_the_changed_equations():
    r = invoke("cse", "-", "--diff", input=CSE_INPUT)
    assert r.exit_code == 0, r.output
    lines = changed_lines(r.stderr)
    # one equation removed, one rewired: the renaming of e, f, g does not show; removed
    # lines are in the input's names, the added one in the result's (its printout's `c`)
    assert lines == ["-  c:f32[3] = sin a", "-  d:f32[3] = mul b c", "+  c:f32[3] = mul b b"]
    assert "c:f32[3] = mul b b" in r.stdout
    text = invoke("cse", "-", "--diff=text", input=CSE_INPUT)
    assert text.exit_code == 0 and text.stdout == r.stdout
    assert len(changed_lines(text.stderr)) == 11  # the flood the aligned diff avoids
    assert "-    g:f32[3] = tanh f" in text.stderr


def test_bare_diff_before_the_file_and_on_ad_commands(tmp_path):
    f = tmp_path / "f.jaxpr"
    f.write_text(CSE_INPUT)
    r = invoke("opt", "-p", "cse,dce", "--diff", str(f))  # --diff does not swallow FILE
    assert r.exit_code == 0, r.output
    assert "+  c:f32[3] = mul b b" in r.stderr
    r = invoke("grad", "--diff", str(SAMPLES / "mlp.jaxpr"))
    assert r.exit_code == 0, r.output
    assert "--- input" in r.stderr and "+  in (" in r.stderr
    unchanged = invoke("dce", "--diff", str(SAMPLES / "sin_cos.jaxpr"))
    assert "no change" in unchanged.stderr
    assert invoke("dce", "--diff=words", str(f)).exit_code == 2


# ---------------------------------------------------------------- --verify-each


def break_first_result(j: Jaxpr) -> Jaxpr:
    """`j` with its first equation's result retyped f32[7] (the checker rejects it)."""
    from jaxprtool.core import ShapedArray, Var

    e = j.eqns[0]
    old = e.outputs[0]
    bad = Var(ShapedArray((7,), "f32"), old.hint)
    swap = {id(old): bad}

    def use(a):
        return swap.get(id(a), a)

    eqns = [e.replace(outputs=(bad, *e.outputs[1:]))]
    eqns += [x.replace(inputs=tuple(use(a) for a in x.inputs)) for x in j.eqns[1:]]
    return j.replace(eqns=eqns, outvars=[use(a) for a in j.outvars])


@pytest.fixture
def broken_dce(monkeypatch):
    """dce replaced by a pass that breaks the program (a result type that does not match)."""

    def breaks(j: Jaxpr, keep_outputs=None) -> Jaxpr:
        return break_first_result(j)

    monkeypatch.setitem(
        PASSES, "dce", Pass("dce", "broken", "broken", breaks, PASSES["dce"].options)
    )


def test_verify_each_names_the_pass_and_prints_the_program(broken_dce):
    r = invoke("opt", "-p", "cse,dce,canonicalize", "--verify-each", str(SAMPLES / "sin_cos.jaxpr"))
    assert r.exit_code == 1
    assert "Traceback" not in r.output and r.stdout == ""
    err = r.stderr
    assert "error: --verify-each: the program after 'dce (2/3)' does not pass the checker" in err
    assert "# ----- IR Dump After dce (2/3) (failed verification) -----" in err
    # the diagnostic is located in the printed program, whose line 2 is the broken equation
    m = re.search(r"<after dce>:(\d+):(\d+): error: sin: result type f32\[7\]", err)
    assert m and m.group(1) == "2", err
    dumped = err.split("(failed verification) -----\n", 1)[1]
    assert dumped.splitlines()[1].strip().startswith("c:f32[7] = sin a")


def test_verify_each_passes_on_correct_passes_and_ad():
    for args in (
        ["opt", "-p", "inline,simplify,cse,dce,canonicalize", str(SAMPLES / "rnn.jaxpr")],
        ["grad", "--argnums", "0,1", str(SAMPLES / "mlp.jaxpr")],
        ["linearize", str(SAMPLES / "cond.jaxpr")],
        ["vjp", str(SAMPLES / "attention.jaxpr")],
    ):
        plain = invoke(*args)
        checked = invoke(*args, "--verify-each")
        assert checked.exit_code == 0, (args, checked.output)
        assert checked.stdout == plain.stdout


def test_verify_each_after_an_ad_transformation(monkeypatch):
    """A wrong AD result is caught right after the transformation, named by its command."""
    import jaxprtool.ad.api as api

    real = api.vjp_jaxpr
    monkeypatch.setattr(api, "vjp_jaxpr", lambda j, argnums=None, **kw: break_first_result(real(j)))
    r = invoke("vjp", str(SAMPLES / "sin_cos.jaxpr"), "--verify-each")
    assert r.exit_code == 1 and r.stdout == ""
    assert "the program after 'vjp (1/2)' does not pass the checker" in r.stderr
    assert re.search(r"<after vjp>:\d+:\d+: error: \w+: result type f32\[7\]", r.stderr)
    # without --verify-each the (broken) program goes on into the clean-up passes
    assert "--verify-each" not in invoke("vjp", str(SAMPLES / "sin_cos.jaxpr")).stderr


# ---------------------------------------------------------------- dumps


def _dumps(stderr: str) -> list[tuple[str, str]]:
    """(header, program text) of each dump."""
    parts = re.split(r"^# ----- (IR Dump [^\n]*?) -----\n", stderr, flags=re.M)
    return list(zip(parts[1::2], parts[2::2]))


def test_print_after_all_dumps_read_back(tmp_path):
    spec = "simplify,fold,cse,dce,canonicalize"
    src = GOLDEN / "canonicalize.jaxpr"
    r = invoke("opt", "-p", spec, "--print-after-all", str(src))
    assert r.exit_code == 0, r.output
    dumps = _dumps(r.stderr)
    assert [h for h, _ in dumps] == [
        f"IR Dump After {name} ({k}/5)" for k, name in enumerate(spec.split(","), 1)
    ]
    # each dump is the program after that prefix of the pipeline (run through the API)
    start = parse(src.read_text(), str(src)).jaxpr
    steps = parse_pipeline_steps(spec)
    for k, (_, text) in enumerate(dumps, 1):
        assert alpha_equal(jaxpr_of(text), run_pipeline(start, steps[:k]))
    # the whole dump reads back, one program per part
    dump = tmp_path / "dump.jaxpr"
    dump.write_text(r.stderr)
    back = invoke("fmt", "--split-input-file", str(dump))
    assert back.exit_code == 0, back.output
    texts = back.stdout.split("# -----\n")
    assert len(texts) == 5
    for (_, text), again in zip(dumps, texts):
        assert alpha_equal(jaxpr_of(again), jaxpr_of(text))
    assert invoke("check", "--split-input-file", str(dump)).exit_code == 0


def test_print_before_after_and_change():
    src = str(GOLDEN / "canonicalize.jaxpr")
    r = invoke("opt", "-p", "dce,cse,dce", "--print-before", "cse", "--print-after=dce", src)
    assert r.exit_code == 0, r.output
    assert [h for h, _ in _dumps(r.stderr)] == [
        "IR Dump After dce (1/3)",
        "IR Dump Before cse (2/3)",
        "IR Dump After dce (3/3)",
    ]
    # only the passes that changed the program: the second dce finds nothing left to do
    r = invoke("opt", "-p", "dce,cse,dce", "--print-after-change", src)
    assert [h for h, _ in _dumps(r.stderr)] == [
        "IR Dump After dce (1/3)",
        "IR Dump After cse (2/3)",
    ]
    r = invoke("opt", "-p", "dce,dce", "--print-after-all", "--print-after-change", src)
    assert [h for h, _ in _dumps(r.stderr)] == ["IR Dump After dce (1/2)"]
    # AD commands: the transformation is a step too
    r = invoke("grad", str(SAMPLES / "mlp.jaxpr"), "--print-after", "grad")
    assert [h for h, _ in _dumps(r.stderr)] == ["IR Dump After grad (1/2)"]
    bad = invoke("opt", "-p", "dce", "--print-after", "bogus", src)
    assert bad.exit_code == 2 and "unknown pass 'bogus'" in bad.output


# ---------------------------------------------------------------- --split-input-file


def test_split_input_file_locates_errors_in_their_part(tmp_path):
    f = tmp_path / "three.jaxpr"
    f.write_text(SPLIT)
    bad_line = SPLIT.splitlines().index("    b:f32[4] = cos a") + 1
    r = invoke("check", "--split-input-file", str(f))
    assert r.exit_code == 1
    assert r.stderr.startswith(f"{f}:{bad_line}:5: error: cos: result type f32[4]")
    assert r.stderr.count("error:") == 1
    # a pass runs on each part; the broken one is reported, and nothing printed (issue 37)
    r = invoke("cse", "--split-input-file", str(f))
    assert r.exit_code == 1 and f"{f}:{bad_line}:5: error:" in r.stderr
    assert r.stdout == ""
    # nor with -o
    out = tmp_path / "out.jaxpr"
    assert invoke("cse", "--split-input-file", str(f), "-o", str(out)).exit_code == 1
    assert not out.exists()


SCALAR_SAMPLES = ("mlp.jaxpr", "cond.jaxpr", "rnn.jaxpr")


def test_split_output_splits_again():
    good = "\n# -----\n".join((SAMPLES / n).read_text().rstrip("\n") for n in SCALAR_SAMPLES)
    r = invoke("grad", "--split-input-file", "-", input=good)
    assert r.exit_code == 0, r.output
    parts = r.stdout.split("# -----\n")
    assert len(parts) == 3
    for name, text in zip(SCALAR_SAMPLES, parts):
        assert text == invoke("grad", str(SAMPLES / name)).stdout
    # fmt reads the output back part by part
    again = invoke("fmt", "--split-input-file", "-", input=r.stdout)
    assert again.exit_code == 0 and again.stdout == r.stdout


def test_split_part_errors_about_the_whole_program_point_at_their_part():
    mlp = (SAMPLES / "mlp.jaxpr").read_text()
    sin_cos = (SAMPLES / "sin_cos.jaxpr").read_text()
    r = invoke("grad", "--split-input-file", "-", input=mlp + "# -----\n" + sin_cos)
    assert r.exit_code == 1
    # sin_cos has a vector output: grad's error is located at its `in (`
    line = mlp.count("\n") + 1 + sin_cos.count("\n")
    assert f"<stdin>:{line}:3: error: Gradient only defined for scalar-output" in r.stderr
    assert r.stdout == ""  # the first part's gradient is not printed either


# ---------------------------------------------------------------- --timing


def _timing_rows(stderr: str) -> dict[str, tuple[int, float]]:
    """stage -> (runs, milliseconds) read off the --timing table (plain text: not a terminal)."""
    lines = stderr.splitlines()
    start = lines.index("timing (wall clock)")
    assert re.fullmatch(r"stage +runs +time \(ms\) +%", lines[start + 1]), lines[start + 1]
    rows = {}
    for line in lines[start + 2 :]:
        m = re.fullmatch(r"(\S+(?: \S+)*?) +(\d*) +(\d+\.\d{3}) +(\d+\.\d)", line)
        if not m:
            break
        rows[m[1]] = (int(m[2] or 0), float(m[3]))
    return rows


def test_timing_table():
    r = invoke("opt", "-p", "cse,dce", "--timing", str(SAMPLES / "mlp.jaxpr"))
    assert r.exit_code == 0, r.output
    rows = _timing_rows(r.stderr)
    stages = ["read", "parse", "check", "cse", "dce", "print", "write", "rest", "total"]
    assert list(rows) == stages  # no start-up row in-process (the test runner's start-up)
    assert all(runs == 1 for name, (runs, _) in rows.items() if name not in ("rest", "total"))
    # the rows add up to the total (each is rounded to a microsecond)
    assert abs(rows["total"][1] - sum(ms for n, (_, ms) in rows.items() if n != "total")) < 0.01
    assert "\x1b[" not in r.stderr and "│" not in r.stderr
    assert r.stdout == invoke("opt", "-p", "cse,dce", str(SAMPLES / "mlp.jaxpr")).stdout
    rows = _timing_rows(
        invoke("grad", "--timing", "--verify-each", str(SAMPLES / "mlp.jaxpr")).stderr
    )
    assert {"grad", "verify after grad", "canonicalize", "verify after canonicalize"} <= set(rows)
    r = invoke("check", "--timing", str(SAMPLES / "mlp.jaxpr"), str(SAMPLES / "cond.jaxpr"))
    assert r.exit_code == 0 and _timing_rows(r.stderr)["parse"][0] == 2
