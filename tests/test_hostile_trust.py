"""Hostile input, third round (issue 37, items 5 to 16): inputs that cost exponential or
unbounded work, folder scans of an untrusted checkout, output a CI system reads, signals and
environment variables.

Each test plants the attack and checks the exact behaviour: a located message and exit 1
(2 for usage), no traceback, no partial output, and quickly.
"""

from __future__ import annotations

import io
import os
import re
import signal
import threading
import time

import pytest
from click.testing import CliRunner
from fuzzgen import doubling_shared

from jaxprtool.cli import main

SIN = "{ lambda ; a:f32[3]. let b:f32[3] = sin a in (b,) }\n"


def tool(*argv, text: str | bytes | None = None):
    return CliRunner().invoke(main, ["--no-color", *map(str, argv)], input=text)


def error_line(r) -> str:
    return next(line for line in r.stderr.splitlines() if "error:" in line)


def assert_refused(r, start: str, code: int = 1, stdout: str = ""):
    assert r.exit_code == code, r.output
    assert error_line(r).startswith(start), r.stderr
    assert "Traceback" not in r.output and "internal error" not in r.output
    assert r.stdout == stdout


# ---------------------------------------------------------------- 5: exponential programs

#: 40 shared jaxprs, each calling the previous one twice: 5 KB of text, 2**41 equations
DOUBLING = doubling_shared(40)
TOO_LARGE = (
    "<stdin>:67:5: error: shared jaxpr 'f17' expands to 393,214 equations once its calls "
    "are inlined, over the limit of 300,000: it uses shared jaxpr 'f16' 2 times, of "
    "196,606 equations each (--max-equations N raises the limit)"
)
EXPANDING = [
    "vjp",
    "grad",
    "linearize",
    "opt -p inline",
    "memory --no-xla",
    "check-grad",
    "run --random 0",
    "compile",
]


@pytest.mark.parametrize("cmd", EXPANDING)
def test_an_exponential_program_is_refused_before_it_is_expanded(cmd):
    t0 = time.process_time()
    r = tool(*cmd.split(), "-", text=DOUBLING)
    if cmd == "check-grad":  # 2: trouble; its summary on standard error (nothing checked)
        assert_refused(r, TOO_LARGE, 2)
        summary = "check-grad: 0 files, 0 checks, 0 failures, 1 not checked (errors above)\n"
        assert r.stderr.endswith(summary)
    else:
        assert_refused(r, TOO_LARGE)
    assert time.process_time() - t0 < 10


def test_walks_that_keep_shared_jaxprs_shared_take_an_exponential_program():
    for cmd in ("check", "fmt", "jvp", "dce", "stats"):
        r = tool(cmd, "-", text=DOUBLING)
        assert r.exit_code == 0, (cmd, r.stderr)
    printed = tool("fmt", "-", text=DOUBLING).stdout
    assert len(printed) < 2 * len(DOUBLING)  # still shared, not copied
    assert tool("fmt", "-", text=printed).stdout == printed


def test_the_limit_can_be_raised_and_lowered():
    small = doubling_shared(7)  # 191 equations with the calls, 64 sin once inlined
    r = tool("--max-equations", "100", "opt", "-p", "inline", "-", text=small)
    assert_refused(r, "<stdin>:23:5: error: shared jaxpr 'f6' expands to 190 equations")
    r = tool("opt", "-p", "inline", "-", "--max-equations", "200", text=small)
    assert r.exit_code == 0, r.stderr
    assert r.stdout.count(" = sin ") == 64


# ---------------------------------------------------------------- 6: unbounded reads


def test_an_endless_file_is_refused_by_name():
    r = tool("check", "/dev/zero")
    assert_refused(r, "/dev/zero:1:1: error: the input is larger than 256 MiB, the most read")
    assert "--max-input-size SIZE raises the limit" in error_line(r)


class Endless(io.RawIOBase):
    """`yes |`: standard input that never ends."""

    def readable(self):
        return True

    def readinto(self, b):
        b[:] = b"y\n" * (len(b) // 2) + b"y" * (len(b) % 2)
        return len(b)


def test_endless_standard_input_is_refused_at_the_limit_set():
    r = CliRunner().invoke(main, ["check", "--max-input-size", "1M", "-"], input=Endless())
    assert_refused(r, "<stdin>:1:1: error: the input is larger than 1 MiB, the most read")
    r = tool("--max-input-size", "1x", "check", "-", text=SIN)
    assert r.exit_code == 2 and "'1x' is not a size" in r.stderr


# ---------------------------------------------------------------- 8, 10: folder scans


@pytest.fixture
def checkout(tmp_path):
    """A folder someone else wrote: a program, a FIFO, links to an endless device and to the
    environment, and a link inside the folder."""
    (tmp_path / "a.jaxpr").write_text(SIN)
    os.mkfifo(tmp_path / "b.jaxpr")
    (tmp_path / "c.jaxpr").symlink_to("/proc/self/environ")
    (tmp_path / "d.jaxpr").symlink_to("/dev/zero")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "e.jaxpr").symlink_to("../a.jaxpr")
    # a reader blocked on the FIFO (the bug) is released after a while, and fails the test
    release = threading.Timer(5, lambda: open(tmp_path / "b.jaxpr", "wb").close())
    release.start()
    yield tmp_path
    release.cancel()


@pytest.mark.parametrize("cmd", ["check -q", "fmt --check", "stats"])
def test_a_folder_scan_skips_fifos_devices_and_links_out_of_the_folder(checkout, cmd):
    r = tool(*cmd.split(), checkout)
    assert r.exit_code == 0, r.output
    code = " [W003]" if cmd.startswith("check") else ""  # (check, the linter, shows codes)
    assert r.stderr.splitlines() == [
        f"warning: skipped {checkout}/b.jaxpr: not a regular file (a FIFO){code}",
        f"warning: skipped {checkout}/c.jaxpr: a symbolic link out of the folder walked{code}",
        f"warning: skipped {checkout}/d.jaxpr: a symbolic link out of the folder walked{code}",
    ]
    if cmd == "stats":
        assert r.stdout.count(".jaxpr") == 2  # a.jaxpr and sub/e.jaxpr, the link inside


def test_a_file_that_is_not_text_is_never_quoted():
    environ = open("/proc/self/environ", "rb").read()
    first = environ.split(b"\0")[0].decode(errors="replace")
    r = tool("check", "-q", "/proc/self/environ")
    assert_refused(r, "/proc/self/environ:1:")
    assert error_line(r).endswith("error: a NUL byte: this is not jaxpr text [E002]")
    assert first[:8] not in r.stderr and len(r.stderr.splitlines()) == 1


# ---------------------------------------------------------------- 9: .gitignore patterns

#: one 85-byte .gitignore line that a backtracking matcher takes minutes per name over
STARS = "*a" * 41 + "*b"


def test_a_hostile_gitignore_line_costs_linear_time(tmp_path):
    (tmp_path / ".gitignore").write_text(STARS + "\n")
    (tmp_path / ("a" * 60 + ".jaxpr")).write_text(SIN)
    (tmp_path / ("a" * 60 + "b")).mkdir()  # a folder it ignores
    (tmp_path / ("a" * 60 + "b") / "x.jaxpr").write_text("not a program")
    t0 = time.process_time()
    for cmd in (["check"], ["fmt", "--check"]):
        r = tool(*cmd, tmp_path)
        assert r.exit_code == 0, r.output
    assert time.process_time() - t0 < 10  # (a runaway guard: the exponential match took minutes)


GIT_PATTERNS = [
    "*.jaxpr", "/build", "build/", "a/**/b", "**/foo", "foo/**", "a/*/c", "*a*b", "[ab]*.txt",
    "[!a]x", "d?r/", "**/x/**/y", "a/**/**/b", "\\#x", "/a/b/", "*.jaxpr.txt", "s[a-c]b",
    "a*b*c*d", "x/**/*.jaxpr", "a**/?", "[?/[!a]", "x/*", "[[:upper:]x]*",
]  # fmt: skip
GIT_PATHS = [
    "a.jaxpr", "build", "x/build/y", "a/b", "a/x/y/b", "a/c/b", "foo", "z/foo", "foo/z", "a/q/c",
    "a/q/r/c", "ab", "xaxb", "b1.txt", "c.txt", "bx", "ax", "dir", "dxr/q", "x/y", "q/x/r/y",
    "#x", "a/b/c", "s/b", "sbb", "sab", "k/l.jaxpr.txt", "axbxcxd", "abcdd", "x/y/z.jaxpr",
]  # fmt: skip


@pytest.mark.parametrize("pattern", GIT_PATTERNS)
def test_gitignore_patterns_match_as_git_matches_them(tmp_path, pattern):
    """Each path of GIT_PATHS, a file (its folders above it) and then a folder, asked of
    `git check-ignore` and of the tool's matcher (a folder above it ignored, or itself)."""
    import shutil
    import subprocess

    from jaxprtool.commands.gitignore import Spec

    if shutil.which("git") is None:
        pytest.skip("git is the oracle: not installed")
    spec = Spec.from_lines([pattern])
    for leaf_is_dir in (False, True):
        repo = tmp_path / ("dirs" if leaf_is_dir else "files")
        subprocess.run(["git", "init", "-q", str(repo)], check=True)
        (repo / ".gitignore").write_text(pattern + "\n")
        queries = {}  # path -> whether it is a folder
        for p in GIT_PATHS:
            parts = p.split("/")
            queries.update(("/".join(parts[:k]), True) for k in range(1, len(parts)))
        for p in GIT_PATHS:
            if leaf_is_dir or not queries.get(p):
                queries[p] = leaf_is_dir
        for q, is_dir in sorted(queries.items()):
            (repo / q).mkdir(parents=True, exist_ok=True) if is_dir else (repo / q).touch()
        out = subprocess.run(
            ["git", "-C", str(repo), "check-ignore", "--no-index", "--stdin"],
            input="\n".join(sorted(queries)) + "\n",
            capture_output=True,
            text=True,
        ).stdout.splitlines()

        mine = [q for q, is_dir in sorted(queries.items()) if _ignored(spec, q, is_dir)]
        assert mine == out, leaf_is_dir


def _ignored(spec, path: str, is_dir: bool) -> bool:
    """Whether a folder above `path` is ignored, or `path` itself."""
    parts = path.split("/")
    above = ("/".join(parts[:k]) for k in range(1, len(parts)))
    return any(spec.check(d, True) for d in above) or bool(spec.check(path, is_dir))


# ---------------------------------------------------------------- 7: --repeat


def test_repeat_is_capped():
    r = tool("run", "-", "--random", "0", "--repeat", "1000000000", text=SIN)
    assert r.exit_code == 2
    assert "'--repeat': 1000000000 is not in the range 1<=x<=1000000" in r.stderr


def test_repeat_stops_when_its_time_budget_is_spent(monkeypatch):
    from jaxprtool.commands import run_cmds

    monkeypatch.setattr(run_cmds, "REPEAT_BUDGET_S", 0.05)
    t0 = time.process_time()
    r = tool("run", "-", "--random", "0", "--repeat", "1000000", text=SIN)
    assert r.exit_code == 0, r.output
    assert time.process_time() - t0 < 30
    line = next(s for s in r.stderr.splitlines() if s.startswith("compile:"))
    assert " of 1000000 (the 0.05 s budget was spent): median " in line


# ---------------------------------------------------------------- 11: output a CI system reads


def no_line_starts_a_workflow_command(output: str) -> bool:
    """GitHub's runner reads `::command ...` at the start of any line, after spaces: no line
    starts one but the tool's own annotations."""
    ours = re.compile(r"::(error|warning) file=[^\n]*,title=jaxprtool::")
    lines = [s.lstrip() for s in output.splitlines()]
    return not any(s.startswith("::") and not ours.match(s) for s in lines)


def test_a_quoted_source_line_never_starts_a_line_of_output():
    text = "{ lambda ; a:f32[3]. let\n::error file=x,line=1::pwned b:f32[3] = sin a\n in (b,) }\n"
    r = tool("check", "-", text=text)
    assert r.exit_code == 1
    assert "::error file=x,line=1::pwned" in r.stderr  # quoted, behind the gutter
    assert no_line_starts_a_workflow_command(r.output), r.stderr


def test_a_file_name_in_a_message_never_starts_a_line_of_output():
    r = tool("check", "nofile\n::error file=y,line=1::pwned")
    assert r.exit_code == 2
    assert (
        r.stderr
        == "error: cannot read 'nofile\\n::error file=y,line=1::pwned': No such file or directory"
        " [E900]\n"
    )


@pytest.mark.parametrize("fmt", ["text", "github"])
def test_a_file_name_never_starts_a_line_of_output(tmp_path, fmt):
    name = tmp_path / "x\n::error file=y,line=1::pwned.jaxpr"
    name.write_text("{ lambda ; a:f32[3].  let b:f32[3] = sin a in (b,) }\n")  # not canonical
    bad = tmp_path / "y\n::warning::pwned.jaxpr"
    bad.write_text("{ lambda ; a:f32[3]. let b:f32[3] = sin c in (b,) }")
    r = tool("--output-format", fmt, "fmt", "--check", tmp_path)
    assert r.exit_code == 1
    assert no_line_starts_a_workflow_command(r.output), r.output
    escaped = "%0A" if fmt == "github" else "\\n"
    assert f"Would reformat: {tmp_path}/x{escaped}::error" in r.stdout


# ---------------------------------------------------------------- 12: SARIF of names not UTF-8


def test_sarif_names_a_file_whose_name_is_not_utf8(tmp_path, monkeypatch):
    import json

    monkeypatch.chdir(tmp_path)  # a relative name, as `check .` gives
    with open(b"bad\xff.jaxpr", "wb") as f:
        f.write(b"{ lambda ; a:f32[3]. let b:f32[3] = sin c in (b,) }\n")
    r = tool("--output-format", "sarif", "check", ".")
    assert r.exit_code == 1, r.output
    log = json.loads(r.stdout)  # (check's document: on standard output, issue 39 item 6)
    (result,) = log["runs"][0]["results"]
    where = result["locations"][0]["physicalLocation"]
    assert where["artifactLocation"]["uri"] == "bad%FF.jaxpr"
    assert where["region"] == {"startLine": 1, "startColumn": 41}


# ---------------------------------------------------------------- 13: --split-input-file


@pytest.mark.parametrize("cmd", ["fmt", "jvp", "dce"])
def test_split_input_file_writes_nothing_when_a_part_fails(cmd):
    bad = "{ lambda ; a:f32[3]. let b:f32[3] = sin c in (b,) }\n"
    r = tool(cmd, "--split-input-file", "-", text=SIN + "# -----\n" + bad)
    assert_refused(r, "<stdin>:3:41: error: variable 'c' used before definition")


# ---------------------------------------------------------------- 14: Ctrl-C


def _proc_status_says(pid: int, moment: str) -> bool:
    """Whether the process has reached `moment` of its start-up, as Linux's /proc shows it:
    "imports", SIGINT blocked (the package's first line ran: from then on the tool, not
    Python, answers Ctrl-C); "jax", jaxlib's library mapped (JAX is being imported)."""
    try:
        if moment == "imports":
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("SigBlk:"):
                        return bool(int(line.split()[1], 16) & (1 << (signal.SIGINT - 1)))
            return False
        with open(f"/proc/{pid}/maps") as f:
            return "jaxlib" in f.read()
    except OSError:
        return False


#: a run of some 30 s (a while loop of 2e9 steps): any moment after the compile is mid-run
_LONG_LOOP = """{ lambda ; a:f32[]. let
    b:i32[] c:f32[] = while[
      body_jaxpr={ lambda ; d:i32[] e:f32[]. let
          f:i32[] = add d 1:i32[]
          g:f32[] = sin e
        in (f, g) }
      body_nconsts=0
      cond_jaxpr={ lambda ; h:i32[] i:f32[]. let j:bool[] = lt h 2000000000:i32[] in (j,) }
      cond_nconsts=0
    ] 0:i32[] a
  in (c,) }
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs Linux's /proc")
@pytest.mark.parametrize(
    "moment, after", [("imports", 0.0), ("jax", 0.0), ("jax", 1.5)], ids=["imports", "jax", "run"]
)
def test_ctrl_c_during_run_exits_130_with_one_line(tmp_path, moment, after):
    """SIGINT at three moments of `run`'s start-up (the package's imports, JAX's, the compile
    or the run): each time status 130 and `error: interrupted`, nothing else.  Each moment is
    read from /proc, never guessed by a fixed sleep: a loaded machine may still be importing
    `site` after any fixed delay, and Python dies there on a signal."""
    import subprocess
    import sys

    from conftest import ROOT
    from test_import_side_effects import with_sigint_default

    prog = tmp_path / "p.jaxpr"
    prog.write_text(_LONG_LOOP)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    argv = [sys.executable, "-m", "jaxprtool", "run", str(prog), "--random", "0"]
    p = subprocess.Popen(
        with_sigint_default(argv), env=env, cwd=tmp_path, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while not _proc_status_says(p.pid, moment):
        if p.poll() is not None or time.monotonic() > deadline:
            p.kill()
            pytest.fail(f"the run never reached {moment!r} (status {p.returncode})")
        time.sleep(0.002)
    time.sleep(after)
    p.send_signal(signal.SIGINT)
    try:
        _, err = p.communicate(timeout=60)
    finally:
        p.kill()
    assert (p.returncode, err) == (130, "error: interrupted\n")


# ---------------------------------------------------------------- 15: environment variables


@pytest.mark.parametrize("value", ["1e3T", "8 G B", "0x10G", "1e3"])
def test_a_memory_limit_in_odd_notation_is_refused_for_every_command(monkeypatch, value):
    monkeypatch.setenv("JAXPRTOOL_MAX_MEMORY", value)
    for cmd in (["run", "--random", "0"], ["fmt"]):
        r = tool(*cmd, "-", text=SIN)
        assert r.exit_code == 2, r.output
        assert r.stderr == (
            f"error: JAXPRTOOL_MAX_MEMORY={value!r} is not a size: give a number of bytes "
            "from 1 to 2^63 with an optional K, M, G or T suffix, such as 8G\n"
        )


def test_memory_xla_cannot_allocate_is_a_located_error(monkeypatch):
    monkeypatch.setenv("JAXPRTOOL_MAX_MEMORY", "8000000T")  # more than there is
    text = (
        "{ lambda ; a:f32[]. let b:f32[1073741824,1073741824] = broadcast_in_dim["
        "broadcast_dimensions=() shape=(1073741824, 1073741824) sharding=None] a in (b,) }\n"
    )
    r = tool("run", "-", "--random", "0", text=text)
    assert_refused(r, "<stdin>:1:1: error: XLA could not allocate the memory this program needs")


def test_a_yes_no_variable_reads_0_as_no(monkeypatch):
    from jaxprtool.text import grammar

    pytest.importorskip("lark_cython", reason="the compiled parser is what 0 keeps")
    monkeypatch.setenv("JAXPRTOOL_PURE_PYTHON_PARSER", "0")
    assert grammar.lark_plugins()
    monkeypatch.setenv("JAXPRTOOL_PURE_PYTHON_PARSER", "1")
    assert grammar.lark_plugins() == {}
    monkeypatch.setenv("JAXPRTOOL_PURE_PYTHON_PARSER", "maybe")
    r = tool("fmt", "-", text=SIN)
    assert r.exit_code == 2
    assert r.stderr == (
        "error: JAXPRTOOL_PURE_PYTHON_PARSER='maybe' is not a yes/no value: give 1 or 0 "
        "(or unset it)\n"
    )


def test_a_completion_word_index_that_is_no_number_is_one_line(monkeypatch, capsys):
    monkeypatch.setenv("_JAXPRTOOL_COMPLETE", "bash_complete")
    monkeypatch.setenv("COMP_WORDS", "jaxprtool f")
    monkeypatch.setenv("COMP_CWORD", "abc")
    with pytest.raises(SystemExit) as exit_:
        main.main(args=[], prog_name="jaxprtool")
    assert exit_.value.code == 2
    assert capsys.readouterr().err == (
        "error: COMP_CWORD='abc' is not a word index (the shell's completion sets it)\n"
    )
    monkeypatch.setenv("COMP_CWORD", "1")
    with pytest.raises(SystemExit) as exit_:
        main.main(args=[], prog_name="jaxprtool")
    assert exit_.value.code == 0 and "plain,fmt" in capsys.readouterr().out


# ---------------------------------------------------------------- 16: compile's parameters


@pytest.mark.parametrize("emit", ["stablehlo", "hlo"])
def test_compile_locates_a_parameter_jax_refuses(emit):
    text = (
        "{ lambda ; a:f32[3]. let\n    b:f32[3] = jit[name=f jaxpr={ lambda ; c:f32[3]. let\n"
        "        d:f32[3] = sin[evil=1] c\n      in (d,) }] a\n  in (b,) }\n"
    )
    r = tool("compile", "--emit", emit, "-", text=text)
    assert_refused(r, "<stdin>:3:9: error: 'sin' could not be compiled by JAX: TypeError: ")
    assert "unexpected keyword argument 'evil'" in error_line(r)
