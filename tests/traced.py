"""What the tests of `jaxprtool trace --consts-out` share: a module written to a folder and
its functions traced (each one's program and constants archive), and the AD commands and
`run` on what they give."""

from __future__ import annotations

import contextlib

import numpy as np
from conftest import written_module
from jax_oracle import run


def trace_module(folder, stem: str, source: str, functions, *args: str):
    """`trace --consts-out` of each of `functions` of `source` (a module written to `folder`;
    `args`: the trace's `--arg TYPE`s): ({function: (text path, archive path)}, the module)."""
    mod = written_module(folder, stem, source)
    out = {}
    with contextlib.chdir(folder):
        for fn in functions:
            prog, consts = folder / f"{fn}.jaxpr", folder / f"{fn}.npz"
            r = run(
                ["trace", f"{mod.__name__}:{fn}", *args, "-o", str(prog)]
                + ["--consts-out", str(consts)]
            )
            assert r.exit_code == 0, r.output
            out[fn] = (prog, consts)
    return out, mod


def derive(folder, command: str, prog, *extra: str):
    """The program `jaxprtool COMMAND` writes of `prog` (a file in `folder`)."""
    out = folder / f"{prog.stem}.{command}.jaxpr"
    r = run([command, str(prog), "-o", str(out), *extra])
    assert r.exit_code == 0, r.output
    return out


def run_with_consts(folder, prog, args, consts) -> list[np.ndarray]:
    """`jaxprtool run PROG --args ... --consts CONSTS`: its outputs."""
    a, o = folder / "a.npz", folder / "o.npz"
    np.savez(a, *args)
    r = run(["run", str(prog), "--args", str(a), "--consts", str(consts), "-o", str(o)])
    assert r.exit_code == 0, r.output
    with np.load(o) as d:
        return [d[f"out{i}"] for i in range(len(d.files))]


def archive(consts) -> list[np.ndarray]:
    """The arrays of a constants archive, in its order (`const0, const1, ...`)."""
    with np.load(consts) as d:
        return [d[f"const{i}"] for i in range(len(d.files))]
