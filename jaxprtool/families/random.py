"""The PRNG family: keys (`key<impl>[...]`), seeds, random bits, splits, threefry, the
stateless `rng_*` generators and gamma sampling.

Keys, bits and seeds carry no derivative (`defjvp_zero`).  `random_gamma` is differentiable in
its shape parameter `a` by implicit differentiation of the sample `x` through the regularized
lower incomplete gamma function P(a, x) (the CDF, held fixed at the uniform draw):

    dx/da = -(dP/da) / (dP/dx),   dP/dx = x**(a-1) * exp(-x) / Gamma(a),

where dP/da is `igamma_grad_a(a, x)` (JAX's `random_gamma_grad` computes the same quantity with
its own series).  With `log_space=True` the sample is log(x), so the tangent is divided by x.

The primitives that draw numbers are `random` (never merged by CSE).
"""

from __future__ import annotations

from ..ad import ops
from ..ad.ops import ty
from ..ad.registry import defjvp2, defjvp_zero
from ..core import JaxprError, Literal, ShapedArray
from ..lazy import lazy_module, np
from ..params import EnumValue
from ..record import batching_rule, define
from ..shapes import ShapeError, shape_rule
from ..shapes.util import (
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

#: the vmap machinery, executed when a batching rule first runs
BT = lazy_module("jaxprtool.ad.batching")

# ---------------------------------------------------------------- keys

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


def _bind_prng_impl(eqn, p, dims):
    """`impl=fry` is printed as a tag; bind wants the PRNG implementation itself."""
    from jax._src.random import prng

    tag = str(p.get("impl"))
    for impl in prng.prngs.values():
        if impl.tag == tag or impl.name == tag:
            return {"impl": impl}
    raise JaxprError(f"cannot run '{eqn.prim}': unknown PRNG implementation '{tag}'", eqn.loc)


# ---------------------------------------------------------------- random_seed


@shape_rule("random_seed", random=True)
def _random_seed(in_types, params, out_hint):
    x = one_arr(in_types, "random_seed")
    return [x.update(dtype=f"key<{_impl(params)}>", weak_type=False)]


defjvp_zero("random_seed")
define(
    "random_seed", bind_params=_bind_prng_impl, batching=batching_rule("vectorized", "random_seed")
)

# ---------------------------------------------------------------- random_bits


@shape_rule("random_bits", random=True)
def _random_bits(in_types, params, out_hint):
    nargs(in_types, 1, "random_bits")
    k = _key(in_types[0], "random_bits")
    bw = int_param(params, "bit_width")
    if bw not in (8, 16, 32, 64):
        raise ShapeError(f"random_bits: bit_width must be 8, 16, 32 or 64, got {bw}")
    shape = ints(need(params, "shape"))
    streams = int_param(params, "num_streams", 1)
    return [k.update(shape=k.shape + shape, dtype=f"u{bw}", weak_type=False)] * streams


defjvp_zero("random_bits")
# JAX 0.12.1 added `num_streams` (that many results; older versions made one) and
# `out_sharding` (None: the sharding JAX infers) to random_bits, and `out_sharding` to
# random_split and random_gamma
define(
    "random_bits",
    batching=batching_rule("vectorized", "random_bits"),
    params_since={"num_streams": ((0, 12, 1), 1), "out_sharding": ((0, 12, 1), None)},
)

# ---------------------------------------------------------------- random_split


@shape_rule("random_split", random=True)
def _random_split(in_types, params, out_hint):
    nargs(in_types, 1, "random_split")
    k = _key(in_types[0], "random_split")
    return [k.update(shape=k.shape + ints(need(params, "shape")))]


defjvp_zero("random_split")
define(
    "random_split",
    batching=batching_rule("vectorized", "random_split"),
    params_since={"out_sharding": ((0, 12, 1), None)},
)

# ---------------------------------------------------------------- random_fold_in


@shape_rule("random_fold_in", random=True)
def _random_fold_in(in_types, params, out_hint):
    nargs(in_types, 2, "random_fold_in")
    k = _key(in_types[0], "random_fold_in")
    arr(in_types[1], "random_fold_in", 1)
    return [k]


def _fold_in_batching(args, dims, **params):
    """JAX's rule is `defbroadcasting`; the checker's `random_fold_in` takes operands of one
    shape (or a scalar message), so an unbatched operand is broadcast to the batch."""
    (k, m), (kd, md) = args, dims
    shape, ndim = BT.shape_of, BT.ndim
    if kd is not None and (md is None and ndim(m) == 0 or md == kd and shape(m) == shape(k)):
        return BT.bind("random_fold_in", k, m, **params), [kd]
    k, m = BT.bdim_at_front(k, kd), BT.bdim_at_front(m, md)
    if ndim(m) < ndim(k):
        m = ops.broadcast_in_dim(m, shape(k), tuple(range(ndim(m))))
    if ndim(k) < ndim(m):
        k = ops.broadcast_in_dim(k, shape(m), tuple(range(ndim(k))))
    return BT.bind("random_fold_in", k, m, **params), [0]


defjvp_zero("random_fold_in")
define("random_fold_in", batching=_fold_in_batching)

# ---------------------------------------------------------------- random_clone


@shape_rule("random_clone")
def _random_clone(in_types, params, out_hint):
    nargs(in_types, 1, "random_clone")
    return [_key(in_types[0], "random_clone")]


defjvp_zero("random_clone")
define("random_clone", batching=batching_rule("vectorized", "random_clone"))

# ---------------------------------------------------------------- random_wrap, random_unwrap


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


def _random_wrap_batching(args, dims, **params):
    (x,), (d,) = args, dims
    x = BT.moveaxis(x, d, 0)
    return BT.bind("random_wrap", x, _out_types=BT.result_types([0]), **params), [0]


defjvp_zero("random_wrap")
define("random_wrap", bind_params=_bind_prng_impl, batching=_random_wrap_batching)


@shape_rule("random_unwrap")
def _random_unwrap(in_types, params, out_hint):
    nargs(in_types, 1, "random_unwrap")
    k = _key(in_types[0], "random_unwrap")
    ks = KEY_SHAPES.get(_key_impl(k), (2,))
    return [k.update(shape=k.shape + ks, dtype="u32", weak_type=False)]


defjvp_zero("random_unwrap")
define("random_unwrap", batching=batching_rule("vectorized", "random_unwrap"))

# ---------------------------------------------------------------- random_gamma


@shape_rule("random_gamma", random=True)
def _random_gamma(in_types, params, out_hint):
    nargs(in_types, 2, "random_gamma")
    _key(in_types[0], "random_gamma")
    a = arr(in_types[1], "random_gamma", 1)
    return [a]


def _gamma_sample_grad(a, x):
    """d(sample)/d(a) for a Gamma(a, 1) sample x."""
    one = ops.lit(1.0, a)
    log_density = ops.sub(ops.sub(ops.mul(ops.sub(a, one), ops.log(x)), x), ops.bind("lgamma", a))
    return ops.neg(ops.div(ops.bind("igamma_grad_a", a, x), ops.exp(log_density)))


def _random_gamma_jvp_a(g, ans, key, a, *, log_space=False, **_):
    if log_space:
        x = ops.exp(ans)
        tiny = float(np.finfo(ty(x).np_dtype).tiny)
        is_zero = ops.eq(x, ops.lit(0.0, x))
        x = ops.select_n(is_zero, x, ops.full(ty(x), tiny))
        return ops.mul(g, ops.div(_gamma_sample_grad(a, x), x))
    return ops.mul(g, _gamma_sample_grad(a, ans))


defjvp2("random_gamma", None, _random_gamma_jvp_a)
define(
    "random_gamma",
    batching=batching_rule("leading_batch", "random_gamma"),
    params_since={"out_sharding": ((0, 12, 1), None)},
)

# ---------------------------------------------------------------- random_poisson (JAX 0.12.1)


@shape_rule("random_poisson", random=True)
def _random_poisson(in_types, params, out_hint):
    """Integer counts shaped as the rates, whose leading dimensions are the keys'."""
    nargs(in_types, 2, "random_poisson")
    key = _key(in_types[0], "random_poisson")
    lam = arr(in_types[1], "random_poisson", 1)
    if tuple(lam.shape[: key.ndim]) != tuple(key.shape):
        raise ShapeError(
            f"random_poisson: the rates' leading shape {lam.shape[: key.ndim]} must be the "
            f"keys' {key.shape}"
        )
    dtype = dtype_param(need(params, "dtype"))
    if dtype[:1] not in ("i", "u"):
        raise ShapeError(f"random_poisson: dtype must be an integer type, got {dtype}")
    return [lam.update(dtype=dtype, weak_type=False)]


# counts carry no derivative; without the primitive (JAX before 0.12.1) jax.random.poisson
# was a loop of draws, which no single older equation computes: refused at its equation
defjvp_zero("random_poisson")
define(
    "random_poisson",
    batching=batching_rule("leading_batch", "random_poisson"),
    first_version=(0, 12, 1),
)

# ---------------------------------------------------------------- random_gamma_grad (older JAX
# versions; its shape rule is in the elementwise table)


def _evaluate_random_gamma_grad(interp, eqn, invals, path):
    """The installed JAX has no `random_gamma_grad` primitive: call `lax.random_gamma_grad`."""
    import jax

    return [jax.lax.random_gamma_grad(*invals)]


define("random_gamma_grad", evaluate=_evaluate_random_gamma_grad)

# ---------------------------------------------------------------- rng_bit_generator


@shape_rule("rng_bit_generator", random=True, multiple_results=True)
def _rng_bit_generator(in_types, params, out_hint):
    k = one_arr(in_types, "rng_bit_generator")
    d = dtype_param(need(params, "dtype"))
    shape = ints(need(params, "shape"))
    return [k, ShapedArray(shape, d)]


def _bind_rng_bit_generator(eqn, p, dims):
    import jax

    from ..backend.prims import dtype_param
    from ..backend.values import static_shape

    alg = p.get("algorithm", "RNG_DEFAULT")
    alg = alg.member if isinstance(alg, EnumValue) else str(alg).split(".")[-1]
    return {
        "algorithm": jax.lax.RandomAlgorithm[alg],
        "dtype": dtype_param(p.get("dtype")),
        "shape": static_shape(eqn.outputs[1].type, dims),
        "out_sharding": None,
    }


def _rng_bit_generator_batching(args, dims, *, shape, **params):
    """JAX's `_rng_bit_generator_batching_rule`: one generator call for the whole batch from
    the first example's key; every example's new key is that call's new key at row 0."""
    (keys,), (d,) = args, dims
    keys = BT.moveaxis(keys, d, 0)
    size = BT.axis_size()
    kshape = BT.shape_of(keys)[1:]
    first = BT.bind(
        "slice",
        keys,
        start_indices=(0,) * (len(kshape) + 1),
        limit_indices=(1, *kshape),
        strides=None,
    )[0]
    (key,) = BT.bind("squeeze", first, dimensions=(0,))
    new_key, bits = BT.bind("rng_bit_generator", key, shape=ops.sdims((size, *shape)), **params)
    upd = ops.broadcast_in_dim(new_key, (1, *kshape), tuple(range(1, len(kshape) + 1)))
    zero = Literal(0, ShapedArray((), "i32"))
    (new_keys,) = BT.bind("dynamic_update_slice", keys, upd, *([zero] * (len(kshape) + 1)))
    return [new_keys, bits], [0, 0]


defjvp_zero("rng_bit_generator")
define(
    "rng_bit_generator", bind_params=_bind_rng_bit_generator, batching=_rng_bit_generator_batching
)

# ---------------------------------------------------------------- rng_uniform


@shape_rule("rng_uniform", random=True)
def _rng_uniform(in_types, params, out_hint):
    nargs(in_types, 2, "rng_uniform")
    a = arr(in_types[0], "rng_uniform", 0)
    return [a.update(shape=ints(need(params, "shape")))]


defjvp_zero("rng_uniform")

# ---------------------------------------------------------------- threefry2x32


@shape_rule("threefry2x32")
def _threefry(in_types, params, out_hint):
    nargs(in_types, 4, "threefry2x32")
    ts = [arr(t, "threefry2x32", i) for i, t in enumerate(in_types)]
    for i, t in enumerate(ts):
        if t.dtype != "u32":
            raise ShapeError(f"threefry2x32 expects u32 operands, got {t.dtype} at position {i}")
    shape = broadcast_shapes("threefry2x32", ts)
    return [mk(shape, "u32", False, ts)] * 2


defjvp_zero("threefry2x32")
define("threefry2x32", batching=batching_rule("broadcasting", "threefry2x32"))

# ---------------------------------------------------------------- iota_2x32_shape


@shape_rule("iota_2x32_shape")
def _iota_2x32(in_types, params, out_hint):
    shape = ints(need(params, "shape"))
    return [ShapedArray(shape, "u32")] * 2


defjvp_zero("iota_2x32_shape")
define("iota_2x32_shape", batching=batching_rule("unbatched", "iota_2x32_shape"))
