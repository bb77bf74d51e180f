"""Shapes with symbolic dims, literal values, random inputs and value summaries (numpy only)."""

from __future__ import annotations

import ast
import operator

import numpy as np

from ..core import JaxprError, Literal, ShapedArray, Type, float0, short_dtype_name

_BINOPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.BitXor: operator.pow,  # JAX prints powers of dims as `b^2`
    ast.Pow: operator.pow,
}
_FUNCS = {
    "floordiv": operator.floordiv,
    "mod": operator.mod,
    "max": max,
    "min": min,
    "non_negative": lambda x: max(x, 0),
}


def eval_dim(expr: str, dims: dict[str, int]) -> int:
    """Evaluate a symbolic dim (`b`, `2*b + 1`, `floordiv(n, 2)`) with the given sizes; no eval()."""

    def ev(node):
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in dims:
                raise JaxprError(
                    f"symbolic dimension '{node.id}' has no size: pass --dim {node.id}=N"
                )
            return dims[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            return _BINOPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in _FUNCS
        ):
            return _FUNCS[node.func.id](*[ev(a) for a in node.args])
        raise JaxprError(f"cannot evaluate dimension expression '{expr}'")

    try:
        tree = ast.parse(str(expr).strip(), mode="eval")
    except SyntaxError:
        raise JaxprError(f"cannot evaluate dimension expression '{expr}'") from None
    return int(ev(tree))


def static_shape(t: Type, dims: dict[str, int] | None = None) -> tuple[int, ...]:
    if not isinstance(t, ShapedArray):
        raise JaxprError(f"type {t} has no array shape")
    out = []
    for d in t.shape:
        if isinstance(d, int):
            out.append(d)
        else:
            text = str(d).split("@")[0]
            out.append(int(text) if text.strip().isdigit() else eval_dim(text, dims or {}))
    return tuple(out)


def kind(dt) -> str:
    """numpy kind letter, also for ml_dtypes (bfloat16, float8_*, int4, ...)."""
    dt = np.dtype(dt)
    if dt.names is not None:
        return "V"
    n = dt.name
    if n.startswith(("float", "bfloat")):
        return "f"
    if n.startswith("uint"):
        return "u"
    if n.startswith("int"):
        return "i"
    return dt.kind


def type_str(shape, dtype: np.dtype) -> str:
    """An array's type as a jaxpr spells it (`f32[3,4]`), in every table and message."""
    return f"{short_dtype_name(np.dtype(dtype).name)}[{','.join(str(d) for d in shape)}]"


def literal_value(lit: Literal) -> np.ndarray:
    """A literal as a numpy scalar of its dtype (rounded to the dtype)."""
    t = lit.type
    if lit.value == "float0" or (isinstance(t, ShapedArray) and t.dtype == "float0"):
        return np.zeros((), float0())
    dt = t.np_dtype
    v = lit.value
    if v is Ellipsis or not isinstance(v, (bool, int, float, complex)):
        raise JaxprError(f"the array literal {lit.value!r}:{t} has no values in the text")
    if isinstance(v, float) and np.issubdtype(dt, np.integer):
        v = int(v)
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(v).astype(dt) if not isinstance(v, bool) else np.asarray(v, dtype=dt)


def random_array(
    t: ShapedArray, rng: np.random.Generator, dims=None, positive: bool = False
) -> np.ndarray:
    shape = static_shape(t, dims)
    if t.dtype.startswith("key<"):
        from .keys import data_shape

        return rng.integers(0, 2**32, size=data_shape(t, shape), dtype=np.uint32)
    dt = t.np_dtype
    if t.dtype == "bool":
        return rng.random(shape) < 0.5
    if t.dtype == "float0":
        return np.zeros(shape, float0())
    k = kind(dt)
    if k in "iu":
        return rng.integers(1, 5, size=shape).astype(dt)
    if k == "c":
        re = rng.uniform(0.1, 1.0, shape) if positive else rng.standard_normal(shape)
        im = rng.uniform(0.1, 1.0, shape) if positive else rng.standard_normal(shape)
        return (re + 1j * im).astype(dt)
    vals = rng.uniform(0.1, 1.0, shape) if positive else rng.standard_normal(shape)
    return vals.astype(dt)


def summary(x, max_values: int = 6) -> dict:
    """shape, dtype, a few values, min/max/mean and NaN count of an array."""
    a = np.asarray(x)
    d = {"shape": a.shape, "dtype": a.dtype.name if a.dtype.names is None else "float0"}
    flat = a.reshape(-1)
    d["values"] = flat[:max_values].tolist() if a.dtype.names is None else []
    if kind(a.dtype) == "f" and a.dtype.kind == "V":
        d["values"] = flat[:max_values].astype(np.float64).tolist()
    d["size"] = a.size
    k = kind(a.dtype)
    if a.size and k in "fciub":
        f = flat.astype(np.complex128 if k == "c" else np.float64)
        if k == "c":
            f = np.abs(f)
        finite = f[np.isfinite(f)]
        d["nan"] = int(np.isnan(f).sum())
        d["inf"] = int(np.isinf(f).sum())
        if finite.size:
            d["min"], d["max"], d["mean"] = (
                float(finite.min()),
                float(finite.max()),
                float(finite.mean()),
            )
    return d


def summary_line(x) -> str:
    s = summary(x)
    vals = ", ".join(_fmt(v) for v in s["values"])
    more = ", ..." if s["size"] > len(s["values"]) else ""
    line = f"{type_str(s['shape'], np.asarray(x).dtype) if s['dtype'] != 'float0' else 'float0'} [{vals}{more}]"
    if "min" in s:
        line += f" min={s['min']:.6g} max={s['max']:.6g} mean={s['mean']:.6g}"
    if s.get("nan"):
        line += f" nan={s['nan']}"
    if s.get("inf"):
        line += f" inf={s['inf']}"
    return line


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, complex):
        return f"{v.real:.4g}{v.imag:+.4g}j"
    return str(v)


def has_nonfinite(x) -> bool:
    a = np.asarray(x)
    k = kind(a.dtype)
    if k not in "fc":
        return False
    return not bool(np.isfinite(a.astype(np.complex128 if k == "c" else np.float64)).all())
