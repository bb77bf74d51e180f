"""Every `Example:` line of `jaxprtool --help` and of each command's `--help` runs (issue 39,
item 16): in-process, in a folder where the files the examples name exist.

The examples name placeholder files (`f.jaxpr`, `loss.jaxpr`, `in.npz`); the folder holds a
program or array file behind each name (`FILES`), and the few examples that need another
kind of program behind a name get it from `OVERRIDES`.  A pipeline (`a | b`) runs stage by
stage, each stage's standard output the next one's input; `< FILE` and `> FILE` redirect;
`;` separates commands; `python -c CODE` runs in this process.  A stage that is no
jaxprtool command (`dot`) runs as a program, or the example is skipped, saying why, where
that program is not installed.
"""

from __future__ import annotations

import contextlib
import glob
import io
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxprtool import io as tool_io
from jaxprtool.cli import COMMANDS, main

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "samples"

#: (s: f32[], x: f32[2,3]) -> sum(relu(sin(x) * s)), relu a `jit[name=relu]` (for
#: `inline --names relu`): scalar-valued with a scalar first input, so `grad | grad` works
F = """{ lambda ; a:f32[] b:f32[2,3]. let
    c:f32[2,3] = sin b
    e:f32[2,3] = mul c a
    f:f32[2,3] = jit[
      name=relu
      jaxpr={ lambda ; e:f32[2,3]. let f:f32[2,3] = max e 0.0:f32[] in (f,) }
    ] e
    g:f32[] = reduce_sum[axes=(0, 1) out_sharding=None] f
  in (g,) }
"""


def f_value(s, x):
    """F, in numpy (the oracle for want.npz)."""
    return np.sum(np.maximum(np.sin(x) * s, 0.0), dtype=np.float32)


#: F with one equation more (for `diff before.jaxpr after.jaxpr`)
AFTER = F.replace("  in (g,)", "    h:f32[] = neg g\n  in (h,)")

#: linear in all but its first two inputs (`transpose --residuals 2`)
LIN = """{ lambda ; a:f32[3] b:f32[3] c:f32[3]. let
    d:f32[3] = mul a c
    e:f32[3] = mul b c
    f:f32[3] = add d e
  in (f,) }
"""

THREE_OUTPUTS = """{ lambda ; a:f32[3] b:f32[3] c:f32[3]. let
    d:f32[3] = mul a b
    e:f32[3] = sin a
    f:f32[3] = add b c
  in (d, e, f) }
"""

PSUM = """{ lambda ; a:f32[3]. let
    b:f32[3] = psum[axes=('i',) axis_index_groups=None] a
  in (b,) }
"""

#: over a mesh x=4,y=2 (the conftest starts 8 CPU devices)
SHARDED = """{ lambda ; a:f32[8@x,4] b:f32[4,6@y]. let
    c:f32[8@x,6@y] = dot_general[
      dimension_numbers=(([1], [0]), ([], []))
      preferred_element_type=float32
    ] a b
  in (c,) }
"""

MODEL = """import jax.numpy as jnp
import numpy as np

SCALE = np.linspace(0.5, 2.0, 4, dtype=np.float32)  # a constant (for --consts-out)


def loss(w, x):
    return jnp.sum(jnp.tanh(x @ w) ** 2 * SCALE)
"""

#: `trace models/mlp.py:loss --arg 8x4xf32 --kw depth=3`
MODELS_MLP = """import jax.numpy as jnp


def loss(x, depth=1):
    for _ in range(depth):
        x = jnp.tanh(x)
    return jnp.sum(x**2)
"""

S, X = np.float32(0.5), np.arange(6, dtype=np.float32).reshape(2, 3) / 4

#: the folder every example runs in (a fresh copy each): name -> text or bytes
FILES = {
    "f.jaxpr": F,
    "before.jaxpr": F,
    "after.jaxpr": AFTER,
    "lin.jaxpr": LIN,
    "three.jaxpr": THREE_OUTPUTS,
    "uses_psum_over_i.jaxpr": PSUM,
    "sharded.jaxpr": SHARDED,
    "model.py": MODEL,
    "models/mlp.py": MODELS_MLP,
}

#: copies of the samples
SAMPLE_COPIES = {
    "loss.jaxpr": "loss.jaxpr",
    "mlp.jaxpr": "mlp.jaxpr",
    "layers.jaxpr": "mlp.jaxpr",
    "a.jaxpr": "sin_cos.jaxpr",
    "b.jaxpr": "cond.jaxpr",
    "dumps/attention.jaxpr": "attention.jaxpr",
    "dumps/rnn.jaxpr": "rnn.jaxpr",
}

#: example -> {name in the example: file of the folder behind it}
OVERRIDES = {
    "jaxprtool dce f.jaxpr --keep-outputs 0,2": {"f.jaxpr": "three.jaxpr"},
    "jaxprtool explain loss.jaxpr --args in.npz --html walk.html": {"in.npz": "loss_in.npz"},
}


def _npz(**arrays) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def _write_folder(folder: Path) -> None:
    shutil.copytree(SAMPLES, folder / "samples")
    for name, src in SAMPLE_COPIES.items():
        (folder / name).parent.mkdir(exist_ok=True)
        shutil.copy(SAMPLES / src, folder / name)
    for name, text in FILES.items():
        (folder / name).parent.mkdir(exist_ok=True)
        (folder / name).write_text(text)
    (folder / "in.npz").write_bytes(_npz(arg0=S, arg1=X))
    (folder / "want.npz").write_bytes(_npz(out0=f_value(S, X)))
    rng = np.random.default_rng(0)
    loss_in = [rng.standard_normal(s).astype(np.float32) for s in ((4, 2), (4,), (2,))]
    (folder / "loss_in.npz").write_bytes(_npz(**{f"arg{i}": a for i, a in enumerate(loss_in)}))


# ---------------------------------------------------------------- the examples


def _examples_of(argv: list[str]) -> list[str]:
    r = CliRunner().invoke(main, [*argv, "--help"], terminal_width=200)
    assert r.exit_code == 0, r.output
    m = re.search(r"\n *Example:\n((?: {4,}\S.*\n)+)", r.output)
    return [line.strip() for line in m.group(1).splitlines()] if m else []


def _all_examples() -> list[tuple[str, str]]:
    """(where, example) for the main help and each command's, each example once."""
    seen, out = set(), []
    for where in ["jaxprtool", *COMMANDS]:
        argv = [] if where == "jaxprtool" else [where]
        for ex in _examples_of(argv):
            if ex not in seen:
                seen.add(ex)
                out.append((where, ex))
    return out


EXAMPLES = _all_examples()


def test_grad_twice_example_says_what_input_it_needs():
    """`grad f.jaxpr | grad` works only where f's input is a scalar (its gradient is then
    a scalar), as `jax.grad(jax.grad(f))`: the example says so (issue 45, item 20)."""
    twice = [e for e in _examples_of(["grad"]) if "| jaxprtool grad" in e]
    assert twice and all("scalar" in e and "hessian" in e for e in twice), twice
    vector = (
        "{ lambda ; a:f32[3]. let b:f32[] = reduce_sum[axes=(0,) out_sharding=None] a in (b,) }\n"
    )
    g = CliRunner().invoke(main, ["grad", "-"], input=vector)
    assert g.exit_code == 0, g.output
    gg = CliRunner().invoke(main, ["grad", "-"], input=g.stdout)
    assert gg.exit_code == 1 and "Gradient only defined for scalar-output functions" in gg.output


def test_command_help_names_the_global_options_once():
    """A command's --help listed the ~30 lines of global options again (issue 45, item 20):
    they are named once at its end, and still accepted after the command."""
    r = CliRunner().invoke(main, ["grad", "--help"], terminal_width=100)
    assert r.exit_code == 0
    assert r.output.count("--max-input-size") == 1 and "Refuse an input file" not in r.output
    assert "Global options (before or after the command; `jaxprtool --help`):" in r.output
    top = CliRunner().invoke(main, ["--help"], terminal_width=100).output
    assert "Refuse an input file" in top
    ok = CliRunner().invoke(main, ["fmt", str(SAMPLES / "mlp.jaxpr"), "--debug", "--no-color"])
    assert ok.exit_code == 0, ok.output


def test_every_command_has_examples():
    """Every command's help shows how it is used (and this test collects them all)."""
    have = {where for where, _ in EXAMPLES}
    helps = {c for c in COMMANDS if _examples_of([c])}
    assert helps == set(COMMANDS), set(COMMANDS) - helps
    assert "jaxprtool" in have


# ---------------------------------------------------------------- running one


def _commands(example: str) -> list[str]:
    line = re.sub(r"\s+#.*$", "", example)
    return [c.strip() for c in line.split(" ; ")]


def _stages(command: str) -> list[list[str]]:
    return [shlex.split(s) for s in command.split(" | ")]


def _redirects(argv: list[str]) -> tuple[list[str], str | None, str | None]:
    """argv without its `< IN` and `> OUT`, and those files."""
    rest, src, dst = [], None, None
    it = iter(argv)
    for a in it:
        if a == "<":
            src = next(it)
        elif a == ">":
            dst = next(it)
        else:
            rest.append(a)
    return rest, src, dst


def _expand(argv: list[str]) -> list[str]:
    out = []
    for a in argv:
        out += sorted(glob.glob(a)) if "*" in a else [a]
    return out


def _python_c(argv: list[str]) -> str:
    assert argv[:2] == ["python", "-c"], argv
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        exec(argv[2], {"__name__": "__main__"})  # the example's own one-liner
    return buf.getvalue()


#: the exit status an example's help documents where it is not 0
EXIT = {"jaxprtool diff before.jaxpr after.jaxpr": 1}  # "1 different" (`diff --help`)


def _option(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def _has_device(platform: str) -> bool:
    import jax

    try:
        return bool(jax.devices(platform))
    except RuntimeError:
        return False


def _unavailable(argv: list[str]) -> str | None:
    """Why this stage cannot run on this machine (None: it can)."""
    if argv[0] not in ("jaxprtool", "python") and shutil.which(argv[0]) is None:
        return f"{argv[0]} is not installed"
    rendered = Path(_option(argv, "-o") or "").suffix in (".svg", ".png", ".pdf")
    if argv[1:2] == ["graph"] and rendered and shutil.which("dot") is None:
        return "Graphviz's dot is not installed: graph cannot render an image"
    device = _option(argv, "--device")
    if "optimized-hlo" in argv and device not in (None, "cpu") and not _has_device(device):
        return f"optimized HLO is XLA's compile on the device: no {device} here"
    return None


def _stage(argv: list[str], data: str | None, stage: str) -> str:
    if argv[0] == "python":
        return _python_c(argv)
    if argv[0] != "jaxprtool":
        r = subprocess.run(argv, input=data, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, f"{stage}\n{r.stderr}"
        return r.stdout
    r = CliRunner().invoke(main, ["--no-color", *_expand(argv[1:])], input=data)
    assert r.exit_code == EXIT.get(stage, 0), f"{stage}\n{r.output}"
    return r.stdout


def _run(command: str) -> None:
    stages = [_redirects(argv) for argv in _stages(command)]
    for argv, _, _ in stages:
        why = _unavailable(argv)
        if why is not None:
            pytest.skip(f"`{command}`: {why}")
    data = None
    for argv, src, dst in stages:
        if src is not None:
            data = Path(src).read_text()
        data = _stage(argv, data, command)
        if dst is not None:
            Path(dst).write_text(data)


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """A fresh copy of the example folder, the current one; afterwards `trace`'s imports
    and the sources the commands kept for error excerpts (under relative names like
    `f.jaxpr`, which another test's error message may name) forgotten."""
    _write_folder(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(tool_io, "_sources", {})
    monkeypatch.setattr(tool_io, "_line_starts", {})
    yield tmp_path
    for name in ("model", "mlp"):
        sys.modules.pop(name, None)


#: examples over every sample (`samples/*.jaxpr`) that take seconds a sample: the default run
#: keeps these samples in the folder (the glob expands to them), `make test-full` runs the
#: example over every sample as well
FEWER_SAMPLES = {
    "jaxprtool check-grad samples/*.jaxpr --order 2": ("sin_cos.jaxpr", "cond.jaxpr"),
}


def _example_params() -> list:
    out = []
    for _, e in EXAMPLES:
        out.append(pytest.param(e, e in FEWER_SAMPLES, id=e))
        if e in FEWER_SAMPLES:
            out.append(pytest.param(e, False, id=f"{e} (every sample)", marks=pytest.mark.slow))
    return out


@pytest.mark.parametrize("example,fewer_samples", _example_params())
def test_the_help_example_runs(example, fewer_samples, folder):
    for name, behind in OVERRIDES.get(example, {}).items():
        shutil.copy(folder / behind, folder / name)
    if fewer_samples:
        for path in (folder / "samples").glob("*.jaxpr"):
            if path.name not in FEWER_SAMPLES[example]:
                path.unlink()
    for command in _commands(example):
        _run(command)


_WORDS = st.lists(st.text(alphabet="abcdefghij-=.,[]", min_size=1, max_size=30), max_size=40)
_WIDTHS = st.integers(min_value=30, max_value=80)


@given(_WORDS, _WIDTHS)
@settings(max_examples=100, deadline=None)
def test_the_global_options_list_wraps_as_textwrap_does(words, width):
    """`cli.wrap_words` (the global options' list under a command's --help: words of at most
    the width, one space apart) gives the lines `textwrap.wrap` gives (not imported at
    start-up).  100 texts in `make test`; 2,000 in `make test-full` (the `_many` test)."""
    _wraps_as_textwrap(words, width)


@pytest.mark.slow
@given(_WORDS, _WIDTHS)
@settings(max_examples=2_000, deadline=None)
def test_the_global_options_list_wraps_as_textwrap_does_many(words, width):
    _wraps_as_textwrap(words, width)


def _wraps_as_textwrap(words, width):
    import textwrap

    from jaxprtool.cli import wrap_words

    text = " ".join(words)
    assert wrap_words(text, width) == textwrap.wrap(text, width, break_on_hyphens=False)
