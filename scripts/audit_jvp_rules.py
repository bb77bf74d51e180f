"""List the primitives JAX differentiates whose record has no JVP rule (issue 16's audit).

    PYTHONPATH=$PWD .venv/bin/python scripts/audit_jvp_rules.py

A primitive counts as differentiated by JAX when the installed JAX registers it in
`ad.primitive_jvps` or `ad.primitive_linearizations`; records with integer/boolean results
only need no rule (the JVP walk gives them no tangent), so the list is what is left to write.
"""

from __future__ import annotations

import jax  # noqa: F401
import jax._src.lax.control_flow  # noqa: F401
import jax._src.lax.fft  # noqa: F401
import jax._src.lax.linalg  # noqa: F401
import jax._src.lax.special  # noqa: F401
import jax.numpy  # noqa: F401
import jax.scipy  # noqa: F401
from jax._src.interpreters import ad

import jaxprtool  # noqa: F401  (installs the families' loader)
from jaxprtool.record import records


def main() -> None:
    jax_rules = {p.name for p in ad.primitive_jvps} | {p.name for p in ad.primitive_linearizations}
    recs = records()
    missing = sorted(n for n, r in recs.items() if r.jvp is None and n in jax_rules)
    print(f"{len(missing)} records without a JVP rule that JAX differentiates:")
    for n in missing:
        print(f"  {n} ({recs[n].family or 'no family'})")
    unknown = sorted(jax_rules - set(recs))
    print(f"{len(unknown)} primitives JAX differentiates that have no record: {' '.join(unknown)}")


if __name__ == "__main__":
    main()
