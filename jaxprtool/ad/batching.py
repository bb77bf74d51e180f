"""Batching (vmap): the walk, the batch-dimension helpers and the rule helpers.

Mirrors `jax/_src/interpreters/batching.py`.  A batched value is an Atom with its batch
dimension: an int (where the batch axis of size `axis_size()` sits in its type) or `None`
(not batched: the same value for every example).  A primitive's batching rule is the
`batching` field of its record (`jaxprtool.record`):

    rule(args: list[Atom], dims: list[int | None], **params) -> (outs: list[Atom], dims: list)

It is called only when at least one operand is batched (an equation whose operands are all
unbatched is copied as it is), emits equations into the current builder with `ops`, and may
put the batch dimension of each result wherever it is cheapest, as JAX's rules do; the walk
moves it only where the program's outputs need it (`--out-axes`), so no transposes are spent
moving every value to the front.  `current_eqn()` is the equation being batched (its results'
per-example types).

Helpers stating the common cases (JAX's `defvectorized`, `defbroadcasting`, `defreducer`):
`vectorized(name)`, `broadcasting(name)`, `reducer(name)`, `leading_batch(name)` (a primitive
that takes matching leading batch dimensions); `loop_fallback` batches any primitive with a
`scan` over the examples (used, with a warning naming the primitive, where no rule exists).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

from .. import shapes
from ..core import (
    Atom,
    Eqn,
    Jaxpr,
    JaxprError,
    Literal,
    Loc,
    ProgramError,
    RefType,
    ShapedArray,
    Type,
    Var,
    eqn_subjaxprs,
    gc_paused,
    long_dtype_name,
)
from ..record import close_name
from ..record import prim as record_of
from . import builder as B
from . import ops
from .registry import located_rule

__all__ = [
    "not_mapped",
    "ZERO_IF_MAPPED",
    "INFER",
    "axis_size",
    "axis_name",
    "current_eqn",
    "ndim",
    "shape_of",
    "ints",
    "bump",
    "replace_fields",
    "field_or",
    "result_types",
    "batched_type",
    "unbatched_type",
    "moveaxis",
    "broadcast",
    "bdim_at_front",
    "matchaxis",
    "bind",
    "batch_eval",
    "batch_jaxpr_axes",
    "batch_jaxpr",
    "batch_jaxpr2",
    "inline_jaxpr",
    "vmap_jaxpr",
    "vectorized",
    "broadcasting",
    "reducer",
    "leading_batch",
    "unbatched",
    "same_dims",
    "loop_fallback",
    "refuse",
    "missing_batching",
]

#: the batch dimension of a value that is not batched (JAX's `not_mapped`)
not_mapped = None


class _Dest:
    """A destination for a result's batch dimension that is not an axis."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return self.name


#: batched results go to axis 0, unbatched ones stay unbatched (JAX's `zero_if_mapped`)
ZERO_IF_MAPPED = _Dest("zero_if_mapped")
#: results keep the batch dimension the rules gave them (JAX's `batch_jaxpr2`)
INFER = _Dest("infer")


# ---------------------------------------------------------------- the batching context


class _Ctx:
    def __init__(self, size: int | str, name: str | None = None, style: object | None = None):
        self.size = size  # a symbolic size (`3*b`) as types hold it: a Jacobian's basis
        self.name = name  # the batch axis's name, for the collectives (--axis-name)
        self.style = style  # text.style.Style of emitted scans (fallback); None: 0.12
        self.warned: set = set()


def _ctx() -> _Ctx:
    """The batch axis being added: the invocation's (`Invocation.batch`, set by `_context`
    for its block), which the rules reach through the builder."""
    c = B.invocation().batch
    if c is None:
        raise RuntimeError("no batching context: run rules inside vmap_jaxpr / batch_jaxpr_axes")
    return c


def axis_size() -> int | str:
    """The size of the batch axis being added: an int, or a symbolic size as types hold
    it (`'3*b'`; a rule that puts it in a parameter passes it through `ops.sdims`)."""
    return _ctx().size


def axis_name() -> str | None:
    """The name of the batch axis being added (JAX's `axis_data.name`; None: unnamed)."""
    return _ctx().name


def _names_batch_axis(eqn: Eqn, name: str | None) -> bool:
    """Whether `eqn` (or an equation in its bodies) communicates over the batch axis `name`
    (JAX's `skippable_batchers`): such an equation is batched even when no operand is."""
    if name is None:
        return False
    names = record_of(eqn.prim).axis_names
    if names is not None and name in names(eqn.params):
        return True
    return any(_names_batch_axis(e, name) for j in eqn_subjaxprs(eqn) for e in j.eqns)


class _SymbolicSize(str):
    """A symbolic batch size (`3*b`) as types hold it, which refuses Python's `*` with an
    integer: a rule computing `2 * size` would repeat the text (`'3*b3*b'`); the TypeError
    is the located refusal of a rule that computes with sizes as integers instead."""

    __slots__ = ()

    def __mul__(self, other):
        raise TypeError(f"the symbolic batch size {self} multiplied as a string")

    __rmul__ = __mul__


@contextlib.contextmanager
def _context(size: int | str, style=None, name: str | None = None):
    """Batch over an axis of `size` in the block: the running invocation's batch axis (a
    builder is made to carry one where none runs: `vmap_jaxpr` called directly)."""
    if B._CURRENT.get() is None:
        with B.use(BatchBuilder()), _context(size, style, name) as c:
            yield c
        return
    if isinstance(size, str) and not isinstance(size, _SymbolicSize):
        size = _SymbolicSize(size)
    inv = B.invocation()
    outer = inv.batch
    if name is None and outer is not None and outer.size == size:
        name = outer.name
    c = _Ctx(size, name, style if style is not None else (outer.style if outer else None))
    if outer is not None and outer.size == size:
        c.warned = outer.warned
    inv.batch = c
    try:
        yield c
    finally:
        inv.batch = outer


class BatchBuilder(B.Builder):
    """A one-program builder whose type errors say that they happened while batching."""

    def bind(self, prim: str, inputs, params: dict, out_types=None, params_key=None) -> list[Var]:
        """`Builder.bind` with its own inference (`params_key`, which it has no use for,
        ignored)."""
        inputs = list(inputs)
        if out_types is None:
            if not shapes.is_known(prim):
                raise JaxprError(
                    f"cannot infer the result type of '{prim}' (no shape rule)", self.loc
                )
            try:
                out_types = shapes.infer_types(prim, [x.type for x in inputs], params, None)
            except shapes.ShapeError as e:
                raise JaxprError(f"while batching: {prim}: {e}", self.loc) from None
            B.require_shardings_known(prim, out_types, self.loc, "batching")
        return super().bind(prim, inputs, params, out_types)

    def add_eqn(self, eqn: Eqn) -> None:
        _no_quoted_size(self.invocation.batch, eqn.prim, eqn.params, eqn.loc)
        super().add_eqn(eqn)


def _no_quoted_size(c: _Ctx | None, prim: str, params: dict, loc) -> None:
    """A symbolic batch size a rule put in a parameter as a plain string would print quoted
    (`slice_sizes=('3*b', 1)`), which no JAX reads back: an internal error naming the rule's
    primitive, never a program that does not print as JAX prints it."""
    if c is None or isinstance(c.size, int):
        return
    for key, value in params.items():
        if isinstance(value, tuple) and any(type(v) is str and v == c.size for v in value):
            raise JaxprError(
                f"internal error: batching '{prim}' over the symbolic size {c.size} wrote it "
                f"into '{key}' as text (the rule should pass it through ops.sdims)",
                loc,
            )


def current_eqn() -> Eqn | None:
    """The equation whose batching rule is running (its results' per-example types)."""
    return getattr(B.current(), "cur_eqn", None)


# ---------------------------------------------------------------- types and axes


def _canon(axis: int, ndim: int) -> int:
    return axis + ndim if axis < 0 else axis


def batched_type(t: Type, d: int | None, size: int | None = None) -> Type:
    """`t` with a batch axis of `size` (default: the current axis size) inserted at `d`."""
    if d is None:
        return t
    if isinstance(t, RefType):  # a batched Ref holds batched values (run_state's bodies)
        return RefType(batched_type(t.inner, d, size), t.memory_space)
    if not isinstance(t, ShapedArray):
        raise JaxprError(f"vmap: cannot batch a value of type {t} (only arrays can be batched)")
    shape = list(t.shape)
    shape.insert(d, axis_size() if size is None else size)
    return t.update(shape=shape)


def _value_type(t: Type) -> Type:
    """The array a Ref holds, or the type itself."""
    return t.inner if isinstance(t, RefType) else t


def unbatched_type(t: Type, d: int | None) -> Type:
    if d is None or not isinstance(t, ShapedArray):
        return t
    shape = list(t.shape)
    del shape[d]
    return t.update(shape=shape)


def ndim(x) -> int:
    """The rank of `x` (0 for a value that is not an array)."""
    return x.type.ndim if isinstance(x.type, ShapedArray) else 0


def shape_of(x) -> tuple:
    return tuple(x.type.shape)


def ints(v) -> tuple[int, ...]:
    """A parameter's integers (a tuple, list or numpy array of them) as a tuple of ints."""
    return tuple(int(i) for i in v)


def bump(axes, b: int) -> tuple[int, ...]:
    """Axes of an unbatched operand, renumbered for the operand with a batch axis at `b`."""
    return tuple(int(d) + (int(d) >= b) for d in axes)


def replace_fields(rec, **changes):
    """The `params.Record` `rec` (dimension numbers) with some fields replaced (fields it
    lacks are appended)."""
    fields = [(k, changes.pop(k) if k in changes else v) for k, v in rec.fields]
    fields.extend(changes.items())
    return type(rec)(rec.cls, tuple(fields))


def field_or(rec, name, default=()):
    """Field `name` of the `params.Record` `rec`, or `default` where it has none."""
    try:
        return rec[name]
    except (KeyError, TypeError, IndexError):
        return default


def bind(prim: str, *args: Atom, _out_types=None, **params) -> list[Var]:
    """Emit `prim[params] args` into the current builder; always a list of results."""
    return B.current().bind(prim, list(args), params, _out_types)


def moveaxis(x: Atom, src: int, dst: int) -> Atom:
    """`x` with its axis `src` moved to `dst` (a `transpose`, none when they agree)."""
    n = ndim(x)
    src, dst = _canon(src, n), _canon(dst, n)
    if src == dst:
        return x
    perm = [i for i in range(n) if i != src]
    perm.insert(dst, src)
    return bind("transpose", x, permutation=tuple(perm))[0]


def broadcast(x: Atom, size: int, axis: int) -> Atom:
    """`x` with a new axis of `size` at `axis` (a `broadcast_in_dim`)."""
    t = x.type
    shape = list(t.shape)
    shape.insert(axis, size)
    dims = tuple(i for i in range(len(shape)) if i != axis)
    return ops.broadcast_in_dim(x, shape, dims)


def bdim_at_front(x: Atom, d: int | None, size: int | None = None) -> Atom:
    """`x` with its batch dimension first: moved there, or broadcast when not batched."""
    if d is None:
        return broadcast(x, axis_size() if size is None else size, 0)
    return moveaxis(x, d, 0)


def matchaxis(src: int | None, dst, x: Atom) -> Atom:
    """Put the batch dimension of `x` (at `src`) at `dst`: an axis, `ZERO_IF_MAPPED`, `INFER`,
    or None (must not be batched)."""
    if dst is INFER:
        return x
    if dst is ZERO_IF_MAPPED:
        dst = None if src is None else 0
    if src == dst:
        return x
    if src is not None and dst is not None:
        return moveaxis(x, src, dst)
    if src is None:
        return broadcast(x, axis_size(), _canon(dst, ndim(x) + 1))
    raise JaxprError(f"at vmap out_axes, got axis spec None but output was batched on axis {src}")


# ---------------------------------------------------------------- the walk


def missing_batching(eqn: Eqn) -> JaxprError:
    return JaxprError(f"Batching rule for '{eqn.prim}' not implemented", eqn.loc)


def batch_eval(
    jaxpr: Jaxpr,
    args: Sequence[Atom],
    dims: Sequence[int | None],
    consts: Sequence[Atom] | None = None,
):
    """Emit the batched equations of `jaxpr` into the current builder: (outs, out dims)."""
    b = B.current()
    c = _ctx()
    env: dict[int, tuple[Atom, int | None]] = {}
    consts = list(consts) if consts is not None else list(jaxpr.constvars)
    for v, x in zip(jaxpr.constvars, consts):
        env[id(v)] = (x, None)
    for v, x, d in zip(jaxpr.invars, args, dims):
        env[id(v)] = (x, d)

    def read(x):
        return (x, None) if isinstance(x, Literal) else env[id(x)]

    saved_loc, saved_eqn = b.loc, getattr(b, "cur_eqn", None)
    try:
        for eqn in jaxpr.eqns:
            ins = [read(x) for x in eqn.inputs]
            vals = [v for v, _ in ins]
            ds = [d for _, d in ins]
            b.loc = eqn.loc
            b.cur_eqn = eqn
            rec = record_of(eqn.prim)
            if (
                all(d is None for d in ds)
                and not rec.always_batched
                and not _names_batch_axis(eqn, c.name)
            ):
                outs = b.emit(
                    eqn.prim,
                    vals,
                    eqn.params,
                    [o.type for o in eqn.outputs],
                    [o.hint for o in eqn.outputs],
                )
                for o, n in zip(eqn.outputs, outs):
                    env[id(o)] = (n, None)
                continue
            rule = rec.batching
            if rule is None:
                outs, out_dims = loop_fallback(vals, ds)
            else:
                with located_rule(eqn):
                    outs, out_dims = rule(vals, ds, **eqn.params)
            outs, out_dims = list(outs), list(out_dims)
            _check_results(eqn, outs, out_dims, rule)
            for o, n, d in zip(eqn.outputs, outs, out_dims):
                env[id(o)] = (n, d)
    finally:
        b.loc, b.cur_eqn = saved_loc, saved_eqn
    outs = [read(x) for x in jaxpr.outvars]
    return [v for v, _ in outs], [d for _, d in outs]


def _check_results(eqn: Eqn, outs, dims, rule=None) -> None:
    """A rule's results must be the equation's results with a batch axis (or none); a wrong
    rule is a located error naming it."""
    if len(outs) != len(eqn.outputs) or len(dims) != len(eqn.outputs):
        raise JaxprError(
            f"internal error: the batching rule of '{eqn.prim}'{_which(rule)} returned "
            f"{len(outs)} results for {len(eqn.outputs)}",
            eqn.loc,
        )
    size = axis_size()
    for o, x, d in zip(eqn.outputs, outs, dims):
        want, got = o.type, x.type
        if not isinstance(want, ShapedArray) or not isinstance(got, ShapedArray):
            continue
        shape = tuple(got.shape)  # without the batch axis (as `unbatched_type`)
        ok = d is None or (0 <= d < len(shape) and _same_size(x, d, size))
        if ok:
            if d is not None:
                shape = shape[:d] + shape[d + 1 :]
            ok = (
                got.dtype == want.dtype
                or (got.dtype.startswith("key") and want.dtype.startswith("key"))
            ) and _same_shape(x, d, shape, tuple(want.shape))
        if not ok:
            raise JaxprError(
                f"internal error: the batching rule of '{eqn.prim}'{_which(rule)} returned {got} "
                f"with batch dimension {d} for a result of type {want}",
                eqn.loc,
            )


def _same_size(x, d: int, size) -> bool:
    """Whether the rule's result `x` has the batch size at axis `d`.  A symbolic batch size
    (a Jacobian's basis) the rule recomputed in another form (`3*b - 1 + 1`) that cannot be
    told apart is taken in the context's form, as `_same_shape` does for the other axes."""
    got = x.type.shape[d]
    if got == size:
        return True
    if isinstance(size, int) or not shapes.util.dim_may_equal(got, size):
        return False
    if isinstance(x, Var):
        full = list(x.type.shape)
        full[d] = size
        x.type = x.type.update(shape=full)
    return True


def _same_shape(x, d, got: tuple, want: tuple) -> bool:
    """Whether the rule's result `x` (of shape `got` without its batch axis `d`) has the
    equation's result shape `want`.  A symbolic size the rule recomputed in another form
    (`- mod(- 1, b) + b + mod(- 1, b)` for `b`) that cannot be told apart is taken in the
    text's form, so the printout keeps JAX's; a size that surely differs is no match."""
    if got == want:
        return True
    if len(got) != len(want) or not all(map(shapes.util.dim_may_equal, got, want)):
        return False
    if isinstance(x, Var):
        full = list(want)
        if d is not None:
            full.insert(d, x.type.shape[d])
        x.type = x.type.update(shape=full)
    return True


def _which(rule) -> str:
    """` (module.rule)` naming a batching rule in an error message ('' for none)."""
    from .registry import rule_name

    return f" ({rule_name(rule)})" if rule is not None else ""


_MEMO: dict = {}


def _dest_key(d):
    return d if isinstance(d, int) or d is None else id(d)


@gc_paused()
def batch_jaxpr_axes(
    jaxpr: Jaxpr, in_axes: Sequence[int | None], out_dest: Sequence
) -> tuple[Jaxpr, list[int | None]]:
    """JAX's `batch_jaxpr_axes`: the batched `jaxpr` whose input i has its batch axis at
    `in_axes[i]` (None: not batched), with each result's batch dimension put at `out_dest[j]`
    (an axis, `ZERO_IF_MAPPED`, `INFER` or None); returns it and the results' batch dims.

    One batched jaxpr per (jaxpr, axis size, axes): a body called twice the same way gets one
    object, which the printer shares as JAX does."""
    in_axes = [
        None if d is None else _canon(d, _value_type(v.type).ndim + 1)
        for d, v in zip(in_axes, jaxpr.invars)
    ]
    out_dest = list(out_dest)
    if len(out_dest) == 1 and len(jaxpr.outvars) != 1:
        out_dest = out_dest * len(jaxpr.outvars)
    c = _ctx()
    key = (
        id(jaxpr),
        c.size,
        c.name,
        id(c.style),
        tuple(in_axes),
        tuple(_dest_key(d) for d in out_dest),
    )
    hit = _MEMO.get(key)
    if hit is not None and hit[0] is jaxpr:
        return hit[1], list(hit[2])
    b = BatchBuilder(loc=getattr(B._CURRENT.get(), "loc", None))
    consts = [B.fresh_like(v) for v in jaxpr.constvars]
    invars = [Var(batched_type(v.type, d), v.hint) for v, d in zip(jaxpr.invars, in_axes)]
    with B.use(b):
        outs, dims = batch_eval(jaxpr, invars, in_axes, consts)
        res, res_dims = [], []
        for x, d, dst in zip(outs, dims, out_dest):
            if dst is INFER:
                res.append(x)
                res_dims.append(d)
                continue
            res.append(matchaxis(d, dst, x))
            if dst is ZERO_IF_MAPPED:
                res_dims.append(None if d is None else 0)
            else:
                res_dims.append(None if dst is None else _canon(dst, ndim(res[-1])))
    out = B.make_jaxpr(invars, B.dce_eqns(b.eqns, res), res, consts)
    if len(_MEMO) > 4096:
        _MEMO.clear()
    _MEMO[key] = (jaxpr, out, tuple(res_dims))
    return out, res_dims


def batch_jaxpr(jaxpr: Jaxpr, in_batched: Sequence[bool], instantiate) -> tuple[Jaxpr, list[bool]]:
    """JAX's `batch_jaxpr`: batched inputs and instantiated outputs at axis 0; returns the
    batched jaxpr and which results are batched."""
    if isinstance(instantiate, bool):
        instantiate = [instantiate] * len(jaxpr.outvars)
    in_axes = [0 if b else None for b in in_batched]
    dest = [0 if i else ZERO_IF_MAPPED for i in instantiate]
    j, dims = batch_jaxpr_axes(jaxpr, in_axes, dest)
    return j, [d is not None for d in dims]


def batch_jaxpr2(jaxpr: Jaxpr, in_axes: Sequence[int | None]) -> tuple[Jaxpr, list[int | None]]:
    """JAX's `batch_jaxpr2`: inputs batched where they are, results where the rules put them
    (the batching of call bodies: jit, custom_jvp_call, ...)."""
    return batch_jaxpr_axes(jaxpr, in_axes, [INFER] * len(jaxpr.outvars))


def emit_vmapped(
    jaxpr: Jaxpr,
    args: Sequence[Atom],
    in_axes: Sequence[int | None],
    out_axes: int,
    size: int,
    consts: Sequence[Atom] = (),
    style=None,
) -> list[Atom]:
    """The batched equations of `jaxpr` emitted into the current builder on `args` (input i
    batched at `in_axes[i]`, None: not batched), every result's batch axis at `out_axes`:
    what `inline_jaxpr(vmap_jaxpr(jaxpr, in_axes, out_axes, size, style), args, consts)`
    emits, without building the batched program and copying it (the Jacobians)."""
    outer = B.current()
    if len(consts) != len(jaxpr.constvars):
        raise JaxprError("internal error: batching a jaxpr with other constants", outer.loc)
    b = BatchBuilder(loc=outer.loc)
    with _context(size, style), B.use(b):
        outs, dims = batch_eval(jaxpr, list(args), list(in_axes), list(consts))
        res = [
            matchaxis(d, _canon(out_axes, ndim(y) + 1), x)
            for x, d, y in zip(outs, dims, jaxpr.outvars)
        ]
    for e in b.eqns:
        outer.add_eqn(e)
    return res


def inline_jaxpr(jaxpr: Jaxpr, args: Sequence[Atom], consts: Sequence[Atom] = ()) -> list[Atom]:
    """Copy the equations of `jaxpr` into the current builder on `args` and `consts`
    (`ops.emit_jaxpr`)."""
    return ops.emit_jaxpr(jaxpr, args, consts)


# ---------------------------------------------------------------- vmap of a whole program


def _str_short(t: Type) -> str:
    if isinstance(t, ShapedArray):
        return f"{long_dtype_name(t.dtype)}[{','.join(str(d) for d in t.shape)}]"
    return str(t)


def _axes_list(spec, n: int, what: str) -> list[int | None]:
    if spec is None or isinstance(spec, int):
        return [spec] * n
    spec = list(spec)
    if len(spec) != n:
        # (about the program's inputs or outputs as a whole: located at their list)
        if what == "in_axes":
            raise ProgramError(
                "vmap in_axes must be an int, None, or a tuple of entries corresponding to the "
                f"positional arguments passed to the function, but got len(in_axes)={len(spec)}, "
                f"len(args)={n}.",
                "inputs",
            )
        raise ProgramError(
            "vmap out_axes must be an int, None, or a tuple of entries corresponding to the "
            f"outputs of the function, but got len(out_axes)={len(spec)} for {n} outputs.",
            "outputs",
        )
    return spec


@gc_paused()
def _axis_size(axis_size) -> int:
    """A batch size given to vmap: a nonnegative integer (a negative one built types such as
    `f32[-3,4]` that the checker passed and that did not read back)."""
    import operator

    try:
        size = operator.index(axis_size) if not isinstance(axis_size, bool) else None
    except TypeError:
        size = None
    if size is None:
        raise JaxprError(f"vmap: axis_size must be an integer, got {axis_size!r:.60}")
    if size < 0:
        raise JaxprError(f"vmap: axis_size must be nonnegative, got {size}")
    return size


def vmap_jaxpr(
    jaxpr: Jaxpr,
    in_axes=0,
    out_axes=0,
    axis_size: int | None = None,
    style=None,
    in_locs: Sequence[Loc | None] | None = None,
    axis_name: str | None = None,
) -> Jaxpr:
    """`jax.vmap` of a program.  `jaxpr` is the per-example program; in the result, input i
    has a batch axis of `axis_size` at `in_axes[i]` (None: not batched, the same for every
    example) and output j its batch axis at `out_axes[j]` (outputs that do not depend on a
    batched input are broadcast; None: the output must not be batched).  `axis_name` names
    the batch axis for the collectives in the program (`jax.vmap(..., axis_name=...)`).
    Errors use JAX's texts, located at the input's binder when `in_locs` is given."""
    n = len(jaxpr.invars)
    dims = _axes_list(in_axes, n, "in_axes")
    locs = list(in_locs) if in_locs is not None else [None] * n
    if axis_size is None:
        if all(d is None for d in dims):
            raise JaxprError(
                "vmap must have at least one non-None value in in_axes or axis_size must be "
                "specified"
            )
        raise JaxprError(
            "vmap: the batch size is not in the program (its inputs are per-example): "
            "give it with --axis-size N"
        )
    size = _axis_size(axis_size)
    canon: list[int | None] = []
    for i, (v, d) in enumerate(zip(jaxpr.invars, dims)):
        if d is None:
            canon.append(None)
            continue
        t = v.type
        if not isinstance(t, ShapedArray):
            raise JaxprError(
                f"vmap: input {i} has type {t}, which cannot be mapped along an axis", locs[i]
            )
        nd = t.ndim + 1  # the rank of the batched input
        if not -nd <= d < nd:
            shape = list(t.shape)
            shape.insert(max(0, min(_canon(d, nd), nd - 1)), size)
            shape_s = "(" + ", ".join(map(str, shape)) + ("," if nd == 1 else "") + ")"
            min_rank = d + 1 if d >= 0 else -d
            raise JaxprError(
                f"vmap was requested to map its argument along axis {d}, which implies that its "
                f"rank should be at least {min_rank}, but is only {nd} (its shape is {shape_s})",
                locs[i],
            )
        canon.append(_canon(d, nd))
    nout = len(jaxpr.outvars)
    odims = _axes_list(out_axes, nout, "out_axes")
    dest = []
    for x, d in zip(jaxpr.outvars, odims):
        if d is None:
            dest.append(None)
            continue
        nd = ndim(x) + 1
        if not -nd <= d < nd:
            raise JaxprError(f"axis {d} is out of bounds for array of dimension {nd}")
        dest.append(_canon(d, nd))
    with _context(size, style, axis_name):
        res, _ = batch_jaxpr_axes(jaxpr, canon, dest)
    return res


# ---------------------------------------------------------------- rule helpers


def result_types(dims_out) -> list[Type] | None:
    """The current equation's result types with a batch axis at each of `dims_out`."""
    eqn = current_eqn()
    if eqn is None:
        return None
    return [batched_type(o.type, d) for o, d in zip(eqn.outputs, dims_out)]


def vectorized(name: str):
    """JAX's `defvectorized`: the primitive applies to each element (or to each value along
    leading dims) so the batched operand goes through as it is; every batched operand must
    have the same batch dimension (they are moved to the first one's otherwise)."""

    def rule(args, dims, **params):
        d = next(x for x in dims if x is not None)
        args = [x if e is None or e == d else moveaxis(x, e, d) for x, e in zip(args, dims)]
        eqn = current_eqn()
        n = len(eqn.outputs) if eqn is not None and eqn.prim == name else None
        out_types = result_types([d] * n) if n is not None else None
        outs = bind(name, *args, _out_types=out_types, **params)
        return outs, [d] * len(outs)

    return rule


def _expand_trailing(x: Atom, nd: int) -> Atom:
    k = ndim(x)
    if k == nd:
        return x
    return ops.broadcast_in_dim(x, tuple(x.type.shape) + (1,) * (nd - k), tuple(range(k)))


def _broadcast_shape(args) -> tuple:
    shapes = [tuple(x.type.shape) for x in args if ndim(x)]
    if not shapes:
        return ()
    return tuple(max(ds) if 1 in ds else ds[0] for ds in zip(*shapes))


def broadcasting(name: str, result_dtypes=None):
    """JAX's `defbroadcasting`: an n-ary element-wise primitive (rank-0 operands broadcast,
    size-1 axes broadcast).  Operands that agree are used as they are; otherwise batch
    dimensions go first and unbatched operands get a size-1 leading axis.  With
    `result_dtypes(args) -> [dtype, ...]` the result types are the operands' broadcast shape
    with those dtypes (for primitives whose shape rule does not broadcast)."""

    def emit(args, params):
        types = None
        if result_dtypes is not None:
            shape = _broadcast_shape(args)
            types = [ShapedArray(shape, d) for d in result_dtypes(args)]
        return bind(name, *args, _out_types=types, **params)

    def rule(args, dims, **params):
        shape, dim = next((tuple(x.type.shape), d) for x, d in zip(args, dims) if d is not None)
        if all(tuple(x.type.shape) == shape and d == dim for x, d in zip(args, dims) if ndim(x)):
            outs = emit(args, params)
            return outs, [dim] * len(outs)
        args = [bdim_at_front(x, d, 1) if ndim(x) else x for x, d in zip(args, dims)]
        nd = max(ndim(x) for x in args)
        args = [x if d is None else _expand_trailing(x, nd) for x, d in zip(args, dims)]
        outs = emit(args, params)
        return outs, [0] * len(outs)

    return rule


def reducer(name: str):
    """JAX's `defreducer`: a reduction over `axes` (reduce_sum, argmax, ...): the axes are
    shifted past the batch dimension, which stays where it is."""

    def rule(args, dims, *, axes, **params):
        (x,), (d,) = args, dims
        axes = tuple(int(a) if int(a) < d else int(a) + 1 for a in axes)
        rest = [i for i in range(ndim(x)) if i not in axes]
        out = bind(name, x, axes=axes, **params)
        return out, [rest.index(d)]

    return rule


def leading_batch(name: str):
    """JAX's `expand_dims_batcher`: a primitive that supports matching leading batch
    dimensions in all its operands (unbatched ones are broadcast)."""

    def rule(args, dims, **params):
        args = [bdim_at_front(x, d) for x, d in zip(args, dims)]
        outs = bind(name, *args, **params)
        return outs, [0] * len(outs)

    return rule


def unbatched(name: str):
    """For primitives without operands (iota, axis_index...): never called with a batched
    operand; rebinding them is their batching."""

    def rule(args, dims, **params):
        outs = bind(name, *args, **params)
        return outs, [None] * len(outs)

    return rule


def same_dims(name: str):
    """Each operand's batch dimension passes to the matching result (device_put,
    optimization_barrier)."""

    def rule(args, dims, **params):
        outs = bind(name, *args, _out_types=result_types(dims), **params)
        return outs, list(dims)

    return rule


def refuse(message: str):
    """A rule that refuses with `message` (at the equation's location)."""

    def rule(args, dims, **params):
        raise JaxprError(message, B.current().loc)

    return rule


def loop_fallback(
    args, dims, warn: bool = True, why: str | None = None, body_params=None, **_params
):
    """Batch any primitive by looping over the examples: a `scan` whose body is the equation
    on one example (unbatched operands become the scan's constants, batched ones its scanned
    inputs, moved to axis 0; the results are stacked along axis 0), with `body_params` in
    place of the equation's parameters when given.  It warns (once per primitive and
    batch), naming the primitive and `why` (default: it has no rule), unless `warn` is
    False: only for a loop that is JAX's own rule (debug callbacks)."""
    b = B.current()
    eqn: Eqn = b.cur_eqn
    c = _ctx()
    if warn and eqn.prim not in c.warned:
        c.warned.add(eqn.prim)
        from ..io import warn as io_warn

        close = close_name(eqn.prim)
        hint = f" (did you mean '{close}'?)" if close else ""
        reason = why or f"no batching rule for '{eqn.prim}'{hint}"
        io_warn(f"vmap: {reason}; it runs once per example in a scan over the batch", eqn.loc)
    size = c.size
    consts, cvars, xs, xvars, body_in = [], [], [], [], []
    for x, d, orig in zip(args, dims, eqn.inputs):
        if isinstance(x, Literal):
            body_in.append(x)
        elif d is None:
            v = Var(x.type, None)
            consts.append(x)
            cvars.append(v)
            body_in.append(v)
        else:
            v = Var(orig.type, None)
            xs.append(moveaxis(x, d, 0))
            xvars.append(v)
            body_in.append(v)
    outs = [Var(o.type, o.hint) for o in eqn.outputs]
    one = eqn.replace(inputs=body_in, outputs=outs)
    if body_params is not None:
        one = one.replace(params=body_params)
    body = B.make_jaxpr(cvars + xvars, [one], outs)
    from ..text.style import DEFAULT_STYLE

    style = c.style if c.style is not None else DEFAULT_STYLE
    length = ops.sdims((size,))[0]  # a symbolic size (a Jacobian's basis) prints bare
    params = style.scan_params(jaxpr=body, length=length, num_consts=len(consts), num_carry=0)
    res = ops.emit_scan(consts + xs, params, [batched_type(o.type, 0, size) for o in outs])
    return res, [0] * len(res)
