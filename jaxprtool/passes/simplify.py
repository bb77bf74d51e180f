"""Algebraic identities that AD leaves behind.

Every rule keeps the value, dtype and shape exactly, for every input (NaN,
infinities and signed zeros included), except for the one freedom of the
issue: the sign of a zero produced by adding AD's zeros (`add_any`).  A result
is replaced only by an atom of exactly the same type (weak_type included).

| rule | condition |
|---|---|
| `mul x 1`, `mul 1 x`, `div x 1` -> x | any dtype (x*1 == x bit for bit) |
| `add x 0`, `add 0 x`, `sub x 0` -> x | integers |
| `add x -0.0`, `add -0.0 x`, `sub x +0.0` -> x | floats (exact: -0.0 is the additive identity) |
| `add_any x z`, `add_any z x` -> x | z a zero (literal or `broadcast_in_dim` of one): AD's zeros |
| `neg (neg x)` -> x | |
| `convert_element_type x` -> x | same dtype, same weak_type, no sharding |
| `broadcast_in_dim`, `reshape`, `transpose`, `squeeze`, `reduce_*` that change nothing -> x | |
| `copy x` -> x | |
| `select_n p c0 c1 ...` -> c_p | p a literal |
| `select_n p c c ...` -> c | every case the same atom |

Each rule is the `simplify` field of its primitive's record, in the primitive's family
module: `rule(eqn, ctx) -> atom | None` (`Context` below; the helpers `kind`, `is_one`, ...
are shared).  `mul x 0` -> 0 is not a rule (NaN * 0 is NaN, inf * 0 is NaN).  The equations
left unused are removed by `dce`.
"""

from __future__ import annotations

import math

from ..core import Jaxpr, Literal, ShapedArray, Var
from ..params import as_int_tuple
from ..record import prim
from ..text.twin import twin
from .base import Pass
from .common import EqnRewrite, has_subjaxprs, recursive_pass, same_type, unseen_eqns


def simplify(jaxpr: Jaxpr) -> Jaxpr:
    """Apply the algebraic identities above (then run dce to drop what became dead)."""
    return recursive_pass(jaxpr, _simplify)


SIMPLIFY = Pass(
    name="simplify",
    help="Exact algebraic identities: mul x 1, neg (neg x), ...",
    doc="""Algebraic identities that keep every value exactly: mul x 1, add_any x zeros,
    neg (neg x), no-op converts/broadcasts/reshapes/transposes, select_n with a literal
    predicate.  Run dce afterwards (or canonicalize) to drop what became dead.

    \b
    Example:
      jaxprtool simplify f.jaxpr | jaxprtool dce
    """,
    fn=simplify,
)


def _simplify(jaxpr: Jaxpr, go) -> Jaxpr:
    """(Compiled, the loop keeps the equations whose rule answers None itself:
    `_twin.simplify_rules_sweep`.)"""
    rw = EqnRewrite(jaxpr, go)
    ctx = Context()
    producers, made = ctx.producers, ctx.made
    rules = ctx.rules
    keep = rw.keep
    tw = twin()
    consts = ctx.consts
    state = (rules, producers, ctx, made, same_type, consts)
    for e in rw if tw is None else rw.handed_back(tw.simplify_rules_sweep, *state):
        outs = e.outputs
        p = e.prim
        rule, fills, needs_constant = rules.get(p) or ctx.rules_of(p)
        if needs_constant:  # (it would answer None without a constant operand)
            for a in e.inputs:
                if a.__class__ is Literal or a in consts:
                    break
            else:
                rule = None
        if len(outs) == 1:
            r = rule(e, ctx) if rule is not None else None
            if r is not None and same_type(r, outs[0]):
                rw.drop(outs, (r,))
                continue
            producers[outs[0]] = e
            if fills is not None:
                made(e, fills)
        else:
            for o in outs:
                producers[o] = e
            if fills is not None:
                made(e, fills)
        keep(e)
    return rw.result()


def simplify_settled(last: Jaxpr, program: Jaxpr, made: list | None = None) -> bool:
    """Whether `simplify(program)` is `program`, where `last` is a program simplify returned
    and `program` differs from it by equations removed or replaced (`canonicalize`'s next
    round).  A rule sees its equation and the equations that make its operands (`Context`),
    and simplify is idempotent: an equation it kept, whose operands' producers are the ones
    it saw, is kept again.  So only the equations made anew and those that read their
    results are asked (one with nested jaxprs made anew: not settled); `made`:
    `unseen_eqns(last, program)`, if the caller has it."""
    if program is last:
        return True
    if made is None:
        made = unseen_eqns(last, program)
    if not made:
        return True
    if any(has_subjaxprs(e) for e in made):
        return False
    # (sets of the atoms themselves, not of their ids: Vars hash by identity, literals
    # remember their hash, and a tuple is looked up without a map over it)
    anew = set(made)  # (equations hash and compare by identity)
    fresh: set = set()  # the results of the equations made anew
    ask = []
    for e in program.eqns:
        if e in anew:
            fresh.update(e.outputs)
            ask.append(e)
        elif fresh and not fresh.isdisjoint(e.inputs):
            ask.append(e)
    ctx = Context()
    needed = {a for e in ask for a in e.inputs}
    for e in program.eqns:
        if not needed.isdisjoint(e.outputs):
            for o in e.outputs:
                ctx.producers[o] = e
            fills = ctx.rules_of(e.prim)[1]
            if fills is not None:
                ctx.made(e, fills)
    for e in ask:
        outs = e.outputs
        rule = ctx.rules_of(e.prim)[0] if len(outs) == 1 else None
        r = rule(e, ctx) if rule is not None else None
        if r is not None and same_type(r, outs[0]):
            return False
    return True


class Context:
    """What a primitive's simplification rule may ask about the program so far: the
    equations that make its equation's operands, no further (`simplify_settled` relies on
    it)."""

    def __init__(self):
        #: result -> the equation that makes it (keyed by the Vars themselves, which hash
        #: by identity: no int made per equation, as ids would be)
        self.producers: dict[Var, object] = {}
        #: result -> the scalar its producer fills it with (its `fills_with` rule), worked
        #: out when the producer is kept
        self.consts: dict[Var, object] = {}
        #: primitive -> (its simplify rule, its fills_with rule, whether the rule needs a
        #: constant operand): asked once per pass
        self.rules: dict[str, tuple] = {}

    def rules_of(self, name: str) -> tuple:
        got = self.rules.get(name)
        if got is None:
            rec = prim(name)
            got = self.rules[name] = (rec.simplify, rec.fills_with, rec.simplify_needs_constant)
        return got

    def made(self, e, fills) -> None:
        """`e` is kept and its primitive has the `fills_with` rule `fills`: remember the
        literal it fills each result of its dtype with."""
        x = fills(e)
        if isinstance(x, Literal):
            for o in e.outputs:
                if dtype_of(x) == dtype_of(o):
                    self.consts[o] = x.value

    def producer(self, a):
        """The equation that computed the Var `a` (None for inputs and literals)."""
        return self.producers.get(a) if isinstance(a, Var) else None

    def scalar_const(self, a):
        """The scalar value an atom holds everywhere: a literal, or a result that the
        producing primitive's `fills_with` rule says is filled with a literal."""
        if isinstance(a, Literal):
            return a.value
        return self.consts.get(a)


def dtype_of(a):
    return a.type.dtype if isinstance(a.type, ShapedArray) else None


def kind(a) -> str:
    """'b', 'i', 'u', 'f', 'c' or '?' for the dtype of an atom."""
    d = dtype_of(a)
    if d is None:
        return "?"
    k = _KIND_OF_DTYPE.get(d)
    if k is None:
        k = _KIND_OF_DTYPE[d] = _dtype_kind(d)
    return k


_KIND_OF_DTYPE: dict[str, str] = {}


def _dtype_kind(d: str) -> str:
    if d == "bool":
        return "b"
    if d.startswith("i"):
        return "i"
    if d.startswith("u"):
        return "u"
    if d.startswith("c"):
        return "c"
    if d.startswith(("f", "bf")) and d != "float0":
        return "f"
    return "?"


def is_one(v) -> bool:
    return v is not None and not isinstance(v, (bool, str)) and v == 1


def is_zero(v) -> bool:
    return v is not None and not isinstance(v, (bool, str)) and v == 0


def is_neg_zero(v) -> bool:
    return isinstance(v, float) and v == 0.0 and math.copysign(1.0, v) < 0


def is_pos_zero(v) -> bool:
    return (
        isinstance(v, (float, int))
        and not isinstance(v, bool)
        and v == 0
        and math.copysign(1.0, v) > 0
    )


def identity_perm(p, n) -> bool:
    """`p` is (0, 1, ..., n-1)."""
    try:
        return len(p) == n and as_int_tuple(p) == tuple(range(n))
    except (TypeError, ValueError):
        return False
