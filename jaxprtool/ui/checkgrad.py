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

from dataclasses import dataclass

import numpy as np

from ..core import Jaxpr, JaxprError, is_inexact

#: JAX's default gradient tolerances (jax._src.public_test_util.default_gradient_tolerance)
TOLERANCE = {
    "float16": 1e-2,
    "bfloat16": 1e-1,
    "float32": 2e-3,
    "float64": 1e-5,
    "complex64": 2e-3,
    "complex128": 1e-5,
}
#: the adjoint identity holds to rounding: much tighter
DOT_TOLERANCE = {
    "float16": 1e-2,
    "bfloat16": 1e-1,
    "float32": 2e-5,
    "float64": 1e-12,
    "complex64": 2e-5,
    "complex128": 1e-12,
}
EPS = {"float16": 1e-2, "bfloat16": 1e-1, "float32": 1e-3, "float64": 1e-6}


@dataclass
class Check:
    """One numerical check: its measured error against its tolerance."""

    name: str
    error: float
    tolerance: float
    program: str = ""  # which program was checked (f, jvp(f), vjp(f))

    @property
    def passed(self) -> bool:
        return bool(self.error <= self.tolerance)


def least_precise_dtype(jaxpr: Jaxpr) -> str:
    """The least precise float/complex dtype anywhere in the program (inputs, outputs and every
    intermediate): a bf16 cast in the middle makes finite differences and the adjoint identity
    only as accurate as bf16, so step and tolerance follow it."""
    from ..core import all_eqns, long_dtype_name

    types = [v.type for v in jaxpr.invars] + [a.type for a in jaxpr.outvars]
    types += [o.type for e in all_eqns(jaxpr) for o in e.outputs]
    names = {long_dtype_name(t.dtype) for t in types if is_inexact(t)}
    for n in ("bfloat16", "float16", "float32", "complex64", "float64", "complex128"):
        if n in names:
            return n
    return "float32"


def _vdot(a, b) -> float:
    return float(np.real(np.vdot(np.asarray(a, np.complex128), np.asarray(b, np.complex128))))


def _rel_err(got, expected) -> float:
    """max |got - expected| / max(1, |expected|), over all elements."""
    got = np.asarray(got, np.complex128)
    expected = np.asarray(expected, np.complex128)
    if got.size == 0:
        return 0.0
    scale = max(1.0, float(np.max(np.abs(expected))))
    return float(np.max(np.abs(got - expected))) / scale


def _random_like(x, rng):
    x = np.asarray(x)
    r = rng.standard_normal(x.shape)
    if np.iscomplexobj(x):
        r = r + 1j * rng.standard_normal(x.shape)
    return r.astype(x.dtype)


class GradChecker:
    def __init__(self, run, rng):
        self.run = run  # run(jaxpr, args) -> list[np.ndarray]
        self.rng = rng

    def check(
        self, jaxpr: Jaxpr, args, label: str, modes
    ) -> tuple[list[Check], list[tuple[Jaxpr, list, str]]]:
        """Checks of f = jaxpr at args; also returns the derivative programs and their inputs."""
        from ..ad.api import jvp_jaxpr, vjp_jaxpr

        diff = [i for i, v in enumerate(jaxpr.invars) if is_inexact(v.type)]
        outs_inexact = [i for i, v in enumerate(jaxpr.outvars) if is_inexact(v.type)]
        if not diff:
            raise JaxprError(f"{label}: no float or complex inputs to differentiate")
        if not outs_inexact:
            raise JaxprError(f"{label}: no float or complex outputs to differentiate")
        dtype = least_precise_dtype(jaxpr)
        tol, eps = TOLERANCE.get(dtype, 2e-3), EPS.get(dtype.replace("complex64", "float32"), 1e-3)
        if dtype == "complex128":
            eps = 1e-6
        v = [_random_like(args[i], self.rng) for i in diff]
        n_out = len(jaxpr.outvars)
        outs = self.run(jaxpr, args)
        w = [_random_like(outs[i], self.rng) for i in outs_inexact]

        def shifted(sign):
            xs = list(args)
            for i, d in zip(diff, v):
                xs[i] = (np.asarray(args[i]) + sign * eps * d).astype(np.asarray(args[i]).dtype)
            return self.run(jaxpr, xs)

        plus, minus = shifted(+1), shifted(-1)
        fd = [
            (np.asarray(plus[i], np.complex128) - np.asarray(minus[i], np.complex128)) / (2 * eps)
            for i in outs_inexact
        ]
        checks: list[Check] = []
        derived: list[tuple[Jaxpr, list, str]] = []
        jv = None
        if "fwd" in modes:
            J = jvp_jaxpr(jaxpr, diff)
            jvp_outs = self.run(J, list(args) + v)
            jv = jvp_outs[n_out:]
            err = max(_rel_err(a, b) for a, b in zip(jv, fd))
            checks.append(Check("jvp vs finite differences", err, tol, label))
            derived.append((J, list(args) + v, f"jvp({label})"))
        if "rev" in modes:
            V = vjp_jaxpr(jaxpr, diff)
            vjp_outs = self.run(V, list(args) + w)
            jtw = vjp_outs[n_out:]
            lhs = sum(_vdot(a, b) for a, b in zip(w, fd))
            rhs = sum(_vdot(a, b) for a, b in zip(jtw, v))
            scale = max(1.0, abs(lhs))
            checks.append(Check("vjp vs finite differences", abs(lhs - rhs) / scale, tol, label))
            derived.append((V, list(args) + w, f"vjp({label})"))
            if jv is not None:
                a = sum(_vdot(x, y) for x, y in zip(w, jv))
                scale = max(1.0, abs(a), abs(rhs))
                checks.append(
                    Check(
                        "dot product (adjoint)",
                        abs(a - rhs) / scale,
                        DOT_TOLERANCE.get(dtype, 2e-5),
                        label,
                    )
                )
        return checks, derived


def check_grad(
    jaxpr: Jaxpr, args, run, seed: int = 0, order: int = 1, modes=("fwd", "rev"), label="f"
):
    """All checks up to `order`; returns the list of `Check`s."""
    checker = GradChecker(run, np.random.default_rng(seed))
    checks, derived = checker.check(jaxpr, args, label, modes)
    if order >= 2:
        for prog, prog_args, name in derived:
            more, _ = checker.check(prog, prog_args, name, modes)
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
    from rich.table import Table

    from ..io import console

    caption = None
    if replaced:
        caption = "checked against the body, not the custom rule: " + "; ".join(replaced)
    table = Table(title=title, caption=caption, box=box.SIMPLE_HEAD, show_lines=False)
    table.add_column("program", no_wrap=True, overflow="fold")
    table.add_column("check", ratio=1)
    table.add_column("error", justify="right", no_wrap=True)
    table.add_column("tol", justify="right", no_wrap=True)
    table.add_column("result", no_wrap=True)
    for c in checks:
        verdict = "[green]pass[/]" if c.passed else "[bold red]FAIL[/]"
        table.add_row(c.program, c.name, f"{c.error:.2e}", f"{c.tolerance:.0e}", verdict)
    con = console(sys.stdout)
    if color is False:
        con.no_color = True
    con.print(table)
