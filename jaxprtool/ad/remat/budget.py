"""A byte budget in the tool's liveness model: the fewest recomputed FLOPs that fit (an exact
0/1 program, else a greedy heuristic), on the bytes held or the planned peak."""

from __future__ import annotations

import hashlib
import math
from collections import OrderedDict

from ...core import JaxprError, Var, eqn_subjaxprs
from .chain import chain_plan
from .graph import Graph, Plan, _by_id, _plan_from_saved
from .mincut import min_cut_saved
from .records import _planned_inside, nbytes
from .request import Spec

#: candidate equations up to which a byte budget is solved exactly (HiGHS takes well under
#: a second there); beyond, the greedy heuristic
EXACT_LIMIT = 400
#: plans the budget heuristic tries within its last step (see `_greedy_budget`)
REFINE_TRIES = 2
#: HiGHS' limit on branch-and-bound nodes: a bound on work, not on time, so that the plan
#: does not depend on how busy the machine is (a wall-clock limit of 1 s was reached on a
#: loaded machine at the tests' sizes).  The tests' programs are proven within 600 nodes.
#: When it is reached without a proven optimum the best plan found is kept if it meets the
#: budget, else the heuristic's
ILP_NODE_LIMIT = 20_000
#: a wall-clock guard (s) against a pathological solve, far beyond what the node limit
#: allows at EXACT_LIMIT candidates: only past it would a plan depend on time
ILP_TIME_LIMIT = 120.0
#: the solved programs remembered (`_solved`): the answers of the last this many
SOLVED_LIMIT = 256

#: digest of a 0/1 program as HiGHS is handed it -> its answer (the indices of the values
#: saved), for the programs HiGHS proved optimal.  The compile loop of `--remat-budget`
#: (`fit.py`) and the tests plan the same program at the same budget more than once (each
#: plan is a new gradient built, its graph new objects, its program the same numbers); HiGHS
#: is deterministic, so a program solved before is answered by its answer, not solved again
#: (a solve is 0.02-1 s: a third of `make test`'s planning).  Only an exact repeat: the
#: answer at a looser budget that fits a tighter one is an optimum there too, but HiGHS may
#: pick another of equal FLOPs (4 of the 6 such in tests/test_remat_fit.py did)
_solved: OrderedDict[bytes, tuple[int, ...]] = OrderedDict()


def _candidates(g: Graph) -> list[int]:
    """Pure equations a residual reaches through pure equations."""
    seen: dict[int, None] = {}
    stack = [g.made_by(v) for v in g.residuals]
    while stack:
        i = stack.pop()
        if i is None or i in seen or not g.pure(i):
            continue
        seen[i] = None
        stack.extend(g.made_by(x) for x in g.eqns[i].inputs)
    return sorted(seen)


def _ilp_budget(g: Graph, cands: list[int], budget: int, flops, groups=None):
    """The exact plan: binary c_e (recompute equation e), s_v (save value v); every residual
    saved or recomputed, every operand of a recomputed equation saved, free or recomputed;
    saved bytes <= budget; minimise recomputed FLOPs (then bytes).  None when HiGHS finds no
    plan in time.  With `groups` (the peak model, `planned_peak`), a continuous m at least
    each group's recomputed residual bytes, and `copies` * saved bytes + m <= budget."""
    import numpy as np
    from scipy.optimize import LinearConstraint
    from scipy.sparse import coo_matrix

    cset = {i: k for k, i in enumerate(cands)}
    vals: dict[int, int] = {}
    vlist: list[Var] = []

    def var(v) -> int:
        k = vals.get(id(v))
        if k is None:
            k = vals[id(v)] = len(vlist)
            vlist.append(v)
        return k

    wanted = [v for v in g.residuals if isinstance(v, Var) and id(v) not in g.free]
    for v in wanted:
        var(v)
    for i in cands:
        for x in g.eqns[i].inputs:
            if isinstance(x, Var) and id(x) not in g.free:
                var(x)
    nc, nv = len(cands), len(vlist)
    rows, cols, data, lo = [], [], [], []

    def constraint(terms, lower):
        r = len(lo)
        for c, d in terms:
            rows.append(r)
            cols.append(c)
            data.append(d)
        lo.append(lower)

    def available(v):  # s_v + c_{producer(v)}
        t = [(nc + vals[id(v)], 1.0)]
        p = g.made_by(v)
        if p in cset:
            t.append((cset[p], 1.0))
        return t

    for v in dict((id(v), v) for v in wanted).values():
        constraint(available(v), 1.0)
    for i in cands:
        for x in dict((id(x), x) for x in g.eqns[i].inputs if isinstance(x, Var)).values():
            if id(x) not in g.free:
                constraint(available(x) + [(cset[i], -1.0)], 0.0)
    sizes = np.array([nbytes(v) for v in vlist], float)
    nm = 1 if groups else 0  # the peak model's m, last
    m = nc + nv
    if groups:
        for vs in groups:  # m + sum(size * s_v) >= the group's residual bytes
            terms = [(m, 1.0)] + [(nc + vals[id(v)], float(nbytes(v))) for v in vs]
            constraint(terms, float(sum(nbytes(v) for v in vs)))
    a = coo_matrix((data, (rows, cols)), shape=(len(lo), nc + nv + nm))
    cons = [LinearConstraint(a, np.array(lo), np.inf)]
    row = np.concatenate([np.zeros(nc), g.copies * sizes, np.ones(nm)])
    cons.append(LinearConstraint(row[None, :], -np.inf, budget))
    f = np.array([float(flops(g.eqns[i])) for i in cands])
    tie = sizes / (2.0 * (sizes.sum() + 1.0))  # bytes break ties between equal FLOPs
    objective = np.concatenate([f + 1e-3, tie, np.zeros(nm)])
    found = _solve(objective, cons, (nc, nv, nm, budget), a, np.array(lo), row)
    if found is None:
        return None
    return {id(vlist[k]) for k in found[0]}, found[1]


def _solve(objective, cons, counts: tuple, a, lower, row):
    """HiGHS' answer to `_ilp_budget`'s program, `counts` its (candidates, values, peak
    columns, budget): (the indices of the values saved, proven optimal), None without a
    plan; a program proven before is answered from `_solved`."""
    import numpy as np
    from scipy.optimize import Bounds, milp

    nc, nv, nm, _ = counts
    key = _digest(counts, objective, a, lower, row)
    saved = _solved.get(key)
    if saved is not None:
        _solved.move_to_end(key)
        return saved, True
    res = milp(
        objective,
        constraints=cons,
        integrality=np.concatenate([np.ones(nc + nv), np.zeros(nm)]),
        bounds=Bounds(0, np.concatenate([np.ones(nc + nv), np.full(nm, np.inf)])),
        options={"node_limit": ILP_NODE_LIMIT, "time_limit": ILP_TIME_LIMIT, "mip_rel_gap": 1e-6},
    )
    if res.x is None:
        return None
    saved = tuple(k for k in range(nv) if res.x[nc + k] > 0.5)
    if res.status == 0:  # (a limit reached: not remembered, another run may find another)
        _solved[key] = saved
        if len(_solved) > SOLVED_LIMIT:
            _solved.popitem(last=False)
    return saved, res.status == 0


def _digest(counts: tuple, objective, a, lower, row) -> bytes:
    """What identifies a 0/1 program of `_ilp_budget`: `counts` (its columns of each kind,
    which give its integrality and bounds, and the budget), the objective, the constraints
    (`a` >= `lower`) and the budget's row."""
    import numpy as np

    h = hashlib.blake2b(repr(counts).encode(), digest_size=20)
    for part in (objective, a.row, a.col, a.data, lower, row):
        arr = np.ascontiguousarray(part)
        h.update(f"{arr.dtype.str}{arr.shape}|".encode())  # no two splits of one byte run
        h.update(arr.tobytes())
    return h.digest()


def _greedy_budget(g: Graph, cands: list[int], budget: int, flops, groups=None):
    """The heuristic: the min-cut over cheap equations first; while its bytes exceed the
    budget, costly equations become recomputable in order of FLOPs per byte of result, the
    shortest such prefix whose min-cut fits (binary search: more recomputable equations never
    need more bytes).  Returns (the plan or None, the smallest budget any plan meets: None
    when not computed, i.e. when the cheap cut fits)."""
    costly = [i for i in cands if not g.cheap(i)]

    def key(i):
        return flops(g.eqns[i]) / max(1, sum(g.size(o) for o in g.eqns[i].outputs))

    # under the peak model (segments) the same equation of every repeated layer (same
    # FLOPs per byte, same signature) is made recomputable in all of them at once: the
    # prefixes tried end where that changes; equations of equal FLOPs per byte but another
    # signature (a layer's other products of the same width) are further steps
    sigs: dict = {}
    keys = {i: (key(i), sigs.setdefault(g.signature(i), len(sigs))) for i in costly}
    costly.sort(key=keys.__getitem__)
    ends = [
        k for k in range(1, len(costly)) if not groups or keys[costly[k]] != keys[costly[k - 1]]
    ]
    ends = [0, *ends, len(costly)]

    def cut(k):
        allowed = set(costly[:k])
        return min_cut_saved(g, lambda i: g.cheap(i) or i in allowed)

    def plan(k):
        return _plan_from_saved(g, cut(k), "")

    def size(p):  # what the budget bounds
        return planned_peak(g, p, groups) if groups else p.bytes_after

    lo, hi = 0, len(ends) - 1  # indices into `ends`
    best = plan(ends[lo])
    sizes = {ends[lo]: size(best)}  # prefix length -> the size of its plan
    if sizes[ends[lo]] <= budget:
        return best, None
    best = plan(ends[hi])
    floor = sizes[ends[hi]] = size(best)
    if floor > budget:
        return None, floor
    while hi - lo > 1:
        mid = (lo + hi) // 2
        p = plan(ends[mid])
        sizes[ends[mid]] = size(p)
        if sizes[ends[mid]] <= budget:
            hi, best = mid, p
        else:
            lo = mid
    # within the step that first fits, fewer of its layers' equations may do (in program
    # order): each layer's frees about the same bytes, so the prefix is interpolated
    # between the step's ends, REFINE_TRIES plans at most (each a min-cut of the program)
    a, b = ends[lo], ends[hi]
    for _ in range(REFINE_TRIES):
        if b - a <= 1:
            break
        share = (sizes[a] - budget) / max(1, sizes[a] - sizes[b])
        mid = min(b - 1, max(a + 1, a + math.ceil(share * (b - a))))
        p = plan(mid)
        sizes[mid] = size(p)
        if sizes[mid] <= budget:
            b, best = mid, p
        else:
            a = mid
    return best, floor


def smallest_budget(g: Graph) -> int:
    """The fewest bytes any plan holds: recomputing every pure equation as needed."""
    cands = set(_candidates(g))
    return _plan_from_saved(g, min_cut_saved(g, lambda i: i in cands), "").bytes_after


def _unmeetable(budget, floor, default, loc, what="residuals") -> JaxprError:
    if what == "peak":
        return JaxprError(
            f"--remat-budget: the planned peak cannot fit {budget} bytes; the smallest "
            f"budget that can be met is {floor} bytes (--remat-budget {floor}); the plain "
            f"gradient's residuals hold {default} bytes",
            loc,
        )
    return JaxprError(
        f"--remat-budget: the residuals cannot fit {budget} bytes; the smallest budget "
        f"that can be met is {floor} bytes (--remat-budget {floor}); the default holds "
        f"{default} bytes",
        loc,
    )


def planned_peak(g: Graph, plan: Plan, groups=None) -> int:
    """The peak the backward part of a segmented plan reaches, as the planners model it:
    the saved bytes (times `g.copies`: a scan's stacked residuals) plus the largest bytes
    one segment recomputes (its recomputed residuals, alive together when its backward
    stretch starts); the saved bytes without a peak model."""
    groups = g.peak_groups() if groups is None else groups
    if not groups:
        return plan.bytes_after
    saved = {id(v) for v in plan.saved}
    worst = max(sum(g.size(v) for v in vs if id(v) not in saved) for vs in groups)
    return g.copies * plan.bytes_after + worst


def budget_plan(g: Graph, spec: Spec, loc=None) -> Plan:
    from ...ui.stats import eqn_flops

    everything = {id(v): v for v in g.residuals if isinstance(v, Var)}
    held = sum(g.cost(v) for v in everything.values())
    groups = g.peak_groups()
    if groups:
        return _peak_budget_plan(g, spec, held, groups, loc)
    budget = int(spec.budget)
    if spec.fraction:
        # a fraction of the residuals this program's plan can recompute; those an equation
        # with bodies makes (a scan's stacked residuals) were held to it inside, per iteration
        inner = sum(
            g.cost(v)
            for v in everything.values()
            if g.made_by(v) is not None and eqn_subjaxprs(g.eqns[g.made_by(v)])
        )
        budget = int(spec.budget * (held - inner)) + inner
        if inner and budget < held:
            # what is left of the program besides its bodies may not shrink: the bodies
            # held the fraction, the rest holds what it can
            budget = max(budget, smallest_budget(g))
    what = f"--remat-budget {budget} bytes"
    if held <= budget:
        plan = _plan_from_saved(g, set(everything), what)
        plan.exact = True
        plan.why_none = "every residual fits the budget"
        return plan
    cands = _candidates(g)
    found = None
    if len(cands) <= EXACT_LIMIT:
        floor = smallest_budget(g)
        if floor > budget:
            raise _unmeetable(budget, floor, held, loc)
        # (the segments' boundary values are saved whatever the plan: the rest must fit)
        fixed = sum(g.cost(v) for v in _by_id(g.boundary, g))
        found = _ilp_budget(g, cands, budget - fixed, eqn_flops)
    if found is not None:
        plan = _plan_from_saved(g, found[0], what)
        plan.exact = found[1]
        return plan
    plan, floor = _greedy_budget(g, cands, budget, eqn_flops)
    if plan is None:
        raise _unmeetable(budget, floor, held, loc)
    plan.method, plan.exact = what, False
    return plan


def _peak_budget_plan(g: Graph, spec: Spec, held: int, groups, loc=None) -> Plan:
    """A byte budget on the planned peak (`planned_peak`) of a segmented program or a scan
    body: a fraction of the plain gradient's (every residual saved: `copies * held`), or
    bytes; the fewest recomputed FLOPs that fit."""
    from ...ui.stats import eqn_flops

    default = g.copies * held
    budget = int(spec.budget * default) if spec.fraction else int(spec.budget)
    everything = {id(v) for v in g.residuals if isinstance(v, Var)}
    cands = _candidates(g)
    inner = any(
        g.made_by(v) is not None and _planned_inside(g.eqns[g.made_by(v)])
        for v in g.residuals
        if isinstance(v, Var)
    )
    if spec.fraction and inner and budget < default:
        # the residuals that calls and loops make were held to the fraction inside their
        # bodies: the program around them holds what it can
        in_cands = set(cands)
        floor_plan = _plan_from_saved(g, min_cut_saved(g, in_cands.__contains__), "")
        budget = max(budget, planned_peak(g, floor_plan, groups))
    what = f"--remat-budget {budget} bytes of peak"
    if default <= budget:
        plan = _plan_from_saved(g, everything, what)
        plan.exact = True
        plan.why_none = "every residual fits the budget"
        return plan
    if len(cands) <= EXACT_LIMIT:
        in_cands = set(cands)
        floor_plan = _plan_from_saved(g, min_cut_saved(g, in_cands.__contains__), "")
        floor = planned_peak(g, floor_plan, groups)
        if floor > budget:
            raise _unmeetable(budget, floor, default, loc, "peak")
        fixed = sum(g.cost(v) for v in _by_id(g.boundary, g))
        found = _ilp_budget(g, cands, budget - g.copies * fixed, eqn_flops, groups)
        if found is not None:
            plan = _plan_from_saved(g, found[0], what)
            plan.exact = found[1]
            if planned_peak(g, plan, groups) <= budget:
                return plan
    # segments: the chain dynamic program across them; else (or where it finds no plan)
    # the greedy heuristic
    plan = chain_plan(g, cands, budget, eqn_flops, lambda p: planned_peak(g, p, groups))
    floor = None
    if plan is not None and planned_peak(g, plan, groups) <= budget:
        plan.chain = True
    else:
        plan, floor = _greedy_budget(g, cands, budget, eqn_flops, groups)
    if plan is None:
        raise _unmeetable(budget, floor, default, loc, "peak")
    plan.method, plan.exact = what, False
    return plan
