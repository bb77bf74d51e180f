"""Primitive registry: shape rules keyed by primitive name.

Each family module (`unary.py`, `shape.py`, ...) registers, for each of its
primitives, a shape rule `rule(in_types, params, out_hint) -> list[Type]`.
`out_hint` is the list of result types the text declared (or None when a pass
is building a new equation); rules use it only for parameters that JAX's
printer hides (broadcast_in_dim's `shape`, for example).  A rule raises
`ShapeError` when operands or parameters are wrong.
"""

from __future__ import annotations

from collections.abc import Callable

from ..core import Type

ShapeRule = Callable[[list[Type], dict, "list[Type] | None"], list[Type]]

SHAPE_RULES: dict[str, ShapeRule] = {}

#: primitives whose equations must never be removed, merged or reordered
EFFECTFUL: set[str] = {
    "debug_callback",
    "debug_print",
    "io_callback",
    "check",
    "pure_callback_ordered",
    "addupdate",
    "swap",
    "get",
    "new_ref",
    "freeze",
    "run_state",
    "pallas_call",
}
#: random-number primitives: not merged by CSE
RANDOM: set[str] = {
    "random_bits",
    "random_seed",
    "random_split",
    "random_fold_in",
    "rng_bit_generator",
    "rng_uniform",
    "random_gamma",
}


class ShapeError(Exception):
    """Operand types or parameters that the primitive does not accept."""


def shape_rule(*names: str):
    """Decorator: register `fn` as the shape rule of each named primitive."""

    def register(fn: ShapeRule) -> ShapeRule:
        for n in names:
            SHAPE_RULES[n] = fn
        return fn

    return register


def infer_types(prim: str, in_types: list[Type], params: dict, out_hint=None) -> list[Type]:
    """Result types of `prim` applied to `in_types`; KeyError if the primitive is unknown."""
    _load_families()
    return SHAPE_RULES[prim](list(in_types), params, out_hint)


def is_known(prim: str) -> bool:
    _load_families()
    return prim in SHAPE_RULES


_loaded = False


def _load_families() -> None:
    global _loaded
    if not _loaded:
        _loaded = True
        from . import families  # noqa: F401  (registers every family)
