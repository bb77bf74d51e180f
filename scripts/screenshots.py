"""The pictures in docs/screenshots/, of the demo program (samples/mlp.jaxpr), as a headless
chromium shows them: `explain --html` (grad mode), `graph -o f.svg`, `memory --plot f.svg`.

    PYTHONPATH=$PWD .venv/bin/python scripts/screenshots.py

Needs selenium, chromium and chromedriver (tests/headless.py), Graphviz's `dot` and
matplotlib; tests/test_browser.py checks the same pages.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from click.testing import CliRunner

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import headless  # noqa: E402

from jaxprtool.cli import main  # noqa: E402

SAMPLE = "samples/mlp.jaxpr"  # (relative: the pages show this name)
OUT = ROOT / "docs" / "screenshots"
PAGES = {
    "explain.png": (["explain", SAMPLE, "--mode", "grad", "--html"], "explain.html"),
    "graph.png": (["graph", SAMPLE, "-o"], "graph.svg"),
    "memory.png": (["memory", "--of", "grad", "--no-xla", SAMPLE, "--plot"], "memory.svg"),
}


def main_() -> None:
    driver = headless.start(1200, 900)
    if isinstance(driver, str):
        sys.exit(driver)
    OUT.mkdir(parents=True, exist_ok=True)
    os.chdir(ROOT)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for png, (args, page) in PAGES.items():
                path = Path(tmp) / page
                r = CliRunner().invoke(main, ["--no-color", *args, str(path)])
                if r.exit_code != 0:
                    sys.exit(f"{' '.join(args)}: {r.output}")
                driver.get(path.as_uri())
                driver.save_screenshot(str(OUT / png))
                print(OUT / png)
    finally:
        driver.quit()


if __name__ == "__main__":
    main_()
