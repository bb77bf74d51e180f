"""The command line's declarations, click-free: each command's options and arguments as
records, declared once with `option`, `argument` and `command` (click's decorators'
signatures).  click's command is built from them (`cli_click.click_command`), and the
program's quick start (`quickstart`) parses the common command lines from the same records
without importing click (click's modules and the gettext, locale, uuid and platform modules
that only it needs: ~42M instructions, 6.5% of a transformer's grad; issue 49).

A parameter type is a record here too (`Choice`, `IntRange`, `PathArg`), made into click's
type only when click's command is built (`cli_click.click_type`); a module whose command
the quick start never parses may pass click's own types and callbacks through unchanged."""

from __future__ import annotations

#: the attribute of a command function holding its parameter records (click's
#: `__click_params__`: appended bottom-up as the decorators apply)
PARAMS_ATTR = "__jaxprtool_params__"


class Param:
    """One option or argument: click's declarations and keyword arguments, as given."""

    __slots__ = ("kind", "decls", "attrs")

    def __init__(self, kind: str, decls: tuple[str, ...], attrs: dict):
        self.kind = kind  # "option" or "argument"
        self.decls = decls
        self.attrs = attrs

    @property
    def opts(self) -> list[str]:
        """The option's flags (`-o`, `--output`), as click lists them."""
        return [d for d in self.decls if d[:1] == "-"]

    @property
    def name(self) -> str:
        """The keyword the command function gets (click's rule: the identifier given, else
        the longest-prefixed flag's words, lower-cased, `-` as `_`)."""
        plain = [d for d in self.decls if d[:1] != "-" and "/" not in d]
        if plain:
            return plain[0]
        flags = [d.split("/")[0] for d in self.decls]
        flags.sort(key=lambda f: -(len(f) - len(f.lstrip("-"))))
        return flags[0].lstrip("-").replace("-", "_").lower()


def _remember(f, param: Param):
    f.__dict__.setdefault(PARAMS_ATTR, []).append(param)
    return f


def option(*decls: str, **attrs):
    """Decorator: an option of the command (click.option's arguments; `optional_value=True`
    for `cli.OptionalValue`, an option whose value may be left out: `--diff`,
    `--diff=text`)."""
    return lambda f: _remember(f, Param("option", decls, attrs))


def argument(*decls: str, **attrs):
    """Decorator: a positional argument of the command (click.argument's arguments)."""
    return lambda f: _remember(f, Param("argument", decls, attrs))


def with_bare_values(bare: dict[str, str], args: list[str]) -> list[str]:
    """`args` with each optional-value option given without `=` (a key of `bare`) given its
    value there (`--diff` -> `--diff=semantic`), up to `--`: click's group (`cli_click`) and
    the quick start both read the command line so."""
    if not bare:
        return args
    out = []
    for i, a in enumerate(args):
        if a == "--":
            return out + args[i:]
        out.append(f"{a}={bare[a]}" if a in bare else a)
    return out


class Declared:
    """A command as declared: its function, its parameters (in the order of the command
    line's help) and click.command's keyword arguments (`cli_click.click_command` builds
    click's command from it)."""

    def __init__(self, fn, name: str | None, attrs: dict):
        self.fn = fn
        self.name = name  # (None: click's, made from the function's name)
        self.attrs = attrs

    @classmethod
    def of(cls, fn, name: str, params: list[Param], **attrs) -> Declared:
        """The command `name` running `fn`, of the parameters `params` (in the help's
        order), made without decorators (the pass commands, from the pass records)."""
        fn.__dict__[PARAMS_ATTR] = list(reversed(params))
        return cls(fn, name, attrs)

    @property
    def params(self) -> list[Param]:
        return list(reversed(self.fn.__dict__.get(PARAMS_ATTR, [])))

    @property
    def callback(self):
        """The function the command runs (`ctx.command.callback`, as click's)."""
        return self.fn


def command(name: str | None = None, **attrs):
    """Decorator: the function becomes a declared command (click.command's arguments; the
    class is always `cli.Command`)."""
    return lambda f: Declared(f, name, attrs)


class TypeRecord:
    """A parameter type the quick start converts itself (`convert`: the value, or None where
    it leaves the decision to click)."""

    def convert(self, value: str):
        raise NotImplementedError


class Choice(TypeRecord):
    """click.Choice: one of `choices`, as written."""

    def __init__(self, choices):
        self.choices = tuple(choices)

    def convert(self, value):
        return value if value in self.choices else None


class IntRange(TypeRecord):
    """click.IntRange(min=...): an integer (as Python's `int` reads one), at least `min`."""

    def __init__(self, min: int):
        self.min = min

    def convert(self, value):
        if isinstance(value, int):
            n = value
        else:
            try:
                n = int(value)
            except ValueError:
                return None
        return n if n >= self.min else None


class PathArg(TypeRecord):
    """A path the command reads (`outputs.InputPath`) or writes (`outputs.OutputPath`)."""

    def __init__(self, writes: bool, allow_dash: bool = False, dir_okay: bool = True):
        self.writes = writes
        self.allow_dash = allow_dash
        self.dir_okay = dir_okay

    def convert(self, value):
        """The path, where click.Path(allow_dash, dir_okay, readable) passes it; None where
        it would refuse it (click then says why)."""
        import os
        import stat

        if self.writes and not value.strip():
            return None
        if self.allow_dash and value == "-":
            return value
        try:
            st = os.stat(value)
        except OSError:
            return value  # (not there: the command says it cannot be read)
        if not self.dir_okay and stat.S_ISDIR(st.st_mode):
            return None
        if not os.access(value, os.R_OK):
            return None
        return value
