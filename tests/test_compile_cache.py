"""`run` and `compile` use JAX's persistent compilation cache, in a private per-user folder."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import jax
import pytest
from jax.experimental.compilation_cache import compilation_cache
from jax_oracle import run

ROOT = Path(__file__).resolve().parents[1]
PROGRAM = (
    "{ lambda ; a:f32[3] b:f32[3]. let\n    c:f32[3] = mul a b\n    d:f32[3] = sin c\n  in (d,) }\n"
)


@pytest.fixture
def cache_home(tmp_path, monkeypatch):
    """A fresh XDG cache home; JAX's cache settings are restored afterwards."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    saved = {
        k: getattr(jax.config, k)
        for k in (
            "jax_compilation_cache_dir",
            "jax_enable_compilation_cache",
            "jax_persistent_cache_min_compile_time_secs",
        )
    }
    yield tmp_path / "cache" / "jaxprtool" / "xla"
    for k, v in saved.items():
        jax.config.update(k, v)
    compilation_cache.reset_cache()


@pytest.fixture
def program(tmp_path):
    path = tmp_path / "p.jaxpr"
    path.write_text(PROGRAM)
    return str(path)


def entries(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()} if folder.is_dir() else set()


def count_hits():
    """A list that gains one item per persistent-cache hit while the listener is registered."""
    hits = []

    def listener(event, **kw):
        if event == "/jax/compilation_cache/cache_hits":
            hits.append(event)

    jax.monitoring.register_event_listener(listener)
    return hits, listener


def test_second_run_in_process_hits_the_cache(cache_home, program):
    hits, listener = count_hits()
    try:
        r1 = run(["run", program, "--random", "0", "--print-values", "full"])
        assert r1.exit_code == 0, r1.output
        first = entries(cache_home)
        assert first, "the first run wrote no cache entry"
        assert hits == []
        r2 = run(["run", program, "--random", "0", "--print-values", "full"])
        assert r2.exit_code == 0, r2.output
        assert entries(cache_home) == first  # nothing new: the executable came from the cache
        assert len(hits) >= 1
        assert r2.stdout == r1.stdout
    finally:
        jax.monitoring.unregister_event_listener(listener)
    assert cache_home.stat().st_mode & 0o777 == 0o700
    assert cache_home.parent.stat().st_mode & 0o777 == 0o700


def test_no_cache_writes_nothing(cache_home, program):
    r = run(["run", program, "--random", "0", "--no-cache"])
    assert r.exit_code == 0, r.output
    assert entries(cache_home) == set()
    r = run(["compile", program, "--emit", "optimized-hlo", "--no-cache"])
    assert r.exit_code == 0, r.output
    assert entries(cache_home) == set()


def test_compile_uses_the_cache(cache_home, program):
    """`--stats` compiles (optimised HLO does too, but bypasses the cache: a cached
    executable's HLO carries the source metadata of the process that compiled it)."""
    r = run(["compile", program, "--stats"])
    assert r.exit_code == 0, r.output
    first = entries(cache_home)
    assert first
    hits, listener = count_hits()
    try:
        r2 = run(["compile", program, "--stats"])
    finally:
        jax.monitoring.unregister_event_listener(listener)
    assert r2.exit_code == 0 and r2.stdout == r.stdout
    assert entries(cache_home) == first and len(hits) >= 1


def test_a_second_process_finds_the_first_ones_executable(tmp_path, program):
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"), PYTHONPATH=str(ROOT))
    folder = tmp_path / "cache" / "jaxprtool" / "xla"
    argv = [sys.executable, "-m", "jaxprtool", "run", program, "--random", "1"]
    out1 = subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout
    first = entries(folder)
    assert first
    out2 = subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout
    assert entries(folder) == first and out2 == out1


def test_a_folder_others_can_write_is_not_used(cache_home, program):
    cache_home.mkdir(parents=True)
    os.chmod(cache_home.parent, 0o700)
    os.chmod(cache_home, 0o777)  # repaired to 0700 (it is the user's own folder)
    r = run(["run", program, "--random", "0"])
    assert r.exit_code == 0, r.output
    assert cache_home.stat().st_mode & 0o777 == 0o700
    link = cache_home.parent / "elsewhere"
    link.mkdir()
    for p in cache_home.iterdir():
        p.unlink()
    cache_home.rmdir()
    os.symlink(link, cache_home)  # a link is not a private folder: the cache stays off
    r = run(["run", program, "--random", "0"])
    assert r.exit_code == 0, r.output
    assert entries(link) == set()


def test_help_shows_the_folder(cache_home):
    r = run(["run", "--help"])
    assert "--no-cache" in r.output and "persistent compilation" in r.output
    assert "jaxprtool" in r.output.replace("\n", " ")
