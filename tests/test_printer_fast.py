"""The printer's fast path gives the text of its document path.

`_Printer(style)` builds the line of an ordinary equation while naming it, reads the scopes in
the same walk, and lays lines out without an agenda entry each (`pretty.lines`, `_render_eqn`);
`_Printer(style, fast=False)` names, checks and lays out every equation through the generic
documents (`_name_eqn`, `_check_scope`, `_eqn`, `pretty.join`), the layout that the printer
tests compare with JAX's printouts.  Every corpus file (JAX's printouts of several versions)
must print the same text both ways in every style and at several widths (narrow ones break
parameter lists and binder lists inside equations).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import CORPUS, needs_corpus

from jaxprtool import core, io
from jaxprtool.text import pretty
from jaxprtool.text.parser import parse
from jaxprtool.text.printer import _Printer, print_jaxpr, print_jaxpr_pieces
from jaxprtool.text.style import Style, detect_style

HERE = Path(__file__).resolve().parent
FILES = sorted(CORPUS.parent.glob("corpus/**/*.jaxpr")) + sorted(
    CORPUS.parent.glob("wild/**/*.jaxpr")
)
# (tests/golden/lit/ holds several programs a file: the lit tests' commands and outputs)
OURS = sorted(HERE.glob("golden/printer/**/*.jaxpr")) + sorted(HERE.glob("data/**/*.jaxpr"))
STYLES = ("0.4.21", "0.4.35", "0.6.2", "0.7.2", "0.12")
WIDTHS = (12, 40, 80, 100)


def both(j: core.Jaxpr, style: Style, width: int) -> tuple[str, str]:
    """The text of both paths at `width`; the fast one built for width 80 (its lines kept as
    flat texts where they fit at 80: at a narrower width they are rebuilt, `pretty.lines`'
    `rebuild`)."""
    with core.gc_paused():
        fast = pretty.format(_Printer(style).toplevel(j), width)
        slow = pretty.format(_Printer(style, fast=False).toplevel(j), width)
    return fast, slow


def _parsed(path) -> core.Jaxpr | str:
    """The program, or why the reader refuses it."""
    try:
        return parse(path.read_text(), str(path)).jaxpr
    except core.JaxprError as e:
        return str(e).splitlines()[0]


#: the reader's refusals of corpus files (tested where the reader is tested): untyped
#: 2019-2021 docs printouts and autodidax's toy printer
KNOWN_REFUSALS = ("jaxpr has no types (printed with print_shapes=False)", "expected a binder")
_PROGRAMS: dict = {}  # path -> _parsed(path), read when a test first asks (not at collection)


def _program(path) -> core.Jaxpr | str:
    if path not in _PROGRAMS:
        _PROGRAMS[path] = _parsed(path)
    return _PROGRAMS[path]


@needs_corpus
def test_corpus_has_files():
    programs = {p: _program(p) for p in FILES}
    readable = [p for p, j in programs.items() if not isinstance(j, str)]
    assert len(readable) > 300, f"expected the corpus under {CORPUS.parent}, found {len(FILES)}"
    refused = {str(p): j for p, j in programs.items() if isinstance(j, str)}
    unknown = {p: m for p, m in refused.items() if not any(k in m for k in KNOWN_REFUSALS)}
    assert not unknown, unknown
    assert len(refused) <= 15, f"the reader refuses more corpus files than before: {refused}"


def _check_both_ways(j: core.Jaxpr) -> None:
    styles = [detect_style(j), *(Style.parse(s) for s in STYLES)]
    for style in styles:
        for width in WIDTHS:
            fast, slow = both(j, style, width)
            assert fast == slow, f"style {style}, width {width}"


@needs_corpus
@pytest.mark.parametrize("path", FILES, ids=[f"{p.parent.name}/{p.name}" for p in FILES])
def test_fast_path_prints_the_document_text(path):
    j = _program(path)
    if isinstance(j, str):  # a refusal test_corpus_has_files knows
        assert any(k in j for k in KNOWN_REFUSALS), j
        return
    _check_both_ways(j)


@pytest.mark.parametrize("path", OURS, ids=[f"{p.parent.name}/{p.name}" for p in OURS])
def test_fast_path_prints_the_document_text_of_test_data(path):
    """The printer goldens (JAX's printouts) and the test programs, without the corpus."""
    j = _parsed(path)
    if isinstance(j, str):  # copies of untyped corpus printouts (tests/data/older)
        assert any(k in j for k in KNOWN_REFUSALS), j
        return
    _check_both_ways(j)


def _renamed(fast: bool, width: int) -> tuple[_Printer, core.Jaxpr, str]:
    """`b` and `c` given the same name before printing (as `Namer.set_name` does): the use of
    `b` after `c` is bound would read as `c`, so the safety pass renames `b`."""
    j, given = _shadowing("use")
    p = _Printer(Style.parse("0.12"), fast=fast)
    p.names.update(given)
    return p, j, pretty.format(p.toplevel(j), width)


def test_fast_path_after_renaming():
    """A printout whose names the safety pass changes (the lines built while naming are
    dropped and built again), and one with a use that no binder names (named after the
    equation's results), both ways."""
    p, j, fast = _renamed(True, 80)
    assert not p.lines, "expected the safety pass to rename"
    assert core.alpha_equal(parse(fast).jaxpr, j), fast  # reads back as the same program
    for width in (20, 80, 200):
        assert _renamed(True, width)[2] == _renamed(False, width)[2]
    free = core.Var(core.ShapedArray((), "f32"))
    out = core.Var(core.ShapedArray((), "f32"))
    j2 = core.Jaxpr((), (), (core.Eqn("neg", (free, free), (out,), {}),), (out,))
    fast, slow = both(j2, Style.parse("0.12"), 80)
    assert fast == slow == "{ lambda ; . let a:f32[] = neg b b in (a,) }"


def _shadowing(case: str) -> tuple[core.Jaxpr, dict]:
    """A program and names given before printing under which one use reads another
    binding: `b` used after `c` took its name (in an equation, or as an outvar), or a
    binder named `_` used once `_` is bound a second time."""
    f32 = core.ShapedArray((), "f32")
    a, b, c, d = (core.Var(f32) for _ in range(4))
    eqns = (
        core.Eqn("sin", (a,), (b,), {}),
        core.Eqn("cos", (a,), (c,), {}),
        core.Eqn("mul", (b, c), (d,), {}),
    )
    if case == "outvar":
        return core.Jaxpr((), (a,), eqns[:2], (b, c)), {b: "x", c: "x"}
    if case == "underscore":
        return core.Jaxpr((), (a,), eqns, (d,)), {b: "_", c: "_"}
    return core.Jaxpr((), (a,), eqns, (d,)), {b: "x", c: "x"}


@pytest.mark.parametrize("case", ("use", "outvar", "underscore"))
def test_a_use_that_would_read_another_binding_is_renamed(case):
    """Both paths rename the shadowed binder, and the text reads back as the program."""
    j, given = _shadowing(case)
    texts = []
    for fast in (True, False):
        p = _Printer(Style.parse("0.12"), fast=fast)
        p.names.update(given)
        texts.append(pretty.format(p.toplevel(j), 80))
        assert len(set(p.names[v] for v in given)) == 2, texts[-1]
    assert texts[0] == texts[1]
    assert core.alpha_equal(parse(texts[0]).jaxpr, j), texts[0]


@pytest.mark.parametrize("piece", (1, 2, 5))
def test_the_printout_in_pieces_is_the_printout(piece, monkeypatch):
    """`print_jaxpr_pieces` joined is `print_jaxpr`'s text wherever a piece ends: inside a
    jaxpr's lines (the compiled loop stopped at its bound, the rest laid out after the
    reader's turn), between a definition and the program, within an equation laid out over
    several lines; at a width where every line fits and at one where many break."""
    monkeypatch.setattr(pretty, "PIECE", piece)
    long = 0
    for path in OURS:
        j = _program(path)
        if isinstance(j, str):
            continue
        style = detect_style(j)
        for width in (12, 80):
            pieces = list(print_jaxpr_pieces(j, style, width, "\n"))
            text = print_jaxpr(j, style, width, "\n")
            assert "".join(pieces) == text, (path, width)
            if text.count("\n") > 4 * piece:  # (a line is two strings laid out, or more)
                long += 1
                assert len(pieces) > 2, (path, width)
    assert long > 10


def test_a_printout_in_pieces_is_written_as_its_text(tmp_path, monkeypatch):
    """`io.Pieces` to a file (replaced atomically) and to standard output: the bytes of the
    whole text, a piece that is not ASCII included."""
    monkeypatch.setattr(pretty, "PIECE", 2)
    j = parse((HERE / "golden/printer/many_args.w80.jaxpr").read_text()).jaxpr
    text = "# \u00e9t\u00e9\n" + print_jaxpr(j, end="\n")
    out = tmp_path / "out.jaxpr"
    io.write_output(io.Pieces(["# \u00e9t\u00e9\n", *print_jaxpr_pieces(j, end="\n")]), str(out))
    assert out.read_bytes() == text.encode("utf-8")
    assert str(io.Pieces(print_jaxpr_pieces(j, end="\n"))) == print_jaxpr(j, end="\n")
