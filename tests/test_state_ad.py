"""Refs (new_ref / get / swap / addupdate / freeze) under the transformations: forward mode
as JAX's state JVPs (a Ref's tangent is a Ref), against jax.jvp; vmap as JAX's (every Ref made
inside the vmap batched at axis 0, indexed `[:, IDX]`), against jax.vmap and its printout;
reverse mode, which the tool does not do yet, refused with the location (never a silently
wrong program)."""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax_oracle import close, ir, run  # noqa: E402

from jaxprtool import backend  # noqa: E402
from jaxprtool.ad.api import jvp_jaxpr  # noqa: E402
from jaxprtool.core import all_eqns  # noqa: E402
from jaxprtool.text.parser import parse  # noqa: E402


def written(x):
    r = jax.new_ref(jnp.zeros_like(x))
    r[...] = jnp.sin(x)
    r[1:] += x[1:] * 2.0
    y = r[...]
    r[2:] = r[2:] * y[:2]
    return jax.freeze(r) * y


def accumulated(x, w):
    r = jax.new_ref(w)
    for k in range(3):
        r[k] += x[k] * w[k]
    return r[...] + jax.freeze(r)


X = np.array([0.1, 0.4, -0.7, 1.0], np.float32)
T = np.array([0.7, -0.5, 0.3, 0.2], np.float32)
W = np.array([1.5, -1.0, 0.5, 2.0], np.float32)


@pytest.mark.parametrize(
    "f,args,tangents",
    [(written, [X], [T]), (accumulated, [X, W], [T, W * 0.5])],
    ids=["written", "accumulated"],
)
def test_jvp_through_refs_is_jax_s(f, args, tangents):
    j = ir(f, *args)
    jj = jvp_jaxpr(j)
    got = backend.evaluate(jj, args + tangents)
    out, tout = jax.jvp(f, tuple(args), tuple(tangents))
    close(got[0], out)
    close(got[1], tout)
    theirs = ir(lambda a, t: jax.jvp(f, a, t), args, tangents)
    assert len(list(all_eqns(jj))) <= len(list(all_eqns(theirs)))


def test_reverse_mode_of_refs_is_refused_with_the_location(tmp_path):
    src = tmp_path / "w.jaxpr"
    src.write_text(str(jax.make_jaxpr(lambda x: written(x).sum())(X)) + "\n")
    for cmd in (["grad"], ["vjp"], ["linearize"]):
        r = run([*cmd, str(src)])
        assert r.exit_code == 1, (cmd, r.output)
        assert f"{src}:5:5: error: 'swap': reverse mode" in r.output, r.output
        assert "Traceback" not in r.output


def test_refs_untouched_by_the_derivative_still_linearize():
    """A Ref the differentiated inputs never reach is primal work: grad goes through."""

    def f(x, c):
        r = jax.new_ref(c)
        r[...] = c * 2.0
        return jnp.sum(jnp.sin(x) * r[...])

    r = run(["grad", "-"], stdin=str(jax.make_jaxpr(f)(X, W)))
    assert r.exit_code == 0, r.output
    (got,) = backend.evaluate(parse(r.stdout, "<grad>").jaxpr, [X, W])
    close(got, jax.grad(f)(X, W))


@pytest.mark.parametrize(
    "f,args,in_axes",
    [(written, [np.stack([X, W])], (0,)), (accumulated, [np.stack([X, W]), W], (0, None))],
    ids=["written", "accumulated-unbatched-ref-value"],
)
def test_vmap_through_refs_is_jax_s(f, args, in_axes):
    from jaxprtool.ad.batching import vmap_jaxpr
    from jaxprtool.text.printer import print_jaxpr

    single = [a[0] if d == 0 else a for a, d in zip(args, in_axes)]
    j = vmap_jaxpr(ir(f, *single), list(in_axes), [0], 2)
    want = jax.vmap(f, in_axes=in_axes)(*args)
    close(backend.evaluate(j, args)[0], want)
    theirs = str(jax.make_jaxpr(jax.vmap(f, in_axes=in_axes))(*args))
    assert print_jaxpr(j) == theirs.replace("(np.int64(1),)", "(1,)")


def test_vmap_of_run_state_batches_its_refs():
    """JAX 0.12 has no batching rule for run_state; the tool batches its body's Refs at axis 0
    (the equations of one example, batched), checked against JAX run on each example."""
    from jax._src.state.discharge import run_state

    from jaxprtool.ad.batching import vmap_jaxpr

    def f(x, w):
        def body(refs):
            a, b = refs
            b[...] = a[...] * 2.0 + b[...]
            a[1:] = jnp.sin(b[1:]) * w[1:]

        return run_state(body)((x, x + 1.0))

    xs = np.stack([X, W, X * 3.0])
    j = vmap_jaxpr(ir(f, X, W), [0, None], 0, 3)
    assert [e.prim for e in j.eqns].count("run_state") == 1
    assert "scan" not in {e.prim for e in j.eqns}
    got = backend.evaluate(j, [xs, W])
    for k, out in enumerate(got):
        close(out, np.stack([np.asarray(f(x, W)[k]) for x in xs]))
