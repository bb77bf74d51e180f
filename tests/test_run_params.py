"""`run` never silently ignores a parameter (issue 22, item 2).

For each case of the run-every-primitive table, every parameter of every top-level equation
is changed in JAX's own jaxpr to another value (the other boolean, a neighbouring integer, a
permuted tuple, another member of an enum); the candidates JAX itself refuses are dropped.
The mutated program, as JAX prints it, is run through `jaxprtool run` and its outputs
compared with JAX evaluating the same mutated jaxpr (JAX is the oracle): the tool must give
JAX's numbers, or refuse with a located error.  The default suite runs a few cases (those
whose primitives run by the tool's own `evaluate` rules); the whole table is `slow`.
"""

from __future__ import annotations

import enum
import re

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402
from jax._src import core as jcore  # noqa: E402
from jax_oracle import run, together  # noqa: E402
from test_run_every_primitive import JAX_CANNOT, REFUSED, _all_cases, _as_numpy  # noqa: E402


def _scatter_apply_case():
    dn = lax.ScatterDimensionNumbers(
        update_window_dims=(), inserted_window_dims=(0,), scatter_dims_to_operand_dims=(0,)
    )
    x = jnp.array([1.0, 2.0, 3.0, 4.0, 5.0], jnp.float32)
    idx = jnp.array([[1], [2]], jnp.int32)
    return lambda a, i: lax.scatter_apply(a, i, jnp.sin, dn, update_shape=(2,)), (x, idx)


CASES = dict(_all_cases(), scatter_apply=_scatter_apply_case())
#: the default suite's cases: scatters, control flow, reductions with bodies, calls
FAST = {"scatter_apply", "scatter_sub", "reduce_window", "fft", "scan", "cond"}
NAMES = [n if n in FAST else pytest.param(n, marks=pytest.mark.slow) for n in sorted(CASES)]


def _candidates(v):
    """Other legal-looking values of a parameter (JAX decides which are legal): the other
    boolean, other enum members, neighbouring numbers, changed integer tuples, and each
    field of a dimension-numbers record changed so."""
    if isinstance(v, bool):
        return [not v]
    if isinstance(v, enum.Enum):
        return [m for m in type(v) if m is not v]
    if isinstance(v, int):
        return [v + 1] + ([v - 1] if v > 0 else [])
    if isinstance(v, float):
        return [v * 0.5 + 0.25]
    if isinstance(v, tuple) and hasattr(v, "_replace"):
        return [v._replace(**{f: c}) for f in v._fields for c in _candidates(getattr(v, f))]
    if (
        isinstance(v, tuple)
        and v
        and all(isinstance(x, int) and not isinstance(x, bool) for x in v)
    ):
        out = [tuple(reversed(v))] if len(set(v)) > 1 else []
        return out + [tuple(x + 1 for x in v), v[:-1]]
    return []


def _sub_jaxprs(v):
    """The nested jaxprs of a parameter value, with a function rebuilding the value from
    replacements (bodies of scan/while/jit, cond's branches)."""
    if isinstance(v, jcore.Jaxpr):
        return [v], lambda new: new[0]
    if isinstance(v, tuple) and v and all(isinstance(x, jcore.Jaxpr) for x in v):
        return list(v), tuple
    return [], None


def _jaxpr_mutations(jaxpr, where=()):
    """(where, primitive, parameter, value, mutated jaxpr) for each parameter of each
    equation, nested ones included (`where`: the path of equation indices and parameters
    down to it).  (A 0.12 `Jaxpr` holds its constants: it is JAX's closed jaxpr.)"""
    eqns = jaxpr.eqns

    def rebuilt(i, new_eqn):
        return jaxpr.replace(eqns=[*eqns[:i], new_eqn, *eqns[i + 1 :]])

    for i, e in enumerate(eqns):
        for k, v in e.params.items():
            for cand in _candidates(v):
                yield (
                    (*where, i),
                    e.primitive.name,
                    k,
                    cand,
                    rebuilt(i, e.replace(params={**e.params, k: cand})),
                )
            subs, rebuild = _sub_jaxprs(v)
            for n, sub in enumerate(subs):
                for w, prim, key, cand, new_sub in _jaxpr_mutations(sub, (*where, i, k, n)):
                    value = rebuild([*subs[:n], new_sub, *subs[n + 1 :]])
                    yield w, prim, key, cand, rebuilt(i, e.replace(params={**e.params, k: value}))


#: (primitive, parameter) whose other values JAX's own evaluation cannot be trusted to
#: refuse cleanly: it aborts the whole process instead
JAX_ABORTS = {
    ("fft", "fft_lengths"): "lengths that differ from the operand's trailing axes abort "
    "JAX's CPU FFT (a DUCC assertion), killing the test process",
}


def _jax_eval(closed, flat):
    """JAX's outputs of a (mutated) jaxpr, or None where JAX refuses it (not a legal value):
    JAX's type check of every equation (the printed result types must still hold), then
    its evaluation."""
    try:
        jcore.check_jaxpr(closed)
        outs = jax.jit(jcore.jaxpr_as_fun(closed))(*flat)
        text = str(closed)
    except Exception:  # noqa: BLE001 - JAX refuses the value: not a legal mutation
        return None, None
    return [_as_numpy(o) for o in outs], text


def _tool_run(tmp_path, text, flat, consts, eager=False):
    prog = tmp_path / "m.jaxpr"
    prog.write_text(text)
    np.savez(tmp_path / "in.npz", **{f"arg{k}": a for k, a in enumerate(flat)})
    args = ["run", str(prog), "--args", str(tmp_path / "in.npz"), "-o", str(tmp_path / "o.npz")]
    if consts:
        np.savez(tmp_path / "c.npz", **{f"const{k}": c for k, c in enumerate(consts)})
        args += ["--consts", str(tmp_path / "c.npz")]
    return prog, run(args + (["--eager"] if eager else []))


def _matches(got, want) -> bool:
    if got.shape != want.shape:
        return False
    if got.dtype.kind == "V":
        got = got.view(want.dtype)
    if np.issubdtype(want.dtype, np.inexact):
        return bool(np.allclose(got, want, rtol=2e-5, atol=2e-6, equal_nan=True))
    return bool(np.array_equal(got, want))


def check_case(tmp_path, name, eager=False):
    """Every legal single-parameter mutation of case `name`: the tool gives JAX's outputs or
    refuses with a located error.  Returns (mutations run, refusals)."""
    fn, args = CASES[name]
    closed = jax.make_jaxpr(fn)(*args)
    flat = [_as_numpy(a) for a in jax.tree_util.tree_leaves(args)]
    consts = [_as_numpy(c) for c in closed.consts]
    tried, refused, wrong = 0, [], []
    done = set()
    for where, prim, key, value, mutated in _jaxpr_mutations(closed):
        if (where, key) in done or (prim, key) in JAX_ABORTS:
            continue
        want, text = _jax_eval(mutated, flat)
        if want is None:
            continue
        done.add((where, key))
        tried += 1
        prog, r = _tool_run(tmp_path, text, flat, consts, eager)
        what = f"{name}: {prim}[{key}={value!r}]"
        if r.exit_code == 1:
            assert "Traceback" not in r.output, (what, r.output)
            assert re.search(rf"{re.escape(str(prog))}:\d+:\d+: error:", r.output), (what, r.output)
            refused.append((what, r.output.strip().splitlines()[0]))
            continue
        assert r.exit_code == 0, (what, r.output)
        with np.load(tmp_path / "o.npz", allow_pickle=False) as z:
            got = [z[f"out{k}"] for k in range(len(z.files))]
        if len(got) != len(want) or not all(_matches(g, w) for g, w in zip(got, want)):
            wrong.append(what)
    assert not wrong, f"run ignores a parameter (JAX's result differs): {wrong}"
    return tried, refused


@pytest.mark.parametrize("name", NAMES)
def test_each_parameter_changes_the_result_as_in_jax(tmp_path, name):
    if name in REFUSED or name in JAX_CANNOT:
        pytest.skip(f"{name}: the back end refuses the unmutated case (test_run_every_primitive)")
    check_case(tmp_path, name)


def test_scatter_apply_runs_its_update_jaxpr(tmp_path):
    """JAX's lax.scatter_apply(x, idx, jnp.sin): [1 0.909 0.141 4 5], compiled and --eager."""
    fn, args = CASES["scatter_apply"]
    closed = jax.make_jaxpr(fn)(*args)
    want = np.asarray(jax.jit(fn)(*args))
    flat = [np.asarray(a) for a in args]
    for eager in (False, True):
        _, r = _tool_run(tmp_path, str(closed), flat, [], eager)
        assert r.exit_code == 0, r.output
        with np.load(tmp_path / "o.npz", allow_pickle=False) as z:
            np.testing.assert_allclose(z["out0"], want, rtol=1e-6)
    assert not np.allclose(want, [1, 0, 0, 4, 5])  # what an overwrite (the old bug) gives


def test_a_parameter_no_rule_evaluates_is_refused(tmp_path):
    """An `evaluate` rule acts on its record's evaluated_params only: any other parameter
    (here a made-up one on a scan) is a located refusal naming it, never ignored."""
    fn = lambda c, xs: lax.scan(lambda c, x: (c + x, c * x), c, xs)  # noqa: E731
    args = (jnp.float32(1.0), jnp.arange(3, dtype=jnp.float32))
    text = str(jax.make_jaxpr(fn)(*args)).replace("reverse=False", "reverse=False\n      weird=3")
    assert "weird=3" in text
    prog, r = _tool_run(tmp_path, text, [np.asarray(a) for a in args], [])
    assert r.exit_code == 1, r.output
    assert re.search(
        rf"{re.escape(str(prog))}:\d+:\d+: error: cannot run 'scan': the back end "
        r"does not evaluate its parameter weird=3",
        r.output,
    ), r.output


@pytest.mark.parametrize("preset", ["BF16_BF16_F32", "F32_F32_F32"])
def test_a_dot_algorithm_preset_runs_as_jax_s(preset):
    """JAX prints a dot algorithm preset by its bare name (`precision=BF16_BF16_F32`): run
    binds the preset itself (XLA aborted the whole process on the name as a string), for
    dot_general and conv_general_dilated and in their gradients, with JAX's numbers."""
    from jaxprtool.ad.api import grad_jaxpr
    from jaxprtool.text.parser import parse

    alg = lax.DotAlgorithmPreset[preset]

    def f(a, b, k):
        y = lax.dot_general(a, b, (((1,), (0,)), ((), ())), precision=alg)
        z = lax.conv_general_dilated(y[None, None], k, (1, 1), "SAME", precision=alg)
        return jnp.sum(jnp.tanh(z))

    rng = np.random.default_rng(3)
    args = [rng.normal(size=s).astype(np.float32) for s in ((4, 8), (8, 6), (1, 1, 3, 3))]
    text = str(jax.make_jaxpr(f)(*args))
    assert text.count(f"precision={preset}") == 2
    j = parse(text, "<preset>").jaxpr
    # the program, its gradient and JAX's two in one compile (as backend.evaluate runs them)
    (got,), grads, want, want_grads = together(
        (j, args), (grad_jaxpr(j, [0, 1, 2]), args), (f, args), (jax.grad(f, (0, 1, 2)), args)
    )
    np.testing.assert_allclose(got, want, rtol=1e-5)
    for g, w in zip(grads, want_grads, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-6)
