"""How check-grad runs the programs it checks (`ui/checkgrad.py`'s `run`): through XLA,
with the program's constants, the finite differences on the reference device."""

from __future__ import annotations


def consts_runner(consts):
    """run(jaxpr, args, reference=False) through XLA, with the program's constants when it
    has constvars (its nested jaxprs' included, `backend/consts.py`), in the program's float
    width (the float64 copy finite differences use); `reference`: finite differences, run on
    the CPU when the checks run on another device (`backend.reference_device`)."""
    from . import evaluate, reference_device
    from .consts import all_constvars

    def run(jaxpr, args, reference=False):
        device = reference_device(jaxpr) if reference else None
        cvars = all_constvars(jaxpr)
        if not cvars:
            return evaluate(jaxpr, args, None, device=device)
        if len(consts) == len(jaxpr.constvars):
            cvars = list(jaxpr.constvars)
        typed = [_as_type(c, v.type) for c, v in zip(consts, cvars)]
        return evaluate(jaxpr, args, typed, device=device)

    return run


def _as_type(value, t):
    """A float constant in the float type of its binder (float32 data for float64 binders)."""
    import numpy as np

    a = np.asarray(value)
    want = getattr(t, "np_dtype", None)
    if want is not None and a.dtype.kind in "fc" and np.dtype(want).kind in "fc":
        return a.astype(want)
    return a
