"""Fuzzing: generated and mutated programs never break the tool (tests/fuzzgen.py).

* `test_fuzz_campaign`: a short run of the grammar-aware fuzzer (fixed seed, FUZZ_EXAMPLES
  cases, default 300; the default run's `quick` case, 40): well-typed generated programs and mutated corpus programs through
  fmt, check, jvp, linearize, vjp, grad, transpose, dce, cse, opt, fold, canonicalize,
  stats, diff and (tiny inputs) run, each in process with a time and memory limit.  It
  fails on any crash, hang, memory blow-up, unlocated error, partial or clobbered -o
  file, nondeterministic output or inconsistent result, except the known bugs outside
  the parser/checker listed in KNOWN (still counted and printed).  `make fuzz` runs
  100,000 cases on two workers (FUZZ_EXAMPLES, FUZZ_WORKERS, FUZZ_SEED, FUZZ_SAVE=DIR keeps
  the failing inputs).
* Pathological text (pathological() in fuzzgen: 10 MB lines, 1,000-deep nesting, 100k
  equations, binary data, NUL bytes, CR/CRLF, invalid UTF-8, a BOM): a located error or the
  right output, quickly; scaled down here, full size in `make bench`.
* Shared jaxprs that use themselves are a located error for every command.
* Every command prints the same bytes under two PYTHONHASHSEED values (fresh processes).
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys

import pytest
from click.testing import CliRunner
from conftest import CORPUS, ROOT, needs_corpus
from fuzzgen import (
    Campaign,
    ProgramGen,
    Rand,
    chain,
    deep_lambda,
    deep_shared,
    pathological,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jaxprtool.cli import main
from jaxprtool.text.parser import MAX_NESTING

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "300"))
WORKERS = int(os.environ.get("FUZZ_WORKERS", "1"))
LOCATED = re.compile(r"^\S+:\d+:\d+: error: ", re.M)
UNLOCATED = re.compile(r"^error: ", re.M)

#: findings that are bugs outside the parser, checker and CLI (reported to their owners):
#: (category, pattern of the detail).  They are counted and printed, not failed on.
KNOWN = [
    # ad/api.py, ad/jvp.py, ad/transpose.py: program-level AD errors carry no location
    ("unlocated", r"grad requires real- or complex-valued inputs"),
    ("unlocated", r"grad requires real-valued outputs"),
    ("unlocated", r"(argnums|--linear): input -?\d+ does not exist"),
    ("unlocated", r"argnums: input \d+ has type .*; only float and complex inputs"),
    ("unlocated", r"scatter transpose is only implemented where unique_indices=True"),
    # backend: array literals (`[...]`) and key types of an unknown PRNG cannot run; the
    # messages are not located (and say `Ellipsis`)
    ("unlocated", r"the array literal .* has no values in the text"),
    ("unlocated", r"unknown PRNG implementation"),
    # printer: a shared jaxpr named after a `name=` value that is no name (`let g g = `)
    ("bad output", r"does not parse: .*(found 'let'|expected a name|expected '=', found)"),
    ("bad output", r"fmt printed a program that fails: .*missing jaxpr parameter 'jaxpr'"),
    # printer: --jax-style 0.4.35 prints the array literal `[...]` without its type
    ("bad output", r"expected an operand \(a variable or a literal\), found '\['"),
    # primitives: shape rules accept malformed (Opaque, np.int64) parameters and dtypes
    # that JAX refuses; then fmt's print rule, an AD rule or JAX fails on them, or an AD
    # result gets a dimension like `np.int64()`
    ("crash", r"'Opaque' object is not iterable|not 'Opaque'|not 'SymExpr'"),
    ("bad output", r"invalid dimension '.*np\.int64"),
    ("crash", r"OverflowError: cannot convert float infinity to integer"),
    ("unlocated", r"JAX could not compile the program"),
    ("unlocated", r"Unimplemented group_offset support"),
    # ad rules: scan/while/cumsum/sort parameters that the shape rules let default
    ("crash", r"KeyError: '(num_consts|num_carry|length|jaxpr|linear)'"),
    ("crash", r"missing \d+ required keyword-only argument"),
    # ad/transpose: an integer input taken as linear (--residuals) reaches a gather rule
    ("crash", r"UndefinedPrimal\(.*\) is not an Atom"),
    # primitives: the ragged_dot_general shape rule rejects JAX's own VJP (ragged contraction)
    ("bad output", r"ragged_dot_general: result type"),
    # pass_cmds.diff: an ill-typed input exits 1 ("they differ") instead of 2 (trouble)
    ("bad output", r"diff A A exits 1 \('they differ'\): \S+:\d+:\d+: error:"),
    # ad/rules/calls.py: the remat2 policy note is printed once per process (_note_once)
    ("nondeterministic", r"remat2: policy"),
]


def _known(cat: str, detail: str) -> bool:
    return any(c == cat and re.search(p, detail) for c, p in KNOWN)


def invoke(args, text=None):
    return CliRunner().invoke(main, args, input=text)


# ---------------------------------------------------------------- the campaign


#: the default run's campaign (`make test`); `make test-full` and `make fuzz` run EXAMPLES
QUICK_EXAMPLES = min(EXAMPLES, 40)


@pytest.mark.parametrize(
    "examples",
    [
        pytest.param(QUICK_EXAMPLES, id="quick"),
        pytest.param(EXAMPLES, marks=pytest.mark.slow, id="full"),
    ],
)
def test_fuzz_campaign(examples):
    budget = None if "FUZZ_EXAMPLES" in os.environ else 120.0
    camp = Campaign(
        examples,
        seed=int(os.environ.get("FUZZ_SEED", "17")),
        workers=WORKERS,
        hashseed_every=int(os.environ.get("FUZZ_HASHSEED_EVERY", "100")),
        budget_s=budget,
        save_dir=os.environ.get("FUZZ_SAVE"),
        progress=(lambda n, s: print(f"  {n} inputs, {s:.0f} s", flush=True))
        if examples >= 5000
        else None,
    )
    rep = camp.run()
    print("\n" + rep.text())
    new = {cat: [f for f in items if not _known(cat, f[3])] for cat, items in rep.findings.items()}
    known = sum(len(v) for v in rep.findings.values()) - sum(len(v) for v in new.values())
    print(f"  known bugs outside the parser/checker (KNOWN): {known}")
    assert rep.total > 0
    bad = {cat: items[:3] for cat, items in new.items() if items}
    assert not bad, json.dumps(bad, indent=1, default=str)[:6000]


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    text=st.lists(
        st.sampled_from(
            list("{}[]()=:;., \nabcfi0123lmtdn_")
            + ["{ lambda ", " let ", " in ", "f32[3]", "\x00", "\r", "é", "jaxpr=", "let f = "]
        ),
        max_size=120,
    ).map("".join)
)
def test_random_text_never_crashes(text):
    r = invoke(["check", "-"], text)
    assert r.exit_code in (0, 1), (text, r.output, r.exception)
    assert "internal error" not in r.output, (text, r.output)
    if r.exit_code == 1:
        assert LOCATED.search(r.stderr) and not UNLOCATED.search(r.stderr), r.stderr


def test_generated_programs_check_clean():
    """The generator writes well-typed programs (the checker agrees; JAX agrees in
    test_roundtrip_property, where the evaluator runs them)."""
    for seed in range(200):
        text = ProgramGen(Rand(seed), max_depth=2).program()
        r = invoke(["check", "-"], text)
        assert r.exit_code == 0 and r.stderr == "All checks passed.\n", (seed, r.stderr, text)


# ---------------------------------------------------------------- pathological text

#: what each class must give: "ok" (exit 0), or the start of the first message after
#: FILE: for every command ("parse: ...") or for the commands that check ("check: ...";
#: fmt prints such a program back)
EXPECT = {
    "long line: 10 MB name parameter": "ok",
    "long line: 10 MB of one token": "parse: 1:1: error: expected a jaxpr ('{ lambda ...'), "
    "found 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa...'",
    "long line: 10 MB variable name": "parse: 2:20: error: variable 'xxxxxxxxxxxxxx",
    "long line: 10 MB comment": "ok",
    "long line: 10 MB number": "parse: 4:7: error: a number of",
    "long line: equations on one 10 MB line": "ok",
    "long line: 1 M operands": "check: 2:5: error: add expects 2 operands",
    "deep: 1000 nested { lambda": "parse: 1:5101: error: jaxprs nest too deeply",
    "deep: 1000 chained shared jaxprs": "parse: 902:36: error: jaxprs nest too deeply",
    "deep: 1000 [ in a parameter": "parse: 2:22: error: the value of 'x' is nested too deeply",
    "deep: 1000 ( in the outputs": "parse: 4:7: error: expected an output variable",
    "deep: 1000 {": "parse: 1:1: error: expected '{ lambda'",
    "deep: 1000 unclosed { lambda": "parse: 1:5101: error: jaxprs nest too deeply",
    "size: 100k equations": "ok",
    "size: 20k type errors": "check: 2:5: error: sin: result type i32[3] does not match",
    # (check, fmt and dce keep shared jaxprs shared; the walks that copy them refuse it:
    # test_hostile_trust.py)
    "size: 40 shared jaxprs, each using the previous twice": "ok",
    "bytes: binary data": "parse: 1:1: error: input is not valid UTF-8",
    "bytes: NUL bytes": "parse: 2:19: error: a NUL byte: this is not jaxpr text",
    "bytes: NUL at the start": "parse: 1:1: error: a NUL byte: this is not jaxpr text",
    "bytes: CRLF line endings": "ok",
    "bytes: CR line endings": "ok",
    "bytes: byte-order mark": "ok",
    "bytes: invalid UTF-8": "parse: 2:6: error: input is not valid UTF-8",
    "bytes: UTF-16": "parse: 1:1: error: input is not valid UTF-8",
    "bytes: ANSI colours": "ok",
    "cycle: mutually recursive shared jaxprs": "parse: 2:34: error: shared jaxpr 'f' uses "
    "itself (f -> g -> f): shared jaxprs cannot be recursive",
}


@functools.cache
def _pathological(scale: float) -> dict:
    """`pathological(scale)`, every class's input (bytes), made once for the cases
    here that each take one class."""
    return pathological(scale)


def test_every_pathological_class_has_an_expectation():
    assert set(_pathological(0.001)) == set(EXPECT)


@pytest.mark.parametrize("cls", sorted(EXPECT))
def test_pathological_input(cls, tmp_path):
    data = _pathological(0.02)[cls]
    path = tmp_path / "p.jaxpr"
    path.write_bytes(data)
    for cmd in (["check"], ["fmt"], ["dce"]):
        r = invoke([*cmd, str(path)])  # (its time and memory: bench/bench_pathological.py)
        assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
        want = EXPECT[cls]
        if want == "ok" or (want.startswith("check: ") and cmd == ["fmt"]):
            assert r.exit_code == 0, (cls, cmd, r.stderr[:500])
            quiet = "All checks passed.\n" if cmd == ["check"] else ""  # its summary line
            assert r.stderr == quiet, (cls, cmd, r.stderr[:500])
        else:
            assert r.exit_code == 1, (cls, cmd, r.stderr[:500])
            first = r.stderr.splitlines()[0]
            assert first.startswith(f"{path}:{want.split(': ', 1)[1]}"), (cls, cmd, first[:300])
            assert len(first) < 400  # no 10 MB message lines
            assert not UNLOCATED.search(r.stderr)


def test_crlf_bom_and_ansi_read_as_plain_text(tmp_path):
    plain = _pathological(0.001)
    ref = invoke(["fmt", "-"], "{ lambda ; a:f32[3]. let\n    b:f32[3] = sin a\n"
                 "    c:f32[3] = mul b a\n  in (c,) }\n").stdout  # fmt: skip
    for cls in ("bytes: CRLF line endings", "bytes: CR line endings", "bytes: byte-order mark",
                "bytes: ANSI colours"):  # fmt: skip
        p = tmp_path / "x.jaxpr"
        p.write_bytes(plain[cls])
        assert invoke(["fmt", str(p)]).stdout == ref, cls


def test_invalid_utf8_is_located_at_the_byte():
    data = b"{ lambda ; a:f32[3]. let\n    b:f32[3] = \xff sin a\n  in (b,) }\n"
    r = invoke(["check", "-"], data)
    assert r.exit_code == 1
    assert r.stderr.startswith("<stdin>:2:16: error: input is not valid UTF-8"), r.stderr


def test_nesting_limit_is_exact_and_every_command_works_below_it():
    ok = deep_lambda(MAX_NESTING - 1)  # MAX_NESTING levels of jaxprs in all
    for cmd in (["fmt"], ["check"], ["jvp"], ["linearize"], ["vjp"], ["grad"], ["dce"],
                ["cse"], ["opt", "-p", "inline,simplify,cse,dce"], ["stats", "--json"]):  # fmt: skip
        r = invoke([*cmd, "-"], ok)
        assert r.exit_code == 0, (cmd, r.stderr[:300])
    deep = deep_lambda(MAX_NESTING)
    col = 0
    for _ in range(MAX_NESTING + 1):
        col = deep.index("{ lambda", col) + 1  # the 1-based column of the next one
    r = invoke(["check", "-"], deep)
    assert r.exit_code == 1
    assert r.stderr.startswith(f"<stdin>:1:{col}: error: jaxprs nest too deeply"), r.stderr[:200]


def test_deep_chain_of_shared_jaxprs_is_refused_where_it_gets_too_deep():
    text = deep_shared(MAX_NESTING + 20)
    r = invoke(["check", "-"], text)
    assert r.exit_code == 1
    # levels: the top-level jaxpr is 1, f{K-1} is 2, ..., f{K-100} is 101: refused at the
    # equation of f{K-99} that calls it
    k = MAX_NESTING + 20 - (MAX_NESTING - 1)
    line = k + 1
    assert r.stderr.startswith(f"<stdin>:{line}:"), r.stderr[:200]
    assert "nest too deeply" in r.stderr.splitlines()[0]
    assert invoke(["check", "-"], deep_shared(MAX_NESTING - 1)).exit_code == 0


def test_many_type_errors_are_all_reported(tmp_path):
    """2,000 ill-typed equations: every error reported, each with its location (no count
    limits them: 20,000 took ten times as long and checked the same).  That the time stays
    linear in the count (the excerpt under each message once took quadratic time) is
    measured by `make bench` (bench/bench_pathological.py's type-error rows and their
    ratio), never here: no test depends on timing."""
    path = tmp_path / "e.jaxpr"
    path.write_text(chain(2_000, bad_every=1))
    r = invoke(["check", str(path)])
    assert r.exit_code == 1
    assert len(LOCATED.findall(r.stderr)) == 2_000


# ---------------------------------------------------------------- recursive shared jaxprs

CYCLES = {
    "mutual": (
        "let f = { lambda ; a:f32[3]. let\n    b:f32[3] = jit[name=g jaxpr=g] a\n  in (b,) } in\n"
        "let g = { lambda ; a:f32[3]. let\n    b:f32[3] = jit[name=f jaxpr=f] a\n  in (b,) } in\n"
        "{ lambda ; d:f32[3]. let\n    e:f32[3] = jit[name=f jaxpr=f] d\n  in (e,) }\n",
        "<stdin>:5:5: error: shared jaxpr 'f' uses itself (f -> g -> f)",
    ),
    "self": (
        "let f = { lambda ; a:f32[3]. let\n    b:f32[3] = jit[name=f jaxpr=f] a\n  in (b,) } in\n"
        "{ lambda ; d:f32[3]. let\n    e:f32[3] = jit[name=f jaxpr=f] d\n  in (e,) }\n",
        "<stdin>:2:5: error: shared jaxpr 'f' uses itself (f -> f)",
    ),
    "through cond branches": (
        "let f = { lambda ; a:i32[] b:f32[3]. let\n"
        "    c:f32[3] = cond[branches=(g g)] a b\n  in (c,) } in\n"
        "let g = { lambda ; b:f32[3]. let\n    c:f32[3] = jit[name=f jaxpr=f] 0:i32[] b\n"
        "  in (c,) } in\n"
        "{ lambda ; a:i32[] d:f32[3]. let\n    e:f32[3] = jit[name=f jaxpr=f] a d\n  in (e,) }\n",
        "<stdin>:5:5: error: shared jaxpr 'f' uses itself (f -> g -> f)",
    ),
}


@pytest.mark.parametrize("name", sorted(CYCLES))
def test_recursive_shared_jaxprs_are_a_located_error_for_every_command(name):
    text, want = CYCLES[name]
    for cmd in (["check"], ["fmt"], ["jvp"], ["vjp"], ["dce"], ["stats"], ["opt", "-p", "cse"]):
        r = invoke([*cmd, "-"], text)
        assert r.exit_code == 1, (cmd, r.stderr)
        assert r.stderr.startswith(want + ": shared jaxprs cannot be recursive"), (cmd, r.stderr)


def test_a_shared_jaxpr_used_twice_is_no_cycle():
    text = (
        "let g = { lambda ; a:f32[3]. let b:f32[3] = cos a in (b,) } in\n"
        "let f = { lambda ; a:f32[3]. let\n    b:f32[3] = jit[name=g jaxpr=g] a\n"
        "    c:f32[3] = jit[name=g jaxpr=g] b\n  in (c,) } in\n"
        "{ lambda ; d:f32[3]. let\n    e:f32[3] = jit[name=f jaxpr=f] d\n"
        "    h:f32[3] = jit[name=g jaxpr=g] e\n  in (h,) }\n"
    )
    assert invoke(["check", "-"], text).exit_code == 0


# ---------------------------------------------------------------- PYTHONHASHSEED

DETERMINISM_FILES = ["model_transformer_block_forward.jaxpr", "lax_map_and_assoc_scan.jaxpr"]

#: every command, with the options that change what it prints; FILE, B (a second
#: program), LIN (linearize's output), SCALAR (a program with one f32[] output), OUT (a
#: file the command writes) are filled in
DETERMINISM_COMMANDS = [
    ["fmt", "FILE"],
    ["--jax-style", "0.4.35", "fmt", "FILE"],
    ["check", "FILE"],
    ["jvp", "FILE"],
    ["linearize", "FILE"],
    ["linearize", "--stats", "--opt", "none", "FILE"],
    ["transpose", "LIN"],
    ["vjp", "FILE"],
    ["grad", "SCALAR"],
    ["grad", "--argnums", "0,1", "--with-value", "SCALAR"],
    ["dce", "FILE"],
    ["cse", "FILE"],
    ["fold", "FILE"],
    ["simplify", "FILE"],
    ["inline", "FILE"],
    ["canonicalize", "FILE"],
    ["opt", "-p", "inline,simplify,cse,dce", "FILE"],
    ["opt", "-p", "cse,dce", "--print-after-all", "FILE"],
    ["diff", "FILE", "B"],
    ["stats", "FILE"],
    ["stats", "--json", "FILE"],
    ["graph", "FILE", "-o", "OUT.dot"],
    ["graph", "--collapse-nested", "FILE", "-o", "OUT.dot"],
    ["explain", "--no-color", "FILE"],
    ["check-grad", "SCALAR"],
    ["run", "--random", "0", "FILE"],
    ["compile", "--emit", "stablehlo", "FILE"],
    ["compile", "--emit", "hlo", "FILE"],
    ["compile", "--emit", "optimized-hlo", "FILE"],
]

_DRIVER = r"""
import base64, json, os, sys
from pathlib import Path
from click.testing import CliRunner
from jaxprtool import compile_cache
from jaxprtool.cli import main
jobs = json.loads(sys.stdin.read())
# JAX's persistent cache (the tool's, in the test session's folder) on from the start where
# a command compiles: the second seed's process loads what the first compiled (explain's
# programs too) instead of compiling again; what is compared is what the tool prints, which
# the cache does not change
if any(argv[0] in XLA for argv, _ in jobs):
    compile_cache.configure(True)
res = []
for argv, out in jobs:
    if out and os.path.exists(out):
        os.unlink(out)
    r = CliRunner().invoke(main, argv)
    data = Path(out).read_bytes() if out and os.path.exists(out) else b""
    res.append([r.exit_code, base64.b64encode(r.stdout_bytes).decode(), r.stderr,
                base64.b64encode(data).decode(), repr(r.exception) if r.exception and
                not isinstance(r.exception, SystemExit) else None])
print(json.dumps(res))
"""


#: the default run runs every command on the second file (a scan, a map, an associative
#: scan: nested bodies), with the first as `diff`'s other program; `make test-full` on both
DETERMINISM_QUICK = {DETERMINISM_FILES[1]}
#: the commands that hand the program to XLA (JAX's import and compiles: two thirds of the
#: default run's 4.3 CPU-s): under both seeds in `make test-full`; the default run keeps
#: every command whose output the tool computes alone (the transformations, the passes,
#: the printers), where a set's or a dict's order would show
DETERMINISM_XLA = {"explain", "check-grad", "run", "compile"}


def _jobs(tmp_path, full: bool = True) -> list:
    lin = {}
    scalar = tmp_path / "scalar.jaxpr"
    # float inputs only (three: grad --argnums 0,1): with an integer one, grad and check-grad
    # refused it and only their error messages were compared under the two seeds
    scalar.write_text(ProgramGen(Rand(5), scalar_out=True, max_depth=2, ints=False).program())
    jobs = []
    files = [CORPUS / "jax-0.10.2" / f for f in DETERMINISM_FILES]
    for k, f in enumerate(files):
        lp = tmp_path / f"lin{k}.jaxpr"
        lp.write_text(invoke(["linearize", str(f)]).stdout)
        lin[f] = lp
        for cmd in DETERMINISM_COMMANDS:
            if not full and (f.name not in DETERMINISM_QUICK or cmd[0] in DETERMINISM_XLA):
                continue
            out = str(tmp_path / f"out{k}.dot")
            subst = {"FILE": str(f), "B": str(files[1 - k]), "LIN": str(lin[f]),
                     "SCALAR": str(scalar), "OUT.dot": out}  # fmt: skip
            argv = [subst.get(a, a) for a in cmd]
            jobs.append((argv, out if "OUT.dot" in cmd else None))
    return jobs


def _run_all(jobs, hashseed: str, cwd) -> list:
    env = dict(os.environ, PYTHONHASHSEED=hashseed, NO_COLOR="1", JAX_PLATFORMS="cpu")
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.run(
        [sys.executable, "-c", f"XLA = {sorted(DETERMINISM_XLA)!r}\n" + _DRIVER],
        input=json.dumps(jobs),
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=600,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


@needs_corpus
@pytest.mark.parametrize("sweep", ["quick", pytest.param("full", marks=pytest.mark.slow)])
def test_every_command_prints_the_same_bytes_under_any_hash_seed(tmp_path, sweep):
    jobs = _jobs(tmp_path, full=sweep == "full")
    a = _run_all(jobs, "1", tmp_path)
    b = _run_all(jobs, "2718281", tmp_path)
    assert len(a) == len(b) == len(jobs)
    ran = 0
    for (argv, _out), ra, rb in zip(jobs, a, b):
        assert ra[4] is None, (argv, ra[4])  # no exception escaped
        assert ra == rb, f"differs between PYTHONHASHSEED=1 and 2718281: jaxprtool {' '.join(argv)}"
        ran += ra[0] == 0
        if any(a.endswith("scalar.jaxpr") for a in argv):  # grad and check-grad differentiate
            assert ra[0] == 0, (argv, ra)
    assert ran >= len(jobs) * 3 // 4, "most commands should succeed on these inputs"


# ---------------------------------------------------------------- found by the fuzzer


@pytest.mark.parametrize(
    "text, want",
    [
        (
            "{ lambda ; a:f32[3]. let  in (3.0:f32[2],) }\n",
            "<stdin>:1:27: error: literal 3.0 must have a scalar type, not f32[2]",
        ),
        (
            "{ lambda ; a:f32[3] a:f32[3]. let  in (a,) }\n",
            "<stdin>:1:1: error: variable 'a' is bound more than once in this jaxpr",
        ),
    ],
)
def test_checker_errors_in_a_jaxpr_without_equations_are_located(text, want):
    """Such a jaxpr has no equation to locate its errors at: they go to its inputs or its
    output list (the fuzzer's 'unlocated' finding, on `check` and every verifying command)."""
    for cmd in (["check"], ["dce"], ["linearize"]):
        r = invoke([*cmd, "-"], text)
        assert r.exit_code == 1
        assert r.stderr.startswith(want), (cmd, r.stderr)


def test_a_huge_name_in_a_message_is_shortened():
    r = invoke(
        ["check", "-"],
        "{ lambda ; a:f32[3]. let\n    b:f32[3] = sin " + "x" * 5000 + "\n  in (b,) }",
    )
    first = r.stderr.splitlines()[0]
    assert first.startswith("<stdin>:2:20: error: variable 'xxx") and "...'" in first
    assert len(first) < 200


def test_a_shape_rule_failing_on_a_parameter_is_an_error_not_a_crash_later():
    text = "{ lambda ; a:f32[3]. let b:f32[3] = integer_pow[y=(5,)] a in (b,) }\n"
    for cmd in (["check"], ["jvp"], ["vjp"]):
        r = invoke([*cmd, "-"], text)
        assert r.exit_code == 1, (cmd, r.stderr)
        assert r.stderr.startswith(
            "<stdin>:1:26: error: integer_pow: the equation cannot be checked"
        ), (cmd, r.stderr)
        assert "internal error" not in r.stderr


def test_program_errors_in_a_coloured_dump_are_located_in_the_plain_text():
    b, m, e = "\x1b[34;1m", "\x1b[35m", "\x1b[39;22m"
    text = (
        f"{{ {b}lambda {e}; a{m}:f32[]{e}. {b}let\n"
        f"    {e}c{m}:f32[]{e} = sin a\n  {b}in {e}(c, a) }}\n"
    )
    r = invoke(["grad", "-"], text)
    assert r.exit_code == 1
    lines = r.stderr.splitlines()
    assert lines[0].startswith("<stdin>:3:3: error: Gradient only defined for scalar-output"), lines
    assert lines[1:] == ["  |   in (c, a) }", "  |   ^"]


@pytest.mark.parametrize(
    "params, want",
    [
        # two numbers without an operator are no dimension expression
        (
            "padding=((0, 0), (0 0, 0))",
            "2:40: error: expected ',' or ')' in parameter value, found '0'",
        ),
        # a whole value, then a line that is not `key=value`
        (
            "\n      x=None\n      y'None\n    ",
            "4:7: error: expected another parameter 'name=value' or ']'",
        ),
        # an unquoted value kept as text must have balanced brackets
        (
            "\n      jaxpr=f32 lambda ; a:f32[]. let  in (a,) }\n    ",
            "3:48: error: unmatched '}' in the value of 'jaxpr'",
        ),
    ],
)
def test_malformed_parameter_values_are_located_errors(params, want):
    text = "{ lambda ; a:f32[3]. let\n    b:f32[3] = foo[" + params + "] a\n  in (b,) }\n"
    r = invoke(["check", "-"], text)
    assert r.exit_code == 1, r.stderr
    assert r.stderr.startswith("<stdin>:" + want), r.stderr


def test_invalid_utf8_column_counts_characters_and_the_excerpt_is_this_file(tmp_path):
    p = tmp_path / "u.jaxpr"
    p.write_text("{ lambda ; a:f32[3]. let\n    b:f32[3] = sin a\n  in (b,) }\n")
    assert invoke(["check", str(p)]).exit_code == 0  # remembered in this process
    p.write_bytes(b"{ lambda ; a:f32[3]. let\n    b:f32[3] = sin a # \xc3\xa9 \xff\n  in (b,) }\n")
    r = invoke(["check", str(p)])
    lines = r.stderr.splitlines()
    assert lines[0] == f"{p}:2:26: error: input is not valid UTF-8 [E002]"
    assert lines[1] == "  |     b:f32[3] = sin a # \u00e9 \ufffd"
    assert lines[2] == "  | " + " " * 25 + "^"


def test_variables_named_like_complex_literals():
    """JAX's 149,536th variable is `infj` (and `nanj` comes later): a bound name is the
    variable, as for `inf` and `nan`; unbound, it is the literal."""
    text = (
        "{ lambda ; infj:f32[3] nanj:f32[3]. let\n    b:f32[3] = add infj nanj\n"
        "    c:c64[] = mul 2j infj\n  in (b, nanj) }\n"
    )
    r = invoke(["check", "-"], text)
    assert r.stderr.startswith("<stdin>:3:5: error: mul"), r.stderr  # the variable, f32
    r = invoke(["fmt", "-"], text.replace("    c:c64[] = mul 2j infj\n", ""))
    assert r.exit_code == 0 and "add a b" in r.stdout and "in (c, b)" in r.stdout, r.stdout
    r = invoke(["check", "-"], "{ lambda ; a:c64[]. let b:c64[] = add a infj in (b,) }")
    assert r.exit_code == 0, r.stderr
