"""Rematerialization on an accelerator (issue 40): the tool's `grad` under each plan against
JAX's own gradients, measured by XLA on whatever device JAX finds first.

    PYTHONPATH=REPO python bench/device/remat_tpu.py            # TPU sizes (width 1024, ...)
    PYTHONPATH=REPO python bench/device/remat_tpu.py --device tpu --out tpu-out  # + a file
    PYTHONPATH=REPO python bench/device/remat_tpu.py --small    # a quick CPU smoke run
    PYTHONPATH=REPO python bench/device/remat_tpu.py --width 256 --seq 128 --batch 4  # CPU's
    PYTHONPATH=REPO python bench/device/remat_tpu.py --device tpu --budgets 0.5,0.25,0.2 \
        --device-batch 64                  # issue 48's rows (tpu_check.sh remat's default)
    PYTHONPATH=REPO python bench/device/remat_tpu.py --small --device cpu --device-batch 8 \
        --device-limit 4e6                 # the same rows on a CPU (tpu_check.sh remat --cpu)

Needs JAX (0.10.2 or later, with its scipy) and the repository on PYTHONPATH (with the tool's
own dependencies: bench/device/tpu_check.sh installs them from .whl-tpu and runs this as its
`remat` stage).  The model is an 8-layer
pre-norm transformer (16 heads, f32), unrolled and as one scan over stacked weights (its
"scan twin").  Each gradient is compiled by `jax.jit(...).lower(...).compile()`; the table
gives XLA's temp bytes (`memory_analysis().temp_size_in_bytes`), FLOPs (`cost_analysis()`),
the median time per step and the largest difference to `jax.grad`'s gradient, each figure
also as a ratio to the plain gradient's.  The tool's programs are made in-process: JAX's
printed jaxpr, parsed, differentiated by `jaxprtool.ad.api.grad_jaxpr` with the plan, run
through `jaxprtool.backend.as_jax_function` under `jax.jit`.  A `--remat-budget` row runs the
budget's compile loop (`jaxprtool.ad.remat.fit`) as `grad --remat-budget` does; its
planning column is the loop's wall seconds, its compiles included (the plain gradient's too:
each row compiles it again, as the command does), and how many it compiled; the row's log
says where they went (`time: ...`: the plain gradient's compile, the plans made and how
many of them while it compiled, the compile rounds after it).
`--time-candidates N` runs each plan a budget's loop compiled N steps after the loop and logs
its time and XLA's cost entries (a time model's data).
`--device-batch N` adds the transformer at batch N, past the chip's memory: `jax.grad` there
is XLA on its own (its rematerialization fits it, or the row says out of memory), beside
JAX's per-layer nothing_saveable and the tool's `--remat-budget device`.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

# ---------------------------------------------------------------- the model


def layernorm(x, g):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) * jax.lax.rsqrt(v + 1e-5) * g


def block(p, x, heads):
    """A pre-norm transformer layer: x + attention(ln(x)), then x + mlp(ln(x))."""
    b, s, d = x.shape
    dh = d // heads
    h = layernorm(x, p["g1"])
    q, k, v = (
        (h @ p[w]).reshape(b, s, heads, dh).transpose(0, 2, 1, 3) for w in ("wq", "wk", "wv")
    )
    a = jax.nn.softmax(q @ k.transpose(0, 1, 3, 2) / math.sqrt(dh), axis=-1)
    o = (a @ v).transpose(0, 2, 1, 3).reshape(b, s, d)
    x = x + o @ p["wo"]
    h = layernorm(x, p["g2"])
    return x + jax.nn.gelu(h @ p["w1"]) @ p["w2"]


def init(key, layers, width, seq, batch):
    ks = jax.random.split(key, layers + 1)
    d, f = width, 4 * width
    shapes = {"wq": (d, d), "wk": (d, d), "wv": (d, d), "wo": (d, d), "w1": (d, f), "w2": (f, d)}
    ps = []
    for k in ks[:layers]:
        kk = jax.random.split(k, len(shapes))
        p = {n: jax.random.normal(q, s) / math.sqrt(s[0]) for q, (n, s) in zip(kk, shapes.items())}
        p["g1"] = jnp.ones((d,))
        p["g2"] = jnp.ones((d,))
        ps.append(p)
    return ps, jax.random.normal(ks[-1], (batch, seq, width))


def chain(layer, wrap=None):
    """loss(ps, x): the layers one after the other (each under `wrap`, e.g. jax.checkpoint),
    then the mean square."""
    f = layer if wrap is None else wrap(layer)

    def loss(ps, x):
        for p in ps:
            x = f(p, x)
        return jnp.mean(x**2)

    return loss


def scan_chain(layer, wrap=None):
    """`chain` as one scan over the layers' stacked parameters (`stack`)."""
    f = layer if wrap is None else wrap(layer)

    def loss(ps, x):
        x, _ = jax.lax.scan(lambda x, p: (f(p, x), None), x, ps)
        return jnp.mean(x**2)

    return loss


def unrolled(heads, wrap=None):
    return chain(functools.partial(block, heads=heads), wrap)


def scanned(heads, wrap=None):
    return scan_chain(functools.partial(block, heads=heads), wrap)


def stack(ps):
    return jax.tree_util.tree_map(lambda *a: jnp.stack(a), *ps)


def flat(fn, args):
    leaves, tree = jax.tree_util.tree_flatten(args)
    return (lambda *xs: fn(*jax.tree_util.tree_unflatten(tree, xs))), leaves


# ---------------------------------------------------------------- the tool's gradients

#: the tool's plans: (label, --remat or --remat-budget text, which option)
TOOL_PLANS = (
    ("tool grad", None, None),
    ("tool --remat nothing_saveable", "nothing_saveable", "policy"),
    ("tool --remat dots_saveable", "dots_saveable", "policy"),
    ("tool --remat min-cut", "min-cut", "policy"),
    ("tool --remat-budget 0.3", "0.3", "budget"),
    ("tool --remat-budget 1GB", "1GB", "budget"),
)
JAX_POLICIES = ("nothing_saveable", "dots_saveable")


#: program text -> the executable: a program the budget's loop compiled is not compiled again
#: for its row's measurements
COMPILED: dict[str, object] = {}


def compiled_for(g, leaves, fresh=False):
    """The executable of the tool's program `g` for `leaves` (compiled again when `fresh`:
    the budget's loop compiles each of its programs, the plain gradient's included, so
    that its planning seconds are its own)."""
    key = str(g)
    if fresh or key not in COMPILED:
        COMPILED[key] = jax.jit(tool_fn(g)).lower(*leaves).compile()
    return COMPILED[key]


def out_of_memory(e: Exception) -> bool:
    text = str(e)
    return "RESOURCE_EXHAUSTED" in text or "out of memory" in text.lower()


def tool_grad(text: str, n: int, option, value, segments="auto", leaves=None, xla=True, limit=None):
    """The tool's gradient program of JAX's printed jaxpr `text` (wrt all `n` inputs) under
    the plan, the plans' descriptions (what `--remat` prints on standard error), the
    planning seconds (compiles included) and the compiles.  A budget is in XLA's temp bytes
    on this device (`jaxprtool.ad.remat.fit`: each plan compiled for `leaves`, as
    `grad --remat-budget` does) unless `xla` is False; `device` is the device's memory
    (`limit` bytes where given, else its `bytes_limit`) less the program's arguments and
    outputs."""
    from jaxprtool.ad import remat
    from jaxprtool.ad.api import grad_jaxpr
    from jaxprtool.backend.memory_analysis import xla_cost
    from jaxprtool.passes.registry import run_pipeline
    from jaxprtool.text.parser import parse
    from jaxprtool.ui.stats import flops

    j = parse(text, "<bench>").jaxpr
    spec = None
    if option == "policy":
        spec = remat.parse_policy(value)
    elif option == "budget":
        spec = remat.parse_budget(value)
    if spec is not None:  # (grad_jaxpr returns the gradients only)
        spec = dataclasses.replace(remat.with_segments(spec, segments), value_dropped=True)

    def build(s, plans):
        # the back end binds the older JAX's forms of what it lacks (one_minus_square on 0.10)
        return run_pipeline(grad_jaxpr(j, list(range(n)), remat=s, plans=plans), "canonicalize")

    def measure(g):
        try:
            exe = compiled_for(g, leaves, fresh=True)
        except Exception as e:  # out of memory: the loop takes None
            if out_of_memory(e):
                return None
            raise
        if CANDIDATE_STEPS:
            tried.append(exe)
        # (XLA's FLOPs too: the loop compares the plans it compiled by both, issue 48 item 2)
        return exe.memory_analysis().temp_size_in_bytes, xla_cost(exe).get("flops")

    def device_free(g):
        dev = jax.devices()[0] if not leaves else list(leaves[0].devices())[0]
        stats = dev.memory_stats() or {}
        room = limit or stats.get("bytes_limit")
        if not room:
            raise RuntimeError(f"{dev.platform} reports no memory limit: give --device-limit")
        args = sum(x.nbytes for x in leaves)
        # in use: the arguments (on the device already) and what else is there; the outputs,
        # the gradients, take as many bytes as the arguments
        in_use = args if limit else int(stats.get("bytes_in_use", args))
        return int(room) - in_use - args

    tried: list = []  # the loop's executables, timed after it (`CANDIDATE_STEPS`)
    t0 = time.perf_counter()
    plans: list = []
    lines: list[str] = []
    compiles = 0
    if option == "budget" and xla and leaves is not None:
        from jaxprtool.ad.remat.fit import PRIORS, fit_budget

        prior = PRIORS.get(list(leaves[0].devices())[0].platform)
        g, plans, fit = fit_budget(build, spec, measure, flops, device_free, lines.append, prior)
        lines.append(f"  time: {fit.timing()}")
        compiles = fit.compiles + 1
    else:
        g = build(spec, plans)
    dt = time.perf_counter() - t0
    lines += [_candidate_line(exe, leaves) for exe in tried]
    return g, lines + [p.render() for p in plans if not p.nested], dt, len(j.eqns), compiles


#: `--time-candidates N`: each executable the budget's loop compiled is run N steps after the
#: loop (outside its planning seconds) and logged with its temp bytes, FLOPs and cost entries:
#: what a time model of the plans is checked against (0: not run)
CANDIDATE_STEPS = 0


def _candidate_line(exe, leaves) -> str:
    from jaxprtool.backend.memory_analysis import xla_cost

    memory, cost = exe.memory_analysis(), xla_cost(exe)
    jax.block_until_ready(exe(*leaves))
    times = []
    for _ in range(CANDIDATE_STEPS):
        t0 = time.perf_counter()
        jax.block_until_ready(exe(*leaves))
        times.append(time.perf_counter() - t0)
    return (
        f"  candidate: temp {memory.temp_size_in_bytes}, FLOPs {cost.get('flops')}, "
        f"{statistics.median(times):.5f} s/step, "
        + ", ".join(f"{k} {cost[k]}" for k in COST_KEYS if k in cost)
    )


def tool_fn(g):
    from jaxprtool import backend

    fn = backend.as_jax_function(g, enable_x64=False)
    return lambda *a: fn(*a)


# ---------------------------------------------------------------- measuring


#: the entries of XLA's `cost_analysis()` each row's log line gives beside its time (a time
#: model's inputs: the bytes the program moves, XLA's own estimate of its seconds)
COST_KEYS = ("bytes accessed", "optimal_seconds", "transcendentals")
#: the chosen entries of each measured executable's cost analysis, in order
COSTS: list[dict] = []


def measure(fn, leaves, ref, steps, exe=None):
    """(temp bytes, FLOPs, median seconds per step, max abs diff to `ref`, XLA's heap peak)
    of `fn` (compiled here unless `exe`, its executable, is given).

    The peak is `memory_analysis().peak_memory_in_bytes` (None where the JAX lacks it): on
    a TPU the most bytes the executable holds at once; XLA:CPU reports its arguments and
    outputs there (the same for every plan), so on a CPU only the temp bytes compare."""
    from jaxprtool.backend.memory_analysis import xla_cost

    compiled = exe if exe is not None else jax.jit(fn).lower(*leaves).compile()
    cost = xla_cost(compiled)
    memory = compiled.memory_analysis()
    temp = memory.temp_size_in_bytes
    out = compiled(*leaves)
    jax.block_until_ready(out)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        jax.block_until_ready(compiled(*leaves))
        times.append(time.perf_counter() - t0)
    diff = float("nan")
    if ref is not None:
        diff = max(float(jnp.max(jnp.abs(jnp.asarray(a) - b))) for a, b in zip(out, ref))
    peak = getattr(memory, "peak_memory_in_bytes", None)
    COSTS.append({k: cost[k] for k in COST_KEYS if k in cost})
    return temp, float(cost.get("flops", float("nan"))), statistics.median(times), diff, peak


def reference(f, build, args, heads, n):
    """jax.grad's gradient, where it runs; else that of JAX's per-layer
    checkpoint(nothing_saveable) (a batch beyond the device's memory); None if neither."""
    wrap = lambda g: jax.checkpoint(g, policy=jax.checkpoint_policies.nothing_saveable)  # noqa: E731
    for fn in (f, flat(build(heads, wrap), args)[0]):
        try:
            grad = jax.jit(jax.grad(fn, argnums=tuple(range(n))))
            return [np.asarray(x) for x in grad(*flat(build(heads), args)[1])]
        except Exception as e:
            if not out_of_memory(e):
                raise
    return None


def rows_for(
    model: str, build, args, heads, steps, segments, log, only=None, plans=TOOL_PLANS,
    policies=JAX_POLICIES, limit=None,
):  # fmt: skip
    """The rows of one model: the plain gradient, JAX's per-layer checkpoints (`policies`),
    the tool's `plans` (those whose label contains one of `only`, when given); each row is
    logged as soon as it is measured, and a failure (out of memory included) is a row that
    says why.  `limit`: the device's memory for `--remat-budget device` (else its own)."""
    f, leaves = flat(build(heads), args)
    n = len(leaves)
    grad = jax.grad(f, argnums=tuple(range(n)))
    ref = reference(f, build, args, heads, n)
    rows = []

    def add(label, make):
        if only and not label.startswith("jax.grad") and not any(o in label for o in only):
            return
        try:
            fn, exe, note, plan_s, compiles = make()
            temp, fl, t, diff, peak = measure(fn, leaves, ref, steps, exe)
            rows.append((model, label, temp, fl, t, diff, note, peak, plan_s, compiles))
        except Exception as e:  # a plan refused, an accelerator out of memory: say so
            msg = " ".join(str(e).split())[:300]
            note = f"{type(e).__name__}: {msg}"
            rows.append((model, label, None, None, None, None, note, None, None, None))
        r = rows[-1]
        cost = COSTS[-1] if r[2] is not None and COSTS else {}
        log(
            f"[{model}] {label}: temp {r[2]}, FLOPs {r[3]}, {r[4]} s/step, diff {r[5]}, "
            f"peak {r[7]}, planned in {r[8]} s ({r[9]} compiles) {r[6]}; cost {cost}"
        )

    add("jax.grad (plain)", lambda: (grad, None, "", None, None))
    for pol in policies:
        policy = getattr(jax.checkpoint_policies, pol)

        def jax_ckpt(policy=policy):
            wrap = lambda g: jax.checkpoint(g, policy=policy)  # noqa: E731
            fc, _ = flat(build(heads, wrap), args)
            return jax.grad(fc, argnums=tuple(range(n))), None, "", None, None

        add(f"JAX checkpoint({pol}) per layer", jax_ckpt)
    text = str(jax.make_jaxpr(f)(*leaves))
    for label, value, option in plans:

        def tool(option=option, value=value, label=label):
            g, lines, dt, n_eqns, compiles = tool_grad(
                text, n, option, value, segments, leaves, limit=limit
            )
            for p in lines:
                log(f"[{model}] {label}:\n{p}")
            exe = compiled_for(g, leaves)  # (the loop's compile, where it made one)
            return tool_fn(g), exe, f"{n_eqns} eqns", dt, compiles

        add(label, tool)
    return rows


def table(rows) -> str:
    out = [
        "| model | gradient | temp bytes | temp / plain | XLA peak | FLOPs / plain | "
        "time / step | time / plain | max abs diff | planning | note |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    base: dict[str, tuple] = {}
    for model, label, temp, fl, t, diff, note, peak, plan_s, compiles in rows:
        if label.startswith("jax.grad"):
            base[model] = (temp, fl, t)
        planning = ""
        if plan_s is not None:
            planning = f"{plan_s:.1f} s" + (f" ({compiles} compiles)" if compiles else "")
        if temp is None:
            out.append(f"| {model} | {label} | | | | | | | | {planning} | {note} |")
            continue
        b = base.get(model) or (temp, fl, t)
        if b[0] is None:
            b = (temp, fl, t)
        out.append(
            f"| {model} | {label} | {temp:,} | {temp / max(1, b[0]):.3f}x | "
            f"{'' if peak is None else f'{peak:,}'} | {fl / b[1]:.3f}x "
            f"| {1e3 * t:.2f} ms | {t / b[2]:.2f}x | {diff:.2e} | {planning} | {note} |"
        )
    return "\n".join(out)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--small", action="store_true", help="tiny sizes: a CPU smoke run")
    ap.add_argument("--size", choices=("full", "small"), default="full", help="small: --small")
    ap.add_argument(
        "--device",
        default=None,
        help="the platform to run on (tpu, cpu, ...; default: JAX's default backend)",
    )
    ap.add_argument("--out", default=None, help="also write the table to OUT/remat_tpu.md")
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--steps", type=int, default=5, help="timed steps per gradient")
    ap.add_argument("--segments", default="auto", help="--remat-segments: auto, none or N")
    ap.add_argument("--no-scan", action="store_true", help="skip the scan twin")
    ap.add_argument("--no-unrolled", action="store_true", help="skip the unrolled transformer")
    ap.add_argument("--quiet", action="store_true", help="do not print the plans")
    ap.add_argument(
        "--time-candidates",
        type=int,
        default=0,
        metavar="N",
        help="run each plan the budget's loop compiled N steps after it and log its time "
        "and XLA's cost entries (a time model's data; 0: not run)",
    )
    ap.add_argument(
        "--budgets",
        default="",
        help="comma-separated further --remat-budget fractions to measure beside 0.3",
    )
    ap.add_argument(
        "--only",
        default="",
        help="comma-separated substrings: measure only the gradients whose label has one "
        "(the plain gradient always), e.g. --only nothing_saveable,budget",
    )
    ap.add_argument(
        "--device-batch",
        type=int,
        default=0,
        help="also the unrolled transformer at this batch (one whose plain gradient exceeds "
        "the device's memory: 64 on a 16 GB TPU v5e): jax.grad (XLA fitting it on its own, "
        "or out of memory), JAX's per-layer checkpoint(nothing_saveable) and the tool's "
        "--remat-budget device",
    )
    ap.add_argument(
        "--device-limit",
        type=float,
        default=None,
        help="the device's memory in bytes for --remat-budget device (default: the device's "
        "bytes_limit; a CPU reports none: give it there, e.g. 4e6 with --small)",
    )
    return ap


def main(argv=None) -> int:
    a = parser().parse_args(argv)
    global CANDIDATE_STEPS
    CANDIDATE_STEPS = a.time_candidates
    if a.small or a.size == "small":
        a.width, a.seq, a.batch, a.layers, a.heads, a.steps = 64, 16, 2, 4, 4, 2
    sys.setrecursionlimit(10000)
    log = (lambda s: None) if a.quiet else (lambda s: print(s, file=sys.stderr, flush=True))
    only = [o for o in a.only.split(",") if o]
    budgets = [b for b in a.budgets.split(",") if b]
    plans = (*TOOL_PLANS, *((f"tool --remat-budget {b}", b, "budget") for b in budgets))
    dev = jax.devices(a.device)[0] if a.device else jax.devices()[0]
    head = (
        f"jax {jax.__version__} on {dev.platform} ({getattr(dev, 'device_kind', '')}); "
        f"width {a.width}, seq {a.seq}, batch {a.batch}, {a.layers} layers, {a.heads} heads, "
        f"f32; --remat-segments {a.segments}\n"
    )
    print(head, flush=True)
    with jax.default_device(dev):
        ps, x = init(jax.random.PRNGKey(0), a.layers, a.width, a.seq, a.batch)
        rows = []
        common = (a.heads, a.steps, a.segments, log, only)
        if not a.no_unrolled:
            rows += rows_for("unrolled", unrolled, (ps, x), *common, plans)
        if not a.no_scan:
            rows += rows_for("scan", scanned, (stack(ps), x), *common, plans)
        if a.device_batch:
            big = init(jax.random.PRNGKey(0), a.layers, a.width, a.seq, a.device_batch)
            rows += rows_for(
                f"unrolled, batch {a.device_batch}",
                unrolled,
                big,
                *common,
                (("tool --remat-budget device", "device", "budget"),),
                ("nothing_saveable",),
                a.device_limit,
            )
    text = table(rows)
    print(text)
    if a.out:
        import os

        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "remat_tpu.md"), "w") as f:
            f.write(head + "\n" + text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
