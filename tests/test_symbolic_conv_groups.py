"""conv_general_dilated with a symbolic group count or kernel window (issue 25 leftovers).

JAX 0.12 traces a conv whose `feature_group_count` is symbolic (`feature_group_count=b`, and
`3*b` from its vmap of a conv with both operands batched), cannot lower it ("Convolutions
with non-static strides, dilation, feature_group_count, or batch_group_count"), and fails
where its rules compare such a count with 1 (the transposes, vmap of the kernel) and on the
VJP of a conv whose kernel window is symbolic (the transposes' padding is symbolic).  The
tool takes what JAX traces, with JAX's result types and, run at b = 2 (`run --dim b=2`), the
numbers of JAX's conv at that size; it refuses where JAX fails, in JAX's words."""

from __future__ import annotations

import re

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from click.testing import CliRunner  # noqa: E402
from jax import export, lax  # noqa: E402

from jaxprtool import api  # noqa: E402
from jaxprtool.cli import main  # noqa: E402
from jaxprtool.core import all_eqns  # noqa: E402
from tests.test_symbolic_ad import close, reread, run_at  # noqa: E402

(B,) = export.symbolic_shape("b")
SIZE = 2  # the size b takes when the programs run
F32 = jnp.float32


def _grouped(count):
    """A 1-d conv with `count` feature groups (symbolic `B`, or the size JAX runs it at)."""
    return lambda x, w: lax.conv_general_dilated(x, w, (1,), "VALID", feature_group_count=count)


def _shapes(b):
    return [(1, b, 4), (b, 1, 2)]


def _structs(shapes):
    return [jax.ShapeDtypeStruct(s, F32) for s in shapes]


def _text(f, shapes):
    return str(jax.make_jaxpr(f)(*_structs(shapes)))


def _arrays(shapes, seed=0):
    r = np.random.RandomState(seed)
    return [r.randn(*s).astype(np.float32) for s in shapes]


def _counts(program):
    return [
        str(e.params["feature_group_count"]) for e in all_eqns(program.jaxpr) if "conv" in e.prim
    ]


def _out_types(jaxpr):
    return [str(v.type) for v in jaxpr.outvars]


#: (in_axes, the batched shapes as functions of b): vmap of the input, of both operands
VMAPS = {
    "input": ((0, None), lambda b: [(3, 1, b, 4), (b, 1, 2)]),
    "both": ((0, 0), lambda b: [(3, 1, b, 4), (3, b, 1, 2)]),  # feature_group_count=3*b
}


def test_a_symbolic_group_count_reads_prints_and_runs_as_jax():
    """JAX's text reads and prints back as it is; run at b = 2 it is JAX's conv with 2
    groups.  JAX itself does not lower it."""
    text = _text(_grouped(B), _shapes(B))
    program = api.parse(text, "<jax>")
    assert api.format(program) == text and "feature_group_count=b" in text
    x, w = _arrays(_shapes(SIZE))
    close(run_at(program, x, w, sizes={"b": SIZE}), [_grouped(SIZE)(x, w)])
    with pytest.raises(NotImplementedError, match="non-static .*feature_group_count"):
        export.export(jax.jit(_grouped(B)))(*_structs(_shapes(B)))


def test_jvp_matches_jax():
    program = api.parse(_text(_grouped(B), _shapes(B)), "<jax>")
    got = reread(api.jvp(program))
    want = api.parse(
        _text(lambda x, w, t, u: jax.jvp(_grouped(B), (x, w), (t, u)), _shapes(B) * 2), "<jax>"
    )
    assert _out_types(got.jaxpr) == _out_types(want.jaxpr)
    assert set(_counts(got)) == set(_counts(want)) == {"b"}
    x, w, t, u = _arrays(_shapes(SIZE) * 2)
    y, ty = jax.jvp(_grouped(SIZE), (x, w), (t, u))
    close(run_at(got, x, w, t, u, sizes={"b": SIZE}), [y, ty])


@pytest.mark.parametrize("name", VMAPS)
def test_vmap_matches_jax(name):
    """vmap of the input keeps the count; of both operands it multiplies it by the batch
    size (`3*b`), printed as JAX prints it."""
    axes, shapes = VMAPS[name]
    program = api.parse(_text(_grouped(B), _shapes(B)), "<jax>")
    got = reread(api.vmap(program, list(axes), 0, 3))
    want = api.parse(_text(jax.vmap(_grouped(B), axes), shapes(B)), "<jax>")
    assert _out_types(got.jaxpr) == _out_types(want.jaxpr)
    assert _counts(got) == _counts(want)
    args = _arrays(shapes(SIZE))
    close(run_at(got, *args, sizes={"b": SIZE}), [jax.jit(jax.vmap(_grouped(SIZE), axes))(*args)])


def test_both_operands_over_a_symbolic_size_make_a_symbolic_count():
    """Batched over a symbolic size (a Jacobian's basis), both operands make the count
    symbolic: JAX's `feature_group_count=9*b` for 3 groups over `3*b` examples."""
    from jaxprtool.ad import batching as BT

    shapes = [(2, 3, 4), (3, 1, 2)]
    program = api.parse(_text(_grouped(3), shapes), "<jax>")
    with BT._context("3*b"):
        batched, _ = BT.batch_jaxpr_axes(program.jaxpr, [0, 0], [0])
    got = reread(api.Program(batched, program.style))
    sym = [(3 * B, *s) for s in shapes]
    want = api.parse(_text(jax.vmap(_grouped(3)), sym), "<jax>")
    assert _out_types(got.jaxpr) == _out_types(want.jaxpr)
    assert _counts(got) == _counts(want) == ["9*b"]
    args = _arrays([(3 * SIZE, *s) for s in shapes])
    close(run_at(got, *args, sizes={"b": SIZE}), [jax.jit(jax.vmap(_grouped(3)))(*args)])


def _vjp(f):
    return lambda x, w: jax.vjp(f, x, w)[1](f(x, w))


#: name -> (JAX's function to trace, its shapes, the tool's command, JAX's and the tool's
#: words, the name of JAX's exception)
REFUSED = {
    "vjp_of_a_symbolic_count": (
        _vjp(_grouped(B)),
        _shapes(B),
        ["vjp"],
        "Symbolic dimension comparison 'b' > '1' is inconclusive",
        "InconclusiveDimensionOperation",
    ),
    "vmap_of_the_kernel": (
        jax.vmap(_grouped(B), (None, 0)),
        [(1, B, 4), (3, B, 1, 2)],
        ["vmap", "--in-axes", "None,0", "--axis-size", "3"],
        "Symbolic dimension comparison 'b' > '1' is inconclusive",
        "InconclusiveDimensionOperation",
    ),
    "vjp_of_a_symbolic_window": (
        _vjp(lambda x, w: lax.conv_general_dilated(x, w, (1,), "VALID")),
        [(1, 1, 5), (1, 1, B)],
        ["vjp"],
        "padding argument to conv_general_dilated should be a string or a sequence of "
        "(low, high) pairs",
        "ValueError",
    ),
}


@pytest.mark.parametrize("name", REFUSED)
def test_refused_where_jax_fails_in_its_words(name, tmp_path):
    f, shapes, command, words, error = REFUSED[name]
    with pytest.raises(Exception, match=re.escape(words)) as raised:
        jax.make_jaxpr(f)(*_structs(shapes))
    assert type(raised.value).__name__ == error
    if name == "vmap_of_the_kernel":  # the tool's vmap takes the unbatched program
        f, shapes = _grouped(B), _shapes(B)
    elif name == "vjp_of_a_symbolic_window":
        f = lambda x, w: lax.conv_general_dilated(x, w, (1,), "VALID")  # noqa: E731
    else:
        f = _grouped(B)
    src = tmp_path / "p.jaxpr"
    src.write_text(_text(f, shapes))
    r = CliRunner().invoke(main, ["--no-color", *command, str(src)])
    assert r.exit_code == 1, r.output
    assert f"{src}:2:5: error: 'conv_general_dilated': {words}" in r.output
    assert "trace the program at concrete sizes" in r.output and "Traceback" not in r.output


def test_jacfwd_with_a_square_size_matches_jax():
    """jacfwd in the kernel of a grouped conv with `3*b` output features: the basis of `6*b`
    rows split into the groups makes sizes `6*b^2` and `18*b^2`, as in JAX's program
    (`^` binds tighter than `*`: 24 at b = 2), which runs as jax.jacfwd too."""
    from jaxprtool.ad.jacobians import jacfwd

    def f(w):
        return _grouped(3)(jnp.ones((1, 3, 4)), w)

    shapes = [(3 * B, 1, 2)]
    want = api.parse(_text(jax.jacfwd(f), shapes), "<jax>")
    program = api.parse(_text(f, shapes), "<jax>")
    got = reread(api.Program(jacfwd(program.jaxpr), program.style))
    assert _out_types(got.jaxpr) == _out_types(want.jaxpr) == ["f32[1,3*b,3,3*b,1,2]"]
    types = lambda p: {str(v.type) for e in all_eqns(p.jaxpr) for v in e.outputs}  # noqa: E731
    assert {"f32[3,6*b^2,1,2]", "f32[1,18*b^2,3]"} <= types(got) <= types(want)
    (w,) = _arrays([(3 * SIZE, 1, 2)])
    jac = jax.jit(jax.jacfwd(f))(w)  # (one compile for both comparisons)
    close(run_at(got, w, sizes={"b": SIZE}), [jac])
    close(run_at(want, w, sizes={"b": SIZE}), [jac])
