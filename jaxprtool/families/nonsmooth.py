"""Where the non-smooth elementwise primitives are not differentiable (`kink_indicator`).

check-grad draws its finite-difference directions so that no step crosses one of these
ties (max/min of equal operands, abs/sign at 0, a floor/round jump, a clamp bound); the
values below change exactly where the primitive's derivative jumps.
"""

from __future__ import annotations

from ..ad import ops
from ..record import define


def _operands_order(e):
    x, y = e.inputs
    return [ops.gt(x, y)]


def _sign_of_operand(e):
    return [ops.sign(e.inputs[0])]


def _result(e):
    return [e.outputs[0]]


def _clamp_bounds(e):
    lo, x, hi = e.inputs
    return [ops.gt(x, lo), ops.lt(x, hi)]


for _n in ("max", "min"):
    define(_n, kink_indicator=_operands_order)
for _n in ("abs", "sign"):
    define(_n, kink_indicator=_sign_of_operand)
for _n in ("floor", "ceil", "round"):
    define(_n, kink_indicator=_result)
define("clamp", kink_indicator=_clamp_bounds)
