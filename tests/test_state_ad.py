"""Refs (new_ref / get / swap / addupdate / freeze) under the transformations: forward mode
as JAX's state JVPs (a Ref's tangent is a Ref), against jax.jvp; reverse mode as JAX's backward
pass (a Ref's cotangent is a Ref: gets transpose to accumulations, swaps to swaps), against
jax.grad / jax.vjp, with the dot-product test on the linear program; vmap as JAX's (every Ref
made inside the vmap batched at axis 0, indexed `[:, IDX]`), against jax.vmap and its
printout; what the tool does not differentiate through (a Ref passed into a body under reverse
mode) refused with the location; run_state's AD is in test_run_state_ad.py."""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax_oracle import close, ir, run, together  # noqa: E402

from jaxprtool import backend  # noqa: E402
from jaxprtool.ad.api import jvp_jaxpr  # noqa: E402
from jaxprtool.core import all_eqns  # noqa: E402
from jaxprtool.text.parser import parse  # noqa: E402


def written(x):
    r = jax.new_ref(jnp.zeros_like(x))
    r[...] = jnp.sin(x)
    r[1:] += x[1:] * 2.0
    y = r[...]
    r[2:] = r[2:] * y[:2]
    return jax.freeze(r) * y


def accumulated(x, w):
    r = jax.new_ref(w)
    for k in range(3):
        r[k] += x[k] * w[k]
    return r[...] + jax.freeze(r)


X = np.array([0.1, 0.4, -0.7, 1.0], np.float32)
T = np.array([0.7, -0.5, 0.3, 0.2], np.float32)
W = np.array([1.5, -1.0, 0.5, 2.0], np.float32)


@pytest.mark.parametrize(
    "f,args,tangents",
    [(written, [X], [T]), (accumulated, [X, W], [T, W * 0.5])],
    ids=["written", "accumulated"],
)
def test_jvp_through_refs_is_jax_s(f, args, tangents):
    j = ir(f, *args)
    jj = jvp_jaxpr(j)
    got, (out, tout) = together(  # one compilation
        (jj, args + tangents), (lambda a, t: jax.jvp(f, a, t), (tuple(args), tuple(tangents)))
    )
    close(got[0], out)
    close(got[1], tout)
    theirs = ir(lambda a, t: jax.jvp(f, a, t), args, tangents)
    assert len(list(all_eqns(jj))) <= len(list(all_eqns(theirs)))


def indexed(x):
    r = jax.new_ref(x)
    r[...] = jnp.sin(r[...])
    r[1:] += x[:3] * 2.0
    return r[...].sum() + r[0] * r[2]


def dynamic(x, i):
    r = jax.new_ref(x)
    r[i] = r[i] * 3.0
    return jnp.cos(r[...]).sum() * jax.freeze(r)[0]


REVERSE = [
    ("written", lambda x: (written(x) ** 2).sum(), [X]),
    ("accumulated", lambda x, w: (accumulated(x, w) * x).sum(), [X, W]),
    ("indexed", indexed, [X]),
    ("dynamic", dynamic, [X, np.int32(2)]),
]


def _float_argnums(args):
    return tuple(k for k, a in enumerate(args) if np.asarray(a).dtype.kind == "f")


@pytest.mark.parametrize("name,f,args", REVERSE, ids=[c[0] for c in REVERSE])
def test_grad_and_vjp_through_refs_are_jax_s(name, f, args):
    from jaxprtool.ad.api import grad_jaxpr, vjp_jaxpr

    argnums = _float_argnums(args)
    j = ir(f, *args)
    g = grad_jaxpr(j, argnums)
    ct = np.float32(0.7)
    n = len(argnums)
    # JAX's and the tool's two programs: one compilation
    got_g, want, got, (out, cts) = together(
        (g, args),
        (jax.grad(f, argnums=argnums), args),
        (vjp_jaxpr(j, argnums), args + [ct]),
        (
            lambda a, c: (lambda o, pull: (o, pull(c)))(*jax.vjp(lambda *d: f(*d, *args[n:]), *a)),
            (args[:n], ct),
        ),
    )
    for a, b in zip(got_g, want):
        close(a, b)
    theirs = jax.make_jaxpr(jax.grad(f, argnums=argnums))(*args).jaxpr
    assert len(list(all_eqns(g))) <= len(theirs.eqns)
    close(got[0], out)
    for a, b in zip(got[1:], cts):
        close(a, b)


@pytest.mark.parametrize("name,f,args", REVERSE[:3], ids=[c[0] for c in REVERSE[:3]])
def test_the_linear_program_through_refs_passes_the_dot_product_test(name, f, args):
    """<w, L v> = <L^T w, v>; the transposed program (it makes a Ref of its cotangent input)
    transposes back to L."""
    from jaxprtool.ad.linearize import linearize_jaxpr
    from jaxprtool.ad.transpose import transpose_jaxpr

    primal, linear, info = linearize_jaxpr(ir(lambda *a: f(*a) * jnp.arange(1.0, 3.0), *args))
    pouts = backend.evaluate(primal, args)
    sources = {"input": args, "output": pouts, "new": pouts[len(info.out_mask) :]}
    res = [sources[r.source][r.index] for r in info.residuals]
    rng = np.random.default_rng(3)
    vs = [rng.uniform(-1, 1, np.shape(a)).astype(np.float32) for a in args]
    ws = [rng.uniform(-1, 1, (2,)).astype(np.float32)]
    lv = backend.evaluate(linear, res + vs)
    mask = [False] * len(res) + [True] * len(vs)
    ltw = backend.evaluate(transpose_jaxpr(linear, mask), res + ws)
    lhs = float(np.sum(ws[0] * lv[0]))
    rhs = sum(float(np.sum(a * v)) for a, v in zip(ltw, vs))
    assert abs(lhs - rhs) <= 1e-4 * max(1.0, abs(lhs)), (lhs, rhs)
    ltt = transpose_jaxpr(transpose_jaxpr(linear, mask), [False] * len(res) + [True])
    close(backend.evaluate(ltt, res + vs)[0], lv[0])


def test_reverse_mode_through_refs_on_the_command_line(tmp_path):
    src = tmp_path / "w.jaxpr"
    src.write_text(str(jax.make_jaxpr(indexed)(X)) + "\n")
    g = run(["grad", str(src)])
    assert g.exit_code == 0, g.output
    lin = run(["linearize", str(src)])
    assert lin.exit_code == 0, lin.output
    t = run(["transpose", "-"], stdin=lin.stdout)
    assert t.exit_code == 0, t.output
    # the transposed combined form: (primal inputs, output cotangent) -> (output, cotangents)
    (got_g,), got, (value, grad) = together(  # one compilation
        (parse(g.stdout, "<grad>").jaxpr, [X]),
        (parse(t.stdout, "<t>").jaxpr, [X, np.float32(0.5)]),
        (jax.value_and_grad(indexed), [X]),
    )
    close(got_g, grad)
    close(got[0], value)
    close(got[-1], 0.5 * grad)


def through_jit(x):
    r = jax.new_ref(x)

    @jax.jit
    def h(y):
        r[...] = r[...] * y

    h(x)
    return r[...].sum()


def through_scan(x):
    r = jax.new_ref(jnp.zeros_like(x))

    def body(i, c):
        r[i] += jnp.sin(x[i]) * c
        return c * 1.5

    jax.lax.fori_loop(0, 4, body, x[0])
    return (r[...] ** 2).sum()


def through_while(x, n):
    r = jax.new_ref(x)

    def body(i, c):
        r[i] = r[i] * c + jnp.sin(c)
        return c * 1.5

    jax.lax.fori_loop(0, n, body, x[0])
    return (r[...] ** 2).sum()


def through_cond(x, p):
    r = jax.new_ref(jnp.zeros_like(x))

    def then():
        r[...] = x * 2.0
        return jnp.cos(x)

    def otherwise():
        r[1:] += jnp.sin(x[1:])
        return x

    y = jax.lax.cond(p, then, otherwise)
    return (r[...] * y).sum()


@pytest.mark.parametrize(
    "f,args",
    [
        (through_jit, [X]),
        (through_scan, [X]),
        (through_cond, [X, True]),
        (through_cond, [X, False]),
    ],
    ids=["jit", "scan", "cond-true", "cond-false"],
)
def test_a_ref_written_inside_a_call_loop_or_branch_differentiates_as_jax_s(f, args):
    """The body gets the tangent Ref (forward) and writes into the cotangent Ref (reverse),
    which the transposed call, loop or branch takes among its operands; `run` carries the
    Refs' values through the traced loop or branch (as JAX's state discharge does)."""
    from jaxprtool.ad.api import grad_jaxpr

    j = ir(f, *args)
    g = grad_jaxpr(j, (0,))

    def jax_answers(x, t):  # (the cond's predicate stays a Python bool: static)
        def h(x):
            return f(x, *args[1:])

        return h(x), jax.jvp(h, (x,), (t,)), jax.grad(h)(x)

    # the tool's three programs and JAX's answers: one compilation
    value, tangent, grad, (want_value, want_tangent, want_grad) = together(
        (j, args), (jvp_jaxpr(j, [0]), args + [T]), (g, args), (jax_answers, [X, T])
    )
    close(value[0], want_value)
    for a, b in zip(tangent, want_tangent, strict=True):
        close(a, b)
    close(grad[0], want_grad)
    assert len(list(all_eqns(g))) <= len(list(all_eqns(ir(jax.grad(f), *args))))


def test_a_while_loop_writing_a_ref_runs_and_differentiates_forward_as_jax_s(tmp_path):
    """Reverse mode of a while loop is refused, as JAX refuses it."""
    args = [X, np.int32(3)]
    j = ir(through_while, *args)

    def jax_answers(x, n, t):
        return through_while(x, n), jax.jvp(lambda x: through_while(x, n), (x,), (t,))

    # the tool's run and jvp and JAX's answers: one compilation
    value, got, (want_value, want) = together(
        (j, args), (jvp_jaxpr(j, [0]), args + [T]), (jax_answers, args + [T])
    )
    close(value[0], want_value)
    for a, b in zip(got, want, strict=True):
        close(a, b)
    with pytest.raises(ValueError, match="Reverse-mode differentiation does not work"):
        jax.make_jaxpr(jax.grad(through_while))(*args)
    src = tmp_path / "w.jaxpr"
    src.write_text(str(jax.make_jaxpr(through_while)(*args)) + "\n")
    r = run(["grad", "--argnums", "0", str(src)])
    assert r.exit_code == 1, r.output
    assert f"{src}:5:5: error: reverse mode of 'while'" in r.output, r.output
    assert "Traceback" not in r.output


def test_refs_untouched_by_the_derivative_still_linearize():
    """A Ref the differentiated inputs never reach is primal work: grad goes through."""

    def f(x, c):
        r = jax.new_ref(c)
        r[...] = c * 2.0
        return jnp.sum(jnp.sin(x) * r[...])

    r = run(["grad", "-"], stdin=str(jax.make_jaxpr(f)(X, W)))
    assert r.exit_code == 0, r.output
    (got,), want = together((parse(r.stdout, "<grad>").jaxpr, [X, W]), (jax.grad(f), [X, W]))
    close(got, want)


@pytest.mark.parametrize(
    "f,args,in_axes",
    [(written, [np.stack([X, W])], (0,)), (accumulated, [np.stack([X, W]), W], (0, None))],
    ids=["written", "accumulated-unbatched-ref-value"],
)
def test_vmap_through_refs_is_jax_s(f, args, in_axes):
    from jaxprtool.ad.batching import vmap_jaxpr
    from jaxprtool.text.printer import print_jaxpr

    single = [a[0] if d == 0 else a for a, d in zip(args, in_axes)]
    j = vmap_jaxpr(ir(f, *single), list(in_axes), [0], 2)
    want = jax.jit(jax.vmap(f, in_axes=in_axes))(*args)
    close(backend.evaluate(j, args)[0], want)
    theirs = str(jax.make_jaxpr(jax.vmap(f, in_axes=in_axes))(*args))
    assert print_jaxpr(j) == theirs.replace("(np.int64(1),)", "(1,)")


def test_vmap_of_run_state_batches_its_refs():
    """JAX 0.12 has no batching rule for run_state; the tool batches its body's Refs at axis 0
    (the equations of one example, batched), checked against JAX run on each example."""
    from jax._src.state.discharge import run_state

    from jaxprtool.ad.batching import vmap_jaxpr

    def f(x, w):
        def body(refs):
            a, b = refs
            b[...] = a[...] * 2.0 + b[...]
            a[1:] = jnp.sin(b[1:]) * w[1:]

        return run_state(body)((x, x + 1.0))

    xs = np.stack([X, W, X * 3.0])
    j = vmap_jaxpr(ir(f, X, W), [0, None], 0, 3)
    assert [e.prim for e in j.eqns].count("run_state") == 1
    assert "scan" not in {e.prim for e in j.eqns}
    got = backend.evaluate(j, [xs, W])
    for k, out in enumerate(got):
        close(out, np.stack([np.asarray(jax.jit(f)(x, W)[k]) for x in xs]))  # (one compile)


def test_vmap_of_a_cond_that_writes_a_ref(tmp_path):
    """An unbatched predicate: one cond of the batched branches (JAX 0.12 refuses any vmap of
    a cond with Refs: the tool's numbers are checked against JAX run on each example); a
    batched predicate (every branch would run and write the Ref) is refused, located."""
    from jaxprtool.ad.batching import vmap_jaxpr

    xs = np.stack([X, W, X * 2.0])
    with pytest.raises(NotImplementedError, match="State effect not supported in vmap-of-cond"):
        jax.vmap(through_cond, in_axes=(0, None))(xs, True)
    for p in (True, False):
        j = vmap_jaxpr(ir(through_cond, X, p), [0, None], [0], 3)
        close(backend.evaluate(j, [xs, p])[0], np.stack([jax.jit(through_cond)(x, p) for x in xs]))
    src = tmp_path / "c.jaxpr"
    src.write_text(str(jax.make_jaxpr(through_cond)(X, True)) + "\n")
    r = run(["vmap", "--in-axes", "0,0", "--axis-size", "3", str(src)])
    assert r.exit_code == 1, r.output
    assert "vmap of a cond with a batched predicate whose branches use a Ref" in r.output
    assert "Traceback" not in r.output


def test_explain_walks_reverse_mode_through_refs(tmp_path):
    """A Ref is shown by its type (its value changes as the program writes it); the
    gradient it explains is checked against finite differences, and against JAX here."""
    src, args = tmp_path / "w.jaxpr", tmp_path / "in.npz"
    src.write_text(str(jax.make_jaxpr(indexed)(X)) + "\n")
    np.savez(args, arg0=X)
    r = run(["explain", str(src), "--args", str(args), "--no-color"])
    assert r.exit_code == 0, r.output
    assert "result: all checks pass" in r.output and "Ref{f32[4]}" in r.output
    grads = [
        float(x) for x in r.output.split("gradient of a")[1].split("[")[2].split("]")[0].split(",")
    ]
    close(np.array(grads, np.float32), jax.jit(jax.grad(indexed))(X), tol=1e-4)


def test_grad_of_ref_programs_with_split_input_file_and_verify_each(tmp_path):
    src = tmp_path / "two.jaxpr"
    src.write_text(
        str(jax.make_jaxpr(indexed)(X))
        + "\n// -----\n"
        + str(jax.make_jaxpr(through_scan)(X))
        + "\n"
    )
    r = run(["grad", "--split-input-file", "--verify-each", str(src)])
    assert r.exit_code == 0, r.output
    parts = r.stdout.split("# -----")
    assert len(parts) == 2
    calls = []  # the two programs and JAX's gradients: one compilation
    for text, f in zip(parts, (indexed, through_scan)):
        calls += [(parse(text.strip() + "\n", "<part>").jaxpr, [X]), (jax.grad(f), [X])]
    outs = together(*calls)
    for (got,), want in zip(outs[::2], outs[1::2]):
        close(got, want)


@pytest.mark.parametrize("f", [indexed, through_scan], ids=["indexed", "scan"])
def test_jacobians_and_hessian_through_refs(f, tmp_path):
    """jacrev against jax.jacrev; jacfwd and hessian, which JAX 0.12 cannot take through a
    Ref ("got axis spec None but output was batched"), against jax.jacrev and central
    differences of jax.grad."""
    src = tmp_path / "h.jaxpr"
    src.write_text(str(jax.make_jaxpr(f)(X)) + "\n")
    calls = []
    for cmd in ("jacrev", "jacfwd", "hessian"):
        r = run([cmd, str(src)])
        assert r.exit_code == 0, (cmd, r.output)
        calls.append((parse(r.stdout, cmd).jaxpr, [X]))
    with pytest.raises(ValueError, match="output was batched"):
        jax.make_jaxpr(jax.jacfwd(f))(X)
    # the three programs and jax.jacrev: one compilation
    *outs, jac = together(*calls, (jax.jacrev(f), [X]))
    close(outs[0][-1], jac)
    close(outs[1][-1], jac)
    eye = np.eye(4, dtype=np.float32) * 1e-3
    grad = jax.jit(jax.grad(f))  # one compilation for the eight gradients
    fd = np.stack([(np.asarray(grad(X + e)) - np.asarray(grad(X - e))) / 2e-3 for e in eye])
    close(outs[2][-1], fd, tol=1e-3)
