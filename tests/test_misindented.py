"""Equations away from their block's column (issue 39, item 9).

The layout rule (FORMAT §5.5) only tells an equation from the continuation of the one
before.  A line at another column than its block's first equation that nothing but an
equation can start is read as one; a block whose equations are all at one column other
than JAX's reads as before.  Either gives one located warning per text (W004); `fmt`
prints JAX's layout, `fmt -i` repairs the file, `check` passes (`--werror`: fails).  Where
the layout decides the meaning (a line of `nan:T`/`inf:T`, literals or binders: FORMAT
H1), the error stays."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from jaxprtool.cli import main
from jaxprtool.text.parser import parse

DATA = Path(__file__).resolve().parent / "data" / "layout"
#: JAX 0.12 printouts: one flat block; a while loop with two nested blocks
FLAT = (DATA / "ad_grad_simple.jaxpr").read_text()
NESTED = (DATA / "while_loop.jaxpr").read_text()
#: a line that starts an equation: its indentation, the equation
EQUATION_LINE = re.compile(r"^( +)((?:[a-z]+_?|_):)", re.M)


def tool(*argv, text: str | None = None):
    return CliRunner().invoke(main, ["--no-color", *map(str, argv)], input=text)


def deeper(text: str, every: int = 1) -> str:
    """`text` with every `every`-th equation line (counting from the first) two columns
    deeper: one level too deep (every=1) or mixed (every=2)."""
    count = iter(range(10**6))
    return EQUATION_LINE.sub(
        lambda m: ("  " if next(count) % every == 0 else "") + m.group(1) + m.group(2), text
    )


def first_deeper(text: str, line: int) -> str:
    """`text` with line `line` (1-based, the first equation of a block of two or more) two
    columns deeper."""
    lines = text.split("\n")
    lines[line - 1] = "  " + lines[line - 1]
    return "\n".join(lines)


@pytest.mark.parametrize(
    "text",
    [deeper(FLAT, 2), first_deeper(FLAT, 2), deeper(NESTED, 2), first_deeper(NESTED, 4)],
    ids=["flat-mixed", "flat-first-deeper", "nested-mixed", "nested-first-deeper"],
)
def test_misindented_equations_are_read_and_fmt_writes_jax_layout(text):
    original = FLAT if text.count("\n") == FLAT.count("\n") else NESTED
    assert text != original
    r = tool("fmt", "-", text=text)
    assert r.exit_code == 0, r.output
    assert r.stdout == original  # byte for byte JAX's printout
    (line,) = [x for x in r.stderr.splitlines() if "warning" in x]  # one per text
    assert "layout is not JAX's" in line and "fmt -i" in line
    assert tool("fmt", "-", text=text).output == r.output  # the same, every time


@pytest.mark.parametrize(
    "text, where, reference",
    [
        (first_deeper(FLAT, 3), (3, 7), "the first of its block at column 5"),
        (deeper(FLAT, 2), (2, 7), "JAX prints this block's equations at column 5"),
        (deeper(FLAT), (2, 7), "JAX prints this block's equations at column 5"),
        (deeper(NESTED), (2, 7), "JAX prints this block's equations at column 5"),
        (first_deeper(NESTED, 4), (4, 13), "JAX prints this block's equations at column 11"),
        (first_deeper(NESTED, 5), (5, 13), "the first of its block at column 11"),
    ],
)
def test_one_warning_at_the_first_equation_off_its_column(text, where, reference):
    (w,) = parse(text, "f.jaxpr").warnings
    assert (*w.loc, w.code) == ("f.jaxpr", *where, "W004")
    assert reference in w.message


def test_equations_one_level_too_deep_throughout():
    """Every equation of each block at the same column, one level right of JAX's: the
    layout rule reads them (the column is the block's own), with the warning."""
    for original in (FLAT, NESTED):
        r = tool("fmt", "-", text=deeper(original))
        assert r.exit_code == 0 and r.stdout == original
        assert r.stderr.count("warning:") == 1


@pytest.mark.parametrize(
    "body",
    [
        "    b:f32[3] = sin a\n      c:f32[3] = cos b\n",
        "      b:f32[3] = sin a\n    c:f32[3] = cos b\n",  # (issue 27: was an error)
    ],
)
def test_two_equations_at_two_columns_read_as_two(body):
    r = parse("{ lambda ; a:f32[3]. let\n" + body + "  in (c,) }")
    assert [e.prim for e in r.jaxpr.eqns] == ["sin", "cos"]
    assert [w.code for w in r.warnings] == ["W004"]


def test_jax_printouts_are_not_warned():
    assert parse(FLAT).warnings == [] and parse(NESTED).warnings == []


def test_fmt_in_place_repairs_and_check_passes_with_the_warning(tmp_path):
    f = tmp_path / "f.jaxpr"
    f.write_text(deeper(NESTED, 2))
    r = tool("check", f)
    assert r.exit_code == 0 and f"{f}:2:7: warning:" in r.stderr and "[W004]" in r.stderr
    r = tool("check", "--werror", f)
    assert r.exit_code == 1 and f"{f}:2:7: error:" in r.stderr
    assert tool("fmt", "--check", f).exit_code == 1
    assert tool("fmt", "-i", f).exit_code == 0
    assert f.read_text() == NESTED
    r = tool("check", "-q", "--werror", f)
    assert r.exit_code == 0 and r.stderr == ""


H1_TEXT = """{ lambda ; a:f32[]. let
    b:f32[] = add a
      nan:f32[]
      c:f32[] = sin b
  in (c,) }
"""


@pytest.mark.parametrize(
    "text",
    [H1_TEXT, H1_TEXT.replace("nan:f32[]\n", "nan:f32[]\n\n")],
    ids=["h1", "h1-blank-line"],
)
def test_where_the_layout_decides_the_error_stays(text):
    """`nan:f32[]` on its own line continues `add a` (a literal operand) or starts an
    equation binding `nan` and `c`: only the layout could tell, and it says neither."""
    r = tool("fmt", "-", text=text)
    assert r.exit_code == 1 and "Traceback" not in r.output
    line = text.splitlines().index("      c:f32[] = sin b") + 1
    assert r.stderr.startswith(
        f"<stdin>:{line}:7: error: a binder cannot appear among operands; a new equation "
        "must start at column 5"
    )


def test_a_wrapped_binder_list_still_continues():
    """A deeper line after a binder continues the binder list, as in JAX's layout."""
    text = "{ lambda ; a:f32[]. let\n    b:f32[]\n      c:f32[] = split[sizes=(1,) axis=0] a\n  in (b, c) }\n"
    j = parse(text).jaxpr
    assert len(j.eqns) == 1 and len(j.eqns[0].outputs) == 2 and not parse(text).warnings
