"""Multi-device programs (issue 12): shard_map, collectives, xla_pmap and shardings run on
host CPU devices (conftest sets 8) and match JAX; grad/vjp/jvp/linearize of them match
jax.grad/jax.vjp/jax.jvp on the same mesh; the dot-product test on their linear programs;
the `--mesh`/`--devices`/`--show-sharding` options; compile shows shardings and collectives;
two processes on the loopback address (gloo) equal the one-process run."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from conftest import CORPUS, needs_corpus  # noqa: E402
from jax import lax  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402
from jax_oracle import close, ir, run  # noqa: E402

from jaxprtool import backend  # noqa: E402
from jaxprtool.ad.api import (  # noqa: E402
    grad_jaxpr,
    jvp_jaxpr,
    linearize_jaxpr,
    transpose_jaxpr,
    vjp_jaxpr,
)
from jaxprtool.backend.sharding import is_single_device  # noqa: E402
from jaxprtool.check import check  # noqa: E402
from jaxprtool.text.parser import parse  # noqa: E402
from jaxprtool.text.printer import print_jaxpr  # noqa: E402
from jaxprtool.text.style import detect_style  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
AUTO = jax.sharding.AxisType.Auto

pytestmark = pytest.mark.skipif(
    len(jax.devices("cpu")) < 8, reason="needs 8 host CPU devices (conftest sets XLA_FLAGS)"
)


def mesh(*axes):
    names = tuple(a for a, _ in axes)
    return jax.make_mesh(tuple(s for _, s in axes), names, axis_types=(AUTO,) * len(names))


def rnd(seed, *shape):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def errors(j):
    return [str(d) for d in check(j, "<ad>") if d.kind == "error"]


def shown(sharding) -> str:
    """How `--show-sharding` writes a JAX array's `.sharding`."""
    if is_single_device(sharding):
        (d,) = sharding.device_set
        return f"single device {d.platform}:{d.id}"
    axes = ",".join(f"{n}={s}" for n, s in sharding.mesh.shape.items())
    return f"{sharding.spec} over mesh {axes} ({sharding.mesh.size} devices)"


def reparse(j):
    """Print and parse again: the printed text is what the commands hand on."""
    return parse(print_jaxpr(j, detect_style(j)), "<printed>").jaxpr


# ---------------------------------------------------------------- programs made with JAX

MESH_X = mesh(("x", 4))
MESH_XY = mesh(("x", 4), ("y", 2))


def dp_loss(check_vma):
    """A data-parallel MLP loss: batch sharded over x, parameters replicated, psum'd loss."""

    def loss(w1, b1, w2, x, y):
        def local(w1, b1, w2, x, y):
            h = jnp.tanh(x @ w1 + b1)
            err = h @ w2 - y
            return lax.psum(jnp.sum(err**2), "x") / 8.0

        return jax.shard_map(
            local,
            mesh=MESH_X,
            in_specs=(P(), P(), P(), P("x"), P("x")),
            out_specs=P(),
            check_vma=check_vma,
        )(w1, b1, w2, x, y)

    args = [rnd(0, 3, 5), rnd(1, 5), rnd(2, 5, 2), rnd(3, 8, 3), rnd(4, 8, 2)]
    return loss, args


def tp_matmul(check_vma):
    """Tensor-parallel MLP block: all_gather the activations, then psum_scatter the partial
    products (Megatron style)."""

    def f(x, w1, w2):
        def local(x, w1, w2):
            h = jnp.tanh(lax.all_gather(x, "x", axis=1, tiled=True) @ w1)
            return lax.psum_scatter(h @ w2, "x", scatter_dimension=0, tiled=True)

        return jax.shard_map(
            local,
            mesh=MESH_X,
            in_specs=(P(None, "x"), P(None, "x"), P("x", None)),
            out_specs=P("x", None),
            check_vma=check_vma,
        )(x, w1, w2)

    return f, [rnd(5, 8, 8), rnd(6, 8, 8), rnd(7, 8, 4)]


def permute_all_to_all(check_vma):
    def f(x):
        def local(x):
            y = lax.ppermute(jnp.sin(x), "x", [(0, 1), (1, 2), (2, 3), (3, 0)])
            z = lax.all_to_all(y * x, "x", 0, 1, tiled=True)
            return jnp.cos(z) * lax.axis_index("x").astype(jnp.float32)

        return jax.shard_map(
            local, mesh=MESH_XY, in_specs=P("x", "y"), out_specs=P("x", "y"), check_vma=check_vma
        )(x)

    return f, [rnd(8, 16, 8)]


def two_axes(check_vma):
    def f(x, w):
        def local(x, w):
            s = lax.psum(jnp.sin(x) @ w, "y")
            return lax.pmean(s, "x") * 2.0

        return jax.shard_map(
            local,
            mesh=MESH_XY,
            in_specs=(P("x", "y"), P("y", None)),
            out_specs=P(None, None),
            check_vma=check_vma,
        )(x, w)

    return f, [rnd(9, 8, 4), rnd(10, 4, 3)]


MESH_2X2 = mesh(("x", 2), ("y", 2))


def varying_cond(check_vma):
    """A cond whose predicate varies along x, one operand along y (issue 25): the zero
    cotangent of the y-varying operand in the branch that ignores it must vary along y too
    (JAX's zeros are pvary'd), or the branches' types differ and JAX refuses to lower."""

    def f(a, b):
        def body(a, b):
            def other(a, b):
                y = a * 2.0
                return lax.pcast(y, ("y",), to="varying") if check_vma else y

            r = lax.cond(a[0] > 0, lambda a, b: jnp.sin(a) * b[0], other, a, b)
            return lax.psum(jnp.sum(r), ("x", "y"))

        return jax.shard_map(
            body, mesh=MESH_2X2, in_specs=(P("x"), P("y")), out_specs=P(), check_vma=check_vma
        )(a, b)

    return f, [np.array([1.0, -2.0, 3.0, 4.0], np.float32), rnd(12, 4)]


PROGRAMS = {"dp_mlp": dp_loss, "tp_matmul": tp_matmul, "permute": permute_all_to_all}
PROGRAMS["two_axes"] = two_axes
PROGRAMS["varying_cond"] = varying_cond
CASES = [(n, cv) for n in PROGRAMS for cv in (True, False)]
IDS = [f"{n}-{'vma' if cv else 'novma'}" for n, cv in CASES]


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_run_vjp_jvp_linearize_match_jax(case):
    """One compiled program of each kind per case (compile time dominates): run, vjp, jvp,
    and linearize + transpose with the dot-product test, all against JAX on the same mesh.
    The run is the vjp's and linearize's primal outputs (the program's equations, run
    inside each: running the program alone as well compiled it a third time)."""
    name, cv = case
    f, args = PROGRAMS[name](cv)
    j = reparse(ir(f, *args))
    ct = rnd(11, *jax.eval_shape(f, *args).shape)
    ts = [rnd(20 + i, *np.shape(a)) for i, a in enumerate(args)]
    # JAX's value, vjp and jvp: one compilation
    ref, ct_ref, t_ref = jax.jit(
        lambda a, t, c: (f(*a), jax.vjp(f, *a)[1](c), jax.jvp(f, a, t)[1])
    )(args, ts, ct)
    vj = reparse(vjp_jaxpr(j))
    assert not errors(vj)
    res = backend.evaluate(vj, args + [ct])
    close(res[0], ref)
    for g, r in zip(res[1:], ct_ref, strict=True):
        close(g, r)

    primal, linear, info = linearize_jaxpr(j)
    assert not errors(primal) and not errors(linear)
    pouts = backend.evaluate(primal, args)
    n = len(info.out_mask)
    assert n == 1
    close(pouts[0], ref)
    src = {"input": args, "output": pouts[:n], "new": pouts[n:]}
    resid = [src[r.source][r.index] for r in info.residuals]
    (lin_out,) = backend.evaluate(linear, resid + ts)
    close(lin_out, t_ref)
    lt = transpose_jaxpr(linear, [False] * len(resid) + [True] * len(ts))
    t_out = backend.evaluate(lt, resid + [ct])
    lhs = float(np.vdot(lin_out, ct))
    rhs = sum(float(np.vdot(t, c)) for t, c in zip(ts, t_out))
    assert abs(lhs - rhs) <= 1e-3 * max(1.0, abs(lhs))

    if name == "permute":  # forward mode as one program (jvp) once
        jj = jvp_jaxpr(j)
        assert not errors(jj)
        close(backend.evaluate(jj, args + ts)[1], t_ref)


@pytest.mark.parametrize(
    "check_vma",
    # (make test-full; test_run_vjp_jvp_linearize_match_jax[dp_mlp-vma] keeps the reverse
    # mode of the vma program against JAX's, the novma case the CLI's grad | run)
    [pytest.param(True, marks=pytest.mark.slow), False],
    ids=["vma", "novma"],
)
def test_grad_of_data_parallel_mlp_step_matches_jax_grad(check_vma):
    """The training step's gradient through the CLI (grad | run) equals jax.grad."""
    loss, args = dp_loss(check_vma)
    text = str(jax.make_jaxpr(loss)(*args))
    r = run(["grad", "--argnums", "0,1,2", "-"], stdin=text)
    assert r.exit_code == 0, r.output
    g = parse(r.output, "<grad>").jaxpr
    assert "shard_map" in r.output and ("psum" in r.output)
    got = backend.evaluate(g, args)
    for a, b in zip(got, jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(*args)):
        close(a, b)
    if not check_vma:  # JAX divides the seed by the size of the axis P() does not mention
        assert "div" in r.output and "0.25:f32[]" in r.output


def test_grad_of_tensor_parallel_matmul_matches_jax_grad():
    f, args = tp_matmul(True)

    def loss(*a):
        return jnp.sum(f(*a) ** 2)

    g = grad_jaxpr(ir(loss, *args), argnums=(0, 1, 2))
    assert not errors(g)
    text = print_jaxpr(g, detect_style(g))
    assert "reduce_scatter" in text and "all_gather" in text
    got = backend.evaluate(reparse(g), args)
    for a, b in zip(got, jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(*args)):
        close(a, b)


def test_collective_transposes_follow_jax():
    """psum_invariant <-> pvary, all_gather <-> reduce_scatter, ppermute inverted,
    all_to_all with the axes swapped (the rules of jax/_src/lax/parallel.py)."""
    f, args = permute_all_to_all(True)
    vj = vjp_jaxpr(ir(f, *args))
    text = print_jaxpr(vj, detect_style(vj))
    assert "perm=((1, 0), (2, 1), (3, 2), (0, 3))" in text
    assert "concat_axis=1" in text and "split_axis=0" in text  # forward: split 0, concat 1
    assert "concat_axis=0" in text and "split_axis=1" in text
    loss, dargs = dp_loss(True)
    text = print_jaxpr(grad_jaxpr(ir(loss, *dargs), (0,)), None)
    assert "psum_invariant" in text and "pvary" in text


def test_pmax_has_no_derivative_as_in_jax():
    def f(x):
        return jax.shard_map(
            lambda v: lax.pmax(v, "x"), mesh=MESH_X, in_specs=P("x"), out_specs=P()
        )(x)

    text = str(jax.make_jaxpr(f)(rnd(0, 8)))
    r = run(["jvp", "-"], stdin=text)
    assert r.exit_code == 1
    assert "Differentiation rule for 'pmax' not implemented" in r.output


# ---------------------------------------------------------------- corpus programs

SHARDED = [
    "shard_map_collectives",
    "shard_map_vma",
    "pmap",
    "shard_map_more_collectives",
    "sharding_constraint_auto_mesh",
]
VERSIONS = ["jax-0.12.0.1", "jax-0.10.2", "older/jax-0.7.2", "older/jax-0.6.2"]


def _case_fn(name):
    import jax.extend.core as jex
    from backend_corpus import load_cases

    return jex.jaxpr_as_fun(load_cases()[name][0]())


def _floats(outs):
    return [o for o in outs if jnp.issubdtype(o.dtype, jnp.floating)]


def _jax_run_and_vjp(fn, args, cts):
    """JAX's outputs of `fn` and its vjp at `cts` (of the float outputs; None: no vjp), in
    one compilation."""

    def both(args, cts):
        if cts is None:
            return fn(*args), None
        _, pull = jax.vjp(lambda *x: _floats(fn(*x)), *args)
        return fn(*args), pull(cts)

    return jax.jit(both)(args, cts)


@needs_corpus
@pytest.mark.parametrize(
    "version", [VERSIONS[0]] + [pytest.param(v, marks=pytest.mark.slow) for v in VERSIONS[1:]]
)  # the newest printout in the default run, the older ones in `make test-full`
def test_corpus_sharded_programs_run_and_differentiate_like_jax(version):
    """Each version's printout of the sharded cases: run == JAX running the case; vjp ==
    jax.vjp of the case (pmin has no derivative, so that file is only run)."""
    for name in SHARDED:
        path = CORPUS / version / f"{name}.jaxpr"
        j = parse(path.read_text(), str(path)).jaxpr
        fn = _case_fn(name)
        args = [rnd(i, *v.type.shape) for i, v in enumerate(j.invars)]
        floats = _floats(jax.eval_shape(fn, *args))
        cts = [rnd(40 + i, *o.shape) for i, o in enumerate(floats)]
        differentiated = name != "shard_map_more_collectives"  # (pmin has no derivative)
        ref, ref_vjp = _jax_run_and_vjp(fn, args, cts if differentiated else None)
        # the run: the program alone, or the primal outputs of its vjp (its equations run
        # inside it; running the program alone as well would compile it a second time)
        got = backend.evaluate(vjp_jaxpr(j) if differentiated else j, args + cts * differentiated)
        assert len(got) == len(ref) + len(ref_vjp if differentiated else [])
        for a, b in zip(got, ref):
            close(a, b)
        if differentiated:
            for a, b in zip(got[len(ref) :], ref_vjp, strict=True):
                close(a, b)


@needs_corpus
def test_xla_pmap_runs_and_differentiates_like_jax_pmap():
    """JAX 0.4.35 printed pmap as xla_pmap: run on 8 devices, jvp and vjp (older JAX's
    map_transpose) against JAX 0.12's pmap of the same function."""
    path = CORPUS / "older" / "jax-0.4.35" / "pmap.jaxpr"
    j = parse(path.read_text(), str(path)).jaxpr
    pm = jax.pmap(lambda x: lax.psum(x**2, "d"), axis_name="d")
    x, t = rnd(0, 8, 3), rnd(1, 8, 3)
    close(backend.evaluate(j, [x])[0], pm(x))
    close(
        backend.evaluate(jvp_jaxpr(j), [x, t])[1],
        jax.jit(lambda x, t: jax.jvp(pm, (x,), (t,))[1])(x, t),
    )
    close(
        backend.evaluate(vjp_jaxpr(j), [x, t])[1],
        jax.jit(lambda x, t: jax.vjp(pm, x)[1](t)[0])(x, t),
    )


XLA_PMAP_UNMAPPED = """{ lambda ; a:f32[4,3] b:f32[]. let
    c:f32[4,3] = xla_pmap[
      axis_name=rows
      axis_size=4
      backend=None
      call_jaxpr={ lambda ; d:f32[] e:f32[3]. let
          g:f32[3] = mul e d
          h:f32[3] = sin g
          j:f32[3] = psum[axes=('rows',) axis_index_groups=None] h
        in (j,) }
      devices=None
      donated_invars=(False, False)
      global_axis_size=4
      in_axes=(None, 0)
      is_explicit_global_axis_size=False
      name=inner
      out_axes=(0,)
    ] b a
  in (c,) }
"""


def test_xla_pmap_unmapped_input_gradient_is_summed():
    """in_axes=None: the cotangent of a broadcast input is the sum over the mapped axis."""
    j = parse(XLA_PMAP_UNMAPPED, "<pmap>").jaxpr
    pm = jax.pmap(
        lambda d, e: lax.psum(jnp.sin(e * d), "rows"), axis_name="rows", in_axes=(None, 0)
    )
    a, b, ct = rnd(0, 4, 3), np.float32(0.7), rnd(1, 4, 3)
    close(backend.evaluate(j, [a, b])[0], pm(b, a))
    got = backend.evaluate(vjp_jaxpr(j), [a, b, ct])
    ga, gb = jax.jit(lambda a, b: jax.vjp(lambda a, b: pm(b, a), a, b)[1](ct))(a, b)
    close(got[1], ga)
    close(got[2], gb)


# ---------------------------------------------------------------- the commands


@needs_corpus
def test_run_show_sharding_and_eager(tmp_path):
    path = CORPUS / "jax-0.12.0.1" / "shard_map_collectives.jaxpr"
    out = tmp_path / "o.npz"
    r = run(["run", str(path), "--random", "0", "--show-sharding", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert "out0: P(None, 'y') over mesh x=4,y=2 (8 devices)" in r.output
    assert "out2: P() over mesh x=4,y=2" in r.output
    r2 = run(["run", str(path), "--random", "0", "--eager", "-o", str(tmp_path / "e.npz")])
    assert r2.exit_code == 0, r2.output
    a, b = np.load(out), np.load(tmp_path / "e.npz")
    for k in a.files:
        close(a[k], b[k])


@needs_corpus
def test_explicit_sharding_types_need_and_use_mesh(tmp_path):
    path = CORPUS / "jax-0.12.0.1" / "explicit_sharding_types.jaxpr"
    r = run(["run", str(path), "--random", "0"])
    assert r.exit_code == 1
    assert "give it with --mesh x=SIZE,y=SIZE" in r.output
    out = tmp_path / "o.npz"
    r = run(["run", str(path), "--random", "0", "--mesh", "x=4,y=2", "--show-sharding"])
    assert r.exit_code == 0, r.output
    assert "out0: P('x', 'y')" in r.output and "out1: P(None, None)" in r.output
    point = tmp_path / "point.npz"
    argv = ["run", str(path), "--random", "0", "--mesh", "x=4,y=2", "-o", str(out)]
    r = run([*argv, "--save-inputs", str(point)])
    assert r.exit_code == 0, r.output
    saved = np.load(point)  # the point drawn (its matrices scaled by their fan-in)
    a, b = saved["arg0"], saved["arg1"]
    got = np.load(out)
    ref = [jnp.dot(a, b), jnp.dot(a, b), jnp.sum(a, axis=0), a.T]
    for i, e in enumerate(ref):
        close(got[f"out{i}"], e)


@needs_corpus
def test_mesh_option_errors():
    path = str(CORPUS / "jax-0.12.0.1" / "shard_map_collectives.jaxpr")
    r = run(["run", path, "--random", "0", "--mesh", "x=2,y=2"])
    assert r.exit_code == 1 and "--mesh gives axis 'x' size 2" in r.output
    r = run(["run", path, "--random", "0", "--mesh", "x=4,y=2", "--devices", "4"])
    assert r.exit_code == 1 and "the mesh needs 8 devices but --devices gives 4" in r.output
    r = run(["run", path, "--random", "0", "--devices", "16"])
    assert r.exit_code == 1 and "already started in this process with 8 cpu devices" in r.output
    r = run(["run", path, "--random", "0", "--mesh", "x=="])
    assert r.exit_code == 2 and "bad --mesh" in r.output
    r = run(["run", path, "--random", "0", "--coordinator", "127.0.0.1:1"])
    assert r.exit_code == 2 and "go together" in r.output
    big = (CORPUS / "jax-0.12.0.1" / "shard_map_collectives.jaxpr").read_text()
    big = big.replace("'x': 4, 'y': 2", "'x': 8, 'y': 2").replace("f32[8,4]", "f32[16,4]")
    r = run(["run", "-", "--random", "0"], stdin=big)
    assert r.exit_code == 1 and "needs 16 devices but 8 cpu devices are available" in r.output


@needs_corpus
def test_compile_shows_shardings_and_collectives():
    path = str(CORPUS / "jax-0.12.0.1" / "shard_map_more_collectives.jaxpr")
    r = run(["compile", path, "--emit", "stablehlo"])
    assert r.exit_code == 0, r.output
    assert "sharding" in r.output and "mesh" in r.output
    r = run(["compile", path, "--emit", "optimized-hlo", "--stats"])
    assert r.exit_code == 0, r.output
    assert "all-to-all" in r.output and "reduce-scatter" in r.output
    assert "collectives: 3" in r.output
    assert "  all-reduce: 1 (32 bytes)" in r.output


# ---------------------------------------------------------------- two processes (gloo)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow  # two more processes, each importing jax (jax.distributed over loopback)
def test_two_processes_on_loopback_equal_one_process(tmp_path):
    """The same command in two processes of 2 CPU devices each (jax.distributed over
    127.0.0.1, gloo collectives) gives the one-process 4-device result; only process 0
    writes; both processes are killed if they overrun."""
    loss, args = dp_loss(True)
    g = grad_jaxpr(ir(loss, *args), argnums=(0, 1, 2))
    prog = tmp_path / "g.jaxpr"
    prog.write_text(print_jaxpr(g, detect_style(g)))
    np.savez(tmp_path / "in.npz", **{f"arg{i}": a for i, a in enumerate(args)})
    single = tmp_path / "one.npz"
    r = run(["run", str(prog), "--args", str(tmp_path / "in.npz"), "-o", str(single)])
    assert r.exit_code == 0, r.output
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env.update(JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT))
    port = _free_port()
    procs = []
    for pid in (0, 1):
        cmd = [sys.executable, "-m", "jaxprtool", "run", str(prog)]
        cmd += ["--args", str(tmp_path / "in.npz"), "-o", str(tmp_path / f"p{pid}.npz")]
        cmd += ["--coordinator", f"127.0.0.1:{port}", "--num-processes", "2"]
        cmd += ["--process-id", str(pid), "--devices", "2", "--show-sharding"]
        procs.append(
            subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        )
    outs = []
    try:
        for p in procs:
            out, _ = p.communicate(timeout=90)
            outs.append(out.decode(errors="replace"))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)
    assert [p.returncode for p in procs] == [0, 0], "\n".join(o[-2000:] for o in outs)
    assert "over mesh x=4 (4 devices)" in outs[0]
    assert "over mesh" not in outs[1]
    assert not (tmp_path / "p1.npz").exists()
    a, b = np.load(tmp_path / "p0.npz"), np.load(single)
    assert a.files == b.files
    for k in a.files:
        close(a[k], b[k], tol=1e-5)


@needs_corpus
def test_jit_shardings_follow_the_new_operands_and_results(tmp_path):
    """jvp/vjp of `jit[in_shardings=... out_shardings=...]`: the tuples grow with the tangents
    (the tangent takes its primal's sharding), the transpose swaps them; the run applies the
    top-level out_shardings (P(), replicated)."""
    path = str(CORPUS / "jax-0.12.0.1" / "sharding_constraint_auto_mesh.jaxpr")
    r = run(["jvp", path])
    assert r.exit_code == 0, r.output
    (line,) = [x for x in r.output.splitlines() if "in_shardings=" in x]
    assert line.count("spec=P(None, 'y')") == 2
    r = run(["vjp", path])
    assert r.exit_code == 0, r.output
    ins = [x for x in r.output.splitlines() if "in_shardings=" in x]
    assert "spec=P()" in ins[-1]  # the transposed call takes the output's sharding
    prog = tmp_path / "v.jaxpr"
    prog.write_text(r.output)
    a, ct = rnd(0, 8, 4), rnd(1, 8, 4)
    np.savez(tmp_path / "in.npz", arg0=a, arg1=ct)
    out = tmp_path / "o.npz"
    r = run(["run", str(prog), "--args", str(tmp_path / "in.npz"), "-o", str(out)])
    assert r.exit_code == 0, r.output
    close(np.load(out)["out1"], 2.0 * ct)
    r = run(["run", path, "--random", "0", "--show-sharding"])
    assert "out0: P() over mesh x=4,y=2" in r.output


@pytest.mark.parametrize("axis", [0, 1])
def test_vmap_of_jit_moves_its_shardings_past_the_batch_axis(axis):
    """vmap of jit[in_shardings=(P('x'),)]: the spec gets None at the batch dimension, as JAX
    prints it (P(None, 'x') for axis 0), and the batched program runs (3 examples on a mesh
    of 4: the batch axis itself is not sharded)."""
    from jax.sharding import NamedSharding

    from jaxprtool.ad.batching import vmap_jaxpr

    s = NamedSharding(MESH_X, P("x"))
    g = jax.jit(lambda x: jnp.sin(x) * 2.0, in_shardings=(s,), out_shardings=s)
    j = ir(g, np.ones(8, np.float32))
    xs = rnd(13, *((3, 8) if axis == 0 else (8, 3)))
    vj = vmap_jaxpr(j, axis, axis, 3)
    vg = jax.vmap(g, in_axes=axis, out_axes=axis)
    assert print_jaxpr(vj) == str(jax.make_jaxpr(vg)(xs))
    (got,) = backend.evaluate(vj, [xs])
    close(got, vg(xs))


#: operands batched together (the others each in turn): dp_mlp's replicated parameters,
#: then its x-sharded data (each group beside unbatched operands of the other kind: five
#: programs were two thirds of the test's CPU, each batched operand's rule is in these two)
BATCHED_TOGETHER = {"dp_mlp": [(0, 1, 2), (3, 4)]}


@pytest.mark.parametrize("name", ["dp_mlp", "tp_matmul", "permute", "two_axes"])
def test_vmap_of_shard_map_batches_the_body(name, capsys):
    """vmap of a shard_map program batches its body (JAX's _shard_map_batch: an unsharded
    spec entry at the batch dimension): no scan over the examples, no warning, values of
    jax.vmap on the same mesh, no more equations than JAX's.  (Not varying_cond: JAX's own
    vmap of it fails, its batched cond pvarys an operand that already varies.)"""
    from jaxprtool.ad.batching import vmap_jaxpr
    from jaxprtool.core import all_eqns

    f, args = PROGRAMS[name](True)
    j = ir(f, *args)
    batched, mapped = [], []
    for group in BATCHED_TOGETHER.get(name, [(k,) for k in range(len(args))]):
        axes = [None] * len(args)  # the group's operands batched at their last axis
        bargs = list(args)
        for k in group:
            axes[k] = np.ndim(args[k])
            bargs[k] = np.stack([args[k] * (1.0 + 0.5 * i) for i in range(3)], axis=-1)
        vj = reparse(vmap_jaxpr(j, axes, 0, 3))
        assert not errors(vj)
        assert not any(e.prim == "scan" for e in all_eqns(vj))
        vf = jax.vmap(f, in_axes=tuple(axes))
        theirs = len(list(all_eqns(ir(vf, *bargs))))
        assert len(list(all_eqns(vj))) <= theirs, print_jaxpr(vj)
        batched.append((vj, bargs))
        mapped.append(vf)
    # JAX's answers for every operand batched: one compilation (eagerly, one an operation)
    wants = jax.jit(lambda xs: [vf(*b) for vf, b in zip(mapped, xs)])([b for _, b in batched])
    for (vj, bargs), want in zip(batched, wants, strict=True):
        for a, b in zip(backend.evaluate(vj, bargs), jax.tree_util.tree_leaves(want), strict=True):
            close(a, b)
    assert "no batching rule" not in capsys.readouterr().err


@needs_corpus
@pytest.mark.parametrize("axis", [0, 1, 2])
def test_vmap_of_xla_pmap_batches_the_body(axis):
    """vmap of JAX 0.4.35's xla_pmap (JAX's process_map): the mapped axis moves past the
    batch dimension; values of jax.vmap of jax.pmap."""
    from jaxprtool.ad.batching import vmap_jaxpr
    from jaxprtool.core import all_eqns

    path = CORPUS / "older" / "jax-0.4.35" / "pmap.jaxpr"
    j = parse(path.read_text(), str(path)).jaxpr
    pm = jax.pmap(lambda x: lax.psum(x**2, "d"), axis_name="d")
    shape = [8, 3]
    shape.insert(axis, 2)
    x = rnd(3, *shape)
    vj = vmap_jaxpr(j, axis, 0, 2)
    assert not any(e.prim == "scan" for e in all_eqns(vj))
    close(backend.evaluate(vj, [x])[0], jax.vmap(pm, in_axes=axis)(x))


@pytest.mark.parametrize("eager", [False, True])
def test_nested_jit_out_shardings_are_enforced_as_in_jax(tmp_path, eager):
    """A nested `jit(..., out_shardings=...)` leaves its results with its shardings, inside
    an outer jit that names none: `--show-sharding` says what JAX's outputs' `.sharding` say
    (before, the nested out_shardings were dropped and every output read P())."""
    from jax.sharding import NamedSharding

    m = mesh(("x", 4))
    rows = jax.jit(lambda a: jnp.sin(a) * 2, out_shardings=NamedSharding(m, P("x")))
    cols = jax.jit(jnp.cos, out_shardings=NamedSharding(m, P(None, "x")))

    def f(a):
        return rows(a) + 1, cols(a.T), a * 3

    a = rnd(0, 8, 4)
    path = tmp_path / "nested.jaxpr"
    path.write_text(str(jax.make_jaxpr(jax.jit(f))(a)))
    np.savez(tmp_path / "in.npz", arg0=a)
    out = tmp_path / "o.npz"
    args = ["run", str(path), "--args", str(tmp_path / "in.npz"), "--show-sharding"]
    r = run(args + ["-o", str(out)] + (["--eager"] if eager else []))
    assert r.exit_code == 0, r.output
    # an input the text does not place is JAX's numpy argument: jit leaves it to XLA (issue
    # 25), the op-by-op run to the default device; JAX's .sharding says which
    want = f(jnp.asarray(a)) if eager else jax.jit(f)(a)
    for i, w in enumerate(want):
        assert f"out{i}: {shown(w.sharding)}\n" in r.output, (r.output, w.sharding)
        close(np.load(out)[f"out{i}"], np.asarray(w))


def test_vmap_broadcast_of_a_varying_value_keeps_its_vma():
    """vmap of a clamp with scalar bounds in a check_vma shard_map: the batched rule broadcasts
    the pvary'd bounds, and the broadcast varies over 'x' as in JAX's printout (it was dropped)."""
    from jaxprtool.ad.batching import vmap_jaxpr

    f = jax.shard_map(lax.clamp, mesh=mesh(("x", 4)), in_specs=(P(), P("x"), P()), out_specs=P("x"))
    j = ir(f, np.float32(0), np.ones(8, np.float32), np.float32(1))
    lo, x, hi = rnd(1, 3) - 1, rnd(2, 3, 8), rnd(3, 3) + 1
    vj = vmap_jaxpr(j, [0, 0, 0], 0, 3)
    assert print_jaxpr(vj) == str(jax.make_jaxpr(jax.vmap(f))(lo, x, hi))
    assert not errors(reparse(vj))
    (got,) = backend.evaluate(vj, [lo, x, hi])
    close(got, jax.jit(jax.vmap(f))(lo, x, hi))  # (one compile: eagerly, one an operation)


def test_running_a_program_again_compiles_nothing():
    """The multi-device runner makes the jitted program once per program and --mesh: running
    the same program again lowers it from JAX's caches and XLA compiles nothing (each run
    compiled it anew before); the values stay JAX's.  (Two runs first: the first run in a
    process imports the JAX modules that add config states to JAX's trace-cache key.)"""
    from jaxprtool.backend import sharding

    f = jax.shard_map(
        lambda a: lax.psum(jnp.sin(a), "x"), mesh=mesh(("x", 4)), in_specs=P("x"), out_specs=P()
    )
    x, y = rnd(0, 8, 3), rnd(1, 8, 3)
    j = ir(f, x)
    want_x, want_y = np.asarray(f(x)), np.asarray(f(y))
    compiles = []

    def count(event, duration, **kw):
        if event == "/jax/core/compile/backend_compile_duration":
            compiles.append(event)

    for _ in range(2):
        close(backend.evaluate(j, [x])[0], want_x)
    jax.monitoring.register_event_duration_secs_listener(count)
    try:
        close(backend.evaluate(j, [y])[0], want_y)
        assert compiles == []
        with sharding.configured(sharding.RunConfig(mesh={"x": 4})):
            close(backend.evaluate(j, [x])[0], want_x)
        assert compiles, "another --mesh makes its own program"
    finally:
        jax.monitoring.unregister_event_duration_listener(count)


NESTED_CONSTS_SOURCE = """
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

MESH = jax.make_mesh((4,), ("x",), axis_types=(jax.sharding.AxisType.Auto,))
W = jnp.arange(8, dtype=np.float32) / 3 - 1  # the program's own constant
V = jnp.arange(8, dtype=np.float32) / 5 + 0.5  # what the custom_vjp's bwd closes over


@jax.custom_vjp
def g(x):
    return jnp.sin(x) * 2.0


g.defvjp(lambda x: (g(x), jnp.cos(x)), lambda r, ct: (ct * r * V,))


def f(x):
    return jax.lax.with_sharding_constraint(g(x * W), NamedSharding(MESH, P("x")))
"""


@pytest.mark.parametrize("mode", [[], ["--eager"]])
def test_constants_that_stay_nested_in_a_multi_device_run(tmp_path, monkeypatch, mode):
    """A multi-device program given every constant (the custom rule's, which stays in its
    jaxpr, after the program's): the run takes them as the one-device run does and is JAX
    (before, the nested constant was taken for the argument: a wrong answer)."""
    (tmp_path / "nested_consts_mesh.py").write_text(NESTED_CONSTS_SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib

    mod = importlib.import_module("nested_consts_mesh")
    prog, consts = tmp_path / "f.jaxpr", tmp_path / "c.npz"
    argv = ["trace", "nested_consts_mesh:f", "--arg", "f32[8]", "-o", str(prog)]
    r = run(argv + ["--consts-out", str(consts)])
    assert r.exit_code == 0, r.output
    assert len(np.load(consts).files) == 2
    x = np.linspace(-1, 1, 8, dtype=np.float32)
    np.savez(tmp_path / "x.npz", arg0=x)
    out = tmp_path / "o.npz"
    argv = ["run", str(prog), "--args", str(tmp_path / "x.npz"), "--consts", str(consts)]
    r = run(argv + ["-o", str(out)] + mode)
    assert r.exit_code == 0, r.output
    close(np.load(out)["out0"], jax.jit(mod.f)(x))
