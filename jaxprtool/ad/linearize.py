"""Linearize = JVP with a split builder (JAX: jvp + partial evaluation).

Every equation touching a tangent goes to the linear (tangent) program; the primal values it uses
become residuals.  Residuals that are primal inputs or primal outputs are forwarded rather than
returned twice (top-level form).  See docs/LINEARIZE_FORM.md for the combined printed form.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..core import Eqn, Jaxpr, Literal, Var, gc_paused, is_inexact
from ..expansion import refuse_large
from ..record import prim as record_of
from . import builder as B
from . import observe
from .jvp import _inst_list, diff_mask, jvp_eval, tangent_mask
from .ops import instantiate as inst_zero
from .residuals import LinearizeInfo, forward_residuals
from .zeros import Zero, is_zero, tangent_type

LINEAR_NAME = "linear"


class Split:
    """A JVP walk's two halves (`split_jvp`): the primal program's parts (its constants, inputs,
    outputs, equations), the residuals the linear half reads from it, and the linear
    program's parts (its tangent inputs, equations, output atoms), with the tangent mask
    of the inputs and which outputs carry a tangent."""

    __slots__ = (
        "consts", "primals", "outs", "peqns", "residuals", "tan_in", "teqns", "touts",
        "nonzeros", "out_nz",
    )  # fmt: skip

    def __init__(
        self, consts, primals, outs, peqns, residuals, tan_in, teqns, touts, nonzeros, out_nz
    ):  # fmt: skip
        self.consts, self.primals, self.outs, self.peqns = consts, primals, outs, peqns
        self.residuals, self.tan_in, self.teqns, self.touts = residuals, tan_in, teqns, touts
        self.nonzeros, self.out_nz = nonzeros, out_nz


def split_jvp(
    jaxpr: Jaxpr, nonzeros: Sequence[bool], instantiate, remat=None, plans=None, prune=True
):
    """JVP with a split builder; `remat`, `plans`: the request its rules' nested
    linearizations follow (by default the running builder's).  `prune=False`: the primal
    equations are returned without dead code elimination (a caller that eliminates it over
    the whole program it builds from them: vjp and grad)."""
    nonzeros = tangent_mask(jaxpr, nonzeros)
    inst = _inst_list(instantiate, len(jaxpr.outvars))
    b = B.Builder(split=True, remat=remat, plans=plans)
    consts = [B.fresh_like(v) for v in jaxpr.constvars]
    primals = [B.fresh_like(v) for v in jaxpr.invars]
    tan_in = [Var(tangent_type(v.type), None) for v, nz in zip(jaxpr.invars, nonzeros) if nz]
    b.mark_tangent(*tan_in)
    it = iter(tan_in)
    tangents = [
        next(it) if nz else Zero(tangent_type(v.type)) for v, nz in zip(jaxpr.invars, nonzeros)
    ]
    with B.use(b):
        outs, touts = jvp_eval(jaxpr, primals, tangents, consts)
        out_nz, tout_atoms = [], []
        for o, t, i in zip(jaxpr.outvars, touts, inst):
            if not is_inexact(o.type) or (is_zero(t) and not i):
                out_nz.append(False)
                continue
            out_nz.append(True)
            with b.tangent_mode():
                tout_atoms.append(inst_zero(t))
    teqns = B.dce_eqns(b.tangent_eqns, tout_atoms)
    residuals = B.free_vars(teqns, tout_atoms, bound=tan_in)
    recomputed = _recompute_constants(b.primal_eqns, teqns, tout_atoms, residuals)
    if recomputed is not teqns:
        teqns = recomputed
        residuals = B.free_vars(teqns, tout_atoms, bound=tan_in)
    peqns = B.dce_eqns(b.primal_eqns, list(outs) + residuals) if prune else b.primal_eqns
    return Split(
        consts, primals, outs, peqns, residuals, tan_in, teqns, tout_atoms, nonzeros, out_nz
    )


def _recompute_constants(peqns, teqns, tout_atoms, residuals):
    """Residuals that are constants (built from literals only, e.g. the zeros or 0.5s of a rule)
    are recomputed in the linear program rather than passed from the primal program.  Returns
    `teqns` itself when there are none (`residuals`: the free Vars of `teqns`)."""
    from ..core import eqn_subjaxprs

    const_eqn: dict[int, Eqn] = {}
    # asked of each primitive once, not of each equation
    recompute = {n: record_of(n).recompute_constant for n in {e.prim for e in peqns}}
    for e in peqns:
        if not recompute[e.prim]:
            continue
        for x in e.inputs:
            if x.__class__ is not Literal and id(x) not in const_eqn:
                break  # (an operand computed from a program input)
        else:
            if not eqn_subjaxprs(e):
                for o in e.outputs:
                    const_eqn[id(o)] = e
    if not const_eqn:
        return teqns
    need: set[int] = set()
    stack = [r for r in residuals if id(r) in const_eqn]
    if not stack:
        return teqns
    while stack:
        e = const_eqn[id(stack.pop())]
        if id(e) in need:
            continue
        need.add(id(e))
        stack.extend(x for x in e.inputs if isinstance(x, Var))
    # fresh binders: the primal program may keep its own copy of these equations
    mapping: dict[int, Var] = {}
    cloned = B.clone_eqns([e for e in peqns if id(e) in need], mapping)
    for i, x in enumerate(tout_atoms):
        if isinstance(x, Var) and id(x) in mapping:
            tout_atoms[i] = mapping[id(x)]
    return cloned + B.substitute(list(teqns), mapping)


def _linear_jaxpr(residuals, tan_in, teqns, tout_atoms) -> Jaxpr:
    res_in = [B.fresh_like(r) for r in residuals]
    tin = [B.fresh_like(t) for t in tan_in]
    mapping = {id(r): n for r, n in zip(residuals, res_in)}
    mapping.update({id(t): n for t, n in zip(tan_in, tin)})
    eqns = B.substitute(teqns, mapping)
    outs = [mapping.get(id(x), x) for x in tout_atoms]
    return B.make_jaxpr(res_in + tin, eqns, outs)


def linearize_masked(
    jaxpr: Jaxpr,
    nonzeros: Sequence[bool],
    instantiate: bool | Sequence[bool] = True,
    rerun: bool = False,
    copies: int = 1,
):
    """For nested use (call and control-flow rules): no forwarding.  A Ref input gets a
    tangent Ref when `nonzeros` says so (see `jvp.tangent_mask`).  `rerun`: the equation
    holding the body is one a policy may run again (scan, call, cond): see
    `remat.rematerialize_masked`; `copies`: how many instances of the body's residuals are
    held at once (a scan's length: they are stacked), for a budget on the peak.

    Returns `(primal_jaxpr, linear_jaxpr, out_nonzeros, num_res)`: `primal_jaxpr` maps the primal
    inputs to `(outs..., residuals...)`; `linear_jaxpr` maps `(residuals..., tangents...)` (one
    tangent per `nonzeros[i]`) to one tangent per `out_nonzeros[j]`."""
    remat, plans = B.remat_request()  # the request of the linearization running the rule
    sp = split_jvp(jaxpr, nonzeros, instantiate)
    residuals, out_nz = sp.residuals, sp.out_nz
    primal = B.make_jaxpr(sp.primals, sp.peqns, list(sp.outs) + residuals, sp.consts)
    linear = _linear_jaxpr(residuals, sp.tan_in, sp.teqns, sp.touts)
    if remat is None:
        return primal, linear, out_nz, len(residuals)
    from .remat import rematerialize_masked

    primal, linear, num_res = rematerialize_masked(
        primal, linear, len(sp.outs), len(residuals), remat, plans, rerun, copies
    )
    return primal, linear, out_nz, num_res


@gc_paused()
def linearize_jaxpr(
    jaxpr: Jaxpr,
    argnums: Sequence[int] | None = None,
    instantiate: bool = True,
    remat=None,
    plans: list | None = None,
    own_binders: bool = True,
):
    """`(primal_jaxpr, linear_jaxpr, info)` with residual forwarding.

    `primal_jaxpr`: `(primals...) -> (outs..., new residuals...)`; `linear_jaxpr`:
    `(residuals..., tangents...) -> (out_tangents...)`; `info.residuals[k]` says where the k-th
    residual input of the linear program comes from: a primal input, a primal output, or one of the
    new residual outputs of the primal program.

    `remat`: a rematerialization request (`remat.Spec`; `--remat`, `--remat-budget`), planned
    on the program (`remat.rematerialize`) and on the bodies its rules linearize (the split
    builder carries it to them: `linearize_masked`); the plans made are appended to `plans`
    (nested bodies first, the program last).  Without them, those of the linearization this
    one runs inside (a rule's), if any.  `own_binders=False`: see `_linearize_jaxpr`."""
    outer_remat, outer_plans = B.remat_request()
    remat = remat if remat is not None else outer_remat
    plans = plans if plans is not None else outer_plans
    return _linearize_jaxpr(jaxpr, argnums, instantiate, remat, plans, own_binders)


def _linearize_jaxpr(jaxpr: Jaxpr, argnums, instantiate, remat, plans, own_binders=True):
    """`own_binders=False`: the linear program may take the primal program's residual Vars
    as its inputs (no renamed copy of its equations), and the primal program may keep dead
    equations, where nothing but the caller sees them: no rematerialization, no observer
    (vjp and grad transpose it right away, and eliminate dead code over the result)."""
    refuse_large(jaxpr)
    mask = diff_mask(jaxpr, argnums)
    own = own_binders or remat is not None or observe.observed()
    sp = split_jvp(jaxpr, mask, instantiate, remat, plans, prune=own)
    residuals, outs = sp.residuals, sp.outs
    producer = {o: e for e in sp.peqns for o in e.outputs}  # (by the Vars themselves)
    info = LinearizeInfo(sp.nonzeros, sp.out_nz)
    new = forward_residuals(residuals, producer.get, sp.primals, sp.consts, outs, info)
    primal = B.make_jaxpr(sp.primals, sp.peqns, list(outs) + new, sp.consts)
    if own:
        linear = _linear_jaxpr(residuals, sp.tan_in, sp.teqns, sp.touts)
    else:
        linear = B.make_jaxpr(residuals + sp.tan_in, sp.teqns, sp.touts)
    if remat is not None:  # (the planner, numpy and scipy are loaded only where one runs)
        from .remat import rematerialize

        primal, linear, info = rematerialize(primal, linear, info, spec=remat, plans=plans)
    observe.notify("linearized", primal, linear, info)
    return primal, linear, info


def inline_primal(primal: Jaxpr, info: LinearizeInfo, own_binders: bool = True):
    """The primal program's equations over fresh inputs, ready to be followed by the linear part:
    (consts, inputs, eqns, primal outputs, the atoms that stand for each residual).
    `own_binders=False`: over the primal program's own inputs (no renamed copy of its
    equations), for a primal program nothing else uses."""
    n_out = len(info.out_mask)
    if own_binders:
        consts = [B.fresh_like(v) for v in primal.constvars]
        prim_in = [B.fresh_like(v) for v in primal.invars]
        mapping = {id(a): b for a, b in zip(primal.constvars, consts)}
        mapping.update({id(a): b for a, b in zip(primal.invars, prim_in)})
        eqns = B.substitute(list(primal.eqns), mapping)
        pouts = [mapping.get(id(x), x) for x in primal.outvars]
    else:
        consts, prim_in = list(primal.constvars), list(primal.invars)
        eqns, pouts = list(primal.eqns), list(primal.outvars)
    outs, new = pouts[:n_out], pouts[n_out:]
    sources = {"input": prim_in, "const": consts, "output": outs, "new": new}
    res_atoms = [sources[r.source][r.index] for r in info.residuals]
    return consts, prim_in, eqns, outs, res_atoms


def combine(primal: Jaxpr, linear: Jaxpr, info: LinearizeInfo) -> Jaxpr:
    """The combined form: `(primals..., tangents...) -> (outs..., out_tangents...)`, the primal
    equations inline and the linear program nested in one `jit[name=linear]` equation whose
    operands are the residuals then the tangents."""
    consts, prim_in, eqns, outs, res_atoms = inline_primal(primal, info)
    n_res = len(info.residuals)
    tan_in = [B.fresh_like(v) for v in linear.invars[n_res:]]
    touts: list = []
    if linear.outvars:
        touts = [Var(v.type, None) for v in linear.outvars]
        eqns.append(
            Eqn(
                "jit",
                tuple(res_atoms + tan_in),
                tuple(touts),
                {"name": LINEAR_NAME, "jaxpr": linear},
            )
        )
    return B.make_jaxpr(prim_in + tan_in, eqns, list(outs) + touts, consts)


def linearize_combined(jaxpr: Jaxpr, argnums=None, instantiate: bool = True, opt=None) -> Jaxpr:
    """linearize_jaxpr + combine (`opt`, a Jaxpr->Jaxpr function, runs on each part first)."""
    primal, linear, info = linearize_jaxpr(jaxpr, argnums, instantiate)
    if opt is not None:
        linear = opt(linear)
    return combine(primal, linear, info)


def find_linear_eqn(jaxpr: Jaxpr):
    """Recognise the combined form: (index of the `jit[name=linear]` equation, number of tangent
    inputs) or None.  With several such equations (a linearized linearization) the last one whose
    operands end with the jaxpr's last inputs wins; when none does, the last one, with no tangent
    inputs (the linearization of a program without float inputs)."""
    inlinable: dict[str, bool] = {}  # by primitive: the records are asked once each
    idx = []
    for i, e in enumerate(jaxpr.eqns):
        if not e.params:
            continue  # (a call has its body among them)
        call = inlinable.get(e.prim)
        if call is None:
            call = inlinable[e.prim] = bool(record_of(e.prim).inlinable)
        if call and str(e.params.get("name")) == LINEAR_NAME:
            idx.append(i)
    for k in reversed(idx):
        t = _tangent_suffix(jaxpr, k)
        if t:
            return k, t
    return (idx[-1], 0) if idx else None


def _tangent_suffix(jaxpr: Jaxpr, k: int) -> int:
    eqn = jaxpr.eqns[k]
    used_elsewhere: set[int] = set()
    for i, e in enumerate(jaxpr.eqns):
        if i != k:
            used_elsewhere.update(id(x) for x in e.inputs if isinstance(x, Var))
    used_elsewhere.update(id(x) for x in jaxpr.outvars if isinstance(x, Var))
    ops_, inv = list(eqn.inputs), list(jaxpr.invars)
    t = 0
    while t < len(ops_) and t < len(inv):
        a, v = ops_[-1 - t], inv[-1 - t]
        if a is not v or id(v) in used_elsewhere:
            break
        t += 1
    return t
