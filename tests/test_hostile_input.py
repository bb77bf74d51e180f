"""Hostile input, absurd sizes, output safety and check-grad verdicts (issues 14 and 17).

Each test feeds what an attacker or a tired user would, and checks the exact behaviour:
a located message and exit 1 (2 for usage), no traceback, no clobbered or partial file.
"""

from __future__ import annotations

import os
import stat
import threading

import numpy as np
import pytest
from click.testing import CliRunner

from jaxprtool.cli import main

SIN = "{ lambda ; a:f32[3]. let b:f32[3] = sin a in (b,) }\n"


def tool(*argv, text: str | None = None):
    return CliRunner().invoke(main, ["--no-color", *map(str, argv)], input=text)


def error_line(r) -> str:
    return next(line for line in r.stderr.splitlines() if "error:" in line)


def coded(cmd: str, code: str) -> str:
    """The end of `check`'s line: its code (`check`, the linter, shows it; issue 39)."""
    return f" [{code}]" if cmd.split()[0] == "check" else ""


# ---------------------------------------------------------------- absurd text


def test_a_5000_digit_dimension_is_a_located_error():
    r = tool("check", "-", text="{ lambda ; a:f32[" + "9" * 5000 + "]. let  in (a,) }")
    assert r.exit_code == 1
    assert error_line(r) == (
        "<stdin>:1:18: error: a number of 5000 digits is too long (at most 400) [E003]"
    )
    assert "Traceback" not in r.output and "internal error" not in r.output
    assert max(map(len, r.stderr.splitlines())) < 200  # the quoted line is an excerpt


def test_a_dimension_beyond_int64_is_a_located_error():
    r = tool("check", "-", text="{ lambda ; a:f32[99999999999999999999]. let  in (a,) }")
    assert r.exit_code == 1
    assert error_line(r).startswith("<stdin>:1:14: error: dimension too large in type")


def test_dtype_object_is_refused_before_jax_sees_it():
    text = "{ lambda ; a:f32[3]. let b:object[3] = convert_element_type[new_dtype=object weak_type=False] a in (b,) }"
    r = tool("run", "-", "--random", "0", text=text)
    assert r.exit_code == 1
    assert error_line(r) == "<stdin>:1:28: error: unknown dtype 'object'"


def test_malformed_dimension_numbers_print_back_and_are_located_at_check():
    """A dimension list the parser keeps as text (`[0];`) is printed back by fmt as it was
    written (dot_general's print rule crashed on it) and refused, located, by check."""
    text = (
        "{ lambda ; a:f32[3] b:f32[3]. let c:f32[] = dot_general[dimension_numbers="
        "(([0], [0];), ([], [])) preferred_element_type=float32] a b in (c,) }"
    )
    r = tool("fmt", "-", text=text)
    assert r.exit_code == 0, r.output
    assert "dimension_numbers=(([0], [0];), ([], []))" in r.stdout
    r = tool("check", "-", text=text)
    assert r.exit_code == 1
    assert error_line(r).startswith("<stdin>:1:35: error: dot_general: malformed parameter value")
    assert "internal error" not in r.output


def test_an_enum_written_as_a_call_is_a_located_error_at_run():
    text = (
        "{ lambda ; a:f32[3,3]. let b:f32[3,3] = dot_general[dimension_numbers=(([1], [0]), ([], []))"
        " precision=Precision.HIGHEST(1) preferred_element_type=float32] a a in (b,) }"
    )
    r = tool("run", "-", "--random", "0", text=text)
    assert r.exit_code == 1
    assert error_line(r) == (
        "<stdin>:1:28: error: cannot run 'dot_general': parameter value "
        "Precision.HIGHEST(1) cannot be reconstructed from the text"
    )


def test_an_unknown_parameter_is_located_when_jax_refuses_to_compile_it():
    r = tool(
        "run",
        "-",
        "--random",
        "0",
        text="{ lambda ; a:f32[3]. let b:f32[3] = sin[bogus=1] a in (b,) }",
    )
    assert r.exit_code == 1
    line = error_line(r)
    assert line.startswith("<stdin>:1:26: error: 'sin' could not be compiled by JAX: TypeError:")
    assert "bogus" in line and "internal error" not in r.output


def test_python_in_a_parameter_is_never_run(tmp_path):
    marker = tmp_path / "ran"
    text = (
        "{ lambda ; a:f32[3]. let b:f32[3] = sin[name=__import__('pathlib').Path("
        f"'{marker}').write_text('x')] a in (b,) }}"
    )
    for cmd in (["check"], ["fmt"], ["grad", "--custom-rules", "body"], ["run", "--random", "0"]):
        tool(*cmd, "-", text=text)
    assert not marker.exists()


def test_non_scalar_grad_is_located_at_the_outputs():
    r = tool("grad", "-", text=SIN)
    assert r.exit_code == 1
    assert error_line(r).startswith(
        "<stdin>:1:43: error: Gradient only defined for scalar-output functions."
    )
    assert "jaxprtool jacrev" in error_line(r)


# ---------------------------------------------------------------- output safety


def test_output_keeps_the_mode_of_the_file_it_replaces(tmp_path):
    f, out = tmp_path / "f.jaxpr", tmp_path / "out.jaxpr"
    f.write_text(SIN)
    out.write_text("old\n")
    os.chmod(out, 0o640)
    r = tool("opt", "-p", "dce", str(f), "-o", str(out))
    assert r.exit_code == 0, r.output
    assert stat.S_IMODE(out.stat().st_mode) == 0o640 and out.read_text() != "old\n"


def test_a_new_output_follows_the_umask(tmp_path):
    old = os.umask(0o027)
    try:
        r = tool("fmt", "-", "-o", tmp_path / "new.jaxpr", text=SIN)
    finally:
        os.umask(old)
    assert r.exit_code == 0
    assert stat.S_IMODE((tmp_path / "new.jaxpr").stat().st_mode) == 0o640


def test_output_onto_a_directory_or_a_missing_folder(tmp_path):
    r = tool("fmt", "-", "-o", tmp_path, text=SIN)
    assert r.exit_code == 2
    assert error_line(r) == f"error: cannot write '{tmp_path}': it is a directory"
    r = tool("fmt", "-", "-o", tmp_path / "no" / "x.jaxpr", text=SIN)
    assert r.exit_code == 2 and "does not exist" in error_line(r)
    assert sorted(os.listdir(tmp_path)) == []  # no temporary file left behind


def test_a_failing_command_leaves_its_input_and_output_intact(tmp_path):
    f, out = tmp_path / "f.jaxpr", tmp_path / "g.jaxpr"
    f.write_text(SIN)
    out.write_text("kept\n")
    r = tool("grad", str(f), "-o", str(out))  # non-scalar output: fails
    assert r.exit_code == 1
    assert f.read_text() == SIN and out.read_text() == "kept\n"
    assert sorted(os.listdir(tmp_path)) == ["f.jaxpr", "g.jaxpr"]
    r = tool("grad", str(f), "-o", str(f))  # the input as output: refused before anything
    assert r.exit_code == 2 and "is the same file as the input" in r.output
    assert f.read_text() == SIN


def test_a_symlinked_output_replaces_the_target_and_keeps_the_link(tmp_path):
    target = tmp_path / "target.jaxpr"
    target.write_text("old\n")
    link = tmp_path / "link.jaxpr"
    link.symlink_to(target)
    r = tool("fmt", "-", "-o", link, text=SIN)
    assert r.exit_code == 0
    assert link.is_symlink() and target.read_text() == SIN


def test_a_fifo_is_written_into_not_replaced(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()))
    reader.start()
    r = tool("fmt", "-", "-o", fifo, text=SIN)
    reader.join(10)
    assert r.exit_code == 0
    assert got == [SIN]
    assert stat.S_ISFIFO(fifo.stat().st_mode)


# ---------------------------------------------------------------- arrays from the user


def test_array_files_that_are_not_arrays(tmp_path):
    prog = tmp_path / "p.jaxpr"
    prog.write_text(SIN)
    (tmp_path / "empty.npy").write_bytes(b"")
    r = tool("run", prog, "--arg", tmp_path / "empty.npy")
    assert (
        error_line(r) == f"error: cannot read argument from '{tmp_path / 'empty.npy'}': it is empty"
    )
    np.save(tmp_path / "ok.npy", np.ones(3, np.float32))
    (tmp_path / "cut.npy").write_bytes((tmp_path / "ok.npy").read_bytes()[:-5])
    r = tool("run", prog, "--arg", tmp_path / "cut.npy")
    assert r.exit_code == 1 and "cannot read argument" in error_line(r)
    np.save(tmp_path / "obj.npy", np.array([{}, 1], dtype=object), allow_pickle=True)
    r = tool("run", prog, "--arg", tmp_path / "obj.npy")
    assert r.exit_code == 1 and "holds an array of Python objects" in error_line(r)


def test_arguments_from_standard_input_and_a_single_npy_output(tmp_path):
    import io

    prog = tmp_path / "p.jaxpr"
    prog.write_text(SIN)
    buf = io.BytesIO()
    x = np.array([0.1, 0.2, 0.3], np.float32)
    np.save(buf, x)
    r = CliRunner().invoke(
        main, ["run", str(prog), "--arg", "-", "-o", str(tmp_path / "y.npy")], input=buf.getvalue()
    )
    assert r.exit_code == 0, r.output
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), np.sin(x), rtol=1e-6)


# ---------------------------------------------------------------- check-grad verdicts

CURVY = (
    "{ lambda ; a:f32[8]. let b:f32[8] = mul a 40.0:f32[]; c:f32[8] = sin b; "
    "d:f32[] = reduce_sum[axes=(0,) out_sharding=None] c in (d,) }"
)


def test_check_grad_passes_a_correct_program_with_large_curvature():
    # sin(40 x): a float32 central difference with step 1e-3 has a truncation error of
    # about 40^3 * 1e-6 / 6 ~ 1e-2 relative, over the tolerance; float64 differences do not
    r = tool("check-grad", "-", text=CURVY)
    assert r.exit_code == 0, r.output
    assert "FAIL" not in r.stdout


def test_check_grad_still_fails_a_wrong_rule(tmp_path):
    from jaxprtool.record import define, prim

    plugin = tmp_path / "wrong.py"
    plugin.write_text(
        "from jaxprtool.plugins import defjvp, ops\n"
        "defjvp('sin', lambda g, x, **p: ops.mul(g, ops.mul(ops.lit(1.01, x), ops.cos(x))))\n"
    )
    rec = prim("sin")
    saved = {"jvp": rec.jvp, "jvp_kind": rec.jvp_kind, "plugin_sources": rec.plugin_sources}
    try:
        r = tool("--plugin", plugin, "check-grad", "-", text=CURVY)
    finally:
        define("sin", **saved)  # the plugin also recorded itself as sin's rule's source
    assert r.exit_code == 1
    assert "FAIL" in r.stdout


def test_check_grad_marks_a_tie_as_non_smooth_instead_of_failing(tmp_path):
    np.savez(tmp_path / "x.npz", arg0=np.array([0.0, 1.0, -2.0, 0.0], np.float32))
    text = (
        "{ lambda ; a:f32[4]. let b:f32[4] = abs a; "
        "c:f32[] = reduce_sum[axes=(0,) out_sharding=None] b in (c,) }"
    )
    r = tool("check-grad", "-", "--args", tmp_path / "x.npz", text=text)
    assert r.exit_code == 0, r.output
    assert "non-smooth at <stdin>:1:26" in r.stdout
    assert "FAIL" not in r.stdout


def test_check_grad_argnums_leaves_the_other_inputs_alone(tmp_path):
    # sqrt of a zero second moment: perturbing it gives NaN, so only x is checked
    text = (
        "{ lambda ; a:f32[3] b:f32[3]. let c:f32[3] = sqrt b; d:f32[3] = mul a c; "
        "e:f32[3] = sin a; f:f32[3] = add d e; g:f32[] = reduce_sum[axes=(0,) out_sharding=None] f "
        "in (g,) }"
    )
    np.savez(
        tmp_path / "x.npz",
        arg0=np.array([0.1, 0.2, 0.3], np.float32),
        arg1=np.zeros(3, np.float32),
    )
    both = tool("check-grad", "-", "--args", tmp_path / "x.npz", text=text)
    assert both.exit_code != 0
    only_x = tool("check-grad", "-", "--args", tmp_path / "x.npz", "--argnums", "0", text=text)
    assert only_x.exit_code == 0, only_x.output


# ---------------------------------------------------------------- resource limits

HUGE = (
    "{ lambda ; a:f32[]. let b:f32[100000,100000,100] = broadcast_in_dim["
    "broadcast_dimensions=() shape=(100000, 100000, 100) sharding=None] a in (b,) }"
)


@pytest.mark.parametrize(
    "cmd", [["run", "--random", "0"], ["run", "--random", "0", "--eager"], ["check-grad"]]
)
def test_absurd_memory_is_refused_before_anything_is_allocated(cmd):
    r = tool(*cmd, "-", text=HUGE)
    assert r.exit_code == (2 if cmd[0] == "check-grad" else 1)  # check-grad: 2 is "trouble"
    line = error_line(r)
    assert line.startswith("<stdin>:1:25: error: running this program needs about 3.6 TB")
    assert "over the limit of" in line and "JAXPRTOOL_MAX_MEMORY" in line


def test_the_memory_limit_can_be_set(monkeypatch):
    monkeypatch.setenv("JAXPRTOOL_MAX_MEMORY", "1K")
    r = tool("run", "-", "--random", "0", text="{ lambda ; a:f32[1024]. let  in (a,) }")
    assert r.exit_code == 1 and "over the limit of 1.0 KB" in error_line(r)
    monkeypatch.setenv("JAXPRTOOL_MAX_MEMORY", "1G")
    r = tool("run", "-", "--random", "0", text="{ lambda ; a:f32[1024]. let  in (a,) }")
    assert r.exit_code == 0, r.output


def test_bf16_arrays_saved_by_numpy_are_read_as_bf16(tmp_path):
    import ml_dtypes

    x = np.array([1.5, 2.0, -3.0], dtype=ml_dtypes.bfloat16)
    np.savez(tmp_path / "bf.npz", arg0=x)
    assert np.load(tmp_path / "bf.npz")["arg0"].dtype.kind == "V"  # what numpy gives back
    prog = tmp_path / "p.jaxpr"
    prog.write_text("{ lambda ; a:bf16[3]. let b:bf16[3] = mul a a in (b,) }\n")
    r = tool("run", prog, "--args", tmp_path / "bf.npz", "-o", tmp_path / "y.npy")
    assert r.exit_code == 0, r.output
    y = np.load(tmp_path / "y.npy").view(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(y.astype(np.float32), (x * x).astype(np.float32))


# ---------------------------------------------------------------- found by the fuzzer


def test_an_empty_tuple_broken_over_lines_reads_back_as_the_empty_tuple(tmp_path):
    """JAX prints an empty tuple parameter as a (empty) tuple of jaxprs, which a narrow width
    breaks over three lines (`new_sizes=(` ... `)`); read back, that is `()`, not an opaque
    value that the reshape rule refuses (the fuzzer's `fmt --width 1` finding)."""
    jax = pytest.importorskip("jax", reason="JAX prints the reference text")
    jaxpr = jax.make_jaxpr(lambda a: jax.numpy.reshape(a, ()))(np.ones((1,), np.float32))
    narrow = jaxpr.pretty_print(width=1, source_info=False) + "\n"
    assert "new_sizes=(\n        \n      )" in narrow  # JAX's own layout, the case in point
    p = tmp_path / "narrow.jaxpr"
    p.write_text(narrow)
    r = tool("check", p)
    assert r.exit_code == 0 and r.stderr == "All checks passed.\n", r.stderr
    r = tool("--jax-style", jax.__version__, "fmt", p)
    assert r.exit_code == 0 and r.stdout == jaxpr.pretty_print(source_info=False) + "\n"
    r = tool("--jax-style", jax.__version__, "fmt", "--width", "1", p)
    assert r.exit_code == 0 and r.stdout == narrow


def test_text_that_is_no_dimension_in_a_shape_parameter_is_refused():
    """`new_sizes=(let f = 1, 4)` was taken as a symbolic size: check passed and linearize
    printed the type `f32[let f = 1,4]`, which no reader accepts (a fuzz finding)."""
    text = (
        "{ lambda ; c:f32[1,4]. let\n"
        "    i:f32[1,4] = reshape[dimensions=None new_sizes=(let f = 1, 4) sharding=None] c\n"
        "  in (i,) }\n"
    )
    for cmd in ("check", "linearize", "vmap --axis-size 2"):
        r = tool(*cmd.split(), "-", text=text)
        assert r.exit_code == 1, (cmd, r.output)
        assert error_line(r) == (
            "<stdin>:2:5: error: reshape: malformed dimension 'let f = 1' in a parameter "
            "(expected an integer or a symbolic dimension)" + coded(cmd, "E110")
        ), (cmd, r.stderr)
        assert not r.stdout


def test_a_hash_right_after_a_parameter_value_is_part_of_it_on_one_line_or_several():
    """`sharding=N#one` read as `N#one` on one line but as `N` and a comment once `fmt
    --width` broke the list over lines (fmt was no fixed point: a fuzz finding)."""
    flat = "{ lambda ; . let\n    e:i32[3] = iota[dimension=0 dtype=int32 shape=(3,) sharding=N#one] \n  in (e,) }\n"
    r = tool("fmt", "--width", "40", "-", text=flat)
    assert r.exit_code == 0, r.stderr
    assert "      sharding=N#one\n    ] \n" in r.stdout
    again = tool("fmt", "--width", "40", "-", text=r.stdout)
    assert again.exit_code == 0 and again.stdout == r.stdout
    assert tool("fmt", "-", text=r.stdout).stdout == tool("fmt", "-", text=flat).stdout


def test_an_ill_typed_jit_keeps_its_outvars_when_printed_and_read_back():
    """The reader takes an outvar `_` of a jit's jaxpr to be the latest `_` binder of the
    jit result's type; in an ill-typed program that type is not the outvar's own, and fmt
    printed `in (_, _)`, read back as the second result twice (a fuzz finding: fmt was no
    fixed point).  The printer now names the outvar the reader would misread."""
    from jaxprtool.text import parser

    text = (
        "let h0 = { lambda ; f:f32[3]. let\n    h:f32[3] = sin f\n    j:f32[3,3] = cos h\n"
        "  in (h, j) } in\n{ lambda ; a:f32[3]. let\n"
        "    k:f32[3,3] l:f32[3,3] = jit[name=h0 jaxpr=h0] a\n  in (a,) }\n"
    )
    r = tool("fmt", "-", text=text)
    assert r.exit_code == 0, r.stderr
    inner = parser.parse(r.stdout).jaxpr.eqns[0].params["jaxpr"]
    assert inner.outvars == (inner.eqns[0].outputs[0], inner.eqns[1].outputs[0])
    assert tool("fmt", "-", text=r.stdout).stdout == r.stdout


def test_iota_without_a_dimension_is_refused_before_jax_sees_it():
    """`iota[dimension=None ...]` passed the checker (taken as 0) and then failed inside JAX's
    bind, unlocated: "JAX could not compile the program: TypeError: int() argument ..."."""
    text = (
        "{ lambda ; . let\n"
        "    z:u32[4] = iota[dimension=None dtype=uint32 shape=(4,) sharding=None] \n"
        "  in (z,) }\n"
    )
    for cmd in ("check", "run --random 0", "jvp"):
        r = tool(*cmd.split(), "-", text=text)
        assert r.exit_code == 1, (cmd, r.output)
        assert error_line(r) == (
            "<stdin>:2:5: error: iota: dimension=None: give the axis that counts up "
            "(dimension=0, ...)" + coded(cmd, "E110")
        ), (cmd, r.stderr)
        assert not r.stdout


@pytest.mark.parametrize("cmd", ["check", "vjp", "linearize", "run --random 0"])
def test_a_reduction_with_a_bare_integer_axis_is_refused(cmd):
    """`reduce_max[axes=0]` passed the checker; then the AD rule crashed ("internal error:
    'int' object is not iterable") and JAX's bind refused it (a fuzz finding)."""
    text = "{ lambda ; a:f32[3]. let\n    c:f32[] = reduce_max[axes=0 out_sharding=None] a\n  in (c,) }\n"
    r = tool(*cmd.split(), "-", text=text)
    assert r.exit_code == 1, r.output
    assert error_line(r) == (
        "<stdin>:2:5: error: reduce_max: axes=0 is no tuple of axes: write axes=(0,)"
        + coded(cmd, "E110")
    )
    assert "internal error" not in r.output and not r.stdout


def test_two_operands_side_by_side_are_no_symbolic_dimension():
    """`f32[ let 2,3]` was read as a symbolic dimension `let 2`; the cumulative-reduction
    JVP then compared it with an integer (internal error: '<' not supported between
    instances of 'str' and 'int'; a fuzz finding)."""
    text = (
        "{ lambda ; a:f32[ let 2,3]. let\n    c:f32[ let 2,3] = cummax[axis=0 reverse=False] a\n"
        "  in (c,) }\n"
    )
    for cmd in ("check", "vjp"):
        r = tool(cmd, "-", text=text)
        assert r.exit_code == 1, r.output
        assert error_line(r) == (
            "<stdin>:1:18: error: invalid dimension ' let 2' in type" + coded(cmd, "E001")
        )
    r = tool("check", "-", text="{ lambda ; a:f32[2*b + 1,floordiv(b, 2)]. let  in (a,) }\n")
    assert r.exit_code == 0, r.stderr


def test_a_jit_name_with_brackets_reads_back_on_one_line():
    """`jit[name=0:u32[] jaxpr=...]` read on one line ended the name at its own `]` (dce
    printed a program that did not parse: a fuzz finding)."""
    text = "{ lambda ; a:i32[3]. let\n    b:i32[3] = jit[name=0:u32[] jaxpr={ lambda ; a:i32[3]. let  in (a,) }] a\n  in (b,) }\n"
    r = tool("dce", "-", text=text)
    assert r.exit_code == 0, r.stderr
    assert r.stdout == text
