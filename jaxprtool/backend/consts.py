"""Constants of nested jaxprs: the values a printout names but does not contain.

JAX 0.12 prints a nested jaxpr that closed over arrays with constants of its own
(`let f = { lambda a:f32[8,2] b:f32[8]; x:f32[2]. ... }`, used by `jit[jaxpr=f]`), and
the text cannot hold their values.  They are numbered after the program's own constants:
`const0, const1, ...` are the top-level constvars, then every nested jaxpr that has
constants, each jaxpr object once, in the order `nested_with_consts` walks them (equations
in order, an equation's parameters sorted by name, depth first), its constvars in order.
`jaxprtool trace --consts-out C.npz` writes them all with these keys; `run --consts C.npz`
reads them back.  numpy only at module level (no jax).
"""

from __future__ import annotations

from collections.abc import Iterator

from ..core import Eqn, Jaxpr, JaxprError, Var, subjaxprs


def nested_with_consts(jaxpr: Jaxpr) -> list[tuple[Jaxpr, Eqn]]:
    """The nested jaxprs that have constants, each once, with the first equation using it."""
    seen: set[int] = set()
    found: list[tuple[Jaxpr, Eqn]] = []

    def walk(j: Jaxpr) -> None:
        for e in j.eqns:
            for _key, sub in param_jaxprs(e):
                if id(sub) in seen:
                    continue
                seen.add(id(sub))
                if sub.constvars:
                    found.append((sub, e))
                walk(sub)

    walk(jaxpr)
    return found


def param_jaxprs(e: Eqn) -> Iterator[tuple[str, Jaxpr]]:
    """The jaxprs in an equation's parameters, parameters sorted by name."""
    for k in sorted(e.params):
        for sub in subjaxprs(e.params[k]):
            yield k, sub


def all_constvars(jaxpr: Jaxpr) -> list[Var]:
    """The top-level constvars, then those of the nested jaxprs (the `--consts` order)."""
    out = list(jaxpr.constvars)
    for sub, _ in nested_with_consts(jaxpr):
        out.extend(sub.constvars)
    return out


def split(jaxpr: Jaxpr, consts: list) -> tuple[list, dict[int, list]]:
    """`consts` (the top-level ones, or all of them in `all_constvars` order) as the
    top-level values and the values of each nested jaxpr by `id`."""
    top = len(jaxpr.constvars)
    nested: dict[int, list] = {}
    if len(consts) == top:
        return list(consts), nested
    rest = list(consts[top:])
    for sub, _ in nested_with_consts(jaxpr):
        n = len(sub.constvars)
        nested[id(sub)], rest = rest[:n], rest[n:]
    return list(consts[:top]), nested


def missing_message(j: Jaxpr, eqn: Eqn, root: Jaxpr | None, namer) -> str:
    """Which constants of `j` (used by `eqn`) the text lacks, and how to supply them."""
    names = ", ".join(f"{namer(v)}:{v.type}" for v in j.constvars)
    keys = ""
    if root is not None:
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
