"""The device-mesh options of `run` and `compile`: `--mesh`, `--devices`, `--show-sharding` and
the distributed runtime's `--coordinator`, `--num-processes`, `--process-id` and
`--join-timeout`.

`mesh_options(...)` is a decorator placed under `@guarded`: it adds the options, sets the
back end's run configuration (`backend/sharding.py`) for the command's body and, after it,
prints the outputs' shardings.  With several processes only process 0 writes outputs (the
others run the same SPMD program and print nothing to standard output).  A distributed
command runs in a supervised child process (`supervise.py`), since JAX aborts a process
whose join fails.

The sizes are bounded (`MAX_*`): XLA's CPU client aborts or runs out of memory on absurd
device counts and JAX's coordinator hangs on absurd process counts, so they are usage
errors here.
"""

from __future__ import annotations

import contextlib
import functools
import io
import math
import sys
from typing import NamedTuple

import click

from ..cli import option
from ..core import JaxprError
from ..io import UsageError
from ..lazy import LazyPattern
from . import supervise

_ADDRESS = LazyPattern(
    r"(?:[A-Za-z0-9](?:[A-Za-z0-9_.\-]*[A-Za-z0-9])?|\[[0-9a-fA-F:.]+\]):(\d{1,5})"
)

#: host devices one process may ask for (XLA's CPU client takes seconds per thousand)
MAX_DEVICES = 1024
#: processes of one distributed run
MAX_PROCESSES = 4096
#: devices of a --mesh (all processes together)
MAX_MESH = MAX_DEVICES * 64
#: default seconds to wait for the distributed run to form
JOIN_TIMEOUT_S = 60


def mesh_options(distributed: bool = True, show: bool = True):
    """Decorator: the command takes the mesh options (`_options`) and its body runs under
    the run configuration they make (`_run_meshed`)."""

    def deco(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            return _run_meshed(fn, args, kwargs, distributed, show)

        for opt in reversed(_options(distributed, show)):
            wrapper = opt(wrapper)
        return wrapper

    return deco


class _MeshRequest(NamedTuple):
    """The mesh options given to one command."""

    mesh: str | None
    devices: int | None
    show_sharding: bool
    coordinator: str | None
    nproc: int | None
    pid: int | None
    timeout: int | None


def _take_request(kwargs: dict, distributed: bool, show: bool) -> _MeshRequest:
    """The mesh options, taken out of the command's keyword arguments."""
    return _MeshRequest(
        mesh=kwargs.pop("mesh", None),
        devices=kwargs.pop("devices", None),
        show_sharding=kwargs.pop("show_sharding", False) if show else False,
        coordinator=kwargs.pop("coordinator", None) if distributed else None,
        nproc=kwargs.pop("num_processes", None) if distributed else None,
        pid=kwargs.pop("process_id", None) if distributed else None,
        timeout=kwargs.pop("join_timeout", JOIN_TIMEOUT_S) if distributed else None,
    )


def _run_meshed(fn, args, kwargs: dict, distributed: bool, show: bool):
    """`fn(*args, **kwargs)` under the run configuration the mesh options make (in a
    supervised child process for a distributed run); its exit status."""
    from ..backend import sharding

    req = _take_request(kwargs, distributed, show)
    if distributed:
        _check_distributed(req.coordinator, req.nproc, req.pid)
    axes = _parse_mesh(req.mesh) if req.mesh else None
    if req.coordinator is not None and not supervise.is_child():
        return _run_supervised(req.coordinator, req.pid, req.nproc, req.timeout) or None
    cfg = sharding.RunConfig(
        mesh=axes,
        devices=req.devices,
        platform=kwargs.get("device") or "cpu",
        coordinator=req.coordinator,
        num_processes=req.nproc,
        process_id=req.pid,
        join_timeout=req.timeout,
        join_progress=supervise.child_progress() if req.coordinator is not None else None,
    )
    with sharding.configured(cfg):
        if cfg.mesh or cfg.devices or cfg.coordinator:
            sharding.setup(needed=math.prod((cfg.mesh or {}).values()))
        quiet = bool(req.pid) and "output" in kwargs
        if quiet:  # only process 0 writes outputs
            kwargs["output"] = None
        with contextlib.redirect_stdout(io.StringIO()) if quiet else contextlib.nullcontext():
            result = fn(*args, **kwargs)
        if req.show_sharding and not quiet:
            _print_shardings(cfg)
        return result


def _options(distributed: bool, show: bool) -> list:
    """The click options: --mesh and --devices; --show-sharding with `show`; the
    distributed runtime's with `distributed`."""
    options = [
        option(
            "--mesh",
            metavar="x=4,y=2",
            help="Device mesh axes and sizes (default: the mesh the program prints).",
        ),
        option(
            "--devices",
            type=click.IntRange(min=1, max=MAX_DEVICES),
            metavar="N",
            help="CPU: N host devices for this process (default: what the mesh needs; "
            f"at most {MAX_DEVICES}).",
        ),
    ]
    if show:
        options.append(
            option(
                "--show-sharding",
                is_flag=True,
                help="Print each input's sharding (XLA's choice for one the program does "
                "not place) and each output's.",
            )
        )
    if distributed:
        options += _distributed_options()
    return options


def _distributed_options() -> list:
    return [
        option(
            "--coordinator",
            metavar="HOST:PORT",
            help="Join a multi-process run (jax.distributed) coordinated here.",
        ),
        option(
            "--num-processes",
            type=click.IntRange(min=1, max=MAX_PROCESSES),
            metavar="P",
            help=f"With --coordinator: the number of processes (at most {MAX_PROCESSES}).",
        ),
        option(
            "--process-id",
            type=click.IntRange(min=0),
            metavar="I",
            help="With --coordinator: this process's index (0 writes the outputs).",
        ),
        option(
            "--join-timeout",
            type=click.IntRange(min=1, max=86400),
            default=JOIN_TIMEOUT_S,
            show_default=True,
            metavar="SECONDS",
            help="With --coordinator: how long to wait for every process to join.",
        ),
    ]


def _check_distributed(coordinator, nproc, pid) -> None:
    given = [x is not None for x in (coordinator, nproc, pid)]
    if any(given) and not all(given):
        raise UsageError("--coordinator, --num-processes and --process-id go together")
    if coordinator is None:
        return
    m = _ADDRESS.fullmatch(coordinator)
    if m is None or not 1 <= int(m.group(1)) <= 65535:
        raise UsageError(
            f"bad --coordinator {coordinator!r}: expected HOST:PORT with a port from 1 to "
            "65535, e.g. 10.0.0.1:1234 or [::1]:1234"
        )
    if pid >= nproc:
        raise UsageError(f"--process-id {pid} is not below --num-processes {nproc}")


def _parse_mesh(text: str) -> dict[str, int]:
    from ..shardings import parse_mesh_option

    try:
        axes = parse_mesh_option(text)
    except JaxprError as e:
        raise UsageError(str(e)) from None
    if math.prod(axes.values()) > MAX_MESH:
        raise UsageError(
            f"bad --mesh '{text}': {math.prod(axes.values())} devices; at most {MAX_MESH}"
        )
    return axes


def _run_supervised(coordinator: str, pid: int, nproc: int, timeout: int) -> int:
    """This command again, in a child process whose join is watched (`supervise.py`)."""
    from ..cli import ARGV_KEY, options_of

    ctx = click.get_current_context(silent=True)
    argv = ctx.meta.get(ARGV_KEY) if ctx is not None else None
    if argv is None:
        argv = sys.argv[1:]
    options = options_of(ctx)
    options.diagnostics.delegated = True  # (the child writes the --output-format document)
    return supervise.supervise(argv, coordinator, pid, nproc, timeout, options.debug)


def _print_shardings(cfg) -> None:
    from ..backend import sharding

    for line in sharding.sharding_lines(cfg):
        click.echo(line)
