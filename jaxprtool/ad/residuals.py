"""What a linearization says about the residuals it passes from the primal program to the
linear one (`linearize.linearize_jaxpr`), read by rematerialization (`remat.py`) and explain.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..core import Loc, Var


@dataclass
class Residual:
    """One input of the linear program that is not a tangent."""

    type: object
    source: str  # "input" | "output" | "new" | "const"
    index: int  # input index, output index, index among the new primal outputs, const index
    prim: str | None = None  # equation that produced it (for "new"/"output")
    loc: Loc | None = None

    @property
    def nbytes(self) -> int:
        t = self.type
        try:
            return int(t.size) * int(t.np_dtype.itemsize)
        except Exception:
            return 0


@dataclass
class LinearizeInfo:
    in_mask: list[bool]
    out_mask: list[bool]
    residuals: list[Residual] = field(default_factory=list)

    @property
    def num_new_residuals(self) -> int:
        return sum(1 for r in self.residuals if r.source == "new")


def forward_residuals(residuals, made_by, invars, constvars, outvars, info: LinearizeInfo) -> list:
    """Record in `info` where each residual comes from: a primal input, constant or output
    when it is one (forwarded: the primal program need not return it again), else a new
    primal output; returns the new ones, in order.  `made_by(v)`: the equation that made
    `v`, or None."""
    in_pos = {id(v): i for i, v in enumerate(invars)}
    const_pos = {id(v): i for i, v in enumerate(constvars)}
    out_pos: dict[int, int] = {}
    for j, o in enumerate(outvars):
        if isinstance(o, Var):
            out_pos.setdefault(id(o), j)
    new: list = []
    for r in residuals:
        e = made_by(r)
        prim, loc = (e.prim, e.loc) if e is not None else (None, None)
        if id(r) in in_pos:
            info.residuals.append(Residual(r.type, "input", in_pos[id(r)]))
        elif id(r) in const_pos:
            info.residuals.append(Residual(r.type, "const", const_pos[id(r)]))
        elif id(r) in out_pos:
            info.residuals.append(Residual(r.type, "output", out_pos[id(r)], prim, loc))
        else:
            info.residuals.append(Residual(r.type, "new", len(new), prim, loc))
            new.append(r)
    return new
