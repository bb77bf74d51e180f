"""`--remat` offload policies (offload_dot_with_no_batch_dims, save_and_offload_only_these_names,
save_from_both_policies): gradients against `jax.grad(jax.checkpoint(f, policy=...))`, the
offloaded residuals and the `device_put` copies against JAX's printout of the same gradient,
residual bytes (device and host) against JAX's `saved_residuals`, scan bodies, `memory`, the
device_put shape rule on JAX's text, and the refusals."""

from __future__ import annotations

import functools
import re

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax import ad_checkpoint as adc  # noqa: E402
from jax._src.ad_checkpoint import saved_residuals  # noqa: E402
from jax_oracle import close, ir, run, together, vec  # noqa: E402

from jaxprtool import backend  # noqa: E402
from jaxprtool.ad import remat  # noqa: E402
from jaxprtool.ad.api import grad_jaxpr, linearize_jaxpr  # noqa: E402
from jaxprtool.core import JaxprError, all_eqns  # noqa: E402
from jaxprtool.memory import residual_bytes  # noqa: E402
from jaxprtool.shapes import infer_types  # noqa: E402
from jaxprtool.text.parser import parse  # noqa: E402
from jaxprtool.text.printer import print_jaxpr  # noqa: E402

cp = jax.checkpoint_policies


def mlp(w1, w2, x):
    h = adc.checkpoint_name(jnp.tanh(x @ w1), "h")
    g = adc.checkpoint_name(jnp.sin(h @ w2), "g")
    return jnp.sum(jnp.tanh(g) * h[:, :3])


ARGS = (0.5 * vec((4, 6), 0), 0.5 * vec((6, 3), 1), vec((5, 4), 2))
ARGNUMS = (0, 1, 2)

#: the tool's --remat text -> JAX's policy
POLICIES = {
    "offload_dot_with_no_batch_dims(device, pinned_host)": cp.offload_dot_with_no_batch_dims(
        "device", "pinned_host"
    ),
    "save_and_offload_only_these_names(names_which_can_be_saved=[g], "
    "names_which_can_be_offloaded=['h'], offload_src=device, "
    'offload_dst="pinned_host")': cp.save_and_offload_only_these_names(
        names_which_can_be_saved=["g"],
        names_which_can_be_offloaded=["h"],
        offload_src="device",
        offload_dst="pinned_host",
    ),
    "save_from_both_policies(dots_saveable, save_only_these_names(h))": (
        cp.save_from_both_policies(cp.dots_saveable, cp.save_only_these_names("h"))
    ),
}


def _jax_grad(f, policy, args):
    return jax.grad(jax.checkpoint(f, policy=policy), argnums=ARGNUMS)


def _tool_grad(f, text, args):
    plans: list = []
    g = grad_jaxpr(ir(f, *args), list(ARGNUMS), remat=remat.parse_policy(text), plans=plans)
    return g, plans


def _host_bytes(f, policy, args) -> tuple[int, int]:
    """(device, host) bytes of JAX's residuals, the arguments left out."""
    dev = host = 0
    for a, why in saved_residuals(jax.checkpoint(f, policy=policy), *args):
        if why.startswith("from the arg"):
            continue
        n = a.size * a.dtype.itemsize
        if "<host>" in str(a.str_short()):
            host += n
        else:
            dev += n
    return dev, host


def _offloads(j) -> list[tuple[str, str]]:
    """(the primitive making the value, the host type) of each copy to host memory in j."""
    made = {id(o): e.prim for e in all_eqns(j) for o in e.outputs}
    return sorted(
        (made.get(id(e.inputs[0]), "input"), str(e.outputs[0].type))
        for e in all_eqns(j)
        if e.prim == "device_put" and "Host" in str(e.params.get("devices"))
    )


def _count(j, prim) -> int:
    return sum(e.prim == prim for e in all_eqns(j))


@functools.cache
def _jax_grad_values(text):
    """JAX's gradient of `mlp` at ARGS under the policy `text` (one compile), for every test
    here that compares with it."""
    return jax.jit(_jax_grad(mlp, POLICIES[text], ARGS))(*ARGS)


@pytest.mark.parametrize("text", sorted(POLICIES))
def test_grad_values_and_residuals_against_jax(text):
    policy = POLICIES[text]
    g, (plan,) = _tool_grad(mlp, text, ARGS)
    for a, b in zip(backend.evaluate(g, list(ARGS)), _jax_grad_values(text)):
        close(a, b, 1e-5)
    jax_text = str(jax.make_jaxpr(_jax_grad(mlp, policy, ARGS))(*ARGS))
    theirs = parse(jax_text, "<jax>").jaxpr
    # the same values offloaded (by the primitive that makes them, and type), no more copies
    assert _offloads(g) == _offloads(theirs)
    assert _count(g, "device_put") <= _count(theirs, "device_put")
    assert (plan.bytes_after, plan.bytes_offloaded) == _host_bytes(mlp, policy, ARGS)


def test_copies_print_as_jax_prints_them():
    text = "offload_dot_with_no_batch_dims(device, pinned_host)"
    g, _ = _tool_grad(mlp, text, ARGS)
    ours = print_jaxpr(g, None)
    theirs = str(jax.make_jaxpr(_jax_grad(mlp, POLICIES[text], ARGS))(*ARGS))
    # each device_put equation with its binder type, the names left out
    pat = re.compile(r"\w+:(\S+) = (device_put\[[^\]]*\])")

    def copies(s):
        return sorted((t, re.sub(r"\s+", " ", p)) for t, p in pat.findall(s))

    assert copies(ours) == copies(theirs)
    assert any("<host>" in t for t, _ in copies(ours))


def test_scan_body_offloads_as_jax_does():
    def f(w, xs):
        def body(c, x):
            h = jnp.tanh(c @ w + x)
            return h, jnp.sum(h)

        _, ys = jax.lax.scan(body, jnp.ones(3), xs)
        return jnp.sum(ys)

    w, xs = 0.5 * vec((3, 3), 3), vec((4, 3), 4)
    text = "offload_dot_with_no_batch_dims(device, pinned_host)"
    policy = POLICIES[text]
    g = grad_jaxpr(ir(f, w, xs), [0, 1], remat=remat.parse_policy(text))
    jg = jax.grad(jax.checkpoint(f, policy=policy), argnums=(0, 1))
    got, want = together((g, [w, xs]), (jg, [w, xs]))  # (one compile)
    for a, b in zip(got, want):
        close(a, b, 1e-5)
    theirs = parse(str(jax.make_jaxpr(jg)(w, xs)), "<jax>").jaxpr
    assert _offloads(g) == _offloads(theirs) == [("dot_general", "f32<host>[3]")]
    stacked = {str(o.type) for e in g.eqns if e.prim == "scan" for o in e.outputs}
    assert "f32<host>[4,3]" in stacked  # the scan stacks the host copies, as JAX's does


def test_memory_counts_offloaded_residuals_as_no_device_bytes():
    j = ir(mlp, *ARGS)
    forms = {}
    for text in (
        "dots_with_no_batch_dims_saveable",
        "offload_dot_with_no_batch_dims(device, pinned_host)",
    ):
        primal, linear, info = linearize_jaxpr(j, list(ARGNUMS), remat=remat.parse_policy(text))
        forms[text] = (primal, linear, info)
    saved, off = forms.values()
    # the same residuals, the dots' copies on the host instead
    assert [str(r.type).replace("<host>", "") for r in off[2].residuals] == [
        str(r.type) for r in saved[2].residuals
    ]
    r = run(
        [
            "linearize",
            "--remat",
            "offload_dot_with_no_batch_dims(device, pinned_host)",
            "--argnums",
            "0,1,2",
            "--stats",
            "-",
        ],
        stdin=str(jax.make_jaxpr(mlp)(*ARGS)),
    )
    assert r.exit_code == 0, r.output
    policy = cp.offload_dot_with_no_batch_dims("device", "pinned_host")
    assert f"{_host_bytes(mlp, policy, ARGS)[1]} of them in host memory" in r.stderr
    form = parse(r.stdout, "<lin>").jaxpr
    res = residual_bytes(form)
    host = [v for v in res.values if "<host>" in str(v.var.type)]
    assert host and all(v.nbytes == 0 for v in host)
    dev, _ = _host_bytes(mlp, cp.offload_dot_with_no_batch_dims("device", "pinned_host"), ARGS)
    inputs = sum(v.nbytes for v in res.values if v.kind == "input")
    assert res.total - inputs == dev


def test_device_put_types_of_jax_text():
    """The shape rule gives JAX's printed memory spaces (the checker ignores them)."""
    theirs = parse(
        str(
            jax.make_jaxpr(
                _jax_grad(mlp, cp.offload_dot_with_no_batch_dims("device", "pinned_host"), ARGS)
            )(*ARGS)
        ),
        "<jax>",
    ).jaxpr
    puts = [e for e in all_eqns(theirs) if e.prim == "device_put"]
    assert len(puts) == 4
    for e in puts:
        got = infer_types(e.prim, [x.type for x in e.inputs], e.params, None)
        assert [t.memory_space for t in got] == [o.type.memory_space for o in e.outputs]


def test_cli_runs_the_offloading_gradient(tmp_path):
    src = tmp_path / "f.jaxpr"
    src.write_text(str(jax.make_jaxpr(mlp)(*ARGS)) + "\n")
    out = tmp_path / "g.jaxpr"
    r = run(
        [
            "grad",
            "--argnums",
            "0,1,2",
            "--remat",
            "offload_dot_with_no_batch_dims('device', 'pinned_host')",
            str(src),
            "-o",
            str(out),
        ]
    )
    assert r.exit_code == 0, r.output
    text = "offload_dot_with_no_batch_dims(device, pinned_host)"
    _, host = _host_bytes(mlp, POLICIES[text], ARGS)
    assert f"offloaded {host} bytes" in r.stderr and "offloaded to pinned_host" in r.stderr
    np.savez(tmp_path / "in.npz", *ARGS)
    np.savez(tmp_path / "want.npz", *[np.asarray(w) for w in _jax_grad_values(text)])
    _run_against(out, tmp_path / "in.npz", tmp_path / "want.npz", [])


def _run_against(prog, args, want, extra):
    r = run(
        [
            "run",
            str(prog),
            "--args",
            str(args),
            *extra,
            "--expected-output",
            str(want),
            "--atol",
            "1e-5",
        ]
    )
    assert r.exit_code == 0, r.output


def _one_dot(w, x):
    return jnp.sum(jnp.sin(x @ w))


def test_cli_runs_an_offloading_gradient_eagerly(tmp_path):
    """`run --eager` of a gradient with copies to host memory: a one-dot function's (op by op,
    each operation is one XLA compile; the MLP's compiled run is the test above's)."""
    args = (vec((4, 3), 3), vec((2, 4), 4))
    src = tmp_path / "f.jaxpr"
    src.write_text(str(jax.make_jaxpr(_one_dot)(*args)) + "\n")
    out = tmp_path / "g.jaxpr"
    text = "offload_dot_with_no_batch_dims(device, pinned_host)"
    r = run(["grad", "--argnums", "0,1", "--remat", text, str(src), "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert "offloaded to pinned_host" in r.stderr
    assert "f32<host>[2,3] = device_put" in out.read_text()  # the dot's value offloaded
    np.savez(tmp_path / "in.npz", *args)
    want = jax.jit(jax.grad(jax.checkpoint(_one_dot, policy=POLICIES[text]), argnums=(0, 1)))(*args)
    np.savez(tmp_path / "want.npz", *[np.asarray(w) for w in want])
    _run_against(out, tmp_path / "in.npz", tmp_path / "want.npz", ["--eager"])


def test_offload_src_must_be_the_values_memory():
    spec = remat.parse_policy("offload_dot_with_no_batch_dims(pinned_host, device)")
    with pytest.raises(JaxprError, match="offload_src=pinned_host") as e:
        grad_jaxpr(ir(mlp, *ARGS), [0], remat=spec)
    assert e.value.loc is not None


@pytest.mark.parametrize(
    "text, msg",
    [
        ("offload_dot_with_no_batch_dims(device)", "missing offload_dst"),
        ("offload_dot_with_no_batch_dims(device, unpinned_host)", "a memory kind"),
        ("offload_dot_with_no_batch_dims", "missing offload_src, offload_dst"),
        (
            "save_and_offload_only_these_names(names_which_can_be_saved=[h], "
            "names_which_can_be_offloaded=[h], offload_src=device, offload_dst=pinned_host)",
            "should be exclusive",
        ),
        (
            "save_and_offload_only_these_names([h], [g], device, pinned_host)",
            "keyword arguments only",
        ),
        (
            "save_from_both_policies(dots_saveable, offload_dot_with_no_batch_dims(device, pinned_host))",
            "does not return a boolean",
        ),
        ("offload_dot_with_no_batch_dims(device, pinned_host", "expected ',' or ')'"),
        ("offload_dot_with_no_batch_dims=device,pinned_host", "NAME=a,b is for"),
        ("save_from_both_policies([h], dots_saveable)", "is not a policy"),
        ("offload_dot_with_no_batch_dims([device], pinned_host)", "a memory kind"),
    ],
)
def test_refusals(text, msg):
    with pytest.raises(ValueError, match=re.escape(msg)):
        remat.parse_policy(text)


def test_jax_refuses_the_same():
    """The refusals above that JAX makes too."""
    with pytest.raises(ValueError, match="exclusive"):
        cp.save_and_offload_only_these_names(
            names_which_can_be_saved=["h"],
            names_which_can_be_offloaded=["h"],
            offload_src="device",
            offload_dst="pinned_host",
        )
    both = cp.save_from_both_policies(
        cp.dots_saveable, cp.offload_dot_with_no_batch_dims("device", "pinned_host")
    )
    with pytest.raises(ValueError, match="should be a boolean"):
        jax.grad(jax.checkpoint(mlp, policy=both))(*ARGS)


def test_plain_policies_in_call_form():
    assert remat.parse_policy("save_only_these_names(a, 'b')") == remat.parse_policy(
        "save_only_these_names=a,b"
    )
    assert remat.parse_policy("dots_saveable()") == remat.Spec(policy="dots_saveable")
    for alias, name in [
        ("checkpoint_dots", "dots_saveable"),
        ("checkpoint_dots_with_no_batch_dims", "dots_with_no_batch_dims_saveable"),
    ]:
        assert getattr(cp, alias) is getattr(cp, name)  # JAX's aliases
        assert remat.parse_policy(alias) == remat.Spec(policy=name)
    assert remat.parse_policy("save_from_both_policies(nothing_saveable, dots_saveable)") == (
        remat.Spec(policy="dots_saveable")
    )


def test_checkpoint_with_an_offload_policy_in_the_text(tmp_path, monkeypatch):
    """JAX prints a checkpoint's offload policy without its memory kinds: recomputed, said."""
    from jaxprtool.families import calls

    monkeypatch.setattr(calls, "_noted", set())  # the warning is given once per process
    policy = cp.offload_dot_with_no_batch_dims("device", "pinned_host")
    src = tmp_path / "f.jaxpr"
    src.write_text(str(jax.make_jaxpr(jax.checkpoint(mlp, policy=policy))(*ARGS)) + "\n")
    out = tmp_path / "g.jaxpr"
    r = run(["grad", "--argnums", "0,1,2", str(src), "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert "is an offload policy, whose memory kinds the text does not print" in r.stderr
    g = parse(out.read_text(), str(out)).jaxpr
    # (JAX's gradient under the policy, as the values test computed it)
    want = _jax_grad_values("offload_dot_with_no_batch_dims(device, pinned_host)")
    for a, b in zip(backend.evaluate(g, list(ARGS)), want):
        close(a, b, 1e-5)
