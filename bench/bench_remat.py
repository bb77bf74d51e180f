"""Rematerialization against JAX (issues 24 and 40): `make bench` runs it.

    .venv/bin/python bench/bench_remat.py [--layers 24] [--blocks 12] [--plan-eqns 10000]
        [--width 256 --seq 128 --batch 4 --depth 8 --heads 16] [--tables 0,1,2,3]

Table 0 (issue 40), at the issue's sizes: the 8-layer pre-norm transformer of
bench/device/remat_tpu.py (width 256, 128 tokens, batch 4, 16 heads, f32), unrolled and as
one scan over stacked weights: XLA's temp bytes, FLOPs and time per step of the tool's
`grad` under each plan (segments found in the program: `--remat-segments auto`) as ratios to
the plain gradient's, JAX's per-layer `jax.checkpoint` in the same run as the anchor, the
largest difference to `jax.grad`'s gradient; the targets of the issue's "Done when".

Table 1, for a residual MLP (`--blocks` blocks of layer norm, gelu, width 256, batch 128) and
the transformer of bench_ad.py (`--layers` layers): XLA's temp bytes
(`compile().memory_analysis()`) and FLOPs (`cost_analysis()`, with the tool's own estimate
beside it for the tool's programs) of JAX's `jax.grad`, of `jax.grad` with `jax.checkpoint`
per layer (nothing_saveable, dots_saveable), and of the tool's `grad`, `grad --remat
min-cut` and `grad --remat-budget 0.5` (each compiled by jax.jit on the CPU).
Table 2: residual bytes held under each named policy, the tool's plan against
`jax.checkpoint(f, policy=...)`'s saved residuals (arguments left out on both sides), for the
two models and the residual MLP as one scan over its stacked blocks (issue 25).
Table 3: planning time (Graph + plan, scipy imported beforehand; CPU seconds of the process,
wall seconds beside them) for programs of about `--plan-eqns` equations and twice that, and the greedy heuristic's FLOPs gap to the exact
plan on a small program.
Each target is printed met or missed (a missed target does not fail the run).
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
from jax._src.ad_checkpoint import saved_residuals  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "device"))
import remat_tpu  # noqa: E402
from bench_ad import attention_block, block_params, flat_fn, layernorm  # noqa: E402

from jaxprtool import backend  # noqa: E402
from jaxprtool.ad import remat  # noqa: E402
from jaxprtool.ad.api import grad_jaxpr, linearize_jaxpr  # noqa: E402
from jaxprtool.passes.registry import run_pipeline  # noqa: E402
from jaxprtool.text.parser import parse  # noqa: E402
from jaxprtool.ui.stats import eqn_flops, flops  # noqa: E402

# ---------------------------------------------------------------- the models


def mlp_block(p, x):
    return x + jax.nn.gelu(layernorm(x) @ p["w1"]) @ p["w2"]


# the layers in a chain, unrolled or scanned, as on the TPU (mean square loss)
stack, scanned = remat_tpu.chain, remat_tpu.scan_chain


def stacked(args):
    """(ps, x) with the layers' parameters stacked (for `scanned`)."""
    ps, x = args
    return remat_tpu.stack(ps), x


def resmlp_args(blocks, width=256, batch=128):
    ks = jax.random.split(jax.random.PRNGKey(0), 2 * blocks + 1)
    ps = [
        {
            "w1": 0.05 * jax.random.normal(ks[2 * i], (width, width)),
            "w2": 0.05 * jax.random.normal(ks[2 * i + 1], (width, width)),
        }
        for i in range(blocks)
    ]
    return ps, jax.random.normal(ks[-1], (batch, width))


def transformer_args(layers):
    key = jax.random.PRNGKey(0)
    return [block_params(k) for k in jax.random.split(key, layers)], jax.random.normal(key, (6, 16))


# ---------------------------------------------------------------- measuring


def xla_figures(fn, leaves):
    compiled = jax.jit(fn).lower(*leaves).compile()
    cost = compiled.cost_analysis()
    cost = (cost[0] if isinstance(cost, (list, tuple)) else cost) or {}
    return compiled.memory_analysis().temp_size_in_bytes, float(cost.get("flops", float("nan")))


def tool_grad(j, spec, n):
    plans: list = []
    g = grad_jaxpr(j, list(range(n)), remat=spec, plans=plans)
    g = run_pipeline(g, "canonicalize")
    return g, plans


def fmt(n) -> str:
    return f"{n:,.0f}"


ROWS: list[tuple] = []


def target(name, value, limit, unit=""):
    ok = value <= limit
    ROWS.append((name, value, limit, ok, unit))


def table_xla(model, layer, args, label):
    f, leaves = flat_fn(stack(layer), args)
    n = len(leaves)
    grad = jax.grad(f, argnums=tuple(range(n)))
    print(f"\n{label}: XLA temp bytes and FLOPs of the gradient")
    print(f"{'variant':44} {'temp bytes':>12} {'XLA FLOPs':>14} {'tool FLOPs est.':>16}")
    out = {}
    out["jax"] = xla_figures(grad, leaves)
    print(f"{'jax.grad':44} {fmt(out['jax'][0]):>12} {fmt(out['jax'][1]):>14}")
    for pol in ("nothing_saveable", "dots_saveable"):
        policy = getattr(jax.checkpoint_policies, pol)
        wrap = lambda g, policy=policy: jax.checkpoint(g, policy=policy)  # noqa: E731
        fc, _ = flat_fn(stack(layer, wrap), args)
        t, fl = xla_figures(jax.grad(fc, argnums=tuple(range(n))), leaves)
        print(f"{'jax.grad, jax.checkpoint(' + pol + ') per layer':44} {fmt(t):>12} {fmt(fl):>14}")
    j = parse(str(jax.make_jaxpr(f)(*leaves)), "<bench>").jaxpr
    for name, spec in (
        ("grad", None),
        ("grad --remat min-cut", remat.parse_policy("min-cut")),
        ("grad --remat-budget 0.5", remat.parse_budget("0.5")),
    ):
        g, plans = tool_grad(j, spec, n)
        fn = backend.as_jax_function(g, enable_x64=False)
        t, fl = xla_figures(lambda *a, fn=fn: fn(*a), leaves)
        est = flops(g)
        out[name] = (t, fl, est)
        print(f"{'jaxprtool ' + name:44} {fmt(t):>12} {fmt(fl):>14} {fmt(est):>16}")
        for p in plans:
            if not p.nested:
                print(f"{'':6}residual bytes {p.bytes_before:,} -> {p.bytes_after:,}")
    plain, cut, bud = out["grad"], out["grad --remat min-cut"], out["grad --remat-budget 0.5"]
    target(f"{model}: budget 0.5 temp bytes / plain grad's (<= 0.75)", bud[0] / plain[0], 0.75, "x")
    target(f"{model}: budget 0.5 XLA FLOPs / plain grad's (<= 1.5)", bud[1] / plain[1], 1.5, "x")
    target(f"{model}: budget 0.5 tool FLOPs / plain grad's (<= 1.5)", bud[2] / plain[2], 1.5, "x")
    target(f"{model}: min-cut temp bytes / jax.grad's (<= 1)", cut[0] / out["jax"][0], 1.0, "x")
    target(f"{model}: min-cut XLA FLOPs / jax.grad's (<= 1.05)", cut[1] / out["jax"][1], 1.05, "x")
    target(f"{model}: min-cut tool FLOPs / plain grad's (<= 1.05)", cut[2] / plain[2], 1.05, "x")


POLICIES = (
    "nothing_saveable",
    "dots_saveable",
    "dots_with_no_batch_dims_saveable",
    "everything_saveable",
)


def table_policies(model, layer, args, build=stack):
    f, leaves = flat_fn(build(layer), args)
    j = parse(str(jax.make_jaxpr(f)(*leaves)), "<bench>").jaxpr
    print(
        f"\n{model}: residual bytes held per policy, --remat-segments none "
        "(tool vs jax.checkpoint(f, policy))"
    )
    for pol in POLICIES:
        # (the whole program at once: what jax.checkpoint(f, policy) saves)
        plans: list = []
        spec = remat.with_segments(remat.parse_policy(pol), "none")
        linearize_jaxpr(j, list(range(len(leaves))), remat=spec, plans=plans)
        ours = plans[-1].bytes_after
        res = saved_residuals(
            jax.checkpoint(f, policy=getattr(jax.checkpoint_policies, pol)), *leaves
        )
        theirs = sum(
            a.size * a.dtype.itemsize for a, why in res if not why.startswith("from the arg")
        )
        print(f"  {pol:36} tool {fmt(ours):>12}  JAX {fmt(theirs):>12}")
        target(f"{model}: {pol} residual bytes / JAX's (<= 1)", ours / max(1, theirs), 1.0, "x")


#: repeats of each planning timing, the least kept: a ~0.2 s measurement on a shared
#: machine (the min-cut growth row read 1.407x in one `make bench` and 1.05x in the next
#: with the planner unchanged, 2026-12-07)
PLAN_REPEATS = 5


def plan_time(layers):
    f, leaves = flat_fn(stack(attention_block), transformer_args(layers))
    j = parse(str(jax.make_jaxpr(f)(*leaves)), "<bench>").jaxpr
    primal, _, info = linearize_jaxpr(j, list(range(len(leaves))))
    times = {}
    for name, spec in (
        ("min-cut", remat.parse_policy("min-cut")),
        ("budget 0.5", remat.parse_budget("0.5")),
        ("budget 0.3", remat.parse_budget("0.3")),
    ):
        best = (float("inf"), float("inf"))
        for _ in range(PLAN_REPEATS):
            # (each repeat starts from the same heap, no collection owed, and what is alive
            # frozen out of the collector, as the command's process does after reading its
            # input: core.py; otherwise a full collection's cost scales with the bench's heap)
            gc.collect()
            gc.freeze()
            t0, c0 = time.perf_counter(), time.process_time()
            g = remat.Graph(primal, info)
            segments = remat.find_segments(g, spec)
            if segments is not None:
                g.cut(segments)
            remat.plan_for(g, spec)
            best = min(best, (time.process_time() - c0, time.perf_counter() - t0))
            gc.unfreeze()
        times[name] = best
    return len(j.eqns), len(primal.eqns), times


def table_planning(plan_eqns):
    import scipy.optimize  # noqa: F401  (imported once, outside the timings)
    import scipy.sparse.csgraph  # noqa: F401

    print(
        "\nplanning time (Graph, segments and plan on the linearization's primal program), "
        f"best of {PLAN_REPEATS}: CPU seconds of this process (the planning runs in one thread; the "
        "targets are on them, so that a shared machine's load does not count), wall seconds"
    )
    per_layer = 53  # equations per transformer layer in the input program
    first = None
    for k in (1, 2):
        n_in, n_primal, t = plan_time(max(1, k * plan_eqns // per_layer))
        print(
            f"  {n_in:>7} input eqns ({n_primal} primal): "
            + ", ".join(f"{a} {b[0]:.2f} CPU-s ({b[1]:.2f} s wall)" for a, b in t.items())
        )
        if k == 1:
            first = (n_in, t)
            for a, b in t.items():
                target(f"planning {a}, {n_in} eqns (<= 1 CPU-s)", b[0], 1.0, " s")
        else:
            for a, b in t.items():
                ratio = (b[0] / first[1][a][0]) / (n_in / first[0])
                target(f"planning {a}: time growth / size growth (<= 1.3, linear)", ratio, 1.3, "x")
    # the heuristic against the exact plan, on a small program
    f, leaves = flat_fn(stack(mlp_block), resmlp_args(3, width=16, batch=8))
    j = parse(str(jax.make_jaxpr(f)(*leaves)), "<bench>").jaxpr
    primal, _, info = linearize_jaxpr(j, list(range(len(leaves))))
    g = remat.Graph(primal, info)
    cands = remat._candidates(g)
    default = remat._plan_from_saved(g, {id(v) for v in g.residuals}, "").bytes_before
    for frac in (0.5, 0.25, 0.1):
        budget = max(int(frac * default), remat.smallest_budget(g))
        exact = remat.budget_plan(g, remat.Spec(budget=budget))
        greedy = remat._greedy_budget(g, cands, budget, eqn_flops)[0]
        fe = sum(eqn_flops(g.eqns[i]) for i in exact.recompute)
        fg = sum(eqn_flops(g.eqns[i]) for i in greedy.recompute)
        gap = (fg - fe) / max(1, fe)
        print(
            f"  budget {budget} B ({len(cands)} candidates): exact recomputes {fe} FLOPs "
            f"(proved optimal: {exact.exact}), greedy {fg} FLOPs: gap {100 * gap:+.1f}%"
        )


#: issue 40's "Done when" on the CPU: (model, gradient) -> (temp / plain, FLOPs / plain).
#: Issue 40's, not issue 48's, and set at 4 heads: at this table's 16 (`--heads`), the
#: attention probabilities (batch, heads, seq, seq), a dot's output, weigh 4x as much, and
#: JAX's own per-layer checkpoint(dots_saveable) holds 0.600x (0.480x at 4 heads, where the
#: tool's holds 0.470x and min-cut 0.500x): the policies' rows are judged against JAX's
#: per-layer checkpoint below.  The scan twin's budget rows pick nothing_saveable (the
#: device model does not see the body's plan: docs/REMAT.md), at 1.23x FLOPs
ISSUE40 = {
    ("unrolled", "tool --remat nothing_saveable"): (0.20, 1.25),
    ("unrolled", "tool --remat dots_saveable"): (0.45, 1.01),
    ("unrolled", "tool --remat min-cut"): (0.50, 1.03),
    ("unrolled", "tool --remat-budget 0.3"): (0.35, 1.15),
    ("scan", "tool --remat-budget 0.3"): (0.35, 1.15),
}


def table_issue40(a):
    """Table 0: every plan against JAX's per-layer checkpoint at the issue's sizes."""
    import jax

    ps, x = remat_tpu.init(jax.random.PRNGKey(0), a.depth, a.width, a.seq, a.batch)
    print(
        f"\nissue 40: the pre-norm transformer, width {a.width}, {a.seq} tokens, batch "
        f"{a.batch}, {a.depth} layers, {a.heads} heads (--remat-segments auto)"
    )
    rows = remat_tpu.rows_for(
        "unrolled", remat_tpu.unrolled, (ps, x), a.heads, 3, "auto", lambda s: None
    )
    rows += remat_tpu.rows_for(
        "scan", remat_tpu.scanned, (remat_tpu.stack(ps), x), a.heads, 3, "auto", lambda s: None
    )
    print(remat_tpu.table(rows))
    by = {(r[0], r[1]): r for r in rows}
    for model in ("unrolled", "scan"):
        plain = by[(model, "jax.grad (plain)")]
        for (m, label), (t_max, f_max) in ISSUE40.items():
            if m != model:
                continue
            r = by[(m, label)]
            if r[2] is None:
                target(f"issue 40, {model}: {label} planned ({r[6]})", 1.0, 0.0)
                continue
            target(f"issue 40, {model}: {label} temp (<= {t_max})", r[2] / plain[2], t_max, "x")
            target(f"issue 40, {model}: {label} FLOPs (<= {f_max})", r[3] / plain[3], f_max, "x")
        for label in [r[1] for r in rows if r[0] == model and r[1].startswith("tool")]:
            r = by[(model, label)]
            if r[5] is not None:
                target(f"issue 40, {model}: {label} max abs diff (<= 1e-5)", r[5], 1e-5)
    jax_ns = by[("scan", "JAX checkpoint(nothing_saveable) per layer")]
    ours = by[("scan", "tool --remat nothing_saveable")]
    target(
        "issue 40, scan: nothing_saveable temp / JAX scan(checkpoint) (<= 1.1)",
        ours[2] / jax_ns[2],
        1.1,
        "x",
    )
    for model in ("unrolled", "scan"):
        for pol in remat_tpu.JAX_POLICIES:
            anchor = by[(model, f"JAX checkpoint({pol}) per layer")]
            r = by[(model, f"tool --remat {pol}")]
            target(
                f"issue 40, {model}: {pol} temp / JAX's per-layer (<= 1.05)",
                r[2] / anchor[2],
                1.05,
                "x",
            )


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--blocks", type=int, default=12)
    ap.add_argument("--plan-eqns", type=int, default=10_000)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--depth", type=int, default=8, help="issue 40's transformer's layers")
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument(
        "--tables",
        default="0,1,2,3",
        help="comma-separated: the tables to measure (default all; e.g. --tables 3 for the "
        "planning times alone)",
    )
    a = ap.parse_args()
    tables = set(a.tables.split(","))
    sys.setrecursionlimit(10000)
    if "0" in tables:
        table_issue40(a)
    mlp = ("residual MLP", mlp_block, resmlp_args(a.blocks))
    tr = ("transformer", attention_block, transformer_args(a.layers))
    if "3" in tables:
        table_planning(a.plan_eqns)
    if "2" in tables:
        for model, layer, args in (mlp, tr):
            table_policies(model, layer, args)
        table_policies("scanned residual MLP", mlp_block, stacked(mlp[2]), build=scanned)
    if "1" in tables:
        table_xla(*mlp, f"residual MLP, {a.blocks} blocks, width 256, batch 128")
        table_xla(*tr, f"transformer, {a.layers} layers (bench_ad.py's)")
    print("\ntargets")
    for name, value, _limit, ok, unit in ROWS:
        print(f"  {name:66} {value:8.3f}{unit:2} {'met' if ok else 'MISSED'}")
    missed = sum(not r[3] for r in ROWS)
    print(
        f"{len(ROWS) - missed} of {len(ROWS)} targets met"
        + (f"; {missed} missed" if missed else "")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
