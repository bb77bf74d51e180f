"""AD rules for control flow: `cond`, `scan`, `while` (mirrors jax/_src/lax/control_flow).

One rule per primitive serves jvp and linearize: in a split builder (linearize) the rule emits
two equations, a primal one (primal inputs only: it lands in the primal program) computing the
outputs and the residuals, and a linear one (in the tangent program) consuming them.

- cond: branches are differentiated with a common nonzero-tangent mask (an output tangent is
  nonzero if it is in some branch; the others instantiate zeros).  Linearized, every branch
  returns the union of the residuals of all branches (zeros for the others'), residuals that are
  branch inputs are forwarded.  Transpose: each branch transposed, index and residuals kept.
- scan: carry tangents by fixed point; operands regrouped consts/carry/xs in the encoding of the
  input (`num_consts`/`num_carry`/`linear`/`_split_transpose`, or 0.12's `ft_in`/`ft_out`, built
  as JAX builds them).  Linearized: per-iteration residuals are stacked as extra ys of the primal
  scan; loop-invariant ones are hoisted out and passed as consts, inputs forwarded.  Transpose:
  a scan in the opposite direction whose carries are the cotangents of the carries and of the
  linear consts; the cotangents of linear xs are its ys.
- while: forward mode only (tangent carries alongside, the cond jaxpr ignores them); linearized,
  a primal loop plus a forward-mode tangent loop; transposing raises JAX's error.
"""

from __future__ import annotations

from ...core import Jaxpr, JaxprError, Literal, ShapedArray, Var, is_inexact
from ...params import Opaque, format_value
from ...record import prim
from .. import builder as B
from ..jvp import jvp_masked
from ..linearize import linearize_masked
from ..registry import primitive_jvps, primitive_transposes, rule_kind
from ..transpose import backward_pass
from ..zeros import Zero, add_tangents, instantiate, is_undefined_primal, is_zero, tangent_type

WHILE_TRANSPOSE_ERROR = (
    "Reverse-mode differentiation does not work for lax.while_loop or lax.fori_loop with dynamic "
    "start/stop values. Try using lax.scan, or using fori_loop with static start/stop."
)


# ---------------------------------------------------------------- JAX 0.12 scan encoding (FlatTree text)
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


def ft_pack(*elts) -> FT:
    return FT.tup(*elts)


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


def _ft_param(t: FT):
    """A flat tree as a parameter value: what the parser would make of JAX's text."""
    text = repr(t)
    try:
        from ...text.values import parse_value

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


# ---------------------------------------------------------------- small helpers


def _loc():
    return B.current().loc


def _nonzeros(invars, tangents) -> list[bool]:
    return [not is_zero(t) and is_inexact(v.type) for v, t in zip(invars, tangents)]


def _emit(prim, inputs, params, out_types, tangent=False):
    b = B.current()
    if tangent and b.split:
        with b.tangent_mode():
            return b.emit(prim, inputs, params, out_types)
    return b.emit(prim, inputs, params, out_types)


def _stacked(t, length):
    return t.update(shape=(length, *t.shape)) if isinstance(t, ShapedArray) else t


def _clone(j: Jaxpr) -> Jaxpr:
    """The same jaxpr with fresh top-level variables (to use it twice in one program)."""
    m: dict[int, Var] = {}

    def fresh(v):
        n = Var(v.type, v.hint)
        m[id(v)] = n
        return n

    def sub(x):
        return m.get(id(x), x) if isinstance(x, Var) else x

    cv = [fresh(v) for v in j.constvars]
    iv = [fresh(v) for v in j.invars]
    eqns = []
    for e in j.eqns:
        ins = [sub(x) for x in e.inputs]
        eqns.append(e.replace(inputs=ins, outputs=[fresh(o) for o in e.outputs]))
    return j.replace(constvars=cv, invars=iv, eqns=eqns, outvars=[sub(x) for x in j.outvars])


def _zero_tangents(types):
    return [Zero(tangent_type(t)) for t in types]


def _transpose_body(j: Jaxpr, lin: list[bool], ct_mask: list[bool]):
    """`(non-linear inputs..., nonzero output cts...) -> (cts of the linear inputs...)`."""
    consts = [B.fresh_like(v) for v in j.constvars]
    nl = [B.fresh_like(v) for v, m in zip(j.invars, lin) if not m]
    ctv = [Var(tangent_type(o.type), None) for o, m in zip(j.outvars, ct_mask) if m]
    it, it2 = iter(nl), iter(ctv)
    args = [None if m else next(it) for m in lin]
    cts = [next(it2) if m else Zero(tangent_type(o.type)) for o, m in zip(j.outvars, ct_mask)]
    bb = B.Builder(loc=B.current().loc)
    with B.use(bb):
        _, cts_in = backward_pass(j, lin, args, cts, consts)
        outs = [instantiate(c) for c, m in zip(cts_in, lin) if m]
    return B.make_jaxpr(nl + ctv, B.dce_eqns(bb.eqns, outs), outs, consts)


# ---------------------------------------------------------------- cond


def _cond_params(params, branches):
    p = dict(params)
    p["branches"] = tuple(branches)
    return p


def _cond_jvp(primals, tangents, *, branches, **params):
    b = B.current()
    index, *ops = primals
    _, *ops_t = tangents
    branches = list(branches)
    out_types = [o.type for o in branches[0].outvars]
    nz = _nonzeros(branches[0].invars, ops_t)
    out_nz = [False] * len(out_types)
    if any(nz):
        per_branch = [jvp_masked(br, nz, instantiate=False)[1] for br in branches]
        out_nz = [any(z) for z in zip(*per_branch)]
    if not any(out_nz):
        outs = b.emit("cond", primals, _cond_params(params, branches), out_types)
        return outs, _zero_tangents(out_types)
    if b.split:
        return _cond_linearize(index, ops, ops_t, nz, out_nz, branches, params)
    jvps = [jvp_masked(br, nz, instantiate=out_nz)[0] for br in branches]
    tan_ops = [t for t, m in zip(ops_t, nz) if m]
    outs = b.emit(
        "cond",
        [index, *ops, *tan_ops],
        _cond_params(params, jvps),
        [o.type for o in jvps[0].outvars],
    )
    n = len(out_types)
    it = iter(outs[n:])
    return outs[:n], [next(it) if m else Zero(tangent_type(t)) for t, m in zip(out_types, out_nz)]


def _cond_linearize(index, ops, ops_t, nz, out_nz, branches, params):
    n_out = len(out_nz)
    lins = [linearize_masked(br, nz, instantiate=out_nz) for br in branches]
    # Unify the residuals: new ones matched by (type, occurrence) as JAX's
    # _merge_branch_residuals does; branch inputs are forwarded (one slot per input).
    new_slots: list = []
    fwd_slots: list[int] = []
    keys: dict = {}
    branch_res = []  # per branch: [("new", slot) | ("fwd", slot)] per residual
    for pj, _lj, _onz, _nres in lins:
        in_pos = {id(v): i for i, v in enumerate(pj.invars)}
        counts: dict = {}
        mine = []
        for r in pj.outvars[n_out:]:
            if isinstance(r, Var) and id(r) in in_pos:
                k = in_pos[id(r)]
                if k not in fwd_slots:
                    fwd_slots.append(k)
                mine.append(("fwd", fwd_slots.index(k)))
            else:
                c = counts.get(r.type, 0)
                counts[r.type] = c + 1
                key = (r.type, c)
                if key not in keys:
                    keys[key] = len(new_slots)
                    new_slots.append(r.type)
                mine.append(("new", keys[key]))
        branch_res.append(mine)

    primal_branches, linear_branches = [], []
    for (pj, lj, _onz, nres), mine in zip(lins, branch_res):
        own_new = {s: r for (kind, s), r in zip(mine, pj.outvars[n_out:]) if kind == "new"}
        bb = B.Builder()
        with B.use(bb):
            res_out = [
                own_new[s] if s in own_new else instantiate(Zero(t))
                for s, t in enumerate(new_slots)
            ]
        primal_branches.append(
            pj.replace(eqns=list(pj.eqns) + bb.eqns, outvars=list(pj.outvars[:n_out]) + res_out)
        )
        res_in = lj.invars[:nres]
        own_new_in = {s: v for (kind, s), v in zip(mine, res_in) if kind == "new"}
        own_fwd_in = {s: v for (kind, s), v in zip(mine, res_in) if kind == "fwd"}
        inv = [own_new_in.get(s) or Var(t, None) for s, t in enumerate(new_slots)]
        inv += [own_fwd_in.get(s) or Var(ops[k].type, None) for s, k in enumerate(fwd_slots)]
        linear_branches.append(lj.replace(invars=inv + list(lj.invars[nres:])))

    out_types = [o.type for o in branches[0].outvars]
    outs = _emit(
        "cond", [index, *ops], _cond_params(params, primal_branches), out_types + new_slots
    )
    prim_outs, new_res = outs[:n_out], outs[n_out:]
    res = new_res + [ops[k] for k in fwd_slots]
    tan_ops = [t for t, m in zip(ops_t, nz) if m]
    touts = _emit(
        "cond",
        [index, *res, *tan_ops],
        _cond_params(params, linear_branches),
        [o.type for o in linear_branches[0].outvars],
        tangent=True,
    )
    it = iter(touts)
    return prim_outs, [next(it) if m else Zero(tangent_type(t)) for t, m in zip(out_types, out_nz)]


def _cond_transpose(cts, index, *args, branches, **params):
    if is_undefined_primal(index):
        raise JaxprError("cond: the branch index cannot be linear", _loc())
    lin = [is_undefined_primal(a) for a in args]
    ct_mask = [not is_zero(c) for c in cts]
    if not any(ct_mask) or not any(lin):
        return [None] + [Zero(tangent_type(a.type)) if m else None for a, m in zip(args, lin)]
    tbranches = [_transpose_body(br, lin, ct_mask) for br in branches]
    res = [a for a, m in zip(args, lin) if not m]
    ct_atoms = [c for c in cts if not is_zero(c)]
    outs = _emit(
        "cond",
        [index, *res, *ct_atoms],
        _cond_params(params, tbranches),
        [o.type for o in tbranches[0].outvars],
    )
    it = iter(outs)
    return [None] + [next(it) if m else None for m in lin]


# ---------------------------------------------------------------- scan


class _ScanEnc:
    """How a scan equation groups its operands, in its own encoding."""

    def __init__(self, params, n_in: int, body: Jaxpr):
        self.params = params
        self.ft = "ft_in" in params or "ft_out" in params
        n_body_out = len(body.outvars)
        if self.ft:
            try:
                ft_in = parse_ft(format_value(params["ft_in"]))
                ft_out = parse_ft(format_value(params["ft_out"]))
                g_in = [len(g) for g in ft_in.unpack()]
                g_out = [len(g) for g in ft_out.unpack()]
                if (
                    len(g_in) != 3
                    or len(g_out) != 2
                    or sum(g_in) != n_in
                    or sum(g_out) != n_body_out
                ):
                    raise ValueError
            except Exception:  # noqa: BLE001 - unmodelled encoding: rebuild a plain one
                from ...text.style import scan_counts

                counts = scan_counts(params)
                if counts is None:
                    raise JaxprError(
                        "scan: cannot read the ft_in/ft_out parameters", _loc()
                    ) from None
                nc, nk = counts
                ft_in = FT.tup(FT.nones(nc), FT.nones(nk), FT.nones(n_in - nc - nk))
                ft_out = FT.tup(FT.nones(nk), FT.nones(n_body_out - nk))
                g_in = [nc, nk, n_in - nc - nk]
            self.ft_in, self.ft_out = ft_in.void(), ft_out.void()
            self.nc, self.nk, self.nx = g_in
            self.linear = [False] * n_in
        else:
            self.nc, self.nk = int(params["num_consts"]), int(params["num_carry"])
            self.nx = n_in - self.nc - self.nk
            self.ft_in = FT.tup(FT.nones(self.nc), FT.nones(self.nk), FT.nones(self.nx))
            self.ft_out = FT.tup(FT.nones(self.nk), FT.nones(n_body_out - self.nk))
            lin = params.get("linear")
            self.linear = (
                [bool(x) for x in lin]
                if isinstance(lin, (tuple, list)) and len(lin) == n_in
                else [False] * n_in
            )
        self.ny = n_body_out - self.nk

    def make(self, *, jaxpr, reverse, ft_in, ft_out, num_consts, num_carry, linear):
        p = {}
        for k, v in self.params.items():
            if k == "jaxpr":
                v = jaxpr
            elif k == "ft_in":
                v = _ft_param(ft_in)
            elif k == "ft_out":
                v = _ft_param(ft_out)
            elif k == "num_consts":
                v = num_consts
            elif k == "num_carry":
                v = num_carry
            elif k == "linear":
                v = tuple(bool(x) for x in linear)
            elif k == "reverse":
                v = reverse
            p[k] = v
        return p


def _scan_out_types(body: Jaxpr, n_carry: int, length) -> list:
    ts = [o.type for o in body.outvars]
    return ts[:n_carry] + [_stacked(t, length) for t in ts[n_carry:]]


def _scan_static(params):
    return params["jaxpr"], params["length"], bool(params.get("reverse", False))


def _scan_jvp(primals, tangents, **params):
    b = B.current()
    body, length, reverse = _scan_static(params)
    enc = _ScanEnc(params, len(primals), body)
    nc, nk, ny = enc.nc, enc.nk, enc.ny
    nz = _nonzeros(body.invars, tangents)
    const_nz, init_nz, xs_nz = nz[:nc], nz[nc : nc + nk], nz[nc + nk :]
    carry_nz = list(init_nz)
    out_nz: list[bool] = []
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
    out_types = _scan_out_types(body, nk, length)
    if not any(out_nz):
        return b.emit("scan", primals, params, out_types), _zero_tangents(out_types)
    nzs = const_nz + carry_nz + xs_nz
    if b.split:
        return _scan_linearize(primals, tangents, params, enc, nzs, out_nz)
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
    p = enc.make(
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


def _scan_linearize(primals, tangents, params, enc, nzs, out_nz):
    body, length, reverse = _scan_static(params)
    nc, nk, ny = enc.nc, enc.nk, enc.ny
    carry_nz = nzs[nc : nc + nk]
    pj, lj, out_nz2, nres = linearize_masked(body, nzs, instantiate=carry_nz + [False] * ny)
    assert out_nz2 == out_nz
    res = list(pj.outvars[nk + ny :])
    in_pos = {id(v): i for i, v in enumerate(pj.invars)}
    inv = _invariant_vars(pj, nc)
    ys_pos = {id(v): nk + k for k, v in enumerate(pj.outvars[nk : nk + ny]) if isinstance(v, Var)}
    # classify: ("int", atom-or-hoist) intensive / ("ext", ...) extensive
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
    # Hoist the loop invariants (as JAX's _scan_known_hoisting): the equations that depend only
    # on the consts run once, outside the loop; the primal scan takes the values it still needs as
    # consts, and invariant residuals enter the linear scan unstacked.
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
    pp = enc.make(
        jaxpr=pbody,
        reverse=reverse,
        ft_in=FT.tup(FT.nones(len(needed)), carry_g, xs_g),
        ft_out=FT.tup(carry_g, FT.tup(ys_g, FT.nones(len(stack)))),
        num_consts=len(needed),
        num_carry=nk,
        linear=[False] * len(needed) + enc.linear[nc:],
    )
    outs = _emit("scan", p_consts + list(primals[nc:]), pp, _scan_out_types(pbody, nk, length))
    prim_outs, stacked = outs[: nk + ny], iter(outs[nk + ny :])
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
    nz_consts_g, nz_carry_g, nz_xs_g = enc.ft_in.filter_with_mask(nzs).unpack()
    ft_in = FT.tup(
        FT.tup(FT.nones(len(int_res)), nz_consts_g),
        nz_carry_g,
        FT.tup(nz_xs_g, FT.nones(len(ext_res))),
    )
    ft_out = enc.ft_out.filter_with_mask(out_nz)
    nkt = sum(carry_nz)
    lin = [x for x, m in zip(enc.linear, nzs) if m]
    lp = enc.make(
        jaxpr=lbody,
        reverse=reverse,
        ft_in=ft_in.void(),
        ft_out=ft_out.void(),
        num_consts=len(int_res) + sum(nzs[:nc]),
        num_carry=nkt,
        linear=[False] * len(int_res) + lin + [False] * len(ext_res),
    )
    touts = _emit(
        "scan", int_res + tans + ext_res, lp, _scan_out_types(lbody, nkt, length), tangent=True
    )
    out_types = _scan_out_types(body, nk, length)
    it = iter(touts)
    return prim_outs, [next(it) if m else Zero(tangent_type(t)) for t, m in zip(out_types, out_nz)]


def _scan_transpose(cts, *args, **params):
    from .. import ops
    from ..transpose import linear_dependence

    body, length, reverse = _scan_static(params)
    enc = _ScanEnc(params, len(args), body)
    nc, nk = enc.nc, enc.nk
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
    res_c = [a for a, m in zip(consts, lc) if not m]
    ct_c0 = [ops.zeros(tangent_type(a.type)) for a, m in zip(consts, lc) if m]
    res_x = [a for a, m in zip(xs, lx) if not m] + nl_stacked
    tbody = _transpose_scan_body(body, nc, nk, lc, lk, lx, ys_mask)
    n_acc, n_k = len(ct_c0), len(ct_carry)
    if enc.ft:
        ft_in = _pytree_ft(((len(res_c), 0), (n_acc, n_k), (0, len(ct_ys), len(res_x))))
        ft_out = FT.tup(_pytree_ft((n_acc, n_k)), FT.tup(_pytree_ft(sum(lx)), FT.nones(0)))
    else:
        ft_in = ft_out = None
    p = enc.make(
        jaxpr=tbody,
        reverse=not reverse,
        ft_in=ft_in,
        ft_out=ft_out,
        num_consts=len(res_c),
        num_carry=n_acc + n_k,
        linear=[False] * len(res_c) + [True] * (n_acc + n_k + len(ct_ys)) + [False] * len(res_x),
    )
    outs = _emit(
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
        [next(it_c) if m else None for m in lc]
        + [c if is_undefined_primal(a) else None for a, c in zip(init, cts_k)]
        + [next(it_x) if m else None for m in lx]
    )


def _nonlinear_carry_scan(body, params, enc, lc, lk, lx, consts, init, xs, length, reverse):
    """Run the non-linear carries forward; returns their stacked per-iteration values."""
    nc, nk = enc.nc, enc.nk
    j = _clone(body)
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
    p = enc.make(
        jaxpr=fj,
        reverse=reverse,
        ft_in=ft_in,
        ft_out=ft_out,
        num_consts=n_c,
        num_carry=n_k,
        linear=lin,
    )
    outs = _emit("scan", operands, p, _scan_out_types(fj, n_k, length))
    return outs[n_k:]


def _transpose_scan_body(body: Jaxpr, nc, nk, lc, lk, lx, ys_mask) -> Jaxpr:
    """`[res consts][ct accs, ct carry][nonzero ct ys, res xs, non-linear carries]
    -> [ct accs, ct carry][ct xs]`."""
    C, K, X = body.invars[:nc], body.invars[nc : nc + nk], body.invars[nc + nk :]
    Y = body.outvars[nk:]
    rc = [B.fresh_like(v) for v, m in zip(C, lc) if not m]
    acc = [Var(tangent_type(v.type), None) for v, m in zip(C, lc) if m]
    ctk = [Var(tangent_type(v.type), None) for v, m in zip(K, lk) if m]
    cty = [Var(tangent_type(y.type), None) for y, m in zip(Y, ys_mask) if m]
    rx = [B.fresh_like(v) for v, m in zip(X, lx) if not m]
    rk = [B.fresh_like(v) for v, m in zip(K, lk) if not m]
    irc, irx, irk = iter(rc), iter(rx), iter(rk)
    args = (
        [None if m else next(irc) for m in lc]
        + [None if m else next(irk) for m in lk]
        + [None if m else next(irx) for m in lx]
    )
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
        ct_c = [c for c, m in zip(cts_in[:nc], lc) if m]
        new_acc = [instantiate(add_tangents(a, c)) for a, c in zip(acc, ct_c)]
        ct_k = [instantiate(c) for c, m in zip(cts_in[nc : nc + nk], lk) if m]
        ct_x = [instantiate(c) for c, m in zip(cts_in[nc + nk :], lx) if m]
    outvars = new_acc + ct_k + ct_x
    return B.make_jaxpr(
        rc + acc + ctk + cty + rx + rk, B.dce_eqns(bb.eqns, outvars), outvars, consts
    )


# ---------------------------------------------------------------- while


def _while_jvp(primals, tangents, *, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts, **params):
    b = B.current()
    ncc, nbc = int(cond_nconsts), int(body_nconsts)
    nk = len(primals) - ncc - nbc
    wparams = dict(
        cond_jaxpr=cond_jaxpr,
        body_jaxpr=body_jaxpr,
        cond_nconsts=cond_nconsts,
        body_nconsts=body_nconsts,
        **params,
    )
    out_types = [o.type for o in body_jaxpr.outvars]
    bnz = _nonzeros(body_jaxpr.invars, tangents[ncc:])
    bconst_nz, init_nz = bnz[:nbc], bnz[nbc:]
    carry_nz = list(init_nz)
    out_nz: list[bool] = []
    if any(bnz):
        for _ in range(nk + 1):
            jv, out_nz = jvp_masked(body_jaxpr, bconst_nz + carry_nz, instantiate=carry_nz)
            if out_nz == carry_nz:
                break  # `jv` is the body's JVP at the fixed point
            carry_nz = [x or y for x, y in zip(carry_nz, out_nz)]
        else:
            jv, out_nz = jvp_masked(body_jaxpr, bconst_nz + carry_nz, instantiate=carry_nz)
    if not any(carry_nz):
        return b.emit("while", primals, wparams, out_types), _zero_tangents(out_types)
    P, T = list(jv.invars[: nbc + nk]), list(jv.invars[nbc + nk :])
    s1 = sum(bconst_nz)
    jv = jv.replace(invars=P[:nbc] + T[:s1] + P[nbc:] + T[s1:])
    cj = _clone(cond_jaxpr)
    cj = cj.replace(
        invars=list(cj.invars)
        + [Var(tangent_type(t), None) for t, m in zip(out_types, carry_nz) if m]
    )
    cconst, bconst, init = primals[:ncc], primals[ncc : ncc + nbc], primals[ncc + nbc :]
    bconst_t = [t for t, m in zip(tangents[ncc : ncc + nbc], bconst_nz) if m]
    init_t = [instantiate(t) for t, m in zip(tangents[ncc + nbc :], carry_nz) if m]
    jparams = dict(wparams, cond_jaxpr=cj, body_jaxpr=jv, body_nconsts=nbc + s1)
    t_types = [tangent_type(t) for t, m in zip(out_types, carry_nz) if m]
    operands = [*cconst, *bconst, *bconst_t, *init, *init_t]
    if b.split:
        # primal loop (primal program) + forward-mode tangent loop (tangent program)
        prim_outs = b.emit("while", primals, wparams, out_types)
        outs = _emit("while", operands, jparams, out_types + t_types, tangent=True)
    else:
        outs = b.emit("while", operands, jparams, out_types + t_types)
        prim_outs = outs[:nk]
    it = iter(outs[nk:])
    return prim_outs, [
        next(it) if m else Zero(tangent_type(t)) for t, m in zip(out_types, carry_nz)
    ]


def _while_transpose(cts, *args, **params):
    raise JaxprError(WHILE_TRANSPOSE_ERROR, _loc())


primitive_jvps["cond"] = _cond_jvp
primitive_jvps["scan"] = _scan_jvp
primitive_jvps["while"] = _while_jvp
primitive_transposes["cond"] = _cond_transpose
primitive_transposes["scan"] = _scan_transpose
primitive_transposes["while"] = _while_transpose
for _name in ("cond", "scan", "while"):
    rule_kind[_name] = "jvp+linearization"
