"""The values a run is given: arrays read from .npy/.npz files (headers first, never
unpickled: `npfiles.py`), the arguments and constants gathered from
--args/--arg/--input/--random/--consts and checked against the program's types and the
memory limit before their data is read.  numpy only: nothing here imports jax."""

from __future__ import annotations

import re

from .core import JaxprError, ProgramError, ShapedArray
from .io import UsageError
from .lazy import np
from .npfiles import Declared, open_arrays, source_name


def memory_budget() -> int:
    from .backend.limits import default_limit

    return default_limit()


def declared_npz(path: str, what: str) -> dict[str, Declared]:
    """The members of an .npz archive, their data not read yet."""
    arrays = open_arrays(path, what, memory_budget())
    if isinstance(arrays, Declared):
        raise JaxprError(
            f"{what} file {source_name(path)} is not an .npz archive (use --arg for a single "
            ".npy array)"
        )
    return arrays


def declared_npy(path: str, what: str = "argument") -> Declared:
    """The array of an .npy file, its data not read yet."""
    array = open_arrays(path, what, memory_budget())
    if not isinstance(array, Declared):
        raise JaxprError(f"{what} file {source_name(path)} is not a single .npy array")
    return array


def read_all(declared: list, what: str) -> list[np.ndarray]:
    """The data of declared arrays (arrays given as such pass through), once their total
    size is known to fit the memory limit."""
    from .backend.limits import human
    from .backend.values import type_str

    total = sum(d.nbytes for d in declared if isinstance(d, Declared))
    budget = memory_budget()
    if total > budget:
        big = max((d for d in declared if isinstance(d, Declared)), key=lambda d: d.nbytes)
        raise JaxprError(
            f"the {what} declare {human(total)} of data (the largest, {big.name}, "
            f"{type_str(big.shape, big.dtype)}), over the memory limit of {human(budget)} "
            "(set JAXPRTOOL_MAX_MEMORY to change it)"
        )
    return [d.read() if isinstance(d, Declared) else d for d in declared]


def load_npz(path: str, what: str) -> dict[str, np.ndarray]:
    arrays = declared_npz(path, what)
    return dict(zip(arrays, read_all(list(arrays.values()), what)))


def npz_list(d: dict[str, np.ndarray], prefix: str, path: str) -> list[np.ndarray]:
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


def npz_arguments(d: dict, invars, path: str) -> list:
    """The arguments of an --args archive: keyed by the program's input names (`a`, `b`,
    ... as the text binds them, like iree-run-module's named inputs) when its keys are
    exactly those names, else arg0, arg1, ... (or np.savez's arr_0, ...)."""
    names = [v.hint for v in invars]
    if d and all(names) and len(set(names)) == len(names) and set(d) == set(names):
        return [d[n] for n in names]
    return npz_list(d, "arg", path)


def load_npy(path: str) -> np.ndarray:
    return read_all([declared_npy(path)], "arguments")[0]


def var_name(v, i: int, prefix: str) -> str:
    return v.hint or f"{prefix}{i}"


def _shape_dtype(x) -> tuple[tuple[int, ...], np.dtype]:
    """The shape and dtype of an array or of a `Declared` one (its data not read)."""
    if isinstance(x, Declared):
        return x.shape, x.dtype
    x = np.asarray(x)
    return x.shape, x.dtype


def bind_dims(vars_, arrays, dims: dict[str, int]) -> dict[str, int]:
    """Sizes of plain symbolic dims (`b`) read off the given arrays (or their headers),
    when --dim does not set them."""
    from .backend.values import read_dims

    return read_dims(vars_, [_shape_dtype(a)[0] for a in arrays], dims)


def _as_ml_dtype(a: np.ndarray, want: np.dtype) -> np.ndarray:
    """bf16/f8 arrays saved with np.savez come back as raw void arrays (`|V2`): read them as
    the dtype the program expects when the sizes agree."""
    if _void_for(a.dtype, want):
        return a.view(want)
    return a


def _void_for(dtype: np.dtype, want: np.dtype) -> bool:
    return (
        dtype.kind == "V"
        and dtype.names is None
        and want.kind == "V"
        and dtype.itemsize == want.itemsize
    )


def check_arrays(vars_, arrays, dims, what: str = "argument") -> list:
    """Type/shape check of arrays (or `Declared` arrays, before their data is read) against
    binders, with a clear message; returns the arrays (bf16 data read as bf16)."""
    from .backend.values import static_shape, type_str

    if len(arrays) != len(vars_):
        raise ProgramError(f"expected {len(vars_)} {what}s, got {len(arrays)}", "inputs")
    out = []
    for i, (v, a) in enumerate(zip(vars_, arrays)):
        t = v.type
        if not isinstance(t, ShapedArray):
            raise JaxprError(
                f"{what} {i} ({var_name(v, i, what[:3])}): cannot pass a value of type {t}"
            )
        want_shape = static_shape(t, dims)
        if t.dtype.startswith("key<"):
            from .backend.keys import data_shape

            want_shape, want_dtype = data_shape(t, want_shape), np.dtype(np.uint32)
        else:
            want_dtype = t.np_dtype
        shape, dtype = _shape_dtype(a)
        if (dtype != want_dtype and not _void_for(dtype, want_dtype)) or shape != want_shape:
            got = type_str(shape, dtype)
            want = (
                f"{t} (key data {type_str(want_shape, want_dtype)})"
                if t.dtype.startswith("key<")
                else str(t)
            )
            where = f"input {i}" if what == "argument" and len(vars_) == len(arrays) else "inputs"
            raise ProgramError(
                f"{what} {i} ({var_name(v, i, what[:3])}): expected {want}, got {got}", where
            )
        out.append(a if isinstance(a, Declared) else _as_ml_dtype(np.asarray(a), want_dtype))
    return out


def gather_inputs(jaxpr, args_npz, arg_files, seed, consts_npz, dims, inline=None, drawn=None):
    """The arguments and constants of a run, from one source: --args, --arg, --input
    (`inline`: arrays, or `Declared` arrays whose data is not read yet) or --random.

    Nothing large is built before it is known to fit: the program's symbolic dimensions
    are evaluated and its memory need checked against the limit (`backend/limits.py`)
    first; files are read as headers, checked against the program's types, the dimensions
    they bind checked again, and only then is their data read.  `drawn`, a list, receives
    what a random draw did beyond N(0, 1) floats and integers in [1, 5) ("arg1:i32[4]
    integers in [0, 3) (gather at f.jaxpr:9:5)"), for `keep_point`'s note."""
    from .backend.consts import all_constvars, check_count
    from .backend.limits import check_memory
    from .backend.values import check_dims

    sources = sum(x is not None and x != () for x in (args_npz, arg_files or None, seed, inline))
    if sources > 1:
        raise UsageError("give only one of --args, --arg, --input and --random")
    check_dims(jaxpr, dims)
    check_memory(jaxpr, dims)
    drawn = [] if drawn is None else drawn
    rng = np.random.default_rng(seed) if seed is not None else None
    if inline is not None:
        args = list(inline)
    elif args_npz is not None:
        args = npz_arguments(declared_npz(args_npz, "arguments"), jaxpr.invars, args_npz)
    elif arg_files:
        args = [declared_npy(p) for p in arg_files]
    elif rng is not None:
        args = None
    else:
        args = []
        if jaxpr.invars:
            names = " ".join(var_name(v, i, "arg") for i, v in enumerate(jaxpr.invars))
            n = len(jaxpr.invars)
            raise ProgramError(
                f"the program takes {n} argument{'s' if n != 1 else ''} ({names}) and none "
                "was given: pass --random SEED, --input 'TYPE=VALUES' (one per argument), "
                "--arg X.npy (one per argument) or --args IN.npz (arg0, arg1, ...)",
                "inputs",
            )
    every = all_constvars(jaxpr)
    if consts_npz is not None:
        consts = npz_list(declared_npz(consts_npz, "constants"), "const", consts_npz)
    elif jaxpr.constvars and rng is None:
        raise JaxprError(_missing_consts(jaxpr))
    else:
        consts = None
    if args is not None:
        if len(args) != len(jaxpr.invars):
            names = " ".join(var_name(v, i, "arg") for i, v in enumerate(jaxpr.invars))
            raise ProgramError(
                f"expected {len(jaxpr.invars)} arguments ({names}), got {len(args)}", "inputs"
            )
        dims = bind_dims(jaxpr.invars, args, dims)
    cvars = every if rng is not None else list(jaxpr.constvars)
    if consts is not None:
        check_count(jaxpr, len(consts))
        cvars = every if len(consts) == len(every) else list(jaxpr.constvars)
        dims = bind_dims(cvars, consts, dims)
    check_dims(jaxpr, dims, require=True)
    check_memory(jaxpr, dims)
    if args is not None:
        args = read_all(check_arrays(jaxpr.invars, args, dims, "argument"), "arguments")
    else:
        args = _random(jaxpr, jaxpr.invars, rng, dims, "arg", drawn)
    if consts is not None:
        consts = read_all(check_arrays(cvars, consts, dims, "constant"), "constants")
    else:
        consts = _random(jaxpr, cvars, rng, dims, "const", drawn)
    args = check_arrays(jaxpr.invars, args, dims, "argument")
    consts = check_arrays(cvars, consts, dims, "constant")
    return args, consts, dims


def _random(jaxpr, binders, rng, dims, prefix: str, drawn: list[str]) -> list:
    """Random values of `binders`, drawn as the program needs them (`draw.py`), noted in
    `drawn`."""
    from .backend.values import random_array
    from .draw import input_needs

    needs = input_needs(jaxpr, binders)
    for i, (v, n) in enumerate(zip(binders, needs)):
        if n is not None and n.why:
            drawn.append(f"{var_name(v, i, prefix)}:{v.type} {n.describe()}")
    return [random_array(_shaped(v), rng, dims, need=n) for v, n in zip(binders, needs)]


def drawn_note(seed: int, drawn: list[str]) -> str:
    """The line saying how the random point was drawn (seed, and what was drawn to fit)."""
    how = "N(0, 1) floats, integers in [1, 5)"
    if drawn:
        more = f"; and {len(drawn) - 4} more" if len(drawn) > 4 else ""
        how += "; drawn as the program needs them: " + "; ".join(drawn[:4]) + more
    return f"random inputs, seed {seed}: {how}"


def keep_point(save_path, args, consts, seed, random: bool, drawn: list[str]) -> None:
    """--save-inputs: the arguments and constants written as one .npz (no pickle inside);
    with random inputs, a note on standard error naming the seed and what was drawn
    (`drawn`, as `gather_inputs` filled it; also without --save-inputs when some input was
    drawn as the program needs it)."""
    import io as _bytes

    import click

    from .io import write_output

    def note(text: str) -> None:
        click.echo(f"note: {text}", err=True)

    if random and (save_path is not None or drawn):
        note(drawn_note(seed, drawn))
    if save_path is None:
        return
    arrays = {f"arg{i}": np.asarray(a) for i, a in enumerate(args)}
    arrays.update({f"const{i}": np.asarray(c) for i, c in enumerate(consts or [])})
    buf = _bytes.BytesIO()
    np.savez(buf, **arrays)
    write_output(buf.getvalue(), save_path)
    parts = [f"arg0..arg{len(args) - 1}"] if args else []
    if consts:
        parts.append(f"const0..const{len(consts) - 1}")
    saved = ", ".join(parts) or "no arrays"
    note(f"inputs saved to {save_path} ({saved}; --args and --consts read them back)")


def warn_invented_consts(jaxpr, consts_npz, seed, command: str) -> None:
    """check-grad and explain run a program with random inputs by default, its constants
    too when no --consts gives them: say so, since a program's constants often carry
    invariants that random values break (indices a gather promises in bounds, a mask and
    the indices made from it), and a failed check would then blame the derivative."""
    from .backend.consts import all_constvars
    from .io import warn

    every = all_constvars(jaxpr)
    if consts_npz is not None or not every:
        return
    names = ", ".join(f"{var_name(v, i, 'const')}:{v.type}" for i, v in enumerate(every[:4]))
    more = f" and {len(every) - 4} more" if len(every) > 4 else ""
    warn(
        f"{command}: the program's constants ({names}{more}) have no values in the text and "
        f"get random ones (seed {seed}); values the program never sees can break what it "
        "relies on (indices in bounds, a mask and the indices made from it), and a failed "
        "check may come from them: pass --consts C.npz (`jaxprtool trace --consts-out` "
        "saves them)"
    )


def _missing_consts(jaxpr) -> str:
    """The program's constants without values: their names, types and where they are
    declared, and how to save and pass them."""
    vs = jaxpr.constvars
    names = ", ".join(f"{var_name(v, i, 'const')}:{v.type}" for i, v in enumerate(vs))
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
