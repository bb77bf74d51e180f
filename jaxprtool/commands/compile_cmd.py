"""`jaxprtool compile`: lower a program to StableHLO / HLO or compile it to optimised HLO
(jax is imported lazily)."""

from __future__ import annotations

import contextlib
import re

import click

from ..cli import guarded, require_jax
from ..core import JaxprError, ShapedArray
from ..io import progress, write_output
from ..lazy import np
from .common import FILE_ARG, OUT_ARG, load
from .mesh_options import mesh_options
from .run_options import cache_option, device_options, dim_option, parse_dims


def shape_structs(jaxpr, dims, constvars=None):
    """The parameters' shapes: `constvars` (by default the program's) then the inputs."""
    import jax

    from ..backend.values import static_shape

    out = []
    for v in list(jaxpr.constvars if constvars is None else constvars) + list(jaxpr.invars):
        if not isinstance(v.type, ShapedArray):
            raise JaxprError(f"cannot compile an input of type {v.type}")
        shape = static_shape(v.type, dims)
        if v.type.dtype.startswith("key<"):
            from ..backend.keys import data_shape

            out.append(jax.ShapeDtypeStruct(data_shape(v.type, shape), np.uint32))
        else:
            out.append(jax.ShapeDtypeStruct(shape, v.type.np_dtype))
    return out


@click.command(name="compile")
@click.argument("file", required=False, type=FILE_ARG)
@click.option(
    "--emit",
    type=click.Choice(["stablehlo", "hlo", "optimized-hlo"]),
    default="stablehlo",
    show_default=True,
)
@dim_option
@click.option(
    "--stats", is_flag=True, help="Print cost (flops, bytes accessed) and memory analysis."
)
@click.option(
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
        text, compiled = _compile(jaxpr, emit, device, dims, stats)
    write_output(text, output)
    if stats:
        click.echo(format_stats(compiled), err=output in (None, "-"))


def _compile(jaxpr, emit, device, dims, stats):
    import jax

    from .. import backend
    from ..backend import sharding
    from ..backend.consts import all_constvars

    multi = sharding.is_multi_device(jaxpr)
    every = all_constvars(jaxpr)
    nested = not multi and len(every) > len(jaxpr.constvars)  # cond/loop bodies' constants
    structs = shape_structs(jaxpr, dims, every if nested else None)
    needs_device = emit == "optimized-hlo" or stats
    platform = backend.platform_of(device)
    dev = backend.get_device(device) if needs_device and not multi else None

    def on():  # compiled for that device, not JAX's default one
        return jax.default_device(dev) if dev is not None else contextlib.nullcontext()

    scope = sharding.run_scope(jaxpr, device) if multi else contextlib.nullcontext()
    try:
        with scope, on():
            if multi:
                structs = sharding.sharded_structs(jaxpr, structs)
            placement = sharding.enforce_call_placements if multi else None
            fn = jax.jit(backend.as_jax_function(jaxpr, dims, False, nested, placement))
            lowered = fn.trace(*structs).lower(lowering_platforms=(platform,))
    except JaxprError:
        raise
    except Exception as e:  # noqa: BLE001
        located = backend.compile_error(jaxpr, e)  # at the equation it names, as `run` does
        if located.loc is not None:
            raise located from None
        raise JaxprError(
            f"lowering for {device} failed: {type(e).__name__}: {str(e).splitlines()[0]}"
        ) from e
    if emit == "stablehlo":
        text = lowered.as_text()
    elif emit == "hlo":
        text = lowered.as_text(dialect="hlo")
    compiled = None
    if needs_device:
        with on():
            compiled = lowered.compile()
    if emit == "optimized-hlo":
        text = without_python_frames(compiled.as_text())
    if not text.endswith("\n"):
        text += "\n"
    return text, compiled


#: the sections of XLA's HLO text that list the Python frames JAX traced under
_FRAME_SECTIONS = re.compile(
    r"^(FileNames|FunctionNames|FileLocations|StackFrames)\n(?:[^\n]+\n)*\n?", re.M
)
#: a Python frame in an instruction's metadata (newer XLA: an id into the sections above;
#: older: the file and line themselves)
_FRAME_FIELDS = re.compile(
    r' (?:stack_frame_id=\d+|source_file="(?:[^"\\]|\\.)*"|source_(?:end_)?(?:line|column)=\d+)'
)


def without_python_frames(text: str) -> str:
    """XLA's optimised HLO without the stack of the tool's own Python (click, the
    evaluator) that JAX records while tracing: each operation keeps its `op_name`, which
    names its equation's FILE:LINE:COL."""
    text = _FRAME_FIELDS.sub("", _FRAME_SECTIONS.sub("", text))
    return re.sub(r"\n{3,}", "\n\n", text)


def format_stats(compiled) -> str:
    lines = []
    cost = compiled.cost_analysis()
    if isinstance(cost, (list, tuple)):
        cost = cost[0] if cost else {}
    cost = cost or {}
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
