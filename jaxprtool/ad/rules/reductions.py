"""JVP and transpose rules for reductions, cumulative reductions, windows, sort, top_k, argmax.

Formulas follow JAX (`lax.py`, `windowed_reductions.py`, `control_flow/loops.py`):
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
"""

from __future__ import annotations

from ...core import JaxprError, ShapedArray
from .. import ops
from ..ops import (
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
    ints,
    shape,
    slice_in_dim,
    take_along,
    ty,
)
from ..registry import (
    defjvp,
    defjvp2,
    defjvp_zero,
    deflinear2,
    primitive_jvps,
    primitive_transposes,
    rebind_primal,
    set_kind,
)
from ..zeros import Zero, instantiate, is_zero, tangent_type
from .linalg import conv_vjp_lhs_padding

# ---------------------------------------------------------------- plain reductions


def _reduce_sum_transpose(ct, operand, *, axes, **_):
    if is_zero(ct):
        return [Zero(tangent_type(ty(operand)))]
    op_shape = shape(operand)
    axes = set(ints(axes))
    kept = [d for d in range(len(op_shape)) if d not in axes]
    return [bind_broadcast(ct, op_shape, kept)]


deflinear2("reduce_sum", _reduce_sum_transpose)


def _chooser_jvp(g, ans, operand, *, axes, **_):
    op_shape = shape(operand)
    axes = ints(axes)
    kept = [d for d in range(len(op_shape)) if d not in set(axes)]
    location = bind_convert(ops.eq(operand, bind_broadcast(ans, op_shape, kept)), ty(g).dtype)
    counts = bind_reduce_sum(location, axes)
    return ops.div(bind_reduce_sum(ops.mul(g, location), axes), counts)


defjvp2("reduce_max", _chooser_jvp)
defjvp2("reduce_min", _chooser_jvp)


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

for _p in ("reduce_and", "reduce_or", "reduce_xor", "argmax", "argmin"):
    defjvp_zero(_p)

# ---------------------------------------------------------------- cumulative reductions


def _cumsum_transpose(ct, operand, *, axis, reverse, **_):
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
    def rule(primals, tangents, *, axis, reverse, **params):
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

# ---------------------------------------------------------------- windowed reductions


def _window_params(p):
    return (
        ints(p["window_dimensions"]),
        ints(p["window_strides"]),
        tuple(tuple(ints(q)) for q in p["padding"]),
        ints(p.get("base_dilation") or (1,) * len(p["window_dimensions"])),
        ints(p.get("window_dilation") or (1,) * len(p["window_dimensions"])),
    )


def _reduce_window_sum_transpose(ct, operand, **params):
    if is_zero(ct):
        return [Zero(tangent_type(ty(operand)))]
    wd, ws, padding, bd, wdil = _window_params(params)
    in_shape = shape(operand)
    pads = conv_vjp_lhs_padding(in_shape, wd, ws, shape(ct), padding, bd, wdil)
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


def _ge_le(select_prim) -> str:
    return str(getattr(select_prim, "text", select_prim)).rsplit(".", 1)[-1].strip("'\"")


def _window_chooser_jvp(select_name):
    def fn(g, operand, **params):
        wd, ws, padding, bd, wdil = _window_params(params)
        return _select_and_gather_add(g, operand, select_name, wd, ws, padding, bd, wdil)

    return fn


defjvp("reduce_window_max", _window_chooser_jvp("ge"))
defjvp("reduce_window_min", _window_chooser_jvp("le"))


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


_select_and_gather_add_jvp = _linear_in_first_jvp("select_and_gather_add")


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


primitive_jvps["select_and_gather_add"] = _select_and_gather_add_jvp
set_kind("select_and_gather_add")
primitive_transposes["select_and_gather_add"] = _select_and_gather_add_transpose


_select_and_scatter_add_jvp = _linear_in_first_jvp("select_and_scatter_add")


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


primitive_jvps["select_and_scatter_add"] = _select_and_scatter_add_jvp
set_kind("select_and_scatter_add")
primitive_transposes["select_and_scatter_add"] = _select_and_scatter_add_transpose


def _reduce_window_generic_jvp(primals, tangents, **params):
    """JVP of a reduce_window with a user reduction: a reduce_window of (primal, tangent) pairs
    whose reduction is the JVP of the user's (as JAX's `reduce_window_jvp`); the init values
    must have zero tangents."""
    from ..jvp import jvp_masked

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


primitive_jvps["reduce_window"] = _reduce_window_generic_jvp
set_kind("reduce_window")

# ---------------------------------------------------------------- sort, top_k


def _sort_jvp(primals, tangents, *, dimension, is_stable, num_keys, **params):
    dim = int(dimension)
    shp = shape(primals[0])
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
set_kind("sort")


def _top_k_jvp(primals, tangents, *, k, **params):
    (x,), (t,) = primals, tangents
    vals, idx = rebind_primal("top_k", primals, dict(params, k=k))
    axis = params.get("axis")
    axis = len(shape(x)) - 1 if axis is None else int(axis)
    if axis < 0:
        axis += len(shape(x))
    tv = Zero(tangent_type(ty(vals))) if is_zero(t) else take_along(t, idx, axis)
    return [vals, idx], [tv, Zero(tangent_type(ty(idx)))]


primitive_jvps["top_k"] = _top_k_jvp
set_kind("top_k")


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
set_kind("approx_top_k")


# ---------------------------------------------------------------- generic reduce


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
    from ...core import Var
    from ..builder import Builder, current, make_jaxpr, use

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
    from ..jvp import jvp_eval

    n = len(primals) // 2
    if not all(is_zero(t) for t in tangents[n:]):
        raise JaxprError(
            "Gradient of general lax.reduce with non-zero tangents for initial values to reduction not implemented"
        )
    tree = _reduce_tree_jaxpr(primals, jaxpr, dimensions)
    return jvp_eval(tree, list(primals), list(tangents))


primitive_jvps["reduce"] = _reduce_jvp
set_kind("reduce")
