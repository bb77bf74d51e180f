"""Memory a program needs, from its types, before anything is allocated.

`run`, `check-grad` and `explain` refuse a program whose inputs and intermediates would
need more than the limit (`JAXPRTOOL_MAX_MEMORY`, bytes with an optional K/M/G/T suffix;
default half of the machine's memory), with the figure and the largest value's location
in the message.  The estimate adds up every top-level input and result (an upper bound on
the live set) plus the largest need of any nested body; symbolic dimensions whose size is
not given count as 1.  The transformations themselves never allocate arrays.
"""

from __future__ import annotations

import os

from ..core import Jaxpr, JaxprError, Loc, RefType, ShapedArray, eqn_subjaxprs

_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def default_limit() -> int:
    text = os.environ.get("JAXPRTOOL_MAX_MEMORY", "").strip().upper().rstrip("B")
    if text:
        unit = text[-1] if text[-1] in _UNITS else ""
        try:
            return int(float(text[: len(text) - len(unit)]) * _UNITS[unit])
        except ValueError:
            raise JaxprError(
                f"JAXPRTOOL_MAX_MEMORY='{os.environ['JAXPRTOOL_MAX_MEMORY']}' is not a size "
                "such as 8G"
            ) from None
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
    except (ValueError, OSError, AttributeError):
        return 8 * 2**30


def nbytes(t, dims: dict[str, int]) -> int:
    if isinstance(t, RefType):
        t = t.inner
    if not isinstance(t, ShapedArray):
        return 0
    n = 1
    for d in t.shape:
        n *= d if isinstance(d, int) else max(int(dims.get(str(d).strip(), 1)), 1)
    try:
        item = t.np_dtype.itemsize
    except KeyError:
        item = 4
    return n * max(item, 1)


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
        where = "" if loc is None else " at this equation"
        raise JaxprError(
            f"running this program needs about {human(total)} for its inputs and "
            f"intermediates (the largest, {ty}, is {human(big)}{where}), over the limit of "
            f"{human(limit)} (set JAXPRTOOL_MAX_MEMORY to change it)",
            loc,
        )


def human(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if n < 1024 or unit == "PB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"
