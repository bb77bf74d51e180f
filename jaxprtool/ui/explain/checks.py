"""Values and checks for `explain`: the recorded programs run, the derivative checked.

`fill_values` runs the equations a walk emitted (the recorder's `forward_program()` or
`reverse_program()`) through the evaluator, eagerly, with an observer of its loop that keeps
every value; the `Value`s of the walk get their arrays from it.  The derivative itself comes
from running the program the walks built (`run_program`), and is checked against central
finite differences of the primal program and, for a program made of one elementwise
primitive, an analytic formula (`analytic_partials`).
"""

from __future__ import annotations

from ...core import (
    Jaxpr,
    JaxprError,
    Literal,
    RefType,
    Var,
    eqn_subjaxprs,
    is_float,
    is_inexact,
    value_bytes,
)
from ...lazy import np
from ...record import prim
from ..checkgrad import (
    EPS,
    WIDE_EPS,
    Check,
    _norm,
    _pair_error,
    _pairing,
    _rel_err,
    fd_tolerance,
    least_precise_dtype,
    worst,
)
from .record import ExplainData, Value, err_text, literal_array

#: coordinate-wise finite differences of the gradient only up to this many input elements
FD_COORDS_LIMIT = 128
#: analytic formula vs the tool: both exact up to rounding
ANALYTIC_TOLERANCE = {"float16": 1e-2, "bfloat16": 1e-1, "float32": 1e-5, "float64": 1e-10}


# ---------------------------------------------------------------- running programs


class _Values:
    """Observer of the evaluator's loop: every top-level value, by variable."""

    def __init__(self):
        self.got: dict[int, np.ndarray] = {}
        self.steps = 0

    def eval_step(self, eqn, invals, outs) -> None:
        self.steps += 1
        for v, x in zip(eqn.outputs, outs):
            try:
                self.got[id(v)] = np.asarray(x)
            except Exception:  # noqa: BLE001 - a value numpy cannot hold (a PRNG key)
                pass


def fill_values(values: list[Value], *sources) -> JaxprError | None:
    """Fill `values[i].array` from the first source that computes it; a source is
    (program, in_values, consts), `program` a Jaxpr or (constvars, invars, eqns).

    A source runs compiled, with the values wanted as outputs (op by op where it asks many:
    `_compiles_better`); when that fails, eagerly, with an observer of the evaluator's loop
    that keeps every value up to the equation that fails.
    Returns the first such error (at the equation's location), or None."""
    first = None
    for program, in_values, consts in sources:
        if isinstance(program, Jaxpr):
            program = (program.constvars, program.invars, program.eqns)
        err = _fill(program, in_values, consts, values)
        first = first or err
    for val in values:
        if val.array is None and isinstance(val.atom, Literal):
            val.array = literal_array(val.atom)
    return first


def _fill(program, in_values, consts, values: list[Value]) -> JaxprError | None:
    from ...ad import builder as B
    from ...backend import check_runnable, eval_eager, evaluate

    constvars, invars, eqns = program
    known = {id(v): np.asarray(x) for v, x in zip(invars, in_values)}
    known.update({id(v): np.asarray(x) for v, x in zip(constvars, consts)})
    defined = {id(o) for e in eqns for o in e.outputs}
    # a Ref's value changes as the program writes it: it is shown by its type
    wanted = [
        v
        for v in values
        if v.array is None and isinstance(v.atom, Var) and not isinstance(v.atom.type, RefType)
    ]
    outs = list({id(v.atom): v.atom for v in wanted if id(v.atom) in defined}.values())
    outs = [a for a in outs if id(a) not in known]
    error = None
    for group in _by_bytes(outs):
        prog = B.make_jaxpr(invars, B.dce_eqns(list(eqns), group), group, constvars)
        try:
            check_runnable(prog)
        except JaxprError as err:
            return err
        run = evaluate if _compiles_better(prog) else eval_eager
        try:
            known.update(zip(map(id, group), run(prog, list(in_values), list(consts))))
        except Exception:  # noqa: BLE001 - run again eagerly: where does it fail?
            error = _run_observed(prog, in_values, consts, known)
            break
    for val in wanted:
        val.array = known.get(id(val.atom))
    return error


#: the bytes of asked values one program hands back at most: the 8-layer width-1024
#: transformer's final program asks 210 values, 5.5 GB as XLA:CPU counts them, which with
#: the program's own temporaries ran out of the 16 GB of a TPU v5e; its values are asked in
#: programs of at most this much each
FILL_BYTES = 1 << 30


def _by_bytes(outs: list) -> list[list]:
    """`outs` in runs of at most `FILL_BYTES` of values (a value larger than that alone)."""
    groups: list[list] = []
    size = 0
    for a in outs:
        b = value_bytes(a.type)
        if not groups or size + b > FILL_BYTES:
            groups.append([])
            size = 0
        groups[-1].append(a)
        size += b
    return groups


#: a program asked for more values than this runs op by op (below, compiled): each value an
#: output keeps XLA from fusing, and compiling hundreds of unfused kernels is what costs
#: (a 504-equation walk asked for its 102 values: 8.4 s compiled, 0.18 s op by op, the same
#: numbers)
MANY_VALUES = 16


def _compiles_better(prog: Jaxpr) -> bool:
    """Compile `prog` rather than run it op by op: it asks few values, or holds a body (a
    loop run op by op goes round in Python)."""
    return len(prog.outvars) <= MANY_VALUES or any(eqn_subjaxprs(e) for e in prog.eqns)


def _run_observed(prog: Jaxpr, in_values, consts, known: dict) -> JaxprError:
    from ...backend import eval_eager

    obs = _Values()
    error = JaxprError("cannot evaluate the program")
    try:
        eval_eager(prog, list(in_values), list(consts), observer=obs)
    except Exception as err:  # noqa: BLE001 - located at the equation that failed
        e = prog.eqns[obs.steps] if obs.steps < len(prog.eqns) else None
        what = f"cannot evaluate '{e.prim}'" if e is not None else "cannot evaluate"
        loc = getattr(err, "loc", None) or (e.loc if e is not None else None)
        error = JaxprError(f"{what}: {err_text(err)}", loc)
    known.update(obs.got)
    return error


def runner(jaxpr: Jaxpr, consts):
    """run(args, device=None) -> list of arrays, compiled once (`device`: another than the
    command's, as finite differences take `backend.reference_device`)."""
    import jax

    from ...backend import as_jax_function, check_runnable, evaluate, sharding
    from ...backend.jit_cache import shared_jit

    check_runnable(jaxpr)
    multi = sharding.is_multi_device(jaxpr)
    placement = sharding.enforce_call_placements if multi else None
    fn = shared_jit(  # (a program an earlier check or command ran: compiled once)
        jaxpr,
        sharding.run_variant("placed" if multi else "plain", None, False),
        lambda: jax.jit(as_jax_function(jaxpr, None, enable_x64=False, placement=placement)),
    )
    consts = list(consts or [])
    return lambda args, device=None: evaluate(jaxpr, args, consts, device=device, jitted=fn)


# ---------------------------------------------------------------- finite differences


def _wide(xs) -> list:
    """Float (complex) arrays in float64 (complex128), others as they are."""
    from ..widen import wide_dtype

    return [np.asarray(x).astype(wide_dtype(x)) for x in xs]


def _run_wide(jaxpr: Jaxpr, consts):
    """run(args) of the float64 copy of `jaxpr` on the CPU (the reference device), its
    constants widened; None where no copy type-checks."""
    from ...backend import evaluate, reference_device
    from ..widen import widen

    wide = widen(jaxpr)
    if wide is None:
        return None
    device, cs = reference_device(jaxpr), _wide(consts)
    return lambda args: evaluate(wide, _wide(args), cs, device=device)


class FiniteDifferences:
    """Central differences of the primal program along directions of the differentiated
    inputs, for the float/complex outputs: in a float64 copy of the program where one
    type-checks (as check-grad's), else in its own precision."""

    def __init__(self, jaxpr: Jaxpr, run, args, diff, on_error, consts=()):
        from ...backend import current_platform

        self.run, self.args, self.diff, self.on_error = run, args, diff, on_error
        self.consts = list(consts)
        self.outs = [j for j, v in enumerate(jaxpr.outvars) if is_inexact(v.type)]
        self.dtype = least_precise_dtype(jaxpr)
        self.tol = fd_tolerance(self.dtype)
        real = self.dtype.replace("complex64", "float32").replace("complex128", "float64")
        self.wide = _run_wide(jaxpr, self.consts)
        self.eps = WIDE_EPS if self.wide is not None else EPS.get(real, 1e-3)
        self.base = _wide(args) if self.wide is not None else list(args)
        self.judged_in = "f64" if self.wide is not None else f"{real} (no float64 copy)"
        if current_platform() == "tpu":  # no float64 there: its own derivative is judged
            self.judged_in = f"{real} on the TPU (no float64 there)"

    def judged(self, program: Jaxpr, inputs, skip: int) -> list | None:
        """The outputs past `skip` of derivative `program` in its float64 copy (what the
        checks judge), or None where the differences are not in float64 either, or the
        derivatives run on a TPU."""
        if self.wide is None or self.judged_in != "f64":
            return None
        run = _run_wide(program, self.consts)
        return None if run is None else [np.asarray(x) for x in run(inputs)[skip:]]

    def _shifted(self, vs, sign):
        xs = list(self.base)
        for i, d in zip(self.diff, vs):
            x = self.base[i]
            xs[i] = (np.asarray(x) + sign * self.eps * np.asarray(d).astype(x.dtype)).astype(
                x.dtype
            )
        try:
            return (self.wide or self.run)(xs)
        except Exception as e:  # noqa: BLE001
            raise self.on_error(e) from None

    def along(self, vs) -> list[np.ndarray]:
        plus, minus = self._shifted(vs, +1), self._shifted(vs, -1)
        return [
            (np.asarray(plus[j], np.complex128) - np.asarray(minus[j], np.complex128))
            / (2 * self.eps)
            for j in self.outs
        ]


def _judged(fd: FiniteDifferences, check: Check, nonfinite: bool) -> Check:
    check.judged_in, check.nonfinite = fd.judged_in, nonfinite
    return check


def jvp_checks(data: ExplainData, fd: FiniteDifferences, judged=None, nonfinite=False) -> None:
    """`judged`: the derivative in float64 (`FiniteDifferences.judged`); None: as shown."""
    want = fd.along(data.direction)
    got = judged if judged is not None else [a for _, a in data.derivative]
    err = worst(_rel_err(a, b) for a, b in zip(got, want))
    data.checks.append(
        _judged(fd, Check("jvp vs central finite differences", err, fd.tol), nonfinite)
    )


def vjp_checks(data: ExplainData, fd: FiniteDifferences, w, judged=None, nonfinite=False) -> None:
    args, diff = fd.args, fd.diff
    g = judged if judged is not None else [np.asarray(a) for _, a in data.derivative]
    fd_v = fd.along(data.direction)
    lhs = sum(_pairing(a, b) for a, b in zip(w, fd_v))
    rhs = sum(_pairing(a, b) for a, b in zip(g, data.direction))
    sizes = max(_norm(w) * _norm(fd_v), _norm(g) * _norm(data.direction))
    data.checks.append(
        _judged(
            fd,
            Check(
                "<w, FD(J v)> = <J^T w, v> (central differences, random v)",
                _pair_error(lhs, rhs, sizes),
                fd.tol,
            ),
            nonfinite,
        )
    )
    n_coords = sum(int(args[i].size) for i in diff)
    complex_in = any(np.iscomplexobj(args[i]) for i in diff)
    if n_coords <= FD_COORDS_LIMIT and not complex_in:
        fd_g = []
        for i in diff:
            gi = np.zeros(args[i].shape, np.float64)
            for idx in np.ndindex(args[i].shape):
                basis = [np.zeros_like(args[k]) for k in diff]
                basis[diff.index(i)][idx] = 1
                d = fd.along(basis)
                gi[idx] = sum(_pairing(a, b) for a, b in zip(w, d))
            fd_g.append(gi)
        err = worst(_rel_err(a, b) for a, b in zip(g, fd_g))
        data.checks.append(
            _judged(
                fd,
                Check("J^T w vs central finite differences, coordinate-wise", err, fd.tol),
                nonfinite,
            )
        )


# ---------------------------------------------------------------- analytic formulas


def _unbroadcast_np(g, shape):
    g = np.asarray(g)
    while g.ndim > len(shape):
        g = g.sum(axis=0)
    for i, d in enumerate(shape):
        if d == 1 and g.shape[i] != 1:
            g = g.sum(axis=i, keepdims=True)
    return g.reshape(shape)


def analytic_partials(jaxpr: Jaxpr, args, consts=()):
    """(formula, [partial derivative array per eqn input]) for a single elementwise primitive
    program `out = prim x [y]` (inputs: invars, constvars or literals); None otherwise."""
    if len(jaxpr.eqns) != 1 or len(jaxpr.outvars) != 1:
        return None
    e = jaxpr.eqns[0]
    if len(e.outputs) != 1 or jaxpr.outvars[0] is not e.outputs[0] or e.params:
        return None
    if not is_float(e.outputs[0].type):
        return None
    vals = {id(v): np.asarray(a, np.float64) for v, a in zip(jaxpr.invars, args)}
    vals.update({id(v): np.asarray(a, np.float64) for v, a in zip(jaxpr.constvars, consts)})
    xs = []
    for x in e.inputs:
        if isinstance(x, Literal):
            xs.append(np.asarray(literal_array(x), np.float64))
        elif id(x) in vals:
            xs.append(vals[id(x)])
        else:
            return None
    rule = prim(e.prim).derivative_formula
    if rule is None:
        return None
    formula, fn = rule
    if len(xs) == 1:
        return f"d {e.prim}(x)/dx = {formula}", [fn(xs[0])]
    if len(xs) == 2:
        return f"{e.prim}(x, y): {formula}", list(fn(xs[0], xs[1]))
    return None


def analytic_check(data: ExplainData, jaxpr, args, consts, diff, dtype, w=None) -> None:
    got = analytic_partials(jaxpr, args, consts)
    if got is None:
        return
    formula, partials = got
    e = jaxpr.eqns[0]
    out_shape = tuple(e.outputs[0].type.shape)
    pos = {id(v): i for i, v in enumerate(jaxpr.invars)}
    tol = fd_tolerance(dtype, ANALYTIC_TOLERANCE, 1e-5)
    if data.mode == "jvp":
        v_of = {i: d for i, d in zip(diff, data.direction)}
        expected = np.zeros(out_shape, np.float64)
        for x, p in zip(e.inputs, partials):
            i = pos.get(id(x)) if isinstance(x, Var) else None
            if i in v_of:
                expected = expected + p * np.asarray(v_of[i], np.float64)
        err = _rel_err(data.derivative[0][1], np.broadcast_to(expected, out_shape))
    else:
        wv = np.asarray(w[0], np.float64)
        expected_by_input = {i: np.zeros(args[i].shape, np.float64) for i in diff}
        for x, p in zip(e.inputs, partials):
            i = pos.get(id(x)) if isinstance(x, Var) else None
            if i in expected_by_input:
                contrib = np.broadcast_to(p, out_shape) * wv
                expected_by_input[i] = expected_by_input[i] + _unbroadcast_np(
                    contrib, tuple(args[i].shape)
                )
        err = worst(_rel_err(a, expected_by_input[i]) for i, (_, a) in zip(diff, data.derivative))
    data.analytic = formula
    data.checks.append(Check(f"analytic formula: {formula}", err, tol))
