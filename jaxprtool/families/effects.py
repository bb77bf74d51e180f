"""Effectful primitives without a body: callbacks into Python (pure_callback, io_callback,
debug_callback, debug_print, buffer_callback), `check` (checkify) and custom kernels
(pallas_call).  None of them is removed, merged or reordered by a pass; `run` needs a plugin
for them (the text cannot carry a Python function or a kernel), but for debug_print, whose
text holds all that JAX's own callback uses, and for a pallas_call without a grid over
whole-array blocks, whose kernel jaxpr runs as JAX's interpret mode runs it."""

from __future__ import annotations

import re

from ..ad.builder import current
from ..ad.jvp import jvp_masked
from ..ad.ops import consts_as_refs, instantiate
from ..ad.registry import rebind_primal
from ..ad.zeros import Zero, is_zero, tangent_type
from ..core import Jaxpr, JaxprError, ShapedArray
from ..lazy import LazyPattern, lazy_module
from ..params import Record, format_value
from ..passes.dce import keep_whole
from ..record import define
from ..shapes import ShapeError, shape_rule
from ..shapes.util import parse_avals, types_agree
from ..text.param_rules import drop

#: the vmap machinery, executed when a batching rule first runs
BT = lazy_module("jaxprtool.ad.batching")


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


# `run` of debug_print: unlike the other callbacks, everything JAX's callback does is in the
# text (the format string, which arguments are positional or named, numpy's print options),
# so it binds JAX's debug_print with those parameters rebuilt, and JAX prints.

_PRINT_TREE = LazyPattern(r"PyTreeDef\(\(\(((?:\*, )*\*,?)?\), \{((?:'\w+': \*(?:, )?)*)\}\)\)")
_OPTION_VALUE = (int, float, str, bool, type(None))


def _print_tree(text: str):
    """`PyTreeDef(((*, *), {'x': *}))` (positional and keyword leaves) as JAX's treedef."""
    import jax

    from ..backend.prims import Unconvertible

    m = _PRINT_TREE.fullmatch(text)
    if m is None:
        raise Unconvertible(f"in_tree={text} (only flat positional and keyword arguments)")
    n = (m.group(1) or "").count("*")
    keys = re.findall(r"'(\w+)'", m.group(2) or "")
    return jax.tree_util.tree_structure(((0,) * n, {k: 0 for k in keys}))


def _plain_pairs(name: str, v) -> tuple:
    """A tuple of (key, plain value) pairs as printed (`np_printoptions`, `static_args`)."""
    from ..backend.prims import Unconvertible

    pairs = tuple(tuple(x) for x in v) if isinstance(v, (tuple, list)) else None
    if pairs is None or not all(len(x) == 2 and isinstance(x[1], _OPTION_VALUE) for x in pairs):
        raise Unconvertible(f"{name}={format_value(v)}")
    return pairs


def _debug_print_bind(eqn, p, dims):
    from ..backend.prims import Unconvertible

    if p.get("logging_record") is not None:
        raise Unconvertible(f"logging_record={format_value(p['logging_record'])} (jax.debug.log)")
    return {
        "in_tree": _print_tree(str(p.get("in_tree"))),
        "np_printoptions": _plain_pairs("np_printoptions", p.get("np_printoptions")),
        "static_args": _plain_pairs("static_args", p.get("static_args", ())),
        "logging_record": None,  # JAX 0.12's for jax.debug.print (older texts lack it)
    }


define("debug_print", bind_params=_debug_print_bind)


# ---------------------------------------------------------------- pallas_call and other kernels

shape_rule("pallas_call")(_avals_rule("out_avals"))
#: JAX's `_has_side_effects(compiler_params)`: `has_side_effects=True` (a dict's or a
#: dataclass's) or Mosaic's `SideEffectType.SIDE_EFFECTING`
_SIDE_EFFECTS = LazyPattern(
    r"has_side_effects'?\s*[=:]\s*(?:True|\S*SideEffectType\.SIDE_EFFECTING\b)"
)


def _pallas_effects_in_kernel(e) -> bool:
    """JAX's `_pallas_call_dce_rule`: an unused kernel goes unless its compiler_params say
    it has side effects or it writes a live Ref operand; a used one stays whole."""
    return not _SIDE_EFFECTS.search(str(e.params.get("compiler_params")))


define("pallas_call", effectful=True, effects_in_bodies=_pallas_effects_in_kernel, dce=keep_whole)

# `run` of a kernel without a grid whose blocks are the whole arrays, as JAX's interpret mode
# runs it (the printed GridMapping shows the block sizes but not the index maps a grid needs)

_BLOCK_SIZES = LazyPattern(r"BlockMapping\(block_shape=\(((?:Blocked\(block_size=\d+\),? ?)*)\)\)")


def _whole_blocks(eqn) -> list[tuple[int, ...]] | None:
    """The block shapes of a kernel without a grid, one per operand and result, or None."""
    text = str(eqn.params.get("grid_mapping", ""))
    m = re.fullmatch(r"GridMapping\(grid=\(\), block_mappings=\((.*)\)\)", text)
    if m is None:
        return None
    blocks = _BLOCK_SIZES.findall(m.group(1))
    if len(_BLOCK_SIZES.sub("", m.group(1)).strip(", ")) > 0:
        return None
    return [tuple(int(n) for n in re.findall(r"block_size=(\d+)", b)) for b in blocks]


def _pallas_refusal(eqn) -> str | None:
    atoms = list(eqn.inputs) + list(eqn.outputs)
    blocks = _whole_blocks(eqn)
    kernel = eqn.params.get("jaxpr")
    whole = (
        blocks == [tuple(a.type.shape) for a in atoms]
        and isinstance(kernel, Jaxpr)
        and len(kernel.invars) == len(atoms)
        and not eqn.params.get("input_output_aliases")
        and eqn.params.get("mesh") is None
    )
    if whole:
        return None
    return (
        "is a Pallas kernel with a grid, a mesh, scratch buffers, aliased outputs or blocks "
        "smaller than its arrays: the text prints the block sizes but not the index maps "
        "that place each block, so the back end runs only whole-array kernels without a grid"
    )


def _uninitialized(aval):
    """JAX's `uninitialized_value`: what an output Ref holds before the kernel writes it."""
    import jax.numpy as jnp

    dt = jnp.dtype(aval.np_dtype)
    if jnp.issubdtype(dt, jnp.floating):
        fill = jnp.nan
    elif jnp.issubdtype(dt, jnp.integer):
        fill = jnp.iinfo(dt).min
    else:
        fill = False
    return jnp.full(tuple(aval.shape), fill, dt)


def _pallas_evaluate(interp, eqn, invals, path):
    from ..backend.evaluator import Box

    kernel = interp.body(eqn.params["jaxpr"], eqn)
    boxes = [Box(x) for x in invals] + [Box(_uninitialized(o.type)) for o in eqn.outputs]
    interp.run(kernel, [], boxes, path + (("pallas_call",) if interp.mode == "eager" else ()))
    return [b.value for b in boxes[len(invals) :]]


def _split(xs: list, sizes: list[int]) -> list[list]:
    """`xs` cut into pieces of `sizes`, then the rest."""
    out, k = [], 0
    for n in sizes:
        out.append(xs[k : k + n])
        k += n
    return [*out, xs[k:]]


def _pallas_jvp(primals, tangents, **params):
    """JAX's `_pallas_call_jvp_rule` for a whole-array kernel: one pallas_call of the kernel's
    JVP, its Refs ordered inputs, their tangents, outputs, theirs (each with its whole-array
    block); a kernel the back end cannot run is refused (its JVP could not be checked)."""
    why = _pallas_refusal(current().cur_eqn)
    if why is not None:
        raise JaxprError(f"cannot differentiate 'pallas_call': it {why[3:]}", current().loc)
    kernel, n_in = params["jaxpr"], len(primals)
    n_out = len(kernel.invars) - n_in
    nz = [not is_zero(t) for t in tangents]
    if not any(nz):
        outs = rebind_primal("pallas_call", list(primals), params)
        return outs, [Zero(tangent_type(o.type)) for o in outs]
    jv, _ = jvp_masked(kernel, nz + [True] * n_out, False)
    n_t = sum(nz)
    ins, outs_, t_ins, t_outs = _split(list(jv.invars), [n_in, n_out, n_t])
    jv = jv.replace(invars=[*ins, *t_ins, *outs_, *t_outs])
    grid = params["grid_mapping"]
    in_bms, out_bms = _split(list(grid["block_mappings"]), [n_in])
    t_bms = [b for b, on in zip(in_bms, nz) if on]
    bms = (*in_bms, *t_bms, *out_bms, *out_bms)
    new = dict(params, jaxpr=jv, out_avals=(*params["out_avals"], *params["out_avals"]))
    new["grid_mapping"] = Record(grid.cls, tuple((k, bms if k == "block_mappings" else v)
                                                 for k, v in grid.fields))  # fmt: skip
    types = [o.type for o in current().cur_eqn.outputs]
    tans = [instantiate(t) for t in tangents if not is_zero(t)]
    out = current().bind("pallas_call", [*primals, *tans], new, types + types)
    return out[:n_out], out[n_out:]


def _pallas_linearization(primals, tangents, **params):
    """JAX 0.12 cannot linearize a pallas_call (its JVP's primal and tangent halves are one
    kernel): refused in its words; with no tangent, the primal call."""
    if any(not is_zero(t) for t in tangents):
        raise JaxprError(
            "reverse mode (linearize, vjp, grad) of pallas_call is not supported; JAX 0.12 "
            'refuses it too ("Linearization failed to produce known values"): give the kernel '
            "a jax.custom_vjp rule and trace it with `jaxprtool trace`",
            current().loc,
        )
    outs = rebind_primal("pallas_call", list(primals), params)
    return outs, [Zero(tangent_type(o.type)) for o in outs]


def _pallas_batching(args, dims, **params):
    """JAX batches a kernel by adding a grid dimension over the examples, with block index
    maps that a printout cannot carry (the tool refuses gridded kernels: their printed
    GridMapping lacks them); the tool runs the kernel once per example instead, saying so."""
    why = "JAX's batching rule for 'pallas_call' adds a grid dimension whose block index maps a text cannot hold"
    return BT.loop_fallback(args, dims, why=why)


def _pallas_lift_kept_consts(e, outer):
    """For the AD commands (`passes/hoist_consts.py`: `lift_kept_consts`): the constants a
    whole-array kernel without a grid keeps (a jit's inside it) as leading inputs with
    whole-array blocks, read whole from their Refs at the kernel's start, as a kernel given
    those arrays as inputs reads them (JAX refuses a kernel closing over an array itself:
    "You should pass them as inputs").  A kernel with a grid keeps them: its blocks' index
    maps are not in the text, so none can be added (the back end refuses it anyway)."""
    kernel: Jaxpr = e.params["jaxpr"]
    shapes = [getattr(v.type, "inner", v.type).shape for v in kernel.constvars]  # a Ref's too
    if _pallas_refusal(e) is not None or not all(isinstance(d, int) for s in shapes for d in s):
        return e
    grid = e.params["grid_mapping"]
    blocks = tuple(
        Record("BlockMapping", (("block_shape", tuple(_blocked(d) for d in s)),)) for s in shapes
    )
    fields = tuple((k, blocks + v if k == "block_mappings" else v) for k, v in grid.fields)
    space = kernel.invars[0].type.memory_space if kernel.invars else None
    params = dict(
        e.params,
        jaxpr=consts_as_refs(kernel, e.loc, space),
        grid_mapping=Record(grid.cls, fields),
    )
    return e.replace(inputs=tuple(outer(kernel.constvars)) + tuple(e.inputs), params=params)


def _blocked(size: int) -> Record:
    return Record("Blocked", (("block_size", size),))


define(
    "pallas_call",
    lift_kept_consts=_pallas_lift_kept_consts,
    jvp=_pallas_jvp,
    batching=_pallas_batching,
    jvp_kind="jvp",
    linearization=_pallas_linearization,
    refusal=_pallas_refusal,
    evaluate=_pallas_evaluate,
    # the kernel's values do not depend on how it is compiled (interpret, compiler_params,
    # cost_estimate, debug, metadata, name); grid_mapping and jaxpr are read above
    evaluated_params=frozenset(
        "backend compiler_params cost_estimate debug grid_mapping input_output_aliases interpret "
        "jaxpr mesh metadata name out_avals".split()
    ),
)

# ---------------------------------------------------------------- what `run` cannot do

_CALLS_BACK = "calls back into Python, which cannot run from a text file"
for _n in (
    "debug_callback",
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
    "tpu_custom_call",
    "mosaic_gpu_p",
    "triton_kernel_call",
    "core_map",
    "custom_call",
):
    define(_n, refusal="is a custom kernel the back end cannot run")
for _n in ("call_hi_primitive", "call_hi_primitive_linearized"):
    define(_n, refusal="is a high-level primitive with no lowering in the text")
