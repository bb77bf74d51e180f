"""Tables for a person and for a pipe: a rich table (box-drawing characters, wrapped to the
console's width) on a terminal or when colour is forced, else plain aligned text that never
wraps, so a table written to a pipe or a file reads back with `cut`, `awk` or a diff.

The plain form: the title on its own line, the header row, one line per row, then the caption;
columns are separated by two spaces and justified as the rich table's columns say (a column
`justify="right"` is right-aligned); trailing spaces are dropped.
"""

from __future__ import annotations

from ..io import is_terminal

#: between two columns of the plain form
GAP = "  "


def print_table(con, table) -> None:
    """`table` (a rich Table) on the rich Console `con`: as rich draws it when `con` writes
    to a terminal (or is forced to act as one: `--color always`, FORCE_COLOR, an HTML
    recording), else as plain aligned text."""
    if con.is_terminal or is_terminal(con.file):
        con.print(table)
        return
    from rich.text import Text

    con.print(Text(plain_table(con, table)), soft_wrap=True, highlight=False)


def plain_table(con, table) -> str:
    """The plain aligned text of `table` (no final newline); cells are read as `con` would
    render them (markup strings lose their markup, Text objects keep their characters)."""
    headers = [_cell_text(con, c.header) for c in table.columns]
    columns = [[_cell_text(con, x) for x in c.cells] for c in table.columns]
    rows = [list(r) for r in zip(*columns)] if columns else []
    widths = [max(map(len, (h, *col))) for h, col in zip(headers, columns)]
    justify = [c.justify for c in table.columns]
    lines = []
    if table.title:
        lines.append(_cell_text(con, table.title))
    for row in [headers, *rows]:
        cells = [
            cell.rjust(w) if j == "right" else cell.ljust(w)
            for cell, w, j in zip(row, widths, justify)
        ]
        lines.append(GAP.join(cells).rstrip())
    if table.caption:
        lines.append(_cell_text(con, table.caption))
    return "\n".join(lines)


def _cell_text(con, cell) -> str:
    """The characters a cell shows, on one line."""
    from rich.text import Text

    if isinstance(cell, str):
        text = con.render_str(cell).plain
    elif isinstance(cell, Text):
        text = cell.plain
    else:
        text = str(cell)
    return " ".join(text.split("\n"))
