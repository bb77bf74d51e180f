"""Call-like primitives: a body jaxpr (or several) run on the operands.

* Plain calls (jit/pjit, closed_call, core_call, call, named_call, xla_call, eval_jaxpr,
  compute_on, xla_metadata_call): the body takes the operands and returns the results; the
  record's `call_body` names its parameter, which is the one definition of "call body" for AD,
  `run`, DCE and inline.  JVP: one call of the body's JVP; linearized (`linearization`), two
  calls: the primal one returns its outputs and residuals, the linear one maps residuals and
  tangents to output tangents.  Transpose: a call of the transposed body.
* remat2/checkpoint (with policies) and `name` (checkpoint_name).
* custom_jvp_call / custom_vjp_call / custom_lin (traced, plugin and JAX-library rules, and
  the `--custom-rules` policy), in one block below.
* optimization_barrier, and the other primitives with bodies: custom_linear_solve,
  CustomRoot, run_state, shard_map, xla_pmap.
"""

from __future__ import annotations

import math
import re

from ..ad import builder as B
from ..ad import ops
from ..ad.builder import current
from ..ad.ops import add_tangents, instantiate
from ..ad.registry import (
    BWD_RULE_PARAM,
    FWD_RULE_PARAM,
    JVP_RULE_PARAM,
    PERTURBED_RULE_PARAM,
    RULE_CONSTS_PARAM,
    MissingCustomRule,
    custom_jvps,
    custom_vjps,
    deflinear2,
    find_library_jvp,
    rebind_primal,
)
from ..ad.zeros import (
    Zero,
    carries_tangent,
    is_undefined_primal,
    is_zero,
    tangent_type,
    writes_tangent_ref,
)
from ..core import Jaxpr, JaxprError, RefType, ShapedArray, Var, np_dtype
from ..lazy import LazyPattern, lazy_module
from ..params import Opaque, Record, format_value
from ..record import batching_rule, define
from ..record import prim as record_of
from ..shapes import ShapeError, shape_rule
from ..shapes.util import (
    check_call_operands,
    int_param,
    is_complex_dtype,
    jaxpr_param,
    out_types_of,
    parse_avals,
)
from ..shardings import with_batch_dim
from ..text import style as ST
from ..text.param_rules import drop, name_first, sorted_params, unspecified

#: the vmap machinery, executed when a batching rule first runs
BT = lazy_module("jaxprtool.ad.batching")

#: what the AD walks tell their observers (`explain`), imported when a rule below first runs
#: (reading and printing a program loads this family without it)
observe = lazy_module("jaxprtool.ad.observe")

#: the kind `explain` shows for the rules below
LOW_LEVEL = "jvp+linearization"


# ---------------------------------------------------------------- shared by the call rules


def _call_shape(name: str, key: str, *alts: str):
    """The shape rule of a call: the body (`key`, else the first of `alts` present) takes the
    operands; its results are the equation's."""

    def rule(in_types, params, out_hint):
        j = jaxpr_param(params, key, *alts)
        check_call_operands(name, j, in_types)
        return out_types_of(j)

    return rule


def _key(prim, params):
    """The parameter holding the body of a call (the record's `call_body`)."""
    k = record_of(prim).call_body or "jaxpr"
    if k not in params:
        for alt in ("jaxpr", "call_jaxpr"):
            if alt in params:
                return alt
    return k


def _emit(prim, inputs, params, jaxpr: Jaxpr):
    return current().bind(prim, list(inputs), params, [v.type for v in jaxpr.outvars])


def _scatter(out_nz, vals, types):
    it = iter(vals)
    return [next(it) if nz else Zero(tangent_type(t)) for nz, t in zip(out_nz, types)]


def _forward_plan(pj: Jaxpr, n: int):
    """Residual outputs of a primal body that are just its inputs are taken from the operands:
    (the pruned body, where each residual comes from: ("in", operand) or ("out", output))."""
    pos = {id(v): i for i, v in enumerate(pj.invars)}
    src = []
    keep = list(pj.outvars[:n])
    for r in pj.outvars[n:]:
        if isinstance(r, Var) and id(r) in pos:
            src.append(("in", pos[id(r)]))
        else:
            src.append(("out", len(keep)))
            keep.append(r)
    return pj.replace(outvars=keep), src


def _residuals_from(src, primals):
    def residuals(outs):
        return [primals[i] if kind == "in" else outs[i] for kind, i in src]

    return residuals


def _forward_inputs(pj: Jaxpr, n: int, primals):
    body, src = _forward_plan(pj, n)
    return body, _residuals_from(src, primals)


#: the most derivatives an invocation's memo holds (a library user's thread that sets no
#: policy keeps one entry invocation, and so one memo, for its life)
_MEMO_LIMIT = 4096


def _memo(kind, fn, inner: Jaxpr, nz):
    """One JVP/linearization per (body, nonzero pattern): a body called twice gets one derivative
    jaxpr object, which the printer shares (`let NAME = { lambda ... }`) as JAX does.  The
    memo is the invocation's (`Invocation.memo`: one command's or API call's).  The
    rematerialization plans made for it are kept with it and given to each later
    linearization's list that lacks them (the same program's again, within the call),
    once: a body called twice in one program has one plan, as it has one derivative."""
    inv = B.invocation()
    remat, plans, memo = inv.remat, inv.plans, inv.memo
    key = (kind, id(inner), tuple(nz), remat)  # a remat request changes them
    hit = memo.get(key)
    if hit is not None and hit[0] is inner and (plans is None or hit[2] is not None):
        _, res, made = hit
        if plans is not None:
            plans.extend(p for p in made if not any(p is q for q in plans))
        return res
    before = len(plans) if plans is not None else 0
    res = fn(inner, nz, instantiate=False)
    if len(memo) > _MEMO_LIMIT:
        memo.clear()
    memo[key] = (inner, res, None if plans is None else plans[before:])  # None: not kept
    return res


def _call_parts(prim, params, tangents):
    """What a call primitive's JVP rule reads first: the body's param name, the body, the
    tangents' nonzero mask, the nonzero tangents, the number of results and their types."""
    key = _key(prim, params)
    inner: Jaxpr = params[key]
    nz = [not is_zero(t) for t in tangents]
    nz_t = [t for t in tangents if not is_zero(t)]
    return key, inner, nz, nz_t, len(inner.outvars), [v.type for v in inner.outvars]


_noted: set = set()


def _note_once(key, msg):
    if key in _noted:
        return
    _noted.add(key)
    from ..io import warn

    warn(msg, current().loc)


def _evaluate_body(key: str):
    """`run`: the body held by parameter `key`, run as a call."""

    def rule(interp, eqn, invals, path):
        return interp.call(eqn, invals, path, key)

    return rule


def _body_key(name, params) -> str:
    """The parameter holding the body of the call `name` (its record's, or the one present)."""
    k = record_of(name).call_body
    if k in params:
        return k
    for alt in ("jaxpr", "call_jaxpr", "fun_jaxpr"):
        if alt in params and isinstance(params[alt], Jaxpr):
            return alt
    raise JaxprError(f"vmap: '{name}': no body jaxpr in its parameters", B.current().loc)


def _emit_call(name, args, params, key, body: Jaxpr):
    return B.current().emit(name, args, dict(params, **{key: body}), [v.type for v in body.outvars])


def _call_batching(name):
    """JAX's `_pjit_batcher` / `_eval_jaxpr_batch` / custom_jvp/vjp calls: the body is
    batched with the operands' batch dimensions where they are, and the results keep theirs."""

    def rule(args, dims, **params):
        key = _body_key(name, params)
        body, out_dims = BT.batch_jaxpr2(params[key], dims)
        params = _batched_shardings(params, dims, out_dims)
        return _emit_call(name, args, params, key, body), out_dims

    return rule


def _batched_shardings(params, dims, out_dims):
    """jit's in/out_shardings with None at each batch dimension (as JAX's pjit batcher)."""
    p = dict(params)
    for k, ds in (("in_shardings", dims), ("out_shardings", out_dims)):
        v = params.get(k)
        if isinstance(v, tuple) and len(v) == len(ds):
            p[k] = tuple(with_batch_dim(s, d) for s, d in zip(v, ds))
    return p


# ---------------------------------------------------------------- plain calls


#: per-operand / per-result tuple parameters of jit, and the value of an entry JAX adds
_IN_TUPLES = {
    "in_shardings": Opaque("UnspecifiedValue"),
    "in_layouts": None,
    "donated_invars": False,
}
_OUT_TUPLES = {"out_shardings": Opaque("UnspecifiedValue"), "out_layouts": None}


def _resized(params, ins, outs):
    """`params` with its per-operand and per-result tuples (in_shardings, donated_invars, ...)
    rebuilt for a new call: entry k copies the original entry `ins[k]` (`outs[k]`), or is
    the default (unspecified, not donated) when that is None (as JAX's pjit rules do)."""
    p = dict(params)
    for table, src in ((_IN_TUPLES, ins), (_OUT_TUPLES, outs)):
        for k, default in table.items():
            v = params.get(k)
            if not isinstance(v, tuple):
                continue
            p[k] = tuple(v[i] if i is not None and i < len(v) else default for i in src)
    return p


def _transposed(params, mask, n_cts):
    """The per-operand / per-result tuples of a transposed call: operands are the non-linear
    inputs then one cotangent per output (with the output's sharding), results the
    cotangents of the linear inputs (with their shardings)."""
    p = dict(params)
    for ik, ok in (("in_shardings", "out_shardings"), ("in_layouts", "out_layouts")):
        vi, vo = params.get(ik), params.get(ok)
        if not isinstance(vi, tuple) or not isinstance(vo, tuple):
            continue
        p[ik] = tuple(v for v, m in zip(vi, mask) if not m) + tuple(vo[:n_cts])
        p[ok] = tuple(v for v, m in zip(vi, mask) if m)
    if isinstance(params.get("donated_invars"), tuple):
        p["donated_invars"] = (False,) * (mask.count(False) + n_cts)
    return p


def _call_jvp(prim):
    def rule(primals, tangents, **params):
        from ..ad.jvp import jvp_masked

        key, inner, nz, nz_t, n, out_types = _call_parts(prim, params, tangents)
        jj, out_nz = _memo("jvp", jvp_masked, inner, nz)
        ins, nz_in = list(range(len(primals))), [i for i, m in enumerate(nz) if m]
        outs_ix = list(range(n)) + [j for j, m in enumerate(out_nz) if m]
        p = _resized(dict(params, **{key: jj}), ins + nz_in, outs_ix)
        outs = _emit(prim, list(primals) + nz_t, p, jj)
        return outs[:n], _scatter(out_nz, outs[n:], out_types)

    return rule


def _linearize_rerun(inner, nz, instantiate):
    """The body's linearization, which a policy may run again (`remat_saves` below)."""
    from ..ad.linearize import linearize_masked

    return linearize_masked(inner, nz, instantiate, rerun=True)


def _call_linearize(prim):
    def rule(primals, tangents, **params):
        key, inner, nz, nz_t, n, out_types = _call_parts(prim, params, tangents)
        pj, lj, out_nz, _ = _memo("lin", _linearize_rerun, inner, nz)
        pj, src = _memo("fwd", lambda j, m, instantiate: _forward_plan(j, n), pj, ())
        residuals = _residuals_from(src, primals)
        ins, nz_in = list(range(len(primals))), [i for i, m in enumerate(nz) if m]
        n_new = len(pj.outvars) - n
        p = _resized(dict(params, **{key: pj}), ins, list(range(n)) + [None] * n_new)
        outs = _emit(prim, primals, p, pj)
        if not any(out_nz) and not writes_tangent_ref(inner.invars, nz):
            return outs[:n], [Zero(tangent_type(t)) for t in out_types]
        lin_out = [j for j, m in enumerate(out_nz) if m]
        p = _resized(dict(params, **{key: lj}), [None] * len(src) + nz_in, lin_out)
        touts = _emit(prim, residuals(outs) + nz_t, p, lj)
        return outs[:n], _scatter(out_nz, touts, out_types)

    return rule


def _call_transpose(prim):
    """A differentiated Ref operand enters the transposed body as its cotangent Ref (written
    into there), in the operand's place among the non-linear inputs."""

    def rule(cts, *args, **params):
        from ..ad.linearize import LINEAR_NAME
        from ..ad.transpose import backward_pass, transpose_jaxpr

        key = _key(prim, params)
        inner: Jaxpr = params[key]
        mask = [is_undefined_primal(a) for a in args]
        ct_refs = [a.ct_ref if m else None for a, m in zip(args, mask)]
        if prim in ("jit", "pjit") and str(params.get("name")) == LINEAR_NAME:
            # the combined linearize form: inline the transposed linear program
            _, cts_in = backward_pass(
                inner, mask, [r if m else a for a, m, r in zip(args, mask, ct_refs)], cts
            )
            return cts_in
        values = [m and r is None for m, r in zip(mask, ct_refs)]  # cotangents come out
        if all(is_zero(c) for c in cts) and not any(r is not None for r in ct_refs):
            return [Zero(tangent_type(a.type)) if m else None for a, m in zip(args, mask)]
        tj = _memo("T", lambda j, m, instantiate: transpose_jaxpr(j, list(m)), inner, mask)
        ops_in = [a if r is None else r for a, v, r in zip(args, values, ct_refs) if not v]
        ops_in += [instantiate(c) for c in cts]
        p = _transposed(dict(params, **{key: tj}), values, len(cts))
        outs = iter(_emit(prim, ops_in, p, tj))
        return [next(outs) if v else None for v in values]

    return rule


def _call_remat_saves(prim):
    """Per result: saved when the policy saves the body value it is (one its body passes
    through is the operand's: the call passes it again)."""

    def rule(e, body_saves):
        return [bool(s) for s in body_saves(e.params[_key(prim, e.params)])]

    return rule


def _call_remat_feed(prim):
    """The call reading its saved results as new operands (after the others), so that
    running it again computes only the rest (its per-operand tuples get JAX's defaults)."""

    def rule(e, saved):
        from ..ad.remat import feed_results

        key = _key(prim, e.params)
        body, read = feed_results(e.params[key], [k for k, s in enumerate(saved) if s])
        n_in, n_out = len(e.inputs), len(e.outputs)
        p = _resized(
            dict(e.params, **{key: body}),
            list(range(n_in)) + [None] * len(read),
            list(range(n_out)),
        )
        return e.replace(inputs=(*e.inputs, *(e.outputs[k] for k in read)), params=p)

    return rule


def _print_jit(e, style):
    """pjit's print rule (jax-ml/jax#14384, JAX 0.4.4+: defaults hidden; #18862, 0.4.22+:
    `name=` first); before 0.4.4 every parameter printed, sorted."""
    d = dict(e.params)
    if style.jit_hides_defaults:
        d.pop("inline", None)
    for k, hidden in (
        ("donated_invars", lambda v: isinstance(v, tuple) and not any(v)),
        ("in_shardings", lambda v: isinstance(v, tuple) and all(map(unspecified, v))),
        ("out_shardings", lambda v: isinstance(v, tuple) and all(map(unspecified, v))),
        ("in_layouts", lambda v: isinstance(v, tuple) and all(x is None for x in v)),
        ("out_layouts", lambda v: isinstance(v, tuple) and all(x is None for x in v)),
        ("keep_unused", lambda v: v is False),
        (
            "ctx_mesh",
            lambda v: v is None or format_value(v) in ("Mesh()", "AbstractMesh((), axis_types=())"),
        ),
        ("compiler_options_kvs", lambda v: v is None or v == ()),
    ):
        if k in d and hidden(d[k]) and style.jit_hides_defaults:
            del d[k]
    return name_first(d) if style.jit_name_first else sorted_params(d)


def _jit_name(style) -> str:
    """JAX printed jit as `pjit` before 0.7."""
    return "pjit" if style.version < (0, 7) else "jit"


def _restyle_jit(prim, params, e, style):
    return _jit_name(style), params


def _print_name_jit(e, style):
    return _jit_name(style)


def _jit_default_printed(params: dict) -> bool:
    """A pjit parameter printed with the value that pjit's print rule (JAX 0.4.4+) hides."""
    donated = params.get("donated_invars")
    if isinstance(donated, tuple) and donated and not any(donated):
        return True
    return params.get("inline") is False or "in_positional_semantics" in params


def _pjit_version_clues(e) -> set[str]:
    clues = {ST.CLUE_OLD_CALL_NAME}
    keys = list(e.params)
    if "name" in keys and keys[0] != "name" and min(keys) != "name":
        clues.add(ST.CLUE_BEFORE_0_4_22)  # `name=` among the sorted keys (jax-ml/jax#18862)
    if _jit_default_printed(e.params):
        clues.add(ST.CLUE_BEFORE_0_4_4)  # no pjit print rule yet (jax-ml/jax#14384)
    return clues


#: where shape rules look for a call's body, in order
_JAXPR_FIRST = ("jaxpr", "call_jaxpr")
_CALL_JAXPR_FIRST = ("call_jaxpr", "jaxpr", "fun_jaxpr")
#: plain calls: name -> (the parameter holding the body, the shape rule's keys)
_PLAIN_CALLS = {
    "jit": ("jaxpr", _JAXPR_FIRST),
    "pjit": ("jaxpr", _JAXPR_FIRST),
    "closed_call": ("call_jaxpr", _CALL_JAXPR_FIRST),
    "core_call": ("call_jaxpr", _CALL_JAXPR_FIRST),
    "call": ("call_jaxpr", _CALL_JAXPR_FIRST),
    "named_call": ("call_jaxpr", _CALL_JAXPR_FIRST),
    "xla_call": ("call_jaxpr", _CALL_JAXPR_FIRST),
    "eval_jaxpr": ("call_jaxpr", _CALL_JAXPR_FIRST),
    "compute_on": ("jaxpr", _CALL_JAXPR_FIRST),
    "compute_on2": ("jaxpr", _CALL_JAXPR_FIRST),
    "xla_metadata_call": ("jaxpr", _CALL_JAXPR_FIRST),
}
for _p, (_body, _keys) in _PLAIN_CALLS.items():
    shape_rule(_p)(_call_shape(_p, *_keys))
    define(
        _p,
        call_body=_body,
        jvp=_call_jvp(_p),
        jvp_kind=LOW_LEVEL,
        linearization=_call_linearize(_p),
        transpose=_call_transpose(_p),
        transposes_refs=True,
        batching=_call_batching(_p),
        remat_saves=_call_remat_saves(_p),
        remat_feed=_call_remat_feed(_p),
    )

# composite (lax.composite): a named decomposition, run as its body (what XLA runs where no
# back end recognises the composite); JAX gives it no JVP, transpose or batching rule
shape_rule("composite")(_call_shape("composite", *_CALL_JAXPR_FIRST))
define("composite", call_body="call_jaxpr", multiple_results=True)

#: what `run` reads of a plain call besides its body: names, donation, inlining and
#: placement (shardings, layouts, the mesh, where it computes) do not change its values;
#: compiler options would, and are accepted only when empty
_CALL_PARAMS = frozenset(
    "name donated_invars inline keep_unused in_shardings out_shardings in_layouts out_layouts "
    "ctx_mesh resource_env in_positional_semantics out_positional_semantics device backend "
    "compute_type out_memory_spaces xla_metadata ad_metadata".split()
)
for _p, (_body, _keys) in _PLAIN_CALLS.items():
    define(
        _p,
        evaluated_params=_CALL_PARAMS | {_body},
        default_params={"compiler_options_kvs": (), "compiler_options_json": None},
    )
#: composite runs as its decomposition: its name, attributes and version label it for back
#: ends that recognise it
define("composite", evaluated_params=frozenset("call_jaxpr name attributes version".split()))

for _p in ("jit", "pjit", "closed_call", "core_call"):
    define(_p, inlinable=True)
for _p in ("jit", "pjit", "closed_call", "core_call", "eval_jaxpr"):
    define(_p, multiple_results=True)
define("eval_jaxpr", first_version=(0, 12))
for _p in ("jit", "pjit"):
    define(
        _p,
        print_params=_print_jit,
        restyle=_restyle_jit,
        print_name=_print_name_jit,
        suggest_names="jaxpr",
    )
define("pjit", version_clues=_pjit_version_clues)


def _jit_operand_placement(e, k, a):
    from ..backend.sharding import named_sharding

    shs = e.params.get("in_shardings")
    return named_sharding(shs[k], e) if isinstance(shs, (tuple, list)) and k < len(shs) else None


def _jit_result_placement(e, k):
    from ..backend.sharding import named_sharding

    shs = e.params.get("out_shardings")
    return named_sharding(shs[k], e) if isinstance(shs, (tuple, list)) and k < len(shs) else None


for _p in ("jit", "pjit"):
    define(_p, operand_placement=_jit_operand_placement, result_placement=_jit_result_placement)


def _call_mesh(key: str):
    """The mesh a call prints in `key`: 2022's pjit in `resource_env=ResourceEnv(Mesh(
    device_ids=...), ())` (the devices its `OpShardingSharding`s number), a jit in
    `ctx_mesh=Mesh('x': 2, ...)` (the mesh it was traced under); None for `Mesh()`."""

    def mesh_of(e):
        from ..shardings import read_mesh

        v = e.params.get(key)
        m = read_mesh(v) if v is not None else None
        return m if m is not None and m.complete else None

    return mesh_of


define("pjit", mesh_of=_call_mesh("resource_env"))
define("jit", mesh_of=_call_mesh("ctx_mesh"))


# ---------------------------------------------------------------- remat2 (checkpoint), name


def _is_dot(e) -> bool:
    """What JAX's `dots_saveable` saves: matmuls and convolutions (the records' `remat`)."""
    from ..ad.remat import remat_class

    return remat_class(e) in ("dot", "dot_unbatched")


def _is_unbatched_dot(e) -> bool:
    """What JAX's `dots_with_no_batch_dims_saveable` saves."""
    from ..ad.remat import remat_class

    return remat_class(e) == "dot_unbatched"


def _policy_saveable(policy):
    """A predicate eqn -> bool saying which primal values a remat policy lets us save."""
    if policy is None:
        return lambda e: False
    text = str(policy)
    if isinstance(policy, Record):
        cls = policy.cls
        if cls == "SaveOnlyTheseNames" or cls == "SaveAnyNames":
            names = {
                str(n)
                for n in (
                    policy.get("saveable_names") or policy.get("names_which_can_be_saved") or ()
                )
            }
            return lambda e: e.prim == "name" and str(e.params.get("name")) in names
        if cls == "DotsSaveable":
            return _is_dot
        if cls in ("EverythingSaveable",):
            return lambda e: True
        if cls in ("NothingSaveable",):
            return lambda e: False
    for key, pred in (
        ("everything_saveable", lambda e: True),
        ("nothing_saveable", lambda e: False),
        ("dots_with_no_batch_dims_saveable", _is_unbatched_dot),
        ("dots_saveable", _is_dot),
        ("checkpoint_dots", _is_dot),
    ):
        if key in text:
            return pred
    why = (
        "is an offload policy, whose memory kinds the text does not print"
        if "offload" in text
        else "is not understood"
    )
    _note_once(("policy", text), f"remat2: policy {text} {why}; recomputing every residual")
    return lambda e: False


def _remat_split(inner: Jaxpr, nz, saveable):
    """Linearize a remat body: primal body (outs + saved residuals) and a linear body that
    recomputes every non-saveable residual from the saved ones."""
    from ..ad.linearize import split_jvp

    sp = split_jvp(inner, nz, False)
    consts, primals, outs, peqns, residuals = sp.consts, sp.primals, sp.outs, sp.peqns, sp.residuals
    tan_in, teqns, touts, out_nz = sp.tan_in, sp.teqns, sp.touts, sp.out_nz
    producer = {id(o): e for e in peqns for o in e.outputs}
    recompute: set[int] = set()
    saved: list[Var] = []
    saved_ids: set[int] = set()
    stack = list(residuals)
    while stack:
        r = stack.pop()
        e = producer.get(id(r))
        if e is None or saveable(e):
            if id(r) not in saved_ids:
                saved_ids.add(id(r))
                saved.append(r)
            continue
        if id(e) in recompute:
            continue
        recompute.add(id(e))
        stack.extend(x for x in e.inputs if isinstance(x, Var))
    rec_eqns = [e for e in peqns if id(e) in recompute]
    # order the saved residuals deterministically: inputs first, then by definition order
    order = {id(v): i for i, v in enumerate(list(consts) + list(primals))}
    for i, e in enumerate(peqns):
        for o in e.outputs:
            order.setdefault(id(o), len(order) + i)
    saved.sort(key=lambda v: order.get(id(v), 0))
    pe = B.dce_eqns(peqns, list(outs) + saved)
    primal = B.make_jaxpr(primals, pe, list(outs) + saved, consts)
    res_in = [B.fresh_like(r) for r in saved]
    tin = [B.fresh_like(t) for t in tan_in]
    mapping = {id(r): n for r, n in zip(saved, res_in)}
    mapping.update({id(t): n for t, n in zip(tan_in, tin)})
    body = B.clone_eqns(rec_eqns, mapping) + B.clone_eqns(teqns, mapping)
    lin = B.make_jaxpr(
        res_in + tin, body, [mapping.get(id(x), x) if isinstance(x, Var) else x for x in touts]
    )
    return primal, lin, out_nz


def _remat_linearize(prim):
    """Linearized, a remat body saves only what its policy allows; the linear call
    recomputes the rest."""

    def rule(primals, tangents, **params):
        key, inner, nz, nz_t, n, out_types = _call_parts(prim, params, tangents)
        if writes_tangent_ref(inner.invars, nz):
            raise JaxprError(
                f"reverse mode of '{prim}' with a differentiated Ref operand is not supported: "
                "JAX fails on it too (0.12.0's vjp raises 'Expected cotangent type Ref{...} "
                "but got ...', 0.12.1's grad and linearize disagree with its jvp); jvp goes "
                "through, or move the Ref's reads and writes out of the checkpointed function",
                current().loc,
            )
        pj, lj, out_nz = _remat_split(inner, nz, _policy_saveable(params.get("policy")))
        pj, residuals = _forward_inputs(pj, n, primals)
        outs = _emit(prim, primals, dict(params, **{key: pj}), pj)
        if not any(out_nz):
            return outs[:n], [Zero(tangent_type(t)) for t in out_types]
        lparams = dict(params, **{key: lj})
        if "differentiated" in lparams:
            lparams["differentiated"] = True
        touts = _emit(prim, residuals(outs) + nz_t, lparams, lj)
        return outs[:n], _scatter(out_nz, touts, out_types)

    return rule


def _remat_evaluate(interp, eqn, invals, path):
    """`jax.checkpoint` of the body (jit), the Refs among the operands going in and out as
    values (a traced body cannot write into the interpreter's Refs); a plain call (eager)."""
    f = interp.call_fn(eqn, path)
    if interp.mode != "jit":
        return f(*invals)
    import jax

    from ..backend.evaluator import ThreadedRefs

    refs = ThreadedRefs(invals)
    args = refs.arguments(invals)
    prevent = eqn.params.get("prevent_cse", True)
    if prevent and eqn.params.get("differentiated"):
        # JAX's remat lowering: XLA neither merges the recomputation with the forward
        # pass nor moves it ahead of its operands (the cotangents, once transposed)
        args = list(jax.lax.optimization_barrier(tuple(args)))
    out = jax.checkpoint(refs.threaded(f, invals), prevent_cse=bool(prevent))(*args)
    return refs.results(out)


def _name_transpose(ct, x, **params):
    return [ct]


def _remat_batching(name):
    """JAX's `remat_vmap`: batched results at axis 0."""

    def rule(args, dims, **params):
        key = _body_key(name, params)
        inner = params[key]
        dest = [BT.ZERO_IF_MAPPED] * len(inner.outvars)
        body, out_dims = BT.batch_jaxpr_axes(inner, dims, dest)
        return _emit_call(name, args, params, key, body), out_dims

    return rule


for _p, _body, _keys in (
    ("remat2", "jaxpr", _JAXPR_FIRST),
    ("checkpoint", "jaxpr", _JAXPR_FIRST),
    ("remat", "jaxpr", _JAXPR_FIRST),
    ("remat_call", "call_jaxpr", _CALL_JAXPR_FIRST),
):
    shape_rule(_p)(_call_shape(_p, *_keys))
    define(
        _p,
        call_body=_body,
        jvp=_call_jvp(_p),
        jvp_kind=LOW_LEVEL,
        linearization=_remat_linearize(_p),
        transpose=_call_transpose(_p),
        evaluate=_remat_evaluate,
        batching=_remat_batching(_p),
        # the policy and `differentiated` say what AD saves: the values are the body's
        evaluated_params=frozenset(
            {_body, "prevent_cse", "policy", "differentiated", "concrete", "name"}
        ),
        # a policy of the program around it recomputes a checkpoint's results by running it
        # again, as JAX's partial evaluation of the outer checkpoint does
        recomputed_whole=True,
    )
for _p in ("remat2", "checkpoint"):
    define(_p, multiple_results=True)
deflinear2("name", _name_transpose)


# ================================================================ custom derivatives
# custom_jvp_call / custom_jvp_call_jaxpr, custom_vjp_call / custom_vjp_call_jaxpr, custom_lin
# and custom_vmap_call: every rule about the custom_* primitives is in this block.
#
# JAX prints a custom call with its body (`call_jaxpr`) and the *name* of its rule (`jvp=`,
# `fwd=`/`bwd=`), never the rule itself, and differentiating the body instead can be silently
# wrong (a clipped gradient, a straight-through estimator, relu at 0).  The rule is found, in
# this order, and otherwise refused or replaced loudly:
# 1. the rule traced by `jaxprtool trace` into the equation (`jaxprtool_jvp`, `jaxprtool_fwd`,
#    `jaxprtool_bwd`: backend/custom_rules.py), used as JAX uses the Python rule;
# 2. a plugin rule (`register_custom_jvp`, `register_custom_vjp`: docs/PLUGINS.md);
# 3. for custom_jvp, JAX's own rule of a library function (`jax_library.py`) whose name and
#    body both match;
# 4. the body's derivative, by policy (`--custom-rules`): custom_vjp is an error by default,
#    custom_jvp gets one warning per function; `body` allows both, `strict` refuses both.
#    Every replacement is noted (`Invocation.fallbacks`, the builder's) for the output's comment
#    lines and for check-grad.
# Forward mode of a custom_vjp function is refused in JAX's words, as JAX refuses it.
# Linearized (`linearization`), a custom VJP's forward runs in the primal program and a
# `custom_lin` equation (transposed by the traced or plugin bwd) in the linear one.

JVP_OF_CUSTOM_VJP = "can't apply forward-mode autodiff (jvp) to a custom_vjp function."


def fn_name(v) -> str:
    """The function name of a printed rule parameter (`jvp=jvp`, `fwd=<function f at 0x..>`)."""
    s = str(v)
    if s.startswith("<function "):
        s = s[len("<function ") :].split(" at ")[0]
    return s


def _custom_body(params) -> Jaxpr:
    return params["call_jaxpr"] if "call_jaxpr" in params else params["fun_jaxpr"]


def function_name(params) -> str | None:
    """The custom function's name: `name=` (0.5+), else the body's single call's name."""
    if "name" in params:
        return str(params["name"])
    body = params.get("call_jaxpr", params.get("fun_jaxpr"))
    if isinstance(body, Jaxpr) and len(body.eqns) == 1 and "name" in body.eqns[0].params:
        return str(body.eqns[0].params["name"])
    return None


def _plugin_helper(kind: str) -> str:
    return "register_custom_jvp" if kind == "custom_jvp" else "register_custom_vjp"


def _how_to_proceed(kind: str) -> str:
    ways = (
        f"give the rule with --plugin RULES.py ({_plugin_helper(kind)}, docs/PLUGINS.md), or trace the "
        "function with `jaxprtool trace MODULE:FUNCTION` so that the rule travels with the "
        "program"
    )
    if B.invocation().fallbacks.policy == "body":
        return ways
    return ways + ", or pass --custom-rules body to differentiate the body on purpose"


def _fall_back_to_body(kind: str, params, primals, tangents, rule_text: str, refuse: bool):
    """Differentiate the body instead of the missing rule, or refuse (by policy)."""
    from ..ad.jvp import jvp_eval

    name = function_name(params) or "?"
    what = f"{kind}_call '{name}' ({rule_text})"
    if refuse:
        raise MissingCustomRule(
            f"{what}: the text names a custom derivative rule but does not contain it, and "
            f"differentiating the body may not give JAX's derivative; {_how_to_proceed(kind)}",
            current().loc,
        )
    note = f"{what}: custom rule replaced by the derivative of its body"
    observe.note(note)
    if B.invocation().fallbacks.note(note):
        from ..io import warn

        warn(
            f"{what}: the text does not contain its custom rule; the derivative here is its "
            "body's, which differs from JAX's wherever the custom rule does (a rule may differ "
            "everywhere, not only at kinks); for JAX's derivative, trace the function with "
            "`jaxprtool trace MODULE:FUNCTION` (its rule travels with the program) or give the "
            f"rule with --plugin RULES.py ({_plugin_helper(kind)}, docs/PLUGINS.md); "
            "--custom-rules strict makes this an error",
            current().loc,
        )
    body = _custom_body(params)
    if body.constvars:  # kept: the program has constants no rule lifts (`_kept_nested`)
        raise JaxprError(_kept_nested(f"{kind}_call", "its body", body), current().loc)
    return jvp_eval(body, list(primals), list(tangents))


def _emit_rule(prim: str, param: str, traced: Jaxpr, inputs) -> list:
    """The equations of a recorded rule, inlined on `inputs`.  The AD commands read the
    program with the rules' constants made its own (`_lift_kept_consts`); a rule still
    closing over constants is one whose program keeps nested constants that no rule makes
    the program's (refused)."""
    if traced.constvars:
        raise JaxprError(_kept_nested(prim, f"its recorded rule {param}", traced), current().loc)
    return ops.emit_jaxpr(traced, inputs)


#: the recorded rules of a custom call that take its leading operands (bwd takes its own
#: constants as residuals)
_LEADING_RULES = (JVP_RULE_PARAM, FWD_RULE_PARAM)


def _lift_kept_consts(e, outer):
    """JAX's closure conversion of a custom rule, for the AD commands: the constants the
    recorded rules and the body close over become new leading operands
    (`jaxprtool_rule_consts=N` of them): jvp's or fwd's, the body's, bwd's.  The body takes
    all N as its leading inputs (ignoring the rules'), jvp or fwd the first two groups
    (ignoring the body's: it is the first to run and passes nothing on), bwd its own (as its
    leading residuals: `_custom_vjp_linearize`); a plugin or library rule gets the
    operands after them.  Their tangents are zero (they are the program's constants)."""
    if RULE_CONSTS_PARAM in e.params:
        raise JaxprError(
            f"'{e.prim}': its recorded rules close over constants and already take "
            f"{e.params[RULE_CONSTS_PARAM]} as operands ({RULE_CONSTS_PARAM})",
            e.loc,
        )
    rules = [k for k in (*_LEADING_RULES, BWD_RULE_PARAM) if isinstance(e.params.get(k), Jaxpr)]
    key = "call_jaxpr" if "call_jaxpr" in e.params else "fun_jaxpr"
    body: Jaxpr = e.params[key]
    lead = [v for k in rules if k in _LEADING_RULES for v in e.params[k].constvars]
    own = list(body.constvars)
    tail = [v for k in rules if k == BWD_RULE_PARAM for v in e.params[k].constvars]
    if not (lead or own or tail):
        return e
    invars = (*_ignored(lead), *own, *_ignored(tail), *body.invars)
    params = dict(e.params, **{key: body.replace(constvars=(), invars=invars)})
    for k in rules:
        j: Jaxpr = e.params[k]
        skipped = _ignored(own) if k in _LEADING_RULES else ()
        params[k] = j.replace(constvars=(), invars=(*j.constvars, *skipped, *j.invars))
    binders = lead + own + tail
    params[RULE_CONSTS_PARAM] = len(binders)
    return e.replace(inputs=tuple(outer(binders)) + tuple(e.inputs), params=params)


def _ignored(binders) -> tuple[Var, ...]:
    """Inputs of the types of `binders` that a jaxpr takes and does not use."""
    return tuple(Var(v.type, None) for v in binders)


def _rule_consts(params) -> int:
    """How many leading operands carry the recorded rules' constants."""
    return int(params.get(RULE_CONSTS_PARAM, 0))


# ---------------------------------------------------------------- custom_jvp_call


def _custom_jvp_jvp(primals, tangents, **params):
    body = _custom_body(params)
    traced = params.get(JVP_RULE_PARAM)
    n_out = len(body.outvars)
    if isinstance(traced, Jaxpr):
        ts = list(map(_instantiate_tangent, tangents[_rule_consts(params) :]))  # not the consts'
        out = _emit_rule("custom_jvp_call", JVP_RULE_PARAM, traced, [*primals, *ts])
        return out[:n_out], out[n_out:]
    jvp_name = fn_name(params.get("jvp", params.get("jvp_jaxpr_thunk")))
    plugin = custom_jvps.get(jvp_name)
    n = _rule_consts(params)  # the body's constants, which a plugin's rule does not take
    if plugin is not None:
        observe.note(f"custom_jvp rule '{jvp_name}' from a plugin (register_custom_jvp)")
        outs, touts = plugin(list(primals[n:]), [_instantiate_tangent(t) for t in tangents[n:]])
        _check_plugin_results(f"custom_jvp_call (jvp={jvp_name})", touts, n_out)
        if outs is None:
            outs = current().bind("custom_jvp_call", list(primals), params, _out_types(body))
        return list(outs), list(touts)
    library = find_library_jvp(function_name(params), params, body)
    if library is not None:
        outs = rebind_primal("custom_jvp_call", list(primals), params)
        if all(is_zero(t) for t in tangents):
            return outs, [Zero(tangent_type(o.type)) for o in outs]
        nonzero = [None if is_zero(t) else t for t in tangents[n:]]
        return outs, library.tangent(list(primals[n:]), nonzero, outs, body)
    refuse = B.invocation().fallbacks.policy == "strict"
    return _fall_back_to_body("custom_jvp", params, primals, tangents, f"jvp={jvp_name}", refuse)


def _check_plugin_results(what: str, outs, n_out: int) -> None:
    """A plugin rule gives every result of the function it was written for; a call that DCE
    left fewer results (JAX's DCE rule prunes a custom call's unused ones) cannot say which
    of them it kept."""
    if len(outs) != n_out:
        raise JaxprError(
            f"{what}: the plugin rule gives {len(outs)} results and the call has {n_out} (DCE "
            "removes a custom call's unused results, as JAX's does, and the plugin cannot know "
            "which remain): differentiate the program before `dce`, or register a rule for "
            "the call as it stands",
            current().loc,
        )


def _instantiate_tangent(t):
    """A recorded or plugin rule takes every tangent: a Zero one as zeros, a Ref's as a Ref
    of zeros (JAX hands a custom rule a Ref operand's tangent Ref)."""
    if is_zero(t) and isinstance(t.type, RefType):
        return ops.zeros_ref(t.type)
    return instantiate(t)


def _out_types(body: Jaxpr):
    return [v.type for v in body.outvars]


# ---------------------------------------------------------------- custom_vjp_call


def _custom_vjp_rule(params):
    fwd_name, bwd_name = fn_name(params.get("fwd")), fn_name(params.get("bwd"))
    fwd, bwd = params.get(FWD_RULE_PARAM), params.get(BWD_RULE_PARAM)
    plugin = custom_vjps.get(fwd_name) or custom_vjps.get(bwd_name)
    traced = isinstance(fwd, Jaxpr) and isinstance(bwd, Jaxpr)
    return fwd_name, bwd_name, fwd if traced else None, bwd if traced else None, plugin


def _custom_vjp_jvp(primals, tangents, **params):
    """Forward mode: JAX refuses it; `--custom-rules body` differentiates the body."""
    fwd_name, bwd_name, fwd, _, plugin = _custom_vjp_rule(params)
    policy = B.invocation().fallbacks.policy
    if fwd is not None or plugin is not None:
        if policy == "body":
            return _fall_back_to_body(
                "custom_vjp", params, primals, tangents, "forward mode", refuse=False
            )
        raise JaxprError(JVP_OF_CUSTOM_VJP, current().loc)
    rule_text = f"fwd={fwd_name} bwd={bwd_name}"
    return _fall_back_to_body(
        "custom_vjp", params, primals, tangents, rule_text, refuse=policy != "body"
    )


def _custom_vjp_linearize(primals, tangents, **params):
    body = _custom_body(params)
    fwd_name, bwd_name, fwd, bwd, plugin = _custom_vjp_rule(params)
    if fwd is None and plugin is None:
        rule_text = f"fwd={fwd_name} bwd={bwd_name}"
        refuse = B.invocation().fallbacks.policy != "body"
        return _fall_back_to_body("custom_vjp", params, primals, tangents, rule_text, refuse)
    if all(is_zero(t) for t in tangents):
        outs = rebind_primal("custom_vjp_call", list(primals), params)
        return outs, [Zero(tangent_type(o.type)) for o in outs]
    if fwd is None:
        hit = fwd_name if fwd_name in custom_vjps else bwd_name
        observe.note(f"custom_vjp rules '{hit}' from a plugin (register_custom_vjp)")
        n = _rule_consts(params)  # the body's constants, which a plugin's rule does not take
        n_out = len(body.outvars)
        return _plugin_vjp(plugin, primals[n:], tangents[n:], bwd_name, fwd_name, n_out)
    n = _rule_consts(params)  # fwd's constants, the body's, bwd's, then the operands
    tangents = tangents[n:]  # (the constants' are zero)
    n_fwd = len(fwd.invars) - len(tangents)
    _check_perturbed(params, tangents, fwd_name)
    out = _emit_rule("custom_vjp_call", FWD_RULE_PARAM, fwd, [*primals[:n_fwd], *primals[n:]])
    n_out = len(body.outvars)
    outs, res = out[:n_out], [*primals[n_fwd:n], *out[n_out:]]  # bwd's constants lead
    in_zeros = [is_zero(t) for t in tangents]
    touts = current().bind(
        "custom_lin",
        [*res, *[t for t in tangents if not is_zero(t)]],
        {
            "bwd": bwd_name,
            "in_zeros": in_zeros,
            BWD_RULE_PARAM: bwd,
            "num_res": len(res),
            "symbolic_zeros": False,
        },
        [tangent_type(o.type) for o in outs],
    )
    return outs, touts


def _check_perturbed(params, tangents, fwd_name) -> None:
    """A `symbolic_zeros=True` rule is recorded for the operands JAX would perturb when every
    float input of the traced program is differentiated; a tangent on another operand would
    be dropped by it, so it is refused."""
    flags = params.get(PERTURBED_RULE_PARAM)
    if not isinstance(flags, tuple):
        return
    for k, (t, perturbed) in enumerate(zip(tangents, flags)):
        if perturbed is False and not is_zero(t):
            raise JaxprError(
                f"custom_vjp_call (fwd={fwd_name}): operand {k} has a tangent, but the rule "
                "`jaxprtool trace` recorded takes it as unperturbed (it did not depend on the "
                "traced function's inputs); trace the function again with that value as an input",
                current().loc,
            )


def _plugin_vjp(pair, primals, tangents, bwd_name, fwd_name, n_out):
    fwd_fn, _ = pair
    outs, res = fwd_fn(*primals)
    outs, res = list(outs), list(res)
    _check_plugin_results(f"custom_vjp_call (fwd={fwd_name})", outs, n_out)
    ts = [_instantiate_tangent(t) for t in tangents]
    touts = current().bind(
        "custom_lin",
        res + ts,
        {
            "bwd": bwd_name if bwd_name in custom_vjps else fwd_name,
            "in_zeros": [False] * len(ts),
            "num_res": len(res),
            "symbolic_zeros": False,
        },
        [tangent_type(o.type) for o in outs],
    )
    return outs, touts


# ---------------------------------------------------------------- custom_lin


def _custom_lin_transpose(cts, *args, bwd, num_res, in_zeros=None, **params):
    res = list(args[:num_res])
    cts = [instantiate(c) for c in cts]
    traced = params.get(BWD_RULE_PARAM)
    if isinstance(traced, Jaxpr):
        cts_in = _emit_rule("custom_vjp_call", BWD_RULE_PARAM, traced, [*res, *cts])
        zeros = list(in_zeros) if in_zeros is not None else [False] * len(cts_in)
        kept = [c for c, z in zip(cts_in, zeros) if not z]
        return [None] * num_res + [_into_ct_ref(a, c) for a, c in zip(args[num_res:], kept)]
    pair = custom_vjps.get(fn_name(bwd))
    if pair is None:
        raise JaxprError(
            "Transpose rule (for reverse-mode differentiation) for 'custom_lin' not implemented "
            f"(no plugin rule for bwd={fn_name(bwd)}; {_how_to_proceed('custom_vjp')})",
            current().loc,
        )
    observe.note(f"custom_vjp bwd rule '{fn_name(bwd)}' from a plugin")
    _, bwd_fn = pair
    return [None] * num_res + list(bwd_fn(res, cts))


def _into_ct_ref(arg, ct):
    """What bwd gives for a differentiated Ref operand is added into its cotangent Ref (JAX's
    RefAccum); for the other operands it is their cotangent."""
    ct_ref = getattr(arg, "ct_ref", None)
    if ct_ref is None:
        return ct
    ops.add_into_ref(ct_ref, ct)
    return None


@shape_rule("custom_lin")
def _custom_lin_shape(in_types, params, out_hint):
    nres = int_param(params, "num_res", 0)
    if len(in_types) < nres:
        raise ShapeError(
            f"custom_lin: expects at least {nres} residual operands, got {len(in_types)}"
        )
    if out_hint is not None:
        return list(out_hint)
    avals = parse_avals(params.get("out_avals"))
    if avals:
        return avals
    raise ShapeError("custom_lin: the result types are not given (out_avals is hidden)")


def _print_custom_call(e, style):
    if not style.custom_call_rule:  # JAX <= 0.6.0: no print rule, every parameter sorted
        return sorted_params(e.params)
    d = dict(e.params)
    if "num_consts" in d and d["num_consts"] == 0 and d["num_consts"] is not False:
        del d["num_consts"]
    if e.prim == "custom_vjp_call":
        d.pop("out_trees", None)
    return name_first(d)


def _print_custom_lin(e, style):
    return drop("out_avals")(e, style) if style.version >= (0, 5) else sorted_params(e.params)


def _no_hoist_name(e):
    """Their printed `name=` is synthesized from call_jaxpr, not a parameter: a hoisted body
    is not named after it."""
    return None


for _p in ("custom_jvp_call", "custom_jvp_call_jaxpr", "custom_vjp_call"):
    shape_rule(_p)(_call_shape(_p, *_CALL_JAXPR_FIRST))
shape_rule("custom_vjp_call_jaxpr")(_call_shape("custom_vjp_call_jaxpr", "fun_jaxpr", "call_jaxpr"))
shape_rule("custom_vmap_call")(_call_shape("custom_vmap_call", "call", "call_jaxpr", "jaxpr"))
shape_rule("custom_vmap_call_jaxpr")(_call_shape("custom_vmap_call_jaxpr", *_JAXPR_FIRST))
for _p in ("custom_jvp_call", "custom_jvp_call_jaxpr"):
    define(_p, jvp=_custom_jvp_jvp, jvp_kind=LOW_LEVEL)
for _p in ("custom_vjp_call", "custom_vjp_call_jaxpr"):
    define(_p, jvp=_custom_vjp_jvp, jvp_kind=LOW_LEVEL, linearization=_custom_vjp_linearize)


# (recomputed_whole: the primal call a library rule keeps, `jax.nn.softmax`'s, is rerun
# whole by remat, as JAX's remat partially evaluates its body)
for _p in ("custom_jvp_call", "custom_vjp_call"):
    define(
        _p,
        multiple_results=True,
        print_params=_print_custom_call,
        hoist_name=_no_hoist_name,
        evaluate=_evaluate_body("call_jaxpr"),
        recomputed_whole=True,
    )
#: a custom-derivative call's value is its body's: the rules and their bookkeeping
#: (jvp, fwd, bwd, thunks, trees, zeros, and the rules `trace` writes) matter to AD only
_CUSTOM_CALL_PARAMS = frozenset(
    "jvp jvp_jaxpr_fun jvp_jaxpr_thunk fwd bwd fwd_jaxpr_thunk out_trees num_consts "
    "symbolic_zeros name jaxprtool_jvp jaxprtool_fwd jaxprtool_bwd jaxprtool_perturbed "
    "jaxprtool_rule_consts".split()
)
define("custom_jvp_call", evaluated_params=_CUSTOM_CALL_PARAMS | {"call_jaxpr"})
define("custom_vjp_call", evaluated_params=_CUSTOM_CALL_PARAMS | {"call_jaxpr"})
define(
    "custom_vjp_call_jaxpr",
    evaluate=_evaluate_body("fun_jaxpr"),
    evaluated_params=_CUSTOM_CALL_PARAMS | {"fun_jaxpr"},
)
for _p in ("custom_jvp_call", "custom_jvp_call_jaxpr", "custom_vjp_call", "custom_vjp_call_jaxpr"):
    define(_p, batching=_call_batching(_p))


def _custom_jvp_version_clues(e) -> set[str]:
    if "jvp_jaxpr_thunk" in e.params:
        return {ST.CLUE_0_4_35}  # only 0.4.35 printed it
    if "jvp_jaxpr_fun" in e.params:
        return {ST.CLUE_BEFORE_0_6_1}  # no print rule yet (jax-ml/jax#28715)
    return set()


def _custom_vjp_version_clues(e) -> set[str]:
    if {"out_trees", "fwd_jaxpr_thunk"} & e.params.keys():
        return {ST.CLUE_BEFORE_0_6_1}  # no print rule yet (jax-ml/jax#28608)
    return set()


define("custom_jvp_call", version_clues=_custom_jvp_version_clues, traced_rules="jvp")
define("custom_vjp_call", version_clues=_custom_vjp_version_clues, traced_rules="vjp")
for _p in ("custom_jvp_call", "custom_vjp_call"):
    define(_p, lift_kept_consts=_lift_kept_consts)


def _custom_call_dce(used_outs, e, dce_jaxpr, live_ins):
    """JAX's `_custom_jvp_call_dce` / `_custom_vjp_call_dce`: unused results leave the call
    and its body, but every operand stays (a rule may read what the body does not) and so
    do the body's writes into Ref operands (JAX cleans the body with every input live).  A
    recorded JVP rule loses the same results and their tangents; a recorded fwd/bwd pair
    cannot lose results (bwd takes every result's cotangent): that call keeps them, as a
    call whose results are all used does."""
    from ..passes.dce import Unsupported, rebuild

    body = e.params.get("call_jaxpr")
    if not isinstance(body, Jaxpr) or len(body.invars) != len(e.inputs):
        raise Unsupported
    if all(used_outs) or any(isinstance(e.params.get(k), Jaxpr) for k in _VJP_RULES):
        raise Unsupported  # every body and rule cleaned, keeping the signature
    keep = [True] * len(e.inputs)
    params = dict(e.params, call_jaxpr=dce_jaxpr(body, tuple(used_outs), tuple(keep))[0])
    rule = e.params.get(JVP_RULE_PARAM)
    if isinstance(rule, Jaxpr):
        if len(rule.outvars) != 2 * len(used_outs):  # not (outs, out_tangents): keep it all
            raise Unsupported
        used = tuple(used_outs) * 2  # the results, then their tangents
        params[JVP_RULE_PARAM] = dce_jaxpr(rule, used, (True,) * len(rule.invars))[0]
    return keep, rebuild(e, keep, used_outs, params)


_VJP_RULES = (FWD_RULE_PARAM, BWD_RULE_PARAM)
for _p in ("custom_jvp_call", "custom_vjp_call"):
    define(_p, dce=_custom_call_dce)


def _custom_vmap_jvp(primals, tangents, **params):
    """JAX's `custom_vmap_jvp` binds custom_vmap_call on the JVP of `call` with a rule built in
    Python, which no text holds; the rule changes only how the call batches, so the JVP of
    the body gives JAX's tangents (a later vmap batches the body, as the tool does anyway).
    The AD commands read `call` with its constants as leading operands
    (`_custom_vmap_lift_kept_consts`); one still closing over some is refused."""
    from ..ad.jvp import jvp_eval

    body = params["call"]
    if body.constvars:
        raise JaxprError(_kept_nested("custom_vmap_call", "its body", body), current().loc)
    return jvp_eval(body, list(primals), list(tangents))


def _kept_nested(prim: str, what: str, j: Jaxpr) -> str:
    """Why the AD commands refuse a jaxpr of `prim` that still closes over constants: the
    program also keeps constants that no `lift_kept_consts` rule makes the program's, and
    numbering those after the program's would misnumber the archive."""
    n = len(j.constvars)
    return (
        f"'{prim}': {what} closes over {n} constant{'s' if n != 1 else ''}, and the program "
        "also keeps constants in nested jaxprs that the AD commands cannot make the program's "
        "(a Pallas kernel's with a grid, whose blocks' index maps the text lacks; a "
        "reduction's computation's; CustomRoot's solve_jaxpr's: `run` without --consts "
        "lists every constant), after which they cannot number these: run takes the "
        "program with --consts; to differentiate, pass the arrays as arguments"
    )


#: `in_tree=PyTreeDef(([consts...], args))`: JAX's custom_vmap puts the constants it closes
#: over first, as a list
_VMAP_IN_TREE = LazyPattern(r"PyTreeDef\(\(\[((?:\*(?:, )?)*)\], (.*)\)\)")


def _custom_vmap_lift_kept_consts(e, outer):
    """For the AD commands (`passes/hoist_consts.py`: `lift_kept_consts`): the constants
    `call` keeps (a jit's inside it) as its leading inputs and the call's leading operands,
    as JAX's `custom_vmap` binds what it closes over (`in_tree` then counts them among the
    constants' list; another `in_tree` text is kept: only the rule, which no text holds,
    reads it)."""
    body: Jaxpr = e.params["call"]
    params = dict(e.params, call=body.replace(constvars=(), invars=(*body.constvars, *body.invars)))
    m = _VMAP_IN_TREE.fullmatch(str(e.params.get("in_tree")))
    if m is not None:
        leaves = ", ".join(["*"] * (m.group(1).count("*") + len(body.constvars)))
        params["in_tree"] = Opaque(f"PyTreeDef(([{leaves}], {m.group(2)}))")
    return e.replace(inputs=tuple(outer(body.constvars)) + tuple(e.inputs), params=params)


define(
    "custom_vmap_call",
    evaluate=_evaluate_body("call"),
    jvp=_custom_vmap_jvp,
    lift_kept_consts=_custom_vmap_lift_kept_consts,
    # the rule and its trees change how the call batches, not its value
    evaluated_params=frozenset("call rule in_tree out_tree".split()),
)


def _custom_lin_forward(eqn) -> Jaxpr:
    """The linear map a custom_lin stands for, (residuals..., tangents...) -> (out
    tangents...): the transpose of its recorded bwd (which maps the output cotangents to
    the input ones, linearly in them), the zero tangents (`in_zeros`) left out.  JAX
    cannot run a custom_lin (it only transposes it); the tool can, from the traced bwd."""
    from ..ad.transpose import transpose_jaxpr

    p = eqn.params
    bwd: Jaxpr = p[BWD_RULE_PARAM]
    nres = int(p.get("num_res", 0))
    zeros = p.get("in_zeros") or [False] * len(bwd.outvars)
    kept = bwd.replace(outvars=[o for o, z in zip(bwd.outvars, zeros) if not z])
    n_cts = len(bwd.invars) - nres
    return transpose_jaxpr(kept, [False] * nres + [True] * n_cts)


def _evaluate_custom_lin(interp, eqn, invals, path):
    """A tangent Ref operand enters the map as its value: bwd's entry for a Ref is added into
    the Ref's cotangent Ref, whose transpose reads the tangent Ref."""
    from ..backend.evaluator import Box

    invals = [x.value if isinstance(x, Box) else x for x in invals]
    try:
        forward = _custom_lin_forward(eqn)
    except JaxprError:  # a bwd the tool cannot transpose (a while loop: diffrax's adjoint)
        return _custom_lin_by_rows(interp, eqn, invals, path)
    return interp.run(forward, [], list(invals), path)


def _custom_lin_by_rows(interp, eqn, invals, path):
    """J t from the rows of J: the bwd run (vmapped by JAX) on each basis vector of the
    output cotangents, each row paired with the tangents.  One bwd per output element."""
    import jax
    import jax.numpy as jnp

    p = eqn.params
    bwd: Jaxpr = p[BWD_RULE_PARAM]
    nres = int(p.get("num_res", 0))
    zeros = p.get("in_zeros") or [False] * len(bwd.outvars)
    res, ts = list(invals[:nres]), list(invals[nres:])
    outs = [o.type for o in eqn.outputs]
    if any(is_complex_dtype(t.dtype) for t in outs) or any(jnp.iscomplexobj(t) for t in ts):
        raise JaxprError(
            "cannot run 'custom_lin' of complex values: its recorded bwd does not transpose",
            eqn.loc,
        )
    sizes = [math.prod(int(d) for d in t.shape) for t in outs]

    def row(e):
        cts, k = [], 0
        for t, n in zip(outs, sizes):
            cts.append(e[k : k + n].reshape(t.shape).astype(np_dtype(t.dtype)))
            k += n
        got = interp.run(bwd, [], res + cts, path)
        return [g for g, z in zip(got, zeros) if not z]

    rows = jax.vmap(row)(jnp.eye(sum(sizes), dtype=jnp.float32))
    jt = sum(jnp.tensordot(r, t, axes=jnp.ndim(t)) for r, t in zip(rows, ts))
    results, k = [], 0
    for t, n in zip(outs, sizes):
        results.append(jt[k : k + n].reshape(t.shape).astype(np_dtype(t.dtype)))
        k += n
    return results


def _custom_lin_refusal(e):
    """Runnable with a recorded bwd (`jaxprtool trace`); otherwise the text lacks it."""
    if isinstance(e.params.get(BWD_RULE_PARAM), Jaxpr):
        return None
    return (
        f"holds a Python function ({format_value(e.params.get('bwd'))}) that the text does "
        "not contain (record it: print the program with `jaxprtool trace`)"
    )


define(
    "custom_lin",
    multiple_results=True,
    transpose=_custom_lin_transpose,
    transposes_refs=True,
    print_params=_print_custom_lin,
    # its value is the custom VJP's linear map: the transpose of the recorded bwd
    refusal=_custom_lin_refusal,
    evaluate=_evaluate_custom_lin,
    # the recorded bwd is the map; the others say which operands it reads and returns
    evaluated_params=frozenset(
        {BWD_RULE_PARAM, "bwd", "in_zeros", "num_res", "symbolic_zeros", "out_avals"}
    ),
    # only 0.4.35 printed its out_avals
    version_clues=lambda e: {ST.CLUE_0_4_35} if "out_avals" in e.params else set(),
)

# ================================================================ end of custom derivatives


# ---------------------------------------------------------------- optimization_barrier


@shape_rule("optimization_barrier")
def _optimization_barrier_shape(in_types, params, out_hint):
    return list(in_types)


def _opt_barrier_jvp(primals, tangents, **params):
    outs = current().bind("optimization_barrier", list(primals), params, [x.type for x in primals])
    nz_t = [t for t in tangents if not is_zero(t)]
    if not nz_t:
        return outs, [Zero(tangent_type(o.type)) for o in outs]
    tout = iter(current().bind("optimization_barrier", nz_t, {}, [t.type for t in nz_t]))
    return outs, [next(tout) if not is_zero(t) else t for t in tangents]


def _opt_barrier_transpose(cts, *args, **params):
    nz = [c for c in cts if not is_zero(c)]
    if nz:
        outs = iter(current().bind("optimization_barrier", nz, {}, [c.type for c in nz]))
        cts = [next(outs) if not is_zero(c) else c for c in cts]
    return [c if is_undefined_primal(a) else None for c, a in zip(cts, args)]


def _opt_barrier_evaluate(interp, eqn, invals, path):
    import jax

    return list(jax.lax.optimization_barrier(tuple(invals)))


define(
    "optimization_barrier",
    multiple_results=True,
    jvp=_opt_barrier_jvp,
    jvp_kind=LOW_LEVEL,
    transpose=_opt_barrier_transpose,
    evaluate=_opt_barrier_evaluate,
    flops=lambda e: 0,
    batching=batching_rule("same_dims", "optimization_barrier"),
)


# ---------------------------------------------------------------- other primitives with bodies


def _jaxpr_for(params, prim: str, key: str, in_types, what: str = "inputs") -> Jaxpr:
    """The nested jaxpr ``params[key]``, checked to take exactly one input per operand."""
    j = jaxpr_param(params, key)
    if len(j.invars) != len(in_types):
        raise ShapeError(
            f"{prim}: {key} takes {len(j.invars)} {what}, but the equation passes {len(in_types)}"
        )
    return j


# custom_linear_solve: operands = the consts of matvec, vecmat, solve, transpose_solve, then b


_SOLVE_NAMES = ("matvec", "vecmat", "solve", "transpose_solve")


@shape_rule("custom_linear_solve")
def _custom_linear_solve_shape(in_types, params, out_hint):
    cl = params.get("const_lengths")
    total = 0
    if cl is not None:
        try:
            total = sum(int(v) for _, v in cl.fields)
        except (AttributeError, TypeError, ValueError):
            total = 0
    b = in_types[total:]
    js = params.get("jaxprs")
    solve = None
    if js is not None and hasattr(js, "get"):
        solve = js.get("solve") if isinstance(js.get("solve"), Jaxpr) else None
    if solve is not None:
        if len(solve.outvars) != len(b):
            raise ShapeError(
                f"custom_linear_solve: solve returns {len(solve.outvars)} values for {len(b)} operands"
            )
    return list(b)


def _custom_linear_solve_evaluate(interp, eqn, invals, path):
    """The `solve` jaxpr on its consts and b."""
    p = eqn.params
    lengths, jaxprs = p["const_lengths"], p["jaxprs"]

    def get(rec, k):
        if hasattr(rec, "get"):
            return rec.get(k)
        return rec[_SOLVE_NAMES.index(k)]

    counts = [int(get(lengths, k) or 0) for k in _SOLVE_NAMES]
    start = sum(counts[:2])
    solve_consts = invals[start : start + counts[2]]
    b = invals[sum(counts) :]
    return interp.fn(get(jaxprs, "solve"), eqn, path, "custom_linear_solve")(*solve_consts, *b)


def _solve_field(rec, key):
    """A field of a `_LinearSolveTuple` record (const_lengths or jaxprs)."""
    return rec.get(key) if hasattr(rec, "get") else rec[_SOLVE_NAMES.index(key)]


def _split_solve_args(args, const_lengths):
    """JAX's `_split_linear_solve_args`: {name: its consts} and b."""
    groups, start = {}, 0
    for k in _SOLVE_NAMES:
        n = int(_solve_field(const_lengths, k) or 0)
        groups[k] = list(args[start : start + n])
        start += n
    return groups, list(args[start:])


def _solve_record(values: dict) -> Record:
    return Record("_LinearSolveTuple", tuple((k, values[k]) for k in _SOLVE_NAMES))


#: the roles exchanged by transposition (JAX's `_LinearSolveTuple.transpose`)
_SOLVE_TRANSPOSED = {
    "matvec": "vecmat",
    "vecmat": "matvec",
    "solve": "transpose_solve",
    "transpose_solve": "solve",
}


def _transposed_solve(rec: Record) -> Record:
    return _solve_record({k: _solve_field(rec, _SOLVE_TRANSPOSED[k]) for k in _SOLVE_NAMES})


def _bind_linear_solve(consts: dict, b, const_lengths, jaxprs):
    flat = [x for k in _SOLVE_NAMES for x in consts[k]]
    return current().bind(
        "custom_linear_solve", flat + list(b), {"const_lengths": const_lengths, "jaxprs": jaxprs}
    )


def _tangent_linear_map(matvec: Jaxpr, consts, consts_dot, xs):
    """JAX's `_tangent_linear_map`: for matvec(consts, x) = A x, the tangent A' x (the JVP of
    matvec with respect to its consts only)."""
    from ..ad.jvp import jvp_eval

    if matvec.constvars:
        raise JaxprError(
            "custom_linear_solve: a matvec with constants cannot be differentiated", current().loc
        )
    _, touts = jvp_eval(
        matvec, consts + list(xs), consts_dot + [Zero(tangent_type(x.type)) for x in xs]
    )
    return touts


def _custom_linear_solve_jvp(primals, tangents, *, const_lengths, jaxprs):
    """JAX's `_custom_linear_solve_jvp`: A x = b gives x' = A^-1 (b' - A' x), solved by the
    same custom_linear_solve (so its linear part is a solve, transposed by transpose_solve)."""
    xs = _bind_linear_solve(*_split_solve_args(primals, const_lengths), const_lengths, jaxprs)
    consts, _ = _split_solve_args(primals, const_lengths)
    consts_dot, b_dot = _split_solve_args(tangents, const_lengths)
    n = len(b_dot)
    x_leaves = xs[:n]
    if all(is_zero(t) for t in consts_dot["matvec"]):
        rhs = b_dot
    else:
        matvec_tangents = _tangent_linear_map(
            _solve_field(jaxprs, "matvec"), consts["matvec"], consts_dot["matvec"], x_leaves
        )
        rhs = [
            add_tangents(bd, Zero(tangent_type(mt.type)) if is_zero(mt) else ops.neg(mt))
            for bd, mt in zip(b_dot, matvec_tangents)
        ]
    if all(is_zero(r) for r in rhs):
        return xs, [Zero(tangent_type(x.type)) for x in xs]
    x_dot = _bind_linear_solve(consts, [instantiate(r) for r in rhs], const_lengths, jaxprs)
    return xs, x_dot[:n] + [Zero(tangent_type(x.type)) for x in x_dot[n:]]


def _custom_linear_solve_transpose(cts, *args, const_lengths, jaxprs):
    """JAX's `_linear_solve_transpose_rule`: the cotangent of b is the solve with the
    transposed operator (matvec and vecmat, solve and transpose_solve exchanged)."""
    loc = current().loc
    if _solve_field(jaxprs, "transpose_solve") is None:
        raise JaxprError(
            "transpose_solve required for backwards mode automatic differentiation of "
            "custom_linear_solve (pass transpose_solve=, or symmetric=True, to "
            "lax.custom_linear_solve)",
            loc,
        )
    consts, b = _split_solve_args(args, const_lengths)
    operator = [x for k in _SOLVE_NAMES for x in consts[k]]
    ops.require_primal("custom_linear_solve in its operator's constants", operator, loc)
    x_ct, other = list(cts[: len(b)]), cts[len(b) :]
    if any(not is_zero(c) for c in other):
        raise JaxprError("custom_linear_solve: cotangents of auxiliary outputs", loc)
    if all(is_zero(c) for c in x_ct):
        return [None] * (len(args) - len(b)) + [Zero(tangent_type(x.type)) for x in b]
    swapped = {k: consts[_SOLVE_TRANSPOSED[k]] for k in _SOLVE_NAMES}
    lengths_t = _solve_record(
        {k: _solve_field(const_lengths, _SOLVE_TRANSPOSED[k]) for k in _SOLVE_NAMES}
    )
    out = _bind_linear_solve(
        swapped, [instantiate(c) for c in x_ct], lengths_t, _transposed_solve(jaxprs)
    )
    return [None] * (len(args) - len(b)) + out[: len(b)]


def _custom_linear_solve_batching(args, dims, *, const_lengths, jaxprs):
    """JAX's `_linear_solve_batching_rule`: a fixpoint of which parts of x and b are batched,
    consistent across the four jaxprs; batched operands move to axis 0."""
    from ..ad.batching import axis_size, batch_jaxpr, broadcast, moveaxis

    consts, b = _split_solve_args(args, const_lengths)
    cdims, b_dims = _split_solve_args(dims, const_lengths)
    cbat = {k: [d is not None for d in cdims[k]] for k in _SOLVE_NAMES}
    orig_b_bat = [d is not None for d in b_dims]
    js = {k: _solve_field(jaxprs, k) for k in _SOLVE_NAMES}
    n_op = len(js["matvec"].outvars)
    num_aux = len(js["solve"].outvars) - n_op
    b_bat, x_bat = orig_b_bat, [False] * len(js["solve"].outvars)
    for _ in range(2 + len(orig_b_bat) + len(x_bat)):
        batched = {}
        batched["solve"], solve_x_bat = batch_jaxpr(js["solve"], cbat["solve"] + b_bat, x_bat)
        if js["vecmat"] is None:
            batched["vecmat"], x_bat_out = None, solve_x_bat
        else:
            batched["vecmat"], vecmat_x_bat = batch_jaxpr(
                js["vecmat"], cbat["vecmat"] + b_bat, b_bat
            )
            x_bat_out = [a or c for a, c in zip(vecmat_x_bat + [True] * num_aux, solve_x_bat)]
        x_noaux = x_bat_out[:n_op]
        batched["matvec"], matvec_b_bat = batch_jaxpr(js["matvec"], cbat["matvec"] + x_noaux, b_bat)
        if js["transpose_solve"] is None:
            batched["transpose_solve"] = None
            b_bat_out = [a or c for a, c in zip(matvec_b_bat, orig_b_bat)]
        else:
            batched["transpose_solve"], st_bat = batch_jaxpr(
                js["transpose_solve"], cbat["transpose_solve"] + x_noaux, x_bat_out
            )
            b_bat_out = [a or c or o for a, c, o in zip(matvec_b_bat, st_bat[: len(b)], orig_b_bat)]
        if x_bat_out == x_bat and b_bat_out == b_bat:
            break
        x_bat, b_bat = x_bat_out, b_bat_out
    else:
        raise JaxprError("custom_linear_solve: batching did not reach a fixpoint", current().loc)

    def front(x, d):
        return x if d is None else moveaxis(x, d, 0)

    new_consts = {k: [front(x, d) for x, d in zip(consts[k], cdims[k])] for k in _SOLVE_NAMES}
    new_b = [
        broadcast(x, axis_size(), 0) if now and d is None else front(x, d)
        for x, d, now in zip(b, b_dims, b_bat)
    ]
    outs = _bind_linear_solve(new_consts, new_b, const_lengths, _solve_record(batched))
    return outs, [0 if bat else None for bat in solve_x_bat]


def _custom_linear_solve_lift_kept_consts(e, outer):
    """For the AD commands (`passes/hoist_consts.py`: `lift_kept_consts`): the constants a
    jaxpr of the solve keeps (a jit's inside matvec) as its leading inputs, and new
    operands at the head of its group (`const_lengths` counts them), as JAX's
    `custom_linear_solve` binds the constants each function closes over."""
    groups, b = _split_solve_args(e.inputs, e.params["const_lengths"])
    jaxprs, kept = {}, {}
    for k in _SOLVE_NAMES:
        j = _solve_field(e.params["jaxprs"], k)
        kept[k] = list(j.constvars) if isinstance(j, Jaxpr) else []
        jaxprs[k] = j.replace(constvars=(), invars=(*kept[k], *j.invars)) if kept[k] else j
    new = iter(outer([v for k in _SOLVE_NAMES for v in kept[k]]))
    inputs = [x for k in _SOLVE_NAMES for x in [*(next(new) for _ in kept[k]), *groups[k]]]
    lengths = _solve_record({k: len(groups[k]) + len(kept[k]) for k in _SOLVE_NAMES})
    params = dict(e.params, const_lengths=lengths, jaxprs=_solve_record(jaxprs))
    return e.replace(inputs=(*inputs, *b), params=params)


define(
    "custom_linear_solve",
    lift_kept_consts=_custom_linear_solve_lift_kept_consts,
    multiple_results=True,
    batching=_custom_linear_solve_batching,
    evaluate=_custom_linear_solve_evaluate,
    # the solve jaxpr gives the value; matvec and the transposes serve AD
    evaluated_params=frozenset({"const_lengths", "jaxprs"}),
    jvp=_custom_linear_solve_jvp,
    jvp_kind=LOW_LEVEL,
    transpose=_custom_linear_solve_transpose,
)


@shape_rule("CustomRoot")
def _custom_root_shape(in_types, params, out_hint):
    """0.12's lax.custom_root HiPrim: operands = initial guess + closed-over values."""
    j = jaxpr_param(params, "solve_jaxpr")
    k = len(j.invars)
    if len(in_types) < k:
        raise ShapeError(
            f"CustomRoot: solve_jaxpr takes {k} inputs, but the equation passes {len(in_types)}"
        )
    check_call_operands("CustomRoot", j, in_types[:k], what="solve_jaxpr")
    return out_types_of(j)


def _custom_root_evaluate(interp, eqn, invals, path):
    """JAX's `CustomRoot.expand`: the solve jaxpr on its closed-over values and the initial
    guess, the first operands; the rest (f's and tangent_solve's closed-over values) serve AD."""
    j = jaxpr_param(eqn.params, "solve_jaxpr")
    return interp.fn(j, eqn, path, "CustomRoot")(*invals[: len(j.invars)])


_CUSTOM_ROOT_NO_AD = (
    "'CustomRoot': differentiating a root with respect to the values its function `f` closes "
    "over needs `f` and `tangent_solve`, which JAX does not print (only `solve_jaxpr`); "
    "differentiate in JAX (`jax.grad` of the traced function) and pass the printed gradient"
)


def _custom_root_jvp(primals, tangents, **params):
    """JAX's `CustomRoot.lin`: the root's tangent is zero unless f's closed-over values have
    tangents (the solve's values and the guess do not move the root).  Those operands come
    after solve_jaxpr's; the text does not say which are f's and which tangent_solve's, so
    the rule is exact only when none of them has a tangent, and refuses otherwise."""
    k = len(jaxpr_param(params, "solve_jaxpr").invars)
    outs = rebind_primal("CustomRoot", list(primals), params)
    if any(not is_zero(t) for t in tangents[k:]):
        raise JaxprError(_CUSTOM_ROOT_NO_AD, current().loc)
    return outs, [Zero(tangent_type(o.type)) for o in outs]


def _custom_root_batching(args, dims, **params):
    """JAX's `CustomRoot.batch`: the operands stay where they are, the solve jaxpr is batched
    on its operands' axes, and the roots are batched at axis 0 (once anything is batched)."""
    j = jaxpr_param(params, "solve_jaxpr")
    k = len(j.invars)
    if all(d is None for d in dims):
        return current().bind("CustomRoot", list(args), params), [None] * len(j.outvars)
    solve, _ = BT.batch_jaxpr_axes(j, dims[:k], [0] * len(j.outvars))
    outs = current().bind("CustomRoot", list(args), {**params, "solve_jaxpr": solve})
    return outs, [0] * len(outs)


define(
    "CustomRoot",
    multiple_results=True,
    batching=_custom_root_batching,
    evaluate=_custom_root_evaluate,
    evaluated_params=frozenset({"solve_jaxpr", "has_aux"}),
    jvp=_custom_root_jvp,
    jvp_kind=LOW_LEVEL,
)


# run_state: the body runs on references initialised from the operands


@shape_rule("run_state")
def _run_state_shape(in_types, params, out_hint):
    _jaxpr_for(params, "run_state", "jaxpr", in_types, what="refs")
    return list(in_types)


def _run_state_evaluate(interp, eqn, invals, path):
    import jax.numpy as jnp

    from ..backend.evaluator import Box
    from ..backend.values import static_shape

    j = interp.body(eqn.params["jaxpr"], eqn)
    init = eqn.params.get("is_initialized")
    boxes = []
    for k, (v, x) in enumerate(zip(j.invars, invals)):
        if isinstance(x, Box):  # a Ref operand: the body writes that Ref itself
            boxes.append(x)
            continue
        if init is not None and not init[k]:
            x = jnp.zeros(static_shape(v.type.inner, interp.dims), v.type.inner.np_dtype)
        boxes.append(Box(x))
    interp.run(j, [], boxes, path + (("run_state",) if interp.mode == "eager" else ()))
    return [b.value for b in boxes]


def _run_state_batching(args, dims, **params):
    """Every Ref of the body batched at axis 0 (an unbatched initial value broadcast), as
    vmap batches every Ref made inside it; JAX 0.12 has no batching rule for run_state."""
    body, _ = BT.batch_jaxpr_axes(jaxpr_param(params, "jaxpr"), [0] * len(args), [])
    ins = [
        BT.broadcast(x, BT.axis_size(), 0) if d is None else BT.moveaxis(x, d, 0)
        for x, d in zip(args, dims)
    ]
    outs = current().bind("run_state", ins, {**params, "jaxpr": body})
    return outs, [0] * len(outs)


def _tangent_refs(body: Jaxpr, start: list[bool]) -> list[bool]:
    """Which of the body's Refs carry a tangent: those given one and, to a fixpoint (as JAX's
    `_run_state_jvp` finds on the discharged body), float Refs written a value that depends
    on one.  Conservative through nested equations (any differentiated input: every result
    and every float Ref operand)."""
    live = list(start)
    refs = {id(v) for v in body.invars if carries_tangent(v.type)}
    while True:
        carries = {id(v) for v, on in zip(body.invars, live) if on}
        for e in body.eqns:
            if not any(id(x) in carries for x in e.inputs if isinstance(x, Var)):
                continue
            carries.update(id(o) for o in e.outputs)
            carries.update(id(x) for x in e.inputs if id(x) in refs)
        new = [on or id(v) in carries for v, on in zip(body.invars, live)]
        if new == live:
            return live
        live = new


def _run_state_jvp(primals, tangents, *, jaxpr, **params):
    """JAX's `_run_state_jvp`: one run_state over the Refs and the tangent Refs of those that
    carry one (`_tangent_refs`; zeros where the initial value has none), marked linear."""
    from ..ad.jvp import jvp_masked

    body = jaxpr_param({"jaxpr": jaxpr}, "jaxpr")
    start = [not is_zero(t) and carries_tangent(v.type) for t, v in zip(tangents, body.invars)]
    nz = _tangent_refs(body, start) if any(start) else start
    outs_types = [x.type for x in primals]
    if not any(nz):
        return current().bind("run_state", list(primals), {**params, "jaxpr": jaxpr}), [
            Zero(tangent_type(t)) for t in outs_types
        ]
    jv, _ = jvp_masked(body, nz, False)
    tans = [instantiate(t) for t, m in zip(tangents, nz) if m]
    p = dict(params, jaxpr=jv)
    if "is_initialized" in p:
        init = tuple(p["is_initialized"])
        p["is_initialized"] = init + tuple(i for i, m in zip(init, nz) if m)
    if "which_linear" in p:
        p["which_linear"] = tuple(p["which_linear"]) + (True,) * len(tans)
    outs = current().bind("run_state", list(primals) + tans, p)
    n = len(primals)
    it = iter(outs[n:])
    return outs[:n], [next(it) if m else Zero(tangent_type(t)) for t, m in zip(outs_types, nz)]


def _run_state_linearization(primals, tangents, **params):
    """JAX 0.12 cannot linearize run_state either ("Linearization failed to produce known
    values for all output primals"): its body's primal and tangent halves share Refs."""
    if all(is_zero(t) for t in tangents):
        return current().bind("run_state", list(primals), params), [
            Zero(tangent_type(x.type)) for x in primals
        ]
    raise JaxprError(
        "reverse mode (linearize, vjp, grad) of run_state is not supported; JAX 0.12 refuses "
        'it too ("Linearization failed to produce known values"): use jvp, or write the '
        "program with jax.new_ref instead of run_state",
        current().loc,
    )


def _run_state_lift_kept_consts(e, outer):
    """For the AD commands (`passes/hoist_consts.py`: `lift_kept_consts`): JAX's `run_state`
    binds the constants its body closes over (`hoist_consts_to_refs`): each becomes a
    leading Ref of the body, initialised from a new leading operand and read whole at the
    start (the body's constvar is that read's result), not linear, its final value a
    leading result nothing uses."""
    body: Jaxpr = e.params["jaxpr"]
    params = dict(e.params, jaxpr=ops.consts_as_refs(body, e.loc))
    n = len(body.constvars)
    for k, lead in (("is_initialized", True), ("which_linear", False)):
        if isinstance(params.get(k), tuple):
            params[k] = (lead,) * n + params[k]
    unused = tuple(Var(v.type, None) for v in body.constvars)
    return e.replace(
        inputs=tuple(outer(body.constvars)) + tuple(e.inputs),
        outputs=unused + tuple(e.outputs),
        params=params,
    )


def _keep_whole(used_outs, e, dce_jaxpr, live_ins):
    """JAX's default DCE rule (`passes.dce.keep_whole`), imported when DCE runs."""
    from ..passes.dce import keep_whole

    return keep_whole(used_outs, e, dce_jaxpr, live_ins)


define(
    "run_state",
    lift_kept_consts=_run_state_lift_kept_consts,
    effectful=True,
    # JAX has no DCE rule for run_state: unused, it goes unless its body writes a live Ref
    # operand; used, it stays whole
    effects_in_bodies=lambda e: True,
    dce=_keep_whole,
    jvp=_run_state_jvp,
    linearization=_run_state_linearization,
    jvp_kind=LOW_LEVEL,
    batching=_run_state_batching,
    evaluate=_run_state_evaluate,
    # which_linear is AD's bookkeeping
    evaluated_params=frozenset("jaxpr is_initialized which_linear".split()),
)


# shard_map, xla_pmap: the body runs per shard / per device


_AXES_RE = LazyPattern(r"'([^']*)'\s*:\s*(\d+)")


def _mesh_sizes(mesh) -> dict[str, int]:
    return {k: int(v) for k, v in _AXES_RE.findall(str(mesh))}


def _spec_axes(spec) -> list[list[str]] | None:
    s = str(spec).strip()
    if not (s.startswith("P(") and s.endswith(")")):
        return None
    inner = s[2:-1]
    out, depth, cur = [], 0, ""
    for ch in inner:
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
            continue
        depth += ch in "([" and 1 or 0
        depth -= ch in ")]" and 1 or 0
        cur += ch
    if cur.strip():
        out.append(cur.strip())
    return [re.findall(r"'([^']*)'", e) for e in out]


def _as_list(v):
    if isinstance(v, (tuple, list)):
        return list(v)
    return None


@shape_rule("shard_map")
def _shard_map_shape(in_types, params, out_hint):
    j = _jaxpr_for(params, "shard_map", "jaxpr", in_types)
    sizes = _mesh_sizes(params.get("mesh", ""))
    specs = _as_list(params.get("out_specs"))
    outs = []
    for i, t in enumerate(j.out_types):
        if not isinstance(t, ShapedArray):
            outs.append(t)
            continue
        spec = _spec_axes(specs[i]) if specs is not None and i < len(specs) else None
        if spec is None or not sizes:
            if out_hint and i < len(out_hint):
                outs.append(out_hint[i])
                continue
            raise ShapeError("shard_map: cannot read out_specs")
        shape = list(t.shape)
        for d, axes in enumerate(spec[: len(shape)]):
            f = 1
            for a in axes:
                f *= sizes.get(a, 1)
            if isinstance(shape[d], int):
                shape[d] *= f
        outs.append(ShapedArray(tuple(shape), t.dtype, t.weak_type, t.memory_space, None))
    return outs


@shape_rule("xla_pmap")
def _xla_pmap_shape(in_types, params, out_hint):
    j = _jaxpr_for(params, "xla_pmap", "call_jaxpr", in_types)
    n = int_param(params, "axis_size")
    out_axes = _as_list(params.get("out_axes")) or [0] * len(j.outvars)
    outs = []
    for t, ax in zip(j.out_types, out_axes):
        if ax is None or not isinstance(t, ShapedArray):
            outs.append(t)
            continue
        shape = list(t.shape)
        shape.insert(int(ax), n)
        outs.append(t.update(shape=shape))
    return outs
