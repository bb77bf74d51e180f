"""The typed IR: types, variables, literals, equations and jaxprs.

Names are not part of a variable's identity: a `Var` is an object, compared by
identity, and the printer chooses its name.  `Jaxpr` objects are compared by
identity too (so the printer can find shared sub-jaxprs); structural equality
up to renaming is `alpha_equal`.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import gc
from marshal import dumps as _marshal_dumps
from typing import Any, NamedTuple

from .frozen import Frozen, set_field
from .lazy import LIGHT_DTYPES, NUMPY_DTYPES, DTypeName, dtype_key, is_dtype, ml_dtypes, np

# ---------------------------------------------------------------- dtypes

#: short dtype name (as printed in a type) -> numpy dtype name (as printed in params)
SHORT_TO_LONG = {
    "bool": "bool",
    "f16": "float16",
    "bf16": "bfloat16",
    "f32": "float32",
    "f64": "float64",
    "c64": "complex64",
    "c128": "complex128",
    "i4": "int4",
    "i8": "int8",
    "i16": "int16",
    "i32": "int32",
    "i64": "int64",
    "u4": "uint4",
    "u8": "uint8",
    "u16": "uint16",
    "u32": "uint32",
    "u64": "uint64",
    "float0": "float0",
}
LONG_TO_SHORT = {v: k for k, v in SHORT_TO_LONG.items()}


def short_dtype_name(long_name: str) -> str:
    """numpy name -> printed short name, following JAX's rule (float->f, int->i, ...)."""
    if long_name in LONG_TO_SHORT:
        return LONG_TO_SHORT[long_name]
    for long, short in (("float", "f"), ("uint", "u"), ("int", "i"), ("complex", "c")):
        if long_name.startswith(long):
            return short + long_name[len(long) :]
    return long_name


def long_dtype_name(short: str) -> str:
    """printed short name -> numpy name (f8_e4m3fn -> float8_e4m3fn)."""
    if short in SHORT_TO_LONG:
        return SHORT_TO_LONG[short]
    for long, s in (("float", "f"), ("uint", "u"), ("int", "i"), ("complex", "c")):
        if short.startswith(s) and short[len(s) : len(s) + 1].isdigit():
            return long + short[len(s) :]
    return short


@functools.cache
def float0() -> np.dtype:
    """JAX's float0: the dtype of tangents of integer and boolean values."""
    return np.dtype([("float0", np.void, 0)])


def np_dtype(short: str) -> np.dtype:
    """The numpy dtype of a short dtype name; raises KeyError for unknown names."""
    long = long_dtype_name(short)
    if long in NUMPY_DTYPES:
        return np.dtype(long)
    if long == "float0":
        return float0()
    if hasattr(ml_dtypes, long):
        return np.dtype(getattr(ml_dtypes, long))
    try:
        dt = np.dtype(long)
    except TypeError as e:
        raise KeyError(short) from e
    if dt.kind not in "biufc":  # object, str, bytes, datetime, void: not array element types
        raise KeyError(short)
    return dt


#: the DTypeName of each of numpy's own dtypes, made once
_LIGHT_VALUES: dict[str, DTypeName] = {}


def dtype_value(short: str) -> np.dtype | DTypeName:
    """The dtype of a short name as a parameter value (`new_dtype=float32`): within
    `text.values.light_dtypes`, one of numpy's own is a `lazy.DTypeName` (no numpy import);
    else `np_dtype(short)`.  Raises KeyError for unknown names."""
    long = long_dtype_name(short)
    if LIGHT_DTYPES[0] and long in NUMPY_DTYPES:
        return _light(long)
    return np_dtype(short)


def _light(long: str) -> DTypeName:
    light = _LIGHT_VALUES.get(long)
    if light is None:
        light = _LIGHT_VALUES[long] = DTypeName(long)
    return light


def itemsize(short: str) -> int:
    """The bytes of one element of the short dtype name (numpy's own without numpy); raises
    KeyError for unknown names."""
    long = long_dtype_name(short)
    if long in NUMPY_DTYPES:
        return _light(long).itemsize
    return np_dtype(short).itemsize


def is_known_dtype(short: str) -> bool:
    if short in SHORT_TO_LONG:  # without importing numpy (start-up)
        return True
    try:
        np_dtype(short)
    except KeyError:
        return False
    return True


# ---------------------------------------------------------------- types

Dim = int | str  # str: a symbolic dim ("b", "2*b + 1") or a sharded dim ("8@x")


def static_dim_size(d) -> int | None:
    """A dim's global size when it is static: an int, or a sharded dim of static size
    (`8@x` -> 8, `8@(x,y)` -> 8); None for a symbolic one (`b`, `2*b@x`)."""
    if isinstance(d, int):
        return d
    size, at, _ = d.partition("@")
    size = size.strip()
    return int(size) if at and size.isdigit() else None


def parens_balanced(text: str) -> bool:
    """Every `)` of a dim's text closes an earlier `(`, and every `(` is closed."""
    depth = 0
    for c in text:
        depth += (c == "(") - (c == ")")
        if depth < 0:
            return False
    return depth == 0


#: how `ShapedArray.size` counts a dim that is not an int, inside `sized_dims` (None: as 0).
#: (why a value cannot carry it: `size` is a property of a type, read by every byte and
#: FLOP estimate (memory, the remat cost models, the Frozen types' own checks), none of
#: which takes an invocation; the remat request (`remat.Spec`) holds the sizes and sets
#: them for the planner's block alone: `remat.counted_at`.)
_DIM_SIZER: contextvars.ContextVar = contextvars.ContextVar("jaxprtool_dim_sizer", default=None)


@contextlib.contextmanager
def sized_dims(sizer):
    """Inside the block, `ShapedArray.size` (and so the byte and FLOP estimates built on
    it) counts a symbolic dim (`b`, `2*b@x`) as `sizer(dim)`: the sizes `--dim b=N` gives
    the byte-weighted rematerialization planners.  Outside, such a dim counts as 0 (a
    sharded dim of static size, `8@x`, counts its global size either way)."""
    token = _DIM_SIZER.set(sizer)
    try:
        yield
    finally:
        _DIM_SIZER.reset(token)


class ShapedArray(Frozen, compare=("shape", "dtype", "memory_space", "vma", "named_shape")):
    """An array type: `f32[3,4]`, `key<fry>[]`, `f32<host>[3]`, `f32[2]{V:x}`.  `weak_type`
    is not compared."""

    __slots__ = ("shape", "dtype", "weak_type", "memory_space", "vma", "named_shape")
    shape: tuple[Dim, ...]
    dtype: str  # short name as printed: "f32", "bf16", "bool", "float0", "key<fry>"
    weak_type: bool
    memory_space: str | None  # from `f32<host>[3]`
    vma: str | None  # raw text inside the `{...}` suffix, e.g. "V:(x,y)"
    #: xmap's named axes after `;` (`f16[4,512,512;a:8]`, JAX <= 0.4.30), raw text "a:8"
    named_shape: str | None

    def __init__(
        self,
        shape: tuple[Dim, ...],
        dtype: str,
        weak_type: bool = False,
        memory_space: str | None = None,
        vma: str | None = None,
        named_shape: str | None = None,
    ) -> None:
        set_field(self, "shape", shape)
        set_field(self, "dtype", dtype)
        set_field(self, "weak_type", weak_type)
        set_field(self, "memory_space", memory_space)
        set_field(self, "vma", vma)
        set_field(self, "named_shape", named_shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        """The number of elements.  A symbolic dim (`b`, `2*b@x`) counts as 0 outside
        `sized_dims` (inside: as its sizer says), so that the byte and FLOP estimates built
        on it are lower bounds, never an error: the callers that report them say so where
        it matters (`memory.Timeline.symbolic`), and those that would plan on them refuse
        a symbolic program unless its sizes are given (`--remat min-cut`/`--remat-budget`
        without `--dim`, `jaxprtool.grad(remat="min-cut")`)."""
        n = 1
        for d in self.shape:
            if isinstance(d, int):
                n *= d
            elif (k := static_dim_size(d)) is not None:
                n *= k  # `8@x`: the global size, as JAX's nbytes counts a sharded array
            else:
                sizer = _DIM_SIZER.get()
                n *= 0 if sizer is None else sizer(d)
        return n

    @property
    def is_sized(self) -> bool:
        """Every dim has a static global size (ints, and sharded dims such as `8@x`)."""
        return all(static_dim_size(d) is not None for d in self.shape)

    @property
    def np_dtype(self) -> np.dtype:
        return np_dtype(self.dtype)

    @property
    def is_static(self) -> bool:
        return all(isinstance(d, int) for d in self.shape)

    def update(self, shape=None, dtype=None, weak_type=None) -> ShapedArray:
        return ShapedArray(
            tuple(self.shape if shape is None else shape),
            self.dtype if dtype is None else dtype,
            self.weak_type if weak_type is None else weak_type,
            self.memory_space,
            self.vma,
            self.named_shape,
        )

    def __str__(self) -> str:
        space = f"<{self.memory_space}>" if self.memory_space else ""
        dims = ",".join(str(d) for d in self.shape)
        if self.named_shape is not None:
            dims += ";" + self.named_shape
        vma = f"{{{self.vma}}}" if self.vma is not None else ""
        return f"{self.dtype}{space}[{dims}]{vma}"


class RefType(Frozen):
    """A mutable reference: `Ref{f32[3]}`, `Ref<default>{f32[4,8]}`."""

    __slots__ = ("inner", "memory_space")
    inner: ShapedArray
    memory_space: str | None

    def __init__(self, inner: ShapedArray, memory_space: str | None = None) -> None:
        set_field(self, "inner", inner)
        set_field(self, "memory_space", memory_space)

    def __str__(self) -> str:
        space = f"<{self.memory_space}>" if self.memory_space else ""
        return f"Ref{space}{{{self.inner}}}"


class OpaqueType(Frozen):
    """A type the tool has no model for (`Tok`, `MemRef<None>{float32[4,8]}`); printed verbatim."""

    __slots__ = ("text",)
    text: str

    def __init__(self, text: str) -> None:
        set_field(self, "text", text)

    def __str__(self) -> str:
        return self.text


Type = ShapedArray | RefType | OpaqueType


def is_float(t: Type) -> bool:
    return isinstance(t, ShapedArray) and (t.dtype.startswith(("f", "bf")) and t.dtype != "float0")


def is_complex(t: Type) -> bool:
    return isinstance(t, ShapedArray) and t.dtype.startswith("c")


def is_inexact(t: Type) -> bool:
    """Float or complex: the types that carry tangents and cotangents."""
    return is_float(t) or is_complex(t)


# ---------------------------------------------------------------- atoms


class Loc(NamedTuple):
    """A source location: file, 1-based line, 1-based column."""

    file: str
    line: int
    col: int

    def __str__(self) -> str:
        return f"{shown_path(self.file)}:{self.line}:{self.col}"


def shown_path(text: str, keep: str = "") -> str:
    """A file name (or a message quoting one) as a line of output shows it: its characters
    that are not printable, but those in `keep`, escaped as Python writes them (`\\n`,
    `\\x1b`), so that a name holding a line break cannot start a line of the name's choosing
    (a CI system's command: `::error ...`) and one holding ESC or BEL cannot drive the
    terminal.  Every writer of a name into human output goes through this one function."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c in keep else repr(c)[1:-1] for c in text)


class Var:
    """A variable.  Identity is the object; `hint` is only a naming suggestion."""

    __slots__ = ("type", "hint")

    def __init__(self, type: Type, hint: str | None = None):
        self.type = type
        self.hint = hint

    def __repr__(self) -> str:
        return f"Var({self.hint or hex(id(self))}:{self.type})"


class Literal:
    """An inline scalar constant `VALUE:TYPE`.

    `value` is a Python bool, int, float or complex, or the string "float0"
    for `(b'',)`.  `typed=False` records that the text (JAX 0.4.35) printed
    no `:TYPE`; the type is then inferred and printing follows that style.
    """

    __slots__ = ("value", "type", "typed", "_hash")

    def __init__(self, value: Any, type: ShapedArray, typed: bool = True):
        self.value = value
        self.type = type
        self.typed = typed
        self._hash = None

    def _key(self):
        return (type(self.value).__name__, repr(self.value), self.type)

    def __eq__(self, other):
        return isinstance(other, Literal) and self._key() == other._key()

    def __hash__(self):
        # remembered: `cse` files every equation under its operands, and a literal's key
        # (a repr, a type's hash) is computed in Python (no one assigns value or type after)
        # (the value's class and text alone: equal literals have equal ones, and the type's
        # own hash, a Python-level call, is left out; literals of one value and different
        # types, rare, share a hash and are told apart by `__eq__`)
        h = self._hash
        if h is None:
            h = self._hash = hash(self._key()[:2])
        return h

    def __reduce__(self):
        # (a copy or a pickle works its hash out again: a str's hash differs between processes)
        return Literal, (self.value, self.type, self.typed)

    def __repr__(self) -> str:
        return f"Literal({self.value!r}:{self.type})"


Atom = Var | Literal


# ---------------------------------------------------------------- equations and jaxprs


class Eqn(Frozen, eq=False, hidden=("no_subjaxprs",)):
    """`outputs = prim[params] inputs`.

    `params` maps each parameter name to a typed value (see params.py); it
    holds what the text printed, plus any hidden parameter that a pass chose
    to add.  `loc` is where the equation came from in the user's file; an
    equation derived from another carries its location on.  Compared by identity.
    `Eqn(prim, inputs, outputs, params, loc=None, bare_eq=False)` (`_fast_eqn_init`).
    """

    __slots__ = ("prim", "inputs", "outputs", "params", "loc", "bare_eq", "no_subjaxprs")
    prim: str
    inputs: tuple[Atom, ...]
    outputs: tuple[Var, ...]
    params: dict[str, Any]
    loc: Loc | None
    #: the text printed this result-less equation as ` = prim ...` (JAX < 0.4.22); read only
    #: by version detection (the printer follows the style)
    bare_eq: bool
    #: `eqn_subjaxprs` found no jaxpr in `params` (a cache: not part of the equation)
    no_subjaxprs: bool

    def replace(self, **kw) -> Eqn:
        if not _EQN_FIELDS.issuperset(kw):
            raise TypeError(f"Eqn has no field {sorted(set(kw) - _EQN_FIELDS)[0]!r}")
        get = kw.get
        e = Eqn(
            get("prim", self.prim),
            tuple(get("inputs", self.inputs)),
            tuple(get("outputs", self.outputs)),
            get("params", self.params),
            get("loc", self.loc),
            get("bare_eq", self.bare_eq),
        )
        if self.no_subjaxprs and e.params is self.params:
            _set_no_subjaxprs(e, True)
        return e


_EQN_FIELDS = frozenset({"prim", "inputs", "outputs", "params", "loc", "bare_eq"})


def _fast_eqn_init():
    """`Eqn.__init__`, storing the fields through the slots' own setters (faster than
    `object.__setattr__` by name for each field: AD and the passes build tens of thousands
    of equations)."""
    setters = [Eqn.__dict__[f].__set__ for f in ("prim", "inputs", "outputs", "params")]
    set_prim, set_inputs, set_outputs, set_params = setters
    set_loc, set_bare_eq = Eqn.__dict__["loc"].__set__, Eqn.__dict__["bare_eq"].__set__

    def __init__(self, prim, inputs, outputs, params, loc=None, bare_eq=False):
        set_prim(self, prim)
        set_inputs(self, inputs)
        set_outputs(self, outputs)
        set_params(self, params)
        set_loc(self, loc)
        set_bare_eq(self, bare_eq)
        _set_no_subjaxprs(self, not params)  # (no parameters: no jaxpr inside)

    __init__.__qualname__ = "Eqn.__init__"
    return __init__


_set_no_subjaxprs = Eqn.__dict__["no_subjaxprs"].__set__
Eqn.__init__ = _fast_eqn_init()


class Jaxpr(Frozen, eq=False):
    """`{ lambda constvars ; invars . let eqns in (outvars) }`.

    Closed: a jaxpr never refers to variables of an enclosing jaxpr.
    Compared by identity; use `alpha_equal` for structure.
    """

    __slots__ = ("constvars", "invars", "eqns", "outvars", "effects")
    constvars: tuple[Var, ...]
    invars: tuple[Var, ...]
    eqns: tuple[Eqn, ...]
    outvars: tuple[Atom, ...]
    effects: tuple[str, ...] | None  # only when printed (`print_effects=True`)

    def __init__(
        self,
        constvars: tuple[Var, ...],
        invars: tuple[Var, ...],
        eqns: tuple[Eqn, ...],
        outvars: tuple[Atom, ...],
        effects: tuple[str, ...] | None = None,
    ) -> None:
        set_field(self, "constvars", constvars)
        set_field(self, "invars", invars)
        set_field(self, "eqns", eqns)
        set_field(self, "outvars", outvars)
        set_field(self, "effects", effects)

    @property
    def in_types(self) -> list[Type]:
        return [v.type for v in self.invars]

    @property
    def out_types(self) -> list[Type]:
        return [v.type for v in self.outvars]

    def replace(self, **kw) -> Jaxpr:
        d = dict(
            constvars=self.constvars,
            invars=self.invars,
            eqns=self.eqns,
            outvars=self.outvars,
            effects=self.effects,
        )
        d.update(kw)
        for k in ("constvars", "invars", "eqns", "outvars"):
            d[k] = tuple(d[k])
        return Jaxpr(**d)


class JaxprError(Exception):
    """An error in the user's program or input, reported as `FILE:LINE:COL: error: msg`."""

    exit_code = 1  # the input was rejected
    #: the diagnostic's stable code (`diagnostics.CODES`); None: its class's
    code: str | None = None

    def __init__(self, message: str, loc: Loc | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.loc = loc
        if code is not None:
            self.code = code

    def __str__(self) -> str:
        return f"{self.loc}: error: {self.message}" if self.loc else f"error: {self.message}"


class ProgramError(JaxprError):
    """An error about the program's inputs or outputs as a whole (a non-scalar `grad`
    output, a symbolic input shape): located at the input binders or the output list of
    the top-level jaxpr when the command reports it (`io.program_loc`)."""

    def __init__(self, message: str, where: str, loc: Loc | None = None):
        super().__init__(message, loc)
        self.where = where  # "inputs" | "outputs"


class NoReverseMode(JaxprError):
    """JAX itself has no reverse mode of a construct (a while loop with a dynamic trip
    count): not a missing rule of the tool's, so a forward-mode check can still run."""


class NotLinear(JaxprError):
    """A transpose met an equation that is not linear in the inputs taken as linear (both
    operands of a product depend on them)."""


class OverLimit(JaxprError):
    """The input is over one of the tool's limits (its size, its nesting depth, its
    equations once expanded)."""

    code = "E003"


class NotJaxprText(JaxprError):
    """The input is not text at all (binary data, invalid UTF-8, a NUL byte)."""

    code = "E002"


class InternalError(JaxprError):
    """Trouble in the tool itself (an exception no rule expected), reported without a
    traceback unless --debug."""

    code = "E999"


class UsageProblem(JaxprError):
    """Bad usage found while running (a missing input file, an output folder that does not exist): exit 2."""

    exit_code = 2


# ---------------------------------------------------------------- traversal helpers


#: parameter value types that never hold a jaxpr (skipped without a closer look)
_LEAF_TYPES = frozenset({int, float, complex, bool, str, type(None)})


def subjaxprs(value: Any) -> list[Jaxpr]:
    """The jaxprs directly inside a parameter value (a jaxpr, or containers of them)."""
    found: list[Jaxpr] = []
    _collect_jaxprs(value, found)
    return found


def _collect_jaxprs(value: Any, found: list[Jaxpr]) -> None:
    kind = _KIND_OF_TYPE.get(type(value))
    if kind is None:
        kind = _kind_of_type(type(value))
    if kind is _LEAF:
        return
    if kind is _JAXPR:
        found.append(value)
    elif kind is _SEQ:
        try:  # (plain data, as most sequences are: one C call, no walk of its items)
            _marshal_dumps(value, 2)
            return  # (marshal writes no jaxpr, and no holder of one)
        except ValueError:
            pass
        for v in value:
            if type(v) not in _LEAF_TYPES:
                _collect_jaxprs(v, found)
    else:
        found.extend(value.jaxprs_inside())


_LEAF, _JAXPR, _SEQ, _HOLDER = "leaf", "jaxpr", "seq", "holder"
#: parameter value type -> how `_collect_jaxprs` looks into its values
_KIND_OF_TYPE: dict[type, str] = {t: _LEAF for t in _LEAF_TYPES}


def _kind_of_type(cls: type) -> str:
    if issubclass(cls, Jaxpr):
        kind = _JAXPR
    elif issubclass(cls, (tuple, list)):
        kind = _SEQ
    elif hasattr(cls, "jaxprs_inside"):
        kind = _HOLDER
    else:
        kind = _LEAF
    _KIND_OF_TYPE[cls] = kind
    return kind


def eqn_subjaxprs(eqn: Eqn) -> list[Jaxpr]:
    """The jaxprs directly inside an equation's parameters, in parameter order.

    Every walk and pass asks this of every equation, and most have none: that answer is
    remembered on the equation (`Eqn.no_subjaxprs`, kept by `Eqn.replace` when the params
    stay; known at construction for an equation without parameters).  Only that negative
    answer is remembered: the parser's and the backend's
    in-place updates of params replace a jaxpr by another, never put one into params that
    held none."""
    if eqn.no_subjaxprs:
        return []
    found: list[Jaxpr] = []
    for v in eqn.params.values():
        if type(v) not in _LEAF_TYPES:
            _collect_jaxprs(v, found)
    if not found:
        _set_no_subjaxprs(eqn, True)
    return found


def map_param_jaxprs(value: Any, fn) -> Any:
    """Rebuild a parameter value with every jaxpr inside replaced by fn(jaxpr)."""
    if isinstance(value, Jaxpr):
        return fn(value)
    if isinstance(value, tuple) and type(value) is tuple:
        return tuple(map_param_jaxprs(v, fn) for v in value)
    if isinstance(value, list):
        return [map_param_jaxprs(v, fn) for v in value]
    if hasattr(value, "map_jaxprs"):
        return value.map_jaxprs(fn)
    return value


def named_axes_use(jaxpr: Jaxpr) -> tuple[Eqn | None, ShapedArray] | None:
    """Where xmap's named axes (`f16[4,512,512;a:8]`, JAX <= 0.4.30) first appear: (None,
    type) for an input or constant of `jaxpr`, (equation, type) for the first equation whose
    results or whose nested jaxprs' binders carry them; None when nothing does."""

    def named(vs):
        for v in vs:
            t = v.type
            if isinstance(t, ShapedArray) and t.named_shape is not None:
                return t
        return None

    t = named(jaxpr.constvars + jaxpr.invars)
    if t is not None:
        return None, t
    for e in all_eqns(jaxpr):
        for o in e.outputs:  # (most results: an array type without named axes, no call)
            if o.type.__class__ is not ShapedArray or o.type.named_shape is not None:
                t = named(e.outputs)
                break
        else:
            t = None
        if t is None and not e.no_subjaxprs:  # (`eqn_subjaxprs`' first answer, no call)
            for sub in eqn_subjaxprs(e):
                t = t or named(sub.constvars + sub.invars)
        if t is not None:
            return e, t
    return None


def named_axes_refusal(jaxpr: Jaxpr, doing: str) -> JaxprError | None:
    """The located error refusing `doing` ("running", "differentiating") a program with xmap's
    named axes (no installed JAX has xmap), or None."""
    use = named_axes_use(jaxpr)
    if use is None:
        return None
    e, t = use
    what = f"'{e.prim}' uses the type {t}" if e else f"input type {t}"
    message = (
        f"{doing} a program with xmap's named axes is not supported: {what} (xmap was deleted "
        "in JAX 0.4.31); re-trace the function with jax.vmap or shard_map on a current JAX"
    )
    return ProgramError(message, "inputs") if e is None else JaxprError(message, e.loc)


def all_eqns(jaxpr: Jaxpr):
    """Every equation, nested ones included (depth first, each jaxpr object once)."""
    seen: set[int] = set()

    def walk(j: Jaxpr):
        if id(j) in seen:
            return
        seen.add(id(j))
        for e in j.eqns:
            yield e
            if not e.no_subjaxprs:  # (`eqn_subjaxprs`' first answer, without the call)
                for sub in eqn_subjaxprs(e):
                    yield from walk(sub)

    yield from walk(jaxpr)


def nested_jaxprs(jaxpr: Jaxpr) -> list[Jaxpr]:
    """Every jaxpr inside `jaxpr`'s equations, at any depth, each object once, depth first:
    the jaxprs that `eqn_subjaxprs` gives of `all_eqns`' equations, in one walk that asks
    nothing of the equations without one (most)."""
    found: list[Jaxpr] = []
    seen = {id(jaxpr)}

    def walk(j: Jaxpr) -> None:
        for e in j.eqns:
            if e.no_subjaxprs:
                continue
            for sub in eqn_subjaxprs(e):
                if id(sub) not in seen:
                    seen.add(id(sub))
                    found.append(sub)
                    walk(sub)

    walk(jaxpr)
    return found


#: set by the command line (one program per process): at the end of a paused block, what
#: it allocated is moved out of the collector's generations (`gc.freeze`), so the first
#: collection after it does not scan the whole new IR.  Off in a library or test process,
#: where frozen cyclic garbage would never be collected.
FREEZE_AFTER_PAUSE = False


@contextlib.contextmanager
def gc_paused():
    """Pause the cyclic garbage collector inside the block (as a decorator: inside the call).

    Transforming or printing a large program allocates many small objects that live to the
    end; the collector would only rescan the (acyclic) IR again and again."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            if FREEZE_AFTER_PAUSE:
                gc.freeze()
            gc.enable()


# ---------------------------------------------------------------- alpha equivalence


def alpha_equal(a: Jaxpr, b: Jaxpr) -> bool:
    """Structural equality up to variable naming (and source locations)."""
    return _AlphaEq().jaxpr(a, b)


class _AlphaEq:
    def __init__(self):
        self.memo: set[tuple[int, int]] = set()

    def jaxpr(self, a: Jaxpr, b: Jaxpr) -> bool:
        if (id(a), id(b)) in self.memo:
            return True
        env: dict[int, int] = {}
        if not self.binders(a.constvars, b.constvars, env) or not self.binders(
            a.invars, b.invars, env
        ):
            return False
        if len(a.eqns) != len(b.eqns) or a.effects != b.effects:
            return False
        for ea, eb in zip(a.eqns, b.eqns):
            if ea.prim != eb.prim or len(ea.inputs) != len(eb.inputs):
                return False
            if not all(self.atom(x, y, env) for x, y in zip(ea.inputs, eb.inputs)):
                return False
            if not self.params(ea.params, eb.params):
                return False
            if not self.binders(ea.outputs, eb.outputs, env):
                return False
        if len(a.outvars) != len(b.outvars):
            return False
        ok = all(self.atom(x, y, env) for x, y in zip(a.outvars, b.outvars))
        if ok:
            self.memo.add((id(a), id(b)))
        return ok

    @staticmethod
    def binders(xs, ys, env) -> bool:
        if len(xs) != len(ys):
            return False
        for x, y in zip(xs, ys):
            if x.type != y.type:
                return False
            env[id(x)] = id(y)
        return True

    @staticmethod
    def atom(x, y, env) -> bool:
        if isinstance(x, Literal) or isinstance(y, Literal):
            return x == y
        return env.get(id(x)) == id(y)

    def params(self, pa: dict, pb: dict) -> bool:
        if pa.keys() != pb.keys():
            return False
        return all(self.value(pa[k], pb[k]) for k in pa)

    def value(self, x, y) -> bool:
        if isinstance(x, Jaxpr) and isinstance(y, Jaxpr):
            return self.jaxpr(x, y)
        if isinstance(x, (tuple, list)) and isinstance(y, (tuple, list)):
            return (
                type(x) is type(y)
                and len(x) == len(y)
                and all(self.value(u, v) for u, v in zip(x, y))
            )
        if isinstance(x, float) and isinstance(y, float) and x != x and y != y:
            return True
        if is_dtype(x) or is_dtype(y):  # a DTypeName and the np.dtype it names are equal
            return is_dtype(x) and is_dtype(y) and dtype_key(x) == dtype_key(y)
        if hasattr(x, "alpha_equal"):
            return x.alpha_equal(y, self.value)
        return type(x) is type(y) and x == y


def params_fingerprint(params: dict):
    """A hashable summary of a parameter dict such that parameters `_AlphaEq.params` finds
    equal always have equal fingerprints (unequal ones may share one): CSE files its
    candidates under it, so that it compares only candidates that may be equal."""
    return tuple(sorted((k, _value_fingerprint(v)) for k, v in params.items()))


def _value_fingerprint(x):
    """`_AlphaEq.value`'s counterpart, case for case: a nested jaxpr by its sizes (alpha
    equality ignores names), a sequence by its type and items, NaN as one value, a dtype by
    `dtype_key`, a value with `alpha_equal` (a record) by its class and fields, anything
    else by its type and hash."""
    if isinstance(x, Jaxpr):
        return ("jaxpr", len(x.constvars), len(x.invars), len(x.eqns), len(x.outvars))
    if isinstance(x, (tuple, list)):
        return (type(x), tuple(map(_value_fingerprint, x)))
    if isinstance(x, float) and x != x:
        return "nan"
    if is_dtype(x):
        return ("dtype", dtype_key(x))
    if hasattr(x, "alpha_equal"):
        fields = getattr(x, "fields", None)
        if isinstance(fields, tuple) and all(type(f) is tuple and len(f) == 2 for f in fields):
            return (type(x), tuple((k, _value_fingerprint(v)) for k, v in fields))
        return type(x)
    try:
        return (type(x), hash(x))
    except TypeError:  # unhashable: equal ones still share the type
        return type(x)


def value_bytes(t: Type) -> int:
    """The bytes one value of type `t` occupies (0 for tokens, opaque types, symbolic dims)."""
    if isinstance(t, RefType):
        t = t.inner
    if not isinstance(t, ShapedArray):
        return 0
    try:
        item = itemsize(t.dtype)
    except KeyError:  # key<fry>, an unknown dtype: the tool cannot size it
        return 0
    if t.dtype in ("i4", "u4"):
        return (t.size + 1) // 2
    return t.size * item
