"""JAX's persistent compilation cache for `run` and `compile` (jax is imported only when it is
switched on or off, so `--help` does not import the back end).

On by default, in the subfolder `xla` of the user's jaxprtool cache folder.  A cached entry is
a compiled executable, that is machine code that `run` executes: so the folder is used only
when `cachefs.cache_dir` trusts it (the user's, writable by no one else; else a warning and the
cache stays off), and every entry is read through `cachefs.read_entry` (a regular file of the
user's, writable by no one else, size-capped, opened without blocking or following links):
JAX's own file cache would read whatever is in the folder.  Every compilation is kept, however
short (`jax_persistent_cache_min_compile_time_secs=0`): a command compiles once per process,
so the next process of the same program on the same device skips XLA.

Each entry is written as `MAGIC`, then the SHA-256 of its key and JAX's (compressed)
executable, then the executable: an entry whose digest does not match (bytes altered on disk,
an entry copied under another key, one written by an older jaxprtool) is a miss, compiled
again and replaced, never handed to XLA, which trusts what it deserializes (an altered
executable inside a valid zlib wrapper crashed the process or printed a wrong value).
"""

from __future__ import annotations

import hashlib
import os

from .cachefs import cache_dir, cache_path, read_entry, write_entry

SUBFOLDER = "xla"
#: the file name JAX's own file cache gives an entry (`KEY-cache`)
SUFFIX = "-cache"
#: what every entry this version writes starts with (the format's version is in it)
MAGIC = b"jaxprtool-xla-cache-1\n"


def seal(key: str, value: bytes) -> bytes:
    """The file an entry is written as: `MAGIC`, the digest of key and value, the value."""
    return MAGIC + _digest(key, value) + value


def unseal(key: str, data: bytes) -> bytes | None:
    """The value of an entry written by `seal` under `key`; None when it was not (damaged,
    another key's, another format)."""
    n = len(MAGIC) + hashlib.sha256().digest_size
    if not data.startswith(MAGIC) or len(data) < n:
        return None
    value = data[n:]
    return value if data[len(MAGIC) : n] == _digest(key, value) else None


def _digest(key: str, value: bytes) -> bytes:
    return hashlib.sha256(key.encode("utf-8", "surrogateescape") + b"\0" + value).digest()


def folder_for_help() -> str:
    """The cache folder as `--help` shows it (nothing is created)."""
    return cache_path(SUBFOLDER) or "(no cache folder: HOME is not set)"


def trusted_cache(folder: str):
    """JAX's cache interface over `folder`, reading only entries `cachefs` trusts."""
    from jax._src.compilation_cache_interface import CacheInterface

    class TrustedFileCache(CacheInterface):
        checks_entries = True  # (what `configure` tells it from JAX's own file cache by)

        def __init__(self, path: str):
            self._path = path
            self._damaged: set[str] = set()  # keys whose (own, trusted) file failed its digest

        def get(self, key: str) -> bytes | None:
            path = self._entry(key)
            data = read_entry(path) if path else None
            value = None if data is None else unseal(key, data)
            if data is not None and value is None:
                self._damaged.add(key)
            return value

        def put(self, key: str, value: bytes) -> None:
            path = self._entry(key)
            if path:  # only a damaged entry of the user's is replaced, never others' files
                write_entry(path, seal(key, value), replace=key in self._damaged)

        def _entry(self, key: str) -> str | None:
            """The entry's file (None for a key that is not a plain file name)."""
            if not key or os.sep in key or key.startswith(".") or "\0" in key:
                return None
            return os.path.join(self._path, key + SUFFIX)

    return TrustedFileCache(folder)


def configure(enabled: bool) -> str | None:
    """Switch JAX's persistent compilation cache on (in the user's folder, through
    `trusted_cache`) or off, before the first compilation of this command; returns the folder
    in use (None: off)."""
    import jax
    from jax._src import compilation_cache as cc

    folder = cache_dir(SUBFOLDER) if enabled else None
    if folder is not None and not _can_install(cc):
        folder = None  # a JAX whose cache we cannot supervise: compile every time
    # (JAX's own file cache over the same folder, its path a pathlib.Path, is not ours: it
    # reads entries unchecked)
    current = cc._cache._path if getattr(cc._cache, "checks_entries", False) else None
    if (folder, folder is not None) != (current, jax.config.jax_enable_compilation_cache):
        jax.config.update("jax_compilation_cache_dir", folder)
        jax.config.update("jax_enable_compilation_cache", folder is not None)
        cc.reset_cache()  # JAX decides once per process whether to use it
        if folder is not None:
            with cc._cache_initialized_mutex:
                cc._cache = trusted_cache(folder)
                cc._cache_initialized = True  # JAX must not open its own file cache there
    if folder is not None:
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    return folder


def _can_install(cc) -> bool:
    """Whether this JAX's cache module has the hooks `configure` sets."""
    return all(hasattr(cc, a) for a in ("_cache", "_cache_initialized", "_cache_initialized_mutex"))
