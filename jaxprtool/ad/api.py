"""Public entry points: jvp, linearize, transpose, vjp, grad on `core.Jaxpr`."""

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
    long_dtype_name,
)
from ..record import prim as record_of
from . import builder as B
from . import observe
from .jvp import diff_mask, jvp_jaxpr, jvp_jaxpr_info, jvp_masked  # noqa: F401
from .linearize import (  # noqa: F401
    LinearizeInfo,
    combine,
    inline_primal,
    linearize_combined,
    linearize_jaxpr,
    linearize_masked,
)
from .ops import instantiate as inst_zero
from .transpose import backward_pass, transpose_auto, transpose_jaxpr  # noqa: F401
from .zeros import Zero, tangent_type


class _VjpParts:
    """What `_vjp_build` makes: the program's constants and primal inputs, the cotangent
    inputs it created, the equations (primal part first), the primal outputs, the
    cotangents of the differentiated inputs, and the primal part's equations.  (A plain
    class: a `NamedTuple` costs ~1.3 M instructions to create at import.)"""

    __slots__ = ("consts", "prim_in", "ct_vars", "eqns", "outs", "grads", "primal_eqns")

    def __init__(self, consts, prim_in, ct_vars, eqns, outs, grads, primal_eqns):
        self.consts, self.prim_in, self.ct_vars, self.eqns = consts, prim_in, ct_vars, eqns
        self.outs, self.grads, self.primal_eqns = outs, grads, primal_eqns


def _vjp_build(
    jaxpr: Jaxpr, argnums, out_ct_mask: Sequence[bool], make_cts, remat, plans
) -> _VjpParts:
    """Shared by vjp and grad: primal part inline, then the backward pass of the linear program.

    `make_cts(tangent_out_types)` returns the cotangent atoms (or Zero) for the outputs that have
    tangents (in order), and the new input Vars it created.  `remat`, `plans`: as for
    `linearize_jaxpr`."""
    primal, linear, info = linearize_jaxpr(
        jaxpr, argnums, instantiate=list(out_ct_mask), remat=remat, plans=plans, own_binders=False
    )
    # the primal and linear programs are this function's own unless a plan or an observer
    # saw them: no renamed copies then
    own = remat is not None or B.remat_request()[0] is not None or observe.observed()
    consts, prim_in, eqns, outs, res_atoms = inline_primal(primal, info, own_binders=own)
    n_res = len(info.residuals)
    n_tan = len(linear.invars) - n_res
    tan_out_types = [v.type for v in linear.outvars]
    cts, ct_vars = make_cts(tan_out_types, info.out_mask)
    b = B.Builder()
    b.primal_eqns.extend(eqns)
    with B.use(b):
        _, cts_in = backward_pass(
            linear, [False] * n_res + [True] * n_tan, res_atoms + [None] * n_tan, cts
        )
        grads = [inst_zero(c) for c in cts_in[n_res:]]
    return _VjpParts(consts, prim_in, ct_vars, b.eqns, outs, grads, eqns)


def _report_boundary(boundary: list | None, kept, primal_eqns) -> None:
    """Append to `boundary` how many leading equations of `kept` are the forward part's (they
    come first: the backward pass is emitted after them, and DCE keeps the order)."""
    if boundary is not None:
        forward = {id(e) for e in primal_eqns}
        boundary.append(sum(1 for e in kept if id(e) in forward))


@gc_paused()
def vjp_jaxpr(
    jaxpr: Jaxpr,
    argnums: Sequence[int] | None = None,
    boundary: list | None = None,
    remat=None,
    plans: list | None = None,
) -> Jaxpr:
    """`(primals..., cts...) -> (outs..., input cts...)`: one cotangent input per float/complex
    output, one cotangent output per differentiated input (the inexact ones among `argnums`).

    `boundary`: a list to which the index of the first backward equation is appended (the
    forward/backward boundary `memory.residual_bytes` measures)."""
    mask = [is_inexact(v.type) for v in jaxpr.outvars]

    def make_cts(types, out_mask):
        vs = [Var(t, None) for t in types]
        return vs, vs

    parts = _vjp_build(jaxpr, argnums, mask, make_cts, remat, plans)
    outvars = list(parts.outs) + parts.grads
    kept = B.dce_eqns(parts.eqns, outvars)
    _report_boundary(boundary, kept, parts.primal_eqns)
    return B.make_jaxpr(parts.prim_in + parts.ct_vars, kept, outvars, parts.consts)


def _scalar_error(t) -> str:
    msg = "Gradient only defined for scalar-output functions. Output {}."
    if isinstance(t, ShapedArray):
        shape = tuple(t.shape)
        if t.size == 1 and t.is_static:
            idx = " or output[0]" if t.ndim == 1 else ""
            extract = f"extract the scalar with output.reshape(()){idx}, "
        else:
            extract = ""
        return (
            msg.format(f"had shape: {shape}")
            + f" To get the gradient, {extract}reduce the output to a "
            "scalar with output.sum(), or use jax.jacobian (`jaxprtool jacrev`) to differentiate a function with a non-scalar output."
        )
    return msg.format(f"had abstract value {t}")


def _check_grad_inputs(jaxpr: Jaxpr, argnums: Sequence[int]) -> None:
    """Each of `argnums` names an input, of a float or complex type (JAX's messages)."""
    n = len(jaxpr.invars)
    for i in argnums:
        if not -n <= i < n:
            raise ProgramError(
                f"argnums: input {i} does not exist (the jaxpr has {n} inputs)", "inputs"
            )
        t = jaxpr.invars[i].type
        if not is_inexact(t):
            dt = long_dtype_name(t.dtype) if isinstance(t, ShapedArray) else str(t)
            raise ProgramError(
                f"grad requires real- or complex-valued inputs (input dtype that is a sub-dtype of np.inexact), "
                f"but got {dt}. If you want to use Boolean- or integer-valued inputs, use vjp (`jaxprtool vjp`), "
                "which gives them no cotangent.",
                "inputs",
            )


def _check_grad_output(jaxpr: Jaxpr, has_aux: bool) -> None:
    """One output (the first with `has_aux`), a real scalar (JAX's messages)."""
    outs = list(jaxpr.outvars)
    if has_aux:
        if not outs:
            raise JaxprError("--has-aux: the jaxpr has no outputs")
    elif len(outs) != 1:
        raise ProgramError(
            f"Gradient only defined for scalar-output functions. Output was a tuple of {len(outs)} values "
            "(use --has-aux to differentiate the first one and return the others as auxiliary data).",
            "outputs",
        )
    t = outs[0].type
    if not isinstance(t, ShapedArray) or tuple(t.shape) != ():
        raise ProgramError(_scalar_error(t), "outputs")
    if not is_float(t):
        dt = long_dtype_name(t.dtype)
        tail = (
            (
                "For holomorphic differentiation, pass holomorphic=True. For differentiation of non-holomorphic "
                "functions involving complex outputs, use jax.vjp directly."
            )
            if t.dtype.startswith("c")
            else "For differentiation of functions with integer outputs, use jax.vjp directly."
        )
        raise ProgramError(
            f"grad requires real-valued outputs (output dtype that is a sub-dtype of np.floating), "
            f"but got {dt}. {tail}",
            "outputs",
        )


@gc_paused()
def grad_jaxpr(
    jaxpr: Jaxpr,
    argnums: Sequence[int] | int = 0,
    has_aux: bool = False,
    with_value: bool = False,
    boundary: list | None = None,
    remat=None,
    plans: list | None = None,
) -> Jaxpr:
    """Gradient of a scalar float output (the first output with `has_aux`).

    Result: `(inputs...) -> ([value,] [aux...,] grads...)`: the value with `with_value`, the
    auxiliary outputs with `has_aux`, then one gradient per entry of `argnums`.  `boundary`,
    `remat` (a `remat.Spec`: `--remat`, `--remat-budget`) and `plans`: as for `vjp_jaxpr`."""
    if isinstance(argnums, int):
        argnums = (argnums,)
    _check_grad_inputs(jaxpr, argnums)
    _check_grad_output(jaxpr, has_aux)
    n = len(jaxpr.invars)
    outs = jaxpr.outvars
    from . import ops

    def make_cts(types, out_mask):
        cts = []
        k = 0
        for j, m in enumerate(out_mask):
            if not m:
                continue
            cts.append(ops.lit(1.0, types[k]) if j == 0 else Zero(tangent_type(types[k])))
            k += 1
        return cts, []

    mask = [True] + [False] * (len(outs) - 1)
    uniq = list(dict.fromkeys(i % n for i in argnums))
    parts = _vjp_build(jaxpr, uniq, mask, make_cts, remat, plans)
    by_arg = dict(zip(sorted(uniq), parts.grads))  # tangent inputs come in input order
    g = [by_arg[i % n] for i in argnums]
    pouts = parts.outs
    outvars = ([pouts[0]] if with_value else []) + (list(pouts[1:]) if has_aux else []) + g
    kept = B.dce_eqns(parts.eqns, outvars)
    _report_boundary(boundary, kept, parts.primal_eqns)
    return B.make_jaxpr(parts.prim_in, kept, outvars, parts.consts)


# ---------------------------------------------------------------- printing in an older style


def restyle(jaxpr: Jaxpr, style) -> Jaxpr:
    """Adapt the parameters of emitted equations to an older JAX style before printing.

    AD emits parameters as JAX 0.12 prints them (as the parser reads 0.12 text); older versions
    printed some implied parameters (`broadcast_in_dim` `shape=`/`sharding=`), lacked newer ones
    (`out_sharding` of reductions, `sharding` of `reshape`) and called `jit` `pjit`.  A rule
    returns the new `(prim, params)`, or the list of equations that replace one of a primitive
    the older version lacks."""
    from ..core import eqn_subjaxprs, map_param_jaxprs

    v = tuple(style.version)
    if v >= (0, 12):
        return jaxpr
    memo: dict[int, Jaxpr] = {}

    def fix_jaxpr(j: Jaxpr) -> Jaxpr:
        if id(j) in memo:
            return memo[id(j)]
        eqns = []
        for e in j.eqns:
            prim = e.prim
            rule = record_of(prim).restyle
            nested = bool(eqn_subjaxprs(e))
            if rule is None and not nested:  # most equations: kept as they are
                eqns.append(e)
                continue
            params = {k: map_param_jaxprs(val, fix_jaxpr) for k, val in e.params.items()}
            if rule is not None:
                restyled = rule(prim, params, e, style)
                if isinstance(restyled, list):  # a primitive the older version lacks
                    eqns.extend(restyled)
                    continue
                prim, params = restyled
            eqns.append(e.replace(prim=prim, params=params))
        out = j.replace(eqns=eqns)
        memo[id(j)] = out
        return out

    return fix_jaxpr(jaxpr)
