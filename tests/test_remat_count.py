"""`grad --remat POLICY` emits no more equations than JAX's
`jax.make_jaxpr(jax.grad(jax.checkpoint(f, policy=...)))` (counted recursively in both), for
every policy of docs/REMAT.md's `--remat` list on an MLP, a program with checkpoint_name'd values
and a scan; its values are jax.grad's, its residual bytes (device and host) JAX's
`saved_residuals`; the recomputation is in one remat2 call per backward program, the
offloaded values copied back inside it; the linear programs pass the dot-product test."""

from __future__ import annotations

import re

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax import ad_checkpoint as adc  # noqa: E402
from jax._src.ad_checkpoint import saved_residuals  # noqa: E402
from jax.extend.core import jaxprs_in_params  # noqa: E402
from jax_oracle import close, policy_names_missing, run, together, vec  # noqa: E402

from jaxprtool import backend  # noqa: E402
from jaxprtool.ad import remat  # noqa: E402
from jaxprtool.ad.api import linearize_jaxpr, transpose_jaxpr  # noqa: E402
from jaxprtool.core import Jaxpr, eqn_subjaxprs  # noqa: E402
from jaxprtool.text.parser import parse  # noqa: E402

cp = jax.checkpoint_policies


def mlp(x, w1, w2, w3):
    for w in (w1, w2, w3):
        x = jnp.tanh(x @ w)
    return jnp.sum(x)


def named(x, w1, w2):
    h = adc.checkpoint_name(jnp.sin(x @ w1), "h")
    g = adc.checkpoint_name(jnp.tanh(h @ w2), "g")
    return jnp.sum(jnp.cos(g) * jnp.sum(h))


def scanned(x, ws):
    def layer(c, w):
        h = adc.checkpoint_name(jnp.tanh(c @ w), "h")
        return jnp.sin(h @ w.T) * c, None

    c, _ = jax.lax.scan(layer, x, ws)
    return jnp.sum(c**2)


PROGRAMS = {
    "mlp": (mlp, (vec((4, 8), 0), vec((8, 8), 1), vec((8, 8), 2), vec((8, 8), 3))),
    "named": (named, (vec((4, 8), 4), vec((8, 8), 5), vec((8, 8), 6))),
    "scan": (scanned, (vec((4, 8), 7), 0.5 * vec((3, 8, 8), 8))),
}

#: docs/REMAT.md's --remat list: the tool's text -> JAX's policy
POLICIES = {
    "everything_saveable": cp.everything_saveable,
    "nothing_saveable": cp.nothing_saveable,
    "dots_saveable": cp.dots_saveable,
    "dots_with_no_batch_dims_saveable": cp.dots_with_no_batch_dims_saveable,
    "save_only_these_names=h": cp.save_only_these_names("h"),
    "save_any_names_but_these=h": cp.save_any_names_but_these("h"),
    "offload_dot_with_no_batch_dims(device, pinned_host)": cp.offload_dot_with_no_batch_dims(
        "device", "pinned_host"
    ),
    "save_and_offload_only_these_names(names_which_can_be_saved=[g], "
    "names_which_can_be_offloaded=[h], offload_src=device, offload_dst=pinned_host)": (
        cp.save_and_offload_only_these_names(
            names_which_can_be_saved=["g"],
            names_which_can_be_offloaded=["h"],
            offload_src="device",
            offload_dst="pinned_host",
        )
    ),
}


def _jax_count(j) -> int:
    """JAX's equations, those of every body (each occurrence) included."""
    return sum(1 + sum(_jax_count(s) for s in jaxprs_in_params(e.params)) for e in j.eqns)


def _jax_rounds(j) -> int:
    return sum(
        (e.primitive.name == "reduce_precision")
        + sum(_jax_rounds(s) for s in jaxprs_in_params(e.params))
        for e in j.eqns
    )


def _rounds(j) -> int:
    return sum(
        (e.prim == "reduce_precision") + sum(_rounds(s) for s in eqn_subjaxprs(e)) for e in j.eqns
    )


def _count(j) -> int:
    return sum(1 + sum(_count(s) for s in eqn_subjaxprs(e)) for e in j.eqns)


def _bodies(j):
    """`j` and every body in it, each occurrence, with whether it is a remat2 call's."""
    yield j, False
    for e in j.eqns:
        for s in eqn_subjaxprs(e):
            for b, in_remat in _bodies(s):
                yield b, in_remat or e.prim == "remat2"


def _jax_bytes(f, policy, args) -> tuple[int, int]:
    """(device, host) bytes of JAX's residuals, the arguments left out."""
    dev = host = 0
    for a, why in saved_residuals(jax.checkpoint(f, policy=policy), *args):
        if not why.startswith("from the arg"):
            n = a.size * a.dtype.itemsize
            if "<host>" in a.str_short():
                host += n
            else:
                dev += n
    return dev, host


#: the outer program's plan on standard error: device bytes held, bytes offloaded
_HELD = re.compile(
    r"on the program: residual bytes held \d+ -> (\d+);[^;\n]*(?:; offloaded (\d+))?"
)


def _join(js):
    """The programs side by side in one (one XLA compile): their inputs, then their
    results, one after the other."""
    return Jaxpr(
        (),
        tuple(v for j in js for v in j.invars),
        tuple(e for j in js for e in j.eqns),
        tuple(v for j in js for v in j.outvars),
    )


@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_grad_counts_values_and_residuals_against_jax(tmp_path, program):
    f, args = PROGRAMS[program]
    argnums = tuple(range(len(args)))
    path = tmp_path / "f.jaxpr"
    path.write_text(str(jax.make_jaxpr(f)(*args)) + "\n")
    grads = {}  # by text: policies that give the same program run it once
    for text, policy in POLICIES.items():
        out = tmp_path / "g.jaxpr"
        argv = ["grad", "--argnums", ",".join(map(str, argnums)), "--remat", text]
        argv += ["--remat-segments", "none"]  # JAX's jax.checkpoint(f, policy)
        r = run([*argv, str(path), "-o", str(out)])
        if policy_names_missing(text, path):  # JAX saves nothing for it; the tool refuses it
            assert r.exit_code == 2 and "no checkpoint_name" in r.output, r.output
            continue
        assert r.exit_code == 0, r.output
        ours = parse(out.read_text(), str(out)).jaxpr
        grads.setdefault(out.read_text(), ours)
        theirs = jax.make_jaxpr(jax.grad(jax.checkpoint(f, policy=policy), argnums=argnums))
        theirs = theirs(*args).jaxpr
        assert _count(ours) <= _jax_count(theirs), text
        # the saved values rounded to their precision, as JAX's partial evaluation rounds them
        assert _rounds(ours) == _jax_rounds(theirs), text
        # what is saved: JAX's bytes, on the device and on the host
        (held,) = _HELD.findall(r.stderr)
        assert (int(held[0]), int(held[1] or 0)) == _jax_bytes(f, policy, args), text
        for body, in_remat in _bodies(ours):
            assert sum(e.prim == "remat2" for e in body.eqns) <= 1, text
            back = [e for e in body.eqns if e.prim == "device_put" and "Device" in str(e.params)]
            assert in_remat or not back, f"{text}: a copy back outside the remat2 call"
    grads = list(grads.values())
    got, want = together(
        (_join(grads), list(args) * len(grads)), (jax.grad(f, argnums=argnums), args)
    )  # (one compile)
    for k in range(len(grads)):
        for a, b in zip(got[k * len(args) : (k + 1) * len(args)], want):
            close(a, b, 1e-5)


def test_linear_program_dot_product():
    """<w, L v> = <L^T w, v> on the linear programs whose one remat2 call copies back and
    recomputes (the offload policies, nothing_saveable), and their values are the plain
    linearization's.  Every program in one XLA compile."""
    f, args = PROGRAMS["named"]
    j = parse(str(jax.make_jaxpr(f)(*args)), "<jax>").jaxpr
    argnums = list(range(len(args)))
    specs = [
        remat.with_segments(remat.parse_policy(t), "none")
        for t in POLICIES
        if "offload" in t or t[0] == "n"
    ]
    forms = []
    for spec in [*specs, None]:
        forms.append(linearize_jaxpr(j, argnums, remat=spec))
    assert all(sum(e.prim == "remat2" for e in lin.eqns) == 1 for _, lin, _ in forms[:-1])
    v = [vec(a.shape, 20 + k) for k, a in enumerate(args)]
    lts = [
        transpose_jaxpr(lin, [False] * len(info.residuals) + [True] * len(v))
        for _, lin, info in forms[:-1]
    ]
    fn = lambda j: backend.as_jax_function(j, enable_x64=False)  # noqa: E731
    primals = [fn(primal) for primal, _, _ in forms]
    linears = [fn(lin) for _, lin, _ in forms]
    transposes = [fn(lt) for lt in lts]

    def run(args, v, w):  # (each primal's residuals feed its linear and transposed programs)
        lvs, ltws = [], []
        for (_, _, info), primal, linear, lt in zip(forms, primals, linears, [*transposes, None]):
            got = list(primal(*args))
            n_out = len(info.out_mask)
            src = {"input": list(args), "output": got[:n_out], "new": got[n_out:]}
            res = [src[r.source][r.index] for r in info.residuals]
            lvs.append(linear(*res, *v)[0])
            if lt is not None:
                ltws.append(list(lt(*res, w)))
        return lvs, ltws

    w = np.float32(0.7)
    lvs, ltws = jax.jit(run)(list(args), v, w)
    for lv, ltw in zip(lvs[:-1], ltws):
        close(lv, lvs[-1], 1e-5)
        rhs = sum(float(np.vdot(np.float64(a), np.float64(b))) for a, b in zip(ltw, v))
        assert abs(float(lv) * float(w) - rhs) <= 1e-4 * max(1.0, abs(rhs))
