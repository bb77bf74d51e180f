"""The one numbering of a program's constants: `trace --consts-out C.npz` writes them in this
order and `run --consts C.npz`, `compile`, `check-grad`, `explain` and the programs every AD
command writes read them in it (keys `const0, const1, ...`).

JAX 0.12 prints what a jitted function closes over as constvars of the nested jaxpr
(`jit[jaxpr={ lambda a:f32[8,2]; x:f32[2]. ... }]`), and the text cannot hold their values.
Every command reads a program through `number_constants`, which hoists them
(`passes/hoist_consts.py`): a call body's constants become operands of the call, a cond
branch's or loop body's operands of the cond or loop (its primitive's `hoist_consts` rule),
up to the top level.  The numbering is that of the hoisted program:

1. the program's own constvars;
2. the constvars of its nested jaxprs that hoisting made the program's, after its own:
   each equation in order, depth first (a call body's or loop body's own constants, then
   those of the equations inside it; a cond's branch by branch, a while loop's cond jaxpr
   before its body);
3. the constvars left in nested jaxprs that hoisting does not reach (a recorded custom
   rule's, a primitive without a `hoist_consts` rule): each jaxpr object once, equations in
   order, an equation's parameters sorted by name, depth first.

The AD commands (and check-grad, explain) read a program through `for_ad`, which also makes
step 3's constants the program's (a recorded custom rule's, a custom call's, shard_map's,
custom_vmap's or run_state's body's, a whole-array Pallas kernel's, a linear solve's: their
primitives' `lift_kept_consts` rules), after steps 1 and 2, in step 3's order
(a rule inlined into the program they write needs its constants as values of that program):
the programs they write keep all of them as their own constvars, in order, so they take the
whole archive of the program they were derived from.  No jax import.
"""

from __future__ import annotations

from collections.abc import Iterator

from .core import Eqn, Jaxpr, JaxprError, Var, eqn_subjaxprs, subjaxprs
from .frozen import Frozen, set_field


class Numbered(Frozen):
    """A program as every command reads it, and its constants in the archive's order."""

    __slots__ = ("program", "constvars", "sources")
    #: the hoisted program (the same object as the input when there was nothing to hoist)
    program: Jaxpr
    #: every constant, `const0, const1, ...`: the program's constvars, then step 3's
    constvars: list[Var]
    #: for each constvar hoisting created (by `id`), the constvar of the input's nested
    #: jaxpr whose value it carries (`trace --consts-out` reads the values by it)
    sources: dict[int, Var]

    def __init__(self, program: Jaxpr, constvars: list[Var], sources: dict[int, Var]) -> None:
        set_field(self, "program", program)
        set_field(self, "constvars", constvars)
        set_field(self, "sources", sources)


def number_constants(jaxpr: Jaxpr) -> Numbered:
    """The only source of the constants' order (the module docstring)."""
    from .passes.hoist_consts import hoist_with_sources

    program, sources = hoist_with_sources(jaxpr)
    every = list(program.constvars)
    for sub, _ in nested_with_consts(program):
        every.extend(sub.constvars)
    return Numbered(program, every, sources)


def for_ad(jaxpr: Jaxpr) -> Jaxpr:
    """The program as the AD commands read it: `number_constants`'s, with the constants left
    nested (step 3: its recorded custom rules', the bodies of its custom calls, shard_maps,
    custom_vmaps and run_states, its whole-array kernels', its linear solves')
    made constvars of the program after its own, in step 3's order, so that it takes the
    same archive as `run` reads, every constant its own.  Left as `number_constants` made it
    when some stay nested (`kept_by`: their numbering after the program's could not be
    kept): the AD commands then refuse a rule or body with constants."""
    from .passes.common import Subst
    from .passes.hoist_consts import has_nested_consts, lift_kept_consts

    if not has_nested_consts(jaxpr):
        return jaxpr  # (what the walks below return: one walk instead of three)
    numbered = number_constants(jaxpr)
    hoisted = numbered.program
    program, sources = lift_kept_consts(hoisted)
    if program is hoisted or nested_with_consts(program):
        return hoisted
    rank = {id(v): k for k, v in enumerate(numbered.constvars)}
    own = len(hoisted.constvars)
    first: dict[int, Var] = {}  # step 3 position -> the constvar that carries it
    rename = Subst()
    for v in program.constvars[own:]:
        k = rank.get(id(sources.get(id(v), v)))
        if k is None:
            return hoisted
        kept = first.setdefault(k, v)
        if kept is not v:  # a rule jaxpr shared by several equations: one constant
            rename.set(v, kept)
    if len(first) != len(numbered.constvars) - own:
        return hoisted
    return program.replace(
        constvars=tuple(program.constvars[:own]) + tuple(first[k] for k in sorted(first)),
        eqns=[rename.eqn(e) for e in program.eqns],
    )


def kept_by(jaxpr: Jaxpr) -> list[Eqn]:
    """The equations whose nested jaxprs keep constants that no `lift_kept_consts` rule
    makes the program's (a primitive without one, or whose rule cannot: a Pallas kernel
    with a grid), in step 3's order: where `for_ad` leaves every constant nested."""
    from .passes.hoist_consts import lift_kept_consts

    program, _ = lift_kept_consts(number_constants(jaxpr).program)
    return [e for _, e in nested_with_consts(program)]


def refuse_kept_consts(read, jaxpr) -> None:
    """Refuse a program (`read`; `jaxpr`: its `for_ad` form) whose nested jaxprs keep
    constants the AD commands cannot make the program's."""
    kept = kept_by(read) if nested_with_consts(jaxpr) else []  # (asked only where some stay)
    if kept:
        raise JaxprError(
            f"explain cannot use the constants that '{kept[0].prim}' keeps in its nested "
            "jaxprs: the AD commands cannot make them the program's (docs/LIMITS.md, Known limits); "
            "run takes them with --consts",
            kept[0].loc,
        )


def nested_with_consts(jaxpr: Jaxpr) -> list[tuple[Jaxpr, Eqn]]:
    """The nested jaxprs with constants that hoisting leaves in place (step 3), each once,
    with the first equation using it (call bodies not yet hoisted are skipped: the
    program is numbered only once hoisted)."""
    from .passes.hoist_consts import hoistable_body

    found: list[tuple[Jaxpr, Eqn]] = []
    _nested_with_consts(jaxpr, hoistable_body, set(), found)
    return found


def _nested_with_consts(j: Jaxpr, hoistable_body, seen: set[int], found: list) -> None:
    """`nested_with_consts`' walk, a function of its own: a nested one calling itself is a
    cycle holding `found`, its programs freed only by the collector (never, in the program,
    which freezes them: `core.FREEZE_AFTER_PAUSE`).  An equation without a nested jaxpr
    (most; `eqn_subjaxprs` remembers it) is passed over before its record is looked up."""
    for e in j.eqns:
        if not eqn_subjaxprs(e):
            continue
        call_body = hoistable_body(e)
        for _key, sub in _param_jaxprs(e):
            if id(sub) in seen:
                continue
            seen.add(id(sub))
            if sub.constvars and sub is not call_body:
                found.append((sub, e))
            _nested_with_consts(sub, hoistable_body, seen, found)


def _param_jaxprs(e: Eqn) -> Iterator[tuple[str, Jaxpr]]:
    """The jaxprs in an equation's parameters, parameters sorted by name."""
    for k in sorted(e.params):
        for sub in subjaxprs(e.params[k]):
            yield k, sub
