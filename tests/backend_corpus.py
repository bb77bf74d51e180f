"""Shared driver: run JAX 0.12 corpus files through the back end and compare with JAX itself.

The oracle is JAX: each corpus case in generator/cases.py returns the jaxpr JAX traced; we
run that jaxpr with jax.jit on the same random inputs and compare with our outputs.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import numpy as np
from conftest import CORPUS, FORMAT_DIR

SUB = os.environ.get("BACKEND_CORPUS", "jax-0.12.0.1")
#: XLA's cheapest back-end optimisation for both sides (compile time dominates the test)
FAST = {"xla_backend_optimization_level": 0}
_CASES = None


def load_cases():
    """name -> (fn, x64) from generator/cases.py, imported by path."""
    global _CASES
    if _CASES is None:
        path = FORMAT_DIR / "generator" / "cases.py"
        spec = importlib.util.spec_from_file_location("jaxpr_format_cases", path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules["jaxpr_format_cases"] = mod
        spec.loader.exec_module(mod)
        _CASES = {name: (fn, x64) for name, fn, x64 in mod.CASES}
    return _CASES


#: cases whose text does not determine the program (see the case's comment in cases.py)
AMBIGUOUS = {"dropvar_name_aliasing_ambiguity": "the text is ambiguous: `_` names a used variable"}


def skip_reason(jaxpr) -> str | None:
    """Why a corpus program is not compared (None: it is)."""
    from jaxprtool.backend import refusal
    from jaxprtool.backend.values import static_shape
    from jaxprtool.core import JaxprError, Literal, ShapedArray, all_eqns, eqn_subjaxprs

    for e in all_eqns(jaxpr):
        if any(isinstance(a, Literal) and a.value is Ellipsis for a in e.inputs):
            return "array literal [...] without values"
        why = refusal(e)
        if why:
            return f"refused primitive {e.prim}"
        for sub in eqn_subjaxprs(e):
            if sub.constvars:
                return "constvars inside a nested jaxpr"
    for v in list(jaxpr.invars) + list(jaxpr.constvars):
        if not isinstance(v.type, ShapedArray):
            return f"input of type {v.type}"
        if any("@" in str(d) for d in v.type.shape):
            return "explicit-sharding types need a device mesh"
        try:
            static_shape(v.type)
        except JaxprError:
            return "symbolic shapes"
    return None


def tolerance(dtype) -> float:
    name = np.dtype(dtype).name
    if name in ("float64", "complex128"):
        return 1e-5
    if name in ("float16", "bfloat16") or name.startswith("float8"):
        return 2e-2
    return 2e-3


def compare(name: str):
    """(status, detail): 'ok', 'skip' or 'fail' for one corpus case."""
    import jax

    from jaxprtool.backend.values import random_array
    from jaxprtool.core import ShapedArray
    from jaxprtool.text.parser import parse

    path = CORPUS / SUB / f"{name}.jaxpr"
    ir = parse(path.read_text(), str(path)).jaxpr
    why = AMBIGUOUS.get(name) or skip_reason(ir)
    if why:
        return "skip", why
    fn, x64 = load_cases()[name]
    import contextlib

    scope = jax.enable_x64(True) if x64 else contextlib.nullcontext()
    with scope:
        jj = fn()
        rng = np.random.default_rng(0)
        args = [random_array(v.type, rng, positive=True) for v in ir.invars]
        from jaxprtool.backend.keys import is_key, wrap

        jax_args = [wrap(v.type, a) if is_key(v.type) else a for v, a in zip(ir.invars, args)]
        for v, a, av in zip(ir.invars, args, jj.in_avals):
            if is_key(v.type):
                continue
            if a.shape != tuple(av.shape) or a.dtype != np.dtype(av.dtype):
                return "fail", f"input types differ from JAX's: {a.dtype}{a.shape} vs {av}"
        consts = [np.asarray(c) for c in jj.consts]
        if len(consts) != len(ir.constvars):
            return (
                "skip",
                f"this JAX traces {len(consts)} constants, the text has {len(ir.constvars)}",
            )
        got, expected = _ours_and_jax_s(ir, jj, args, jax_args, consts)
    if len(got) != len(expected):
        return "fail", f"{len(got)} outputs, JAX gives {len(expected)}"
    for i, (g, e, v) in enumerate(zip(got, expected, ir.outvars)):
        if g.shape != e.shape or g.dtype != e.dtype:
            return "fail", f"out{i}: {g.dtype}{g.shape} vs JAX {e.dtype}{e.shape}"
        if g.dtype.names is not None:
            continue
        tol = tolerance(g.dtype)
        gf, ef = g, e
        if g.dtype.kind == "V" or not isinstance(v.type, ShapedArray):
            gf, ef = g.astype(np.float64), e.astype(np.float64)
        if not np.allclose(gf, ef, atol=tol, rtol=tol, equal_nan=True):
            err = np.nanmax(np.abs(gf.astype(np.complex128) - ef.astype(np.complex128)))
            return "fail", f"out{i} differs (max abs err {err:.3g})"
    return "ok", ""


def _ours_and_jax_s(ir, jj, args, jax_args, consts):
    """(the program run by `backend.evaluate`, JAX running its own jaxpr) on the same inputs.
    One XLA compile for both where the program runs on one device: the function `evaluate`
    runs also gives JAX's outputs (after the program's), as `jax_oracle.together` does."""
    import jax
    import jax.extend.core as jex

    from jaxprtool import backend
    from jaxprtool.backend import sharding
    from jaxprtool.backend.keys import is_key, unwrap, wrap

    ours, theirs = backend.as_jax_function(ir, enable_x64=False), jex.jaxpr_as_fun(jj)
    if sharding.is_multi_device(ir):
        oracle = jax.jit(theirs, compiler_options=FAST)
        expected = [np.asarray(unwrap(x)) for x in oracle(*jax_args)]
        return backend.evaluate(
            ir, args, consts, jitted=jax.jit(ours, compiler_options=FAST)
        ), expected

    def both(*xs):
        keyed = [
            wrap(v.type, a) if is_key(v.type) else a for v, a in zip(ir.invars, xs[len(consts) :])
        ]
        return [*ours(*xs), *(unwrap(x) for x in theirs(*keyed))]

    out = backend.evaluate(ir, args, consts, jitted=jax.jit(both, compiler_options=FAST))
    return out[: len(ir.outvars)], out[len(ir.outvars) :]


def corpus_names() -> list[str]:
    d = CORPUS / SUB
    return sorted(p.stem for p in Path(d).glob("*.jaxpr")) if d.is_dir() else []


if __name__ == "__main__":
    import os
    import time

    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    counts = {}
    t0 = time.time()
    names = corpus_names() if len(sys.argv) < 2 else sys.argv[1:]
    for n in names:
        t = time.time()
        try:
            st, det = compare(n)
        except Exception as e:  # noqa: BLE001
            st, det = "fail", f"{type(e).__name__}: {str(e)[:300]}"
        counts[st] = counts.get(st, 0) + 1
        print(f"{st:5} {n:45} {time.time() - t:5.1f}s {det}")
    print(counts, f"{time.time() - t0:.1f}s")
