"""shard_map, xla_pmap, the collectives and the sharding annotations: shape rules, JVP,
linearization and transpose rules, and how the back end runs them through JAX.

Differentiation follows JAX (`jax/_src/shard_map.py`, `jax/_src/lax/parallel.py`, and for
`xla_pmap` the `map_transpose` of JAX before 0.7):

- `shard_map`: the body is differentiated by the same machinery; tangents get the specs of
  their primals; linearize splits the body into a primal shard_map that also returns the
  residuals and a linear one that takes them.  A residual that is a body input or output is
  taken from the operand or result (with its spec); the others get JAX's `nospec`: sharded
  along dimension 0 over every manual axis (`check_vma=False`) or over the axes it varies
  along (`check_vma=True`), scalars promoted to shape (1,).  Transposition transposes the
  body; with `check_vma=False` the cotangents of outputs are divided by the size of the axes
  their out_spec does not mention and the cotangents of inputs are `psum`med over the axes
  their in_spec does not mention (with `check_vma=True` `pvary`/`psum_invariant` do that
  inside the body).
- `psum` transposes to `psum` (JAX treats it as psum + pbroadcast), `psum_invariant` to
  `pvary` and back, `all_gather` to `reduce_scatter` (psum_scatter) and back, `ppermute`
  with the inverse permutation, `all_to_all` with split and concat axes swapped,
  `all_gather_invariant` to a dynamic slice at the axis index, `pbroadcast` to a psum kept
  at the source; `axis_index` has no derivative; `sharding_constraint` transposes to itself,
  `reshard` back to its operand's type.  `pmax`/`pmin` have no rule (as in JAX).
- `xla_pmap`: tangents and residuals mapped along the primals' axes (residuals along 0);
  the transpose maps cotangents along the outputs' axes and sums the cotangents of unmapped
  (in_axes=None) inputs over the mapped axis.

Running (`evaluate` records): a shard_map becomes `jax.shard_map` over a concrete
`jax.sharding.Mesh` (`backend/sharding.py` builds it from the printed mesh or `--mesh`), its
body interpreted inside; inside a `check_vma=True` body, operands of ordinary primitives are
`pvary`ed to a common set of varying axes as JAX's lax functions do; an `xla_pmap` becomes a
shard_map over a one-axis mesh; `sharding_constraint` is `jax.lax.with_sharding_constraint`,
`reshard` is `jax.sharding.reshard` under an explicit mesh.
"""

from __future__ import annotations

from ..ad import builder as B
from ..ad import ops
from ..ad.builder import current
from ..ad.ops import instantiate
from ..ad.registry import (
    defidentity,
    defjvp_zero,
    primitive_jvps,
    primitive_transposes,
    rebind_primal,
    rule_kind,
)
from ..ad.zeros import Zero, is_undefined_primal, is_zero, tangent_type, writes_tangent_ref
from ..core import Eqn, Jaxpr, JaxprError, Literal, OpaqueType, ShapedArray, Var
from ..lazy import lazy_module
from ..record import define
from ..shapes import ShapeError, shape_rule
from ..shapes.util import (
    canon_axis,
    dim_floordiv,
    dim_mul,
    input_elements,
    int_param,
    is_int_dtype,
    one_arr,
    varying_axes,
    vma_format,
    vma_parts,
)
from ..shardings import MeshText, SpecText, make_spec, names_to_spec, read_mesh, read_spec

#: the vmap machinery, executed when a batching rule first runs
BT = lazy_module("jaxprtool.ad.batching")

# ================================================================ shape rules

_NOT_BOUND = (
    "is no primitive of JAX 0.10 to 0.12 (jax.lax.pshuffle binds ppermute, jax.lax.pcast "
    "pvary or one of the unreduced/reduced casts), so the tool has no rule for it"
)


def _no_flops(e) -> int:
    return 0  # data movement


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


# ---------------------------------------------------------------- pvary, and the type-keeping ones
# (pbroadcast, ppermute, the vma casts, psum2, all_reduce)


@shape_rule("pvary")
def _pvary(in_types, params, out_hint):
    axes = _axes_param(params)
    return [_with_vma(t, lambda v: v + [a for a in axes if a not in v]) for t in in_types]


@shape_rule(
    "pbroadcast",
    "ppermute",
    "unreduced_psum",
    "unreduced_pmax",
    "unreduced_pmin",
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


for _n in ("pvary", "pbroadcast"):
    defidentity(_n)


# ---------------------------------------------------------------- psum, pmax, pmin, pmean


@shape_rule("psum", "pmax", "pmin", "pmean", "psum_invariant")
def _psum(in_types, params, out_hint):
    """Named axes leave the varying set; positional (int) axes, as vmap writes them for its
    batch axis, are reduced away as JAX's `_allreduce_effectful_abstract_eval` does."""
    axes = _axes_param(params)
    positional = [int(a) for a in _raw_axes(params) if isinstance(a, int)]
    out = []
    for t in in_types:
        t = _with_vma(t, lambda v: [a for a in v if a not in axes])
        if positional and isinstance(t, ShapedArray):
            pos = {canon_axis(a, t.ndim, "axes") for a in positional}
            t = t.update(shape=[d for i, d in enumerate(t.shape) if i not in pos])
        out.append(t)
    return out


def _raw_axes(params) -> tuple:
    """The `axes` / `axis_name` parameter as a tuple, names and positions as printed."""
    v = params.get("axes", params.get("axis_name", ()))
    return tuple(v) if isinstance(v, (tuple, list, frozenset)) else (v,)


define("psum", flops=_no_flops)


# ---------------------------------------------------------------- data movement between devices


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


for _n in ("ppermute", "all_gather", "all_to_all"):
    define(_n, flops=_no_flops)


# ---------------------------------------------------------------- axis_index


@shape_rule("axis_index")
def _axis_index(in_types, params, out_hint):
    return [ShapedArray((), "i32")]


defjvp_zero("axis_index")


# ---------------------------------------------------------------- names `run` refuses
# (no JAX from 0.10 to 0.12 binds them: jax.lax.pshuffle binds ppermute, jax.lax.pcast one
# of the casts; no shape rule: the tool cannot check or differentiate them either)

for _n in ("pshuffle", "pcast"):
    define(_n, family="collectives", refusal=_NOT_BOUND)


# ================================================================ running and differentiating

LOW_LEVEL = "jvp+linearization"

# ---------------------------------------------------------------- reading the parameters


def mesh_of(params) -> MeshText:
    return read_mesh(params.get("mesh", ""))


def check_vma(params) -> bool:
    v = params.get("check_vma", params.get("check_rep", True))
    return bool(v) if isinstance(v, bool) else str(v) == "True"


def manual_axes(params, mesh: MeshText) -> tuple[str, ...]:
    """The axes the body is manual over, in mesh order."""
    v = params.get("newly_manual_axes", params.get("manual_axes"))
    if isinstance(v, (frozenset, set, tuple, list)):
        names = {str(a) for a in v}
        return tuple(n for n in mesh.names if n in names) or tuple(sorted(names))
    auto = params.get("auto")
    auto_names = set()
    if auto is not None:
        import re

        auto_names = set(re.findall(r"'([^']*)'", str(auto)))
    return tuple(n for n in mesh.names if n not in auto_names)


def specs_of(params, side: str, vars_) -> list[SpecText]:
    """in_specs / out_specs (or an older text's in_names / out_names) as SpecTexts."""
    vals = params.get(f"{side}_specs")
    if vals is None:
        vals = params.get(f"{side}_names")
    if not isinstance(vals, (tuple, list)):
        raise ShapeError(f"shard_map: missing {side}_specs")
    if len(vals) != len(vars_):
        raise ShapeError(
            f"shard_map: {len(vals)} {side}_specs for {len(vars_)} {side}puts of its body"
        )
    out = []
    for v, x in zip(vals, vars_):
        ndim = len(x.type.shape) if isinstance(x.type, ShapedArray) else None
        s = read_spec(v) or names_to_spec(v, ndim)
        if s is None:
            raise ShapeError(f"shard_map: cannot read the spec {v}")
        out.append(s)
    return out


def _spec_params(params, side: str, vars_) -> list:
    vals = params.get(f"{side}_specs")
    specs = specs_of(params, side, vars_)
    if isinstance(vals, (tuple, list)) and all(read_spec(v) is not None for v in vals):
        return list(vals)
    return [s.as_param() for s in specs]


def _with_specs(params, body: Jaxpr, in_specs, out_specs) -> dict:
    p = {k: v for k, v in params.items() if k not in ("in_names", "out_names")}
    p["jaxpr"] = body
    p["in_specs"] = tuple(in_specs)
    p["out_specs"] = tuple(out_specs)
    return p


def outer_type(t, spec: SpecText, mesh: MeshText):
    """The global type of a body value of type `t` leaving through `spec`."""
    if not isinstance(t, ShapedArray):
        return t
    sizes = mesh.shape
    shape = list(t.shape)
    for d in range(min(len(shape), len(spec.entries))):
        f = 1
        for a in spec.dim_axes(d):
            f *= sizes.get(a, 1)
        if f != 1:
            if not isinstance(shape[d], int):
                raise ShapeError(f"shard_map: cannot size dimension {d} of {t}")
            shape[d] *= f
    parts = vma_parts(t.vma)
    parts.pop("V", None)
    return ShapedArray(tuple(shape), t.dtype, t.weak_type, t.memory_space, vma_format(parts))


def _shard_map_shape(in_types, params, out_hint):
    j = params.get("jaxpr")
    if not isinstance(j, Jaxpr):
        raise ShapeError("shard_map: missing jaxpr parameter")
    if len(j.invars) != len(in_types):
        raise ShapeError(
            f"shard_map: its jaxpr takes {len(j.invars)} inputs, but the equation passes "
            f"{len(in_types)}"
        )
    mesh = mesh_of(params)
    try:
        specs = specs_of(params, "out", j.outvars)
    except ShapeError:
        if out_hint is not None and len(out_hint) == len(j.outvars):
            return list(out_hint)
        raise
    if not mesh.complete:
        if out_hint is not None and len(out_hint) == len(j.outvars):
            return list(out_hint)
        raise ShapeError(f"shard_map: the mesh {params.get('mesh')} does not give axis sizes")
    return [outer_type(v.type, s, mesh) for v, s in zip(j.outvars, specs)]


def _all_gather_shape(in_types, params, out_hint):
    from ..record import prim

    return prim("all_gather").shape_rule(in_types, params, out_hint)


def _reduce_scatter_shape(in_types, params, out_hint):
    from ..record import prim

    return prim("reduce_scatter").shape_rule(in_types, params, out_hint)


# ---------------------------------------------------------------- running (backend)


def _is_array(x) -> bool:
    return hasattr(x, "shape") and hasattr(x, "dtype") and not hasattr(x, "value")


def _match_vma(invals):
    """pvary the operands of an ordinary primitive to their common varying axes (JAX's
    `core.standard_insert_pvary`, done by its lax functions but not by `bind`)."""
    from jax._src import core as jcore

    vmas = []
    for x in invals:
        try:
            vmas.append(jcore.typeof(x).mat.varying if _is_array(x) else None)
        except Exception:  # noqa: BLE001 - not a JAX value (a ref box)
            vmas.append(None)
    known = [v for v in vmas if v is not None]
    if len(known) < 2:
        return invals
    union = frozenset().union(*known)
    if all(v == union for v in known):
        return invals
    return [
        x if v is None or v == union else jcore.pvary(x, tuple(sorted(union - v)))
        for x, v in zip(invals, vmas)
    ]


#: primitives whose operands keep their own varying axes (collectives, casts)
_OWN_VMA = frozenset(
    {
        "pvary",
        "psum",
        "psum_invariant",
        "pmax",
        "pmin",
        "ppermute",
        "all_gather",
        "all_gather_invariant",
        "all_to_all",
        "reduce_scatter",
        "psum_scatter",
        "pbroadcast",
        "axis_index",
        "shard_map",
    }
)

_MANUAL_CLS = None


def _manual_interpreter(interp, check: bool):
    """A copy of the interpreter for a manual (shard_map) body: jit mode; with `check`,
    operands of ordinary primitives get their varying axes matched."""
    global _MANUAL_CLS  # (why a value cannot carry it: a class made once per process)
    from ..backend.evaluator import Interpreter
    from ..core import eqn_subjaxprs

    if _MANUAL_CLS is None:

        class ManualInterpreter(Interpreter):
            check_vma = False

            def eqn(self, eqn, invals, path):
                if (
                    self.check_vma
                    and len(invals) > 1
                    and eqn.prim not in _OWN_VMA
                    and not any(True for _ in eqn_subjaxprs(eqn))
                ):
                    invals = _match_vma(invals)
                return super().eqn(eqn, invals, path)

        _MANUAL_CLS = ManualInterpreter
    new = _MANUAL_CLS.__new__(_MANUAL_CLS)
    new.__dict__.update(interp.__dict__)
    new.mode = "jit"
    new.check_vma = check
    return new


def _eval_shard_map(interp, eqn, invals, path):
    """The body under `jax.shard_map`; the Refs among the operands travel through it as
    extra operands and results with their in_specs (JAX's state discharge of shard_map)."""
    import jax

    from ..backend import sharding as S
    from ..backend.evaluator import ThreadedRefs

    p = eqn.params
    body = interp.body(p.get("jaxpr"), eqn)
    mesh_text = S.resolve(mesh_of(p), eqn)
    mesh = S.concrete_mesh(mesh_text, eqn)
    try:
        in_specs = specs_of(p, "in", body.invars)
        out_specs = specs_of(p, "out", body.outvars)
    except ShapeError as e:
        raise JaxprError(str(e), eqn.loc) from None
    in_p = tuple(S.partition_spec(s.to_text(), eqn) for s in in_specs)
    out_p = tuple(S.partition_spec(s.to_text(), eqn) for s in out_specs)
    check = check_vma(p)
    manual = manual_axes(p, mesh_text)
    inner = _manual_interpreter(interp, check)
    label = path + ("shard_map",) if interp.mode == "eager" else path

    refs = ThreadedRefs(invals)  # Refs the body uses: their values go in and come out
    val_p = tuple(s for k, s in enumerate(in_p) if k not in refs.at)
    first = {i: k for k, i in sorted(refs.at.items(), reverse=True)}  # a Ref's first operand
    ref_p = tuple(in_p[first[i]] for i in range(len(refs.boxes)))

    def f(*xs):
        return tuple(inner.run(body, [], list(xs), label))

    axis_names = frozenset(manual) if set(manual) != set(mesh_text.names) else frozenset()
    fn = jax.shard_map(
        refs.threaded(f, invals),
        mesh=mesh,
        in_specs=val_p + ref_p,
        out_specs=out_p + ref_p,
        axis_names=axis_names,
        check_vma=check,
    )
    if interp.mode == "eager":
        fn = jax.jit(fn)
    try:
        return refs.results(fn(*refs.arguments(invals)))
    except JaxprError:
        raise
    except Exception as e:  # noqa: BLE001 - JAX's complaint, located at the equation
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise JaxprError(f"'shard_map' failed in JAX: {type(e).__name__}: {msg}", eqn.loc) from e


def pmap_axes(params, key: str, n: int) -> list[int | None]:
    v = params.get(key)
    if v is None:
        return [0] * n
    vals = list(v) if isinstance(v, (tuple, list)) else [v] * n
    return [None if a is None else int(a) for a in vals]


def _eval_xla_pmap(interp, eqn, invals, path):
    import jax
    import jax.numpy as jnp
    from jax.sharding import PartitionSpec as P

    from ..backend import sharding as S

    p = eqn.params
    body = interp.body(p.get("call_jaxpr"), eqn)
    name, size = str(p["axis_name"]), int(p["axis_size"])
    mesh = S.concrete_mesh(MeshText((name,), (size,), ("Auto",)), eqn)
    in_axes = pmap_axes(p, "in_axes", len(invals))
    out_axes = pmap_axes(p, "out_axes", len(body.outvars))
    inner = _manual_interpreter(interp, False)

    def spec(a):
        return P() if a is None else P(*([None] * a), name)

    def f(*xs):
        xs = [x if a is None else jnp.squeeze(x, a) for x, a in zip(xs, in_axes)]
        outs = inner.run(body, [], xs, path)
        return tuple(o if a is None else jnp.expand_dims(o, a) for o, a in zip(outs, out_axes))

    fn = jax.shard_map(
        f,
        mesh=mesh,
        in_specs=tuple(spec(a) for a in in_axes),
        out_specs=tuple(spec(a) for a in out_axes),
        check_vma=False,
    )
    if interp.mode == "eager":
        fn = jax.jit(fn)
    try:
        return list(fn(*invals))
    except JaxprError:
        raise
    except Exception as e:  # noqa: BLE001
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise JaxprError(f"'xla_pmap' failed in JAX: {type(e).__name__}: {msg}", eqn.loc) from e


def _eval_sharding_constraint(interp, eqn, invals, path):
    import jax

    from ..backend import sharding as S
    from ..shardings import read_sharding

    s = read_sharding(eqn.params.get("sharding"))
    if s is None or not s.mesh.complete or not S.is_multi_device_run():
        return list(invals)
    if getattr(jax.sharding.get_abstract_mesh(), "_any_axis_manual", False):
        return list(invals)  # inside a manual region: JAX would not constrain either
    sh = S.named_sharding(eqn.params["sharding"], eqn)
    return [jax.lax.with_sharding_constraint(x, sh) for x in invals]


def _eval_reshard(interp, eqn, invals, path):
    import jax

    from ..backend import sharding as S
    from ..shardings import read_sharding, type_spec

    cur = jax.sharding.get_abstract_mesh()
    if cur.empty or not S.is_multi_device_run():
        return list(invals)
    outs = []
    for x, o in zip(invals, eqn.outputs):
        dst = read_sharding(eqn.params.get("dst_sharding"))
        spec = dst.spec if dst is not None else type_spec(o.type)
        target = (
            S.partition_spec(spec.to_text()) if spec is not None else jax.sharding.PartitionSpec()
        )
        outs.append(jax.sharding.reshard(x, target))
    return outs


def _eval_each(interp, eqn, invals, path):
    """psum/pmax/pmin of several operands (older texts): one bind per operand."""
    from ..backend import prims

    jp = prims.lookup(eqn.prim)
    params = prims.bind_params(eqn, interp.dims)
    try:
        return [jp.bind(x, **params) for x in invals]
    except Exception as e:  # noqa: BLE001
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise JaxprError(f"'{eqn.prim}' failed in JAX: {type(e).__name__}: {msg}", eqn.loc) from e


def _axes_tuple(v):
    if isinstance(v, (tuple, list, frozenset)):
        return tuple(str(a) if not isinstance(a, int) else a for a in v)
    return (str(v),)


def _bind_axes_only(eqn, p, dims):
    """psum_invariant / pvary take `axes` only in this JAX (older texts add axis_index_groups)."""
    groups = p.pop("axis_index_groups", None)
    if groups is not None:
        raise JaxprError(
            f"cannot run '{eqn.prim}': axis_index_groups={groups} (the installed JAX's "
            f"{eqn.prim} has no axis groups)",
            eqn.loc,
        )
    return {"axes": _axes_tuple(p.get("axes", ()))}


def _bind_reduction(eqn, p, dims):
    return {"axes": _axes_tuple(p.get("axes", ())), "axis_index_groups": p.get("axis_index_groups")}


def _bind_perm(eqn, p, dims):
    return {
        "axis_name": _axes_tuple(p.get("axis_name", ())),
        "perm": tuple((int(a), int(b)) for a, b in p.get("perm", ())),
    }


# ---------------------------------------------------------------- AD: collectives


def _linear_each(name, transpose_one):
    """Linear in each operand separately (psum of several operands binds once per operand in
    this JAX): JVP binds on the tangents, `transpose_one(ct, arg, **params) -> ct_in`."""

    def jvp(primals, tangents, /, **params):
        outs = rebind_primal(name, primals, params)
        if all(is_zero(t) for t in tangents):
            return outs, [Zero(tangent_type(o.type)) for o in outs]
        ts = [instantiate(t) for t in tangents]
        touts = current().bind(name, ts, params, [tangent_type(o.type) for o in outs])
        return outs, touts

    def transpose(cts, /, *args, **params):
        res = []
        for ct, a in zip(cts, args):
            if not is_undefined_primal(a):
                res.append(None)
            elif is_zero(ct):
                res.append(Zero(tangent_type(a.type)))
            else:
                res.append(transpose_one(ct, a, **params))
        return res

    primitive_jvps[name] = jvp
    primitive_transposes[name] = transpose
    rule_kind[name] = "deflinear2"


def _emit(name, x, params, out_type):
    return current().bind(name, [x], params, [out_type])[0]


def _named(axes):
    return tuple(a for a in _axes_tuple(axes) if not isinstance(a, int))


def _psum_t(ct, x, *, axes, axis_index_groups=None, **_):
    """JAX's `_psum_transpose_rule`: positional axes broadcast back (reduce_sum's
    transpose); the named ones psum again (psum is psum + pbroadcast)."""
    t = tangent_type(x.type)
    positional = {
        canon_axis(int(a), t.ndim, "axes") for a in _raw_axes({"axes": axes}) if isinstance(a, int)
    }
    if positional:
        kept = [i for i in range(t.ndim) if i not in positional]
        ct = ops.broadcast_in_dim(ct, t.shape, kept)
    named = _named(axes)
    if not named:
        return ct
    return _emit("psum", ct, {"axes": named, "axis_index_groups": axis_index_groups}, t)


def _psum_invariant_t(ct, x, *, axes, **_):
    return _emit("pvary", ct, {"axes": _axes_tuple(axes)}, tangent_type(x.type))


def _pvary_t(ct, x, *, axes, **_):
    return _emit("psum_invariant", ct, {"axes": _axes_tuple(axes)}, tangent_type(x.type))


def _ppermute_t(ct, x, *, axis_name, perm, **_):
    inverse = tuple((int(d), int(s)) for s, d in perm)
    return _emit("ppermute", ct, {"axis_name": axis_name, "perm": inverse}, tangent_type(x.type))


def _all_gather_t(ct, x, *, all_gather_dimension, axis_name, axis_size, tiled, **p):
    params = {
        "axis_index_groups": p.get("axis_index_groups"),
        "axis_name": axis_name,
        "axis_size": axis_size,
        "scatter_dimension": all_gather_dimension,
        "tiled": tiled,
    }
    return _emit("reduce_scatter", ct, params, tangent_type(x.type))


def _reduce_scatter_t(ct, x, *, scatter_dimension, axis_name, axis_size, tiled, **p):
    params = {
        "all_gather_dimension": scatter_dimension,
        "axis_index_groups": p.get("axis_index_groups"),
        "axis_name": axis_name,
        "axis_size": axis_size,
        "tiled": tiled,
    }
    return _emit("all_gather", ct, params, tangent_type(x.type))


def _all_to_all_t(ct, x, *, split_axis, concat_axis, **p):
    params = dict(p, split_axis=concat_axis, concat_axis=split_axis)
    return _emit("all_to_all", ct, params, tangent_type(x.type))


def _axis_index(axis_name):
    return current().bind("axis_index", [], {"axis_name": axis_name}, [ShapedArray((), "i32")])[0]


def _all_gather_invariant_t(ct, x, *, all_gather_dimension, axis_name, axis_size, tiled, **_):
    dim = int(all_gather_dimension)
    n = int(axis_size)
    shape = list(ct.type.shape)
    size = shape[dim] // n
    idx = ops.mul(_axis_index(axis_name), ops.lit(size, "i32"))
    starts = [ops.lit(0, "i32")] * len(shape)
    starts[dim] = idx
    sizes = list(shape)
    sizes[dim] = size
    out_t = ct.type.update(shape=tuple(sizes))
    out = current().bind("dynamic_slice", [ct, *starts], {"slice_sizes": tuple(sizes)}, [out_t])[0]
    if not tiled:
        sq = tuple(s for i, s in enumerate(sizes) if i != dim)
        out = current().bind("squeeze", [out], {"dimensions": (dim,)}, [out_t.update(shape=sq)])[0]
    return out


def _pbroadcast_t(ct, x, *, axis_name, source, **_):
    total = _emit("psum", ct, {"axes": _axes_tuple(axis_name), "axis_index_groups": None}, ct.type)
    here = ops.eq(_axis_index(axis_name), ops.lit(int(source), "i32"))
    zeros = ops.zeros(ct.type)
    if ct.type.shape:
        here = ops.broadcast_in_dim(here, ct.type.shape, ())
    return ops.select_n(here, zeros, total)


def _sharding_constraint_t(ct, x, **params):
    return _emit("sharding_constraint", ct, params, tangent_type(x.type))


def _reshard_t(ct, x, **params):
    return _emit("reshard", ct, params, tangent_type(x.type))


# ---------------------------------------------------------------- AD: shard_map


def _sel(xs, mask):
    return [x for x, m in zip(xs, mask) if m]


def _scatter(mask, vals, types):
    it = iter(vals)
    return [next(it) if m else Zero(tangent_type(t)) for m, t in zip(mask, types)]


def _residual_spec(t, mesh: MeshText, manual, check: bool, like: SpecText | None) -> SpecText:
    """JAX's `aval.nospec`: dimension 0 sharded over every manual axis (check_vma=False) or
    over the axes the value varies along (check_vma=True)."""
    if check:
        varying = set(varying_axes(t))
        names = tuple(n for n in mesh.names if n in varying)
    else:
        names = tuple(manual)
    return make_spec([names] if names else [], like)


def _promote(jaxpr: Jaxpr, which_out: list[int]) -> Jaxpr:
    """Scalar residual outputs (positions `which_out`) broadcast to shape (1,)."""
    if not which_out:
        return jaxpr
    outs = list(jaxpr.outvars)
    eqns = list(jaxpr.eqns)
    for k in which_out:
        r = outs[k]
        t = r.type
        new = Var(ShapedArray((1,), t.dtype, False, t.memory_space, t.vma), None)
        eqns.append(ops.broadcast_eqn(r, new))
        outs[k] = new
    return jaxpr.replace(eqns=eqns, outvars=outs)


def _demote(jaxpr: Jaxpr, which_in: list[int]) -> Jaxpr:
    """Inputs at `which_in` arrive promoted to shape (1,): squeeze them back."""
    if not which_in:
        return jaxpr
    invars = list(jaxpr.invars)
    pre = []
    for k in which_in:
        v = invars[k]
        t = v.type
        new = Var(ShapedArray((1,), t.dtype, False, t.memory_space, t.vma), v.hint)
        pre.append(Eqn("squeeze", (new,), (v,), {"dimensions": (0,)}, None))
        invars[k] = new
    return jaxpr.replace(invars=invars, eqns=pre + list(jaxpr.eqns))


def _outer_types(body_vars, specs, mesh):
    return [outer_type(v.type, s, mesh) for v, s in zip(body_vars, specs)]


def _shard_map_jvp(primals, tangents, **params):
    from ..ad.jvp import jvp_masked
    from ..ad.linearize import linearize_masked

    b = current()
    body: Jaxpr = params["jaxpr"]
    mesh = mesh_of(params)
    in_specs = specs_of(params, "in", body.invars)
    out_specs = specs_of(params, "out", body.outvars)
    in_p = _spec_params(params, "in", body.invars)
    out_p = _spec_params(params, "out", body.outvars)
    nz = [not is_zero(t) for t in tangents]
    nz_t = [t for t in tangents if not is_zero(t)]
    n = len(body.outvars)
    out_types = _outer_types(body.outvars, out_specs, mesh)
    if not b.split:
        jj, out_nz = jvp_masked(body, nz, instantiate=False)
        p = _with_specs(params, jj, in_p + _sel(in_p, nz), out_p + _sel(out_p, out_nz))
        types = out_types + [tangent_type(t) for t in _sel(out_types, out_nz)]
        outs = b.bind("shard_map", list(primals) + nz_t, p, types)
        return outs[:n], _scatter(out_nz, outs[n:], out_types)
    pj, lj, out_nz, _ = linearize_masked(body, nz, instantiate=False)
    check = check_vma(params)
    manual = manual_axes(params, mesh)
    like = in_specs[0] if in_specs else (out_specs[0] if out_specs else None)
    in_pos = {id(v): i for i, v in enumerate(pj.invars)}
    out_pos = {}
    for j, v in enumerate(pj.outvars[:n]):
        if isinstance(v, Var):
            out_pos.setdefault(id(v), j)
    plan, kept, kept_specs, promote_out, promote_in = [], [], [], [], []
    for k, r in enumerate(pj.outvars[n:]):
        if isinstance(r, Var) and id(r) in in_pos:
            plan.append(("in", in_pos[id(r)]))
        elif isinstance(r, Var) and id(r) in out_pos:
            plan.append(("out", out_pos[id(r)]))
        else:
            if isinstance(r.type, ShapedArray) and r.type.shape == ():
                promote_out.append(n + len(kept))
                promote_in.append(k)
            plan.append(("new", len(kept)))
            kept.append(r)
            kept_specs.append(_residual_spec(r.type, mesh, manual, check, like))
    pj = pj.replace(outvars=list(pj.outvars[:n]) + kept)
    pj = _promote(pj, promote_out)
    lj = _demote(lj, promote_in)
    kept_p = [s.as_param() for s in kept_specs]
    prim_types = out_types + _outer_types(pj.outvars[n:], kept_specs, mesh)
    outs = b.bind(
        "shard_map", list(primals), _with_specs(params, pj, in_p, out_p + kept_p), prim_types
    )
    if not any(out_nz) and not writes_tangent_ref(body.invars, nz):
        return outs[:n], [Zero(tangent_type(t)) for t in out_types]
    res_atoms, res_p = [], []
    for kind, i in plan:
        if kind == "in":
            res_atoms.append(primals[i])
            res_p.append(in_p[i])
        elif kind == "out":
            res_atoms.append(outs[i])
            res_p.append(out_p[i])
        else:
            res_atoms.append(outs[n + i])
            res_p.append(kept_p[i])
    lp = _with_specs(params, lj, res_p + _sel(in_p, nz), _sel(out_p, out_nz))
    ttypes = [tangent_type(t) for t in _sel(out_types, out_nz)]
    touts = b.bind("shard_map", res_atoms + nz_t, lp, ttypes)
    return outs[:n], _scatter(out_nz, touts, out_types)


def _unmentioned(spec: SpecText, manual) -> tuple[str, ...]:
    used = spec.axes()
    return tuple(a for a in manual if a not in used)


def _grad_ref_refusal(in_specs, refs, check: bool, manual) -> None:
    """JAX's `_check_grad_refs`: without check_vma, a cotangent Ref whose in_spec leaves a
    manual axis out would need a psum of what the body writes into it."""
    if check:
        return
    for spec, r in zip(in_specs, refs):
        if r and _unmentioned(spec, manual):
            raise JaxprError(
                "Differentiating a shard_map with check_vma=False into a gradient Ref for an "
                "argument whose in_specs don't mention all manual mesh axes (JAX refuses it "
                "too): shard the Ref over every manual axis, or use check_vma=True",
                current().loc,
            )


def _shard_map_transpose(cts, *args, **params):
    """JAX's `_shard_map_transpose_fancy`: the transposed body takes the non-linear operands
    and a differentiated Ref's cotangent Ref (written into there, with the Ref's in_spec) in
    operand order, then the nonzero cotangents; it returns the other linear operands'
    cotangents (psummed over the manual axes their in_specs leave out, without check_vma)."""
    from ..ad.transpose import backward_pass, transposed_inputs

    body: Jaxpr = params["jaxpr"]
    mesh = mesh_of(params)
    check = check_vma(params)
    manual = manual_axes(params, mesh)
    in_specs = specs_of(params, "in", body.invars)
    out_specs = specs_of(params, "out", body.outvars)
    in_p = _spec_params(params, "in", body.invars)
    out_p = _spec_params(params, "out", body.outvars)
    lin = [is_undefined_primal(a) for a in args]
    refs = [m and a.ct_ref is not None for a, m in zip(args, lin)]
    nzc = [not is_zero(c) for c in cts]
    _grad_ref_refusal(in_specs, refs, check, manual)

    def zeros():
        return [
            Zero(tangent_type(a.type)) if m and not r else None for a, m, r in zip(args, lin, refs)
        ]

    if not any(nzc) and not any(refs):
        return zeros()
    sizes = mesh.shape
    ct_atoms = []
    for c, s, m in zip(cts, out_specs, nzc):
        if not m:
            continue
        if not check and c.type.dtype != "float0":
            f = 1
            for a in _unmentioned(s, manual):
                f *= sizes.get(a, 1)
            if f != 1:
                c = ops.div(c, ops.lit(f, c))
        ct_atoms.append(c)
    tb = B.Builder(loc=current().loc)
    res_in, bargs = transposed_inputs(body.invars, lin, refs)
    ct_in = [Var(tangent_type(v.type), None) for v, m in zip(body.outvars, nzc) if m]
    it_c = iter(ct_in)
    bcts = [next(it_c) if m else Zero(tangent_type(v.type)) for v, m in zip(body.outvars, nzc)]
    outs, new_out_p, which = [], [], []
    with B.use(tb):
        _, cts_in = backward_pass(body, lin, bargs, bcts)
        for i, (m, c) in enumerate(zip(lin, cts_in)):
            if not m or c is None or is_zero(c):
                continue
            if not check and c.type.dtype != "float0":
                un = _unmentioned(in_specs[i], manual)
                if un:
                    c = tb.bind("psum", [c], {"axes": un, "axis_index_groups": None}, [c.type])[0]
            if isinstance(c, Literal):
                c = instantiate_literal(c, body.invars[i].type)
            outs.append(c)
            new_out_p.append(in_p[i])
            which.append(i)
    if not outs and not any(refs):
        return zeros()
    eqns = B.dce_eqns(tb.eqns, outs)
    tj = B.make_jaxpr(res_in + ct_in, eqns, outs)
    kept = [not m or r for m, r in zip(lin, refs)]  # operands: non-linear ones, cotangent Refs
    p = _with_specs(params, tj, _sel(in_p, kept) + _sel(out_p, nzc), new_out_p)
    types = [tangent_type(args[i].type) for i in which]
    nl = [a.ct_ref if r else a for a, k, r in zip(args, kept, refs) if k]
    res = iter(current().bind("shard_map", nl + ct_atoms, p, types))
    got = {i: next(res) for i in which}
    return [
        (got[i] if i in got else Zero(tangent_type(a.type))) if m and not r else None
        for i, (a, m, r) in enumerate(zip(args, lin, refs))
    ]


def instantiate_literal(lit: Literal, t):
    """A literal cotangent (a scalar zero, say) as a value of the input's type."""
    if isinstance(t, ShapedArray) and t.shape:
        return ops.broadcast_to_type(lit, t)
    return lit


# ---------------------------------------------------------------- AD: xla_pmap


def _pmap_params(params, body, in_axes, out_axes, n_in):
    p = dict(params)
    p["call_jaxpr"] = body
    p["in_axes"] = tuple(in_axes)
    p["out_axes"] = tuple(out_axes)
    if "donated_invars" in p:
        p["donated_invars"] = (False,) * n_in
    return p


def _xla_pmap_jvp(primals, tangents, **params):
    from ..ad.jvp import jvp_masked
    from ..ad.linearize import linearize_masked

    b = current()
    body: Jaxpr = params["call_jaxpr"]
    n = len(body.outvars)
    in_axes = pmap_axes(params, "in_axes", len(primals))
    out_axes = pmap_axes(params, "out_axes", n)
    nz = [not is_zero(t) for t in tangents]
    nz_t = [t for t in tangents if not is_zero(t)]
    if writes_tangent_ref(body.invars, nz):
        raise JaxprError(
            "a differentiated Ref passed into xla_pmap's body: JAX's pmap takes no Refs (it "
            "refuses to trace such a function), so neither has a rule for one; use shard_map",
            b.loc,
        )
    if not b.split:
        jj, out_nz = jvp_masked(body, nz, instantiate=False)
        ins = list(primals) + nz_t
        p = _pmap_params(
            params, jj, in_axes + _sel(in_axes, nz), out_axes + _sel(out_axes, out_nz), len(ins)
        )
        outs = b.bind("xla_pmap", ins, p)
        types = [o.type for o in outs[:n]]
        return outs[:n], _scatter(out_nz, outs[n:], types)
    pj, lj, out_nz, nres = linearize_masked(body, nz, instantiate=False)
    p = _pmap_params(params, pj, in_axes, out_axes + [0] * nres, len(primals))
    outs = b.bind("xla_pmap", list(primals), p)
    types = [o.type for o in outs[:n]]
    if not any(out_nz):
        return outs[:n], [Zero(tangent_type(t)) for t in types]
    ins = list(outs[n:]) + nz_t
    lp = _pmap_params(params, lj, [0] * nres + _sel(in_axes, nz), _sel(out_axes, out_nz), len(ins))
    touts = b.bind("xla_pmap", ins, lp)
    return outs[:n], _scatter(out_nz, touts, types)


def _xla_pmap_transpose(cts, *args, **params):
    from ..ad.transpose import backward_pass

    body: Jaxpr = params["call_jaxpr"]
    in_axes = pmap_axes(params, "in_axes", len(args))
    out_axes = pmap_axes(params, "out_axes", len(body.outvars))
    lin = [is_undefined_primal(a) for a in args]
    nzc = [not is_zero(c) for c in cts]

    def zeros():
        return [Zero(tangent_type(a.type)) if m else None for a, m in zip(args, lin)]

    if not any(nzc):
        return zeros()
    if any(a is None for a, m in zip(out_axes, nzc) if m):
        raise JaxprError(
            "autodiff of pmap functions with out_axes=None is not supported. "
            "Consider using shard_map instead.",
            current().loc,
        )
    tb = B.Builder(loc=current().loc)
    res_in = [B.fresh_like(v) for v, m in zip(body.invars, lin) if not m]
    ct_in = [Var(tangent_type(v.type), None) for v, m in zip(body.outvars, nzc) if m]
    it_r, it_c = iter(res_in), iter(ct_in)
    bargs = [None if m else next(it_r) for m in lin]
    bcts = [next(it_c) if m else Zero(tangent_type(v.type)) for v, m in zip(body.outvars, nzc)]
    outs, which = [], []
    with B.use(tb):
        _, cts_in = backward_pass(body, lin, bargs, bcts)
        for i, (m, c) in enumerate(zip(lin, cts_in)):
            if not m or c is None or is_zero(c):
                continue
            if isinstance(c, Literal):
                c = instantiate_literal(c, body.invars[i].type)
            outs.append(c)
            which.append(i)
    if not outs:
        return zeros()
    tj = B.make_jaxpr(res_in + ct_in, B.dce_eqns(tb.eqns, outs), outs)
    new_in = _sel(in_axes, [not m for m in lin]) + _sel(out_axes, nzc)
    new_out = [in_axes[i] or 0 for i in which]
    ins = [a for a, m in zip(args, lin) if not m] + [c for c, m in zip(cts, nzc) if m]
    p = _pmap_params(params, tj, new_in, new_out, len(ins))
    p.pop("out_axes_thunk", None)
    res = iter(current().bind("xla_pmap", ins, p))
    got = {}
    for i in which:
        c = next(res)
        if in_axes[i] is None:
            c = ops.reduce_sum(c, (0,))
        got[i] = c
    return [
        (got[i] if i in got else Zero(tangent_type(a.type))) if m else None
        for i, (a, m) in enumerate(zip(args, lin))
    ]


# ---------------------------------------------------------------- batching: shard_map, xla_pmap


def _batch_spec(spec: SpecText, d: int | None) -> SpecText:
    """JAX's `pxla.batch_spec(spec, d, None)`: the spec with an unsharded entry at `d`."""
    if d is None:
        return spec
    entries = list(spec.entries) + [None] * max(0, d - len(spec.entries))
    entries.insert(d, None)
    return SpecText(tuple(entries), spec.cls, spec.extra)


def _shard_map_batching(args, dims, **params):
    """JAX's `_shard_map_batch`: the body is batched with the operands' batch dimensions
    (the batch axis is not sharded: each shard holds every example of its slice), and the
    in/out specs get an unsharded entry at each batch dimension."""
    body: Jaxpr = params["jaxpr"]
    mesh = mesh_of(params)
    new_body, out_dims = BT.batch_jaxpr2(body, dims)
    in_specs = [_batch_spec(s, d) for s, d in zip(specs_of(params, "in", body.invars), dims)]
    out_specs = [_batch_spec(s, d) for s, d in zip(specs_of(params, "out", body.outvars), out_dims)]
    in_p = [
        s.as_param() if d is not None else v
        for s, d, v in zip(in_specs, dims, _spec_params(params, "in", body.invars))
    ]
    out_p = [
        s.as_param() if d is not None else v
        for s, d, v in zip(out_specs, out_dims, _spec_params(params, "out", body.outvars))
    ]
    types = _outer_types(new_body.outvars, out_specs, mesh)
    p = _with_specs(params, new_body, in_p, out_p)
    return B.current().bind("shard_map", list(args), p, types), out_dims


def _both(axis, d) -> bool:
    return axis is not None and d is not None


def _xla_pmap_batching(args, dims, **params):
    """JAX's `BatchTrace.process_map`: a batch dimension before a mapped axis moves that axis
    one further; one after it is one lower inside the body."""
    body: Jaxpr = params["call_jaxpr"]
    in_axes = pmap_axes(params, "in_axes", len(args))
    out_axes = pmap_axes(params, "out_axes", len(body.outvars))
    new_in = [a + 1 if _both(a, d) and d <= a else a for a, d in zip(in_axes, dims)]
    inner = [d - 1 if _both(a, d) and a < d else d for a, d in zip(in_axes, dims)]
    new_body, body_dims = BT.batch_jaxpr2(body, inner)
    new_out = [a + 1 if _both(a, d) and d < a else a for a, d in zip(out_axes, body_dims)]
    outer = [d + 1 if _both(a, d) and a <= d else d for a, d in zip(out_axes, body_dims)]
    p = _pmap_params(params, new_body, new_in, new_out, len(args))
    p.pop("out_axes_thunk", None)
    return B.current().bind("xla_pmap", list(args), p), outer


def _shard_map_body_copies(eqn) -> int:
    """The body runs on every device of the manual axes at once, on that device's shards."""
    mesh = mesh_of(eqn.params)
    if not mesh.complete:  # no sizes in the text: the tool's types cannot be sized either
        return 1
    sizes = mesh.shape
    n = 1
    for a in manual_axes(eqn.params, mesh):
        n *= sizes.get(a, 1)
    return n


def _pmap_body_copies(eqn) -> int:
    """One instance of the body per index of the mapped axis."""
    return int(eqn.params["axis_size"]) if "axis_size" in eqn.params else 1


# ---------------------------------------------------------------- DCE


def _mapped_dce(used_outs, e, dce_jaxpr, live_ins, body_key, in_keys, out_keys, also=()):
    """Unused results and operands leave the body and the per-operand (`in_keys`) and
    per-result (`out_keys`) parameters, each the first of its alternatives the equation has
    (a tuple of the right length: otherwise the signature stays), and the per-operand
    parameters `also` where present; the body's writes into Refs dead after the equation
    go too."""
    from ..passes.dce import Unsupported, filter_param, rebuild

    body = e.params.get(body_key)
    if not isinstance(body, Jaxpr):
        raise Unsupported
    if len(body.invars) != len(e.inputs) or len(body.outvars) != len(e.outputs):
        raise Unsupported
    keys = []
    for names, n in ((in_keys, len(e.inputs)), (out_keys, len(e.outputs))):
        key = next((k for k in names if k in e.params), names[0])
        if not (isinstance(e.params.get(key), (tuple, list)) and len(e.params[key]) == n):
            raise Unsupported
        keys.append(key)
    inst = tuple(isinstance(v.type, OpaqueType) for v in body.invars)
    new_body, used_ins = dce_jaxpr(body, tuple(used_outs), inst, tuple(live_ins))
    if new_body is body and all(used_ins) and all(used_outs):
        return used_ins, e
    params = dict(e.params, **{body_key: new_body})
    params[keys[0]] = filter_param(e.params, keys[0], used_ins)
    params[keys[1]] = filter_param(e.params, keys[1], used_outs)
    for k in also:
        if k in params:
            params[k] = filter_param(params, k, used_ins)
    return used_ins, rebuild(e, used_ins, used_outs, params)


def _shard_map_dce(used_outs, e, dce_jaxpr, live_ins):
    """JAX's `_shard_map_dce`: unused results and operands leave the body and their specs
    (`in_specs`/`out_specs`, an older text's `in_names`/`out_names`), and so do the body's
    writes into Refs dead after the shard_map."""
    keys = (("in_specs", "in_names"), ("out_specs", "out_names"))
    return _mapped_dce(used_outs, e, dce_jaxpr, live_ins, "jaxpr", *keys)


#: xla_pmap's other per-operand parameters (JAX's `_pmap_dce_rule` filters donated_invars;
#: an older text's mapped_invars and global_arg_shapes follow the operands too)
_PMAP_OPERAND_PARAMS = ("donated_invars", "mapped_invars", "global_arg_shapes")


def _xla_pmap_dce(used_outs, e, dce_jaxpr, live_ins):
    """JAX's `_pmap_dce_rule` (JAX <= 0.7 printed pmap as xla_pmap): unused results and
    operands leave the body, `in_axes`/`out_axes` and `donated_invars`.  The body's writes
    into Refs dead after the pmap go too, as JAX 0.12's pmap (a shard_map) drops them."""
    keys = (("in_axes",), ("out_axes",))
    return _mapped_dce(
        used_outs, e, dce_jaxpr, live_ins, "call_jaxpr", *keys, also=_PMAP_OPERAND_PARAMS
    )


# ---------------------------------------------------------------- constants: shard_map


def _shard_map_lift_kept_consts(e, outer):
    """For the AD commands (`passes/hoist_consts.py`: `lift_kept_consts`): the constants a
    shard_map body keeps (a jit's inside it, which JAX prints in the nested jaxpr) as its
    leading operands, replicated (`P()`: each shard sees the whole value, as it sees the
    constant); an older text's `in_names` keeps them nested."""
    body: Jaxpr = e.params["jaxpr"]
    specs = e.params.get("in_specs")
    if not isinstance(specs, tuple) or not body.constvars:
        return e
    first = read_spec(specs[0]) if specs else None
    whole = SpecText((), first.cls if first is not None else "P").as_param()
    params = dict(
        e.params,
        jaxpr=body.replace(constvars=(), invars=(*body.constvars, *body.invars)),
        in_specs=(whole,) * len(body.constvars) + specs,
    )
    return e.replace(inputs=tuple(outer(body.constvars)) + tuple(e.inputs), params=params)


define("shard_map", lift_kept_consts=_shard_map_lift_kept_consts)


# ---------------------------------------------------------------- the records

define("shard_map", shape_rule=_shard_map_shape, family="collectives")
for _n in ("shard_map", "xla_pmap"):
    define(_n, multiple_results=True, family="collectives")
define("shard_map", evaluate=_eval_shard_map, jvp=_shard_map_jvp, jvp_kind=LOW_LEVEL)
define(
    "shard_map",
    transpose=_shard_map_transpose,
    transposes_refs=True,
    batching=_shard_map_batching,
    dce=_shard_map_dce,
)
define("shard_map", body_copies=_shard_map_body_copies)
define("xla_pmap", body_copies=_pmap_body_copies)
define("xla_pmap", evaluate=_eval_xla_pmap, jvp=_xla_pmap_jvp, jvp_kind=LOW_LEVEL)
define("xla_pmap", transpose=_xla_pmap_transpose, batching=_xla_pmap_batching, dce=_xla_pmap_dce)
define("all_gather_invariant", shape_rule=_all_gather_shape, family="collectives")
define("psum_scatter", shape_rule=_reduce_scatter_shape, family="collectives")
define("sharding_constraint", evaluate=_eval_sharding_constraint)
define("reshard", evaluate=_eval_reshard)
# what the evaluators above read; the rest places data and cannot change a value
define(
    "shard_map",
    evaluated_params=frozenset(
        "jaxpr mesh in_specs out_specs in_names out_names check_vma check_rep manual_axes "
        "newly_manual_axes auto rewrite".split()
    ),
)
define(
    "xla_pmap",
    evaluated_params=frozenset(
        "call_jaxpr axis_name axis_size in_axes out_axes global_axis_size devices backend "
        "donated_invars name is_explicit_global_axis_size".split()
    ),
)
define(
    "sharding_constraint",
    evaluated_params=frozenset(
        "sharding layout unconstrained_dims context_mesh resource_env".split()
    ),
)
define("reshard", evaluated_params=frozenset({"dst_sharding"}))
for _n in ("psum", "pmax", "pmin"):
    define(_n, bind_params=_bind_reduction, family="collectives")
for _n in ("psum_invariant", "pvary"):
    define(
        _n,
        bind_params=_bind_axes_only,
        family="collectives",
        evaluated_params=frozenset({"axis_index_groups"}),  # refused unless None
    )
define("ppermute", bind_params=_bind_perm, family="collectives")
for _n in (
    "all_gather",
    "all_gather_invariant",
    "all_to_all",
    "reduce_scatter",
    "psum_scatter",
    "axis_index",
    "pbroadcast",
):
    define(_n, family="collectives")


# ---------------------------------------------------------------- batching (vmap)
# JAX's rules (`jax/_src/lax/parallel.py`): a collective over the vmap axis itself becomes
# ordinary array code along the batch dimension; one over other axes is rebound with its
# positional parameters shifted past the batch dimension.


def _names(params) -> tuple[str, ...]:
    """The axis names a collective communicates over (its `axes` or `axis_name`)."""
    return tuple(str(a) for a in _raw_axes(params) if not isinstance(a, int))


def _over_batch_axis(params) -> bool:
    name = BT.axis_name()
    return name is not None and name in _names(params)


def _unsupported(what: str):
    """JAX's own refusals (NotImplementedError in its batchers), located."""
    raise JaxprError(f"vmap: {what} (JAX does not batch this either)", current().loc)


def _no_groups(params, name: str) -> None:
    if params.get("axis_index_groups") is not None:
        _unsupported(f"'{name}' with axis_index_groups over the vmap axis is not supported")


def _reduction_batching(name: str, unmapped_factor: bool):
    """psum / pmax / pmin / psum_invariant (JAX's `_batched_reduction_collective`), one
    operand at a time: over the vmap axis the batch dimension is reduced as a positional
    axis of the same collective (an unbatched operand is multiplied by the axis size for a
    sum, kept for a max or min); over other axes positional axes move past it."""

    def one(x, d, params):
        axes = _raw_axes(params)
        p = dict(params)
        if _over_batch_axis(params):
            _no_groups(params, name)
            batch = BT.axis_name()
            if d is None:
                rest = tuple(a for a in axes if a != batch)
                if rest:
                    x = BT.bind(name, x, **dict(p, axes=rest))[0]
                if unmapped_factor:
                    x = ops.mul(ops.lit(BT.axis_size(), x), x)
                return x, None
            new = tuple(
                (a + (a >= d)) if isinstance(a, int) else (d if a == batch else a) for a in axes
            )
            return BT.bind(name, x, **dict(p, axes=new))[0], None
        if d is None:
            return BT.bind(name, x, **p)[0], None
        positional = [int(a) for a in axes if isinstance(a, int)]
        new = tuple((a + (a >= d)) if isinstance(a, int) else a for a in axes)
        out = BT.bind(name, x, **dict(p, axes=new))[0]
        return out, d - sum(1 for a in positional if a + (a >= d) < d)

    def rule(args, dims, **params):
        res = [one(x, d, params) for x, d in zip(args, dims)]
        return [r for r, _ in res], [d for _, d in res]

    return rule


def _fold(x, axis: int):
    """JAX's `_foldaxis`: axes `axis` and `axis + 1` merged into one."""
    shape = list(x.type.shape)
    shape[axis : axis + 2] = [dim_mul(shape[axis], shape[axis + 1])]
    return ops.reshape(x, shape)


def _split(x, axis: int, factor: int):
    """JAX's `_splitaxis`: axis `axis` split into (factor, size // factor)."""
    shape = list(x.type.shape)
    shape[axis : axis + 1] = [factor, dim_floordiv(shape[axis], factor)]
    return ops.reshape(x, shape)


def _single_batch_axis(params, name: str) -> None:
    if len(_names(params)) > 1:
        _unsupported(f"'{name}' over several axes including the vmap axis is not supported")


def _all_gather_batching(name: str):
    def rule(args, dims, **params):
        (x,), (d,) = args, dims
        g, tiled = int(params["all_gather_dimension"]), bool(params.get("tiled"))
        if not _over_batch_axis(params):
            if d is None:
                return BT.bind(name, x, **params), [None]
            if d <= g:
                g += 1
            elif not tiled:
                d += 1
            return BT.bind(name, x, **dict(params, all_gather_dimension=g)), [d]
        _no_groups(params, name)
        _single_batch_axis(params, name)
        if d is None:
            y = BT.broadcast(x, BT.axis_size(), g)
        else:
            y = BT.moveaxis(x, d, g)
        return [_fold(y, g) if tiled else y], [None]

    return rule


def _reduce_scatter_batching(name: str):
    def rule(args, dims, **params):
        (x,), (d,) = args, dims
        s, tiled = int(params["scatter_dimension"]), bool(params.get("tiled"))
        if not _over_batch_axis(params):
            if d is None:
                return BT.bind(name, x, **params), [None]
            if d <= s:
                s += 1
            elif not tiled:
                d += 1
            return BT.bind(name, x, **dict(params, scatter_dimension=s)), [d]
        _no_groups(params, name)
        _single_batch_axis(params, name)
        n = BT.axis_size()
        y = ops.mul(x, ops.lit(n, x)) if d is None else ops.reduce_sum(x, (d,))
        return [_split(y, s, n) if tiled else y], [s]

    return rule


def _ppermute_batching(args, dims, **params):
    """Over the vmap axis: the examples permuted along the batch dimension (JAX takes
    them with a gather; the tool slices the runs of consecutive sources, one concatenate)."""
    (x,), (d,) = args, dims
    if not _over_batch_axis(params):
        return BT.bind("ppermute", x, **params), [d]
    batch = BT.axis_name()
    rest = tuple(a for a in _names(params) if a != batch)
    if rest:
        return BT.bind("ppermute", x, **dict(params, axis_name=rest)), [d]
    n = BT.axis_size()
    perm = [(int(a), int(b)) for a, b in params["perm"]]
    if len(perm) != n or sorted(dst for _, dst in perm) != list(range(n)):
        raise JaxprError(
            f"vmap: the permutation {perm} of 'ppermute' over the vmap axis must move every "
            f"one of its {n} examples (as JAX asserts)",
            current().loc,
        )
    if d is None:
        return [x], [None]
    source = dict((dst, src) for src, dst in perm)
    runs: list[list[int]] = []
    for dst in range(n):
        src = source[dst]
        if runs and runs[-1][1] == src:
            runs[-1][1] += 1
        else:
            runs.append([src, src + 1])
    parts = [ops.slice_in_dim(x, lo, hi, axis=d) for lo, hi in runs]
    return [parts[0] if len(parts) == 1 else ops.bind_concatenate(parts, d)], [d]


def _all_to_all_batching(args, dims, **params):
    """JAX's `_all_to_all_batched_collective`."""
    (x,), (d,) = args, dims
    split, concat = int(params["split_axis"]), int(params["concat_axis"])
    if not _over_batch_axis(params):
        if d is None:
            return BT.bind("all_to_all", x, _out_types=BT.result_types([None]), **params), [None]
        p = dict(params, split_axis=split + (d <= split), concat_axis=concat + (d <= concat))
        return BT.bind("all_to_all", x, _out_types=BT.result_types([d]), **p), [d]
    _no_groups(params, "all_to_all")
    n = BT.axis_size()
    if d is None:
        x, d = BT.broadcast(x, n, 0), 0
    names = _names(params)
    pos = names.index(BT.axis_name())
    major, minor = names[:pos], names[pos + 1 :]
    if not major and not minor:
        if split == concat:
            axis = split + (d <= split)
            d_pre = d
            x = _split(x, axis, n)
            d += axis <= d
            perm = list(range(ndim_of(x)))
            perm[d], perm[axis] = perm[axis], perm[d]
            return [_fold(ops.transpose(x, perm), axis)], [d_pre]
        x = _fold(BT.moveaxis(x, d, concat), concat)
        return [_split(x, split, n)], [split]
    return _all_to_all_nested(x, d, split, concat, major, minor, params, n)


def _all_to_all_nested(x, d, split, concat, major, minor, params, n):
    """The vmap axis among several (JAX's chunks gathered in leading [major, current, minor]
    axes); the other axes' size is read off the equation's per-example types."""
    eqn = BT.current_eqn()
    i_t, o_t = eqn.inputs[0].type, eqn.outputs[0].type
    if (major and minor) or split == concat or not isinstance(i_t.shape[split], int):
        raise JaxprError(
            "vmap: 'all_to_all' over the vmap axis and axes on both sides of it, or with "
            "split_axis == concat_axis, needs the sizes of its other axes, which the "
            "program does not state (JAX, which knows them, batches it)",
            current().loc,
        )
    other = i_t.shape[split] // o_t.shape[split] // n
    x = BT.moveaxis(x, d, 0)
    shape = list(x.type.shape)
    x = ops.reshape(x, [1, shape[0], 1] + shape[1:])
    split, concat = split + 3, concat + 3
    if major:
        x = _a2a(x, dict(params, axis_name=major, split_axis=split, concat_axis=0), other)
    x = _split(x, split, n)
    new_d = split
    concat += split <= concat
    split += 1
    if minor:
        x = _a2a(x, dict(params, axis_name=minor, split_axis=split, concat_axis=2), other)
    x = _fold(_fold(x, 0), 0)
    concat, new_d = concat - 2, new_d - 2
    x = _fold(BT.moveaxis(x, 0, concat - 1), concat - 1)
    return [x], [new_d - 1]


def _a2a(x, params, size: int):
    """all_to_all over axes of `size` devices, its result type stated."""
    shape = list(x.type.shape)
    shape[params["split_axis"]] //= size
    shape[params["concat_axis"]] *= size
    return BT.bind("all_to_all", x, _out_types=[x.type.update(shape=shape)], **params)[0]


def ndim_of(x) -> int:
    return x.type.ndim


def _axis_index_batching(args, dims, **params):
    """Over the vmap axis: each example's index, an iota along the batch dimension."""
    if not _over_batch_axis(params):
        return BT.bind("axis_index", **params), [None]
    _single_batch_axis(params, "axis_index")
    return [ops.iota((BT.axis_size(),), 0)], [0]


def _pbroadcast_batching(args, dims, **params):
    """Over the vmap axis: example `source` for every example."""
    (x,), (d,) = args, dims
    if not _over_batch_axis(params):
        return BT.bind("pbroadcast", x, **params), [d]
    _single_batch_axis(params, "pbroadcast")
    if d is None:
        return [x], [None]
    src = int(params["source"])
    one = ops.slice_in_dim(x, src, src + 1, axis=d)
    return [ops.broadcast_in_dim(one, x.type.shape, range(ndim_of(x)))], [d]


def _pvary_batching(args, dims, **params):
    """pvary keeps the batch dimension; the vmap axis is no mesh axis, so it leaves `axes`."""
    batch = BT.axis_name()
    axes = tuple(a for a in _raw_axes(params) if a != batch)
    if any(isinstance(a, int) for a in axes):
        _unsupported("'pvary' with positional axes is not supported")
    if not axes:
        return list(args), list(dims)
    outs = [BT.bind("pvary", x, **dict(params, axes=axes))[0] for x in args]
    return outs, list(dims)


for _n, _factor in (("psum", True), ("psum_invariant", True), ("pmax", False), ("pmin", False)):
    define(_n, batching=_reduction_batching(_n, _factor), axis_names=_names)
for _n in ("all_gather", "all_gather_invariant"):
    define(_n, batching=_all_gather_batching(_n), axis_names=_names)
for _n in ("reduce_scatter", "psum_scatter"):
    define(_n, batching=_reduce_scatter_batching(_n), axis_names=_names)
define("ppermute", batching=_ppermute_batching, axis_names=_names)
define("all_to_all", batching=_all_to_all_batching, axis_names=_names)
define("axis_index", batching=_axis_index_batching, axis_names=_names)
define("pbroadcast", batching=_pbroadcast_batching, axis_names=_names)
define("pvary", batching=_pvary_batching)


def _refused_batching(name):
    """The collectives the tool has no shape rule for: refused, located."""

    def rule(args, dims, **params):
        raise JaxprError(
            f"vmap: '{name}' is a collective the tool cannot check or batch yet",
            B.current().loc,
        )

    return rule


for _n in ("pshuffle", "pcast"):
    define(_n, batching=_refused_batching(_n))


def _jax_refuses_batching(name):
    """JAX 0.12's batcher of the unreduced collectives raises NotImplementedError."""

    def rule(args, dims, **params):
        raise JaxprError(f"Batching rule for '{name}' not implemented", B.current().loc)

    return rule


for _n in ("unreduced_psum", "unreduced_pmax", "unreduced_pmin"):
    define(_n, batching=_jax_refuses_batching(_n))


# ---------------------------------------------------------------- meshes


def _pmap_mesh(e) -> MeshText:
    p = e.params
    return MeshText((str(p.get("axis_name")),), (int(p.get("axis_size", 1)),), ("Auto",))


# their in_specs / in_axes do not place the program inputs they read: XLA chooses (as for a
# numpy argument of jax.jit), constrained by the body's placement
define("shard_map", mesh_of=lambda e: read_mesh(e.params["mesh"]) if "mesh" in e.params else None)
define("xla_pmap", mesh_of=_pmap_mesh)
#: their presence makes a program multi-device
for _n in """
shard_map xla_pmap psum pmax pmin ppermute all_gather all_gather_invariant all_to_all
reduce_scatter psum_scatter axis_index psum_invariant pvary pbroadcast
""".split():
    define(_n, multi_device=True)


for _n in ("psum", "pmax", "pmin"):
    # bound once per operand with every parameter (`_eval_each`)
    define(_n, evaluate=_eval_each, evaluated_params=frozenset({"axes", "axis_index_groups"}))

_linear_each("psum", _psum_t)
_linear_each("psum_invariant", _psum_invariant_t)
_linear_each("pvary", _pvary_t)
_linear_each("ppermute", _ppermute_t)
_linear_each("all_gather", _all_gather_t)
_linear_each("reduce_scatter", _reduce_scatter_t)
_linear_each("psum_scatter", _reduce_scatter_t)
_linear_each("all_to_all", _all_to_all_t)
_linear_each("all_gather_invariant", _all_gather_invariant_t)
_linear_each("pbroadcast", _pbroadcast_t)
_linear_each("sharding_constraint", _sharding_constraint_t)
_linear_each("reshard", _reshard_t)
defjvp_zero("axis_index")


# ---------------------------------------------------------------- ragged_all_to_all
# JAX's `ragged_all_to_all_p` (`jax/_src/lax/parallel.py`): operand, output and four integer
# vectors (input_offsets, send_sizes, output_offsets, recv_sizes); the result has the type of
# `output`, and it is linear in (operand, output) together.

_RAGGED_INDEXES = ("input_offsets", "send_sizes", "output_offsets", "recv_sizes")


@shape_rule("ragged_all_to_all")
def _ragged_all_to_all_shape(in_types, params, out_hint):
    """JAX's `_ragged_all_to_all_effectful_abstract_eval`: the four index operands are
    integer vectors of positive length; the result is `output` (not weak)."""
    if len(in_types) != 6:
        raise ShapeError(f"ragged_all_to_all: expected 6 operands, got {len(in_types)}")
    _, output, *indexes = in_types
    for what, t in zip(_RAGGED_INDEXES, indexes):
        if not isinstance(t, ShapedArray) or not is_int_dtype(t.dtype):
            raise ShapeError(f"ragged_all_to_all: {what} must be of integer type, got {t}")
        if t.ndim != 1 or (isinstance(t.shape[0], int) and t.shape[0] < 1):
            raise ShapeError(
                f"ragged_all_to_all: {what} must be rank 1 with positive dimension size, got {t}"
            )
    if not isinstance(output, ShapedArray):
        raise ShapeError(f"ragged_all_to_all: output must be an array, got {output}")
    return [output.update(weak_type=False)]


def _eval_ragged_all_to_all(interp, eqn, invals, path):
    """Binds JAX's primitive; XLA:CPU has no `ragged-all-to-all` (JAX lowers it to a custom
    call that only the GPU and TPU compilers implement), so a CPU run is refused here rather
    than failing later in XLA."""
    import jax

    from ..backend import prims

    if jax.default_backend() == "cpu":
        raise JaxprError(
            "cannot run 'ragged_all_to_all' on CPU: XLA:CPU does not implement "
            "ragged-all-to-all; run the program on a GPU or TPU (JAX_PLATFORMS=cuda)",
            eqn.loc,
        )
    params = {
        "axis_name": _axes_tuple(eqn.params.get("axis_name", ())),
        "axis_index_groups": eqn.params.get("axis_index_groups"),
    }
    return [prims.lookup("ragged_all_to_all").bind(*invals, **params)]


def _ragged_all_to_all_jvp(primals, tangents, /, **params):
    """JAX's `_ragged_all_to_all_jvp`: the same exchange on the tangents of operand and output
    (both instantiated), with the primal offsets and sizes."""
    (ans,) = rebind_primal("ragged_all_to_all", primals, params)
    t_operand, t_output = tangents[:2]
    if is_zero(t_operand) and is_zero(t_output):
        return [ans], [Zero(tangent_type(ans.type))]
    args = [instantiate(t_operand), instantiate(t_output), *primals[2:]]
    return [ans], current().bind("ragged_all_to_all", args, params, [tangent_type(ans.type)])


# The transpose and batching rules emit what JAX's lax and jnp code emits, `pvary` included:
# inside a `check_vma=True` body JAX's lax functions vary their operands to a common set of
# axes (`standard_insert_pvary`), its collectives theirs to the axes they communicate over.


def _vary_to(x, axes):
    """`x` pvary'd to those of `axes` it does not vary along (none: `x` itself)."""
    missing = tuple(sorted(set(axes) - set(varying_axes(x.type))))
    return x if not missing else ops.bind("pvary", x, axes=missing)


def _vary_together(*xs):
    """The operands of a lax function varied along the union of their axes, in order."""
    union = set().union(*(varying_axes(x.type) for x in xs))
    return [_vary_to(x, union) for x in xs]


def _weak_scalar(value, like):
    """jnp's Python scalar next to `like`: a literal, or when `like` varies, the literal
    pvary'd (still weakly typed) and then converted to a strong scalar, as jnp promotes it."""
    lit = ops.lit(value, like)
    axes = tuple(sorted(varying_axes(like.type)))
    if not axes:
        return lit
    (t,) = B.infer([lit.type], "pvary", {"axes": axes})
    (v,) = current().bind("pvary", [lit], {"axes": axes}, [t.update(weak_type=True)])
    return ops.convert_element_type(v, like.type.dtype, weak_type=False)


def _normalized_index(index, size: int):
    """jnp's `_normalize_index`: negative indexes count from the end of an axis of `size`."""
    negative = ops.lt(*_vary_together(index, _weak_scalar(0, index)))
    wrapped = ops.add(*_vary_together(index, ops.lit(size, index)))
    return ops.select_n(negative, index, wrapped)


def _add_at(base, index, value: int):
    """jnp's `base.at[index].add(value)` (a `scatter-add`) for an integer vector `index` into
    a vector `base` (out-of-range indexes dropped)."""
    from .indexing import bind_scatter, scatter_dnums

    n = index.type.shape[0]
    index = ops.broadcast_in_dim(_normalized_index(index, base.type.shape[0]), (n, 1), (0,))
    updates = ops.broadcast_in_dim(
        _vary_to(ops.lit(value, base), varying_axes(base.type)), (n,), ()
    )
    base, index, updates = _vary_together(base, index, updates)
    return bind_scatter("scatter-add", base, index, updates, scatter_dnums((), (0,), (0,)))


def _a2a_tiled(x, axis_name, axis_index_groups, vary: bool):
    """JAX's `all_to_all(x, axis_name, 0, 0, tiled=True)` (pvary'd to `axis_name` first
    inside a `check_vma=True` body)."""
    if vary:
        x = _vary_to(x, _named(axis_name))
    params = {
        "axis_index_groups": axis_index_groups,
        "axis_name": axis_name,
        "concat_axis": 0,
        "split_axis": 0,
        "tiled": True,
    }
    return ops.bind("all_to_all", x, **params)


def _received_mask(t, output_offsets, recv_sizes):
    """1 on the rows of `t` that the exchange wrote (those it received), 0 elsewhere: the
    cumulative sum of +1 at each received block's start and -1 past its end, broadcast to
    `t`'s shape: JAX's mask in `_ragged_all_to_all_transpose` but for one scatter.  JAX
    before 0.12.1 *sets* the +1s (`.at[starts].set(1)`), so an empty block that starts where
    another one does (zero rows from some device: common) cancels that block's +1, and every
    received row from there on keeps its cotangent: a wrong gradient.  The tool adds them (a
    `scatter-add` in place of JAX's `scatter`, the same number of equations), as JAX 0.12.1
    does; 0.12.1 then selects on `sum > 0` (a `gt`, and with vma a pvary'd 0 and its
    conversion), where the tool selects on the sum itself: 0 or 1 for blocks that do not
    overlap, as the exchange requires."""
    rows = t.type.shape[0]
    if not isinstance(rows, int):
        raise JaxprError(
            f"transpose: 'ragged_all_to_all' with a symbolic leading output dimension "
            f"({rows}) is not supported: trace the program with concrete shapes",
            current().loc,
        )
    zeros = ops.full(ShapedArray((rows,), "i32"), 0)
    starts = _add_at(zeros, output_offsets, 1)
    ends = ops.add(*_vary_together(output_offsets, recv_sizes))
    marks = _add_at(starts, ends, -1)
    mask = ops.bind("cumsum", marks, axis=0, reverse=False)
    mask = ops.broadcast_in_dim(mask, (rows,) + (1,) * (t.type.ndim - 1), (0,))
    return ops.broadcast_in_dim(mask, t.type.shape, tuple(range(t.type.ndim)))


def _ragged_all_to_all_transpose(cts, operand, output, *indexes, axis_name, axis_index_groups):
    """JAX's `_ragged_all_to_all_transpose`: the operand's cotangent is the reverse exchange
    (output and input offsets swapped, the offsets seen from the other side through an
    `all_to_all`, send and receive sizes swapped) of `t` into zeros; the output's is `t` with
    the rows the exchange overwrote zeroed (`_received_mask`: where the tool departs from
    JAX, whose mask is wrong after an empty block)."""
    (t,) = cts
    lin_op, lin_out = is_undefined_primal(operand), is_undefined_primal(output)
    if is_zero(t):
        return [
            Zero(tangent_type(operand.type)) if lin_op else None,
            Zero(tangent_type(output.type)) if lin_out else None,
        ] + [None] * 4
    input_offsets, send_sizes, output_offsets, recv_sizes = indexes
    # a check_vma=True body where nothing varies cannot be told from check_vma=False: JAX
    # itself fails to transpose that one (its cotangent's type is not the operand's)
    vary = any(varying_axes(x.type) for x in (t, operand, output, *indexes))
    operand_t = output_t = None
    # emitted in JAX's order; what a one-sided transpose leaves unused, DCE drops
    zero = ops.zeros(tangent_type(operand.type))
    output_offsets_ = _a2a_tiled(output_offsets, axis_name, axis_index_groups, vary)
    input_offsets_ = _a2a_tiled(input_offsets, axis_name, axis_index_groups, vary)
    if lin_op:
        args = [t, zero, output_offsets_, recv_sizes, input_offsets_, send_sizes]
        params = {"axis_index_groups": axis_index_groups, "axis_name": axis_name}
        (operand_t,) = current().bind("ragged_all_to_all", args, params)
    if lin_out:
        mask = _received_mask(t, output_offsets_, recv_sizes)
        output_t = ops.select_n(*_vary_together(mask, t, ops.zeros(t.type)))
    return [operand_t, output_t] + [None] * 4


def _bdim_at_second(x, d, size):
    """JAX's `bdim_at_second` for the index vectors: the batch dimension second (an
    unbatched vector broadcast, as JAX's means to: its assertion of rank 2 comes first)."""
    if d is None:
        return ops.broadcast_in_dim(x, (x.type.shape[0], size), (0,))
    return x if d == 1 else ops.transpose(x, (1, 0))


def _offset_by_example(offsets, d, size: int):
    """Offsets of example k moved by k * d: the examples' rows lie one after another."""
    step = ops.broadcast_in_dim(ops.iota((size,), 0, offsets.type.dtype), (1, size), (1,))
    step = ops.mul(step, ops.lit(d, offsets))
    return ops.add(*_vary_together(offsets, step))


def _merge(x):
    return ops.reshape(x, (dim_mul(x.type.shape[0], x.type.shape[1]), *x.type.shape[2:]))


def _ragged_all_to_all_batching(args, dims, **params):
    """JAX's `_ragged_all_to_all_batched_collective`: the examples' operands and outputs laid
    end to end (batch dimension first, merged with the next), each example's offsets moved
    past the rows of the examples before it; one exchange, split back into examples."""
    if _over_batch_axis(params):
        _unsupported("'ragged_all_to_all' over the vmap axis is not supported")
    if params.get("axis_index_groups"):
        _unsupported("'ragged_all_to_all' with axis_index_groups is not supported")
    size = BT.axis_size()
    operand, output = (BT.bdim_at_front(x, d, size) for x, d in zip(args[:2], dims[:2]))
    input_offsets, send_sizes, output_offsets, recv_sizes = (
        _bdim_at_second(x, d, size) for x, d in zip(args[2:], dims[2:])
    )
    input_offsets = _offset_by_example(input_offsets, operand.type.shape[1], size)
    output_offsets = _offset_by_example(output_offsets, output.type.shape[1], size)
    merged = [
        _merge(x) for x in (operand, output, input_offsets, send_sizes, output_offsets, recv_sizes)
    ]
    (out,) = BT.bind("ragged_all_to_all", *merged, **params)
    return [ops.reshape(out, (size, *output.type.shape[1:]))], [0]


define(
    "ragged_all_to_all",
    family="collectives",
    flops=_no_flops,
    multi_device=True,
    axis_names=_names,
    evaluate=_eval_ragged_all_to_all,
    evaluated_params=frozenset({"axis_name", "axis_index_groups"}),
    jvp=_ragged_all_to_all_jvp,
    jvp_kind=LOW_LEVEL,
    transpose=_ragged_all_to_all_transpose,
    batching=_ragged_all_to_all_batching,
)
