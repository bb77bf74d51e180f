"""The annotations family: small primitives that compute nothing.

Markers that return their operand and tell AD or the compiler something about it (the
checkpoint `name`, `tie`, `trace_value`, Pallas' `multiple_of` / `max_contiguous`),
`zeros_like`, and the scalar queries of where the program runs (`platform_index`, Pallas'
`program_id` / `num_programs`).
"""

from __future__ import annotations

from ..ad.registry import (
    defidentity,
    defjvp_zero,
    deflinear2,
    primitive_jvps,
    primitive_transposes,
    rebind_primal,
    set_kind,
)
from ..core import ShapedArray
from ..lazy import lazy_module
from ..record import batching_rule, define
from ..shapes import shape_rule
from ..shapes.util import nargs

#: the vmap machinery, executed when a batching rule first runs
BT = lazy_module("jaxprtool.ad.batching")


@shape_rule("name", "zeros_like", "trace_value", "multiple_of", "max_contiguous")
def _identity(in_types, params, out_hint):
    return list(in_types)


# ---------------------------------------------------------------- name (`checkpoint_name`)


def _name_transpose(ct, x, **params):
    return [ct]


def _evaluate_identity(interp, eqn, invals, path):
    return list(invals)


deflinear2("name", _name_transpose)
define(
    "name",
    evaluate=_evaluate_identity,
    evaluated_params=frozenset({"name"}),
    batching=batching_rule("vectorized", "name"),
)


# ---------------------------------------------------------------- tie x y: y, after x


@shape_rule("tie")
def _tie(in_types, params, out_hint):
    nargs(in_types, 2, "tie")
    return [in_types[1]]


def _tie_jvp(primals, tangents, /, **params):
    outs = rebind_primal("tie", primals, params)
    return outs, [tangents[-1]]


def _tie_batching(args, dims, **params):
    (x, y), (xd, yd) = args, dims
    if xd != yd:
        x, y = BT.bdim_at_front(x, xd), BT.bdim_at_front(y, yd)
        yd = 0
    return BT.bind("tie", x, y, **params), [yd]


primitive_jvps["tie"] = _tie_jvp
primitive_transposes["tie"] = lambda cts, x, y, /, **params: [None, cts[0]]
set_kind("tie")
define("tie", batching=_tie_batching)
define("trace_value", batching=batching_rule("vectorized", "trace_value"))


# ---------------------------------------------------------------- Pallas hints, zeros_like

for _n in ("multiple_of", "max_contiguous"):
    defidentity(_n)
    define(_n, batching=batching_rule("vectorized", _n))

defjvp_zero("zeros_like")
define(
    "zeros_like",
    flops=lambda e: 0,  # no arithmetic
    batching=batching_rule("vectorized", "zeros_like"),
)


# ---------------------------------------------------------------- platform_index, program_id, ...


@shape_rule("platform_index", "program_id", "num_programs")
def _i32_scalar(in_types, params, out_hint):
    return [ShapedArray((), "i32")]


def _bind_platform_index(eqn, p, dims):
    """Older JAX printed the default branch as `has_default=True`; the installed one spells
    it as a trailing `None` platform."""
    from ..backend.prims import to_jax

    platforms = tuple(to_jax(p.get("platforms", ())))
    if p.pop("has_default", False):
        platforms += (None,)
    return {"platforms": platforms}


for _n in ("platform_index", "program_id", "num_programs"):
    defjvp_zero(_n)
    define(_n, batching=batching_rule("unbatched", _n))
define(
    "platform_index",
    bind_params=_bind_platform_index,
    evaluated_params=frozenset({"has_default"}),
)

define("name", remat="name")  # what the name policies of rematerialization match
