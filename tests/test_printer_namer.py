"""`text.printer.Namer`: one set of names shared by a program printout and its equations."""

from __future__ import annotations

from pathlib import Path

from jaxprtool.core import Literal, ShapedArray, Var
from jaxprtool.text.parser import parse
from jaxprtool.text.printer import Namer, print_jaxpr

SAMPLES = Path(__file__).resolve().parents[1] / "samples"


def test_names_agree_with_the_printout():
    for name in ("sin_cos.jaxpr", "cond.jaxpr", "mlp.jaxpr"):
        j = parse((SAMPLES / name).read_text(), name).jaxpr
        n = Namer()
        text = n.jaxpr_text(j)
        assert text == print_jaxpr(j)
        lines = text.splitlines()
        for e in j.eqns:
            first = n.eqn_text(e).splitlines()[0]
            assert any(ln.strip() == first.strip() for ln in lines), first
        assert [n.name(v) for v in j.invars] == ["a", "b", "c", "d", "e", "f"][: len(j.invars)]


def test_chosen_names_fresh_names_and_literals():
    j = parse((SAMPLES / "sin_cos.jaxpr").read_text(), "sin_cos.jaxpr").jaxpr
    n = Namer()
    n.jaxpr_text(j)
    t = Var(j.invars[0].type)
    n.set_name(t, "t_a")
    n.set_name(t, "ignored")  # a name once given stays
    assert n.named(t) and n.name(t) == "t_a"
    fresh = Var(j.invars[0].type)
    assert n.name(fresh) == "g"  # after a..f of the printout
    later = Namer(after=n)
    assert later.name(Var(j.invars[0].type)) == "h"
    assert n.atom(Literal(2.0, ShapedArray((), "f32"))) == "2.0:f32[]"
