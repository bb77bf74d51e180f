"""The API sets no process-wide state (issue 47, item 2): the custom-rule policy and the
rematerialization policy of a `jaxprtool.grad` call are its own, in force for that call
alone: two threads calling with different ones each get what a call alone gets, and a call
leaves nothing behind for the next one."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import warnings

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

import jaxprtool as jt  # noqa: E402
from jaxprtool.core import JaxprError  # noqa: E402


@jax.custom_vjp
def clip_grad(x):
    return 2.0 * x


clip_grad.defvjp(lambda x: (2.0 * x, None), lambda _, g: (jnp.clip(g, -1.0, 1.0),))


def _layers(x, m, last):
    h = x
    for _ in range(4):
        h = jnp.tanh(m @ h)
    return jnp.sum(last(h) ** 2)


def loss(x, m):
    """A custom_vjp function whose rule `make_jaxpr`'s text does not contain: an error by
    default and under "strict", its body's derivative under "body"."""
    return _layers(x, m, clip_grad)


def loss_of_the_body(x, m):
    return _layers(x, m, lambda h: 2.0 * h)


X = np.linspace(-1.0, 1.0, 6).astype(np.float32)
M = (np.arange(36, dtype=np.float32).reshape(6, 6) / 40.0 - 0.4).astype(np.float32)
#: (custom_rules, remat) of each call
CALLS = (("body", None), ("body", "nothing_saveable"), ("strict", None), ("default", None))


@pytest.fixture(scope="module")
def program():
    return jt.parse(str(jax.make_jaxpr(loss)(X, M)), "loss.jaxpr")


def _outcome(program, custom_rules: str, remat: str | None) -> str:
    """The gradient's text, or the error's message."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the body's derivative is said in a warning
        try:
            return jt.format(jt.grad(program, (0, 1), custom_rules=custom_rules, remat=remat))
        except JaxprError as e:
            return f"error: {e.message}"


def test_the_calls_differ_alone(program):
    """What the threads below are compared with: four answers, three kinds."""
    alone = [_outcome(program, *call) for call in CALLS]
    assert not alone[0].startswith("error") and not alone[1].startswith("error")
    assert alone[0] != alone[1]  # nothing_saveable recomputes the tanh chain
    assert alone[2].startswith("error: custom_vjp_call 'clip_grad'")
    assert alone[3].startswith("error: custom_vjp_call 'clip_grad'")
    for text in alone[:2]:  # each is the body's gradient, as JAX computes it
        got = jt.run(jt.parse(text), X, M)
        want = jax.jit(jax.grad(loss_of_the_body, argnums=(0, 1)))(X, M)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


#: each call in a process of its own, forked from one that has read the program and made
#: no call (its children start with no state of a call): the program's text in argv[1],
#: the calls in argv[2], each child's answer written to the file argv[3] names with its
#: number appended
_ALONE_IN_A_PROCESS = """
import json, os, sys, warnings
import jaxprtool as jt
from jaxprtool.core import JaxprError
warnings.simplefilter("ignore")
program = jt.parse(open(sys.argv[1]).read(), "loss.jaxpr")
for k, (custom_rules, remat) in enumerate(json.loads(sys.argv[2])):
    pid = os.fork()
    if pid == 0:
        try:
            try:
                out = jt.format(jt.grad(program, (0, 1), custom_rules=custom_rules, remat=remat))
            except JaxprError as e:
                out = f"error: {e.message}"
            with open(sys.argv[3] + str(k), "w") as f:
                f.write(out)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
"""


def test_each_call_gets_what_a_process_of_its_own_gets(program, tmp_path):
    """What the threads below get is what each call gets in a separate process (no state
    of an earlier call in this one)."""
    text = tmp_path / "loss.jaxpr"
    text.write_text(jt.format(program))
    answers = tmp_path / "answer"
    subprocess.run(
        [sys.executable, "-c", _ALONE_IN_A_PROCESS, str(text), json.dumps(CALLS), str(answers)],
        capture_output=True,
        text=True,
        check=True,
    )
    for k, call in enumerate(CALLS):
        alone = (tmp_path / f"answer{k}").read_text()
        assert _outcome(program, *call) == alone, call


def test_two_threads_with_different_policies_each_get_their_own_answer(program):
    """Each thread calls again and again with its own policies, switching often (a global
    policy set by one call was read by the other thread's walk: wrong answers)."""
    alone = {call: _outcome(program, *call) for call in CALLS}
    got: dict[tuple, list[str]] = {call: [] for call in CALLS}
    start = threading.Barrier(len(CALLS))

    def calls(call):
        start.wait()
        for _ in range(8):
            got[call].append(_outcome(program, *call))

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # threads take turns every few equations
    try:
        threads = [threading.Thread(target=calls, args=(call,)) for call in CALLS]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    for call in CALLS:
        assert got[call] == [alone[call]] * 8, call


def test_a_call_leaves_no_policy_behind(program):
    """After a call with custom_rules="body", the library's own walk (`ad.api.grad_jaxpr`)
    refuses the missing rule again, as the default policy does."""
    from jaxprtool.ad.api import grad_jaxpr
    from jaxprtool.consts_order import for_ad

    _outcome(program, "body", None)
    with pytest.raises(JaxprError, match="custom_vjp_call 'clip_grad'"):
        grad_jaxpr(for_ad(program.jaxpr), (0,))
