"""What a linearization says about the residuals it passes from the primal program to the
linear one (`linearize.linearize_jaxpr`), read by rematerialization (`remat.py`) and explain.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..core import Loc


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
