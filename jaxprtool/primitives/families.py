"""Imports every primitive family module so that their rules register."""

from . import control, elementwise, indexing, linalg, misc, random, reductions, shape  # noqa: F401
