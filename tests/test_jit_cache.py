"""The programs under `jax.jit` found again by their content (jaxprtool/backend/jit_cache.py):
a program read or built again is compiled by XLA once per process; programs that differ in
anything (a parameter, a literal, a constant's type, a source location) are compiled apart
and give their own numbers, JAX's."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = jax.numpy

import jaxprtool as jt  # noqa: E402
from jaxprtool.backend import jit_cache  # noqa: E402

_COMPILES = [0]


def _on_event(event, secs, **_):
    if event == "/jax/core/compile/backend_compile_duration":
        _COMPILES[0] += 1


jax.monitoring.register_event_duration_secs_listener(_on_event)


def compiles(fn):
    """(fn(), how many XLA compiles it asked for)."""
    before = _COMPILES[0]
    out = fn()
    return out, _COMPILES[0] - before


SIN_COS = """{ lambda ; a:f32[3] b:f32[3]. let
    c:f32[3] = sin a
    d:f32[3] = cos b
    e:f32[3] = mul c d
    f:f32[3] = POW
  in (f,) }
"""

X = np.array([0.5, -1.25, 2.0], np.float32)
Y = np.array([1.5, 0.25, -0.75], np.float32)


def program(pow_text="integer_pow[y=2] e", path="cache_sample.jaxpr"):
    return jt.parse(SIN_COS.replace("POW", pow_text), path)


def jax_numbers(finish):
    return np.asarray(jax.jit(lambda a, b: finish(jnp.sin(a) * jnp.cos(b)))(X, Y))


@pytest.fixture(autouse=True)
def empty_cache():
    """No program kept from before."""
    jit_cache.clear()
    yield
    jit_cache.clear()


def test_the_same_program_read_twice_compiles_once():
    want = jax_numbers(lambda e: e**2)
    first, n1 = compiles(lambda: jt.run(program(), X, Y)[0])
    second, n2 = compiles(lambda: jt.run(program(), X, Y)[0])  # another object, same content
    assert n1 == 1 and n2 == 0
    np.testing.assert_allclose(first, want, rtol=1e-6)
    np.testing.assert_array_equal(second, first)


_FRESH = """
import numpy as np
import jax
import jaxprtool as jt
n = [0]
jax.monitoring.register_event_duration_secs_listener(
    lambda e, s, **_: n.__setitem__(0, n[0] + (e == "/jax/core/compile/backend_compile_duration")))
for _ in range(2):
    jt.run(jt.parse("{ lambda ; a:f32[3]. let b:f32[3] = sin a in (b,) }", "f.jaxpr"),
           np.ones(3, np.float32))
print(n[0])
"""


def test_the_first_program_of_a_fresh_process_is_found_again():
    """The modules JAX's primitives come from are imported before the first trace: one of
    them registers settings that are part of jax.jit's key, and the first program a process
    traced was compiled again on its next run (check-grad compiled its finite differences'
    program twice).  A fresh process, since this one imported them long ago."""
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    p = subprocess.run(
        [sys.executable, "-c", _FRESH], capture_output=True, text=True, env=env, timeout=300
    )
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.split() == ["1"], p.stdout


def test_a_gradient_built_twice_compiles_once_and_is_jax_s():
    # (jitted: one compile; eagerly, JAX compiles each primitive)
    want = jax.jit(jax.grad(lambda a, b: jnp.sum((jnp.sin(a) * jnp.cos(b)) ** 2)))(X, Y)
    src = jt.parse(
        SIN_COS.replace("POW", "integer_pow[y=2] e")
        .replace("(f,)", "(g,)")
        .replace("  in", "    g:f32[] = reduce_sum[axes=(0,) out_sharding=None] f\n  in"),
        "cache_grad.jaxpr",
    )
    got = []
    counts = []
    for _ in range(2):
        out, n = compiles(lambda: jt.run(jt.grad(src, argnums=(0,)), X, Y)[0])
        got.append(out)
        counts.append(n)
    assert counts[0] >= 1 and counts[1] == 0
    np.testing.assert_allclose(got[0], want, rtol=1e-5)
    np.testing.assert_array_equal(got[1], got[0])


@pytest.mark.parametrize(
    "a, b, finish_a, finish_b",
    [
        # a parameter
        ("integer_pow[y=2] e", "integer_pow[y=3] e", lambda e: e**2, lambda e: e**3),
        # a literal's value
        ("mul e 2.0:f32[]", "mul e 3.0:f32[]", lambda e: e * 2.0, lambda e: e * 3.0),
        # 0.0 and -0.0 are equal as Python floats, not as programs: 1/(e*0) is +-inf
        (
            "mul e 0.0:f32[]\n    h:f32[3] = div 1.0:f32[] f",
            "mul e -0.0:f32[]\n    h:f32[3] = div 1.0:f32[] f",
            lambda e: 1.0 / (e * 0.0),
            lambda e: 1.0 / (e * -0.0),
        ),
    ],
    ids=["parameter", "literal", "signed-zero"],
)
def test_programs_that_differ_in_one_value_compile_apart(a, b, finish_a, finish_b):
    def parsed(body):
        text = SIN_COS.replace("POW", body)
        return jt.parse(text.replace("(f,)", "(h,)") if "h:" in body else text, "cache_a.jaxpr")

    pa, pb = parsed(a), parsed(b)
    assert jit_cache.program_key(pa.jaxpr) != jit_cache.program_key(pb.jaxpr)
    got_a, na = compiles(lambda: jt.run(pa, X, Y)[0])
    got_b, nb = compiles(lambda: jt.run(pb, X, Y)[0])
    assert (na, nb) == (1, 1)
    np.testing.assert_allclose(got_a, jax_numbers(finish_a), rtol=1e-6)
    np.testing.assert_allclose(got_b, jax_numbers(finish_b), rtol=1e-6)


def test_constants_are_arguments_of_the_one_executable():
    """A constant's value is an argument of the compiled program, not part of it: the same
    program with other constants compiles once and gives each run its own numbers."""
    text = "{ lambda a:f32[3] ; b:f32[3]. let c:f32[3] = mul a b in (c,) }\n"
    c1, c2 = np.array([1, 2, 3], np.float32), np.array([-4, 0.5, 8], np.float32)
    out1, n1 = compiles(lambda: jt.run(jt.parse(text, "k.jaxpr"), X, consts=[c1])[0])
    out2, n2 = compiles(lambda: jt.run(jt.parse(text, "k.jaxpr"), X, consts=[c2])[0])
    assert (n1, n2) == (1, 0)
    np.testing.assert_allclose(out1, jax.jit(jnp.multiply)(c1, X), rtol=1e-6)
    np.testing.assert_allclose(out2, jax.jit(jnp.multiply)(c2, X), rtol=1e-6)


def test_the_same_text_in_another_file_is_its_own_program():
    """Source locations are part of the content: XLA's module is named after the caller's
    file, and a message raised while tracing names the caller's file and line."""
    a, b = program(path="first_file.jaxpr"), program(path="second_file.jaxpr")
    assert jit_cache.program_key(a.jaxpr) != jit_cache.program_key(b.jaxpr)
    assert "@jit_first_file" in jt.to_stablehlo(a)
    assert "@jit_second_file" in jt.to_stablehlo(b)


def test_the_cache_is_bounded(monkeypatch):
    monkeypatch.setattr(jit_cache, "SIZE", 3)  # (48 by default: as many compiles to fill it)
    for k in range(5):
        jt.run(program(f"mul e {k}.0:f32[]"), X, Y)
        assert len(jit_cache._CACHE) <= 3
    # the least recently used were dropped, the newest kept: the newest compiles nothing
    again, n = compiles(lambda: jt.run(program("mul e 4.0:f32[]"), X, Y)[0])
    first, m = compiles(lambda: jt.run(program("mul e 0.0:f32[]"), X, Y)[0])
    assert (n, m) == (0, 1)
    np.testing.assert_allclose(again, jax_numbers(lambda e: e * 4.0), rtol=1e-6)
    np.testing.assert_array_equal(first, np.zeros(3, np.float32))


def test_a_value_without_an_exact_spelling_gives_no_key():
    p = program()
    eqn = p.jaxpr.eqns[-1]
    odd = eqn.replace(params={**eqn.params, "y": object()})
    j = p.jaxpr.replace(eqns=p.jaxpr.eqns[:-1] + (odd,))
    assert jit_cache.program_key(j) is None
    assert jit_cache.program_key(p.jaxpr) is not None


def test_a_program_a_folder_walk_found_is_found_again(tmp_path):
    """A file check-grad found in a folder is read under its path as text: its locations'
    file was the walk's marker type, which has no exact spelling, so each of its programs
    was compiled afresh (checking a folder twice compiled everything twice)."""
    from jaxprtool.io import FoundPath, read_source

    f = tmp_path / "found.jaxpr"
    f.write_text(SIN_COS.replace("POW", "integer_pow[y=2] e"))
    text, path = read_source(FoundPath(str(f)))
    assert type(path) is str
    found = jt.parse(text, path)
    assert jit_cache.program_key(found.jaxpr) == jit_cache.program_key(program(path=str(f)).jaxpr)
    assert jit_cache.program_key(found.jaxpr) is not None


def test_a_plugin_keys_only_the_programs_that_bind_its_primitive():
    """A plugin's implementation (`backend.IMPLS`) of a primitive a program does not bind
    leaves that program found again; one of a primitive it binds is its own program, run
    with the plugin's implementation."""
    from jaxprtool.backend import IMPLS

    want = jax_numbers(lambda e: e**2)
    _, n1 = compiles(lambda: jt.run(program(), X, Y)[0])
    try:
        IMPLS["softsign"] = lambda x: x / (1 + jnp.abs(x))
        again, n2 = compiles(lambda: jt.run(program(), X, Y)[0])
        IMPLS["cos"] = lambda x: jnp.cos(x) * 2.0
        doubled, n3 = compiles(lambda: jt.run(program(), X, Y)[0])
    finally:
        IMPLS.pop("softsign", None)
        IMPLS.pop("cos", None)
    assert (n1, n2, n3) == (1, 0, 1)
    np.testing.assert_allclose(again, want, rtol=1e-6)
    np.testing.assert_allclose(doubled, 4 * want, rtol=1e-6)  # (cos doubled, then squared)
