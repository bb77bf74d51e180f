"""The common command lines, parsed without click (issue 49): `jaxprtool grad --argnums 0,1
f.jaxpr -o g.jaxpr` reads the command's declarations (`declare`), the same records click's
command is built from, converts and checks each value as click would, and runs the command
as click's group would run it.  Importing click (with gettext, locale, uuid and platform,
which only it needs) was ~42M instructions of every command's start.

Only a command line understood entirely is run here: the commands of `QUICK_COMMANDS`, with
no global option, no `--help`, no option or value click would refuse or ask about (an unknown
or malformed option, a missing or extra argument, a value its type or callback refuses),
no shell completion.  Anything else is left to click, untouched (`run_quickly` returns),
and click prints what it prints.  An error the command raises as click's (a usage error
found after the parse) is shown by click, in click's context of the command."""

from __future__ import annotations

import errno
import os
import sys

from .declare import Declared, Param, TypeRecord, with_bare_values

#: the commands whose command lines are parsed here (`diff` is not: its module imports
#: click, `ui/diff.py`'s `echo`)
QUICK_COMMANDS = frozenset(
    {
        "fmt",
        "check",
        "jvp",
        "linearize",
        "transpose",
        "vjp",
        "grad",
        "vmap",
        "jacfwd",
        "jacrev",
        "hessian",
        "dce",
        "cse",
        "fold",
        "simplify",
        "inline",
        "canonicalize",
        "opt",
        "stats",
    }
)

#: the keyword arguments of a parameter that the parse here models; any other (an
#: environment variable, a prompt, an eager or hidden option) leaves the command to click
_MODELLED = frozenset(
    {
        "metavar",
        "help",
        "type",
        "default",
        "show_default",
        "is_flag",
        "multiple",
        "callback",
        "shell_complete",
        "required",
        "nargs",
        "optional_value",
        "flag_value",
    }
)


class Declined(Exception):
    """The command line is left to click."""


class Context:
    """What a command reads of click's context (`cli.current_context`): `meta` (the paths
    of the command line, `outputs.record_path`), `obj` (`cli.Options`), `params`, and
    `command` (whose `callback` the pass-name options read)."""

    def __init__(self, command: Declared):
        self.command = command
        self.meta: dict = {}
        self.obj = None
        self.params: dict = {}
        self.resilient_parsing = False

    def find_root(self) -> Context:
        return self


def run_quickly(argv: list[str]) -> None:
    """Run the command line `argv` (the words after the program's name) here and end the
    process, or return where it is left to click."""
    if not argv or argv[0] not in QUICK_COMMANDS or "_JAXPRTOOL_COMPLETE" in os.environ:
        return
    from .cli import _one_program_process, declared_command

    name = argv[0]
    _one_program_process(name)  # (before the command's module is imported, as click's group)
    declared = declared_command(name)
    if not isinstance(declared, Declared):
        return
    ctx = Context(declared)
    try:
        params = parse(declared.params, argv[1:], ctx)
    except Declined:
        return
    ctx.params = params
    sys.exit(_invoke(name, declared, ctx))


def parse(params: list[Param], args: list[str], ctx) -> dict:
    """The keyword arguments of the command function for `args`, each value converted and
    checked as click does, in click's order (the paths noted in `ctx` in that order);
    Declined where click would decide otherwise or say something."""
    if any(not _modelled(p) for p in params):
        raise Declined
    given, order, positional = _split(params, _bare_optional_values(params, args))
    _take_arguments([p for p in params if p.kind == "argument"], positional, given, order)
    values = {}
    for p in _processing_order(params, order):
        values[p.name] = _value(p, given.get(p.name, _MISSING), ctx)
    return values


_MISSING = object()


def _modelled(p: Param) -> bool:
    if not set(p.attrs) <= _MODELLED or any("/" in d for d in p.decls):
        return False
    kind = p.attrs.get("type")
    if kind is not None and not isinstance(kind, TypeRecord):
        return False
    default = p.attrs.get("default")
    return kind is not None or default is None or isinstance(default, str)


def _bare_optional_values(params: list[Param], args: list[str]) -> list[str]:
    """`--diff` -> `--diff=semantic` for each optional-value option given without `=`
    (`cli_click._bare_optional_values`, which click's group applies first)."""
    bare = {
        flag: p.attrs["flag_value"]
        for p in params
        if p.attrs.get("optional_value")
        for flag in p.opts
        if flag.startswith("--")
    }
    return with_bare_values(bare, args)


def _split(params: list[Param], args: list[str]):
    """({name: raw value(s)}, the options in the order given, the positional words), as
    click's parser reads `args` (interspersed options, `--`, `--opt=value`, `-oVALUE`,
    clusters of short flags)."""
    long_opts, short_opts = {}, {}
    for p in params:
        for flag in p.opts:
            is_short = len(flag) == 2 and flag[1] != "-"
            (short_opts if is_short else long_opts)[flag] = p
    given: dict = {}
    order: list[Param] = []
    positional: list[str] = []
    rest = list(args)
    while rest:
        a = rest.pop(0)
        if a == "--":
            break
        if a[:1] != "-" or len(a) == 1:
            positional.append(a)
            continue
        flag, eq, attached = a.partition("=")
        if flag in long_opts:
            _take(long_opts[flag], attached if eq else None, rest, given, order)
        elif a[:2] == "--":
            raise Declined  # (an unknown option: click names the close ones)
        else:
            _take_short_cluster(a, short_opts, rest, given, order)
    return given, order, positional + rest


def _take_short_cluster(a: str, short_opts: dict, rest: list, given: dict, order: list):
    for i, ch in enumerate(a[1:], start=2):
        p = short_opts.get("-" + ch)
        if p is None:
            raise Declined
        if _takes_value(p):
            if i < len(a):
                rest.insert(0, a[i:])
            _take(p, None, rest, given, order)
            return
        _take(p, None, rest, given, order)


def _takes_value(p: Param) -> bool:
    return not p.attrs.get("is_flag")


def _take(p: Param, attached, rest: list, given: dict, order: list) -> None:
    """One occurrence of option `p` (its value `attached` after `=`, else the next words)."""
    nargs = p.attrs.get("nargs", 1)
    if not _takes_value(p):
        if attached is not None:
            raise Declined  # (a flag given a value)
        value = True
    elif attached is not None:
        if nargs != 1 or (p.attrs.get("optional_value") and attached[:1] == "-"):
            raise Declined
        value = attached
    else:
        if len(rest) < nargs:
            raise Declined
        value = rest.pop(0) if nargs == 1 else tuple(rest[:nargs])
        del rest[: 0 if nargs == 1 else nargs]
    if p.attrs.get("multiple"):
        given.setdefault(p.name, []).append(value)
    else:
        given[p.name] = value
    order.append(p)


def _take_arguments(arguments: list[Param], words: list[str], given: dict, order: list):
    """The positional words as the arguments (one taking all of them, or each one word);
    a word left over, or a required argument without one, leaves it to click."""
    if len(arguments) == 1 and arguments[0].attrs.get("nargs") == -1:
        if words:
            given[arguments[0].name] = tuple(words)
        order.append(arguments[0])
        return
    if any(a.attrs.get("nargs", 1) != 1 for a in arguments) or len(words) > len(arguments):
        raise Declined
    for a, w in zip(arguments, words):
        given[a.name] = w
    for a in arguments[len(words) :]:
        if a.attrs.get("required", True) and "default" not in a.attrs:
            raise Declined
    order.extend(arguments)


def _processing_order(params: list[Param], order: list[Param]) -> list[Param]:
    """click's: the parameters given, in the order first given, then the others."""
    first = {}
    for p in order:
        first.setdefault(id(p), len(first))
    return sorted(params, key=lambda p: first.get(id(p), len(params) + len(first)))


def _value(p: Param, raw, ctx):
    """The value the command function gets for `p`: given or default, converted by its
    type (paths noted in `ctx`), then its callback's; Declined where click would refuse."""
    if raw is _MISSING:
        if p.attrs.get("is_flag"):
            raw = p.attrs.get("default", False)
        elif p.attrs.get("multiple") or p.attrs.get("nargs") == -1:
            raw = ()
        else:
            raw = p.attrs.get("default")
    if raw is not None:
        raw = _converted(p, raw, ctx)
    callback = p.attrs.get("callback")
    if callback is None:
        return raw
    try:
        return callback(ctx, p, raw)
    except Exception:  # noqa: BLE001  (click says why: a usage error of its own)
        raise Declined from None


def _converted(p: Param, raw, ctx):
    kind = p.attrs.get("type")
    if kind is None or isinstance(raw, bool):
        return tuple(raw) if isinstance(raw, list) else raw
    if isinstance(raw, (list, tuple)):
        return tuple(_convert_one(p, kind, v, ctx) for v in raw)
    return _convert_one(p, kind, raw, ctx)


def _convert_one(p: Param, kind: TypeRecord, raw, ctx):
    value = kind.convert(raw)
    if value is None:
        raise Declined
    writes = getattr(kind, "writes", None)
    if writes is not None and value != "-":
        from .outputs import record_path

        record_path(ctx, _shown_name(p), value, writes)
    return value


def _shown_name(p: Param) -> str:
    """How click names the parameter in a message (`cli_click._option`)."""
    if p.kind == "option":
        return "/".join(p.opts)
    return (p.attrs.get("metavar") or p.name.upper()).upper()


def _invoke(name: str, declared: Declared, ctx: Context) -> int:
    """Run the command as click's group runs it (`cli_click.main` and `LazyGroup.invoke`,
    `Command.invoke`): the invocation's options and diagnostics, the environment's check,
    the command; the diagnostics written however it ends.  Its exit status."""
    from . import cli, diagnostics
    from .env import check_environment

    cli._QUICK_CONTEXT.append(ctx)
    # the paths of the command line are noted as click notes them: after the group's own
    # work (the environment's check sees none of them)
    paths, ctx.meta = ctx.meta, {}
    try:
        try:
            ctx.obj = cli.Options(diagnostics=diagnostics.begin("text"))
            status = cli.guarded(check_environment)()
            if not status:
                cli.settle_invocation(ctx.obj, None)
                ctx.meta.update(paths)
                cli.command_starts(ctx.obj, name, ctx.params)
                status = declared.fn(**ctx.params)
        finally:
            ended = cli.end_diagnostics()
    except OSError as e:
        return _broken_pipe(e)
    except Exception as e:
        if not cli.is_click_exception(e):
            raise
        return _shown_by_click(e, name)
    if ended is not None:
        return ended
    return int(status) if status else 0


def _broken_pipe(e: OSError) -> int:
    """click's ending of a command whose reader went away (its `main`'s)."""
    if e.errno != errno.EPIPE:
        raise e
    from click.utils import PacifyFlushWrapper

    sys.stdout = PacifyFlushWrapper(sys.stdout)
    sys.stderr = PacifyFlushWrapper(sys.stderr)
    return 1


def _shown_by_click(e: Exception, name: str) -> int:
    """click's usage error (or exit) raised by the command, shown as click shows it in its
    context of the command (`Usage: jaxprtool NAME ...`, the hint, `Error: ...`)."""
    import click

    from .cli_click import main
    from .io import shorten_words

    if isinstance(e, click.exceptions.Exit):
        return e.exit_code
    group_ctx = main.context_class(main, info_name="jaxprtool", **main.context_settings)
    cmd = main.get_command(group_ctx, name)
    if isinstance(e, click.UsageError) and e.ctx is None:
        e.ctx = cmd.context_class(cmd, info_name=name, parent=group_ctx, **cmd.context_settings)
        e.cmd = cmd
    e.message = shorten_words(e.message)
    e.show()
    return e.exit_code
