"""Plugins: user Python modules that add rules for primitives the tool does not know, or supply
the custom derivative rules a printed jaxpr cannot contain.  See docs/PLUGINS.md.

A plugin is a `.py` file loaded with `jaxprtool --plugin RULES.py COMMAND ...`; at import time it
calls the helpers below.  Plugins are trusted code (they run with your permissions); jaxpr
input files never are.
"""

from __future__ import annotations

import importlib.util
import os
import stat
import sys
from collections.abc import Callable, Iterable

from .ad import ops  # noqa: F401  (re-exported for plugin authors)
from .ad.registry import (  # noqa: F401  (re-exported for plugin authors)
    Accumulator,
    UndefinedPrimal,
    Zero,
    custom_jvps,
    custom_vjps,
    defbilinear,
    defjvp,
    defjvp2,
    defjvp_zero,
    deflinear,
    deflinear2,
    fancy_transposes,
    is_undefined_primal,
    is_zero,
    primitive_jvps,
    primitive_transposes,
    rule_kind,
)
from .core import JaxprError
from .record import define, prim

__all__ = [
    "load_plugins",
    "register_shape_rule",
    "register_impl",
    "register_custom_jvp",
    "register_custom_vjp",
    "ops",
    "defjvp",
    "defjvp2",
    "deflinear",
    "deflinear2",
    "defbilinear",
    "defjvp_zero",
    "primitive_jvps",
    "primitive_transposes",
    "fancy_transposes",
    "rule_kind",
    "Zero",
    "is_zero",
    "UndefinedPrimal",
    "is_undefined_primal",
    "Accumulator",
]


def register_shape_rule(name: str, fn: Callable) -> None:
    """`fn(in_types, params, out_hint) -> list[Type]` becomes the shape rule of primitive `name`."""
    define(name, shape_rule=fn)


def register_impl(name: str, fn: Callable) -> None:
    """`fn(*arrays, **params) -> array | list[array]` evaluates primitive `name` in `run` (called
    inside JAX tracing: use jax.numpy)."""
    from .backend import IMPLS

    IMPLS[name] = fn


def register_custom_jvp(name: str, fn: Callable) -> None:
    """The JVP rule of `custom_jvp_call[... jvp=NAME ...]`.

    `fn(primals: list[Atom], tangents: list[Atom]) -> (outs | None, tangent_outs)`, written with
    `ops` (tangents are instantiated: never Zero).  Return `None` as `outs` to keep the primal
    `custom_jvp_call` equation itself."""
    custom_jvps[name] = fn
    rule_kind[f"custom_jvp_call[jvp={name}]"] = "plugin"


def register_custom_vjp(name: str, fwd: Callable, bwd: Callable) -> None:
    """The rules of `custom_vjp_call[... fwd=NAME bwd=NAME2 ...]` (register under either name).

    `fwd(*primals) -> (outs: list[Atom], residuals: list[Atom])` and
    `bwd(residuals: list[Atom], cts: list[Atom]) -> list[Atom | Zero]` (one cotangent per primal
    input), written with `ops`."""
    custom_vjps[name] = (fwd, bwd)
    rule_kind[f"custom_vjp_call[fwd={name}]"] = "plugin"


_loaded: dict[str, object] = {}

_RULE_FIELDS = ("jvp", "transpose", "fancy_transpose")


def _ad_rules() -> dict[str, tuple]:
    from .record import records

    return {n: tuple(getattr(r, f) for f in _RULE_FIELDS) for n, r in records().items()}


def load_plugins(paths: Iterable[str]) -> list[object]:
    """Import each plugin file (once per path); a failing plugin is a JaxprError naming it.

    A plugin runs with the user's permissions, so it is read from its source alone (no
    `__pycache__` bytecode is read or written: another user could plant one beside a plugin
    in a shared folder), and only when no one else could have written it: the file and its
    folder follow the caches' ownership rule (`plugin_refusal`)."""
    mods = []
    for p in paths:
        full = os.path.abspath(p)
        if full in _loaded:
            mods.append(_loaded[full])
            continue
        name = f"jaxprtool_plugin_{len(_loaded)}_{os.path.splitext(os.path.basename(full))[0]}"
        code = _compiled_source(p, full)
        spec = importlib.util.spec_from_loader(name, loader=None, origin=full)
        mod = importlib.util.module_from_spec(spec)
        mod.__file__ = full
        sys.modules[name] = mod
        before = _ad_rules()
        try:
            exec(code, mod.__dict__)  # the user's own plugin, asked for by --plugin
        except JaxprError:
            raise
        except Exception as e:  # a plugin is user code: report, don't crash
            sys.modules.pop(name, None)
            raise JaxprError(f"cannot load plugin '{p}': {type(e).__name__}: {e}") from None
        for prim_name, rules in _ad_rules().items():
            old = before.get(prim_name, (None,) * len(_RULE_FIELDS))
            for f, r, o in zip(_RULE_FIELDS, rules, old):
                if r is not None and r is not o:
                    kind = "jvp" if f == "jvp" else "transpose"
                    sources = dict(prim(prim_name).plugin_sources or {}, **{kind: p})
                    define(prim_name, plugin_sources=sources)
        _loaded[full] = mod
        mods.append(mod)
    return mods


def _compiled_source(p: str, full: str):
    """The plugin's source, read through one descriptor whose owner and mode are checked,
    compiled (never through a bytecode cache)."""
    try:
        fd = os.open(full, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise JaxprError(f"cannot load plugin '{p}': no such file") from None
    except OSError as e:
        raise JaxprError(f"cannot load plugin '{p}': {e.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        why = plugin_refusal(os.fstat(fd), os.path.dirname(os.path.realpath(full)))
        if why:
            raise JaxprError(
                f"cannot load plugin '{p}': {why}; a plugin runs as you, so it must be "
                "yours (or root's) and writable by no one else, in a folder no one else can "
                "write to (or a sticky one, as /tmp): move it to a folder of your own or "
                "`chmod go-w` it"
            )
        source = f.read()
    try:
        return compile(source, full, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as e:
        raise JaxprError(f"cannot load plugin '{p}': {type(e).__name__}: {e}") from None


def plugin_refusal(st: os.stat_result, folder: str) -> str | None:
    """Why a plugin file (`st`, from its open descriptor) in `folder` is not trusted, or None:
    the caches' rule (`cachefs`), except that a file may also be root's."""
    from .cachefs import shared_folder_refusal, uid, writable_refusal

    if not stat.S_ISREG(st.st_mode):
        return "it is not a regular file"
    why = writable_refusal(st, (uid(), 0))
    if why:
        return f"the file {why}"
    try:
        why = shared_folder_refusal(os.stat(folder))
    except OSError as e:
        return f"its folder cannot be read ({e.strerror})"
    return f"its folder {why}" if why else None
