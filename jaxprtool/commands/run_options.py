"""The options of `run` and `compile` and how their values are read: the device, the
compilation cache, symbolic dimension sizes (`--dim`) and the list of `run`'s options
(`run_options`), kept apart from what the commands do with them."""

from __future__ import annotations

import functools

import click

from ..cli import option
from ..io import UsageError
from .common import FILE_ARG, OUT_ARG

SAVE_INPUTS_HELP = (
    "Write the point the program ran at to OUT.npz (arg0, arg1, ..., const0, ...: what "
    "--args and --consts read back), and say how it was drawn (the seed, and the inputs "
    "drawn as the program needs them)."
)


def save_inputs_option(fn):
    """`--save-inputs OUT.npz` (run, check-grad, explain)."""
    return option(
        "--save-inputs", "save_inputs", metavar="OUT.npz", type=OUT_ARG, help=SAVE_INPUTS_HELP
    )(fn)


#: --device: a platform, or "auto" (JAX's default backend)
DEVICES = click.Choice(["cpu", "gpu", "tpu", "auto"])
#: --matmul-precision (backend/precision.py; JAX's names)
MATMUL_PRECISIONS = click.Choice(["default", "high", "highest"])


def device_options(
    *,
    precision: bool = True,
    highest_on_tpu: bool = False,
    require_device: bool = False,
    help="Where to run.",
):
    """`--device` (passed on to the command, which `mesh_options` reads for the platform) and,
    with `precision`, `--matmul-precision`, applied here around the whole command and said on
    standard error.  `highest_on_tpu`, for the commands that check derivatives against finite
    differences at f32 tolerances: on a TPU the default is "highest", as JAX's test suite does
    there, and the finite differences run on the CPU (`backend.reference_device`), said.
    `require_device`: a device that is not there is one error line and exit 1 before any
    work (for commands that report each file's trouble on their own)."""

    def deco(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            from ..backend.precision import derivative_precision, matmul_precision

            if require_device and not _device_there(kwargs.get("device")):
                from ..cli import ExitStatus

                return ExitStatus.FAILURE
            given = kwargs.pop("matmul_precision", None) if precision else None
            platform = _platform(kwargs.get("device")) if highest_on_tpu else "cpu"
            value = derivative_precision(given, platform)
            why = (
                "--matmul-precision"
                if given is not None
                else "the default on a TPU; --matmul-precision default undoes it"
            )
            if platform != "cpu":
                click.echo(
                    f"note: the derivatives run on the {platform}; the finite differences they "
                    "are checked against run on the CPU (where JAX has one)"
                    + (_tpu_tolerance_note() if platform == "tpu" else ""),
                    err=True,
                )
            if value is not None:
                click.echo(
                    f"note: matrix products whose text gives no precision run at precision "
                    f"'{value}', as under jax.default_matmul_precision('{value}') ({why})",
                    err=True,
                )
            with matmul_precision(value):
                return fn(*args, **kwargs)

        options = [option("--device", type=DEVICES, default="cpu", show_default=True, help=help)]
        if precision:
            options.append(
                option(
                    "--matmul-precision",
                    type=MATMUL_PRECISIONS,
                    default=None,
                    help="Run matrix products whose text gives no precision as "
                    "jax.default_matmul_precision would have traced them (default: as written; "
                    "on a TPU 'default' is one bf16 pass, 'highest' f32 accuracy).",
                )
            )
        for decorate in reversed(options):
            wrapper = decorate(wrapper)
        return wrapper

    return deco


def _device_there(device: str | None) -> bool:
    """Whether `device` is there (the CPU always is); if not, one line says why."""
    if device in (None, "cpu"):
        return True
    from ..core import JaxprError
    from ..io import report
    from ..jax_required import require_jax

    try:
        require_jax()
        from ..backend import get_device

        get_device(device)
    except JaxprError as e:
        report(e)
        return False
    return True


def _tpu_tolerance_note() -> str:
    from ..ui.checkgrad import TPU_TOLERANCE

    return (
        f"; the tolerance against them is at least {TPU_TOLERANCE:g} there (a TPU's tanh is "
        "accurate to about 4e-5: jax.grad's derivatives there are off as much; check-grad "
        "--tol sets another)"
    )


def _platform(device: str | None) -> str:
    """The platform of --device ("auto" resolved; the CPU where none is given)."""
    if device == "auto":
        from ..backend import get_device

        return get_device("auto").platform
    return device or "cpu"


#: the most runs `--repeat` times, and the seconds after which its runs stop
MAX_REPEAT = 1_000_000
REPEAT_BUDGET_S = 60.0


def cache_option(fn):
    """`--no-cache`: JAX's persistent compilation cache is on by default (its folder in --help)."""
    from ..compile_cache import folder_for_help

    return option(
        "--no-cache",
        is_flag=True,
        help="Do not use JAX's persistent compilation cache (on by default, so a second run "
        f"of a program on the same device skips XLA compilation; folder: {folder_for_help()}).",
    )(fn)


def dim_option(fn):
    """`--dim b=4,n=8` (repeatable), read by `parse_dims`."""
    return option(
        "--dim", "dim_specs", multiple=True, metavar="b=4,n=8", help="Sizes of symbolic dimensions."
    )(fn)


#: the largest --dim size (int64, as XLA's shapes)
MAX_DIM = 2**63 - 1


def parse_dims(specs) -> dict[str, int]:
    """`--dim b=4,n=8` (repeatable) -> {'b': 4, 'n': 8}: sizes from 0 to 2^63 - 1."""
    dims: dict[str, int] = {}
    for spec in specs or ():
        for part in spec.split(","):
            part = part.strip()
            if not part:
                continue
            name, eq, val = part.partition("=")
            val = val.strip()
            if not eq or not name.strip().isidentifier() or not val.lstrip("-").isdigit():
                raise UsageError(f"bad --dim '{part}': expected NAME=INT, e.g. --dim b=4,n=8")
            if val.startswith("-") or len(val) > 19 or int(val) > MAX_DIM:
                raise UsageError(
                    f"bad --dim '{part}': a size is from 0 to {MAX_DIM}, e.g. --dim b=4"
                )
            dims[name.strip()] = int(val)
    return dims


def run_options(fn):
    """`run`'s options after FILE, in the order --help lists them (the mesh options and
    --no-cache come from `mesh_options` and `cache_option`)."""
    for decorate in reversed(_RUN_OPTIONS):
        fn = decorate(fn)
    return fn


_RUN_OPTIONS = [
    option(
        "--args",
        "args_npz",
        metavar="IN.npz",
        type=FILE_ARG,
        help="Arguments: keys arg0, arg1, ... (or arr_0, ...).",
    ),
    option(
        "--arg",
        "arg_files",
        multiple=True,
        metavar="X.npy",
        type=FILE_ARG,
        help="One argument (repeat, in order).",
    ),
    option(
        "--random",
        "seed",
        type=click.IntRange(min=0),
        metavar="SEED",
        help="Random arguments (and constants).",
    ),
    option(
        "--consts",
        "consts_npz",
        metavar="C.npz",
        type=FILE_ARG,
        help="Constants: keys const0, const1, ...",
    ),
    dim_option,
    option(
        "--input",
        "inputs",
        multiple=True,
        metavar="TYPE=VALUES",
        help="One argument inline, in order (repeat): 'f32[2,3]=1 2 3 4 5 6', 'f32[]=0.5', "
        "'i32[4]=7' (one value fills the array), or @X.npy.",
    ),
    option(
        "-o",
        "--output",
        metavar="OUT",
        type=OUT_ARG,
        help="Write the outputs out0, out1, ... here (an .npz; an .npy for one output; a "
        "folder with --output-format npy-dir; JSON with --output-format json).",
    ),
    option(
        "--output-format",
        type=click.Choice(["npz", "npy-dir", "json"]),
        default=None,
        help="Format of -o (default: from its name; json without -o: standard output).",
    ),
    option(
        "--print-values",
        type=click.Choice(["full", "summary", "none"]),
        default=None,
        help="Print the outputs: every value, a table (the default without -o), or nothing "
        "(the default with -o).",
    ),
    option(
        "--expected-output",
        "expected",
        metavar="OUT.npz",
        type=FILE_ARG,
        help="Compare the outputs with these (out0, out1, ...; an .npy for one output): exit 1 "
        "and a table of the outputs that differ.",
    ),
    option(
        "--rtol",
        type=click.FloatRange(min=0),
        default=1e-5,
        show_default=True,
        help="Relative tolerance of --expected-output (floats).",
    ),
    option(
        "--atol",
        type=click.FloatRange(min=0),
        default=1e-8,
        show_default=True,
        help="Absolute tolerance of --expected-output (floats; integers compare exactly).",
    ),
    option("--eager", is_flag=True, help="Run op by op, with control flow interpreted in Python."),
    option("--trace", "trace_", is_flag=True, help="With --eager: print every equation's result."),
    option(
        "--debug-nans",
        is_flag=True,
        help="With --eager: stop at the first equation producing NaN/inf.",
    ),
    option(
        "--repeat",
        type=click.IntRange(min=1, max=MAX_REPEAT),
        metavar="N",
        help=f"Time compilation and N executions (at most {MAX_REPEAT:,}; the runs stop once "
        f"they have taken {REPEAT_BUDGET_S:g} s).",
    ),
    save_inputs_option,
    option(
        "--profile",
        metavar="DIR",
        type=OUT_ARG,
        help="Write JAX's profiler trace of the run into DIR (TensorBoard, XProf, Perfetto); "
        "XLA's operations are named after the jaxpr's FILE:LINE:COL, and the device time of "
        "each, with the equations it computes, is tabled on standard error.",
    ),
]
