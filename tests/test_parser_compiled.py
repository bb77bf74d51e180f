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


#: the corpus files (relative to the corpus) the default run reads with both parsers: a
#: sample that executes every line of the package that the sample before it (every other
#: file: 286) executed in the comparison below (the grammar's callbacks: what the two
#: parsers hand over), chosen by a greedy cover of the lines `sys.monitoring` saw each file
#: execute (44 files for 5,277 lines); `make test-full` reads every file
BOTH_PARSERS = [
    "jax-0.10.2/checkpoint.jaxpr",
    "jax-0.10.2/checkpoint_policy_grad.jaxpr",
    "jax-0.10.2/constvars_in_nested_jaxprs.jaxpr",
    "jax-0.10.2/conv2d.jaxpr",
    "jax-0.10.2/custom_linear_solve.jaxpr",
    "jax-0.10.2/custom_vjp_linearize.jaxpr",
    "jax-0.10.2/debug_print_callback.jaxpr",
    "jax-0.10.2/device_put_inside_jit.jaxpr",
    "jax-0.10.2/dropvars_unused_outputs.jaxpr",
    "jax-0.10.2/dtypes_small_floats_ints.jaxpr",
    "jax-0.10.2/explicit_sharding_types.jaxpr",
    "jax-0.10.2/gather_modes.jaxpr",
    "jax-0.10.2/jit_called_twice_different_shapes.jaxpr",
    "jax-0.10.2/jit_lambda_shared_names.jaxpr",
    "jax-0.10.2/jnp_misc_highlevel.jaxpr",
    "jax-0.10.2/linalg_ops.jaxpr",
    "jax-0.10.2/named_call_scope.jaxpr",
    "jax-0.10.2/nextafter_erf_inv_igamma_random_gamma_grad.jaxpr",
    "jax-0.10.2/pallas_interpret.jaxpr",
    "jax-0.10.2/refs_indexing_addupdate.jaxpr",
    "jax-0.10.2/shape_poly_constraints_ops.jaxpr",
    "jax-0.10.2/shard_map_vma.jaxpr",
    "jax-0.12.0.1/ad_grad_int_float0.jaxpr",
    "jax-0.12.0.1/constvars_simplified_literals_flag.jaxpr",
    "jax-0.12.0.1/custom_vjp_grad.jaxpr",
    "jax-0.12.0.1/debug_print_newline_in_fmt.jaxpr",
    "jax-0.12.0.1/dropvar_name_aliasing_ambiguity.jaxpr",
    "jax-0.12.0.1/dtypes_all_32bit.jaxpr",
    "jax-0.12.0.1/empty_outputs_and_unused_inputs.jaxpr",
    "jax-0.12.0.1/gather_fancy_indexing.jaxpr",
    "jax-0.12.0.1/literal_outputs_and_passthrough.jaxpr",
    "jax-0.12.0.1/mul_out_dtype_param.jaxpr",
    "jax-0.12.0.1/remat_of_scan_grad.jaxpr",
    "jax-0.12.0.1/shape_poly_dim_expressions.jaxpr",
    "jax-0.12.0.1/sharding_constraint_auto_mesh.jaxpr",
    "jax-0.12.0.1/sort_argsort_topk.jaxpr",
    "older/jax-0.4.35/dropvar_name_aliasing_ambiguity.jaxpr",
    "older/jax-0.4.35/jnp_misc_highlevel.jaxpr",
    "older/jax-0.4.35/literal_outputs_and_passthrough.jaxpr",
    "older/jax-0.4.35/model_mlp_grad.jaxpr",
    "older/jax-0.4.35/pallas_interpret.jaxpr",
    "older/jax-0.7.2/shard_map_collectives.jaxpr",
    "variants/print_shapes_false.jaxpr",
    "variants/use_color_ansi.jaxpr",
]  # fmt: skip


@needs_corpus
@compiled_available
@pytest.mark.parametrize(
    "sample", [True, pytest.param(False, marks=pytest.mark.slow)], ids=["covering", "all"]
)
def test_both_parsers_read_the_corpus_alike(sample):
    """The default run reads the files of BOTH_PARSERS (`make test-full` all of them)."""
    files = [CORPUS / r for r in BOTH_PARSERS] if sample else sorted(CORPUS.rglob("*.jaxpr"))
    assert len(files) > (40 if sample else 100)
    for f in files:
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
