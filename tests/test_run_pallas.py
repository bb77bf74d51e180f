"""`run` of `pallas_call` (issue 25): a kernel without a grid over whole-array blocks runs
as JAX's interpret mode runs it (its jaxpr on Refs holding the operands and the outputs),
against JAX's numbers with `interpret=True` (on CPU JAX runs Pallas only so); a kernel with
a grid is refused at the equation, since the printed GridMapping lacks the block index
maps."""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
pl = pytest.importorskip("jax.experimental.pallas")
import jax.numpy as jnp  # noqa: E402
from jax_oracle import close, run  # noqa: E402

X = np.arange(8, dtype=np.float32) / 3
Y = np.cos(X)


def two_outputs(x_ref, y_ref, o_ref, p_ref):
    o_ref[...] = x_ref[...] * 2 + jnp.sin(y_ref[...])
    p_ref[...] = jnp.zeros_like(p_ref)
    p_ref[1:3] = x_ref[1:3] - 1.0
    p_ref[...] += y_ref[...]


def kernel_call(interpret: bool):
    out = (jax.ShapeDtypeStruct(X.shape, X.dtype),) * 2
    return lambda x, y: pl.pallas_call(two_outputs, out_shape=out, interpret=interpret)(x, y)


def run_text(tmp_path, text, *arrays):
    src = tmp_path / "k.jaxpr"
    src.write_text(text + "\n")
    files = []
    for i, a in enumerate(arrays):
        np.save(tmp_path / f"a{i}.npy", a)
        files += ["--arg", str(tmp_path / f"a{i}.npy")]
    r = run(["--no-color", "run", str(src), *files, "-o", str(tmp_path / "o.npz")])
    return src, r


@pytest.fixture(scope="module")
def interpreted():
    """JAX's interpreted kernel at (X, Y): computed once for both texts."""
    return kernel_call(True)(X, Y)


@pytest.mark.parametrize("interpret", [True, False], ids=["interpret", "compiled-kernel"])
def test_a_whole_array_kernel_runs_as_jax_s_interpret_mode(tmp_path, interpret, interpreted):
    """The text of a kernel meant for a GPU (interpret=False, which JAX cannot run on CPU)
    runs too: its values are the interpreted kernel's."""
    want = interpreted
    text = str(jax.make_jaxpr(kernel_call(interpret))(X, Y))
    assert "pallas_call[" in text and "grid=()" in text
    _, r = run_text(tmp_path, text, X, Y)
    assert r.exit_code == 0, r.output
    with np.load(tmp_path / "o.npz", allow_pickle=False) as z:
        for k, w in enumerate(want):
            close(z[f"out{k}"], w)


def test_a_kernel_with_a_grid_is_refused_at_the_equation(tmp_path):
    def double(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2

    spec = pl.BlockSpec((4,), lambda i: (i,))
    f = pl.pallas_call(
        double,
        out_shape=jax.ShapeDtypeStruct(X.shape, X.dtype),
        grid=(2,),
        in_specs=[spec],
        out_specs=spec,
        interpret=True,
    )
    np.testing.assert_allclose(f(X), X * 2)  # JAX runs it, knowing the index maps
    src, r = run_text(tmp_path, str(jax.make_jaxpr(f)(X)), X)
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert f"{src}:2:5: error: cannot run 'pallas_call' is a Pallas kernel with a grid" in (
        r.output
    )
    assert "not the index maps" in r.output


def _corpus_kernel(x_ref, y_ref, o_ref):  # the corpus case `pallas_interpret` (INDEX.md)
    o_ref[...] = x_ref[...] + y_ref[...] * 2.0
    o_ref[0, :] = jnp.zeros(8)


CORPUS_XY = np.random.default_rng(0).normal(size=(2, 4, 8)).astype(np.float32)


@pytest.fixture(scope="module")
def corpus_want():
    """JAX's interpreted corpus kernel at CORPUS_XY: computed once for the four versions."""
    x, y = CORPUS_XY
    return pl.pallas_call(
        _corpus_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), interpret=True
    )(x, y)


@pytest.mark.parametrize(
    "version", ["jax-0.12.0.1", "jax-0.10.2", "older/jax-0.7.2", "older/jax-0.6.2"]
)
def test_the_kernel_each_jax_version_printed_runs(tmp_path, version, corpus_want):
    from conftest import CORPUS

    path = CORPUS / version / "pallas_interpret.jaxpr"
    if not path.exists():
        pytest.skip(f"reference corpus not found at {CORPUS}")
    x, y = CORPUS_XY
    want = corpus_want
    _, r = run_text(tmp_path, path.read_text(), x, y)
    assert r.exit_code == 0, r.output
    with np.load(tmp_path / "o.npz", allow_pickle=False) as z:
        close(z["out0"], want)


def sin_times(x_ref, y_ref, o_ref, p_ref):
    o_ref[...] = jnp.sin(x_ref[...]) * y_ref[...]
    p_ref[...] = x_ref[...] * 3.0


def sin_times_call(x, y):
    out = (jax.ShapeDtypeStruct(x.shape, x.dtype),) * 2
    return pl.pallas_call(sin_times, out_shape=out, interpret=True)(x, y)


@pytest.mark.parametrize("argnums", [(0, 1), (0,), (1,)], ids=str)
def test_jvp_of_a_whole_array_kernel_is_jax_s(argnums):
    """JAX's `_pallas_call_jvp_rule`: one pallas_call of the kernel's JVP (Refs: inputs,
    their tangents, outputs, theirs).  JAX's own rule fails to run with a zero tangent (its
    block mappings count every input twice), so the oracle is jax.jvp with zeros there; with
    every tangent, the program is the one JAX prints."""
    from jaxprtool import api

    tangents = [np.sin(X) + 1.0, Y * 2.0][: len(argnums)]
    prog = api.parse(str(jax.make_jaxpr(sin_times_call)(X, Y)))
    j = api.jvp(prog, argnums=argnums, opt="none")
    got = api.run(j, X, Y, *tangents)
    full = [np.zeros_like(X), np.zeros_like(Y)]
    for k, t in zip(argnums, tangents):
        full[k] = t
    outs, touts = jax.jvp(sin_times_call, (X, Y), tuple(full))
    for g, w in zip(got, [*outs, *touts]):
        close(g, w)
    if argnums == (0, 1):
        theirs = jax.make_jaxpr(lambda x, y, a, b: jax.jvp(sin_times_call, (x, y), (a, b)))
        assert api.format(j) == str(theirs(X, Y, X, Y))


def test_reverse_mode_of_a_kernel_is_refused_as_jax_refuses_it(tmp_path):
    def loss(x, y):
        return sin_times_call(x, y)[0].sum()

    with pytest.raises(ValueError, match="Linearization failed to produce known values"):
        jax.grad(loss)(X, Y)
    src = tmp_path / "g.jaxpr"
    src.write_text(str(jax.make_jaxpr(loss)(X, Y)) + "\n")
    r = run(["--no-color", "grad", str(src)])
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert f"{src}:2:5: error: reverse mode (linearize, vjp, grad) of pallas_call" in r.output


def test_vmap_of_a_whole_array_kernel_loops_over_the_examples(capsys):
    """JAX batches a kernel by adding a grid dimension, which the text could not carry back
    (no index maps): the tool runs the kernel once per example, with a warning, and gives
    jax.vmap's numbers."""
    from jaxprtool import api

    xs, ys = np.stack([X, X * 2.0, -X]), np.stack([Y, Y + 1.0, Y * Y])
    prog = api.parse(str(jax.make_jaxpr(sin_times_call)(X, Y)))
    batched = api.vmap(prog, in_axes=[0, 0], axis_size=3)
    assert "batching rule for 'pallas_call' adds a grid dimension" in capsys.readouterr().err
    for g, w in zip(api.run(batched, xs, ys), jax.vmap(sin_times_call)(xs, ys)):
        close(g, w)
