"""The layout the records promise, measured on the source ("one primitive, one place").

- each probe primitive is named (a string literal equal to its name) only in the family
  modules that define it (`families/index.py`) and the emit layer (`ad/ops.py`);
- no import cycle among the jaxprtool modules (every import, including those inside
  functions, read with `ast`);
- nothing in `jaxprtool/ui/` reads a rule registry (`ad/registry.py`, the plugins'): the UI
  learns what the walks did from their observers (`ad/observe.py`).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import jaxprtool
from jaxprtool.families.index import FAMILIES_OF

PKG = Path(jaxprtool.__file__).parent
#: the emit layer: `ops.reshape(x, shape)` binds reshape
EMIT_LAYER = {"ad/ops.py"}
#: primitives of every kind of family: elementwise, shape, linalg, control flow, calls
PROBES = (
    "reshape",
    "dot_general",
    "scan",
    "while",
    "named_call",
    "closed_call",
    "broadcast_in_dim",
    "custom_vjp_call",
    "cond",
    "sin",
)


def _modules() -> dict[str, ast.Module]:
    return {
        p.relative_to(PKG).as_posix(): ast.parse(p.read_text(), str(p))
        for p in sorted(PKG.rglob("*.py"))
    }


MODULES = _modules()


def _names_in(tree: ast.Module, name: str) -> list[int]:
    return [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Constant) and n.value == name]


@pytest.mark.parametrize("name", PROBES)
def test_a_primitive_is_named_only_in_its_family_and_the_emit_layer(name):
    allowed = EMIT_LAYER | {f"families/{f}.py" for f in FAMILIES_OF[name]}
    allowed.add("families/index.py")
    offenders = [
        f"{rel}:{line}"
        for rel, tree in MODULES.items()
        if rel not in allowed
        for line in _names_in(tree, name)
    ]
    assert offenders == [], f"'{name}' is named outside its family ({sorted(allowed)})"


def test_the_probe_measurement_sees_a_name():
    """The measurement above finds what it looks for (it would not pass vacuously)."""
    assert _names_in(MODULES["families/shape.py"], "reshape")
    assert _names_in(MODULES["families/while_loop.py"], "while")
    assert _names_in(MODULES["ad/ops.py"], "dot_general")


def _module_name(rel: str) -> str:
    parts = ["jaxprtool", *rel[: -len(".py")].split("/")]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_only(tree: ast.Module) -> set[int]:
    """The ids of the imports under `if TYPE_CHECKING:` (for annotations: never run)."""
    skip: set[int] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test):
            skip.update(id(m) for stmt in n.body for m in ast.walk(stmt))
    return skip


def _imports(rel: str, tree: ast.Module, known: set[str]) -> set[str]:
    """The jaxprtool modules `rel` imports, at module level or inside functions (not those
    only type checkers read)."""
    me = _module_name(rel)
    package = me if rel.endswith("__init__.py") else me.rpartition(".")[0]
    skip = _type_checking_only(tree)
    out: set[str] = set()
    for n in ast.walk(tree):
        if id(n) in skip:
            continue
        if isinstance(n, ast.Import):
            out.update(a.name for a in n.names if a.name in known)
        elif isinstance(n, ast.ImportFrom):
            if n.level:
                base = package.split(".")
                base = base[: len(base) - (n.level - 1)]
                mod = ".".join(base + ([n.module] if n.module else []))
            else:
                mod = n.module or ""
            for a in n.names:
                sub = f"{mod}.{a.name}"
                if sub in known:
                    out.add(sub)  # `from . import ops`: the module ops
                elif mod in known:
                    out.add(mod)
    out.discard(me)
    return out


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _import_graph() -> dict[str, set[str]]:
    """Who imports whom.  An import of the top package itself (`jaxprtool.__version__`, its
    path) is left out: every module is below it, and what they read of it is set before its
    facade imports the public API (`jaxprtool/api.py`)."""
    known = {_module_name(rel) for rel in MODULES}
    graph = {_module_name(rel): _imports(rel, tree, known) for rel, tree in MODULES.items()}
    return {m: deps - {"jaxprtool"} for m, deps in graph.items()}


#: cycles still there, each with the work that removes it (a new cycle fails the test)
def test_no_import_cycle_among_the_modules():
    assert _cycles(_import_graph()) == []


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    graph = _import_graph()
    assert "jaxprtool.ad.builder" in graph["jaxprtool.ad.ops"]  # the graph has the edges


#: the rule registries: the helpers' tables, the plugins' own, the custom-rule notes
REGISTRIES = {"jaxprtool.ad.registry", "jaxprtool.plugins"}


def test_no_rule_registry_is_read_in_the_ui():
    known = {_module_name(rel) for rel in MODULES}
    offenders = [
        f"{rel} imports {mod}"
        for rel, tree in MODULES.items()
        if rel.startswith("ui/")
        for mod in sorted(_imports(rel, tree, known) & REGISTRIES)
    ]
    assert offenders == []


def test_a_batching_rule_loads_with_its_family():
    """Families load on demand (`families/index.py`): asking a fresh process for a
    primitive's batching rule loads the family that defines it, which holds the rule."""
    import subprocess
    import sys

    code = (
        "import sys, jaxprtool\n"
        "from jaxprtool.record import prim\n"
        f"print([prim(n).batching is not None for n in {list(PROBES)!r}])\n"
        "print(sorted(m.rpartition('.')[2] for m in sys.modules"
        " if m.startswith('jaxprtool.families.') and m != 'jaxprtool.families.index'))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=PKG.parent
    ).stdout.splitlines()
    assert ast.literal_eval(out[0]) == [True] * len(PROBES)
    loaded = set(ast.literal_eval(out[1]))
    assert "random" not in loaded and "equinox" not in loaded  # only the probes' families
