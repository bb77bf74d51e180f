"""Files and code that are not the user's (issue 37, items 1 to 4): each test plants the
attack - a module in the working folder, bytecode beside a plugin, a link or a file of another
user's, an edit saved while the tool runs - and checks that the tool neither runs it, follows
it nor overwrites it.

The second user is uid 65534 (nobody): files are given to it with chown, which needs root;
those tests skip, saying so, where the tests do not run as root.
"""

from __future__ import annotations

import importlib.util
import os
import py_compile
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from jaxprtool.cli import main

ROOT = Path(__file__).resolve().parents[1]
OTHER = 65534  # nobody
SIN = "{ lambda ; a:f32[3]. let b:f32[3] = sin a in (b,) }\n"
SIN_WIDE = "{ lambda ; a:f32[3].\n  let b:f32[3] = sin a in (b,) }\n"  # not in canonical form
needs_root = pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0,
    reason="needs root to give a planted file to a second user (uid 65534)",
)


def tool(*argv, text: str | None = None):
    return CliRunner().invoke(main, ["--no-color", *map(str, argv)], input=text)


# ---------------------------------------------------------------- 1. the working folder


#: a `numpy.py` planted in the working folder: if imported, it leaves PLANTED_RAN beside itself
PLANTED_NUMPY = (
    "import pathlib\n"
    "pathlib.Path(__file__).with_name('PLANTED_RAN').write_text('x')\n"
    "raise ImportError('planted')\n"
)


# (make test-full; test_run_refusals.py's test_a_distributed_run_that_cannot_form_is_an_error_
# naming_what_did_not_answer keeps it: its process 1 runs in a folder holding PLANTED_NUMPY)
@pytest.mark.slow
def test_a_supervised_run_never_imports_a_module_from_the_working_folder(tmp_path):
    """`run --coordinator` restarts itself in a child process: a `numpy.py` in the working
    folder must not run there (it did with `python -m jaxprtool`)."""
    (tmp_path / "numpy.py").write_text(PLANTED_NUMPY)
    (tmp_path / "sin.jaxpr").write_text(SIN)
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env.update(JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-P", "-m", "jaxprtool", "--no-color", "run", "sin.jaxpr"]
    cmd += ["--random", "0", "--coordinator", "127.0.0.1:1", "--num-processes", "2"]
    cmd += ["--process-id", "1", "--join-timeout", "1"]
    r = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert not (tmp_path / "PLANTED_RAN").exists(), r.stderr
    assert r.returncode == 1 and "cannot join the distributed run" in r.stderr, r.stderr


# ---------------------------------------------------------------- 2. plugins


PLUGIN = "import os\nos.environ['JAXPRTOOL_TEST_PLUGIN'] = 'source'  # padded to 64\n"
EVIL = "import os\nos.environ['JAXPRTOOL_TEST_PLUGIN'] = 'bytecode'"


def _plugin_with_planted_bytecode(folder: Path) -> Path:
    """A plugin whose `__pycache__` holds bytecode of other code that Python's import
    machinery would take as current (the same size and modification time as the source)."""
    plugin = folder / "rules.py"
    evil = EVIL.ljust(len(PLUGIN) - 1) + "\n"  # the same size as PLUGIN
    assert len(evil) == len(PLUGIN)
    plugin.write_text(evil)
    os.utime(plugin, (1_700_000_000, 1_700_000_000))
    cache = py_compile.compile(str(plugin), doraise=True)
    plugin.write_text(PLUGIN)
    os.utime(plugin, (1_700_000_000, 1_700_000_000))
    assert Path(cache).exists()
    return plugin


def test_a_plugin_runs_from_its_source_never_from_planted_bytecode(tmp_path, monkeypatch):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)  # sticky and world-writable, as /tmp
    plugin = _plugin_with_planted_bytecode(shared)
    monkeypatch.delenv("JAXPRTOOL_TEST_PLUGIN", raising=False)
    r = tool("--plugin", plugin, "fmt", "-", text=SIN)
    assert r.exit_code == 0, r.output
    assert os.environ.get("JAXPRTOOL_TEST_PLUGIN") == "source"
    pycache = sorted(p.name for p in (shared / "__pycache__").iterdir())
    assert pycache == [Path(importlib.util.cache_from_source(str(plugin))).name]


@pytest.mark.parametrize(
    "plant, why",
    [
        (lambda p: os.chmod(p, 0o666), "the file can be written by others (mode 0666)"),
        (lambda p: os.chmod(p.parent, 0o777), "its folder can be written by others (mode 0777)"),
    ],
    ids=["file", "folder"],
)
def test_a_plugin_others_can_write_is_refused(tmp_path, plant, why):
    plugin = tmp_path / "rules.py"
    plugin.write_text(PLUGIN)
    plant(plugin)
    r = tool("--plugin", plugin, "fmt", "-", text=SIN)
    assert r.exit_code == 1
    assert f"cannot load plugin '{plugin}': {why}; a plugin runs as you" in r.output


@needs_root
def test_a_plugin_of_another_user_is_refused(tmp_path):
    plugin = tmp_path / "rules.py"
    plugin.write_text(PLUGIN)
    os.chown(plugin, OTHER, OTHER)
    r = tool("--plugin", plugin, "fmt", "-", text=SIN)
    assert r.exit_code == 1
    assert f"the file belongs to another user (uid {OTHER})" in r.output


# ---------------------------------------------------------------- 3. where -o writes


@needs_root
def test_output_never_follows_a_link_another_user_planted_in_a_sticky_folder(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    mine = tmp_path / "private.txt"
    mine.write_text("secret\n")
    os.chmod(mine, 0o600)
    link = shared / "out.jaxpr"
    link.symlink_to(mine)
    os.lchown(link, OTHER, OTHER)
    r = tool("fmt", "-", "-o", link, text=SIN)
    assert r.exit_code == 2
    assert f"'{link}' is a symbolic link that another user (uid {OTHER}) made" in r.output
    assert mine.read_text() == "secret\n" and link.is_symlink()


def test_output_follows_the_users_own_link_in_a_sticky_folder(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    target = tmp_path / "target.jaxpr"
    (shared / "out.jaxpr").symlink_to(target)
    r = tool("fmt", "-", "-o", shared / "out.jaxpr", text=SIN)
    assert r.exit_code == 0, r.output
    assert target.read_text() == SIN


@needs_root
def test_output_never_replaces_another_users_file(tmp_path):
    theirs = tmp_path / "theirs.jaxpr"
    theirs.write_text("theirs\n")
    os.chown(theirs, OTHER, OTHER)
    r = tool("fmt", "-", "-o", theirs, text=SIN)
    assert r.exit_code == 2
    assert f"it belongs to another user (uid {OTHER}): not replaced" in r.output
    assert theirs.read_text() == "theirs\n" and theirs.stat().st_uid == OTHER


def test_output_never_carries_set_id_bits(tmp_path):
    out = tmp_path / "out.jaxpr"
    out.write_text("old\n")
    os.chmod(out, 0o6755)
    r = tool("fmt", "-", "-o", out, text=SIN)
    assert r.exit_code == 0, r.output
    assert out.read_text() == SIN
    assert stat.S_IMODE(out.stat().st_mode) == 0o755


# ---------------------------------------------------------------- 4. fmt -i


def test_fmt_in_place_refuses_a_read_only_file(tmp_path):
    f = tmp_path / "f.jaxpr"
    f.write_text(SIN_WIDE)
    os.chmod(f, 0o444)
    r = tool("fmt", "-i", f)
    assert r.exit_code != 0
    assert "it is read-only (mode 0444)" in r.output
    assert f.read_text() == SIN_WIDE


def test_fmt_in_place_leaves_an_edit_saved_while_it_ran(tmp_path, monkeypatch):
    """The file is edited between its reading and its replacement: the edit stays."""
    from jaxprtool.commands import text_cmds

    f = tmp_path / "f.jaxpr"
    f.write_text(SIN_WIDE)
    formatted = text_cmds._formatted

    def edit_while_formatting(*args):
        f.write_text(SIN_WIDE + "# the user's edit\n")
        return formatted(*args)

    monkeypatch.setattr(text_cmds, "_formatted", edit_while_formatting)
    r = tool("fmt", "-i", f)
    assert r.exit_code != 0
    assert "it changed while it was being formatted; not replaced" in r.output
    assert f.read_text() == SIN_WIDE + "# the user's edit\n"


def test_fmt_in_place_removes_temporary_files_a_killed_run_left(tmp_path):
    f = tmp_path / "f.jaxpr"
    f.write_text(SIN_WIDE)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f".jaxprtool-{dead.pid}-abc123.tmp"
    stale.write_text("half")
    live = tmp_path / f".jaxprtool-{os.getpid()}-def456.tmp"  # a run still going
    live.write_text("busy")
    other = tmp_path / "notes.tmp"
    other.write_text("mine")
    r = tool("fmt", "-i", f)
    assert r.exit_code == 0, r.output
    assert not stale.exists() and live.exists() and other.exists()
    assert f.read_text() == SIN


def test_sigterm_while_writing_leaves_no_temporary_file(tmp_path):
    """A SIGTERM that arrives while the output is being written removes the temporary file
    and still ends the process by the signal."""
    script = (
        "import os, signal, sys\n"
        "from jaxprtool import io\n"
        "real = os.replace\n"
        "def slow_replace(a, b):\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    real(a, b)\n"
        "io.os.replace = slow_replace\n"
        "io.write_output('text', sys.argv[1])\n"
    )
    out = tmp_path / "out.jaxpr"
    r = subprocess.run(
        [sys.executable, "-P", "-c", script, str(out)],
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        capture_output=True,
        timeout=60,
    )
    assert r.returncode == -signal.SIGTERM, r.stderr
    assert sorted(os.listdir(tmp_path)) == []  # (the process has ended: nothing is pending)


@pytest.mark.parametrize("value", ["abc", "1,2", "99,98", ""])
def test_a_supervised_fds_value_set_by_hand_is_one_line_and_exit_2(tmp_path, monkeypatch, value):
    """JAXPRTOOL_SUPERVISED_FDS is run --coordinator's own: a value that names no two pipes
    of this process is refused in one line (it gave a silent exit 1, or the join's bytes on
    standard output before the JSON: issue 37, item 15)."""
    (tmp_path / "sin.jaxpr").write_text(SIN)
    monkeypatch.setenv("JAXPRTOOL_SUPERVISED_FDS", value)
    argv = ["run", tmp_path / "sin.jaxpr", "--random", "0", "--coordinator", "127.0.0.1:1"]
    r = tool(*argv, "--num-processes", "2", "--process-id", "1", "--join-timeout", "1")
    assert r.exit_code == 2, r.output
    assert r.output.startswith(f"error: JAXPRTOOL_SUPERVISED_FDS={value!r}: this variable is set")
    assert len(r.output.strip().splitlines()) == 1


@pytest.mark.parametrize("where", ["file", "stdout", "special"])
@pytest.mark.parametrize("text", ["ab\n" * 700_000, "ab\n" * 700_000 + "é\n", "x\n"])
def test_written_text_is_its_utf8_bytes(tmp_path, capfdbinary, where, text):
    """A text longer than a written piece (ASCII, written a piece at a time) or not ASCII
    (encoded at once) reaches a file, standard output or a special file as its UTF-8 bytes."""
    from jaxprtool import io

    if where == "file":
        io.write_output(text, str(tmp_path / "out.jaxpr"))
        got = (tmp_path / "out.jaxpr").read_bytes()
    elif where == "stdout":
        io.write_output(text, None)
        got = capfdbinary.readouterr().out
    else:
        fifo = tmp_path / "fifo"
        os.mkfifo(fifo)
        import threading

        box = []
        reader = threading.Thread(target=lambda: box.append(fifo.read_bytes()))
        reader.start()
        io.write_output(text, str(fifo))
        reader.join(timeout=60)
        got = box[0]
    assert got == text.encode("utf-8")
