"""vmap of Ref reads, writes and accumulations at batched indices (issue 25), as JAX's
`_batch_indexer`: index arrays get the batch at their front and a batched Ref is indexed at
its axis 0 by an iota over the batch.  Each program is traced per example with JAX, batched by
the tool, and run (its numbers against jax.vmap's, its equations no more than JAX's, its text
JAX's own where JAX emits the same equations); what JAX refuses, or the tool does not cover,
is refused at the equation."""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax._src.state.primitives import ref_addupdate, ref_swap  # noqa: E402
from jax.experimental import pallas as pl  # noqa: E402
from jax_oracle import close, ir, run, together, vec  # noqa: E402

from jaxprtool import backend  # noqa: E402
from jaxprtool.ad.batching import vmap_jaxpr  # noqa: E402
from jaxprtool.backend.evaluator import Box, Interpreter  # noqa: E402
from jaxprtool.core import all_eqns  # noqa: E402
from jaxprtool.text.parser import parse  # noqa: E402
from jaxprtool.text.printer import print_jaxpr  # noqa: E402

B = 3


def idx(n, *shape, seed=0):
    return np.random.default_rng(seed).integers(0, n, shape).astype(np.int32)


def get_at(x, i):
    return jax.new_ref(x)[i]


def get_col(x, i):
    return jax.new_ref(x)[:, i]


def get_ij(x, i, j):
    return jax.new_ref(x)[i, j]


def get_apart(x, i, j):  # the index arrays are not contiguous: numpy puts them first
    return jax.new_ref(x)[i, :, j]


def get_after_slice(x, i):
    return jax.new_ref(x)[1:3, i]


def set_at(x, i, v):
    r = jax.new_ref(x)
    r[i] = v
    return r[...]


def set_col(x, i, v):
    r = jax.new_ref(x)
    r[:, i] = v
    return r[...]


def swap_col(x, i, v):
    r = jax.new_ref(x)
    old = ref_swap(r, (slice(None), i), v)
    return r[...], old


def add_col(x, i, v):
    r = jax.new_ref(x)
    ref_addupdate(r, (slice(None), i), v)
    return r[...]


def add_apart(x, i, j, v):
    r = jax.new_ref(x)
    ref_addupdate(r, (i, slice(None), j), v)
    return r[...]


def plus_equals(x, i, v):  # JAX traces `r[i] += v` as a get and a swap
    r = jax.new_ref(x)
    r[i] += v
    return r[...] * 2.0


CASES = {
    # name: (function, batched inputs, in_axes, whether the tool's text is JAX's)
    "get-[$0]": (get_at, [vec((B, 5), 1), idx(5, B)], (0, 0), True),
    "get-[$0]-value-unbatched": (get_at, [vec((5,), 2), idx(5, B)], (None, 0), True),
    "get-[$0,:]-arrays": (get_at, [vec((B, 4, 5), 3), idx(4, B, 2)], (0, 0), True),
    "get-[$0,:]-index-at-axis-1": (get_at, [vec((B, 4, 5), 4), idx(4, 2, B)], (0, 1), True),
    "get-[:,$0]": (get_col, [vec((B, 4, 5), 5), idx(5, B)], (0, 0), True),
    "get-[:,$0]-arrays": (get_col, [vec((B, 4, 5), 6), idx(5, B, 2)], (0, 0), True),
    "get-[$0,$1]": (get_ij, [vec((B, 4, 5), 7), idx(4, B), idx(5, B)], (0, 0, 0), True),
    "get-[$0,$1]-one-batched": (
        get_ij,
        [vec((B, 4, 5), 8), idx(4, B), np.int32(2)],
        (0, 0, None),
        True,
    ),
    "get-[$0,:,$1]": (get_apart, [vec((B, 4, 3, 5), 9), idx(4, B), idx(5, B)], (0, 0, 0), True),
    "get-[$0,:,$1]-arrays": (
        get_apart,
        [vec((B, 4, 3, 5), 10), idx(4, B, 2), idx(5, B, 2)],
        (0, 0, 0),
        True,
    ),
    "get-[$0,:,$1]-indices-unbatched": (
        get_apart,
        [vec((B, 4, 3, 5), 11), idx(4, 2), idx(5, 2)],
        (0, None, None),
        False,
    ),
    "get-[1:3,$0]": (get_after_slice, [vec((B, 4, 5), 12), idx(5, B)], (0, 0), True),
    "set-[$0]": (set_at, [vec((B, 5), 13), idx(5, B), vec((B,), 14)], (0, 0, 0), True),
    "set-[$0]-value-unbatched": (
        set_at,
        [vec((B, 5), 15), idx(5, B), np.float32(2.0)],
        (0, 0, None),
        True,
    ),
    "set-[$0,:]": (set_at, [vec((B, 4, 5), 16), idx(4, B), vec((B, 5), 17)], (0, 0, 0), True),
    "set-[:,$0]-value-at-axis-1": (
        set_col,
        [vec((B, 4, 5), 18), idx(5, B), vec((4, B), 19)],
        (0, 0, 1),
        True,
    ),
    "swap-[:,$0]-arrays": (
        swap_col,
        [vec((B, 4, 5), 20), idx(5, B, 2), vec((B, 4, 2), 21)],
        (0, 0, 0),
        True,
    ),
    "addupdate-[:,$0]": (
        add_col,
        [vec((B, 4, 5), 22), idx(5, B), vec((B, 4), 23)],
        (0, 0, 0),
        True,
    ),
    "addupdate-[:,$0]-value-unbatched": (
        add_col,
        [vec((B, 4, 5), 24), idx(5, B), vec((4,), 25)],
        (0, 0, None),
        True,
    ),
    "addupdate-[$0,:,$1]-arrays": (
        add_apart,
        [vec((B, 4, 3, 5), 26), idx(4, B, 2), idx(5, B, 2), vec((B, 2, 3), 27)],
        (0, 0, 0, 0),
        True,
    ),
    "addupdate-[$0,:,$1]-indices-unbatched": (
        add_apart,
        [vec((B, 4, 3, 5), 28), idx(4, 2), idx(5, 2), vec((B, 2, 3), 29)],
        (0, None, None, 0),
        False,
    ),
    "plus-equals-[$0]": (plus_equals, [vec((B, 5), 30), idx(5, B), vec((B,), 31)], (0, 0, 0), True),
}
FAST = {"get-[$0,:]-index-at-axis-1", "get-[$0,:,$1]", "swap-[:,$0]-arrays", "plus-equals-[$0]"}


def _example(args, in_axes, k=0):
    return [a if d is None else np.take(a, k, axis=d) for a, d in zip(args, in_axes)]


def _batched(f, args, in_axes):
    """The tool's vmap of f's per-example jaxpr (outputs batched at axis 0)."""
    j = ir(f, *_example(args, in_axes))
    return vmap_jaxpr(j, list(in_axes), [0] * len(j.outvars), B)


def _outputs(f, args, in_axes):
    want = jax.jit(jax.vmap(f, in_axes=in_axes))(*args)
    return list(want) if isinstance(want, tuple) else [want]


def _run_beside_jax(j, f, args, in_axes):
    """The batched program's outputs and jax.vmap's, in one compilation."""
    got, want = together((j, args), (jax.vmap(f, in_axes=in_axes), args))
    return got, list(want) if isinstance(want, tuple) else [want]


def _jax_text(f, args, in_axes):
    text = str(jax.make_jaxpr(jax.vmap(f, in_axes=in_axes))(*args))
    return text.replace("np.int64(1), np.int64(2)", "1, 2").replace("(np.int64(1),)", "(1,)")


def _n_eqns(j):
    return len(list(all_eqns(j)))


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=() if n in FAST else pytest.mark.slow) for n in CASES],
)
def test_batched_indices_into_refs_run_as_jax_vmap(name):
    f, args, in_axes, same_text = CASES[name]
    j = _batched(f, args, in_axes)
    got, want = _run_beside_jax(j, f, args, in_axes)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        close(a, b)
    theirs = jax.make_jaxpr(jax.vmap(f, in_axes=in_axes))(*args)
    assert _n_eqns(j) <= len(theirs.eqns)
    if same_text:
        assert print_jaxpr(j) == _jax_text(f, args, in_axes)


def test_unbatched_index_arrays_apart_keep_the_batch_where_numpy_puts_it():
    """`r[i, :, j]` with unbatched index arrays into a batched Ref: `[:, i, :, j]` puts the
    index block first, the batch after it (fewer equations than JAX's iota form)."""
    f, args, in_axes, _ = CASES["get-[$0,:,$1]-indices-unbatched"]
    j = _batched(f, args, in_axes)
    got, want = _run_beside_jax(j, f, args, in_axes)
    close(got[0], want[0])
    assert [e.prim for e in j.eqns] == ["new_ref", "get", "transpose"]


def test_a_batched_scalar_index_beside_an_index_array_and_a_literal_index():
    """Text JAX does not print itself (it broadcasts a scalar index beside arrays): the
    scalar is broadcast to the arrays' batched shape; a literal index stays in the text."""
    src = """{ lambda ; a:f32[4,5] b:i32[] c:i32[2]. let
    d:Ref{f32[4,5]} = new_ref[kind=None memory_space=None pin=False] a
    e:f32[2] <- d[b,c]
    f:f32[2] <- d[1,c]
  in (e, f) }"""
    x, i, c = vec((B, 4, 5), 40), idx(4, B), idx(5, B, 2)
    j = vmap_jaxpr(parse(src, "<t>").jaxpr, [0, 0, 0], [0, 0], B)
    got = backend.evaluate(j, [x, i, c])
    # JAX's numbers in one compile (eagerly: one per operation)
    want = jax.jit(lambda x, i, c: (jax.vmap(lambda x, i, c: x[i, c])(x, i, c),
                                    jax.vmap(lambda x, c: x[1, c])(x, c)))(x, i, c)  # fmt: skip
    close(got[0], want[0])
    close(got[1], want[1])
    gets = [e for e in j.eqns if e.prim == "get"]
    assert [str(e.params["indexer"]) for e in gets] == ["[$0,$1,$2]", "[$0,1,$1]"]


def test_a_ref_made_outside_the_vmap_is_read_at_batched_indices_as_jax_reads_it():
    """An unbatched Ref (a program input, in_axes None) read at batched indices: JAX's rule
    (no iota; the index block where numpy puts it), against JAX's vmap of a function that
    closes over a Ref made outside it."""
    x, i = vec((3, 4), 41), idx(4, B)

    def outside(x, i):
        r = jax.new_ref(x)
        return jax.vmap(lambda k: r[:, k])(i)

    j = vmap_jaxpr(ir(lambda r, k: r[:, k], jax.new_ref(jnp.asarray(x)), 1), [None, 0], [0], B)
    (got,) = Interpreter(mode="eager").run(j, [], [Box(jnp.asarray(x)), jnp.asarray(i)])
    close(got, outside(x, i))
    theirs = jax.make_jaxpr(outside)(x, i).eqns
    assert [e.prim for e in j.eqns] == [e.primitive.name for e in theirs[1:]]


def _window_get(x, i, j):
    return jax.new_ref(x)[j, pl.ds(i, 2)]


def _window_write(x, i, j, v):
    r = jax.new_ref(x)
    old = ref_swap(r, (j, pl.ds(i, 2)), v)
    ref_addupdate(r, (pl.ds(i, 2), j), v)
    return r[...], old


@pytest.mark.parametrize("start", [1, 3, -1], ids=["inside", "clamped-high", "clamped-low"])
def test_run_reads_and_writes_dynamic_slices_of_a_ref(start):
    """`r[j, i:i+2]` runs as JAX's discharge does (a dynamic slice, its start clamped)."""
    x, v = vec((3, 4), 42), vec((2,), 43)
    args = [x, np.int32(start), np.int32(1)]
    close(backend.evaluate(ir(_window_get, *args), args)[0], jax.jit(_window_get)(*args))
    got = backend.evaluate(ir(_window_write, *args, v), [*args, v])
    for a, b in zip(got, jax.jit(_window_write)(*args, v)):
        close(a, b)


def test_dynamic_slices_beside_batched_indices_are_jax_s():
    xs, js, vs = vec((B, 3, 4), 44), idx(3, B), vec((B, 2), 45)
    in_axes = (0, None, 0, 0)
    single = ir(_window_write, xs[0], np.int32(1), js[0], vs[0])
    j = vmap_jaxpr(single, list(in_axes), [0, 0], B)
    got, want = _run_beside_jax(j, _window_write, [xs, np.int32(1), js, vs], in_axes)
    assert len(got) == len(want) == 2
    for a, b in zip(got, want):
        close(a, b)
    assert print_jaxpr(j) == _jax_text(_window_write, [xs, 1, js, vs], in_axes)


def _refused(tmp_path, text, in_axes, where, message):
    src = tmp_path / "p.jaxpr"
    src.write_text(text + "\n")
    r = run(["vmap", "--in-axes", in_axes, "--axis-size", "2", str(src)])
    assert r.exit_code == 1, r.output
    assert f"{src}:{where}: error: " in r.output and message in r.output, r.output
    assert "Traceback" not in r.output and not r.stdout


def test_a_dynamic_slice_with_a_batched_start_is_refused_at_the_equation(tmp_path):
    text = str(jax.make_jaxpr(_window_get)(vec((3, 4), 46), 1, 2))
    _refused(tmp_path, text, "None,0,None", "3:5", "'get': vmap of a dynamic slice")


def test_writing_at_batched_indices_into_an_unbatched_ref_is_refused_as_by_jax(tmp_path):
    def write(r, i):
        r[i] = 1.0

    text = str(jax.make_jaxpr(write)(jax.new_ref(jnp.zeros(4)), 1))
    _refused(tmp_path, text, "None,0", "1:39", "'swap': vmap writes into a Ref that is not batched")


def test_an_indexing_with_a_transform_is_refused_at_the_equation(tmp_path):
    text = """{ lambda ; a:f32[4] b:i32[]. let
    c:Ref{f32[4]} = new_ref[kind=None memory_space=None pin=False] a
    d:f32[] <- c[b]{bitcast(f32)}
  in (d,) }"""
    _refused(tmp_path, text, "0,0", "3:5", "'get': vmap with batched indices cannot batch")


def test_cli_vmap_then_run_computes_jax_vmap(tmp_path):
    f, args, in_axes, _ = CASES["addupdate-[$0,:,$1]-arrays"]
    src = tmp_path / "add.jaxpr"
    src.write_text(str(jax.make_jaxpr(f)(*_example(args, in_axes))) + "\n")
    r = run(["vmap", "--in-axes", "0,0,0,0", "--axis-size", str(B), str(src)])
    assert r.exit_code == 0, r.output
    np.savez(tmp_path / "args.npz", *args)
    out = tmp_path / "out.npz"
    r = run(["run", "-", "--args", str(tmp_path / "args.npz"), "-o", str(out)], stdin=r.stdout)
    assert r.exit_code == 0, r.output
    with np.load(out, allow_pickle=False) as got:
        close(got["out0"], _outputs(f, args, in_axes)[0])


def test_vmap_of_a_gradient_through_a_ref_at_batched_indices_is_jax_s():
    """The reverse-mode program (its cotangent Ref read and accumulated into at the same
    index) batched over examples with their own indices, against jax.vmap(jax.grad)."""

    def f(x, i):
        r = jax.new_ref(jnp.zeros_like(x))
        r[...] = jnp.sin(x)
        r[i] += x[i] * 3.0
        return jnp.sum(r[...] * x)

    xs, i = vec((B, 5), 47), idx(5, B)
    r = run(["grad", "-"], stdin=str(jax.make_jaxpr(f)(xs[0], 1)))
    assert r.exit_code == 0, r.output
    j = vmap_jaxpr(parse(r.stdout, "<grad>").jaxpr, [0, 0], [0], B)
    (got,), want = together((j, [xs, i]), (jax.vmap(jax.grad(f)), [xs, i]))
    close(got, want)
