"""The request: `Spec` (a policy, a byte budget, the segments), parsed from `--remat`/`--remat-
budget` text without evaluating it, and the policy's decision on an equation."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from ...core import Eqn, Jaxpr
from ...lazy import LazyPattern
from .records import Offload, remat_class

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
    #: `--remat-budget device`: the memory the device has free (`fit.py`)
    on_device: bool = False
    #: fill each plan's device-model figures (`Plan.device`): the compile loop's estimate
    device_model: bool = False
    #: the program's outputs are not returned (`grad` without its value): the forward pass
    #: of the last segment runs only for what its plan saves (`chain.py`)
    value_dropped: bool = False


def with_segments(spec: Spec, segments) -> Spec:
    """`spec` with `--remat-segments` set (auto, none or a positive number)."""
    import dataclasses

    text = str(segments).strip().lower()
    if text not in ("auto", "none") and not (text.isdigit() and int(text) > 0):
        raise ValueError(f"--remat-segments {segments!r}: expected auto, none or a number >= 1")
    return dataclasses.replace(spec, segments=text)


_SIZE = LazyPattern(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([kmgt]i?b?|b)?\s*$", re.I)
_UNITS = {"": 1, "b": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}


def parse_budget(text: str) -> Spec:
    """`0.5` (a fraction of the default residual bytes: any number up to 1 without a unit,
    `1` and `1.0` alike), `2GiB`, `300MB`, `123456` bytes (a whole number above 1), below
    2^63 bytes, or `device` (the memory the device has free)."""
    if text.strip().lower() == "device":
        return Spec(budget=1.0, fraction=True, on_device=True)
    m = _SIZE.match(text)
    if not m:
        raise ValueError(
            f"--remat-budget {text!r}: expected a fraction (0.5), bytes (2GiB) or device"
        )
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


_TOKEN = LazyPattern(r"\s*(?:(\"[^\"]*\"|'[^']*')|([A-Za-z_][\w.\-]*)|([()\[\],=]))")


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
        f"--remat {name!r}: unknown policy{_did_you_mean(name, _KNOWN)}; one of "
        f"{', '.join(POLICIES)} (JAX's names)"
    )


#: every policy name the parser takes
_KNOWN = (
    *_PLAIN,
    *_ALIASES,
    *_NAME_LISTS,
    "offload_dot_with_no_batch_dims",
    "save_and_offload_only_these_names",
    "save_from_both_policies",
    "min-cut",
)


def _did_you_mean(word: str, known, cutoff: float = 0.75) -> str:
    """`(did you mean 'x'?)` for the closest of `known`, else nothing."""
    import difflib

    close = difflib.get_close_matches(word, sorted(known), n=1, cutoff=cutoff)
    return f" (did you mean '{close[0]}'?)" if close else ""


def check_names(spec: Spec, program: Jaxpr) -> None:
    """Refuse a checkpoint name the policy asks for that no `checkpoint_name` of the program
    (bodies included) carries, with the closest one it has: JAX saves nothing for it,
    silently, and a misspelt name would then recompute what the user meant to save."""
    from ...core import all_eqns

    asked = spec.names | spec.offload_names
    for part in spec.parts:
        check_names(part, program)
    if not asked:
        return
    have = {str(e.params.get("name")) for e in all_eqns(program) if remat_class(e) == "name"}
    for n in sorted(asked - have):
        listed = ", ".join(sorted(have)) if have else "none"
        raise ValueError(
            f"--remat {spec.policy}: no checkpoint_name {n!r} in the program"
            f"{_did_you_mean(n, have, 0.6)}; its names: {listed}"
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
