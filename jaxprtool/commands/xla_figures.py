"""XLA's memory figures of a program, compiled as `jaxprtool compile` compiles it (shared by
`memory` and the budget's compile loop of `grad`/`vjp`)."""

from __future__ import annotations


def xla_figures(program, device: str, dim_specs) -> dict:
    """XLA's memory figures (`backend.memory_analysis.xla_memory`) of `program` compiled for
    `device` as `compile` compiles it: `memory` prints them, `grad --remat-budget` fits to
    them."""
    from .. import backend, compile_cache
    from ..backend.memory_analysis import xla_memory
    from ..cli import require_jax
    from ..consts_order import number_constants
    from .compile_cmd import _compile
    from .run_options import parse_dims

    require_jax("or leave out XLA's figures: `--no-xla` gives the tool's own without JAX")
    program = number_constants(program).program  # as compile reads it
    backend.check_runnable(program)
    compile_cache.configure(False)
    with backend.x64_scope(program):
        _, compiled = _compile(program, "hlo", device, parse_dims(dim_specs), stats=True)
    return {"device": device, **xla_memory(compiled, program)}
