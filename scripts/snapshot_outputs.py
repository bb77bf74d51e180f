"""Write every corpus file's output of the main commands to a folder (for refactors).

    python scripts/snapshot_outputs.py OUT_DIR [--jobs 2]

Compare two snapshots with `diff -r A B`.  Each command runs in-process through click's
test runner; OUT_DIR/<file>/<command>.txt holds the exit code, standard output and
standard error, so a changed error message shows as well as a changed program.
"""

from __future__ import annotations

import os
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS = (
    Path(os.environ.get("JAXPR_FORMAT_DIR", ROOT.parent / "shared" / "jaxpr-format")) / "corpus"
)
COMMANDS = {
    "fmt": ["fmt"],
    "check": ["check"],
    "jvp": ["jvp"],
    "linearize": ["linearize"],
    "vjp": ["vjp"],
    "grad": ["grad"],
    "dce": ["dce"],
    "opt": ["opt", "-p", "inline,simplify,fold,cse,dce"],
    "canonicalize": ["canonicalize"],
    "stats": ["stats", "--json"],
}


def snapshot_one(args: tuple[str, str]) -> str:
    src, out = args
    from click.testing import CliRunner

    from jaxprtool.cli import main

    runner = CliRunner()
    dest = Path(out)
    dest.mkdir(parents=True, exist_ok=True)
    for name, argv in COMMANDS.items():
        r = runner.invoke(main, ["--no-color", *argv, src])
        (dest / f"{name}.txt").write_text(
            f"exit {r.exit_code}\n--- stdout\n{r.stdout}--- stderr\n{r.stderr}", encoding="utf-8"
        )
    return src


def main() -> None:
    out = Path(sys.argv[1])
    jobs = int(sys.argv[sys.argv.index("--jobs") + 1]) if "--jobs" in sys.argv else 2
    files = sorted(CORPUS.rglob("*.jaxpr"))
    work = [(str(f), str(out / f.relative_to(CORPUS))) for f in files]
    with ProcessPoolExecutor(jobs) as pool:
        for i, _ in enumerate(pool.map(snapshot_one, work, chunksize=4)):
            if i % 100 == 0:
                print(f"{i}/{len(work)}", file=sys.stderr)


if __name__ == "__main__":
    main()
