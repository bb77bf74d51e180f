"""JAX 0.12's flat trees (`jax/_src/flattree.py`) as printed in scan's `ft_in`/`ft_out`.

Printed forms handled: a tuple `(a, b, ...)` (FTTuple), `None` / `Right(x)` /
`Left(x)` (FTSingleton of a value or an Either), `RightsOnly(t)` (FTFiltered).
`Pytree(...)`, `Static(...)` and dicts are not modelled: `parse_param` returns
None for them and callers keep the scan's signature.

Model: ("tuple", [children]) | ("single", value) | ("filtered", tree); a value is
None, ("R", value) or ("L", value).
"""

from __future__ import annotations

import re

from ..params import format_value

_TOKEN = re.compile(r"\s*(RightsOnly\(|Right\(|Left\(|None|\(|\)|,)")


def parse_text(text: str):
    pos = 0

    def tok():
        nonlocal pos
        m = _TOKEN.match(text, pos)
        if not m:
            raise ValueError(text[pos:])
        pos = m.end()
        return m.group(1)

    def peek():
        m = _TOKEN.match(text, pos)
        return m.group(1) if m else None

    def value():
        t = tok()
        if t == "None":
            return None
        if t in ("Right(", "Left("):
            v = value()
            if tok() != ")":
                raise ValueError
            return ("R" if t == "Right(" else "L", v)
        raise ValueError(t)

    def tree():
        t = peek()
        if t == "(":
            tok()
            elts = []
            while peek() != ")":
                elts.append(tree())
                if peek() == ",":
                    tok()
                elif peek() != ")":
                    raise ValueError
            tok()
            return ("tuple", elts)
        if t == "RightsOnly(":
            tok()
            inner = tree()
            if tok() != ")":
                raise ValueError
            return ("filtered", inner)
        return ("single", value())

    result = tree()
    if text[pos:].strip():
        raise ValueError(text[pos:])
    return result


def parse_param(value):
    """The flat tree of a parameter value (however the parser represented it), or None."""
    try:
        return parse_text(format_value(value))
    except (ValueError, RecursionError):
        return None


def vals(t) -> list:
    kind = t[0]
    if kind == "tuple":
        return [v for c in t[1] for v in vals(c)]
    if kind == "single":
        return [t[1]]
    return [v[1] for v in vals(t[1]) if isinstance(v, tuple) and v[0] == "R"]


def length(t) -> int:
    return len(vals(t))


def unpack(t):
    return t[1] if t[0] == "tuple" else None


def map_tree(t, f):
    kind = t[0]
    if kind == "tuple":
        return ("tuple", [map_tree(c, f) for c in t[1]])
    if kind == "single":
        return ("single", f(t[1]))

    def g(x):
        return ("R", f(x[1])) if isinstance(x, tuple) and x[0] == "R" else x

    return ("filtered", map_tree(t[1], g))


def filter_with_mask(t, mask):
    """`FlatTree.filter_with_mask`: kept values become Right(v), dropped ones Left(v)."""
    it = iter(mask)
    eithers = map_tree(t, lambda v: ("R" if next(it) else "L", v))
    return _ft_filtered(eithers)


def _ft_filtered(t):
    if t[0] == "tuple":
        return ("tuple", [_ft_filtered(c) for c in t[1]])
    return ("filtered", t)


def render(t) -> str:
    kind = t[0]
    if kind == "tuple":
        items = [render(c) for c in t[1]]
        if len(items) == 1:
            return f"({items[0]},)"
        return "(" + ", ".join(items) + ")"
    if kind == "single":
        return _render_value(t[1])
    return f"RightsOnly({render(t[1])})"


def _render_value(v) -> str:
    if v is None:
        return "None"
    return ("Right(" if v[0] == "R" else "Left(") + _render_value(v[1]) + ")"


def to_param(t, old):
    """The new parameter value in the parser's representation (re-parsed from text), falling
    back to an opaque value that prints verbatim."""
    text = render(t)
    try:
        from ..text.values import parse_value

        v, end = parse_value(text, 0, top=True)
        if end == len(text) and format_value(v) == text:
            return v
    except Exception:
        pass
    return _rebuild_like(t, old, text)


def _rebuild_like(t, old, text):
    """Build the value with the same Python shapes the parser used for `old`: tuples for
    FTTuple, None for None, and the class of `old`'s non-tuple leaves for the rest."""
    leaf_cls = _find_leaf_class(old)
    if leaf_cls is None:
        from ..params import Opaque

        leaf_cls = Opaque

    def build(node):
        if node[0] == "tuple":
            return tuple(build(c) for c in node[1])
        r = render(node)
        if r == "None":
            return None
        return leaf_cls(r)

    return build(t)


def _find_leaf_class(v):
    if isinstance(v, tuple):
        for x in v:
            c = _find_leaf_class(x)
            if c is not None:
                return c
        return None
    if v is None:
        return None
    try:
        if str(type(v)(str(v))) == str(v):
            return type(v)
    except Exception:
        return None
    return None
