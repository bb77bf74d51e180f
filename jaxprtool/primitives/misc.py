"""Collectives, sharding/placement annotations, refs and other small primitives."""

from __future__ import annotations

from ..ad.builder import current
from ..ad.registry import defjvp_zero, rebind_primal
from ..ad.zeros import Zero, is_undefined_primal, is_zero, tangent_type
from ..core import OpaqueType, RefType, ShapedArray, short_dtype_name
from ..record import define
from ..text.param_rules import sorted_params
from . import ShapeError, shape_rule
from .util import (
    arr,
    broadcast_shapes,
    canon_axis,
    dim_floordiv,
    dim_mul,
    dim_param,
    dtype_param,
    input_elements,
    int_param,
    nargs,
    one_arr,
    static_ints,
    types_agree,
    vma_format,
    vma_parts,
)


def _axes_param(params) -> list[str]:
    v = params.get("axes", params.get("axis_name", ()))
    if isinstance(v, (tuple, list, frozenset)):
        return [str(a) for a in v]
    return [str(v)]


def _with_vma(t, fn):
    if not isinstance(t, ShapedArray):
        return t
    parts = vma_parts(t.vma)
    parts["V"] = fn(parts.get("V", []))
    return ShapedArray(t.shape, t.dtype, t.weak_type, t.memory_space, vma_format(parts))


@shape_rule("pvary")
def _pvary(in_types, params, out_hint):
    axes = _axes_param(params)
    return [_with_vma(t, lambda v: v + [a for a in axes if a not in v]) for t in in_types]


@shape_rule("psum", "pmax", "pmin", "pmean", "psum_invariant")
def _psum(in_types, params, out_hint):
    axes = _axes_param(params)
    return [_with_vma(t, lambda v: [a for a in v if a not in axes]) for t in in_types]


@shape_rule(
    "pbroadcast",
    "ppermute",
    "device_put",
    "unreduced_psum",
    "preduced",
    "reduced_vary_cast",
    "reduced_vary_cast_p",
    "vary_unreduced_cast",
    "vary_unreduced_cast_p",
    "psum2",
    "all_reduce",
)
def _same_types(in_types, params, out_hint):
    return [_strip_vma(t) for t in in_types]


def _strip_vma(t):
    return t


@shape_rule("reshard", "mesh_cast")
def _reshard(in_types, params, out_hint):
    if out_hint is not None and len(out_hint) == len(in_types):
        return [h if types_agree(h, t) else t for h, t in zip(out_hint, in_types)]
    return [_unshard(t) for t in in_types]


def _unshard(t):
    if not isinstance(t, ShapedArray):
        return t
    return t.update(
        shape=[
            int(d.split("@")[0]) if isinstance(d, str) and d.split("@")[0].isdigit() else d
            for d in t.shape
        ]
    )


@shape_rule(
    "sharding_constraint",
    "layout_constraint",
    "name",
    "shard_alike",
    "zeros_like",
    "with_memory_space_constraint",
    "pin",
    "unpin",
    "trace_value",
    "remove_memory_space",
    "multiple_of",
    "max_contiguous",
    "inspect_sharding_p",
)
def _identity(in_types, params, out_hint):
    if len(in_types) != 1 and not out_hint:
        return list(in_types)
    return list(in_types[:1]) if len(in_types) == 1 else list(in_types)


@shape_rule("axis_index", "platform_index", "program_id", "num_programs")
def _i32_scalar(in_types, params, out_hint):
    return [ShapedArray((), "i32")]


@shape_rule("all_gather")
def _all_gather(in_types, params, out_hint):
    x = one_arr(in_types, "all_gather")
    n = int_param(params, "axis_size")
    dim = int_param(params, "all_gather_dimension", 0)
    shape = list(x.shape)
    if params.get("tiled"):
        dim = canon_axis(dim, x.ndim, "all_gather_dimension")
        shape[dim] = dim_mul(shape[dim], n)
    else:
        shape.insert(dim, n)
    return [x.update(shape=shape, weak_type=False)]


@shape_rule("reduce_scatter")
def _reduce_scatter(in_types, params, out_hint):
    x = one_arr(in_types, "reduce_scatter")
    n = int_param(params, "axis_size")
    dim = canon_axis(int_param(params, "scatter_dimension", 0), x.ndim, "scatter_dimension")
    shape = list(x.shape)
    if params.get("tiled"):
        if isinstance(shape[dim], int) and shape[dim] % n:
            raise ShapeError(
                f"reduce_scatter: dimension {dim} of {x} is not divisible by axis_size {n}"
            )
        shape[dim] = dim_floordiv(shape[dim], n)
    else:
        if isinstance(shape[dim], int) and shape[dim] != n:
            raise ShapeError(f"reduce_scatter: dimension {dim} of {x} must equal axis_size {n}")
        del shape[dim]
    return [x.update(shape=shape, weak_type=False)]


define("reduce_scatter", flops=input_elements)  # a reduction: one FLOP per operand element


@shape_rule("all_to_all")
def _all_to_all(in_types, params, out_hint):
    x = one_arr(in_types, "all_to_all")
    split = int_param(params, "split_axis")
    concat = int_param(params, "concat_axis")
    if split == concat:
        return [x.update(weak_type=False)]
    groups = params.get("axis_index_groups")
    if groups:
        n = len(groups[0])
    elif (
        out_hint
        and isinstance(out_hint[0], ShapedArray)
        and isinstance(x.shape[split], int)
        and isinstance(out_hint[0].shape[split], int)
        and out_hint[0].shape[split]
    ):
        n = x.shape[split] // out_hint[0].shape[split]  # the axis size is not a parameter
    else:
        raise ShapeError("all_to_all: the mesh axis size is not known")
    shape = list(x.shape)
    shape[split] = dim_floordiv(shape[split], n)
    shape[concat] = dim_mul(shape[concat], n)
    return [x.update(shape=shape, weak_type=False)]


@shape_rule("new_ref")
def _new_ref(in_types, params, out_hint):
    x = one_arr(in_types, "new_ref")
    if out_hint and isinstance(out_hint[0], RefType):
        return [out_hint[0]] if out_hint[0].inner == x else [RefType(x, out_hint[0].memory_space)]
    return [RefType(x)]


@shape_rule("freeze")
def _freeze(in_types, params, out_hint):
    nargs(in_types, 1, "freeze")
    r = in_types[0]
    if not isinstance(r, RefType):
        raise ShapeError(f"freeze expects a Ref operand, got {r}")
    return [r.inner]


@shape_rule("tie")
def _tie(in_types, params, out_hint):
    nargs(in_types, 2, "tie")
    return [in_types[1]]


# ---------------------------------------------------------------- ref state: get / swap / addupdate


def _indexed_type(prim, ref, ivars, params, out_hint):
    """The type `ref[IDX]` reads, from the parser's indexer template (`[...]`, `[$0,1:]`)."""
    if isinstance(ref, OpaqueType):  # `MemRef<None>{float32[4,8]}` (0.6.2): no model
        return _hint_or(prim, out_hint, ref)
    if not isinstance(ref, RefType):
        raise ShapeError(f"{prim} expects a Ref as its first operand, got {ref}")
    inner = ref.inner
    if isinstance(inner, ShapedArray) and inner.dtype != short_dtype_name(inner.dtype):
        inner = inner.update(dtype=short_dtype_name(inner.dtype))  # `Ref{float32[3]}` (0.4.35)
    tpl = str(params.get("indexer", "[...]")).strip()
    if tpl == "[...]" or tpl == "":
        return inner
    if "{" in tpl or not (tpl.startswith("[") and tpl.endswith("]")):
        return _hint_or(prim, out_hint, inner)
    entries = [x.strip() for x in tpl[1:-1].split(",")]
    if len(entries) > inner.ndim:
        raise ShapeError(f"{prim}: too many indices for {ref}")
    out = []  # per entry: ("keep", dim) | ("drop", None) | ("array", shape)
    for k, ent in enumerate(entries):
        d = inner.shape[k]
        if ent == ":":
            out.append(("keep", d))
        elif ":" in ent:
            lo, hi = ent.split(":", 1)
            if "$" in lo or "$" in hi:  # dynamic slice `v:v+n`
                m = hi.rsplit("+", 1)
                if len(m) == 2 and m[1].strip().isdigit():
                    out.append(("keep", int(m[1])))
                    continue
                return _hint_or(prim, out_hint, inner)
            try:
                lo_i = int(lo) if lo else 0
                hi_i = int(hi) if hi else d
            except ValueError:
                return _hint_or(prim, out_hint, inner)
            out.append(
                ("keep", hi_i - lo_i if isinstance(hi_i, int) and isinstance(lo_i, int) else d)
            )
        elif ent.startswith("$"):
            try:
                t = ivars[int(ent[1:])]
            except (ValueError, IndexError):
                raise ShapeError(f"{prim}: index {ent} has no operand") from None
            if isinstance(t, ShapedArray) and t.ndim:
                out.append(("array", t))
            else:
                out.append(("drop", None))
        else:
            try:
                int(ent)
            except ValueError:
                return _hint_or(prim, out_hint, inner)
            out.append(("drop", None))
    rest = list(inner.shape[len(entries) :])
    if not any(kind == "array" for kind, _ in out):
        return inner.update(shape=[d for kind, d in out if kind == "keep"] + rest)
    # numpy advanced indexing: integer scalars count as 0-d index arrays
    adv = [i for i, (kind, _) in enumerate(out) if kind != "keep"]
    bshape = broadcast_shapes(prim, [t for kind, t in out if kind == "array"])
    keep = [d for kind, d in out if kind == "keep"]
    if adv == list(range(adv[0], adv[-1] + 1)):
        before = [d for kind, d in out[: adv[0]] if kind == "keep"]
        after = [d for kind, d in out[adv[-1] + 1 :] if kind == "keep"]
        shape = before + list(bshape) + after
    else:
        shape = list(bshape) + keep
    return inner.update(shape=shape + rest)


def _hint_or(prim, out_hint, inner):
    """Indexing the rule does not model: the declared type, when there is one."""
    if out_hint and isinstance(out_hint[0], ShapedArray):
        return out_hint[0]
    raise ShapeError(
        f"{prim}: cannot infer the type of this indexing of {inner} without a declared result type"
    )


@shape_rule("get")
def _get(in_types, params, out_hint):
    if not in_types:
        raise ShapeError("get expects a Ref operand")
    return [_indexed_type("get", in_types[0], in_types[1:], params, out_hint)]


@shape_rule("swap")
def _swap(in_types, params, out_hint):
    if len(in_types) < 2:
        raise ShapeError(f"swap expects a Ref and a value, got {len(in_types)} operands")
    t = _indexed_type("swap", in_types[0], in_types[2:], params, out_hint)
    v = in_types[1]
    if isinstance(v, ShapedArray) and isinstance(t, ShapedArray) and v.dtype != t.dtype:
        raise ShapeError(f"swap: the stored value has type {v}, but the Ref holds {t}")
    return [t]


@shape_rule("addupdate")
def _addupdate(in_types, params, out_hint):
    if len(in_types) < 2:
        raise ShapeError(f"addupdate expects a Ref and a value, got {len(in_types)} operands")
    try:
        t = _indexed_type("addupdate", in_types[0], in_types[2:], params, None)
    except ShapeError as e:
        if "cannot infer" not in str(e):
            raise
        return []  # an indexing the rule does not model: nothing to compare the value with
    v = in_types[1]
    if isinstance(v, ShapedArray) and isinstance(t, ShapedArray) and v.dtype != t.dtype:
        raise ShapeError(f"addupdate: the added value has type {v}, but the Ref holds {t}")
    return []


# ---------------------------------------------------------------- 0.12 jnp HiPrims (printed by class name)


@shape_rule("SearchSorted")
def _search_sorted(in_types, params, out_hint):
    nargs(in_types, 2, "SearchSorted")
    a = arr(in_types[0], "SearchSorted", 0)
    q = arr(in_types[1], "SearchSorted", 1)
    if a.dtype != q.dtype:
        raise ShapeError(
            f"SearchSorted: dtypes of sorted_arr and query must match, got {a.dtype} and {q.dtype}"
        )
    # out_dtype is not printed: int32 unless the binder says otherwise (x64)
    d = "i32"
    if out_hint and isinstance(out_hint[0], ShapedArray) and out_hint[0].dtype in ("i32", "i64"):
        d = out_hint[0].dtype
    return [q.update(dtype=d, weak_type=False)]


@shape_rule("Nonzero")
def _nonzero(in_types, params, out_hint):
    if not in_types:
        raise ShapeError("Nonzero expects an operand")
    a = arr(in_types[0], "Nonzero", 0)
    axes = static_ints(params.get("axes", ()))
    if not all(0 <= ax < a.ndim for ax in axes) or len(set(axes)) != len(axes):
        raise ShapeError(f"Nonzero: axes {axes} are out of range or repeated for {a}")
    size = dim_param(params.get("size"))
    d = dtype_param(params.get("out_dtype", "int32"))
    batch = tuple(s for i, s in enumerate(a.shape) if i not in axes)
    return [a.update(shape=(*batch, size), dtype=d, weak_type=False)] * len(axes)


# ---------------------------------------------------------------- properties

for _n in ("addupdate", "freeze", "get", "new_ref", "swap"):
    define(_n, effectful=True)
define("device_put", multiple_results=True)


# ---------------------------------------------------------------- printing


def _print_reshard(e, style):
    # 0.10+: every parameter is implied by the binder type
    return sorted_params(e.params) if style.broadcast_shape_param else []


define("reshard", print_params=_print_reshard)


# ---------------------------------------------------------------- AD rules


def _identity_like(name):
    """Placement and sharding annotations: the tangent goes through the same annotation."""

    def jvp(primals, tangents, /, **params):
        outs = rebind_primal(name, primals, params)
        nz = [t for t in tangents if not is_zero(t)]
        if not nz:
            return outs, [Zero(tangent_type(o.type)) for o in outs]
        if len(primals) == 1:
            touts = current().bind(
                name, [tangents[0]], params, [tangent_type(o.type) for o in outs]
            )
            return outs, touts
        # several operands (device_put): the tangents pass through unchanged
        return outs, list(tangents)

    def transpose(cts, /, *args, **params):
        return [c if is_undefined_primal(a) else None for c, a in zip(cts, args)]

    define(name, jvp=jvp, transpose=transpose, jvp_kind="deflinear")


for _n in (
    "device_put",
    "reshard",
    "sharding_constraint",
    "mesh_cast",
    "pvary",
    "pbroadcast",
    "multiple_of",
    "max_contiguous",
    "layout_constraint",
    "with_memory_space_constraint",
    "pin",
    "unpin",
    "remove_memory_space",
):
    _identity_like(_n)

for _n in ("zeros_like", "platform_index", "axis_index", "program_id", "num_programs"):
    defjvp_zero(_n)


def _tie_jvp(primals, tangents, /, **params):
    outs = rebind_primal("tie", primals, params)
    return outs, [tangents[-1]]


define(
    "tie",
    jvp=_tie_jvp,
    transpose=lambda cts, x, y, /, **params: [None, cts[0]],
    jvp_kind="jvp+linearization",
)
