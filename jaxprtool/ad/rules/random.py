"""JVP rules for the random-number primitives.

Keys, bits and seeds carry no derivative (`defjvp_zero`).  `random_gamma` is differentiable in
its shape parameter `a` by implicit differentiation of the sample `x` through the regularized
lower incomplete gamma function P(a, x) (the CDF, held fixed at the uniform draw):

    dx/da = -(dP/da) / (dP/dx),   dP/dx = x**(a-1) * exp(-x) / Gamma(a),

where dP/da is `igamma_grad_a(a, x)` (JAX's `random_gamma_grad` computes the same quantity with
its own series).  With `log_space=True` the sample is log(x), so the tangent is divided by x.
"""

from __future__ import annotations

import numpy as np

from .. import ops
from ..ops import ty
from ..registry import defjvp2, defjvp_zero

for _p in (
    "random_bits",
    "random_seed",
    "random_split",
    "random_fold_in",
    "random_wrap",
    "random_unwrap",
    "random_clone",
    "rng_bit_generator",
    "rng_uniform",
    "threefry2x32",
):
    defjvp_zero(_p)


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
