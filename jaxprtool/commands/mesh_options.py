"""The device-mesh options of `run` and `compile`: `--mesh`, `--devices`, `--show-sharding` and
the distributed runtime's `--coordinator`, `--num-processes`, `--process-id`.

`mesh_options(...)` is a decorator placed under `@guarded`: it adds the options, sets the
back end's run configuration (`backend/sharding.py`) for the command's body and, after it,
prints the outputs' shardings.  With several processes only process 0 writes outputs (the
others run the same SPMD program and print nothing to standard output).
"""

from __future__ import annotations

import contextlib
import functools
import io
import re

import click

from ..core import JaxprError
from ..io import UsageError

_ADDRESS = re.compile(r"^[A-Za-z0-9_.\-]+:\d{1,5}$|^\[[0-9a-fA-F:]+\]:\d{1,5}$")


def mesh_options(distributed: bool = True, show: bool = True):
    def deco(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            from ..backend import sharding

            mesh = kwargs.pop("mesh", None)
            devices = kwargs.pop("devices", None)
            show_sharding = kwargs.pop("show_sharding", False) if show else False
            coordinator = kwargs.pop("coordinator", None) if distributed else None
            nproc = kwargs.pop("num_processes", None) if distributed else None
            pid = kwargs.pop("process_id", None) if distributed else None
            if distributed:
                _check_distributed(coordinator, nproc, pid)
            try:
                axes = sharding.parse_mesh_option(mesh) if mesh else None
            except JaxprError as e:
                raise UsageError(str(e)) from None
            cfg = sharding.RunConfig(
                mesh=axes,
                devices=devices,
                platform="gpu" if kwargs.get("device") == "gpu" else "cpu",
                coordinator=coordinator,
                num_processes=nproc,
                process_id=pid,
            )
            with sharding.configured(cfg):
                if cfg.mesh or cfg.devices or cfg.coordinator:
                    needed = 1
                    for s in (cfg.mesh or {}).values():
                        needed *= s
                    sharding.setup(needed=needed)
                quiet = bool(pid) and "output" in kwargs
                if quiet:
                    kwargs["output"] = None
                out = io.StringIO()
                with contextlib.redirect_stdout(out) if quiet else contextlib.nullcontext():
                    result = fn(*args, **kwargs)
                if show_sharding and not quiet:
                    _print_shardings(cfg)
                return result

        options = [
            click.option(
                "--mesh",
                metavar="x=4,y=2",
                help="Device mesh axes and sizes (default: the mesh the program prints).",
            ),
            click.option(
                "--devices",
                type=click.IntRange(min=1),
                metavar="N",
                help="CPU: N host devices for this process (default: what the mesh needs).",
            ),
        ]
        if show:
            options.append(
                click.option("--show-sharding", is_flag=True, help="Print each output's sharding.")
            )
        if distributed:
            options += [
                click.option(
                    "--coordinator",
                    metavar="HOST:PORT",
                    help="Join a multi-process run (jax.distributed) coordinated here.",
                ),
                click.option(
                    "--num-processes",
                    type=click.IntRange(min=1),
                    metavar="P",
                    help="With --coordinator: the number of processes.",
                ),
                click.option(
                    "--process-id",
                    type=click.IntRange(min=0),
                    metavar="I",
                    help="With --coordinator: this process's index (0 writes the outputs).",
                ),
            ]
        for opt in reversed(options):
            wrapper = opt(wrapper)
        return wrapper

    return deco


def _check_distributed(coordinator, nproc, pid) -> None:
    given = [x is not None for x in (coordinator, nproc, pid)]
    if any(given) and not all(given):
        raise UsageError("--coordinator, --num-processes and --process-id go together")
    if coordinator is None:
        return
    if not _ADDRESS.match(coordinator):
        raise UsageError(f"bad --coordinator '{coordinator}': expected HOST:PORT")
    if pid >= nproc:
        raise UsageError(f"--process-id {pid} is not below --num-processes {nproc}")


def _print_shardings(cfg) -> None:
    from ..backend import sharding

    for i, s in enumerate(cfg.last_shardings):
        click.echo(f"out{i}: {sharding.describe(s) if s is not None else 'host value'}")
