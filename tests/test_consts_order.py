"""The one numbering of nested constants (`jaxprtool/consts_order.py`): what `trace
--consts-out` writes is what `run --consts`, `compile`, `check-grad`, `explain` and the
programs every AD command writes read.

JAX 0.12 prints what a jitted function closes over as constvars of its body; hoisting
(`passes/hoist_consts.py`) makes a body's constants operands of its equation, up to the
program's constants.  The programs below have same-typed (f32[3]) constants of different
values in all of these places: the program's own (what a scan or while body closes over
directly, which JAX makes operands of the loop), a jitted call's body at the top level, and
jitted calls inside a cond branch, a scan body and a while body, so that any other order
would give the archive's values to the wrong binders without a type error.  Every number is
compared with JAX's on the same function and input.
"""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
from conftest import written_module  # noqa: E402
from jax_oracle import close, explain_walks, run  # noqa: E402
from traced import archive, derive, run_with_consts, trace_module  # noqa: E402

from jaxprtool.backend.consts import all_constvars  # noqa: E402
from jaxprtool.consts_order import nested_with_consts, number_constants  # noqa: E402
from jaxprtool.core import JaxprError, all_eqns, eqn_subjaxprs  # noqa: E402
from jaxprtool.text.parser import parse  # noqa: E402

SOURCE = """
import jax
import jax.numpy as jnp
import numpy as np

def _c(*v):
    return jnp.array(v, np.float32)

E = _c(0.25, -0.5, 0.75)  # used at the top level: the program's own constant
A = _c(1.0, 2.0, 3.0)  # a jitted call in a cond branch
C = _c(0.5, -1.0, 2.0)  # a jitted call in a scan body
D = _c(1.5, 1.25, 1.1)  # a jitted call in a while body
B = _c(2.0, 2.5, -3.0)  # a jitted call at the top level, after the others
P = _c(0.5, -0.25, 0.75)  # a jitted call at the top level, before the loop
Q = _c(1.5, 0.5, -1.0)  # what the loop body closes over itself: the program's own constant
K = _c(0.5, 1.0, 0.25)  # a jitted call in a while loop's cond


def _tail(y):
    return jnp.sum(jax.jit(lambda v: jnp.sin(v) * B)(y) ** 2)


def f(x):
    y = jax.lax.cond(x[0] > 0, lambda: jax.jit(lambda v: jnp.sin(v) * A)(x), lambda: x - 1.0)
    y, _ = jax.lax.scan(
        lambda c, _: (jax.jit(lambda v: jnp.cos(v) * C)(c) + c, None), y, None, length=2
    )
    return _tail(y * E)


def w(x):
    y = jax.lax.cond(x[0] > 0, lambda: jax.jit(lambda v: jnp.sin(v) * A)(x), lambda: x - 1.0)
    y, _ = jax.lax.while_loop(
        lambda s: s[1] < 3, lambda s: (jax.jit(lambda v: jnp.tanh(v) * D)(s[0]), s[1] + 1), (y, 0)
    )
    return _tail(y * E)


def g(x):
    y = jax.jit(lambda v: jnp.sin(v) * P)(x)
    y, _ = jax.lax.scan(lambda c, _: (jnp.cos(c) * Q + c, None), y, None, length=2)
    return jnp.sum(y**2)


def c(x):
    y = jax.lax.cond(x[0] > 0, lambda: jax.jit(lambda v: jnp.sin(v) * A)(x), lambda: x - 1.0)
    return _tail(y * E)


def s(x):
    i = jnp.clip(jnp.floor(x[0] * 2.0), 0, 2).astype(jnp.int32)
    branches = [
        lambda v: jax.jit(lambda u: jnp.sin(u) * A)(v),
        lambda v: jax.jit(lambda u: jnp.cos(u) * C)(v),
        lambda v: v * 2.0,
    ]
    return jnp.sum(jax.lax.switch(i, branches, x) * E)


def u(x):
    y, _ = jax.lax.while_loop(
        lambda s: jax.jit(lambda v: jnp.sum(v * K) < 6.0)(s[0]) & (s[1] < 3),
        lambda s: (jax.jit(lambda v: jnp.tanh(v) * D + v)(s[0]), s[1] + 1),
        (x, 0),
    )
    return jnp.sum(y**2)


def h(x):
    y = jax.jit(lambda v: jnp.sin(v) * P)(x)
    y, _ = jax.lax.while_loop(lambda s: s[1] < 2, lambda s: (jnp.cos(s[0]) * Q + s[0], s[1] + 1), (y, 0))
    return jnp.sum(y**2)
"""

#: each traced function's constants in the archive's order (the values JAX closes over)
ORDER = {"f": "EACB", "w": "EADB", "g": "QP", "h": "QP", "c": "EAB", "s": "EAC", "u": "KD"}
#: the functions with a while loop, whose reverse mode JAX refuses too
WHILE = ("w", "h", "u")
#: check-grad's default functions (`make test-full` all of ORDER): jitted calls in a cond
#: branch, a scan body and at the top level (f), a call in a while's cond and body (u,
#: forward only).  (g, a scan body's own constant after a call's, is checked in `make
#: test-full`; in `make test` its archive order is kept by test_run_consts_of_the_traced_
#: text_is_jax and test_every_ad_command_takes_the_traced_constants[g-*].)
CHECKED = ("f", "u")

X = np.array([0.7, -0.4, 1.3], np.float32)  # x[0] > 0: the branch with the call
T = np.array([0.3, 1.0, -0.6], np.float32)


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    """The module above, its functions traced by `jaxprtool trace --consts-out`:
    {name: (text path, constants path)}, and the module itself."""
    folder = tmp_path_factory.mktemp("consts_order")
    return trace_module(folder, "consts_order", SOURCE, ORDER, "--arg", "f32[3]")


@pytest.fixture(scope="module")
def jax_values(traced):
    """{name: JAX's value of each function at X}, one jitted function (one compilation,
    instead of one per operation)."""
    _, mod = traced
    values = jax.jit(lambda x: {fn: getattr(mod, fn)(x) for fn in ORDER})(X)
    return {fn: np.asarray(v) for fn, v in values.items()}


def test_every_constant_is_the_programs_in_one_order(traced):
    """Hoisted, every constant is the program's (none stays in a cond branch, loop body or
    call body), all f32[3], numbered the program's own first, then equation by equation,
    depth first; the archive holds JAX's values in that order."""
    progs, mod = traced
    for fn, names in ORDER.items():
        prog, consts = progs[fn]
        j = parse(prog.read_text(), str(prog)).jaxpr
        assert any(s.constvars for e in all_eqns(j) for s in eqn_subjaxprs(e))
        numbered = number_constants(j)
        h = numbered.program
        assert not any(s.constvars for e in all_eqns(h) for s in eqn_subjaxprs(e))
        assert nested_with_consts(h) == []
        assert numbered.constvars == list(h.constvars) == all_constvars(h)
        assert [str(v.type) for v in h.constvars] == ["f32[3]"] * len(names)
        for got, name in zip(archive(consts), names, strict=True):
            np.testing.assert_array_equal(got, np.asarray(getattr(mod, name)))
        assert number_constants(h).program is h  # reading a hoisted program changes nothing


def test_run_consts_of_the_traced_text_is_jax(traced, jax_values, tmp_path):
    progs, _ = traced
    for fn in ORDER:
        prog, consts = progs[fn]
        (got,) = run_with_consts(tmp_path, prog, [X], consts)
        close(got, jax_values[fn])


def test_run_repeat_eager_and_compile_take_every_constant(traced, jax_values, tmp_path):
    """`run --repeat` and `run --eager` take the same archive, and `compile` takes every
    constant as a parameter before the input."""
    progs, _ = traced
    prog, consts = progs["f"]
    a, o = tmp_path / "a.npz", tmp_path / "o.npz"
    np.savez(a, X)
    for extra in (["--repeat", "2"], ["--eager"]):
        r = run(["run", str(prog), "--args", str(a), "--consts", str(consts), "-o", str(o)] + extra)
        assert r.exit_code == 0, r.output
        with np.load(o) as d:
            close(d["out0"], jax_values["f"])
    r = run(["compile", str(prog)])
    assert r.exit_code == 0, r.output
    main = next(line for line in r.output.splitlines() if "func.func public @main(" in line)
    assert main.count("tensor<3xf32>") == 5  # four constants and x, no result of that type


def test_a_swap_of_same_typed_constants_changes_the_answer(traced, jax_values, tmp_path):
    """The checks here can fail: the same archive with two of its same-typed constants
    swapped runs without an error, and its answer is not JAX's."""
    progs, _ = traced
    for fn, (i, k) in (("f", (1, 3)), ("g", (0, 1))):
        prog, consts = progs[fn]
        values = archive(consts)
        values[i], values[k] = values[k], values[i]
        swapped = tmp_path / "swapped.npz"
        np.savez(swapped, **{f"const{n}": v for n, v in enumerate(values)})
        (got,) = run_with_consts(tmp_path, prog, [X], swapped)
        assert not np.allclose(got, jax_values[fn], rtol=1e-3), fn


def _jax_answers(f, command):
    """(the inputs of the program `command` writes, JAX's results for them)."""
    xs = np.stack([X, 0.5 * X + 0.3, -X])
    one = np.float32(1.0)
    # JAX's answers, jitted: one compilation each (eagerly, one a primitive)
    jvp = jax.jit(lambda x, t: list(jax.jvp(f, (x,), (t,))))
    value_and_grad = jax.jit(lambda x: [f(x), jax.grad(f)(x)])
    answers = {
        "jvp": lambda: ([X, T], jvp(X, T)),
        "linearize": lambda: ([X, T], jvp(X, T)),
        "linearize|transpose": lambda: ([X, one], value_and_grad(X)),
        "vjp": lambda: ([X, one], value_and_grad(X)),
        "grad": lambda: ([X], [jax.jit(jax.grad(f))(X)]),
        "vmap": lambda: ([xs], [jax.jit(jax.vmap(f))(xs)]),
        "jacfwd": lambda: ([X], [jax.jit(jax.jacfwd(f))(X)]),
        "jacrev": lambda: ([X], [jax.jit(jax.jacrev(f))(X)]),
        "hessian": lambda: ([X], [jax.jit(jax.hessian(f))(X)]),
    }
    return answers[command]()


COMMANDS = (
    "jvp",
    "linearize",
    "linearize|transpose",
    "vjp",
    "grad",
    "vmap",
    "jacfwd",
    "jacrev",
    "hessian",
)
REVERSE = ("linearize|transpose", "vjp", "grad", "jacrev", "hessian")


def _cases():
    for fn in ORDER:
        for command in COMMANDS:
            if fn in WHILE and command in REVERSE:
                continue  # reverse mode of a while loop: refused, as by JAX
            yield pytest.param(fn, command, id=f"{fn}-{command}")


@pytest.mark.parametrize(("fn", "command"), list(_cases()))
def test_every_ad_command_takes_the_traced_constants(traced, tmp_path, fn, command):
    """The program each AD command writes takes the archive `trace` wrote for the input,
    and computes JAX's numbers with it."""
    progs, mod = traced
    prog, consts = progs[fn]
    derived = prog
    for step in command.split("|"):
        extra = ["--in-axes", "0", "--axis-size", "3"] if step == "vmap" else []
        derived = derive(tmp_path, step, derived, *extra)
    args, want = _jax_answers(getattr(mod, fn), command)
    got = run_with_consts(tmp_path, derived, args, consts)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        close(a, b)


@pytest.mark.parametrize(
    "fns", [CHECKED, pytest.param(tuple(ORDER), marks=pytest.mark.slow)], ids=["some", "all"]
)
def test_check_grad_takes_the_traced_constants(traced, tmp_path, fns):
    progs, _ = traced
    np.savez(tmp_path / "x.npz", arg0=X)
    for fn in fns:
        prog, consts = progs[fn]
        modes = ["--modes", "fwd"] if fn in WHILE else []
        r = run(
            ["check-grad", str(prog), "--args", str(tmp_path / "x.npz"), "--consts", str(consts)]
            + modes
        )
        assert r.exit_code == 0 and "0 failures" in r.output, r.output


def _explained(argv):
    """The command `argv` run in-process, and the walk its `explain` made (checked without
    walking the program again: `jax_oracle.explain_walks`)."""
    with explain_walks() as walks:
        r = run(argv)
    (data,) = walks
    return r, data


def _jitted_tangent(f):
    return jax.jit(lambda x, t: jax.jvp(f, (x,), (t,))[1])


#: explain's default functions: jitted calls in a while body (w, its jvp walk) and in switch
#: branches (s, its grad walk) (check-grad's default ones take f and u); `make test-full`
#: all of ORDER, each in both modes (but the while loops' jvp alone)
EXPLAINED = ("w", "s")


@pytest.mark.parametrize(
    "fns", [EXPLAINED, pytest.param(tuple(ORDER), marks=pytest.mark.slow)], ids=["some", "all"]
)
def test_explain_takes_the_constants_of_cond_and_loop_bodies(traced, tmp_path, fns):
    """explain with the archive: its checks pass, and the derivative it shows is JAX's
    (the tangent along the direction it drew, the gradient): the walk checked is the
    command's own."""
    progs, mod = traced
    np.savez(tmp_path / "x.npz", arg0=X)
    for fn in fns:
        prog, consts = progs[fn]
        f = getattr(mod, fn)
        if fn in WHILE:
            modes = ("jvp",)
        else:  # (make test: s's grad walk; w's is the jvp one)
            modes = ("grad",) if fns == EXPLAINED else ("jvp", "grad")
        for mode in modes:
            r, data = _explained(
                ["explain", str(prog), "--args", str(tmp_path / "x.npz"), "--mode", mode]
                + ["--consts", str(consts)]
            )
            assert r.exit_code == 0 and "all checks pass" in r.output, r.output
            assert data.error is None and data.passed
            if mode == "jvp":
                t = data.direction[0].astype(np.float32)
                want = _jitted_tangent(f)(X, t)
            else:
                want = jax.jit(jax.grad(f))(X)
            (got,) = data.gradient
            close(got, want)


def test_numbering_refuses_a_jaxpr_not_hoisted():
    """The backend numbers hoisted programs only: a call body or cond branch that still
    has constvars is refused, located at its equation."""
    call = (
        "{ lambda ; a:f32[3]. let\n"
        "    b:f32[3] = jit[name=g jaxpr={ lambda c:f32[3]; d:f32[3]. let\n"
        "        e:f32[3] = mul d c in (e,) }] a\n"
        "  in (b,) }\n"
    )
    branch = (
        "{ lambda ; a:f32[3] i:i32[]. let\n"
        "    b:f32[3] = cond[branches=(\n"
        "      { lambda ; d:f32[3]. let  in (d,) }\n"
        "      { lambda c:f32[3]; d:f32[3]. let e:f32[3] = mul d c in (e,) }\n"
        "    )] i a\n"
        "  in (b,) }\n"
    )
    for text in (call, branch):
        j = parse(text, "<p>").jaxpr
        with pytest.raises(JaxprError) as e:
            all_constvars(j)
        assert e.value.loc is not None and e.value.loc.line == 2
        assert "number_constants" in str(e.value)
        assert [str(v.type) for v in number_constants(j).constvars] == ["f32[3]"]


RULE_SOURCE = """
import jax
import jax.numpy as jnp
import numpy as np

W = jnp.array([1.5, -0.5, 2.0], np.float32)  # the program's own
V = jnp.array([0.25, 3.0, -1.0], np.float32)  # what the custom_vjp's bwd closes over


@jax.custom_vjp
def g(x):
    return jnp.sin(x) * 2.0


g.defvjp(lambda x: (g(x), jnp.cos(x)), lambda r, ct: (ct * r * V,))


def f(x):
    return jnp.sum(g(x * W))
"""


def test_constants_that_stay_nested_come_last(tmp_path, monkeypatch):
    """A recorded custom rule's constants stay in its jaxpr (step 3): numbered after the
    program's, `run` with the archive is JAX; the program grad writes takes the same
    archive, every constant its own (tests/test_custom_rule_consts.py has the rest, explain
    and check-grad of such a rule with its archive among them)."""
    mod = written_module(tmp_path, "consts_rule", RULE_SOURCE)
    monkeypatch.chdir(tmp_path)
    prog, consts = tmp_path / "f.jaxpr", tmp_path / "f.npz"
    traced = f"{mod.__name__}:f"
    r = run(["trace", traced, "--arg", "f32[3]", "-o", str(prog), "--consts-out", str(consts)])
    assert r.exit_code == 0, r.output
    numbered = number_constants(parse(prog.read_text(), str(prog)).jaxpr)
    assert len(numbered.program.constvars) == 1 and len(numbered.constvars) == 2
    assert [e.prim for _, e in nested_with_consts(numbered.program)] == ["custom_vjp_call"]
    for got, want in zip(archive(consts), (mod.W, mod.V), strict=True):
        np.testing.assert_array_equal(got, np.asarray(want))
    value_and_grad = jax.jit(lambda x: (mod.f(x), jax.grad(mod.f)(x)))(X)  # (one compilation)
    (got,) = run_with_consts(tmp_path, prog, [X], consts)
    close(got, value_and_grad[0])
    grad = tmp_path / "grad.jaxpr"
    r = run(["grad", str(prog), "-o", str(grad)])
    assert r.exit_code == 0, r.output
    assert len(parse(grad.read_text(), str(grad)).jaxpr.constvars) == 2
    (got,) = run_with_consts(tmp_path, grad, [X], consts)
    close(got, value_and_grad[1])
