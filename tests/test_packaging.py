"""A non-editable install (a built wheel) carries the grammar and parses without the source tree."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _wheel(folder: Path, env=None, src: Path = ROOT) -> tuple[Path, subprocess.CompletedProcess]:
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(folder),
            str(src),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    (wheel,) = folder.glob("jaxprtool-*.whl")
    return wheel, r


def _wheel_by_backend(folder: Path) -> Path:
    """The wheel pyproject.toml's build backend builds from this checkout, called as pip
    calls it (PEP 517's `build_wheel` hook, in a process of its own, no build isolation)
    without pip's own start (~0.7 CPU-s); `_wheel` builds through pip."""
    import tomllib

    system = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]
    code = "import importlib, sys; print(importlib.import_module(sys.argv[1]).build_wheel(sys.argv[2]))"
    folder.mkdir(parents=True)
    r = subprocess.run(
        [sys.executable, "-c", code, system["build-backend"], str(folder)],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return folder / r.stdout.splitlines()[-1]


#: the installed wheel's modules only: not this checkout's, which its editable install's finder
#: (on sys.meta_path) would give for a module the wheel lacks (`jaxprtool._twin`)
_WHEEL_ONLY = "import sys; sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in getattr(f, '__module__', '')]\n"


def _mkdir(p: Path) -> Path:
    p.mkdir(parents=True)
    return p


def _compiled_twin(names: list[str]) -> list[str]:
    return [n for n in names if n.startswith("jaxprtool/_twin.") and not n.endswith(".c")]


def test_wheel_carries_grammar_and_parses(tmp_path):
    wheel = _wheel_by_backend(tmp_path / "wheels")
    names = zipfile.ZipFile(wheel).namelist()
    assert "jaxprtool/grammars/jaxpr.lark" in names
    # the compiled twin of the per-line loops is built where a C compiler is found
    compiler = shutil.which(os.environ.get("CC", "cc")) is not None
    assert bool(_compiled_twin(names)) == compiler, names
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
            "--no-compile",  # (pip's bytecode of every module: ~0.5 CPU-s, not what is tested)
            "--target",
            str(target),
            str(wheel),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    code = _WHEEL_ONLY + (
        "import jaxprtool, sys; assert jaxprtool.__file__.startswith(sys.argv[1]), jaxprtool.__file__\n"
        "from jaxprtool.text.parser import parse\n"
        "from jaxprtool.text.printer import print_jaxpr\n"
        "t = '{ lambda ; a:f32[3]. let b:f32[3] = sin a in (b,) }'\n"
        "assert print_jaxpr(parse(t).jaxpr) == t\n"
        # the Pygments lexer is found through its entry point (pygmentize -l jaxpr, Sphinx)
        "from pygments.lexers import get_lexer_by_name, get_lexer_for_filename\n"
        "assert type(get_lexer_by_name('jaxpr')).__name__ == 'JaxprLexer'\n"
        "assert get_lexer_for_filename('x.jaxpr').name == 'Jaxpr'\n"
        "from jaxprtool.text import twin\n"
        "print(twin.describe())\n"
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
    assert ("compiled" in r.stdout) == compiler, r.stdout


def test_without_a_compiler_it_installs_and_runs_quietly(tmp_path):
    """No C compiler (CC names none): the wheel builds without the compiled twin, without a
    word, and the tool runs on the Python loops, without a word."""
    env = {**os.environ, "CC": str(tmp_path / "no-such-cc")}
    src = tmp_path / "src"  # (a clean tree: no module built here before, no build/ folder)
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(ROOT / name, src / name if src.is_dir() else _mkdir(src) / name)
    shutil.copytree(ROOT / "jaxprtool", src / "jaxprtool",
                    ignore=shutil.ignore_patterns("*.so", "__pycache__"))  # fmt: skip
    wheel, r = _wheel(tmp_path / "wheels", env, src)
    assert (r.stdout, r.stderr) == ("", "")
    assert _compiled_twin(zipfile.ZipFile(wheel).namelist()) == []
    target = tmp_path / "site"
    with zipfile.ZipFile(wheel) as z:
        z.extractall(target)
    env = {**os.environ, "PYTHONPATH": str(target), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    env.pop("JAXPRTOOL_PURE_PYTHON", None)
    text = "{ lambda ; a:f32[3]. let b:f32[3] = sin a; c:f32[3] = cos b in (c,) }\n"
    run = [sys.executable, "-c", _WHEEL_ONLY + "from jaxprtool.cli import entry; entry()"]
    r = subprocess.run([*run, "fmt", "-"], input=text, env=env, cwd=tmp_path,
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert (r.returncode, r.stdout, r.stderr) == (0, text, "")
    r = subprocess.run([*run, "--version"], env=env, cwd=tmp_path, capture_output=True,
                       text=True, timeout=120)  # fmt: skip
    assert "reader and printer: pure Python (the compiled module" in r.stdout, r.stdout


def test_make_demo_installs_only_the_tool_and_jax(tmp_path):
    """`make demo` on a fresh machine installs `.[jax]`; the test and zoo extras come with
    `make test` (issue 27).  Read off `make -n` with a venv that does not exist yet (and the
    interpreters named: make looks for none, ~0.2 CPU-s of probes a call)."""
    import shutil

    if shutil.which("make") is None:
        pytest.skip("make is not installed")

    def recipe(target):
        r = subprocess.run(
            ["make", "-n", "-C", str(ROOT), target, f"VENV={tmp_path / 'venv'}"]
            + [f"PYTHON={sys.executable}", "FLOOR_PYTHON=python3.11"],
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
