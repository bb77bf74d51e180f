"""`jaxprtool check` and jaxprtool.check: the corpus checks clean; bad jaxprs give located errors."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from conftest import CORPUS, corpus_files, needs_corpus

from jaxprtool.check import Diagnostic, check, errors
from jaxprtool.cli import main
from jaxprtool.core import Eqn, Jaxpr, ShapedArray, Var
from jaxprtool.text.parser import parse

#: primitives of the corpus the checker may not know (none at present)
UNKNOWN_OK: set[str] = set()


def _corpus(version: str):
    if version == "older":
        return sorted(
            p for d in sorted((CORPUS / "older").glob("jax-*")) for p in d.glob("*.jaxpr")
        )
    return corpus_files(version)


@needs_corpus
@pytest.mark.parametrize("version", ["jax-0.10.2", "jax-0.12.0.1", "older"])
def test_corpus_checks_clean(version):
    files = _corpus(version)
    assert files
    problems = []
    for f in files:
        result = parse(f.read_text(), str(f))
        for d in check(result.jaxpr, str(f), check_names=True):
            if d.kind == "error":
                problems.append(str(d))
            elif not (
                d.message.startswith("unknown primitive") and d.message.split("'")[1] in UNKNOWN_OK
            ):
                problems.append(f"{d.loc}: warning: {d.message}")
    assert not problems, "\n".join(problems[:30])


@needs_corpus
def test_cli_corpus_sample_is_silent():
    runner = CliRunner()
    for name in (
        "scan.jaxpr",
        "cond_int_pred_multiple_operands.jaxpr",
        "conv2d.jaxpr",
        "custom_linear_solve.jaxpr",
    ):
        for version in ("jax-0.10.2", "jax-0.12.0.1"):
            r = runner.invoke(main, ["check", str(CORPUS / version / name)])
            assert r.exit_code == 0, r.output
            assert r.output == "All checks passed.\n"


def _run(tmp_path, text: str, name: str = "bad.jaxpr"):
    p = tmp_path / name
    p.write_text(text)
    r = CliRunner().invoke(main, ["check", str(p)])
    return r, str(p)


def _first_error(tmp_path, text: str, name: str = "bad.jaxpr"):
    """Check `text`, which must fail: the first line of stderr, and the file's path."""
    r, p = _run(tmp_path, text, name)
    assert r.exit_code == 1
    return r.stderr.splitlines()[0], p


def _error_lines(tmp_path, text: str, name: str = "bad.jaxpr"):
    """Check `text`, which must fail: the `error:` lines of stderr, and the file's path."""
    r, p = _run(tmp_path, text, name)
    assert r.exit_code == 1
    return [ln for ln in r.stderr.splitlines() if ": error: " in ln], p


def test_clean_prints_only_the_summary(tmp_path):
    r, _ = _run(tmp_path, "{ lambda ; a:f32[3] b:f32[3]. let c:f32[3] = mul a b in (c,) }\n")
    assert r.exit_code == 0
    assert r.stdout == "" and r.stderr == "All checks passed.\n"


def test_result_type_mismatch(tmp_path):
    r, p = _run(
        tmp_path, "{ lambda ; a:f32[3] b:f32[3]. let\n    c:f32[4] = mul a b\n  in (c,) }\n"
    )
    assert r.exit_code == 1
    assert r.stdout == ""
    assert (
        r.stderr.splitlines()[0]
        == f"{p}:2:5: error: mul: result type f32[4] does not match inferred f32[3] [E111]"
    )


def test_repeated_equations_are_each_checked(tmp_path):
    # the checker skips an equation identical in types and parameters to one that passed:
    # a near-identical one after it (another declared type, another operand dtype) and
    # every repetition of a failing one are still reported, each at its own line
    text = (
        "{ lambda ; a:f32[3] b:f32[3] i:i32[3]. let\n"
        "    c:f32[3] = mul a b\n"
        "    d:f32[3] = mul c b\n"
        "    e:f32[4] = mul d b\n"
        "    f:f32[4] = mul d b\n"
        "    g:f32[3] = mul d i\n"
        "    h:f32[3] = mul a b\n"
        "  in (h, e, f, g) }\n"
    )
    r, p = _run(tmp_path, text)
    assert r.exit_code == 1
    errs = [line for line in r.stderr.splitlines() if ": error: " in line]
    assert [e.split(": error: ")[0] for e in errs] == [f"{p}:4:5", f"{p}:5:5", f"{p}:6:5"]
    assert "result type f32[4] does not match inferred f32[3]" in errs[0]
    assert errs[0].split(": error: ")[1] == errs[1].split(": error: ")[1]


def test_equation_keys_tell_parameter_values_apart():
    # the checker skips an equation whose key passed: the key of a parameter value must be
    # equal only for values of the same types and contents (dimension numbers with lists
    # inside are keyed by their marshal bytes, an np.dtype by its name, remembered)
    import numpy as np

    from jaxprtool.lazy import DTypeName
    from jaxprtool.shapes import equation_key

    t = [ShapedArray((3,), "f32")]

    def key(v):
        return equation_key("p", t, {"v": v}, t)

    variants = [
        (([1], [0]), ([], [])),
        (([1], [1]), ([], [])),
        (((1,), [0]), ([], [])),
        (([True], [0]), ([], [])),
        (([1.0], [0]), ([], [])),
        (([1], [0]), ([],)),
        ([[1], [0]], [[], []]),
        ((1, 0), ()),
        ((1, 0), []),
        ((1, (0,)), ()),
        ((2**70,), ()),
        ((-1,), ()),
        (([np.int32(1)], [0]), ([], [])),
    ]
    keys = [key(v) for v in variants]
    assert len(set(keys)) == len(keys)
    copies = [key((([1], [0]), ([], []))), key(((1, 0), ())), key(((1, (0,)), ()))]
    assert copies == [keys[0], keys[7], keys[9]]  # equal values, other objects
    f32, i32 = np.dtype("float32"), np.dtype("int32")
    assert key(f32) == key(np.dtype("float32")) == key(DTypeName("float32")) != key(i32)
    assert key(f32) == key(f32) and key(i32) != key(np.dtype(">i4")) != key(i32)


def test_repeated_dot_generals_differing_in_a_parameter_are_each_checked():
    # a dot_general after one that passed, the same but for its contraction or its
    # preferred dtype, is checked (np.dtype parameters: not the `check` command's names)
    def dot(out, contract, dtype):
        return (
            f"    {out}:f32[4,4] = dot_general[\n"
            f"      dimension_numbers=(([{contract}], [0]), ([], []))\n"
            f"      preferred_element_type={dtype}\n"
            "    ] a a\n"
        )

    text = (
        "{ lambda ; a:f32[4,4]. let\n"
        + dot("b", 1, "float32")
        + dot("c", 1, "float32")
        + dot("d", 2, "float32")
        + dot("e", 1, "int32")
        + dot("f", 1, "float32")
        + "  in (b, c, d, e, f) }\n"
    )
    found = errors(check(parse(text).jaxpr))
    assert [(d.loc.line, d.message.split(":")[0]) for d in found] == [
        (10, "dot_general"),
        (14, "dot_general"),
    ]
    assert "int32" in found[1].message or "i32" in found[1].message


def test_equations_with_parameters_alike_one_that_passed_are_not_checked_again(monkeypatch):
    # the checker's cheap key (primitive, frozen parameters, identities of the operand and
    # result types) skips a repeated equation with parameters as one without; another
    # parameter value, another type or a nested jaxpr is checked
    import importlib

    C = importlib.import_module("jaxprtool.check")  # (`jaxprtool.check` is the API's function)

    def reduce(out, axes, ty="f32[4]"):
        return f"    {out}:{ty} = reduce_sum[axes=({axes},) out_sharding=None] a\n"

    text = (
        "{ lambda ; a:f32[4,4]. let\n"
        + "".join(reduce(o, 1) for o in "bcdef")
        + reduce("g", 0)
        + reduce("h", 1, "f32[5]")
        + reduce("i", 1)
        + "  in (b, c, d, e, f, g, h, i) }\n"
    )
    checked = []
    real = C._Checker.eqn
    monkeypatch.setattr(C._Checker, "eqn", lambda self, e, d: (checked.append(e), real(self, e, d)))
    j = parse(text).jaxpr
    found = errors(check(j))
    assert [d.loc.line for d in found] == [8]  # h: f32[5] is not what reduce_sum gives
    assert [e.outputs[0].hint for e in checked] == ["b", "g", "h"]


def test_equations_with_literals_alike_one_that_passed_are_not_checked_again(monkeypatch):
    # a typed literal operand is in the cheap key by its value, the value's class and its
    # type: a repeated equation is skipped, one with another value or class is checked, and
    # every repetition of a literal that cannot have its type is reported
    import importlib

    C = importlib.import_module("jaxprtool.check")
    text = (
        "{ lambda ; a:f32[]. let\n"
        "    b:f32[] = mul a 2.0:f32[]\n"
        "    c:f32[] = mul a 2.0:f32[]\n"
        "    d:f32[] = mul a 3.0:f32[]\n"
        "    e:f32[] = mul a 2:f32[]\n"
        "    f:f32[] = mul a 2:f32[]\n"
        "    g:f32[] = mul a True:f32[]\n"
        "    h:f32[] = mul a 3.0:f32[]\n"
        "  in (b, c, d, e, f, g, h) }\n"
    )
    checked = []
    real = C._Checker.eqn
    monkeypatch.setattr(C._Checker, "eqn", lambda self, e, d: (checked.append(e), real(self, e, d)))
    found = errors(check(parse(text).jaxpr))
    assert [d.loc.line for d in found] == [5, 6, 7]
    assert [e.outputs[0].hint for e in checked] == ["b", "d", "e", "f", "g"]


def test_dtype_mismatch_of_operands(tmp_path):
    first, p = _first_error(
        tmp_path, "{ lambda ; a:f32[3] b:i32[3]. let\n    c:f32[3] = add a b\n  in (c,) }\n"
    )
    assert first == f"{p}:2:5: error: add requires operands of the same dtype, got f32, i32 [E110]"


def test_wrong_operand_count(tmp_path):
    lines, p = _error_lines(
        tmp_path,
        "{ lambda ; a:f32[3]. let\n    b:f32[3] = sin a a\n    c:f32[3] = add b\n  in (c,) }\n",
    )
    assert lines == [
        f"{p}:2:5: error: sin expects 1 operand, got 2 [E110]",
        f"{p}:3:5: error: add expects 2 operands, got 1 [E110]",
    ]


def test_wrong_result_count(tmp_path):
    first, p = _first_error(
        tmp_path, "{ lambda ; a:f32[3]. let\n    b:f32[3] c:f32[3] = sin a\n  in (c,) }\n"
    )
    assert first == (
        f"{p}:2:5: error: sin: the equation binds 2 results, but the primitive returns 1 (f32[3]) [E112]"
    )


def test_use_before_definition(tmp_path):
    first, p = _first_error(
        tmp_path, "{ lambda ; a:f32[3]. let\n    b:f32[3] = sin z\n  in (b,) }\n"
    )
    assert first == f"{p}:2:20: error: variable 'z' used before definition [E101]"


def test_duplicate_binding(tmp_path):
    first, p = _first_error(
        tmp_path,
        "{ lambda ; a:f32[3]. let\n    b:f32[3] = sin a\n    b:f32[3] = cos a\n  in (b,) }\n",
    )
    assert first == f"{p}:3:5: error: variable 'b' is bound more than once in this jaxpr [E102]"


@pytest.mark.parametrize(
    "text, where, name",
    [  # (the name check runs per jaxpr where one name names two binders: the others skip it)
        (
            "{ lambda ; a:f32[3]. let\n    b:f32[3] = jit[\n      name=g\n"
            "      jaxpr={ lambda ; c:f32[3]. let\n          e:f32[3] = sin c\n"
            "          e:f32[3] = cos c\n        in (e,) }\n    ] a\n  in (b,) }\n",
            "6:11",
            "e",
        ),  # inside a nested jaxpr whose caller's names are distinct
        ("{ lambda ; a:f32[3]. let\n    a:f32[3] = sin a\n  in (a,) }\n", "2:5", "a"),
        ("{ lambda ; a:f32[3] a:f32[3]. let\n    b:f32[3] = sin a\n  in (b,) }\n", "2:5", "a"),
    ],
)
def test_duplicate_names_anywhere(tmp_path, text, where, name):
    errors, p = _error_lines(tmp_path, text)
    assert errors == [
        f"{p}:{where}: error: variable '{name}' is bound more than once in this jaxpr [E102]"
    ]


def test_duplicate_dropvars_are_fine(tmp_path):
    text = "{ lambda ; a:f32[3]. let\n    _:f32[3] = sin a\n    _:f32[3] = cos a\n    b:f32[3] = neg a\n  in (b,) }\n"
    r, _ = _run(tmp_path, text)
    assert r.exit_code == 0, r.output


def test_nested_jaxpr_arity(tmp_path):
    text = (
        "{ lambda ; a:f32[3]. let\n"
        "    b:f32[3] = jit[\n"
        "      name=g\n"
        "      jaxpr={ lambda ; c:f32[3] d:f32[3]. let e:f32[3] = add c d in (e,) }\n"
        "    ] a\n"
        "  in (b,) }\n"
    )
    first, p = _first_error(tmp_path, text)
    assert first == f"{p}:2:5: error: jit: jaxpr takes 2 inputs, but the equation passes 1 [E110]"


def test_nested_jaxpr_operand_type(tmp_path):
    text = (
        "{ lambda ; a:f32[3]. let\n"
        "    b:f32[3] = jit[\n"
        "      name=g\n"
        "      jaxpr={ lambda ; c:f32[4]. let e:f32[4] = neg c in (e,) }\n"
        "    ] a\n"
        "  in (b,) }\n"
    )
    lines, p = _error_lines(tmp_path, text)
    assert lines == [
        f"{p}:2:5: error: jit: operand 0 has type f32[3], but jaxpr expects f32[4] [E110]"
    ]


def test_nested_jaxpr_is_checked(tmp_path):
    text = (
        "{ lambda ; a:f32[3]. let\n"
        "    b:f32[3] = jit[\n"
        "      name=g\n"
        "      jaxpr={ lambda ; c:f32[3]. let\n"
        "          e:i32[3] = neg c\n"
        "        in (e,) }\n"
        "    ] a\n"
        "  in (b,) }\n"
    )
    lines, p = _error_lines(tmp_path, text)
    assert lines == [
        # the outer equation's result disagrees with what the callee returns
        f"{p}:2:5: error: jit: result type f32[3] does not match inferred i32[3] [E111]",
        f"{p}:5:11: error: neg: result type i32[3] does not match inferred f32[3] [E111]",
    ]


def test_cond_branches_disagree(tmp_path):
    text = (
        "{ lambda ; p:i32[] a:f32[3]. let\n"
        "    b:f32[3] = cond[\n"
        "      branches=(\n"
        "        { lambda ; c:f32[3]. let d:f32[3] = sin c in (d,) }\n"
        "        { lambda ; e:f32[3]. let f:f32[] = reduce_sum[axes=(0,) out_sharding=None] e in (f,) }\n"
        "      )\n"
        "    ] p a\n"
        "  in (b,) }\n"
    )
    first, p = _first_error(tmp_path, text)
    assert (
        first
        == f"{p}:2:5: error: cond: branch 1 returns (f32[]), but branch 0 returns (f32[3]) [E110]"
    )


def test_while_body_carry_mismatch(tmp_path):
    text = (
        "{ lambda ; a:f32[3]. let\n"
        "    b:f32[3] = while[\n"
        "      body_jaxpr={ lambda ; c:f32[3]. let d:f32[] = reduce_sum[axes=(0,) out_sharding=None] c in (d,) }\n"
        "      body_nconsts=0\n"
        "      cond_jaxpr={ lambda ; e:f32[3]. let f:bool[] = lt 1.0:f32[] 2.0:f32[] in (f,) }\n"
        "      cond_nconsts=0\n"
        "    ] a\n"
        "  in (b,) }\n"
    )
    first, p = _first_error(tmp_path, text)
    assert first == (
        f"{p}:2:5: error: while: body_jaxpr result 0 has type f32[], but the carried value has type f32[3] [E110]"
    )


def test_scan_xs_mismatch(tmp_path):
    text = (
        "{ lambda ; a:f32[4] b:f32[9,4]. let\n"
        "    c:f32[4] d:f32[10,4] = scan[\n"
        "      jaxpr={ lambda ; e:f32[4] f:f32[4]. let g:f32[4] = add e f in (g, e) }\n"
        "      length=10\n"
        "      num_carry=1\n"
        "      num_consts=0\n"
        "      reverse=False\n"
        "      unroll=1\n"
        "    ] a b\n"
        "  in (c, d) }\n"
    )
    first, p = _first_error(tmp_path, text)
    assert first == (
        f"{p}:2:5: error: scan: operand 1 (xs) has type f32[9,4], but jaxpr expects f32[4] with a leading axis of 10 [E110]"
    )


def test_unknown_primitive_is_a_warning(tmp_path):
    r, p = _run(
        tmp_path, "{ lambda ; a:f32[3]. let\n    b:f32[3] = frobnicate[k=1] a\n  in (b,) }\n"
    )
    assert r.exit_code == 0
    assert r.stdout == ""
    assert r.stderr.splitlines()[0] == (
        f"{p}:2:5: warning: unknown primitive 'frobnicate': result types taken from the binders"
        " (check passes it; run and differentiation (jvp, grad, ...) will fail on it) [W001]"
    )


def test_check_ends_with_a_summary_as_ruff_does(tmp_path):
    """One line on standard error after the diagnostics: what was found, in how many files
    (warnings counted apart); `-q` leaves it out; a machine document has none."""
    good = "{ lambda ; a:f32[3]. let b:f32[3] = sin a in (b,) }\n"
    bad = "{ lambda ; a:f32[3]. let\n    b:f32[2] = sin a\n    c:f32[2] = cos a\n  in (c,) }\n"
    odd = "{ lambda ; a:f32[3]. let\n    b:f32[3] = frobnicate a\n  in (b,) }\n"
    for name, text in (("good", good), ("bad1", bad), ("bad2", bad), ("odd", odd)):
        (tmp_path / f"{name}.jaxpr").write_text(text)
    f = {n: str(tmp_path / f"{n}.jaxpr") for n in ("good", "bad1", "bad2", "odd")}
    runner = CliRunner()
    r = runner.invoke(main, ["check", f["good"]])
    assert (r.exit_code, r.stderr) == (0, "All checks passed.\n")
    r = runner.invoke(main, ["check", f["good"], f["odd"]])
    assert r.exit_code == 0 and r.stderr.endswith("\nAll checks passed (1 warning).\n")
    r = runner.invoke(main, ["check", f["bad1"], f["bad2"], f["odd"], f["good"]])
    assert r.exit_code == 1
    assert r.stderr.endswith("\nFound 4 errors in 2 files (1 warning).\n"), r.stderr
    r = runner.invoke(main, ["check", "--werror", f["odd"]])
    assert r.exit_code == 1 and r.stderr.endswith("\nFound 1 error in 1 file.\n")
    (tmp_path / "nul.jaxpr").write_bytes(b"{ lambda \0")  # refused as it is read: counted too
    r = runner.invoke(main, ["check", str(tmp_path / "nul.jaxpr"), f["good"]])
    assert r.exit_code == 1 and r.stderr.endswith("[E002]\nFound 1 error in 1 file.\n"), r.stderr
    r = runner.invoke(main, ["check", "-q", f["bad1"]])
    assert r.exit_code == 1 and "Found" not in r.stderr and "[E111]" in r.stderr
    r = runner.invoke(main, ["check", "-q", f["good"]])
    assert (r.exit_code, r.output) == (0, "")
    r = runner.invoke(main, ["check", f["bad1"], "--output-format", "json"])
    assert "Found" not in r.output


def test_stdin_and_help():
    r = CliRunner().invoke(
        main, ["check", "-"], input="{ lambda ; a:f32[3]. let\n    b:f32[2] = sin a\n  in (b,) }\n"
    )
    assert r.exit_code == 1
    assert r.stderr.startswith(
        "<stdin>:2:5: error: sin: result type f32[2] does not match inferred f32[3] [E111]"
    )
    h = CliRunner().invoke(main, ["check", "--help"])
    assert h.exit_code == 0 and "Example" in h.output and "jaxprtool check f.jaxpr" in h.output


def test_api_on_built_ir():
    """The checker works on IR built by passes: Var identity, not names."""
    x = Var(ShapedArray((3,), "f32"), "x")
    y = Var(ShapedArray((3,), "f32"), "y")
    ghost = Var(ShapedArray((3,), "f32"), "ghost")
    good = Jaxpr((), (x,), (Eqn("sin", (x,), (y,), {}),), (y,))
    assert check(good) == []
    bad = Jaxpr((), (x,), (Eqn("sin", (ghost,), (y,), {}), Eqn("cos", (x,), (y,), {})), (ghost,))
    msgs = [d.message for d in errors(check(bad))]
    assert msgs == [
        "variable 'ghost' used before definition",
        "variable 'y' is bound more than once",
        "output variable 'ghost' is not defined",
    ]
    assert all(isinstance(d, Diagnostic) and d.kind == "error" for d in check(bad))
    assert [d.code for d in check(bad)] == ["E101", "E102", "E103"]  # (issue 39, item 7)


def test_literal_value_must_fit_its_type(tmp_path):
    first, p = _first_error(
        tmp_path, "{ lambda ; a:i32[3]. let\n    b:i32[3] = add a 1.5:i32[]\n  in (b,) }\n"
    )
    assert first == f"{p}:2:5: error: literal 1.5 cannot have type i32[] [E105]"
    r, p = _run(tmp_path, "{ lambda ; a:u8[3]. let\n    b:u8[3] = add a 300:u8[]\n  in (b,) }\n")
    assert (
        r.stderr.splitlines()[0] == f"{p}:2:5: error: literal 300 is out of range for u8[] [E105]"
    )
