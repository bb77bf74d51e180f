"""Helpers shared by the shape-rule families: operand checks, dims, dtypes, params."""

from __future__ import annotations

from typing import Any

from ..core import Jaxpr, OpaqueType, RefType, ShapedArray, Type, short_dtype_name
from ..lazy import LazyPattern, is_dtype, is_integer, np
from ..params import Opaque, all_ints, format_value
from . import ShapeError

# ---------------------------------------------------------------- dtype classes

FLOATS = {"f16", "bf16", "f32", "f64"}
COMPLEX = {"c64", "c128"}
SIGNED = {"i2", "i4", "i8", "i16", "i32", "i64"}
UNSIGNED = {"u2", "u4", "u8", "u16", "u32", "u64"}
INTS = SIGNED | UNSIGNED
BOOL = {"bool"}


def is_float_dtype(d: str) -> bool:
    return (
        d in FLOATS or (d.startswith("f") and d[1:2].isdigit() and "_" in d) or d.startswith("bf")
    )


def is_complex_dtype(d: str) -> bool:
    return d in COMPLEX


def is_int_dtype(d: str) -> bool:
    return d in INTS


def is_key_dtype(d: str) -> bool:
    return d.startswith("key<")


def real_dtype(d: str) -> str:
    return {"c64": "f32", "c128": "f64"}.get(d, d)


def complex_dtype(d: str) -> str:
    return {"f32": "c64", "f64": "c128", "f16": "c64", "bf16": "c64"}.get(d, d)


def dtype_bits(d: str) -> int:
    if d == "bool":
        return 8
    from ..core import itemsize

    try:
        return itemsize(d) * 8 if d not in ("i4", "u4", "i2", "u2") else int(d[1:])
    except KeyError:
        return 0


def dtype_param(v: Any) -> str:
    """A dtype parameter (np.dtype, numpy scalar type, or name) -> short dtype name."""
    if v is None:
        raise ShapeError("missing dtype parameter")
    if is_dtype(v):
        if v.names is not None:
            return "float0"
        return short_dtype_name(v.name)
    if isinstance(v, type) and issubclass(v, np.generic):
        return short_dtype_name(np.dtype(v).name)
    s = str(v)
    if s.startswith("<class '") and s.endswith("'>"):  # <class 'jax.numpy.float32'>
        s = s[8:-2].rsplit(".", 1)[-1]
    if s.startswith("dtype(") and s.endswith(")"):
        s = s[6:-1].strip("'\"")
    return short_dtype_name(s)


def opt_dtype_param(v: Any) -> str | None:
    return None if v is None else dtype_param(v)


# ---------------------------------------------------------------- params


def ints(v: Any) -> tuple:
    """A tuple of dims from a param: ints (numpy scalars allowed), symbolic ones as strings."""
    cls = v.__class__
    if cls is tuple or cls is list:
        t = tuple(v)
        return t if all_ints(t) else tuple(dim_param(x) for x in t)
    if v is None:
        return ()
    if is_integer(v):
        return (int(v),)
    if isinstance(v, (str, bytes)) or not hasattr(v, "__iter__"):
        raise ShapeError(f"malformed parameter value {v} (expected a tuple of integers)")
    return tuple(dim_param(x) for x in v)


def argsort(xs) -> list[int]:
    """`np.argsort` of distinct ints (a permutation, axis numbers: no ties, so any sort gives
    numpy's order) without numpy."""
    return sorted(range(len(xs)), key=xs.__getitem__)


def static_ints(v: Any) -> tuple[int, ...]:
    """A tuple of plain integers (axes, permutations, strides): symbolic entries are errors."""
    out = ints(v)
    for x in out:
        if not isinstance(x, int):
            raise ShapeError(f"malformed parameter value {v} (expected a tuple of integers)")
    return out


def pairs(v: Any, what: str = "padding") -> list[tuple]:
    """A sequence of (lo, hi) / (lo, hi, interior) tuples."""
    if isinstance(v, (str, bytes)) or not hasattr(v, "__iter__"):
        raise ShapeError(f"malformed {what} {v}")
    out = [ints(p) for p in v]
    if any(len(p) not in (2, 3) for p in out):
        raise ShapeError(f"malformed {what} {v}")
    return out


def dim_param(x: Any):
    """One dimension from a param: int, or a symbolic dim as a string.  Text the value
    reader could not interpret (`Opaque`, such as `let f = 1`) is no dimension: taking it as
    one would print it into a type that no reader accepts."""
    if isinstance(x, Opaque):
        raise ShapeError(
            f"malformed dimension '{x}' in a parameter (expected an integer or a symbolic dimension)"
        )
    if isinstance(x, bool):
        return int(x)
    if is_integer(x):
        return int(x)
    try:
        return int(x)
    except (TypeError, ValueError):
        return str(x)


def int_param(params: dict, key: str, default: Any = ...) -> int:
    if key not in params:
        if default is ...:
            raise ShapeError(f"missing parameter '{key}'")
        return default
    v = params[key]
    if v is None:
        if default is ...:
            raise ShapeError(f"parameter '{key}' is None")
        return default
    try:
        return int(v)
    except (TypeError, ValueError):
        raise ShapeError(f"parameter '{key}' must be an integer, got {v}") from None


def need(params: dict, key: str) -> Any:
    if key not in params:
        raise ShapeError(f"missing parameter '{key}'")
    return params[key]


def field(rec: Any, name: str, default: Any = ...) -> Any:
    """A field of a Record (or an attribute / tuple index for other encodings)."""
    try:
        return rec[name]
    except (KeyError, TypeError, IndexError):
        if default is not ...:
            return default
        raise ShapeError(f"dimension numbers lack '{name}'") from None


# ---------------------------------------------------------------- dims


def is_sym(d) -> bool:
    return not isinstance(d, int)


def dim_eq(a, b) -> bool:
    """Definitely-or-possibly equal: symbolic dims are accepted leniently."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    if isinstance(a, str) and isinstance(b, str):
        return True  # lenient: cannot decide symbolic equality here
    return True


def dim_may_equal(a, b) -> bool:
    """False only when `a` and `b` surely differ: two ints, or two linear expressions
    (`2*b + 1`) of different coefficients; an expression outside that algebra (`mod(- 1, b)`,
    `floordiv(b, 2)`) may equal anything."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    pa, pb = _poly(a), _poly(b)
    if pa is None or pb is None:
        return True
    return {k: c for k, c in pa.items() if c} == {k: c for k, c in pb.items() if c}


def dims_eq(a, b) -> bool:
    return len(a) == len(b) and all(dim_eq(x, y) for x, y in zip(a, b))


def _at(d):
    """A sharded operand (`2*b@x`) in parentheses, so that a sum is never read as a
    sharded dim of the sum's size (`b + 2*b@x`)."""
    return f"({d})" if "@" in str(d) else d


def _sym(d) -> str:
    s = str(d)
    return s if s.replace("_", "").isalnum() else f"({s})"


_FACTOR = r"[A-Za-z_][A-Za-z0-9_]*(?:\^\d+)?"
_TERM = LazyPattern(rf"^(?:(\d+)\*)?({_FACTOR}(?:\*{_FACTOR})*)$")


def _monomial(factors: dict[str, int]) -> str:
    """The key of a product of symbols' powers ({"b": 2, "c": 1} -> "b^2*c"), as JAX prints
    it: symbols by name, powers above 1 as `^k`."""
    return "*".join(n if k == 1 else f"{n}^{k}" for n, k in sorted(factors.items()) if k)


def _factors(key: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for f in key.split("*") if key else ():
        name, _, power = f.partition("^")
        out[name] = out.get(name, 0) + (int(power) if power else 1)
    return out


def _degree(key: str) -> int:
    return sum(_factors(key).values())


def _poly(d) -> dict[str, int] | None:
    """A polynomial dim as {monomial: coeff, "": const} ("2*b + 1" -> {"b": 2, "": 1},
    "6*b^2" -> {"b^2": 6}), or None (`floordiv(b, 2)`, `max(b, 1)`)."""
    if isinstance(d, int):
        return {"": d}
    text = str(d).strip()
    if "(" in text:
        return None
    out: dict[str, int] = {}
    sign = 1
    toks = text.replace("-", " - ").replace("+", " + ").split()
    expect_term = True
    for tok in toks:
        if tok in "+-":
            if not expect_term and tok in "+-":
                sign = 1 if tok == "+" else -1
                expect_term = True
                continue
            if expect_term and tok == "-":
                sign = -sign
                continue
            return None
        if not expect_term:
            return None
        if tok.isdigit():
            out[""] = out.get("", 0) + sign * int(tok)
        else:
            m = _TERM.match(tok)
            if not m:
                return None
            c = int(m.group(1)) if m.group(1) else 1
            key = _monomial(_factors(m.group(2)))
            out[key] = out.get(key, 0) + sign * c
        sign = 1
        expect_term = False
    return out if not expect_term else None


def _poly_str(p: dict[str, int]):
    const = p.get("", 0)
    terms = [(k, c) for k, c in p.items() if k and c]
    if not terms:
        return const
    parts = []
    for k, c in terms:
        mag = k if abs(c) == 1 else f"{abs(c)}*{k}"
        if not parts:
            parts.append(mag if c > 0 else f"- {mag}")
        else:
            parts.append(f"+ {mag}" if c > 0 else f"- {mag}")
    if const:
        parts.append(f"+ {const}" if const > 0 else f"- {-const}")
    return " ".join(parts)


def dim_add(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    pa, pb = _poly(a), _poly(b)
    if pa is not None and pb is not None:
        out = dict(pa)
        for k, c in pb.items():
            out[k] = out.get(k, 0) + c
        return _poly_str(out)
    if b == 0:
        return a
    if a == 0:
        return b
    return f"{_at(a)} + {_at(b)}"


def dim_sub(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return a - b
    pb = _poly(b)
    if pb is not None:
        return dim_add(a, _poly_str({k: -c for k, c in pb.items()}))
    if b == 0:
        return a
    return f"{_at(a)} - {_sym(b)}"


def dim_mul(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return a * b
    if a == 1:
        return b
    if b == 1:
        return a
    if isinstance(b, int):
        a, b = b, a
    pa, pb = _poly(a), _poly(b)
    if pa is not None and pb is not None:
        return _poly_str(_poly_mul(pa, pb))
    return f"{_sym(a)}*{_sym(b)}"


def _poly_mul(pa: dict[str, int], pb: dict[str, int]) -> dict[str, int]:
    """The product of two polynomial dims (JAX's `b * 6*b` is `6*b^2`), terms by degree,
    highest first, the constant last (as JAX prints them)."""
    out: dict[str, int] = {}
    for ka, ca in pa.items():
        for kb, cb in pb.items():
            factors = _factors(ka)
            for n, k in _factors(kb).items():
                factors[n] = factors.get(n, 0) + k
            key = _monomial(factors)
            out[key] = out.get(key, 0) + ca * cb
    if len(pa) == 1 or len(pb) == 1:  # a constant factor or a monomial keeps the order
        return out
    return dict(sorted(out.items(), key=lambda kc: -_degree(kc[0])))


def dim_floordiv(a, b):
    if isinstance(a, int) and isinstance(b, int):
        if b == 0:
            raise ShapeError("division by zero in a dimension")
        return a // b
    if b == 1:
        return a
    return f"floordiv({a}, {b})"


def dim_div_exact(a, b):
    """`a / b` when `b` divides `a` exactly (JAX's `_DimExpr` division, which a reshape of a
    symbolic size performs: `9*b / 3 = 3*b`, `6*b / 3*b = 2`), else None (`b / 2`)."""
    if isinstance(a, int) and isinstance(b, int):
        return a // b if b and a % b == 0 else None
    pa, pb = _poly(a), _poly(b)
    if pa is None or pb is None:
        return None
    pa = {k: c for k, c in pa.items() if c}
    pb = {k: c for k, c in pb.items() if c}
    if not pb:
        return None
    if not pa:
        return 0
    if set(pb) == {""}:
        d = pb[""]
        if any(c % d for c in pa.values()):
            return None
        return _poly_str({k: c // d for k, c in pa.items()})
    if len(pb) == 1:  # by a monomial (`6*b^2` by `6*b` is `b`)
        return _by_monomial(pa, *next(iter(pb.items())))
    key = next(k for k in pb if k)
    if key not in pa or pa[key] % pb[key]:
        return None
    q = pa[key] // pb[key]
    return q if pa == {k: q * c for k, c in pb.items()} else None


def _by_monomial(pa: dict[str, int], key: str, d: int):
    """`pa / (d*key)` when every term divides exactly, else None."""
    out: dict[str, int] = {}
    by = _factors(key)
    for k, c in pa.items():
        f = _factors(k)
        if c % d or any(f.get(n, 0) < p for n, p in by.items()):
            return None
        out[_monomial({n: p - by.get(n, 0) for n, p in f.items()})] = c // d
    return _poly_str(out)


def dim_max(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return max(a, b)
    return f"max({a}, {b})"


def prod(dims):
    n = 1
    for d in dims:
        n = dim_mul(n, d)
    return n


def dilate_dim(d, dilation: int):
    """Size of a dimension of size d dilated by `dilation` (0 stays 0)."""
    if isinstance(d, int):
        return 0 if d == 0 else 1 + dilation * (d - 1)
    if dilation == 1:
        return d
    return dim_add(dim_mul(dilation, dim_sub(d, 1)), 1)


def strided_dim(d, window: int, stride: int):
    """floor((d - window) / stride) + 1, at least 0."""
    if isinstance(stride, int) and stride <= 0:
        raise ShapeError(f"strides must be positive, got {stride}")
    if isinstance(d, int) and isinstance(window, int) and isinstance(stride, int):
        if d < window:
            return 0
        return (d - window) // stride + 1
    return _at_least_zero(dim_add(dim_floordiv(dim_sub(d, window), stride), 1))


def _at_least_zero(d):
    """JAX's `max_dim(d, 0)` on a linear size (its symbols are at least 1): `d` when it is
    surely >= 0 (`b - 1`), 0 when surely <= 0, else `max(d, 0)` (`max(- b + 5, 0)`, a
    window of symbolic size)."""
    p = _poly(d)
    if p is None:
        return d
    rising, falling, at_one = linear_bounds(p)
    if rising and at_one >= 0:
        return d
    if falling and at_one <= 0:
        return 0
    return dim_max(d, 0)


def linear_bounds(p: dict[str, int]) -> tuple[bool, bool, int]:
    """What bounds a size `p` has where every symbol (and so every product of symbols) is
    at least 1: (no coefficient negative, so its least value is `at_one`; no coefficient
    positive, so its greatest value is `at_one`; its value with every symbol 1)."""
    coeffs = [c for k, c in p.items() if k]
    at_one = p.get("", 0) + sum(coeffs)
    return all(c >= 0 for c in coeffs), all(c <= 0 for c in coeffs), at_one


def fmt_shape(shape) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def hint_dim(out_hint, i_out: int, axis: int, computed):
    """The out_hint's dim at (result i_out, axis) when `computed` is symbolic, else computed."""
    if isinstance(computed, int) or not out_hint or i_out >= len(out_hint):
        return computed
    h = out_hint[i_out]
    if isinstance(h, ShapedArray) and axis < h.ndim:
        return h.shape[axis]
    return computed


def fill_sym_from_hint(t: Type, out_hint, i: int = 0) -> Type:
    """Replace computed symbolic dims by the declared ones (same rank) so printing keeps JAX's form."""
    if not isinstance(t, ShapedArray) or not out_hint or i >= len(out_hint):
        return t
    h = out_hint[i]
    if not isinstance(h, ShapedArray) or h.ndim != t.ndim or t.is_static:
        return t
    shape = tuple(hd if (not isinstance(td, int)) else td for td, hd in zip(t.shape, h.shape))
    return t.update(shape=shape)


def canon_axis(axis: int, ndim: int, what: str = "axis") -> int:
    if not -ndim <= axis < ndim:
        raise ShapeError(f"{what} {axis} is out of bounds for rank {ndim}")
    return axis % ndim


# ---------------------------------------------------------------- operands


def arr(t: Type, prim: str, i: int | None = None) -> ShapedArray:
    """The operand as an array type, or ShapeError."""
    if isinstance(t, ShapedArray):
        return t
    where = f" at position {i}" if i is not None else ""
    raise ShapeError(f"{prim} expects an array operand{where}, got {t}")


def nargs(in_types: list, n: int | tuple[int, ...], prim: str) -> None:
    ok = len(in_types) == n if isinstance(n, int) else len(in_types) in n
    if not ok:
        want = n if isinstance(n, int) else " or ".join(map(str, n))
        raise ShapeError(
            f"{prim} expects {want} operand{'s' if want != 1 else ''}, got {len(in_types)}"
        )


def one_arr(in_types: list, prim: str) -> ShapedArray:
    """The single operand of a one-operand primitive, as an array type, or ShapeError."""
    nargs(in_types, 1, prim)
    return arr(in_types[0], prim, 0)


def min_args(in_types: list, n: int, prim: str) -> None:
    if len(in_types) < n:
        raise ShapeError(f"{prim} expects at least {n} operands, got {len(in_types)}")


def same_dtypes(prim: str, ts: list[ShapedArray]) -> None:
    ds = [t.dtype for t in ts if not is_key_dtype(t.dtype)]
    if len(set(ds)) > 1:
        raise ShapeError(f"{prim} requires operands of the same dtype, got {', '.join(ds)}")


def broadcast_shapes(prim: str, ts: list[ShapedArray]) -> tuple:
    """lax's n-ary rule: rank-0 operands broadcast; others must agree (1 broadcasts)."""
    shapes = [t.shape for t in ts if t.shape]
    if not shapes:
        return ()
    ranks = {len(s) for s in shapes}
    if len(ranks) != 1:
        raise ShapeError(
            f"{prim} requires operands of the same rank, got shapes {', '.join(fmt_shape(s) for s in shapes)}"
        )
    out = []
    for ds in zip(*shapes):
        non1 = [d for d in ds if d != 1]
        if not non1:
            out.append(1)
            continue
        ints_ = {d for d in non1 if isinstance(d, int)}
        if len(ints_) > 1:
            raise ShapeError(
                f"{prim} got incompatible shapes {', '.join(fmt_shape(s) for s in shapes)}"
            )
        if ints_:
            out.append(ints_.pop())
        else:
            out.append(non1[0])
    return tuple(out)


def vma_parts(v: str | None) -> dict[str, list[str]]:
    """`"V:(x,y), U:z"` -> {"V": ["x", "y"], "U": ["z"]}."""
    out: dict[str, list[str]] = {}
    if not v:
        return out
    depth, cur, items = 0, "", []
    for ch in v:
        if ch == "," and depth == 0:
            items.append(cur)
            cur = ""
            continue
        depth += ch == "("
        depth -= ch == ")"
        cur += ch
    items.append(cur)
    for it in items:
        key, _, val = it.strip().partition(":")
        val = val.strip()
        if val.startswith("(") and val.endswith(")"):
            val = val[1:-1]
        out[key.strip()] = [a.strip() for a in val.split(",") if a.strip()]
    return out


def varying_axes(t) -> list[str]:
    """The mesh axes a shard_map body value varies along: `{V:(x,y)}` (0.8+) or `{y,x}`
    (0.7)."""
    v = getattr(t, "vma", None)
    if not v:
        return []
    if ":" not in v:
        return [a.strip() for a in v.strip("{}()").split(",") if a.strip()]
    return vma_parts(v).get("V", [])


def vma_format(parts: dict[str, list[str]]) -> str | None:
    items = []
    for k, axes in parts.items():
        if not axes:
            continue
        items.append(f"{k}:{axes[0]}" if len(axes) == 1 else f"{k}:({','.join(axes)})")
    return ", ".join(items) if items else None


def vma_union(vmas) -> str | None:
    """The varying axes of an n-ary result: the union of the operands' (in order of appearance)."""
    vmas = [v for v in vmas if v is not None]
    if not vmas:
        return None
    if all(v == vmas[0] for v in vmas):
        return vmas[0]
    axes: list[str] = []
    for v in vmas:
        for a in vma_parts(v).get("V", []):
            if a not in axes:
                axes.append(a)
    return vma_format({"V": axes})


def first_space(ts: list) -> tuple[str | None, str | None]:
    """(memory_space, vma) to propagate: the first operand's memory space, the union of vmas."""
    ms = next((t.memory_space for t in ts if isinstance(t, ShapedArray) and t.memory_space), None)
    vma = vma_union([t.vma for t in ts if isinstance(t, ShapedArray)])
    return ms, vma


def mk(shape, dtype: str, weak: bool = False, like: list | None = None) -> ShapedArray:
    ms, vma = first_space(like) if like else (None, None)
    return ShapedArray(tuple(shape), dtype, weak, ms, vma)


# ---------------------------------------------------------------- nested jaxprs


def jaxpr_param(params: dict, *keys: str) -> Jaxpr:
    for k in keys:
        v = params.get(k)
        if isinstance(v, Jaxpr):
            return v
    raise ShapeError(f"missing jaxpr parameter '{keys[0]}'")


def types_agree(a: Type, b: Type) -> bool:
    """Whether two types agree for the checker: dtype and shape (symbolic dims leniently)."""
    if isinstance(a, ShapedArray) and isinstance(b, ShapedArray):
        if a.dtype != b.dtype and not (a.dtype.startswith("key<") and b.dtype.startswith("key<")):
            return False
        return dims_eq(a.shape, b.shape)
    if isinstance(a, RefType) and isinstance(b, RefType):
        return types_agree(a.inner, b.inner)
    if isinstance(a, OpaqueType) or isinstance(b, OpaqueType):
        return True
    return False


def check_call_operands(
    prim: str, jaxpr: Jaxpr, in_types: list[Type], what: str = "jaxpr", skip_consts: bool = True
) -> None:
    """The operands must match the nested jaxpr's invars in number and type."""
    inv = jaxpr.in_types
    if len(inv) != len(in_types):
        raise ShapeError(
            f"{prim}: {what} takes {len(inv)} input{'s' if len(inv) != 1 else ''}, "
            f"but the equation passes {len(in_types)}"
        )
    for i, (a, b) in enumerate(zip(in_types, inv)):
        if not types_agree(a, b):
            raise ShapeError(f"{prim}: operand {i} has type {a}, but {what} expects {b}")


def out_types_of(jaxpr: Jaxpr) -> list[Type]:
    return [v.type for v in jaxpr.outvars]


# ---------------------------------------------------------------- windows and costs (shared by
# the convolution and windowed-reduction rules, and the `flops` rules of several families)


def dilate_shape(shp, dilation) -> tuple:
    """A shape dilated by `dilation` (aligned to its trailing dimensions; 0 stays 0); a
    symbolic dim `d` becomes `r*d - r + 1` (JAX's `dilate_dim` on a symbolic size)."""
    dilation = (1,) * (len(shp) - len(dilation)) + tuple(dilation)
    return tuple(
        0 if d == 0 else dim_add(1, dim_mul(r, dim_sub(d, 1))) for d, r in zip(shp, dilation)
    )


def conv_vjp_lhs_padding(
    in_shape, window_dimensions, window_strides, out_shape, padding, lhs_dilation, rhs_dilation
) -> list[tuple[int, int]]:
    """The padding of the output cotangent whose windowed reduction / convolution with the
    reversed window is the operand cotangent (JAX's `_conv_general_vjp_lhs_padding`)."""
    lhs_d = dilate_shape(in_shape, lhs_dilation)
    rhs_d = dilate_shape(window_dimensions, rhs_dilation)
    out_d = dilate_shape(out_shape, window_strides)
    before = [dim_sub(dim_sub(r, lo), 1) for r, (lo, _) in zip(rhs_d, padding)]
    after = [
        dim_sub(dim_sub(dim_add(ld, dim_sub(r, 1)), od), b)
        for ld, r, od, b in zip(lhs_d, rhs_d, out_d, before)
    ]
    return list(zip(before, after))


def num_elements(t: Type) -> int:
    """The number of elements of an array type (of the referenced array for a ref); 0 else."""
    if isinstance(t, RefType):
        t = t.inner
    return t.size if isinstance(t, ShapedArray) else 0


def input_elements(e) -> int:
    """A `flops` rule: one operation per operand element (reductions, sorts, scans)."""
    return sum(num_elements(a.type) for a in e.inputs)


def output_elements(e) -> int:
    """The number of result elements of an equation."""
    return sum(num_elements(o.type) for o in e.outputs)


_AVAL_RE = LazyPattern(r"ShapedArray\(([a-z0-9_]+)\[([^\]]*)\](?:,\s*weak_type=(True|False))?")


def parse_avals(value) -> list[ShapedArray] | None:
    """`(ShapedArray(float32[3]),)` (typed or text) -> array types."""
    if value is None:
        return None
    text = format_value(value) if not isinstance(value, str) else value
    out = []
    for m in _AVAL_RE.finditer(text):
        dims = tuple(
            int(d) if d.strip().lstrip("-").isdigit() else d.strip()
            for d in m.group(2).split(",")
            if d.strip()
        )
        out.append(ShapedArray(dims, short_dtype_name(m.group(1)), m.group(3) == "True"))
    return out
