"""The printer: byte-identical re-printing of JAX's text, round trips, layout, styles, `fmt`.

JAX is the oracle throughout: the corpus files and tests/golden/printer/ were
printed by JAX; live programs are printed by the installed JAX in-process; the
layout engine is compared with `jax._src.pretty_printer` on random documents.
"""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner
from conftest import CORPUS, corpus_files, needs_corpus
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jaxprtool import core
from jaxprtool.cli import main
from jaxprtool.core import Eqn, Jaxpr, Literal, ShapedArray, Var, alpha_equal
from jaxprtool.params import Opaque
from jaxprtool.record import prim
from jaxprtool.text import pretty
from jaxprtool.text.parser import parse
from jaxprtool.text.printer import encode_name, print_jaxpr
from jaxprtool.text.style import DEFAULT_STYLE, Style, detect_style, scan_counts

GOLDEN = __import__("pathlib").Path(__file__).resolve().parent / "golden" / "printer"
AMBIGUOUS = "dropvar_name_aliasing_ambiguity.jaxpr"
# files whose JAX text uses `_` inside nested jaxprs (FORMAT.md §2): re-printed with fresh names
AMBIGUOUS_OLDER = {AMBIGUOUS}
H3 = "debug_print_newline_in_fmt.jaxpr"


def fmt(text: str, *args: str) -> tuple[int, str]:
    r = CliRunner().invoke(main, ["fmt", "-", *args], input=text)
    return r.exit_code, r.stdout


def reprint(text: str, path: str = "<t>", width: int = 80) -> tuple[core.Jaxpr, str]:
    j = parse(text, path).jaxpr
    return j, print_jaxpr(j, detect_style(j), width)


def _ids(files):
    return [p.name for p in files]


# ---------------------------------------------------------------- corpus: byte-identical

CURRENT = [
    p for v in ("jax-0.10.2", "jax-0.12.0.1") for p in corpus_files(v) if p.name != AMBIGUOUS
]


@needs_corpus
@pytest.mark.parametrize("path", CURRENT, ids=[f"{p.parent.name}/{p.name}" for p in CURRENT])
def test_corpus_byte_identical(path):
    text = path.read_text()
    try:
        _, out = reprint(text, str(path))
    except core.JaxprError as e:
        if path.name == H3:
            pytest.skip(f"H3 file is not parseable in general: {e}")
        raise
    assert out + "\n" == text


@needs_corpus
@pytest.mark.parametrize("version", ["jax-0.10.2", "jax-0.12.0.1"])
def test_corpus_through_fmt_command(version):
    for path in corpus_files(version)[:25]:
        if path.name == AMBIGUOUS:
            continue
        code, out = fmt(path.read_text())
        assert code == 0, (path.name, out)
        assert out == path.read_text(), path.name


OLDER = [p for v in ("jax-0.4.35", "jax-0.6.2", "jax-0.7.2") for p in corpus_files(f"older/{v}")]
DUMPS = sorted((CORPUS / "dump").glob("*/*.jaxpr.txt")) if CORPUS.is_dir() else []


@needs_corpus
@pytest.mark.parametrize(
    "path", OLDER + DUMPS, ids=[f"{p.parent.name}/{p.name}" for p in OLDER + DUMPS]
)
def test_older_and_dumps_round_trip(path):
    text = path.read_text()
    try:
        j, out = reprint(text, str(path))
    except core.JaxprError as e:
        if path.name == H3:
            pytest.skip(f"H3 file: {e}")
        raise
    assert alpha_equal(parse(out, "<printed>").jaxpr, j)
    # and the detected style reproduces the text itself, except where JAX's own text is
    # ambiguous (then fresh names) and for colour escapes (tty dumps)
    if path.name not in AMBIGUOUS_OLDER and "\x1b" not in text:
        assert out == text.rstrip("\n")


@needs_corpus
@pytest.mark.parametrize(
    "version", ["jax-0.10.2", "jax-0.12.0.1", "older/jax-0.7.2", "older/jax-0.6.2"]
)
def test_ambiguous_underscore_file(version):
    path = CORPUS / version / AMBIGUOUS
    if not path.exists():
        pytest.skip("file absent")
    text = path.read_text()
    j, out = reprint(text)
    assert alpha_equal(parse(out, "<printed>").jaxpr, j)
    assert out != text.rstrip("\n")  # JAX's text reads back as a different program
    # it differs from JAX's text only where JAX printed `_` and the tool a fresh name
    tok = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|\S")
    a, b = tok.findall(text), tok.findall(out)
    assert len(a) == len(b)
    in_names = set(a)
    for x, y in zip(a, b):
        if x != y:
            assert x == "_" and re.fullmatch(r"[a-z]+", y) and y not in in_names, (x, y)
    # JAX's text warns (a use of `_` after two `_` bindings); the tool's reads unambiguously
    assert parse(text, "<jax>").warnings
    assert not parse(out, "<printed>").warnings


@needs_corpus
@pytest.mark.parametrize(
    "name,width",
    [("width_40.jaxpr", 40), ("width_200.jaxpr", 200), ("default_for_comparison.jaxpr", 80)],
)
def test_width_variants(name, width):
    path = CORPUS / "variants" / name
    code, out = fmt(path.read_text(), "--width", str(width))
    assert code == 0, out
    assert out == path.read_text()


@needs_corpus
def test_print_effects_variant():
    text = (CORPUS / "variants" / "print_effects.jaxpr").read_text()
    assert reprint(text)[1] + "\n" == text


# ---------------------------------------------------------------- golden edge cases (from JAX)

GOLDEN_FILES = sorted(GOLDEN.glob("*.w*.jaxpr"))


@pytest.mark.parametrize("path", GOLDEN_FILES, ids=_ids(GOLDEN_FILES))
def test_golden_layout(path):
    width = int(re.search(r"\.w(\d+)\.jaxpr$", path.name).group(1))
    code, out = fmt(path.read_text(), "--width", str(width))
    assert code == 0, out
    assert out == path.read_text()


# ---------------------------------------------------------------- live programs, JAX as oracle


def _live_programs():
    import jax
    import jax.numpy as jnp
    from jax import lax

    def nested(x, y):
        @jax.jit
        def g(a, b):
            return jnp.sin(a) * b, a + 1.0

        u, v = g(x, y)
        w, _ = g(u, 2.0 * y)
        return jnp.sum(w) + v[0]

    def scan(x):
        return lax.scan(lambda c, xi: (c * 0.5 + xi, jnp.tanh(c)), x[0], x)

    def grad_where(x):
        return jax.grad(lambda z: jnp.sum(jnp.where(z > 0, z**3, jnp.exp(z))))(x)

    def loops(x):
        return lax.fori_loop(0, 5, lambda i, c: c + i * jnp.sin(c), x), jnp.linalg.norm(x)

    def cond(p, x):
        return lax.cond(p > 0, lambda a: a * 2, lambda a: jnp.cos(a) + 1, x)

    one = jnp.ones(3)
    return [
        (nested, (one, one)),
        (scan, (jnp.ones((7, 4)),)),
        (grad_where, (jnp.ones(5),)),
        (loops, (one,)),
        (cond, (1.0, one)),
    ]


@pytest.mark.parametrize("width", [12, 30, 55, 80, 133])
def test_live_programs_all_widths(width):
    import jax

    for fn, args in _live_programs():
        expected = jax.make_jaxpr(fn)(*args).pretty_print(width=width, use_color=False)
        j = parse(expected, fn.__name__).jaxpr
        assert print_jaxpr(j, DEFAULT_STYLE, width) == expected, (fn.__name__, width)


# ---------------------------------------------------------------- the layout engine vs JAX's


def _docs(draw_tree):
    from jax._src import pretty_printer as J

    def build(t):
        kind = t[0]
        if kind == "text":
            return pretty.text(t[1]), J.text(t[1])
        if kind == "brk":
            return pretty.brk(t[1]), J.brk(t[1])
        if kind == "group":
            a, b = build(t[1])
            return pretty.group(a), J.group(b)
        if kind == "nest":
            a, b = build(t[2])
            return pretty.nest(t[1], a), J.nest(t[1], b)
        if kind == "fill":
            items, sep = list(t[1]), t[2]
            jdoc = J.nest(
                2, J.group(J.join(J.text(sep) + J.group(J.brk()), [J.text(i) for i in items]))
            )
            return pretty.fill(items, sep), jdoc
        kids = [build(c) for c in t[1]]
        return pretty.concat([a for a, _ in kids]), J.concat([b for _, b in kids])

    return build(draw_tree)


_tree = st.recursive(
    st.one_of(
        st.tuples(
            st.just("text"),
            st.sampled_from(["", "a", "bcd ef", "x" * 17, "é名", "l1\nl2", "{ lambda "]),
        ),
        st.tuples(st.just("brk"), st.sampled_from([" ", "", "; "])),
        st.tuples(
            st.just("fill"),
            st.lists(st.sampled_from(["a:f32[3]", "bc", "é名", "x" * 11]), max_size=8),
            st.sampled_from(["", ","]),
        ),
    ),
    lambda kids: st.one_of(
        st.tuples(st.just("group"), kids),
        st.tuples(st.just("nest"), st.integers(0, 4), kids),
        st.tuples(st.just("concat"), st.lists(kids, max_size=5)),
    ),
    max_leaves=40,
)


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(tree=_tree, width=st.sampled_from([1, 5, 10, 20, 40, 80]))
def test_layout_engine_matches_jax(tree, width):
    """100 documents in `make test` (twice: the Python path's run too); 1,000 in `make
    test-full` (the `_many` test below)."""
    _layout_matches_jax(tree, width)


@pytest.mark.slow
@settings(max_examples=1_000, deadline=None, suppress_health_check=list(HealthCheck))
@given(tree=_tree, width=st.sampled_from([1, 5, 10, 20, 40, 80]))
def test_layout_engine_matches_jax_many(tree, width):
    _layout_matches_jax(tree, width)


def _layout_matches_jax(tree, width):
    ours, theirs = _docs(tree)
    assert pretty.format(ours, width) == theirs.format(width, use_color=False)


# ---------------------------------------------------------------- IR built by the tool


F3 = ShapedArray((3,), "f32")
F23 = ShapedArray((2, 3), "f32")


def test_names_counter():
    assert [encode_name(i) for i in (0, 25, 26, 27, 675, 676)] == [
        "a",
        "z",
        "ba",
        "bb",
        "zz",
        "baa",
    ]


def test_the_printers_names_are_the_counter():
    # the printer takes its names from chunks of concatenations, not from encode_name
    from jaxprtool.text.printer import _NAMES, _grow_names

    n = 20_000  # past the widths 1, 2 and 3 (26 + 650 + 16900 names)
    _grow_names(n)
    assert _NAMES[:n] == [encode_name(i) for i in range(n)]


def test_full_params_elided_like_jax():
    """Equations built with JAX's full parameter sets print as JAX prints them."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    def f(x, y):
        b = lax.broadcast_in_dim(x, (2, 3), (1,))
        return lax.dot_general(b, y, (((1,), (0,)), ((), ()))), jnp.sin(x) * x

    expected = str(jax.make_jaxpr(f)(jnp.ones(3), jnp.ones((3, 3))))
    x, y = Var(F3), Var(ShapedArray((3, 3), "f32"))
    b, d, s, m = Var(F23), Var(F23), Var(F3), Var(F3)
    eqns = [
        Eqn(
            "broadcast_in_dim",
            (x,),
            (b,),
            {"shape": (2, 3), "broadcast_dimensions": (1,), "sharding": None},
        ),
        Eqn(
            "dot_general",
            (b, y),
            (d,),
            {
                "dimension_numbers": (((1,), (0,)), ((), ())),
                "precision": None,
                "preferred_element_type": None,
                "out_sharding": None,
            },
        ),
        Eqn("sin", (x,), (s,), {"accuracy": None}),
        Eqn("mul", (s, x), (m,), {"out_dtype": None}),
    ]
    j = Jaxpr((), (x, y), tuple(eqns), (d, m))
    assert print_jaxpr(j) == expected


def _jit_eqn(inner: Jaxpr, ins, outs, name="g"):
    return Eqn("jit", tuple(ins), tuple(outs), {"name": name, "jaxpr": inner})


def test_underscore_used_inside_nested_as_jax_prints_it():
    """An outer result that is unused (`_`) whose inner counterpart is used inside: `_`, as
    JAX prints it (bound once in the inner jaxpr, so the use reads back unambiguously)."""
    a, t, u, v = Var(F3), Var(F3), Var(F3), Var(F3)
    inner = Jaxpr((), (a,), (Eqn("sin", (a,), (t,), {}), Eqn("cos", (t,), (u,), {})), (t, u))
    x, r1, r2 = Var(F3), Var(F3), Var(F3)
    top = Jaxpr((), (x,), (_jit_eqn(inner, [x], [r1, r2]), Eqn("neg", (r2,), (v,), {})), (v,))
    out = print_jaxpr(top)
    assert "_:f32[3] = sin a\n          b:f32[3] = cos _\n        in (_, b) }" in out
    assert "_:f32[3] b:f32[3] = jit" in out  # the outer binder stays `_`, as JAX prints it
    back = parse(out, "<printed>").jaxpr
    assert alpha_equal(back, top)


def test_shadowed_suggestion_gets_fresh_name():
    """Two different inner vars suggested the name `_`, one used after the other is bound."""
    a, t1, t2, w = Var(F3), Var(F3), Var(F3), Var(F3)
    inner = Jaxpr(
        (),
        (a,),
        (Eqn("sin", (a,), (t1,), {}), Eqn("cos", (a,), (t2,), {}), Eqn("add", (t1, t2), (w,), {})),
        (t1, t2, w),
    )
    x, r1, r2, r3 = Var(F3), Var(F3), Var(F3), Var(F3)
    top = Jaxpr((), (x,), (_jit_eqn(inner, [x], [r1, r2, r3]),), (r3,))
    out = print_jaxpr(top)
    assert alpha_equal(parse(out, "<printed>").jaxpr, top)


def test_shared_by_identity_and_large_bodies():
    a, b = Var(F3), Var(F3)
    small = Jaxpr((), (a,), (Eqn("sin", (a,), (b,), {}),), (b,))
    x, y, z = Var(F3), Var(F3), Var(F3)
    top = Jaxpr(
        (),
        (x,),
        (_jit_eqn(small, [x], [y], "<lambda>"), _jit_eqn(small, [y], [z], "<lambda>")),
        (z,),
    )
    out = print_jaxpr(top)
    assert out.startswith("let lambda = { lambda ; a:f32[3]. let b:f32[3] = sin a in (b,) } in\n")
    assert "jit[name=<lambda> jaxpr=lambda] c" in out
    assert alpha_equal(parse(out, "<p>").jaxpr, top)
    # > 10 equations: hoisted in 0.10+, inline in 0.7.2
    vs = [Var(F3) for _ in range(12)]
    big = Jaxpr(
        (), (vs[0],), tuple(Eqn("sin", (vs[i],), (vs[i + 1],), {}) for i in range(11)), (vs[11],)
    )
    p, q = Var(F3), Var(F3)
    top2 = Jaxpr((), (p,), (_jit_eqn(big, [p], [q], "body"),), (q,))
    assert print_jaxpr(top2).startswith("let body = ")
    assert print_jaxpr(top2, Style.parse("0.7.2")).startswith("{ lambda")


def test_styles_literals_and_call_name():
    x, y = Var(F3), Var(F3)
    a, b = Var(F3), Var(F3)
    inner = Jaxpr(
        (), (a,), (Eqn("add", (a, Literal(1.0, ShapedArray((), "f32"))), (b,), {}),), (b,)
    )
    top = Jaxpr((), (x,), (_jit_eqn(inner, [x], [y]),), (y,))
    new = print_jaxpr(top)
    old = print_jaxpr(top, Style.parse("0.4.35"))
    assert "jit[" in new and "add a 1.0:f32[]" in new
    assert "pjit[" in old and "add c 1.0 in" in old  # no literal type, no name suggestion
    assert detect_style(parse(old, "<old>").jaxpr).version == (0, 4, 35)
    assert alpha_equal(parse(new, "<p>").jaxpr, top)


def test_state_equations_print_as_jax():
    r = Var(core.RefType(F3))
    i = Var(ShapedArray((), "i32"))
    v, g = Var(ShapedArray((), "f32")), Var(ShapedArray((), "f32"))
    idx = {"indexer": Opaque("[$0]")}
    eqns = (
        Eqn("get", (r, i), (g,), idx),
        Eqn("swap", (r, g, i), (Var(ShapedArray((), "f32"), "_"),), idx),
        Eqn("addupdate", (r, v, i), (), idx),
    )
    j = Jaxpr((), (r, i, v), eqns, ())
    out = print_jaxpr(j)
    assert "    d:f32[] <- a[b]\n    a[b] <- d\n    a[b] += c\n" in out
    assert alpha_equal(parse(out, "<p>").jaxpr, j)


# ---------------------------------------------------------------- styles


def test_style_parse():
    assert Style.parse("0.4.35").version == (0, 4, 35)
    assert Style.parse("jax-0.12").scan_ft
    assert not Style.parse("0.10.2").scan_ft and Style.parse("0.10.2").hoist_large
    jit_name = prim("jit").print_name  # what each style prints for jit (its record's rule)
    assert jit_name(None, Style.parse("0.6.2")) == "pjit"
    assert jit_name(None, Style.parse("0.7.2")) == "jit"
    for bad in ("x", "1..2", ""):
        with pytest.raises(ValueError):
            Style.parse(bad)


def test_scan_params_both_encodings():
    c, x, h, y = Var(F3), Var(F3), Var(F3), Var(F3)
    body = Jaxpr((), (c, x), (Eqn("add", (c, x), (h,), {}), Eqn("sin", (h,), (y,), {})), (h, y))
    for style in (Style.parse("0.10.2"), Style.parse("0.12"), Style.parse("0.7.2")):
        p = style.scan_params(jaxpr=body, length=10, num_consts=0, num_carry=1)
        assert scan_counts(p) == (0, 1)
        a, xs, o1, o2 = (
            Var(F3),
            Var(ShapedArray((10, 3), "f32")),
            Var(F3),
            Var(ShapedArray((10, 3), "f32")),
        )
        top = Jaxpr((), (a, xs), (Eqn("scan", (a, xs), (o1, o2), p),), (o1, o2))
        out = print_jaxpr(top, style)
        assert alpha_equal(parse(out, "<p>").jaxpr, top)
    # the 0.12 encoding is exactly what JAX prints for this scan
    assert "ft_out=((None,), (RightsOnly(Right(None)),))" in print_jaxpr(
        Jaxpr(
            (),
            (a, xs),
            (
                Eqn(
                    "scan",
                    (a, xs),
                    (o1, o2),
                    Style.parse("0.12").scan_params(
                        jaxpr=body, length=10, num_consts=0, num_carry=1
                    ),
                ),
            ),
            (o1, o2),
        )
    )


@needs_corpus
def test_scan_counts_on_corpus():
    for version in ("jax-0.10.2", "jax-0.12.0.1"):
        text = (CORPUS / version / "scan.jaxpr").read_text()
        (e,) = [e for e in core.all_eqns(parse(text, "s").jaxpr) if e.prim == "scan"]
        assert scan_counts(e.params) == (0, 1)


@needs_corpus
def test_detect_style_per_version():
    expect = {
        "older/jax-0.4.35": (0, 4, 35),
        "older/jax-0.6.2": (0, 6, 2),
        "jax-0.12.0.1": (0, 12, 0, 1),
    }
    for version, v in expect.items():
        text = (CORPUS / version / "jit_nested.jaxpr").read_text()
        got = detect_style(parse(text, "j").jaxpr).version
        if version == "jax-0.12.0.1":
            assert got >= (0, 10)  # nothing distinguishes 0.10.2 from 0.12 here: same text
        else:
            assert got == v, version


# ---------------------------------------------------------------- fmt command


def test_fmt_output_file_and_errors(tmp_path):
    src = tmp_path / "f.jaxpr"
    src.write_text("{ lambda ; a:f32[3]. let b:f32[3] = sin a in (b,) }\n")
    out = tmp_path / "o.jaxpr"
    r = CliRunner().invoke(main, ["fmt", str(src), "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert out.read_text() == src.read_text()
    r = CliRunner().invoke(main, ["--jax-style", "0.4.35", "fmt", str(src)])
    assert r.exit_code == 0 and r.output == src.read_text()
    r = CliRunner().invoke(main, ["--jax-style", "nope", "fmt", str(src)])
    assert r.exit_code == 2
    bad = tmp_path / "bad.jaxpr"
    bad.write_text("{ lambda ; a:f32[3]. let b:f32[3] = sin zz in (b,) }\n")
    r = CliRunner().invoke(main, ["fmt", str(bad), "-o", str(tmp_path / "x.jaxpr")])
    assert r.exit_code == 1 and re.search(r"bad\.jaxpr:1:\d+: error: ", r.output)
    assert not (tmp_path / "x.jaxpr").exists()


def test_fmt_help_has_example():
    r = CliRunner().invoke(main, ["fmt", "--help"])
    assert r.exit_code == 0 and "Example" in r.output and "--width" in r.output


def test_fmt_does_not_import_jax(tmp_path):
    import subprocess
    import sys

    src = tmp_path / "f.jaxpr"
    src.write_text("{ lambda ; a:f32[3]. let b:f32[3] = sin a in (b,) }\n")
    code = (
        "import sys; from jaxprtool.cli import main\n"
        "try:\n    main(['fmt', sys.argv[1]])\nexcept SystemExit:\n    pass\n"
        "assert 'jax' not in sys.modules, 'fmt imported jax'\n"
    )
    r = subprocess.run([sys.executable, "-c", code, str(src)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout == src.read_text()


def test_untyped_nan_literal_not_captured_by_a_variable_named_nan():
    """Past ~5750 variables a variable can be called `nan`: a bare `nan` literal would read as it."""
    import math

    t = ShapedArray((), "f32")
    x = Var(t)
    env, eqns = [x], []
    for _ in range(9000):
        o = Var(t)
        eqns.append(Eqn("max", (env[-1], Literal(math.nan, t, typed=False)), (o,), {}))
        env.append(o)
    j = Jaxpr((), (x,), tuple(eqns), (env[-1],))
    for style in (Style.parse("0.4.35"), DEFAULT_STYLE):
        out = print_jaxpr(j, style)
        assert alpha_equal(parse(out, "<p>").jaxpr, j)
