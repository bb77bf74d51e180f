"""Printing styles: which JAX version's `str(jaxpr)` the printer imitates.

A `Style` is a frozen dataclass holding the JAX version tuple; every switch the
printer (and code that builds equations, e.g. AD) needs is a derived property:

* `call_prim`: `pjit` (0.4.35, 0.6.2) or `jit` (0.7.2 and later);
* `typed_literals`: `1.0:f32[]` (0.6.2+) vs `1.0` (0.4.35);
* `suggest_names`: inner jit names copied from the outer equation (0.6.2+);
* `hoist_large`: nested jaxprs with more than 10 equations are hoisted (0.10+);
* `broadcast_shape_param`: `broadcast_in_dim` prints `shape=`/`sharding=` (<= 0.7.2);
* `scan_ft`: scan params `ft_in`/`ft_out` (0.12) vs `num_consts`/`num_carry` (< 0.12);
* `mask_addresses`: ` at 0x...` printed as `0xXXXXXXXXXXXX` (0.10+);
* `eq_without_outputs`: an equation without results printed as ` = prim ...` (< 0.4.22,
  before jax-ml/jax#18845);
* `jit_name_first`: `pjit[name=... ...]` (0.4.22+, jax-ml/jax#18862) vs sorted keys;
* `jit_hides_defaults`: pjit's print rule hides default parameters (0.4.4+, jax-ml/jax#14384);
* `custom_call_rule`: custom_jvp_call / custom_vjp_call print `name=` first and hide their
  thunks (0.6.1+, jax-ml/jax#28608, #28715); before, every parameter sorted.

`detect_style(jaxpr)` guesses the style of a parsed program; `scan_params` and
`scan_counts` build and read scan parameters in either encoding.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

from .. import core
from ..params import Opaque, Record, format_value

_REAL_ADDR = re.compile(r" at 0x(?!X+\b)[0-9a-fA-F]+")
_NEW_IN_0_12 = frozenset({"eval_jaxpr", "one_minus_square", "polynomial", "unstack"})
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
    (0, 12, 0, 1),
)


@dataclass(frozen=True)
class Style:
    version: tuple[int, ...] = (0, 12, 0, 1)

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
    def call_prim(self) -> str:
        return "pjit" if self.version < (0, 7) else "jit"

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


DEFAULT_STYLE = Style((0, 12, 0, 1))
STYLE_0_10 = Style((0, 10, 2))


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


def detect_style(jaxpr: core.Jaxpr) -> Style:
    """Guess the JAX version whose printing a parsed program follows.

    A result-less equation printed ` = prim`, or `pjit` with `name=` among the sorted keys
    -> 0.4.21 (0.4.3 when pjit prints its defaults); untyped literals -> 0.4.35;
    custom_jvp_call / custom_vjp_call with their thunks -> 0.6.0; `pjit` -> 0.6.2 (0.4.35 when names are not
    suggested cannot be told apart, but then the output is the same); scan with
    `ft_in` or a 0.12-only primitive -> 0.12; `broadcast_in_dim[shape=...]`,
    scan `_split_transpose`, `MemRef` types -> 0.7.2; scan's `num_consts`, reduce_max or
    reduce_min without `out_sharding` -> 0.10.2; otherwise `unmarked_style()` (0.10.2 and
    0.12 print such a text alike; what the tool adds to it, e.g. tanh's derivative
    `one_minus_square`, follows the installed JAX).
    """
    pjit = untyped = old_bcast = ft = old_scan = real_addr = suggested = fresh = False
    before_0_11 = False
    before_0_4_4 = before_0_4_22 = before_0_6_1 = False
    seen: set[int] = set()
    shared: set[int] = (
        set()
    )  # jaxprs referenced more than once: printed hoisted, no name suggestion
    for e in core.all_eqns(jaxpr):
        for sub in core.eqn_subjaxprs(e):
            (shared if id(sub) in seen else seen).add(id(sub))
    for e in core.all_eqns(jaxpr):
        p = e.prim
        if e.bare_eq:
            before_0_4_22 = True
        if p == "pjit":
            pjit = True
            keys = list(e.params)
            if "name" in keys and keys[0] != "name" and min(keys) != "name":
                before_0_4_22 = True  # `name=` among the sorted keys (jax-ml/jax#18862)
            if _jit_default_printed(e.params):
                before_0_4_4 = True  # no pjit print rule yet (jax-ml/jax#14384)
            inner = e.params.get("jaxpr")
            if (
                isinstance(inner, core.Jaxpr)
                and len(inner.invars) == len(e.inputs)
                and id(inner) not in shared
            ):
                for a, b in zip(e.inputs, inner.invars):
                    if isinstance(a, core.Var) and a.hint:
                        if a.hint == b.hint:
                            suggested = True
                        else:
                            fresh = True
        elif p == "scan":
            if "ft_in" in e.params or "ft_out" in e.params:
                ft = True
            elif "num_consts" in e.params:
                before_0_11 = True  # the counts encoding (0.11 printed flat trees)
            if "_split_transpose" in e.params:
                old_scan = True
        elif p in ("reduce_max", "reduce_min") and "out_sharding" not in e.params:
            before_0_11 = True
        elif (p == "broadcast_in_dim" and "shape" in e.params) or (p == "reshard" and e.params):
            old_bcast = True
        elif (p == "custom_lin" and "out_avals" in e.params) or (
            p == "custom_jvp_call" and "jvp_jaxpr_thunk" in e.params
        ):
            untyped = True  # only 0.4.35 printed these
        elif (p == "custom_vjp_call" and {"out_trees", "fwd_jaxpr_thunk"} & e.params.keys()) or (
            p == "custom_jvp_call" and "jvp_jaxpr_fun" in e.params
        ):
            before_0_6_1 = True  # no print rule yet (jax-ml/jax#28608, #28715)
        elif (
            p in _NEW_IN_0_12
            or (p == "top_k" and "is_stable" in e.params)
            or (p == "new_ref" and "pin" in e.params)
        ):
            ft = True
        elif p[:1].isupper():  # 0.12 HiPrims: CustomRoot[...], SearchSorted[...]
            ft = True
        if not real_addr:
            for v in e.params.values():
                if isinstance(v, (Opaque, Record, str)) and _REAL_ADDR.search(format_value(v)):
                    real_addr = True
                    break
        if not untyped:
            for a in e.inputs:
                if isinstance(a, core.Literal) and not a.typed:
                    untyped = True
                    break
    if not untyped:
        untyped = any(isinstance(a, core.Literal) and not a.typed for a in _all_outvars(jaxpr))
    if before_0_4_4:
        return Style((0, 4, 3))
    if before_0_4_22:
        return Style((0, 4, 21))
    if untyped:
        return Style((0, 4, 35))
    if before_0_6_1:
        return Style((0, 6, 0))
    if pjit:
        # 0.4.35 never gave an inner jaxpr the names of the outer operands
        return Style((0, 4, 35)) if fresh and not suggested else Style((0, 6, 2))
    if not old_bcast and any(
        len(e.params[k].eqns) > 10
        for e in core.all_eqns(jaxpr)
        for k in e.params
        if isinstance(e.params[k], core.Jaxpr)
    ):
        # 0.10+ hoists nested jaxprs with > 10 equations and prints them first, so the
        # main jaxpr's first binder is not `a`; printed inline it is (0.7.2)
        first = (jaxpr.constvars + jaxpr.invars)[:1]
        if first and first[0].hint == "a":
            old_bcast = True
    if old_bcast or old_scan or real_addr:
        return Style((0, 7, 2))
    if ft:
        return DEFAULT_STYLE
    if before_0_11:
        return STYLE_0_10
    return unmarked_style()


@functools.cache
def unmarked_style() -> Style:
    """The style of a text that no 0.10-only or 0.12-only form marks (the two print it
    alike): the installed JAX's (read from its package metadata: no jax import), else the
    newest.  `--jax-style` chooses another."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        installed = tuple(int(p) for p in re.findall(r"\d+", version("jax"))[:4])
    except (PackageNotFoundError, ValueError):
        return DEFAULT_STYLE
    return STYLE_0_10 if (0, 10) <= installed < (0, 12) else DEFAULT_STYLE


def _jit_default_printed(params: dict) -> bool:
    """A pjit parameter printed with the value that pjit's print rule (JAX 0.4.4+) hides."""
    donated = params.get("donated_invars")
    if isinstance(donated, tuple) and donated and not any(donated):
        return True
    return params.get("inline") is False or "in_positional_semantics" in params


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


def _all_outvars(jaxpr: core.Jaxpr):
    for j in walk_jaxprs(jaxpr, core.eqn_subjaxprs):
        yield from j.outvars
