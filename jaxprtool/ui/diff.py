"""Diffs of programs: text diffs for `--diff`, semantic diffs for `jaxprtool diff`.

* `text_diff(before, after)`: a unified diff of two printed programs.
* `show_diff(before_text, after_text)`: that diff on stderr, coloured (rich) on a terminal.
* `semantic_diff(a, b)`: None when the programs are alpha-equivalent, else a unified diff
  of their equations rendered with canonical names (`render_lines`), aligned by a
  name-insensitive key (so a renaming shift does not hide the real change).
"""

from __future__ import annotations

import difflib
import sys
from collections.abc import Callable

import click

from ..core import Jaxpr, Literal, Var, alpha_equal, shown_path
from ..io import use_color
from ..params import NpScalar, Record, format_value
from ..record import prim as record_of

# ---------------------------------------------------------------- text diffs


def text_diff(
    before: str, after: str, a_name: str = "before", b_name: str = "after", context: int = 3
) -> str:
    lines = difflib.unified_diff(
        before.splitlines(),
        after.splitlines(),
        fromfile=shown_path(a_name),  # (a file's name: never a line of its own choosing)
        tofile=shown_path(b_name),
        lineterm="",
        n=context,
    )
    return "\n".join(lines) + "\n" if before != after else ""


def show_text(text: str, stream=None) -> None:
    """Write a unified diff to stderr (or `stream`); on a terminal (colour on) the signs
    are coloured, changed lines get a tinted background and the code is highlighted by
    the jaxpr lexer."""
    stream = stream or sys.stderr
    if not text:
        return
    if use_color(stream):
        from rich.text import Text

        from ..io import console, highlighted

        con = console(stream, soft_wrap=True)
        for line in text.rstrip("\n").split("\n"):
            if line.startswith(("+++", "---")):
                con.print(Text(line, style="bold"))
            elif line.startswith("@@"):
                con.print(Text(line, style="cyan"))
            elif line[:1] in ("+", "-", " "):
                sign = line[:1]
                out = Text(sign, style={"+": "bold green", "-": "bold red"}.get(sign, ""))
                out.append_text(highlighted(line[1:]))
                if sign != " ":
                    out.stylize("on #0f2f0f" if sign == "+" else "on #3a0f0f")
                con.print(out)
            else:
                con.print(Text(line))
    else:
        stream.write(text)
        stream.flush()


def note(text: str) -> None:
    """A note beside a diff on standard error, styled as the diff is coloured (`--color`,
    NO_COLOR, FORCE_COLOR, a terminal: `io.use_color`)."""
    if use_color(sys.stderr):
        from rich.text import Text

        from ..io import console

        console(sys.stderr, soft_wrap=True).print(Text(text, style="cyan"))
    else:
        click.echo(text, err=True)


def show_diff(
    before_text: str, after_text: str, a_name: str = "before", b_name: str = "after"
) -> None:
    d = text_diff(before_text, after_text, a_name, b_name)
    if d:
        show_text(d)
    else:
        note(f"(no change: {shown_path(b_name)} is identical to {shown_path(a_name)})")


def show_change(
    before: Jaxpr,
    after: Jaxpr,
    mode: str,
    before_text: str,
    after_text: str,
    a_name: str = "before",
    b_name: str = "after",
    style=None,
) -> None:
    """`--diff` of a pass or an AD command on stderr.  `semantic` (the default): the two
    programs aligned up to renaming (as `jaxprtool diff` does), showing only the equations
    removed, added or changed, the input in its file's names and the result in those its
    printout (in `style`) shows;
    `text`: a unified diff of the printouts."""
    if mode == "text":
        show_diff(before_text, after_text, a_name, b_name)
        return
    d = semantic_diff(
        before,
        after,
        a_name,
        b_name,
        context=0,
        names_a=source_names(before),
        names_b=printed_names(after, style),
    )
    if d is None:
        note(f"(no change: {shown_path(b_name)} is {shown_path(a_name)} up to variable names)")
    else:
        show_text(d)


# ---------------------------------------------------------------- canonical rendering


class _CanonicalNames:
    """Names variables a, b, c, ... in binding order (one name space for all scopes);
    `preset` fixes some names in advance."""

    def __init__(self, preset: dict[int, str] | None = None, taken: set[str] | None = None):
        self.names: dict[int, str] = dict(preset or {})
        self.taken = set(taken or ()) | set(self.names.values())
        self.count = 0

    def bind(self, v: Var) -> str:
        n = self.names.get(id(v))
        if n is None:
            while True:
                n = _name(self.count)
                self.count += 1
                if n not in self.taken:
                    break
            self.names[id(v)] = n
            self.taken.add(n)
        return n

    def use(self, a) -> str:
        if isinstance(a, Literal):
            return _literal(a)
        n = self.names.get(id(a))
        return n if n is not None else "?"


class _Given:
    """The names one side of a diff is shown in (`names(var)`: the file's own, or those
    its printout shows), with the same interface as `_CanonicalNames`."""

    def __init__(self, names: Callable[[Var], str]):
        self.bind = names

    def use(self, a) -> str:
        return _literal(a) if isinstance(a, Literal) else self.bind(a)


def _literal(a: Literal) -> str:
    return f"{a.value!r}:{a.type}" if not isinstance(a.value, str) else f"{a.value}:{a.type}"


def source_names(jaxpr: Jaxpr) -> Callable[[Var], str]:
    """The names a parsed file gives its variables (`Var.hint`); a variable without one
    (made by a transformation) takes the name the printer would give it."""
    printed = printed_names(jaxpr)
    return lambda v: v.hint or printed(v)


def printed_names(jaxpr: Jaxpr, style=None) -> Callable[[Var], str]:
    from ..text.printer import printed_names as names

    return names(jaxpr, style)


def _name(i: int) -> str:
    s = ""
    i += 1
    while i:
        i, r = divmod(i - 1, 26)
        s = chr(ord("a") + r) + s
    return s


def render_lines(jaxpr: Jaxpr, namer: _CanonicalNames | None = None) -> list[tuple[str, str, list]]:
    """(key, display, binders) per line: display uses canonical names (a, b, ... in binding
    order); key replaces names by types, for alignment; binders are the variables the line
    binds."""
    out: list = []
    _render(jaxpr, 0, out, namer or _CanonicalNames())
    return out


def _render(j: Jaxpr, indent: int, out: list, nm: _CanonicalNames) -> None:
    pad = "  " * indent

    def binders(vs):
        return " ".join(f"{nm.bind(v)}:{v.type}" for v in vs)

    consts = binders(j.constvars)
    ins = binders(j.invars)
    head = f"{{ lambda {consts}; {ins}. let"
    key = f"{{ lambda {' '.join(str(v.type) for v in j.constvars)}; {' '.join(str(v.type) for v in j.invars)}. let"
    out.append((pad + key, pad + head, [*j.constvars, *j.invars]))
    for e in j.eqns:
        simple, nested = [], []
        for k in sorted(e.params):
            v = e.params[k]
            if isinstance(v, Jaxpr) or (
                isinstance(v, (tuple, list)) and v and all(isinstance(x, Jaxpr) for x in v)
            ):
                nested.append((k, v))
            else:
                try:
                    simple.append(f"{k}={format_value(v)}")
                except Exception:
                    simple.append(f"{k}={v!r}")
        params = f"[{' '.join(simple)}]" if simple else ""
        ins_d = " ".join(nm.use(a) for a in e.inputs)
        ins_k = " ".join(str(a.type) if isinstance(a, Var) else nm.use(a) for a in e.inputs)
        outs_d = " ".join(f"{nm.bind(o)}:{o.type}" for o in e.outputs)
        outs_k = " ".join(str(o.type) for o in e.outputs)
        out.append(
            (
                f"{pad}  {outs_k} = {e.prim}{params} {ins_k}",
                f"{pad}  {outs_d} = {e.prim}{params} {ins_d}",
                list(e.outputs),
            )
        )
        for k, v in nested:
            subs = v if isinstance(v, (tuple, list)) else [v]
            for i, sj in enumerate(subs):
                label = f"{pad}    {k}" + (f"[{i}]" if isinstance(v, (tuple, list)) else "") + "="
                out.append((label, label, []))
                _render(sj, indent + 3, out, nm)
    outs = _tuple(nm.use(a) for a in j.outvars)
    outs_k = _tuple(str(a.type) if isinstance(a, Var) else nm.use(a) for a in j.outvars)
    out.append((f"{pad}  in {outs_k} }}", f"{pad}  in {outs} }}", []))


def _tuple(items) -> str:
    """A tuple as JAX prints a program's outputs: `(a,)` for one, `(a, b)`, `()`."""
    items = list(items)
    return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"


def _plain(value, memo: dict):
    """A parameter value with numpy scalars (`np.int64(0)`) replaced by the Python value they
    hold, so that equal values compare (and print) equal; jaxprs inside are rebuilt alike."""
    if isinstance(value, NpScalar):
        return value.value
    if isinstance(value, Jaxpr):
        return plain_values(value, memo)
    if type(value) is tuple:
        return tuple(_plain(v, memo) for v in value)
    if isinstance(value, list):
        return [_plain(v, memo) for v in value]
    if isinstance(value, frozenset):
        return frozenset(_plain(v, memo) for v in value)
    if isinstance(value, Record):
        return Record(value.cls, tuple((k, _plain(v, memo)) for k, v in value.fields))
    return value


def plain_values(jaxpr: Jaxpr, memo: dict | None = None) -> Jaxpr:
    """`jaxpr` with every parameter value `_plain` (the same variables, new equations), and
    the parameters a later JAX added that an older version's text lacks given the value that
    version always used (gather's `out_sharding=None` before 0.12.1: the record's
    `params_since`)."""
    memo = {} if memo is None else memo
    if id(jaxpr) in memo:
        return memo[id(jaxpr)]
    eqns = [e.replace(params=_plain_params(e, memo)) for e in jaxpr.eqns]
    memo[id(jaxpr)] = out = jaxpr.replace(eqns=eqns)
    return out


def _plain_params(e, memo: dict) -> dict:
    params = {k: _plain(v, memo) for k, v in e.params.items()}
    for k, (_, old) in (record_of(e.prim).params_since or {}).items():
        params.setdefault(k, old)
    return params


def semantic_diff(
    a: Jaxpr,
    b: Jaxpr,
    a_name: str = "a",
    b_name: str = "b",
    context: int = 2,
    names_a: Callable[[Var], str] | None = None,
    names_b: Callable[[Var], str] | None = None,
) -> str | None:
    """None when a and b are alpha-equivalent (a numpy scalar parameter equals the Python
    number it holds); else a unified diff of their
    equations.  Lines are aligned by a name-insensitive key and compared in canonical
    names, the variables bound by aligned lines of b taking the names of a's, so only real
    changes (and their data flow) show.  Removed and kept lines are shown in a's names
    (`names_a`, default: the file's own), added lines in b's."""
    a, b = plain_values(a), plain_values(b)
    if alpha_equal(a, b):
        return None
    names_a = names_a or source_names(a)
    names_b = names_b or source_names(b)
    na = _CanonicalNames()
    la = render_lines(a, na)
    pairs = _paired_binders(la, render_lines(b, _CanonicalNames()))
    preset = {id(vb): na.names[id(va)] for va, vb in pairs}
    lb = render_lines(b, _CanonicalNames(preset, taken=set(na.names.values())))
    lines = [f"--- {shown_path(a_name)}", f"+++ {shown_path(b_name)}"]
    names_b = _b_side_names(names_a, names_b, pairs, la, lb)
    shown_a, shown_b = render_lines(a, _Given(names_a)), render_lines(b, _Given(names_b))
    lines += _hunks(la, lb, shown_a, shown_b, context)
    return "\n".join(lines) + "\n"


def _b_side_names(names_a, names_b, pairs, la: list, lb: list) -> Callable[[Var], str]:
    """b's names for its lines, but where one is a's name of another value that b keeps (a
    hunk would show an added line and a kept one binding two values under one name): that
    one primed, `s'`, until it is neither side's.  (A removed line and an added one binding
    one name read as a changed definition, as in any diff.)"""
    partner = {id(vb): names_a(va) for va, vb in pairs}
    kept = set(partner.values())
    a_names = {names_a(v) for line in la for v in line[2]}
    b_names = {names_b(v) for line in lb for v in line[2]}
    primed: dict[int, str] = {}

    def name(v: Var) -> str:
        n = names_b(v)
        if n not in kept or partner.get(id(v)) == n:
            return n
        if id(v) not in primed:
            k = n + "'"
            while k in a_names or k in b_names:
                k += "'"
            primed[id(v)] = k
        return primed[id(v)]

    return name


def rename_map(
    a: Jaxpr,
    b: Jaxpr,
    names_a: Callable[[Var], str] | None = None,
    names_b: Callable[[Var], str] | None = None,
) -> list[tuple[str, str]]:
    """(a's name, b's name) for each variable the diff's alignment pairs with one of b's
    under another name, in a's order (default names: the files' own)."""
    a, b = plain_values(a), plain_values(b)
    names_a = names_a or source_names(a)
    names_b = names_b or source_names(b)
    out: list[tuple[str, str]] = []
    for va, vb in _paired_binders(render_lines(a), render_lines(b)):
        pair = (names_a(va), names_b(vb))
        if pair[0] != pair[1] and pair not in out:
            out.append(pair)
    return out


def _paired_binders(la: list, lb: list) -> list[tuple[Var, Var]]:
    """(a's variable, b's variable) bound by each pair of lines aligned as equal, in order
    (a variable of b paired twice keeps its first partner)."""
    pairs, seen = [], set()
    for tag, a1, a2, b1, b2 in _align([x[0] for x in la], [x[0] for x in lb]):
        if tag != "equal":
            continue
        for x, y in zip(la[a1:a2], lb[b1:b2]):
            for va, vb in zip(x[2], y[2]):
                if id(vb) not in seen:
                    seen.add(id(vb))
                    pairs.append((va, vb))
    return pairs


def _hunks(la, lb, shown_a, shown_b, context: int) -> list[str]:
    """The hunks of the diff: aligned by `la`/`lb` (canonical names), shown as
    `shown_a`/`shown_b` (the same lines in each side's own names)."""
    lines = []
    for group in _RefinedMatcher(la, lb).get_grouped_opcodes(context):
        if all(tag == "equal" for tag, *_ in group):
            continue
        i1, i2, j1, j2 = group[0][1], group[-1][2], group[0][3], group[-1][4]
        lines.append(f"@@ -{i1 + 1},{i2 - i1} +{j1 + 1},{j2 - j1} @@")
        for tag, a1, a2, b1, b2 in group:
            if tag == "equal":
                lines.extend(" " + x[1] for x in shown_a[a1:a2])
                continue
            lines.extend("-" + x[1] for x in shown_a[a1:a2])
            lines.extend("+" + x[1] for x in shown_b[b1:b2])
    if not lines:
        lines.append(
            "@@ the programs differ in what this rendering does not show (effects, weak types) @@"
        )
    return lines


#: above this many differing middle lines, difflib's popular-line heuristic is switched on
#: (alignment gets coarser, but the time stays near linear)
AUTOJUNK_ABOVE = 2000


def _align(ka: list[str], kb: list[str]) -> list[tuple]:
    """difflib opcodes for ka -> kb, after trimming the common prefix and suffix."""
    n = min(len(ka), len(kb))
    p = 0
    while p < n and ka[p] == kb[p]:
        p += 1
    q = 0
    while q < n - p and ka[len(ka) - 1 - q] == kb[len(kb) - 1 - q]:
        q += 1
    ma, mb = ka[p : len(ka) - q], kb[p : len(kb) - q]
    ops = []
    if p:
        ops.append(("equal", 0, p, 0, p))
    if ma or mb:
        big = max(len(ma), len(mb)) > AUTOJUNK_ABOVE
        sm = difflib.SequenceMatcher(None, ma, mb, autojunk=big)
        for tag, a1, a2, b1, b2 in sm.get_opcodes():
            ops.append((tag, a1 + p, a2 + p, b1 + p, b2 + p))
    if q:
        ops.append(("equal", len(ka) - q, len(ka), len(kb) - q, len(kb)))
    # merge adjacent equal runs
    out: list[tuple] = []
    for op in ops:
        if out and op[0] == "equal" and out[-1][0] == "equal" and out[-1][2] == op[1]:
            out[-1] = ("equal", out[-1][1], op[2], out[-1][3], op[4])
        else:
            out.append(op)
    return out or [("equal", 0, 0, 0, 0)]


class _RefinedMatcher(difflib.SequenceMatcher):
    """Aligns by key; lines aligned as equal whose display text differs (same operation and
    types, different data flow) become one-line replacements."""

    def __init__(self, la, lb):
        super().__init__(None, [], [], autojunk=False)
        self.la, self.lb = la, lb

    def get_opcodes(self):
        out = []
        for tag, a1, a2, b1, b2 in _align([x[0] for x in self.la], [x[0] for x in self.lb]):
            if tag != "equal":
                out.append((tag, a1, a2, b1, b2))
                continue
            run = a1
            for k in range(a2 - a1):
                if self.la[a1 + k][1] != self.lb[b1 + k][1]:
                    if run < a1 + k:
                        out.append(("equal", run, a1 + k, b1 + run - a1, b1 + k))
                    out.append(("replace", a1 + k, a1 + k + 1, b1 + k, b1 + k + 1))
                    run = a1 + k + 1
            if run < a2:
                out.append(("equal", run, a2, b1 + run - a1, b2))
        return out
