"""The installed JAX's primitives by name, and the conversion of IR params into bind params.

`bind_params` turns the typed parameter values of the IR (params.py) into what the installed
JAX's `Primitive.bind` expects: `to_jax` for every value, and the primitive's own
`bind_params` rule (its record, in its family module) for the parameters that need more
(the ones the printed text elides follow from the equation's types).  `dtype_param`,
`accuracy_param` and `to_jax` are the converters those rules use.
"""

from __future__ import annotations

import functools
import importlib
from typing import Any

import numpy as np

from ..core import Eqn, Jaxpr, JaxprError, ShapedArray
from ..params import EnumValue, NpScalar, Opaque, Record, SymExpr
from ..record import did_you_mean
from ..record import prim as record_of

#: modules that define the primitives a jaxpr can use, in priority order (names collide
#: between lax and Pallas/Mosaic; the first module wins)
_MODULES = (
    "jax._src.lax.lax",
    "jax._src.lax.slicing",
    "jax._src.lax.convolution",
    "jax._src.lax.windowed_reductions",
    "jax._src.lax.special",
    "jax._src.lax.linalg",
    "jax._src.lax.fft",
    "jax._src.lax.ann",
    "jax._src.lax.other",
    "jax._src.lax.parallel",
    "jax._src.lax.control_flow.loops",
    "jax._src.lax.control_flow.conditionals",
    "jax._src.lax.control_flow.solves",
    "jax._src.lax.eval_jaxpr",
    "jax._src.random.prng",
    "jax._src.random.core",
    "jax._src.random.threefry2x32",
    "jax._src.random",
    "jax._src.prng",  # JAX 0.10.0-0.10.1: the random primitives before jax._src.random.*
    "jax._src.ad_util",
    "jax._src.ad_checkpoint",
    "jax._src.custom_derivatives",
    "jax._src.pjit",
    "jax._src.dispatch",
    "jax._src.core",
    "jax._src.state.primitives",
    "jax._src.state.discharge",
    "jax._src.debugging",
)

_TABLE: dict[str, Any] | None = None


def primitive_table() -> dict[str, Any]:
    """name -> jax Primitive, built once from the installed JAX."""
    global _TABLE  # (why a value cannot carry it: a cache of the installed JAX, per process)
    if _TABLE is None:
        from jax._src import core as jcore

        table: dict[str, Any] = {}
        import jax.extend.core.primitives as P

        for v in vars(P).values():
            if isinstance(v, jcore.Primitive):
                table.setdefault(v.name, v)
        for m in _MODULES:
            try:
                mod = importlib.import_module(m)
            except Exception:  # noqa: BLE001 - a module missing from this JAX version
                continue
            for v in vars(mod).values():
                if isinstance(v, jcore.Primitive):
                    table.setdefault(v.name, v)
        _TABLE = table
    return _TABLE


def lookup(name: str):
    return primitive_table().get(name)


# ---------------------------------------------------------------- the installed JAX's version


def version_tuple(text: str) -> tuple[int, ...]:
    """`"0.10.2"` -> (0, 10, 2); `"0.12.0.1"`, `"0.11.0.dev20250101"` -> their numbers."""
    import re

    nums = []
    for part in text.split("."):
        m = re.match(r"\d+", part)
        if m is None:
            break
        nums.append(int(m.group()))
    return tuple(nums)


@functools.cache
def installed_version() -> tuple[int, ...]:
    """The installed JAX's version, e.g. (0, 10, 2)."""
    import jax

    return version_tuple(jax.__version__)


def version_text(v: tuple[int, ...]) -> str:
    return ".".join(map(str, v))


def older_form(eqn: Eqn) -> list[Eqn] | None:
    """The equations, of primitives older JAX versions have, that compute `eqn` where the
    installed JAX cannot bind its primitive (it has none of that name, or it is older than
    the record's `first_version`): the record's `restyle` rule for the installed version's
    style, when that rule replaces the equation.  None: bind the primitive itself."""
    rec = record_of(eqn.prim)
    if rec.restyle is None:
        return None
    if lookup(eqn.prim) is not None and (
        rec.first_version is None or installed_version() >= tuple(rec.first_version)
    ):
        return None
    from ..text.style import Style

    form = rec.restyle(eqn.prim, dict(eqn.params), eqn, Style(installed_version()))
    return form if isinstance(form, list) else None


def missing_message(eqn: Eqn) -> str:
    """Why the installed JAX cannot bind `eqn`'s primitive, which it lacks."""
    first = record_of(eqn.prim).first_version
    since = f" (JAX {version_text(tuple(first))} added it)" if first else ""
    return (
        f"cannot run '{eqn.prim}': the installed JAX ({version_text(installed_version())}) "
        f"has no primitive of that name{since}{did_you_mean(eqn.prim)}"
    )


def older_jax_table() -> str:
    """docs/OLDER_JAX.md's table of what the back end lowers for an older installed JAX, from the
    records: each primitive with a `first_version` (its older form: the first sentence of its
    `restyle` rule's docstring; a call runs its body), each parameter of `params_since`."""
    from ..record import records

    def since(v) -> str:
        return version_text(tuple(v))

    def form(rec) -> str:
        if rec.call_body is not None or rec.evaluate is not None:
            return "runs its body (a call: never bound)"
        if rec.restyle is None:
            return "refused at its equation (no older form)"
        doc = " ".join((rec.restyle.__doc__ or "").split())
        return "runs as " + doc.split(". ")[0].rstrip(".")

    rows = ["| primitive or parameter | first JAX with it | with an older JAX installed |"]
    rows.append("|---|---|---|")
    recs = records()
    for name in sorted(recs, key=lambda n: (tuple(recs[n].first_version or ()), n)):
        rec = recs[name]
        if rec.first_version is not None:
            rows.append(f"| `{name}` | {since(rec.first_version)} | {form(rec)} |")
    for name in sorted(recs):
        for param, (first, old) in sorted((recs[name].params_since or {}).items()):
            rows.append(
                f"| `{name}` `{param}` | {since(first)} | left out when `{old!r}` (what older "
                f"JAX always did), refused at its equation otherwise; a text lacking it "
                f"runs with `{old!r}` on a newer JAX |"
            )
    return "\n".join(rows) + "\n"


# ---------------------------------------------------------------- value conversion

_ENUMS = {
    "GatherScatterMode": ("jax.lax", "GatherScatterMode"),
    "Precision": ("jax.lax", "Precision"),
    "RandomAlgorithm": ("jax.lax", "RandomAlgorithm"),
    "RoundingMethod": ("jax.lax", "RoundingMethod"),
    "FftType": ("jax.lax", "FftType"),
    "AccuracyMode": ("jax.lax", "AccuracyMode"),
    "DotAlgorithmPreset": ("jax.lax", "DotAlgorithmPreset"),
    "MemorySpace": ("jax._src.core", "MemorySpace"),
    "ArrayCopySemantics": ("jax._src.dispatch", "ArrayCopySemantics"),
}

_RECORDS = {
    "GatherDimensionNumbers": ("jax.lax", "GatherDimensionNumbers"),
    "ScatterDimensionNumbers": ("jax.lax", "ScatterDimensionNumbers"),
    "ConvDimensionNumbers": ("jax.lax", "ConvDimensionNumbers"),
    "RaggedDotDimensionNumbers": ("jax.lax", "RaggedDotDimensionNumbers"),
}


def _attr(spec):
    mod, name = spec
    return getattr(importlib.import_module(mod), name)


class Unconvertible(Exception):
    pass


def to_jax(v: Any, dims: dict[str, int] | None = None) -> Any:
    """A typed IR value -> a hashable value of the installed JAX's kind (symbolic dims sized by dims)."""
    if isinstance(v, SymExpr) and dims is not None:
        from .values import eval_dim

        return eval_dim(v.text, dims)
    if isinstance(v, bool) or v is None or isinstance(v, (int, float, complex, str, np.dtype)):
        return v
    if isinstance(v, NpScalar):
        return np.dtype(v.dtype).type(v.value).item()
    if isinstance(v, (tuple, list)):
        return tuple(to_jax(x, dims) for x in v)
    if isinstance(v, frozenset):
        return frozenset(to_jax(x, dims) for x in v)
    if isinstance(v, EnumValue):
        if v.cls in _ENUMS:
            return _attr(_ENUMS[v.cls])[v.member]
        raise Unconvertible(str(v))
    if isinstance(v, Record):
        if v.cls in _RECORDS:
            return _attr(_RECORDS[v.cls])(**{k: to_jax(x, dims) for k, x in v.fields})
        raise Unconvertible(str(v))
    if isinstance(v, (Opaque, SymExpr, Jaxpr)):
        raise Unconvertible(str(v) if not isinstance(v, Jaxpr) else "jaxpr")
    return v


def _out_type(eqn: Eqn, i: int = 0) -> ShapedArray:
    return eqn.outputs[i].type


def _shape(t, dims) -> tuple[int, ...]:
    from .values import static_shape

    return static_shape(t, dims)


def dtype_param(v):
    """A dtype-valued param: np.dtype, a printed name, or `<class 'jax.numpy.float32'>`."""
    if v is None or isinstance(v, np.dtype):
        return v
    text = str(v)
    if "jax.numpy." in text:
        text = text.split("jax.numpy.")[1].rstrip("'>")
    from ..core import np_dtype, short_dtype_name

    try:
        return np_dtype(short_dtype_name(text))
    except KeyError:
        raise Unconvertible(text) from None


def accuracy_param(v):
    if v is None:
        return None
    try:
        return to_jax(v)
    except Unconvertible:
        return None  # a Tolerance object prints as an address: the default accuracy is used


def bind_params(eqn: Eqn, dims: dict[str, int] | None = None) -> dict[str, Any]:
    """The params to bind the installed JAX's primitive with, for an ordinary equation."""
    name = eqn.prim
    p = dict(eqn.params)
    rule = record_of(name).bind_params
    out: dict[str, Any] = {}
    special = {}
    if rule is not None:
        try:
            special = rule(eqn, p, dims or {})
        except Unconvertible as e:
            raise JaxprError(
                f"cannot run '{name}': parameter value {e} cannot be reconstructed from the text",
                eqn.loc,
            ) from None
    for k, v in p.items():
        if k in special:
            continue
        try:
            out[k] = to_jax(v, dims or {})
        except Unconvertible as e:
            raise JaxprError(
                f"cannot run '{name}': parameter {k}={e} cannot be reconstructed from the text",
                eqn.loc,
            ) from None
    out.update(special)
    versioned_params(eqn, out)
    dropped = sorted(
        set(eqn.params)
        - set(out)
        - record_of(name).evaluated_params
        - set(record_of(name).params_since or ())
    )
    if dropped:
        raise JaxprError(
            f"cannot run '{name}': the back end does not pass its parameter"
            f"{'s' if len(dropped) > 1 else ''} {', '.join(dropped)} to JAX",
            eqn.loc,
        )
    return out


def versioned_params(eqn: Eqn, out: dict[str, Any]) -> None:
    """Fit `out` to the installed JAX's primitive by the record's `params_since`: a parameter
    JAX added after the text's version was printed gets the value older JAX always used (the
    newer primitive requires it); one the installed JAX does not take yet is left out where
    it holds that value, and refused at its equation where it holds another."""
    since = record_of(eqn.prim).params_since
    if not since:
        return
    installed = installed_version()
    for k, (first, old) in since.items():
        if installed >= tuple(first):
            out.setdefault(k, old)
            continue
        if k not in out:
            continue
        v = out.pop(k)
        if v != old:
            raise JaxprError(
                f"cannot run '{eqn.prim}' with {k}={v!r}: the installed JAX "
                f"({version_text(installed)}) takes no parameter {k} (JAX "
                f"{version_text(tuple(first))} added it) and always runs {k}={old!r}",
                eqn.loc,
            )
