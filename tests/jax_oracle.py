"""Helpers shared by the AD tests: a JAX function's printout as our IR, tolerant comparison."""

from __future__ import annotations

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
