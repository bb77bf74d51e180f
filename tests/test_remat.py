"""Rematerialization (`--remat POLICY`, `--remat-budget B`): gradients of the remat programs
against JAX's and the plain program's, residual bytes against `jax.checkpoint(policy=...)`'s,
the dot-product test of the linear programs, check-grad on the results, the budget's exact
plan against a brute-force optimum, nested bodies (scan, cond, checkpoint), and the CLI."""

from __future__ import annotations

import functools
import itertools

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax import ad_checkpoint as adc  # noqa: E402
from jax._src.ad_checkpoint import saved_residuals  # noqa: E402
from jax_oracle import close, ir, run, together, vec  # noqa: E402

from jaxprtool import backend  # noqa: E402
from jaxprtool.ad import remat  # noqa: E402
from jaxprtool.ad.api import grad_jaxpr, linearize_jaxpr, transpose_jaxpr, vjp_jaxpr  # noqa: E402
from jaxprtool.core import JaxprError, ShapedArray, Var, all_eqns  # noqa: E402
from jaxprtool.ui.stats import eqn_flops  # noqa: E402


def layernorm(x):
    m = jnp.mean(x, -1, keepdims=True)
    v = jnp.mean((x - m) ** 2, -1, keepdims=True)
    return (x - m) * jax.lax.rsqrt(v + 1e-5)


def block(x, w1, w2):
    h = adc.checkpoint_name(layernorm(x) @ w1, "h")
    return x + adc.checkpoint_name(jax.nn.gelu(h) @ w2, "out")


def resmlp(x, w1, w2):
    """Two residual blocks sharing their weights (two, not three: each plan's gradient
    compiles in a third less, 1 CPU-s over the file's tests of make test)."""
    for _ in range(2):
        x = block(x, w1, w2)
    return jnp.sum(x**2)


ARGS = (vec((8, 16), 0), 0.3 * vec((16, 32), 1), 0.3 * vec((32, 16), 2))
POLICIES = {
    "everything_saveable": jax.checkpoint_policies.everything_saveable,
    "nothing_saveable": jax.checkpoint_policies.nothing_saveable,
    "dots_saveable": jax.checkpoint_policies.dots_saveable,
    "dots_with_no_batch_dims_saveable": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
    "save_only_these_names=h": jax.checkpoint_policies.save_only_these_names("h"),
    "save_any_names_but_these=h": jax.checkpoint_policies.save_any_names_but_these("h"),
}


def _jax_residual_bytes(f, policy, args) -> int:
    """Bytes JAX saves under `jax.checkpoint(f, policy=...)`, the arguments left out (held
    anyway, as the tool counts them)."""
    res = saved_residuals(jax.checkpoint(f, policy=policy), *args)
    return sum(a.size * a.dtype.itemsize for a, why in res if not why.startswith("from the arg"))


def _grad(j, spec, argnums, segments="none"):
    """The gradient under `spec`, by default over the whole program at once (today's
    semantics, JAX's `jax.checkpoint(f, policy)`), and the plans."""
    plans: list = []
    if spec is not None:
        spec = remat.with_segments(spec, segments)
    g = grad_jaxpr(j, argnums, remat=spec, plans=plans)
    return g, plans


def _has_remat_call(j) -> bool:
    return any(e.prim == "remat2" for e in all_eqns(j))


@pytest.fixture(scope="module")
def resmlp_ir():
    return ir(resmlp, *ARGS)


@pytest.fixture(scope="module")
def gradients(resmlp_ir):
    """The plain gradient's values and JAX's, in one XLA compile."""
    return together(
        (grad_jaxpr(resmlp_ir, [0, 1, 2]), ARGS), (jax.grad(resmlp, argnums=(0, 1, 2)), ARGS)
    )


@pytest.fixture(scope="module")
def plain_grads(gradients):
    return gradients[0]


@pytest.fixture(scope="module")
def jax_grads(gradients):
    """JAX's gradient of resmlp, which every plan's gradient must give."""
    return gradients[1]


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_policy_grad_and_bytes_against_jax(resmlp_ir, plain_grads, jax_grads, policy):
    g, plans = _grad(resmlp_ir, remat.parse_policy(policy), [0, 1, 2])
    (plan,) = plans
    assert plan.bytes_after <= _jax_residual_bytes(resmlp, POLICIES[policy], ARGS)
    got = backend.evaluate(g, list(ARGS))
    for a, b, c in zip(got, plain_grads, jax_grads):
        close(a, c)
        close(a, b, 1e-5)
    if policy != "everything_saveable":
        assert plan.recompute and _has_remat_call(g)


@pytest.mark.parametrize("spec", ["min-cut", "0.5", "0.1"])
def test_min_cut_and_budget_grads(resmlp_ir, plain_grads, jax_grads, spec):
    s = remat.parse_policy(spec) if spec == "min-cut" else remat.parse_budget(spec)
    g, (plan,) = _grad(resmlp_ir, s, [0, 1, 2])
    if s.budget is not None:
        assert plan.bytes_after <= s.budget * plan.bytes_before
    else:  # min-cut: never more bytes, only cheap equations recomputed
        assert plan.bytes_after < plan.bytes_before
        assert all(remat.cheap(e) for e in _primal_eqns(resmlp_ir, plan))
    for a, b, c in zip(backend.evaluate(g, list(ARGS)), plain_grads, jax_grads):
        close(a, c)
        close(a, b, 1e-5)


def _primal_eqns(j, plan):
    """The primal program's recomputed equations of `plan` (linearized again to see them)."""
    primal, _, info = linearize_jaxpr(j, [0, 1, 2])
    g = remat.Graph(primal, info)
    return [g.eqns[i] for i in remat.min_cut_plan(g).recompute]


#: the tangents the linear programs are applied to
TANGENTS = [vec(a.shape, 10 + k) for k, a in enumerate(ARGS)]


def _residuals(info, args, primal_outs) -> list:
    """The residuals `info` names: of the inputs, the primal program's outputs and its new
    values."""
    n_out = len(info.out_mask)
    srcs = {"input": list(args), "output": primal_outs[:n_out], "new": primal_outs[n_out:]}
    return [srcs[r.source][r.index] for r in info.residuals]


def _fn(j):
    return backend.as_jax_function(j, enable_x64=False)


@pytest.fixture(scope="module")
def plain_linear_output(resmlp_ir):
    """The plain linearization's output on TANGENTS, which every remat plan's linear
    program must give (its two programs in one XLA compile)."""
    p0, l0, i0 = linearize_jaxpr(resmlp_ir, [0, 1, 2])
    primal, linear = _fn(p0), _fn(l0)

    def run(args, tans):
        return linear(*_residuals(i0, args, list(primal(*args))), *tans)[0]

    return jax.jit(run)(list(ARGS), TANGENTS)


def _dot(xs, ys) -> float:
    return float(
        sum(np.vdot(np.asarray(a, np.float64), np.asarray(b, np.float64)) for a, b in zip(xs, ys))
    )


@pytest.mark.parametrize("spec", ["min-cut", "nothing_saveable", "0.3"])
def test_linear_program_dot_product(resmlp_ir, plain_linear_output, spec):
    s = remat.parse_budget(spec) if spec[0].isdigit() else remat.parse_policy(spec)
    s = remat.with_segments(s, "none")  # (tests/test_remat_segments.py: segment by segment)
    primal, linear, info = linearize_jaxpr(resmlp_ir, [0, 1, 2], remat=s)
    assert _has_remat_call(linear)
    n_res = len(info.residuals)
    tans = TANGENTS
    lt = transpose_jaxpr(linear, [False] * n_res + [True] * len(tans))
    fp, fl, ft = _fn(primal), _fn(linear), _fn(lt)

    def run(args, tans, ct):  # the three programs in one XLA compile
        res = _residuals(info, args, list(fp(*args)))
        return fl(*res, *tans)[0], list(ft(*res, ct))

    ct = np.float32(0.7)
    out_t, cts_in = jax.jit(run)(list(ARGS), tans, ct)
    lhs, rhs = float(out_t) * float(ct), _dot(tans, cts_in)
    assert abs(lhs - rhs) <= 1e-4 * max(1.0, abs(lhs))
    # and the linear program's values are the plain linearization's
    close(out_t, plain_linear_output, 1e-5)


def one_layer(x, w1, w2):
    return jnp.sum(jnp.tanh(jnp.sin(x @ w1) * 2.0) @ w2)


@pytest.mark.parametrize(
    "flag, f",
    [
        # (one layer of element-wise steps between two products: its min-cut gradient has
        # a remat2 call, its check 0.9 CPU-s; one `block`'s, two calls, was 1.9 CPU-s and
        # three blocks' 2.3x that, nearly all of it XLA compiling the second-order programs)
        (["--remat", "min-cut"], one_layer),
        # (0.7: this program's planned peak cannot go below 0.62 of the plain gradient's,
        # which --remat-budget 0.5 refuses, saying so; one block's cannot go below 1.0)
        pytest.param(["--remat-budget", "0.7", "--no-xla"], resmlp, marks=pytest.mark.slow),
        pytest.param(["--remat", "dots_saveable"], resmlp, marks=pytest.mark.slow),
    ],
)
def test_check_grad_accepts_remat_programs(tmp_path, flag, f):
    """check-grad of a rematerialized gradient: its remat2 calls differentiated again."""
    src = tmp_path / "f.jaxpr"
    src.write_text(str(jax.make_jaxpr(f)(*ARGS)) + "\n")
    out = tmp_path / "g.jaxpr"
    r = run(["grad", "--argnums", "1", *flag, str(src), "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert "remat2[" in out.read_text()
    r = run(["check-grad", str(out)])
    assert r.exit_code == 0, r.output


def test_budget_exact_plan_is_the_optimum():
    """The ILP's recomputed FLOPs against every recompute set of a small program."""
    j = ir(
        lambda x, w: jnp.sum(jnp.tanh(jnp.sin(x @ w) * 2.0) ** 2), vec((4, 6), 0), vec((6, 5), 1)
    )
    primal, _, info = linearize_jaxpr(j, [0, 1])
    g = remat.Graph(primal, info)
    cands = remat._candidates(g)
    assert 3 <= len(cands) <= 12
    default = remat._plan_from_saved(g, {id(v) for v in g.residuals}, "")
    floor = remat.smallest_budget(g)
    for budget in sorted({floor, (floor + default.bytes_before) // 2, default.bytes_before - 1}):
        best = None
        for k in range(len(cands) + 1):
            for sub in itertools.combinations(cands, k):
                chosen = set(sub)
                if _held(g, chosen) <= budget:
                    cost = sum(eqn_flops(g.eqns[i]) for i in chosen)
                    best = cost if best is None else min(best, cost)
        plan = remat.budget_plan(g, remat.Spec(budget=budget))
        assert plan.bytes_after <= budget and plan.exact
        got = sum(eqn_flops(g.eqns[i]) for i in plan.recompute)
        assert best is not None and got <= best * 1.01
        greedy, _ = remat._greedy_budget(g, cands, budget, eqn_flops)
        assert greedy.bytes_after <= budget  # feasible; its FLOPs gap is reported by the bench


def test_a_program_solved_before_is_answered_without_a_solve(monkeypatch):
    """The budget's 0/1 program of a gradient built again (new objects, the same numbers) at
    the same budget is answered from `budget._solved`, HiGHS not called: the plan is the
    one a solve gives (the same values saved, by position); another budget is solved."""
    import scipy.optimize

    from jaxprtool.ad.remat import budget as B

    j = ir(
        lambda x, w: jnp.sum(jnp.tanh(jnp.sin(x @ w) * 2.0) ** 2), vec((4, 6), 0), vec((6, 5), 1)
    )
    calls = []
    milp = scipy.optimize.milp
    monkeypatch.setattr(scipy.optimize, "milp", lambda *a, **k: calls.append(1) or milp(*a, **k))
    monkeypatch.setattr(B, "_solved", B.OrderedDict())

    def plan(budget):
        primal, _, info = linearize_jaxpr(j, [0, 1])
        g = remat.Graph(primal, info)
        p = remat.budget_plan(g, remat.Spec(budget=budget))
        position = {id(o): k for k, o in enumerate(o for e in g.eqns for o in e.outputs)}
        return [position.get(id(v), -1) for v in p.saved], p.exact

    g = remat.Graph(*(lambda p, _, i: (p, i))(*linearize_jaxpr(j, [0, 1])))
    floor, whole = remat.smallest_budget(g), g.residual_bytes()
    middle = (floor + whole) // 2
    first = plan(middle)
    assert len(calls) == 1 and first[1]
    assert plan(middle) == first and len(calls) == 1  # answered, not solved
    plan(floor)
    assert len(calls) == 2  # another budget: solved
    B._solved.clear()
    assert plan(middle) == first and len(calls) == 3  # a fresh solve gives the same plan


def _held(g, recompute: set[int]) -> int:
    """The bytes held when exactly `recompute` is recomputed (any set is a plan: what it and
    the residuals read from outside it is saved)."""
    saved = {}
    for v in g.residuals:
        if g.made_by(v) not in recompute:
            saved[id(v)] = v
    for i in recompute:
        for x in g.eqns[i].inputs:
            if isinstance(x, Var) and g.made_by(x) not in recompute:
                saved[id(x)] = x
    return sum(g.cost(v) for v in saved.values())


def test_unmeetable_budget_names_the_smallest(tmp_path):
    def f(x, w):
        c, ys = jax.lax.scan(lambda c, _: (jnp.sin(c @ w), c), x, None, length=3)
        return jnp.sum(jnp.sin(ys) * c)

    src = tmp_path / "f.jaxpr"
    src.write_text(str(jax.make_jaxpr(f)(vec((2, 4), 0), vec((4, 4), 1))) + "\n")
    # (the tool's liveness model: test_remat_fit.py has XLA's bytes)
    r = run(["grad", "--remat-budget", "1B", "--no-xla", str(src)])
    assert r.exit_code == 1
    msg = r.output
    assert "smallest budget that can be met is" in msg and "Traceback" not in msg
    smallest = int(msg.split("smallest budget that can be met is ")[1].split()[0])
    assert smallest > 1
    r = run(["grad", "--remat-budget", str(smallest), "--no-xla", str(src)])
    assert r.exit_code == 0, r.output


def test_scan_body_is_rematerialized():
    """A scanned layer: min-cut inside the body; the gradient is JAX's.  (`one_layer`'s
    steps as a residual layer: a `block` there compiled twice as long, 0.3 CPU-s more.)"""

    def f(x, ws):
        def layer(h, w):
            return h + jnp.tanh(jnp.sin(h @ w[:, :32]) * 2.0) @ w[:, 32:].T, None

        h, _ = jax.lax.scan(layer, x, ws)
        return jnp.sum(h**2)

    x, ws = vec((8, 16), 0), 0.3 * vec((3, 16, 64), 1)
    j = ir(f, x, ws)
    g, plans = _grad(j, remat.parse_policy("min-cut"), [0, 1])
    nested = [p for p in plans if p.nested and p.recompute]
    assert nested and all(p.bytes_after < p.bytes_before for p in nested)
    got, want = together((g, [x, ws]), (jax.grad(f, argnums=(0, 1)), [x, ws]))  # (one compile)
    for a, b in zip(got, want):
        close(a, b)


def _cond_and_checkpoint(x, w):
    y = jax.checkpoint(lambda a: jnp.tanh(a @ w) * a)(x)
    z = jax.lax.cond(jnp.sum(x) > 0, lambda a: jnp.sin(a) * a, lambda a: jnp.cos(a), y)
    return jnp.sum(jnp.exp(z) * y)


@functools.cache
def _cond_and_checkpoint_jax_grad():
    """JAX's gradient of `_cond_and_checkpoint` at the tests' inputs (one compile, for both
    policies' tests)."""
    x, w = vec((4, 4), 3), vec((4, 4), 4)
    return jax.jit(jax.grad(_cond_and_checkpoint, argnums=(0, 1)))(x, w)


@pytest.mark.parametrize("policy", ["nothing_saveable", "min-cut"])
def test_cond_and_checkpoint_bodies(policy):
    f = _cond_and_checkpoint
    x, w = vec((4, 4), 3), vec((4, 4), 4)
    j = ir(f, x, w)
    g, _ = _grad(j, remat.parse_policy(policy), [0, 1])
    for a, b in zip(backend.evaluate(g, [x, w]), _cond_and_checkpoint_jax_grad()):
        close(a, b)


def test_the_recomputation_is_behind_a_barrier(tmp_path, resmlp_ir):
    """XLA must not merge the recomputation back: the lowered program has JAX's barrier."""
    src = tmp_path / "f.jaxpr"
    src.write_text(str(jax.make_jaxpr(resmlp)(*ARGS)) + "\n")
    g = tmp_path / "g.jaxpr"
    assert run(["grad", "--remat", "min-cut", str(src), "-o", str(g)]).exit_code == 0
    r = run(["compile", "--emit", "stablehlo", str(g)])
    assert r.exit_code == 0, r.output
    assert "optimization_barrier" in r.output
    plain = run(["compile", "--emit", "stablehlo", str(src)])
    assert "optimization_barrier" not in plain.output


def test_cli_prints_the_plan_and_is_deterministic(tmp_path):
    src = tmp_path / "f.jaxpr"
    src.write_text(str(jax.make_jaxpr(resmlp)(*ARGS)) + "\n")
    outs = []
    for _ in range(2):
        r = run(["vjp", "--remat", "min-cut", str(src)])
        assert r.exit_code == 0, r.output
        outs.append(r.stdout)
        assert "remat min-cut on the program: residual bytes held" in r.stderr
    assert outs[0] == outs[1]
    r = run(["linearize", "--remat", "save_only_these_names=h", "--stats", str(src)])
    assert r.exit_code == 0 and "residuals:" in r.stderr


@pytest.mark.parametrize(
    "args, text",
    [
        (["--remat", "min-cut", "--remat-budget", "0.5"], "mutually exclusive"),
        (["--remat", "bogus"], "unknown policy"),
        (["--remat", "save_only_these_names="], "give the checkpoint names"),
        (["--remat", "offload"], "unknown policy"),
        (["--remat-budget", "lots"], "expected a fraction"),
    ],
)
def test_usage_errors(tmp_path, args, text):
    src = tmp_path / "f.jaxpr"
    src.write_text(
        "{ lambda ; a:f32[3]. let b:f32[3] = sin a; c:f32[] = reduce_sum[axes=(0,) out_sharding=None] b in (c,) }\n"
    )
    r = run(["grad", *args, str(src)])
    assert r.exit_code == 2 and text in r.output and "Traceback" not in r.output


def test_budget_sizes():
    assert remat.parse_budget("0.5") == remat.Spec(budget=0.5, fraction=True)
    assert remat.parse_budget("2GiB").budget == 2 * 1024**3
    assert remat.parse_budget("300MB").budget == 300e6
    assert remat.parse_budget("4096").budget == 4096


def test_budget_one_is_the_whole_and_a_huge_one_is_refused():
    """`1` meant one byte where `1.0` meant 100%; `1e308GiB` overflowed (OverflowError)."""
    whole = remat.Spec(budget=1.0, fraction=True)
    assert remat.parse_budget("1") == remat.parse_budget("1.0") == whole
    assert remat.parse_budget("1B").budget == 1 and not remat.parse_budget("1B").fraction
    for text, why in [
        ("1e308GiB", "more than 2^63 bytes"),
        ("1e400", "more than 2^63 bytes"),
        ("1.5", "a fraction is at most 1"),
    ]:
        r = run(["grad", "--remat-budget", text, "-"], "{ lambda ; a:f32[]. let  in (a,) }\n")
        assert r.exit_code == 2 and why in r.output and "Traceback" not in r.output, r.output


def _random_inputs(types, seed=0):
    vals = []
    for k, t in enumerate(types):
        if not isinstance(t, ShapedArray) or not t.is_static or not t.dtype.startswith("f"):
            return None
        vals.append(vec(tuple(t.shape), seed + k))
    return vals


def _check_program(path, specs):
    """vjp of the program (random primals and cotangents) under each spec against the plain
    vjp's values."""
    from jaxprtool.text.parser import parse

    j = parse(path.read_text(), str(path)).jaxpr
    args = _random_inputs([v.type for v in j.invars])
    cts = _random_inputs([v.type for v in j.outvars], 100)
    consts = _random_inputs([v.type for v in j.constvars], 200)
    if args is None or cts is None or consts is None or not args:
        pytest.skip(f"{path.name}: not a function of static float arrays to float arrays")
    try:
        plain = vjp_jaxpr(j)
    except JaxprError as e:
        pytest.skip(f"{path.name}: reverse mode refuses it without remat too: {e}")
    try:
        want = backend.evaluate(plain, args + cts, consts)
    except JaxprError as e:
        pytest.skip(f"{path.name}: the back end cannot run its plain vjp either: {e}")
    programs = []
    for spec in specs:
        try:
            programs.append(vjp_jaxpr(j, remat=spec))
        except JaxprError as e:  # a budget below what the program can meet: use the floor
            assert spec.budget is not None, e
            floor = int(str(e).split("smallest budget that can be met is ")[1].split()[0])
            programs.append(vjp_jaxpr(j, remat=remat.Spec(budget=floor)))
    if consts:
        gots = [backend.evaluate(v, args + cts, consts) for v in programs]
    else:  # (one XLA compile for all of them)
        gots = together(*[(v, args + cts) for v in programs])
    # recomputed matmuls may round differently inside XLA's fusions (a min-cut plan,
    # recomputing no matmul, gives the same bits here): compared at the program's scale
    scale = max(1.0, *(float(np.abs(np.asarray(w)).max(initial=0)) for w in want))
    for got in gots:
        for a, b in zip(got, want):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-3, atol=1e-3 * scale)


SPECS = [
    remat.parse_policy("min-cut"),
    remat.parse_policy("nothing_saveable"),
    remat.parse_budget("0.5"),
]


@pytest.mark.parametrize("name", ["mlp", "attention", "rnn"])
def test_samples(name):
    from pathlib import Path

    _check_program(Path(__file__).parent.parent / "samples" / f"{name}.jaxpr", SPECS)


def _corpus_programs():
    from conftest import corpus_files

    return corpus_files("jax-0.12.0.1")


@pytest.mark.slow
@pytest.mark.parametrize("path", [pytest.param(p, id=p.name) for p in _corpus_programs()])
def test_corpus_programs(path):
    _check_program(path, SPECS)


@jax.jit
def _shared_body(x, w):
    return jnp.sin(jnp.tanh(x @ w))


def test_a_second_linearization_of_the_same_body_reports_its_nested_plan():
    """`calls.py` keeps one linearization per body object (its derivative is shared, as
    JAX's); the plans made for that body are kept with it: a second linearization of the
    same program (another build of `--remat-budget`'s loop, a second API call) lists the
    nested plan again, and a body called twice in one program has one plan, as it has one
    derivative.  The program under the plans is JAX's gradient either way."""
    x = vec((4, 4), 0)
    j = ir(lambda x, w: jnp.sum(_shared_body(_shared_body(x, w), w) ** 2), x, x)
    assert j.eqns[0].params["jaxpr"] is j.eqns[1].params["jaxpr"]  # one body object
    spec = remat.parse_policy("nothing_saveable")
    first, second = [], []
    linearize_jaxpr(j, remat=spec, plans=first)
    linearize_jaxpr(j, remat=spec, plans=second)
    lines = [[p.render().splitlines()[0] for p in plans] for plans in (first, second)]
    assert lines[0] == lines[1]
    assert [line.split(":")[0] for line in lines[0]] == [
        "remat nothing_saveable on a nested body (one segment)",
        "remat nothing_saveable on the program",
    ]
    f = lambda x, w: jnp.sum(_shared_body(_shared_body(x, w), w) ** 2)  # noqa: E731
    got, want = together(
        (grad_jaxpr(j, (0, 1), remat=spec, plans=[]), [x, x]), (jax.grad(f, argnums=(0, 1)), [x, x])
    )  # (one compile)
    for g, w in zip(got, want):
        close(g, w)
