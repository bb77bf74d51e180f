"""Fuzzing: mutated and generated jaxpr text never crashes the tool.

Every run must exit 0 or 1; on 1 the message is located (`FILE:LINE:COL: error:`
or a plain `error:` for whole-file problems) and is not an internal error; no
traceback; no hang (each run is bounded by an alarm); and a failed run leaves
no output file.  `make fuzz` runs a long budget (FUZZ_EXAMPLES).
"""

from __future__ import annotations

import os
import re
import signal

import pytest
from click.testing import CliRunner
from conftest import corpus_files
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jaxprtool.cli import main

SEEDS = [
    p
    for p in corpus_files("jax-0.10.2")
    if p.stat().st_size < 4000 and "newline_in_fmt" not in p.name
][:40]
COMMANDS = [["fmt"], ["check"], ["jvp"], ["vjp"], ["dce"]]
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "60"))
LOCATED = re.compile(r"^(\S+:\d+:\d+: )?error: ", re.M)
STATS = {"tried": 0, "rejected": 0}


class Hang(Exception):
    pass


def _alarm(signum, frame):
    raise Hang()


def run_bounded(args, text, tmp_path, seconds=20):
    out = tmp_path / "out.jaxpr"
    if out.exists():
        out.unlink()
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(seconds)
    try:
        extra = [] if args[0] == "check" else ["-o", str(out)]
        result = CliRunner().invoke(main, [*args, "-", *extra], input=text)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    return result, out


def mutate(text: str, data) -> str:
    kind = data.draw(
        st.sampled_from(
            ["flip", "drop_line", "unbalance", "number", "type", "truncate", "dup_line"]
        )
    )
    if not text:
        return text
    if kind == "flip":
        i = data.draw(st.integers(0, len(text) - 1))
        c = data.draw(st.sampled_from(list("{}[]()=:;., \n_a1-") + ["\x00", "é"]))
        return text[:i] + c + text[i + 1 :]
    lines = text.split("\n")
    j = data.draw(st.integers(0, max(0, len(lines) - 1)))
    if kind == "drop_line":
        return "\n".join(lines[:j] + lines[j + 1 :])
    if kind == "dup_line":
        return "\n".join(lines[: j + 1] + lines[j:])
    if kind == "unbalance":
        return text.replace(data.draw(st.sampled_from(["(", ")", "[", "]", "{", "}"])), "", 1)
    if kind == "number":
        return re.sub(
            r"\d+",
            lambda m: data.draw(st.sampled_from(["99999999999999999999", "-1", "0", "3"])),
            text,
            count=2,
        )
    if kind == "type":
        return text.replace(
            ":f32[", data.draw(st.sampled_from([":i32[", ":f33[", ":bool[", ":f32[[", ":f64["])), 1
        )
    return text[: data.draw(st.integers(0, len(text)))]


@pytest.mark.skipif(not SEEDS, reason="reference corpus absent: no seed files to mutate")
@settings(
    max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True
)
@given(data=st.data())
def test_mutated_corpus_never_crashes(data, tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("fuzz")
    seed = data.draw(st.sampled_from(SEEDS))
    text = mutate(seed.read_text(), data)
    args = data.draw(st.sampled_from(COMMANDS))
    result, out = run_bounded(args, text, tmp_path)
    STATS["tried"] += 1
    assert result.exit_code in (0, 1), (args, result.output, result.exception)
    assert "Traceback" not in result.output
    assert "internal error" not in result.output, (args, text, result.output)
    if result.exit_code == 1:
        STATS["rejected"] += 1
        assert LOCATED.search(result.output), result.output
        assert not out.exists(), "a failed run left an output file"


@settings(
    max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True
)
@given(
    text=st.lists(
        st.sampled_from(
            list("{}[]()=:;., \nabcfi0123lmtdn_") + ["{ lambda ", " let ", " in ", "f32[3]"]
        ),
        max_size=120,
    ).map("".join)
)
def test_random_text_never_crashes(text, tmp_path_factory):
    result, out = run_bounded(["check"], text, tmp_path_factory.mktemp("fuzz"))
    assert result.exit_code in (0, 1), (text, result.output, result.exception)
    assert "internal error" not in result.output, (text, result.output)
    if result.exit_code == 1:
        assert LOCATED.search(result.output), result.output


def teardown_module():
    """`make fuzz` (pytest -s) prints how many mutated inputs ran and how many were rejected."""
    print(
        f"\nfuzz: {STATS['tried']} mutated inputs tried, {STATS['rejected']} rejected with a located error"
    )
