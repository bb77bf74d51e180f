"""`jaxprtool diff` (semantic, names ignored; exit 0/1/2) and `jaxprtool stats`."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import corpus_files, needs_corpus

from jaxprtool.cli import main
from jaxprtool.core import alpha_equal
from jaxprtool.text.parser import parse
from jaxprtool.ui.diff import semantic_diff, text_diff
from jaxprtool.ui.stats import stats

GOLDEN = Path(__file__).resolve().parent / "golden" / "passes"


def run(args, **kw):
    return CliRunner().invoke(main, ["--no-color", *args], **kw)


# ---------------------------------------------------------------- diff


def test_diff_golden():
    r = run(["diff", str(GOLDEN / "diff_a.jaxpr"), str(GOLDEN / "diff_b.jaxpr")])
    assert r.exit_code == 1, r.output
    lines = r.stdout.splitlines()
    assert (
        lines[0] == f"--- {GOLDEN / 'diff_a.jaxpr'}"
        and lines[1] == f"+++ {GOLDEN / 'diff_b.jaxpr'}"
    )
    assert "\n".join(lines[2:]) + "\n" == (GOLDEN / "diff.expected.txt").read_text()
    assert "\x1b[" not in r.stdout


def test_diff_equal_and_quiet(tmp_path):
    a = GOLDEN / "diff_a.jaxpr"
    renamed = tmp_path / "r.jaxpr"
    renamed.write_text(
        "{ lambda ; b:f32[3] a:f32[3]. let\n    z:f32[3] = sin b\n    y:f32[3] = mul z a\n"
        "    x:f32[3] = exp y\n  in (x,) }\n"
    )
    r = run(["diff", str(a), str(renamed)])
    assert r.exit_code == 0 and r.stdout == ""
    r = run(["diff", "-q", str(GOLDEN / "diff_a.jaxpr"), str(GOLDEN / "diff_b.jaxpr")])
    assert r.exit_code == 1 and r.stdout == ""


def test_diff_trouble_exits_2(tmp_path):
    bad = tmp_path / "bad.jaxpr"
    bad.write_text("{ lambda ; a:f32[3]. let b:f32[3] = sin in (b,) ")
    r = run(["diff", str(GOLDEN / "diff_a.jaxpr"), str(bad)])
    assert r.exit_code == 2
    assert "error" in r.stderr
    r = run(["diff", str(GOLDEN / "diff_a.jaxpr"), str(tmp_path / "missing.jaxpr")])
    assert r.exit_code == 2
    r = run(["diff", str(GOLDEN / "diff_a.jaxpr")])
    assert r.exit_code == 2


def test_diff_wiring_change():
    a = parse("{ lambda ; a:f32[3] b:f32[3]. let c:f32[3] = sub a b in (c,) }", "a").jaxpr
    b = parse("{ lambda ; a:f32[3] b:f32[3]. let c:f32[3] = sub b a in (c,) }", "b").jaxpr
    d = semantic_diff(a, b)
    assert d is not None
    assert "-  c:f32[3] = sub a b" in d and "+  c:f32[3] = sub b a" in d


def test_diff_shows_each_files_own_names_and_renames(tmp_path):
    """Removed and kept lines in the left file's names, added lines in the right file's, the
    outputs with JAX's trailing comma; --renames maps the paired names (issue 27)."""
    a, b = tmp_path / "a.jaxpr", tmp_path / "b.jaxpr"
    a.write_text(
        "{ lambda ; x:f32[3]. let\n    y:f32[3] = sin x\n    z:f32[3] = cos y\n"
        "    w:f32[3] = exp y\n  in (z, w) }\n"
    )
    b.write_text(
        "{ lambda ; p:f32[3]. let\n    q:f32[3] = sin p\n    e:f32[3] = exp q\n  in (e,) }\n"
    )
    r = run(["diff", "--renames", str(a), str(b)])
    assert r.exit_code == 1, r.output
    assert r.stdout.split("\n", 2)[2] == (
        "@@ -1,5 +1,4 @@\n"
        " { lambda ; x:f32[3]. let\n"
        "   y:f32[3] = sin x\n"
        "-  z:f32[3] = cos y\n"
        "   w:f32[3] = exp y\n"
        "-  in (z, w) }\n"
        "+  in (e,) }\n"
        "renamed: x -> p\n"
        "renamed: y -> q\n"
        "renamed: w -> e\n"
    )
    r = run(["diff", "--renames", str(a), str(a)])
    assert r.exit_code == 0 and r.stdout == ""


def test_diff_never_shows_two_values_under_one_name(tmp_path):
    """B binds `s` to a new value while A's kept `s` is another (issue 45, item 18): the
    added line's `s` is primed, in its uses too; B's other names stay its own."""
    a, b = tmp_path / "a.jaxpr", tmp_path / "b.jaxpr"
    a.write_text(
        "{ lambda ; a:f32[5,2] b:f32[5,2]. let\n    s:f32[5,2] = mul a b\n"
        "    t:f32[5,2] = add s a\n  in (t,) }\n"
    )
    b.write_text(
        "{ lambda ; a:f32[5,2] b:f32[5,2]. let\n    c:f32[5,2] = mul a b\n"
        "    s:f32[5,2] = broadcast_in_dim[broadcast_dimensions=() shape=(5, 2) sharding=None]"
        " 1.0:f32[]\n    t:f32[5,2] = add c s\n  in (t,) }\n"
    )
    r = run(["diff", str(a), str(b)])
    assert r.exit_code == 1, r.output
    assert r.stdout.split("\n", 3)[3] == (
        " { lambda ; a:f32[5,2] b:f32[5,2]. let\n"
        "   s:f32[5,2] = mul a b\n"
        "+  s':f32[5,2] = broadcast_in_dim[broadcast_dimensions=() shape=(5, 2) sharding=None]"
        " 1.0:f32[]\n"
        "-  t:f32[5,2] = add s a\n"
        "+  t:f32[5,2] = add c s'\n"
        "   in (t,) }\n"
    )


def test_diff_numpy_scalar_params_equal_python_numbers(tmp_path):
    """`np.int64(1)` (numpy >= 2 prints it inside tuples) is the value 1: equal programs."""
    a, b = tmp_path / "a.jaxpr", tmp_path / "b.jaxpr"
    a.write_text(
        "{ lambda ; a:f32[4,3]. let\n"
        "    b:f32[4] = reduce_sum[axes=(np.int64(1),) out_sharding=None] a\n"
        "    c:f32[4,1] = broadcast_in_dim[broadcast_dimensions=(np.int64(0),) shape=(4, 1) "
        "sharding=None] b\n"
        "  in (c,) }\n"
    )
    b.write_text(
        "{ lambda ; x:f32[4,3]. let\n"
        "    y:f32[4] = reduce_sum[axes=(1,) out_sharding=None] x\n"
        "    z:f32[4,1] = broadcast_in_dim[broadcast_dimensions=(0,) shape=(4, 1) "
        "sharding=None] y\n"
        "  in (z,) }\n"
    )
    r = run(["diff", str(a), str(b)])
    assert r.exit_code == 0, r.output
    assert "equal (up to variable names)" in r.stderr
    # a different value still differs, and only that line shows
    # (a well-typed change: an ill-typed B is trouble, exit 2)
    b.write_text(b.read_text().replace("shape=(4, 1)", "shape=(4, 2)").replace("[4,1]", "[4,2]"))
    r = run(["diff", str(a), str(b)])
    assert r.exit_code == 1, r.output


def test_text_diff():
    assert text_diff("x\ny\n", "x\ny\n") == ""
    d = text_diff("x\ny\n", "x\nz\n", "A", "B")
    assert d.startswith("--- A\n+++ B\n") and "-y" in d and "+z" in d


_BINDER = re.compile(r"(?<![\w.'\"=])([a-z]+):(?=[a-zA-Z])")


def _rename(text: str, rng: random.Random) -> str:
    """Rename every variable by a consistent permutation of the names used as binders."""
    names = sorted(set(_BINDER.findall(text)))
    perm = names[:]
    rng.shuffle(perm)
    mapping = dict(zip(names, perm))
    token = re.compile(r"(?<![\w.'\"=<>{])([a-z]+)(?![\w=\[(.'\"<>])")
    return token.sub(lambda m: mapping.get(m.group(1), m.group(1)), text)


@needs_corpus
def test_diff_renamed_corpus_copies(tmp_path):
    rng = random.Random(0)
    tested = 0
    for f in corpus_files("jax-0.10.2"):
        text = f.read_text()
        if "=" not in text or "let " in text.split("{", 1)[0]:
            continue
        renamed = _rename(text, rng)
        if renamed == text:
            continue
        try:
            ja = parse(text, str(f)).jaxpr
            jb = parse(renamed, "renamed").jaxpr
        except Exception:
            continue  # the substitution hit something that is not a variable: not a test
        if not alpha_equal(ja, jb):
            continue  # likewise (a name inside a parameter value)
        out = tmp_path / f.name
        out.write_text(renamed)
        r = run(["diff", str(f), str(out)])
        assert r.exit_code == 0, (f.name, r.output)
        tested += 1
    assert tested >= 40, tested


@needs_corpus
def test_diff_real_change_corpus(tmp_path):
    changed = 0
    for f in corpus_files("jax-0.10.2")[:60]:
        text = f.read_text()
        for old, new in ((" sin ", " cos "), (" mul ", " add "), ("2.0:f32[]", "3.0:f32[]")):
            if old in text:
                out = tmp_path / f.name
                out.write_text(text.replace(old, new, 1))
                r = run(["diff", str(f), str(out)])
                assert r.exit_code == 1, (f.name, r.output)
                assert r.stdout.count("\n-") >= 1 and r.stdout.count("\n+") >= 1
                changed += 1
                break
    assert changed >= 5


# ---------------------------------------------------------------- stats


def test_stats_golden():
    j = parse((GOLDEN / "stats.jaxpr").read_text(), "stats").jaxpr
    s = stats(j)
    # worked by hand from the types: dot 2*M*N*K = 2*2*4*3, sin 8, reduce_sum 8 (input), mul 8
    assert s["flops"] == 48 + 8 + 8 + 8
    assert s["equations"] == 5 and s["by_primitive"]["mul"] == 1 and s["depth"] == 1
    assert (s["inputs"], s["outputs"], s["constvars"]) == (2, 2, 0)
    assert s["residuals"] == 1 and s["residual_bytes"] == 32
    # bytes: dot 24+48+32, sin 32+32, reduce_sum 32+4, mul 32*3
    assert s["bytes"] == 104 + 64 + 36 + 96
    assert s["bytes_in"] == 72 and s["bytes_out"] == 36


def test_stats_cli_json_and_text():
    r = run(["stats", "--json", str(GOLDEN / "stats.jaxpr")])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["flops"] == 72 and d["by_primitive"]["dot_general"] == 1
    r = run(["stats", str(GOLDEN / "stats.jaxpr")])
    assert r.exit_code == 0 and "equations: 5" in r.stdout and "dot_general" in r.stdout


@needs_corpus
def test_stats_conv_and_scan():
    from conftest import CORPUS

    j = parse((CORPUS / "jax-0.10.2" / "conv2d.jaxpr").read_text(), "conv").jaxpr
    # 2 * out elements * window * in features / groups: 2*512*27 + 2*72*27 + 2*384*27
    assert stats(j)["flops"] == 2 * 27 * (512 + 72 + 384)
    j = parse((CORPUS / "jax-0.10.2" / "scan.jaxpr").read_text(), "scan").jaxpr
    s = stats(j)
    # first scan: body mul, add, tanh on f32[4], 10 iterations: 3*4*10
    assert s["flops"] >= 120 and s["depth"] == 1


@needs_corpus
@pytest.mark.parametrize("sub", ["jax-0.10.2", "jax-0.12.0.1"])
def test_stats_whole_corpus(sub):
    for f in corpus_files(sub):
        s = stats(parse(f.read_text(), str(f)).jaxpr)
        assert s["equations"] >= 0 and s["flops"] >= 0
        json.dumps(s)


def test_stats_counts_are_shown_once_unless_rounding_helps():
    """`estimated flops: 601`, not `601 (601)`; a large count also gets its rounded form.
    mlp's 601 by hand: its two matmuls 2*5*4*8 + 2*5*8*2 = 480, then add and tanh on 5x8
    (80), add, sub and integer_pow on 5x2 (30), the 10-element sum (10) and the division (1)."""
    from jaxprtool.ui.stats import render_text

    r = run(["stats", str(Path(__file__).resolve().parents[1] / "samples" / "mlp.jaxpr")])
    line = r.stdout.splitlines()[3]
    assert re.fullmatch(
        r"estimated flops: 601  bytes accessed: \d+B \(\d\.\dKB\)  in: \d+B  out: 4B", line
    )
    s = {
        "equations": 1, "depth": 0, "inputs": 1, "outputs": 1, "constvars": 0, "residuals": 0,
        "residual_bytes": 0, "while_loops": 0, "flops": 1234567, "bytes": 999, "bytes_in": 4,
        "bytes_out": 4, "by_primitive": {"sin": 1},
    }  # fmt: skip
    assert render_text(s).splitlines()[2] == (
        "estimated flops: 1234567 (1.2M)  bytes accessed: 999B  in: 4B  out: 4B"
    )
