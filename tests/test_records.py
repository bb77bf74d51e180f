"""The primitive records and the family modules ("one primitive, one place").

- every family's index entry is up to date (families load on demand by primitive name);
- the machinery imports no family module (no import cycle, families load through the entry
  point's loader);
- outside the family modules no string literal names a primitive, except in the emit layer
  (`ad/ops.py`: `ops.mul` binds `mul`) and the parser's state syntax (what the machinery
  needs to know of a primitive, down to the JAX versions that print it, is a field of its
  record; `tests/test_layout.py` measures the same for a few probes, words included).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import jaxprtool
from jaxprtool.record import records

PKG = Path(jaxprtool.__file__).parent

#: (module, why its primitive names are not a table of rules)
ALLOWED = {
    "ad/ops.py": "the emit layer: ops.mul(x, y) binds mul",
    "ad/remat/rewrite.py": "the recomputation is emitted as JAX emits it: a remat2 call",
    "text/parser/build.py": "the state syntax `c[...] += x` is the addupdate equation",
}
#: words that are primitive names but also ordinary words or option values
ORDINARY = {"name", "call", "check", "copy", "get", "swap", "while", "scan", "cond", "rev",
            "transpose", "max", "min", "complex", "fwd", "jit"}  # fmt: skip


def _python(code: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=PKG.parent
    )
    return out.stdout


def test_the_family_index_is_up_to_date():
    expected = _python("from jaxprtool.families import index_source; print(index_source(), end='')")
    assert (PKG / "families" / "index.py").read_text() == expected, (
        "run `python -m jaxprtool.families` to regenerate jaxprtool/families/index.py"
    )


def test_the_machinery_imports_no_family_module():
    machinery = [
        "jaxprtool.ad.builder", "jaxprtool.ad.ops", "jaxprtool.ad.jvp", "jaxprtool.ad.linearize",
        "jaxprtool.ad.transpose", "jaxprtool.ad.api", "jaxprtool.passes.registry",
        "jaxprtool.backend.evaluator", "jaxprtool.text.printer", "jaxprtool.text.parser",
        "jaxprtool.check", "jaxprtool.ui.stats",
    ]  # fmt: skip
    code = (
        "import sys\n"
        f"for m in {machinery!r}: __import__(m)\n"
        "print(sorted(m for m in sys.modules if m.startswith('jaxprtool.families.')))"
    )
    assert _python(code).strip() == "[]"


def test_fmt_loads_only_the_families_it_needs():
    code = (
        "import sys\n"
        "from jaxprtool.text.parser import parse\n"
        "from jaxprtool.text.printer import print_jaxpr\n"
        "print_jaxpr(parse('{ lambda ; a:f32[3]. let b:f32[3] = cumsum[axis=0 reverse=False] a"
        " in (b,) }').jaxpr)\n"
        "print(sorted(m.rpartition('.')[2] for m in sys.modules"
        " if m.startswith('jaxprtool.families.') and m != 'jaxprtool.families.index'))"
    )
    loaded = ast.literal_eval(_python(code))
    assert "reductions" in loaded and "scan" not in loaded and "linalg" not in loaded


def test_no_primitive_is_named_outside_the_families():
    names = set(records()) - ORDINARY
    offenders = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).as_posix()
        if rel.startswith("families/") or rel in ALLOWED:
            continue
        text = path.read_text()
        for m in re.finditer(r"""["']([A-Za-z_][A-Za-z0-9_]*)["']""", text):
            if m.group(1) in names:
                line = text.count("\n", 0, m.start()) + 1
                offenders.append(f"{rel}:{line}: {m.group(1)}")
    assert offenders == []


def test_a_batching_rule_a_helper_makes_is_made_on_its_first_call():
    """A record's batching rule made by one of `ad.batching`'s helpers is named, not made,
    when its family loads (`record.batching_rule`): a fresh process that reads sin's record
    executes no vmap machinery; the first call makes the helper's rule, which batches as
    JAX's `vectorized` does and which an error message names."""
    code = (
        "import sys, types\n"
        "from jaxprtool.record import prim\n"
        "rule = prim('sin').batching\n"
        "print(type(sys.modules['jaxprtool.ad.batching']) is types.ModuleType)\n"
        "from jaxprtool.ad import builder as B\n"
        "from jaxprtool.ad.batching import vmap_jaxpr\n"
        "from jaxprtool.ad.registry import rule_name\n"
        "from jaxprtool.text.parser import parse\n"
        "from jaxprtool.text.printer import print_jaxpr\n"
        "j = parse('{ lambda ; a:f32[3]. let b:f32[3] = sin a in (b,) }').jaxpr\n"
        "print(print_jaxpr(vmap_jaxpr(j, in_axes=[0], axis_size=2)).replace('\\n', ' '))\n"
        "print(rule_name(rule))\n"
    )
    executed, vmapped, name = _python(code).strip().splitlines()
    assert executed == "False"
    # JAX 0.12.1's `str(jax.make_jaxpr(jax.vmap(jnp.sin))(jnp.ones((2, 3))))`
    assert vmapped == "{ lambda ; a:f32[2,3]. let b:f32[2,3] = sin a in (b,) }"
    assert name == "jaxprtool.ad.batching.vectorized.<locals>.rule"
