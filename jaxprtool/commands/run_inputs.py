"""The values a run is given: arrays read from .npy/.npz files (never unpickled), the
arguments and constants gathered from --args/--arg/--input/--random/--consts and checked
against the program's types.  numpy only: nothing here imports jax."""

from __future__ import annotations

import io
import re
import sys
import zipfile

from ..core import JaxprError, ShapedArray
from ..io import UsageError
from ..lazy import np


def read_array_file(path: str, what: str):
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


def load_npz(path: str, what: str) -> dict[str, np.ndarray]:
    f = read_array_file(path, what)
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


def load_npy(path: str) -> np.ndarray:
    a = read_array_file(path, "argument")
    if not isinstance(a, np.ndarray):
        raise JaxprError(f"argument file '{path}' is not a single .npy array")
    return a


def var_name(v, i: int, prefix: str) -> str:
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
                f"{what} {i} ({var_name(v, i, what[:3])}): cannot pass a value of type {t}"
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
            raise JaxprError(f"{what} {i} ({var_name(v, i, what[:3])}): expected {want}, got {got}")
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
        args = npz_list(load_npz(args_npz, "arguments"), "arg", args_npz)
    elif arg_files:
        args = [load_npy(p) for p in arg_files]
    elif rng is not None:
        args = None
    else:
        args = []
        if jaxpr.invars:
            names = " ".join(var_name(v, i, "arg") for i, v in enumerate(jaxpr.invars))
            raise JaxprError(
                f"expected {len(jaxpr.invars)} arguments ({names}), got 0: pass --args IN.npz, "
                "--arg X.npy, --input 'TYPE=VALUES' or --random SEED"
            )
    from ..backend.consts import all_constvars, check_count

    every = all_constvars(jaxpr)
    if consts_npz is not None:
        consts = npz_list(load_npz(consts_npz, "constants"), "const", consts_npz)
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
