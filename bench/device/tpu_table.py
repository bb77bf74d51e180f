"""The tool against JAX on one device, command by command (issue 38): the docs' table.

    python bench/device/tpu_table.py --device tpu [--size full|small] [--out DIR] [--only NAME]

For each program of models.py, traced here by the installed JAX and read back from its
printed text: the outputs of the tool's `run`, `grad | run` (or `jvp | run` where JAX has no
reverse mode), `vmap | run` and JAX's `jax.jit`, `jax.grad`, `jax.jvp`, `jax.vmap` of the
same function on the same device and inputs, both at matmul precision 'highest' (the tool's
`--matmul-precision highest`), as the largest difference relative to the largest magnitude;
XLA's temp bytes of each executable (`compile().memory_analysis()`: the figure `memory`
prints) and its time per call, the tool's (`run --repeat`'s executable) against JAX's,
median of --repeat calls interleaved, at the precision the text gives; the seconds each row
took; the tool's `compile --emit optimized-hlo --device D` and its
planned peak (`memory --of grad`, liveness) beside XLA's temp bytes.  Then `check-grad
--device D` and `run --device D` on the small programs through the command line.

Each row is written to OUT/tpu_table.md as it is measured (a run cut short keeps its rows).
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import json
import os
import re
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import jax  # noqa: E402
import models  # noqa: E402
import numpy as np  # noqa: E402

from jaxprtool import api, backend  # noqa: E402


def rel_err(got, want) -> float:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    scale = max(float(np.max(np.abs(want))) if want.size else 0.0, 1e-30)
    return float(np.max(np.abs(got - want))) / scale if want.size else 0.0


def worst(gots, wants) -> float:
    return max((rel_err(g, w) for g, w in zip(gots, wants)), default=0.0)


def compiled_pair(f_tool, f_jax, xs):
    """Both functions compiled by XLA for the inputs' device (what each runs and times)."""
    return [jax.jit(f).lower(*xs).compile() for f in (f_tool, f_jax)]


def temp(compiled) -> int:
    return int(compiled.memory_analysis().temp_size_in_bytes)


def timed_pair(c_tool, c_jax, xs, repeat: int) -> tuple[float, float]:
    """Median seconds per call of two executables, interleaved, after a warm-up."""
    for c in (c_tool, c_jax):
        jax.block_until_ready(c(*xs))
    ts, tj = [], []
    for _ in range(repeat):
        for c, acc in ((c_tool, ts), (c_jax, tj)):
            t0 = time.perf_counter()
            jax.block_until_ready(c(*xs))
            acc.append(time.perf_counter() - t0)
    return statistics.median(ts), statistics.median(tj)


def row(table, name, what, got, want, ours, theirs, xs, repeat, t0, note="", cpu=None):
    """One command's row: outputs compared, time per call, XLA's temp bytes; with `cpu`
    (JAX's outputs on the CPU, f32 at highest) the tool's at the text's precision and at
    highest against them."""
    t_tool, t_jax = timed_pair(ours, theirs, xs, repeat)
    vs_cpu = ""
    if cpu is not None:
        vs_cpu = f"{worst(outs_list(ours(*xs)), cpu):.1e} / {worst(got, cpu):.1e}"
    table.add(
        [
            name,
            what,
            f"{worst(got, want):.1e}",
            vs_cpu,
            f"{t_tool / t_jax:.3f}",
            f"{gb(temp(ours))} / {gb(temp(theirs))}",
            note,
            f"{time.perf_counter() - t0:.0f}",
        ]
    )


def tool_fn(program):
    """The function `run` compiles for a program (as `run --repeat` times it)."""
    return backend.as_jax_function(program.jaxpr, None, False)


def outs_list(x):
    return list(x) if isinstance(x, (list, tuple)) else [x]


class Table:
    def __init__(self, path: Path, header: list[str]):
        self.path, self.rows = path, []
        self.header = header
        self._write()

    def add(self, row: list) -> None:
        self.rows.append([str(c) for c in row])
        print(" | ".join(self.rows[-1]), flush=True)
        self._write()

    def _write(self) -> None:
        lines = ["| " + " | ".join(self.header) + " |", "|" + " --- |" * len(self.header)]
        lines += ["| " + " | ".join(r) + " |" for r in self.rows]
        self.path.write_text("\n".join(lines) + "\n")


def gb(n) -> str:
    return f"{n / 1e9:.3f} GB" if n >= 1e7 else f"{n / 1e6:.2f} MB"


#: inputs larger than this get no CPU reference (the CPU's compile and run of the full-size
#: transformer's gradient would take minutes of the accelerator's lease)
CPU_REFERENCE_BYTES = 64 << 20


def on_cpu(fn, args):
    """JAX's outputs on the CPU (f32 products at highest): what a CPU user compares with;
    None for inputs over CPU_REFERENCE_BYTES."""
    if sum(np.asarray(a).nbytes for a in args) > CPU_REFERENCE_BYTES:
        return None
    cpu = jax.devices("cpu")[0]
    with jax.default_matmul_precision("highest"):
        return outs_list(jax.jit(fn)(*[jax.device_put(a, cpu) for a in args]))


def phase(name: str, what: str, t0: float) -> None:
    """A line in the log for each step of a row: where a row that stalls stopped."""
    print(f"  {name}: {what} at {time.perf_counter() - t0:.1f} s", flush=True)


def measure(name, f, args, argnums, batched, device, repeat, table, cpu_reference, as_written):
    dev = backend.get_device(device)
    xs = [jax.device_put(a, dev) for a in args]
    program = api.parse(str(jax.make_jaxpr(f)(*args)), f"<{name}>")
    # f32 programs compared at 'highest' (--matmul-precision highest); bf16 ones as written
    # (XLA's TPU compiler refuses f32 contraction of bf16 operands: Mosaic "Bad lhs type")
    # (--as-written: both as the text gives them, where a compile at highest takes minutes)
    low = as_written or any(np.asarray(a).dtype.itemsize < 4 for a in args)
    hi = None if low else "highest"

    def at_hi():
        return contextlib.nullcontext() if low else jax.default_matmul_precision(hi)

    t0 = time.perf_counter()
    with at_hi():
        want = outs_list(jax.jit(f)(*xs))
    phase(name, "JAX's run done", t0)
    got = api.run(program, *args, device=device, matmul_precision=hi)
    phase(name, "tool's run done", t0)
    cpu = on_cpu(f, args) if cpu_reference else None
    pair = compiled_pair(tool_fn(program), f, xs)
    phase(name, "CPU reference and compiles done", t0)
    row(table, name, "run", got, want, *pair, xs, repeat, t0, cpu=cpu)
    # derivatives: grad (or jvp where JAX has no reverse mode of the program)
    t0 = time.perf_counter()
    if argnums:
        derived, jax_fn, what = api.grad(program, argnums), jax.grad(f, argnums), "grad, run"
    else:
        derived, what = api.jvp(program), "jvp, run"
        n = len(args)
        args = list(args) + [np.ones_like(a) for a in args]
        xs = xs + [jax.device_put(t, dev) for t in args[n:]]

        def jax_fn(*a):
            return jax.jvp(f, a[:n], a[n:])

    with at_hi():
        want = outs_list(jax.jit(jax_fn)(*xs))
    phase(name, f"JAX's {what.split(',')[0]} done", t0)
    got = api.run(derived, *args, device=device, matmul_precision=hi)
    phase(name, f"tool's {what} done", t0)
    planned = ""
    if argnums:
        timeline, _ = api.memory(program, of="grad", argnums=argnums)
        planned = f"planned peak {gb(timeline.peak_bytes)}"
    if as_written:
        planned += "; compared as written (precision=None on both sides)"
    pair = compiled_pair(tool_fn(derived), jax_fn, xs)
    phase(name, "compiles done", t0)
    cpu = on_cpu(jax_fn, args) if cpu_reference else None
    phase(name, "CPU reference done", t0)
    row(table, name, what, got, want, *pair, xs, repeat, t0, planned, cpu=cpu)
    if batched:
        t0 = time.perf_counter()
        one, in_axes = batched
        k = len(in_axes)
        ex = [a[0] if ax == 0 else a for a, ax in zip(args, in_axes)]
        single = api.parse(str(jax.make_jaxpr(one)(*ex)), f"<{name} example>")
        vm = api.vmap(single, list(in_axes), axis_size=len(args[0]))
        jv = jax.vmap(one, in_axes)
        with at_hi():
            want = outs_list(jax.jit(jv)(*xs[:k]))
        got = api.run(vm, *args[:k], device=device, matmul_precision=hi)
        pair = compiled_pair(tool_fn(vm), jv, xs[:k])
        row(table, name, "vmap, run", got, want, *pair, xs[:k], repeat, t0)


def command_line_checks(device: str, out: Path) -> list[str]:
    """The commands themselves, in-process, on the small programs: run, compile
    --emit optimized-hlo, memory, check-grad and run --profile with --device."""
    from click.testing import CliRunner

    from jaxprtool.cli import main

    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, f, args, argnums, _ in models.cases("small"):
            path = Path(tmp) / (name.split()[0].replace(".", "_") + ".jaxpr")
            path.write_text(str(jax.make_jaxpr(f)(*args)) + "\n")
            for cmd in (
                ["run", path, "--random", "0", "--device", device, "--print-values", "none"],
                ["compile", path, "--emit", "optimized-hlo", "--device", device],
                ["memory", path, "--device", device, "--of", "grad" if argnums else "program"],
                ["check-grad", path, "--device", device],
                # the per-equation time table from the device's trace (its first row)
                [
                    "run",
                    path,
                    "--random",
                    "0",
                    "--device",
                    device,
                    "--print-values",
                    "none",
                    "--profile",
                    Path(tmp) / "profile",
                ],
            ):
                r = CliRunner().invoke(main, ["--no-color", *map(str, cmd)])
                lines_out = r.output.strip().splitlines() or [""]
                if "--profile" in cmd:  # the table's first operation
                    rows = [ln for ln in lines_out if re.match(r"\s+[\d.]+ ms ", ln)]
                    lines_out = rows[:1] or lines_out[-1:]
                last = lines_out[-1][:120]
                lines.append(f"| {name} | {cmd[0]} | exit {r.exit_code} | {last} |")
                print(lines[-1], flush=True)
    (out / "tpu_commands.md").write_text(
        "| program | command | exit | last line |\n| --- | --- | --- | --- |\n"
        + "\n".join(lines)
        + "\n"
    )
    return lines


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="tpu")
    ap.add_argument("--size", default="full", choices=sorted(models.SIZES))
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument(
        "--only", default=None, help="programs whose name contains one of these (comma-separated)"
    )
    ap.add_argument("--no-commands", action="store_true")
    ap.add_argument(
        "--as-written",
        action="store_true",
        help="compare f32 programs at the text's precision too, not at 'highest' (on a TPU, "
        "XLA compiles the CNN's gradient at highest in minutes)",
    )
    ap.add_argument(
        "--stall-dump",
        type=float,
        default=300.0,
        help="print every thread's stack each this many seconds a row takes (where it stalls; "
        "the rows take up to ~110 s on the v5e, and the dump, read from a watchdog thread "
        "while the row runs, once crashed the process: 2026-12-08)",
    )
    ap.add_argument(
        "--no-cpu-reference",
        dest="cpu_reference",
        action="store_false",
        help="leave out the comparison with JAX on the CPU",
    )
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    dev = backend.get_device(a.device)
    meta = {
        "device": str(getattr(dev, "device_kind", dev.platform)),
        "jax": jax.__version__,
        "date": time.strftime("%Y-%m-%d"),
        "size": a.size,
    }
    print(json.dumps(meta), flush=True)
    (out / "tpu_meta.json").write_text(json.dumps(meta) + "\n")
    table = Table(
        out / "tpu_table.md",
        [
            "program",
            "command",
            "max rel. diff vs JAX (f32: highest)",
            "vs JAX on the CPU: as written / highest",
            "time/call tool/JAX",
            "XLA temp tool / JAX",
            "tool's plan",
            "s",
        ],
    )
    failures = 0
    for name, f, args, argnums, batched in models.cases(a.size):
        if a.only and not any(part in name for part in a.only.split(",")):
            continue
        faulthandler.dump_traceback_later(a.stall_dump, repeat=True)
        try:
            measure(
                name,
                f,
                args,
                argnums,
                batched,
                a.device,
                a.repeat,
                table,
                a.cpu_reference,
                a.as_written,
            )
        except Exception as e:  # noqa: BLE001 - one program's trouble is one row
            failures += 1
            traceback.print_exc()
            table.add(
                [name, "error", f"{type(e).__name__}: {str(e).splitlines()[0][:150]}", "", "", ""]
            )
        finally:
            faulthandler.cancel_dump_traceback_later()
    if not a.no_commands:
        command_line_checks(a.device, out)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
