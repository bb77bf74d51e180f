"""JVP / VJP rules of the structural, reduction, linear-algebra and random families.

Each case is a small function traced with `jax.make_jaxpr`, printed, parsed with our parser,
differentiated with our machinery (jvp_jaxpr; linearize + transpose for the VJP), run with our
backend and compared with `jax.jvp` / `jax.vjp` (JAX is the oracle).  The linear program of
every case also passes the dot-product test <w, L v> = <L^T w, v>.  Inputs are drawn away from
ties and kinks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402
from jax_oracle import together  # noqa: E402

import jaxprtool.families.indexing  # noqa: E402,F401  (registered by the families' loader too)
import jaxprtool.families.linalg  # noqa: E402,F401
import jaxprtool.families.random  # noqa: E402,F401
import jaxprtool.families.reductions  # noqa: E402,F401
import jaxprtool.families.shape  # noqa: E402,F401
from jaxprtool.text.parser import parse  # noqa: E402

ATOL = RTOL = 2e-3


F32 = np.float32


def _rng(seed):
    return np.random.default_rng(seed)


def normal(shape, seed=0, scale=1.0, shift=0.0):
    return (_rng(seed).standard_normal(shape) * scale + shift).astype(F32)


def uniform(shape, lo, hi, seed=0):
    return _rng(seed).uniform(lo, hi, shape).astype(F32)


def quarters(shape, seed=0, dtype=F32):
    """Normal values rounded to quarters: exactly representable in low-precision floats."""
    return (np.round(normal(shape, seed) * 4) / 4).astype(dtype)


def i32(x):
    return np.asarray(x, np.int32)


@dataclass
class Case:
    name: str
    prim: str  # the primitive the case exercises (must appear in the printed jaxpr)
    fn: object
    args: list
    diff: list | None = None  # indices of the differentiated args (default: the float ones)
    tags: set = field(default_factory=set)  # "novjp", "nodot": tests to skip (slow to compile)

    @property
    def id(self):
        return self.name


def _is_float(x):
    return jnp.issubdtype(np.asarray(x).dtype, jnp.floating)


def _maxpool(x):
    return lax.reduce_window(x, -jnp.inf, lax.max, (2, 2), (1, 1), "SAME")


def _sasa(s, x):  # select_and_scatter_add: the VJP of a max pool
    return jax.vjp(lambda y: lax.reduce_window(y, -jnp.inf, lax.max, (2, 2), (2, 2), "VALID"), x)[
        1
    ](s)[0]


def _maxpool_jvp(x, t):  # select_and_gather_add: the JVP of a max pool
    return jax.jvp(
        lambda y: lax.reduce_window(y, -jnp.inf, lax.max, (2, 3), (1, 2), "SAME"), (x,), (t,)
    )[1]


def _conv(
    lhs_dil=(1, 1),
    rhs_dil=(1, 1),
    strides=(1, 1),
    padding="SAME",
    fgc=1,
    bgc=1,
    dn=("NCHW", "OIHW", "NCHW"),
):
    def f(x, w):
        return lax.conv_general_dilated(
            x,
            w,
            strides,
            padding,
            lhs_dilation=lhs_dil,
            rhs_dilation=rhs_dil,
            dimension_numbers=dn,
            feature_group_count=fgc,
            batch_group_count=bgc,
        )

    return f


def _gamma(log_space):
    from jax._src.random import random_gamma_p

    from jaxprtool.backend.prims import installed_version

    # (JAX 0.12.1's primitive also takes out_sharding, None unless the user shards it)
    extra = {"out_sharding": None} if installed_version() >= (0, 12, 1) else {}

    def f(a):
        k = jax.random.key(0)
        return random_gamma_p.bind(k, a, log_space=log_space, **extra)

    return f


def _pairs_with_zero():
    x = normal((3, 4), 5)
    x[1, 2] = 0.0
    return x


TIES = np.array([1.0, 3.0, 3.0, 2.0, 3.0, 0.0, 0.0, 5.0], F32)  # ties split like JAX's scan
GATHER_IDX = i32([[1], [3], [1]])

CASES = [
    # ---------------------------------------------------------------- shape ops
    Case(
        "broadcast_in_dim",
        "broadcast_in_dim",
        lambda x: jnp.broadcast_to(x[:, None, :], (3, 4, 5)),
        [normal((3, 5))],
    ),
    Case(
        "broadcast_in_dim-unit",
        "broadcast_in_dim",
        lambda x: lax.broadcast_in_dim(x, (3, 4, 2), (0, 1)),
        [normal((3, 1), 1)],
    ),
    Case("reshape", "reshape", lambda x: jnp.reshape(x, (2, 10)) * 2.0, [normal((4, 5))]),
    Case("squeeze", "squeeze", lambda x: lax.squeeze(x, (1,)), [normal((3, 1, 4))]),
    Case("expand_dims", "broadcast_in_dim", lambda x: lax.expand_dims(x, (0, 2)), [normal((3, 4))]),
    Case("transpose", "transpose", lambda x: lax.transpose(x, (2, 0, 1)), [normal((2, 3, 4))]),
    Case(
        "concatenate",
        "concatenate",
        lambda x, y: jnp.concatenate([x, y, x], 1),
        [normal((2, 3)), normal((2, 2), 1)],
    ),
    Case(
        "pad",
        "pad",
        lambda x, p: lax.pad(x, p, [(1, 2, 1), (0, -1, 2)]),
        [normal((3, 4)), F32(0.5)],
    ),
    Case(
        "pad-negative", "pad", lambda x: lax.pad(x, 0.0, [(-1, 2, 0), (2, -2, 1)]), [normal((4, 5))]
    ),
    Case("slice", "slice", lambda x: x[1:3, ::2], [normal((4, 5))]),
    Case(
        "slice-strided", "slice", lambda x: lax.slice(x, (0, 1), (5, 5), (2, 3)), [normal((6, 5))]
    ),
    Case("rev", "rev", lambda x: lax.rev(x, (0, 1)), [normal((3, 4))]),
    Case("iota", "iota", lambda x: x * lax.iota(jnp.float32, 5), [normal((5,))]),
    Case("split", "split", lambda x: tuple(jnp.split(x, [1, 3], axis=1)), [normal((4, 5))]),
    Case(
        "stack",
        "stack",
        lambda x, y: jnp.stack([x, y, x], axis=1),
        [normal((2, 3)), normal((2, 3), 1)],
    ),
    Case("unstack", "unstack", lambda x: tuple(jnp.unstack(x, axis=1)), [normal((2, 3))]),
    Case("tile", "tile", lambda x: jnp.tile(x, (2, 3)), [normal((2, 3))]),
    Case(
        "split-partial",
        "split",
        lambda x: (lambda a, b, c: (a, c))(*jnp.split(x, [1, 3], axis=1)),
        [normal((4, 5))],
    ),
    # ---------------------------------------------------------------- indexing
    Case(
        "dynamic_slice",
        "dynamic_slice",
        lambda x, i: lax.dynamic_slice(x, (i, 1), (2, 3)),
        [normal((5, 5)), i32(2)],
    ),
    Case(
        "dynamic_update_slice",
        "dynamic_update_slice",
        lambda x, u, i: lax.dynamic_update_slice(x, u, (i, 0)),
        [normal((5, 4)), normal((2, 4), 1), i32(1)],
    ),
    Case("gather", "gather", lambda x, i: x[i[:, 0]], [normal((5, 3)), GATHER_IDX]),
    Case(
        "gather-take_along",
        "gather",
        lambda x, i: jnp.take_along_axis(x, i, axis=1),
        [normal((3, 4)), i32([[0, 3], [1, 1], [2, 0]])],
    ),
    Case(
        "scatter-add",
        "scatter-add",
        lambda x, i, u: x.at[i].add(u),
        [normal((5, 3)), i32([0, 2, 0]), normal((3, 3), 1)],
    ),
    Case(
        "scatter-sub",
        "scatter-sub",
        lambda x, i, u: x.at[i].subtract(u),
        [normal((5, 3)), i32([0, 2, 0]), normal((3, 3), 1)],
    ),
    Case(
        "scatter-mul",
        "scatter-mul",
        lambda x, i, u: x.at[i].mul(u, unique_indices=True),
        [normal((5, 3)), i32([0, 2, 4]), normal((3, 3), 1)],
    ),
    Case(
        "scatter-max",
        "scatter-max",
        lambda x, i, u: x.at[i].max(u),
        [normal((5, 3)), i32([0, 2, 0]), normal((3, 3), 1)],
    ),
    Case(
        "scatter-min",
        "scatter-min",
        lambda x, i, u: x.at[i].min(u),
        [normal((5, 3)), i32([1, 2, 4]), normal((3, 3), 1)],
    ),
    Case(
        "scatter",
        "scatter",
        lambda x, i, u: x.at[i].set(u),
        [normal((5, 3)), i32([0, 2, 3]), normal((3, 3), 1)],
    ),
    Case(
        "scatter-unique",
        "scatter",
        lambda x, i, u: x.at[i].set(u, unique_indices=True),
        [normal((5, 3)), i32([0, 2, 3]), normal((3, 3), 1)],
    ),
    # ---------------------------------------------------------------- reductions
    Case("reduce_sum", "reduce_sum", lambda x: jnp.sum(x, axis=(0, 2)), [normal((2, 3, 4))]),
    Case("reduce_max", "reduce_max", lambda x: jnp.max(x, axis=1), [normal((3, 5))]),
    Case(
        "reduce_max-ties",
        "reduce_max",
        lambda x: jnp.max(x, axis=1),
        [np.array([[1.0, 3.0, 3.0, 0.5], [2.0, 2.0, 2.0, -1.0]], F32)],
    ),
    Case("reduce_min", "reduce_min", lambda x: jnp.min(x, axis=(0, 1)), [normal((3, 5))]),
    Case(
        "reduce-generic",
        "reduce",
        lambda x, y: lax.reduce(
            (x, y), (0.0, -jnp.inf), lambda a, b: (a[0] + b[0], jnp.maximum(a[1], b[1])), (0,)
        ),
        [normal((5, 3)), normal((5, 3), 1)],
    ),
    Case("reduce_prod", "reduce_prod", lambda x: jnp.prod(x, axis=1), [normal((3, 4))]),
    Case(
        "reduce_prod-zero", "reduce_prod", lambda x: jnp.prod(x, axis=(0, 1)), [_pairs_with_zero()]
    ),
    Case(
        "reduce_and_or",
        "reduce_or",
        lambda x: (jnp.where(jnp.any(x > 0), x, -x), jnp.all(x > -10)),
        [normal((3, 4))],
    ),
    Case("argmax", "argmax", lambda x: (jnp.argmax(x, axis=1), x * 2.0), [normal((3, 4))]),
    Case("argmin", "argmin", lambda x: (jnp.argmin(x, axis=0), x * 2.0), [normal((3, 4))]),
    Case("cumsum", "cumsum", lambda x: lax.cumsum(x, 1), [normal((3, 5))]),
    Case("cumsum-reverse", "cumsum", lambda x: lax.cumsum(x, 0, reverse=True), [normal((4, 3))]),
    Case("cumprod", "cumprod", lambda x: lax.cumprod(x, 1), [normal((3, 5))]),
    Case("cumprod-reverse", "cumprod", lambda x: lax.cumprod(x, 0, reverse=True), [normal((6, 2))]),
    Case("cummax", "cummax", lambda x: lax.cummax(x, 1), [normal((3, 7))]),
    Case("cummax-ties", "cummax", lambda x: lax.cummax(x, 0), [TIES]),
    Case("cumprod-zeros", "cumprod", lambda x: lax.cumprod(x, 0), [TIES]),
    Case("cummin-reverse", "cummin", lambda x: lax.cummin(x, 0, reverse=True), [normal((5, 3))]),
    Case("cumlogsumexp", "cumlogsumexp", lambda x: lax.cumlogsumexp(x, 1), [normal((3, 6))]),
    Case(
        "reduce_window_sum",
        "reduce_window_sum",
        lambda x: lax.reduce_window(x, 0.0, lax.add, (2, 3), (1, 2), [(1, 0), (0, 2)]),
        [normal((5, 6))],
    ),
    Case(
        "reduce_window_sum-dilated",
        "reduce_window_sum",
        lambda x: lax.reduce_window(
            x, 0.0, lax.add, (2, 2), (2, 1), [(0, 1), (1, 1)], (1, 2), (2, 1)
        ),
        [normal((5, 4))],
    ),
    Case("reduce_window_max", "reduce_window_max", _maxpool, [normal((4, 5))]),
    Case(
        "reduce_window_min",
        "reduce_window_min",
        lambda x: lax.reduce_window(x, jnp.inf, lax.min, (2, 3), (2, 1), "VALID"),
        [normal((5, 6))],
    ),
    Case(
        "select_and_scatter_add",
        "select_and_scatter_add",
        _sasa,
        [normal((2, 3), 1), normal((4, 6))],
    ),
    Case(
        "reduce_window-generic",
        "reduce_window",
        lambda x: lax.reduce_window(
            x, 1.0, lambda a, b: a * b + 0.5 * jnp.sin(b), (2, 2), (1, 2), "SAME"
        ),
        [normal((4, 5))],
        tags={"novjp", "nodot"},
    ),
    Case(
        "select_and_gather_add",
        "select_and_gather_add",
        _maxpool_jvp,
        [normal((4, 6)), normal((4, 6), 1)],
    ),
    Case(
        "reduce_window_max-base-dilation",
        "reduce_window_max",
        lambda x: lax.reduce_window(x, -jnp.inf, lax.max, (2, 2), (1, 2), [(0, 1), (1, 0)], (2, 1)),
        [normal((3, 5))],
    ),
    Case(
        "gather-fill",
        "gather",
        lambda x, i: x.at[i].get(mode="fill", fill_value=0.0),
        [normal((5, 2)), i32([4, 1, 7])],
    ),
    Case(
        "gather-clip",
        "gather",
        lambda x, i: x.at[i].get(mode="clip"),
        [normal((5, 2)), i32([4, 1, 7])],
    ),
    Case("sort", "sort", lambda x: jnp.sort(x, axis=1), [normal((3, 6))]),
    Case(
        "sort-multi",
        "sort",
        lambda x, y: lax.sort((x, y), dimension=0, num_keys=1),
        [normal((5, 3)), normal((5, 3), 1)],
    ),
    Case("approx_max_k", "approx_top_k", lambda x: lax.approx_max_k(x, 2)[0], [normal((3, 6))]),
    Case("top_k", "top_k", lambda x: lax.top_k(x, 3)[0], [normal((2, 6))]),
    # ---------------------------------------------------------------- linear algebra
    Case("dot_general", "dot_general", lambda x, y: x @ y, [normal((3, 4)), normal((4, 5), 1)]),
    Case(
        "dot_general-batch",
        "dot_general",
        lambda x, y: lax.dot_general(x, y, (((2,), (1,)), ((0,), (0,)))),
        [normal((2, 3, 4)), normal((2, 4, 5), 1)],
    ),
    Case(
        "dot_general-odd",
        "dot_general",
        lambda x, y: lax.dot_general(
            x, y, (((0, 2), (2, 1)), ((1,), (0,))), preferred_element_type=jnp.float32
        ),
        [normal((4, 2, 3)), normal((2, 3, 4), 1)],
    ),
    Case(
        "dot_general-vec",
        "dot_general",
        lambda x, y: jnp.dot(x, y),
        [normal((4,)), normal((4, 3), 1)],
    ),
    Case(
        "ragged_dot_general",
        "ragged_dot_general",
        lambda x, y, g: lax.ragged_dot(x, y, g),
        [normal((6, 4)), normal((2, 4, 3), 1), i32([2, 4])],
    ),
    Case(
        "dot_general-bf16-preferred",
        "dot_general",
        lambda x, y: lax.dot_general(
            x, y, (((1,), (0,)), ((), ())), preferred_element_type=jnp.float32
        ),
        [quarters((3, 4), 0, jnp.bfloat16), quarters((4, 2), 1, jnp.bfloat16)],
    ),
    Case("conv", "conv_general_dilated", _conv(), [normal((1, 2, 5, 5)), normal((3, 2, 2, 3), 1)]),
    Case(
        "conv-strided",
        "conv_general_dilated",
        _conv(strides=(2, 1), padding=((1, 0), (2, 1))),
        [normal((2, 2, 6, 5)), normal((3, 2, 3, 2), 1)],
    ),
    Case(
        "conv-dilated",
        "conv_general_dilated",
        _conv(lhs_dil=(2, 1), rhs_dil=(1, 2), padding=((0, 1), (1, 0))),
        [normal((1, 2, 4, 6)), normal((2, 2, 2, 2), 1)],
    ),
    Case(
        "conv-groups",
        "conv_general_dilated",
        _conv(fgc=2),
        [normal((2, 4, 5, 4)), normal((6, 2, 2, 2), 1)],
    ),
    Case(
        "conv-batch-groups",
        "conv_general_dilated",
        _conv(bgc=2, padding="VALID"),
        [normal((4, 3, 5, 4)), normal((4, 3, 2, 2), 1)],
    ),
    Case(
        "conv-groups-nhwc-dilated",
        "conv_general_dilated",
        _conv(
            strides=(2, 1),
            rhs_dil=(1, 2),
            fgc=3,
            padding=((1, 1), (2, 0)),
            dn=("NHWC", "HWIO", "NHWC"),
        ),
        [normal((2, 6, 6, 6)), normal((2, 2, 2, 6), 1)],
    ),
    Case(
        "conv-1d-batch-groups-lhs-dilated",
        "conv_general_dilated",
        _conv(
            lhs_dil=(2,),
            rhs_dil=(1,),
            strides=(1,),
            bgc=2,
            padding=((1, 1),),
            dn=("NCH", "OIH", "NCH"),
        ),
        [normal((4, 2, 5)), normal((4, 2, 3), 1)],
    ),
    Case(
        "conv-nhwc",
        "conv_general_dilated",
        _conv(strides=(1, 2), dn=("NHWC", "HWIO", "NHWC")),
        [normal((2, 5, 6, 3)), normal((3, 2, 3, 4), 1)],
    ),
    # ---------------------------------------------------------------- random
    Case("random_gamma", "random_gamma", _gamma(False), [uniform((4,), 0.8, 3.0)], tags={"nodot"}),
    Case(
        "random_gamma-log",
        "random_gamma",
        _gamma(True),
        [uniform((4,), 0.8, 3.0, 1)],
        tags={"nodot", "novjp"},
    ),
    Case(
        "random_bits",
        "random_bits",
        lambda x: (
            x
            * jax.random.uniform(
                jax.random.fold_in(jax.random.split(jax.random.key(1))[1], 3), x.shape
            )
        ),
        [normal((3,))],
    ),
    Case(
        "random_unwrap",
        "random_unwrap",
        lambda x: x + jax.random.key_data(jax.random.key(2))[0].astype(jnp.float32),
        [normal((3,))],
    ),
    Case(
        "rng_bit_generator",
        "rng_bit_generator",
        lambda x, k: x * lax.rng_bit_generator(k, (3,))[1].astype(jnp.float32),
        [normal((3,)), np.arange(4, dtype=np.uint32)],
    ),
]


# ---------------------------------------------------------------- harness


def _diff(case):
    return (
        case.diff if case.diff is not None else [i for i, a in enumerate(case.args) if _is_float(a)]
    )


def _flat_outs(out):
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _our_jaxpr(case):
    text = str(jax.make_jaxpr(case.fn)(*case.args))
    assert case.prim in text, f"the traced program has no {case.prim}:\n{text}"
    j = parse(text, f"<{case.name}>").jaxpr
    assert not j.constvars, "cases must not close over arrays"
    return j


def _run(j, args):
    """A program of ours run compiled as a whole (one XLA compile, issue 49)."""
    return together((j, [np.asarray(a) for a in args]))[0]


def _close(a, b, what):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    assert a.shape == b.shape, f"{what}: shape {a.shape} != {b.shape}"
    np.testing.assert_allclose(a, b, atol=ATOL, rtol=RTOL, err_msg=what)


def _partial(case):
    diff = _diff(case)

    def f(*xs):
        full = list(case.args)
        for i, x in zip(diff, xs):
            full[i] = x
        return _flat_outs(case.fn(*full))

    return f, diff


def _is_float_out(o):
    return jnp.issubdtype(o.dtype, jnp.inexact)


def _residual_values(info, args, outs, new):
    vals = []
    for r in info.residuals:
        src = {"input": args, "output": outs, "new": new}[r.source]
        vals.append(np.asarray(src[r.index]))
    return vals


def _tangent_like(x, seed):
    """Quarter-integer values: exact in every float type (bf16 cases compare bit for bit)."""
    return (np.round(normal(np.shape(x), seed) * 4) / 4).astype(np.asarray(x).dtype)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_jvp(case):
    from jaxprtool.ad.jvp import jvp_jaxpr

    j = _our_jaxpr(case)
    f, diff = _partial(case)
    prim_f = [case.args[i] for i in diff]
    tans = [_tangent_like(a, 100 + k) for k, a in enumerate(prim_f)]
    jj = jvp_jaxpr(j, diff)
    # our program and JAX's jvp in one compile
    got, (want_out, want_t) = together(
        (jj, [np.asarray(a) for a in list(case.args) + tans]),
        (lambda p, t: jax.jvp(f, p, t), (tuple(prim_f), tuple(tans))),
    )
    n = len(want_out)
    for k, (g, w) in enumerate(zip(got[:n], want_out)):
        _close(g, w, f"primal output {k}")
    got_t = got[n:]
    want_float = [t for o, t in zip(want_out, want_t) if _is_float_out(o)]
    assert len(got_t) == len(want_float), (len(got_t), len(want_float))
    for k, (g, w) in enumerate(zip(got_t, want_float)):
        _close(g, w, f"tangent output {k}")


@pytest.mark.parametrize("case", [c for c in CASES if "novjp" not in c.tags], ids=lambda c: c.id)
def test_vjp(case):
    from jaxprtool.ad.api import vjp_jaxpr

    j = _our_jaxpr(case)
    f, diff = _partial(case)
    prim_f = tuple(np.asarray(case.args[i]) for i in diff)
    out_types = jax.eval_shape(f, *prim_f)  # (shapes only: nothing compiled)
    cts_all, cts_ours = [], []
    for k, o in enumerate(out_types):
        if _is_float_out(o):
            c = _tangent_like(np.zeros(o.shape, o.dtype), 200 + k)
            cts_all.append(c)
            cts_ours.append(c)
        else:
            cts_all.append(None)
    float0 = [np.zeros(o.shape, jax.dtypes.float0) for o in out_types]

    def oracle(p, c):
        c = [f0 if ck is None else ck for ck, f0 in zip(c, float0)]
        return f(*p), jax.vjp(f, *p)[1](c)

    vj = vjp_jaxpr(j, diff)
    # our program, JAX's function and its vjp in one compile
    got, (want_out, want_ct) = together(
        (vj, [np.asarray(a) for a in list(case.args) + cts_ours]), (oracle, (prim_f, cts_all))
    )
    n = len(want_out)
    for k, (g, w) in enumerate(zip(got[:n], want_out)):
        _close(g, w, f"primal output {k}")
    got_ct = got[n:]
    assert len(got_ct) == len(want_ct), (len(got_ct), len(want_ct))
    for k, (g, w) in enumerate(zip(got_ct, want_ct)):
        _close(g, w, f"cotangent of input {diff[k]}")


@pytest.mark.parametrize("case", [c for c in CASES if "nodot" not in c.tags], ids=lambda c: c.id)
def test_dot_product(case):
    """<w, L v> = <L^T w, v> for the linear program of linearize and its transpose."""
    from jaxprtool.ad.linearize import linearize_jaxpr
    from jaxprtool.ad.transpose import transpose_jaxpr

    j = _our_jaxpr(case)
    _, diff = _partial(case)
    primal, linear, info = linearize_jaxpr(j, diff)
    outs_new = _run(primal, case.args)
    n_out = len(j.outvars)
    res = _residual_values(info, list(case.args), outs_new[:n_out], outs_new[n_out:])
    n_res = len(res)
    n_tan = len(linear.invars) - n_res
    lt = transpose_jaxpr(linear, [False] * n_res + [True] * n_tan)
    tin = [
        _tangent_like(np.zeros(v.type.shape, v.type.np_dtype), 300 + k)
        for k, v in enumerate(linear.invars[n_res:])
    ]
    w = [
        _tangent_like(np.zeros(v.type.shape, v.type.np_dtype), 400 + k)
        for k, v in enumerate(linear.outvars)
    ]
    lv, ltw = together((linear, res + tin), (lt, res + w))  # (one compile for both)
    assert [np.shape(x) for x in lv] == [np.shape(x) for x in w]
    assert len(ltw) == len(tin)
    lhs = sum(
        float(np.vdot(np.asarray(a, np.float64), np.asarray(b, np.float64))) for a, b in zip(w, lv)
    )
    rhs = sum(
        float(np.vdot(np.asarray(a, np.float64), np.asarray(b, np.float64)))
        for a, b in zip(ltw, tin)
    )
    scale = sum(float(np.abs(np.asarray(a) * np.asarray(b)).sum()) for a, b in zip(w, lv)) + 1e-6
    assert abs(lhs - rhs) <= 2e-4 * scale + 1e-5, (lhs, rhs)


SECOND_ORDER = {
    "broadcast_in_dim-unit",
    "pad",
    "slice-strided",
    "concatenate",
    "dynamic_slice",
    "dynamic_update_slice",
    "gather",
    "scatter-add",
    "scatter-mul",
    "scatter-max",
    "scatter",
    "reduce_max",
    "reduce_prod",
    "cumprod",
    "cummax",
    "cumlogsumexp",
    "reduce_window_sum-dilated",
    "reduce_window_max",
    "select_and_scatter_add",
    "select_and_gather_add",
    "sort-multi",
    "top_k",
    "dot_general-odd",
    "conv-strided",
    "conv-dilated",
    "conv-groups",
    "conv-batch-groups",
    "stack",
    "tile",
    "split-partial",
    "ragged_dot_general",
    "reduce-generic",
}


@pytest.mark.parametrize("case", [c for c in CASES if c.name in SECOND_ORDER], ids=lambda c: c.id)
def test_jvp_of_vjp(case):
    """Second order: the JVP of our VJP program against jax.jvp of jax.vjp."""
    from jaxprtool.ad.api import vjp_jaxpr
    from jaxprtool.ad.jvp import jvp_jaxpr

    j = _our_jaxpr(case)
    f, diff = _partial(case)
    prim_f = [np.asarray(case.args[i]) for i in diff]
    outs = jax.eval_shape(f, *prim_f)  # (shapes only: nothing compiled)
    assert all(_is_float_out(o) for o in outs)
    cts = [_tangent_like(np.zeros(o.shape, o.dtype), 500 + k) for k, o in enumerate(outs)]

    def g(ps, cs):
        return jax.vjp(f, *ps)[1](list(cs))

    tp = [_tangent_like(p, 600 + k) for k, p in enumerate(prim_f)]
    tc = [_tangent_like(c, 700 + k) for k, c in enumerate(cts)]
    vj = vjp_jaxpr(j, diff)
    n_args = len(case.args)
    jj = jvp_jaxpr(vj, diff + [n_args + k for k in range(len(cts))])
    # our program and JAX's jvp of vjp in one compile
    got, (_, want) = together(
        (jj, [np.asarray(a) for a in list(case.args) + cts + tp + tc]),
        (lambda *a: jax.jvp(g, *a), ((prim_f, cts), (tp, tc))),
    )
    n_vj_out = len(vj.outvars)
    got_t = got[n_vj_out:]
    got_ct_t = got_t[len(outs) :]  # tangents of the input cotangents follow those of the outputs
    assert len(got_ct_t) == len(want)
    for k, (a, b) in enumerate(zip(got_ct_t, want)):
        _close(a, b, f"second-order tangent {k}")
