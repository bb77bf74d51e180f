"""What `run` reports: the outputs written (`-o`), printed (`--print-values`) and compared
with `--expected-output`."""

from __future__ import annotations

import sys

import click

from ..core import JaxprError
from ..lazy import np


def print_summary(outs, jaxpr) -> None:
    from rich.table import Table

    from ..backend.values import summary, type_str
    from ..io import console

    table = Table(title=f"{len(outs)} output{'s' if len(outs) != 1 else ''}", show_lines=False)
    for col in ("#", "type", "values", "min", "max", "mean", "NaN"):
        table.add_column(
            col, justify="right" if col in ("#", "min", "max", "mean", "NaN") else "left"
        )
    for i, o in enumerate(outs):
        s = summary(o)
        vals = ", ".join(f"{v:.6g}" if isinstance(v, float) else str(v) for v in s["values"])
        if s["size"] > len(s["values"]):
            vals += ", ..."
        table.add_row(
            f"out{i}",
            type_str(s["shape"], np.asarray(o).dtype) if s["dtype"] != "float0" else "float0",
            vals,
            f"{s['min']:.6g}" if "min" in s else "",
            f"{s['max']:.6g}" if "max" in s else "",
            f"{s['mean']:.6g}" if "mean" in s else "",
            str(s.get("nan", "")),
        )
    from ..ui.tables import print_table

    print_table(console(sys.stdout), table)


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
