"""Call and control-flow primitives: result types come from the nested jaxprs."""

from __future__ import annotations

import re

from ..core import Jaxpr, ShapedArray
from ..params import format_value
from ..record import define
from ..text.param_rules import drop, name_first, sorted_params, unspecified
from . import ShapeError, shape_rule
from .util import (
    arr,
    check_call_operands,
    dim_eq,
    int_param,
    is_int_dtype,
    jaxpr_param,
    out_types_of,
    types_agree,
)


def _call(key: str, *alts: str):
    def rule(in_types, params, out_hint, _prim=None):
        j = jaxpr_param(params, key, *alts)
        check_call_operands(_prim or "call", j, in_types)
        return out_types_of(j)

    return rule


def _register_call(names, key, *alts):
    for n in names:
        base = _call(key, *alts)

        def rule(in_types, params, out_hint, _n=n, _base=base):
            return _base(in_types, params, out_hint, _prim=_n)

        shape_rule(n)(rule)


_register_call(
    ("jit", "pjit", "remat2", "checkpoint", "remat", "custom_vmap_call_jaxpr"),
    "jaxpr",
    "call_jaxpr",
)
_register_call(
    (
        "closed_call",
        "core_call",
        "call",
        "eval_jaxpr",
        "custom_jvp_call",
        "custom_vjp_call",
        "custom_jvp_call_jaxpr",
        "xla_call",
        "named_call",
        "remat_call",
        "compute_on",
        "compute_on2",
        "xla_metadata_call",
    ),
    "call_jaxpr",
    "jaxpr",
    "fun_jaxpr",
)
_register_call(("custom_vjp_call_jaxpr",), "fun_jaxpr", "call_jaxpr")
_register_call(("custom_vmap_call",), "call", "call_jaxpr", "jaxpr")


def _jaxpr_for(params, prim: str, key: str, in_types, what: str = "inputs") -> Jaxpr:
    """The nested jaxpr ``params[key]``, checked to take exactly one input per operand."""
    j = jaxpr_param(params, key)
    if len(j.invars) != len(in_types):
        raise ShapeError(
            f"{prim}: {key} takes {len(j.invars)} {what}, but the equation passes {len(in_types)}"
        )
    return j


@shape_rule("optimization_barrier")
def _optimization_barrier(in_types, params, out_hint):
    return list(in_types)


@shape_rule("cond")
def _cond(in_types, params, out_hint):
    branches = params.get("branches")
    if (
        not isinstance(branches, (tuple, list))
        or not branches
        or not all(isinstance(b, Jaxpr) for b in branches)
    ):
        raise ShapeError("cond: missing or malformed 'branches' parameter")
    if not in_types:
        raise ShapeError("cond expects an index operand")
    idx = arr(in_types[0], "cond", 0)
    if idx.ndim != 0 or not (is_int_dtype(idx.dtype) or idx.dtype == "bool"):
        raise ShapeError(f"cond: the index operand must be an integer scalar, got {idx}")
    ops = in_types[1:]
    for k, b in enumerate(branches):
        check_call_operands("cond", b, ops, what=f"branch {k}")
    outs = out_types_of(branches[0])
    for k, b in enumerate(branches[1:], 1):
        bo = out_types_of(b)
        if len(bo) != len(outs) or not all(types_agree(x, y) for x, y in zip(bo, outs)):
            raise ShapeError(
                f"cond: branch {k} returns ({', '.join(map(str, bo))}), "
                f"but branch 0 returns ({', '.join(map(str, outs))})"
            )
    return outs


@shape_rule("while")
def _while(in_types, params, out_hint):
    cj = jaxpr_param(params, "cond_jaxpr")
    bj = jaxpr_param(params, "body_jaxpr")
    cn = int_param(params, "cond_nconsts", 0)
    bn = int_param(params, "body_nconsts", 0)
    if len(in_types) < cn + bn:
        raise ShapeError(
            f"while: expects at least {cn + bn} operands (consts), got {len(in_types)}"
        )
    cconsts, bconsts, carry = in_types[:cn], in_types[cn : cn + bn], in_types[cn + bn :]
    check_call_operands("while", cj, list(cconsts) + list(carry), what="cond_jaxpr")
    check_call_operands("while", bj, list(bconsts) + list(carry), what="body_jaxpr")
    co = out_types_of(cj)
    if len(co) != 1 or not (isinstance(co[0], ShapedArray) and co[0].dtype == "bool"):
        raise ShapeError(
            f"while: cond_jaxpr must return one bool value, got ({', '.join(map(str, co))})"
        )
    bo = out_types_of(bj)
    if len(bo) != len(carry):
        raise ShapeError(
            f"while: body_jaxpr returns {len(bo)} results for {len(carry)} carried values"
        )
    for i, (a, b) in enumerate(zip(bo, carry)):
        if not types_agree(a, b):
            raise ShapeError(
                f"while: body_jaxpr result {i} has type {a}, but the carried value has type {b}"
            )
    return list(carry)


# ---------------------------------------------------------------- scan

_TOKEN = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_.]*|\(|\)|\[|\]|,|\*|=|'[^']*'|-?\d+)")


def _tokens(text):
    pos, out = 0, []
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            pos += 1
            continue
        out.append(m.group(1))
        pos = m.end()
    return out


class _P:
    """A tiny reader for the repr of a FlatTree (`ft_in=((), (None,), (RightsOnly(Right(None)),))`)."""

    def __init__(self, toks):
        self.t, self.i = toks, 0

    def peek(self):
        return self.t[self.i] if self.i < len(self.t) else None

    def next(self):
        tok = self.peek()
        self.i += 1
        return tok

    def node(self):
        tok = self.next()
        if tok == "(":
            items = self.seq(")")
            return ("tuple", items)
        if tok == "[":
            return ("list", self.seq("]"))
        if tok is None:
            raise ValueError("eof")
        if self.peek() == "(":
            self.next()
            args = self.seq(")")
            return ("call", tok, args)
        return ("atom", tok)

    def seq(self, close):
        items = []
        while self.peek() is not None and self.peek() != close:
            if self.peek() == ",":
                self.next()
                continue
            # keyword argument
            if self.i + 1 < len(self.t) and self.t[self.i + 1] == "=":
                key = self.next()
                self.next()
                items.append(("kw", key, self.node()))
                continue
            items.append(self.node())
        self.next()
        return items


def _leaves(n) -> int:
    kind = n[0]
    if kind == "atom":
        return 1 if n[1] in ("None", "*") else 0
    if kind in ("tuple", "list"):
        return sum(_leaves(x) for x in n[1])
    if kind == "kw":
        return _leaves(n[2])
    if kind == "call":
        name, args = n[1], n[2]
        if name == "Left":
            return 0
        if name == "PyTreeDef":
            return sum(_stars(a) for a in args)
        if name == "Pytree":
            for a in args:
                if a[0] == "kw" and a[1] == "vals":
                    return _leaves(a[2])
        return sum(_leaves(a) for a in args)
    return 0


def _stars(n) -> int:
    if n[0] == "atom":
        return 1 if n[1] == "*" else 0
    if n[0] in ("tuple", "list"):
        return sum(_stars(x) for x in n[1])
    if n[0] == "kw":
        return _stars(n[2])
    if n[0] == "call":
        return sum(_stars(a) for a in n[2])
    return 0


def _groups(n):
    """Leaf counts of the top-level groups of a FlatTree repr, or None."""
    if n[0] == "tuple":
        return [_leaves(x) for x in n[1]]
    if n[0] == "call" and n[1] == "Pytree":
        for a in n[2]:
            if a[0] == "kw" and a[1] == "tree":
                t = a[2]
                if t[0] == "call" and t[1] == "PyTreeDef" and t[2] and t[2][0][0] == "tuple":
                    return [_stars(x) for x in t[2][0][1]]
    return None


def ft_group_sizes(value):
    """Leaf counts of each top-level group of an `ft_in`/`ft_out` parameter, or None."""
    try:
        text = value if isinstance(value, str) else format_value(value)
        toks = _tokens(text)
        return _groups(_P(toks).node())
    except Exception:  # noqa: BLE001 - the encoding is informal; fall back to type matching
        return None


def _scan_split(in_types, j: Jaxpr, length, params, out_hint):
    """(num_consts, num_carry) for a scan equation."""
    n = len(in_types)
    if "num_consts" in params and "num_carry" in params:
        return int_param(params, "num_consts"), int_param(params, "num_carry")
    g = ft_group_sizes(params["ft_in"]) if "ft_in" in params else None
    if g is not None and len(g) == 3 and sum(g) == n:
        return g[0], g[1]
    go = ft_group_sizes(params["ft_out"]) if "ft_out" in params else None
    # type-directed search: carries are invars whose type the body returns at the same position
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


@shape_rule("scan")
def _scan(in_types, params, out_hint):
    j = jaxpr_param(params, "jaxpr")
    length = params.get("length")
    length = int(length) if length is not None and not isinstance(length, str) else length
    if length is None:
        raise ShapeError("scan: missing parameter 'length'")
    n = len(in_types)
    if len(j.invars) != n:
        raise ShapeError(f"scan: jaxpr takes {len(j.invars)} inputs, but the equation passes {n}")
    c, k = _scan_split(in_types, j, length, params, out_hint)
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


# ---------------------------------------------------------------- other structured calls


@shape_rule("custom_linear_solve")
def _custom_linear_solve(in_types, params, out_hint):
    cl = params.get("const_lengths")
    total = 0
    if cl is not None:
        try:
            total = sum(int(v) for _, v in cl.fields)
        except (AttributeError, TypeError, ValueError):
            total = 0
    b = in_types[total:]
    js = params.get("jaxprs")
    solve = None
    if js is not None and hasattr(js, "get"):
        solve = js.get("solve") if isinstance(js.get("solve"), Jaxpr) else None
    if solve is not None:
        if len(solve.outvars) != len(b):
            raise ShapeError(
                f"custom_linear_solve: solve returns {len(solve.outvars)} values for {len(b)} operands"
            )
    return list(b)


@shape_rule("run_state")
def _run_state(in_types, params, out_hint):
    _jaxpr_for(params, "run_state", "jaxpr", in_types, what="refs")
    return list(in_types)


_AXES_RE = re.compile(r"'([^']*)'\s*:\s*(\d+)")


def _mesh_sizes(mesh) -> dict[str, int]:
    return {k: int(v) for k, v in _AXES_RE.findall(str(mesh))}


def _spec_axes(spec) -> list[list[str]] | None:
    s = str(spec).strip()
    if not (s.startswith("P(") and s.endswith(")")):
        return None
    inner = s[2:-1]
    out, depth, cur = [], 0, ""
    for ch in inner:
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
            continue
        depth += ch in "([" and 1 or 0
        depth -= ch in ")]" and 1 or 0
        cur += ch
    if cur.strip():
        out.append(cur.strip())
    return [re.findall(r"'([^']*)'", e) for e in out]


def _as_list(v):
    if isinstance(v, (tuple, list)):
        return list(v)
    return None


@shape_rule("shard_map")
def _shard_map(in_types, params, out_hint):
    j = _jaxpr_for(params, "shard_map", "jaxpr", in_types)
    sizes = _mesh_sizes(params.get("mesh", ""))
    specs = _as_list(params.get("out_specs"))
    outs = []
    for i, t in enumerate(j.out_types):
        if not isinstance(t, ShapedArray):
            outs.append(t)
            continue
        spec = _spec_axes(specs[i]) if specs is not None and i < len(specs) else None
        if spec is None or not sizes:
            if out_hint and i < len(out_hint):
                outs.append(out_hint[i])
                continue
            raise ShapeError("shard_map: cannot read out_specs")
        shape = list(t.shape)
        for d, axes in enumerate(spec[: len(shape)]):
            f = 1
            for a in axes:
                f *= sizes.get(a, 1)
            if isinstance(shape[d], int):
                shape[d] *= f
        outs.append(ShapedArray(tuple(shape), t.dtype, t.weak_type, t.memory_space, None))
    return outs


@shape_rule("xla_pmap")
def _xla_pmap(in_types, params, out_hint):
    j = _jaxpr_for(params, "xla_pmap", "call_jaxpr", in_types)
    n = int_param(params, "axis_size")
    out_axes = _as_list(params.get("out_axes")) or [0] * len(j.outvars)
    outs = []
    for t, ax in zip(j.out_types, out_axes):
        if ax is None or not isinstance(t, ShapedArray):
            outs.append(t)
            continue
        shape = list(t.shape)
        shape.insert(int(ax), n)
        outs.append(t.update(shape=shape))
    return outs


_AVAL_RE = re.compile(r"ShapedArray\(([a-z0-9_]+)\[([^\]]*)\](?:,\s*weak_type=(True|False))?")


def parse_avals(value) -> list[ShapedArray] | None:
    """`(ShapedArray(float32[3]),)` (typed or text) -> array types."""
    from ..core import short_dtype_name

    if value is None:
        return None
    text = format_value(value) if not isinstance(value, str) else value
    out = []
    for m in _AVAL_RE.finditer(text):
        dims = tuple(
            int(d) if d.strip().lstrip("-").isdigit() else d.strip()
            for d in m.group(2).split(",")
            if d.strip()
        )
        out.append(ShapedArray(dims, short_dtype_name(m.group(1)), m.group(3) == "True"))
    return out


def _avals_rule(key):
    def rule(in_types, params, out_hint):
        avals = parse_avals(params.get(key))
        if avals is None:
            raise ShapeError(f"missing parameter '{key}'")
        if out_hint is not None and len(out_hint) == len(avals):
            # keep the declared spelling of symbolic dims
            return [
                h if isinstance(h, ShapedArray) and types_agree(h, a) else a
                for a, h in zip(avals, out_hint)
            ]
        return avals

    return rule


shape_rule("pure_callback", "io_callback")(_avals_rule("result_avals"))
shape_rule("pallas_call")(_avals_rule("out_avals"))


@shape_rule("debug_callback", "debug_print", "check")
def _no_results(in_types, params, out_hint):
    return []


@shape_rule("custom_lin")
def _custom_lin(in_types, params, out_hint):
    nres = int_param(params, "num_res", 0)
    if len(in_types) < nres:
        raise ShapeError(
            f"custom_lin: expects at least {nres} residual operands, got {len(in_types)}"
        )
    if out_hint is not None:
        return list(out_hint)
    avals = parse_avals(params.get("out_avals"))
    if avals:
        return avals
    raise ShapeError("custom_lin: the result types are not given (out_avals is hidden)")


@shape_rule("CustomRoot")
def _custom_root(in_types, params, out_hint):
    """0.12's lax.custom_root HiPrim: operands = initial guess + closed-over values."""
    j = jaxpr_param(params, "solve_jaxpr")
    k = len(j.invars)
    if len(in_types) < k:
        raise ShapeError(
            f"CustomRoot: solve_jaxpr takes {k} inputs, but the equation passes {len(in_types)}"
        )
    check_call_operands("CustomRoot", j, in_types[:k], what="solve_jaxpr")
    return out_types_of(j)


# ---------------------------------------------------------------- properties

for _n in (
    "check",
    "debug_callback",
    "debug_print",
    "io_callback",
    "buffer_callback",
    "pure_callback_ordered",
    "pallas_call",
    "run_state",
):
    define(_n, effectful=True)
for _n in (
    "checkpoint",
    "closed_call",
    "cond",
    "core_call",
    "custom_jvp_call",
    "custom_lin",
    "custom_vjp_call",
    "eval_jaxpr",
    "jit",
    "optimization_barrier",
    "pjit",
    "remat2",
    "scan",
    "while",
):
    define(_n, multiple_results=True)
for _n, _body in (
    ("jit", "jaxpr"),
    ("pjit", "jaxpr"),
    ("closed_call", "call_jaxpr"),
    ("core_call", "call_jaxpr"),
    ("remat2", "jaxpr"),
    ("checkpoint", "jaxpr"),
):
    define(_n, call_body=_body, inlinable=_n not in ("remat2", "checkpoint"))


# ---------------------------------------------------------------- printing


def _print_jit(e, style):
    d = dict(e.params)
    d.pop("inline", None)
    for k, hidden in (
        ("donated_invars", lambda v: isinstance(v, tuple) and not any(v)),
        ("in_shardings", lambda v: isinstance(v, tuple) and all(map(unspecified, v))),
        ("out_shardings", lambda v: isinstance(v, tuple) and all(map(unspecified, v))),
        ("in_layouts", lambda v: isinstance(v, tuple) and all(x is None for x in v)),
        ("out_layouts", lambda v: isinstance(v, tuple) and all(x is None for x in v)),
        ("keep_unused", lambda v: v is False),
        (
            "ctx_mesh",
            lambda v: v is None or format_value(v) in ("Mesh()", "AbstractMesh((), axis_types=())"),
        ),
        ("compiler_options_kvs", lambda v: v is None or v == ()),
    ):
        if k in d and hidden(d[k]):
            del d[k]
    return name_first(d)


def _print_custom_call(e, style):
    if style.version < (0, 5):
        return sorted_params(e.params)
    d = dict(e.params)
    if "num_consts" in d and d["num_consts"] == 0 and d["num_consts"] is not False:
        del d["num_consts"]
    if e.prim == "custom_vjp_call":
        d.pop("out_trees", None)
    return name_first(d)


def _print_custom_lin(e, style):
    return drop("out_avals")(e, style) if style.version >= (0, 5) else sorted_params(e.params)


for _n in ("jit", "pjit"):
    define(_n, print_params=_print_jit)
for _n in ("custom_jvp_call", "custom_vjp_call"):
    define(_n, print_params=_print_custom_call)
define("check", print_params=drop("err_tree"))
define("custom_lin", print_params=_print_custom_lin)


def _restyle_jit(prim, params, e, style):
    return style.call_prim, params


for _n in ("jit", "pjit"):
    define(_n, restyle=_restyle_jit)
