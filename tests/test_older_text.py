"""Text printed by JAX 0.4.1 - 0.6.0 (tests/data/older/, origins in its SOURCES.md).

* `fmt` reprints each file byte for byte, in the style detected from the text: result-less
  equations printed ` = prim` (before jax-ml/jax#18845, JAX 0.4.22), `pjit` with `name=`
  among the sorted keys (before #18862, 0.4.22) or printing all its defaults (before #14384,
  0.4.4), custom_jvp_call / custom_vjp_call with their thunks, `num_consts` and `out_trees`
  (before #28608 / #28715, 0.6.1), lists of jaxprs over several lines, xmap's named-axis
  types (`f16[4,512,512;a:8]`).
* `--jax-style` converts between two real printouts of the same program.
* The old text runs and differentiates: numbers against JAX on the same Python function.
* Named axes are refused by AD and run, untyped printouts (JAX <= 0.2.25) by everything,
  with located messages.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from conftest import CORPUS, needs_corpus
from jax_oracle import close, run, together

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

from jaxprtool import core  # noqa: E402
from jaxprtool.core import JaxprError  # noqa: E402
from jaxprtool.text.parser import parse  # noqa: E402
from jaxprtool.text.style import detect_style  # noqa: E402

OLDER = Path(__file__).resolve().parent / "data" / "older"
PJIT_NAME_LAST = "013_docs-jaxpr-rst-pjit-name-last-2023.jaxpr"  # ~0.4.8
PJIT_NAME_FIRST = "015_docs-jaxpr-rst-pjit-name-first-2024.jaxpr"  # ~0.4.30, same program
SCAN = "012_docs-jaxpr-rst-scan-typed-2023.jaxpr"
DOT = "022_docs-thinking-in-jax-preferred-element-type-2025.jaxpr"
XMAP = "021_docs-custom-gpu-op-pjit-xmap-named-shapes-2022.jaxpr"
BARE_EQ = "052_catalyst-docs-sharp-bits-qnode-func-custom-prims.jaxpr"
JAXPR_LIST = "053_catalyst-docs-autograph-for-cond-branch_jaxprs.jaxpr"
UNTYPED = "008_docs-jaxpr-rst-while-untyped-2021.jaxpr"
UNTYPED_2019 = "002_docs-custom-interp-inverse-tie_in-2019.jaxpr"
NO_TYPES = "jaxpr has no types (printed with print_shapes=False); a typed IR cannot be built"

GOLDEN = [
    PJIT_NAME_LAST,
    PJIT_NAME_FIRST,
    SCAN,
    DOT,
    XMAP,
    JAXPR_LIST,
    "pr18845_before.jaxpr",
    "pr18845_after.jaxpr",
    "pr28608_before.jaxpr",
    "pr28715_before.jaxpr",
]


def text(name: str) -> str:
    return (OLDER / name).read_text()


def fmt(name: str, *style: str) -> str:
    r = run([*(("--jax-style", style[0]) if style else ()), "fmt", str(OLDER / name)])
    assert r.exit_code == 0, r.output
    return r.stdout


def style_of(name: str) -> str:
    return str(detect_style(parse(text(name), name).jaxpr))


# ---------------------------------------------------------------- printed back byte for byte


@pytest.mark.parametrize("name", GOLDEN)
def test_fmt_reprints_older_text_byte_for_byte(name):
    assert fmt(name) == text(name)


def test_result_less_equations_keep_their_equals_sign():
    """Catalyst's page stripped the space JAX prints after a zero-operand equation's `]`;
    everything else is JAX's text."""
    out = fmt(BARE_EQ)
    assert [x.rstrip() for x in out.splitlines()] == text(BARE_EQ).splitlines()
    assert "\n           = device_init[\n" in out and "\n           = qdealloc o\n" in out
    assert "\n          ] \n" in out  # `] ` + the (empty) operands, as JAX prints it


def test_detected_styles():
    assert style_of("pr18845_before.jaxpr") == "0.4.21"  # ` = debug_callback`
    assert style_of(BARE_EQ) == "0.4.21"
    assert style_of(PJIT_NAME_LAST) == "0.4.21"  # name among the sorted keys
    assert style_of(XMAP) == "0.4.3"  # pjit prints donated_invars=(False, False)
    assert style_of("pr28715_before.jaxpr") == "0.6.0"
    assert style_of("pr28608_before.jaxpr") == "0.6.0"
    assert style_of(PJIT_NAME_FIRST) == "0.4.35"  # 0.4.22 - 0.4.35 print it the same


def test_list_of_jaxprs_over_several_lines():
    (e,) = [e for e in parse(text(JAXPR_LIST), "l").jaxpr.eqns[0].params["body_jaxpr"].eqns
            if e.prim == "cond"]  # fmt: skip
    branches = e.params["branch_jaxprs"]
    assert isinstance(branches, list) and len(branches) == 2
    assert [b.eqns[0].params["y"] for b in branches] == [2, 3]


# ---------------------------------------------------------------- --jax-style between real texts


def _addresses_masked(s: str) -> str:
    return re.sub(r" at 0x[0-9a-f]+", " at 0x...", s)


def test_jax_style_converts_between_two_real_printouts():
    # docs/jaxpr.rst printed the same program with JAX ~0.4.8 and ~0.4.30
    assert fmt(PJIT_NAME_FIRST, "0.4.21") == text(PJIT_NAME_LAST)
    assert fmt(PJIT_NAME_LAST, "0.4.30") == text(PJIT_NAME_FIRST)
    # jax-ml/jax#18845 printed the same program before and after the change (two runs)
    before, after = "pr18845_before.jaxpr", "pr18845_after.jaxpr"
    assert _addresses_masked(fmt(after, "0.4.21")) == _addresses_masked(text(before))
    assert _addresses_masked(fmt(before, "0.4.22")) == _addresses_masked(text(after))


@needs_corpus
@pytest.mark.parametrize(
    "case",
    [
        "jit_nested",  # jit -> pjit
        "jit_called_twice_shared",
        "switch",
        "broadcast_reshape_squeeze",  # broadcast_in_dim shape=, reshape without sharding=
        "scan",  # ft_in/ft_out -> _split_transpose, linear, num_carry, num_consts
        "scan_reverse_unroll_length",
        "lax_map_and_assoc_scan",
    ],
)
def test_jax_style_converts_0_12_text_to_0_4_35(case):
    """The corpus prints the same programs with JAX 0.12 and 0.4.35."""
    r = run(["--jax-style", "0.4.35", "fmt", str(CORPUS / "jax-0.12.0.1" / f"{case}.jaxpr")])
    assert r.exit_code == 0, r.output
    assert r.stdout == (CORPUS / "older" / "jax-0.4.35" / f"{case}.jaxpr").read_text()


# ---------------------------------------------------------------- old text runs and differentiates


def func7(a):
    """docs/jaxpr.rst's `func7` (the program of 013/015)."""

    @jax.jit
    def inner(x, y):
        return y + x * jnp.ones(1)

    return a + inner(a, a - 2.0)


def func11(arr, extra):
    """docs/jaxpr.rst's `func11` (012)."""
    ones = jnp.ones(arr.shape)

    def body(carry, aelems):
        ae1, ae2 = aelems
        return (carry + ae1 * ae2 + extra, carry)

    return jax.lax.scan(body, 0.0, (arr, ones))


def dot_plus_one(x, y):
    """thinking_in_jax's `jnp.dot(x + 1, y + 1)` (022)."""
    return jnp.dot(x + 1, y + 1)


def _rng(*shapes):
    g = np.random.default_rng(0)
    return [g.uniform(-1, 1, s).astype(np.float32) for s in shapes]


PROGRAMS = [
    (PJIT_NAME_LAST, func7, [()]),
    (PJIT_NAME_FIRST, func7, [()]),
    (SCAN, func11, [(16,), ()]),
    (DOT, dot_plus_one, [(3, 4), (4,)]),
]


def _ad(cmd: str, name: str):
    r = run([cmd, str(OLDER / name)])
    assert r.exit_code == 0, r.output
    return parse(r.stdout, cmd).jaxpr


@pytest.mark.parametrize("name,f,shapes", PROGRAMS, ids=[p[0][:3] for p in PROGRAMS])
def test_old_text_runs_and_differentiates_like_jax(name, f, shapes):
    """The old text run, its jvp and its vjp against JAX's f, jax.jvp and jax.vjp: the
    three programs and JAX's oracle in one compile (`together`)."""
    args, tangents = _rng(*shapes), _rng(*shapes)
    leaves, tree = jax.tree_util.tree_flatten(jax.eval_shape(f, *args))
    cts = [np.full(o.shape, 0.5, np.float32) + _rng(o.shape)[0] for o in leaves]

    def oracle(args, tangents, cts):
        outs, pullback = jax.vjp(f, *args)
        _, ref_t = jax.jvp(f, tuple(args), tuple(tangents))
        leaves = jax.tree_util.tree_leaves
        return leaves(outs), leaves(ref_t), list(pullback(jax.tree_util.tree_unflatten(tree, cts)))

    vjp = _ad("vjp", name)
    got, got_t, got_ct, (outs, ref_t, ref) = together(
        (parse(text(name), name).jaxpr, args),
        (_ad("jvp", name), args + tangents),
        (vjp, args + cts),
        (oracle, (args, tangents, cts)),
    )
    for a, b in zip(got, outs, strict=True):
        close(a, b)
    for a, b in zip(got_t[len(outs) :], ref_t, strict=True):
        close(a, b)
    for a, b in zip(got_ct[len(outs) :], ref, strict=True):
        close(a, b)
    # the derived programs print in the style of their input
    assert str(detect_style(vjp)) == style_of(name) or style_of(name) == "0.4.35"


def test_run_command_on_old_text():
    r = run(["run", str(OLDER / PJIT_NAME_LAST), "--input", "f32[]=0.7", "--print-values", "full"])
    assert r.exit_code == 0, r.output
    (want,) = np.asarray(func7(np.float32(0.7)))
    assert f"{want:.6g}"[:5] in r.output


# ---------------------------------------------------------------- refused, with located messages


def test_named_axis_types_are_read_and_printed():
    j = parse(text(XMAP), "x").jaxpr
    types = {str(v.type) for e in core.all_eqns(j) for v in e.outputs if v.type.named_shape}
    assert {"f16[4,512,512;a:8]", "f32[4;a:8]", "f32[16,262144;a:8]"} <= types
    with pytest.raises(JaxprError) as ei:
        parse("{ lambda ; a:f32[4;a]. let  in (a,) }", "t.jaxpr")
    assert ei.value.message == "invalid named axes 'a' in type (expected e.g. 'a:8')"
    assert (ei.value.loc.line, ei.value.loc.col) == (1, 20)


@pytest.mark.parametrize(
    "cmd,doing",
    [
        (["run", "--random", "0"], "running"),
        (["grad"], "differentiating"),
        (["jvp"], "differentiating"),
        (["vjp"], "differentiating"),
        (["linearize"], "differentiating"),
    ],
)
def test_named_axes_are_refused_by_ad_and_run(cmd, doing):
    path = OLDER / XMAP
    r = run([*cmd, str(path)])
    assert r.exit_code == 1
    assert (
        f"{path}:11:11: error: {doing} a program with xmap's named axes is not supported: "
        "'xmap' uses the type f16[4,512,512;a:8] (xmap was deleted in JAX 0.4.31); re-trace "
        "the function with jax.vmap or shard_map on a current JAX\n"
    ) in r.output
    assert "Traceback" not in r.output


@pytest.mark.parametrize("cmd", [["fmt"], ["check"], ["run", "--random", "0"], ["grad"]])
def test_untyped_printouts_stay_refused(cmd):
    for name, col, message in (
        (UNTYPED, 14, NO_TYPES),
        (UNTYPED_2019, 14, "expected a binder 'name:type' or '.', found ';'"),
    ):
        path = OLDER / name
        r = run([*cmd, str(path)])
        assert r.exit_code == 1
        code = " [E001]" if cmd == ["check"] else ""  # (check shows codes: issue 39)
        assert r.output.startswith(f"{path}:1:{col}: error: {message}{code}\n"), r.output


@needs_corpus
@pytest.mark.parametrize("width", ["40", "80", "1000"])
def test_result_less_equations_in_the_old_style_read_back(width):
    """`--jax-style 0.4.21` writes ` = debug_callback[...]`, at the start of a block, between
    equations and in the one-line form (`let  = ...; b:f32[3] = ...`); the text reads back as
    the same program, detected as 0.4.21."""
    path = CORPUS / "older" / "jax-0.4.35" / "debug_print_callback.jaxpr"
    r = run(["--jax-style", "0.4.21", "fmt", "--width", width, str(path)])
    assert r.exit_code == 0, r.output
    assert r.stdout.count(" = debug_callback[") == 2
    j = parse(r.stdout, "old").jaxpr
    assert core.alpha_equal(j, parse(path.read_text(), "new").jaxpr)
    assert str(detect_style(j)) == "0.4.21"
    assert all(e.bare_eq for e in j.eqns if not e.outputs)


# ---------------------------------------------------------------- the whole wild/ folder

WILD = CORPUS.parent / "wild"
#: wild/ files that are not JAX's text as JAX printed it (wild/SOURCES.md), and what they get
WILD_REFUSED = {
    **{
        n: NO_TYPES  # untyped printouts, JAX <= 0.2.25
        for n in ("001", "003", "004", "005", "006", "007", "008", "009", "017", "018")
    },
    "002": "expected a binder 'name:type' or '.', found ';'",  # 2019 `lambda ; ; a.` header
    "027": "expected a binder 'name:type' or ';', found '.'",  # autodidax's toy printer
}
#: reprinted equal up to the indentation and trailing spaces a poster changed: 054 and 061
#: re-indented (SOURCES.md: edited), 052's page stripped a trailing space
WILD_REINDENTED = {"052", "054", "061"}


@needs_corpus
@pytest.mark.parametrize(
    "path",  # ids given with each case: pytest before 8.4 calls an ids function on no case
    [pytest.param(p, id=p.name[:3]) for p in sorted(WILD.glob("*.jaxpr"))] if WILD.is_dir() else [],
)
def test_wild_printouts_round_trip(path):
    """Every printout from JAX's documentation history and public repositories: fmt gives
    JAX's text back byte for byte, or the located refusal listed above."""
    key = path.name[:3]
    r = run(["fmt", str(path)])
    if key in WILD_REFUSED:
        assert r.exit_code == 1
        assert re.match(
            rf"{re.escape(str(path))}:1:\d+: error: {re.escape(WILD_REFUSED[key])}\n", r.output
        )
        return
    assert r.exit_code == 0, r.output
    if key in WILD_REINDENTED:

        def flat(s):
            return [x.strip() for x in s.splitlines()]

        assert flat(r.stdout) == flat(path.read_text())
        return
    assert r.stdout == path.read_text()
