"""AD of cond, scan and while: JAX is the oracle.

Each case is traced with `jax.make_jaxpr`, printed, parsed by our parser, differentiated with
our AD (jvp, vjp, grad, linearize + transpose), run by the back end, and compared with
`jax.jvp` / `jax.vjp` / `jax.grad`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from conftest import CORPUS, needs_corpus, needs_jax  # noqa: E402
from jax import lax  # noqa: E402

from jaxprtool.core import JaxprError  # noqa: E402
from jaxprtool.text.parser import parse  # noqa: E402

ATOL = RTOL = 2e-3


def normal(shape, seed, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


@dataclass
class Case:
    name: str
    fn: object
    args: list
    prim: str
    reverse_ok: bool = True

    @property
    def id(self):
        return self.name


# ---------------------------------------------------------------- programs


def cond2(x, y):
    return lax.cond(
        x.sum() > 0, lambda a, b: (jnp.sin(a) * b, a), lambda a, b: (jnp.cos(b), a * b), x, y
    )


def switch3(x, y):
    i = jnp.argmax(x)  # int index from the data (clamped into [0, 2] by switch)
    return lax.switch(
        i,
        [lambda a, b: jnp.sin(a) * b, lambda a, b: a * a + b, lambda a, b: jnp.exp(b) - a],
        x,
        y,
    )


def cond_int_multi(i, x, y):
    return lax.cond(i > 0, lambda a, b: (a + b * a, a), lambda a, b: (a - b, jnp.tanh(b)), x, y)


W_RNN = normal((4, 4), 7, 0.5)


def rnn(h0, xs):
    W = 0.4 * jnp.sin(jnp.arange(16.0, dtype=jnp.float32).reshape(4, 4))  # traced, not a constvar

    def step(h, x):
        h2 = jnp.tanh(W @ h + x)
        return h2, h2.sum() * h[0]

    return lax.scan(step, h0, xs)


def rnn_consts(W, h0, xs):
    def step(h, x):
        h2 = jnp.tanh(W @ h + x)
        return h2, jnp.sin(h2)

    return lax.scan(step, h0, xs)


def scan_reverse(c0, xs):
    return lax.scan(lambda c, x: (c * jnp.cos(x) + x, c * c), c0, xs, reverse=True)


def scan_two_carries(a, b, xs):
    # the second carry only becomes nonzero through the first (carry fixed point)
    def step(c, x):
        u, v = c
        return (u * x, v + jnp.sin(u)), u + v

    return lax.scan(step, (a, b), xs)


def scan_ys_residual(c0, xs):
    # the residual c (for the tangent of c * x) is also the ys output: stacked once
    return lax.scan(lambda c, x: (c * x, c), c0, xs)


def scan_hoist(w, c0, xs):
    # cos(w) is a loop-invariant residual: computed once outside the loop
    return lax.scan(lambda c, x: (c * jnp.cos(w) + x * w, jnp.sin(c)), c0, xs)


def fori_static(x):
    return lax.fori_loop(0, 5, lambda i, c: c * jnp.sin(c) + i.astype(jnp.float32) * 0.1, x)


def while_loop(x):
    return lax.while_loop(
        lambda c: c[0] < 4, lambda c: (c[0] + 1, jnp.sin(c[1]) * 1.5 + c[2], c[2]), (0, x, x * 2)
    )[1:]


def scan_in_cond(x, xs):
    def yes(a, s):
        return lax.scan(lambda c, t: (jnp.sin(c) * t, c), a, s)[0]

    def no(a, s):
        return a * s.sum(0)

    return lax.cond(x.sum() > 0, yes, no, x, xs)


def cond_in_scan(c0, xs):
    def step(c, x):
        c2 = lax.cond(x.sum() > 0, lambda u, v: jnp.sin(u) * v, lambda u, v: u + v * v, c, x)
        return c2, c2 * c

    return lax.scan(step, c0, xs)


CASES = [
    Case("cond2_true", cond2, [normal(3, 1) + 2.0, normal(3, 2)], "cond"),
    Case("cond2_false", cond2, [normal(3, 1) - 2.0, normal(3, 2)], "cond"),
    Case("switch3_b0", switch3, [np.array([3.0, 1.0, 0.0], np.float32), normal(3, 3)], "cond"),
    Case("switch3_b1", switch3, [np.array([0.0, 3.0, 1.0], np.float32), normal(3, 3)], "cond"),
    Case("switch3_b2", switch3, [np.array([0.0, 1.0, 3.0], np.float32), normal(3, 3)], "cond"),
    Case("cond_int_multi", cond_int_multi, [np.int32(1), normal(3, 4), normal(3, 5)], "cond"),
    Case("cond_int_multi_f", cond_int_multi, [np.int32(0), normal(3, 4), normal(3, 5)], "cond"),
    Case("scan_rnn", rnn, [normal(4, 6), normal((5, 4), 8)], "scan"),
    Case("scan_rnn_consts", rnn_consts, [W_RNN, normal(4, 6), normal((5, 4), 8)], "scan"),
    Case("scan_reverse", scan_reverse, [normal(3, 9), normal((6, 3), 10)], "scan"),
    Case(
        "scan_two_carries",
        scan_two_carries,
        [normal(2, 11), normal(2, 12), normal((4, 2), 13)],
        "scan",
    ),
    Case("scan_ys_residual", scan_ys_residual, [normal(3, 20), normal((5, 3), 21)], "scan"),
    Case("scan_hoist", scan_hoist, [normal(3, 22), normal(3, 23), normal((5, 3), 24)], "scan"),
    Case("fori_static", fori_static, [normal(3, 14)], "scan"),
    Case("while", while_loop, [normal(3, 15)], "while", reverse_ok=False),
    Case("scan_in_cond_t", scan_in_cond, [normal(3, 16) + 2.0, normal((4, 3), 17)], "cond"),
    Case("scan_in_cond_f", scan_in_cond, [normal(3, 16) - 2.0, normal((4, 3), 17)], "cond"),
    Case("cond_in_scan", cond_in_scan, [normal(3, 18), normal((6, 3), 19)], "scan"),
]
REVERSE_CASES = [c for c in CASES if c.reverse_ok]


# ---------------------------------------------------------------- harness


def _is_float(x):
    dtype = x.dtype if hasattr(x, "dtype") else np.asarray(x).dtype
    return np.issubdtype(dtype, np.inexact)


def _diff(case):
    return [i for i, a in enumerate(case.args) if _is_float(a)]


def _flat(out):
    return list(jax.tree_util.tree_leaves(out))


def _our_jaxpr(case):
    text = str(jax.make_jaxpr(case.fn)(*case.args))
    assert case.prim in text, f"the traced program has no {case.prim}:\n{text}"
    return parse(text, f"<{case.name}>").jaxpr


def _run(j, args):
    from jaxprtool.backend import eval_eager

    return eval_eager(j, [np.asarray(a) for a in args])


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
        return _flat(case.fn(*full))

    return f, diff


def _vdot(xs, ys):
    return sum(
        float(np.vdot(np.asarray(a, np.float64), np.asarray(b, np.float64))) for a, b in zip(xs, ys)
    )


def _jitted_jvp(f):
    """JAX's jvp of f, jitted: one XLA compilation (eagerly, one a primitive)."""
    return jax.jit(lambda p, t: jax.jvp(f, p, t))


# ---------------------------------------------------------------- tests


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_jvp(case):
    from jaxprtool.ad.jvp import jvp_jaxpr

    j = _our_jaxpr(case)
    f, diff = _partial(case)
    prim = tuple(jnp.asarray(case.args[i]) for i in diff)
    tans = [normal(np.shape(case.args[i]), 100 + k) for k, i in enumerate(diff)]
    want_out, want_t = _jitted_jvp(f)(prim, tuple(tans))
    got = _run(jvp_jaxpr(j, diff), list(case.args) + tans)
    n = len(want_out)
    for k, (g, w) in enumerate(zip(got[:n], want_out)):
        _close(g, w, f"primal output {k}")
    want_float = [t for o, t in zip(want_out, want_t) if _is_float(o)]
    assert len(got[n:]) == len(want_float)
    for k, (g, w) in enumerate(zip(got[n:], want_float)):
        _close(g, w, f"tangent output {k}")


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_linearize(case):
    """The split program (primal part + linear part) computes the JVP."""
    from jaxprtool.ad.linearize import linearize_combined

    j = _our_jaxpr(case)
    f, diff = _partial(case)
    prim = tuple(jnp.asarray(case.args[i]) for i in diff)
    tans = [normal(np.shape(case.args[i]), 150 + k) for k, i in enumerate(diff)]
    want_out, want_t = _jitted_jvp(f)(prim, tuple(tans))
    got = _run(linearize_combined(j, diff), list(case.args) + tans)
    n = len(want_out)
    want_float = [t for o, t in zip(want_out, want_t) if _is_float(o)]
    for k, (g, w) in enumerate(zip(got[n:], want_float)):
        _close(g, w, f"tangent output {k}")


@pytest.mark.parametrize("case", REVERSE_CASES, ids=lambda c: c.id)
def test_vjp(case):
    from jaxprtool.ad.api import vjp_jaxpr

    j = _our_jaxpr(case)
    f, diff = _partial(case)
    prim = tuple(jnp.asarray(case.args[i]) for i in diff)
    cts_all, cts_ours = [], []
    for k, o in enumerate(jax.eval_shape(f, *prim)):
        if _is_float(o):
            c = normal(o.shape, 200 + k)
            cts_all.append(jnp.asarray(c))
            cts_ours.append(c)
        else:
            cts_all.append(np.zeros(o.shape, jax.dtypes.float0))

    def outs_and_cts(p):  # JAX's vjp, jitted (the cotangents closed over: float0 ones too)
        out, pull = jax.vjp(f, *p)
        return out, pull(cts_all)

    want_out, want_ct = jax.jit(outs_and_cts)(prim)
    got = _run(vjp_jaxpr(j, diff), list(case.args) + cts_ours)
    n = len(want_out)
    for k, (g, w) in enumerate(zip(got[:n], want_out)):
        _close(g, w, f"primal output {k}")
    assert len(got[n:]) == len(want_ct)
    for k, (g, w) in enumerate(zip(got[n:], want_ct)):
        _close(g, w, f"cotangent of input {diff[k]}")


@pytest.mark.parametrize("case", REVERSE_CASES, ids=lambda c: c.id)
def test_grad(case):
    from jaxprtool.ad.api import grad_jaxpr

    def loss(*xs):
        return sum(jnp.sum(jnp.sin(o)) for o in _flat(case.fn(*xs)) if _is_float(o))

    j = parse(str(jax.make_jaxpr(loss)(*case.args)), f"<{case.name}>").jaxpr
    diff = _diff(case)
    want = jax.jit(jax.grad(loss, argnums=tuple(diff)))(*case.args)
    got = _run(grad_jaxpr(j, diff), case.args)
    for k, (g, w) in enumerate(zip(got, want)):
        _close(g, w, f"gradient of input {diff[k]}")


@pytest.mark.parametrize("case", REVERSE_CASES, ids=lambda c: c.id)
def test_dot_product(case):
    """<w, L v> = <L^T w, v> for the linear program of linearize and its transpose."""
    from jaxprtool.ad.linearize import linearize_jaxpr
    from jaxprtool.ad.transpose import transpose_jaxpr

    j = _our_jaxpr(case)
    diff = _diff(case)
    primal, linear, info = linearize_jaxpr(j, diff)
    outs = _run(primal, case.args)
    n_out = len(j.outvars)
    src = {"input": list(case.args), "output": outs[:n_out], "new": outs[n_out:]}
    res = [np.asarray(src[r.source][r.index]) for r in info.residuals]
    n_res = len(res)
    n_tan = len(linear.invars) - n_res
    lt = transpose_jaxpr(linear, [False] * n_res + [True] * n_tan)
    v = [normal(x.type.shape, 300 + k) for k, x in enumerate(linear.invars[n_res:])]
    lv = _run(linear, res + v)
    w = [normal(np.shape(x), 400 + k) for k, x in enumerate(lv)]
    ltw = _run(lt, res + w)
    assert len(ltw) == len(v)
    lhs, rhs = _vdot(w, lv), _vdot(ltw, v)
    scale = sum(float(np.abs(np.asarray(a) * np.asarray(b)).sum()) for a, b in zip(w, lv)) + 1e-6
    assert abs(lhs - rhs) <= 2e-4 * scale + 1e-5, (lhs, rhs)


# ---------------------------------------------------------------- while: reverse mode is an error


def test_while_vjp_error():
    from jaxprtool.ad.api import vjp_jaxpr

    case = next(c for c in CASES if c.prim == "while")
    j = _our_jaxpr(case)
    with pytest.raises(JaxprError) as ei:
        vjp_jaxpr(j)
    assert ei.value.message == (
        "Reverse-mode differentiation does not work for lax.while_loop or lax.fori_loop with dynamic "
        "start/stop values. Try using lax.scan, or using fori_loop with static start/stop."
    )
    while_eqn = next(e for e in j.eqns if e.prim == "while")
    assert ei.value.loc == while_eqn.loc
    # JAX agrees
    with pytest.raises(ValueError, match="Reverse-mode differentiation does not work"):
        jax.grad(lambda x: case.fn(x)[0].sum())(jnp.asarray(case.args[0]))


def test_fori_dynamic_grad_error():
    from jaxprtool.ad.api import grad_jaxpr

    def f(x, n):
        return lax.fori_loop(0, n, lambda i, c: c * jnp.sin(c), x).sum()

    j = parse(str(jax.make_jaxpr(f)(normal(3, 1), np.int32(3))), "<t>").jaxpr
    with pytest.raises(JaxprError, match="Reverse-mode differentiation does not work"):
        grad_jaxpr(j, 0)


# ---------------------------------------------------------------- printed form


def _jvp_text(fn, args, argnums):
    from jaxprtool.ad.jvp import jvp_jaxpr
    from jaxprtool.text.printer import print_jaxpr

    j = parse(str(jax.make_jaxpr(fn)(*args)), "<t>").jaxpr
    return print_jaxpr(jvp_jaxpr(j, argnums))


@needs_jax("0.11", "the flat-tree scan encoding (ft_in/ft_out); it prints num_consts/num_carry")
def test_jvp_of_scan_encoding_matches_jax():
    """The jvp of a scan groups consts/carry/xs as JAX 0.12 does (ft_in/ft_out zipstar)."""

    def f(x, y):
        return lax.scan(lambda c, xi: (c * xi, c), x[0], y)

    args = [normal(3, 1), normal(3, 2)]
    want = str(
        jax.make_jaxpr(lambda x, y, t: jax.jvp(lambda a: f(a, y), (x,), (t,)))(
            args[0], args[1], args[0]
        )
    )
    got = _jvp_text(f, args, [0])
    for line in (
        "ft_in=(((), ()), ((None,), (RightsOnly(Right(None)),)), ((None,), (RightsOnly(Left(None)),)))",
        "ft_out=(((None,), (RightsOnly(Right(None)),)), ((RightsOnly(Right(None)),), "
        "(RightsOnly(RightsOnly(Right(Right(None)))),)))",
    ):
        assert line in want, want
        assert line in got, got


@needs_corpus
def test_jvp_of_scan_corpus_0_12():
    """Differentiating the corpus' scan reproduces the parameters JAX printed for its jvp."""
    from jaxprtool.ad.jvp import jvp_jaxpr
    from jaxprtool.text.printer import print_jaxpr

    path = CORPUS / "jax-0.12.0.1" / "jvp_of_scan_and_zeros_tangents.jaxpr"
    want = path.read_text()
    scan = parse((CORPUS / "jax-0.12.0.1" / "scan.jaxpr").read_text(), "scan.jaxpr").jaxpr
    text = print_jaxpr(jvp_jaxpr(scan))
    assert (
        "ft_in=(((), ()), ((None,), (RightsOnly(Right(None)),)), ((None,), (RightsOnly(Right(None)),)))"
        in text
    )
    assert (
        "ft_out=(((None,), (RightsOnly(Right(None)),)), ((RightsOnly(Right(None)),), "
        "(RightsOnly(RightsOnly(Right(Right(None)))),)))" in text
    )
    assert "ft_out=(((None,), (RightsOnly(Right(None)),))," in want


# ---------------------------------------------------------------- the older scan encoding (0.10.2 / 0.4.35)


def _corpus_case_fn(name):
    """The function of a corpus case (generator/cases.py), as a JAX function."""
    import importlib.util

    from conftest import FORMAT_DIR
    from jax.extend.core import jaxpr_as_fun

    spec = importlib.util.spec_from_file_location(
        "jaxpr_format_cases", FORMAT_DIR / "generator" / "cases.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    closed = dict((n, f) for n, f, _ in mod.CASES)[name]()
    fun = jaxpr_as_fun(closed)
    return lambda *xs: tuple(fun(*xs))


@needs_corpus
@pytest.mark.parametrize("version", ["jax-0.10.2", "older/jax-0.4.35"])
def test_old_scan_encoding(version):
    from jaxprtool.ad.api import vjp_jaxpr
    from jaxprtool.ad.jvp import jvp_jaxpr
    from jaxprtool.text.printer import print_jaxpr

    path = CORPUS / version / "scan.jaxpr"
    if not path.exists():
        pytest.skip(f"{path} absent")
    src = path.read_text()
    j = parse(src, str(path)).jaxpr
    f = _corpus_case_fn("scan")
    args = [normal(4, 1), normal((10, 4), 2)]
    tans = [normal(4, 3), normal((10, 4), 4)]

    jv = jvp_jaxpr(j)
    text = print_jaxpr(jv)
    assert "num_carry=2" in text and "num_consts=0" in text and "ft_in" not in text, text
    if "_split_transpose" in src:
        assert "_split_transpose=False" in text and "linear=(False, True, False, True)" in text, (
            text
        )
    want_out, want_t = _jitted_jvp(f)(tuple(args), tuple(tans))
    got = _run(jv, args + tans)
    for k, (g, w) in enumerate(zip(got, list(want_out) + list(want_t))):
        _close(g, w, f"jvp output {k}")

    cts = [normal(o.shape, 5 + k) for k, o in enumerate(jax.eval_shape(f, *args))]
    want_ct = jax.jit(lambda a, c: jax.vjp(f, *a)[1](c))(args, tuple(cts))
    vj = vjp_jaxpr(j)
    vtext = print_jaxpr(vj)
    assert "num_carry" in vtext and "ft_in" not in vtext, vtext
    got = _run(vj, args + cts)
    for k, (g, w) in enumerate(zip(got[2:], want_ct)):
        _close(g, w, f"cotangent {k}")


# ---------------------------------------------------------------- higher order, hand-written linear programs


def _nested_loss(x):
    def step(c, xi):
        c2 = jnp.tanh(c * xi + 0.3 * c)
        return c2, lax.cond(c2.sum() > 0, jnp.sin, lambda u: u * u, c2)

    c, ys = lax.scan(step, x, jnp.linspace(0.1, 1.0, 12, dtype=jnp.float32).reshape(4, 3))
    return c.sum() + ys.sum()


def test_second_order():
    """forward-over-reverse and reverse-over-reverse through scan + cond (the transposed scan is
    differentiated again: its Pytree ft_in is read back)."""
    from jaxprtool.ad.api import grad_jaxpr, vjp_jaxpr
    from jaxprtool.ad.jvp import jvp_jaxpr
    from jaxprtool.text.printer import print_jaxpr

    x = np.array([0.3, -0.2, 0.5], np.float32)
    t = np.array([1.0, 0.5, -1.0], np.float32)
    j = parse(str(jax.make_jaxpr(_nested_loss)(x)), "<t>").jaxpr
    g = grad_jaxpr(j, 0)
    grad, hvp = jax.jit(lambda x, t: jax.jvp(jax.grad(_nested_loss), (x,), (t,)))(x, t)
    _close(_run(g, [x])[0], grad, "grad")
    _close(_run(jvp_jaxpr(g), [x, t])[1], hvp, "forward over reverse")
    vg = vjp_jaxpr(g)
    _close(_run(vg, [x, t])[1], hvp, "reverse over reverse")
    again = parse(print_jaxpr(vg), "<printed>").jaxpr  # the printed program reads back
    _close(_run(again, [x, t])[1], hvp, "reverse over reverse, printed and parsed")


def test_transpose_scan_with_counter():
    """A linear scan with a non-linear carry (fori_loop's counter) and a zero-initialised one."""
    from jaxprtool.ad.transpose import transpose_jaxpr

    def f(x):
        return lax.fori_loop(
            0, 5, lambda i, c: c * 2.0 + x * i.astype(jnp.float32), jnp.zeros(3, jnp.float32)
        )

    x = normal(3, 1)
    w = normal(3, 2)
    j = parse(str(jax.make_jaxpr(f)(x)), "<t>").jaxpr
    got = _run(transpose_jaxpr(j, [True]), [w])
    want = jax.jit(lambda w: jax.linear_transpose(f, x)(w))(w)  # (eagerly: one an operation)
    _close(got[0], want[0], "transpose")


def test_scan_loop_invariant_residual_hoisted():
    from jaxprtool.ad.linearize import linearize_jaxpr

    case = next(c for c in CASES if c.name == "scan_hoist")
    primal, linear, _ = linearize_jaxpr(_our_jaxpr(case), [1])  # differentiate c0 only
    top = [e.prim for e in primal.eqns]
    assert "cos" in top, primal  # hoisted out of the primal scan
    scan = next(e for e in linear.eqns if e.prim == "scan")
    assert all(e.prim != "cos" for e in scan.params["jaxpr"].eqns)
    assert scan.inputs[0].type.shape == (3,)  # cos(w) enters the linear scan as a const, unstacked


@needs_jax("0.11", "the flat-tree scan encoding (ft_in/ft_out); it prints num_consts/num_carry")
def test_jvp_of_grad_scan_encoding_matches_jax():
    """jvp of JAX's printed grad program (its transposed scan has `Pytree(...)` flat trees): our
    ft_in/ft_out are JAX's, character for character."""
    from jaxprtool.ad.jvp import jvp_jaxpr
    from jaxprtool.text.printer import print_jaxpr

    def f(x, W):
        def step(c, xi):
            c2 = jnp.tanh(W @ c + xi)
            return c2, c2.sum()

        return lax.scan(step, x, jnp.ones((5, 3)))[0].sum()

    a = (jnp.ones(3), jnp.eye(3))
    g = jax.grad(f, argnums=(0, 1))
    ours = print_jaxpr(jvp_jaxpr(parse(str(jax.make_jaxpr(g)(*a)), "<grad>").jaxpr, [0]))
    theirs = str(jax.make_jaxpr(lambda x, W, t: jax.jvp(lambda x: g(x, W), (x,), (t,)))(*a, a[0]))

    def ft_lines(s):
        return [line.strip() for line in s.splitlines() if "ft_in=" in line or "ft_out=" in line]

    assert len(ft_lines(theirs)) == 4
    assert ft_lines(ours) == ft_lines(theirs)
