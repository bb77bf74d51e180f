"""What the primitive records say to rematerialization: which equations are cheap,
recomputable, run again whole or in part, and the bytes of a value."""

from __future__ import annotations

from dataclasses import dataclass

from ...core import Eqn, Jaxpr, Var, eqn_subjaxprs
from ...record import prim as record_of


@dataclass(frozen=True)
class Offload:
    """JAX's `Offloadable(src, dst)`: the value is saved, copied from memory kind `src` to
    `dst` in the forward pass and back in the backward pass."""

    src: str
    dst: str


def remat_class(e: Eqn) -> str | None:
    """The record's `remat` field for this equation ("cheap", "dot", "dot_unbatched", "name"
    or None)."""
    v = record_of(e.prim).remat
    return v(e) if callable(v) else v


def recomputable(e: Eqn) -> bool:
    """A pure equation without bodies, or a call recomputed whole (its record's
    `recomputed_whole`) whose bodies are pure through and through: recomputing it gives the
    same values."""
    from ...passes.common import eqn_is_pure

    rec = record_of(e.prim)
    if rec.effectful or rec.random:
        return False
    bodies = eqn_subjaxprs(e)
    # (a call's body may hold calls of its own, `jax.nn.relu`'s `jit`: pure through and
    # through is what recomputing it whole needs, not each equation recomputable alone)
    return not bodies or (rec.recomputed_whole and eqn_is_pure(e))


def _planned_inside(e: Eqn) -> bool:
    """A call or loop whose body rematerialization plans on its own (not one it reruns
    whole)."""
    return bool(eqn_subjaxprs(e)) and not record_of(e.prim).recomputed_whole


def cheap(e: Eqn) -> bool:
    """What min-cut may recompute: element-wise and shape equations."""
    return remat_class(e) in ("cheap", "name") and recomputable(e)


def reduction(e: Eqn) -> bool:
    """An equation XLA runs as a pass of its own over an operand of more bytes than its
    result (a reduction; a gather): neither cheap (fused into its readers) nor a product,
    without bodies.  Recomputed, it reads that operand materialized (`device.py`)."""
    if remat_class(e) is not None or eqn_subjaxprs(e) or not recomputable(e):
        return False
    out = sum(all_bytes(o) for o in e.outputs)
    return any(isinstance(x, Var) and all_bytes(x) > out for x in e.inputs)


def body_saves(body: Jaxpr, decide) -> list[bool | None]:
    """Per result of `body`: whether the policy `decide` saves its value (the decision on the
    equation that makes it; a value that cannot be recomputed, or in host memory: an
    offloaded copy, is saved, while the value it copies is made again from it), None for a
    binder, False for a literal."""
    made = {id(o): (e, k) for e in body.eqns for k, o in enumerate(e.outputs)}
    binders = {id(v) for v in (*body.invars, *body.constvars)}

    def of(v):
        if not isinstance(v, Var):
            return False
        if id(v) in binders:
            return None
        if in_host(v):
            return True
        e, k = made[id(v)]
        saves = eqn_saves(e, decide)
        if saves is not None:
            return saves[k]
        d = decide(e)
        return (bool(d) and not isinstance(d, Offload)) or not recomputable(e)

    return [of(v) for v in body.outvars]


def eqn_saves(e: Eqn, decide) -> list[bool] | None:
    """Per result of an equation the policy may run again (its record's `remat_saves`: a scan,
    a call, a cond): whether the policy saves it; None for any other equation, or one with
    effects."""
    from ...passes.common import eqn_is_pure

    rule = record_of(e.prim).remat_saves
    if rule is None or not eqn_is_pure(e):
        return None
    return rule(e, lambda j: body_saves(j, decide))


def rerun_eqn(e: Eqn, saves: list[bool], wanted: list[bool]) -> Eqn | None:
    """`e` run again for its results `wanted` (and those a loop needs to make them: its
    carries), reading the saved results it takes instead of computing them (its record's
    `remat_feed`), pruned to what it needs; None when it cannot be pruned so (a result it
    reads would stay among those it makes)."""
    from ...passes.dce import prune_eqn

    ne = prune_eqn(record_of(e.prim).remat_feed(e, saves), list(wanted))
    if ne is None:
        return None
    made = {id(o) for o in ne.outputs}
    if not made.isdisjoint(map(id, ne.inputs)) or any(
        w and id(o) not in made for o, w in zip(e.outputs, wanted)
    ):
        return None
    return ne


def nbytes(v) -> int:
    """The device bytes of `v` (none for a value in host memory: an offloaded copy)."""
    return 0 if in_host(v) else all_bytes(v)


def in_host(v) -> bool:
    return getattr(v.type, "memory_space", None) == "host"


def all_bytes(v) -> int:
    """The bytes of `v`, in whichever memory."""
    t = v.type
    try:
        return int(t.size) * int(t.np_dtype.itemsize)
    except Exception:
        return 0
