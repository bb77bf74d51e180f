"""A folder walk under a `.gitignore` of 300,000 patterns, the tool beside Git.

    .venv/bin/python bench/bench_gitignore.py [--patterns 300000] [--files 2000]

For each kind of pattern (literal names, `*.suffix`, `prefix*` names, `dir/*` paths,
globs with no literal end, and a mix of all), a tree of FILES jaxpr files is walked with a
`.gitignore` of PATTERNS such patterns (some of which match): the CPU time of
`walk.jaxpr_files` (reading the `.gitignore` included) and the wall time of
`git ls-files --others --exclude-standard` on the same tree, and whether both found the same
files.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from jaxprtool.commands.walk import jaxpr_files  # noqa: E402

KINDS = {
    "names": lambda i: f"name{i}.jaxpr",
    "suffixes": lambda i: f"*.x{i}.jaxpr",
    "prefixes": lambda i: f"f{i}_*.jaxpr",
    "paths": lambda i: f"d{i}/*.jaxpr",
    "no literal end": lambda i: f"*q{i}[0-9]*",
}


def mixed(i: int) -> str:
    kinds = list(KINDS.values())
    return kinds[i % len(kinds)](i // len(kinds))


def tree(root: Path, files: int) -> None:
    for k in range(files):
        folder = root / f"d{k % 100}"
        folder.mkdir(exist_ok=True)
        names = (f"name{k}.jaxpr", f"f{k}_a.jaxpr", f"b.x{k}.jaxpr", f"c{k}.jaxpr", f"zq{k}1.jaxpr")
        (folder / names[k % len(names)]).write_text("")


def bench(kind: str, make, patterns: int, files: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        subprocess.run(["git", "init", "-q", str(root)], check=True)
        tree(root, files)
        (root / ".gitignore").write_text("".join(make(i) + "\n" for i in range(patterns)))
        t0 = time.process_time()
        found = jaxpr_files(str(root))
        ours = time.process_time() - t0
        t0 = time.perf_counter()
        out = subprocess.run(
            ["git", "-C", str(root), "ls-files", "-z", "--others", "--exclude-standard"],
            capture_output=True,
            check=True,
        ).stdout
        git_s = time.perf_counter() - t0
        git = sorted(p for p in os.fsdecode(out).split("\0") if p.endswith(".jaxpr"))
        same = sorted(os.path.relpath(p, root) for p in found) == git
        print(
            f"{kind:>15}: {patterns:,} patterns, {files:,} files: tool {ours:6.2f} s CPU, "
            f"git {git_s:5.2f} s; {len(found):,} found, same as git: {same}"
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--patterns", type=int, default=300_000)
    ap.add_argument("--files", type=int, default=2000)
    args = ap.parse_args()
    if shutil.which("git") is None:
        print("git is not installed: nothing to compare with")
        return
    for kind, make in [*KINDS.items(), ("mixed", mixed)]:
        bench(kind, make, args.patterns, args.files)


if __name__ == "__main__":
    main()
