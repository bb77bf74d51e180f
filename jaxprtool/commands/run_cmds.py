"""`jaxprtool run`: the run loop through XLA or op by op (jax is imported lazily).

Its options are listed and read in `run_options.py`, its inputs gathered in
`run_inputs.py` (`--input` and `--expected-output` in `run_io.py`), the mesh set up by
`mesh_options.py` and its outputs reported by `run_report.py`."""

from __future__ import annotations

import contextlib
import os
import time

import click

from ..cli import argument, command, guarded
from ..core import UsageProblem
from ..io import UsageError, human_size, progress, refuse_planted_links
from ..jax_required import require_jax
from ..lazy import np
from ..run_inputs import gather_inputs, keep_point
from .common import FILE_ARG, load
from .mesh_options import mesh_options
from .run_options import REPEAT_BUDGET_S, cache_option, device_options, parse_dims, run_options
from .run_report import check_expected, report_outputs


@command()
@argument("file", required=False, type=FILE_ARG)
@run_options
@cache_option
@guarded
@device_options()
@mesh_options()
def run(
    file,
    device,
    args_npz,
    arg_files,
    seed,
    consts_npz,
    dim_specs,
    inputs,
    output,
    output_format,
    print_values,
    expected,
    rtol,
    atol,
    eager,
    trace_,
    debug_nans,
    repeat,
    profile,
    save_inputs,
    no_cache,
):
    """Run FILE through XLA (via JAX) on the given inputs.

    \b
    Example:
      jaxprtool run mlp.jaxpr --random 0
      jaxprtool run f.jaxpr --args in.npz -o out.npz
      jaxprtool run f.jaxpr --input 'f32[]=0.5' --input 'f32[2,3]=1 2 3 4 5 6'
      jaxprtool run f.jaxpr --args in.npz --expected-output want.npz --atol 1e-6
      jaxprtool run f.jaxpr --random 0 --output-format json --print-values none
      jaxprtool run f.jaxpr --random 0 --eager --debug-nans
      jaxprtool run sharded.jaxpr --random 0 --mesh x=4,y=2 --show-sharding
    """
    from .. import backend, compile_cache
    from ..consts_order import number_constants
    from . import run_io

    dims = parse_dims(dim_specs)
    if (eager or trace_ or debug_nans) and repeat:
        raise UsageError(
            "--repeat times compiled runs; it does not combine with --eager/--trace/--debug-nans"
        )
    inline = [run_io.parse_input(spec) for spec in inputs] if inputs else None
    if output_format == "json" and output in (None, "-") and print_values not in (None, "none"):
        raise UsageError("JSON goes to standard output without -o: use --print-values none")
    sessions = _profile_folder(profile) if profile is not None else None
    require_jax()
    jaxpr, _, _ = load(file)
    jaxpr = number_constants(jaxpr).program  # nested jaxprs' constants come with --consts
    backend.check_runnable(jaxpr)
    compile_cache.configure(not no_cache)
    drawn: list[str] = []
    args, consts, dims = gather_inputs(
        jaxpr, args_npz, arg_files, seed, consts_npz, dims, inline=inline, drawn=drawn
    )
    # (run --random's own output stays as it was: the note comes with --save-inputs)
    random = seed is not None and save_inputs is not None
    keep_point(save_inputs, args, consts, seed, random, drawn)
    want = None if expected is None else run_io.load_expected(expected, jaxpr.outvars, dims)
    with progress(f"running {file or '<stdin>'}"), _profiled(profile):
        if eager or trace_ or debug_nans:
            tr = (lambda line: click.echo(line)) if trace_ else None
            outs = backend.eval_eager(
                jaxpr, args, consts, trace=tr, debug_nans=debug_nans, dims=dims, device=device
            )
        elif repeat:
            outs = _timed(jaxpr, args, consts, dims, device, repeat)
        else:
            outs = backend.evaluate(jaxpr, args, consts, device=device, dims=dims)
    if profile is not None:
        _profile_table(profile, sessions, jaxpr, device, dims, eager or trace_ or debug_nans)
    report_outputs(outs, jaxpr, output, output_format, print_values)
    if want is not None:
        check_expected(outs, want, expected, rtol, atol)


def _repeated(call, repeat: int):
    """(the times of up to `repeat` calls, in an array of at most `repeat` floats; the last
    outputs), stopping once the runs have taken REPEAT_BUDGET_S seconds."""
    times = np.empty(repeat)
    spent, outs = 0.0, None
    for k in range(repeat):
        t0 = time.perf_counter()
        outs = call()
        times[k] = time.perf_counter() - t0
        spent += times[k]
        if spent >= REPEAT_BUDGET_S:
            return times[: k + 1], outs
    return times, outs


def _profiled(folder: str | None):
    """JAX's profiler trace of the block into `folder` (said on standard error), or nothing."""
    if folder is None:
        return contextlib.nullcontext()
    import jax

    click.echo(
        f"note: JAX's profiler trace goes to {folder} (tensorboard --logdir {folder}, or its "
        "*.trace.json.gz in Perfetto); XLA's operations are named FILE:LINE:COL/primitive",
        err=True,
    )
    return jax.profiler.trace(folder)


def _profile_folder(folder: str) -> set[str]:
    """Check `--profile DIR` before the run: a folder (made if need be) the user can write
    into, reached through no link another user planted (DIR, DIR/plugins, ...); the profiler
    sessions already in it (none of them is this run's)."""
    import tempfile

    from ..ui import profile_table

    if folder == "-":
        raise UsageError("--profile needs a folder: '-' (standard output) is not one")
    where = os.path.join(folder, *profile_table.SESSIONS)
    for path in (folder, os.path.join(folder, profile_table.SESSIONS[0]), where):
        refuse_planted_links(path, f"the profile into '{folder}'")
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise UsageProblem(f"cannot write the profile into '{folder}': it is not a folder")
    try:
        os.makedirs(where, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=where, prefix=".jaxprtool-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise UsageProblem(f"cannot write the profile into '{folder}': {e.strerror}") from None
    return profile_table.sessions(folder)


def _profile_table(folder: str, before: set[str], jaxpr, device, dims, eager: bool) -> None:
    """After `--profile`: the device time of each XLA operation with the equations of the
    file it computes (ui/profile_table.py), on standard error, from this run's trace only
    (the session folder that was not there `before`)."""
    from ..backend.lowering import lower
    from ..ui import profile_table

    trace = profile_table.this_runs_trace(folder, before)
    if eager or trace is None:
        why = "ran op by op (--eager)" if eager else f"left no trace of its own in {folder}"
        click.echo(f"profile: no per-equation table: the program {why}", err=True)
        return
    hlo = profile_table.read_hlo(lower(jaxpr, "optimized-hlo", device, dims, False)[0])
    try:
        times = profile_table.op_times(trace, hlo)
    except profile_table.TraceTooLarge:
        limit = human_size(profile_table.MAX_TRACE_BYTES)
        click.echo(
            f"profile: no per-equation table: the trace {trace} is larger than {limit} once "
            "unpacked, the most read (open it in Perfetto or TensorBoard)",
            err=True,
        )
        return
    for line in profile_table.render(hlo, times, trace):
        click.echo(line, err=True)


def _timed(jaxpr, args, consts, dims, device, repeat):
    import jax

    from .. import backend
    from ..backend import sharding

    backend.check_runnable(jaxpr)
    multi = sharding.is_multi_device(jaxpr)
    scope = sharding.run_scope(jaxpr, device) if multi else contextlib.nullcontext()
    with scope, backend.x64_scope(jaxpr):
        host = list(consts) + list(args)
        if not multi:
            dev = backend.get_device(device)
            xs = [jax.device_put(x, dev) for x in host]
        t0 = time.perf_counter()
        nested = len(consts) != len(jaxpr.constvars)  # cond/loop bodies' too (backend/consts)
        placement = sharding.enforce_call_placements if multi else None
        fn = jax.jit(backend.as_jax_function(jaxpr, dims, False, nested, placement))
        # multi-device: the inputs the text does not place take the shardings XLA chose
        compiled = (
            sharding.compile_for_inputs(jaxpr, fn, host) if multi else fn.lower(*xs).compile()
        )
        t_compile = time.perf_counter() - t0
        if multi:
            xs = sharding.inputs_for(jaxpr, compiled, host)
        times, outs = _repeated(lambda: jax.block_until_ready(compiled(*xs)), repeat)
    ran = f"x{len(times)}" + (
        f" of {repeat} (the {REPEAT_BUDGET_S:g} s budget was spent)" if len(times) < repeat else ""
    )
    click.echo(
        f"compile: {t_compile * 1e3:.2f} ms; run {ran}: median {np.median(times) * 1e3:.3f} ms, "
        f"min {times.min() * 1e3:.3f} ms, max {times.max() * 1e3:.3f} ms",
        err=True,
    )
    if multi:
        sharding.CONFIG.last_shardings = [getattr(o, "sharding", None) for o in outs]
        return [sharding.gather(o) for o in outs]
    return [np.asarray(o) for o in outs]
