"""`make bench`: run every bench/bench_*.py in its own process and print their tables
(bench_ad, bench_parse, bench_print, bench_run, bench_sharded: the last one runs sharded
programs on a mesh of host devices, the tool against jax.jit), zoo_counts.py (the zoo's
gradient equation counts against JAX's), and last bench_targets: the one table of issues 13,
26 and 49's targets, each beside JAX's figure from the same run, met or missed (a missed
target does not fail the run)."""

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    failed = []
    scripts = [*sorted(HERE.glob("bench_*.py")), HERE / "zoo_counts.py"]
    scripts.sort(key=lambda p: p.name == "bench_targets.py")  # the targets' table comes last
    for script in scripts:
        print(f"\n=== {script.name} ===", flush=True)
        t0 = time.perf_counter()
        rc = subprocess.call([sys.executable, str(script)])
        print(f"({script.name}: {time.perf_counter() - t0:.1f} s, exit {rc})", flush=True)
        if rc:
            failed.append(script.name)
    if failed:
        print("failed:", ", ".join(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
