"""Shared fixtures: the reference corpus in ../shared/jaxpr-format and JAX set-up."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FORMAT_DIR = Path(os.environ.get("JAXPR_FORMAT_DIR", ROOT.parent / "shared" / "jaxpr-format"))
CORPUS = FORMAT_DIR / "corpus"
DATA = Path(__file__).resolve().parent / "data"

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")


def corpus_files(sub: str, pattern: str = "*.jaxpr") -> list[Path]:
    """Files of one corpus folder; empty when the reference material is absent."""
    d = CORPUS / sub
    return sorted(d.glob(pattern)) if d.is_dir() else []


needs_corpus = pytest.mark.skipif(
    not CORPUS.is_dir(), reason=f"reference corpus not found at {CORPUS} (set JAXPR_FORMAT_DIR)"
)
