"""Shape rules: how they are registered on the primitive records, and type inference.

Each primitive's block in its family module (`jaxprtool/families/*.py`) registers its shape
rule `rule(in_types, params, out_hint) -> list[Type]` with `@shape_rule(name, ...)`, which
sets the record's `shape_rule` field (and the other fields it is given).  `out_hint` is the
list of result types the text declared (or None when a pass is building a new equation);
rules use it only for parameters that JAX's printer hides (broadcast_in_dim's `shape`, for
example).  A rule raises `ShapeError` when operands or parameters are wrong.
`infer_types` applies a primitive's rule, memoised; `util.py` holds the helpers the rules
share.
"""

from __future__ import annotations

import marshal
from collections.abc import Callable

from ..core import RefType, ShapedArray, Type
from ..lazy import dtype_key, is_dtype
from ..params import EnumValue, NpScalar, Opaque, Record, SymExpr
from ..record import FieldView, define
from ..record import prim as record_of
from ..shardings import axis_sizes_key

ShapeRule = Callable[[list[Type], dict, "list[Type] | None"], list[Type]]

#: every primitive's shape rule (a view of the records' `shape_rule` field)
SHAPE_RULES = FieldView("shape_rule")


class ShapeError(Exception):
    """Operand types or parameters that the primitive does not accept."""


def shape_rule(*names: str, **properties):
    """Decorator: register `fn` as the shape rule of each named primitive, and set the
    record's other `properties` (`multiple_results=True`, `effectful=True`, ...)."""

    def register(fn: ShapeRule) -> ShapeRule:
        family = fn.__module__.rpartition(".")[2]
        for n in names:
            define(n, shape_rule=fn, family=family, **properties)
        return fn

    return register


def infer_types(prim: str, in_types: list[Type], params: dict, out_hint=None) -> list[Type]:
    """Result types of `prim` applied to `in_types`; KeyError if the primitive is unknown.

    Results are memoised by (rule, operand types, parameters, hint) when every parameter is
    a plain value (`_freeze`): a program repeats the same few typed equations many times."""
    rule = record_of(prim).shape_rule
    if rule is None:
        raise KeyError(prim)
    return infer_with_rule(rule, in_types, params, out_hint)


def infer_with_rule(rule: ShapeRule, in_types: list[Type], params: dict, out_hint=None):
    """`infer_types` with the primitive's shape rule already looked up.

    An equation without parameters or hint (most of what AD emits: add_any, mul, neg) is
    looked up first by the identities of its operand types (`_BY_ID`), which repeat: types
    come out of this memo and pass from operand to result.  No hashing of type fields."""
    if not params and out_hint is None and not axis_sizes_key():
        key = (rule, *map(id, in_types))
        hit = _BY_ID.get(key)
        if hit is None:
            if len(_BY_ID) > 100_000:
                _BY_ID.clear()
            # the types are kept with the result: their ids stay theirs while it is remembered
            hit = _BY_ID[key] = (tuple(in_types), tuple(_infer_memoised(rule, in_types, {}, None)))
        return list(hit[1])
    return _infer_memoised(rule, in_types, params, out_hint)


def _infer_memoised(rule: ShapeRule, in_types: list[Type], params: dict, out_hint):
    try:
        key = (rule, _freeze_types(in_types), _freeze_params(params), _freeze_hint(out_hint))
        key += axis_sizes_key()  # a sharded reshape's result depends on the mesh axis sizes
        hit = _INFER_MEMO.get(key)
    except (_Unfreezable, TypeError):  # TypeError: an unhashable type (a list shape)
        return rule(list(in_types), params, out_hint)
    if hit is None:
        if len(_INFER_MEMO) > 100_000:
            _INFER_MEMO.clear()
        hit = _INFER_MEMO[key] = tuple(rule(list(in_types), params, out_hint))
    return list(hit)


_INFER_MEMO: dict[tuple, tuple[Type, ...]] = {}
#: (rule, id of each operand type) -> (the operand types, the result types): `infer_with_rule`
#: of an equation without parameters
_BY_ID: dict[tuple, tuple[tuple[Type, ...], tuple[Type, ...]]] = {}


def equation_key(prim: str, in_types: list[Type], params: dict, declared: list[Type]):
    """A hashable key of everything the shape check of an equation depends on (primitive,
    operand types, parameters, declared result types), or None where a parameter is not a
    plain value (a jaxpr): the checker skips an equation whose key already passed."""
    try:
        key = (prim, _freeze_types(in_types), _freeze_params(params), _freeze_types(declared))
        hash(key)
    except (_Unfreezable, TypeError):  # TypeError: an unhashable type (a list shape)
        return None
    return key


def params_key(params: dict) -> tuple | None:
    """A hashable key of `params` equal only for parameters of the same types and contents
    (1, 1.0, True differ; a dtype keyed by its name, without numpy), or None where a value
    is not a plain one (a jaxpr): `infer_types`' memo key of them, for a caller's own memo."""
    try:
        return _freeze_params(params)
    except _Unfreezable:
        return None


class _Unfreezable(Exception):
    """A parameter value that is not a plain value (a jaxpr, an unknown object)."""


def _freeze_types(types) -> tuple:
    # a ShapedArray by its fields, which hash and compare without a Python-level call; its
    # == ignores weak_type, which rules propagate: the key has it
    return tuple(
        [
            (t.shape, t.dtype, t.weak_type, t.memory_space, t.vma, t.named_shape)
            if t.__class__ is ShapedArray
            else _type_key(t)
            for t in types
        ]
    )


def _type_key(t: Type):
    cls = t.__class__
    if cls is ShapedArray:
        return t.shape, t.dtype, t.weak_type, t.memory_space, t.vma, t.named_shape
    if cls is RefType:
        return t, t.inner.weak_type
    return t


def _freeze_hint(out_hint) -> tuple | None:
    return None if out_hint is None else _freeze_types(out_hint)


def _freeze_params(params: dict) -> tuple:
    key = []
    for k, v in params.items():
        cls = v.__class__
        # a plain value inline (as `_freeze` keys it, one tuple level less); one keyed
        # before (`_remember`: an int tuple, a dtype) by its id; the rest frozen
        if cls in _PLAIN:
            key.append((k, cls, v))
        elif (hit := _KEYS_BY_ID.get(id(v))) is not None and hit[0] is v:
            key.append((k, hit[1]))
        else:
            key.append((k, _freeze(v)))
    return tuple(key)


#: marks the key of a tuple or list that marshal writes (`_freeze`): its marshal bytes
_MARSHALLED = object()
#: marshal's type codes of a list and of bytes
#: (as ints: `code in data` of an int looks for the one byte, where of a one-byte `bytes`
#: it takes ~15 times as long, the buffer protocol and a substring search: every tuple
#: parameter of every equation the checker or the builder keys is asked)
_LIST_CODE, _BYTES_CODE = ord("["), ord("s")
#: `_int_tree`'s answers: not an int tree, one of tuples all through, one with a list inside
_NOT_INTS, _INT_TUPLES, _INT_LISTS = 0, 1, 2


def _int_tree(v: tuple | list) -> int:
    """Whether v holds only ints and tuples and lists of such (one walk): `_NOT_INTS`, or
    `_INT_TUPLES` where every container is a tuple (immutable all through), else
    `_INT_LISTS`."""
    kind = _INT_TUPLES if v.__class__ is tuple else _INT_LISTS
    for x in v:
        cls = x.__class__
        if cls is int:
            continue
        if cls is not tuple and cls is not list:
            return _NOT_INTS
        inner = _int_tree(x)
        if inner == _NOT_INTS:
            return _NOT_INTS
        if inner == _INT_LISTS:
            kind = _INT_LISTS
    return kind


#: id(value) -> (value, key) for the int-tree tuples and the dtypes `_freeze` has keyed (kept
#: alive so that the id stays theirs; immutable): parameter values are passed on from
#: equation to equation
_KEYS_BY_ID: dict[int, tuple] = {}


def _remember(v, key) -> None:
    """Remember the key of a tuple immutable all through, or of a dtype."""
    if len(_KEYS_BY_ID) > 100_000:
        _KEYS_BY_ID.clear()
    _KEYS_BY_ID[id(v)] = (v, key)


_PLAIN = frozenset({int, bool, str, type(None), EnumValue, SymExpr, Opaque})
#: marks the key of a dtype in `_freeze` (a DTypeName and the np.dtype it names key alike)
_DTYPE = object()


def _freeze(v):
    """A hashable key equal only for values of the same types and contents (1, 1.0, True
    differ; so do 0.0 and -0.0)."""
    cls = v.__class__
    if cls in _PLAIN:
        return cls, v
    if cls is float:
        return cls, v.hex()
    if cls is tuple or cls is list:
        if cls is tuple:
            hit = _KEYS_BY_ID.get(id(v))
            if hit is not None and hit[0] is v:
                return hit[1]
        # the common case (axes, shapes, dimension numbers): keyed by the marshal bytes
        # (version 2: no back-references), which tell tuples from lists and each int,
        # float or string from every other; not where a bytes code may be in them (marshal
        # writes any buffer, a numpy scalar too, as bytes).  A value with a list inside
        # (its type code in the bytes: dimension numbers) is mutable: its key is never
        # remembered, and it is not walked (`_int_tree`) to learn so
        try:
            data = marshal.dumps(v, 2)
        except ValueError:  # an item marshal cannot write (an enum, a dtype, a jaxpr)
            data = None
        if data is not None and _BYTES_CODE not in data:
            key = _MARSHALLED, data
            if cls is tuple and _LIST_CODE not in data and _int_tree(v) == _INT_TUPLES:
                _remember(v, key)
            return key
        kind = _int_tree(v)
        if kind != _NOT_INTS:
            key = _MARSHALLED, marshal.dumps(v, 2)
            if kind == _INT_TUPLES:
                _remember(v, key)
            return key
    if cls is tuple or cls is list or cls is frozenset:
        return cls, tuple(map(_freeze, v))
    if is_dtype(v):
        key = _DTYPE, dtype_key(v)
        _remember(v, key)
        return key
    if cls is NpScalar:
        return cls, v.dtype, _freeze(v.value)
    if cls is Record:
        return cls, v.cls, tuple((k, _freeze(x)) for k, x in v.fields)
    raise _Unfreezable


def is_known(prim: str) -> bool:
    """A primitive with a shape rule."""
    return record_of(prim).shape_rule is not None
