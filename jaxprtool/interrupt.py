"""Ctrl-C in the `jaxprtool` program: status 130 and one line, at once, wherever it comes.

A KeyboardInterrupt raised where SIGINT happens to land (an import, XLA's compile, JAX's
threads starting) could abort the process, be swallowed or become an internal error.  In the
program (never in a library user's process), SIGINT is blocked in every thread but one that
waits for it, from the first line of the package on; where SIGINT is ignored (a background
job), it stays ignored.

The program ignores SIGXFSZ (`keep_writes_reportable`).  Its start-up also holds the
collector (`hold_collector`): its imports build what lives to the end of the process
(modules, classes, records), which collections would only scan; the command's body starts
it again with all of that frozen (`release_collector`).
"""

from __future__ import annotations

import gc
import os
import sys
import threading

try:
    # the C module that `signal` wraps: importing `signal` turns its constants into enums
    # (~2 ms, 3% of a command's start-up), where the program needs five functions and the
    # numbers themselves
    import _signal as signal
except ImportError:  # (an interpreter without it)
    import signal

#: the exit status of a process that Ctrl-C ended, as a shell reports one
INTERRUPTED_EXIT = 130

_WAITING = False

#: the collector was disabled by `hold_collector` and is not yet started again
#: (why a value cannot carry it: the collector is per process)
_HELD = False


def program_starting() -> bool:
    """This process is the `jaxprtool` program starting: its console script, or `python -m
    jaxprtool`.  Read from the interpreter's own command line (`sys.orig_argv`), never from
    `sys.argv[0] == "-m"` alone, which is also true while the parent packages of any
    `python -m pkg.mod` are imported: a library user's process never installs the hook."""
    first = sys.argv[0] if sys.argv else ""
    if os.path.basename(first) == "jaxprtool" and first != "-m":
        return True
    argv = getattr(sys, "orig_argv", [])
    i = 1
    while i < len(argv):
        word = argv[i]
        if word == "-m":
            return argv[i + 1 : i + 2] in (["jaxprtool"], ["jaxprtool.__main__"])
        if word.startswith("-m"):  # -mjaxprtool
            return word[2:] in ("jaxprtool", "jaxprtool.__main__")
        if not word.startswith("-") or word.startswith("-c"):  # a script, or -c CODE
            return False
        i += 2 if word in ("-W", "-X") else 1  # (the two options that take a word)
    return False


def exit_on_interrupt() -> None:
    """From now on, Ctrl-C ends this process with status 130 and `error: interrupted`."""
    global _WAITING  # (why a value cannot carry it: a signal handler is per process)
    if _WAITING or signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        return
    if not hasattr(signal, "sigwait"):  # (not on this platform)
        return
    _WAITING = True
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    threading.Thread(target=_await_interrupt, name="jaxprtool-interrupt", daemon=True).start()


def _await_interrupt() -> None:
    signal.sigwait({signal.SIGINT})
    os.write(2, b"error: interrupted\n")
    os._exit(INTERRUPTED_EXIT)


def keep_writes_reportable() -> None:
    """A write beyond the file-size limit (`ulimit -f`) kills the process with SIGXFSZ by
    default; ignored, the write fails with EFBIG and is reported (exit 2)."""
    if hasattr(signal, "SIGXFSZ"):
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


def hold_collector() -> None:
    """No garbage collection while the program starts (~30 collections, 3-4 ms of CPU in a
    60 ms start-up, scanning only objects that live to the end), unless it is off already."""
    global _HELD  # (see `_HELD`)
    if gc.isenabled():
        gc.disable()
        _HELD = True


def release_collector() -> None:
    """Collect again (after `hold_collector`), the start-up's objects left out of every
    later collection (`gc.freeze`): a transformation's collections scan only its own."""
    global _HELD  # (see `_HELD`)
    if _HELD:
        _HELD = False
        gc.freeze()
        gc.enable()
