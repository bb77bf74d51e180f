"""The `--remat-budget` loop learns from the device's compiles by saved value (issue 48):
each compile is one equation, XLA's temp bytes = the plain gradient's scale x the model's
figure + the sum of a weight x bytes over the values the plan saves, and the next plan's
figure carries the weights of the values it saves.  The figures below are the TPU v5e's
(JAX 0.10.2), recorded in bench/device/results/remat_tpu_2026-12-07c/d_scan*.log: XLA's temp
bytes of the scan twin's plans for `--remat-budget 0.2`, and their keys and bytes as
bench/device/replay_fit.py makes them on the CPU."""

from __future__ import annotations

import dataclasses

import pytest

from jaxprtool.ad.remat.fit import Calibration, Tried, learn_weights, value_class
from jaxprtool.ad.remat.graph import Plan

#: the plain gradient's XLA temp bytes over its figure (compile 0 of every scan twin row)
SCALE = 6098817024 / 6598230016
#: the small values (reductions' outputs, a layer norm's) every plan below saves
SMALL = {
    "2.0": 131072, "11.0": 131072, "13.0": 131072, "15.0": 32768, "32.0": 2097152,
    "36.0": 2097152, "38.0": 2097152, "46.0": 131072, "55.0": 131072, "57.0": 131072,
    "59.0": 32768,
}  # fmt: skip
BIG = 134217728  # f32[8,16,512,64] x 8 iterations, stacked
#: label: (the big values saved, the scaled figure, XLA's temp bytes on the chip)
TPU = {
    "0.1728": (("26.0", "43.0"), 1123133127, 1400807424),
    "0.1527": (("43.0",), 1014581562, 1292227072),
    "0.1631": (("25.0", "26.0"), 1107625761, 1218952192),
    "0.1431": ((), 890522631, 866760704),
    # remat_tpu_2026-12-07d_scan.log: the loop with classes chose this plan for 0.2
    "0.1455": (("26.0",), 999074196, 1084702720),
}


def tried(label: str) -> Tried:
    big, scaled, temp = TPU[label]
    values = {**SMALL, **dict.fromkeys(big, BIG)}
    body = Plan("budget", [], [], nested=True)
    body.saved_values = [(f"75x8:{k}/1", n) for k, n in values.items()]
    fused = scaled / SCALE  # (the scan body's figure: its liveness one, held or not)
    return Tried(f"model budget {label}", None, [body], 0, int(fused), int(fused), temp=temp)


def test_each_compile_is_one_equation_the_weights_meet():
    """The least-norm weights meet every compile's equation: the learnt figure of each
    compiled plan is XLA's bytes for it (to the byte, but for rounding)."""
    cal = Calibration(0.0, SCALE)
    compiled = [tried(label) for label in ("0.1728", "0.1527", "0.1631")]
    cal = Calibration(0.0, SCALE, learn_weights(cal, compiled))
    for t in compiled:
        assert abs(cal.figure(t) - t.temp) <= 2, (t.label, cal.figure(t), t.temp)
    # what XLA holds beyond the scale is by value: the residual stream value 43 costs twice
    # its bytes more, the one 26 saved with it nothing more (the chip's three compiles)
    assert cal.weights["75x8:43.0/1"] > 1.5 and abs(cal.weights["75x8:26.0/1"]) < 0.5


def test_a_value_no_compile_saved_takes_its_class_weight():
    """A value no compiled plan saved weighs what its class (values of the same bytes saved
    from the same body) was taught; a class no compiled plan saved teaches nothing."""
    cal = Calibration(0.0, SCALE)
    weights = learn_weights(cal, [tried("0.1728")])
    assert "75x8:25.0/1" not in weights
    assert weights["75x8:26.0/1"] == pytest.approx(weights["75x8:43.0/1"])  # split by bytes
    big = value_class("75x8:25.0/1", BIG)
    assert big == value_class("75x8:43.0/1", BIG) != value_class("75x8:2.0/1", 131072)
    learnt = Calibration(0.0, SCALE, weights)
    assert 0 < learnt.weight("75x8:25.0/1", BIG) == weights[big] < weights["75x8:43.0/1"]
    assert learnt.weight("75x8:99.0/1", 12345) == 0.0  # (a class no compile saved)
    assert learnt.weight("9x8:25.0/1", BIG) == 0.0  # (another body's)
    # (and a plan saving nothing keyed teaches nothing)
    bare = Tried("policy", None, [], 0, 10, 10, temp=99)
    assert learn_weights(cal, [bare]) == {}
    host = Plan("budget", [], [], saved_values=[("1x1:0.0/1", 0)])  # (offloaded: 0 bytes)
    assert learn_weights(cal, [Tried("offload", None, [host], 0, 10, 10, temp=99)]) == {}


def test_a_plan_saving_an_unseen_value_is_planned_close_before_its_compile():
    """The TPU's `--remat-budget 0.2` of the scan twin: after the chip's first two compiles
    (the residual stream value 43 saved with the transposed key 26, and alone: 43 costs 2.07x
    its bytes beyond the scale, 26 nothing), the third plan saves 26 and the transposed query
    25, which no compile had saved.  By value alone 25 weighed nothing, and the plan was
    planned 9.1% under XLA's bytes (1.100x); with the class's weight (half of what the two
    big values saved so far cost, by the least-norm split) it is planned within 3%."""
    cal = Calibration(0.0, SCALE)
    two = Calibration(0.0, SCALE, learn_weights(cal, [tried("0.1728"), tried("0.1527")]))
    third = tried("0.1631")
    assert abs(two.figure(third) - third.temp) <= 0.03 * third.temp, two.figure(third)
    by_value = {k: w for k, w in two.weights.items() if ":" in k}
    alone = Calibration(0.0, SCALE, by_value).figure(third)
    assert third.temp > 1.09 * alone  # (the loop without classes: 1.100x)


def test_the_plan_the_chip_chose_with_classes_was_planned_within_ten_percent():
    """With classes the loop's third plan for the scan twin's 0.2 is another: it saves the
    transposed key 26 without the residual stream 43 (26 was saved before, only beside 43,
    where it cost nothing more).  Planned after the same two compiles, XLA held it at 1.085x
    of its planned figure on the chip (2026-12-07d): within 10%, though alone 26 costs XLA
    0.64x its bytes beyond the scale (what a value costs depends on what is saved beside it,
    which no weight per value or class carries)."""
    cal = Calibration(0.0, SCALE)
    two = Calibration(0.0, SCALE, learn_weights(cal, [tried("0.1728"), tried("0.1527")]))
    chosen = tried("0.1455")
    assert chosen.temp <= 0.2 * 6098817024  # (it fits the loop's target)
    assert 1.0 < chosen.temp / two.figure(chosen) <= 1.10, two.figure(chosen)


def test_the_next_plan_carries_the_lesson_by_value():
    """The TPU's `--remat-budget 0.2` of the scan twin: compile 1 (two big values saved) is
    held at 1.247x its figure.  One scale corrected by that ratio (the loop before) planned
    the plan saving the small values alone at 0.780x of XLA's bytes; learnt by value, its
    figure stays near the plain gradient's scale (those values' weights are small): within
    10%.  The chip's own third compile, planned after two, is within 10% of XLA's bytes too
    (within 3% with its class's weight: the test above)."""
    cal = Calibration(0.0, SCALE)
    one = Calibration(0.0, SCALE, learn_weights(cal, [tried("0.1728")]))
    small_only = tried("0.1431")
    assert abs(one.figure(small_only) - small_only.temp) <= 0.10 * small_only.temp
    by_scale = SCALE * (1400807424 / 1123133127) * small_only.fused
    assert by_scale > 1.25 * small_only.temp  # the one-scale correction: 0.780x
    two = Calibration(0.0, SCALE, learn_weights(cal, [tried("0.1728"), tried("0.1527")]))
    third = tried("0.1631")
    assert abs(two.figure(third) - third.temp) <= 0.10 * third.temp, two.figure(third)


def test_a_saved_value_holds_no_fewer_than_no_bytes():
    """A plan saving small values alone, held below its figure (the chip's 1GB row: 0.973x),
    does not teach those values a weight below minus the scale (a negative size)."""
    cal = Calibration(0.0, SCALE)
    weights = learn_weights(cal, [tried("0.1431")])
    assert weights and all(w >= -SCALE for w in weights.values())
    assert min(weights.values()) == pytest.approx(-SCALE)


def test_saved_value_keys_name_the_same_value_in_every_plan():
    """The keys by which the loop learns (`Plan.saved_values`) are the same for the same
    value in two plans of one program, and distinct within a plan (checked against the
    values' own lines: type, bytes, the equation and its place in the source)."""
    jax = pytest.importorskip("jax")
    from jaxprtool.ad import remat
    from jaxprtool.ad.api import grad_jaxpr
    from jaxprtool.text.parser import parse

    def f(x, w1, w2):
        h = jax.numpy.tanh(x @ w1)
        return (jax.numpy.sin(h @ w2) ** 2).sum()

    # (shapes all distinct: each value's line names it alone)
    args = [jax.numpy.ones((4, 8)), jax.numpy.ones((8, 16)), jax.numpy.ones((16, 6))]
    j = parse(str(jax.make_jaxpr(f)(*args)), "f").jaxpr
    by_line: dict[str, str] = {}
    seen = 0
    for budget in ("0.9", "0.5", "0.2"):
        plans: list = []
        grad_jaxpr(j, [0, 1, 2], remat=remat.parse_budget(budget), plans=plans)
        for p in plans:
            keys = [k for k, _ in p.saved_values]
            assert len(keys) == len(set(keys)) == len(p.saved_lines), p.saved_lines
            for (key, n), line in zip(p.saved_values, p.saved_lines):
                assert f"({n} B)" in line
                assert by_line.setdefault(line, key) == key, (line, key)
                seen += 1
    assert seen > len(by_line)  # a value saved by more than one plan


def _compiled(label, temp, flops, xla_flops, budget=0.15):
    return Tried(label, None, [], flops, 0, 0, temp=temp, budget=budget, xla_flops=xla_flops)


def test_a_compiled_plan_that_holds_no_more_and_recomputes_no_more_is_chosen():
    """Issue 48, item 2 (the policies are candidates too), with the TPU's figures
    (remat_tpu_2026-12-07d_scan.log, `--remat-budget 0.2` of the scan twin): the budget
    plan the loop chose holds 1,084.7 MB at 405.50G XLA FLOPs, nothing_saveable 987.1 MB at
    405.57G (0.02% more); the tool's count said 2.1% more, which is how the budget plan was
    preferred.  Compiled beside it, nothing_saveable dominates it and is the choice, said."""
    from jaxprtool.ad.remat.fit import FLOPS_TOLERANCE, Fit, _best, _choose, dominates

    target = int(0.2 * 6098817024)
    budget = _compiled("model budget 0.1455", 1084702720, 3239961329664, 405501476864)
    ns = _compiled("--remat nothing_saveable", 987085824, 3309389234176, 405568290816, None)
    over = _compiled("model budget 0.1527", 1292227072, 3239927775232, 405526642688)
    assert _best([budget, over], target) is budget  # (the loop's pick without the policy)
    assert dominates(ns, budget) and not dominates(budget, ns)
    fit = Fit(target, 6098817024)
    _choose(fit, [budget, ns, over])
    assert fit.chosen is ns
    assert "set aside: model budget 0.1455" in fit.render(), fit.render()
    # by the tool's count alone (no XLA FLOPs) the two are 2.1% apart: neither dominates
    blind = [dataclasses.replace(t, xla_flops=None) for t in (budget, ns)]
    assert not dominates(blind[1], blind[0])
    assert _best(blind, target) is blind[0]
    # the unrolled budget 0.5's two plans (remat_tpu_2026-12-07d_unrolled.log): the tighter
    # one recomputes 0.6% more by XLA's count, past the tolerance: the looser one stays
    loose = _compiled("model budget 0.2452", 919638016, 2905397968896, 2843931049984)
    tight = _compiled("model budget 0.2394", 852109824, 2922569449472, 2861127696384)
    assert tight.xla_flops > (1 + FLOPS_TOLERANCE) * loose.xla_flops
    assert _best([loose, tight], 1026087424) is loose
    # of plans within the tolerance of one another, one stays (no cycle)
    twin = dataclasses.replace(budget, temp=ns.temp, label="twin")
    assert _best([twin, ns], target) is not None


def test_a_recomputed_reductions_operand_weighs_what_the_device_says():
    """The scan twin's nothing_saveable plan on the TPU v5e (bench/device/results/
    remat_tpu_2026-12-07g_scan_batch192.log): its body recomputes the softmax's and the
    layer norms' reductions, whose operands no residual holds (151,289,856 B stacked per
    iteration: `device.reduced_bytes`, as replay_fit.py makes it).  XLA held 987,085,824 B:
    within 10% of the figure at the TPU's weight of that term (`PRIORS`), more than 10% over
    the figure without it.  No plain gradient's compile can tell the weight (it recomputes
    nothing): what the loop learns from its compiles, by value or by scale, keeps it."""
    from jaxprtool.ad.remat.fit import PRIORS, Fit, _Loop

    fused = 956899328
    t = Tried("--remat nothing_saveable", None, [], 0, fused, fused, temp=987085824)
    t.reduced = 151289856
    tpu = Calibration(0.0, SCALE, reduced=PRIORS["tpu"].reduced)
    assert abs(tpu.figure(t) - t.temp) <= 0.10 * t.temp, tpu.figure(t)
    assert Calibration(0.0, SCALE).figure(t) < 0.90 * t.temp
    loop = _Loop(None, None, None, None, Fit(1219763404, 6098817024))
    loop.cal = tpu
    loop.tried = [tried("0.1728"), tried("0.1527")]
    loop.correct(loop.tried)  # by value
    assert loop.cal.weights and loop.cal.reduced == tpu.reduced
    loop.cal, loop.fit.plain_temp = tpu, 0  # (as where the plain gradient did not compile)
    loop.correct(loop.tried[:1])  # by scale: 0.1728's plan was over, all of its ratio
    assert loop.cal.scale == pytest.approx(SCALE * 1400807424 / 1123133127, rel=1e-6)
    assert loop.cal.reduced == tpu.reduced
