"""Machine-readable diagnostics (`--output-format text|json|github|sarif`, issue 27): the same
errors as the text, located, in the formats CI services read; on standard output (or
`--output-file`) where the command leaves it free, with stable codes (issue 39, items 6, 7)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from jaxprtool.cli import main
from jaxprtool.diagnostics import CODES

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
BAD = "{ lambda ; a:f32[3]. let\n    b:f32[4] = sin a\n  in (b,) }\n"
MESSAGE = "sin: result type f32[4] does not match inferred f32[3]"


def RECORD(f, code="E111"):
    return {
        "file": str(f),
        "line": 2,
        "column": 5,
        "severity": "error",
        "code": code,
        "message": MESSAGE,
    }


def invoke(*args):
    return CliRunner().invoke(main, ["--no-color", *args])


def bad_file(tmp_path) -> Path:
    f = tmp_path / "bad.jaxpr"
    f.write_text(BAD)
    return f


def test_text_is_the_default(tmp_path):
    f = bad_file(tmp_path)
    r = invoke("check", str(f))
    assert r.exit_code == 1
    assert r.stderr == (
        f"{f}:2:5: error: {MESSAGE} [E111]\n  |     b:f32[4] = sin a\n  |     ^\n"
        "Found 1 error in 1 file.\n"
    )
    assert invoke("--output-format", "text", "check", str(f)).stderr == r.stderr


def test_json_is_one_array_of_located_diagnostics(tmp_path):
    f = bad_file(tmp_path)
    r = invoke("--output-format", "json", "check", str(f), str(SAMPLES / "sin_cos.jaxpr"))
    assert r.exit_code == 1 and r.stderr == ""
    assert json.loads(r.stdout) == [RECORD(f)]
    clean = invoke("check", str(SAMPLES / "sin_cos.jaxpr"), "--output-format", "json")
    assert clean.exit_code == 0 and json.loads(clean.stdout) == [] and clean.stderr == ""


def test_github_annotations(tmp_path):
    f = bad_file(tmp_path)
    r = invoke("check", str(f), "--output-format", "github")
    assert r.exit_code == 1 and r.stderr == ""
    assert r.stdout == f"::error file={f},line=2,col=5,title=jaxprtool::{MESSAGE} [E111]\n"
    # properties escape ':' and ','; the message escapes '%' and newlines
    odd = tmp_path / "a,b:c.jaxpr"
    odd.write_text(BAD)
    r = invoke("check", str(odd), "--output-format", "github")
    escaped = str(odd).replace(",", "%2C").replace(":", "%3A")
    assert r.stdout == f"::error file={escaped},line=2,col=5,title=jaxprtool::{MESSAGE} [E111]\n"
    r = CliRunner().invoke(main, ["--output-format", "github", "check", "-"], input="{ lambda")
    assert r.exit_code == 1 and r.stdout.startswith("::error title=jaxprtool::")
    assert r.stdout.endswith(" [E001]\n")


def test_sarif_log(tmp_path):
    f = bad_file(tmp_path)
    r = invoke("--output-format", "sarif", "check", str(f))
    assert r.exit_code == 1
    log = json.loads(r.stdout)
    assert log["version"] == "2.1.0" and log["$schema"].endswith("sarif-2.1.0.json")
    (run,) = log["runs"]
    assert run["tool"]["driver"]["name"] == "jaxprtool"
    assert [x["id"] for x in run["tool"]["driver"]["rules"]] == list(CODES)
    assert run["results"] == [
        {
            "ruleId": "E111",
            "level": "error",
            "message": {"text": MESSAGE},
            "locations": [
                {
                    "physicalLocation": {
                        "artifactLocation": {"uri": f.as_uri()},
                        "region": {"startLine": 2, "startColumn": 5},
                    }
                }
            ],
        }
    ]


def test_every_command_s_errors_and_warnings(tmp_path):
    """Not only check: a transformation's rejection, and a warning, in the same format.  A
    command whose result goes to standard output (grad's program) keeps the document on
    standard error; with `-o OUT` standard output is the document's."""
    f = bad_file(tmp_path)
    r = invoke("grad", str(f), "--output-format", "json")
    assert r.exit_code == 1 and r.stdout == ""
    assert json.loads(r.stderr) == [RECORD(f)]
    r = invoke("grad", str(f), "--output-format", "json", "-o", str(tmp_path / "g.jaxpr"))
    assert r.exit_code == 1 and r.stderr == "" and json.loads(r.stdout) == [RECORD(f)]
    unknown = tmp_path / "u.jaxpr"
    unknown.write_text("{ lambda ; a:f32[3]. let\n    b:f32[3] = my_prim a\n  in (b,) }\n")
    r = invoke("check", str(unknown), "--output-format", "json")
    (w,) = json.loads(r.stdout)
    assert r.exit_code == 0 and (w["severity"], w["line"], w["column"]) == ("warning", 2, 5)
    assert w["code"] == "W001"
    # run's own --output-format (npz|npy-dir|json) wins after `run`: the other spelling
    r = invoke("run", str(f), "--diagnostic-format", "github")
    assert (
        r.exit_code == 1
        and r.stderr == f"::error file={f},line=2,col=5,title=jaxprtool::{MESSAGE} [E111]\n"
    )


def test_check_werror(tmp_path):
    unknown = tmp_path / "u.jaxpr"
    unknown.write_text("{ lambda ; a:f32[3]. let\n    b:f32[3] = my_prim a\n  in (b,) }\n")
    plain = invoke("check", str(unknown))
    assert plain.exit_code == 0 and f"{unknown}:2:5: warning: " in plain.stderr
    assert plain.stderr.count("[W001]") == 1
    strict = invoke("check", "--werror", str(unknown))
    assert strict.exit_code == 1
    body = plain.stderr.removesuffix("All checks passed (1 warning).\n")
    assert (
        strict.stderr == body.replace(": warning: ", ": error: ", 1) + "Found 1 error in 1 file.\n"
    )
    assert invoke("check", "--werror", str(SAMPLES / "sin_cos.jaxpr")).exit_code == 0


# ---------------------------------------------------------------- issue 39, item 6: where


def test_output_file_takes_the_document_and_human_messages_stay_on_stderr(tmp_path):
    f = bad_file(tmp_path)
    out = tmp_path / "diags.json"
    r = invoke("check", str(f), "--output-format", "json", "--output-file", str(out), "--timing")
    assert r.exit_code == 1 and r.stdout == ""
    assert json.loads(out.read_text()) == [RECORD(f)]
    assert "parse" in r.stderr and "[" not in r.stderr  # the timing table, no document
    # before the command too, in every format; text is the diagnostics' plain text
    sarif = tmp_path / "c.sarif"
    r = invoke("--output-format", "sarif", "--output-file", str(sarif), "check", str(f))
    assert r.exit_code == 1 and r.output == ""
    assert json.loads(sarif.read_text())["runs"][0]["results"][0]["ruleId"] == "E111"
    gh = tmp_path / "gh.txt"
    r = invoke("--output-format", "github", "check", str(f), "--output-file", str(gh))
    assert r.output == "" and gh.read_text().endswith(f"::{MESSAGE} [E111]\n")
    txt = tmp_path / "t.txt"
    r = invoke("check", str(f), "--output-file", str(txt))
    assert r.exit_code == 1 and r.output == ""
    assert txt.read_text().startswith(f"{f}:2:5: error: {MESSAGE} [E111]\n  | ")
    # a clean run writes an empty document; an output file nowhere is bad usage
    r = invoke("check", str(SAMPLES / "sin_cos.jaxpr"), "--output-format", "json",
               "--output-file", str(out))  # fmt: skip
    assert r.exit_code == 0 and json.loads(out.read_text()) == []
    r = invoke("check", str(f), "--output-file", str(tmp_path / "no" / "x.json"))
    assert r.exit_code == 2 and "--output-file" in r.stderr and "does not exist" in r.stderr


# ---------------------------------------------------------------- item 7: codes, select


UNKNOWN = "{ lambda ; a:f32[3]. let\n    b:f32[3] = tnah a\n    c:f32[4] = sin b\n  in (c,) }\n"


@pytest.mark.parametrize(
    "typo, name",
    [("tahn", "tanh"), ("sni", "sin"), ("reduce_smu", "reduce_sum"), ("dot_genral", "dot_general")],
)
def test_swapped_letters_are_one_edit(typo, name, tmp_path):
    """`tahn` is one letter from `tan` and two swapped letters from `tanh`: the swap ranks
    first (difflib's ratio alone suggested `tan`)."""
    f = tmp_path / "u.jaxpr"
    f.write_text(UNKNOWN.replace("tnah", typo))
    r = invoke("check", str(f), "--select", "W")
    assert r.exit_code == 0
    want = (
        f"unknown primitive '{typo}': result types taken from the binders; did you mean '{name}'?"
    )
    assert want in r.stderr.splitlines()[0], r.stderr


def test_a_misspelt_primitive_gets_the_closest_name(tmp_path):
    f = tmp_path / "u.jaxpr"
    f.write_text(UNKNOWN)
    r = invoke("check", str(f), "--select", "W")
    assert r.exit_code == 0
    assert r.stderr.splitlines()[0] == (
        f"{f}:2:5: warning: unknown primitive 'tnah': result types taken from the binders; "
        "did you mean 'tanh'? (check passes it; run and differentiation (jvp, grad, ...) will "
        "fail on it) [W001]"
    )
    f.write_text(UNKNOWN.replace("tnah", "my_custom_thing"))
    assert "did you mean" not in invoke("check", str(f)).stderr
    # the commands that meet it say so too
    f.write_text(UNKNOWN.replace("    c:f32[4] = sin b\n", "").replace("(c,)", "(b,)"))
    r = invoke("jvp", str(f))
    assert r.exit_code == 1 and r.stderr.startswith(
        f"{f}:2:5: error: Differentiation rule for 'tnah' not implemented; did you mean 'tanh'?\n"
    )
    r = invoke("vmap", "--axis-size", "2", str(f))
    assert "no batching rule for 'tnah' (did you mean 'tanh'?); it runs" in r.stderr


def codes_of(r) -> list[str]:
    return [d["code"] for d in json.loads(r.stdout)]


def test_select_and_ignore(tmp_path):
    f = tmp_path / "u.jaxpr"
    f.write_text(UNKNOWN)
    both = invoke("check", str(f), "--output-format", "json")
    assert both.exit_code == 1 and codes_of(both) == ["W001", "E111"]
    r = invoke("check", str(f), "--output-format", "json", "--ignore", "E1")
    assert r.exit_code == 0 and codes_of(r) == ["W001"]
    r = invoke("check", str(f), "--output-format", "json", "--select", "e111")  # any case
    assert r.exit_code == 1 and codes_of(r) == ["E111"]
    # the longest prefix decides; comma-separated and repeated lists
    r = invoke("check", str(f), "--output-format", "json", "--ignore", "E,W", "--select", "E11")
    assert codes_of(r) == ["E111"]
    r = invoke("check", str(f), "--output-format", "json", "--select", "ALL", "--ignore", "W001")
    assert codes_of(r) == ["E111"]
    r = invoke("check", str(f), "--werror", "--select", "W001")
    assert r.exit_code == 1 and ": error: unknown primitive 'tnah'" in r.stderr
    # the text that does not read is always reported
    f.write_text("{ lambda ; a:f32[3]. let")
    r = invoke("check", str(f), "--ignore", "E")
    assert r.exit_code == 1 and r.stderr.splitlines()[0].endswith(" [E001]")
    r = invoke("check", str(f), "--select", "E1110")
    assert r.exit_code == 2 and "'E1110' is no diagnostic code" in r.stderr
    assert "did you mean 'E111'?" in r.stderr


def test_codes_of_reading_and_of_the_commands(tmp_path):
    """Every diagnostic has a code, in every format and command: E002 for a binary file, E003
    for a limit, E201/E202/E203 for a command's refusals, E900 for a missing file."""
    cases = {
        "E002": ("check", b"\x7fELF\x02"),
        "E003": ("--max-input-size", b"{ lambda ; a:f32[3]. let  in (a,) }\n"),
        "E203": ("grad", b"{ lambda ; a:f32[3]. let b:f32[3] = sin a in (b,) }\n"),
    }
    for code, (cmd, data) in cases.items():
        f = tmp_path / f"{code}.jaxpr"
        f.write_bytes(data)
        args = ["--max-input-size", "10", "check"] if cmd == "--max-input-size" else [cmd]
        r = invoke("--output-format", "json", *args, str(f))
        doc = json.loads(r.stdout if cmd != "grad" else r.stderr)
        assert [d["code"] for d in doc] == [code], r.output
    r = invoke("check", str(tmp_path / "missing.jaxpr"))
    assert r.exit_code == 2 and r.stderr.rstrip().endswith("No such file or directory [E900]")


def test_the_docs_list_every_code():
    page = (SAMPLES.parent / "docs" / "CI.md").read_text()
    for code, meaning in CODES.items():
        assert f"| `{code}` | {meaning} |" in page, code


def test_a_supervised_run_leaves_the_document_to_its_child():
    """`run --coordinator` runs again in a child process, which writes the document; the
    supervisor adds none of its own (two JSON documents in one stream), unless it reports a
    diagnostic itself (the child never joined)."""
    import io

    from jaxprtool import diagnostics
    from jaxprtool.core import JaxprError
    from jaxprtool.io import report

    for emitted, want in ((False, ""), (True, '"message": "cannot join"')):
        out = io.StringIO()
        diagnostics.begin("json")
        diagnostics.delegate()
        if emitted:
            report(JaxprError("cannot join"))
        diagnostics.end(out)
        assert (want in out.getvalue()) if want else out.getvalue() == ""
