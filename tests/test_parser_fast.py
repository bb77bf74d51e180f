"""The parser's fast path (`_State.read_run`, `read_inline`, `_parse_plain`) gives what the
grammar gives: the same IR, printed text, locations, warnings and error messages, on every
corpus file, on generated programs and on damaged texts; where it does not read an equation
the grammar does, and a text of one simple jaxpr is read without building lark."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import CORPUS, needs_corpus
from fuzzgen import Drawn, ProgramGen
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_roundtrip_property import STYLES, _Gen

from jaxprtool import core
from jaxprtool.core import JaxprError
from jaxprtool.record import prim
from jaxprtool.text import grammar, parser
from jaxprtool.text.parser import parse
from jaxprtool.text.printer import print_jaxpr

REPO = Path(__file__).resolve().parent.parent


def outcome(text: str, fast: bool, compiled: bool = False):
    """What a parse gives: printed program, warnings and locations, or the error message."""
    try:
        r = parse(text, "f.jaxpr", fast=fast, compiled=compiled)
    except JaxprError as e:
        return ("error", str(e))
    j = r.jaxpr
    locs = [e.loc for e in core.all_eqns(j)]
    return (print_jaxpr(j), [str(w) for w in r.warnings], locs, j)


def assert_same(text: str, compiled: bool = False) -> None:
    a, b = outcome(text, True, compiled), outcome(text, False, compiled)
    assert a[:3] == b[:3], text
    if a[0] != "error":
        assert core.alpha_equal(a[3], b[3]), text
        assert_no_subjaxprs_told_right(a[3])


def assert_no_subjaxprs_told_right(j: core.Jaxpr) -> None:
    """Every equation the reader marked as holding no jaxpr (`Eqn.no_subjaxprs`: the fast
    path's, whose parameter lists hold plain values) holds none: the walks skip them."""
    for e in core.all_eqns(j):
        if e.no_subjaxprs:
            assert not any(core.subjaxprs(v) for v in e.params.values()), e


def plain_reads(text: str) -> bool:
    """Whether the text is read without lark."""
    return parser._parse_plain(parser._State(text, "f.jaxpr")) is not None


#: the files the default run reads (twice: the Python path's run too), relative to the
#: format folder or to the repository (tests/): a sample that executes every line of the
#: package that the sample before it (every other file: 323) executed, on the Python path
#: (chosen by a greedy cover of the lines `sys.monitoring` saw each file's `assert_same` and
#: `plain_reads` execute, JAXPRTOOL_PURE_PYTHON=1: 46 files for 5,270 lines); `make
#: test-full` reads every file
COVERING = [
    "corpus/jax-0.10.2/ad_grad_simple.jaxpr",
    "corpus/jax-0.10.2/checkpoint.jaxpr",
    "corpus/jax-0.10.2/checkpoint_policy_grad.jaxpr",
    "corpus/jax-0.10.2/constvars_in_nested_jaxprs.jaxpr",
    "corpus/jax-0.10.2/conv2d.jaxpr",
    "corpus/jax-0.10.2/custom_linear_solve.jaxpr",
    "corpus/jax-0.10.2/custom_vjp_linearize.jaxpr",
    "corpus/jax-0.10.2/debug_print_callback.jaxpr",
    "corpus/jax-0.10.2/device_put_inside_jit.jaxpr",
    "corpus/jax-0.10.2/dropvars_unused_outputs.jaxpr",
    "corpus/jax-0.10.2/dtypes_small_floats_ints.jaxpr",
    "corpus/jax-0.10.2/explicit_sharding_types.jaxpr",
    "corpus/jax-0.10.2/jit_called_twice_different_shapes.jaxpr",
    "corpus/jax-0.10.2/jit_lambda_shared_names.jaxpr",
    "corpus/jax-0.10.2/jnp_misc_highlevel.jaxpr",
    "corpus/jax-0.10.2/linalg_ops.jaxpr",
    "corpus/jax-0.10.2/named_call_scope.jaxpr",
    "corpus/jax-0.10.2/nextafter_erf_inv_igamma_random_gamma_grad.jaxpr",
    "corpus/jax-0.10.2/pallas_interpret.jaxpr",
    "corpus/jax-0.10.2/refs_indexing_addupdate.jaxpr",
    "corpus/jax-0.10.2/shape_poly_constraints_ops.jaxpr",
    "corpus/jax-0.10.2/shard_map_vma.jaxpr",
    "corpus/jax-0.12.0.1/ad_grad_int_float0.jaxpr",
    "corpus/jax-0.12.0.1/constvars_simplified_literals_flag.jaxpr",
    "corpus/jax-0.12.0.1/custom_vjp_grad.jaxpr",
    "corpus/jax-0.12.0.1/debug_print_newline_in_fmt.jaxpr",
    "corpus/jax-0.12.0.1/dropvar_name_aliasing_ambiguity.jaxpr",
    "corpus/jax-0.12.0.1/empty_outputs_and_unused_inputs.jaxpr",
    "corpus/jax-0.12.0.1/gather_fancy_indexing.jaxpr",
    "corpus/jax-0.12.0.1/literal_outputs_and_passthrough.jaxpr",
    "corpus/jax-0.12.0.1/mul_out_dtype_param.jaxpr",
    "corpus/jax-0.12.0.1/shape_poly_dim_expressions.jaxpr",
    "corpus/jax-0.12.0.1/sharding_constraint_auto_mesh.jaxpr",
    "corpus/jax-0.12.0.1/sort_argsort_topk.jaxpr",
    "corpus/older/jax-0.4.35/custom_jvp_nn.jaxpr",
    "corpus/older/jax-0.4.35/dropvar_name_aliasing_ambiguity.jaxpr",
    "corpus/older/jax-0.4.35/dtypes_all_32bit.jaxpr",
    "corpus/older/jax-0.4.35/literal_outputs_and_passthrough.jaxpr",
    "corpus/older/jax-0.4.35/pallas_interpret.jaxpr",
    "corpus/older/jax-0.7.2/shard_map_collectives.jaxpr",
    "corpus/variants/use_color_ansi.jaxpr",
    "tests/data/older/021_docs-custom-gpu-op-pjit-xmap-named-shapes-2022.jaxpr",
    "wild/002_docs-custom-interp-inverse-tie_in-2019.jaxpr",
    "wild/004_docs-jaxpr-rst-scan-forward-2020.jaxpr",
    "wild/052_catalyst-docs-sharp-bits-qnode-func-custom-prims.jaxpr",
    "wild/054_catalyst-docs-debugging-reindented.jaxpr",
]  # fmt: skip


def _reader_files(sample: bool) -> list[Path]:
    if sample:
        return [REPO / r if r.startswith("tests/") else CORPUS.parent / r for r in COVERING]
    files = sorted(CORPUS.parent.rglob("*.jaxpr"))
    files += sorted((REPO / "tests" / "data").rglob("*.jaxpr"))
    return files + sorted((REPO / "samples").glob("*.jaxpr"))


@needs_corpus
@pytest.mark.parametrize(
    "sample", [True, pytest.param(False, marks=pytest.mark.slow)], ids=["covering", "all"]
)
def test_fast_path_reads_every_corpus_file_as_the_grammar(sample):
    """The default run reads the files of COVERING (`make test-full` all of them)."""
    files = _reader_files(sample)
    assert len(files) > (40 if sample else 100)
    plain = 0
    for f in files:
        text = f.read_text()
        assert_same(text)
        plain += plain_reads(text)
    assert plain > len(files) // 2  # most corpus texts are read without lark


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_fast_path_reads_printed_random_programs_as_the_grammar(data):
    """15 programs in `make test` (twice: the Python path's run too); 120 in `make
    test-full` (the `_many` test below)."""
    _printed_random_program_reads_as_the_grammar(data)


@pytest.mark.slow
@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_fast_path_reads_printed_random_programs_as_the_grammar_many(data):
    _printed_random_program_reads_as_the_grammar(data)


def _printed_random_program_reads_as_the_grammar(data):
    style = data.draw(st.sampled_from(STYLES))
    gen = _Gen(data, prim("jit").print_name(None, style))
    ir = gen.jaxpr([gen._type() for _ in range(data.draw(st.integers(0, 4)))], 0)
    text = print_jaxpr(ir, style, data.draw(st.sampled_from([80, 30, 120, 8])))
    assert_same(text)
    # and damaged: a character dropped, doubled or replaced
    k = data.draw(st.integers(0, len(text) - 1))
    how = data.draw(st.sampled_from(["drop", "double", " ", "\n", ":", "(", "]", "_", "1"]))
    if how == "drop":
        bad = text[:k] + text[k + 1 :]
    elif how == "double":
        bad = text[:k] + text[k] + text[k:]
    else:
        bad = text[:k] + how + text[k + 1 :]
    assert_same(bad)


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_fast_path_reads_generated_text_as_the_grammar(data):
    ch = Drawn(data)
    text = ProgramGen(ch, max_depth=ch.int(0, 2), max_eqns=ch.pick([3, 8])).program()
    assert_same(text)


SIMPLE = """{ lambda ; a:f32[3] b:f32[3]. let
    c:f32[3] = add a b
    d:f32[] = reduce_sum[axes=(0,) out_sharding=None] c
    e:f32[3] = mul c 2.0:f32[]
  in (d, e) }
"""

# texts with an equation the fast path leaves to the grammar
MISSES = {
    "operands continued on the next line": SIMPLE.replace("add a b", "add a\n      b"),
    "a comment line": SIMPLE.replace("    d:f32[]", "    # here\n    d:f32[]"),
    "a nested jaxpr off JAX's column": SIMPLE.replace(
        "c:f32[3] = add a b",
        "c:f32[3] = pjit[name=f jaxpr={ lambda ; x:f32[3] y:f32[3]. let\n"
        "          z:f32[3] = add x y\n      in (z,) }] a b",
    ),
    "a comment in a parameter list": SIMPLE.replace(
        "c:f32[3] = add a b",
        "c:f32[3] = pjit[\n      name=f # here\n      jaxpr={ lambda ; x:f32[3] y:f32[3]. let\n"
        "          z:f32[3] = add x y\n        in (z,) }\n    ] a b",
    ),
    "a ref update": "{ lambda ; a:Ref{f32[3]} b:f32[3]. let\n    a[...] += b\n  in () }",
    "a type with a suffix": SIMPLE.replace("c:f32[3] = add", "c:f32[3]{V:x} = add"),
    "two spaces between operands": SIMPLE.replace("add a b", "add a  b"),
    "an equation after a blank line": SIMPLE.replace("\n    e:f32[3]", "\n\n    e:f32[3]"),
    "effects": SIMPLE.replace("in (d, e) }", "in (d, e) : { Debug } }"),
}


# texts of odd but valid layout the fast path reads
HITS = {
    "an empty parameter list over two lines": SIMPLE.replace("add a b", "add[\n    ] a b"),
    "an empty parameter list": SIMPLE.replace("add a b", "add[] a b"),
    "blanks before line breaks": SIMPLE.replace("add a b", "add a b  ").replace(
        "None] c", "None] c\t"
    ),
    "a parameter list without operands": SIMPLE.replace("] c", "] ").replace("mul c", "mul a"),
    "no operands": SIMPLE.replace("add a b", "iota"),
    "several results": SIMPLE.replace("c:f32[3] = add", "c:f32[3] _:f32[3] = add"),
    "untyped literals (0.4.35)": SIMPLE.replace("2.0:f32[]", "2.0"),
    "an output literal": SIMPLE.replace("in (d, e)", "in (d, 1.0:f32[], e, 2)"),
    "the equations on one line": "{ lambda ; a:f32[]. let b:f32[] = sin a; c:f32[] = cos b in (c,) }",
    "a header over lines": SIMPLE.replace(" b:f32[3].", "\n    b:f32[3]\n    ."),
    "in ( at the equation column": SIMPLE.replace("  in (", "    in ("),
    "a tuple of jaxprs": SIMPLE.replace(
        "c:f32[3] = add a b",
        "c:f32[3] = cond[\n      branches=(\n"
        "        { lambda ; x:f32[3] y:f32[3]. let z:f32[3] = add x y in (z,) }\n"
        "        { lambda ; x:f32[3] y:f32[3]. let z:f32[3] = sub x y in (z,) }\n"
        "      )\n    ] 1:i32[] a b",
    ),
    "a tuple of jaxprs over lines": SIMPLE.replace(
        "c:f32[3] = add a b",
        "c:f32[3] = cond[\n      branches=(\n"
        "        { lambda ; x:f32[3] y:f32[3]. let\n            z:f32[3] = add x y\n          in (z,) }\n"
        "        { lambda ; x:f32[3] y:f32[3]. let\n            z:f32[3] = sub x y\n          in (z,) }\n"
        "      )\n    ] 1:i32[] a b",
    ),
    "shared jaxprs in a tuple": "let f = { lambda ; x:f32[3]. let y:f32[3] = sin x in (y,) } in\n"
    + SIMPLE.replace("c:f32[3] = add a b", "c:f32[3] = cond[branches=(f f)] 1:i32[] a"),
    "a nested jaxpr": SIMPLE.replace(
        "c:f32[3] = add a b",
        "c:f32[3] = pjit[name=f jaxpr={ lambda ; x:f32[3] y:f32[3]. let\n"
        "        z:f32[3] = add x y\n      in (z,) }] a b",
    ),
    "a nested jaxpr in a broken parameter list": SIMPLE.replace(
        "c:f32[3] = add a b",
        "c:f32[3] = custom_jvp_call[\n      name=f\n"
        "      call_jaxpr={ lambda ; x:f32[3] y:f32[3]. let\n"
        "          z:f32[3] = add x y\n        in (z,) }\n      jvp=jvp\n"
        "      symbolic_zeros=False\n    ] a b",
    ),
    "shared jaxprs and their references": "let f = { lambda ; x:f32[3]. let y:f32[3] = sin x in (y,) } in\n"
    "let g = { lambda ; x:f32[3]. let\n    y:f32[3] = jit[name=f jaxpr=f] x\n  in (y,) } in\n"
    + SIMPLE.replace(
        "c:f32[3] = add a b",
        "c:f32[3] = jit[name=g jaxpr=g] a\n    _:f32[3] = jit[name=f jaxpr=f] b",
    ),
}


@pytest.mark.parametrize("what", sorted(HITS))
def test_the_fast_path_reads_odd_layouts_as_the_grammar(what):
    text = HITS[what]
    assert plain_reads(text)
    assert_same(text)
    assert outcome(text, True)[0] != "error"


@pytest.mark.parametrize("what", sorted(MISSES))
def test_a_fast_path_miss_is_read_by_the_grammar(what):
    text = MISSES[what]
    assert not plain_reads(text)
    assert_same(text)
    assert outcome(text, True)[0] != "error"


def test_a_run_ends_before_an_equation_it_does_not_read():
    text = MISSES["operands continued on the next line"]
    st = parser._State(text, "f.jaxpr")
    st.tables.append({x: core.Var(core.ShapedArray((3,), "f32"), x) for x in "abc"})
    start = text.index("c:f32[3]")
    assert st.read_run(start, 2, 5) is None  # its operands go on: not read
    start = text.index("d:f32[]")
    eqns, end = st.read_run(start, 4, 5)  # the next two equations are read
    assert [e.prim for e in eqns] == ["reduce_sum", "mul"]
    assert text[end] == "\n" and text[end:].lstrip().startswith("in (")
    j = parse(text).jaxpr
    assert [e.prim for e in j.eqns] == ["add", "reduce_sum", "mul"]
    assert [x.hint for x in j.eqns[0].inputs] == ["a", "b"]


UNDEFINED = "{ lambda ; a:f32[3]. let b:f32[3] = sin c in (b,) }"


def test_simple_texts_are_read_without_lark():
    assert plain_reads(SIMPLE)
    assert plain_reads(
        "{ lambda ; a:f32[2]. let b:f32[2] = sin a; c:f32[2] = mul b 2.0:f32[] in (c,) }"
    )
    assert plain_reads("{ lambda ; a:f32[3]. let  in (a,) }")
    code = (
        "import sys\n"
        "from jaxprtool.text.parser import parse\n"
        f"j = parse({SIMPLE!r}).jaxpr\n"
        "assert [e.prim for e in j.eqns] == ['add', 'reduce_sum', 'mul']\n"
        "assert 'lark' not in sys.modules, 'lark was imported'\n"
        "try:\n"
        f"    parse({UNDEFINED!r})\n"
        "except Exception as e:\n"
        "    print(e)\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        cwd=REPO,
    )
    assert r.returncode == 0, r.stderr
    # an error is reported by the grammar, in its words
    col = UNDEFINED.index(" c in") + 2
    assert r.stdout.strip() == f"<stdin>:1:{col}: error: variable 'c' used before definition"


BROKEN = [
    "{ lambda ; a:f32[3]. let b:f32[3] = sin a c in (b,) }",
    "{ lambda ; a:f32[3]. let\n    b:f32[3] = sin a\n   c:f32[3] = cos b\n  in (c,) }",
    "{ lambda ; a:f32[3]. let\n    b:f32[3] = sin a\n      c:f32[3] = cos b\n  in (c,) }",
    "{ lambda ; a:f32[3]. let b:f32[3] = reduce_sum[axes=(0, out_sharding=None] a in (b,) }",
    "{ lambda ; a:f32[3]. let\n    b:f32[3] = reduce_sum[axes=(0,)out_sharding=None] a\n  in (b,) }",
    "{ lambda ; a:f32[3]. let b:f32[3] = sin a in (b, }",
    "{ lambda ; a:f32[3]. let b:f33[3] = sin a in (b,) }",
    "{ lambda ; a:f32[3]. let\n    b:f33[3] = sin a\n  in (b,) }",
    "{ lambda ; a:f32[3]. let\n    b:f32[3] = sin _\n  in (b,) }",
    "{ lambda ; a:f32[3]. let\n    b:f32[3] = sin a\n  in (b,) } x",
    "{ lambda ; a:f32[3]. let\n    b:f32[3] = sin a\n    c:f32[3] = cos d\n  in (c,) }",
    "{ lambda ; a:f32[3]. let\n    b:f32[3] = sin a\n  in (b,)",
    "{ lambda ; a. let b = sin a in (b,) }",
    "{ lambda ; a:f32[3]. let\n    _:f32[3] = sin a\n    _:f32[3] = cos a\n    b:f32[3] = add _ a\n"
    "  in (b, _) }",
]


#: chains of one-result equations without parameters, read a line at a time
#: (`fast._plain_line`): a name bound again, variables named like literals, a `_` binder,
#: a literal operand, the block's `in (` at the equation column
PLAIN_LINES = [
    "{ lambda ; a:f32[3]. let\n    b:f32[3] = sin a\n    c:f32[3] = cos b\n"
    "    b:f32[3] = neg c\n    d:f32[3] = mul b c\n  in (d, b) }",
    "{ lambda ; a:f32[3]. let\n    inf:f32[3] = sin a\n    c:f32[3] = cos inf\n"
    "    nan:f32[3] = mul c inf\n  in (nan,) }",
    "{ lambda ; a:f32[3]. let\n    b:f32[3] = sin a\n    _:f32[3] = cos b\n"
    "    c:f32[3] = neg b\n    d:f32[3] = mul c 2.0:f32[]\n    e:f32[3] = exp d\n  in (e,) }",
    "{ lambda ; a:f32[3]. let\n    b:f32[3] = sin a\n    c:f32[3] = cos b\n    in (c,) }",
    "{ lambda ; a:f32[3]. let\n    b:f32[3] = sin a\n    c:f32[3] = iota\n"
    "    d:f64[3] = convert b\n    e:f64[3] = exp d\n  in (e, c) }",
]


@pytest.mark.parametrize("text", PLAIN_LINES)
def test_plain_lines_are_read_as_the_grammar_reads_them(text):
    assert plain_reads(text)
    assert_same(text)


@pytest.mark.parametrize("text", BROKEN)
def test_fast_path_refuses_and_warns_as_the_grammar(text):
    assert_same(text)
    if grammar.lark_plugins():
        assert_same(text, compiled=True)


def test_a_block_on_one_line_that_is_not_all_simple_is_read_by_the_grammar_as_it_was():
    # the third equation's type has a suffix: the grammar reads the whole block, with the
    # first two equations' results unbound again (else `_` would be bound twice, and its
    # use ambiguous)
    inner = (
        "{ lambda ; x:f32[]. let _:f32[] = sin x; y:f32[] = add _ x; z:f32[]{V:i} = cos y in (z,) }"
    )
    text = f"{{ lambda ; a:f32[]. let\n    b:f32[] = pjit[name=f jaxpr={inner}] a\n  in (b,) }}\n"
    assert_same(text)
    r = parse(text)
    assert r.warnings == []
    (inner_j,) = [v for v in r.jaxpr.eqns[0].params.values() if isinstance(v, core.Jaxpr)]
    assert [e.prim for e in inner_j.eqns] == ["sin", "add", "cos"]
    assert inner_j.eqns[1].inputs[0] is inner_j.eqns[0].outputs[0]


def test_fast_path_shares_one_primitive_name_string():
    """Memory at scale: equations of one primitive share one `prim` string, not one each."""
    text = (
        "{ lambda ; a:f32[3]. let\n    b:f32[3] = tanh a\n    c:f32[3] = tanh b\n"
        "    d:f32[3] = tanh c\n  in (d,) }\n"
    )
    eqns = parse(text).jaxpr.eqns
    assert [e.prim for e in eqns] == ["tanh"] * 3
    assert eqns[0].prim is eqns[1].prim is eqns[2].prim


def test_the_fast_paths_equations_are_known_to_hold_no_jaxpr():
    """The equations the fast path reads (the twin's and the Python loops') are marked as
    holding no jaxpr when read, so the first walk (the style's, the printer's) does not look
    through their parameters; those with jaxprs are not."""
    text = (
        "{ lambda ; a:f32[3]. let\n    b:f32[3] = sin a\n"
        "    c:f32[3] = reduce_sum[axes=(0,) out_sharding=None] b\n"
        "    d:f32[3] = pjit[\n      name=f\n"
        "      jaxpr={ lambda ; e:f32[3]. let f:f32[3] = cos e in (f,) }\n    ] c\n"
        "    g:f32[3] = reduce_sum[axes=(0,) out_sharding=None] d\n  in (g,) }"
    )
    j = parse(text).jaxpr
    marked = {e.prim: e.no_subjaxprs for e in j.eqns}
    assert marked == {"sin": True, "reduce_sum": True, "pjit": False}
    assert_no_subjaxprs_told_right(j)


#: output lists: variables (some named like literals), typed and untyped literals, `_`
OUTPUTS = [
    "{ lambda ; a:f32[3]. let b:f32[3] = sin a in (b, a, b) }",
    "{ lambda ; inf:f32[]. let nan:f32[] = sin inf in (nan, inf) }",
    "{ lambda ; infa:f32[]. let nanb:f32[] = sin infa in (nanb, infa) }",
    "{ lambda ; a:f32[]. let b:f32[] = sin a in (inf:f32[], nan:f32[], -inf:f32[], b) }",
    "{ lambda ; a:f32[]. let b:f32[] = sin a in (1.0:f32[], b, 2:i32[]) }",
    "{ lambda ; a:f32[]. let b:f32[] = sin a in (1.0, b, True) }",
    "{ lambda ; a:c64[]. let b:c64[] = sin a in (infj, b, nanj:c64[]) }",
    "{ lambda ; a:f32[]. let _:f32[] = sin a; b:f32[] = cos a in (_, b, a_) }",
    "{ lambda ; a:f32[]. let b:f32[] = sin a in (b_, b) }",
    "{ lambda ; a:f32[]. let b:f32[] = sin a in ( b , a ) }",
    "{ lambda ; a:f32[]. let b:f32[] = sin a in (B,) }",
    "{ lambda ; a:f32[]. let b:f32[] = sin a in (b",
]


@pytest.mark.parametrize("text", OUTPUTS)
def test_outputs_are_read_as_the_grammar_reads_them(text):
    """The plain reader reads a variable among the outputs without the grammar's full
    output pattern (`plain._plain_outvars`), and anything else with it, as lark does."""
    assert_same(text)
