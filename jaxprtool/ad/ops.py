"""Math-like wrappers that emit equations into the current builder.

Every function takes and returns Atoms (`core.Var` / `core.Literal`); `bind` types the equation
with the primitive's shape rule.  Rules read like math: `mul(g, cos(x))`.
"""

from __future__ import annotations

import builtins
import math

from ..core import (
    Atom,
    Eqn,
    Jaxpr,
    Literal,
    RefType,
    ShapedArray,
    Type,
    Var,
    dtype_value,
    np_dtype,
    short_dtype_name,
)
from ..lazy import np
from ..params import EnumValue, Opaque, Record, SymExpr, all_ints
from ..record import loaded_record
from ..record import prim as record_of
from ..shapes import ShapeError, infer_types
from ..shapes.util import varying_axes
from ..shardings import SpecText, dim_axes, is_sharded_dim, sharded_size
from .builder import current, running
from .zeros import Zero, is_undefined_primal, is_zero, tangent_type


def typeof(x) -> Type:
    return x.type


def bind(prim: str, *inputs: Atom, _out_types=None, _params_key=None, **params):
    """Emit `prim[params] inputs`; a Var, or a list for multi-result / call primitives.
    `_params_key`: see `Builder.bind`."""
    outs = (running() or current()).bind(prim, inputs, params, _out_types, _params_key)
    if len(outs) == 1 and not (loaded_record(prim) or record_of(prim)).multiple_results:
        return outs[0]
    return outs


#: the parameters JAX 0.12 gives the Refs its backward pass makes (`core.new_ref(x)`)
NEW_REF_PARAMS = {"kind": None, "memory_space": None, "pin": False}


def new_ref(x: Atom) -> Var:
    """A Ref holding `x` (a cotangent Ref, in a transpose)."""
    (r,) = current().bind("new_ref", [x], NEW_REF_PARAMS, [RefType(x.type)])
    return r


def zeros_ref(ref_type: RefType) -> Var:
    """The cotangent Ref of a Ref of type `ref_type` before any cotangent reached it."""
    return new_ref(zeros(tangent_type(ref_type.inner)))


def add_into_ref(ref: Atom, x: Atom) -> None:
    """`ref[...] += x`: a cotangent a custom rule gives for a Ref operand, added into the
    Ref's cotangent Ref (as JAX does)."""
    current().bind("addupdate", [ref, x], {}, [])


def consts_as_refs(body: Jaxpr, loc=None, memory_space: str | None = None) -> Jaxpr:
    """`body` with its constvars made leading Ref inputs (in `memory_space`), each read whole
    (`c <- r[...]`) before its equations (a Ref constant is an input as it is): JAX's
    `hoist_consts_to_refs`, for a body whose operands are Refs (run_state's, a kernel's)."""
    refs, reads = [], []
    for v in body.constvars:
        if isinstance(v.type, RefType):
            refs.append(v)
            continue
        refs.append(Var(RefType(v.type, memory_space), None))
        reads.append(Eqn("get", (refs[-1],), (v,), {"indexer": Opaque("[...]")}, loc))
    return body.replace(constvars=(), invars=(*refs, *body.invars), eqns=(*reads, *body.eqns))


def _dtype(x) -> str:
    return x.type.dtype


def _py_value(value, dtype: str):
    if dtype == "bool":
        return bool(value)
    if dtype.startswith("c"):
        return builtins.complex(value)
    if dtype.startswith(("f", "bf")):
        v = float(value)
        if dtype in ("f32", "f16", "bf16"):
            v = _rounded(v, "e" if dtype == "f16" else "f")
        return v
    return int(value)


#: per `struct` format: the significand's bits and the range of `math.frexp` exponents of the
#: format's normal numbers (float32, float16)
_NORMALS = {"f": (24, -125, 128), "e": (11, -13, 16)}


def _rounded(v: float, fmt: str) -> float:
    """`v` rounded to float32 (`fmt` "f") or float16 ("e") as numpy rounds it (to nearest,
    ties to even), without importing numpy; beyond the format's range numpy gives inf.
    A normal number the format holds exactly (the constants of most rules: 2.0, -0.5) and
    zero are the value itself; any other is rounded by `struct`, imported here: its C
    module's load (~0.3 ms, ~1.5 ms cold) is not paid by the commands that round none."""
    significand, lowest, highest = _NORMALS[fmt]
    m, e = math.frexp(v)
    if lowest <= e <= highest and (m * (1 << significand)).is_integer():
        return v
    import struct

    try:
        return struct.unpack(fmt, struct.pack(fmt, v))[0]
    except OverflowError:
        return float(np.asarray(v, dtype=np.float32 if fmt == "f" else np.float16))


def lit(value, like) -> Literal:
    """A scalar Literal of `like`'s dtype (`like`: an Atom, a Type or a short dtype name)."""
    dtype = (
        like
        if isinstance(like, str)
        else (like.dtype if isinstance(like, ShapedArray) else _dtype(like))
    )
    return Literal(_py_value(value, dtype), _scalar_type(dtype))


#: dtype -> the type of a scalar literal of it (`lit`): one object per dtype, so that the
#: builder's memo of result types, keyed by the operand types' identities, knows the
#: equations of a literal operand (`mul x 2.0`) after the first
_SCALAR_TYPES: dict[str, ShapedArray] = {}


def _scalar_type(dtype: str) -> ShapedArray:
    t = _SCALAR_TYPES.get(dtype)
    if t is None:
        t = _SCALAR_TYPES[dtype] = ShapedArray((), dtype)
    return t


def full(type: ShapedArray, value) -> Atom:
    """An array of `type` filled with `value` (a Literal when `type` is a scalar and varies
    along no mesh axis).  Inside a shard_map body a value of a type that varies along mesh
    axes is `pvary`ed to them, as JAX's `zeros_like_shaped_array` does, so that the branches
    of a cond (and a loop's carries) keep the types JAX checks."""
    sc = lit(value, type.dtype)
    out = sc if type.shape == () else broadcast_in_dim(sc, type.shape, ())
    axes = varying_axes(type)
    if not axes:
        return out
    return bind("pvary", out, axes=tuple(axes), _out_types=[type])


def zeros(type: ShapedArray) -> Atom:
    """Zeros of `type`; in a split builder this goes to the tangent program."""
    b = current()
    if type.dtype == "float0":
        return Literal("float0", ShapedArray((), "float0")) if type.shape == () else _float0(type)
    with b.tangent_mode():
        return full(type, 0)


def _float0(type):
    return broadcast_in_dim(Literal("float0", ShapedArray((), "float0")), type.shape, ())


def ones_like(x) -> Atom:
    return full(ShapedArray(x.type.shape, x.type.dtype), 1)


# ---------------------------------------------------------------- unary


def _unary(name):
    def f(x, **params):
        if params.get("accuracy", 0) is None:
            del params["accuracy"]  # JAX's printer hides accuracy=None; emit what the parser reads
        return (running() or current()).bind(name, (x,), params)[0]  # (one result)

    f.__name__ = name
    return f


neg = _unary("neg")
sin = _unary("sin")
cos = _unary("cos")
tan = _unary("tan")
asin = _unary("asin")
acos = _unary("acos")
atan = _unary("atan")
sinh = _unary("sinh")
cosh = _unary("cosh")
tanh = _unary("tanh")
asinh = _unary("asinh")
acosh = _unary("acosh")
atanh = _unary("atanh")
exp = _unary("exp")
exp2 = _unary("exp2")
log = _unary("log")
log1p = _unary("log1p")
expm1 = _unary("expm1")
logistic = _unary("logistic")
sqrt = _unary("sqrt")
rsqrt = _unary("rsqrt")
cbrt = _unary("cbrt")
square = _unary("square")
abs = _unary("abs")  # noqa: A001
sign = _unary("sign")
floor = _unary("floor")
ceil = _unary("ceil")
is_finite = _unary("is_finite")
erf = _unary("erf")
erfc = _unary("erfc")
erf_inv = _unary("erf_inv")
lgamma = _unary("lgamma")
digamma = _unary("digamma")
real = _unary("real")
imag = _unary("imag")
conj_ = _unary("conj")
not_ = _unary("not")
stop_gradient = _unary("stop_gradient")


def conj(x, input_dtype=None):
    return bind(
        "conj",
        x,
        input_dtype=input_dtype if input_dtype is not None else dtype_value(_dtype(x)),
    )


def copy(x):
    return bind("copy", x)


def integer_pow(x, y: int):
    y = int(y)
    return bind("integer_pow", x, y=y, _params_key=y)  # (result types remembered by y)


def round(x, rounding_method=1):  # noqa: A001
    return bind("round", x, rounding_method=rounding_method)


# ---------------------------------------------------------------- binary


def _binary(name):
    def f(x, y, **params):
        return (running() or current()).bind(name, (x, y), params)[0]  # (one result)

    f.__name__ = name
    return f


add = _binary("add")
sub = _binary("sub")
mul = _binary("mul")
div = _binary("div")
rem = _binary("rem")
pow = _binary("pow")  # noqa: A001
max = _binary("max")  # noqa: A001
min = _binary("min")  # noqa: A001
atan2 = _binary("atan2")
nextafter = _binary("nextafter")
add_any = _binary("add_any")
complex = _binary("complex")  # noqa: A001
eq = _binary("eq")
ne = _binary("ne")
lt = _binary("lt")
le = _binary("le")
gt = _binary("gt")
ge = _binary("ge")
and_ = _binary("and")
or_ = _binary("or")
xor = _binary("xor")


def select_n(pred, *cases):
    return bind("select_n", pred, *cases)


def clamp(lo, x, hi):
    return bind("clamp", lo, x, hi)


# ---------------------------------------------------------------- conversions and shapes


def convert_element_type(x, dtype_short: str, weak_type: bool = False, sharding=None):
    """`x` as `dtype_short`; `sharding` (a SpecText): the result's explicit sharding, which
    JAX prints only in the binder's type."""
    if (
        sharding is None
        and _dtype(x) == dtype_short
        and not (isinstance(x.type, ShapedArray) and x.type.weak_type != weak_type)
    ):
        return x
    params = {"sharding": sharding.as_param()} if sharding is not None else {}
    return bind(
        "convert_element_type",
        x,
        new_dtype=dtype_value(dtype_short),
        weak_type=weak_type,
        **params,
    )


def reduce_precision(x, exponent_bits: int, mantissa_bits: int):
    return bind("reduce_precision", x, exponent_bits=exponent_bits, mantissa_bits=mantissa_bits)


def broadcast_in_dim(x, shape, dims):
    """Emitted as JAX 0.12 prints it (and the parser reads it): the result shape lives in the
    binder's type, `broadcast_dimensions` only when not empty; the result varies over the
    mesh axes its operand varies over (its `{V:...}`), as JAX's does."""
    shape = tuple(shape)
    dims = tuple(int(d) for d in dims)
    if tuple(x.type.shape) == shape and dims == tuple(range(len(shape))):
        return x
    params = {"broadcast_dimensions": dims} if dims else {}
    out = ShapedArray(shape, x.type.dtype, vma=getattr(x.type, "vma", None))
    return bind("broadcast_in_dim", x, _out_types=[out], **params)


def broadcast_to(x, shape):
    """Broadcast `x` (a scalar, or of rank len(shape) with 1s) to `shape`."""
    shape = tuple(shape)
    t = x.type
    if tuple(t.shape) == shape:
        return x
    if t.ndim == 0:
        return broadcast_in_dim(x, shape, ())
    return broadcast_in_dim(
        reshape(x, tuple(d for d in t.shape if d != 1)) if 1 in t.shape else x,
        shape,
        tuple(i for i, d in enumerate(t.shape) if d != 1 or shape[i] == 1),
    )


def reshape(x, shape, dimensions=None):
    """`x` reshaped to `shape`, its axes first read in the order `dimensions` (None: as
    they are)."""
    shape = tuple(shape)
    if tuple(x.type.shape) == shape and dimensions is None:
        return x
    sizes = sdims(shape)
    if not any(map(is_sharded_dim, sizes)):
        return bind(
            "reshape", x, new_sizes=sizes, dimensions=dimensions, sharding=None,
            _params_key=(sizes, dimensions),
        )  # fmt: skip
    # JAX's new_sizes are global sizes; the sharding is given where the reshape's sharding
    # rule would not give `shape`'s, as JAX's transposes pass the operand's
    params = dict(new_sizes=sdims(map(sharded_size, sizes)), dimensions=dimensions)
    try:
        (t,) = infer_types("reshape", [x.type], dict(params, sharding=None))
        ruled = tuple(t.shape) == sizes
    except ShapeError:
        ruled = False
    sharding = None if ruled else SpecText(tuple(dim_axes(d)[1] or None for d in sizes))
    return bind("reshape", x, **params, sharding=sharding and sharding.as_param())


def transpose(x, perm):
    perm = tuple(int(p) for p in perm)
    if perm == tuple(range(len(perm))):
        return x
    return bind("transpose", x, permutation=perm, _params_key=perm)


def reduce_sum(x, axes):
    axes = tuple(int(a) for a in axes)
    if not axes:
        return x
    return bind("reduce_sum", x, axes=axes, out_sharding=None, _params_key=axes)


def dot_general(x, y, dimension_numbers, precision=None, preferred_element_type=None, **params):
    """Parameters as JAX 0.12 prints them: `precision`/`preferred_element_type` only when set."""
    if precision is not None:
        params["precision"] = precision
    if preferred_element_type is not None:
        params["preferred_element_type"] = preferred_element_type
    params.pop("out_sharding", None)
    return bind("dot_general", x, y, dimension_numbers=dimension_numbers, **params)


def unbroadcast(type: ShapedArray, x) -> Atom:
    """Sum `x` down to `type`'s shape (the transpose of an implicit scalar / size-1 broadcast)."""
    xt = x.type
    xs, ts = xt.shape, type.shape
    # (shapes of one class compared as they are, most often the same tuple: no copies)
    if xs is ts or (xs == ts if xs.__class__ is ts.__class__ else tuple(xs) == tuple(ts)):
        return x
    if len(type.shape) == 0:
        return reduce_sum(x, tuple(range(xt.ndim)))
    axes = tuple(i for i, (a, b) in enumerate(zip(type.shape, xt.shape)) if a == 1 and b != 1)
    s = reduce_sum(x, axes)
    return reshape(s, type.shape)


def maybe_broadcast(shape, x):
    """Broadcast `x` to `shape` when it is a scalar of a smaller shape."""
    if tuple(x.type.shape) == tuple(shape):
        return x
    return broadcast_to(x, shape)


# ---------------------------------------------------------------- helpers of the rule modules


def ty(x) -> ShapedArray:
    """The type of an atom, an UndefinedPrimal or a Zero."""
    t = getattr(x, "type", None)
    if t is None:
        t = getattr(x, "aval", None)
    return t


def shape(x) -> tuple[int, ...]:
    s = ty(x).shape
    return s if s.__class__ is tuple else tuple(s)


def ints(v) -> tuple[int, ...]:
    t = tuple(v)
    return t if all_ints(t) else tuple(map(int, t))


def sdims(v) -> tuple:
    """A shape-like parameter: ints stay ints, sharded dims (`'8@x'`) stay strings, and a
    symbolic dim of a type (`'b'`, `'2*b + 1'`) becomes the `SymExpr` the parser reads from
    a parameter, so that it prints as JAX prints it (`(b, 3)`, not `('b', 3)`)."""
    t = tuple(v)
    return t if all_ints(t) else tuple(_dim_param(d) for d in t)


def _dim_param(d):
    if isinstance(d, SymExpr):
        return d
    if isinstance(d, str):
        return d if is_sharded_dim(d) else SymExpr(d)
    return int(d)


def und(x) -> bool:
    return is_undefined_primal(x)


def require_primal(what: str, operands, loc=None) -> None:
    """A transpose rule linear only in some operands: refuse, located, when one of the
    others (`what`, e.g. "'triangular_solve' in its matrix operand") depends on the linear
    inputs."""
    if any(und(x) for x in operands):
        from ..core import JaxprError

        raise JaxprError(
            f"{what} is not linear: only b may depend on the linear inputs",
            loc if loc is not None else current().loc,
        )


def zero_cts(args) -> list:
    """The all-Zero answer of a transpose rule: Zero for undefined args, None for the others."""
    return [Zero(tangent_type(ty(a))) if und(a) else None for a in args]


# ---------------------------------------------------------------- emitters that skip no-ops
# (parameters as JAX's own rules bind them: `shape=`/`sharding=` spelled out)


def bind_slice(x, start, limit, strides=None):
    """`x[start:limit:strides]`; bounds taken from a type (`2*b@x`) are its global sizes."""
    start, limit = sdims(map(sharded_size, start)), sdims(map(sharded_size, limit))
    if strides is not None:
        strides = ints(strides)
        if all(s == 1 for s in strides):
            strides = None
    whole = sdims(map(sharded_size, shape(x)))
    if start == (0,) * len(start) and limit == whole and strides is None:
        return x
    return bind("slice", x, start_indices=start, limit_indices=limit, strides=strides)


def slice_in_dim(x, start, limit, stride=1, axis=0):
    shp = shape(x)
    s = [0] * len(shp)
    lim = list(shp)
    st = [1] * len(shp)
    s[axis], lim[axis], st[axis] = start, limit, stride
    return bind_slice(x, s, lim, st)


def bind_pad(x, value, config):
    config = tuple((*sdims((lo, hi)), int(i)) for lo, hi, i in config)
    if all(c == (0, 0, 0) for c in config):
        return x
    return bind("pad", x, value, padding_config=config)


def bind_reshape(x, new_shape, dimensions=None):
    """`x` reshaped to the global sizes `new_shape` (axes first read in the order
    `dimensions`), the result's sharding left to the reshape's sharding rule."""
    new_shape = sdims(new_shape)
    if new_shape == sdims(shape(x)) and dimensions is None:
        return x
    return bind("reshape", x, new_sizes=new_shape, dimensions=dimensions, sharding=None)


def bind_transpose(x, perm):
    perm = ints(perm)
    if perm == tuple(range(len(perm))):
        return x
    return bind("transpose", x, permutation=perm, _params_key=perm)


def broadcast_to_type(x, t: ShapedArray):
    """The scalar `x` broadcast to the array type `t` (its memory space and varying axes
    kept, which `broadcast_in_dim`'s shape rule would not give)."""
    return current().bind(
        "broadcast_in_dim", [x], {"broadcast_dimensions": (), "sharding": None}, [t]
    )[0]


def broadcast_eqn(x: Atom, out: Var):
    """The equation (outside any builder) that broadcasts the scalar `x` to `out`, as 0.7.2
    printed it (`shape=` given)."""
    params = {"broadcast_dimensions": (), "shape": sdims(out.type.shape), "sharding": None}
    return Eqn("broadcast_in_dim", (x,), (out,), params, None)


def bind_broadcast(x, new_shape, dims):
    new_shape, dims = sdims(new_shape), ints(dims)
    if new_shape == sdims(shape(x)) and dims == tuple(range(len(new_shape))):
        return x
    return bind(
        "broadcast_in_dim", x, shape=new_shape, broadcast_dimensions=dims, sharding=None,
        _params_key=(new_shape, dims),
    )  # fmt: skip


def bind_reduce_sum(x, axes):
    axes = tuple(sorted(ints(axes)))
    if not axes:
        return x
    return bind("reduce_sum", x, axes=axes, out_sharding=None, _params_key=axes)


def bind_concatenate(xs, dimension):
    if len(xs) == 1:
        return xs[0]
    return bind("concatenate", *xs, dimension=int(dimension))


def bind_rev(x, dims):
    dims = ints(dims)
    if not dims:
        return x
    return bind("rev", x, dimensions=dims)


def bind_convert(x, dtype: str):
    if ty(x).dtype == dtype:
        return x
    return convert_element_type(x, dtype)


def bind_iota(dtype: str, shp, dimension: int):
    return bind(
        "iota", dtype=dtype_value(dtype), shape=sdims(shp), dimension=int(dimension), sharding=None
    )


# ---------------------------------------------------------------- matrices (linear algebra rules)
# Operands are stacks of matrices: leading batch dimensions, the matrix in the last two.

#: dot_general's `precision` for JAX's `Precision.HIGHEST` on both operands
HIGHEST = (EnumValue("Precision", "HIGHEST"), EnumValue("Precision", "HIGHEST"))


def batch_matmul(a, b, precision=None):
    """`a @ b` for stacks of matrices with the same batch dimensions (JAX's `batch_matmul`)."""
    nd = len(shape(a))
    batch = list(range(nd - 2))
    return dot_general(a, b, (([nd - 1], [nd - 2]), (batch, batch)), precision=precision)


def matrix_transpose(x):
    """Swap the last two dimensions (JAX's `_T`)."""
    nd = len(shape(x))
    return bind_transpose(x, (*range(nd - 2), nd - 1, nd - 2))


def adjoint(x):
    """The conjugate transpose of each matrix (JAX's `_H`); conj only for complex dtypes."""
    t = matrix_transpose(x)
    return conj(t) if _dtype(x).startswith("c") else t


def _matrix_dims(x):
    nd = len(shape(x))
    return shape(x), (nd - 2, nd - 1)


def tri_mask(shp, k: int = 0):
    """bool[N, M], true where `col <= row + k` (JAX's `_tri(bool, shape, k)`)."""
    rows = bind_iota("i32", shp, 0)
    cols = bind_iota("i32", shp, 1)
    return ge(add(rows, lit(k, "i32")) if k else rows, cols)


def _masked(x, k, keep_below):
    shp, dims = _matrix_dims(x)
    mask = broadcast_in_dim(tri_mask(shp[-2:], k), shp, dims)
    zero = full(ShapedArray(shp, _dtype(x)), 0)
    return select_n(mask, zero, x) if keep_below else select_n(mask, x, zero)


def tril(x, k: int = 0):
    """The lower triangle of each matrix, from diagonal `k` down (JAX's `_tril`)."""
    return _masked(x, k, True)


def triu(x, k: int = 0):
    """The upper triangle of each matrix, from diagonal `k` up (JAX's `_triu`)."""
    return _masked(x, k - 1, False)


def eye(dtype: str, n: int, m: int | None = None):
    """The identity matrix of `dtype` (JAX's `_eye`)."""
    shp = (n, n if m is None else m)
    return convert_element_type(eq(bind_iota("i32", shp, 0), bind_iota("i32", shp, 1)), dtype)


def eye_like(x):
    """The identity broadcast over `x`'s batch dimensions (x: a stack of square matrices)."""
    shp, dims = _matrix_dims(x)
    return broadcast_in_dim(eye(_dtype(x), shp[-2], shp[-1]), shp, dims)


def diagonal(x):
    """The diagonal of each square matrix (`x[..., i, i]`), as a sum of `x * I`: linear and
    transposable without a gather."""
    return reduce_sum(mul(x, eye_like(x)), (len(shape(x)) - 1,))


def diag_matrix(s):
    """The diagonal matrices with the vectors `s` (`...,n`) on their diagonals."""
    shp = shape(s)
    nd = len(shp)
    out = shp + (shp[-1],)
    spread = broadcast_in_dim(s, out, (*range(nd - 1), nd))
    return mul(spread, broadcast_in_dim(eye(_dtype(s), shp[-1]), out, (nd - 1, nd)))


def row_vector(v):
    """`v[..., None, :]`: each vector as a row, for broadcasting against matrices."""
    shp = shape(v)
    nd = len(shp)
    return broadcast_in_dim(v, shp[:-1] + (shp[-1], shp[-1]), (*range(nd - 1), nd))


def col_vector(v):
    """`v[..., :, None]`: each vector as a column, for broadcasting against matrices."""
    shp = shape(v)
    nd = len(shp)
    return broadcast_in_dim(v, shp[:-1] + (shp[-1], shp[-1]), tuple(range(nd)))


# ---------------------------------------------------------------- gather (also used by sort's JVP)


def gather_dnums(
    offset_dims,
    collapsed_slice_dims,
    start_index_map,
    operand_batching_dims=(),
    start_indices_batching_dims=(),
) -> Record:
    return Record(
        "GatherDimensionNumbers",
        (
            ("offset_dims", ints(offset_dims)),
            ("collapsed_slice_dims", ints(collapsed_slice_dims)),
            ("start_index_map", ints(start_index_map)),
            ("operand_batching_dims", ints(operand_batching_dims)),
            ("start_indices_batching_dims", ints(start_indices_batching_dims)),
        ),
    )


def mode_enum(member: str) -> EnumValue:
    return EnumValue("GatherScatterMode", member)


def mode_name(mode) -> str:
    if mode is None:
        return "FILL_OR_DROP"
    if isinstance(mode, EnumValue):
        return mode.member
    if isinstance(mode, int):
        return {0: "CLIP", 1: "FILL_OR_DROP", 2: "PROMISE_IN_BOUNDS", 3: "ONE_HOT"}.get(
            mode, "FILL_OR_DROP"
        )
    return str(mode).rsplit(".", 1)[-1]


def gather_fill_value(mode, fill_value, dtype: str):
    """The fill_value JAX's `lax.gather` binds: only FILL_OR_DROP has one (default by dtype)."""
    if mode_name(mode) != "FILL_OR_DROP":
        return None
    if fill_value is not None:
        return fill_value
    if dtype.startswith(("f", "bf", "c")):
        return float("nan")
    if dtype == "bool":
        return True
    info = np.iinfo(np_dtype(dtype))
    return int(info.min) if dtype.startswith("i") else int(info.max)


def bind_gather(
    operand,
    indices,
    dnums,
    slice_sizes,
    *,
    mode=None,
    fill_value=None,
    indices_are_sorted=False,
    unique_indices=False,
):
    mode = mode if mode is not None else mode_enum("PROMISE_IN_BOUNDS")
    return bind(
        "gather",
        operand,
        indices,
        dimension_numbers=dnums,
        fill_value=gather_fill_value(mode, fill_value, ty(operand).dtype),
        indices_are_sorted=indices_are_sorted,
        mode=mode,
        slice_sizes=sdims(slice_sizes),
        unique_indices=unique_indices,
    )


def take_along(x, idx, axis):
    """`x` gathered along `axis` at `idx` (same shape as the result), all other dims batched."""
    rank = len(shape(idx))
    others = tuple(i for i in range(rank) if i != axis)
    idx2 = bind_reshape(idx, shape(idx) + (1,))
    dnums = gather_dnums((), (axis,), (axis,), others, others)
    return bind_gather(x, idx2, dnums, (1,) * rank)


__all__ = [n for n in dir() if not n.startswith("_") and n not in ("np", "annotations")]
_ = Var  # re-export for rule modules


def emit_jaxpr(jaxpr, inputs, consts=()) -> list:
    """Copy `jaxpr`'s equations (types and name hints kept) into the current builder on
    `inputs` (and `consts` for its constvars); its results.  (The one way rules inline a
    body: traced custom rules, vmap's batched bodies and Jacobians, cond's branches under a
    batched predicate.)"""
    from ..core import JaxprError

    b = current()
    if len(consts) != len(jaxpr.constvars):
        raise JaxprError("internal error: inlining a jaxpr with constants", b.loc)
    env = {id(v): x for v, x in zip(jaxpr.constvars, consts)}
    env.update((id(v), x) for v, x in zip(jaxpr.invars, inputs))

    def read(a):
        return env.get(id(a), a) if isinstance(a, Var) else a

    for e in jaxpr.eqns:
        ins = [read(a) for a in e.inputs]
        outs = b.emit(
            e.prim, ins, e.params, [o.type for o in e.outputs], [o.hint for o in e.outputs]
        )
        env.update((id(o), n) for o, n in zip(e.outputs, outs))
    return [read(a) for a in jaxpr.outvars]


# ---------------------------------------------------------------- tangents


def instantiate(t) -> Atom:
    """An Atom for a tangent: a Zero becomes a literal (scalars) or a `broadcast_in_dim` of one.

    In a split (linearize) builder the zeros equation goes to the tangent program."""
    if not is_zero(t):
        return t
    return zeros(t.type)


def add_tangents(a, b):
    """a + b on tangents; short-circuits on Zero, emits `add_any` otherwise."""
    if a.__class__ is Zero:  # (Zero has no subclass)
        return b
    if b.__class__ is Zero:
        return a
    return (running() or current()).bind("add_any", (a, b), {})[0]


# ---------------------------------------------------------------- structural emitters


def iota(shape, dimension: int, dtype: str = "int32"):
    """`iota` of `shape` counting along `dimension`."""
    return bind(
        "iota",
        dimension=dimension,
        dtype=dtype_value(short_dtype_name(dtype)),
        shape=sdims(shape),
        sharding=None,
    )


def split(x, sizes, axis: int) -> list:
    """`split` of axis `axis` of `x` into consecutive parts of `sizes`."""
    parts = bind("split", x, sizes=sdims(sizes), axis=axis)
    return parts if isinstance(parts, list) else [parts]


def emit_scan(inputs, params: dict, out_types) -> list:
    """A `scan` equation with the given parameters (in the encoding of the style that made
    them: `Style.scan_params`) and result types."""
    return current().emit("scan", list(inputs), params, list(out_types))
