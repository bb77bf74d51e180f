"""The primitive families: each module fills the records (`jaxprtool.record`) of its
primitives.  `load_all` imports every family once; the entry points install it as the
records' loader (see `jaxprtool/__init__.py`), and the machinery never imports a family."""

from __future__ import annotations

import importlib

#: the family modules, imported in this order
MODULES = (
    "jaxprtool.primitives.elementwise",
    "jaxprtool.primitives.shape",
    "jaxprtool.primitives.indexing",
    "jaxprtool.primitives.reductions",
    "jaxprtool.primitives.linalg",
    "jaxprtool.primitives.random",
    "jaxprtool.primitives.misc",
    "jaxprtool.primitives.control",
    "jaxprtool.ad.rules.elementwise",
    "jaxprtool.ad.rules.structural",
    "jaxprtool.ad.rules.reductions",
    "jaxprtool.ad.rules.linalg",
    "jaxprtool.ad.rules.random",
    "jaxprtool.ad.rules.calls",
    "jaxprtool.ad.rules.control_flow",
    "jaxprtool.families.batching",
)


def load_all() -> None:
    for m in MODULES:
        importlib.import_module(m)
