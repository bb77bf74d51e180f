"""Links another user planted on the path of an output (issue 45, item 4): `-o
/shared/outdir/x.jaxpr`, where `outdir` is another user's link in a sticky folder, is refused
as a link at the final component is (exit 2, nothing written through it), for `-o`, npy-dir
output, `--output-file` and `--html`; the user's own link on the way is followed.

The second user is uid 65534 (nobody): links are given to it with lchown, which needs root;
those tests skip, saying so, where the tests do not run as root.
"""

from __future__ import annotations

import os

import pytest
from click.testing import CliRunner

from jaxprtool.cli import main

OTHER = 65534  # nobody
SIN = "{ lambda ; a:f32[3]. let b:f32[3] = sin a in (b,) }\n"
needs_root = pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0,
    reason="needs root to give a planted link to a second user (uid 65534)",
)


def tool(*argv, text: str | None = None):
    return CliRunner().invoke(main, ["--no-color", *map(str, argv)], input=text)


def shared_with_link(tmp_path, owner: int | None):
    """(shared sticky folder, the link `outdir` in it, the private folder it points to)."""
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)  # sticky and world-writable, as /tmp
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    link = shared / "outdir"
    link.symlink_to(private)
    if owner is not None:
        os.lchown(link, owner, owner)
    return shared, link, private


def assert_refused(r, link, private) -> None:
    assert r.exit_code == 2, r.output
    assert f"'{link}' is a symbolic link that another user (uid {OTHER}) made" in r.output
    assert "Traceback" not in r.output
    assert list(private.iterdir()) == []


@needs_root
def test_output_through_a_planted_folder_link(tmp_path):
    _, link, private = shared_with_link(tmp_path, OTHER)
    r = tool("fmt", "-", "-o", link / "x.jaxpr", text=SIN)
    assert_refused(r, link, private)


@needs_root
def test_output_through_a_planted_link_deeper_on_the_way(tmp_path):
    _, link, private = shared_with_link(tmp_path, OTHER)
    (private / "sub").mkdir()
    r = tool("fmt", "-", "-o", link / "sub" / "x.jaxpr", text=SIN)
    assert r.exit_code == 2, r.output
    assert list((private / "sub").iterdir()) == []


@needs_root
def test_output_file_through_a_planted_folder_link(tmp_path):
    _, link, private = shared_with_link(tmp_path, OTHER)
    r = tool("check", "-", "--output-format", "json", "--output-file", link / "d.json", text=SIN)
    assert_refused(r, link, private)


@needs_root
def test_npy_dir_output_through_a_planted_folder_link(tmp_path):
    _, link, private = shared_with_link(tmp_path, OTHER)
    r = tool("run", "-", "--random", "0", "--output-format", "npy-dir", "-o", link / "o", text=SIN)
    assert_refused(r, link, private)


@needs_root
def test_html_through_a_planted_folder_link(tmp_path):
    _, link, private = shared_with_link(tmp_path, OTHER)
    r = tool("explain", "-", "--html", link / "p.html", text=SIN)
    assert_refused(r, link, private)


def test_the_users_own_folder_link_is_followed(tmp_path):
    _, link, private = shared_with_link(tmp_path, None)
    r = tool("fmt", "-", "-o", link / "x.jaxpr", text=SIN)
    assert r.exit_code == 0, r.output
    assert (private / "x.jaxpr").read_text() == SIN
