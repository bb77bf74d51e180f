"""The pass registry and the pipeline parser and runner.

`PASSES[name]` is a `Pass` record (see `base.py`); calling it runs the pass with
its default options, `PASSES[name](jaxpr) -> jaxpr`.  A pipeline spec is written
as in xDSL and MLIR: pass names separated by commas, each optionally followed by
options in braces, separated by spaces,

    inline{names=relu,gelu},simplify,canonicalize{max-iterations=5},dce

A comma inside braces belongs to the option value (a list); a value may itself be
wrapped in braces (`names={relu, gelu}`, which may then hold spaces).  Values are
integers, booleans (`true`/`false`), strings and comma lists.  `"none"` or the empty
string is the empty pipeline.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ..core import Jaxpr, JaxprError, gc_paused
from ..frozen import Frozen, set_field
from .base import Pass, PassOption, PassOptionError
from .canonicalize import CANONICALIZE
from .cse import CSE
from .dce import DCE
from .fold import FOLD
from .inline import INLINE
from .simplify import SIMPLIFY

__all__ = [
    "PASSES",
    "Pass",
    "PassOption",
    "PassOptionError",
    "PipelineStep",
    "parse_pipeline",
    "parse_pipeline_steps",
    "run_pipeline",
]

PASSES: dict[str, Pass] = {p.name: p for p in (DCE, CSE, FOLD, SIMPLIFY, INLINE, CANONICALIZE)}


class PipelineStep(Frozen):
    """One pass of a pipeline and the options written for it (by keyword, `keep_outputs`)."""

    __slots__ = ("pass_", "options")
    pass_: Pass
    options: dict[str, Any]

    def __init__(self, pass_: Pass, options: dict[str, Any] | None = None) -> None:
        set_field(self, "pass_", pass_)
        set_field(self, "options", {} if options is None else options)

    @property
    def name(self) -> str:
        return self.pass_.name

    def __str__(self) -> str:
        """The step as a spec (`inline{names=relu,gelu}`), options in the record's order."""
        given = [o for o in self.pass_.options if o.key in self.options]
        if not given:
            return self.name
        body = " ".join(f"{o.name}={o.render(self.options[o.key])}" for o in given)
        return f"{self.name}{{{body}}}"

    def run(self, jaxpr: Jaxpr) -> Jaxpr:
        return self.pass_(jaxpr, **self.options)


def _unknown_pass(name: str) -> JaxprError:
    import difflib

    # (a typo gets the nearest pass; not `none` among others, nor passes without commas)
    plain = name != "none" and not any(ch.isspace() for ch in name)
    close = difflib.get_close_matches(name, list(PASSES), n=1) if plain else []
    hint = f"did you mean '{close[0]}'? " if close else ""
    return JaxprError(f"unknown pass '{name}' ({hint}known: {', '.join(sorted(PASSES))}, none)")


def _split(text: str, spec: str, at: Callable[[str], bool]) -> list[str]:
    """`text` cut where at(char) holds outside braces (empty pieces dropped); raises for
    unbalanced braces."""
    pieces: list[str] = []
    depth = 0
    start = 0
    opened = -1
    for i, ch in enumerate(text):
        if ch == "{":
            if depth == 0:
                opened = i
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth < 0:
                piece = text[start : i + 1].strip()
                raise JaxprError(f"unbalanced '}}' in pipeline {spec!r}: one too many in {piece!r}")
        elif depth == 0 and at(ch):
            pieces.append(text[start:i])
            start = i + 1
    if depth > 0:
        name = text[start:opened].strip()
        where = f"the options of pass '{name}' are" if name else f"{text[opened:].strip()!r} is"
        raise JaxprError(f"unbalanced '{{' in pipeline {spec!r}: {where} never closed")
    pieces.append(text[start:])
    return [p.strip() for p in pieces if p.strip()]


def _closing(text: str) -> int:
    """The index of the '}' that closes a '{' just before text (braces are balanced)."""
    depth = 1
    for i, ch in enumerate(text):
        depth += {"{": 1, "}": -1}.get(ch, 0)
        if depth == 0:
            return i
    raise AssertionError("unbalanced braces")  # _split checked them


def _known_options(p: Pass) -> str:
    if not p.options:
        return f"pass '{p.name}' takes no options"
    return "known: " + ", ".join(o.name for o in p.options)


def _parse_options(p: Pass, body: str, spec: str) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for item in _split(body, spec, str.isspace):
        key, eq, text = item.partition("=")
        opt = p.option(key)
        if opt is None:
            what = f"'{key}'" if eq else f"'{item}'"
            raise JaxprError(f"unknown option {what} for pass '{p.name}' ({_known_options(p)})")
        if not eq:
            raise JaxprError(
                f"option '{key}' of pass '{p.name}' needs a value: {key}={opt.shown_metavar}"
            )
        if opt.key in options:
            raise JaxprError(f"option '{key}' given twice for pass '{p.name}'")
        if text.startswith("{") and text.endswith("}"):
            text = text[1:-1]
        if "{" in text or "}" in text:
            raise JaxprError(
                f"bad value for option '{key}' of pass '{p.name}': braces may only wrap a "
                f"whole value, got {text!r}"
            )
        try:
            options[opt.key] = opt.parse(text)
        except ValueError as e:
            raise JaxprError(f"bad value for option '{key}' of pass '{p.name}': {e}") from None
    return options


def parse_pipeline_steps(spec: str | None) -> list[PipelineStep]:
    """The steps of a spec; raises JaxprError (naming the pass or option, listing the known
    ones) for an unknown pass or option, a bad value or unbalanced braces."""
    if spec is None:
        return []
    entries = _split(spec, spec, lambda ch: ch == ",")
    if entries == ["none"]:
        return []
    steps = []
    for entry in entries:
        name, brace, rest = entry.partition("{")
        name = name.strip()
        if brace and not name:
            raise JaxprError(f"expected a pass name before '{{' in pipeline {spec!r}")
        p = PASSES.get(name)
        if p is None:
            raise _unknown_pass(name if brace else entry)
        options: dict[str, Any] = {}
        if brace:
            end = _closing(rest)
            body, after = rest[:end], rest[end + 1 :]
            if after.strip():
                raise JaxprError(
                    f"unexpected '{after.strip()}' after the options of pass '{name}' in "
                    f"pipeline {spec!r} (separate passes with commas)"
                )
            options = _parse_options(p, body, spec)
        steps.append(PipelineStep(p, options))
    return steps


def parse_pipeline(spec: str | None) -> list[str]:
    """The pass names of a spec; raises JaxprError as `parse_pipeline_steps` does."""
    return [s.name for s in parse_pipeline_steps(spec)]


def run_pipeline(
    jaxpr: Jaxpr,
    spec: str | Iterable[PipelineStep] | None,
    print_after_all: Callable[[str, Jaxpr], None] | None = None,
) -> Jaxpr:
    """Run the passes of `spec` (a spec string or parsed steps) in order.
    `print_after_all(step, jaxpr)` is called after each, with the step as written
    (`dce`, `inline{names=relu}`)."""
    steps: Sequence[PipelineStep] = (
        parse_pipeline_steps(spec) if spec is None or isinstance(spec, str) else list(spec)
    )
    for step in steps:
        with gc_paused():
            jaxpr = step.run(jaxpr)
        if print_after_all is not None:
            print_after_all(str(step), jaxpr)
    return jaxpr
