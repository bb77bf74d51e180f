"""A jaxpr as a Graphviz data-flow graph (DOT text, written by the `graphviz` package).

Inputs are boxes labelled `a:f32[3]`, equations are ellipses labelled with the primitive
and, on a second line, the results (`c:f32[3]`); outputs are double octagons (`out0 =
d:f32[]`).  The names are those of the program's printout (`jaxprtool fmt`), which names
every variable once, nested jaxprs' included, so a name means one value everywhere.  A nested jaxpr is a cluster: each
operand of the call is connected to the body input it binds (dashed), and each body
output to the call's node, whose edges carry the results on; `collapse_nested` draws a
call as one node instead.  In linearize output the primal part, the residuals and the
linear part are coloured differently, so a reader sees the split at a glance.

Labels are plain text: the `graphviz` package quotes them, and line breaks are DOT's
`\\n` escape, so no backslash reaches the rendered picture.
"""

from __future__ import annotations

from ..core import Eqn, Jaxpr, Literal, ProgramError, Var, eqn_subjaxprs, subjaxprs
from ..record import prim as record_of

PRIMAL_COLOUR = "#dbe9f6"
LINEAR_COLOUR = "#fde0c5"
RESIDUAL_COLOUR = "#f6c6d0"
INPUT_COLOUR = "#e8e8e8"

#: names of the call equation that holds the linear program in linearize output
LINEAR_CALL_NAMES = {"linear", "linearized", "lin"}

#: the largest graph drawn unless --max-nodes says otherwise (Graphviz's layout time grows
#: much faster than linearly; a few thousand nodes already take a while)
MAX_NODES = 5000

#: parameters that hold custom rules, not the body the call runs (not wired to operands)
_RULE_PARAMS = (
    "jaxprtool_jvp",
    "jaxprtool_fwd",
    "jaxprtool_bwd",
    "jvp_jaxpr_fun",
    "fwd_jaxpr_thunk",
)


class GraphTooLarge(ProgramError):
    """More nodes than --max-nodes: about the program as a whole, located at its inputs."""


def is_linear_call(eqn: Eqn) -> bool:
    return eqn.params.get("name") in LINEAR_CALL_NAMES and any(True for _ in eqn_subjaxprs(eqn))


def label(*lines: str) -> str:
    """A node label: each line escaped for DOT (a backslash stays a backslash), joined by
    DOT's centred line break."""
    from graphviz import escape

    return "\\n".join(str(escape(line)) for line in lines if line)


def _bodies(eqn: Eqn) -> list[tuple[str, str, Jaxpr]]:
    """(parameter name, its shown name, jaxpr) for each nested jaxpr of an equation, in
    parameter order (`branches[1]` for the second jaxpr of a parameter that holds several)."""
    out = []
    for key, value in eqn.params.items():
        subs = subjaxprs(value)
        for i, sub in enumerate(subs):
            out.append((key, f"{key}[{i}]" if len(subs) > 1 else key, sub))
    return out


def body_operands(eqn: Eqn, key: str, body: Jaxpr) -> list | None:
    """The operands of `eqn` that the inputs of its nested `body` (parameter `key`) bind, or
    None when that is not a plain correspondence (a custom rule's own signature)."""
    if key in _RULE_PARAMS:
        return None
    rule = record_of(eqn.prim).body_operands
    if rule is not None:
        got = rule(eqn, key, body)
        return got if got is not None and len(got) == len(body.invars) else None
    return list(eqn.inputs) if len(body.invars) == len(eqn.inputs) else None


class _Graph:
    def __init__(self, collapse_nested: bool, max_nodes: int, names):
        from graphviz import Digraph

        self.name = names

        self.g = Digraph("jaxpr")
        self.g.attr(rankdir="TB")
        self.g.attr("node", fontname="monospace", fontsize="10")
        self.collapse = collapse_nested
        self.max_nodes = max_nodes
        self.ids: dict[int, str] = {}
        self.counter = 0
        #: edges that cross a cluster's border, written last at the top level: an edge
        #: written inside a cluster would pull its outer end into that cluster
        self.cross: list[tuple[str, str]] = []

    def node(self, g, prefix: str, text: str, **attrs) -> str:
        self.counter += 1
        if self.counter > self.max_nodes:
            raise GraphTooLarge(
                f"the graph has more than {self.max_nodes} nodes, too many to lay out "
                "quickly: draw it with --collapse-nested, draw a part of the program, or "
                "raise the limit with --max-nodes N",
                "inputs",
            )
        nid = f"{prefix}{self.counter}"
        g.node(nid, label=text, **attrs)
        return nid

    def source(self, g, atom) -> str:
        if isinstance(atom, Literal):
            return self.node(g, "lit", label(_literal(atom)), shape="plaintext")
        return self.ids[id(atom)]

    def typed(self, atom) -> str:
        """`a:f32[3]` (a literal: its text)."""
        if isinstance(atom, Literal):
            return _literal(atom)
        return f"{self.name(atom)}:{atom.type}"

    def jaxpr(self, g, jaxpr: Jaxpr, colour: str, bound: list | None, top: bool) -> list[str]:
        """Draw `jaxpr` into `g`; `bound`: for a body, the node of the operand each input
        binds (None: not connected).  Returns the node of each output."""
        for kind, vs in (("const", jaxpr.constvars), ("in", jaxpr.invars)):
            for i, v in enumerate(vs):
                nid = self.node(
                    g,
                    kind,
                    label(self.typed(v) + (" (const)" if kind == "const" else "")),
                    shape="box",
                    style="filled",
                    fillcolor=INPUT_COLOUR,
                )
                self.ids[id(v)] = nid
                if kind == "in" and bound is not None:
                    self.cross.append((bound[i], nid))
        residuals = self.residuals(jaxpr)
        for eqn in jaxpr.eqns:
            self.eqn(g, eqn, colour, residuals)
        outs = [self.source(g, a) for a in jaxpr.outvars]
        if top:
            for i, (src, atom) in enumerate(zip(outs, jaxpr.outvars)):
                text = label(f"out{i} = {self.typed(atom)}")
                nid = self.node(g, "out", text, shape="doubleoctagon")
                g.edge(src, nid)
        return outs

    @staticmethod
    def residuals(jaxpr: Jaxpr) -> set[int]:
        """Values of the primal part that feed the linear call of a linearize output."""
        res: set[int] = set()
        for eqn in jaxpr.eqns:
            if is_linear_call(eqn):
                res.update(id(a) for a in eqn.inputs if isinstance(a, Var))
        return res

    def eqn(self, g, eqn: Eqn, colour: str, residuals: set[int]) -> None:
        bodies = _bodies(eqn)
        fill = LINEAR_COLOUR if is_linear_call(eqn) else colour
        types = " ".join(self.typed(v) for v in eqn.outputs)
        srcs = [self.source(g, a) for a in eqn.inputs]
        if bodies and not self.collapse:
            name = eqn.params.get("name")
            title = eqn.prim + (f" {name}" if name is not None else "")
            nid = self.node(
                g, "call", label(title, types), shape="ellipse", style="filled", fillcolor=fill
            )
            src_of = {id(a): s for a, s in zip(eqn.inputs, srcs)}
            wired: set[str] = set()
            for key, shown, body in bodies:
                ops = body_operands(eqn, key, body)
                bound = None if ops is None else [src_of[id(a)] for a in ops]
                wired.update(bound or ())
                with g.subgraph(name=f"cluster_{nid}_{self.counter}") as c:
                    c.attr(label=label(f"{title} {shown}"), style="filled", fillcolor=fill)
                    c.attr(fontname="monospace", fontsize="10")
                    saved = dict(self.ids)
                    outs = self.jaxpr(c, body, fill, bound, top=False)
                    self.ids = saved
                self.cross.extend((o, nid) for o in outs)
            # operands bound by no body input (cond's index, a call drawn without wiring)
            for s in srcs:
                if s not in wired:
                    g.edge(s, nid)
        else:
            nid = self.node(
                g, "eqn", label(eqn.prim, types), shape="ellipse", style="filled", fillcolor=fill
            )
            for s in srcs:
                g.edge(s, nid)
        for v in eqn.outputs:
            self.ids[id(v)] = nid
            if id(v) in residuals:
                rid = self.node(
                    g,
                    "res",
                    label(f"residual {self.typed(v)}"),
                    shape="note",
                    style="filled",
                    fillcolor=RESIDUAL_COLOUR,
                )
                g.edge(nid, rid)
                self.ids[id(v)] = rid


def _literal(atom: Literal) -> str:
    from ..text.printer import literal_text

    return literal_text(atom)


def to_dot(
    jaxpr: Jaxpr, collapse_nested: bool = False, max_nodes: int = MAX_NODES, style=None
) -> str:
    """DOT text for `jaxpr`, its variables named as its printout in `style` names them;
    deterministic for a given program.  Raises GraphTooLarge (before any layout) when the
    graph would have more than `max_nodes` nodes."""
    from ..text.printer import printed_names

    w = _Graph(collapse_nested, max_nodes, printed_names(jaxpr, style))
    w.jaxpr(w.g, jaxpr, PRIMAL_COLOUR, None, top=True)
    for a, b in w.cross:
        w.g.edge(a, b, style="dashed")
    return w.g.source
