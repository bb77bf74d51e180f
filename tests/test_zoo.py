"""The zoo: real programs of the JAX ecosystem (tests/zoo.py: Flax linen and nnx, optax, Equinox,
diffrax, jax.scipy) traced once per session, then each command on each program against JAX:

- fmt prints JAX's text byte for byte; check passes;
- run gives JAX's numbers (jax.jit of the same function on the same inputs);
- grad equals JAX's gradient (jax.vjp pulled back from the loss's unit cotangent, which is what
  jax.grad computes; the auxiliary outputs of a has_aux program equal JAX's outputs), jvp equals
  jax.jvp (J v from jax.jacrev where a custom_vjp stops JAX's forward mode);
- linearize (its combined form, run on x and a tangent v) equals jax.jvp, linearize | transpose
  (run on x and a cotangent w) equals jax.vjp, and the two pass the dot-product test
  <w, L v> = <L^T w, v>;
- check-grad passes (the tool's jvp and vjp against finite differences).

expm and the diffrax ODE are also traced with `jaxprtool trace --consts-out`: JAX's printout
lacks the values of the constants their nested jits close over (and Equinox's custom_vjp rule),
so the commands other than fmt read the tool's text and pass the saved constants.

The default run checks the programs in FAST; `make test-full` the whole zoo.  Costs (2
cores): about 110 s of CPU for the 12 programs, threefry dropout in the GPT the
largest part (XLA compiles each `random_bits` for seconds).  A program whose packages are missing is skipped with the install command.  A case that fails
today for a known missing rule is `xfail(strict=True)` with the exact error: it fails while the
tool gives that error, the test turns into a failure (XPASS) once the rule lands, and any other
error is a failure too.
"""

from __future__ import annotations

import functools
import os

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
import zoo  # noqa: E402
from jax_oracle import close, run  # noqa: E402

RUN_TOL = 1e-5  # the tool's `run` binds JAX's own primitives: the same numbers up to fusion order

FORWARD_MODE_CUSTOM_VJP = "can't apply forward-mode autodiff (jvp) to a custom_vjp function"
AD_COMMANDS = ("grad", "jvp", "linearize_transpose")

#: (program, command) -> the error the tool gives today (a rule that other work adds);
#: check-grad runs the program first, so it meets a run error before a missing rule
KNOWN_GAPS = {
    # JAX refuses it too (its jvp reference here is J v from jax.jacrev); check-grad checks jvp
    ("diffrax_ode", "jvp"): FORWARD_MODE_CUSTOM_VJP,
    ("diffrax_ode", "check_grad"): FORWARD_MODE_CUSTOM_VJP,
}

#: programs whose JAX printout lacks what the commands need (the values of constants a nested
#: jit closes over, Equinox's custom_vjp rule): the commands other than fmt read what
#: `jaxprtool trace --consts-out` writes for them
TRACED_BY_THE_TOOL = ("expm", "diffrax_ode")

#: the programs every command is checked on in the default run (`make test`); the rest of the
#: zoo is marked slow (`make test-full`): gp_nll needs only JAX (cholesky, solve_triangular,
#: a nested jit), expm is traced by the tool (`trace --consts-out`, `--consts`)
FAST = ("gp_nll", "expm")
#: expm's derivatives take seconds each: the default run checks its constants (`--consts`)
#: through run; its grad, jvp, linearize|transpose and check-grad are `make test-full`'s
#: (gp_nll's run in the default run, and test_consts_order's derivatives and check-grad
#: take an archive of constants).  gp_nll's check-grad (~1.5 CPU-s) too: its derivatives
#: are JAX's in the default run (grad, jvp, linearize|transpose), and check-grad through
#: cholesky and solves is test_check_grad_verdicts.py's linalg program's
FAST_COMMANDS = {
    "expm": ("fmt", "check", "run"),
    "gp_nll": ("fmt", "check", "run", "grad", "jvp", "linearize_transpose"),
}


class KnownGap(Exception):
    """The tool failed with the error recorded in KNOWN_GAPS."""


def cases(command):
    """The zoo's programs for one command, with their skip and xfail marks."""
    params = []
    for name in zoo.NAMES:
        fast = name in FAST and command in FAST_COMMANDS.get(name, (command,))
        marks = [] if fast else [pytest.mark.slow]
        missing = [p for p in zoo.NEEDS[name] if not zoo.have(p)]
        if missing:
            why = f"needs {', '.join(missing)}: pip install -e '.[zoo]'"
            marks.append(pytest.mark.skip(reason=why))
        gap = KNOWN_GAPS.get((name, command))
        if gap is not None:
            marks.append(pytest.mark.xfail(strict=True, raises=KnownGap, reason=gap))
        params.append(pytest.param(name, marks=marks, id=name))
    return params


def expect_ok(result, name, command):
    if result.exit_code == 0:
        return result.output
    gap = KNOWN_GAPS.get((name, command))
    if gap is not None and gap in result.output:
        raise KnownGap(result.output)
    raise AssertionError(f"exit {result.exit_code}:\n{result.output}")


# ---------------------------------------------------------------- the traced zoo


class Case:
    """One program traced by JAX: its text file, its inputs, a tangent v for the differentiated
    inputs, and (when a test first asks) JAX's values: outputs, grad, jvp along v, vjp of a
    cotangent w for the float outputs."""

    def __init__(self, name, folder):
        self.name = name
        self.program = p = zoo.build(name)
        self.text = zoo.trace(p)
        self.path = folder / f"{name}.jaxpr"
        self.path.write_text(self.text)
        self.folder = folder
        self.src, self.consts = self.path, None  # the text the commands other than fmt read
        if name in TRACED_BY_THE_TOOL:
            self.src, self.consts = self._trace_with_the_tool()
        rng = np.random.default_rng(0)
        self.v = [
            rng.uniform(-1, 1, np.shape(p.args[i])).astype(p.args[i].dtype) for i in p.argnums
        ]
        self.argnums = ",".join(map(str, p.argnums))

    def _trace_with_the_tool(self):
        """`jaxprtool trace --consts-out` of the program: its text with the custom rules
        recorded, and the values of the constants JAX's printout names but lacks."""
        module = self.folder / f"zoo_traced_{self.name}.py"
        module.write_text(f"import zoo\n\nf = zoo.build({self.name!r}).fn\n")
        args = self.save("trace_args", self.program.args)
        src = self.folder / f"{self.name}.traced.jaxpr"
        consts = self.folder / f"{self.name}.consts.npz"
        cwd = os.getcwd()
        os.chdir(self.folder)
        try:
            target = f"{module.stem}:f"
            r = run(["trace", target, "--args", args, "-o", str(src), "--consts-out", str(consts)])
        finally:
            os.chdir(cwd)
        assert r.exit_code == 0, r.output
        return src, str(consts)

    def with_consts(self, args):
        return [*args, "--consts", self.consts] if self.consts else list(args)

    @functools.cached_property
    def ref(self):
        return jax_reference(self.program, self.v, np.random.default_rng(1))

    @functools.cached_property
    def outs(self):
        """JAX's outputs (what `ref` holds as "outs", without compiling its derivatives)."""
        if "ref" in self.__dict__:
            return self.ref["outs"]
        outs = jax.jit(_raw(self.program))(*self.program.args)
        return [np.asarray(o) for o in outs]

    @property
    def w(self):
        return self.ref["w"]

    def save(self, tag, arrays):
        path = self.folder / f"{self.name}.{tag}.npz"
        np.savez(path, *arrays)
        return str(path)

    def tool(self, command, *args):
        """The CLI on these arguments: its output, or KnownGap / AssertionError."""
        return expect_ok(run(["--no-color", *args]), self.name, command)

    def run_program(self, command, program_path, inputs, tag):
        """`jaxprtool run` of a program file on these inputs: its outputs."""
        out = self.folder / f"{self.name}.{tag}.out.npz"
        inputs = self.save(tag, inputs)
        self.tool(
            command, "run", *self.with_consts([str(program_path), "--args", inputs, "-o", str(out)])
        )
        with np.load(out) as d:
            return [d[f"out{i}"] for i in range(len(d.files))]


def _raw(program):
    """The program's function on raw arguments (PRNG key data wrapped inside)."""

    def fn(*args):
        args = [
            jax.random.wrap_key_data(a) if i in program.key_inputs else a
            for i, a in enumerate(args)
        ]
        out = program.fn(*args)
        return list(out) if isinstance(out, (tuple, list)) else [out]

    return fn


def jax_reference(program, v, rng):
    """JAX's outputs; its vjp pulled back twice, once from the unit cotangent of the loss (which
    is jax.grad) and once from a random w; its jvp along v (or J v from jax.jacrev where a
    custom_vjp forbids forward mode): one jit for all."""
    fn, args, argnums = _raw(program), program.args, program.argnums
    outs = jax.jit(fn)(*args)
    floats = [jnp.issubdtype(o.dtype, jnp.inexact) for o in outs]
    w = [rng.uniform(-1, 1, o.shape).astype(o.dtype) for o, f in zip(outs, floats) if f]

    def of_diff(*diff):
        full = list(args)
        for i, d in zip(argnums, diff):
            full[i] = d
        return fn(*full)

    def cotangent(out, float_cts):
        it = iter(float_cts)
        return [
            next(it) if f else np.zeros(o.shape, jax.dtypes.float0) for o, f in zip(out, floats)
        ]

    def derivatives(primals, tangents, w):
        out, pull = jax.vjp(of_diff, *primals)
        unit = [jnp.ones_like(out[0])] + [
            jnp.zeros_like(o) for o, f in zip(out[1:], floats[1:]) if f
        ]
        grads = pull(cotangent(out, unit))
        if program.forward_mode:
            tan = jax.jvp(of_diff, primals, tangents)[1]
        else:
            jac = jax.jacrev(of_diff, argnums=tuple(range(len(primals))))(*primals)
            tan = [sum(jnp.tensordot(j, t, t.ndim) for j, t in zip(row, tangents)) for row in jac]
        return list(grads), [t for t, f in zip(tan, floats) if f], list(pull(cotangent(out, w)))

    primals = [args[i] for i in argnums]
    grads, jvp_out, vjp_out = jax.jit(derivatives)(primals, v, w)
    as_np = functools.partial(jax.tree_util.tree_map, np.asarray)
    return {
        "outs": as_np(outs),
        "w": w,
        "grad": as_np(grads),
        "jvp": as_np(jvp_out),
        "vjp": as_np(vjp_out),
    }


@pytest.fixture(scope="module")
def zoo_cases(tmp_path_factory):
    """Each program traced once, when a test first asks for it."""
    folder = tmp_path_factory.mktemp("zoo")
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = Case(name, folder)
        return cache[name]

    return get


def _dot(xs, ys):
    return sum(
        float(np.vdot(np.asarray(x, np.float64), np.asarray(y, np.float64))) for x, y in zip(xs, ys)
    )


# ---------------------------------------------------------------- the commands


@pytest.mark.parametrize("name", cases("fmt"))
def test_fmt_is_jax_text(zoo_cases, name):
    c = zoo_cases(name)
    assert c.tool("fmt", "fmt", str(c.path)) == c.text + "\n"


@pytest.mark.parametrize("name", cases("check"))
def test_check(zoo_cases, name):
    c = zoo_cases(name)
    c.tool("check", "check", str(c.path))
    c.tool("check", "check", str(c.src))


@pytest.mark.parametrize("name", cases("run"))
def test_run_equals_jax(zoo_cases, name):
    c = zoo_cases(name)
    got = c.run_program("run", c.src, c.program.args, "args")
    assert len(got) == len(c.outs)
    for a, b in zip(got, c.outs):
        assert a.dtype == b.dtype and a.shape == b.shape
        close(a, b, RUN_TOL)


@pytest.mark.parametrize("name", cases("grad"))
def test_grad_equals_jax_grad(zoo_cases, name):
    c = zoo_cases(name)
    g = c.folder / f"{name}.grad.jaxpr"
    aux = ["--has-aux"] if c.program.has_aux else []
    c.tool("grad", "grad", "--argnums", c.argnums, *aux, str(c.src), "-o", str(g))
    got = c.run_program("grad", g, c.program.args, "grad")
    n_aux = len(c.ref["outs"]) - 1 if c.program.has_aux else 0
    for a, b in zip(got[:n_aux], c.ref["outs"][1:]):
        close(a, b, RUN_TOL)
    assert len(got) == n_aux + len(c.ref["grad"])
    for a, b in zip(got[n_aux:], c.ref["grad"]):
        close(a, b)


@pytest.mark.parametrize("name", cases("jvp"))
def test_jvp_equals_jax_jvp(zoo_cases, name):
    c = zoo_cases(name)
    j = c.folder / f"{name}.jvp.jaxpr"
    c.tool("jvp", "jvp", "--argnums", c.argnums, str(c.src), "-o", str(j))
    got = c.run_program("jvp", j, c.program.args + c.v, "jvp")
    _compare_primal_then(got, c.ref["outs"], c.ref["jvp"])


def _compare_primal_then(got, outs, derivative):
    assert len(got) == len(outs) + len(derivative)
    for a, b in zip(got, outs):
        close(a, b, RUN_TOL)
    for a, b in zip(got[len(outs) :], derivative):
        close(a, b)


@pytest.mark.parametrize("name", cases("linearize_transpose"))
def test_linearize_transpose_equals_jax_vjp(zoo_cases, name):
    """linearize's combined form run on (x, v) is jax.jvp; piped through transpose and run on
    (x, w) it is jax.vjp; <w, L v> = <L^T w, v> between the two."""
    c = zoo_cases(name)
    lin, vjp = c.folder / f"{name}.lin.jaxpr", c.folder / f"{name}.vjp.jaxpr"
    cmd = "linearize_transpose"
    c.tool(cmd, "linearize", "--argnums", c.argnums, str(c.src), "-o", str(lin))
    c.tool(cmd, "transpose", str(lin), "-o", str(vjp))
    lv = c.run_program(cmd, lin, c.program.args + c.v, "lin")
    _compare_primal_then(lv, c.ref["outs"], c.ref["jvp"])
    ltw = c.run_program(cmd, vjp, c.program.args + c.w, "vjp")
    _compare_primal_then(ltw, c.ref["outs"], c.ref["vjp"])
    lhs = _dot(c.w, lv[len(c.ref["outs"]) :])
    rhs = _dot(ltw[len(c.ref["outs"]) :], c.v)
    assert abs(lhs - rhs) <= 1e-4 * max(1.0, abs(lhs)), (lhs, rhs)


@pytest.mark.parametrize("name", cases("check_grad"))
def test_check_grad(zoo_cases, name):
    c = zoo_cases(name)
    args = c.save("args", c.program.args)
    argv = ["check-grad", "--argnums", c.argnums, "--args", args, str(c.src)]
    out = c.tool("check_grad", *c.with_consts(argv))
    assert "FAIL" not in out and out.count("pass") == 3, out
