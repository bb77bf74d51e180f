"""`jaxprtool run` inputs and outputs for scripts and CI, as iree-run-module does them.

* `--input 'f32[2,3]=1 2 3 4 5 6'`: an argument written inline, its type as the jaxpr
  prints it and its values separated by spaces or commas, in row-major order (one value
  fills the whole array); iree-run-module's spelling `2x3xf32=1 2 3 4 5 6` (`f32=0.5` for
  a scalar, `[1 2 3][4 5 6]` brackets allowed) too; `--input @x.npy` reads a file.
* `--expected-output OUT.npz` (keys out0, out1, ... or arr_0, ...; an .npy for a single
  output), or the outputs inline as `--input` writes them, separated by `;`
  (`'f32[]=1.89'`, `'f32[2]=1 2; i32[]=3'`), with `--rtol`/`--atol`: exact for integers and
  booleans, `|got - want| <= atol + rtol * |want|` for floats (NaN equals NaN); a table of
  the outputs that differ.
* `--print-values full|summary|none`, `--output-format npz|npy-dir|json`.

numpy only: nothing here imports jax.
"""

from __future__ import annotations

import io as _io
import json
import math
import os
import re
import sys

from ..core import JaxprError, UsageProblem, np_dtype, short_dtype_name
from ..io import UsageError, refuse_planted_links, write_output
from ..lazy import np
from ..npfiles import open_arrays

_INPUT = re.compile(r"\s*([A-Za-z][A-Za-z0-9_]*)\[([0-9,\s]*)\]\s*=(.*)\Z", re.S)
#: iree-run-module's `2x3xf32=...` (dimensions, then the element type; `f32=` a scalar)
_IREE_INPUT = re.compile(r"\s*((?:[0-9]+x)*)([A-Za-z][A-Za-z0-9_]*)\s*=(.*)\Z", re.S)

# ---------------------------------------------------------------- --input


def _dtype_of(name: str, spec: str) -> np.dtype:
    for n in (name, short_dtype_name(name)):
        try:
            dt = np_dtype(n)
        except KeyError:
            continue
        if dt.names is None:
            return dt
    raise UsageError(f"bad --input '{spec}': unknown dtype '{name}' (e.g. f32, i32, bool, bf16)")


def _value(text: str, dt: np.dtype, spec: str):
    t = text.strip()
    try:
        if dt.kind == "b":
            low = t.lower()
            if low in ("true", "1"):
                return True
            if low in ("false", "0"):
                return False
            raise ValueError
        if dt.kind in "iu":
            v = int(t)
            info = np.iinfo(dt)
            if not info.min <= v <= info.max:
                raise UsageError(
                    f"bad --input '{spec}': {t} does not fit {dt.name} ({info.min} to {info.max})"
                )
            return v
        if dt.kind == "c":
            return complex(t)
        return float(t)
    except ValueError:
        kind = {"b": "a boolean (true/false)", "i": "an integer", "u": "an integer"}.get(
            dt.kind, "a number"
        )
        raise UsageError(f"bad --input '{spec}': '{t}' is not {kind}") from None


def parse_input(spec: str, option: str = "--input"):
    """One `--input` value, its data not built yet (a `npfiles.Declared`, checked against
    the program's types first): `TYPE=VALUES` (e.g. `f32[2,3]=1 2 3 4 5 6`, `f32[]=0.5`,
    `i32[4]=7`: one value fills the array) or `@FILE.npy`."""
    from ..npfiles import Declared
    from ..run_inputs import declared_npy

    if spec.startswith("@"):
        return declared_npy(spec[1:])
    m = _INPUT.match(_from_iree(spec))
    if not m:
        raise UsageError(
            f"bad --input '{spec}': expected TYPE=VALUES, e.g. 'f32[2,3]=1 2 3 4 5 6' or "
            "'f32[]=0.5', or @FILE.npy"
        )
    dt = _dtype_of(m.group(1), spec)
    try:
        shape = tuple(int(x) for x in m.group(2).split(",") if x.strip())
    except ValueError:  # more digits than int() reads
        raise UsageError(f"bad --input '{spec}': a dimension is too large") from None
    words = [w for w in re.split(r"[\s,\[\]]+", m.group(3).strip()) if w]
    size = math.prod(shape)
    if not words:
        raise UsageError(f"bad --input '{spec}': no values after '='")
    if len(words) not in (1, size):
        raise UsageError(
            f"bad --input '{spec}': {len(words)} values for {size} elements "
            f"(give {size}, or one to fill the array)"
        )
    values = [_value(w, dt, spec) for w in words]
    return Declared(dt, shape, f"{option} '{_short(spec)}'", lambda: _build(values, dt, shape))


def _build(values: list, dt: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    if dt.kind == "f" and dt.itemsize < 8 or dt.kind == "V":
        arr = np.array(values, np.float64).astype(dt)
    else:
        arr = np.array(values, dt)
    if len(values) == 1:
        return np.full(shape, arr[0], dt)
    return arr.reshape(shape)


def _short(spec: str) -> str:
    return spec if len(spec) <= 40 else spec[:37] + "..."


def _from_iree(spec: str) -> str:
    """iree-run-module's `2x3xf32=VALUES` as the jaxpr spelling `f32[2,3]=VALUES`; any
    other text as it is."""
    m = _IREE_INPUT.match(spec)
    if m is None or "[" in spec.split("=", 1)[0]:
        return spec
    dims = ",".join(d for d in m.group(1).split("x") if d)
    return f"{m.group(2)}[{dims}]={m.group(3)}"


def is_inline(spec: str) -> bool:
    """`--expected-output` holds values (`TYPE=VALUES`), not the name of a file."""
    return "=" in spec and not os.path.exists(spec)


# ---------------------------------------------------------------- --expected-output


def load_expected(path: str, outvars, dims: dict[str, int]) -> list[np.ndarray]:
    """The expected outputs: an .npz (out0.. or arr_0..) or, for one output, an .npy; or
    inline values (`is_inline`), one `--input`-style array per output, separated by `;`.
    Read before the run: their types (headers) checked against the program's output types
    (`outvars`, sizes from `dims`) and the memory limit before their data is read."""
    from ..npfiles import Declared
    from ..run_inputs import memory_budget, npz_list, read_all

    n = len(outvars)
    if is_inline(path):
        arrays = [parse_input(s, "--expected-output") for s in path.split(";") if s.strip()]
        if len(arrays) != n:
            raise JaxprError(
                f"--expected-output gives {len(arrays)} output{'s' if len(arrays) != 1 else ''} "
                f"inline; the program has {n} (separate them with ';')"
            )
    else:
        data = open_arrays(path, "expected-output", memory_budget())
        arrays = [data] if isinstance(data, Declared) else npz_list(data, "out", path)
    if len(arrays) != n:
        raise JaxprError(
            f"'{path}' holds {len(arrays)} expected output{'s' if len(arrays) != 1 else ''}; "
            f"the program has {n}"
        )
    for i, (v, a) in enumerate(zip(outvars, arrays)):
        want = _output_type(v.type, dims)
        if want is not None and (a.shape, a.dtype) != want and not _void_of(a.dtype, want[1]):
            raise JaxprError(
                f"{a.name} holds {_type_of(a.shape, a.dtype)}, but output {i} of the program "
                f"is {v.type}"
            )
    return read_all(arrays, "expected outputs")


def _output_type(t, dims):
    """(shape, dtype) of an output type with static sizes, or None (keys, tokens)."""
    from ..backend.values import static_shape
    from ..core import ShapedArray

    if not isinstance(t, ShapedArray) or t.dtype.startswith("key<") or t.dtype == "float0":
        return None
    return static_shape(t, dims), t.np_dtype


def _void_of(dtype: np.dtype, want: np.dtype) -> bool:
    return dtype.kind == "V" and dtype.names is None and dtype.itemsize == want.itemsize


def _type_of(shape, dtype) -> str:
    from ..backend.values import type_str

    return type_str(shape, dtype)


def _type(a: np.ndarray) -> str:
    a = np.asarray(a)
    name = "float0" if a.dtype.names is not None else short_dtype_name(a.dtype.name)
    return f"{name}[{','.join(str(d) for d in a.shape)}]"


def compare(got: list, want: list, rtol: float, atol: float) -> list[dict]:
    """One row per output that differs: what, how many elements, the largest errors and the
    first differing element."""
    rows = []
    for i, (g, w) in enumerate(zip(got, want)):
        g, w = np.asarray(g), np.asarray(w)
        row = {"output": f"out{i}", "got": _type(g), "expected": _type(w)}
        if g.shape != w.shape or g.dtype != w.dtype:
            rows.append({**row, "why": "type"})
            continue
        if g.dtype.names is not None or g.size == 0:
            continue
        exact = g.dtype.kind in "biu"
        gg = g if exact else g.astype(np.complex128 if g.dtype.kind == "c" else np.float64)
        ww = w if exact else w.astype(gg.dtype)
        if exact:
            bad = gg != ww
        else:
            close = np.isclose(gg, ww, rtol=rtol, atol=atol, equal_nan=True)
            bad = ~close
        count = int(np.count_nonzero(bad))
        if not count:
            continue
        idx = np.unravel_index(int(np.argmax(bad.reshape(-1))), g.shape) if g.shape else ()
        with np.errstate(all="ignore"):
            diff = np.abs(gg.astype(np.complex128) - ww.astype(np.complex128))
            finite = np.where(np.isfinite(diff), diff, np.inf)
            rel = finite / np.maximum(np.abs(ww.astype(np.complex128)), np.finfo(np.float64).tiny)
        rows.append(
            {
                **row,
                "why": f"{count}/{g.size}",
                "max_abs": float(np.max(finite[bad])),
                "max_rel": float(np.max(rel[bad])),
                "at": "[" + ",".join(str(int(k)) for k in idx) + "]",
                "got_value": _scalar_text(g[idx]),
                "expected_value": _scalar_text(w[idx]),
            }
        )
    return rows


def _scalar_text(x) -> str:
    v = np.asarray(x)
    if v.dtype.kind == "V" or (v.dtype.kind == "f" and v.dtype.itemsize < 4):
        v = v.astype(np.float64)
    item = v.item()
    return f"{item:.8g}" if isinstance(item, float) else str(item)


def render_mismatches(rows: list[dict], path: str, rtol: float, atol: float, stream=None) -> None:
    """A table of the outputs that differ (`compare`'s rows)."""
    from rich.table import Table

    from ..io import console

    table = Table(title=f"outputs that differ from {path} (rtol={rtol:g}, atol={atol:g})")
    table.add_column("output", no_wrap=True)
    table.add_column("type", no_wrap=True)
    table.add_column("differ", no_wrap=True)
    for col in ("max abs", "max rel"):
        table.add_column(col, justify="right", no_wrap=True)
    table.add_column("first", no_wrap=True)
    table.add_column("got", justify="right")
    table.add_column("expected", justify="right")
    for r in rows:
        typed = r["got"] if r["got"] == r["expected"] else f"{r['got']} (expected {r['expected']})"
        table.add_row(
            r["output"],
            typed,
            r["why"],
            f"{r['max_abs']:.3g}" if "max_abs" in r else "",
            f"{r['max_rel']:.3g}" if "max_rel" in r else "",
            r.get("at", ""),
            r.get("got_value", ""),
            r.get("expected_value", ""),
        )
    from ..ui.tables import print_table

    print_table(console(stream or sys.stdout), table)


def mismatch_message(rows: list[dict], n: int, path: str, rtol: float, atol: float) -> str:
    what = "the output differs" if n == 1 else f"{len(rows)} of {n} outputs differ"
    return f"{what} from '{path}' (rtol={rtol:g}, atol={atol:g})"


# ---------------------------------------------------------------- outputs


def print_full(outs, stream=None) -> None:
    """Every value of every output (numpy's layout, nothing elided)."""
    stream = stream or sys.stdout
    for i, o in enumerate(outs):
        a = np.asarray(o)
        if a.dtype.names is not None:
            text = "(float0: no values)"
        else:
            shown = a.astype(np.float64) if a.dtype.kind == "V" else a
            text = np.array2string(shown, threshold=sys.maxsize, max_line_width=100)
        stream.write(f"out{i}: {_type(a)} =\n{text}\n")
    stream.flush()


def outputs_json(outs) -> str:
    """{"outputs": [{"name", "dtype", "shape", "data"}]}: nested lists in row-major order,
    each innermost row on one line (a 3x3 output is five lines of data, not 29); each
    number the shortest text that reads back as the same value of the output's dtype
    (`0.1` for a float32 0.1, as numpy prints it, not its float64 expansion); NaN and
    infinities as the strings "NaN", "Infinity", "-Infinity"; a complex number as [re, im]."""
    items = []
    for i, o in enumerate(outs):
        a = np.asarray(o)
        if a.dtype.names is not None:
            dtype, data = "float0", "null"
        else:
            dtype, data = a.dtype.name, _json_array(a, _json_number(a.dtype), "      ")
        items.append(
            f'    {{\n      "name": "out{i}",\n      "dtype": {json.dumps(dtype)},\n'
            f'      "shape": {json.dumps(list(a.shape))},\n      "data": {data}\n    }}'
        )
    if not items:
        return '{\n  "outputs": []\n}\n'
    return '{\n  "outputs": [\n' + ",\n".join(items) + "\n  ]\n}\n"


def _json_array(a, number, indent: str) -> str:
    """`a` as JSON: a row of numbers on one line, each outer level one item a line."""
    if a.ndim == 0:
        return number(a[()])
    if a.ndim == 1 or a.shape[0] == 0:
        return "[" + ", ".join(number(x) for x in a.reshape(-1)) + "]" if a.size else "[]"
    inner = indent + "  "
    rows = ",\n".join(inner + _json_array(sub, number, inner) for sub in a)
    return "[\n" + rows + "\n" + indent + "]"


def _json_number(dtype):
    """The function writing one element of `dtype` as JSON text."""
    if dtype.kind == "b":
        return lambda x: "true" if x else "false"
    if dtype.kind in "iu" or dtype.name.startswith(("int", "uint")):
        return lambda x: str(int(x))
    if dtype.kind == "c":
        part = _json_number(np.dtype(f"f{dtype.itemsize // 2}"))
        return lambda x: f"[{part(x.real)}, {part(x.imag)}]"
    kind = dtype.type
    native = dtype.kind == "f"  # numpy's own str is the shortest round trip; ml_dtypes' is not

    def number(x) -> str:
        v = float(x)
        if math.isnan(v):
            return '"NaN"'
        if math.isinf(v):
            return '"Infinity"' if v > 0 else '"-Infinity"'
        return str(kind(x)) if native else _shortest(v, kind)

    return number


def _shortest(v: float, kind) -> str:
    """The shortest decimal text that `kind` (an ml_dtypes float: bfloat16, float8_*) reads
    as the same value as `v`, with `.0` on whole numbers as numpy writes them."""
    target = kind(v)
    for digits in range(1, 18):
        s = f"{v:.{digits}g}"
        if kind(float(s)) == target:
            break
    return s if any(c in s for c in ".e") else s + ".0"


def save_npz(outs, path: str) -> None:
    """Outputs to `path`: an .npz archive (out0, out1, ...), or one array for an .npy path."""
    buf = _io.BytesIO()
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


def write_outputs(outs, path: str | None, fmt: str | None) -> None:
    """The outputs to `path` in `fmt` (default: from the path: .npy one array, .json JSON,
    else .npz), by that format's writer (`_WRITERS`); JSON goes to standard output without
    a path; npy-dir: PATH/out0.npy ..."""
    if fmt is None:
        fmt = "json" if path and path.endswith(".json") else "npz"
    if fmt != "json" and path in (None, "-"):
        raise UsageError(f"--output-format {fmt} needs -o PATH")
    _WRITERS[fmt](outs, path)


def _write_json(outs, path: str | None) -> None:
    write_output(outputs_json(outs), path)


def _write_npy_dir(outs, path: str) -> None:
    if os.path.exists(path) and not os.path.isdir(path):
        raise UsageProblem(f"cannot write '{path}': it exists and is not a directory")
    refuse_planted_links(path)  # (before a folder is made at the end of a planted link)
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise UsageProblem(f"cannot create folder '{path}': {e.strerror}") from None
    for i, o in enumerate(outs):
        buf = _io.BytesIO()
        np.save(buf, np.asarray(o), allow_pickle=False)
        write_output(buf.getvalue(), os.path.join(path, f"out{i}.npy"))


#: run --output-format -> the writer of the outputs in it
_WRITERS = {"json": _write_json, "npz": save_npz, "npy-dir": _write_npy_dir}
