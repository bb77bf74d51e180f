"""A program as a JAX function (`as_jax_function`), and what running one needs around it:
64-bit mode, the runnable check, key wrapping, the device, located compile errors.  Shared by
the single-device runner (`backend/__init__.py`) and the multi-device one (`sharding.py`), so
neither imports the other's module for them.  jax is imported lazily."""

from __future__ import annotations

from ..core import JaxprError
from .evaluator import refusal


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
    from ..expansion import refuse_large

    err = named_axes_refusal(jaxpr, "running")
    if err is not None:
        raise err
    refuse_large(jaxpr)
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


def as_jax_function(
    jaxpr, dims=None, enable_x64: bool = True, nested: bool = False, placement=None
):
    """f(*consts, *args) -> list of outputs; traceable by jax.jit, jax.grad, jax.vmap, ...

    With 64-bit types in the program, jax_enable_x64 is switched on (globally) unless
    enable_x64=False (the caller then scopes it, as evaluate() does).  nested=True: `consts`
    also holds the nested jaxprs' constants (`backend/consts.py`, `all_constvars` order).
    `placement`: how calls place their operands and results (see `Interpreter`).
    """
    from .consts import all_constvars, split
    from .evaluator import Interpreter
    from .prims import primitive_table

    # JAX's modules the primitives come from are imported before the first trace, not
    # during it: one of them (jax.extend, through Pallas) registers configuration that is
    # part of jax.jit's cache key, and a program traced before it was registered missed the
    # cache on its next run (check-grad compiled its finite differences' program twice)
    primitive_table()
    if enable_x64:
        prepare(jaxpr)
    cvars = all_constvars(jaxpr) if nested else list(jaxpr.constvars)
    nc = len(cvars)

    def f(*xs):
        xs = _wrap_keys(jaxpr, xs, cvars + list(jaxpr.invars))
        top, inner = split(jaxpr, xs[:nc])
        interp = Interpreter("jit", dims=dims, nested=inner, root=jaxpr, placement=placement)
        outs = interp.run(jaxpr, top, xs[nc:])
        return _unwrap_keys(jaxpr, outs)

    from .evaluator import module_name

    f.__name__ = f.__qualname__ = module_name(jaxpr)  # XLA's module: jit_<file's stem>
    f.__signature__ = _binder_signature(cvars + list(jaxpr.invars))  # JAX's argument names
    return f


def _binder_signature(binders):
    """A signature whose parameters are the binders' names (`a`, `b`, ...; unique, else
    `argN`), which JAX gives XLA's parameters instead of `xs[0]`, `xs[1]`."""
    import inspect

    names, seen = [], set()
    for i, v in enumerate(binders):
        n = v.hint if v.hint and v.hint.isidentifier() and v.hint not in seen else f"arg{i}"
        while n in seen:
            n = f"{n}_"
        seen.add(n)
        names.append(inspect.Parameter(n, inspect.Parameter.POSITIONAL_ONLY))
    return inspect.Signature(names)


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


_PLATFORMS = {"gpu": "gpu", "cuda": "gpu", "cpu": "cpu", "tpu": "tpu"}


def get_device(device: str = "cpu"):
    """The first JAX device of a platform ("auto": JAX's default backend), or a JaxprError
    that names what is missing and what JAX found instead."""
    import jax

    from ..core import JaxprError

    platform = _PLATFORMS.get(device)
    if platform is None and device != "auto":
        raise JaxprError(f"unknown device '{device}' (expected cpu, gpu, tpu or auto)")
    _start_backends(device)
    if device == "auto":
        return jax.devices()[0]
    try:
        devs = jax.devices(platform)
    except RuntimeError as e:
        raise JaxprError(
            f"device '{device}' is not available: JAX found no {platform} backend"
            f"{_missing_hint(platform)}: {_first_sentence(e)}; {_found()}"
        ) from None
    if not devs:
        raise JaxprError(
            f"device '{device}' is not available: JAX found no {platform} devices; {_found()}"
        )
    return devs[0]


def _start_backends(device: str) -> None:
    """Start JAX's backends, or raise a JaxprError saying why none could start.  JAX fails
    as a whole when one backend cannot start: JAX_PLATFORMS naming only platforms absent
    here (an AssertionError with no message), or a TPU another process holds (a
    RuntimeError for every platform, cpu included).  For `--device cpu` the other backends
    are then left out (JAX_PLATFORMS=cpu for this process) and the run goes on, with a
    warning, unless the user's JAX_PLATFORMS leaves out cpu."""
    import os

    import jax

    from ..core import JaxprError

    try:
        jax.devices()
        return
    except AssertionError:
        env = os.environ.get("JAX_PLATFORMS", "")
        raise JaxprError(
            f"JAX started no backend: JAX_PLATFORMS={env} names no platform that can start "
            "here (no such device, or its plugin is not installed); unset JAX_PLATFORMS, or "
            "set JAX_PLATFORMS=cpu"
        ) from None
    except RuntimeError as e:
        reason = _start_failure(e)
        env = os.environ.get("JAX_PLATFORMS", "")
        cpu_allowed = not env or "cpu" in env.split(",")
        if device == "cpu" and cpu_allowed and _only_cpu():
            import sys

            sys.stderr.write(f"warning: {reason}: running on the CPU alone\n")
            return
        hint = "--device cpu runs on the CPU alone (or set JAX_PLATFORMS=cpu)"
        raise JaxprError(
            f"{reason}; {hint if device != 'cpu' else 'set JAX_PLATFORMS=cpu'}"
        ) from None


def _start_failure(e: RuntimeError) -> str:
    """JAX's `Unable to initialize backend 'tpu': WHY (you may need to ...)` as
    `JAX could not start its tpu backend (WHY)`."""
    import re

    text = " ".join(str(e).split())
    text = re.sub(r" \((you may need to|set JAX_PLATFORMS)[^()]*\)\.?$", "", text)
    m = re.match(r"Unable to initialize backend '([^']*)': (.*)", text)
    if m is None:
        return f"JAX could not start its backends ({text[:300]})"
    return f"JAX could not start its {m.group(1)} backend ({m.group(2)[:300]})"


def _only_cpu() -> bool:
    """Restart JAX's backends with the CPU alone; False where this JAX cannot."""
    import jax

    try:
        from jax._src import xla_bridge

        xla_bridge._clear_backends()
        jax.config.update("jax_platforms", "cpu")
        jax.devices("cpu")
    except Exception:  # noqa: BLE001 - any failure: report the original reason
        return False
    return True


def platform_of(device: str) -> str:
    """The platform name JAX lowers for ("cpu", "cuda", "tpu"), "auto" resolved."""
    if device in ("cpu", "tpu"):
        return device
    if device in ("gpu", "cuda"):
        return "cuda"
    return get_device(device).platform.replace("gpu", "cuda")


def _first_sentence(e: Exception) -> str:
    """JAX's reason, without the list of backends it goes on with (said by `_found`)."""
    return str(e).splitlines()[0].split(". Available backends")[0].split(". Platforms present")[0]


def _missing_hint(platform: str) -> str:
    import os

    env = os.environ.get("JAX_PLATFORMS")
    if env and platform not in env and not (platform == "gpu" and ("cuda" in env or "rocm" in env)):
        return f" (JAX_PLATFORMS={env} excludes it)"
    if platform == "gpu":
        return " (install the CUDA plugin: pip install 'jax[cuda12]')"
    if platform == "tpu":
        return " (on a Cloud TPU VM: pip install 'jax[tpu]')"
    return ""


def _found() -> str:
    """What JAX found: 'JAX found 1 cpu device (TFRT_CPU_0)'."""
    import jax

    try:
        devs = jax.devices()
    except (RuntimeError, AssertionError):  # (JAX asserts when no backend started)
        return "JAX found no devices at all"
    kinds = sorted({d.platform for d in devs})
    return (
        f"JAX found {len(devs)} {'/'.join(kinds)} device{'s' if len(devs) != 1 else ''} "
        "(--device auto takes JAX's default)"
    )


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
