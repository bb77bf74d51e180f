"""Building blocks for the primitives' printing rules (`Primitive.print_params`,
`Primitive.restyle`): which parameters JAX prints, in which order, for each version.

A family module composes these; the printer itself only asks the record."""

from __future__ import annotations

from typing import Any

from ..params import format_value

Params = list[tuple[str, Any]]


def sorted_params(d: dict) -> Params:
    """JAX's default: every parameter, sorted by key."""
    return sorted(d.items())


def name_first(d: dict) -> Params:
    """`name=` first, then the rest sorted (jit, custom_jvp_call, ...)."""
    if "name" in d:
        d = dict(d)
        name = d.pop("name")
        return [("name", name), *sorted(d.items())]
    return sorted(d.items())


def drop_if_none(*keys: str):
    """A print rule that hides `keys` when their value is None (JAX prints them otherwise)."""

    def rule(e, style) -> Params:
        return sorted((k, v) for k, v in e.params.items() if not (k in keys and v is None))

    return rule


def drop(*keys: str):
    """A print rule that never prints `keys`."""

    def rule(e, style) -> Params:
        return sorted((k, v) for k, v in e.params.items() if k not in keys)

    return rule


def unspecified(s) -> bool:
    """A sharding left unspecified (printed as nothing by JAX)."""
    return s is None or format_value(s, nested=True) == "UnspecifiedValue"
