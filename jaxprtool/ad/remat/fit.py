"""A byte budget in the device's bytes: the compile loop of `--remat-budget` (issue 48).

With JAX present (and without `--no-xla`), `--remat-budget` speaks XLA's temp bytes on the
device asked (`--device`): a fraction is of the plain gradient's XLA temp bytes, a byte count
is XLA's temp bytes.  The planners speak the tool's liveness model; `fit_budget` plans
against the device's memory model instead (`device.py`), calibrated by the one compile the
loop needs anyway, and compiles as few plans as it can:

1. compiles the plain gradient (its XLA temp bytes X0: the target's base, and the
   calibration);
2. calibrates the model (`Calibration`): a plan's figure is
   `scale * (held * L + (1 - held) * F)` with L its liveness figure (`planned_peak`) and F
   its fused one (`device_bytes`: what is left when XLA's fusions recompute the element-wise
   residuals on their own); `held`, the share of element-wise residuals the device holds
   (0 on a TPU, about half on XLA:CPU), is where X0 lies between the plain gradient's F0
   and L0, and `scale` makes the plain gradient's figure X0;
3. picks, by the calibrated figures and without compiling, the plan of fewest FLOPs
   predicted to fit `AIM` times the target: the budget plan of the loosest model budget so
   predicted (a secant search over the model's budget, `SEARCH_STEPS` plans at most, none compiled) or a
   policy plan (nothing_saveable, dots_saveable, min-cut), and compiles it, with the pick
   at `ALTERNATIVE` times that aim beside it (two compiles at once, in threads);
4. where neither fits closely (`CLOSE_ENOUGH`), corrects the calibration by what XLA
   reported for the pick (its ratio to the figure), picks again and compiles once more:
   `PLANNED_COMPILES` compiles beyond the plain gradient's in all, in two compiles' wall
   time (the first two at once).  Only if no
   compiled plan fits yet does it go on (a tighter aim each time, `MAX_COMPILES` at most);
   of the compiled plans that fit, the one of fewest FLOPs (then fewest bytes) is the plan.

`--remat-budget device`: the target is the bytes the device has free for temporaries (its
`bytes_limit` less what the program's arguments and outputs take).  There the plain gradient
may not compile at all (`measure` gives None: out of memory; the model is then taken as
XLA:TPU's, uncalibrated), or XLA may have fitted it by rematerializing on its own
(`HloRematerialization`): it is taken as it is only where the device model says it fits too.

Nothing here imports JAX: the command hands in `measure(program) -> XLA's temp bytes`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

from ...core import JaxprError
from .request import Spec

#: the compiles of plans the loop is designed to spend (beyond the plain gradient's): two
#: at once in the first round (one compile's wall time), a third where neither landed
#: within `CLOSE_ENOUGH` of the target
PLANNED_COMPILES = 3
#: the most it spends when none of those fits
MAX_COMPILES = 5
#: the first pick aims at this share of the target (the calibrated model is within ~10%)
AIM = 0.97
#: the first round compiles, beside the pick, the pick at this share of its aim (in two
#: threads: XLA's compiles release the GIL), so that a pick just over the target has a plan
#: just under it without a second round
ALTERNATIVE = 0.95
#: a plan whose XLA temp bytes are at least this share of the target is close enough: the
#: loop does not loosen it
CLOSE_ENOUGH = 0.92
#: the plans (no compile) the search over the model's budget makes at most, per pick
SEARCH_STEPS = 8
#: the search stops at a plan whose calibrated figure is at least this share of its goal
SEARCH_CLOSE = 0.98
#: a plan that does not compile for lack of memory counts as this many times its planned
#: figure (the correction then aims lower)
OUT_OF_MEMORY = 1.25
#: the policy plans that are candidates beside the budget's
CANDIDATES = ("nothing_saveable", "dots_saveable", "min-cut")


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

    def fits(self, target: int) -> bool:
        return self.temp is not None and self.temp <= target


@dataclass
class Calibration:
    """The device model calibrated to XLA: `figure(t) = scale * (held*L + (1-held)*F)`."""

    held: float
    scale: float

    @staticmethod
    def from_plain(temp: int, liveness: int, fused: int) -> Calibration:
        span = liveness - fused
        held = min(1.0, max(0.0, (temp - fused) / span)) if span > 0 else 0.0
        base = held * liveness + (1 - held) * fused
        return Calibration(held, temp / max(1.0, base))

    def figure(self, t: Tried) -> int:
        return int(self.scale * (self.held * t.liveness + (1 - self.held) * t.fused))


@dataclass
class Fit:
    """What the loop did: the target, the plain gradient's figures, each compile."""

    target: int
    plain_temp: int
    lines: list[str] = field(default_factory=list)
    chosen: Tried | None = None
    compiles: int = 0  # of plans, beyond the plain gradient's
    #: where each line goes as soon as it is said (standard error), besides `lines`
    echo: Callable | None = None

    def say(self, text: str) -> None:
        self.lines.append(text)
        if self.echo is not None:
            self.echo(text)

    def render(self) -> str:
        return "\n".join(self.lines)


def _figures(plans: list) -> tuple[int, int, int, int]:
    """(liveness with the plan, without, fused with, fused without) of the outermost plans
    (those of nested bodies where there is none)."""
    top = [p for p in plans if not p.nested] or plans
    after = sum(p.peak if p.peak is not None else p.bytes_after for p in top)
    before = sum(p.peak_before if p.peak_before is not None else p.bytes_before for p in top)
    fused = sum(p.device or 0 for p in top)
    fused_before = sum(p.device_before or 0 for p in top)
    return after, before, fused, fused_before


def fit_budget(
    build: Callable,
    spec: Spec,
    measure: Callable,
    flops: Callable,
    device_free: Callable | None = None,
    echo: Callable | None = None,
) -> tuple[object, list, Fit]:
    """(the program, its plans, the loop's report) for the budget `spec`, in XLA's temp
    bytes.  `build(spec, plans)` makes the gradient under a Spec (None: the plain one),
    `measure(program)` is XLA's temp bytes (None where it runs out of the device's memory
    compiling it), `flops(program)` the tool's FLOP count,
    `device_free()` the bytes the device has free (for `--remat-budget device`); each line
    of the report goes to `echo` as it is said."""
    plain = build(None, None)
    plain_temp = measure(plain)  # None: it does not compile on the device (out of memory)
    target = _target(spec, plain, plain_temp, device_free)
    fit = Fit(target, plain_temp or 0, echo=echo)
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
    loop = _Loop(build, spec, measure, flops, fit)
    policies = [loop.make(f"--remat {name}", _policy_spec(spec, name)) for name in CANDIDATES]
    policies = [t for t in policies if t is not None]
    if loop.cal is None:
        raise JaxprError("--remat-budget: no plan could be made for the device model")
    if plain_fits and loop.plain_fused <= target:
        # (on the device's own memory XLA may have fitted the plain gradient by
        # rematerializing on its own: it is taken only where the device model fits it too)
        return _plain_chosen(fit, plain, flops)
    overs = 0
    while fit.compiles < MAX_COMPILES:
        aim = AIM if not overs else 0.99 * 0.97 ** (overs - 1)
        pick = loop.pick(aim, policies)
        if pick is None or pick.temp is not None:  # nothing new to compile
            break
        batch = [pick]
        if not fit.compiles:  # the first round: a tighter plan compiled beside it, at once
            alt = loop.pick(aim * ALTERNATIVE, policies)
            if alt is not None and alt is not pick and alt.temp is None:
                batch.append(alt)
        loop.compile_all(batch)
        if any(t.fits(target) and t.temp >= CLOSE_ENOUGH * target for t in batch):
            break
        if fit.compiles >= PLANNED_COMPILES and loop.best() is not None:
            break
        loop.correct(pick)
        overs += not pick.fits(target)
    if loop.best() is None:  # the last resort: the candidate of the fewest bytes
        rest = [t for t in loop.tried if t.temp is None]
        if rest:
            loop.compile(min(rest, key=lambda t: (loop.cal.figure(t), t.flops)))
    return _choose(fit, loop.tried)


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

    def __init__(self, build, spec: Spec, measure, flops, fit: Fit):
        self.build, self.spec, self.measure, self.flops, self.fit = build, spec, measure, flops, fit
        self.tried: list[Tried] = []
        self.cal: Calibration | None = None
        #: model budget -> the candidate (None: the model cannot meet it)
        self.by_budget: dict[float, Tried | None] = {}
        self.seen: dict[tuple, Tried] = {}
        self.plain_fused = 0  # the device model's figure for the plain gradient

    def make(self, label: str, s: Spec) -> Tried | None:
        plans: list = []
        try:
            program = self.build(s, plans)
        except JaxprError:  # the model cannot meet so tight a budget
            return None
        after, before, fused, fused_before = _figures(plans)
        f = self.flops(program)
        key = (after, fused, f)
        if key in self.seen:  # the same plan as another budget's
            return self.seen[key]
        t = self.seen[key] = Tried(label, program, plans, f, after, fused)
        self.tried.append(t)
        if self.cal is None:
            self.plain_fused = fused_before
            if self.fit.plain_temp:
                self.cal = Calibration.from_plain(self.fit.plain_temp, before, fused_before)
            else:  # no compile to learn from: XLA:TPU's fusions (the fused figure as it is)
                self.cal = Calibration(0.0, 1.0)
            self.fit.say(
                f"  calibration: the plain gradient's liveness figure {before} B, fused "
                f"{fused_before} B (element-wise residuals recomputed by XLA's fusions): the "
                f"device holds {self.cal.held:.2f} of the element-wise residuals' bytes, "
                f"scale {self.cal.scale:.3f}"
            )
        return t

    def budget_plan(self, frac: float) -> Tried | None:
        frac = round(frac, 4)
        if frac not in self.by_budget:
            s = dataclasses.replace(
                self.spec, budget=frac, fraction=True, on_device=False, device_model=True
            )
            self.by_budget[frac] = self.make(f"model budget {frac:.4f}", s)
        return self.by_budget[frac]

    def search(self, goal: int) -> Tried | None:
        """The budget plan of the loosest model budget whose calibrated figure is at most
        `goal` (secant steps, then bisection between the loosest under and the tightest
        over), `SEARCH_STEPS` plans at most."""
        under: tuple[float, Tried] | None = None
        over: float | None = None
        floor = 0.0  # the loosest budget the model could not meet
        base = self.fit.plain_temp or self.cal.scale * self.plain_fused
        frac = min(1.0, goal / max(1, base))
        for _ in range(SEARCH_STEPS):
            t = self.budget_plan(frac)
            if t is None:
                floor = max(floor, frac)
                nxt = (frac + over) / 2 if over is not None else min(1.0, frac * 1.5)
            else:
                fig = self.cal.figure(t)
                if fig <= goal:
                    if under is None or frac > under[0]:
                        under = (frac, t)
                    if frac >= 1.0 or fig >= SEARCH_CLOSE * goal:
                        break
                else:
                    over = frac if over is None else min(over, frac)
                nxt = frac * goal / max(1, fig)
                lo = max(floor, under[0] if under else 0.0)
                if not (lo < nxt < (over if over is not None else 1.0 + 1e-9)):
                    nxt = (lo + (over if over is not None else 1.0)) / 2
            nxt = min(1.0, nxt)
            if abs(nxt - frac) < 2e-4 or (
                over is not None and under and over - under[0] < 0.01 * over
            ):
                break
            frac = nxt
        return under[1] if under else None

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

    def compile_all(self, ts: list[Tried]) -> None:
        """Compile the candidates `ts`, at once (threads) when there are several."""
        if len(ts) == 1:
            return self.compile(ts[0])
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(len(ts)) as pool:
            temps = list(pool.map(lambda t: self.measure(t.program), ts))
        for t, temp in zip(ts, temps):
            self.compile(t, temp)

    def compile(self, t: Tried, temp=-1) -> None:
        """Compile `t` (unless its XLA figure `temp` is given) and report it."""
        temp = self.measure(t.program) if temp == -1 else temp
        if t.planned is None:
            t.planned = self.cal.figure(t)
        self.fit.compiles += 1
        head = f"  compile {self.fit.compiles}: {t.label}: planned {t.planned} B (calibrated), "
        if temp is None:  # out of the device's memory: over any target
            t.temp = max(self.fit.target + 1, int(OUT_OF_MEMORY * t.planned))
            self.fit.say(head + "XLA: out of the device's memory; over the target")
            return
        t.temp = temp
        self.fit.say(
            head + f"XLA {t.temp} B ({_ratio(self.fit, t.temp)}, "
            f"{t.temp / max(1, t.planned):.3f}x planned); "
            + ("fits" if t.fits(self.fit.target) else "over the target")
            + f"; {t.flops} FLOPs"
        )

    def correct(self, t: Tried) -> None:
        """Scale the calibration by XLA's figure for `t` over the model's: all of it when
        `t` was over the target, half of it (geometrically) when under, as the ratio of a
        looser plan is another (XLA:CPU's jumps from 0.73x to 1.21x between two plans)."""
        ratio = t.temp / max(1, self.cal.figure(t))
        if t.fits(self.fit.target):
            ratio = ratio**0.5
        self.cal = Calibration(self.cal.held, self.cal.scale * ratio)
        self.fit.say(f"  correction: scale x{ratio:.3f} -> {self.cal.scale:.3f}")

    def best(self) -> Tried | None:
        return _best(self.tried, self.fit.target)


def _best(tried: list[Tried], target: int) -> Tried | None:
    fits = [t for t in tried if t.fits(target)]
    return min(fits, key=lambda t: (t.flops, t.temp)) if fits else None


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
    for p in best.plans:
        if not p.nested and fit.plain_temp:
            p.xla = (best.temp, fit.plain_temp)
            p.planned_device = best.planned
    fit.say(
        f"  chosen: {best.label}: XLA temp {best.temp} B "
        f"({_ratio(fit, best.temp)}), planned "
        f"{best.planned if best.planned is not None else best.temp} B (calibrated); "
        f"{best.flops} FLOPs; {fit.compiles} compiles beside the plain gradient's"
    )
    return best.program, best.plans, fit
