"""Several files at once: check FILES, fmt --check FILES, stats FILES, and folders of JAX
dumps (JAX_DUMP_IR_TO with JAX_DUMP_IR_MODES=jaxpr writes `*.jaxpr.txt` files)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from jaxprtool.cli import main
from jaxprtool.core import all_eqns
from jaxprtool.text.parser import parse

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
BAD = "{ lambda ; a:f32[3]. let\n    b:f32[4] = sin a\n  in (b,) }\n"


def invoke(*args, input=None):
    return CliRunner().invoke(main, ["--no-color", *args], input=input)


@pytest.fixture(scope="module")
def jax_dumps(tmp_path_factory):
    """A folder written by JAX itself: jit two functions with jaxpr dumping on."""
    import jax
    import jax.numpy as jnp

    folder = tmp_path_factory.mktemp("dumps")
    jax.config.update("jax_dump_ir_to", str(folder))
    jax.config.update("jax_dump_ir_modes", "jaxpr")
    try:
        jax.jit(lambda x, y: jnp.tanh(x @ y) + 1.0)(jnp.ones((2, 3)), jnp.ones((3, 4)))
        jax.jit(lambda x: jax.lax.cond(x.sum() > 0, jnp.sin, jnp.cos, x))(jnp.ones(3))
    finally:
        jax.config.update("jax_dump_ir_to", "")
        jax.config.update("jax_dump_ir_modes", "stablehlo")
    files = sorted(folder.glob("*.jaxpr.txt"))
    assert files, "JAX wrote no jaxpr dumps"
    return folder, files


def test_check_several_files_reports_each(tmp_path):
    bad1, bad2 = tmp_path / "bad1.jaxpr", tmp_path / "bad2.jaxpr"
    bad1.write_text(BAD)
    bad2.write_text(BAD.replace("sin", "cos"))
    good = str(SAMPLES / "mlp.jaxpr")
    r = invoke("check", str(bad1), good, str(bad2))
    assert r.exit_code == 1
    assert f"{bad1}:2:5: error: sin: result type f32[4]" in r.stderr
    assert f"{bad2}:2:5: error: cos: result type f32[4]" in r.stderr
    assert invoke("check", good, str(SAMPLES / "cond.jaxpr")).exit_code == 0
    # a missing file is reported (exit 2) and the others are still checked
    missing = invoke("check", good, str(tmp_path / "missing.jaxpr"), str(bad1))
    assert missing.exit_code == 2 and "cannot read" in missing.stderr
    assert f"{bad1}:2:5: error:" in missing.stderr


def test_check_a_folder_of_jax_dumps(jax_dumps, tmp_path):
    folder, files = jax_dumps
    r = invoke("check", str(folder))
    assert r.exit_code == 0, r.output
    (folder / "zz_broken.jaxpr.txt").write_text(BAD)
    try:
        r = invoke("check", str(folder))
        assert r.exit_code == 1 and "zz_broken.jaxpr.txt:2:5: error:" in r.stderr
    finally:
        (folder / "zz_broken.jaxpr.txt").unlink()
    empty = tmp_path / "empty"
    empty.mkdir()
    r = invoke("check", str(empty))
    assert r.exit_code == 2 and "holds no *.jaxpr or *.jaxpr.txt files" in r.output


def test_fmt_check_lists_the_files_not_in_canonical_form(tmp_path, jax_dumps):
    ok = tmp_path / "ok.jaxpr"
    ok.write_text((SAMPLES / "mlp.jaxpr").read_text())
    squashed = tmp_path / "squashed.jaxpr"
    squashed.write_text((SAMPLES / "sin_cos.jaxpr").read_text().replace("\n", "  \n\n"))
    r = invoke("fmt", "--check", str(ok), str(squashed))
    assert r.exit_code == 1
    assert r.stdout.splitlines() == [
        f"Would reformat: {squashed}",
        "1 file would be reformatted, 1 file already formatted",
    ]
    assert squashed.read_text().count("  \n\n") == 6, "--check writes nothing"
    r = invoke("fmt", "--check", str(ok), str(SAMPLES))
    n = len(list(SAMPLES.glob("*.jaxpr")))
    assert r.exit_code == 0 and r.stdout.strip() == f"{n + 1} files already formatted"
    # JAX's own dumps are canonical (they end without a newline)
    folder, files = jax_dumps
    r = invoke("fmt", "--check", str(folder))
    assert r.exit_code == 0, r.output
    assert r.stdout.strip() == f"{len(files)} files already formatted"
    # a parse error is reported and fails the check
    broken = tmp_path / "broken.jaxpr"
    broken.write_text("{ lambda ; a:f32[3]. let b:f32[3] = sin a in (b,) ")
    r = invoke("fmt", "--check", str(ok), str(broken))
    assert r.exit_code == 1 and f"{broken}:1:" in r.stderr
    assert invoke("fmt", str(ok), str(squashed)).exit_code == 2


def test_stats_several_files(jax_dumps):
    folder, files = jax_dumps
    r = invoke("stats", "--json", str(SAMPLES / "mlp.jaxpr"), str(folder))
    assert r.exit_code == 0, r.output
    reports = json.loads(r.stdout)
    assert [x["file"] for x in reports] == [str(SAMPLES / "mlp.jaxpr")] + [str(f) for f in files]
    for x in reports:
        path = Path(x["file"])
        j = parse(path.read_text(), str(path)).jaxpr
        assert x["equations"] == sum(1 for _ in all_eqns(j))
    one = json.loads(invoke("stats", "--json", str(SAMPLES / "mlp.jaxpr")).stdout)
    assert one == {k: v for k, v in reports[0].items() if k != "file"}
    text = invoke("stats", str(SAMPLES / "mlp.jaxpr"), str(SAMPLES / "cond.jaxpr")).stdout
    assert text.count("equations:") == 2 and str(SAMPLES / "cond.jaxpr") in text


# ---------------------------------------------------------------- fmt as ruff/black (issue 27)

LOOSE = "{ lambda ; a:f32[3]. let\n    b:f32[3] = sin a in (b,) }\n"
TIGHT = "{ lambda ; a:f32[3]. let b:f32[3] = sin a in (b,) }\n"


def _tree(root: Path) -> None:
    """A folder as a repository holds it: files to format, and ones a walk leaves out."""
    (root / ".git").mkdir()
    for sub in ("src", "src/gen", ".hidden", "env", "build"):
        (root / sub).mkdir()
    (root / "env" / "pyvenv.cfg").write_text("home = /usr\n")
    (root / ".gitignore").write_text("build/\n*.tmp.jaxpr\n")
    (root / "src" / ".gitignore").write_text("gen/\n!keep.tmp.jaxpr\n")
    for rel in (
        "src/a.jaxpr",
        "src/b.jaxpr.txt",
        "src/x.tmp.jaxpr",
        "src/keep.tmp.jaxpr",
        "src/gen/g.jaxpr",
        ".hidden/h.jaxpr",
        "env/e.jaxpr",
        "build/o.jaxpr",
    ):
        (root / rel).write_text(LOOSE)


def test_folder_walk_skips_hidden_venvs_and_gitignored(tmp_path):
    _tree(tmp_path)
    r = invoke("fmt", "--check", str(tmp_path))
    assert r.exit_code == 1
    assert r.stdout.splitlines() == [
        f"Would reformat: {tmp_path / 'src' / 'a.jaxpr'}",
        f"Would reformat: {tmp_path / 'src' / 'b.jaxpr.txt'}",
        f"Would reformat: {tmp_path / 'src' / 'keep.tmp.jaxpr'}",
        "3 files would be reformatted",
    ]
    # a file named on the command line is always read
    r = invoke("fmt", "--check", str(tmp_path / "build" / "o.jaxpr"))
    assert r.stdout.splitlines()[-1] == "1 file would be reformatted"


def test_fmt_write_diff_and_quiet(tmp_path):
    a, b, ok = tmp_path / "a.jaxpr", tmp_path / "b.jaxpr", tmp_path / "ok.jaxpr"
    for f in (a, b):
        f.write_text(LOOSE)
    ok.write_text(TIGHT)
    r = invoke("fmt", "--diff", str(a), str(ok))
    assert r.exit_code == 1 and a.read_text() == LOOSE
    assert r.stdout == (
        f"--- {a}\n+++ {a}\n@@ -1,2 +1 @@\n"
        "-{ lambda ; a:f32[3]. let\n-    b:f32[3] = sin a in (b,) }\n"
        "+{ lambda ; a:f32[3]. let b:f32[3] = sin a in (b,) }\n"
    )
    assert r.stderr == "1 file would be reformatted, 1 file already formatted\n"
    r = invoke("fmt", "-q", "--check", str(a))
    assert r.exit_code == 1 and r.output == ""
    mtime = ok.stat().st_mtime_ns
    r = invoke("fmt", "-i", str(a), str(b), str(ok))
    assert r.exit_code == 0, r.output
    assert r.stdout == "2 files reformatted, 1 file left unchanged\n"
    assert a.read_text() == TIGHT and b.read_text() == TIGHT
    assert ok.stat().st_mtime_ns == mtime, "an unchanged file is not rewritten"
    r = invoke("fmt", "--write", "-q", str(a))
    assert r.exit_code == 0 and r.output == ""
    assert invoke("fmt", "-i").exit_code == 2  # standard input has no file to rewrite
    assert invoke("fmt", "-i", "--check", str(a)).exit_code == 2


def test_fmt_check_and_write_honour_split_lines(tmp_path):
    """A file of several programs (`# -----` lines, as pass dumps and test files hold them):
    each program is formatted; the separators and the comments above a program stay."""
    f = tmp_path / "multi.jaxpr"
    f.write_text("# first\n" + LOOSE + "# -----\n# second\n" + TIGHT)
    r = invoke("fmt", "--check", str(f))
    assert r.exit_code == 1 and r.stdout.splitlines()[0] == f"Would reformat: {f}"
    assert invoke("fmt", "-i", str(f)).exit_code == 0
    assert f.read_text() == "# first\n" + TIGHT + "# -----\n# second\n" + TIGHT
    r = invoke("fmt", "--check", str(f))
    assert r.exit_code == 0 and r.stdout == "1 file already formatted\n"
    # a comment inside a program would be lost: refused, located, the file left alone
    inner = tmp_path / "inner.jaxpr"
    text = "{ lambda ; a:f32[3]. let\n    # why\n    b:f32[3] = sin a\n  in (b,) }\n"
    inner.write_text(text)
    r = invoke("fmt", "-i", str(inner))
    assert r.exit_code == 1 and inner.read_text() == text
    assert r.stderr.startswith(
        f"{inner}:2:5: error: fmt cannot keep a comment inside a program (the printer writes "
        "none): move it above the program's first line\n"
    )


def test_the_help_example_checks_the_samples():
    r = invoke("fmt", "--check", str(SAMPLES))
    n = len(list(SAMPLES.glob("*.jaxpr")))
    assert r.exit_code == 0 and r.stdout == f"{n} files already formatted\n"
    assert "jaxprtool fmt --check samples/" in invoke("fmt", "--help").stdout


ONE_LINE = "{ lambda ; a:f32[3]. let b:f32[3] = sin a in (b,) }\n"


def test_split_parts_are_not_padded_with_the_lines_before_them():
    """20,000 one-line programs: the parts together hold about the file's text (they held
    one newline per line before each part: memory grew as parts times lines, 200 MB here)."""
    import tracemalloc

    from jaxprtool.commands.driver import split_parts

    text = "# -----\n".join([ONE_LINE] * 20_000)
    tracemalloc.start()
    try:
        parts = split_parts(text, "many.jaxpr")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(parts) == 20_000
    assert peak < 20 * len(text), peak  # (the Part objects and their texts)


def test_errors_in_a_split_part_are_located_in_the_whole_file(tmp_path):
    """Each part is read on its own; its parser errors, checker errors, warnings and
    program-level errors still name lines of the whole file, with the line quoted."""
    bad_type = ONE_LINE.replace("b:f32[3] = sin", "b:f32[4] = sin")
    f = tmp_path / "parts.jaxpr"
    f.write_text(
        "# -----\n".join([ONE_LINE, "\n" + ONE_LINE, bad_type, "{ lambda ; a:f32[3]. let\n"])
    )
    r = invoke("check", "--split-input-file", str(f))
    assert r.exit_code == 1
    errors = [ln for ln in r.stderr.splitlines() if ": error: " in ln]
    assert errors[0].startswith(f"{f}:6:26: error: sin: result type f32[4]"), r.stderr
    assert errors[1].startswith(f"{f}:9:1: error: unexpected end of input"), r.stderr
    assert "  | " + bad_type.rstrip("\n") in r.stderr
    matrix = tmp_path / "grad.jaxpr"
    matrix.write_text(ONE_LINE + "# -----\n\n" + ONE_LINE)  # grad of a non-scalar output
    r = invoke("grad", "--split-input-file", str(matrix))
    assert r.exit_code == 1
    assert f"{matrix}:1:" in r.stderr and f"{matrix}:4:" in r.stderr, r.stderr
