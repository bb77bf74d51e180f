"""The command line as ruff's (issue 47): one options value per invocation, handed down
(`cli.Options` in the root context), one diagnostics sink per invocation with one emitter per
format, exit statuses returned by the commands; nothing of one invocation outlives it."""

from __future__ import annotations

import json
from pathlib import Path

import click
from click.testing import CliRunner

from jaxprtool import api, diagnostics
from jaxprtool.cli import COMMANDS, Command, main

SAMPLES = Path(__file__).resolve().parent.parent / "samples"


def test_every_command_is_a_jaxprtool_command():
    """Every command tells the invocation's diagnostics what it decides before its body
    runs (`Command.invoke`): none is a plain click command whose `invoke` was patched."""
    ctx = click.Context(main)
    for name in COMMANDS:
        cmd = main.get_command(ctx, name)
        assert isinstance(cmd, Command), name
        assert "invoke" not in vars(cmd), f"{name}: its invoke is patched"


def test_the_input_size_limit_stays_with_its_invocation(tmp_path):
    """`--max-input-size` limits the command it is given to, and neither the next command
    nor a library call made after it (which read at the default limit)."""
    f = tmp_path / "f.jaxpr"
    f.write_text((SAMPLES / "sin_cos.jaxpr").read_text())
    small = CliRunner().invoke(main, ["--max-input-size", "10", "check", str(f)])
    assert small.exit_code == 1 and "larger than 10 bytes" in small.output
    assert api.load(str(f)).jaxpr.eqns  # the library's read: the default limit
    again = CliRunner().invoke(main, ["check", str(f)])
    assert again.exit_code == 0, again.output


def test_a_machine_format_ends_with_its_invocation(tmp_path):
    """The json document is written when the command ends, and the next invocation (or a
    library diagnostic) reports as text again: the sink is the invocation's."""
    f = tmp_path / "bad.jaxpr"
    f.write_text("{ lambda ; a:f32[3]. let b:f32[4] = sin a in (b,) }\n")
    r = CliRunner().invoke(main, ["--output-format", "json", "check", str(f)])
    assert r.exit_code == 1
    records = json.loads(r.stdout)
    assert [x["code"] for x in records] == ["E111"]
    assert diagnostics.current().format == "text"
    plain = CliRunner().invoke(main, ["check", str(f)])
    assert plain.exit_code == 1 and plain.output.startswith(f"{f}:1:")


def test_an_option_after_the_command_reaches_the_command(tmp_path):
    """A global option given after the command (`fmt f --jax-style V`) is on the options
    value the command reads, as before it."""
    f = tmp_path / "f.jaxpr"
    f.write_text((SAMPLES / "sin_cos.jaxpr").read_text())
    before = CliRunner().invoke(main, ["--jax-style", "0.4.35", "fmt", str(f)])
    after = CliRunner().invoke(main, ["fmt", str(f), "--jax-style", "0.4.35"])
    assert before.exit_code == after.exit_code == 0, before.output + after.output
    assert before.output == after.output
