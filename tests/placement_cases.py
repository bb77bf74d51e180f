"""Issue 25's oracle, run as a script in a fresh process with 4 host CPU devices
(`tests/test_unplaced_inputs.py`): for each case, what JAX does with numpy inputs (the
shardings `jax.jit(f).lower(*args).compile()` chose for them, the outputs' `.sharding`, the
values; the op-by-op call for the eager cases, `jax.set_mesh` for a --mesh run) and what the
tool's `run --show-sharding` (and `compile --emit stablehlo`) says of the program JAX printed.

    python tests/placement_cases.py OUT_DIR      (writes OUT_DIR/result.json and .npz files)

Importing it sets nothing up (the test collects `CASES` from it); JAX's device count is set,
and the mesh made, by the script alone.
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from click.testing import CliRunner
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jaxprtool.backend.sharding import is_single_device
from jaxprtool.cli import main

#: the 4-device mesh 'x' (made by the script)
MESH = None


def on(*spec):
    return NamedSharding(MESH, P(*spec))


def wsc(x, *spec):
    return jax.lax.with_sharding_constraint(x, on(*spec))


def smap(body, spec, out):
    return jax.shard_map(body, mesh=MESH, in_specs=spec, out_specs=out)


def rows(a):
    """The input's first use is a row-sharded constraint."""
    return wsc(a, "x") + 1


def later(a):
    """A column constraint on a derived value, and an output computed from the input alone
    (the tool gave it P() when it replicated the input; XLA propagates the columns to it)."""
    return wsc(jnp.sin(a) * 2, None, "x"), a * 3


def replicated_reader_first(a):
    """A P() shard_map reads the input before a P('x') one: XLA shards it over x."""
    t = smap(lambda a: a * 3, P(), P())(a)
    s = smap(lambda a: jnp.sin(a) @ a.T, P("x"), P("x"))(a)
    return t, s


def psum_plus(a, b):
    """A sharded shard_map operand, and an operand nothing constrains (replicated by XLA)."""
    return smap(lambda a: jax.lax.psum(a, "x"), P("x"), P())(a) + b


def unused(a, b):
    return wsc(a, "x") * 2


def plain(a):
    return a * 2


X = np.arange(32, dtype=np.float32).reshape(8, 4) / 7
SQ = np.linspace(-1, 1, 64, dtype=np.float32).reshape(8, 8)

#: name -> f, args, how the text is printed (plain: make_jaxpr(f); jit: of jax.jit(f); raw:
#: that with custom_pp_eqn_rules=False, `in_shardings=(UnspecifiedValue,)`), jax.jit's
#: in_shardings (specs over the mesh, or None), extra `run` options, the oracle (jit, eager:
#: the op-by-op call, set_mesh: jit under jax.set_mesh) and the inputs the text places
CASES = {
    "rows": (rows, [X], "plain", None, [], "jit", ()),
    "later": (later, [X], "plain", None, [], "jit", ()),
    "later_top_level_jit": (later, [X], "jit", None, [], "jit", ()),
    "later_unspecified_printed": (later, [X], "raw", None, [], "jit", ()),
    "later_repeat": (later, [X], "plain", None, ["--repeat", "2"], "jit", ()),
    "later_eager": (later, [X], "plain", None, ["--eager"], "eager", ()),
    "replicated_reader_first": (replicated_reader_first, [SQ], "plain", None, [], "jit", ()),
    "psum_plus": (psum_plus, [X, X[:2]], "plain", None, [], "jit", ()),
    "psum_plus_eager": (psum_plus, [X, X[:2]], "plain", None, ["--eager"], "eager", ()),
    "in_shardings_kept": (rows, [X], "jit", [(None, "x")], [], "jit", (0,)),
    "unused": (unused, [X, X], "plain", None, [], "jit", ()),
    "mesh_option_only": (plain, [X], "plain", None, ["--mesh", "x=4"], "set_mesh", (0,)),
}


def shown(sharding) -> str:
    """How `--show-sharding` writes a sharding JAX gives (a compiled input's
    `GSPMDSharding` by the spec of the mesh it is equivalent to)."""
    if sharding is None:
        return "unused (jit drops it)"
    if is_single_device(sharding):
        (d,) = sharding.device_set
        return f"single device {d.platform}:{d.id}"
    return f"{spec_of(sharding)} over mesh x=4 (4 devices)"


def spec_of(sharding) -> str:
    if isinstance(sharding, NamedSharding):
        return str(sharding.spec)
    ndim = 2
    for cand in [P()] + [P(*([None] * d), "x") for d in range(ndim)]:
        if sharding.is_equivalent_to(NamedSharding(MESH, cand), ndim):
            return str(cand)
    raise AssertionError(f"no spec over x is equivalent to {sharding}")


def main_arg_shardings(stablehlo: str) -> list[str]:
    """The `sdy.sharding` of each argument of `@main` ('' for none)."""
    (sig,) = re.findall(r"func\.func public @main\((.*?)\) ->", stablehlo)
    return [
        (re.search(r"sdy\.sharding = (#sdy\.sharding<[^>]*>)", a) or [""])[0]
        for a in re.split(r", (?=%arg)", sig)
    ]


def text_of(f, args, how, kw) -> str:
    if how == "plain":
        return str(jax.make_jaxpr(f)(*args))
    closed = jax.make_jaxpr(jax.jit(f, **kw))(*args)
    return closed.pretty_print(custom_pp_eqn_rules=False) if how == "raw" else str(closed)


def oracle(f, args, how, kw):
    """(input shardings, outputs) as JAX has them."""
    if how == "eager":
        xs = [jnp.asarray(a) for a in args]
        return [x.sharding for x in xs], list(jax.tree.leaves(f(*xs)))
    scope = jax.set_mesh(MESH) if how == "set_mesh" else contextlib.nullcontext()
    with scope:
        fn = jax.jit(f, **kw)
        compiled = fn.lower(*args).compile()
        return list(compiled.input_shardings[0]), list(jax.tree.leaves(fn(*args)))


def run_case(out: Path, name: str) -> dict:
    f, args, how, in_specs, options, oracle_kind, placed = CASES[name]
    kw = {} if in_specs is None else {"in_shardings": tuple(on(*s) for s in in_specs)}
    prog = out / f"{name}.jaxpr"
    prog.write_text(text_of(f, args, how, kw))
    np.savez(out / f"{name}_in.npz", **{f"arg{i}": a for i, a in enumerate(args)})
    ins, outs = oracle(f, args, oracle_kind, kw)
    np.savez(out / f"{name}_jax.npz", **{f"out{i}": np.asarray(o) for i, o in enumerate(outs)})
    argv = ["run", str(prog), "--args", str(out / f"{name}_in.npz"), "--show-sharding"]
    r = CliRunner().invoke(main, argv + ["-o", str(out / f"{name}_tool.npz")] + options)
    lowered = jax.jit(f, **kw).lower(*args).as_text() if oracle_kind == "jit" else None
    c = CliRunner().invoke(main, ["compile", str(prog), "--emit", "stablehlo"])
    return {
        "inputs": [shown(s) for s in ins],
        "placed": list(placed),
        "chosen_by_xla": oracle_kind == "jit",
        "outputs": [shown(o.sharding) for o in outs],
        "tool": r.output,
        "tool_exit": r.exit_code,
        "jax_arg_shardings": main_arg_shardings(lowered) if lowered else None,
        "tool_arg_shardings": main_arg_shardings(c.output) if c.exit_code == 0 else c.output,
    }


if __name__ == "__main__":
    jax.config.update("jax_num_cpu_devices", 4)
    MESH = jax.make_mesh((4,), ("x",), axis_types=(jax.sharding.AxisType.Auto,))
    out = Path(sys.argv[1])
    result = {name: run_case(out, name) for name in CASES}
    (out / "result.json").write_text(json.dumps(result, indent=1))
