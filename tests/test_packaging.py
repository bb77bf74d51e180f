"""A non-editable install (a built wheel) carries the grammar and parses without the source tree."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_wheel_carries_grammar_and_parses(tmp_path):
    wheels = tmp_path / "wheels"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(wheels),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = wheels.glob("jaxprtool-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "jaxprtool/grammars/jaxpr.lark" in names
    (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "[pygments.lexers]" in text and "jaxpr = jaxprtool.ui.lexer:JaxprLexer" in text
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--target",
            str(target),
            str(wheel),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    code = (
        "import jaxprtool, sys; assert jaxprtool.__file__.startswith(sys.argv[1]), jaxprtool.__file__\n"
        "from jaxprtool.text.parser import parse\n"
        "from jaxprtool.text.printer import print_jaxpr\n"
        "t = '{ lambda ; a:f32[3]. let b:f32[3] = sin a in (b,) }'\n"
        "assert print_jaxpr(parse(t).jaxpr) == t\n"
        # the Pygments lexer is found through its entry point (pygmentize -l jaxpr, Sphinx)
        "from pygments.lexers import get_lexer_by_name, get_lexer_for_filename\n"
        "assert type(get_lexer_by_name('jaxpr')).__name__ == 'JaxprLexer'\n"
        "assert get_lexer_for_filename('x.jaxpr').name == 'Jaxpr'\n"
    )
    env = {**os.environ, "PYTHONPATH": str(target), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    r = subprocess.run(
        [sys.executable, "-c", code, str(target)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr


def test_make_demo_installs_only_the_tool_and_jax(tmp_path):
    """`make demo` on a fresh machine installs `.[jax]`; the test and zoo extras come with
    `make test` (issue 27).  Read off `make -n` with a venv that does not exist yet."""
    import shutil

    if shutil.which("make") is None:
        pytest.skip("make is not installed")

    def recipe(target):
        r = subprocess.run(
            ["make", "-n", "-C", str(ROOT), target, f"VENV={tmp_path / 'venv'}"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 0, r.stderr
        return [ln for ln in r.stdout.splitlines() if "pip install" in ln]

    demo = recipe("demo")
    assert any("-e '.[jax]'" in ln for ln in demo)
    assert not any("[test" in ln or "zoo]" in ln for ln in demo)
    assert any("-e '.[test,zoo,plot]'" in ln for ln in recipe("test"))
