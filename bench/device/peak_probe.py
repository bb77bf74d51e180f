"""What XLA holds at its peak for the tool's `--remat-budget` plans (issue 48): each plan named
is made as the budget's compile loop makes it (`ad/remat/fit.py`), compiled for the TPU
script's transformer (bench/device/remat_tpu.py's sizes; the scan twin with --scan) from
shapes alone (nothing runs), and reported with XLA's temp bytes; with XLA's dumps on
(XLA_FLAGS or LIBTPU_INIT_ARGS: `--xla_dump_to=DIR --xla_dump_hlo_as_text`), the buffers the
dump's live ranges list at the peak, largest first, and the dump's buffer assignment and
live ranges packed into OUT/peak_dump.tgz with each plan's optimized HLO
(`compiled.as_text()`).

    python3 bench/device/peak_probe.py [--scan] [--dump DIR] [--out OUT] PLAN...

A PLAN is a policy (`nothing_saveable`) or a model budget of the loop's (`0.1615`: the plan
the loop makes at that budget of the liveness model, `model budget 0.1615` in its log).
"""

from __future__ import annotations

import dataclasses
import glob
import io
import os
import re
import sys
import tarfile
from pathlib import Path

import jax

sys.path.insert(0, str(Path(__file__).parent))
import remat_tpu as R  # noqa: E402

#: buffers of the peak said per plan, largest first
SHOWN = 25


def _plans(scan: bool):
    """(build(label) -> the tool's gradient program and its FLOPs, the shapes of its inputs)."""
    from jaxprtool.ad import remat
    from jaxprtool.ad.api import grad_jaxpr
    from jaxprtool.ad.remat.fit import _policy_spec
    from jaxprtool.passes.registry import run_pipeline
    from jaxprtool.text.parser import parse
    from jaxprtool.ui.stats import flops

    ps, x = jax.eval_shape(lambda k: R.init(k, 8, 1024, 512, 8), jax.random.PRNGKey(0))
    model = R.scanned(16) if scan else R.unrolled(16)
    f, leaves = R.flat(model, (jax.eval_shape(R.stack, ps), x) if scan else (ps, x))
    j = parse(str(jax.make_jaxpr(f)(*leaves)), "<bench>").jaxpr
    base = dataclasses.replace(
        remat.with_segments(remat.parse_budget("0.2"), "auto"), value_dropped=True
    )

    def build(label: str):
        if label[0].isdigit():
            s = dataclasses.replace(
                base, budget=float(label), fraction=True, on_device=False, device_model=True
            )
        else:
            s = _policy_spec(base, label)
        g = run_pipeline(grad_jaxpr(j, list(range(len(leaves))), remat=s, plans=[]), "canonicalize")
        return g, flops(g)

    return build, leaves


def _peak(dump: str, before: set[str]) -> list[str]:
    """The lines of the live ranges at the peak of the dump's newest module (files not in
    `before`), largest buffers first."""
    new = sorted(set(glob.glob(os.path.join(dump, "*live-range*"))) - before)
    if not new:
        return ["(no live ranges dumped)"]
    text = Path(new[-1]).read_text()
    m = re.search(r"Live ranges at (\d+) \(peak\):\n((?:    .*\n)+)", text)
    if m is None:
        return [f"(no peak in {Path(new[-1]).name})"]
    rows = []
    for line in m.group(2).splitlines():
        b = re.search(r": (\d+) bytes", line)
        rows.append((int(b.group(1)) if b else 0, line.strip()))
    rows.sort(key=lambda r: -r[0])
    return [f"peak at {m.group(1)} ({Path(new[-1]).name})"] + [r[1] for r in rows[:SHOWN]]


def main(argv: list[str]) -> int:
    scan = "--scan" in argv
    args = [a for a in argv if a != "--scan"]
    out = dump = None
    if "--out" in args:
        k = args.index("--out")
        out, args = args[k + 1], args[:k] + args[k + 2 :]
    if "--dump" in args:
        k = args.index("--dump")
        dump, args = args[k + 1], args[:k] + args[k + 2 :]
    sys.setrecursionlimit(10000)
    print("jax", jax.__version__, jax.devices())
    build, leaves = _plans(scan)
    texts: dict[str, str] = {}
    for label in args:
        g, fl = build(label)
        before = set(glob.glob(os.path.join(dump, "*live-range*"))) if dump else set()
        exe = jax.jit(R.tool_fn(g)).lower(*leaves).compile()
        temp = exe.memory_analysis().temp_size_in_bytes
        print(f"== {label}: XLA temp {temp} B; the tool's FLOPs {fl}", flush=True)
        texts[f"plan_{label}.hlo.txt"] = exe.as_text()
        if dump:
            for line in _peak(dump, before):
                print("   ", line)
    if out:
        with tarfile.open(os.path.join(out, "peak_dump.tgz"), "w:gz") as tar:
            for name, text in texts.items():
                data = text.encode()
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            for p in sorted(glob.glob(os.path.join(dump, "*"))) if dump else ():
                if re.search(r"live-range|memory-usage|buffer-assignment\.txt|after_optim", p):
                    tar.add(p, arcname=os.path.basename(p))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
