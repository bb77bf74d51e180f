"""The graph of the primal program a planner sees (`Graph`), the plan (`Plan`), and the plan of
a JAX policy (`policy_plan`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ...core import Eqn, Jaxpr, Var
from ...record import prim as record_of
from ..residuals import LinearizeInfo
from .records import all_bytes, cheap, eqn_saves, in_host, nbytes, recomputable, rerun_eqn
from .request import _KINDS, Offload, Spec, decision


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
        #: the segments (`Segments`), when the program is cut in several; their boundary
        #: values (made in one segment, read in a later one) are saved, so the planners see
        #: them as free, while their bytes count (`cost`)
        self.segments = None
        self.boundary: set[int] = set()
        #: how many instances of the program's saved values are held at once (a scan body's:
        #: its length, the residuals stacked), for the peak a byte budget bounds
        self.copies = 1
        #: the program's outputs are not returned (`Spec.value_dropped`)
        self.value_dropped = False
        n_out = len(info.out_mask)
        outs, new = list(primal.outvars[:n_out]), list(primal.outvars[n_out:])
        src = {"input": primal.invars, "const": primal.constvars, "output": outs, "new": new}
        self.residuals: list = [src[r.source][r.index] for r in info.residuals]

        self._bytes: dict[int, int] = {}
        self._size: dict[int, int] = {}
        self._sigs: dict[int, object] = {}
        self._residual_bytes: int | None = None
        self._cheap: dict[int, bool] = {}
        self._pure: dict[int, bool] = {}
        self._saves: dict[int, list[bool] | None] = {}
        self.order = {id(v): k for k, v in enumerate((*primal.constvars, *primal.invars))}
        for i, e in enumerate(self.eqns):
            for o in e.outputs:
                self.order[id(o)] = len(self.order) + i

    def cost(self, v) -> int:
        """Bytes held to save `v` (0 for inputs, constants and literals)."""
        if not isinstance(v, Var) or (id(v) in self.free and id(v) not in self.boundary):
            return 0
        b = self._bytes.get(id(v))
        if b is None:
            b = self._bytes[id(v)] = nbytes(v)
        return b

    def size(self, v) -> int:
        """The device bytes of `v` (`nbytes`), whatever its role: the planners' weights."""
        b = self._size.get(id(v))
        if b is None:
            b = self._size[id(v)] = nbytes(v)
        return b

    def signature(self, i: int):
        """`_signature` of equation `i`, made once."""
        s = self._sigs.get(i)
        if s is None:
            s = self._sigs[i] = _signature(self.eqns[i])
        return s

    def residual_bytes(self) -> int:
        """The bytes of the residuals (each once): what the plain gradient saves."""
        if self._residual_bytes is None:
            unique = {id(v): v for v in self.residuals}
            self._residual_bytes = sum(self.cost(v) for v in unique.values())
        return self._residual_bytes

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

    def saves(self, i: int, decide) -> list[bool] | None:
        """`eqn_saves` of equation `i` (one decision per planning)."""
        if i not in self._saves:
            self._saves[i] = eqn_saves(self.eqns[i], decide)
        return self._saves[i]

    def value(self, vid: int) -> Var:
        """The value an equation of the program makes, by its id."""
        return next(o for o in self.eqns[self.producer[vid]].outputs if id(o) == vid)

    def made_by(self, v) -> int | None:
        """The index of the equation that makes `v` (None for a free or boundary value)."""
        if not isinstance(v, Var) or id(v) in self.free:
            return None
        return self.producer.get(id(v))

    def peak_groups(self) -> list[list[Var]] | None:
        """The residuals of each segment (recomputed together in its backward stretch, so
        alive together at its start): the terms of `planned_peak`; None when the program
        has no peak model (one segment, held once: the bytes held across are what a budget
        bounds then)."""
        if self.segments is None and self.copies == 1:
            return None
        groups: dict[int, dict[int, Var]] = {}
        for v in self.residuals:
            if isinstance(v, Var) and id(v) not in self.free:
                k = self.segments.of[self.producer[id(v)]] if self.segments is not None else 0
                groups.setdefault(k, {})[id(v)] = v
        return [list(d.values()) for d in groups.values()]

    def cut(self, segments) -> None:
        """Plan segment by segment: the values a later segment reads are saved (free to
        the planners), so each segment's recomputation reads only its own values."""
        self.segments = segments
        seg = segments.of
        for i, e in enumerate(self.eqns):
            for x in e.inputs:
                if isinstance(x, Var) and id(x) not in self.free:
                    j = self.producer.get(id(x))
                    if j is not None and seg[j] != seg[i]:
                        self.boundary.add(id(x))
        self.free = self.free | self.boundary
        self._residual_bytes = None
        segments.cut_bytes = sum(self.cost(v) for v in _by_id(self.boundary, self))

    def closure(self, saved_ids: set[int], want, reruns=None) -> list[int]:
        """The equations (indices, in program order) that recompute `want` from the saved
        values and the free ones (`reruns`: index -> the equation run in its place)."""
        reruns = reruns or {}
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
            e = reruns.get(i, self.eqns[i])
            stack.extend(x for x in e.inputs if isinstance(x, Var))
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
    #: (key, device bytes held) of each saved value an equation makes, the bytes `copies`
    #: times in a scan body (stacked); the key names the body and the equation's result by
    #: position, the same in every plan of the same program (`fit.py` learns by it)
    saved_values: list[tuple[str, int]] = field(default_factory=list)
    recomputed_counts: dict[str, int] = field(default_factory=dict)
    nested: bool = False
    #: id of a saved value -> where it is offloaded (its bytes are in `bytes_offloaded`,
    #: not `bytes_after`: those are the bytes held in device memory)
    offload: dict[int, Offload] = field(default_factory=dict)
    bytes_offloaded: int = 0
    #: index of a recomputed equation -> the equation run in its place (a scan, call or cond
    #: rerun for some of its results, reading the saved ones: `rerun_eqn`)
    reruns: dict[int, Eqn] = field(default_factory=dict)
    #: the segments planned one by one (None: the whole program at once)
    segments: object = None
    #: the planned peak of the backward part (`planned_peak`), without and with the plan,
    #: where the program has a peak model (segments, a scan body)
    peak: int | None = None
    peak_before: int | None = None
    #: saved values that are the program's inputs or constants (held anyway: counted, not
    #: listed)
    inputs: int = 0
    #: why nothing is recomputed, when nothing is
    why_none: str = "every residual is needed"
    #: (XLA's temp bytes of the program, of the plain gradient's) where the budget's compile
    #: loop measured them (`fit.py`)
    xla: tuple[int, int] | None = None
    #: the device model's figures (`device.py`, before the calibration's scale), with the plan
    #: and for the plain gradient, where the request asked for them (`Spec.device_model`)
    device: int | None = None
    device_before: int | None = None
    #: what the reductions a scan body's plan recomputes read beyond its figure
    #: (`device.reduced_bytes`), which the calibration weighs by device (`fit.Calibration`)
    device_reduced: int = 0
    #: the calibrated device model's figure for the plan the compile loop chose
    planned_device: int | None = None
    #: found by the chain dynamic program across segments (`chain.py`)
    chain: bool = False

    def render(self, limit: int = 12) -> str:
        """The plan as `--remat` prints it on standard error."""
        where = "a nested body (one segment)" if self.nested else "the program"
        how = {True: " (exact: HiGHS)", False: " (greedy heuristic)"}.get(self.exact, "")
        if self.chain:
            how = " (chain DP across segments)"
        pct = 100.0 * (self.flops_after - self.flops_before) / max(1, self.flops_before)
        at = f" at {self.sizes}" if self.sizes else ""
        listed = self.saved_lines
        if self.inputs:
            s = "s" if self.inputs > 1 else ""
            listed = [f"{self.inputs} input{s} (held anyway, 0 B)", *listed]
        lines = [
            f"remat {self.method}{how} on {where}{at}: residual bytes held "
            f"{self.bytes_before} -> {self.bytes_after}; FLOPs {self.flops_before} -> "
            f"{self.flops_after} ({pct:+.1f}%)"
            + (
                f"; offloaded {self.bytes_offloaded} bytes"
                if self.offload or self.bytes_offloaded
                else ""
            )
            + (f"; planned peak {self.peak_before} -> {self.peak}" if self.peak is not None else "")
            + (
                f"; planned (calibrated) {self.planned_device}"
                if self.planned_device is not None
                else ""
            )
            + (
                f"; XLA temp {self.xla[1]} -> {self.xla[0]} "
                f"({self.xla[0] / max(1, self.xla[1]):.3f}x)"
                if self.xla is not None
                else ""
            ),
            f"  saved ({len(self.saved)}): "
            + "; ".join(listed[:limit])
            + (f"; ... {len(listed) - limit} more" if len(listed) > limit else ""),
        ]
        if self.segments is not None:
            lines.append("  " + self.segments.describe())
        rec = ", ".join(f"{n} x{c}" for n, c in sorted(self.recomputed_counts.items()))
        rec = rec or f"nothing ({self.why_none})"
        lines.append(f"  recomputed ({len(self.recompute)} equations): {rec}")
        return "\n".join(lines)


def _by_id(ids: set[int], g: Graph) -> list[Var]:
    """The primal Vars with these ids, in program order."""
    out = [o for e in g.eqns for o in e.outputs if id(o) in ids]
    return out


def _plan_from_saved(g: Graph, saved_ids: set[int], method: str, reruns=None) -> Plan:
    order = g.order
    reruns = reruns or {}
    rec = g.closure(saved_ids, g.residuals, reruns)
    # a saved value no recomputation reads and no residual is, is not needed
    used: dict[int, Var] = {}
    rec_set = set(rec)
    remade = {id(o) for i in rec for o in reruns.get(i, g.eqns[i]).outputs}
    for v in g.residuals:
        if isinstance(v, Var) and (id(v) in saved_ids or id(v) in g.free):
            used[id(v)] = v
    for i in rec:
        for x in reruns.get(i, g.eqns[i]).inputs:
            if isinstance(x, Var) and id(x) not in remade:
                used[id(x)] = x
    saved = sorted(used.values(), key=lambda v: order[id(v)])
    before = g.residual_bytes()
    after = sum(g.cost(v) for v in saved)
    plan = Plan(method, saved, rec, before, after)
    # values a body offloaded (a scan's stacked host copies)
    plan.bytes_offloaded = sum(all_bytes(v) for v in saved if in_host(v) and id(v) not in g.free)
    plan.reruns = {i: e for i, e in reruns.items() if i in rec_set}
    return plan


def policy_plan(g: Graph, spec: Spec) -> Plan:
    """What `jax.checkpoint(policy=...)` saves: a residual made by an equation the policy lets
    save (or that cannot be recomputed) is saved, one it offloads is saved in the policy's
    memory; any other is recomputed from its operands.  A scan's, call's or cond's result is
    saved when the policy saves the body value it holds, else the equation runs again for it
    (reading its saved results), as JAX's partial evaluation reruns a loop."""
    decide = decision(spec)
    saved_ids: set[int] = set()
    offload: dict[int, Offload] = {}
    seen: set[int] = set()
    wanted: dict[int, list[bool]] = {}
    reruns: dict[int, Eqn] = {}
    stack = [v for v in g.residuals if isinstance(v, Var)]
    while stack:
        v = stack.pop()
        if id(v) in seen or id(v) in g.free:
            continue
        seen.add(id(v))
        i = g.producer[id(v)]
        e = g.eqns[i]
        # (a body planned as a segment of its own, per iteration, is not run again)
        saves = g.saves(i, decide) if spec.segments == "none" else None
        if saves is not None:
            k = next(k for k, o in enumerate(e.outputs) if o is v)
            if not saves[k]:
                w = wanted.setdefault(i, [False] * len(e.outputs))
                w[k] = True
                r = rerun_eqn(e, saves, w)
                if r is not None:
                    reruns[i] = r
                    stack.extend(x for x in r.inputs if isinstance(x, Var))
                    continue
                w[k] = False
            saved_ids.add(id(v))
            continue
        d = decide(e)
        if d or not recomputable(e):
            saved_ids.add(id(v))
            if isinstance(d, Offload) and not record_of(e.prim).effectful:
                offload[id(v)] = d
        else:
            stack.extend(x for x in e.inputs if isinstance(x, Var))
    plan = _plan_from_saved(g, saved_ids, spec.policy, reruns)
    plan.why_none = "the policy saves every residual"
    plan.offload = {id(v): offload[id(v)] for v in plan.saved if id(v) in offload}
    moved = sum(
        g.cost(v)
        for v in plan.saved
        if id(v) in plan.offload and _KINDS[plan.offload[id(v)].dst] != v.type.memory_space
    )
    plan.bytes_after -= moved
    plan.bytes_offloaded += moved
    return plan


def _signature(e: Eqn):
    """What two structurally equal equations share: primitive, types, parameters (a body
    by its size), literals by value."""
    params = []
    for k, v in e.params.items():
        if isinstance(v, Jaxpr):
            params.append((k, "jaxpr", len(v.eqns)))
        elif isinstance(v, (tuple, list)) and any(isinstance(x, Jaxpr) for x in v):
            params.append((k, "jaxprs", len(v)))
        else:
            text = str(v)
            params.append((k, text if len(text) < 200 else hash(text)))
    ins = tuple(str(x.type) if isinstance(x, Var) else ("lit", str(x)) for x in e.inputs)
    return (e.prim, ins, tuple(str(o.type) for o in e.outputs), tuple(params))
