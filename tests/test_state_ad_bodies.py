"""Differentiated Refs passed into shard_map bodies (issue 25), on a 2-device CPU mesh: the
program JAX printed runs as jax.jit runs it; jvp against jax.jvp, grad and vjp against
jax.grad / jax.vjp, with no more equations than JAX's programs; the linear program passes the
dot-product test and transposes back; what JAX refuses (check_vma=False into a cotangent Ref
whose in_spec leaves a manual axis out) is refused at the equation, in JAX's words."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from conftest import written_module  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402
from jax_oracle import close, ir, run, together  # noqa: E402

from jaxprtool import backend  # noqa: E402
from jaxprtool.ad.api import grad_jaxpr, jvp_jaxpr, vjp_jaxpr  # noqa: E402
from jaxprtool.core import all_eqns  # noqa: E402
from jaxprtool.text.parser import parse  # noqa: E402

TWO = len(jax.devices("cpu")) >= 2
pytestmark = pytest.mark.skipif(
    not TWO, reason="needs 2 host CPU devices (conftest sets XLA_FLAGS)"
)

MESH = jax.make_mesh((2,), ("x",), axis_types=(jax.sharding.AxisType.Auto,)) if TWO else None
X = np.array([0.1, 0.4, -0.7, 1.0], np.float32)
T = np.array([0.7, -0.5, 0.3, 0.2], np.float32)


def sharded(x):
    """The Ref sharded as the input, its initial value depending on x."""
    r = jax.new_ref(x * 0.5)

    def body(rr, xs):
        rr[...] = jnp.sin(xs) * rr[...] + xs
        return xs * 2.0

    y = jax.shard_map(body, mesh=MESH, in_specs=(P("x"), P("x")), out_specs=P("x"))(r, x)
    return (r[...] * y).sum()


def unchecked(x):
    """check_vma=False, the Ref sharded over the one manual axis."""
    r = jax.new_ref(x)

    def body(rr, xs):
        rr[...] = jnp.sin(xs) * rr[...] + xs
        return xs * 2.0

    f = jax.shard_map(body, mesh=MESH, in_specs=(P("x"), P("x")), out_specs=P("x"), check_vma=False)
    y = f(r, x)  # (the Ref read after the shard_map)
    return (r[...] * y).sum()


def replicated(x):
    """A replicated Ref written with an invariant value (a psum of the shards)."""
    r = jax.new_ref(x)

    def body(rr, xs):
        rr[...] = rr[...] * 2.0 + jax.lax.psum(xs.sum(), "x")
        return xs * 2.0

    y = jax.shard_map(body, mesh=MESH, in_specs=(P(), P("x")), out_specs=P("x"))(r, x)
    return (r[...] * y).sum()


def written_only(x):
    """No result: the body's only effect is its accumulation into the Ref."""
    r = jax.new_ref(jnp.zeros_like(x))

    def body(rr, xs):
        rr[...] += jnp.cos(xs) * xs
        return ()

    jax.shard_map(body, mesh=MESH, in_specs=(P("x"), P("x")), out_specs=())(r, x)
    return (r[...] ** 2).sum()


def loop_inside(x):
    """A loop in the body writes the Ref."""
    r = jax.new_ref(x * 0.5)

    def body(rr, xs):
        def step(i, c):
            rr[i] = rr[i] * c + jnp.sin(xs[i])
            return c * 1.5

        jax.lax.fori_loop(0, 2, step, xs[0])
        return xs * rr[...]

    y = jax.shard_map(body, mesh=MESH, in_specs=(P("x"), P("x")), out_specs=P("x"))(r, x)
    return (r[...] * y).sum()


def in_jit_and_scan(x):
    """The shard_map in a scan's body inside a jit, the Ref closed over by both."""
    r = jax.new_ref(x)

    def body(rr, xs):
        rr[...] = jnp.cos(xs) * rr[...]
        return xs * 2.0

    sm = jax.shard_map(body, mesh=MESH, in_specs=(P("x"), P("x")), out_specs=P("x"))

    @jax.jit
    def g(x):
        return jax.lax.scan(lambda c, _: (sm(r, c) + c, None), x, None, length=2)[0]

    y = g(x)
    return (r[...] * y).sum()


def two_refs(x):
    """Two Refs, one written from the other."""
    r, s = jax.new_ref(x), jax.new_ref(jnp.zeros_like(x))

    def body(rr, ss, xs):
        ss[...] += rr[...] * xs
        rr[...] = jnp.sin(ss[...])
        return xs

    f = jax.shard_map(body, mesh=MESH, in_specs=(P("x"),) * 3, out_specs=P("x"))
    y = f(r, s, x)
    return (r[...] * s[...] * y).sum()


CASES = [sharded, unchecked, replicated, written_only, loop_inside, in_jit_and_scan, two_refs]
IDS = [f.__name__ for f in CASES]


def count(j) -> int:
    return len(list(all_eqns(j)))


@pytest.mark.parametrize("f", CASES, ids=IDS)
def test_a_ref_into_shard_map_runs_and_differentiates_as_jax_s(f):
    against_jax(f, X, T)


def against_jax(f, x, t):
    """run, jvp, grad and vjp of f's printout against JAX's, with no more equations."""
    j = ir(f, x)
    jj, g = jvp_jaxpr(j), grad_jaxpr(j)
    ct = np.float32(0.7)

    def oracle(x, t, ct):
        out, pullback = jax.vjp(f, x)
        return f(x), jax.jvp(f, (x,), (t,)), jax.grad(f)(x), out, pullback(ct)[0]

    # JAX's values and the tool's four programs: one compilation (a multi-device program
    # of the tool's runs on its own)
    (value, want, grad, want_out, want_ct), got_j, got, got_g, (out, vj) = together(
        (oracle, (x, t, ct)), (j, [x]), (jj, [x, t]), (g, [x]), (vjp_jaxpr(j), [x, ct])
    )
    close(got_j[0], value)
    for a, b in zip(got, want):
        close(a, b)
    assert count(jj) <= count(ir(lambda x, t: jax.jvp(f, (x,), (t,)), x, t))

    close(got_g[0], grad)
    assert count(g) <= count(ir(jax.grad(f), x))

    close(out, want_out)
    close(vj, want_ct)


@pytest.mark.skipif(len(jax.devices("cpu")) < 4, reason="needs 4 host CPU devices")
def test_a_ref_left_unsharded_over_a_mesh_axis_is_written_with_an_invariant_value():
    """On a 2x2 mesh, the Ref sharded over x only (check_vma): the body writes a psum over
    y into it; its cotangent Ref keeps the in_spec P('x')."""
    mesh = jax.make_mesh((2, 2), ("x", "y"), axis_types=(jax.sharding.AxisType.Auto,) * 2)

    def f(x):
        r = jax.new_ref(x * 0.5)

        def body(rr, xs):
            rr[...] = rr[...] * jnp.sin(jax.lax.psum(xs.sum(1, keepdims=True), "y"))
            return xs * rr[:, :2]

        specs = (P("x"), P("x", "y"))
        y = jax.shard_map(body, mesh=mesh, in_specs=specs, out_specs=P("x", "y"))(r, x)
        return (r[...] * y).sum()

    x = np.arange(16, dtype=np.float32).reshape(4, 4) / 10
    against_jax(f, x, x[::-1].copy())


@pytest.mark.parametrize("f", [sharded, replicated, two_refs], ids=["sharded", "replicated", "two"])
def test_the_linear_program_through_a_shard_map_ref_passes_the_dot_product_test(f):
    """L is jax.jvp's tangent map."""
    lv = dot_product_test(ir(f, X))
    close(lv, jax.jit(lambda x, t: jax.jvp(f, (x,), (t,))[1])(X, T))


def dot_product_test(j):
    """<w, L v> = <L^T w, v> and L^T^T = L for the linear program of `j`; returns L T."""
    from jaxprtool.ad.linearize import linearize_jaxpr
    from jaxprtool.ad.transpose import transpose_jaxpr

    primal, linear, info = linearize_jaxpr(j)
    pouts = backend.evaluate(primal, [X])
    sources = {"input": [X], "output": pouts, "new": pouts[len(info.out_mask) :]}
    res = [sources[r.source][r.index] for r in info.residuals]
    (lv,) = backend.evaluate(linear, res + [T])
    mask = [False] * len(res) + [True]
    lt = transpose_jaxpr(linear, mask)
    w = np.float32(-1.3)
    (ltw,) = backend.evaluate(lt, res + [w])
    lhs, rhs = float(w * lv), float(np.vdot(ltw, T))
    assert abs(lhs - rhs) <= 1e-4 * max(1.0, abs(lhs)), (lhs, rhs)
    ltt = transpose_jaxpr(lt, [False] * len(res) + [True])
    close(backend.evaluate(ltt, res + [T])[0], lv)
    return lv


def test_grad_and_linearize_transpose_of_a_shard_map_ref_on_the_command_line(tmp_path):
    src = tmp_path / "s.jaxpr"
    src.write_text(str(jax.make_jaxpr(sharded)(X)) + "\n")
    g = run(["grad", str(src)])
    assert g.exit_code == 0, g.output
    (got,) = backend.evaluate(parse(g.stdout, "<grad>").jaxpr, [X])
    value, grad = jax.jit(jax.value_and_grad(sharded))(X)  # (one compilation for both)
    close(got, grad)
    lin = run(["linearize", str(src)])
    assert lin.exit_code == 0, lin.output
    t = run(["transpose", "-"], stdin=lin.stdout)
    assert t.exit_code == 0, t.output
    got = backend.evaluate(parse(t.stdout, "<t>").jaxpr, [X, np.float32(0.5)])
    close(got[0], value)
    close(got[-1], 0.5 * grad)
    c = run(["check-grad", str(src)])
    assert c.exit_code == 0 and "0 failure" in c.output, c.output


def unchecked_replicated(x):
    r = jax.new_ref(x)

    def body(rr, xs):
        rr[...] = rr[...] * 2.0
        return xs * 2.0

    f = jax.shard_map(body, mesh=MESH, in_specs=(P(), P("x")), out_specs=P("x"), check_vma=False)
    y = f(r, x)
    return (r[...] * y).sum()


def test_reverse_mode_into_an_unchecked_replicated_ref_is_refused_as_jax_refuses_it(tmp_path):
    """Forward mode goes through (as JAX's); reverse mode is refused at the shard_map."""
    with pytest.raises(NotImplementedError, match="check_vma=False into a gradient Ref"):
        jax.make_jaxpr(jax.grad(unchecked_replicated))(X)
    src = tmp_path / "u.jaxpr"
    src.write_text(str(jax.make_jaxpr(unchecked_replicated)(X)) + "\n")
    r = run(["grad", str(src)])
    assert r.exit_code == 1, r.output
    assert f"{src}:3:5: error: Differentiating a shard_map with check_vma=False into a " in r.output
    assert "JAX refuses it too" in r.output and "Traceback" not in r.output
    jj = jvp_jaxpr(ir(unchecked_replicated, X))
    want = jax.jit(lambda x, t: jax.jvp(unchecked_replicated, (x,), (t,)))(X, T)
    for a, b in zip(backend.evaluate(jj, [X, T]), want):
        close(a, b)


def test_a_checkpoint_writing_a_ref_runs_and_differentiates_forward_as_jax_s():
    """Reverse mode is refused: JAX 0.12.0's vjp of such a checkpoint raises, 0.12.1's
    gives a gradient that disagrees with its own jvp (and both linearizes disagree)."""
    from jaxprtool.backend.prims import installed_version
    from jaxprtool.core import JaxprError

    def f(x):
        r = jax.new_ref(x * 0.5)

        @jax.checkpoint
        def body(rr, xs):
            rr[...] = jnp.sin(xs) * rr[...] + xs
            return jnp.cos(xs * rr[...])

        y = body(r, x)
        return (r[...] * y).sum()

    j = ir(f, X)
    jj = jvp_jaxpr(j)
    jax_jvp = jax.jit(lambda x, t: jax.jvp(f, (x,), (t,)))  # (one compilation for every t)
    # the program and its jvp beside JAX's: one compilation
    (got,), want, got_jvp, want_jvp = together(
        (j, [X]), (f, [X]), (jj, [X, T]), (lambda x, t: jax.jvp(f, (x,), (t,)), [X, T])
    )
    close(got, want)
    assert len(got_jvp) == 2
    for a, b in zip(got_jvp, want_jvp):
        close(a, b)
    assert count(jj) <= count(ir(lambda x, t: jax.jvp(f, (x,), (t,)), X, T))
    if installed_version() < (0, 12, 1):
        with pytest.raises(ValueError, match="Expected cotangent type Ref"):
            jax.vjp(f, X)[1](np.float32(1.0))
    else:  # JAX's gradient against its jvp along each axis: not the same
        jacobian = [jax_jvp(X, e)[1] for e in np.eye(X.size, dtype=X.dtype)]
        assert not np.allclose(jax.jit(jax.grad(f))(X), np.stack(jacobian), rtol=1e-3)
    with pytest.raises(JaxprError, match="reverse mode of 'remat2' with a differentiated Ref") as e:
        grad_jaxpr(j)
    assert e.value.loc is not None and e.value.loc.line == 4


# ---------------------------------------------------------------- custom-rule bodies

RULES = """
import jax
import jax.numpy as jnp


@jax.custom_jvp
def cj(r, x):
    r[...] += jnp.sin(x)
    return x * 2.0


@cj.defjvp
def cj_jvp(p, t):
    (r, x), (dr, dx) = p, t
    r[...] += jnp.sin(x)
    dr[...] += jnp.cos(x) * dx * 0.5  # not the body's derivative: JAX uses the rule
    return x * 2.0, dx * 2.0


@jax.custom_vjp
def cv(r, x):
    r[...] += jnp.sin(x)
    return x * 2.0


def cv_fwd(r, x):
    r[...] += jnp.sin(x)
    return x * 2.0, x


def cv_bwd(x, g):
    return g * 3.0, g * jnp.cos(x)  # JAX adds the Ref's entry into its cotangent Ref


cv.defvjp(cv_fwd, cv_bwd)


@jax.custom_vjp
def cn(r, x):
    r[...] = r[...] * x
    return x * 2.0


cn.defvjp(lambda r, x: (cn(r, x), None), lambda _, g: (None, g * 2.0))


def through_cj(x):
    r = jax.new_ref(x)
    y = cj(r, x)
    return (r[...] * y).sum()


def through_cv(x):
    r = jax.new_ref(x)
    y = cv(r, x)
    return (r[...] * y).sum()


def through_cn(x):
    r = jax.new_ref(x * 0.5)
    y = cn(r, x)
    return (r[...] * y).sum()
"""


@pytest.fixture(scope="module")
def rules(tmp_path_factory):
    """The module above, importable, and its functions as `jaxprtool trace` prints them
    (the custom rules recorded, Ref operands included)."""
    folder = tmp_path_factory.mktemp("refrules")
    mod = written_module(folder, "ref_rules", RULES)

    def trace(fn: str) -> str:
        with contextlib.chdir(folder):
            r = run(["trace", f"{mod.__name__}:{fn}", "--arg", "f32[4]"])
        assert r.exit_code == 0 and "warning" not in r.stderr, r.output
        return r.stdout

    return mod, trace


@pytest.mark.parametrize("fn", ["through_cj", "through_cv", "through_cn"])
def test_a_ref_into_a_traced_custom_rule_differentiates_as_jax_s(rules, fn):
    """The recorded rules take the Ref (and, custom_jvp's, its tangent Ref): grad (and jvp of
    the custom_jvp) equal JAX's, which uses the rules, not the bodies' derivatives."""
    mod, trace = rules
    f = getattr(mod, fn)
    j = parse(trace(fn), "<traced>").jaxpr
    assert "jaxprtool_" in print_params(j)
    g = grad_jaxpr(j)
    ct = np.float32(0.7)
    # custom_jvp's jvp too (a custom_vjp has none, in JAX as in the tool)
    jj = jvp_jaxpr(j) if fn == "through_cj" else None
    # the tool's programs and JAX's derivatives in one compile (`together`)
    got_j, got_g, got_v, (want_g, want_ct), *jvps = together(
        (j, [X]),
        (g, [X]),
        (vjp_jaxpr(j), [X, ct]),
        (lambda x, c: (jax.grad(f)(x), jax.vjp(f, x)[1](c)[0]), (X, ct)),
        *([(jj, [X, T]), (lambda x, t: jax.jvp(f, (x,), (t,)), (X, T))] if jj else []),
    )
    close(got_j[0], f(X))  # (JAX's jit has no discharge rule for it)
    close(got_g[0], want_g)
    assert count(g) <= count(ir(jax.grad(f), X))
    close(got_v[1], want_ct)
    dot_product_test(j)
    if jj is not None:
        got_jj, want_jj = jvps
        for a, b in zip(got_jj, want_jj):
            close(a, b)
        assert count(jj) <= count(ir(lambda x, t: jax.jvp(f, (x,), (t,)), X, T))


def print_params(j) -> str:
    return " ".join(k for e in j.eqns for k in e.params)


PMAP_WITH_A_REF = """{ lambda ; a:f32[2,3]. let
    r:Ref{f32[2,3]} = new_ref a
    b:f32[2,3] = xla_pmap[
      axis_name=d
      axis_size=2
      backend=None
      call_jaxpr={ lambda ; s:Ref{f32[3]} c:f32[3]. let
          d:f32[3] = integer_pow[y=2] c
          s[...] += d
        in (d,) }
      devices=None
      donated_invars=(False, False)
      global_axis_size=2
      in_axes=(0, 0)
      is_explicit_global_axis_size=False
      name=<lambda>
      out_axes=(0,)
    ] r a
    e:f32[2,3] <- r[...]
    f:f32[2,3] = mul e b
  in (f,) }
"""


def test_a_differentiated_ref_into_xla_pmap_is_refused_as_jax_s_pmap_takes_none():
    """JAX's pmap refuses a Ref argument when tracing; a text with one (written by hand)
    differentiates nowhere: refused at the xla_pmap, never dropped."""

    def f(x):
        return jax.pmap(lambda r, y: y * 2.0)(jax.new_ref(x), x)

    with pytest.raises(ValueError, match="Attempting to pass a Ref"):
        jax.make_jaxpr(f)(np.ones((2, 3), np.float32))
    for cmd in ("jvp", "vjp"):
        r = run([cmd, "-"], stdin=PMAP_WITH_A_REF)
        assert r.exit_code == 1, r.output
        assert "<stdin>:3:5: error: a differentiated Ref passed into xla_pmap's body" in r.output
