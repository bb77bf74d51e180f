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
  saved values free: what its recomputation materializes (its products, reductions), the
  largest of the segments;

the saved bytes `copies` times (a scan body's, stacked), as `planned_peak` does.  A scan
body (`copies` > 1) is counted as `planned_peak` counts it: the loop stacks each saved value
as one of its results, which no fusion recomputes across the loop (the scan twin of the TPU
transformer holds 6.1 GB for its plain gradient, the unrolled one 2.0 GB), and one backward
iteration holds the residuals it recomputes (the scan twin's nothing_saveable plan: 0.99 GB
on the TPU, 0.91 GB in the liveness model).  `fit._figures` adds a scan body's plan to the
program's (whose own plan sees only the residuals the loop stacks).  The plain
gradient (every residual saved) is then the min-cut plan's bytes, which is about what XLA
holds for it; its compile gives the ratio of XLA's temp bytes to the model's figure (the
backward's own temporaries, layouts), by which every plan's figure is scaled.
"""

from __future__ import annotations

from ...core import Var
from .budget import planned_peak
from .graph import Graph, Plan
from .mincut import min_cut_saved


def _cut_bytes(g: Graph, wanted: list, free: set[int]) -> int:
    """The bytes of the fewest values from which cheap equations make `wanted` (`free`
    values cost nothing)."""
    if not wanted:
        return 0
    ids = min_cut_saved(g, g.cheap, wanted=wanted, free=free)
    return sum(g.cost(g.value(i)) for i in ids)


def device_bytes(g: Graph, plan: Plan, groups=None) -> int:
    """The device model's figure for `plan` (before the calibration's scale): the fused bytes
    of its saved values, `g.copies` times, plus the largest fused bytes a segment's backward
    stretch recomputes (`groups`: `Graph.peak_groups`, None without segments)."""
    if g.copies > 1:  # a scan body: its liveness figure (module doc)
        return planned_peak(g, plan, groups)
    saved_ids = {id(v) for v in plan.saved}
    fixed = sum(g.cost(v) for v in plan.saved if id(v) in g.boundary)
    wanted = [v for v in plan.saved if isinstance(v, Var) and id(v) not in g.free]
    held = fixed + _cut_bytes(g, wanted, set())
    worst = 0
    for vs in groups or ():
        recomputed = [v for v in vs if id(v) not in saved_ids]
        worst = max(worst, _cut_bytes(g, recomputed, saved_ids))
    if not groups:  # one segment: what the linear program recomputes, alive at its start
        recomputed = [v for v in g.residuals if isinstance(v, Var) and id(v) not in saved_ids]
        worst = _cut_bytes(g, [v for v in recomputed if id(v) not in g.free], saved_ids)
    return g.copies * held + worst


def plain_device_bytes(g: Graph) -> int:
    """The device model's figure for the plain gradient (every residual saved)."""
    if g.copies > 1:  # a scan body: its liveness figure (module doc)
        return g.copies * g.residual_bytes()
    wanted = [v for v in g.residuals if isinstance(v, Var) and id(v) not in g.free]
    fixed = sum(g.cost(v) for v in {id(v): v for v in g.residuals}.values() if id(v) in g.boundary)
    return g.copies * (fixed + _cut_bytes(g, wanted, set()))
