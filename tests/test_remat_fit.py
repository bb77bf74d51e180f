"""`--remat-budget` in XLA's bytes (issue 48, items 1 and 2): the compile loop tightens the
plan until XLA's temp bytes fit, a fraction being of the plain gradient's and a byte count
XLA's bytes; no policy plan beats a budget plan on both bytes and FLOPs; `--no-xla` keeps
the tool's liveness model.  JAX is the oracle: the printed gradient is compiled by
`jax.jit(...).lower(...).compile()` here, its `memory_analysis()` and `cost_analysis()` read,
never the tool's own report."""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from pathlib import Path

import pytest

jax = pytest.importorskip("jax")
from jax_oracle import close, run, vec  # noqa: E402

from jaxprtool import backend  # noqa: E402
from jaxprtool.ad import remat  # noqa: E402
from jaxprtool.text.parser import parse  # noqa: E402


def layernorm(x, g):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) * jax.lax.rsqrt(v + 1e-5) * g


def block(p, x, heads=2):
    """A pre-norm transformer layer (bench/device/remat_tpu.py's)."""
    b, s, d = x.shape
    dh = d // heads
    h = layernorm(x, p[6])
    q, k, v = ((h @ p[i]).reshape(b, s, heads, dh).transpose(0, 2, 1, 3) for i in range(3))
    a = jax.nn.softmax(q @ k.transpose(0, 1, 3, 2) / math.sqrt(dh), axis=-1)
    x = x + (a @ v).transpose(0, 2, 1, 3).reshape(b, s, d) @ p[3]
    return x + jax.nn.gelu(layernorm(x, p[6]) @ p[4]) @ p[5]


def model_args(layers, d, seq, batch):
    shapes = [(d, d)] * 4 + [(d, 4 * d), (4 * d, d), (d,)]
    ws = [0.3 * vec(s, 10 * i + k) for i in range(layers) for k, s in enumerate(shapes)]
    return (vec((batch, seq, d), 0), *ws)


def loss(x, *ws):
    for i in range(0, len(ws), 7):
        x = block(ws[i : i + 7], x)
    return (x**2).mean()


def _compiled(program_text: str, args):
    """A printed program compiled by JAX."""
    fn = backend.as_jax_function(parse(program_text, "g").jaxpr, enable_x64=False)
    return jax.jit(lambda *a: fn(*a)).lower(*args).compile()


def _xla_flops(compiled) -> float:
    """XLA's FLOPs of a program JAX compiled (`cost_analysis()`, a list of one on older JAX)."""
    cost = compiled.cost_analysis()
    return float((cost[0] if isinstance(cost, (list, tuple)) else cost)["flops"])


def _figures(program_text: str, args) -> tuple[int, float]:
    """(XLA's temp bytes, XLA's FLOPs) of a printed program, compiled by JAX."""
    compiled = _compiled(program_text, args)
    return compiled.memory_analysis().temp_size_in_bytes, _xla_flops(compiled)


class Model:
    def __init__(self, tmp_path_factory, layers, d, seq, batch):
        self.args = model_args(layers, d, seq, batch)
        self.src = tmp_path_factory.mktemp("fit") / "f.jaxpr"
        self.src.write_text(str(jax.make_jaxpr(loss)(*self.args)) + "\n")
        self.argnums = ",".join(map(str, range(len(self.args))))
        self._compiled_texts: dict[str, tuple[int, float]] = {}

    @functools.cached_property
    def plain(self) -> tuple[int, float]:
        """(XLA's temp bytes, XLA's FLOPs) of the plain gradient, compiled by JAX (on first
        use: the tests on a fake device compile nothing)."""
        return self.compiled_figures(self.grad([]).stdout)

    @functools.cached_property
    def want(self):
        """JAX's gradient (the oracle)."""
        return jax.jit(jax.grad(loss, tuple(range(len(self.args)))))(*self.args)

    def grad(self, flags):
        r = run(["grad", "--argnums", self.argnums, *flags, str(self.src)])
        assert r.exit_code == 0, r.output
        return r

    def figures(self, flags):
        r = self.grad(flags)
        return (*self.compiled_figures(r.stdout), r)

    def compiled_figures(self, program_text: str) -> tuple[int, float]:
        """`_figures` of a printed program, compiled once per text: a plan printed as the
        plain gradient's text (a budget the plain gradient meets) is that program, whose
        figures JAX compiled for `plain` (XLA compiles a text to the same executable)."""
        if program_text not in self._compiled_texts:
            self._compiled_texts[program_text] = _figures(program_text, self.args)
        return self._compiled_texts[program_text]


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """Two layers: the fit loop takes the paths it takes at three (`three`), with two thirds
    of the columns in its 0/1 programs (263 against 391), whose HiGHS solves at three were
    6 of the fraction test's 11 CPU-s."""
    return Model(tmp_path_factory, 2, 32, 16, 2)


@pytest.fixture(scope="module")
def three(tmp_path_factory):
    """Three layers, for the tests that compile nothing (on a fake device, their budgets 0.6
    and 0.7 are beyond what the chain plans can hold two layers to; the device model's
    segments) and those of `make test-full` (their budgets are beyond what XLA holds two
    layers to: nothing_saveable's 0.56x the plain gradient's)."""
    return Model(tmp_path_factory, 3, 32, 16, 2)


def _policies(m):
    return {p: m.figures(["--remat", p])[:2] for p in ("nothing_saveable", "dots_saveable")}


def test_fraction_is_of_the_plain_gradients_xla_bytes(small):
    """The budget is a fraction of XLA's temp bytes of the plain gradient: the plain gradient's
    compile calibrates the device model, and the loop checks its plan by compiling it."""
    r = small.grad(["--remat-budget", "0.75"])
    compiled = _compiled(r.stdout, small.args)
    temp = compiled.memory_analysis().temp_size_in_bytes
    assert temp <= 0.75 * small.plain[0], (temp, small.plain)
    # the loop compares compiled plans by XLA's FLOPs too: the chosen plan's are JAX's count
    said = [float(x) for x in re.findall(r"FLOPs \(XLA (\d+)\)", r.stderr)]
    assert _xla_flops(compiled) in said, (_xla_flops(compiled), r.stderr)
    assert "calibration:" in r.stderr and "compile 1: " in r.stderr and "chosen:" in r.stderr
    # at most 3 compiles of budget plans beyond the plain gradient's (and the policy plans
    # whose figure fits, compiled to be compared)
    assert len(re.findall(r"compile \d+: model budget", r.stderr)) <= 3, r.stderr
    # planned and XLA bytes side by side on the plan's line
    assert re.search(r"XLA temp \d+ -> \d+ \(0\.\d+x\)", r.stderr), r.stderr
    for a, b in zip(compiled(*small.args), small.want):  # (the executable just measured)
        close(a, b)


@pytest.mark.slow  # (make test-full; the fraction test runs the same loop)
def test_byte_budget_is_xla_bytes(three):
    budget = int(0.45 * three.plain[0])
    temp, _, _ = three.figures(["--remat-budget", str(budget)])
    assert temp <= 1.05 * budget, (temp, budget)


def test_a_budget_the_plain_gradient_meets_holds_no_more_than_it(small):
    """A budget at or above the plain gradient's XLA bytes gives the plain gradient: a plan
    saving every residual adds its roundings, which XLA held beside it (1.08x at these
    sizes' twin in bench/device/remat_tpu.py --small)."""
    temp, _, r = small.figures(["--remat-budget", str(2 * small.plain[0])])
    assert temp <= small.plain[0], (temp, small.plain)
    assert "the plain gradient fits" in r.stderr


@pytest.mark.slow  # (make test-full; test_issue_sizes_on_the_cpu checks it at three budgets)
def test_no_policy_plan_beats_a_budget_plan_on_both_counts(three):
    policies = _policies(three)
    temp, flops, _ = three.figures(["--remat-budget", "0.6"])
    for name, (pt, pf) in policies.items():
        assert not (pt < 0.98 * temp and pf < 0.98 * flops), (name, pt, pf, temp, flops)


def test_no_xla_keeps_the_liveness_model(three):
    r = three.grad(["--remat-budget", "0.5", "--no-xla"])
    assert "compile 1" not in r.stderr and "XLA temp" not in r.stderr
    assert "planned peak" in r.stderr


#: the mlp sample: a program whose plain gradient and plans XLA compiles in a few
#: milliseconds, for the errors (their paths and messages are the transformer's: the
#: loop's give-up after compile 0 and a round of plans over the target, the least found
#: said; the device's missing memory limit): 6.4 -> 0.9 CPU-s for the three
MLP = Path(__file__).resolve().parents[1] / "samples" / "mlp.jaxpr"


@pytest.mark.parametrize(
    "flags, code, text",
    [
        (["--remat-budget", "100"], 1, "XLA's temp bytes cannot be brought to 100 B"),
        (["--remat-budget", "device"], 1, "reports no memory limit"),
        (["--remat-budget", "device", "--no-xla"], 2, "it needs XLA"),
    ],
)
def test_budget_errors(flags, code, text):
    r = run(["grad", "--argnums", "0,1,2,3", *flags, str(MLP)])
    assert r.exit_code == code and text in r.output and "Traceback" not in r.output, r.output
    assert r.stdout == ""


@pytest.fixture(scope="module")
def issue_size(tmp_path_factory):
    """The issue's CPU transformer: 8 layers, width 256, 128 tokens, batch 4."""
    return Model(tmp_path_factory, 8, 256, 128, 4)


@pytest.mark.slow
def test_issue_sizes_on_the_cpu(issue_size):
    """The issue's CPU done-when: budget 0.25 at most 0.2625x the plain gradient's XLA temp;
    a byte budget B at most 1.05 B; budgets 0.5, 0.3, 0.2 beaten by no policy plan on both
    bytes and FLOPs (2% margin)."""
    m = issue_size
    temp, _, _ = m.figures(["--remat-budget", "0.25"])
    assert temp <= 0.2625 * m.plain[0]
    budget = int(0.35 * m.plain[0])
    temp, _, _ = m.figures(["--remat-budget", str(budget)])
    assert temp <= 1.05 * budget
    policies = _policies(m)
    policies["min-cut"] = m.figures(["--remat", "min-cut"])[:2]
    for b in ("0.5", "0.3", "0.2"):
        temp, flops, _ = m.figures(["--remat-budget", b])
        for name, (pt, pf) in policies.items():
            assert not (pt < 0.98 * temp and pf < 0.98 * flops), (b, name, pt, pf, temp, flops)


@pytest.mark.slow  # (make test-full; the fraction test runs the same loop)
def test_memory_of_grad_fits_the_budget_too(three):
    """`memory --of grad --remat-budget`: the program analysed is the one `grad` fits."""
    import json

    argv = ["memory", "--of", "grad", "--argnums", three.argnums, "--json"]
    r = run([*argv, "--remat-budget", "0.5", str(three.src)])
    assert r.exit_code == 0, r.output
    assert "chosen:" in r.stderr
    assert json.loads(r.stdout)["xla"]["temp_bytes"] <= 0.5 * three.plain[0]


@pytest.fixture
def chain_plans(monkeypatch):
    """Budget plans from the chain dynamic program (`chain.py`), as a program too large for
    the exact 0/1 program gets them: the compile loop is the same whatever plans its
    planner makes, and its tests on a fake device make dozens of plans (the exact program's
    solves were 9.5 of their 12 CPU-s).  The loop over the exact program's plans is
    `test_fraction_is_of_the_plain_gradients_xla_bytes`'s, compiled by XLA."""
    monkeypatch.setattr(remat.budget, "EXACT_LIMIT", 0)


#: (model, the exact program's size limit) -> (Spec, no plans) -> (gradient, its plans):
#: `_fake_device`'s builds
_BUILT: dict[tuple, dict] = {}


def _fake_device(small, figure):
    """`fit_budget`'s callbacks on a device whose temp bytes are `figure(plans)` of the
    planners' figures: (build, measure), the plans of each program built recorded."""
    from jaxprtool.ad.api import grad_jaxpr

    j = parse(small.src.read_text(), "f").jaxpr
    argnums = list(range(len(small.args)))
    made: dict[int, list] = {}
    built = _BUILT.setdefault((str(small.src), remat.budget.EXACT_LIMIT), {})

    def build(spec, plans):
        # (a gradient built before under the same Spec, by this test or another of the
        # model's: the same program and plans, as `grad_jaxpr` makes them again; a third of
        # the fake-device tests' builds were such repeats, 0.5 CPU-s)
        key = (spec, plans is None)
        if key not in built:
            fresh: list | None = None if plans is None else []
            built[key] = (grad_jaxpr(j, argnums, remat=spec, plans=fresh), fresh)
        program, its_plans = built[key]
        if plans is not None:
            plans.extend(its_plans)
        made[id(program)] = plans
        return program

    plain_plans: list = []
    build(remat.Spec(policy="min-cut", device_model=True), plain_plans)
    top = plain_plans[0]
    plain = (top.peak_before or top.bytes_before, top.device_before)

    def measure(program):
        plans = made[id(program)]
        if not plans:  # the plain gradient
            return figure(*plain)
        tops = [p for p in plans if not p.nested]
        return figure(sum(p.peak or p.bytes_after for p in tops), sum(p.device for p in tops))

    return build, measure


@pytest.mark.parametrize(
    "device, held",
    [
        (lambda live, fused: int(0.9 * fused), 0.0),  # XLA:TPU-like: fuses every one
        (lambda live, fused: live, 1.0),  # holds every element-wise residual: no fusion
    ],
)
def test_the_calibration_learns_what_the_device_holds(three, chain_plans, device, held):
    """On a device that holds a fixed share of the fused (or the liveness) figure, the
    plain gradient's compile alone calibrates the model: every plan's planned figure is
    the device's to within a byte or so, and the loop compiles two plans at most (its first
    round: no correction)."""
    from jaxprtool.ad.remat.fit import fit_budget
    from jaxprtool.ui.stats import flops

    build, measure = _fake_device(three, device)
    spec = dataclasses.replace(remat.parse_budget("0.6"), segments="auto")
    program, plans, fit = fit_budget(build, spec, measure, flops)
    assert f"the device holds {held:.2f}" in fit.render(), fit.render()
    # the first round (two at once): no correction needed (beside the policy plans that fit)
    assert 1 <= fit.compiles <= 2 + fit.checked
    ratios = [float(x) for x in re.findall(r"(\d\.\d+)x planned", fit.render())]
    assert ratios and all(abs(r - 1.0) < 0.01 for r in ratios), fit.render()
    assert fit.chosen.temp <= fit.target


def test_plans_are_made_while_the_plain_gradient_compiles(three, chain_plans):
    """Given the device's model before any compile (a prior: here the fake device's own,
    XLA:TPU-like), the loop makes the budget plans it will compile while the plain gradient
    compiles: none is made after that compile is read, and one round of compiles (two
    plans at most, at once) settles the plan (the stopping rule: no plan left that
    recomputes `STOP_GAIN` fewer FLOPs)."""
    from jaxprtool.ad.remat.fit import CANDIDATES, Calibration, fit_budget
    from jaxprtool.ui.stats import flops

    build, measure = _fake_device(three, lambda live, fused: int(0.9 * fused))
    spec = dataclasses.replace(remat.parse_budget("0.6"), segments="auto")
    _, _, fit = fit_budget(build, spec, measure, flops, prior=Calibration(0.0, 0.9))
    assert fit.made_early == fit.made > len(CANDIDATES), fit.timing()  # policies, budgets
    assert fit.rounds == 1 and 1 <= fit.compiles <= 2 + fit.checked, fit.render()
    assert fit.chosen.temp <= fit.target
    # the planned figures said are the calibrated model's, whatever the prior was: on this
    # device, XLA's figures exactly (a pick picked at both of the first round's aims was
    # said at the prior's figure, here 1.8x off: the TPU log of 2026-12-06d, scan twin 0.2)
    loose = dataclasses.replace(remat.parse_budget("0.7"), segments="auto")
    _, _, off = fit_budget(build, loose, measure, flops, prior=Calibration(0.0, 0.5))
    ratios = [float(x) for x in re.findall(r"(\d\.\d+)x planned", off.render())]
    assert ratios and all(abs(r - 1.0) < 0.01 for r in ratios), off.render()
    _, _, cold = fit_budget(build, spec, measure, flops)  # no prior: made after the compile
    assert cold.made_early == len(CANDIDATES) < cold.made, cold.timing()
    assert cold.chosen.label == fit.chosen.label, (cold.render(), fit.render())


@pytest.mark.slow  # (make test-full: 5 CPU-s of plans; test_remat_fit_learn.py checks the choice)
def test_the_policy_plans_that_fit_are_compiled_and_compared(three):
    """Issue 48, item 2: each policy plan whose figure fits the target is compiled too, and
    the chosen plan is dominated by no compiled plan on XLA's bytes and XLA's FLOPs.  On a
    device whose XLA FLOPs are the same for every plan (as the TPU counted the scan twin's
    budget 0.2 plan and nothing_saveable, 0.02% apart), a plan of fewer bytes dominates, so
    the chosen plan holds the fewest bytes of those compiled that fit, though the tool's own
    count (here 2% more FLOPs for a policy plan, as the tool overcounted nothing_saveable's
    recomputation on the TPU's scan twin by 2.1%) made the search pick a budget plan."""
    from jaxprtool.ad.remat.fit import fit_budget
    from jaxprtool.ui.stats import flops

    build_any, temp = _fake_device(three, lambda live, fused: int(0.9 * fused))
    policy = set()

    def build(spec, plans):
        program = build_any(spec, plans)
        if spec is not None and spec.policy is not None:
            policy.add(id(program))
        return program

    counted = lambda g: int(flops(g) * (1.02 if id(g) in policy else 1))  # noqa: E731
    spec = dataclasses.replace(remat.parse_budget("0.8"), segments="auto")
    _, _, fit = fit_budget(build, spec, lambda g: (temp(g), 1e9), counted)
    said = fit.render()
    planned = dict(re.findall(r"compile \d+: (--remat [\w-]+): planned (\d+)", said))
    assert fit.checked >= 1 and planned, said
    assert all(int(b) <= fit.target for b in planned.values()), said
    fits = [
        int(b)
        for b in re.findall(r"XLA (\d+) B \(\S+ the plain gradient's, \S+ planned\); fits", said)
    ]
    assert fit.chosen.temp == min(fits), said
    # the budget plans of fewer FLOPs by the tool's count that were set aside are said
    assert "set aside: model budget" in said and fit.chosen.label.startswith("--remat"), said


def scan_loss(x, ws):
    """`loss` with its layers as one scan over their stacked weights (the scan twin)."""
    x, _ = jax.lax.scan(lambda x, p: (block(p, x), None), x, ws)
    return (x**2).mean()


# (make test-full: the accuracy of the planned figure, as test_issue_sizes_on_the_cpu's, 13
# compiles of the scan twin; make test keeps the scan body's device term,
# test_a_scan_body_plan_recomputing_a_reduction_counts_its_operand, and scan plans against
# JAX: test_remat_scan.py, test_remat_segments.py's test_scan_body_per_iteration)
@pytest.mark.slow
@pytest.mark.parametrize("budget", ["0.5", "0.35"])
def test_the_planned_figure_sees_the_plan_inside_a_scan(tmp_path, budget):
    """A budget plan of the scan twin is made inside the scan's body (what the loop stacks
    per iteration): the calibrated planned figure of the chosen plan is within 10% of XLA's
    temp bytes for it, compiled here (before, every plan was planned at the plain
    gradient's bytes: 3.5x XLA's at --small)."""
    layers, d, seq, batch = 4, 32, 16, 2
    flat = model_args(layers, d, seq, batch)
    ws = tuple(jax.numpy.stack(flat[1 + k :: 7]) for k in range(7))
    args = (flat[0], *ws)
    src = tmp_path / "scan.jaxpr"
    src.write_text(str(jax.make_jaxpr(lambda x, *w: scan_loss(x, w))(*args)) + "\n")
    argnums = ",".join(map(str, range(len(args))))
    r = run(["grad", "--argnums", argnums, "--remat-budget", budget, str(src)])
    assert r.exit_code == 0, r.output
    assert "compile 1: " in r.stderr, r.stderr  # the loop compiled a plan (not the plain one)
    planned = int(re.search(r"planned \(calibrated\) (\d+)", r.stderr).group(1))
    temp = _compiled(r.stdout, args).memory_analysis().temp_size_in_bytes
    assert abs(planned - temp) <= 0.10 * temp, (planned, temp, r.stderr)


def test_the_device_model_runs_the_backward_stretches_last_to_first(three, monkeypatch):
    """The structure of the device model's figure for a segmented program
    (`device._backward_peak`): the backward part runs the segments' stretches last to first,
    each freeing its segment's saved values, and the last segment's stretch runs right after
    its forward.  So recomputing the last segment's residuals leaves the plain gradient's
    figure as it is, and recomputing the first segment's lowers it (its saved values were
    alive at the peak, its recomputation is alive only in its own stretch, the last).  What
    XLA holds for such plans is measured on the TPU (bench/device/results/
    remat_tpu_2026-12-06d_unrolled_ordered.log: the chosen plans' calibrated figures 0.95x-1.03x
    XLA's), not here: XLA:CPU keeps element-wise residuals the TPU's fusions recompute."""
    from jaxprtool.ad.api import grad_jaxpr
    from jaxprtool.ad.remat import device, entry
    from jaxprtool.ad.remat.graph import _plan_from_saved
    from jaxprtool.core import Var

    seen = []

    def record(g, plan, groups=None):
        seen.append((g, groups))
        return device.device_bytes(g, plan, groups)

    monkeypatch.setattr(entry, "device_bytes", record)
    # (three layers: at two, recomputing the first segment's residuals leaves this figure
    # as it is, 41472 B both)
    j = parse(three.src.read_text(), "f").jaxpr
    spec = remat.Spec(policy="min-cut", segments="auto", device_model=True)
    grad_jaxpr(j, list(range(len(three.args))), remat=spec, plans=[])
    g, groups = seen[-1]
    n = len(g.segments.starts)
    assert n == 3, g.segments.describe()  # the three layers
    everything = {id(v): v for v in g.residuals if isinstance(v, Var) and id(v) not in g.free}

    def without(k):
        """The plan saving every residual but those segment `k` makes."""
        kept = {i for i in everything if g.segments.of[g.producer[i]] != k}
        return _plan_from_saved(g, kept, "")

    plain_plan = _plan_from_saved(g, set(everything), "")
    plain = device.plain_device_bytes(g)
    assert plain == device.device_bytes(g, plain_plan, groups)
    # the last segment's recomputation adds nothing but the value entering it, now saved
    last = without(n - 1)
    held = {id(v) for v in plain_plan.saved}
    entering = {id(v): v for v in last.saved if id(v) in g.boundary and id(v) not in held}
    kept = {id(v) for v in last.saved}
    recomputed = sum(g.size(v) for i, v in everything.items() if i not in kept)
    assert entering and recomputed > sum(g.cost(v) for v in entering.values())
    assert device.device_bytes(g, last, groups) == plain + sum(g.cost(v) for v in entering.values())
    assert device.device_bytes(g, without(0), groups) < plain


#: the device model's figures (MB) and FLOPs (T) of the budget plans of the TPU script's
#: 8-layer transformer (width 1024, sequence 512, batch 8), by the model budget from which
#: each is made: a sweep of the model on this CPU, JAX 0.10, 2026-12-07 (budget 0.1723's
#: 477.7 MB is the figure the TPU's log remat_tpu_2026-12-06d_unrolled_0.25_again.log printed)
TPU_STEPS = (
    (0.0, 411.2, 3.1587),
    (0.1715, 477.7, 3.1458),
    (0.1775, 511.3, 3.1286),
    (0.1793, 478.3, 3.1244),
    (0.1818, 544.8, 3.1115),
    (0.1845, 511.9, 3.1072),
    (0.1880, 578.4, 3.0943),
    (0.1905, 545.4, 3.0900),
    (0.1920, 611.9, 3.0771),
    (0.1950, 579.0, 3.0728),
    (0.1980, 645.5, 3.0600),
)


def test_the_search_looks_past_a_step_of_the_device_figure():
    """The device figure of a budget plan is not monotone in the model's budget (a sawtooth
    of +-33 MB at the TPU's sizes, `TPU_STEPS`): the search for `--remat-budget 0.25` on the
    TPU (goal 0.97 x 513 MB) stopped between 0.1738 (478 MB, 3.146T FLOPs) and 0.1791 (511
    MB, over), while a looser budget's plan is 478 MB at 3.124T (XLA held it at 0.239x the
    plain gradient's and ran it at 1.137x its time, against 1.147x).  The search returns the
    plan of fewest FLOPs within its goal among those it made, looking past its bracket."""
    from jaxprtool.ad.remat.fit import Calibration, Fit, Tried, _Loop

    loop = _Loop(None, None, None, None, Fit(513_043_712, 2_052_174_848))
    loop.cal = Calibration(0.0, 1.0)  # figure = the fused figure

    def make(label, spec, budget):
        _, mb, tflops = max(s for s in TPU_STEPS if s[0] <= budget)
        fused = int(mb * 1e6)
        return Tried(f"model budget {budget}", None, [], int(tflops * 1e12), fused, fused, budget)

    loop.make = make
    loop.spec = remat.Spec(policy=None)
    goal = int(0.97 * 513_043_712)
    found = loop.search(goal)
    assert found is not None and loop.cal.figure(found) <= goal
    within = [s for s in TPU_STEPS if s[1] * 1e6 <= goal]
    assert found.flops == int(min(s[2] for s in within) * 1e12), sorted(loop.by_budget)


def test_a_scan_body_plan_recomputing_a_reduction_counts_its_operand(monkeypatch):
    """The device model of a scan body (`device.reduced_bytes`): a plan that recomputes a
    softmax's max and sum has a term of their operand's bytes, the product's scores (no
    residual), beside the residuals its figure counts; a plan that saves the reductions'
    results has none.  What XLA holds is measured on the TPU, not here: the scan twin's
    nothing_saveable plan held 120 MB more than the plan saving the reductions' results,
    where the liveness figure put it 6.5 MB lower; XLA:CPU holds nothing more (the term's
    weight is the device's, `fit.PRIORS`; bench/device/results/peak_probe_2026-12-07g*)."""
    from jaxprtool.ad.api import grad_jaxpr
    from jaxprtool.ad.remat import device, entry
    from jaxprtool.ad.remat.graph import _plan_from_saved

    seen = []

    def record(g, plan, groups=None):
        if g.copies > 1:
            seen.append((g, plan))
        return device.device_bytes(g, plan, groups)

    monkeypatch.setattr(entry, "device_bytes", record)
    jnp = jax.numpy

    def attend(x, w):  # a softmax written out, as JAX 0.10 prints jax.nn.softmax
        s = (x @ w) @ x.transpose(0, 2, 1)
        e = jnp.exp(s - jax.lax.stop_gradient(s.max(-1, keepdims=True)))
        return (e / e.sum(-1, keepdims=True)) @ x, None

    args = (vec((2, 8, 4), 0), 0.3 * vec((3, 4, 4), 1))
    j = parse(
        str(jax.make_jaxpr(lambda x, w: (jax.lax.scan(attend, x, w)[0] ** 2).sum())(*args)), "f"
    )
    spec = remat.Spec(policy="nothing_saveable", segments="auto", device_model=True)
    grad_jaxpr(j.jaxpr, [0, 1], remat=spec, plans=[])
    (g, plan), *_ = seen
    # the attention scores: the product whose result the max reduces (through a scaling)
    (m,) = (e for e in g.eqns if e.prim == "reduce_max")
    scores = m.inputs[0]
    while g.eqns[g.producer[id(scores)]].prim != "dot_general":
        scores = g.eqns[g.producer[id(scores)]].inputs[0]
    recomputed = {id(v) for v in g.residuals} - {id(v) for v in plan.saved}
    assert id(scores) not in recomputed and g.producer[id(scores)] in plan.recompute
    assert device.reduced_bytes(g, plan) >= g.cost(scores) > 0
    # saving every reduction's result (and what else is saved) leaves no reduction recomputed
    reduced = {id(e.outputs[0]) for i, e in enumerate(g.eqns) if e.prim.startswith("reduce_")}
    keeps = _plan_from_saved(g, reduced | {id(v) for v in plan.saved}, "")
    assert not any(g.eqns[i].prim.startswith("reduce_") for i in keeps.recompute)
    assert device.reduced_bytes(g, keeps) == 0
