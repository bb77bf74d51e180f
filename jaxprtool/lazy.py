"""Modules executed on first use, functions made on first use, regular expressions compiled
on first use.

Reading and printing a program needs neither numpy nor ml_dtypes unless its text holds a
numpy value (a dtype parameter, an array literal): `jaxprtool fmt` of such a program never
pays their import (~0.1 s of a 0.3 s start-up).  `np` and `ml_dtypes` here are the real
modules once any code touches an attribute of them; the modules that use them write `from
.lazy import np`.  The families name the package's own modules that only some commands run
(the vmap machinery, the passes' helpers) the same way (`lazy_module`), and the rules those
modules' factories make as `MadeOnUse`.  A module's regular expressions are `LazyPattern`s:
most commands never use most of them."""

from __future__ import annotations

import _sre
import importlib
import importlib.util
import os
import re
import sys
import threading
from types import ModuleType


class _LoadedDuringImport:
    """Keeps a submodule of a lazy module from being executed twice.  (A finder and loader
    by its methods: `importlib.abc`'s base classes would import `importlib.resources`,
    ~5 ms of start-up.)

    Importing `numpy._core._multiarray_umath` (jaxlib's C extension does, as it starts)
    while numpy is still lazy makes importlib read `numpy.__path__`, which executes numpy,
    which imports `numpy._core`; importlib then loads `numpy._core` a second time, a copy
    without its submodule attributes (`AttributeError: module 'numpy._core' has no attribute
    '_multiarray_umath'` in scipy, which check-grad of a linalg program imports).  Asked
    for a submodule of a lazy module that is already in `sys.modules`, this finder hands
    back that module instead of a second copy."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname.partition(".")[0] in _LAZY and fullname in sys.modules:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        return sys.modules[spec.name]

    def exec_module(self, module):
        return None


#: names of the modules made lazy here
_LAZY: set[str] = set()


def lazy_module(name: str, *, import_binds: bool = False) -> ModuleType:
    """`name` as a module that is executed on its first attribute access; the module itself
    when it is already imported.  It stands in `sys.modules` (and, for a submodule, in its
    package) from now on, so that any import of it elsewhere gets this one module: two
    families imported at once by two threads get the same one.  With `import_binds`, an
    `import name` statement elsewhere binds it without executing it (`_ExecutedOnFirstRead`):
    for a module of the standard library that a dependency imports and the common paths
    never use."""
    parent, _, child = name.rpartition(".")
    if parent:
        # (imported before the lock is taken: a package's import may wait for another
        # thread's, which may be asking for a lazy module of its own)
        importlib.import_module(parent)
    with _CREATING:
        if name in sys.modules:
            return sys.modules[name]
        if not _LAZY:
            sys.meta_path.insert(0, _LoadedDuringImport())
        _LAZY.add(name)
        module = importlib.util.module_from_spec(importlib.util.find_spec(name))
        module.__class__ = _ExecutedOnFirstRead if import_binds else _ExecutedOnFirstUse
        sys.modules[name] = module
        if parent:
            setattr(sys.modules[parent], child, module)  # as the import system binds one
    return module


#: held while a lazy module is made (`lazy_module`)
_CREATING = threading.Lock()


#: held while a lazy module executes; re-entrant, as the module's own import reads it
_LOADING = threading.RLock()
#: ids of the lazy modules being executed (by the thread that holds `_LOADING`)
_EXECUTING: set[int] = set()


class _ExecutedOnFirstUse(ModuleType):
    """A module not executed yet: the first attribute read executes it, and it becomes a
    plain module.  One thread executes it while the others wait (importlib's LazyLoader let
    a second thread read a half-executed module before Python 3.12.3: `module 'numpy' has no
    attribute 'zeros'` in 7 threads of 8 on 3.12.1, and the library may be called from
    threads); a read during its own execution (its submodules importing it) sees it as it
    stands, as any import cycle does.  The logic of CPython 3.12.3's LazyLoader."""

    def __getattribute__(self, attr):
        with _LOADING:
            if type(self) is not ModuleType:  # (not executed yet)
                if id(self) in _EXECUTING:
                    return ModuleType.__getattribute__(self, attr)
                _execute(self)
        return getattr(self, attr)


class _ExecutedOnFirstRead(_ExecutedOnFirstUse):
    """A module not executed yet that an `import` statement binds as it is: the statement
    reads only its `__spec__` (whether it is being initialised), which is answered without
    executing it; any other attribute read executes it."""

    def __getattribute__(self, attr):
        if attr == "__spec__" and type(self) is not ModuleType:
            return ModuleType.__getattribute__(self, attr)
        return _ExecutedOnFirstUse.__getattribute__(self, attr)


def _execute(module: ModuleType) -> None:
    _EXECUTING.add(id(module))
    try:
        object.__getattribute__(module, "__spec__").loader.exec_module(module)
        module.__class__ = ModuleType
    finally:
        _EXECUTING.discard(id(module))


class MadeOnUse:
    """The function `factory(*args)` of the module `module` makes, made the first time it is
    called: a family names a rule that a helper of a module only some commands run makes
    (`batching.vectorized(name)`), and importing the family does not import that module
    (the vmap machinery, ~50 KB of bytecode that `fmt` and `grad` never run).  Each call
    goes through to the made function; `__wrapped__` is it (error messages name it)."""

    __slots__ = ("module", "factory", "args", "_made")

    def __init__(self, module: str, factory: str, *args) -> None:
        self.module = module
        self.factory = factory
        self.args = args
        self._made = None

    @property
    def __wrapped__(self):
        made = self._made
        if made is None:
            # (two threads may make it at once: the factories make equal functions)
            made = getattr(importlib.import_module(self.module), self.factory)(*self.args)
            self._made = made
        return made

    def __call__(self, *args, **kwargs):
        return (self._made or self.__wrapped__)(*args, **kwargs)

    def __repr__(self) -> str:
        args = ", ".join(map(repr, self.args))
        return f"<{self.module}.{self.factory}({args}), made on first use>"


class LazyPattern:
    """`re.compile(pattern, flags)`, compiled when first used: a module's regular expressions
    compiled as it is imported cost every command's start-up (~40 of them, 1.5 ms of `fmt`),
    where a command uses few or none (an error message's, a rare syntax's).  The first use
    copies the compiled pattern's methods onto this object, so that a call costs what the
    compiled pattern's does.  (Not a `re.Pattern`: give `re` functions its `.pattern`.)"""

    def __init__(self, pattern: str | bytes, flags: int = 0) -> None:
        self.pattern = pattern
        self.flags = flags
        declare_pattern(pattern, flags)

    def __getattr__(self, name: str):
        # (only for what the instance does not hold yet: the compiled pattern's methods)
        compiled = compile_pattern(self.pattern, self.flags)
        for attr in _PATTERN_METHODS:
            setattr(self, attr, getattr(compiled, attr))
        return getattr(compiled, name)


#: what a compiled pattern does (match, search, finditer, ...)
_PATTERN_METHODS = tuple(n for n, v in vars(re.Pattern).items() if callable(v) and n[0] != "_")

#: (pattern, flags) of every regular expression the package compiles on first use
#: (`LazyPattern`, `text.grammar`), in the order declared: what `jaxprtool/regex_table.py`
#: holds compiled ahead
DECLARED_PATTERNS: dict[tuple[str | bytes, int], None] = {}


def declare_pattern(pattern: str | bytes, flags: int = 0) -> None:
    DECLARED_PATTERNS[pattern, int(flags)] = None


def compile_pattern(pattern: str | bytes, flags: int = 0) -> re.Pattern:
    """`re.compile(pattern, flags)`, from the engine code `regex_table` holds for it when the
    table was written for this Python's engine: `re`'s compiler is pure Python (~0.1 ms a
    pattern, ~3 ms of the ~30 patterns reading a program uses), the engine's constructor C
    (a microsecond).  Any other pattern or engine is compiled by `re`: the table only ever
    saves time (tests/test_regex_table.py checks each entry against `re.compile`)."""
    entry = _regex_table().get((pattern, int(flags)))
    if entry is None:
        return re.compile(pattern, flags)
    final_flags, code, groups, groupindex, indexgroup = entry
    return _sre.compile(pattern, final_flags, list(code), groups, groupindex, indexgroup)


def regex_engine() -> tuple:
    """What the engine code of a compiled pattern depends on: the interpreter, its version
    and the engine's own stamp (`_sre.MAGIC`, bumped when its code changes)."""
    return (sys.implementation.name, sys.version_info[:2], _sre.MAGIC, _sre.CODESIZE)


#: `regex_table.TABLE` when it was written for this engine, else empty (loaded on first use)
_TABLE: list[dict] = []


def _regex_table() -> dict:
    if not _TABLE:
        from . import regex_table

        _TABLE.append(regex_table.TABLE if regex_table.ENGINE == regex_engine() else {})
    return _TABLE[0]


def _engine_code(pattern: str | bytes, flags: int) -> tuple:
    """What `re.compile(pattern, flags)` hands the engine's constructor after its pattern
    (as `re._compiler.compile`)."""
    import re._compiler as compiler  # (private: only this writer uses it)
    import re._parser as parser

    parsed = parser.parse(pattern, flags)
    code = compiler._code(parsed, flags)
    groupindex = parsed.state.groupdict
    indexgroup = [None] * parsed.state.groups
    for name, i in groupindex.items():
        indexgroup[i] = name
    return (
        int(flags | parsed.state.flags),
        tuple(map(int, code)),
        parsed.state.groups - 1,
        dict(groupindex),
        tuple(indexgroup),
    )


def regex_table_source() -> str:
    """The text of `jaxprtool/regex_table.py`: the engine code of every pattern the package
    declares, with every module of the package imported (each declares its own)."""
    import pkgutil

    package = os.path.dirname(os.path.abspath(__file__))
    for info in pkgutil.walk_packages([package], f"{__package__}."):
        if not info.name.endswith("__main__"):
            importlib.import_module(info.name)
    lines = [
        '"""Generated by `python -c "from jaxprtool.lazy import write_regex_table; '
        'write_regex_table()"`',
        "(tests/test_regex_table.py checks it): the engine code of the package's regular",
        'expressions, compiled ahead for the engine `ENGINE` (`lazy.compile_pattern`)."""',
        "",
        "# fmt: off",
        f"ENGINE = {regex_engine()!r}",
        "TABLE = {",
    ]
    for key in sorted(DECLARED_PATTERNS, key=repr):
        lines.append(f"    {key!r}: {_engine_code(*key)!r},")
    lines.append("}")
    return "\n".join(lines) + "\n"


def write_regex_table() -> None:
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "regex_table.py")
    with open(path, "w", encoding="utf-8") as f:
        f.write(regex_table_source())


np = lazy_module("numpy")
ml_dtypes = lazy_module("ml_dtypes")


def numpy_loaded() -> bool:
    """Whether numpy has been executed: before, no value can be a numpy object, so a type
    test can answer without importing it."""
    return type(np) is ModuleType


#: numpy's own element types, none of which ml_dtypes defines: their dtype needs no
#: ml_dtypes import (~0.1 s of a process's start-up), and can be a `DTypeName`
NUMPY_DTYPES = frozenset(
    "bool int8 int16 int32 int64 uint8 uint16 uint32 uint64 float16 float32 float64 "
    "complex64 complex128".split()
)

#: while on (`text.values.light_dtypes`), a dtype numpy itself defines is made as a
#: `DTypeName` (by the parser and by `core.dtype_value`)
LIGHT_DTYPES = [False]

#: the kind letter (as `np.dtype.kind`) of each family of numpy's own dtype names
_KINDS = (("bool", "b"), ("uint", "u"), ("int", "i"), ("float", "f"), ("complex", "c"))


class DTypeName:
    """A dtype parameter of numpy's own (`float32`, `int32`) in a command that reads,
    transforms and prints a program (`fmt`, `check`, the AD commands): its name, and the
    `np.dtype` only when something asks more of it than its name, kind and size.  numpy's
    import is ~0.05 s CPU, a quarter of `grad` of a transformer.  It compares and hashes as
    the `np.dtype` it names (hashing imports numpy: keys use its name, `dtype_key`)."""

    __slots__ = ("name", "_dtype", "kind", "itemsize")
    names = None  # as np.dtype(name).names: no structured dtype is read this way

    def __init__(self, name: str) -> None:
        self.name = name
        self._dtype = None
        self.kind = next(k for prefix, k in _KINDS if name.startswith(prefix))
        digits = name.lstrip("abcdefghijklmnopqrstuvwxyz")
        self.itemsize = int(digits) // 8 if digits else 1  # bool: one byte

    @property
    def dtype(self):
        """The `np.dtype` (also what `np.dtype(self)` reads)."""
        if self._dtype is None:
            self._dtype = np.dtype(self.name)
        return self._dtype

    def __getattr__(self, attr):
        return getattr(self.dtype, attr)

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return repr(self.dtype)

    def __eq__(self, other) -> bool:
        if isinstance(other, DTypeName):
            return self.name == other.name
        return self.dtype == other

    def __hash__(self) -> int:
        return hash(self.dtype)


def is_dtype(v) -> bool:
    return v.__class__ is DTypeName or (numpy_loaded() and isinstance(v, np.dtype))


def dtype_key(v):
    """A dtype's stand-in in a hashed key: its name for a `DTypeName` and for the `np.dtype`
    it names (equal keys, without numpy), the dtype itself for any other."""
    if v.__class__ is DTypeName:
        return v.name
    hit = _NP_DTYPE_KEYS.get(id(v))
    if hit is not None and hit[0] is v:
        return hit[1]
    name = v.name
    key = name if name in NUMPY_DTYPES and v.names is None and v.isnative else v
    if len(_NP_DTYPE_KEYS) > 1000:
        _NP_DTYPE_KEYS.clear()
    _NP_DTYPE_KEYS[id(v)] = (v, key)
    return key


#: id(np.dtype) -> (the dtype, its `dtype_key`), the dtype kept alive so that the id stays
#: its own: an np.dtype's `name` is a Python-level property of numpy's (5 us), asked of
#: every dot_general's preferred_element_type when the checker keys the equation
_NP_DTYPE_KEYS: dict[int, tuple] = {}


def is_integer(v) -> bool:
    """An int or a numpy integer scalar (numpy is not imported to tell)."""
    return isinstance(v, int) or (numpy_loaded() and isinstance(v, np.integer))


def is_numpy_scalar(v) -> bool:
    return numpy_loaded() and isinstance(v, np.generic)
