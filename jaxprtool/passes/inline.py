"""Inline nested call bodies (jit, pjit, closed_call, core_call) into their caller.

The body's equations are copied with fresh variables (new `Var` objects, the
old names kept only as hints); its binders are replaced by the call's
operands and the call's results by the body's results.  Bodies with constvars
(JAX 0.12 closed-over constants, whose values the text does not contain) are
left in place.  `names` restricts inlining to calls whose `name=` parameter is
in the set.  Bodies are inlined innermost first, so nested calls disappear too.
"""

from __future__ import annotations

from ..core import Eqn, Jaxpr, Literal, Var
from ..expansion import refuse_large
from ..record import prim
from .base import Pass, PassOption
from .common import EqnRewrite, recursive_pass


def inline(jaxpr: Jaxpr, names: set[str] | None = None) -> Jaxpr:
    """Inline every jit/pjit/closed_call body (or only those named in `names`)."""
    refuse_large(jaxpr)
    return recursive_pass(jaxpr, lambda j, go: _inline(j, go, names))


def _inline_pass(jaxpr: Jaxpr, names: tuple[str, ...] | None = None) -> Jaxpr:
    # an empty list means every call, as `--names ''` always did
    return inline(jaxpr, set(names) if names else None)


INLINE = Pass(
    name="inline",
    help="Inline jit/pjit/closed_call/core_call bodies.",
    doc="""Inline nested jit/pjit/closed_call bodies (all of them, or only --names NAME,...).

    \b
    Example:
      jaxprtool inline f.jaxpr --names relu,softmax
    """,
    fn=_inline_pass,
    options=(
        PassOption(
            "names",
            list[str],
            None,
            "Inline only calls with these name= parameters.",
            metavar="NAME,...",
        ),
    ),
)


def _call_name(e: Eqn) -> str | None:
    n = e.params.get("name")
    return None if n is None else str(n)


def _inline(jaxpr: Jaxpr, go, names) -> Jaxpr:
    rw = EqnRewrite(jaxpr, go)
    for e in rw:
        inputs = e.inputs
        rec = prim(e.prim)
        body = e.params.get(rec.call_body) if rec.inlinable else None
        if (
            isinstance(body, Jaxpr)
            and not body.constvars
            and len(body.invars) == len(inputs)
            and len(body.outvars) == len(e.outputs)
            and (names is None or _call_name(e) in names)
            and all(v.type == a.type for v, a in zip(body.invars, inputs))
        ):
            rw.drop(e.outputs, copy_body(body, inputs, rw.eqns, e.loc))
            continue
        rw.keep(e)
    return rw.result()


def copy_body(body: Jaxpr, args, out_eqns: list[Eqn], loc=None) -> list:
    """Append a copy of body's equations (fresh variables) applied to args; return its results."""
    env: dict[int, object] = {id(v): a for v, a in zip(body.invars, args)}

    def read(a):
        if isinstance(a, Literal):
            return a
        return env.get(id(a), a)

    for e in body.eqns:
        outs = []
        for o in e.outputs:
            nv = Var(o.type, o.hint)
            env[id(o)] = nv
            outs.append(nv)
        out_eqns.append(
            Eqn(e.prim, tuple(read(a) for a in e.inputs), tuple(outs), e.params, e.loc or loc)
        )
    return [read(a) for a in body.outvars]
