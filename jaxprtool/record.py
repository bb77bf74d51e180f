"""The primitive record: everything the tool knows about one primitive, registered once.

A family module (`jaxprtool/families/<family>.py`) fills the record of each of its primitives
in one block beside the rule functions, as JAX's `lax.py` does: the shape rule, the JVP rule
(through the helpers `defjvp`, `defjvp2`, `deflinear`, `deflinear2`, `defbilinear`,
`defjvp_zero` of `jaxprtool.ad.registry`), the transpose rule, properties, printing,
binding to JAX, and pass rules.  The machinery (builder, `ops`, the walks, the passes, the
evaluator, the printer) asks `prim(name).field` and never names a primitive.

The machinery never imports a family module: the entry points install a loader
(`set_loader`, done by `jaxprtool/__init__.py`) that imports the families the first time a
record is asked for, so the import graph has no cycle.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .lazy import MadeOnUse

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any


class Primitive:
    """One primitive's rules and properties.  Every field defaults to "none" / False: the
    class attributes below are the defaults, `define` sets a field on the record itself.
    (A plain class, not a dataclass: the decorator compiles its methods at every start-up,
    ~2 ms of `fmt`'s.)"""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return "Primitive(" + ", ".join(f"{k}={v!r}" for k, v in vars(self).items()) + ")"

    #: the family module that registered it (None for plugins and unknown primitives)
    family: str | None = None
    #: `rule(in_types, params, out_hint) -> list[Type]`, raises `shapes.ShapeError`
    shape_rule: Callable | None = None
    #: `rule(primals, tangents, **params) -> (primal_outs, tangent_outs)`
    jvp: Callable | None = None
    #: which helper registered `jvp` (shown by `explain`)
    jvp_kind: str | None = None
    #: `rule(cts, *args, **params) -> list[Atom | Zero | None]`
    transpose: Callable | None = None
    #: accumulator-style transpose: `rule(cts, *args, accums, **params) -> None`
    fancy_transpose: Callable | None = None
    #: its `transpose` takes a differentiated Ref operand: an `UndefinedPrimal` whose `ct_ref`
    #: is the Ref's cotangent Ref, to be accumulated into (a call or loop passes it into its
    #: transposed body); the rule returns None for it
    transposes_refs: bool = False
    #: how the primitive splits itself into a primal and a linear part when linearized
    #: (JAX's `primitive_linearizations`): `rule(primals, tangents, **params)`, run with a
    #: split builder; None: the JVP rule's equations are sorted into the two programs
    linearization: Callable | None = None
    #: the JVP rule runs even when no operand has a tangent (JAX's
    #: `linearize_on_zero_tangents`: new_ref makes the tangent Ref of every Ref)
    jvp_on_zero_tangents: bool = False
    #: `rule(args, batch_dims, **params) -> (outs, out_batch_dims)` (vmap)
    batching: Callable | None = None
    #: `fn(params) -> tuple[str, ...]`: the named axes a collective communicates over (JAX's
    #: `skippable_batchers`): vmap with that axis name batches it even when no operand is
    axis_names: Callable | None = None
    #: vmap batches it even when no operand is batched (new_ref: its Ref may be written with
    #: batched values, so JAX makes every Ref inside a vmap batched)
    always_batched: bool = False
    #: the equation has a list of results even when it has one (JAX's `multiple_results`)
    multiple_results: bool = False
    #: never removed (but see `ref_access` and `effects_in_bodies`), merged or reordered by
    #: a pass, nor dropped inside AD
    effectful: bool = False
    #: `fn(eqn) -> bool`, for an effectful primitive with bodies: whether this equation's only
    #: effects are its bodies' (JAX's DCE rule: run_state; pallas_call without
    #: `has_side_effects`), so that DCE removes it when its results are unused and its
    #: bodies write no Ref operand that is live
    effects_in_bodies: Callable | None = None
    #: how an effectful Ref primitive touches Refs, for DCE (JAX's dceable effects):
    #: "alloc" makes one (new_ref), "read" reads operand 0 (get, freeze), "write" writes
    #: operand 0 (swap, addupdate).  Unused results make it dead, unless it writes a Ref
    #: that is live (read later, or not made by an "alloc" of the same program)
    ref_access: str | None = None
    #: draws random numbers: never merged by CSE
    random: bool = False
    #: JAX's custom-derivative call ("jvp": custom_jvp, "vjp": custom_vjp): `trace` traces
    #: its rules and attaches them to the equation (`backend/custom_rules.py`), so the AD
    #: commands differentiate as JAX does
    traced_rules: str | None = None
    #: the parameter holding the called body, for call-like primitives (jit, remat, ...)
    call_body: str | None = None
    #: `rule(eqn, outer) -> Eqn`: the equation with the constvars of its nested jaxprs (cond
    #: branches, loop bodies) made operands, so that `passes/hoist_consts.py` can move them to
    #: the program's constants; `outer(binders) -> [Var, ...]` gives the new operands that
    #: carry the values of those binders.  Call bodies (`call_body`) need no rule.
    hoist_consts: Callable | None = None
    #: `rule(eqn, outer) -> Eqn`: the equation with the constvars its nested jaxprs keep (those
    #: hoisting leaves: a recorded custom rule's, a shard_map body's, a run_state body's as
    #: Refs) made leading operands (a rule may also add leading results),
    #: for the AD commands (`passes/hoist_consts.py`: `lift_kept_consts`); `outer` as for
    #: `hoist_consts`
    lift_kept_consts: Callable | None = None
    #: a call whose body the `inline` pass may copy into the caller (jit, not remat)
    inlinable: bool = False
    #: the first JAX version that prints the primitive: a program using it is that version's
    #: (`text.style.detect_style`)
    first_version: tuple[int, ...] | None = None
    #: `rule(eqn) -> set[str]`: what the way the equation is printed says about the JAX version
    #: that printed it, in the clues `text.style.detect_style` reads (`style.CLUE_*`)
    version_clues: Callable | None = None
    #: `rule(eqn, style) -> [(key, value), ...]`: the parameters JAX prints, in order
    #: (JAX's `pp_eqn_rules`); None: every parameter, sorted by key
    print_params: Callable | None = None
    #: `rule(eqn, p) -> Doc | None`: the equation in its own syntax (`y <- r[i]`), built with
    #: the printer's handle `p` (`text/printer.py`, `_DocHandle`); None: the ordinary form
    print_eqn: Callable | None = None
    #: `rule(eqn, style) -> str`: the name printed for the primitive (jit: `pjit` before 0.7)
    print_name: Callable | None = None
    #: the body parameter whose binders print with the names of the equation's operands and
    #: results when the style suggests names (JAX's `suggest_same_var_names`, jit)
    suggest_names: str | None = None
    #: `rule(eqn) -> str | None`: the name of a nested jaxpr printed hoisted
    #: (`let NAME = ...`); None: the equation's `name` parameter
    hoist_name: Callable | None = None
    #: the parameters holding jaxprs in the order JAX's `bind` gives them (its parameter
    #: dict's order, which its shared-jaxpr walk follows: while's `cond_jaxpr` before
    #: `body_jaxpr`, though both print sorted); None: the parameters' own order
    jaxpr_params_order: tuple[str, ...] | None = None
    #: `rule(prim, params, eqn, style) -> (prim, params)`: the parameters an older JAX
    #: version printed for an equation the tool emitted in 0.12's form (or the list of
    #: equations that replace it, for a primitive that version lacks: the back end also runs
    #: that list where the installed JAX lacks the primitive, `backend.prims.older_form`)
    restyle: Callable | None = None
    #: `rule(eqn, params, dims) -> dict`: the params JAX's `bind` expects that differ from the
    #: printed ones converted by `backend.prims.to_jax` (`dims`: sizes of symbolic dimensions)
    bind_params: Callable | None = None
    #: `rule(interpreter, eqn, values, path) -> list`: how the evaluator runs the equation
    #: itself (a reducer body, a primitive the installed JAX lacks) instead of binding JAX's
    evaluate: Callable | None = None
    #: the parameters the `evaluate` rule (or, for a call, the run of its body) honours, and
    #: those that cannot change a value (names, debug data, AD annotations, placement hints
    #: on one device); `run` refuses an equation printing any other, and a `bind_params` rule
    #: may drop only these: every parameter JAX prints is bound, evaluated or refused
    evaluated_params: frozenset[str] = frozenset()
    #: `{param: value}`: parameters `run` accepts only at that value (JAX's default), with a
    #: located refusal for any other (jit's compiler options, reduce_window's consts)
    default_params: dict[str, Any] | None = None
    #: `{param: (version, value)}`: parameters JAX added to the primitive after it first
    #: existed: the first JAX version whose primitive takes it, and the value older versions
    #: always used.  Bound on an older installed JAX, the parameter is left out when it holds
    #: that value and refused at its equation otherwise; bound on a newer one, a text of an
    #: older version that lacks it gets that value (`backend.prims.versioned_params`).  The
    #: printer prints it from that version on, the value filled in where the IR lacks it, and
    #: hides it at that value before (`text.printer.printed_params`); its presence or absence
    #: marks the version (`text.style.detect_style`).  The
    #: primitive itself, when the installed JAX lacks it (or is older than `first_version`),
    #: runs as its `restyle` rule's older form (`backend.prims.older_form`)
    params_since: dict[str, tuple[tuple[int, ...], Any]] | None = None
    #: `rule(eqn, pos) -> ShapedArray | None`: the type of a literal operand printed without
    #: one (JAX 0.4.35) where the primitive fixes it; None: it follows the other operands
    literal_type: Callable | None = None
    #: {"jvp" | "transpose": the plugin file that registered (or replaced) that rule}: the
    #: AD walks note it for their observers (`explain`)
    plugin_sources: dict[str, str] | None = None
    #: its presence makes a program multi-device (`run` places it on a mesh)
    multi_device: bool = False
    #: `rule(eqn) -> shardings.MeshText | None`: the device mesh the equation prints
    #: (shard_map's `mesh`, xla_pmap's axis), beside those of its `*sharding*` parameters
    mesh_of: Callable | None = None
    #: `rule(eqn, k, atom) -> jax.sharding.Sharding | None`: where a call puts its operand
    #: `k` (jit's in_shardings: a program input a top-level call reads is placed so, as JAX
    #: places a jit's arguments); raises `JaxprError` only for a placement it reads but
    #: cannot make
    operand_placement: Callable | None = None
    #: `rule(eqn, k) -> jax.sharding.Sharding | None`: where the equation puts its result `k`
    #: (a program output it produces is gathered from there)
    result_placement: Callable | None = None
    #: why the back end cannot run it, completing "'NAME' ..." ("is a multi-device primitive"),
    #: or `rule(eqn) -> str | None`
    refusal: str | Callable | None = None
    #: its value follows its operand smoothly while its derivative is zero by definition
    #: (stop_gradient): finite differences see a derivative AD does not, and check-grad says
    #: so where its checks against them fail
    hides_derivative: bool = False
    #: cheap to recompute from constants: linearize recomputes such residuals (AD's zeros and
    #: 0.5s) in the linear program instead of passing them from the primal one
    recompute_constant: bool = False
    #: how rematerialization (`ad/remat/`) sees it, or `rule(eqn) -> str | None`:
    #: "cheap" (element-wise or shape: min-cut may recompute it), "dot" (a matmul or
    #: convolution: what `dots_saveable` saves), "dot_unbatched" (a matmul without batch
    #: dimensions: also what `dots_with_no_batch_dims_saveable` saves), "name"
    #: (`checkpoint_name`: what the name policies match); None: recomputed only under a
    #: policy or a byte budget, at its FLOPs
    remat: str | Callable | None = None
    #: a call with a body that rematerialization may run again whole (not apart) where
    #: its body is pure: a custom-derivative call, whose value is its body's
    recomputed_whole: bool = False
    #: an equation with bodies that a policy (`ad/remat/`) may run again in the backward
    #: pass, as JAX's `partial_eval_jaxpr_custom` rule for it does: `rule(eqn, body_saves)
    #: -> [bool]`, per result, whether the policy saves it (`body_saves(jaxpr) -> [bool |
    #: None]` says it of a body's results, None for a binder); an unsaved result is made
    #: again by rerunning the equation.  None: its results are saved
    remat_saves: Callable | None = None
    #: `rule(eqn, saved) -> Eqn`: the equation to rerun, with the same results, reading the
    #: results `saved` (per result) it can take (appended to its operands) instead of
    #: computing them; the machinery then prunes it (DCE) to the results it needs
    remat_feed: Callable | None = None
    #: operands from this position on are indices (dynamic_slice: 1), for untyped literals
    index_operands: int | None = None
    #: `rule(eqn) -> {operand: need}`: what the operand's random value needs, for inputs
    #: drawn as the program needs them (`draw.py`): ("index", n) in [0, n), ("like", k) in
    #: operand k's range, ("positive",), ("fan_in", n) scaled by 1/sqrt(n)
    draw_domain: Callable | None = None
    #: `rule(eqn) -> (lo, hi)`: the range [lo, hi) of its integer result (iota), for
    #: ("like", k) above
    draw_range: Callable | None = None
    #: an untyped operand literal with no typed sibling has the result's dtype (reshape)
    literal_like_result: bool = False
    #: `rule(eqn, pos) -> Type | None`: the type of the nested binder that operand `pos`
    #: feeds (types 0.4.35's untyped literals); None: a body with one binder per operand
    binder_type: Callable | None = None
    #: `rule(used_outputs, eqn, dce_jaxpr, live_inputs) -> (used_inputs, eqn | None)`: DCE
    #: of an equation with bodies (`live_inputs`: whether each operand, a Ref's contents,
    #: may be read after it); `dce_jaxpr(jaxpr, used_outputs, instantiate, live_inputs=None)
    #: -> (jaxpr, used_inputs)` cleans a body; raising `passes.dce.Unsupported` keeps the
    #: signature
    dce: Callable | None = None
    #: `rule(eqn, values) -> value | None`: constant folding of literal operands
    fold: Callable | None = None
    #: `rule(eqn, ctx) -> atom | None`: algebraic simplification (`passes/simplify.py`)
    simplify: Callable | None = None
    #: the `simplify` rule answers None unless an operand is a scalar constant (a literal, or
    #: a result its producer's `fills_with` fills with one): the pass asks it only then
    simplify_needs_constant: bool = False
    #: `rule(eqn) -> atom | None`: the atom whose (scalar) value fills the whole result,
    #: e.g. a `broadcast_in_dim` of a literal (lets simplification see AD's zeros and ones)
    fills_with: Callable | None = None
    #: `rule(eqn) -> [atom, ...]`: values (emitted with `ops`) that change where the
    #: primitive is not differentiable (max: x > y; abs: sign x): check-grad avoids
    #: finite-difference steps across them.  Bool/integer results count without a rule.
    kink_indicator: Callable | None = None
    #: `rule(eqn) -> int`: floating-point operations (stats)
    flops: Callable | None = None
    #: `(text, fn)`: the analytic derivative `explain` checks, `fn(x)` (one operand) or
    #: `fn(x, y) -> (d/dx, d/dy)` (two) on float64 numpy arrays
    derivative_formula: tuple[str, Callable] | None = None
    #: `rule(eqn, key, body) -> [atom, ...] | None`: the operands of the equation that the
    #: binders of its nested jaxpr `body` (parameter `key`) bind (the graph's edges into a
    #: body); None: one binder per operand when the counts agree, else no correspondence
    body_operands: Callable | None = None
    #: a loop whose trip count the program does not fix (`stats` counts them)
    unbounded_loop: bool = False
    #: `rule(eqn, costs) -> (flops, bytes)`: the cost of an equation with bodies from the
    #: (flops, bytes) of one run of each body (stats); None: their sum
    body_cost: Callable | None = None
    #: `rule(eqn) -> int`: how many instances of its nested jaxprs run at once (shard_map: one
    #: per device of its manual axes, whose values are one device's shards): the liveness
    #: count (`jaxprtool memory`) multiplies their inner peak by it; None: 1
    body_copies: Callable | None = None
    #: free-form data a family shares between its own rules (never read by the machinery)
    extra: dict[str, Any] | None = None


#: the record's fields (its annotated class attributes)
FIELDS = frozenset(Primitive.__annotations__)

_RECORDS: dict[str, Primitive] = {}
#: the name of each `define` call, in order (a family may define a record without a field,
#: declaring that loading the primitive loads it: `families.build_index` reads them)
_DEFINED: list[str] = []
#: `load(name)` imports the family modules that define `name` (every family for None)
_loader: Callable[[str | None], None] | None = None


def set_loader(load: Callable[[str | None], None]) -> None:
    """Install the function that imports family modules on demand (the entry point does)."""
    global _loader  # (why a value cannot carry it: family modules load once per process)
    _loader = load


def ensure_loaded(name: str | None = None) -> None:
    """Import the families that define `name` (every family when None)."""
    if _loader is not None:
        _loader(name)


def define(name: str, **values) -> Primitive:
    """Create or update the record of `name`; returns it.  Unknown field names are an error.
    (Called ~600 times as the families of a `sin` load: no set built, one dict update.)"""
    if not FIELDS.issuperset(values):
        raise TypeError(f"unknown primitive record fields: {sorted(set(values) - FIELDS)}")
    _DEFINED.append(name)
    rec = _RECORDS.get(name)
    if rec is None:
        rec = _RECORDS[name] = Primitive(name)
    rec.__dict__.update(values)
    return rec


def batching_rule(factory: str, *args):
    """The batching rule `jaxprtool.ad.batching.<factory>(*args)` makes (`vectorized`,
    `broadcasting`, `reducer`, `leading_batch`, `unbatched`, `same_dims`), made when vmap
    first calls it: a family's record names it, and importing the family does not import
    the vmap machinery (`lazy.MadeOnUse`)."""
    return MadeOnUse("jaxprtool.ad.batching", factory, *args)


_UNKNOWN: dict[str, Primitive] = {}
#: registered records whose families are loaded: `prim`'s first look (one dict lookup)
_LOADED: dict[str, Primitive] = {}
#: names whose families the loader has imported (`prim` skips the loader for them: it is
#: asked on every equation of every walk, print and pass)
_ready: set[str] = set()


#: `prim`'s first look, as one bound `dict.get` (no Python call): the record of a primitive
#: whose family is loaded, else None, for which `prim` itself is asked.  For the walks'
#: loops, which ask it of every equation: `loaded_record(p) or prim(p)`
loaded_record = _LOADED.get


def prim(name: str) -> Primitive:
    """The record of `name`; an empty (all-default) record for a primitive nobody registered."""
    rec = _LOADED.get(name)
    if rec is not None:
        return rec
    if _loader is not None and name not in _ready:
        _loader(name)
        _ready.add(name)
    rec = _RECORDS.get(name)
    if rec is not None and _loader is not None:
        _LOADED[name] = rec  # `define` updates a record in place: this one stays current
    if rec is None:
        rec = _UNKNOWN.get(name)
        if rec is None:
            rec = _UNKNOWN[name] = Primitive(name)
    return rec


def call_body(eqn):
    """The body of a call-like equation: the one jaxpr in the parameter its record names
    (`Primitive.call_body`: `jit`'s `jaxpr`, `custom_jvp_call`'s `call_jaxpr`, ...), or None
    (not a call, or the parameter holds no single jaxpr)."""
    from .core import subjaxprs

    key = prim(eqn.prim).call_body
    if key is None or key not in eqn.params:
        return None
    found = subjaxprs(eqn.params[key])
    return found[0] if len(found) == 1 else None


def registered(name: str) -> bool:
    ensure_loaded(name)
    return name in _RECORDS


def close_name(name: str) -> str | None:
    """For a primitive no record has (a misspelt name), the closest known one, if close:
    fewest edits first, two swapped letters counting as one edit (`tahn` is one edit from
    `tanh` and from `tan`: the one with the same letters wins), then difflib's ratio."""
    if registered(name):
        return None
    import difflib

    letters = sorted(name)
    ranked = []
    for known in (n for n, r in records().items() if r.shape_rule is not None):
        edits = _edits(name, known)
        ratio = difflib.SequenceMatcher(None, name, known).ratio()
        if edits <= min(2, max(1, len(name) // 3)) or ratio >= 0.75:
            ranked.append((edits, sorted(known) != letters, -ratio, known))
    return min(ranked)[-1] if ranked else None


def _edits(a: str, b: str) -> int:
    """The optimal string alignment distance: insertions, deletions, substitutions and
    swaps of two neighbouring letters, one edit each."""
    if abs(len(a) - len(b)) > 2:
        return abs(len(a) - len(b))  # (at least that many: farther than any suggestion)
    before, row = None, list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            d = min(row[j] + 1, cur[j - 1] + 1, row[j - 1] + (ca != cb))
            if before is not None and i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                d = min(d, before[j - 2] + 1)
            cur.append(d)
        before, row = row, cur
    return row[-1]


def did_you_mean(name: str) -> str:
    """`; did you mean 'NAME'?` for a misspelt primitive (`close_name`), else ''."""
    close = close_name(name)
    return f"; did you mean '{close}'?" if close else ""


def records() -> dict[str, Primitive]:
    """Every registered record by name (a copy)."""
    ensure_loaded()
    return dict(_RECORDS)


def definitions() -> int:
    """How many `define` calls were made so far: `defined_since(n)` names those after the
    first n (`families.build_index` charges each family with what its import defined)."""
    return len(_DEFINED)


def defined_since(n: int) -> set[str]:
    return set(_DEFINED[n:])


class FieldView:
    """A dict-like view of one field over all records: `view[name] = rule` sets
    `prim(name).<field>`.  Kept for plugins and the rule helpers' registries
    (`primitive_jvps`, `primitive_transposes`, ...); the machinery reads records."""

    def __init__(self, field: str):
        self.field = field

    def __setitem__(self, name: str, value) -> None:
        define(name, **{self.field: value})

    def __getitem__(self, name: str):
        v = getattr(prim(name), self.field)
        if v is None:
            raise KeyError(name)
        return v

    def get(self, name: str, default=None):
        v = getattr(prim(name), self.field)
        return default if v is None else v

    def __contains__(self, name) -> bool:
        return getattr(prim(name), self.field) is not None

    def __delitem__(self, name: str) -> None:
        if name not in self:
            raise KeyError(name)
        setattr(_RECORDS[name], self.field, None)

    def pop(self, name: str, *default):
        v = self.get(name)
        if v is None:
            if default:
                return default[0]
            raise KeyError(name)
        setattr(_RECORDS[name], self.field, None)
        return v

    def keys(self):
        ensure_loaded()
        return [n for n, r in _RECORDS.items() if getattr(r, self.field) is not None]

    __iter__ = lambda self: iter(self.keys())  # noqa: E731

    def __len__(self) -> int:
        return len(self.keys())

    def items(self):
        return [(n, getattr(_RECORDS[n], self.field)) for n in self.keys()]

    def values(self):
        return [v for _, v in self.items()]
