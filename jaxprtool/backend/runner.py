"""How check-grad runs the programs it checks (`ui/checkgrad.py`'s `run`): through XLA,
with the program's constants, the finite differences on the reference device."""

from __future__ import annotations


def consts_runner(consts):
    """run(jaxpr, args, reference=False) through XLA, with the program's constants when it
    has constvars (its nested jaxprs' included, `backend/consts.py`), in the program's float
    width (the float64 copy finite differences use); `reference`: finite differences, run on
    the CPU when the checks run on another device (`backend.reference_device`).  Its
    `jax_derivative` is JAX's own jvp or vjp at the same point (check-grad's precision
    report)."""
    from . import evaluate, reference_device
    from .consts import all_constvars

    def typed(jaxpr):
        cvars = all_constvars(jaxpr)
        if not cvars:
            return None
        if len(consts) == len(jaxpr.constvars):
            cvars = list(jaxpr.constvars)
        return [_as_type(c, v.type) for c, v in zip(consts, cvars)]

    def run(jaxpr, args, reference=False):
        device = reference_device(jaxpr) if reference else None
        return evaluate(jaxpr, args, typed(jaxpr), device=device)

    def jax_derivative(jaxpr, args, diff, vec, outs_idx, kind):
        """JAX's own jvp or vjp of `jaxpr` at `args` (check-grad's precision report)."""
        from .reference_ad import jax_derivative as of

        return of(jaxpr, typed(jaxpr) or [], args, diff, vec, outs_idx, kind)

    run.jax_derivative = jax_derivative
    return run


def _as_type(value, t):
    """A float constant in the float type of its binder (float32 data for float64 binders)."""
    import numpy as np

    a = np.asarray(value)
    want = getattr(t, "np_dtype", None)
    if want is not None and a.dtype.kind in "fc" and np.dtype(want).kind in "fc":
        return a.astype(want)
    return a
