"""No output over an input (issue 45, item 2): a command line whose output is one of its
inputs, or whose two outputs are one file, is bad usage (exit 2) and writes nothing; each
file is left as it was."""

from __future__ import annotations

import os

import pytest
from click.testing import CliRunner

from jaxprtool.cli import main

SIN = "{ lambda ; a:f32[3]. let b:f32[3] = sin a in (b,) }\n"
LOOSE = "{ lambda ; a:f32[3]. let\n    b:f32[3] = sin a in (b,) }\n"
BAD = "{ lambda ; a:f32[3]. let b:f32[4] = sin a in (b,) }\n"


def tool(*argv):
    return CliRunner().invoke(main, ["--no-color", *map(str, argv)])


def assert_refused(r, files: dict, *, name: str) -> None:
    """Exit 2, one message naming the option, and every file as it was."""
    assert r.exit_code == 2, r.output
    assert "is the same file as" in r.output and name in r.output, r.output  # (json: stdout)
    assert "Traceback" not in r.output
    for path, before in files.items():
        assert path.read_bytes() == before, path


def planted(tmp_path, **texts) -> dict:
    files = {}
    for name, text in texts.items():
        path = tmp_path / name.replace("_", ".")
        path.write_text(text)
        files[path] = path.read_bytes()
    return files


def test_fmt_in_place_with_its_diagnostics_over_the_input(tmp_path):
    files = planted(tmp_path, a_jaxpr=LOOSE)
    a = tmp_path / "a.jaxpr"
    r = tool("fmt", "-i", a, "--output-file", a)
    assert_refused(r, files, name="--output-file")
    assert "reformatted" not in r.output


def test_grad_json_diagnostics_and_program_to_one_file(tmp_path):
    files = planted(tmp_path, b_jaxpr=SIN)
    g = tmp_path / "g.jaxpr"
    r = tool("grad", tmp_path / "b.jaxpr", "-o", g, "--output-format", "json", "--output-file", g)
    assert_refused(r, files, name="--output-file")
    assert not g.exists()


def test_check_sarif_over_the_program(tmp_path):
    files = planted(tmp_path, c_jaxpr=BAD)
    c = tmp_path / "c.jaxpr"
    r = tool("check", c, "--output-format", "sarif", "--output-file", c)
    assert_refused(r, files, name="--output-file")


def test_check_of_a_folder_with_its_sarif_over_one_of_its_files(tmp_path):
    files = planted(tmp_path, c_jaxpr=BAD)
    r = tool("check", tmp_path, "--output-format", "sarif", "--output-file", tmp_path / "c.jaxpr")
    assert_refused(r, files, name="--output-file")


def test_run_output_over_the_program(tmp_path):
    files = planted(tmp_path, d_jaxpr=SIN)
    d = tmp_path / "d.jaxpr"
    r = tool("run", d, "--random", "0", "-o", d)
    assert_refused(r, files, name="-o/--output")


def test_run_output_over_the_program_through_a_link(tmp_path):
    files = planted(tmp_path, d_jaxpr=SIN)
    os.symlink(tmp_path / "d.jaxpr", tmp_path / "link.npz")
    r = tool("run", tmp_path / "d.jaxpr", "--random", "0", "-o", tmp_path / "link.npz")
    assert_refused(r, files, name="-o/--output")


def test_trace_output_over_its_module(tmp_path, monkeypatch):
    files = planted(tmp_path, mod_py="def f(x):\n    return x * 2\n")
    monkeypatch.chdir(tmp_path)
    for target in ("mod.py:f", "mod:f"):
        r = tool("trace", target, "--arg", "f32[3]", "-o", "mod.py")
        assert_refused(r, files, name="-o/--output")


def test_trace_consts_out_and_output_one_file(tmp_path):
    (tmp_path / "mod.py").write_text("def f(x):\n    return x * 2\n")
    out = tmp_path / "x.out"
    r = tool("trace", f"{tmp_path / 'mod.py'}:f", "--arg", "f32[3]", "-o", out, "--consts-out", out)
    assert r.exit_code == 2, r.output
    assert "--consts-out" in r.stderr and "-o/--output" in r.stderr
    assert not out.exists()


@pytest.mark.parametrize("cmd", [["fmt"], ["simplify"], ["compile", "--emit", "stablehlo"]])
def test_a_program_command_never_writes_over_its_input(tmp_path, cmd):
    files = planted(tmp_path, a_jaxpr=SIN)
    a = tmp_path / "a.jaxpr"
    r = tool(*cmd, a, "-o", f"{tmp_path}/./a.jaxpr")
    assert_refused(r, files, name="-o/--output")


def test_writing_into_a_device_twice_is_not_refused(tmp_path):
    files = planted(tmp_path, a_jaxpr=SIN)
    r = tool("fmt", tmp_path / "a.jaxpr", "-o", "/dev/null", "--output-file", "/dev/null")
    assert r.exit_code == 0, r.output
    assert (tmp_path / "a.jaxpr").read_bytes() == files[tmp_path / "a.jaxpr"]


def test_fmt_in_place_still_rewrites_its_inputs(tmp_path):
    a = tmp_path / "a.jaxpr"
    a.write_text(LOOSE)
    r = tool("fmt", "-i", a, "--output-file", tmp_path / "diag.txt")
    assert r.exit_code == 0, r.output
    assert a.read_text() == SIN
