"""`canonicalize` leaves out the runs of a pass that would return its input (`settled`):
the programs it returns are those of running every pass of every round (the reference loop
below, the code before the checks), the checks never answer "settled" where the pass would
change something, and the confirming round runs no pass when nothing is left for it."""

from __future__ import annotations

import random
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import CORPUS, needs_corpus

from jaxprtool.ad.api import grad_jaxpr, vjp_jaxpr
from jaxprtool.core import Literal, Var, alpha_equal, is_inexact
from jaxprtool.passes import canonicalize as canon_mod
from jaxprtool.passes.common import unseen_eqns
from jaxprtool.passes.cse import cse
from jaxprtool.passes.dce import dce
from jaxprtool.passes.fold import fold
from jaxprtool.passes.simplify import Context, simplify
from jaxprtool.record import prim
from jaxprtool.text.parser import parse
from jaxprtool.text.printer import print_jaxpr

SAMPLES = Path(__file__).resolve().parent.parent / "samples"


def reference_canonicalize(j, max_iterations=canon_mod.MAX_ROUNDS):
    """Every pass of every round, as `canonicalize` ran before it learnt to skip."""
    cur = j
    for _ in range(max_iterations):
        nxt = dce(cse(fold(simplify(cur))))
        if nxt is cur or alpha_equal(nxt, cur):
            return cur
        cur = nxt
    return cur


class Counted:
    """`canonicalize.ROUND` with each pass's runs counted and each `settled` answer checked:
    a program found settled is returned unchanged by the pass itself."""

    def __init__(self):
        self.runs: list[str] = []
        self.settled_asked = 0

    def round(self):
        out = []
        for run, settled in canon_mod.ROUND:
            out.append((self._run(run), None if settled is None else self._settled(run, settled)))
        return tuple(out)

    def _run(self, run):
        def counted(j):
            self.runs.append(run.__name__)
            return run(j)

        return counted

    def _settled(self, run, settled):
        def checked(last, program, *made):
            self.settled_asked += 1
            answer = settled(last, program, *made)
            if answer:
                assert run(program) is program, f"{run.__name__}: settled, but it changes"
            return answer

        return checked


def counted_canonicalize(monkeypatch, j, **kw):
    c = Counted()
    monkeypatch.setattr(canon_mod, "ROUND", c.round())
    # (the wrappers are new functions: canonicalize keys its table by them, as by the passes)
    return canon_mod.canonicalize(j, **kw), c


def program(text: str):
    return parse(text, "<test>").jaxpr


def test_only_dce_changed_one_round(monkeypatch):
    j = program(
        "{ lambda ; a:f32[3]. let b:f32[3] = sin a; c:f32[3] = cos a; "
        "d:f32[3] = mul b 1.0:f32[] in (d,) }"
    )
    out, c = counted_canonicalize(monkeypatch, j)
    # simplify drops the mul, dce the cos: the confirming round runs nothing
    assert c.runs == ["simplify", "fold", "cse", "dce"]
    assert print_jaxpr(out) == print_jaxpr(reference_canonicalize(j))
    assert [e.prim for e in out.eqns] == ["sin"]


def test_cse_merge_confirmed_without_rerunning(monkeypatch):
    j = program(
        "{ lambda ; a:f32[3]. let b:f32[3] = sin a; c:f32[3] = sin a; d:f32[3] = add b c in (d,) }"
    )
    out, c = counted_canonicalize(monkeypatch, j)
    assert c.runs == ["simplify", "fold", "cse", "dce"]
    assert c.settled_asked == 2  # the confirming round asks simplify and fold (cse's own result)
    assert print_jaxpr(out) == print_jaxpr(reference_canonicalize(j))


def test_cse_merge_that_simplify_then_takes(monkeypatch):
    """cse makes both cases of a select_n the same Var: simplify's rule applies in the
    next round (its check asks the rewritten equation), then dce drops the dead sin."""
    j = program(
        "{ lambda ; a:f32[3] p:bool[3]. let b:f32[3] = sin a; c:f32[3] = sin a; "
        "d:f32[3] = select_n p b c; e:f32[3] = neg d in (e,) }"
    )
    out, c = counted_canonicalize(monkeypatch, j)
    assert c.runs == ["simplify", "fold", "cse", "dce", "simplify", "dce"]
    ref = reference_canonicalize(j)
    assert print_jaxpr(out) == print_jaxpr(ref)
    assert [e.prim for e in out.eqns] == ["sin", "neg"]


def test_fold_then_simplify(monkeypatch):
    """A folded literal one makes a mul simplify in the next round."""
    j = program(
        "{ lambda ; a:f32[]. let b:f32[] = add 0.5:f32[] 0.5:f32[]; c:f32[] = mul a b in (c,) }"
    )
    out, c = counted_canonicalize(monkeypatch, j)
    assert c.runs[:4] == ["simplify", "fold", "cse", "dce"] and c.runs[4] == "simplify"
    assert print_jaxpr(out) == print_jaxpr(reference_canonicalize(j))
    assert len(out.eqns) == 0 and out.outvars[0] is out.invars[0]


def test_max_iterations_as_before(monkeypatch):
    j = program(
        "{ lambda ; a:f32[3] p:bool[3]. let b:f32[3] = sin a; c:f32[3] = sin a; "
        "d:f32[3] = select_n p b c; e:f32[3] = neg d in (e,) }"
    )
    for n in (1, 2, 3):
        out, _ = counted_canonicalize(monkeypatch, j, max_iterations=n)
        assert print_jaxpr(out) == print_jaxpr(reference_canonicalize(j, n))


def _float_argnums(j):
    return [i for i, v in enumerate(j.invars) if is_inexact(v.type)]


def _gradients() -> list:
    """Programs as AD leaves them: gradients (vjps where the output is not a scalar) of the
    samples and of some corpus files."""
    files = sorted(SAMPLES.glob("*.jaxpr"))
    files += sorted((CORPUS / "jax-0.10.2").glob("*.jaxpr"))[::4]
    files += sorted((CORPUS / "jax-0.12.0.1").glob("*.jaxpr"))[::9]
    out = []
    for f in files:
        j = parse(f.read_text(), str(f)).jaxpr
        argnums = _float_argnums(j)
        for transform in (grad_jaxpr, vjp_jaxpr):
            try:
                out.append((f.name, transform(j, argnums)))
                break
            except Exception:  # noqa: BLE001 - a program AD refuses: nothing to clean
                continue
    return out


@needs_corpus
def test_same_programs_as_every_pass_every_round(monkeypatch):
    programs = _gradients()
    assert len(programs) > 20
    asked = 0
    for name, j in programs:
        out, c = counted_canonicalize(monkeypatch, j)
        asked += c.settled_asked
        assert print_jaxpr(out) == print_jaxpr(reference_canonicalize(j)), name
    assert asked > len(programs)  # the checks were exercised


class OperandsOnly(Context):
    """A Context that refuses a question about an atom that is not an operand of the
    equation being simplified: the contract `simplify_settled` relies on."""

    def __init__(self):
        super().__init__()
        self.eqn = None

    def _own(self, a):
        assert any(a is x for x in self.eqn.inputs), f"{self.eqn.prim} asked about {a}"

    def producer(self, a):
        self._own(a)
        return super().producer(a)

    def scalar_const(self, a):
        self._own(a)
        return super().scalar_const(a)


@needs_corpus
def test_simplify_rules_ask_only_about_their_operands():
    asked = set()
    for ctx, e in _swept_eqns(OperandsOnly):
        rule = prim(e.prim).simplify
        if rule is not None and len(e.outputs) == 1:
            ctx.eqn = e
            rule(e, ctx)
            asked.add(e.prim)
    assert {"mul", "add_any", "neg"} <= asked


def _swept_eqns(make_context):
    """Each equation of the corpus gradients with the context simplify's sweep has when it
    reaches it (the producers and fills of the equations before it recorded after the
    caller has looked)."""
    for _, j in _gradients():
        ctx = make_context()
        for e in j.eqns:
            yield ctx, e
            for o in e.outputs:
                ctx.producers[o] = e
            fills = ctx.rules_of(e.prim)[1]
            if fills is not None:
                ctx.made(e, fills)


@needs_corpus
def test_a_rule_that_needs_a_constant_answers_none_without_one():
    """`simplify` (both loops) asks a rule whose record says `simplify_needs_constant` only
    where an operand is a scalar constant (a literal, or in `Context.consts`): on every equation of
    the corpus gradients without one, each such rule answers None, as the flag promises."""
    from jaxprtool.record import _RECORDS, FIELDS

    assert "simplify_needs_constant" in FIELDS
    asked = set()
    for ctx, e in _swept_eqns(Context):
        rec = prim(e.prim)
        if rec.simplify_needs_constant and len(e.outputs) == 1:
            assert rec.simplify is not None
            if not any(a.__class__ is Literal or a in ctx.consts for a in e.inputs):
                assert rec.simplify(e, ctx) is None, e.prim
                asked.add(e.prim)
    flagged = {n for n, r in _RECORDS.items() if r.simplify_needs_constant}
    assert {"mul", "add_any"} <= asked <= flagged


@pytest.mark.parametrize("settled_name", ["simplify_settled", "fold_settled", "cse_settled"])
def test_settled_on_the_same_program(settled_name):
    from jaxprtool.passes import cse as cse_mod
    from jaxprtool.passes import fold as fold_mod
    from jaxprtool.passes import simplify as simplify_mod

    mods = {"simplify_settled": simplify_mod, "fold_settled": fold_mod, "cse_settled": cse_mod}
    settled = getattr(mods[settled_name], settled_name)
    j = program("{ lambda ; a:f32[3]. let b:f32[3] = sin a; c:f32[3] = sin a in (b, c) }")
    assert settled(j, j)
    # a replaced equation is looked at: here two sins that cse would merge
    k = j.replace(eqns=[j.eqns[0], j.eqns[1].replace(inputs=(j.invars[0],))])
    assert isinstance(k.eqns[1].inputs[0], Var)
    assert settled(j, k) == (settled_name != "cse_settled")


def _count_fold_walks(monkeypatch) -> list:
    """The programs fold's rewrite walks are made over, as they are made."""
    from jaxprtool.passes import fold as fold_mod

    walks = []

    class Counting(fold_mod.EqnRewrite):
        def __init__(self, jaxpr, go):
            walks.append(jaxpr)
            super().__init__(jaxpr, go)

    monkeypatch.setattr(fold_mod, "EqnRewrite", Counting)
    return walks


def test_fold_leaves_a_program_without_foldable_equations_alone(monkeypatch):
    """AD's `broadcast_in_dim 1.0` seed has only literal operands but no fold rule: fold
    returns the program itself without a rewrite walk; a scalar add of literals folds."""
    walks = _count_fold_walks(monkeypatch)
    j = program(
        "{ lambda ; a:f32[3]. let b:f32[3] = broadcast_in_dim[broadcast_dimensions=() "
        "shape=(3,) sharding=None] 1.0:f32[]; c:f32[3] = mul a b in (c,) }"
    )
    assert fold(j) is j and walks == []
    k = program("{ lambda ; a:f32[]. let b:f32[] = add 1.0:f32[] 2.0:f32[] in (b,) }")
    assert len(fold(k).eqns) == 0 and walks == [k]


def test_fold_leaves_a_program_whose_bodies_fold_nothing_alone(monkeypatch):
    """A program with nested jaxprs (AD's gradients of custom_jvp calls) is not rewritten
    when neither it nor its bodies have anything to fold; a body that folds is rewritten,
    and so is the program holding it."""
    walks = _count_fold_walks(monkeypatch)
    body = "{ lambda ; d:f32[]. let e:f32[] = %s in (e,) }"
    text = (
        "{ lambda ; a:f32[]. let b:f32[] = jit[name=g jaxpr=%s] a; c:f32[] = mul b 2.0:f32[] "
        "in (c,) }"
    )
    j = program(text % (body % "sin d"))
    assert fold(j) is j and walks == []
    k = program(text % (body % "add 1.0:f32[] 2.0:f32[]"))
    out = fold(k)
    assert walks == [k.eqns[0].params["jaxpr"], k]
    assert out.eqns[0].params["jaxpr"].outvars[0].value == 3.0


# ------------------------------------------------ unseen_eqns: one walk, not a set


def _eqn_program(eqns):
    """A stand-in for a program: `unseen_eqns` reads only `.eqns` (objects by identity)."""
    return SimpleNamespace(eqns=tuple(eqns))


def _by_set(last, program):
    seen = set(last.eqns)
    return [e for e in program.eqns if e not in seen]


def _edited(old, edits, rng):
    """`old` with `edits` runs removed or replaced by new objects (the passes' edits)."""
    new = list(old)
    for _ in range(edits):
        if not new:
            break
        at = rng.randrange(len(new))
        gap = rng.choice([1, 1, 2, 5, 40, 100])  # (40 and 100: past `_SYNC`)
        made = [object() for _ in range(rng.choice([0, 0, 1, 2, 40]))]
        new[at : at + gap] = made
    return new


@pytest.mark.parametrize("seed", range(40))
def test_unseen_eqns_is_the_set_difference(seed):
    """Programs that differ by runs of equations removed or replaced, short and longer than
    the walk looks ahead, near the ends as anywhere: the walk finds exactly what a set of
    every equation of `last` finds, in order."""
    rng = random.Random(seed)
    old = [object() for _ in range(rng.choice([0, 1, 3, 50, 5000, 9000]))]
    new = _edited(old, rng.choice([0, 1, 3, 30]), rng)
    last, program = _eqn_program(old), _eqn_program(new)
    assert unseen_eqns(last, program) == _by_set(last, program)


@pytest.mark.parametrize("every", [2, 3, 40, 300])
def test_unseen_eqns_where_the_programs_part_often(every):
    """One equation in `every` replaced: the walk gives up its look-aheads for a set once
    the programs have parted more than once in `_PARTED` equations, with the same answer."""
    old = [object() for _ in range(3000)]
    new = [object() if n % every == 1 else e for n, e in enumerate(old)]
    last, program = _eqn_program(old), _eqn_program(new)
    assert unseen_eqns(last, program) == _by_set(last, program)


def test_unseen_eqns_out_of_order_counts_more_never_fewer():
    """An equation of `last` that comes back out of order may be counted as unseen (the
    checks then look at more); an equation made anew is never missed."""
    old = [object() for _ in range(200)]
    made = [object() for _ in range(3)]
    new = old[100:] + made[:1] + old[:100] + made[1:]
    got = unseen_eqns(_eqn_program(old), _eqn_program(new))
    assert set(made) <= set(got) <= set(new)
    assert [e for e in got if e in set(made)] == made
