"""Forward mode: `jvp_jaxpr` and the equation interpreter shared by linearize.

The JVP form of a jaxpr `(x...) -> (y...)` is `(x..., tx...) -> (y..., ty...)`, where only
float/complex inputs chosen by `argnums` get a tangent input and only float/complex outputs get a
tangent output.  An equation whose input tangents are all (symbolically) zero is copied as is and
its output tangents are Zero: no rule runs, no tangent equation is emitted.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..core import (
    Atom,
    Eqn,
    Jaxpr,
    JaxprError,
    Literal,
    ProgramError,
    ShapedArray,
    Var,
    gc_paused,
    is_inexact,
)
from ..record import did_you_mean, loaded_record
from ..record import prim as record_of
from . import builder as B
from . import observe
from .ops import instantiate as inst_zero
from .registry import check_rule_type, jvp_kind_of, located_rule
from .zeros import Zero, carries_tangent, is_zero, same_tangent_type, tangent_type


def missing_jvp(eqn: Eqn) -> JaxprError:
    return JaxprError(
        f"Differentiation rule for '{eqn.prim}' not implemented" + did_you_mean(eqn.prim),
        eqn.loc,
    )


def integer_valued(eqn: Eqn) -> bool:
    """Every result is an integer or boolean array: no tangent can flow out of the equation,
    so it needs no JVP rule (JAX gives such results float0 tangents, i.e. none)."""
    return bool(eqn.outputs) and all(
        isinstance(o.type, ShapedArray) and not is_inexact(o.type) for o in eqn.outputs
    )


def jvp_eval(
    jaxpr: Jaxpr, primals: Sequence[Atom], tangents: Sequence, consts: Sequence[Atom] | None = None
):
    """Emit the JVP of `jaxpr` into the current builder: (primal outs, tangent outs (Atom|Zero)).
    Each step is reported to the observer installed with `observe.observing` (if any)."""
    with observe.take() as obs:
        return _jvp_eval(jaxpr, primals, tangents, consts, obs)


def _jvp_eval(jaxpr, primals, tangents, consts, obs):
    # (each rule is called from this function's loop itself: a body's walk, run by its
    # rule, is one frame deeper per level of nesting, as few as can be)
    b = B.current()
    env, tenv, consts = _bind_inputs(jaxpr, primals, tangents, consts)
    if obs is not None:
        obs.jvp_begin(jaxpr, list(primals), list(tangents), consts)
    saved_loc, saved_eqn = b.loc, b.cur_eqn
    split = b.split
    tget = tenv.get  # (a tangent is a Var: never false)
    # (`env` and `tenv` are keyed by the Vars themselves, which hash by identity in C: no
    # `id` call and no int made per operand; a literal is never looked up in `env`)
    eqn = None
    try:
        for eqn in jaxpr.eqns:
            ins = [x if x.__class__ is Literal else env[x] for x in eqn.inputs]  # read
            rec = loaded_record(eqn.prim) or record_of(eqn.prim)
            # in a split (linearize) builder, the record's `linearization` when it has one
            rule = rec.linearization if split and rec.linearization is not None else rec.jvp
            # (`tenv` holds Vars only: a literal operand is never in it)
            for x in eqn.inputs:
                if x.__class__ is not Literal and x in tenv:
                    no_tangent = False
                    break
            else:
                no_tangent = not (rule is not None and rec.jvp_on_zero_tangents)
            b.loc = eqn.loc
            b.cur_eqn = eqn
            copy = no_tangent or (rule is None and integer_valued(eqn))
            if obs is None and copy:
                _copy(b, eqn, ins, env)
                continue
            tins = [
                (x.__class__ is not Literal and tget(x)) or _zero_tangent(x) for x in eqn.inputs
            ]  # (`_tangent_in`)
            step = observe.Emitted(b) if obs is not None else None
            if copy:  # (in an observed walk)
                outs = _copy(b, eqn, ins, env)
                obs.jvp_step(eqn, "copy", ins, tins, outs, [], step)
                continue
            if rule is None:
                raise missing_jvp(eqn)
            if obs is None:
                if rule is rec.jvp and rec.plugin_sources:  # (into an observed caller's step)
                    observe.note_plugin_rule(rec, "jvp")
                try:
                    pouts, touts = rule(ins, tins, **eqn.params)
                except Exception:
                    with located_rule(eqn):  # (an error located at the equation)
                        raise
            else:
                with observe.noting(obs, eqn, jvp_kind_of(rec)), located_rule(eqn):
                    if rule is rec.jvp:  # (a nested walk notes into its caller's step)
                        observe.note_plugin_rule(rec, "jvp")
                    pouts, touts = rule(ins, tins, **eqn.params)
            pouts, touts = _record_results(eqn, rule, pouts, touts, env, tenv)
            if obs is not None:
                obs.jvp_step(eqn, jvp_kind_of(rec), ins, tins, pouts, touts, step)
    except Exception as err:
        if obs is not None:
            obs.step_failed(eqn, err)
        raise
    finally:
        b.loc, b.cur_eqn = saved_loc, saved_eqn
    outs = [x if x.__class__ is Literal else env[x] for x in jaxpr.outvars]
    touts = [_tangent_in(x, tenv) for x in jaxpr.outvars]
    return outs, touts


def _bind_inputs(jaxpr, primals, tangents, consts):
    """(the primal value of each input and const by Var, the tangent of each input that
    has one by Var, the consts)."""
    env: dict[Var, Atom] = {}
    tenv: dict[Var, object] = {}
    consts = list(consts) if consts is not None else list(jaxpr.constvars)
    for v, x in zip(jaxpr.constvars, consts):
        env[v] = x
    for v, x, t in zip(jaxpr.invars, primals, tangents):
        env[v] = x
        if not is_zero(t) and carries_tangent(v.type):
            tenv[v] = t
    return env, tenv, consts


def _copy(b, eqn, ins, env) -> list:
    """Emit `eqn` on the primal values `ins` (no tangent reaches it); its new results."""
    outs = b.emit(
        eqn.prim, ins, eqn.params, [o.type for o in eqn.outputs], [o.hint for o in eqn.outputs]
    )
    for o, n in zip(eqn.outputs, outs):
        env[o] = n
    return outs


def _tangent_in(x, tenv):
    """The tangent of the atom `x` (Zero for a literal or a value without one)."""
    if x.__class__ is Literal:
        return Zero(tangent_type(x.type))
    return tenv.get(x) or Zero(tangent_type(x.type))


def _zero_tangent(x) -> Zero:
    """The tangent of an atom without one (a literal's tangent is one of these too)."""
    return Zero(tangent_type(x.type))


def _record_results(eqn, rule, pouts, touts, env, tenv):
    """Record what the JVP rule of `eqn` returned: its results' primal values in `env`,
    their tangents (checked against the results' types) in `tenv`; (pouts, touts) as lists."""
    if pouts.__class__ is not list:
        pouts = list(pouts)
    if touts.__class__ is not list:
        touts = list(touts)
    outputs = eqn.outputs
    n = len(outputs)
    if len(pouts) != n or len(touts) != n:
        raise JaxprError(
            f"internal error: the JVP rule of '{eqn.prim}' returned the wrong number of results",
            eqn.loc,
        )
    for k in range(n):
        o, t = outputs[k], touts[k]
        env[o] = pouts[k]
        if t is None or t.__class__ is Zero:
            continue
        ot = o.type
        if carries_tangent(ot):
            # (a tangent of the result's own type is of its tangent type, or of the same
            # dtype and shape: `check_rule_type` passes it)
            if t.type is not ot and not same_tangent_type(t.type, ot):
                want = tangent_type(ot)
                if t.type is not want:  # (the message only when the types differ)
                    check_rule_type("JVP", eqn, rule, f"tangent for result {k}", t.type, want)
            tenv[o] = t
    return pouts, touts


def _inst_list(instantiate, n):
    if isinstance(instantiate, bool):
        return [instantiate] * n
    return list(instantiate)


def tangent_mask(jaxpr: Jaxpr, nonzeros: Sequence[bool]) -> list[bool]:
    """Which inputs of a body get a tangent: the float/complex ones `nonzeros` marks and the
    Refs it marks (their tangents are Refs).  Every body rule passes a differentiated Ref's
    tangent Ref into its body and keeps the differentiated equation even when no tangent
    comes out of it (`zeros.writes_tangent_ref`): the body's derivative writes into it."""
    return [bool(nz) and carries_tangent(v.type) for nz, v in zip(nonzeros, jaxpr.invars)]


def jvp_masked(
    jaxpr: Jaxpr,
    nonzeros: Sequence[bool],
    instantiate: bool | Sequence[bool] = True,
):
    """JAX's `jvp_jaxpr(jaxpr, nonzeros, instantiate)`; a Ref input gets a tangent Ref when
    `nonzeros` says so (see `tangent_mask`).

    Returns `(jvp_jaxpr, out_nonzeros)`: inputs are the primals then one tangent per input with
    `nonzeros[i]`; outputs are the primal outputs then one tangent per output with
    `out_nonzeros[j]` (an output is nonzero when its tangent is not symbolically zero or when
    `instantiate[j]`; int/bool outputs never have tangents)."""
    nonzeros = tangent_mask(jaxpr, nonzeros)
    inst = _inst_list(instantiate, len(jaxpr.outvars))
    b = B.Builder()
    consts = [B.fresh_like(v) for v in jaxpr.constvars]
    primals = [B.fresh_like(v) for v in jaxpr.invars]
    tangents_in = [Var(tangent_type(v.type), None) for v, nz in zip(jaxpr.invars, nonzeros) if nz]
    it = iter(tangents_in)
    tangents = [
        next(it) if nz else Zero(tangent_type(v.type)) for v, nz in zip(jaxpr.invars, nonzeros)
    ]
    with B.use(b):
        outs, touts = jvp_eval(jaxpr, primals, tangents, consts)
        out_nz = []
        tout_atoms = []
        for o, t, i in zip(jaxpr.outvars, touts, inst):
            if not is_inexact(o.type) or (is_zero(t) and not i):
                out_nz.append(False)
                continue
            out_nz.append(True)
            tout_atoms.append(inst_zero(t))
    eqns = B.dce_eqns(b.eqns, list(outs) + tout_atoms)
    j = B.make_jaxpr(primals + tangents_in, eqns, list(outs) + tout_atoms, consts)
    return j, out_nz


def diff_mask(jaxpr: Jaxpr, argnums: Sequence[int] | None) -> list[bool]:
    """Which inputs get a tangent: the inexact ones among `argnums` (all inexact ones when None).

    Naming an input that is not float/complex is an error."""
    n = len(jaxpr.invars)
    if argnums is None:
        return [is_inexact(v.type) for v in jaxpr.invars]
    mask = [False] * n
    for i in argnums:
        if not -n <= i < n:
            raise ProgramError(
                f"argnums: input {i} does not exist (the jaxpr has {n} inputs)", "inputs"
            )
        v = jaxpr.invars[i]
        if not is_inexact(v.type):
            raise ProgramError(
                f"argnums: input {i % n} has type {v.type}; only float and complex inputs can be differentiated",
                "inputs",
            )
        mask[i % n] = True
    return mask


@gc_paused()
def jvp_jaxpr_info(jaxpr: Jaxpr, argnums=None, instantiate=True):
    """(jvp jaxpr, input mask, output mask)."""
    mask = diff_mask(jaxpr, argnums)
    j, out_nz = jvp_masked(jaxpr, mask, instantiate)
    return j, mask, out_nz


@gc_paused()
def jvp_jaxpr(
    jaxpr: Jaxpr, argnums: Sequence[int] | None = None, instantiate: bool = True
) -> Jaxpr:
    """`(primals..., tangents...) -> (outs..., out_tangents...)`; see the module docstring."""
    return jvp_jaxpr_info(jaxpr, argnums, instantiate)[0]
