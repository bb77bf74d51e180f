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


@pytest.mark.parametrize("interpret", [True, False], ids=["interpret", "compiled-kernel"])
def test_a_whole_array_kernel_runs_as_jax_s_interpret_mode(tmp_path, interpret):
    """The text of a kernel meant for a GPU (interpret=False, which JAX cannot run on CPU)
    runs too: its values are the interpreted kernel's."""
    want = kernel_call(True)(X, Y)
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


@pytest.mark.parametrize(
    "version", ["jax-0.12.0.1", "jax-0.10.2", "older/jax-0.7.2", "older/jax-0.6.2"]
)
def test_the_kernel_each_jax_version_printed_runs(tmp_path, version):
    from conftest import CORPUS

    path = CORPUS / version / "pallas_interpret.jaxpr"
    if not path.exists():
        pytest.skip(f"reference corpus not found at {CORPUS}")
    x, y = np.random.default_rng(0).normal(size=(2, 4, 8)).astype(np.float32)
    want = pl.pallas_call(
        _corpus_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), interpret=True
    )(x, y)
    _, r = run_text(tmp_path, path.read_text(), x, y)
    assert r.exit_code == 0, r.output
    with np.load(tmp_path / "o.npz", allow_pickle=False) as z:
        close(z["out0"], want)
