"""The corpus generator's programs differentiated as JAX differentiates them.

Each case of `../shared/jaxpr-format/generator/cases.py` makes a closed jaxpr; JAX evaluates
that very object (`jax.extend.core.jaxpr_as_fun`) under `jax.jvp` and `jax.vjp` (the oracle),
and the tool differentiates its printed text (`jvp_jaxpr`, `vjp_jaxpr`) and runs the result
with the jaxpr's constants.  Inputs lie in (0.2, 0.9), where the corpus's functions are
smooth and well-conditioned.  Where JAX has no reverse mode (while loops, run_state, ...)
the jvp alone is compared; float64 cases (made in another process by the generator) and
the two of `LEFT_OUT` are not collected; a case without a float input or output is skipped,
saying so.  The default run takes one case in 24; `make test-full` all of them.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest
from conftest import FORMAT_DIR

jax = pytest.importorskip("jax")
from jax.extend import core as jex  # noqa: E402
from jax_oracle import together  # noqa: E402

from jaxprtool import backend  # noqa: E402
from jaxprtool.ad.api import jvp_jaxpr, vjp_jaxpr  # noqa: E402
from jaxprtool.backend import sharding  # noqa: E402
from jaxprtool.core import JaxprError  # noqa: E402
from jaxprtool.text.parser import parse  # noqa: E402
from jaxprtool.ui.checkgrad import TOLERANCE, least_precise_dtype  # noqa: E402

GENERATOR = FORMAT_DIR / "generator"
#: texts that read another way than JAX meant (FORMAT.md §2: `_` reused by name
#: suggestion; the reader warns) and one whose outputs are ill-conditioned at any point
#: of the range in float32 (a 12-layer unscaled MLP's gradient)
LEFT_OUT = {"dropvar_name_aliasing_ambiguity", "model_large_mlp12_grad"}


def _cases() -> list:
    if not (GENERATOR / "cases.py").is_file():
        return []
    sys.path.insert(0, str(GENERATOR))
    try:
        import cases
    finally:
        sys.path.remove(str(GENERATOR))
    out = []
    for k, (name, fn, x64) in enumerate(cases.CASES):
        if x64 or name in LEFT_OUT:
            continue
        marks = [] if k % 24 == 0 else [pytest.mark.slow]
        out.append(pytest.param(fn, id=name, marks=marks))
    return out


def _random(aval, rng):
    try:
        dt = np.dtype(aval.dtype)
    except TypeError:  # a PRNG key type
        return None
    if np.issubdtype(dt, np.floating):
        return rng.uniform(0.2, 0.9, aval.shape).astype(dt)
    if np.issubdtype(dt, np.complexfloating):
        return (rng.uniform(0.2, 0.9, aval.shape) + 1j * rng.uniform(0.2, 0.9, aval.shape)).astype(
            dt
        )
    if dt == np.bool_:
        return rng.random(aval.shape) < 0.5
    if np.issubdtype(dt, np.integer):
        return rng.integers(0, 2, aval.shape).astype(dt)
    return None


def _close(got, want, what, tol):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, what
    scale = max(1.0, float(np.nanmax(np.abs(want)))) if want.size else 1.0
    np.testing.assert_allclose(
        got.astype(np.complex128), want.astype(np.complex128), rtol=tol, atol=tol * scale,
        equal_nan=True, err_msg=what,
    )  # fmt: skip


@pytest.mark.skipif(not GENERATOR.is_dir(), reason=f"corpus generator not found at {GENERATOR}")
@pytest.mark.parametrize("make", _cases())
def test_jvp_and_vjp_of_the_printed_program_are_jax_s(make):
    closed = make()
    if not hasattr(closed, "jaxpr"):
        pytest.skip("the case makes no closed jaxpr")
    avals = [v.aval for v in closed.jaxpr.invars]
    if not all(isinstance(d, int) for a in avals for d in getattr(a, "shape", ())):
        pytest.skip("symbolic input sizes (tests/test_symbolic_ad.py checks them at sizes)")
    rng = np.random.default_rng(0)
    args = [_random(a, rng) for a in avals]
    if any(a is None for a in args) or not all(hasattr(c, "shape") for c in closed.consts):
        pytest.skip("an input or constant that is no array")
    diff = [i for i, a in enumerate(avals) if np.issubdtype(np.dtype(a.dtype), np.inexact)]
    if not diff:
        pytest.skip("no float input to differentiate")
    f = jex.jaxpr_as_fun(closed)

    def g(*d):
        full = list(args)
        for i, x in zip(diff, d):
            full[i] = x
        return list(f(*full))

    primals = [args[i] for i in diff]
    # the outputs' types come from tracing alone
    try:
        outs = jax.eval_shape(g, *primals)
    except Exception as e:  # noqa: BLE001 - the oracle cannot run it here (an AbstractMesh, ...)
        pytest.skip(f"JAX cannot evaluate it here: {type(e).__name__}: {str(e)[:100]}")
    inexact = [k for k, o in enumerate(outs) if np.issubdtype(o.dtype, np.inexact)]
    if not inexact:
        pytest.skip("no float output")
    tangents = [_random(avals[i], rng) for i in diff]
    cts = [
        _random(jax.core.ShapedArray(o.shape, o.dtype), rng)
        if k in inexact
        else np.zeros(o.shape, jax.dtypes.float0)
        for k, o in enumerate(outs)
    ]

    def jvp(p, t):
        return jax.jvp(g, p, t)[1]

    def vjp(p):  # (the cotangents closed over: float0 ones are no jit argument)
        return jax.vjp(g, *p)[1](cts)

    case = (closed, diff, inexact, args, primals, tangents, cts, _oracles(jvp, vjp))
    merged = _merged(*case)  # JAX's jvp and vjp and the tool's: one compilation
    j, tol, n, (jax_t, jax_ct), tool_t, tool_ct = merged or _separately(*case)
    if len(tool_t) != n:  # tangents of the float outputs only
        tool_t = dict(zip(inexact, tool_t))
    for k in inexact:
        _close(tool_t[k], jax_t[k], f"jvp, output {k}", tol)
    if jax_ct is None:
        return
    for q, (a, b) in enumerate(zip(tool_ct, jax_ct, strict=True)):
        if np.asarray(b).dtype != jax.dtypes.float0:
            _close(a, b, f"vjp, input {diff[q]}", tol)


def _oracles(jvp, vjp):
    """JAX's jvp and vjp together, then its jvp alone (where JAX has no reverse mode)."""
    return [lambda p, t: (jvp(p, t), vjp(p)), lambda p, t: (jvp(p, t), None)]


def _tool_programs(closed, diff, inexact, cts, reverse):
    """(the parsed program, its tolerance, its jvp program, its vjp program or None, the
    cotangents the vjp takes); a skip where the tool refuses the jvp."""
    j = parse(str(closed), "<case>").jaxpr
    tol = TOLERANCE.get(least_precise_dtype(j), 2e-3)  # JAX's, for the narrowest float inside
    try:
        jv = jvp_jaxpr(j, diff)
    except JaxprError as e:  # the README's limits list these (a rule the text lacks, ...)
        pytest.skip(f"the tool refuses: {e.message.splitlines()[0][:160]}")
    if not reverse:
        return j, tol, jv, None, []
    v = vjp_jaxpr(j, diff)
    given = [c for k, c in enumerate(cts) if k in inexact]
    if len(v.invars) - len(j.invars) != len(given):
        given = [c for c in cts if c.dtype != jax.dtypes.float0]
    return j, tol, jv, v, given


def _merged(closed, diff, inexact, args, primals, tangents, cts, oracles):
    """JAX's jvp (and vjp) and the tool's programs run in one compilation (they compute the
    same functions on the same inputs: 2.0 -> 1.5 CPU-s on ew_unary_f32); None where that
    cannot be (a multi-device program, nested constants) or fails: `_separately` then runs
    and answers (or skips, or fails) as it always did."""
    consts = [np.asarray(c) for c in closed.consts]
    k = next((k for k, both in enumerate(oracles) if _traces(both, primals, tangents)), None)
    if k is None:  # JAX cannot trace its jvp: `_separately` skips, saying why
        return None
    both = oracles[k]
    try:
        j, tol, jv, v, given = _tool_programs(closed, diff, inexact, cts, reverse=k == 0)
    except (Exception, pytest.skip.Exception):  # noqa: BLE001 - `_separately` says why
        return None
    programs = [(jv, args + tangents)] + ([(v, args + given)] if v is not None else [])
    if sharding.is_multi_device(j) or any(len(p.constvars) != len(consts) for p, _ in programs):
        return None
    try:
        want, *outs = together(
            (both, (tuple(primals), tuple(tangents))), *[(p, consts + a) for p, a in programs]
        )
    except Exception:  # noqa: BLE001 - `_separately` says why
        return None
    n = len(j.outvars)
    return j, tol, n, want, outs[0][n:], outs[1][n:] if v is not None else None


def _traces(both, primals, tangents) -> bool:
    try:
        jax.eval_shape(both, tuple(primals), tuple(tangents))
    except Exception:  # noqa: BLE001 - `_separately` says why
        return False
    return True


def _separately(closed, diff, inexact, args, primals, tangents, cts, oracles):
    """JAX's jvp and vjp in one compilation, the tool's programs run by `backend.evaluate`,
    one compilation each; where JAX has no reverse mode, the jvp alone."""
    for both in oracles:
        try:
            jax_t, jax_ct = jax.jit(both)(tuple(primals), tuple(tangents))
            break
        except Exception as e:  # noqa: BLE001 - the oracle cannot: nothing to compare with
            failure = e
    else:
        e = failure
        pytest.skip(f"JAX's jvp fails: {type(e).__name__}: {str(e).splitlines()[0][:120]}")
    consts = [np.asarray(c) for c in closed.consts]
    j, tol, jv, v, given = _tool_programs(closed, diff, inexact, cts, jax_ct is not None)
    n = len(j.outvars)
    try:
        tool_t = backend.evaluate(jv, args + tangents, consts)[n:]
    except JaxprError as e:  # the README's limits list these (a rule the text lacks, ...)
        pytest.skip(f"the tool refuses: {e.message.splitlines()[0][:160]}")
    tool_ct = backend.evaluate(v, args + given, consts)[n:] if v is not None else None
    return j, tol, n, (jax_t, jax_ct), tool_t, tool_ct
