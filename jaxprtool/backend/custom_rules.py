"""Tracing the custom rules of `custom_jvp` / `custom_vjp` functions into jaxprs (`trace`).

`jax.make_jaxpr` prints a `custom_jvp_call` or `custom_vjp_call` with the rule's *name*
only.  `jaxprtool trace` also traces the rules at the equation's shapes, with the same
machinery JAX's own JVP uses (the equation's `jvp_jaxpr_fun`, `fwd_jaxpr_thunk`, `bwd`,
`out_trees` parameters), and records them in extra parameters that JAX never prints:

- `jaxprtool_jvp={ lambda ; primals... tangents... . ... in (outs..., out_tangents...) }`
  on `custom_jvp_call` (every tangent instantiated, symbolic-zero outputs as zeros);
- `jaxprtool_fwd={ lambda ; primals... . ... in (outs..., residuals...) }` and
  `jaxprtool_bwd={ lambda ; residuals... cotangents... . ... in (input cotangents...) }` on
  `custom_vjp_call` (JAX's forwarded residuals included, None/zero cotangents as zeros).

Custom calls inside the traced rules are not annotated themselves (JAX's own rules often
call the function again, e.g. relu's JVP computes relu, so recording them would not end);
differentiating a rule again therefore meets those calls without their rules.  An equation whose rule
cannot be recorded exactly (closed-over constants), or whose rule raises when traced (Equinox's
`nondifferentiable`), keeps its JAX text and gets a warning; the AD commands then treat it
as a rule the text lacks.

A `symbolic_zeros=True` custom_vjp (Equinox's `filter_custom_vjp`, behind its checkpointed
while loops and so diffrax's `diffeqsolve`) is recorded as JAX calls it when every float
input of the traced program is differentiated: its fwd rule gets the perturbed flags of that
case (`stop_gradient` and integer values unperturbed), recorded as
`jaxprtool_perturbed=(True, False, ...)` when some are False (a tangent on an unperturbed
operand is then refused), and its bwd rule gets zeros for symbolic-zero cotangents.
Residuals the fwd rule returns as constants (Equinox's flags) reach the bwd rule as Python
values, as in JAX.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from ..core import Eqn, Jaxpr, JaxprError
from ..record import prim as record_of

JVP_PARAM = "jaxprtool_jvp"
FWD_PARAM = "jaxprtool_fwd"
BWD_PARAM = "jaxprtool_bwd"
PERTURBED_PARAM = "jaxprtool_perturbed"
#: every parameter the tool adds to JAX's text
EXTENSION_PARAMS = (JVP_PARAM, FWD_PARAM, BWD_PARAM, PERTURBED_PARAM)


class NotRecorded(Exception):
    """A rule that cannot be traced exactly (the reason is the message)."""


def annotate(closed, ours: Jaxpr, warn: Callable[[str, Eqn], None]) -> list[tuple]:
    """Attach the traced rules of every custom call of JAX's `closed` jaxpr to the matching
    equation of `ours` (the tool's parse of JAX's printout of `closed`), in place.  Returns
    each recorded rule as (JAX's jaxpr, the tool's parse of it), for the values of its
    constants and of its nested jaxprs' (`trace --consts-out`)."""
    theirs = list(_custom_eqns(_open(closed)))
    mine = list(_custom_eqns_ours(ours))
    if [e.primitive.name for e in theirs] != [e.prim for e in mine]:
        raise JaxprError("internal: the printed program does not match the traced one")
    active = _active_vars(_open(closed))
    recorded: list[tuple] = []
    for live, eqn in zip(theirs, mine):
        try:
            rules = _rules_of(live, active)
        except NotRecorded as e:
            warn(str(e), eqn)
            continue
        except Exception as e:  # noqa: BLE001 - the user's rule failed when traced
            if not _library_rule(eqn):
                warn(_failed(live, e), eqn)
            continue
        for key, (live_rule, text_rule) in sorted(rules.items()):  # in printed order
            eqn.params[key] = text_rule
            if live_rule is not None:
                recorded.append((live_rule, text_rule))
    return recorded


def _rules_of(live, active: set[int]) -> dict:
    if record_of(live.primitive.name).traced_rules == "jvp":
        return {JVP_PARAM: _with_text(_jvp_rule(live))}
    perturbed = _perturbed(live, active)
    fwd, bwd = _vjp_rules(live, perturbed)
    rules = {FWD_PARAM: _with_text(fwd), BWD_PARAM: _with_text(bwd)}
    if perturbed is not None and not all(perturbed):
        rules[PERTURBED_PARAM] = (None, tuple(perturbed))
    return rules


# ---------------------------------------------------------------- which inputs are perturbed


def _is_float(v) -> bool:
    import numpy as np

    dtype = getattr(getattr(v, "aval", None), "dtype", None)
    return dtype is not None and np.issubdtype(dtype, np.inexact)


def _active_vars(jaxpr) -> set[int]:
    """The variables of JAX's jaxpr (and its nested jaxprs) that carry a tangent when every
    float input of the program is differentiated: float values that depend on a float input
    other than through a primitive whose JVP is zero (`defjvp_zero`: stop_gradient, floor,
    ...; JAX gives their results symbolic zero tangents).  A call's body (one binder per operand) follows its
    operands; the binders of other nested jaxprs (loop and branch bodies) count as active
    when they are floats, which only ever marks more inputs perturbed than JAX would."""
    active: set[int] = set()
    _mark(jaxpr, [_is_float(v) for v in jaxpr.invars], active)
    return active


def _mark(jaxpr, invars_active, active: set[int]) -> None:
    for v, a in zip(jaxpr.invars, invars_active):
        if a:
            active.add(id(v))
    for e in jaxpr.eqns:
        ins = [not hasattr(x, "val") and id(x) in active for x in e.invars]
        for k in sorted(e.params):
            for sub in _live_jaxprs(e.params[k]):
                if len(sub.invars) == len(ins):
                    _mark(sub, ins, active)
                else:
                    _mark(sub, [_is_float(v) for v in sub.invars], active)
        if any(ins) and record_of(e.primitive.name).jvp_kind != "defjvp_zero":
            active.update(id(v) for v in e.outvars if _is_float(v))


def _perturbed(live, active: set[int]) -> list[bool] | None:
    """For a `symbolic_zeros=True` custom_vjp, which operands JAX would mark perturbed when
    every float input of the program is differentiated (its fwd rule sees the flags: Equinox
    asserts that its non-differentiable operands are unperturbed); None for the others."""
    if not live.params.get("symbolic_zeros"):
        return None
    return [not hasattr(x, "val") and id(x) in active for x in live.invars]


def _library_rule(eqn: Eqn) -> bool:
    """Whether the tool has its own rule for this custom_jvp function (a family's library
    rule, e.g. Equinox's `nondifferentiable`, whose JVP raises by design)."""
    from ..ad.registry import find_library_jvp

    body = eqn.params.get("call_jaxpr")
    if record_of(eqn.prim).traced_rules != "jvp" or not isinstance(body, Jaxpr):
        return False
    return find_library_jvp(str(eqn.params.get("name")), eqn.params, body) is not None


def _failed(live, e: Exception) -> str:
    """A rule that raised when traced (Equinox's `nondifferentiable` raises in its JVP):
    the AD commands then meet it as a rule the text lacks."""
    first = (str(e).strip().splitlines() or [""])[0]
    return (
        f"{live.primitive.name} '{_fn_name(live)}': tracing its custom rule raised "
        f"{type(e).__name__}: {first}; its custom rule was not recorded"
    )


def _with_text(closed):
    from ..text.parser import parse

    return closed, parse(str(closed), "<traced rule>").jaxpr


def _open(closed):
    return getattr(closed, "jaxpr", closed)


def _custom_eqns(jaxpr) -> Iterator:
    """JAX's custom-call equations of `jaxpr` and its nested jaxprs, depth first, nested
    jaxprs in the order of their parameter names (as `_custom_eqns_ours`)."""
    for e in jaxpr.eqns:
        if record_of(e.primitive.name).traced_rules:
            yield e
        for k in sorted(e.params):
            for sub in _live_jaxprs(e.params[k]):
                yield from _custom_eqns(sub)


def _live_jaxprs(v) -> Iterator:
    if hasattr(v, "eqns"):  # a jax Jaxpr (0.12 has no separate ClosedJaxpr)
        yield v
    elif hasattr(v, "jaxpr") and hasattr(v.jaxpr, "eqns"):  # a ClosedJaxpr
        yield v.jaxpr
    elif isinstance(v, (tuple, list)):
        for x in v:
            yield from _live_jaxprs(x)


def _custom_eqns_ours(jaxpr: Jaxpr) -> Iterator[Eqn]:
    for e in jaxpr.eqns:
        if record_of(e.prim).traced_rules:
            yield e
        for k in sorted(e.params):
            for sub in _our_jaxprs(e.params[k]):
                yield from _custom_eqns_ours(sub)


def _our_jaxprs(v) -> Iterator[Jaxpr]:
    if isinstance(v, Jaxpr):
        yield v
    elif isinstance(v, (tuple, list)):
        for x in v:
            yield from _our_jaxprs(x)


def _fn_name(live) -> str:
    p = live.params
    j = p.get("call_jaxpr")
    info = getattr(j, "debug_info", None) or getattr(getattr(j, "jaxpr", None), "debug_info", None)
    return getattr(info, "func_name", None) or "?"


def _no_consts(live) -> None:
    if live.params.get("num_consts", 0):
        raise NotRecorded(
            f"{live.primitive.name} '{_fn_name(live)}': its body closes over traced values "
            "(num_consts > 0); its custom rule was not recorded"
        )


def _avals(live):
    return [v.aval for v in live.invars]


def _eval(jaxpr, consts, *args):
    from jax._src import core as jcore

    if not hasattr(jaxpr, "eqns"):  # a ClosedJaxpr of an older JAX
        jaxpr, consts = jaxpr.jaxpr, list(jaxpr.consts) + list(consts)
    return jcore.eval_jaxpr(jaxpr, consts, *args)


def _zeros(aval):
    import jax.numpy as jnp

    return jnp.zeros(aval.shape, aval.dtype)


def _jvp_rule(live):
    """The JVP rule as one jaxpr: (primals, tangents) -> (outs, out_tangents)."""
    import jax

    _no_consts(live)
    p = live.params
    fun = p.get("jvp_jaxpr_fun", p.get("jvp_jaxpr_thunk"))
    call = getattr(fun, "call_wrapped", fun)
    avals = _avals(live)
    n = len(avals)
    jvp_jaxpr, consts, out_zeros = call(*[False] * n)

    def rule(*xs):
        out = _eval(jvp_jaxpr, consts, *xs)
        outs, nonzero = out[: len(out_zeros)], iter(out[len(out_zeros) :])
        touts = [
            _zeros(jax.typeof(o).to_tangent_aval()) if z else next(nonzero)
            for o, z in zip(outs, out_zeros)
        ]
        return (*outs, *touts)

    tangents = [a.to_tangent_aval() for a in avals]
    return jax.make_jaxpr(rule)(*_specs(avals), *_specs(tangents))


def _vjp_rules(live, perturbed: list[bool] | None = None):
    """(fwd, bwd) as jaxprs: primals -> (outs, residuals); (residuals, cts) -> input cts.
    `perturbed`: the fwd rule's perturbed flags (`symbolic_zeros=True`; default all)."""
    import jax
    from jax._src import ad_util

    _no_consts(live)
    p = live.params
    avals = _avals(live)
    n = len(avals)
    flags = perturbed if perturbed is not None else [True] * n
    fwd_jaxpr, fwd_consts = p["fwd_jaxpr_thunk"].call_wrapped(*flags)
    trees = p["out_trees"]()
    res_tree = trees[1]
    input_fwds = list(trees[2]) if len(trees) > 2 else [None] * res_tree.num_leaves
    n_res_out = res_tree.num_leaves - sum(f is not None for f in input_fwds)

    def fwd(*primals):
        out = _eval(fwd_jaxpr, fwd_consts, *primals)
        res_out, outs = out[:n_res_out], out[n_res_out:]
        it = iter(res_out)
        res = [next(it) if f is None else primals[f] for f in input_fwds]
        return (*outs, *res)

    fwd_closed = jax.make_jaxpr(fwd)(*_specs(avals))
    n_out = len(fwd_closed.out_avals) - res_tree.num_leaves
    res_avals = fwd_closed.out_avals[n_out:]
    ct_avals = [a.to_tangent_aval() for a in fwd_closed.out_avals[:n_out]]
    bwd = p["bwd"]
    # residuals the fwd rule returns as constants (Equinox's perturbed flags) reach JAX's bwd
    # as Python values, not tracers: the bwd rule may branch on them
    known = {i: v.val for i, v in enumerate(fwd_closed.jaxpr.outvars[n_out:]) if hasattr(v, "val")}

    def backward(*xs):
        xs = [known.get(i, x) for i, x in enumerate(xs)]
        cts_in = bwd.call_wrapped(*xs)
        if len(cts_in) == 2 and isinstance(cts_in[0], (list, tuple)):
            if cts_in[1] is None or isinstance(cts_in[1], dict):
                cts_in = cts_in[0]  # 0.12: (cotangents, backward-pass logs)
        cts_in = list(cts_in)
        if len(cts_in) != n:
            raise NotRecorded(f"custom_vjp_call '{_fn_name(live)}': bwd gave {len(cts_in)} results")
        return [
            _ct_zeros(a) if c is None or isinstance(c, ad_util.Zero) else c
            for c, a in zip(cts_in, avals)
        ]

    bwd_closed = jax.make_jaxpr(backward)(*_specs(res_avals), *_specs(ct_avals))
    return fwd_closed, bwd_closed


def _specs(avals):
    """make_jaxpr's arguments: a ShapeDtypeStruct per array, a Ref's abstract value as it is
    (a rule of a function taking a Ref takes the Ref, and a tangent Ref in JVP)."""
    import jax

    return [a if _is_ref(a) else jax.ShapeDtypeStruct(a.shape, a.dtype) for a in avals]


def _is_ref(aval) -> bool:
    return hasattr(aval, "inner_aval")


def _ct_zeros(aval):
    """Zeros for a None cotangent from bwd: for a Ref operand, of its value's type (JAX adds
    what bwd gives for a Ref into the Ref's cotangent Ref)."""
    inner = aval.inner_aval if _is_ref(aval) else aval
    return _zeros(inner.to_tangent_aval())
