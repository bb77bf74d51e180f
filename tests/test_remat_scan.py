"""`--remat POLICY` on programs with a scan saves what `jax.checkpoint(f, policy=...)` saves
(JAX's `saved_residuals`, as bytes and as the list of shapes): a stacked residual the policy
does not save is recomputed by running the scan again in the backward pass, as JAX's
`_scan_partial_eval_custom` does, and so is a jitted call or a cond holding one.  Over every
policy of docs/REMAT.md's list: a scan of dot/tanh layers over a stacked weight, a scan with a
checkpoint_name'd value, a scan inside a jitted call, a scan of residual blocks followed by
ordinary layers, a cond inside a scan (rerun too, as JAX's `_cond_partial_eval_custom` does;
the branch that does not offload fills the other's host residual with `empty2` in host
memory, as JAX's).
The gradients are jax.grad's, the equation counts no more than JAX's, and the linear
programs pass the dot-product test."""

from __future__ import annotations

import re

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax import ad_checkpoint as adc  # noqa: E402
from jax._src.ad_checkpoint import saved_residuals  # noqa: E402
from jax_oracle import close, policy_names_missing, run, together, vec  # noqa: E402
from test_remat_count import POLICIES, _count, _jax_count, _join  # noqa: E402

from jaxprtool.ad import remat  # noqa: E402
from jaxprtool.ad.api import linearize_jaxpr, transpose_jaxpr  # noqa: E402
from jaxprtool.ad.linearize import combine  # noqa: E402
from jaxprtool.text.parser import parse  # noqa: E402


def layers(W, x):
    def layer(c, w):
        return jnp.tanh(w @ c), None

    c, _ = jax.lax.scan(layer, x, W)
    return jnp.sum(c**2)


def named(x, ws):
    def layer(c, w):
        h = adc.checkpoint_name(jnp.tanh(c @ w), "h")
        g = adc.checkpoint_name(jnp.sin(h @ w.T), "g")
        return g * c, jnp.cos(h)

    c, ys = jax.lax.scan(layer, x, ws)
    return jnp.sum(c**2) + jnp.sum(ys * ys)


@jax.jit
def _scanned(W, x):
    def layer(c, w):
        return jnp.sin(w @ c), None

    return jax.lax.scan(layer, x, W)[0]


def jitted(W, x):
    return jnp.sum(jnp.tanh(_scanned(W, x)))


def then_layers(W, x, v1, v2):
    def layer(c, w):  # a residual block: the new carry adds a dot no residual reads
        return c + jnp.sin(w @ c) @ w, None

    c, _ = jax.lax.scan(layer, x, W)
    h = adc.checkpoint_name(jnp.sin(v1 @ c), "h")
    return jnp.sum(jnp.tanh(v2 @ h))


def cond_in_scan(x, w):
    def layer(c, w):
        c = jax.lax.cond(c[0] > 0, lambda c: jnp.tanh(w @ c), lambda c: jnp.sin(c), c)
        return c, None

    c, _ = jax.lax.scan(layer, x, jnp.stack([w, 0.5 * w]))
    return jnp.sum(c**2)


PROGRAMS = {
    "layers": (layers, (vec((5, 4, 4), 0), vec((4,), 1))),
    "named": (named, (vec((4, 8), 2), 0.5 * vec((3, 8, 8), 3))),
    "jitted": (jitted, (vec((5, 4, 4), 4), vec((4,), 5))),
    "cond_in_scan": (cond_in_scan, (vec((4,), 10), vec((4, 4), 11))),
    "then_layers": (then_layers, (vec((5, 4, 4), 6), vec((4,), 7), vec((6, 4), 8), vec((3, 6), 9))),
}

#: the outer program's plan on standard error: device bytes held, bytes offloaded
_HELD = re.compile(
    r"on the program: residual bytes held \d+ -> (\d+);[^;\n]*(?:; offloaded (\d+))?"
)


def _key(shape, dtype, host) -> tuple:
    return (tuple(int(d) for d in shape), str(dtype), bool(host))


def _jax_saved(f, policy, args) -> list[tuple]:
    """JAX's residuals, the arguments left out: (shape, dtype, in host memory), sorted."""
    out = []
    for a, why in saved_residuals(jax.checkpoint(f, policy=policy), *args):
        if not why.startswith("from the arg"):
            out.append(_key(a.shape, a.dtype, "<host>" in a.str_short()))
    return sorted(out)


def _bytes(saved) -> tuple[int, int]:
    dev = sum(int(np.prod(s)) * np.dtype(d).itemsize for s, d, h in saved if not h)
    host = sum(int(np.prod(s)) * np.dtype(d).itemsize for s, d, h in saved if h)
    return dev, host


def _ours_saved(primal, info) -> list[tuple]:
    """The residuals the tool's primal program returns (inputs and constants left out)."""
    n_out = len(info.out_mask)
    outs = list(primal.outvars[:n_out])
    new = list(primal.outvars[n_out:])
    src = {"output": outs, "new": new}
    saved = [src[r.source][r.index] for r in info.residuals if r.source in src]
    return sorted(_key(v.type.shape, v.type.np_dtype, v.type.memory_space == "host") for v in saved)


@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_saved_counts_and_values_against_jax(tmp_path, program):
    f, args = PROGRAMS[program]
    argnums = tuple(range(len(args)))
    path = tmp_path / "f.jaxpr"
    text = str(jax.make_jaxpr(f)(*args)) + "\n"
    path.write_text(text)
    j = parse(text, str(path)).jaxpr
    grads = {}  # by text: policies that give the same program run it once
    for policy_text, policy in POLICIES.items():
        want = _jax_saved(f, policy, args)
        spec = remat.with_segments(remat.parse_policy(policy_text), "none")
        primal, _, info = linearize_jaxpr(j, list(argnums), remat=spec)
        assert _ours_saved(primal, info) == want, policy_text
        out = tmp_path / "g.jaxpr"
        argv = ["grad", "--argnums", ",".join(map(str, argnums)), "--remat", policy_text]
        argv += ["--remat-segments", "none"]  # JAX's jax.checkpoint(f, policy)
        r = run([*argv, str(path), "-o", str(out)])
        if policy_names_missing(policy_text, path):  # JAX saves nothing for it; the tool refuses it
            assert r.exit_code == 2 and "no checkpoint_name" in r.output, r.output
            continue
        assert r.exit_code == 0, r.output
        (held,) = _HELD.findall(r.stderr)
        assert (int(held[0]), int(held[1] or 0)) == _bytes(want), policy_text
        ours = parse(out.read_text(), str(out)).jaxpr
        grads.setdefault(out.read_text(), ours)
        theirs = jax.make_jaxpr(jax.grad(jax.checkpoint(f, policy=policy), argnums=argnums))
        assert _count(ours) <= _jax_count(theirs(*args).jaxpr), policy_text
    grads = list(grads.values())
    got, want = together(
        (_join(grads), list(args) * len(grads)), (jax.grad(f, argnums=argnums), args)
    )  # (one compile)
    for k in range(len(grads)):
        for a, b in zip(got[k * len(args) : (k + 1) * len(args)], want):
            close(a, b, 1e-5)


#: the policies whose linear programs rerun a scan (or a call holding one)
RERUNS = ("dots_saveable", "offload_dot_with_no_batch_dims(device, pinned_host)")


def test_linear_programs_dot_product():
    """`linearize --remat` + `transpose` (the combined form, as the CLI pipes them): <w, L v>
    = <L^T w, v> for a scan and a jitted call holding one, under the policies that rerun its
    scan in the linear program (inside its one remat2 call) reading the saved (or offloaded)
    stacked values, and L v is jax.jvp's tangent.  One XLA compile for all of them."""
    jvps, vjps, inputs, oracles = [], [], [], []
    for name in ("named", "jitted"):
        f, args = PROGRAMS[name]
        j = parse(str(jax.make_jaxpr(f)(*args)), name).jaxpr
        v = [vec(a.shape, 30 + k) for k, a in enumerate(args)]
        oracle = len(oracles)  # (JAX's tangent, compiled with the programs below)
        oracles.append((lambda *a, f=f, v=v: jax.jvp(f, a, tuple(v))[1], args))
        for text in RERUNS:
            spec = remat.with_segments(remat.parse_policy(text), "none")  # the rerun
            primal, lin, info = linearize_jaxpr(j, list(range(len(args))), remat=spec)
            (call,) = [e for e in lin.eqns if e.prim == "remat2"]
            assert any(e.prim in ("scan", "jit") for e in call.params["jaxpr"].eqns), text
            jvp = combine(primal, lin, info)  # (x..., v...) -> (y, L v)
            n = len(args)
            jvps.append(jvp)
            vjps.append(transpose_jaxpr(jvp, [False] * n + [True] * n, [False, True]))
            inputs.append((args, v, oracle))
    w = np.float32(0.7)
    feed = [x for a, v, _ in inputs for x in (*a, *v)] + [x for a, _, _ in inputs for x in (*a, w)]
    got, *wants = together((_join(jvps + vjps), feed), *oracles)
    outs = iter(got)
    lvs = [[next(outs) for _ in j.outvars][1] for j in jvps]
    for lv, vjp, (_, v, oracle) in zip(lvs, vjps, inputs):
        close(lv, wants[oracle], 1e-4)
        ltw = [next(outs) for _ in vjp.outvars][1:]
        rhs = sum(float(np.vdot(np.float64(a), np.float64(b))) for a, b in zip(ltw, v))
        assert abs(float(lv) * float(w) - rhs) <= 1e-4 * max(1.0, abs(rhs))
