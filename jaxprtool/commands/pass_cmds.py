"""Clean-up pass commands and the program utilities `diff A B` and `stats`.

The commands `dce`, `cse`, `fold`, `simplify`, `inline` and `canonicalize` are generated
from the pass records of `passes/registry.py` (help, one flag per option); `opt -p
PIPELINE` runs a pipeline written as in xDSL/MLIR (`inline{names=relu},simplify,dce`)."""

from __future__ import annotations

import sys

from ..cli import ExitStatus, argument, command, guarded, option, options_of
from ..declare import Choice, Declared, IntRange, Param
from ..io import echo
from ..passes.registry import (
    PASSES,
    Pass,
    PassOption,
    PassOptionError,
    PipelineStep,
    parse_pipeline_steps,
)
from .common import FILE_ARG, OUT_ARG
from .driver import complete_pass_list, instruments_from, manager_options, manager_params


def _run(file, out, show_diff, fn, inst=None, split=False, total=1):
    """Read, transform with fn(jaxpr, inst) -> jaxpr, print in the input's style, write;
    each part of the input on its own with --split-input-file."""
    from ..text.printer import print_jaxpr
    from .common import output_style, parse_text
    from .driver import Instruments, run_parts, timed

    inst = inst or Instruments()
    jax_style = options_of().jax_style

    def body(part):
        jaxpr = parse_text(part.source, part.path, first_line=part.line)
        style = output_style(jaxpr, jax_style)
        inst.start(lambda j: print_jaxpr(j, style), total)
        result = fn(jaxpr, inst)
        with timed("print"):
            text = print_jaxpr(result, style, end="\n")
        if show_diff:
            from ..ui.diff import show_change

            name = "<stdin>" if part.path == "<stdin>" else part.path
            if split:
                name += f":{part.line}"
            show_change(
                jaxpr,
                result,
                show_diff,
                print_jaxpr(jaxpr, style, end="\n"),
                text,
                f"{name} (before)",
                f"{name} (after)",
                style,
            )
        return text

    if not run_parts([file], split, body, out, inst):
        return ExitStatus.FAILURE
    return None


_OUTPUT_HELP = "Write to OUT (atomically) instead of stdout."
_DIFF_HELP = (
    "Show what changed on stderr: the equations removed, added or changed, with the two "
    "programs aligned up to renaming (as `jaxprtool diff`); --diff=text: a unified diff "
    "of the printouts."
)
_DIFF_KW = dict(
    optional_value=True,
    metavar="[=text]",
    type=Choice(["semantic", "text"]),
    flag_value="semantic",
    default=None,
    help=_DIFF_HELP,
)


def _common_params() -> list[Param]:
    """FILE, -o and --diff, in the order every pass command shows them."""
    return [
        Param(
            "argument",
            ("file",),
            dict(required=False, default="-", metavar="[FILE|-]", type=FILE_ARG),
        ),
        Param(
            "option",
            ("-o", "--output", "out"),
            dict(metavar="OUT", help=_OUTPUT_HELP, type=OUT_ARG),
        ),
        Param("option", ("--diff", "show_diff"), _DIFF_KW),
    ]


def _pass_option(o: PassOption) -> Param:
    """The command-line flag of a pass option: `--keep-outputs I,J,...`, `--flag/--no-flag`."""
    if o.type is bool:
        return Param(
            "option", (f"--{o.name}/--no-{o.name}", o.key), dict(default=o.default, help=o.help)
        )
    return Param("option", (f"--{o.name}", o.key), dict(metavar=o.shown_metavar, help=o.help))


def pass_command(p: Pass) -> Declared:
    """The command of a pass record: its doc as help, one flag per option, FILE, -o, --diff.
    A bad flag value (or one that does not fit the program) is bad usage (exit 2)."""

    def callback(file, out, show_diff, split_input, **flags):
        inst = instruments_from(flags)
        options = {}
        for o in p.options:
            value = flags[o.key]
            if value is None:
                continue  # not given: the record's default
            if isinstance(value, str):
                try:
                    value = o.parse(value)
                except ValueError as e:
                    import click

                    raise click.BadParameter(str(e), param_hint=f"--{o.name}") from None
            options[o.key] = value
        step = PipelineStep(p, options)

        def fn(j, inst):
            try:
                return inst.pipeline(j, [step])
            except PassOptionError as e:
                import click

                raise click.BadParameter(e.detail, param_hint=f"--{e.option}") from None

        return guarded(_run)(file, out, show_diff, fn, inst, split_input)

    params = _common_params() + [_pass_option(o) for o in p.options] + manager_params()
    return Declared.of(callback, p.name, params, help=p.doc)


#: one command per pass record, in the registry's order
PASS_COMMANDS: dict[str, Declared] = {name: pass_command(p) for name, p in PASSES.items()}

dce = PASS_COMMANDS["dce"]
cse = PASS_COMMANDS["cse"]
fold = PASS_COMMANDS["fold"]
simplify = PASS_COMMANDS["simplify"]
inline = PASS_COMMANDS["inline"]
canonicalize = PASS_COMMANDS["canonicalize"]


def _pass_table() -> str:
    """The passes, their one-line help and their options, for `opt --help`."""

    def label(o: PassOption) -> str:
        return f"{o.name}={o.shown_metavar}"

    width = max(len(name) for name in PASSES) + 2
    owidth = max((len(label(o)) for p in PASSES.values() for o in p.options), default=0) + 2
    lines = ["\b", "Passes and their options:"]
    for name, p in PASSES.items():
        lines.append(f"  {name.ljust(width)}{p.help}")
        lines += [f"    {label(o).ljust(owidth)}{o.help}" for o in p.options]
    return "\n".join(lines)


_OPT_HELP = f"""Run a pipeline of clean-up passes.

PASS,... is a list of passes separated by commas, as in MLIR and xDSL.  A pass may take
options in braces, separated by spaces, as in 'inline{{names=relu,gelu}}': a comma inside
braces belongs to the option (a list).  Values are integers, true/false or comma lists;
'none' (or no -p, as mlir-opt without passes) runs nothing: the input is printed back.

{_pass_table()}

\b
Example:
  jaxprtool opt -p inline,simplify,cse,dce f.jaxpr --diff
  jaxprtool opt -p 'inline{{names=relu}},dce{{keep-outputs=0}}' f.jaxpr
  jaxprtool opt -p canonicalize --print-after-all f.jaxpr
"""


@command(help=_OPT_HELP)
@argument("file", required=False, default="-", metavar="[FILE|-]", type=FILE_ARG)
@option("-o", "--output", "out", metavar="OUT", help=_OUTPUT_HELP, type=OUT_ARG)
@option("--diff", "show_diff", **_DIFF_KW)
@option(
    "-p",
    "--pipeline",
    "pipeline",
    default="none",
    metavar="PASS,...",
    shell_complete=complete_pass_list,
    help=f"Passes to run in order: {', '.join(PASSES)} (default: none).",
)
@manager_options()
def opt(file, out, show_diff, pipeline, inst, split_input):
    from ..core import JaxprError

    try:
        steps = parse_pipeline_steps(pipeline)
    except JaxprError as e:
        import click

        raise click.BadParameter(e.message, param_hint="-p") from None

    def fn(j, inst):
        try:
            return inst.pipeline(j, steps)
        except PassOptionError as e:
            import click

            raise click.BadParameter(e.message, param_hint="-p") from None

    return guarded(_run)(file, out, show_diff, fn, inst, split_input, len(steps))


# ---------------------------------------------------------------- diff


@command(name="diff")
@argument("a", metavar="A", type=FILE_ARG)
@argument("b", metavar="B", type=FILE_ARG)
@option(
    "-q", "--quiet", is_flag=True, help="Only the exit status: 0 equal, 1 different, 2 trouble."
)
@option(
    "-U",
    "--context",
    default=2,
    show_default=True,
    type=IntRange(min=0),
    help="Lines of context.",
)
@option(
    "--renames",
    is_flag=True,
    help="After the diff, the map from A's variable names to B's (`renamed: z -> e`) for "
    "the variables the alignment pairs.",
)
def diff(a, b, quiet, context, renames):
    """Semantic diff of two programs, ignoring variable names.

    Exit status: 0 when A and B are the same program up to renaming, 1 when they differ
    (the changed equations are shown aligned: removed and kept lines in A's names, added
    lines in B's), 2 on any trouble (unreadable file, parse error).

    \b
    Example:
      jaxprtool diff before.jaxpr after.jaxpr
    """
    from ..core import JaxprError
    from ..io import Reported, report, write_output
    from ..ui.diff import rename_map, semantic_diff

    try:
        from .common import load

        ja, _, pa = load(a)
        jb, _, pb = load(b)
        d = semantic_diff(ja, jb, pa, pb, context=context)
        pairs = rename_map(ja, jb) if renames and not quiet else []
    except Reported:  # the checker's errors are printed: trouble, not a difference
        return ExitStatus.ERROR
    except JaxprError as e:
        report(e)
        return ExitStatus.ERROR
    except RecursionError:
        report(JaxprError("input nests too deeply"))
        return ExitStatus.ERROR
    except Exception as e:
        if options_of().debug:
            raise
        report(
            JaxprError(
                f"internal error: {type(e).__name__}: {e} (run with --debug for a traceback)"
            )
        )
        return ExitStatus.ERROR
    renamed = "".join(f"renamed: {x} -> {y}\n" for x, y in pairs)
    if d is None:
        if not quiet:
            echo("equal (up to variable names)", err=True)
            write_output(renamed, None)
        return ExitStatus.SUCCESS
    if not quiet:
        from ..io import use_color

        if use_color(sys.stdout):
            from ..ui.diff import show_text

            show_text(d, sys.stdout)
        else:
            write_output(d, None)
        write_output(renamed, None)
    return ExitStatus.FAILURE


# ---------------------------------------------------------------- stats


@command()
@argument("files", nargs=-1, metavar="[FILE|DIR|-]...", type=FILE_ARG)
@option("--json", "as_json", is_flag=True, help="Print the numbers as JSON.")
@option(
    "-o",
    "--output",
    "out",
    metavar="OUT",
    type=OUT_ARG,
    help="Write to OUT (atomically) instead of stdout.",
)
def stats(files, as_json, out):
    """Equation counts by primitive (nested included), nesting depth, inputs/outputs/constvars,
    residual-like values, and FLOP and byte estimates computed from the types.

    Residual-like values are values computed by top-level equations and passed into a
    nested call (as linearize passes its residuals to the linear program).  FLOPs: one per
    output element for elementwise ops, 2*M*N*K per batch for dot_general, 2 * out elements
    * window * in features / groups for convolutions, the input size for reductions; scan
    bodies count `length` times, while bodies once.

    Several FILES (a DIR: its `*.jaxpr` and JAX-dump `*.jaxpr.txt` files) give one report
    each; with --json, a list of objects, each with its "file".

    \b
    Example:
      jaxprtool stats f.jaxpr --json
      jaxprtool linearize f.jaxpr | jaxprtool stats
      jaxprtool stats dumps/ --json
    """
    return guarded(_stats)(files, as_json, out)


def _stats(files, as_json, out):
    from ..io import write_output
    from ..ui.stats import render_text
    from ..ui.stats import stats as compute
    from .common import parse_text
    from .driver import expand_inputs, run_parts

    inputs = expand_inputs(files or ("-",))
    many = len(inputs) > 1
    reports: list = []

    def body(part):
        reports.append(
            (part.path, compute(parse_text(part.source, part.path, first_line=part.line)))
        )
        return None

    ok = run_parts(inputs, False, body, keep_going=many)
    if as_json:
        import json  # here: the pass commands need it only for `stats --json`

        data = [{"file": p, **s} for p, s in reports] if many else reports[0][1]
        text = json.dumps(data, indent=2) + "\n"
    else:
        text = "\n".join(render_text(s, p) for p, s in reports)
    if reports and (ok or out in (None, "-")):
        write_output(text, out)
    return None if ok else ExitStatus.FAILURE
