"""The entry points: `plan_for`, `rematerialize` (a linearization) and `rematerialize_masked`
(a nested body)."""

from __future__ import annotations

import contextlib

from ...core import Jaxpr, Var
from .. import builder as B
from ..residuals import LinearizeInfo, Residual
from .budget import budget_plan, planned_peak
from .device import device_bytes, plain_device_bytes, reduced_bytes
from .graph import Graph, Plan, _plan_from_saved, policy_plan
from .mincut import min_cut_plan
from .request import Spec
from .rewrite import _offload_copies, _rounded, apply_plan
from .segments import find_segments


def plan_for(g: Graph, spec: Spec, loc=None) -> Plan:
    """The plan `spec` asks for, never holding more device bytes than the plain gradient:
    one that would (a segment's boundary values, saved whatever the policy, outweighing
    what it recomputes) gives way to saving every residual."""
    if spec.budget is not None:
        plan = budget_plan(g, spec, loc)
    elif spec.policy == "min-cut":
        plan = min_cut_plan(g)
    else:
        plan = policy_plan(g, spec)
    if plan.bytes_after > plan.bytes_before:
        plain = _plan_from_saved(g, {id(v) for v in g.residuals if isinstance(v, Var)}, "")
        plain.method = f"{plan.method} (its plan held {plan.bytes_after} B: every residual saved)"
        plain.exact = plan.exact
        plain.why_none = "the plain gradient holds the fewest bytes"
        return plain
    return plan


def _with_saved(primal: Jaxpr, linear: Jaxpr, n_out: int, num_res: int, spec: Spec):
    """The body's pair with the values the policy saves to recompute its residuals and its
    outputs from (a loop's new carries, a call's results the rerun makes) made residuals
    too (read by no linear equation; an offloaded one copied to its memory after the
    equation that makes it): what the rerun of the equation holding the body reads, as
    JAX's known loop stacks them.  `(primal, linear, num_res)`."""
    info = _masked_info(primal, n_out)
    outs = primal.outvars[:n_out]
    info.residuals += [Residual(v.type, "output", j) for j, v in enumerate(outs)]
    g = Graph(primal, info)
    have = {id(v) for v in primal.outvars if isinstance(v, Var)} | g.free
    eqns, held, _ = _offload_copies(g, policy_plan(g, spec))
    extra = [v for v in held if id(v) not in have]
    if not extra:
        return primal, linear, num_res
    primal = primal.replace(eqns=eqns, outvars=(*primal.outvars, *extra))
    ins = linear.invars
    linear = linear.replace(
        invars=(*ins[:num_res], *(B.fresh_like(v) for v in extra), *ins[num_res:])
    )
    return primal, linear, num_res + len(extra)


def _masked_info(primal: Jaxpr, n_out: int) -> LinearizeInfo:
    """A nested body's residuals: its results after its `n_out` outputs."""
    info = LinearizeInfo([True] * len(primal.invars), [True] * n_out)
    info.residuals = [Residual(v.type, "new", k) for k, v in enumerate(primal.outvars[n_out:])]
    return info


def _reruns(spec: Spec, body: Jaxpr) -> bool:
    """Whether the plan of the program holding a scan, call or cond of `body` may run it
    again under `spec` (a policy; a body without effects, random draws or Refs: `eqn_saves`
    asks the same of the equation)."""
    from ...core import RefType
    from ...passes.common import jaxpr_has_effects, jaxpr_has_random

    if spec.budget is not None or spec.policy in (None, "min-cut"):
        return False
    if spec.segments != "none":  # the body is a segment: recomputed inside, per iteration
        return False
    if any(isinstance(v.type, RefType) for v in (*body.invars, *body.outvars)):
        return False
    return not (jaxpr_has_effects(body) or jaxpr_has_random(body))


def counted_at(spec: Spec):
    """The block in which sizes count symbolic dims at `spec.dims` (`--dim b=5`): the
    planners' bytes and FLOPs.  Without dims, a no-op (a symbolic dim counts as 0, which
    the byte-weighted planners are never asked to weigh: `ad_cmds` refuses it)."""
    if not spec.dims:
        return contextlib.nullcontext()
    from ...backend.values import eval_dim
    from ...core import sized_dims
    from ...shardings import sharded_size

    dims, memo = dict(spec.dims), {}

    def size(d) -> int:  # (asked only for symbolic dims: `ShapedArray.size` counts `8@x`)
        n = memo.get(d)
        if n is None:
            n = memo[d] = eval_dim(str(sharded_size(d)), dims)  # `2*b@x`: its global 2*b
        return n

    return sized_dims(size)


def rematerialize(
    primal: Jaxpr,
    linear: Jaxpr,
    info: LinearizeInfo,
    nested: bool = False,
    spec: Spec | None = None,
    copies: int = 1,
    plans: list | None = None,
):
    """Apply `spec` (None: nothing to do) to a linearization, the plan appended to `plans`
    (when given): the graph,
    its segments (`find_segments`, the outermost program only: a nested body is one
    segment), the plan (`plan_for`), the placement (`apply_plan`).  A byte budget applies
    to the outermost program only (nested bodies follow min-cut then), but a fraction under
    segments applies to each body too, a scan body's saved values counted `copies` times
    (its length: they are stacked)."""
    if spec is None:
        return primal, linear, info
    if nested and spec.budget is not None and (not spec.fraction or spec.segments == "none"):
        spec = Spec(policy="min-cut", segments=spec.segments)
    # (a fraction of the peak applies to each body under segments: a scan's per iteration)
    from ...ui.stats import flops

    g = Graph(primal, info)
    g.value_dropped = spec.value_dropped and not nested
    if spec.segments != "none":
        g.copies = max(1, copies)
    with counted_at(spec):
        if not nested:
            segments = find_segments(g, spec)
            if segments is not None:
                g.cut(segments)
        plan = plan_for(g, spec)
        plan.segments = g.segments
        if g.peak_groups():
            plan.peak = planned_peak(g, plan)
            plan.peak_before = g.copies * plan.bytes_before
        plan.flops_before = flops(primal) + flops(linear)
        if spec.device_model:
            plan.device = device_bytes(g, plan, g.peak_groups())
            plan.device_before = plain_device_bytes(g)
            plan.device_reduced = reduced_bytes(g, plan)
    plan.nested = nested
    plan.sizes = ",".join(f"{k}={n}" for k, n in spec.dims)
    out = (primal, linear, info)
    if plan.recompute or plan.offload:  # emitted outside the sizes: stays symbolic
        out = apply_plan(primal, linear, info, g, plan, forward=not nested)
    else:  # everything saved (as under everything_saveable): rounded as JAX rounds them
        eqns = _rounded(list(primal.eqns), plan.saved, g)
        if len(eqns) != len(primal.eqns):
            out = (primal.replace(eqns=tuple(eqns)), *out[1:])
    with counted_at(spec):
        plan.flops_after = flops(out[0]) + flops(out[1])
        for v in plan.saved:
            i = g.producer.get(id(v))
            if i is None:
                plan.inputs += 1
                continue
            src = f"{g.eqns[i].prim}" + (f" at {g.eqns[i].loc}" if g.eqns[i].loc else "")
            off = plan.offload.get(id(v))
            to = f", offloaded to {off.dst}" if off else ""
            plan.saved_lines.append(f"{v.type} ({g.cost(v)} B) from {src}{to}")
            # (a loop's results, and so their positions, differ between plans: the count
            # of them in the key keeps plans of different loop results apart)
            outs = g.eqns[i].outputs
            k = next(n for n, o in enumerate(outs) if o is v)
            key = f"{len(g.eqns)}x{g.copies}:{i}.{k}/{len(outs)}"
            plan.saved_values.append((key, g.copies * g.cost(v)))
    for i in plan.recompute:
        p = g.eqns[i].prim
        plan.recomputed_counts[p] = plan.recomputed_counts.get(p, 0) + 1
    if plans is not None:
        plans.append(plan)
    return out


def rematerialize_masked(
    primal: Jaxpr,
    linear: Jaxpr,
    n_out: int,
    num_res: int,
    spec: Spec,
    plans: list | None,
    rerun=False,
    copies: int = 1,
):
    """`rematerialize` for `linearize_masked`'s pair (a nested body: residuals are the primal
    body's results after its `n_out` outputs): `(primal, linear, num_res)`.  The body of an
    equation a policy may run again (`rerun`: a scan, a call, a cond) gets no plan of its own
    when the policy can: the plan of the program holding it reruns the equation for the
    residuals it does not save, as JAX recomputes a loop's residuals in one forward loop of
    the backward pass (JAX's policy-saved ones stacked, offloaded ones copied inside the
    loop)."""
    if rerun and _reruns(spec, primal):
        return _with_saved(primal, linear, n_out, num_res, spec)
    p, lin, new_info = rematerialize(
        primal, linear, _masked_info(primal, n_out), True, spec, copies, plans
    )
    return p, lin, len(new_info.residuals)
