"""Immutable value classes, written without `dataclasses`.

`@dataclass` compiles the methods of each class it decorates (`__init__`, `__repr__`,
`__eq__`, ...) at every start-up: ~0.7 ms a class, 25 classes on `fmt`'s path, a fifth of
its whole process.  `Frozen` gives what `@dataclass(frozen=True, slots=True)` gave, from
methods compiled once into the bytecode cache: a subclass lists its fields in `__slots__`
and writes its `__init__` (storing them with `set_field`, as the generated one did);
equality and hashing follow the fields (or none: `eq=False` keeps identity, as
`@dataclass(eq=False)`), the repr is the dataclass one, assignment raises
`FrozenInstanceError`, and copies and pickles keep the fields."""

from __future__ import annotations

from operator import attrgetter


class FrozenInstanceError(AttributeError):
    """An assignment to a field of a frozen value (`dataclasses.FrozenInstanceError`'s
    counterpart)."""


#: `set_field(obj, name, value)`: how an `__init__` stores a field of a frozen value
set_field = _set = object.__setattr__


class Frozen:
    """Base of the frozen value classes.  Class keywords: `eq=False` compares and hashes by
    identity; `compare=(...)` names the fields compared and hashed (default: all, in slot
    order); `hidden=(...)` names fields left out of the repr."""

    __slots__ = ()

    def __init_subclass__(cls, eq: bool = True, compare=None, hidden=(), **kw) -> None:
        super().__init_subclass__(**kw)
        fields = tuple(f for c in reversed(cls.__mro__) for f in c.__dict__.get("__slots__", ()))
        cls._fields = fields
        cls.__match_args__ = fields
        cls._shown = tuple(f for f in fields if f not in hidden)
        if eq:
            # attrgetter of several fields: a tuple, made in C (the hot types compare often)
            cls._key = staticmethod(attrgetter(*(compare or fields)))
        else:
            cls.__eq__ = object.__eq__
            cls.__hash__ = object.__hash__

    def __eq__(self, other):
        if other.__class__ is self.__class__:
            return self._key(self) == other._key(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._key(self))

    def __repr__(self) -> str:
        inner = ", ".join(f"{f}={getattr(self, f)!r}" for f in self._shown)
        return f"{self.__class__.__qualname__}({inner})"

    def __setattr__(self, name, value):
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name):
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __getstate__(self):
        return tuple(getattr(self, f) for f in self._fields)

    def __setstate__(self, state) -> None:
        for f, v in zip(self._fields, state):
            _set(self, f, v)
