"""No output over an input: the paths a command line reads and writes, and the check that
none of its outputs is one of its inputs or another of its outputs.

A FILE argument or input option is typed `InputPath`, an output option (`-o`, `--output-file`,
`--consts-out`, `--html`, `--plot`) `OutputPath` (`declare.PathArg`); click's conversion of
each value, or the quick start's, records it in the invocation's context, and `cli.guarded` calls `refuse_overlaps` before the command
does anything.  `fmt a.jaxpr -o a.jaxpr`, `run d.jaxpr -o d.jaxpr`, `check c.jaxpr
--output-format sarif --output-file c.jaxpr`, `trace mod.py:f -o mod.py` (the command adds
the module's file) and `-o x --consts-out x` are bad usage (exit 2), with nothing written:
one file would silently replace the other.  `fmt -i` rewrites its inputs by request.

Two paths are one file when they reach the same inode (links, `./a` and `a`), or, for an
output that does not exist yet, the same real path.  An output that is not a regular file
(`/dev/null`, `/dev/stdout`, a FIFO) is written into, never replaced: it is not checked.  A
folder argument stands for the jaxpr files under it: an output that is one of them is an
input too.
"""

from __future__ import annotations

import os
import stat

from .core import UsageProblem

_INPUTS = "jaxprtool.inputs"
_OUTPUTS = "jaxprtool.outputs"
#: the names of the files a folder argument stands for (`walk.SUFFIXES`)
_JAXPR_SUFFIXES = (".jaxpr", ".jaxpr.txt")


def record_path(ctx, name: str, value, writes: bool) -> None:
    """Note a path of the command line (an input, or an output where `writes`) in the
    invocation's context, under the name the command line gives it (`-o/--output`,
    `[FILE|-]`): `cli_click.InputPath`/`OutputPath` and the quick start note each."""
    key = _OUTPUTS if writes else _INPUTS
    ctx.meta.setdefault(key, []).append((name, os.fsdecode(value)))


def refuse_overlaps(ctx, extra_inputs=()) -> None:
    """Raise UsageProblem when an output of the command line is one of its inputs (or of
    `extra_inputs`: (name, path) pairs a command finds in its arguments), or two outputs are
    one file."""
    if ctx is None:
        return
    inputs = [*ctx.meta.get(_INPUTS, ()), *extra_inputs]
    outputs = ctx.meta.get(_OUTPUTS, ())
    seen: dict = {}
    for name, out in outputs:
        key = _replaced_file(out)
        if key is None:
            continue
        for in_name, path in inputs:
            if _reads(path, key, out):
                _refuse(out, name, f"the input {in_name} {path!r}")
        if key in seen:
            _refuse(out, name, f"the output {seen[key][0]} {seen[key][1]!r}")
        seen[key] = (name, out)


def _refuse(out: str, name: str, other: str) -> None:
    from . import diagnostics

    diagnostics.current().output_file = None  # (the refusal itself goes to no file)
    raise UsageProblem(
        f"{name} {out!r} is the same file as {other}: it would be replaced; nothing was "
        "written (write elsewhere)"
    )


def _replaced_file(out: str):
    """The identity of the regular file writing `out` replaces: its inode, or for a new
    file its real path; None for what is written into (a device, a FIFO) or a folder."""
    try:
        st = os.stat(out)
    except OSError:
        return ("new", os.path.realpath(out))
    if not stat.S_ISREG(st.st_mode):
        return None
    return (st.st_dev, st.st_ino)


def _reads(path: str, key, out: str) -> bool:
    """Whether reading input `path` reads the existing file `key` that `out` reaches (a
    folder: a jaxpr file under it)."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    if (st.st_dev, st.st_ino) == key:
        return True
    if not stat.S_ISDIR(st.st_mode) or key[0] == "new":
        return False
    root, real = os.path.realpath(path), os.path.realpath(out)
    return os.path.commonpath([root, real]) == root and real.endswith(_JAXPR_SUFFIXES)
