"""The reduction family: reductions over axes (reduce_sum, ..., argmax/argmin, the generic
`reduce`), cumulative reductions, windowed reductions and their select_and_* helpers, sort and
top_k.

Differentiation follows JAX (`lax.py`, `windowed_reductions.py`, `control_flow/loops.py`):
- reduce_max / reduce_min split the tangent evenly among tied maxima (location indicators);
- reduce_prod uses products of all-but-one element (exclusive prefix and suffix products),
  which stays exact when some elements are zero;
- cumprod / cummax / cummin / cumlogsumexp differentiate a parallel prefix scan (as JAX's
  associative_scan), with max/min splitting ties in half like `lax.max`'s JVP;
- reduce_window_max / _min go through select_and_gather_add, whose transpose is
  select_and_scatter_add (and back);
- sort, top_k and approx_top_k gather the tangents with the permutation;
- generic reduce / reduce_window differentiate their reduction jaxpr (reduce: a halving tree of
  the inlined reducer, transposable; reduce_window: a reduce_window of (primal, tangent) pairs,
  which, as in JAX, has no transpose).

Each reduction costs one FLOP per operand element (`flops`).
"""

from __future__ import annotations

from ..ad import ops
from ..ad.ops import (
    bind_broadcast,
    bind_concatenate,
    bind_convert,
    bind_iota,
    bind_pad,
    bind_reduce_sum,
    bind_reshape,
    bind_rev,
    bind_slice,
    bind_transpose,
    instantiate,
    ints,
    shape,
    slice_in_dim,
    take_along,
    ty,
)
from ..ad.registry import (
    defjvp,
    defjvp2,
    defjvp_zero,
    deflinear2,
    primitive_jvps,
    primitive_transposes,
    rebind_primal,
    set_kind,
)
from ..ad.zeros import Zero, is_zero, tangent_type
from ..core import Jaxpr, JaxprError, ShapedArray
from ..lazy import lazy_module
from ..record import batching_rule, define
from ..shapes import ShapeError, shape_rule
from ..shapes.util import (
    arr,
    canon_axis,
    conv_vjp_lhs_padding,
    dilate_dim,
    dim_add,
    dims_eq,
    dtype_param,
    fill_sym_from_hint,
    fmt_shape,
    input_elements,
    int_param,
    is_complex_dtype,
    is_int_dtype,
    min_args,
    mk,
    nargs,
    need,
    one_arr,
    pairs,
    static_ints,
    strided_dim,
)
from ..shardings import sharded_like, sharded_size
from ..text import style as ST

#: the vmap machinery, executed when a batching rule first runs
BT = lazy_module("jaxprtool.ad.batching")

#: the passes' helpers that the simplification rules below call, imported when a pass first
#: runs them (reading and printing a program loads this family without them)
S = lazy_module("jaxprtool.passes.simplify")

# ---------------------------------------------------------------- monoid reductions over axes
# reduce_sum, reduce_max, reduce_min, reduce_prod, reduce_and, reduce_or, reduce_xor

MONOID_REDUCTIONS = (
    "reduce_sum",
    "reduce_max",
    "reduce_min",
    "reduce_prod",
    "reduce_and",
    "reduce_or",
    "reduce_xor",
)


def _reduce_axes(prim, x, axes):
    for a in axes:
        if not 0 <= a < x.ndim:
            raise ShapeError(f"{prim}: axis {a} is out of range for {x}")
    if len(set(axes)) != len(axes):
        raise ShapeError(f"{prim}: duplicate axes {fmt_shape(axes)}")
    return tuple(d for i, d in enumerate(x.shape) if i not in axes)


def _axes_param(params) -> tuple[int, ...]:
    """`axes`, a tuple: JAX's bind (and the AD rules) refuse a bare integer."""
    v = need(params, "axes")
    if isinstance(v, (bool, int)):
        raise ShapeError(f"axes={v} is no tuple of axes: write axes=({v},)")
    return static_ints(v)


@shape_rule(*MONOID_REDUCTIONS)
def _reduce_monoid(in_types, params, out_hint):
    x = one_arr(in_types, "reduce")
    shape = _reduce_axes("reduce", x, _axes_param(params))
    return [x.update(shape=shape)]


def _simplify_reduce_nothing(e, ctx):
    """A reduction over no axes is the identity."""
    if len(e.inputs) != 1:
        return None
    if S.identity_perm(e.params.get("axes"), 0) and e.params.get("out_sharding") is None:
        return e.inputs[0]
    return None


def _restyle_out_sharding(since: tuple[int, ...]):
    """Versions before `since` had no `out_sharding` parameter."""

    def rule(prim, params, e, style):
        if tuple(style.version) < since and params.get("out_sharding", 0) is None:
            del params["out_sharding"]
        return prim, params

    return rule


def _bind_out_sharding(eqn, p, dims):
    """None (JAX infers the result's sharding from the operand's), but for a result JAX left
    unreduced (`out_sharding=NamedSharding(..., spec=P(unreduced={'x'}, ...))`, a type
    `f32[4]{U:x}`): that sharding, which no operand implies."""
    from ..backend.sharding import named_sharding
    from ..shardings import read_sharding

    sh = read_sharding(p.get("out_sharding"))
    if sh is None or not sh.spec.extra:
        return {"out_sharding": None}
    import jax

    concrete = named_sharding(p["out_sharding"], eqn)
    return {"out_sharding": jax.NamedSharding(concrete.mesh.abstract_mesh, concrete.spec)}


for _n in MONOID_REDUCTIONS:
    define(_n, flops=input_elements, batching=batching_rule("reducer", _n))
for _n in ("reduce_sum", "reduce_max", "reduce_min", "reduce_prod", "reduce_and", "reduce_or"):
    define(_n, simplify=_simplify_reduce_nothing)

# ---------------------------------------------------------------- reduce_sum


def _reduce_sum_transpose(ct, operand, *, axes, **_):
    if is_zero(ct):
        return [Zero(tangent_type(ty(operand)))]
    op_shape = shape(operand)
    axes = set(ints(axes))
    kept = [d for d in range(len(op_shape)) if d not in axes]
    return [bind_broadcast(ct, op_shape, kept)]


deflinear2("reduce_sum", _reduce_sum_transpose)
define("reduce_sum", restyle=_restyle_out_sharding((0, 8)), bind_params=_bind_out_sharding)

# ---------------------------------------------------------------- reduce_max, reduce_min


def _chooser_jvp(g, ans, operand, *, axes, **_):
    op_shape = shape(operand)
    axes = ints(axes)
    kept = [d for d in range(len(op_shape)) if d not in set(axes)]
    location = bind_convert(ops.eq(operand, bind_broadcast(ans, op_shape, kept)), ty(g).dtype)
    counts = bind_reduce_sum(location, axes)
    return ops.div(bind_reduce_sum(ops.mul(g, location), axes), counts)


def _no_out_sharding_clue(e) -> set[str]:
    """0.12 prints reduce_max/reduce_min with `out_sharding`, 0.10 and 0.11 without."""
    return set() if "out_sharding" in e.params else {ST.CLUE_0_10}


for _n in ("reduce_max", "reduce_min"):
    defjvp2(_n, _chooser_jvp)
    define(
        _n,
        restyle=_restyle_out_sharding((0, 12)),
        bind_params=_bind_out_sharding,
        version_clues=_no_out_sharding_clue,
    )

# ---------------------------------------------------------------- reduce_prod


def _reduce_prod_jvp(primals, tangents, *, axes, **params):
    (x,), (g,) = primals, tangents
    (y,) = rebind_primal("reduce_prod", primals, dict(params, axes=axes))
    if is_zero(g):
        return [y], [Zero(tangent_type(ty(y)))]
    x_shape = shape(x)
    axes = ints(axes)
    non_axes = [d for d in range(len(x_shape)) if d not in set(axes)]
    n = 1
    for a in axes:
        n *= x_shape[a]
    if n == 0:
        return [y], [ops.zeros(ShapedArray(shape(y), ty(g).dtype))]
    new_shape = [x_shape[d] for d in non_axes] + [n]
    perm = non_axes + list(axes)
    xr = bind_reshape(bind_transpose(x, perm), new_shape)
    gr = bind_reshape(bind_transpose(g, perm), new_shape)
    last = len(new_shape) - 1
    one = ops.lit(1, xr)
    # product of all elements but one = (exclusive prefix product) * (exclusive suffix product)
    fwd = ops.bind("cumprod", xr, axis=last, reverse=False)
    bwd = ops.bind("cumprod", xr, axis=last, reverse=True)
    cfg = [(0, 0, 0)] * len(new_shape)
    left = bind_pad(slice_in_dim(fwd, 0, n - 1, 1, last), one, cfg[:last] + [(1, 0, 0)])
    right = bind_pad(slice_in_dim(bwd, 1, n, 1, last), one, cfg[:last] + [(0, 1, 0)])
    others = ops.mul(left, right)
    return [y], [bind_reduce_sum(ops.mul(gr, others), [last])]


primitive_jvps["reduce_prod"] = _reduce_prod_jvp
set_kind("reduce_prod")

# ---------------------------------------------------------------- reduce_and, reduce_or, reduce_xor

for _n in ("reduce_and", "reduce_or", "reduce_xor"):
    defjvp_zero(_n)

# ---------------------------------------------------------------- argmax, argmin


@shape_rule("argmax", "argmin")
def _argminmax(in_types, params, out_hint):
    x = one_arr(in_types, "argmax")
    axes = _axes_param(params)
    if len(axes) != 1:
        raise ShapeError(f"argmax/argmin expects exactly one axis, got {fmt_shape(axes)}")
    d = dtype_param(need(params, "index_dtype"))
    if not is_int_dtype(d):
        raise ShapeError(f"argmax/argmin: index_dtype must be an integer type, got {d}")
    shape = _reduce_axes("argmax", x, axes)
    return [x.update(shape=shape, dtype=d, weak_type=False)]


def _bind_index_dtype(eqn, p, dims):
    from ..backend.prims import dtype_param

    return {"index_dtype": dtype_param(p["index_dtype"])} if "index_dtype" in p else {}


for _n in ("argmax", "argmin"):
    defjvp_zero(_n)
    define(
        _n,
        bind_params=_bind_index_dtype,
        flops=input_elements,
        batching=batching_rule("reducer", _n),
    )

# ---------------------------------------------------------------- cumulative reductions
# cumsum (linear), cumprod, cummax, cummin, cumlogsumexp (JVP of a parallel prefix scan)


@shape_rule("cumsum", "cumprod", "cummax", "cummin", "cumlogsumexp")
def _cumulative(in_types, params, out_hint):
    x = one_arr(in_types, "cumulative reduction")
    axis = int_param(params, "axis", 0)
    if x.ndim and not 0 <= axis < x.ndim:
        raise ShapeError(f"cumulative reduction: axis {axis} is out of range for {x}")
    return [x]


def _cumsum_transpose(ct, operand, *, axis, reverse=False, **_):
    if is_zero(ct):
        return [Zero(tangent_type(ty(operand)))]
    return [ops.bind("cumsum", ct, axis=int(axis), reverse=not bool(reverse))]


deflinear2("cumsum", _cumsum_transpose)


def _interleave(a, b, axis):
    """a[0] b[0] a[1] b[1] ... along `axis` (len(a) == len(b) or len(b) + 1)."""
    na, nb = shape(a)[axis], shape(b)[axis]
    rank = len(shape(a))
    a_pad = [(0, 0, 0)] * rank
    b_pad = [(0, 0, 0)] * rank
    a_pad[axis] = (0, 1 if na == nb else 0, 1)
    b_pad[axis] = (1, 0 if na == nb else 1, 1)
    return ops.add(bind_pad(a, ops.lit(0, a), a_pad), bind_pad(b, ops.lit(0, b), b_pad))


def _assoc_scan(combine, elems, axis):
    """Inclusive prefix scan of the tuple `elems` along `axis` with the associative `combine`."""
    n = shape(elems[0])[axis]
    if not isinstance(n, int):  # JAX's words: its associative_scan refuses it as well
        raise JaxprError(f"associative scan over axis of non-constant size: {n}")
    if n < 2:
        return elems
    reduced = combine(
        [slice_in_dim(e, 0, n - 1, 2, axis) for e in elems],
        [slice_in_dim(e, 1, n, 2, axis) for e in elems],
    )
    odd = _assoc_scan(combine, reduced, axis)
    if n % 2 == 0:
        no = shape(odd[0])[axis]
        even = combine(
            [slice_in_dim(e, 0, no - 1, 1, axis) for e in odd],
            [slice_in_dim(e, 2, n, 2, axis) for e in elems],
        )
    else:
        even = combine(odd, [slice_in_dim(e, 2, n, 2, axis) for e in elems])
    even = [
        bind_concatenate([slice_in_dim(e, 0, 1, 1, axis), r], axis) for e, r in zip(elems, even)
    ]
    return [_interleave(e, o, axis) for e, o in zip(even, odd)]


def _full_like(x, v):
    t = ty(x)
    return ops.full(ShapedArray(tuple(t.shape), t.dtype), v)


def _balanced_cmp(x, y):
    """1 where x > y, 0.5 where x == y, 0 elsewhere (lax.max's JVP weights)."""
    gt = ops.bind("gt", x, y)
    eq = ops.eq(x, y)
    return ops.select_n(
        gt, ops.select_n(eq, _full_like(x, 0), _full_like(x, 0.5)), _full_like(x, 1)
    )


def _combine_mul(a, b):
    (pa, ta), (pb, tb) = a, b
    return [ops.mul(pa, pb), ops.add(ops.mul(ta, pb), ops.mul(pa, tb))]


def _combine_max(a, b):
    (pa, ta), (pb, tb) = a, b
    return [
        ops.bind("max", pa, pb),
        ops.add(ops.mul(ta, _balanced_cmp(pa, pb)), ops.mul(tb, _balanced_cmp(pb, pa))),
    ]


def _combine_min(a, b):
    (pa, ta), (pb, tb) = a, b
    return [
        ops.bind("min", pa, pb),
        ops.add(ops.mul(ta, _balanced_cmp(pb, pa)), ops.mul(tb, _balanced_cmp(pa, pb))),
    ]


def _combine_logaddexp(a, b):
    (pa, ta), (pb, tb) = a, b
    m = ops.bind("max", pa, pb)
    d = ops.bind("abs", ops.sub(pa, pb))
    p = ops.add(m, ops.bind("log1p", ops.exp(ops.neg(d))))
    wa = ops.exp(ops.sub(pa, p))
    wb = ops.exp(ops.sub(pb, p))
    return [p, ops.add(ops.mul(ta, wa), ops.mul(tb, wb))]


def _cumulative_jvp(prim, combine):
    def rule(primals, tangents, *, axis, reverse=False, **params):
        (x,), (t,) = primals, tangents
        (y,) = rebind_primal(prim, primals, dict(params, axis=axis, reverse=reverse))
        if is_zero(t):
            return [y], [Zero(tangent_type(ty(y)))]
        ax = int(axis)
        xs, ts = x, instantiate(t)
        if reverse:
            xs, ts = bind_rev(xs, [ax]), bind_rev(ts, [ax])
        _, t_out = _assoc_scan(combine, [xs, ts], ax)
        if reverse:
            t_out = bind_rev(t_out, [ax])
        return [y], [t_out]

    return rule


for _p, _c in (
    ("cumprod", _combine_mul),
    ("cummax", _combine_max),
    ("cummin", _combine_min),
    ("cumlogsumexp", _combine_logaddexp),
):
    primitive_jvps[_p] = _cumulative_jvp(_p, _c)
    set_kind(_p)


def _cumulative_batching(name):
    def rule(args, dims, *, axis, **params):
        (x,), (d,) = args, dims
        axis = int(axis)
        return BT.bind(name, x, axis=axis if axis < d else axis + 1, **params), [d]

    return rule


for _n in ("cumsum", "cumprod", "cummax", "cummin", "cumlogsumexp"):
    define(_n, flops=input_elements, batching=_cumulative_batching(_n))

# ---------------------------------------------------------------- windowed reductions
# reduce_window_sum (linear), reduce_window_max / _min (through select_and_gather_add)


def _window_shape(prim, x: ShapedArray, params):
    wd = static_ints(need(params, "window_dimensions"))
    ws = static_ints(need(params, "window_strides"))
    pad = pairs(need(params, "padding"), "padding")
    bd = static_ints(params.get("base_dilation")) or (1,) * x.ndim
    wdl = static_ints(params.get("window_dilation")) or (1,) * x.ndim
    if not (len(wd) == len(ws) == len(pad) == len(bd) == len(wdl) == x.ndim):
        raise ShapeError(
            f"{prim}: window_dimensions {fmt_shape(wd)}, strides, padding and dilations must have one "
            f"entry per axis of {x}"
        )
    out = []
    for d, w, s, (lo, hi), b, wdi in zip(x.shape, wd, ws, pad, bd, wdl):
        padded = dim_add(dim_add(dilate_dim(sharded_size(d), b), lo), hi)
        out.append(strided_dim(padded, dilate_dim(w, wdi), s))
    if all(o == 1 for o in out):  # JAX's `_get_sharding_for_varying_out_shape`: replicated
        return tuple(out)
    return tuple(sharded_like(d, o) for d, o in zip(x.shape, out))  # the operand's spec


def _window_params(p):
    return (
        ints(p["window_dimensions"]),
        ints(p["window_strides"]),
        tuple(ops.sdims(q) for q in p["padding"]),  # symbolic pads (SAME) stay symbolic
        ints(p.get("base_dilation") or (1,) * len(p["window_dimensions"])),
        ints(p.get("window_dilation") or (1,) * len(p["window_dimensions"])),
    )


@shape_rule("reduce_window_sum", "reduce_window_max", "reduce_window_min")
def _reduce_window_monoid(in_types, params, out_hint):
    x = one_arr(in_types, "reduce_window")
    return [fill_sym_from_hint(x.update(shape=_window_shape("reduce_window", x, params)), out_hint)]


def _reduce_window_sum_transpose(ct, operand, **params):
    if is_zero(ct):
        return [Zero(tangent_type(ty(operand)))]
    wd, ws, padding, bd, wdil = _window_params(params)
    in_shape = [sharded_size(d) for d in shape(operand)]
    ct_shape = [sharded_size(d) for d in shape(ct)]
    pads = conv_vjp_lhs_padding(in_shape, wd, ws, ct_shape, padding, bd, wdil)
    cfg = [(lo, hi, s - 1) for (lo, hi), s in zip(pads, ws)]
    padded = bind_pad(ct, ops.lit(0, ct), cfg)
    r = ops.bind(
        "reduce_window_sum",
        padded,
        window_dimensions=wd,
        window_strides=bd,
        padding=tuple((0, 0) for _ in in_shape),
        base_dilation=(1,) * len(in_shape),
        window_dilation=wdil,
    )
    return [r]


deflinear2("reduce_window_sum", _reduce_window_sum_transpose)


def _select_and_gather_add(t, x, select_prim, wd, ws, padding, bd, wdil):
    return ops.bind(
        "select_and_gather_add",
        t,
        x,
        select_prim=select_prim,
        window_dimensions=wd,
        window_strides=ws,
        padding=padding,
        base_dilation=bd,
        window_dilation=wdil,
    )


def _window_chooser_jvp(select_name):
    def fn(g, operand, **params):
        wd, ws, padding, bd, wdil = _window_params(params)
        return _select_and_gather_add(g, operand, select_name, wd, ws, padding, bd, wdil)

    return fn


defjvp("reduce_window_max", _window_chooser_jvp("ge"))
defjvp("reduce_window_min", _window_chooser_jvp("le"))


def _batched_window_params(params, d: int):
    """The window parameters with a window of 1 (no padding) along a new axis at `d`."""
    p = dict(params)
    for k, one in (
        ("window_dimensions", 1),
        ("window_strides", 1),
        ("base_dilation", 1),
        ("window_dilation", 1),
    ):
        if k in p and p[k] is not None:
            v = list(p[k])
            v.insert(d, one)
            p[k] = tuple(v)
    if "padding" in p:
        v = list(p["padding"])
        v.insert(d, (0, 0))
        p["padding"] = tuple(v)
    return p


def _reduce_window_monoid_batching(name):
    """JAX's `_reduce_window_batch_rule`: a window of 1 along the batch axis."""

    def rule(args, dims, **params):
        (x,), (d,) = args, dims
        return BT.bind(name, x, **_batched_window_params(params, d)), [d]

    return rule


for _n in ("reduce_window_sum", "reduce_window_max", "reduce_window_min"):
    define(_n, flops=input_elements, batching=_reduce_window_monoid_batching(_n))

# ---------------------------------------------------------------- select_and_gather_add,
# select_and_scatter_add, select_and_scatter: the selections of windowed max / min


def _ge_le(select_prim) -> str:
    return str(getattr(select_prim, "text", select_prim)).rsplit(".", 1)[-1].strip("'\"")


def _bind_select_prim(eqn, p, dims):
    """`select_prim=ge` is printed as a name; bind wants the comparison primitive itself."""
    from ..backend.prims import primitive_table

    name = _ge_le(p["select_prim"])
    table = primitive_table()
    if name not in ("ge", "le", "gt", "lt"):
        raise JaxprError(f"cannot run '{eqn.prim}': unknown select_prim={name}", eqn.loc)
    return {"select_prim": table[name]}


def _linear_in_first_jvp(name):
    """JVP of a primitive linear in its first operand (the second only selects): rebind it on
    the tangent."""

    def rule(primals, tangents, **params):
        (_, x), (t, _) = primals, tangents
        (y,) = rebind_primal(name, primals, params)
        if is_zero(t):
            return [y], [Zero(tangent_type(ty(y)))]
        return [y], [ops.bind(name, t, x, **params)]

    return rule


@shape_rule("select_and_gather_add")
def _select_and_gather_add_shape(in_types, params, out_hint):
    nargs(in_types, 2, "select_and_gather_add")
    t = arr(in_types[0], "select_and_gather_add", 0)
    x = arr(in_types[1], "select_and_gather_add", 1)
    if not dims_eq(t.shape, x.shape):
        raise ShapeError(f"select_and_gather_add: tangents {t} and operand {x} shapes must match")
    return [
        fill_sym_from_hint(
            t.update(shape=_window_shape("select_and_gather_add", x, params)), out_hint
        )
    ]


def _select_and_gather_add_transpose(cts, tangents, operand, *, select_prim, **params):
    (ct,) = cts
    if is_zero(ct):
        return [Zero(tangent_type(ty(tangents))), None]
    wd, ws, padding, bd, wdil = _window_params(params)
    if any(d != 1 for d in wdil):
        raise JaxprError(
            "VJP not implemented for select_and_gather (MaxPool) with window dilation, "
            f"got window_dilation={wdil}."
        )
    x = operand
    has_bd = any(d != 1 for d in bd)
    if has_bd:
        ident = float("-inf") if _ge_le(select_prim) == "ge" else float("inf")
        x = bind_pad(x, ops.lit(ident, x), [(0, 0, d - 1) for d in bd])
    r = _select_and_scatter_add(ct, x, select_prim, wd, ws, padding)
    if has_bd:
        r = bind_slice(r, (0,) * len(shape(r)), shape(r), bd)
    return [r, None]


primitive_jvps["select_and_gather_add"] = _linear_in_first_jvp("select_and_gather_add")
set_kind("select_and_gather_add")
primitive_transposes["select_and_gather_add"] = _select_and_gather_add_transpose


def _select_and_window_batching(name):
    """JAX's `_select_and_{gather,scatter}_add_batch_rule`: both operands batched first."""

    def rule(args, dims, **params):
        xs = [BT.bdim_at_front(x, d) for x, d in zip(args, dims)]
        return BT.bind(name, *xs, **_batched_window_params(params, 0)), [0]

    return rule


define(
    "select_and_gather_add",
    bind_params=_bind_select_prim,
    batching=_select_and_window_batching("select_and_gather_add"),
)


def _select_and_scatter_add(s, x, select_prim, wd, ws, padding):
    return ops.bind(
        "select_and_scatter_add",
        s,
        x,
        select_prim=select_prim,
        window_dimensions=wd,
        window_strides=ws,
        padding=padding,
    )


@shape_rule("select_and_scatter_add")
def _select_and_scatter_add_shape(in_types, params, out_hint):
    nargs(in_types, 2, "select_and_scatter_add")
    src = arr(in_types[0], "select_and_scatter_add", 0)
    x = arr(in_types[1], "select_and_scatter_add", 1)
    return [x.update(dtype=src.dtype, weak_type=src.weak_type)]


def _select_and_scatter_add_transpose(
    cts, source, operand, *, select_prim, window_dimensions, window_strides, padding, **_
):
    (ct,) = cts
    if is_zero(ct):
        return [Zero(tangent_type(ty(source))), None]
    wd = ints(window_dimensions)
    ones = (1,) * len(wd)
    pad = tuple(tuple(ints(q)) for q in padding)
    return [
        _select_and_gather_add(ct, operand, select_prim, wd, ints(window_strides), pad, ones, ones),
        None,
    ]


primitive_jvps["select_and_scatter_add"] = _linear_in_first_jvp("select_and_scatter_add")
set_kind("select_and_scatter_add")
primitive_transposes["select_and_scatter_add"] = _select_and_scatter_add_transpose
define(
    "select_and_scatter_add",
    bind_params=_bind_select_prim,
    batching=_select_and_window_batching("select_and_scatter_add"),
)


@shape_rule("select_and_scatter")
def _select_and_scatter(in_types, params, out_hint):
    min_args(in_types, 3, "select_and_scatter")
    x = arr(in_types[0], "select_and_scatter", 0)
    return [x]


# ---------------------------------------------------------------- reducers (reduce, reduce_window)


def _check_reducer(prim, j, inits, extra=0):
    if not isinstance(j, Jaxpr):
        return
    n = len(inits)
    if len(j.invars) != 2 * n + 0 and len(j.invars) != 2 * n + extra:
        raise ShapeError(
            f"{prim}: the reducer jaxpr takes {len(j.invars)} inputs, expected {2 * n}"
        )
    if len(j.outvars) != n:
        raise ShapeError(
            f"{prim}: the reducer jaxpr returns {len(j.outvars)} results, expected {n}"
        )


def _run_reducer(interp, j, n, path):
    """The reduction jaxpr `j` of `n` operands as the Python function JAX's `lax.reduce` /
    `lax.reduce_window` take (one array or a tuple of them on each side)."""

    def comp(a, b):
        a = a if isinstance(a, (tuple, list)) else (a,)
        b = b if isinstance(b, (tuple, list)) else (b,)
        out = interp.run(j, [], list(a) + list(b), path)
        return tuple(out) if n > 1 else out[0]

    return comp


# ---------------------------------------------------------------- reduce_window (user reducer)


@shape_rule("reduce_window")
def _reduce_window(in_types, params, out_hint):
    if len(in_types) % 2:
        raise ShapeError(
            f"reduce_window expects operands and init values in equal numbers, got {len(in_types)}"
        )
    n = len(in_types) // 2
    ts = [arr(t, "reduce_window", i) for i, t in enumerate(in_types)]
    operands, inits = ts[:n], ts[n:]
    for o, iv in zip(operands, inits):
        if o.dtype != iv.dtype:
            raise ShapeError(
                f"reduce_window: operand dtype {o.dtype} differs from init value dtype {iv.dtype}"
            )
        if iv.ndim:
            raise ShapeError(f"reduce_window: init values must be scalars, got {iv}")
    _check_reducer(
        "reduce_window", params.get("jaxpr"), inits, extra=len(params.get("consts") or ())
    )
    return [
        fill_sym_from_hint(o.update(shape=_window_shape("reduce_window", o, params)), out_hint, i)
        for i, o in enumerate(operands)
    ]


def _reduce_window_generic_jvp(primals, tangents, **params):
    """JVP of a reduce_window with a user reduction: a reduce_window of (primal, tangent) pairs
    whose reduction is the JVP of the user's (as JAX's `reduce_window_jvp`); the init values
    must have zero tangents."""
    from ..ad.jvp import jvp_masked

    n = len(primals) // 2
    operands, inits = list(primals[:n]), list(primals[n:])
    t_ops, t_inits = list(tangents[:n]), list(tangents[n:])
    if not all(is_zero(t) for t in t_inits):
        raise JaxprError("reduce_window jvp does not support non-zero init_value_tangent.")
    outs = rebind_primal("reduce_window", primals, params)
    if all(is_zero(t) for t in t_ops):
        return outs, [Zero(tangent_type(ty(o))) for o in outs]
    red = params["jaxpr"]
    if params.get("consts"):
        raise JaxprError(
            "Differentiation rule for 'reduce_window' not implemented (reduction with constants)"
        )
    jj, _ = jvp_masked(red, [True] * (2 * n), True)
    if len(jj.invars) != 4 * n or len(jj.outvars) != 2 * n:
        raise JaxprError(
            "Differentiation rule for 'reduce_window' not implemented (non-float reduction)"
        )
    pl, pr, tl, tr = (list(jj.invars[k * n : (k + 1) * n]) for k in range(4))
    jj = jj.replace(invars=pl + tl + pr + tr)  # left = (primals, tangents), right likewise
    zero_inits = [ops.lit(0, i) for i in inits]
    p = dict(params, jaxpr=jj, consts=())
    both = ops.bind(
        "reduce_window", *operands, *[instantiate(t) for t in t_ops], *inits, *zero_inits, **p
    )
    return outs, list(both[n:])


def _evaluate_reduce_window(interp, eqn, invals, path):
    import jax

    from ..backend.prims import to_jax as t

    p = eqn.params
    j = interp.body(p["jaxpr"], eqn)
    n = len(invals) // 2
    operands, inits = invals[:n], invals[n:]
    res = jax.lax.reduce_window(
        tuple(operands) if n > 1 else operands[0],
        tuple(inits) if n > 1 else inits[0],
        _run_reducer(interp, j, n, path),
        t(p["window_dimensions"]),
        t(p["window_strides"]),
        t(p["padding"]),
        t(p.get("base_dilation")),
        t(p.get("window_dilation")),
    )
    return list(res) if n > 1 else [res]


primitive_jvps["reduce_window"] = _reduce_window_generic_jvp


def _reduce_window_batching(args, dims, **params):
    """JAX's `_generic_reduce_window_batch_rule`."""
    n = len(args) // 2
    if any(d is not None for d in dims[n:]):
        # JAX refuses batched init values (NotImplementedError); the tool loops
        return BT.loop_fallback(args, dims, why="'reduce_window' with batched init values")
    xs = [BT.bdim_at_front(x, d) for x, d in zip(args[:n], dims[:n])]
    outs = BT.bind("reduce_window", *xs, *args[n:], **_batched_window_params(params, 0))
    return outs, [0] * len(outs)


set_kind("reduce_window")
define(
    "reduce_window",
    evaluate=_evaluate_reduce_window,
    flops=input_elements,
    batching=_reduce_window_batching,
    evaluated_params=frozenset(
        "jaxpr window_dimensions window_strides padding base_dilation window_dilation".split()
    ),
    default_params={"consts": ()},
)

# ---------------------------------------------------------------- sort


@shape_rule("sort", multiple_results=True)
def _sort(in_types, params, out_hint):
    min_args(in_types, 1, "sort")
    ts = [arr(t, "sort", i) for i, t in enumerate(in_types)]
    for t in ts[1:]:
        if not dims_eq(t.shape, ts[0].shape):
            raise ShapeError(f"sort: operands must have the same shape, got {ts[0]} and {t}")
    dim = int_param(params, "dimension", -1)
    if ts[0].ndim:
        canon_axis(dim, ts[0].ndim, "sort dimension")
    nk = int_param(params, "num_keys", 1)
    if not 1 <= nk <= len(ts):
        raise ShapeError(
            f"sort: num_keys={nk} must be between 1 and the number of operands ({len(ts)})"
        )
    return list(ts)


def _sort_jvp(primals, tangents, *, dimension, is_stable=True, num_keys=1, **params):
    dim = int(dimension)
    shp = shape(primals[0])
    if 0 in shp:  # nothing to permute (and no index to gather with)
        outs = ops.bind(
            "sort", *primals, dimension=dimension, is_stable=is_stable, num_keys=num_keys, **params
        )
        return list(outs), list(tangents)
    iota = bind_iota("i32", shp, dim)
    outs = ops.bind(
        "sort",
        *primals,
        iota,
        dimension=dimension,
        is_stable=is_stable,
        num_keys=num_keys,
        **params,
    )
    *sorted_primals, idx = outs
    t_out = [
        Zero(tangent_type(ty(p))) if is_zero(t) else take_along(t, idx, dim)
        for p, t in zip(sorted_primals, tangents)
    ]
    return list(sorted_primals), t_out


primitive_jvps["sort"] = _sort_jvp


def _sort_batching(args, dims, *, dimension, **params):
    """JAX's `_sort_batch_rule`: every operand batched along the first batched one's axis."""
    proto, nd = next((x, d) for x, d in zip(args, dims) if d is not None)
    new = []
    for x, d in zip(args, dims):
        if d is None:
            keep = tuple(i for i in range(BT.ndim(proto)) if i != nd)
            new.append(ops.broadcast_in_dim(x, BT.shape_of(proto), keep))
        else:
            new.append(BT.moveaxis(x, d, nd))
    dimension = int(dimension)
    outs = BT.bind("sort", *new, dimension=dimension + (nd <= dimension), **params)
    return outs, [nd] * len(outs)


set_kind("sort")
define("sort", flops=input_elements, batching=_sort_batching)

# ---------------------------------------------------------------- top_k


@shape_rule("top_k", multiple_results=True)
def _top_k(in_types, params, out_hint):
    min_args(in_types, 1, "top_k")
    x = arr(in_types[0], "top_k", 0)
    if is_complex_dtype(x.dtype):
        raise ShapeError("top_k does not accept complex operands")
    if x.ndim == 0:
        raise ShapeError("top_k operand must have at least 1 dimension")
    axis = canon_axis(int_param(params, "axis", -1), x.ndim, "top_k axis")
    if "k" in params:
        k = int_param(params, "k")
    elif out_hint and isinstance(out_hint[0], ShapedArray):
        k = out_hint[0].shape[axis]
    else:
        raise ShapeError("top_k: missing parameter 'k'")
    d = x.shape[axis]
    if isinstance(d, int) and isinstance(k, int) and (k < 0 or k > d):
        raise ShapeError(f"top_k: k={k} must be between 0 and the size {d} of axis {axis}")
    shape = list(x.shape)
    shape[axis] = k
    return [x.update(shape=shape), x.update(shape=shape, dtype="i32", weak_type=False)]


def _top_k_jvp(primals, tangents, *, k, **params):
    (x,), (t,) = primals, tangents
    vals, idx = rebind_primal("top_k", primals, dict(params, k=k))
    axis = params.get("axis")
    axis = len(shape(x)) - 1 if axis is None else int(axis)
    if axis < 0:
        axis += len(shape(x))
    tv = Zero(tangent_type(ty(vals))) if is_zero(t) else take_along(t, idx, axis)
    return [vals, idx], [tv, Zero(tangent_type(ty(idx)))]


def _bind_top_k(eqn, p, dims):
    # texts of older JAX versions print neither (the last axis, stable)
    nd = eqn.inputs[0].type.ndim
    return {
        "k": int(p["k"]),
        "axis": int(p.get("axis", nd - 1)),
        "is_stable": bool(p.get("is_stable", True)),
    }


primitive_jvps["top_k"] = _top_k_jvp


def _top_k_batching(args, dims, **params):
    (x,), (d,) = args, dims
    p = dict(params)
    if "axis" in p:
        axis = int(p["axis"]) % (BT.ndim(x) - 1) if BT.ndim(x) > 1 else 0
        p["axis"] = axis + 1 if d <= axis else axis
    elif d == BT.ndim(x) - 1:  # older JAX: top_k works on the last axis
        x, d = BT.moveaxis(x, d, 0), 0
    outs = BT.bind("top_k", x, **p)
    return outs, [d] * len(outs)


set_kind("top_k")
define(
    "top_k",
    bind_params=_bind_top_k,
    flops=input_elements,
    batching=_top_k_batching,
    # JAX 0.11 added is_stable; before, top_k lowered to chlo.top_k, which is stable
    params_since={"is_stable": ((0, 11), True)},
)

# ---------------------------------------------------------------- approx_top_k


@shape_rule("approx_top_k", multiple_results=True)
def _approx_top_k(in_types, params, out_hint):
    min_args(in_types, 1, "approx_top_k")
    x = arr(in_types[0], "approx_top_k", 0)
    if x.ndim == 0:
        raise ShapeError("approx_top_k operand must have at least 1 dimension")
    axis = canon_axis(int_param(params, "reduction_dimension", -1), x.ndim, "reduction_dimension")
    k = int_param(params, "k")
    shape = list(x.shape)
    if out_hint and isinstance(out_hint[0], ShapedArray) and out_hint[0].ndim == x.ndim:
        shape[axis] = out_hint[0].shape[axis]  # aggregate_to_topk / recall target decide the size
    else:
        shape[axis] = k
    return [x.update(shape=shape), x.update(shape=shape, dtype="i32", weak_type=False)]


def _approx_top_k_jvp(primals, tangents, *, reduction_dimension, **params):
    (t,) = tangents
    vals, idx = rebind_primal(
        "approx_top_k", primals, dict(params, reduction_dimension=reduction_dimension)
    )
    if is_zero(t):
        return [vals, idx], [Zero(tangent_type(ty(vals))), Zero(tangent_type(ty(idx)))]
    axis = int(reduction_dimension)
    if axis < 0:
        axis += len(shape(idx))
    return [vals, idx], [take_along(t, idx, axis), Zero(tangent_type(ty(idx)))]


primitive_jvps["approx_top_k"] = _approx_top_k_jvp


def _approx_top_k_batching(args, dims, *, reduction_dimension, **params):
    (x,), (d,) = args, dims
    dim_map = [i for i in range(BT.ndim(x)) if i != d]
    rd = dim_map[int(reduction_dimension) % len(dim_map)]
    outs = BT.bind("approx_top_k", x, reduction_dimension=rd, **params)
    return outs, [d] * len(outs)


set_kind("approx_top_k")
define("approx_top_k", flops=input_elements, batching=_approx_top_k_batching)

# ---------------------------------------------------------------- reduce (user reducer)


@shape_rule("reduce", multiple_results=True)
def _reduce(in_types, params, out_hint):
    if len(in_types) % 2 or not in_types:
        raise ShapeError(
            f"reduce expects operands and init values in equal numbers, got {len(in_types)}"
        )
    n = len(in_types) // 2
    ts = [arr(t, "reduce", i) for i, t in enumerate(in_types)]
    operands, inits = ts[:n], ts[n:]
    dims = static_ints(need(params, "dimensions"))
    for o in operands[1:]:
        if not dims_eq(o.shape, operands[0].shape):
            raise ShapeError(
                f"reduce: operands must have the same shape, got {operands[0]} and {o}"
            )
    for iv in inits:
        if iv.ndim:
            raise ShapeError(f"reduce: init values must be scalars, got {iv}")
    j = params.get("jaxpr")
    _check_reducer("reduce", j, inits)
    shape = _reduce_axes("reduce", operands[0], dims)
    if isinstance(j, Jaxpr):
        dts = [
            t.dtype if isinstance(t, ShapedArray) else iv.dtype for t, iv in zip(j.out_types, inits)
        ]
    else:
        dts = [iv.dtype for iv in inits]
    return [mk(shape, d, False, [o]) for d, o in zip(dts, operands)]


def _inline(jaxpr, inputs):
    """Emit the equations of the scalar reduction `jaxpr` on `inputs` (arrays of one shape):
    elementwise reducers apply elementwise, as JAX's vmapped reducer does."""
    env = {id(v): x for v, x in zip(jaxpr.invars, inputs)}

    def read(a):
        return env[id(a)] if id(a) in env else a

    for e in jaxpr.eqns:
        outs = ops.bind(e.prim, *[read(a) for a in e.inputs], **e.params)
        outs = outs if isinstance(outs, list) else [outs]
        for o, n in zip(e.outputs, outs):
            env[id(o)] = n
    return [read(a) for a in jaxpr.outvars]


def _reduce_tree_jaxpr(primals, reducer, dims):
    """A jaxpr computing `reduce` by repeatedly halving the (flattened) reduced axis."""
    from ..ad.builder import Builder, current, make_jaxpr, use
    from ..core import Var

    n = len(primals) // 2
    xs = [Var(ty(p)) for p in primals[:n]]
    inits = [Var(ty(p)) for p in primals[n:]]
    x_shape = shape(xs[0])
    dims = ints(dims)
    rest = [d for d in range(len(x_shape)) if d not in set(dims)]
    size = 1
    for d in dims:
        size *= x_shape[d]
    b = Builder(loc=current().loc)
    with use(b):
        vals = [
            bind_reshape(bind_transpose(x, list(dims) + rest), [size] + [x_shape[d] for d in rest])
            for x in xs
        ]
        while shape(vals[0])[0] > 1:
            m = shape(vals[0])[0]
            m1 = (m + 1) // 2
            first = [slice_in_dim(v, 0, m1, 1, 0) for v in vals]
            second = [slice_in_dim(v, m1, m, 1, 0) for v in vals]
            if m - m1 != m1:
                cfg = [(0, 1, 0)] + [(0, 0, 0)] * (len(shape(vals[0])) - 1)
                second = [bind_pad(v, i, cfg) for v, i in zip(second, inits)]
            vals = _inline(reducer, first + second)
        out_shape = [x_shape[d] for d in rest]
        if shape(vals[0])[0] == 0:
            outs = [bind_broadcast(i, out_shape, ()) for i in inits]
        else:
            outs = [bind_reshape(v, out_shape) for v in vals]
    return make_jaxpr(xs + inits, b.eqns, outs)


def _reduce_jvp(primals, tangents, *, jaxpr, dimensions, **params):
    from ..ad.jvp import jvp_eval

    n = len(primals) // 2
    if not all(is_zero(t) for t in tangents[n:]):
        raise JaxprError(
            "Gradient of general lax.reduce with non-zero tangents for initial values to reduction not implemented"
        )
    tree = _reduce_tree_jaxpr(primals, jaxpr, dimensions)
    return jvp_eval(tree, list(primals), list(tangents))


def _evaluate_reduce(interp, eqn, invals, path):
    import jax

    j = interp.body(eqn.params["jaxpr"], eqn)
    n = len(invals) // 2
    operands, inits = invals[:n], invals[n:]
    dims = tuple(int(d) for d in eqn.params["dimensions"])
    res = jax.lax.reduce(
        tuple(operands) if n > 1 else operands[0],
        tuple(inits) if n > 1 else inits[0],
        _run_reducer(interp, j, n, path),
        dims,
    )
    return list(res) if n > 1 else [res]


primitive_jvps["reduce"] = _reduce_jvp


def _reduce_batching(args, dims, *, dimensions, **params):
    """JAX's `_reduce_batch_rule` (batched init values: a loop)."""
    n = len(args) // 2
    if any(d is not None for d in dims[n:]):
        # JAX refuses batched init values (NotImplementedError); the tool loops
        return BT.loop_fallback(args, dims, why="'reduce' with batched init values")
    size = BT.axis_size()
    xs = [BT.bdim_at_front(x, d, size) for x, d in zip(args[:n], dims[:n])]
    dm = tuple(int(d) + 1 for d in dimensions)
    outs = BT.bind("reduce", *xs, *args[n:], dimensions=dm, **params)
    return outs, [0] * len(outs)


set_kind("reduce")
define(
    "reduce",
    evaluate=_evaluate_reduce,
    flops=input_elements,
    # `computation` is the Python function JAX traced `jaxpr` from (printed as its repr)
    evaluated_params=frozenset({"jaxpr", "dimensions", "computation"}),
    default_params={"consts": ()},
    batching=_reduce_batching,
)

# ---------------------------------------------------------------- reduce_precision_multi
# (a name without a shape rule, kept as the tool has always described it: a list of results,
# one FLOP per operand element)

define("reduce_precision_multi", multiple_results=True, flops=input_elements)
