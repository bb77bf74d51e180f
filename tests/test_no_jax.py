"""Without JAX installed, the commands that need it say what is missing and how to get it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import jaxprtool
from jaxprtool.cli import main

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
MLP = str(SAMPLES / "mlp.jaxpr")


@pytest.fixture
def no_jax(monkeypatch):
    """`import jax` (and jaxlib) fails as on a machine where it is not installed: None in
    sys.modules makes the import raise ModuleNotFoundError(name='jax').  The tool's back end
    modules are dropped too, so that they are imported again (and fail) as on such a machine."""
    for name in list(sys.modules):
        if name.split(".")[0] in ("jax", "jaxlib") or name.startswith("jaxprtool.backend"):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "jax", None)
    monkeypatch.setitem(sys.modules, "jaxlib", None)
    if hasattr(jaxprtool, "backend"):
        monkeypatch.delattr(jaxprtool, "backend")


@pytest.mark.parametrize(
    "args",
    [
        ["run", MLP, "--random", "0"],
        ["compile", MLP],
        ["trace", "os.path:join", "--arg", "f32[3]"],
        ["explain", str(SAMPLES / "sin_cos.jaxpr")],
        ["check-grad", str(SAMPLES / "sin_cos.jaxpr")],
        ["memory", MLP],
    ],
    ids=lambda a: a[0],
)
def test_missing_jax_is_explained(no_jax, args):
    r = CliRunner().invoke(main, ["--no-color", *args])
    assert r.exit_code == (2 if args[0] == "check-grad" else 1), r.output  # README: trouble
    assert "internal error" not in r.output and "Traceback" not in r.output
    assert "jax is not installed" in r.output
    assert "pip install 'jaxprtool[jax]'" in r.output
    assert "cuda" in r.output.lower()


def test_memory_without_jax_names_no_xla(no_jax):
    """memory's XLA figures need JAX, its own do not: the message says how to get them."""
    r = CliRunner().invoke(main, ["--no-color", "memory", MLP])
    assert r.exit_code == 1 and "jax is not installed" in r.output
    assert "--no-xla" in r.output, r.output


@pytest.mark.parametrize(
    "args",
    [
        ["fmt", MLP],
        ["check", MLP],
        ["grad", MLP],
        ["vjp", MLP],
        ["linearize", MLP],
        ["opt", "-p", "dce", MLP],
        ["stats", MLP],
        ["graph", MLP],
        ["memory", "--no-xla", "--of", "grad", MLP],
        ["diff", MLP, MLP],
        ["--version"],
    ],
    ids=lambda a: a[0],
)
def test_commands_that_work_without_jax(no_jax, args):
    r = CliRunner().invoke(main, ["--no-color", *args])
    assert r.exit_code == 0, (args, r.output)


def test_the_api_s_report_and_jacobian_functions_work_without_jax(no_jax):
    """docs/API.md: only run, to_stablehlo, xla_memory, check_grad and explain import JAX."""
    f = jaxprtool.load(str(SAMPLES / "loss.jaxpr"))
    assert len(jaxprtool.hessian(f).output_types) == 1
    assert jaxprtool.jacfwd(f).output_types == jaxprtool.jacrev(f).output_types
    assert jaxprtool.stats(f)["equations"] == 5 and jaxprtool.diff(f, f).equal
    for fn in (jaxprtool.check_grad, jaxprtool.explain):
        with pytest.raises(jaxprtool.JaxprError, match="jax is not installed"):
            fn(f)
