"""`--split-input-file` on many small programs: time and peak memory of `check
--split-input-file` and `fmt --check` (which splits a file with `# -----` lines unasked).

    .venv/bin/python bench/bench_split.py [--parts 80000] [--timeout 300]

The reported case (issue 45, item 7): 80,000 one-line programs (4.6 MB).  Each part was
padded with one newline per line before it, so memory grew as parts times lines (4.3 GB in
11 s, then a MemoryError); a part is now read on its own and its locations moved to the
file's lines.  Every run is a fresh process; CPU time and peak RSS come from wait4(2).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_pathological import run_one  # noqa: E402

ONE_LINE = "{ lambda ; a:f32[3]. let b:f32[3] = sin a in (b,) }\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts", type=int, default=80_000)
    ap.add_argument("--timeout", type=float, default=300.0)
    a = ap.parse_args()
    text = "# -----\n".join([ONE_LINE] * a.parts)
    bad = 0
    print(f"{a.parts} one-line programs, {len(text) / 1e6:.1f} MB")
    print(f"{'command':32s} {'exit':>4s} {'wall s':>7s} {'cpu s':>7s} {'MB':>6s}")
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "parts.jaxpr")
        Path(path).write_text(text)
        for cmd in (["check", "--split-input-file"], ["fmt", "--check"]):
            code, dt, cpu, mb, first = run_one(cmd, path, a.timeout)
            bad += code != 0
            shown = "TIME" if code is None else str(code)
            print(f"{' '.join(cmd):32s} {shown:>4s} {dt:7.2f} {cpu:7.2f} {mb:6.0f}  {first[:60]}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
