"""`scan` (JAX's `lax.scan`): a loop over the leading axis of its scanned operands.

The operands are grouped consts / carry / xs and the results carry / ys, in one of two
encodings: `num_consts`/`num_carry` (with `linear`, and `_split_transpose` in 0.7.2) up to JAX
0.10, or 0.12's flat trees `ft_in`/`ft_out` (the repr of a `jax._src.flattree.FlatTree`).  `FT`
models a flat tree (`parse_ft` reads one, `ft_param` writes one) and `ScanParams` decodes a
scan's parameters once: the shape rule, the AD rules, DCE and the evaluator all read it, and
derived scans are written by `ScanParams.to_params` in the encoding of the input.

AD (mirrors jax/_src/lax/control_flow/loops.py): carry tangents by fixed point.  Linearized
(`linearization`), per-iteration residuals are stacked as extra ys of the primal scan;
loop-invariant ones are hoisted out and passed as consts, inputs forwarded.  Transpose: a scan
in the opposite direction whose carries are the cotangents of the carries and of the linear
consts; the cotangents of linear xs are its ys.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ad import builder as B
from ..ad.jvp import jvp_masked
from ..ad.linearize import linearize_masked
from ..ad.ops import add_tangents, instantiate
from ..ad.remat import feed_results
from ..ad.transpose import backward_pass, transposed_inputs
from ..ad.zeros import (
    Zero,
    carries_tangent,
    is_undefined_primal,
    is_zero,
    tangent_type,
    writes_tangent_ref,
    zero_tangents,
)
from ..core import Jaxpr, JaxprError, Literal, ShapedArray, Var
from ..lazy import lazy_module
from ..params import Opaque, format_value
from ..record import define, prim
from ..shapes import ShapeError, shape_rule
from ..shapes.util import arr, dim_eq, dim_param, int_param, jaxpr_param, types_agree
from ..text import style as ST

#: the vmap machinery, executed when a batching rule first runs
BT = lazy_module("jaxprtool.ad.batching")

# ---------------------------------------------------------------- flat trees (0.12's ft_in / ft_out)
#
# JAX 0.12 prints scan's `ft_in`/`ft_out` as the repr of a `jax._src.flattree.FlatTree`:
#   tuple        -> Python tuple repr of the children: `()`, `(x,)`, `(x, y)`
#   singleton    -> repr of its value: `None`, or an Either `Right(v)` / `Left(v)`
#   filtered     -> `RightsOnly(tree)`; the leaves of tree are Eithers, only Rights count
#   pytree       -> `Pytree(vals=[None, None], tree=PyTreeDef(...))`
#   static       -> `Static(...)` (no leaves)
# We model the same structure so that derived scans print what JAX prints.


class _Either:
    __slots__ = ("right", "val")

    def __init__(self, right: bool, val):
        self.right = right
        self.val = val

    def __repr__(self):
        return f"{'Right' if self.right else 'Left'}({self.val!r})"


class FT:
    """A FlatTree: kind in {'tup', 'single', 'filt', 'pytree', 'static'}."""

    __slots__ = ("kind", "elts", "val", "treedef")

    def __init__(self, kind, elts=(), val=None, treedef=None):
        self.kind = kind
        self.elts = tuple(elts)
        self.val = val
        self.treedef = treedef

    # ---- constructors
    @staticmethod
    def tup(*elts):
        return FT("tup", elts)

    @staticmethod
    def nones(n):
        return FT.tup(*(FT("single", val=None) for _ in range(n)))

    # ---- leaves
    def leaves(self) -> list:
        k = self.kind
        if k == "tup":
            return [x for e in self.elts for x in e.leaves()]
        if k == "single":
            return [self.val]
        if k == "filt":
            return [e.val for e in self.elts[0].leaves() if e.right]
        if k == "pytree":
            return list(self.val)
        return []

    def __len__(self):
        return len(self.leaves())

    def map(self, f) -> FT:
        k = self.kind
        if k == "tup":
            return FT("tup", [e.map(f) for e in self.elts])
        if k == "single":
            return FT("single", val=f(self.val))
        if k == "filt":
            return FT(
                "filt", [self.elts[0].map(lambda e: _Either(True, f(e.val)) if e.right else e)]
            )
        if k == "pytree":
            return FT("pytree", val=tuple(f(v) for v in self.val), treedef=self.treedef)
        return self

    def update(self, vals) -> FT:
        vals = list(vals)
        assert len(vals) == len(self), (len(vals), len(self), self)
        it = iter(vals)
        return self.map(lambda _: next(it))

    def void(self) -> FT:
        return self.map(lambda _: None)

    def unpack(self) -> tuple[FT, ...]:
        k = self.kind
        if k == "tup":
            return self.elts
        if k == "filt":
            return tuple(FT("filt", [c]) for c in self.elts[0].unpack())
        if k == "pytree":
            children = _treedef_children(self.treedef)
            out, i = [], 0
            for c in children:
                n = c.count("*")
                out.append(FT("pytree", val=self.val[i : i + n], treedef=f"PyTreeDef({c})"))
                i += n
            return tuple(out)
        raise ValueError(f"not a tuple: {self!r}")

    def filter_with_mask(self, mask) -> FT:
        mask = list(mask)
        it = iter(mask)
        tagged = self.map(lambda x: _Either(bool(next(it)), x))

        def wrap(t):
            if t.kind == "tup":
                return FT("tup", [wrap(e) for e in t.elts])
            return FT("filt", [t])

        return wrap(tagged)

    def __repr__(self):
        k = self.kind
        if k == "tup":
            if len(self.elts) == 1:
                return f"({self.elts[0]!r},)"
            return "(" + ", ".join(repr(e) for e in self.elts) + ")"
        if k == "single":
            return repr(self.val)
        if k == "filt":
            return f"RightsOnly({self.elts[0]!r})"
        if k == "pytree":
            return f"Pytree(vals={list(self.val)!r}, tree={self.treedef})"
        return self.val


def ft_zipstar(t: FT) -> FT:
    """pack(tuple(zip(*t.unpack2())))."""
    groups = [g.unpack() for g in t.unpack()]
    return FT.tup(*(FT.tup(*col) for col in zip(*groups)))


def _treedef_children(treedef: str) -> list[str]:
    """Children of `PyTreeDef((A, B, C))` (a tuple node) as texts."""
    s = treedef.strip()
    assert s.startswith("PyTreeDef(") and s.endswith(")")
    inner = s[len("PyTreeDef(") : -1].strip()
    if not inner or inner[0] not in "([":
        raise ValueError(f"not a tuple treedef: {treedef}")
    body = inner[1:-1]
    parts, depth, cur = [], 0, ""
    for ch in body:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur.strip())
    return parts


class _FTParser:
    def __init__(self, text: str):
        self.s = text
        self.i = 0

    def ws(self):
        while self.i < len(self.s) and self.s[self.i].isspace():
            self.i += 1

    def peek(self, word):
        self.ws()
        return self.s.startswith(word, self.i)

    def expect(self, word):
        self.ws()
        if not self.s.startswith(word, self.i):
            raise ValueError(f"expected {word!r} at {self.i} in {self.s!r}")
        self.i += len(word)

    def balanced(self) -> str:
        """Text up to the matching close paren (the open one already consumed)."""
        depth, start = 1, self.i
        while depth:
            ch = self.s[self.i]
            if ch in "([{":
                depth += 1
            elif ch in ")]}":
                depth -= 1
            self.i += 1
        return self.s[start : self.i - 1]

    def items(self, item, close) -> list:
        """`item()`s separated by commas (a trailing one allowed) up to and through `close`."""
        out = []
        while not self.peek(close):
            out.append(item())
            if self.peek(","):
                self.expect(",")
        self.expect(close)
        return out

    def tree(self) -> FT:
        if self.peek("("):
            self.expect("(")
            return FT("tup", self.items(self.tree, ")"))
        if self.peek("RightsOnly("):
            self.expect("RightsOnly(")
            inner = self.tree()
            self.expect(")")
            return FT("filt", [inner])
        if self.peek("Pytree("):
            self.expect("Pytree(")
            self.expect("vals=[")
            vals = self.items(self.value, "]")
            self.expect(",")
            self.expect("tree=")
            self.ws()
            self.expect("PyTreeDef(")
            td = "PyTreeDef(" + self.balanced() + ")"
            self.expect(")")
            return FT("pytree", val=tuple(vals), treedef=td)
        if self.peek("Static("):
            self.expect("Static(")
            return FT("static", val="Static(" + self.balanced() + ")")
        return FT("single", val=self.value())

    def value(self):
        for name, right in (("Right(", True), ("Left(", False)):
            if self.peek(name):
                self.expect(name)
                v = self.value()
                self.expect(")")
                return _Either(right, v)
        self.expect("None")
        return None


def parse_ft(text: str) -> FT:
    p = _FTParser(text)
    t = p.tree()
    p.ws()
    if p.i != len(p.s):
        raise ValueError(f"trailing text in {text!r}")
    return t


def ft_param(t: FT):
    """A flat tree as a parameter value: what the parser would make of JAX's text."""
    text = repr(t)
    try:
        from ..text.values import parse_value

        v, end = parse_value(text, 0, top=True)
        if end == len(text) and format_value(v) == text:
            return v
    except Exception:  # noqa: BLE001 - fall back to a value printed verbatim
        pass
    return Opaque(text)


def _pytree_ft(groups) -> FT:
    """`ft.flatten(nested tuples of lists).void()`: groups is a nested tuple of list lengths."""

    def render(g):
        if isinstance(g, int):
            return "[" + ", ".join(["*"] * g) + "]"
        if len(g) == 1:
            return f"({render(g[0])},)"
        return "(" + ", ".join(render(x) for x in g) + ")"

    def total(g):
        return g if isinstance(g, int) else sum(total(x) for x in g)

    return FT("pytree", val=(None,) * total(groups), treedef=f"PyTreeDef({render(groups)})")


def _ft_of(value) -> FT:
    return parse_ft(value if isinstance(value, str) else format_value(value))


def ft_group_sizes(value) -> list[int] | None:
    """Leaf counts of each top-level group of an `ft_in`/`ft_out` parameter, or None."""
    try:
        return [len(g) for g in _ft_of(value).unpack()]
    except Exception:  # noqa: BLE001 - the encoding is informal; callers fall back
        return None


def _plain_ft(t: FT) -> bool:
    """Only tuples, leaves and filters (no `Pytree(...)`/`Static(...)` nodes)."""
    if t.kind == "tup":
        return all(_plain_ft(e) for e in t.elts)
    if t.kind == "filt":
        return _plain_ft(t.elts[0])
    return t.kind == "single"


# ---------------------------------------------------------------- the parameters, decoded once


@dataclass
class ScanParams:
    """A scan equation's parameters, decoded: operands `consts, carry, xs`, body results
    `carry, ys`.  `read` takes the encoding as written when it is readable (`exact`), else
    recovers the split from the operand types as the shape rule does; `to_params` writes a
    derived scan in the same encoding."""

    params: dict
    jaxpr: Jaxpr
    length: object
    reverse: bool
    num_consts: int
    num_carry: int
    #: the groups as flat trees (leaves None), built from the counts for the counts encoding
    ft_in: FT
    ft_out: FT
    #: per operand (all False when the encoding has none)
    linear: list[bool]
    #: the equation uses the flat-tree encoding
    ft: bool
    #: the split is the one written in the parameters (not recovered from the types)
    exact: bool

    @property
    def num_xs(self) -> int:
        return len(self.jaxpr.invars) - self.num_consts - self.num_carry

    @property
    def num_ys(self) -> int:
        return len(self.jaxpr.outvars) - self.num_carry

    @classmethod
    def from_eqn(cls, e) -> ScanParams:
        return cls.read(e.params, [a.type for a in e.inputs], [o.type for o in e.outputs])

    @classmethod
    def read(cls, params: dict, in_types, out_hint=None) -> ScanParams:
        """Raises `ShapeError` when the body or the length is missing or the operands cannot
        be split into consts, carry and xs."""
        j = jaxpr_param(params, "jaxpr")
        length = params.get("length")
        length = int(length) if length is not None and not isinstance(length, str) else length
        if length is None:
            raise ShapeError("scan: missing parameter 'length'")
        n, n_out = len(in_types), len(j.outvars)
        if len(j.invars) != n:
            raise ShapeError(
                f"scan: jaxpr takes {len(j.invars)} inputs, but the equation passes {n}"
            )
        ft = "ft_in" in params or "ft_out" in params
        exact, ft_in, ft_out = True, None, None
        if "num_consts" in params and "num_carry" in params:
            nc, nk = int_param(params, "num_consts"), int_param(params, "num_carry")
        else:
            try:
                ft_in, ft_out = _ft_of(params["ft_in"]).void(), _ft_of(params["ft_out"]).void()
                g_in = [len(g) for g in ft_in.unpack()]
                g_out = [len(g) for g in ft_out.unpack()]
                if len(g_in) != 3 or len(g_out) != 2 or sum(g_in) != n or sum(g_out) != n_out:
                    raise ValueError
                nc, nk = g_in[0], g_in[1]
            except Exception:  # noqa: BLE001 - unmodelled encoding: recover the split
                exact, ft_in, ft_out = False, None, None
                nc, nk = _split_from_types(in_types, j, length, params, out_hint)
        if ft_in is None:
            ft_in = FT.tup(FT.nones(nc), FT.nones(nk), FT.nones(n - nc - nk))
            ft_out = FT.tup(FT.nones(nk), FT.nones(n_out - nk))
        lin = params.get("linear")
        linear = (
            [bool(x) for x in lin]
            if isinstance(lin, (tuple, list)) and len(lin) == n
            else [False] * n
        )
        reverse = bool(params.get("reverse", False))
        return cls(params, j, length, reverse, nc, nk, ft_in, ft_out, linear, ft, exact)

    def split(self, xs) -> tuple[list, list, list]:
        """(consts, carry, xs) of a list with one entry per operand."""
        nc, nk = self.num_consts, self.num_carry
        return list(xs[:nc]), list(xs[nc : nc + nk]), list(xs[nc + nk :])

    def to_params(self, **changes) -> dict:
        """The parameters of a derived scan: each of `jaxpr`, `reverse`, `ft_in`/`ft_out` (FT),
        `num_consts`/`num_carry` (ints) and `linear` that is given replaces the equation's
        parameter of that name when the equation has one; the other parameters are kept."""
        p = {}
        for k, v in self.params.items():
            if k in changes:
                v = changes[k]
                if k in ("ft_in", "ft_out"):
                    v = ft_param(v)
                elif k in ("num_consts", "num_carry"):
                    v = _like(self.params[k], v)
                elif k == "linear":
                    v = tuple(bool(x) for x in v)
            p[k] = v
        return p


def _like(old, n: int):
    """n in the representation of `old` (an int, or a numpy-scalar param value)."""
    if isinstance(old, int):
        return n
    try:
        return type(old)(old.dtype, n)
    except Exception:  # noqa: BLE001
        return n


def _split_from_types(in_types, j: Jaxpr, length, params, out_hint):
    """(num_consts, num_carry) when the encoding is not readable as a whole: the `ft_in`
    groups when they add up, else the split the types allow (carries are invars whose type
    the body returns at the same position), preferring the `ft_out` carry count and the
    declared result types."""
    n = len(in_types)
    g = ft_group_sizes(params["ft_in"]) if "ft_in" in params else None
    if g is not None and len(g) == 3 and sum(g) == n:
        return g[0], g[1]
    go = ft_group_sizes(params["ft_out"]) if "ft_out" in params else None
    inv, outv = j.in_types, j.out_types
    cands = []
    for c in range(n + 1):
        for k in range(0, min(n - c, len(outv)) + 1):
            if not all(types_agree(in_types[i], inv[i]) for i in range(c + k)):
                continue
            if not all(types_agree(outv[i], inv[c + i]) for i in range(k)):
                continue
            ok = True
            for i in range(c + k, n):
                t, v = in_types[i], inv[i]
                if not (
                    isinstance(t, ShapedArray)
                    and isinstance(v, ShapedArray)
                    and t.ndim == v.ndim + 1
                    and dim_eq(t.shape[0], length)
                    and types_agree(t.update(shape=t.shape[1:]), v)
                ):
                    ok = False
                    break
            if ok:
                cands.append((c, k))
    if go is not None and len(go) == 2:
        m = [ck for ck in cands if ck[1] == go[0]]
        if m:
            return m[0]
    if out_hint is not None:
        for c, k in cands:
            if _scan_outs(outv, k, length) is not None and all(
                types_agree(a, b) for a, b in zip(_scan_outs(outv, k, length), out_hint)
            ):
                return c, k
    if cands:
        return cands[0]
    raise ShapeError(
        "scan: operands do not match the body jaxpr (cannot split them into consts, carry and xs)"
    )


def _scan_outs(outv, k, length):
    res = list(outv[:k])
    for t in outv[k:]:
        if not isinstance(t, ShapedArray):
            return None
        res.append(t.update(shape=(length, *t.shape)))
    return res


# ---------------------------------------------------------------- shape


@shape_rule("scan")
def _scan_shape(in_types, params, out_hint):
    sp = ScanParams.read(params, in_types, out_hint)
    j, length, n = sp.jaxpr, sp.length, len(in_types)
    c, k = sp.num_consts, sp.num_carry
    if c < 0 or k < 0 or c + k > n:
        raise ShapeError(f"scan: num_consts={c} and num_carry={k} do not fit {n} operands")
    inv = j.in_types
    for i in range(c + k):
        if not types_agree(in_types[i], inv[i]):
            what = "const" if i < c else "carry"
            raise ShapeError(
                f"scan: operand {i} ({what}) has type {in_types[i]}, but jaxpr expects {inv[i]}"
            )
    for i in range(c + k, n):
        t = arr(in_types[i], "scan", i)
        v = inv[i]
        if (
            t.ndim == 0
            or not dim_eq(t.shape[0], length)
            or not types_agree(t.update(shape=t.shape[1:]), v)
        ):
            raise ShapeError(
                f"scan: operand {i} (xs) has type {t}, but jaxpr expects {v} with a leading axis of {length}"
            )
    outv = j.out_types
    if len(outv) < k:
        raise ShapeError(
            f"scan: jaxpr returns {len(outv)} results, fewer than the {k} carried values"
        )
    for i in range(k):
        if not types_agree(outv[i], inv[c + i]):
            raise ShapeError(
                f"scan: jaxpr result {i} has type {outv[i]}, but the carry has type {inv[c + i]}"
            )
    res = _scan_outs(outv, k, length)
    if res is None:
        raise ShapeError("scan: a stacked result is not an array")
    return res


# ---------------------------------------------------------------- JVP, linearization, transpose


def _read(params, operands) -> ScanParams:
    try:
        return ScanParams.read(params, [a.type for a in operands])
    except ShapeError as e:
        raise JaxprError(str(e), B.current().loc) from None


def _stacked(t, length):
    return t.update(shape=(length, *t.shape)) if isinstance(t, ShapedArray) else t


def _scan_out_types(body: Jaxpr, n_carry: int, length) -> list:
    ts = [o.type for o in body.outvars]
    return ts[:n_carry] + [_stacked(t, length) for t in ts[n_carry:]]


def _scan_fixed_point(enc: ScanParams, tangents):
    """The tangent masks at the carries' fixed point (a carry tangent is nonzero when its
    init's is or when the body makes it so): (input mask, output mask, the body's JVP)."""
    body, nc, nk, ny = enc.jaxpr, enc.num_consts, enc.num_carry, enc.num_ys
    nz = [not is_zero(t) and carries_tangent(v.type) for v, t in zip(body.invars, tangents)]
    const_nz, init_nz, xs_nz = nz[:nc], nz[nc : nc + nk], nz[nc + nk :]
    carry_nz = list(init_nz)
    out_nz: list[bool] = []
    jv = None
    if any(nz):
        for _ in range(nk + 1):
            jv, out_nz = jvp_masked(
                body, const_nz + carry_nz + xs_nz, instantiate=carry_nz + [False] * ny
            )
            if out_nz[:nk] == carry_nz:
                break  # `jv` is the body's JVP at the fixed point
            carry_nz = [x or y for x, y in zip(carry_nz, out_nz[:nk])]
        else:
            jv, out_nz = jvp_masked(
                body, const_nz + carry_nz + xs_nz, instantiate=carry_nz + [False] * ny
            )
    return const_nz + carry_nz + xs_nz, out_nz, jv


def _scan_jvp(primals, tangents, **params):
    b = B.current()
    enc = _read(params, primals)
    body, length, reverse = enc.jaxpr, enc.length, enc.reverse
    nc, nk, ny = enc.num_consts, enc.num_carry, enc.num_ys
    nzs, out_nz, jv = _scan_fixed_point(enc, tangents)
    out_types = _scan_out_types(body, nk, length)
    if not any(out_nz) and not writes_tangent_ref(body.invars, nzs):
        return b.emit("scan", primals, params, out_types), zero_tangents(out_types)
    const_nz, carry_nz, xs_nz = nzs[:nc], nzs[nc : nc + nk], nzs[nc + nk :]
    n = len(primals)
    tans = [instantiate(t) if m else None for t, m in zip(tangents, nzs)]
    tans = [t for t in tans if t is not None]
    P, T = list(jv.invars[:n]), list(jv.invars[n:])
    s1, s2 = sum(const_nz), sum(const_nz) + sum(carry_nz)
    invars = P[:nc] + T[:s1] + P[nc : nc + nk] + T[s1:s2] + P[nc + nk :] + T[s2:]
    operands = list(primals[:nc]) + tans[:s1] + list(primals[nc : nc + nk]) + tans[s1:s2]
    operands += list(primals[nc + nk :]) + tans[s2:]
    O, TO = list(jv.outvars[: nk + ny]), list(jv.outvars[nk + ny :])
    nkt = sum(carry_nz)
    outvars = O[:nk] + TO[:nkt] + O[nk:] + TO[nkt:]
    jv = jv.replace(invars=invars, outvars=outvars)
    ft_in = ft_zipstar(FT.tup(enc.ft_in, enc.ft_in.filter_with_mask(nzs))).void()
    ft_out = ft_zipstar(FT.tup(enc.ft_out, enc.ft_out.filter_with_mask(out_nz))).void()
    lin = enc.linear
    linear = (
        lin[:nc]
        + [True] * s1
        + lin[nc : nc + nk]
        + [True] * nkt
        + lin[nc + nk :]
        + [True] * sum(xs_nz)
    )
    p = enc.to_params(
        jaxpr=jv,
        reverse=reverse,
        ft_in=ft_in,
        ft_out=ft_out,
        num_consts=nc + s1,
        num_carry=nk + nkt,
        linear=linear,
    )
    outs = b.emit("scan", operands, p, _scan_out_types(jv, nk + nkt, length))
    carry, carry_t, ys, ys_t = (
        outs[:nk],
        outs[nk : nk + nkt],
        outs[nk + nkt : nk + nkt + ny],
        outs[nk + nkt + ny :],
    )
    prim_outs = carry + ys
    it = iter(carry_t + ys_t)
    return prim_outs, [next(it) if m else Zero(tangent_type(t)) for t, m in zip(out_types, out_nz)]


def _invariant_vars(j: Jaxpr, n_consts: int) -> set[int]:
    """Vars of `j` that depend only on its first `n_consts` inputs (loop invariants)."""
    inv = {id(v) for v in j.invars[:n_consts]}  # (constvars of a nested jaxpr cannot be hoisted)
    for e in j.eqns:
        if prim(e.prim).effectful or prim(e.prim).random:
            continue
        if all(isinstance(x, Literal) or id(x) in inv for x in e.inputs):
            inv.update(id(o) for o in e.outputs)
    return inv


def _scan_linearize(primals, tangents, **params):
    """The linearization: a primal scan (outputs and stacked residuals) and a linear scan."""
    enc = _read(params, primals)
    body, length = enc.jaxpr, enc.length
    nc, nk, ny = enc.num_consts, enc.num_carry, enc.num_ys
    nzs, out_nz, _ = _scan_fixed_point(enc, tangents)
    out_types = _scan_out_types(body, nk, length)
    if not any(out_nz) and not writes_tangent_ref(body.invars, nzs):
        return B.current().emit("scan", primals, params, out_types), zero_tangents(out_types)
    carry_nz = nzs[nc : nc + nk]
    pj, lj, out_nz2, nres = linearize_masked(
        body,
        nzs,
        instantiate=carry_nz + [False] * ny,
        rerun=True,
        copies=length if isinstance(length, int) else 1,
    )
    assert out_nz2 == out_nz
    inv = _invariant_vars(pj, nc)
    kinds = _residual_kinds(pj, inv, nc, nk, ny)
    prim_outs, stacked, hoisted = _primal_scan(enc, pj, inv, kinds, primals)
    # the linear scan: [intensive residuals, const tangents] [carry tangents] [xs tangents, extensive residuals]
    int_res, int_bind, ext_res, ext_bind = [], [], [], []
    for (kind, r), v in zip(kinds, lj.invars[:nres]):
        if kind == "int_fwd":
            int_res.append(primals[r])
            int_bind.append(v)
        elif kind == "hoist":
            int_res.append(hoisted[id(r)] if isinstance(r, Var) else r)
            int_bind.append(v)
        elif kind == "ext_fwd":
            ext_res.append(primals[r])
            ext_bind.append(v)
        elif kind == "ys_fwd":
            ext_res.append(prim_outs[r])
            ext_bind.append(v)
        else:
            ext_res.append(next(stacked))
            ext_bind.append(v)
    lbody = lj.replace(invars=int_bind + list(lj.invars[nres:]) + ext_bind)
    tans = [instantiate(t) for t, m in zip(tangents, nzs) if m]
    touts = _linear_scan(enc, lbody, nzs, out_nz, int_res, tans, ext_res)
    it = iter(touts)
    return prim_outs, [next(it) if m else Zero(tangent_type(t)) for t, m in zip(out_types, out_nz)]


def _residual_kinds(pj: Jaxpr, inv: set[int], nc, nk, ny) -> list[tuple[str, object]]:
    """How each residual of the linearized body `pj` reaches the linear scan: forwarded
    from a const ("int_fwd", index) or an xs input ("ext_fwd", index), a loop invariant
    (`inv`: `_invariant_vars`) or a literal hoisted out of the loop ("hoist", atom), a ys
    output already stacked ("ys_fwd", index), or stacked as a new output ("stack", var)."""
    res = list(pj.outvars[nk + ny :])
    in_pos = {id(v): i for i, v in enumerate(pj.invars)}
    ys_pos = {id(v): nk + k for k, v in enumerate(pj.outvars[nk : nk + ny]) if isinstance(v, Var)}
    kinds = []
    for r in res:
        i = in_pos.get(id(r)) if isinstance(r, Var) else None
        if i is not None and i < nc:
            kinds.append(("int_fwd", i))
        elif i is not None and i >= nc + nk:
            kinds.append(("ext_fwd", i))
        elif i is None and (isinstance(r, Literal) or id(r) in inv):
            kinds.append(("hoist", r))
        elif isinstance(r, Var) and id(r) in ys_pos:
            kinds.append(("ys_fwd", ys_pos[id(r)]))  # already stacked as a primal ys output
        else:
            kinds.append(("stack", r))
    return kinds


def _primal_scan(enc, pj: Jaxpr, inv: set[int], kinds, primals):
    """Emit the primal scan of the linearized body `pj`: (its carry and ys outputs, an
    iterator over its stacked residuals, the hoisted invariants by id of their body Var).

    The loop invariants are hoisted (as JAX's _scan_known_hoisting): the equations that
    depend only on the consts run once, outside the loop; the primal scan takes the values
    it still needs as consts, and invariant residuals enter the linear scan unstacked."""
    nc, nk, ny, length = enc.num_consts, enc.num_carry, enc.num_ys, enc.length
    stack = [r for k, r in kinds if k == "stack"]
    p_outvars = list(pj.outvars[: nk + ny]) + stack
    live = B.dce_eqns(
        list(pj.eqns), p_outvars + [r for k, r in kinds if k == "hoist" and isinstance(r, Var)]
    )
    inv_eqns = [e for e in live if all(id(o) in inv for o in e.outputs)]
    var_eqns = [e for e in live if not all(id(o) in inv for o in e.outputs)]
    m = {id(v): primals[i] for i, v in enumerate(pj.invars[:nc])}
    b = B.current()
    for e in inv_eqns:
        outs = b.emit(
            e.prim,
            [m.get(id(x), x) if isinstance(x, Var) else x for x in e.inputs],
            e.params,
            [o.type for o in e.outputs],
            [o.hint for o in e.outputs],
        )
        m.update({id(o): n for o, n in zip(e.outputs, outs)})
    hoisted = {id(r): m[id(r)] for k, r in kinds if k == "hoist" and isinstance(r, Var)}
    # the invariant values the loop still reads become its consts
    needed: list[Var] = []
    seen: set[int] = set()
    for x in [x for e in var_eqns for x in e.inputs] + p_outvars:
        if isinstance(x, Var) and id(x) in inv and id(x) not in seen:
            seen.add(id(x))
            needed.append(x)
    pbody = pj.replace(
        invars=needed + list(pj.invars[nc:]),
        eqns=B.dce_eqns(var_eqns, p_outvars),
        outvars=p_outvars,
    )
    p_consts = [m[id(v)] for v in needed]
    _, carry_g, xs_g = enc.ft_in.unpack()
    ys_g = enc.ft_out.unpack()[1]
    pp = enc.to_params(
        jaxpr=pbody,
        reverse=enc.reverse,
        ft_in=FT.tup(FT.nones(len(needed)), carry_g, xs_g),
        ft_out=FT.tup(carry_g, FT.tup(ys_g, FT.nones(len(stack)))),
        num_consts=len(needed),
        num_carry=nk,
        linear=[False] * len(needed) + enc.linear[nc:],
    )
    outs = b.emit("scan", p_consts + list(primals[nc:]), pp, _scan_out_types(pbody, nk, length))
    return outs[: nk + ny], iter(outs[nk + ny :]), hoisted


def _linear_scan(enc, lbody: Jaxpr, nzs, out_nz, int_res, tans, ext_res) -> list:
    """Emit the linear scan of `lbody` (into the tangent program) on the intensive residuals,
    the tangents and the extensive residuals; its outputs."""
    nc, nk = enc.num_consts, enc.num_carry
    nz_consts_g, nz_carry_g, nz_xs_g = enc.ft_in.filter_with_mask(nzs).unpack()
    ft_in = FT.tup(
        FT.tup(FT.nones(len(int_res)), nz_consts_g),
        nz_carry_g,
        FT.tup(nz_xs_g, FT.nones(len(ext_res))),
    )
    ft_out = enc.ft_out.filter_with_mask(out_nz)
    nkt = sum(nzs[nc : nc + nk])
    lin = [x for x, m in zip(enc.linear, nzs) if m]
    lp = enc.to_params(
        jaxpr=lbody,
        reverse=enc.reverse,
        ft_in=ft_in.void(),
        ft_out=ft_out.void(),
        num_consts=len(int_res) + sum(nzs[:nc]),
        num_carry=nkt,
        linear=[False] * len(int_res) + lin + [False] * len(ext_res),
    )
    b = B.current()
    with b.tangent_mode():
        return b.emit("scan", int_res + tans + ext_res, lp, _scan_out_types(lbody, nkt, enc.length))


def _scan_transpose(cts, *args, **params):
    from ..ad import ops
    from ..ad.transpose import linear_dependence

    enc = _read(params, args)
    body, length, reverse = enc.jaxpr, enc.length, enc.reverse
    nc, nk = enc.num_consts, enc.num_carry
    lin = [is_undefined_primal(a) for a in args]
    lc, lx = lin[:nc], lin[nc + nk :]
    # A carry is linear if its init is or if its update depends on linear values (fixed point);
    # a non-linear init of a linear carry is an instantiated zero (its cotangent is dropped).
    lk = lin[nc : nc + nk]
    while True:
        dep = linear_dependence(body, lc + lk + lx)[:nk]
        new = [a or d for a, d in zip(lk, dep)]
        if new == lk:
            break
        lk = new
    consts, init, xs = args[:nc], args[nc : nc + nk], args[nc + nk :]
    # a differentiated Ref const enters the transposed loop as its cotangent Ref
    ref_c = [m and a.ct_ref is not None for a, m in zip(consts, lc)]
    val_c = [m and not r for m, r in zip(lc, ref_c)]
    # Non-linear carries (loop counters...): a forward scan records their value at each iteration,
    # the transposed scan reads them as residual xs.
    nl_k = [i for i in range(nk) if not lk[i]]
    nl_stacked = []
    if nl_k:
        nl_stacked = _nonlinear_carry_scan(
            body, params, enc, lc, lk, lx, consts, init, xs, length, reverse
        )
    ct_carry = [instantiate(c) for c, m in zip(cts[:nk], lk) if m]
    ys_mask = [not is_zero(c) for c in cts[nk:]]
    ct_ys = [c for c in cts[nk:] if not is_zero(c)]
    res_c = [a.ct_ref if r else a for a, m, r in zip(consts, lc, ref_c) if r or not m]
    ct_c0 = [ops.zeros(tangent_type(a.type)) for a, v in zip(consts, val_c) if v]
    res_x = [a for a, m in zip(xs, lx) if not m] + nl_stacked
    tbody = _transpose_scan_body(body, nc, nk, lc, lk, lx, ys_mask, ref_c)
    n_acc, n_k = len(ct_c0), len(ct_carry)
    if enc.ft:
        ft_in = _pytree_ft(((len(res_c), 0), (n_acc, n_k), (0, len(ct_ys), len(res_x))))
        ft_out = FT.tup(_pytree_ft((n_acc, n_k)), FT.tup(_pytree_ft(sum(lx)), FT.nones(0)))
    else:
        ft_in = ft_out = None
    p = enc.to_params(
        jaxpr=tbody,
        reverse=not reverse,
        ft_in=ft_in,
        ft_out=ft_out,
        num_consts=len(res_c),
        num_carry=n_acc + n_k,
        linear=[False] * len(res_c) + [True] * (n_acc + n_k + len(ct_ys)) + [False] * len(res_x),
    )
    outs = B.current().emit(
        "scan",
        res_c + ct_c0 + ct_carry + ct_ys + res_x,
        p,
        _scan_out_types(tbody, n_acc + n_k, length),
    )
    it_c, it_k, it_x = (
        iter(outs[:n_acc]),
        iter(outs[n_acc : n_acc + n_k]),
        iter(outs[n_acc + n_k :]),
    )
    cts_k = [next(it_k) if m else None for m in lk]
    return (
        [next(it_c) if v else None for v in val_c]
        + [c if is_undefined_primal(a) else None for a, c in zip(init, cts_k)]
        + [next(it_x) if m else None for m in lx]
    )


def _nonlinear_carry_scan(body, params, enc, lc, lk, lx, consts, init, xs, length, reverse):
    """Run the non-linear carries forward; returns their stacked per-iteration values."""
    nc, nk = enc.num_consts, enc.num_carry
    j = B.clone_jaxpr(body)
    C, K, X = j.invars[:nc], j.invars[nc : nc + nk], j.invars[nc + nk :]
    nl_k = [i for i in range(nk) if not lk[i]]
    outvars = [j.outvars[i] for i in nl_k] + [K[i] for i in nl_k]
    c_keep = [not m for m in lc]
    x_keep = [not m for m in lx]
    invars = (
        [v for v, k in zip(C, c_keep) if k]
        + [K[i] for i in nl_k]
        + [v for v, k in zip(X, x_keep) if k]
    )
    eqns = B.dce_eqns(list(j.eqns), outvars)
    fj = j.replace(invars=invars, eqns=eqns, outvars=outvars)
    operands = (
        [a for a, k in zip(consts, c_keep) if k]
        + [init[i] for i in nl_k]
        + [a for a, k in zip(xs, x_keep) if k]
    )
    n_c, n_k, n_x = sum(c_keep), len(nl_k), sum(x_keep)
    ft_in = FT.tup(FT.nones(n_c), FT.nones(n_k), FT.nones(n_x))
    ft_out = FT.tup(FT.nones(n_k), FT.nones(n_k))
    lin = [x for x, k in zip(enc.linear, c_keep + [not m for m in lk] + x_keep) if k]
    p = enc.to_params(
        jaxpr=fj,
        reverse=reverse,
        ft_in=ft_in,
        ft_out=ft_out,
        num_consts=n_c,
        num_carry=n_k,
        linear=lin,
    )
    outs = B.current().emit("scan", operands, p, _scan_out_types(fj, n_k, length))
    return outs[n_k:]


def _transpose_scan_body(body: Jaxpr, nc, nk, lc, lk, lx, ys_mask, ref_c) -> Jaxpr:
    """`[res consts, ct Refs][ct accs, ct carry][nonzero ct ys, res xs, non-linear carries]
    -> [ct accs, ct carry][ct xs]` (`ref_c`: the differentiated Ref consts, whose cotangent
    Refs the body writes into)."""
    C, K, X = body.invars[:nc], body.invars[nc : nc + nk], body.invars[nc + nk :]
    Y = body.outvars[nk:]
    rc, c_args = transposed_inputs(C, lc, ref_c)
    acc = [Var(tangent_type(v.type), None) for v, m, r in zip(C, lc, ref_c) if m and not r]
    ctk = [Var(tangent_type(v.type), None) for v, m in zip(K, lk) if m]
    cty = [Var(tangent_type(y.type), None) for y, m in zip(Y, ys_mask) if m]
    rx = [B.fresh_like(v) for v, m in zip(X, lx) if not m]
    rk = [B.fresh_like(v) for v, m in zip(K, lk) if not m]
    irx, irk = iter(rx), iter(rk)
    args = c_args + [None if m else next(irk) for m in lk] + [None if m else next(irx) for m in lx]
    mask = list(lc) + list(lk) + list(lx)
    ictk, icty = iter(ctk), iter(cty)
    cts_out = [
        next(ictk) if m else Zero(tangent_type(v.type)) for v, m in zip(body.outvars[:nk], lk)
    ]
    cts_out += [next(icty) if m else Zero(tangent_type(y.type)) for y, m in zip(Y, ys_mask)]
    consts = [B.fresh_like(v) for v in body.constvars]
    bb = B.Builder(loc=B.current().loc)
    with B.use(bb):
        _, cts_in = backward_pass(body, mask, args, cts_out, consts)
        ct_c = [c for c, m, r in zip(cts_in[:nc], lc, ref_c) if m and not r]
        new_acc = [instantiate(add_tangents(a, c)) for a, c in zip(acc, ct_c)]
        ct_k = [instantiate(c) for c, m in zip(cts_in[nc : nc + nk], lk) if m]
        ct_x = [instantiate(c) for c, m in zip(cts_in[nc + nk :], lx) if m]
    outvars = new_acc + ct_k + ct_x
    return B.make_jaxpr(
        rc + acc + ctk + cty + rx + rk, B.dce_eqns(bb.eqns, outvars), outvars, consts
    )


# ---------------------------------------------------------------- batching


def _scan_batching(args, dims, **params):
    """JAX's `_scan_batching_rule`: constants keep their batch axes, carries are batched at
    axis 0 (to a fixed point of which carries the body makes batched), scanned inputs and
    outputs at axis 1 outside (0 inside the body)."""
    try:
        sp = ScanParams.from_eqn(BT.current_eqn())
    except ShapeError:
        raise JaxprError(
            "scan: cannot tell its constants, carries and scanned inputs apart", B.current().loc
        ) from None
    body, nk, ny = sp.jaxpr, sp.num_carry, sp.num_ys
    cd, kd, xd = sp.split(dims)
    consts, init, xs = sp.split(args)
    xs_axes = [None if d is None else 0 for d in xd]
    carry_b = [d is not None for d in kd]
    for _ in range(nk + 1):
        in_axes = list(cd) + [0 if b else None for b in carry_b] + xs_axes
        dest = [0 if b else BT.ZERO_IF_MAPPED for b in carry_b] + [BT.ZERO_IF_MAPPED] * ny
        jb, out_dims = BT.batch_jaxpr_axes(body, in_axes, dest)
        carry_out = [d is not None for d in out_dims[:nk]]
        if carry_out == carry_b:
            break
        carry_b = [a or b for a, b in zip(carry_b, carry_out)]
    size = BT.axis_size()
    new_init = [
        BT.broadcast(x, size, 0) if b and d is None else BT.moveaxis(x, d, 0) if b else x
        for x, d, b in zip(init, kd, carry_b)
    ]
    new_xs = [x if d is None or d == 1 else BT.moveaxis(x, d, 1) for x, d in zip(xs, xd)]
    length = params["length"]
    out_types = [v.type for v in jb.outvars[:nk]] + [
        v.type.update(shape=(dim_param(length), *v.type.shape)) for v in jb.outvars[nk:]
    ]
    outs = B.current().emit(
        "scan", [*consts, *new_init, *new_xs], dict(params, jaxpr=jb), out_types
    )
    ys_d = [None if d is None else 1 for d in out_dims[nk:]]
    return outs, [0 if b else None for b in carry_b] + ys_d


# ---------------------------------------------------------------- DCE


def _scan_dce(used_outs, e, dce_jaxpr, live_ins):
    """Unused ys and consts/xs are pruned, carries by fixed point (a carry stays when the
    body needs it for a live carry), and writes into Refs dead after the scan and not read
    by the body (which runs again: a Ref it reads is live throughout), as in JAX; the flat
    trees or counts follow.  A scan whose encoding is not read exactly, or whose flat trees
    hold `Pytree`/`Static` nodes, is not pruned."""
    from ..passes.dce import Unsupported, filter_param, is_ref, rebuild

    if not isinstance(e.params.get("jaxpr"), Jaxpr):
        raise Unsupported
    try:
        sp = ScanParams.from_eqn(e)
    except ShapeError:
        raise Unsupported from None
    p = e.params
    counts = "num_consts" in p and "num_carry" in p
    body, nconsts, ncarry = sp.jaxpr, sp.num_consts, sp.num_carry
    if not sp.exact:
        raise Unsupported
    if not counts and not (
        _plain_ft(sp.ft_in) and _plain_ft(sp.ft_out) and len(sp.ft_out.unpack()[0]) == ncarry
    ):
        raise Unsupported
    nin = len(e.inputs)
    if len(body.outvars) != len(e.outputs) or len(body.invars) != nin or nconsts + ncarry > nin:
        raise Unsupported
    if ncarry > len(e.outputs):
        raise Unsupported
    used_carry = [
        u or is_ref(v) for u, v in zip(used_outs[:ncarry], body.invars[nconsts : nconsts + ncarry])
    ]
    used_ys = list(used_outs[ncarry:])
    live = list(live_ins)
    for _ in range(ncarry + 2 + live.count(False)):
        inst = tuple([False] * nconsts + used_carry + [False] * (nin - nconsts - ncarry))
        new_body, used_ins = dce_jaxpr(body, tuple(used_carry + used_ys), inst, tuple(live))
        carry_in = used_ins[nconsts : nconsts + ncarry]
        new_live = [x or y for x, y in zip(live, used_ins)]
        if carry_in == used_carry and new_live == live:
            break
        used_carry = [x or y for x, y in zip(used_carry, carry_in)]
        live = new_live
    else:  # pragma: no cover
        raise Unsupported
    new_used_outs = used_carry + used_ys
    if all(used_ins) and all(new_used_outs) and new_body is body:
        return used_ins, e
    if counts:
        params = sp.to_params(
            jaxpr=new_body, num_consts=sum(used_ins[:nconsts]), num_carry=sum(used_carry)
        )
        if "linear" in params:
            params["linear"] = filter_param(params, "linear", used_ins)
    else:
        params = sp.to_params(
            jaxpr=new_body,
            ft_in=sp.ft_in.filter_with_mask(used_ins),
            ft_out=sp.ft_out.filter_with_mask(new_used_outs),
        )
    return used_ins, rebuild(e, used_ins, new_used_outs, params)


# ---------------------------------------------------------------- evaluation


def _run_length(length, dims) -> int:
    """The scan's length at run time: a symbolic length (`length=b`) takes its `--dim` size."""
    if isinstance(length, int):
        return length
    from ..backend.values import eval_dim

    return eval_dim(str(length), dims)


def _scan_evaluate(interp, eqn, invals, path):
    """`jax.lax.scan` (jit), or the loop in Python (eager)."""
    body = interp.body(eqn.params.get("jaxpr"), eqn)
    try:
        sp = ScanParams.from_eqn(eqn)
    except ShapeError:
        raise JaxprError(
            "'scan': cannot tell its constants, carries and scanned inputs apart", eqn.loc
        ) from None
    nk = sp.num_carry
    consts, init, xs = sp.split(invals)
    length = _run_length(sp.length, interp.dims)
    reverse = sp.reverse
    if interp.mode == "eager":
        import jax.numpy as jnp

        from ..backend.values import static_shape

        carry, ys = list(init), []
        order = range(length - 1, -1, -1) if reverse else range(length)
        for i in order:
            out = interp.run(
                body, [], list(consts) + carry + [x[i] for x in xs], path + (f"scan iter {i}",)
            )
            carry, y = out[:nk], out[nk:]
            ys.append(y)
        if reverse:
            ys.reverse()
        n_y = len(body.outvars) - nk
        if length == 0:
            stacked = []
            for v in body.outvars[nk:]:
                t = v.type
                stacked.append(jnp.zeros((0,) + static_shape(t, interp.dims), t.np_dtype))
        else:
            stacked = [jnp.stack([y[k] for y in ys]) for k in range(n_y)]
        return carry + stacked
    import jax

    from ..backend.evaluator import ThreadedRefs

    refs = ThreadedRefs(consts)  # the Refs it writes into: their values are carried

    def f(c, x):
        cs, boxes = refs.inside(consts, c[nk:])
        out = interp.run(body, [], cs + list(c[:nk]) + (list(x) if x is not None else []), path)
        return tuple(out[:nk]) + tuple(b.value for b in boxes), tuple(out[nk:])

    unroll = eqn.params.get("unroll", 1)
    unroll = bool(unroll) if isinstance(unroll, bool) else int(unroll)
    carry, ys = jax.lax.scan(
        f,
        tuple(init) + refs.values(),
        tuple(xs) if xs else None,
        length=length,
        reverse=reverse,
        unroll=unroll,
    )
    refs.write_back(carry[nk:])
    return list(carry[:nk]) + list(ys)


# ---------------------------------------------------------------- cost


def _scan_cost(e, costs):
    """The body runs `length` times."""
    try:
        n = int(e.params.get("length", 1))
    except (TypeError, ValueError):
        n = 1
    return sum(c[0] for c in costs) * n, sum(c[1] for c in costs) * n


# ---------------------------------------------------------------- rematerialization


def _scan_remat_saves(e, body_saves):
    """Per result: a stacked one is saved when the policy saves the body value it holds (a
    stacked carry: the carry's new value), as JAX's `_scan_partial_eval_custom` keeps its
    extensive residuals; the final carries and the other results are made by running the
    loop again (`_scan_remat_feed`), as JAX's staged loop makes them."""
    try:
        sp = ScanParams.from_eqn(e)
    except ShapeError:
        return [True] * len(e.outputs)
    body, nc, nk = sp.jaxpr, sp.num_consts, sp.num_carry
    per = body_saves(body)
    pos = {id(v): i for i, v in enumerate(body.invars)}

    def saved(k: int, seen: frozenset) -> bool:
        if per[k] is not None:
            return per[k]
        i = pos.get(id(body.outvars[k]), -1)
        if nc <= i < nc + nk and i - nc not in seen:  # a carry: its value made last time
            return saved(i - nc, seen | {k})
        return False  # a const or scanned input: the loop passes it again

    return [k >= nk and saved(k, frozenset()) for k in range(len(body.outvars))]


def _scan_remat_feed(e, saved):
    """The scan reading its saved stacked results as new scanned inputs (after the others),
    so that running it again computes only the rest."""
    sp = ScanParams.from_eqn(e)
    nk = sp.num_carry
    body, read = feed_results(sp.jaxpr, [k for k in range(nk, len(e.outputs)) if saved[k]])
    consts_g, carry_g, xs_g = sp.ft_in.unpack()
    params = sp.to_params(
        jaxpr=body,
        ft_in=FT.tup(consts_g, carry_g, FT.tup(xs_g, FT.nones(len(read)))),
        linear=sp.linear + [False] * len(read),
    )
    return e.replace(inputs=(*e.inputs, *(e.outputs[k] for k in read)), params=params)


# ---------------------------------------------------------------- registration


def _scan_hoist_consts(e, outer):
    """The body's constants become new leading consts of the scan."""
    enc = ScanParams.from_eqn(e)
    body = enc.jaxpr
    new_ops = outer(body.constvars)
    consts_g, carry_g, xs_g = enc.ft_in.unpack()
    extra = FT.nones(len(new_ops))
    consts_g = (
        FT.tup(*extra.elts, *consts_g.elts) if consts_g.kind == "tup" else FT.tup(extra, consts_g)
    )
    params = enc.to_params(
        jaxpr=body.replace(constvars=(), invars=tuple(body.constvars) + tuple(body.invars)),
        ft_in=FT.tup(consts_g, carry_g, xs_g),
        num_consts=enc.num_consts + len(new_ops),
        linear=[False] * len(new_ops) + enc.linear,
    )
    return e.replace(inputs=(*new_ops, *e.inputs), params=params)


define(
    "scan",
    multiple_results=True,
    jvp=_scan_jvp,
    jvp_kind="jvp+linearization",
    linearization=_scan_linearize,
    transpose=_scan_transpose,
    transposes_refs=True,
    dce=_scan_dce,
    evaluate=_scan_evaluate,
    # `linear` and `_split_transpose` are AD's bookkeeping
    evaluated_params=frozenset(
        "jaxpr length reverse unroll num_consts num_carry ft_in ft_out linear "
        "_split_transpose".split()
    ),
    body_cost=_scan_cost,
    batching=_scan_batching,
    hoist_consts=_scan_hoist_consts,
    remat_saves=_scan_remat_saves,
    remat_feed=_scan_remat_feed,
)


def _restyle_scan(prim, params, e, style):
    """A scan read from 0.11+ text (`ft_in`/`ft_out`) in the `num_consts`/`num_carry` encoding
    of older styles (`linear` all False, as JAX printed it for a traced scan)."""
    from ..text.style import scan_counts

    if style.scan_ft or "ft_in" not in params or not isinstance(params.get("jaxpr"), Jaxpr):
        return prim, params
    counts = scan_counts(params)
    if counts is None:
        return prim, params
    p = style.scan_params(
        jaxpr=params["jaxpr"],
        length=params.get("length", 1),
        num_consts=counts[0],
        num_carry=counts[1],
        reverse=params.get("reverse", False),
        unroll=params.get("unroll", 1),
    )
    return prim, p


def _scan_version_clues(e) -> set[str]:
    clues = set()
    if "ft_in" in e.params or "ft_out" in e.params:
        clues.add(ST.CLUE_0_11)  # flat trees: JAX 0.11 and 0.12
    elif "num_consts" in e.params:
        clues.add(ST.CLUE_BEFORE_0_11)  # the counts encoding: 0.10 and older
    if "_split_transpose" in e.params:
        clues.add(ST.CLUE_0_7_2)
    return clues


define("scan", restyle=_restyle_scan, version_clues=_scan_version_clues)
