"""Rematerialization segment by segment (`--remat-segments auto|none|N`, issue 40): the
segments found (the repeated layers of an unrolled network, each iteration of a scan body, a
number asked for), the gradients against `jax.grad`, the backward part's shape (one `remat2`
call per segment, in the backward order, each reading the cotangents that reach it), the
residuals against JAX's per-layer `jax.checkpoint`, XLA's temp bytes against it, and the CLI."""

from __future__ import annotations

import math

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax._src.ad_checkpoint import saved_residuals  # noqa: E402
from jax_oracle import close, ir, run, together, vec  # noqa: E402

from jaxprtool import backend  # noqa: E402
from jaxprtool.ad import remat  # noqa: E402
from jaxprtool.ad.api import grad_jaxpr, linearize_jaxpr  # noqa: E402
from jaxprtool.core import Var, all_eqns  # noqa: E402


def layernorm(x, g):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) * jax.lax.rsqrt(v + 1e-5) * g


def block(p, x, heads=2):
    """A pre-norm transformer layer (bench/device/remat_tpu.py's, smaller)."""
    b, s, d = x.shape
    dh = d // heads
    h = layernorm(x, p["g"])
    q, k, v = (
        (h @ p[w]).reshape(b, s, heads, dh).transpose(0, 2, 1, 3) for w in ("wq", "wk", "wv")
    )
    a = jax.nn.softmax(q @ k.transpose(0, 1, 3, 2) / math.sqrt(dh), axis=-1)
    x = x + (a @ v).transpose(0, 2, 1, 3).reshape(b, s, d) @ p["wo"]
    return x + jax.nn.gelu(layernorm(x, p["g"]) @ p["w1"]) @ p["w2"]


def params(layers, d=8, seed=0):
    shapes = {"wq": (d, d), "wk": (d, d), "wv": (d, d), "wo": (d, d), "w1": (d, 2 * d)}
    shapes["w2"] = (2 * d, d)
    ps = []
    for i in range(layers):
        p = {n: 0.4 * vec(s, seed + 10 * i + k) for k, (n, s) in enumerate(shapes.items())}
        p["g"] = 1.0 + 0.1 * vec((d,), seed + 10 * i + 9)
        ps.append(p)
    return ps


def unrolled(wrap=None):
    f = block if wrap is None else wrap(block)

    def loss(x, *ws):
        for p in _unflat(ws):
            x = f(p, x)
        return jnp.mean(x**2)

    return loss


KEYS = ("g", "w1", "w2", "wk", "wo", "wq", "wv")


def _flat(ps):
    return [p[k] for p in ps for k in KEYS]


def _unflat(ws):
    return [dict(zip(KEYS, ws[i : i + len(KEYS)])) for i in range(0, len(ws), len(KEYS))]


def scanned(wrap=None):
    f = block if wrap is None else wrap(block)

    def loss(x, *ws):
        (p,) = _unflat(ws)
        x, _ = jax.lax.scan(lambda x, p: (f(p, x), None), x, p)
        return jnp.mean(x**2)

    return loss


#: (two layers: the fewest repeated; three made each unrolled gradient compile half again
#: as long, 0.8 CPU-s over make test's tests)
LAYERS = 2
X = vec((2, 4, 8), 99)
UNROLLED_ARGS = (X, *_flat(params(LAYERS)))
STACKED = [np.stack([w[k] for w in params(LAYERS)]) for k in KEYS]
SCAN_ARGS = (X, *STACKED)
#: (a budget bounds the planned peak: with 2 layers, at least one layer's residuals; their
#: floor is 0.53 of the plain gradient's)
SPECS = ("nothing_saveable", "dots_saveable", "min-cut", "0.6")


def _spec(text, segments="auto"):
    s = remat.parse_budget(text) if text[0].isdigit() else remat.parse_policy(text)
    return remat.with_segments(s, segments)


def _grad(f, args, text, segments="auto"):
    j = ir(f, *args)
    plans: list = []
    g = grad_jaxpr(j, list(range(len(args))), remat=_spec(text, segments), plans=plans)
    return g, plans


def _backward_calls(g):
    return [e for e in g.eqns if e.prim == "remat2"]


@pytest.fixture(scope="module")
def unrolled_jax_grads():
    return jax.jit(jax.grad(unrolled(), argnums=tuple(range(len(UNROLLED_ARGS)))))(*UNROLLED_ARGS)


@pytest.mark.parametrize("text", SPECS)
def test_layers_found_and_gradient_against_jax(unrolled_jax_grads, text):
    g, plans = _grad(unrolled(), UNROLLED_ARGS, text)
    plan = plans[-1]
    assert plan.segments is not None and "repeated layers" in plan.segments.kind
    assert len(plan.segments.starts) == LAYERS
    assert f"segments ({LAYERS} repeated layers)" in plan.render()
    for a, b in zip(backend.evaluate(g, list(UNROLLED_ARGS)), unrolled_jax_grads):
        close(a, b, 1e-5)


def test_backward_recomputes_layer_by_layer():
    """nothing_saveable: one remat2 call per layer, last layer first, each reading the
    cotangent the previous one made (so XLA cannot run it ahead of the backward step that
    needs it), and the forward part holds only the layers' inputs besides the weights."""
    g, plans = _grad(unrolled(), UNROLLED_ARGS, "nothing_saveable")
    calls = _backward_calls(g)
    assert len(calls) == LAYERS
    assert all(c.params["differentiated"] and c.params["prevent_cse"] for c in calls)
    # each call after the first reads what the backward equations made from the one before
    made_after: set[int] = set()
    for k, c in enumerate(calls):
        if k:
            assert made_after & {id(x) for x in c.inputs if isinstance(x, Var)}, k
        made_after = {id(o) for o in c.outputs}
        start = g.eqns.index(c)
        for e in g.eqns[start + 1 :]:
            if e.prim == "remat2":
                break
            if made_after & {id(x) for x in e.inputs if isinstance(x, Var)}:
                made_after |= {id(o) for o in e.outputs}
    # held across: the input of every layer but the first (f32[2,4,8] each)
    assert plans[-1].bytes_after == (LAYERS - 1) * X.nbytes


@pytest.mark.parametrize("policy", ["nothing_saveable", "dots_saveable"])
def test_calls_take_and_give_what_per_layer_checkpoint_does(policy):
    """Each layer's call is JAX's transposed per-layer checkpoint: the whole layer's backward
    (its layer norms' means included), so between two calls only the cotangent of the
    layer's input crosses, and each call takes and gives as many values as JAX's
    (`jax.make_jaxpr(jax.grad(...))` of the layers under `jax.checkpoint(block, policy)`)."""
    pol = getattr(jax.checkpoint_policies, policy)
    wrapped = unrolled(lambda f: jax.checkpoint(f, policy=pol))
    n = len(UNROLLED_ARGS)
    theirs = jax.make_jaxpr(jax.grad(wrapped, argnums=tuple(range(n))))(*UNROLLED_ARGS)
    jax_calls = [e for e in theirs.jaxpr.eqns if e.primitive.name in ("remat2", "checkpoint")]
    g, _ = _grad(unrolled(), UNROLLED_ARGS, policy)
    ours = _backward_calls(g)
    assert len(ours) == len(jax_calls) == LAYERS
    # (the last layer's call, first, may take one more: the policy covers the whole program,
    # so under dots_saveable the loss's input, an add, is recomputed there from the layer's
    # last product; JAX's per-layer checkpoint leaves the loss outside and saves it)
    assert [(len(c.inputs), len(c.outputs)) for c in ours[1:]] == [
        (len(e.invars), len(e.outvars)) for e in jax_calls[1:]
    ]
    assert len(ours[0].outputs) == len(jax_calls[0].outvars)
    for c in ours:
        activations = [o for o in c.outputs if o.type.shape == X.shape]
        assert len(activations) == 1, [str(o.type) for o in c.outputs]


def test_none_is_the_whole_program():
    g, plans = _grad(unrolled(), UNROLLED_ARGS, "nothing_saveable", segments="none")
    assert plans[-1].segments is None
    assert len([e for e in all_eqns(g) if e.prim == "remat2"]) == 1


# (make test-full: the whole program's gradient under a policy against jax.grad is
# test_remat.py's test_policy_grad_and_bytes_against_jax in make test, segments none there)
@pytest.mark.slow
def test_none_gradient_against_jax(unrolled_jax_grads):
    g, _ = _grad(unrolled(), UNROLLED_ARGS, "nothing_saveable", segments="none")
    for a, b in zip(backend.evaluate(g, list(UNROLLED_ARGS)), unrolled_jax_grads):
        close(a, b, 1e-5)


@pytest.mark.parametrize("n", [3, 5])  # (not 2: the layers found)
def test_segments_asked_for(unrolled_jax_grads, n):
    g, plans = _grad(unrolled(), UNROLLED_ARGS, "min-cut", segments=str(n))
    assert len(plans[-1].segments.starts) == n
    assert f"{n} asked" in plans[-1].render()
    for a, b in zip(backend.evaluate(g, list(UNROLLED_ARGS)), unrolled_jax_grads):
        close(a, b, 1e-5)


def test_sqrt_segments_without_layers():
    """A program of distinct equations (no repetition) is cut into about sqrt(n).  (40
    steps: 164 equations, 13 segments, a third less to compile than 60's; at 30 the
    segmenter finds repeated layers instead.)"""

    def f(x):
        fns = [jnp.sin, jnp.cos, jnp.tanh, jnp.exp, jnp.log1p, jnp.sqrt, jax.nn.sigmoid]
        for k in range(40):
            x = fns[k % 7](x) * (1.0 + 0.01 * k) + 0.5 if k % 7 != 5 else jnp.sqrt(x * x + 1)
            if k % 11 == 0:
                x = x.T if x.ndim == 2 and x.shape[0] == x.shape[1] else x[::-1]
        return jnp.sum(x)

    x = vec((6,), 3)
    j = ir(f, x)
    plans: list = []
    g = grad_jaxpr(j, [0], remat=_spec("nothing_saveable"), plans=plans)
    seg = plans[-1].segments
    assert seg is not None, plans[-1].render()
    n = len(seg.of)
    assert "sqrt" in seg.kind, seg.kind
    assert abs(len(seg.starts) - round(math.sqrt(n))) <= 1
    got, want = together((g, [x]), (jax.grad(f), [x]))  # (one XLA compile)
    close(got[0], want, 1e-5)


@pytest.mark.parametrize("text", SPECS)
def test_scan_body_per_iteration(text):
    """The scan twin: each iteration of the body is a segment, recomputed inside the
    backward scan's iteration (no rerun of the scan in the backward part); under a policy the
    forward part holds what JAX's scan(checkpoint(body, policy)) holds."""
    f = scanned()
    g, plans = _grad(f, SCAN_ARGS, text)
    got, want = together(
        (g, SCAN_ARGS), (jax.grad(f, argnums=tuple(range(len(SCAN_ARGS)))), SCAN_ARGS)
    )  # (one XLA compile)
    for a, b in zip(got, want):
        close(a, b, 1e-5)
    scans = [e for e in g.eqns if e.prim == "scan"]
    assert len(scans) == 2  # the forward scan and the backward one: nothing run again
    assert any(e.prim == "remat2" for e in all_eqns(scans[1].params["jaxpr"]))
    if text in ("nothing_saveable", "dots_saveable"):
        policy = getattr(jax.checkpoint_policies, text)
        fc = scanned(lambda b: jax.checkpoint(b, policy=policy))
        res = saved_residuals(fc, *SCAN_ARGS)
        theirs = sum(a.size * a.dtype.itemsize for a, why in res if "argument" not in why)
        primal, _, info = linearize_jaxpr(
            ir(f, *SCAN_ARGS), list(range(len(SCAN_ARGS))), remat=_spec(text)
        )
        n_out = len(info.out_mask)
        ours = sum(
            v.type.size * v.type.np_dtype.itemsize
            for r in info.residuals
            if r.source == "new"
            for v in [primal.outvars[n_out + r.index]]
        )
        assert ours <= theirs, (ours, theirs)


def _temp(fn, args):
    return jax.jit(fn).lower(*args).compile().memory_analysis().temp_size_in_bytes


# (make test-full: XLA's bytes at a size where its scheduling shows them; make test keeps
# the policies' saved bytes against JAX's saved residuals, test_remat.py's
# test_policy_grad_and_bytes_against_jax, and XLA's temp bytes of a policy plan,
# test_remat_plain.py's test_relu_mlp_xla_temp_no_more_than_plain)
@pytest.mark.slow
def test_xla_temp_bytes_against_per_layer_checkpoint():
    """XLA's temp bytes of the tool's nothing_saveable gradient are JAX's per-layer
    checkpoint's (within 15%), far below the plain gradient's where XLA lowers JAX's, at a
    size where XLA's scheduling shows it (width 64, 32 tokens, batch 2, 4 layers)."""
    d, layers = 64, 4
    x = vec((2, 32, d), 7)
    args = (x, *_flat(params(layers, d)))
    n = tuple(range(len(args)))
    plain = _temp(jax.grad(unrolled(), argnums=n), args)
    policy = jax.checkpoint_policies.nothing_saveable
    anchor = _temp(jax.grad(unrolled(lambda b: jax.checkpoint(b, policy=policy)), argnums=n), args)
    g, _ = _grad(unrolled(), args, "nothing_saveable")
    fn = backend.as_jax_function(g, enable_x64=False)
    ours = _temp(lambda *a: fn(*a), args)
    assert ours <= 1.15 * anchor, (ours, anchor, plain)
    if anchor <= 0.6 * plain:  # (JAX 0.10's CPU compiler keeps the plain peak for both)
        assert ours <= 0.6 * plain, (ours, anchor, plain)


def test_cli_names_segments(tmp_path):
    src = tmp_path / "f.jaxpr"
    src.write_text(str(jax.make_jaxpr(unrolled())(*UNROLLED_ARGS)) + "\n")
    r = run(["grad", "--argnums", "1,2", "--remat", "nothing_saveable", str(src)])
    assert r.exit_code == 0, r.output
    assert f"{LAYERS} segments ({LAYERS} repeated layers)" in r.stderr
    assert r.stdout.count("remat2[") == LAYERS
    r = run(["grad", "--remat", "min-cut", "--remat-segments", "none", str(src)])
    assert r.exit_code == 0 and " segments (" not in r.stderr and r.stdout.count("remat2[") == 1
    # (0.6: its HiGHS solve 0.09 CPU-s, 0.8's 0.7)
    r = run(["vjp", "--remat-budget", "0.6", "--remat-segments", "2", "--no-xla", str(src)])
    assert r.exit_code == 0 and "2 segments (2 asked)" in r.stderr


@pytest.mark.parametrize(
    "argv, msg",
    [
        (["--remat-segments", "auto"], "needs --remat or --remat-budget"),
        (["--remat", "min-cut", "--remat-segments", "0"], "expected auto, none or a number"),
        (["--remat", "min-cut", "--remat-segments", "many"], "expected auto, none or a number"),
    ],
)
def test_cli_usage(tmp_path, argv, msg):
    src = tmp_path / "f.jaxpr"
    src.write_text("{ lambda ; a:f32[]. let b:f32[] = sin a in (b,) }\n")
    r = run(["grad", *argv, str(src)])
    assert r.exit_code == 2 and msg in r.output, r.output


def test_memory_of_grad_with_remat(tmp_path):
    """`memory --of grad --remat`: the rematerialized gradient analysed, its plan (planned
    peak, segments) on standard error; the liveness peak above the inputs is near the
    planned peak (within 30% at this size; 13% on the issue's transformer)."""
    src = tmp_path / "f.jaxpr"
    src.write_text(str(jax.make_jaxpr(unrolled())(*UNROLLED_ARGS)) + "\n")
    argv = ["memory", "--of", "grad", "--argnums", "0", "--no-xla", "--json"]
    r = run([*argv, "--remat", "nothing_saveable", str(src)])
    assert r.exit_code == 0, r.output
    assert (
        "planned peak" in r.stderr and f"{LAYERS} segments ({LAYERS} repeated layers)" in r.stderr
    )
    import json
    import re

    report = json.loads(r.stdout)
    planned = int(re.search(r"planned peak \d+ -> (\d+)", r.stderr).group(1))
    live = report["peak_bytes"] - report["input_bytes"]
    assert 0.7 * planned <= live <= 1.3 * planned, (live, planned)
    r = run(["memory", "--remat", "min-cut", str(src)])
    assert r.exit_code == 2 and "need --of" in r.output
    r = run(["memory", "--of", "grad", "--remat-segments", "2", str(src)])
    assert r.exit_code == 2 and "needs --remat" in r.output


@pytest.mark.parametrize("program", ["jitted", "cond_in_scan", "then_layers", "named"])
def test_bodies_as_segments_against_jax(program):
    """Scans, calls and conds (tests/test_remat_scan.py's programs) under segments: each body
    planned as a segment of its own, the gradient jax.grad's under every kind of plan."""
    from test_remat_scan import PROGRAMS

    f, args = PROGRAMS[program]
    j = ir(f, *args)
    argnums = list(range(len(args)))
    grads = []
    for text in ("nothing_saveable", "dots_saveable", "min-cut", "0.8"):
        try:
            grads.append((grad_jaxpr(j, argnums, remat=_spec(text)), args))
        except Exception as e:  # a budget the program cannot meet is refused, in words
            assert text[0].isdigit() and "smallest budget" in str(e), (text, e)
    # the gradients and jax.grad's in one XLA compile
    *gots, want = together(*grads, (jax.grad(f, argnums=tuple(argnums)), args))
    for got in gots:
        for a, b in zip(got, want):
            close(a, b, 1e-5)


def test_budget_bounds_the_planned_peak():
    """Under segments a budget bounds the planned peak (the bytes saved plus the most one
    segment recomputes), a fraction of the plain gradient's; fewer FLOPs are recomputed for
    a looser one; one below the floor is refused, naming the smallest that can be met.
    (0.6 and 0.75 of two layers' peak, whose floor is 0.53: HiGHS proves their plans in
    0.1 CPU-s each, 0.7's and 0.8's in 0.5 and 0.9.)"""
    recomputed = []
    for frac in (0.6, 0.75):
        g, plans = _grad(unrolled(), UNROLLED_ARGS, str(frac))
        p = plans[-1]
        assert p.peak is not None and p.peak <= frac * p.peak_before, p.render()
        assert f"planned peak {p.peak_before} -> {p.peak}" in p.render()
        recomputed.append(p.flops_after)
    assert recomputed[1] <= recomputed[0]
    with pytest.raises(Exception, match="the planned peak cannot fit .* smallest budget"):
        _grad(unrolled(), UNROLLED_ARGS, "0.05")


def _four_layer_candidates():
    """(graph, peak groups, candidates, residual bytes held, boundary bytes) of the 4-layer
    transformer (width 32) under segments, for the budget heuristic's tests."""
    args = (vec((2, 16, 32), 99), *_flat(params(4, d=32)))
    primal, linear, info = linearize_jaxpr(ir(unrolled(), *args), list(range(len(args))))
    g = remat.Graph(primal, info)
    g.cut(remat.find_segments(g, _spec("0.5")))
    held = sum(g.cost(v) for v in {id(v): v for v in g.residuals if isinstance(v, Var)}.values())
    fixed = sum(g.cost(v) for v in remat._by_id(g.boundary, g))
    return g, g.peak_groups(), remat._candidates(g), held, fixed


def test_greedy_budget_under_segments_fits_each_budget():
    """Beyond the exact program's size the heuristic plans: a step makes the same equation
    of every layer recomputable at once, and within the first step that fits, only as many
    layers' as the budget needs.  On 4 layers (width 32) each plan fits its budget (how
    near HiGHS' optimum it recomputes: `..._recomputes_near_the_optimum`, make test-full)."""
    from jaxprtool.ui.stats import eqn_flops

    g, groups, cands, held, _ = _four_layer_candidates()
    for frac in (0.5, 0.45, 0.35, 0.3):
        budget = int(frac * held)
        greedy, _ = remat._greedy_budget(g, cands, budget, eqn_flops, groups)
        assert greedy is not None and remat.planned_peak(g, greedy, groups) <= budget, frac


@pytest.mark.slow  # (make test-full: a proven optimum of a 4-layer 0/1 program, ~1.5 CPU-s)
def test_greedy_budget_under_segments_recomputes_near_the_optimum():
    """At 0.35 of the plain peak the heuristic's recomputed FLOPs are within 10% of HiGHS'
    proven optimum (recomputing the step in every layer cost 1.35x there; elsewhere the
    heuristic's gap reaches 1.33x, at 0.45: `make bench` reports it)."""
    from jaxprtool.ui.stats import eqn_flops

    g, groups, cands, held, fixed = _four_layer_candidates()
    budget = int(0.35 * held)
    greedy, _ = remat._greedy_budget(g, cands, budget, eqn_flops, groups)
    exact = remat._ilp_budget(g, cands, budget - fixed, eqn_flops, groups)
    assert exact is not None and exact[1]
    plan = remat._plan_from_saved(g, exact[0], "")
    assert remat.planned_peak(g, plan, groups) <= budget
    best = sum(eqn_flops(g.eqns[i]) for i in plan.recompute)
    ours = sum(eqn_flops(g.eqns[i]) for i in greedy.recompute)
    # 1.10x measured with JAX 0.12.1, whose softmax is a custom_jvp call the greedy makes
    # recomputable only whole (the bound was 1.1 while its equations were steps of their own)
    assert best <= ours <= 1.12 * best, (ours, best)
