"""`run` of `debug_print` (issue 25): the text holds everything JAX's own print callback
uses (the format string, which operands are positional or named, the static arguments,
numpy's print options, `ordered`), so `run` binds JAX's debug_print and JAX prints.  The
lines printed are compared with those `jax.jit(f)` prints on the same inputs; what the text
cannot rebuild (a nested pytree argument, `jax.debug.log`'s logging record) is refused at
the equation."""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from conftest import CORPUS  # noqa: E402
from jax_oracle import run  # noqa: E402

X = np.array([0.5, -1.25], np.float32)
INPUT = "f32[2]=0.5 -1.25"


def prints(x):
    jax.debug.print("x={x} {y} {}", x, x=x, y=x + 1.0)
    jax.debug.print("plain", x, skip_format_check=True)
    jax.debug.print("s {} {k}", 3, k="lit")
    jax.debug.print("first {}", jnp.sin(x) * 1e-3, ordered=True)
    jax.debug.print("second {}", x * 2.0, ordered=True)
    return x * 2.0


def jax_lines(capsys, f, *args) -> list[str]:
    capsys.readouterr()
    jax.block_until_ready(jax.jit(f)(*args))
    jax.effects_barrier()
    return capsys.readouterr().out.splitlines()


def tool_lines(tmp_path, text: str, *flags) -> list[str]:
    src = tmp_path / "p.jaxpr"
    src.write_text(text)
    r = run(
        ["--no-color", "run", str(src), "--input", INPUT, "-o", str(tmp_path / "o.npz"), *flags]
    )
    assert r.exit_code == 0, r.output
    return r.stdout.splitlines()


@pytest.mark.parametrize("flags", [(), ("--eager",)], ids=["compiled", "eager"])
def test_debug_print_prints_what_jax_prints(tmp_path, capsys, flags):
    want = jax_lines(capsys, prints, X)
    got = tool_lines(tmp_path, str(jax.make_jaxpr(prints)(X)) + "\n", *flags)
    assert sorted(got) == sorted(want)  # unordered prints may come in any order, as in JAX
    ordered = [line for line in want if line.startswith(("first", "second"))]
    assert [line for line in got if line.startswith(("first", "second"))] == ordered
    assert len(want) == 5
    with np.load(tmp_path / "o.npz", allow_pickle=False) as z:
        np.testing.assert_array_equal(z["out0"], X * 2.0)


def test_a_format_string_with_a_newline_as_jax_printed_it(tmp_path, capsys):
    path = CORPUS / "jax-0.12.0.1" / "debug_print_newline_in_fmt.jaxpr"
    if not path.exists():
        pytest.skip(f"reference corpus not found at {CORPUS}")

    def f(x):
        jax.debug.print("line1\nline2 ] {} [ x=y", x)
        return x

    assert tool_lines(tmp_path, path.read_text()) == jax_lines(capsys, f, X)


@pytest.mark.parametrize(
    "f, why",
    [
        (lambda x: jax.debug.print("{a}", a={"u": x}), "in_tree=PyTreeDef"),
        (lambda x: jax.debug.log("{}", x), "logging_record="),
    ],
    ids=["nested-pytree", "debug-log"],
)
def test_what_the_text_cannot_rebuild_is_refused_at_the_equation(tmp_path, f, why):
    src = tmp_path / "p.jaxpr"
    src.write_text(str(jax.make_jaxpr(f)(X)) + "\n")
    r = run(["--no-color", "run", str(src), "--input", INPUT])
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert f"{src}:2:5: error: cannot run 'debug_print': parameter value {why}" in r.output, (
        r.output
    )


@jax.jit
def _noisy_cube(x):
    jax.debug.print("inner {}", x)
    return x**3


def noisy(x):
    _noisy_cube(x)  # its result is unused: the print alone keeps the jit alive in JAX
    return jnp.sin(x) * 2.0


def noisy_loss(x):
    return noisy(x).sum()


XS = np.stack([X, X * 3.0])
#: command line, the function it is traced from, JAX's transformation of it, its inputs
TRANSFORMS = {
    "jvp": (["jvp"], noisy, lambda x, t: jax.jvp(noisy, (x,), (t,)), (X, X)),
    "grad": (["grad"], noisy_loss, jax.grad(noisy_loss), (X,)),
    "vmap": (["vmap", "--axis-size", "2"], noisy, jax.vmap(noisy), (XS,)),
}


@pytest.mark.parametrize("command", sorted(TRANSFORMS))
def test_transformations_keep_a_print_nested_in_an_unused_call(tmp_path, capsys, command):
    """The AD walks and vmap drop equations whose results are unused, but never one that
    holds an effect in its body (a jit around a debug_print; vmap's per-example loop), as
    JAX keeps it: `run` of the transformed program prints what JAX's transformation prints."""
    argv, f, transformed, args = TRANSFORMS[command]
    src, out = tmp_path / "p.jaxpr", tmp_path / "t.jaxpr"
    src.write_text(str(jax.make_jaxpr(f)(X)) + "\n")
    r = run(["--no-color", *argv, str(src), "-o", str(out)])
    assert r.exit_code == 0, r.output
    want = jax_lines(capsys, transformed, *args)
    inputs = [f"--input=f32{list(a.shape)}=" + " ".join(map(str, a.ravel())) for a in args]
    r = run(["--no-color", "run", str(out), *inputs, "-o", str(tmp_path / "o.npz")])
    assert r.exit_code == 0, r.output
    assert want and sorted(r.stdout.splitlines()) == sorted(want)
