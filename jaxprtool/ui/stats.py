"""`jaxprtool stats`: counts and cost estimates computed from the types alone.

Definitions (all static, no execution):

* `equations`: total number of equations, nested ones included; `by_primitive` counts them
  by primitive.  A nested jaxpr shared by several equations (hoisted) is counted once.
* `depth`: nesting depth; 0 for a program with no nested jaxprs, 1 when some equation has a
  body, and so on.
* `inputs`, `outputs`, `constvars`: of the top-level jaxpr.
* `residuals`: residual-like values: values computed by a top-level equation (the "primal
  part") that are operands of a top-level equation with a nested body (a jit/pjit/closed_call,
  custom_lin, ... : the nested "linear" call of a linearized program), counted once each;
  `residual_bytes` is their total size.  Top-level inputs passed straight through are not
  counted.
* `flops` (estimate, per execution):
  - elementwise arithmetic, comparisons, select, conversions: one per output element;
  - `dot_general`: 2*M*N*K per batch, i.e. 2 * output elements * contracted size;
  - `conv_general_dilated`: 2 * output elements * kernel window * input features / groups
    (= 2 * out elements * rhs size / rhs output features);
  - reductions, cumulative ops, argmax/argmin, sort: one per input element;
  - data movement (reshape, broadcast, slice, gather, transpose, ...): 0;
  - bodies: jit-like calls count their body once; `scan` counts its body `length` times;
    `while` once (the trip count is unknown; `while_loops` reports how many there are);
    `cond` its most expensive branch.
* `bytes` (estimate): bytes read and written by every equation that is not a call or
  control-flow equation (operands + results), with the same multiplicities as flops;
  `bytes_in`/`bytes_out`: sizes of the top-level inputs (constvars included) and outputs.
"""

from __future__ import annotations

from collections import Counter

from ..core import (
    Eqn,
    Jaxpr,
    RefType,
    ShapedArray,
    Var,
    all_eqns,
    eqn_subjaxprs,
    shown_path,
    value_bytes,
)
from ..record import prim

MOVEMENT = {"squeeze_p"}  # moves data, computes nothing


def _size(t) -> int:
    if isinstance(t, RefType):
        t = t.inner
    return t.size if isinstance(t, ShapedArray) else 0


def depth(j: Jaxpr, _memo=None) -> int:
    memo = {} if _memo is None else _memo
    if id(j) in memo:
        return memo[id(j)]
    d = 0
    for e in j.eqns:
        for s in eqn_subjaxprs(e):
            d = max(d, 1 + depth(s, memo))
    memo[id(j)] = d
    return d


def eqn_flops(e: Eqn) -> int:
    """Flops of one equation, its own work only (bodies excluded): the record's `flops` rule,
    else one per result element."""
    p = e.prim
    if eqn_has_body(e):
        return 0
    rule = prim(p).flops
    if rule is not None:
        return rule(e)
    if p in MOVEMENT:
        return 0
    return sum(_size(o.type) for o in e.outputs)


def eqn_has_body(e: Eqn) -> bool:
    return any(True for _ in eqn_subjaxprs(e))


def _cost(j: Jaxpr, memo: dict) -> tuple[int, int]:
    """(flops, bytes) of one execution of j."""
    if id(j) in memo:
        return memo[id(j)]
    flops = nbytes = 0
    for e in j.eqns:
        subs = list(eqn_subjaxprs(e))
        if not subs:
            flops += eqn_flops(e)
            nbytes += sum(value_bytes(a.type) for a in e.inputs) + sum(
                value_bytes(o.type) for o in e.outputs
            )
            continue
        costs = [_cost(s, memo) for s in subs]
        rule = prim(e.prim).body_cost
        if rule is not None:
            f, b = rule(e, costs)
        else:
            f, b = sum(c[0] for c in costs), sum(c[1] for c in costs)
        flops += f
        nbytes += b
    memo[id(j)] = (flops, nbytes)
    return flops, nbytes


def flops(j: Jaxpr) -> int:
    """Estimated floating-point operations of one run of `j` (bodies included)."""
    return _cost(j, {})[0]


def residuals(j: Jaxpr) -> list[Var]:
    defined = {id(o) for e in j.eqns if not eqn_has_body(e) for o in e.outputs}
    seen: dict[int, Var] = {}
    for e in j.eqns:
        if eqn_has_body(e):
            for a in e.inputs:
                if isinstance(a, Var) and id(a) in defined and id(a) not in seen:
                    seen[id(a)] = a
    return list(seen.values())


def stats(j: Jaxpr) -> dict:
    counts = Counter(e.prim for e in all_eqns(j))
    flops, nbytes = _cost(j, {})
    res = residuals(j)
    return {
        "equations": sum(counts.values()),
        "by_primitive": dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))),
        "depth": depth(j),
        "inputs": len(j.invars),
        "outputs": len(j.outvars),
        "constvars": len(j.constvars),
        "residuals": len(res),
        "residual_bytes": sum(value_bytes(v.type) for v in res),
        "flops": flops,
        "bytes": nbytes,
        "bytes_in": sum(value_bytes(v.type) for v in (*j.constvars, *j.invars)),
        "bytes_out": sum(value_bytes(a.type) for a in j.outvars),
        "while_loops": sum(n for p, n in counts.items() if prim(p).unbounded_loop),
    }


def _human(n: int) -> str:
    for unit in ("", "K", "M", "G", "T"):
        if abs(n) < 1000:
            return f"{n}{unit}" if unit == "" else f"{n:.1f}{unit}"
        n /= 1000
    return f"{n:.1f}P"


def _count(n: int, unit: str = "") -> str:
    """`601`, or `1234567 (1.2M)`: the exact count, and its rounded form when that is
    shorter to read."""
    short = _human(n)
    return f"{n}{unit}" if short == str(n) else f"{n}{unit} ({short}{unit})"


def render_text(s: dict, path: str = "") -> str:
    lines = []
    if path:
        lines.append(shown_path(path))
    lines.append(
        f"equations: {s['equations']}  depth: {s['depth']}  inputs: {s['inputs']}  "
        f"outputs: {s['outputs']}  constvars: {s['constvars']}"
    )
    lines.append(f"residual-like values: {s['residuals']} ({_human(s['residual_bytes'])}B)")
    note = f"  (while loops counted once: {s['while_loops']})" if s["while_loops"] else ""
    lines.append(
        f"estimated flops: {_count(s['flops'])}  bytes accessed: {_count(s['bytes'], 'B')}  "
        f"in: {s['bytes_in']}B  out: {s['bytes_out']}B{note}"
    )
    lines.append("by primitive:")
    width = max((len(k) for k in s["by_primitive"]), default=0)
    for k, v in s["by_primitive"].items():
        lines.append(f"  {k.ljust(width)}  {v}")
    return "\n".join(lines) + "\n"
