"""Self-documenting golden files, in the manner of LLVM's lit/FileCheck: every `*.jaxpr` under
`tests/golden/lit/` says which command it runs and what that command must print.

Format of a golden file (also in tests/golden/lit/README.md)::

    # RUN: jaxprtool grad --argnums 0
    #
    # Free comment lines document the file.

    # CASE: grad of sin is cos
    # JAX: lambda x: jnp.sin(x)
    # ARGS: f32[]
    { lambda ; a:f32[]. let b:f32[] = sin a in (b,) }
    # EXPECT:
    { lambda ; a:f32[]. let b:f32[] = cos a in (b,) }

    # CASE: grad of a non-scalar output is refused
    { lambda ; a:f32[3]. let b:f32[3] = sin a in (b,) }
    # EXPECT-ERROR: Gradient only defined for scalar-output functions

- The first line is `# RUN: jaxprtool ARGS...`: the command line (split like a shell does) run
  on every case of the file, reading the case's input on standard input.
- A directive is a line `# NAME: value` with NAME in capitals; the known ones are RUN (first
  line only), CASE, JAX, ARGS, CHECK, EXPECT and EXPECT-ERROR, and any other is an error (a
  typo would otherwise silently turn into a comment).  Other lines starting with `#` are
  comments and are ignored everywhere; so are blank lines around a block.
- `# CASE: TITLE` starts a case (titles are ASCII and unique within a file).  Its input is
  the non-comment text up to `# EXPECT:` or `# EXPECT-ERROR:`; that text alone is fed to the
  command (so error locations count its lines, from 1).
- `# EXPECT:` is followed by the exact standard output (up to the next CASE or the end),
  compared after stripping trailing whitespace from every line and blank lines at both ends;
  the exit code must be 0.  `# EXPECT-ERROR: TEXT`: the exit code must be 1 and TEXT must
  occur in standard error.
- Numbers: `# JAX: EXPR` is a Python expression of a function (with `jnp`, `lax` and `jax`
  in scope) and `# ARGS: TYPES` the types of its arguments (`f32[3] i32[]`).  With them the
  EXPECT program is run through the tool's evaluator (jaxprtool.backend, i.e. XLA) on random
  inputs and compared with JAX's own transformation of the function, chosen by the command:
  `grad` -> jax.value_and_grad (--argnums, --with-value, --has-aux honoured), `jvp` and
  `linearize` -> jax.jvp, `vjp` -> jax.vjp, `transpose` -> jax.linear_transpose (all inputs
  linear), the clean-up passes and `fmt` -> "same" (the EXPECT program computes what the
  input computes; no JAX line needed).  `# CHECK: grad|jvp|vjp|transpose|same` overrides the
  choice (e.g. `vjp` for a transposed linearize form).  When the input program's input types
  are exactly ARGS, the input itself is also checked against the function, so the JAX line
  is known to describe the input.  Every AD case with an EXPECT must have a JAX line.
- Random inputs (4 draws per case): floats uniform in [-1, 1); integers and booleans in {0, 1},
  scalars alternating between draws so that both branches of a cond are taken.

Expected text is written by hand from a derivation, never pasted from the tool's output
(CONTRIBUTING.md: JAX is the oracle).  The JAX expressions are test data of this repository,
evaluated with no builtins; the tool itself never evaluates its input.
"""

from __future__ import annotations

import difflib
import re
import shlex
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from jaxprtool.cli import COMMANDS, main

LIT_DIR = Path(__file__).resolve().parent / "golden" / "lit"

DIRECTIVE = re.compile(r"^# ([A-Z][A-Z-]*):(?: (.*))?$")
KNOWN = {"RUN", "CASE", "JAX", "ARGS", "CHECK", "EXPECT", "EXPECT-ERROR"}
AD_MODES = {
    "grad": "grad",
    "jvp": "jvp",
    "linearize": "jvp",
    "vjp": "vjp",
    "transpose": "transpose",
}
PASS_COMMANDS = {"dce", "cse", "fold", "simplify", "inline", "canonicalize", "opt", "fmt"}
CHECK_MODES = {"grad", "jvp", "vjp", "transpose", "same"}
SEEDS = 4  # random inputs per case
TYPE = re.compile(r"^([a-z]+[0-9]*)\[([0-9,]*)\]$")


class LitFormatError(ValueError):
    pass


@dataclass
class Case:
    path: Path
    line: int  # of the CASE directive
    title: str
    run: list[str]
    input: str = ""
    expect: str | None = None
    error: str | None = None
    jax: str | None = None
    args: list[str] | None = None
    check: str | None = None
    _input_lines: list[str] = field(default_factory=list, repr=False)

    @property
    def id(self) -> str:
        """`grad_sin/grad of sin is cos` (the file's path under tests/golden/lit, no suffix)."""
        try:
            name = self.path.relative_to(LIT_DIR).with_suffix("").as_posix()
        except ValueError:
            name = self.path.stem
        return f"{name}/{self.title}"

    @property
    def command(self) -> str:
        return next(t for t in self.run if t in COMMANDS)

    @property
    def mode(self) -> str | None:
        if self.check:
            return self.check
        if self.command in AD_MODES:
            return AD_MODES[self.command]
        return "same" if self.command in PASS_COMMANDS else None


def _block(lines: list[str]) -> str:
    """Lines -> text: trailing whitespace stripped, blank lines at both ends dropped."""
    return "\n".join(s.rstrip() for s in lines).strip("\n")


def parse_lit(text: str, path: Path) -> list[Case]:
    """The cases of one golden file; LitFormatError names FILE:LINE for malformed files."""

    def fail(n, msg):
        raise LitFormatError(f"{path}:{n}: {msg}")

    lines = text.splitlines()
    m = DIRECTIVE.match(lines[0]) if lines else None
    if not m or m.group(1) != "RUN" or not (m.group(2) or "").startswith("jaxprtool "):
        fail(1, "the first line must be '# RUN: jaxprtool COMMAND FLAGS...'")
    run = shlex.split(m.group(2))[1:]
    if not any(t in COMMANDS for t in run):
        fail(1, f"no jaxprtool command in RUN: {m.group(2)}")
    cases: list[Case] = []
    cur: Case | None = None
    where = None  # "input" | "expect" | "error" (nothing may follow EXPECT-ERROR)
    expect_lines: list[str] = []

    def finish(n):
        if cur is None:
            return
        if where == "input":
            fail(n, f"case '{cur.title}' has no EXPECT or EXPECT-ERROR")
        cur.input = _block(cur._input_lines)
        if not cur.input:
            fail(cur.line, f"case '{cur.title}' has no input")
        if where == "expect":
            cur.expect = _block(expect_lines)
        cases.append(cur)

    for n, raw in enumerate(lines[1:], start=2):
        m = DIRECTIVE.match(raw.rstrip())
        if m is None:
            if raw.startswith("#"):
                continue  # comment
            if cur is None:
                if raw.strip():
                    fail(n, "text before the first '# CASE:'")
                continue
            if where == "input":
                cur._input_lines.append(raw)
            elif where == "expect":
                expect_lines.append(raw)
            elif raw.strip():
                fail(n, "text after EXPECT-ERROR")
            continue
        name, value = m.group(1), (m.group(2) or "").strip()
        if name not in KNOWN:
            fail(n, f"unknown directive '{name}' (known: {', '.join(sorted(KNOWN))})")
        if name == "RUN":
            fail(n, "RUN is allowed only on the first line")
        if name == "CASE":
            finish(n)
            if not value or not value.isascii() or "[" in value or "]" in value:
                fail(n, "a case title must be non-empty ASCII without brackets")
            if any(c.title == value for c in cases):
                fail(n, f"duplicate case title '{value}'")
            cur, where, expect_lines = Case(path, n, value, run), "input", []
            continue
        if cur is None:
            fail(n, f"{name} before the first '# CASE:'")
        if where != "input":
            fail(n, f"{name} after the case's EXPECT")
        if name == "EXPECT":
            if value:
                fail(n, "the expected text goes on the lines after '# EXPECT:'")
            where = "expect"
        elif name == "EXPECT-ERROR":
            if not value:
                fail(n, "EXPECT-ERROR needs the text the error message must contain")
            cur.error, where = value, "error"
        elif name == "JAX":
            cur.jax = value
        elif name == "ARGS":
            cur.args = value.split()
            for t in cur.args:
                if not TYPE.match(t):
                    fail(n, f"bad type '{t}' in ARGS (e.g. f32[3] i32[])")
        elif name == "CHECK":
            if value not in CHECK_MODES:
                fail(n, f"CHECK must be one of {', '.join(sorted(CHECK_MODES))}")
            cur.check = value
    finish(len(lines))
    if not cases:
        fail(1, "no '# CASE:' in the file")
    for c in cases:
        if c.jax and not c.args and c.mode != "same":
            fail(c.line, f"case '{c.title}': JAX needs ARGS")
    return cases


def _discover() -> list[Case]:
    out: list[Case] = []
    for p in sorted(LIT_DIR.rglob("*.jaxpr")):
        out.extend(parse_lit(p.read_text(), p))
    return out


CASES = _discover()
NUMERIC = [c for c in CASES if c.expect is not None and (c.jax or c.mode == "same")]


# ---------------------------------------------------------------- the golden text


def _invoke(case: Case):
    return CliRunner().invoke(main, case.run, input=case.input + "\n")


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_golden(case: Case):
    r = _invoke(case)
    where = f"{case.path.name}:{case.line} ({' '.join(['jaxprtool', *case.run])})"
    if case.error is not None:
        assert r.exit_code == 1, f"{where}: exit {r.exit_code}, expected 1\n{r.output}"
        assert case.error in r.stderr, f"{where}: '{case.error}' not in stderr:\n{r.stderr}"
        return
    assert r.exit_code == 0, f"{where}: exit {r.exit_code}\n{r.output}"
    got = _block(r.stdout.splitlines())
    if got != case.expect:
        diff = "\n".join(
            difflib.unified_diff(
                case.expect.splitlines(), got.splitlines(), "expected", "got", lineterm=""
            )
        )
        pytest.fail(f"{where}: output differs from the golden text\n{diff}")


# ---------------------------------------------------------------- numbers against JAX


def _flag(run: list[str], name: str) -> str | None:
    for k, t in enumerate(run):
        if t == name and k + 1 < len(run):
            return run[k + 1]
        if t.startswith(name + "="):
            return t.split("=", 1)[1]
    return None


def _argnums(case: Case, default):
    v = _flag(case.run, "--argnums")
    return default if v is None else tuple(int(p) for p in v.split(",") if p.strip())


def _is_float(t: str) -> bool:
    return t.startswith(("f", "bf", "c"))


def _shape(t: str) -> tuple[int, ...]:
    dims = TYPE.match(t).group(2)
    return tuple(int(d) for d in dims.split(",")) if dims else ()


def _random(t: str, rng, seed: int = 0) -> np.ndarray:
    """Floats uniform in [-1, 1); integers and booleans in {0, 1}, scalars alternating with
    the seed (so that both branches of a cond are taken)."""
    from jaxprtool.core import np_dtype

    m = TYPE.match(t)
    dtype, shape = np_dtype(m.group(1)), _shape(t)
    if m.group(1) == "bool" or m.group(1).startswith(("i", "u")):
        bits = np.asarray(seed % 2) if shape == () else rng.integers(0, 2, shape)
        return bits.astype(dtype)
    return np.asarray(rng.uniform(-1.0, 1.0, shape), dtype=dtype)


def _types(jaxpr) -> list[str]:
    return [str(v.type) for v in jaxpr.invars]


def _leaves(tree) -> list[np.ndarray]:
    import jax

    return [np.asarray(x) for x in jax.tree_util.tree_leaves(tree)]


#: per case, JAX's derivative of its function under `jax.jit`, made once for its seeds: one
#: compile (eagerly, the forward and the backward pass compiled one each)
_JITTED: dict = {}


def _with(xs, diff, d) -> list:
    """`xs` with the entries at `diff` replaced by `d`."""
    full = list(xs)
    for i, v in zip(diff, d):
        full[i] = v
    return full


def _jitted(case: Case, fn, diff):
    """The case's jitted derivative: (xs, primals, tangents) -> jax.jvp's (y, ty), or
    (xs, primals, cotangents) -> (y, jax.vjp's cotangents); the primals at `diff`."""
    import jax

    if case.id not in _JITTED:

        def jvp(xs, p, t):
            return jax.jvp(lambda *d: fn(*_with(xs, diff, d)), p, t)

        def vjp(xs, p, c):
            y, pull = jax.vjp(lambda *d: fn(*_with(xs, diff, d)), *p)
            return y, pull(c)

        _JITTED[case.id] = jax.jit(jvp if case.mode == "jvp" else vjp)
    return _JITTED[case.id]


def _reference(case: Case, fn, xs, rng):
    """(inputs of the EXPECT program, JAX's outputs for them) for the case's mode."""
    import jax

    args = case.args
    mode = case.mode
    if mode == "grad":
        argnums = _argnums(case, (0,))
        has_aux = "--has-aux" in case.run
        if case.id not in _JITTED:  # (see _JITTED)
            _JITTED[case.id] = jax.jit(jax.value_and_grad(fn, argnums, has_aux=has_aux))
        val, grads = _JITTED[case.id](*xs)
        out = []
        if "--with-value" in case.run:
            out += _leaves(val[0] if has_aux else val)
        if has_aux:
            out += _leaves(val[1])
        return list(xs), out + _leaves(grads)
    if mode in ("jvp", "vjp"):
        argnums = _argnums(case, tuple(range(len(args))))
        diff = [i for i in argnums if _is_float(args[i])]
        primals = [xs[i] for i in diff]
        if mode == "jvp":
            ts = [_random(args[i], rng) for i in diff]
            y, ty = _jitted(case, fn, diff)(xs, primals, ts)
            keep = [np.issubdtype(np.asarray(a).dtype, np.inexact) for a in _leaves(y)]
            touts = [t for t, k in zip(_leaves(ty), keep) if k]
            return list(xs) + ts, _leaves(y) + touts
        y = jax.eval_shape(lambda *d: fn(*_with(xs, diff, d)), *primals)
        for leaf in jax.tree_util.tree_leaves(y):
            if not np.issubdtype(leaf.dtype, np.inexact):
                pytest.fail(f"{case.id}: the vjp check supports float outputs only")
        cts = jax.tree_util.tree_map(
            lambda a: np.asarray(rng.uniform(-1.0, 1.0, a.shape), dtype=a.dtype), y
        )
        y, pulled = _jitted(case, fn, diff)(xs, primals, cts)
        return list(xs) + _leaves(cts), _leaves(y) + _leaves(pulled)
    if mode == "transpose":
        if _flag(case.run, "--linear") or _flag(case.run, "--residuals"):
            pytest.fail(f"{case.id}: the transpose check takes every input as linear")
        y = jax.eval_shape(fn, *xs)
        cts = jax.tree_util.tree_map(
            lambda a: np.asarray(rng.uniform(-1.0, 1.0, a.shape), dtype=a.dtype), y
        )
        return _leaves(cts), _leaves(jax.linear_transpose(fn, *xs)(cts))
    pytest.fail(f"{case.id}: no numeric check for mode {mode!r}")


def _namespace():
    import jax
    import jax.numpy as jnp
    from jax import lax

    return {"__builtins__": {}, "jnp": jnp, "lax": lax, "jax": jax}


def test_every_ad_case_is_checked_against_jax():
    missing = [
        c.id
        for c in CASES
        if c.expect is not None and c.mode not in (None, "same") and not (c.jax and c.args)
    ]
    assert not missing, f"AD goldens without '# JAX:' and '# ARGS:' lines: {missing}"


@pytest.mark.parametrize("case", NUMERIC, ids=[c.id for c in NUMERIC])
def test_numbers(case: Case):
    pytest.importorskip("jax")
    from jax_oracle import close

    from jaxprtool import backend
    from jaxprtool.text.parser import parse

    source = parse(case.input, "<input>").jaxpr
    expect = parse(case.expect, "<expect>").jaxpr
    fn = eval(case.jax, _namespace()) if case.jax else None  # test data of this repository
    if fn is not None:  # (one compile for the seeds, not one per primitive and seed)
        import jax

        fn = jax.jit(fn)
    arg_types = case.args or _types(source)
    for seed in range(SEEDS):
        rng = np.random.default_rng([zlib.crc32(case.id.encode()), seed])
        xs = [_random(t, rng, seed) for t in arg_types]
        direct = fn is not None and _types(source) == arg_types
        if direct:  # the JAX line describes the input program
            got = backend.evaluate(source, xs)
            want = _leaves(fn(*xs))
            assert len(got) == len(want), f"{case.id}: the input has {len(got)} outputs"
            for a, b in zip(got, want):
                close(a, b)
        if case.mode == "same":
            ins, want = xs, backend.evaluate(source, xs)
        else:
            ins, want = _reference(case, fn, xs, rng)
        assert _types(expect) == [_type_of(x) for x in ins], (
            f"{case.id}: EXPECT inputs {_types(expect)} do not fit the {case.mode} convention"
        )
        got = backend.evaluate(expect, ins)
        assert len(got) == len(want), f"{case.id}: {len(got)} outputs, JAX gives {len(want)}"
        for a, b in zip(got, want):
            assert np.shape(a) == np.shape(b), f"{case.id}: shape {np.shape(a)} != {np.shape(b)}"
            close(a, b)


def _type_of(x) -> str:
    """`f32[2,3]` for a float32 array of shape (2, 3)."""
    x = np.asarray(x)
    short = {"float32": "f32", "float64": "f64", "int32": "i32", "bool": "bool"}[x.dtype.name]
    return f"{short}[{','.join(str(d) for d in x.shape)}]"


# ---------------------------------------------------------------- the format itself


def test_discovery_finds_the_goldens():
    files = {c.path for c in CASES}
    assert files == set(LIT_DIR.rglob("*.jaxpr")) and len(files) >= 15
    assert all(len([c for c in CASES if c.path == p]) >= 1 for p in files)


@pytest.mark.parametrize(
    "text,message",
    [
        ("{ lambda ; . let  in () }\n", "first line must be"),
        ("# RUN: jaxprtool frobnicate\n", "no jaxprtool command"),
        ("# RUN: jaxprtool dce\n", "no '# CASE:'"),
        ("# RUN: jaxprtool dce\n# CASE: a\nx\n", "has no EXPECT"),
        ("# RUN: jaxprtool dce\n# CASE: a\nx\n# EXPECTED:\nx\n", "unknown directive 'EXPECTED'"),
        ("# RUN: jaxprtool dce\n# CASE: a\nx\n# EXPECT:\nx\n# CASE: a\ny\n# EXPECT:\ny\n", "dup"),
        ("# RUN: jaxprtool dce\n# CASE: a\nx\n# EXPECT-ERROR: e\ny\n", "after EXPECT-ERROR"),
        ("# RUN: jaxprtool grad\n# CASE: a\n# JAX: f\nx\n# EXPECT:\ny\n", "JAX needs ARGS"),
    ],
)
def test_malformed_files_are_reported(text, message):
    with pytest.raises(LitFormatError, match=re.escape(message)):
        parse_lit(text, Path("bad.jaxpr"))
