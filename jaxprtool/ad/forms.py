"""The forms of a program that `jaxprtool memory --of` and `jaxprtool.memory` analyse: the
program itself, or what an AD command makes of it, with the step where its forward part
ends and its backward part begins."""

from __future__ import annotations

#: what `--of` can analyse: FILE itself, or the program an AD command makes of it
FORMS = ("program", "linearize", "vjp", "grad")


def transformed(jaxpr, of: str, argnums, remat=None, plans=None):
    """The program `of` names (one of `FORMS`), and its forward/backward boundary (a
    top-level equation index) where the form itself does not mark it; `remat`: the
    rematerialization asked for (`remat.Spec`), its plans appended to `plans`."""
    from . import api
    from .linearize import combine, find_linear_eqn

    if of == "program":
        return jaxpr, None
    if of == "linearize":
        lin = combine(*api.linearize_jaxpr(jaxpr, argnums, remat=remat, plans=plans))
        # without float outputs there is no linear call, and nothing is held for it
        return lin, None if find_linear_eqn(lin) is not None else len(lin.eqns)
    boundary: list[int] = []
    if of == "vjp":
        g = api.vjp_jaxpr(jaxpr, argnums, boundary=boundary, remat=remat, plans=plans)
        return g, boundary[0]
    g = api.grad_jaxpr(jaxpr, argnums or (0,), boundary=boundary, remat=remat, plans=plans)
    return g, boundary[0]
