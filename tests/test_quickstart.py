"""The quick start (`jaxprtool/quickstart.py`) against click: for many command lines of the
common commands, the quick parse gives the same parameters as click's parse of the same
words (and notes the same input and output paths), or leaves the command line to click;
the common ones it must take itself; a process that runs one never imports click."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import click
import pytest

from jaxprtool import quickstart
from jaxprtool.cli import declared_command
from jaxprtool.cli_click import _bare_optional_values, main
from jaxprtool.declare import Choice

#: a value of each option that takes one (the option's own valid spelling)
VALUES = {
    "--argnums": ["0", "0,1", " 1 , 0"],
    "--linear": ["1"],
    "--residuals": ["2", "0"],
    "--opt": ["none", "dce,cse", "canonicalize"],
    "--custom-rules": ["body", "strict"],
    "--mesh": ["x=2,y=4"],
    "--width": ["120", "1", "+7"],
    "--print-before": ["dce", "all"],
    "--print-after": ["dce,cse"],
    "--remat": ["dots_saveable", "min-cut"],
    "--remat-budget": ["0.5", "2GiB"],
    "--remat-segments": ["auto", "3"],
    "--dim": ["b=4"],
    "--device": ["cpu", "auto"],
    "--in-axes": ["0", "0,None"],
    "--out-axes": ["1"],
    "--axis-size": ["4", "0"],
    "--axis-name": ["i"],
    "--select": ["E1", "W001,E"],
    "--ignore": ["W"],
    "--keep-outputs": ["0", "0,1"],
    "--pipeline": ["dce,cse", "inline{names=relu},simplify"],
    "--names": ["relu", "a,b"],
    "--max-iterations": ["3", "x"],
}

#: values that look like options (click takes the next word as the value all the same)
LOOK_LIKE_OPTIONS = ["-1", "--width", "-", "--", "-q"]

#: words click refuses or decides about (each is left to it)
REFUSED = ["--help", "-h", "--bogus", "--debug", "--jax-style=0.4.35", "-Z", "--width=x"]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("quick")
    f = d / "f.jaxpr"
    f.write_text("{ lambda ; a:f32[]. let b:f32[] = sin a in (b,) }\n")
    return {"f": str(f), "dir": str(d), "missing": str(d / "missing.jaxpr"), "out": str(d / "o")}


def click_parse(name: str, args: list[str]):
    """(params, noted paths) as click's group and command parse `args`, or None where
    click refuses them."""
    group_ctx = main.context_class(main, info_name="jaxprtool", **main.context_settings)
    cmd = main.get_command(group_ctx, name)
    try:
        with group_ctx:
            ctx = cmd.make_context(name, _bare_optional_values(cmd, list(args)), parent=group_ctx)
    except (click.ClickException, click.exceptions.Exit):
        return None
    return ctx.params, dict(ctx.meta)


def quick_parse(name: str, args: list[str]):
    declared = declared_command(name)
    ctx = quickstart.Context(declared)
    try:
        params = quickstart.parse(declared.params, list(args), ctx)
    except quickstart.Declined:
        return None
    return params, ctx.meta


def command_lines(name: str, files) -> list[list[str]]:
    """Command lines of `name` from its declarations: each option alone (each valid value,
    `--opt value` and `--opt=value`), pairs of options, repeated options, the FILE forms."""
    declared = declared_command(name)
    single: list[list[str]] = []
    for p in declared.params:
        if p.kind != "option":
            continue
        for flag in p.opts:
            if p.attrs.get("is_flag"):
                single.append([flag])
            elif p.attrs.get("optional_value"):
                single += [[flag], [f"{flag}=text"], [f"{flag}=semantic"]]
            elif p.attrs.get("nargs", 1) == 2:
                single.append([flag, files["out"] + "1", files["out"] + "2"])
            elif p.attrs.get("type") is not None and getattr(p.attrs["type"], "writes", False):
                single += [[flag, files["out"]], [f"{flag}={files['out']}"], [flag, "-"]]
            else:
                for v in VALUES.get(p.opts[-1], ["x"]):
                    single += [[flag, v], [f"{flag}={v}"]]
                single += [[flag, v] for v in LOOK_LIKE_OPTIONS]
    ends = [[files["f"]], [], ["-"], ["--", files["f"]], [files["missing"]], [files["dir"]]]
    lines = [s + e for s in single for e in ends[:2]]
    lines += [a + b + [files["f"]] for a, b in itertools.combinations(single[::3], 2)]
    lines += [s + s + [files["f"]] for s in single]  # repeated
    lines += [[files["f"]] + s for s in single]  # options after the FILE
    lines += [s + e for s in single[:4] for e in ends]
    lines += [[w, files["f"]] for w in REFUSED]
    lines += [[files["f"], files["f"]], ["--", "--help"], ["-o", "--width", files["f"]]]
    lines += [[c, files["f"]] for c in CLUSTERS] + [["-o", "--", files["f"]], ["-o", "-"]]
    return lines


#: short options together (`fmt -qi`), a value attached (`-oOUT`), an unknown one among them
CLUSTERS = ["-qi", "-iq", "-qo-", "-oOUT", "-qq", "-qZ", "-o=x", "-q-i"]


def _declaration(name: str) -> str:
    """What the quick start and click parse `name`'s command line from (click's command is
    built from the same declaration: `cli_click.click_command`), a Choice by its choices."""

    def value(v):
        return ("Choice", v.choices) if isinstance(v, Choice) else v

    declared = declared_command(name)
    return repr([(p.kind, p.opts, sorted((k, repr(value(v))) for k, v in p.attrs.items()))
                 for p in declared.params])  # fmt: skip


def _by_declaration() -> list:
    """The quick commands, those declared as one before them (`fold` and `simplify` as
    `cse`, `jacrev` and `hessian` as `jacfwd`) marked slow: the same command lines parsed
    from the same declaration (`make test` parses them for the first of each)."""
    seen, out = set(), []
    for name in sorted(quickstart.QUICK_COMMANDS):
        key = _declaration(name)
        out.append(name if key not in seen else pytest.param(name, marks=pytest.mark.slow))
        seen.add(key)
    return out


@pytest.mark.parametrize("name", _by_declaration())
def test_quick_parse_is_clicks(name, files):
    taken = 0
    for args in command_lines(name, files):
        quick = quick_parse(name, args)
        if quick is None:
            continue
        taken += 1
        assert click_parse(name, args) == quick, args
    assert taken > 10, f"{name}: the quick start took {taken} command lines"


@pytest.mark.parametrize("name", sorted(quickstart.QUICK_COMMANDS))
def test_refused_words_are_left_to_click(name, files):
    for word in REFUSED:
        assert quick_parse(name, [word, files["f"]]) is None, word


def test_common_command_lines_are_quick(files):
    f, out = files["f"], files["out"]
    for name, args in [
        ("fmt", [f]),
        ("fmt", ["-o", out, f]),
        ("fmt", ["--check", "-q", files["dir"]]),
        ("grad", ["--argnums", "0,1", f, "-o", "-"]),
        ("grad", ["--argnums=0", "--with-value", "--diff", f]),
        ("linearize", ["--split", out + "1", out + "2", f]),
        ("vmap", ["--axis-size", "3", "--in-axes", "0", f]),
        ("dce", ["--keep-outputs", "0", f]),
        ("check", ["--select", "E1", "--select", "W", f, f]),
        ("simplify", []),
    ]:
        assert quick_parse(name, args) is not None, (name, args)


def test_quick_commands_are_declared(files):
    """Every parameter of every quick command is one the quick parse models."""
    for name in quickstart.QUICK_COMMANDS:
        declared = declared_command(name)
        assert all(quickstart._modelled(p) for p in declared.params), name


#: a program every quick command takes (`transpose`: it is linear), in canonical form
LINEAR = (
    "{ lambda ; a:f32[3]. let\n"
    "    b:f32[3] = neg a\n"
    "    c:f32[] = reduce_sum[axes=(0,) out_sharding=None] b\n"
    "  in (c,) }\n"
)

_EXIT_SAYS_CLICK = (
    "import os, sys\n"
    "sys.argv = ['jaxprtool', *sys.argv[1:]]\n"
    "from jaxprtool.cli import entry\n"
    "real = os._exit\n"
    "os._exit = lambda c: (sys.stderr.write(f'click {\"click\" in sys.modules}'), "
    "sys.stderr.flush(), real(c))\n"
    "entry()\n"
)


#: runs each command line of its argument (a JSON list) in turn through the program's entry
#: (`cli.entry`), its ending (`os._exit`) turned into a return; writes, last, each one's exit
#: status and whether click was imported by then
_IN_TURN_SAYS_CLICK = """
import json, os, sys
from jaxprtool.cli import entry


class Ended(Exception):
    pass


def end(code):
    raise Ended(code)


os._exit = end
rows = []
for args in json.loads(sys.argv[1]):
    sys.argv = ["jaxprtool", *args]
    try:
        entry()
    except Ended as e:
        rows.append((e.args[0], "click" in sys.modules))
sys.stdout.flush()
sys.stderr.write("\\n" + json.dumps(rows) + "\\n")
"""

#: the common command lines (each takes LINEAR)
COMMON = [
    ["fmt"], ["fmt", "--check"], ["check"], ["check", "--select", "E1"], ["grad"],
    ["vjp"], ["jvp"], ["linearize", "--stats"], ["transpose"], ["vmap", "--axis-size", "2"],
    ["dce"], ["simplify"], ["grad", "--timing", "--verify-each"], ["jacfwd"], ["jacrev"],
    ["hessian"], ["cse"], ["fold"], ["inline"], ["canonicalize"], ["opt", "-p", "dce,cse"],
    ["stats"],
]  # fmt: skip


@pytest.fixture(scope="module")
def common_in_turn(tmp_path_factory) -> list:
    """(exit status, click imported by then) of each command line of COMMON, run in turn
    in one fresh process.  click, once imported, stays: a row without it says that neither
    its command nor one before it imported click, which is what a fresh process per
    command would say of each, in one start-up."""
    f = tmp_path_factory.mktemp("common") / "f.jaxpr"
    f.write_text(LINEAR)
    argv = json.dumps([[*args, str(f)] for args in COMMON])
    r = subprocess.run(
        [sys.executable, "-c", _IN_TURN_SAYS_CLICK, argv], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stderr.splitlines()[-1])
    assert len(rows) == len(COMMON), r.stderr
    return rows


@pytest.mark.parametrize("k", range(len(COMMON)), ids=[" ".join(a) for a in COMMON])
def test_a_quick_command_imports_no_click(common_in_turn, k):
    """The common commands run without importing click (its modules, and gettext, locale,
    uuid and platform: ~42M instructions of each start)."""
    status, click_imported = common_in_turn[k]
    assert status == 0
    first = next((COMMON[j] for j, (_, c) in enumerate(common_in_turn) if c), None)
    assert not click_imported, f"{first} imported click (run in turn: `common_in_turn`)"


def test_a_command_line_left_to_click_is_clicks(files):
    r = subprocess.run(
        [sys.executable, "-c", _EXIT_SAYS_CLICK, "fmt", "--bogus", files["f"]],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2
    assert "Error: No such option '--bogus'" in r.stderr and r.stderr.endswith("click True")


#: (command line, input text) run both ways: outputs, errors and exit statuses compared
RUNS = [
    (["fmt", "{f}"], None),
    (["fmt", "-"], "{ lambda ; a:f32[]. let b:f32[] = cos a in (b,) }"),
    (["fmt", "-o", "{out}", "{f}"], None),
    (["fmt", "--check", "{f}"], None),
    (["fmt", "--check", "{f}", "-o", "{out}"], None),  # a usage error after the parse
    (["fmt", "-o", "{f}", "{f}"], None),  # an output over an input
    (["fmt", "{bad}"], None),  # a located error
    (["fmt", "{missing}"], None),
    (["grad", "--argnums", "0", "--diff", "{f}"], None),
    (["grad", "--opt", "nosuch", "{f}"], None),  # click's BadParameter from the body
    (["jvp", "--no-instantiate", "{f}"], None),
    (["linearize", "--stats", "{f}"], None),
    (["linearize", "--split", "{out}", "{out}", "{f}"], None),
    (["vjp", "--remat", "nothing_saveable", "{f}"], None),
    (["transpose", "{f}"], None),
    (["vmap", "--axis-size", "3", "{f}"], None),
    (["check", "{f}", "{bad}"], None),
    (["dce", "--keep-outputs", "0", "{f}"], None),
    (["simplify", "{f}"], None),
    (["jacrev", "{f}"], None),
    (["hessian", "{f}"], None),
    (["opt", "-p", "inline,cse,dce", "{f}"], None),
    (["opt", "-p", "nosuch", "{f}"], None),
    (["canonicalize", "{f}"], None),
    (["stats", "{f}"], None),
]

#: runs each job of its argument (a JSON list) in a child forked from this one, as a fresh
#: `jaxprtool` process would run it: its own folder, input and output files, argv; `click`
#: jobs with no quick command (the quick start leaves every command line to click).  The
#: modules the commands execute are imported once, here, before the forks (a child starts
#: with them as a fresh process would be after importing them); click is not.  Prints the
#: children's exit statuses.
_FORKED = """
import importlib, json, os, sys
from jaxprtool import cli, quickstart

for module in sys.argv[2].split(","):
    importlib.import_module(module)
statuses = []
for job in json.loads(sys.argv[1]):
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        try:
            os.chdir(job["cwd"])
            writes = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
            for fd, path, flags in ((0, job["stdin"], os.O_RDONLY), (1, job["stdout"], writes),
                                    (2, job["stderr"], writes)):
                f = os.open(path, flags, 0o644)
                os.dup2(f, fd)
                os.close(f)
            if job["way"] == "click":
                quickstart.QUICK_COMMANDS = frozenset()
            sys.argv = ["jaxprtool", *job["args"]]
            cli.entry()
        finally:
            os._exit(70)  # (entry ends the process itself: never here)
    statuses.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
print(json.dumps(statuses))
"""

#: what the commands of RUNS execute, imported before the forks (`_FORKED`)
_COMMON_MODULES = [
    "jaxprtool.text.parser", "jaxprtool.text.printer", "jaxprtool.ad.api", "jaxprtool.ad.jvp",
    "jaxprtool.ad.linearize", "jaxprtool.ad.transpose", "jaxprtool.passes.dce",
    "jaxprtool.passes.cse", "jaxprtool.passes.simplify",
]  # fmt: skip


@pytest.fixture(scope="module")
def both_ways(tmp_path_factory) -> list:
    """For each command line of RUNS, what each way gave (quick, then click, in one folder
    as two processes would): exit status, output, errors (the way's name as WAY), the output
    file's bytes.  Each run is a child forked from one process (`_FORKED`)."""
    from jaxprtool.cli import COMMANDS

    jobs, modules = [], set(_COMMON_MODULES)
    for k, (argv, stdin) in enumerate(RUNS):
        d = tmp_path_factory.mktemp(f"run{k}")
        f = d / "f.jaxpr"
        f.write_text("{ lambda ; a:f32[]. let b:f32[] = sin a in (b,) }\n")
        (d / "bad.jaxpr").write_text("{ lambda ; a:f32[]. let b:f32[] = sin c in (b,) }\n")
        (d / "stdin").write_text(stdin or "")
        modules.add("jaxprtool.commands." + COMMANDS[argv[0]].split(":")[0])
        for way in ("quick", "click"):
            names = dict(f=str(f), out=str(d / f"out-{way}.jaxpr"), bad=str(d / "bad.jaxpr"))
            names["missing"] = str(d / "missing.jaxpr")
            args = [a.format(**names) for a in argv]
            jobs.append(dict(way=way, args=args, cwd=str(d), stdin=str(d / "stdin"),
                             stdout=str(d / f"{way}.out"), stderr=str(d / f"{way}.err")))  # fmt: skip
    r = subprocess.run(
        [sys.executable, "-c", _FORKED, json.dumps(jobs), ",".join(sorted(modules))],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    seen = []
    for job, status in zip(jobs, json.loads(r.stdout), strict=True):
        d, way = Path(job["cwd"]), job["way"]
        out = d / f"out-{way}.jaxpr"
        written = out.read_bytes() if out.exists() else None
        errors = (d / f"{way}.err").read_text().replace(way, "WAY")
        seen.append((status, (d / f"{way}.out").read_text(), errors, written))
    return [seen[k : k + 2] for k in range(0, len(seen), 2)]


@pytest.mark.parametrize("k", range(len(RUNS)), ids=[" ".join(a) for a, _ in RUNS])
def test_a_command_does_the_same_either_way(both_ways, k):
    quick, click_ = both_ways[k]
    assert quick == click_
