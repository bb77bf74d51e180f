"""Clean-up passes: golden files (expected results written by hand from each pass's
definition), JAX as the oracle (DCE against `pe.dce_jaxpr`, flat trees against
`jax._src.flattree`, folding and simplification against evaluation through JAX), and
corpus sweeps (outputs unchanged, checker clean, idempotence)."""

from __future__ import annotations

import copy
import math
import random
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import CORPUS, JAX_VERSION, JAX_VERSION_TEXT, corpus_files, needs_corpus, needs_jax
from jax_oracle import together

from jaxprtool.check import check, errors
from jaxprtool.cli import main
from jaxprtool.core import Jaxpr, JaxprError, Literal, ShapedArray, all_eqns, alpha_equal
from jaxprtool.families.scan import parse_ft
from jaxprtool.passes.cse import cse
from jaxprtool.passes.dce import dce, dce_keep_outputs
from jaxprtool.passes.fold import fold
from jaxprtool.passes.inline import inline
from jaxprtool.passes.registry import PASSES, parse_pipeline, run_pipeline
from jaxprtool.passes.simplify import simplify
from jaxprtool.text.parser import parse

GOLDEN = Path(__file__).resolve().parent / "golden" / "passes"


def load(path) -> Jaxpr:
    path = Path(path)
    return parse(path.read_text(), str(path)).jaxpr


def parse_text(text: str) -> Jaxpr:
    return parse(text, "<test>").jaxpr


# ---------------------------------------------------------------- golden files

GOLDEN_CASES = [
    ("dce", "dce", dce),
    ("dce_scan", "dce_scan", dce),
    ("dce_scan_ft", "dce_scan_ft", dce),
    ("dce_scan_live_carry", "dce_scan_live_carry", dce),
    ("dce_while_cond", "dce_while_cond", dce),
    ("cse", "cse", cse),
    ("fold", "fold", fold),
    ("simplify", "simplify", simplify),
    ("inline", "inline", inline),
    ("inline", "inline_names", lambda j: inline(j, {"inner"})),
    ("canonicalize", "canonicalize", PASSES["canonicalize"]),
]


@pytest.mark.parametrize("src,expected,fn", GOLDEN_CASES, ids=[c[1] for c in GOLDEN_CASES])
def test_golden(src, expected, fn):
    j = load(GOLDEN / f"{src}.jaxpr")
    want = load(GOLDEN / f"{expected}.expected.jaxpr")
    got = fn(j)
    if not alpha_equal(got, want):
        from jaxprtool.text.printer import print_jaxpr

        pytest.fail(f"{expected}: got\n{print_jaxpr(got)}\nwant\n{print_jaxpr(want)}")
    assert not errors(check(got))
    assert alpha_equal(fn(got), got), "not idempotent"


def test_passes_do_not_mutate():
    from jaxprtool.text.printer import print_jaxpr

    for src, _, fn in GOLDEN_CASES:
        j = load(GOLDEN / f"{src}.jaxpr")
        before = print_jaxpr(j)
        fn(j)
        assert print_jaxpr(j) == before


def test_keep_outputs():
    j = load(GOLDEN / "dce.jaxpr")
    j2 = parse_text(
        "{ lambda ; a:f32[3] b:f32[3]. let c:f32[3] = sin a; d:f32[3] = cos b; e:f32[3] = exp a in (c, d, e) }"
    )
    r = dce_keep_outputs(j2, [2, 0])
    assert [e.prim for e in r.eqns] == ["sin", "exp"]
    assert r.outvars[0] is r.eqns[1].outputs[0] and len(r.invars) == 2
    with pytest.raises(JaxprError):
        dce_keep_outputs(j, [5])


def test_pipeline_spec():
    assert parse_pipeline("none") == [] and parse_pipeline("") == []
    assert parse_pipeline("inline, simplify,cse,dce") == ["inline", "simplify", "cse", "dce"]
    with pytest.raises(JaxprError):
        parse_pipeline("dce,nope")
    seen = []
    j = load(GOLDEN / "canonicalize.jaxpr")
    r = run_pipeline(j, "simplify,fold,cse,dce", lambda n, x: seen.append(n))
    assert seen == ["simplify", "fold", "cse", "dce"]
    assert run_pipeline(j, "none") is j
    assert len(r.eqns) < len(j.eqns)


# ---------------------------------------------------------------- flat trees vs JAX


@needs_jax("0.11", "jax._src.flattree (the flat trees of scan's ft_in/ft_out)")
def test_flattree_filter_matches_jax():
    from jax._src import flattree as jft

    rng = random.Random(0)
    for _trial in range(30):
        nc, nk, nx = rng.randrange(3), rng.randrange(4), rng.randrange(3)
        single = jft.FTSingleton
        cur = jft.pack(
            (tuple(single(None) for _ in range(nc)), tuple(single(None) for _ in range(nk)),
             tuple(single(None) for _ in range(nx)))
        )  # fmt: skip
        for _ in range(3):
            mask = [rng.random() < 0.6 for _ in range(len(cur))]
            nxt = cur.filter_with_mask(mask)
            mine = parse_ft(repr(cur)).filter_with_mask(mask)
            assert repr(mine) == repr(nxt)
            assert len(mine) == len(nxt)
            assert [len(p) for p in mine.unpack()] == [len(p) for p in nxt.unpack()]
            cur = nxt


# ---------------------------------------------------------------- DCE vs JAX's dce_jaxpr


def _jax_cases():
    import jax
    import jax.numpy as jnp
    from jax import lax

    def scan_unused(x):
        (a, b), ys = lax.scan(
            lambda c, x: ((c[0] + x, c[1] * x), (jnp.sin(x), x * 2)), (x[0], x[0]), x
        )
        return a, ys[0]

    def scan_live_carry(x):
        (a, b), ys = lax.scan(lambda c, x: ((c[0] + c[1], c[1] * x), jnp.cos(x)), (x[0], x[1]), x)
        return a

    def while_unused(x):
        _, v, w = lax.while_loop(
            lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1] * 2, jnp.sin(c[2])), (0, x, x)
        )
        return v

    def cond_unused(p, x):
        a, b = lax.cond(p, lambda x: (jnp.sin(x), jnp.cos(x)), lambda x: (x, -x), x)
        return a

    def jit_unused(x, y):
        @jax.jit
        def g(x, y):
            return jnp.sin(x), jnp.cos(y) * 2

        a, b = g(x, y)
        _ = jnp.exp(y)
        return a

    def nested(x):
        def body(c, xi):
            a, b = lax.cond(xi > 0, lambda: (c + xi, c * xi), lambda: (c - xi, c))
            return a, b

        return lax.scan(body, x[0], x)[0]

    def consts_scan(x):
        w = jnp.arange(3.0)
        return lax.scan(lambda c, xi: (c + w.sum() * xi, (c, xi * 3)), 0.0, x)[0]

    def while_consts(x, w):
        def body(c):
            i, a, b = c
            return i + 1, a * w[0], b + jnp.sin(w[1])

        return lax.while_loop(lambda c: c[0] < w.shape[0], body, (0, x, x))[1]

    def scan_no_xs(x, w):
        return lax.scan(lambda c, _: ((c[0] * w, c[1] + 1.0), c[1]), (x, x), None, length=4)[0][0]

    def jit_unused_input(x, y):
        return jax.jit(lambda x, y: (jnp.sin(x), y))(x, y)[0]

    f5 = jnp.ones(5, jnp.float32)
    return [
        (while_consts, (f5, jnp.arange(3.0, dtype=jnp.float32))),
        (scan_no_xs, (f5, f5)),
        (jit_unused_input, (f5, f5)),
        (scan_unused, (f5,)),
        (scan_live_carry, (f5,)),
        (while_unused, (jnp.float32(1.0),)),
        (cond_unused, (True, jnp.float32(1.0))),
        (jit_unused, (f5, f5)),
        (nested, (f5,)),
        (consts_scan, (f5,)),
    ]


@pytest.mark.parametrize("i", range(10))
def test_dce_matches_jax(i):
    import jax
    from jax._src.interpreters import partial_eval as pe

    fn, args = _jax_cases()[i]
    if "while" in fn.__name__ and JAX_VERSION < (0, 12):
        pytest.skip(
            f"the installed JAX {JAX_VERSION_TEXT} has no DCE rule for while (dce_jaxpr keeps "
            "its unused carries; JAX 0.12 prunes them, as the tool does)"
        )
    closed = jax.make_jaxpr(fn)(*args)
    jj = closed.jaxpr
    want_jax, _ = pe.dce_jaxpr(jj, [True] * len(jj.outvars), instantiate=True)
    got = dce(parse_text(str(jj)))
    want = parse_text(str(want_jax))
    if not alpha_equal(got, want):
        from jaxprtool.text.printer import print_jaxpr

        pytest.fail(f"{fn.__name__}: got\n{print_jaxpr(got)}\nJAX\n{want_jax}")


# ---------------------------------------------------------------- fold


TRANSCENDENTAL = [
    ("sin", "f32"), ("cos", "f32"), ("tan", "f32"), ("exp", "f32"), ("log", "f32"), ("tanh", "f32"),
    ("logistic", "f32"), ("sqrt", "f32"), ("rsqrt", "f32"), ("cbrt", "f32"), ("exp2", "f32"),
    ("log1p", "f32"), ("expm1", "f32"), ("erf", "f32"), ("atan2", "f32"), ("pow", "f32"),
    ("floor", "f32"), ("ceil", "f32"), ("round[rounding_method=1]", "f32"), ("integer_pow[y=3]", "f32"),
    ("shift_left", "i32"), ("shift_right_logical", "i32"), ("shift_right_arithmetic", "i32"),
    ("convert_element_type[new_dtype=int32 weak_type=False]", "f32"),
    ("nextafter", "f32"), ("max", "f32"), ("min", "f32"),
]  # fmt: skip


@pytest.mark.parametrize(
    "prim,dt", TRANSCENDENTAL, ids=[p.split("[")[0] + "_" + d for p, d in TRANSCENDENTAL]
)
def test_fold_never_folds(prim, dt):
    binary = prim.split("[")[0] in ("atan2", "pow", "shift_left", "shift_right_logical",
                                    "shift_right_arithmetic", "nextafter", "max", "min")  # fmt: skip
    lit = "2.0:f32[]" if dt == "f32" else "2:i32[]"
    out = "i32" if "int32" in prim or dt == "i32" else "f32"
    ops = f"{lit} {lit}" if binary else lit
    j = parse_text(f"{{ lambda ; . let a:{out}[] = {prim} {ops} in (a,) }}")
    r = fold(j)
    assert len(r.eqns) == 1 and r.eqns[0].prim == prim.split("[")[0]


FOLD_EXPRS = [
    ("add", "f32", (0.1, 0.2)), ("sub", "f32", (1e30, 1e-30)), ("mul", "f32", (3.3, 7.7)),
    ("div", "f32", (1.0, 3.0)), ("div", "f64", (2.0, 7.0)), ("neg", "f32", (-0.0,)),
    ("add", "bf16", (1.0, 0.0078125)), ("mul", "f16", (3.14, 2.71)),
    ("add", "i32", (2147483647, 5)), ("mul", "i32", (65536, 65536)), ("sub", "u32", (0, 1)),
    ("div", "i32", (-7, 2)), ("div", "i32", (7, -2)), ("rem", "i32", (-7, 3)), ("rem", "i8", (7, -3)),
    ("div", "u8", (200, 7)), ("max", "i32", (-3, 2)), ("min", "u16", (3, 9)), ("abs", "i32", (-5,)),
    ("sign", "i32", (-5,)), ("and", "i32", (12, 10)), ("or", "u8", (12, 3)), ("xor", "i16", (-1, 5)),
    ("not", "i32", (5,)), ("not", "bool", (True,)), ("and", "bool", (True, False)),
    ("lt", "f32", (1.0, 2.0)), ("eq", "f32", (0.0, -0.0)), ("ge", "i32", (3, 3)), ("ne", "u8", (1, 2)),
]  # fmt: skip


@pytest.mark.parametrize(
    "prim,dt,vals", FOLD_EXPRS, ids=[f"{p}_{d}_{i}" for i, (p, d, _) in enumerate(FOLD_EXPRS)]
)
def test_fold_matches_jax(prim, dt, vals):
    from jaxprtool.backend import evaluate
    from jaxprtool.core import np_dtype

    npdt = np_dtype(dt)

    def lit(v):
        if dt == "bool":
            return f"{v}:bool[]"
        if npdt.kind in "iu":
            return f"{int(v)}:{dt}[]"
        return f"{float(np.array(v, dtype=npdt))!r}:{dt}[]"

    out = "bool" if prim in ("lt", "eq", "ge", "ne", "gt", "le") else dt
    ops = " ".join(lit(v) for v in vals)
    j = parse_text(f"{{ lambda ; . let a:{out}[] = {prim} {ops} in (a,) }}")
    r = fold(j)
    assert r.eqns == () and isinstance(r.outvars[0], Literal), "expected a fold"
    (ref,) = evaluate(j, [])
    got = np.array(r.outvars[0].value, dtype=np_dtype(out))
    assert ref.dtype == got.dtype
    assert ref.tobytes() == got.tobytes(), (ref, got)


def test_fold_select_and_convert():
    j = parse_text(
        "{ lambda ; . let a:f32[] = select_n 1:i32[] 3.0:f32[] 4.0:f32[]; "
        "b:f64[] = convert_element_type[new_dtype=float64 weak_type=False] 0.1:f32[]; "
        "c:f32[] = convert_element_type[new_dtype=float32 weak_type=False] 16777217:i32[]; "
        "d:f32[] = convert_element_type[new_dtype=float32 weak_type=False] 0.1:f64[] in (a, b, c, d) }"
    )
    r = fold(j)
    # exact conversions fold; 16777217 and 0.1 (f64) are not exactly representable in f32
    assert [e.prim for e in r.eqns] == ["convert_element_type", "convert_element_type"]
    assert r.outvars[0].value == 4.0
    assert r.outvars[1].value == float(np.float32(0.1))


# ---------------------------------------------------------------- simplify keeps NaN/inf


SPECIAL = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1.5, -2.0, 3e38], dtype=np.float32)


def test_simplify_keeps_special_values():
    from jaxprtool.backend import evaluate

    text = """{ lambda ; a:f32[8] b:f32[8] c:f32[]. let
    d:f32[8] = mul a 1.0:f32[]
    e:f32[8] = mul 1.0:f32[] b
    f:f32[8] = add a -0.0:f32[]
    g:f32[8] = sub b 0.0:f32[]
    h:f32[8] = add a 0.0:f32[]
    i:f32[8] = mul a 0.0:f32[]
    j:f32[8] = sub a a
    k:f32[8] = neg b
    l:f32[8] = neg k
    m:f32[8] = div a 1.0:f32[]
    n:f32[8] = select_n False:bool[] a b
    o:f32[8] = broadcast_in_dim[broadcast_dimensions=() shape=(8,) sharding=None] 0.0:f32[]
    p:f32[8] = add_any a o
    q:f32[8] = mul c 1.0:f32[]
    r:f32[8] = sub b -0.0:f32[]
    s:f32[8] = broadcast_in_dim[broadcast_dimensions=() shape=(8,) sharding=None] 1.0:f32[]
    t:f32[8] = mul a s
  in (d, e, f, g, h, i, j, l, m, n, p, q, r, t) }""".replace(
        "q:f32[8] = mul c 1.0:f32[]", "q:f32[] = mul c 1.0:f32[]"
    )
    j = parse_text(text)
    r = simplify(j)
    # the identities applied: d e f g l m n p q t; not h (+0.0), i (x*0), j (x-x), r (-(-0.0))
    assert len(r.eqns) < len(j.eqns)
    kept = {e.prim for e in PASSES["dce"](r).eqns}
    assert "sub" in kept and "mul" in kept
    rng = np.random.default_rng(0)
    for _trial in range(3):
        a = rng.permutation(SPECIAL)
        b = rng.permutation(SPECIAL)
        c = np.float32(rng.choice(SPECIAL))
        ref = evaluate(j, [a, b, c])
        got = evaluate(r, [a, b, c])
        for idx, (x, y) in enumerate(zip(ref, got)):
            assert x.dtype == y.dtype and x.shape == y.shape
            if idx == 10:  # add_any with AD's zeros: the sign of zero is free
                assert np.array_equal(x, y, equal_nan=True)
            else:
                assert x.tobytes() == y.tobytes(), idx


def test_simplify_respects_types():
    j = parse_text(
        "{ lambda ; a:f32[] b:f32[3]. let c:f32[3] = mul a b; "
        "d:f32[3] = broadcast_in_dim[broadcast_dimensions=() shape=(3,) sharding=None] 1.0:f32[]; "
        "e:f32[3] = mul a d; f:f64[] = convert_element_type[new_dtype=float64 weak_type=False] a in (c, e, f) }"
    )
    r = simplify(j)
    assert [e.prim for e in r.eqns] == ["mul", "broadcast_in_dim", "mul", "convert_element_type"]


# ---------------------------------------------------------------- corpus sweeps


def _rand(t, rng):
    if not isinstance(t, ShapedArray) or not t.is_static:
        raise TypeError(t)
    dt = t.np_dtype
    if dt == np.bool_:
        return rng.random(t.shape) < 0.5
    if np.issubdtype(dt, np.integer):
        return rng.integers(0, 3, t.shape).astype(dt)
    if dt.kind == "f" or dt.name == "bfloat16":
        return rng.standard_normal(t.shape).astype(dt)
    if dt.kind == "c":
        return (rng.standard_normal(t.shape) + 1j * rng.standard_normal(t.shape)).astype(dt)
    raise TypeError(t)


CORPUS_010 = corpus_files("jax-0.10.2")
CORPUS_012 = corpus_files("jax-0.12.0.1")
# a quick, varied subset for the (slower) evaluation sweep
EVAL_SUBSET = [
    "ad_grad_simple", "ad_hessian", "ad_jacfwd_jacrev", "ad_linearize", "ad_grad_sort_cumsum_max",
    "scan", "scan_closes_over_array", "dropvars_unused_outputs", "nested_control_flow", "while_loop",
    "fori_loop_static_and_dynamic", "cond_int_pred_multiple_operands", "constvars_in_nested_jaxprs",
    "custom_jvp_grad", "checkpoint_policy_grad", "jvp_of_scan_and_zeros_tangents", "dot_general",
    "ew_binary_f32", "ew_integer_ops", "remat_of_scan_grad", "lax_map_and_assoc_scan",
]  # fmt: skip


_CLEAN: dict[Path, bool] = {}
_PARSED: dict[Path, Jaxpr] = {}


def _parsed(path: Path) -> Jaxpr:
    """The corpus file's program, read once for every pass's case (a pass never changes
    the program it is given: test_passes_do_not_mutate)."""
    if path not in _PARSED:
        _PARSED[path] = load(path)
    return _PARSED[path]


def _checks_clean(path: Path, j: Jaxpr) -> bool:
    """Whether the corpus file's program `j` checks without errors: found once, the same
    for every pass's case."""
    if path not in _CLEAN:
        _CLEAN[path] = not errors(check(j))
    return _CLEAN[path]


#: the corpus files (relative to the corpus) the default run passes: a sample that executes
#: every line of the package that the sample before it (every other file of CORPUS_010 +
#: CORPUS_012: 117) executed in `test_corpus_idempotent_and_checked`'s body for every pass
#: (chosen by a greedy cover of the lines `sys.monitoring` saw each file execute, the file
#: read before: 46 files for 4,087 lines); `make test-full` passes every file
PASSED_FILES = [
    "jax-0.10.2/checkpoint.jaxpr",
    "jax-0.10.2/checkpoint_policy_grad.jaxpr",
    "jax-0.10.2/constvars_in_nested_jaxprs.jaxpr",
    "jax-0.10.2/custom_linear_solve.jaxpr",
    "jax-0.10.2/custom_vjp_linearize.jaxpr",
    "jax-0.10.2/debug_print_callback.jaxpr",
    "jax-0.10.2/device_put_inside_jit.jaxpr",
    "jax-0.10.2/dropvars_unused_outputs.jaxpr",
    "jax-0.10.2/dtypes_small_floats_ints.jaxpr",
    "jax-0.10.2/explicit_sharding_types.jaxpr",
    "jax-0.10.2/jit_lambda_shared_names.jaxpr",
    "jax-0.10.2/jnp_misc_highlevel.jaxpr",
    "jax-0.10.2/linalg_ops.jaxpr",
    "jax-0.10.2/model_cnn_forward.jaxpr",
    "jax-0.10.2/model_mlp_sgd_step_jit.jaxpr",
    "jax-0.10.2/nextafter_erf_inv_igamma_random_gamma_grad.jaxpr",
    "jax-0.10.2/pallas_interpret.jaxpr",
    "jax-0.10.2/random_legacy_uint32_key.jaxpr",
    "jax-0.10.2/reduce_window_pooling.jaxpr",
    "jax-0.10.2/refs_indexing_addupdate.jaxpr",
    "jax-0.10.2/run_state_discharge.jaxpr",
    "jax-0.10.2/shape_poly_constraints_ops.jaxpr",
    "jax-0.10.2/shard_map_collectives.jaxpr",
    "jax-0.10.2/shard_map_vma.jaxpr",
    "jax-0.10.2/slicing.jaxpr",
    "jax-0.10.2/transpose_concat_pad.jaxpr",
    "jax-0.12.0.1/ad_jacfwd_jacrev.jaxpr",
    "jax-0.12.0.1/checkify.jaxpr",
    "jax-0.12.0.1/checkpoint_name_offload.jaxpr",
    "jax-0.12.0.1/constvars_simplified_literals_flag.jaxpr",
    "jax-0.12.0.1/custom_jvp_nn.jaxpr",
    "jax-0.12.0.1/dot_general.jaxpr",
    "jax-0.12.0.1/dropvar_name_aliasing_ambiguity.jaxpr",
    "jax-0.12.0.1/dtypes_all_32bit.jaxpr",
    "jax-0.12.0.1/ew_binary_f32.jaxpr",
    "jax-0.12.0.1/ew_integer_ops.jaxpr",
    "jax-0.12.0.1/fft_ops.jaxpr",
    "jax-0.12.0.1/gather_fancy_indexing.jaxpr",
    "jax-0.12.0.1/generic_reduce_and_split.jaxpr",
    "jax-0.12.0.1/lax_misc_primitives.jaxpr",
    "jax-0.12.0.1/mul_out_dtype_param.jaxpr",
    "jax-0.12.0.1/ragged_dot_and_clamp_gather.jaxpr",
    "jax-0.12.0.1/remat_of_scan_grad.jaxpr",
    "jax-0.12.0.1/shard_map_more_collectives.jaxpr",
    "jax-0.12.0.1/sharding_constraint_auto_mesh.jaxpr",
    "jax-0.12.0.1/sort_argsort_topk.jaxpr",
]  # fmt: skip


@needs_corpus
@pytest.mark.parametrize(
    "sample", [True, pytest.param(False, marks=pytest.mark.slow)], ids=["covering", "all"]
)
@pytest.mark.parametrize("name", sorted(PASSES))
def test_corpus_idempotent_and_checked(name, sample):
    """The default run takes the files of PASSED_FILES (`make test-full` all of them)."""
    p = PASSES[name]
    n = 0
    files = [CORPUS / r for r in PASSED_FILES] if sample else CORPUS_010 + CORPUS_012
    for f in files:
        j = _parsed(f)
        r = p(j)
        assert alpha_equal(p(r), r), f"{name} not idempotent on {f.name}"
        if _checks_clean(f, j):
            errs = errors(check(r))
            assert not errs, f"{name} on {f}: {errs[0]}"
        n += 1
    assert n > (40 if sample else 200)


#: 0.12 files worth evaluating too: their scans use the ft_in/ft_out encoding
EVAL_SUBSET_012 = [
    s
    for s in EVAL_SUBSET
    if "scan" in s or s in ("dropvars_unused_outputs", "fori_loop_static_and_dynamic")
]


def _eval_files(subset):
    out = []
    for ver, stems in (("jax-0.10.2", subset), ("jax-0.12.0.1", EVAL_SUBSET_012)):
        for stem in stems:
            if stem not in subset:
                continue
            f = CORPUS / ver / f"{stem}.jaxpr"
            if f.exists():
                out.append(f)
    return out


def _sweep_outputs(files):
    """Each file's program and every distinct program the passes make of it, run at one
    random point: the outputs are bit for bit the same.  The files' programs run in one XLA
    compile (`together`: the suite's CPU is mostly compiling, issue 49), one for those with
    64-bit types and one for the others; where that fails, file by file (`_run_file`).  A
    file the back end cannot run is left out, and where only a pass's program fails, its
    error is raised.  A file no pass changes (its one program, nothing to compare it with)
    is not run: its run could not fail the sweep."""
    from jaxprtool.backend.evaluator import needs_x64

    prepared = [p for p in map(_prepared, files) if p is not None and len(p[1]) > 1]
    ran = 0
    for wide in (False, True):
        group = [(f, done, xs) for f, done, xs in prepared if needs_x64(done[""]) == wide]
        try:
            outs = iter(together(*((d, xs) for _, done, xs in group for d in done.values())))
        except Exception:  # noqa: BLE001 - found again, and named, file by file
            outs = None
        for f, done, xs in group:
            results = [next(outs) for _ in done] if outs else _run_file(f, done, xs)
            if results is not None:
                ran += 1
                _assert_unchanged(f, done, results)
    return ran


def _prepared(f: Path):
    """(file, {pass name: its distinct program, "": the file's}, inputs: constants then
    arguments), or None for a file whose inputs the sweep cannot draw (keys, refs, symbolic
    shapes, ...) or whose program the back end cannot trace (as `together` traces it)."""
    import jax

    from jaxprtool import backend

    j = load(f)
    rng = np.random.default_rng(0)
    try:
        args = [_rand(v.type, rng) for v in j.invars]
        xs = [_rand(v.type, rng) for v in j.constvars] + args
        backend.check_runnable(j)
        with backend.x64_scope(j):
            fn = backend.as_jax_function(j, backend.sizes_from_inputs(j, xs), False)
            jax.eval_shape(fn, *xs)
    except Exception:  # noqa: BLE001 - left out, as the back end cannot run it
        return None
    done = {"": j}
    for name, p in PASSES.items():
        r = p(j)
        if not any(alpha_equal(r, d) for d in done.values()):  # (unchanged, or another's)
            done[name] = r
    return f, done, xs


def _run_file(f: Path, done: dict, xs: list):
    """The outputs of a file's programs in one compile, or None where the back end cannot
    run the file's own program; a pass's program that fails raises its error."""
    from jaxprtool.backend import evaluate

    try:
        return together(*((d, xs) for d in done.values()))
    except Exception as e:
        n = len(done[""].constvars)
        try:
            evaluate(done[""], xs[n:], xs[:n])
        except Exception:  # noqa: BLE001 - the back end cannot run this file (keys, refs, ...)
            return None
        for d in done.values():
            evaluate(d, xs[n:], xs[:n])  # (raises the error of the pass's program)
        raise AssertionError(f"{f.name}: the programs ran one by one, not together") from e


def _assert_unchanged(f: Path, done: dict, results: list) -> None:
    ref, *outs = results
    for name, out in zip(list(done)[1:], outs):
        assert len(out) == len(ref)
        for x, y in zip(ref, out):
            x, y = np.asarray(x), np.asarray(y)
            assert x.dtype == y.dtype and x.shape == y.shape, (name, f.name)
            if x.dtype.kind == "V":
                continue
            assert np.array_equal(x, y, equal_nan=True), f"{name} changed an output of {f.name}"


@needs_corpus
def test_corpus_outputs_unchanged():
    # (15 of the subset's files are changed by some pass and run here, on JAX 0.10.0 and
    # 0.12.1; the floor leaves room for a pass that stops changing one or two of them)
    assert _sweep_outputs(_eval_files(EVAL_SUBSET)) >= 12


@needs_corpus
@pytest.mark.slow
def test_corpus_outputs_unchanged_full():
    _sweep_outputs(CORPUS_010 + CORPUS_012)


@needs_corpus
def test_passes_reduce_something():
    """Sanity: on the AD corpus files the clean-up actually removes equations."""
    total_before = total_after = 0
    for f in CORPUS_010:
        if f.name.startswith("ad_"):
            j = load(f)
            total_before += sum(1 for _ in all_eqns(j))
            total_after += sum(1 for _ in all_eqns(PASSES["canonicalize"](j)))
    assert total_after < total_before


# ---------------------------------------------------------------- commands


def test_commands(tmp_path):
    src = str(GOLDEN / "canonicalize.jaxpr")
    r = CliRunner().invoke(
        main,
        [
            "--no-color",
            "opt",
            "-p",
            "simplify,fold,cse,dce,canonicalize",
            "--print-after-all",
            "--diff=text",
            src,
        ],
    )
    assert r.exit_code == 0, r.output
    assert alpha_equal(parse_text(r.stdout), load(GOLDEN / "canonicalize.expected.jaxpr"))
    assert r.stderr.count("IR Dump After") == 5
    assert "\n-    c:f32[3] = sin a" in r.stderr or "-    c:f32[3] = sin a" in r.stderr
    for cmd in ("dce", "cse", "fold", "simplify", "inline", "canonicalize"):
        out = tmp_path / f"{cmd}.jaxpr"
        r = CliRunner().invoke(main, [cmd, src, "-o", str(out)])
        assert r.exit_code == 0, (cmd, r.output)
        assert alpha_equal(load(out), PASSES[cmd](load(src)))
    r = CliRunner().invoke(main, ["dce", "--keep-outputs", "0", str(GOLDEN / "dce.jaxpr")])
    assert r.exit_code == 0 and len(parse_text(r.stdout).outvars) == 1
    r = CliRunner().invoke(main, ["inline", "--names", "inner", str(GOLDEN / "inline.jaxpr")])
    assert r.exit_code == 0
    assert alpha_equal(parse_text(r.stdout), load(GOLDEN / "inline_names.expected.jaxpr"))
    r = CliRunner().invoke(main, ["opt", "-p", "dce,bogus", src])
    assert r.exit_code == 2
    r = CliRunner().invoke(main, ["dce", str(tmp_path / "missing.jaxpr")])
    assert r.exit_code == 2  # a missing input file is bad usage


def test_stdin_and_style():
    text = (GOLDEN / "dce_scan_ft.jaxpr").read_text()
    r = CliRunner().invoke(main, ["dce", "-"], input=text)
    assert r.exit_code == 0, r.output
    assert "ft_in=" in r.stdout and "num_carry" not in r.stdout
    assert math.isfinite(len(r.stdout))


def test_cse_keeps_nested_effects_and_dce_keeps_them():
    body = """jit[
      name=p
      jaxpr={ lambda ; b:f32[3]. let
          debug_print[
            fmt=x = {x}
            has_placeholders=True
            in_tree=PyTreeDef(((), {'x': *}))
            logging_record=None
            ordered=False
            partitioned=False
            static_args=()
          ] b
          c:f32[3] = sin b
        in (c,) }
    ] a"""
    j = parse_text(
        f"{{ lambda ; a:f32[3]. let\n    d:f32[3] = {body}\n    e:f32[3] = {body}\n  in (d,) }}"
    )
    assert len(cse(j).eqns) == 2
    r = dce(j)
    assert len(r.eqns) == 2
    # the unused call keeps its effect but loses its result
    assert len(r.eqns[1].outputs) == 0
    assert [e.prim for e in r.eqns[1].params["jaxpr"].eqns] == ["debug_print"]


def test_keep_outputs_cli_errors():
    src = str(GOLDEN / "dce.jaxpr")
    assert CliRunner().invoke(main, ["dce", "--keep-outputs", "3", src]).exit_code == 2
    assert CliRunner().invoke(main, ["dce", "--keep-outputs", "x", src]).exit_code == 2


# ---------------------------------------------------------------- pass records and pipelines


def test_registry_holds_the_module_records():
    from jaxprtool.passes import canonicalize as canon_mod
    from jaxprtool.passes import cse as cse_mod
    from jaxprtool.passes import dce as dce_mod
    from jaxprtool.passes import fold as fold_mod
    from jaxprtool.passes import inline as inline_mod
    from jaxprtool.passes import simplify as simplify_mod
    from jaxprtool.passes.registry import Pass

    records = [dce_mod.DCE, cse_mod.CSE, fold_mod.FOLD, simplify_mod.SIMPLIFY]
    records += [inline_mod.INLINE, canon_mod.CANONICALIZE]
    assert list(PASSES) == ["dce", "cse", "fold", "simplify", "inline", "canonicalize"]
    assert [PASSES[r.name] for r in records] == records
    for p in records:
        assert isinstance(p, Pass) and p.help and "\n" not in p.help and "Example:" in p.doc
    assert {p.name: [o.name for o in p.options] for p in records} == {
        "dce": ["keep-outputs"],
        "cse": [],
        "fold": [],
        "simplify": [],
        "inline": ["names"],
        "canonicalize": ["max-iterations"],
    }
    j = load(GOLDEN / "dce.jaxpr")
    assert alpha_equal(PASSES["dce"](j, keep_outputs=(0,)), dce_keep_outputs(j, [0]))
    with pytest.raises(TypeError):
        PASSES["cse"](j, bogus=1)


PIPELINES = [
    ("dce", ["dce"]),
    (" dce , ,cse,", ["dce", "cse"]),
    ("dce{}", ["dce"]),
    ("inline{names=relu}", ["inline{names=relu}"]),
    # a comma inside braces belongs to the option, outside it separates passes
    ("inline{names=relu,gelu},simplify,dce", ["inline{names=relu,gelu}", "simplify", "dce"]),
    ("inline{ names={relu, gelu} },cse", ["inline{names=relu,gelu}", "cse"]),
    ("dce{keep-outputs=2,0},cse", ["dce{keep-outputs=2,0}", "cse"]),
    ("dce{keep-outputs=1,,2}", ["dce{keep-outputs=1,2}"]),
    ("dce{keep-outputs=}", ["dce{keep-outputs=}"]),
    ("canonicalize{max-iterations=5},dce", ["canonicalize{max-iterations=5}", "dce"]),
    ("dce {keep-outputs=0}", ["dce{keep-outputs=0}"]),
]


@pytest.mark.parametrize("spec,steps", PIPELINES)
def test_pipeline_parser(spec, steps):
    from jaxprtool.passes.registry import parse_pipeline_steps

    got = parse_pipeline_steps(spec)
    assert [str(s) for s in got] == steps
    assert parse_pipeline(spec) == [s.split("{")[0] for s in steps]
    # the written form reads back the same
    again = parse_pipeline_steps(",".join(str(s) for s in got))
    assert [(s.name, s.options) for s in again] == [(s.name, s.options) for s in got]


def test_pipeline_option_values():
    from jaxprtool.passes.registry import parse_pipeline_steps

    (inl,) = parse_pipeline_steps("inline{names=relu,gelu}")
    assert inl.options == {"names": ("relu", "gelu")}
    d, c = parse_pipeline_steps("dce{keep-outputs=2,0},canonicalize{max-iterations=3}")
    assert d.options == {"keep_outputs": (2, 0)} and c.options == {"max_iterations": 3}


KNOWN = "(known: canonicalize, cse, dce, fold, inline, simplify, none)"
PIPELINE_ERRORS = [
    ("dce,nope", f"unknown pass 'nope' {KNOWN}"),
    ("none,dce", f"unknown pass 'none' {KNOWN}"),
    ("dce cse", f"unknown pass 'dce cse' {KNOWN}"),
    ("bogus{x=1}", f"unknown pass 'bogus' {KNOWN}"),
    ("dce{foo=1}", "unknown option 'foo' for pass 'dce' (known: keep-outputs)"),
    ("cse{foo=1}", "unknown option 'foo' for pass 'cse' (pass 'cse' takes no options)"),
    ("inline{relu}", "unknown option 'relu' for pass 'inline' (known: names)"),
    (
        "dce{keep-outputs}",
        "option 'keep-outputs' of pass 'dce' needs a value: keep-outputs=I,J,...",
    ),
    (
        "dce{keep-outputs=0,x}",
        "bad value for option 'keep-outputs' of pass 'dce': expected comma-separated output "
        "indices, got '0,x'",
    ),
    (
        "canonicalize{max-iterations=many}",
        "bad value for option 'max-iterations' of pass 'canonicalize': expected an integer, "
        "got 'many'",
    ),
    (
        "canonicalize{max-iterations=0}",
        "bad value for option 'max-iterations' of pass 'canonicalize': expected an integer >= 1, "
        "got '0'",
    ),
    (
        "inline{names={a,{b}}}",
        "bad value for option 'names' of pass 'inline': braces may only wrap a whole value, "
        "got 'a,{b}'",
    ),
    ("inline{names=a names=b}", "option 'names' given twice for pass 'inline'"),
    (
        "inline{names=relu,gelu",
        "unbalanced '{' in pipeline 'inline{names=relu,gelu': the options of pass 'inline' "
        "are never closed",
    ),
    ("cse,{", "unbalanced '{' in pipeline 'cse,{': '{' is never closed"),
    ("dce},cse", "unbalanced '}' in pipeline 'dce},cse': one too many in 'dce}'"),
    (
        "inline{names=a}}",
        "unbalanced '}' in pipeline 'inline{names=a}}': one too many in 'inline{names=a}}'",
    ),
    (
        "inline{names=a}dce",
        "unexpected 'dce' after the options of pass 'inline' in pipeline 'inline{names=a}dce' "
        "(separate passes with commas)",
    ),
    ("{names=a}", "expected a pass name before '{' in pipeline '{names=a}'"),
]


@pytest.mark.parametrize("spec,message", PIPELINE_ERRORS, ids=[e[0] for e in PIPELINE_ERRORS])
def test_pipeline_errors(spec, message):
    with pytest.raises(JaxprError) as info:
        parse_pipeline(spec)
    assert info.value.message == message
    r = CliRunner().invoke(main, ["--no-color", "opt", "-p", spec, str(GOLDEN / "dce.jaxpr")])
    assert r.exit_code == 2
    assert r.stdout == ""
    assert r.stderr.endswith(f"Error: Invalid value for -p: {message}\n")


def test_option_types():
    from jaxprtool.passes.registry import PassOption

    b = PassOption("flag", bool, False, "a flag")
    assert [b.parse(t) for t in ("true", "False", "1", "0")] == [True, False, True, False]
    with pytest.raises(ValueError, match="expected true or false, got 'yes'"):
        b.parse("yes")
    assert b.render(True) == "true"
    n = PassOption("n", int, 1, "a number")
    assert n.parse("-3") == -3 and n.shown_metavar == "N"
    s = PassOption("tags", list[str], None, "some names")
    assert s.parse(" a, b ,,") == ("a", "b") and s.shown_metavar == "NAME,..."
    i = PassOption("idx", list[int], None, "some indices")
    with pytest.raises(ValueError, match="expected comma-separated integers, got 'a'"):
        i.parse("a")


def test_run_pipeline_with_options():
    j = load(GOLDEN / "dce.jaxpr")
    seen = []
    r = run_pipeline(j, "dce{keep-outputs=0},cse", lambda n, x: seen.append(n))
    assert seen == ["dce{keep-outputs=0}", "cse"]
    assert alpha_equal(r, cse(dce_keep_outputs(j, [0])))
    from jaxprtool.passes.registry import PassOptionError

    with pytest.raises(PassOptionError) as info:
        run_pipeline(j, "dce{keep-outputs=7}")
    assert info.value.exit_code == 2
    assert info.value.message == (
        f"option 'keep-outputs' of pass 'dce': output index 7 out of range "
        f"(the program has {len(j.outvars)} outputs)"
    )


def test_canonicalize_max_iterations():
    from jaxprtool.passes.canonicalize import canonicalize

    j = load(GOLDEN / "canonicalize.jaxpr")
    one_round = dce(cse(fold(simplify(j))))
    assert alpha_equal(run_pipeline(j, "canonicalize{max-iterations=1}"), one_round)
    assert alpha_equal(canonicalize(j, max_iterations=1), one_round)
    assert alpha_equal(
        run_pipeline(j, "canonicalize{max-iterations=20}"), PASSES["canonicalize"](j)
    )


def _named_calls(j) -> list[str]:
    return sorted(str(e.params["name"]) for e in all_eqns(j) if e.prim in ("jit", "pjit"))


def test_opt_inline_names_only_inlines_those():
    import jax
    import jax.numpy as jnp

    from jaxprtool.backend import evaluate

    @jax.jit
    def relu(x):
        return jnp.maximum(x, 0.0)

    @jax.jit
    def gelu(x):
        return x * jax.nn.sigmoid(1.702 * x)

    @jax.jit
    def block(x):
        return gelu(relu(x) * 2.0)

    def f(x, y):
        return block(x) + relu(y), gelu(y)

    x = np.linspace(-2, 2, 6, dtype=np.float32)
    y = np.linspace(3, -1, 6, dtype=np.float32)
    text = str(jax.make_jaxpr(f)(x, y).jaxpr)
    assert _named_calls(parse_text(text)) == ["block", "gelu", "gelu", "relu", "relu"]
    # JAX runs the original program (jitted: one XLA compile, not one per call and operation)
    want = [np.asarray(v) for v in jax.jit(f)(x, y)]
    for spec, left in [
        ("inline{names=relu}", ["block", "gelu", "gelu"]),
        ("inline{names=relu,gelu}", ["block"]),
        ("inline{names=block}", ["gelu", "gelu", "relu", "relu"]),
        ("inline", []),
    ]:
        r = CliRunner().invoke(main, ["opt", "-p", spec, "-"], input=text)
        assert r.exit_code == 0, r.output
        got = parse_text(r.stdout)
        assert _named_calls(got) == left, spec
        assert not errors(check(got))
        for w, g in zip(want, evaluate(got, [x, y]), strict=True):
            # inlining changes XLA's fusion, so the last bit of a float may differ
            assert w.dtype == g.dtype, spec
            np.testing.assert_allclose(np.asarray(g), w, rtol=1e-6, err_msg=spec)


def test_pass_commands_are_generated_from_records():
    import inspect

    import jaxprtool.commands.pass_cmds as pc
    from jaxprtool.cli import COMMANDS

    for name, p in PASSES.items():
        assert COMMANDS[name] == f"pass_cmds:{name}"
        cmd = getattr(pc, name)
        assert cmd is pc.PASS_COMMANDS[name] and cmd.name == name
        r = CliRunner().invoke(main, [name, "--help"])
        assert r.exit_code == 0
        first = inspect.cleandoc(p.doc).splitlines()[0]
        assert first.split()[0] in r.stdout and "Example:" in r.stdout
        for flag in ("-o, --output OUT", "--diff", *(f"--{o.name}" for o in p.options)):
            assert flag in r.stdout, (name, flag)
        for o in p.options:
            assert o.help in r.stdout
    r = CliRunner().invoke(main, ["opt", "--help"])
    assert r.exit_code == 0 and "--print-after-all" in r.stdout
    for name, p in PASSES.items():
        assert f"  {name} " in r.stdout and p.help in r.stdout
        for o in p.options:
            assert f"{o.name}={o.shown_metavar}" in r.stdout and o.help in r.stdout


def test_pass_command_from_a_new_record(tmp_path):
    """A record is all a pass needs for its command: flags of every option type."""
    from jaxprtool.cli_click import click_command
    from jaxprtool.commands.pass_cmds import pass_command
    from jaxprtool.passes.registry import Pass, PassOption

    calls = []

    def fn(j, count=1, verbose=False, tags=None):
        calls.append((count, verbose, tags))
        return j

    rec = Pass(
        name="toy",
        help="Does nothing.",
        doc="Does nothing, loudly.\n\n    \b\n    Example:\n      jaxprtool toy f.jaxpr\n",
        fn=fn,
        options=(
            PassOption("count", int, 1, "How many."),
            PassOption("verbose", bool, False, "Say more."),
            PassOption("tags", list[str], None, "Some tags."),
        ),
    )
    cmd = click_command(pass_command(rec))  # (a declared command: click's built from it)
    src = str(GOLDEN / "cse.jaxpr")
    r = CliRunner().invoke(cmd, ["--help"])
    assert "Does nothing, loudly." in r.stdout
    assert "--count N" in r.stdout and "--verbose / --no-verbose" in r.stdout
    assert "--tags NAME,..." in r.stdout
    r = CliRunner().invoke(cmd, [src])
    assert r.exit_code == 0 and calls[-1] == (1, False, None)
    r = CliRunner().invoke(cmd, [src, "--count", "3", "--verbose", "--tags", "a,b"])
    assert r.exit_code == 0 and calls[-1] == (3, True, ("a", "b"))
    assert r.stdout.strip() == CliRunner().invoke(main, ["fmt", src]).stdout.strip()
    r = CliRunner().invoke(cmd, [src, "--count", "x"])
    assert r.exit_code == 2
    assert "Invalid value for --count: expected an integer, got 'x'" in r.stderr


OPT_VS_COMMAND = [
    (["dce"], "dce"),
    (["dce", "--keep-outputs", "0"], "dce{keep-outputs=0}"),
    (["inline", "--names", "inner"], "inline{names=inner}"),
    (["canonicalize", "--max-iterations", "1"], "canonicalize{max-iterations=1}"),
    (["canonicalize"], "canonicalize"),
]


@pytest.mark.parametrize("argv,spec", OPT_VS_COMMAND, ids=[s for _, s in OPT_VS_COMMAND])
def test_opt_equals_the_pass_command_on_golden_files(argv, spec):
    for src in sorted(GOLDEN.glob("*.jaxpr")):
        if src.name.endswith(".expected.jaxpr"):
            continue
        a = CliRunner().invoke(main, ["--no-color", *argv, str(src)])
        b = CliRunner().invoke(main, ["--no-color", "opt", "-p", spec, str(src)])
        assert (a.exit_code, a.stdout, a.stderr) == (b.exit_code, b.stdout, b.stderr), src.name
        assert a.exit_code == 0 or "keep-outputs" in spec


@needs_corpus
def test_opt_dce_equals_dce_on_corpus_files():
    files = (CORPUS_010 + CORPUS_012)[::12]
    assert len(files) >= 15
    for f in files:
        a = CliRunner().invoke(main, ["--no-color", "dce", str(f)])
        b = CliRunner().invoke(main, ["--no-color", "opt", "-p", "dce", str(f)])
        assert a.exit_code == 0 and b.exit_code == 0, f.name
        assert a.stdout == b.stdout and a.stderr == b.stderr, f.name


def test_pass_option_errors_on_the_command_line():
    src = str(GOLDEN / "dce.jaxpr")
    r = CliRunner().invoke(main, ["--no-color", "dce", "--keep-outputs", "3", src])
    assert r.exit_code == 2 and r.stderr.endswith(
        "Error: Invalid value for --keep-outputs: output index 3 out of range "
        "(the program has 1 outputs)\n"
    )
    r = CliRunner().invoke(main, ["--no-color", "opt", "-p", "dce{keep-outputs=3}", src])
    assert r.exit_code == 2 and r.stderr.endswith(
        "Error: Invalid value for -p: option 'keep-outputs' of pass 'dce': output index 3 out "
        "of range (the program has 1 outputs)\n"
    )
    r = CliRunner().invoke(main, ["--no-color", "canonicalize", "--max-iterations", "0", src])
    assert r.exit_code == 2 and r.stderr.endswith(
        "Error: Invalid value for --max-iterations: expected an integer >= 1, got '0'\n"
    )


def _slices(n: int) -> str:
    """n slices of one input at different starts and one repeat of the first (JAX's
    attention splits its qkv input so), a program where CSE's candidates share a bucket."""
    names = [f"s{chr(97 + i // 26)}{chr(97 + i % 26)}" for i in range(n)]
    lines = [
        f"    {x}:f32[1] = slice[limit_indices=({i + 1},) start_indices=({i},) strides=None] a"
        for i, x in enumerate(names)
    ]
    lines.append("    r:f32[1] = slice[limit_indices=(1,) start_indices=(0,) strides=None] a")
    outs = ", ".join([*names, "r"])
    return "{ lambda ; a:f32[64]. let\n" + "\n".join(lines) + f"\n  in ({outs},) }}\n"


def test_cse_compares_only_candidates_with_equal_parameter_fingerprints(monkeypatch):
    """Slices of one input with other bounds are never compared with one another (before:
    each with every earlier one, quadratic); the repeated slice still merges."""
    from jaxprtool.passes import cse as cse_mod

    calls = []
    equal = cse_mod._params_equal
    monkeypatch.setattr(cse_mod, "_params_equal", lambda a, b: calls.append(1) or equal(a, b))
    n = 40
    j = cse(parse(_slices(n)).jaxpr)
    assert len(j.eqns) == n
    assert j.outvars[-1] is j.outvars[0]
    assert len(calls) == 1


def test_cse_keys_each_literal_once(monkeypatch):
    """cse files each equation under its operands: a literal operand's hash (its repr, its
    type's hash, computed in Python) is worked out once per literal, not at each lookup;
    equal literals of different equations still merge them, a literal of another sign
    does not."""
    keys = []
    key = Literal._key
    monkeypatch.setattr(Literal, "_key", lambda lit: keys.append(lit) or key(lit))
    j = parse(
        "{ lambda ; a:f32[3]. let b:f32[3] = mul a 2.0:f32[]; c:f32[3] = mul a -0.0:f32[]; "
        "d:f32[3] = mul a 0.0:f32[]; e:f32[3] = mul a 2.0:f32[] in (b, c, d, e) }"
    ).jaxpr
    lits = [e.inputs[1] for e in j.eqns]
    out = cse(j)
    assert [e.inputs[1].value for e in out.eqns] == [2.0, -0.0, 0.0]
    assert out.outvars[3] is out.outvars[0]
    keys.clear()
    assert len({hash(x) for x in lits * 3}) == 3 and hash(lits[0]) == hash(lits[3])
    assert keys == []  # each hashed already, by cse
    for copied in (copy.deepcopy(lits[0]), copy.copy(lits[0])):
        assert copied._hash is None and copied == lits[0]  # (worked out again when asked)


@pytest.mark.parametrize(
    "a, b",
    [
        (float("nan"), float("nan")),
        ((1, (2.0, float("nan"))), (1, (2.0, float("nan")))),
        ("float32", "float32"),
        (-0.0, 0.0),
    ],
)
def test_equal_parameters_have_equal_fingerprints(a, b):
    from jaxprtool.core import _AlphaEq, params_fingerprint

    assert _AlphaEq().params({"k": a}, {"k": b})
    assert params_fingerprint({"k": a}) == params_fingerprint({"k": b})


def test_alpha_equal_jaxprs_and_dtypes_have_equal_fingerprints():
    """A nested jaxpr differs only in names; a dtype is JAX's `np.dtype` or the tool's name."""
    from jaxprtool.core import _AlphaEq, params_fingerprint
    from jaxprtool.lazy import DTypeName

    one = "{ lambda ; %s:f32[]. let %s:f32[] = sin %s in (%s,) }"
    x, y = parse(one % ("a", "b", "a", "b")).jaxpr, parse(one % ("c", "d", "c", "d")).jaxpr
    pa = {"jaxpr": x, "t": DTypeName("float32"), "v": [np.float32, 1]}
    pb = {"jaxpr": y, "t": np.dtype("float32"), "v": [np.float32, 1]}
    assert _AlphaEq().params(pa, pb)
    assert params_fingerprint(pa) == params_fingerprint(pb)


def test_for_ad_walks_a_program_without_nested_constants_once(monkeypatch):
    """`consts_order.for_ad` of a program none of whose nested jaxprs has constants is the
    program itself, without numbering or lifting walks; one with a jitted body's constant
    is still hoisted (the constant becomes the program's)."""
    from jaxprtool import consts_order

    plain = parse(
        "{ lambda ; a:f32[3]. let\n"
        "    b:f32[3] = jit[name=g jaxpr={ lambda ; d:f32[3]. let\n"
        "        e:f32[3] = sin d in (e,) }] a\n"
        "  in (b,) }\n"
    ).jaxpr
    nested = parse(
        "{ lambda ; a:f32[3]. let\n"
        "    b:f32[3] = jit[name=g jaxpr={ lambda c:f32[3]; d:f32[3]. let\n"
        "        e:f32[3] = mul d c in (e,) }] a\n"
        "  in (b,) }\n"
    ).jaxpr
    numbered = []
    number = consts_order.number_constants
    monkeypatch.setattr(consts_order, "number_constants", lambda j: numbered.append(j) or number(j))
    assert consts_order.for_ad(plain) is plain and numbered == []
    out = consts_order.for_ad(nested)
    assert numbered == [nested]
    assert [str(v.type) for v in out.constvars] == ["f32[3]"]
    assert out.eqns[0].params["jaxpr"].constvars == ()
