"""`.gitignore` files read as Git reads them (issue 45, item 1): a folder walk finds exactly
the jaxpr files `git ls-files --others --exclude-standard` lists, on a table of trees (Git is
the oracle), and a hostile `.gitignore` is refused at its place, quickly."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from click.testing import CliRunner

from jaxprtool.cli import main
from jaxprtool.commands import gitignore
from jaxprtool.commands.walk import jaxpr_files

SIN = "{ lambda ; a:f32[3]. let b:f32[3] = sin a in (b,) }\n"

#: (the `.gitignore` files: folder -> bytes, the jaxpr files of the tree)
SCENARIOS = {
    "star_then_keep": (
        {"": b"build/*\n!build/keep.jaxpr\n"},
        ["build/keep.jaxpr", "build/o.jaxpr", "build/sub/keep.jaxpr", "a.jaxpr"],
    ),
    "starstar_then_keep": (
        {"": b"build/**\n!build/keep.jaxpr\n"},
        ["build/keep.jaxpr", "build/o.jaxpr", "build/sub/keep.jaxpr"],
    ),
    "folder_then_back": (
        {"": b"x/*\n!x/y\n"},
        ["x/y/a.jaxpr", "x/z/a.jaxpr", "x/a.jaxpr", "x/y.jaxpr"],
    ),
    "negated_folder": (
        {"": b"*.jaxpr\n!foo/\n"},
        ["foo/a.jaxpr", "a.jaxpr", "bar/foo/b.jaxpr"],
    ),
    "posix_classes": (
        {"": b"[[:upper:]]*.jaxpr\n[[:digit:]x].jaxpr\n[![:alpha:]]?.jaxpr\n"},
        ["A.jaxpr", "b.jaxpr", "d/Q.jaxpr", "7.jaxpr", "x.jaxpr", "y.jaxpr", "_z.jaxpr"],
    ),
    "anchored_and_folder_only": (
        {"": b"/top\nany/\nlit.jaxpr/\n"},
        ["top/a.jaxpr", "src/top/b.jaxpr", "src/any/c.jaxpr", "any.jaxpr", "lit.jaxpr"],
    ),
    "starstar_middle": (
        {"": b"a/**/b\n"},
        ["a/b/x.jaxpr", "a/x/y/b/z.jaxpr", "a/c/x.jaxpr", "q/a/b/x.jaxpr"],
    ),
    "under_an_ignored_folder": (
        {"": b"**/gen/\n!**/gen/keep.jaxpr\n!gen.jaxpr\n"},
        ["gen/a.jaxpr", "x/gen/keep.jaxpr", "gen.jaxpr"],
    ),
    "deeper_file_wins": (
        {"": b"*.jaxpr\n!sub/\n", "sub": b"!keep.jaxpr\n/own.jaxpr\n"},
        ["sub/keep.jaxpr", "sub/x.jaxpr", "top.jaxpr", "sub/d/keep.jaxpr", "sub/d/own.jaxpr"],
    ),
    "line_syntax": (
        {"": b"#c.jaxpr\n\\#h.jaxpr\nt.jaxpr   \nr.jaxpr\r\n\\!bang.jaxpr\ne\\ .jaxpr\\ \n"},
        ["c.jaxpr", "#h.jaxpr", "t.jaxpr", "r.jaxpr", "!bang.jaxpr", "e .jaxpr "[:-1]],
    ),
    "malformed_patterns": (
        {"": b"[a.jaxpr\n[[:nope:]].jaxpr\nback\\\nb[]]c.jaxpr\n[z-a]?.jaxpr\n"},
        ["[a.jaxpr", "a.jaxpr", "b]c.jaxpr", "zq.jaxpr", "qq.jaxpr"],
    ),
    "stars": (
        {"": b"d*r/\ns[a-c]b*\na*b*c*d.jaxpr\n**/x/**/y\n"},
        ["dxr/q.jaxpr", "door/q.jaxpr", "sab1.jaxpr", "sdb.jaxpr", "axbxcxd.jaxpr", "x/k/y.jaxpr"],
    ),
    "odd_lines": (
        {"": b"\xef\xbb\xbffirst.jaxpr\nfoo//\n/\n!\nnul\x00.jaxpr\n**/\n"},
        ["first.jaxpr", "foo/a.jaxpr", "nul", "nul.jaxpr", "top.jaxpr"],
    ),
}


def _tree(root, files: dict, paths: list[str]) -> None:
    for folder, text in files.items():
        (root / folder).mkdir(parents=True, exist_ok=True)
        (root / folder / ".gitignore").write_bytes(text)
    for p in paths:
        (root / p).parent.mkdir(parents=True, exist_ok=True)
        (root / p).write_text(SIN)


def test_the_table_has_fifty_cases():
    assert sum(len(paths) for _, paths in SCENARIOS.values()) >= 50


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_a_folder_walk_finds_what_git_lists(tmp_path, name):
    if shutil.which("git") is None:
        pytest.skip("git is the oracle: not installed")
    files, paths = SCENARIOS[name]
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    _tree(tmp_path, files, paths)
    listed = subprocess.run(
        ["git", "-C", str(tmp_path), "ls-files", "-z", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    ).stdout
    git = sorted(p for p in os.fsdecode(listed).split("\0") if p.endswith(".jaxpr"))
    found = sorted(os.path.relpath(p, tmp_path) for p in jaxpr_files(str(tmp_path)))
    assert found == git


def test_walking_an_ignored_folder_finds_nothing_in_it(tmp_path):
    """`check build/`, build being ignored: as `git ls-files -o --exclude-standard build/`."""
    (tmp_path / ".git").mkdir()
    _tree(tmp_path, {"": b"build/\n"}, ["build/sub/a.jaxpr"])
    assert jaxpr_files(str(tmp_path / "build" / "sub")) == []


def invoke(*argv):
    return CliRunner().invoke(main, ["--no-color", *map(str, argv)])


def test_a_huge_sparse_gitignore_is_refused_at_its_place(tmp_path):
    with open(tmp_path / ".gitignore", "wb") as f:
        f.truncate(3 * 2**30)  # 3 GB of NUL bytes, on no disk
    (tmp_path / "a.jaxpr").write_text(SIN)
    r = invoke("check", tmp_path)
    assert r.exit_code == 1, r.output
    assert r.stderr.startswith(
        f"{tmp_path / '.gitignore'}:1:1: error: a .gitignore larger than 32 MiB, the most read"
    )
    assert "Traceback" not in r.output and "MemoryError" not in r.output


def test_too_many_patterns_are_refused_at_the_line(tmp_path, monkeypatch):
    monkeypatch.setattr(gitignore, "MAX_PATTERNS", 3)
    (tmp_path / ".gitignore").write_text("# four\na\n\nb\nc\nd\ne\n")
    (tmp_path / "a.jaxpr").write_text(SIN)
    r = invoke("check", tmp_path)
    assert r.exit_code == 1, r.output
    assert f"{tmp_path / '.gitignore'}:6:1: error: more than 3 patterns" in r.stderr


def test_a_gitignore_that_is_a_link_or_a_fifo_is_not_read(tmp_path):
    """Git reads neither (a FIFO would hang the walk; a link may point anywhere)."""
    (tmp_path / "elsewhere").write_text("*.jaxpr\n")
    os.symlink(tmp_path / "elsewhere", tmp_path / ".gitignore")
    (tmp_path / "sub").mkdir()
    os.mkfifo(tmp_path / "sub" / ".gitignore")
    for p in ("a.jaxpr", "sub/b.jaxpr"):
        (tmp_path / p).write_text(SIN)
    r = invoke("check", tmp_path)
    assert r.exit_code == 0, r.output
    assert r.stderr.count("warning: skipped") == 2, r.stderr
    assert "Too many levels of symbolic links" in r.stderr
    assert "not a regular file" in r.stderr
