"""The primitive families: each module fills the records (`jaxprtool.record`) of its
primitives.  `load_all` imports every family once; the entry points install it as the
records' loader (see `jaxprtool/__init__.py`), and the machinery never imports a family."""

from __future__ import annotations

import importlib

#: the family modules, imported in this order
MODULES = (
    "jaxprtool.families.arithmetic",
    "jaxprtool.families.transcendental",
    "jaxprtool.families.shape",
    "jaxprtool.families.indexing",
    "jaxprtool.families.reductions",
    "jaxprtool.families.linalg",
    "jaxprtool.families.random",
    "jaxprtool.families.state",
    "jaxprtool.families.collectives",
    "jaxprtool.families.sharding",
    "jaxprtool.families.annotations",
    "jaxprtool.families.calls",
    "jaxprtool.families.effects",
    "jaxprtool.families.cond",
    "jaxprtool.families.scan",
    "jaxprtool.families.while_loop",
    "jaxprtool.families.jax_library",
)


def load_all() -> None:
    for m in MODULES:
        importlib.import_module(m)
