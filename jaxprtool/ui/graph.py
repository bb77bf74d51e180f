"""A jaxpr as a Graphviz data-flow graph (DOT text).

Inputs are boxes, equations are ellipses labelled with primitive and result
types, outputs are double boxes; nested jaxprs become clusters (or one
collapsed node).  In linearize output the primal part, the residuals and the
linear part are coloured differently, so a reader sees the split at a glance.
"""

from __future__ import annotations

from ..core import Eqn, Jaxpr, Literal, Var, eqn_subjaxprs

PRIMAL_COLOUR = "#dbe9f6"
LINEAR_COLOUR = "#fde0c5"
RESIDUAL_COLOUR = "#f6c6d0"
INPUT_COLOUR = "#e8e8e8"

#: names of the call equation that holds the linear program in linearize output
LINEAR_CALL_NAMES = {"linear", "linearized", "lin"}


def _quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def is_linear_call(eqn: Eqn) -> bool:
    return eqn.params.get("name") in LINEAR_CALL_NAMES and any(True for _ in eqn_subjaxprs(eqn))


class _DotWriter:
    def __init__(self, collapse_nested: bool):
        self.collapse = collapse_nested
        self.lines: list[str] = []
        self.ids: dict[int, str] = {}
        self.counter = 0

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def node_of(self, atom, indent: str) -> str:
        if isinstance(atom, Literal):
            nid = self.fresh("lit")
            self.lines.append(
                f"{indent}{nid} [label={_quote(f'{atom.value!r}:{atom.type}')}, shape=plaintext];"
            )
            return nid
        return self.ids[id(atom)]

    def jaxpr(self, jaxpr: Jaxpr, indent: str, colour: str, with_outputs: bool) -> list[str]:
        for kind, vs in (("const", jaxpr.constvars), ("in", jaxpr.invars)):
            for i, v in enumerate(vs):
                nid = self.fresh(kind)
                self.ids[id(v)] = nid
                label = f"{kind}{i}: {v.type}"
                self.lines.append(
                    f"{indent}{nid} [label={_quote(label)}, shape=box, style=filled, fillcolor={_quote(INPUT_COLOUR)}];"
                )
        residuals = self.residuals(jaxpr)
        for eqn in jaxpr.eqns:
            self.eqn(eqn, indent, colour, residuals)
        outs = []
        for i, atom in enumerate(jaxpr.outvars):
            src = self.node_of(atom, indent)
            if with_outputs:
                nid = self.fresh("out")
                self.lines.append(
                    f"{indent}{nid} [label={_quote(f'out{i}: {atom.type}')}, shape=doubleoctagon];"
                )
                self.lines.append(f"{indent}{src} -> {nid};")
            outs.append(src)
        return outs

    @staticmethod
    def residuals(jaxpr: Jaxpr) -> set[int]:
        """Values of the primal part that feed the linear call of a linearize output."""
        res: set[int] = set()
        for eqn in jaxpr.eqns:
            if is_linear_call(eqn):
                res.update(id(a) for a in eqn.inputs if isinstance(a, Var))
        return res

    def eqn(self, eqn: Eqn, indent: str, colour: str, residuals: set[int]) -> None:
        subs = list(eqn_subjaxprs(eqn))
        fill = LINEAR_COLOUR if is_linear_call(eqn) else colour
        types = " ".join(str(v.type) for v in eqn.outputs)
        label = f"{eqn.prim}\\n{types}" if types else eqn.prim
        srcs = [self.node_of(a, indent) for a in eqn.inputs]
        if subs and not self.collapse:
            nid = self.fresh("call")
            self.lines.append(f"{indent}subgraph cluster_{nid} {{")
            self.lines.append(
                f"{indent}  label={_quote(eqn.prim + (' ' + str(eqn.params.get('name')) if 'name' in eqn.params else ''))};"
            )
            self.lines.append(f"{indent}  style=filled; fillcolor={_quote(fill)};")
            self.lines.append(f"{indent}  {nid} [label={_quote(eqn.prim)}, shape=ellipse];")
            for sub in subs:
                saved = dict(self.ids)
                self.jaxpr(sub, indent + "  ", fill, with_outputs=False)
                self.ids = saved
            self.lines.append(f"{indent}}}")
        else:
            nid = self.fresh("eqn")
            self.lines.append(
                f"{indent}{nid} [label={_quote(label)}, shape=ellipse, style=filled, fillcolor={_quote(fill)}];"
            )
        for s in srcs:
            self.lines.append(f"{indent}{s} -> {nid};")
        for v in eqn.outputs:
            self.ids[id(v)] = nid
            if id(v) in residuals:
                rid = self.fresh("res")
                self.lines.append(
                    f"{indent}{rid} [label={_quote(f'residual: {v.type}')}, shape=note, style=filled, "
                    f"fillcolor={_quote(RESIDUAL_COLOUR)}];"
                )
                self.lines.append(f"{indent}{nid} -> {rid};")
                self.ids[id(v)] = rid


def to_dot(jaxpr: Jaxpr, collapse_nested: bool = False) -> str:
    """DOT text for `jaxpr`; deterministic for a given program."""
    w = _DotWriter(collapse_nested)
    w.lines.append("digraph jaxpr {")
    w.lines.append('  rankdir=TB; node [fontname="monospace", fontsize=10];')
    w.jaxpr(jaxpr, "  ", PRIMAL_COLOUR, with_outputs=True)
    w.lines.append("}")
    return "\n".join(w.lines) + "\n"
