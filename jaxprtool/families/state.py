"""The state family: mutable references (JAX's `Ref`s, `jax._src.state`).

new_ref makes a Ref holding a value, freeze reads it back for good, and get / swap /
addupdate read, exchange and accumulate into an indexed part of it.  The parser keeps the
indexing the text shows as an `indexer` template (`[...]`, `[$0,1:]`, `$k` standing for index
operand k); the shape rules read the result type from it, the printer prints the equations in
JAX's own syntax (`y <- r[i]`, `r[i] <- v`, `r[i] += v`), and the back end runs a Ref as a
mutable box.  All are effectful: no pass merges or moves them, and DCE removes one only
as JAX's does (`ref_access`: a read or a new Ref unused, a write into a dead Ref).
"""

from __future__ import annotations

from ..ad import ops
from ..ad.builder import current
from ..ad.ops import instantiate, new_ref, zeros_ref
from ..ad.registry import rebind_primal
from ..ad.zeros import Zero, is_zero, tangent_type
from ..core import JaxprError, OpaqueType, RefType, ShapedArray, is_inexact, short_dtype_name
from ..lazy import LazyPattern
from ..params import Opaque, format_value
from ..record import define
from ..shapes import ShapeError, shape_rule
from ..shapes.util import broadcast_shapes, nargs, one_arr
from ..text import pretty as pp
from ..text import style as ST

# ---------------------------------------------------------------- Refs in the back end


def _box(x, eqn):
    from ..backend.evaluator import Box

    if not isinstance(x, Box):
        raise JaxprError(
            f"'{eqn.prim}' expects a reference (Ref{{...}}) as its first operand", eqn.loc
        )
    return x


class _Window:
    """A dynamic slice `$a:$b+n` of an indexer (JAX prints `Slice(i, n)` as `i:i+n`): its
    start, an index operand, and its static size."""

    __slots__ = ("start", "size")

    def __init__(self, start, size: int):
        self.start, self.size = start, size


_WINDOW = LazyPattern(r"\$(\d+):\$\d+\+(\d+)$")


def _window(eqn, part: str, idx_inputs, before: list) -> _Window:
    m = _WINDOW.match(part)
    if m is None or Ellipsis in before:
        raise JaxprError(f"'{eqn.prim}': cannot read the dynamic slice '{part}'", eqn.loc)
    return _Window(idx_inputs[int(m[1])], int(m[2]))


def _windowed(value, idx):
    """(the part of `value` the indexer's dynamic slices select, their starts per axis, the
    index with those entries `:`); `(value, None, idx)` when it has none.  The starts clamp
    into range, as JAX's discharge (`dynamic_slice`) clamps them."""
    if idx is None or not any(isinstance(e, _Window) for e in idx):
        return value, None, idx
    from jax import lax

    starts, sizes = [0] * value.ndim, list(value.shape)
    for k, e in enumerate(idx):
        if isinstance(e, _Window):
            starts[k], sizes[k] = e.start, e.size
    rest = tuple(slice(None) if isinstance(e, _Window) else e for e in idx)
    return lax.dynamic_slice(value, starts, sizes), starts, rest


def _write_back(value, part, starts):
    """`value` with the window at `starts` replaced by `part` (all of it when no window)."""
    if starts is None:
        return part
    from jax import lax

    return lax.dynamic_update_slice(value, part, starts)


def _indexer(eqn, idx_inputs, shape):
    """A numpy-style index from a printed ref indexer `[$0,:]`, `[...]`, `[:,1]`, `[$0,1:]`;
    a dynamic slice `[$0:$1+2]` is a `_Window` (see `_windowed`)."""
    from ..params import split_top_level as split_top

    ix = eqn.params.get("indexer")
    if ix is None:
        return None if not idx_inputs else tuple(idx_inputs)
    text = str(ix).strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    out = []
    for part in split_top(text):
        part = part.strip()
        if part == "...":
            out.append(Ellipsis)
        elif part.startswith("$") and ":" in part:
            out.append(_window(eqn, part, idx_inputs, out))
        elif part.startswith("$"):
            import jax.numpy as jnp

            # dynamic indices clamp into range, as JAX's discharge (dynamic_slice) does
            dim = shape[len(out)] if Ellipsis not in out and len(out) < len(shape) else None
            x = idx_inputs[int(part[1:])]
            out.append(jnp.clip(x, 0, dim - 1) if dim else x)
        elif ":" in part:
            bits = part.split(":")
            nums = [int(b) if b.strip() else None for b in bits]
            out.append(slice(*nums))
        elif part.lstrip("-").isdigit():
            out.append(int(part))
        elif part:
            raise JaxprError(f"'{eqn.prim}': cannot read the indexer '{ix}'", eqn.loc)
    if out == [Ellipsis]:
        return None
    return tuple(out)


# ---------------------------------------------------------------- new_ref, freeze


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


def _evaluate_new_ref(interp, eqn, invals, path):
    from ..backend.evaluator import Box

    return [Box(invals[0])]


def _evaluate_freeze(interp, eqn, invals, path):
    return [_box(invals[0], eqn).value]


define(
    "new_ref",
    effectful=True,
    ref_access="alloc",
    evaluate=_evaluate_new_ref,
    version_clues=lambda e: {ST.CLUE_0_12} if "pin" in e.params else set(),
    evaluated_params=frozenset({"memory_space", "kind", "pin"}),  # placement of the box
)
define("freeze", effectful=True, ref_access="read", evaluate=_evaluate_freeze)


# ---------------------------------------------------------------- `r[IDX]`: its type, its text


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


_SLOT = LazyPattern(r"\$(\d+)")


def _ref_doc(e, p, ref, idx) -> pp.Doc:
    """`r[IDX]`: the indexer template, each `$k` replaced by index operand k (index literals
    print without their type, as NDIndexer.pretty_print).  The print rules below leave an
    equation without an `indexer` (not built by the parser) to the ordinary form."""
    r = p.atom(ref)
    names = [p.atom(a, typed=False) for a in idx]
    tpl = format_value(e.params["indexer"])
    if "$" in tpl:
        tpl = _SLOT.sub(lambda m: names[int(m.group(1))], tpl)
    return pp.text(r + tpl)


# ---------------------------------------------------------------- get: `y:T <- r[IDX]`


@shape_rule("get")
def _get(in_types, params, out_hint):
    if not in_types:
        raise ShapeError("get expects a Ref operand")
    return [_indexed_type("get", in_types[0], in_types[1:], params, out_hint)]


def _print_get(e, p):
    if e.params.get("indexer") is None or len(e.outputs) != 1 or not e.inputs:
        return None
    binders = p.binders(e.outputs)
    return pp.concat([binders, pp.text(" <- "), _ref_doc(e, p, e.inputs[0], e.inputs[1:])])


def _evaluate_get(interp, eqn, invals, path):
    box = _box(invals[0], eqn)
    part, _, idx = _windowed(box.value, _indexer(eqn, invals[1:], box.value.shape))
    return [part if idx is None else part[idx]]


define(
    "get",
    effectful=True,
    ref_access="read",
    print_eqn=_print_get,
    evaluate=_evaluate_get,
    evaluated_params=frozenset({"indexer"}),
)


# ---------------------------------------------------------------- swap: `y, r[IDX] <- r[IDX], v`
# (`r[IDX] <- v` when y is dropped)


@shape_rule("swap")
def _swap(in_types, params, out_hint):
    if len(in_types) < 2:
        raise ShapeError(f"swap expects a Ref and a value, got {len(in_types)} operands")
    t = _indexed_type("swap", in_types[0], in_types[2:], params, out_hint)
    v = in_types[1]
    if isinstance(v, ShapedArray) and isinstance(t, ShapedArray) and v.dtype != t.dtype:
        raise ShapeError(f"swap: the stored value has type {v}, but the Ref holds {t}")
    return [t]


def _print_swap(e, p):
    if e.params.get("indexer") is None or len(e.inputs) < 2 or len(e.outputs) != 1:
        return None
    ref, val, idx = e.inputs[0], e.inputs[1], e.inputs[2:]
    y = e.outputs[0]
    if p.dropped(y):
        r = _ref_doc(e, p, ref, idx)
        return pp.concat([r, pp.text(" <- "), pp.text(p.atom(val))])
    r = _ref_doc(e, p, ref, idx)
    return pp.concat(
        [p.binders([y]), pp.text(", "), r, pp.text(" <- "), r, pp.text(", "), pp.text(p.atom(val))]
    )


def _evaluate_swap(interp, eqn, invals, path):
    import jax.numpy as jnp

    box, val = _box(invals[0], eqn), invals[1]
    part, starts, idx = _windowed(box.value, _indexer(eqn, invals[2:], box.value.shape))
    old = part if idx is None else part[idx]
    if idx is None:
        part = jnp.asarray(val, dtype=part.dtype) + jnp.zeros_like(part)
    else:
        part = part.at[idx].set(val)
    box.value = _write_back(box.value, part, starts)
    return [old] if eqn.outputs else []


define(
    "swap",
    effectful=True,
    ref_access="write",
    print_eqn=_print_swap,
    evaluate=_evaluate_swap,
    evaluated_params=frozenset({"indexer"}),
)


# ---------------------------------------------------------------- addupdate: `r[IDX] += v`


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


def _print_addupdate(e, p):
    if e.params.get("indexer") is None or len(e.inputs) < 2:
        return None
    r = _ref_doc(e, p, e.inputs[0], e.inputs[2:])
    return pp.concat([r, pp.text(" += "), pp.text(p.atom(e.inputs[1]))])


def _evaluate_addupdate(interp, eqn, invals, path):
    box, val = _box(invals[0], eqn), invals[1]
    part, starts, idx = _windowed(box.value, _indexer(eqn, invals[2:], box.value.shape))
    part = part + val if idx is None else part.at[idx].add(val)
    box.value = _write_back(box.value, part, starts)
    return []


define(
    "addupdate",
    effectful=True,
    ref_access="write",
    print_eqn=_print_addupdate,
    evaluate=_evaluate_addupdate,
    evaluated_params=frozenset({"indexer"}),
)


# ---------------------------------------------------------------- forward mode (JAX's state JVPs)
# A Ref's tangent is a Ref (of the tangents), made beside it by new_ref and read, written and
# accumulated into by the same indexed operations (`jax/_src/state/primitives.py`: `_get_jvp`,
# `_swap_jvp`, `addupdate_jvp_rule`; new_ref's and freeze's JVPs in `jax/_src/core.py`).


def _bind_like(name, inputs, params):
    """`name` on `inputs`, its result types those of the equation being differentiated."""
    b = current()
    eqn = getattr(b, "cur_eqn", None)
    types = [o.type for o in eqn.outputs] if eqn is not None and eqn.prim == name else None
    return b.bind(name, list(inputs), params, types)


def _new_ref_jvp(primals, tangents, **params):
    """The tangent Ref starts from the initial value's tangent, zeros instantiated (JAX)."""
    (ref,) = rebind_primal("new_ref", primals, params)
    (t,) = tangents
    if not is_inexact(tangent_type(primals[0].type)):
        return [ref], [Zero(tangent_type(ref.type))]
    b = current()
    with b.tangent_mode():  # linearize: the tangent Ref belongs to the linear program
        (tref,) = b.bind("new_ref", [instantiate(t)], params, [ref.type])
    return [ref], [tref]


def _freeze_jvp(primals, tangents, **params):
    outs = rebind_primal("freeze", primals, params)
    if is_zero(tangents[0]):
        return outs, [Zero(tangent_type(outs[0].type))]
    return outs, current().bind("freeze", [tangents[0]], params, [outs[0].type])


def _get_jvp(primals, tangents, **params):
    ref, *idx = primals
    outs = rebind_primal("get", primals, params)
    if is_zero(tangents[0]):
        return outs, [Zero(tangent_type(outs[0].type))]
    return outs, _bind_like("get", [tangents[0], *idx], params)


def _written_ref_tangent(name, tangents):
    """The Ref's tangent of a write; a differentiated value written into a Ref that has none
    is refused."""
    tref, tx = tangents[0], tangents[1]
    if is_zero(tref) and not is_zero(tx):
        raise JaxprError(
            f"'{name}': a differentiated value is written into a Ref that has no tangent (it "
            "was made from a value that is not differentiated, or is an input of the "
            "program); JAX refuses this too: make the Ref from a float value inside it",
            current().loc,
        )
    return tref, tx


def _swap_jvp(primals, tangents, **params):
    ref, x, *idx = primals
    outs = _bind_like("swap", primals, params)
    tref, tx = _written_ref_tangent("swap", tangents)
    if is_zero(tref):
        return outs, [Zero(tangent_type(o.type)) for o in outs]
    touts = _bind_like("swap", [tref, instantiate(tx), *idx], params)
    if not outs:
        return outs, []
    return outs, touts


def _addupdate_jvp(primals, tangents, **params):
    ref, x, *idx = primals
    current().bind("addupdate", list(primals), params, [])
    tref, tx = _written_ref_tangent("addupdate", tangents)
    if not is_zero(tref) and not is_zero(tx):
        current().bind("addupdate", [tref, tx, *idx], params, [])
    return [], []


for _n, _rule in (
    ("new_ref", _new_ref_jvp),
    ("freeze", _freeze_jvp),
    ("get", _get_jvp),
    ("swap", _swap_jvp),
    ("addupdate", _addupdate_jvp),
):
    define(_n, jvp=_rule, jvp_kind="jvp")
define("new_ref", jvp_on_zero_tangents=True)


# ---------------------------------------------------------------- vmap: a batched Ref holds
# the batch at its axis 0 (JAX's `_get_vmap`, `_swap_vmap`, `_addupdate_vmap`): new_ref moves
# its value's batch axis to the front.  With indices that are not batched, every read, write
# and accumulation indexes `[:, IDX]`, as JAX prints it (`d[:,1:] <- i`).  With batched
# indices, JAX's `_batch_indexer`: every index array gets the batch at its front (an unbatched
# one broadcast along it), and a batched Ref is indexed at its axis 0 by an iota over the
# batch of the same shape (`d[e,b]`, `e` the iota), so that each example reads and writes its
# own Ref at its own indices: the Ref operation stays a get/swap/addupdate, with index arrays.

_NO_VMAP_WRITE = (
    "vmap writes a batched value into a Ref that is not batched (one made outside the "
    "batched values); JAX refuses this too: make the Ref from a batched value"
)
_NO_VMAP_WRITE_AT = (
    "vmap writes into a Ref that is not batched (one made outside the batched values) at "
    "batched indices; JAX refuses this too: make the Ref from a batched value"
)
_NO_VMAP_SLICE = (
    "vmap of a dynamic slice `i:i+n` into a Ref with a batched start `i` is not supported "
    "(JAX refuses it too); index with an array (`i + iota`) instead"
)
_PLAIN_ONLY = "only a plain indexing `[i,:,1:3]` (no transform, no `...` among others) is batched"
_OPERAND = LazyPattern(r"\$(\d+)$")


def _template_entries(tpl: str) -> list[str] | None:
    """The entries of an indexer `[e0,e1,...]` (`[...]`: none); None for any other form (a
    transform `{bitcast(...)}`, several indexings)."""
    from ..params import split_top_level

    body = tpl[1:-1] if tpl.startswith("[") and tpl.endswith("]") else None
    if body is None or "[" in body or "{" in body:
        return None
    return [] if body == "..." else [part.strip() for part in split_top_level(body)]


def _is_integer_entry(entry: str) -> bool:
    """An index operand `$k` or an integer literal: it drops its axis (numpy's advanced
    indexing when there are index arrays)."""
    return bool(_OPERAND.match(entry)) or entry.lstrip("-").isdigit()


def _contiguous(positions: list[int]) -> bool:
    return positions == list(range(positions[0], positions[0] + len(positions)))


def _index_shape(name, entries, index_types) -> tuple:
    """The shape the index arrays of one example broadcast to (the advanced block)."""
    arrays = [index_types[int(m[1])] for e in entries if (m := _OPERAND.match(e))]
    return broadcast_shapes(name, [t for t in arrays if isinstance(t, ShapedArray)])


def _at_front_indexer(name, params, index_types) -> tuple[dict, int]:
    """Unbatched indices into a batched Ref: `[:, IDX]`, and where the batch lands, at the
    front unless IDX's index arrays are not contiguous (numpy puts their block first)."""
    tpl = str(params.get("indexer", "[...]")).strip()
    entries = _template_entries(tpl)
    if entries is None:
        raise JaxprError(f"vmap: cannot batch the Ref indexing {tpl}: {_PLAIN_ONLY}", current().loc)
    new = tpl if tpl == "[...]" else "[:," + tpl[1:]
    positions = [k for k, e in enumerate(entries) if _is_integer_entry(e)]
    block = _index_shape(name, entries, index_types)
    if block and "..." in entries:  # where `...` ends decides whether the arrays are apart
        raise JaxprError(f"vmap: cannot batch the Ref indexing {tpl}: {_PLAIN_ONLY}", current().loc)
    at = len(block) if block and not _contiguous(positions) else 0
    return {**params, "indexer": Opaque(new)}, at


def _entries(name, params, rank: int) -> list[str]:
    """The indexer's entries, one per axis of the Ref's value (`:` for those it leaves out)."""
    tpl = str(params.get("indexer", "[...]")).strip()
    entries = _template_entries(tpl)
    if entries is None or "..." in entries or len(entries) > rank:
        raise JaxprError(
            f"'{name}': vmap with batched indices cannot batch the Ref indexing {tpl}: "
            f"{_PLAIN_ONLY}",
            current().loc,
        )
    return entries + [":"] * (rank - len(entries))


def _index_at_front(x, d, full):
    """An index operand with the batch at its front, of the batched advanced block's shape
    `full`; an unbatched scalar stays as it is (every example uses it)."""
    from ..ad.batching import moveaxis

    if d is None:
        if not x.type.ndim:
            return x
        return ops.broadcast_in_dim(x, full, range(1, len(full)))
    x = moveaxis(x, d, 0)
    if x.type.ndim < len(full):  # a batched scalar beside index arrays
        x = ops.broadcast_in_dim(x, full, (0,))
    return x


def _batched_indices(name, ref, ref_dim, idx, idx_dims, params):
    """JAX's `_batch_indexer`: (the index operands, the new indexer, the positions of the
    integer entries in the original one, the shape of one example's advanced block)."""
    from ..ad.batching import axis_size, unbatched_type

    rank = ref.type.inner.ndim - (0 if ref_dim is None else 1)
    entries = _entries(name, params, rank)
    block = _index_shape(name, entries, [unbatched_type(x.type, d) for x, d in zip(idx, idx_dims)])
    full = (axis_size(), *block)
    offset = 0 if ref_dim is None else 1  # the iota comes first
    operands = []

    def slot(x) -> str:
        operands.append(x)
        return f"${len(operands) - 1 + offset}"

    texts = []
    for e in entries:
        if m := _OPERAND.match(e):
            k = int(m[1])
            texts.append(slot(_index_at_front(idx[k], idx_dims[k], full)))
        elif "$" in e:  # a dynamic slice `$a:$b+n`
            if any(idx_dims[int(k)] is not None for k in _SLOT.findall(e)):
                raise JaxprError(f"'{name}': {_NO_VMAP_SLICE}", current().loc)
            texts.append(_SLOT.sub(lambda m: slot(idx[int(m[1])]), e))
        else:
            texts.append(e)
    if ref_dim is not None:
        operands.insert(0, ops.iota(full, 0))
        texts.insert(0, "$0")
    positions = [k for k, e in enumerate(entries) if _is_integer_entry(e)]
    return operands, {**params, "indexer": Opaque("[" + ",".join(texts) + "]")}, positions, block


def _block_first(ndim: int, pos: int, n: int) -> tuple[int, ...]:
    """The permutation taking (B, before[pos], block[n], after) to (B, block, before, after):
    the layout numpy gives `r[iota, ..., idx, ...]` once the iota parts the index arrays."""
    return (0, *range(1 + pos, 1 + pos + n), *range(1, 1 + pos), *range(1 + pos + n, ndim))


def _undo(x, perm):
    """`x` transposed back by the inverse of `perm`."""
    return ops.transpose(x, tuple(sorted(range(len(perm)), key=perm.__getitem__)))


def _batched_index_op(name, n_values, args, dims, params):
    """get/swap/addupdate with batched indices, as JAX's rules: outputs and values batched at
    axis 0, transposed around the operation where the iota moves the index block first."""
    from ..ad.batching import bdim_at_front

    ref, ref_dim = args[0], dims[0]
    if ref_dim is None and n_values:
        raise JaxprError(f"'{name}': {_NO_VMAP_WRITE_AT}", current().loc)
    idx, idx_dims = args[1 + n_values :], dims[1 + n_values :]
    operands, new, positions, block = _batched_indices(name, ref, ref_dim, idx, idx_dims, params)
    contiguous = _contiguous(positions)
    if ref_dim is None:  # get only: the block (B, *block) lands where numpy puts it
        outs = current().bind(name, [ref, *operands], new)
        return outs, [positions[0] if contiguous else 0]
    moved = contiguous and positions[0] > 0  # the iota parts the index block from the front
    values = [bdim_at_front(v, d) for v, d in zip(args[1 : 1 + n_values], dims[1 : 1 + n_values])]
    perms = [_block_first(v.type.ndim, positions[0], len(block)) for v in values]
    if moved:
        values = [ops.transpose(v, p) for v, p in zip(values, perms)]
    outs = current().bind(name, [ref, *values, *operands], new)
    if moved:
        perms = perms or [_block_first(outs[0].type.ndim, positions[0], len(block))]
        outs = [_undo(o, p) for o, p in zip(outs, perms)]
    return outs, [0] * len(outs)


def _ref_batch_dim(name, d) -> None:
    if d not in (None, 0):  # every batched Ref the rules make holds the batch at axis 0
        raise JaxprError(f"'{name}': a Ref batched at axis {d} cannot be indexed", current().loc)


def _new_ref_batching(args, dims, **params):
    """Every Ref made inside a vmap is batched, as JAX's are (its writes may be batched)."""
    from ..ad.batching import axis_size, broadcast, moveaxis

    (x,), (d,) = args, dims
    x = broadcast(x, axis_size(), 0) if d is None else moveaxis(x, d, 0)
    return current().bind("new_ref", [x], params), [0]


def _freeze_batching(args, dims, **params):
    _ref_batch_dim("freeze", dims[0])
    return current().bind("freeze", list(args), params), [dims[0]]


def _indexed_batching(name, n_values):
    """get (no value), swap and addupdate (one value): the Ref batched at axis 0, an
    unbatched value broadcast along the batch; batched indices as JAX's `_batch_indexer`."""

    def rule(args, dims, **params):
        from ..ad.batching import axis_size, broadcast, moveaxis

        ref_dim, value_dims, index_dims = dims[0], dims[1 : 1 + n_values], dims[1 + n_values :]
        _ref_batch_dim(name, ref_dim)
        if any(d is not None for d in index_dims):
            return _batched_index_op(name, n_values, args, dims, params)
        if ref_dim is None:
            if any(d is not None for d in value_dims):
                raise JaxprError(f"'{name}': {_NO_VMAP_WRITE}", current().loc)
            outs = current().bind(name, list(args), params)
            return outs, [None] * len(outs)
        index_types = [x.type for x in args[1 + n_values :]]
        new, at = _at_front_indexer(name, params, index_types)
        values = [
            broadcast(v, axis_size(), at) if d is None else moveaxis(v, d, at)
            for v, d in zip(args[1 : 1 + n_values], value_dims)
        ]
        outs = current().bind(name, [args[0], *values, *args[1 + n_values :]], new)
        return outs, [at] * len(outs)

    return rule


define("new_ref", batching=_new_ref_batching, always_batched=True)
define("freeze", batching=_freeze_batching)
define("get", batching=_indexed_batching("get", 0))
define("swap", batching=_indexed_batching("swap", 1))
define("addupdate", batching=_indexed_batching("addupdate", 1))


# ---------------------------------------------------------------- reverse mode (JAX's backward
# pass over Refs, `jax/_src/interpreters/ad.py` RefAccum, and the fancy transposes of
# `state/primitives.py`): a differentiated Ref's cotangent is a Ref of cotangents, made by the
# first cotangent that reaches it (new_ref of it), accumulated into with addupdate; a get
# transposes to an accumulation, an addupdate to a read, a swap to a swap, new_ref to a freeze
# of the cotangent Ref and freeze to an accumulation.  The walk hands each rule the Ref's
# accumulator, holding its cotangent Ref (or a Zero before the first cotangent).


def _cotangent_ref(acc):
    """The accumulator's cotangent Ref, made of zeros when no cotangent has reached it."""
    if is_zero(acc.get()):
        acc.set(zeros_ref(acc.type))
    return acc.get()


def _accumulate(acc, ct, idx, params) -> None:
    """Add `ct` into the part `params["indexer"]` of the Ref whose accumulator is `acc`."""
    if acc is None or is_zero(ct):
        return
    whole = str(params.get("indexer", "[...]")).strip() in ("[...]", "")
    if is_zero(acc.get()) and whole:
        acc.set(new_ref(ct))
        return
    current().bind("addupdate", [_cotangent_ref(acc), ct, *idx], params, [])


def _get_transpose(cts, ref, *idx, accums, **params):
    _accumulate(accums[0], cts[0], idx, params)


def _swap_transpose(cts, ref, x, *idx, accums, **params):
    """`y = r[i]; r[i] = x` transposes to `x_ct = ct_r[i]; ct_r[i] = y_ct`."""
    acc, (g,) = accums[0], cts
    if acc is None or (is_zero(acc.get()) and is_zero(g)):
        return
    (x_ct,) = current().bind(
        "swap", [_cotangent_ref(acc), instantiate(g), *idx], params, [tangent_type(x.type)]
    )
    if accums[1] is not None:
        accums[1].add(x_ct)


def _addupdate_transpose(cts, ref, x, *idx, accums, **params):
    acc = accums[0]
    if acc is None or accums[1] is None or is_zero(acc.get()):
        return
    (x_ct,) = current().bind("get", [acc.get(), *idx], params, [tangent_type(x.type)])
    accums[1].add(x_ct)


def _new_ref_transpose(cts, x, *, accums, **params):
    (ct_ref,) = cts
    if accums[0] is not None and not is_zero(ct_ref):
        accums[0].add(current().bind("freeze", [ct_ref], {}, [tangent_type(x.type)])[0])


def _freeze_transpose(cts, ref, *, accums, **params):
    _accumulate(accums[0], cts[0], (), {})


for _n, _rule in (
    ("get", _get_transpose),
    ("swap", _swap_transpose),
    ("addupdate", _addupdate_transpose),
    ("new_ref", _new_ref_transpose),
    ("freeze", _freeze_transpose),
):
    define(_n, fancy_transpose=_rule)
