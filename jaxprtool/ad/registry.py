"""Rule registries and the helpers that fill them (mirrors `jax/_src/interpreters/ad.py`).

Each registry is a view of one field of the primitive records (`jaxprtool.record`): the
helpers fill `prim(name).jvp`, `.transpose`, `.fancy_transpose`, `.jvp_kind`.

- `primitive_jvps[name] = rule(primals, tangents, **params) -> (primal_outs, tangent_outs)`
- `primitive_transposes[name] = rule(cts, *args, **params) -> list[Atom | Zero | None]`
- `fancy_transposes[name] = rule(cts, *args, accums, **params) -> None`
- `rule_kind[name]`: which helper registered the JVP rule (None: none, the rule was assigned
  to `primitive_jvps` directly); the walk reports `jvp_kind_of` to `explain`.
- `custom_jvps[name]`, `custom_vjps[name]`: plugin rules for `custom_jvp_call jvp=NAME` and
  `custom_vjp_call fwd=NAME bwd=NAME` (see docs/PLUGINS.md).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

from ..core import JaxprError, ShapedArray
from ..lazy import LazyPattern
from ..record import FieldView, ensure_loaded, prim
from ..shapes.util import dims_eq
from . import ops
from .builder import current
from .invocation import (  # noqa: F401  (their former home: callers import them here)
    CUSTOM_RULE_POLICIES,
    CustomRuleFallbacks,
    custom_rule_fallbacks,
    custom_rule_policy,
    set_custom_rule_policy,
)
from .ops import add_tangents, instantiate
from .zeros import UndefinedPrimal, Zero, is_undefined_primal, is_zero, tangent_type

__all__ = [
    "primitive_jvps",
    "primitive_transposes",
    "fancy_transposes",
    "rule_kind",
    "custom_jvps",
    "custom_vjps",
    "defjvp",
    "defjvp2",
    "deflinear",
    "deflinear2",
    "defbilinear",
    "defjvp_zero",
    "Accumulator",
    "UndefinedPrimal",
    "is_undefined_primal",
    "Zero",
    "is_zero",
]

#: views of the primitive records' fields (`jaxprtool.record`), filled by the helpers below
primitive_jvps = FieldView("jvp")
primitive_transposes = FieldView("transpose")
fancy_transposes = FieldView("fancy_transpose")
rule_kind = FieldView("jvp_kind")


def jvp_kind_of(rec) -> str:
    """Which helper registered the JVP rule of the record `rec` (`rule_kind`), or
    "primitive_jvps" for a rule assigned to that registry directly: what the walk reports
    to its observers (`observe`: `jvp_step`, `step_notes`)."""
    return rec.jvp_kind or "primitive_jvps"


#: plugin rules: custom_jvps[jvp_name] = fn(primals, tangents) -> (outs, tangent_outs)
custom_jvps: dict[str, Callable] = {}
#: plugin rules: custom_vjps[fwd_name or bwd_name] = (fwd, bwd)
custom_vjps: dict[str, tuple[Callable, Callable]] = {}
# ---------------------------------------------------------------- custom rules the text lacks

#: parameters `jaxprtool trace` adds to custom calls: the traced rules as jaxprs
#: (`backend/custom_rules.py` documents their calling conventions)
JVP_RULE_PARAM = "jaxprtool_jvp"
FWD_RULE_PARAM = "jaxprtool_fwd"
BWD_RULE_PARAM = "jaxprtool_bwd"
#: a `symbolic_zeros=True` custom_vjp's operands the recorded fwd rule took as perturbed
PERTURBED_RULE_PARAM = "jaxprtool_perturbed"
#: how many leading operands of a custom call carry the constants its recorded rules and its
#: body closed over (`lift_kept_consts`: each takes its own as leading inputs, ignores the others)
RULE_CONSTS_PARAM = "jaxprtool_rule_consts"
EXTENSION_PARAMS = (
    JVP_RULE_PARAM,
    FWD_RULE_PARAM,
    BWD_RULE_PARAM,
    PERTURBED_RULE_PARAM,
    RULE_CONSTS_PARAM,
)


class MissingCustomRule(JaxprError):
    """A custom rule the text lacks, refused by the policy in force."""


#: JAX's library functions with custom JVP rules (relu, logaddexp, ...), by function name:
#: entries with `.matches(params, body)` and `.tangent(primals, tangents, ans, body)`, filled by
#: `jaxprtool/families/jax_library.py` and `equinox.py`
library_jvps: dict[str, list] = {}


def library_rules_key(name: str) -> str:
    """The family index's entry (`families/index.py`; not a primitive) for the family modules
    that register library rules of the function `name`: `find_library_jvp` loads them when
    first asked, so that reading and printing a `custom_jvp_call` (`fmt`) imports none, and
    differentiating `jax.nn.softmax` does not import Equinox's family."""
    return f"<library rules of {name}>"


def register_library_jvp(rule) -> None:
    library_jvps.setdefault(rule.name, []).append(rule)


def library_rule_counts() -> dict[str, int]:
    """How many library rules are registered, by function name (`families.build_index`
    charges each family module with the names its import registered rules of)."""
    return {name: len(rules) for name, rules in library_jvps.items()}


def find_library_jvp(name: str | None, params: dict, body):
    """The library rule for a `custom_jvp_call` of function `name` whose body matches, or None."""
    name = name or ""
    ensure_loaded(library_rules_key(name))
    for rule in library_jvps.get(name, ()):
        if rule.matches(params, body):
            return rule
    return None


class Accumulator:
    """The cotangent being accumulated for one linear value (used by fancy transposes)."""

    def __init__(self, type, owner=None):
        self.type = type
        self.value = Zero(tangent_type(type))
        #: (equation, rule) whose transpose fills it: named when a cotangent has the wrong type
        self.owner = owner

    def add(self, value) -> None:
        if value is None or is_zero(value):
            return
        if self.owner is not None:
            eqn, rule = self.owner
            check_rule_type(
                "transpose", eqn, rule, "cotangent", value.type, tangent_type(self.type)
            )
        self.value = add_tangents(self.value, value)

    def get(self):
        return self.value

    def set(self, value) -> None:
        self.value = value


# ---------------------------------------------------------------- helpers


def rebind_primal(name: str, primals, params):
    """Bind `name` on the primals again (result types copied from the equation being differentiated)."""
    b = current()
    eqn = b.cur_eqn
    out_types = None
    if (
        eqn is not None
        and eqn.prim == name
        and [x.type for x in primals] == [x.type for x in eqn.inputs]
    ):
        out_types = [o.type for o in eqn.outputs]
    return b.bind(name, primals, params, out_types)


def _fit(t, like, operand, name: str, fn):
    """Make the tangent contribution `t` of `operand` match the type of the primal output
    `like`: a scalar operand's contribution (its shape) is broadcast; any other shape is a
    wrong rule."""
    if t is None or is_zero(t):
        return Zero(tangent_type(like.type))
    if isinstance(like.type, ShapedArray) and tuple(t.type.shape) != tuple(like.type.shape):
        if tuple(t.type.shape) != tuple(getattr(operand.type, "shape", ())):
            check_rule_type("JVP", name, fn, "tangent", t.type, tangent_type(like.type))
        t = ops.maybe_broadcast(like.type.shape, t)
    return t


def _summed_jvp(name: str, fns, with_ans: bool):
    """The JVP rule that binds `name` on the primals and sums one contribution per argument."""

    def rule(primals, tangents, /, **params):
        (ans,) = rebind_primal(name, primals, params)
        out = Zero(tangent_type(ans.type))
        for fn, t, x in zip(fns, tangents, primals):
            if fn is None or is_zero(t):
                continue
            contribution = fn(t, ans, *primals, **params) if with_ans else fn(t, *primals, **params)
            out = add_tangents(out, _fit(contribution, ans, x, name, fn))
        return [ans], [out]

    return rule


def defjvp(name: str, *fns):
    """`fns[i](g_i, *primals, **params) -> tangent` per argument (None: no derivative)."""
    rule = _summed_jvp(name, fns, with_ans=False)
    primitive_jvps[name] = rule
    rule_kind[name] = "defjvp"
    return rule


def defjvp2(name: str, *fns):
    """`fns[i](g_i, ans, *primals, **params) -> tangent`: also sees the primal output."""
    rule = _summed_jvp(name, fns, with_ans=True)
    primitive_jvps[name] = rule
    rule_kind[name] = "defjvp2"
    return rule


def linear_jvp(name: str, primals, tangents, /, **params):
    """The primitive rebound on the tangents; on tangents of the primals' own types its
    results have the primal results' tangent types (as the explicitly sharded ones JAX chose,
    which a shape rule without the mesh axis sizes cannot always compute)."""
    outs = rebind_primal(name, primals, params)
    if all(is_zero(t) for t in tangents):
        return outs, [Zero(tangent_type(o.type)) for o in outs]
    tangents = [instantiate(t) for t in tangents]
    out_types = None
    if [t.type for t in tangents] == [tangent_type(p.type) for p in primals]:
        out_types = [tangent_type(o.type) for o in outs]
    touts = current().bind(name, tangents, params, out_types)
    return outs, touts


def _linear_transpose(name: str, transpose_fn, with_args: bool):
    def rule(cts, /, *args, **params):
        if len(cts) == 1 and not prim(name).multiple_results:  # (most equations)
            ct = cts[0]
            if ct.__class__ is Zero:
                return _zero_cts(args)
        elif all(is_zero(c) for c in cts):
            return _zero_cts(args)
        else:
            ct = list(cts)
        res = transpose_fn(ct, *args, **params) if with_args else transpose_fn(ct, **params)
        return [
            r if a.__class__ is UndefinedPrimal else None for r, a in zip(list(res), args)
        ]  # (is_undefined_primal)

    rule.__wrapped__ = transpose_fn  # the function a wrong cotangent is blamed on
    return rule


def _zero_cts(args) -> list:
    """The cotangents of a linear rule's operands when its results' are all zero."""
    return [Zero(tangent_type(a.type)) if is_undefined_primal(a) else None for a in args]


def deflinear(name: str, transpose_fn):
    """Linear in all arguments: JVP rebinds on the tangents; `transpose_fn(ct, **params) -> cts`."""
    primitive_jvps[name] = lambda primals, tangents, **params: linear_jvp(
        name, primals, tangents, **params
    )
    primitive_transposes[name] = _linear_transpose(name, transpose_fn, False)
    rule_kind[name] = "deflinear"


def deflinear2(name: str, transpose_fn):
    """As deflinear, but `transpose_fn(ct, *args, **params)` sees the (undefined) arguments."""
    primitive_jvps[name] = lambda primals, tangents, **params: linear_jvp(
        name, primals, tangents, **params
    )
    primitive_transposes[name] = _linear_transpose(name, transpose_fn, True)
    rule_kind[name] = "deflinear2"


def _same_type(a, b) -> bool:
    """`a` and `b` are the same type in every field (`weak_type` too, which `==` leaves
    out): an equation gives the same result types on either."""
    return a is b or (a.__class__ is ShapedArray and a == b and a.weak_type == b.weak_type)


def defbilinear(name: str, lhs_rule, rhs_rule):
    """Linear in each argument separately: JVP `bind(tx, y) + bind(x, ty)`."""

    def jvp(primals, tangents, /, **params):
        x, y = primals
        tx, ty = tangents
        (ans,) = rebind_primal(name, primals, params)
        # a tangent of its operand's own type gives a result of the primal result's
        # tangent type (as `linear_jvp`): no shape inference
        want = [tangent_type(ans.type)]
        out = Zero(want[0])
        b = current()
        if not is_zero(tx):
            t = b.bind(name, [tx, y], params, want if _same_type(tx.type, x.type) else None)[0]
            out = add_tangents(out, _fit(t, ans, x, name, jvp))
        if not is_zero(ty):
            t = b.bind(name, [x, ty], params, want if _same_type(ty.type, y.type) else None)[0]
            out = add_tangents(out, _fit(t, ans, y, name, jvp))
        return [ans], [out]

    def transpose(cts, x, y, /, **params):
        (ct,) = cts
        if is_undefined_primal(x) and is_undefined_primal(y):
            from ..core import NotLinear

            raise NotLinear(
                f"'{name}' is not linear: both operands depend on the linear inputs", current().loc
            )
        if is_undefined_primal(x):
            return [
                Zero(tangent_type(x.type)) if is_zero(ct) else lhs_rule(ct, x, y, **params),
                None,
            ]
        return [None, Zero(tangent_type(y.type)) if is_zero(ct) else rhs_rule(ct, x, y, **params)]

    primitive_jvps[name] = jvp
    primitive_transposes[name] = transpose
    rule_kind[name] = "defbilinear"


def defjvp_zero(name: str):
    """No derivative: the tangent outputs are Zero."""

    def rule(primals, tangents, /, **params):
        outs = rebind_primal(name, primals, params)
        return outs, [Zero(tangent_type(o.type)) for o in outs]

    primitive_jvps[name] = rule
    rule_kind[name] = "defjvp_zero"


def defidentity(name: str):
    """An identity on values (placement, sharding, compiler hints): the JVP binds `name` on the
    tangent (passes the tangents through when it has several operands), the transpose passes
    the cotangents back."""

    def jvp(primals, tangents, /, **params):
        outs = rebind_primal(name, primals, params)
        nz = [t for t in tangents if not is_zero(t)]
        if not nz:
            return outs, [Zero(tangent_type(o.type)) for o in outs]
        if len(primals) == 1:
            touts = current().bind(
                name, [tangents[0]], params, [tangent_type(o.type) for o in outs]
            )
            return outs, touts
        # several operands (device_put): the tangents pass through unchanged
        return outs, list(tangents)

    def transpose(cts, /, *args, **params):
        return [c if is_undefined_primal(a) else None for c, a in zip(cts, args)]

    primitive_jvps[name] = jvp
    primitive_transposes[name] = transpose
    rule_kind[name] = "deflinear"


#: the `rule_kind` of a hand-written JVP rule (it is also the primitive's linearization)
LOW_LEVEL = "jvp+linearization"


def set_kind(name: str, kind: str = LOW_LEVEL) -> None:
    rule_kind[name] = kind


_MISSING_KWARG = LazyPattern(r"missing \d+ required keyword-only arguments?: (.*)$")


def rule_name(rule) -> str:
    """A rule function as `module.qualified_name` (plugins' rules say where they live); a
    helper's wrapper names the function it wraps."""
    rule = inspect.unwrap(rule)
    return f"{getattr(rule, '__module__', '?')}.{getattr(rule, '__qualname__', repr(rule))}"


def check_rule_type(kind: str, eqn, rule, what: str, got, want) -> None:
    """A (co)tangent a rule returned must have the type its primal implies (dtype and shape):
    a wrong rule is a located error naming it, never a value later broadcast or summed into
    shape.  Types are compared, nothing inferred: this runs once per result.  `eqn`: the
    equation (its location), or the primitive's name inside a rule (`located_rule` adds it)."""
    if got is want:
        return
    if isinstance(got, ShapedArray) and isinstance(want, ShapedArray):
        if got.dtype == want.dtype and (got.shape == want.shape or dims_eq(got.shape, want.shape)):
            return
        prim_name, loc = (eqn, None) if isinstance(eqn, str) else (eqn.prim, eqn.loc)
        raise JaxprError(
            f"the {kind} rule of '{prim_name}' ({rule_name(rule)}) returned a {what} of type "
            f"{got} where the primal implies {want}: fix the rule (JAX raises here too)",
            loc,
        )


class located_rule:  # noqa: N801 - used as `with located_rule(eqn):`, once per equation
    """Run an AD rule of `eqn`: an error it raises without a location gets the equation's,
    and a parameter the rule needs but the equation lacks (text from an older or edited
    printout) is a located error that names it, not a crash.  (A class, not a generator
    context manager: AD enters one per equation.)"""

    __slots__ = ("eqn",)

    def __init__(self, eqn):
        self.eqn = eqn

    def __enter__(self):
        return None

    def __exit__(self, kind, e, tb):
        if kind is None:
            return False
        eqn = self.eqn
        if isinstance(e, JaxprError):
            if e.loc is None:
                e.loc = eqn.loc
            return False
        if isinstance(e, KeyError):
            key = e.args[0] if e.args else None
            if not isinstance(key, str) or key in eqn.params:
                return False
            raise JaxprError(_missing_param(eqn, f"'{key}'"), eqn.loc) from None
        if isinstance(e, TypeError):
            m = _MISSING_KWARG.search(str(e))
            if m is not None:
                raise JaxprError(_missing_param(eqn, m.group(1)), eqn.loc) from None
        if isinstance(e, (TypeError, ValueError)):
            sym = symbolic_type(eqn)
            if sym is not None:
                raise JaxprError(_symbolic_refusal(eqn, sym), eqn.loc) from e
        return False


def symbolic_type(eqn):
    """The first operand or result type of `eqn` with a symbolic dimension (`f32[b,3]`), or
    None.  (Sharded dims, `8@x`, have a static size.)"""
    from ..shardings import dim_axes

    for x in (*eqn.inputs, *eqn.outputs):
        t = getattr(x, "type", None)
        t = getattr(t, "inner", t)  # a Ref's value
        if isinstance(t, ShapedArray) and any(
            not isinstance(d, int) and dim_axes(d)[0] is None for d in t.shape
        ):
            return t
    return None


def _symbolic_refusal(eqn, t) -> str:
    """A rule that computes with sizes as integers met a symbolic one: refused at the
    equation, never an internal error."""
    return (
        f"'{eqn.prim}': the tool's transformation rule does not handle the symbolic "
        f"dimension of {t} yet: transform a program traced at concrete sizes, or one "
        "without this equation"
    )


def _missing_param(eqn, names: str) -> str:
    return (
        f"'{eqn.prim}': its differentiation rule needs the parameter {names}, which the "
        "equation does not have (JAX prints it: add it to the equation)"
    )
