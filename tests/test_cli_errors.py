"""The CLI contract: exit codes and exact messages for the error paths every command shares."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from jaxprtool.cli import main

SAMPLE = str(Path(__file__).resolve().parents[1] / "samples" / "sin_cos.jaxpr")


def invoke(*args, input=None):
    return CliRunner().invoke(main, ["--no-color", *args], input=input)


@pytest.mark.parametrize(
    "cmd", ["fmt", "check", "jvp", "vjp", "grad", "dce", "stats", "run", "memory"]
)
def test_missing_input_file_is_usage_exit_2(cmd, tmp_path):
    missing = tmp_path / "missing.jaxpr"
    r = invoke(cmd, str(missing))
    assert r.exit_code == 2
    code = " [E900]" if cmd == "check" else ""  # (check, the linter, shows codes: issue 39)
    assert r.output == f"error: cannot read '{missing}': No such file or directory{code}\n"


@pytest.mark.parametrize("cmd", ["fmt", "jvp", "dce"])
def test_output_in_missing_folder_is_exit_2_and_writes_nothing(cmd, tmp_path):
    out = tmp_path / "nowhere" / "out.jaxpr"
    r = invoke(cmd, SAMPLE, "-o", str(out))
    assert r.exit_code == 2
    assert f"error: cannot write '{out}': folder '{out.parent}' does not exist" in r.output
    assert not out.parent.exists()


def test_unknown_flag_is_exit_2():
    r = invoke("fmt", "--frobnicate", SAMPLE)
    assert r.exit_code == 2 and "No such option '--frobnicate'" in r.output


def test_empty_input_is_located_exit_1():
    r = invoke("fmt", "-", input="")
    assert r.exit_code == 1
    assert r.output.startswith("<stdin>:1:1: error: empty input: expected a jaxpr ('{ lambda ...')")


def test_failed_run_never_clobbers_the_output(tmp_path):
    out = tmp_path / "out.jaxpr"
    out.write_text("precious\n")
    r = invoke(
        "jvp", "-", "-o", str(out), input="{ lambda ; a:f32[3]. let b:f32[3] = sin a in (b,) "
    )
    assert r.exit_code == 1 and "<stdin>:1:" in r.output
    assert out.read_text() == "precious\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.jaxpr"], "no temporary file left behind"


def test_type_error_is_located_before_any_transformation(tmp_path):
    bad = tmp_path / "bad.jaxpr"
    bad.write_text("{ lambda ; a:f32[3]. let\n    b:f32[4] = sin a\n  in (b,) }\n")
    r = invoke("vjp", str(bad))
    assert r.exit_code == 1
    assert f"{bad}:2:5: error: sin: result type f32[4] does not match inferred f32[3]" in r.output


def test_a_reader_that_closes_the_pipe_ends_the_tool_quietly(tmp_path):
    """`jaxprtool fmt big.jaxpr | head -1`: no internal error and no traceback, the status
    a process SIGPIPE ended has (141), as cat and grep do."""
    import subprocess
    import sys

    def name(i):  # b, c, ..., z, ba, bb, ...: JAX's names
        letters = ""
        while True:
            letters = "abcdefghijklmnopqrstuvwxyz"[i % 26] + letters
            i //= 26
            if not i:
                return letters

    n = 20000
    body = "\n".join(f"    {name(i)}:f32[64] = sin {name(i - 1)}" for i in range(1, n))
    src = tmp_path / "big.jaxpr"
    src.write_text(f"{{ lambda ; a:f32[64]. let\n{body}\n  in ({name(n - 1)},) }}\n")
    for cmd in ("fmt", "dce"):
        proc = subprocess.Popen(
            [sys.executable, "-m", "jaxprtool", cmd, str(src)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert proc.stdout.readline().startswith(b"{ lambda")
        proc.stdout.close()  # the reader goes away before the program is written
        err = proc.stderr.read().decode()
        assert proc.wait() == 141, err
        assert err == "", err


TEARDOWN_PROBE = r"""
import atexit, os, runpy, sys
# (and numpy's thread setting as the program left it: test_startup.py's BLAS test)
atexit.register(lambda: print("teardown ran; OPENBLAS_NUM_THREADS="
                              f"{os.environ.get('OPENBLAS_NUM_THREADS')}", file=sys.stderr))
sys.argv = ["jaxprtool", *sys.argv[1:]]
runpy.run_module("jaxprtool", run_name="__main__")
"""


def test_the_program_ends_without_teardown_but_writes_everything(tmp_path):
    """The `jaxprtool` process ends without freeing what it read (`cli._leave`): every byte
    of its output still reaches the pipe, with each exit status; a command that imported
    JAX ends the ordinary way, so that JAX's exit hooks run."""
    import os
    import subprocess
    import sys

    from jaxprtool.text.printer import encode_name

    n = 20000
    body = "\n".join(f"    {encode_name(i)}:f32[4] = sin {encode_name(i - 1)}" for i in range(1, n))
    text = f"{{ lambda ; a:f32[4]. let\n{body}\n  in ({encode_name(n - 1)},) }}\n"
    src = tmp_path / "big.jaxpr"
    src.write_text(text)
    bad = tmp_path / "bad.jaxpr"
    bad.write_text("{ lambda ; a:f32[4]. let\n    b:f32[4] = sin c\n  in (b,) }\n")

    # (numpy's thread setting left to the program: the user set none)
    env = {
        k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")
    }

    def probe(*args):
        return subprocess.run(
            [sys.executable, "-c", TEARDOWN_PROBE, *args], capture_output=True, text=True, env=env
        )

    r = probe("fmt", str(src))
    assert (r.returncode, r.stdout) == (0, text), r.stderr
    assert "teardown ran" not in r.stderr  # no teardown: os._exit after the flush
    r = probe("check", str(bad))
    assert r.returncode == 1 and f"{bad}:2:20: error: variable 'c'" in r.stderr, r.stderr
    r = probe("fmt", "--no-such-flag")
    assert r.returncode == 2 and "No such option" in r.stderr
    one = tmp_path / "one.jaxpr"
    one.write_text("{ lambda ; a:f32[]. let\n    b:f32[] = sin a\n  in (b,) }\n")
    r = probe("run", "--random", "0", str(one))  # JAX imported: its exit hooks must run
    assert r.returncode == 0 and "teardown ran" in r.stderr, r.stderr
    # running a program keeps numpy's default thread pool (test_startup.py's
    # test_commands_that_do_not_run_ask_numpy_for_one_blas_thread, the `run` case)
    assert "teardown ran; OPENBLAS_NUM_THREADS=None\n" in r.stderr, r.stderr
