"""Terminal conventions: --color and the NO_COLOR / FORCE_COLOR variables, global options
after the command, --version, shell completion, progress only on a terminal, and the
Pygments lexer (also behind the tool's own highlighted output)."""

from __future__ import annotations

import io as _io
import os
import re
import time
from importlib import metadata
from pathlib import Path

from click.testing import CliRunner

from jaxprtool import io
from jaxprtool.cli import main

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "samples"
BAD = "{ lambda ; a:f32[3]. let\n    b:f32[4] = sin a\n  in (b,) }\n"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def invoke(args, input=None, env=None):
    return CliRunner().invoke(main, args, input=input, env=env)


class FakeTTY(_io.StringIO):
    def isatty(self):
        return True


# ---------------------------------------------------------------- colour


def test_color_flag_and_environment():
    def coloured(args, env=None):
        r = invoke([*args, "check", "-"], input=BAD, env=env)
        assert r.exit_code == 1
        assert "error: sin: result type" in ANSI.sub("", r.stderr)
        return bool(ANSI.search(r.stderr))

    clean = {"NO_COLOR": None, "FORCE_COLOR": None}
    assert not coloured([], clean)  # piped: no colour
    assert coloured(["--color", "always"], clean)
    assert coloured(["--color=always"], {"NO_COLOR": "1"})  # the flag wins
    assert not coloured(["--color", "never"], {"FORCE_COLOR": "1"})
    assert not coloured(["--no-color"], {"FORCE_COLOR": "1"})
    assert coloured([], {"FORCE_COLOR": "1", "NO_COLOR": None})
    assert coloured([], {"FORCE_COLOR": "1", "NO_COLOR": ""})  # empty NO_COLOR: unset
    assert not coloured([], {"FORCE_COLOR": "1", "NO_COLOR": "1"})
    assert not coloured([], {"FORCE_COLOR": "", "NO_COLOR": None})  # empty FORCE_COLOR: unset


def test_empty_no_color_keeps_colour_on_a_terminal(monkeypatch):
    monkeypatch.setattr(io, "COLOR_MODE", "auto")
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.setenv("NO_COLOR", "")
    assert io.use_color(FakeTTY())
    monkeypatch.setenv("NO_COLOR", "1")
    assert not io.use_color(FakeTTY())
    monkeypatch.delenv("NO_COLOR")
    assert io.use_color(FakeTTY()) and not io.use_color(_io.StringIO())


def test_no_color_does_not_leak_into_the_environment():
    before = os.environ.get("NO_COLOR")
    invoke(["--no-color", "fmt", str(SAMPLES / "sin_cos.jaxpr")])
    assert os.environ.get("NO_COLOR") == before
    invoke(["fmt", str(SAMPLES / "sin_cos.jaxpr")])
    assert io.COLOR_MODE == "auto", "each run starts from --color auto"


def test_coloured_diff_is_the_plain_diff_plus_escapes(tmp_path):
    f = tmp_path / "f.jaxpr"
    f.write_text((ROOT / "tests" / "golden" / "passes" / "canonicalize.jaxpr").read_text())
    plain = invoke(["--color", "never", "canonicalize", str(f), "--diff"])
    colour = invoke(["--color", "always", "canonicalize", str(f), "--diff"])
    assert plain.exit_code == colour.exit_code == 0
    assert ANSI.search(colour.stderr) and not ANSI.search(plain.stderr)
    assert ANSI.sub("", colour.stderr) == plain.stderr
    assert colour.stdout == plain.stdout, "a program in a pipe is never coloured"


# ---------------------------------------------------------------- options after the command


def test_global_options_after_the_command(tmp_path, monkeypatch):
    f = str(SAMPLES / "cond.jaxpr")
    before = invoke(["--jax-style", "0.4.35", "fmt", f])
    after = invoke(["fmt", f, "--jax-style", "0.4.35"])
    assert before.exit_code == after.exit_code == 0
    assert after.stdout == before.stdout != invoke(["fmt", f]).stdout
    r = invoke(["check", "-", "--color", "always"], input=BAD)
    assert ANSI.search(r.stderr)
    # --debug after the command: an internal error keeps its traceback
    import jaxprtool.text.printer as printer

    def boom(*a, **k):
        raise RuntimeError("boom")

    monkeypatch.setattr(printer, "print_jaxpr", boom)
    quiet = invoke(["dce", f])
    assert quiet.exit_code == 1 and "internal error: RuntimeError: boom" in quiet.stderr
    loud = invoke(["dce", f, "--debug"])
    assert isinstance(loud.exception, RuntimeError)


def test_plugin_after_the_command(tmp_path):
    plugin = tmp_path / "rules.py"
    plugin.write_text(
        "from jaxprtool.plugins import register_shape_rule\n"
        "register_shape_rule('softsign_t', lambda in_types, params, out_hint: [in_types[0]])\n"
    )
    prog = tmp_path / "p.jaxpr"
    prog.write_text("{ lambda ; a:f32[3]. let b:f32[3] = softsign_t a in (b,) }\n")
    r = invoke(["check", str(prog), "--plugin", str(plugin)])
    assert r.exit_code == 0 and "unknown primitive" not in r.output, r.output


def test_version_names_jax_and_the_styles():
    from jaxprtool.text.style import KNOWN_VERSIONS

    r = invoke(["--version"])
    assert r.exit_code == 0
    lines = r.stdout.splitlines()
    assert lines[0].startswith("jaxprtool ")
    assert lines[1] == f"JAX {metadata.version('jax')} (jaxlib {metadata.version('jaxlib')})"
    for v in KNOWN_VERSIONS:
        assert ".".join(map(str, v)) in lines[2]
    # one oldest version everywhere: --version, --jax-style's refusal, the README
    assert lines[2].endswith("(text printed by any JAX from 0.4.1 to 0.12 is read)")
    old = invoke(["--jax-style", "0.4.0", "fmt", str(SAMPLES / "sin_cos.jaxpr")])
    assert old.exit_code == 2
    assert "--jax-style: JAX version 0.4.0 is older than the oldest supported (0.4.1)" in old.stderr
    assert invoke(["--jax-style", "0.4.1", "fmt", str(SAMPLES / "sin_cos.jaxpr")]).exit_code == 0
    assert "JAX 0.4.1 to 0.12" in (ROOT / "README.md").read_text()


def test_version_without_jax(monkeypatch):
    # (--version reads the installed versions through `style.installed_version`)
    from jaxprtool.text import style

    real = style.installed_version

    def version(name):
        return None if name in ("jax", "jaxlib") else real(name)

    monkeypatch.setattr(style, "installed_version", version)
    r = invoke(["--version"])
    assert "JAX not installed" in r.stdout and "jaxprtool[jax]" in r.stdout


# ---------------------------------------------------------------- completion


def _complete(words: str) -> list[str]:
    env = {"_JAXPRTOOL_COMPLETE": "bash_complete", "COMP_WORDS": words}
    env["COMP_CWORD"] = str(len(words.split()) - (0 if words.endswith(" ") else 1))
    r = CliRunner().invoke(main, [], env=env, prog_name="jaxprtool")
    return r.stdout.splitlines()


def test_shell_completion():
    assert "plain,inline,dce" in _complete("jaxprtool opt -p inline,dc")
    assert set(_complete("jaxprtool opt -p ")) >= {"plain,dce", "plain,cse", "plain,canonicalize"}
    assert "plain,grad" in _complete("jaxprtool grad --print-after ")
    assert "plain,canonicalize" in _complete("jaxprtool vjp --opt can")
    # file arguments are paths: the shell completes file names
    for words in ("jaxprtool fmt sam", "jaxprtool check a.jaxpr sam", "jaxprtool run f -o o"):
        assert _complete(words)[0].startswith("file,"), words
    assert "plain,check-grad" in _complete("jaxprtool check")


# ---------------------------------------------------------------- progress


def test_progress_only_on_a_terminal(monkeypatch):
    from rich.console import Console

    buf = FakeTTY()
    monkeypatch.setattr(
        io, "console", lambda stream=None, **kw: Console(file=buf, force_terminal=True)
    )
    monkeypatch.setattr(io, "is_terminal", lambda stream=None: False)
    with io.progress("crunching", delay=0.0) as p:
        assert not p.active  # (no line, so no timer to draw one)
    assert buf.getvalue() == ""
    monkeypatch.setattr(io, "is_terminal", lambda stream=None: True)
    with io.progress("crunching", delay=0.0) as p:
        _wait_shown(buf, "crunching")
        p.update("still crunching")
        _wait_shown(buf, "still crunching")
    # a quick job never shows it (the delay has not passed)
    buf.seek(0)
    buf.truncate()
    with io.progress("quick", delay=3600.0):
        pass
    assert buf.getvalue() == ""


def _wait_shown(buf, pattern: str, within: float = 120.0) -> str:
    """The status line's text once it shows `pattern` (a regular expression): its own thread
    draws it, so the test waits for it, never for a fixed time (a loaded machine draws late)."""
    deadline = time.monotonic() + within
    while True:
        shown = re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", buf.getvalue())
        if re.search(pattern, shown):
            return shown
        assert time.monotonic() < deadline, f"{pattern!r} never shown: {shown!r}"
        time.sleep(0.01)


def test_no_progress_when_piped():
    r = invoke(["--color", "always", "grad", str(SAMPLES / "mlp.jaxpr")])
    assert r.exit_code == 0
    assert "differentiating" not in r.output


# ---------------------------------------------------------------- lexer


def test_lexer_tokens():
    from pygments import lex
    from pygments.token import Comment, Error, Keyword, Name, Number

    from jaxprtool.ui.lexer import JaxprLexer

    text = (SAMPLES / "cond.jaxpr").read_text() + "# jaxprtool: a note\n"
    toks = list(lex(text, JaxprLexer()))
    assert "".join(v for _, v in toks) == text
    kinds = {}
    for k, v in toks:
        kinds.setdefault(v.strip(), k)
    assert kinds["lambda"] is Keyword and kinds["let"] is Keyword
    assert [v for k, v in toks if k is Name.Function] == [
        "gt", "convert_element_type", "cond", "exp", "sin", "mul", "reduce_sum",
    ]  # fmt: skip
    assert kinds["f32[3]"] is Keyword.Type and kinds["bool[]"] is Keyword.Type
    assert kinds["branches"] is Name.Attribute and kinds["new_dtype"] is Name.Attribute
    assert kinds["2.0"] in Number
    assert kinds["# jaxprtool: a note"] in Comment
    assert not [v for k, v in toks if k is Error]
    for sample in SAMPLES.glob("*.jaxpr"):
        assert not [v for k, v in lex(sample.read_text(), JaxprLexer()) if k is Error]


def test_programs_on_a_terminal_are_highlighted(monkeypatch):
    """On a terminal the printed program is highlighted by the lexer; the characters stay."""
    import sys

    plain = invoke(["fmt", str(SAMPLES / "cond.jaxpr")]).stdout
    monkeypatch.setattr(io, "is_terminal", lambda stream=None: stream is sys.stdout)
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.delenv("NO_COLOR", raising=False)
    r = invoke(["fmt", str(SAMPLES / "cond.jaxpr")])
    assert ANSI.search(r.stdout)
    assert ANSI.sub("", r.stdout) == plain


# ---------------------------------------------------------------- tables


def test_tables_are_plain_aligned_text_off_a_terminal():
    """A table written to a pipe or a file: no box-drawing, no wrapping, columns justified
    as the table says (issue 27); on a terminal (or colour forced) rich draws it."""
    from rich.table import Table

    from jaxprtool.ui.tables import print_table

    table = Table(title="2 outputs")
    table.add_column("#", justify="right")
    table.add_column("type")
    table.add_column("values", justify="left")
    table.add_row("out0", "f32[3]", "[green]0.5[/], 1, 2 " + "3, " * 40 + "...")
    table.add_row("out10", "i32[]", "7")
    pipe = _io.StringIO()
    monkey = io.COLOR_MODE
    try:
        io.COLOR_MODE = "auto"
        print_table(io.console(pipe), table)
        tty = FakeTTY()
        print_table(io.console(tty, width=60), table)
    finally:
        io.COLOR_MODE = monkey
    assert pipe.getvalue() == (
        "2 outputs\n"
        "    #  type    values\n"
        " out0  f32[3]  0.5, 1, 2 " + "3, " * 39 + "3, ...\n"
        "out10  i32[]   7\n"
    )
    assert "┃" in tty.getvalue() and max(map(len, ANSI.sub("", tty.getvalue()).splitlines())) <= 60


def test_color_always_beats_no_color_in_tables():
    """`--color always` drives rich's console too: NO_COLOR does not switch rich off."""
    args = ["opt", "-p", "dce", "--timing", str(SAMPLES / "sin_cos.jaxpr")]
    forced = invoke(["--color", "always", *args], env={"NO_COLOR": "1", "FORCE_COLOR": None})
    assert forced.exit_code == 0 and ANSI.search(forced.stderr) and "┃" in forced.stderr
    plain = invoke(args, env={"NO_COLOR": "1", "FORCE_COLOR": None})
    assert plain.exit_code == 0 and not ANSI.search(plain.stderr)
    assert plain.stderr.splitlines()[:2] == ["timing (wall clock)", "stage  runs  time (ms)      %"]


def test_timing_has_start_up_and_rest_rows_in_its_own_process(tmp_path):
    """Run as its own program, --timing bills the process's start-up to a row of its own
    and the time between stages to `rest`, so the rows add up to the total."""
    import subprocess
    import sys

    r = subprocess.run(
        [sys.executable, "-m", "jaxprtool", "fmt", "--timing", str(SAMPLES / "sin_cos.jaxpr")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "NO_COLOR": "1"},
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    names = [ln.split()[0] for ln in r.stderr.splitlines()[2:]]
    assert names == [
        "start-up",
        "read",
        "parse",
        "print",
        "write",
        "rest",
        "total",
    ]  # fmt: no check
    ms = {ln.split()[0]: float(ln.split()[-2]) for ln in r.stderr.splitlines()[2:]}
    assert ms["start-up"] > 0
    assert abs(ms["total"] - sum(v for k, v in ms.items() if k != "total")) < 0.01


# ---------------------------------------------------------------- conventions (issue 27)


def test_did_you_mean_for_commands_and_passes():
    r = invoke(["fmtt", "x.jaxpr"])
    assert r.exit_code == 2
    assert r.stderr.endswith("Error: No such command 'fmtt'. Did you mean 'fmt'?\n")
    r = invoke(["opt", "-p", "dcee", str(SAMPLES / "sin_cos.jaxpr")])
    assert r.exit_code == 2
    assert r.stderr.endswith(
        "Error: Invalid value for -p: unknown pass 'dcee' (did you mean 'dce'? known: "
        "canonicalize, cse, dce, fold, inline, simplify, none)\n"
    )
    r = invoke(["grad", "--opt", "cannonicalize", str(SAMPLES / "sin_cos.jaxpr")])
    assert "unknown pass 'cannonicalize' (did you mean 'canonicalize'?" in r.stderr
    assert invoke(["zzz"]).stderr.endswith("Error: No such command 'zzz'.\n")


def test_opt_without_passes_prints_the_input_back():
    """As mlir-opt with no passes: the program, unchanged."""
    for sample in ("sin_cos.jaxpr", "cond.jaxpr"):
        r = invoke(["opt", str(SAMPLES / sample)])
        assert r.exit_code == 0, r.output
        assert r.stdout == (SAMPLES / sample).read_text()


def test_help_mentions_completion():
    out = invoke(["--help"]).stdout
    assert 'eval "$(_JAXPRTOOL_COMPLETE=bash_source jaxprtool)"' in " ".join(out.split())


def test_an_error_without_a_location_is_said_once_in_colour(monkeypatch, capsys):
    """On a terminal, an error with no FILE:LINE:COL (missing JAX, a missing device) was
    printed twice on one line (`error: error: ...`)."""
    import re

    from jaxprtool.core import JaxprError, Loc

    monkeypatch.setattr(io, "COLOR_MODE", "always")
    io.report(JaxprError("this command runs programs"))
    io.report(JaxprError("bad thing", Loc("f.jaxpr", 2, 3)))
    plain = re.sub(r"\x1b\[[0-9;]*m", "", capsys.readouterr().err)
    assert plain.splitlines() == [
        "error: this command runs programs",
        "f.jaxpr:2:3: error: bad thing",
    ]


def test_check_and_fmt_with_no_file_and_nothing_piped_in(tmp_path, monkeypatch):
    """Standard input is a terminal (nothing piped in): check reads the current folder and
    says so, fmt is a usage error, instead of waiting silently (issue 39, item 8)."""
    (tmp_path / "ok.jaxpr").write_text("{ lambda ; a:f32[]. let b:f32[] = sin a in (b,) }\n")
    (tmp_path / "bad.jaxpr").write_text("{ lambda ; a:f32[]. let b:f32[] = sin c in (b,) }\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(io, "is_terminal", lambda stream=None: True)
    r = CliRunner().invoke(main, ["--color", "never", "check"])
    assert r.exit_code == 1
    assert (
        "note: no FILE given and nothing piped in: check reads the current folder (.)" in r.output
    )
    assert "bad.jaxpr:1:39: error: variable 'c' used before definition" in r.output
    r = CliRunner().invoke(main, ["fmt"])
    assert r.exit_code == 2 and "nothing is piped in: give a FILE" in r.output


def test_run_summary_keeps_type_and_statistics_whole_and_cuts_the_preview(monkeypatch):
    """On a terminal: one line per output, the values' preview cut with an ellipsis (at 80
    columns) or left out where no room is left for it (60), the type and the statistics
    never cut (issue 39, item 4)."""
    import numpy as np

    from jaxprtool.commands.run_report import print_summary

    monkeypatch.setattr(io, "COLOR_MODE", "always")
    outs = [
        np.linspace(-1.234567, 2.345678, 32, dtype=np.float32).reshape(4, 8),
        np.float32(4.17712),
    ]
    for columns, preview in (("80", True), ("60", False)):
        monkeypatch.setenv("COLUMNS", columns)
        buf = _io.StringIO()
        monkeypatch.setattr("sys.stdout", buf)
        print_summary(outs, None)
        lines = re.sub(r"\x1b\[[0-9;]*m", "", buf.getvalue()).splitlines()
        rows = [x for x in lines if "out0" in x or "out1" in x]
        assert len(rows) == 2 and all(len(x) <= int(columns) for x in lines), lines
        for stat in ("f32[4,8]", "-1.23457", "2.34568", "0.555556", "f32[]", "4.17712"):
            assert stat in "".join(rows), (stat, rows)
        assert ("…" in rows[0]) == preview and ("values" in lines[2]) == preview


def test_progress_shows_the_stage_the_steps_and_the_elapsed_time(monkeypatch):
    """Long work shows where it is (issue 39, item 18): the phase, the steps done of the
    total and the seconds so far; a progress opened inside another shows in the outer line."""
    from rich.console import Console

    buf = FakeTTY()
    monkeypatch.setattr(
        io, "console", lambda stream=None, **kw: Console(file=buf, force_terminal=True)
    )
    monkeypatch.setattr(io, "is_terminal", lambda stream=None: True)
    with io.progress("grad f.jaxpr", delay=0.0) as p:
        assert p.active
        with io.progress("differentiating f.jaxpr") as inner:
            inner.stage("transpose walk")
            inner.count(64, 128)
            # (the seconds so far: any count, as the line is drawn when the machine lets it)
            _wait_shown(
                buf, r"differentiating f\.jaxpr: transpose walk: 64 of 128 steps \(50%\), \d+ s"
            )


def test_the_walks_report_their_steps_to_the_progress_line():
    """The AD walks tell the progress line their phase and how many equations are done
    (the observer the AD commands install on a terminal)."""
    from jaxprtool.ad import observe
    from jaxprtool.ad.api import grad_jaxpr
    from jaxprtool.text.parser import parse

    def name(i):  # JAX's names: a ... z, ba, bb, ...
        return "abcdefghijklmnopqrstuvwxyz"[i] if i < 26 else name(i // 26) + name(i % 26)

    n = 200
    body = "\n".join(f"    {name(i + 1)}:f32[] = sin {name(i)}" for i in range(n))
    text = f"{{ lambda ; a:f32[]. let\n{body}\n  in ({name(n)},) }}\n"
    stages, counts = [], []
    with observe.observing(observe.StepCounter(lambda k, t: counts.append((k, t)), stages.append)):
        grad_jaxpr(parse(text, "chain.jaxpr").jaxpr, (0,))
    assert stages == ["forward (jvp) walk", "transpose walk"]
    assert counts[-1][0] == counts[-1][1] and (64, n) in counts


def test_the_no_change_note_of_a_diff_follows_the_colour_settings():
    """`opt --diff`'s "no change" note is coloured as the diff would be: FORCE_COLOR on a
    pipe, not with NO_COLOR or --color never (issue 39, item 10)."""
    sample = str(SAMPLES / "sin_cos.jaxpr")
    for diff in ("--diff", "--diff=text"):
        forced = invoke(
            ["opt", "-p", "dce", diff, sample], env={"FORCE_COLOR": "1", "NO_COLOR": None}
        )
        assert forced.exit_code == 0 and "no change" in forced.stderr
        assert ANSI.search(forced.stderr), forced.stderr
        for args, env in (
            ([], {"FORCE_COLOR": "1", "NO_COLOR": "1"}),
            (["--color", "never"], {"FORCE_COLOR": "1"}),
            ([], {"FORCE_COLOR": None, "NO_COLOR": None}),
        ):
            plain = invoke([*args, "opt", "-p", "dce", diff, sample], env=env)
            assert plain.stderr == ANSI.sub("", forced.stderr)
