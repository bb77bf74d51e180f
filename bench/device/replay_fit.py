"""The `--remat-budget` compile loop replayed on the CPU at the TPU script's sizes, against
the XLA:TPU temp bytes the chip measured (no chip, no compile): each plan the loop would
compile is looked up by its FLOPs in the figures of the TPU logs, and a plan the chip never
compiled stops the replay, saying so.  Each recorded plan gives the loop XLA's temp bytes
and XLA's FLOPs (`cost_analysis()`; None where no log kept them), as the TPU script's
`measure` does.  What a change to the loop (`ad/remat/fit.py`) does
to the TPU rows before a TPU session spends time on them.

    JAX_PLATFORMS=cpu python bench/device/replay_fit.py [--scan] BUDGET

Run it with the JAX of the TPU's logs (0.10: `.venv-floor` holds 0.10.0) so that the traced
jaxpr is the chip's: the model's figures then equal the logs' byte for byte.
"""

import dataclasses
import sys
from pathlib import Path

import jax

sys.path.insert(0, str(Path(__file__).parent))
import remat_tpu as R  # noqa: E402

from jaxprtool.ad import remat  # noqa: E402
from jaxprtool.ad.api import grad_jaxpr  # noqa: E402
from jaxprtool.ad.remat.fit import PRIORS, fit_budget  # noqa: E402
from jaxprtool.passes.registry import run_pipeline  # noqa: E402
from jaxprtool.text.parser import parse  # noqa: E402
from jaxprtool.ui.stats import flops  # noqa: E402

#: the plain gradient's XLA:TPU temp bytes, and each compiled plan's (XLA temp bytes, XLA
#: FLOPs) by the loop's FLOPs count (bench/device/results/remat_tpu_2026-12-06c/d_*.log,
#: 2026-12-07c_* and 2026-12-07d_*, TPU v5e, JAX 0.10.2: XLA's FLOPs from a row's line or a
#: `candidate:` line of the same temp bytes; a scan's XLA FLOPs count its body once)
UNROLLED = (
    2052174848,
    {
        3145823862784: (489430016, 3084528910336),
        3180166823936: (423837184, 3118901231616),
        3124361609216: (489752576, 3067336458240),
        3090018648064: (555345408, 3032964136960),
        2939745124352: (801810432, 2878315954176),
        2922569449472: (852109824, 2861127696384),
        2913983709184: (885567488, 2852529373184),
        2905397968896: (919638016, 2843931049984),
        3231685459968: (388823552, 3170461810688),  # nothing_saveable
        3158704570368: (424159744, 3101708779520),  # remat_tpu_2026-12-07c_unrolled.log
    },
)
SCAN = (
    6098817024,
    {
        2689869414400: (3534699008, 336635199488),
        2689903001600: (3266330624, 336639426560),
        2724766515200: (2580532736, 341034991616),
        2793519611904: (2026986496, 349612408832),
        2827812241408: (2060702208, 353957707776),
        2896498163712: (1993819136, 362556030976),
        2965184086016: (1792750080, 371154354176),
        2965217640448: (1758832640, 371133382656),
        3033870008320: (1567693312, 379731705856),
        3102555930624: (1448619008, 388329996288),
        3171241852928: (1400807424, 396928319488),
        3239927775232: (1292227072, 405526642688),
        3308647251968: (866760704, 414099800064),
        3171275407360: (1218952192, 396903153664),  # remat_tpu_2026-12-07c_scan_learnt.log
        2724229644288: (3167799808, None),  # remat_tpu_2026-12-07c_scan_learnt.log
        3239961329664: (1084702720, 405501476864),  # remat_tpu_2026-12-07d_scan.log
        # (3,102,555,930,624 FLOPs, above: the chip's 0.25 row of 2026-12-07g compiled model
        # budget 0.1880's plan of these FLOPs, another saved set, at 1,467,783,680 B)
        # remat_tpu_2026-12-07d_scan.log's 3,171,845,365,760 FLOPs: the same plan (model budget
        # 0.1615, its planned figure 32 KB apart), counted 8,192 FLOPs apart from JAX 0.10.0's jaxpr
        3171845357568: (1613210624, None),
        # the policies (remat_tpu_2026-12-07d_scan.log's rows): nothing_saveable,
        # dots_saveable, min-cut
        3309389234176: (987085824, 405568290816),
        2691484368896: (3259618816, 332725813248),
        2689903050752: (3263154688, 336639393792),
    },
)


def main(argv: list[str]) -> int:
    scan = "--scan" in argv
    (budget,) = [a for a in argv if a != "--scan"]
    sys.setrecursionlimit(10000)
    ps, x = jax.eval_shape(lambda k: R.init(k, 8, 1024, 512, 8), jax.random.PRNGKey(0))
    model = R.scanned(16) if scan else R.unrolled(16)
    f, leaves = R.flat(model, (jax.eval_shape(R.stack, ps), x) if scan else (ps, x))
    j = parse(str(jax.make_jaxpr(f)(*leaves)), "<bench>").jaxpr
    n = len(leaves)
    plain_temp, recorded = SCAN if scan else UNROLLED

    def build(s, plans):
        return run_pipeline(grad_jaxpr(j, list(range(n)), remat=s, plans=plans), "canonicalize")

    plain_flops = flops(build(None, None))

    def measure(g):
        f = flops(g)
        if f == plain_flops:
            return plain_temp
        if f not in recorded:
            print(f"the loop compiles a plan of {f} FLOPs, which the chip never compiled")
            raise SystemExit(1)
        return recorded[f]

    spec = remat.with_segments(remat.parse_budget(budget), "auto")
    spec = dataclasses.replace(spec, value_dropped=True)
    _, _, fit = fit_budget(build, spec, measure, flops, None, print, PRIORS["tpu"])
    c = fit.chosen
    print(f"chosen: {c.label}: XLA {c.temp} B, {c.flops} FLOPs (XLA {c.xla_flops})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
