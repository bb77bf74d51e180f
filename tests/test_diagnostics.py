"""Machine-readable diagnostics (`--output-format text|json|github|sarif`, issue 27): the same
errors as the text, located, in the formats CI services read."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from jaxprtool.cli import main

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
BAD = "{ lambda ; a:f32[3]. let\n    b:f32[4] = sin a\n  in (b,) }\n"
MESSAGE = "sin: result type f32[4] does not match inferred f32[3]"


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
    assert r.stderr == f"{f}:2:5: error: {MESSAGE}\n  |     b:f32[4] = sin a\n  |     ^\n"
    assert invoke("--output-format", "text", "check", str(f)).stderr == r.stderr


def test_json_is_one_array_of_located_diagnostics(tmp_path):
    f = bad_file(tmp_path)
    r = invoke("--output-format", "json", "check", str(f), str(SAMPLES / "sin_cos.jaxpr"))
    assert r.exit_code == 1 and r.stdout == ""
    assert json.loads(r.stderr) == [
        {"file": str(f), "line": 2, "column": 5, "severity": "error", "message": MESSAGE}
    ]
    clean = invoke("check", str(SAMPLES / "sin_cos.jaxpr"), "--output-format", "json")
    assert clean.exit_code == 0 and json.loads(clean.stderr) == []


def test_github_annotations(tmp_path):
    f = bad_file(tmp_path)
    r = invoke("check", str(f), "--output-format", "github")
    assert r.exit_code == 1
    assert r.stderr == f"::error file={f},line=2,col=5,title=jaxprtool::{MESSAGE}\n"
    # properties escape ':' and ','; the message escapes '%' and newlines
    odd = tmp_path / "a,b:c.jaxpr"
    odd.write_text(BAD)
    r = invoke("check", str(odd), "--output-format", "github")
    escaped = str(odd).replace(",", "%2C").replace(":", "%3A")
    assert r.stderr == f"::error file={escaped},line=2,col=5,title=jaxprtool::{MESSAGE}\n"
    r = CliRunner().invoke(main, ["--output-format", "github", "check", "-"], input="{ lambda")
    assert r.exit_code == 1 and r.stderr.startswith("::error title=jaxprtool::")


def test_sarif_log(tmp_path):
    f = bad_file(tmp_path)
    r = invoke("--output-format", "sarif", "check", str(f))
    assert r.exit_code == 1
    log = json.loads(r.stderr)
    assert log["version"] == "2.1.0" and log["$schema"].endswith("sarif-2.1.0.json")
    (run,) = log["runs"]
    assert run["tool"]["driver"]["name"] == "jaxprtool"
    assert [x["id"] for x in run["tool"]["driver"]["rules"]] == ["error", "warning"]
    assert run["results"] == [
        {
            "ruleId": "error",
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
    """Not only check: a transformation's rejection, and a warning, in the same format."""
    f = bad_file(tmp_path)
    r = invoke("grad", str(f), "--output-format", "json")
    assert r.exit_code == 1 and r.stdout == ""
    assert json.loads(r.stderr) == [
        {"file": str(f), "line": 2, "column": 5, "severity": "error", "message": MESSAGE}
    ]
    unknown = tmp_path / "u.jaxpr"
    unknown.write_text("{ lambda ; a:f32[3]. let\n    b:f32[3] = my_prim a\n  in (b,) }\n")
    r = invoke("check", str(unknown), "--output-format", "json")
    (w,) = json.loads(r.stderr)
    assert r.exit_code == 0 and (w["severity"], w["line"], w["column"]) == ("warning", 2, 5)
    # run's own --output-format (npz|npy-dir|json) wins after `run`: the other spelling
    r = invoke("run", str(f), "--diagnostic-format", "github")
    assert (
        r.exit_code == 1
        and r.stderr == f"::error file={f},line=2,col=5,title=jaxprtool::{MESSAGE}\n"
    )


def test_check_werror(tmp_path):
    unknown = tmp_path / "u.jaxpr"
    unknown.write_text("{ lambda ; a:f32[3]. let\n    b:f32[3] = my_prim a\n  in (b,) }\n")
    plain = invoke("check", str(unknown))
    assert plain.exit_code == 0 and f"{unknown}:2:5: warning: " in plain.stderr
    strict = invoke("check", "--werror", str(unknown))
    assert strict.exit_code == 1
    assert strict.stderr == plain.stderr.replace(": warning: ", ": error: ", 1)
    assert invoke("check", "--werror", str(SAMPLES / "sin_cos.jaxpr")).exit_code == 0
