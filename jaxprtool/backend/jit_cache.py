"""The programs under `jax.jit` this process made, found again by their content.

A command that runs, checks or measures a program traces and compiles it through `jax.jit`
of `as_jax_function(jaxpr, ...)`, a new Python function per call: JAX's own caches key on the
function object, so a second program object of the same content (the same file read again, the
same gradient built again: `explain` and `check-grad` build several) was traced and compiled by
XLA again.  `shared_jit` hands back the `jax.jit` made before for a program whose content and
way of running are equal:

* `program_key` is the content, exactly: every equation's primitive, parameters (nested jaxprs
  walked, floats by their bits, arrays by dtype, shape and bytes), operands, binders with
  their types and names, and source location (so the module name and every message the
  trace raises are those of the caller's own file and line); a value it cannot spell exactly
  gives no key, and that program is jitted afresh as before;
* `variant` is how `as_jax_function` runs it (`sharding.run_variant`: the kind of function,
  symbolic sizes, nested constants, the run's --mesh and platform), and the implementations
  plugins gave `IMPLS` for the primitives it binds (a plugin of another primitive leaves
  its key as it was);
* JAX's `jax.jit` keys the rest itself: the arguments' shapes, dtypes, weak types and
  shardings, and its trace context (64-bit mode, default device, matmul precision, mesh).

What is kept is the jitted function, whose cache holds executables; never a result or a
message (a failed trace is not cached by JAX, and is raised again by the next call).  At most
`SIZE` programs are kept, the least recently used dropped first.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from ..core import Eqn, Jaxpr, Literal, Var
from ..frozen import Frozen
from ..lazy import np, numpy_loaded

#: programs kept (each with the executables JAX compiled for it)
SIZE = 48

_CACHE: OrderedDict = OrderedDict()
_LOCK = threading.Lock()


def shared_jit(jaxpr: Jaxpr, variant: tuple, make):
    """`make()` (a `jax.jit` of `jaxpr` run as `variant` says: `sharding.run_variant`), or
    the one made before for a program of equal `program_key` and `variant`."""
    keyer = _Keyer()
    content = keyer.key(jaxpr)
    if content is None:
        return make()
    from .evaluator import IMPLS

    plugins = tuple((p, IMPLS[p]) for p in sorted(keyer.prims) if p in IMPLS)
    key = (content, variant, plugins)
    with _LOCK:
        fn = _CACHE.get(key)
        if fn is not None:
            _CACHE.move_to_end(key)
            return fn
    fn = make()
    with _LOCK:
        fn = _CACHE.setdefault(key, fn)
        while len(_CACHE) > SIZE:
            _CACHE.popitem(last=False)
    return fn


def clear() -> None:
    """Forget every program kept."""
    with _LOCK:
        _CACHE.clear()


class Unkeyable(Exception):
    """A value `program_key` cannot spell exactly."""


def program_key(jaxpr: Jaxpr) -> tuple | None:
    """A hashable value equal for two programs exactly when they are the same program, down
    to variable names and source locations (None: one of its values has no exact spelling)."""
    return _Keyer().key(jaxpr)


class _Keyer:
    """Walks a program, numbering its binders and its jaxprs in the order met."""

    def __init__(self):
        self.vars: dict[int, int] = {}
        self.jaxprs: dict[int, int] = {}
        self.prims: set[str] = set()  # (every equation's, nested jaxprs' too)

    def key(self, j: Jaxpr) -> tuple | None:
        """`program_key` of `j`."""
        try:
            return self.jaxpr(j)
        except Unkeyable:
            return None

    def jaxpr(self, j: Jaxpr) -> tuple:
        if id(j) in self.jaxprs:  # a jaxpr met before (shared by several equations)
            return ("seen", self.jaxprs[id(j)])
        self.jaxprs[id(j)] = len(self.jaxprs)
        return (
            "jaxpr",
            self.binders(j.constvars),
            self.binders(j.invars),
            tuple(self.eqn(e) for e in j.eqns),
            tuple(self.atom(a) for a in j.outvars),
            self.value(j.effects),
        )

    def eqn(self, e: Eqn) -> tuple:
        self.prims.add(e.prim)
        inputs = tuple(self.atom(a) for a in e.inputs)
        params = tuple((k, self.value(v)) for k, v in e.params.items())
        return (e.prim, inputs, params, self.binders(e.outputs), self.value(e.loc), e.bare_eq)

    def binders(self, vs) -> tuple:
        out = []
        for v in vs:
            if not isinstance(v, Var):
                raise Unkeyable(type(v))
            self.vars[id(v)] = len(self.vars)
            out.append((self.value(v.type), v.hint))
        return tuple(out)

    def atom(self, a) -> tuple:
        if isinstance(a, Literal):
            return ("lit", self.value(a.value), self.value(a.type), a.typed)
        n = self.vars.get(id(a)) if isinstance(a, Var) else None
        if n is None:  # (not bound before its use: not a program this walk can spell)
            raise Unkeyable(a)
        return ("var", n)

    def value(self, x):
        """`x` as a hashable value that equals another's exactly when the two are the same
        (types kept: 1, 1.0 and True differ; floats by their bits: 0.0 and -0.0 differ)."""
        t = type(x)
        if x is None or t in (bool, int, str, bytes):
            return (t, x)
        if isinstance(x, float):
            return (t, float(x).hex())
        if isinstance(x, complex):
            return (t, x.real.hex(), x.imag.hex())
        if isinstance(x, Jaxpr):
            return self.jaxpr(x)
        if isinstance(x, (tuple, list)):  # (a NamedTuple, a list subclass: by their type)
            return (t, tuple(self.value(v) for v in x))
        if isinstance(x, (set, frozenset)):
            return (t, frozenset(self.value(v) for v in x))
        if isinstance(x, dict):
            return (t, tuple((self.value(k), self.value(v)) for k, v in x.items()))
        if isinstance(x, Frozen) and t.__eq__ is not object.__eq__:
            return (t, tuple(self.value(getattr(x, f)) for f in t._fields))
        return self.numpy_value(x)

    @staticmethod
    def numpy_value(x):
        """A numpy array, scalar or dtype by its dtype, shape and bytes; anything else is
        Unkeyable."""
        if not numpy_loaded():  # (a value of numpy's exists only once it is loaded)
            raise Unkeyable(type(x))
        if isinstance(x, (np.ndarray, np.generic)) and x.dtype.kind != "O":
            return (type(x), x.dtype.str, x.dtype.name, x.shape, np.ascontiguousarray(x).tobytes())
        if isinstance(x, np.dtype):
            return (np.dtype, x.str, x.name)
        raise Unkeyable(type(x))
