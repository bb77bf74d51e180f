"""Segments: the primal program cut into stretches planned and recomputed one by one (each
call, the repeated layers, about sqrt(n) stretches)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ...core import Eqn, Jaxpr, Var
from ...record import prim as record_of
from .graph import Graph
from .records import nbytes
from .request import Spec


@dataclass
class Segments:
    """The primal program cut into stretches of consecutive equations, each planned and
    recomputed on its own (Chen et al. 2016): `starts[k]` is the first equation of segment
    k, `of[i]` the segment of equation i; `kind` says how they were found."""

    kind: str
    starts: list[int]
    of: list[int]
    #: bytes of the values that cross the cuts (made before one, read after it)
    cut_bytes: int = 0

    @staticmethod
    def at(kind: str, starts, n: int) -> Segments:
        """The segments of `n` equations starting at `starts` (and 0)."""
        starts = sorted({0, *(s for s in starts if 0 < s < n)})
        of, k = [], 0
        for i in range(n):
            while k + 1 < len(starts) and starts[k + 1] <= i:
                k += 1
            of.append(k)
        return Segments(kind, starts, of)

    def describe(self, limit: int = 6) -> str:
        n = len(self.of)
        spans = [f"{a}-{b - 1}" for a, b in zip(self.starts, [*self.starts[1:], n], strict=True)]
        shown = ", ".join(spans[:limit]) + (
            f", ... {len(spans) - limit} more" if len(spans) > limit else ""
        )
        return (
            f"{len(self.starts)} segments ({self.kind}) of the {n} primal equations: {shown}; "
            f"{self.cut_bytes} B cross the cuts (saved)"
        )


#: `--remat-segments auto` cuts a program without calls or repeated layers into about
#: sqrt(n) segments only from this many primal equations
SQRT_FROM = 50
#: the share of the equations the repeated layers must cover, and the fewest equations of
#: a layer (a few element-wise equations repeated are no layers)
LAYERS_COVER = 0.25
LAYER_MIN_EQNS = 8


def _crossing(eqns) -> list[int]:
    """`c[t]`: the bytes of the values equations before t make and equations at or after t
    read: what a cut before t would save (values no equation makes, inputs, cross every cut
    alike and are not counted)."""
    last: dict[int, int] = {}
    for k, e in enumerate(eqns):
        for x in e.inputs:
            if isinstance(x, Var):
                last[id(x)] = k
    diff = [0] * (len(eqns) + 2)
    for k, e in enumerate(eqns):
        for o in e.outputs:
            end = last.get(id(o))
            if end is not None and end > k:
                diff[k + 1] += nbytes(o)
                diff[end + 1] -= nbytes(o)
    out, run = [], 0
    for t in range(len(eqns) + 1):
        run += diff[t]
        out.append(run)
    return out


def _layer_starts(g: Graph, cross: list[int]) -> list[int] | None:
    """The repeated layer structure: the L equations of a signature occurring L times at
    regular intervals mark the layers (of the counts L covering enough equations, the one
    covering most that has such a signature: a layer may repeat a shape of its own, say
    four per-head products, more often than the layers repeat); the cuts are these marks
    moved by the one offset (within a period) where the fewest bytes cross.  None when
    there is no such structure."""
    n = len(g.eqns)
    ids: dict = {}
    occ: dict[int, list[int]] = {}
    for i in range(n):
        s = ids.setdefault(g.signature(i), len(ids))
        occ.setdefault(s, []).append(i)
    cover: dict[int, int] = {}
    for ps in occ.values():
        if len(ps) >= 2:
            cover[len(ps)] = cover.get(len(ps), 0) + len(ps)
    for layers, covered in sorted(cover.items(), key=lambda kv: (-kv[1], -kv[0])):
        if covered < LAYERS_COVER * n:
            return None
        marks = _regular_marks([ps for ps in occ.values() if len(ps) == layers])
        if marks is not None:
            return _cuts_near(marks, cross, n)
    return None


def _regular_marks(candidates: list[list[int]]) -> list[int] | None:
    """Of the candidates' positions, those at the most regular intervals of at least
    LAYER_MIN_EQNS equations (within 10%), None when none are."""
    marks = None
    for ps in candidates:
        gaps = [b - a for a, b in zip(ps, ps[1:])]
        spread = max(gaps) - min(gaps)
        if (
            min(gaps) >= LAYER_MIN_EQNS
            and spread <= 0.1 * min(gaps)
            and (marks is None or spread < marks[0])
        ):
            marks = (spread, ps)
    return None if marks is None else marks[1]


def _cuts_near(marks: list[int], cross: list[int], n: int) -> list[int] | None:
    """The layer marks (but the first) moved by the one offset within a period where the
    fewest bytes cross."""
    ps = marks[1:]
    period = min(b - a for a, b in zip(marks, marks[1:]))
    best = None
    for delta in range(-((period - 1) // 2), period // 2 + 1):
        cuts = [p + delta for p in ps]
        if cuts[0] <= 0 or cuts[-1] >= n:
            continue
        cost = sum(cross[c] for c in cuts)
        if best is None or cost < best[0]:
            best = (cost, cuts)
    return None if best is None else best[1]


def _even_starts(cross: list[int], k: int) -> list[int]:
    """k segments of about equal length, each cut moved within its neighbourhood to where
    the fewest bytes cross."""
    n = len(cross) - 1
    starts: list[int] = []
    half = max(0, n // (4 * k))
    for j in range(1, k):
        t = round(j * n / k)
        lo, hi = max((starts[-1] + 1) if starts else 1, t - half), min(n - 1, t + half)
        if lo > hi:
            continue
        starts.append(min(range(lo, hi + 1), key=lambda u: (cross[u], abs(u - t))))
    return starts


def _body_size(e: Eqn) -> int:
    """The equations of a call's body (its own level)."""
    body = e.params.get(record_of(e.prim).call_body)
    return len(body.eqns) if isinstance(body, Jaxpr) else 0


def find_segments(g: Graph, spec: Spec) -> Segments | None:
    """The segments `spec.segments` asks for on the program of `g`: a number of them, or
    (auto) each call with a body, else the repeated layers, else about sqrt(n) stretches;
    None for one segment (the whole program)."""
    n = len(g.eqns)
    if spec.segments == "none" or n < 2:
        return None
    cross = _crossing(g.eqns)

    def made(kind, starts):  # (`Graph.cut` counts the bytes crossing)
        seg = Segments.at(kind, starts, n)
        return seg if len(seg.starts) > 1 else None

    if spec.segments.isdigit():
        found = made(f"{spec.segments} asked", _even_starts(cross, int(spec.segments)))
    else:
        calls = [i for i, e in enumerate(g.eqns) if record_of(e.prim).call_body]
        inside = sum(_body_size(g.eqns[i]) for i in calls)
        found = None
        if len(calls) >= 2 and inside >= n - len(calls):  # the calls hold most of the work
            found = made("each call", calls)
        if found is None:
            starts = _layer_starts(g, cross)
            if starts:
                found = made(f"{len(starts) + 1} repeated layers", starts)
        if found is None and n >= SQRT_FROM:
            found = made("about sqrt(n)", _even_starts(cross, max(2, round(math.sqrt(n)))))
    return found
