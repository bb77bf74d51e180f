"""Typed parameter values.

Parameters print as `str(value)` in JAX.  Plain Python values stand for
themselves: int, float, bool, None, str (a top-level unquoted string or a
bare enum name such as `RNG_DEFAULT`; inside containers it prints quoted, as
`str(tuple)` does), tuple, list, frozenset, and `Jaxpr` (nested jaxprs; a
tuple of jaxprs prints as `( {..} {..} )`).  numpy dtypes are `np.dtype`.
The classes below cover the rest.  `format_value` gives JAX's text for any of
them (without nested-jaxpr layout, which is the printer's job).
"""

from __future__ import annotations

from typing import Any

from .frozen import Frozen, set_field
from .lazy import is_dtype


def all_ints(t) -> bool:
    """Whether every item of `t` is an int (no bool, numpy integer or symbolic dim): the
    parameters' usual case (shapes, axes, permutations), which the readers of dims and the
    mesh finder pass on as it is, with no call per item (the AD walk reads dims for every
    equation a rule emits; `shardings` asks it of every tuple parameter)."""
    for x in t:
        if x.__class__ is not int:
            return False
    return True


class EnumValue(Frozen):
    """`GatherScatterMode.CLIP`, `Precision.HIGHEST`."""

    __slots__ = ("cls", "member")
    cls: str
    member: str

    def __init__(self, cls: str, member: str) -> None:
        set_field(self, "cls", cls)
        set_field(self, "member", member)

    def __str__(self) -> str:
        return f"{self.cls}.{self.member}"


class NpScalar(Frozen):
    """`np.int64(1)` (numpy >= 2 repr of a numpy scalar inside a container)."""

    __slots__ = ("dtype", "value")
    dtype: str
    value: Any

    def __init__(self, dtype: str, value: Any) -> None:
        set_field(self, "dtype", dtype)
        set_field(self, "value", value)

    def __str__(self) -> str:
        return f"np.{self.dtype}({self.value!r})"

    def __int__(self) -> int:
        return int(self.value)

    def __index__(self) -> int:
        return int(self.value)


class Record(Frozen):
    """A dataclass or namedtuple repr: `GatherDimensionNumbers(offset_dims=(1,), ...)`.

    `fields` is a tuple of (name, value) pairs in printed order.
    """

    __slots__ = ("cls", "fields")
    cls: str
    fields: tuple[tuple[str, Any], ...]

    def __init__(self, cls: str, fields: tuple[tuple[str, Any], ...]) -> None:
        set_field(self, "cls", cls)
        set_field(self, "fields", fields)

    def __getitem__(self, name: str) -> Any:
        for k, v in self.fields:
            if k == name:
                return v
        raise KeyError(name)

    def get(self, name: str, default=None):
        try:
            return self[name]
        except KeyError:
            return default

    def __str__(self) -> str:
        inner = ", ".join(f"{k}={format_value(v, nested=True)}" for k, v in self.fields)
        return f"{self.cls}({inner})"

    def jaxprs_inside(self):
        from .core import subjaxprs

        for _, v in self.fields:
            yield from subjaxprs(v)

    def map_jaxprs(self, fn):
        from .core import map_param_jaxprs

        return Record(self.cls, tuple((k, map_param_jaxprs(v, fn)) for k, v in self.fields))

    def alpha_equal(self, other, eq) -> bool:
        return (
            isinstance(other, Record)
            and self.cls == other.cls
            and [k for k, _ in self.fields] == [k for k, _ in other.fields]
            and all(eq(a, b) for (_, a), (_, b) in zip(self.fields, other.fields))
        )


class SymExpr(Frozen):
    """A symbolic dimension expression inside a parameter: `b*n`, `floordiv(b, 2)`."""

    __slots__ = ("text",)
    text: str

    def __init__(self, text: str) -> None:
        set_field(self, "text", text)

    def __str__(self) -> str:
        return self.text


class Opaque(Frozen):
    """A value the tool has no model for (a function repr, a mesh, a PyTreeDef); printed verbatim."""

    __slots__ = ("text",)
    text: str

    def __init__(self, text: str) -> None:
        set_field(self, "text", text)

    def __str__(self) -> str:
        return self.text


class SpacedList(list):
    """A list printed with other spacing than `str(list)`'s `[a, b]`: `branch_jaxprs=[⏎
    { lambda ...},⏎  { lambda ...}⏎]` (Catalyst's cond, JAX 0.4.x).  `seps` is the text
    before each element (after `[`, or from the previous element's end: `,⏎  `) and, last,
    before `]`; it reprints the layout as long as the elements print as they were read."""

    def __init__(self, items, seps: tuple[str, ...]):
        super().__init__(items)
        self.seps = tuple(seps)

    @staticmethod
    def standard(n: int) -> tuple[str, ...]:
        """The separators of `str(list)` for n elements."""
        return ("",) + (", ",) * (n - 1) + ("",) if n else ("",)

    def join(self, texts: list[str]) -> str:
        """`[...]` around the element texts, with this list's separators when they fit."""
        seps = self.seps if len(self.seps) == len(texts) + 1 else self.standard(len(texts))
        return "[" + "".join(a + b for a, b in zip(seps, texts)) + seps[-1] + "]"


def format_value(v: Any, nested: bool = False) -> str:
    """JAX's `str(value)` for a parameter value that contains no jaxpr."""
    if isinstance(v, str):
        return repr(v) if nested else v
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, float):
        return repr(v)
    if is_dtype(v):
        return v.name if v.names is None else "float0"
    if isinstance(v, tuple):
        if len(v) == 1:
            return f"({format_value(v[0], True)},)"
        return "(" + ", ".join(format_value(x, True) for x in v) + ")"
    if isinstance(v, SpacedList):
        return v.join([format_value(x, True) for x in v])
    if isinstance(v, list):
        return "[" + ", ".join(format_value(x, True) for x in v) + "]"
    if isinstance(v, frozenset):
        return "frozenset({" + ", ".join(sorted(format_value(x, True) for x in v)) + "})"
    return str(v)


def as_int_tuple(v) -> tuple[int, ...]:
    """A tuple of ints from a printed tuple that may hold `np.int64(...)` entries."""
    return tuple(int(x) for x in v)


def split_top_level(text: str) -> list[str]:
    """`text` split at the commas outside brackets (`a, (b, c), [d]` -> 3 parts)."""
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    out.append(cur)
    return out
