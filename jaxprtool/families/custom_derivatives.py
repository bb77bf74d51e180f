"""custom_jvp_call, custom_vjp_call and custom_lin: functions with custom derivative rules.

JAX prints a custom call with its body (`call_jaxpr`) and the *name* of its rule (`jvp=`,
`fwd=`/`bwd=`), never the rule itself.  Differentiating the body instead can be silently
wrong (a clipped gradient, a straight-through estimator, relu at 0), so the rule is found,
in this order, and otherwise refused or replaced loudly:

1. the rule traced by `jaxprtool trace` into the equation (`jaxprtool_jvp`, `jaxprtool_fwd`,
   `jaxprtool_bwd` parameters: `backend/custom_rules.py`), used as JAX uses the Python rule;
2. a plugin rule (`register_custom_jvp`, `register_custom_vjp`: docs/PLUGINS.md);
3. for custom_jvp, JAX's own rule of a library function (`jax_library.py`), when the name
   and the body both match;
4. the body's derivative, by policy (`--custom-rules`): custom_vjp is an error by default,
   custom_jvp gets one warning per function; `body` allows both, `strict` refuses both.
   Every replacement is noted (`registry.custom_rule_fallbacks`) for the output's comment
   lines and for check-grad.

Forward mode of a custom_vjp function is refused in JAX's words, as JAX refuses it.
"""

from __future__ import annotations

from ..ad import ops
from ..ad.builder import current
from ..ad.jvp import jvp_eval
from ..ad.registry import (
    BWD_RULE_PARAM,
    FWD_RULE_PARAM,
    JVP_RULE_PARAM,
    MissingCustomRule,
    custom_jvps,
    custom_rule_fallbacks,
    custom_vjps,
    find_library_jvp,
    rebind_primal,
)
from ..ad.zeros import Zero, instantiate, is_zero, tangent_type
from ..core import Jaxpr, JaxprError
from ..record import define

LOW_LEVEL = "jvp+linearization"
JVP_OF_CUSTOM_VJP = "can't apply forward-mode autodiff (jvp) to a custom_vjp function."


def fn_name(v) -> str:
    """The function name of a printed rule parameter (`jvp=jvp`, `fwd=<function f at 0x..>`)."""
    s = str(v)
    if s.startswith("<function "):
        s = s[len("<function ") :].split(" at ")[0]
    return s


def _body(params) -> Jaxpr:
    return params["call_jaxpr"] if "call_jaxpr" in params else params["fun_jaxpr"]


def function_name(params) -> str | None:
    """The custom function's name: `name=` (0.5+), else the body's single call's name."""
    if "name" in params:
        return str(params["name"])
    body = params.get("call_jaxpr", params.get("fun_jaxpr"))
    if isinstance(body, Jaxpr) and len(body.eqns) == 1 and "name" in body.eqns[0].params:
        return str(body.eqns[0].params["name"])
    return None


def _how_to_proceed(kind: str) -> str:
    plugin = "register_custom_jvp" if kind == "custom_jvp" else "register_custom_vjp"
    ways = (
        f"give the rule with --plugin RULES.py ({plugin}, docs/PLUGINS.md), or trace the "
        "function with `jaxprtool trace MODULE:FUNCTION` so that the rule travels with the "
        "program"
    )
    if custom_rule_fallbacks.policy == "body":
        return ways
    return ways + ", or pass --custom-rules body to differentiate the body on purpose"


def _fall_back_to_body(kind: str, params, primals, tangents, rule_text: str, refuse: bool):
    """Differentiate the body instead of the missing rule, or refuse (by policy)."""
    name = function_name(params) or "?"
    what = f"{kind}_call '{name}' ({rule_text})"
    if refuse:
        raise MissingCustomRule(
            f"{what}: the text names a custom derivative rule but does not contain it, and "
            f"differentiating the body may not give JAX's derivative; {_how_to_proceed(kind)}",
            current().loc,
        )
    note = f"{what}: custom rule replaced by the derivative of its body"
    if custom_rule_fallbacks.note(note):
        from ..io import warn

        where = (
            "at points where the body is not differentiable (kinks such as relu at 0)"
            if kind == "custom_jvp"
            else "wherever the custom rule differs from the body's derivative"
        )
        warn(
            f"{what}: the text does not contain its custom rule; differentiating its body "
            f"instead, so results may differ from JAX {where} ({_how_to_proceed(kind)})",
            current().loc,
        )
    body = _body(params)
    return jvp_eval(body, list(primals), list(tangents), list(body.constvars))


# ---------------------------------------------------------------- custom_jvp_call


def _custom_jvp_jvp(primals, tangents, **params):
    body = _body(params)
    traced = params.get(JVP_RULE_PARAM)
    n_out = len(body.outvars)
    if isinstance(traced, Jaxpr):
        out = ops.emit_jaxpr(traced, [*primals, *map(instantiate, tangents)])
        return out[:n_out], out[n_out:]
    jvp_name = fn_name(params.get("jvp", params.get("jvp_jaxpr_thunk")))
    plugin = custom_jvps.get(jvp_name)
    if plugin is not None:
        outs, touts = plugin(list(primals), [instantiate(t) for t in tangents])
        if outs is None:
            outs = current().bind("custom_jvp_call", list(primals), params, _out_types(body))
        return list(outs), list(touts)
    library = find_library_jvp(function_name(params), params, body)
    if library is not None:
        outs = rebind_primal("custom_jvp_call", list(primals), params)
        if all(is_zero(t) for t in tangents):
            return outs, [Zero(tangent_type(o.type)) for o in outs]
        nonzero = [None if is_zero(t) else t for t in tangents]
        return outs, library.tangent(list(primals), nonzero, outs)
    refuse = custom_rule_fallbacks.policy == "strict"
    return _fall_back_to_body("custom_jvp", params, primals, tangents, f"jvp={jvp_name}", refuse)


def _out_types(body: Jaxpr):
    return [v.type for v in body.outvars]


# ---------------------------------------------------------------- custom_vjp_call


def _custom_vjp_jvp(primals, tangents, **params):
    body = _body(params)
    b = current()
    fwd_name, bwd_name = fn_name(params.get("fwd")), fn_name(params.get("bwd"))
    fwd, bwd = params.get(FWD_RULE_PARAM), params.get(BWD_RULE_PARAM)
    plugin = custom_vjps.get(fwd_name) or custom_vjps.get(bwd_name)
    has_rule = (isinstance(fwd, Jaxpr) and isinstance(bwd, Jaxpr)) or plugin is not None
    policy = custom_rule_fallbacks.policy
    if has_rule and not b.split:
        if policy == "body":
            return _fall_back_to_body(
                "custom_vjp", params, primals, tangents, "forward mode", refuse=False
            )
        raise JaxprError(JVP_OF_CUSTOM_VJP, b.loc)
    if not has_rule:
        rule_text = f"fwd={fwd_name} bwd={bwd_name}"
        return _fall_back_to_body(
            "custom_vjp", params, primals, tangents, rule_text, refuse=policy != "body"
        )
    if all(is_zero(t) for t in tangents):
        outs = rebind_primal("custom_vjp_call", list(primals), params)
        return outs, [Zero(tangent_type(o.type)) for o in outs]
    if plugin is not None and not isinstance(fwd, Jaxpr):
        return _plugin_vjp(plugin, primals, tangents, bwd_name, fwd_name)
    out = ops.emit_jaxpr(fwd, list(primals))
    n_out = len(body.outvars)
    outs, res = out[:n_out], out[n_out:]
    in_zeros = [is_zero(t) for t in tangents]
    touts = b.bind(
        "custom_lin",
        [*res, *[t for t in tangents if not is_zero(t)]],
        {
            "bwd": bwd_name,
            "in_zeros": in_zeros,
            BWD_RULE_PARAM: bwd,
            "num_res": len(res),
            "symbolic_zeros": False,
        },
        [tangent_type(o.type) for o in outs],
    )
    return outs, touts


def _plugin_vjp(pair, primals, tangents, bwd_name, fwd_name):
    fwd_fn, _ = pair
    outs, res = fwd_fn(*primals)
    outs, res = list(outs), list(res)
    ts = [instantiate(t) for t in tangents]
    touts = current().bind(
        "custom_lin",
        res + ts,
        {
            "bwd": bwd_name if bwd_name in custom_vjps else fwd_name,
            "in_zeros": [False] * len(ts),
            "num_res": len(res),
            "symbolic_zeros": False,
        },
        [tangent_type(o.type) for o in outs],
    )
    return outs, touts


# ---------------------------------------------------------------- custom_lin


def _custom_lin_transpose(cts, *args, bwd, num_res, in_zeros=None, **params):
    res = list(args[:num_res])
    cts = [instantiate(c) for c in cts]
    traced = params.get(BWD_RULE_PARAM)
    if isinstance(traced, Jaxpr):
        cts_in = ops.emit_jaxpr(traced, [*res, *cts])
        zeros = list(in_zeros) if in_zeros is not None else [False] * len(cts_in)
        return [None] * num_res + [c for c, z in zip(cts_in, zeros) if not z]
    pair = custom_vjps.get(fn_name(bwd))
    if pair is None:
        raise JaxprError(
            "Transpose rule (for reverse-mode differentiation) for 'custom_lin' not implemented "
            f"(no plugin rule for bwd={fn_name(bwd)}; {_how_to_proceed('custom_vjp')})",
            current().loc,
        )
    _, bwd_fn = pair
    return [None] * num_res + list(bwd_fn(res, cts))


for _name in ("custom_jvp_call", "custom_jvp_call_jaxpr"):
    define(_name, jvp=_custom_jvp_jvp, jvp_kind=LOW_LEVEL)
for _name in ("custom_vjp_call", "custom_vjp_call_jaxpr"):
    define(_name, jvp=_custom_vjp_jvp, jvp_kind=LOW_LEVEL)
define("custom_lin", transpose=_custom_lin_transpose)
