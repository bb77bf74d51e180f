"""The one numbering of a program's constants: `run --consts C.npz` reads them in this
order, `trace --consts-out C.npz` writes them in it (keys `const0, const1, ...`).

JAX 0.12 prints what a jitted function closes over as constvars of the nested jaxpr
(`jit[jaxpr={ lambda a:f32[8,2]; x:f32[2]. ... }]`), and the text cannot hold their values.
Every command that runs or differentiates a program reads it through
`passes.hoist_consts.hoist_consts` first, and the numbering is that of the hoisted program:

1. the program's own constvars;
2. the constvars of its call bodies (jit, pjit, closed_call, remat, ...), which hoisting
   made constvars of the program after its own: each call in equation order, depth first
   (a body's own, then those of the calls inside it);
3. the constvars of the nested jaxprs hoisting leaves them in (cond branches, loop
   bodies, recorded custom rules; a call body inside one has had its constants moved to
   it, after its own): each jaxpr object once, in the order `nested_with_consts` walks them
   (equations in order, an equation's parameters sorted by name, depth first).

The functions here take the hoisted program and number only step 3 themselves; a call body
that still has constvars (a program not read through `hoist_consts`) is refused.  numpy
only at module level (no jax).
"""

from __future__ import annotations

from collections.abc import Iterator

from ..core import Eqn, Jaxpr, JaxprError, Var, subjaxprs


def nested_with_consts(jaxpr: Jaxpr) -> list[tuple[Jaxpr, Eqn]]:
    """The nested jaxprs other than call bodies that have constants (step 3), each once,
    with the first equation using it."""
    from ..passes.hoist_consts import hoistable_body

    seen: set[int] = set()
    found: list[tuple[Jaxpr, Eqn]] = []

    def walk(j: Jaxpr) -> None:
        for e in j.eqns:
            call_body = hoistable_body(e)
            for _key, sub in param_jaxprs(e):
                if id(sub) in seen:
                    continue
                seen.add(id(sub))
                if sub.constvars and sub is not call_body:
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
    """Every constvar of the hoisted program `jaxpr`, in the `--consts` order."""
    require_hoisted(jaxpr)
    out = list(jaxpr.constvars)
    for sub, _ in nested_with_consts(jaxpr):
        out.extend(sub.constvars)
    return out


def split(jaxpr: Jaxpr, consts: list) -> tuple[list, dict[int, list]]:
    """`consts` (the top-level ones, or all of them in `all_constvars` order) as the
    top-level values and the values of each nested jaxpr of step 3 by `id`."""
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
    """Refuse a program with a call body that still has constvars: its constants are
    numbered only once `hoist_consts` has made them constvars of the enclosing jaxpr."""
    e = _unhoisted_call(jaxpr)
    if e is not None:
        raise JaxprError(
            f"internal: the constants of the body of '{e.prim}' are numbered only after "
            "passes.hoist_consts.hoist_consts has made them the program's: hoist first",
            e.loc,
        )


def _unhoisted_call(jaxpr: Jaxpr) -> Eqn | None:
    from ..core import all_eqns
    from ..passes.hoist_consts import hoistable_body

    return next((e for e in all_eqns(jaxpr) if hoistable_body(e) is not None), None)


def missing_message(j: Jaxpr, eqn: Eqn, root: Jaxpr | None, namer) -> str:
    """Which constants of `j` (used by `eqn`) the text lacks, and how to supply them."""
    names = ", ".join(f"{namer(v)}:{v.type}" for v in j.constvars)
    keys = ""
    if root is not None and _unhoisted_call(root) is None:
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
