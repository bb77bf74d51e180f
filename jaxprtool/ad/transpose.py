"""Transposition of linear programs (JAX's `backward_pass`).

A forward scan marks the values that depend on the linear inputs; equations that do not are
re-emitted forward (they compute non-linear values such as residual arithmetic); then a reverse
walk over the linear equations accumulates cotangents with `add_any`, using
`primitive_transposes` (rules return cotangents) or `fancy_transposes` (rules add into
accumulators).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..core import (
    Atom,
    Jaxpr,
    JaxprError,
    Literal,
    NotLinear,
    ProgramError,
    RefType,
    Var,
    gc_paused,
)
from ..expansion import refuse_large
from ..record import did_you_mean, loaded_record
from ..record import prim as record_of
from . import builder as B
from . import observe, ops
from .ops import add_tangents
from .ops import instantiate as inst_zero
from .registry import check_rule_type, located_rule
from .zeros import UndefinedPrimal, Zero, is_zero, same_tangent_type, tangent_type


def missing_transpose(eqn) -> JaxprError:
    return JaxprError(
        f"Transpose rule (for reverse-mode differentiation) for '{eqn.prim}' not implemented"
        + did_you_mean(eqn.prim),
        eqn.loc,
    )


def _linear_refs(jaxpr: Jaxpr, linear: set[Var], ref_inputs) -> set[Var]:
    """The Refs that hold linear values: those made from one or written with one (to a fixed
    point, since a read from such a Ref is linear in turn).  As in JAX's backward pass their
    cotangents are Refs, made when the first cotangent arrives; the Refs of primal work (the
    combined linearize form's primal part, scratch Refs of residual arithmetic) stay forward."""
    refs: set[Var] = set(ref_inputs)
    if not refs and not any(o.type.__class__ is RefType for e in jaxpr.eqns for o in e.outputs):
        return refs
    while True:
        lin = linear | refs
        found = set()
        for e in jaxpr.eqns:
            if lin.isdisjoint(e.inputs) and refs.isdisjoint(e.outputs):
                continue
            lin.update(e.outputs)
            found.update(x for x in (*e.inputs, *e.outputs) if x.type.__class__ is RefType)
        if found <= refs:
            return refs
        refs |= found


def _ref_operands(e, rec, linear, ct_env, targs) -> None:
    """A differentiated Ref operand of a rule that returns cotangents: the rules marked
    `transposes_refs` (calls, loops) get its cotangent Ref (made of zeros if no cotangent has
    reached it yet) to pass into their transposed bodies; other rules cannot take one."""
    for k, x in enumerate(e.inputs):
        if x.__class__ is not Var or x not in linear or x.type.__class__ is not RefType:
            continue
        if not rec.transposes_refs:
            raise JaxprError(
                f"reverse mode of '{e.prim}' with a differentiated Ref operand is not supported "
                "(calls, scans and conds carry cotangent Refs; this equation does not): move "
                "the Ref's reads and writes out of it, or use jvp",
                e.loc,
            )
        ref = ct_env.get(x) or ops.zeros_ref(x.type)
        ct_env[x] = ref
        targs[k] = UndefinedPrimal(x.type, ref)


def transposed_inputs(invars, linear_mask, ref_mask) -> tuple[list[Var], list]:
    """The inputs a transposed body takes for `invars`: a fresh Var per non-linear input and
    a cotangent Ref (written into) per differentiated Ref (`ref_mask`), in order; and the
    `args` `backward_pass` takes for them (None for the other linear inputs)."""
    new: list[Var] = []
    args: list = []
    for v, lin, r in zip(invars, linear_mask, ref_mask):
        if not (r or lin):
            new.append(B.fresh_like(v))
        elif r:
            new.append(Var(RefType(tangent_type(v.type.inner)), None))
        else:
            args.append(None)
            continue
        args.append(new[-1])
    return new, args


def backward_pass(
    jaxpr: Jaxpr, linear_mask: Sequence[bool], args: Sequence, cts_out: Sequence, consts=None
):
    """Emit the transpose of `jaxpr` into the current builder.

    `args[i]` is an Atom for a non-linear input (for a linear Ref, its cotangent Ref; ignored
    for other linear ones); `cts_out[j]` the
    cotangent (Atom or Zero) of output j.  Returns `(outs, cts_in)`: `outs[j]` is the value of
    output j when it is non-linear (None otherwise), `cts_in[i]` the cotangent (Atom or Zero) of
    each linear input (None for non-linear ones).  Each step is reported to the observer
    installed with `observe.observing` (if any)."""
    # (the rules are called from `_Backward.reverse`, called from here: a body's backward
    # pass, run by its rule, is two frames deeper per level of nesting, as few as can be)
    with observe.take() as obs:
        walk = _Backward(B.current(), obs)
        consts = list(consts) if consts is not None else list(jaxpr.constvars)
        walk.bind_inputs(jaxpr, linear_mask, args, consts)
        if obs is not None:
            obs.transpose_begin(jaxpr, list(linear_mask), list(args), list(cts_out), consts)
        b = walk.b
        saved = b.loc
        walk.refs = _linear_refs(jaxpr, walk.linear, walk.ct_ref_in)
        try:
            lin_eqns = walk.forward(jaxpr.eqns)
            for v, ct in zip(jaxpr.outvars, cts_out):
                if v.__class__ is Var and v in walk.linear:
                    walk.add_ct(v, ct)
            walk.reverse(lin_eqns)
        except Exception as err:
            if obs is not None:
                obs.step_failed(walk.eqn, err)
            raise
        finally:
            b.loc = saved
        return walk.results(jaxpr, linear_mask)


class _Backward:
    """The state of one backward pass: the forward values (`env`), the linear Vars, the
    cotangents accumulated so far (`ct_env`, by linear Var; never a Zero), and the equation
    being worked on (`eqn`, for the observer's `step_failed`).  The tables are keyed by the
    Vars themselves (they hash by identity, in C): no `id` call and no int made per operand,
    as keys by id would; a literal operand is tested by its class first (its hash is
    Python's)."""

    __slots__ = ("b", "obs", "env", "linear", "ct_env", "ct_ref_in", "refs", "eqn")

    def __init__(self, b, obs):
        self.b = b
        self.obs = obs
        self.env: dict[Var, Atom] = {}
        self.linear: set[Var] = set()
        self.ct_env: dict[Var, object] = {}
        #: a linear Ref input -> the cotangent Ref it writes into
        self.ct_ref_in: dict[Var, Atom] = {}
        self.refs: set[Var] = set()
        self.eqn = None

    def bind_inputs(self, jaxpr, linear_mask, args, consts) -> None:
        env, linear = self.env, self.linear
        for v, x in zip(jaxpr.constvars, consts):
            env[v] = x
        for v, lin, a in zip(jaxpr.invars, linear_mask, args):
            if not lin:
                env[v] = a
                continue
            linear.add(v)
            if v.type.__class__ is RefType:  # a body's Ref: the cotangent Ref it writes into
                if a is None:
                    raise JaxprError(
                        "reverse mode of a program that takes a differentiated Ref as an input "
                        "is not supported (its cotangent would be a Ref): make the Ref inside it"
                    )
                self.ct_ref_in[v] = a
        self.ct_env.update(self.ct_ref_in)

    def forward(self, eqns) -> list:
        """Re-emit the equations that do not depend on the linear inputs; the others, in
        order (`linear` gains their results)."""
        linear, refs = self.linear, self.refs
        lin_eqns = []
        add = linear.add
        for e in eqns:
            # (`linear` holds Vars only: a literal operand is never in it)
            for x in e.inputs:
                if x.__class__ is not Literal and x in linear:
                    break
            else:
                if not refs or refs.isdisjoint(e.outputs):
                    self.emit_forward(e)
                    continue
            for o in e.outputs:
                add(o)
            lin_eqns.append(e)
        self.eqn = None
        return lin_eqns

    def emit_forward(self, e) -> None:
        """Emit `e`, which computes no linear value, on the forward values."""
        b, obs, env = self.b, self.obs, self.env
        self.eqn = e
        b.loc = e.loc
        step = observe.Emitted(b) if obs is not None else None
        outs = b.emit(
            e.prim,
            [x if x.__class__ is Literal else env[x] for x in e.inputs],
            e.params,
            [o.type for o in e.outputs],
            [o.hint for o in e.outputs],
        )
        for o, n in zip(e.outputs, outs):
            env[o] = n
        if obs is not None:
            obs.forward_step(e, step)

    def add_ct(self, v, ct, eqn=None, rule=None) -> None:
        """Add the cotangent `ct` (Atom, Zero or None) that `eqn`'s transpose `rule` gave
        (None: an output's) into `v`'s."""
        if ct is None or ct.__class__ is Zero:
            return
        if rule is not None and ct.type is not v.type and not same_tangent_type(ct.type, v.type):
            check_rule_type("transpose", eqn, rule, "cotangent", ct.type, tangent_type(v.type))
        ct_env, obs = self.ct_env, self.obs
        prev = ct_env.get(v)
        if prev is None:  # the first cotangent: add_tangents(Zero, ct) is ct
            ct_env[v] = ct
            if obs is not None:
                obs.cotangent(eqn, v, ct, Zero(tangent_type(v.type)), ct)
            return
        ct_env[v] = add_tangents(prev, ct)
        if obs is not None:
            obs.cotangent(eqn, v, ct, prev, ct_env[v])

    def reverse(self, lin_eqns) -> None:
        """Transpose the linear equations, last first."""
        b, obs, env, linear, ct_env, refs = (
            self.b,
            self.obs,
            self.env,
            self.linear,
            self.ct_env,
            self.refs,
        )
        pop = ct_env.pop
        for e in reversed(lin_eqns):
            outs = e.outputs
            if len(outs) == 1:  # (most equations)
                ct = pop(outs[0], None)
                got = None if ct is None else [ct]
            else:
                got = [pop(o, None) for o in outs]
                if not any(got):  # (a cotangent is an Atom: never false)
                    got = None
            rec = loaded_record(e.prim) or record_of(e.prim)
            if (
                got is None
                and rec.fancy_transpose is None
                and (not refs or refs.isdisjoint(e.inputs))  # a write into a Ref
            ):
                continue
            self.eqn = e
            if got is None:
                cts = [Zero(tangent_type(o.type)) for o in outs]
            elif len(got) == 1:
                cts = got
            else:
                cts = [Zero(tangent_type(o.type)) if ct is None else ct for o, ct in zip(outs, got)]
            targs = [
                x if x.__class__ is Literal else UndefinedPrimal(x.type) if x in linear else env[x]
                for x in e.inputs
            ]
            b.loc = e.loc
            step = observe.Emitted(b) if obs is not None else None
            fancy = rec.fancy_transpose
            if fancy is not None:
                rule = fancy
                accums = self.accumulators(e, fancy)
                params = dict(e.params, accums=accums)
            else:
                rule = rec.transpose
                if rule is None:
                    raise missing_transpose(e)
                if refs:
                    _ref_operands(e, rec, linear, ct_env, targs)
                params = e.params
            if obs is None:
                if rec.plugin_sources:  # (into an observed caller's step)
                    observe.note_plugin_rule(rec, "transpose")
                try:
                    res = rule(cts, *targs, **params)
                except Exception:
                    with located_rule(e):  # (an error located at the equation)
                        raise
            else:
                with observe.noting(obs, e, "transpose"), located_rule(e):
                    observe.note_plugin_rule(rec, "transpose")
                    res = rule(cts, *targs, **params)
            if fancy is not None:
                res = self.add_accumulated(e, fancy, accums)
            else:
                res = self.add_transposed(e, rule, res)
            if obs is not None:
                obs.transpose_step(e, cts, res, step)
        self.eqn = None

    def add_transposed(self, e, rule, res) -> list:
        """Add the cotangents the transpose `rule` of `e` returned into its linear
        operands'; what it gave each linear operand (None for the others)."""
        res = list(res)  # (a copy: the rule's own list is left as it is)
        inputs = e.inputs
        if len(res) != len(inputs):
            raise JaxprError(
                f"internal error: the transpose rule of '{e.prim}' returned {len(res)} "
                f"cotangents for {len(inputs)} operands",
                e.loc,
            )
        linear = self.linear
        for k, x in enumerate(inputs):
            # (`linear` holds Vars only: a literal operand is never in it)
            if x.__class__ is not Literal and x in linear:
                if x.type.__class__ is not RefType:
                    self.add_ct(x, res[k], e, rule)
            else:
                res[k] = None
        return res

    def accumulators(self, e, rule) -> list:
        """The accumulators a rule that adds into them (`fancy_transposes`) gets: one per
        linear operand (None for the others), a Ref's holding its cotangent Ref so far."""
        from .registry import Accumulator

        linear, ct_env = self.linear, self.ct_env
        owner = (e, rule)
        accums = [
            Accumulator(x.type, owner) if x.__class__ is not Literal and x in linear else None
            for x in e.inputs
        ]
        for x, acc in zip(e.inputs, accums):
            if acc is not None and x.type.__class__ is RefType:
                acc.set(ct_env.get(x) or Zero(tangent_type(x.type)))
        return accums

    def add_accumulated(self, e, rule, accums) -> list:
        """Add what the rule of `e` accumulated into its linear operands' cotangents; the
        accumulated values (None for the operands that are not linear)."""
        ct_env = self.ct_env
        res = [acc.get() if acc is not None else None for acc in accums]
        for x, r in zip(e.inputs, res):
            if r is None:
                continue
            if x.type.__class__ is RefType:  # the cotangent Ref, made or kept
                if not is_zero(r):
                    ct_env[x] = r
            else:
                self.add_ct(x, r, e, rule)
        return res

    def results(self, jaxpr, linear_mask):
        """(the non-linear outputs' values, the linear inputs' cotangents)."""
        linear, env, ct_env, ct_ref_in = self.linear, self.env, self.ct_env, self.ct_ref_in
        outs = [
            None
            if v.__class__ is Var and v in linear
            else (v if v.__class__ is Literal else env[v])
            for v in jaxpr.outvars
        ]
        cts_in = [
            (ct_env.get(v) or Zero(tangent_type(v.type))) if lin and v not in ct_ref_in else None
            for v, lin in zip(jaxpr.invars, linear_mask)
        ]
        return outs, cts_in


@gc_paused()
def transpose_jaxpr(
    jaxpr: Jaxpr, linear_mask: Sequence[bool], linear_outputs: Sequence[bool] | None = None
) -> Jaxpr:
    """Transpose `jaxpr` with respect to the inputs where `linear_mask` is true.

    Result: `(non-linear inputs..., cotangents of the linear outputs...) -> (non-linear outputs...,
    cotangents of the linear inputs...)`.  With `linear_outputs=None` every output is linear (the
    plain case: `(residuals..., cts...) -> (cts of the linear inputs...)`).  A linear Ref input
    stays among the non-linear inputs, as its cotangent Ref (written into; no cotangent out)."""
    linear_mask = list(linear_mask)
    if len(linear_mask) != len(jaxpr.invars):
        raise JaxprError(f"transpose: {len(linear_mask)} flags for {len(jaxpr.invars)} inputs")
    jaxpr = _without_dead_ref_writes(jaxpr)
    lin_out = [True] * len(jaxpr.outvars) if linear_outputs is None else list(linear_outputs)
    consts = [B.fresh_like(v) for v in jaxpr.constvars]
    # a differentiated Ref input becomes the cotangent Ref the transposed program writes into
    ref_in = [lin and v.type.__class__ is RefType for v, lin in zip(jaxpr.invars, linear_mask)]
    nl_in, args = transposed_inputs(jaxpr.invars, linear_mask, ref_in)
    ct_in = [Var(tangent_type(v.type), None) for v, lo in zip(jaxpr.outvars, lin_out) if lo]
    it2 = iter(ct_in)
    cts_out = [
        next(it2) if lo else Zero(tangent_type(v.type)) for v, lo in zip(jaxpr.outvars, lin_out)
    ]
    b = B.Builder()
    with B.use(b):
        outs, cts = backward_pass(jaxpr, linear_mask, args, cts_out, consts)
        res = []
        for o, lo, _v in zip(outs, lin_out, jaxpr.outvars):
            if lo:
                continue
            if o is None:
                raise JaxprError(
                    "transpose: an output marked non-linear depends on the linear inputs"
                )
            res.append(o)
        ct_atoms = [inst_zero(c) for c, lin, r in zip(cts, linear_mask, ref_in) if lin and not r]
    outvars = res + ct_atoms
    eqns = B.dce_eqns(b.eqns, outvars)
    return B.make_jaxpr(nl_in + ct_in, eqns, outvars, consts)


def _without_dead_ref_writes(jaxpr: Jaxpr) -> Jaxpr:
    """The program without its writes into Refs it makes that nothing reads later (a
    tangent Ref written, never read: as JAX's linearize drops it, the transpose then carries
    no cotangent Ref for it)."""
    from ..passes.common import ref_allocs

    if not ref_allocs(jaxpr.eqns):
        return jaxpr
    eqns = B.dce_eqns(list(jaxpr.eqns), jaxpr.outvars)
    if len(eqns) == len(jaxpr.eqns) and all(a is b for a, b in zip(eqns, jaxpr.eqns)):
        return jaxpr
    return jaxpr.replace(eqns=eqns)


def linear_dependence(jaxpr: Jaxpr, linear_mask: Sequence[bool]) -> list[bool]:
    """Which outputs depend on the linear inputs."""
    lin = {id(v) for v, m in zip(jaxpr.invars, linear_mask) if m}
    for e in jaxpr.eqns:
        if any(isinstance(x, Var) and id(x) in lin for x in e.inputs):
            lin.update(id(o) for o in e.outputs)
    return [isinstance(v, Var) and id(v) in lin for v in jaxpr.outvars]


@gc_paused()
def transpose_auto(jaxpr: Jaxpr, linear: Sequence[int] | None = None, residuals: int | None = None):
    """Transpose choosing the linear inputs: explicit indices, `residuals` (the first K inputs are
    non-linear), the combined linearize form (recognised by its `jit[name=linear]`), or all inputs.

    Returns `(jaxpr, linear_mask, linear_outputs)`."""
    from .linearize import find_linear_eqn

    refuse_large(jaxpr)
    n = len(jaxpr.invars)
    lin_out = None
    if linear is not None:
        mask = [False] * n
        for i in linear:
            if not -n <= i < n:
                raise ProgramError(
                    f"--linear: input {i} does not exist (the jaxpr has {n} inputs)", "inputs"
                )
            mask[i % n] = True
        lin_out = linear_dependence(jaxpr, mask)
    elif residuals is not None:
        if not 0 <= residuals <= n:
            raise JaxprError(
                f"--residuals: {residuals} is not between 0 and the number of inputs ({n})"
            )
        mask = [i >= residuals for i in range(n)]
    else:
        found = find_linear_eqn(jaxpr)
        if found is not None:
            k, t = found
            mask = [i >= n - t for i in range(n)]
            # the linear equation's results are linear outputs even when no tangent reaches them
            made = {id(o) for o in jaxpr.eqns[k].outputs}
            dep = linear_dependence(jaxpr, mask)
            lin_out = [d or id(v) in made for d, v in zip(dep, jaxpr.outvars)]
        else:
            from ..core import is_inexact

            mask = [is_inexact(v.type) for v in jaxpr.invars]  # int/bool inputs cannot be linear
            lin_out = _inexact_outputs(jaxpr)
            try:
                return transpose_jaxpr(jaxpr, mask, lin_out), mask, lin_out
            except NotLinear as e:
                return _with_leading_residuals(e, jaxpr, mask, lin_out)
    return transpose_jaxpr(jaxpr, mask, lin_out), mask, lin_out


#: how many leading-residual counts `_with_leading_residuals` tries
_PREFIX_TRIES = 64


def _inexact_outputs(jaxpr: Jaxpr) -> list[bool] | None:
    """Which outputs a program read as linear is linear in: its float and complex ones.  An
    integer or boolean output takes no cotangent (no float0 input), as it gets no tangent
    from `jvp` and no cotangent in `vjp`; it is an output of the transposed program, as a
    primal output is of vjp's.  None when every output can be linear (the plain case)."""
    from ..core import ShapedArray, is_inexact

    flags = [not isinstance(v.type, ShapedArray) or is_inexact(v.type) for v in jaxpr.outvars]
    return None if all(flags) else flags


def _with_leading_residuals(e: NotLinear, jaxpr: Jaxpr, mask: list[bool], lin_out=None):
    """A program not linear in all its float inputs, transposed with its first K inputs as
    residuals, K the fewest that make it linear: the linear half `linearize --split` writes
    takes its residuals first, so `linearize --split P L f; transpose L` just works.  Says
    so in a warning (`--residuals K` states it); raises `e` when no such K exists."""
    from ..io import warn

    for k in range(1, min(len(mask), _PREFIX_TRIES + 1)):
        k_mask = [m and i >= k for i, m in enumerate(mask)]
        try:
            out = transpose_jaxpr(jaxpr, k_mask, lin_out)
        except JaxprError:
            continue
        warn(
            f"transpose: the program is not linear in all its inputs; taking the first {k} "
            f"as residuals, the fewest that make it linear (as `linearize --split` writes its "
            f"linear half): (residuals..., ct_y...) -> (ct_x...); --residuals {k} says so"
        )
        return out, k_mask, lin_out
    raise e
