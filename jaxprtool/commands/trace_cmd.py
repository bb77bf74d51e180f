"""`jaxprtool trace MODULE:FUNCTION`: JAX's jaxpr of a Python function, with the traced
rules of its custom_jvp/custom_vjp calls and, on request, the values of its constants in
`run --consts` order."""

from __future__ import annotations

import functools
import io
import re
import sys

import click

from ..cli import argument, command, guarded, option
from ..core import JaxprError, np_dtype, short_dtype_name
from ..io import UsageError, write_output
from ..jax_required import require_jax
from ..lazy import np
from ..outputs import refuse_overlaps
from ..run_inputs import load_npz, npz_list
from ..text.parser.diagnostics import MAX_DIM
from .common import FILE_ARG, OUT_ARG
from .run_options import device_options

#: a type: dtype and comma-separated dimensions (`f32[3 4]`, `f32[3,,4]` are not types)
_SPEC = re.compile(r"^\s*([A-Za-z0-9_]+)\[\s*((?:[0-9]+\s*,\s*)*[0-9]*)\s*\]\s*$")
#: iree-run-module's spelling, which `run --input` reads too: 3x4xf32, f32 (a scalar)
_IREE_SPEC = re.compile(r"^\s*((?:[0-9]+x)*)([A-Za-z][A-Za-z0-9_]*)\s*$")


def parse_spec(spec: str):
    import jax

    m = _SPEC.match(spec)
    iree = None if m else _IREE_SPEC.match(spec)
    if iree:
        dims = ",".join(d for d in iree.group(1).split("x") if d)
        m = _SPEC.match(f"{iree.group(2)}[{dims}]")
    if not m:
        raise UsageError(
            f"bad --arg '{_shown(spec)}': expected a type such as f32[3,4] (or 3x4xf32) or i32[]"
        )
    try:
        dt = np_dtype(m.group(1)) if m.group(1) != "float32" else np.dtype("float32")
    except KeyError:
        try:
            dt = np_dtype(short_dtype_name(m.group(1)))
        except KeyError:
            raise UsageError(
                f"bad --arg '{_shown(spec)}': unknown dtype '{_shown(m.group(1))}'"
            ) from None
    dims = [x.strip() for x in m.group(2).split(",")] if m.group(2).strip() else []
    if any(not d for d in dims):
        raise UsageError(f"bad --arg '{_shown(spec)}': an empty dimension")
    if any(len(d.lstrip("0")) > 19 or int(d) > MAX_DIM for d in dims):
        raise UsageError(f"bad --arg '{_shown(spec)}': a dimension is larger than {MAX_DIM}")
    return jax.ShapeDtypeStruct(tuple(int(d) for d in dims), dt)


def _shown(spec: str) -> str:
    """A spec as a message quotes it (a huge one cut)."""
    return spec if len(spec) <= 60 else spec[:60] + "..."


@command()
@argument("target", metavar="MODULE:FUNCTION")
@option(
    "--arg",
    "specs",
    multiple=True,
    metavar="TYPE",
    help="An argument type, e.g. 'f32[3,4]' (repeat).",
)
@option(
    "--args",
    "args_npz",
    metavar="IN.npz",
    type=FILE_ARG,
    help="Example arguments (arg0, arg1, ...).",
)
@option(
    "--kw",
    "kwargs",
    multiple=True,
    metavar="NAME=JSON",
    help="A static keyword argument, its value in JSON (repeat): --kw n=3 --kw mode='\"fast\"'.",
)
@option("--x64", is_flag=True, help="Trace with 64-bit types (jax_enable_x64).")
@option(
    "-o",
    "--output",
    metavar="OUT.jaxpr",
    type=OUT_ARG,
    help="Write here (default: standard output).",
)
@option(
    "--consts-out",
    "consts_out",
    metavar="C.npz",
    type=OUT_ARG,
    help="Save the values of the program's constants, nested jaxprs' included "
    "(const0, const1, ...; read back by run --consts).",
)
@guarded
@device_options(
    precision=False,
    help="Where the function runs while it is traced (its constants are computed there).",
)
def trace(target, specs, args_npz, kwargs, x64, output, consts_out, device):
    """Import MODULE (from the current folder, or a file: path/to/mod.py) and print the
    jaxpr of FUNCTION.  This runs the module's code: trace only what you trust.

    \b
    Example:
      jaxprtool trace model:loss --arg 'f32[8,4]' --arg 'f32[8]' > loss.jaxpr
      jaxprtool trace models/mlp.py:loss --arg 8x4xf32 --kw depth=3 --x64
      jaxprtool trace model:loss --arg 'f32[8,4]' --arg 'f32[8]' --consts-out c.npz -o loss.jaxpr
    """

    module, sep, func = target.partition(":")
    if not sep or not module or not func:
        raise UsageError(f"bad target '{target}': expected MODULE:FUNCTION")
    if specs and args_npz:
        raise UsageError("give either --arg types or --args IN.npz, not both")
    refuse_overlaps(click.get_current_context(silent=True), _module_files(module))
    require_jax()
    import jax

    if args_npz:
        args = npz_list(load_npz(args_npz, "arguments"), "arg", args_npz)
    else:
        args = [parse_spec(s) for s in specs]
    import contextlib

    wide = x64 or any(
        np.dtype(a.dtype).name in ("float64", "int64", "uint64", "complex128") for a in args
    )
    scope = jax.enable_x64(True) if wide else contextlib.nullcontext()
    static = _static_kwargs(kwargs)
    from ..backend import get_device

    on = jax.default_device(get_device(device))
    with contextlib.redirect_stdout(sys.stderr):  # the user's prints: never into the jaxpr
        mod = _user_module(module)
    fn = mod
    for part in func.split("."):
        if not hasattr(fn, part):
            raise JaxprError(f"module '{module}' has no attribute '{func}'")
        fn = getattr(fn, part)
    if not callable(fn):
        raise JaxprError(f"'{target}' is not callable")
    try:
        with scope, on, contextlib.redirect_stdout(sys.stderr):
            j = jax.make_jaxpr(functools.partial(fn, **static) if static else fn)(*args)
    except Exception as e:  # noqa: BLE001 - the user's function failed to trace
        raise JaxprError(f"tracing '{target}' failed: {type(e).__name__}: {e}") from None
    text, ours, rules = _with_custom_rules(j, target)
    if consts_out is not None:
        values = _const_values(j, ours, rules, text, target)
        buf = io.BytesIO()
        np.savez(buf, **{f"const{i}": np.asarray(v) for i, v in enumerate(values)})
        write_output(buf.getvalue(), consts_out)
    write_output(text + "\n", output)


#: the prefix of the name a user's file runs under (`sys.modules`): never its own name, which
#: would replace a module of that name for the whole process (a user's `math.py`, `os.py`,
#: `threading.py` or `numpy.py` broke the tool itself)
PRIVATE_PREFIX = "_jaxprtool_user_"


def _module_files(module: str) -> list[tuple[str, str]]:
    """The source files MODULE names, as (name, path) inputs: never an output's."""
    import os

    if module.endswith(".py") or os.sep in module:
        return [("MODULE", module)]
    base = os.path.join(*module.split("."))
    return [("MODULE", p) for p in (base + ".py", os.path.join(base, "__init__.py"))]


def _user_module(module: str):
    """The user's module: a file (`path/to/mod.py`), run under a private name
    (`PRIVATE_PREFIX`), or a module importable from the current folder.  Its prints go to
    standard error (the caller's `redirect_stdout`): standard output is the jaxpr."""
    import importlib
    import importlib.util
    import os

    if module.endswith(".py") or os.sep in module:
        path = os.path.abspath(module)
        if not os.path.isfile(path):
            raise JaxprError(f"cannot import '{module}': no such file")
        name = PRIVATE_PREFIX + os.path.splitext(os.path.basename(path))[0]
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        try:
            spec.loader.exec_module(mod)  # the user's own code, asked for by `trace`
        except Exception as e:  # noqa: BLE001 - the module failed: say so, with its error
            sys.modules.pop(name, None)
            raise JaxprError(f"cannot import '{module}': {type(e).__name__}: {e}") from None
        return mod
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        mod = importlib.import_module(module)
    except ImportError as e:
        raise JaxprError(f"cannot import module '{module}': {e}") from None
    own = os.path.join(cwd, *module.split(".")) + ".py"
    found = getattr(mod, "__file__", None)
    if os.path.isfile(own) and (found is None or not os.path.samefile(found, own)):
        raise JaxprError(  # (`math`: Python's, imported before the current folder is looked at)
            f"module '{module}' is not {own}: the name is taken by "
            f"{found or 'a built-in module'}; give the file: "
            f"trace {os.path.relpath(own)}:FUNCTION"
        )
    return mod


def _static_kwargs(specs) -> dict:
    """`--kw NAME=JSON` values (JSON, never Python: nothing of the command line is run)."""
    import json

    out = {}
    for spec in specs:
        name, eq, text = spec.partition("=")
        if not eq or not name.strip().isidentifier():
            raise UsageError(f"bad --kw '{spec}': expected NAME=JSON, e.g. --kw n=3")
        try:
            out[name.strip()] = json.loads(text)
        except json.JSONDecodeError as e:
            raise UsageError(f"bad --kw '{spec}': the value is not JSON ({e.msg})") from None
    return out


def _with_custom_rules(closed, target: str):
    """JAX's printout of `closed`; when it has custom_jvp/custom_vjp calls, the tool's
    printout of the same program with each call's traced rules added
    (`backend/custom_rules.py`), so that the AD commands differentiate as JAX does.
    Returns (text, the program the text was printed from, the rules' constants)."""
    from ..core import all_eqns
    from ..record import prim as record_of
    from ..text.parser import parse

    text = str(closed)
    parsed = parse(text, f"<trace {target}>")
    if not any(record_of(e.prim).traced_rules for e in all_eqns(parsed.jaxpr)):
        return text, parsed.jaxpr, {}
    from ..backend.custom_rules import annotate
    from ..io import warn
    from ..text.printer import print_jaxpr
    from ..text.style import detect_style

    rules = annotate(closed, parsed.jaxpr, lambda msg, eqn: warn(msg, eqn.loc))
    return print_jaxpr(parsed.jaxpr, detect_style(parsed.jaxpr)), parsed.jaxpr, rules


def _const_values(closed, ours, rules: list, text: str, target: str) -> list:
    """The values of the constants of `ours` as `run --consts` numbers them
    (`consts_order.number_constants`), each the value of the constvar of `ours` it stands
    for: the program's own (`closed.consts`), a nested jaxpr's (read off JAX's matching
    nested jaxpr), a recorded custom rule's (`rules`: JAX's and the tool's jaxpr of each)
    or one nested in a rule."""
    from ..consts_order import number_constants
    from ..text.parser import parse

    values: dict[int, list] = {id(ours): list(getattr(closed, "consts", ()))}
    seen: set[int] = set()
    _match_nested(getattr(closed, "jaxpr", closed), ours, values, seen)
    for live, mine in rules:
        values.setdefault(id(mine), list(getattr(live, "consts", ())))
        _match_nested(getattr(live, "jaxpr", live), mine, values, seen)
    by_var, lacking = _values_by_var(ours, values)
    numbered = number_constants(ours)
    out = []
    for v in numbered.constvars:
        source = numbered.sources.get(id(v), v)
        if id(source) not in by_var:
            eqn = lacking[id(source)]
            raise JaxprError(
                f"cannot save the constants of the jaxpr nested in '{eqn.prim}': no values "
                "for them were found in the traced program",
                eqn.loc,
            )
        out.append(by_var[id(source)])
    reread = number_constants(parse(text, f"<trace {target}>").jaxpr)
    if [str(v.type) for v in reread.constvars] != [str(v.type) for v in numbered.constvars]:
        raise JaxprError("internal: the printed program's constants differ from the traced ones")
    return out


def _values_by_var(ours, values: dict) -> tuple[dict, dict]:
    """The value of each constvar of `ours` and of its nested jaxprs, by `id` of the
    constvar (from `values`, by `id` of the jaxpr), and the equation using each nested
    jaxpr whose values are missing, by `id` of its constvars."""
    from ..core import all_eqns, eqn_subjaxprs

    if len(values[id(ours)]) != len(ours.constvars):
        raise JaxprError("internal: the printed program's constants differ from the traced ones")
    by_var = {id(v): x for v, x in zip(ours.constvars, values[id(ours)])}
    lacking: dict[int, object] = {}
    for e in all_eqns(ours):
        for sub in eqn_subjaxprs(e):
            got = values.get(id(sub))
            if got is not None and len(got) == len(sub.constvars):
                by_var.update((id(v), x) for v, x in zip(sub.constvars, got))
            else:
                lacking.update((id(v), e) for v in sub.constvars)
    return by_var, lacking


def _match_nested(live, mine, values: dict, seen: set) -> None:
    """Walk JAX's jaxpr `live` and the tool's parse `mine` of its printout together,
    recording each nested jaxpr's constants (JAX 0.12 keeps them on the jaxpr,
    older versions on a ClosedJaxpr) by `id` of the tool's jaxpr."""
    from ..core import subjaxprs

    if id(mine) in seen:
        return
    seen.add(id(mine))
    if len(live.eqns) != len(mine.eqns):
        raise JaxprError("internal: the printed program does not match the traced one")
    for le, me in zip(live.eqns, mine.eqns):
        for k in sorted(le.params):
            theirs = list(_live_subjaxprs(le.params[k]))
            ours = subjaxprs(me.params.get(k))
            if len(theirs) != len(ours):
                raise JaxprError(
                    f"internal: '{me.prim}' parameter {k}: the printed jaxprs do not match",
                    me.loc,
                )
            for (lj, consts), mj in zip(theirs, ours):
                if mj.constvars and id(mj) not in values:
                    values[id(mj)] = list(consts)
                _match_nested(lj, mj, values, seen)


def _live_subjaxprs(v):
    """(jaxpr, consts) for each JAX jaxpr inside a parameter value."""
    if hasattr(v, "eqns"):
        yield v, list(getattr(v, "consts", ()) or ())
    elif hasattr(v, "jaxpr") and hasattr(v.jaxpr, "eqns"):
        yield v.jaxpr, list(v.consts)
    elif isinstance(v, (tuple, list)):
        for x in v:
            yield from _live_subjaxprs(x)
