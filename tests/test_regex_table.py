"""The regular expressions compiled ahead (`jaxprtool/regex_table.py`, `lazy.compile_pattern`):
the table holds every pattern the package declares, each entry compiles to the pattern
`re.compile` makes, a pattern or an engine the table was not written for is compiled by
`re`, and reading and printing a program compiles nothing with `re`'s (pure-Python) compiler
on the engine the table was written for."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from jaxprtool import lazy, regex_table

ROOT = Path(__file__).resolve().parent.parent
REGENERATE = (
    'run `python -c "from jaxprtool.lazy import write_regex_table; write_regex_table()"` '
    "to regenerate jaxprtool/regex_table.py"
)


def _python(code: str, *args: str) -> str:
    r = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=ROOT
    )
    assert r.returncode == 0, r.stderr
    return r.stdout.strip().splitlines()[-1]


def test_the_table_holds_every_pattern_the_package_declares():
    """In a fresh interpreter with every module of the package imported, the declared
    patterns are the table's keys (the engine code itself depends on the interpreter: the
    next test checks it against `re`)."""
    got = json.loads(
        _python(
            "import json, pkgutil, importlib, jaxprtool\n"
            "from jaxprtool import lazy\n"
            "for i in pkgutil.walk_packages(jaxprtool.__path__, 'jaxprtool.'):\n"
            "    if not i.name.endswith('__main__'):\n"
            "        importlib.import_module(i.name)\n"
            "print(json.dumps(sorted(repr(k) for k in lazy.DECLARED_PATTERNS)))"
        )
    )
    assert got == sorted(repr(k) for k in regex_table.TABLE), REGENERATE
    assert len(got) > 50  # (the package's patterns were found)


def _same(a: re.Pattern, b: re.Pattern) -> bool:
    """Equal patterns (flags, engine code and text: `re.Pattern.__eq__`) with the same
    groups."""
    return a == b and a.groups == b.groups and a.groupindex == b.groupindex


def test_each_entry_compiles_to_the_pattern_re_makes():
    """On the engine the table was written for, each entry is the pattern `re.compile`
    makes; on any other, the table is left unused and `re` compiles every pattern."""
    if regex_table.ENGINE == lazy.regex_engine():
        assert lazy._regex_table() is regex_table.TABLE
    else:
        assert lazy._regex_table() == {}
    for pattern, flags in regex_table.TABLE:
        assert _same(lazy.compile_pattern(pattern, flags), re.compile(pattern, flags)), pattern


def test_a_pattern_the_table_lacks_is_compiled_by_re():
    pattern = r"(?P<not_in_the_table>x+)y"
    assert (pattern, 0) not in regex_table.TABLE
    got = lazy.compile_pattern(pattern, re.I)
    assert _same(got, re.compile(pattern, re.I))
    assert got.fullmatch("XXy").group("not_in_the_table") == "XX"


#: `fmt` of FILE, counting the patterns `re`'s compiler compiles
COUNT_COMPILES = r"""
import json, sys
import re._compiler
from click.testing import CliRunner
from jaxprtool import lazy, regex_table
from jaxprtool.cli import main

compiled = []
compile = re._compiler.compile
re._compiler.compile = lambda p, flags=0: compiled.append(p) or compile(p, flags)
r = CliRunner().invoke(main, ["fmt", sys.argv[1]])
print(json.dumps({"rc": r.exit_code, "compiled": [repr(p) for p in compiled],
                  "ahead": regex_table.ENGINE == lazy.regex_engine()}))
"""


def test_reading_and_printing_a_program_compiles_no_pattern_with_re():
    """`fmt` of the attention sample (parameters, literals, a custom call: ~20 of the
    reader's patterns) compiles none with `re`'s compiler where the table was written for
    the engine, and compiles them all with it elsewhere."""
    got = json.loads(_python(COUNT_COMPILES, str(ROOT / "samples" / "attention.jaxpr")))
    assert got["rc"] == 0
    if got["ahead"]:
        assert got["compiled"] == []
    else:
        assert len(got["compiled"]) > 5
