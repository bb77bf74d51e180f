"""Rematerialization never holds more than the plain gradient (issue 48, item 3): under a
policy the saved set is no larger than JAX's `saved_residuals` of `jax.checkpoint(f,
policy)`, custom_jvp_call outputs (`jax.nn.relu`) and a `jax.checkpoint` block's results
included, and XLA's temp bytes of the tool's gradient are no more than of its plain one."""

from __future__ import annotations

import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax import ad_checkpoint as adc  # noqa: E402
from jax._src.ad_checkpoint import saved_residuals  # noqa: E402
from jax_oracle import close, ir, run, vec  # noqa: E402

from jaxprtool import backend  # noqa: E402
from jaxprtool.ad import remat  # noqa: E402
from jaxprtool.ad.api import grad_jaxpr  # noqa: E402


def relu_mlp(x, w1, w2):
    """The issue's one-hidden-layer MLP: `jax.nn.relu` is a custom_jvp_call."""
    return jnp.sum(jax.nn.relu(x @ w1) @ w2)


def relu_mlp_named(x, w1, w2):
    return jnp.sum(jax.nn.relu(adc.checkpoint_name(x @ w1, "h")) @ w2)


def relu_mlp_checkpointed(x, w1, w2):
    """The hidden layer in a `jax.checkpoint` block (a `remat2` call)."""
    return jnp.sum(jax.checkpoint(lambda x, w: jax.nn.relu(x @ w))(x, w1) @ w2)


ARGS = (vec((2, 4), 0), vec((4, 10), 1), vec((10, 3), 2))
POLICIES = {
    "nothing_saveable": jax.checkpoint_policies.nothing_saveable,
    "save_only_these_names=h": jax.checkpoint_policies.save_only_these_names("h"),
    "dots_saveable": jax.checkpoint_policies.dots_saveable,
}
FUNCTIONS = {f.__name__: f for f in (relu_mlp, relu_mlp_named, relu_mlp_checkpointed)}


def _jax_saved_bytes(f, policy) -> int:
    res = saved_residuals(jax.checkpoint(f, policy=policy), *ARGS)
    return sum(a.size * a.dtype.itemsize for a, why in res if not why.startswith("from the arg"))


def _temp(g) -> int:
    fn = backend.as_jax_function(g, enable_x64=False)
    return jax.jit(lambda *a: fn(*a)).lower(*ARGS).compile().memory_analysis().temp_size_in_bytes


@pytest.mark.parametrize("segments", ["auto", "none"])
@pytest.mark.parametrize("policy", sorted(POLICIES))
@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_policy_saves_no_more_than_jax(name, policy, segments):
    f = FUNCTIONS[name]
    j = ir(f, *ARGS)
    plans: list = []
    spec = remat.with_segments(remat.parse_policy(policy), segments)
    g = grad_jaxpr(j, [0, 1, 2], remat=spec, plans=plans)
    (plan,) = plans
    assert plan.bytes_after <= _jax_saved_bytes(f, POLICIES[policy]), plan.render()
    assert plan.bytes_after <= plan.bytes_before
    for a, b in zip(backend.evaluate(g, list(ARGS)), _jax_grad(name), strict=True):
        close(a, b)


_JAX_GRADS: dict = {}


def _jax_grad(name):
    """JAX's gradient of FUNCTIONS[name] at ARGS, one compile per function (shared by the
    policies and segment choices; eagerly JAX compiles each operation)."""
    if name not in _JAX_GRADS:
        _JAX_GRADS[name] = jax.jit(jax.grad(FUNCTIONS[name], (0, 1, 2)))(*ARGS)
    return _JAX_GRADS[name]


def test_relu_mlp_xla_temp_no_more_than_plain():
    """The issue's done-when: nothing_saveable on the relu MLP, XLA's temp bytes."""
    j = ir(relu_mlp, *ARGS)
    plain = _temp(grad_jaxpr(j, [0, 1, 2]))
    plans: list = []
    g = grad_jaxpr(j, [0, 1, 2], remat=remat.parse_policy("nothing_saveable"), plans=plans)
    assert plans[0].bytes_after == 0
    assert _temp(g) <= plain


# ---------------------------------------------------------------- the plan reads well (item 4)


@pytest.fixture()
def named_src(tmp_path):
    src = tmp_path / "f.jaxpr"
    src.write_text(str(jax.make_jaxpr(relu_mlp_named)(*ARGS)) + "\n")
    return src


def test_plan_counts_the_inputs(named_src):
    r = run(["grad", "--argnums", "0,1,2", "--remat", "nothing_saveable", str(named_src)])
    assert r.exit_code == 0, r.output
    assert "saved (3): 3 inputs (held anyway, 0 B)" in r.stderr
    assert "from an input" not in r.stderr


@pytest.mark.parametrize(
    "flag, why",
    [
        (["--remat", "everything_saveable"], "nothing (the policy saves every residual)"),
        (["--remat-budget", "1.0", "--no-xla"], "nothing (every residual fits the budget)"),
        # in XLA's bytes the plain gradient itself is the plan: the loop says so
        (["--remat-budget", "1.0"], None),
    ],
)
def test_plan_says_why_nothing_is_recomputed(named_src, flag, why):
    r = run(["grad", *flag, str(named_src)])
    assert r.exit_code == 0, r.output
    if why is None:
        assert "the plain gradient fits: nothing recomputed" in r.stderr
    else:
        assert f"recomputed (0 equations): {why}" in r.stderr


@pytest.mark.parametrize(
    "policy, hint",
    [
        ("nothing_savable", "did you mean 'nothing_saveable'?"),
        ("dots_savable", "did you mean 'dots_saveable'?"),
        ("save_only_these_names=hh", "no checkpoint_name 'hh' in the program (did you mean 'h'?)"),
        ("save_any_names_but_these=x", "no checkpoint_name 'x' in the program; its names: h"),
    ],
)
def test_misspelt_policy_or_name_is_a_usage_error(named_src, policy, hint):
    r = run(["grad", "--remat", policy, str(named_src)])
    assert r.exit_code == 2 and hint in r.output and "Traceback" not in r.output, r.output
    assert r.stdout == ""
