"""`min-cut`: the saved set of fewest bytes recomputing only cheap equations, a minimum s-t cut
(AOTAutograd's partitioner)."""

from __future__ import annotations

from collections.abc import Callable

from ...core import Var
from .graph import Graph, Plan, _plan_from_saved
from .records import nbytes


def _relevant(g: Graph, may_recompute, wanted, free: set[int]) -> dict[int, None]:
    """The equations that can matter: those a wanted value reaches through recomputable
    equations (not through free values)."""

    def made_by(v):
        return None if not isinstance(v, Var) or id(v) in free else g.producer.get(id(v))

    relevant: dict[int, None] = {}
    stack = [made_by(v) for v in wanted]
    while stack:
        i = stack.pop()
        if i is None or i in relevant:
            continue
        relevant[i] = None
        if may_recompute(i):
            stack.extend(made_by(x) for x in g.eqns[i].inputs)
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
                if isinstance(x, Var) and id(x) not in free:
                    for o in outs:
                        edge(node(x) + 1, o, inf)
        else:
            for o in outs:
                edge(0, o, inf)
    for v in wanted:
        if isinstance(v, Var) and id(v) not in free:
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
    plan.why_none = (
        "every residual is needed: no recomputation by element-wise and shape equations "
        "holds fewer bytes"
    )
    if plan.bytes_after > plan.bytes_before:  # cannot happen with exact capacities
        return _plan_from_saved(g, {id(v) for v in g.residuals if isinstance(v, Var)}, "min-cut")
    return plan
