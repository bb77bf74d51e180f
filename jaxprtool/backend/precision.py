"""`--matmul-precision`: run a program as `jax.default_matmul_precision` would have traced it.

JAX writes a matrix product's precision into the jaxpr only when the user traced under one
(`precision=None` otherwise), and fills `None` in at trace time from
`jax_default_matmul_precision`.  The tool runs the text as written by default; inside
`matmul_precision(value)` a product whose text says `precision=None` is bound with the pair
JAX's `dot_general` would have recorded under `jax.default_matmul_precision(value)` (on a TPU,
"default" is one bf16 pass of an f32 product and "highest" is f32 accuracy).  JAX's own
context is entered too, so that its trace caches tell the two runs apart.
"""

from __future__ import annotations

import contextlib

#: the --matmul-precision choices (JAX's names)
CHOICES = ("default", "high", "highest")
_ACTIVE: list[str] = []


@contextlib.contextmanager
def matmul_precision(value: str | None):
    """Bind `precision=None` products at `value` inside the block; None: as written."""
    if value is None:
        yield
        return
    import jax

    _ACTIVE.append(value)
    try:
        with jax.default_matmul_precision(value):
            yield
    finally:
        _ACTIVE.pop()


def derivative_precision(value: str | None, platform: str) -> str | None:
    """The matrix-product precision derivatives checked against finite differences run at:
    `value`, else "highest" on a TPU (as JAX's test suite runs there; one bf16 pass is far
    outside f32 tolerances), else as written (None)."""
    return "highest" if value is None and platform == "tpu" else value


def unspecified_precision():
    """What a product printed with `precision=None` is bound with: None, or the pair of
    `lax.Precision`s in force."""
    if not _ACTIVE:
        return None
    from jax import lax

    p = lax.Precision(_ACTIVE[-1])
    return (p, p)
