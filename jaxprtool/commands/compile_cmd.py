"""`jaxprtool compile`: lower a program to StableHLO / HLO or compile it to optimised HLO
(jax is imported lazily)."""

from __future__ import annotations

import click

from ..cli import argument, command, guarded, option
from ..io import progress, write_output
from ..jax_required import require_jax
from .common import FILE_ARG, OUT_ARG, load
from .mesh_options import mesh_options
from .run_options import cache_option, device_options, dim_option, parse_dims


@command(name="compile")
@argument("file", required=False, type=FILE_ARG)
@option(
    "--emit",
    type=click.Choice(["stablehlo", "hlo", "optimized-hlo"]),
    default="stablehlo",
    show_default=True,
)
@dim_option
@option("--stats", is_flag=True, help="Print cost (flops, bytes accessed) and memory analysis.")
@option(
    "-o",
    "--output",
    metavar="OUT",
    type=OUT_ARG,
    help="Write the IR here (default: standard output).",
)
@cache_option
@guarded
@device_options(precision=False, help="Target platform (stablehlo and hlo need no such device).")
@mesh_options(distributed=False, show=False)
def compile_(file, emit, device, dim_specs, stats, output, no_cache):
    """Lower FILE to StableHLO / HLO, or compile it to optimised HLO.

    \b
    Example:
      jaxprtool compile mlp.jaxpr --emit stablehlo
      jaxprtool compile mlp.jaxpr --emit stablehlo --device gpu     # no GPU needed
      jaxprtool compile mlp.jaxpr --emit optimized-hlo --device tpu  # as XLA compiles it there
      jaxprtool compile mlp.jaxpr --emit optimized-hlo --stats
      jaxprtool compile sharded.jaxpr --emit optimized-hlo --stats --mesh x=4,y=2
    """
    from .. import backend, compile_cache
    from ..backend.lowering import lower
    from ..backend.values import check_dims
    from ..consts_order import number_constants

    require_jax()
    dims = parse_dims(dim_specs)
    jaxpr, _, _ = load(file)
    jaxpr = number_constants(jaxpr).program  # parameters: every constant in order, the inputs
    backend.check_runnable(jaxpr)
    check_dims(jaxpr, dims, require=True)
    # a cached executable's optimised HLO carries the source metadata of the process that
    # compiled it (a `run`'s stack), so the text it prints would depend on the cache's history
    compile_cache.configure(not no_cache and emit != "optimized-hlo")
    with backend.x64_scope(jaxpr), progress(f"compiling {file or '<stdin>'} ({emit})"):
        text, compiled = lower(jaxpr, emit, device, dims, stats)
    write_output(text, output)
    if stats:
        click.echo(format_stats(compiled), err=output in (None, "-"))


def format_stats(compiled) -> str:
    from ..backend.memory_analysis import xla_cost

    lines = []
    cost = xla_cost(compiled)
    lines.append(f"flops: {cost.get('flops', float('nan')):.6g}")
    lines.append(f"bytes accessed: {cost.get('bytes accessed', float('nan')):.6g}")
    for k in ("transcendentals", "optimal_seconds"):
        if k in cost:
            lines.append(f"{k}: {cost[k]:.6g}")
    mem = compiled.memory_analysis()
    if mem is not None:
        for k in (
            "argument_size_in_bytes",
            "output_size_in_bytes",
            "temp_size_in_bytes",
            "alias_size_in_bytes",
            "generated_code_size_in_bytes",
        ):
            if hasattr(mem, k):
                lines.append(
                    f"{k.replace('_in_bytes', '').replace('_', ' ')} bytes: {getattr(mem, k)}"
                )
    from ..backend.sharding import collective_lines

    lines += collective_lines(compiled)
    return "\n".join(lines)
