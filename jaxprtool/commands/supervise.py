"""The distributed join, supervised: `run --coordinator` runs its command in a child process.

JAX's distributed client aborts the whole process from C++ (SIGABRT and a stack dump that
blames "another task") when the coordinator does not answer, a peer never registers or a
peer dies.  No Python code can catch that, so the command runs again in a child process
(`python -P -m jaxprtool` with the same arguments: `-P` keeps the working folder off
`sys.path`, so that a `numpy.py` planted there never runs) and this process watches it:

* the child tells us through a pipe when it starts joining and when it has joined
  (`JOINING`, `JOINED`, written by `sharding.setup` through `RunConfig.join_progress`);
* a child that has not joined `--join-timeout` seconds (plus a grace period) after it
  started joining is killed; a child killed by a signal is reported as such;
* the child's standard output is copied through as it comes; its standard error is held
  back until it ends, so that XLA's stack dump never reaches the user (`--debug` shows it);
* a second pipe (the lifeline) ends the child when this process dies.

Either way the user sees one `error:` line naming the coordinator, this process's id and
what did not answer, and the exit status is 1.
"""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import threading
import time

from ..core import JaxprError
from ..lazy import LazyPattern

#: the child's environment variable: "JOIN_FD,LIFELINE_FD"
CHILD_ENV = "JAXPRTOOL_SUPERVISED_FDS"
JOINING, JOINED = b"j", b"J"
#: seconds the child may take beyond --join-timeout (JAX's own deadline) before it is killed
GRACE_S = 15


def is_child() -> bool:
    """Whether this process is a supervised child: its environment names the two pipes
    (`child_fds`); a value that does not is an error, never a silent exit."""
    return child_fds() is not None


def child_fds() -> tuple[int, int] | None:
    """(join pipe's write end, lifeline's read end) from JAXPRTOOL_SUPERVISED_FDS, None when
    it is unset; a UsageProblem when it is not two open pipes (a value set by hand could
    otherwise make the join's bytes land in the JSON on standard output)."""
    from ..core import UsageProblem

    value = os.environ.get(CHILD_ENV)
    if value is None:
        return None
    m = re.fullmatch(r"(\d{1,9}),(\d{1,9})", value)
    fds = (int(m.group(1)), int(m.group(2))) if m else None
    if fds is None or min(fds) < 3 or fds[0] == fds[1] or not all(map(_is_pipe, fds)):
        raise UsageProblem(
            f"{CHILD_ENV}={value[:40]!r}: this variable is set by `run --coordinator` for the "
            "child process it watches (two pipe descriptors, 'W,R'); unset it"
        )
    return fds


def _is_pipe(fd: int) -> bool:
    import stat

    try:
        return stat.S_ISFIFO(os.fstat(fd).st_mode)
    except OSError:
        return False


def child_progress():
    """In the child: the function `sharding.setup` calls with JOINING and JOINED, after
    starting the thread that ends this process when the supervisor dies."""
    join_fd, life_fd = child_fds()

    def watch_lifeline():
        while True:
            try:
                if not os.read(life_fd, 1):
                    break
            except InterruptedError:
                continue
            except OSError:
                break
        os._exit(1)

    threading.Thread(target=watch_lifeline, name="jaxprtool-lifeline", daemon=True).start()

    def progress(stage: bytes) -> None:
        os.write(join_fd, stage)

    return progress


def supervise(argv: list[str], coordinator: str, pid: int, nproc: int, timeout: int, debug: bool):
    """Run `jaxprtool ARGV` in a child process and watch its join (module docstring).
    Returns the child's exit status when it ended by itself; raises JaxprError otherwise."""
    join_r, join_w = os.pipe()
    life_r, life_w = os.pipe()
    env = dict(os.environ, **{CHILD_ENV: f"{join_w},{life_r}"})
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (_package_root(), os.environ.get("PYTHONPATH")) if p
    )
    stdin, feed = _stdin_for_child()
    try:
        child = subprocess.Popen(
            [sys.executable, "-P", "-m", "jaxprtool", *argv],
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=(join_w, life_r),
            env=env,
        )
    finally:
        os.close(join_w)
        os.close(life_r)
    err_chunks: list[bytes] = []
    threads = [
        threading.Thread(target=_copy_out, args=(child.stdout,), daemon=True),
        threading.Thread(target=_collect, args=(child.stderr, err_chunks), daemon=True),
    ]
    if feed is not None:
        threads.append(threading.Thread(target=_feed, args=(child.stdin, feed), daemon=True))
    for t in threads:
        t.start()
    try:
        stage = _watch_join(child, join_r, timeout + GRACE_S)
        rc = child.wait() if stage == JOINED or child.poll() is not None else None
    except BaseException:
        _kill(child)
        raise
    finally:
        os.close(join_r)
    if rc is None:
        _kill(child)
    for t in threads:
        t.join(timeout=10)
    os.close(life_w)
    log = b"".join(err_chunks).decode("utf-8", "replace")
    if rc is not None and rc >= 0:
        sys.stderr.write(log)
        sys.stderr.flush()
        return rc
    if debug:
        sys.stderr.write(log)
    where = f"the distributed run at {coordinator} (process {pid} of {nproc})"
    raise JaxprError(_failure(where, stage, rc, pid, nproc, timeout, log))


def _watch_join(child, join_r: int, limit_s: float) -> bytes | None:
    """The last stage the child reported, once it joined, ended, or overran `limit_s`
    seconds after it started joining."""
    stage = None
    deadline = None
    while True:
        wait = None if deadline is None else max(0.0, deadline - time.monotonic())
        ready, _, _ = select.select([join_r], [], [], wait if wait is not None else 1.0)
        if ready:
            data = os.read(join_r, 16)
            if not data:  # the child closed its end: it ended
                child.wait()
                return stage
            stage = data[-1:]
            if stage == JOINED:
                return stage
            deadline = time.monotonic() + limit_s
        elif child.poll() is not None:
            return stage
        elif deadline is not None and time.monotonic() >= deadline:
            return stage


def _failure(where: str, stage, rc, pid: int, nproc: int, timeout: int, log: str) -> str:
    """What did not answer, from the stage the child reached and JAX's last status line."""
    status = _jax_status(log)
    said = f" (JAX: {status})" if status else ""
    if stage == JOINED:
        return (
            f"{where} stopped after joining: JAX's distributed runtime ended this process "
            f"({_signal_name(rc)}){said}; another process of the run died or stopped "
            "answering; see its messages (--debug shows this process's log)"
        )
    if pid == 0:
        others = "process 1" if nproc == 2 else f"processes 1 to {nproc - 1}"
        missing = (
            f"this process hosts the coordinator, and {others} did not join within "
            f"{timeout} s; start every process with the same --coordinator and "
            "--num-processes, or raise --join-timeout"
        )
    else:
        missing = (
            f"the coordinator (process 0) did not answer within {timeout} s; start process "
            "0 with the same --coordinator and --num-processes first, check the host and "
            "port, or raise --join-timeout"
        )
    return f"cannot join {where}: {missing}{said}"


_STATUS = LazyPattern(r"absl::Status: ([A-Z_]+): ([^\n]*)")
_RPC = LazyPattern(r"RPC: (/[\w./]+)")


def _jax_status(log: str) -> str | None:
    m = _STATUS.search(log)
    if m is None:
        return None
    rpc = _RPC.search(log, m.end())
    return f"{m.group(1)}: {m.group(2).strip()}" + (f" in {rpc.group(1)}" if rpc else "")


def _signal_name(rc) -> str:
    if rc is None:
        return "killed: it overran its deadline"
    try:
        return f"signal {signal.Signals(-rc).name}"
    except ValueError:
        return f"signal {-rc}"


def _package_root() -> str:
    """The folder holding this jaxprtool package: the child runs the same code."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _stdin_for_child():
    """(stdin for Popen, bytes to feed): the real standard input when it has a file
    descriptor, else what it holds (a test's in-memory input)."""
    try:
        sys.stdin.fileno()
        return None, None
    except (AttributeError, OSError, ValueError):
        data = sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else b""
        return subprocess.PIPE, data


def _feed(pipe, data: bytes) -> None:
    try:
        pipe.write(data)
        pipe.close()
    except OSError:
        pass


def _copy_out(pipe) -> None:
    out = getattr(sys.stdout, "buffer", None)
    for chunk in iter(lambda: pipe.read1(65536), b""):
        if out is not None:
            out.write(chunk)
            out.flush()
        else:
            sys.stdout.write(chunk.decode("utf-8", "replace"))


def _collect(pipe, chunks: list[bytes]) -> None:
    for chunk in iter(lambda: pipe.read1(65536), b""):
        chunks.append(chunk)


def _kill(child) -> None:
    if child.poll() is None:
        child.kill()
        child.wait()
