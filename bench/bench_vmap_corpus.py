"""vmap of the reference corpus's programs against JAX's: equation counts.

Each case of ../shared/jaxpr-format/generator/cases.py (JAXPR_FORMAT_DIR elsewhere) whose
function takes arrays is traced at its arguments; the tool batches that text with every
input at axis 0 (`vmap` with the commands' `canonicalize`), and JAX traces
`jax.vmap(f)` on the arguments broadcast to a batch.  Printed: the programs where the tool
has more equations than JAX (counts include nested jaxprs, JAX's read back from its text),
then how many programs were compared.  The corpus's functions are the project's own
reference code (its generator), imported as Python.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from jaxprtool.ad.batching import vmap_jaxpr  # noqa: E402
from jaxprtool.core import all_eqns  # noqa: E402
from jaxprtool.passes.registry import run_pipeline  # noqa: E402
from jaxprtool.text.parser import parse  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FORMAT_DIR = Path(os.environ.get("JAXPR_FORMAT_DIR", ROOT.parent / "shared" / "jaxpr-format"))
BATCH = 3


def count(jaxpr) -> int:
    return sum(1 for _ in all_eqns(jaxpr))


def traced_cases():
    """(name, f, args, printed text) of each case that traces `f` at plain arrays."""
    spec = importlib.util.spec_from_file_location("cases", FORMAT_DIR / "generator" / "cases.py")
    cases = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cases)
    seen = {}

    def recording(f, *a, **kw):
        def trace(*args, **kwargs):
            if not (a or kw or kwargs):
                seen.update(f=f, args=args)
            return jax.make_jaxpr(f, *a, **kw)(*args, **kwargs)

        return trace

    cases.mk = recording
    for name, fn, x64 in cases.CASES:
        seen.clear()
        if x64:
            continue
        try:
            text = str(fn())
        except Exception:  # noqa: BLE001  (a case this JAX cannot trace)
            continue
        args = seen.get("args")
        if args is None or len(jax.tree_util.tree_leaves(args)) != len(args):
            continue
        yield name, seen["f"], args, text


def main() -> int:
    if not (FORMAT_DIR / "generator" / "cases.py").is_file():
        print(f"the reference corpus is not at {FORMAT_DIR} (set JAXPR_FORMAT_DIR): nothing run")
        return 0
    compared, above = 0, []
    for name, f, args, text in traced_cases():
        try:
            batched = [jnp.broadcast_to(jnp.asarray(a), (BATCH, *jnp.shape(a))) for a in args]
            theirs = count(parse(str(jax.make_jaxpr(jax.vmap(f))(*batched))).jaxpr)
        except Exception:  # noqa: BLE001  (JAX cannot batch it, or its arguments are no arrays)
            continue
        try:
            ours = vmap_jaxpr(parse(text).jaxpr, [0] * len(args), 0, BATCH)
        except Exception as e:  # noqa: BLE001
            above.append((name, theirs, f"{type(e).__name__}: {str(e).splitlines()[0][:60]}"))
            continue
        compared += 1
        ours = count(run_pipeline(ours, "canonicalize"))
        if ours > theirs:
            above.append((name, theirs, ours))
    print(f"{'program':40} {'JAX eqns':>9} {'tool eqns':>9}")
    for name, theirs, ours in above:
        print(f"{name:40} {theirs:9d} {ours:>9}")
    print(
        f"\n{compared} programs batched; the tool has more equations than JAX (or fails) in {len(above)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
