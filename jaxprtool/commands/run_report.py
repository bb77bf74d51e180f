"""What `run` reports: the outputs written (`-o`), printed (`--print-values`) and compared
with `--expected-output`."""

from __future__ import annotations

import sys

import click

from ..core import JaxprError
from ..lazy import np


def print_summary(outs, jaxpr) -> None:
    """One line per output: its values' preview cut to the line (with an ellipsis), and the
    type and statistics whole, however narrow the terminal."""
    from rich.table import Table

    from ..backend.values import summary, type_str
    from ..io import console, is_terminal
    from ..ui.tables import print_table

    rows = []
    for i, o in enumerate(outs):
        s = summary(o)
        vals = ", ".join(f"{v:.6g}" if isinstance(v, float) else str(v) for v in s["values"])
        if s["size"] > len(s["values"]):
            vals += ", ..."
        rows.append(
            [
                f"out{i}",
                type_str(s["shape"], np.asarray(o).dtype) if s["dtype"] != "float0" else "float0",
                vals,
                f"{s['min']:.6g}" if "min" in s else "",
                f"{s['max']:.6g}" if "max" in s else "",
                f"{s['mean']:.6g}" if "mean" in s else "",
                str(s.get("nan", "")),
            ]
        )
    con = console(sys.stdout)
    columns = ("#", "type", "values", "min", "max", "mean", "NaN")
    widths = [max([len(c)] + [len(r[k]) for r in rows]) for k, c in enumerate(columns)]
    # on a terminal, what the line leaves the preview: the other columns whole, 2 of padding
    # each, the rules; a pipe gets the plain table, which never wraps or cuts
    room = con.width - (sum(widths) - widths[2]) - 2 * len(columns) - 8
    if not (con.is_terminal or is_terminal(con.file)):
        room = widths[2]
    if room < 6:  # no room for a preview: the statistics say what the values are
        columns, widths = columns[:2] + columns[3:], widths[:2] + widths[3:]
        rows = [r[:2] + r[3:] for r in rows]
    table = Table(title=f"{len(outs)} output{'s' if len(outs) != 1 else ''}", show_lines=False)
    for col, w in zip(columns, widths):
        right = col not in ("type", "values")
        width = min(w, room) if col == "values" else w
        table.add_column(col, justify="right" if right else "left", no_wrap=True, width=width)
    for r in rows:
        if "values" in columns and len(r[2]) > room:
            r[2] = r[2][: room - 1] + "…"
        table.add_row(*r)
    print_table(con, table)


def report_outputs(outs, jaxpr, output, output_format, print_values) -> None:
    """Write the outputs to `-o` and print them as `--print-values` asks (by default a
    summary table, or nothing when they are written)."""
    from . import run_io

    writes = output is not None or output_format is not None
    if writes:
        run_io.write_outputs(outs, output, output_format)
    shown = print_values or ("none" if writes else "summary")
    if shown == "summary":
        print_summary(outs, jaxpr)
    elif shown == "full":
        run_io.print_full(outs)


def check_expected(outs, want: list, expected: str, rtol: float, atol: float) -> None:
    """Compare the outputs with `want`, read from `--expected-output` before the run: a
    table and an error when they differ."""
    from . import run_io

    rows = run_io.compare(outs, want, rtol, atol)
    if rows:
        run_io.render_mismatches(rows, expected, rtol, atol)
        raise JaxprError(run_io.mismatch_message(rows, len(outs), expected, rtol, atol))
    click.echo(
        f"all {len(outs)} output{'s' if len(outs) != 1 else ''} match '{expected}' "
        f"(rtol={rtol:g}, atol={atol:g})",
        err=True,
    )
