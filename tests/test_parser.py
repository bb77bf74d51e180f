"""The parser: the reference corpus, layout edge cases, typed values, located errors."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

import numpy as np
import pytest
from conftest import CORPUS, corpus_files, needs_corpus

from jaxprtool import core, params
from jaxprtool.core import JaxprError, Literal, OpaqueType, RefType, ShapedArray
from jaxprtool.text.parser import parse

# ---------------------------------------------------------------- helpers

NO_TYPES = "jaxpr has no types (printed with print_shapes=False); a typed IR cannot be built"


def all_files() -> list:
    files = []
    for sub in (
        "jax-0.10.2",
        "jax-0.12.0.1",
        "older/jax-0.4.35",
        "older/jax-0.6.2",
        "older/jax-0.7.2",
        "variants",
    ):
        files += corpus_files(sub)
    files += sorted((CORPUS / "dump").glob("**/*.jaxpr.txt")) if CORPUS.is_dir() else []
    return files


def _has_jaxpr(v) -> bool:
    return any(True for _ in core.subjaxprs(v))


def all_jaxprs(j: core.Jaxpr):
    """Every jaxpr object reachable from j (each once)."""
    seen = {}
    stack = [j]
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen[id(x)] = x
        for e in x.eqns:
            stack.extend(core.eqn_subjaxprs(e))
    return list(seen.values())


def one(text: str) -> core.Jaxpr:
    r = parse(text, "t.jaxpr")
    assert r.warnings == []
    return r.jaxpr


def error_of(text: str) -> str:
    with pytest.raises(JaxprError) as ei:
        parse(text, "t.jaxpr")
    e = ei.value
    return f"{e.loc.line}:{e.loc.col}: {e.message}"


# ---------------------------------------------------------------- the corpus


@needs_corpus
# ids given with each case, not as a function: pytest before 8.4 calls that function on its
# NOTSET placeholder where there is no case (no corpus)
@pytest.mark.parametrize(
    "path", [pytest.param(p, id=str(p.relative_to(CORPUS))) for p in all_files()]
)
def test_corpus_file_parses(path):
    text = path.read_text()
    name = path.name
    if name == "print_shapes_false.jaxpr":
        with pytest.raises(JaxprError) as ei:
            parse(text, str(path))
        assert ei.value.message == NO_TYPES
        assert (ei.value.loc.line, ei.value.loc.col) == (1, 24)
        return
    r = parse(text, str(path))
    if name == "dropvar_name_aliasing_ambiguity.jaxpr" and "jax-0.4.35" not in str(path):
        assert r.warnings and all("'_'" in w.message for w in r.warnings)
        # `mul _` reads the only `_` bound so far; `cos _` comes after a second one
        assert (r.warnings[0].loc.line, r.warnings[0].loc.col) == (7, 26)
    elif not any(x in str(path) for x in ("jnp_misc_highlevel",)):
        assert r.warnings == [], [str(w) for w in r.warnings]
    if "\x1b" in text or "# " in text or "_LinearSolveTuple(matvec={" in text:
        return  # (H5 prints some definitions twice: see test_linear_solve_record_holds_jaxprs)
    if "jax-0.4.35" in str(path) and name == "jnp_misc_highlevel.jaxpr":
        return  # 0.4.35 printed `_where3` both inline and as an unreferenced definition
    # every binder of the text became exactly one Var (checks the layout rule and the scoping)
    binders = sum(
        len(j.constvars) + len(j.invars) + sum(len(e.outputs) for e in j.eqns)
        for j in all_jaxprs(r.jaxpr)
    )
    set_form = sum(
        1
        for e in core.all_eqns(r.jaxpr)
        if e.prim == "swap" and e.outputs[0].hint == "_" and " <- " in text
    )
    printed = len(re.findall(r"(?<![\w.])(?:[a-z]+_?|_):(?=[A-Za-z])", text)) - len(
        re.findall(r"(?<![\w.])-?(?:inf|nan):(?=[a-z])", text)
    )
    # shared definitions print once but may be referenced many times: count distinct objects
    assert binders - set_form == printed


@needs_corpus
def test_debug_print_newline_in_fmt_is_read_by_the_broken_layout():
    r = parse((CORPUS / "jax-0.10.2" / "debug_print_newline_in_fmt.jaxpr").read_text())
    (e,) = r.jaxpr.eqns
    assert e.prim == "debug_print" and e.outputs == ()
    assert e.params["fmt"] == "line1\nline2 ] {} [ x=y"
    assert e.params["has_placeholders"] is True


def _param_texts(paths):
    for path in paths:
        if path.name == "debug_print_newline_in_fmt.jaxpr":
            continue
        text = path.read_text()
        j = parse(text, str(path)).jaxpr
        for e in core.all_eqns(j):
            for k, v in e.params.items():
                if e.prim in ("get", "swap", "addupdate") or _has_jaxpr(v):
                    continue
                yield path, text, e, k, v


@needs_corpus
def test_every_param_formats_back_to_its_text():
    """format_value(parsed value) is the printed text, for every non-jaxpr parameter."""
    n = 0
    kinds = set()
    for path, text, e, k, v in _param_texts(
        corpus_files("jax-0.10.2") + corpus_files("jax-0.12.0.1")
    ):
        assert f"{k}={params.format_value(v)}" in text, (path.name, e.prim, k, v)
        assert (
            not isinstance(v, str) or k in ("name", "fmt") or re.fullmatch(r"<?[^\W\d][\w<>]*", v)
        ), (k, v)
        n += 1
        kinds.add(type(v).__name__)
    assert n > 5000
    assert {
        "int",
        "tuple",
        "list",
        "bool",
        "NoneType",
        "str",
        "Record",
        "EnumValue",
        "Opaque",
        "float",
    } <= kinds


@needs_corpus
def test_literals_repr_back_to_their_text():
    for path in corpus_files("jax-0.10.2") + corpus_files("jax-0.12.0.1"):
        text = path.read_text()
        j = parse(text, str(path)).jaxpr
        for x in all_jaxprs(j):
            atoms = list(x.outvars) + [a for e in x.eqns for a in e.inputs]
            for a in atoms:
                if isinstance(a, Literal):
                    assert a.typed
                    shown = {"float0": "(b'',)", Ellipsis: "[...]"}.get(a.value, None) or repr(
                        a.value
                    )
                    assert f"{shown}:{a.type}" in text, (path.name, a)


@needs_corpus
def test_width_and_colour_variants_are_the_same_program():
    v = CORPUS / "variants"
    base = parse((v / "width_200.jaxpr").read_text()).jaxpr
    for name in ("width_40.jaxpr", "use_color_ansi.jaxpr", "source_info_name_stack.jaxpr"):
        assert core.alpha_equal(base, parse((v / name).read_text()).jaxpr), name
    crlf = (v / "width_40.jaxpr").read_text().replace("\n", "\r\n")
    assert core.alpha_equal(base, parse(crlf).jaxpr)
    j = parse(
        (CORPUS / "jax-0.10.2" / "debug_print_callback.jaxpr").read_text().replace("\n", "\r\n")
    ).jaxpr
    assert all(
        "\r" not in v for e in core.all_eqns(j) for v in e.params.values() if isinstance(v, str)
    )


@needs_corpus
def test_print_effects():
    j = parse((CORPUS / "variants" / "print_effects.jaxpr").read_text()).jaxpr
    assert j.effects == ("OrderedIO", "Debug")
    assert (
        parse((CORPUS / "variants" / "default_for_comparison.jaxpr").read_text()).jaxpr.effects
        is None
    )


@needs_corpus
def test_forward_referenced_shared_jaxpr_is_one_object():
    text = (CORPUS / "jax-0.10.2" / "ew_binary_f32.jaxpr").read_text()
    j = parse(text).jaxpr
    # `hypot` (defined first) refers to `_where` twice; a jit nested in the main jaxpr once more
    hypot = next(
        e.params["jaxpr"] for e in j.eqns if e.prim == "jit" and e.params["name"] == "hypot"
    )
    where = [
        e.params["jaxpr"]
        for e in core.all_eqns(j)
        if e.prim == "jit" and e.params["name"] == "_where"
    ]
    shared = next(w for w in where if [v.hint for v in w.invars] == ["w", "x", "y"])
    # three references to the shared `_where`, one inline jaxpr also named `_where`
    assert sum(w is shared for w in where) == 3 and len(where) == 4
    assert sum(e.params.get("jaxpr") is shared for e in hypot.eqns) == 2
    assert text.index("let hypot") < text.index("let _where")


@needs_corpus
def test_linear_solve_record_holds_jaxprs():
    j = parse((CORPUS / "jax-0.10.2" / "custom_linear_solve.jaxpr").read_text()).jaxpr
    (cls,) = [e for e in core.all_eqns(j) if e.prim == "custom_linear_solve"][:1]
    rec = cls.params["jaxprs"]
    assert isinstance(rec, params.Record) and rec.cls == "_LinearSolveTuple"
    assert [k for k, _ in rec.fields] == ["matvec", "vecmat", "solve", "transpose_solve"]
    assert all(isinstance(v, core.Jaxpr) for _, v in rec.fields)
    # names restart at `a` inside each str()-ed jaxpr
    assert rec["matvec"].invars[0].hint == "a"
    # transpose_solve had its own `let _lu_solve = ... in`: its jit refers to that local definition
    (inner,) = rec["transpose_solve"].eqns
    assert inner.prim == "jit" and len(inner.params["jaxpr"].eqns) > 10
    assert cls.params["const_lengths"] == params.Record(
        "_LinearSolveTuple", (("matvec", 1), ("vecmat", 1), ("solve", 2), ("transpose_solve", 2))
    )


@needs_corpus
def test_types_of_the_corpus():
    def types(path):
        j = parse((CORPUS / path).read_text()).jaxpr
        return [
            v.type
            for x in all_jaxprs(j)
            for v in list(x.invars) + [o for e in x.eqns for o in e.outputs]
        ]

    assert ShapedArray((), "key<fry>") in types("jax-0.10.2/random_legacy_uint32_key.jaxpr")
    sharded = [
        t
        for t in types("jax-0.10.2/explicit_sharding_types.jaxpr")
        if any("@" in str(d) for d in t.shape)
    ]
    assert sharded and all(isinstance(d, (int, str)) for t in sharded for d in t.shape)
    poly = types("jax-0.10.2/shape_poly_dim_expressions.jaxpr")
    assert any(t.shape == ("2*b - 1",) for t in poly) and any(
        t.shape == ("floordiv(b, 3)", 2) for t in poly
    )
    vma = [t for t in types("jax-0.10.2/shard_map_vma.jaxpr") if t.vma]
    assert ShapedArray((2, 2), "f32", vma="V:(x,y)") in vma
    refs = [t for t in types("jax-0.10.2/pallas_interpret.jaxpr") if isinstance(t, RefType)]
    assert RefType(ShapedArray((4, 8), "f32"), "default") in refs
    old = types("older/jax-0.6.2/pallas_interpret.jaxpr")
    assert OpaqueType("MemRef<None>{float32[4,8]}") in old


@needs_corpus
def test_untyped_literals_of_jax_0_4_35():
    j = parse((CORPUS / "older" / "jax-0.4.35" / "ad_grad_int_float0.jaxpr").read_text()).jaxpr
    lits = [
        a for x in all_jaxprs(j) for a in list(x.outvars) + [i for e in x.eqns for i in e.inputs]
    ]
    lits = [a for a in lits if isinstance(a, Literal)]
    assert lits and all(not a.typed for a in lits)
    assert any(a.value == "float0" for a in lits)


# ---------------------------------------------------------------- layout edge cases


def test_single_line_and_semicolons():
    j = one("{ lambda ; a:f32[2]. let b:f32[2] = sin a; c:f32[2] = mul b 2.0:f32[] in (c,) }")
    assert [e.prim for e in j.eqns] == ["sin", "mul"]
    assert j.eqns[1].inputs[0] is j.eqns[0].outputs[0]
    assert j.eqns[1].inputs[1] == Literal(2.0, ShapedArray((), "f32"))
    assert j.outvars[0] is j.eqns[1].outputs[0]


def test_variable_named_in_at_end_of_line_and_as_output():
    text = (
        "{ lambda ; in:f32[3]. let\n"
        "    io:f32[3] = transpose[permutation=(0,)] in\n"
        "    ip:f32[3] = sin io\n"
        "  in (in, ip) }\n"
    )
    j = one(text)
    assert j.eqns[0].inputs == (j.invars[0],)
    assert j.outvars == (j.invars[0], j.eqns[1].outputs[0])
    j2 = one("{ lambda ; a:f32[3]. let\n    in:f32[3] = sin a\n  in (in,) }")
    assert j2.outvars[0] is j2.eqns[0].outputs[0] and j2.outvars[0].hint == "in"


def test_nan_binder_after_operands_and_nan_literal_operand():
    text = (
        "{ lambda ; ine:f32[]. let\n"
        "    inf:f32[] = max ine nan:f32[]\n"
        "    nan:f32[] = add inf\n"
        "      inf\n"
        "    let:f32[] = mul nan inf:f32[]\n"
        "  in (let,) }\n"
    )
    j = one(text)
    e0, e1, e2 = j.eqns
    assert (
        e0.outputs[0].hint == "inf"
        and isinstance(e0.inputs[1], Literal)
        and np.isnan(e0.inputs[1].value)
    )
    assert e1.outputs[0].hint == "nan" and e1.inputs == (e0.outputs[0], e0.outputs[0])
    assert e2.inputs[0] is e1.outputs[0] and e2.inputs[1].value == float("inf")
    assert j.outvars[0] is e2.outputs[0]


def test_empty_equation_blocks():
    j = one("{ lambda ; a:f32[3]. let  in (a, 3.0:f32[], True:bool[]) }")
    assert j.eqns == () and j.outvars[0] is j.invars[0]
    assert j.outvars[2] == Literal(True, ShapedArray((), "bool"))
    j = one("{ lambda ; a:f32[3]. let\n    \n  in (a,) }\n")
    assert j.eqns == () and j.outvars == (j.invars[0],)
    j = one("{ lambda ; . let  in () }")
    assert j.invars == () and j.outvars == ()


def test_zero_operand_trailing_space_and_zero_output_eqns():
    text = (
        "{ lambda ; a:f32[3]. let\n"
        "    b:i32[3] = iota[dimension=0 dtype=int32 shape=(3,) sharding=None] \n"
        "    c:i32[] = axis_index[axis_name=y] \n"
        "    debug_callback[callback=<function f at 0xXXXXXXXXXXXX> effect=Debug partitioned=False] a\n"
        "  in (b, c) }\n"
    )
    j = one(text)
    b, c, d = j.eqns
    assert b.inputs == () and b.params["dtype"] == np.dtype("int32") and b.params["shape"] == (3,)
    assert c.inputs == () and c.params == {"axis_name": "y"}
    assert d.outputs == () and d.inputs == (j.invars[0],)
    assert d.params["callback"] == params.Opaque("<function f at 0xXXXXXXXXXXXX>")
    assert d.params["effect"] == "Debug"


def test_shadowing_in_jit_name_suggestion():
    text = (
        "{ lambda ; a:bool[5] b:f32[5] c:f32[5]. let\n"
        "    d:f32[5] = jit[\n"
        "      name=_where\n"
        "      jaxpr={ lambda ; a:bool[5] b:f32[5] c:f32[5]. let\n"
        "          d:f32[5] = select_n a c b\n"
        "        in (d,) }\n"
        "    ] a b c\n"
        "    e:f32[5] = mul d b\n"
        "  in (e,) }\n"
    )
    j = one(text)
    outer = j.eqns[0]
    inner = outer.params["jaxpr"]
    assert outer.inputs == j.invars
    assert not set(map(id, inner.invars)) & set(map(id, j.invars))
    assert inner.eqns[0].inputs == (inner.invars[0], inner.invars[2], inner.invars[1])
    assert j.eqns[1].inputs == (outer.outputs[0], j.invars[1])
    assert [v.hint for v in inner.invars] == ["a", "b", "c"]


def test_dropvar_use_warns_and_resolves_to_latest():
    """A use of `_` after two `_` bindings warns (it may mean either); after one it does not
    (JAX prints `_` inside a nested jaxpr for a value unused outside it)."""
    text = (
        "{ lambda ; a:f32[3]. let\n"
        "    _:f32[3] _:f32[3] b:f32[3] = jit[\n"
        "      name=g\n"
        "      jaxpr={ lambda ; a:f32[3]. let\n"
        "          _:f32[3] = sin a\n"
        "          _:f32[3] = cos _\n"
        "          b:f32[3] = cos _\n"
        "        in (_, _, b) }\n"
        "    ] a\n"
        "  in (b,) }\n"
    )
    r = parse(text, "t.jaxpr")
    # the outvars `(_, _, b)` are not warned about: both outer results are top-level `_`
    # (unused), so which f32[3] binder they name changes nothing
    (w1,) = r.warnings
    assert (w1.loc.line, w1.loc.col) == (7, 26)
    assert "'_'" in w1.message
    inner = r.jaxpr.eqns[0].params["jaxpr"]
    assert inner.eqns[1].inputs[0] is inner.eqns[0].outputs[0]
    assert inner.eqns[2].inputs[0] is inner.eqns[1].outputs[0]
    assert r.jaxpr.eqns[0].outputs[0].hint == "_"


def test_underscore_bound_once_reads_silently():
    text = (
        "{ lambda ; a:f32[3]. let\n"
        "    _:f32[3] b:f32[3] = jit[\n"
        "      name=g\n"
        "      jaxpr={ lambda ; a:f32[3]. let\n"
        "          _:f32[3] = sin a\n"
        "          b:f32[3] = cos _\n"
        "        in (_, b) }\n"
        "    ] a\n"
        "  in (b,) }\n"
    )
    r = parse(text, "t.jaxpr")
    assert r.warnings == []
    inner = r.jaxpr.eqns[0].params["jaxpr"]
    assert inner.eqns[1].inputs[0] is inner.eqns[0].outputs[0]
    assert inner.outvars[0] is inner.eqns[0].outputs[0]


def test_shared_jaxprs_forward_reference_and_tuple_of_branches():
    text = (
        "let f = { lambda ; a:f32[]. let b:f32[] = jit[name=g jaxpr=g] a in (b,) } in\n"
        "let g = { lambda ; c:f32[]. let d:f32[] = sin c in (d,) } in\n"
        "{ lambda ; e:i32[] f:f32[]. let\n"
        "    h:f32[] = jit[name=f jaxpr=f] f\n"
        "    i:f32[] = cond[\n"
        "      branches=(\n"
        "        g\n"
        "        { lambda ; j:f32[]. let k:f32[] = cos j in (k,) }\n"
        "      )\n"
        "    ] e h\n"
        "    l:f32[] = jit[name=g jaxpr=g] i\n"
        "    m:f32[] = psum[axes=(g,) axis_name=g] l\n"
        "  in (m,) }\n"
    )
    j = one(text)
    h, i, l, m = j.eqns
    assert m.params == {"axes": (params.SymExpr("g"),), "axis_name": "g"}
    f = h.params["jaxpr"]
    g = f.eqns[0].params["jaxpr"]
    assert isinstance(g, core.Jaxpr) and g.eqns[0].prim == "sin"
    br = i.params["branches"]
    assert isinstance(br, tuple) and br[0] is g and br[1].eqns[0].prim == "cos"
    assert l.params["jaxpr"] is g
    assert h.params["name"] == "f" and h.inputs[0] is j.invars[1]


def test_str_ed_jaxpr_with_local_definitions_and_outer_forward_reference():
    text = (
        "let f = { lambda ; a:f32[]. let b:f32[] = foo[jaxprs=_R(matvec=let h = { lambda ; a:f32[]. let  in (a,) } in\n"
        "{ lambda ; a:f32[]. let b:f32[] = jit[name=g jaxpr=g] a; c:f32[] = jit[name=h jaxpr=h] b in (c,) }, n=1)] a "
        "in (b,) } in\n"
        "let g = { lambda ; a:f32[]. let b:f32[] = sin a in (b,) } in\n"
        "{ lambda ; a:f32[]. let b:f32[] = jit[name=f jaxpr=f] a; c:f32[] = jit[name=g jaxpr=g] b in (c,) }"
    )
    j = one(text)
    f = j.eqns[0].params["jaxpr"]
    rec = f.eqns[0].params["jaxprs"]
    assert isinstance(rec, params.Record) and rec["n"] == 1
    inner = rec["matvec"]
    # `g` is defined by the enclosing printout, after its use; `h` by the str()-ed text itself
    assert inner.eqns[0].params["jaxpr"] is j.eqns[1].params["jaxpr"]
    assert inner.eqns[0].params["jaxpr"].eqns[0].prim == "sin"
    assert inner.eqns[1].params["jaxpr"].eqns == ()


def test_shared_jaxpr_named_lambda_and_unicode():
    text = (
        "let lambda = { lambda ; a:f32[]. let  in (a,) } in\n"
        "let fünction_名前 = { lambda ; a:f32[]. let  in (a,) } in\n"
        "{ lambda ; b:f32[]. let\n"
        "    c:f32[] = jit[name=<lambda> jaxpr=lambda] b\n"
        "    d:f32[] = jit[name=fünction_名前 jaxpr=fünction_名前] c\n"
        "  in (d,) }\n"
    )
    c, d = one(text).eqns
    assert c.params["name"] == "<lambda>" and isinstance(c.params["jaxpr"], core.Jaxpr)
    assert d.params["name"] == "fünction_名前" and isinstance(d.params["jaxpr"], core.Jaxpr)
    assert c.params["jaxpr"] is not d.params["jaxpr"]


def test_locations_and_hints():
    text = "{ lambda ; a:f32[3]. let\n    b:f32[3] = sin a\n    c:f32[3] = cos b\n  in (c,) }\n"
    j = one(text)
    assert [e.loc for e in j.eqns] == [core.Loc("t.jaxpr", 2, 5), core.Loc("t.jaxpr", 3, 5)]
    assert [v.hint for v in (j.invars[0], *j.eqns[0].outputs, *j.eqns[1].outputs)] == [
        "a",
        "b",
        "c",
    ]


def test_ansi_colour_is_stripped():
    text = "{ \x1b[34;1mlambda \x1b[39;22m; a\x1b[35m:f32[3]\x1b[39m. \x1b[34;1mlet\n    \x1b[39;22mb\x1b[35m:f32[3]\x1b[39m = sin a\n  in (b,) }"
    j = one(text)
    assert j.eqns[0].prim == "sin"


def test_effects_suffix():
    j = one("{ lambda ; a:f32[3]. let  in (a,) : { OrderedIO, Debug } }")
    assert j.effects == ("OrderedIO", "Debug")
    assert one("{ lambda ; a:f32[3]. let  in (a,) : {  } }").effects == ()


# ---------------------------------------------------------------- literals and types


@pytest.mark.parametrize(
    "text, value, dtype",
    [
        ("2.0:f32[]", 2.0, "f32"),
        ("-0.0:f32[]", -0.0, "f32"),
        ("1e-07:f32[]", 1e-07, "f32"),
        ("1e+300:f64[]", 1e300, "f64"),
        ("inf:f32[]", float("inf"), "f32"),
        ("-inf:f32[]", float("-inf"), "f32"),
        ("-7:i32[]", -7, "i32"),
        ("4294967295:u32[]", 4294967295, "u32"),
        ("True:bool[]", True, "bool"),
        ("(1+2j):c64[]", 1 + 2j, "c64"),
        ("2j:c128[]", 2j, "c128"),
        ("(-0-1j):c64[]", complex(-0.0, -1.0), "c64"),
        ("(b'',):float0[]", "float0", "float0"),
    ],
)
def test_literal_forms(text, value, dtype):
    j = one(f"{{ lambda ; a:f32[]. let b:f32[] = foo a {text} in (b,) }}")
    lit = j.eqns[0].inputs[1]
    assert isinstance(lit, Literal) and lit.typed and lit.type == ShapedArray((), dtype)
    assert type(lit.value) is type(value) and repr(lit.value) == repr(value)
    shown = "(b'',)" if lit.value == "float0" else repr(lit.value)
    assert f"{shown}:{lit.type}" == text


def test_nan_literal():
    lit = one("{ lambda ; a:f32[]. let b:f32[] = max a nan:f32[] in (b,) }").eqns[0].inputs[1]
    assert isinstance(lit.value, float) and np.isnan(lit.value) and repr(lit.value) == "nan"


def test_untyped_literals_take_a_sibling_type():
    j = parse(
        "{ lambda ; a:f16[3] b:i8[]. let c:f16[3] = clamp 0.0 a 3.0; d:f16[3] = add c 1.0; e:bool[] = lt b 2; "
        "f:f16[3] = select_n 1 a c in (c, 1.0, True) }"
    ).jaxpr
    c, d, e, f = j.eqns
    assert c.inputs[0] == Literal(0.0, ShapedArray((), "f16"), False) and c.inputs[0].type.weak_type
    # an integer-valued text is never a float (JAX prints floats as 2.0): the predicate is i32
    assert f.inputs[0].type == ShapedArray((), "i32")
    assert d.inputs[1].type == ShapedArray((), "f16") and not d.inputs[1].typed
    assert e.inputs[1].type == ShapedArray((), "i8")
    assert [a.type.dtype for a in j.outvars[1:]] == ["f32", "bool"]


def test_extended_types():
    text = (
        "{ lambda ; a:key<fry>[2] b:f32<host>[3] c:Ref{f32[3]} d:Ref<default>{f32[4,8]} "
        "e:f32[8@x,6@y] f:f32[2*b + 1,n] g:i32[floordiv(b, 2)] h:f32[2,1]{V:x} i:Tok. let  in () }"
    )
    ts = [v.type for v in one(text).invars]
    assert ts[0] == ShapedArray((2,), "key<fry>")
    assert ts[1] == ShapedArray((3,), "f32", memory_space="host") and str(ts[1]) == "f32<host>[3]"
    assert ts[2] == RefType(ShapedArray((3,), "f32")) and str(ts[2]) == "Ref{f32[3]}"
    assert (
        ts[3] == RefType(ShapedArray((4, 8), "f32"), "default")
        and str(ts[3]) == "Ref<default>{f32[4,8]}"
    )
    assert ts[4].shape == ("8@x", "6@y")
    assert ts[5].shape == ("2*b + 1", "n") and str(ts[5]) == "f32[2*b + 1,n]"
    assert ts[6].shape == ("floordiv(b, 2)",)
    assert ts[7].vma == "V:x" and str(ts[7]) == "f32[2,1]{V:x}"
    assert ts[8] == OpaqueType("Tok")


# ---------------------------------------------------------------- ref-state equations


def test_ref_state_equations():
    text = (
        "{ lambda ; a:i32[] b:f32[3] c:Ref{f32[4,3]}. let\n"
        "    d:f32[3] <- c[a,:]\n"
        "    c[...] <- b\n"
        "    e:f32[3], c[0,:] <- c[0,:], d\n"
        "    c[a,0] += 1.0:f32[]\n"
        "    f:f32[2] <- c[a,1:]\n"
        "  in (e, f) }\n"
    )
    j = one(text)
    a, b, c = j.invars
    get, set_, swap, add, get2 = j.eqns
    assert (get.prim, get.inputs, get.params) == (
        "get",
        (c, a),
        {"indexer": params.Opaque("[$0,:]")},
    )
    assert get.outputs[0].hint == "d"
    assert set_.prim == "swap" and set_.inputs == (c, b) and set_.outputs[0].hint == "_"
    assert set_.params["indexer"] == params.Opaque("[...]")
    assert (
        swap.prim == "swap" and swap.inputs == (c, get.outputs[0]) and swap.outputs[0].hint == "e"
    )
    assert swap.params["indexer"] == params.Opaque("[0,:]")
    assert add.prim == "addupdate" and add.outputs == ()
    assert add.inputs == (c, Literal(1.0, ShapedArray((), "f32")), a)
    assert add.params["indexer"] == params.Opaque("[$0,0]")
    assert get2.params["indexer"] == params.Opaque("[$0,1:]") and get2.inputs == (c, a)
    assert j.outvars == (swap.outputs[0], get2.outputs[0])


# ---------------------------------------------------------------- parameter values


def test_param_values_are_typed():
    text = (
        "{ lambda ; a:f32[3]. let\n"
        "    b:f32[3] = foo[\n"
        "      axes=(0, np.int64(1))\n"
        "      dn=GatherDimensionNumbers(offset_dims=(1,), collapsed_slice_dims=(0,), start_index_map=(0,), operand_batching_dims=(), start_indices_batching_dims=())\n"
        "      dt=bfloat16\n"
        "      fill=nan\n"
        "      mesh=Mesh('x': 4, 'y': 2, axis_types=(Auto, Auto))\n"
        "      mode=GatherScatterMode.CLIP\n"
        "      names=frozenset({'x', 'y'})\n"
        "      none=None\n"
        "      prec=(Precision.HIGHEST, Precision.HIGHEST)\n"
        "      sizes=(b*n, floordiv(b, 2), 3)\n"
        "      specs=(P('x', None),)\n"
        "      tree=PyTreeDef(((), {'x': *}))\n"
        "      vals=[None, -1.5]\n"
        "      algorithm=RNG_DEFAULT\n"
        "      policy=SaveOnlyTheseNames(saveable_names=frozenset({'y'}))\n"
        "    ] a\n"
        "  in (b,) }\n"
    )
    p = one(text).eqns[0].params
    assert p["axes"] == (0, params.NpScalar("int64", 1))
    assert p["dn"] == params.Record(
        "GatherDimensionNumbers",
        (
            ("offset_dims", (1,)),
            ("collapsed_slice_dims", (0,)),
            ("start_index_map", (0,)),
            ("operand_batching_dims", ()),
            ("start_indices_batching_dims", ()),
        ),
    )
    assert p["dt"] == np.dtype("bfloat16") and params.format_value(p["dt"]) == "bfloat16"
    assert isinstance(p["fill"], float) and np.isnan(p["fill"])
    assert p["mesh"] == params.Opaque("Mesh('x': 4, 'y': 2, axis_types=(Auto, Auto))")
    assert p["mode"] == params.EnumValue("GatherScatterMode", "CLIP")
    assert p["names"] == frozenset({"x", "y"})
    assert p["none"] is None
    assert p["prec"] == (params.EnumValue("Precision", "HIGHEST"),) * 2
    assert p["sizes"] == (params.SymExpr("b*n"), params.SymExpr("floordiv(b, 2)"), 3)
    assert p["specs"] == (params.Opaque("P('x', None)"),)
    assert p["tree"] == params.Opaque("PyTreeDef(((), {'x': *}))")
    assert p["vals"] == [None, -1.5]
    assert p["algorithm"] == "RNG_DEFAULT"
    assert p["policy"] == params.Record(
        "SaveOnlyTheseNames", (("saveable_names", frozenset({"y"})),)
    )
    for k, v in p.items():
        assert f"{k}={params.format_value(v)}" in text, k


# ---------------------------------------------------------------- errors

HEAD = "{ lambda ; a:f32[3]. let\n"


@pytest.mark.parametrize(
    "text, expected",
    [
        (
            HEAD + "    b:f32[3] = sin a\n",
            "3:1: unexpected end of input: expected 'in (' followed by the output list",
        ),
        (
            HEAD + "    b:f32[3] = sin a\n  in (b,",
            "3:9: unexpected end of input: expected an output variable or literal",
        ),
        ("{ lambda ; a:f32[3", "1:17: unterminated '[' in type"),
        ("{ lambda ; a:f33[3]. let  in (a,) }", "1:14: unknown dtype 'f33'"),
        (HEAD + "    b:q7[3] = sin a\n  in (b,) }", "2:7: unknown dtype 'q7'"),
        (HEAD + "    b:f32[3] = mul a q\n  in (b,) }", "2:22: variable 'q' used before definition"),
        (HEAD + "    b:f32[3] = sin a\n  in (c,) }", "3:7: variable 'c' used before definition"),
        (
            HEAD + "    b:f32[3] = reduce_sum[axes=(0, 1] a\n  in (b,) }",
            "2:37: expected ',' or ')' in parameter value, found ']'",
        ),
        (
            HEAD + "    b:f32[3] = reduce_sum[axes=(0, 1) a\n  in (b,) }",
            "2:39: expected another parameter 'name=value' or ']' after the value of 'axes', found 'a'",
        ),
        (
            HEAD + "    b:f32[3] = sin a\n  (b,) }",
            "3:3: expected 'in (' followed by the output list, found '('",
        ),
        (
            HEAD + "    b:f32[3] = sin a\n  in (b,) }\n}",
            "4:1: unexpected text after the jaxpr: '}'",
        ),
        (
            HEAD + "    b:f32[3] = sin @a\n  in (b,) }",
            "2:20: expected an operand (a variable or a literal), found '@'",
        ),
        (HEAD + "    b:f32[3] = add a 1.2.3:f32[]\n  in (b,) }", "2:22: malformed literal '1.2.3'"),
        (
            HEAD + "    b:c64[3] = add a (1+2k):c64[]\n  in (b,) }",
            "2:22: expected an operand (a variable or a literal), found '('",
        ),
        (  # a misplaced equation is read (tests/test_misindented.py) but for after `nan:T` (H1)
            HEAD + "    b:f32[3] = sin a\n      nan:f32[]\n      c:f32[3] = cos b\n  in (b,) }",
            "4:7: a binder cannot appear among operands; a new equation must start at column 5, "
            "the column of the first equation of this block",
        ),
        (  # a line left of the block's column that no equation starts ends the block
            HEAD + "      b:f32[3] = sin a\n    c\n  in (b,) }",
            "3:5: expected 'in (' followed by the output list, found 'c'",
        ),
        ("", "1:1: empty input: expected a jaxpr ('{ lambda ...')"),
        ("hello", "1:1: expected a jaxpr ('{ lambda ...'), found 'hello'"),
        (
            "{ lambda ; a:f32[3] let b:f32[3] = sin a in (b,) }",
            "1:21: expected '.' before 'let', found 'let'",
        ),
        ("{ lambda ; a b. let c = sin a in (c,) }", "1:13: " + NO_TYPES),
        ("{ lambda ; . let\n    a = iota[dimension=0] \n  in (a,) }", "2:6: " + NO_TYPES),
        ("{ lambda ; . let\n    a b = foo \n  in (a,) }", "2:6: " + NO_TYPES),
        (
            "{ lambda ; a:f32[3]. let b:f32[3] = jit[name=g jaxpr=g] a in (b,) }",
            "1:54: shared jaxpr 'g' is referenced but never defined",
        ),
        (
            "let g = { lambda ; a:f32[]. let  in (a,) }\n{ lambda ; a:f32[]. let  in (a,) }",
            "2:1: expected 'in' after the definition of shared jaxpr 'g', found '{'",
        ),
        (
            HEAD + "    b:f32[3] = sin a\n  in (b,) ",
            "3:11: unexpected end of input: expected '}' closing the jaxpr",
        ),
        (
            HEAD + "    b:f32[3] = foo[x=1\n  in (b,) }",
            "3:3: expected another parameter 'name=value' or ']' after the value of 'x', found 'in'",
        ),
        (
            "{ lambda ; a:f32[3]. let b:f32[3] = foo[x=" + "(" * 3000 + "] a in (b,) }",
            "1:43: the value of 'x' is nested too deeply",
        ),
    ],
)
def test_located_errors(text, expected):
    assert error_of(text) == expected


def test_errors_never_escape_as_python_exceptions():
    base = (
        (CORPUS / "jax-0.10.2" / "scan.jaxpr").read_text()
        if CORPUS.is_dir()
        else HEAD + "    b:f32[3] = sin a\n  in (b,) }\n"
    )
    for cut in range(0, len(base), max(1, len(base) // 300)):
        for text in (base[:cut], base[:cut] + ")" + base[cut:], base[:cut] + base[cut + 1 :]):
            try:
                parse(text, "t.jaxpr")
            except JaxprError as e:
                assert e.loc is not None and e.loc.line >= 1 and e.loc.col >= 1


# ---------------------------------------------------------------- the grammar


def test_the_lark_grammar_is_the_parser():
    import jaxprtool
    from jaxprtool.text import grammar, parser

    assert Path(grammar.GRAMMAR_PATH) == Path(jaxprtool.__file__).parent / "grammars" / "jaxpr.lark"
    lk = parser._build()
    assert lk.options.parser == "lalr" and lk.options.lexer == "contextual"
    assert lk.options.transformer is not None and lk.options.postlex is not None
    # the operand-splitting pattern of the transformer is the grammar's OPERANDS terminal
    # (lark turns the escapes `\n`, `\t` of the grammar file into the characters)
    pattern = grammar.OPERANDS_PATTERN.replace(r"\n", "\n").replace(r"\t", "\t")
    assert lk.get_terminal("OPERANDS").pattern.value == pattern


def test_grammar_is_cached_in_the_user_cache_dir(tmp_path, monkeypatch):
    from jaxprtool.text import grammar, parser

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    grammar.build_lark(parser._Layout(), parser._Build())
    (cached,) = (tmp_path / "jaxprtool").glob("*.json")
    assert cached.stat().st_size > 0
    assert (tmp_path / "jaxprtool").stat().st_mode & 0o777 == 0o700
    assert cached.stat().st_mode & 0o777 == 0o600
    lk = grammar.build_lark(parser._Layout(), parser._Build())  # loads the cache
    assert lk.options.parser == "lalr"
    assert parse("{ lambda ; a:f32[]. let b:f32[] = sin a in (b,) }").jaxpr.eqns[0].prim == "sin"


def test_the_grammar_cache_keeps_lark_tokens():
    """lark 1.2 names rules by the tokens its grammar loader read (lark 1.3 by strings): the
    JSON cache writes a token tagged and reads back a token of the same type and value."""
    from lark.lexer import Token

    from jaxprtool.text import grammar

    tables = {"data": {"rules": [1]}, "memo": {1: {"origin": {"name": Token("RULE", "start")}}}}
    back = grammar._decode(json.loads(json.dumps(grammar._encode(tables))))
    assert back == tables
    name = back["memo"][1]["origin"]["name"]
    assert type(name) is Token and name.type == "RULE"


def test_a_nested_jaxpr_parses_with_a_cold_and_a_warm_grammar_cache(tmp_path, monkeypatch):
    """The LALR path (nested jaxprs) builds the parser: first writing the cache, then from it."""
    from jaxprtool.text.parser import lalr

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    for _ in range(2):
        monkeypatch.setattr(lalr, "_PARSERS", {})
        assert parse(NESTED, "t.jaxpr", fast=False).jaxpr.eqns[0].prim == "pjit"
    assert len(list((tmp_path / "jaxprtool").glob("*.json"))) == 1


_PAYLOAD = "import pathlib; pathlib.Path({marker!r}).write_text('ran')"


def _planted_cache(tmp_path):
    """The cache file the tool would read under tmp_path, with a pickle whose loading runs code."""
    import pickle

    from jaxprtool.text import grammar

    marker = tmp_path / "payload-ran"

    class Payload:
        def __reduce__(self):
            return (exec, (_PAYLOAD.format(marker=str(marker)),))

    path = grammar.cache_file(
        Path(grammar.GRAMMAR_PATH).read_text(encoding="utf-8"), _lark_version()
    )
    return path, pickle.dumps(Payload()), marker


def _lark_version():
    import lark

    return lark.__version__


def test_a_planted_pickle_in_the_grammar_cache_runs_no_code(tmp_path, monkeypatch):
    from jaxprtool.text import grammar, parser

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path, payload, marker = _planted_cache(tmp_path)
    with open(path, "wb") as f:
        f.write(payload)
    os.chmod(path, 0o600)
    lk = grammar.build_lark(parser._Layout(), parser._Build())
    assert not marker.exists()
    assert lk.options.parser == "lalr"
    # the foreign file was replaced by a JSON cache, its first line the format and digest
    head, body = Path(path).read_bytes().split(b"\n", 1)
    assert head.split()[0].decode() == grammar.CACHE_FORMAT
    assert isinstance(json.loads(body), dict)


def _fresh_cache(tmp_path, monkeypatch):
    """A grammar cache written under tmp_path; returns its path."""
    from jaxprtool.text import grammar, parser

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    grammar.build_lark(parser._Layout(), parser._Build())
    (cached,) = (tmp_path / "jaxprtool").glob("*.json")
    return cached


NESTED = "{ lambda ; a:f32[]. let b:f32[] = pjit[name=f jaxpr={ lambda ; c:f32[]. let d:f32[] = sin c in (d,) }] a in (b,) }"


def test_an_altered_grammar_cache_is_rebuilt(tmp_path, monkeypatch):
    """A cache that still loads but whose tables were changed (here: one terminal's pattern)
    fails its digest and is rebuilt, instead of misleading the parser."""
    from jaxprtool.text import grammar, parser

    cached = _fresh_cache(tmp_path, monkeypatch)
    head, body = cached.read_bytes().split(b"\n", 1)
    altered = body.replace(b'"value": "let(', b'"value": "lex(', 1)
    assert altered != body
    cached.write_bytes(head + b"\n" + altered)
    lk = grammar.build_lark(parser._Layout(), parser._Build())
    assert lk.options.parser == "lalr"
    assert grammar._read_cache(str(cached)) is not None  # rebuilt: its digest holds
    assert b'"value": "let(' in cached.read_bytes()
    assert parse(NESTED, "t.jaxpr", fast=False).jaxpr.eqns[0].prim == "pjit"


def test_a_fifo_or_huge_grammar_cache_is_ignored(tmp_path, monkeypatch):
    """A FIFO planted as the cache would block a plain open; a 3 GiB file would be read whole."""
    from jaxprtool.text import grammar, parser

    cached = _fresh_cache(tmp_path, monkeypatch)
    cached.unlink()
    os.mkfifo(cached, 0o600)
    assert grammar.build_lark(parser._Layout(), parser._Build()).options.parser == "lalr"
    assert stat.S_ISFIFO(os.lstat(cached).st_mode)  # ignored and left alone: nothing written
    cached.unlink()
    with open(cached, "wb") as f:
        f.truncate(3 << 30)  # sparse: no disk used
    assert grammar.build_lark(parser._Layout(), parser._Build()).options.parser == "lalr"
    assert cached.stat().st_size < 3 << 30  # replaced by a fresh cache


def test_a_grammar_cache_folder_others_can_write_is_not_used(tmp_path, monkeypatch, capsys):
    from jaxprtool import cachefs
    from jaxprtool.text import grammar

    (tmp_path / "jaxprtool").mkdir(mode=0o700)
    os.chmod(tmp_path / "jaxprtool", 0o777)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(cachefs, "_warned", set())
    assert grammar.cache_file("g", "1") is None
    assert grammar.cache_file("g", "1") is None
    err = capsys.readouterr().err
    assert err == (
        f"warning: cache folder {tmp_path / 'jaxprtool'} can be written by others (mode 0777):"
        " not used (remove it, or `chmod 700` a folder of your own, or set XDG_CACHE_HOME to a"
        " private folder)\n"
    )
    assert (tmp_path / "jaxprtool").stat().st_mode & 0o777 == 0o777
    assert parse(NESTED, "t.jaxpr", fast=False).jaxpr.eqns[0].prim == "pjit"


def test_a_relative_cache_home_is_ignored(tmp_path, monkeypatch):
    from jaxprtool.text import grammar

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", "cache")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    d = grammar.cache_dir()
    assert d == str(tmp_path / "home" / ".cache" / "jaxprtool")
    assert not (tmp_path / "cache").exists()


def test_a_symlinked_cache_file_is_not_followed(tmp_path, monkeypatch):
    from jaxprtool.text import grammar, parser

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path, payload, marker = _planted_cache(tmp_path)
    target = tmp_path / "victim"
    target.write_bytes(payload)
    os.symlink(target, path)
    grammar.build_lark(parser._Layout(), parser._Build())
    assert not marker.exists()
    assert target.read_bytes() == payload  # the link's target is neither read nor overwritten
    assert os.path.islink(path)  # ignored and left alone


def test_grammar_forms():
    for text in [
        "{ lambda ; a:i32[] c:Ref{f32[4]}. let d:f32[] <- c[a]; c[...] <- d; e:f32[], c[0] <- c[0], d; "
        "c[a] += 1.0:f32[]; iota[dimension=0 dtype=int32] in (e,) }",
        "{ lambda ; in:f32[3]. let io:f32[3] = transpose[permutation=(0,)] in; let:f32[3] = sin in in (in, let) }",
        "let g = { lambda ; a:f32[]. let  in (a,) } in { lambda ; b:f32[] c:i32[]. let d:f32[] = jit[name=g jaxpr=g] b; "
        "e:f32[] = cond[branches=( { lambda ; x:f32[]. let  in (x,) } g )] c d in (e,) : { Debug } }",
    ]:
        j = parse(text).jaxpr
        assert j.eqns
    e = one(
        "{ lambda ; in:f32[3]. let io:f32[3] = transpose[permutation=(0,)] in; let:f32[3] = sin in in (in, let) }"
    )
    assert e.eqns[1].inputs == (e.invars[0],) and e.outvars[1] is e.eqns[1].outputs[0]


def test_invalid_dimension_is_located():
    with pytest.raises(JaxprError) as e:
        parse("{ lambda ; a:f32[[3]. let b:f32[3] = sin a in (b,) }", "t.jaxpr")
    assert str(e.value) == "t.jaxpr:1:18: error: invalid dimension '[3' in type"
