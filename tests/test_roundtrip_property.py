"""Property: any well-typed IR prints to text that parses back alpha-equal.

Hypothesis builds random programs from elementwise and shape primitives,
literals of many forms, nested `jit`s (some sharing one inner jaxpr object, so
they are hoisted), `cond` branches, unused results (printed `_`, also as
donors of suggested names), repeated and literal outputs, and prints them in
several styles and widths.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jaxprtool.core import Eqn, Jaxpr, Literal, ShapedArray, Var, alpha_equal, map_param_jaxprs
from jaxprtool.record import prim
from jaxprtool.text.parser import parse
from jaxprtool.text.printer import print_jaxpr
from jaxprtool.text.style import Style

SHAPES = [(), (3,), (2, 3), (4,), (1, 4, 2)]
DTYPES = ["f32", "i32"]
UNARY_F = ["sin", "cos", "exp", "tanh", "neg", "log1p"]
UNARY_I = ["neg", "abs", "not"]
BINARY = ["add", "mul", "sub", "max", "min"]
NAMES = ["g", "<lambda>", "_where", "fünction_名前", "f1", "body", "remainder"]
FLOATS = [
    0.0,
    -0.0,
    1.0,
    2.5,
    -7.25,
    0.10000000149011612,
    1e-07,
    1e20,
    math.inf,
    -math.inf,
    math.nan,
]
INTS = [0, 1, -7, 2147483647, -2147483648, 26]
STYLES = [Style.parse("0.12"), Style.parse("0.10.2"), Style.parse("0.7.2"), Style.parse("0.4.35")]


def _literal(data, dtype: str) -> Literal:
    vals = FLOATS if dtype == "f32" else INTS
    return Literal(data.draw(st.sampled_from(vals)), ShapedArray((), dtype))


class _Gen:
    def __init__(self, data, call_prim: str = "jit"):
        self.data = data
        self.call_prim = call_prim
        self.pool: dict[tuple, list[Jaxpr]] = {}  # in-types -> inner jaxprs, for sharing

    def draw(self, s):
        return self.data.draw(s)

    def jaxpr(self, in_types: list[ShapedArray], depth: int, n_out: int | None = None) -> Jaxpr:
        n_const = self.draw(st.integers(0, 1)) if depth == 0 else 0
        constvars = [Var(self._type()) for _ in range(n_const)]
        invars = [Var(t) for t in in_types]
        env: list[Var] = constvars + invars
        eqns: list[Eqn] = []
        for _ in range(self.draw(st.integers(0, 7 if depth == 0 else 12))):
            e = self.eqn(env, depth)
            if e is not None:
                eqns.append(e)
                env.extend(e.outputs)
        if n_out is None:
            n_out = self.draw(st.integers(0, 3))
        outvars = [self.atom(env) for _ in range(n_out)]
        return Jaxpr(tuple(constvars), tuple(invars), tuple(eqns), tuple(outvars))

    def _type(self) -> ShapedArray:
        return ShapedArray(self.draw(st.sampled_from(SHAPES)), self.draw(st.sampled_from(DTYPES)))

    def atom(self, env):
        if env and self.draw(st.integers(0, 4)) > 0:
            return self.draw(st.sampled_from(env))
        return _literal(self.data, self.draw(st.sampled_from(DTYPES)))

    def eqn(self, env: list[Var], depth: int) -> Eqn | None:
        if not env:
            kind = "iota"
        else:
            kind = self.draw(
                st.sampled_from(
                    ["unary", "binary", "binary", "reduce", "jit", "cond", "iota", "multi"]
                )
            )
        if kind == "iota":
            n = self.draw(st.integers(1, 5))
            return Eqn(
                "iota",
                (),
                (Var(ShapedArray((n,), "i32")),),
                {
                    "dimension": 0,
                    "dtype": __import__("numpy").dtype("int32"),
                    "shape": (n,),
                    "sharding": None,
                },
            )
        x = self.draw(st.sampled_from(env))
        t = x.type
        if kind == "unary":
            prim = self.draw(st.sampled_from(UNARY_F if t.dtype == "f32" else UNARY_I))
            params = {"accuracy": None} if prim in ("sin", "cos", "exp", "tanh", "log1p") else {}
            # accuracy=None is hidden by JAX's print rule: build it the printed way
            return Eqn(prim, (x,), (Var(t),), {k: v for k, v in params.items() if v is not None})
        if kind == "binary":
            same = [v for v in env if v.type == t]
            y = (
                self.draw(st.sampled_from(same))
                if self.draw(st.booleans())
                else _literal(self.data, t.dtype)
            )
            args = (x, y) if self.draw(st.booleans()) else (y, x)
            return Eqn(self.draw(st.sampled_from(BINARY)), args, (Var(t),), {})
        if kind == "reduce":
            if not t.shape:
                return None
            return Eqn(
                "reduce_sum",
                (x,),
                (Var(t.update(shape=t.shape[1:])),),
                {"axes": (0,), "out_sharding": None},
            )
        if kind == "multi":
            k = self.draw(st.integers(2, 3))
            return Eqn(
                "split", (x,), tuple(Var(t) for _ in range(k)), {"axis": 0, "sizes": (1,) * k}
            )
        if depth >= 2:
            return None
        ops = self.draw(st.lists(st.sampled_from(env), min_size=0, max_size=3))
        args = [
            a if self.draw(st.integers(0, 3)) else _literal(self.data, a.type.dtype) for a in ops
        ]
        in_types = [a.type for a in args]
        if kind == "jit":
            key = tuple(in_types)
            pool = self.pool.setdefault(key, [])
            if pool and self.draw(st.booleans()):
                inner = self.draw(st.sampled_from(pool))  # the same object: hoisted as shared
            else:
                inner = self.jaxpr(in_types, depth + 1)
                pool.append(inner)
            outs = tuple(Var(a.type) for a in inner.outvars)
            return Eqn(
                self.call_prim,
                tuple(args),
                outs,
                {"name": self.draw(st.sampled_from(NAMES)), "jaxpr": inner},
            )
        # cond: an i32 index and two branches with the same signature
        n_out = self.draw(st.integers(1, 2))
        b0 = self.jaxpr(in_types, depth + 1, n_out)
        b1 = self.jaxpr(in_types, depth + 1, n_out)
        if [a.type for a in b0.outvars] != [a.type for a in b1.outvars]:
            return None
        idx = Literal(1, ShapedArray((), "i32")) if self.draw(st.booleans()) else None
        if idx is None:
            ints = [v for v in env if v.type == ShapedArray((), "i32")]
            if not ints:
                return None
            idx = self.draw(st.sampled_from(ints))
        outs = tuple(Var(a.type) for a in b0.outvars)
        return Eqn("cond", (idx, *args), outs, {"branches": (b0, b1)})


def _erase_literal_types(j: Jaxpr, memo=None) -> Jaxpr:
    memo = {} if memo is None else memo
    if id(j) in memo:
        return memo[id(j)]

    def atom(a):
        return Literal(a.value, ShapedArray((), "?")) if isinstance(a, Literal) else a

    eqns = []
    for e in j.eqns:
        params = {
            k: map_param_jaxprs(v, lambda x: _erase_literal_types(x, memo))
            for k, v in e.params.items()
        }
        eqns.append(e.replace(inputs=[atom(a) for a in e.inputs], params=params))
    out = memo[id(j)] = j.replace(eqns=eqns, outvars=[atom(a) for a in j.outvars])
    return out


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_print_parse_round_trip(data):
    """30 programs in `make test`; 250 in `make test-full` (the `_many` test below)."""
    _round_trip(data)


@pytest.mark.slow
@settings(max_examples=250, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_print_parse_round_trip_many(data):
    _round_trip(data)


def _round_trip(data):
    style = data.draw(st.sampled_from(STYLES))
    gen = _Gen(data, prim("jit").print_name(None, style))
    n_in = data.draw(st.integers(0, 4))
    ir = gen.jaxpr([gen._type() for _ in range(n_in)], 0)
    width = data.draw(st.sampled_from([80, 80, 30, 120, 8]))
    text = print_jaxpr(ir, style, width)
    back = parse(text, "<printed>").jaxpr
    if style.typed_literals:
        assert alpha_equal(back, ir), text
    else:  # 0.4.35 prints no literal types: the reader infers them, so compare without them
        assert alpha_equal(_erase_literal_types(back), _erase_literal_types(ir)), text
    # printing is deterministic and a fixed point on its own output
    assert print_jaxpr(back, style, width) == text


# ---------------------------------------------------------------- generated text through the tool
#
# tests/fuzzgen.py writes well-typed programs as JAX prints them (elementwise, reduction and
# shape primitives, jit/cond/scan bodies, shared jaxprs).  Every one must survive
# fmt -> parse -> check -> jvp / vjp / linearize | transpose -> dce, and the linear maps the
# tool builds must be adjoint: <w, L v> = <L^T w, v> (both sides computed by the tool,
# evaluated by jaxprtool.backend.evaluate).  The tangents are also compared with jax.jvp of
# the program (JAX as the oracle).

import os  # noqa: E402

import numpy as np  # noqa: E402
from click.testing import CliRunner  # noqa: E402
from fuzzgen import Drawn, ProgramGen  # noqa: E402

from jaxprtool.check import check  # noqa: E402
from jaxprtool.cli import main as cli_main  # noqa: E402

AD_EXAMPLES = int(os.environ.get("AD_PROPERTY_EXAMPLES", "15"))


def _tool(args, text):
    r = CliRunner().invoke(cli_main, [*args, "-"], input=text)
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    assert r.exit_code == 0, (args, r.stderr, text)
    return r.stdout


def _checked(text, what):
    j = parse(text, what).jaxpr
    errs = [d for d in check(j, what, check_names=True) if d.kind == "error"]
    assert not errs, (what, errs, text)
    return j


def _eval_together(items, oracle):
    """Run several (program, args) as one program, and JAX's `oracle` (a (function, args)
    pair) beside it: one XLA compilation (their variables are distinct objects, and the
    generated programs have no constants); their outputs, one list each, then the oracle's
    result."""
    from jax_oracle import together

    progs = [j for j, _ in items]
    assert not any(j.constvars for j in progs)
    merged = Jaxpr(
        (),
        tuple(v for j in progs for v in j.invars),
        tuple(e for j in progs for e in j.eqns),
        tuple(x for j in progs for x in j.outvars),
    )
    flat, want = together((merged, [np.asarray(a) for _, args in items for a in args]), oracle)
    outs, k = [], 0
    for j in progs:
        outs.append([np.asarray(x, np.float64) for x in flat[k : k + len(j.outvars)]])
        k += len(j.outvars)
    return [*outs, want]


def _close(a, b, what):
    for x, y in zip(a, b):
        scale = max(1.0, float(np.max(np.abs(x), initial=0.0)))
        np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-4 * scale, err_msg=what)


def _dot(xs, ys) -> tuple[float, float]:
    """(<xs, ys>, sum of |x*y|) over lists of arrays, in float64."""
    prods = [np.asarray(x, np.float64) * np.asarray(y, np.float64) for x, y in zip(xs, ys)]
    return sum(float(p.sum()) for p in prods), sum(float(np.abs(p).sum()) for p in prods)


def _adjoint(w, ty, ct, t, what):
    lhs, s1 = _dot(w, ty)
    rhs, s2 = _dot(ct, t)
    assert abs(lhs - rhs) <= 1e-4 * (s1 + s2) + 1e-6, (what, lhs, rhs)


def _run_ad_property(data):
    gen = ProgramGen(Drawn(data), safe=True, max_depth=2, max_eqns=6, floats_out=True)
    text = gen.program()
    # fmt -> parse -> check: the program the tool prints is the one it read
    printed = _tool(["fmt"], text)
    p = _checked(printed, "<fmt>")
    assert alpha_equal(p, parse(text, "<generated>").jaxpr), (text, printed)
    assert _tool(["fmt"], printed) == printed
    n, m = len(p.invars), len(p.outvars)
    jvp_t = _tool(["jvp"], printed)
    vjp_t = _tool(["vjp"], printed)
    lin_t = _tool(["linearize"], printed)
    lt_t = _tool(["transpose"], lin_t)
    progs = {"jvp": jvp_t, "vjp": vjp_t, "linearize": lin_t, "transpose": lt_t}
    progs.update({"dce(jvp)": _tool(["dce"], jvp_t), "dce(transpose)": _tool(["dce"], lt_t)})
    js = {k: _checked(v, f"<{k}>") for k, v in progs.items()}
    # the calling conventions (README): every input and output here is float
    for k in ("jvp", "linearize", "dce(jvp)"):
        assert (len(js[k].invars), len(js[k].outvars)) == (2 * n, 2 * m), (k, progs[k])
    for k in ("vjp", "transpose", "dce(transpose)"):
        assert (len(js[k].invars), len(js[k].outvars)) == (n + m, m + n), (k, progs[k])
    rng = np.random.default_rng(data.draw(st.integers(0, 2**31 - 1)))

    def rand(v, spread):
        shape = tuple(v.type.shape)
        return (
            rng.uniform(-spread, spread, shape) if spread else rng.standard_normal(shape)
        ).astype(np.float32)

    x = [rand(v, 1.0) for v in p.invars]
    t = [rand(v, 0) for v in p.invars]
    w = [rand(v, 0) for v in js["vjp"].invars[n:]]
    # the program and its six derived ones run side by side, and JAX's own jvp of the
    # program (run by the evaluator) beside them as the oracle for the tangents: one
    # compilation
    import jax

    from jaxprtool.backend import as_jax_function

    f = as_jax_function(p)
    keys = list(js)
    y, *outs, (_, ty) = _eval_together(
        [(p, x)] + [(js[k], x + (t if k in ("jvp", "linearize", "dce(jvp)") else w)) for k in keys],
        (
            lambda x, t: jax.jvp(lambda *a: f(*a), x, t),
            ([np.asarray(a) for a in x], [np.asarray(a) for a in t]),
        ),
    )
    got = dict(zip(keys, outs))
    for k, outs in got.items():
        _close(outs[:m], y, f"{k}: primal outputs")
    _close(got["linearize"][m:], got["jvp"][m:], "linearize vs jvp tangents")
    _close(got["dce(jvp)"], got["jvp"], "dce(jvp) vs jvp")
    _close(got["dce(transpose)"], got["transpose"], "dce(transpose) vs transpose")
    _adjoint(w, got["jvp"][m:], got["vjp"][m:], t, "jvp / vjp")
    _adjoint(w, got["linearize"][m:], got["transpose"][m:], t, "linearize / transpose")
    _close(got["jvp"][m:], [np.asarray(a, np.float64) for a in ty], "jvp vs jax.jvp")


@settings(max_examples=AD_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_generated_programs_survive_ad_and_are_adjoint(data):
    _run_ad_property(data)


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_generated_programs_survive_ad_and_are_adjoint_many(data):
    _run_ad_property(data)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_generated_text_round_trips(data):
    """Any generated program (all primitives, ints and bools too) parses, checks clean, and
    prints back to text that parses alpha-equal; printing is a fixed point."""
    from jaxprtool.text.style import detect_style

    ch = Drawn(data)
    text = ProgramGen(ch, max_depth=ch.int(0, 2), max_eqns=ch.pick([3, 8])).program()
    j = _checked(text, "<generated>")
    style = detect_style(j)
    printed = print_jaxpr(j, style)
    back = _checked(printed, "<printed>")
    assert alpha_equal(back, j), (text, printed)
    assert print_jaxpr(back, detect_style(back)) == printed
