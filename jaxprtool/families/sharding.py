"""The sharding family: placement, sharding and memory-space annotations.

device_put, reshard / mesh_cast, sharding_constraint, layout_constraint, shard_alike,
with_memory_space_constraint, pin / unpin, remove_memory_space and inspect_sharding: each
returns its operands unchanged (their types may gain or lose a sharding or memory space), so
the JVP rebinds the primitive on the tangent and the transpose passes the cotangent back
(`defidentity`); on one device the back end runs them as identities.
"""

from __future__ import annotations

from ..ad.registry import defidentity
from ..core import ShapedArray
from ..params import EnumValue
from ..record import batching_rule, define
from ..shapes import shape_rule
from ..shapes.util import types_agree
from ..text import style as ST
from ..text.param_rules import sorted_params


def _no_flops(e) -> int:
    return 0  # data movement


def _evaluate_identity(interp, eqn, invals, path):
    return list(invals)


@shape_rule(
    "sharding_constraint",
    "layout_constraint",
    "shard_alike",
    "with_memory_space_constraint",
    "pin",
    "unpin",
    "remove_memory_space",
    "inspect_sharding_p",
)
def _identity(in_types, params, out_hint):
    return list(in_types)


# ---------------------------------------------------------------- device_put (several operands)

#: `devices=(MemorySpace.Host,)` members -> the memory space the result type prints
#: (`f32<host>[3]`; Device prints none)
_SPACES = {"Host": "host", "Device": None}


@shape_rule("device_put")
def _device_put(in_types, params, out_hint):
    """Each operand unchanged, in the memory space its `devices` entry names when that is a
    `MemorySpace` (an offloading remat policy's copies); a device or sharding keeps the
    operand's."""
    devices = params.get("devices") or ()
    out = []
    for k, t in enumerate(in_types):
        d = devices[k] if k < len(devices) else None
        if isinstance(t, ShapedArray) and _is_space(d):
            space = _SPACES.get(d.member, t.memory_space)
            t = ShapedArray(t.shape, t.dtype, t.weak_type, space, t.vma, t.named_shape)
        out.append(t)
    return out


def _evaluate_device_put(interp, eqn, invals, path):
    """A copy between memory spaces (`devices=(MemorySpace.Host,)`, an offloading remat
    policy's) is bound as JAX's device_put, which XLA places (on CPU JAX lowers it to the
    identity); a put on a device or sharding is the identity on one device."""
    if not any(_is_space(d) for d in eqn.params.get("devices") or ()):
        return list(invals)
    from ..backend.prims import bind_params, lookup

    return list(lookup("device_put").bind(*invals, **bind_params(eqn, interp.dims)))


def _is_space(d) -> bool:
    return isinstance(d, EnumValue) and d.cls == "MemorySpace"


defidentity("device_put")
define(
    "device_put",
    multiple_results=True,
    evaluate=_evaluate_device_put,
    flops=_no_flops,
    batching=batching_rule("same_dims", "device_put"),
    # placement only: the values pass unchanged
    evaluated_params=frozenset("devices srcs copy_semantics".split()),
)


# ---------------------------------------------------------------- reshard, mesh_cast


@shape_rule("reshard", "mesh_cast")
def _reshard(in_types, params, out_hint):
    if out_hint is not None and len(out_hint) == len(in_types):
        return [h if types_agree(h, t) else t for h, t in zip(out_hint, in_types)]
    return [_unshard(t) for t in in_types]


def _unshard(t):
    if not isinstance(t, ShapedArray):
        return t
    return t.update(
        shape=[
            int(d.split("@")[0]) if isinstance(d, str) and d.split("@")[0].isdigit() else d
            for d in t.shape
        ]
    )


def _print_reshard(e, style):
    # 0.10+: every parameter is implied by the binder type
    return sorted_params(e.params) if style.broadcast_shape_param else []


defidentity("mesh_cast")
# (its JVP, transpose and evaluation are in collectives.py: reshard moves data across devices)
define(
    "reshard",
    print_params=_print_reshard,
    flops=_no_flops,
    # 0.10+ prints no parameter
    version_clues=lambda e: {ST.CLUE_0_7_2} if e.params else set(),
)
define("mesh_cast", evaluate=_evaluate_identity, evaluated_params=frozenset({"dst_sharding"}))
for _n in ("reshard", "mesh_cast"):
    define(_n, batching=batching_rule("vectorized", _n))


# ---------------------------------------------------------------- sharding_constraint, memory space


def _print_sharding_constraint(e, style):
    """Every parameter sorted; JAX 0.12.1 no longer prints `unconstrained_dims` (the
    sharding's spec says them); for an older style, a 0.12.1 text's constraint whose spec
    has no `UNCONSTRAINED` entry prints the empty set older versions printed."""
    params = e.params
    if style.version >= (0, 12, 1):
        params = {k: v for k, v in params.items() if k != "unconstrained_dims"}
    elif "unconstrained_dims" not in params and "UNCONSTRAINED" not in str(params.get("sharding")):
        params = {**params, "unconstrained_dims": frozenset()}
    return sorted_params(params)


def _unconstrained_dims_clue(e) -> set[str]:
    """Versions before 0.12.1 print `unconstrained_dims` (0.6.2 to 0.12.0.1 in the corpus)."""
    return {ST.CLUE_BEFORE_0_12_1 if "unconstrained_dims" in e.params else ST.CLUE_0_12_1}


# (its JVP, transpose and evaluation are in collectives.py, with the mesh it constrains to)
define(
    "sharding_constraint",
    flops=_no_flops,
    batching=batching_rule("vectorized", "sharding_constraint"),
    print_params=_print_sharding_constraint,
    version_clues=_unconstrained_dims_clue,
)
for _n in (
    "layout_constraint",
    "with_memory_space_constraint",
    "pin",
    "unpin",
    "remove_memory_space",
):
    defidentity(_n)
    define(_n, batching=batching_rule("vectorized", _n))
define("shard_alike", batching=batching_rule("vectorized", "shard_alike"))
