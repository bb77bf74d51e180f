"""The compiled twin of the reader's and the printer's per-line loops (jaxprtool/_twin.c,
text/twin.py) gives the same bytes as the Python loops it twins, for every corpus file, every
golden and data file, generated programs (fuzzgen's texts, hypothesis' IR in every style
and width) and damaged texts: the same program read (alpha-equal, the same locations and
warnings) or the same error, and the same text printed.  The Python loops are the reference:
each case is read and printed with `JAXPRTOOL_PURE_PYTHON` set and unset."""

from __future__ import annotations

import os
from pathlib import Path
from types import MappingProxyType

import pytest
from click.testing import CliRunner
from conftest import CORPUS, needs_corpus
from fuzzgen import Drawn, ProgramGen, Rand, corpus_seeds, mutate
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jaxprtool import core
from jaxprtool.cli import main as cli_main
from jaxprtool.core import JaxprError
from jaxprtool.text import twin
from jaxprtool.text.parser import parse
from jaxprtool.text.printer import Namer, print_jaxpr
from jaxprtool.text.style import Style, detect_style

TESTS = Path(__file__).resolve().parent
AMBIGUOUS = "dropvar_name_aliasing_ambiguity.jaxpr"  # (test_printer.py)
PURE = "JAXPRTOOL_PURE_PYTHON"

built = pytest.mark.skipif(
    twin._load() is None,
    reason="jaxprtool._twin is not built here (no C compiler when the package was "
    "installed): only the Python loops run, and there is nothing to compare them with",
)


class _Path:
    """Run on the Python loops (`pure=True`) or the compiled twin, whatever the environment
    says outside."""

    def __init__(self, pure: bool):
        self.pure = pure

    def __enter__(self):
        self.saved = os.environ.get(PURE)
        os.environ[PURE] = "1" if self.pure else "0"

    def __exit__(self, *exc):
        if self.saved is None:
            del os.environ[PURE]
        else:
            os.environ[PURE] = self.saved


def read(text: str, pure: bool):
    """What reading `text` gives on one path: the program, its equations' locations and the
    warnings, or the error."""
    with _Path(pure):
        try:
            r = parse(text, "f.jaxpr")
        except JaxprError as e:
            return None, ("error", str(e), e.code)
    locs = [e.loc for e in core.all_eqns(r.jaxpr)]
    return r.jaxpr, (locs, [str(w) for w in r.warnings])


def printed(j: core.Jaxpr, pure: bool, style=None, width: int = 80) -> str:
    with _Path(pure):
        return print_jaxpr(j, style, width)


def assert_alike(text: str, what="") -> core.Jaxpr | None:
    """Both paths read `text` alike, and print the program read alike (in its own style);
    returns the program the compiled path read (None: an error, alike)."""
    a, seen_a = read(text, False)
    b, seen_b = read(text, True)
    assert seen_a == seen_b, what
    if a is None:
        return None
    assert core.alpha_equal(a, b), what
    style = detect_style(b)
    reference = printed(b, True, style)
    assert printed(b, False, style) == reference, what
    assert printed(a, False, style) == reference, what
    return a


#: corpus file -> the program the compiled path read in test_the_corpus_alike (None: a
#: file both paths refuse), kept for `corpus_read`: the passes' tests read it once more no
_CORPUS_READ: dict[Path, core.Jaxpr | None] = {}


@built
def test_the_twin_runs_unless_told_not_to(monkeypatch):
    monkeypatch.delenv(PURE, raising=False)
    assert twin.twin() is not None
    assert "compiled" in twin.describe()
    monkeypatch.setenv(PURE, "1")
    assert twin.twin() is None
    assert "pure Python" in twin.describe()
    monkeypatch.setenv(PURE, "no")
    assert twin.twin() is not None


def test_version_says_which_loops_run(monkeypatch):
    unset = "compiled" if twin._load() is not None else "pure Python (the compiled module"
    for value, words in (("1", "pure Python (JAXPRTOOL_PURE_PYTHON is set)"), ("0", unset)):
        monkeypatch.setenv(PURE, value)
        r = CliRunner().invoke(cli_main, ["--version"])
        assert r.exit_code == 0
        assert f"reader and printer: {words}" in r.stdout


def test_a_bad_value_of_the_variable_is_a_usage_error(monkeypatch):
    monkeypatch.setenv(PURE, "maybe")
    r = CliRunner().invoke(cli_main, ["fmt", "-"], input="{ lambda ; . let  in () }")
    assert r.exit_code == 2
    assert "JAXPRTOOL_PURE_PYTHON='maybe' is not a yes/no value" in r.stderr


#: the corpus files (relative to the corpus) the default run reads on both paths: a sample
#: that executes every line of the package that the sample before it (every third file:
#: 191) executed in `assert_alike` (chosen by a greedy cover of the lines `sys.monitoring`
#: saw each file execute: 40 files for 5,138 lines; the compiled loops mirror these Python
#: lines); `make test-full` reads every file
READ_ALIKE = [
    "jax-0.10.2/ad_grad_sort_cumsum_max.jaxpr",
    "jax-0.10.2/ad_jvp.jaxpr",
    "jax-0.10.2/cond_int_pred_multiple_operands.jaxpr",
    "jax-0.10.2/constvars_numpy_closure.jaxpr",
    "jax-0.10.2/conv_transpose_grouped.jaxpr",
    "jax-0.10.2/custom_vjp_grad.jaxpr",
    "jax-0.10.2/debug_print_callback.jaxpr",
    "jax-0.10.2/dot_general.jaxpr",
    "jax-0.10.2/dropvars_unused_outputs.jaxpr",
    "jax-0.10.2/jit_called_twice_shared.jaxpr",
    "jax-0.10.2/linalg_ops.jaxpr",
    "jax-0.10.2/named_call_scope.jaxpr",
    "jax-0.10.2/pmap.jaxpr",
    "jax-0.10.2/sharding_constraint_auto_mesh.jaxpr",
    "jax-0.10.2/unary_accuracy_param.jaxpr",
    "jax-0.12.0.1/dropvars_unused_outputs.jaxpr",
    "jax-0.12.0.1/remat_of_scan_grad.jaxpr",
    "older/jax-0.4.35/dtypes_all_32bit.jaxpr",
    "older/jax-0.4.35/ensure_compile_time_eval_and_shape_math.jaxpr",
    "older/jax-0.4.35/gather_modes.jaxpr",
    "older/jax-0.4.35/jit_large_body_shared.jaxpr",
    "older/jax-0.4.35/jnp_misc_highlevel.jaxpr",
    "older/jax-0.4.35/linalg_ops.jaxpr",
    "older/jax-0.4.35/pallas_interpret.jaxpr",
    "older/jax-0.4.35/print_with_consts_and_literals_in_subjaxprs.jaxpr",
    "older/jax-0.4.35/random_legacy_uint32_key.jaxpr",
    "older/jax-0.4.35/transpose_concat_pad.jaxpr",
    "older/jax-0.6.2/custom_vjp_linearize.jaxpr",
    "older/jax-0.6.2/jnp_misc_highlevel.jaxpr",
    "older/jax-0.6.2/run_state_discharge.jaxpr",
    "older/jax-0.7.2/ad_grad_int_float0.jaxpr",
    "older/jax-0.7.2/constvars_simplified_literals_flag.jaxpr",
    "older/jax-0.7.2/debug_print_newline_in_fmt.jaxpr",
    "older/jax-0.7.2/explicit_sharding_types.jaxpr",
    "older/jax-0.7.2/gather_fancy_indexing.jaxpr",
    "older/jax-0.7.2/jit_lambda_shared_names.jaxpr",
    "older/jax-0.7.2/literal_outputs_and_passthrough.jaxpr",
    "older/jax-0.7.2/refs_indexing_addupdate.jaxpr",
    "older/jax-0.7.2/shard_map_more_collectives.jaxpr",
    "variants/source_info_name_stack.jaxpr",
]  # fmt: skip


@built
@needs_corpus
@pytest.mark.parametrize(
    "sample", [True, pytest.param(False, marks=pytest.mark.slow)], ids=["covering", "all"]
)
def test_the_corpus_alike(sample):
    """The default run reads the files of READ_ALIKE (`make test-full` all of them)."""
    files = [CORPUS / r for r in READ_ALIKE] if sample else sorted(CORPUS.rglob("*.jaxpr"))
    assert len(files) > (30 if sample else 100)
    # (and always the texts whose names the printer's safety pass changes)
    ambiguous = [f for f in sorted(CORPUS.rglob("*.jaxpr")) if f.name == AMBIGUOUS]
    assert ambiguous
    for f in [*files, *ambiguous]:
        _CORPUS_READ[f] = assert_alike(f.read_text(), f)


@built
def test_the_goldens_and_data_alike():
    files = sorted(p for p in TESTS.joinpath("golden").rglob("*.jaxpr"))
    files += sorted(TESTS.joinpath("data").rglob("*.jaxpr"))
    assert len(files) > 50
    for f in files:
        assert_alike(f.read_text(), f)


def _generated(seeds: range) -> None:
    for seed in seeds:
        ch = Rand(seed)
        text = ProgramGen(ch, max_depth=ch.pick([0, 1, 2]), max_eqns=ch.pick([4, 8, 16])).program()
        assert_alike(text, seed)


@built
def test_generated_programs_alike():
    _generated(range(300))


@built
@pytest.mark.slow
def test_generated_programs_alike_many():
    _generated(range(300, 10_300))


def _damaged(seeds: range) -> None:
    texts = corpus_seeds() if CORPUS.is_dir() else []
    for seed in seeds:
        ch = Rand(seed)
        text = ch.pick(texts) if texts and ch.coin() else ProgramGen(ch).program()
        for _ in range(ch.pick([1, 1, 2])):
            try:
                text = mutate(text, ch)
            except Exception:  # noqa: BLE001 - a mutation that does not apply: keep the text
                pass
        assert_alike(text, seed)


@built
def test_damaged_texts_alike():
    _damaged(range(200))


@built
@pytest.mark.slow
def test_damaged_texts_alike_many():
    _damaged(range(200, 5_200))


def _ir_printed_alike(data) -> None:
    from test_roundtrip_property import STYLES, _Gen

    from jaxprtool.record import prim

    style = data.draw(st.sampled_from(STYLES))
    gen = _Gen(data, prim("jit").print_name(None, style))
    ir = gen.jaxpr([gen._type() for _ in range(data.draw(st.integers(0, 4)))], 0)
    width = data.draw(st.sampled_from([80, 30, 120, 8]))
    text = printed(ir, True, style, width)
    assert printed(ir, False, style, width) == text
    assert_alike(text)


@built
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_generated_ir_printed_alike(data):
    """40 programs in `make test`; 2,000 in `make test-full` (the `_many` test below)."""
    _ir_printed_alike(data)


@built
@pytest.mark.slow
@settings(max_examples=2_000, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_generated_ir_printed_alike_many(data):
    _ir_printed_alike(data)


@built
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_drawn_programs_alike(data):
    """fuzzgen's programs drawn by hypothesis (it shrinks a difference to a small text)."""
    assert_alike(ProgramGen(Drawn(data), max_depth=1, max_eqns=8).program())


WIDE = [
    # characters of 2 and 4 bytes in the text the reader scans and the lines it builds
    "{ lambda ; a:f32[3]. let\n    b:f32[3] = jit[\n      name=fünction_名前\n"
    "      jaxpr={ lambda ; c:f32[3]. let d:f32[3] = sin c in (d,) }\n    ] a\n"
    "    e:f32[3] = sin b\n    f:f32[3] = cos e\n  in (f,) }",
    "{ lambda ; a:f32[3]. let\n    b:f32[3] = sin a\n    c:f32[3] = cos b\n"
    "    d:f32[3] = custom[name=\U0001f600] c\n    e:f32[3] = sin d\n  in (e,) }",
    # a line the twin leaves to the Python loop after lines it reads, and back
    "{ lambda ; a:f32[3]. let\n    b:f32[3] = sin a\n    c:f32[3] = mul b 2.0:f32[]\n"
    "    d:f32[3] = cos c\n    e:f32[3] = add d _\n    f:f32[3] = sin e\n  in (f,) }",
    # trailing blanks, a tab, a line without its line break, an unbound name
    "{ lambda ; a:f32[3]. let\n    b:f32[3] = sin a \n    c:f32[3] = cos b\n  in (c,) }",
    "{ lambda ; a:f32[3]. let\n    b:f32[3] = sin\ta\n    c:f32[3] = cos b\n  in (c,) }",
    "{ lambda ; a:f32[3]. let\n    b:f32[3] = sin a\n    c:f32[3] = cos z\n  in (c,) }",
    "{ lambda ; a:f32[3]. let\n    b:f32[3] = sin a\n    c:f32[3] = cos b",
    # a text that ends on the indentation after a parameter list over lines (it read past
    # the end of the text: IndexError)
    "{ lambda ; a:f32[3]. let\n    b:f32[3] = pjit[\n      name=f\n"
    "      jaxpr={ lambda ; c:f32[3]. let d:f32[3] = sin c in (d,) }\n    ] a\n"
    "    c:f32[3] = slice[\n      limit_indices=(3,)\n    ] a\n    ",
    # literals among the operands: read by the readers, or refused in their words
    *(
        "{ lambda ; a:f32[3]. let\n    b:f32[3] = sin a\n"
        f"    c:f32[3] = mul b {lit}\n    d:f32[3] = cos c\n  in (d,) }}"
        for lit in (
            "2.0:f32[]",
            "-1e-05:f32[]",
            "1.2.3:f32[]",
            "1e:f32[]",
            "2:i32[]",
            "2.0:f16[]",
            "1.0:f32[]{x}",
            "1:key<fry>[]",
            "1.0:F32[]",
            "nan:f32[]",
            "inf",
            "b 1.0:f32[] b",
            "-0.5:f32[]",
            "-inf:f32[]",
            "inf:f32[]",
            "-nan:f32[]",
            "nan:f32[3]",
            "1e5:f32[]",
            "1.5e+10:f32[]",
            "-2e-3:f32[]",
            "1e+:f32[]",
            "-:f32[]",
            "-inf:f32[]{x}",
            "infj:f32[]",
            "na:f32[]",
            "1.0:f32[3] 2",
        )
    ),
    # a shared jaxpr whose name is one of the counter's: the names skip it on both paths
    "let b = { lambda ; a:f32[3]. let c:f32[3] = sin a in (c,) } in\n"
    "{ lambda ; a:f32[3]. let\n    c:f32[3] = jit[name=b jaxpr=b] a\n"
    "    d:f32[3] = jit[name=b jaxpr=b] c\n    e:f32[3] = cos d\n    f:f32[3] = mul e d\n"
    "  in (f,) }",
    # a parameter list over lines (as JAX prints dot_general), known or new, then others
    "{ lambda ; a:f32[2,2]. let\n"
    + 3
    * (
        "    b:f32[2,2] = dot_general[\n      dimension_numbers=(([1], [0]), ([], []))\n"
        "      preferred_element_type=float32\n    ] a a\n    a:f32[2,2] = sin b\n"
    )
    + "    c:f32[2,2] = dot_general[\n      dimension_numbers=(([1], [0]), ([], []))\n"
    "      preferred_element_type=float32\n    ] a b\n  in (c,) }",
]


@built
@pytest.mark.parametrize("width", [20, 80, 200])
def test_names_the_safety_pass_changes_alike(width):
    """Names given before printing (`Namer.set_name`) that the safety pass changes: a use
    read as another binding, and a use no binder names (named after the results)."""
    f32 = core.ShapedArray((), "f32")
    a, b, c, d, free = (core.Var(f32) for _ in range(5))
    eqns = (
        core.Eqn("sin", (a,), (b,), {}),
        core.Eqn("cos", (a,), (c,), {}),
        core.Eqn("mul", (b, c), (d,), {}),
        core.Eqn("add", (d, free), (core.Var(f32),), {}),
    )
    j = core.Jaxpr((), (a,), eqns, (d,))
    texts = []
    for pure in (True, False):
        with _Path(pure):
            namer = Namer(Style.parse("0.12"))
            namer.set_name(b, "x")
            namer.set_name(c, "x")
            texts.append(namer.jaxpr_text(j, width))
    assert texts[0] == texts[1]
    assert "x" not in texts[0].split("mul")[1].split()[0]  # (the safety pass renamed b)


@built
@pytest.mark.parametrize("text", WIDE)
def test_edge_lines_alike(text):
    assert_alike(text)


SIMPLE_LITERALS = ("-0.5:f32[]", "-inf:f32[]", "inf:f32[]", "nan:f32[]", "1e5:f32[]",
                   "-2e-3:f32[]", "9.999999747378752e-06:f32[]", "16.0:f32[]")  # fmt: skip


@pytest.mark.parametrize("pure", [True, False])
def test_simple_literals_read_without_the_general_way(pure, monkeypatch):
    """Typed literals of the simplest kind (negative, `inf`, `nan`, with an exponent) among a
    plain line's operands are read where the line is (the twin's `simple_literal`, the
    Python loop's `plain_operands`), not by the general operand reader (whose regular
    expressions cost a millisecond to compile); the program is the grammar's."""
    from jaxprtool.text.parser.fast import FastPath

    if not pure and twin._load() is None:
        pytest.skip("jaxprtool._twin is not built here")
    general = []
    original = FastPath.line_operands

    def counted(self, e, q, table):
        general.append(self.s[e:q])
        return original(self, e, q, table)

    monkeypatch.setattr(FastPath, "line_operands", counted)
    body = "".join(
        f"    {chr(98 + k)}:f32[3] = mul {chr(97 + k)} {lit}\n"
        for k, lit in enumerate(SIMPLE_LITERALS * 2)
    )
    last = chr(97 + 2 * len(SIMPLE_LITERALS))
    text = f"{{ lambda ; a:f32[3]. let\n{body}  in ({last},) }}"
    with _Path(pure):
        fast = parse(text, "f.jaxpr").jaxpr
    assert general == []
    grammar = parse(text, "f.jaxpr", fast=False).jaxpr
    assert core.alpha_equal(fast, grammar)
    values = [e.inputs[1].value for e in fast.eqns[: len(SIMPLE_LITERALS)]]
    assert [str(v) for v in values] == ["-0.5", "-inf", "inf", "nan", "100000.0", "-0.002",
                                        "9.999999747378752e-06", "16.0"]  # fmt: skip


_TEXTS = st.lists(st.text(alphabet="ab=:[]()0, é∂", min_size=1, max_size=30), max_size=6)


@built
@settings(max_examples=300, deadline=None)
@given(
    k=st.integers(0, 90),
    indent=st.integers(0, 40),
    width=st.integers(1, 120),
    name=st.text(alphabet="abcé_", min_size=1, max_size=20),
    kvs=_TEXTS,
    ins=_TEXTS,
    outs=_TEXTS,
    eq=st.booleans(),
)
def test_an_equation_line_laid_out_alike(k, indent, width, name, kvs, ins, outs, eq):
    """The twin of `_render_eqn` (the full form of a line that does not fit) lays out the
    same text from the same column (pieces of the output may differ), and ends in the
    same column, as the Python function at any width, column and indentation, with
    results, parameters and operands that fit or break, non-ASCII ones counted in bytes."""
    from jaxprtool.text.printer import _render_eqn

    py, c = [], []
    k_py = _render_eqn(py, k, indent, width, name, kvs, ins, outs, eq)
    k_c = twin._load().render_eqn(c, k, indent, width, name, list(kvs), list(ins), list(outs), eq)
    assert "".join(c) == "".join(py) and k_c == k_py


# ---------------------------------------------------------------- the AD builder's equations


def _bound(pure: bool, x: core.Var, t: core.Var) -> list:
    """What `Builder.bind` appends on one path, over the cases its compiled lines take or
    hand back: without parameters (its result types inferred, then remembered), with a
    `params_key` (the same), with given types, with a Literal operand, with parameters
    and no key or in a mapping other than a dict, and in a split builder: into the primal or (a tangent operand, or
    `tangent_mode`) the tangent program.  Each equation's fields, program and results."""
    from jaxprtool.ad import builder as B

    with _Path(pure):
        b = B.Builder(loc=core.Loc("f.jaxpr", 3, 5))
        s = B.Builder(split=True)
    assert (b._bind_fast is None) == pure
    s.mark_tangent(t)
    one = core.Literal(1.0, core.ShapedArray((), "f32"))
    reduce = {"axes": (1,), "out_sharding": None}
    for _ in range(2):  # (the second time from the memo)
        b.bind("neg", [x], {})
        b.bind("reduce_sum", (x,), reduce, params_key=(1,))
    b.bind("mul", (x, one), {})
    b.bind("reduce_sum", [x], reduce)
    b.bind("sin", [x], {"accuracy": None}, [x.type])
    b.bind("reduce_sum", [x], MappingProxyType(reduce), params_key=(1,))  # (not a dict)
    s.bind("add_any", (x, x), {})
    s.bind("add_any", (x, t), {})
    with s.tangent_mode():
        s.bind("neg", (x,), {})
    made = [(e, "primal") for e in b.eqns + s.primal_eqns] + [
        (e, "tangent") for e in s.tangent_eqns
    ]
    seen = []
    for e, where in made:
        fields = (e.prim, e.inputs, e.params, e.loc, e.bare_eq, e.no_subjaxprs, where)
        seen.append((fields, [(o.type, o.hint) for o in e.outputs]))
    with pytest.raises(TypeError, match="is not an Atom"):
        b.bind("neg", [object()], {})
    return seen


@built
def test_the_builder_binds_alike():
    """`bind_fast_vars` appends the equations `Builder.bind`'s Python lines append: the same
    fields (one without parameters marked as holding no jaxpr, as `Eqn.__init__` marks
    it), into the same program, with fresh results of the same types."""
    x = core.Var(core.ShapedArray((2, 3), "f32"), "x")
    t = core.Var(core.ShapedArray((2, 3), "f32"), "t")
    compiled, reference = _bound(False, x, t), _bound(True, x, t)
    assert compiled == reference
    assert [f[-1] for f, _ in reference].count("tangent") == 2
    assert [f[5] for f, _ in reference][:2] == [True, False]


@built
def test_the_builder_reads_the_mesh_axis_sizes_as_the_python_lines_do():
    """`bind_fast_vars` given `axis_sizes_key`'s context variable (as `Builder.bind` gives
    it) answers from the memo as given the function itself: never while mesh axis sizes
    are in force (a result type may depend on them), where the Python lines infer it."""
    from jaxprtool import shardings

    x = core.Var(core.ShapedArray((2, 3), "f32"), "x")
    memo = {("neg", None, id(x.type)): ((x.type,), (x.type,))}

    def bind(sizes_key):
        return twin._load().bind_fast_vars(
            "neg", (x,), {}, None, None, None, [], None, set(), False, memo, sizes_key,
            core.Literal,
        )  # fmt: skip

    for sizes_key in (shardings.AXIS_SIZES_KEY, shardings.axis_sizes_key):
        outs = bind(sizes_key)
        assert [o.type for o in outs] == [x.type]
        with shardings.axis_sizes_in_force({"x": 2}):
            assert bind(sizes_key) is None
            assert shardings.AXIS_SIZES_KEY.get() == shardings.axis_sizes_key() == (("x", 2),)


@pytest.mark.parametrize("pure", [True, False])
def test_a_builder_that_checks_what_is_appended_sees_every_bound_equation(pure):
    """The compiled `bind` appends as `Builder.add_eqn` does: a builder with an `add_eqn` of
    its own (vmap's checks each equation's parameters) binds through the Python lines, on
    either path, and its `add_eqn` sees each equation."""
    from jaxprtool.ad import builder as B

    class Checking(B.Builder):
        def add_eqn(self, eqn):
            seen.append(eqn.prim)
            super().add_eqn(eqn)

    seen: list[str] = []
    x = core.Var(core.ShapedArray((2, 3), "f32"), "x")
    with _Path(pure):
        b = Checking()
    assert b._bind_fast is None
    b.bind("neg", [x], {})
    b.bind("reduce_sum", (x,), {"axes": (1,), "out_sharding": None}, params_key=(1,))
    b.bind("sin", [x], {"accuracy": None}, [x.type])
    assert seen == ["neg", "reduce_sum", "sin"] == [e.prim for e in b.eqns]


def _transformed_alike(text: str, what) -> None:
    from jaxprtool.ad import api
    from jaxprtool.ad.linearize import linearize_combined

    j = parse(text, "f.jaxpr").jaxpr
    floats = [i for i, v in enumerate(j.invars) if core.is_inexact(v.type)]
    ways = [api.jvp_jaxpr, linearize_combined, api.vjp_jaxpr]
    if floats and len(j.outvars) == 1 and core.is_float(j.outvars[0].type):
        if tuple(getattr(j.outvars[0].type, "shape", (1,))) == ():
            ways.append(lambda j: api.grad_jaxpr(j, floats))
    for way in ways:
        got = []
        for pure in (True, False):
            with _Path(pure):
                try:
                    got.append(print_jaxpr(way(j)))
                except JaxprError as e:
                    got.append(str(e))
        assert got[0] == got[1], what


@built
def test_the_data_files_differentiated_alike():
    """jvp, linearize, vjp and grad of every data file give the same text on both paths."""
    files = sorted(TESTS.joinpath("data").rglob("*.jaxpr"))
    assert len(files) > 20
    for f in files:
        try:
            parse(f.read_text(), "f.jaxpr")
        except JaxprError:
            continue  # (a file of refusals)
        _transformed_alike(f.read_text(), f)


def _jaxprs(j: core.Jaxpr):
    """`j` and every jaxpr inside it."""
    yield j
    for e in core.all_eqns(j):
        yield from core.eqn_subjaxprs(e)


def _kept(eqns, live_out, pure: bool) -> list:
    from jaxprtool.ad.builder import dce_eqns

    with _Path(pure):
        return dce_eqns(list(eqns), live_out)


#: JAX 0.12's jaxpr of a jit writing a Ref made before it and read nowhere after it: the
#: equation is kept (its result is used) with its body's write pruned (`_prune_dead_refs`)
REF_WRITTEN_IN_JIT = """{ lambda ; a:f32[3]. let
    b:f32[3] = mul a 0.0:f32[]
    c:Ref{f32[3]} = new_ref[kind=None memory_space=None pin=False] b
    d:f32[3] = jit[
      name=g
      jaxpr={ lambda ; c:Ref{f32[3]} a:f32[3]. let
          e:f32[3] <- c[...]
          f:f32[3] = sin a
          g:f32[3] = add e f
          h:f32[3], c[...] <- c[...], g
          d:f32[3] = mul a 3.0:f32[]
        in (d,) }
    ] c a
    i:f32[] = reduce_sum[axes=(0,) out_sharding=None] d
  in (i,) }
"""


#: the corpus files (relative to the corpus) of the compiled passes' tests below: a sample
#: that executes every line of the package that the sample before it (every third file:
#: 191) executed in those tests' passes on both paths (the gradients made before, unseen:
#: AD is not what they test), chosen by a greedy cover of the lines `sys.monitoring` saw
#: each file execute (22 files for 1,339 lines); `make test-full` runs the passes on every
#: file (`test_the_compiled_passes_alike_on_every_file`)
PASSES_ALIKE = [
    "jax-0.10.2/ad_grad_sort_cumsum_max.jaxpr",
    "jax-0.10.2/cond_int_pred_multiple_operands.jaxpr",
    "jax-0.10.2/conv_transpose_grouped.jaxpr",
    "jax-0.10.2/debug_print_callback.jaxpr",
    "jax-0.10.2/dot_general.jaxpr",
    "jax-0.10.2/linalg_ops.jaxpr",
    "jax-0.10.2/shard_map_collectives.jaxpr",
    "jax-0.12.0.1/dropvars_unused_outputs.jaxpr",
    "jax-0.12.0.1/jvp_of_scan_and_zeros_tangents.jaxpr",
    "jax-0.12.0.1/remat_of_scan_grad.jaxpr",
    "older/jax-0.4.35/custom_jvp_nn.jaxpr",
    "older/jax-0.4.35/dtypes_all_32bit.jaxpr",
    "older/jax-0.4.35/jit_called_twice_different_shapes.jaxpr",
    "older/jax-0.4.35/jnp_misc_highlevel.jaxpr",
    "older/jax-0.4.35/pallas_interpret.jaxpr",
    "older/jax-0.4.35/transpose_concat_pad.jaxpr",
    "older/jax-0.6.2/pmap.jaxpr",
    "older/jax-0.6.2/run_state_discharge.jaxpr",
    "older/jax-0.6.2/weak_typed_inputs.jaxpr",
    "older/jax-0.7.2/jit_lambda_shared_names.jaxpr",
    "older/jax-0.7.2/nextafter_erf_inv_igamma_random_gamma_grad.jaxpr",
    "older/jax-0.7.2/refs_indexing_addupdate.jaxpr",
]  # fmt: skip


def _corpus_programs(first: list) -> tuple:
    """([(file, program)] of the files `first`, the same of the files with Refs and
    effects), the files the reader refuses left out (what test_the_corpus_alike read on the
    compiled path, where it ran first, is not read again; reading them alike is its test)."""
    files = sorted(CORPUS.rglob("*.jaxpr"))
    special = [f for f in files if "ref" in f.name or "debug" in f.name or "effect" in f.name]
    assert len(special) > 5
    read = []
    for group in (first, special):
        read.append([])
        for f in group:
            j = _CORPUS_READ[f] if f in _CORPUS_READ else read_or_none(f.read_text())
            if j is not None:
                read[-1].append((f, j))
    return tuple(read)


@pytest.fixture(scope="module")
def corpus_read():
    """`_corpus_programs` of PASSES_ALIKE: read once for the three tests of the compiled
    passes below."""
    return _corpus_programs([CORPUS / r for r in PASSES_ALIKE])


def read_or_none(text: str) -> core.Jaxpr | None:
    """The program `text` holds (read on the path the environment says), or None."""
    try:
        return parse(text, "f.jaxpr").jaxpr
    except JaxprError:
        return None


@built
@needs_corpus
def test_dead_code_kept_alike(corpus_read):
    """`dce_eqns` keeps the same equations on both paths (its loop compiled: `dce_walk_vars`), on
    every jaxpr of the corpus files of PASSES_ALIKE and the files with Refs and effects, with every
    output live and with none (its effectful equations and writes into Refs kept alone)."""
    pruned = kept_alone = 0
    third, special = corpus_read
    for f, program in [*third, *special, (None, parse(REF_WRITTEN_IN_JIT).jaxpr)]:
        for j in _jaxprs(program):
            for live_out in (j.outvars, ()):
                reference = _kept(j.eqns, live_out, True)
                compiled = _kept(j.eqns, live_out, False)
                assert len(compiled) == len(reference), f
                got = j.replace(eqns=compiled, outvars=live_out)
                assert core.alpha_equal(got, j.replace(eqns=reference, outvars=live_out)), f
                pruned += any(e not in j.eqns for e in reference)
                kept_alone += bool(reference) and not live_out
    assert pruned and kept_alone  # (the cases the loop hands back to Python were met)


def _dce_pass(j: core.Jaxpr, pure: bool) -> core.Jaxpr:
    from jaxprtool.passes.dce import dce

    with _Path(pure):
        return dce(j)


@built
@needs_corpus
def test_the_dce_pass_alike(corpus_read):
    """The `dce` pass removes the same equations on both paths (its loop compiled:
    `dce_sweep`, which hands back the equations with nested jaxprs), on the corpus files of
    PASSES_ALIKE and the files with Refs and effects, with every output live and with only the
    first (the equations only the others read are dead)."""
    third, special = corpus_read
    programs = [j for _, j in [*third, *special]] + [parse(REF_WRITTEN_IN_JIT).jaxpr]
    removed = handed_back = 0
    for j in programs:
        for outs in (j.outvars, j.outvars[:1]):
            program = j.replace(outvars=outs)
            reference = _dce_pass(program, True)
            compiled = _dce_pass(program, False)
            assert core.alpha_equal(compiled, reference)
            removed += reference is not program
            handed_back += any(core.eqn_subjaxprs(e) for e in reference.eqns)
    assert removed and handed_back  # (both kinds of equation met)


def _cleaned(j: core.Jaxpr, pass_name: str, pure: bool) -> core.Jaxpr:
    from jaxprtool.passes.cse import cse
    from jaxprtool.passes.simplify import simplify

    with _Path(pure):
        return {"cse": cse, "simplify": simplify}[pass_name](j)


def _gradient(j: core.Jaxpr) -> core.Jaxpr | None:
    """The raw gradient of `j` with respect to its float inputs (AD's zeros, ones and
    repeated equations: what `simplify` and `cse` find), or None where there is none."""
    from jaxprtool.ad.api import vjp_jaxpr

    try:
        return vjp_jaxpr(j)
    except Exception:  # (not differentiable: no gradient to clean up)
        return None


@built
@needs_corpus
def test_simplify_and_cse_alike(corpus_read):
    """The `simplify` and `cse` passes give the same program on both paths (their loops
    compiled: `simplify_rules_sweep` and `cse_sweep`, which take the equations they keep as they
    are and hand every other one back), on the corpus files of PASSES_ALIKE and the vjp of each, the
    transformer-like program's and a program whose rules fire in a row."""
    programs = [parse(ROWS_TO_CLEAN).jaxpr]
    for _, j in corpus_read[0]:
        programs += [j] + [g for g in [_gradient(j)] if g is not None]
    changed = {"cse": 0, "simplify": 0}
    for j in programs:
        for name in changed:
            reference = _cleaned(j, name, True)
            compiled = _cleaned(j, name, False)
            assert core.alpha_equal(compiled, reference), name
            assert print_jaxpr(compiled) == print_jaxpr(reference), name
            changed[name] += len(reference.eqns) < len(j.eqns)
    assert all(changed.values()), changed  # (equations dropped and handed back on both)


@built
@needs_corpus
@pytest.mark.slow
def test_the_compiled_passes_alike_on_every_file():
    """The three tests above on every corpus file (`make test`: on PASSES_ALIKE)."""
    every = _corpus_programs(sorted(CORPUS.rglob("*.jaxpr")))
    test_dead_code_kept_alike(every)
    test_the_dce_pass_alike(every)
    test_simplify_and_cse_alike(every)


@built
def test_the_sweeps_find_jaxprs_in_parameters_as_eqn_subjaxprs_does(monkeypatch):
    """The compiled sweeps answer `eqn_subjaxprs(e) == []` themselves where each parameter
    value says so at once (a type `_collect_jaxprs` has kept as a leaf, a tuple or list that
    marshal writes) and remember it on the equation as `eqn_subjaxprs` does; a value that
    holds a jaxpr (in a list, a tuple subclass, a holder) is left to the Python walk, and
    `cse` gives the same program on both paths."""
    from collections import namedtuple

    from jaxprtool.params import EnumValue
    from jaxprtool.passes import common

    inner = parse("{ lambda ; a:f32[]. let b:f32[] = sin a in (b,) }").jaxpr
    Pair = namedtuple("Pair", "first second")
    values = [
        {"axes": (0, 1), "flag": True, "name": "x", "nothing": None, "scale": 2.5},
        {"dims": [[0], [1]], "nested": ((1, 2), [3, (4,)]), "kind": EnumValue("P", "HIGH")},
        {"dims": ((0,), (1,)), "jaxpr": inner},
        {"branches": (inner, inner)},
        {"pair": Pair(1, inner)},
        {"pair": Pair(1, 2)},
        {"ints": [1, 2], "jaxprs": [inner]},
    ]
    has_none = [True, True, False, False, False, True, False]
    xs = tuple(core.Var(inner.invars[0].type, None) for _ in values)  # (no two alike for cse)
    walked = []

    def counted(e):
        walked.append(e)
        return core.eqn_subjaxprs(e)

    results = []
    for pure in (True, False):  # (the Python path first: it kinds EnumValue as a leaf)
        eqns = [
            core.Eqn("opaque_op", (x,), (core.Var(x.type, None),), dict(p))
            for x, p in zip(xs, values)
        ]
        program = core.Jaxpr((), xs, tuple(eqns), tuple(e.outputs[0] for e in eqns))
        assert not any(e.no_subjaxprs for e in eqns)
        walked.clear()
        with monkeypatch.context() as m:
            m.setattr(common, "eqn_subjaxprs", counted)
            results.append(_cleaned(program, "cse", pure))
        answers = [core.eqn_subjaxprs(e.replace(params=dict(e.params))) for e in eqns]
        assert [a == [] for a in answers] == has_none
        assert [e.no_subjaxprs for e in eqns] == has_none  # (remembered on both paths)
        if not pure:  # the compiled sweep settled the plain ones without the Python walk
            assert not any(e in walked for e in eqns[:2])
            assert eqns[2] in walked and eqns[4] in walked
    assert print_jaxpr(results[0]) == print_jaxpr(results[1])


#: rules that fire one after another (`mul x 1` of a broadcast 1, `neg (neg x)`, an
#: `add_any` of zeros) and repeated equations whose operands cse then renames
ROWS_TO_CLEAN = """{ lambda ; a:f32[3] b:f32[]. let
    c:f32[3] = broadcast_in_dim[broadcast_dimensions=() shape=(3,) sharding=None] 1.0:f32[]
    d:f32[3] = mul a c
    e:f32[3] = neg d
    f:f32[3] = neg e
    g:f32[3] = sin f
    h:f32[3] = sin f
    i:f32[3] = broadcast_in_dim[broadcast_dimensions=() shape=(3,) sharding=None] 0.0:f32[]
    j:f32[3] = add_any g i
    k:f32[3] = mul j h
    l:f32[3] = mul h j
    m:f32[3] = mul g h
    n:f32[] = reduce_sum[axes=(0,) out_sharding=None] m
    o:f32[] = mul n b
    p:f32[] = mul b 1.0:f32[]
  in (k, l, o, p) }"""
