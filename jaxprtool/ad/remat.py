"""Rematerialization: which residuals of a linearization to save and which to recompute.

A linearization (`linearize.linearize_jaxpr`) passes every residual from the primal program to
the linear one.  A *plan* chooses a set of primal values to save instead, from which every
residual can be recomputed through the primal program's own equations; `apply_plan` rewrites
the pair so that the primal program returns the saved values and the linear program recomputes
the others.  Plans come from

* a JAX policy (`everything_saveable`, `nothing_saveable`, `dots_saveable`,
  `dots_with_no_batch_dims_saveable`, `save_only_these_names=a,b`,
  `save_any_names_but_these=a,b`): a residual is saved when the policy lets its equation's
  result be saved, else that equation is recomputed from its operands, recursively, as
  `jax.checkpoint(policy=...)` does;
* `min-cut`: the saved set of fewest bytes, recomputing only cheap equations (the record
  field `remat == "cheap"`: element-wise and shape equations), found as a minimum s-t cut
  (scipy's `maximum_flow`) of the graph whose nodes are values split into in/out halves with
  the value's bytes as capacity (AOTAutograd's partitioner);
* a byte budget: the residuals held must fit it, recomputing what costs least (FLOPs from
  `ui.stats.eqn_flops`) among the pure equations: an exact 0/1 program (scipy's `milp`, HiGHS)
  when there are at most `EXACT_LIMIT` candidate equations, else the greedy heuristic of
  `_greedy_budget`.

The recomputation is emitted as JAX emits it: each contiguous stretch of the linear program
that reads recomputed values becomes one `remat2[differentiated=True prevent_cse=True]` call
whose body recomputes them and then runs that stretch.  Transposed, the call stays a call whose
operands include the incoming cotangents, and `run`/`compile` put its operands through an
`optimization_barrier` (JAX's remat lowering), so XLA neither merges the recomputation back
into the forward pass nor hoists it ahead of the backward step that needs it.

Values held in memory anyway cost nothing: the program's inputs and constants.  The bytes of a
plan are those of the other saved values (primal outputs included).
"""

from __future__ import annotations

import contextlib
import contextvars
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from ..core import Eqn, Jaxpr, JaxprError, Var, eqn_subjaxprs
from ..record import prim as record_of
from . import builder as B
from .residuals import LinearizeInfo, Residual, forward_residuals

#: candidate equations up to which a byte budget is solved exactly (HiGHS takes well under
#: a second there); beyond, the greedy heuristic
EXACT_LIMIT = 400
#: HiGHS' time limit (s); when it is reached without a proven optimum the best plan found
#: is kept if it meets the budget, else the heuristic's
ILP_TIME_LIMIT = 1.0

POLICIES = (
    "everything_saveable",
    "nothing_saveable",
    "dots_saveable",
    "dots_with_no_batch_dims_saveable",
    "save_only_these_names=NAMES",
    "save_any_names_but_these=NAMES",
    "min-cut",
)


# ---------------------------------------------------------------- what the records say


def remat_class(e: Eqn) -> str | None:
    """The record's `remat` field for this equation ("cheap", "dot", "dot_unbatched", "name"
    or None)."""
    v = record_of(e.prim).remat
    return v(e) if callable(v) else v


def recomputable(e: Eqn) -> bool:
    """A pure equation without bodies: recomputing it gives the same values."""
    rec = record_of(e.prim)
    return not (rec.effectful or rec.random or eqn_subjaxprs(e))


def cheap(e: Eqn) -> bool:
    """What min-cut may recompute: element-wise and shape equations."""
    return remat_class(e) in ("cheap", "name") and recomputable(e)


def nbytes(v) -> int:
    t = v.type
    try:
        return int(t.size) * int(t.np_dtype.itemsize)
    except Exception:
        return 0


# ---------------------------------------------------------------- the request


@dataclass(frozen=True)
class Spec:
    """What the user asked for: a policy name (with its names) or a byte budget."""

    policy: str | None = None
    names: frozenset[str] = frozenset()
    budget: float | None = None  # bytes, or a fraction when `fraction`
    fraction: bool = False
    #: the sizes of symbolic dims the byte and FLOP counts use (`--dim b=5`), sorted pairs
    dims: tuple[tuple[str, int], ...] = ()


_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([kmgt]i?b?|b)?\s*$", re.I)
_UNITS = {"": 1, "b": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}


def parse_budget(text: str) -> Spec:
    """`0.5` (a fraction of the default residual bytes), `2GiB`, `300MB`, `123456` bytes."""
    m = _SIZE.match(text)
    if not m:
        raise ValueError(f"--remat-budget {text!r}: expected a fraction (0.5) or bytes (2GiB)")
    num, unit = float(m.group(1)), (m.group(2) or "").lower()
    if not unit and num <= 1 and "." in m.group(1):
        return Spec(budget=num, fraction=True)
    base = unit[:1] if unit != "b" else "b"
    scale = _UNITS[base] if "i" not in unit else 1024 ** "bkmgt".index(base)
    return Spec(budget=num * scale)


def parse_policy(text: str) -> Spec:
    name, _, rest = text.partition("=")
    name = name.strip()
    if name in ("save_only_these_names", "save_any_names_but_these"):
        names = frozenset(n.strip() for n in rest.split(",") if n.strip())
        if not names:
            raise ValueError(f"--remat {name}=NAME,NAME...: give the checkpoint names")
        return Spec(policy=name, names=names)
    if name in ("save_and_offload_only_these_names", "offload"):
        raise ValueError(
            f"--remat {name}: offloading residuals to host memory is not supported (the "
            "program would need host memory-kind transfers this tool does not emit); use "
            "save_only_these_names=... to save the named values on the device, or min-cut"
        )
    if name in POLICIES and not rest:
        return Spec(policy=name)
    raise ValueError(
        f"--remat {text!r}: unknown policy; one of {', '.join(POLICIES)} (JAX's names)"
    )


def saveable(spec: Spec) -> Callable[[Eqn], bool]:
    """The policy as a predicate on the equation that made a value."""
    p = spec.policy
    if p == "everything_saveable":
        return lambda e: True
    if p == "nothing_saveable":
        return lambda e: False
    if p == "dots_saveable":
        return lambda e: remat_class(e) in ("dot", "dot_unbatched")
    if p == "dots_with_no_batch_dims_saveable":
        return lambda e: remat_class(e) == "dot_unbatched"
    names = spec.names

    def named(e):
        return remat_class(e) == "name" and str(e.params.get("name")) in names

    if p == "save_only_these_names":
        return named
    if p == "save_any_names_but_these":
        return lambda e: remat_class(e) == "name" and not named(e)
    raise AssertionError(p)


# ---------------------------------------------------------------- the graph of the primal program


class Graph:
    """The primal program seen by a planner: which equation makes each value, which values are
    free (inputs, constants), and the residuals wanted (primal Vars)."""

    def __init__(self, primal: Jaxpr, info: LinearizeInfo):
        self.primal = primal
        self.eqns = list(primal.eqns)
        self.producer: dict[int, int] = {}
        for i, e in enumerate(self.eqns):
            for o in e.outputs:
                self.producer[id(o)] = i
        self.free = {id(v) for v in (*primal.invars, *primal.constvars)}
        n_out = len(info.out_mask)
        outs, new = list(primal.outvars[:n_out]), list(primal.outvars[n_out:])
        src = {"input": primal.invars, "const": primal.constvars, "output": outs, "new": new}
        self.residuals: list = [src[r.source][r.index] for r in info.residuals]

        self._bytes: dict[int, int] = {}
        self._cheap: dict[int, bool] = {}
        self._pure: dict[int, bool] = {}
        self.order = {id(v): k for k, v in enumerate((*primal.constvars, *primal.invars))}
        for i, e in enumerate(self.eqns):
            for o in e.outputs:
                self.order[id(o)] = len(self.order) + i

    def cost(self, v) -> int:
        """Bytes held to save `v` (0 for inputs, constants and literals)."""
        if not isinstance(v, Var) or id(v) in self.free:
            return 0
        b = self._bytes.get(id(v))
        if b is None:
            b = self._bytes[id(v)] = nbytes(v)
        return b

    def cheap(self, i: int) -> bool:
        c = self._cheap.get(i)
        if c is None:
            c = self._cheap[i] = cheap(self.eqns[i])
        return c

    def pure(self, i: int) -> bool:
        c = self._pure.get(i)
        if c is None:
            c = self._pure[i] = recomputable(self.eqns[i])
        return c

    def made_by(self, v) -> int | None:
        return self.producer.get(id(v)) if isinstance(v, Var) else None

    def closure(self, saved_ids: set[int], want) -> list[int]:
        """The equations (indices, in program order) that recompute `want` from the saved
        values and the free ones."""
        need: set[int] = set()
        stack = [v for v in want if isinstance(v, Var)]
        while stack:
            v = stack.pop()
            if id(v) in saved_ids or id(v) in self.free:
                continue
            i = self.producer[id(v)]
            if i in need:
                continue
            need.add(i)
            stack.extend(x for x in self.eqns[i].inputs if isinstance(x, Var))
        return sorted(need)


@dataclass
class Plan:
    """The values to save (primal Vars, program order) and the equations to recompute."""

    method: str
    saved: list
    recompute: list[int]
    bytes_before: int = 0
    bytes_after: int = 0
    flops_before: int = 0
    flops_after: int = 0
    exact: bool | None = None
    sizes: str = ""  # the symbolic sizes the bytes count (`b=5`), when --dim gave them
    #: one line per saved value and per recomputed primitive (filled by `rematerialize`)
    saved_lines: list[str] = field(default_factory=list)
    recomputed_counts: dict[str, int] = field(default_factory=dict)
    nested: bool = False

    def render(self, limit: int = 12) -> str:
        """The plan as `--remat` prints it on standard error."""
        where = "a nested body" if self.nested else "the program"
        how = {True: " (exact: HiGHS)", False: " (greedy heuristic)"}.get(self.exact, "")
        pct = 100.0 * (self.flops_after - self.flops_before) / max(1, self.flops_before)
        at = f" at {self.sizes}" if self.sizes else ""
        lines = [
            f"remat {self.method}{how} on {where}{at}: residual bytes held "
            f"{self.bytes_before} -> {self.bytes_after}; FLOPs {self.flops_before} -> "
            f"{self.flops_after} ({pct:+.1f}%)",
            f"  saved ({len(self.saved)}): "
            + "; ".join(self.saved_lines[:limit])
            + (
                f"; ... {len(self.saved_lines) - limit} more"
                if len(self.saved_lines) > limit
                else ""
            ),
        ]
        rec = ", ".join(f"{n} x{c}" for n, c in sorted(self.recomputed_counts.items()))
        lines.append(f"  recomputed ({len(self.recompute)} equations): {rec or 'nothing'}")
        return "\n".join(lines)


def _plan_from_saved(g: Graph, saved_ids: set[int], method: str) -> Plan:
    order = g.order
    rec = g.closure(saved_ids, g.residuals)
    # a saved value no recomputation reads and no residual is, is not needed
    used: dict[int, Var] = {}
    rec_set = set(rec)
    for v in g.residuals:
        if isinstance(v, Var) and (id(v) in saved_ids or id(v) in g.free):
            used[id(v)] = v
    for i in rec:
        for x in g.eqns[i].inputs:
            if isinstance(x, Var) and g.made_by(x) not in rec_set:
                used[id(x)] = x
    saved = sorted(used.values(), key=lambda v: order[id(v)])
    before = sum(g.cost(v) for v in dict((id(v), v) for v in g.residuals).values())
    after = sum(g.cost(v) for v in saved)
    return Plan(method, saved, rec, before, after)


def policy_plan(g: Graph, spec: Spec) -> Plan:
    """What `jax.checkpoint(policy=...)` saves: a residual made by an equation the policy lets
    save (or that cannot be recomputed) is saved; any other is recomputed from its operands."""
    ok = saveable(spec)
    saved_ids: set[int] = set()
    seen: set[int] = set()
    stack = [v for v in g.residuals if isinstance(v, Var)]
    while stack:
        v = stack.pop()
        if id(v) in seen or id(v) in g.free:
            continue
        seen.add(id(v))
        e = g.eqns[g.producer[id(v)]]
        if ok(e) or not recomputable(e):
            saved_ids.add(id(v))
        else:
            stack.extend(x for x in e.inputs if isinstance(x, Var))
    return _plan_from_saved(g, saved_ids, spec.policy)


# ---------------------------------------------------------------- min-cut


def min_cut_saved(g: Graph, may_recompute: Callable[[int], bool]) -> set[int]:
    """The ids of the values to save: a minimum cut between "computed in the forward pass" and
    "needed by the linear program", recomputing only the equations `may_recompute(i)` allows.
    Of the minimum cuts, the one nearest the residuals (least recomputation)."""
    import numpy as np
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import breadth_first_order, maximum_flow

    # the equations that can matter: those a residual reaches through recomputable equations
    relevant: dict[int, None] = {}
    stack = [g.made_by(v) for v in g.residuals]
    while stack:
        i = stack.pop()
        if i is None or i in relevant:
            continue
        relevant[i] = None
        if may_recompute(i):
            stack.extend(g.made_by(x) for x in g.eqns[i].inputs)
    if not relevant:
        return set()
    # node 0 = source, 1 = sink; value v: in-node 2k, out-node 2k+1
    values: dict[int, int] = {}
    vars_: list[Var] = []

    def node(v) -> int:
        k = values.get(id(v))
        if k is None:
            k = values[id(v)] = len(vars_)
            vars_.append(v)
        return 2 + 2 * k

    rows: list[int] = []
    cols: list[int] = []
    caps: list[int] = []
    # scipy's maximum_flow takes int32 capacities: bytes in units keeping their sum < 2**30,
    # and "infinite" above that sum
    inf = (1 << 30) + 1

    def edge(a, b, c):
        rows.append(a)
        cols.append(b)
        caps.append(c)

    for i in relevant:
        e = g.eqns[i]
        outs = [node(o) for o in e.outputs]
        if may_recompute(i):
            for x in e.inputs:
                if isinstance(x, Var) and id(x) not in g.free:
                    for o in outs:
                        edge(node(x) + 1, o, inf)
        else:
            for o in outs:
                edge(0, o, inf)
    for v in g.residuals:
        if isinstance(v, Var) and id(v) not in g.free:
            edge(node(v) + 1, 1, inf)
    sizes = [nbytes(v) for v in vars_]
    unit = max(1, -(-sum(sizes) // (1 << 29)))
    for k, s in enumerate(sizes):
        edge(2 + 2 * k, 3 + 2 * k, max(1, -(-s // unit)))
    n = 2 + 2 * len(vars_)
    cap = np.array(caps, dtype=np.int32)
    m = csr_matrix((cap, (np.array(rows), np.array(cols))), shape=(n, n))
    m.sum_duplicates()
    flow = maximum_flow(m, 0, 1).flow
    residual = (m - flow).tocsr()
    residual.data[residual.data < 0] = 0
    residual.eliminate_zeros()
    # nodes that can still reach the sink in the residual graph: the sink side, as small as
    # possible for the cut nearest the residuals
    order = breadth_first_order(residual.T.tocsr(), 1, directed=True, return_predecessors=False)
    reach = np.zeros(n, bool)
    reach[order] = True
    return {id(v) for k, v in enumerate(vars_) if reach[3 + 2 * k] and not reach[2 + 2 * k]}


def min_cut_plan(g: Graph) -> Plan:
    plan = _plan_from_saved(g, min_cut_saved(g, g.cheap), "min-cut")
    if plan.bytes_after > plan.bytes_before:  # cannot happen with exact capacities
        return _plan_from_saved(g, {id(v) for v in g.residuals if isinstance(v, Var)}, "min-cut")
    return plan


# ---------------------------------------------------------------- a byte budget


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


def _ilp_budget(g: Graph, cands: list[int], budget: int, flops):
    """The exact plan: binary c_e (recompute equation e), s_v (save value v); every residual
    saved or recomputed, every operand of a recomputed equation saved, free or recomputed;
    saved bytes <= budget; minimise recomputed FLOPs (then bytes).  None when HiGHS finds no
    plan in time."""
    import numpy as np
    from scipy.optimize import Bounds, LinearConstraint, milp
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
    a = coo_matrix((data, (rows, cols)), shape=(len(lo), nc + nv))
    cons = [LinearConstraint(a, np.array(lo), np.inf)]
    cons.append(LinearConstraint(np.concatenate([np.zeros(nc), sizes])[None, :], -np.inf, budget))
    f = np.array([float(flops(g.eqns[i])) for i in cands])
    tie = sizes / (2.0 * (sizes.sum() + 1.0))  # bytes break ties between equal FLOPs
    res = milp(
        np.concatenate([f + 1e-3, tie]),
        constraints=cons,
        integrality=np.ones(nc + nv),
        bounds=Bounds(0, 1),
        options={"time_limit": ILP_TIME_LIMIT, "mip_rel_gap": 1e-6},
    )
    if res.x is None:
        return None
    saved_ids = {id(vlist[k]) for k in range(nv) if res.x[nc + k] > 0.5}
    return saved_ids, res.status == 0


def _greedy_budget(g: Graph, cands: list[int], budget: int, flops):
    """The heuristic: the min-cut over cheap equations first; while its bytes exceed the
    budget, costly equations become recomputable in order of FLOPs per byte of result, the
    shortest such prefix whose min-cut fits (binary search: more recomputable equations never
    need more bytes).  Returns (the plan or None, the smallest budget any plan meets: None
    when not computed, i.e. when the cheap cut fits)."""
    costly = [i for i in cands if not g.cheap(i)]
    costly.sort(key=lambda i: flops(g.eqns[i]) / max(1, sum(nbytes(o) for o in g.eqns[i].outputs)))

    def cut(k):
        allowed = set(costly[:k])
        return min_cut_saved(g, lambda i: g.cheap(i) or i in allowed)

    def plan(k):
        return _plan_from_saved(g, cut(k), "")

    lo, hi = 0, len(costly)
    best = plan(lo)
    if best.bytes_after <= budget:
        return best, None
    best = plan(hi)
    floor = best.bytes_after
    if floor > budget:
        return None, floor
    while hi - lo > 1:
        mid = (lo + hi) // 2
        p = plan(mid)
        if p.bytes_after <= budget:
            hi, best = mid, p
        else:
            lo = mid
    return best, floor


def smallest_budget(g: Graph) -> int:
    """The fewest bytes any plan holds: recomputing every pure equation as needed."""
    cands = set(_candidates(g))
    return _plan_from_saved(g, min_cut_saved(g, lambda i: i in cands), "").bytes_after


def _unmeetable(budget, floor, default, loc) -> JaxprError:
    return JaxprError(
        f"--remat-budget: the residuals cannot fit {budget} bytes; the smallest budget "
        f"that can be met is {floor} bytes (--remat-budget {floor}); the default holds "
        f"{default} bytes",
        loc,
    )


def budget_plan(g: Graph, spec: Spec, loc=None) -> Plan:
    from ..ui.stats import eqn_flops

    everything = {id(v): v for v in g.residuals if isinstance(v, Var)}
    held = sum(g.cost(v) for v in everything.values())
    budget = int(spec.budget * held) if spec.fraction else int(spec.budget)
    what = f"--remat-budget {budget} bytes"
    if held <= budget:
        plan = _plan_from_saved(g, set(everything), what)
        plan.exact = True
        return plan
    cands = _candidates(g)
    found = None
    if len(cands) <= EXACT_LIMIT:
        floor = smallest_budget(g)
        if floor > budget:
            raise _unmeetable(budget, floor, held, loc)
        found = _ilp_budget(g, cands, budget, eqn_flops)
    if found is not None:
        plan = _plan_from_saved(g, found[0], what)
        plan.exact = found[1]
        return plan
    plan, floor = _greedy_budget(g, cands, budget, eqn_flops)
    if plan is None:
        raise _unmeetable(budget, floor, held, loc)
    plan.method, plan.exact = what, False
    return plan


# ---------------------------------------------------------------- rewriting the programs


def apply_plan(
    primal: Jaxpr, linear: Jaxpr, info: LinearizeInfo, g: Graph, plan: Plan, forward=True
):
    """(primal', linear', info'): the primal program returns `plan.saved`, the linear program
    takes them and recomputes the other residuals inside `remat2` calls.  `forward=False`
    (nested bodies): every saved value is a result of the primal program, none forwarded."""
    n_out = len(info.out_mask)
    n_res = len(info.residuals)
    outs = list(primal.outvars[:n_out])
    new_info = LinearizeInfo(info.in_mask, info.out_mask)
    new = forward_residuals(
        plan.saved,
        lambda v: g.eqns[g.producer[id(v)]] if id(v) in g.producer else None,
        primal.invars if forward else (),
        primal.constvars if forward else (),
        outs if forward else (),
        new_info,
    )
    new_primal = B.make_jaxpr(
        primal.invars,
        B.dce_eqns(list(primal.eqns), outs + new),
        outs + new,
        primal.constvars,
    )
    saved_in = [B.fresh_like(v) for v in plan.saved]
    by_saved = {id(v): n for v, n in zip(plan.saved, saved_in)}
    tan_in = [B.fresh_like(v) for v in linear.invars[n_res:]]
    mapping: dict[int, object] = {id(a): b for a, b in zip(linear.invars[n_res:], tan_in)}
    recomputed: dict[int, Var] = {}  # linear residual input -> the primal Var to recompute
    for lv, pv in zip(linear.invars[:n_res], g.residuals):
        if id(pv) in by_saved:
            mapping[id(lv)] = by_saved[id(pv)]
        else:
            recomputed[id(lv)] = pv
    eqns = B.substitute(list(linear.eqns), mapping)
    outvars = [mapping.get(id(x), x) if isinstance(x, Var) else x for x in linear.outvars]
    eqns = _hoist_nonlinear(eqns, tan_in, recomputed)
    body = _segments(eqns, outvars, recomputed, g, by_saved)
    new_linear = B.make_jaxpr(saved_in + tan_in, body, outvars)
    return new_primal, new_linear, new_info


def _hoist_nonlinear(eqns, tangents, recomputed) -> list[Eqn]:
    """The equations that read no tangent (constants a rule built) moved ahead of the others:
    a `remat2` call gets only linear results, whose transposition is the call's."""
    lin = {id(t) for t in tangents}
    first, rest = [], []
    for e in eqns:
        if lin.isdisjoint(map(id, e.inputs)):
            if any(id(x) in recomputed for x in e.inputs):
                raise JaxprError(f"remat: '{e.prim}' of the linear program reads no tangent", e.loc)
            first.append(e)
        else:
            lin.update(id(o) for o in e.outputs)
            rest.append(e)
    return first + rest


def _segments(eqns, outvars, recomputed, g: Graph, by_saved) -> list[Eqn]:
    """The linear equations with each stretch that reads recomputed values wrapped in a
    `remat2` call recomputing them (stretches: the merged spans from first to last read of
    each recomputed value)."""
    spans: dict[int, list[int]] = {}
    for k, e in enumerate(eqns):
        for x in e.inputs:
            if isinstance(x, Var) and id(x) in recomputed:
                s = spans.setdefault(id(x), [k, k])
                s[1] = k
    merged: list[list[int]] = []
    for a, b in sorted(spans.values()):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    last_use: dict[int, int] = {}
    for k, e in enumerate(eqns):
        for x in e.inputs:
            last_use[id(x)] = k
    for x in outvars:
        last_use[id(x)] = len(eqns)
    out: list[Eqn] = []
    pos = 0
    for a, b in merged:
        out.extend(eqns[pos:a])
        out.append(_remat_call(eqns[a : b + 1], b, last_use, recomputed, g, by_saved))
        pos = b + 1
    out.extend(eqns[pos:])
    return out


def _remat_call(stretch, end: int, last_use, recomputed, g: Graph, by_saved) -> Eqn:
    """The `remat2` call of one stretch (ending at linear equation `end`): its body
    recomputes what the stretch reads, then runs the stretch; its results are the stretch's
    values read after `end`."""
    want = list(
        {
            id(x): recomputed[id(x)]
            for e in stretch
            for x in e.inputs
            if isinstance(x, Var) and id(x) in recomputed
        }.items()
    )
    saved_ids = set(by_saved)
    rec = g.closure(saved_ids, [pv for _, pv in want])
    # the body: fresh binders for the saved values it reads and the outer values the stretch
    # reads; the recomputation cloned from the primal program; then the stretch
    env: dict[int, Var] = {}
    binders: list[Var] = []
    operands: list = []

    def bind_outer(outer, like):
        if id(outer) not in env:
            n = B.fresh_like(like)
            env[id(outer)] = n
            binders.append(n)
            operands.append(outer)
        return env[id(outer)]

    prim_env: dict[int, object] = {}
    cloned: list[Eqn] = []
    for i in rec:
        e = g.eqns[i]
        ins = []
        for x in e.inputs:
            if not isinstance(x, Var):
                ins.append(x)
            elif id(x) in prim_env:
                ins.append(prim_env[id(x)])
            else:  # saved (or free, also passed as a saved value)
                ins.append(bind_outer(by_saved[id(x)], x))
        outs = [B.fresh_like(o) for o in e.outputs]
        prim_env.update({id(o): n for o, n in zip(e.outputs, outs)})
        cloned.append(e.replace(inputs=ins, outputs=outs))
    for lv, pv in want:
        env[lv] = prim_env[id(pv)] if id(pv) in prim_env else bind_outer(by_saved[id(pv)], pv)
    body_eqns: list[Eqn] = []
    for e in stretch:
        ins = [
            x if not isinstance(x, Var) else env[id(x)] if id(x) in env else bind_outer(x, x)
            for x in e.inputs
        ]
        outs = [B.fresh_like(o) for o in e.outputs]
        env.update({id(o): n for o, n in zip(e.outputs, outs)})
        body_eqns.append(e.replace(inputs=ins, outputs=outs))
    results = [o for e in stretch for o in e.outputs if last_use.get(id(o), -1) > end]
    inner = B.make_jaxpr(binders, cloned + body_eqns, [env[id(o)] for o in results])
    # the call's results are the stretch's own Vars: later equations keep reading them
    return Eqn(
        "remat2",
        tuple(operands),
        tuple(results),
        {"jaxpr": inner, "prevent_cse": True, "differentiated": True, "policy": None},
    )


# ---------------------------------------------------------------- entry points


def plan_for(g: Graph, spec: Spec, loc=None) -> Plan:
    if spec.budget is not None:
        return budget_plan(g, spec, loc)
    if spec.policy == "min-cut":
        return min_cut_plan(g)
    return policy_plan(g, spec)


_SPEC: contextvars.ContextVar[Spec | None] = contextvars.ContextVar("jaxprtool_remat", default=None)
#: the plans made by the current `planning` block, outermost program last
_PLANS: contextvars.ContextVar[list | None] = contextvars.ContextVar(
    "jaxprtool_plans", default=None
)


@contextlib.contextmanager
def planning(spec: Spec | None):
    """Linearizations inside the block (nested bodies included) follow `spec`; the plans made
    are collected in the yielded list (`Plan.nested` tells nested bodies' apart)."""
    plans: list = []
    t1, t2 = _SPEC.set(spec), _PLANS.set(plans)
    try:
        yield plans
    finally:
        _SPEC.reset(t1)
        _PLANS.reset(t2)


def current_spec() -> Spec | None:
    return _SPEC.get()


def counted_at(spec: Spec):
    """The block in which sizes count symbolic dims at `spec.dims` (`--dim b=5`): the
    planners' bytes and FLOPs.  Without dims, a no-op (a symbolic dim counts as 0, which
    the byte-weighted planners are never asked to weigh: `ad_cmds` refuses it)."""
    if not spec.dims:
        return contextlib.nullcontext()
    from ..backend.values import eval_dim
    from ..core import sized_dims
    from ..shardings import dim_axes

    dims, memo = dict(spec.dims), {}

    def size(d) -> int:
        n = memo.get(d)
        if n is None:
            static = dim_axes(d)[0]
            n = memo[d] = static if static is not None else eval_dim(str(d), dims)
        return n

    return sized_dims(size)


def rematerialize(primal: Jaxpr, linear: Jaxpr, info: LinearizeInfo, nested: bool = False):
    """Apply the current spec (if any) to a linearization; a byte budget applies to the
    outermost program only (nested bodies follow min-cut then)."""
    spec = _SPEC.get()
    if spec is None:
        return primal, linear, info
    if nested and spec.budget is not None:
        spec = Spec(policy="min-cut")
    from ..ui.stats import flops

    g = Graph(primal, info)
    with counted_at(spec):
        plan = plan_for(g, spec)
        plan.flops_before = flops(primal) + flops(linear)
    plan.nested = nested
    plan.sizes = ",".join(f"{k}={n}" for k, n in spec.dims)
    out = (primal, linear, info)
    if plan.recompute:  # emitted outside the sizes: the program stays symbolic
        out = apply_plan(primal, linear, info, g, plan, forward=not nested)
    with counted_at(spec):
        plan.flops_after = flops(out[0]) + flops(out[1])
        for v in plan.saved:
            i = g.made_by(v)
            src = (
                "an input"
                if i is None
                else f"{g.eqns[i].prim}" + (f" at {g.eqns[i].loc}" if g.eqns[i].loc else "")
            )
            plan.saved_lines.append(f"{v.type} ({g.cost(v)} B) from {src}")
    for i in plan.recompute:
        p = g.eqns[i].prim
        plan.recomputed_counts[p] = plan.recomputed_counts.get(p, 0) + 1
    plans = _PLANS.get()
    if plans is not None:
        plans.append(plan)
    return out


def rematerialize_masked(primal: Jaxpr, linear: Jaxpr, n_out: int, num_res: int):
    """`rematerialize` for `linearize_masked`'s pair (a nested body: residuals are the primal
    body's results after its `n_out` outputs): `(primal, linear, num_res)`."""
    if _SPEC.get() is None:
        return primal, linear, num_res
    info = LinearizeInfo([True] * len(primal.invars), [True] * n_out)
    info.residuals = [Residual(v.type, "new", k) for k, v in enumerate(primal.outvars[n_out:])]
    p, lin, new_info = rematerialize(primal, linear, info, nested=True)
    return p, lin, len(new_info.residuals)
