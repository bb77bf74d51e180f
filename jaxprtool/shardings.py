"""The mesh, PartitionSpec and NamedSharding parameters as the text prints them (no jax).

JAX prints `mesh=Mesh('x': 4, 'y': 2, axis_types=(Auto, Auto))`, `in_specs=(P('x', 'y'),)`,
`out_specs=(P(None, 'y'), P())`, older versions `PartitionSpec(...)`, and
`sharding=NamedSharding(mesh=..., spec=P('x', None), memory_kind=device)`; the parser keeps
them as `params.Opaque` text.  This module reads them into small models (`MeshText`,
`SpecText`), writes new specs back in the text's own spelling (AD adds specs for tangents and
residuals), and reads the `8@x` dims of JAX 0.12's explicitly sharded types.
"""

from __future__ import annotations

import contextlib
import contextvars
import re

from .core import JaxprError, eqn_subjaxprs, parens_balanced
from .frozen import Frozen, set_field
from .lazy import DTypeName, LazyPattern
from .params import EnumValue, Opaque, SymExpr, all_ints, split_top_level

_AXIS = LazyPattern(r"'([^']*)'\s*:\s*(\d+)")
_TYPES = LazyPattern(r"axis_types=\(([^)]*)\)")


class MeshText(Frozen):
    """A printed mesh: axis names and sizes in order, axis types (Auto/Explicit/Manual)."""

    __slots__ = ("names", "sizes", "types", "complete", "device_ids")
    names: tuple[str, ...]
    sizes: tuple[int, ...]
    types: tuple[str, ...]
    #: False for texts that do not say the sizes (`Mesh()`, an object repr)
    complete: bool
    #: the device ids in mesh order, flattened, when the text lists them (2022's
    #: `Mesh(device_ids=array([[0, 1], [2, 3]]), axis_names=('x', 'y'))`); None: in order
    device_ids: tuple[int, ...] | None

    def __init__(
        self,
        names: tuple[str, ...],
        sizes: tuple[int, ...],
        types: tuple[str, ...],
        complete: bool = True,
        device_ids: tuple[int, ...] | None = None,
    ) -> None:
        set_field(self, "names", names)
        set_field(self, "sizes", sizes)
        set_field(self, "types", types)
        set_field(self, "complete", complete)
        set_field(self, "device_ids", device_ids)

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
    old = _device_id_mesh(text)
    if old is not None:
        return old
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


_DEVICE_IDS = LazyPattern(r"Mesh\(device_ids=(?:array\()?")


def _device_id_mesh(text: str) -> MeshText | None:
    """2022's mesh repr, `Mesh(device_ids=array([[0, 1], [2, 3]]), axis_names=('x', 'y'))`
    (numpy's repr of the id array, over several lines when it has two dimensions or more,
    inside a pjit's or xmap's `resource_env=ResourceEnv(...)`): the axis sizes are the
    array's shape.  None for any other text (an empty `Mesh(device_ids=[], ...)` reads as
    a mesh without axes)."""
    m = _DEVICE_IDS.search(text)
    if m is None:
        return None
    parsed = _int_array(text, m.end())
    names_at = text.find("axis_names=", m.end())
    if parsed is None or names_at < 0:
        return None
    (shape, ids), names_text = parsed, _head(text[names_at:])
    names = tuple(re.findall(r"'([^']*)'", names_text))
    if len(names) != len(shape) or (not names and ids):
        return None
    return MeshText(names, shape, ("Auto",) * len(names), bool(names), ids)


_INT = LazyPattern(r"\s*(\d+)")


def _int_array(text: str, start: int) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """The nested list of integers at `text[start]` (`[[0, 1], [2, 3]]`): its shape and its
    elements in order; None when it is not a rectangular one."""
    pos = start

    def skip():
        nonlocal pos
        while pos < len(text) and text[pos].isspace():
            pos += 1

    def value():
        nonlocal pos
        skip()
        if text[pos] != "[":
            m = _INT.match(text, pos)
            if m is None:
                raise ValueError(pos)
            pos = m.end()
            return int(m.group(1))
        pos += 1
        items: list = []
        skip()
        while text[pos] != "]":
            items.append(value())
            skip()
            if text[pos] == ",":
                pos += 1
                skip()
            elif text[pos] != "]":
                raise ValueError(pos)
        pos += 1
        return items

    try:
        nested = value()
    except (ValueError, IndexError):
        return None
    shape: list[int] = []
    x = nested
    while isinstance(x, list):
        shape.append(len(x))
        x = x[0] if x else None
    ids: list[int] = []

    def flat(v, d: int) -> bool:
        if d == len(shape):
            ids.append(v)
            return isinstance(v, int)
        return isinstance(v, list) and len(v) == shape[d] and all(flat(w, d + 1) for w in v)

    if not flat(nested, 0):
        return None
    return (tuple(shape) if ids else ()), tuple(ids)


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


class OpShardingText(Frozen):
    """2022's `OpShardingSharding({devices=[4,1,2]0,1,2,3,4,5,6,7 last_tile_dim_replicate})`
    or `OpShardingSharding({replicated})`: the tile counts per dim (with the replication
    count last when `last_tile_dim_replicate`) and the device ids tile by tile."""

    __slots__ = ("tiles", "devices", "replicate_last")
    tiles: tuple[int, ...]
    devices: tuple[int, ...]
    replicate_last: bool

    def __init__(
        self, tiles: tuple[int, ...], devices: tuple[int, ...], replicate_last: bool = False
    ) -> None:
        set_field(self, "tiles", tiles)
        set_field(self, "devices", devices)
        set_field(self, "replicate_last", replicate_last)

    @property
    def replicated(self) -> bool:
        return not self.tiles


_OP_SHARDING = LazyPattern(
    r"OpShardingSharding\(\{(?:(replicated)|devices=\[([\d,]+)\]([\d,]+)"
    r"( last_tile_dim_replicate)?)\}\)"
)


def read_op_sharding(v) -> OpShardingText | None:
    """An `OpShardingSharding(...)` value, or None for any other text (and for the forms
    not read: maximal, manual, iota tile assignments)."""
    m = _OP_SHARDING.fullmatch(str(v).strip())
    if m is None:
        return None
    if m.group(1):
        return OpShardingText((), ())
    tiles = tuple(int(t) for t in m.group(2).split(","))
    devices = tuple(int(d) for d in m.group(3).split(","))
    n = 1
    for t in tiles:
        n *= t
    if n != len(devices) or len(set(devices)) != n:
        return None
    return OpShardingText(tiles, devices, bool(m.group(4)))


def with_batch_dim(v, d: int | None):
    """A jit's `NamedSharding` entry for an operand or result that gained a batch dimension
    at `d` (JAX's `_pjit_batcher_for_sharding`): the spec gets None there, so the mesh axes
    stay on the dimensions they sharded; a bare `P(...)` (a reshape's `sharding` the tool
    wrote) likewise.  Other entries (unspecified) are kept."""
    if d is None:
        return v
    text = str(v).strip()
    bare = read_spec(text)
    if bare is not None and d <= len(bare.entries):
        entries = list(bare.entries)
        entries.insert(d, None)
        return SpecText(tuple(entries), bare.cls, bare.extra).as_param()
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
    """`'8@x'` -> (8, ('x',)); `'8@(x,y)'` -> (8, ('x', 'y')); an int -> (d, ()).  The size is
    None when it is symbolic (`'2*b@x'` -> (None, ('x',)), `'b'` -> (None, ()))."""
    if isinstance(d, int):
        return d, ()
    size, names = _split_dim(str(d))
    return (int(size) if size.isdigit() else None), names


def _split_dim(text: str) -> tuple[str, tuple[str, ...]]:
    """A dim's text as its size's text and its mesh axes (`'2*b@(x,y)'` -> ('2*b', ('x',
    'y'))); no axes for a dim without `@`."""
    size, _, axes = text.partition("@")
    axes = axes.strip()
    if axes.startswith("(") and axes.endswith(")"):
        axes = axes[1:-1]
    return size.strip(), tuple(a.strip().strip("'") for a in axes.split(",") if a.strip())


_AXIS_NAME = LazyPattern(r"[^\W\d]\w*")
_SIZE_TEXT = LazyPattern(r"[\w\s+*(),-]+")


def is_sharded_dim(d) -> bool:
    """A dim printed `SIZE@AXES` with mesh axis names and a static (`8@x`, `8@(x,y)`) or
    symbolic (`2*b@x`, `2*b + 2@x`) size, not an expression that merely contains one (`8@x +
    8@x`; the dim arithmetic of `shapes.util` writes a sharded operand in parentheses,
    `2*(2*b@x)`, `(2*b@x) + 1`, so such a result never reads as one)."""
    if not isinstance(d, str) or "@" not in d:
        return False
    size, names = _split_dim(d)
    return _is_size_text(size) and bool(names) and all(map(_AXIS_NAME.fullmatch, names))


def _is_size_text(size: str) -> bool:
    """A static or symbolic size as the types print it: digits, names and `+ - * ( ) ,` with
    balanced parentheses."""
    return _SIZE_TEXT.fullmatch(size) is not None and parens_balanced(size)


def sharded_size(d):
    """The global size of an explicitly sharded dim (`'8@x'` -> 8, `'2*b@x'` -> `'2*b'`);
    any other dim unchanged."""
    if not is_sharded_dim(d):
        return d
    size = _split_dim(d)[0]
    return int(size) if size.isdigit() else size


def sharded_like(src, size):
    """`size` on the mesh axes of dim `src` (`('8@x', 4)` -> `'4@x'`, `('2*b@x', '2*b + 2')`
    -> `'2*b + 2@x'`), as JAX keeps a sliced, padded or concatenated dim's sharding; `size`
    itself when `src` is not sharded."""
    if is_sharded_dim(src) and (isinstance(size, int) or _is_size_text(str(size))):
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


# ---------------------------------------------------------------- the mesh axis sizes a text prints

_MESH_AT = LazyPattern(r"(?:Abstract)?Mesh\(|mesh=\{")


def meshes_in(v) -> list[MeshText]:
    """The complete meshes a parameter value prints: a jit's `ctx_mesh=Mesh('x': 2, ...)`, a
    shard_map's `mesh=`, the `AbstractMesh('x': 2, ...)` of a `NamedSharding(mesh=...)`
    (0.4's `NamedSharding(mesh={'x': 2}, ...)`), 2022's `Mesh(device_ids=array(...),
    axis_names=...)`, in tuples and lists too."""
    if isinstance(v, (tuple, list)):
        return [m for x in v for m in meshes_in(x)]
    if not isinstance(v, (Opaque, str)):
        return []
    text = str(v)
    found = []
    for at in _MESH_AT.finditer(text):
        start = at.start() if at.group().endswith("(") else at.start() + len("mesh=")
        m = read_mesh(text[start:]) if text[start] != "{" else _dict_mesh(text[start:])
        if m.complete:
            found.append(m)
    return found


def _dict_mesh(text: str) -> MeshText:
    """`{'x': 2, 'y': 4}` (0.4's NamedSharding repr prints the mesh as its shape dict)."""
    body = text[: text.find("}") + 1]
    axes = _AXIS.findall(body)
    names = tuple(a for a, _ in axes)
    return MeshText(names, tuple(int(s) for _, s in axes), ("Auto",) * len(names), bool(names))


#: parameter value classes that print no mesh (`meshes_in` is [] for them; a dtype
#: parameter prints its name)
_NO_TEXT = frozenset({int, bool, float, type(None), EnumValue, SymExpr, DTypeName})


def _ints_only(v) -> bool:
    """A tuple or list of ints and such tuples and lists (dimension numbers): no mesh inside.
    (A stack, not recursion: every dot_general's dimension numbers are asked.)"""
    if all_ints(v):  # (a flat tuple of ints, most values: axes, shapes, permutations)
        return True
    stack = [v]
    while stack:
        for x in stack.pop():
            c = x.__class__
            if c is not int:
                if c is not tuple and c is not list:
                    return False
                stack.append(x)
    return True


def printed_axis_sizes(jaxpr) -> dict[str, int | None]:
    """Mesh axis name -> size, over every mesh the program's parameters print (None for an
    axis that two meshes give different sizes).

    Every command runs this over the whole program, so the loop asks only the equations
    with parameters (a nested jaxpr is one) for more than that (`core.all_eqns` would)."""
    sizes: dict[str, int | None] = {}
    seen: set[int] = set()

    def walk(j) -> None:
        seen.add(id(j))
        for e in j.eqns:
            if not e.params:
                continue
            for v in e.params.values():
                if v.__class__ in _NO_TEXT or (v.__class__ is tuple and _ints_only(v)):
                    continue  # (most values: axes, dimension numbers, None, enums)
                for m in meshes_in(v):
                    for name, size in zip(m.names, m.sizes):
                        sizes[name] = size if sizes.get(name, size) == size else None
            if e.no_subjaxprs:  # (`eqn_subjaxprs`' first answer, without the call)
                continue
            for sub in eqn_subjaxprs(e):
                if id(sub) not in seen:
                    walk(sub)

    walk(jaxpr)
    return sizes


#: the mesh axis sizes of the program being transformed (`axis_sizes_of`), and the same
#: as a sorted tuple (a key of the shape rules' memo: results may depend on them).
#: (why a value cannot carry it: the shape rules read them (a sharded dim's per-device
#: size), and the shape rules are called from the reader, the checker, the passes and the
#: AD and batching builders alike with `(in_types, params)` only, JAX's signature; a
#: context variable keeps two threads' programs apart.)
_AXIS_SIZES: contextvars.ContextVar[dict[str, int | None] | None] = contextvars.ContextVar(
    "axis_sizes", default=None
)
# (why a value cannot carry it: as `_AXIS_SIZES`, of which it is the hashable form); public:
# the compiled builder reads it without calling `axis_sizes_key` (`_twin.bind_fast_vars`, on
# every type its memo answers)
AXIS_SIZES_KEY: contextvars.ContextVar[tuple] = contextvars.ContextVar("axis_sizes_key", default=())


#: `axis_sizes_key()`: the mesh axis sizes in force, hashable (empty outside
#: `axis_sizes_of`).  The context variable's own `get`, bound (no Python frame): the
#: builder and the shape rules' memo ask it for every type they look up
axis_sizes_key = AXIS_SIZES_KEY.get


def axis_sizes(jaxpr, given: dict[str, int] | None = None) -> dict[str, int | None]:
    """The sizes `jaxpr` prints (none for None) and `given` (the command line's `--mesh`);
    raises where they disagree."""
    sizes = dict(printed_axis_sizes(jaxpr)) if jaxpr is not None else {}
    for name, size in (given or {}).items():
        if sizes.get(name, size) != size:
            raise JaxprError(
                f"--mesh gives mesh axis '{name}' size {size}, but the program's mesh gives "
                f"it size {sizes[name]}"
            )
        sizes[name] = size
    return sizes


def axis_sizes_of(jaxpr, given: dict[str, int] | None = None):
    """Within the block, `axis_size` answers with the sizes `jaxpr` prints (none for None),
    and `given` (the command line's `--mesh`), for the rules whose results' shardings depend
    on them (a reshape that splits or merges a sharded dim)."""
    return axis_sizes_in_force(axis_sizes(jaxpr, given))


@contextlib.contextmanager
def axis_sizes_in_force(sizes: dict[str, int | None]):
    """Within the block, `axis_size` answers with `sizes` (`axis_sizes`' result)."""
    token = _AXIS_SIZES.set(sizes)
    key_token = AXIS_SIZES_KEY.set(tuple(sorted(sizes.items(), key=lambda kv: kv[0])))
    try:
        yield sizes
    finally:
        AXIS_SIZES_KEY.reset(key_token)
        _AXIS_SIZES.reset(token)


class AxisSizeUnknown(Exception):
    """A rule needed the size of mesh axis `name`, which neither the text nor --mesh gives."""

    def __init__(self, name: str, conflicting: bool):
        super().__init__(name)
        self.name, self.conflicting = name, conflicting

    def advice(self) -> str:
        if self.conflicting:
            return f"the program's meshes give mesh axis '{self.name}' different sizes"
        return (
            f"the size of mesh axis '{self.name}' is not printed in the text (JAX prints it "
            "in a jit's ctx_mesh, a shard_map's mesh or a NamedSharding): give it with "
            f"--mesh {self.name}=SIZE"
        )


def axis_size(name: str) -> int:
    """The size of mesh axis `name` in the program being transformed (AxisSizeUnknown)."""
    sizes = _AXIS_SIZES.get() or {}
    size = sizes.get(name)
    if size is None:
        raise AxisSizeUnknown(name, name in sizes)
    return size


def parse_mesh_option(text: str) -> dict[str, int]:
    """`x=4,y=2` -> {'x': 4, 'y': 2} (JaxprError on bad syntax)."""
    out: dict[str, int] = {}
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        name, eq, val = part.partition("=")
        name, val = name.strip(), val.strip()
        if not eq or not name.isidentifier() or not val.isdigit() or int(val) < 1:
            raise JaxprError(f"bad --mesh '{text}': expected NAME=SIZE,... e.g. --mesh x=4,y=2")
        if name in out:
            raise JaxprError(f"bad --mesh '{text}': axis '{name}' given twice")
        out[name] = int(val)
    if not out:
        raise JaxprError(f"bad --mesh '{text}': expected NAME=SIZE,... e.g. --mesh x=4,y=2")
    return out
