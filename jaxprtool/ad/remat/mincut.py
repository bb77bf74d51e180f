"""`min-cut`: the saved set of fewest bytes recomputing only cheap equations, a minimum s-t cut
(AOTAutograd's partitioner)."""

from __future__ import annotations

from collections.abc import Callable

from ...core import Var
from .graph import Graph, Plan, _plan_from_saved


def _relevant(g: Graph, may_recompute, wanted, free: set[int]) -> dict[int, None]:
    """The equations that can matter: those a wanted value reaches through recomputable
    equations (not through free values)."""
    producer = g.producer
    relevant: dict[int, None] = {}
    stack = [v for v in wanted if isinstance(v, Var)]
    while stack:
        v = stack.pop()
        if id(v) in free:
            continue
        i = producer.get(id(v))
        if i is None or i in relevant:
            continue
        relevant[i] = None
        if may_recompute(i):
            stack.extend(x for x in g.eqns[i].inputs if isinstance(x, Var))
    return relevant


def min_cut_saved(
    g: Graph, may_recompute: Callable[[int], bool], wanted=None, free: set[int] | None = None
) -> set[int]:
    """The ids of the values to save: a minimum cut between "computed in the forward pass" and
    "needed by the linear program" (`wanted`: the residuals, unless given), recomputing only
    the equations `may_recompute(i)` allows; values in `free` (beside the graph's) cost
    nothing.  Of the minimum cuts, the one nearest the wanted values (least recomputation)."""
    import numpy as np
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import breadth_first_order, maximum_flow

    wanted = g.residuals if wanted is None else wanted
    free = g.free if not free else g.free | free
    relevant = _relevant(g, may_recompute, wanted, free)
    if not relevant:
        return set()
    # node 0 = source, 1 = sink; value v: in-node 2k, out-node 2k+1 (the loops are written
    # out: this is the planners' inner loop, some 150k edges at 10k equations)
    values: dict[int, int] = {}
    vars_: list[Var] = []
    rows: list[int] = []  # the edges of infinite capacity, tail and head
    cols: list[int] = []

    def node(v) -> int:
        k = values.get(id(v))
        if k is None:
            k = values[id(v)] = len(vars_)
            vars_.append(v)
        return 2 + 2 * k

    for i in relevant:
        e = g.eqns[i]
        outs = [node(o) for o in e.outputs]
        if may_recompute(i):
            for x in e.inputs:
                if isinstance(x, Var) and id(x) not in free:
                    a = node(x) + 1
                    for o in outs:
                        rows.append(a)
                        cols.append(o)
        else:
            rows.extend([0] * len(outs))
            cols.extend(outs)
    for v in wanted:
        if isinstance(v, Var) and id(v) not in free:
            rows.append(node(v) + 1)
            cols.append(1)
    # scipy's maximum_flow takes int32 capacities: bytes in units keeping their sum < 2**30,
    # and "infinite" above that sum
    inf = (1 << 30) + 1
    sizes = np.fromiter((g.size(v) for v in vars_), np.int64, len(vars_))
    unit = max(1, -(-int(sizes.sum()) // (1 << 29)))
    ins = 2 + 2 * np.arange(len(vars_))
    rows_a = np.concatenate([np.array(rows, np.int64), ins])
    cols_a = np.concatenate([np.array(cols, np.int64), ins + 1])
    cap = np.concatenate([np.full(len(rows), inf), np.maximum(1, -(-sizes // unit))])
    cap = cap.astype(np.int32)
    n = 2 + 2 * len(vars_)
    m = csr_matrix((cap, (rows_a, cols_a)), shape=(n, n))
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
    plan.why_none = (
        "every residual is needed: no recomputation by element-wise and shape equations "
        "holds fewer bytes"
    )
    if plan.bytes_after > plan.bytes_before:  # cannot happen with exact capacities
        return _plan_from_saved(g, {id(v) for v in g.residuals if isinstance(v, Var)}, "min-cut")
    return plan
