"""The layout the records promise, measured on the source ("one primitive, one place").

- each probe primitive is named (a string literal equal to its name) only in the family
  modules that define it (`families/index.py`) and the emit layer (`ad/ops.py`);
- no import cycle among the jaxprtool modules, nor among the scripts of each bench/ folder
  (every import, including those inside functions and under `if TYPE_CHECKING:`, read with
  `ast`; a failure names a cycle, `a -> b -> a`);
- nothing in `jaxprtool/ui/` reads a rule registry (`ad/registry.py`, the plugins'): the UI
  learns what the walks did from their observers (`ad/observe.py`).
"""

from __future__ import annotations

import ast
import functools
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


@functools.cache
def _modules() -> dict[str, ast.Module]:
    """The package's modules, parsed once, when a test first asks (not at collection)."""
    return {
        p.relative_to(PKG).as_posix(): ast.parse(p.read_text(), str(p))
        for p in sorted(PKG.rglob("*.py"))
    }


@functools.cache
def _string_constants() -> dict[str, dict[str, list[int]]]:
    """Every string constant of the package: value -> {module: its lines} (one walk of the
    modules' trees for all the probes)."""
    found: dict[str, dict[str, list[int]]] = {}
    for rel, tree in _modules().items():
        for n in ast.walk(tree):
            if isinstance(n, ast.Constant) and isinstance(n.value, str):
                found.setdefault(n.value, {}).setdefault(rel, []).append(n.lineno)
    return found


def _names_in(rel: str, name: str) -> list[int]:
    """The lines of module `rel` where the string constant `name` appears."""
    return _string_constants().get(name, {}).get(rel, [])


@pytest.mark.parametrize("name", PROBES)
def test_a_primitive_is_named_only_in_its_family_and_the_emit_layer(name):
    allowed = EMIT_LAYER | {f"families/{f}.py" for f in FAMILIES_OF[name]}
    allowed.add("families/index.py")
    offenders = [
        f"{rel}:{line}" for rel in _modules() if rel not in allowed for line in _names_in(rel, name)
    ]
    assert offenders == [], f"'{name}' is named outside its family ({sorted(allowed)})"


def test_the_probe_measurement_sees_a_name():
    """The measurement above finds what it looks for (it would not pass vacuously)."""
    assert _names_in("families/shape.py", "reshape")
    assert _names_in("families/while_loop.py", "while")
    assert _names_in("ad/ops.py", "dot_general")


def _module_name(rel: str) -> str:
    parts = ["jaxprtool", *rel[: -len(".py")].split("/")]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(me: str, is_package: bool, tree: ast.Module, known: set[str]) -> set[str]:
    """The modules of `known` that module `me` imports: every import, at module level,
    inside a function or under `if TYPE_CHECKING:` (an import moved out of the way of a
    cycle is still the cycle)."""
    package = me if is_package else me.rpartition(".")[0]
    out: set[str] = set()
    for n in ast.walk(tree):
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


def _a_cycle(graph: dict[str, set[str]], component: list[str]) -> str:
    """One shortest cycle through the first module of a component: `a -> b -> a`."""
    start = component[0]
    came_from = {start: start}
    todo = [start]
    for v in todo:  # breadth first
        for w in sorted(graph[v] & set(component)):
            if w == start:
                path = [v]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return " -> ".join([start, *reversed(path[:-1]), start])
            if w not in came_from:
                came_from[w] = v
                todo.append(w)
    raise AssertionError(f"{component} is not a cycle")


def _named_cycles(graph: dict[str, set[str]]) -> list[str]:
    return [_a_cycle(graph, c) for c in _cycles(graph)]


@functools.cache
def _import_graph() -> dict[str, set[str]]:
    """Who imports whom in the package (its `__init__`, the top package, included): made
    once, for the four tests that read it (none changes it)."""
    known = {_module_name(rel) for rel in _modules()}
    compiled = {f"{PKG.name}.{c.stem}" for c in PKG.glob("*.c")}  # (`_twin`: imports none)
    graph = {
        _module_name(rel): _imports(
            _module_name(rel), rel.endswith("__init__.py"), tree, known | compiled
        )
        for rel, tree in _modules().items()
    }
    return graph | {name: set() for name in compiled}


#: the folders of scripts under bench/: each imports its siblings by name (`sys.path`)
BENCH_FOLDERS = ("bench", "bench/device")


def _script_graph(folder: Path) -> dict[str, set[str]]:
    trees = {p.stem: ast.parse(p.read_text(), str(p)) for p in sorted(folder.glob("*.py"))}
    return {name: _imports(name, False, tree, set(trees)) for name, tree in trees.items()}


def test_no_import_cycle_among_the_modules():
    assert _named_cycles(_import_graph()) == []


@pytest.mark.parametrize("folder", BENCH_FOLDERS)
def test_no_import_cycle_among_the_bench_scripts(folder):
    assert _named_cycles(_script_graph(PKG.parent / folder)) == []


def test_the_cycle_finder_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c", "a"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]
    assert _named_cycles(graph) == ["a -> b -> a"]
    graph = _import_graph()
    assert "jaxprtool.ad.builder" in graph["jaxprtool.ad.ops"]  # the graph has the edges
    assert "jaxprtool.text.parser.fast" in graph["jaxprtool.text.parser.state"]
    assert "bench_ad" in _script_graph(PKG.parent / "bench")["bench_memory"]


def test_every_kind_of_import_is_an_edge():
    """Imports inside a function and under `if TYPE_CHECKING:` count (a cycle dodged by
    either is still reported), relative ones resolved from the package."""
    sources = {
        "p.a": "from .b import x\n",
        "p.b": "def f():\n    from . import c\n",
        "p.c": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from p.a import T\n",
    }
    known = set(sources)
    graph = {m: _imports(m, False, ast.parse(src), known) for m, src in sources.items()}
    assert _named_cycles(graph) == ["p.a -> p.b -> p.c -> p.a"]


#: the rule registries: the helpers' tables, the plugins' own, the custom-rule notes
REGISTRIES = {"jaxprtool.ad.registry", "jaxprtool.plugins"}


def test_no_rule_registry_is_read_in_the_ui():
    graph = _import_graph()
    offenders = [
        f"{_module_name(rel)} imports {mod}"
        for rel in _modules()
        if rel.startswith("ui/")
        for mod in sorted(graph[_module_name(rel)] & REGISTRIES)
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


def _reached_from(graph: dict[str, set[str]], start: str) -> dict[str, str]:
    """The modules `start` imports, directly or through others: module -> the one that
    imports it on a shortest path from `start`."""
    came_from = {start: ""}
    todo = [start]
    for v in todo:  # breadth first
        for w in sorted(graph[v]):
            if w not in came_from:
                came_from[w] = v
                todo.append(w)
    return came_from


def _path(came_from: dict[str, str], module: str) -> str:
    path = [module]
    while came_from[path[-1]]:
        path.append(came_from[path[-1]])
    return " -> ".join(reversed(path))


def test_the_library_api_imports_nothing_from_the_command_line():
    """`jaxprtool.api` and every module it imports (every import, those inside functions
    included) import nothing from `jaxprtool/commands/` nor `jaxprtool.cli`: the library
    never borrows from the command line (issue 47, item 2).  (`cli` loads the commands by
    name, `importlib`, which this graph does not see: it is the command line's own.)"""
    graph = _import_graph()
    came_from = _reached_from(graph, "jaxprtool.api")
    assert "jaxprtool.ad.api" in came_from  # the measurement sees the API's own imports
    command_line = [
        _path(came_from, m)
        for m in sorted(came_from)
        if m.startswith("jaxprtool.commands") or m == "jaxprtool.cli"
    ]
    assert command_line == []
