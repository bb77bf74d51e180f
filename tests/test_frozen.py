"""`jaxprtool.frozen.Frozen` behaves as the `@dataclass(frozen=True, slots=True)` it replaced
(the oracle: the same class written as a dataclass), and no command's start-up imports
dataclasses again."""

from __future__ import annotations

import copy
import dataclasses
import pickle
import subprocess
import sys

import pytest

from jaxprtool.core import Eqn, ShapedArray
from jaxprtool.frozen import Frozen, FrozenInstanceError, set_field


class Pair(Frozen, compare=("a",)):
    __slots__ = ("a", "b")

    def __init__(self, a, b=0):
        set_field(self, "a", a)
        set_field(self, "b", b)


@dataclasses.dataclass(frozen=True, slots=True)
class DPair:
    a: object
    b: object = dataclasses.field(default=0, compare=False)


def test_frozen_matches_the_dataclass():
    p, q, d, e = Pair(1, 2), Pair(1, 3), DPair(1, 2), DPair(1, 3)
    assert (p == q) == (d == e) and (hash(p) == hash(q)) == (hash(d) == hash(e))
    assert (Pair(1) == Pair(2)) == (DPair(1) == DPair(2))
    assert repr(p).replace("Pair", "DPair") == repr(d)
    assert (p == (1, 2)) is False and Pair.__match_args__ == DPair.__match_args__
    with pytest.raises(FrozenInstanceError):
        p.a = 5
    with pytest.raises(dataclasses.FrozenInstanceError):
        d.a = 5
    for twin in (pickle.loads(pickle.dumps(p)), copy.deepcopy(p), copy.copy(p)):
        assert twin == p and twin.b == 2


def test_identity_classes_and_hidden_fields():
    t = ShapedArray((3,), "f32")
    e = Eqn("sin", (), (), {})
    f = Eqn("sin", (), (), {})
    assert e == e and e != f and hash(e) != hash(f)
    assert "no_subjaxprs" not in repr(e) and repr(e).startswith("Eqn(prim='sin'")
    assert t == ShapedArray((3,), "f32", weak_type=True)  # weak_type is not compared


@pytest.mark.parametrize("argv", [["fmt"], ["check"], ["vmap", "--axis-size", "2"]])
def test_start_up_imports_no_dataclasses(argv, tmp_path):
    f = tmp_path / "one.jaxpr"
    f.write_text("{ lambda ; a:f32[]. let\n    b:f32[] = sin a\n  in (b,) }\n")
    code = (
        "import os, sys, runpy\n"
        "os._exit = sys.exit\n"  # the program ends without teardown (`cli._leave`): go on
        f"sys.argv = ['jaxprtool', *{argv!r}, {str(f)!r}]\n"
        "try:\n    runpy.run_module('jaxprtool', run_name='__main__')\n"
        "except SystemExit:\n    pass\n"
        "print(sorted({'dataclasses', 'json'} & set(sys.modules)))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.stdout.strip().splitlines()[-1] == "[]", r.stderr
