"""The mesh, PartitionSpec and NamedSharding parameters as the text prints them (no jax).

JAX prints `mesh=Mesh('x': 4, 'y': 2, axis_types=(Auto, Auto))`, `in_specs=(P('x', 'y'),)`,
`out_specs=(P(None, 'y'), P())`, older versions `PartitionSpec(...)`, and
`sharding=NamedSharding(mesh=..., spec=P('x', None), memory_kind=device)`; the parser keeps
them as `params.Opaque` text.  This module reads them into small models (`MeshText`,
`SpecText`), writes new specs back in the text's own spelling (AD adds specs for tangents and
residuals), and reads the `8@x` dims of JAX 0.12's explicitly sharded types.
"""

from __future__ import annotations

import re

from .frozen import Frozen, set_field
from .params import Opaque, split_top_level

_AXIS = re.compile(r"'([^']*)'\s*:\s*(\d+)")
_TYPES = re.compile(r"axis_types=\(([^)]*)\)")


class MeshText(Frozen):
    """A printed mesh: axis names and sizes in order, axis types (Auto/Explicit/Manual)."""

    __slots__ = ("names", "sizes", "types", "complete")
    names: tuple[str, ...]
    sizes: tuple[int, ...]
    types: tuple[str, ...]
    #: False for texts that do not say the sizes (`Mesh()`, a device-id mesh, an object repr)
    complete: bool

    def __init__(
        self, names: tuple[str, ...], sizes: tuple[int, ...], types: tuple[str, ...], complete=True
    ) -> None:
        set_field(self, "names", names)
        set_field(self, "sizes", sizes)
        set_field(self, "types", types)
        set_field(self, "complete", complete)

    @property
    def shape(self) -> dict[str, int]:
        return dict(zip(self.names, self.sizes))

    @property
    def size(self) -> int:
        n = 1
        for s in self.sizes:
            n *= s
        return n

    def __str__(self) -> str:
        if not self.names:
            return "Mesh()"
        axes = ", ".join(f"'{n}': {s}" for n, s in zip(self.names, self.sizes))
        types = ", ".join(self.types) + ("," if len(self.types) == 1 else "")
        return f"Mesh({axes}, axis_types=({types}))"

    def spec_text(self) -> str:
        """`x=4,y=2`: the `--mesh` spelling."""
        return ",".join(f"{n}={s}" for n, s in zip(self.names, self.sizes))


def read_mesh(v) -> MeshText:
    """A `mesh=` / `context_mesh=` value (or a NamedSharding's mesh) as a MeshText."""
    text = str(v)
    m = re.search(r"mesh=((?:Abstract)?Mesh\()", text)
    if m and not text.lstrip().startswith(("Mesh(", "AbstractMesh(")):
        text = text[m.start(1) :]
    axes = _AXIS.findall(_head(text))
    names = tuple(a for a, _ in axes)
    sizes = tuple(int(s) for _, s in axes)
    t = _TYPES.search(_head(text))
    types = tuple(x.strip() for x in t.group(1).split(",") if x.strip()) if t else ()
    if len(types) != len(names):
        types = ("Auto",) * len(names)
    return MeshText(names, sizes, types, bool(names))


def _head(text: str) -> str:
    """The text of the first balanced parenthesised group (a mesh inside a NamedSharding)."""
    start = text.find("(")
    if start < 0:
        return text
    depth = 0
    for i in range(start, len(text)):
        depth += text[i] == "("
        depth -= text[i] == ")"
        if depth == 0:
            return text[: i + 1]
    return text


class SpecText(Frozen):
    """A PartitionSpec: per dimension None or a tuple of mesh axis names; extra keyword parts
    (`unreduced={'x'}`) kept verbatim; `cls` is the printed class name (P or PartitionSpec)."""

    __slots__ = ("entries", "cls", "extra")
    entries: tuple[tuple[str, ...] | None, ...]
    cls: str
    extra: str

    def __init__(
        self, entries: tuple[tuple[str, ...] | None, ...], cls: str = "P", extra: str = ""
    ) -> None:
        set_field(self, "entries", entries)
        set_field(self, "cls", cls)
        set_field(self, "extra", extra)

    def axes(self) -> set[str]:
        return {a for e in self.entries if e for a in e}

    def dim_axes(self, d: int) -> tuple[str, ...]:
        return (self.entries[d] or ()) if d < len(self.entries) else ()

    def to_text(self) -> str:
        parts = []
        for e in self.entries:
            if e is None:
                parts.append("None")
            elif len(e) == 1:
                parts.append(f"'{e[0]}'")
            else:
                parts.append("(" + ", ".join(f"'{a}'" for a in e) + ")")
        if self.extra:
            parts.append(self.extra)
        body = ", ".join(parts)
        if len(parts) == 1 and not self.extra:
            body += ","
        return f"{self.cls}({body})"

    def as_param(self) -> Opaque:
        return Opaque(self.to_text())


def read_spec(v) -> SpecText | None:
    """`P('x', 'y')`, `P(None, 'y')`, `P(('x', 'y'),)`, `PartitionSpec()`, ... or None."""
    s = str(v).strip()
    m = re.fullmatch(r"(P|PartitionSpec)\((.*)\)", s, re.S)
    if not m:
        return None
    entries: list[tuple[str, ...] | None] = []
    extra = []
    for part in split_top_level(m.group(2)):
        part = part.strip()
        if not part:
            continue
        if part == "None":
            entries.append(None)
        elif "=" in part.split("(")[0]:
            extra.append(part)
        elif part.startswith("("):
            entries.append(tuple(re.findall(r"'([^']*)'", part)))
        elif part.startswith("'"):
            entries.append((part.strip("'"),))
        else:
            return None
    return SpecText(tuple(entries), m.group(1), ", ".join(extra))


def names_to_spec(v, ndim: int | None = None, cls: str = "P") -> SpecText | None:
    """An older shard_map's `in_names` entry `{0: ('z',), 1: ('y',)}` as a spec."""
    text = str(v).strip()
    if not (text.startswith("{") and text.endswith("}")):
        return None
    dims: dict[int, tuple[str, ...]] = {}
    for k, names in re.findall(r"(\d+)\s*:\s*\(([^)]*)\)", text):
        dims[int(k)] = tuple(re.findall(r"'([^']*)'", names))
    n = max([ndim or 0] + [k + 1 for k in dims])
    return SpecText(tuple(dims.get(d) or None for d in range(n)), cls)


def make_spec(entries, like: SpecText | None = None) -> SpecText:
    """A new spec in the class spelling of `like` (P by default)."""
    return SpecText(tuple(tuple(e) if e else None for e in entries), like.cls if like else "P")


class ShardingText(Frozen):
    """A `NamedSharding(mesh=..., spec=..., memory_kind=...)` value."""

    __slots__ = ("mesh", "spec")
    mesh: MeshText
    spec: SpecText

    def __init__(self, mesh: MeshText, spec: SpecText) -> None:
        set_field(self, "mesh", mesh)
        set_field(self, "spec", spec)


def read_sharding(v) -> ShardingText | None:
    text = str(v).strip()
    if not text.startswith("NamedSharding("):
        return None
    m = re.search(r"spec=((?:P|PartitionSpec)\()", text)
    if not m:
        return None
    spec = read_spec(_head(text[m.start(1) :]))
    if spec is None:
        return None
    return ShardingText(read_mesh(text), spec)


def with_batch_dim(v, d: int | None):
    """A jit's `NamedSharding` entry for an operand or result that gained a batch dimension
    at `d` (JAX's `_pjit_batcher_for_sharding`): the spec gets None there, so the mesh axes
    stay on the dimensions they sharded.  Other entries (unspecified) are kept."""
    if d is None:
        return v
    text = str(v).strip()
    sh = read_sharding(text)
    if sh is None or d >= len(sh.spec.entries):
        return v
    entries = list(sh.spec.entries)
    entries.insert(d, None)
    start = text.index("spec=") + len("spec=")
    old = _head(text[start:])
    new = SpecText(tuple(entries), sh.spec.cls, sh.spec.extra).to_text()
    return Opaque(text[:start] + new + text[start + len(old) :])


# ---------------------------------------------------------------- sharded dims (`8@x`)


def dim_axes(d) -> tuple[int | None, tuple[str, ...]]:
    """`'8@x'` -> (8, ('x',)); `'8@(x,y)'` -> (8, ('x', 'y')); an int -> (d, ())."""
    if isinstance(d, int):
        return d, ()
    text = str(d)
    if "@" not in text:
        return (int(text) if text.strip().isdigit() else None), ()
    size, _, axes = text.partition("@")
    axes = axes.strip()
    if axes.startswith("(") and axes.endswith(")"):
        axes = axes[1:-1]
    names = tuple(a.strip().strip("'") for a in axes.split(",") if a.strip())
    return (int(size) if size.strip().isdigit() else None), names


_AXIS_NAME = re.compile(r"[^\W\d]\w*")


def is_sharded_dim(d) -> bool:
    """A dim printed `SIZE@AXES` with a static size and mesh axis names (`8@x`, `8@(x,y)`),
    not an expression that merely contains one (`8@x + 8@x`)."""
    if not isinstance(d, str) or "@" not in d:
        return False
    size, names = dim_axes(d)
    return size is not None and bool(names) and all(map(_AXIS_NAME.fullmatch, names))


def sharded_size(d):
    """The global size of an explicitly sharded dim (`'8@x'` -> 8); any other dim unchanged."""
    return dim_axes(d)[0] if is_sharded_dim(d) else d


def sharded_like(src, size):
    """`size` on the mesh axes of dim `src` (`('8@x', 4)` -> `'4@x'`), as JAX keeps a sliced,
    padded or concatenated dim's sharding; `size` itself when `src` is not sharded."""
    if is_sharded_dim(src) and isinstance(size, int):
        return f"{size}@{src.partition('@')[2]}"
    return size


def type_spec(t) -> SpecText | None:
    """The spec of an explicitly sharded type (`f32[8@x,4]` -> P('x', None)); None if it has
    no sharded dim."""
    shape = getattr(t, "shape", None)
    if not shape or not any("@" in str(d) for d in shape):
        return None
    return SpecText(tuple(dim_axes(d)[1] or None for d in shape))


def type_mesh_axes(t) -> list[str]:
    spec = type_spec(t)
    return sorted(spec.axes()) if spec else []


def sharded_dim(size, axes: tuple[str, ...]):
    """`size` sharded over mesh `axes` as the types print it (`(8, ('x',))` -> `'8@x'`,
    `(8, ('x', 'y'))` -> `'8@(x,y)'`); `size` itself when `axes` is empty."""
    if not axes:
        return size
    return f"{size}@{axes[0]}" if len(axes) == 1 else f"{size}@({','.join(axes)})"


def with_spec(shape, spec: SpecText | None) -> tuple:
    """Global sizes `shape` with dim i sharded as `spec`'s entry i (none past its end)."""
    if spec is None:
        return tuple(shape)
    return tuple(sharded_dim(sharded_size(d), spec.dim_axes(i)) for i, d in enumerate(shape))


def sharding_param_spec(v) -> SpecText | None:
    """The spec of an `out_sharding=` value: a `NamedSharding(mesh=..., spec=P(...))` as JAX
    prints it, or a bare `P(...)`; None for None (or any other text)."""
    if v is None:
        return None
    sh = read_sharding(v)
    return sh.spec if sh is not None else read_spec(v)


def sharding_like(v, spec: SpecText) -> Opaque:
    """`spec` in the spelling of the sharding value `v`: `v`'s `NamedSharding(mesh=...)` text
    with its spec replaced (the mesh JAX printed there), or the bare `P(...)` when `v` is
    not one (the types name the mesh axes but not their sizes)."""
    text = "" if v is None else str(v).strip()
    if read_sharding(text) is None:
        return spec.as_param()
    start = text.index("spec=") + len("spec=")
    old = _head(text[start:])
    return Opaque(text[:start] + spec.to_text() + text[start + len(old) :])


def full_type_spec(t) -> SpecText:
    """The spec of type `t`, one entry per dim (`f32[4,3]` -> P(None, None))."""
    return SpecText(tuple(dim_axes(d)[1] or None for d in t.shape))
