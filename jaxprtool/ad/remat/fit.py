"""A byte budget in the device's bytes: the compile loop of `--remat-budget` (issue 48).

With JAX present (and without `--no-xla`), `--remat-budget` speaks XLA's temp bytes on the
device asked (`--device`): a fraction is of the plain gradient's XLA temp bytes, a byte count
is XLA's temp bytes.  The planners speak the tool's liveness model; `fit_budget` plans
against the device's memory model instead (`device.py`), calibrated by the one compile the
loop needs anyway, and compiles as few plans as it can:

1. compiles the plain gradient (its XLA temp bytes X0: the target's base, and the
   calibration) in a thread, and meanwhile makes the policy plans (nothing_saveable,
   dots_saveable, min-cut) and, given the device's `prior` model (`PRIORS`: what its
   compiler did with the TPU script's transformer), the first round's two picks (step 3)
   under it, X0 taken as its figure: plans made while XLA compiles cost no wall time, the
   two picks compile beside the plain gradient (three compiles at once), and the searches
   afterwards start from the plans made;
2. calibrates the model (`Calibration`): a plan's figure is
   `scale * (held * L + (1 - held) * F + reduced * R)` with L its liveness figure
   (`planned_peak`), F its fused one (`device_bytes`: what is left when XLA's fusions
   recompute the element-wise residuals on their own) and R what its scan bodies'
   recomputed reductions read beyond them (`device.reduced_bytes`); `held`, the share of
   element-wise residuals the device holds (0 on a TPU, about half on XLA:CPU), is where X0
   lies between the plain gradient's F0 and L0, `scale` makes the plain gradient's figure
   X0, and `reduced` is the device's prior's (1 on a TPU, 0 on XLA:CPU: `PRIORS`);
3. picks, by the calibrated figures and without compiling, the plan of fewest FLOPs
   predicted to fit `AIM` times the target: the budget plan of fewest FLOPs so predicted
   (regula falsi over the model's budget between the plans made so far, `SEARCH_STEPS` new
   plans at most, then `PAST_STEPS` past its bracket, since the figure is not monotone in
   the budget; none compiled) or a policy plan, and compiles it, with
   the pick at `ALTERNATIVE` times that aim beside it (two compiles at once, in threads;
   with a prior, the picks of step 1 are this round, and the calibrated model says their
   planned figures);
4. learns from what XLA reported for every plan compiled so far, by saved value and by
   the class of values of its bytes, which reaches the values no compile saved
   (`learn_weights`: the plain gradient's scale kept, each compile one equation; where the
   plain gradient did not compile, the scale corrected instead: `correct_scale`), and
   stops (`STOP_GAIN`) unless the plan the corrected model picks would recompute at least
   that share fewer FLOPs than the best compiled plan that fits: then it compiles that
   plan, one compile at a time, `MAX_COMPILES` at most (a tighter aim after each round
   where nothing fits).
5. the policies are candidates too (issue 48, item 2): each policy plan not compiled whose
   modelled bytes fit the target, and whose FLOPs by the tool's count are within
   `CHECK_GAP` of the best plan the search compiled or of a plan it compiles, is compiled
   beside that round's (at once: not beside the plain gradient's, where a fourth compile
   slows them all), else after the search, so that XLA's figures of it are known:
   `len(CANDIDATES)` compiles at most, beside `MAX_COMPILES`.  Of the compiled plans that
   fit, the one of fewest FLOPs (then fewest bytes) is the plan, leaving out every plan
   another compiled plan dominates (`dominates`: no more XLA bytes, and XLA's FLOPs within
   `FLOPS_TOLERANCE` of its or fewer): the tool's FLOP count and XLA's differ (the scan
   twin's budget 0.2 on the TPU: the tool counted 2.1% fewer FLOPs than nothing_saveable,
   XLA 0.02% fewer, at 1.10x nothing_saveable's bytes).

`--remat-budget device`: the target is the bytes the device has free for temporaries (its
`bytes_limit` less what the program's arguments and outputs take).  There the plain gradient
may not compile at all (`measure` gives None: out of memory; the model is then taken as
XLA:TPU's, uncalibrated), or XLA may have fitted it by rematerializing on its own
(`HloRematerialization`): it is taken as it is only where the device model says it fits too.

Nothing here imports JAX: the command hands in `measure(program)`, XLA's temp bytes, or the
pair (XLA's temp bytes, XLA's FLOPs: `cost_analysis()["flops"]`) where it reads them; without
XLA's FLOPs a plan is compared by the tool's count.
`Fit` keeps the counts and the seconds (plans made, compiles) that the report and the TPU
script print.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from ...core import JaxprError
from .request import Spec

#: the most compiles of plans (beyond the plain gradient's) the loop spends
MAX_COMPILES = 5
#: the first pick aims at this share of the target (the calibrated model is within ~10%)
AIM = 0.97
#: the first round compiles, beside the pick, the pick at this share of its aim (in two
#: threads: XLA's compiles release the GIL), so that a pick just over the target has a plan
#: just under it without a second round
ALTERNATIVE = 0.95
#: the stopping rule: once a compiled plan fits, another is compiled only where the plan
#: the corrected model picks would recompute at least this share fewer FLOPs (a compile of
#: the TPU transformer takes 7-15 s, a second round a third or more of the planning; the
#: third compiles of the TPU rows of 2026-12-06 gained 0.2-0.6%); the search stops
#: refining where no plan left can gain half of it
STOP_GAIN = 0.02
#: the plans (no compile) the search over the model's budget makes at most, per pick
SEARCH_STEPS = 8
#: the search stops at a plan whose calibrated figure is at least this share of its goal
SEARCH_CLOSE = 0.98
#: then it looks past its bracket: this many model budgets, each 1% looser than the last.
#: The device figure of a budget plan is not monotone in the model's budget: at the TPU
#: script's sizes it rises and falls by 33 MB between neighbouring plans (the liveness
#: model's chain DP trades one segment's saved values for another's), so a looser budget
#: past one over the goal can be under it again, recomputing less (2026-12-06d: budget 0.25
#: stopped at model budget 0.1723, 478 MB and 3.146T FLOPs, below 0.1791's 511 MB; 0.1816's
#: plan is 478 MB at 3.124T, and XLA held it at 0.239x and ran it at 1.137x the plain
#: gradient's time against 1.147x)
PAST_STEPS = 4
#: a plan that does not compile for lack of memory counts as this many times its planned
#: figure (the correction then aims lower)
OUT_OF_MEMORY = 1.25
#: the policy plans that are candidates beside the budget's
CANDIDATES = ("nothing_saveable", "dots_saveable", "min-cut")
#: a compiled plan of no more XLA temp bytes than another, whose XLA FLOPs exceed the other's
#: by at most this share, dominates it (`dominates`).  On the TPU v5e (JAX 0.10.2) two plans
#: that recompute the same differ by 0.02% in XLA's count (the scan twin's budget 0.2 plan
#: and nothing_saveable: 405.50G and 405.57G, where the tool's count differs by 2.1%), and
#: the nearest two that do not by 0.6% (the unrolled budget 0.5's two plans: 2,843.9G and
#: 2,861.1G; bench/device/results/remat_tpu_2026-12-07d_*.log)
FLOPS_TOLERANCE = 0.0025
#: a policy plan that fits is compiled to be compared only where the tool counts at most
#: this share more FLOPs than the best plan the search compiled or the plan a round of it
#: compiles: past it, XLA's count would have to differ from the tool's by more than it did
#: on the TPU (the scan twin's nothing_saveable: 2.1% over the budget 0.2 plan by the tool's
#: count, 0.02% by XLA's) for it to dominate.  It compiles beside that round, else after the
#: search, never beside the plain gradient's (on the TPU a fourth compile beside the first
#: round's three slowed the plain gradient's from 19-21 s to 29-31 s, and the unrolled
#: rows' planning to 34-37 s: remat_tpu_2026-12-07e_unrolled_checks_first.log)
CHECK_GAP = 0.03


@dataclass
class Tried:
    """One candidate plan: its program, its figures in the models, and XLA's once compiled."""

    label: str
    program: object
    plans: list
    flops: int
    liveness: int  # the liveness model's figure (planned peak or bytes held)
    fused: int  # the device model's, before calibration (`device_bytes`)
    temp: int | None = None  # XLA's temp bytes, once compiled
    planned: int | None = None  # the calibrated figure when it was picked
    budget: float | None = None  # the model budget of a budget plan (None: a policy's)
    out_of_memory: bool = False  # did not compile for lack of memory (`temp` a guess)
    xla_flops: float | None = None  # XLA's FLOPs (`cost_analysis()`), where measured
    #: compiled only to be compared (a policy plan whose figure fits: module doc, step 5),
    #: not picked by the search: its compile neither teaches the model nor stops the search
    check: bool = False
    #: what the reductions its scan bodies' plans recompute read beyond the fused figure
    #: (`device.reduced_bytes`), before the calibration's weight (`Calibration.reduced`)
    reduced: int = 0

    def fits(self, target: int) -> bool:
        return self.temp is not None and self.temp <= target

    def values(self) -> dict[str, int]:
        """The bytes of each value the plan saves, by key (`Plan.saved_values`): those of
        the scan bodies' plans where there are any (the outermost plan's are then their
        stacks, keyed by the loop's result positions, which differ between plans), else the
        outermost plans'."""
        inner = [p for p in self.plans if p.nested]
        out: dict[str, int] = {}
        for p in inner or self.plans:
            for key, n in p.saved_values:
                out[key] = out.get(key, 0) + n
        return out


def dominates(a: Tried, b: Tried) -> bool:
    """Whether the compiled plan `a` makes `b` not worth keeping: `a` holds no more of XLA's
    temp bytes and recomputes no more, its FLOPs at most `FLOPS_TOLERANCE` over `b`'s (XLA's
    FLOPs where both were measured, else the tool's count), and it comes first by (bytes,
    the tool's FLOPs), which keeps the relation free of cycles: of plans that dominate one
    another within the tolerance, one stays."""
    if a is b or a.temp is None or b.temp is None or a.temp > b.temp:
        return False
    both = a.xla_flops is not None and b.xla_flops is not None
    fa, fb = (a.xla_flops, b.xla_flops) if both else (a.flops, b.flops)
    return fa <= (1 + FLOPS_TOLERANCE) * fb and (a.temp, a.flops) < (b.temp, b.flops)


@dataclass
class Calibration:
    """The device model calibrated to XLA: `figure(t) = scale * (held*L + (1-held)*F +
    reduced*R)` (R: what the reductions `t` recomputes read beyond F, `Tried.reduced`), plus
    what the compiles taught about the values `t` saves: `weights[key]` more bytes per byte
    of the value `key`, or of its class where no compile saved it (`learn_weights`).
    `reduced` is the device's (its prior's: `PRIORS`), which no plain gradient's compile can
    tell, as it recomputes nothing."""

    held: float
    scale: float
    weights: dict[str, float] = field(default_factory=dict)
    reduced: float = 0.0

    @staticmethod
    def from_plain(temp: int, liveness: int, fused: int, reduced: float = 0.0) -> Calibration:
        span = liveness - fused
        held = min(1.0, max(0.0, (temp - fused) / span)) if span > 0 else 0.0
        base = held * liveness + (1 - held) * fused
        return Calibration(held, temp / max(1.0, base), reduced=reduced)

    def figure(self, t: Tried) -> int:
        base = self._scaled(t)
        if self.weights:
            base += sum(self.weight(k, n) * n for k, n in t.values().items())
        return max(0, int(base))

    def weight(self, key: str, n: int) -> float:
        """What the compiles taught of the saved value `key` of `n` bytes: its own weight
        where a compiled plan saved it, else its class's (`value_class`), else none."""
        if key in self.weights:
            return self.weights[key]
        return self.weights.get(value_class(key, n), 0.0)

    def scaled(self, t: Tried) -> int:
        """The figure without what was learnt by value."""
        return int(self._scaled(t))

    def _scaled(self, t: Tried) -> float:
        base = self.held * t.liveness + (1 - self.held) * t.fused + self.reduced * t.reduced
        return self.scale * base


def value_class(key: str, n: int) -> str:
    """The class of the saved value `key` of `n` bytes, by which what the compiles taught
    reaches a value none of them saved: the values of the same bytes saved from the same
    body (the key's part before the colon: a scan body's equations and copies, or the
    program's).  On the TPU v5e the scan twin's three big values (16 MB a layer, stacked to
    134 MB: a transposed query, a transposed key, the residual stream) cost XLA 0.83x, 0x and
    2.07x their bytes beyond the scale, while the plain gradient's scale, which an unseen
    value otherwise takes, says 0x for each (remat_tpu_2026-12-07c_scan_learnt.log)."""
    return f"{key.split(':', 1)[0]} {n} B"


def learn_weights(cal: Calibration, compiled: list[Tried]) -> dict[str, float]:
    """Per saved value, the bytes XLA holds beyond the scaled figure, per byte of the value:
    each compiled plan is one equation, `temp - scaled figure = sum of weight x bytes` over the
    values it saves.  A value's weight is its class's (`value_class`) plus its own, and the
    weights are the least-norm solution of those equations in both: what the compiles say is
    spread between the classes and the values, so that a value no compiled plan saved takes
    its class's weight (returned under the class's key; nothing is known of a class no
    compiled plan saved: weight 0), and the weights returned for the values saved, their
    class's and their own together, meet every equation.  Why by value: on the TPU v5e,
    saving a value costs XLA 1.0x-2.6x its bytes depending on the value
    (bench/device/layout_probe.py), while the plain gradient's scale (all values saved, their
    average) predicts the plans that save nearly nothing within 3%; one correction of the
    scale for all plans carried the 1.25x of a plan saving 275 MB of the scan twin's to a
    plan saving 7 MB (planned at 0.78x of XLA's bytes)."""
    import numpy as np

    rows = [(t.values(), t.temp - cal.scaled(t)) for t in compiled]
    rows = [(x, r) for x, r in rows if any(x.values())]  # (a plan saving no bytes: no row)
    if not rows:
        return {}
    size = {k: n for x, _ in rows for k, n in x.items()}
    keys = sorted(size)
    of = {k: value_class(k, size[k]) for k in keys}
    classes = sorted(set(of.values()))
    saved = np.array(
        [
            [float(x.get(k, 0)) for k in keys]
            + [float(sum(n for k, n in x.items() if of[k] == c)) for c in classes]
            for x, _ in rows
        ]
    )
    beyond = np.array([float(r) for _, r in rows])
    found = np.linalg.lstsq(saved, beyond, rcond=None)[0]  # (the least-norm solution)
    by_class = dict(zip(classes, found[len(keys) :]))
    weights = {k: float(w) + by_class[of[k]] for k, w in zip(keys, found)}
    # (a class passes on only that its values cost more than the scaled figure: where its
    # saved values cost less (-0.98 per byte: the CPU's scan twin at budget 0.35, a plan of
    # 16 KB stacks), an unseen one of it was planned nearly free and held 1.126x its figure)
    weights.update({c: max(0.0, float(w)) for c, w in by_class.items()})
    # (a saved value holds no fewer than no bytes: where a plan saving small values only is
    # held below its figure, the least-norm weights of those values would say so)
    return {k: max(-cal.scale, w) for k, w in weights.items()}


#: the device model before any compile, by platform (`--device`'s): what the plain
#: gradient's compile calibrated on the TPU script's 8-layer transformer (TPU v5e, JAX
#: 0.10.2: XLA:TPU's fusions recompute every element-wise residual, scale 1.027: its
#: 2,052,174,848 temp bytes over the model's 1,998,782,464; XLA:CPU, JAX 0.12.1, width
#: 256: it holds 0.63 of them, scale 1.0).  A prior's `held` and `scale` only choose which
#: budget plans are made while the plain gradient compiles; the plain gradient's compile
#: calibrates them for every figure the loop compares.  Its `reduced` stays: what a
#: recomputed reduction's operand costs (`device.reduced_bytes`), about its bytes on the
#: TPU (the scan twin's nothing_saveable plan, 120 MB over the plan saving the reductions'
#: results, for 151 MB of operands), nothing on XLA:CPU (6.5 MB under it, as the liveness
#: figure says; bench/device/results/peak_probe_2026-12-07g*); 0 on a device without one
PRIORS = {"tpu": Calibration(0.0, 1.027, reduced=1.0), "cpu": Calibration(0.63, 1.0)}


@dataclass
class Fit:
    """What the loop did: the target, the plain gradient's figures, each compile, and the
    counts and seconds of its parts."""

    target: int
    plain_temp: int
    lines: list[str] = field(default_factory=list)
    chosen: Tried | None = None
    compiles: int = 0  # of plans, beyond the plain gradient's
    checked: int = 0  # of them, policy plans compiled to be compared (`Tried.check`)
    rounds: int = 0  # compile rounds after the plain gradient's (those of a round at once)
    made: int = 0  # plans made (each a gradient built, none compiled by the making)
    made_s: float = 0.0  # their seconds
    made_early: int = 0  # of them, made while the plain gradient compiled
    plain_s: float = 0.0  # the plain gradient's compile, in its thread
    #: the wall seconds of the rounds after it (of a round compiled beside it: the wait
    #: past it)
    compile_s: float = 0.0
    #: where each line goes as soon as it is said (standard error), besides `lines`
    echo: Callable | None = None

    def say(self, text: str) -> None:
        self.lines.append(text)
        if self.echo is not None:
            self.echo(text)

    def render(self) -> str:
        return "\n".join(self.lines)

    def timing(self) -> str:
        """Where the loop's time went (seconds: not part of the report, which stays the
        same from run to run)."""
        return (
            f"plain gradient's compile {self.plain_s:.1f} s; {self.made} plans made in "
            f"{self.made_s:.1f} s ({self.made_early} while it compiled); {self.compiles} "
            f"compiles in {self.rounds} rounds, {self.compile_s:.1f} s"
        )


def _figures(plans: list) -> tuple[int, int, int, int]:
    """(liveness with the plan, without, fused with, fused without) of the outermost plans
    (those of nested bodies where there is none), with what the plans of scan bodies add
    (`_scan_terms`)."""
    top = [p for p in plans if not p.nested] or plans
    after = sum(p.peak if p.peak is not None else p.bytes_after for p in top)
    before = sum(p.peak_before if p.peak_before is not None else p.bytes_before for p in top)
    fused = sum(p.device or 0 for p in top)
    fused_before = sum(p.device_before or 0 for p in top)
    if len(top) < len(plans):
        terms = [_scan_terms(p) for p in plans if p.nested]
        after += sum(t[0] for t in terms)
        before += sum(t[1] for t in terms)
        fused += sum(t[2] for t in terms)
        fused_before += sum(t[3] for t in terms)
    return after, before, fused, fused_before


def _scan_terms(p) -> tuple[int, int, int, int]:
    """What the plan `p` of a scan body (planned before the program holding it, `copies`
    iterations) adds to the outermost plan's figures, as `_figures` orders them.  The
    outermost plan counts the loop's stacked residuals as the body's plan left them (`copies`
    times its saved bytes) and sees neither the body's own peak nor, for the plain gradient,
    the residuals the body's plan recomputes: with the plan, its peak less those stacked
    bytes (the largest recomputed stretch of one iteration); without, the plain body's
    stacked bytes less them.  (A body run once, a call's, adds nothing: its results are the
    program's values.)"""
    if p.peak is None or p.peak_before is None or not p.bytes_before:
        return 0, 0, 0, 0
    copies = p.peak_before // p.bytes_before  # (`peak_before` is `copies * bytes_before`)
    if copies <= 1:
        return 0, 0, 0, 0
    stacked = copies * p.bytes_after
    fused = p.device if p.device is not None else p.peak
    fused_before = p.device_before if p.device_before is not None else p.peak_before
    return p.peak - stacked, p.peak_before - stacked, fused - stacked, fused_before - stacked


def fit_budget(
    build: Callable,
    spec: Spec,
    measure: Callable,
    flops: Callable,
    device_free: Callable | None = None,
    echo: Callable | None = None,
    prior: Calibration | None = None,
) -> tuple[object, list, Fit]:
    """(the program, its plans, the loop's report) for the budget `spec`, in XLA's temp
    bytes.  `build(spec, plans)` makes the gradient under a Spec (None: the plain one),
    `measure(program)` is XLA's temp bytes, or (XLA's temp bytes, XLA's FLOPs) (None where
    it runs out of the device's memory compiling it), `flops(program)` the tool's FLOP count,
    `device_free()` the bytes the device has free (for `--remat-budget device`), `prior`
    the device's model before any compile (`PRIORS`); each line of the report goes to
    `echo` as it is said."""
    plain = build(None, None)
    reduced = prior.reduced if prior is not None else 0.0
    loop = _Loop(build, spec, measure, flops, Fit(0, 0, echo=echo), reduced)
    pool = ThreadPoolExecutor(3)  # compile 0, and the first round where a prior picks it
    try:
        plain_temp, policies, pending = _while_compiling(loop, pool, plain, prior)
        fit = loop.fit
        fit.target = target = _target(spec, plain, plain_temp, device_free)
        fit.plain_temp = plain_temp or 0
        fit.say(
            f"remat budget in XLA's temp bytes: target {target} B; the plain gradient holds "
            + (
                f"{plain_temp} B on the device (compile 0)"
                if plain_temp is not None
                else "more than the device has: it does not compile there (compile 0)"
            )
        )
        plain_fits = plain_temp is not None and plain_temp <= target
        if plain_fits and not spec.on_device:
            return _plain_chosen(fit, plain, flops)
        if loop.plain_figures is None:
            raise JaxprError("--remat-budget: no plan could be made for the device model")
        loop.calibrate()
        if plain_fits and loop.plain_figures[1] <= target:
            # (on the device's own memory XLA may have fitted the plain gradient by
            # rematerializing on its own: it is taken only where the device model fits it)
            return _plain_chosen(fit, plain, flops)
        loop.rounds(policies, loop.collect(pending))
        rest = loop.checks(policies)
        if rest:
            loop.compile_all(rest)
        if loop.best() is None:  # the last resort: the candidate of the fewest bytes
            rest = [t for t in loop.tried if t.temp is None]
            if rest:
                loop.compile_all([min(rest, key=lambda t: (loop.cal.figure(t), t.flops))])
        return _choose(fit, loop.tried)
    finally:
        pool.shutdown(wait=True)


def _while_compiling(loop, pool, plain, prior):
    """Compile the plain gradient in `pool` and meanwhile make the policy plans and, given
    the device's `prior` model, the first round's budget plans, whose two picks compile
    beside it: (the plain gradient's XLA bytes, the policy plans, [(a pick, its compile's
    future)])."""
    spec = loop.spec
    compiling = pool.submit(_timed, loop.measure, plain)
    policies = [loop.make(f"--remat {n}", _policy_spec(spec, n)) for n in CANDIDATES]
    policies = [t for t in policies if t is not None]
    early = []
    if prior is not None and not spec.on_device and not (spec.fraction and spec.budget >= 1):
        early = loop.speculate(prior, policies)
    pending = [(t, pool.submit(loop.measure, t.program)) for t in early]
    loop.fit.made_early = loop.fit.made
    plain, loop.fit.plain_s = compiling.result()
    return _measured(plain)[0], policies, pending


def _timed(fn, *args):
    """(fn(*args), its seconds)."""
    t0 = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - t0


def _plain_chosen(fit: Fit, plain, flops):
    """The plain gradient itself (a plan saving every residual would add its roundings,
    `reduce_precision`, which XLA may hold beside it)."""
    fit.say("  the plain gradient fits: nothing recomputed")
    return _choose(fit, [Tried("plain gradient", plain, [], flops(plain), 0, 0, fit.plain_temp)])


def _ratio(fit: Fit, temp: int) -> str:
    """`temp` as a share of the plain gradient's XLA bytes, where those are known."""
    return f"{temp / fit.plain_temp:.3f}x the plain gradient's" if fit.plain_temp else "XLA"


def _target(spec: Spec, plain, plain_temp: int | None, device_free) -> int:
    if spec.on_device:
        return int(device_free(plain))
    if spec.fraction:
        if plain_temp is None:
            raise JaxprError(
                "--remat-budget: the plain gradient does not compile on the device (out of "
                "memory), so a fraction of its bytes means nothing: give the budget in bytes "
                "or `device`"
            )
        return int(spec.budget * plain_temp)
    return int(spec.budget)


def _policy_spec(spec: Spec, name: str) -> Spec:
    return Spec(
        policy=name,
        segments=spec.segments,
        dims=spec.dims,
        device_model=True,
        value_dropped=spec.value_dropped,
    )


class _Loop:
    """The candidates made so far, the calibration, and the compiles."""

    def __init__(self, build, spec: Spec, measure, flops, fit: Fit, reduced: float = 0.0):
        self.build, self.spec, self.measure, self.flops, self.fit = build, spec, measure, flops, fit
        #: the device's weight of a recomputed reduction's operand (its prior's, `PRIORS`),
        #: which no compile of the plain gradient can tell
        self.reduced = reduced
        self.tried: list[Tried] = []
        self.cal: Calibration | None = None
        #: model budget -> the candidate (None: the model cannot meet it)
        self.by_budget: dict[float, Tried | None] = {}
        self.seen: dict[tuple, Tried] = {}
        #: the plain gradient's (liveness, fused) figures, from the first plan made
        self.plain_figures: tuple[int, int] | None = None

    def make(self, label: str, s: Spec, budget: float | None = None) -> Tried | None:
        plans: list = []
        t0 = time.perf_counter()
        try:
            program = self.build(s, plans)
            f = self.flops(program)
        except JaxprError:  # the model cannot meet so tight a budget
            return None
        finally:
            self.fit.made += 1
            self.fit.made_s += time.perf_counter() - t0
        after, before, fused, fused_before = _figures(plans)
        if self.plain_figures is None:
            self.plain_figures = (before, fused_before)
        reduced = sum(p.device_reduced for p in plans)
        key = (after, fused, reduced, f)
        if key in self.seen:  # the same plan as another budget's
            return self.seen[key]
        t = Tried(label, program, plans, f, after, fused, budget=budget, reduced=reduced)
        self.seen[key] = t
        self.tried.append(t)
        return t

    def calibrate(self) -> None:
        """The model calibrated by the plain gradient's compile (XLA:TPU's fusions as they
        are where it did not compile: no compile to learn from)."""
        before, fused_before = self.plain_figures
        reduced = self.reduced
        if self.fit.plain_temp:
            self.cal = Calibration.from_plain(self.fit.plain_temp, before, fused_before, reduced)
        else:
            self.cal = Calibration(0.0, 1.0, reduced=reduced)
        self.fit.say(
            f"  calibration: the plain gradient's liveness figure {before} B, fused "
            f"{fused_before} B (element-wise residuals recomputed by XLA's fusions): the "
            f"device holds {self.cal.held:.2f} of the element-wise residuals' bytes, "
            f"scale {self.cal.scale:.3f}"
            + (
                f"; a recomputed reduction's operand weighs {reduced:.2f} of its bytes "
                "(the device's prior)"
                if reduced
                else ""
            )
        )

    def speculate(self, prior: Calibration, policies: list[Tried]) -> list[Tried]:
        """The first round's picks as they would be were the device's model `prior` and the
        plain gradient's XLA bytes its figure there (none where that fits the target): made, with
        the plans their searches make, while the plain gradient compiles, and compiled
        beside it; the plans made bracket the searches that follow.  Their planned figures
        are those of the calibrated model, said when they are reported."""
        if self.plain_figures is None:
            return []
        live, fused = self.plain_figures
        base = prior.figure(Tried("plain", None, [], 0, live, fused))
        target = self.spec.budget * base if self.spec.fraction else self.spec.budget
        if target >= base:
            return []
        self.cal, self.fit.target = prior, int(target)
        picks = []
        for aim in (AIM, AIM * ALTERNATIVE):
            t = self.pick(aim, policies)
            if t is not None and all(t is not p for p in picks):
                picks.append(t)
        for t in picks:  # (a pick picked twice had its prior's figure set again)
            t.planned = None
        self.cal, self.fit.target = None, 0
        return picks

    def collect(self, pending: list) -> list[Tried]:
        """Wait for the compiles `pending` (started beside the plain gradient's) and report
        them: the first round."""
        if not pending:
            return []
        t0 = time.perf_counter()
        temps = [_measured(future.result()) for _, future in pending]
        self.fit.compile_s += time.perf_counter() - t0
        self.fit.rounds += 1
        for (t, _), temp in zip(pending, temps):
            self.report(t, temp)
        return [t for t, _ in pending]

    def budget_plan(self, frac: float) -> Tried | None:
        frac = round(frac, 4)
        if frac not in self.by_budget:
            s = dataclasses.replace(
                self.spec, budget=frac, fraction=True, on_device=False, device_model=True
            )
            self.by_budget[frac] = self.make(f"model budget {frac:.4f}", s, frac)
        return self.by_budget[frac]

    def _bracket(self, goal: int):
        """From the budget plans made so far: (the loosest model budget whose figure is
        within `goal` and its plan, or None; the tightest budget looser than it whose figure
        is over `goal`, or None; the loosest the model could not meet, or 0)."""
        made = [(frac, t) for frac, t in self.by_budget.items() if t is not None]
        floor = max((frac for frac, t in self.by_budget.items() if t is None), default=0.0)
        under = max(
            ((frac, t) for frac, t in made if self.cal.figure(t) <= goal),
            key=lambda p: p[0],
            default=None,
        )
        over = min(
            (
                (frac, t)
                for frac, t in made
                if self.cal.figure(t) > goal and (under is None or frac > under[0])
            ),
            key=lambda p: p[0],
            default=None,
        )
        return under, over, floor

    def _next(self, goal: int, under, over, floor: float, base: float) -> float:
        """The next model budget to try: regula falsi between the bracket's plans, a secant
        step from the one side known (bisection where it leaves the bracket), `goal / base`
        with neither."""
        if under is None and over is None:
            return min(1.0, 1.5 * floor if floor else goal / max(1.0, base))
        lo = max(floor, under[0]) if under is not None else floor
        hi = over[0] if over is not None else 1.0
        if under is not None and over is not None:
            (fu, tu), (fo, to) = under, over
            gu, go = self.cal.figure(tu), self.cal.figure(to)
            nxt = fu + (fo - fu) * (goal - gu) / max(1, go - gu)
        else:
            frac, t = under or over
            nxt = frac * goal / max(1, self.cal.figure(t))
        if over is None:
            return min(1.0, nxt) if nxt > lo else (lo + 1.0) / 2
        # (a plan's figure is a step function of its budget: regula falsi would creep up
        # to a step from one side, so each try keeps a quarter of the bracket off its ends)
        edge = (hi - lo) / 4
        return min(hi - edge, max(lo + edge, nxt))

    def search(self, goal: int, base: float | None = None) -> Tried | None:
        """The budget plan of fewest FLOPs whose calibrated figure is at most `goal`: regula
        falsi between the plans made so far (any search's), `SEARCH_STEPS` new plans at
        most, until a plan within `SEARCH_CLOSE` of the goal, a bracket of 1% of the budget,
        or one whose plans' FLOPs differ by less than `STOP_GAIN / 2`; then `PAST_STEPS`
        budgets past the bracket (`_look_past`); `base`: the plain gradient's bytes (the
        first guess is the goal's share of them)."""
        base = base or self.fit.plain_temp or self.cal.scale * self.plain_figures[1]
        for _ in range(SEARCH_STEPS + 1):
            under, over, floor = self._bracket(goal)
            if under is not None:
                if under[0] >= 1.0 or self.cal.figure(under[1]) >= SEARCH_CLOSE * goal:
                    break
                # (no plan between the bracket's can save `STOP_GAIN` of the FLOPs)
                if over is not None and (
                    over[0] - under[0] < 0.01 * over[0]
                    or over[1].flops > (1 - STOP_GAIN / 2) * under[1].flops
                ):
                    break
            frac = round(self._next(goal, under, over, floor, base), 4)
            if frac in self.by_budget or frac <= floor:
                break
            self.budget_plan(frac)
        self._look_past(goal)
        within = [
            t for t in self.by_budget.values() if t is not None and self.cal.figure(t) <= goal
        ]
        return min(within, key=lambda t: (t.flops, self.cal.figure(t))) if within else None

    def _look_past(self, goal: int) -> None:
        """The plans of `PAST_STEPS` model budgets past the bracket's plan over `goal`, each
        1% looser than the last (the device figure is not monotone in the budget:
        `PAST_STEPS`)."""
        over = self._bracket(goal)[1]
        frac = over[0] if over is not None else 1.0
        for _ in range(PAST_STEPS):
            frac = round(frac * 1.01, 4)
            if frac >= 1.0:
                return
            self.budget_plan(frac)

    def pick(self, aim: float, policies: list[Tried]) -> Tried | None:
        """The candidate of fewest FLOPs (then bytes) whose calibrated figure is within
        `aim` times the target, compiled ones judged by XLA's figure."""
        goal = int(aim * self.fit.target)
        found = self.search(goal)
        pool = [t for t in (found, *policies) if t is not None]
        ok = [
            t
            for t in pool
            if (t.fits(self.fit.target) if t.temp is not None else self.cal.figure(t) <= goal)
        ]
        if not ok:
            return None
        best = min(ok, key=lambda t: (t.flops, self.cal.figure(t)))
        if best.temp is None:
            best.planned = self.cal.figure(best)
        return best

    def rounds(self, policies: list[Tried], first: list[Tried]) -> None:
        """The compile rounds: the first two plans at once (`first`, where they compiled
        beside the plain gradient), then one at a time while the stopping rule says another
        is worth its compile (module doc, step 4)."""
        overs = 0
        if first:
            self.correct(first)
            best = self.best(searched=True)
            if best is not None and not self.worth_another(best, policies):
                return
            overs += best is None
        while self.fit.compiles - self.fit.checked < MAX_COMPILES:
            aim = AIM if not overs else 0.99 * 0.97 ** (overs - 1)
            pick = self.pick(aim, policies)
            if pick is None or pick.temp is not None:  # nothing new to compile
                return
            batch = [pick]
            if not self.fit.compiles:  # the first round: a tighter plan compiled beside it
                alt = self.pick(aim * ALTERNATIVE, policies)
                if alt is not None and alt is not pick and alt.temp is None:
                    batch.append(alt)
            batch += self.checks(policies, batch)  # (at once with the search's round)
            self.compile_all(batch)
            self.correct(batch)
            best = self.best(searched=True)
            if best is not None and not self.worth_another(best, policies):
                return
            overs += best is None

    def checks(self, policies: list[Tried], beside: list[Tried] = ()) -> list[Tried]:
        """The policy plans not compiled yet whose figure (the model's now) fits the target
        and that could dominate the search's best plan or a pick `beside` which they would
        compile (the tool's FLOPs at most `CHECK_GAP` over one of theirs; any, where there
        is neither), marked as checks: candidates the loop compiles too (module doc, step 5)."""
        best = self.best(searched=True)
        ref = [t.flops for t in beside] + ([best.flops] if best is not None else [])
        out = [
            t
            for t in policies
            if t.temp is None
            and all(t is not b for b in beside)
            and self.cal.figure(t) <= self.fit.target
            and (not ref or t.flops <= (1 + CHECK_GAP) * max(ref))
        ]
        for t in out:
            t.check = True
        return out

    def worth_another(self, best: Tried, policies: list[Tried]) -> bool:
        """The stopping rule: whether the plan the corrected model picks now is new and
        recomputes at least `STOP_GAIN` fewer FLOPs than `best`, the best that fits."""
        nxt = self.pick(AIM, policies)
        gain = nxt is not None and nxt.temp is None and nxt.flops < (1 - STOP_GAIN) * best.flops
        if not gain and nxt is not None and nxt.temp is None:
            nxt.planned = None  # (not compiled: its figure is not a prediction said)
        return gain

    def compile_all(self, ts: list[Tried]) -> None:
        """Compile the candidates `ts`, at once (threads) when there are several."""
        t0 = time.perf_counter()
        if len(ts) == 1:
            temps = [_measured(self.measure(ts[0].program))]
        else:
            with ThreadPoolExecutor(len(ts)) as pool:
                temps = [_measured(m) for m in pool.map(lambda t: self.measure(t.program), ts)]
        self.fit.compile_s += time.perf_counter() - t0
        self.fit.rounds += 1
        for t, temp in zip(ts, temps):
            self.report(t, temp)

    def report(self, t: Tried, measured: tuple) -> None:
        """Record and say XLA's figures `measured` for `t` (`_measured`'s: temp None, out of
        the device's memory)."""
        temp, t.xla_flops = measured
        if t.planned is None:
            t.planned = self.cal.figure(t)
        self.fit.compiles += 1
        self.fit.checked += t.check
        head = f"  compile {self.fit.compiles}: {t.label}: planned {t.planned} B (calibrated), "
        if temp is None:  # out of the device's memory: over any target
            t.temp = max(self.fit.target + 1, int(OUT_OF_MEMORY * t.planned))
            t.out_of_memory = True
            self.fit.say(head + "XLA: out of the device's memory; over the target")
            return
        t.temp = temp
        self.fit.say(
            head + f"XLA {t.temp} B ({_ratio(self.fit, t.temp)}, "
            f"{t.temp / max(1, t.planned):.3f}x planned); "
            + ("fits" if t.fits(self.fit.target) else "over the target")
            + f"; {t.flops} FLOPs"
            + (f" (XLA {t.xla_flops:.0f})" if t.xla_flops is not None else "")
        )

    def correct(self, batch: list[Tried]) -> None:
        """Learn from the compiles: where the plain gradient's compile calibrated the scale,
        by value (`learn_weights`, from every plan compiled so far); else (it did not
        compile) the scale, by `batch` (`correct_scale`)."""
        if not self.fit.plain_temp:
            self.correct_scale(batch)
            return
        compiled = [
            t for t in self.tried if t.temp is not None and not t.out_of_memory and not t.check
        ]
        weights = learn_weights(self.cal, compiled)
        self.cal = dataclasses.replace(self.cal, weights=weights)
        extra = [w for k, w in weights.items() if w and ":" in k]
        said = f"{min(extra):+.2f} to {max(extra):+.2f}" if extra else "none"
        by_class = [f"{k} {w:+.2f}" for k, w in weights.items() if ":" not in k]
        self.fit.say(
            f"  learnt by value from {len(compiled)} compiles: {len(extra)} saved values "
            f"weighted, XLA's bytes beyond the scaled figure per byte {said}; by class "
            f"(a value no compile saved): {', '.join(by_class) or 'none'}"
        )

    def correct_scale(self, batch: list[Tried]) -> None:
        """Scale the calibration by XLA's figure over the model's for the budget plan of
        `batch` nearest the target (the pick where none is a budget plan: a policy plan's
        ratio says less about the budget plans next to be picked): all of it when that plan
        was over the target, half of it (geometrically) when under, as the ratio of a
        looser plan is another (XLA:CPU's jumps from 0.73x to 1.21x between two plans)."""
        own = [t for t in batch if t.budget is not None] or batch[:1]
        t = min(own, key=lambda t: abs(t.temp - self.fit.target))
        ratio = t.temp / max(1, self.cal.figure(t))
        if t.fits(self.fit.target):
            ratio = ratio**0.5
        self.cal = dataclasses.replace(self.cal, scale=self.cal.scale * ratio)
        self.fit.say(f"  correction: scale x{ratio:.3f} -> {self.cal.scale:.3f}")

    def best(self, searched: bool = False) -> Tried | None:
        """The best compiled plan that fits (`_best`); `searched`: of the search's picks alone,
        the checks left out (the stopping rule's)."""
        return _best([t for t in self.tried if not (searched and t.check)], self.fit.target)


def _best(tried: list[Tried], target: int) -> Tried | None:
    """Of the compiled plans that fit `target`, the one of fewest FLOPs (then bytes) of
    those no other dominates (`dominates`)."""
    fits = [t for t in tried if t.fits(target)]
    kept = [t for t in fits if not any(dominates(o, t) for o in fits)]
    return min(kept, key=lambda t: (t.flops, t.temp)) if kept else None


def _measured(out) -> tuple[int | None, float | None]:
    """(XLA's temp bytes, XLA's FLOPs or None) of what `measure` gave: the bytes alone, or
    both; None: out of the device's memory."""
    if isinstance(out, tuple):
        temp, fl = out
        return temp, (None if fl is None else float(fl))
    return out, None


def _say_dominated(fit: Fit, tried: list[Tried], best: Tried) -> None:
    """Say each fitting plan of fewer FLOPs than `best` (the tool's count) that was not
    chosen, because a compiled plan dominates it."""
    fits = [t for t in tried if t.fits(fit.target)]
    for t in sorted(fits, key=lambda t: (t.flops, t.temp)):
        if t.flops >= best.flops:
            return
        by = min(
            (o for o in fits if dominates(o, t)), key=lambda o: (o.temp, o.flops), default=None
        )
        if by is not None:
            fit.say(
                f"  set aside: {t.label} (XLA {t.temp} B, {_flops_said(t)}): {by.label} holds "
                f"no more (XLA {by.temp} B) and recomputes no more ({_flops_said(by)}, within "
                f"{100 * FLOPS_TOLERANCE:.2f}%)"
            )


def _flops_said(t: Tried) -> str:
    return f"XLA {t.xla_flops:.0f} FLOPs" if t.xla_flops is not None else f"{t.flops} FLOPs"


def _choose(fit: Fit, tried: list[Tried]):
    best = _best(tried, fit.target)
    if best is None:
        done = [t for t in tried if t.temp is not None]
        if not done:
            raise JaxprError(
                f"--remat-budget: XLA's temp bytes cannot be brought to {fit.target} B: no "
                f"plan the tool can make is planned near it; the plain gradient holds "
                f"{fit.plain_temp} B"
            )
        least = min(done, key=lambda t: t.temp)
        raise JaxprError(
            f"--remat-budget: XLA's temp bytes cannot be brought to {fit.target} B: the "
            f"least found is {least.temp} B ({least.label}) in {fit.compiles} compiles; the "
            f"plain gradient holds {fit.plain_temp} B"
        )
    fit.chosen = best
    _say_dominated(fit, tried, best)
    for p in best.plans:
        if not p.nested and fit.plain_temp:
            p.xla = (best.temp, fit.plain_temp)
            p.planned_device = best.planned
    fit.say(
        f"  chosen: {best.label}: XLA temp {best.temp} B "
        f"({_ratio(fit, best.temp)}), planned "
        f"{best.planned if best.planned is not None else best.temp} B (calibrated); "
        f"{best.flops} FLOPs; {fit.compiles} compiles beside the plain gradient's, "
        f"{fit.made} plans made"
    )
    return best.program, best.plans, fit
