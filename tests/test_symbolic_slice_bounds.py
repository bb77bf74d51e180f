"""Slices of a symbolic size are checked as JAX 0.12's shape rules check them (issue 25):
`x[1:3]` of `f32[2*b]` asks `2*b >= 3`, which JAX finds inconclusive (b = 1 says no), so
JAX refuses it and so does the tool, located; `x[0:2]`, `x[0:2*b]`, `x[1:2*b-1]`, `x[1:b]`
are decided (every symbol is at least 1) and accepted with JAX's result type; a bound
decidedly past the size is refused in JAX's words.  Each case is traced by JAX (with
`jax.export.symbolic_shape`): what JAX accepts, the tool reads back with the same type; what
JAX refuses, written as text, the tool refuses."""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402
from jax_oracle import run  # noqa: E402

(B,) = jax.export.symbolic_shape("b")
SPEC = jax.ShapeDtypeStruct((2 * B,), jnp.float32)
ONES3 = np.ones(3, np.float32)

# name -> (JAX's function, the equation as text for a refused case)
CASES = {
    "x[1:3]": (
        lambda x: lax.slice(x, (1,), (3,)),
        "c:f32[2] = slice[limit_indices=(3,) start_indices=(1,) strides=None] a",
    ),
    "x[0:2]": (lambda x: lax.slice(x, (0,), (2,)), None),
    "x[0:2*b]": (lambda x: lax.slice(x, (0,), (2 * B,)), None),
    "x[1:2*b-1]": (lambda x: lax.slice(x, (1,), (2 * B - 1,)), None),
    "x[1:b]": (lambda x: lax.slice(x, (1,), (B,)), None),
    "x[b:2*b]": (lambda x: lax.slice(x, (B,), (2 * B,)), None),
    "x[2:b+1]": (lambda x: lax.slice(x, (2,), (B + 1,)), None),
    "x[3:b+2]": (
        lambda x: lax.slice(x, (3,), (B + 2,)),
        "c:f32[b - 1] = slice[limit_indices=(b + 2,) start_indices=(3,) strides=None] a",
    ),
    "x[0:4:2]": (
        lambda x: lax.slice(x, (0,), (4,), (2,)),
        "c:f32[2] = slice[limit_indices=(4,) start_indices=(0,) strides=(2,)] a",
    ),
    "x[0:2*b+1]": (
        lambda x: lax.slice(x, (0,), (2 * B + 1,)),
        "c:f32[2*b + 1] = slice[limit_indices=(2*b + 1,) start_indices=(0,) strides=None] a",
    ),
    "dynamic_slice 3": (
        lambda x: lax.dynamic_slice(x, (1,), (3,)),
        "c:f32[3] = dynamic_slice[slice_sizes=(3,)] a 1:i32[]",
    ),
    "dynamic_slice 2": (lambda x: lax.dynamic_slice(x, (1,), (2,)), None),
    "dynamic_slice b": (lambda x: lax.dynamic_slice(x, (1,), (B,)), None),
    "dynamic_slice 2*b+1": (
        lambda x: lax.dynamic_slice(x, (1,), (2 * B + 1,)),
        "c:f32[2*b + 1] = dynamic_slice[slice_sizes=(2*b + 1,)] a 1:i32[]",
    ),
    "dynamic_update_slice 3": (
        lambda x: lax.dynamic_update_slice(x, ONES3, (1,)),
        "c:f32[2*b] = dynamic_update_slice a u 1:i32[]",
    ),
    "dynamic_update_slice 2": (lambda x: lax.dynamic_update_slice(x, ONES3[:2], (1,)), None),
}


def _jax(f):
    """JAX's printout, or its refusal (the exception)."""
    try:
        return str(jax.make_jaxpr(f)(SPEC))
    except Exception as e:  # noqa: BLE001 - the refusal is the oracle
        return e


@pytest.mark.parametrize("name", list(CASES))
def test_a_symbolic_slice_is_accepted_or_refused_as_jax_does(name):
    f, refused_text = CASES[name]
    theirs = _jax(f)
    if isinstance(theirs, str):
        assert refused_text is None, f"JAX accepts {name}"
        res = run(["check", "-"], stdin=theirs)
        assert res.exit_code == 0, res.output
        return
    assert refused_text is not None, f"JAX refuses {name}: {theirs}"
    binders = "a:f32[2*b] u:f32[3]" if " u " in refused_text else "a:f32[2*b]"
    text = f"{{ lambda ; {binders}. let\n    {refused_text}\n  in (c,) }}\n"
    res = run(["check", "-"], stdin=text)
    assert res.exit_code != 0, res.output
    assert "<stdin>:2:5: error:" in res.output
    if type(theirs).__name__ == "InconclusiveDimensionOperation":
        want = str(theirs).split("\n")[0].removesuffix(" is inconclusive.")
        assert want.lower() in res.output.lower(), (want, res.output)
        assert "JAX refuses this too" in res.output
    else:  # JAX's TypeError, in its words
        assert str(theirs).split("\n")[0] in res.output, (str(theirs), res.output)
