"""Evaluation of IR jaxprs through JAX's public APIs (jax is imported lazily, only here).

Public API:
  evaluate(jaxpr, args, consts=None, device="cpu", dims=None) -> list[np.ndarray]   (jax.jit)
  as_jax_function(jaxpr, dims=None) -> f(*consts, *args)   traceable by jax.jit / jax.grad / ...
  eval_eager(jaxpr, args, consts=None, trace=None, debug_nans=False, dims=None) -> list[np.ndarray]
  IMPLS[name] = fn(*args, **params)   implementations supplied by plugins
"""

from __future__ import annotations

from ..core import JaxprError
from .evaluator import IMPLS, refusal  # noqa: F401  (numpy only; jax stays unimported)
from .jaxfn import (  # noqa: F401  (the back end's public names)
    _unwrap_keys,
    _wrap_keys,
    as_jax_function,
    check_runnable,
    compile_error,
    get_device,
    platform_of,
    prepare,
    x64_scope,
)

__all__ = [
    "IMPLS",
    "as_jax_function",
    "evaluate",
    "eval_eager",
    "check_runnable",
    "prepare",
    "get_device",
    "platform_of",
    "refusal",
    "reference_device",
    "current_platform",
]


def _to_numpy(outs):
    import numpy as np

    return [np.asarray(o) for o in outs]


#: (id(jaxpr), `sharding.run_variant`) -> (jaxpr, jitted); the jaxpr is held so its id stays
#: unique (a program object run again skips `jit_cache`'s walk of its content)
_JIT_CACHE: dict = {}


def _jitted(jaxpr, dims, nested: bool = False):
    import jax

    from .jit_cache import shared_jit
    from .sharding import run_variant

    variant = run_variant("plain", dims, nested)
    key = (id(jaxpr), variant)
    hit = _JIT_CACHE.get(key)
    if hit is not None and hit[0] is jaxpr:
        return hit[1]
    if len(_JIT_CACHE) >= 64:
        _JIT_CACHE.pop(next(iter(_JIT_CACHE)))
    fn = shared_jit(
        jaxpr,
        variant,
        lambda: jax.jit(as_jax_function(jaxpr, dims, enable_x64=False, nested=nested)),
    )
    _JIT_CACHE[key] = (jaxpr, fn)
    return fn


def sizes_from_inputs(jaxpr, args, dims=None) -> dict | None:
    """`dims` completed with the symbolic sizes read off the program's inputs
    (`values.read_dims`); `dims` itself when the inputs have none."""
    if not any(isinstance(d, str) for v in jaxpr.invars for d in getattr(v.type, "shape", ())):
        return dims
    import numpy as np

    from .values import read_dims

    return read_dims(jaxpr.invars, [np.shape(a) for a in args], dims) or dims


def evaluate(jaxpr, args, consts=None, device: str | None = None, dims=None, jitted=None):
    """Run a jaxpr compiled by XLA (through jax.jit) and return numpy arrays.

    The compiled function is cached per jaxpr object (and dims), so evaluating the same
    jaxpr again with same-typed inputs does not recompile.  Symbolic sizes `dims` does not
    give are read off the inputs.
    """
    import jax

    from . import sharding

    dims = sizes_from_inputs(jaxpr, args, dims)
    check_runnable(jaxpr)
    if sharding.is_multi_device(jaxpr):
        return sharding.evaluate(jaxpr, args, consts or [], dims, device=device, jitted=jitted)
    dev = get_device(device or sharding.CONFIG.platform)  # None: the command's --device
    consts = list(consts or [])
    fn = jitted or _jitted(jaxpr, dims, _with_nested(jaxpr, consts))
    with x64_scope(jaxpr), jax.default_device(dev):
        xs = [jax.device_put(x, dev) for x in consts + list(args)]
        try:
            out = fn(*xs)
        except JaxprError:
            raise
        except (TypeError, ValueError, NotImplementedError) as e:  # lowering rejected it
            raise compile_error(jaxpr, e) from None
        return _to_numpy(out)


def current_platform() -> str:
    """The platform the command's --device points the back end at ("auto" resolved)."""
    from . import sharding

    platform = sharding.CONFIG.platform
    return platform if platform in ("cpu", "tpu") else get_device(platform).platform


def reference_device(jaxpr) -> str | None:
    """Where finite differences of `jaxpr` run: "cpu" when the command runs elsewhere, else
    None (the command's device).  On a TPU the products of an f32 program are bf16 passes
    (or f32 at 'highest'), its transcendentals a few ulps off and its float64 emulated, so
    differences taken there measure the device's rounding divided by the step, not the
    derivative; the CPU's are the reference that the derivatives computed on the device are
    held to.  A program that spans devices, or a JAX without a CPU backend, keeps the
    command's device."""
    from . import sharding

    if sharding.is_multi_device(jaxpr) or current_platform() == "cpu":
        return None
    try:
        get_device("cpu")
    except JaxprError:
        return None
    return "cpu"


def _with_nested(jaxpr, consts) -> bool:
    """Whether `consts` also holds the nested jaxprs' constants (a JaxprError if the count
    fits neither way)."""
    from .consts import check_count

    if len(consts) == len(jaxpr.constvars):
        return False
    check_count(jaxpr, len(consts))
    return True


def eval_eager(
    jaxpr,
    args,
    consts=None,
    trace=None,
    debug_nans=False,
    dims=None,
    device: str | None = None,
    observer=None,
):
    """Run op by op with Python control flow; trace(line) gets each equation's summary and
    `observer.eval_step(eqn, invals, outs)` each top-level equation's values (symbolic sizes
    as `evaluate` reads them)."""
    import jax

    from . import sharding

    dims = sizes_from_inputs(jaxpr, args, dims)
    from .evaluator import Interpreter

    check_runnable(jaxpr)
    if sharding.is_multi_device(jaxpr):
        return sharding.evaluate(
            jaxpr, args, consts or [], dims, device, eager=True, trace=trace, debug_nans=debug_nans
        )
    dev = get_device(device or sharding.CONFIG.platform)  # None: the command's --device
    with x64_scope(jaxpr), jax.default_device(dev):
        from .consts import all_constvars, split

        consts = list(consts or [])
        cvars = all_constvars(jaxpr) if _with_nested(jaxpr, consts) else list(jaxpr.constvars)
        xs = [jax.device_put(x, dev) for x in consts + list(args)]
        xs = _wrap_keys(jaxpr, xs, cvars + list(jaxpr.invars))
        top, inner = split(jaxpr, xs[: len(consts)])
        interp = Interpreter(
            "eager",
            dims=dims,
            trace=trace,
            debug_nans=debug_nans,
            observer=observer,
            nested=inner,
            root=jaxpr,
        )
        outs = interp.run(jaxpr, top, xs[len(consts) :])
        return _to_numpy(_unwrap_keys(jaxpr, outs))
