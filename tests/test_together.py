"""jax_oracle.together, the tests' one-compile runner of the tool's programs and JAX's
reference functions: it runs the tool's program (a wrong rule gives a wrong number there)."""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax_oracle import close, ir, together  # noqa: E402

from jaxprtool.ad.api import jvp_jaxpr  # noqa: E402


def _sin_twice(x):
    return jnp.sin(x) * 2


def test_together_runs_the_tool_s_program_and_the_oracle():
    x = np.linspace(0.1, 1, 4, dtype=np.float32)
    (out, tout), got = together(
        (lambda x: jax.jvp(_sin_twice, (x,), (x,)), (x,)), (jvp_jaxpr(ir(_sin_twice, x)), [x, x])
    )
    assert isinstance(got, list) and all(isinstance(g, np.ndarray) for g in got)
    close(got[0], out)
    close(got[1], tout)


def test_together_sees_a_wrong_rule(wrong_sin_rule):
    x = np.linspace(0.1, 1, 4, dtype=np.float32)
    (out, tout), got = together(
        (lambda x: jax.jvp(_sin_twice, (x,), (x,)), (x,)), (jvp_jaxpr(ir(_sin_twice, x)), [x, x])
    )
    close(got[0], out)
    with pytest.raises(AssertionError):
        close(got[1], tout)
