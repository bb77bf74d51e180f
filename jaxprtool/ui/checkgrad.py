"""check-grad: the tool's own derivatives checked as JAX's `check_grads` does.

For a program f, inputs x, a random tangent direction v and a random output
cotangent w:

* fwd: the tool's jvp J v against central finite differences
  (f(x + eps v) - f(x - eps v)) / (2 eps);
* rev: the tool's vjp J^T w projected on v against the finite-difference
  projection <w, FD(J v)> (so a wrong JVP rule shared by jvp and vjp is caught);
* dot: <w, J v> from the jvp program against <J^T w, v> from the vjp program
  (the adjoint identity, exact up to rounding).

`order=2` repeats the checks on the jvp and vjp programs themselves.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..core import Jaxpr, JaxprError, NoReverseMode, ShapedArray, is_inexact, shown_path
from ..lazy import np

#: JAX's gradient tolerances of its 4- and 8-bit floats, least precise first
#: (`default_gradient_tolerance`): the adjoint identity holds only as well
_NARROW = {
    "float4_e2m1fn": 1e0,
    "float8_e8m0fnu": 1e0,
    "float8_e3m4": 1e-1,
    "float8_e4m3": 1e-1,
    "float8_e4m3b11fnuz": 1e-1,
    "float8_e4m3fn": 1e-1,
    "float8_e4m3fnuz": 1e-1,
    "float8_e5m2": 1e-1,
    "float8_e5m2fnuz": 1e-1,
}
#: JAX's default gradient tolerances (jax._src.public_test_util.default_gradient_tolerance)
TOLERANCE = {
    **_NARROW,
    "float16": 1e-2,
    "bfloat16": 1e-1,
    "float32": 2e-3,
    "float64": 1e-5,
    "complex64": 2e-3,
    "complex128": 1e-5,
}
#: the least tolerance against finite differences where the derivatives run on a TPU: its
#: tanh is accurate to about 4e-5 (measured on a v5e), so a derivative through saturating
#: tanh layers is off by ~3e-4 to 3e-3 there, jax.grad's as much as the tool's
#: (docs/ACCELERATOR.md); the finite differences, on the CPU, are exact
TPU_TOLERANCE = 1e-2


def fd_tolerance(dtype: str, table: dict | None = None, default: float = 2e-3) -> float:
    """The tolerance of `dtype` in `table` (default: JAX's gradient tolerances; `default`
    for a dtype it lacks), raised to TPU_TOLERANCE where the checks run on a TPU."""
    from ..backend import current_platform

    tol = (table or TOLERANCE).get(dtype, default)
    return max(tol, TPU_TOLERANCE) if current_platform() == "tpu" else tol


#: the adjoint identity holds to rounding: much tighter
DOT_TOLERANCE = {
    **_NARROW,
    "float16": 1e-2,
    "bfloat16": 1e-1,
    "float32": 2e-5,
    "float64": 1e-12,
    "complex64": 2e-5,
    "complex128": 1e-12,
}
#: finite-difference steps in the program's own precision (used when no float64 copy of the
#: program type-checks), with one Richardson step: (4 D(h/2) - D(h)) / 3 has an O(h^4) error
EPS = {
    **dict.fromkeys(_NARROW, 1e-1),
    "float16": 1e-2,
    "bfloat16": 1e-1,
    "float32": 1e-3,
    "float64": 1e-6,
}
#: the step in a float64 copy of the program (rounding ~1e-11, truncation ~1e-10)
WIDE_EPS = 1e-5
#: directions tried before a check is reported as non-smooth
KINK_RETRIES = 4


@dataclass
class Check:
    """One numerical check: its measured error against its tolerance.  `nonsmooth` names the
    non-smooth equation whose tie the finite differences could not avoid (then the check
    is neither a pass nor a failure)."""

    name: str
    error: float
    tolerance: float
    program: str = ""  # which program was checked (f, jvp(f), vjp(f))
    nonsmooth: str | None = None
    #: the program's outputs at the point are NaN or infinite (an input outside a
    #: function's domain): a check there that does not pass is inconclusive, saying so
    nonfinite: bool = False
    #: a primitive of the program whose derivative is zero by definition though its value
    #: moves (`hides_derivative`): finite differences see through it
    hidden_by: str | None = None
    #: why the check could not run (JAX has no reverse mode of the program): not a failure
    skipped: str | None = None
    #: the precision the derivative programs were judged in: "f64" (a float64 copy of
    #: them, on the CPU), else the program's own dtype with the reason (no float64 copy
    #: type-checks, a TPU), at the wider tolerances of that dtype
    judged_in: str = ""
    #: information, not the verdict: the program's own derivative (its precision, its
    #: device) against the float64 one, and JAX's own at the same point against it
    own_error: float | None = None
    jax_error: float | None = None
    #: why the point cannot judge the rules (finite differences that do not settle:
    #: saturation or a kink within the step); such a check is neither a pass nor a failure
    unsettled: str | None = None

    @property
    def inconclusive(self) -> str | None:
        """Why a check that did not pass says nothing about the rules, or None."""
        if self.skipped is not None or self.nonsmooth is not None or self.within:
            return None
        if self.nonfinite:
            return "NaN/inf at the point"
        if self.hidden_by is not None:
            return None  # a real disagreement, explained by the primitive
        return self.unsettled

    @property
    def within(self) -> bool:
        return bool(self.error <= self.tolerance)

    @property
    def passed(self) -> bool:
        return (
            self.skipped is not None
            or self.nonsmooth is not None
            or self.within
            or self.inconclusive is not None
        )

    @property
    def verdict(self) -> str:
        if self.skipped is not None:
            return f"skipped: {self.skipped}"
        if self.nonsmooth is not None:
            return f"non-smooth at {self.nonsmooth}"
        if self.within:
            return "pass"
        if self.inconclusive is not None:
            return f"inconclusive ({self.inconclusive})"
        if self.hidden_by is not None:
            return f"FAIL ({self.hidden_by}: finite differences see through it)"
        return "FAIL"

    @property
    def precision(self) -> str:
        """The program's own derivative and JAX's, against the float64 one ("" if unmeasured)."""
        parts = []
        if self.own_error is not None:
            parts.append(f"own {self.own_error:.1e}")
        if self.jax_error is not None:
            parts.append(f"JAX {self.jax_error:.1e}")
        return ", ".join(parts)


def _hides_derivative(jaxpr: Jaxpr) -> str | None:
    """A primitive of the program (nested ones too) whose derivative is zero by definition
    while its value moves with its operand (the records' `hides_derivative`), or None."""
    from ..core import all_eqns
    from ..record import prim

    return next((e.prim for e in all_eqns(jaxpr) if prim(e.prim).hides_derivative), None)


def worst(errors) -> float:
    """The largest error, NaN when one is NaN (Python's `max` skips a NaN after the first
    element: a NaN output's error would vanish and the check pass)."""
    errors = list(errors)
    return math.nan if any(math.isnan(e) for e in errors) else max(errors)


def least_precise_dtype(jaxpr: Jaxpr) -> str:
    """The least precise float/complex dtype anywhere in the program (inputs, outputs and every
    intermediate): a bf16 cast in the middle makes finite differences and the adjoint identity
    only as accurate as bf16, so step and tolerance follow it."""
    from ..core import all_eqns, long_dtype_name

    types = [v.type for v in jaxpr.invars] + [a.type for a in jaxpr.outvars]
    types += [o.type for e in all_eqns(jaxpr) for o in e.outputs]
    names = {long_dtype_name(t.dtype) for t in types if is_inexact(t)}
    for n in (*_NARROW, "bfloat16", "float16", "float32", "complex64", "float64", "complex128"):
        if n in names:
            return n
    return "float32"


def _pairing(a, b) -> float:
    """Re(sum(a * b)), without conjugating: the pairing under which a vjp is the transpose
    of the jvp (JAX's linear transpose; its `check_vjp` conjugates the cotangent before and
    after the vjp to compare with `vdot`, which is the same).  `vdot`, which conjugates
    `a`, made every complex program fail the vjp and dot-product checks."""
    a = np.asarray(a, np.complex128).reshape(-1)
    b = np.asarray(b, np.complex128).reshape(-1)
    with np.errstate(invalid="ignore"):  # a NaN at the point fails the check, not numpy
        return float(np.real(np.dot(a, b)))


def _rel_err(got, expected) -> float:
    """max |got - expected| / max(1, |expected|), over all elements."""
    got = np.asarray(got, np.complex128)
    expected = np.asarray(expected, np.complex128)
    if got.size == 0:
        return 0.0
    with np.errstate(invalid="ignore"):  # inf - inf at the point: the verdict says so
        scale = max(1.0, float(np.max(np.abs(expected))))
        return float(np.max(np.abs(got - expected))) / scale


def _random_like(x, rng):
    """Standard normal values of the shape and dtype of `x`: an array, or a type whose
    sizes are all written (`_concrete`)."""
    if isinstance(x, ShapedArray):
        shape, dtype = x.shape, x.np_dtype
    else:
        x = np.asarray(x)
        shape, dtype = x.shape, x.dtype
    r = rng.standard_normal(shape)
    if dtype.kind == "c":
        r = r + 1j * rng.standard_normal(shape)
    return r.astype(dtype)


def _concrete(jaxpr: Jaxpr, outs_idx) -> bool:
    """Whether the outputs `outs_idx` of `jaxpr` have every size written as a number."""
    return all(
        isinstance(t, ShapedArray) and t.is_static
        for t in (jaxpr.outvars[i].type for i in outs_idx)
    )


def _nonfinite(outs, outs_idx) -> bool:
    """Whether any of the outputs `outs_idx` holds a NaN or an infinity (the point is then
    not one to judge a derivative at: check-grad's and explain's verdicts)."""
    return not all(np.isfinite(np.asarray(outs[i])).all() for i in outs_idx)


def _norm(xs) -> float:
    """The 2-norm of a list of arrays taken together."""
    return math.sqrt(sum(float(np.sum(np.abs(np.asarray(x, np.complex128)) ** 2)) for x in xs))


def _pair_error(lhs: float, rhs: float, sizes: float) -> float:
    """|lhs - rhs| of two pairings, normalised by the sizes involved (the product of the
    norms, as ||w|| ||J v||, which bounds them), never below 1: a wrong rule moves the
    pairing by a fraction of that product, a float64 rounding by 1e-16 of it."""
    return abs(lhs - rhs) / max(1.0, abs(lhs), abs(rhs), sizes)


class Judge:
    """Where a derivative program is judged: its float64 copy on the CPU (`widen`) when one
    type-checks, so that a FAIL is a disagreement of the rules with finite differences in
    float64, not float32 round-off; else the program's own run, at the tolerances of its
    dtype.  On a TPU the verdict is the TPU's own derivative (float64 is not available
    there), and the float64 copy only measures its precision."""

    def __init__(self, run):
        from ..backend import current_platform

        self.run = run
        self.on_tpu = current_platform() == "tpu"

    def derivative(self, program: Jaxpr, inputs, n_out: int):
        """(the judged outputs past the first `n_out`, the program's own, the float64 ones
        or None, where it was judged, the first `n_out`: the primal outputs)."""
        from .widen import wide_dtype, widen

        ran = self.run(program, inputs)
        own, primal = ran[n_out:], ran[:n_out]
        wide = widen(program)
        if wide is None:
            return own, own, None, "own precision (no float64 copy type-checks)", primal
        xs = [np.asarray(a).astype(wide_dtype(a)) for a in inputs]
        f64 = self.run(wide, xs, reference=True)[n_out:]
        if self.on_tpu:
            return own, own, f64, "own precision (no float64 on the TPU)", primal
        return f64, own, f64, "f64", primal


class JaxDerivatives:
    """JAX's own jvp and vjp at the point (information: how far they are from the float64
    derivative), made when first asked: both in one program where both modes are checked
    (one XLA compile, the primal computed once), else the one asked.  None for a kind the
    runner cannot take, or JAX cannot (a key type, a primitive it has no rule of, reverse
    mode through a while loop)."""

    def __init__(self, run, jaxpr: Jaxpr, args, diff, outs_idx, vectors: dict):
        self.of = getattr(run, "jax_derivative", None)
        self.at = (jaxpr, args, diff)
        self.outs_idx = outs_idx
        self.vectors = vectors  # {"jvp": v, "vjp": w}: the modes checked
        self.made: dict = {}

    def error(self, kind: str, f64) -> float | None:
        """JAX's derivative `kind` against the float64 one `f64` (None: not measured)."""
        if kind not in self.made:
            self.made.update(self._make(kind))
        theirs = self.made[kind]
        if theirs is None or f64 is None or len(theirs) != len(f64):
            return None
        return worst(_rel_err(a, b) for a, b in zip(theirs, f64))

    def _make(self, kind: str) -> dict:
        if self.of is None:
            return {kind: None}
        if len(self.vectors) == 2:
            v, w = self.vectors["jvp"], self.vectors["vjp"]
            both = self._call(list(v) + list(w), "both")
            if both is not None:
                return {"jvp": both[: len(self.outs_idx)], "vjp": both[len(self.outs_idx) :]}
        return {kind: self._call(self.vectors[kind], kind)}

    def _call(self, vec, kind: str):
        try:
            return self.of(*self.at, vec, self.outs_idx, kind)
        except Exception:  # noqa: BLE001 - information only: unmeasured, not an error
            return None


class GradChecker:
    def __init__(self, run, rng, argnums=None, tolerances=None):
        self.run = run  # run(jaxpr, args, reference=False) -> list[np.ndarray]
        self.rng = rng
        self.argnums = argnums
        #: the user's {"tol", "dot_tol", "eps"} (check-grad --tol/--dot-tol/--eps); None: JAX's
        self.given = tolerances or {}
        self.judge = Judge(run)

    def check(
        self, jaxpr: Jaxpr, args, label: str, modes, top: bool = True
    ) -> tuple[list[Check], list[tuple[Jaxpr, list, str]]]:
        """Checks of f = jaxpr at args; also returns the derivative programs and their inputs."""
        from ..ad.api import jvp_jaxpr, vjp_jaxpr
        from ..backend.jaxfn import check_runnable

        diff = self.inputs_to_check(jaxpr, label, top)
        outs_inexact = [i for i, v in enumerate(jaxpr.outvars) if is_inexact(v.type)]
        if not outs_inexact:
            raise JaxprError(f"{label}: no float or complex outputs to differentiate")
        dtype = least_precise_dtype(jaxpr)
        tol = self.given.get("tol") or fd_tolerance(dtype)
        dot_tol = self.given.get("dot_tol") or DOT_TOLERANCE.get(dtype, 2e-5)
        n_out = len(jaxpr.outvars)
        # f itself runs only where its outputs' sizes are not written (symbolic): else the
        # derivative programs' runs give its outputs, and whether they are finite; what the
        # back end refuses (a program that expands past the limit, ...) is refused first,
        # before the branch indicators copy calls' bodies in
        check_runnable(jaxpr)
        outs = None if _concrete(jaxpr, outs_inexact) else self.run(jaxpr, args)
        hidden = _hides_derivative(jaxpr)  # (what finite differences see through)
        like = outs or [v.type for v in jaxpr.outvars]
        w = [_random_like(like[i], self.rng) for i in outs_inexact]
        fds = FiniteDifferences(self.run, jaxpr, dtype, self.given.get("eps"))
        v, fd, kink = fds.directional(args, diff, outs_inexact, self.rng)
        about = dict(program=label, nonsmooth=kink, hidden_by=hidden)
        vectors = {"jvp": v} if "fwd" in modes else {}
        if "rev" in modes:
            vectors["vjp"] = w
        theirs = JaxDerivatives(self.run, jaxpr, args, diff, outs_inexact, vectors)
        if outs:
            about["nonfinite"] = _nonfinite(outs, outs_inexact)
        checks: list[Check] = []
        derived: list[tuple[Jaxpr, list, str]] = []
        jv = own_jv = None
        if "fwd" in modes:
            J = jvp_jaxpr(jaxpr, diff)
            jv, own_jv, f64, judged, outs = self.judge.derivative(J, list(args) + v, n_out)
            about.setdefault("nonfinite", _nonfinite(outs, outs_inexact))
            c = Check("jvp vs finite differences", worst(map(_rel_err, jv, fd)), tol, **about)
            self._precision(c, judged, own_jv, f64, theirs, "jvp")
            checks.append(self._settle(c, fds, args, diff, v, outs_inexact, fd))
            derived.append((J, list(args) + v, f"jvp({label})"))
        if "rev" in modes:
            try:
                V = vjp_jaxpr(jaxpr, diff)
            except NoReverseMode as e:
                why = f"no reverse mode in JAX ({e.message.split('. ')[0]})"
                rows = [("vjp vs finite differences", tol)]
                rows += [("dot product (adjoint)", dot_tol)] * (jv is not None)
                checks += [Check(n, float("nan"), t, label, skipped=why) for n, t in rows]
                return checks, derived
            jtw, own_jtw, f64, judged, outs = self.judge.derivative(V, list(args) + w, n_out)
            about.setdefault("nonfinite", _nonfinite(outs, outs_inexact))
            lhs = sum(_pairing(a, b) for a, b in zip(w, fd))
            rhs = sum(_pairing(a, b) for a, b in zip(jtw, v))
            sizes = max(_norm(w) * _norm(fd), _norm(jtw) * _norm(v))
            c = Check("vjp vs finite differences", _pair_error(lhs, rhs, sizes), tol, **about)
            self._precision(c, judged, own_jtw, f64, theirs, "vjp")
            checks.append(self._settle(c, fds, args, diff, v, outs_inexact, fd))
            derived.append((V, list(args) + w, f"vjp({label})"))
            if jv is not None:
                checks.append(self._adjoint(w, v, jv, jtw, own_jv, own_jtw, dot_tol, judged, about))
        return checks, derived

    @staticmethod
    def _precision(c: Check, judged, own, f64, theirs: JaxDerivatives, kind: str) -> None:
        """Fill in where `c` was judged and, as information, how far the program's own
        derivative and JAX's are from the float64 one."""
        c.judged_in = judged
        if f64 is not None:
            c.own_error = worst(map(_rel_err, own, f64))
            c.jax_error = theirs.error(kind, f64)

    def _settle(self, c: Check, fds, args, diff, v, outs_idx, fd) -> Check:
        """A check that fails where the finite differences themselves do not settle (steps
        h and h/2 disagree beyond the tolerance: saturation, a kink inside the step) is
        inconclusive, with that reason; measured only for a failure (two more runs)."""
        if c.within or c.nonsmooth is not None or c.nonfinite or math.isnan(c.error):
            return c
        if self.given.get("eps") or self.given.get("tol"):  # the user's step or tolerance
            return c
        spread = fds.spread(args, diff, v, outs_idx, fd)
        if spread > c.tolerance:
            c.unsettled = (
                f"finite differences do not settle at the point: steps h and h/2 differ by "
                f"{spread:.1e} (saturated, or a kink within the step)"
            )
        return c

    @staticmethod
    def _adjoint(w, v, jv, jtw, own_jv, own_jtw, dot_tol, judged, about) -> Check:
        """The dot-product test <w, J v> = <J^T w, v> between the judged jvp and vjp
        programs; the programs' own runs give its precision."""

        def error(jv, jtw):
            a = sum(_pairing(x, y) for x, y in zip(w, jv))
            b = sum(_pairing(x, y) for x, y in zip(jtw, v))
            return _pair_error(a, b, max(_norm(w) * _norm(jv), _norm(jtw) * _norm(v)))

        c = Check("dot product (adjoint)", error(jv, jtw), dot_tol, **about)
        c.nonsmooth = c.hidden_by = None  # an identity between the programs: no FD involved
        c.judged_in = judged
        if own_jv is not jv:
            c.own_error = error(own_jv, own_jtw)
        return c

    def inputs_to_check(self, jaxpr: Jaxpr, label: str, top: bool) -> list[int]:
        """The inputs to perturb: --argnums for the program itself, else every float input."""
        n = len(jaxpr.invars)
        if self.argnums is None or not top:
            diff = [i for i, v in enumerate(jaxpr.invars) if is_inexact(v.type)]
        else:
            diff = []
            for i in self.argnums:
                if not -n <= i < n:
                    raise JaxprError(f"--argnums: input {i} does not exist (the program has {n})")
                i %= n
                if not is_inexact(jaxpr.invars[i].type):
                    t = jaxpr.invars[i].type
                    raise JaxprError(f"--argnums: input {i} ({t}) is not float or complex")
                diff.append(i)
        if not diff:
            raise JaxprError(f"{label}: no float or complex inputs to differentiate")
        return diff


class FiniteDifferences:
    """Central differences of a program along a direction.

    In a float64 copy of the program when one type-checks (`widen`), else in the program's
    precision with one Richardson step.  The direction is redrawn when a non-smooth
    equation takes different branches at the two ends of the step (every bool/integer
    result, and each primitive's `kink_indicator`: max compares its operands, abs takes a
    sign, ...); when every direction tried crosses a tie, that equation's location is
    returned, so the check is reported as non-smooth there instead of failing."""

    def __init__(self, run, jaxpr: Jaxpr, dtype: str, eps: float | None = None):
        from .widen import widen

        self.run = run
        self.jaxpr = jaxpr
        self.wide = widen(jaxpr)
        self.indicators: dict[tuple, tuple | None] = {}  # per set of perturbed inputs
        if eps is not None:
            self.eps = eps
        elif self.wide is not None:
            self.eps = WIDE_EPS
        else:
            self.eps = EPS.get(dtype.replace("complex64", "float32"), 1e-3)

    def directional(self, args, diff, outs_idx, rng):
        """(direction per perturbed input, FD of each inexact output, kink location or None)."""
        kink = None
        for _ in range(KINK_RETRIES):
            v = [_random_like(args[i], rng) for i in diff]
            kink = self.crossed_kink(args, diff, v)
            if kink is None:
                break
        return v, self.differences(args, diff, v, outs_idx), kink

    def _program_args(self, args):
        if self.wide is None:
            return self.jaxpr, list(args)
        from .widen import wide_dtype

        return self.wide, [np.asarray(a).astype(wide_dtype(a)) for a in args]

    def _shifted(self, prog, args, diff, v, h):
        xs = list(args)
        for i, d in zip(diff, v):
            x = np.asarray(args[i])
            xs[i] = (x + h * np.asarray(d).astype(x.dtype)).astype(x.dtype)
        return self.run(prog, xs, reference=True)

    def _central(self, prog, args, diff, v, outs_idx, h):
        plus = self._shifted(prog, args, diff, v, h)
        minus = self._shifted(prog, args, diff, v, -h)
        return [
            (np.asarray(plus[i], np.complex128) - np.asarray(minus[i], np.complex128)) / (2 * h)
            for i in outs_idx
        ]

    def differences(self, args, diff, v, outs_idx, h: float | None = None):
        h = h or self.eps
        prog, xs = self._program_args(args)
        d1 = self._central(prog, xs, diff, v, outs_idx, h)
        if self.wide is not None:
            return d1
        d2 = self._central(prog, xs, diff, v, outs_idx, h / 2)
        return [(4 * b - a) / 3 for a, b in zip(d1, d2)]

    def spread(self, args, diff, v, outs_idx, fd) -> float:
        """How far the differences `fd` (step h) move at step h/2, relative as `_rel_err`:
        small where they have settled on the derivative, large where the point is
        ill-conditioned for them (saturation, a kink within the step)."""
        half = self.differences(args, diff, v, outs_idx, self.eps / 2)
        return worst(map(_rel_err, half, fd))

    def crossed_kink(self, args, diff, v) -> str | None:
        """The location of the first non-smooth equation whose branch differs at x - h v
        and x + h v, or None."""
        key = tuple(diff)
        if key not in self.indicators:
            self.indicators[key] = kink_indicators(self.wide or self.jaxpr, diff)
        if self.indicators[key] is None:
            return None
        prog, locs = self.indicators[key]
        _, xs = self._program_args(args)
        plus = self._shifted(prog, xs, diff, v, self.eps)
        minus = self._shifted(prog, xs, diff, v, -self.eps)
        for a, b, loc in zip(plus, minus, locs):
            if not np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True):
                return str(loc) if loc is not None else "an equation without a location"
        return None


def kink_indicators(jaxpr: Jaxpr, perturbed=None):
    """(a program computing the branch indicators of `jaxpr`'s equations, their locations),
    or None when it has none.  The body of a call-like equation (a nested jaxpr taking its
    operands and giving its results: jit, custom_jvp/custom_vjp functions such as relu,
    remat) is copied in, so that a kink inside it (relu's `max x 0`) is one too.
    `perturbed`: the inputs moved (indices; None: all): an equation none of whose operands
    depends on them takes the same branch at both ends (a dropout mask's random bits), and
    leaving its indicators out keeps the program small for XLA."""
    from ..ad import builder as B

    b = B.Builder()
    outs, locs = [], []
    moved = {id(v) for i, v in enumerate(jaxpr.invars) if perturbed is None or i in perturbed}
    with B.use(b):
        for e in jaxpr.eqns:
            b.add_eqn(e)
            _indicate(b, e, outs, locs, moved)
    if not outs:
        return None
    return B.make_jaxpr(jaxpr.invars, b.eqns, outs, jaxpr.constvars), locs


def _indicate(b, e, outs, locs, moved: set) -> None:
    """Append the branch indicators of equation `e` (already in builder `b`) to outs/locs,
    where an operand of `e` is in `moved` (the ids of the values the perturbation moves,
    which grows by `e`'s results)."""
    from ..ad import builder as B
    from ..record import prim

    if not any(id(x) in moved for x in e.inputs):
        return
    moved.update(id(o) for o in e.outputs)
    for o in e.outputs:
        if _discrete(o.type):
            outs.append(o)
            locs.append(e.loc)
    rule = prim(e.prim).kink_indicator
    if rule is not None:
        b.loc = e.loc
        for x in rule(e):
            outs.append(x)
            locs.append(e.loc)
        return
    body = _call_like_body(e)
    if body is not None:
        body = B.clone_jaxpr(body)
        mapping = {id(v): x for v, x in zip(body.invars, e.inputs)}
        for inner in B.substitute(list(body.eqns), mapping):
            b.add_eqn(inner)
            _indicate(b, inner, outs, locs, moved)


def _call_like_body(e):
    """The nested jaxpr that computes `e`'s results from its operands, if it has one (same
    arity and types both ways, no constants of its own); None otherwise (a loop body, a
    branch, a reducer)."""
    from ..shapes.util import types_agree

    for v in e.params.values():
        if (
            isinstance(v, Jaxpr)
            and not v.constvars
            and len(v.invars) == len(e.inputs)
            and len(v.outvars) == len(e.outputs)
            and all(types_agree(i.type, x.type) for i, x in zip(v.invars, e.inputs))
            and all(types_agree(o.type, y.type) for o, y in zip(v.outvars, e.outputs))
        ):
            return v
    return None


def _discrete(t) -> bool:
    from ..core import ShapedArray

    return isinstance(t, ShapedArray) and (t.dtype == "bool" or t.dtype[:1] in "iu")


def check_grad(
    jaxpr: Jaxpr,
    args,
    run,
    seed: int = 0,
    order: int = 1,
    modes=("fwd", "rev"),
    label="f",
    argnums=None,
    tolerances=None,
):
    """All checks up to `order`; returns the list of `Check`s.  `tolerances`: {"tol",
    "dot_tol", "eps"} given by the user (None or missing: JAX's defaults for the dtype)."""
    checker = GradChecker(run, np.random.default_rng(seed), argnums, tolerances)
    checks, derived = checker.check(jaxpr, args, label, modes)
    if order >= 2:
        for prog, prog_args, name in derived:
            more, _ = checker.check(prog, prog_args, name, modes, top=False)
            checks.extend(more)
    return checks


def render_table(
    checks: list[Check], title: str, color: bool | None = None, replaced: list[str] = ()
):
    """A rich table of the checks (the width is the console's: the terminal's, else 80);
    `replaced`: the custom rules that were replaced by body derivatives (what the verdict
    did not check).  `color` None: as the console decides (--color, NO_COLOR, a terminal)."""
    import sys

    from rich import box
    from rich.markup import escape
    from rich.table import Table

    from ..io import console
    from .tables import print_table

    caption = None
    if replaced:
        caption = "checked against the body, not the custom rule: " + "; ".join(replaced)
    title = escape(shown_path(title))  # a file's name: no markup, no raw control characters
    table = Table(title=title, caption=caption, box=box.SIMPLE_HEAD, show_lines=False)
    table.add_column("program", no_wrap=True, overflow="fold")
    table.add_column("check", ratio=1)
    table.add_column("error", justify="right", no_wrap=True)
    table.add_column("tol", justify="right", no_wrap=True)
    table.add_column("result", no_wrap=True)
    for c in checks:
        if c.nonsmooth or c.skipped or c.inconclusive:
            verdict = f"[yellow]{escape(c.verdict)}[/]"
        else:
            verdict = "[green]pass[/]" if c.passed else f"[bold red]{c.verdict}[/]"
        error = "-" if c.skipped else f"{c.error:.2e}"
        table.add_row(escape(shown_path(c.program)), c.name, error, f"{c.tolerance:.0e}", verdict)
    con = console(sys.stdout)
    if color is False:
        con.no_color = True
    print_table(con, table)
    for line in precision_lines(checks):
        con.print(escape(line))


def precision_lines(checks: list[Check]) -> list[str]:
    """Below the table: what the verdicts were judged in, and (information) how far the
    program's own derivative and JAX's are from the float64 one, per program."""
    lines = []
    for program in dict.fromkeys(c.program for c in checks):
        rows = [c for c in checks if c.program == program and c.judged_in]
        if not rows:
            continue
        judged = "; ".join(dict.fromkeys(c.judged_in for c in rows))
        if judged == "f64":
            judged = "float64 (the derivative programs' float64 copies, on the CPU)"
        own = [f"{c.name.split()[0]} {c.own_error:.1e}" for c in rows if c.own_error is not None]
        ref = [f"{c.name.split()[0]} {c.jax_error:.1e}" for c in rows if c.jax_error is not None]
        line = f"{shown_path(program)}: judged in {judged}"
        if own:
            line += f"; its own derivative from float64: {', '.join(own)}"
        if ref:
            line += f"; JAX's at the same point: {', '.join(ref)}"
        lines.append(line)
    return lines
