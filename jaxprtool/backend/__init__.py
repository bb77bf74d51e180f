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

__all__ = [
    "IMPLS",
    "as_jax_function",
    "evaluate",
    "eval_eager",
    "check_runnable",
    "prepare",
    "get_device",
    "refusal",
]


def prepare(jaxpr) -> None:
    """Import jax, enabling 64-bit types when the program has them."""
    import jax

    from .evaluator import needs_x64

    if needs_x64(jaxpr) and not jax.config.jax_enable_x64:
        jax.config.update("jax_enable_x64", True)


def x64_scope(jaxpr):
    """A context in which JAX keeps 64-bit types when the program has them."""
    import contextlib

    import jax

    from .evaluator import needs_x64

    if needs_x64(jaxpr) and not jax.config.jax_enable_x64:
        return jax.enable_x64(True)
    return contextlib.nullcontext()


def check_runnable(jaxpr) -> None:
    """Raise JaxprError naming the first equation the back end refuses, before any tracing."""
    from ..core import JaxprError, all_eqns, named_axes_refusal

    err = named_axes_refusal(jaxpr, "running")
    if err is not None:
        raise err
    for e in all_eqns(jaxpr):
        why = refusal(e) or _elided_literal(e)
        if why:
            raise JaxprError(f"cannot run {why}", e.loc)


def _elided_literal(e) -> str | None:
    """An array literal printed without its values (`...`): nothing to run it with."""
    from ..core import Literal

    for a in e.inputs:
        if isinstance(a, Literal) and a.value is Ellipsis:
            return (
                f"'{e.prim}': its operand is an array literal ...:{a.type} whose values the "
                "text does not hold (JAX elided them when it printed the program)"
            )
    return None


def as_jax_function(jaxpr, dims=None, enable_x64: bool = True, nested: bool = False):
    """f(*consts, *args) -> list of outputs; traceable by jax.jit, jax.grad, jax.vmap, ...

    With 64-bit types in the program, jax_enable_x64 is switched on (globally) unless
    enable_x64=False (the caller then scopes it, as evaluate() does).  nested=True: `consts`
    also holds the nested jaxprs' constants (`backend/consts.py`, `all_constvars` order).
    """
    from .consts import all_constvars, split
    from .evaluator import Interpreter

    if enable_x64:
        prepare(jaxpr)
    cvars = all_constvars(jaxpr) if nested else list(jaxpr.constvars)
    nc = len(cvars)

    def f(*xs):
        xs = _wrap_keys(jaxpr, xs, cvars + list(jaxpr.invars))
        top, inner = split(jaxpr, xs[:nc])
        outs = Interpreter("jit", dims=dims, nested=inner, root=jaxpr).run(jaxpr, top, xs[nc:])
        return _unwrap_keys(jaxpr, outs)

    return f


def _wrap_keys(jaxpr, xs, vs=None) -> list:
    """Key-typed inputs arrive as uint32 key data; wrap them into JAX key arrays (`vs`: the
    binders of `xs`, by default the constvars and invars)."""
    from .keys import is_key, wrap

    if vs is None:
        vs = list(jaxpr.constvars) + list(jaxpr.invars)
    return [wrap(v.type, x) if is_key(v.type) else x for v, x in zip(vs, xs)]


def _unwrap_keys(jaxpr, outs) -> list:
    from .keys import unwrap

    return [unwrap(o) for o in outs]


def get_device(device: str = "cpu"):
    """The first JAX device of a platform, or a JaxprError that names what is missing."""
    import jax

    from ..core import JaxprError

    platform = {"gpu": "gpu", "cuda": "gpu", "cpu": "cpu", "tpu": "tpu"}.get(device)
    if platform is None:
        raise JaxprError(f"unknown device '{device}' (expected cpu or gpu)")
    try:
        devs = jax.devices(platform)
    except RuntimeError as e:
        import os

        hint = " (install the CUDA plugin: pip install 'jax[cuda12]')" if platform == "gpu" else ""
        env = os.environ.get("JAX_PLATFORMS")
        if env and platform == "gpu" and not any(p in env for p in ("cuda", "gpu", "rocm")):
            hint = f" (JAX_PLATFORMS={env} excludes it)"
        raise JaxprError(
            f"device '{device}' is not available: JAX found no {platform} backend{hint}: {str(e).splitlines()[0]}"
        ) from None
    if not devs:
        raise JaxprError(f"device '{device}' is not available: JAX found no {platform} devices")
    return devs[0]


def _to_numpy(outs):
    import numpy as np

    return [np.asarray(o) for o in outs]


_JIT_CACHE: dict = {}  # (id(jaxpr), dims) -> (jaxpr, jitted); the jaxpr is held so its id stays unique


def _jitted(jaxpr, dims, nested: bool = False):
    import jax

    key = (id(jaxpr), tuple(sorted((dims or {}).items())), nested)
    hit = _JIT_CACHE.get(key)
    if hit is not None and hit[0] is jaxpr:
        return hit[1]
    if len(_JIT_CACHE) >= 64:
        _JIT_CACHE.pop(next(iter(_JIT_CACHE)))
    fn = jax.jit(as_jax_function(jaxpr, dims, enable_x64=False, nested=nested))
    _JIT_CACHE[key] = (jaxpr, fn)
    return fn


def evaluate(jaxpr, args, consts=None, device: str = "cpu", dims=None, jitted=None):
    """Run a jaxpr compiled by XLA (through jax.jit) and return numpy arrays.

    The compiled function is cached per jaxpr object (and dims), so evaluating the same
    jaxpr again with same-typed inputs does not recompile.
    """
    import jax

    from . import sharding

    check_runnable(jaxpr)
    if sharding.is_multi_device(jaxpr):
        return sharding.evaluate(jaxpr, args, consts or [], dims, device=device, jitted=jitted)
    dev = get_device(device)
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


def _with_nested(jaxpr, consts) -> bool:
    """Whether `consts` also holds the nested jaxprs' constants (a JaxprError if the count
    fits neither way)."""
    from .consts import check_count

    if len(consts) == len(jaxpr.constvars):
        return False
    check_count(jaxpr, len(consts))
    return True


def compile_error(jaxpr, e: Exception) -> JaxprError:
    """JAX's complaint while lowering or compiling, located at the first equation whose
    primitive the message names (`_sin_lowering() got an unexpected keyword ...`)."""
    import re

    from ..core import all_eqns

    msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    for eqn in all_eqns(jaxpr):
        if re.search(rf"\b_?{re.escape(eqn.prim)}_lowering\b", msg):
            return JaxprError(
                f"'{eqn.prim}' could not be compiled by JAX: {type(e).__name__}: {msg} "
                "(check its parameters)",
                eqn.loc,
            )
    return JaxprError(f"JAX could not compile the program: {type(e).__name__}: {msg}")


def eval_eager(
    jaxpr,
    args,
    consts=None,
    trace=None,
    debug_nans=False,
    dims=None,
    device: str = "cpu",
    observer=None,
):
    """Run op by op with Python control flow; trace(line) gets each equation's summary and
    `observer.eval_step(eqn, invals, outs)` each top-level equation's values."""
    import jax

    from . import sharding
    from .evaluator import Interpreter

    check_runnable(jaxpr)
    if sharding.is_multi_device(jaxpr):
        return sharding.evaluate(
            jaxpr, args, consts or [], dims, device, eager=True, trace=trace, debug_nans=debug_nans
        )
    dev = get_device(device)
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
