"""`run --profile DIR`'s table: where the device time went, by XLA operation, each with the
equations of the file it computes.

The back end names each equation's lowering `FILE:LINE:COL/primitive` (the `op_name` of
XLA's metadata), so the optimized HLO says which equations every operation XLA runs was made
from; JAX's profiler trace (`DIR/plugins/profile/*/*.trace.json.gz`) says how long each
operation ran (`hlo_op` of its events; on a TPU the events of the device's "XLA Ops"
thread, named after the operation, within the module's event on its "XLA Modules" thread).  A fusion's time is that of all the equations fused
into it: XLA does not time them apart.  An operation inside a loop or conditional body counts
toward the top-level operation holding it, unless the trace times that one itself.
"""

from __future__ import annotations

import bisect
import gzip
import json
import os
import re
import stat
from collections import deque
from dataclasses import dataclass
from pathlib import Path

_COMPUTATION = re.compile(r"^(?:ENTRY\s+)?%([\w.\-]+)\s*\(.*\{\s*$")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%([\w.\-]+)\s*=")
_CALLEES = re.compile(
    r"\b(?:calls|to_apply|body|condition|true_computation|false_computation|"
    r"branch_computations)=(\{[^}]*\}|%[\w.\-]+)"
)
_OP_NAME = re.compile(r'op_name="([^"]*)"')
_LOCATION = re.compile(r"^.+:\d+:\d+$")
#: rows printed; the rest are summed in one line
MAX_ROWS = 30


@dataclass
class Hlo:
    """What the table needs of an optimized HLO module: its name, the top-level (ENTRY)
    operations in order, and for every operation the computations it calls and its equation."""

    module: str
    entry: list[str]
    calls: dict[str, list[str]]  # operation -> computations it calls
    body: dict[str, list[str]]  # computation -> its operations
    equation: dict[str, str]  # operation -> "FILE:LINE:COL primitive"


def read_hlo(text: str) -> Hlo:
    module = re.search(r"^HloModule\s+([^\s,]+)", text, re.M)
    hlo = Hlo(module.group(1) if module else "", [], {}, {}, {})
    current = None
    for line in text.splitlines():
        head = _COMPUTATION.match(line)
        if head:
            current = head.group(1)
            hlo.body[current] = []
            if line.startswith("ENTRY"):
                hlo.entry = hlo.body[current]
            continue
        op = _INSTRUCTION.match(line)
        if op is None or current is None:
            continue
        name = op.group(1)
        hlo.body[current].append(name)
        hlo.calls[name] = [
            c for group in _CALLEES.findall(line) for c in re.findall(r"%([\w.\-]+)", group)
        ]
        where = _equation(_OP_NAME.search(line))
        if where:
            hlo.equation[name] = where
    return hlo


def _equation(match) -> str | None:
    """`FILE:LINE:COL primitive` of an op_name such as `jit(f)/f.jaxpr:3:5/tanh`."""
    if match is None:
        return None
    parts = match.group(1).split("/")
    for i in range(len(parts) - 2, -1, -1):
        if _LOCATION.match(parts[i]):
            return f"{parts[i]} {parts[i + 1]}"
    return None


def equations_of(hlo: Hlo, op: str) -> list[str]:
    """The equations an operation computes: its own and those of the computations it calls
    (a fusion's fused operations, a loop's body), in the order the HLO lists them."""
    seen: dict[str, None] = {}
    queue = deque([op])
    visited: set[str] = set()
    while queue:
        name = queue.popleft()
        if name in visited:
            continue
        visited.add(name)
        if name in hlo.equation:
            seen.setdefault(hlo.equation[name])
        for comp in hlo.calls.get(name, ()):
            queue.extend(hlo.body.get(comp, ()))
    return sorted(seen, key=_line_order)


def _line_order(equation: str) -> tuple:
    loc = equation.split(" ")[0]
    *_, line, col = loc.split(":")
    return (int(line), int(col), equation) if line.isdigit() and col.isdigit() else (0, 0, equation)


def top_level_of(hlo: Hlo) -> dict[str, str]:
    """Every operation -> the ENTRY operation that holds it (itself at the top level)."""
    owner: dict[str, str] = {}
    for top in hlo.entry:
        stack = [top]
        while stack:
            name = stack.pop()
            if name in owner:
                continue
            owner[name] = top
            for comp in hlo.calls.get(name, ()):
                stack.extend(hlo.body.get(comp, ()))
    return owner


#: where JAX's profiler writes each session's files under the --profile folder
SESSIONS = ("plugins", "profile")
#: the most bytes of a trace read, once unpacked (a 5.8 MB gzip unpacks to gigabytes)
MAX_TRACE_BYTES = 64 * 2**20


class TraceTooLarge(Exception):
    """The trace unpacks to more than MAX_TRACE_BYTES."""


def sessions(folder: str | Path) -> set[str]:
    """The profiler sessions (folders) under `folder` now."""
    try:
        return set(os.listdir(Path(folder, *SESSIONS)))
    except OSError:
        return set()


def this_runs_trace(folder: str | Path, before: set[str]) -> Path | None:
    """The trace the run wrote: in the one session folder that was not there `before`, the
    user's own regular file, never a link (a stale or planted trace under DIR is not it)."""
    new = sorted(sessions(folder) - before)
    found = []
    for session in new:
        path = Path(folder, *SESSIONS, session)
        found += [p for p in sorted(path.glob("*.trace.json.gz")) if _own_file(p)]
    return found[0] if len(found) == 1 else None


def _own_file(path: Path) -> bool:
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid()


def read_events(trace: Path) -> list:
    """The trace's events, reading at most MAX_TRACE_BYTES unpacked (else TraceTooLarge)."""
    fd = os.open(trace, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with open(fd, "rb") as raw, gzip.GzipFile(fileobj=raw) as f:
        data = f.read(MAX_TRACE_BYTES + 1)
    if len(data) > MAX_TRACE_BYTES:
        raise TraceTooLarge(trace)
    return json.loads(data).get("traceEvents", [])


def _device_threads(events) -> tuple[set, set]:
    """The (pid, tid) of the device threads a TPU trace times operations and modules on
    ("XLA Ops", "XLA Modules"; their events carry no `hlo_op`)."""
    ops, modules = set(), set()
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            name = (e.get("args") or {}).get("name")
            if name in ("XLA Ops", "XLA Modules"):
                (ops if name == "XLA Ops" else modules).add((e.get("pid"), e.get("tid")))
    return ops, modules


def _module_spans(events, modules) -> dict:
    """pid -> (starts, [(end, module)]) of the module runs on that device's "XLA Modules"
    thread, in start order (the event is named `jit_f(FINGERPRINT)`)."""
    runs: dict = {}
    for e in events:
        if e.get("ph") == "X" and (e.get("pid"), e.get("tid")) in modules:
            start = float(e.get("ts", 0.0))
            name = re.sub(r"\(\d+\)$", "", e.get("name", ""))
            runs.setdefault(e.get("pid"), []).append(
                (start, start + float(e.get("dur", 0.0)), name)
            )
    spans = {}
    for pid, rs in runs.items():
        rs.sort()
        spans[pid] = ([a for a, _, _ in rs], [(b, m) for _, b, m in rs])
    return spans


def _module_at(spans: dict, pid, ts: float) -> str | None:
    """The module running on device `pid` at time `ts` (module runs do not overlap there)."""
    starts, rest = spans.get(pid, ((), ()))
    k = bisect.bisect_right(starts, ts) - 1
    return rest[k][1] if k >= 0 and ts <= rest[k][0] else None


def _operation(e, op_threads, spans) -> tuple[str | None, str | None]:
    """(operation, module) of a trace event: `hlo_op`/`hlo_module` where the event says
    them (CPU, GPU), else, on a TPU's "XLA Ops" thread, its name and the module running
    then; (None, None) for other events."""
    args = e.get("args") or {}
    if "hlo_op" in args:
        return args["hlo_op"], args.get("hlo_module")
    if (e.get("pid"), e.get("tid")) not in op_threads:
        return None, None
    return e.get("name"), _module_at(spans, e.get("pid"), float(e.get("ts", 0.0)))


def op_times(trace: Path, hlo: Hlo) -> dict[str, tuple[float, int]]:
    """ENTRY operation -> (microseconds, events) from the trace's events of this module."""
    events = read_events(trace)
    owner = top_level_of(hlo)
    op_threads, module_threads = _device_threads(events)
    spans = _module_spans(events, module_threads)
    own: dict[str, list[float]] = {}
    inner: dict[str, list[float]] = {}
    for e in events:
        if e.get("ph") != "X":
            continue
        op, module = _operation(e, op_threads, spans)
        if op not in owner or module not in (None, hlo.module):
            continue
        top = owner[op]
        (own if op == top else inner).setdefault(top, []).append(float(e.get("dur", 0.0)))
    times = {}
    for top in hlo.entry:
        durations = own.get(top) or inner.get(top)
        if durations:
            times[top] = (sum(durations), len(own.get(top) or ()) or len(durations))
    return times


def render(hlo: Hlo, times: dict[str, tuple[float, int]], trace: Path) -> list[str]:
    total = sum(t for t, _ in times.values())
    if not times:
        return [
            f"profile: the trace {trace} times no operation of {hlo.module or 'the program'}: "
            "no per-equation table (the device's trace names its operations otherwise)"
        ]
    order = {op: k for k, op in enumerate(hlo.entry)}
    rows = sorted(times.items(), key=lambda kv: (-kv[1][0], order[kv[0]]))
    lines = [
        f"profile: device time by XLA operation of {hlo.module}, {total / 1e3:.3f} ms in all "
        f"(from {trace}); the equations each one computes (fused equations share its time)",
        f"  {'time':>10}  {'share':>6}  {'calls':>5}  {'XLA operation':<28}  equations",
    ]
    for op, (us, n) in rows[:MAX_ROWS]:
        eqns = ", ".join(equations_of(hlo, op)) or "(none of the file's: a copy or layout change)"
        share = 100 * us / total if total else 0.0
        lines.append(f"  {us / 1e3:>7.3f} ms  {share:>5.1f}%  {n:>5}  {op:<28}  {eqns}")
    rest = rows[MAX_ROWS:]
    if rest:
        us = sum(t for _, (t, _) in rest)
        lines.append(f"  {us / 1e3:>7.3f} ms  ... and {len(rest)} more operations")
    return lines
