"""Every in-process path runs on the installed JAX, tested on the newest one by simulating an
older installed version (`backend.prims.installed_version`, the style detector's
`installed_version`) where that is honest:

* a primitive the installed JAX lacks (`one_minus_square`, first printed by 0.12) runs as its
  record's older form (`restyle`): the tool's function, traced by JAX, binds no
  `one_minus_square`, and its numbers are JAX's (`jax.grad`, `jax.jvp` of the same function)
  through `run`, `--eager`, `check-grad`, `explain`, `memory` and the API;
* a parameter the installed JAX does not take (top_k's `is_stable` before 0.11, record field
  `params_since`) is left out at the value older JAX always used and refused, located,
  otherwise;
* the style detector tells JAX 0.11.0's text (`tests/data/jax-0.11.0/`, printed by JAX
  0.11.0) from 0.12's, so that what the tool writes for it is 0.11's.

`tests/test_installed_jax.py` runs the same commands with whatever JAX is installed (the
floor run's JAX 0.10.0 among them), on programs that JAX traces.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from jax_oracle import close, run
from oldjax_programs import PROGRAMS, X

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

import jaxprtool as jt  # noqa: E402
from jaxprtool import backend  # noqa: E402
from jaxprtool.backend import prims  # noqa: E402
from jaxprtool.core import JaxprError, np_dtype  # noqa: E402
from jaxprtool.record import records  # noqa: E402
from jaxprtool.text import style as style_mod  # noqa: E402
from jaxprtool.text.style import (  # noqa: E402
    DEFAULT_STYLE,
    STYLE_0_10,
    STYLE_0_11,
    STYLE_0_12_0,
    detect_style,
)

DATA_0_11 = Path(__file__).resolve().parent / "data" / "jax-0.11.0"
#: the simulations run on a JAX that has what they pretend it lacks; with an older one
#: installed, tests/test_installed_jax.py exercises the real thing
newest = pytest.mark.skipif(
    prims.lookup("one_minus_square") is None or prims.installed_version() < (0, 11),
    reason="the installed JAX lacks one_minus_square or top_k's is_stable, which this "
    "simulation pretends it lacks (JAX 0.12 has both); test_installed_jax.py runs the "
    "commands on it",
)


@pytest.fixture
def installed(monkeypatch):
    """`installed("0.10.2")`: the tool believes that JAX version is installed (the back end's
    binding decisions and the style detector's); the JAX that runs stays the newest."""

    def set_version(text: str):
        monkeypatch.setattr(prims, "installed_version", lambda: prims.version_tuple(text))
        monkeypatch.setattr(style_mod, "installed_version", lambda dist: text)
        style_mod.unmarked_style.cache_clear()

    yield set_version
    style_mod.unmarked_style.cache_clear()


def bound_primitives(program) -> set[str]:
    """The primitives of the jaxpr JAX traces from the tool's function for `program`: what
    the back end binds (bodies of control flow included)."""
    j = program.jaxpr
    fn = backend.as_jax_function(j)
    args = [np.zeros(v.type.shape, np_dtype(v.type.dtype)) for v in j.invars]
    names: set[str] = set()

    def walk(jaxpr):
        for e in jaxpr.eqns:
            names.add(e.primitive.name)
            for v in e.params.values():
                for sub in v if isinstance(v, (tuple, list)) else (v,):
                    inner = getattr(sub, "jaxpr", sub)
                    if hasattr(inner, "eqns"):
                        walk(inner)

    walk(jax.make_jaxpr(fn)(*args).jaxpr)
    return names


def grad_program(name: str):
    return jt.grad(jt.parse(jt_text(name), f"{name}.jaxpr"))


def jt_text(name: str) -> str:
    return str(jax.make_jaxpr(PROGRAMS[name][0])(X)) + "\n"


# ---------------------------------------------------------------- primitives: the older form


@newest
def test_newest_jax_binds_one_minus_square_itself():
    """The premise: with JAX 0.12 the tool's grad of tanh binds JAX's one_minus_square."""
    assert "one_minus_square" in bound_primitives(grad_program("tanh"))


@pytest.mark.parametrize("name", ["tanh", "scan", "cond"])
def test_api_run_of_grad_binds_the_older_form(installed, name):
    installed("0.10.2")
    g = grad_program(name)
    assert "one_minus_square" in jt.format(g, "0.12")  # the program has it ...
    assert "one_minus_square" not in bound_primitives(g)  # ... JAX is never asked for it
    (got,) = jt.run(g, X)
    close(got, jax.jit(jax.grad(PROGRAMS[name][0]))(X), 1e-5)


@newest
def test_the_older_form_is_jaxs_own_evaluation_of_one_minus_square(installed):
    """JAX lowers one_minus_square as (1 + x) * (1 - x): the older form is that, bit for bit,
    where `1 - x**2` would lose the low bits near |x| = 1 (tanh's derivative where it
    saturates: 3e-3 off on a TPU, whose tanh is less exact)."""
    text = str(jax.make_jaxpr(jax.lax.one_minus_square)(X)) + "\n"
    x = np.tanh(np.linspace(2.0, 9.0, 64)).astype(np.float32)  # 0.964 .. 1 - 3e-8
    x = np.concatenate([x, -x, np.linspace(-0.5, 0.5, 9, dtype=np.float32)])
    want = np.asarray(jax.jit(jax.lax.one_minus_square)(x))
    installed("0.10.2")
    program = jt.parse(text.replace(f"{X.shape[0]}", f"{x.size}"), "oms.jaxpr")
    assert "one_minus_square" not in bound_primitives(program)
    (got,) = jt.run(program, x)
    np.testing.assert_array_equal(got, want)
    squared = (np.float32(1) - np.square(x)).astype(np.float32)
    assert not np.array_equal(squared, want)  # the test tells the two forms apart


@newest
def test_missing_primitive_runs_as_its_older_form(monkeypatch):
    """A JAX that has no primitive of that name (whatever its version) gets the older form."""
    table = dict(prims.primitive_table())
    del table["one_minus_square"]
    monkeypatch.setattr(prims, "_TABLE", table)
    g = grad_program("tanh")
    assert "one_minus_square" not in bound_primitives(g)
    close(jt.run(g, X)[0], jax.jit(jax.grad(PROGRAMS["tanh"][0]))(X), 1e-5)


@newest
def test_run_of_newer_text_eager_and_jit(installed, tmp_path):
    """`run` of 0.12 text with one_minus_square (JAX's own printout of a jvp), compiled and
    `--eager`, on a simulated 0.10.2."""
    f = PROGRAMS["tanh"][0]
    t = np.linspace(1.0, -0.5, 4).astype(np.float32)
    text = str(jax.make_jaxpr(lambda x, t: jax.jvp(f, (x,), (t,)))(X, t)) + "\n"
    assert "one_minus_square" in text
    prog = tmp_path / "jvp.jaxpr"
    prog.write_text(text)
    np.savez(tmp_path / "a.npz", X, t)
    want = jax.jit(lambda x, t: jax.jvp(f, (x,), (t,)))(X, t)
    installed("0.10.2")
    for extra in ([], ["--eager"]):
        out = tmp_path / f"out{len(extra)}.npz"
        r = run(["run", str(prog), "--args", str(tmp_path / "a.npz"), "-o", str(out), *extra])
        assert r.exit_code == 0, r.output
        with np.load(out) as d:
            close(d["out0"], want[0], 1e-5)
            close(d["out1"], want[1], 1e-5)


def test_check_grad_explain_memory_on_simulated_0_10(installed, tmp_path):
    installed("0.10.2")
    prog = tmp_path / "tanh.jaxpr"
    prog.write_text(jt_text("tanh"))
    r = run(["--no-color", "check-grad", str(prog)])
    assert r.exit_code == 0 and r.output.count("pass") == 3, r.output
    r = run(["--no-color", "explain", str(prog)])
    assert r.exit_code == 0, r.output
    r = run(["memory", "--of", "grad", "--json", str(prog)])
    assert r.exit_code == 0, r.output
    xla = json.loads(r.stdout)["xla"]
    mem = jax.jit(jax.grad(PROGRAMS["tanh"][0])).lower(X).compile().memory_analysis()
    assert (xla["argument_bytes"], xla["output_bytes"]) == (
        mem.argument_size_in_bytes,
        mem.output_size_in_bytes,
    )


def test_stack_and_unstack_run_as_jax_0_10_0_wrote_them(installed):
    """JAX 0.10.1 added stack and unstack: on 0.10.0, JAX's own printout with them (and the
    grad the tool writes for it, which has them too) runs as reshapes and a concatenate,
    slices and squeezes."""
    installed("0.10.0")
    p = _program_0_11("stack")
    g = jt.grad(p)
    for prog in (p, g):
        assert not {"stack", "unstack"} & bound_primitives(prog)
    close(jt.run(p, X)[0], jax.jit(PROGRAMS["stack"][0])(X), 1e-6)
    close(jt.run(g, X)[0], jax.jit(jax.grad(PROGRAMS["stack"][0]))(X), 1e-5)


def test_stack_and_unstack_in_an_older_style():
    """`--jax-style 0.7.2` (no stack, unstack): the grad is written with their older forms,
    and that text runs to jax.grad's numbers."""
    g = jt.grad(_program_0_11("stack"))
    text = jt.format(g, "0.7.2")
    assert "stack[" not in text and "concatenate" in text and "squeeze" in text
    close(jt.run(jt.parse(text), X)[0], jax.jit(jax.grad(PROGRAMS["stack"][0]))(X), 1e-5)


def _f_polynomial(x):
    """jnp.sinc (a polynomial of literal coefficients) and one of mixed coefficients."""
    coeffs = (0.5, jnp.sin(x), 2.0, 0.25 * x)
    return jnp.sum(jax.lax.polynomial(x, coeffs) * jnp.sinc(x))


@pytest.mark.skipif(
    prims.lookup("polynomial") is None,
    reason="the installed JAX lacks polynomial (JAX 0.12 has it)",
)
def test_polynomial_runs_as_horner_before_0_12(installed):
    """JAX 0.12 added polynomial: JAX 0.11 runs it (JAX 0.12's printout and the grad the
    tool writes for it) as mul and add, Horner's rule as JAX lowers it."""
    p = jt.parse(str(jax.make_jaxpr(_f_polynomial)(X)))
    assert "polynomial" in bound_primitives(p)
    installed("0.11.0")
    g = jt.grad(p)
    for prog in (p, g):
        assert "polynomial" not in bound_primitives(prog)
    close(jt.run(p, X)[0], jax.jit(_f_polynomial)(X), 1e-6)  # (jitted: one compilation)
    close(jt.run(g, X)[0], jax.jit(jax.grad(_f_polynomial))(X), 1e-5)
    assert "polynomial" not in jt.format(g, "0.11.0")


def test_older_forms_are_the_records():
    """The machinery names no primitive: each primitive the back end can lower is one whose
    record has both a first version and a restyle rule."""
    lowered = {n for n, r in records().items() if r.first_version and r.restyle}
    assert {"one_minus_square", "stack", "unstack", "polynomial"} <= lowered


# ---------------------------------------------------------------- parameters JAX added later


def _top_k_eqn(text_params: str):
    text = (
        "{ lambda ; a:f32[4]. let\n"
        f"    b:f32[2] c:i32[2] = top_k[{text_params}] a\n"
        "  in (b, c) }\n"
    )
    p = jt.parse(text, "topk.jaxpr")
    return p, p.jaxpr.eqns[0]


@newest
def test_is_stable_is_left_out_for_jax_0_10(installed):
    _, eqn = _top_k_eqn("axis=0 is_stable=True k=2")
    assert prims.bind_params(eqn)["is_stable"] is True
    installed("0.10.2")
    assert prims.bind_params(eqn) == {"k": 2, "axis": 0}
    _, eqn = _top_k_eqn("axis=0 k=2")  # 0.10's own text: stable, as its top_k always was
    assert prims.bind_params(eqn) == {"k": 2, "axis": 0}
    installed("0.11.0")
    assert prims.bind_params(eqn)["is_stable"] is True


def test_is_stable_false_is_refused_at_its_equation(installed, tmp_path):
    installed("0.10.2")
    p, eqn = _top_k_eqn("axis=0 is_stable=False k=2")
    with pytest.raises(JaxprError) as e:
        prims.bind_params(eqn)
    assert e.value.loc is not None and e.value.loc.line == 2
    assert "takes no parameter is_stable (JAX 0.11 added it)" in e.value.message
    prog = tmp_path / "topk.jaxpr"
    prog.write_text(p.text)
    r = run(["run", str(prog), "--random", "0"])
    assert r.exit_code == 1
    assert "topk.jaxpr:2:5: error: cannot run 'top_k' with is_stable=False" in r.output


def test_top_k_grad_runs_without_is_stable(installed):
    """Under a simulated 0.10.2 the bound top_k has no is_stable; JAX 0.12's top_k needs it,
    so the binding is checked by its parameters, the numbers by running on 0.12 itself."""
    g = grad_program("topk")
    close(jt.run(g, X)[0], jax.jit(jax.grad(PROGRAMS["topk"][0]))(X), 1e-5)
    installed("0.10.2")
    eqn = next(e for e in g.jaxpr.eqns if e.prim == "top_k")
    assert "is_stable" not in prims.bind_params(eqn)


# ---------------------------------------------------------------- JAX 0.11's text


def _program_0_11(name: str):
    path = DATA_0_11 / f"{name}.jaxpr"
    return jt.parse(path.read_text(), str(path))


def test_0_11_only_forms_mark_0_11(installed):
    """top_k's is_stable (0.11+) with reduce_max without out_sharding (before 0.12)."""
    for version in ("0.10.2", "0.11.0", "0.12.0.1"):
        installed(version)
        assert _program_0_11("topk").style == STYLE_0_11


@pytest.mark.parametrize(
    ("version", "want"),
    [
        ("0.11.0", STYLE_0_11),
        ("0.11.2", STYLE_0_11),
        ("0.12.0.1", STYLE_0_12_0),
        ("0.12.1", DEFAULT_STYLE),
    ],
)
def test_scan_flat_trees_follow_the_installed_jax(installed, version, want):
    """scan's ft_in/ft_out: 0.11 and 0.12 print them alike (`tests/data/jax-0.11.0/scan.jaxpr`
    is also what 0.12.0.1 and 0.12.1 print), so the installed one of them decides."""
    installed(version)
    assert _program_0_11("scan").style == want


def test_scan_counts_mark_0_10(installed):
    """scan's num_consts/num_carry: JAX 0.10 and older, whatever is installed."""
    text = (
        "{ lambda ; a:f32[3]. let\n"
        "    b:f32[] c:f32[3] = scan[\n"
        "      jaxpr={ lambda ; d:f32[] e:f32[]. let f:f32[] = add d e in (f, d) }\n"
        "      length=3\n      num_carry=1\n      num_consts=0\n      reverse=False\n"
        "      unroll=1\n    ] 0.0:f32[] a\n  in (b, c) }\n"
    )
    for version in ("0.11.0", "0.12.0.1"):
        installed(version)
        assert detect_style(jt.parse(text).jaxpr) == STYLE_0_10


@pytest.mark.parametrize("name", ["scan", "tanh", "cond"])
def test_grad_of_0_11_text_is_0_11s(installed, name):
    """With JAX 0.11 installed, the grad the tool writes for 0.11.0's text has no
    one_minus_square (0.11.0 has none) and runs to jax.grad's numbers."""
    installed("0.11.0")
    p = _program_0_11(name)
    assert p.style == STYLE_0_11
    text = jt.format(jt.grad(p))
    assert "one_minus_square" not in text
    if name == "scan":
        assert "ft_in" in text  # 0.11's scan encoding
    back = jt.parse(text)
    assert back.style == STYLE_0_11
    assert "one_minus_square" not in bound_primitives(back)
    close(jt.run(back, X)[0], jax.jit(jax.grad(PROGRAMS[name][0]))(X), 1e-5)


def test_readme_table_is_the_records():
    """docs/OLDER_JAX.md's table of what runs how on an older JAX is generated from the records."""
    readme = (Path(__file__).resolve().parents[1] / "docs" / "OLDER_JAX.md").read_text()
    start = "<!-- older-jax-table: generated by jaxprtool.backend.prims.older_jax_table() -->\n"
    body = readme.split(start, 1)[1].split("<!-- /older-jax-table -->", 1)[0]
    assert body == prims.older_jax_table(), "regenerate docs/OLDER_JAX.md's table"
    for name, rec in records().items():
        if rec.first_version or rec.params_since:
            assert f"| `{name}`" in body
