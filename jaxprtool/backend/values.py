"""Shapes with symbolic dims, literal values, random inputs and value summaries (numpy only)."""

from __future__ import annotations

import ast
import operator

import numpy as np

from ..core import JaxprError, Literal, ShapedArray, Type, eqn_subjaxprs, float0, short_dtype_name

#: the largest size a dimension expression may reach at any step (int64, as XLA's shapes)
MAX_DIM = 2**63 - 1
#: the longest dimension expression evaluated (JAX prints a few dozen characters)
MAX_DIM_TEXT = 1000


def _power(base: int, exp: int) -> int:
    if exp < 0:
        raise ArithmeticError("a negative power")
    if abs(base) > 1 and exp > 63:
        raise OverflowError
    return base**exp


def _divide(op):
    def f(a: int, b: int) -> int:
        if b == 0:
            raise ArithmeticError("a division by zero")
        return op(a, b)

    return f


_BINOPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: _divide(operator.floordiv),
    ast.Mod: _divide(operator.mod),
    ast.Pow: _power,  # JAX prints powers of dims as `b^2`, read as `b**2` (`eval_dim`)
}
#: name -> (function, number of arguments: exact, or at least -N for max/min)
_FUNCS = {
    "floordiv": (_divide(operator.floordiv), 2),
    "mod": (_divide(operator.mod), 2),
    "max": (max, -2),
    "min": (min, -2),
    "non_negative": (lambda x: max(x, 0), 1),
}


class UnsizedDim(JaxprError):
    """A symbolic dimension's name that the given sizes do not size: callers that may go on
    without sizes (`check_dims` without `require`) tell it from a bad size by its type."""


def eval_dim(expr: str, dims: dict[str, int]) -> int:
    """Evaluate a symbolic dim (`b`, `2*b + 1`, `floordiv(n, 2)`) with the given sizes; no
    eval().  Every step stays within int64 (`MAX_DIM`), so `b^(10^9)` is an error at once,
    not a hang; divisions by zero, wrong argument counts and negative results are errors."""
    text = str(expr).strip()
    if len(text) > MAX_DIM_TEXT:
        raise JaxprError(
            f"dimension expression of {len(text)} characters is too long (at most {MAX_DIM_TEXT})"
        )

    def ev(node):
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return _bounded(node.value)
        if isinstance(node, ast.Name):
            if node.id not in dims:
                raise UnsizedDim(
                    f"symbolic dimension '{node.id}' has no size: pass --dim {node.id}=N"
                )
            return dims[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            return _bounded(_BINOPS[type(node.op)](ev(node.left), ev(node.right)))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            v = ev(node.operand)
            return -v if isinstance(node.op, ast.USub) else v
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
            fn, arity = _FUNCS.get(node.func.id, (None, 0))
            n = len(node.args)
            if fn is not None and (n == arity or (arity < 0 and n >= -arity)):
                return _bounded(fn(*[ev(a) for a in node.args]))
            if fn is not None:
                want = f"at least {-arity}" if arity < 0 else str(arity)
                raise JaxprError(
                    f"dimension expression '{_short(text)}': {node.func.id} takes {want} "
                    f"argument{'s' if arity != 1 else ''}, got {n}"
                )
        raise JaxprError(f"cannot evaluate dimension expression '{_short(text)}'")

    try:  # `^` binds tighter than `*` in JAX's `6*b^2`, as `**` does in Python
        value = ev(ast.parse(text.replace("^", "**"), mode="eval"))
    except (SyntaxError, ValueError):
        raise JaxprError(f"cannot evaluate dimension expression '{_short(text)}'") from None
    except (RecursionError, MemoryError):
        raise JaxprError(f"dimension expression '{_short(text)}' nests too deeply") from None
    except OverflowError:
        raise JaxprError(
            f"dimension expression '{_short(text)}' exceeds {MAX_DIM} with the given sizes"
        ) from None
    except ArithmeticError as e:
        raise JaxprError(f"dimension expression '{_short(text)}' has {e}") from None
    if value < 0:
        raise JaxprError(f"dimension expression '{_short(text)}' is {value}, a negative size")
    return int(value)


def _bounded(v: int) -> int:
    if abs(v) > MAX_DIM:
        raise OverflowError
    return v


def _short(text: str) -> str:
    return text if len(text) <= 60 else text[:57] + "..."


def check_dims(jaxpr, dims: dict[str, int], require: bool = False) -> None:
    """Evaluate every symbolic dimension of the program's types before anything is built:
    one that overflows, divides by zero or is negative is a located error (at its equation,
    or at the program's inputs).  A name without a size is an error only with `require`."""
    from ..core import ProgramError, RefType

    seen: set[int] = set()

    def check(t, loc) -> None:
        t = t.inner if isinstance(t, RefType) else t
        if not isinstance(t, ShapedArray):
            return
        for d in t.shape:
            text = str(d).split("@")[0]
            if isinstance(d, int) or text.strip().isdigit():
                continue
            try:
                eval_dim(text, dims)
            except JaxprError as e:
                if isinstance(e, UnsizedDim) and not require:
                    continue
                if loc is None:
                    raise ProgramError(e.message, "inputs") from None
                raise JaxprError(e.message, loc) from None

    def walk(j, loc) -> None:
        if id(j) in seen:
            return
        seen.add(id(j))
        for v in (*j.constvars, *j.invars):
            check(v.type, loc)
        for e in j.eqns:
            for o in e.outputs:
                check(o.type, e.loc)
            for sub in eqn_subjaxprs(e):
                walk(sub, e.loc)

    walk(jaxpr, None)


def read_dims(vars_, shapes, dims: dict[str, int] | None) -> dict[str, int]:
    """`dims` completed with the sizes of plain symbolic dims (`b` of `f32[b,3]`) read off
    the shapes of the arrays given for `vars_` (as a function exported with symbolic shapes
    takes them from its arguments); a size `dims` gives is kept."""
    found = dict(dims or {})
    for v, shape in zip(vars_, shapes):
        t = v.type
        if not isinstance(t, ShapedArray) or len(shape) != len(t.shape):
            continue
        for d, n in zip(t.shape, shape):
            if isinstance(d, str) and d.strip().isidentifier() and d.strip() not in found:
                found[d.strip()] = int(n)
    return found


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
    t: ShapedArray, rng: np.random.Generator, dims=None, positive: bool = False, need=None
) -> np.ndarray:
    """A random value of type `t`: N(0, 1) floats, integers in [1, 5), unless `need` (a
    `draw.Need`: what the program does with it) asks for an index range, a positive value
    or a fan-in scale."""
    shape = static_shape(t, dims)
    positive = positive or (need is not None and need.positive)
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
        if need is not None and need.index_bound is not None:
            return rng.integers(0, need.index_bound, size=shape).astype(dt)
        return rng.integers(1, 5, size=shape).astype(dt)
    if k == "c":
        re = rng.uniform(0.1, 1.0, shape) if positive else rng.standard_normal(shape)
        im = rng.uniform(0.1, 1.0, shape) if positive else rng.standard_normal(shape)
        return (re + 1j * im).astype(dt)
    vals = rng.uniform(0.1, 1.0, shape) if positive else rng.standard_normal(shape)
    if need is not None and need.fan_in is not None:
        vals = vals / np.sqrt(need.fan_in)
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
