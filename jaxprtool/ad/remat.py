"""Rematerialization: which residuals of a linearization to save and which to recompute.

A linearization (`linearize.linearize_jaxpr`) passes every residual from the primal program to
the linear one.  A *plan* chooses a set of primal values to save instead, from which every
residual can be recomputed through the primal program's own equations; `apply_plan` rewrites
the pair so that the primal program returns the saved values and the linear program recomputes
the others.  Plans come from

* a JAX policy (`everything_saveable`, `nothing_saveable`, `dots_saveable`,
  `dots_with_no_batch_dims_saveable`, `save_only_these_names=a,b`,
  `save_any_names_but_these=a,b`): a residual is saved when the policy lets its equation's
  result be saved, else that equation is recomputed from its operands, recursively, as
  `jax.checkpoint(policy=...)` does; JAX's offload policies
  (`offload_dot_with_no_batch_dims(src, dst)`, `save_and_offload_only_these_names(...)`)
  save a value in host memory: `device_put` copies there after the equation that makes it
  and back inside the linear program's `remat2` call, as JAX's `partial_eval_jaxpr_custom`
  emits them (policies are parsed from JAX's call syntax, never evaluated);
* `min-cut`: the saved set of fewest bytes, recomputing only cheap equations (the record
  field `remat == "cheap"`: element-wise and shape equations), found as a minimum s-t cut
  (scipy's `maximum_flow`) of the graph whose nodes are values split into in/out halves with
  the value's bytes as capacity (AOTAutograd's partitioner);
* a byte budget: the residuals held must fit it, recomputing what costs least (FLOPs from
  `ui.stats.eqn_flops`) among the pure equations: an exact 0/1 program (scipy's `milp`, HiGHS)
  when there are at most `EXACT_LIMIT` candidate equations, else the greedy heuristic of
  `_greedy_budget`.

The parts, in the order the data flows (`rematerialize`): the request (`Spec`, passed from
the command to `grad_jaxpr(remat=...)`/`linearize_jaxpr`, whose split builder carries it to
the rules' nested linearizations: `linearize_masked`), the joint graph (`Graph`: the linearization's primal
program and the residuals its linear program reads), the segments (`find_segments`:
`--remat-segments auto|none|N`; each call with a body and each scan body is a segment of its
own, planned when its rule linearizes it, `copies` times for a scan; in the program, the
repeated layers, else about sqrt(n) stretches; `Graph.cut` makes the values crossing them
saved), the solver (`plan_for`: a policy, the min-cut or a budget, which under segments
bounds the planned peak: `planned_peak`), the placement (`apply_plan`).

The recomputation is emitted as JAX emits it: per segment, the stretch of the linear
program from the first to the last equation that reads a value the segment recomputes (or
copies back), widened so that the stretches cover the linear program from its start
(`_close_gaps`: the equations between two stretches join one, cut where the fewest linear
bytes cross, so each segment's call holds its whole backward, as JAX's per-layer checkpoint
does), becomes ONE `remat2[differentiated=True prevent_cse=True]` call whose body
copies the offloaded values back, recomputes each recomputed equation once and then runs
that stretch, as JAX's `remat_partial_eval` puts a checkpoint's whole linear part in one
call (without segments, one call for the whole program: JAX's `jax.checkpoint(f)`).
Transposed, each call stays a call whose operands include the cotangents arriving at its
segment, and JAX's remat lowering and the tool's `run`/`compile` put its operands through an
`optimization_barrier`, so XLA neither merges the recomputation back into the forward pass
nor hoists it (or the copies back) ahead of the backward step that needs it: one segment's
recomputed values are alive at a time.

Values held in memory anyway cost nothing: the program's inputs and constants.  The bytes of a
plan are the device bytes of the other saved values (primal outputs included); an offloaded
value's are the plan's `bytes_offloaded`.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from ..core import Eqn, Jaxpr, JaxprError, ShapedArray, Var, eqn_subjaxprs
from ..params import EnumValue
from ..record import prim as record_of
from . import builder as B
from .residuals import LinearizeInfo, Residual, forward_residuals

#: candidate equations up to which a byte budget is solved exactly (HiGHS takes well under
#: a second there); beyond, the greedy heuristic
EXACT_LIMIT = 400
#: plans the budget heuristic tries within its last step (see `_greedy_budget`)
REFINE_TRIES = 2
#: HiGHS' time limit (s); when it is reached without a proven optimum the best plan found
#: is kept if it meets the budget, else the heuristic's
ILP_TIME_LIMIT = 1.0

POLICIES = (
    "everything_saveable",
    "nothing_saveable",
    "dots_saveable",
    "dots_with_no_batch_dims_saveable",
    "save_only_these_names=NAMES",
    "save_any_names_but_these=NAMES",
    "offload_dot_with_no_batch_dims(SRC, DST)",
    "save_and_offload_only_these_names(names_which_can_be_saved=[...], "
    "names_which_can_be_offloaded=[...], offload_src=SRC, offload_dst=DST)",
    "save_from_both_policies(P1, P2)",
    "min-cut",
)


# ---------------------------------------------------------------- what the records say


def remat_class(e: Eqn) -> str | None:
    """The record's `remat` field for this equation ("cheap", "dot", "dot_unbatched", "name"
    or None)."""
    v = record_of(e.prim).remat
    return v(e) if callable(v) else v


def recomputable(e: Eqn) -> bool:
    """A pure equation without bodies, or a call recomputed whole (its record's
    `recomputed_whole`) whose bodies are pure through and through: recomputing it gives the
    same values."""
    rec = record_of(e.prim)
    if rec.effectful or rec.random:
        return False
    bodies = eqn_subjaxprs(e)
    return not bodies or (rec.recomputed_whole and all(map(_pure_body, bodies)))


def _planned_inside(e: Eqn) -> bool:
    """A call or loop whose body rematerialization plans on its own (not one it reruns
    whole)."""
    return bool(eqn_subjaxprs(e)) and not record_of(e.prim).recomputed_whole


def _pure_body(body: Jaxpr) -> bool:
    return all(recomputable(e) for e in body.eqns)


def cheap(e: Eqn) -> bool:
    """What min-cut may recompute: element-wise and shape equations."""
    return remat_class(e) in ("cheap", "name") and recomputable(e)


def body_saves(body: Jaxpr, decide) -> list[bool | None]:
    """Per result of `body`: whether the policy `decide` saves its value (the decision on the
    equation that makes it; a value that cannot be recomputed, or in host memory: an
    offloaded copy, is saved, while the value it copies is made again from it), None for a
    binder, False for a literal."""
    made = {id(o): (e, k) for e in body.eqns for k, o in enumerate(e.outputs)}
    binders = {id(v) for v in (*body.invars, *body.constvars)}

    def of(v):
        if not isinstance(v, Var):
            return False
        if id(v) in binders:
            return None
        if in_host(v):
            return True
        e, k = made[id(v)]
        saves = eqn_saves(e, decide)
        if saves is not None:
            return saves[k]
        d = decide(e)
        return (bool(d) and not isinstance(d, Offload)) or not recomputable(e)

    return [of(v) for v in body.outvars]


def eqn_saves(e: Eqn, decide) -> list[bool] | None:
    """Per result of an equation the policy may run again (its record's `remat_saves`: a scan,
    a call, a cond): whether the policy saves it; None for any other equation, or one with
    effects."""
    from ..passes.common import eqn_is_pure

    rule = record_of(e.prim).remat_saves
    if rule is None or not eqn_is_pure(e):
        return None
    return rule(e, lambda j: body_saves(j, decide))


def rerun_eqn(e: Eqn, saves: list[bool], wanted: list[bool]) -> Eqn | None:
    """`e` run again for its results `wanted` (and those a loop needs to make them: its
    carries), reading the saved results it takes instead of computing them (its record's
    `remat_feed`), pruned to what it needs; None when it cannot be pruned so (a result it
    reads would stay among those it makes)."""
    from ..passes.dce import prune_eqn

    ne = prune_eqn(record_of(e.prim).remat_feed(e, saves), list(wanted))
    if ne is None:
        return None
    made = {id(o) for o in ne.outputs}
    if not made.isdisjoint(map(id, ne.inputs)) or any(
        w and id(o) not in made for o, w in zip(e.outputs, wanted)
    ):
        return None
    return ne


def feed_results(body: Jaxpr, positions) -> tuple[Jaxpr, list[int]]:
    """`body` reading the values of its results at `positions` from new binders (appended to
    its inputs) instead of computing them: (the new body, the positions it reads, one per
    distinct value: a literal result is read too, as the value it stands for).  A value made
    by an equation the policy may run again (a scan in a call's body) is fed to it too, and
    an offloaded copy's device value is copied back from it (as JAX's recomputation does),
    so that DCE can prune what made them."""
    made = {id(o): e for e in body.eqns for o in e.outputs}
    binder: dict[int, Var] = {}
    literal: dict[int, Var] = {}  # position of a literal result -> its binder
    read: list[int] = []
    back: list[Eqn] = []
    for k in positions:
        v = body.outvars[k]
        if not isinstance(v, Var):
            literal[k] = Var(v.type, None)
            read.append(k)
        elif id(v) not in binder:
            binder[id(v)] = b = B.fresh_like(v)
            read.append(k)
            src = _offloaded_from(made.get(id(v)))
            if src is not None and id(src) not in binder:
                back.append(_copy(b, src.type, "device"))
                binder[id(src)] = back[-1].outputs[0]
    eqns = list(back)
    for e in body.eqns:
        fed = [id(o) in binder for o in e.outputs]
        rule = record_of(e.prim).remat_feed
        if any(fed) and rule is not None:
            e = rule(e, fed)
        eqns.append(e)
    eqns = B.substitute(eqns, binder)
    outvars = [
        binder.get(id(x), x) if isinstance(x, Var) else literal.get(k, x)
        for k, x in enumerate(body.outvars)
    ]
    binders = [literal[k] if k in literal else binder[id(body.outvars[k])] for k in read]
    new = body.replace(invars=(*body.invars, *binders), eqns=eqns, outvars=outvars)
    return new, read


def nbytes(v) -> int:
    """The device bytes of `v` (none for a value in host memory: an offloaded copy)."""
    return 0 if in_host(v) else all_bytes(v)


def in_host(v) -> bool:
    return getattr(v.type, "memory_space", None) == "host"


def all_bytes(v) -> int:
    """The bytes of `v`, in whichever memory."""
    t = v.type
    try:
        return int(t.size) * int(t.np_dtype.itemsize)
    except Exception:
        return 0


# ---------------------------------------------------------------- the request


@dataclass(frozen=True)
class Offload:
    """JAX's `Offloadable(src, dst)`: the value is saved, copied from memory kind `src` to
    `dst` in the forward pass and back in the backward pass."""

    src: str
    dst: str


@dataclass(frozen=True)
class Spec:
    """What the user asked for: a policy (with its names, memory kinds, or the two policies
    `save_from_both_policies` joins) or a byte budget."""

    policy: str | None = None
    names: frozenset[str] = frozenset()
    budget: float | None = None  # bytes, or a fraction when `fraction`
    fraction: bool = False
    #: the sizes of symbolic dims the byte and FLOP counts use (`--dim b=5`), sorted pairs
    dims: tuple[tuple[str, int], ...] = ()
    #: save_and_offload_only_these_names: the names offloaded (`names`: those saved)
    offload_names: frozenset[str] = frozenset()
    offload: Offload | None = None
    parts: tuple[Spec, ...] = ()
    #: `--remat-segments`: "auto" (segments found in the program: each iteration of a scan
    #: body, each call, the repeated layers, else about sqrt(n) stretches), "none" (the
    #: whole program at once: JAX's `jax.checkpoint(f)`), or a number of segments
    segments: str = "auto"


def with_segments(spec: Spec, segments) -> Spec:
    """`spec` with `--remat-segments` set (auto, none or a positive number)."""
    import dataclasses

    text = str(segments).strip().lower()
    if text not in ("auto", "none") and not (text.isdigit() and int(text) > 0):
        raise ValueError(f"--remat-segments {segments!r}: expected auto, none or a number >= 1")
    return dataclasses.replace(spec, segments=text)


_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([kmgt]i?b?|b)?\s*$", re.I)
_UNITS = {"": 1, "b": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}


def parse_budget(text: str) -> Spec:
    """`0.5` (a fraction of the default residual bytes: any number up to 1 without a unit,
    `1` and `1.0` alike), `2GiB`, `300MB`, `123456` bytes (a whole number above 1), below
    2^63 bytes."""
    m = _SIZE.match(text)
    if not m:
        raise ValueError(f"--remat-budget {text!r}: expected a fraction (0.5) or bytes (2GiB)")
    num, unit = float(m.group(1)), (m.group(2) or "").lower()
    if not unit and num <= 1:
        return Spec(budget=num, fraction=True)
    if not unit and math.isfinite(num) and not num.is_integer():
        raise ValueError(
            f"--remat-budget {text!r}: a fraction is at most 1; bytes are a whole number or "
            "have a unit (2GiB)"
        )
    base = unit[:1] if unit != "b" else "b"
    scale = _UNITS[base] if "i" not in unit else 1024 ** "bkmgt".index(base)
    if not num * scale < 2**63:
        raise ValueError(f"--remat-budget {text[:40]!r}: more than 2^63 bytes")
    return Spec(budget=num * scale)


def parse_policy(text: str) -> Spec:
    """`NAME`, `NAME=a,b` (the names policies), or JAX's call: `NAME(args)`, e.g.
    `offload_dot_with_no_batch_dims(device, pinned_host)`,
    `save_from_both_policies(dots_saveable, save_only_these_names(h))`."""
    name, eq, rest = text.partition("=")
    name = name.strip()
    if eq and "(" not in name:
        if name not in _NAME_LISTS:
            raise ValueError(f"--remat {text!r}: NAME=a,b is for {' and '.join(_NAME_LISTS)}")
        return _call_spec(_Call(name, tuple(n.strip() for n in rest.split(",") if n.strip())))
    if text.strip() == "min-cut":
        return Spec(policy="min-cut")
    toks = _tokens(text)
    call, k = _value(toks, 0, text)
    if k != len(toks):
        raise ValueError(f"--remat {text!r}: unexpected {toks[k][1]!r}")
    if isinstance(call, str):
        call = _Call(call)
    if not isinstance(call, _Call):
        raise ValueError(f"--remat {text!r}: expected a policy")
    return _call_spec(call)


#: the policies without arguments
_PLAIN = (
    "everything_saveable",
    "nothing_saveable",
    "dots_saveable",
    "dots_with_no_batch_dims_saveable",
)
#: jax.checkpoint_policies' other names of the same policies
_ALIASES = {
    "checkpoint_dots": "dots_saveable",
    "checkpoint_dots_with_no_batch_dims": "dots_with_no_batch_dims_saveable",
}
#: the policies whose arguments are checkpoint names
_NAME_LISTS = ("save_only_these_names", "save_any_names_but_these")
#: memory kinds JAX's offload policies take (`core.mem_kind_to_space`)
_KINDS = {"device": None, "pinned_host": "host"}


@dataclass(frozen=True)
class _Call:
    name: str
    args: tuple = ()
    kwargs: tuple[tuple[str, object], ...] = ()


_TOKEN = re.compile(r"\s*(?:(\"[^\"]*\"|'[^']*')|([A-Za-z_][\w.\-]*)|([()\[\],=]))")


def _tokens(text: str) -> list[tuple[str, str]]:
    """("str"|"name"|"punct", text) tokens of a policy call; no evaluation of the text."""
    out, k = [], 0
    while text[k:].strip():
        m = _TOKEN.match(text, k)
        if not m:
            raise ValueError(f"--remat {text!r}: cannot read {text[k:].strip()!r}")
        s, n, p = m.groups()
        out.append(("str", s[1:-1]) if s else ("name", n) if n else ("punct", p))
        k = m.end()
    return out


def _value(toks, k, text):
    """One value at `toks[k]`: a string, a list `[a, b]` / `(a, b)` or a call `f(...)`."""
    if k >= len(toks):
        raise ValueError(f"--remat {text!r}: ends too early")
    kind, t = toks[k]
    if kind == "punct" and t in "([":
        items, k = _items(toks, k + 1, "])"[t == "("], text)
        if any(kw for kw, _ in items):
            raise ValueError(f"--remat {text!r}: a list holds no keyword")
        return [v for _, v in items], k
    if kind == "punct":
        raise ValueError(f"--remat {text!r}: unexpected {t!r}")
    if kind == "name" and k + 1 < len(toks) and toks[k + 1] == ("punct", "("):
        items, k = _items(toks, k + 2, ")", text)
        args = tuple(v for kw, v in items if kw is None)
        kwargs = tuple((kw, v) for kw, v in items if kw is not None)
        if any(kw is None for kw, _ in items[len(args) :]):
            raise ValueError(f"--remat {text!r}: a positional argument after a keyword")
        return _Call(t, args, kwargs), k
    return t, k + 1


def _items(toks, k, close, text):
    """`[kw=]value, ...` up to `close`: ([(kw or None, value)], index after `close`)."""
    items = []
    while True:
        if k < len(toks) and toks[k] == ("punct", close):
            return items, k + 1
        kw = None
        if k + 1 < len(toks) and toks[k][0] == "name" and toks[k + 1] == ("punct", "="):
            kw, k = toks[k][1], k + 2
        v, k = _value(toks, k, text)
        items.append((kw, v))
        if k < len(toks) and toks[k] == ("punct", ","):
            k += 1
        elif not (k < len(toks) and toks[k] == ("punct", close)):
            raise ValueError(f"--remat {text!r}: expected ',' or {close!r}")


def _bind(call: _Call, params: tuple[str, ...], keyword_only: bool = False) -> dict:
    """The arguments of `call` by JAX's parameter names, every one required (as in JAX)."""
    if keyword_only and call.args:
        raise ValueError(f"{call.name} takes keyword arguments only: {', '.join(params)}")
    got = dict(zip(params, call.args))
    if len(call.args) > len(params):
        raise ValueError(f"{call.name} takes {len(params)} arguments")
    for kw, v in call.kwargs:
        if kw not in params or kw in got:
            raise ValueError(f"{call.name}: unexpected or repeated argument {kw!r}")
        got[kw] = v
    missing = [p for p in params if p not in got]
    if missing:
        raise ValueError(f"{call.name}: missing {', '.join(missing)} (JAX requires them)")
    return got


def _names(v, what: str) -> frozenset[str]:
    vs = v if isinstance(v, list) else [v]
    if not all(isinstance(x, str) for x in vs):
        raise ValueError(f"{what}: checkpoint names expected")
    return frozenset(vs)


def _kind(v, what: str) -> str:
    if not isinstance(v, str) or v not in _KINDS:
        raise ValueError(
            f"{what}={v!r}: a memory kind, device or pinned_host (JAX 0.12 takes any other "
            "kind as device memory)"
        )
    return v


def _call_spec(call: _Call) -> Spec:
    """The Spec of a parsed policy call, checked as JAX checks its arguments."""
    name = call.name
    try:
        if name in _PLAIN or name in _ALIASES:
            _bind(call, ())
            return Spec(policy=_ALIASES.get(name, name))
        if name in _NAME_LISTS:
            if call.kwargs:
                raise ValueError(f"{name} takes the names as positional arguments")
            names = _names(list(call.args), name)
            if not names:
                raise ValueError(
                    f"{name}=NAME,NAME... or {name}(NAME, ...): give the checkpoint names"
                )
            return Spec(policy=name, names=names)
        if name == "offload_dot_with_no_batch_dims":
            a = _bind(call, ("offload_src", "offload_dst"))
            src, dst = (
                _kind(a["offload_src"], "offload_src"),
                _kind(a["offload_dst"], "offload_dst"),
            )
            return Spec(policy=name, offload=Offload(src, dst))
        if name == "save_and_offload_only_these_names":
            a = _bind(call, _SAVE_AND_OFFLOAD, keyword_only=True)
            saved = _names(a["names_which_can_be_saved"], "names_which_can_be_saved")
            off = _names(a["names_which_can_be_offloaded"], "names_which_can_be_offloaded")
            if saved & off:
                raise ValueError(
                    "the names should be exclusive: names_which_can_be_saved and "
                    f"names_which_can_be_offloaded share {', '.join(sorted(saved & off))}"
                )
            src, dst = (
                _kind(a["offload_src"], "offload_src"),
                _kind(a["offload_dst"], "offload_dst"),
            )
            return Spec(policy=name, names=saved, offload_names=off, offload=Offload(src, dst))
        if name == "save_from_both_policies":
            a = _bind(call, ("policy_1", "policy_2"))
            return _both(*(_policy_arg(a[k]) for k in ("policy_1", "policy_2")))
    except ValueError as e:
        raise ValueError(f"--remat {name}: {e}") from None
    raise ValueError(
        f"--remat {name!r}: unknown policy; one of {', '.join(POLICIES)} (JAX's names)"
    )


_SAVE_AND_OFFLOAD = (
    "names_which_can_be_saved",
    "names_which_can_be_offloaded",
    "offload_src",
    "offload_dst",
)


def _policy_arg(v) -> Spec:
    if isinstance(v, str):
        v = _Call(v)
    if not isinstance(v, _Call):
        raise ValueError(f"{v!r} is not a policy")
    return _call_spec(v)


def _both(p1: Spec, p2: Spec) -> Spec:
    """JAX's `save_from_both_policies`: the logical OR of two boolean policies."""
    for p in (p1, p2):
        if p.policy == "everything_saveable":
            return p
        if p.offload is not None:
            raise ValueError(
                f"{p.policy} does not return a boolean (JAX refuses it here too); write the "
                "policy as one offload policy"
            )
    if p1.policy == "nothing_saveable":
        return p2
    if p2.policy == "nothing_saveable":
        return p1
    return Spec(policy="save_from_both_policies", parts=(p1, p2))


def decision(spec: Spec) -> Callable[[Eqn], bool | Offload]:
    """The policy on the equation that made a value, as JAX's policy returns: True (save),
    False (recompute) or an `Offload`."""
    p = spec.policy
    if p == "everything_saveable":
        return lambda e: True
    if p == "nothing_saveable":
        return lambda e: False
    if p == "dots_saveable":
        return lambda e: remat_class(e) in ("dot", "dot_unbatched")
    if p == "dots_with_no_batch_dims_saveable":
        return lambda e: remat_class(e) == "dot_unbatched"
    if p == "offload_dot_with_no_batch_dims":
        return lambda e: spec.offload if remat_class(e) == "dot_unbatched" else False
    if p == "save_from_both_policies":
        d1, d2 = (decision(q) for q in spec.parts)
        return lambda e: d1(e) or d2(e)

    def name(e):
        return str(e.params.get("name")) if remat_class(e) == "name" else None

    names, off = spec.names, spec.offload_names
    if p == "save_only_these_names":
        return lambda e: name(e) in names
    if p == "save_any_names_but_these":
        return lambda e: name(e) is not None and name(e) not in names
    if p == "save_and_offload_only_these_names":
        return lambda e: True if name(e) in names else spec.offload if name(e) in off else False
    raise AssertionError(p)


# ---------------------------------------------------------------- the graph of the primal program


class Graph:
    """The primal program seen by a planner: which equation makes each value, which values are
    free (inputs, constants), and the residuals wanted (primal Vars)."""

    def __init__(self, primal: Jaxpr, info: LinearizeInfo):
        self.primal = primal
        self.eqns = list(primal.eqns)
        self.producer: dict[int, int] = {}
        for i, e in enumerate(self.eqns):
            for o in e.outputs:
                self.producer[id(o)] = i
        self.free = {id(v) for v in (*primal.invars, *primal.constvars)}
        #: the segments (`Segments`), when the program is cut in several; their boundary
        #: values (made in one segment, read in a later one) are saved, so the planners see
        #: them as free, while their bytes count (`cost`)
        self.segments: Segments | None = None
        self.boundary: set[int] = set()
        #: how many instances of the program's saved values are held at once (a scan body's:
        #: its length, the residuals stacked), for the peak a byte budget bounds
        self.copies = 1
        n_out = len(info.out_mask)
        outs, new = list(primal.outvars[:n_out]), list(primal.outvars[n_out:])
        src = {"input": primal.invars, "const": primal.constvars, "output": outs, "new": new}
        self.residuals: list = [src[r.source][r.index] for r in info.residuals]

        self._bytes: dict[int, int] = {}
        self._cheap: dict[int, bool] = {}
        self._pure: dict[int, bool] = {}
        self._saves: dict[int, list[bool] | None] = {}
        self.order = {id(v): k for k, v in enumerate((*primal.constvars, *primal.invars))}
        for i, e in enumerate(self.eqns):
            for o in e.outputs:
                self.order[id(o)] = len(self.order) + i

    def cost(self, v) -> int:
        """Bytes held to save `v` (0 for inputs, constants and literals)."""
        if not isinstance(v, Var) or (id(v) in self.free and id(v) not in self.boundary):
            return 0
        b = self._bytes.get(id(v))
        if b is None:
            b = self._bytes[id(v)] = nbytes(v)
        return b

    def cheap(self, i: int) -> bool:
        c = self._cheap.get(i)
        if c is None:
            c = self._cheap[i] = cheap(self.eqns[i])
        return c

    def pure(self, i: int) -> bool:
        c = self._pure.get(i)
        if c is None:
            c = self._pure[i] = recomputable(self.eqns[i])
        return c

    def saves(self, i: int, decide) -> list[bool] | None:
        """`eqn_saves` of equation `i` (one decision per planning)."""
        if i not in self._saves:
            self._saves[i] = eqn_saves(self.eqns[i], decide)
        return self._saves[i]

    def made_by(self, v) -> int | None:
        """The index of the equation that makes `v` (None for a free or boundary value)."""
        if not isinstance(v, Var) or id(v) in self.free:
            return None
        return self.producer.get(id(v))

    def peak_groups(self) -> list[list[Var]] | None:
        """The residuals of each segment (recomputed together in its backward stretch, so
        alive together at its start): the terms of `planned_peak`; None when the program
        has no peak model (one segment, held once: the bytes held across are what a budget
        bounds then)."""
        if self.segments is None and self.copies == 1:
            return None
        groups: dict[int, dict[int, Var]] = {}
        for v in self.residuals:
            if isinstance(v, Var) and id(v) not in self.free:
                k = self.segments.of[self.producer[id(v)]] if self.segments is not None else 0
                groups.setdefault(k, {})[id(v)] = v
        return [list(d.values()) for d in groups.values()]

    def cut(self, segments: Segments) -> None:
        """Plan segment by segment: the values a later segment reads are saved (free to
        the planners), so each segment's recomputation reads only its own values."""
        self.segments = segments
        seg = segments.of
        for i, e in enumerate(self.eqns):
            for x in e.inputs:
                if isinstance(x, Var) and id(x) not in self.free:
                    j = self.producer.get(id(x))
                    if j is not None and seg[j] != seg[i]:
                        self.boundary.add(id(x))
        self.free = self.free | self.boundary
        segments.cut_bytes = sum(self.cost(v) for v in _by_id(self.boundary, self))

    def closure(self, saved_ids: set[int], want, reruns=None) -> list[int]:
        """The equations (indices, in program order) that recompute `want` from the saved
        values and the free ones (`reruns`: index -> the equation run in its place)."""
        reruns = reruns or {}
        need: set[int] = set()
        stack = [v for v in want if isinstance(v, Var)]
        while stack:
            v = stack.pop()
            if id(v) in saved_ids or id(v) in self.free:
                continue
            i = self.producer[id(v)]
            if i in need:
                continue
            need.add(i)
            e = reruns.get(i, self.eqns[i])
            stack.extend(x for x in e.inputs if isinstance(x, Var))
        return sorted(need)


@dataclass
class Plan:
    """The values to save (primal Vars, program order) and the equations to recompute."""

    method: str
    saved: list
    recompute: list[int]
    bytes_before: int = 0
    bytes_after: int = 0
    flops_before: int = 0
    flops_after: int = 0
    exact: bool | None = None
    sizes: str = ""  # the symbolic sizes the bytes count (`b=5`), when --dim gave them
    #: one line per saved value and per recomputed primitive (filled by `rematerialize`)
    saved_lines: list[str] = field(default_factory=list)
    recomputed_counts: dict[str, int] = field(default_factory=dict)
    nested: bool = False
    #: id of a saved value -> where it is offloaded (its bytes are in `bytes_offloaded`,
    #: not `bytes_after`: those are the bytes held in device memory)
    offload: dict[int, Offload] = field(default_factory=dict)
    bytes_offloaded: int = 0
    #: index of a recomputed equation -> the equation run in its place (a scan, call or cond
    #: rerun for some of its results, reading the saved ones: `rerun_eqn`)
    reruns: dict[int, Eqn] = field(default_factory=dict)
    #: the segments planned one by one (None: the whole program at once)
    segments: Segments | None = None
    #: the planned peak of the backward part (`planned_peak`), without and with the plan,
    #: where the program has a peak model (segments, a scan body)
    peak: int | None = None
    peak_before: int | None = None

    def render(self, limit: int = 12) -> str:
        """The plan as `--remat` prints it on standard error."""
        where = "a nested body (one segment)" if self.nested else "the program"
        how = {True: " (exact: HiGHS)", False: " (greedy heuristic)"}.get(self.exact, "")
        pct = 100.0 * (self.flops_after - self.flops_before) / max(1, self.flops_before)
        at = f" at {self.sizes}" if self.sizes else ""
        lines = [
            f"remat {self.method}{how} on {where}{at}: residual bytes held "
            f"{self.bytes_before} -> {self.bytes_after}; FLOPs {self.flops_before} -> "
            f"{self.flops_after} ({pct:+.1f}%)"
            + (
                f"; offloaded {self.bytes_offloaded} bytes"
                if self.offload or self.bytes_offloaded
                else ""
            )
            + (
                f"; planned peak {self.peak_before} -> {self.peak}" if self.peak is not None else ""
            ),
            f"  saved ({len(self.saved)}): "
            + "; ".join(self.saved_lines[:limit])
            + (
                f"; ... {len(self.saved_lines) - limit} more"
                if len(self.saved_lines) > limit
                else ""
            ),
        ]
        if self.segments is not None:
            lines.append("  " + self.segments.describe())
        rec = ", ".join(f"{n} x{c}" for n, c in sorted(self.recomputed_counts.items()))
        lines.append(f"  recomputed ({len(self.recompute)} equations): {rec or 'nothing'}")
        return "\n".join(lines)


def _by_id(ids: set[int], g: Graph) -> list[Var]:
    """The primal Vars with these ids, in program order."""
    out = [o for e in g.eqns for o in e.outputs if id(o) in ids]
    return out


def _plan_from_saved(g: Graph, saved_ids: set[int], method: str, reruns=None) -> Plan:
    order = g.order
    reruns = reruns or {}
    rec = g.closure(saved_ids, g.residuals, reruns)
    # a saved value no recomputation reads and no residual is, is not needed
    used: dict[int, Var] = {}
    rec_set = set(rec)
    remade = {id(o) for i in rec for o in reruns.get(i, g.eqns[i]).outputs}
    for v in g.residuals:
        if isinstance(v, Var) and (id(v) in saved_ids or id(v) in g.free):
            used[id(v)] = v
    for i in rec:
        for x in reruns.get(i, g.eqns[i]).inputs:
            if isinstance(x, Var) and id(x) not in remade:
                used[id(x)] = x
    saved = sorted(used.values(), key=lambda v: order[id(v)])
    before = sum(g.cost(v) for v in dict((id(v), v) for v in g.residuals).values())
    after = sum(g.cost(v) for v in saved)
    plan = Plan(method, saved, rec, before, after)
    # values a body offloaded (a scan's stacked host copies)
    plan.bytes_offloaded = sum(all_bytes(v) for v in saved if in_host(v) and id(v) not in g.free)
    plan.reruns = {i: e for i, e in reruns.items() if i in rec_set}
    return plan


def policy_plan(g: Graph, spec: Spec) -> Plan:
    """What `jax.checkpoint(policy=...)` saves: a residual made by an equation the policy lets
    save (or that cannot be recomputed) is saved, one it offloads is saved in the policy's
    memory; any other is recomputed from its operands.  A scan's, call's or cond's result is
    saved when the policy saves the body value it holds, else the equation runs again for it
    (reading its saved results), as JAX's partial evaluation reruns a loop."""
    decide = decision(spec)
    saved_ids: set[int] = set()
    offload: dict[int, Offload] = {}
    seen: set[int] = set()
    wanted: dict[int, list[bool]] = {}
    reruns: dict[int, Eqn] = {}
    stack = [v for v in g.residuals if isinstance(v, Var)]
    while stack:
        v = stack.pop()
        if id(v) in seen or id(v) in g.free:
            continue
        seen.add(id(v))
        i = g.producer[id(v)]
        e = g.eqns[i]
        # (a body planned as a segment of its own, per iteration, is not run again)
        saves = g.saves(i, decide) if spec.segments == "none" else None
        if saves is not None:
            k = next(k for k, o in enumerate(e.outputs) if o is v)
            if not saves[k]:
                w = wanted.setdefault(i, [False] * len(e.outputs))
                w[k] = True
                r = rerun_eqn(e, saves, w)
                if r is not None:
                    reruns[i] = r
                    stack.extend(x for x in r.inputs if isinstance(x, Var))
                    continue
                w[k] = False
            saved_ids.add(id(v))
            continue
        d = decide(e)
        if d or not recomputable(e):
            saved_ids.add(id(v))
            if isinstance(d, Offload) and not record_of(e.prim).effectful:
                offload[id(v)] = d
        else:
            stack.extend(x for x in e.inputs if isinstance(x, Var))
    plan = _plan_from_saved(g, saved_ids, spec.policy, reruns)
    plan.offload = {id(v): offload[id(v)] for v in plan.saved if id(v) in offload}
    moved = sum(
        g.cost(v)
        for v in plan.saved
        if id(v) in plan.offload and _KINDS[plan.offload[id(v)].dst] != v.type.memory_space
    )
    plan.bytes_after -= moved
    plan.bytes_offloaded += moved
    return plan


# ---------------------------------------------------------------- segments


@dataclass
class Segments:
    """The primal program cut into stretches of consecutive equations, each planned and
    recomputed on its own (Chen et al. 2016): `starts[k]` is the first equation of segment
    k, `of[i]` the segment of equation i; `kind` says how they were found."""

    kind: str
    starts: list[int]
    of: list[int]
    #: bytes of the values that cross the cuts (made before one, read after it)
    cut_bytes: int = 0

    @staticmethod
    def at(kind: str, starts, n: int) -> Segments:
        """The segments of `n` equations starting at `starts` (and 0)."""
        starts = sorted({0, *(s for s in starts if 0 < s < n)})
        of, k = [], 0
        for i in range(n):
            while k + 1 < len(starts) and starts[k + 1] <= i:
                k += 1
            of.append(k)
        return Segments(kind, starts, of)

    def describe(self, limit: int = 6) -> str:
        n = len(self.of)
        spans = [f"{a}-{b - 1}" for a, b in zip(self.starts, [*self.starts[1:], n], strict=True)]
        shown = ", ".join(spans[:limit]) + (
            f", ... {len(spans) - limit} more" if len(spans) > limit else ""
        )
        return (
            f"{len(self.starts)} segments ({self.kind}) of the {n} primal equations: {shown}; "
            f"{self.cut_bytes} B cross the cuts (saved)"
        )


#: `--remat-segments auto` cuts a program without calls or repeated layers into about
#: sqrt(n) segments only from this many primal equations
SQRT_FROM = 50
#: the share of the equations the repeated layers must cover, and the fewest equations of
#: a layer (a few element-wise equations repeated are no layers)
LAYERS_COVER = 0.25
LAYER_MIN_EQNS = 8


def _crossing(eqns) -> list[int]:
    """`c[t]`: the bytes of the values equations before t make and equations at or after t
    read: what a cut before t would save (values no equation makes, inputs, cross every cut
    alike and are not counted)."""
    last: dict[int, int] = {}
    for k, e in enumerate(eqns):
        for x in e.inputs:
            if isinstance(x, Var):
                last[id(x)] = k
    diff = [0] * (len(eqns) + 2)
    for k, e in enumerate(eqns):
        for o in e.outputs:
            end = last.get(id(o))
            if end is not None and end > k:
                diff[k + 1] += nbytes(o)
                diff[end + 1] -= nbytes(o)
    out, run = [], 0
    for t in range(len(eqns) + 1):
        run += diff[t]
        out.append(run)
    return out


def _signature(e: Eqn):
    """What two structurally equal equations share: primitive, types, parameters (a body
    by its size), literals by value."""
    params = []
    for k, v in e.params.items():
        if isinstance(v, Jaxpr):
            params.append((k, "jaxpr", len(v.eqns)))
        elif isinstance(v, (tuple, list)) and any(isinstance(x, Jaxpr) for x in v):
            params.append((k, "jaxprs", len(v)))
        else:
            text = str(v)
            params.append((k, text if len(text) < 200 else hash(text)))
    ins = tuple(str(x.type) if isinstance(x, Var) else ("lit", str(x)) for x in e.inputs)
    return (e.prim, ins, tuple(str(o.type) for o in e.outputs), tuple(params))


def _layer_starts(g: Graph, cross: list[int]) -> list[int] | None:
    """The repeated layer structure: the L equations of a signature occurring L times at
    regular intervals mark the layers (of the counts L covering enough equations, the one
    covering most that has such a signature: a layer may repeat a shape of its own, say
    four per-head products, more often than the layers repeat); the cuts are these marks
    moved by the one offset (within a period) where the fewest bytes cross.  None when
    there is no such structure."""
    n = len(g.eqns)
    ids: dict = {}
    occ: dict[int, list[int]] = {}
    for i, e in enumerate(g.eqns):
        s = ids.setdefault(_signature(e), len(ids))
        occ.setdefault(s, []).append(i)
    cover: dict[int, int] = {}
    for ps in occ.values():
        if len(ps) >= 2:
            cover[len(ps)] = cover.get(len(ps), 0) + len(ps)
    for layers, covered in sorted(cover.items(), key=lambda kv: (-kv[1], -kv[0])):
        if covered < LAYERS_COVER * n:
            return None
        marks = _regular_marks([ps for ps in occ.values() if len(ps) == layers])
        if marks is not None:
            return _cuts_near(marks, cross, n)
    return None


def _regular_marks(candidates: list[list[int]]) -> list[int] | None:
    """Of the candidates' positions, those at the most regular intervals of at least
    LAYER_MIN_EQNS equations (within 10%), None when none are."""
    marks = None
    for ps in candidates:
        gaps = [b - a for a, b in zip(ps, ps[1:])]
        spread = max(gaps) - min(gaps)
        if (
            min(gaps) >= LAYER_MIN_EQNS
            and spread <= 0.1 * min(gaps)
            and (marks is None or spread < marks[0])
        ):
            marks = (spread, ps)
    return None if marks is None else marks[1]


def _cuts_near(marks: list[int], cross: list[int], n: int) -> list[int] | None:
    """The layer marks (but the first) moved by the one offset within a period where the
    fewest bytes cross."""
    ps = marks[1:]
    period = min(b - a for a, b in zip(marks, marks[1:]))
    best = None
    for delta in range(-((period - 1) // 2), period // 2 + 1):
        cuts = [p + delta for p in ps]
        if cuts[0] <= 0 or cuts[-1] >= n:
            continue
        cost = sum(cross[c] for c in cuts)
        if best is None or cost < best[0]:
            best = (cost, cuts)
    return None if best is None else best[1]


def _even_starts(cross: list[int], k: int) -> list[int]:
    """k segments of about equal length, each cut moved within its neighbourhood to where
    the fewest bytes cross."""
    n = len(cross) - 1
    starts: list[int] = []
    half = max(0, n // (4 * k))
    for j in range(1, k):
        t = round(j * n / k)
        lo, hi = max((starts[-1] + 1) if starts else 1, t - half), min(n - 1, t + half)
        if lo > hi:
            continue
        starts.append(min(range(lo, hi + 1), key=lambda u: (cross[u], abs(u - t))))
    return starts


def _body_size(e: Eqn) -> int:
    """The equations of a call's body (its own level)."""
    body = e.params.get(record_of(e.prim).call_body)
    return len(body.eqns) if isinstance(body, Jaxpr) else 0


def find_segments(g: Graph, spec: Spec) -> Segments | None:
    """The segments `spec.segments` asks for on the program of `g`: a number of them, or
    (auto) each call with a body, else the repeated layers, else about sqrt(n) stretches;
    None for one segment (the whole program)."""
    n = len(g.eqns)
    if spec.segments == "none" or n < 2:
        return None
    cross = _crossing(g.eqns)

    def made(kind, starts):  # (`Graph.cut` counts the bytes crossing)
        seg = Segments.at(kind, starts, n)
        return seg if len(seg.starts) > 1 else None

    if spec.segments.isdigit():
        found = made(f"{spec.segments} asked", _even_starts(cross, int(spec.segments)))
    else:
        calls = [i for i, e in enumerate(g.eqns) if record_of(e.prim).call_body]
        inside = sum(_body_size(g.eqns[i]) for i in calls)
        found = None
        if len(calls) >= 2 and inside >= n - len(calls):  # the calls hold most of the work
            found = made("each call", calls)
        if found is None:
            starts = _layer_starts(g, cross)
            if starts:
                found = made(f"{len(starts) + 1} repeated layers", starts)
        if found is None and n >= SQRT_FROM:
            found = made("about sqrt(n)", _even_starts(cross, max(2, round(math.sqrt(n)))))
    return found


# ---------------------------------------------------------------- min-cut


def min_cut_saved(g: Graph, may_recompute: Callable[[int], bool]) -> set[int]:
    """The ids of the values to save: a minimum cut between "computed in the forward pass" and
    "needed by the linear program", recomputing only the equations `may_recompute(i)` allows.
    Of the minimum cuts, the one nearest the residuals (least recomputation)."""
    import numpy as np
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import breadth_first_order, maximum_flow

    # the equations that can matter: those a residual reaches through recomputable equations
    relevant: dict[int, None] = {}
    stack = [g.made_by(v) for v in g.residuals]
    while stack:
        i = stack.pop()
        if i is None or i in relevant:
            continue
        relevant[i] = None
        if may_recompute(i):
            stack.extend(g.made_by(x) for x in g.eqns[i].inputs)
    if not relevant:
        return set()
    # node 0 = source, 1 = sink; value v: in-node 2k, out-node 2k+1
    values: dict[int, int] = {}
    vars_: list[Var] = []

    def node(v) -> int:
        k = values.get(id(v))
        if k is None:
            k = values[id(v)] = len(vars_)
            vars_.append(v)
        return 2 + 2 * k

    rows: list[int] = []
    cols: list[int] = []
    caps: list[int] = []
    # scipy's maximum_flow takes int32 capacities: bytes in units keeping their sum < 2**30,
    # and "infinite" above that sum
    inf = (1 << 30) + 1

    def edge(a, b, c):
        rows.append(a)
        cols.append(b)
        caps.append(c)

    for i in relevant:
        e = g.eqns[i]
        outs = [node(o) for o in e.outputs]
        if may_recompute(i):
            for x in e.inputs:
                if isinstance(x, Var) and id(x) not in g.free:
                    for o in outs:
                        edge(node(x) + 1, o, inf)
        else:
            for o in outs:
                edge(0, o, inf)
    for v in g.residuals:
        if isinstance(v, Var) and id(v) not in g.free:
            edge(node(v) + 1, 1, inf)
    sizes = [nbytes(v) for v in vars_]
    unit = max(1, -(-sum(sizes) // (1 << 29)))
    for k, s in enumerate(sizes):
        edge(2 + 2 * k, 3 + 2 * k, max(1, -(-s // unit)))
    n = 2 + 2 * len(vars_)
    cap = np.array(caps, dtype=np.int32)
    m = csr_matrix((cap, (np.array(rows), np.array(cols))), shape=(n, n))
    m.sum_duplicates()
    flow = maximum_flow(m, 0, 1).flow
    residual = (m - flow).tocsr()
    residual.data[residual.data < 0] = 0
    residual.eliminate_zeros()
    # nodes that can still reach the sink in the residual graph: the sink side, as small as
    # possible for the cut nearest the residuals
    order = breadth_first_order(residual.T.tocsr(), 1, directed=True, return_predecessors=False)
    reach = np.zeros(n, bool)
    reach[order] = True
    return {id(v) for k, v in enumerate(vars_) if reach[3 + 2 * k] and not reach[2 + 2 * k]}


def min_cut_plan(g: Graph) -> Plan:
    plan = _plan_from_saved(g, min_cut_saved(g, g.cheap), "min-cut")
    if plan.bytes_after > plan.bytes_before:  # cannot happen with exact capacities
        return _plan_from_saved(g, {id(v) for v in g.residuals if isinstance(v, Var)}, "min-cut")
    return plan


# ---------------------------------------------------------------- a byte budget


def _candidates(g: Graph) -> list[int]:
    """Pure equations a residual reaches through pure equations."""
    seen: dict[int, None] = {}
    stack = [g.made_by(v) for v in g.residuals]
    while stack:
        i = stack.pop()
        if i is None or i in seen or not g.pure(i):
            continue
        seen[i] = None
        stack.extend(g.made_by(x) for x in g.eqns[i].inputs)
    return sorted(seen)


def _ilp_budget(g: Graph, cands: list[int], budget: int, flops, groups=None):
    """The exact plan: binary c_e (recompute equation e), s_v (save value v); every residual
    saved or recomputed, every operand of a recomputed equation saved, free or recomputed;
    saved bytes <= budget; minimise recomputed FLOPs (then bytes).  None when HiGHS finds no
    plan in time.  With `groups` (the peak model, `planned_peak`), a continuous m at least
    each group's recomputed residual bytes, and `copies` * saved bytes + m <= budget."""
    import numpy as np
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import coo_matrix

    cset = {i: k for k, i in enumerate(cands)}
    vals: dict[int, int] = {}
    vlist: list[Var] = []

    def var(v) -> int:
        k = vals.get(id(v))
        if k is None:
            k = vals[id(v)] = len(vlist)
            vlist.append(v)
        return k

    wanted = [v for v in g.residuals if isinstance(v, Var) and id(v) not in g.free]
    for v in wanted:
        var(v)
    for i in cands:
        for x in g.eqns[i].inputs:
            if isinstance(x, Var) and id(x) not in g.free:
                var(x)
    nc, nv = len(cands), len(vlist)
    rows, cols, data, lo = [], [], [], []

    def constraint(terms, lower):
        r = len(lo)
        for c, d in terms:
            rows.append(r)
            cols.append(c)
            data.append(d)
        lo.append(lower)

    def available(v):  # s_v + c_{producer(v)}
        t = [(nc + vals[id(v)], 1.0)]
        p = g.made_by(v)
        if p in cset:
            t.append((cset[p], 1.0))
        return t

    for v in dict((id(v), v) for v in wanted).values():
        constraint(available(v), 1.0)
    for i in cands:
        for x in dict((id(x), x) for x in g.eqns[i].inputs if isinstance(x, Var)).values():
            if id(x) not in g.free:
                constraint(available(x) + [(cset[i], -1.0)], 0.0)
    sizes = np.array([nbytes(v) for v in vlist], float)
    nm = 1 if groups else 0  # the peak model's m, last
    m = nc + nv
    if groups:
        for vs in groups:  # m + sum(size * s_v) >= the group's residual bytes
            terms = [(m, 1.0)] + [(nc + vals[id(v)], float(nbytes(v))) for v in vs]
            constraint(terms, float(sum(nbytes(v) for v in vs)))
    a = coo_matrix((data, (rows, cols)), shape=(len(lo), nc + nv + nm))
    cons = [LinearConstraint(a, np.array(lo), np.inf)]
    row = np.concatenate([np.zeros(nc), g.copies * sizes, np.ones(nm)])
    cons.append(LinearConstraint(row[None, :], -np.inf, budget))
    f = np.array([float(flops(g.eqns[i])) for i in cands])
    tie = sizes / (2.0 * (sizes.sum() + 1.0))  # bytes break ties between equal FLOPs
    res = milp(
        np.concatenate([f + 1e-3, tie, np.zeros(nm)]),
        constraints=cons,
        integrality=np.concatenate([np.ones(nc + nv), np.zeros(nm)]),
        bounds=Bounds(0, np.concatenate([np.ones(nc + nv), np.full(nm, np.inf)])),
        options={"time_limit": ILP_TIME_LIMIT, "mip_rel_gap": 1e-6},
    )
    if res.x is None:
        return None
    saved_ids = {id(vlist[k]) for k in range(nv) if res.x[nc + k] > 0.5}
    return saved_ids, res.status == 0


def _greedy_budget(g: Graph, cands: list[int], budget: int, flops, groups=None):
    """The heuristic: the min-cut over cheap equations first; while its bytes exceed the
    budget, costly equations become recomputable in order of FLOPs per byte of result, the
    shortest such prefix whose min-cut fits (binary search: more recomputable equations never
    need more bytes).  Returns (the plan or None, the smallest budget any plan meets: None
    when not computed, i.e. when the cheap cut fits)."""
    costly = [i for i in cands if not g.cheap(i)]

    def key(i):
        return flops(g.eqns[i]) / max(1, sum(nbytes(o) for o in g.eqns[i].outputs))

    # under the peak model (segments) the same equation of every repeated layer (same
    # FLOPs per byte, same signature) is made recomputable in all of them at once: the
    # prefixes tried end where that changes; equations of equal FLOPs per byte but another
    # signature (a layer's other products of the same width) are further steps
    sigs: dict = {}
    keys = {i: (key(i), sigs.setdefault(_signature(g.eqns[i]), len(sigs))) for i in costly}
    costly.sort(key=keys.__getitem__)
    ends = [
        k for k in range(1, len(costly)) if not groups or keys[costly[k]] != keys[costly[k - 1]]
    ]
    ends = [0, *ends, len(costly)]

    def cut(k):
        allowed = set(costly[:k])
        return min_cut_saved(g, lambda i: g.cheap(i) or i in allowed)

    def plan(k):
        return _plan_from_saved(g, cut(k), "")

    def size(p):  # what the budget bounds
        return planned_peak(g, p, groups) if groups else p.bytes_after

    lo, hi = 0, len(ends) - 1  # indices into `ends`
    best = plan(ends[lo])
    sizes = {ends[lo]: size(best)}  # prefix length -> the size of its plan
    if sizes[ends[lo]] <= budget:
        return best, None
    best = plan(ends[hi])
    floor = sizes[ends[hi]] = size(best)
    if floor > budget:
        return None, floor
    while hi - lo > 1:
        mid = (lo + hi) // 2
        p = plan(ends[mid])
        sizes[ends[mid]] = size(p)
        if sizes[ends[mid]] <= budget:
            hi, best = mid, p
        else:
            lo = mid
    # within the step that first fits, fewer of its layers' equations may do (in program
    # order): each layer's frees about the same bytes, so the prefix is interpolated
    # between the step's ends, REFINE_TRIES plans at most (each a min-cut of the program)
    a, b = ends[lo], ends[hi]
    for _ in range(REFINE_TRIES):
        if b - a <= 1:
            break
        share = (sizes[a] - budget) / max(1, sizes[a] - sizes[b])
        mid = min(b - 1, max(a + 1, a + math.ceil(share * (b - a))))
        p = plan(mid)
        sizes[mid] = size(p)
        if sizes[mid] <= budget:
            b, best = mid, p
        else:
            a = mid
    return best, floor


def smallest_budget(g: Graph) -> int:
    """The fewest bytes any plan holds: recomputing every pure equation as needed."""
    cands = set(_candidates(g))
    return _plan_from_saved(g, min_cut_saved(g, lambda i: i in cands), "").bytes_after


def _unmeetable(budget, floor, default, loc, what="residuals") -> JaxprError:
    if what == "peak":
        return JaxprError(
            f"--remat-budget: the planned peak cannot fit {budget} bytes; the smallest "
            f"budget that can be met is {floor} bytes (--remat-budget {floor}); the plain "
            f"gradient's residuals hold {default} bytes",
            loc,
        )
    return JaxprError(
        f"--remat-budget: the residuals cannot fit {budget} bytes; the smallest budget "
        f"that can be met is {floor} bytes (--remat-budget {floor}); the default holds "
        f"{default} bytes",
        loc,
    )


def planned_peak(g: Graph, plan: Plan, groups=None) -> int:
    """The peak the backward part of a segmented plan reaches, as the planners model it:
    the saved bytes (times `g.copies`: a scan's stacked residuals) plus the largest bytes
    one segment recomputes (its recomputed residuals, alive together when its backward
    stretch starts); the saved bytes without a peak model."""
    groups = g.peak_groups() if groups is None else groups
    if not groups:
        return plan.bytes_after
    saved = {id(v) for v in plan.saved}
    worst = max(sum(nbytes(v) for v in vs if id(v) not in saved) for vs in groups)
    return g.copies * plan.bytes_after + worst


def budget_plan(g: Graph, spec: Spec, loc=None) -> Plan:
    from ..ui.stats import eqn_flops

    everything = {id(v): v for v in g.residuals if isinstance(v, Var)}
    held = sum(g.cost(v) for v in everything.values())
    groups = g.peak_groups()
    if groups:
        return _peak_budget_plan(g, spec, held, groups, loc)
    budget = int(spec.budget)
    if spec.fraction:
        # a fraction of the residuals this program's plan can recompute; those an equation
        # with bodies makes (a scan's stacked residuals) were held to it inside, per iteration
        inner = sum(
            g.cost(v)
            for v in everything.values()
            if g.made_by(v) is not None and eqn_subjaxprs(g.eqns[g.made_by(v)])
        )
        budget = int(spec.budget * (held - inner)) + inner
        if inner and budget < held:
            # what is left of the program besides its bodies may not shrink: the bodies
            # held the fraction, the rest holds what it can
            budget = max(budget, smallest_budget(g))
    what = f"--remat-budget {budget} bytes"
    if held <= budget:
        plan = _plan_from_saved(g, set(everything), what)
        plan.exact = True
        return plan
    cands = _candidates(g)
    found = None
    if len(cands) <= EXACT_LIMIT:
        floor = smallest_budget(g)
        if floor > budget:
            raise _unmeetable(budget, floor, held, loc)
        # (the segments' boundary values are saved whatever the plan: the rest must fit)
        fixed = sum(g.cost(v) for v in _by_id(g.boundary, g))
        found = _ilp_budget(g, cands, budget - fixed, eqn_flops)
    if found is not None:
        plan = _plan_from_saved(g, found[0], what)
        plan.exact = found[1]
        return plan
    plan, floor = _greedy_budget(g, cands, budget, eqn_flops)
    if plan is None:
        raise _unmeetable(budget, floor, held, loc)
    plan.method, plan.exact = what, False
    return plan


def _peak_budget_plan(g: Graph, spec: Spec, held: int, groups, loc=None) -> Plan:
    """A byte budget on the planned peak (`planned_peak`) of a segmented program or a scan
    body: a fraction of the plain gradient's (every residual saved: `copies * held`), or
    bytes; the fewest recomputed FLOPs that fit."""
    from ..ui.stats import eqn_flops

    default = g.copies * held
    budget = int(spec.budget * default) if spec.fraction else int(spec.budget)
    everything = {id(v) for v in g.residuals if isinstance(v, Var)}
    cands = _candidates(g)
    inner = any(
        g.made_by(v) is not None and _planned_inside(g.eqns[g.made_by(v)])
        for v in g.residuals
        if isinstance(v, Var)
    )
    if spec.fraction and inner and budget < default:
        # the residuals that calls and loops make were held to the fraction inside their
        # bodies: the program around them holds what it can
        in_cands = set(cands)
        floor_plan = _plan_from_saved(g, min_cut_saved(g, in_cands.__contains__), "")
        budget = max(budget, planned_peak(g, floor_plan, groups))
    what = f"--remat-budget {budget} bytes of peak"
    if default <= budget:
        plan = _plan_from_saved(g, everything, what)
        plan.exact = True
        return plan
    if len(cands) <= EXACT_LIMIT:
        in_cands = set(cands)
        floor_plan = _plan_from_saved(g, min_cut_saved(g, in_cands.__contains__), "")
        floor = planned_peak(g, floor_plan, groups)
        if floor > budget:
            raise _unmeetable(budget, floor, default, loc, "peak")
        fixed = sum(g.cost(v) for v in _by_id(g.boundary, g))
        found = _ilp_budget(g, cands, budget - g.copies * fixed, eqn_flops, groups)
        if found is not None:
            plan = _plan_from_saved(g, found[0], what)
            plan.exact = found[1]
            if planned_peak(g, plan, groups) <= budget:
                return plan
    plan, floor = _greedy_budget(g, cands, budget, eqn_flops, groups)
    if plan is None:
        raise _unmeetable(budget, floor, default, loc, "peak")
    plan.method, plan.exact = what, False
    return plan


# ---------------------------------------------------------------- rewriting the programs


def apply_plan(
    primal: Jaxpr, linear: Jaxpr, info: LinearizeInfo, g: Graph, plan: Plan, forward=True
):
    """(primal', linear', info'): the primal program returns `plan.saved` (an offloaded one
    copied to its memory after the equation that makes it), the linear program takes them
    and, in one `remat2` call, copies the offloaded ones back and recomputes the other
    residuals.  `forward=False` (nested bodies): every saved value is a result of the
    primal program, none forwarded."""
    from ..passes.dce import dce

    n_out = len(info.out_mask)
    n_res = len(info.residuals)
    outs = list(primal.outvars[:n_out])
    new_info = LinearizeInfo(info.in_mask, info.out_mask)
    peqns, held, made = _offload_copies(g, plan)
    peqns = _rounded(peqns, [v for v in plan.saved if id(v) not in plan.offload], g)
    new = forward_residuals(
        held,
        lambda v: made.get(id(v)) or (g.eqns[g.producer[id(v)]] if id(v) in g.producer else None),
        primal.invars if forward else (),
        primal.constvars if forward else (),
        outs if forward else (),
        new_info,
    )
    # (DCE prunes the results of a scan, call or cond that the linear program now makes)
    new_primal = dce(B.make_jaxpr(primal.invars, peqns, outs + new, primal.constvars))
    saved_in = [B.fresh_like(v) for v in held]
    by_saved = {id(v): b for v, b in zip(plan.saved, saved_in)}  # offloaded: its host copy
    tan_in = [B.fresh_like(v) for v in linear.invars[n_res:]]
    mapping: dict[int, object] = {id(a): b for a, b in zip(linear.invars[n_res:], tan_in)}
    # linear residual input -> the primal Var the remat2 call makes: recomputed, or an
    # offloaded one copied back
    inside: dict[int, Var] = {}
    for lv, pv in zip(linear.invars[:n_res], g.residuals):
        if id(pv) in by_saved and id(pv) not in plan.offload:
            mapping[id(lv)] = by_saved[id(pv)]
        else:
            inside[id(lv)] = pv
    eqns = B.substitute(list(linear.eqns), mapping)
    outvars = [mapping.get(id(x), x) if isinstance(x, Var) else x for x in linear.outvars]
    first, rest = _hoist_nonlinear(eqns, tan_in, inside)
    body = first + _remat_stretch(rest, outvars, inside, g, by_saved, plan)
    new_linear = B.make_jaxpr(saved_in + tan_in, body, outvars)
    return new_primal, new_linear, new_info


def _rounded(eqns: list[Eqn], saved, g: Graph) -> list[Eqn]:
    """`eqns` with each saved floating value that an equation made and another reads rounded
    to its own precision right after it, `reduce_precision[exponent_bits mantissa_bits]` (the
    identity in exact arithmetic), which every reader then reads: JAX's remat partial
    evaluation does so to each residual of a checkpoint (`_insert_reduce_precision`), so that
    XLA's excess precision cannot make the forward pass and the recomputation disagree.  XLA
    keeps it, and it changes XLA:TPU's buffers: JAX's per-layer dots_saveable gradient of the
    transformer of docs/ACCELERATOR.md holds 2.38 GB of temp bytes with it, 2.62 GB without.
    The values crossing segments are a layer's outputs and inputs, not residuals of one:
    they stay as they are, as in JAX's per-layer checkpoint; an offloaded value's residual is
    its host copy, which no equation reads: JAX rounds neither."""
    from ..core import is_float, long_dtype_name
    from ..lazy import ml_dtypes

    read = {id(x) for e in eqns for x in e.inputs}
    wanted = {
        id(v)
        for v in saved
        if id(v) in g.producer and id(v) not in g.boundary and is_float(v.type) and id(v) in read
    }
    if not wanted:
        return eqns

    def bits(v) -> dict:
        info = ml_dtypes.finfo(long_dtype_name(v.type.dtype))
        return {"exponent_bits": int(info.nexp), "mantissa_bits": int(info.nmant)}

    out: list[Eqn] = []
    for e in eqns:
        rounded = [o for o in e.outputs if id(o) in wanted]
        if e.prim == "reduce_precision" and rounded and e.params == bits(rounded[0]):
            rounded = []  # (rounded already)
        if not rounded:
            out.append(e)
            continue
        raw = {id(o): B.fresh_like(o) for o in rounded}
        out.append(e.replace(outputs=tuple(raw.get(id(o), o) for o in e.outputs)))
        out.extend(Eqn("reduce_precision", (raw[id(o)],), (o,), bits(o), e.loc) for o in rounded)
    return out


def _offload_copies(g: Graph, plan: Plan):
    """The primal equations with a copy to its memory after each offloaded value's equation,
    as JAX's partial evaluation emits it: (equations, the values held (the copies in place
    of the offloaded values), copy Var id -> its equation)."""
    copies: dict[int, Eqn] = {}
    for v in plan.saved:
        off = plan.offload.get(id(v))
        if off is None:
            continue
        e = g.eqns[g.producer[id(v)]]
        if _KINDS[off.src] != v.type.memory_space:
            raise JaxprError(
                f"--remat {plan.method}: offload_src={off.src}, but {e.prim} makes a value in "
                f"{v.type.memory_space or 'device'} memory (JAX's partial evaluation asserts "
                "they agree); give the value's memory kind as offload_src",
                e.loc,
            )
        copies[id(v)] = _copy(v, _in_space(v.type, _KINDS[off.dst]), off.dst)
    eqns: list[Eqn] = []
    for e in g.eqns:
        eqns.append(e)
        eqns.extend(copies[id(o)] for o in e.outputs if id(o) in copies)
    held = [copies[id(v)].outputs[0] if id(v) in copies else v for v in plan.saved]
    return eqns, held, {id(c.outputs[0]): c for c in copies.values()}


def _in_space(t, space: str | None):
    return ShapedArray(t.shape, t.dtype, t.weak_type, space, t.vma, t.named_shape)


def _copy(x: Var, out_type, kind: str) -> Eqn:
    """JAX's `device_put` of `x` to memory `kind`, as `partial_eval_jaxpr_custom` emits it."""
    space = EnumValue("MemorySpace", "Host" if _KINDS[kind] == "host" else "Device")
    params = {
        "copy_semantics": (EnumValue("ArrayCopySemantics", "ALWAYS_COPY"),),
        "devices": (space,),
        "srcs": (None,),
    }
    return Eqn("device_put", (x,), (Var(out_type, x.hint),), params)


def _offloaded_from(e: Eqn | None) -> Var | None:
    """The device value an offloaded copy (`_copy` to host memory) was made from, else None."""
    if e is None or e.prim != "device_put" or len(e.inputs) != 1:
        return None
    x = e.inputs[0]
    if not isinstance(x, Var) or in_host(x) or not in_host(e.outputs[0]):
        return None
    return x


def _hoist_nonlinear(eqns, tangents, inside):
    """(the equations that read no tangent (constants a rule built), the others): the first
    go ahead, since a `remat2` call gets only linear results, whose transposition is the
    call's.  One of them reading a value made inside the call is refused (no rule builds
    one: the linear programs of the corpus have none)."""
    lin = {id(t) for t in tangents}
    first, rest = [], []
    for e in eqns:
        if lin.isdisjoint(map(id, e.inputs)):
            if any(isinstance(x, Var) and id(x) in inside for x in e.inputs):
                raise JaxprError(
                    f"remat: '{e.prim}' of the linear program reads no tangent but a residual "
                    "the policy recomputes or offloads; save it (a policy that saves what "
                    "makes it, or everything_saveable)",
                    e.loc,
                )
            first.append(e)
        else:
            lin.update(id(o) for o in e.outputs)
            rest.append(e)
    return first, rest


def _remat_stretch(eqns, outvars, inside, g: Graph, by_saved, plan: Plan) -> list[Eqn]:
    """The linear equations with each stretch that reads values made inside (recomputed or
    copied back) wrapped in a `remat2` call, as JAX's transposed checkpoint is: each
    recomputed equation once, behind the call's barrier.  One stretch per segment of the
    plan (`g.segments`): from the first to the last equation that reads a value its
    segment recomputes (stretches that overlap are merged); the whole program's one
    stretch without segments."""
    seg_of = g.segments.of if g.segments is not None else None

    def segment(lv_id) -> int:
        i = g.producer.get(id(inside[lv_id]))
        return seg_of[i] if seg_of is not None and i is not None else 0

    span: dict[int, list[int]] = {}
    for k, e in enumerate(eqns):
        for x in e.inputs:
            if isinstance(x, Var) and id(x) in inside:
                s = span.setdefault(segment(id(x)), [k, k])
                s[1] = k
    if not span:
        return eqns
    merged: list[list[int]] = []
    for a, b in sorted(span.values()):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    if seg_of is not None:
        _close_gaps(merged, eqns)
    out: list[Eqn] = []
    prev = 0
    for a, b in merged:
        read_after = {id(x) for e in eqns[b + 1 :] for x in e.inputs}
        read_after.update(id(x) for x in outvars)
        out.extend(eqns[prev:a])
        out.append(_remat_call(eqns[a : b + 1], read_after, inside, g, by_saved, plan))
        prev = b + 1
    return out + eqns[prev:]


def _close_gaps(stretches: list[list[int]], eqns) -> None:
    """Make the segments' stretches `[a, b]` (in place) cover the linear program from the
    first one's start on: the equations between two stretches (those of a segment that read
    nothing it recomputes, e.g. a layer norm's mean) join the one before or after, cut where
    the fewest bytes of linear values cross, and the first stretch starts at the program's
    start.  Each call then transposes into its whole layer's backward, as JAX's per-layer
    checkpoint does: one cotangent crosses between calls, not the pieces of a layer norm."""
    cross = _crossing(eqns)
    stretches[0][0] = 0
    for prev, nxt in zip(stretches, stretches[1:]):
        lo, hi = prev[1] + 1, nxt[0]
        cut = min(range(lo, hi + 1), key=lambda t: (cross[t], -t))
        prev[1], nxt[0] = cut - 1, cut


def _remat_call(stretch, read_after, inside, g: Graph, by_saved, plan: Plan) -> Eqn:
    """The `remat2` call of one stretch: its body copies back the offloaded values it reads
    (from their host copies, its operands), recomputes the others, then runs the stretch;
    its results are the stretch's values read after it (`read_after`: their ids)."""
    want = list(
        {
            id(x): inside[id(x)]
            for e in stretch
            for x in e.inputs
            if isinstance(x, Var) and id(x) in inside
        }.items()
    )
    offload = plan.offload
    rec = g.closure(set(by_saved), [pv for _, pv in want], plan.reruns)
    # the body: fresh binders for the saved values it reads and the outer values the stretch
    # reads; the copies back and the recomputation cloned from the primal program; the stretch
    env: dict[int, Var] = {}
    binders: list[Var] = []
    operands: list = []
    cloned: list[Eqn] = []

    def bind_outer(outer):
        if id(outer) not in env:
            env[id(outer)] = B.fresh_like(outer)
            binders.append(env[id(outer)])
            operands.append(outer)
        return env[id(outer)]

    prim_env: dict[int, object] = {}

    def value(x):
        """The body's value of primal Var `x`: recomputed, else saved (free values are
        passed as saved ones), an offloaded one copied back at its first read."""
        if id(x) not in prim_env:
            v = bind_outer(by_saved[id(x)])
            if id(x) in offload:
                cloned.append(_copy(v, x.type, offload[id(x)].src))
                v = cloned[-1].outputs[0]
            prim_env[id(x)] = v
        return prim_env[id(x)]

    for i in rec:
        e = plan.reruns.get(i, g.eqns[i])
        ins = [value(x) if isinstance(x, Var) else x for x in e.inputs]
        outs = [B.fresh_like(o) for o in e.outputs]
        prim_env.update({id(o): n for o, n in zip(e.outputs, outs)})
        cloned.append(e.replace(inputs=ins, outputs=outs))
    for lv, pv in want:
        env[lv] = value(pv)
    body_eqns: list[Eqn] = []
    for e in stretch:
        ins = [
            x if not isinstance(x, Var) else env[id(x)] if id(x) in env else bind_outer(x)
            for x in e.inputs
        ]
        outs = [B.fresh_like(o) for o in e.outputs]
        env.update({id(o): n for o, n in zip(e.outputs, outs)})
        body_eqns.append(e.replace(inputs=ins, outputs=outs))
    results = [o for e in stretch for o in e.outputs if id(o) in read_after]
    inner = B.make_jaxpr(binders, cloned + body_eqns, [env[id(o)] for o in results])
    # the call's results are the stretch's own Vars: later equations keep reading them
    return Eqn(
        "remat2",
        tuple(operands),
        tuple(results),
        {"jaxpr": inner, "prevent_cse": True, "differentiated": True, "policy": None},
    )


# ---------------------------------------------------------------- entry points


def plan_for(g: Graph, spec: Spec, loc=None) -> Plan:
    if spec.budget is not None:
        return budget_plan(g, spec, loc)
    if spec.policy == "min-cut":
        return min_cut_plan(g)
    return policy_plan(g, spec)


def _with_saved(primal: Jaxpr, linear: Jaxpr, n_out: int, num_res: int, spec: Spec):
    """The body's pair with the values the policy saves to recompute its residuals and its
    outputs from (a loop's new carries, a call's results the rerun makes) made residuals
    too (read by no linear equation; an offloaded one copied to its memory after the
    equation that makes it): what the rerun of the equation holding the body reads, as
    JAX's known loop stacks them.  `(primal, linear, num_res)`."""
    info = _masked_info(primal, n_out)
    outs = primal.outvars[:n_out]
    info.residuals += [Residual(v.type, "output", j) for j, v in enumerate(outs)]
    g = Graph(primal, info)
    have = {id(v) for v in primal.outvars if isinstance(v, Var)} | g.free
    eqns, held, _ = _offload_copies(g, policy_plan(g, spec))
    extra = [v for v in held if id(v) not in have]
    if not extra:
        return primal, linear, num_res
    primal = primal.replace(eqns=eqns, outvars=(*primal.outvars, *extra))
    ins = linear.invars
    linear = linear.replace(
        invars=(*ins[:num_res], *(B.fresh_like(v) for v in extra), *ins[num_res:])
    )
    return primal, linear, num_res + len(extra)


def _masked_info(primal: Jaxpr, n_out: int) -> LinearizeInfo:
    """A nested body's residuals: its results after its `n_out` outputs."""
    info = LinearizeInfo([True] * len(primal.invars), [True] * n_out)
    info.residuals = [Residual(v.type, "new", k) for k, v in enumerate(primal.outvars[n_out:])]
    return info


def _reruns(spec: Spec, body: Jaxpr) -> bool:
    """Whether the plan of the program holding a scan, call or cond of `body` may run it
    again under `spec` (a policy; a body without effects, random draws or Refs: `eqn_saves`
    asks the same of the equation)."""
    from ..core import RefType
    from ..passes.common import jaxpr_has_effects, jaxpr_has_random

    if spec.budget is not None or spec.policy in (None, "min-cut"):
        return False
    if spec.segments != "none":  # the body is a segment: recomputed inside, per iteration
        return False
    if any(isinstance(v.type, RefType) for v in (*body.invars, *body.outvars)):
        return False
    return not (jaxpr_has_effects(body) or jaxpr_has_random(body))


def counted_at(spec: Spec):
    """The block in which sizes count symbolic dims at `spec.dims` (`--dim b=5`): the
    planners' bytes and FLOPs.  Without dims, a no-op (a symbolic dim counts as 0, which
    the byte-weighted planners are never asked to weigh: `ad_cmds` refuses it)."""
    if not spec.dims:
        return contextlib.nullcontext()
    from ..backend.values import eval_dim
    from ..core import sized_dims
    from ..shardings import sharded_size

    dims, memo = dict(spec.dims), {}

    def size(d) -> int:  # (asked only for symbolic dims: `ShapedArray.size` counts `8@x`)
        n = memo.get(d)
        if n is None:
            n = memo[d] = eval_dim(str(sharded_size(d)), dims)  # `2*b@x`: its global 2*b
        return n

    return sized_dims(size)


def rematerialize(
    primal: Jaxpr,
    linear: Jaxpr,
    info: LinearizeInfo,
    nested: bool = False,
    spec: Spec | None = None,
    copies: int = 1,
    plans: list | None = None,
):
    """Apply `spec` (None: nothing to do) to a linearization, the plan appended to `plans`
    (when given): the graph,
    its segments (`find_segments`, the outermost program only: a nested body is one
    segment), the plan (`plan_for`), the placement (`apply_plan`).  A byte budget applies
    to the outermost program only (nested bodies follow min-cut then), but a fraction under
    segments applies to each body too, a scan body's saved values counted `copies` times
    (its length: they are stacked)."""
    if spec is None:
        return primal, linear, info
    if nested and spec.budget is not None and (not spec.fraction or spec.segments == "none"):
        spec = Spec(policy="min-cut", segments=spec.segments)
    # (a fraction of the peak applies to each body under segments: a scan's per iteration)
    from ..ui.stats import flops

    g = Graph(primal, info)
    if spec.segments != "none":
        g.copies = max(1, copies)
    with counted_at(spec):
        if not nested:
            segments = find_segments(g, spec)
            if segments is not None:
                g.cut(segments)
        plan = plan_for(g, spec)
        plan.segments = g.segments
        if g.peak_groups():
            plan.peak = planned_peak(g, plan)
            plan.peak_before = g.copies * plan.bytes_before
        plan.flops_before = flops(primal) + flops(linear)
    plan.nested = nested
    plan.sizes = ",".join(f"{k}={n}" for k, n in spec.dims)
    out = (primal, linear, info)
    if plan.recompute or plan.offload:  # emitted outside the sizes: stays symbolic
        out = apply_plan(primal, linear, info, g, plan, forward=not nested)
    else:  # everything saved (as under everything_saveable): rounded as JAX rounds them
        eqns = _rounded(list(primal.eqns), plan.saved, g)
        if len(eqns) != len(primal.eqns):
            out = (primal.replace(eqns=tuple(eqns)), *out[1:])
    with counted_at(spec):
        plan.flops_after = flops(out[0]) + flops(out[1])
        for v in plan.saved:
            i = g.producer.get(id(v))
            src = (
                "an input"
                if i is None
                else f"{g.eqns[i].prim}" + (f" at {g.eqns[i].loc}" if g.eqns[i].loc else "")
            )
            off = plan.offload.get(id(v))
            to = f", offloaded to {off.dst}" if off else ""
            plan.saved_lines.append(f"{v.type} ({g.cost(v)} B) from {src}{to}")
    for i in plan.recompute:
        p = g.eqns[i].prim
        plan.recomputed_counts[p] = plan.recomputed_counts.get(p, 0) + 1
    if plans is not None:
        plans.append(plan)
    return out


def rematerialize_masked(
    primal: Jaxpr,
    linear: Jaxpr,
    n_out: int,
    num_res: int,
    spec: Spec,
    plans: list | None,
    rerun=False,
    copies: int = 1,
):
    """`rematerialize` for `linearize_masked`'s pair (a nested body: residuals are the primal
    body's results after its `n_out` outputs): `(primal, linear, num_res)`.  The body of an
    equation a policy may run again (`rerun`: a scan, a call, a cond) gets no plan of its own
    when the policy can: the plan of the program holding it reruns the equation for the
    residuals it does not save, as JAX recomputes a loop's residuals in one forward loop of
    the backward pass (JAX's policy-saved ones stacked, offloaded ones copied inside the
    loop)."""
    if rerun and _reruns(spec, primal):
        return _with_saved(primal, linear, n_out, num_res, spec)
    p, lin, new_info = rematerialize(
        primal, linear, _masked_info(primal, n_out), True, spec, copies, plans
    )
    return p, lin, len(new_info.residuals)
