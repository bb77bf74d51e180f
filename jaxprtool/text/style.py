"""Printing styles: which JAX version's `str(jaxpr)` the printer imitates.

A `Style` is a frozen value holding the JAX version tuple; every switch the
printer (and code that builds equations, e.g. AD) needs is a derived property:

* `typed_literals`: `1.0:f32[]` (0.6.2+) vs `1.0` (0.4.35);
* `suggest_names`: inner jit names copied from the outer equation (0.6.2+);
* `hoist_large`: nested jaxprs with more than 10 equations are hoisted (0.10+);
* `broadcast_shape_param`: `broadcast_in_dim` prints `shape=`/`sharding=` (<= 0.7.2);
* `scan_ft`: scan params `ft_in`/`ft_out` (0.11+) vs `num_consts`/`num_carry` (< 0.11);
* `mask_addresses`: ` at 0x...` printed as `0xXXXXXXXXXXXX` (0.10+);
* `eq_without_outputs`: an equation without results printed as ` = prim ...` (< 0.4.22,
  before jax-ml/jax#18845);
* `jit_name_first`: `pjit[name=... ...]` (0.4.22+, jax-ml/jax#18862) vs sorted keys;
* `jit_hides_defaults`: pjit's print rule hides default parameters (0.4.4+, jax-ml/jax#14384);
* `custom_call_rule`: custom_jvp_call / custom_vjp_call print `name=` first and hide their
  thunks (0.6.1+, jax-ml/jax#28608, #28715); before, every parameter sorted.

`detect_style(jaxpr)` guesses the style of a parsed program from what its equations'
records say (`Primitive.first_version`, `Primitive.version_clues`); `scan_params` and
`scan_counts` build and read scan parameters in either encoding.  What a style prints for a
primitive (jit's name, a parameter's presence) is its record's (`print_name`,
`print_params`, `restyle`).
"""

from __future__ import annotations

import functools
import re
from typing import Any

from .. import core
from ..frozen import Frozen, set_field
from ..lazy import DTypeName, LazyPattern
from ..params import Opaque, Record, format_value
from ..record import prim as record_of

_REAL_ADDR = LazyPattern(r" at 0x(?!X+\b)[0-9a-fA-F]+")
#: parameter value classes that are no `Opaque`, `Record` or `str` (no address is looked for
#: in them): most values, told by one set lookup instead of three `isinstance` answers
_NO_ADDRESS = frozenset({int, bool, float, type(None), tuple, list, DTypeName, core.Jaxpr})

#: the clues an equation gives about the JAX version that printed it (`version_clues`):
#: printed by that version (or one before it, for the `BEFORE_` ones)
CLUE_BEFORE_0_4_4 = "before 0.4.4"
CLUE_BEFORE_0_4_22 = "before 0.4.22"
CLUE_0_4_35 = "0.4.35"
CLUE_BEFORE_0_6_1 = "before 0.6.1"
#: jit printed under its old name (0.4.35 or 0.6.2, told apart by the names of its body)
CLUE_OLD_CALL_NAME = "old call name"
CLUE_0_7_2 = "0.7.2"
#: a form JAX printed before 0.10.1 (0.7.2 and older), such as ragged_dot_general without
#: `out_sharding`
CLUE_BEFORE_0_10_1 = "before 0.10.1"
#: a form JAX printed before 0.11 (0.10 and older) and 0.11 and 0.12 do not
CLUE_BEFORE_0_11 = "before 0.11"
#: a form 0.10 and 0.11 print and 0.12 does not
CLUE_0_10 = "0.10"
#: a form 0.11 and 0.12 print and 0.10 does not (a primitive or parameter 0.11 added)
CLUE_0_11 = "0.11"
CLUE_0_12 = "0.12"
#: a form only 0.12.1 prints (gather's `out_sharding=None`), and one it no longer prints
CLUE_0_12_1 = "0.12.1"
CLUE_BEFORE_0_12_1 = "before 0.12.1"
#: the clues a parameter JAX added in a version gives (a record's `params_since`): by its
#: presence (None: every later version prints it), by its absence
PARAM_CLUES = {
    (0, 10, 1): (None, CLUE_BEFORE_0_10_1),
    (0, 11): (CLUE_0_11, CLUE_BEFORE_0_11),
    (0, 12, 1): (CLUE_0_12_1, CLUE_BEFORE_0_12_1),
}
#: the oldest JAX whose printouts the tool reads and writes (its printing is the 0.4.3 style's)
OLDEST = (0, 4, 1)
KNOWN_VERSIONS = (
    (0, 4, 3),
    (0, 4, 21),
    (0, 4, 35),
    (0, 6, 0),
    (0, 6, 2),
    (0, 7, 2),
    (0, 10, 2),
    (0, 11, 0),
    (0, 12, 0, 1),
    (0, 12, 1),
)


class Style(Frozen):
    """A JAX version's printing style; `Style()` is the newest one's."""

    __slots__ = ("version",)
    version: tuple[int, ...]

    def __init__(self, version: tuple[int, ...] = (0, 12, 1)) -> None:
        set_field(self, "version", version)

    # ------------------------------------------------------------ construction
    @staticmethod
    def parse(text: str) -> Style:
        """`Style.parse("0.4.35")`, `"0.12"`, `"jax-0.10.2"`; raises ValueError on bad input."""
        t = text.strip()
        if t.startswith("jax-"):
            t = t[4:]
        if t.startswith("v"):
            t = t[1:]
        if not re.fullmatch(r"\d+(\.\d+)*", t):
            raise ValueError(f"not a JAX version: {text!r} (expected e.g. 0.4.35 or 0.12)")
        v = tuple(int(x) for x in t.split("."))
        if v < OLDEST:
            oldest = ".".join(map(str, OLDEST))
            raise ValueError(f"JAX version {text} is older than the oldest supported ({oldest})")
        return Style(v)

    def __str__(self) -> str:
        return ".".join(str(x) for x in self.version)

    # ------------------------------------------------------------ switches
    @property
    def typed_literals(self) -> bool:
        return self.version >= (0, 5)

    @property
    def suggest_names(self) -> bool:
        return self.version >= (0, 5)

    @property
    def hoist_large(self) -> bool:
        return self.version >= (0, 8)

    @property
    def broadcast_shape_param(self) -> bool:
        return self.version < (0, 8)

    @property
    def scan_ft(self) -> bool:
        return self.version >= (0, 11)

    @property
    def mask_addresses(self) -> bool:
        return self.version >= (0, 8)

    @property
    def eq_without_outputs(self) -> bool:
        """An equation without results prints `= prim ...` after its (empty) binders."""
        return self.version < (0, 4, 22)

    @property
    def jit_name_first(self) -> bool:
        return self.version >= (0, 4, 22)

    @property
    def jit_hides_defaults(self) -> bool:
        return self.version >= (0, 4, 4)

    @property
    def custom_call_rule(self) -> bool:
        return self.version >= (0, 6, 1)

    @property
    def scan_split_transpose(self) -> bool:
        """scan also carries `_split_transpose` and `linear` (<= 0.7.2)."""
        return self.version < (0, 8)

    # ------------------------------------------------------------ builders
    def scan_params(
        self,
        *,
        jaxpr: core.Jaxpr,
        length: int,
        num_consts: int,
        num_carry: int,
        reverse: bool = False,
        unroll: int = 1,
        linear: tuple[bool, ...] | None = None,
    ) -> dict[str, Any]:
        """Parameters of a `scan` equation in this style's encoding.

        The body takes consts, carry, xs and returns carry, ys.
        """
        num_xs = len(jaxpr.invars) - num_consts - num_carry
        num_ys = len(jaxpr.outvars) - num_carry
        if self.scan_ft:
            none = None
            return {
                "ft_in": (
                    (none,) * num_consts,
                    (none,) * num_carry,
                    (none,) * num_xs,
                ),
                "ft_out": ((none,) * num_carry, (Opaque("RightsOnly(Right(None))"),) * num_ys),
                "jaxpr": jaxpr,
                "length": length,
                "reverse": reverse,
                "unroll": unroll,
            }
        p: dict[str, Any] = {
            "jaxpr": jaxpr,
            "length": length,
            "num_carry": num_carry,
            "num_consts": num_consts,
            "reverse": reverse,
            "unroll": unroll,
        }
        if self.scan_split_transpose:
            p["_split_transpose"] = False
            p["linear"] = tuple(linear) if linear is not None else (False,) * len(jaxpr.invars)
        return p


DEFAULT_STYLE = Style((0, 12, 1))
STYLE_0_12_0 = Style((0, 12, 0, 1))
STYLE_0_10 = Style((0, 10, 2))
STYLE_0_11 = Style((0, 11, 0))


# ---------------------------------------------------------------- scan encodings


def _ft_len(v: Any) -> int | None:
    """Number of leaves of a printed FlatTree value (tuple form or `Pytree(vals=[...])`)."""
    if isinstance(v, tuple):
        n = 0
        for x in v:
            k = _ft_len(x)
            if k is None:
                return None
            n += k
        return n
    if v is None:
        return 1
    if isinstance(v, Record) and v.cls == "Pytree":
        vals = v.get("vals")
        return len(vals) if isinstance(vals, (list, tuple)) else None
    text = format_value(v, nested=True)
    if text.startswith("Pytree("):
        m = re.match(r"Pytree\(vals=\[(.*?)\], tree=", text)
        if m is None:
            return None
        inner = m.group(1).strip()
        return 0 if not inner else inner.count("None") or None
    # RightsOnly(...(Right(...(None)))): counted iff the first k Eithers are Right,
    # k = the number of RightsOnly wrappers.
    k = 0
    while text.startswith("RightsOnly("):
        k += 1
        text = text[len("RightsOnly(") : -1]
    for _ in range(k):
        if text.startswith("Right("):
            text = text[len("Right(") : -1]
        elif text.startswith("Left("):
            return 0
        else:
            return None
    return 1


def scan_counts(params: dict[str, Any]) -> tuple[int, int] | None:
    """(num_consts, num_carry) of a scan equation in either encoding; None when unreadable."""
    if "num_consts" in params and "num_carry" in params:
        return int(params["num_consts"]), int(params["num_carry"])
    ft_in = params.get("ft_in")
    if isinstance(ft_in, tuple) and len(ft_in) == 3:
        nc, ncarry = _ft_len(ft_in[0]), _ft_len(ft_in[1])
        if nc is not None and ncarry is not None:
            return nc, ncarry
    ft_out = params.get("ft_out")
    if (
        isinstance(ft_out, tuple)
        and len(ft_out) == 2
        and isinstance(params.get("jaxpr"), core.Jaxpr)
    ):
        ncarry = _ft_len(ft_out[0])
        if ncarry is not None:
            j = params["jaxpr"]
            nxs_plus_consts = len(j.invars) - ncarry
            if isinstance(ft_in, tuple) and len(ft_in) == 3:
                nxs = _ft_len(ft_in[2])
                if nxs is not None:
                    return nxs_plus_consts - nxs, ncarry
    return None


# ---------------------------------------------------------------- detection


def _record_facts(name: str) -> tuple:
    """What `detect_style` asks of a primitive's record: its version clues (its own rule's,
    and those of the parameters JAX added later: `params_since`, `PARAM_CLUES`), the
    parameter whose jaxpr takes its operands' names, and the clue its presence gives:
    CLUE_0_12 when only JAX 0.12 prints it (a primitive it added, or one of its HiPrims:
    `CustomRoot[...]`, `SearchSorted[...]`), CLUE_0_11 for one JAX 0.11 added
    (`first_version`), else None."""
    rec = record_of(name)
    first = rec.first_version
    clue = None
    if name[:1].isupper() or (first is not None and tuple(first) >= (0, 12)):
        clue = CLUE_0_12
    elif first is not None and tuple(first) >= (0, 11):
        clue = CLUE_0_11
    return _clues_with_params(rec.version_clues, rec.params_since), rec.suggest_names, clue


def _clues_with_params(rule, since):
    """The record's `version_clues` rule, joined by the clues of its `params_since`."""
    marked = [
        (k, PARAM_CLUES[tuple(v)]) for k, (v, _) in (since or {}).items() if tuple(v) in PARAM_CLUES
    ]
    if not marked:
        return rule

    def clues(e) -> set[str]:
        found = set(rule(e)) if rule is not None else set()
        for k, (present, absent) in marked:
            clue = present if k in e.params else absent
            if clue is not None:
                found.add(clue)
        return found

    return clues


def detect_style(jaxpr: core.Jaxpr) -> Style:
    """Guess the JAX version whose printing a parsed program follows.

    The clues, oldest first: a result-less equation printed ` = prim`, or jit's old name with
    `name=` among the sorted keys -> 0.4.21 (0.4.3 when it prints its defaults); untyped
    literals -> 0.4.35; custom calls with their thunks -> 0.6.0; jit's old name -> 0.6.2
    (0.4.35 when names are not suggested cannot be told apart, but then the output is the
    same); parameters only 0.7.2 printed, one 0.10.1 added missing (ragged_dot_general's
    `out_sharding`), real addresses, or a large nested jaxpr printed inline -> 0.7.2; a parameter 0.12.1 added (gather's `out_sharding`) -> 0.12.1; a
    0.12-only primitive or parameter (`one_minus_square`, new_ref's `pin`) -> 0.12.1, or
    0.12.0.1 where a form 0.12.1 no longer prints (gather without `out_sharding`) says so; a form only 0.10 and older printed (scan's `num_consts`) -> 0.10.2; a form
    0.11 and 0.12 print (scan's `ft_in`, top_k's `is_stable`, `unstack`) with one 0.10 and
    0.11 print (reduce_max without `out_sharding`) -> 0.11.0; one of these alone: the
    installed JAX's style where it is one of the two versions that print it so, else the
    older (0.10/0.11 forms) or newer (0.11/0.12 forms) one; otherwise `unmarked_style()`
    (0.10.2, 0.11 and 0.12 print such a text alike; what the tool adds to it, e.g. tanh's
    derivative `one_minus_square`, follows the installed JAX; 0.12.0.1 for an installed
    0.12.1 where a form 0.12.1 no longer prints says so).  Each primitive's clues are its
    record's (`version_clues`, `first_version`, `params_since`).
    """
    eqns, jaxprs, shared, large_inline = _walk(jaxpr)
    clues: set[str] = set()
    real_addr = suggested = fresh = False
    by_prim: dict[str, tuple] = {}  # primitive -> what its record says (asked once)
    literal = core.Literal
    untyped = False  # (CLUE_0_4_35 found: the operands need no more looking at)
    for e in eqns:
        facts = by_prim.get(e.prim)
        if facts is None:
            facts = by_prim[e.prim] = _record_facts(e.prim)
        version_clues, suggest_names, first_clue = facts
        if e.bare_eq:
            clues.add(CLUE_BEFORE_0_4_22)
        if version_clues is not None:
            clues |= version_clues(e)
        if first_clue is not None:
            clues.add(first_clue)
        if not untyped:
            for a in e.inputs:
                if a.__class__ is literal and not a.typed:
                    untyped = True  # untyped literals
                    break
        if not e.params:
            continue  # (the clues below are in parameters)
        inner = e.params.get(suggest_names) if suggest_names else None
        if isinstance(inner, core.Jaxpr) and len(inner.invars) == len(e.inputs):
            if id(inner) not in shared:
                for a, b in zip(e.inputs, inner.invars):
                    if isinstance(a, core.Var) and a.hint:
                        if a.hint == b.hint:
                            suggested = True
                        else:
                            fresh = True
        if not real_addr:
            for v in e.params.values():
                if v.__class__ in _NO_ADDRESS:
                    continue
                if isinstance(v, (Opaque, Record, str)) and _REAL_ADDR.search(format_value(v)):
                    real_addr = True
                    break
    if untyped or any(isinstance(a, literal) and not a.typed for j in jaxprs for a in j.outvars):
        clues.add(CLUE_0_4_35)
    if real_addr:
        clues.add(CLUE_0_7_2)
    if CLUE_0_7_2 not in clues and large_inline:
        # 0.10+ hoists nested jaxprs with > 10 equations and prints them first, so the
        # main jaxpr's first binder is not `a`; printed inline it is (0.7.2)
        first = (jaxpr.constvars + jaxpr.invars)[:1]
        if first and first[0].hint == "a":
            clues.add(CLUE_0_7_2)
    return _style_of_clues(clues, suggested, fresh)


def _walk(top: core.Jaxpr) -> tuple[list, list, set[int], bool]:
    """What `detect_style` reads of the program in one walk: every equation (nested ones
    included, each jaxpr once), every jaxpr, the ids of the jaxprs referenced more than once
    (printed hoisted, no names), and whether a parameter is a jaxpr of more than 10
    equations."""
    eqns: list = []
    jaxprs: list = []
    seen: set[int] = set()
    shared: set[int] = set()
    visited: set[int] = set()
    large_inline = False
    stack = [top]
    while stack:
        j = stack.pop()
        if id(j) in visited:
            continue
        visited.add(id(j))
        jaxprs.append(j)
        eqns.extend(j.eqns)
        for e in j.eqns:
            if e.no_subjaxprs:
                continue
            subs = core.eqn_subjaxprs(e)
            for sub in subs:
                (shared if id(sub) in seen else seen).add(id(sub))
            stack.extend(subs)
            if subs and not large_inline:  # a jaxpr parameter of more than 10 equations
                large_inline = any(
                    isinstance(v, core.Jaxpr) and len(v.eqns) > 10 for v in e.params.values()
                )
    return eqns, jaxprs, shared, large_inline


def _style_of_clues(clues: set[str], suggested: bool, fresh: bool) -> Style:
    """The style the clues `detect_style` found say, oldest first (see there); `suggested`
    and `fresh`: an inner jaxpr took the outer operands' names, or names of its own."""
    if CLUE_BEFORE_0_4_4 in clues:
        return Style((0, 4, 3))
    if CLUE_BEFORE_0_4_22 in clues:
        return Style((0, 4, 21))
    if CLUE_0_4_35 in clues:
        return Style((0, 4, 35))
    if CLUE_BEFORE_0_6_1 in clues:
        return Style((0, 6, 0))
    if CLUE_OLD_CALL_NAME in clues:
        # 0.4.35 never gave an inner jaxpr the names of the outer operands
        return Style((0, 4, 35)) if fresh and not suggested else Style((0, 6, 2))
    if CLUE_0_7_2 in clues or CLUE_BEFORE_0_10_1 in clues:
        return Style((0, 7, 2))
    if CLUE_0_12_1 in clues:
        return DEFAULT_STYLE
    twelve = (STYLE_0_12_0,) if CLUE_BEFORE_0_12_1 in clues else (DEFAULT_STYLE, STYLE_0_12_0)
    if CLUE_0_12 in clues:
        return _installed_among(*twelve)
    if CLUE_BEFORE_0_11 in clues:
        return STYLE_0_10
    if CLUE_0_11 in clues:  # 0.11 or 0.12
        return STYLE_0_11 if CLUE_0_10 in clues else _installed_among(STYLE_0_11, *twelve)
    if CLUE_0_10 in clues:  # 0.10 or 0.11
        return _installed_among(STYLE_0_10, STYLE_0_11)
    mine = unmarked_style()
    return STYLE_0_12_0 if mine == DEFAULT_STYLE and CLUE_BEFORE_0_12_1 in clues else mine


def _installed_among(*styles: Style) -> Style:
    """Of `styles` (which print the text alike), the installed JAX's, else the first."""
    mine = unmarked_style()
    return mine if mine in styles else styles[0]


_DIGITS = LazyPattern(r"\d+")
#: the runs of separators a distribution's name normalises to one `_` (its dist-info folder)
_NAME_SEPARATORS = LazyPattern(r"[-_.]+")


@functools.cache
def unmarked_style() -> Style:
    """The style of a text that no version-only form marks (0.10, 0.11 and 0.12 print it
    alike): the installed JAX's (read from its package metadata: no jax import), else the
    newest.  `--jax-style` chooses another."""
    found = installed_version("jax")
    if found is None:
        return DEFAULT_STYLE
    installed = tuple(int(p) for p in _DIGITS.findall(found)[:4])
    if (0, 10) <= installed < (0, 11):
        return STYLE_0_10
    if (0, 11) <= installed < (0, 12):
        return STYLE_0_11
    if (0, 12) <= installed < (0, 12, 1):
        return STYLE_0_12_0
    return DEFAULT_STYLE


def installed_version(dist: str) -> str | None:
    """The installed version of the distribution `dist`, None when it is not installed.

    Read from the name of its `DIST-VERSION.dist-info` folder, on the first `sys.path` entry
    that has one (where `importlib.metadata` finds it), without importing
    `importlib.metadata` (~0.02 s CPU, a tenth of a command's start-up); asked only where no
    such folder is (an `.egg-info`, a zip)."""
    import os
    import sys

    want = _NAME_SEPARATORS.sub("_", dist).lower()
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for name in names:
            stem, dash, rest = name.partition("-")
            if (
                dash
                and rest.endswith(".dist-info")
                and _NAME_SEPARATORS.sub("_", stem).lower() == want
            ):
                return rest[: -len(".dist-info")]
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def walk_jaxprs(top: core.Jaxpr, subjaxprs):
    """Each jaxpr reachable from `top` once (depth-first, by identity); `subjaxprs(eqn)`
    names the jaxprs inside an equation."""
    seen: set[int] = set()
    stack = [top]
    while stack:
        j = stack.pop()
        if id(j) in seen:
            continue
        seen.add(id(j))
        yield j
        for e in j.eqns:
            stack.extend(subjaxprs(e))
