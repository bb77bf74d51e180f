"""JAX's own derivatives of a program, for check-grad's precision report: `jax.jvp` and
`jax.vjp` of the program run as a JAX function (`jaxfn.as_jax_function`), in the program's
own precision and on the command's device, so that the tool's float32 derivative can be
set beside JAX's at the same point (both measured against the float64 one)."""

from __future__ import annotations


def jax_derivative(jaxpr, consts, args, diff, vec, outs_idx, kind: str) -> list:
    """kind "jvp": JAX's tangents of the outputs `outs_idx` along `vec` (one tangent per
    input of `diff`); kind "vjp": JAX's cotangents of the inputs `diff` for `vec` (one
    cotangent per output of `outs_idx`); kind "both": `vec` is the jvp's vectors followed by
    the vjp's, and the result the tangents followed by the cotangents, from one program (one
    XLA compile, the primal computed once).  numpy arrays."""
    import jax
    import numpy as np

    from . import _with_nested, get_device, sharding
    from .jaxfn import x64_scope
    from .jit_cache import shared_jit

    nested = _with_nested(jaxpr, consts)
    variant = sharding.run_variant("jax-" + kind, None, nested) + (tuple(diff), tuple(outs_idx))
    jitted = shared_jit(
        jaxpr, variant, lambda: jax.jit(_derivative(jaxpr, nested, diff, outs_idx, kind))
    )
    dev = get_device(sharding.CONFIG.platform)
    with x64_scope(jaxpr), jax.default_device(dev):
        put = lambda a: jax.device_put(a, dev)  # noqa: E731
        outs = jitted([put(c) for c in consts], [put(a) for a in args], [put(x) for x in vec])
        return [np.asarray(o) for o in outs]


def _derivative(jaxpr, nested: bool, diff, outs_idx, kind: str):
    """derivative(consts, args, vectors): JAX's jvp or vjp of the program (`jax_derivative`)."""
    import jax

    from .jaxfn import as_jax_function

    f = as_jax_function(jaxpr, None, enable_x64=False, nested=nested)

    def derivative(cs, xs, vs):
        def of_diff(*ds):
            full = list(xs)
            for i, d in zip(diff, ds):
                full[i] = d
            outs = f(*cs, *full)
            return [outs[j] for j in outs_idx]

        primals = [xs[i] for i in diff]
        if kind == "jvp":
            return jax.jvp(of_diff, primals, list(vs))[1]
        if kind == "both":
            tangents, cotangents = vs[: len(diff)], vs[len(diff) :]
            return jax.jvp(of_diff, primals, list(tangents))[1] + _pulled(
                of_diff, primals, cotangents
            )
        return _pulled(of_diff, primals, vs)

    return derivative


def _pulled(f, primals, cotangents) -> list:
    import jax

    _, pull = jax.vjp(f, *primals)
    return list(pull(list(cotangents)))
