"""The `jaxprtool` program freezes what each paused block allocated out of the collector's
reach (`core.FREEZE_AFTER_PAUSE`): a reference cycle made there, holding a program, is
never freed, and each such program adds to the peak memory (a pass's memo held its input
and result to the end: 10% of grad's peak at 400k equations).  A command leaves no
equation in a cycle: freed by reference counting alone.  (`grad` frees its input before the
clean-up; the other AD commands hold theirs to the end, which their job and the
instruments' printer, a cycle, do.)"""

from __future__ import annotations

import gc
from pathlib import Path

import pytest
from click.testing import CliRunner

from jaxprtool.cli import main
from jaxprtool.core import Eqn, Jaxpr

SAMPLES = Path(__file__).resolve().parents[1] / "samples"


def _cyclic_program_objects(run) -> list:
    """The equations and jaxprs that only the collector would free after `run()`.

    What exists before `run()` is frozen out of the collector's reach first (and stays
    frozen: this is a test process), so the one collection afterwards examines only what
    `run()` allocated: a cycle it made is made of its own objects.  A full collection of a
    test process's whole heap instead took about 2 CPU-s per case late in the suite (issue
    49), against 0.02 s for the command itself."""
    gc.disable()
    gc.freeze()
    try:
        run()
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        found = [o for o in gc.garbage if isinstance(o, (Eqn, Jaxpr))]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    return found


@pytest.mark.parametrize(
    "args",
    [
        ["grad", "--argnums", "0,1", str(SAMPLES / "mlp.jaxpr")],
        ["opt", "-p", "inline,simplify,cse,dce,canonicalize", str(SAMPLES / "rnn.jaxpr")],
        ["opt", "-p", "inline,simplify,cse,dce,canonicalize", str(SAMPLES / "cond.jaxpr")],
    ],
)
def test_a_command_leaves_no_program_in_a_cycle(args):
    def run():
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 0, r.output

    assert _cyclic_program_objects(run) == []


def test_the_program_keeps_only_the_last_result_of_a_split_input(monkeypatch):
    """The `jaxprtool` program keeps a pipeline's result to its exit (not freed equation by
    equation after the printing), the latest only: a split input's earlier parts' results
    are let go, not added up."""
    from jaxprtool import cli

    monkeypatch.setattr(cli, "_STANDALONE", True)
    monkeypatch.setattr(cli, "_one_program_process", lambda command: None)  # (per process)
    monkeypatch.setattr(cli, "_LAST", [])
    parts = "\n# -----\n".join(
        f"{{ lambda ; a:f32[3]. let b:f32[3] = {p} a in (b,) }}" for p in ("sin", "cos", "exp")
    )
    r = CliRunner().invoke(main, ["opt", "-p", "dce", "--split-input-file", "-"], input=parts)
    assert r.exit_code == 0, r.output
    assert [e.prim for j in cli._LAST for e in j.eqns] == ["exp"]
