"""The one numbering of a program's constants (`backend/consts.py`): what `trace
--consts-out` writes is what `run --consts` and the AD commands read.

JAX 0.12 prints what a jitted function closes over as constvars of its body; hoisting
(`passes/hoist_consts.py`) moves a body's constants to the program, or to the cond branch or
loop body around the call.  The programs below have same-typed (f32[3]) constants in all of
these places, with a top-level call *after* the cond and the loops, so that numbering the
unhoisted program in walk order would give the archive's values to the wrong binders without
any type error.  Every number is compared with JAX's on the same function and input.
"""

from __future__ import annotations

import itertools
import os
import sys

import numpy as np
import pytest

jax = pytest.importorskip("jax")
from jax_oracle import close, run  # noqa: E402

from jaxprtool.backend.consts import all_constvars, nested_with_consts  # noqa: E402
from jaxprtool.core import JaxprError  # noqa: E402
from jaxprtool.passes.hoist_consts import hoist_consts  # noqa: E402
from jaxprtool.text.parser import parse  # noqa: E402

_IDS = itertools.count()

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
B = _c(10.0, 20.0, 30.0)  # a jitted call at the top level, after the others


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
"""

X = np.array([0.7, -0.4, 1.3], np.float32)  # x[0] > 0: the branch with the call
T = np.array([0.3, 1.0, -0.6], np.float32)


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    """The module above, its functions traced by `jaxprtool trace --consts-out`:
    {name: (text path, constants path)}, and the module itself."""
    folder = tmp_path_factory.mktemp("consts_order")
    name = f"consts_order_{next(_IDS)}"
    (folder / f"{name}.py").write_text(SOURCE)
    cwd = os.getcwd()
    os.chdir(folder)
    sys.path.insert(0, str(folder))
    try:
        import importlib

        mod = importlib.import_module(name)
        out = {}
        for fn in ("f", "w"):
            prog, consts = folder / f"{fn}.jaxpr", folder / f"{fn}.npz"
            r = run(
                ["trace", f"{name}:{fn}", "--arg", "f32[3]", "-o", str(prog)]
                + ["--consts-out", str(consts)]
            )
            assert r.exit_code == 0, r.output
            out[fn] = (prog, consts)
    finally:
        sys.path.remove(str(folder))
        os.chdir(cwd)
    return out, mod


def _run(tmp_path, prog, args, consts):
    a, o = tmp_path / "a.npz", tmp_path / "o.npz"
    np.savez(a, *args)
    r = run(["run", str(prog), "--args", str(a), "--consts", str(consts), "-o", str(o)])
    assert r.exit_code == 0, r.output
    with np.load(o) as d:
        return [d[f"out{i}"] for i in range(len(d.files))]


def _derive(tmp_path, command, prog):
    out = tmp_path / f"{command}.jaxpr"
    r = run([command, str(prog), "-o", str(out)])
    assert r.exit_code == 0, r.output
    return out


def test_constants_sit_where_a_walk_order_would_swap_them(traced):
    """The traced programs have what this module is about: after hoisting, f32[3] constants
    at the top level (the program's own, the last call's) and in a cond branch and a loop
    body (the calls inside them), each with a value of its own."""
    (progs, mod) = traced
    for fn, loop in (("f", "scan"), ("w", "while")):
        prog, consts = progs[fn]
        h = hoist_consts(parse(prog.read_text(), str(prog)).jaxpr)
        every = all_constvars(h)
        assert [str(v.type) for v in every] == ["f32[3]"] * 4
        assert len(h.constvars) == 2
        assert [e.prim for _, e in nested_with_consts(h)] == ["cond", loop]
        with np.load(consts) as d:
            values = [d[f"const{i}"] for i in range(len(d.files))]
        want = [mod.E, mod.B, mod.A, mod.C if fn == "f" else mod.D]
        for got, value in zip(values, want, strict=True):
            np.testing.assert_array_equal(got, np.asarray(value))


def test_run_consts_of_the_traced_text_is_jax(traced, tmp_path):
    progs, mod = traced
    for fn in ("f", "w"):
        prog, consts = progs[fn]
        (got,) = _run(tmp_path, prog, [X], consts)
        close(got, getattr(mod, fn)(X))


def test_run_repeat_and_compile_take_every_constant(traced, tmp_path):
    """`run --repeat` compiles with the cond and loop bodies' constants too, and `compile`
    takes every constant as a parameter before the input."""
    progs, mod = traced
    prog, consts = progs["f"]
    a, o = tmp_path / "a.npz", tmp_path / "o.npz"
    np.savez(a, X)
    r = run(
        ["run", str(prog), "--args", str(a), "--consts", str(consts), "--repeat", "2"]
        + ["-o", str(o)]
    )
    assert r.exit_code == 0, r.output
    with np.load(o) as d:
        close(d["out0"], mod.f(X))
    r = run(["compile", str(prog)])
    assert r.exit_code == 0, r.output
    main = next(line for line in r.output.splitlines() if "func.func public @main(" in line)
    assert main.count("tensor<3xf32>") == 5  # four constants and x, no result of that type


def test_a_swap_of_same_typed_constants_changes_the_answer(traced, tmp_path):
    """The check above can fail: the same archive with two of its same-typed constants
    swapped (the order a walk of the unhoisted program gives: the cond branch's before the
    last call's) runs, and its answer is not JAX's."""
    progs, mod = traced
    prog, consts = progs["f"]
    with np.load(consts) as d:
        values = [d[f"const{i}"] for i in range(len(d.files))]
    values[1], values[2] = values[2], values[1]
    swapped = tmp_path / "swapped.npz"
    np.savez(swapped, **{f"const{i}": v for i, v in enumerate(values)})
    (got,) = _run(tmp_path, prog, [X], swapped)
    assert abs(float(got) - float(mod.f(X))) > 1.0


def test_grad_and_jvp_with_the_traced_constants_are_jax(traced, tmp_path):
    progs, mod = traced
    prog, consts = progs["f"]
    (grad,) = _run(tmp_path, _derive(tmp_path, "grad", prog), [X], consts)
    close(grad, jax.grad(mod.f)(X))
    prog, consts = progs["w"]  # reverse mode of a while loop is refused, as by JAX
    y, ty = _run(tmp_path, _derive(tmp_path, "jvp", prog), [X, T], consts)
    want_y, want_ty = jax.jvp(mod.w, (X,), (T,))
    close(y, want_y)
    close(ty, want_ty)


def test_check_grad_takes_the_traced_constants(traced, tmp_path):
    progs, _ = traced
    prog, consts = progs["f"]
    np.savez(tmp_path / "x.npz", arg0=X)
    r = run(["check-grad", str(prog), "--args", str(tmp_path / "x.npz"), "--consts", str(consts)])
    assert r.exit_code == 0 and "0 failures" in r.output, r.output
    # explain takes the program's constants, not yet those of a cond branch or loop body:
    # it says so rather than run with wrong values
    r = run(["explain", str(prog), "--args", str(tmp_path / "x.npz"), "--consts", str(consts)])
    assert r.exit_code == 1 and "cannot yet use the constants of nested jaxprs" in r.output


def test_numbering_refuses_a_call_body_not_hoisted():
    """`backend/consts.py` numbers the hoisted program only: a call body that still has
    constvars is refused, located at the call."""
    text = (
        "{ lambda ; a:f32[3]. let\n"
        "    b:f32[3] = jit[name=g jaxpr={ lambda c:f32[3]; d:f32[3]. let\n"
        "        e:f32[3] = mul d c in (e,) }] a\n"
        "  in (b,) }\n"
    )
    j = parse(text, "<p>").jaxpr
    with pytest.raises(JaxprError) as e:
        all_constvars(j)
    assert e.value.loc is not None and e.value.loc.line == 2
    assert "hoist" in str(e.value)
    assert [str(v.type) for v in all_constvars(hoist_consts(j))] == ["f32[3]"]
