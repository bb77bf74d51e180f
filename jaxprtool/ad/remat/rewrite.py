"""Rewriting the programs by a plan: the primal program returns the saved values, the linear
program recomputes the others in one `remat2` call per segment."""

from __future__ import annotations

from ...core import Eqn, Jaxpr, JaxprError, ShapedArray, Var
from ...params import EnumValue
from ...record import prim as record_of
from .. import builder as B
from ..residuals import LinearizeInfo, forward_residuals
from .graph import Graph, Plan
from .records import in_host
from .request import _KINDS
from .segments import _crossing


def apply_plan(
    primal: Jaxpr, linear: Jaxpr, info: LinearizeInfo, g: Graph, plan: Plan, forward=True
):
    """(primal', linear', info'): the primal program returns `plan.saved` (an offloaded one
    copied to its memory after the equation that makes it), the linear program takes them
    and, in one `remat2` call, copies the offloaded ones back and recomputes the other
    residuals.  `forward=False` (nested bodies): every saved value is a result of the
    primal program, none forwarded."""
    from ...passes.dce import dce

    n_out = len(info.out_mask)
    n_res = len(info.residuals)
    outs = list(primal.outvars[:n_out])
    new_info = LinearizeInfo(info.in_mask, info.out_mask)
    peqns, held, made = _offload_copies(g, plan)
    peqns = _rounded(peqns, [v for v in plan.saved if id(v) not in plan.offload], g)
    new = forward_residuals(
        held,
        lambda v: made.get(id(v)) or (g.eqns[g.producer[id(v)]] if id(v) in g.producer else None),
        primal.invars if forward else (),
        primal.constvars if forward else (),
        outs if forward else (),
        new_info,
    )
    # (DCE prunes the results of a scan, call or cond that the linear program now makes)
    new_primal = dce(B.make_jaxpr(primal.invars, peqns, outs + new, primal.constvars))
    saved_in = [B.fresh_like(v) for v in held]
    by_saved = {id(v): b for v, b in zip(plan.saved, saved_in)}  # offloaded: its host copy
    tan_in = [B.fresh_like(v) for v in linear.invars[n_res:]]
    mapping: dict[int, object] = {id(a): b for a, b in zip(linear.invars[n_res:], tan_in)}
    # linear residual input -> the primal Var the remat2 call makes: recomputed, or an
    # offloaded one copied back
    inside: dict[int, Var] = {}
    for lv, pv in zip(linear.invars[:n_res], g.residuals):
        if id(pv) in by_saved and id(pv) not in plan.offload:
            mapping[id(lv)] = by_saved[id(pv)]
        else:
            inside[id(lv)] = pv
    eqns = B.substitute(list(linear.eqns), mapping)
    outvars = [mapping.get(id(x), x) if isinstance(x, Var) else x for x in linear.outvars]
    first, rest = _hoist_nonlinear(eqns, tan_in, inside)
    body = first + _remat_stretch(rest, outvars, inside, g, by_saved, plan)
    new_linear = B.make_jaxpr(saved_in + tan_in, body, outvars)
    return new_primal, new_linear, new_info


def _rounded(eqns: list[Eqn], saved, g: Graph) -> list[Eqn]:
    """`eqns` with each saved floating value that an equation made and another reads rounded
    to its own precision right after it, `reduce_precision[exponent_bits mantissa_bits]` (the
    identity in exact arithmetic), which every reader then reads: JAX's remat partial
    evaluation does so to each residual of a checkpoint (`_insert_reduce_precision`), so that
    XLA's excess precision cannot make the forward pass and the recomputation disagree.  XLA
    keeps it, and it changes XLA:TPU's buffers: JAX's per-layer dots_saveable gradient of the
    transformer of docs/ACCELERATOR.md holds 2.38 GB of temp bytes with it, 2.62 GB without.
    The values crossing segments are a layer's outputs and inputs, not residuals of one:
    they stay as they are, as in JAX's per-layer checkpoint; an offloaded value's residual is
    its host copy, which no equation reads: JAX rounds neither."""
    from ...core import is_float, long_dtype_name
    from ...lazy import ml_dtypes

    read = {id(x) for e in eqns for x in e.inputs}
    wanted = {
        id(v)
        for v in saved
        if id(v) in g.producer and id(v) not in g.boundary and is_float(v.type) and id(v) in read
    }
    if not wanted:
        return eqns

    def bits(v) -> dict:
        info = ml_dtypes.finfo(long_dtype_name(v.type.dtype))
        return {"exponent_bits": int(info.nexp), "mantissa_bits": int(info.nmant)}

    out: list[Eqn] = []
    for e in eqns:
        rounded = [o for o in e.outputs if id(o) in wanted]
        if e.prim == "reduce_precision" and rounded and e.params == bits(rounded[0]):
            rounded = []  # (rounded already)
        if not rounded:
            out.append(e)
            continue
        raw = {id(o): B.fresh_like(o) for o in rounded}
        out.append(e.replace(outputs=tuple(raw.get(id(o), o) for o in e.outputs)))
        out.extend(Eqn("reduce_precision", (raw[id(o)],), (o,), bits(o), e.loc) for o in rounded)
    return out


def _offload_copies(g: Graph, plan: Plan):
    """The primal equations with a copy to its memory after each offloaded value's equation,
    as JAX's partial evaluation emits it: (equations, the values held (the copies in place
    of the offloaded values), copy Var id -> its equation)."""
    copies: dict[int, Eqn] = {}
    for v in plan.saved:
        off = plan.offload.get(id(v))
        if off is None:
            continue
        e = g.eqns[g.producer[id(v)]]
        if _KINDS[off.src] != v.type.memory_space:
            raise JaxprError(
                f"--remat {plan.method}: offload_src={off.src}, but {e.prim} makes a value in "
                f"{v.type.memory_space or 'device'} memory (JAX's partial evaluation asserts "
                "they agree); give the value's memory kind as offload_src",
                e.loc,
            )
        copies[id(v)] = _copy(v, _in_space(v.type, _KINDS[off.dst]), off.dst)
    eqns: list[Eqn] = []
    for e in g.eqns:
        eqns.append(e)
        eqns.extend(copies[id(o)] for o in e.outputs if id(o) in copies)
    held = [copies[id(v)].outputs[0] if id(v) in copies else v for v in plan.saved]
    return eqns, held, {id(c.outputs[0]): c for c in copies.values()}


def _in_space(t, space: str | None):
    return ShapedArray(t.shape, t.dtype, t.weak_type, space, t.vma, t.named_shape)


def _copy(x: Var, out_type, kind: str) -> Eqn:
    """JAX's `device_put` of `x` to memory `kind`, as `partial_eval_jaxpr_custom` emits it."""
    space = EnumValue("MemorySpace", "Host" if _KINDS[kind] == "host" else "Device")
    params = {
        "copy_semantics": (EnumValue("ArrayCopySemantics", "ALWAYS_COPY"),),
        "devices": (space,),
        "srcs": (None,),
    }
    return Eqn("device_put", (x,), (Var(out_type, x.hint),), params)


def _offloaded_from(e: Eqn | None) -> Var | None:
    """The device value an offloaded copy (`_copy` to host memory) was made from, else None."""
    if e is None or e.prim != "device_put" or len(e.inputs) != 1:
        return None
    x = e.inputs[0]
    if not isinstance(x, Var) or in_host(x) or not in_host(e.outputs[0]):
        return None
    return x


def _hoist_nonlinear(eqns, tangents, inside):
    """(the equations that read no tangent (constants a rule built), the others): the first
    go ahead, since a `remat2` call gets only linear results, whose transposition is the
    call's.  One of them reading a value made inside the call is refused (no rule builds
    one: the linear programs of the corpus have none)."""
    lin = {id(t) for t in tangents}
    first, rest = [], []
    for e in eqns:
        if lin.isdisjoint(map(id, e.inputs)):
            if any(isinstance(x, Var) and id(x) in inside for x in e.inputs):
                raise JaxprError(
                    f"remat: '{e.prim}' of the linear program reads no tangent but a residual "
                    "the policy recomputes or offloads; save it (a policy that saves what "
                    "makes it, or everything_saveable)",
                    e.loc,
                )
            first.append(e)
        else:
            lin.update(id(o) for o in e.outputs)
            rest.append(e)
    return first, rest


def _remat_stretch(eqns, outvars, inside, g: Graph, by_saved, plan: Plan) -> list[Eqn]:
    """The linear equations with each stretch that reads values made inside (recomputed or
    copied back) wrapped in a `remat2` call, as JAX's transposed checkpoint is: each
    recomputed equation once, behind the call's barrier.  One stretch per segment of the
    plan (`g.segments`): from the first to the last equation that reads a value its
    segment recomputes (stretches that overlap are merged); the whole program's one
    stretch without segments."""
    seg_of = g.segments.of if g.segments is not None else None

    def segment(lv_id) -> int:
        i = g.producer.get(id(inside[lv_id]))
        return seg_of[i] if seg_of is not None and i is not None else 0

    span: dict[int, list[int]] = {}
    for k, e in enumerate(eqns):
        for x in e.inputs:
            if isinstance(x, Var) and id(x) in inside:
                s = span.setdefault(segment(id(x)), [k, k])
                s[1] = k
    if not span:
        return eqns
    merged: list[list[int]] = []
    for a, b in sorted(span.values()):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    if seg_of is not None:
        _close_gaps(merged, eqns)
    out: list[Eqn] = []
    prev = 0
    for a, b in merged:
        read_after = {id(x) for e in eqns[b + 1 :] for x in e.inputs}
        read_after.update(id(x) for x in outvars)
        out.extend(eqns[prev:a])
        out.append(_remat_call(eqns[a : b + 1], read_after, inside, g, by_saved, plan))
        prev = b + 1
    return out + eqns[prev:]


def _close_gaps(stretches: list[list[int]], eqns) -> None:
    """Make the segments' stretches `[a, b]` (in place) cover the linear program from the
    first one's start on: the equations between two stretches (those of a segment that read
    nothing it recomputes, e.g. a layer norm's mean) join the one before or after, cut where
    the fewest bytes of linear values cross, and the first stretch starts at the program's
    start.  Each call then transposes into its whole layer's backward, as JAX's per-layer
    checkpoint does: one cotangent crosses between calls, not the pieces of a layer norm."""
    cross = _crossing(eqns)
    stretches[0][0] = 0
    for prev, nxt in zip(stretches, stretches[1:]):
        lo, hi = prev[1] + 1, nxt[0]
        cut = min(range(lo, hi + 1), key=lambda t: (cross[t], -t))
        prev[1], nxt[0] = cut - 1, cut


def _remat_call(stretch, read_after, inside, g: Graph, by_saved, plan: Plan) -> Eqn:
    """The `remat2` call of one stretch: its body copies back the offloaded values it reads
    (from their host copies, its operands), recomputes the others, then runs the stretch;
    its results are the stretch's values read after it (`read_after`: their ids)."""
    want = list(
        {
            id(x): inside[id(x)]
            for e in stretch
            for x in e.inputs
            if isinstance(x, Var) and id(x) in inside
        }.items()
    )
    offload = plan.offload
    rec = g.closure(set(by_saved), [pv for _, pv in want], plan.reruns)
    # the body: fresh binders for the saved values it reads and the outer values the stretch
    # reads; the copies back and the recomputation cloned from the primal program; the stretch
    env: dict[int, Var] = {}
    binders: list[Var] = []
    operands: list = []
    cloned: list[Eqn] = []

    def bind_outer(outer):
        if id(outer) not in env:
            env[id(outer)] = B.fresh_like(outer)
            binders.append(env[id(outer)])
            operands.append(outer)
        return env[id(outer)]

    prim_env: dict[int, object] = {}

    def value(x):
        """The body's value of primal Var `x`: recomputed, else saved (free values are
        passed as saved ones), an offloaded one copied back at its first read."""
        if id(x) not in prim_env:
            v = bind_outer(by_saved[id(x)])
            if id(x) in offload:
                cloned.append(_copy(v, x.type, offload[id(x)].src))
                v = cloned[-1].outputs[0]
            prim_env[id(x)] = v
        return prim_env[id(x)]

    for i in rec:
        cloned.append(B.clone_eqn(plan.reruns.get(i, g.eqns[i]), value, prim_env))
    for lv, pv in want:
        env[lv] = value(pv)

    def read(x):
        return env[id(x)] if id(x) in env else bind_outer(x)

    body_eqns = [B.clone_eqn(e, read, env) for e in stretch]
    results = [o for e in stretch for o in e.outputs if id(o) in read_after]
    inner = B.make_jaxpr(binders, cloned + body_eqns, [env[id(o)] for o in results])
    # the call's results are the stretch's own Vars: later equations keep reading them
    return Eqn(
        "remat2",
        tuple(operands),
        tuple(results),
        {"jaxpr": inner, "prevent_cse": True, "differentiated": True, "policy": None},
    )


def feed_results(body: Jaxpr, positions) -> tuple[Jaxpr, list[int]]:
    """`body` reading the values of its results at `positions` from new binders (appended to
    its inputs) instead of computing them: (the new body, the positions it reads, one per
    distinct value: a literal result is read too, as the value it stands for).  A value made
    by an equation the policy may run again (a scan in a call's body) is fed to it too, and
    an offloaded copy's device value is copied back from it (as JAX's recomputation does),
    so that DCE can prune what made them."""
    made = {id(o): e for e in body.eqns for o in e.outputs}
    binder: dict[int, Var] = {}
    literal: dict[int, Var] = {}  # position of a literal result -> its binder
    read: list[int] = []
    back: list[Eqn] = []
    for k in positions:
        v = body.outvars[k]
        if not isinstance(v, Var):
            literal[k] = Var(v.type, None)
            read.append(k)
        elif id(v) not in binder:
            binder[id(v)] = b = B.fresh_like(v)
            read.append(k)
            src = _offloaded_from(made.get(id(v)))
            if src is not None and id(src) not in binder:
                back.append(_copy(b, src.type, "device"))
                binder[id(src)] = back[-1].outputs[0]
    eqns = list(back)
    for e in body.eqns:
        fed = [id(o) in binder for o in e.outputs]
        rule = record_of(e.prim).remat_feed
        if any(fed) and rule is not None:
            e = rule(e, fed)
        eqns.append(e)
    eqns = B.substitute(eqns, binder)
    outvars = [
        binder.get(id(x), x) if isinstance(x, Var) else literal.get(k, x)
        for k, x in enumerate(body.outvars)
    ]
    binders = [literal[k] if k in literal else binder[id(body.outvars[k])] for k in read]
    new = body.replace(invars=(*body.invars, *binders), eqns=eqns, outvars=outvars)
    return new, read
