"""The environment variables the tool reads, each parsed strictly (docs/COMMANDS.md: "Environment
variables"): a value that is not one the variable takes is a one-line error, never taken for
another (`JAXPRTOOL_PURE_PYTHON_PARSER=0` is no, not "set")."""

from __future__ import annotations

import math
import os
import re

from .core import UsageProblem
from .lazy import LazyPattern


def check_environment() -> None:
    """The tool's own variables, checked when a command starts (a bad value is an error
    whether or not the command reads it)."""
    flag("JAXPRTOOL_PURE_PYTHON_PARSER")
    flag("JAXPRTOOL_PURE_PYTHON")
    memory = os.environ.get("JAXPRTOOL_MAX_MEMORY", "")
    if memory.strip():
        parse_size(memory)


_YES = ("1", "true", "yes", "on")
_NO = ("", "0", "false", "no", "off")


def flag(name: str) -> bool:
    """A yes/no variable: 1, true, yes, on; 0, false, no, off, empty or unset."""
    value = os.environ.get(name, "")
    word = value.strip().lower()
    if word in _YES or word in _NO:
        return word in _YES
    raise UsageProblem(f"{name}={value!r} is not a yes/no value: give 1 or 0 (or unset it)")


def check_completion(complete_var: str) -> None:
    """The variables a shell's completion script sets (`COMP_WORDS`, `COMP_CWORD`: a word
    index, except fish's, which is the word being completed), checked before click reads
    them."""
    instruction = os.environ.get(complete_var, "")
    if not instruction.endswith("_complete") or instruction.startswith("fish"):
        return
    if "COMP_WORDS" not in os.environ:
        raise UsageProblem(f"{complete_var}={instruction} needs COMP_WORDS (the shell sets it)")
    cword = os.environ.get("COMP_CWORD", "")
    if not re.fullmatch(r"[0-9]{1,6}", cword):
        raise UsageProblem(
            f"COMP_CWORD={cword!r} is not a word index (the shell's completion sets it)"
        )


_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def parse_size(text: str, what: str = "JAXPRTOOL_MAX_MEMORY") -> int:
    """`8G`, `512M`, `1.5T`, `1000000` (bytes): a finite positive size below 2**63 (`what`
    names the setting in the refusal)."""
    body = text.strip().upper().removesuffix("B")
    unit = body[-1:] if body[-1:] in _UNITS else ""
    number = body[: len(body) - len(unit)].strip()
    try:
        value = float(number) if _NUMBER.fullmatch(number) else math.nan
    except OverflowError:
        value = math.inf
    size = value * _UNITS[unit]
    if not (math.isfinite(size) and 1 <= size < 2**63):
        raise UsageProblem(
            f"{what}={text!r} is not a size: give a number of bytes from 1 to "
            "2^63 with an optional K, M, G or T suffix, such as 8G"
        )
    return int(size)


#: digits, with a fraction (no exponent: `1e3T` is refused, not 1000 TiB)
_NUMBER = LazyPattern(r"[0-9]+(?:\.[0-9]*)?|\.[0-9]+")
