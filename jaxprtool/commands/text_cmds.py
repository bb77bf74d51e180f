"""`jaxprtool fmt`: parse a printed jaxpr and print it back in JAX's layout."""

from __future__ import annotations

import sys

from ..cli import ExitStatus, argument, command, guarded, option, options_of
from ..core import JaxprError, Loc
from ..declare import IntRange
from ..io import echo, report
from .common import FILE_ARG, OUT_ARG
from .driver import split_option, timing_option


@command()
@argument("files", nargs=-1, metavar="[FILE|DIR|-]...", type=FILE_ARG)
@option(
    "-o",
    "--output",
    "out",
    metavar="OUT",
    type=OUT_ARG,
    help="Write to OUT (atomically) instead of standard output.",
)
@option(
    "--width",
    type=IntRange(min=1),
    default=80,
    show_default=True,
    help="Line width of the layout.",
)
@option(
    "--check",
    "check_only",
    is_flag=True,
    help="Write nothing; list the FILES (or folders' jaxpr files) whose text is not in "
    "canonical form and exit 1 if there are any (as `ruff format --check`).",
)
@option(
    "-i",
    "--write",
    "write",
    is_flag=True,
    help="Reformat the FILES (and folders' jaxpr files) in place (atomically; unchanged "
    "files are not touched).",
)
@option(
    "--diff",
    "show_diff",
    is_flag=True,
    help="Write nothing; print a unified diff of each file against its canonical form and "
    "exit 1 if there is any (as `ruff format --diff`).",
)
@option("-q", "--quiet", is_flag=True, help="Print no file lists or summary lines (only errors).")
@split_option
@timing_option
def fmt(files, out, width, check_only, write, show_diff, quiet, split_input, timing):
    """Re-print a jaxpr exactly as JAX's str(jaxpr) would.

    Reads FILE (or standard input), and prints it in the style of the JAX
    version it was printed by (detected), or of --jax-style VERSION.  Text
    printed by JAX comes back byte-identical; where JAX's own text would be
    ambiguous (a `_` used inside a nested jaxpr), fresh names are printed.

    With --check, --diff or -i/--write, several FILES and folders are taken (a
    folder stands for its jaxpr files, skipping hidden folders, virtual
    environments and what .gitignore ignores) and compared with their canonical
    form (a missing final newline is allowed, as JAX's dumps have none); a file
    with `# -----` lines is read as the programs between them, and the comment
    lines before each program are kept.

    \b
    Example:
      jaxprtool fmt f.jaxpr
      jaxprtool --jax-style 0.4.35 fmt f.jaxpr -o old.jaxpr
      jaxprtool fmt --width 120 - < f.jaxpr
      jaxprtool fmt --check samples/
      jaxprtool fmt -i a.jaxpr b.jaxpr dumps/
    """
    if check_only or write or show_diff:
        if out:
            raise _usage_error("--check, --diff and -i write no output file: drop -o")
        if write and (check_only or show_diff):
            raise _usage_error("-i/--write rewrites files; --check and --diff write nothing")
        if write and (not files or "-" in files):
            raise _usage_error("-i/--write rewrites files: name them (not standard input)")
        mode = "write" if write else "diff" if show_diff else "check"
        return guarded(_fmt_files)(files, width, mode, quiet, split_input, timing)
    if len(files) > 1:
        raise _usage_error(
            "fmt prints one program (or one --split-input-file); give one FILE, or "
            "--check / --diff / -i FILES"
        )
    from ..io import is_terminal

    if not files and is_terminal(sys.stdin):
        raise _usage_error(
            "fmt prints FILE, or standard input, and nothing is piped in: give a FILE "
            "(or `fmt --check .` for the folder)"
        )
    return guarded(_fmt)(files[0] if files else "-", out, width, split_input, timing)


def _usage_error(message: str):
    import click

    return click.UsageError(message)


def _formatted(part, width, jax_style: str | None, end: str = "") -> str:
    """The canonical text of one part (without the final newline), then `end`, in the style
    of --jax-style (`jax_style`), else the one it was printed in."""
    from ..core import JaxprError
    from ..text.printer import print_jaxpr
    from ..text.values import light_dtypes
    from .common import output_style, parse_text
    from .driver import timed

    with light_dtypes(not jax_style):  # only printed, unless restyled
        jaxpr = parse_text(part.source, part.path, verify=False, first_line=part.line)
    style = output_style(jaxpr, jax_style)
    if jax_style:
        from ..ad.api import restyle

        jaxpr = restyle(_without_traced_rules(jaxpr), style)
    try:
        with timed("print"):
            return print_jaxpr(jaxpr, style, width, end)
    except RecursionError:
        raise JaxprError("input nests too deeply") from None


def _fmt(file, out, width, split_input, timing):
    from .driver import Instruments, run_parts

    jax_style = options_of().jax_style
    ok = run_parts(
        [file],
        split_input,
        lambda p: _formatted(p, width, jax_style, "\n"),
        out,
        Instruments(timing=timing),
    )
    return None if ok else ExitStatus.FAILURE


def _fmt_files(files, width, mode, quiet, split_input, timing):
    """fmt --check / --diff / --write over FILES and folders: each file rebuilt from its
    parts' canonical text (`_rebuilt`), then listed, diffed or written."""
    from ..io import Reported, write_output
    from .driver import Instruments, expand_inputs, given_or_default, run_parts

    inputs = expand_inputs(given_or_default(files, f"fmt --{mode}"))
    done: dict[str, list] = {}  # path -> [(part, canonical text)]
    failed: set[str] = set()
    options = options_of()

    def body(part):
        try:
            done.setdefault(part.path, []).append(
                (part, _formatted(part, width, options.jax_style))
            )
        except BaseException:
            failed.add(part.path)
            raise
        return None

    status = 0
    try:
        if not run_parts(
            inputs, split_input or "auto", body, None, Instruments(timing=timing), True
        ):
            status = 1
    except Reported as e:  # an unreadable file: the others are done, then exit 2
        status = e.exit_code
    changed, unchanged = [], 0
    for path, parts in done.items():
        if path in failed:
            continue
        before = parts[0][0].file_text
        try:
            after = _rebuilt(before, parts)
        except JaxprError as e:
            report(e)
            status = max(status, 1)
            continue
        if after == before or after == before + "\n":
            unchanged += 1
            continue
        changed.append(path)
        if mode == "write":
            write_output(after, path, replacing=before)
        elif mode == "diff":
            from ..ui.diff import show_text, text_diff

            show_text(text_diff(before, after, path, path), sys.stdout)
        elif not quiet:
            echo(f"Would reformat: {options.diagnostics.emitter.listed_path(path)}")
    if not quiet:
        _summary(len(changed), unchanged, mode, status != 0)
    if changed and mode != "write":
        status = max(status, 1)
    return status or None


def _summary(n: int, m: int, mode: str, trouble: bool) -> None:
    """ruff's summary line: `2 files would be reformatted, 3 files already formatted`."""

    def files(k):
        return f"{k} file{'s' if k != 1 else ''}"

    if mode == "write":
        parts = [f"{files(n)} reformatted"] * bool(n) + [f"{files(m)} left unchanged"] * bool(m)
    else:
        parts = [f"{files(n)} would be reformatted"] * bool(n)
        parts += [f"{files(m)} already formatted"] * bool(m)
    if trouble:
        parts.append("some files could not be read (errors above)")
    # (with --diff, standard output is the patch)
    echo(", ".join(parts) or "no files", err=mode == "diff")


def _rebuilt(text: str, parts) -> str:
    """`text` with each part's program replaced by its canonical text; the comment and
    blank lines before a program, the `# -----` lines and what follows a program's last
    line are kept.  A comment inside a program would be lost: refused, located.  (Built
    in one pass: each part spliced into the whole text was quadratic in the number of
    parts.)"""
    pieces, pos = [], 0
    for part, canonical in sorted(parts, key=lambda pc: pc[0].offset):
        chunk = part.source
        head = _leading_comments(chunk)
        program = chunk[len(head) :]
        body = program.rstrip("\n")
        _refuse_inner_comments(body, part.path, part.line + head.count("\n"))
        pieces += [text[pos : part.offset], head, canonical, program[len(body) :]]
        pos = part.offset + len(chunk)
    pieces.append(text[pos:])
    return "".join(pieces)


def _leading_comments(chunk: str) -> str:
    """The blank and comment lines (`#`, `//`) a part starts with."""
    end = 0
    for line in chunk.splitlines(keepends=True):
        s = line.strip()
        if s and not s.startswith(("#", "//")):
            break
        end += len(line)
    return chunk[:end]


def _refuse_inner_comments(body: str, path: str, first_line: int) -> None:
    for k, line in enumerate(body.split("\n")):
        s = line.lstrip()
        if s.startswith(("#", "//")):
            raise JaxprError(
                "fmt cannot keep a comment inside a program (the printer writes none): move "
                "it above the program's first line",
                Loc(path, first_line + k, len(line) - len(s) + 1),
            )


def _without_traced_rules(jaxpr):
    """The program without the custom rules `jaxprtool trace` records (JAX never prints
    them), with a warning per equation that had one."""
    from ..ad.registry import EXTENSION_PARAMS
    from ..core import map_param_jaxprs
    from ..io import warn

    memo: dict[int, object] = {}

    def clean(j):
        if id(j) in memo:
            return memo[id(j)]
        eqns = []
        for e in j.eqns:
            params = {k: map_param_jaxprs(v, clean) for k, v in e.params.items()}
            dropped = [k for k in EXTENSION_PARAMS if k in params]
            if dropped:
                warn(
                    f"{e.prim}: dropping the traced custom rule ({', '.join(dropped)}): "
                    "JAX's text has no place for it",
                    e.loc,
                )
                params = {k: v for k, v in params.items() if k not in dropped}
            eqns.append(e.replace(params=params))
        memo[id(j)] = out = j.replace(eqns=eqns)
        return out

    return clean(jaxpr)
