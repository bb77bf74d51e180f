"""What a linearization says about the residuals it passes from the primal program to the
linear one (`linearize.linearize_jaxpr`), read by rematerialization (`remat/`) and explain.
"""

from __future__ import annotations

from ..core import Loc, Var


class Residual:
    """One input of the linear program that is not a tangent."""

    __slots__ = ("type", "source", "index", "prim", "loc")

    def __init__(
        self, type: object, source: str, index: int, prim: str | None = None, loc: Loc | None = None
    ) -> None:
        self.type = type
        self.source = source  # "input" | "output" | "new" | "const"
        #: input index, output index, index among the new primal outputs, const index
        self.index = index
        self.prim = prim  # equation that produced it (for "new"/"output")
        self.loc = loc

    def __repr__(self) -> str:
        return (
            f"Residual(type={self.type!r}, source={self.source!r}, index={self.index!r}, "
            f"prim={self.prim!r}, loc={self.loc!r})"
        )

    @property
    def nbytes(self) -> int:
        t = self.type
        try:
            return int(t.size) * int(t.np_dtype.itemsize)
        except Exception:
            return 0


class LinearizeInfo:
    """Which inputs and outputs have tangents, and where each residual comes from."""

    def __init__(
        self, in_mask: list[bool], out_mask: list[bool], residuals: list[Residual] | None = None
    ) -> None:
        self.in_mask = in_mask
        self.out_mask = out_mask
        self.residuals = [] if residuals is None else residuals

    @property
    def num_new_residuals(self) -> int:
        return sum(1 for r in self.residuals if r.source == "new")


def forward_residuals(residuals, made_by, invars, constvars, outvars, info: LinearizeInfo) -> list:
    """Record in `info` where each residual comes from: a primal input, constant or output
    when it is one (forwarded: the primal program need not return it again), else a new
    primal output; returns the new ones, in order.  `made_by(v)`: the equation that made
    `v`, or None."""
    # (keyed by the Vars themselves, which hash by identity; `residuals` are Vars)
    in_pos = {v: i for i, v in enumerate(invars)}
    const_pos = {v: i for i, v in enumerate(constvars)}
    out_pos: dict[Var, int] = {}
    for j, o in enumerate(outvars):
        if isinstance(o, Var):
            out_pos.setdefault(o, j)
    new: list = []
    for r in residuals:
        e = made_by(r)
        prim, loc = (e.prim, e.loc) if e is not None else (None, None)
        if r in in_pos:
            info.residuals.append(Residual(r.type, "input", in_pos[r]))
        elif r in const_pos:
            info.residuals.append(Residual(r.type, "const", const_pos[r]))
        elif r in out_pos:
            info.residuals.append(Residual(r.type, "output", out_pos[r], prim, loc))
        else:
            info.residuals.append(Residual(r.type, "new", len(new), prim, loc))
            new.append(r)
    return new
