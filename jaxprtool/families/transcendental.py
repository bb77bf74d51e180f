"""The element-wise family, transcendental half: exponentials and logarithms,
trigonometric and hyperbolic functions and their inverses, roots, and the special
functions of JAX's `special.py` (erf, gamma functions, incomplete beta, Bessel functions).

Each block holds everything about its primitives: the shape and batching rules (built by
`arithmetic.unary_shapes` / `nary_shapes` from the dtypes accepted), the JVP rule (formulas
from JAX's `lax.py`/`special.py`), printing and binding of JAX's `accuracy` parameter, and
the analytic derivative `explain` checks against.  None of them folds or simplifies, and
each counts one FLOP per result element.
"""

from __future__ import annotations

import math
from functools import partial

from ..ad import ops
from ..ad.builder import current
from ..ad.ops import (
    add,
    cos,
    cosh,
    div,
    exp,
    gt,
    integer_pow,
    log,
    mul,
    neg,
    rsqrt,
    select_n,
    sin,
    sinh,
    square,
    sub,
)
from ..ad.registry import defjvp, defjvp2
from ..core import JaxprError, ShapedArray, long_dtype_name
from ..lazy import np
from ..record import define
from ..text.param_rules import drop_if_none
from .arithmetic import FLOAT, INEXACT, c, nary_shapes, unary_shapes

# ---------------------------------------------------------------- shared helpers

_unary = partial(unary_shapes, family="transcendental")
_nary = partial(nary_shapes, family="transcendental")


def one_minus_square(x):
    """1 - x^2, one primitive as JAX 0.12's rules emit it (older styles expand it back)."""
    return ops.bind("one_minus_square", x)


def _acc(params):
    return {"accuracy": params.get("accuracy")}


def _bind_accuracy(eqn, p, dims):
    from ..backend.prims import accuracy_param

    return {"accuracy": accuracy_param(p.get("accuracy"))}


def _accuracy(names: str) -> None:
    """Primitives with JAX's `accuracy` parameter (printed only when not None)."""
    for n in names.split():
        define(n, print_params=drop_if_none("accuracy"), bind_params=_bind_accuracy)


def _unsupported(msg):
    def fn(g, *args, **params):
        raise JaxprError(msg, current().loc)

    return fn


# ---------------------------------------------------------------- exp, log, logistic
# exp, exp2, log, log2, log1p, expm1, logistic

_unary("exp exp2 log log2 log1p expm1 logistic", INEXACT)
_accuracy("exp exp2 log log2 expm1 log1p logistic")

defjvp2("exp", lambda g, ans, x, **p: mul(g, ans))
defjvp2("exp2", lambda g, ans, x, **p: mul(c(x, math.log(2.0)), mul(g, ans)))
defjvp("log", lambda g, x, **p: div(g, x))
defjvp("log2", lambda g, x, **p: div(g, mul(x, c(x, math.log(2.0)))))
defjvp("log1p", lambda g, x, **p: div(g, add(x, c(x, 1))))
defjvp2("expm1", lambda g, ans, x, **p: mul(g, exp(x, **_acc(p))))
defjvp2("logistic", lambda g, ans, x, **p: mul(g, mul(ans, sub(c(ans, 1), ans))))

define("exp", derivative_formula=("exp(x)", lambda x: np.exp(x)))
define("exp2", derivative_formula=("log(2) 2^x", lambda x: np.log(2) * np.exp2(x)))
define("expm1", derivative_formula=("exp(x)", lambda x: np.exp(x)))
define("log", derivative_formula=("1/x", lambda x: 1 / x))
define("log1p", derivative_formula=("1/(1+x)", lambda x: 1 / (1 + x)))
for _n in ("log", "log2", "log1p"):  # random inputs: drawn positive (`draw.py`)
    define(_n, draw_domain=lambda e: {0: ("positive",)})
define(
    "logistic",
    derivative_formula=("s(x)(1 - s(x))", lambda x: (s := 1 / (1 + np.exp(-x))) * (1 - s)),
)

# ---------------------------------------------------------------- sin, cos, tan, asin, acos, atan

_unary("sin cos tan asin acos atan", INEXACT)
_accuracy("sin cos tan")

defjvp("sin", lambda g, x, **p: mul(g, cos(x, **_acc(p))))
defjvp("cos", lambda g, x, **p: neg(mul(g, sin(x, **_acc(p)))))
defjvp2("tan", lambda g, ans, x, **p: mul(g, add(c(x, 1), square(ans))))
defjvp("asin", lambda g, x, **p: mul(g, rsqrt(one_minus_square(x))))
defjvp("acos", lambda g, x, **p: mul(g, neg(rsqrt(one_minus_square(x)))))
defjvp("atan", lambda g, x, **p: div(g, add(c(x, 1), square(x))))

define("sin", derivative_formula=("cos(x)", lambda x: np.cos(x)))
define("cos", derivative_formula=("-sin(x)", lambda x: -np.sin(x)))
define("tan", derivative_formula=("1 + tan(x)^2", lambda x: 1 + np.tan(x) ** 2))
define("asin", derivative_formula=("1/sqrt(1-x^2)", lambda x: 1 / np.sqrt(1 - x**2)))
define("acos", derivative_formula=("-1/sqrt(1-x^2)", lambda x: -1 / np.sqrt(1 - x**2)))
define("atan", derivative_formula=("1/(1+x^2)", lambda x: 1 / (1 + x**2)))

# ---------------------------------------------------------------- atan2

_nary("atan2", INEXACT)
defjvp(
    "atan2",
    lambda g, x, y, **p: mul(g, div(y, add(square(x), square(y)))),
    lambda g, x, y, **p: mul(g, div(neg(x), add(square(x), square(y)))),
)
define(
    "atan2",
    derivative_formula=(
        "d/dx = y/(x^2+y^2), d/dy = -x/(x^2+y^2)",
        lambda x, y: (y / (x**2 + y**2), -x / (x**2 + y**2)),
    ),
)

# ---------------------------------------------------------------- hyperbolic functions

_unary("sinh cosh tanh asinh acosh atanh", INEXACT)
_accuracy("tanh")

defjvp("sinh", lambda g, x, **p: mul(g, cosh(x)))
defjvp("cosh", lambda g, x, **p: mul(g, sinh(x)))
defjvp2("tanh", lambda g, ans, x, **p: mul(g, one_minus_square(ans)))
defjvp("asinh", lambda g, x, **p: mul(g, rsqrt(add(square(x), c(x, 1)))))
defjvp("acosh", lambda g, x, **p: mul(g, mul(rsqrt(sub(x, c(x, 1))), rsqrt(add(x, c(x, 1))))))
defjvp("atanh", lambda g, x, **p: div(g, one_minus_square(x)))

define("sinh", derivative_formula=("cosh(x)", lambda x: np.cosh(x)))
define("cosh", derivative_formula=("sinh(x)", lambda x: np.sinh(x)))
define("tanh", derivative_formula=("1 - tanh(x)^2", lambda x: 1 - np.tanh(x) ** 2))
define("asinh", derivative_formula=("1/sqrt(x^2+1)", lambda x: 1 / np.sqrt(x**2 + 1)))
define("acosh", derivative_formula=("1/sqrt(x^2-1)", lambda x: 1 / np.sqrt(x**2 - 1)))
define("atanh", derivative_formula=("1/(1-x^2)", lambda x: 1 / (1 - x**2)))

# ---------------------------------------------------------------- sqrt, rsqrt, cbrt

_unary("sqrt rsqrt", INEXACT)
_unary("cbrt", (FLOAT,))
_accuracy("sqrt rsqrt cbrt")

defjvp2("sqrt", lambda g, ans, x, **p: mul(g, div(c(x, 0.5), ans)))
defjvp2("rsqrt", lambda g, ans, x, **p: mul(g, mul(c(x, -0.5), div(ans, x))))
defjvp2("cbrt", lambda g, ans, x, **p: mul(g, mul(c(x, 1 / 3), integer_pow(ans, -2))))

define("sqrt", derivative_formula=("1/(2 sqrt(x))", lambda x: 0.5 / np.sqrt(x)))
define("rsqrt", derivative_formula=("-x^(-3/2)/2", lambda x: -0.5 * x**-1.5))
define("cbrt", derivative_formula=("x^(-2/3)/3", lambda x: np.cbrt(x) ** -2 / 3))
for _n in ("sqrt", "rsqrt"):  # random inputs: drawn positive (`draw.py`)
    define(_n, draw_domain=lambda e: {0: ("positive",)})

# ---------------------------------------------------------------- error and gamma functions
# erf, erfc, erf_inv, lgamma, digamma

_SQRT_PI = math.sqrt(math.pi)

_unary("erf erfc erf_inv lgamma digamma", (FLOAT,))
_accuracy("erfc")

defjvp("erf", lambda g, x, **p: mul(c(x, 2.0 / _SQRT_PI), mul(g, exp(neg(square(x))))))
defjvp("erfc", lambda g, x, **p: mul(c(x, -2.0 / _SQRT_PI), mul(g, exp(neg(square(x))))))
defjvp2("erf_inv", lambda g, ans, x, **p: mul(c(x, _SQRT_PI / 2.0), mul(g, exp(square(ans)))))
defjvp("lgamma", lambda g, x, **p: mul(g, ops.digamma(x)))
defjvp("digamma", lambda g, x, **p: mul(g, ops.bind("polygamma", c(x, 1), x)))

define(
    "erf",
    derivative_formula=(
        "2/sqrt(pi) exp(-x^2)",
        lambda x: 2 / np.sqrt(np.pi) * np.exp(-(x**2)),
    ),
)

# ---------------------------------------------------------------- incomplete gamma, polygamma, zeta
# igamma, igammac, igamma_grad_a, random_gamma_grad, polygamma, zeta


def _igamma_gradx(g, a, x, **p):
    return mul(g, exp(add(neg(x), sub(mul(sub(a, c(a, 1)), log(x)), ops.lgamma(a)))))


def _igamma_grada(g, a, x, **p):
    return mul(g, ops.bind("igamma_grad_a", a, x))


_nary("igamma igammac igamma_grad_a random_gamma_grad polygamma zeta", (FLOAT,))
defjvp("igamma", _igamma_grada, _igamma_gradx)
defjvp(
    "igammac",
    lambda g, a, x, **p: neg(_igamma_grada(g, a, x)),
    lambda g, a, x, **p: neg(_igamma_gradx(g, a, x)),
)
defjvp(
    "polygamma",
    _unsupported("polygamma gradient with respect to m is not supported"),
    lambda g, m, x, **p: mul(g, ops.bind("polygamma", add(m, c(m, 1)), x)),
)

# ---------------------------------------------------------------- regularized_incomplete_beta


def _betainc_gradx(g, a, b, x, **p):
    lbeta = sub(add(ops.lgamma(a), ops.lgamma(b)), ops.lgamma(add(a, b)))
    return mul(
        exp(sub(add(mul(sub(b, c(b, 1)), ops.log1p(neg(x))), mul(sub(a, c(a, 1)), log(x))), lbeta)),
        g,
    )


_BETAINC = "Betainc gradient with respect to a and b not supported."
_nary("regularized_incomplete_beta", (FLOAT,), arity=3)
defjvp(
    "regularized_incomplete_beta", _unsupported(_BETAINC), _unsupported(_BETAINC), _betainc_gradx
)

# ---------------------------------------------------------------- bessel_i0e, bessel_i1e


def _bessel_i1e_jvp(g, y, x, **p):
    eps = float(np.finfo(np.dtype(long_dtype_name(x.type.dtype))).eps)
    not_tiny = gt(ops.abs(x), c(x, eps))
    safe_x = select_n(not_tiny, ops.full(ShapedArray(x.type.shape, x.type.dtype), eps), x)
    dy = sub(ops.bind("bessel_i0e", safe_x), mul(y, add(ops.sign(safe_x), div(c(x, 1), safe_x))))
    dy = select_n(not_tiny, ops.full(ShapedArray(x.type.shape, x.type.dtype), 0.5), dy)
    return mul(g, dy)


_unary("bessel_i0e bessel_i1e", (FLOAT,))
defjvp2(
    "bessel_i0e",
    lambda g, y, x, **p: mul(g, sub(ops.bind("bessel_i1e", x), mul(ops.sign(x), y))),
)
defjvp2("bessel_i1e", _bessel_i1e_jvp)
