"""JAX 0.12.1: its printing beside 0.12.0.1's, on the same programs; random_bits' streams
and random_poisson.

`tests/data/jax-0.12.1/` holds what JAX 0.12.1 printed for six cases of the reference
corpus (`../shared/jaxpr-format/generator/gen.py`, run with JAX 0.12.1 on 2026-12-06),
`tests/data/jax-0.12.0.1/` what 0.12.0.1 printed for them (copied from the corpus).  The
two differ only where 0.12.1 changed the printing: gather's and the scatters' new
`out_sharding=None`, random_bits' `num_streams=1 out_sharding=None`, random_split's
`out_sharding=None`, sharding_constraint without `unconstrained_dims` (and the line breaks
that longer parameter lists bring).  Each text must print back as it is, and as the other
version's text in the other version's style.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from jaxprtool.text.parser import parse
from jaxprtool.text.printer import print_jaxpr
from jaxprtool.text.style import DEFAULT_STYLE, STYLE_0_12_0, Style, detect_style, unmarked_style

DATA = Path(__file__).resolve().parent / "data"
NEW, OLD = DATA / "jax-0.12.1", DATA / "jax-0.12.0.1"
CASES = sorted(p.stem for p in NEW.glob("*.jaxpr"))


def _read(folder: Path, name: str):
    text = (folder / f"{name}.jaxpr").read_text()
    return text, parse(text, f"{folder.name}/{name}.jaxpr").jaxpr


def test_the_pairs_are_there():
    assert len(CASES) == 6 and {p.stem for p in OLD.glob("*.jaxpr")} == set(CASES)
    assert DEFAULT_STYLE == Style((0, 12, 1)) and STYLE_0_12_0 == Style((0, 12, 0, 1))


def _old_style() -> Style:
    """What 0.12.0.1's texts here are read as: none holds a form only 0.12 prints, so an
    installed 0.10 or 0.11 (which print them alike) decides; 0.12.0.1 where a 0.12 is
    installed (0.12.1 prints gathers and scatters otherwise)."""
    mine = unmarked_style()
    return STYLE_0_12_0 if mine in (DEFAULT_STYLE, STYLE_0_12_0) else mine


@pytest.mark.parametrize("name", CASES)
def test_each_version_is_detected_and_printed_back(name):
    for folder, style in ((NEW, DEFAULT_STYLE), (OLD, _old_style())):
        text, j = _read(folder, name)
        assert detect_style(j) == style, (folder.name, name)
        assert print_jaxpr(j, style) + "\n" == text, (folder.name, name)


@pytest.mark.parametrize("name", CASES)
def test_each_version_prints_as_the_other(name):
    """0.12.1's program in 0.12.0.1's style is 0.12.0.1's text, and the other way round."""
    new_text, new = _read(NEW, name)
    old_text, old = _read(OLD, name)
    assert print_jaxpr(new, STYLE_0_12_0) + "\n" == old_text
    assert print_jaxpr(old, DEFAULT_STYLE) + "\n" == new_text


def _gather_modes(x, idx):
    """The corpus case `gather_modes` (generator/cases.py)."""
    return (
        x.at[idx].get(mode="clip"),
        x.at[idx].get(mode="fill", fill_value=-1.0),
        x.at[idx].get(mode="promise_in_bounds"),
        x.at[idx].get(indices_are_sorted=True, unique_indices=True),
    )


def _scatter_2d(x, rows, cols, v):
    """The corpus case `scatter_2d`."""
    return x.at[rows, cols].add(v), x.at[:, cols].set(0.0)


RUNS = {
    "gather_modes": (
        _gather_modes,
        [np.linspace(1.0, 2.0, 6, dtype=np.float32), np.array([1, 7], np.int32)],
    ),
    "scatter_2d": (
        _scatter_2d,
        [
            np.arange(20, dtype=np.float32).reshape(4, 5),
            np.array([0, 1], np.int32),
            np.array([2, 3], np.int32),
            np.array([5.0, -3.0], np.float32),
        ],
    ),
}


@pytest.mark.parametrize("name", sorted(RUNS))
def test_both_versions_texts_run_on_the_installed_jax(name):
    """Whichever JAX is installed: 0.12.1's text has `out_sharding=None` (left out where the
    installed JAX takes no such parameter), 0.12.0.1's lacks it (filled in where the
    installed one requires it); both give what the installed JAX computes."""
    import jax

    from jaxprtool import backend

    fn, args = RUNS[name]
    want = jax.jit(fn)(*args)
    for folder in (NEW, OLD):
        _, j = _read(folder, name)
        got = backend.evaluate(j, args)
        assert len(got) == len(want)
        for a, b in zip(got, want):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_random_bits_with_two_streams_runs_and_batches_as_jax():
    """JAX 0.12.1's random_bits makes `num_streams` results: printed back, run and batched
    to JAX's bits."""
    import inspect

    import jax
    from jax._src.random import prng
    from jax_oracle import together

    from jaxprtool.ad.batching import vmap_jaxpr

    if "num_streams" not in inspect.signature(prng.random_bits).parameters:
        pytest.skip(f"the installed JAX ({jax.__version__}) has no random_bits num_streams")

    def f(seed):
        return tuple(
            prng.random_bits(jax.random.key(seed), bit_width=32, shape=(3,), num_streams=2)
        )

    text = str(jax.make_jaxpr(f)(np.int32(5))) + "\n"
    j = parse(text, "<two streams>").jaxpr
    assert "num_streams=2" in text and print_jaxpr(j, detect_style(j)) + "\n" == text
    seeds = np.arange(4, dtype=np.int32)
    # the program and its batched program beside JAX's: one compilation
    ran, want, batched, want_batched = together(
        (j, [np.int32(5)]),
        (f, [np.int32(5)]),
        (vmap_jaxpr(j, 0, 0, axis_size=4), [seeds]),
        (jax.vmap(f), [seeds]),
    )
    for a, b in [*zip(ran, want, strict=True), *zip(batched, want_batched, strict=True)]:
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_random_poisson_runs_and_batches_as_jax():
    """JAX 0.12.1's jax.random.poisson is one primitive, `random_poisson[dtype out_sharding]`:
    typed, printed back, run and batched (keys and rates both batched) to JAX's counts; its
    counts have no derivative (the tool's reverse mode through them is JAX's)."""
    import jax
    from jax_oracle import together

    from jaxprtool.ad.api import vjp_jaxpr
    from jaxprtool.ad.batching import vmap_jaxpr

    def f(seed, rate):
        counts = jax.random.poisson(jax.random.key(seed), rate, (3,))
        return counts, (counts * rate).sum()

    seed, rate, ct = np.int32(4), np.float32(2.5), np.float32(0.75)
    text = str(jax.make_jaxpr(f)(seed, rate)) + "\n"
    if "random_poisson[" not in text:
        pytest.skip(f"the installed JAX ({jax.__version__}) has no random_poisson primitive")
    j = parse(text, "<poisson>").jaxpr
    assert print_jaxpr(j, detect_style(j)) + "\n" == text
    seeds, rates = np.arange(4, dtype=np.int32), np.linspace(0.5, 9.0, 4, dtype=np.float32)

    def jax_vjp(seed, rate, ct):
        """f's outputs and the rate's cotangent (the counts' is float0: they have none)."""
        outs, pull = jax.vjp(lambda r: f(seed, r), rate)
        return outs, pull((np.zeros((3,), jax.dtypes.float0), ct))

    # the tool's two programs and JAX's two answers in one XLA compile (`together`): the vjp
    # runs f (its outputs are the run's), then its reverse mode (a sampler is seconds of XLA
    # compile: one for the run and the derivative, one for the batch, on each side)
    pulled, ((want, want_loss), (want_ct,)), batched, want_batched = together(
        (vjp_jaxpr(j, [1]), [seed, rate, ct]),
        (jax_vjp, (seed, rate, ct)),
        (vmap_jaxpr(j, 0, 0, axis_size=4), [seeds, rates]),
        (jax.vmap(f), (seeds, rates)),
    )
    ran, (got_ct,) = pulled[:2], pulled[2:]
    for a, b in [
        *zip(ran, (want, want_loss), strict=True),
        *zip(batched, want_batched, strict=True),
    ]:
        np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(got_ct, want_ct, rtol=1e-6)
    np.testing.assert_allclose(want_ct, ct * want.sum(), rtol=1e-6)  # counts held constant
