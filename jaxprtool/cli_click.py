"""click's side of the command line: the group, the commands' and options' classes,
the group's own options and `--version`.  Imported only where click parses the command line (a
command line the quick start hands over, the library's and the tests' `cli.main`), never by
the common commands' own start (`quickstart` asks it only to show a usage error)."""

from __future__ import annotations

import contextlib
import functools
import sys

import click

from . import cli
from .cli import (
    ARGV_KEY,
    COMMANDS,
    Options,
    cleandoc,
    declared_command,
    guarded,
    options_of,
    settle_invocation,
    wrap_words,
)
from .core import UsageProblem
from .declare import Choice, Declared, IntRange, Param, PathArg, with_bare_values
from .io import DEFAULT_MAX_INPUT, report
from .outputs import record_path


class InputPath(click.Path):
    """A path the command reads (`-`: standard input)."""

    def convert(self, value, param, ctx):
        value = super().convert(value, param, ctx)
        if ctx is not None and value not in (None, "-"):
            record_path(ctx, _option(param), value, writes=False)
        return value


class OutputPath(click.Path):
    """A path the command writes (`-`: standard output).  An empty one is bad usage: it was
    taken as "not given" (`--html ''` printed text, `-o ''` wrote to standard output)."""

    def convert(self, value, param, ctx):
        if isinstance(value, str) and not value.strip():
            self.fail("an empty path (give a file name, or - for standard output)", param, ctx)
        value = super().convert(value, param, ctx)
        if ctx is not None and value not in (None, "-"):
            record_path(ctx, _option(param), value, writes=True)
        return value


@functools.cache
def click_command(declared: Declared) -> click.Command:
    """click's command of a declared one (built once, for the command run only): its
    parameters made by click's decorators in the order they were declared in."""
    f = declared.fn
    for p in reversed(declared.params):  # (applied bottom-up, as decorators are)
        f = _click_decorator(p)(f)
    return click.command(declared.name, cls=Command, **declared.attrs)(f)


def _click_decorator(p: Param):
    attrs = dict(p.attrs)
    if "type" in attrs:
        attrs["type"] = click_type(attrs["type"])
    if p.kind == "argument":
        return click.argument(*p.decls, **attrs)
    attrs["cls"] = OptionalValue if attrs.pop("optional_value", False) else Option
    return click.option(*p.decls, **attrs)


def click_type(kind):
    """click's type of a declared one (`declare.Choice`, `IntRange`, `PathArg`); click's own
    as it is."""
    if isinstance(kind, Choice):
        return click.Choice(list(kind.choices))
    if isinstance(kind, IntRange):
        return click.IntRange(min=kind.min)
    if isinstance(kind, PathArg):
        path = OutputPath if kind.writes else InputPath
        return path(allow_dash=kind.allow_dash, dir_okay=kind.dir_okay)
    return kind


def _option(param) -> str:
    """How the command line names a parameter (`-o/--output`, `FILE`)."""
    if isinstance(param, click.Option):
        return "/".join(param.opts)
    return (param.human_readable_name if param is not None else "FILE").upper()


class Option(click.Option):
    """click's option, its help text cleaned here as click cleans it (`inspect.cleandoc`):
    click's own call would execute `inspect`, which the program leaves unexecuted
    (`jaxprtool/__init__.py`).  Every option of the tool is one (`option`)."""

    def __init__(self, *args, help: str | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        if help:
            self.help = cleandoc(help)


def option(*param_decls: str, **attrs):
    """`click.option`, of the tool's `Option` class (the group's own options)."""
    attrs.setdefault("cls", Option)
    return click.option(*param_decls, **attrs)


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
        if cli.is_standalone():
            cli._one_program_process(name)
        cmd = click_command(declared_command(name))
        _add_global_options(cmd)
        return cmd

    def make_context(self, info_name, args, parent=None, **extra):
        with _short_usage_messages():
            return super().make_context(info_name, args, parent, **extra)

    def invoke(self, ctx):
        """Run the command and end the process with the exit status it returns; the
        machine-readable diagnostics it collected (json, sarif) are written when it ends,
        however it ends."""
        try:
            with _short_usage_messages():
                status = super().invoke(ctx)
        finally:
            ended = cli.end_diagnostics()
            if ended is not None:
                raise click.exceptions.Exit(ended) from None
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
    return with_bare_values(bare, args)


class Command(_OwnHelpOption, click.Command):
    """A jaxprtool command: `cli.command_starts` before its body runs; it returns its
    body's exit status (`ExitStatus`; None for success)."""

    def invoke(self, ctx):
        cli.command_starts(options_of(ctx), self.name, ctx.params)
        return super().invoke(ctx)


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
    from . import diagnostics
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
    settle_invocation(ctx.obj, max_equations)
    if plugins:
        from .plugins import load_plugins

        _run_or_exit(ctx, load_plugins, plugins)
