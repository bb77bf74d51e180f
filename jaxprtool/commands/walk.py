"""The jaxpr files under a folder, found as ruff finds Python files: hidden folders (`.git`,
`.venv`, `.tox`, ...) and virtual environments (a folder holding `pyvenv.cfg`) are skipped,
and so is whatever a `.gitignore` ignores (`gitignore.Spec`: Git's reading and matching, in
time linear in the path): the `.gitignore` files inside the folder and those above it up to
the top of its Git work tree (the folder holding `.git`), a deeper file's patterns winning
over a shallower's, and nothing under an ignored folder coming back (`_Ignores`).

Files named on the command line are always read; only folder walks skip anything.  A walk
of a checkout someone else wrote also skips, with a warning, what is not a regular file (a
FIFO would hang the read, a device never ends) and a symbolic link out of the folder (as ruff
does not follow one: `x.jaxpr -> /proc/self/environ` would have its contents quoted in
errors); the files it keeps are read only if they are still regular files when opened.
"""

from __future__ import annotations

import os
import stat

from ..io import FoundPath, warn
from .gitignore import Spec, read_spec

#: the names of the files a folder stands for
SUFFIXES = (".jaxpr", ".jaxpr.txt")


def jaxpr_files(root: str) -> list[str]:
    """The jaxpr files under `root`, recursively, in name order."""
    ignores = _Ignores(root)
    if ignores.root_ignored(root):
        return []
    inside = os.path.realpath(root)
    found = []
    for folder, subdirs, names in os.walk(root):
        ignores.enter(folder)
        subdirs[:] = [
            d
            for d in subdirs
            if not d.startswith(".")
            and not os.path.isfile(os.path.join(folder, d, "pyvenv.cfg"))
            and not ignores.ignored(os.path.join(folder, d), is_dir=True)
        ]
        found.extend(
            FoundPath(path)
            for path in (os.path.join(folder, n) for n in names if n.endswith(SUFFIXES))
            if not ignores.ignored(path) and _readable(path, inside)
        )
    return sorted(found)


def _readable(path: str, inside: str) -> bool:
    """Whether a found file is a regular file in the folder walked (else a warning)."""
    real = os.path.realpath(path)
    if os.path.commonpath([inside, real]) != inside:
        warn(f"skipped {path}: a symbolic link out of the folder walked", code="W003")
        return False
    try:
        mode = os.stat(real).st_mode
    except OSError as e:
        warn(f"skipped {path}: {e.strerror}", code="W003")
        return False
    if not stat.S_ISREG(mode):
        warn(f"skipped {path}: not a regular file ({_kind(mode)})", code="W003")
        return False
    return True


def _kind(mode: int) -> str:
    for test, kind in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a folder"),
    ):
        if test(mode):
            return kind
    return "not a file"


class _Ignores:
    """The `.gitignore` specs that apply under a walk's root, by folder, as Git reads them:
    the deepest `.gitignore` with a pattern for a path decides, and what is under an ignored
    folder is ignored (Git never enters it, so no `!` pattern brings it back)."""

    def __init__(self, root: str):
        self.specs: dict[str, Spec | None] = {}
        chain = _enclosing(os.path.abspath(root))
        self.top = chain[-1]
        for folder in reversed(chain):
            self.enter(folder)

    def enter(self, folder: str) -> None:
        folder = os.path.abspath(folder)
        if folder not in self.specs:
            self.specs[folder] = read_spec(os.path.join(folder, ".gitignore"))

    def root_ignored(self, root: str) -> bool:
        """Whether the walk's root, or a folder between it and the top of its work tree, is
        ignored (then so is all under it, as `git ls-files` finds nothing there)."""
        chain = _enclosing(os.path.abspath(root))
        return any(self.ignored(f, is_dir=True) for f in reversed(chain[:-1]))

    def ignored(self, path: str, is_dir: bool = False) -> bool:
        """Whether the deepest `.gitignore` with a pattern for `path` ignores it."""
        path = os.path.abspath(path)
        folder = path
        while folder != self.top:
            folder = os.path.dirname(folder)
            spec = self.specs.get(folder)
            if spec is None:
                continue
            rel = os.fsencode(os.path.relpath(path, folder).replace(os.sep, "/"))
            verdict = spec.check(rel, is_dir)
            if verdict is not None:
                return verdict
        return False


def _enclosing(folder: str) -> list[str]:
    """`folder` and the folders above it up to the top of its Git work tree (only `folder`
    when it is in none: a `.gitignore` outside a repository still counts, as ruff does)."""
    chain = [folder]
    here = folder
    while not os.path.exists(os.path.join(here, ".git")):
        parent = os.path.dirname(here)
        if parent == here:
            return [folder]
        here = parent
        chain.append(here)
    return chain
