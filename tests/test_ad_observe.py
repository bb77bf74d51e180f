"""Observers of the AD walks (`ad/observe.py`) and of the evaluator's loop."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from jaxprtool.ad import registry
from jaxprtool.ad.api import grad_jaxpr, jvp_jaxpr, linearize_jaxpr, vjp_jaxpr
from jaxprtool.ad.observe import Observer, observing
from jaxprtool.core import JaxprError, alpha_equal
from jaxprtool.text.parser import parse

SAMPLES = Path(__file__).resolve().parents[1] / "samples"


def _sample(name):
    return parse((SAMPLES / name).read_text(), name).jaxpr


class Log(Observer):
    """Records every hook call: (hook name, its arguments)."""

    def __init__(self):
        self.calls = []

    def hooks(self, name):
        return [a for h, a in self.calls if h == name]


def _recorder(hook):
    def record(self, *args):
        self.calls.append((hook, args))

    return record


for _hook in [n for n in vars(Observer) if not n.startswith("_")]:
    setattr(Log, _hook, _recorder(_hook))


def test_vjp_reports_each_step_once():
    j = _sample("sin_cos.jaxpr")
    log = Log()
    with observing(log):
        out = vjp_jaxpr(j)
    assert alpha_equal(out, vjp_jaxpr(j))  # observing changes nothing
    order = [h for h, _ in log.calls]
    assert order[0] == "jvp_begin" and order.index("linearized") < order.index("transpose_begin")
    steps = log.hooks("jvp_step")
    assert [a[0] for a in steps] == list(j.eqns)
    assert [a[1] for a in steps] == ["defjvp", "defjvp", "defbilinear", "jvp+linearization"]
    (lin,) = log.hooks("linearized")
    primal, linear, info = lin
    (begin,) = log.hooks("transpose_begin")
    assert begin[0] is linear and begin[1] == [False] * len(info.residuals) + [True, True]
    # every linear equation of the linear program is transposed (last first)
    transposed = [a[0] for a in log.hooks("transpose_step")]
    assert transposed == list(reversed(linear.eqns))
    # t_a is used twice: two cotangents reach it, the second one accumulates
    t_a = linear.invars[len(info.residuals)]
    to_t_a = [a for a in log.hooks("cotangent") if a[1] is t_a]
    assert len(to_t_a) == 2 and registry.is_zero(to_t_a[0][3])
    assert not registry.is_zero(to_t_a[1][3]) and to_t_a[1][4].type == t_a.type
    assert not log.hooks("step_failed")


def test_emitted_equations_are_the_programs():
    j = _sample("sin_cos.jaxpr")
    seen = []

    class Obs(Observer):
        def jvp_step(self, eqn, kind, primals, tangents, pouts, touts, emitted):
            assert emitted.split
            seen.extend(emitted.eqns())

    with observing(Obs()):
        primal, linear, info = linearize_jaxpr(j)
    made = {id(o) for e in seen for o in e.outputs}
    assert all(o is None or id(o) in made for e in primal.eqns for o in e.outputs)
    assert all(id(o) in made for e in linear.eqns for o in e.outputs)


def test_nested_walks_are_not_reported():
    j = _sample("cond.jaxpr")
    log = Log()
    with observing(log):
        grad_jaxpr(j, (0,))
    assert [a[0] for a in log.hooks("jvp_step")] == list(j.eqns)
    assert len(log.hooks("jvp_begin")) == 1 and len(log.hooks("transpose_begin")) == 1


def test_jvp_walk_has_one_program():
    j = _sample("sin_cos.jaxpr")
    kinds = []

    class Obs(Observer):
        def jvp_step(self, eqn, kind, primals, tangents, pouts, touts, emitted):
            kinds.append((emitted.split, len(emitted.tangent())))

    with observing(Obs()):
        jvp_jaxpr(j)
    assert kinds == [(False, 0)] * len(j.eqns)


def test_the_walk_reports_which_helper_registered_the_rule(monkeypatch):
    """A rule assigned to `primitive_jvps` by no helper is reported as "primitive_jvps", by
    `step_notes` (before the step) and `jvp_step` alike: observers need not read the
    registries to say so."""
    j = _sample("sin_cos.jaxpr")
    monkeypatch.delitem(registry.rule_kind, "sin")  # as if assigned by hand: no helper
    log = Log()
    with observing(log):
        jvp_jaxpr(j)
    kinds = ["primitive_jvps", "defjvp", "defbilinear", "jvp+linearization"]
    assert [a[1] for a in log.hooks("jvp_step")] == kinds
    assert [a[1] for a in log.hooks("step_notes")] == kinds


def test_failure_is_reported_where_the_walk_stops(monkeypatch):
    j = _sample("sin_cos.jaxpr")
    registry.primitive_jvps.get("cos")  # the records are loaded
    monkeypatch.delitem(registry.primitive_jvps, "cos")
    log = Log()
    with observing(log), pytest.raises(JaxprError, match="'cos' not implemented"):
        vjp_jaxpr(j)
    ((eqn, err),) = log.hooks("step_failed")
    assert eqn is j.eqns[1] and isinstance(err, JaxprError)
    assert len(log.hooks("jvp_step")) == 1


def test_missing_transpose_is_reported(monkeypatch):
    j = _sample("sin_cos.jaxpr")
    registry.primitive_transposes.get("neg")
    monkeypatch.delitem(registry.primitive_transposes, "neg")
    log = Log()
    with observing(log), pytest.raises(JaxprError, match="Transpose rule"):
        vjp_jaxpr(j)
    ((eqn, err),) = log.hooks("step_failed")
    assert eqn.prim == "neg"


def test_evaluator_observer_sees_every_top_level_value():
    pytest.importorskip("jax")
    from jaxprtool.backend import eval_eager, evaluate

    j = _sample("cond.jaxpr")
    args = [
        np.linspace(-1, 1, int(np.prod(v.type.shape)), dtype=np.float32).reshape(v.type.shape)
        if v.type.dtype == "float32"
        else np.zeros(v.type.shape, v.type.np_dtype)
        for v in j.invars
    ]
    got = {}

    class Obs:
        def eval_step(self, eqn, invals, outs):
            got.update({id(v): np.asarray(x) for v, x in zip(eqn.outputs, outs)})

    outs = eval_eager(j, args, observer=Obs())
    assert set(got) == {id(o) for e in j.eqns for o in e.outputs}
    for x, want in zip(j.outvars, evaluate(j, args)):
        np.testing.assert_allclose(got[id(x)], want, rtol=1e-6)
    for a, b in zip(outs, evaluate(j, args)):
        np.testing.assert_allclose(a, b, rtol=1e-6)
