"""`jacfwd`, `jacrev`, `hessian` as JAX defines them (`jax/_src/api.py`), written as
compositions of the program transformations: jvp or vjp, then vmap over the standard basis.

- jacfwd(f): `vmap(jvp(f), in_axes=(None.., 0..), out_axes=-1)` fed the rows of an identity
  matrix over the (flattened, concatenated) differentiated inputs; each output tangent's last
  axis is split back into the inputs and reshaped: one result `y.shape + x.shape` per output y
  and differentiated input x.
- jacrev(f): `vmap(vjp(f), in_axes=(None.., 0..))` fed the identity over the flattened outputs;
  each input cotangent's first axis is split back into the outputs; laid out as jacfwd's.
- hessian(f) = jacfwd(jacrev(f)).
- A basis of one row (jacrev of a scalar loss, jacfwd in a scalar): vmapping over it is the
  program itself at that row, so the Jacobian is the one jvp or vjp at a tangent of ones,
  reshaped (JAX vmaps over an axis of size 1: the same values, more equations).

The result is one program `(x...) -> (J...)`: the basis equations (iota, eq, convert), the
batched program inline, and the unravelling (split, reshape).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..core import (
    Jaxpr,
    JaxprError,
    ProgramError,
    ShapedArray,
    Var,
    gc_paused,
    is_float,
    is_inexact,
)
from ..core import long_dtype_name as _long
from ..lazy import np
from ..shapes.util import dim_add, prod
from ..shardings import SpecText, sharded_size, type_spec
from . import builder as B
from . import ops
from .batching import emit_vmapped


def _argnums(jaxpr: Jaxpr, argnums) -> list[int]:
    n = len(jaxpr.invars)
    if argnums is None:
        argnums = (0,)
    if isinstance(argnums, int):
        argnums = (argnums,)
    out = []
    for i in argnums:
        if not -n <= i < n:
            raise ProgramError(
                f"argnums: input {i} does not exist (the jaxpr has {n} inputs)", "inputs"
            )
        if i % n in out:
            raise ProgramError(f"argnums: input {i % n} is named twice", "inputs")
        out.append(i % n)
    return out


def _basis_size(types) -> int | str:
    """The number of rows of the standard basis over `types`: their element counts, summed.
    A symbolic dimension makes it a symbolic size (`3*b`), as JAX's `_std_basis` builds an
    identity of that size and vmaps over it."""
    n = 0
    for t in types:
        n = dim_add(n, prod(_global(t.shape)))  # a sharded dim: its global size
    return n


def _global(shape) -> tuple:
    return tuple(map(sharded_size, shape))


def _basis_like(part, t):
    """A basis part (N rows of `t`'s shape) as tangents of `t`: its dtype, and its sharding
    when `t` is explicitly sharded (the rows unsharded), as JAX converts the basis to the
    tangent type (a `convert_element_type` whose `sharding` the binder type implies)."""
    spec = type_spec(t)
    sharding = SpecText((None, *spec.entries)) if spec is not None else None
    return ops.convert_element_type(part, t.dtype, sharding=sharding)


def _eye_parts(n: int, dtype: str, shapes, axis: int):
    """JAX's `_std_basis`: an identity of size n, split along `axis` into parts of the given
    shapes (each part reshaped so that `axis` becomes the part's shape)."""
    r = ops.iota((n, n), 0)
    c = ops.iota((n, n), 1)
    eye = ops.convert_element_type(ops.eq(r, c), dtype)
    return _split(eye, shapes, axis)


def _split(x, shapes, axis: int, outer=None):
    """Split axis `axis` of `x` into consecutive parts of the given shapes' sizes, each
    reshaped to `outer[:axis] + shape + outer[axis:]` (`outer`: `x`'s other axes, default
    as its type holds them; the Jacobians give the program's own types, so that a size a
    rule wrote in another form (`b - mod(- 1, b) + mod(- 1, b)`) reads as JAX's `b`).
    Sharded dims count at their global sizes (the reshapes' sharding rule gives the axes)."""
    shapes = [_global(s) for s in shapes]
    sizes = [prod(s) for s in shapes]
    xs = list(_global(x.type.shape))
    outer = xs[:axis] + xs[axis + 1 :] if outer is None else list(_global(outer))
    if len(sizes) == 1:
        parts = [x]
    else:
        parts = ops.split(x, sizes, axis)
    return [ops.reshape(p, (*outer[:axis], *s, *outer[axis:])) for p, s in zip(parts, shapes)]


def _one_row(n, types) -> bool:
    """A standard basis of one row (one differentiated value, of one element, replicated):
    vmapping over it is the program itself on that row, so the Jacobian is the one jvp or
    vjp at a tangent of ones, reshaped (JAX vmaps over an axis of size 1; the values are
    the same, with fewer equations)."""
    return n == 1 and len(types) == 1 and type_spec(types[0]) is None


def _ones(types) -> list:
    return [ops.full(t, 1) for t in types]


def _result_dtype(types) -> str:
    names = {_long(t.dtype) for t in types}
    if len(names) == 1:  # numpy's promotion of one dtype is itself (no numpy import)
        return names.pop()
    return np.result_type(*names).name


def _short(long: str) -> str:
    from ..core import short_dtype_name

    return short_dtype_name(long)


def _wrap(jaxpr: Jaxpr, body):
    """A program with `jaxpr`'s constants and inputs whose equations `body(inputs, consts)`
    emits; its results.  The derived programs keep the constants in order, so the
    Jacobian takes the program's `--consts`."""
    b = B.Builder()
    consts = [B.fresh_like(v) for v in jaxpr.constvars]
    invars = [B.fresh_like(v) for v in jaxpr.invars]
    with B.use(b):
        outs = body(invars, consts)
    return B.make_jaxpr(invars, B.dce_eqns(b.eqns, outs), outs, consts)


def _same_constants(jaxpr: Jaxpr, derived: Jaxpr) -> None:
    """The derived program takes `jaxpr`'s constants, in order (an internal error else)."""
    if [v.type for v in derived.constvars] != [v.type for v in jaxpr.constvars]:
        raise JaxprError("internal error: the derived program's constants differ")


@gc_paused()
def jacfwd(jaxpr: Jaxpr, argnums=0, style=None) -> Jaxpr:
    """`jax.jacfwd(f, argnums)` flattened: one result per (output, differentiated input)."""
    from .jvp import jvp_jaxpr_info

    args = _argnums(jaxpr, argnums)
    for i in args:
        t = jaxpr.invars[i].type
        if not is_float(t):
            dt = _long(t.dtype) if isinstance(t, ShapedArray) else str(t)
            raise JaxprError(
                "jacfwd requires real-valued inputs (input dtype that is a sub-dtype of "
                f"np.floating), but got {dt}. For holomorphic differentiation, pass "
                "holomorphic=True. For differentiation of non-holomorphic functions involving "
                "complex inputs or integer inputs, use jax.jvp directly."
            )
    n_in, n_out = len(jaxpr.invars), len(jaxpr.outvars)
    jv, _mask, out_nz = jvp_jaxpr_info(jaxpr, args, instantiate=True)
    # keep only the output tangents; inputs: the primals, then the tangents in input order
    tan = jv.replace(outvars=jv.outvars[n_out:])
    tan = tan.replace(eqns=B.dce_eqns(list(tan.eqns), tan.outvars))
    in_types = [jaxpr.invars[i].type for i in args]
    N = _basis_size(in_types)
    in_axes = [None] * n_in + [0] * len(args)
    order = sorted(args)  # the tangent inputs come in input order

    _same_constants(jaxpr, tan)

    def body(xs, consts):
        if _one_row(N, in_types):
            touts = iter(ops.emit_jaxpr(tan, list(xs) + _ones(in_types), consts))
            x = in_types[0]
            res = []
            for y, nz in zip(jaxpr.outvars, out_nz):
                t = y.type.update(shape=(*y.type.shape, *x.shape))
                res.append(ops.reshape(next(touts), t.shape) if nz else ops.full(t, 0))
            return res
        dtype = _short(_result_dtype(in_types))
        basis = _eye_parts(N, dtype, [tuple(t.shape) for t in in_types], 1)
        basis = [_basis_like(p, t) for p, t in zip(basis, in_types)]
        by_arg = dict(zip(args, basis))
        tangents = [by_arg[i] for i in order]
        touts = iter(emit_vmapped(tan, list(xs) + tangents, in_axes, -1, N, consts, style))
        res = []
        for y, nz in zip(jaxpr.outvars, out_nz):
            if not nz:  # an int/bool output: zero Jacobian (JAX casts float0 to its dtype)
                for t in in_types:
                    res.append(ops.full(y.type.update(shape=(*y.type.shape, *t.shape)), 0))
                continue
            jt = next(touts)  # y.shape + (N,)
            parts = _split(jt, [tuple(t.shape) for t in in_types], y.type.ndim, y.type.shape)
            res.extend(ops.convert_element_type(p, y.type.dtype) for p in parts)
        return res

    return _wrap(jaxpr, body)


@gc_paused()
def jacrev(jaxpr: Jaxpr, argnums=0, style=None) -> Jaxpr:
    """`jax.jacrev(f, argnums)` flattened: one result per (output, differentiated input)."""
    from .api import vjp_jaxpr

    args = _argnums(jaxpr, argnums)
    for i in args:
        t = jaxpr.invars[i].type
        if not is_inexact(t):
            dt = _long(t.dtype) if isinstance(t, ShapedArray) else str(t)
            raise JaxprError(
                "jacrev requires real- or complex-valued inputs (input dtype that is a "
                f"sub-dtype of np.inexact), but got {dt}. If you want to use Boolean- or "
                "integer-valued inputs, use vjp (`jaxprtool vjp`), which gives them no cotangent."
            )
    for y in jaxpr.outvars:
        t = y.type
        if not is_float(t):
            dt = _long(t.dtype) if isinstance(t, ShapedArray) else str(t)
            tail = (
                "For holomorphic differentiation, pass holomorphic=True. For differentiation "
                "of non-holomorphic functions involving complex outputs, use jax.vjp directly."
                if dt.startswith("complex")
                else "For differentiation of functions with integer outputs, use jax.vjp directly."
            )
            raise JaxprError(
                "jacrev requires real-valued outputs (output dtype that is a sub-dtype of "
                f"np.floating), but got {dt}. {tail}"
            )
    if not jaxpr.outvars:  # JAX's standard basis of no outputs has no dtype
        raise ProgramError(
            "jacrev of a program without outputs: JAX raises 'at least one array or dtype is "
            "required' (its standard basis over no outputs has no dtype)",
            "outputs",
        )
    n_in, n_out = len(jaxpr.invars), len(jaxpr.outvars)
    vj = vjp_jaxpr(jaxpr, args)  # (x..., ct_y...) -> (y..., ct_x in input order...)
    cts = vj.replace(outvars=vj.outvars[n_out:])
    cts = cts.replace(eqns=B.dce_eqns(list(cts.eqns), cts.outvars))
    out_types = [y.type for y in jaxpr.outvars]
    N = _basis_size(out_types)
    in_axes = [None] * n_in + [0] * n_out
    order = sorted(args)

    _same_constants(jaxpr, cts)

    def body(xs, consts):
        if _one_row(N, out_types):
            ct_x = dict(zip(order, ops.emit_jaxpr(cts, list(xs) + _ones(out_types), consts)))
            y = out_types[0]
            return [ops.reshape(ct_x[i], (*y.shape, *jaxpr.invars[i].type.shape)) for i in args]
        dtype = _short(_result_dtype(out_types))
        basis = _eye_parts(N, dtype, [tuple(t.shape) for t in out_types], 1)
        basis = [_basis_like(p, t) for p, t in zip(basis, out_types)]
        ct_x = dict(zip(order, emit_vmapped(cts, list(xs) + basis, in_axes, 0, N, consts, style)))
        per_arg = {}
        for i in args:
            t = jaxpr.invars[i].type
            parts = _split(ct_x[i], [tuple(o.shape) for o in out_types], 0, t.shape)
            per_arg[i] = [ops.convert_element_type(p, t.dtype) for p in parts]
        return [per_arg[i][j] for j in range(n_out) for i in args]

    return _wrap(jaxpr, body)


@gc_paused()
def hessian(jaxpr: Jaxpr, argnums=0, style=None) -> Jaxpr:
    """`jax.hessian(f, argnums)` = jacfwd(jacrev(f, argnums), argnums), flattened."""
    return jacfwd(jacrev(jaxpr, argnums, style), argnums, style)


_ = (Sequence, Var)
