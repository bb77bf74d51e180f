"""Random inputs drawn as the program needs them (check-grad's, explain's and `run
--random`'s point), from what its equations say about their operands.

Each primitive's record may give `draw_domain(eqn) -> {operand: need}` (`record.py`):

- `("index", n)`: the operand indexes an axis of n positions (gather's indices,
  dynamic_slice's starts): an integer input it is computed from is drawn in [0, n), so
  that the gather reads in range (random integers from [1, 5) read past three classes);
- `("like", k)`: compared with operand k (`eq labels iota`): drawn in the range of
  operand k where that is known, from a record's `draw_range(eqn) -> (lo, hi)` (iota);
- `("positive",)`: log, sqrt, rsqrt, a fractional power: the input feeding it directly
  is drawn positive;
- `("fan_in", n)`: a matrix product contracting n values: the input feeding it directly is
  scaled by 1/sqrt(n), so that layers do not saturate (N(0, 1) weights of width 1024 made
  every tanh and softmax of a transformer saturate, and its derivatives 1e8).

An integer input is followed through every integer equation and call body (the index a
gather reads is often `select_n (lt i 0) i (add i n)`); a float input only into call
bodies (a value computed from it is not the input).  This module names no primitive.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .core import Jaxpr, Literal, ShapedArray
from .record import call_body, prim


@dataclass
class Need:
    """What one input's random value must satisfy, and the equations that say so."""

    index_bound: int | None = None  # integers in [0, index_bound)
    positive: bool = False
    fan_in: int | None = None  # floats scaled by 1/sqrt(fan_in)
    why: list[str] = field(default_factory=list)

    def describe(self) -> str:
        """'in [0, 3) (gather at f.jaxpr:4:5)', for the note naming what was drawn."""
        parts = []
        if self.index_bound is not None:
            parts.append(f"integers in [0, {self.index_bound})")
        if self.positive:
            parts.append("positive")
        if self.fan_in is not None:
            parts.append(f"N(0, 1)/sqrt({self.fan_in})")
        where = "; ".join(dict.fromkeys(self.why))
        return ", ".join(parts) + (f" ({where})" if where else "")


def _int(t) -> bool:
    return isinstance(t, ShapedArray) and t.dtype[:1] in "iu"


def _static(n) -> int | None:
    return n if isinstance(n, int) and n > 0 else None


class _Walk:
    def __init__(self, memo: dict | None = None):
        self.needs: dict[int, Need] = {}
        self.roots: dict[int, set[int]] = {}  # id(var) -> the inputs it is (or, int: comes from)
        self.ranges: dict[int, tuple[int, int]] = {}  # id(var) -> known integer range
        #: id(body) -> what a call body needs of its binders, and where its integer results
        #: come from: each body is walked once, however many calls share it (a program of
        #: shared jaxprs calling each other twice has 2**40 call sites)
        self.memo = {} if memo is None else memo

    def need(self, root: int) -> Need:
        return self.needs.setdefault(root, Need())

    def walk(self, jaxpr: Jaxpr) -> None:
        for e in jaxpr.eqns:
            self.eqn(e)

    def eqn(self, e) -> None:
        rec = prim(e.prim)
        body = call_body(e)
        if body is not None and len(body.invars) == len(e.inputs):
            self.call(e, body)
        if rec.draw_domain is not None:
            for pos, need in rec.draw_domain(e).items():
                self.apply(e, e.inputs[pos], need)
        self.follow(e, rec)

    def summary(self, body: Jaxpr):
        """(the needs of each binder of `body`, the binders each result comes from)."""
        hit = self.memo.get(id(body))
        if hit is None:
            w = _Walk(self.memo)
            for k, b in enumerate(body.invars):
                w.roots[id(b)] = {k}
            w.walk(body)
            needs = [w.needs.get(k) for k in range(len(body.invars))]
            outs = [
                set() if isinstance(o, Literal) else w.roots.get(id(o), set()) for o in body.outvars
            ]
            hit = self.memo[id(body)] = (body, needs, outs)  # (the body held: its id stays)
        return hit[1], hit[2]

    def call(self, e, body: Jaxpr) -> None:
        """A call: its body's needs become those of the inputs its operands are."""
        needs, outs = self.summary(body)
        for x, n in zip(e.inputs, needs):
            if n is None or isinstance(x, Literal) or id(x) not in self.roots:
                continue
            for root in self.roots[id(x)]:
                mine = self.need(root)
                if n.index_bound is not None and _int(x.type):
                    mine.index_bound = min(mine.index_bound or n.index_bound, n.index_bound)
                elif not _int(x.type) and self.direct(x, root):
                    mine.positive |= n.positive
                    if n.fan_in is not None:
                        mine.fan_in = max(mine.fan_in or 1, n.fan_in)
                else:
                    continue
                mine.why += n.why
        for o, came in zip(e.outputs, outs):
            ins = [e.inputs[k] for k in came if not isinstance(e.inputs[k], Literal)]
            roots = set().union(*(self.roots.get(id(x), set()) for x in ins))
            if _int(o.type) and roots:
                self.roots[id(o)] = roots

    def follow(self, e, rec) -> None:
        """Integer results come from the integer inputs of their operands; a range passes
        through an equation of one variable operand of the same dtype (broadcast, reshape)."""
        ins = [x for x in e.inputs if not isinstance(x, Literal)]
        for o in e.outputs:
            if not _int(o.type):
                continue
            roots = set().union(*(self.roots.get(id(x), set()) for x in ins if _int(x.type)))
            if roots:
                self.roots[id(o)] = roots
        if rec.draw_range is not None:
            self.ranges[id(e.outputs[0])] = rec.draw_range(e)
        elif len(ins) == 1 and len(e.outputs) == 1 and id(ins[0]) in self.ranges:
            if getattr(ins[0].type, "dtype", None) == getattr(e.outputs[0].type, "dtype", 0):
                self.ranges[id(e.outputs[0])] = self.ranges[id(ins[0])]

    def apply(self, e, x, need: tuple) -> None:
        if isinstance(x, Literal) or id(x) not in self.roots:
            return
        where = f"{e.prim} at {e.loc}" if e.loc is not None else e.prim
        kind = need[0]
        if kind == "like":
            other = e.inputs[need[1]]
            hit = None if isinstance(other, Literal) else self.ranges.get(id(other))
            if hit is None or hit[0] != 0:
                return
            kind, need = "index", ("index", hit[1])
        for root in self.roots[id(x)]:
            n = self.need(root)
            if kind == "index" and _int(x.type) and _static(need[1]):
                n.index_bound = min(n.index_bound or need[1], need[1])
                n.why.append(where)
            elif kind in ("positive", "fan_in") and not _int(x.type) and self.direct(x, root):
                if kind == "positive":
                    n.positive = True
                elif _static(need[1]):
                    n.fan_in = max(n.fan_in or 1, need[1])
                n.why.append(where)

    def direct(self, x, root: int) -> bool:
        """Whether float value `x` is the input `root` itself (through call bodies)."""
        return self.roots.get(id(x)) == {root}


def input_needs(jaxpr: Jaxpr, binders) -> list[Need | None]:
    """What each of `binders` (the program's inputs, or its constants in
    `all_constvars` order) needs of its random value, None for nothing."""
    w = _Walk()
    for k, v in enumerate(binders):
        w.roots[id(v)] = {k}
    w.walk(jaxpr)
    return [w.needs.get(k) for k in range(len(binders))]
