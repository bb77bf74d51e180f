"""Small inputs that gave an internal error, or a silent choice, each a clear refusal now
(issue 45, item 10): a negative vmap batch size, `parse(bytes)`, malformed `trace --arg`
types, `--repeat` with `--eager`, empty output paths, `1e400:f32[]`, `--ignore` of an error
the parser stops at, and 100 KB option values echoed whole."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from jaxprtool import api
from jaxprtool.cli import main
from jaxprtool.core import JaxprError

SIN = "{ lambda ; a:f32[4]. let b:f32[4] = sin a in (b,) }\n"


def tool(*argv, text=None):
    return CliRunner().invoke(main, ["--no-color", *map(str, argv)], input=text)


@pytest.mark.parametrize(
    "size, why",
    [(-3, "axis_size must be nonnegative, got -3"), (2.5, "must be an integer, got 2.5")],
)
def test_vmap_refuses_a_batch_size_that_is_no_size(size, why):
    """`vmap(axis_size=-3)` built `f32[-3,4]`, which check() passed and which did not parse
    back."""
    with pytest.raises(JaxprError, match=why):
        api.vmap(api.parse(SIN), axis_size=size)


def test_parse_reads_bytes_as_a_file_is_read():
    """`parse(bytes)` said "a bytes-like object is required, not 'str'"."""
    assert api.format(api.parse(SIN.encode())) == api.format(api.parse(SIN))
    with pytest.raises(JaxprError, match="input is not valid UTF-8"):
        api.parse(b"\xff" + SIN.encode())
    with pytest.raises(TypeError, match="parse: text must be str or bytes, not int"):
        api.parse(3)


@pytest.mark.parametrize(
    "spec, why",
    [
        ("f32[3 4]", "expected a type such as f32[3,4]"),
        ("f32[3,,4]", "expected a type such as f32[3,4]"),
        ("f32[3,]", "an empty dimension"),
        ("f32[" + "9" * 5000 + "]", "a dimension is larger than 9223372036854775807"),
        ("9" * 5000 + "xf32", "a dimension is larger than 9223372036854775807"),
    ],
)
def test_trace_refuses_a_malformed_argument_type(spec, why, tmp_path):
    """`f32[3 4]` and 5000-digit sizes were internal ValueErrors; `f32[3,,4]` was read as
    `f32[3,4]`."""
    mod = tmp_path / "m.py"
    mod.write_text("def f(x):\n    return x\n")
    r = tool("trace", f"{mod}:f", "--arg", spec)
    assert r.exit_code == 2, r.output
    assert why in r.stderr and "internal error" not in r.stderr
    assert len(r.stderr) < 600  # the 5000 digits are not quoted whole


def test_repeat_does_not_combine_with_eager(tmp_path):
    """`--repeat N --eager` ran once, eagerly, and timed nothing, saying nothing."""
    prog = tmp_path / "s.jaxpr"
    prog.write_text(SIN)
    r = tool("run", prog, "--random", "0", "--eager", "--repeat", "3")
    assert r.exit_code == 2
    assert "--repeat times compiled runs; it does not combine with --eager" in r.stderr


@pytest.mark.parametrize("argv", [["explain", "--html", ""], ["grad", "-o", ""]])
def test_an_empty_output_path_is_bad_usage(argv, tmp_path):
    """`--html ''` printed the text walk; `-o ''` wrote to standard output."""
    prog = tmp_path / "s.jaxpr"
    prog.write_text("{ lambda ; a:f32[]. let b:f32[] = sin a in (b,) }\n")
    r = tool(*argv, prog)
    assert r.exit_code == 2 and r.stdout == ""
    assert "an empty path (give a file name, or - for standard output)" in r.stderr


@pytest.mark.parametrize("literal", ["1e400", "-1e400", "(1e400+1j)"])
def test_a_literal_no_float_can_hold_is_refused(literal):
    """`1e400:f32[]` was read as inf, silently (JAX prints an infinity as `inf`)."""
    t = "c64" if "j" in literal else "f32"
    r = tool(
        "check", "-", text=f"{{ lambda ; a:{t}[]. let b:{t}[] = mul a {literal}:{t}[] in (b,) }}\n"
    )
    assert r.exit_code == 1
    assert f"error: literal '{literal}' is too large for a float" in r.stderr
    ok = tool("check", "-", text="{ lambda ; a:f32[]. let b:f32[] = mul a inf:f32[] in (b,) }\n")
    assert ok.exit_code == 0, ok.stderr


def test_ignoring_an_error_the_parser_stops_at_says_so():
    """`check --ignore E101` had no effect, silently: the text cannot be read past it."""
    text = "{ lambda ; a:f32[3]. let\n    b:f32[3] = sin z\n  in (b,) }\n"
    r = tool("check", "--ignore", "E101", "-", text=text)
    assert r.exit_code == 1
    assert r.stderr.startswith(
        "<stdin>:2:20: error: variable 'z' used before definition (not ignored: the text "
        "cannot be read past it) [E101]"
    )
    plain = tool("check", "-", text=text)
    assert "not ignored" not in plain.stderr


@pytest.mark.parametrize(
    "argv",
    [
        ["grad", "--remat-budget", "{huge}", "-"],
        ["check", "--select", "{huge}", "-"],
        ["run", "--device", "{huge}", "-"],
        ["grad", "--argnums", "{huge}", "-"],
        ["grad", "--{huge}", "-"],
        ["--jax-style", "{huge}", "fmt", "-"],
    ],
)
def test_a_huge_option_value_is_not_echoed_whole(argv):
    """A 100 KB option value was echoed whole in the usage error."""
    huge = "x" * 100_000
    r = tool(*[a.format(huge=huge) for a in argv], text=SIN)
    assert r.exit_code == 2, r.output[:300]
    assert "x" * 50 in r.stderr.lower() and len(r.stderr) < 1000, len(r.stderr)
