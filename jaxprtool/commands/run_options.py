"""The options of `run` and `compile` and how their values are read: the device, the
compilation cache, symbolic dimension sizes (`--dim`) and the list of `run`'s options
(`run_options`), kept apart from what the commands do with them."""

from __future__ import annotations

import click

from ..io import UsageError
from .common import FILE_ARG, OUT_ARG

DEVICES = click.Choice(["cpu", "gpu"])
#: the most runs `--repeat` times, and the seconds after which its runs stop
MAX_REPEAT = 1_000_000
REPEAT_BUDGET_S = 60.0


def cache_option(fn):
    """`--no-cache`: JAX's persistent compilation cache is on by default (its folder in --help)."""
    from ..compile_cache import folder_for_help

    return click.option(
        "--no-cache",
        is_flag=True,
        help="Do not use JAX's persistent compilation cache (on by default, so a second run "
        f"of a program on the same device skips XLA compilation; folder: {folder_for_help()}).",
    )(fn)


def dim_option(fn):
    """`--dim b=4,n=8` (repeatable), read by `parse_dims`."""
    return click.option(
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
    for option in reversed(_RUN_OPTIONS):
        fn = option(fn)
    return fn


_RUN_OPTIONS = [
    click.option("--device", type=DEVICES, default="cpu", show_default=True, help="Where to run."),
    click.option(
        "--args",
        "args_npz",
        metavar="IN.npz",
        type=FILE_ARG,
        help="Arguments: keys arg0, arg1, ... (or arr_0, ...).",
    ),
    click.option(
        "--arg",
        "arg_files",
        multiple=True,
        metavar="X.npy",
        type=FILE_ARG,
        help="One argument (repeat, in order).",
    ),
    click.option(
        "--random",
        "seed",
        type=click.IntRange(min=0),
        metavar="SEED",
        help="Random arguments (and constants).",
    ),
    click.option(
        "--consts",
        "consts_npz",
        metavar="C.npz",
        type=FILE_ARG,
        help="Constants: keys const0, const1, ...",
    ),
    dim_option,
    click.option(
        "--input",
        "inputs",
        multiple=True,
        metavar="TYPE=VALUES",
        help="One argument inline, in order (repeat): 'f32[2,3]=1 2 3 4 5 6', 'f32[]=0.5', "
        "'i32[4]=7' (one value fills the array), or @X.npy.",
    ),
    click.option(
        "-o",
        "--output",
        metavar="OUT",
        type=OUT_ARG,
        help="Write the outputs out0, out1, ... here (an .npz; an .npy for one output; a "
        "folder with --output-format npy-dir; JSON with --output-format json).",
    ),
    click.option(
        "--output-format",
        type=click.Choice(["npz", "npy-dir", "json"]),
        default=None,
        help="Format of -o (default: from its name; json without -o: standard output).",
    ),
    click.option(
        "--print-values",
        type=click.Choice(["full", "summary", "none"]),
        default=None,
        help="Print the outputs: every value, a table (the default without -o), or nothing "
        "(the default with -o).",
    ),
    click.option(
        "--expected-output",
        "expected",
        metavar="OUT.npz",
        type=FILE_ARG,
        help="Compare the outputs with these (out0, out1, ...; an .npy for one output): exit 1 "
        "and a table of the outputs that differ.",
    ),
    click.option(
        "--rtol",
        type=click.FloatRange(min=0),
        default=1e-5,
        show_default=True,
        help="Relative tolerance of --expected-output (floats).",
    ),
    click.option(
        "--atol",
        type=click.FloatRange(min=0),
        default=1e-8,
        show_default=True,
        help="Absolute tolerance of --expected-output (floats; integers compare exactly).",
    ),
    click.option(
        "--eager", is_flag=True, help="Run op by op, with control flow interpreted in Python."
    ),
    click.option(
        "--trace", "trace_", is_flag=True, help="With --eager: print every equation's result."
    ),
    click.option(
        "--debug-nans",
        is_flag=True,
        help="With --eager: stop at the first equation producing NaN/inf.",
    ),
    click.option(
        "--repeat",
        type=click.IntRange(min=1, max=MAX_REPEAT),
        metavar="N",
        help=f"Time compilation and N executions (at most {MAX_REPEAT:,}; the runs stop once "
        f"they have taken {REPEAT_BUDGET_S:g} s).",
    ),
]
