"""Clean-up pass commands (`dce`, `cse`, `fold`, `simplify`, `inline`, `canonicalize`,
`opt -p PIPELINE`) and the program utilities `diff A B` and `stats`."""

from __future__ import annotations

import json
import sys

import click

from ..cli import OPTIONS, guarded


def _run(file, out, show_diff, fn, print_after_all=False):
    """Read, transform with fn(jaxpr, hook) -> jaxpr, print in the input's style, write."""
    from ..io import write_output
    from ..text.printer import print_jaxpr
    from .common import load, output_style

    jaxpr, _text, _path = load(file)
    style = output_style(jaxpr)
    hook = None
    if print_after_all:

        def hook(name, j):
            click.echo(f"// -----// IR Dump After {name} //----- //", err=True)
            click.echo(print_jaxpr(j, style), err=True)

    result = fn(jaxpr, hook)
    text = print_jaxpr(result, style)
    if show_diff:
        from ..ui.diff import show_diff as _show

        name = "<stdin>" if file in (None, "-") else file
        _show(print_jaxpr(jaxpr, style) + "\n", text + "\n", f"{name} (before)", f"{name} (after)")
    write_output(text + "\n", out)


def _common(fn):
    fn = click.option(
        "--diff",
        "show_diff",
        is_flag=True,
        help="Show a coloured unified diff of the change on stderr.",
    )(fn)
    fn = click.option(
        "-o", "--output", "out", metavar="OUT", help="Write to OUT (atomically) instead of stdout."
    )(fn)
    fn = click.argument("file", required=False, default="-", metavar="[FILE|-]")(fn)
    return fn


def _simple_pass(name: str, doc: str):
    @click.command(name=name, help=doc)
    @_common
    def cmd(file, out, show_diff):
        from ..passes.registry import PASSES

        guarded(_run)(file, out, show_diff, lambda j, _h: PASSES[name](j))

    return cmd


cse = _simple_pass(
    "cse",
    """Common-subexpression elimination: equal equations (same primitive, parameters and
    operands) are computed once.  Effectful and random-number equations are never merged.

    \b
    Example:
      jaxprtool cse f.jaxpr --diff
    """,
)
fold = _simple_pass(
    "fold",
    """Constant-fold scalar equations whose operands are all literals, where numpy computes
    exactly what XLA does (add sub mul div neg, comparisons, select_n, integer and boolean
    arithmetic, exact conversions).  Never transcendental functions, rounding or float->int.

    \b
    Example:
      jaxprtool fold f.jaxpr
    """,
)
simplify = _simple_pass(
    "simplify",
    """Algebraic identities that keep every value exactly: mul x 1, add_any x zeros,
    neg (neg x), no-op converts/broadcasts/reshapes/transposes, select_n with a literal
    predicate.  Run dce afterwards (or canonicalize) to drop what became dead.

    \b
    Example:
      jaxprtool simplify f.jaxpr | jaxprtool dce
    """,
)
canonicalize = _simple_pass(
    "canonicalize",
    """simplify, fold, cse and dce repeated to a fixed point.

    \b
    Example:
      jaxprtool vjp f.jaxpr | jaxprtool canonicalize
    """,
)


def _parse_indices(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter(
            f"expected comma-separated output indices, got {text!r}", param_hint="--keep-outputs"
        ) from None


@click.command()
@_common
@click.option(
    "--keep-outputs", metavar="I,J,...", help="Keep only these outputs (0-based), then DCE."
)
def dce(file, out, show_diff, keep_outputs):
    """Dead-code elimination: remove equations whose results are unused, also inside nested
    jaxprs (jit bodies, cond branches, scan/while bodies: unused carries and outputs pruned as
    JAX does).  Effectful equations are kept.

    \b
    Example:
      jaxprtool dce f.jaxpr --keep-outputs 0,2
    """
    keep = _parse_indices(keep_outputs) if keep_outputs is not None else None

    def fn(j, _h):
        from ..passes.dce import dce as _dce
        from ..passes.dce import dce_keep_outputs

        if keep is None:
            return _dce(j)
        bad = [i for i in keep if not 0 <= i < len(j.outvars)]
        if bad:
            raise click.BadParameter(
                f"output index {bad[0]} out of range (the program has {len(j.outvars)} outputs)",
                param_hint="--keep-outputs",
            )
        return dce_keep_outputs(j, keep)

    guarded(_run)(file, out, show_diff, fn)


@click.command()
@_common
@click.option("--names", metavar="NAME,...", help="Inline only calls with these name= parameters.")
def inline(file, out, show_diff, names):
    """Inline nested jit/pjit/closed_call bodies (all of them, or only --names NAME,...).

    \b
    Example:
      jaxprtool inline f.jaxpr --names relu,softmax
    """
    wanted = {n.strip() for n in names.split(",") if n.strip()} if names else None

    def fn(j, _h):
        from ..passes.inline import inline as _inline

        return _inline(j, wanted)

    guarded(_run)(file, out, show_diff, fn)


@click.command()
@_common
@click.option(
    "-p",
    "--pipeline",
    "pipeline",
    required=True,
    metavar="PASS,...",
    help="Passes to run in order: dce, cse, fold, simplify, inline, canonicalize (or none).",
)
@click.option(
    "--print-after-all", is_flag=True, help="Print the program after each pass on stderr."
)
def opt(file, out, show_diff, pipeline, print_after_all):
    """Run a pipeline of clean-up passes.

    \b
    Example:
      jaxprtool opt -p inline,simplify,cse,dce f.jaxpr --diff
      jaxprtool opt -p canonicalize --print-after-all f.jaxpr
    """
    from ..core import JaxprError
    from ..passes.registry import parse_pipeline, run_pipeline

    try:
        parse_pipeline(pipeline)
    except JaxprError as e:
        raise click.BadParameter(e.message, param_hint="-p") from None
    guarded(_run)(file, out, show_diff, lambda j, h: run_pipeline(j, pipeline, h), print_after_all)


# ---------------------------------------------------------------- diff


@click.command(name="diff")
@click.argument("a", metavar="A")
@click.argument("b", metavar="B")
@click.option(
    "-q", "--quiet", is_flag=True, help="Only the exit status: 0 equal, 1 different, 2 trouble."
)
@click.option(
    "-U",
    "--context",
    default=2,
    show_default=True,
    type=click.IntRange(min=0),
    help="Lines of context.",
)
def diff(a, b, quiet, context):
    """Semantic diff of two programs, ignoring variable names.

    Exit status: 0 when A and B are the same program up to renaming, 1 when they differ
    (the changed equations are shown aligned, with canonical names), 2 on any trouble
    (unreadable file, parse error).

    \b
    Example:
      jaxprtool diff before.jaxpr after.jaxpr
    """
    from ..core import JaxprError
    from ..io import report, write_output
    from ..ui.diff import semantic_diff

    try:
        from .common import load

        ja, _, pa = load(a)
        jb, _, pb = load(b)
        d = semantic_diff(ja, jb, pa, pb, context=context)
    except JaxprError as e:
        report(e)
        sys.exit(2)
    except RecursionError:
        report(JaxprError("input nests too deeply"))
        sys.exit(2)
    except Exception as e:
        if OPTIONS.debug:
            raise
        report(
            JaxprError(
                f"internal error: {type(e).__name__}: {e} (run with --debug for a traceback)"
            )
        )
        sys.exit(2)
    if d is None:
        if not quiet:
            click.echo("equal (up to variable names)", err=True)
        sys.exit(0)
    if not quiet:
        from ..io import use_color

        if use_color(sys.stdout):
            from ..ui.diff import show_text

            show_text(d, sys.stdout)
        else:
            write_output(d, None)
    sys.exit(1)


# ---------------------------------------------------------------- stats


@click.command()
@click.argument("file", required=False, default="-", metavar="[FILE|-]")
@click.option("--json", "as_json", is_flag=True, help="Print the numbers as JSON.")
@click.option(
    "-o", "--output", "out", metavar="OUT", help="Write to OUT (atomically) instead of stdout."
)
def stats(file, as_json, out):
    """Equation counts by primitive (nested included), nesting depth, inputs/outputs/constvars,
    residual-like values, and FLOP and byte estimates computed from the types.

    Residual-like values are values computed by top-level equations and passed into a
    nested call (as linearize passes its residuals to the linear program).  FLOPs: one per
    output element for elementwise ops, 2*M*N*K per batch for dot_general, 2 * out elements
    * window * in features / groups for convolutions, the input size for reductions; scan
    bodies count `length` times, while bodies once.

    \b
    Example:
      jaxprtool stats f.jaxpr --json
      jaxprtool linearize f.jaxpr | jaxprtool stats
    """
    guarded(_stats)(file, as_json, out)


def _stats(file, as_json, out):
    from ..io import write_output
    from ..ui.stats import render_text
    from ..ui.stats import stats as compute
    from .common import load

    jaxpr, _text, path = load(file)
    s = compute(jaxpr)
    if as_json:
        write_output(json.dumps(s, indent=2) + "\n", out)
    else:
        write_output(render_text(s, path), out)
