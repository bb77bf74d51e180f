"""How fast this machine runs Python right now: the CPU seconds of a fixed loop (20 million
iterations of integer arithmetic), to set beside a `make test` CPU figure measured at the same
time.  The shared machine's speed moves by up to a third within minutes (docs/PERFORMANCE.md,
issue 49's tenth and eleventh rounds): a CPU figure means little without it.

    python bench/machine_speed.py   # prints e.g. "loop 2.05 CPU-s (wall 2.05 s)"
"""

from __future__ import annotations

import time


def loop_seconds(n: int = 20_000_000) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of the fixed loop."""
    cpu, wall = time.process_time(), time.perf_counter()
    s = 0
    for i in range(n):
        s += i * i % 7
    return time.process_time() - cpu, time.perf_counter() - wall


if __name__ == "__main__":
    cpu, wall = loop_seconds()
    print(f"loop {cpu:.2f} CPU-s (wall {wall:.2f} s)")
