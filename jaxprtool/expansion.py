"""The size of a program once its calls are inlined, and the refusal of one too large.

A text can define a jaxpr once (`let f = { lambda ... } in`) and call it from several places.
Walks that keep it shared (the printer, the checker, `jvp`) cost what the text costs; walks
that copy a body at each call (inlining, linearization and transposition, the memory walk,
tracing through JAX) cost the expanded program, which a chain of shared jaxprs each calling
the previous one twice makes exponential in the length of the text.  Those walks first ask
`refuse_large(jaxpr)`: the expanded size is counted once per jaxpr (memoised by identity,
linear in the text), and a program over `LIMIT` equations is refused at the equation that
calls the shared jaxpr making it so, naming it and the counts.
"""

from __future__ import annotations

from collections import Counter, OrderedDict

from .core import Eqn, Jaxpr, JaxprError, OverLimit, eqn_subjaxprs

#: the default of `LIMIT`
DEFAULT_LIMIT = 300_000
#: the most equations a program may expand to (the global `--max-equations`)
LIMIT = DEFAULT_LIMIT

#: the shared jaxprs the parser read: id -> (jaxpr, name); the jaxpr is held so its id stays
#: unique, and only the latest `_KEPT` are kept
_SHARED: OrderedDict[int, tuple[Jaxpr, str]] = OrderedDict()
_KEPT = 4096


def remember_shared(named: dict[int, tuple[Jaxpr, str]]) -> None:
    """Record the names of the shared jaxprs of a text just read (by the parser)."""
    _SHARED.update(named)
    while len(_SHARED) > _KEPT:
        _SHARED.popitem(last=False)


def expanded_sizes(jaxpr: Jaxpr) -> tuple[dict[int, int], int]:
    """(id(j) -> the equations of `j` with every nested jaxpr copied in, for `jaxpr` and each
    jaxpr inside it; the equations written, each jaxpr counted once)."""
    sizes: dict[int, int] = {}
    written = 0

    def size(j: Jaxpr) -> int:
        nonlocal written
        n = sizes.get(id(j))
        if n is None:
            written += len(j.eqns)
            # (`e.no_subjaxprs`: `eqn_subjaxprs`' first answer, without the call)
            n = sizes[id(j)] = len(j.eqns) + sum(
                size(sub) for e in j.eqns if not e.no_subjaxprs for sub in eqn_subjaxprs(e)
            )
        return n

    size(jaxpr)
    return sizes, written


def refuse_large(jaxpr: Jaxpr) -> None:
    """Raise a located JaxprError when copying nested jaxprs makes `jaxpr` more than `LIMIT`
    equations (a program written out at that size is not refused)."""
    sizes, written = expanded_sizes(jaxpr)
    if sizes[id(jaxpr)] > max(LIMIT, written):
        raise _refusal(jaxpr, sizes)


def _refusal(top: Jaxpr, sizes: dict[int, int]) -> JaxprError:
    """The error at the deepest jaxpr over the limit, located at its first use of the nested
    jaxpr that weighs most in it (uses times size)."""
    j = top
    while True:
        over = [
            sub
            for e in j.eqns
            for sub in eqn_subjaxprs(e)
            if sizes[id(sub)] > max(LIMIT, len(sub.eqns))
        ]
        if not over:
            break
        j = over[0]
    first: dict[int, tuple[Eqn, Jaxpr]] = {}
    uses: Counter[int] = Counter()
    for e in j.eqns:
        for sub in eqn_subjaxprs(e):
            first.setdefault(id(sub), (e, sub))
            uses[id(sub)] += 1
    k = max(uses, key=lambda k: uses[k] * sizes[k])
    eqn, heaviest = first[k]
    whole = "this program" if j is top else _describe(j, "this jaxpr")
    return OverLimit(
        f"{whole} expands to {sizes[id(j)]:,} equations once its calls are inlined, over the "
        f"limit of {LIMIT:,}: it uses {_describe(heaviest, 'a nested jaxpr')} {uses[k]} "
        f"time{'s' if uses[k] > 1 else ''}, of {sizes[k]:,} equations each "
        "(--max-equations N raises the limit)",
        eqn.loc,
    )


def _describe(j: Jaxpr, otherwise: str) -> str:
    kept = _SHARED.get(id(j))
    return f"shared jaxpr '{kept[1]}'" if kept is not None and kept[0] is j else otherwise
