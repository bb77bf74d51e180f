"""`jaxprtool memory`'s report: the figures as a dict (the --json form), as text, as a
terminal plot (rich) and as an image (matplotlib, imported only for --plot)."""

from __future__ import annotations

import json

from ..core import JaxprError, shown_path
from ..memory import LiveValue, Residuals, Timeline


def human(n: int) -> str:
    """Bytes in binary units: 704 B, 1.5 KiB, 2.0 GiB."""
    if n < 1024:
        return f"{n} B"
    x = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        x /= 1024
        if x < 1024 or unit == "TiB":
            return f"{x:.1f} {unit}"
    raise AssertionError("unreachable")


def _value(v: LiveValue) -> dict:
    e = v.eqn
    return {
        "bytes": v.nbytes,
        "type": str(v.var.type) if v.var is not None else None,
        "kind": v.kind,
        "origin": v.origin or None,
        "primitive": e.prim if e is not None else None,
        "loc": str(e.loc) if e is not None and e.loc is not None else None,
    }


def report(
    path: str,
    timeline: Timeline,
    residuals: Residuals | None,
    xla: dict | None,
    top: int,
) -> dict:
    """Every figure, in the form --json prints."""
    at = timeline.peak_eqn
    peak_at = None
    if at is not None:
        peak_at = {
            "step": timeline.peak_index,
            "primitive": at.prim,
            "loc": str(at.loc) if at.loc is not None else None,
        }
    return {
        "file": path,
        "steps": len(timeline.eqns),
        "peak_bytes": timeline.peak_bytes,
        "peak_at": peak_at,
        "input_bytes": timeline.input_bytes,
        "peak_values": [_value(v) for v in timeline.peak_values[:top]],
        "boundary": timeline.boundary,
        "residual_bytes": residuals.total if residuals is not None else None,
        "residuals": [_value(v) for v in residuals.values] if residuals is not None else None,
        "xla": xla,
        "symbolic": timeline.symbolic,
        "timeline": list(timeline.live_bytes),
    }


def to_json(r: dict) -> str:
    """The report as `json.dumps(r, indent=1)` writes it, the timeline (one number per step,
    the report's last key) written in C: json's indenting encoder is pure Python, 0.3 s for a
    million steps (the list's repr, a list of ints, is their JSON: 0.09 s, 0.13 s joined)."""
    timeline = r["timeline"]
    if not timeline or list(r)[-1] != "timeline":
        return json.dumps(r, indent=1)
    head = json.dumps({**r, "timeline": []}, indent=1)  # ends `"timeline": []`, `}`
    items = repr(timeline)[1:-1].replace(", ", ",\n  ")
    return head[: -len("[]\n}")] + "[\n  " + items + "\n ]\n}"


def _where(v: dict) -> str:
    if v["kind"] == "inside":
        return f"inside '{v['primitive']}' at {v['loc']}"
    if v["primitive"] is None:
        return v["origin"] or v["kind"]
    return f"'{v['primitive']}' at {v['loc']}" if v["loc"] else f"'{v['primitive']}'"


def text_lines(r: dict) -> list[str]:
    """The report as plain lines (the terminal plot comes after them)."""
    lines = [f"{shown_path(r['file'])}: {r['steps']} steps (equations, call bodies inlined)"]
    if r["peak_at"] is None:
        lines.append(f"peak: {r['peak_bytes']} bytes ({human(r['peak_bytes'])}): the inputs")
    else:
        p = r["peak_at"]
        where = f" at {p['loc']}" if p["loc"] else ""
        lines.append(
            f"peak: {r['peak_bytes']} bytes ({human(r['peak_bytes'])}) at step {p['step']}, "
            f"'{p['primitive']}'{where}"
        )
    lines.append(f"inputs and constants (live throughout): {r['input_bytes']} bytes")
    if r["peak_values"]:
        lines.append("largest values live at the peak:")
        for v in r["peak_values"]:
            t = f"{v['type']} " if v["type"] else ""
            lines.append(f"  {human(v['bytes']):>10}  {t}{_where(v)}")
    if r["residual_bytes"] is not None:
        lines.append(
            f"residuals (held across the forward/backward boundary at step {r['boundary']}): "
            f"{_count(len(r['residuals']), 'residual')}, {human(r['residual_bytes'])} "
            f"({r['residual_bytes']} bytes)"
        )
        for k, v in enumerate(r["residuals"]):
            lines.append(f"  residual {k}: {v['type']} ({v['bytes']} bytes): {_where(v)}")
    else:
        lines.append("residuals: none measured (no forward/backward boundary in this program)")
    x = r["xla"]
    if x is not None:
        each = f", per device over {x['devices']} devices" if x["per_device"] else ""
        lines.append(
            f"XLA ({x['device']}{each}): temp {x['temp_bytes']} B, argument "
            f"{x['argument_bytes']} B, output {x['output_bytes']} B, alias {x['alias_bytes']} B"
        )
    if r["symbolic"]:
        lines.append("note: symbolic dimensions count as 0: the figures are lower bounds")
    return lines


#: eighths of a character cell, for the top of each column of the terminal plot
_BLOCKS = " ▁▂▃▄▅▆▇█"


def _columns(values: list[int], width: int) -> list[tuple[int, int, int]]:
    """(first step, last step, max bytes) of each plot column: steps grouped evenly into at
    most `width` columns, each step repeated over several columns when there are fewer."""
    n = len(values)
    if n <= width:
        repeat = width // n
        return [(i, i, v) for i, v in enumerate(values) for _ in range(repeat)]
    cols = []
    for c in range(width):
        lo, hi = c * n // width, (c + 1) * n // width - 1
        cols.append((lo, hi, max(values[lo : hi + 1])))
    return cols


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' if n != 1 else ''}"


def terminal_plot(r: dict, width: int, height: int = 8, color: bool = True):
    """rich Text: live bytes against step, the peak (red) and the boundary (`|` below); the
    legend names the colours only where `color` shows them."""
    from rich.text import Text

    values = r["timeline"]
    out = Text()
    if not values:
        return out
    label_w = 11
    cols = _columns(values, max(width - label_w - 1, 8))
    top = max(c[2] for c in cols) or 1
    peak_step = r["peak_at"]["step"]
    boundary = r["boundary"]
    for row in range(height, 0, -1):
        label = human(top) if row == height else ("0 B" if row == 1 else "")
        out.append(f"{label:>{label_w}}│")
        for lo, hi, v in cols:
            eighths = round(v / top * height * 8)
            cell = _BLOCKS[max(0, min(8, eighths - (row - 1) * 8))]
            style = (
                "bold red"
                if lo <= peak_step <= hi
                else ("cyan" if boundary is not None and lo >= boundary else "")
            )
            out.append(cell, style=style)
        out.append("\n")
    marks = []
    for k, (lo, hi, _) in enumerate(cols):
        first = k == 0 or cols[k - 1][0] != lo  # a step's first column carries its mark
        if first and lo <= peak_step <= hi:
            marks.append("^")
        elif first and boundary is not None and lo <= boundary <= hi:
            marks.append("|")
        else:
            marks.append("─")
    out.append(" " * label_w + "└" + "".join(marks) + "\n")
    legend = f"{'':>{label_w}} step 0 .. {len(values) - 1};  ^ peak (step {peak_step})"
    if boundary is not None:
        legend += f";  | forward/backward boundary (step {boundary})"
        legend += ", backward part in cyan" if color else ", backward part after it"
    out.append(legend + "\n")
    return out


def write_plot(r: dict, fmt: str) -> bytes:
    """The timeline drawn with matplotlib, as the bytes of an SVG or PNG file.  The SVG has no
    date and fixed ids, so the same program gives the same file."""
    import io

    try:
        import matplotlib
    except ImportError:
        raise JaxprError(
            "--plot needs matplotlib, which is not installed: pip install 'jaxprtool[plot]' "
            "(or leave out --plot)"
        ) from None

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    values = r["timeline"]
    with matplotlib.rc_context({"svg.hashsalt": "jaxprtool", "svg.fonttype": "none"}):
        fig, ax = plt.subplots(figsize=(9, 3.5))
        try:
            ax.step(range(len(values)), values, where="mid", color="tab:blue", linewidth=1)
            ax.fill_between(range(len(values)), values, step="mid", alpha=0.25, color="tab:blue")
            if r["peak_at"] is not None:
                s = r["peak_at"]["step"]
                ax.plot([s], [r["peak_bytes"]], "v", color="tab:red")
                ax.annotate(
                    f"peak {human(r['peak_bytes'])} ({r['peak_at']['primitive']})",
                    (s, r["peak_bytes"]),
                    textcoords="offset points",
                    xytext=(4, 4),
                    color="tab:red",
                )
            if r["boundary"] is not None:
                ax.axvline(r["boundary"] - 0.5, color="tab:gray", linestyle="--", linewidth=1)
                ax.text(r["boundary"], 0, " forward | backward", color="tab:gray", va="bottom")
            ax.set_xlabel("step (equation, call bodies inlined)")
            ax.set_ylabel("live bytes")
            ax.set_title(r["file"])
            ax.set_ylim(bottom=0)
            fig.tight_layout()
            buf = io.BytesIO()
            metadata = {"Date": None} if fmt == "svg" else {"Software": None}
            fig.savefig(buf, format=fmt, metadata=metadata)
        finally:
            plt.close(fig)
    return buf.getvalue()
