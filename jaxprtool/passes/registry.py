"""The pass registry and the pipeline runner.

`PASSES[name]` is a function Jaxpr -> Jaxpr.  A pipeline spec is a comma
separated list of pass names (`"inline,simplify,cse,dce"`), or `"none"` / the
empty string for no pass at all.
"""

from __future__ import annotations

from collections.abc import Callable

from ..core import Jaxpr, JaxprError, gc_paused
from .canonicalize import canonicalize
from .cse import cse
from .dce import dce
from .fold import fold
from .inline import inline
from .simplify import simplify

PASSES: dict[str, Callable[[Jaxpr], Jaxpr]] = {
    "dce": dce,
    "cse": cse,
    "fold": fold,
    "simplify": simplify,
    "inline": inline,
    "canonicalize": canonicalize,
}


def parse_pipeline(spec: str | None) -> list[str]:
    """The pass names of a spec; raises JaxprError for an unknown name."""
    if spec is None:
        return []
    names = [s.strip() for s in spec.split(",") if s.strip()]
    if names == ["none"]:
        return []
    for n in names:
        if n not in PASSES:
            raise JaxprError(f"unknown pass '{n}' (known: {', '.join(sorted(PASSES))}, none)")
    return names


def run_pipeline(
    jaxpr: Jaxpr,
    spec: str | None,
    print_after_all: Callable[[str, Jaxpr], None] | None = None,
) -> Jaxpr:
    """Run the passes of `spec` in order.  `print_after_all(name, jaxpr)` is called after each."""
    for name in parse_pipeline(spec):
        with gc_paused():
            jaxpr = PASSES[name](jaxpr)
        if print_after_all is not None:
            print_after_all(name, jaxpr)
    return jaxpr
