"""`jaxprtool run`, `compile` and `trace` through the CLI, error paths included."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from jaxprtool.cli import main

PROG = textwrap.dedent(
    """\
    { lambda ; a:f32[3,4] b:f32[4]. let
        c:f32[3,4] = sin a
        d:f32[1,4] = broadcast_in_dim[broadcast_dimensions=(1,) shape=(1, 4) sharding=None] b
        e:f32[3,4] = add c d
        f:f32[3] = reduce_sum[axes=(1,) out_sharding=None] e
      in (f, e) }
    """
)

NAN_PROG = textwrap.dedent(
    """\
    { lambda ; a:f32[3]. let
        b:f32[3] = sub a 1.0:f32[]
        c:f32[3] = log b
        d:f32[3] = mul c 2.0:f32[]
      in (d,) }
    """
)

CONST_PROG = textwrap.dedent(
    """\
    { lambda w:f32[2]; a:f32[2]. let
        b:f32[2] = mul w a
      in (b,) }
    """
)

LOOP_NAN = textwrap.dedent(
    """\
    { lambda ; a:f32[]. let
        b:f32[] = while[
          body_jaxpr={ lambda ; c:f32[]. let
              d:f32[] = sub c 1.0:f32[]
              e:f32[] = sqrt d
            in (e,) }
          body_nconsts=0
          cond_jaxpr={ lambda ; f:f32[]. let g:bool[] = gt f 0.5:f32[] in (g,) }
          cond_nconsts=0
        ] a
      in (b,) }
    """
)


def expected(a, b):
    e = np.sin(a) + b[None, :]
    return e.sum(1), e


@pytest.fixture
def prog(tmp_path):
    p = tmp_path / "p.jaxpr"
    p.write_text(PROG)
    return p


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_run_npz_roundtrip(prog, tmp_path):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    np.savez(tmp_path / "in.npz", arg0=a, arg1=b)
    out = tmp_path / "out.npz"
    r = invoke("run", prog, "--args", tmp_path / "in.npz", "-o", out)
    assert r.exit_code == 0, r.output
    with np.load(out, allow_pickle=False) as f:
        assert sorted(f.files) == ["out0", "out1"]
        want = expected(a, b)
        np.testing.assert_allclose(f["out0"], want[0], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(f["out1"], want[1], rtol=1e-5, atol=1e-5)
    # np.savez's default names and separate .npy files are accepted too
    np.savez(tmp_path / "plain.npz", a, b)
    r = invoke("run", prog, "--args", tmp_path / "plain.npz", "-o", tmp_path / "o2.npz")
    assert r.exit_code == 0, r.output
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    r = invoke(
        "run",
        prog,
        "--arg",
        tmp_path / "a.npy",
        "--arg",
        tmp_path / "b.npy",
        "-o",
        tmp_path / "o3.npz",
    )
    assert r.exit_code == 0, r.output
    with np.load(tmp_path / "o3.npz") as f:
        np.testing.assert_allclose(f["out0"], expected(a, b)[0], rtol=1e-5, atol=1e-5)


def test_run_summary_and_repeat(prog):
    r = invoke("run", prog, "--random", "0")
    assert r.exit_code == 0, r.output
    assert "out0" in r.output and "f32[3]" in r.output and "f32[3,4]" in r.output
    r = invoke("run", prog, "--random", "0", "--repeat", "3")
    assert r.exit_code == 0, r.output
    assert "compile:" in r.output and "median" in r.output


def test_run_eager_matches(prog, tmp_path):
    r1 = invoke("run", prog, "--random", "3", "-o", tmp_path / "c.npz")
    r2 = invoke("run", prog, "--random", "3", "--eager", "-o", tmp_path / "e.npz")
    assert r1.exit_code == 0 and r2.exit_code == 0, r1.output + r2.output
    with np.load(tmp_path / "c.npz") as c, np.load(tmp_path / "e.npz") as e:
        for k in ("out0", "out1"):
            np.testing.assert_allclose(c[k], e[k], rtol=1e-6)


def test_trace_prints_each_equation(prog):
    r = invoke("run", prog, "--random", "0", "--eager", "--trace")
    assert r.exit_code == 0, r.output
    for name in ("c = sin", "d = broadcast_in_dim", "e = add", "f = reduce_sum"):
        assert name in r.output


def test_debug_nans_finds_the_log(tmp_path):
    p = tmp_path / "nan.jaxpr"
    p.write_text(NAN_PROG)
    np.save(tmp_path / "x.npy", np.array([2.0, 0.5, 3.0], np.float32))
    r = invoke("run", p, "--arg", tmp_path / "x.npy", "--eager", "--debug-nans")
    assert r.exit_code == 1
    assert f"{p}:3:5: error: 'log' produced NaN/inf: c:f32[3] = log b" in r.output
    assert "input b: f32[3]" in r.output
    assert "mul" not in r.output.split("error:")[1].splitlines()[0]


def test_debug_nans_inside_loop_names_iteration(tmp_path):
    p = tmp_path / "loop.jaxpr"
    p.write_text(LOOP_NAN)
    np.save(tmp_path / "x.npy", np.array(1.5, np.float32))
    r = invoke("run", p, "--arg", tmp_path / "x.npy", "--debug-nans")
    assert r.exit_code == 1
    assert "'sqrt' produced NaN/inf" in r.output
    assert "in while iter 1" in r.output
    assert f"{p}:5:11: error:" in r.output


def test_run_errors(prog, tmp_path):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((4, 3)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    np.savez(tmp_path / "bad.npz", arg0=a, arg1=b)
    r = invoke("run", prog, "--args", tmp_path / "bad.npz")
    assert r.exit_code == 1
    # located at the input binder it does not fit
    assert r.output.splitlines()[0] == (
        f"{prog}:1:12: error: argument 0 (a): expected f32[3,4], got f32[4,3]"
    )

    np.savez(tmp_path / "dt.npz", arg0=a.T.astype(np.float64), arg1=b)
    r = invoke("run", prog, "--args", tmp_path / "dt.npz")
    assert r.output.splitlines()[0] == (
        f"{prog}:1:12: error: argument 0 (a): expected f32[3,4], got f64[3,4]"
    )

    np.savez(tmp_path / "three.npz", arg0=a.T, arg1=b, arg2=b)
    r = invoke("run", prog, "--args", tmp_path / "three.npz")
    assert r.exit_code == 1
    assert r.output.splitlines()[0] == f"{prog}:1:1: error: expected 2 arguments (a b), got 3"

    np.savez(tmp_path / "keys.npz", x=a.T, y=b)
    r = invoke("run", prog, "--args", tmp_path / "keys.npz")
    assert r.exit_code == 1
    assert "expected keys arg0, arg1, ... (or arr_0, ...), found x, y" in r.output

    r = invoke("run", prog)
    assert r.exit_code == 1
    assert (
        f"{prog}:1:1: error: the program takes 2 arguments (a b) and none was given: pass "
        "--random SEED, --input 'TYPE=VALUES' (one per argument), --arg X.npy (one per "
        "argument) or --args IN.npz (arg0, arg1, ...)"
    ) in r.output

    r = invoke("run", prog, "--input", "f32[3,4]=" + " ".join(["1"] * 12), "--input", "f32[2]=1 2")
    assert r.exit_code == 1
    assert "argument 1 (b): expected f32[4], got f32[2]" in r.output
    col = r.output.split(":1:", 1)[1].split(":", 1)[0]  # the column of binder b on line 1
    assert prog.read_text().splitlines()[0][int(col) - 1 :].startswith("b:f32[4]"), r.output

    r = invoke("run", prog, "--args", tmp_path / "missing.npz")
    assert r.exit_code == 1
    assert "cannot read arguments file" in r.output and "no such file" in r.output

    r = invoke("run", prog, "--random", "0", "--dim", "b")
    assert r.exit_code == 2

    r = invoke("run", prog, "--random", "0", "--args", tmp_path / "bad.npz")
    assert r.exit_code == 2


def test_pickled_npz_refused(prog, tmp_path):
    obj = np.array([{"x": 1}, None], dtype=object)
    np.savez(tmp_path / "p.npz", arg0=obj, arg1=np.ones(4, np.float32))
    r = invoke("run", prog, "--args", tmp_path / "p.npz")
    assert r.exit_code == 1
    assert "it holds an array of Python objects" in r.output


def test_consts(tmp_path):
    p = tmp_path / "c.jaxpr"
    p.write_text(CONST_PROG)
    np.save(tmp_path / "a.npy", np.array([1.0, 2.0], np.float32))
    r = invoke("run", p, "--arg", tmp_path / "a.npy")
    assert r.exit_code == 1
    assert r.output.startswith("error: the program has 1 constant")
    for part in ("w:f32[2]", "--consts C.npz", "--consts-out C.npz", "--random SEED"):
        assert part in r.output
    np.savez(tmp_path / "c.npz", const0=np.array([3.0, 4.0], np.float32))
    r = invoke(
        "run",
        p,
        "--arg",
        tmp_path / "a.npy",
        "--consts",
        tmp_path / "c.npz",
        "-o",
        tmp_path / "o.npz",
    )
    assert r.exit_code == 0, r.output
    with np.load(tmp_path / "o.npz") as f:
        np.testing.assert_array_equal(f["out0"], [3.0, 8.0])
    r = invoke("run", p, "--random", "1")
    assert r.exit_code == 0, r.output


def test_output_is_atomic(prog, tmp_path):
    out = tmp_path / "nowhere" / "o.npz"
    r = invoke("run", prog, "--random", "0", "-o", out)
    assert r.exit_code == 2  # an output folder that does not exist is bad usage
    assert not out.exists()
    good = tmp_path / "o.npz"
    r = invoke("run", prog, "--random", "0", "-o", good)
    assert r.exit_code == 0
    assert [f for f in os.listdir(tmp_path) if f.startswith(".jaxprtool-")] == []


def test_gpu_missing_is_an_error(prog):
    import jax

    try:
        jax.devices("gpu")
        pytest.skip("a GPU is present")
    except RuntimeError:
        pass
    r = invoke("run", prog, "--random", "0", "--device", "gpu")
    assert r.exit_code == 1
    assert "error: device 'gpu' is not available: JAX found no gpu backend" in r.output
    r = invoke("compile", prog, "--emit", "optimized-hlo", "--device", "gpu")
    assert r.exit_code == 1
    assert "device 'gpu' is not available" in r.output


def test_refused_primitive(tmp_path):
    p = tmp_path / "cb.jaxpr"
    p.write_text(
        "{ lambda ; a:f32[3]. let\n"
        "    b:f32[3] = pure_callback[callback=f result_avals=(ShapedArray(float32[3]),) sharding=None vmap_method=sequential] a\n"
        "  in (b,) }\n"
    )
    r = invoke("run", p, "--random", "0")
    assert r.exit_code == 1
    assert f"{p}:2:5: error: cannot run 'pure_callback' calls back into Python" in r.output


def test_ffi_call_refusal_names_the_missing_target(tmp_path):
    """ffi_call (as JAX prints jax.ffi.ffi_call): refused at its location, naming the FFI
    target the text lacks; JAX's own words for its derivative; no output file written."""
    p = tmp_path / "ffi.jaxpr"
    p.write_text(
        "{ lambda ; a:f32[3]. let\n"
        "    b:f32[3] = ffi_call[attributes=() custom_call_api_version=4 has_side_effect=False "
        "input_layouts=((0,),) input_output_aliases=() legacy_backend_config=None "
        "output_layouts=((0,),) result_avals=(ShapedArray(float32[3]),) target_name=my_target "
        "vmap_method=sequential] a\n"
        "  in (b,) }\n"
    )
    out = tmp_path / "out.npz"
    r = invoke("run", p, "--random", "0", "-o", out)
    assert r.exit_code == 1 and not out.exists()
    assert f"{p}:2:5: error: cannot run 'ffi_call' calls the XLA FFI target 'my_target'" in (
        r.output
    )
    assert "jax.ffi.register_ffi_target" in r.output and "Traceback" not in r.output
    r = invoke("jvp", p)
    assert r.exit_code == 1
    assert f"{p}:2:5: error: Differentiation rule for 'ffi_call' not implemented" in r.output


def test_compile_emits(prog, tmp_path):
    r = invoke("compile", prog, "--emit", "stablehlo")
    assert r.exit_code == 0, r.output
    assert "stablehlo.sine" in r.output and "stablehlo.reduce" in r.output
    r = invoke("compile", prog, "--emit", "stablehlo", "--device", "gpu")
    assert r.exit_code == 0, r.output
    assert "stablehlo.sine" in r.output
    r = invoke("compile", prog, "--emit", "hlo")
    assert r.exit_code == 0, r.output
    assert "HloModule" in r.output and "sine(" in r.output
    out = tmp_path / "opt.txt"
    r = invoke("compile", prog, "--emit", "optimized-hlo", "--stats", "-o", out)
    assert r.exit_code == 0, r.output
    assert "HloModule" in out.read_text()
    assert (
        "flops:" in r.output
        and "bytes accessed:" in r.output
        and "argument size bytes: 64" in r.output
    )


def test_symbolic_dims(tmp_path):
    p = tmp_path / "s.jaxpr"
    p.write_text("{ lambda ; a:f32[b,3]. let c:f32[b,3] = sin a in (c,) }\n")
    r = invoke("run", p, "--random", "0")
    assert r.exit_code == 1
    assert "symbolic dimension 'b' has no size: pass --dim b=N" in r.output
    r = invoke("run", p, "--random", "0", "--dim", "b=5", "-o", tmp_path / "o.npz")
    assert r.exit_code == 0, r.output
    with np.load(tmp_path / "o.npz") as f:
        assert f["out0"].shape == (5, 3)
    np.save(tmp_path / "x.npy", np.ones((7, 3), np.float32))
    r = invoke("run", p, "--arg", tmp_path / "x.npy", "-o", tmp_path / "o2.npz")
    assert r.exit_code == 0, r.output
    r = invoke("compile", p, "--dim", "b=2")
    assert r.exit_code == 0 and "tensor<2x3xf32>" in r.output


def test_trace_command(tmp_path, monkeypatch):
    (tmp_path / "usermod_bk.py").write_text(
        "import jax.numpy as jnp\n\ndef f(x, y):\n    return jnp.sin(x) @ y\n"
    )
    monkeypatch.chdir(tmp_path)
    r = invoke("trace", "usermod_bk:f", "--arg", "f32[3,4]", "--arg", "f32[4]")
    assert r.exit_code == 0, r.output
    assert r.output.startswith("{ lambda ; a:f32[3,4] b:f32[4]. let")
    assert "sin a" in r.output and "dot_general" in r.output
    r = invoke("trace", "usermod_bk:nope", "--arg", "f32[3]")
    assert r.exit_code == 1 and "has no attribute 'nope'" in r.output
    r = invoke("trace", "usermod_bk:f", "--arg", "f32(3)")
    assert r.exit_code == 2


@pytest.mark.gpu
def test_run_on_gpu(prog, tmp_path):
    import jax

    try:
        jax.devices("gpu")
    except RuntimeError:
        pytest.skip(
            f"no GPU: JAX has no gpu backend here (JAX_PLATFORMS={os.environ.get('JAX_PLATFORMS')})"
        )
    r1 = invoke("run", prog, "--random", "0", "--device", "gpu", "-o", tmp_path / "g.npz")
    r2 = invoke("run", prog, "--random", "0", "-o", tmp_path / "c.npz")
    assert r1.exit_code == 0 and r2.exit_code == 0, r1.output + r2.output
    with np.load(tmp_path / "g.npz") as g, np.load(tmp_path / "c.npz") as c:
        np.testing.assert_allclose(g["out0"], c["out0"], rtol=2e-3, atol=2e-3)


KEY_PROG = textwrap.dedent(
    """\
    { lambda ; k:key<fry>[]. let
        b:u32[3] = random_bits[bit_width=32 shape=(3,)] k
        c:key<fry>[2] = random_split[shape=(2,)] k
      in (b, c) }
    """
)


def test_key_inputs_are_key_data(tmp_path):
    import jax

    @jax.jit  # (JAX's key, bits and split in one XLA compile, not one per operation)
    def oracle():
        data = jax.random.key_data(jax.random.key(7))
        key = jax.random.wrap_key_data(data, impl="threefry2x32")
        return data, jax.random.bits(key, (3,), np.uint32), jax.random.split(key, 2)

    data, bits, split = oracle()
    data = np.asarray(data)
    p = tmp_path / "k.jaxpr"
    p.write_text(KEY_PROG)
    np.save(tmp_path / "k.npy", data)
    r = invoke("run", p, "--arg", tmp_path / "k.npy", "-o", tmp_path / "o.npz")
    assert r.exit_code == 0, r.output
    with np.load(tmp_path / "o.npz") as f:
        np.testing.assert_array_equal(f["out0"], bits)
        np.testing.assert_array_equal(f["out1"], jax.random.key_data(split))
    np.save(tmp_path / "bad.npy", np.zeros(3, np.uint32))
    r = invoke("run", p, "--arg", tmp_path / "bad.npy")
    assert r.exit_code == 1
    assert "argument 0 (k): expected key<fry>[] (key data u32[2]), got u32[3]" in r.output


def test_npy_given_as_npz(prog, tmp_path):
    np.save(tmp_path / "a.npy", np.ones((3, 4), np.float32))
    r = invoke("run", prog, "--args", tmp_path / "a.npy")
    assert r.exit_code == 1
    assert "is not an .npz archive (use --arg for a single .npy array)" in r.output
    (tmp_path / "junk.npz").write_bytes(b"not a zip at all")
    r = invoke("run", prog, "--args", tmp_path / "junk.npz")
    assert r.exit_code == 1
    assert "cannot read arguments from" in r.output
    assert "is not .npy or .npz data (pickles and other formats are never read)" in r.output


def test_trace_a_file_with_static_keywords_iree_types_and_x64(tmp_path, monkeypatch):
    """`trace w/mod.py:f` (a module that is not importable from the folder), `--arg 3x4xf32`
    (run --input's other spelling), `--kw NAME=JSON` and `--x64` (issue 39, item 14): the
    jaxpr is JAX's own for the same call."""
    import functools

    import jax
    import jax.numpy as jnp

    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "usermod_kw.py").write_text(
        "import jax.numpy as jnp\n\ndef f(x, y, depth=1, scale=1.0):\n"
        "    for _ in range(depth):\n        x = jnp.sin(x) * scale\n    return x @ y\n"
    )
    monkeypatch.chdir(tmp_path)
    argv = ["trace", "w/usermod_kw.py:f", "--arg", "3x4xf32", "--arg", "f32[4]"]
    r = invoke(*argv, "--kw", "depth=2", "--kw", "scale=0.5")
    assert r.exit_code == 0, r.output

    def f(x, y, depth=1, scale=1.0):
        for _ in range(depth):
            x = jnp.sin(x) * scale
        return x @ y

    want = jax.make_jaxpr(functools.partial(f, depth=2, scale=0.5))(
        jax.ShapeDtypeStruct((3, 4), jnp.float32), jax.ShapeDtypeStruct((4,), jnp.float32)
    )
    assert r.output == str(want) + "\n"
    (tmp_path / "w" / "usermod_wide.py").write_text(
        "import jax.numpy as jnp\n\ndef h(x):\n    return x.astype(jnp.float64) * 2\n"
    )
    r = invoke("trace", "w/usermod_wide.py:h", "--arg", "f32[3]", "--x64")
    assert r.exit_code == 0 and "new_dtype=float64" in r.output and "f64[3]" in r.output
    r = invoke(*argv, "--kw", "depth=two")
    assert r.exit_code == 2 and "bad --kw 'depth=two': the value is not JSON" in r.output
    r = invoke("trace", "w/missing.py:f", "--arg", "f32[]")
    assert r.exit_code == 1 and "cannot import 'w/missing.py': no such file" in r.output


def test_optimized_hlo_carries_no_python_frames_of_the_tool():
    """XLA's metadata kept 50+ lines of the tool's own stack (click/core.py, evaluator.py)
    that JAX recorded while tracing (issue 45, item 19): only the op_names, which name the
    jaxpr's FILE:LINE:COL, are left; XLA's older form (source_file=, source_line=) too."""
    from pathlib import Path

    from jaxprtool.backend.lowering import without_python_frames

    sample = Path(__file__).resolve().parents[1] / "samples" / "loss.jaxpr"
    r = invoke("compile", sample, "--emit", "optimized-hlo")
    assert r.exit_code == 0, r.output
    for python in (".py", "StackFrames", "FileNames", "stack_frame_id", "source_file"):
        assert python not in r.output, python
    assert 'op_name="jit(loss)/loss.jaxpr:' in r.output and "\n\n\n" not in r.output
    old = (
        '%t = f32[2]{0} tanh(%x), metadata={op_name="jit(f)/f.jaxpr:6:5/tanh" '
        'source_file="/x/click/core.py" source_line=1653 source_end_line=1653}\n'
    )
    assert without_python_frames(old) == (
        '%t = f32[2]{0} tanh(%x), metadata={op_name="jit(f)/f.jaxpr:6:5/tanh"}\n'
    )


def test_xla_names_point_back_into_the_jaxpr_file(tmp_path):
    """compile names XLA's module after the file (jit_loss, not jit_f), its parameters after
    the binders (not xs[0]) and each operation's op_name after the equation's FILE:LINE:COL,
    so that XLA's dumps and a profiler's trace point into the jaxpr (issue 39, item 15); run
    --profile DIR writes JAX's profiler trace there."""
    from pathlib import Path

    sample = Path(__file__).resolve().parents[1] / "samples" / "loss.jaxpr"
    text = sample.read_text()
    f = tmp_path / "my-loss.jaxpr"
    f.write_text(text)
    r = invoke("compile", f, "--emit", "optimized-hlo")
    assert r.exit_code == 0, r.output
    assert r.output.startswith("HloModule jit_my_loss,")
    line = next(i for i, x in enumerate(text.splitlines(), 1) if "= tanh" in x)
    assert f'op_name="jit(my_loss)/my-loss.jaxpr:{line}:5/tanh"' in r.output
    assert 'op_name="a"' in r.output and "xs[0]" not in r.output
    prof = tmp_path / "prof"
    r = invoke("run", f, "--random", "0", "--profile", prof, "--print-values", "none")
    assert r.exit_code == 0, r.output
    assert list(prof.rglob("*.xplane.pb")) and list(prof.rglob("*.trace.json.gz"))


SHADOWING = ("math", "os", "functools", "typing", "threading", "numpy")
#: a child process traces a user's file of each name (one that took the module's place in
#: sys.modules broke the tool, so the test process itself must not import them)
TRACE_EACH = """
import json, sys
from click.testing import CliRunner
from jaxprtool.cli import main
out = {}
for name in sys.argv[1:]:
    r = CliRunner().invoke(main, ["trace", f"utils/{name}.py:f", "--arg", "f32[3]"])
    out[name] = [r.exit_code, r.stdout, r.stderr]
print(json.dumps(out))
"""


def test_trace_a_file_named_like_a_module_the_tool_uses(tmp_path):
    """`trace utils/math.py:f` ran the user's file as `sys.modules['math']`: files named math,
    os, functools, typing, threading or numpy gave internal errors.  Each is traced under a
    private name; its module-level print goes to standard error, never into the jaxpr."""
    import json
    import subprocess
    import sys

    import jax
    import jax.numpy as jnp

    (tmp_path / "utils").mkdir()
    for name in SHADOWING:
        (tmp_path / "utils" / f"{name}.py").write_text(
            f"import jax.numpy as jnp\nprint('loading {name}')\n\n"
            "def f(x):\n    print('tracing')\n    return jnp.cos(x) * 2\n"
        )
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    done = subprocess.run(
        [sys.executable, "-c", TRACE_EACH, *SHADOWING],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    want = str(jax.make_jaxpr(lambda x: jnp.cos(x) * 2)(jnp.ones(3, jnp.float32))) + "\n"
    for name, (code, stdout, stderr) in json.loads(done.stdout).items():
        assert (code, stdout) == (0, want), (name, stdout, stderr)
        assert stderr == f"loading {name}\ntracing\n", (name, stderr)


def test_trace_of_a_module_name_python_took_names_the_file(tmp_path, monkeypatch):
    """`trace math:f` beside a user's math.py imported Python's math and said it has no `f`:
    the message says whose `math` it is and how to name the file."""
    (tmp_path / "math.py").write_text("def f(x):\n    return x\n")
    monkeypatch.chdir(tmp_path)
    r = invoke("trace", "math:f", "--arg", "f32[]")
    assert r.exit_code == 1
    assert f"error: module 'math' is not {tmp_path / 'math.py'}: the name is taken by " in r.stderr
    assert "give the file: trace math.py:FUNCTION" in r.stderr
