"""Running a command over its inputs, with the pass-manager instruments MLIR users expect.

* Inputs: one FILE, several FILES, folders of JAX dumps (`JAX_DUMP_IR_TO` with
  `JAX_DUMP_IR_MODES=jaxpr` writes `*.jaxpr.txt` files), and with `--split-input-file`
  several programs in one file, separated by a marker line (`# -----`, or MLIR's
  `// -----`), each processed on its own.  The parts are parsed with their line numbers
  in the whole file, so errors are located where the reader sees them; a failed part does
  not stop the others (exit 1 at the end).  The outputs are joined by `# -----` lines, so
  the result splits the same way again.
* Instruments (`Instruments`): `--verify-each` runs the checker after every pass (and after
  the transformation of an AD command) and stops, naming the pass and printing the
  program, at the first that does not check; `--print-before=P`, `--print-after=P`,
  `--print-after-change`, `--print-after-all` print the program on standard error as
  `# ----- IR Dump After P (2/3) -----` followed by its text: comment lines the parser
  skips, so a dump reads back with `--split-input-file`; `--timing` prints a table of
  the wall time of each stage (read, parse, check, every pass, print, write).
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Callable, Iterable
from contextlib import contextmanager, nullcontext

from ..cli import option
from ..core import Jaxpr, JaxprError, Loc, ProgramError
from ..declare import Param
from ..io import Pieces, Reported, ReportedTrouble, echo
from ..lazy import LazyPattern

#: a line that separates the programs of a split input file: `# -----` or `// -----`
#: (anything after the dashes is a comment: pass dumps put their header there)
SPLIT_MARKER = LazyPattern(r"^[ \t]*(?:#|//)[ \t]*-----[^\n]*$", re.M)
#: what the tool writes between the programs of a split output
SPLIT_LINE = "# -----"

# ---------------------------------------------------------------- timing


class Timer:
    """Wall time per stage, in first-seen order; a stage seen twice adds up (and counts).

    As mlir-opt's `--mlir-timing`, the table ends with a `rest` row (the time between the
    stages: imports, the command's own set-up) so the rows add up to the total; `startup`
    (seconds from the process's start to this timer's, when known) is a row of its own,
    before the stages, and part of the total."""

    def __init__(self, startup: float | None = None):
        self.rows: dict[str, list] = {}
        self.start = time.perf_counter()
        self.startup = startup

    @contextmanager
    def stage(self, name: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            row = self.rows.setdefault(name, [0.0, 0])
            row[0] += time.perf_counter() - t0
            row[1] += 1

    def table_rows(self) -> list[tuple[str, str, float]]:
        """(stage, runs, seconds) for every row, `total` last."""
        work = time.perf_counter() - self.start
        rows = [("start-up", "1", self.startup)] if self.startup is not None else []
        rows += [(name, str(runs), secs) for name, (secs, runs) in self.rows.items()]
        staged = sum(secs for name, (secs, _) in self.rows.items())
        rows.append(("rest", "", max(work - staged, 0.0)))
        rows.append(("total", "", work + (self.startup or 0.0)))
        return rows

    def render(self, stream=None) -> None:
        from rich.table import Table

        from ..io import console
        from ..ui.tables import print_table

        rows = self.table_rows()
        total = rows[-1][2]
        table = Table(title="timing (wall clock)", title_justify="left")
        table.add_column("stage")
        table.add_column("runs", justify="right")
        table.add_column("time (ms)", justify="right")
        table.add_column("%", justify="right")
        for name, runs, secs in rows:
            share = 100 * secs / total if total > 0 else 0.0
            bold = "bold" if name == "total" else None
            table.add_row(name, runs, f"{secs * 1e3:.3f}", f"{share:.1f}", style=bold)
        print_table(console(stream or sys.stderr), table)


def process_age() -> float | None:
    """Seconds since this process started (Linux's /proc, at the kernel's clock-tick
    resolution, 10 ms), or None where that is not known."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22: starttime
        return max(time.clock_gettime(time.CLOCK_BOOTTIME) - started, 0.0)
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def _startup() -> float | None:
    """The start-up row's time: the process's age when the tool is its own program (not
    when a library or a test runner calls the command)."""
    from .. import cli

    return process_age() if cli.is_standalone() else None


@contextmanager
def timed(name: str):
    """A context that adds its wall time to stage `name` of the running --timing table and
    names the stage in the progress line (on a terminal)."""
    from ..cli import options_of
    from ..io import progress, progress_stage

    timer = options_of().timer
    staged = progress_stage(name) if progress.open else nullcontext()
    with staged, timer.stage(name) if timer is not None else nullcontext():
        yield


# ---------------------------------------------------------------- instruments


class VerifyFailed(Reported):
    """--verify-each found a program that does not check (already reported: exit 1)."""


class Instruments:
    """What to do around each pass: verify, print before/after, time."""

    def __init__(
        self,
        verify_each: bool = False,
        print_before: frozenset[str] = frozenset(),
        print_after: frozenset[str] = frozenset(),
        print_after_change: bool = False,
        print_after_all: bool = False,
        timing: bool = False,
    ) -> None:
        self.verify_each = verify_each
        self.print_before = print_before
        self.print_after = print_after
        self.print_after_change = print_after_change
        self.print_after_all = print_after_all
        self.timing = timing
        #: mesh axis sizes the command line gives (`--mesh x=2`) for the rules that need them
        self.mesh: dict[str, int] | None = None
        #: program -> text, in the output's style (set by the command for each input)
        self.render: Callable[[Jaxpr], str] | None = None
        #: how many steps the current input goes through (for the `(2/3)` of the dumps)
        self.total = 0
        self.done = 0
        #: the mesh axis sizes of the current input (`shardings.axis_sizes`), found by its
        #: first step: every later step transforms a program made from it, whose parameters
        #: print its meshes or fewer (a walk of the whole program per input, not per step)
        self.axis_sizes: dict | None = None

    def start(self, render: Callable[[Jaxpr], str], total: int) -> None:
        """A new input: its printer and its number of steps."""
        self.render, self.total, self.done = render, total, 0
        self.axis_sizes = None

    def _dumps_after(self, name: str) -> bool:
        return self.print_after_all or name in self.print_after

    def run_step(self, name: str, label: str, jaxpr: Jaxpr, fn: Callable, view=None):
        """Run fn(jaxpr) as step `name` (written `label`, e.g. `inline{names=relu}`);
        `view(result)` is the program to verify and print when the result is not a jaxpr."""
        from ..core import gc_paused
        from ..shardings import axis_sizes, axis_sizes_in_force

        self.done += 1
        tag = f"{label} ({self.done}/{self.total})" if self.total > 1 else label
        if self.print_before and (name in self.print_before or "all" in self.print_before):
            self.dump(f"IR Dump Before {tag}", jaxpr)
        with timed(label), gc_paused():
            if self.axis_sizes is None:
                self.axis_sizes = axis_sizes(jaxpr, self.mesh)
            with axis_sizes_in_force(self.axis_sizes):
                result = fn(jaxpr)
        out = view(result) if view is not None else result
        if self.verify_each:
            with timed(f"verify after {label}"):
                self.verify(out, label, tag)
        wants = self._dumps_after(name) or "all" in self.print_after
        if self.print_after_change:
            if (wants or not (self.print_after_all or self.print_after)) and _changed(jaxpr, out):
                self.dump(f"IR Dump After {tag}", out)
        elif wants:
            self.dump(f"IR Dump After {tag}", out)
        return result

    def pipeline(self, jaxpr: Jaxpr, steps: Iterable) -> Jaxpr:
        """Run the `PipelineStep`s of a parsed pipeline in order.  The result is the program
        the command prints and, but for a split input's parts, the process's last: kept to
        the exit of the `jaxprtool` program (`keep_last_until_exit`), not freed equation by
        equation after the printing (0.15 s of grad at 100k equations)."""
        from ..cli import keep_last_until_exit

        for step in steps:
            jaxpr = self.run_step(step.name, str(step), jaxpr, step.run)
        keep_last_until_exit(jaxpr)
        return jaxpr

    def text(self, jaxpr: Jaxpr) -> str:
        if self.render is not None:
            return self.render(jaxpr)
        from ..text.printer import print_jaxpr
        from ..text.style import detect_style

        return print_jaxpr(jaxpr, detect_style(jaxpr))

    def dump(self, header: str, jaxpr: Jaxpr) -> None:
        """`# ----- HEADER -----` and the program, on standard error."""
        from ..io import console, highlighted, use_color

        text = self.text(jaxpr)
        line = f"{SPLIT_LINE} {header} -----"
        if use_color(sys.stderr):
            con = console(sys.stderr, soft_wrap=True)
            con.print(highlighted(line + "\n" + text))
        else:
            echo(line, err=True)
            echo(text, err=True)

    def verify(self, jaxpr: Jaxpr, label: str, tag: str) -> None:
        """The checker on the result of a step; on errors, report them located in the
        printed program (shown under a dump header) and raise VerifyFailed."""
        from ..check import check
        from ..io import remember_source, report

        errors = [d for d in check(jaxpr, None) if d.kind == "error"]
        if not errors:
            return
        what = f"<after {label}>"
        try:
            text = self.text(jaxpr) + "\n"
        except Exception:  # noqa: BLE001 - a program too broken to print: report without it
            text = None
        located = []
        if text is not None:
            located = _recheck(text, what)
        report(
            JaxprError(
                f"--verify-each: the program after '{tag}' does not pass the checker "
                f"({len(errors)} error{'s' if len(errors) != 1 else ''}); it is printed below "
                f"as {what}"
            )
        )
        if text is not None:
            self.dump(f"IR Dump After {tag} (failed verification)", jaxpr)
            remember_source(what, text)
        for d in located or errors:
            report(d)
        raise VerifyFailed(f"verification failed after '{tag}'")


def _recheck(text: str, path: str) -> list:
    """The checker's errors on `text` re-read as `path` (located in the printed program)."""
    from ..check import check
    from ..text.parser import parse

    try:
        j = parse(text, path).jaxpr
    except JaxprError as e:
        return [e]
    return [d for d in check(j, path) if d.kind == "error"]


def _changed(before: Jaxpr, after: Jaxpr) -> bool:
    from ..core import alpha_equal

    return before is not after and not alpha_equal(before, after)


# ---------------------------------------------------------------- options


def _names(ctx, param, values) -> frozenset[str]:
    """`--print-after dce,cse --print-after fold` -> {dce, cse, fold}; each a pass (or the
    command's transformation, or `all`)."""
    from ..passes.registry import PASSES

    known = set(PASSES) | {"all"} | set(_transforms(ctx))
    out = set()
    for value in values or ():
        for name in value.split(","):
            name = name.strip()
            if not name:
                continue
            if name not in known:
                import click

                raise click.BadParameter(
                    f"unknown pass '{name}' (known: {', '.join(sorted(known))})"
                )
            out.add(name)
    return frozenset(out)


def _transforms(ctx) -> tuple[str, ...]:
    """The step names of the command's own transformation (`grad` for grad)."""
    cmd = ctx.command if ctx is not None else None
    return getattr(getattr(cmd, "callback", None), "__jaxprtool_transforms__", ())


def complete_pass_list(ctx, param, incomplete: str):
    """Shell completion of a comma list of pass names (`-p inline,dc<TAB>`)."""
    from click.shell_completion import CompletionItem

    from ..passes.registry import PASSES

    head, sep, last = incomplete.rpartition(",")
    prefix = head + sep
    names = list(PASSES) + list(_transforms(ctx))
    return [
        CompletionItem(prefix + n, help=PASSES[n].help if n in PASSES else None)
        for n in names
        if n.startswith(last)
    ]


def _option_specs() -> list[tuple[list[str], dict]]:
    """(declarations, keyword arguments) of each pass-manager flag."""
    return [
        (
            ["--verify-each"],
            dict(
                is_flag=True,
                help="Run the checker after every pass; stop at the first failure, naming "
                "the pass and printing the program.",
            ),
        ),
        (
            ["--print-before"],
            dict(
                multiple=True,
                metavar="PASS,...",
                callback=_names,
                shell_complete=complete_pass_list,
                help="Print the program on stderr before each of these passes (or all).",
            ),
        ),
        (
            ["--print-after"],
            dict(
                multiple=True,
                metavar="PASS,...",
                callback=_names,
                shell_complete=complete_pass_list,
                help="Print the program on stderr after each of these passes (or all).",
            ),
        ),
        (
            ["--print-after-change"],
            dict(
                is_flag=True,
                help="Print after a pass only when it changed the program (alone: after "
                "every pass that changed it).",
            ),
        ),
        (
            ["--print-after-all"],
            dict(is_flag=True, help="Print the program on stderr after each pass."),
        ),
        SPLIT_SPEC,
        TIMING_SPEC,
    ]


SPLIT_SPEC = (
    ["--split-input-file", "split_input"],
    dict(
        is_flag=True,
        help="The input holds several programs separated by '# -----' lines; process each "
        "on its own (outputs separated the same way).",
    ),
)
TIMING_SPEC = (
    ["--timing"],
    dict(
        is_flag=True,
        help="Print a table of the wall time of each stage (parse, check, passes, print) "
        "on stderr.",
    ),
)


def manager_params() -> list[Param]:
    """The pass-manager flags as parameters (for commands built from pass records)."""
    return [Param("option", tuple(decls), kw) for decls, kw in _option_specs()]


def split_option(f):
    """Decorator: `--split-input-file` (the function gets `split_input`)."""
    return option(*SPLIT_SPEC[0], **SPLIT_SPEC[1])(f)


def timing_option(f):
    """Decorator: `--timing` (the function gets `timing`)."""
    return option(*TIMING_SPEC[0], **TIMING_SPEC[1])(f)


_MANAGER_KEYS = (
    "verify_each",
    "print_before",
    "print_after",
    "print_after_change",
    "print_after_all",
    "timing",
)


def instruments_from(kwargs: dict) -> Instruments:
    """Pop the pass-manager flags out of a command's keyword arguments."""
    values = {k: kwargs.pop(k) for k in _MANAGER_KEYS if k in kwargs}
    for k in ("print_before", "print_after"):
        if k in values and not isinstance(values[k], frozenset):
            values[k] = frozenset(values[k] or ())
    return Instruments(**values)


def manager_options(transforms: tuple[str, ...] = ()):
    """Decorator: add the pass-manager flags to a click command function, which then gets
    `inst` (Instruments) and `split_input` instead.  `transforms`: the step names of the command's
    own transformation (accepted by --print-before/--print-after)."""

    def deco(f):
        import functools

        @functools.wraps(f)
        def wrapper(*args, **kwargs):
            inst = instruments_from(kwargs)
            return f(*args, inst=inst, **kwargs)

        for decls, kw in reversed(_option_specs()):
            wrapper = option(*decls, **kw)(wrapper)
        wrapper.__jaxprtool_transforms__ = transforms
        return wrapper

    return deco


# ---------------------------------------------------------------- inputs


class Part:
    """One program of an input: its own text (`source`), the display path, the line of the
    file it starts on (`common.parse_text(..., first_line=)` gives its locations as lines
    of the whole file: a part is never padded with the lines before it, which made memory
    grow as parts times lines), the whole file's text (`file_text`: what `fmt --write`
    rebuilds) and where in it the part starts (`offset`)."""

    def __init__(
        self, source: str, path: str, line: int, file_text: str = "", offset: int = 0
    ) -> None:
        self.source = source
        self.path = path
        self.line = line
        self.file_text = file_text
        self.offset = offset


def split_parts(text: str, path: str) -> list[Part]:
    """The programs of a split input file, each with its line offset; parts holding only
    comments and blank lines (a leading dump header) are dropped."""
    parts = []
    pos, line = 0, 1
    for m in [*SPLIT_MARKER.finditer(text), None]:
        end = m.start() if m else len(text)
        chunk = text[pos:end]
        if _has_code(chunk):
            parts.append(Part(chunk, path, line, text, pos))
        if m is not None:
            line += text.count("\n", pos, m.end()) + 1
            pos = m.end() + 1
    return parts


def _has_code(chunk: str) -> bool:
    return any(s.strip() and not s.lstrip().startswith("#") for s in chunk.splitlines())


def given_or_default(files, command: str) -> tuple[str, ...]:
    """The FILE arguments; with none, standard input, unless it is a terminal (nothing is
    piped in, and no one types a jaxpr): then the current folder, said on standard error,
    as ruff does."""
    from ..io import is_terminal

    if files:
        return tuple(files)
    if not is_terminal(sys.stdin):
        return ("-",)
    echo(
        f"note: no FILE given and nothing piped in: {command} reads the current folder (.)",
        err=True,
    )
    return (".",)


def expand_inputs(files: Iterable[str]) -> list[str]:
    """FILE arguments with each folder replaced by its jaxpr files (`*.jaxpr`, and the
    `*.jaxpr.txt` files of a JAX_DUMP_IR_TO folder), recursively, in name order, leaving out
    what ruff leaves out (`walk.jaxpr_files`): hidden folders, virtual environments and what
    `.gitignore` files ignore."""
    from ..core import UsageProblem
    from .walk import jaxpr_files

    out = []
    for f in files:
        if f != "-" and os.path.isdir(f):
            found = jaxpr_files(f)
            if not found:
                raise UsageProblem(f"folder '{f}' holds no *.jaxpr or *.jaxpr.txt files")
            out.extend(found)
        else:
            out.append(f)
    return out


def read_parts(file: str | None, split: bool | str) -> list[Part]:
    """The parts of one input (one part without --split-input-file; `split="auto"`: split
    when the file has a `# -----` line)."""
    from ..cli import options_of
    from ..io import read_source, remember_source

    with timed("read"):
        text, path = read_source(file, options_of().max_input)
    remember_source(path, text)
    if split == "auto":
        split = SPLIT_MARKER.search(text) is not None
    if not split:
        return [Part(text, path, 1, text)]
    parts = split_parts(text, path)
    if not parts:
        raise JaxprError(
            f"no program in {path}: every part between '{SPLIT_LINE}' lines is empty",
            Loc(path, 1, 1),
        )
    return parts


def _joined(outputs: list) -> str | Pieces:
    """The outputs, each ending its last line, with `# -----` lines between them; one
    printout in pieces as it is (its text ends with its newline)."""
    if len(outputs) == 1 and isinstance(outputs[0], Pieces):
        return outputs[0]
    texts = [str(t) for t in outputs]
    return f"{SPLIT_LINE}\n".join(t if t.endswith("\n") else t + "\n" for t in texts)


def run_parts(
    files: Iterable[str | None],
    split: bool,
    body: Callable[[Part], str | Pieces | None],
    out: str | None = None,
    inst: Instruments | None = None,
    keep_going: bool = False,
) -> bool:
    """body(part) -> output text for each part of each input; outputs joined by `# -----`
    lines and written to `out` (or standard output).  With several parts (or
    `keep_going`), an error in one is reported and the others still run; then nothing is
    written, to `out` or standard output, and the result is False: every part is checked
    before any is written.
    A single part's error propagates (the command's usual exit status)."""
    from ..cli import options_of
    from ..io import remember_source, report, write_program

    options = options_of()
    options.timer = Timer(_startup()) if inst is not None and inst.timing else None
    try:
        outputs: list[str | Pieces] = []
        ok = True
        unreadable = False
        files = list(files)
        tolerant = keep_going or split or len(files) > 1
        for file in files:
            try:
                parts = read_parts(file, split)
            except JaxprError as e:
                if not tolerant or (e.exit_code != 1 and len(files) == 1):
                    raise
                report(e)  # the other files are still read; exit 2 at the end if unreadable
                ok = False
                unreadable |= e.exit_code == 2
                continue
            for part in parts:
                if split:
                    remember_source(part.path, part.source, part.line)  # program_loc: this part
                try:
                    text = body(part)
                except Reported:
                    if not tolerant:
                        raise
                    ok = False
                    continue
                except JaxprError as e:
                    if not tolerant or e.exit_code != 1:
                        raise
                    if isinstance(e, ProgramError) and e.loc is None:
                        from ..io import program_loc

                        e.loc = program_loc(e.where)
                    report(e)
                    ok = False
                    continue
                if text is not None:
                    outputs.append(text)
        if outputs and ok:
            joined = _joined(outputs)
            with timed("write"):
                write_program(joined, out)
        if unreadable:
            raise ReportedTrouble()  # a missing file is bad usage, as with one file
        return ok
    finally:
        if options.timer is not None:
            options.timer.render()
        options.timer = None
