"""JAX's persistent compilation cache for `run` and `compile` (jax is imported only when it is
switched on or off, so `--help` does not import the back end).

On by default, in the subfolder `xla` of the user's jaxprtool cache folder (the folder the
grammar cache uses: 0700, owned by the user; JAX's cache is trusted code, so a folder others
could write to is refused and the cache stays off).  Every compilation is kept, however short
(`jax_persistent_cache_min_compile_time_secs=0`): a command compiles once per process, so the
next process of the same program on the same device skips XLA.
"""

from __future__ import annotations

from .text.grammar import cache_dir, cache_path

SUBFOLDER = "xla"


def folder_for_help() -> str:
    """The cache folder as `--help` shows it (nothing is created)."""
    return cache_path(SUBFOLDER) or "(no cache folder: HOME is not set)"


def configure(enabled: bool) -> str | None:
    """Switch JAX's persistent compilation cache on (in the user's folder) or off, before the
    first compilation of this command; returns the folder in use (None: off)."""
    import jax
    from jax.experimental.compilation_cache import compilation_cache

    folder = cache_dir(SUBFOLDER) if enabled else None
    want = (folder, folder is not None)
    have = (jax.config.jax_compilation_cache_dir, jax.config.jax_enable_compilation_cache)
    if want != have:
        jax.config.update("jax_compilation_cache_dir", folder)
        jax.config.update("jax_enable_compilation_cache", folder is not None)
        compilation_cache.reset_cache()  # JAX decides once per process whether to use it
    if folder is not None:
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    return folder
