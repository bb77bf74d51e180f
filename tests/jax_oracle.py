"""Helpers shared by the AD tests: a JAX function's printout as our IR, tolerant comparison."""

from __future__ import annotations

import contextlib

import jax
import numpy as np
from click.testing import CliRunner

from jaxprtool.cli import main
from jaxprtool.text.parser import parse

TOL = 2e-3  # float32 atol = rtol, as the issues ask


def ir(f, *args):
    """Trace f with JAX, print the jaxpr, and parse that text with our parser."""
    return parse(str(jax.make_jaxpr(f)(*args)), "<jax>").jaxpr


def close(a, b, tol=TOL):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=tol, rtol=tol)


def vec(shape, seed, lo=-1.0, hi=1.0):
    """Uniform float32 values in [lo, hi)."""
    return np.random.default_rng(seed).uniform(lo, hi, shape).astype(np.float32)


def run(args, stdin=None):
    """The CLI in-process."""
    return CliRunner().invoke(main, args, input=stdin)


def policy_names_missing(policy_text, path) -> bool:
    """Whether a remat policy names a checkpoint name the program at `path` lacks (the tool
    refuses it as a usage error; JAX saves nothing for it)."""
    from jaxprtool.ad import remat

    try:
        remat.check_names(remat.parse_policy(policy_text), parse(path.read_text(), "f").jaxpr)
    except ValueError:
        return True
    return False


def together(*calls):
    """Each call `(fn, args)` run inside one `jax.jit`: one XLA compile for all of them
    instead of one per call (compiling is most of the suite's CPU time, issue 49).  `fn` is
    a program of the tool's, run by the function `backend.evaluate` jits
    (`backend.as_jax_function`, after the same `check_runnable` and symbolic sizes read off
    the inputs, in the same 64-bit scope), or a JAX function: the oracle.  Returns each
    call's outputs as numpy arrays: a program's as the list `backend.evaluate` returns, a
    JAX function's in the structure it returns.  A multi-device program runs on its own,
    through `backend.evaluate` (which places its inputs)."""
    import contextlib

    from jaxprtool import backend
    from jaxprtool.backend import sharding

    fns, alone = [], {}
    with contextlib.ExitStack() as scopes:
        for k, (fn, args) in enumerate(calls):
            if hasattr(fn, "eqns"):  # a program of the tool's
                backend.check_runnable(fn)
                if sharding.is_multi_device(fn):
                    alone[k] = backend.evaluate(fn, list(args))
                    continue
                scopes.enter_context(backend.x64_scope(fn))
                dims = backend.sizes_from_inputs(fn, args)
                fns.append(_as_list(backend.as_jax_function(fn, dims, False)))
            else:
                fns.append(fn)
        rest = [list(a) for k, (_, a) in enumerate(calls) if k not in alone]
        outs = iter(jax.jit(lambda xs: [f(*a) for f, a in zip(fns, xs)])(rest))
    done = [alone[k] if k in alone else next(outs) for k in range(len(calls))]
    return jax.tree.map(np.asarray, done)


def jax_value_and_vjp(f, x, ct):
    """JAX's value of f at x and its vjp of ct there, jitted: one compilation (eagerly,
    one a primitive)."""

    def value_and_pullback(x, ct):
        y, pull = jax.vjp(f, x)
        return y, pull(ct)[0]

    return jax.jit(value_and_pullback)(x, ct)


def explain_and_check_grad_give(prog, consts, x_npz, verdict: int) -> None:
    """explain and check-grad (reverse mode) of a program with a custom rule, at the point
    `x_npz` and the constants archive `consts`: exit `verdict` (0: its rules pass, 1: the
    finite differences find a rule false)."""
    args = ["--args", str(x_npz), "--consts", str(consts)]
    r = run(["explain", str(prog), *args])
    assert r.exit_code == verdict and "custom_vjp_call" in r.output, r.output
    assert ("a check FAILED" in r.output) == (verdict == 1), r.output
    r = run(["check-grad", str(prog), *args, "--modes", "rev"])  # fwd: refused as JAX
    assert r.exit_code == verdict, r.output
    assert f"{verdict} failure" in r.output, r.output  # (0 failures, 1 failure)


def _as_list(f):
    return lambda *xs: list(f(*xs))


@contextlib.contextmanager
def explain_walks():
    """The `ExplainData` of every walk the `explain` commands run inside make (the command's
    own, checked without walking the program a second time)."""
    import pytest

    from jaxprtool.ui import explain

    made = []
    walk = explain.explain_data

    def recorded(*args, **kwargs):
        made.append(walk(*args, **kwargs))
        return made[-1]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(explain, "explain_data", recorded)
        yield made
