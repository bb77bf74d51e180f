"""PRNG primitives: keys (`key<impl>[...]`), random bits, splits, threefry."""

from __future__ import annotations

from ..ad.registry import defjvp_zero
from ..core import ShapedArray
from ..record import define
from . import ShapeError, shape_rule
from .util import (
    arr,
    broadcast_shapes,
    dtype_param,
    int_param,
    ints,
    is_key_dtype,
    mk,
    nargs,
    need,
    one_arr,
)

#: trailing key-data shape of each PRNG implementation
KEY_SHAPES = {"fry": (2,), "threefry2x32": (2,), "rbg": (4,), "unsafe_rbg": (4,)}


def _impl(params, default="fry") -> str:
    v = params.get("impl", default)
    s = str(v)
    for name in ("threefry2x32", "unsafe_rbg", "rbg", "fry"):
        if name in s:
            return {"threefry2x32": "fry"}.get(name, name)
    return s


def _key(t, prim, i=0) -> ShapedArray:
    x = arr(t, prim, i)
    if not is_key_dtype(x.dtype):
        raise ShapeError(f"{prim} expects a PRNG key array, got {x}")
    return x


def _key_impl(x: ShapedArray) -> str:
    return x.dtype[4:-1]


@shape_rule("random_seed")
def _random_seed(in_types, params, out_hint):
    x = one_arr(in_types, "random_seed")
    return [x.update(dtype=f"key<{_impl(params)}>", weak_type=False)]


@shape_rule("random_bits")
def _random_bits(in_types, params, out_hint):
    nargs(in_types, 1, "random_bits")
    k = _key(in_types[0], "random_bits")
    bw = int_param(params, "bit_width")
    if bw not in (8, 16, 32, 64):
        raise ShapeError(f"random_bits: bit_width must be 8, 16, 32 or 64, got {bw}")
    shape = ints(need(params, "shape"))
    return [k.update(shape=k.shape + shape, dtype=f"u{bw}", weak_type=False)]


@shape_rule("random_split")
def _random_split(in_types, params, out_hint):
    nargs(in_types, 1, "random_split")
    k = _key(in_types[0], "random_split")
    return [k.update(shape=k.shape + ints(need(params, "shape")))]


@shape_rule("random_fold_in")
def _random_fold_in(in_types, params, out_hint):
    nargs(in_types, 2, "random_fold_in")
    k = _key(in_types[0], "random_fold_in")
    arr(in_types[1], "random_fold_in", 1)
    return [k]


@shape_rule("random_clone")
def _random_clone(in_types, params, out_hint):
    nargs(in_types, 1, "random_clone")
    return [_key(in_types[0], "random_clone")]


@shape_rule("random_wrap")
def _random_wrap(in_types, params, out_hint):
    x = one_arr(in_types, "random_wrap")
    impl = _impl(params)
    ks = KEY_SHAPES.get(impl, (2,))
    if x.dtype != "u32":
        raise ShapeError(f"random_wrap expects u32 key data, got {x.dtype}")
    if x.ndim < len(ks) or tuple(x.shape[x.ndim - len(ks) :]) != ks:
        raise ShapeError(
            f"random_wrap: key data {x} must end with the key shape {ks} of impl '{impl}'"
        )
    return [x.update(shape=x.shape[: x.ndim - len(ks)], dtype=f"key<{impl}>", weak_type=False)]


@shape_rule("random_unwrap")
def _random_unwrap(in_types, params, out_hint):
    nargs(in_types, 1, "random_unwrap")
    k = _key(in_types[0], "random_unwrap")
    ks = KEY_SHAPES.get(_key_impl(k), (2,))
    return [k.update(shape=k.shape + ks, dtype="u32", weak_type=False)]


@shape_rule("random_gamma")
def _random_gamma(in_types, params, out_hint):
    nargs(in_types, 2, "random_gamma")
    _key(in_types[0], "random_gamma")
    a = arr(in_types[1], "random_gamma", 1)
    return [a]


@shape_rule("rng_bit_generator")
def _rng_bit_generator(in_types, params, out_hint):
    k = one_arr(in_types, "rng_bit_generator")
    d = dtype_param(need(params, "dtype"))
    shape = ints(need(params, "shape"))
    return [k, ShapedArray(shape, d)]


@shape_rule("rng_uniform")
def _rng_uniform(in_types, params, out_hint):
    nargs(in_types, 2, "rng_uniform")
    a = arr(in_types[0], "rng_uniform", 0)
    return [a.update(shape=ints(need(params, "shape")))]


@shape_rule("threefry2x32")
def _threefry(in_types, params, out_hint):
    nargs(in_types, 4, "threefry2x32")
    ts = [arr(t, "threefry2x32", i) for i, t in enumerate(in_types)]
    for i, t in enumerate(ts):
        if t.dtype != "u32":
            raise ShapeError(f"threefry2x32 expects u32 operands, got {t.dtype} at position {i}")
    shape = broadcast_shapes("threefry2x32", ts)
    return [mk(shape, "u32", False, ts)] * 2


@shape_rule("iota_2x32_shape")
def _iota_2x32(in_types, params, out_hint):
    shape = ints(need(params, "shape"))
    return [ShapedArray(shape, "u32")] * 2


# ---------------------------------------------------------------- properties

for _n in (
    "random_bits",
    "random_fold_in",
    "random_gamma",
    "random_seed",
    "random_split",
    "rng_bit_generator",
    "rng_uniform",
):
    define(_n, random=True)
define("rng_bit_generator", multiple_results=True)
defjvp_zero("iota_2x32_shape")
