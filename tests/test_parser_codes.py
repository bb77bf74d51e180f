"""The reader's errors carry their codes from construction (issue 47): E001 where the text
does not read as a jaxpr (E101 for a variable used before its definition), `OverLimit`
(E003) where it is over one of the reader's limits; no code is set on an exception after
it is made (`diagnostics.CODES`)."""

from __future__ import annotations

import ast
import random
from pathlib import Path

import pytest
from conftest import corpus_files

from jaxprtool.core import JaxprError, OverLimit
from jaxprtool.text.parser import MAX_NESTING, parse

PARSER = Path(__file__).resolve().parents[1] / "jaxprtool" / "text" / "parser"


def _sources():
    return [(p.name, ast.parse(p.read_text(), str(p))) for p in sorted(PARSER.glob("*.py"))]


def test_no_code_is_assigned_onto_an_exception():
    assigned = [
        f"{name}:{node.lineno}"
        for name, tree in _sources()
        for node in ast.walk(tree)
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign))
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Attribute) and target.attr == "code"
    ]
    assert assigned == []


def test_every_error_made_by_the_reader_is_given_its_code():
    uncoded = [
        f"{name}:{node.lineno}"
        for name, tree in _sources()
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "JaxprError"
        and len(node.args) < 3
        and not any(k.arg == "code" for k in node.keywords)
    ]
    assert uncoded == []


NEST = "{ lambda ; a:f32[]. let b:f32[] = jit[name=f jaxpr=%s] a in (b,) }"
LEAF = "{ lambda ; a:f32[]. let b:f32[] = sin a in (b,) }"


def _nested(depth: int) -> str:
    text = LEAF
    for _ in range(depth - 1):
        text = NEST % text
    return text


def _chained(depth: int) -> str:
    """Shared jaxprs `f1` ... each calling the one before: `depth` levels of jaxprs."""
    defs = [f"let f1 = {LEAF} in"]
    for k in range(2, depth):
        defs.append(f"let f{k} = {NEST % f'f{k - 1}'} in")
    return "\n".join(defs) + "\n" + NEST % f"f{depth - 1}" + "\n"


#: text -> (the error's class, its code)
CASES = {
    "syntax": ("{ lambda ; a:f32[3]. let\n    b:f32[3] = sin a\n  (b,) }\n", JaxprError, "E001"),
    "recursive shared jaxpr": (
        "let f = { lambda ; a:f32[3]. let\n    b:f32[3] = jit[name=f jaxpr=f] a\n  in (b,) } in\n"
        "{ lambda ; d:f32[3]. let\n    e:f32[3] = jit[name=f jaxpr=f] d\n  in (e,) }\n",
        JaxprError,
        "E001",
    ),
    "huge number": ("{ lambda ; a:f32[" + "9" * 500 + "]. let  in (a,) }", OverLimit, "E003"),
    "dimension over int64": (
        "{ lambda ; a:f32[99999999999999999999]. let  in (a,) }",
        OverLimit,
        "E003",
    ),
    "nesting": (_nested(MAX_NESTING + 1), OverLimit, "E003"),
    "nesting of shared jaxprs": (_chained(MAX_NESTING + 1), OverLimit, "E003"),
    "a name used before its definition": (
        "{ lambda ; a:f32[3]. let\n    b:f32[3] = sin c\n  in (b,) }\n",
        JaxprError,
        "E101",
    ),
}


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "grammar"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_each_error_has_its_class_and_code(name, fast):
    text, cls, code = CASES[name]
    with pytest.raises(JaxprError) as info:
        parse(text, "t.jaxpr", fast=fast)
    assert type(info.value) is cls and info.value.code == code, (info.value, info.value.code)


@pytest.mark.parametrize("nested", [_nested, _chained])
def test_the_deepest_nesting_accepted_reads(nested):
    assert parse(nested(MAX_NESTING), "t.jaxpr").jaxpr is not None


def _damaged(text: str, rng: random.Random):
    """`text` with one character deleted or one line's indentation changed."""
    j = rng.randrange(len(text))
    yield text[:j] + text[j + 1 :]
    lines = text.split("\n")
    k = rng.randrange(len(lines))
    yield "\n".join(lines[:k] + [" " + lines[k][2:]] + lines[k + 1 :])


@pytest.mark.skipif(not corpus_files("jax-0.12.0.1"), reason="reference corpus not found")
def test_errors_in_damaged_texts_are_coded():
    rng = random.Random(47)
    codes = {}
    for path in corpus_files("jax-0.12.0.1")[::3]:
        text = path.read_text()
        for _ in range(4):
            for damaged in _damaged(text, rng):
                for fast in (True, False):
                    try:
                        parse(damaged, "t.jaxpr", fast=fast)
                    except JaxprError as e:
                        codes[type(e).__name__, e.code] = (
                            codes.get((type(e).__name__, e.code), 0) + 1
                        )
    # (the damage is refused: the codes were looked at; E101: a name used before definition)
    assert codes and set(codes) <= {("JaxprError", "E001"), ("JaxprError", "E101")}, codes
