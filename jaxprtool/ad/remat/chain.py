"""A chain dynamic program across segments (issue 48 item 5, after Rotor: Beaumont et al.
2019, and Checkmate's sequential case): a byte budget on the planned peak of a segmented
program too large for the exact 0/1 program (`EXACT_LIMIT`), solved segment by segment.

The segments' boundary values are saved whatever the plan, so the saved set of each segment
can be chosen on its own: a segment's *options* are the plans of the greedy heuristic's ladder
(`_greedy_budget`: the min-cut where the costly equations of lowest FLOPs per byte, a prefix
of them, may be recomputed too) at its first and last step and at the two steps between which
the budget falls, restricted to the segment, each with the bytes it saves, the
bytes its backward stretch recomputes and the FLOPs it recomputes.  The peak the budget bounds
(`planned_peak`) is `copies * (boundary + sum of the saved bytes) + the largest recomputed
bytes of a segment`; for each cap on that largest term (the options' own values), a
multiple-choice knapsack over the segments in `BUCKETS` byte buckets (bytes rounded up: the
plan found never exceeds the budget) gives the fewest recomputed FLOPs, O(segments * options
* buckets) per cap.  Unlike the heuristic, which moves every layer one step together, the
program may recompute more in some layers than in others: the budget is met more closely.
"""

from __future__ import annotations

import numpy as np

from ...core import Var
from .graph import Graph, Plan, _plan_from_saved
from .mincut import min_cut_saved

#: the ladder's steps (plans of the whole program, each a min-cut) at most
CHAIN_STEPS = 64
#: the byte buckets of the knapsack
BUCKETS = 2000


def _ladder(g: Graph, cands: list[int], flops) -> list[set[int]]:
    """The allowed sets of the ladder: the cheap equations, then the costly ones in order of
    FLOPs per byte of result, a step where that (or their signature, or their rank among
    the segment's equations of that key) changes."""
    costly = [i for i in cands if not g.cheap(i)]

    def per_byte(i):
        return flops(g.eqns[i]) / max(1, sum(g.size(o) for o in g.eqns[i].outputs))

    sigs: dict = {}
    keys = {i: (per_byte(i), sigs.setdefault(g.signature(i), len(sigs))) for i in costly}
    # equations of one key (a layer's four projections) join the ladder one per segment at
    # a time: the first of each segment, then the second, ...
    seg, rank, seen = g.segments.of, {}, {}
    for i in sorted(costly):
        k = (keys[i], seg[i])
        rank[i] = seen[k] = seen.get(k, -1) + 1
    keys = {i: (*keys[i], rank[i]) for i in costly}
    costly.sort(key=lambda i: (keys[i], i))
    ends = [0] + [k for k in range(1, len(costly)) if keys[costly[k]] != keys[costly[k - 1]]]
    ends.append(len(costly))
    return [set(costly[:k]) for k in ends]


def _options(g: Graph, plans: list[Plan], flops):
    """Per segment, per plan: (saved bytes, recomputed bytes, recomputed FLOPs, the saved
    ids), and the boundary bytes every plan holds."""
    seg = g.segments.of
    nseg = len(g.segments.starts)
    resid: list[dict[int, Var]] = [{} for _ in range(nseg)]
    for v in g.residuals:
        if isinstance(v, Var) and id(v) not in g.free:
            resid[seg[g.producer[id(v)]]][id(v)] = v
    opts: list[list[tuple]] = [[] for _ in range(nseg)]
    fixed = 0
    memo: dict[int, int] = {}

    def eqn_flops(i: int) -> int:
        f = memo.get(i)
        if f is None:
            f = memo[i] = flops(g.eqns[i])
        return f

    last = nseg - 1
    last_forward = sum(eqn_flops(i) for i in range(len(seg)) if seg[i] == last)
    for plan in plans:
        per = [[0, 0, 0, set()] for _ in range(nseg)]
        for v in plan.saved:
            i = g.producer.get(id(v))
            if i is not None and id(v) not in g.free:
                per[seg[i]][0] += g.cost(v)
                per[seg[i]][3].add(id(v))
        fixed = plan.bytes_after - sum(p[0] for p in per)
        for i in plan.recompute:
            per[seg[i]][2] += eqn_flops(i)
        if g.value_dropped:  # the last segment's forward runs only for what it saves
            ran = g.closure(set(), [v for v in plan.saved if id(v) in per[last][3]])
            per[last][2] -= last_forward
            per[last][2] += sum(eqn_flops(i) for i in ran if seg[i] == last)
        for k in range(nseg):
            per[k][1] = sum(g.size(v) for vid, v in resid[k].items() if vid not in per[k][3])
            option = tuple(per[k])
            if option not in opts[k]:
                opts[k].append(option)
    return opts, fixed


def _bracket(g: Graph, ladder, budget: int, peak) -> list[Plan] | None:
    """The ladder's plans the knapsack mixes: its first and last, and the two steps between
    which the budget falls (bisection: each step a min-cut of the program); the first alone
    when it fits, None when even the last does not."""
    made: dict[int, Plan] = {}

    def step(j):
        if j not in made:
            allowed = ladder[j]
            saved = min_cut_saved(g, lambda i: g.cheap(i) or i in allowed)
            made[j] = _plan_from_saved(g, saved, "")
        return made[j]

    lo, hi = 0, len(ladder) - 1
    if peak(step(lo)) <= budget:
        return [step(lo)]
    if peak(step(hi)) > budget:
        return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if peak(step(mid)) <= budget:
            hi = mid
        else:
            lo = mid
    return [made[j] for j in sorted(made)]


def _knapsack(opts, room: float, cap: int):
    """The fewest FLOPs choosing one option per segment with recomputed bytes at most `cap`
    and saved bytes (rounded up to buckets of `room / BUCKETS`) at most `room`: (FLOPs, the
    choices) or None."""
    unit = max(1.0, room / BUCKETS)
    inf = np.inf
    dp = np.full(BUCKETS + 1, inf)
    dp[0] = 0.0
    choice = []
    for seg_opts in opts:
        new = np.full(BUCKETS + 1, inf)
        pick = np.full(BUCKETS + 1, -1)
        for j, (saved, rec, fl, _) in enumerate(seg_opts):
            if rec > cap:
                continue
            w = int(np.ceil(saved / unit))
            if w > BUCKETS:
                continue
            cand = np.full(BUCKETS + 1, inf)
            cand[w:] = dp[: BUCKETS + 1 - w] + fl
            better = cand < new
            new[better] = cand[better]
            pick[better] = j
        dp = new
        choice.append(pick)
    b = int(np.argmin(dp))
    if not np.isfinite(dp[b]):
        return None
    chosen = []
    for k in range(len(opts) - 1, -1, -1):
        j = int(choice[k][b])
        chosen.append(j)
        b -= int(np.ceil(opts[k][j][0] / unit))
    return float(dp.min()), chosen[::-1]


def chain_plan(g: Graph, cands: list[int], budget: int, flops, peak) -> Plan | None:
    """The plan of fewest recomputed FLOPs whose planned peak (`peak(plan)`) fits `budget`
    (module doc), or None where no choice of the options fits."""
    if g.segments is None or len(g.segments.starts) < 2:
        return None
    plans = _bracket(g, _ladder(g, cands, flops), budget, peak)
    if plans is None or len(plans) == 1:
        return plans[0] if plans else None
    opts, fixed = _options(g, plans, flops)
    caps = sorted({o[1] for seg_opts in opts for o in seg_opts})
    best = None
    for cap in caps:
        room = (budget - cap) / g.copies - fixed
        if room < 0:
            break
        found = _knapsack(opts, room, cap)
        if found is not None and (best is None or found[0] < best[0]):
            best = found
    if best is None:
        return None
    saved = set().union(*(opts[k][j][3] for k, j in enumerate(best[1])))
    return _plan_from_saved(g, saved, "")
