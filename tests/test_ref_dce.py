"""Ref liveness in DCE (issue 25), as JAX's `pe.dce_jaxpr` with `live_inputs`: a write into a
Ref made by the program (new_ref) that nothing reads later is dead, in the `dce` pass (through
calls, scans, conds and while loops) and in AD's DCE, so grad, vjp, linearize and transpose of
a call, loop or branch writing such a Ref drop it (no more equations than JAX's, against
jax.grad / jax.vjp / jax.linearize, the linear program passing the dot-product test); a Ref
read later, by the rest of the program or by a loop's next iteration, or an input Ref, keeps
its writes (the values say so)."""

from __future__ import annotations

import functools

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax._src.interpreters import partial_eval as pe  # noqa: E402
from jax_oracle import close, ir, run, together  # noqa: E402

from jaxprtool import backend  # noqa: E402
from jaxprtool.ad.api import grad_jaxpr, jvp_jaxpr, vjp_jaxpr  # noqa: E402
from jaxprtool.ad.linearize import linearize_jaxpr  # noqa: E402
from jaxprtool.ad.transpose import transpose_jaxpr  # noqa: E402
from jaxprtool.core import all_eqns  # noqa: E402
from jaxprtool.passes.dce import dce  # noqa: E402
from jaxprtool.text.parser import parse  # noqa: E402

X = np.array([0.1, 0.4, -0.7, 1.0], np.float32)
REF_PRIMS = {"new_ref", "get", "swap", "addupdate", "freeze"}


def call_dead(x):
    """The brief's example: a jit writes the Ref, nothing reads it afterwards."""
    r = jax.new_ref(x * 0.0)

    @jax.jit
    def g(y):
        r[...] += jnp.sin(y)

    g(x)
    return (jnp.cos(x) * x).sum()


def call_dead_out(x):
    """The call also has a result the rest uses, and reads the Ref before writing it."""
    r = jax.new_ref(x * 0.5)

    @jax.jit
    def g(y):
        r[...] += jnp.sin(y) * r[...]
        return y * 3.0

    return (jnp.cos(g(x)) * x).sum()


def scan_dead(x):
    r = jax.new_ref(jnp.zeros_like(x))

    def body(c, xi):
        r[...] += jnp.sin(xi) * c
        return c * xi, c + xi

    c, ys = jax.lax.scan(body, x[0], x)
    return c + (ys * x).sum()


def cond_dead(x):
    r = jax.new_ref(jnp.zeros_like(x))

    def then():
        r[...] = x * 2.0
        return jnp.cos(x)

    def otherwise():
        r[1:] += jnp.sin(x[1:])
        return x

    return (jax.lax.cond(x[0] > 0, then, otherwise) * x).sum()


def call_read(x):
    """The Ref IS read after the call: its writes stay."""
    r = jax.new_ref(x * 0.5)

    @jax.jit
    def g(y):
        r[...] += jnp.sin(y) * r[...]
        return y * 3.0

    return (jnp.cos(g(x)) * r[...]).sum()


def scan_reads_own(x):
    """Not read after the scan, but each iteration reads what the previous one wrote."""
    r = jax.new_ref(x)

    def body(c, xi):
        c = c + r[0] * xi
        r[...] = r[...] * jnp.cos(xi)
        return c, None

    return jax.lax.scan(body, x[1], x)[0]


def while_dead(x):
    r = jax.new_ref(jnp.zeros_like(x))

    def body(i, c):
        r[i] = r[i] * c + jnp.sin(c)
        return c * 1.5

    n = jnp.int32(3) + (x[0] > 5).astype(jnp.int32)
    return jax.lax.fori_loop(0, n, body, x[0]) * x.sum()


TWO = len(jax.devices("cpu")) >= 2
MESH = jax.make_mesh((2,), ("x",), axis_types=(jax.sharding.AxisType.Auto,)) if TWO else None


def shard_map_dead(x):
    """A shard_map body writes the Ref (sharded as x) and returns a value the rest uses."""
    r = jax.new_ref(x * 0.5)

    def body(rr, xs):
        rr[...] = jnp.sin(xs) * rr[...] + xs
        return xs * 2.0

    specs = (jax.P("x"), jax.P("x"))
    return (
        jnp.cos(jax.shard_map(body, mesh=MESH, in_specs=specs, out_specs=jax.P("x"))(r, x)) * x
    ).sum()


DEAD = [call_dead, call_dead_out, scan_dead, cond_dead, shard_map_dead]
LIVE = [call_read, scan_reads_own]
REVERSE = DEAD + LIVE


def _cases(fs):
    """pytest params; the shard_map program needs 2 host CPU devices (conftest's XLA_FLAGS)."""
    two = pytest.mark.skipif(not TWO, reason="needs 2 host CPU devices (conftest sets XLA_FLAGS)")
    return [pytest.param(f, id=f.__name__, marks=[two] if f is shard_map_dead else []) for f in fs]


def _count(j) -> int:
    return sum(1 for _ in all_eqns(j))


def _ref_eqns(j) -> int:
    return sum(1 for e in all_eqns(j) if e.prim in REF_PRIMS)


CT = np.float32(0.7)  # the vjp's output cotangent
V = np.array([0.3, -0.8, 0.5, 0.9], np.float32)  # the linear program's tangent
W = np.float32(-1.3)  # its transpose's cotangent


@functools.cache
def reverse_oracle(f):
    """JAX's grad and vjp of f (a function of x and the cotangent, run in one compilation
    with the tool's programs) and their equation counts."""

    def values(x, ct):
        out, pullback = jax.vjp(f, x)
        return jax.grad(f)(x), out, pullback(ct)[0]

    counts = {
        "grad": _count(ir(jax.grad(f), X)),
        "vjp": _count(ir(lambda x, c: jax.vjp(f, x)[1](c), X, CT)),
    }
    return values, counts


@functools.cache
def linear_oracle(f):
    """JAX's linear map of f at v and its transpose at w (a function of x, v, w, run in one
    compilation with the tool's programs), and the equation counts of the linear function
    and of jax.linear_transpose's."""

    def values(x, v, w):
        _, lin = jax.linearize(f, x)
        return lin(v), jax.linear_transpose(lin, x)(w)[0]

    _, jlin = jax.linearize(f, X)
    counts = {
        "linear": _count(ir(jlin, V)),
        "transpose": _count(ir(jax.linear_transpose(jlin, X), W)),
    }
    return values, counts


@pytest.mark.parametrize("f", _cases(REVERSE))
def test_grad_and_vjp_drop_dead_ref_writes_as_jax_does(f):
    values, counts = reverse_oracle(f)
    j = ir(f, X)
    g = grad_jaxpr(j, (0,))
    v = vjp_jaxpr(j, (0,))
    (grad, out, x_ct), got_g, got = together((values, (X, CT)), (g, [X]), (v, [X, CT]))
    close(got_g[0], grad)
    assert _count(g) <= counts["grad"]
    close(got[0], out)
    close(got[1], x_ct)
    assert _count(v) <= counts["vjp"]
    if f in DEAD:  # nothing reads the Ref: neither it nor its tangent or cotangent is left
        assert _ref_eqns(g) == 0 and _ref_eqns(v) == 0
    else:
        assert _ref_eqns(g) > 0


def _residuals(primal, info, args):
    pouts = backend.evaluate(primal, args)
    sources = {"input": args, "output": pouts, "new": pouts[len(info.out_mask) :]}
    return [sources[r.source][r.index] for r in info.residuals]


# JAX's linearize runs f eagerly, and eager shard_map refuses Refs: no oracle for that one
LINEARIZE = [f for f in REVERSE if f is not shard_map_dead]


@pytest.mark.parametrize("f", _cases(LINEARIZE))
def test_linearize_and_transpose_drop_dead_ref_writes_as_jax_does(f):
    """The linear program: JAX's values and no more equations than JAX's linear function;
    its transpose no more than jax.linear_transpose's, and <w, L v> = <L^T w, v>."""
    values, counts = linear_oracle(f)
    primal, linear, info = linearize_jaxpr(ir(f, X))
    res = _residuals(primal, info, [X])
    lt = transpose_jaxpr(linear, [False] * len(res) + [True])
    (jl_v, jlt_w), (lv, *_), (ltw, *_) = together(
        (values, (X, V, W)), (linear, res + [V]), (lt, res + [W])
    )
    close(lv, jl_v)
    assert _count(linear) <= counts["linear"]
    close(ltw, jlt_w)
    assert _count(lt) <= counts["transpose"]
    lhs, rhs = float(W * lv), float(np.sum(ltw * V))
    assert abs(lhs - rhs) <= 1e-4 * max(1.0, abs(lhs)), (lhs, rhs)
    if f in DEAD:
        assert _ref_eqns(linear) == 0 and _ref_eqns(lt) == 0


PASS = DEAD + LIVE + [while_dead]


@pytest.mark.parametrize("f", _cases(PASS))
def test_the_dce_pass_prunes_dead_ref_writes_as_jax_s_dce(f):
    """As many equations as JAX's `pe.dce_jaxpr` leaves, and the program's values."""
    j = ir(f, X)
    d = dce(j)
    (got, *_), want = together((d, [X]), (f, [X]))
    close(got, want)
    closed = jax.make_jaxpr(f)(X).jaxpr
    theirs, _ = pe.dce_jaxpr(closed, [True] * len(closed.outvars))
    assert _count(d) == _count(parse(str(theirs), "<jax>").jaxpr)
    assert (_ref_eqns(d) == 0) == (f in DEAD or f is while_dead)


def test_jvp_of_a_loop_writing_a_dead_ref_drops_it():
    """While loops differentiate forward only: the jvp drops the Ref and its tangent."""
    j = ir(while_dead, X)
    t = np.array([0.2, 0.1, -0.4, 0.6], np.float32)
    jj = jvp_jaxpr(j)
    got, want = together((jj, [X, t]), (lambda x, t: jax.jvp(while_dead, (x,), (t,)), [X, t]))
    for a, b in zip(got, want):
        close(a, b)
    assert _ref_eqns(jj) == 0
    assert _count(jj) <= _count(ir(lambda x, t: jax.jvp(while_dead, (x,), (t,)), X, t))


def linear_with_dead_ref(t):
    """A linear program (as an older linearize printed it) whose jit writes a Ref of its
    tangent that nothing reads."""
    r = jax.new_ref(t * 0.5)

    @jax.jit
    def g(u):
        r[...] += u * 3.0
        return u * 4.0

    return (g(t) * 2.0).sum()


def test_transposing_a_linear_program_drops_its_dead_ref(tmp_path):
    """`jaxprtool transpose` of the printout: jax.linear_transpose's values and no more
    equations, no cotangent Ref; <w, L v> = <L^T w, v>."""
    path = tmp_path / "lin.jaxpr"
    path.write_text(str(jax.make_jaxpr(linear_with_dead_ref)(X)))
    res = run(["transpose", str(path)])
    assert res.exit_code == 0, res.output
    lt = parse(res.stdout, "<t>").jaxpr
    jlt = jax.linear_transpose(linear_with_dead_ref, X)
    ltw = backend.evaluate(lt, [W])[0]
    close(ltw, jax.jit(jlt)(W)[0])  # (one compilation; eagerly, one an operation)
    assert _ref_eqns(lt) == 0 and _count(lt) <= _count(ir(jlt, W))
    lv = backend.evaluate(ir(linear_with_dead_ref, X), [V])[0]
    lhs, rhs = float(W * lv), float(np.sum(ltw * V))
    assert abs(lhs - rhs) <= 1e-4 * max(1.0, abs(lhs)), (lhs, rhs)


def _with_ref_input(r, x):
    r[...] += jnp.sin(x)
    return x * 2.0


def test_writes_into_an_input_ref_stay(tmp_path):
    """The caller may read an input Ref afterwards: `jaxprtool dce` keeps its read and
    write."""
    text = str(jax.make_jaxpr(_with_ref_input)(jax.new_ref(X), X))
    path = tmp_path / "ref_input.jaxpr"
    path.write_text(text)
    res = run(["dce", str(path)])
    assert res.exit_code == 0, res.output
    d = parse(res.stdout, "<dce>").jaxpr
    assert [e.prim for e in d.eqns] == [e.prim for e in parse(text, "<t>").jaxpr.eqns]
    assert _ref_eqns(d) == 2
