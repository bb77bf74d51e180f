"""Multi-device runs: device meshes, input placement, output gathering, JAX's distributed runtime.

The distributed engine is JAX's own: `shard_map` bodies run through `jax.shard_map`,
collectives are bound as JAX's primitives, shardings become `NamedSharding`s over a
`jax.sharding.Mesh`, XLA's SPMD partitioner does the rest; several processes join through
`jax.distributed.initialize` (CPU collectives over gloo).  This module holds the run's
configuration (what `--mesh`, `--devices`, `--coordinator`... asked for), builds concrete
meshes for the meshes a program prints, places the inputs and gathers the outputs.
jax is imported lazily.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..core import JaxprError, all_eqns
from ..params import split_top_level
from ..record import prim as record_of
from ..shardings import MeshText, read_mesh, read_op_sharding, read_sharding, read_spec, type_spec


@dataclass
class RunConfig:
    """What the command line asked for (`--mesh`, `--devices`, the distributed flags)."""

    mesh: dict[str, int] | None = None
    devices: int | None = None
    platform: str = "cpu"
    coordinator: str | None = None
    num_processes: int | None = None
    process_id: int | None = None
    #: seconds JAX waits for every process to join (--join-timeout)
    join_timeout: int = 60
    #: called with b"j" before joining and b"J" once joined (the supervisor's pipe)
    join_progress: Callable[[bytes], None] | None = None
    #: shardings of the last run's outputs (for --show-sharding)
    last_shardings: list = field(default_factory=list)
    #: the last run's inputs (for --show-sharding): (label, sharding, chosen by XLA)
    last_input_shardings: list = field(default_factory=list)
    #: > 0 while a multi-device run or compile is in progress
    active: int = 0


# (why a value cannot carry it: the runner, the compiler and the evaluator's collectives
# read the mesh and devices of the command's --mesh/--devices; `configured` sets it for a
# block, and the run API takes no configuration value yet)
CONFIG = RunConfig()
_MESHES: dict = {}


@contextlib.contextmanager
def configured(cfg: RunConfig):
    """Use `cfg` for the runs inside the block (the CLI sets it per command)."""
    global CONFIG  # (see `CONFIG`)
    saved, CONFIG = CONFIG, cfg
    try:
        yield cfg
    finally:
        CONFIG = saved


# ---------------------------------------------------------------- what a program needs


def program_meshes(jaxpr) -> list[MeshText]:
    """The meshes a program prints (shard_map, shardings, xla_pmap axes), in order, distinct."""
    seen: dict[tuple, MeshText] = {}

    def add(m: MeshText):
        seen.setdefault((m.names, m.sizes, m.complete), m)

    for e in all_eqns(jaxpr):
        p = e.params
        mesh_of = record_of(e.prim).mesh_of
        m = mesh_of(e) if mesh_of is not None else None
        if m is not None:
            add(m)
        for k in ("sharding", "in_shardings", "out_shardings", "dst_sharding"):
            vals = p.get(k)
            for v in vals if isinstance(vals, (tuple, list)) else (vals,):
                s = read_sharding(v) if v is not None else None
                if s is not None:
                    add(s.mesh)
    return list(seen.values())


def sharded_type_axes(jaxpr) -> list[str]:
    """Mesh axes named by explicitly sharded types (`f32[8@x,4]`) anywhere in the program."""
    axes: list[str] = []

    def look(t):
        spec = type_spec(t)
        for e in spec.entries if spec else ():
            for a in e or ():
                if a not in axes:
                    axes.append(a)

    for v in list(jaxpr.invars) + list(jaxpr.constvars):
        look(v.type)
    for e in all_eqns(jaxpr):
        for o in e.outputs:
            look(o.type)
    return axes


def is_multi_device(jaxpr) -> bool:
    """Whether the program needs a device mesh (or the command line gave one)."""
    if CONFIG.mesh:
        return True
    if sharded_type_axes(jaxpr):
        return True
    for e in all_eqns(jaxpr):
        if record_of(e.prim).multi_device:
            return True
    return any(m.complete and m.size > 1 for m in program_meshes(jaxpr))


def run_mesh(jaxpr) -> MeshText | None:
    """The mesh that inputs are placed on: --mesh, or the first complete mesh of the text."""
    explicit = bool(sharded_type_axes(jaxpr))
    if CONFIG.mesh:
        names = tuple(CONFIG.mesh)
        kind = "Explicit" if explicit else "Auto"
        return MeshText(names, tuple(CONFIG.mesh.values()), (kind,) * len(names))
    for m in program_meshes(jaxpr):
        if m.complete:
            return m
    if explicit:
        axes = sharded_type_axes(jaxpr)
        raise JaxprError(
            f"the program's types are sharded over mesh axes {', '.join(axes)} but the text "
            "does not print the mesh: give it with --mesh " + ",".join(f"{a}=SIZE" for a in axes)
        )
    return None


def devices_needed(jaxpr) -> int:
    n = 1
    for m in program_meshes(jaxpr):
        if m.complete:
            n = max(n, resolve(m).size)
    if CONFIG.mesh:
        n = max(n, int(np.prod(list(CONFIG.mesh.values()))))
    return n


def resolve(m: MeshText, eqn=None) -> MeshText:
    """A printed mesh checked against --mesh, or completed from it when the text lacks it."""
    given = CONFIG.mesh
    loc = getattr(eqn, "loc", None)
    if not m.complete:
        if not given:
            raise JaxprError(
                f"the program's mesh {m} does not say its axis sizes: give them with --mesh", loc
            )
        kind = m.types[0] if m.types else "Auto"
        return MeshText(tuple(given), tuple(given.values()), (kind,) * len(given))
    if given:
        for name, size in zip(m.names, m.sizes):
            if name in given and given[name] != size:
                raise JaxprError(
                    f"--mesh gives axis '{name}' size {given[name]}, but the program's mesh is "
                    f"{m.spec_text()}",
                    loc,
                )
    return m


# ---------------------------------------------------------------- devices and processes


def setup(jaxpr=None, needed: int | None = None) -> None:
    """Before JAX starts: the host device count (`--devices`, default what the mesh needs) and
    the distributed runtime.  After JAX started: check that enough devices exist."""
    import jax
    from jax._src import xla_bridge

    cfg = CONFIG
    nproc = cfg.num_processes or 1
    if needed is None:
        needed = devices_needed(jaxpr) if jaxpr is not None else 1
    local = cfg.devices or max(1, -(-needed // nproc))
    if not xla_bridge.backends_are_initialized():
        if cfg.platform in ("cpu", "auto"):  # auto: the CPU's count, in case it is the default
            jax.config.update("jax_num_cpu_devices", local)
        if cfg.coordinator:
            if cfg.platform == "cpu":
                jax.config.update("jax_cpu_collectives_implementation", "gloo")
            _join(cfg, nproc)
    elif cfg.coordinator and not jax.distributed.is_initialized():
        raise JaxprError(
            "--coordinator: JAX was already started in this process; the distributed runtime "
            "must be initialised before JAX starts"
        )
    if cfg.devices is not None and needed > cfg.devices * nproc:
        per = f" per process x {nproc} processes" if nproc > 1 else ""
        raise JaxprError(f"the mesh needs {needed} devices but --devices gives {cfg.devices}{per}")
    have = len(platform_devices())
    if cfg.devices and cfg.devices * nproc > have and cfg.platform == "cpu":
        raise JaxprError(
            f"--devices {cfg.devices}: JAX was already started in this process with {have} "
            f"{cfg.platform} device{'s' if have != 1 else ''} (the host device count must be "
            "set before JAX starts)"
        )
    if needed > have:
        hint = (
            " (JAX was already started with that many; the host device count must be set before "
            "JAX starts)"
            if cfg.platform == "cpu"
            and cfg.devices is None
            and xla_bridge.backends_are_initialized()
            and have < local * nproc
            else ""
        )
        raise JaxprError(
            f"the mesh needs {needed} devices but {have} {cfg.platform} device"
            f"{'s are' if have != 1 else ' is'} available{hint}"
        )


def _join(cfg: RunConfig, nproc: int) -> None:
    """jax.distributed.initialize, reporting its start and end to `cfg.join_progress` (JAX
    aborts the process when the run does not form: the supervisor reports that)."""
    import jax

    if cfg.join_progress is not None:
        cfg.join_progress(b"j")
    try:
        jax.distributed.initialize(
            cfg.coordinator,
            num_processes=nproc,
            process_id=cfg.process_id or 0,
            initialization_timeout=cfg.join_timeout,
            cluster_detection_method="deactivate",
        )
    except Exception as e:  # noqa: BLE001 - JAX's complaint, reported plainly
        raise JaxprError(
            f"cannot join the distributed run at {cfg.coordinator} (process "
            f"{cfg.process_id or 0} of {nproc}): "
            f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        ) from None
    if cfg.join_progress is not None:
        cfg.join_progress(b"J")


def platform_devices() -> list:
    import jax

    from .jaxfn import get_device

    first = get_device(CONFIG.platform)
    return jax.devices(first.platform)  # "auto": JAX's default backend's devices


def process_index() -> int:
    import jax

    return jax.process_index()


def concrete_mesh(m, eqn=None):
    """A `jax.sharding.Mesh` for a printed mesh (a MeshText or the param value)."""
    import jax

    if not isinstance(m, MeshText):
        m = read_mesh(m)
    m = resolve(m, eqn)
    key = (m.names, m.sizes, m.types, m.device_ids, CONFIG.platform)
    hit = _MESHES.get(key)
    if hit is not None:
        return hit
    devs = platform_devices()
    if m.size > len(devs):
        raise JaxprError(
            f"the mesh {m.spec_text()} needs {m.size} devices but {len(devs)} "
            f"{CONFIG.platform} device{'s are' if len(devs) != 1 else ' is'} available "
            "(on CPU, --devices N sets the host device count)",
            getattr(eqn, "loc", None),
        )
    types = tuple(
        getattr(jax.sharding.AxisType, t, jax.sharding.AxisType.Auto)
        for t in (m.types or ("Auto",) * len(m.names))
    )
    ids = m.device_ids or range(m.size)
    if max(ids, default=0) >= len(devs):
        raise JaxprError(
            f"the mesh {m.spec_text()} numbers device {max(ids)} but {len(devs)} "
            f"{CONFIG.platform} devices are available (on CPU, --devices N sets the host "
            "device count)",
            getattr(eqn, "loc", None),
        )
    arr = np.array([devs[i] for i in ids], dtype=object).reshape(m.sizes)
    mesh = jax.sharding.Mesh(arr, m.names, axis_types=types)
    _MESHES[key] = mesh
    return mesh


def partition_spec(spec_value, eqn=None, ndim: int | None = None):
    """A `jax.sharding.PartitionSpec` for a printed spec (P(...), PartitionSpec(...), in_names)."""
    from jax.sharding import PartitionSpec as P

    from ..shardings import names_to_spec

    s = read_spec(spec_value)
    if s is None:
        s = names_to_spec(spec_value, ndim)
    if s is None:
        raise JaxprError(
            f"cannot read the partition spec {spec_value} (expected P(...))",
            getattr(eqn, "loc", None),
        )
    entries = [e if e is None or len(e) != 1 else e[0] for e in s.entries]
    return P(*entries, **_spec_keywords(s.extra, spec_value, eqn))


def _spec_keywords(extra: str, spec_value, eqn) -> dict:
    """The keyword parts of a printed spec (`unreduced={'x'}`, `reduced={'y'}`,
    `unreduced_kind=max`) as PartitionSpec's keyword arguments."""
    out: dict = {}
    for part in split_top_level(extra) if extra else ():
        key, _, value = (x.strip() for x in part.partition("="))
        if key in ("unreduced", "reduced") and re.fullmatch(r"\{('[^']*'(, *'[^']*')*)?\}", value):
            out[key] = frozenset(re.findall(r"'([^']*)'", value))
        elif key == "unreduced_kind" and value in _unreduced_kind(spec_value, eqn).__members__:
            out[key] = _unreduced_kind(spec_value, eqn)[value]
        else:
            raise JaxprError(
                f"cannot run the partition spec {spec_value}: unknown part {part!r}",
                getattr(eqn, "loc", None),
            )
    return out


def _unreduced_kind(spec_value, eqn):
    """JAX's `UnreducedKind` (JAX 0.11 and later); imported only for a spec that names one,
    so that every other spec runs on older JAX."""
    try:
        from jax._src.partition_spec import UnreducedKind
    except ImportError:
        import jax

        raise JaxprError(
            f"cannot run the partition spec {spec_value}: unreduced_kind needs JAX 0.11 or "
            f"later (the installed JAX {jax.__version__} has no UnreducedKind)",
            getattr(eqn, "loc", None),
        ) from None
    return UnreducedKind


def named_sharding(value, eqn=None):
    """A `NamedSharding` for a printed `NamedSharding(...)` value (or 2022's
    `OpShardingSharding({...})` on the mesh of its pjit), or None when it has none."""
    import jax

    s = read_sharding(value)
    if s is None:
        return op_sharding(value, eqn)
    return jax.sharding.NamedSharding(concrete_mesh(s.mesh, eqn), partition_spec(s.spec.to_text()))


def op_sharding(value, eqn=None):
    """2022's `OpShardingSharding({devices=[4,1,2]0,1,...,7 last_tile_dim_replicate})` (an
    XLA HloSharding whose device numbers index the device assignment of its pjit: the
    devices of its `resource_env` mesh, in mesh order) as the `NamedSharding` of that mesh
    that lays the array out so; None for any other value.  One that the mesh cannot
    express, or over more devices than it has, is refused at the equation."""
    import jax

    text = str(value).strip()
    hlo = read_op_sharding(text)
    if hlo is None:
        return None
    mesh_of = record_of(eqn.prim).mesh_of if eqn is not None else None
    m = mesh_of(eqn) if mesh_of is not None else None
    loc = getattr(eqn, "loc", None)
    if m is None:
        raise JaxprError(
            f"cannot run {text}: its pjit prints no device mesh (resource_env) to place it on",
            loc,
        )
    mesh = concrete_mesh(m, eqn)
    if hlo.replicated:
        return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    return _tiled_on_mesh(text, hlo, mesh, m, loc)


def _tiled_on_mesh(text, hlo, mesh, m: MeshText, loc):
    """The NamedSharding of `mesh` whose device tiles are `hlo`'s (JAX's own conversion of
    an HloSharding to a mesh's spec), refused when there is none."""
    import jax
    from jax._src.lib import xla_client as xc
    from jax._src.sharding_impls import GSPMDSharding, _gspmd_to_named_sharding_via_mesh

    if max(hlo.devices) >= m.size:
        raise JaxprError(
            f"cannot run {text}: it numbers device {max(hlo.devices)} of a device "
            f"assignment of {m.size} (the pjit's mesh {m.spec_text()})",
            loc,
        )
    proto = xc.HloSharding.from_string(text[text.index("{") : text.rindex("}") + 1]).to_proto()
    gspmd = GSPMDSharding(tuple(mesh.devices.flat), proto)
    try:
        named = _gspmd_to_named_sharding_via_mesh(gspmd, mesh)
    except Exception:  # noqa: BLE001 - no spec of this mesh lays it out so
        named = None
    ndim = len(hlo.tiles) - hlo.replicate_last
    if named is None or not named.is_equivalent_to(gspmd, ndim):
        raise JaxprError(
            f"cannot run {text}: no partition spec of the pjit's mesh {m.spec_text()} lays "
            "the array out as it says",
            loc,
        )
    return jax.sharding.NamedSharding(mesh, named.spec)


def explicit_result_sharding(eqn):
    """The result sharding to bind for an equation of an explicitly sharded program: its
    printed result type's spec (`f32[4,8@x]` -> P(None, 'x'), `f32[4,3]` -> P()) on the
    current explicit mesh, for a primitive whose printout omits its result sharding parameter
    but whose bind needs one (a contraction over a sharded dim) or would replicate the result.
    None outside an explicit mesh or when no operand or result type is sharded."""
    import jax

    types = [a.type for a in eqn.inputs if hasattr(a, "type")] + [eqn.outputs[0].type]
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty or not mesh.are_all_axes_explicit or not any(map(type_spec, types)):
        return None
    spec = type_spec(eqn.outputs[0].type)
    return jax.sharding.NamedSharding(mesh, partition_spec(spec.to_text()) if spec else jax.P())


# ---------------------------------------------------------------- inputs and outputs


def input_shardings(jaxpr, mesh_text: MeshText | None):
    """One sharding (or None: the text does not place it) per const and input: its explicitly
    sharded type's, or the operand placement of the first top-level call that reads it (a
    jit's in_shardings: JAX puts the arguments of a jit there).  A shard_map's in_specs or a
    pmap's in_axes do not place the input they read: under `jax.jit` they constrain it, and
    XLA chooses (it need not choose theirs: an input that a P() shard_map reads before a
    P('x') one is sharded over x)."""
    import jax

    vs = list(jaxpr.constvars) + list(jaxpr.invars)
    pos = {id(v): i for i, v in enumerate(vs)}
    out: list = [None] * len(vs)
    for i, v in enumerate(vs):
        spec = type_spec(v.type)
        if spec is not None and mesh_text is not None:
            out[i] = jax.sharding.NamedSharding(
                concrete_mesh(mesh_text), partition_spec(spec.to_text())
            )
    for e in jaxpr.eqns:
        if record_of(e.prim).call_body is None:
            continue
        for k, a in enumerate(e.inputs):
            i = pos.get(id(a))
            if i is None or out[i] is not None:
                continue
            out[i] = _operand_sharding(e, k, a)
    return out


def _operand_sharding(e, k, a):
    rule = record_of(e.prim).operand_placement
    if rule is None:
        return None
    try:
        return rule(e, k, a)
    except JaxprError:
        raise
    except Exception:  # noqa: BLE001 - a placement we cannot read: replicate
        return None


def enforce_call_placements(eqn, values, results: bool, eager: bool) -> list:
    """`values` (a call's operands, or its results) placed as the call asks, as JAX enforces
    a nested jit's in_shardings and out_shardings: constrained inside a traced run, moved in
    an eager one. Outside a multi-device run, and for keys, they are returned as they are."""
    if not is_multi_device_run():
        return values
    rec = record_of(eqn.prim)
    if (rec.result_placement if results else rec.operand_placement) is None:
        return values
    atoms = eqn.outputs if results else eqn.inputs
    out = []
    for k, (a, x) in enumerate(zip(atoms, values)):
        sh = rec.result_placement(eqn, k) if results else _operand_sharding(eqn, k, a)
        if sh is None or getattr(a.type, "dtype", "").startswith("key<"):
            out.append(x)
        else:
            out.append(_moved(x, sh, eager))
    return out


def _moved(x, sharding, eager: bool):
    import jax

    if eager:
        return jax.device_put(x, sharding)
    return jax.lax.with_sharding_constraint(x, sharding)


def place(x, sharding):
    """A global array from a host array, laid out by `sharding` (works across processes)."""
    import jax

    x = np.asarray(x)
    return jax.make_array_from_callback(x.shape, sharding, lambda idx: x[idx])


def gather(o) -> np.ndarray:
    """A host copy of an output (gathered from every process when it spans several)."""
    if getattr(o, "is_fully_addressable", True):
        return np.asarray(o)
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(o, tiled=True))


def describe(sharding) -> str:
    """One line: `P('x', None) over mesh x=4,y=2 (8 devices)`, or the device of a
    single-device array."""
    import jax

    if isinstance(sharding, jax.sharding.NamedSharding):
        mesh = sharding.mesh
        axes = ",".join(f"{n}={s}" for n, s in mesh.shape.items())
        return f"{sharding.spec} over mesh {axes} ({mesh.size} devices)"
    if is_single_device(sharding):
        (d,) = sharding.device_set
        return f"single device {d.platform}:{d.id}"
    return str(sharding)


def is_single_device(sharding) -> bool:
    """Whether `sharding` is JAX's single-device sharding, asked the way the installed JAX
    offers without a deprecation warning (`is_single_device_sharding`, JAX 0.12; the class
    itself before)."""
    import jax

    test = getattr(jax.sharding, "is_single_device_sharding", None)
    if test is not None:
        return test(sharding)
    return isinstance(sharding, jax.sharding.SingleDeviceSharding)


def sharding_lines(cfg: RunConfig) -> list[str]:
    """`--show-sharding`: each input's sharding (`, chosen by XLA` for one the text does not
    place), then each output's."""
    lines = []
    for label, sh, chosen in cfg.last_input_shardings:
        if sh is None:
            lines.append(f"{label}: unused (jit drops it)")
        else:
            lines.append(f"{label}: {describe(sh)}{', chosen by XLA' if chosen else ''}")
    for i, sh in enumerate(cfg.last_shardings):
        lines.append(f"out{i}: {describe(sh) if sh is not None else 'host value'}")
    return lines


def is_multi_device_run() -> bool:
    """Whether a multi-device run (or compile) is in progress."""
    return CONFIG.active > 0


@contextlib.contextmanager
def active():
    CONFIG.active += 1
    try:
        yield
    finally:
        CONFIG.active -= 1


def input_placements(jaxpr, count: int | None = None) -> list:
    """Per const and input, the sharding the text places it with, or None: left to XLA.

    The text places an input by its explicitly sharded type or a top-level jit's in_shardings
    (`input_shardings`).  One it does not place is left uncommitted, as JAX leaves a numpy
    argument of `jax.jit`: XLA's sharding propagation chooses its sharding
    (`compiled.input_shardings`) from the shard_maps, constraints and calls that read it.
    As in JAX, it is replicated instead on an explicit mesh (its unsharded type says so) and
    when the text names no mesh at all (the mesh is --mesh's alone, `jax.jit` under
    `jax.set_mesh`: nothing to propagate from, and no device assignment without it).  Keys
    are never placed by the rule of the equation they feed (the rule reads the key's type,
    not its uint32 data).  `count`: how many values are given, when they include the nested
    jaxprs' constants (`backend/consts.py`: after the program's own; the text places none)."""
    import jax

    mesh_text = run_mesh(jaxpr)
    shardings = input_shardings(jaxpr, mesh_text)
    default = None
    if mesh_text is not None and ("Explicit" in mesh_text.types or not program_meshes(jaxpr)):
        default = jax.sharding.NamedSharding(concrete_mesh(mesh_text), jax.sharding.PartitionSpec())
    vs = list(jaxpr.constvars) + list(jaxpr.invars)
    out = [
        default if sh is None or getattr(v.type, "dtype", "").startswith("key<") else sh
        for v, sh in zip(vs, shardings)
    ]
    nc = len(jaxpr.constvars)
    return out[:nc] + [default] * ((count or len(vs)) - len(vs)) + out[nc:]


def _labels(jaxpr, count: int) -> list[str]:
    """`const0`, ..., `arg0`, ...: the names --consts and --args give the `count` inputs."""
    nc = count - len(jaxpr.invars)
    return [f"const{i}" for i in range(nc)] + [f"arg{i}" for i in range(len(jaxpr.invars))]


def placed_inputs(jaxpr, xs_host) -> list:
    """Consts then args for an op-by-op run: each the text places, placed so; the others
    uncommitted on the default device, as JAX's op-by-op functions take a numpy argument
    (replicated on the run mesh when the run spans processes: a process-local array cannot
    join a global one)."""
    import jax

    placements = input_placements(jaxpr, len(xs_host))
    spans = jax.process_count() > 1
    mesh_text = run_mesh(jaxpr) if spans else None
    xs = []
    for x, sh in zip(xs_host, placements):
        if sh is None and mesh_text is not None:
            sh = jax.sharding.NamedSharding(concrete_mesh(mesh_text), jax.sharding.PartitionSpec())
        xs.append(place(x, sh) if sh is not None else jax.device_put(x))
    CONFIG.last_input_shardings = [
        (label, x.sharding, False) for label, x in zip(_labels(jaxpr, len(xs)), xs)
    ]
    return xs


def compile_for_inputs(jaxpr, jitted, xs_host):
    """`jitted` (a `jax.jit` of the program) lowered for the host inputs and compiled: the
    inputs `input_placements` places with their sharding, the others with none, so that XLA
    chooses theirs as it does for a numpy argument of `jax.jit`."""
    import jax

    structs = [
        jax.ShapeDtypeStruct(np.shape(x), np.asarray(x).dtype, sharding=sh)
        for x, sh in zip(xs_host, input_placements(jaxpr, len(xs_host)))
    ]
    return jitted.lower(*structs).compile()


def inputs_for(jaxpr, compiled, xs_host) -> list:
    """The host inputs placed as the compiled executable takes them (an input the program
    does not use, which jit drops, stays on the host)."""
    chosen = list(compiled.input_shardings[0])
    placed = input_placements(jaxpr, len(xs_host))
    CONFIG.last_input_shardings = [
        (label, _on_a_mesh(jaxpr, sh), sh is not None and given is None)
        for label, sh, given in zip(_labels(jaxpr, len(xs_host)), chosen, placed)
    ]
    return [x if sh is None else place(x, sh) for x, sh in zip(xs_host, chosen)]


def _on_a_mesh(jaxpr, sharding):
    """A sharding XLA chose (a `GSPMDSharding`, as JAX's `compiled.input_shardings` reads
    when every argument is uncommitted) as a `NamedSharding` of the program's mesh over the
    same devices, to be described as the outputs are; otherwise as it is."""
    import jax

    if sharding is None or isinstance(sharding, jax.sharding.NamedSharding):
        return sharding
    try:
        from jax._src.sharding_impls import GSPMDSharding, _gspmd_to_named_sharding_via_mesh
    except ImportError:  # another JAX: described as JAX prints it
        return sharding
    if not isinstance(sharding, GSPMDSharding):
        return sharding
    devices = tuple(sharding._device_assignment)
    for m in [run_mesh(jaxpr)] + program_meshes(jaxpr):
        if m is None or (not m.complete and not CONFIG.mesh):
            continue
        mesh = concrete_mesh(m)
        if tuple(mesh.devices.flat) == devices:
            return _gspmd_to_named_sharding_via_mesh(sharding, mesh)
    return sharding


def mesh_scope(jaxpr):
    """`jax.set_mesh` of the run mesh when it has explicit axes (sharded types), else nothing."""
    import jax

    mesh_text = run_mesh(jaxpr)
    if mesh_text is not None and "Explicit" in mesh_text.types:
        return jax.set_mesh(concrete_mesh(mesh_text))
    return contextlib.nullcontext()


@contextlib.contextmanager
def run_scope(jaxpr, device: str | None = None):
    """Devices set up, the run marked multi-device, the explicit mesh set (for --repeat and
    compile)."""
    if device is not None:
        CONFIG.platform = "gpu" if device in ("gpu", "cuda") else device
    setup(jaxpr)
    with active(), mesh_scope(jaxpr):
        yield


def sharded_structs(jaxpr, structs) -> list:
    """`jax.ShapeDtypeStruct`s of the consts and inputs with the placement the text gives
    them, or none (XLA chooses, as for a numpy argument of `jax.jit`) (compile)."""
    import jax

    return [
        st if sh is None else jax.ShapeDtypeStruct(st.shape, st.dtype, sharding=sh)
        for st, sh in zip(structs, input_placements(jaxpr, len(structs)))
    ]


def output_shardings(jaxpr) -> list:
    """Per output, the sharding the program asks for (a top-level jit's out_shardings, an
    explicitly sharded type), or None."""
    import jax

    mesh_text = None
    producer = {}
    for e in jaxpr.eqns:
        for k, o in enumerate(e.outputs):
            producer[id(o)] = (e, k)
    out = []
    for v in jaxpr.outvars:
        sh = None
        hit = producer.get(id(v))
        rule = record_of(hit[0].prim).result_placement if hit is not None else None
        if rule is not None:
            sh = rule(*hit)
        spec = type_spec(v.type)
        if sh is None and spec is not None:
            mesh_text = mesh_text or run_mesh(jaxpr)
            if mesh_text is not None:
                sh = jax.sharding.NamedSharding(
                    concrete_mesh(mesh_text), partition_spec(spec.to_text())
                )
        out.append(sh)
    return out


def _constrained(jaxpr, fn):
    """`fn` with its outputs constrained to the program's output shardings."""
    shs = output_shardings(jaxpr)
    if not any(s is not None for s in shs):
        return fn

    def f(*xs):
        import jax

        outs = fn(*xs)
        return [
            o if s is None else jax.lax.with_sharding_constraint(o, s) for o, s in zip(outs, shs)
        ]

    return f


#: (id(jaxpr), `run_variant`) -> (jaxpr, jitted); the jaxpr is held so its id stays unique,
#: the mesh and platform are in the key since the traced program's meshes follow them
_JIT_CACHE: dict = {}


def run_variant(kind: str, dims, nested: bool) -> tuple:
    """How a program is made a `jax.jit` function (`jit_cache.shared_jit`'s variant): `kind`
    ("plain": no placement; "placed": calls placed as the text says; "constrained": outputs
    constrained too), the symbolic sizes, whether it takes the nested constants, and the
    run's --mesh and platform (which the traced program's meshes follow)."""
    dims = tuple(sorted((dims or {}).items()))
    return (kind, dims, nested, tuple((CONFIG.mesh or {}).items()), CONFIG.platform)


def _jitted(jaxpr, dims, nested: bool = False):
    """The program under `jax.jit`, its outputs constrained as it asks, made once per program
    (and dims, mesh, platform): JAX's caches then skip tracing and XLA compiling it again.
    nested: it takes the nested jaxprs' constants too (`as_jax_function`)."""
    import jax

    from .jaxfn import as_jax_function
    from .jit_cache import shared_jit

    variant = run_variant("constrained", dims, nested)
    key = (id(jaxpr), variant)
    hit = _JIT_CACHE.get(key)
    if hit is not None and hit[0] is jaxpr:
        return hit[1]
    if len(_JIT_CACHE) >= 64:
        _JIT_CACHE.pop(next(iter(_JIT_CACHE)))

    def make():
        f = as_jax_function(jaxpr, dims, False, nested=nested, placement=enforce_call_placements)
        return jax.jit(_constrained(jaxpr, f))

    fn = shared_jit(jaxpr, variant, make)
    _JIT_CACHE[key] = (jaxpr, fn)
    return fn


def evaluate(
    jaxpr,
    args,
    consts,
    dims=None,
    device: str | None = None,
    eager: bool = False,
    trace=None,
    debug_nans=False,
    jitted=None,
):
    """Run a multi-device program: the program jitted as a whole, compiled with the inputs
    the text places placed so and the others as XLA chooses (or run op by op, shard_maps
    compiled), outputs gathered to the host."""
    import jax

    from .consts import all_constvars, check_count, split
    from .evaluator import Interpreter
    from .jaxfn import _unwrap_keys, _wrap_keys, compile_error, x64_scope

    if device is not None:
        CONFIG.platform = "gpu" if device in ("gpu", "cuda") else device
    setup(jaxpr)
    host = list(consts) + list(args)
    nc = len(consts)
    nested = nc != len(jaxpr.constvars)  # the nested jaxprs' constants too (backend/consts)
    if nested:
        check_count(jaxpr, nc)
    with active(), x64_scope(jaxpr), mesh_scope(jaxpr):
        try:
            if eager:
                xs = placed_inputs(jaxpr, host)
                cvars = all_constvars(jaxpr) if nested else list(jaxpr.constvars)
                ws = _wrap_keys(jaxpr, xs, cvars + list(jaxpr.invars))
                top, inner = split(jaxpr, ws[:nc])
                interp = Interpreter(
                    "eager",
                    dims=dims,
                    trace=trace,
                    debug_nans=debug_nans,
                    nested=inner,
                    root=jaxpr,
                    placement=enforce_call_placements,
                )
                outs = _unwrap_keys(jaxpr, interp.run(jaxpr, top, ws[nc:]))
                shs = output_shardings(jaxpr)
                outs = [o if sh is None else jax.device_put(o, sh) for o, sh in zip(outs, shs)]
            else:
                fn = jitted or _jitted(jaxpr, dims, nested)
                compiled = compile_for_inputs(jaxpr, fn, host)
                outs = compiled(*inputs_for(jaxpr, compiled, host))
        except JaxprError:
            raise
        except (TypeError, ValueError, NotImplementedError) as e:
            raise compile_error(jaxpr, e) from None
        outs = list(outs)
        CONFIG.last_shardings = [getattr(o, "sharding", None) for o in outs]
        return [gather(o) for o in outs]


# ---------------------------------------------------------------- compiled collectives

_COLLECTIVES = (
    "all-reduce",
    "all-gather",
    "reduce-scatter",
    "all-to-all",
    "collective-permute",
    "collective-broadcast",
    "ragged-all-to-all",
)


def collective_stats(hlo_text: str) -> list[tuple[str, int, int]]:
    """(collective, count, result bytes) for the collectives of an HLO module's text."""
    import re

    from ..core import np_dtype, short_dtype_name

    counts: dict[str, list[int]] = {}
    pat = re.compile(
        r"=\s*(\(?[a-z0-9_]+\[[^=]*?\]\S*(?:,\s*[a-z0-9_]+\[[^\]]*\]\S*)*\)?)\s+("
        + "|".join(re.escape(c) for c in _COLLECTIVES)
        + r")(-start)?\("
    )
    for m in pat.finditer(hlo_text):
        name = m.group(2)
        nbytes = 0
        for dt, dims in re.findall(r"([a-z][a-z0-9]*)\[([0-9,]*)\]", m.group(1)):
            try:
                size = np_dtype(short_dtype_name(_hlo_dtype(dt))).itemsize
            except (KeyError, TypeError):
                continue
            n = 1
            for d in dims.split(","):
                if d.strip():
                    n *= int(d)
            nbytes += n * size
        c = counts.setdefault(name, [0, 0])
        c[0] += 1
        c[1] += nbytes
    return [(k, v[0], v[1]) for k, v in counts.items()]


def _hlo_dtype(dt: str) -> str:
    return {"pred": "bool", "s8": "i8", "s16": "i16", "s32": "i32", "s64": "i64"}.get(dt, dt)


def collective_lines(compiled) -> list[str]:
    """`--stats` lines: the collectives of the optimised HLO, counted, with their bytes."""
    try:
        text = compiled.as_text()
    except Exception:  # noqa: BLE001 - no text for this executable
        return []
    stats = collective_stats(text)
    if not stats:
        return []
    total = sum(c for _, c, _ in stats)
    total_b = sum(b for _, _, b in stats)
    lines = [f"collectives: {total} ({total_b} bytes)"]
    lines += [f"  {name}: {count} ({nbytes} bytes)" for name, count, nbytes in stats]
    return lines
