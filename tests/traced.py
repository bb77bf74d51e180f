"""What the tests of `jaxprtool trace --consts-out` share: a module written to a folder and
its functions traced (each one's program and constants archive), and the AD commands and
`run` on what they give."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
from conftest import written_module
from jax_oracle import close, jax_value_and_vjp, run


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


#: the point, tangent and output cotangent the traced test programs (x: f32[2] -> f32[3]
#: inside, scalar losses) are checked at
X = np.array([0.7, -0.3], np.float32)
T = np.array([0.2, 1.1], np.float32)
CT = np.array([0.3, -1.0, 2.0], np.float32)


def traced_programs(tmp_path_factory, stem: str, source: str, functions):
    """A module fixture's body: `trace_module` of `functions` (each taking one f32[2]) in a
    new folder, the working folder while the fixture lives; yields (programs, the module,
    the folder)."""
    folder = tmp_path_factory.mktemp(stem)
    mp = pytest.MonkeyPatch()
    mp.chdir(folder)
    try:
        out, mod = trace_module(folder, stem, source, functions, "--arg", "f32[2]")
        yield out, mod, folder
    finally:
        mp.undo()


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


# ---------------------------------------------------------------- checks the files share


def check_numbered_as_archive(traced, fn: str, kinds, arrays) -> None:
    """The program the AD commands read (`for_ad`) has every constant as its own, in the
    order `run` reads the archive: the nested ones kept by `kinds` (in step 3's order), the
    archive's arrays the module's `arrays`."""
    from jaxprtool.consts_order import for_ad, nested_with_consts, number_constants
    from jaxprtool.text.parser import parse

    progs, mod, _ = traced
    prog, consts = progs[fn]
    j = parse(prog.read_text(), str(prog)).jaxpr
    numbered = number_constants(j)
    assert [e.prim for _, e in nested_with_consts(numbered.program)] == kinds
    lifted = for_ad(j)
    assert not nested_with_consts(lifted)
    assert [v.type for v in lifted.constvars] == [v.type for v in numbered.constvars]
    for got, want in zip(archive(consts), arrays, strict=True):
        np.testing.assert_array_equal(got, np.asarray(getattr(mod, want)))


def check_jvp(traced, fn: str) -> None:
    """`jvp` of the traced `fn`, run with its archive, equals `jax.jvp` at X along T."""
    import jax

    progs, mod, folder = traced
    prog, consts = progs[fn]
    got_y, got_t = run_with_consts(folder, derive(folder, "jvp", prog), [X, T], consts)
    f = getattr(mod, fn)
    y, t = jax.jit(lambda x, t: jax.jvp(f, (x,), (t,)))(X, T)  # (one compile, not one an op)
    close(got_y, y)
    close(got_t, t)


def check_dot_product(traced, fn: str, oracle=None) -> None:
    """linearize's linear map L and its transpose: <CT, L T> = <L^T CT, T>, the values and
    L^T CT JAX's vjp of `oracle` (default: `fn` itself)."""
    progs, mod, folder = traced
    prog, consts = progs[fn]
    lin = derive(folder, "linearize", prog)
    y, lt = run_with_consts(folder, lin, [X, T], consts)
    y2, ltw = run_with_consts(folder, derive(folder, "transpose", lin), [X, CT], consts)
    want_y, want_ltw = jax_value_and_vjp(getattr(mod, oracle or fn), X, CT)
    close(y, want_y)
    close(y2, want_y)
    close(ltw, want_ltw)
    np.testing.assert_allclose(np.dot(CT, lt), np.dot(ltw, T), rtol=1e-5)
