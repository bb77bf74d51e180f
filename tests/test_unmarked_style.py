"""A text that no version-only form marks (JAX 0.10.2 and 0.12 print it alike) is printed in
the installed JAX's style, else the newest (`text/style.py`, `unmarked_style`); the forms
that only 0.10 printed still mark it, and `--jax-style` chooses any other.

The oracle is text JAX printed: the installed JAX (0.12) prints tanh's derivative with
`one_minus_square`, which 0.10.2 lacks (the corpus's `jax-0.10.2/ad_jvp.jaxpr`).
"""

from __future__ import annotations

import importlib.metadata

import numpy as np
import pytest
from conftest import CORPUS, needs_corpus
from jax_oracle import close, run

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

from jaxprtool.text import style as style_mod  # noqa: E402
from jaxprtool.text.parser import parse  # noqa: E402
from jaxprtool.text.style import (  # noqa: E402
    STYLE_0_10,
    STYLE_0_11,
    Style,
    detect_style,
    unmarked_style,
)

X = np.array([0.3, -1.2, 2.0], np.float32)
T = np.array([1.0, 0.5, -0.25], np.float32)


def f(x):
    return x**2 * jnp.tanh(x)


@pytest.fixture(scope="module")
def texts(tmp_path_factory):
    """JAX's printouts of f (marked by nothing) and of its jvp (with `one_minus_square`)."""
    folder = tmp_path_factory.mktemp("unmarked")
    prog = folder / "f.jaxpr"
    prog.write_text(str(jax.make_jaxpr(f)(X)) + "\n")
    jvp_text = str(jax.make_jaxpr(lambda x, t: jax.jvp(f, (x,), (t,)))(X, T)) + "\n"
    return prog, jvp_text


def test_jvp_of_unmarked_text_is_what_the_installed_jax_prints(texts, tmp_path):
    """(Byte for byte with JAX 0.12's rules; an older installed JAX writes the derivatives of
    x**2 and tanh otherwise, but the tool's text has nothing that JAX lacks: no
    one_minus_square before 0.12.)"""
    prog, jax_jvp = texts
    newest = jax.__version__.startswith("0.12")
    assert ("one_minus_square" in jax_jvp) == newest
    assert detect_style(parse(prog.read_text(), str(prog)).jaxpr) == unmarked_style()
    out = tmp_path / "jvp.jaxpr"
    r = run(["jvp", str(prog), "-o", str(out)])
    assert r.exit_code == 0, r.output
    if newest:
        assert out.read_text() == jax_jvp  # byte for byte
    else:
        assert "one_minus_square" not in out.read_text()
    np.savez(tmp_path / "a.npz", X, T)
    r = run(["run", str(out), "--args", str(tmp_path / "a.npz"), "-o", str(tmp_path / "o.npz")])
    assert r.exit_code == 0, r.output
    with np.load(tmp_path / "o.npz") as d:
        for got, want in zip((d["out0"], d["out1"]), jax.jvp(f, (X,), (T,))):
            close(got, want)


@needs_corpus
def test_jax_style_chooses_another(texts):
    """`--jax-style 0.10.2` writes no `one_minus_square`, as JAX 0.10.2 did not."""
    assert "one_minus_square" not in (CORPUS / "jax-0.10.2" / "ad_jvp.jaxpr").read_text()
    prog, _ = texts
    r = run(["--jax-style", "0.10.2", "jvp", str(prog)])
    assert r.exit_code == 0, r.output
    assert "one_minus_square" not in r.stdout and "tanh" in r.stdout


@needs_corpus
def test_forms_only_0_10_printed_still_mark_the_text():
    """scan's `num_consts` (0.10 and older), reduce_max without `out_sharding` (0.10 and 0.11:
    the installed one of the two, else 0.10.2): JAX 0.10.2's own printouts."""
    for name in ("scan.jaxpr", "jnp_misc_highlevel.jaxpr"):
        path = CORPUS / "jax-0.10.2" / name
        assert detect_style(parse(path.read_text(), str(path)).jaxpr) == STYLE_0_10, name
    text = "{ lambda ; a:f32[3]. let b:f32[] = reduce_max[axes=(0,)] a in (b,) }\n"
    want = STYLE_0_11 if unmarked_style() == STYLE_0_11 else STYLE_0_10
    assert detect_style(parse(text, "<max>").jaxpr) == want
    text = text.replace("axes=(0,)", "axes=(0,) out_sharding=None")
    assert detect_style(parse(text, "<max>").jaxpr) == unmarked_style()


@pytest.mark.parametrize(
    ("installed", "want"),
    [
        ("0.10.2", (0, 10, 2)),
        ("0.11.1", (0, 11, 0)),
        ("0.12.0.1", (0, 12, 0, 1)),
        ("0.12.1", (0, 12, 1)),
        ("0.13.0", (0, 12, 1)),
        ("0.7.2", (0, 12, 1)),
        (None, (0, 12, 1)),
    ],
)
def test_unmarked_style_follows_the_installed_jax(monkeypatch, installed, want):
    """The installed version where it prints unmarked text as 0.10.2, 0.11, 0.12.0.1 or 0.12.1
    do, else the newest (an older JAX would print some of it otherwise: hoisting, broadcast_in_dim)."""

    def version(name):
        assert name == "jax"
        return installed

    monkeypatch.setattr(style_mod, "installed_version", version)
    unmarked_style.cache_clear()
    try:
        assert unmarked_style() == Style(want)
    finally:
        unmarked_style.cache_clear()
    assert style_mod.DEFAULT_STYLE == Style((0, 12, 1))  # the newest the tool writes


@pytest.mark.parametrize("dist", ["jax", "jaxlib", "numpy", "ml-dtypes", "click", "no-such-dist"])
def test_installed_version_is_what_importlib_metadata_reads(dist):
    """The version read from the `.dist-info` folder's name (no importlib.metadata import at
    start-up) is the one importlib.metadata reads from the package's metadata."""
    try:
        want = importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        want = None
    assert style_mod.installed_version(dist) == want
