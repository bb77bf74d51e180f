"""`run` refuses what it cannot do before doing it (issue 22, items 3 to 5): distributed runs
that cannot form, sizes beyond the program's types or the memory limit, and what a terminal
or a script sees (escaped control bytes, exit codes, output paths).

Each test checks the exact message and exit status: 1 with a message for a finding about
the input, 2 for usage, never a traceback, an abort or an internal error.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from jaxprtool.cli import main

ROOT = Path(__file__).resolve().parents[1]
SIN = "{ lambda ; a:f32[3]. let b:f32[3] = sin a in (b,) }\n"


def tool(*argv, text: str | None = None):
    return CliRunner().invoke(main, ["--no-color", *map(str, argv)], input=text)


def error_line(r) -> str:
    return next(line for line in r.stderr.splitlines() if "error:" in line)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------- 3. distributed runs


def _join(tmp_path, pid: int, nproc: int, port: int) -> subprocess.Popen:
    prog = tmp_path / "sin.jaxpr"
    prog.write_text(SIN)
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env.update(JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-m", "jaxprtool", "--no-color", "run", str(prog), "--random", "0"]
    cmd += ["--coordinator", f"127.0.0.1:{port}", "--num-processes", str(nproc)]
    cmd += ["--process-id", str(pid), "--join-timeout", "2"]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_a_distributed_run_that_cannot_form_is_an_error_naming_what_did_not_answer(tmp_path):
    """Process 1 with no coordinator listening, and process 0 of 3 whose peers never start:
    each exits 1 within --join-timeout (plus JAX's start), with one line naming the
    coordinator, its process id and what did not answer, and no abort or stack dump."""
    t0 = time.monotonic()
    procs = [_join(tmp_path, 1, 2, _free_port()), _join(tmp_path, 0, 3, _free_port())]
    outs = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=60)
            outs.append((p.returncode, out.decode(), err.decode()))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert time.monotonic() - t0 < 60
    (rc1, out1, err1), (rc0, out0, err0) = outs
    assert (rc1, rc0, out1, out0) == (1, 1, "", "")
    for err in (err1, err0):
        assert len(err.splitlines()) == 1, err  # no XLA log, no stack dump
        assert "Check failure" not in err and "Traceback" not in err
    assert err1.startswith("error: cannot join the distributed run at 127.0.0.1:") and err1.split(
        " (process 1 of 2): ", 1
    )[1].startswith(
        "the coordinator (process 0) did not answer within 2 s; start process 0 with the "
        "same --coordinator and --num-processes first, check the host and port, or raise "
        "--join-timeout (JAX: DEADLINE_EXCEEDED"
    )
    assert err0.split(" (process 0 of 3): ", 1)[1].startswith(
        "this process hosts the coordinator, and processes 1 to 2 did not join within 2 s; "
        "start every process with the same --coordinator and --num-processes, or raise "
        "--join-timeout (JAX: DEADLINE_EXCEEDED"
    )


@pytest.mark.parametrize(
    "address", ["127.0.0.1:0", "127.0.0.1:65536", "127.0.0.1:1\n", "host", ":80", "a b:80"]
)
def test_a_bad_coordinator_address_is_a_usage_error(address):
    r = tool("run", "-", "--random", "0", "--coordinator", address, "--num-processes", "2",
             "--process-id", "0", text=SIN)  # fmt: skip
    assert r.exit_code == 2
    assert f"bad --coordinator {address!r}: expected HOST:PORT with a port from 1 to 65535" in (
        r.output
    )


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--devices", "4096"], "Invalid value for '--devices': 4096 is not in the range 1<=x<=1024."),
        (["--devices", "100000"], "Invalid value for '--devices': 100000 is not in the range 1<=x<=1024."),
        (
            ["--coordinator", "127.0.0.1:1234", "--process-id", "0", "--num-processes", str(10**9)],
            f"Invalid value for '--num-processes': {10**9} is not in the range 1<=x<=4096.",
        ),
        (["--mesh", f"x={10**9}"], f"bad --mesh 'x={10**9}': {10**9} devices; at most 65536"),
        (["--mesh", "x=512,y=512"], "bad --mesh 'x=512,y=512': 262144 devices; at most 65536"),
        (["--coordinator", "127.0.0.1:1234", "--process-id", "0", "--num-processes", "2",
          "--join-timeout", "0"], "Invalid value for '--join-timeout': 0 is not in the range"),
    ],
)  # fmt: skip
def test_device_and_process_counts_are_bounded(argv, message):
    r = tool("run", "-", "--random", "0", *argv, text=SIN)
    assert r.exit_code == 2 and message in r.output, r.output
