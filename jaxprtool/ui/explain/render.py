"""Rendering for `explain`: the recorded walk on a rich Console (terminal, plain text or,
through a recording console, HTML).  Program text is only ever printed as `Text`, never read
as rich markup."""

from __future__ import annotations

from ...core import JaxprError, shown_path
from ...lazy import np
from ..tables import print_table
from .record import SEGMENT, ExplainData, summarize

HEADINGS = {
    1: "1. Primal equations",
    2: "2. Forward: JVP rules",
    3: "3. Linear program and residuals",
    4: "4. Reverse walk (transpose)",
    5: "5. Derivative",
}

STAGES = {2: "forward (JVP)", 3: "linearize", 4: "reverse (transpose)", 5: "derivative check"}


def _small(a) -> str | None:
    a = np.asarray(a)
    if a.size == 0 or a.size > 12 or a.dtype.kind == "V":
        return None
    return np.array2string(a, precision=5, separator=", ", suppress_small=False).replace("\n", "")


class _Out:
    """Lines, code blocks and headings on one console."""

    def __init__(self, console, wrap: bool = True, on_section=None):
        self.console = console
        self.wrap = wrap
        self.on_section = on_section

    def line(self, *parts, indent=0):
        from rich.text import Text

        t = Text(" " * indent)
        for p in parts:
            if isinstance(p, tuple):
                t.append(p[0], style=p[1])
            else:
                t.append(p)
        self.console.print(t, soft_wrap=not self.wrap)

    def code(self, text, indent=4, style="cyan"):
        for ln in text.splitlines():
            self.line((ln, style), indent=indent)

    def heading(self, n):
        from rich.text import Text

        if self.on_section is not None:  # a page of collapsible sections (--html)
            self.on_section(HEADINGS[n])
            return
        self.console.print()
        self.console.rule(Text(HEADINGS[n], style="bold"), align="left")

    def stop(self, err: JaxprError, indent=2):
        loc = f"{err.loc}: " if err.loc else ""
        self.line(("walk stops here: ", "bold red"), loc + err.message, indent=indent)

    def fallbacks(self, notes, indent=4):
        for f in notes:
            self.line(("fallback: ", "bold yellow"), f, indent=indent)

    def blank(self):
        self.console.print()


def render(data: ExplainData, console, wrap: bool = True, on_section=None) -> None:
    """Print the walk on a rich Console (Text objects only: program text is never markup);
    `wrap=False`: no line is cut at the console's width (a pipe, a file).  `on_section(title)`:
    called at each stage instead of printing its heading (the HTML page's sections)."""
    from rich.text import Text

    out = _Out(console, wrap, on_section)
    console.print(
        Text(f"explain {shown_path(data.label)}  (mode {data.mode})", style="bold underline"),
        soft_wrap=True,
    )
    out.heading(1)
    out.code(data.primal_text, indent=2, style="")
    out.heading(2)
    _forward(data, out)

    def final_stop(stage_shown_by_a_step: bool):
        if not stage_shown_by_a_step:
            out.blank()
            out.stop(data.error)
        stage = STAGES.get(data.stopped_in, "")
        out.line(("stopped in the ", "bold red"), (stage, "bold red"), (" stage", "bold red"))

    if data.stopped_in == 2:
        final_stop(any(s.error is not None for s in data.forward))
        return
    if data.mode != "jvp":
        out.heading(3)
        if data.stopped_in == 3:
            final_stop(False)
            return
        _linear(data, out)
        out.heading(4)
        _reverse(data, out)
        if data.stopped_in == 4:
            final_stop(any(s.error is not None for s in data.reverse))
            return
    out.heading(5)
    _derivative(data, out)
    if data.stopped_in == 5:
        final_stop(False)
        return
    if not data.analytic:
        out.line(("no analytic formula: the program is not a single elementwise primitive", "dim"))
    verdict = "all checks pass" if data.passed else "a check FAILED"
    if data.passed and any(c.inconclusive for c in data.checks):
        verdict = "inconclusive at this point (see the checks), no check FAILED"
    out.line(("result: ", "bold"), (verdict, "bold green" if data.passed else "bold red"))


def _forward(data: ExplainData, out: _Out) -> None:
    if data.tangent_inputs:
        names = [v.name for v in data.tangent_inputs]
    else:
        names = [f"t_{n}" for n, m in zip(data.input_names, data.in_mask) if m]
    out.line("tangent inputs: ", ", ".join(names), "  (random direction v)")
    if data.zoom is not None:
        _summary(out, "forward steps per segment of primal equations", _forward_rows(data))
    for s in filter(data.forward_shown, data.forward):
        out.blank()
        out.line((f"eqn {s.index}  ", "bold"), (s.text.splitlines()[0], "cyan"))
        for extra in s.text.splitlines()[1:]:
            out.line((extra, "cyan"), indent=6)
        if s.constant:
            out.line(("no tangent (all inputs constant)", "dim"), indent=4)
            continue
        kind = s.kind or "no rule"
        out.line("rule: ", (kind, "bold magenta"), f" ({s.eqn.prim})", indent=4)
        out.fallbacks(s.fallbacks)
        if s.error is not None:
            out.stop(s.error, indent=4)
            break
        out.line(
            "tangents in: ", ", ".join(f"{v.name}  {v.summary}" for v in s.tangents_in), indent=4
        )
        if s.primal_side:
            out.line("primal side (residual work):", indent=4)
            for t in s.primal_side:
                out.code(t, indent=6, style="green")
        if s.tangent_eqns:
            out.line("tangent equations:", indent=4)
            for t in s.tangent_eqns:
                out.code(t, indent=6, style="yellow")
        for v in s.tangents_out:
            out.line("tangent out: ", (v.name, "bold"), "  ", v.summary, indent=4)
        for n in s.zero_outs:
            out.line(f"tangent of {n}: symbolic zero", indent=4)


def _counts(names, top: int = 4) -> str:
    """'dot_general x6, add x4, ...': the most frequent names first."""
    from collections import Counter

    common = Counter(names).most_common()
    text = ", ".join(f"{n} x{k}" for n, k in common[:top])
    return text + (f", +{len(common) - top} more" if len(common) > top else "")


def _segments(steps, index):
    """The steps in runs of SEGMENT consecutive indices: [(first, last, steps)]."""
    runs: dict[int, list] = {}
    for s in steps:
        runs.setdefault(index(s) // SEGMENT, []).append(s)
    return [
        (min(map(index, ss)), max(map(index, ss)), sorted(ss, key=index))
        for _, ss in sorted(runs.items())
    ]


def _forward_rows(data: ExplainData):
    header = ("eqns", "primitives", "JVP rules", "tangent eqns", "residual work", "first")
    rows = []
    for a, b, ss in _segments(data.forward, lambda s: s.index):
        live = [s for s in ss if not s.constant]
        rows.append(
            (
                f"{a}-{b}",
                _counts(s.eqn.prim for s in ss),
                _counts((s.kind or "no rule") for s in live) or "no tangent",
                str(sum(len(s.tangent_eqns) for s in live)),
                str(sum(len(s.primal_side) for s in live)),
                ss[0].text.splitlines()[0][:60],
            )
        )
    return header, rows


def _reverse_rows(data: ExplainData):
    header = ("linear eqns", "primitives", "skipped", "transpose eqns", "accumulations")
    rows = []
    for a, b, ss in _segments([s for s in data.reverse if s.index >= 0], lambda s: s.index):
        rows.append(
            (
                f"{a}-{b}",
                _counts(s.prim for s in ss),
                str(sum(s.skipped for s in ss)),
                str(sum(len(s.eqns) for s in ss)),
                str(sum(len(s.accumulations) for s in ss)),
            )
        )
    return header, rows


def _summary(out: _Out, title: str, table_rows) -> None:
    """A table of segments, and how to zoom into one."""
    from rich.table import Table
    from rich.text import Text

    header, rows = table_rows
    table = Table(title=title, title_justify="left")
    for col in header:
        table.add_column(col, overflow="fold")
    for row in rows:
        table.add_row(*map(Text, row))
    print_table(out.console, table)
    out.line(
        (
            "zoom in: --eqns A-B (primal equations A to B), --only PRIM (one primitive), "
            "--all (every step)",
            "dim",
        ),
        indent=2,
    )


def _linear(data: ExplainData, out: _Out) -> None:
    from rich.table import Table
    from rich.text import Text

    if data.zoom is not None:  # a large program: its size, and what prints it
        n = len(data.linear_text.splitlines())
        out.line(
            f"the linear program: {n} lines, {len(data.residuals)} residuals "
            "(`jaxprtool linearize` prints it)",
            indent=2,
        )
        return
    out.code(data.linear_text, indent=2, style="")
    out.blank()
    table = Table(title="residuals", show_lines=False, title_justify="left")
    for col in ("residual", "value", "origin"):
        table.add_column(col, overflow="fold")
    for r in data.residuals:
        table.add_row(Text(r.value.name), Text(r.value.summary), Text(r.origin))
    if not data.residuals:
        out.line("no residuals: the linear program uses no primal values", indent=2)
    else:
        print_table(out.console, table)


def _reverse(data: ExplainData, out: _Out) -> None:
    line = out.line
    if data.zoom is not None:
        _summary(out, "reverse steps per segment of linear equations", _reverse_rows(data))
    for s in filter(data.reverse_shown, data.reverse):
        out.blank()
        if s.index < 0:
            line(
                ("seed  ", "bold"),
                "output cotangents",
                f" ({'1.0 for grad' if data.mode == 'grad' else 'random w'})",
            )
            for v in data.seeds:
                note = (
                    "  (constant output: no cotangent flows back)"
                    if v.name in data.constant_outputs
                    else ""
                )
                line((v.name, "bold"), "  ", v.summary, note, indent=4)
            for t in s.eqns:
                out.code(t, indent=6, style="yellow")
            for m in s.moves:
                line(f"ct[{m.target}] <- ", (m.value.name, "bold"), indent=4)
            continue
        first, *rest = s.text.splitlines()
        line((f"linear eqn {s.index}  ", "bold"), (first, "cyan"))
        for extra in rest:
            line((extra, "cyan"), indent=6)
        if s.skipped:
            line(("no cotangent reaches it: skipped", "dim"), indent=4)
            continue
        for v in s.cts_out:
            line("cotangent in: ", (v.name, "bold"), "  ", v.summary, indent=4)
        out.fallbacks(s.fallbacks)
        if s.error is not None:
            out.stop(s.error, indent=4)
            break
        if s.eqns:
            line("transpose equations:", indent=4)
            for t in s.eqns:
                out.code(t, indent=6, style="yellow")
        for m in s.moves:
            line(f"ct[{m.target}] <- ", (m.value.name, "bold"), "  ", m.value.summary, indent=4)
        for a in s.accumulations:
            line(
                ("accumulation: ", "bold magenta"),
                f"ct[{a.target}] = add_any {a.previous.name} {a.contribution.name} -> ",
                (a.result.name, "bold"),
                f"  ({a.target} is used {a.uses} times)  ",
                a.result.summary,
                indent=4,
            )


def _derivative(data: ExplainData, out: _Out) -> None:
    from rich.table import Table
    from rich.text import Text

    line = out.line
    if data.program_text and data.zoom is not None:
        n = len(data.program_text.splitlines())
        line(f"the program the walks built: {n} lines (`{data.program_command}` prints it)")
        out.blank()
    elif data.program_text:
        line(f"the program the walks built (`{data.program_command}` prints the same):")
        out.code(data.program_text, indent=2, style="")
        out.blank()
    if data.mode == "jvp":
        line("output tangents J v for the random direction v:")
    elif data.mode == "vjp":
        line("input cotangents J^T w for the random output cotangent w:")
    else:
        line("the gradient:")
    for name, arr in data.derivative:
        line((name, "bold"), "  ", summarize(arr), indent=2)
        small = _small(arr)
        if small:
            line(small, indent=4)
    out.blank()
    table = Table(title="checks", title_justify="left")
    for col in ("check", "error", "tolerance", "result"):
        table.add_column(col, overflow="fold")
    for c in data.checks:
        if c.inconclusive is not None:  # the point, not the rules: NaN there, unsettled
            verdict = Text(c.verdict, style="yellow")
        elif c.passed:
            verdict = Text("pass", style="green")
        else:
            verdict = Text("FAIL", style="bold red")
        table.add_row(Text(c.name), f"{c.error:.2e}", f"{c.tolerance:.0e}", verdict)
    print_table(out.console, table)
    judged = {c.judged_in for c in data.checks if c.judged_in}
    if judged:
        where = ", ".join(sorted(judged)).replace(
            "f64", "float64 (finite differences and the derivative in float64 copies, on the CPU)"
        )
        line(f"judged in {where}", indent=0)
    if data.fallbacks:
        line(("differentiated by a fallback or a plugin rule:", "bold yellow"))
        for where, what in data.fallbacks:
            line(f"{where}: {what}", indent=2)
