"""The speed targets of issues 13, 26 and 49 in one table: each measured beside JAX in this
one run.

    .venv/bin/python bench/bench_targets.py [--layers 24] [--repeat 5] [--run-layers 8]
        [--scale 100000,400000,1000000] [--full] [--only ROW,...]

Rows: `fmt` of JAX's printed grad jaxpr of the transformer, whole process minus start-up,
against JAX's own `str(closed_jaxpr)`, with the compiled twin and on the Python path alone
(`JAXPRTOOL_PURE_PYTHON=1`, as `grad` too); start-up of `fmt` on a one-equation file against a
bare `python -c 'import numpy'`, and of every transformation and pass against `fmt`;
whole-process `grad`, `vmap` and `jacrev` of the transformer against JAX's in-process
`make_jaxpr(...)` + `str`, with the equation and residual counts; scale rows on layer-shaped
programs (dot_general/tanh/mul/add) of 100k, 400k and 1M equations (`fmt` and `grad` only at
1M unless `--full`; each the least CPU time of `--scale-repeat` rounds that alternate the
sizes, of 5 runs where a point is short): CPU time, linearity and peak memory growth per
equation of each command, beside a plain Python loop's growth at grad's peak memory (the
machine's share),
`grad` at 100k against JAX's, `grad` of 400k and 1M against issue 49's limits;
`memory` of 1M equations; first and second `run` of the transformer's gradient (JAX's
persistent compilation cache) against JAX's own jit compile.

Times are CPU seconds (user + system; children's for a subprocess) wherever the issue allows:
the machine may be shared, and CPU time is what a loaded machine does not inflate much.  JAX
and the tool alternate; each figure, the tool's and JAX's alike, is the minimum of `--repeat`
runs (at least 5): the small whole-process figures are dominated by noise from other work on
the machine, which only ever adds time, so the minimum is the stable estimate (a median of 3
read 0.56x and 1.30x on two consecutive runs of the `fmt` row); the notes give the medians of
the headline rows beside them.  Subprocesses run with Python's
bytecode cache on (in a private prefix), as an installed tool would.  The script always exits
0: a missed target is a row that says `missed`.
"""

from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

import jax  # noqa: E402
from bench_ad import jax_name, the_transformer  # noqa: E402
from bench_memory import chain_text as memory_chain  # noqa: E402
from children import child_env, run_child, tool  # noqa: E402

from jaxprtool import core  # noqa: E402
from jaxprtool.ad.api import grad_jaxpr, linearize_jaxpr  # noqa: E402
from jaxprtool.check import check  # noqa: E402
from jaxprtool.passes.registry import run_pipeline  # noqa: E402
from jaxprtool.text.parser import parse  # noqa: E402
from jaxprtool.text.printer import print_jaxpr  # noqa: E402

ROWS: list[tuple] = []  # (what, tool, jax, ratio, target, met)
NOTES: list[str] = []


def row(what, tool, jax_fig, ratio, target, met):
    """One row of the table; `met` None: a reference figure, no target."""
    ROWS.append(
        (what, tool, jax_fig, ratio, target, "" if met is None else "met" if met else "MISSED")
    )


def best(xs):
    """The figure of repeated timings: their minimum (see the module docstring)."""
    return min(xs)


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


#: issue 49's targets: grad of the transformer and at 100k equations against JAX's
#: make_jaxpr(grad)+str, fmt of JAX's printout against its str, start-up against numpy's import
GRAD_RATIO = 0.30
FMT_RATIO = 0.45
STARTUP_RATIO = 0.90
#: the Python path alone (`JAXPRTOOL_PURE_PYTHON=1`, the compiled twin's reference): fmt and
#: grad against the same JAX figures (issue 49: the fallback stays fast)
FMT_PURE_RATIO = 0.85
GRAD_PURE_RATIO = 0.40
#: a child's environment on the Python path alone
PURE_ENV = child_env(JAXPRTOOL_PURE_PYTHON="1")


def cpu_now() -> float:
    return time.process_time()


# ---------------------------------------------------------------- the program


def count(j) -> int:
    return sum(1 for _ in core.all_eqns(j))


# ---------------------------------------------------------------- targets


def parse_and_print(closed, repeat: int) -> None:
    text = str(closed)
    mb = len(text.encode()) / 1e6
    parse(text)  # warm (builds the parser)
    n = count(parse(text).jaxpr)
    t_jax, t_parse, t_print, t_pure = [], [], [], []
    for _ in range(repeat):
        c0 = cpu_now()
        str(closed)
        t_jax.append(cpu_now() - c0)
        c0 = cpu_now()
        r = parse(text)
        c1 = cpu_now()
        out = print_jaxpr(r.jaxpr)
        t_print.append(cpu_now() - c1)
        t_parse.append(c1 - c0)
        c0 = cpu_now()
        try:
            parse(text, compiled=False)
        except TypeError:  # a version of the tool with one parser
            parse(text)
        t_pure.append(cpu_now() - c0)
    assert out.rstrip("\n") == text.rstrip("\n"), "the round trip changed the text"
    j, p, q, pure = best(t_jax), best(t_parse), best(t_print), best(t_pure)
    row(
        f"parse+print, transformer grad ({mb * 1e3:.0f} KB, {n} eqns), CPU s",
        f"{p + q:.3f}",
        f"{j:.3f}",
        f"{(p + q) / j:.2f}",
        "<= 1.00",
        p + q <= j,
    )
    NOTES.append(
        f"parse: {mb / p:.2f} MB/s, {n / p:,.0f} eqns/s; print: {mb / q:.2f} MB/s, "
        f"{n / q:,.0f} eqns/s; JAX's str: {mb / j:.2f} MB/s; pure-Python parser (no "
        f"lark-cython): {mb / pure:.2f} MB/s"
    )


MLP = ROOT / "samples" / "mlp.jaxpr"
ONE_EQN = "{ lambda ; a:f32[]. let\n    b:f32[] = sin a\n  in (b,) }\n"
AD_COMMANDS = [
    ["jvp"],
    ["linearize"],
    ["vjp"],
    ["grad"],
    ["vmap", "--axis-size", "4"],
    ["jacfwd"],
    ["jacrev"],
    ["hessian"],
    ["check"],
    ["dce"],
    ["canonicalize"],
    ["opt", "-p", "inline,simplify,fold,cse,dce"],
]
#: how much slower than `fmt` any other command may start (issue 26)
STARTUP_EXTRA = 0.05
#: the start-up of `fmt` of a one-equation file, CPU s (set by `startup`, used by `fmt_process`)
STARTUP: dict[str, float] = {}


def startup(repeat: int, folder: Path) -> None:
    f = folder / "one.jaxpr"
    f.write_text(ONE_EQN)
    run_child(tool("fmt", str(f)))  # fills the bytecode cache
    for argv in AD_COMMANDS:
        run_child(tool(*argv, str(f)))
    imp_numpy, fmt, fmt_mlp, fmt_pure = [], [], [], []
    cmds = {" ".join(a): [] for a in AD_COMMANDS}
    for _ in range(repeat):
        imp_numpy.append(run_child([sys.executable, "-c", "import numpy"])[0])
        cpu, _, r = run_child(tool("fmt", str(f)))
        assert r.returncode == 0, r.stderr
        fmt.append(cpu)
        cpu, _, r = run_child(tool("fmt", str(f)), PURE_ENV)
        assert r.returncode == 0, r.stderr
        fmt_pure.append(cpu)
        cpu, _, r = run_child(tool("fmt", str(MLP)))
        assert r.returncode == 0, r.stderr
        fmt_mlp.append(cpu)
        for argv in AD_COMMANDS:
            cpu, _, r = run_child(tool(*argv, str(f)))
            assert r.returncode == 0, (argv, r.stderr)
            cmds[" ".join(argv)].append(cpu)
    t_fmt, t_np = best(fmt), best(imp_numpy)
    STARTUP["fmt"] = t_fmt
    STARTUP["fmt pure"] = best(fmt_pure)
    row(
        "start-up: fmt of a 1-eqn file, whole process, CPU s (JAX: python -c 'import numpy')",
        f"{t_fmt:.3f}",
        f"{t_np:.3f}",
        f"{t_fmt / t_np:.2f}",
        f"<= {STARTUP_RATIO:.2f}",
        t_fmt <= STARTUP_RATIO * t_np,
    )
    NOTES.append(
        f"start-up: fmt of samples/mlp.jaxpr: {best(fmt_mlp):.3f} s CPU; fmt of the 1-eqn "
        f"file on the Python path: {best(fmt_pure):.3f} s"
    )
    for name, times in cmds.items():
        extra = best(times) - t_fmt
        row(
            f"start-up: {name} - fmt, CPU s",
            f"{extra:+.3f}",
            "",
            "",
            f"<= +{STARTUP_EXTRA:.2f} s",
            extra <= STARTUP_EXTRA,
        )


def fmt_process(closed, repeat: int, folder: Path, pure: bool = False) -> None:
    """`jaxprtool fmt` of JAX's printout, whole process minus the start-up of a one-equation
    `fmt`, against JAX's `str` of the same jaxpr; `pure`: on the Python path alone
    (`JAXPRTOOL_PURE_PYTHON=1`, start-up measured the same way), target `FMT_PURE_RATIO`."""
    text = str(closed) + "\n"
    src = folder / "printed_grad.jaxpr"
    src.write_text(text)
    argv = tool("fmt", str(src))
    env = PURE_ENV if pure else None
    run_child(argv, env)
    t_tool, t_jax = [], []
    for _ in range(repeat):
        cpu, _, r = run_child(argv, env)
        assert r.returncode == 0 and r.stdout == text, "fmt changed JAX's printout"
        t_tool.append(cpu)
        c0 = cpu_now()
        str(closed)
        t_jax.append(cpu_now() - c0)
    key = "fmt pure" if pure else "fmt"
    start = STARTUP.get(key) or best(
        run_child(tool("fmt", "-"), env, stdin=ONE_EQN)[0] for _ in range(5)
    )
    tt, tj = best(t_tool) - start, best(t_jax)
    target = FMT_PURE_RATIO if pure else FMT_RATIO
    path = ", Python path" if pure else ""
    row(
        f"fmt of JAX's transformer grad printout ({len(text) // 1000} KB){path}, process - "
        "start-up, CPU s",
        f"{tt:.3f}",
        f"{tj:.3f}",
        f"{tt / tj:.2f}",
        f"<= {target:.2f}",
        tt <= target * tj,
    )
    NOTES.append(
        f"fmt row{path}, medians: tool {median(t_tool) - start:.3f} s, JAX {median(t_jax):.3f} s"
    )


def ad_pipeline(f, leaves, text: str, repeat: int, folder: Path) -> None:
    src = folder / "transformer.jaxpr"
    src.write_text(text)
    argnums = ",".join(str(i) for i in range(len(leaves)))
    argv = tool("grad", "--argnums", argnums, str(src))
    run_child(argv)
    t_tool, t_jax = [], []
    out = ""
    closed = None
    for _ in range(repeat):
        cpu, _, r = run_child(argv)
        assert r.returncode == 0, r.stderr
        t_tool.append(cpu)
        out = r.stdout
        c0 = cpu_now()
        closed = jax.make_jaxpr(jax.grad(f, argnums=tuple(range(len(leaves)))))(*leaves)
        str(closed)
        t_jax.append(cpu_now() - c0)
    tt, tj = best(t_tool), best(t_jax)
    row(
        "grad of the transformer, whole process vs JAX make_jaxpr(grad)+str, CPU s",
        f"{tt:.3f}",
        f"{tj:.3f}",
        f"{tt / tj:.2f}",
        f"<= {GRAD_RATIO:.2f}",
        tt <= GRAD_RATIO * tj,
    )
    NOTES.append(f"grad row, medians: tool {median(t_tool):.3f} s, JAX {median(t_jax):.3f} s")
    n_tool, n_jax = count(parse(out).jaxpr), count(parse(str(closed)).jaxpr)
    row("grad: equations (tool's output vs JAX's grad jaxpr)", n_tool, n_jax, f"{n_tool / n_jax:.2f}",
        "<= 1.00", n_tool <= n_jax)  # fmt: skip
    j = parse(text).jaxpr
    _, _, info = linearize_jaxpr(j, list(range(len(j.invars))))
    _, f_lin = jax.linearize(f, *leaves)
    r_tool, r_jax = len(info.residuals), len(jax.tree_util.tree_leaves(f_lin))
    row("linearize: residuals (tool vs jax.linearize)", r_tool, r_jax, f"{r_tool / r_jax:.2f}",
        "<= 1.00", r_tool <= r_jax)  # fmt: skip
    NOTES.append("grad in-process, CPU s by stage: " + stage_profile(text, len(leaves)))
    grad_pure(argv, tj, repeat)


def grad_pure(argv, t_jax: float, repeat: int) -> None:
    """`grad` of the transformer on the Python path alone, against the JAX figure of the
    `grad` row (issue 49: at most `GRAD_PURE_RATIO`)."""
    run_child(argv, PURE_ENV)
    t_tool = []
    for _ in range(repeat):
        cpu, _, r = run_child(argv, PURE_ENV)
        assert r.returncode == 0, r.stderr
        t_tool.append(cpu)
    tt = best(t_tool)
    row(
        "grad of the transformer, Python path, whole process vs JAX make_jaxpr(grad)+str, CPU s",
        f"{tt:.3f}",
        f"{t_jax:.3f}",
        f"{tt / t_jax:.2f}",
        f"<= {GRAD_PURE_RATIO:.2f}",
        tt <= GRAD_PURE_RATIO * t_jax,
    )


def stage_profile(text: str, nargs: int) -> str:
    stages = {}
    c = cpu_now()

    def lap(name):
        nonlocal c
        now = cpu_now()
        stages[name] = now - c
        c = now

    j = parse(text).jaxpr
    lap("parse")
    check(j)
    lap("check")
    g = grad_jaxpr(j, list(range(nargs)))
    lap("grad (linearize+transpose)")
    g = run_pipeline(g, "canonicalize")
    lap("canonicalize")
    print_jaxpr(g)
    lap("print")
    return ", ".join(f"{k} {v:.2f}" for k, v in stages.items())


BATCH = 4


def batch_pipelines(f, leaves, text: str, repeat: int, folder: Path) -> None:
    """Whole-process `vmap` and `jacrev` of the transformer against JAX's in-process
    `make_jaxpr(jax.vmap(f))` / `make_jaxpr(jax.jacrev(f))` + `str`."""
    src = folder / "transformer.jaxpr"
    src.write_text(text)
    argnums = tuple(range(len(leaves)))
    batched = [jax.numpy.stack([x] * BATCH) for x in leaves]
    cases = {
        "vmap": (
            tool("vmap", "--in-axes", "0", "--axis-size", str(BATCH), str(src)),
            lambda: jax.make_jaxpr(jax.vmap(f))(*batched),
        ),
        "jacrev": (
            tool("jacrev", "--argnums", ",".join(map(str, argnums)), str(src)),
            lambda: jax.make_jaxpr(jax.jacrev(f, argnums=argnums))(*leaves),
        ),
    }
    for name, (argv, trace) in cases.items():
        run_child(argv)
        t_tool, t_jax = [], []
        out, closed = "", None
        for _ in range(repeat):
            cpu, _, r = run_child(argv)
            assert r.returncode == 0, r.stderr
            t_tool.append(cpu)
            out = r.stdout
            c0 = cpu_now()
            closed = trace()
            str(closed)
            t_jax.append(cpu_now() - c0)
        tt, tj = best(t_tool), best(t_jax)
        row(
            f"{name} of the transformer, whole process vs JAX make_jaxpr({name})+str, CPU s",
            f"{tt:.3f}",
            f"{tj:.3f}",
            f"{tt / tj:.2f}",
            "<= 0.50",
            tt <= 0.5 * tj,
        )
        n_tool, n_jax = count(parse(out).jaxpr), count(parse(str(closed)).jaxpr)
        NOTES.append(f"{name}: {n_tool} equations out (JAX's: {n_jax})")


# ---------------------------------------------------------------- scale

LAYER_DOT = (
    "    {out}:f32[4,8] = dot_general[\n"
    "      dimension_numbers=(([1], [0]), ([], []))\n"
    "      preferred_element_type=float32\n"
    "    ] {h} a\n"
)


def layers_fn(w, x, layers: int):
    """The layer-shaped program of the scale rows: h = tanh(h @ w) * h + x, `layers` times."""
    h = x
    for _ in range(layers):
        h = jax.numpy.tanh(h @ w) * h + x
    return jax.numpy.sum(h)


def layers_args():
    return jax.numpy.ones((8, 8)) * 0.1, jax.numpy.ones((4, 8))


def layers_text(layers: int) -> str:
    """JAX's printout of `layers_fn` (4 equations a layer, one reduce_sum), written without
    tracing (checked against JAX's text at 3 layers in `scale`)."""
    names = (jax_name(i) for i in itertools.count(2))
    out = ["{ lambda ; a:f32[8,8] b:f32[4,8]. let\n"]
    h = "b"
    for _ in range(layers):
        c, d, e, g = next(names), next(names), next(names), next(names)
        out.append(LAYER_DOT.format(out=c, h=h))
        out.append(f"    {d}:f32[4,8] = tanh {c}\n    {e}:f32[4,8] = mul {d} {h}\n")
        out.append(f"    {g}:f32[4,8] = add {e} b\n")
        h = g
    r = next(names)
    out.append(f"    {r}:f32[] = reduce_sum[axes=(0, 1) out_sharding=None] {h}\n  in ({r},) }}\n")
    return "".join(out)


#: one scale row's child: the command run as the `jaxprtool` program runs it (`cli.entry`
#: marks the process standalone: the collector's generations frozen after each paused block,
#: the program read kept to the exit), measured from within: CPU s, peak memory growth,
#: equations written
SCALE = r"""
import sys, time
from jaxprtool import cli
from jaxprtool.cli import main
cli._STANDALONE = True  # (as `cli.entry`, which ends the process before it could measure)
def hwm_kb():  # this process's peak resident memory
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
src, out, *argv = sys.argv[1:]
before, c0 = hwm_kb(), time.process_time()
main([*argv, src, *(["-o", out] if argv[0] != "check" else [])], standalone_mode=False)
cpu = time.process_time() - c0
eqns = sum(1 for line in open(out) if " = " in line) if argv[0] != "check" else 0
print(cpu, hwm_kb() - before, eqns)
"""
#: command -> (argv, KB of peak memory growth allowed per equation, per input or output eqn)
SCALE_COMMANDS = {
    "fmt": (["fmt"], 1.5, "in"),
    "check": (["check"], 2.0, "in"),
    "dce": (["dce"], 2.0, "in"),
    "jvp": (["jvp"], 2.5, "out"),
    "vjp": (["vjp"], 2.5, "out"),
    "grad": (["grad"], 1.5, "out"),
    "vmap": (["vmap", "--axis-size", "4"], 2.5, "out"),
}
#: the commands measured at 1M equations without `--full` (issue 49)
SCALE_AT_1M = ("fmt", "grad")
#: time for 4x the equations at most this many times the time (issue 49: 4.6x)
LINEAR = 4.6
#: CPU seconds allowed for grad at these sizes (issue 49)
GRAD_LIMITS = {400_000: 30, 1_000_000: 80}


def _scale_child(src: Path, folder: Path, argv) -> subprocess.CompletedProcess:
    return run_child([sys.executable, "-c", SCALE, str(src), str(folder / "out.jaxpr"), *argv])[2]


#: a scale point whose first run takes less than this many CPU seconds runs `SHORT_REPEAT`
#: times at least (as the whole-process rows: one noisy run weighs most in a short figure)
SHORT_POINT, SHORT_REPEAT = 5.0, 5


def _scale_runs(points: dict, folder: Path, repeat: int) -> dict:
    """Each point (command, size) -> (argv, source file) run in fresh processes, in
    `repeat` rounds (`SHORT_REPEAT` for a point whose first run is short): every point once
    a round, so that a slow spell of the machine falls on every size, not on one.  (Such a
    spell lasts minutes: grad's 400k point read 17.8 and 20.5 s, both of its runs each
    time, in two runs of this script an hour apart.)  Returns each point -> its runs
    [(CPU s, peak growth KB, equations written)], or the failed child's result.  The short
    points' extra runs can only lower their least time, which raises a ratio over them:
    it errs against the tool."""
    runs: dict = {p: [] for p in points}
    wanted = dict.fromkeys(points, repeat)
    for k in range(max(repeat, SHORT_REPEAT)):
        for p, (argv, src) in points.items():
            if k >= wanted[p] or isinstance(runs[p], subprocess.CompletedProcess):
                continue
            r = _scale_child(src, folder, argv)
            if r.returncode:
                runs[p] = r
                continue
            t, grow, eqns = r.stdout.split()
            runs[p].append((float(t), int(grow), int(eqns)))
            if float(t) < SHORT_POINT and k == 0:
                wanted[p] = max(repeat, SHORT_REPEAT)
    return runs


#: the machine's own growth: plain Python objects, each with a string, bound in a dict and
#: looked up again in the order made, as many as fill `argv[1]` KB; CPU s and peak growth KB
MACHINE_LOOP = r"""
import sys, time
class Item:
    __slots__ = ("name", "a", "b", "c")
    def __init__(self, k):
        self.name = "v" + str(k)
        self.a = self.b = self.c = None
def hwm_kb():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
n = int(sys.argv[1]) * 1024 // 200  # (an item takes about 200 bytes with its entries)
before, c0 = hwm_kb(), time.process_time()
items = [Item(k) for k in range(n)]
table = {x.name: x for x in items}
assert sum(table[x.name] is x for x in items) == n
print(time.process_time() - c0, hwm_kb() - before)
"""


def machine_growth(kb_small: int, kb_large: int, repeat: int) -> float:
    """How much more a plain Python loop costs per item on this machine at `kb_large` KB of
    peak memory than at `kb_small` (the least CPU time of `repeat` runs at each): the part
    of a scale row's growth that no code of the tool's makes (caches, page tables, and on
    this VM memory backed on first touch)."""
    times: dict[int, list[float]] = {kb_small: [], kb_large: []}
    for _ in range(repeat):  # (the two sizes alternate, as the scale rows' rounds)
        for kb, ts in times.items():
            ts.append(
                float(run_child([sys.executable, "-c", MACHINE_LOOP, str(kb)])[2].stdout.split()[0])
            )
    return min(times[kb_large]) / kb_large / (min(times[kb_small]) / kb_small)


def _one_time_growth(folder: Path, only=()) -> dict[str, int]:
    """Each command's peak memory growth (KB) on a 100-equation program: what it loads once
    (rule families, numpy), not per equation; subtracted from the scale rows' growth."""
    src = folder / "layers100.jaxpr"
    src.write_text(layers_text(25))
    base = {}
    for name, (argv, _, _) in SCALE_COMMANDS.items():
        if only and name not in only:
            continue
        r = _scale_child(src, folder, argv)
        base[name] = int(r.stdout.split()[1]) if r.returncode == 0 else 0
    src.unlink()
    NOTES.append(
        "scale rows: peak growth per equation is measured above each command's growth on a "
        "100-equation program (one-time loading: "
        + ", ".join(f"{k} {v / 1024:.0f} MB" for k, v in base.items())
        + ")"
    )
    return base


def scale(sizes: list[int], folder: Path, full: bool = False, only=(), repeat: int = 2) -> None:
    """Each command on layer-shaped programs of `sizes` equations, in fresh processes
    (`_scale_runs`, `repeat` rounds): CPU s, peak memory growth per equation (above the
    one-time growth), linearity, beside the machine's own growth at grad's footprints; grad
    at 100k against JAX's.  At 1M equations only `SCALE_AT_1M` unless `full`; `only`: these
    commands alone (default: all)."""
    small = jax.make_jaxpr(lambda w, x: layers_fn(w, x, 3))(*layers_args())
    assert str(small) + "\n" == layers_text(3), "layers_text no longer prints as JAX does"
    cpu: dict[tuple[str, int], float] = {}
    peak: dict[tuple[str, int], int] = {}
    out_eqns: dict[int, int] = {}
    base = _one_time_growth(folder, only)
    points = {}
    for n in sizes:
        src = folder / f"layers{n}.jaxpr"
        src.write_text(layers_text(n // 4))
        for name, (argv, _, _) in SCALE_COMMANDS.items():
            if (n < 1_000_000 or full or name in SCALE_AT_1M) and (not only or name in only):
                points[name, n] = (argv, src)
    runs = _scale_runs(points, folder, repeat)
    for n in sizes:
        (folder / f"layers{n}.jaxpr").unlink()
    (folder / "out.jaxpr").unlink(missing_ok=True)
    for (name, n), got in runs.items():
        if isinstance(got, subprocess.CompletedProcess):
            why = (got.stderr.strip().splitlines() or ["?"])[-1][:60]
            row(f"scale: {name} at {n} eqns: failed: {why}", "", "", "", "", False)
            continue
        # the least CPU time (the module docstring's reason); the most memory, which errs
        # against the tool
        t, grow, k = min(x[0] for x in got), max(x[1] for x in got), got[0][2]
        cpu[name, n], peak[name, n] = t, grow
        if name == "grad":
            out_eqns[n] = k
        _, kb, per = SCALE_COMMANDS[name]
        per_eqn = (grow - base[name]) / (n if per == "in" else max(k, 1))
        row(
            f"scale: {name} at {n} eqns, CPU s | peak growth KB per {per} eqn",
            f"{t:.1f} | {per_eqn:.2f}",
            "",
            f"{per_eqn / kb:.2f}",
            f"<= {kb} KB",
            per_eqn <= kb,
        )
    pairs = list(zip(sizes, sizes[1:]))
    if len(sizes) > 2:
        pairs.append((sizes[0], sizes[-1]))  # flat from the smallest to the largest
    for a, b in pairs:
        for name in SCALE_COMMANDS:
            if (name, a) in cpu and (name, b) in cpu:
                ratio, allowed = cpu[name, b] / cpu[name, a], LINEAR * b / a / 4
                per_eqn = cpu[name, b] / b / (cpu[name, a] / a)
                row(f"scale: {name} {b}/{a} eqns time ratio (cost per eqn {per_eqn:.2f}x)",
                    f"{ratio:.2f}", "", "", f"<= {allowed:.1f}", ratio <= allowed)  # fmt: skip
    a, b = sizes[0], sizes[-1]
    if ("grad", a) in peak and ("grad", b) in peak and b > a:
        growth = machine_growth(peak["grad", a], peak["grad", b], repeat)
        per_eqn = cpu["grad", b] / b / (cpu["grad", a] / a)
        row(f"scale: this machine, a plain Python loop at grad's peak memory of {a // 1000}k "
            f"and {b // 1000}k eqns: cost per item (grad's per eqn {per_eqn:.2f}x)",
            f"{growth:.2f}x", "", "", "", None)  # fmt: skip
    for n, limit in GRAD_LIMITS.items():
        if ("grad", n) in cpu:
            t = cpu["grad", n]
            row(f"scale: grad of {n // 1000}k eqns, CPU s", f"{t:.1f}", "", "", f"<= {limit} s",
                t <= limit)  # fmt: skip
    # against JAX at 100k (the size), else at the smallest size measured if smaller
    # (JAX's trace of 1M equations takes many minutes)
    n = 100_000 if ("grad", 100_000) in cpu else sizes[0]
    if ("grad", n) in cpu and n <= 100_000:
        scale_against_jax(n, cpu["grad", n], out_eqns[n])


def scale_against_jax(n: int, t_tool: float, n_tool: int) -> None:
    layers = n // 4
    w, x = layers_args()
    c0 = cpu_now()
    closed = jax.make_jaxpr(jax.grad(lambda w, x: layers_fn(w, x, layers)))(w, x)
    str(closed)
    t_jax = cpu_now() - c0
    n_jax = len(closed.jaxpr.eqns)
    row(f"scale: grad at {n} eqns, whole process vs JAX make_jaxpr(grad)+str, CPU s",
        f"{t_tool:.1f}", f"{t_jax:.1f}", f"{t_tool / t_jax:.2f}", f"<= {GRAD_RATIO:.2f}",
        t_tool <= GRAD_RATIO * t_jax)  # fmt: skip
    row(f"scale: grad at {n} eqns, equations out", n_tool, n_jax, f"{n_tool / n_jax:.2f}",
        "<= 1.00", n_tool <= n_jax)  # fmt: skip


def memory_command(n: int, folder: Path) -> None:
    """`jaxprtool memory --no-xla --json` of n equations, whole process (issue 26: 1M in 10 s)."""
    src = folder / "memory_chain.jaxpr"
    src.write_text(memory_chain(n))
    cpu, _, r = run_child(tool("memory", "--no-xla", "--json", "-o", os.devnull, str(src)))
    src.unlink()
    assert r.returncode == 0, r.stderr[-200:]
    limit = 10 * n / 1_000_000
    row(f"memory of {n} eqns, whole process, CPU s", f"{cpu:.1f}", "", "", f"<= {limit:g} s",
        cpu <= limit)  # fmt: skip


def compile_cache(layers: int, folder: Path) -> None:
    f, leaves = the_transformer(layers)
    grad_fn = jax.grad(f, argnums=tuple(range(len(leaves))))
    closed = jax.make_jaxpr(grad_fn)(*leaves)
    src = folder / "transformer_grad.jaxpr"
    src.write_text(str(closed) + "\n")
    env = child_env(XDG_CACHE_HOME=str(folder / "cache"))
    walls = []
    for _ in range(2):
        _, wall, r = run_child(
            tool("run", str(src), "--random", "0", "--print-values", "none"), env
        )
        assert r.returncode == 0, r.stderr[-200:]
        walls.append(wall)
    entries = list((folder / "cache" / "jaxprtool" / "xla").iterdir())
    t0 = time.perf_counter()
    jax.jit(grad_fn).lower(*leaves).compile()
    t_jax = time.perf_counter() - t0
    row(
        f"run grad of a {layers}-layer transformer: 1st call wall s (JAX: its jit compile)",
        f"{walls[0]:.2f}",
        f"{t_jax:.2f}",
        "",
        "",
        True,
    )
    row(
        f"run grad of a {layers}-layer transformer: 2nd call wall s (cache hit)",
        f"{walls[1]:.2f}",
        "",
        f"{walls[1] / walls[0]:.2f}",
        "< 1st call",
        walls[1] < walls[0] and bool(entries),
    )


# ---------------------------------------------------------------- table


def print_table() -> None:
    head = ("target", "tool", "JAX", "ratio", "target", "")
    rows = [head, *[tuple(str(x) for x in r) for r in ROWS]]
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    for k, r in enumerate(rows):
        print(
            "  ".join(
                c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))
            )
        )
        if k == 0:
            print("  ".join("-" * w for w in widths))
    for note in NOTES:
        print("  " + note)
    missed = sum(r[-1] == "MISSED" for r in ROWS)
    targets = sum(r[-1] != "" for r in ROWS)
    print(f"{targets - missed} of {targets} targets met" + (f"; {missed} missed" if missed else ""))


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument(
        "--scale",
        default="100000,400000,1000000",
        help="Equation counts of the scale rows (default: 100000,400000,1000000).",
    )
    ap.add_argument(
        "--full",
        action="store_true",
        help="Every scale command at 1M equations, not only fmt and grad.",
    )
    ap.add_argument(
        "--scale-commands",
        default="",
        help=f"Only these commands in the scale rows (comma-separated; of {', '.join(SCALE_COMMANDS)}).",
    )
    ap.add_argument(
        "--scale-repeat",
        type=int,
        default=2,
        help="Rounds of the scale rows (each point once a round, the sizes alternating); a "
        "point's figure is its least CPU time.",
    )
    ap.add_argument(
        "--memory-eqns", type=int, default=1_000_000, help="Equations of the `memory` row."
    )
    ap.add_argument(
        "--run-layers",
        type=int,
        default=8,
        help="Layers of the transformer whose gradient `run` compiles (64 takes ~12 GB and "
        "many minutes in XLA).",
    )
    ap.add_argument("--skip-run", action="store_true", help="Leave out the compile-cache rows.")
    ap.add_argument("--only", default="", help="Only these steps (comma-separated names).")
    args = ap.parse_args()
    repeat = max(5, args.repeat)
    sizes = [int(n) for n in args.scale.split(",") if n]
    scale_only = tuple(filter(None, args.scale_commands.split(",")))
    sys.setrecursionlimit(10000)
    f, leaves = the_transformer(args.layers)
    text = str(jax.make_jaxpr(f)(*leaves)) + "\n"
    closed = jax.make_jaxpr(jax.grad(f, argnums=tuple(range(len(leaves)))))(*leaves)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        steps = [
            ("parse+print", lambda: parse_and_print(closed, repeat)),
            ("start-up", lambda: startup(repeat, folder)),
            ("fmt", lambda: fmt_process(closed, repeat, folder)),
            ("fmt", lambda: fmt_process(closed, repeat, folder, pure=True)),
            ("grad", lambda: ad_pipeline(f, leaves, text, repeat, folder)),
            ("vmap+jacrev", lambda: batch_pipelines(f, leaves, text, repeat, folder)),
            ("scale", lambda: scale(sizes, folder, args.full, scale_only, args.scale_repeat)),
            ("memory", lambda: memory_command(args.memory_eqns, folder)),
        ]
        if not args.skip_run:
            steps.append(("run", lambda: compile_cache(args.run_layers, folder)))
        only = set(filter(None, args.only.split(",")))
        for name, step in steps:
            if only and name not in only:
                continue
            try:
                step()
            except Exception as e:  # noqa: BLE001  (a failed measurement is a row, not a crash)
                why = f"{type(e).__name__}: {e}".replace("\n", " ")[:80]
                row(f"{name}: failed: {why}", "", "", "", "", False)
            print(f"... {name} measured", file=sys.stderr, flush=True)
    load = os.getloadavg()[0]
    print(
        f"\nissue 13, 26 and 49 targets (transformer of {args.layers} layers; minimum of "
        f"{repeat}; load average {load:.1f} at the end)"
    )
    print_table()
    return 0


if __name__ == "__main__":
    sys.exit(main())
