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
* for each segment's backward stretch, the same cut for the residuals it recomputes, the
  saved values free: what its recomputation materializes (its products, reductions; a
  recomputed reduction's operand is in that cut where the residuals after it are
  recomputed too: the attention scores under the recomputed probabilities);

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
on the TPU, 0.91 GB in the liveness model); what the reductions it recomputes read that is
no residual is a term of its own (`reduced_bytes`), which the device's calibration weighs
(`fit.Calibration.reduced`: XLA:TPU holds about its bytes, XLA:CPU nothing).  `fit._figures` adds a scan body's plan to the
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
    if g.copies > 1:  # a scan body: its liveness figure (module doc)
        return planned_peak(g, plan, groups)
    saved_ids = {id(v) for v in plan.saved}
    wanted = [v for v in plan.saved if isinstance(v, Var) and id(v) not in g.free]
    cut = min_cut_saved(g, g.cheap, wanted=wanted, free=set()) if wanted else set()
    if groups and g.segments is not None and len(g.segments.starts) > 1:
        return _backward_peak(g, plan.saved, cut, saved_ids)
    fixed = sum(g.cost(v) for v in plan.saved if id(v) in g.boundary)
    held = fixed + sum(g.cost(g.value(i)) for i in cut)
    worst = 0
    for vs in groups or ():
        recomputed = [v for v in vs if id(v) not in saved_ids]
        worst = max(worst, _cut_bytes(g, recomputed, saved_ids))
    if not groups:  # one segment: what the linear program recomputes, alive at its start
        recomputed = [v for v in g.residuals if isinstance(v, Var) and id(v) not in saved_ids]
        worst = _cut_bytes(g, [v for v in recomputed if id(v) not in g.free], saved_ids)
    return g.copies * held + worst


def _backward_peak(g: Graph, saved: list, cut: set[int], saved_ids: set[int]) -> int:
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
    peak = total = 0
    for k in range(n - 1):
        total += held[k]
        peak = max(peak, total + _cut_bytes(g, list(residuals[k].values()), saved_ids))
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


def reduced_bytes(g: Graph, plan: Plan) -> int:
    """What a scan body's recomputation (`copies` > 1) reads to recompute the reductions
    `plan` recomputes (`records.reduction`: XLA runs one as a pass of its own over a
    materialized operand) beyond the residuals its liveness figure counts: the fused bytes
    of the reductions' operands, the saved values free, less the recomputed residuals among
    them; 0 elsewhere (the fused cut of a segment's stretch holds the operand already).
    Measured (bench/device/results/peak_probe_2026-12-07g*): on the TPU v5e (JAX 0.10.2) the
    scan twin's nothing_saveable plan holds 987.1 MB of XLA temp, 120.3 MB more than the plan
    that saves only the reductions' results (866.8 MB), where the liveness figure put it 6.5
    MB lower; the reductions it recomputes read one layer's attention scores (134.2 MB, a
    product's result) and the residual stream after attention (16.8 MB).  XLA's dump puts
    the two plans at the same live peak (1,250 MB with the arguments): the bytes are in how
    XLA:TPU allocates the recomputation, not one more buffer at the peak, so this term sizes
    them by the operand.  XLA:CPU holds the two plans at 906.6 and 913.1 MB: nothing more
    (the calibration's weight for this term is the device's: `fit.PRIORS`)."""
    if g.copies <= 1:
        return 0
    saved_ids = {id(v) for v in plan.saved}
    wanted: dict[int, Var] = {}
    for i in plan.recompute:
        if not g.cheap(i) and reduction(g.eqns[i]):
            for x in g.eqns[i].inputs:
                if isinstance(x, Var) and id(x) not in g.free:
                    wanted[id(x)] = x
    if not wanted:
        return 0
    counted = {id(v) for v in g.residuals if isinstance(v, Var)} - saved_ids
    ids = min_cut_saved(g, g.cheap, wanted=list(wanted.values()), free=saved_ids)
    return sum(g.cost(g.value(i)) for i in ids if i not in counted)
