"""Effectful primitives without a body: callbacks into Python (pure_callback, io_callback,
debug_callback, debug_print, buffer_callback), `check` (checkify) and custom kernels
(pallas_call).  None of them is removed, merged or reordered by a pass; `run` needs a plugin
for them (the text cannot carry a Python function or a kernel)."""

from __future__ import annotations

from ..ad import batching as BT
from ..ad.builder import current
from ..ad.zeros import Zero, tangent_type
from ..core import JaxprError, ShapedArray
from ..record import define
from ..shapes import ShapeError, shape_rule
from ..shapes.util import parse_avals, types_agree
from ..text.param_rules import drop


def _avals_rule(key):
    """Result types from the `key` parameter (`(ShapedArray(float32[3]),)`)."""

    def rule(in_types, params, out_hint):
        avals = parse_avals(params.get(key))
        if avals is None:
            raise ShapeError(f"missing parameter '{key}'")
        if out_hint is not None and len(out_hint) == len(avals):
            # keep the declared spelling of symbolic dims
            return [
                h if isinstance(h, ShapedArray) and types_agree(h, a) else a
                for a, h in zip(avals, out_hint)
            ]
        return avals

    return rule


def _refuse(msg):
    def rule(*args, **params):
        raise JaxprError(msg, current().loc)

    return rule


# ---------------------------------------------------------------- pure_callback, io_callback

#: Equinox's run-time checks (`eqx.error_if`, `branched_error_if`, and so every diffrax
#: solve) call back into Python unless EQX_ON_ERROR=nan makes them return NaN instead
_EQX_HINT = (
    "if it is an Equinox error check (`eqx.error_if`, used by diffrax, optimistix, lineax), "
    "set EQX_ON_ERROR=nan in the environment before importing equinox and print the "
    "program again: its errors then give NaN instead of calling back"
)


def _is_equinox_check(eqn) -> bool:
    """Equinox's callback prints as `_FlatCallback(callback_func=<function
    _error.<locals>.raises ...>` (equinox/_errors.py)."""
    return "_error.<locals>" in str(eqn.params.get("callback", ""))


def _pure_callback_refusal(eqn) -> str:
    if _is_equinox_check(eqn):
        return (
            "is an Equinox run-time error check (`eqx.error_if`), which calls back into Python "
            "and cannot "
            "run from a text file; set EQX_ON_ERROR=nan in the environment before importing "
            "equinox and print the program again: its errors then give NaN instead"
        )
    return f"{_CALLS_BACK} ({_EQX_HINT})"


def _refuse_callback(msg):
    def rule(*args, **params):
        raise JaxprError(f"{msg} ({_EQX_HINT})", current().loc)

    return rule


shape_rule("pure_callback", "io_callback")(_avals_rule("result_avals"))
define(
    "pure_callback",
    jvp=_refuse_callback(
        "Pure callbacks do not support JVP. Please use `jax.custom_jvp` to use callbacks while taking gradients."
    ),
    transpose=_refuse_callback(
        "Pure callbacks do not support transpose. Please use `jax.custom_vjp` to use callbacks while taking gradients."
    ),
)
define(
    "io_callback",
    effectful=True,
    jvp=_refuse("IO callbacks do not support JVP."),
    transpose=_refuse("IO callbacks do not support transpose."),
)
for _n in ("buffer_callback", "pure_callback_ordered"):
    define(_n, effectful=True)


# ---------------------------------------------------------------- debug_callback, debug_print, check


@shape_rule("debug_callback", "debug_print", "check")
def _no_results(in_types, params, out_hint):
    return []


def _effect_only_jvp(name):
    """The equation again on the primals; its results (if any) have zero tangents."""

    def rule(primals, tangents, /, **params):
        b = current()
        eqn = getattr(b, "cur_eqn", None)
        types = [o.type for o in eqn.outputs] if eqn is not None and eqn.prim == name else []
        outs = b.bind(name, list(primals), params, types)
        return outs, [Zero(tangent_type(o.type)) for o in outs]

    return rule


def _debug_batching(args, dims, **params):
    # JAX's `debug_batching_rule` runs the callback once per example
    return BT.loop_fallback(args, dims, warn=False)


for _n in ("debug_print", "debug_callback"):
    define(
        _n,
        effectful=True,
        jvp=_effect_only_jvp(_n),
        jvp_kind="defjvp_zero",
        batching=_debug_batching,
    )
define("check", effectful=True, print_params=drop("err_tree"))


# ---------------------------------------------------------------- pallas_call and other kernels

shape_rule("pallas_call")(_avals_rule("out_avals"))
define("pallas_call", effectful=True)

# ---------------------------------------------------------------- what `run` cannot do

_CALLS_BACK = "calls back into Python, which cannot run from a text file"
for _n in (
    "debug_callback",
    "debug_print",
    "io_callback",
    "pure_callback",
    "buffer_callback",
):
    define(_n, refusal=_CALLS_BACK)
define("pure_callback", refusal=_pure_callback_refusal)


def _ffi_call_refusal(eqn) -> str:
    """What an ffi_call needs that the text lacks: the compiled foreign function itself."""
    target = eqn.params.get("target_name", "?")
    return (
        f"calls the XLA FFI target '{target}', compiled code that the program's Python "
        "registered (jax.ffi.register_ffi_target); the text names the target but does not "
        "carry it"
    )


define("ffi_call", refusal=_ffi_call_refusal)
for _n in (
    "pallas_call",
    "tpu_custom_call",
    "mosaic_gpu_p",
    "triton_kernel_call",
    "core_map",
    "custom_call",
):
    define(_n, refusal="is a custom kernel the back end cannot run")
for _n in ("call_hi_primitive", "call_hi_primitive_linearized"):
    define(_n, refusal="is a high-level primitive with no lowering in the text")
