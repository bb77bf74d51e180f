"""The user's cache folders and the files in them, trusted only when no one else can write them.

Two caches live under `$XDG_CACHE_HOME/jaxprtool` (else `~/.cache/jaxprtool`): the analysed
grammar (JSON tables, never a pickle) and JAX's compiled executables (subfolder `xla`; an
executable is machine code, so an entry another user could plant would run their code).

What is trusted, and why:
- a folder is used only when it is a real directory (not a link), owned by the user, and
  writable by no one else; the folder above it (XDG_CACHE_HOME) must be the user's or root's
  and, when others can write to it, sticky (as /tmp is: no one can rename the user's folder
  away there).  A folder that fails is refused with a one-line warning and not used: it is
  never re-moded and then trusted, since what is already inside could be anyone's.
  Missing folders are created 0700.
- a file is read only when it is a regular file (not a link, FIFO or device: it is opened
  non-blocking and without following links, and checked on the open descriptor), owned by
  the user, writable by no one else, and at most `MAX_ENTRY_BYTES` long.  Anything else is
  ignored and left alone.
- files are written atomically, 0600, through a fresh temporary file: never through a link
  planted at the path.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys

#: the largest cache entry read (a bigger one is ignored, never loaded into memory)
MAX_ENTRY_BYTES = 1 << 30

_warned: set[str] = set()


def cache_path(sub: str | None = None) -> str | None:
    """Where the user's cache folder for jaxprtool (or its subfolder `sub`) is; nothing is
    created.  A relative `XDG_CACHE_HOME` is ignored (the XDG spec says so, and a relative
    path would let a file planted in the working folder stand in for the cache)."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):
        base = os.path.join(os.path.expanduser("~"), ".cache")
    if not os.path.isabs(base):
        return None
    d = os.path.join(base, "jaxprtool")
    return d if sub is None else os.path.join(d, sub)


def cache_dir(sub: str | None = None) -> str | None:
    """The user's cache folder for jaxprtool (or its subfolder `sub`), created 0700 when
    missing; None (after a one-line warning) when it cannot be trusted."""
    top = cache_path()
    if top is None:
        return None
    base = os.path.dirname(top)
    if not (_trusted_parent(base) and _private_dir(top)):
        return None
    d = cache_path(sub)
    return d if sub is None or _private_dir(d) else None


def _trusted_parent(base: str) -> bool:
    """XDG_CACHE_HOME (made 0700 when missing) is the user's or root's; writable by others
    only with the sticky bit."""
    try:
        if not os.path.lexists(base):
            os.makedirs(base, mode=0o700, exist_ok=True)
        st = os.stat(base)  # a link here is the user's own choice of cache home
    except OSError:
        return False
    why = shared_folder_refusal(st)
    return True if why is None else _refuse(base, why)


def shared_folder_refusal(st: os.stat_result) -> str | None:
    """Why a folder holding trusted files is not trusted (None: it is): not a folder, or
    another user's (not the user's or root's), or writable by others and not sticky (as /tmp
    is: there no one can rename the user's files away).  The plugins' folder follows it too."""
    if not stat.S_ISDIR(st.st_mode):
        return "is not a folder"
    return writable_refusal(st, (uid(), 0), shared_ok=True)


def writable_refusal(st: os.stat_result, owners, shared_ok: bool = False) -> str | None:
    """Why a file or folder someone else could have written is not trusted: its owner is
    none of `owners`, or group or others can write it (allowed for a sticky folder with
    `shared_ok`)."""
    if uid() >= 0 and st.st_uid not in owners:
        return f"belongs to another user (uid {st.st_uid})"
    if st.st_mode & 0o022 and not (shared_ok and st.st_mode & stat.S_ISVTX):
        return f"can be written by others (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def _private_dir(d: str) -> bool:
    try:
        os.mkdir(d, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return False
    try:
        st = os.lstat(d)
    except OSError:
        return False
    if not stat.S_ISDIR(st.st_mode):
        return _refuse(d, "is not a folder (a link or a file)")
    why = writable_refusal(st, (uid(),))
    return True if why is None else _refuse(d, why)


def _refuse(d: str, why: str) -> bool:
    """Warn once per folder and process; always False."""
    if d not in _warned:
        _warned.add(d)
        safe = d.encode("unicode_escape", "backslashreplace").decode("ascii")
        sys.stderr.write(
            f"warning: cache folder {safe} {why}: not used (remove it, or `chmod 700` a "
            "folder of your own, or set XDG_CACHE_HOME to a private folder)\n"
        )
    return False


def uid() -> int:
    """This process's user id (-1 where the system has none)."""
    return os.getuid() if hasattr(os, "getuid") else -1


def read_entry(path: str) -> bytes | None:
    """The bytes of a trusted cache file, else None (missing, not a regular file of the user's,
    writable by others, or too large): never blocks, never follows a link."""
    try:
        st = os.lstat(path)
        if not _trusted_file(st):
            return None
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        if not _trusted_file(os.fstat(fd)):
            return None
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(MAX_ENTRY_BYTES + 1)
        return data if len(data) <= MAX_ENTRY_BYTES else None
    except OSError:
        return None
    finally:
        os.close(fd)


def _trusted_file(st: os.stat_result) -> bool:
    return (
        stat.S_ISREG(st.st_mode)
        and writable_refusal(st, (uid(),)) is None
        and st.st_size <= MAX_ENTRY_BYTES
    )


def write_entry(path: str, data: bytes, *, replace: bool = True) -> None:
    """Write `data` at `path` atomically, 0600, never through a link planted there.  What is
    at `path` is replaced only when it is a regular file of the user's (a stale or damaged
    entry; never with `replace=False`): anything else is left alone."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        pass
    except OSError:
        return
    else:
        if not replace or not stat.S_ISREG(st.st_mode) or st.st_uid != uid():
            return
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        fd = os.open(
            tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600
        )
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)  # replaces a link itself, never its target
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
