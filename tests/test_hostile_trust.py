"""Hostile input, third round (issue 37, items 5 to 16): inputs that cost exponential or
unbounded work, folder scans of an untrusted checkout, output a CI system reads, signals and
environment variables.

Each test plants the attack and checks the exact behaviour: a located message and exit 1
(2 for usage), no traceback, no partial output, and quickly.
"""

from __future__ import annotations

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
    "<stdin>:75:5: error: shared jaxpr 'f19' expands to 1,572,862 equations once its calls "
    "are inlined, over the limit of 1,000,000: it uses shared jaxpr 'f18' 2 times, of "
    "786,430 equations each (--max-equations N raises the limit)"
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
    t0 = time.perf_counter()
    r = tool(*cmd.split(), "-", text=DOUBLING)
    if cmd == "check-grad":  # 2: trouble, and its summary
        summary = "check-grad: 0 files, 0 checks, 0 failures, 1 not checked (errors above)\n"
        assert_refused(r, TOO_LARGE, 2, summary)
    else:
        assert_refused(r, TOO_LARGE)
    assert time.perf_counter() - t0 < 10


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
