"""The constants of a program being run, in the one numbering (`jaxprtool/consts_order.py`):
`run --consts` and check-grad give every constant or only the program's own; the values of
those that stay in nested jaxprs (a recorded custom rule's) are handed to the evaluator by
jaxpr.  numpy only at module level (no jax).
"""

from __future__ import annotations

from ..consts_order import nested_with_consts, number_constants
from ..core import Eqn, Jaxpr, JaxprError, Var


def all_constvars(jaxpr: Jaxpr) -> list[Var]:
    """Every constvar of `jaxpr`, a program as `number_constants` made it, in its order."""
    require_hoisted(jaxpr)
    return number_constants(jaxpr).constvars


def split(jaxpr: Jaxpr, consts: list) -> tuple[list, dict[int, list]]:
    """`consts` (the top-level ones, or all of them in `all_constvars` order) as the
    top-level values and the values of each nested jaxpr hoisting left (step 3 of
    `consts_order.py`) by `id`."""
    top = len(jaxpr.constvars)
    nested: dict[int, list] = {}
    if len(consts) == top:
        return list(consts), nested
    require_hoisted(jaxpr)
    rest = list(consts[top:])
    for sub, _ in nested_with_consts(jaxpr):
        n = len(sub.constvars)
        nested[id(sub)], rest = rest[:n], rest[n:]
    return list(consts[:top]), nested


def require_hoisted(jaxpr: Jaxpr) -> None:
    """Refuse a program with a nested jaxpr whose constvars hoisting would move: its
    constants are numbered only once `number_constants` has made them the program's."""
    e = _unhoisted(jaxpr)
    if e is not None:
        raise JaxprError(
            f"internal: the constants of the jaxpr nested in '{e.prim}' are numbered only "
            "after consts_order.number_constants has made them the program's: hoist first",
            e.loc,
        )


def _unhoisted(jaxpr: Jaxpr) -> Eqn | None:
    from ..core import all_eqns
    from ..passes.hoist_consts import hoistable

    return next((e for e in all_eqns(jaxpr) if hoistable(e)), None)


def missing_message(j: Jaxpr, eqn: Eqn, root: Jaxpr | None, namer) -> str:
    """Which constants of `j` (used by `eqn`) the text lacks, and how to supply them."""
    names = ", ".join(f"{namer(v)}:{v.type}" for v in j.constvars)
    keys = ""
    if root is not None and _unhoisted(root) is None:
        first = len(root.constvars)
        for sub, _ in nested_with_consts(root):
            if sub is j:
                last = first + len(j.constvars) - 1
                keys = f" (keys const{first}..const{last} of a --consts archive)"
                if first == last:
                    keys = f" (key const{first} of a --consts archive)"
                break
            first += len(sub.constvars)
    return (
        f"'{eqn.prim}': its nested jaxpr has {len(j.constvars)} constant"
        f"{'s' if len(j.constvars) != 1 else ''} whose values the text does not contain: "
        f"{names}{keys}; save them when printing the program with `jaxprtool trace "
        "MODULE:FUNCTION --consts-out C.npz` and pass `--consts C.npz` (or --random SEED)"
    )


def check_count(jaxpr: Jaxpr, n: int) -> None:
    top, every = len(jaxpr.constvars), len(all_constvars(jaxpr))
    if n not in (top, every):
        want = f"{top}" if top == every else f"{top} (the program's own) or {every} (with nested)"
        raise JaxprError(f"--consts: expected {want} constants (const0, const1, ...), got {n}")
