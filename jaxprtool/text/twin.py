"""Which per-line loops run: the compiled twin or the Python reference.

The reader's loop over plain equation lines (`parser.fast.FastPath.read_run`) and the
printer's loop over ordinary equations (`printer._Printer._name_eqns`, with its backward walk
`_drop_unused`) each have a compiled twin in one C extension, `jaxprtool._twin` (jaxprtool/_twin.c), which `pip install` builds
where a C compiler is found (setup.py; without one the package installs without it, quietly).
The twin takes the lines it is sure of and hands every other one back to the Python loop,
which stays the reference and the fallback: it calls back into the Python functions for
every value, literal, type and name it prints, so both paths give the same bytes
(tests/test_twin.py).  `JAXPRTOOL_PURE_PYTHON=1` runs the Python loops alone;
`jaxprtool --version` says which ones run.

The AD builder's `bind` runs as the twin's `bind_fast_vars` where its operands are atoms and
its result types are given or remembered, and its `dce_eqns` runs its backward loop as
`dce_walk_vars` (`ad/builder.py`, whose Python lines stay the reference); the `dce` pass's
backward loop runs as `dce_sweep` over the equations known to hold no jaxpr
(`passes/dce.py`), and the `cse` and `simplify` passes' loops as `cse_sweep` and
`simplify_rules_sweep` over the equations they keep as they are (`passes/cse.py`,
`passes/simplify.py`: each hands every other equation back to the pass's Python step).

Imported only by the reader, the printer, the AD builder and the clean-up passes (the extension
loads on the first parse, printout, transformation or pass, never at start-up)."""

from __future__ import annotations

import functools

from ..core import UsageProblem
from ..env import flag

#: the slots the twin fills when it makes a `Var` or an `Eqn` (it stands down if they change)
VAR_FIELDS = ("type", "hint")
EQN_FIELDS = ("prim", "inputs", "outputs", "params", "loc", "bare_eq", "no_subjaxprs")
#: the twin's loops, and the AD builder's `bind` and dead code loop (a module without one
#: of them is an older build: it stands down)
#: (`drop_unread_vars` was `drop_unread`, and before it `drop_unused`, and `name_var_lines`
#: was `name_lines`: the printer's names, scope and sets held ids where they now hold the
#: Vars; `bind_fast_vars` and `dce_walk_vars` were `bind_fast` and `dce_walk`, whose sets held
#: ids where they now hold the Vars; `simplify_rules_sweep` was `simplify_sweep`, whose
#: rules were pairs, without `simplify_needs_constant`, and whose `configure` took no
#: parameter kinds: a module built before a change lacks the new name, and is not used)
FUNCTIONS = (
    "read_lines",
    "name_var_lines",
    "drop_unread_vars",
    "lay_lines_until",
    "render_eqn",
    "bind_fast_vars",
    "dce_walk_vars",
    "dce_sweep",
    "cse_sweep",
    "simplify_rules_sweep",
)


def twin():
    """The compiled module, ready, or None: not built here, or JAXPRTOOL_PURE_PYTHON set."""
    if flag("JAXPRTOOL_PURE_PYTHON"):
        return None
    return _load()


@functools.cache
def _load():
    try:
        from .. import _twin
    except ImportError:
        return None
    from ..core import _KIND_OF_TYPE, _LEAF, Eqn, Loc, Var

    if Var.__slots__ != VAR_FIELDS or Eqn._fields != EQN_FIELDS:
        return None
    if not all(hasattr(_twin, f) for f in FUNCTIONS):
        return None  # (built from an older _twin.c: the Python loops run until it is rebuilt)
    var_slots = tuple(Var.__dict__[f] for f in VAR_FIELDS)
    eqn_slots = tuple(Eqn.__dict__[f] for f in EQN_FIELDS)
    _twin.configure(Var, var_slots, Eqn, eqn_slots, Loc, _KIND_OF_TYPE, _LEAF)
    return _twin


def describe() -> str:
    """The `--version` line: which loops read and print (a bad value of the variable is
    said there: `--version` runs before the variables are checked)."""
    try:
        pure = flag("JAXPRTOOL_PURE_PYTHON")
    except UsageProblem as e:
        return f"reader and printer: {e.message}"
    if pure:
        return "reader and printer: pure Python (JAXPRTOOL_PURE_PYTHON is set)"
    if _load() is None:
        return "reader and printer: pure Python (the compiled module jaxprtool._twin is not built)"
    return "reader and printer: compiled (jaxprtool._twin)"
