"""The Equinox family: the primitives Equinox (and so diffrax, optimistix, lineax) defines.

Programs that use Equinox's loops (`eqx.internal.while_loop`, which diffrax's
`diffeqsolve` runs on) and error checks (`eqx.error_if`, `branched_error_if`) print these
primitives under their own names.  Each rule below follows Equinox's own definition
(equinox 0.13: `equinox/_unvmap.py`, `internal/_nontraceable.py`, `internal/_loop/common.py`):

- `unvmap_any`, `unvmap_all`, `unvmap_max`: `any` / `all` / `max` over every element,
  batch dimensions included (a batched operand gives an unbatched result);
- `select_if_vmap pred x y`: `x` (Equinox assumes an unbatched `pred` is True); batched,
  `select(pred, x, y)`;
- `nonbatchable`, `nondifferentiable_backward`, `nontraceable`: identities that refuse to
  be batched (`nonbatchable` with `allow_constant_across_batch`: the first example, checked
  constant as under EQX_ON_ERROR=nan), reverse-differentiated, or transformed at all;
- `maybe_set pred xs x i...`: `xs.at[i].set(x)` (with `makes_false_steps`,
  `xs.at[i].set(select(pred, x, xs[i]))`), whose transpose, as Equinox's, assumes every
  location of `xs` is written once (its checkpointed loops' buffers): the cotangent of `xs`
  passes through unchanged, not zeroed at `i`.

`eqx.nondifferentiable` is a `custom_jvp` function (`_nondifferentiable`), not a primitive:
its JVP rule, registered below as a library rule, raises as Equinox's does when a tangent
reaches it.  Batching `maybe_set` (Equinox's `vprim`: `jax.vmap` of its implementation)
runs it once per example; running and differentiating `noinline`, whose function is a
Python object, are refused.
"""

from __future__ import annotations

from ..ad import ops
from ..ad.builder import current
from ..ad.ops import instantiate
from ..ad.registry import defjvp_zero, primitive_jvps, primitive_transposes, register_library_jvp
from ..ad.zeros import Zero, is_undefined_primal, is_zero, tangent_type
from ..core import Jaxpr, JaxprError, ShapedArray
from ..lazy import lazy_module
from ..params import Opaque
from ..record import define
from ..record import prim as record_of
from ..shapes import ShapeError, shape_rule
from ..shapes.util import is_complex_dtype, is_float_dtype, is_int_dtype, nargs

#: the vmap machinery, executed when a batching rule first runs
BT = lazy_module("jaxprtool.ad.batching")


def _jnp():
    import jax.numpy as jnp

    return jnp


def _evaluate(fn):
    """An evaluator rule from `fn(*values, **params) -> value` (Equinox's `impl`)."""

    def rule(interp, eqn, invals, path):
        return [fn(*invals, **eqn.params)]

    return rule


def _bool_scalar(t):
    return isinstance(t, ShapedArray) and t.shape == () and t.dtype == "bool"


# ---------------------------------------------------------------- unvmap_any, _all, _max


@shape_rule("unvmap_any", "unvmap_all")
def _unvmap_bool(in_types, params, out_hint):
    nargs(in_types, 1, "unvmap")
    return [ShapedArray((), "bool")]


@shape_rule("unvmap_max")
def _unvmap_max(in_types, params, out_hint):
    nargs(in_types, 1, "unvmap_max")
    return [ShapedArray((), in_types[0].dtype)]


def _unvmap_batching(name):
    """Equinox's batching rule: the reduction over the batch too; the result is unbatched."""

    def rule(args, dims, **params):
        return [ops.bind(name, args[0], **params)], [None]

    return rule


for _n, _fn in (("unvmap_any", "any"), ("unvmap_all", "all"), ("unvmap_max", "max")):
    defjvp_zero(_n)  # boolean or integer results (Equinox registers no JVP)
    define(
        _n,
        evaluate=_evaluate(lambda x, _f=_fn, **p: getattr(_jnp(), _f)(x)),
        batching=_unvmap_batching(_n),
    )


# ---------------------------------------------------------------- select_if_vmap pred x y


@shape_rule("select_if_vmap")
def _select_if_vmap_shape(in_types, params, out_hint):
    nargs(in_types, 3, "select_if_vmap")
    pred, x, y = in_types
    if not _bool_scalar(pred):
        raise ShapeError(f"select_if_vmap: the predicate must be bool[], got {pred}")
    if x != y:
        raise ShapeError(f"select_if_vmap: the cases must have one type, got {x} and {y}")
    return [x]


def _select_if_vmap_jvp(primals, tangents, /, **params):
    """Equinox's `_select_if_vmap_jvp`: the same selection of the tangents."""
    pred, x, y = primals
    (out,) = current().bind("select_if_vmap", list(primals), params)
    _, tx, ty = tangents
    if is_zero(tx) and is_zero(ty):
        return [out], [Zero(tangent_type(out.type))]
    t = current().bind("select_if_vmap", [pred, instantiate(tx), instantiate(ty)], params)
    return [out], t


def _select_if_vmap_transpose(cts, pred, x, y, /, **params):
    """Equinox's `_select_if_vmap_transpose`: `ct` to `x` where selected, to `y` elsewhere."""
    (ct,) = cts
    if is_undefined_primal(pred):
        raise JaxprError("select_if_vmap: the predicate cannot be linear", current().loc)
    if is_zero(ct):
        return [None] + [
            Zero(tangent_type(a.type)) if is_undefined_primal(a) else None for a in (x, y)
        ]
    zero = ops.zeros(ct.type)
    ct_x = ops.bind("select_if_vmap", pred, ct, zero) if is_undefined_primal(x) else None
    ct_y = ops.bind("select_if_vmap", pred, zero, ct) if is_undefined_primal(y) else None
    return [None, ct_x, ct_y]


def _select_if_vmap_batching(args, dims, **params):
    """Equinox's `_select_if_vmap_batch`: an unbatched predicate keeps the primitive (its
    cases moved to a leading batch axis); a batched one is a real `select`."""
    from ..ad.batching import axis_size, bdim_at_front

    pred, x, y = args
    bp, bx, by = dims
    if bp is None:
        size = axis_size()
        x, y = bdim_at_front(x, bx, size), bdim_at_front(y, by, size)
        return [ops.bind("select_if_vmap", pred, x, y)], [0]
    outs, out_dims = record_of("select_n").batching([pred, y, x], [bp, by, bx])
    return list(outs), list(out_dims)


define(
    "select_if_vmap",
    evaluate=_evaluate(lambda pred, x, y: x),
    batching=_select_if_vmap_batching,
)
primitive_jvps["select_if_vmap"] = _select_if_vmap_jvp
primitive_transposes["select_if_vmap"] = _select_if_vmap_transpose


# ---------------------------------------------------------------- identities that refuse


@shape_rule("nonbatchable", "nondifferentiable_backward", "nontraceable")
def _identity(in_types, params, out_hint):
    nargs(in_types, 1, "identity")
    return [in_types[0]]


def _no_jvp(name):
    """JAX's refusal of a primitive without a JVP rule, where a tangent reaches it."""

    def rule(primals, tangents, /, **params):
        outs = current().bind(name, list(primals), params)
        if any(not is_zero(t) for t in tangents):
            raise JaxprError(f"Differentiation rule for '{name}' not implemented", current().loc)
        return outs, [Zero(tangent_type(o.type)) for o in outs]

    return rule


def _nan_like_value(dtype: str):
    """What Equinox's `_nan_like` fills an erroring value with (equinox/_errors.py): NaN for
    inexact dtypes, the largest integer, True; None for any other dtype (left as it is)."""
    if is_float_dtype(dtype) or is_complex_dtype(dtype):
        return float("nan")
    if is_int_dtype(dtype):
        bits = int(dtype[1:])
        return 2**bits - 1 if dtype.startswith("u") else 2 ** (bits - 1) - 1
    return True if dtype == "bool" else None


def _nonbatchable_batching(args, dims, *, msg, allow_constant_across_batch, **params):
    """Equinox's `_cannot_batch`: refuse a batched operand, or, with
    `allow_constant_across_batch`, check that the batch is constant and take its first
    element.  Equinox checks with `eqx.error_if`, which calls back into Python to raise
    unless EQX_ON_ERROR=nan; a callback cannot run from text, so the tool emits the check as
    EQX_ON_ERROR=nan does (a nonconstant batch gives NaN) and says so."""
    (x,), (d,) = args, dims
    if d is None:
        return [x], [None]
    if not allow_constant_across_batch:
        raise JaxprError(str(msg), current().loc)
    from ..io import warn

    warn(
        "vmap: Equinox's nonbatchable(allow_constant_across_batch=True) checks that the batch "
        "is constant; the check is emitted as EQX_ON_ERROR=nan makes it (a nonconstant batch "
        "gives NaN, or the integer maximum, instead of raising)",
        current().loc,
    )
    first = BT.bind("squeeze", ops.slice_in_dim(x, 0, 1, axis=d), dimensions=(d,))[0]
    fill = _nan_like_value(x.type.dtype)
    if fill is None:
        return [first], [None]
    lo = BT.bind("reduce_min", x, axes=(d,), out_sharding=None)[0]
    hi = BT.bind("reduce_max", x, axes=(d,), out_sharding=None)[0]
    differs = BT.bind("ne", lo, hi)[0]
    axes = tuple(range(len(differs.type.shape)))
    if axes:
        differs = BT.bind("reduce_or", differs, axes=axes)[0]
    return [ops.select_n(differs, first, ops.full(first.type, fill))], [None]


def _nontraceable_refusal(what):
    def rule(*args, **params):
        raise JaxprError(f"Detected {what} of {params.get('name')}", current().loc)

    return rule


def _nondiff_backward_jvp(primals, tangents, /, **params):
    """Equinox's rule: the identity on the primal and on the tangent."""
    outs = current().bind("nondifferentiable_backward", list(primals), params)
    (t,) = tangents
    if is_zero(t):
        return outs, [t]
    return outs, current().bind("nondifferentiable_backward", [t], params)


def _nondiff_backward_transpose(cts, x, /, *, msg, symbolic, **params):
    """Equinox's rule: a symbolic-zero cotangent passes, any other is an error (a
    non-`symbolic` one is checked at run time by Equinox, which the tool cannot emit)."""
    (ct,) = cts
    if is_zero(ct):
        return [Zero(tangent_type(x.type))]
    if symbolic:
        raise JaxprError(str(msg), current().loc)
    raise JaxprError(
        f"{msg} (Equinox checks at run time that this cotangent is zero; the tool cannot "
        "emit that check)",
        current().loc,
    )


define(
    "nonbatchable",
    evaluate=_evaluate(lambda x, **p: x),
    batching=_nonbatchable_batching,
    evaluated_params=frozenset({"allow_constant_across_batch", "msg"}),  # batching only
)
primitive_jvps["nonbatchable"] = _no_jvp("nonbatchable")
define(
    "nondifferentiable_backward",
    evaluate=_evaluate(lambda x, **p: x),
    evaluated_params=frozenset({"msg", "symbolic"}),  # AD's message: the value is x
    batching=lambda args, dims, **params: (
        [ops.bind("nondifferentiable_backward", args[0], **params)],
        list(dims),
    ),
)
primitive_jvps["nondifferentiable_backward"] = _nondiff_backward_jvp
primitive_transposes["nondifferentiable_backward"] = _nondiff_backward_transpose
define(
    "nontraceable",
    evaluate=_evaluate(lambda x, **p: x),
    evaluated_params=frozenset({"name"}),  # named in the refusals of transformations
    batching=_nontraceable_refusal("batching"),
)
primitive_jvps["nontraceable"] = _nontraceable_refusal("differentiation")
primitive_transposes["nontraceable"] = _nontraceable_refusal("transposition")


# ---------------------------------------------------------------- maybe_set pred xs x i...


def _index_arity(params) -> int | None:
    """How many scalar dynamic index leaves `i` is made of: `i_treedef=PyTreeDef(*)` (one
    index) or `PyTreeDef((*, ..., *))` with no static parts; None for any other index."""
    tree = params.get("i_treedef")
    text = tree.text if isinstance(tree, Opaque) else str(tree)
    static = params.get("i_static")
    if text == "PyTreeDef(*)" and static is None:
        return 1
    inner = text.removeprefix("PyTreeDef((").removesuffix("))")
    if inner != text and all(p.strip() == "*" for p in inner.split(",") if p.strip()):
        n = sum(1 for p in inner.split(",") if p.strip())
        if isinstance(static, tuple) and len(static) == n and all(s is None for s in static):
            return n
    return None


def _index_or_refuse(params, n_leaves: int, loc=None) -> int:
    n = _index_arity(params)
    if n is None or n != n_leaves or params.get("kwargs") not in ((), None):
        raise JaxprError(
            f"maybe_set: only an index made of integer scalars is supported (got "
            f"i_treedef={params.get('i_treedef')} i_static={params.get('i_static')} "
            f"kwargs={params.get('kwargs')})",
            loc,
        )
    return n


@shape_rule("maybe_set")
def _maybe_set_shape(in_types, params, out_hint):
    if len(in_types) < 3:
        raise ShapeError("maybe_set: expected pred, xs, x and the index operands")
    pred, xs, x, *idx = in_types
    if not _bool_scalar(pred):
        raise ShapeError(f"maybe_set: the predicate must be bool[], got {pred}")
    n = _index_arity(params)
    if n is not None and n == len(idx) and isinstance(xs, ShapedArray):
        want = xs.shape[n:]
        if any(t.shape != () or not t.dtype.startswith(("i", "u")) for t in idx):
            raise ShapeError("maybe_set: the index operands must be integer scalars")
        if x.shape != want or x.dtype != xs.dtype:
            raise ShapeError(f"maybe_set: the value must be {ShapedArray(want, xs.dtype)}, got {x}")
    return [xs]


def _maybe_set_impl(pred, xs, x, *idx, makes_false_steps, **params):
    """Equinox's `_maybe_set_impl` for an index of integer scalars."""
    import jax.lax as lax

    xs, x = _jnp().asarray(xs), _jnp().asarray(x)  # the evaluator may hold numpy arrays
    i = idx[0] if params.get("i_static") is None else tuple(idx)
    if makes_false_steps:
        x = lax.select(pred, x, xs.at[i].get())
    return xs.at[i].set(x)


def _maybe_set_evaluate(interp, eqn, invals, path):
    _index_or_refuse(eqn.params, len(invals) - 3, eqn.loc)
    return [_maybe_set_impl(*invals, **eqn.params)]


def _maybe_set_jvp(primals, tangents, /, **params):
    """Equinox's `_maybe_set_jvp`: the same write of the tangents."""
    pred, xs, x, *idx = primals
    _, t_xs, t_x, *_ = tangents
    outs = current().bind("maybe_set", list(primals), params)
    if is_zero(t_xs) and is_zero(t_x):
        return outs, [Zero(tangent_type(outs[0].type))]
    t = current().bind("maybe_set", [pred, instantiate(t_xs), instantiate(t_x), *idx], params)
    return outs, t


def _read_at(xs, idx):
    """`xs[i0, i1, ...]` for integer scalars, as jnp emits it: negative indices wrap, then a
    dynamic_slice of size 1 on the indexed axes and a reshape dropping them."""
    shape = xs.type.shape
    starts = []
    for k, i in enumerate(idx):
        n = ops.lit(shape[k], i)
        starts.append(ops.select_n(ops.lt(i, ops.lit(0, i)), i, ops.add(i, n)))
    starts += [ops.lit(0, idx[0]) for _ in shape[len(idx) :]]
    sizes = (1,) * len(idx) + tuple(shape[len(idx) :])
    piece = ops.bind("dynamic_slice", xs, *starts, slice_sizes=sizes)
    return ops.reshape(piece, tuple(shape[len(idx) :]))


def _maybe_set_transpose(cts, pred, xs, x, *idx, **params):
    """Equinox's `_maybe_set_transpose`: the cotangent of `xs` passes unchanged (each
    location is written once, so it is read once going back); that of `x` is the
    cotangent read at `i`, selected by `pred` as in the forward step."""
    (ct,) = cts
    if is_undefined_primal(pred) or any(is_undefined_primal(i) for i in idx):
        raise JaxprError("maybe_set: the predicate and index cannot be linear", current().loc)
    _index_or_refuse(params, len(idx), current().loc)
    ct_xs = (
        (ct if not is_zero(ct) else Zero(tangent_type(xs.type)))
        if is_undefined_primal(xs)
        else None
    )
    ct_x = None
    if is_undefined_primal(x):
        if is_zero(ct):
            ct_x = Zero(tangent_type(x.type))
        else:
            got = _read_at(ct, list(idx))
            if params.get("makes_false_steps"):
                ct_x = ops.select_n(pred, ops.zeros(got.type), got)
            else:
                ct_x = ops.bind("select_if_vmap", pred, got, ops.zeros(got.type))
    return [None, ct_xs, ct_x] + [None] * len(idx)


def _maybe_set_batching(args, dims, **params):
    """Equinox's `vprim` rule: `jax.vmap` of `_maybe_set_impl`, in which select_if_vmap
    becomes a real select by the predicate once the predicate is batched.  Run once per
    example, with makes_false_steps (that select) when the predicate is batched."""
    masked = bool(params.get("makes_false_steps")) or dims[0] is not None
    return BT.loop_fallback(
        args,
        dims,
        why="Equinox vmaps maybe_set's implementation, which the tool does not vectorize",
        body_params={**params, "makes_false_steps": masked},
    )


define(
    "maybe_set",
    multiple_results=True,
    evaluate=_maybe_set_evaluate,
    evaluated_params=frozenset("makes_false_steps i_treedef i_static kwargs".split()),
    batching=_maybe_set_batching,
)
primitive_jvps["maybe_set"] = _maybe_set_jvp
primitive_transposes["maybe_set"] = _maybe_set_transpose


# ---------------------------------------------------------------- Python-level primitives

#: primitives whose parameters are Python objects (the function of a noinline call)
_PYTHON_LEVEL = {
    "noinline": "an Equinox noinline call (eqx.internal.noinline), whose function",
    # lineax: the operator's and solver's classes print as reprs, and the solver's state
    # operands as '_' (JAX's text names several values so: which is which is lost)
    "linear_solve": "lineax's linear_solve (an Equinox primitive), whose operator and solver",
}


def _python_level_refusal(what):
    def rule(*args, **params):
        raise JaxprError(
            f"cannot differentiate {what} the text cannot hold (a Python object)", current().loc
        )

    return rule


for _n, _what in _PYTHON_LEVEL.items():
    define(
        _n,
        refusal=f"is {_what} the text cannot hold (a Python object)",
        jvp=_python_level_refusal(_what),
    )


# ---------------------------------------------------------------- eqx.nondifferentiable


class _NondifferentiableRule:
    """`eqx.nondifferentiable` (`custom_jvp_call[name=_nondifferentiable]`, an identity
    body): Equinox's JVP raises when a tangent reaches it, and so does the tool."""

    name = "_nondifferentiable"

    @staticmethod
    def matches(params: dict, body: Jaxpr) -> bool:
        if str(params.get("jvp")) != "_nondifferentiable_jvp":
            return False
        return not body.eqns and list(body.outvars) == list(body.invars)

    @staticmethod
    def tangent(primals, tangents, ans, body):
        raise JaxprError(
            "Unexpected tangent: this value went through `eqx.nondifferentiable` (Equinox), "
            "which cannot be autodifferentiated (JAX raises here too)",
            current().loc,
        )


register_library_jvp(_NondifferentiableRule())  # (found as jax_library.py's rules are)
