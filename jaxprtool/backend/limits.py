"""Memory a program needs, from its types, before anything is allocated.

`run`, `check-grad` and `explain` refuse a program whose inputs and intermediates would
need more than the limit (`JAXPRTOOL_MAX_MEMORY`, bytes with an optional K/M/G/T suffix;
default half of the memory the process may use: the machine's, `ulimit -v`'s or the
cgroup's, the smallest), with the figure and the largest value's location
in the message.  The estimate adds up every top-level input and result (an upper bound on
the live set) plus the largest need of any nested body; symbolic dimensions are evaluated
with the sizes known (1 for a name without a size).  The transformations themselves never allocate arrays.
"""

from __future__ import annotations

import functools
import os

from ..core import (
    Jaxpr,
    JaxprError,
    Loc,
    ProgramError,
    RefType,
    ShapedArray,
    eqn_subjaxprs,
)
from ..env import parse_size


def default_limit() -> int:
    """JAXPRTOOL_MAX_MEMORY, or half of the memory this process may use: the smallest of the
    machine's memory, the address-space limit (`ulimit -v`) and the cgroup's memory limit."""
    text = os.environ.get("JAXPRTOOL_MAX_MEMORY", "").strip()
    if text:
        return parse_size(text)
    caps = [_physical_memory(), _rlimit_as(), cgroup_limit()]
    return min(c for c in caps if c is not None) // 2


def _physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 16 * 2**30


def _rlimit_as() -> int | None:
    try:
        import resource
    except ImportError:  # not on this platform
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    return None if soft == resource.RLIM_INFINITY or soft <= 0 else soft


def cgroup_limit(root: str = "/sys/fs/cgroup", table: str = "/proc/self/cgroup") -> int | None:
    """The memory limit of this process's cgroup (v2 `memory.max`, v1
    `memory.limit_in_bytes`), or None when there is none or it cannot be read."""
    try:
        with open(table, encoding="utf-8", errors="replace") as f:
            lines = f.read(65536).splitlines()
    except OSError:
        lines = []
    candidates = []
    for line in lines:
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        path = path.strip().lstrip("/")
        if controllers == "":
            candidates += [os.path.join(root, path, "memory.max"), os.path.join(root, "memory.max")]
        elif "memory" in controllers.split(","):
            folder = os.path.join(root, "memory")
            candidates += [
                os.path.join(folder, path, "memory.limit_in_bytes"),
                os.path.join(folder, "memory.limit_in_bytes"),
            ]
    found = [n for n in map(_read_limit, candidates) if n is not None]
    return min(found) if found else None


def _read_limit(path: str) -> int | None:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            text = f.read(64).strip()
    except OSError:
        return None
    if not text.isdigit():
        return None  # "max": no limit
    n = int(text)
    return n if 0 < n < 2**62 else None  # v1 prints a huge number for "no limit"


def nbytes(t, dims: dict[str, int]) -> int:
    if isinstance(t, RefType):
        t = t.inner
    if not isinstance(t, ShapedArray):
        return 0
    n = 1
    for d in t.shape:
        n *= d if isinstance(d, int) else _size(str(d), dims)
    try:
        item = t.np_dtype.itemsize
    except KeyError:
        item = 4
    return n * max(item, 1)


def _size(dim: str, dims: dict[str, int]) -> int:
    return _size_of(dim, tuple(sorted(dims.items())))


@functools.lru_cache(maxsize=4096)
def _size_of(dim: str, dims: tuple) -> int:
    """A symbolic dimension's size with the given sizes; 1 when it cannot be evaluated yet
    (a name without a size: `values.check_dims` reports the others)."""
    from .values import eval_dim

    try:
        return max(eval_dim(dim.split("@")[0], dict(dims)), 1)
    except JaxprError:
        return 1


def memory_needed(jaxpr: Jaxpr, dims: dict[str, int]) -> tuple[int, int, Loc | None, object]:
    """(bytes needed, bytes of the largest value, its location, its type)."""
    memo: dict[int, tuple] = {}

    def need(j: Jaxpr) -> tuple[int, int, Loc | None, object]:
        if id(j) in memo:
            return memo[id(j)]
        total, big, loc, ty = 0, 0, None, None
        for v in (*j.constvars, *j.invars):
            b = nbytes(v.type, dims)
            total += b
            if b > big:
                big, loc, ty = b, None, v.type
        inner = 0
        for e in j.eqns:
            for o in e.outputs:
                b = nbytes(o.type, dims)
                total += b
                if b > big:
                    big, loc, ty = b, e.loc, o.type
            for sub in eqn_subjaxprs(e):
                t, b, sloc, sty = need(sub)
                inner = max(inner, t)
                if b > big:
                    big, loc, ty = b, sloc, sty
        memo[id(j)] = out = (total + inner, big, loc, ty)
        return out

    return need(jaxpr)


def check_memory(jaxpr: Jaxpr, dims: dict[str, int], limit: int | None = None) -> None:
    """Refuse, with the figures, a program that needs more memory than `limit`."""
    limit = default_limit() if limit is None else limit
    total, big, loc, ty = memory_needed(jaxpr, dims)
    if total > limit:
        where = " an input" if loc is None else " at this equation"
        message = (
            f"running this program needs about {human(total)} for its inputs and "
            f"intermediates (the largest, {ty}, is{where}: {human(big)}), over the limit of "
            f"{human(limit)} (set JAXPRTOOL_MAX_MEMORY to change it)"
        )
        if loc is None:  # located at the input binders of the program
            raise ProgramError(message, "inputs")
        raise JaxprError(message, loc)


def human(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if n < 1024 or unit == "PB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"
