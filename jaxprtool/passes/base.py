"""Passes as named records, in the manner of xDSL's `ModulePass`.

A `Pass` has a name, a one-line `help`, a long `doc` (the help text of its
command, with an example), its options and a function `fn(jaxpr, **options)`.
Each pass module declares its record next to its function; `registry.py`
collects them, parses pipelines (`inline{names=relu},simplify,cse,dce`), and
`commands/pass_cmds.py` builds one command per record.

Option types: `int`, `bool`, `str`, `list[int]` and `list[str]`.  List values are
written with commas (`names=relu,gelu`, `--names relu,gelu`) and given to `fn`
as tuples; empty items are dropped.
"""

from __future__ import annotations

import typing
from collections.abc import Callable
from typing import Any

from ..core import Jaxpr, UsageProblem
from ..frozen import Frozen, set_field

_TRUE = ("true", "1")
_FALSE = ("false", "0")


class PassOption(Frozen):
    """One option of a pass: `name` as written (`keep-outputs`), its type, its default
    (None: not given), a one-line help; `metavar` for the help text, `noun` for the
    message of a bad list of integers, `minimum` for integers."""

    __slots__ = ("name", "type", "default", "help", "metavar", "noun", "minimum")
    name: str
    type: Any
    default: Any
    help: str
    metavar: str | None
    noun: str | None
    minimum: int | None

    def __init__(
        self,
        name: str,
        type: Any,
        default: Any,
        help: str,
        metavar: str | None = None,
        noun: str | None = None,
        minimum: int | None = None,
    ) -> None:
        set_field(self, "name", name)
        set_field(self, "type", type)
        set_field(self, "default", default)
        set_field(self, "help", help)
        set_field(self, "metavar", metavar)
        set_field(self, "noun", noun)
        set_field(self, "minimum", minimum)

    @property
    def key(self) -> str:
        """The keyword argument of the pass function (`keep_outputs`)."""
        return self.name.replace("-", "_")

    @property
    def item_type(self) -> type | None:
        """The item type of a list option (int or str), else None."""
        if typing.get_origin(self.type) is list:
            return typing.get_args(self.type)[0]
        return None

    @property
    def shown_metavar(self) -> str:
        if self.metavar:
            return self.metavar
        item = self.item_type
        if item is int:
            return "I,J,..."
        if item is str:
            return "NAME,..."
        return {int: "N", bool: "BOOL"}.get(self.type, "TEXT")

    def parse(self, text: str) -> Any:
        """The value written `text`; raises ValueError with a message (no option name)."""
        item = self.item_type
        if item is not None:
            parts = [p.strip() for p in text.split(",") if p.strip()]
            if item is str:
                return tuple(parts)
            try:
                return tuple(int(p) for p in parts)
            except ValueError:
                raise ValueError(
                    f"expected comma-separated {self.noun or 'integers'}, got {text!r}"
                ) from None
        if self.type is bool:
            low = text.strip().lower()
            if low in _TRUE:
                return True
            if low in _FALSE:
                return False
            raise ValueError(f"expected true or false, got {text!r}")
        if self.type is int:
            try:
                value = int(text)
            except ValueError:
                raise ValueError(f"expected an integer, got {text!r}") from None
            if self.minimum is not None and value < self.minimum:
                raise ValueError(f"expected an integer >= {self.minimum}, got {text!r}")
            return value
        return text

    def render(self, value: Any) -> str:
        """`value` written back as `parse` reads it."""
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, tuple):
            return ",".join(str(v) for v in value)
        return str(value)


class Pass(Frozen):
    """A named pass: `fn(jaxpr, **options) -> jaxpr`.  Calling the record runs the pass
    with the defaults of the options not given."""

    __slots__ = ("name", "help", "doc", "fn", "options")
    name: str
    help: str
    doc: str
    fn: Callable[..., Jaxpr]
    options: tuple[PassOption, ...]

    def __init__(
        self,
        name: str,
        help: str,
        doc: str,
        fn: Callable[..., Jaxpr],
        options: tuple[PassOption, ...] = (),
    ) -> None:
        set_field(self, "name", name)
        set_field(self, "help", help)
        set_field(self, "doc", doc)
        set_field(self, "fn", fn)
        set_field(self, "options", options)

    def option(self, name: str) -> PassOption | None:
        return next((o for o in self.options if o.name == name), None)

    def __call__(self, jaxpr: Jaxpr, **options: Any) -> Jaxpr:
        known = {o.key: o for o in self.options}
        for key in options:
            if key not in known:
                raise TypeError(f"pass {self.name!r} has no option {key!r}")
        kwargs = {k: options.get(k, o.default) for k, o in known.items()}
        return self.fn(jaxpr, **kwargs)


class PassOptionError(UsageProblem):
    """An option value that does not fit the program (found while running): exit 2.

    `detail` is the message without the pass and option names (a command's own flag
    shows it as `Invalid value for --OPTION: DETAIL`)."""

    def __init__(self, pass_name: str, option: str, detail: str):
        super().__init__(f"option '{option}' of pass '{pass_name}': {detail}")
        self.pass_name = pass_name
        self.option = option
        self.detail = detail
