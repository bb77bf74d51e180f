"""Imports every rule module so that their rules register (see docs/AD_DESIGN.md)."""

from . import (
    calls,  # noqa: F401
    control_flow,  # noqa: F401
    elementwise,  # noqa: F401
    linalg,  # noqa: F401
    random,  # noqa: F401
    reductions,  # noqa: F401
    structural,  # noqa: F401
)
