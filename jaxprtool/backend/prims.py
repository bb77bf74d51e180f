"""The installed JAX's primitives by name, and the conversion of IR params into bind params.

One table (`PARAM_RULES`) per primitive turns the typed parameter values of the IR
(params.py) into what the installed JAX's `Primitive.bind` expects, and supplies the
parameters that the printed text elides (they follow from the equation's types).
"""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np

from ..core import Eqn, Jaxpr, JaxprError, ShapedArray
from ..params import EnumValue, NpScalar, Opaque, Record, SymExpr
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
    "jax._src.ad_util",
    "jax._src.ad_checkpoint",
    "jax._src.custom_derivatives",
    "jax._src.pjit",
    "jax._src.dispatch",
    "jax._src.core",
    "jax._src.state.primitives",
    "jax._src.state.discharge",
)

_TABLE: dict[str, Any] | None = None


def primitive_table() -> dict[str, Any]:
    """name -> jax Primitive, built once from the installed JAX."""
    global _TABLE
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


# ---------------------------------------------------------------- value conversion

_ENUMS = {
    "GatherScatterMode": ("jax.lax", "GatherScatterMode"),
    "Precision": ("jax.lax", "Precision"),
    "RandomAlgorithm": ("jax.lax", "RandomAlgorithm"),
    "RoundingMethod": ("jax.lax", "RoundingMethod"),
    "FftType": ("jax.lax", "FftType"),
    "AccuracyMode": ("jax.lax", "AccuracyMode"),
    "DotAlgorithmPreset": ("jax.lax", "DotAlgorithmPreset"),
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


def _dtype_param(v):
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


#: params that texts of older JAX versions do not print: the installed JAX's defaults
DEFAULTS = {
    "qr": {"pivoting": False, "use_magma": None},
    "eigh": {"algorithm": None, "subset_by_index": None, "sort_eigenvalues": True},
    "svd": {"algorithm": None, "subset_by_index": None},
}


def bind_params(eqn: Eqn, dims: dict[str, int] | None = None) -> dict[str, Any]:
    """The params to bind the installed JAX's primitive with, for an ordinary equation."""
    name = eqn.prim
    p = {**DEFAULTS.get(name, {}), **eqn.params}
    rule = PARAM_RULES.get(name) or record_of(name).bind_params
    out: dict[str, Any] = {}
    special = {}
    if rule is not None:
        special = rule(eqn, p, dims or {})
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
    return out


def _dot_general(eqn, p, dims):
    return {
        "precision": to_jax(p.get("precision")),
        "preferred_element_type": _dtype_param(p.get("preferred_element_type")),
        "out_sharding": None,
    }


def _convert(eqn, p, dims):
    return {
        "new_dtype": _dtype_param(p.get("new_dtype", _out_type(eqn).np_dtype)),
        "weak_type": bool(p.get("weak_type", False)),
        "sharding": None,
    }


def _mul(eqn, p, dims):
    return {"out_dtype": _dtype_param(p["out_dtype"])} if p.get("out_dtype") is not None else {}


def _with_out_sharding(eqn, p, dims):
    return {"out_sharding": None}


def _round(eqn, p, dims):
    import jax

    m = p.get("rounding_method", 0)
    if isinstance(m, EnumValue):
        return {"rounding_method": jax.lax.RoundingMethod[m.member]}
    if isinstance(m, str):
        return {"rounding_method": jax.lax.RoundingMethod[m.split(".")[-1]]}
    return {"rounding_method": jax.lax.RoundingMethod(int(m))}


def _fft(eqn, p, dims):
    import jax

    t = p["fft_type"]
    if isinstance(t, EnumValue):
        ft = jax.lax.FftType[t.member]
    elif isinstance(t, str):
        ft = jax.lax.FftType[t.split(".")[-1]]
    else:
        ft = jax.lax.FftType(int(t))
    return {"fft_type": ft, "fft_lengths": to_jax(p["fft_lengths"])}


def _rng_bit_generator(eqn, p, dims):
    import jax

    alg = p.get("algorithm", "RNG_DEFAULT")
    alg = alg.member if isinstance(alg, EnumValue) else str(alg).split(".")[-1]
    return {
        "algorithm": jax.lax.RandomAlgorithm[alg],
        "dtype": _dtype_param(p.get("dtype")),
        "shape": _shape(_out_type(eqn, 1), dims),
        "out_sharding": None,
    }


def _dtype_keys(*keys):
    def rule(eqn, p, dims):
        return {k: _dtype_param(p[k]) for k in keys if k in p}

    return rule


def _conv(eqn, p, dims):
    return {
        "precision": to_jax(p.get("precision")),
        "preferred_element_type": _dtype_param(p.get("preferred_element_type")),
        "out_sharding": None,
    }


def _ragged(eqn, p, dims):
    return {
        "precision": to_jax(p.get("precision")),
        "preferred_element_type": _dtype_param(p.get("preferred_element_type")),
        "out_sharding": None,
        "group_offset": None,
    }


def _conj(eqn, p, dims):
    return {"input_dtype": _dtype_param(p.get("input_dtype", eqn.inputs[0].type.np_dtype))}


def _prng_impl(eqn, p, dims):
    from jax._src.random import prng

    tag = str(p.get("impl"))
    for impl in prng.prngs.values():
        if impl.tag == tag or impl.name == tag:
            return {"impl": impl}
    raise JaxprError(f"cannot run '{eqn.prim}': unknown PRNG implementation '{tag}'", eqn.loc)


def _top_k(eqn, p, dims):
    # texts of older JAX versions print neither (the last axis, stable)
    nd = eqn.inputs[0].type.ndim
    return {
        "k": int(p["k"]),
        "axis": int(p.get("axis", nd - 1)),
        "is_stable": bool(p.get("is_stable", True)),
    }


def _select_prim(eqn, p, dims):
    """`select_prim=ge` is printed as a name; bind wants the comparison primitive itself."""
    name = str(getattr(p["select_prim"], "text", p["select_prim"])).rsplit(".", 1)[-1].strip("'\"")
    table = primitive_table()
    if name not in ("ge", "le", "gt", "lt"):
        raise JaxprError(f"cannot run '{eqn.prim}': unknown select_prim={name}", eqn.loc)
    return {"select_prim": table[name]}


PARAM_RULES = {
    "select_and_gather_add": _select_prim,
    "select_and_scatter_add": _select_prim,
    "top_k": _top_k,
    "random_seed": _prng_impl,
    "random_wrap": _prng_impl,
    "dot_general": _dot_general,
    "convert_element_type": _convert,
    "mul": _mul,
    "reduce_sum": _with_out_sharding,
    "reduce_max": _with_out_sharding,
    "reduce_min": _with_out_sharding,
    "round": _round,
    "fft": _fft,
    "rng_bit_generator": _rng_bit_generator,
    "conv_general_dilated": _conv,
    "ragged_dot_general": _ragged,
    "conj": _conj,
    "argmax": _dtype_keys("index_dtype"),
    "argmin": _dtype_keys("index_dtype"),
    "bitcast_convert_type": _dtype_keys("new_dtype"),
}
