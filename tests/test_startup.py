"""Start-up (issue 13): commands that only read, transform and print a program import neither
jax nor, unless the text holds a numpy value, numpy and ml_dtypes (`jaxprtool/lazy.py`).
Each case runs the command in a fresh interpreter and looks at what it executed (the cases
of one property in turn in one interpreter, `_in_turn`: one start-up for them all); times
are measured by `make bench`, never here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[1]
ONE_EQN = "{ lambda ; a:f32[]. let b:f32[] = sin a in (b,) }\n"
#: a dtype parameter of numpy's own is a `lazy.DTypeName` in fmt, check and the AD commands
#: (numpy is not loaded for it)
WITH_DTYPE = (
    "{ lambda ; a:f32[3]. let\n"
    "    b:f64[3] = convert_element_type[new_dtype=float64 weak_type=False] a\n"
    "  in (b,) }\n"
)

#: runs each command line of its argument (a JSON list) in turn; after each, a row of what
#: the process has executed so far (`_in_turn`)
PROBE = r"""
import json, sys
from click.testing import CliRunner
from jaxprtool.cli import main

def executed(name):
    m = sys.modules.get(name)
    return m is not None and type(m).__name__ not in ("_LazyModule", "_ExecutedOnFirstUse")
rows = []
for args in json.loads(sys.argv[1]):
    r = CliRunner().invoke(main, args)
    rows.append({"rc": r.exit_code, "out": r.output, "numpy": executed("numpy"),
                 "ml_dtypes": executed("ml_dtypes"), "jax": "jax" in sys.modules})
print(json.dumps(rows))
"""


def _last_line(probe: str, *args: str, env=None) -> str:
    """The last line a probe printed, run as `python -c PROBE ARGS` from the repository."""
    out = subprocess.run(
        [sys.executable, "-c", probe, *args], capture_output=True, text=True, check=True,
        cwd=ROOT, env=env,
    )  # fmt: skip
    return out.stdout.strip().splitlines()[-1]


def _in_turn(probe: str, folder: Path, runs: list[tuple[str, list[str]]]) -> list[dict]:
    """Each (text, command line) of `runs` run in turn in one fresh interpreter (`probe`
    takes them as one JSON list and prints its rows as one): row k says what the process has
    executed once command k has run.  A module once executed stays so: a row where a module
    is not executed says that neither its command nor one before it executed it, which is
    what a fresh interpreter per command would say of each, in one start-up instead of
    one per command.  (Where one did execute it, its row and every row after it show it:
    `_first_with` names the first.)"""
    argv = []
    for k, (text, args) in enumerate(runs):
        f = folder / f"p{k}.jaxpr"
        f.write_text(text)
        argv.append([*args, str(f)])
    return json.loads(_last_line(probe, json.dumps(argv)))


def _first_with(rows: list[dict], runs, key: str) -> str:
    """Which command line of `runs` was the first whose row shows `key` (for a message)."""
    k = next((k for k, row in enumerate(rows) if row[key]), None)
    return "none" if k is None else " ".join(runs[k][1])


def _probe(tmp_path, text: str, *args: str) -> dict:
    return _in_turn(PROBE, tmp_path, [(text, list(args))])[0]


#: the command lines whose process executes neither numpy nor ml_dtypes (nor jax: those of
#: ONE_EQN), as (test, the text's name here, command line): run in turn in one interpreter
#: (`_in_turn`)
NUMPY_FREE = [
    *(("free", "ONE_EQN", a) for a in (
        ["fmt"], ["check"], ["jvp"], ["linearize"], ["vjp"], ["grad"], ["vmap", "--axis-size", "2"],
        ["dce"], ["canonicalize"], ["opt", "-p", "inline,simplify,fold,cse,dce"])),
    *(("int", "INT_PARAMS", a) for a in (
        ["fmt"], ["check"], ["jvp"], ["grad"], ["vmap", "--axis-size", "2"], ["canonicalize"])),
    ("dtype", "WITH_DTYPE", ["fmt"]),
    ("dtype", "WITH_DTYPE", ["check"]),
    ("numpy_dtype", "NUMPY_DTYPE", ["fmt"]),
    ("numpy_dtype", "NUMPY_DTYPE", ["grad"]),
    ("dot", "DOT_SUMMED", ["grad", "--argnums", "0,1"]),
]  # fmt: skip


@pytest.fixture(scope="module")
def numpy_free(tmp_path_factory) -> dict:
    """(test, text's name, command) -> (its row, {module: the first command line whose row
    executed it}) of NUMPY_FREE run in turn in one interpreter."""
    runs = [(globals()[name], a) for _, name, a in NUMPY_FREE]
    rows = _in_turn(PROBE, tmp_path_factory.mktemp("numpy_free"), runs)
    firsts = {key: _first_with(rows, runs, key) for key in ("numpy", "ml_dtypes", "jax")}
    return {(test, name, a[0]): (row, firsts) for (test, name, a), row in zip(NUMPY_FREE, rows)}


@pytest.mark.parametrize(
    "args",
    [["fmt"], ["check"], ["jvp"], ["linearize"], ["vjp"], ["grad"], ["vmap", "--axis-size", "2"],
     ["dce"], ["canonicalize"], ["opt", "-p", "inline,simplify,fold,cse,dce"]],
    ids=lambda a: a[0],
)  # fmt: skip
def test_numpy_free_text_never_loads_numpy(numpy_free, args):
    got, first = numpy_free["free", "ONE_EQN", args[0]]
    assert got["rc"] == 0, got["out"]
    assert not got["jax"], f"a command that does not run imported jax: {first['jax']}"
    assert not got["numpy"] and not got["ml_dtypes"], (
        f"{first['numpy']} executed numpy on a text without numpy values: find the module-level "
        "or eager use (tests/test_startup.py's probe) and make it lazy"
    )


#: integer parameters (axes, exponents) are plain ints: the shape rules read them without numpy
INT_PARAMS = (
    "{ lambda ; a:f32[3]. let\n"
    "    b:f32[3] = integer_pow[y=2] a\n"
    "    c:f32[] = reduce_sum[axes=(0,) out_sharding=None] b\n"
    "  in (c,) }\n"
)


@pytest.mark.parametrize(
    "args",
    [["fmt"], ["check"], ["jvp"], ["grad"], ["vmap", "--axis-size", "2"], ["canonicalize"]],
    ids=lambda a: a[0],
)
def test_integer_parameters_never_load_numpy(numpy_free, args):
    got, first = numpy_free["int", "INT_PARAMS", args[0]]
    assert got["rc"] == 0, got["out"]
    assert not got["numpy"] and not got["ml_dtypes"], (
        f"{first['numpy']} executed numpy (for integer parameters: a numpy type test where "
        "`lazy.is_integer`/`lazy.is_dtype` would do)"
    )
    if args == ["fmt"]:
        assert got["out"] == INT_PARAMS


def test_fmt_prints_a_dtype_parameter_back_without_numpy(numpy_free):
    got, first = numpy_free["dtype", "WITH_DTYPE", "fmt"]
    assert got["rc"] == 0, got["out"]
    assert not got["numpy"], f"{first['numpy']} executed numpy (fmt: a dtype numpy defines)"
    assert got["out"] == WITH_DTYPE


def test_check_of_a_dtype_parameter_does_not_load_numpy(numpy_free):
    """check reads dtype parameters as `DTypeName`s too: the shape rules need their names."""
    got, first = numpy_free["dtype", "WITH_DTYPE", "check"]
    assert got["rc"] == 0, got["out"]
    assert not got["numpy"], first["numpy"]


def _cast_round_trip(x):
    """dtype parameters both ways (convert_element_type to float16 and back)."""
    import jax.numpy as jnp

    return jnp.cos(x.astype(jnp.float16)).astype(jnp.float32) * x


@pytest.mark.parametrize("args", [["jacrev"], ["vmap", "--axis-size", "2"]], ids=lambda a: a[0])
def test_ad_of_dtype_parameters_runs_as_jax_without_numpy(tmp_path, args):
    """The AD commands keep dtype parameters as `DTypeName`s and make theirs so (the
    Jacobian's basis: iota, convert_element_type): no numpy import; the result, run through
    JAX, is what jax.jacrev / jax.vmap compute."""
    jax = pytest.importorskip("jax")
    import numpy as np
    from click.testing import CliRunner

    from jaxprtool.cli import main

    x = np.array([0.3, -1.2, 2.0], np.float32)
    text = str(jax.make_jaxpr(_cast_round_trip)(x)) + "\n"
    assert "new_dtype=float16" in text
    got = _probe(tmp_path, text, *args)
    assert got["rc"] == 0, got["out"]
    assert not got["numpy"] and not got["ml_dtypes"], f"{args[0]} executed numpy"
    prog = tmp_path / "out.jaxpr"
    prog.write_text(got["out"])
    if args[0] == "vmap":  # (jitted: one XLA compile, not one per operation)
        arg, want = np.stack([x, -x]), jax.jit(jax.vmap(_cast_round_trip))(np.stack([x, -x]))
    else:
        arg, want = x, jax.jit(jax.jacrev(_cast_round_trip))(x)
    np.savez(tmp_path / "a.npz", arg)
    r = CliRunner().invoke(
        main, ["run", str(prog), "--args", str(tmp_path / "a.npz"), "-o", str(tmp_path / "o.npz")]
    )
    assert r.exit_code == 0, r.output
    with np.load(tmp_path / "o.npz") as d:
        np.testing.assert_allclose(d["out0"], want, rtol=2e-3, atol=2e-3)


def test_a_dtype_name_compares_and_hashes_as_its_numpy_dtype():
    import numpy as np

    from jaxprtool.lazy import NUMPY_DTYPES, DTypeName, dtype_key

    for name in sorted(NUMPY_DTYPES):
        light, real = DTypeName(name), np.dtype(name)
        assert light == real and real == light and hash(light) == hash(real)
        assert np.dtype(light) == real and light.itemsize == real.itemsize
        assert light.kind == real.kind and dtype_key(light) == dtype_key(real)
        assert str(light) == str(real) and repr(light) == repr(real)
    assert DTypeName("float32") != np.dtype("float64")


@pytest.mark.parametrize("args", [["fmt"], ["grad"]], ids=lambda a: a[0])
def test_a_numpy_dtype_parameter_does_not_load_ml_dtypes(numpy_free, args):
    """float64 is numpy's own: ml_dtypes (~0.1 s) is loaded only for its own dtypes."""
    got, first = numpy_free["numpy_dtype", "NUMPY_DTYPE", args[0]]
    assert got["rc"] == 0, got["out"]
    assert not got["numpy"] and not got["ml_dtypes"], first


#: a convert_element_type to a dtype numpy defines, summed (grad takes it)
NUMPY_DTYPE = (
    WITH_DTYPE.replace("f64[3]", "f32[3]")
    .replace("float64", "float32")
    .replace("  in (b,)", "    c:f32[] = reduce_sum[axes=(0,) out_sharding=None] b\n  in (c,)")
)


def test_an_ml_dtypes_parameter_loads_it_and_prints_back(tmp_path):
    text = WITH_DTYPE.replace("f64[3]", "bf16[3]").replace("float64", "bfloat16")
    got = _probe(tmp_path, text, "fmt")
    assert got["rc"] == 0, got["out"]
    assert got["ml_dtypes"]
    assert got["out"] == text


def test_np_dtype_of_every_name_is_numpys():
    """core.np_dtype's numpy-only shortcut gives the dtype numpy and ml_dtypes give."""
    import ml_dtypes
    import numpy as np

    from jaxprtool.core import SHORT_TO_LONG, float0, np_dtype

    for short, long in SHORT_TO_LONG.items():
        want = (
            float0()
            if long == "float0"
            else np.dtype(getattr(ml_dtypes, long) if hasattr(ml_dtypes, long) else long)
        )
        assert np_dtype(short) == want, short


def test_rounding_without_numpy_matches_numpy():
    """AD's literals (`ad.ops.lit`) are rounded to float32/float16 without numpy: a value
    the format holds exactly is kept as it is, any other rounded with `struct`."""
    import math
    import random

    import numpy as np

    from jaxprtool.ad.ops import _rounded

    rng = random.Random(0)
    values = [0.1, 1 / 3, 65504.0, 65519.99, 65520.0, 6e-8, 3.4028235e38, 3.5e38, 1e300]
    values += [float("inf"), float("-inf"), 5e-324, 1e-45, 7e-46, -0.0]
    values += [rng.uniform(-1, 1) * 10 ** rng.randint(-50, 50) for _ in range(5000)]
    # values either format may hold exactly (returned without `struct`) and their neighbours
    # at the edges of the normal ranges: the largest, the smallest normal, subnormals
    exact = [0.0, 2.0, -0.5, 3.0, 1.0, 65504.0, 65505.0, 2.0**-14, 2.0**-15, 2.0**-24]
    exact += [3.4028234663852886e38, 2.0**-126, 2.0**-127, 2.0**-149, 2.0**128, 2.0**127]
    exact += [1 + 2.0**-10, 1 + 2.0**-11, 1 + 2.0**-23, 1 + 2.0**-24, 1 + 2.0**-25]
    exact += [rng.randint(-(2**26), 2**26) * 2.0 ** rng.randint(-160, 140) for _ in range(5000)]
    values += exact + [-v for v in exact]
    with np.errstate(over="ignore"):
        for v in values:
            for fmt, want in (("f", np.float32(v)), ("e", np.float16(v))):
                got = _rounded(v, fmt)
                assert got == float(want), (v, fmt)
                assert math.copysign(1, got) == math.copysign(1, float(want)), (v, fmt)
    assert _rounded(float("nan"), "f") != _rounded(float("nan"), "f")


BLAS_PROBE = r"""
import os, sys
import jaxprtool.cli

sys.argv[0] = "jaxprtool"
os._exit = sys.exit  # the program ends without teardown (`cli._leave`): here, go on
try:
    jaxprtool.cli.entry()  # the program itself (not CliRunner: a test process keeps defaults)
except SystemExit as e:
    assert e.code in (0, None), e.code
print(os.environ.get("OPENBLAS_NUM_THREADS"))
"""


@pytest.mark.parametrize(
    "args, user, expected",
    [
        (["fmt"], None, "1"),  # numpy's thread pool is never used: one thread
        (["grad"], None, "1"),
        (["memory", "--no-xla"], None, "1"),  # (with XLA too: one compile, no BLAS)
        (["fmt"], "3", "3"),  # the user's choice stands
        # running programs keeps numpy's default (make test-full; test_cli_errors.py's
        # test_the_program_ends_without_teardown_but_writes_everything keeps it: its `run`)
        pytest.param(["run", "--random", "0"], None, "None", marks=pytest.mark.slow),
    ],
)
def test_commands_that_do_not_run_ask_numpy_for_one_blas_thread(tmp_path, args, user, expected):
    import os

    f = tmp_path / "p.jaxpr"
    f.write_text(ONE_EQN)
    env = {
        k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")
    }
    if user is not None:
        env["OPENBLAS_NUM_THREADS"] = user
    assert _last_line(BLAS_PROBE, *args, str(f), env=env) == expected


COLLECTOR_PROBE = r"""
import gc, sys
sys.argv[0] = "jaxprtool"  # the console script's name: `interrupt.program_starting` is true
import jaxprtool
held = not gc.isenabled()
from click.testing import CliRunner
from jaxprtool.cli import main
r = CliRunner().invoke(main, sys.argv[1:])
print(r.exit_code, held, gc.isenabled(), gc.get_freeze_count() > 0)
"""


def test_the_program_starts_without_the_collector_and_its_command_runs_with_it(tmp_path):
    """The program's start-up (its imports) runs without garbage collection; the command's
    body collects again, the start-up's objects frozen out of its collections
    (`interrupt.hold_collector`, `release_collector`)."""
    f = tmp_path / "p.jaxpr"
    f.write_text(ONE_EQN)
    assert _last_line(COLLECTOR_PROBE, "fmt", str(f)) == "0 True True True"


def test_a_command_in_a_test_process_leaves_the_collector_alone():
    """Only a collector the program's start-up held is started again: a library or test
    process's own setting stands."""
    import gc

    from click.testing import CliRunner

    from jaxprtool.cli import main

    before = gc.get_freeze_count()
    gc.disable()
    try:
        r = CliRunner().invoke(main, ["fmt", "-"], input=ONE_EQN)
        assert r.exit_code == 0, r.output
        assert not gc.isenabled() and gc.get_freeze_count() == before
    finally:
        gc.enable()


REGEX_PROBE = r"""
import json, re, sys
at_import = []
compile_ = re.compile


def spy(pattern, flags=0):
    caller = sys._getframe(1)
    name = caller.f_globals.get("__name__", "")
    if caller.f_code.co_name == "<module>" and name.startswith("jaxprtool"):
        at_import.append(f"{name}:{caller.f_lineno}")
    return compile_(pattern, flags)


re.compile = spy
from click.testing import CliRunner
from jaxprtool.cli import main

rows = []
for args in json.loads(sys.argv[1]):
    r = CliRunner().invoke(main, args)
    rows.append({"rc": r.exit_code, "out": r.output, "at_import": list(at_import)})
print(json.dumps(rows))
"""


def test_no_module_compiles_a_regular_expression_as_it_is_imported(tmp_path):
    """A module's regular expressions are compiled when first used (`lazy.LazyPattern`):
    compiled at import, each costs every command's start-up, used or not.  fmt, check and
    grad in turn in one interpreter (`_in_turn`: a module imported is imported once)."""
    runs = [(ONE_EQN, [name]) for name in ("fmt", "check", "grad")]
    for (_, args), got in zip(runs, _in_turn(REGEX_PROBE, tmp_path, runs)):
        assert got["rc"] == 0, got["out"]
        assert got["at_import"] == [], (
            f"{args[0]}: compiled at import: make them `lazy.LazyPattern`s"
        )


def test_a_lazy_pattern_is_compiled_on_first_use_and_answers_as_re_does():
    import re

    from jaxprtool.lazy import LazyPattern

    lazy = LazyPattern(r"(\w+)=(\d+)", re.I)
    assert "match" not in vars(lazy)  # nothing compiled yet
    text = "a=1, B=22 c=x"
    want = re.compile(r"(\w+)=(\d+)", re.I)
    assert lazy.match(text).groups() == want.match(text).groups()
    assert "match" in vars(lazy)  # the compiled pattern's own method from now on
    assert lazy.findall(text) == want.findall(text) == [("a", "1"), ("B", "22")]
    assert lazy.sub(r"\2", text) == want.sub(r"\2", text)
    assert [m.span() for m in lazy.finditer(text)] == [m.span() for m in want.finditer(text)]
    assert lazy.search("x B=3").group(1) == "B" and lazy.fullmatch("q=9") is not None
    assert lazy.pattern == want.pattern


def test_a_test_process_keeps_the_collector_and_blas_defaults():
    """Only the program itself (`cli.entry`) freezes the collector's generations and asks for
    one BLAS thread: a library or test process (CliRunner) keeps both defaults."""
    from click.testing import CliRunner

    from jaxprtool import core
    from jaxprtool.cli import main

    r = CliRunner().invoke(main, ["fmt", "-"], input=ONE_EQN)
    assert r.exit_code == 0, r.output
    assert core.FREEZE_AFTER_PAUSE is False


#: a matrix product (its `preferred_element_type` a dtype parameter) summed to a scalar
DOT_SUMMED = """{ lambda ; a:f32[2,3] b:f32[3,4]. let
    c:f32[2,4] = dot_general[
      dimension_numbers=(([1], [0]), ([], []))
      preferred_element_type=float32
    ] a b
    d:f32[] = reduce_sum[axes=(0, 1) out_sharding=None] c
  in (d,) }
"""


def test_grad_of_a_dot_general_does_not_load_numpy(numpy_free):
    """The transposes of dot_general remember their result type by a key of their
    parameters that holds a dtype by its name (`shapes.params_key`): hashing the dtype
    parameter itself would import numpy."""
    got, first = numpy_free["dot", "DOT_SUMMED", "grad"]
    assert got["rc"] == 0, got["out"]
    assert "dot_general" in got["out"]
    assert not got["numpy"] and not got["ml_dtypes"], first


#: `jax.make_jaxpr(jax.nn.relu)(jnp.ones(3))` as JAX 0.12.1 printed it: a custom_jvp_call of
#: one of JAX's library functions (`families/jax_library.py` holds its rule)
RELU = """{ lambda ; a:f32[3]. let
    b:f32[3] = custom_jvp_call[
      name=relu
      call_jaxpr={ lambda ; c:f32[3]. let
          d:f32[3] = jit[
            name=relu
            jaxpr={ lambda ; c:f32[3]. let d:f32[3] = max c 0.0:f32[] in (d,) }
          ] c
        in (d,) }
      jvp=jvp
      symbolic_zeros=False
    ] a
  in (b,) }
"""

#: the modules the command executed (a `lazy.lazy_module` not yet touched is left out)
MODULES_PROBE = r"""
import json, sys
from click.testing import CliRunner
from jaxprtool.cli import main

rows = []
for args in json.loads(sys.argv[1]):
    r = CliRunner().invoke(main, args)
    rows.append({"rc": r.exit_code, "out": r.output,
                 "modules": sorted(m for m, v in sys.modules.items()
                                   if type(v).__name__ not in ("_LazyModule",
                                                               "_ExecutedOnFirstUse"))})
print(json.dumps(rows))
"""


@pytest.fixture(scope="module")
def fmt_then_vjp(tmp_path_factory) -> dict:
    """The rows of `fmt` of ONE_EQN and of RELU, then `vjp` of RELU, run in turn in one
    interpreter (`_in_turn`: the vjp's row holds what the fmts executed, which is none of
    what it is asked about), by (command, text's name)."""
    runs = [("ONE_EQN", "fmt"), ("RELU", "fmt"), ("RELU", "vjp")]
    rows = _in_turn(MODULES_PROBE, tmp_path_factory.mktemp("modules"),
                    [(globals()[name], [command]) for name, command in runs])  # fmt: skip
    return {(command, name): row for (name, command), row in zip(runs, rows)}


#: what differentiating a call needs and printing one does not
AD_OF_CALLS = {
    "jaxprtool.families.jax_library",  # the library rules (`registry.find_library_jvp`)
    "jaxprtool.ad.jvp",
    "jaxprtool.ad.linearize",
    "jaxprtool.ad.transpose",
}


@pytest.mark.parametrize("command", ["fmt", "vjp"])
def test_printing_a_custom_jvp_call_imports_no_ad_of_calls_and_vjp_finds_its_rule(
    fmt_then_vjp, command
):
    """`fmt` of a custom_jvp_call reads and prints it without the AD walks or the families of
    library rules; `vjp` of it loads them, but only the family that holds relu's rule: not
    Equinox's, whose library rule is of another function (relu's rule is JAX's: the
    derivative at 0 is 0, checked against JAX in tests/test_custom_rules.py).  Neither
    executes the vmap machinery, which the families name as a lazy module."""
    got = fmt_then_vjp[command, "RELU"]
    assert got["rc"] == 0, got["out"]
    loaded = (AD_OF_CALLS | {"jaxprtool.families.equinox"}) & set(got["modules"])
    assert "jaxprtool.ad.batching" not in got["modules"]
    if command == "fmt":
        assert got["out"] == RELU
        assert loaded == set()
    else:
        assert loaded == AD_OF_CALLS


def test_writing_the_output_file_imports_neither_tempfile_nor_signal(tmp_path):
    """`-o FILE` is written atomically (a new temporary file, renamed) without `tempfile`
    (with `shutil`, `random`, `hashlib`: ~3 ms) or `signal`'s enums (~2 ms).  The program
    itself runs (a test runner's process has imported them already); `-X importtime` names
    every module it imports."""
    f, out = tmp_path / "p.jaxpr", tmp_path / "out.jaxpr"
    f.write_text(ONE_EQN)
    r = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "jaxprtool", "fmt", str(f), "--output",
         str(out)],
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    imported = {line.rpartition("|")[2].strip() for line in r.stderr.splitlines()}
    assert "jaxprtool.io" in imported  # (the listing is read right)
    assert {"tempfile", "shutil", "random", "signal"} & imported == set()
    assert out.read_text() == ONE_EQN
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jaxpr", "p.jaxpr"]  # no temp left


#: the passes, which the families' simplification and folding rules call when a pass runs
PASSES = {"jaxprtool.passes.fold", "jaxprtool.passes.simplify", "jaxprtool.passes.dce"}


@pytest.mark.parametrize("text", ["ONE_EQN", "RELU"], ids=["sin", "relu"])
def test_fmt_executes_no_pass_nor_the_grammars_path(fmt_then_vjp, text):
    """The families `fmt` loads name the passes' helpers as lazy modules (`lazy_module`):
    reading and printing a program executes no pass module; the parser imports lark's path
    only for a text its plain reader leaves."""
    got = fmt_then_vjp["fmt", text]
    assert got["rc"] == 0, got["out"]
    assert "jaxprtool.families.arithmetic" in got["modules"]  # (a family was loaded)
    assert PASSES & set(got["modules"]) == set()
    # nor the grammar's path (lark's parser and its post-lexer): the text is read without it
    assert {"jaxprtool.text.parser.lalr", "jaxprtool.text.parser.layout"} & set(
        got["modules"]
    ) == set()


#: eight threads make one first read at once (READ: the expression); the probe's prologue
#: sets up what they read, its epilogue prints what it found as JSON
EIGHT_FIRST_READS = r"""
errors, got = [], []
start = threading.Barrier(8)


def first_read():
    start.wait()
    try:
        got.append(READ)
    except Exception as e:
        errors.append(repr(e))


threads = [threading.Thread(target=first_read) for _ in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
"""


def _eight_first_reads(prologue: str, read: str, epilogue: str) -> dict:
    """Run the eight threads' race in a process of its own (nothing imported before it)."""
    head = "import json, sys, threading\nsys.setswitchinterval(1e-6)\n"
    probe = head + prologue + EIGHT_FIRST_READS.replace("READ", read) + epilogue
    return json.loads(_last_line(probe))


def test_a_lazy_module_of_the_package_is_whole_for_threads_that_read_it_first():
    """Eight threads read an attribute of one of the package's modules made lazy
    (`lazy_module`) and not yet executed, at once: one executes it and the others wait
    (importlib's LazyLoader gave some an AttributeError here, on 3.12.1); it is then the
    plain module that `sys.modules` and its package hold, and an import of it elsewhere
    gets that one module."""
    prologue = (
        "import jaxprtool, types\nfrom jaxprtool.lazy import lazy_module\n"
        'assert "jaxprtool.passes.fold" not in sys.modules\n'
        'F = lazy_module("jaxprtool.passes.fold")\n'
        "assert type(F) is not types.ModuleType\n"
    )
    epilogue = (
        "import jaxprtool.passes.fold\nfrom jaxprtool.passes import fold\n"
        'print(json.dumps({"errors": errors, "same": len({id(f) for f in got}) == 1 and '
        'len(got) == 8, "plain": type(F) is types.ModuleType, '
        '"one": F is sys.modules["jaxprtool.passes.fold"] is fold is jaxprtool.passes.fold}))\n'
    )
    got = _eight_first_reads(prologue, "F.result_dtype", epilogue)
    assert got == {"errors": [], "same": True, "plain": True, "one": True}


def test_threads_making_one_lazy_module_at_once_get_one_module():
    """Two families imported at once by two threads both name the vmap machinery lazily:
    eight threads making the same lazy module at once get one module, the one
    `sys.modules` holds (a second copy would hold a second vmap context)."""
    prologue = (
        "import importlib.util, time\nimport jaxprtool\nfrom jaxprtool.lazy import lazy_module\n"
        "find_spec = importlib.util.find_spec\n"
        "def slow_find_spec(*a):  # (the race's window, widened: each thread sleeps in it)\n"
        "    time.sleep(0.02)\n"
        "    return find_spec(*a)\n"
        "importlib.util.find_spec = slow_find_spec\n"
    )
    epilogue = (
        'one = sys.modules["jaxprtool.passes.dce"]\n'
        'print(json.dumps({"errors": errors, "n": len(got), '
        '"same": all(m is one for m in got)}))\n'
    )
    got = _eight_first_reads(prologue, 'lazy_module("jaxprtool.passes.dce")', epilogue)
    assert got == {"errors": [], "n": 8, "same": True}


def test_lazy_numpy_is_whole_for_threads_that_read_it_first():
    """Eight threads make the first read of the lazy numpy at once: one executes it and the
    others wait, then it is a plain module (importlib's LazyLoader handed 7 of the 8 a
    half-executed numpy on Python 3.12.1: `module 'numpy' has no attribute 'arange'`)."""
    prologue = (
        "from jaxprtool.lazy import np\n"
        'assert type(np) is not type(sys), "numpy was executed before the threads read it"\n'
    )
    epilogue = (
        'print(json.dumps({"errors": errors, "sums": got, "plain": type(np) is type(sys), '
        '"one": np is sys.modules["numpy"]}))\n'
    )
    got = _eight_first_reads(prologue, "float(np.arange(4.0).sum())", epilogue)
    assert got == {"errors": [], "sums": [6.0] * 8, "plain": True, "one": True}


#: modules that only click's `import inspect` brings in on the AD commands' path
INSPECT_AND_ITS_OWN = {"inspect", "ast", "dis", "tokenize"}


@pytest.mark.parametrize(
    "args", [["grad", "--debug"], ["vjp", "--no-color"], ["fmt", "--debug"]], ids=lambda a: a[0]
)
def test_the_program_leaves_click_s_inspect_unexecuted(tmp_path, args):
    """click imports `inspect` for `cleandoc` (~27M instructions with ast and dis, 4% of a
    transformer's grad); the tool's options clean their help themselves (`cli.Option`), and
    the program's `inspect` is a stand-in an import binds unexecuted
    (`lazy_module(..., import_binds=True)`).  The program itself runs; `-X importtime`
    names every module it executes.  (A global option leaves the command line to click:
    the quick start, which imports no click, is `tests/test_quickstart.py`'s.)"""
    f = tmp_path / "p.jaxpr"
    f.write_text(ONE_EQN)
    r = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "jaxprtool", *args, str(f)],
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    imported = {line.rpartition("|")[2].strip() for line in r.stderr.splitlines()}
    assert "click.core" in imported  # (the listing is read right)
    assert INSPECT_AND_ITS_OWN & imported == set()


def test_a_module_an_import_binds_unexecuted_runs_on_its_first_attribute_read(
    tmp_path, monkeypatch
):
    """`lazy_module(name, import_binds=True)`: an `import name` statement binds the stand-in
    without executing the module; the first attribute read executes it (once), and it is
    a plain module from then on."""
    import importlib
    from types import ModuleType

    from jaxprtool.lazy import lazy_module

    (tmp_path / "bound_unexecuted.py").write_text(
        "import sys\nsys.modules['builtins'].__dict__.setdefault('_RUNS', []).append(1)\n"
        "VALUE = 42\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "bound_unexecuted", raising=False)
    import builtins

    monkeypatch.setattr(builtins, "_RUNS", [], raising=False)
    stand_in = lazy_module("bound_unexecuted", import_binds=True)
    bound = importlib.import_module("bound_unexecuted")
    exec("import bound_unexecuted", {})
    assert bound is stand_in and builtins._RUNS == []  # bound, not executed
    assert stand_in.VALUE == 42 and builtins._RUNS == [1]
    assert type(stand_in) is ModuleType and stand_in.VALUE == 42 and builtins._RUNS == [1]
    monkeypatch.delitem(sys.modules, "bound_unexecuted")


def test_every_option_of_every_command_cleans_its_own_help():
    """Every option of the group and of each command, their -h/--help included, is the
    tool's `Option` (click never calls `inspect.cleandoc`), and each help text is as
    `inspect.cleandoc` leaves it."""
    import inspect

    import click

    from jaxprtool.cli import COMMANDS, Option, main

    with click.Context(main) as ctx:
        commands = [main] + [main.get_command(ctx, name) for name in sorted(COMMANDS)]
        for cmd in commands:
            with click.Context(cmd, parent=ctx) as sub:
                for p in cmd.get_params(sub):
                    if isinstance(p, click.Option):
                        assert isinstance(p, Option), (cmd.name, p.name)
                        assert p.help is None or p.help == inspect.cleandoc(p.help), p.name


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet=" \t\nab\u00a0", max_size=24))
def test_cleandoc_is_inspect_s(doc):
    import inspect

    from jaxprtool.cli import cleandoc

    assert cleandoc(doc) == inspect.cleandoc(doc)
