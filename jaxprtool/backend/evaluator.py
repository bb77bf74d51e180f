"""Walk the IR and bind each equation's JAX primitive; control flow through public jax.lax.

Two modes share one walker:
  * "jit": every value is a JAX tracer (the walker runs inside jax.jit / jax.grad / ...),
    control flow becomes lax.switch / lax.while_loop / lax.scan;
  * "eager": values are concrete arrays, primitives run one by one and control flow is
    interpreted in Python (so --trace and --debug-nans can look at every iteration).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..core import Eqn, Jaxpr, JaxprError, Literal, ShapedArray, Var
from ..params import Record, format_value
from ..record import prim as record_of
from . import prims
from .values import has_nonfinite, literal_value, static_shape, summary_line

#: primitive name -> fn(*args, **params) -> value or list of values; filled by plugins.
IMPLS: dict[str, Callable] = {}

CALLBACKS = {
    "debug_callback",
    "debug_print",
    "io_callback",
    "pure_callback",
    "ffi_call",
    "buffer_callback",
}
KERNELS = {
    "pallas_call",
    "tpu_custom_call",
    "mosaic_gpu_p",
    "triton_kernel_call",
    "core_map",
    "custom_call",
}
MULTI_DEVICE = {
    "shard_map",
    "xla_pmap",
}
HI_PRIMS = {"call_hi_primitive", "call_hi_primitive_linearized"}
#: primitives that hold a Python function the text cannot carry
PY_FUNCS = {"custom_lin"}
CALLS = {
    "jit": "jaxpr",
    "pjit": "jaxpr",
    "closed_call": "call_jaxpr",
    "core_call": "call_jaxpr",
    "named_call": "call_jaxpr",
    "remat2": "jaxpr",
    "checkpoint": "jaxpr",
    "remat": "jaxpr",
    "custom_jvp_call": "call_jaxpr",
    "custom_vjp_call": "call_jaxpr",
    "custom_vjp_call_jaxpr": "fun_jaxpr",
    "custom_vmap_call": "call",
    "eval_jaxpr": "call_jaxpr",
    "xla_metadata_call": "jaxpr",
    "compute_on": "jaxpr",
}


def refusal(eqn: Eqn) -> str | None:
    """Why this back end cannot run an equation (None: it can)."""
    name = eqn.prim
    if name in IMPLS:
        return None
    if name in CALLBACKS:
        return f"'{name}' calls back into Python, which cannot run from a text file (supply it with a plugin: backend.IMPLS['{name}'])"
    if name in PY_FUNCS:
        return f"'{name}' holds a Python function ({format_value(eqn.params.get('bwd'))}) that the text does not contain (supply it with a plugin: backend.IMPLS['{name}'])"
    if name in KERNELS:
        return f"'{name}' is a custom kernel the back end cannot run (supply it with a plugin: backend.IMPLS['{name}'])"
    if name in MULTI_DEVICE:
        return f"'{name}' is a multi-device primitive; running on several devices is not supported (supply it with a plugin: backend.IMPLS['{name}'])"
    why = record_of(name).refusal
    if why is not None:
        return f"'{name}' {why} (supply it with a plugin: backend.IMPLS['{name}'])"
    if name in HI_PRIMS or name[:1].isupper():
        hi = eqn.params.get("_prim", name)
        return f"'{hi}' is a high-level primitive with no lowering in the text (supply it with a plugin: backend.IMPLS['{hi}'])"
    return None


def eqn_text(eqn: Eqn, names: Callable[[Any], str]) -> str:
    """A one-line rendering of an equation (nested jaxprs elided)."""

    def val(v):
        if isinstance(v, Jaxpr):
            return "{...}"
        if isinstance(v, (tuple, list)) and any(isinstance(x, Jaxpr) for x in v):
            return "(" + " ".join(val(x) for x in v) + ")"
        return format_value(v)

    outs = " ".join(f"{names(o)}:{o.type}" for o in eqn.outputs) or "_"
    ps = " ".join(f"{k}={val(v)}" for k, v in eqn.params.items())
    ins = " ".join(names(a) for a in eqn.inputs)
    return f"{outs} = {eqn.prim}{'[' + ps + ']' if ps else ''} {ins}".rstrip()


class Namer:
    def __init__(self):
        self.names: dict[int, str] = {}

    def __call__(self, a) -> str:
        if isinstance(a, Literal):
            return f"{a.value}:{a.type}"
        n = self.names.get(id(a))
        if n is None:
            n = a.hint or f"v{len(self.names)}"
            self.names[id(a)] = n
        return n


class Interpreter:
    def __init__(
        self, mode: str = "jit", dims=None, trace=None, debug_nans: bool = False, observer=None
    ):
        self.mode = mode
        self.dims = dims or {}
        self.trace = trace  # callable(str) for --trace lines
        self.debug_nans = debug_nans
        #: eager mode: `observer.eval_step(eqn, invals, outs)` after each top-level equation
        self.observer = observer
        self.namer = Namer()

    # ------------------------------------------------------------ walking

    def run(self, jaxpr: Jaxpr, consts, args, path=()) -> list:
        env: dict[int, Any] = {}
        if len(consts) != len(jaxpr.constvars):
            names = ", ".join(self.namer(v) for v in jaxpr.constvars[len(consts) :])
            raise JaxprError(f"constants without values: {names}")
        if len(args) != len(jaxpr.invars):
            raise JaxprError(f"jaxpr expects {len(jaxpr.invars)} inputs, got {len(args)}")
        for v, x in zip(jaxpr.constvars, consts):
            env[id(v)] = x
        for v, x in zip(jaxpr.invars, args):
            env[id(v)] = x

        def read(a, eqn=None, pos=0):
            if isinstance(a, Literal):
                if not a.typed and eqn is not None:
                    return literal_value(Literal(a.value, untyped_literal_type(eqn, pos, a), True))
                return literal_value(a)
            try:
                return env[id(a)]
            except KeyError:
                raise JaxprError(
                    f"variable '{self.namer(a)}' is used before it is defined"
                ) from None

        for eqn in jaxpr.eqns:
            invals = [read(a, eqn, k) for k, a in enumerate(eqn.inputs)]
            outs = self.eqn(eqn, invals, path)
            if len(outs) != len(eqn.outputs):
                raise JaxprError(
                    f"'{eqn.prim}' produced {len(outs)} results, the equation binds {len(eqn.outputs)}",
                    eqn.loc,
                )
            for v, x in zip(eqn.outputs, outs):
                env[id(v)] = x
            if self.mode == "eager":
                self.after(eqn, invals, outs, path)
        return [read(a) for a in jaxpr.outvars]

    def after(self, eqn, invals, outs, path):
        if self.observer is not None and not path:
            self.observer.eval_step(eqn, invals, outs)
        where = " > ".join(path)
        if self.trace is not None:
            prefix = f"[{where}] " if where else ""
            for v, x in zip(eqn.outputs, outs):
                self.trace(f"{prefix}{self.namer(v)} = {eqn.prim}: {summary_line(x)}")
        if self.debug_nans and any(has_nonfinite(x) for x in outs):
            lines = [f"'{eqn.prim}' produced NaN/inf: {eqn_text(eqn, self.namer)}"]
            if where:
                lines.append(f"  in {where}")
            for a, x in zip(eqn.inputs, invals):
                lines.append(f"  input {self.namer(a)}: {summary_line(x)}")
            for v, x in zip(eqn.outputs, outs):
                lines.append(f"  output {self.namer(v)}: {summary_line(x)}")
            raise JaxprError("\n".join(lines), eqn.loc)

    def body(self, j: Jaxpr, eqn: Eqn) -> Jaxpr:
        if not isinstance(j, Jaxpr):
            raise JaxprError(f"'{eqn.prim}': its body jaxpr is missing from the text", eqn.loc)
        if j.constvars:
            raise JaxprError(
                f"'{eqn.prim}': its nested jaxpr has constants ({len(j.constvars)}) whose values the text does not contain",
                eqn.loc,
            )
        return j

    def fn(self, j: Jaxpr, eqn: Eqn, path, label: str | None = None):
        j = self.body(j, eqn)

        def f(*xs):
            return self.run(j, [], list(xs), path + ((label,) if label else ()))

        return f

    # ------------------------------------------------------------ one equation

    def eqn(self, eqn: Eqn, invals: list, path) -> list:
        name = eqn.prim
        if name in IMPLS:
            out = IMPLS[name](*invals, **eqn.params)
            return list(out) if isinstance(out, (list, tuple)) else [out]
        why = refusal(eqn)
        if why:
            raise JaxprError(f"cannot run {why}", eqn.loc)
        rule = record_of(name).evaluate
        if rule is not None:
            return rule(self, eqn, invals, path)
        if name in CALLS:
            return self.call(eqn, invals, path)
        handler = getattr(self, "p_" + name.replace("-", "_"), None)
        if handler is not None:
            return handler(eqn, invals, path)
        prim = prims.lookup(name)
        if prim is None:
            raise JaxprError(
                f"cannot run '{name}': the installed JAX has no primitive of that name", eqn.loc
            )
        params = prims.bind_params(eqn, self.dims)
        try:
            out = prim.bind(*invals, **params)
        except JaxprError:
            raise
        except Exception as e:  # noqa: BLE001 - JAX's complaint, located at the equation
            msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise JaxprError(f"'{name}' failed in JAX: {type(e).__name__}: {msg}", eqn.loc) from e
        return list(out) if prim.multiple_results else [out]

    # ------------------------------------------------------------ calls

    def call(self, eqn, invals, path):
        key = CALLS[eqn.prim]
        j = eqn.params.get(key)
        if j is None:
            for v in eqn.params.values():
                if isinstance(v, Jaxpr):
                    j = v
                    break
        label = str(eqn.params.get("name", eqn.prim)) if self.mode == "eager" else None
        f = self.fn(j, eqn, path, None if label is None else f"{eqn.prim} {label}")
        if eqn.prim in ("remat2", "checkpoint", "remat") and self.mode == "jit":
            import jax

            prevent = eqn.params.get("prevent_cse", True)
            return list(jax.checkpoint(lambda *xs: f(*xs), prevent_cse=bool(prevent))(*invals))
        return f(*invals)

    # ------------------------------------------------------------ control flow

    def p_cond(self, eqn, invals, path):
        branches = eqn.params["branches"]
        if isinstance(branches, Jaxpr):
            branches = (branches,)
        idx, ops = invals[0], invals[1:]
        if self.mode == "eager":
            i = int(np.asarray(idx))
            i = min(max(i, 0), len(branches) - 1)
            return self.fn(branches[i], eqn, path, f"cond branch {i}")(*ops)
        import jax
        import jax.numpy as jnp

        fns = [self.fn(b, eqn, path) for b in branches]
        if len(fns) == 1:
            return fns[0](*ops)
        idx = jnp.asarray(idx)
        if idx.dtype == jnp.bool_:
            idx = idx.astype(jnp.int32)
        return list(jax.lax.switch(idx, fns, *ops))

    def p_while(self, eqn, invals, path):
        p = eqn.params
        cn, bn = int(p.get("cond_nconsts", 0)), int(p.get("body_nconsts", 0))
        cconsts, bconsts, init = invals[:cn], invals[cn : cn + bn], invals[cn + bn :]
        cj, bj = self.body(p["cond_jaxpr"], eqn), self.body(p["body_jaxpr"], eqn)
        batched = (
            bool(cj.outvars)
            and isinstance(cj.outvars[0].type, ShapedArray)
            and cj.outvars[0].type.ndim > 0
        )
        import jax.numpy as jnp

        def select(pred, new, old):
            # a batched predicate (vmap of a while): only the rows still running advance
            return [
                jnp.where(jnp.reshape(pred, pred.shape + (1,) * (jnp.ndim(n) - pred.ndim)), n, o)
                for n, o in zip(new, old)
            ]

        if self.mode == "eager":
            carry, i = list(init), 0
            while True:
                (pred,) = self.run(cj, [], list(cconsts) + carry, path + (f"while cond {i}",))
                if not bool(np.asarray(pred).any()):
                    return carry
                new = self.run(bj, [], list(bconsts) + carry, path + (f"while iter {i}",))
                carry = select(jnp.asarray(pred), new, carry) if batched else new
                i += 1
        import jax

        def cond_fun(c):
            pred = self.run(cj, [], list(cconsts) + list(c), path)[0]
            return jnp.any(pred) if batched else pred

        def body_fun(c):
            new = self.run(bj, [], list(bconsts) + list(c), path)
            if batched:
                pred = self.run(cj, [], list(cconsts) + list(c), path)[0]
                new = select(pred, new, list(c))
            return tuple(new)

        return list(jax.lax.while_loop(cond_fun, body_fun, tuple(init)))

    def scan_split(self, eqn, n_in: int, body: Jaxpr) -> tuple[int, int]:
        """(number of consts, number of carries) of a scan, in either encoding."""
        p = eqn.params
        if "num_consts" in p and "num_carry" in p:
            return int(p["num_consts"]), int(p["num_carry"])
        if "ft_in" in p:
            counts = _ft_groups(p["ft_in"])
            if counts is not None and len(counts) == 3 and sum(counts) == n_in:
                return counts[0], counts[1]
            outs = _ft_groups(p.get("ft_out"))
            if outs is not None and len(outs) == 2 and sum(outs) == len(body.outvars):
                n_carry = outs[0]
                n_xs = counts[2] if counts is not None and len(counts) == 3 else 0
                return n_in - n_carry - n_xs, n_carry
        raise JaxprError(
            "'scan': cannot tell its constants, carries and scanned inputs apart", eqn.loc
        )

    def p_scan(self, eqn, invals, path):
        p = eqn.params
        body = self.body(p["jaxpr"], eqn)
        nc, nk = self.scan_split(eqn, len(invals), body)
        consts, init, xs = invals[:nc], invals[nc : nc + nk], invals[nc + nk :]
        length = int(p["length"])
        reverse = bool(p.get("reverse", False))
        if self.mode == "eager":
            import jax.numpy as jnp

            carry, ys = list(init), []
            order = range(length - 1, -1, -1) if reverse else range(length)
            for i in order:
                out = self.run(
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
                    stacked.append(jnp.zeros((0,) + static_shape(t, self.dims), t.np_dtype))
            else:
                stacked = [jnp.stack([y[k] for y in ys]) for k in range(n_y)]
            return carry + stacked
        import jax

        def f(c, x):
            out = self.run(
                body, [], list(consts) + list(c) + (list(x) if x is not None else []), path
            )
            return tuple(out[:nk]), tuple(out[nk:])

        unroll = p.get("unroll", 1)
        unroll = bool(unroll) if isinstance(unroll, bool) else int(unroll)
        carry, ys = jax.lax.scan(
            f, tuple(init), tuple(xs) if xs else None, length=length, reverse=reverse, unroll=unroll
        )
        return list(carry) + list(ys)

    def p_custom_linear_solve(self, eqn, invals, path):
        p = eqn.params
        lengths, jaxprs = p["const_lengths"], p["jaxprs"]
        names = ("matvec", "vecmat", "solve", "transpose_solve")

        def get(rec, k):
            if hasattr(rec, "get"):
                return rec.get(k)
            return rec[names.index(k)]

        counts = [int(get(lengths, k) or 0) for k in names]
        start = sum(counts[:2])
        solve_consts = invals[start : start + counts[2]]
        b = invals[sum(counts) :]
        return self.fn(get(jaxprs, "solve"), eqn, path, "custom_linear_solve")(*solve_consts, *b)

    # ------------------------------------------------------------ state (refs as boxes)

    def p_run_state(self, eqn, invals, path):
        import jax.numpy as jnp

        j = self.body(eqn.params["jaxpr"], eqn)
        init = eqn.params.get("is_initialized")
        boxes = []
        for k, (v, x) in enumerate(zip(j.invars, invals)):
            if init is not None and not init[k]:
                x = jnp.zeros(static_shape(v.type.inner, self.dims), v.type.inner.np_dtype)
            boxes.append(Box(x))
        self.run(j, [], boxes, path + (("run_state",) if self.mode == "eager" else ()))
        return [b.value for b in boxes]

    # ------------------------------------------------------------ primitives of older JAX versions

    def p_optimization_barrier(self, eqn, invals, path):
        import jax

        return list(jax.lax.optimization_barrier(tuple(invals)))


def untyped_literal_type(eqn: Eqn, pos: int, lit: Literal) -> ShapedArray:
    """A type for a literal printed without one (JAX 0.4.35): from the equation's operands."""
    v = lit.value
    if isinstance(v, bool):
        return ShapedArray((), "bool")
    inner = _body_binder_type(eqn, pos)
    if inner is not None:
        return ShapedArray((), inner.dtype)
    rec = record_of(eqn.prim)
    first_index = rec.index_operands
    if first_index is not None and pos >= first_index:
        idx = [
            a.type
            for a in eqn.inputs[first_index:]
            if isinstance(a, Var) and isinstance(a.type, ShapedArray)
        ]
        return ShapedArray((), idx[0].dtype if idx else "i32")
    fixed = record_of(eqn.prim).literal_type
    if fixed is not None and (t := fixed(eqn, pos)) is not None:
        return t
    sibs = [
        a.type
        for k, a in enumerate(eqn.inputs)
        if isinstance(a, Var)
        and isinstance(a.type, ShapedArray)
        and not (fixed is not None and fixed(eqn, k) is not None)
        and not (first_index is not None and k >= first_index)
    ]
    if sibs:
        return ShapedArray((), sibs[0].dtype)
    if rec.literal_like_result and eqn.outputs:
        t = eqn.outputs[0].type
        if isinstance(t, ShapedArray):
            return ShapedArray((), t.dtype)
    if isinstance(v, int):
        return ShapedArray((), "i32")
    if isinstance(v, complex):
        return ShapedArray((), "c64")
    return ShapedArray((), "f32")


def _body_binder_type(eqn: Eqn, pos: int):
    """The type of the nested-jaxpr binder that operand `pos` of a control-flow/call feeds."""
    p = eqn.params
    try:
        if eqn.prim == "while":
            cn, bn = int(p.get("cond_nconsts", 0)), int(p.get("body_nconsts", 0))
            if pos < cn:
                v = p["cond_jaxpr"].invars[pos]
            elif pos < cn + bn:
                v = p["body_jaxpr"].invars[pos - cn]
            else:
                v = p["body_jaxpr"].invars[pos - cn]
            return v.type if isinstance(v.type, ShapedArray) else None
        if eqn.prim == "cond":
            if pos == 0:
                return ShapedArray((), "i32")
            br = p["branches"]
            br = br[0] if isinstance(br, (tuple, list)) else br
            return br.invars[pos - 1].type
        for key in ("jaxpr", "call_jaxpr", "fun_jaxpr", "call"):
            j = p.get(key)
            if isinstance(j, Jaxpr) and len(j.invars) == len(eqn.inputs):
                t = j.invars[pos].type
                return t if isinstance(t, ShapedArray) else None
    except (KeyError, IndexError, AttributeError):
        return None
    return None


class Box:
    """A mutable reference (Ref{...}) while the interpreter runs."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


def _leaves(v) -> int:
    """Number of leaves of a printed flat-tree group (FTTuple / RightsOnly / Pytree forms)."""
    if isinstance(v, Record) and v.cls == "Pytree":
        return _leaves_text(format_value(v.get("vals", ())))
    if isinstance(v, (tuple, list)):
        return sum(_leaves(x) for x in v)
    return _leaves_text(format_value(v) if not isinstance(v, str) else v)


def _ft_groups(v) -> list[int] | None:
    """Leaf counts of the top-level groups of a scan's ft_in / ft_out."""
    if isinstance(v, Record) and v.cls == "Pytree":
        tree = str(v.get("tree", ""))
        inner = tree[tree.find("(") + 1 : tree.rfind(")")].strip()
        if inner.startswith("(") and inner.endswith(")"):
            return [g.count("*") for g in _split_top(inner[1:-1])]
        return None
    if isinstance(v, (tuple, list)):
        return [_leaves(g) for g in v]
    return None


def _split_top(text: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur)
    return out


def _leaves_text(text: str) -> int:
    """Count leaves: None is a leaf; Right(x)/Left(x) are Either leaves; RightsOnly(t) keeps
    the payloads of t's Right leaves; Static(...) has none."""
    import re

    toks = re.findall(
        r"RightsOnly\(|Right\(|Left\(|Static\(|None|\(|\)|\[|\]|,|[^\s,()\[\]]+", text
    )
    pos = 0

    def node():
        # returns a list of leaves: ("plain",) or ("R", payload) or ("L", payload)
        nonlocal pos
        t = toks[pos]
        pos += 1
        if t == "None":
            return [("plain",)]
        if t in ("(", "["):
            close = ")" if t == "(" else "]"
            leaves = []
            while toks[pos] != close:
                if toks[pos] == ",":
                    pos += 1
                    continue
                leaves += node()
            pos += 1
            return leaves
        if t in ("Right(", "Left(", "RightsOnly(", "Static("):
            inner = []
            while toks[pos] != ")":
                if toks[pos] == ",":
                    pos += 1
                    continue
                inner += node()
            pos += 1
            if t == "Static(":
                return []
            if t == "RightsOnly(":
                return [lf[1] for lf in inner if lf[0] == "R"]
            payload = inner[0] if inner else ("plain",)
            return [("R" if t == "Right(" else "L", payload)]
        return [("plain",)]

    n = 0
    while pos < len(toks):
        if toks[pos] in (",", ")", "]"):
            pos += 1
            continue
        n += len(node())
    return n


def needs_x64(jaxpr: Jaxpr) -> bool:
    from ..core import all_eqns

    def wide(t) -> bool:
        return isinstance(t, ShapedArray) and t.dtype in ("f64", "i64", "u64", "c128")

    vs = list(jaxpr.constvars) + list(jaxpr.invars) + [a for a in jaxpr.outvars]
    if any(wide(v.type) for v in vs):
        return True
    for e in all_eqns(jaxpr):
        for a in list(e.inputs) + list(e.outputs):
            if wide(a.type):
                return True
    return False


__all__ = ["Interpreter", "IMPLS", "needs_x64", "refusal", "Var"]
