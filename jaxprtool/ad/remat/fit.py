"""A byte budget in the device's bytes: the compile loop of `--remat-budget` (issue 48).

With JAX present (and without `--no-xla`), `--remat-budget` speaks XLA's temp bytes on the
device asked (`--device`): a fraction is of the plain gradient's XLA temp bytes, a byte count
is XLA's temp bytes.  The planners (this package) speak the tool's liveness model, which
XLA's compilers undercut (XLA:TPU's fusions recompute element-wise residuals on their own)
or exceed; `fit_budget` therefore

1. compiles the plain gradient, whose XLA temp bytes over the model's figure for it calibrate
   the model to the device (`Fit.scale`): the first plan is made at the budget so scaled,
   already close before its first compile;
2. compiles each plan and tightens (or loosens) the model's budget by what XLA reported, a
   secant step towards the target, then bisection between the loosest model budget that
   fitted and the tightest that did not, at most `MAX_COMPILES` compiles, each reported;
3. takes JAX's policies (nothing_saveable, dots_saveable) and min-cut as candidates too, each
   compiled only when it recomputes fewer FLOPs than the best plan found (else it cannot do
   better on both counts) and its planned figure is within `PRUNE` times the target: of the
   candidates whose XLA temp bytes fit, the one of fewest FLOPs (then fewest bytes) is the
   plan.  A plan the loop made before (the same model figure and FLOPs) is not compiled
   again.

`--remat-budget device`: the target is the bytes the device has free for temporaries (its
`bytes_limit` less what the program's arguments and outputs take).

Nothing here imports JAX: the command hands in `measure(program) -> XLA's temp bytes`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

from ...core import JaxprError
from .request import Spec

#: the compiles the loop may spend on budget plans (the plain gradient's and the policies'
#: are not counted)
MAX_COMPILES = 5
#: a plan whose XLA temp bytes are at least this share of the target is close enough: the
#: loop stops loosening there
CLOSE_ENOUGH = 0.92
#: the policy plans that are candidates beside the budget's
CANDIDATES = ("nothing_saveable", "dots_saveable", "min-cut")
#: a policy plan whose planned figure (the model's, calibrated to the device) exceeds the
#: target this many times over is not compiled
PRUNE = 1.5


@dataclass
class Tried:
    """One compiled candidate."""

    label: str
    program: object
    plans: list
    temp: int
    flops: int
    planned: int | None  # the model's figure (planned peak or bytes held), scaled

    def fits(self, target: int) -> bool:
        return self.temp <= target


@dataclass
class Fit:
    """What the loop did: the target, the plain gradient's figures, each compile."""

    target: int
    plain_temp: int
    plain_model: int
    lines: list[str] = field(default_factory=list)
    chosen: Tried | None = None
    #: where each line goes as soon as it is said (standard error), besides `lines`
    echo: Callable | None = None

    @property
    def scale(self) -> float:
        """XLA's temp bytes per byte of the model's figure (the plain gradient's)."""
        return self.plain_temp / max(1, self.plain_model)

    def say(self, text: str) -> None:
        self.lines.append(text)
        if self.echo is not None:
            self.echo(text)

    def render(self) -> str:
        return "\n".join(self.lines)


def _model_figure(plans: list) -> tuple[int, int]:
    """(the model's figure with the plan, without): the outermost plan's planned peak where
    it has a peak model, else its residual bytes held."""
    top = [p for p in plans if not p.nested] or plans
    after = sum(p.peak if p.peak is not None else p.bytes_after for p in top)
    before = sum(p.peak_before if p.peak_before is not None else p.bytes_before for p in top)
    return after, before


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
    `measure(program)` is XLA's temp bytes, `flops(program)` the tool's FLOP count,
    `device_free()` the bytes the device has free (for `--remat-budget device`); each line
    of the report goes to `echo` as it is said."""
    plain = build(None, None)
    plain_temp = measure(plain)
    if spec.on_device:
        target = int(device_free(plain))
    elif spec.fraction:
        target = int(spec.budget * plain_temp)
    else:
        target = int(spec.budget)
    fit = Fit(target, plain_temp, 0, echo=echo)
    fit.say(
        f"remat budget in XLA's temp bytes: target {target} B; the plain gradient holds "
        f"{plain_temp} B on the device"
    )
    tried: list[Tried] = []
    if plain_temp <= target:  # the plain gradient itself: a plan saving every residual
        # would add its roundings (reduce_precision), which XLA may hold beside it
        tried.append(Tried("plain gradient", plain, [], plain_temp, flops(plain), None))
        fit.say("  the plain gradient fits: nothing recomputed")
        return _choose(fit, tried)
    seen: dict[tuple, Tried] = {}  # (the model's figure, FLOPs) -> the plan measured

    def attempt(label, s, policy=False):
        plans: list = []
        try:
            program = build(s, plans)
        except JaxprError:  # the model cannot meet so tight a budget
            return None
        after, before = _model_figure(plans)
        if not fit.plain_model:  # the calibration: the plain gradient's model figure
            fit.plain_model = before
            fit.say(
                f"  the tool's model holds {before} B for the plain gradient: "
                f"{fit.scale:.3f} device bytes per byte of it"
            )
        f = flops(program)
        planned = int(after * fit.scale)
        best = _best(tried, target)
        if policy and best is not None and f >= best.flops:
            return None  # recomputes no less than the best: it cannot beat it on both counts
        if policy and planned > PRUNE * target:
            fit.say(f"  {label}: planned {planned} B, far over the target: not compiled")
            return None
        same = seen.get((after, f))
        temp = same.temp if same is not None else measure(program)
        t = seen[(after, f)] = Tried(label, program, plans, temp, f, planned)
        tried.append(t)
        how = f"the plan of {same.label} again" if same is not None else f"compile {len(seen)}"
        fit.say(
            f"  {how}: {label}: planned {t.planned} B, XLA {t.temp} B "
            f"({t.temp / max(1, plain_temp):.3f}x the plain gradient's); "
            + ("fits" if t.fits(target) else "over the target")
            + f"; {t.flops} FLOPs"
        )
        return t

    _search(attempt, spec, fit, target)
    for name in CANDIDATES:
        attempt(f"--remat {name}", Spec(policy=name, segments=spec.segments, dims=spec.dims), True)
    return _choose(fit, tried)


def _search(attempt, spec: Spec, fit: Fit, target: int) -> None:
    """Model budgets (fractions of the model's plain figure) tried until one's XLA temp
    bytes fit the target closely enough, `MAX_COMPILES` compiles at most: the first at the
    target's share of the plain gradient's XLA bytes, then a secant step by the ratio XLA
    gave, then bisection between the loosest that fitted and the tightest that did not.  A
    model budget the model cannot meet costs no compile: the next is looser."""
    frac = min(1.0, target / max(1, fit.plain_temp))
    fitted: float | None = None  # the loosest model budget whose XLA bytes fitted
    over: float | None = None  # the tightest whose XLA bytes were over the target
    floor: float | None = None  # the loosest the model could not meet
    compiles = unmet = 0
    while compiles < MAX_COMPILES and unmet < 2 * MAX_COMPILES:
        s = dataclasses.replace(spec, budget=frac, fraction=True, on_device=False)
        t = attempt(f"model budget {frac:.3f}", s)
        if t is None:
            unmet += 1
            floor = frac if floor is None else max(floor, frac)
        else:
            compiles += 1
            if t.fits(target):
                fitted = frac if fitted is None else max(fitted, frac)
                if t.temp >= CLOSE_ENOUGH * target or frac >= 1.0:
                    return
            else:
                over = frac if over is None else min(over, frac)
        if fitted is not None and over is not None:
            if over - fitted < 0.01 * over:
                return
            nxt = (fitted + over) / 2
        elif t is None:  # looser, towards the tightest that was over
            nxt = frac * 1.25 if over is None else (frac + over) / 2
        else:  # a secant step by the ratio XLA gave (a little under it)
            nxt = frac * target / max(1, t.temp) * (1.0 if t.fits(target) else 0.97)
            if floor is not None and nxt <= floor:  # below what the model can meet
                if over is not None and over - floor < 0.01 * over:
                    return
                nxt = (floor + frac) / 2
        nxt = min(1.0, nxt)
        if abs(nxt - frac) < 1e-3 * frac:
            return
        frac = nxt


def _best(tried: list[Tried], target: int) -> Tried | None:
    fits = [t for t in tried if t.fits(target)]
    return min(fits, key=lambda t: (t.flops, t.temp)) if fits else None


def _choose(fit: Fit, tried: list[Tried]):
    best = _best(tried, fit.target)
    if best is None and not tried:
        raise JaxprError(
            f"--remat-budget: XLA's temp bytes cannot be brought to {fit.target} B: no plan "
            f"the tool can make is planned near it; the plain gradient holds {fit.plain_temp} B"
        )
    if best is None:
        least = min(tried, key=lambda t: t.temp)
        raise JaxprError(
            f"--remat-budget: XLA's temp bytes cannot be brought to {fit.target} B: the "
            f"least found is {least.temp} B ({least.label}) in {len(tried)} compiles; the "
            f"plain gradient holds {fit.plain_temp} B"
        )
    fit.chosen = best
    for p in best.plans:
        if not p.nested:
            p.xla = (best.temp, fit.plain_temp)
    fit.say(
        f"  chosen: {best.label}: XLA temp {best.temp} B "
        f"({best.temp / max(1, fit.plain_temp):.3f}x the plain gradient's), planned "
        f"{best.planned if best.planned is not None else best.temp} B; {best.flops} FLOPs"
    )
    return best.program, best.plans, fit
