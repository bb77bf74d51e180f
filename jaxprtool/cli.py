"""The `jaxprtool` command line: a thin layer that reads, calls and writes.

Commands live in `jaxprtool/commands/*.py` and are loaded lazily, so that a command which
does not run or compile never imports jax.  Their options are declared once, click-free
(`declare`): click's group and commands are built from them (`cli_click`), and the program
parses the common command lines itself from the same declarations (`quickstart`), handing
every other one to click.
"""

from __future__ import annotations

import errno
import functools
import os
import sys

from . import core
from .core import InternalError, JaxprError, OverLimit, ProgramError, UsageProblem
from .declare import argument, command, option  # noqa: F401  (the commands' decorators)
from .interrupt import exit_on_interrupt, keep_writes_reportable
from .io import DEFAULT_MAX_INPUT, Reported, program_loc, report
from .lazy import numpy_loaded
from .outputs import refuse_overlaps

#: command name -> "module:attribute" inside jaxprtool.commands
COMMANDS: dict[str, str] = {
    "jvp": "ad_cmds:jvp",
    "linearize": "ad_cmds:linearize",
    "transpose": "ad_cmds:transpose",
    "vjp": "ad_cmds:vjp",
    "grad": "ad_cmds:grad",
    "vmap": "batch_cmds:vmap",
    "jacfwd": "batch_cmds:jacfwd",
    "jacrev": "batch_cmds:jacrev",
    "hessian": "batch_cmds:hessian",
    "fmt": "text_cmds:fmt",
    "check": "check_cmd:check",
    "dce": "pass_cmds:dce",
    "cse": "pass_cmds:cse",
    "fold": "pass_cmds:fold",
    "simplify": "pass_cmds:simplify",
    "inline": "pass_cmds:inline",
    "canonicalize": "pass_cmds:canonicalize",
    "opt": "pass_cmds:opt",
    "diff": "pass_cmds:diff",
    "stats": "pass_cmds:stats",
    "graph": "graph_cmd:graph",
    "check-grad": "verify_cmds:check_grad",
    "run": "run_cmds:run",
    "compile": "compile_cmd:compile_",
    "trace": "trace_cmd:trace",
    "explain": "explain_cmd:explain",
    "memory": "memory_cmd:memory",
}


def declared_command(name: str):
    """The command `name` as its module declares it (`declare.Declared`; a click command
    where one is made otherwise); its module is imported here."""
    import importlib

    module, attr = COMMANDS[name].split(":")
    return getattr(importlib.import_module(f"jaxprtool.commands.{module}"), attr)


#: commands that run programs through JAX (numerical work may use numpy's BLAS threads).
#: `memory` is not one: its JAX work is one compile at the end of a walk over one program,
#: so it gets one BLAS thread and the IR it read stays frozen out of the collector
#: (`core.FREEZE_AFTER_PAUSE`; for `memory` of 1M equations, 1.7 s of collections
#: rescanning it after the parse)
RUNS_PROGRAMS = frozenset({"run", "compile", "trace", "check-grad", "explain"})


#: where LazyGroup keeps the command line's arguments (click's context `meta`)
ARGV_KEY = "jaxprtool.argv"

#: set by `entry`: this process runs one command (not a library or test process).  A
#: process-wide fact, not an invocation's: what asks it (`keep_until_exit`, the start-up row
#: of --timing, the per-process settings of `get_command`) asks about the process.
#: (why a value cannot carry it: it is a fact about the process, not about one call)
_STANDALONE = False


class ExitStatus:
    """What a command returns (ruff's `ExitStatus`): the process's exit status, a plain
    int (an `enum.IntEnum` class costs ~50 us of every command's start-up)."""

    SUCCESS = 0
    #: the input was rejected, a check failed, the programs differ
    FAILURE = 1
    #: trouble: bad usage, an unreadable file, a missing dependency
    ERROR = 2
    #: the reader of standard output went away: 128 + SIGPIPE, as a shell reports a
    #: command that SIGPIPE ended
    BROKEN_PIPE = 141


def entry() -> None:
    """The `jaxprtool` program (its console script and `python -m jaxprtool`)."""
    global _STANDALONE  # (see `_STANDALONE`)
    _STANDALONE = True
    exit_on_interrupt()
    keep_writes_reportable()
    try:
        # (returns only where it leaves the command line to click)
        _reader("quickstart").run_quickly(sys.argv[1:])
        _reader("cli_click").main(prog_name="jaxprtool")
    except SystemExit as e:
        _leave(e.code)
    _leave(0)


#: what the command read, kept to the end of the process (`keep_until_exit`)
_KEPT: list = []


def keep_until_exit(obj) -> None:
    """In the `jaxprtool` process, keep `obj` (a program read) alive until `_leave` ends
    the process without freeing it."""
    if _STANDALONE:
        _KEPT.append(obj)


#: the result `keep_last_until_exit` keeps
_LAST: list = []


def keep_last_until_exit(obj) -> None:
    """As `keep_until_exit`, for the latest `obj` given here only: the one given before is
    let go (the results of a split input's parts, freed each when the next one comes)."""
    if _STANDALONE:
        _LAST[:] = [obj]


def _leave(code) -> None:
    """End the process with status `code` (SystemExit's) without tearing down its objects:
    freeing a million equations one by one costs ~0.4 s after the work is done.  Where JAX
    was imported, its exit hooks must run: an ordinary exit."""
    if "jax" in sys.modules:
        sys.exit(code)
    if code is None:
        code = 0
    elif not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        code = BROKEN_PIPE_EXIT
    except OSError as e:  # the last buffered bytes did not fit (a full disk): as `guarded`
        report(UsageProblem(f"cannot write the output: {e.strerror}"))
        code = 2
    try:
        sys.stderr.flush()
    except OSError:
        pass
    os._exit(code)


def is_standalone() -> bool:
    """The process is the `jaxprtool` program (not a library or test runner calling it)."""
    return _STANDALONE


def _one_program_process(name: str) -> None:
    """Settings for a process that reads, transforms and prints one program and exits:

    * numpy's OpenBLAS starts a thread per core when numpy is imported (about 0.1 s of CPU,
      a third of `fmt` of a typical program) and the commands that run no program never
      call BLAS: ask it for one, unless the user chose a number;
    * the collector leaves the IR alone after each paused block (`core.FREEZE_AFTER_PAUSE`:
      about 0.05 s of a transformer's grad), except in the commands that run programs
      repeatedly through JAX, whose cyclic garbage would be frozen with it."""
    runs = name in RUNS_PROGRAMS
    blas_chosen = {"OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"} & set(os.environ)
    if not runs and not numpy_loaded() and not blas_chosen:
        os.environ["OPENBLAS_NUM_THREADS"] = "1"
    if not runs:
        # (why a value cannot carry it: how this process collects garbage, per process)
        core.FREEZE_AFTER_PAUSE = True


def cleandoc(doc: str) -> str:
    """`inspect.cleandoc(doc)`: tabs expanded, the indentation common to the lines after the
    first removed, the first line's leading blanks and the blank lines at either end
    dropped."""
    lines = doc.expandtabs().split("\n")
    indents = [len(line) - len(line.lstrip()) for line in lines[1:] if line.lstrip()]
    margin = min(indents, default=0)
    lines = [lines[0].lstrip()] + [line[margin:] for line in lines[1:]]
    while lines and not lines[-1]:
        lines.pop()
    while lines and not lines[0]:
        lines.pop(0)
    return "\n".join(lines)


#: the quick start's context of the running command (`quickstart.Context`), where it parses
#: the command line instead of click.  (why a value cannot carry it: it stands in for
#: click's current context, process state that `options_of` and `guarded` read where no
#: context is handed to them)
_QUICK_CONTEXT: list = []


def current_context():
    """The running command's context: the quick start's, else click's current one (None
    outside any).  click is asked only where it was imported."""
    if _QUICK_CONTEXT:
        return _QUICK_CONTEXT[-1]
    if "click" not in sys.modules:
        return None
    import click

    return click.get_current_context(silent=True)


def settle_invocation(options: Options, max_equations: int | None) -> None:
    """The process-wide settings of an invocation, once its global options are read (the
    group's `main` and the quick start)."""
    from . import expansion, io

    # (why a value cannot carry it: as in `cli_click._set_max_equations`)
    expansion.LIMIT = max_equations or expansion.DEFAULT_LIMIT
    # (why a value cannot carry it: the terminal's color is a fact of the process's output,
    # read by every message writer; `Options.color` holds the command's choice)
    io.COLOR_MODE = options.color


def command_starts(options: Options, name: str, params: dict) -> None:
    """A command's body is about to run (click's `Command.invoke` and the quick start): the
    collector, held while the program started, runs again from here
    (`interrupt.release_collector`), and the invocation's diagnostics learn what the command
    decides (whether it leaves standard output free, whether its text diagnostics show their
    codes)."""
    from .interrupt import release_collector

    release_collector()
    options.diagnostics.command_starts(name, params)


def end_diagnostics() -> int | None:
    """The invocation's machine-readable diagnostics (json, sarif) written when it ends,
    however it ends (click's `LazyGroup.invoke` and the quick start): None, or the exit
    status where --output-file could not be written after all."""
    from . import diagnostics, io

    try:
        diagnostics.end(write_file=io.write_output)
    except UsageProblem as e:
        report(e)
        return ExitStatus.ERROR
    return None


#: names of click's side, made on first use (`cli_click`: importing it imports click)
_CLICK_SIDE = frozenset({"main", "Option", "OptionalValue", "Command", "LazyGroup", "Size"})


def __getattr__(name: str):
    if name in _CLICK_SIDE:
        return getattr(_reader("cli_click"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _reader(module: str):
    """A reader of the command line: `quickstart` (the common commands, click-free) or
    `cli_click` (click's group).  Each sits above this module, as the commands do (it
    imports this one), and is found by name as they are (`COMMANDS`, `declared_command`)."""
    import importlib

    return importlib.import_module(f"jaxprtool.{module}")


def _current_sink():
    """The diagnostics sink reports go to now (`diagnostics` is imported when asked)."""
    from . import diagnostics

    return diagnostics.current()


class Options:
    """The global options of one invocation (ruff's global configuration): made by the
    group from the flags before the command, completed by those after it, kept in the root
    context's `obj`, and read by the commands through `options_of`.  (A plain class: a
    dataclass would import `dataclasses` into the start-up of every command.)"""

    __slots__ = (
        "debug",
        "jax_style",
        "plugins",
        "color",
        "diagnostics",
        "max_input",
        "timer",
        "invocation",
    )

    def __init__(
        self,
        debug: bool = False,
        jax_style: str | None = None,
        plugins: tuple[str, ...] = (),
        color: str = "auto",
        diagnostics=None,
        max_input: int = DEFAULT_MAX_INPUT,
    ):
        self.debug = debug
        self.jax_style = jax_style
        self.plugins = plugins
        self.color = color
        #: where the invocation's diagnostics go (`diagnostics.Sink`)
        self.diagnostics = diagnostics if diagnostics is not None else _current_sink()
        #: --max-input-size: the most bytes of an input read
        self.max_input = max_input
        #: --timing's table of the running command (`commands.driver.Timer`; None: none)
        self.timer = None
        #: the AD request of the running command (`ad.invocation.Invocation`), made by the
        #: command from its --custom-rules (None: a command that transforms nothing)
        self.invocation = None


def options_of(ctx=None) -> Options:
    """The running invocation's options (the current context's, a default value outside
    any)."""
    ctx = ctx or current_context()
    if ctx is None:
        return Options()
    root = ctx.find_root()
    if not isinstance(root.obj, Options):
        root.obj = Options()
    return root.obj


def wrap_words(text: str, width: int) -> list[str]:
    """`text` (words one space apart, none longer than `width`) in lines of at most `width`
    characters, as `textwrap.wrap(text, width, break_on_hyphens=False)` (whose import
    compiles its regular expressions: ~1 ms of every command's start-up, for one list)."""
    lines: list[str] = []
    for word in text.split():
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return lines


def guarded(fn):
    """Run a command body and return its exit status: the body's own (None: success), or
    the status of the error that ended it, reported as a located message (JaxprError: 1;
    2 for usage problems); no traceback unless --debug."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        ctx = current_context()
        try:
            refuse_overlaps(ctx)
            return fn(*args, **kwargs)
        except (SystemExit, KeyboardInterrupt):
            raise
        except Exception as e:
            if is_click_exception(e):
                raise
            return _status_of(e, options_of(ctx).debug)

    return wrapper


def is_click_exception(e: BaseException) -> bool:
    """Whether `e` is click's (a usage error, `ctx.exit`), which click shows itself: asked
    without importing click, which made none where it was never imported."""
    return "click" in sys.modules and any(
        c.__module__ == "click.exceptions" for c in type(e).__mro__
    )


def _status_of(e: Exception, debug: bool) -> int:
    """Report what ended a command body (no traceback: --debug re-raises an internal
    error) and say the exit status it gives."""
    if isinstance(e, Reported):
        return e.exit_code
    if isinstance(e, JaxprError):
        if isinstance(e, ProgramError) and e.loc is None:
            e.loc = program_loc(e.where)
        report(e)
        return e.exit_code
    if isinstance(e, RecursionError):
        report(OverLimit("input nests too deeply", program_loc("inputs")))
        return ExitStatus.FAILURE
    if isinstance(e, BrokenPipeError):
        # the reader went away (`jaxprtool fmt big.jaxpr | head`): end quietly with the
        # status a process killed by SIGPIPE has, as cat and grep do
        _drop_unwritten_stdout()
        return ExitStatus.BROKEN_PIPE
    if isinstance(e, OSError) and e.errno in _WRITE_ERRNOS:
        _drop_unwritten_stdout()
        report(UsageProblem(f"cannot write the output: {e.strerror}"))
        return ExitStatus.ERROR
    from .jax_required import missing_jax  # (an error's path only)

    missing = None if isinstance(e, OSError) else missing_jax(e) or out_of_memory(e)
    if missing is not None:
        report(missing)
        return ExitStatus.FAILURE
    if debug:
        raise e
    report(internal_error(e))  # an internal error: still no traceback by default
    return ExitStatus.FAILURE


#: the exit status of a process whose reader closed the pipe (`ExitStatus.BROKEN_PIPE`)
BROKEN_PIPE_EXIT = ExitStatus.BROKEN_PIPE

#: errors of a write that the disk, a quota or a limit cut off (standard output on
#: /dev/full, `ulimit -f`): reported as trouble (exit 2), not as internal errors
_WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EIO})


def _drop_unwritten_stdout() -> None:
    """After a failed write to standard output, point it at /dev/null, so that Python's
    final flush does not fail a second time with a traceback."""
    try:
        sys.stdout.flush()
    except OSError:
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
        except (OSError, ValueError, AttributeError):
            pass


def out_of_memory(e: BaseException) -> JaxprError | None:
    """The message for XLA's refusal to allocate what a program needs (JAX's
    RESOURCE_EXHAUSTED), located at the program, else None."""
    text = str(e)
    if type(e).__name__ not in ("JaxRuntimeError", "XlaRuntimeError"):
        return None
    if not text.startswith("RESOURCE_EXHAUSTED"):
        return None
    return JaxprError(
        f"XLA could not allocate the memory this program needs ({text.splitlines()[0]}); "
        "the memory check let it through: is JAXPRTOOL_MAX_MEMORY above the memory there is?",
        program_loc("inputs"),
    )


def internal_error(e: BaseException) -> JaxprError:
    return InternalError(
        f"internal error: {type(e).__name__}: {e} (run with --debug for a traceback)"
    )
