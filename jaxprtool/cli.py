"""The `jaxprtool` command line: a thin layer that reads, calls and writes.

Commands live in `jaxprtool/commands/*.py` and are loaded lazily, so that a
command which does not run or compile never imports jax.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import importlib
import os
import sys

import click

from . import core
from .core import InternalError, JaxprError, OverLimit, ProgramError, UsageProblem
from .interrupt import exit_on_interrupt, keep_writes_reportable, release_collector
from .io import DEFAULT_MAX_INPUT, Reported, program_loc, report
from .lazy import numpy_loaded
from .outputs import InputPath, OutputPath, refuse_overlaps

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
        main(prog_name="jaxprtool")
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


def _one_program_process(command: str) -> None:
    """Settings for a process that reads, transforms and prints one program and exits:

    * numpy's OpenBLAS starts a thread per core when numpy is imported (about 0.1 s of CPU,
      a third of `fmt` of a typical program) and the commands that run no program never
      call BLAS: ask it for one, unless the user chose a number;
    * the collector leaves the IR alone after each paused block (`core.FREEZE_AFTER_PAUSE`:
      about 0.05 s of a transformer's grad), except in the commands that run programs
      repeatedly through JAX, whose cyclic garbage would be frozen with it."""
    runs = command in RUNS_PROGRAMS
    blas_chosen = {"OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"} & set(os.environ)
    if not runs and not numpy_loaded() and not blas_chosen:
        os.environ["OPENBLAS_NUM_THREADS"] = "1"
    if not runs:
        # (why a value cannot carry it: how this process collects garbage, per process)
        core.FREEZE_AFTER_PAUSE = True


class Option(click.Option):
    """click's option, its help text cleaned here as click cleans it (`inspect.cleandoc`):
    click's own call would execute `inspect`, which the program leaves unexecuted
    (`jaxprtool/__init__.py`).  Every option of the tool is one (`option`)."""

    def __init__(self, *args, help: str | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        if help:
            self.help = cleandoc(help)


def option(*param_decls: str, **attrs):
    """`click.option`, of the tool's `Option` class (or of `cls`, a subclass of it)."""
    attrs.setdefault("cls", Option)
    return click.option(*param_decls, **attrs)


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


class OptionalValue(Option):
    """An option whose value may be left out (`--diff` or `--diff=text`).  Only the `=`
    form gives a value: a bare `--diff` never takes the next word (a FILE) as its value."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("is_flag", False)
        super().__init__(*args, **kwargs)


class _OwnHelpOption:
    """The command's `-h/--help` option made as click makes it (`help_option` on the
    command's help option names, kept in its `_help_option`), of the tool's `Option`
    class."""

    def get_help_option(self, ctx):
        if self._help_option is None and self.add_help_option:
            names = self.get_help_option_names(ctx)
            if names:
                # (click 8.5 keeps the value under a reserved name; 8.2 under `help`)
                storage = getattr(click.core, "_HELP_OPTION_STORAGE_NAME", None)
                decls = (*names, storage) if storage else tuple(names)
                click.decorators.help_option(*decls, cls=Option)(self)
                self._help_option = self.params.pop()
        return super().get_help_option(ctx)


class LazyGroup(_OwnHelpOption, click.Group):
    def parse_args(self, ctx, args):
        """Keep the raw arguments: `run --coordinator` runs them again in a supervised
        child process (`commands/supervise.py`)."""
        ctx.meta[ARGV_KEY] = list(args)
        return super().parse_args(ctx, args)

    def list_commands(self, ctx):
        return sorted(COMMANDS)

    def _main_shell_completion(self, ctx_args, prog_name, complete_var=None):
        """Shell completion (click's), once the variables the shell set are checked."""
        from .env import check_completion

        name = complete_var or f"_{prog_name}_COMPLETE".replace("-", "_").upper()
        try:
            check_completion(name)
        except UsageProblem as e:
            report(e)
            sys.exit(2)
        return super()._main_shell_completion(ctx_args, prog_name, complete_var)

    def get_command(self, ctx, name):
        target = COMMANDS.get(name)
        if target is None:
            return None
        if _STANDALONE:
            _one_program_process(name)
        module, attr = target.split(":")
        cmd = getattr(importlib.import_module(f"jaxprtool.commands.{module}"), attr)
        if not isinstance(cmd, click.Command):
            cmd = cmd()  # a builder (`commands.ad_cmds.ad_command`): only this command is made
        _add_global_options(cmd)
        return cmd

    def make_context(self, info_name, args, parent=None, **extra):
        with _short_usage_messages():
            return super().make_context(info_name, args, parent, **extra)

    def invoke(self, ctx):
        """Run the command and end the process with the exit status it returns; the
        machine-readable diagnostics it collected (json, sarif) are written when it ends,
        however it ends."""
        from . import diagnostics, io

        try:
            with _short_usage_messages():
                status = super().invoke(ctx)
        finally:
            try:
                diagnostics.end(write_file=io.write_output)
            except UsageProblem as e:  # --output-file could not be written after all
                report(e)
                raise click.exceptions.Exit(ExitStatus.ERROR) from None
        if status:
            ctx.exit(int(status))
        return status

    def resolve_command(self, ctx, args):
        if args and not args[0].startswith("-") and args[0] not in COMMANDS:
            import difflib

            close = difflib.get_close_matches(args[0], list(COMMANDS), n=1)
            if close:
                ctx.fail(f"No such command '{args[0]}'. Did you mean '{close[0]}'?")
        name, cmd, rest = super().resolve_command(ctx, args)
        if cmd is not None:
            rest = _bare_optional_values(cmd, rest)
        return name, cmd, rest


@contextlib.contextmanager
def _short_usage_messages():
    """Click's usage errors with each huge word cut (a 100 KB option value was echoed
    whole): what `io.format_error` does for the tool's own messages."""
    from .io import shorten_words

    try:
        yield
    except click.ClickException as e:
        e.message = shorten_words(e.message)
        raise


def _bare_optional_values(cmd: click.Command, args: list[str]) -> list[str]:
    """`--diff` -> `--diff=semantic` for each OptionalValue option given without `=`."""
    bare = {
        name: o.flag_value
        for o in cmd.params
        if isinstance(o, OptionalValue)
        for name in o.opts
        if name.startswith("--")
    }
    if not bare:
        return args
    out = []
    for i, a in enumerate(args):
        if a == "--":
            return out + args[i:]
        out.append(f"{a}={bare[a]}" if a in bare else a)
    return out


class Command(_OwnHelpOption, click.Command):
    """A jaxprtool command: before its body runs, the invocation's diagnostics learn what
    the command decides (whether it leaves standard output free, whether its text
    diagnostics show their codes); it returns its body's exit status (`ExitStatus`; None
    for success).  The collector, held while the program started, runs again from here
    (`interrupt.release_collector`)."""

    def invoke(self, ctx):
        release_collector()
        options_of(ctx).diagnostics.command_starts(self.name, ctx.params)
        return super().invoke(ctx)


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


def options_of(ctx: click.Context | None = None) -> Options:
    """The running invocation's options (the current click context's, a default value
    outside any)."""
    ctx = ctx or click.get_current_context(silent=True)
    if ctx is None:
        return Options()
    root = ctx.find_root()
    if not isinstance(root.obj, Options):
        root.obj = Options()
    return root.obj


def _set_debug(ctx, param, value):
    if value:
        options_of(ctx).debug = True


def _set_jax_style(ctx, param, value):
    if value is not None:
        options_of(ctx).jax_style = value


def _set_color(ctx, param, value):
    from . import io

    if value is not None:
        options_of(ctx).color = io.COLOR_MODE = value


def _set_output_format(ctx, param, value):
    if value is not None:
        options_of(ctx).diagnostics.set_format(value)


def _set_output_file(ctx, param, value):
    from . import io

    if value is not None:
        try:
            io.check_writable(value)
        except UsageProblem as e:
            raise click.BadParameter(e.message, ctx, param) from None
        options_of(ctx).diagnostics.output_file = value


def _set_max_equations(ctx, param, value):
    from . import expansion

    if value is not None:
        # (why a value cannot carry it: --max-equations is read by `expansion.refuse_large`,
        # called by the reader's callers, the passes, the AD entry points, memory and the
        # back end, none of which takes the command's options; an API call keeps the default)
        expansion.LIMIT = value


def _set_max_input_size(ctx, param, value):
    if value is not None:
        options_of(ctx).max_input = value


class Size(click.ParamType):
    """A size in bytes: `256M`, `1G`, `1000000`."""

    name = "size"

    def convert(self, value, param, ctx):
        if isinstance(value, int):
            return value
        from .env import parse_size

        try:
            return parse_size(value, param.opts[0])
        except UsageProblem as e:
            self.fail(e.message, param, ctx)


def _set_no_color(ctx, param, value):
    if value:
        _set_color(ctx, param, "never")


def _load_plugins(ctx, param, value):
    if value:
        from .plugins import load_plugins

        options = options_of(ctx)
        options.plugins = tuple(options.plugins) + tuple(value)
        _run_or_exit(ctx, load_plugins, value)


_COLOR_HELP = (
    "Colour diagnostics, diffs and tables: WHEN is auto (on a terminal, unless NO_COLOR "
    "is set; FORCE_COLOR forces it), always or never."
)


@functools.cache
def _global_option_specs() -> list[tuple[list[str], dict]]:
    """The global options; accepted before the command and after it.  (Made once: the group
    and the command share their parameter types, whose click.Path ones each ask gettext for
    a translation.)"""
    return [
        (["--debug"], dict(is_flag=True, help="Show Python tracebacks for internal errors.")),
        (
            ["--plugin", "plugins"],
            dict(
                multiple=True,
                metavar="RULES.py",
                type=InputPath(dir_okay=False),
                help="Load a Python module that registers rules for extra primitives (repeatable).",
            ),
        ),
        (
            ["--jax-style"],
            dict(
                metavar="VERSION",
                help="Print in the style of this JAX version (e.g. 0.4.35, 0.12).",
            ),
        ),
        (
            ["--color"],
            dict(
                type=click.Choice(["auto", "always", "never"]),
                default=None,
                metavar="WHEN",
                help=_COLOR_HELP,
            ),
        ),
        (["--no-color"], dict(is_flag=True, help="Same as --color never.")),
        (
            ["--max-input-size"],
            dict(
                type=Size(),
                default=None,
                metavar="SIZE",
                help="Refuse an input file larger than SIZE bytes (K, M, G suffixes; default "
                "256M), naming it, instead of reading it all.",
            ),
        ),
        (
            ["--max-equations"],
            dict(
                type=click.IntRange(min=1),
                default=None,
                metavar="N",
                help="Refuse a program that its shared jaxprs, copied at each use, make more "
                "than N equations (default 300000), before inlining, differentiating, "
                "measuring or running it.",
            ),
        ),
        (
            ["--output-format", "--diagnostic-format", "diagnostic_format"],
            dict(
                type=click.Choice(["text", "json", "github", "sarif"]),
                default=None,
                metavar="FORMAT",
                help="How errors and warnings are written: text (FILE:LINE:COL: error: "
                "message, `check` adding [CODE]; on standard error), json (one array), "
                "github (GitHub Actions annotations) or sarif (SARIF 2.1.0), on standard "
                "output when the command writes its result to a file or has none "
                "(`check`), else on standard error.  After `run`, whose --output-format "
                "is its own, this is --diagnostic-format.",
            ),
        ),
        (
            ["--output-file", "diagnostic_file"],
            dict(
                default=None,
                metavar="FILE",
                type=OutputPath(dir_okay=False, allow_dash=True),
                help="Write the diagnostics (in --output-format) to FILE instead, when the "
                "command ends (as ruff's --output-file).",
            ),
        ),
    ]


_GLOBAL_CALLBACKS = {
    "debug": _set_debug,
    "plugins": _load_plugins,
    "jax_style": _set_jax_style,
    "color": _set_color,
    "no_color": _set_no_color,
    "max_equations": _set_max_equations,
    "max_input_size": _set_max_input_size,
    "diagnostic_format": _set_output_format,
    "diagnostic_file": _set_output_file,
}


def _add_global_options(cmd: click.Command) -> None:
    """Let `cmd` accept the global options after its name too (`jaxprtool run f --debug`);
    a command's own option of the same name (explain's --no-color, run's --output-format)
    wins, and the global option keeps its other spellings there."""
    if getattr(cmd, "_jaxprtool_globals", False):
        return
    taken = {name for p in cmd.params for name in getattr(p, "opts", ())}
    listed = []
    for decls, kw in _global_option_specs():
        flags = [d for d in decls if d.startswith("-")]
        free = [d for d in flags if d not in taken]
        if not free:
            continue
        names = [d for d in decls if not d.startswith("-")]
        key = names[0] if names else flags[0][2:].replace("-", "_")
        # the first spelling the command leaves free (run: --diagnostic-format); hidden from
        # the command's --help, which names them once at its end (as git's and ruff's)
        opt = Option(
            [free[0], *names],
            expose_value=False,
            callback=_GLOBAL_CALLBACKS[key],
            hidden=True,
            **kw,
        )
        cmd.params.append(opt)
        metavar = kw.get("metavar")
        listed.append(f"{free[0]} {metavar}" if metavar else free[0])
    if listed:
        names = wrap_words(", ".join(listed), 74)
        text = "\b\nGlobal options (before or after the command; `jaxprtool --help`):\n"
        text += "\n".join(f"  {line}" for line in names)
        cmd.epilog = f"{cmd.epilog}\n\n{text}" if cmd.epilog else text
    cmd._jaxprtool_globals = True


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


def _run_or_exit(ctx: click.Context, fn, *args) -> None:
    """Run `fn(*args)`, the work of an option or of the group (which has no command to
    return an exit status from), as `guarded` runs a command: its trouble is reported and
    ends the invocation with its status."""

    def work():
        fn(*args)

    status = guarded(work)()
    if status:
        ctx.exit(int(status))


def _print_version(ctx, param, value):
    if not value or ctx.resilient_parsing:
        return
    from .text import twin

    # (`installed_version` reads the dist-info folders' names: `importlib.metadata`'s import,
    # ~0.015 s, only where there is none)
    from .text.style import KNOWN_VERSIONS, OLDEST, installed_version

    lines = [f"jaxprtool {installed_version('jaxprtool') or 'unknown'}"]
    jax, jaxlib = installed_version("jax"), installed_version("jaxlib")
    if jax:
        lines.append(f"JAX {jax} (jaxlib {jaxlib or 'not installed'})")
    else:
        lines.append(
            "JAX not installed: run, compile, trace, explain and check-grad need it "
            "(pip install 'jaxprtool[jax]')"
        )
    styles = ", ".join(".".join(map(str, v)) for v in KNOWN_VERSIONS)
    lines.append(
        f"JAX printing styles: {styles} (text printed by any JAX from "
        f"{'.'.join(map(str, OLDEST))} to "
        f"{'.'.join(map(str, KNOWN_VERSIONS[-1][:2]))} is read)"
    )
    lines.append(twin.describe())
    click.echo("\n".join(lines))
    ctx.exit()


def _main_options(f):
    for decls, kw in reversed(_global_option_specs()):
        first = [d for d in decls if d.startswith("-")][:1]
        f = option(*first, *[d for d in decls if not d.startswith("-")], **kw)(f)
    return f


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@_main_options
@option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_version,
    help="Show the version, the JAX version found and the JAX printing styles, then exit.",
)
def main(
    debug,
    plugins,
    jax_style,
    color,
    no_color,
    max_input_size,
    max_equations,
    diagnostic_format,
    diagnostic_file,
):
    """jaxprtool: read, transform, check and run JAX jaxprs from text files.

    Global options may also follow the command (`jaxprtool run f.jaxpr --debug`).
    Shell completion (commands, options, files, pass names): add
    `eval "$(_JAXPRTOOL_COMPLETE=bash_source jaxprtool)"` to ~/.bashrc (zsh_source for
    ~/.zshrc; fish: `_JAXPRTOOL_COMPLETE=fish_source jaxprtool | source`).

    \b
    Example:
      jaxprtool fmt f.jaxpr
      jaxprtool linearize f.jaxpr | jaxprtool transpose
    """
    from . import diagnostics, expansion, io
    from .env import check_environment

    ctx = click.get_current_context()
    ctx.obj = Options(
        debug=debug,
        jax_style=jax_style,
        plugins=plugins,
        color="never" if no_color else (color or "auto"),
        diagnostics=diagnostics.begin(diagnostic_format or "text"),
        max_input=max_input_size or DEFAULT_MAX_INPUT,
    )
    param = next(p for p in ctx.command.params if p.name == "diagnostic_file")
    _set_output_file(ctx, param, diagnostic_file)
    _run_or_exit(ctx, check_environment)
    # (why a value cannot carry it: as in `_set_max_equations`)
    expansion.LIMIT = max_equations or expansion.DEFAULT_LIMIT
    # (why a value cannot carry it: the terminal's color is a fact of the process's output,
    # read by every message writer; `Options.color` holds the command's choice)
    io.COLOR_MODE = ctx.obj.color
    if plugins:
        from .plugins import load_plugins

        _run_or_exit(ctx, load_plugins, plugins)


def guarded(fn):
    """Run a command body and return its exit status: the body's own (None: success), or
    the status of the error that ended it, reported as a located message (JaxprError: 1;
    2 for usage problems); no traceback unless --debug."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        ctx = click.get_current_context(silent=True)
        try:
            refuse_overlaps(ctx)
            return fn(*args, **kwargs)
        except (click.exceptions.Exit, click.ClickException, SystemExit, KeyboardInterrupt):
            raise
        except Exception as e:
            return _status_of(e, options_of(ctx).debug)

    return wrapper


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


if __name__ == "__main__":
    main()
