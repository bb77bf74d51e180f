"""XLA's own memory figures for a compiled program (`jaxprtool memory`).

`xla_memory(compiled, jaxpr)` reads `compiled.memory_analysis()` of a
`jax.jit(...).lower(...).compile()` result: the bytes XLA's buffer assignment gives the
arguments, the outputs, the outputs that alias arguments, and the temporaries.  For a program
partitioned over a device mesh (SPMD), XLA compiles one program per device and these are
figures of one device; `devices` says over how many they are repeated.
"""

from __future__ import annotations

from ..core import JaxprError

#: key in the report -> attribute of jax's CompiledMemoryStats
FIELDS = {
    "temp_bytes": "temp_size_in_bytes",
    "argument_bytes": "argument_size_in_bytes",
    "output_bytes": "output_size_in_bytes",
    "alias_bytes": "alias_size_in_bytes",
}


def xla_memory(compiled, jaxpr) -> dict:
    """{temp_bytes, argument_bytes, output_bytes, alias_bytes, devices, per_device}."""
    from . import sharding

    mem = compiled.memory_analysis()
    if mem is None:
        raise JaxprError(
            "XLA gives no memory analysis for this program on this platform: "
            "pass --no-xla for the tool's own figures alone"
        )
    report = {key: int(getattr(mem, attr)) for key, attr in FIELDS.items()}
    multi = sharding.is_multi_device(jaxpr)
    report["devices"] = sharding.devices_needed(jaxpr) if multi else 1
    report["per_device"] = multi
    return report


def xla_cost(compiled) -> dict:
    """XLA's cost analysis of a compiled program (`flops`, `bytes accessed`, ...): one dict,
    whichever shape the installed JAX gives it in (a list of one per program before)."""
    cost = compiled.cost_analysis()
    if isinstance(cost, (list, tuple)):
        cost = cost[0] if cost else {}
    return cost or {}


def xla_figures(program, device: str, dims: dict, flops: bool = False) -> dict:
    """XLA's memory figures (`xla_memory`) of `program` compiled for `device` as `compile`
    compiles it, its symbolic dims sized by `dims`: `memory` prints them, `grad
    --remat-budget` fits to them, `jaxprtool.xla_memory` returns them; `flops`: XLA's FLOPs
    too (`xla_cost`; None where it counts none), for the budget's compile loop."""
    from .. import compile_cache
    from ..consts_order import number_constants
    from .jaxfn import check_runnable, x64_scope
    from .lowering import lower

    program = number_constants(program).program  # as compile reads it
    check_runnable(program)
    compile_cache.configure(False)
    with x64_scope(program):
        _, compiled = lower(program, None, device, dims, stats=True)
    report = {"device": device, **xla_memory(compiled, program)}
    if flops:
        report["flops"] = xla_cost(compiled).get("flops")
    return report
