"""`jaxprtool check-grad`: verify the tool's derivatives numerically (exit 0 pass, 1 fail, 2 trouble)."""

from __future__ import annotations

import os
import sys
import traceback
from typing import NamedTuple

import click

from ..cli import ExitStatus, argument, command, option, options_of
from ..core import JaxprError
from ..io import report
from .ad_cmds import custom_rules_option
from .common import FILE_ARG, int_list
from .mesh_options import mesh_options
from .run_options import device_options, dim_option, parse_dims, save_inputs_option


def _positive(name: str, help: str):
    """An optional positive float option (the default: JAX's, said in `help`)."""
    return option(name, type=click.FloatRange(min=0, min_open=True), default=None, help=help)


@command("check-grad")
@argument("files", nargs=-1, metavar="[FILE|DIR|-]...", type=FILE_ARG)
@option(
    "--args",
    "args_npz",
    metavar="IN.npz",
    type=FILE_ARG,
    help="Inputs arg0..argN (default: random).",
)
@option(
    "--random",
    "seed",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    metavar="SEED",
    help="Seed for inputs and directions.",
)
@option(
    "--order",
    type=click.IntRange(1, 2),
    default=1,
    show_default=True,
    help="1: first derivatives; 2: also derivatives of the derivative programs.",
)
@option(
    "--modes",
    default="fwd,rev",
    show_default=True,
    help="Which checks: fwd (jvp), rev (vjp), or both.",
)
@option(
    "--argnums",
    callback=int_list,
    metavar="I,J",
    help="Inputs to perturb (default: every float input), e.g. not an optimiser's state.",
)
@option("--consts", "consts_npz", metavar="C.npz", help="Constants: const0, const1, ...")
@option(
    "--json",
    "as_json",
    is_flag=True,
    help='Print one JSON document instead of the tables: {"files": [{"file", "checks": '
    '[{"program", "check", "error", "tolerance", "result", "judged_in", "own_error", '
    '"jax_error"}], "replaced"}], "summary": {"files", "checks", "failures", "not_checked"}}.',
)
@_positive(
    "--tol",
    "Tolerance of the jvp and vjp checks against finite differences (default: JAX's "
    "default_gradient_tolerance of the least precise float: 2e-3 for f32; at least 1e-2 "
    "on a TPU, whose tanh is accurate to about 4e-5).",
)
@_positive(
    "--dot-tol",
    "Tolerance of the dot-product (adjoint) test (default: 2e-5 for f32, 1e-12 for f64).",
)
@_positive(
    "--eps",
    "Finite-difference step (default: 1e-5 in a float64 copy of the program, else 1e-3 for f32).",
)
@save_inputs_option
@custom_rules_option
@dim_option
@device_options(
    highest_on_tpu=True,
    require_device=True,
    help="Where the derivatives run (the finite differences: on the CPU).",
)
@mesh_options(distributed=False, show=False)
def check_grad(
    files,
    args_npz,
    seed,
    order,
    modes,
    argnums,
    consts_npz,
    as_json,
    tol,
    dot_tol,
    eps,
    save_inputs,
    custom_rules,
    dim_specs,
    device,
):
    """Check the tool's jvp and vjp of each FILE against finite differences.

    As JAX's check_grads: jvp against central differences along a random
    direction v; vjp against the finite-difference projection (<J^T w, v> against
    <w, FD(J v)>); and the dot-product test between the jvp and vjp programs
    (<w, J v> against <J^T w, v>).  A DIR stands for its jaxpr files. Exit 0 when
    every check passes, 1 when one fails, 2 for any trouble.

    \b
    Example:
      jaxprtool check-grad samples/*.jaxpr --order 2

    Exit 2 covers every refusal: a file that does not parse or check, a program the tool
    will not differentiate (a missing rule; under --custom-rules strict a custom rule the
    text lacks), missing JAX; such a file is counted as not checked and the others are
    still checked.

    Finite differences see a custom_jvp/custom_vjp function's body, not its custom rule:
    the table's caption lists every custom rule replaced by the body's derivative, and
    --custom-rules strict refuses each such replacement.
    """
    from ..jax_required import require_jax
    from .driver import expand_inputs

    try:
        require_jax()
    except JaxprError as e:  # nothing can be checked: trouble
        report(e)
        return ExitStatus.ERROR
    mode_set = {m.strip() for m in modes.split(",") if m.strip()}
    if not mode_set or not mode_set <= {"fwd", "rev"}:
        report(JaxprError(f"--modes must name fwd and/or rev, got '{modes}'"))
        return ExitStatus.ERROR
    inputs = expand_inputs(files or ("-",))
    if save_inputs is not None and len(inputs) != 1:
        report(JaxprError(f"--save-inputs keeps the point of one FILE, got {len(inputs)}"))
        return ExitStatus.ERROR
    point = _Point(args_npz, consts_npz, seed, parse_dims(dim_specs), save_inputs)
    settings = dict(
        seed=seed,
        order=order,
        modes=mode_set,
        argnums=argnums,
        tolerances={"tol": tol, "dot_tol": dot_tol, "eps": eps},
    )
    tally = _Tally(len(inputs), as_json)
    if not _check_each(inputs, point, custom_rules, settings, tally):
        return ExitStatus.ERROR
    tally.finish()
    return ExitStatus.ERROR if tally.trouble else ExitStatus.FAILURE if tally.failed else None


def _check_each(inputs, point, custom_rules, settings: dict, tally: _Tally) -> bool:
    """Check every input file into `tally`; False when nothing can be checked (JAX is
    missing: said)."""
    from ..io import progress

    debug = options_of().debug
    with progress(f"check-grad: 0 of {len(inputs)} files") as prog:
        for k, file in enumerate(inputs):
            prog.update(f"check-grad: {k} of {len(inputs)} files ({file})")
            try:
                path, checks, replaced = _check_file(file, point, custom_rules, settings)
            except _Trouble:
                tally.trouble = True
                continue
            except Exception as e:  # noqa: BLE001 - any trouble is exit 2, never a traceback
                if _internal_trouble(file, e, debug):
                    return False
                tally.trouble = True
                continue
            tally.add(path, checks, replaced)
    return True


class _Point(NamedTuple):
    """Where the derivatives are checked: --args (else random inputs of seed --random),
    --consts, the sizes of symbolic dims, and where --save-inputs keeps the point."""

    args_npz: str | None
    consts_npz: str | None
    seed: int
    dims: dict
    save_inputs: str | None


class _Trouble(Exception):
    """A file that could not be checked, already reported."""


def _check_file(file, point: _Point, custom_rules, settings: dict):
    """(path, the checks of one FILE, the custom rules replaced by their body's derivative);
    `_Trouble` once a refusal is reported."""
    from ..ad.invocation import enter, for_call
    from ..backend import sharding as backend
    from ..backend.runner import consts_runner
    from ..commands.common import load
    from ..consts_order import for_ad
    from ..io import Reported
    from ..run_inputs import gather_inputs, keep_point, warn_invented_consts
    from ..shardings import axis_sizes_of
    from ..ui.checkgrad import check_grad as run_checks

    invocation = options_of().invocation = enter(for_call(custom_rules))
    try:
        jaxpr, _, path = load(file)
        jaxpr = for_ad(jaxpr)  # as the AD commands read it; --consts gives them
        label = os.path.basename(path) if path != "<stdin>" else path
        drawn: list[str] = []
        seed = None if point.args_npz else point.seed
        args, consts, _ = gather_inputs(
            jaxpr, point.args_npz, None, seed, point.consts_npz, point.dims, drawn=drawn
        )
        warn_invented_consts(jaxpr, point.consts_npz, point.seed, "check-grad")
        keep_point(point.save_inputs, args, consts, point.seed, point.args_npz is None, drawn)
        with axis_sizes_of(jaxpr, backend.CONFIG.mesh):  # a text without its mesh
            checks = run_checks(jaxpr, args, consts_runner(consts), label=label, **settings)
    except Reported:  # the checker's errors are printed
        raise _Trouble() from None
    except JaxprError as e:
        report(e)
        raise _Trouble() from None
    return path, checks, list(invocation.fallbacks.notes)


def _internal_trouble(file, e: Exception, debug: bool) -> bool:
    """Report an exception no rule expected while checking FILE (with its traceback under
    --debug); True when nothing can be checked (JAX is missing: say what to install)."""
    from ..jax_required import missing_jax

    missing = missing_jax(e)
    if missing is not None:
        report(missing)
        return True
    if debug:  # --debug: the traceback too, as for other internal errors
        traceback.print_exception(e, file=sys.stderr)
    report(JaxprError(f"{file}: internal error: {type(e).__name__}: {e}"))
    return False


class _Tally:
    """The counts over the files checked, their tables (or --json reports) and the summary."""

    def __init__(self, n_inputs: int, as_json: bool):
        self.n_inputs, self.as_json = n_inputs, as_json
        self.reports: list[dict] = []
        self.failed = self.trouble = False
        self.files = self.checks = self.failures = self.skipped = 0

    def add(self, path: str, checks, replaced: list[str]) -> None:
        from ..ui.checkgrad import render_table

        if self.as_json:
            self.reports.append(_report(path, checks, replaced))
        else:
            render_table(checks, f"check-grad {path}", None, replaced)
        self.files += 1
        self.checks += len(checks)
        self.failures += sum(not c.passed for c in checks)
        self.skipped += sum(c.skipped is not None for c in checks)
        self.failed |= not all(c.passed for c in checks)

    def summary(self) -> str:
        def n(count: int, word: str) -> str:
            return f"{count} {word}{'s' if count != 1 else ''}"

        text = f"check-grad: {n(self.files, 'file')}, {n(self.checks, 'check')}, "
        text += n(self.failures, "failure")
        if self.skipped:
            text += f", {self.skipped} skipped (reasons above)"
        if self.trouble:
            text += f", {self.n_inputs - self.files} not checked (errors above)"
        return text

    def finish(self) -> None:
        """The --json document, else the summary line (on standard error when nothing was
        checked: standard output stays empty, as for any command in trouble)."""
        if self.as_json:
            import json

            totals = {
                "files": self.files,
                "checks": self.checks,
                "failures": self.failures,
                "skipped": self.skipped,
                "not_checked": self.n_inputs - self.files,
            }
            click.echo(json.dumps({"files": self.reports, "summary": totals}, indent=2))
        else:
            click.echo(self.summary(), err=self.trouble and self.files == 0)


def _report(path: str, checks, replaced: list[str]) -> dict:
    """One file's checks for --json (`result`: pass, FAIL, inconclusive or the non-smooth
    verdict; `judged_in`: "f64" or the program's own precision and why; `own_error`,
    `jax_error`: the program's own derivative and JAX's against the float64 one, or null)."""
    return {
        "file": path,
        "checks": [
            {
                "program": c.program,
                "check": c.name,
                "error": None if c.skipped else float(c.error),
                "tolerance": float(c.tolerance),
                "result": c.verdict,
                "judged_in": c.judged_in,
                "own_error": c.own_error,
                "jax_error": c.jax_error,
            }
            for c in checks
        ],
        "replaced": replaced,
    }
