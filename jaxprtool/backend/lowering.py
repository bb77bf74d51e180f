"""A program lowered and compiled by XLA through `jax.jit` (jax imported lazily): what
`jaxprtool compile` prints, `memory` and `grad --remat-budget` measure and `run --profile`
reads, and what `jaxprtool.to_stablehlo` returns."""

from __future__ import annotations

import contextlib
import re

from ..core import JaxprError, ShapedArray
from ..lazy import np


def shape_structs(jaxpr, dims, constvars=None):
    """The parameters' shapes: `constvars` (by default the program's) then the inputs."""
    import jax

    from .values import static_shape

    out = []
    for v in list(jaxpr.constvars if constvars is None else constvars) + list(jaxpr.invars):
        if not isinstance(v.type, ShapedArray):
            raise JaxprError(f"cannot compile an input of type {v.type}")
        shape = static_shape(v.type, dims)
        if v.type.dtype.startswith("key<"):
            from .keys import data_shape

            out.append(jax.ShapeDtypeStruct(data_shape(v.type, shape), np.uint32))
        else:
            out.append(jax.ShapeDtypeStruct(shape, v.type.np_dtype))
    return out


def lower(jaxpr, emit: str | None, device: str, dims: dict, stats: bool):
    """(the text of `jaxpr` lowered for `device` as `emit` says: "stablehlo", "hlo" or
    "optimized-hlo", None for None (the executable alone: XLA's figures); the compiled
    executable, or None where neither optimized-hlo nor `stats` needs one).  `jaxpr`: every
    constant a parameter (`number_constants`), its symbolic dims sized by `dims`; a failure
    is a JaxprError at the equation XLA names."""
    import jax

    from . import sharding
    from .consts import all_constvars
    from .jaxfn import as_jax_function, compile_error, get_device, platform_of
    from .jit_cache import shared_jit

    multi = sharding.is_multi_device(jaxpr)
    every = all_constvars(jaxpr)
    nested = not multi and len(every) > len(jaxpr.constvars)  # cond/loop bodies' constants
    structs = shape_structs(jaxpr, dims, every if nested else None)
    needs_device = emit == "optimized-hlo" or stats
    platform = platform_of(device)
    dev = get_device(device) if needs_device and not multi else None

    def on():  # compiled for that device, not JAX's default one
        return jax.default_device(dev) if dev is not None else contextlib.nullcontext()

    scope = sharding.run_scope(jaxpr, device) if multi else contextlib.nullcontext()
    try:
        with scope, on():
            if multi:
                structs = sharding.sharded_structs(jaxpr, structs)
            placement = sharding.enforce_call_placements if multi else None
            fn = shared_jit(
                jaxpr,
                sharding.run_variant("placed" if multi else "plain", dims, nested),
                lambda: jax.jit(as_jax_function(jaxpr, dims, False, nested, placement)),
            )
            lowered = fn.trace(*structs).lower(lowering_platforms=(platform,))
    except JaxprError:
        raise
    except Exception as e:  # noqa: BLE001
        located = compile_error(jaxpr, e)  # at the equation it names, as `run` does
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
    if emit is None:
        return None, compiled
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
