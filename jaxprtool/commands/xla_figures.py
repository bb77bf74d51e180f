"""XLA's memory figures of a program (`backend.memory_analysis.xla_figures`) as the commands
ask for them: with their `--dim` sizes, and without JAX a message that says what they can do
without it (shared by `memory` and the budget's compile loop of `grad`/`vjp`)."""

from __future__ import annotations


def xla_figures(program, device: str, dim_specs, flops: bool = False) -> dict:
    """XLA's memory figures of `program` compiled for `device`, its symbolic dims sized by
    `--dim` (`dim_specs`); `flops`: XLA's FLOPs too."""
    from ..backend.memory_analysis import xla_figures as figures
    from ..jax_required import require_jax
    from .run_options import parse_dims

    require_jax("or leave out XLA's figures: `--no-xla` gives the tool's own without JAX")
    return figures(program, device, parse_dims(dim_specs), flops)
