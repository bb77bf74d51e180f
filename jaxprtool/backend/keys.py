"""PRNG key types (`key<fry>[]`) at the boundary: passed in and out as their uint32 key data."""

from __future__ import annotations

from ..core import JaxprError, ShapedArray


def is_key(t) -> bool:
    return isinstance(t, ShapedArray) and t.dtype.startswith("key<")


def key_impl(t: ShapedArray):
    """The installed JAX's PRNGImpl of a key type, by the tag printed inside `key<...>`."""
    from jax._src.random import prng

    tag = t.dtype[len("key<") : -1]
    for impl in prng.prngs.values():
        if impl.tag == tag or impl.name == tag:
            return impl
    raise JaxprError(f"unknown PRNG implementation '{tag}' in type {t}")


def data_shape(t: ShapedArray, shape: tuple[int, ...]) -> tuple[int, ...]:
    """Shape of the uint32 key data that stands for a key array of this type."""
    return tuple(shape) + tuple(key_impl(t).key_shape)


def wrap(t: ShapedArray, x):
    import jax

    return jax.random.wrap_key_data(x, impl=key_impl(t).name)


def unwrap(x):
    import jax
    import jax.numpy as jnp

    if hasattr(x, "dtype") and jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
        return jax.random.key_data(x)
    return x
