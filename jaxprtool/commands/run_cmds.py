"""`jaxprtool run`, `compile` and `trace`: the XLA back end (jax is imported lazily)."""

from __future__ import annotations

import contextlib
import io
import re
import sys
import time
import zipfile

import click

from ..cli import guarded, require_jax
from ..core import JaxprError, ShapedArray, np_dtype, short_dtype_name
from ..io import UsageError, progress, write_output
from ..lazy import np
from .common import FILE_ARG, OUT_ARG, load
from .mesh_options import mesh_options

DEVICES = click.Choice(["cpu", "gpu"])


def cache_option(fn):
    """`--no-cache`: JAX's persistent compilation cache is on by default (its folder in --help)."""
    from ..compile_cache import folder_for_help

    return click.option(
        "--no-cache",
        is_flag=True,
        help="Do not use JAX's persistent compilation cache (on by default, so a second run "
        f"of a program on the same device skips XLA compilation; folder: {folder_for_help()}).",
    )(fn)


# ---------------------------------------------------------------- inputs


def parse_dims(specs) -> dict[str, int]:
    dims: dict[str, int] = {}
    for spec in specs or ():
        for part in spec.split(","):
            part = part.strip()
            if not part:
                continue
            name, eq, val = part.partition("=")
            if not eq or not name.strip().isidentifier() or not val.strip().lstrip("-").isdigit():
                raise UsageError(f"bad --dim '{part}': expected NAME=INT, e.g. --dim b=4,n=8")
            dims[name.strip()] = int(val)
    return dims


def _read_array_file(path: str, what: str):
    """np.load of a file or `-` (standard input), read whole first: pipes and process
    substitutions are not seekable.  Never unpickles (allow_pickle=False)."""
    try:
        if path == "-":
            data = sys.stdin.buffer.read()
        else:
            with open(path, "rb") as f:
                data = f.read()
    except FileNotFoundError:
        raise JaxprError(f"cannot read {what} file '{path}': no such file") from None
    except OSError as e:
        raise JaxprError(f"cannot read {what} file '{path}': {e.strerror}") from None
    name = "standard input" if path == "-" else f"'{path}'"
    if not data:
        raise JaxprError(f"cannot read {what} from {name}: it is empty")
    try:
        return np.load(io.BytesIO(data), allow_pickle=False)
    except ValueError as e:
        raise JaxprError(f"cannot read {what} from {name}: {_why(e)}") from None
    except (OSError, EOFError) as e:
        raise JaxprError(
            f"cannot read {what} from {name}: truncated or not numpy data ({e})"
        ) from None


def _load_npz(path: str, what: str) -> dict[str, np.ndarray]:
    f = _read_array_file(path, what)
    if not isinstance(f, np.lib.npyio.NpzFile):
        raise JaxprError(
            f"{what} file '{path}' is not an .npz archive (use --arg for a single .npy array)"
        )
    try:
        with f:
            return {k: f[k] for k in f.files}
    except ValueError as e:
        raise JaxprError(f"cannot read {what} file '{path}': {_why(e)}") from None
    except (OSError, EOFError, zipfile.BadZipFile) as e:
        raise JaxprError(f"cannot read {what} file '{path}': truncated or corrupt ({e})") from None


def _why(e: ValueError) -> str:
    if "Object arrays" in str(e):
        return "it holds an array of Python objects; only plain numeric arrays are read"
    if "pickled data" in str(e) or "allow_pickle" in str(e):
        return "it is not .npy or .npz data (pickles and other formats are never read)"
    return str(e)


def _npz_list(d: dict[str, np.ndarray], prefix: str, path: str) -> list[np.ndarray]:
    """arrays keyed PREFIX0.. (or np.savez's arr_0..), in order."""
    for pre in (prefix, "arr_"):
        keys = [k for k in d if re.fullmatch(re.escape(pre) + r"\d+", k)]
        if keys:
            idx = sorted(int(k[len(pre) :]) for k in keys)
            if idx != list(range(len(idx))):
                raise JaxprError(f"'{path}': keys {pre}0..{pre}{len(idx) - 1} must all be present")
            extra = sorted(set(d) - set(keys))
            if extra:
                raise JaxprError(
                    f"'{path}': unexpected keys {', '.join(extra)} (expected {pre}0, {pre}1, ...)"
                )
            return [d[f"{pre}{i}"] for i in idx]
    if not d:
        return []
    raise JaxprError(
        f"'{path}': expected keys {prefix}0, {prefix}1, ... (or arr_0, ...), found {', '.join(sorted(d))}"
    )


def _load_npy(path: str) -> np.ndarray:
    a = _read_array_file(path, "argument")
    if not isinstance(a, np.ndarray):
        raise JaxprError(f"argument file '{path}' is not a single .npy array")
    return a


def _var_name(v, i: int, prefix: str) -> str:
    return v.hint or f"{prefix}{i}"


def bind_dims(vars_, arrays, dims: dict[str, int]) -> dict[str, int]:
    """Sizes of plain symbolic dims (`b`) read off the given arrays, when --dim does not set them."""
    dims = dict(dims)
    for v, a in zip(vars_, arrays):
        t = v.type
        if not isinstance(t, ShapedArray) or np.ndim(a) != len(t.shape):
            continue
        for d, n in zip(t.shape, np.shape(a)):
            if isinstance(d, str) and d.strip().isidentifier() and d.strip() not in dims:
                dims[d.strip()] = int(n)
    return dims


def _as_ml_dtype(a: np.ndarray, want: np.dtype) -> np.ndarray:
    """bf16/f8 arrays saved with np.savez come back as raw void arrays (`|V2`): read them as
    the dtype the program expects when the sizes agree."""
    if (
        a.dtype.kind == "V"
        and a.dtype.names is None
        and want.kind == "V"
        and a.dtype.itemsize == want.itemsize
    ):
        return a.view(want)
    return a


def check_arrays(vars_, arrays, dims, what: str = "argument") -> list[np.ndarray]:
    """Type/shape check of arrays against binders, with a clear message; returns the arrays."""
    from ..backend.values import static_shape, type_str

    if len(arrays) != len(vars_):
        raise JaxprError(f"expected {len(vars_)} {what}s, got {len(arrays)}")
    out = []
    for i, (v, a) in enumerate(zip(vars_, arrays)):
        t = v.type
        if not isinstance(t, ShapedArray):
            raise JaxprError(
                f"{what} {i} ({_var_name(v, i, what[:3])}): cannot pass a value of type {t}"
            )
        want_shape = static_shape(t, dims)
        if t.dtype.startswith("key<"):
            from ..backend.keys import data_shape

            want_shape, want_dtype = data_shape(t, want_shape), np.dtype(np.uint32)
        else:
            want_dtype = t.np_dtype
        a = _as_ml_dtype(np.asarray(a), want_dtype)
        if a.dtype != want_dtype or a.shape != want_shape:
            got = type_str(a.shape, a.dtype)
            want = (
                f"{t} (key data {type_str(want_shape, want_dtype)})"
                if t.dtype.startswith("key<")
                else str(t)
            )
            raise JaxprError(
                f"{what} {i} ({_var_name(v, i, what[:3])}): expected {want}, got {got}"
            )
        out.append(a)
    return out


def gather_inputs(jaxpr, args_npz, arg_files, seed, consts_npz, dims, inline=None):
    """The arguments and constants of a run, from one source: --args, --arg, --input
    (`inline`: arrays already parsed) or --random.  A program whose types need more memory
    than the limit is refused first (`backend/limits.py`)."""
    from ..backend.limits import check_memory
    from ..backend.values import random_array

    sources = sum(x is not None and x != () for x in (args_npz, arg_files or None, seed, inline))
    if sources > 1:
        raise UsageError("give only one of --args, --arg, --input and --random")
    check_memory(jaxpr, dims)
    rng = np.random.default_rng(seed) if seed is not None else None
    if inline is not None:
        args = list(inline)
    elif args_npz is not None:
        args = _npz_list(_load_npz(args_npz, "arguments"), "arg", args_npz)
    elif arg_files:
        args = [_load_npy(p) for p in arg_files]
    elif rng is not None:
        args = None
    else:
        args = []
        if jaxpr.invars:
            names = " ".join(_var_name(v, i, "arg") for i, v in enumerate(jaxpr.invars))
            raise JaxprError(
                f"expected {len(jaxpr.invars)} arguments ({names}), got 0: pass --args IN.npz, "
                "--arg X.npy, --input 'TYPE=VALUES' or --random SEED"
            )
    from ..backend.consts import all_constvars, check_count

    every = all_constvars(jaxpr)
    if consts_npz is not None:
        consts = _npz_list(_load_npz(consts_npz, "constants"), "const", consts_npz)
    elif jaxpr.constvars and rng is None:
        raise JaxprError(_missing_consts(jaxpr))
    else:
        consts = None
    if args is not None:
        if len(args) != len(jaxpr.invars):
            raise JaxprError(f"expected {len(jaxpr.invars)} arguments, got {len(args)}")
        dims = bind_dims(jaxpr.invars, args, dims)
    cvars = every if rng is not None else list(jaxpr.constvars)
    if consts is not None:
        check_count(jaxpr, len(consts))
        cvars = every if len(consts) == len(every) else list(jaxpr.constvars)
        dims = bind_dims(cvars, consts, dims)
    if args is None:
        args = [random_array(_shaped(v), rng, dims) for v in jaxpr.invars]
    if consts is None:
        consts = [random_array(_shaped(v), rng, dims) for v in cvars]
    args = check_arrays(jaxpr.invars, args, dims, "argument")
    consts = check_arrays(cvars, consts, dims, "constant")
    return args, consts, dims


def _missing_consts(jaxpr) -> str:
    """The program's constants without values: their names, types and where they are
    declared, and how to save and pass them."""
    vs = jaxpr.constvars
    names = ", ".join(f"{_var_name(v, i, 'const')}:{v.type}" for i, v in enumerate(vs))
    return (
        f"the program has {len(vs)} constant{'s' if len(vs) != 1 else ''} (the binders before "
        "the ';' of its lambda and of the jitted bodies it calls) whose values the text does "
        f"not contain: {names}; pass --consts C.npz (keys const0, const1, ...; "
        "`jaxprtool trace MODULE:FUNCTION --consts-out C.npz` saves them when printing the "
        "program) or --random SEED"
    )


def _shaped(v):
    if not isinstance(v.type, ShapedArray):
        raise JaxprError(f"cannot make a random value of type {v.type}")
    return v.type


# ---------------------------------------------------------------- outputs


def save_npz(outs, path: str) -> None:
    """Outputs to `path`: an .npz archive (out0, out1, ...), or one array for an .npy path."""
    buf = io.BytesIO()
    if path.endswith(".npy"):
        if len(outs) != 1:
            raise JaxprError(
                f"cannot write {len(outs)} outputs to the single-array file '{path}': "
                "use an .npz path"
            )
        np.save(buf, np.asarray(outs[0]), allow_pickle=False)
    else:
        np.savez(buf, **{f"out{i}": np.asarray(o) for i, o in enumerate(outs)})
    write_output(buf.getvalue(), path)


def print_summary(outs, jaxpr) -> None:
    from rich.table import Table

    from ..backend.values import summary, type_str
    from ..io import console

    table = Table(title=f"{len(outs)} output{'s' if len(outs) != 1 else ''}", show_lines=False)
    for col in ("#", "type", "values", "min", "max", "mean", "NaN"):
        table.add_column(
            col, justify="right" if col in ("#", "min", "max", "mean", "NaN") else "left"
        )
    for i, o in enumerate(outs):
        s = summary(o)
        vals = ", ".join(f"{v:.6g}" if isinstance(v, float) else str(v) for v in s["values"])
        if s["size"] > len(s["values"]):
            vals += ", ..."
        table.add_row(
            f"out{i}",
            type_str(s["shape"], np.asarray(o).dtype) if s["dtype"] != "float0" else "float0",
            vals,
            f"{s['min']:.6g}" if "min" in s else "",
            f"{s['max']:.6g}" if "max" in s else "",
            f"{s['mean']:.6g}" if "mean" in s else "",
            str(s.get("nan", "")),
        )
    from ..ui.tables import print_table

    print_table(console(sys.stdout), table)


# ---------------------------------------------------------------- run


@click.command()
@click.argument("file", required=False, type=FILE_ARG)
@click.option("--device", type=DEVICES, default="cpu", show_default=True, help="Where to run.")
@click.option(
    "--args",
    "args_npz",
    metavar="IN.npz",
    type=FILE_ARG,
    help="Arguments: keys arg0, arg1, ... (or arr_0, ...).",
)
@click.option(
    "--arg",
    "arg_files",
    multiple=True,
    metavar="X.npy",
    type=FILE_ARG,
    help="One argument (repeat, in order).",
)
@click.option(
    "--random", "seed", type=int, metavar="SEED", help="Random arguments (and constants)."
)
@click.option(
    "--consts",
    "consts_npz",
    metavar="C.npz",
    type=FILE_ARG,
    help="Constants: keys const0, const1, ...",
)
@click.option(
    "--dim", "dim_specs", multiple=True, metavar="b=4,n=8", help="Sizes of symbolic dimensions."
)
@click.option(
    "--input",
    "inputs",
    multiple=True,
    metavar="TYPE=VALUES",
    help="One argument inline, in order (repeat): 'f32[2,3]=1 2 3 4 5 6', 'f32[]=0.5', "
    "'i32[4]=7' (one value fills the array), or @X.npy.",
)
@click.option(
    "-o",
    "--output",
    metavar="OUT",
    type=OUT_ARG,
    help="Write the outputs out0, out1, ... here (an .npz; an .npy for one output; a "
    "folder with --output-format npy-dir; JSON with --output-format json).",
)
@click.option(
    "--output-format",
    type=click.Choice(["npz", "npy-dir", "json"]),
    default=None,
    help="Format of -o (default: from its name; json without -o: standard output).",
)
@click.option(
    "--print-values",
    type=click.Choice(["full", "summary", "none"]),
    default=None,
    help="Print the outputs: every value, a table (the default without -o), or nothing "
    "(the default with -o).",
)
@click.option(
    "--expected-output",
    "expected",
    metavar="OUT.npz",
    type=FILE_ARG,
    help="Compare the outputs with these (out0, out1, ...; an .npy for one output): exit 1 "
    "and a table of the outputs that differ.",
)
@click.option(
    "--rtol",
    type=click.FloatRange(min=0),
    default=1e-5,
    show_default=True,
    help="Relative tolerance of --expected-output (floats).",
)
@click.option(
    "--atol",
    type=click.FloatRange(min=0),
    default=1e-8,
    show_default=True,
    help="Absolute tolerance of --expected-output (floats; integers compare exactly).",
)
@click.option(
    "--eager", is_flag=True, help="Run op by op, with control flow interpreted in Python."
)
@click.option(
    "--trace", "trace_", is_flag=True, help="With --eager: print every equation's result."
)
@click.option(
    "--debug-nans", is_flag=True, help="With --eager: stop at the first equation producing NaN/inf."
)
@click.option(
    "--repeat", type=click.IntRange(min=1), metavar="N", help="Time compilation and N executions."
)
@cache_option
@guarded
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
    no_cache,
):
    """Run FILE through XLA (via JAX) on the given inputs.

    \b
    Example:
      jaxprtool run mlp.jaxpr --random 0
      jaxprtool run f.jaxpr --args in.npz -o out.npz
      jaxprtool run f.jaxpr --input 'f32[2,3]=1 2 3 4 5 6' --input 'f32[]=0.5'
      jaxprtool run f.jaxpr --args in.npz --expected-output want.npz --atol 1e-6
      jaxprtool run f.jaxpr --random 0 --output-format json --print-values none
      jaxprtool run f.jaxpr --random 0 --eager --debug-nans
      jaxprtool run sharded.jaxpr --random 0 --mesh x=4,y=2 --show-sharding
    """
    from .. import backend, compile_cache
    from ..consts_order import number_constants
    from . import run_io

    dims = parse_dims(dim_specs)
    if (trace_ or debug_nans) and repeat:
        raise UsageError(
            "--repeat times compiled runs; it does not combine with --trace/--debug-nans"
        )
    inline = [run_io.parse_input(spec) for spec in inputs] if inputs else None
    if output_format == "json" and output in (None, "-") and print_values not in (None, "none"):
        raise UsageError("JSON goes to standard output without -o: use --print-values none")
    require_jax()
    jaxpr, _, _ = load(file)
    jaxpr = number_constants(jaxpr).program  # nested jaxprs' constants come with --consts
    backend.check_runnable(jaxpr)
    compile_cache.configure(not no_cache)
    args, consts, dims = gather_inputs(
        jaxpr, args_npz, arg_files, seed, consts_npz, dims, inline=inline
    )
    with progress(f"running {file or '<stdin>'}"):
        if eager or trace_ or debug_nans:
            tr = (lambda line: click.echo(line)) if trace_ else None
            outs = backend.eval_eager(
                jaxpr, args, consts, trace=tr, debug_nans=debug_nans, dims=dims, device=device
            )
        elif repeat:
            outs = _timed(jaxpr, args, consts, dims, device, repeat)
        else:
            outs = backend.evaluate(jaxpr, args, consts, device=device, dims=dims)
    writes = output is not None or output_format is not None
    if writes:
        run_io.write_outputs(outs, output, output_format)
    shown = print_values or ("none" if writes else "summary")
    if shown == "summary":
        print_summary(outs, jaxpr)
    elif shown == "full":
        run_io.print_full(outs)
    if expected is not None:
        want = run_io.load_expected(expected, len(outs))
        rows = run_io.compare(outs, want, rtol, atol)
        if rows:
            run_io.render_mismatches(rows, expected, rtol, atol)
            raise JaxprError(run_io.mismatch_message(rows, len(outs), expected, rtol, atol))
        click.echo(
            f"all {len(outs)} output{'s' if len(outs) != 1 else ''} match '{expected}' "
            f"(rtol={rtol:g}, atol={atol:g})",
            err=True,
        )


def _timed(jaxpr, args, consts, dims, device, repeat):
    import jax

    from .. import backend
    from ..backend import sharding

    backend.check_runnable(jaxpr)
    multi = sharding.is_multi_device(jaxpr)
    scope = sharding.run_scope(jaxpr, device) if multi else contextlib.nullcontext()
    with scope, backend.x64_scope(jaxpr):
        if multi:
            xs = sharding.placed_inputs(jaxpr, list(consts) + list(args))
        else:
            dev = backend.get_device(device)
            xs = [jax.device_put(x, dev) for x in list(consts) + list(args)]
        t0 = time.perf_counter()
        nested = len(consts) != len(jaxpr.constvars)  # cond/loop bodies' too (backend/consts)
        fn = backend.as_jax_function(jaxpr, dims, enable_x64=False, nested=nested)
        compiled = jax.jit(fn).lower(*xs).compile()
        t_compile = time.perf_counter() - t0
        times = []
        outs = None
        for _ in range(repeat):
            t0 = time.perf_counter()
            outs = jax.block_until_ready(compiled(*xs))
            times.append(time.perf_counter() - t0)
    click.echo(
        f"compile: {t_compile * 1e3:.2f} ms; run x{repeat}: median {np.median(times) * 1e3:.3f} ms, "
        f"min {min(times) * 1e3:.3f} ms, max {max(times) * 1e3:.3f} ms",
        err=True,
    )
    if multi:
        sharding.CONFIG.last_shardings = [getattr(o, "sharding", None) for o in outs]
        return [sharding.gather(o) for o in outs]
    return [np.asarray(o) for o in outs]


# ---------------------------------------------------------------- compile


def shape_structs(jaxpr, dims, constvars=None):
    """The parameters' shapes: `constvars` (by default the program's) then the inputs."""
    import jax

    from ..backend.values import static_shape

    out = []
    for v in list(jaxpr.constvars if constvars is None else constvars) + list(jaxpr.invars):
        if not isinstance(v.type, ShapedArray):
            raise JaxprError(f"cannot compile an input of type {v.type}")
        shape = static_shape(v.type, dims)
        if v.type.dtype.startswith("key<"):
            from ..backend.keys import data_shape

            out.append(jax.ShapeDtypeStruct(data_shape(v.type, shape), np.uint32))
        else:
            out.append(jax.ShapeDtypeStruct(shape, v.type.np_dtype))
    return out


@click.command(name="compile")
@click.argument("file", required=False, type=FILE_ARG)
@click.option(
    "--emit",
    type=click.Choice(["stablehlo", "hlo", "optimized-hlo"]),
    default="stablehlo",
    show_default=True,
)
@click.option("--device", type=DEVICES, default="cpu", show_default=True, help="Target platform.")
@click.option(
    "--dim", "dim_specs", multiple=True, metavar="b=4,n=8", help="Sizes of symbolic dimensions."
)
@click.option(
    "--stats", is_flag=True, help="Print cost (flops, bytes accessed) and memory analysis."
)
@click.option(
    "-o",
    "--output",
    metavar="OUT",
    type=OUT_ARG,
    help="Write the IR here (default: standard output).",
)
@cache_option
@guarded
@mesh_options(distributed=False, show=False)
def compile_(file, emit, device, dim_specs, stats, output, no_cache):
    """Lower FILE to StableHLO / HLO, or compile it to optimised HLO.

    \b
    Example:
      jaxprtool compile mlp.jaxpr --emit stablehlo
      jaxprtool compile mlp.jaxpr --emit stablehlo --device gpu     # no GPU needed
      jaxprtool compile mlp.jaxpr --emit optimized-hlo --stats
      jaxprtool compile sharded.jaxpr --emit optimized-hlo --stats --mesh x=4,y=2
    """
    from .. import backend, compile_cache
    from ..consts_order import number_constants

    require_jax()
    dims = parse_dims(dim_specs)
    jaxpr, _, _ = load(file)
    jaxpr = number_constants(jaxpr).program  # parameters: every constant in order, the inputs
    backend.check_runnable(jaxpr)
    # a cached executable's optimised HLO carries the source metadata of the process that
    # compiled it (a `run`'s stack), so the text it prints would depend on the cache's history
    compile_cache.configure(not no_cache and emit != "optimized-hlo")
    with backend.x64_scope(jaxpr), progress(f"compiling {file or '<stdin>'} ({emit})"):
        text, compiled = _compile(jaxpr, emit, device, dims, stats)
    write_output(text, output)
    if stats:
        click.echo(format_stats(compiled), err=output in (None, "-"))


def _compile(jaxpr, emit, device, dims, stats):
    import jax

    from .. import backend
    from ..backend import sharding
    from ..backend.consts import all_constvars

    multi = sharding.is_multi_device(jaxpr)
    every = all_constvars(jaxpr)
    nested = not multi and len(every) > len(jaxpr.constvars)  # cond/loop bodies' constants
    structs = shape_structs(jaxpr, dims, every if nested else None)
    platform = "cuda" if device == "gpu" else "cpu"
    needs_device = emit == "optimized-hlo" or stats
    if needs_device and not multi:
        backend.get_device(device)
    scope = sharding.run_scope(jaxpr, device) if multi else contextlib.nullcontext()
    try:
        with scope:
            if multi:
                structs = sharding.sharded_structs(jaxpr, structs)
            fn = jax.jit(backend.as_jax_function(jaxpr, dims, enable_x64=False, nested=nested))
            lowered = fn.trace(*structs).lower(lowering_platforms=(platform,))
    except JaxprError:
        raise
    except Exception as e:  # noqa: BLE001
        raise JaxprError(
            f"lowering for {device} failed: {type(e).__name__}: {str(e).splitlines()[0]}"
        ) from e
    if emit == "stablehlo":
        text = lowered.as_text()
    elif emit == "hlo":
        text = lowered.as_text(dialect="hlo")
    compiled = None
    if needs_device:
        compiled = lowered.compile()
    if emit == "optimized-hlo":
        text = compiled.as_text()
    if not text.endswith("\n"):
        text += "\n"
    return text, compiled


def format_stats(compiled) -> str:
    lines = []
    cost = compiled.cost_analysis()
    if isinstance(cost, (list, tuple)):
        cost = cost[0] if cost else {}
    cost = cost or {}
    lines.append(f"flops: {cost.get('flops', float('nan')):.6g}")
    lines.append(f"bytes accessed: {cost.get('bytes accessed', float('nan')):.6g}")
    for k in ("transcendentals", "optimal_seconds"):
        if k in cost:
            lines.append(f"{k}: {cost[k]:.6g}")
    mem = compiled.memory_analysis()
    if mem is not None:
        for k in (
            "argument_size_in_bytes",
            "output_size_in_bytes",
            "temp_size_in_bytes",
            "alias_size_in_bytes",
            "generated_code_size_in_bytes",
        ):
            if hasattr(mem, k):
                lines.append(
                    f"{k.replace('_in_bytes', '').replace('_', ' ')} bytes: {getattr(mem, k)}"
                )
    from ..backend.sharding import collective_lines

    lines += collective_lines(compiled)
    return "\n".join(lines)


# ---------------------------------------------------------------- trace

_SPEC = re.compile(r"^\s*([A-Za-z0-9_]+)\[([0-9,\s]*)\]\s*$")


def parse_spec(spec: str):
    import jax

    m = _SPEC.match(spec)
    if not m:
        raise UsageError(f"bad --arg '{spec}': expected a type such as f32[3,4] or i32[]")
    try:
        dt = np_dtype(m.group(1)) if m.group(1) != "float32" else np.dtype("float32")
    except KeyError:
        try:
            dt = np_dtype(short_dtype_name(m.group(1)))
        except KeyError:
            raise UsageError(f"bad --arg '{spec}': unknown dtype '{m.group(1)}'") from None
    shape = tuple(int(x) for x in m.group(2).split(",") if x.strip())
    return jax.ShapeDtypeStruct(shape, dt)


@click.command()
@click.argument("target", metavar="MODULE:FUNCTION")
@click.option(
    "--arg",
    "specs",
    multiple=True,
    metavar="TYPE",
    help="An argument type, e.g. 'f32[3,4]' (repeat).",
)
@click.option(
    "--args",
    "args_npz",
    metavar="IN.npz",
    type=FILE_ARG,
    help="Example arguments (arg0, arg1, ...).",
)
@click.option(
    "-o",
    "--output",
    metavar="OUT.jaxpr",
    type=OUT_ARG,
    help="Write here (default: standard output).",
)
@click.option(
    "--consts-out",
    "consts_out",
    metavar="C.npz",
    type=OUT_ARG,
    help="Save the values of the program's constants, nested jaxprs' included "
    "(const0, const1, ...; read back by run --consts).",
)
@guarded
def trace(target, specs, args_npz, output, consts_out):
    """Import MODULE (from the current folder) and print the jaxpr of FUNCTION.

    \b
    Example:
      jaxprtool trace model:loss --arg 'f32[8,4]' --arg 'f32[8]' > loss.jaxpr
      jaxprtool trace model:loss --arg 'f32[8,4]' --consts-out c.npz -o loss.jaxpr
    """
    import importlib
    import os

    module, sep, func = target.partition(":")
    if not sep or not module or not func:
        raise UsageError(f"bad target '{target}': expected MODULE:FUNCTION")
    if specs and args_npz:
        raise UsageError("give either --arg types or --args IN.npz, not both")
    require_jax()
    import jax

    if args_npz:
        args = _npz_list(_load_npz(args_npz, "arguments"), "arg", args_npz)
    else:
        args = [parse_spec(s) for s in specs]
    import contextlib

    wide = any(np.dtype(a.dtype).name in ("float64", "int64", "uint64", "complex128") for a in args)
    scope = jax.enable_x64(True) if wide else contextlib.nullcontext()
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        mod = importlib.import_module(module)
    except ImportError as e:
        raise JaxprError(f"cannot import module '{module}': {e}") from None
    fn = mod
    for part in func.split("."):
        if not hasattr(fn, part):
            raise JaxprError(f"module '{module}' has no attribute '{func}'")
        fn = getattr(fn, part)
    if not callable(fn):
        raise JaxprError(f"'{target}' is not callable")
    try:
        with scope:
            j = jax.make_jaxpr(fn)(*args)
    except Exception as e:  # noqa: BLE001 - the user's function failed to trace
        raise JaxprError(f"tracing '{target}' failed: {type(e).__name__}: {e}") from None
    text, ours, rule_consts = _with_custom_rules(j, target)
    if consts_out is not None:
        values = _const_values(j, ours, rule_consts, text, target)
        buf = io.BytesIO()
        np.savez(buf, **{f"const{i}": np.asarray(v) for i, v in enumerate(values)})
        write_output(buf.getvalue(), consts_out)
    write_output(text + "\n", output)


def _with_custom_rules(closed, target: str):
    """JAX's printout of `closed`; when it has custom_jvp/custom_vjp calls, the tool's
    printout of the same program with each call's traced rules added
    (`backend/custom_rules.py`), so that the AD commands differentiate as JAX does.
    Returns (text, the program the text was printed from, the rules' constants)."""
    from ..core import all_eqns
    from ..record import prim as record_of
    from ..text.parser import parse

    text = str(closed)
    parsed = parse(text, f"<trace {target}>")
    if not any(record_of(e.prim).traced_rules for e in all_eqns(parsed.jaxpr)):
        return text, parsed.jaxpr, {}
    from ..backend.custom_rules import annotate
    from ..io import warn
    from ..text.printer import print_jaxpr
    from ..text.style import detect_style

    rule_consts = annotate(closed, parsed.jaxpr, lambda msg, eqn: warn(msg, eqn.loc))
    return print_jaxpr(parsed.jaxpr, detect_style(parsed.jaxpr)), parsed.jaxpr, rule_consts


def _const_values(closed, ours, rule_consts: dict, text: str, target: str) -> list:
    """The values of the constants of `ours` as `run --consts` numbers them
    (`consts_order.number_constants`), each the value of the constvar of `ours` it stands
    for: the program's own (`closed.consts`), a nested jaxpr's (read off JAX's matching
    nested jaxpr) or a recorded custom rule's."""
    from ..consts_order import number_constants
    from ..text.parser import parse

    values: dict[int, list] = dict(rule_consts)
    values[id(ours)] = list(getattr(closed, "consts", ()))
    _match_nested(getattr(closed, "jaxpr", closed), ours, values, set())
    by_var, lacking = _values_by_var(ours, values)
    numbered = number_constants(ours)
    out = []
    for v in numbered.constvars:
        source = numbered.sources.get(id(v), v)
        if id(source) not in by_var:
            eqn = lacking[id(source)]
            raise JaxprError(
                f"cannot save the constants of the jaxpr nested in '{eqn.prim}': no values "
                "for them were found in the traced program",
                eqn.loc,
            )
        out.append(by_var[id(source)])
    reread = number_constants(parse(text, f"<trace {target}>").jaxpr)
    if [str(v.type) for v in reread.constvars] != [str(v.type) for v in numbered.constvars]:
        raise JaxprError("internal: the printed program's constants differ from the traced ones")
    return out


def _values_by_var(ours, values: dict) -> tuple[dict, dict]:
    """The value of each constvar of `ours` and of its nested jaxprs, by `id` of the
    constvar (from `values`, by `id` of the jaxpr), and the equation using each nested
    jaxpr whose values are missing, by `id` of its constvars."""
    from ..core import all_eqns, eqn_subjaxprs

    if len(values[id(ours)]) != len(ours.constvars):
        raise JaxprError("internal: the printed program's constants differ from the traced ones")
    by_var = {id(v): x for v, x in zip(ours.constvars, values[id(ours)])}
    lacking: dict[int, object] = {}
    for e in all_eqns(ours):
        for sub in eqn_subjaxprs(e):
            got = values.get(id(sub))
            if got is not None and len(got) == len(sub.constvars):
                by_var.update((id(v), x) for v, x in zip(sub.constvars, got))
            else:
                lacking.update((id(v), e) for v in sub.constvars)
    return by_var, lacking


def _match_nested(live, mine, values: dict, seen: set) -> None:
    """Walk JAX's jaxpr `live` and the tool's parse `mine` of its printout together,
    recording each nested jaxpr's constants (JAX 0.12 keeps them on the jaxpr,
    older versions on a ClosedJaxpr) by `id` of the tool's jaxpr."""
    from ..core import subjaxprs

    if id(mine) in seen:
        return
    seen.add(id(mine))
    if len(live.eqns) != len(mine.eqns):
        raise JaxprError("internal: the printed program does not match the traced one")
    for le, me in zip(live.eqns, mine.eqns):
        for k in sorted(le.params):
            theirs = list(_live_subjaxprs(le.params[k]))
            ours = subjaxprs(me.params.get(k))
            if len(theirs) != len(ours):
                raise JaxprError(
                    f"internal: '{me.prim}' parameter {k}: the printed jaxprs do not match",
                    me.loc,
                )
            for (lj, consts), mj in zip(theirs, ours):
                if mj.constvars and id(mj) not in values:
                    values[id(mj)] = list(consts)
                _match_nested(lj, mj, values, seen)


def _live_subjaxprs(v):
    """(jaxpr, consts) for each JAX jaxpr inside a parameter value."""
    if hasattr(v, "eqns"):
        yield v, list(getattr(v, "consts", ()) or ())
    elif hasattr(v, "jaxpr") and hasattr(v.jaxpr, "eqns"):
        yield v.jaxpr, list(v.consts)
    elif isinstance(v, (tuple, list)):
        for x in v:
            yield from _live_subjaxprs(x)
