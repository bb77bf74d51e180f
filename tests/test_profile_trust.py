"""`run --profile DIR` when DIR is not the user's to trust (issue 45, item 3): a link
another user planted (DIR itself, DIR/plugins) is refused as `-o` refuses one; the table
comes from this run's trace, never from a stale or planted one that sorts last; the trace
is read up to a bound; a plain file, `/proc/self` or `-` as DIR is refused before the run."""

from __future__ import annotations

import gzip
import json
import os
import re

import pytest
from test_planted_links import OTHER, SIN, needs_root, tool

from jaxprtool.ui import profile_table


def run_profiled(folder, *extra):
    return tool("run", "-", "--random", "0", "--profile", folder, *extra, text=SIN)


def assert_refused_before_the_run(r, message: str) -> None:
    assert r.exit_code == 2, r.output
    assert message in r.stderr, r.stderr
    assert "note: JAX's profiler trace goes to" not in r.output  # (the run did not start)
    assert "Traceback" not in r.output and "internal error" not in r.output


def test_standard_output_is_no_profile_folder():
    r = run_profiled("-")
    assert_refused_before_the_run(r, "--profile needs a folder: '-' (standard output)")


def test_a_plain_file_is_no_profile_folder(tmp_path):
    f = tmp_path / "notes.txt"
    f.write_text("mine\n")
    r = run_profiled(f)
    assert_refused_before_the_run(r, f"cannot write the profile into '{f}': it is not a folder")
    assert f.read_text() == "mine\n"


def test_a_folder_that_cannot_be_written_is_refused_before_the_run():
    r = run_profiled("/proc/self")
    assert_refused_before_the_run(r, "cannot write the profile into '/proc/self': ")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a folder of mode 0500")
def test_a_read_only_folder_is_refused_before_the_run(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir(mode=0o500)
    r = run_profiled(folder)
    assert_refused_before_the_run(r, "Permission denied")


def _shared(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)  # sticky and world-writable, as /tmp
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    return shared, private


@needs_root
def test_a_planted_link_as_the_profile_folder_is_refused(tmp_path):
    shared, private = _shared(tmp_path)
    link = shared / "prof"
    link.symlink_to(private)
    os.lchown(link, OTHER, OTHER)
    r = run_profiled(link)
    assert_refused_before_the_run(r, f"'{link}' is a symbolic link that another user")
    assert list(private.iterdir()) == []


@needs_root
def test_a_planted_plugins_link_in_a_shared_profile_folder_is_refused(tmp_path):
    shared, private = _shared(tmp_path)
    link = shared / "plugins"
    link.symlink_to(private)
    os.lchown(link, OTHER, OTHER)
    r = run_profiled(shared)
    assert_refused_before_the_run(r, f"'{link}' is a symbolic link that another user")
    assert list(private.iterdir()) == []


def _trace(path, events) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": events}, f)


def test_the_table_is_this_runs_never_a_stale_trace_that_sorts_last(tmp_path):
    pytest.importorskip("jax")
    folder = tmp_path / "prof"
    # a trace of every operation name XLA may give this program, 12345678 us each
    names = ["sine", "sin", "sine.1", "sin.1", "fusion", "fusion.1", "copy", "copy.1"]
    stale = [
        {"ph": "X", "name": n, "dur": 12345678, "pid": 1, "tid": 1, "args": {"hlo_op": n}}
        for n in names
    ]
    _trace(folder / "plugins" / "profile" / "9999_12_31_23_59_59" / "h.trace.json.gz", stale)
    r = run_profiled(folder, "--repeat", "3")
    assert r.exit_code == 0, r.output
    assert "12345.678" not in r.stderr and "12345678" not in r.stderr, r.stderr
    rows = re.findall(r"^\s+([\d.]+) ms\s+[\d.]+%\s+(\d+)\s+(\S+)\s+(.*)$", r.stderr, re.M)
    assert rows and all(int(calls) == 3 for _, calls, _, _ in rows), r.stderr
    assert "9999_12_31" not in r.stderr


def test_the_trace_is_read_up_to_a_bound(tmp_path, monkeypatch):
    monkeypatch.setattr(profile_table, "MAX_TRACE_BYTES", 1000)
    path = tmp_path / "bomb.trace.json.gz"
    with gzip.open(path, "wb") as f:
        f.write(b'{"traceEvents": [' + b" " * 10**6 + b"]}")
    hlo = profile_table.read_hlo("HloModule m\n")
    with pytest.raises(profile_table.TraceTooLarge):
        profile_table.op_times(path, hlo)
