"""The targets of issue 13 in one table: each measured beside JAX in this one run.

    .venv/bin/python bench/bench_targets.py [--layers 64] [--repeat 3] [--run-layers 8]

Rows: parse + print of JAX's printed grad jaxpr of the transformer against JAX's own
`str(closed_jaxpr)`; start-up of `fmt` on a one-equation file and of the AD commands and
passes against it (`import jax` as JAX's figure); whole-process `grad` of the transformer
against JAX's in-process `make_jaxpr(jax.grad(f))` + `str`, with the equation and residual
counts; peak memory growth per equation at 100k equations; first and second `run` of the
transformer's gradient (JAX's persistent compilation cache) against JAX's own jit compile.

Times are CPU seconds (user + system; children's for a subprocess) wherever the issue allows:
the machine may be shared, and CPU time is what a loaded machine does not inflate much.  JAX
and the tool alternate, median of `--repeat` (at least 3).  Subprocesses run with Python's
bytecode cache on (in a private prefix), as an installed tool would.  The script always exits
0: a missed target is a row that says `missed`.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
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
from bench_ad import block_params, chain_text, flat_fn, transformer  # noqa: E402

from jaxprtool import core  # noqa: E402
from jaxprtool.ad.api import grad_jaxpr, linearize_jaxpr  # noqa: E402
from jaxprtool.check import check  # noqa: E402
from jaxprtool.passes.registry import run_pipeline  # noqa: E402
from jaxprtool.text.parser import parse  # noqa: E402
from jaxprtool.text.printer import print_jaxpr  # noqa: E402

ROWS: list[tuple] = []  # (what, tool, jax, ratio, target, met)
NOTES: list[str] = []


def row(what, tool, jax_fig, ratio, target, met):
    ROWS.append((what, tool, jax_fig, ratio, target, "met" if met else "MISSED"))


def median(xs):
    return statistics.median(xs)


def cpu_now() -> float:
    return time.process_time()


def child_env(**extra) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT), **extra)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = os.path.join(tempfile.gettempdir(), "jaxprtool-bench-pyc")
    return env


def run_child(argv, env=None, stdin=None) -> tuple[float, float, subprocess.CompletedProcess]:
    """(CPU seconds of the child, wall seconds, result)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    r = subprocess.run(argv, env=env or child_env(), capture_output=True, text=True, input=stdin)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall, r


def tool(*args) -> list[str]:
    return [sys.executable, "-m", "jaxprtool", *args]


# ---------------------------------------------------------------- the program


def the_transformer(layers: int):
    key = jax.random.PRNGKey(0)
    x = jax.random.normal(key, (6, 16))
    args = ([block_params(k) for k in jax.random.split(key, layers)], x)
    return flat_fn(transformer, args)


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
    j, p, q, pure = median(t_jax), median(t_parse), median(t_print), median(t_pure)
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
    ["check"],
    ["dce"],
    ["canonicalize"],
    ["opt", "-p", "inline,simplify,fold,cse,dce"],
]


def startup(repeat: int, folder: Path) -> None:
    f = folder / "one.jaxpr"
    f.write_text(ONE_EQN)
    run_child(tool("fmt", str(f)))  # fills the bytecode cache
    for argv in AD_COMMANDS:
        run_child(tool(*argv, str(f)))
    imp_jax, fmt, fmt_mlp = [], [], []
    cmds = {" ".join(a): [] for a in AD_COMMANDS}
    for _ in range(repeat):
        imp_jax.append(run_child([sys.executable, "-c", "import jax"])[0])
        cpu, _, r = run_child(tool("fmt", str(f)))
        assert r.returncode == 0, r.stderr
        fmt.append(cpu)
        cpu, _, r = run_child(tool("fmt", str(MLP)))
        assert r.returncode == 0, r.stderr
        fmt_mlp.append(cpu)
        for argv in AD_COMMANDS:
            cpu, _, r = run_child(tool(*argv, str(f)))
            assert r.returncode == 0, (argv, r.stderr)
            cmds[" ".join(argv)].append(cpu)
    t_fmt, t_jax = median(fmt), median(imp_jax)
    row(
        "start-up: fmt of a 1-eqn file, whole process, CPU s (JAX: import jax)",
        f"{t_fmt:.3f}",
        f"{t_jax:.3f}",
        f"{t_fmt / t_jax:.2f}",
        "<= 0.25 s",
        t_fmt <= 0.25,
    )
    NOTES.append(
        f"start-up: fmt of samples/mlp.jaxpr (its dtype parameters load numpy): "
        f"{median(fmt_mlp):.3f} s CPU"
    )
    for name, times in cmds.items():
        extra = median(times) - t_fmt
        row(
            f"start-up: {name} - fmt, CPU s",
            f"{extra:+.3f}",
            "",
            "",
            "<= +0.10 s",
            extra <= 0.10,
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
    tt, tj = median(t_tool), median(t_jax)
    row(
        "grad of the transformer, whole process vs JAX make_jaxpr(grad)+str, CPU s",
        f"{tt:.3f}",
        f"{tj:.3f}",
        f"{tt / tj:.2f}",
        "<= 0.50",
        tt <= 0.5 * tj,
    )
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


MEMORY = r"""
import sys
from jaxprtool.text.parser import parse
from jaxprtool.text.printer import print_jaxpr
from jaxprtool.ad.api import jvp_jaxpr, vjp_jaxpr, grad_jaxpr
from jaxprtool.passes.registry import run_pipeline
def hwm_kb():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
text = open(sys.argv[1]).read(); cmd = sys.argv[2]
before = hwm_kb()
j = parse(text).jaxpr
out = {"fmt": lambda: j, "jvp": lambda: jvp_jaxpr(j, [0, 1]), "vjp": lambda: vjp_jaxpr(j, [0, 1]),
       "dce": lambda: run_pipeline(j, "dce"), "grad": lambda: grad_jaxpr(j, [0])}[cmd]()
s = print_jaxpr(out)
print(hwm_kb() - before, len(out.eqns))
"""


def memory(n: int, folder: Path) -> None:
    src = folder / f"chain{n}.jaxpr"
    src.write_text(chain_text(n))
    for cmd, target in (("fmt", 2.0), ("dce", 2.0), ("jvp", 2.5), ("vjp", 2.5), ("grad", 2.5)):
        _, _, r = run_child([sys.executable, "-c", MEMORY, str(src), cmd])
        if r.returncode:
            row(f"memory: {cmd}, {n} eqns", "failed", "", "", "", False)
            continue
        grow_kb, out_eqns = (int(x) for x in r.stdout.split())
        per = grow_kb / (n if cmd in ("fmt", "dce") else out_eqns)
        unit = "in" if cmd in ("fmt", "dce") else "out"
        row(
            f"memory: {cmd} at {n} eqns, peak growth KB per {unit} eqn",
            f"{per:.2f}",
            "",
            f"{per / target:.2f}",
            f"<= {target} KB",
            per <= target,
        )


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
    print(
        f"{len(ROWS) - missed} of {len(ROWS)} targets met"
        + (f"; {missed} missed" if missed else "")
    )


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--layers", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--memory-eqns", type=int, default=100_000)
    ap.add_argument(
        "--run-layers",
        type=int,
        default=8,
        help="Layers of the transformer whose gradient `run` compiles (64 takes ~12 GB and "
        "many minutes in XLA).",
    )
    ap.add_argument("--skip-run", action="store_true", help="Leave out the compile-cache rows.")
    args = ap.parse_args()
    repeat = max(3, args.repeat)
    sys.setrecursionlimit(10000)
    f, leaves = the_transformer(args.layers)
    text = str(jax.make_jaxpr(f)(*leaves)) + "\n"
    closed = jax.make_jaxpr(jax.grad(f, argnums=tuple(range(len(leaves)))))(*leaves)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        steps = [
            ("parse+print", lambda: parse_and_print(closed, repeat)),
            ("start-up", lambda: startup(repeat, folder)),
            ("grad", lambda: ad_pipeline(f, leaves, text, repeat, folder)),
            ("memory", lambda: memory(args.memory_eqns, folder)),
        ]
        if not args.skip_run:
            steps.append(("run", lambda: compile_cache(args.run_layers, folder)))
        for name, step in steps:
            try:
                step()
            except Exception as e:  # noqa: BLE001  (a failed measurement is a row, not a crash)
                why = f"{type(e).__name__}: {e}".replace("\n", " ")[:80]
                row(f"{name}: failed: {why}", "", "", "", "", False)
            print(f"... {name} measured", file=sys.stderr, flush=True)
    print(f"\nissue 13 targets (transformer of {args.layers} layers; median of {repeat})")
    print_table()
    return 0


if __name__ == "__main__":
    sys.exit(main())
