"""`run_state` under differentiation (issue 25): forward mode as JAX's `_run_state_jvp` (one
run_state whose body has a tangent Ref beside each Ref that carries one), against jax.jvp
for each choice of differentiated inputs, with no more equations than JAX's; reverse mode
refused at the equation, quoting JAX 0.12's refusal."""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax._src.state.discharge import run_state  # noqa: E402
from jax_oracle import close, ir, run, together  # noqa: E402

from jaxprtool.ad.api import jvp_jaxpr  # noqa: E402
from jaxprtool.core import all_eqns  # noqa: E402

X = np.array([0.1, 0.4, -0.7, 1.0], np.float32)
W = np.array([1.5, -1.0, 0.5, 2.0], np.float32)
T = np.array([0.7, -0.5, 0.3, 0.2], np.float32)


def two_refs(x, w):
    """`w` is closed over (a third Ref, never written a differentiated value unless w is)."""

    def body(refs):
        a, b = refs
        b[...] = a[...] * 2.0 + b[...]
        a[1:] = jnp.sin(b[1:]) * w[1:]

    return run_state(body)((x, x + 1.0))


def written_from_outside(x, w):
    """A Ref whose initial value has no tangent is written a differentiated value (JAX's
    fixpoint gives it a tangent Ref)."""

    def body(refs):
        a, b = refs
        b[...] = jnp.cos(a[...]) * b[...]

    return run_state(body)((x, w))


def jvp_of(f, argnums):
    """(x, w, tangents...) -> jax.jvp of f in the inputs `argnums`, the others held fixed."""

    def g(x, w, *tangents):
        def partial(*diff):
            args = [x, w]
            for k, v in zip(argnums, diff):
                args[k] = v
            return f(*args)

        return jax.jvp(partial, tuple([x, w][k] for k in argnums), tangents)

    return g


@pytest.mark.parametrize("f", [two_refs, written_from_outside], ids=lambda f: f.__name__)
@pytest.mark.parametrize("argnums", [(0,), (1,), (0, 1)], ids=str)
def test_jvp_of_run_state_is_jax_s(f, argnums):
    tangents = [T, W * 0.5][: len(argnums)]
    j = jvp_jaxpr(ir(f, X, W), argnums)
    # our program and JAX's jvp in one compile (eagerly, JAX compiles each operation)
    got, (outs, touts) = together((j, [X, W, *tangents]), (jvp_of(f, argnums), [X, W, *tangents]))
    for g, w in zip(got, list(outs) + list(touts)):
        close(g, w)
    theirs = ir(jvp_of(f, argnums), X, W, *tangents)
    assert [e.prim for e in j.eqns].count("run_state") == 1
    assert len(list(all_eqns(j))) <= len(list(all_eqns(theirs)))


def test_reverse_mode_of_run_state_is_refused_as_jax_refuses_it(tmp_path):
    def loss(x, w):
        return sum(jnp.sum(o) for o in two_refs(x, w))

    with pytest.raises(ValueError, match="Linearization failed to produce known values"):
        jax.grad(loss)(X, W)
    src = tmp_path / "r.jaxpr"
    text = str(jax.make_jaxpr(loss)(X, W)) + "\n"
    src.write_text(text)
    line = next(k for k, t in enumerate(text.splitlines(), 1) if "run_state[" in t)
    for cmd in ("grad", "vjp", "linearize"):
        r = run([cmd, str(src)])
        assert r.exit_code == 1 and "Traceback" not in r.output, (cmd, r.output)
        assert f"{src}:{line}:5: error: reverse mode (linearize, vjp, grad) of run_state" in (
            r.output
        ), r.output
        assert '"Linearization failed to produce known values"' in r.output
        assert "JAX 0.12 refuses it too" in r.output
