"""The API's jacfwd, jacrev, hessian, check_grad, explain, diff and stats (issue 39, item
17): the derivatives against JAX's on the same function and inputs, the reports against
what the commands print for the same program, and docs/API.md against `api.__all__`."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from jax_oracle import close, vec
from jax_oracle import run as cli

import jaxprtool as jt
from jaxprtool import api

ROOT = Path(__file__).resolve().parents[1]


def f(x, m):
    """Two outputs, two inputs: every Jacobian block is a different shape."""
    return m @ jnp.sin(x), jnp.sum(jnp.tanh(m @ x) ** 2)


def loss(x, m):
    return jnp.sum(jnp.tanh(m @ x) ** 2) + jnp.sum(jnp.sin(x[0]) * m)


def matmul_loss(x, m):
    """One product (what a matmul precision acts on), little else: few kernels to compile
    where a test asks for options or for the API's walk, not for the derivatives of many
    primitives (explain's walk of `loss` compiles 26 programs, of this one 5)."""
    return jnp.sum(jnp.tanh(m @ x))


X, M = vec((3,), 0), vec((2, 3), 1)
#: JAX's gradient of matmul_loss, jitted once for the tests that compare with it
GRAD_MATMUL_LOSS = jax.jit(jax.grad(matmul_loss, argnums=(0, 1)))


def _program(fn, *args, path="f.jaxpr"):
    return jt.parse(str(jax.make_jaxpr(fn)(*args)), path)


@pytest.mark.parametrize("kind", ["jacfwd", "jacrev"])
@pytest.mark.parametrize(
    "argnums",
    [
        0,
        (0, 1),
        # (make test-full; test_vmap.py's test_jacobians_match_jax[jacfwd-1,0] keeps
        # reordered argnums of this very `f` against JAX's, through the command, whose
        # program the API's is: test_jacobians_print_what_the_commands_print)
        pytest.param((1, 0), marks=pytest.mark.slow),
    ],
)
def test_jacobians_match_jax(kind, argnums):
    """One result per (output, input among argnums), in JAX's order (its pytree's leaves)."""
    prog = getattr(jt, kind)(_program(f, X, M), argnums=argnums)
    got = jt.run(prog, X, M)
    want = jax.tree.leaves(jax.jit(getattr(jax, kind)(f, argnums=argnums))(X, M))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        close(g, w)


@pytest.mark.parametrize("argnums", [0, (0, 1)])
def test_hessian_matches_jax(argnums):
    got = jt.run(jt.hessian(_program(loss, X, M), argnums=argnums), X, M)
    want = jax.tree.leaves(jax.jit(jax.hessian(loss, argnums=argnums))(X, M))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        close(g, w)


def test_jacobians_print_what_the_commands_print(tmp_path):
    src = tmp_path / "f.jaxpr"
    src.write_text(str(jax.make_jaxpr(f)(X, M)) + "\n")
    loaded = jt.load(str(src))
    for kind in ("jacfwd", "jacrev", "hessian"):
        r = cli([kind, "--argnums", "0,1", str(src)])
        assert r.exit_code == 0, r.output
        assert r.stdout == jt.format(getattr(jt, kind)(loaded, argnums=(0, 1))) + "\n", kind


def test_jacobian_errors_are_the_command_s(tmp_path):
    src = tmp_path / "f.jaxpr"
    src.write_text(str(jax.make_jaxpr(f)(X, M)) + "\n")
    with pytest.raises(jt.ProgramError) as e:
        jt.jacrev(jt.load(str(src)), argnums=(2,))
    assert e.value.loc is not None and e.value.loc.file == str(src)
    r = cli(["jacrev", "--argnums", "2", str(src)])
    assert r.exit_code == 1 and r.stderr.startswith(str(e.value) + "\n")


# ---------------------------------------------------------------- check_grad


SIN_COS = ROOT / "samples" / "sin_cos.jaxpr"


def test_check_grad_passes_a_correct_program_as_the_command_does():
    checks = jt.check_grad(jt.load(str(SIN_COS)))
    assert [c.name for c in checks] == [
        "jvp vs finite differences",
        "vjp vs finite differences",
        "dot product (adjoint)",
    ]
    assert all(c.passed and c.error <= c.tolerance for c in checks)
    r = cli(["check-grad", "--json", str(SIN_COS)])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)["files"][0]["checks"]
    assert [(c["program"], c["check"], c["result"]) for c in rows] == [
        (c.program, c.name, c.verdict) for c in checks
    ]


def test_check_grad_catches_a_wrong_derivative(wrong_sin_rule):
    """A wrong JVP rule for sin (shared by jvp and vjp): both finite-difference checks fail,
    the dot product between the two cannot see it (as `check-grad` reports)."""
    checks = jt.check_grad(jt.load(str(SIN_COS)), seed=3)
    assert [c.verdict for c in checks] == ["FAIL", "FAIL", "pass"]
    assert all(c.error > c.tolerance for c in checks[:2])


def test_check_grad_options():
    prog = _program(matmul_loss, X, M)
    # at the given point, forward mode only, to second order (jvp(f)'s checks too)
    checks = jt.check_grad(prog, X, M, modes=("fwd",), order=2)
    assert [(c.program, c.name) for c in checks] == [
        ("f.jaxpr", "jvp vs finite differences"),
        ("jvp(f.jaxpr)", "jvp vs finite differences"),
    ]
    assert all(c.passed for c in checks)
    # a zero-width tolerance fails every inexact check (with the device and precision of
    # test_check_grad_and_explain_take_a_device_and_a_matmul_precision's check: the same
    # programs, compiled once for both through the tool's jit cache, 6 compiles less)
    zero = jt.check_grad(prog, tol=1e-30, dot_tol=1e-30, device="auto", matmul_precision="highest")
    assert len(zero) == 3 and not any(c.passed for c in zero)
    with pytest.raises(jt.JaxprError, match="modes must name fwd and/or rev"):
        jt.check_grad(prog, modes=("sideways",))
    with pytest.raises(jt.JaxprError) as e:
        jt.check_grad(prog, X, X)
    assert e.value.message == "argument 1 (b): expected f32[2,3], got f32[3]"


def test_check_grad_s_constants_are_given_or_random_with_a_warning():
    text = "{ lambda a:f32[3]; b:f32[3]. let c:f32[3] = mul a b; d:f32[3] = sin c in (d,) }"
    prog = jt.parse(text, "c.jaxpr")
    with pytest.warns(jt.JaxprWarning, match=r"constants \(1\) have no values in the text"):
        assert all(c.passed for c in jt.check_grad(prog))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert all(c.passed for c in jt.check_grad(prog, X, consts=(M[0],)))


# ---------------------------------------------------------------- explain


def test_explain_s_gradient_is_jax_s():
    data = jt.explain(_program(matmul_loss, X, M), X, M)
    assert data.mode == "grad" and data.passed and data.error is None
    want = GRAD_MATMUL_LOSS(X, M)
    assert len(data.gradient) == 2
    for g, w in zip(data.gradient, want):
        close(g, w)
    assert repr(data) == (
        f"<ExplainData grad of f.jaxpr: {len(data.forward)} forward steps, "
        f"{len(data.reverse)} reverse steps, passed>"
    )


def test_explain_s_jvp_is_jax_s_along_its_direction():
    data = jt.explain(_program(f, X, M), X, M, mode="jvp", seed=2)
    want = jax.jit(lambda x, m, t: jax.jvp(f, (x, m), t)[1])(X, M, tuple(data.direction))
    assert len(data.derivative) == 2
    for (_, g), w in zip(data.derivative, want):
        close(g, w)
    assert data.passed


def test_explain_without_arguments_runs_at_the_command_s_random_point():
    """No args: random inputs from `seed`, those `explain --random SEED` uses: the same
    derivative (the command prints its summary; the walk's data is the same)."""
    prog = _program(matmul_loss, X, M)
    data = jt.explain(prog, seed=1)
    assert [a.shape for a in data.args] == [(3,), (2, 3)]
    for g, w in zip(data.gradient, GRAD_MATMUL_LOSS(*data.args)):
        close(g, w)
    with pytest.raises(jt.JaxprError, match="unknown mode 'forward'"):
        jt.explain(prog, mode="forward")


# ---------------------------------------------------------------- diff and stats


def _files(tmp_path, **texts) -> dict[str, str]:
    paths = {}
    for name, text in texts.items():
        (tmp_path / f"{name}.jaxpr").write_text(text)
        paths[name] = str(tmp_path / f"{name}.jaxpr")
    return paths


A = "{ lambda ; a:f32[3]. let\n    b:f32[3] = sin a\n    c:f32[3] = cos b\n  in (c,) }\n"
A_RENAMED = "{ lambda ; x:f32[3]. let\n    y:f32[3] = sin x\n    z:f32[3] = cos y\n  in (z,) }\n"
B = "{ lambda ; a:f32[3]. let\n    b:f32[3] = sin a\n    c:f32[3] = tanh b\n  in (c,) }\n"


def test_diff_is_the_command_s(tmp_path):
    p = _files(tmp_path, a=A, renamed=A_RENAMED, b=B)
    d = jt.diff(jt.load(p["a"]), jt.load(p["b"]))
    assert not d.equal
    changed = [ln for ln in d.text.splitlines()[2:] if ln[:1] in "+-"]
    # the changed equation, and the output that now reads another value
    assert changed == [
        "-  c:f32[3] = cos b",
        "+  c:f32[3] = tanh b",
        "-  in (c,) }",
        "+  in (c,) }",
    ]
    r = cli(["diff", "--renames", p["a"], p["b"]])
    renamed = "".join(f"renamed: {x} -> {y}\n" for x, y in d.renamed)
    assert r.exit_code == 1 and r.stdout == d.text + renamed
    same = jt.diff(jt.load(p["a"]), jt.load(p["renamed"]))
    assert same.equal and same.text == "" and repr(same) == "<Difference: equal, 3 renamed>"
    assert same.renamed == (("a", "x"), ("b", "y"), ("c", "z"))
    assert same == jt.diff(jt.load(p["a"]), jt.load(p["renamed"]))  # a value, hashable
    assert hash(same) == hash(jt.diff(jt.load(p["a"]), jt.load(p["renamed"])))
    r = cli(["diff", "--renames", p["a"], p["renamed"]])
    assert r.exit_code == 0 and r.stdout == "renamed: a -> x\nrenamed: b -> y\nrenamed: c -> z\n"


def test_stats_are_the_command_s(tmp_path):
    path = _files(tmp_path, a=A)["a"]
    s = jt.stats(jt.load(path))
    # by hand: two elementwise equations of 3 elements, 12 bytes read and written each
    assert s["equations"] == 2 and s["by_primitive"] == {"cos": 1, "sin": 1}
    assert (s["flops"], s["bytes"], s["inputs"], s["outputs"], s["depth"]) == (6, 48, 1, 1, 0)
    r = cli(["stats", "--json", path])
    assert r.exit_code == 0 and json.loads(r.stdout) == s
    lin = jt.linearize(jt.load(path))
    r = cli(["stats", "--json", "-"], stdin=jt.format(lin))
    assert json.loads(r.stdout) == jt.stats(lin) and jt.stats(lin)["residuals"] == 2


# ---------------------------------------------------------------- the page


def test_every_api_name_has_its_section_in_docs_api_md():
    page = (ROOT / "docs" / "API.md").read_text()
    headings = re.findall(r"^#{2,4} `([A-Za-z_]+)", page, re.M)
    assert sorted(set(api.__all__) - set(headings)) == []
    assert sorted(set(headings) - set(api.__all__)) == []


def test_arrays_of_a_program_s_input_types_as_docs_api_md_makes_them():
    """`np.ones(t.shape, t.dtype)` fails on the tool's types, whose dtype is the printed name
    (issue 45, item 16): docs/API.md says so and makes them with `.np_dtype`; the snippet
    runs, and gives JAX's value of the sample's function at ones."""
    import numpy as np

    page = (ROOT / "docs" / "API.md").read_text()
    block = next(b for b in re.findall(r"```python\n(.*?)```", page, re.S) if ".np_dtype" in b)
    scope = {"jt": jt, "f": jt.load(ROOT / "samples" / "loss.jaxpr")}
    exec(block, scope)  # the page's own example, not a jaxpr's text
    assert [a.dtype for a in scope["args"]] == [np.dtype(np.float32)] * 3
    w, x, y = np.ones((4, 2), np.float32), np.ones(4, np.float32), np.ones(2, np.float32)
    # (jitted: one compilation; eagerly, one an operation)
    want = jax.jit(lambda w, x, y: jnp.sum((jnp.tanh(x @ w) - y) ** 2))(w, x, y)
    close(scope["outs"][0], want, 1e-6)


def test_the_readme_links_the_api_page():
    assert "docs/API.md" in (ROOT / "README.md").read_text()


def test_check_grad_and_explain_take_a_device_and_a_matmul_precision():
    """As the commands' --device and --matmul-precision: "auto" is JAX's default backend, a
    missing device is a JaxprError naming what JAX found (a TPU's checks run on the chip
    through bench/device/tpu_check.sh)."""
    import jax

    prog = _program(matmul_loss, X, M)
    checks = jt.check_grad(prog, device="auto", matmul_precision="highest")
    assert checks and all(c.passed for c in checks)
    walk = jt.explain(prog, X, M, device="auto", matmul_precision="highest")
    assert walk.passed
    want = GRAD_MATMUL_LOSS(X, M)
    assert len(walk.gradient) == 2
    for g, w in zip(walk.gradient, want):
        close(g, w)
    if not any(d.platform == "tpu" for d in jax.devices()):
        with pytest.raises(jt.JaxprError, match="device 'tpu' is not available"):
            jt.check_grad(prog, device="tpu")
        with pytest.raises(jt.JaxprError, match="device 'tpu' is not available"):
            jt.explain(prog, device="tpu")
