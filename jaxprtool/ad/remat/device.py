"""The device's memory model (issue 48): the bytes a plan holds as XLA holds them, estimated
without compiling, and calibrated to the device by one compile (`fit.py`).

The planners' liveness model counts every saved value, and in a segment's backward stretch
every residual it recomputes.  XLA's fusions recompute element-wise values on their own: an
element-wise equation is duplicated into each fusion that reads it, so its operands stay alive
instead of its result (the plain gradient of the 8-layer transformer holds 6.46 GB in the
liveness model and 2.05 GB on a TPU v5e).  The device model therefore counts

* for the saved values, the bytes of the fewest values from which element-wise and shape
  equations (`Graph.cheap`) make them: a minimum cut (`min_cut_saved`) with the saved values
  as the wanted ones; the segments' boundary values are counted as they are (saved whatever
  the plan);
* for each segment's backward stretch, the same cut for the residuals it recomputes and
  for the operands of the reductions it recomputes (`_reduced_operands`: XLA runs a
  reduction as a pass of its own over a materialized operand), the saved values free: what
  its recomputation materializes (its products, reductions);

and, with segments, the peak as the backward part reaches it (`_backward_peak`): the
stretches run last to first, each freeing its segment's saved values, so a segment's
recomputation is alive beside the saved values of the segments before it only, and the last
segment's, run right after its own forward, is not held at the peak.  (The planners'
`planned_peak` adds the largest recomputation to every saved value: on the TPU v5e, the
budget plans that trade a segment's saved bytes for its recomputation, at equal XLA bytes,
differed there by up to 10%.)  Without segments, the saved bytes `copies` times (a scan
body's, stacked) plus the recomputation, as `planned_peak` counts them.  A scan
body (`copies` > 1) is counted as `planned_peak` counts it: the loop stacks each saved value
as one of its results, which no fusion recomputes across the loop (the scan twin of the TPU
transformer holds 6.1 GB for its plain gradient, the unrolled one 2.0 GB), and one backward
iteration holds the residuals it recomputes (the scan twin's nothing_saveable plan: 0.99 GB
on the TPU, 0.91 GB in the liveness model) and what the reductions it recomputes read that
is no residual (`_reduced_bytes`).  `fit._figures` adds a scan body's plan to the
program's (whose own plan sees only the residuals the loop stacks).  The plain
gradient (every residual saved) is then about the min-cut plan's bytes, which is about what
XLA holds for it; its compile gives the ratio of XLA's temp bytes to the model's figure (the
backward's own temporaries, layouts), by which every plan's figure is scaled.
"""

from __future__ import annotations

from ...core import Var
from .budget import planned_peak
from .graph import Graph, Plan
from .mincut import min_cut_saved
from .records import reduction


def _cut_bytes(g: Graph, wanted: list, free: set[int]) -> int:
    """The bytes of the fewest values from which cheap equations make `wanted` (`free`
    values cost nothing)."""
    if not wanted:
        return 0
    ids = min_cut_saved(g, g.cheap, wanted=wanted, free=free)
    return sum(g.cost(g.value(i)) for i in ids)


def device_bytes(g: Graph, plan: Plan, groups=None) -> int:
    """The device model's figure for `plan` (before the calibration's scale): with segments,
    the peak of the backward part as it runs them (`_backward_peak`); else the fused bytes of
    its saved values, `g.copies` times, plus the fused bytes it recomputes (`groups`:
    `Graph.peak_groups`, None without segments)."""
    saved_ids = {id(v) for v in plan.saved}
    if g.copies > 1:  # a scan body: its liveness figure (module doc)
        recomputed = {id(v) for v in g.residuals if isinstance(v, Var)} - saved_ids
        return planned_peak(g, plan, groups) + _reduced_bytes(g, plan, saved_ids, recomputed)
    wanted = [v for v in plan.saved if isinstance(v, Var) and id(v) not in g.free]
    cut = min_cut_saved(g, g.cheap, wanted=wanted, free=set()) if wanted else set()
    if groups and g.segments is not None and len(g.segments.starts) > 1:
        return _backward_peak(g, plan.saved, cut, saved_ids, _reduced_operands(g, plan))
    fixed = sum(g.cost(v) for v in plan.saved if id(v) in g.boundary)
    held = fixed + sum(g.cost(g.value(i)) for i in cut)
    reduced = [v for vs in _reduced_operands(g, plan).values() for v in vs]
    worst = 0
    for vs in groups or ():
        recomputed = [v for v in vs if id(v) not in saved_ids]
        worst = max(worst, _cut_bytes(g, recomputed + reduced, saved_ids))
    if not groups:  # one segment: what the linear program recomputes, alive at its start
        recomputed = [v for v in g.residuals if isinstance(v, Var) and id(v) not in saved_ids]
        wanted = [v for v in recomputed if id(v) not in g.free] + reduced
        worst = _cut_bytes(g, wanted, saved_ids)
    return g.copies * held + worst


def _reduced_operands(g: Graph, plan: Plan) -> dict[int, list[Var]]:
    """The operands of the reductions `plan` recomputes (`records.reduction`), by segment
    (0 without segments).  XLA runs a reduction as a pass of its own, so its recomputation
    materializes the operand (the attention scores under a softmax's max and sum: a
    product's result), where the plan that saves the reduction's result fuses that operand
    into its readers; the recomputed residuals' cut does not always hold it (the scan
    body's figure counts the residuals themselves: `_reduced_bytes`)."""
    out: dict[int, dict[int, Var]] = {}
    for i in plan.recompute:
        if g.cheap(i) or not reduction(g.eqns[i]):
            continue
        k = g.segments.of[i] if g.segments is not None else 0
        for x in g.eqns[i].inputs:
            if isinstance(x, Var) and id(x) not in g.free:
                out.setdefault(k, {})[id(x)] = x
    return {k: list(d.values()) for k, d in out.items()}


def _reduced_bytes(g: Graph, plan: Plan, saved_ids: set[int], counted: set[int]) -> int:
    """What a scan body's recomputation materializes to recompute its reductions, beside the
    residuals it recomputes (`counted`, by id): the fused bytes of the reductions' operands
    (`_reduced_operands`), the saved values free.  The figure it corrects: on the TPU v5e
    (JAX 0.10.2) the scan twin's nothing_saveable plan holds 987.1 MB of XLA temp, 120.3 MB
    more than the plan that saves only the reductions' results (866.8 MB), where the
    liveness figure put it 6.5 MB lower; the reductions it recomputes read one layer's
    attention scores (134.2 MB: a product's result, no residual) and the residual stream
    after attention (16.8 MB).  XLA's dump of the two (bench/device/results/
    peak_probe_2026-12-07g.log) puts them at the same live peak, 1,250 MB with the arguments
    and outputs: the bytes are in how XLA allocates the recomputation, not one more buffer
    at the peak, so this term models their size, not a buffer the dump names."""
    wanted = [v for vs in _reduced_operands(g, plan).values() for v in vs]
    if not wanted:
        return 0
    ids = min_cut_saved(g, g.cheap, wanted=wanted, free=saved_ids)
    return sum(g.cost(g.value(i)) for i in ids if i not in counted)


def _backward_peak(
    g: Graph, saved: list, cut: set[int], saved_ids: set[int], reduced: dict | None = None
) -> int:
    """The peak of a segmented program's backward part: it runs the segments' stretches last
    to first, each freeing its segment's saved values, so that at the start of segment k's
    stretch the values held are those saved by segments 0..k (their fused bytes: `cut`, the
    boundary values as they are) and the fused bytes k recomputes.  The last segment's
    stretch runs right after its own forward (nothing between them but the loss), and
    XLA interleaves the two: its values are not held at the peak (on the TPU v5e, the plain
    gradient of the 8-layer transformer holds 0.97x the saved bytes of the other seven
    segments; the budget plans 0.94x-1.05x this figure, where counting the last segment's
    recomputation as alive on top of every saved value put them at 0.77x-0.93x)."""
    seg, n = g.segments.of, len(g.segments.starts)
    held = [0] * n
    for v in saved:
        if id(v) in g.boundary:
            held[seg[g.producer[id(v)]]] += g.cost(v)
    for i in cut:
        held[seg[g.producer[i]]] += g.cost(g.value(i))
    residuals: list[dict[int, Var]] = [{} for _ in range(n)]
    for v in g.residuals:
        if isinstance(v, Var) and id(v) not in g.free and id(v) not in saved_ids:
            residuals[seg[g.producer[id(v)]]][id(v)] = v
    reduced = reduced or {}
    peak = total = 0
    for k in range(n - 1):
        total += held[k]
        wanted = list(residuals[k].values()) + reduced.get(k, [])
        peak = max(peak, total + _cut_bytes(g, wanted, saved_ids))
    return peak


def plain_device_bytes(g: Graph) -> int:
    """The device model's figure for the plain gradient (every residual saved)."""
    if g.copies > 1:  # a scan body: its liveness figure (module doc)
        return g.copies * g.residual_bytes()
    everything = list({id(v): v for v in g.residuals if isinstance(v, Var)}.values())
    saved_ids = {id(v) for v in everything}
    wanted = [v for v in everything if id(v) not in g.free]
    cut = min_cut_saved(g, g.cheap, wanted=wanted, free=set()) if wanted else set()
    if g.segments is not None and len(g.segments.starts) > 1:
        return _backward_peak(g, everything, cut, saved_ids)
    fixed = sum(g.cost(v) for v in everything if id(v) in g.boundary)
    return g.copies * (fixed + sum(g.cost(g.value(i)) for i in cut))
