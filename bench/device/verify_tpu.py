"""check-grad and explain of the TPU script's transformer on a device (issue 46, item 4).

    python3 bench/device/verify_tpu.py --device tpu --size full --out OUT

The transformer of `models.py` (`--size full`: 8 layers, width 1024, 512 tokens, batch 8;
`small`: a CPU smoke run) is traced to a jaxpr, then `check-grad --device DEVICE --json`
and `explain --device DEVICE` run on it at their own random point (drawn as the program
needs it: its weights scaled by their fan-in), in-process, the finite differences on the
CPU.  OUT/verify_tpu.md gets one row per command: exit status, wall seconds and the
verdicts (check-grad: each check's error, tolerance, result and where it was judged, and
the program's own precision; explain: its last lines).  Exit 0 when no check FAILed and
both commands finished."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import jax  # noqa: E402
import models  # noqa: E402


def transformer_text(size: str) -> tuple[str, str]:
    """(name, jaxpr text) of the models' transformer at `size`."""
    name, f, args, _, _ = next(c for c in models.cases(size) if c[0].startswith("transformer L"))
    return name, str(jax.make_jaxpr(f)(*args)) + "\n"


def invoke(argv: list[str]) -> tuple[int, str, float]:
    from click.testing import CliRunner

    from jaxprtool.cli import main

    t0 = time.perf_counter()
    r = CliRunner().invoke(main, ["--no-color", *argv])
    return r.exit_code, r.output, time.perf_counter() - t0


def check_grad_rows(device: str, path: str) -> tuple[list[str], bool]:
    code, out, wall = invoke(["check-grad", path, "--device", device, "--json"])
    print(f"check-grad: exit {code} in {wall:.0f} s", flush=True)
    start = out.find("{\n")
    if start < 0:  # an error: its text
        return [f"| check-grad | exit {code} | {wall:.0f} s | {out.strip()[-300:]} |"], False
    doc = json.loads(out[start:])
    rows = []
    for c in doc["files"][0]["checks"]:
        own = "-" if c["own_error"] is None else f"{c['own_error']:.1e}"
        err = "-" if c["error"] is None else f"{c['error']:.2e}"
        rows.append(
            f"| check-grad: {c['check']} | exit {code} | {wall:.0f} s | {err} (tol "
            f"{c['tolerance']:.0e}) {c['result']}; judged in {c['judged_in']}; own vs f64 {own} |"
        )
    ok = code == 0 and all("FAIL" not in c["result"] for c in doc["files"][0]["checks"])
    return rows, ok


def explain_rows(device: str, path: str) -> tuple[list[str], bool]:
    code, out, wall = invoke(["explain", path, "--device", device])
    print(f"explain: exit {code} in {wall:.0f} s", flush=True)
    last = " / ".join(ln.strip() for ln in out.strip().splitlines()[-6:])
    return [f"| explain | exit {code} | {wall:.0f} s | {last[:400]} |"], code == 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="tpu")
    ap.add_argument("--size", default="full", choices=sorted(models.SIZES))
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--only", choices=["check-grad", "explain"], default=None)
    a = ap.parse_args()
    name, text = transformer_text(a.size)
    rows, ok = [], True
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "transformer.jaxpr")
        Path(path).write_text(text)
        print(f"{name}: {text.count(chr(10))} lines", flush=True)
        for what, fn in (("check-grad", check_grad_rows), ("explain", explain_rows)):
            if a.only in (None, what):
                more, good = fn(a.device, path)
                print("\n".join(more), flush=True)  # (kept should a later command be cut off)
                rows += more
                ok &= good
    table = "| command | exit | wall | verdict |\n| --- | --- | --- | --- |\n" + "\n".join(rows)
    out = Path(a.out) / "verify_tpu.md"
    out.write_text(f"# {name} on {a.device} (issue 46)\n\n{table}\n")
    print(table)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
