"""The two parsers (lark-cython's compiled LALR parser and lark's pure-Python one) read every
corpus file and every malformed text alike; the remembered parameter values are fresh per use."""

from __future__ import annotations

import pytest
from conftest import CORPUS, needs_corpus

from jaxprtool import core, params
from jaxprtool.core import JaxprError
from jaxprtool.text import grammar
from jaxprtool.text.parser import parse
from jaxprtool.text.printer import print_jaxpr

compiled_available = pytest.mark.skipif(
    not grammar.lark_plugins(),
    reason="lark-cython is not installed (pip install '.[fast]'): only the pure-Python parser",
)


def outcome(text: str, compiled: bool):
    """What a parse gives: the printed program and the warnings, or the error message."""
    try:
        r = parse(text, "f.jaxpr", compiled=compiled)
    except JaxprError as e:
        return ("error", str(e))
    return (print_jaxpr(r.jaxpr), [str(w) for w in r.warnings], r.jaxpr)


@needs_corpus
@compiled_available
@pytest.mark.parametrize("every", [2, pytest.param(1, marks=pytest.mark.slow)], ids=["half", "all"])
def test_both_parsers_read_the_corpus_alike(every):
    """The default run reads every other file (`make test-full` all of them)."""
    files = sorted(CORPUS.rglob("*.jaxpr"))
    assert len(files) > 100
    for f in files[::every]:
        text = f.read_text()
        a, b = outcome(text, True), outcome(text, False)
        assert a[:2] == b[:2], f
        if a[0] != "error":
            assert core.alpha_equal(a[2], b[2]), f
            assert [e.loc for e in core.all_eqns(a[2])] == [e.loc for e in core.all_eqns(b[2])]


BROKEN = [
    "{ lambda ; a:f32[3]. let b:f32[3] = sin a c in (b,) }",
    "{ lambda ; a:f32[3]. let\n    b:f32[3] = sin a\n   c:f32[3] = cos b\n  in (c,) }",
    "{ lambda ; a:f32[3]. let b:f32[3] = reduce_sum[axes=(0, out_sharding=None] a in (b,) }",
    "{ lambda ; a:f32[3]. let b:f32[3] = sin a in (b, }",
    "{ lambda ; a:f32[3]. let b:f33[3] = sin a in (b,) }",
    "{ lambda ; a:f32[3]. let b:f32[3] = pjit[name=f jaxpr={ lambda ; c:f32[3]. let in (c,) }] a in (b,) }",
    "{ lambda ; a:f32[3]. let b:f32[3] = sin _ in (b,) }",
    "{ lambda ; a. let b = sin a in (b,) }",
]


@compiled_available
@pytest.mark.parametrize("text", BROKEN)
def test_both_parsers_refuse_alike(text):
    assert outcome(text, True)[:2] == outcome(text, False)[:2]


DOT = (
    "    {o}:f32[4,4] = dot_general[dimension_numbers=(([1], [0]), ([], [])) "
    "preferred_element_type=float32] {x} {y}\n"
)


@pytest.mark.parametrize("compiled", [False, True])
def test_a_remembered_value_is_a_fresh_copy(compiled):
    text = (
        "{ lambda ; a:f32[4,4] b:f32[4,4]. let\n"
        + DOT.format(o="c", x="a", y="b")
        + DOT.format(o="d", x="c", y="a")
        + "  in (d,) }\n"
    )
    j = parse(text, compiled=compiled and bool(grammar.lark_plugins())).jaxpr
    p1, p2 = (e.params["dimension_numbers"] for e in j.eqns)
    assert p1 == p2 == (([1], [0]), ([], []))
    assert p1[0][0] is not p2[0][0]  # lists are never shared between equations
    p1[0][0].append(7)
    assert p2[0][0] == [1]
    assert print_jaxpr(j).count("preferred_element_type=float32") == 2


def test_values_ending_at_a_line_break_are_read_each_time():
    # a broken parameter list: each value ends at its line, where what follows decides it
    eqn = (
        "    {o}:f32[3] = reduce_precision[\n"
        "      exponent_bits=8\n"
        "      mantissa_bits={m}\n"
        "    ] {x}\n"
    )
    text = (
        "{ lambda ; a:f32[3]. let\n"
        + eqn.format(o="b", m="7", x="a")
        + eqn.format(o="c", m="23", x="b")
        + "  in (c,) }\n"
    )
    b, c = parse(text).jaxpr.eqns
    assert (b.params["mantissa_bits"], c.params["mantissa_bits"]) == (7, 23)
    assert isinstance(b.params["exponent_bits"], int)
    assert not isinstance(b.params["exponent_bits"], params.Opaque)
