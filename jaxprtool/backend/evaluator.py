"""Walk the IR and bind each equation's JAX primitive; a primitive whose record has an
`evaluate` rule (control flow, through public jax.lax) runs by it, a call (`call_body`) runs
its body.

Two modes share one walker:
  * "jit": every value is a JAX tracer (the walker runs inside jax.jit / jax.grad / ...),
    control flow becomes lax.switch / lax.while_loop / lax.scan;
  * "eager": values are concrete arrays, primitives run one by one and control flow is
    interpreted in Python (so --trace and --debug-nans can look at every iteration).
"""

from __future__ import annotations

import contextlib
import os
import re
from typing import Any, Callable

from ..core import Eqn, Jaxpr, JaxprError, Literal, ShapedArray, Var
from ..params import format_value
from ..record import prim as record_of
from . import prims
from .values import has_nonfinite, literal_value, summary_line

#: primitive name -> fn(*args, **params) -> value or list of values; filled by plugins.
IMPLS: dict[str, Callable] = {}


def refusal(eqn: Eqn) -> str | None:
    """Why this back end cannot run an equation (None: it can): the record's `refusal`
    (a string, or `rule(eqn) -> str`), or a 0.12 high-level primitive (CamelCase name) whose
    record has no `evaluate` rule."""
    name = eqn.prim
    if name in IMPLS:
        return None
    why = record_of(name).refusal
    if callable(why):
        why = why(eqn)
    if why is not None:
        return f"'{name}' {why} (supply it with a plugin: backend.IMPLS['{name}'])"
    if name[:1].isupper() and record_of(name).evaluate is None:
        hi = eqn.params.get("_prim", name)
        return f"'{hi}' is a high-level primitive with no lowering in the text (supply it with a plugin: backend.IMPLS['{hi}'])"
    return None


def unevaluated_param(eqn: Eqn, bound: bool) -> str | None:
    """Why `run` cannot honour a parameter of an equation (None: it honours them all).
    `bound`: the equation binds JAX's primitive, which receives every parameter; otherwise
    the record's `evaluate` rule (or a call's body run) acts on its `evaluated_params` only."""
    rec = record_of(eqn.prim)
    for k, default in (rec.default_params or {}).items():
        v = eqn.params.get(k, default)
        if v != default and not (isinstance(v, (tuple, list)) and tuple(v) == default):
            return (
                f"cannot run '{eqn.prim}': the back end supports {k}={format_value(default)} "
                f"only, the text has {k}={_short(v)}"
            )
    if bound:
        return None
    extra = sorted(
        k
        for k in eqn.params
        if k not in rec.evaluated_params and k not in (rec.default_params or {})
    )
    if extra:
        shown = ", ".join(f"{k}={_short(eqn.params[k])}" for k in extra)
        return (
            f"cannot run '{eqn.prim}': the back end does not evaluate its parameter"
            f"{'s' if len(extra) > 1 else ''} {shown} (supply the primitive with a plugin: "
            f"backend.IMPLS['{eqn.prim}'])"
        )
    return None


def _short(v) -> str:
    text = "{...}" if isinstance(v, Jaxpr) else format_value(v)
    return text if len(text) <= 60 else text[:57] + "..."


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


def located(eqn: Eqn):
    """JAX's name scope `FILE:LINE:COL` (the file's base name) around an equation's lowering,
    so that XLA's HLO metadata (op_name), its dumps and a profiler's trace point back into the
    jaxpr file; no scope for an equation without a location."""
    loc = eqn.loc
    if loc is None:
        return contextlib.nullcontext()
    import jax

    return jax.named_scope(f"{os.path.basename(loc.file)}:{loc.line}:{loc.col}")


def module_name(jaxpr: Jaxpr) -> str:
    """The name XLA's module gets (`jit_NAME`): the jaxpr file's stem as an identifier, or
    `jaxpr` for a program with no file."""
    loc = next((e.loc for e in jaxpr.eqns if e.loc is not None), None)
    stem = os.path.splitext(os.path.basename(loc.file))[0] if loc else ""
    name = re.sub(r"\W", "_", stem).strip("_")
    return name if name and not name[0].isdigit() else f"jaxpr_{name}".rstrip("_")


class AtomLabels:
    """The names `run`'s messages give values (`--trace` lines, NaN reports, errors): a
    variable's printed name where the text gave one, else `v0`, `v1`, ... in the order
    asked; a literal as `value:type`.  (The printer's `text.printer.Namer` chooses the
    names a printout declares; these only label values in messages.)"""

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


def _last_reads(jaxpr: Jaxpr) -> dict[int, list[int]]:
    """The variables each equation reads for the last time (by the equation's index; the
    program's outputs never), whose values the eager walk drops there, as JAX's
    `core.eval_jaxpr` does (`last_used`): a long program run op by op then holds only its live
    values on the device, not every value it made (a body's jaxpr is closed: it reads its own
    environment, never this one)."""
    last: dict[int, int] = {}
    for i, eqn in enumerate(jaxpr.eqns):
        for a in eqn.inputs:
            if not isinstance(a, Literal):
                last[id(a)] = i
    for a in jaxpr.outvars:
        last.pop(id(a), None)
    dead_after: dict[int, list[int]] = {}
    for key, i in last.items():
        dead_after.setdefault(i, []).append(key)
    return dead_after


class Interpreter:
    def __init__(
        self,
        mode: str = "jit",
        dims=None,
        trace=None,
        debug_nans: bool = False,
        observer=None,
        nested=None,
        root=None,
        placement: Callable | None = None,
    ):
        self.mode = mode
        #: `placement(eqn, values, results, eager)`: a call's operands and results placed as
        #: the call asks (a multi-device run's `sharding.enforce_call_placements`); None: as
        #: they are
        self.placement = placement
        #: values of nested jaxprs' constants by `id` of the jaxpr (`backend/consts.py`), and
        #: the program they belong to (for the message naming missing ones)
        self.nested: dict[int, list] = nested or {}
        self.root = root
        self.dims = dims or {}
        self.trace = trace  # callable(str) for --trace lines
        self.debug_nans = debug_nans
        #: eager mode: `observer.eval_step(eqn, invals, outs)` after each top-level equation
        self.observer = observer
        self.labels = AtomLabels()

    # ------------------------------------------------------------ walking

    def run(self, jaxpr: Jaxpr, consts, args, path=()) -> list:
        env: dict[int, Any] = {}
        if not consts and jaxpr.constvars and id(jaxpr) in self.nested:
            consts = self.nested[id(jaxpr)]
        if len(consts) != len(jaxpr.constvars):
            names = ", ".join(self.labels(v) for v in jaxpr.constvars[len(consts) :])
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
                    f"variable '{self.labels(a)}' is used before it is defined"
                ) from None

        eager = self.mode == "eager"
        dead_after = _last_reads(jaxpr) if eager else None
        for i, eqn in enumerate(jaxpr.eqns):
            invals = [read(a, eqn, k) for k, a in enumerate(eqn.inputs)]
            with located(eqn):
                outs = self.eqn(eqn, invals, path)
            if len(outs) != len(eqn.outputs):
                raise JaxprError(
                    f"'{eqn.prim}' produced {len(outs)} results, the equation binds {len(eqn.outputs)}",
                    eqn.loc,
                )
            for v, x in zip(eqn.outputs, outs):
                env[id(v)] = x
            if eager:
                for key in dead_after.get(i, ()):
                    del env[key]
                self.after(eqn, invals, outs, path)
        return [read(a) for a in jaxpr.outvars]

    def after(self, eqn, invals, outs, path):
        if self.observer is not None and not path:
            self.observer.eval_step(eqn, invals, outs)
        where = " > ".join(path)
        if self.trace is not None:
            prefix = f"[{where}] " if where else ""
            for v, x in zip(eqn.outputs, outs):
                self.trace(f"{prefix}{self.labels(v)} = {eqn.prim}: {summary_line(x)}")
        if self.debug_nans and any(has_nonfinite(x) for x in outs):
            lines = [f"'{eqn.prim}' produced NaN/inf: {eqn_text(eqn, self.labels)}"]
            if where:
                lines.append(f"  in {where}")
            for a, x in zip(eqn.inputs, invals):
                lines.append(f"  input {self.labels(a)}: {summary_line(x)}")
            for v, x in zip(eqn.outputs, outs):
                lines.append(f"  output {self.labels(v)}: {summary_line(x)}")
            raise JaxprError("\n".join(lines), eqn.loc)

    def body(self, j: Jaxpr, eqn: Eqn) -> Jaxpr:
        if not isinstance(j, Jaxpr):
            raise JaxprError(f"'{eqn.prim}': its body jaxpr is missing from the text", eqn.loc)
        if j.constvars and id(j) not in self.nested:
            from .consts import missing_message

            raise JaxprError(missing_message(j, eqn, self.root, self.labels), eqn.loc)
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
        rec = record_of(name)
        runs_itself = rec.evaluate is not None or rec.call_body is not None
        why = unevaluated_param(eqn, bound=not runs_itself)
        if why:
            raise JaxprError(why, eqn.loc)
        if rec.evaluate is not None:
            return rec.evaluate(self, eqn, invals, path)
        if rec.call_body is not None:
            return self.call(eqn, invals, path)
        older = prims.older_form(eqn)
        if older is not None:
            return self.run_older(eqn, older, invals, path)
        prim = prims.lookup(name)
        if prim is None:
            raise JaxprError(prims.missing_message(eqn), eqn.loc)
        params = prims.bind_params(eqn, self.dims)
        try:
            out = prim.bind(*invals, **params)
        except JaxprError:
            raise
        except Exception as e:  # noqa: BLE001 - JAX's complaint, located at the equation
            msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise JaxprError(f"'{name}' failed in JAX: {type(e).__name__}: {msg}", eqn.loc) from e
        return list(out) if prim.multiple_results else [out]

    def run_older(self, eqn: Eqn, eqns: list[Eqn], invals: list, path) -> list:
        """`eqn` as the equations `eqns` of the installed JAX's primitives (its record's older
        form, `prims.older_form`), which read its operands and write its results."""
        env: dict[int, Any] = {id(a): x for a, x in zip(eqn.inputs, invals)}
        for e in eqns:
            ins = [
                env[id(a)] if id(a) in env or not isinstance(a, Literal) else literal_value(a)
                for a in e.inputs
            ]
            outs = self.eqn(e, ins, path)
            env.update(zip(map(id, e.outputs), outs))
        return [env[id(v)] for v in eqn.outputs]

    # ------------------------------------------------------------ calls

    def call_fn(self, eqn, path, key: str | None = None):
        """The function running the body of a call: the parameter `key` (by default the
        record's `call_body`), else the equation's first jaxpr."""
        j = eqn.params.get(key or record_of(eqn.prim).call_body)
        if j is None:
            for v in eqn.params.values():
                if isinstance(v, Jaxpr):
                    j = v
                    break
        label = str(eqn.params.get("name", eqn.prim)) if self.mode == "eager" else None
        return self.fn(j, eqn, path, None if label is None else f"{eqn.prim} {label}")

    def call(self, eqn, invals, path, key: str | None = None):
        if self.placement is None:
            return self.call_fn(eqn, path, key)(*invals)
        eager = self.mode == "eager"
        ins = self.placement(eqn, list(invals), False, eager)
        outs = self.call_fn(eqn, path, key)(*ins)
        return self.placement(eqn, list(outs), True, eager)

    # ------------------------------------------------------------ state (refs as boxes)


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
        rule = record_of(eqn.prim).binder_type
        if rule is not None:
            return rule(eqn, pos)
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


class ThreadedRefs:
    """The Refs (Boxes) among the operands of a traced loop or branch.  A traced body cannot
    write into a Python Box (the write would leak a tracer out of the trace), so the Refs'
    values travel through it as extra carries or results (JAX's state discharge) and are
    written back into the Boxes after it."""

    def __init__(self, operands):
        self.boxes: list[Box] = []
        self.at: dict[int, int] = {}  # operand position -> index into `boxes`
        index: dict[int, int] = {}
        for k, x in enumerate(operands):
            if isinstance(x, Box):
                self.at[k] = index.setdefault(id(x), len(self.boxes))
                if self.at[k] == len(self.boxes):
                    self.boxes.append(x)

    def values(self) -> tuple:
        return tuple(b.value for b in self.boxes)

    def inside(self, operands, values) -> tuple[list, list[Box]]:
        """`operands` with fresh Boxes holding `values` (one per Ref), and those Boxes."""
        fresh = [Box(v) for v in values]
        ops = list(operands)
        for k, i in self.at.items():
            ops[k] = fresh[i]
        return ops, fresh

    def write_back(self, values) -> None:
        for b, v in zip(self.boxes, values):
            b.value = v

    def arguments(self, operands) -> list:
        """What `threaded(fn, operands)` takes: the other operands, then the Refs' values."""
        return [x for k, x in enumerate(operands) if k not in self.at] + list(self.values())

    def threaded(self, fn, operands):
        """`fn` over `operands` as a function of `arguments(operands)` that returns its
        results, then the Refs' values after it (for `results`)."""
        n = len(operands) - len(self.at)

        def run(*xs):
            it = iter(xs[:n])
            ops = [None if k in self.at else next(it) for k in range(len(operands))]
            inside, boxes = self.inside(ops, xs[n:])
            return tuple(fn(*inside)) + tuple(b.value for b in boxes)

        return run

    def results(self, out) -> list:
        """The threaded function's results, the Refs' new values written back."""
        n = len(out) - len(self.boxes)
        self.write_back(out[n:])
        return list(out[:n])


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
