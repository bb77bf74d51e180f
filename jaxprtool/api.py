"""jaxprtool as a library: the commands as Python functions, for a notebook or a test suite.

    import jaxprtool as jt

    f = jt.parse(text)                    # or jt.load("f.jaxpr"): a Program
    g = jt.grad(f, argnums=(0,))          # the program `jaxprtool grad` prints
    print(jt.format(g))                   # its text, exactly as the command writes it
    jt.run(g, x, y)                       # [numpy arrays], through JAX (as `jaxprtool run`)

A `Program` is a parsed or transformed program: `.jaxpr` (the IR, `jaxprtool.core.Jaxpr`),
`.style` (the JAX version whose printing it follows: its source's, kept through every
transformation, as the commands print a result in their input's style), `.path` and, for
a parsed one, `.text`; `str(program)` is its text.  Every function also takes a bare Jaxpr.

Every function does what the command of the same name does, with the same defaults (the AD
functions run the `--opt` clean-up pipeline, `canonicalize`, unless `opt="none"`), and
raises what the command reports: `JaxprError` (`.message`, `.loc`, a `Loc(file, line,
col)` or None; `str(err)` is the command's `FILE:LINE:COL: error: message`), `CheckError`
(a JaxprError whose `.diagnostics` lists every checker error) for an ill-typed program.
An error about the program as a whole (`ProgramError`: a non-scalar `grad` output, a
wrong number of arguments) says `.where` it is ("inputs" or "outputs"); the command
line locates it in the file it read, and so does the API for a parsed Program.
Parser and checker warnings are Python warnings of category `JaxprWarning`.  Programs are
values: no function changes its argument.

This module is the stable surface: its names and parameters change only additively.
`run`, `to_stablehlo`, `xla_memory`, `check_grad` and `explain` import JAX; the others
never do.  docs/API.md documents every name.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

# (the checker and liveness modules load here, before the package binds this module's
# `check` and `memory` functions to its own names: see jaxprtool/__init__.py)
from .check import Diagnostic
from .core import Jaxpr, JaxprError, Loc, ProgramError
from .frozen import Frozen, set_field
from .memory import Residuals, Timeline

__all__ = [
    "CheckError",
    "Diagnostic",
    "Difference",
    "Jaxpr",
    "JaxprError",
    "JaxprWarning",
    "Loc",
    "Program",
    "ProgramError",
    "check",
    "check_grad",
    "diff",
    "explain",
    "format",
    "grad",
    "hessian",
    "jacfwd",
    "jacrev",
    "jvp",
    "linearize",
    "load",
    "memory",
    "parse",
    "run",
    "run_passes",
    "stats",
    "to_stablehlo",
    "transpose",
    "vjp",
    "vmap",
    "xla_memory",
]

#: the AD functions' clean-up pipeline, as the commands' `--opt`
DEFAULT_OPT = "canonicalize"


class JaxprWarning(UserWarning):
    """A parser or checker warning (an unknown primitive, a dropped binder read as used)."""


class CheckError(JaxprError):
    """The checker rejected the program: `.diagnostics` holds every error (the first is
    the exception's own message and location)."""

    def __init__(self, diagnostics: list[Diagnostic]):
        first = diagnostics[0]
        super().__init__(first.message, first.loc)
        self.diagnostics = diagnostics


class Program(Frozen, eq=False):
    """A program and how to print it (see the module's docstring)."""

    __slots__ = ("jaxpr", "style", "path", "text")
    jaxpr: Jaxpr
    style: object  # jaxprtool.text.style.Style
    path: str
    text: str | None

    def __init__(
        self, jaxpr: Jaxpr, style: object, path: str = "<string>", text: str | None = None
    ) -> None:
        set_field(self, "jaxpr", jaxpr)
        set_field(self, "style", style)
        set_field(self, "path", path)
        set_field(self, "text", text)

    def __str__(self) -> str:
        return format(self)

    def __repr__(self) -> str:
        """`<Program f.jaxpr: (a:f32[3], b:f32[]) -> (f32[3],), 12 equations>`: short,
        where the dataclass repr ran to thousands of characters."""
        j = self.jaxpr
        ins = ", ".join(f"{v.hint or '_'}:{v.type}" for v in j.invars)
        outs = ", ".join(str(getattr(v, "type", v)) for v in j.outvars)
        n = len(j.eqns)
        return f"<Program {self.path}: ({ins}) -> ({outs}), {n} equation{'s' if n != 1 else ''}>"

    @property
    def input_types(self) -> list:
        """The types of the program's inputs (`ShapedArray`s: `.shape`, `.dtype`), in order."""
        return [v.type for v in self.jaxpr.invars]

    @property
    def output_types(self) -> list:
        return [getattr(v, "type", None) for v in self.jaxpr.outvars]

    def derived(self, jaxpr: Jaxpr) -> Program:
        """A program made from this one: its style and path, no source text."""
        return Program(jaxpr, self.style, self.path)


def _program(p: Program | Jaxpr) -> Program:
    if isinstance(p, Program):
        return p
    if not isinstance(p, Jaxpr):
        raise TypeError(f"expected a jaxprtool Program or Jaxpr, got {type(p).__name__}")
    from .text.style import detect_style

    return Program(p, detect_style(p))


@contextmanager
def _located(p: Program) -> Iterator[None]:
    """An error about the program as a whole gets the place in `p`'s text the CLI gives it."""
    try:
        yield
    except ProgramError as e:
        if e.loc is None and p.text is not None:
            from .io import text_loc

            e.loc = text_loc(p.path, p.text, e.where)
        raise


# ---------------------------------------------------------------- text


def parse(text: str | bytes, path: str = "<string>", *, check: bool = True) -> Program:
    """The program printed in `text` (any JAX version's printout; bytes are read as a file's
    are: UTF-8).  `path` names it in error locations.  With `check` (the default, as every
    command that transforms or runs a program does) the checker runs too: an ill-typed
    program raises CheckError."""
    from .io import decode_input
    from .text.parser import parse as parse_text
    from .text.style import detect_style

    if isinstance(text, (bytes, bytearray, memoryview)):
        text = decode_input(bytes(text), path)
    elif not isinstance(text, str):
        raise TypeError(f"parse: text must be str or bytes, not {type(text).__name__}")

    result = parse_text(text, path)
    for w in result.warnings:
        _warn(w)
    if check:
        _checked(result.jaxpr, path)
    return Program(result.jaxpr, detect_style(result.jaxpr), path, text)


def load(path: str, *, check: bool = True) -> Program:
    """`parse` of a file's text (a missing or unreadable file is a JaxprError)."""
    from .io import read_source

    text, shown = read_source(path)
    return parse(text, shown, check=check)


def format(program: Program | Jaxpr, jax_style: str | None = None, width: int = 80) -> str:
    """The text of the program as the commands write it (no final newline): in the style of
    JAX version `jax_style` (e.g. "0.4.35"), else in the program's own (`Program.style`)."""
    from .ad.api import restyle
    from .text.printer import print_jaxpr
    from .text.style import Style

    p = _program(program)
    style = p.style
    if jax_style is not None:
        try:
            style = Style.parse(jax_style)
        except ValueError as e:
            raise JaxprError(f"jax_style: {e}") from None
    jaxpr = p.jaxpr
    if jax_style is not None or p.text is None:  # (a parsed program prints as it was read)
        jaxpr = restyle(jaxpr, style)
    return print_jaxpr(jaxpr, style, width)


def check(program: Program | Jaxpr) -> list[Diagnostic]:
    """Check types, scopes and arities (as `jaxprtool check`): the warnings, also issued as
    JaxprWarning; CheckError when there are errors."""
    p = _program(program)
    return _checked(p.jaxpr, p.path)


def _checked(jaxpr: Jaxpr, path: str | None) -> list[Diagnostic]:
    from .check import check as run_check

    diags = run_check(jaxpr, path, check_names=True)
    errors = [d for d in diags if d.kind == "error"]
    if errors:
        raise CheckError(errors)
    for d in diags:
        _warn(d)
    return diags


def _warn(w: JaxprError) -> None:
    text = f"{w.loc}: warning: {w.message}" if w.loc else f"warning: {w.message}"
    warnings.warn(text, JaxprWarning, stacklevel=3)


# ---------------------------------------------------------------- transformations


@contextmanager
def _ad_input(p: Program, custom_rules: str) -> Iterator[Jaxpr]:
    """What the AD commands transform: the program with its nested bodies' and recorded
    rules' constants made its own (`consts_order.for_ad`), refused when it is over named
    axes; errors located in `p`'s text; `custom_rules` in force for the block alone, so that
    one call never changes what another (the next, or another thread's) does."""
    from .ad.inputs import require_transformable
    from .ad.invocation import entered, for_call
    from .consts_order import for_ad

    with _located(p), entered(for_call(custom_rules)):
        j = for_ad(p.jaxpr)
        require_transformable(j)
        yield j


def jvp(
    program: Program | Jaxpr,
    argnums: Sequence[int] | None = None,
    *,
    instantiate: bool = True,
    opt: str = DEFAULT_OPT,
    custom_rules: str = "default",
) -> Program:
    """Forward mode, as `jaxprtool jvp`: (x..., tx...) -> (y..., ty...)."""
    from .ad.api import jvp_jaxpr_info

    p = _program(program)
    with _ad_input(p, custom_rules) as j:
        j = jvp_jaxpr_info(j, argnums, instantiate=instantiate)[0]
        return p.derived(_passes(j, opt))


def linearize(
    program: Program | Jaxpr,
    argnums: Sequence[int] | None = None,
    *,
    split: bool = False,
    opt: str = DEFAULT_OPT,
    custom_rules: str = "default",
):
    """As `jaxprtool linearize`: the combined program (jvp's calling convention, the linear
    part in one `jit[name=linear]` equation, which `transpose` recognises); with `split`,
    the pair (primal: x -> (y..., new residuals...), linear: (residuals..., tx...) -> ty)."""
    from .ad.linearize import combine, linearize_jaxpr

    p = _program(program)
    with _ad_input(p, custom_rules) as j:
        primal, linear, info = linearize_jaxpr(j, argnums)
        linear = _passes(linear, opt)
        if split:
            return p.derived(_passes(primal, opt)), p.derived(linear)
        return p.derived(combine(primal, linear, info))


def transpose(
    program: Program | Jaxpr,
    *,
    linear: Sequence[int] | None = None,
    residuals: int | None = None,
    opt: str = DEFAULT_OPT,
) -> Program:
    """As `jaxprtool transpose`: linearize's combined form becomes a VJP (x..., ct_y...) ->
    (y..., ct_x...); any other program is linear in every float input (else in all but its
    fewest leading inputs that make it linear, with a warning, as the command), or in
    `linear` (indices), or in all but the first `residuals` inputs: (residuals..., ct_y...)
    -> (ct_x...)."""
    from .ad.transpose import transpose_auto

    if linear is not None and residuals is not None:
        raise JaxprError("give linear or residuals, not both")
    p = _program(program)
    with _ad_input(p, "default") as j:
        j = transpose_auto(j, linear, residuals)[0]
        return p.derived(_passes(j, opt))


def vjp(
    program: Program | Jaxpr,
    argnums: Sequence[int] | None = None,
    *,
    opt: str = DEFAULT_OPT,
    custom_rules: str = "default",
) -> Program:
    """Reverse mode, as `jaxprtool vjp`: (x..., ct_y...) -> (y..., ct_x...)."""
    from .ad.api import vjp_jaxpr

    p = _program(program)
    with _ad_input(p, custom_rules) as j:
        return p.derived(_passes(vjp_jaxpr(j, argnums), opt))


def grad(
    program: Program | Jaxpr,
    argnums: Sequence[int] = (0,),
    *,
    has_aux: bool = False,
    with_value: bool = False,
    opt: str = DEFAULT_OPT,
    custom_rules: str = "default",
    remat: str | None = None,
) -> Program:
    """The gradient of a scalar output, as `jaxprtool grad`: (x...) -> ([value,] [aux...,]
    grads...).  `remat`: what the backward pass recomputes rather than keeps, as `grad
    --remat` (a `jax.checkpoint_policies` name or call, `NAME=a,b`, or "min-cut")."""
    from .ad.api import grad_jaxpr

    p = _program(program)
    with _ad_input(p, custom_rules) as j:
        spec = _remat_request(remat, j)
        plans = None if spec is None else []
        j = grad_jaxpr(j, argnums, has_aux=has_aux, with_value=with_value, remat=spec, plans=plans)
        return p.derived(_passes(j, opt))


def _remat_request(policy: str | None, j: Jaxpr):
    """`policy` parsed (`remat.Spec`) and checked against the program, as `--remat` is: a
    checkpoint name the program lacks, and min-cut's byte weights on a symbolic program
    (the command's `--dim` sizes them), are refused."""
    if policy is None:
        return None
    from .ad.remat import check_names, parse_policy
    from .core import ShapedArray, all_eqns

    try:
        spec = parse_policy(policy)
        check_names(spec, j)
    except ValueError as e:
        raise JaxprError(str(e)) from None
    if spec.policy == "min-cut":
        types = [v.type for v in j.invars] + [o.type for e in all_eqns(j) for o in e.outputs]
        unsized = [t for t in types if isinstance(t, ShapedArray) and not t.is_sized]
        if unsized:
            raise JaxprError(
                f"remat min-cut weighs residuals by their bytes, which {unsized[0]}'s "
                "symbolic dimension leaves unknown: use a policy (dots_saveable, ...), or "
                "`jaxprtool grad --remat min-cut --dim b=N`"
            )
    return spec


def vmap(
    program: Program | Jaxpr,
    in_axes: int | None | Sequence[int | None] = 0,
    out_axes: int | None | Sequence[int | None] = 0,
    axis_size: int | None = None,
    *,
    axis_name: str | None = None,
    opt: str = DEFAULT_OPT,
) -> Program:
    """Batching, as `jax.vmap` and `jaxprtool vmap`: input i gets a batch axis of
    `axis_size` at `in_axes[i]` (one entry: every input; None: not batched); `axis_name`
    names the batch axis for the program's collectives and `axis_index`, as
    `jaxprtool vmap --axis-name`."""
    from .ad.batching import vmap_jaxpr

    p = _program(program)
    with _ad_input(p, "default") as j:
        j = vmap_jaxpr(j, in_axes, out_axes, axis_size, p.style, axis_name=axis_name)
        return p.derived(_passes(j, opt))


def jacfwd(
    program: Program | Jaxpr,
    argnums: int | Sequence[int] = (0,),
    *,
    opt: str = DEFAULT_OPT,
    custom_rules: str = "default",
) -> Program:
    """The Jacobian by forward mode, as `jax.jacfwd` and `jaxprtool jacfwd`: (x...) -> (J...),
    one result of shape y.shape + x.shape per output y and input x among `argnums`."""
    return _jacobian("jacfwd", program, argnums, opt, custom_rules)


def jacrev(
    program: Program | Jaxpr,
    argnums: int | Sequence[int] = (0,),
    *,
    opt: str = DEFAULT_OPT,
    custom_rules: str = "default",
) -> Program:
    """The Jacobian by reverse mode, as `jax.jacrev` and `jaxprtool jacrev` (laid out as
    `jacfwd`'s)."""
    return _jacobian("jacrev", program, argnums, opt, custom_rules)


def hessian(
    program: Program | Jaxpr,
    argnums: int | Sequence[int] = (0,),
    *,
    opt: str = DEFAULT_OPT,
    custom_rules: str = "default",
) -> Program:
    """The Hessian, as `jax.hessian` and `jaxprtool hessian`: (x...) -> (H...), one result
    of shape y.shape + x_i.shape + x_j.shape per output y and inputs x_i, x_j among
    `argnums`."""
    return _jacobian("hessian", program, argnums, opt, custom_rules)


def _jacobian(kind: str, program, argnums, opt: str, custom_rules: str) -> Program:
    from .ad import jacobians

    p = _program(program)
    with _ad_input(p, custom_rules) as j:
        j = getattr(jacobians, kind)(j, argnums, style=p.style)
        return p.derived(_passes(j, opt))


def run_passes(program: Program | Jaxpr, pipeline: str | None) -> Program:
    """The clean-up passes of `pipeline`, as `jaxprtool opt -p PIPELINE`
    (`"inline,simplify,cse,dce"`, options in braces: `"canonicalize{max-iterations=5}"`;
    None or "none": the program itself, unchanged)."""
    p = _program(program)
    j = _passes(p.jaxpr, pipeline)
    return p if j is p.jaxpr else p.derived(j)


def _passes(jaxpr: Jaxpr, pipeline: str | None) -> Jaxpr:
    from .passes.registry import run_pipeline

    return run_pipeline(jaxpr, pipeline)


def memory(
    program: Program | Jaxpr,
    *,
    of: str = "program",
    argnums: Sequence[int] | None = None,
) -> tuple[Timeline, Residuals | None]:
    """Liveness, as `jaxprtool memory --no-xla`: `(timeline, residuals)`, a
    `jaxprtool.memory.Timeline` (bytes live per step, the peak, the values live there) and
    the `Residuals` held across the forward/backward boundary (None where there is none), of
    the program or of its `of="linearize"|"vjp"|"grad"` transformation."""
    from .ad.forms import FORMS, transformed
    from .memory import analyse

    if of not in FORMS:
        raise JaxprError(f"memory of: expected one of {', '.join(FORMS)}, got {of!r}")
    p = _program(program)
    with _located(p):
        jaxpr, boundary = transformed(p.jaxpr, of, argnums)
        return analyse(jaxpr, boundary)


# ---------------------------------------------------------------- reports


class Difference(Frozen):
    """What `diff` found: `equal` (the same program up to variable names), `text` (the
    unified diff `jaxprtool diff` prints, "" when equal) and `renamed` (a's name, b's name)
    for each variable the alignment pairs under another name (`diff --renames`)."""

    __slots__ = ("equal", "text", "renamed")
    equal: bool
    text: str
    renamed: tuple[tuple[str, str], ...]

    def __init__(self, equal: bool, text: str, renamed: tuple[tuple[str, str], ...]) -> None:
        set_field(self, "equal", equal)
        set_field(self, "text", text)
        set_field(self, "renamed", renamed)

    def __repr__(self) -> str:
        changed = sum(line[:1] in "+-" for line in self.text.splitlines()[2:])
        what = "equal" if self.equal else f"{changed} changed lines"
        return f"<Difference: {what}, {len(self.renamed)} renamed>"


def diff(a: Program | Jaxpr, b: Program | Jaxpr, *, context: int = 2) -> Difference:
    """A semantic diff of two programs, ignoring variable names, as `jaxprtool diff`
    (`context`: its `-U`, lines of context)."""
    from .ui.diff import rename_map, semantic_diff

    pa, pb = _program(a), _program(b)
    text = semantic_diff(pa.jaxpr, pb.jaxpr, pa.path, pb.path, context=context)
    return Difference(text is None, text or "", tuple(rename_map(pa.jaxpr, pb.jaxpr)))


def stats(program: Program | Jaxpr) -> dict:
    """Equation counts by primitive, nesting depth, FLOP and byte estimates, as `jaxprtool
    stats --json` prints them: {"equations", "by_primitive", "depth", "inputs", "outputs",
    "constvars", "residuals", "residual_bytes", "flops", "bytes", "bytes_in", "bytes_out",
    "while_loops"} (the definitions: `jaxprtool stats --help`)."""
    from .ui.stats import stats as compute

    return compute(_program(program).jaxpr)


# ---------------------------------------------------------------- through JAX


def xla_memory(
    program: Program | Jaxpr,
    *,
    of: str = "program",
    argnums: Sequence[int] | None = None,
    device: str = "cpu",
) -> dict:
    """XLA's figures for the compiled program (or its `of` transformation) on `device`, as
    `jaxprtool memory` prints them: {"device", "temp_bytes", "argument_bytes",
    "output_bytes", "alias_bytes", "devices", "per_device"}."""
    from .ad.forms import FORMS, transformed
    from .backend.memory_analysis import xla_figures
    from .jax_required import require_jax

    if of not in FORMS:
        raise JaxprError(f"memory of: expected one of {', '.join(FORMS)}, got {of!r}")
    require_jax()
    p = _program(program)
    with _located(p):
        jaxpr, _ = transformed(p.jaxpr, of, argnums)
        return xla_figures(jaxpr, device, {})


def to_stablehlo(program: Program | Jaxpr, device: str = "cpu") -> str:
    """The StableHLO module JAX lowers the program to for `device` ("cpu", "gpu", "tpu"; no
    such device needed; "auto": JAX's default backend), as `jaxprtool compile --emit
    stablehlo` prints it."""
    from . import backend
    from .backend.lowering import lower
    from .consts_order import number_constants
    from .jax_required import require_jax

    require_jax()
    p = _program(program)
    with _located(p):
        j = number_constants(p.jaxpr).program
        backend.check_runnable(j)
        with backend.x64_scope(j):
            return lower(j, "stablehlo", device, {}, False)[0]


def run(
    program: Program | Jaxpr,
    *args,
    consts: Sequence = (),
    device: str = "cpu",
    matmul_precision: str | None = None,
) -> list:
    """The program's outputs (numpy arrays) on `args` (arrays of the inputs' types) and
    `consts` (one per constvar, nested bodies' after the program's: `run --consts`
    order), compiled by XLA on `device` ("cpu", "gpu", "tpu", or "auto" for JAX's default
    backend), as `jaxprtool run`; `matmul_precision` ("default", "high", "highest") runs
    products whose text gives no precision as `jax.default_matmul_precision` would have
    traced them (`run --matmul-precision`)."""
    from . import backend
    from .backend.precision import matmul_precision as precision_scope
    from .consts_order import number_constants
    from .jax_required import require_jax

    require_jax()
    p = _program(program)
    with _located(p):
        j = number_constants(p.jaxpr).program
        backend.check_runnable(j)
        args, consts, dims = _arrays(j, args, consts)
        with precision_scope(matmul_precision):
            return backend.evaluate(j, args, consts, device=device, dims=dims)


def _arrays(j: Jaxpr, args: Sequence, consts: Sequence) -> tuple[list, list, dict]:
    """`args` and `consts` checked against the program's inputs and constants (the
    program's own constvars, or every constvar, its nested bodies' after its own), and the
    sizes of the symbolic dimensions they bind."""
    from .backend.consts import all_constvars
    from .run_inputs import bind_dims, check_arrays

    if len(args) != len(j.invars):
        raise ProgramError(f"expected {len(j.invars)} arguments, got {len(args)}", "inputs")
    every = all_constvars(j)
    cvars = every if consts and len(consts) == len(every) else list(j.constvars)
    if len(consts) != len(cvars):
        raise ProgramError(f"expected {len(cvars)} constants, got {len(consts)}", "inputs")
    dims = bind_dims(j.invars, args, {})
    args = check_arrays(j.invars, args, dims, "argument")
    return args, check_arrays(cvars, consts, dims, "constant"), dims


def check_grad(
    program: Program | Jaxpr,
    *args,
    consts: Sequence = (),
    seed: int = 0,
    order: int = 1,
    modes: Sequence[str] = ("fwd", "rev"),
    argnums: Sequence[int] | None = None,
    tol: float | None = None,
    dot_tol: float | None = None,
    eps: float | None = None,
    custom_rules: str = "default",
    device: str = "cpu",
    matmul_precision: str | None = None,
) -> list:
    """The tool's jvp and vjp of the program checked against finite differences, as
    `jaxprtool check-grad`: a list of `jaxprtool.ui.checkgrad.Check`s (`.name`,
    `.program`, `.error`, `.tolerance`, `.passed`, `.verdict`), the table's rows.  At `args`
    (none: random inputs from `seed`, as the command's default) and `consts` (none, where
    the program has constants: random ones, with a JaxprWarning); `tol`, `dot_tol`, `eps`:
    None for JAX's defaults for the program's dtype.  `device`, `matmul_precision`: as the
    command's `--device` and `--matmul-precision` (on a TPU "highest" unless given; the
    finite differences run on the CPU).  A failed check is data, not an exception; a
    program the tool cannot differentiate raises."""
    import os

    from .ad.invocation import entered, for_call
    from .backend import sharding as backend
    from .backend.runner import consts_runner
    from .consts_order import for_ad
    from .jax_required import require_jax
    from .shardings import axis_sizes_of
    from .ui.checkgrad import check_grad as run_checks

    mode_set = set(modes)
    if not mode_set or not mode_set <= {"fwd", "rev"}:
        raise JaxprError(f"modes must name fwd and/or rev, got {sorted(mode_set)}")
    require_jax()
    p = _program(program)
    with _located(p), entered(for_call(custom_rules)):
        j = for_ad(p.jaxpr)
        args, consts = _point(j, args, consts, seed)
        with _on_device(device, matmul_precision), axis_sizes_of(j, backend.CONFIG.mesh):
            return run_checks(
                j,
                args,
                consts_runner(consts),
                seed=seed,
                order=order,
                modes=mode_set,
                label=os.path.basename(p.path),
                argnums=argnums,
                tolerances={"tol": tol, "dot_tol": dot_tol, "eps": eps},
            )


def explain(
    program: Program | Jaxpr,
    *args,
    consts: Sequence = (),
    mode: str | None = None,
    argnums: Sequence[int] | None = None,
    seed: int = 0,
    custom_rules: str = "default",
    device: str = "cpu",
    matmul_precision: str | None = None,
):
    """The walk `jaxprtool explain` shows, as data: a
    `jaxprtool.ui.explain.ExplainData` with the forward steps (`.forward`), the residuals,
    the reverse steps (`.reverse`), the program built (`.program_text`), the derivative
    from running it (`.derivative`: (label, array) pairs; `.gradient`: the arrays) and its
    checks against finite differences (`.checks`, `.passed`).  `mode`: "jvp", "vjp" or
    "grad" (default: grad for one scalar float output, else vjp); `args`, `consts` and
    `seed`, `device` and `matmul_precision` as for `check_grad`.  A walk that stops (a
    missing rule) is data too: `.error` and `.stopped_in` (the stage)."""
    from .ad.invocation import entered, for_call
    from .backend import sharding as backend
    from .consts_order import for_ad, refuse_kept_consts
    from .jax_required import require_jax
    from .shardings import axis_sizes_of
    from .ui.explain import explain_data

    require_jax()
    p = _program(program)
    with _located(p), entered(for_call(custom_rules)):
        j = for_ad(p.jaxpr)
        refuse_kept_consts(p.jaxpr, j)
        args, consts = _point(j, args, consts, seed)
        with _on_device(device, matmul_precision), axis_sizes_of(j, backend.CONFIG.mesh):
            return explain_data(
                j, args, mode, argnums, seed=seed, consts=consts, label=p.path, style=p.style
            )


@contextmanager
def _on_device(device: str, matmul_precision: str | None) -> Iterator[None]:
    """The derivatives of `check_grad` and `explain` on `device` (a missing one: a
    JaxprError naming what JAX found), its products at `matmul_precision`: "highest" on a
    TPU unless given, as the commands."""
    from .backend import get_device, sharding
    from .backend.precision import derivative_precision
    from .backend.precision import matmul_precision as precision_scope

    platform = get_device(device).platform
    with sharding.configured(sharding.RunConfig(platform=platform)):
        with precision_scope(derivative_precision(matmul_precision, platform)):
            yield


def _point(j: Jaxpr, args: Sequence, consts: Sequence, seed: int) -> tuple[list, list]:
    """The arguments and constants `check_grad` and `explain` run at: the given ones, checked
    against the program's types, or random ones from `seed`, as the commands' `--random`."""
    from .backend.consts import all_constvars
    from .run_inputs import gather_inputs

    if not args or (not consts and all_constvars(j)):
        random_args, random_consts, _ = gather_inputs(j, None, None, seed, None, {})
        if not consts and random_consts:  # as the commands warn (`warn_invented_consts`)
            _warn(
                JaxprError(
                    f"the program's constants ({len(random_consts)}) have no values in the "
                    f"text and get random ones (seed {seed}), which can break what it relies "
                    "on: pass consts="
                )
            )
        args, consts = args or random_args, consts or random_consts
    return _arrays(j, args, consts)[:2]
