"""ragged_all_to_all (issue 25): the shape rule against JAX's abstract eval, fmt/check on the
text JAX prints, the JVP, transpose, vjp and vmap against the programs JAX traces for them
(JAX traces ragged_all_to_all on CPU though it cannot run it), the numbers of the transpose
(dot-product test) and of vmap (against a loop over the examples) from a NumPy model of the
exchange run over the devices in lock step, and `run` on CPU refused located (XLA:CPU has no
ragged-all-to-all, so JAX cannot run it here either)."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

jax = pytest.importorskip("jax")
from click.testing import CliRunner  # noqa: E402
from jax import lax  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

from jaxprtool.ad.api import jvp_jaxpr, transpose_jaxpr, vjp_jaxpr  # noqa: E402
from jaxprtool.ad.batching import vmap_jaxpr  # noqa: E402
from jaxprtool.backend.prims import installed_version  # noqa: E402
from jaxprtool.check import check  # noqa: E402
from jaxprtool.cli import main  # noqa: E402
from jaxprtool.core import JaxprError, eqn_subjaxprs  # noqa: E402
from jaxprtool.families.collectives import specs_of  # noqa: E402
from jaxprtool.text.parser import parse  # noqa: E402
from jaxprtool.text.printer import print_jaxpr  # noqa: E402
from jaxprtool.ui.diff import semantic_diff  # noqa: E402

pytestmark = pytest.mark.skipif(
    len(jax.devices("cpu")) < 4, reason="needs 4 host CPU devices (conftest sets XLA_FLAGS)"
)

#: JAX 0.12.1 changed ragged_all_to_all's rules: its transpose adds the mask's +1s (right
#: after an empty block) and compares the sum with 0; its batcher takes unbatched index vectors
JAX_0_12_1 = installed_version() >= (0, 12, 1)

MESH = jax.make_mesh((4,), ("x",), axis_types=(jax.sharding.AxisType.Auto,))
F32 = np.zeros((4, 8, 2), np.float32)
I32 = np.zeros((4, 4), np.int32)


def exchange(op, out, io, ss, oo, rs):
    """One ragged_all_to_all per device of a 4-device mesh."""

    def body(op, out, io, ss, oo, rs):
        r = lax.ragged_all_to_all(op[0], out[0], io[0], ss[0], oo[0], rs[0], axis_name="x")
        return r[None]

    return jax.shard_map(body, mesh=MESH, in_specs=P("x"), out_specs=P("x"))(
        op, out, io, ss, oo, rs
    )


def traced(fn, *args) -> str:
    return str(jax.make_jaxpr(fn)(*args)) + "\n"


@pytest.fixture(scope="module")
def text():
    return traced(exchange, F32, F32, I32, I32, I32, I32)


def errors(j):
    return [str(d) for d in check(j, "<t>") if d.kind == "error"]


def test_check_and_fmt_on_the_text_jax_printed(text, tmp_path):
    f = tmp_path / "r.jaxpr"
    f.write_text(text)
    res = CliRunner().invoke(main, ["check", str(f)])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(main, ["fmt", str(f)])
    assert res.exit_code == 0 and res.output == text


def test_shape_rule_gives_the_type_of_output():
    """JAX's abstract eval: the result is `output`'s type, whatever the operand's shape."""
    op = np.zeros((4, 5, 3), np.float32)
    out = np.zeros((4, 9, 3), np.float32)
    t = traced(exchange, op, out, I32, I32, I32, I32)
    assert "f32[9,3]{V:x} = ragged_all_to_all" in t  # what JAX inferred
    assert errors(parse(t, "<t>").jaxpr) == []
    wrong = t.replace("f32[9,3]{V:x} = ragged_all_to_all", "f32[5,3]{V:x} = ragged_all_to_all")
    assert any("ragged_all_to_all: result type" in e for e in errors(parse(wrong, "<t>").jaxpr))


@pytest.mark.parametrize("bad", ["dtype", "rank"])
def test_shape_rule_refuses_what_jax_refuses(bad):
    sizes = np.zeros((4, 4), np.float32) if bad == "dtype" else np.zeros((4, 4, 1), np.int32)

    with pytest.raises(ValueError, match="send_sizes must be"):  # JAX refuses
        jax.make_jaxpr(exchange)(F32, F32, I32, sizes, I32, I32)
    good = traced(exchange, F32, F32, I32, I32, I32, I32)
    if bad == "dtype":
        text = good.replace("d:i32[4,4]", "d:f32[4,4]").replace("k:i32[1,4]", "k:f32[1,4]")
        text = text.replace("q:i32[4]{V:x}", "q:f32[4]{V:x}")
        want = "send_sizes must be of integer type"
    else:
        text = good.replace("q:i32[4]{V:x} = squeeze[dimensions=(0,)]", "q:i32[1,4]{V:x} = copy")
        want = "send_sizes must be rank 1"
    assert any(want in e for e in errors(parse(text, "<t>").jaxpr)), errors(
        parse(text, "<t>").jaxpr
    )


def test_jvp_is_the_program_jax_traces(text):
    """Linear in (operand, output): the same exchange on the tangents with the primal offsets
    and sizes, exactly what `jax.jvp` traces."""
    ones = np.ones_like(F32)

    def jvp(op, out, io, ss, oo, rs, t_op, t_out):
        return jax.jvp(lambda a, b: exchange(a, b, io, ss, oo, rs), (op, out), (t_op, t_out))

    want = parse(traced(jvp, F32, F32, I32, I32, I32, I32, ones, ones), "<jax>").jaxpr
    got = jvp_jaxpr(parse(text, "<t>").jaxpr)
    assert errors(got) == []
    assert dataflow(got) == dataflow(want)


def dataflow(j):
    """The shard_map body as (primitive, where each operand comes from) per equation: the
    tool spells broadcast_in_dim's shape/sharding parameters out, JAX's printing elides them."""
    (sm,) = j.eqns
    body = sm.params["jaxpr"]
    where = {v: ("in", k) for k, v in enumerate(body.invars)}
    flow = []
    for n, e in enumerate(body.eqns):
        flow.append((e.prim, tuple(where[a] for a in e.inputs)))
        where.update({v: ("eqn", n, k) for k, v in enumerate(e.outputs)})
    return flow, [where[v] for v in body.outvars], [type(v).__name__ for v in j.invars]


def test_run_on_cpu_is_refused_located(text, tmp_path):
    with pytest.raises(Exception, match="not supported by XLA:CPU"):  # JAX cannot either
        jax.jit(exchange)(F32, F32, I32, I32, I32, I32)
    f = tmp_path / "r.jaxpr"
    f.write_text(text)
    res = CliRunner().invoke(main, ["run", str(f), "--random", "0"])
    assert res.exit_code == 1
    assert f"{f}:13:11: error: cannot run 'ragged_all_to_all' on CPU" in res.output
    assert "Traceback" not in res.output


# ---------------------------------------------------------------- transpose, vjp, vmap

#: per device: 8 rows of operand and of output; 4 slices (one per device) of offsets/sizes
ROWS, DEV = 8, 4
FLAT = np.zeros((DEV * ROWS, 2), np.float32)
IDX = np.zeros((DEV * DEV,), np.int32)


def flat_exchange(check: bool):
    """The exchange as the whole shard_map body (no squeeze around it), `check_vma` given."""

    def f(op, out, io, ss, oo, rs):
        body = lambda *a: lax.ragged_all_to_all(*a, axis_name="x")  # noqa: E731
        return jax.shard_map(body, mesh=MESH, in_specs=P("x"), out_specs=P("x"), check_vma=check)(
            op, out, io, ss, oo, rs
        )

    return f


def tool(fn, *args):
    return parse(traced(fn, *args), "<jax>").jaxpr


def exchange_body(j):
    """The body of the (last) shard_map that holds the exchange, its float inputs (the
    cotangent) first: JAX's transposed body takes the cotangent first, the tool's last."""
    (sm,) = [e for e in j.eqns if e.prim == "shard_map" and has_exchange(e.params["jaxpr"])][-1:]
    body = sm.params["jaxpr"]
    order = sorted(body.invars, key=lambda v: v.type.dtype != "f32")
    return body.replace(invars=tuple(order))


def same(got, want) -> bool:
    """The same program up to variable names (`jaxprtool diff`: `np.int64(1)`, which JAX
    prints for some parameters, is 1); the diff is the assertion's message."""
    d = semantic_diff(got, want, "tool", "jax")
    assert d is None, d
    return True


def has_exchange(j) -> bool:
    return any(e.prim == "ragged_all_to_all" for e in j.eqns)


def count(j) -> int:
    return sum(1 + sum(count(s) for s in eqn_subjaxprs(e)) for e in j.eqns)


def vjp_of(f):
    def g(op, out, io, ss, oo, rs, ct):
        return jax.vjp(lambda a, b: f(a, b, io, ss, oo, rs), op, out)[1](ct)

    return g


def transpose_of(f):
    def g(op, out, io, ss, oo, rs, ct):
        return jax.linear_transpose(lambda a, b: f(a, b, io, ss, oo, rs), op, out)(ct)

    return g


def _jax_rule_adding_starts(
    t, operand, output, input_offsets, send_sizes, output_offsets, recv_sizes, **params
):
    """JAX 0.12.0's `_ragged_all_to_all_transpose` (jax/_src/lax/parallel.py) with its
    `.at[output_offsets_].set(1)` made `.add(1)`, the tool's one departure (see
    `test_jax_mask_is_wrong_after_an_empty_block`); the rest is JAX's code.  JAX 0.12.1's
    adds them too, but compares the sum with 0 (`gt`) where the tool selects on it."""
    from jax._src.interpreters import ad as jad
    from jax._src.lax import control_flow
    from jax._src.lax import lax as jlax
    from jax._src.lax import parallel as jpar

    assert type(t) is not jad.Zero
    zero = jad.zeros_like_aval(operand.aval)
    output_offsets_ = jpar.all_to_all(output_offsets, params["axis_name"], 0, 0, tiled=True)
    input_offsets_ = jpar.all_to_all(input_offsets, params["axis_name"], 0, 0, tiled=True)
    operand_t = jpar.ragged_all_to_all_p.bind(
        t, zero, output_offsets_, recv_sizes, input_offsets_, send_sizes, **params
    )
    mask = control_flow.cumsum(
        jlax.full(t.shape[0], 0, dtype="int32")
        .at[output_offsets_]
        .add(1)
        .at[output_offsets_ + recv_sizes]
        .add(-1)
    )
    mask = jlax.expand_dims(mask, (*range(1, t.ndim),))
    mask = jlax.broadcast_in_dim(mask, shape=t.shape, broadcast_dimensions=tuple(range(t.ndim)))
    output_t = jlax.select(mask, jlax._zeros(t), t)
    return [operand_t, output_t] + [None] * 4


@contextlib.contextmanager
def jax_transpose_rule(rule):
    """JAX with `rule` as ragged_all_to_all's transpose (its trace caches cleared on the way
    in and out: a transpose traced before would be reused)."""
    from jax._src.interpreters import ad as jad
    from jax._src.lax import parallel as jpar

    p = jpar.ragged_all_to_all_p
    saved = jad.primitive_transposes[p]
    jad.primitive_transposes[p] = rule
    jax.clear_caches()
    try:
        yield
    finally:
        jad.primitive_transposes[p] = saved
        jax.clear_caches()


@pytest.mark.parametrize("check", [True, False], ids=["check_vma", "no_check_vma"])
def test_transpose_and_vjp_are_the_programs_jax_traces(check):
    """The transposed exchange, pvary and all, equation for equation as JAX's
    `linear_transpose` and `vjp` trace it with its rule's one `set` an `add`; no more
    equations than JAX's programs.  JAX 0.12.1's own rule adds too (and a `gt`)."""
    f = flat_exchange(check)
    j = tool(f, FLAT, FLAT, IDX, IDX, IDX, IDX)
    got_t = transpose_jaxpr(j, [True, True, False, False, False, False])
    got_v = vjp_jaxpr(j, [0, 1])
    for got, oracle in ((got_t, transpose_of(f)), (got_v, vjp_of(f))):
        jaxs = tool(oracle, FLAT, FLAT, IDX, IDX, IDX, IDX, FLAT)
        with jax_transpose_rule(_jax_rule_adding_starts):
            want = tool(oracle, FLAT, FLAT, IDX, IDX, IDX, IDX, FLAT)
        assert prims(exchange_body(want)).count("scatter-add") == 2
        if not JAX_0_12_1:
            assert prims(exchange_body(jaxs)).count("scatter") == 1  # JAX's own: one set
        else:  # JAX's own adds the starts too, then compares the sum with 0
            own = prims(exchange_body(jaxs))
            assert own.count("scatter-add") == 2 and "scatter" not in own and "gt" in own
        assert errors(got) == []
        assert same(exchange_body(got), exchange_body(want))
        assert count(got) <= count(want)
        if not JAX_0_12_1:
            # as many equations as JAX's own rule emits (its scatter has no combiner body)
            assert len(exchange_body(got).eqns) == len(exchange_body(jaxs).eqns)
        else:  # no more than JAX's own (its `> 0` is a `gt`, and a pvary'd weak 0 with vma)
            assert len(exchange_body(got).eqns) <= len(exchange_body(jaxs).eqns)
            assert count(got) <= count(jaxs)


def prims(j) -> list[str]:
    return [e.prim for e in j.eqns]


def test_transpose_of_the_operand_alone_is_no_longer_than_jax():
    """Only the operand linear (the output a constant): the output's mask is not built."""
    f = flat_exchange(True)

    def g(op, out, io, ss, oo, rs, ct):
        return jax.vjp(lambda a: f(a, out, io, ss, oo, rs), op)[1](ct)

    want = tool(g, FLAT, FLAT, IDX, IDX, IDX, IDX, FLAT)
    got = vjp_jaxpr(tool(f, FLAT, FLAT, IDX, IDX, IDX, IDX), [0])
    assert errors(got) == []
    assert count(got) <= count(want)
    assert "cumsum" not in print_jaxpr(got)


#: JAX before 0.12.1 fails an assertion on an unbatched index vector (its `bdim_at_second`
#: asserts rank 2 before it looks at the batch dimension): those are checked by numbers below,
#: and against JAX 0.12.1's programs in `test_jax_cannot_batch_unbatched_index_vectors`
VMAP_AXES = [(0, 0, 0, 0, 0, 0), (1, None, 1, 0, 1, 0)]


def batched(x, d, n=3):
    return x if d is None else np.zeros(x.shape[:d] + (n,) + x.shape[d:], x.dtype)


@pytest.mark.parametrize("check", [True, False], ids=["check_vma", "no_check_vma"])
@pytest.mark.parametrize(
    "axes", VMAP_AXES, ids=lambda a: "".join("n" if d is None else str(d) for d in a)
)
def test_vmap_is_the_program_jax_traces(check, axes):
    f = flat_exchange(check)
    j = tool(f, FLAT, FLAT, IDX, IDX, IDX, IDX)
    args = [batched(x, d) for x, d in zip((FLAT, FLAT, IDX, IDX, IDX, IDX), axes)]
    want = tool(jax.vmap(f, in_axes=axes), *args)
    got = vmap_jaxpr(j, list(axes), 0, axis_size=3)
    assert errors(got) == []
    assert same(got, want)


#: unbatched index vectors: all four, and two beside two batched ones
UNBATCHED_INDEX_AXES = [(0, 0, None, None, None, None), (1, None, None, 0, None, 1)]


def test_jax_cannot_batch_unbatched_index_vectors():
    """Why LOOP_AXES's unbatched index vectors have no text oracle before JAX 0.12.1: JAX's
    rule asserts.  JAX 0.12.1 batches them: there the tool's vmap is the program JAX traces,
    and the two, interpreted, give the same numbers, those of a loop over the examples."""
    if not JAX_0_12_1:
        axes = (0, 0, None, None, None, None)
        args = [batched(x, d) for x, d in zip((FLAT, FLAT, IDX, IDX, IDX, IDX), axes)]
        with pytest.raises(AssertionError):
            jax.make_jaxpr(jax.vmap(flat_exchange(True), in_axes=axes))(*args)
        return
    rng = np.random.default_rng(3)
    n = 3
    for vma in (True, False):
        f = flat_exchange(vma)
        j = tool(f, FLAT, FLAT, IDX, IDX, IDX, IDX)
        for axes in UNBATCHED_INDEX_AXES:
            shapes = [batched(x, d, n) for x, d in zip((FLAT, FLAT, IDX, IDX, IDX, IDX), axes)]
            want = tool(jax.vmap(f, in_axes=axes), *shapes)
            got = vmap_jaxpr(j, list(axes), 0, axis_size=n)
            assert errors(got) == []
            assert same(got, want)
            examples, args = examples_for(rng, axes, n)
            (jaxs,) = run_program(want, *args)
            (ours,) = run_program(got, *args)
            loop = np.stack([run_program(j, *ex)[0] for ex in examples])
            np.testing.assert_array_equal(jaxs, loop, err_msg=f"JAX's {axes}")
            np.testing.assert_array_equal(ours, jaxs, err_msg=str(axes))


def test_vmap_over_the_exchanged_axis_is_refused_as_jax_does():
    """JAX's batcher raises NotImplementedError when vmap's axis is the exchange's."""
    body = lambda *a: lax.ragged_all_to_all(*a, axis_name="b")  # noqa: E731
    one = [np.zeros((ROWS, 2), np.float32)] * 2 + [np.zeros((DEV,), np.int32)] * 4
    with pytest.raises(NotImplementedError):
        jax.make_jaxpr(jax.vmap(body, axis_name="b"))(*[batched(x, 0, DEV) for x in one])
    text = str(jax.make_jaxpr(body, axis_env=[("b", DEV)])(*one)) + "\n"
    with pytest.raises(JaxprError, match="'ragged_all_to_all' over the vmap axis") as e:
        vmap_jaxpr(parse(text, "<t>").jaxpr, 0, 0, axis_size=DEV, axis_name="b")
    assert e.value.loc is not None and e.value.loc.line == 2


# ---------------------------------------------------------------- numbers: a NumPy model

NP_DTYPES = {"f32": np.float32, "i32": np.int32, "bool": np.bool_}


def model_exchange(operands, outputs, input_offsets, send_sizes, output_offsets, recv_sizes):
    """ragged_all_to_all over all devices at once, per JAX's docstring: device s sends
    operand[input_offsets[i]:][:send_sizes[i]] to device i // (K / devices), which writes it
    at output_offsets[i] (offsets into the receiver's output) over its `output`."""
    n, k = len(operands), len(input_offsets[0])
    per = k // n
    results = [o.copy() for o in outputs]
    for s in range(n):
        for i in range(k):
            size = send_sizes[s][i]
            assert size == recv_sizes[i // per][s * per + i % per]  # JAX's precondition
            chunk = operands[s][input_offsets[s][i] :][:size]
            results[i // per][output_offsets[s][i] :][:size] = chunk
    return results


def model_all_to_all(xs, split_axis, concat_axis, tiled, **_):
    assert tiled and split_axis == concat_axis == 0
    parts = [np.split(x, len(xs)) for x in xs]
    return [np.concatenate([p[d] for p in parts]) for d in range(len(xs))]


def _broadcast_in_dim(out, x, broadcast_dimensions=(), **_):
    shape = [1] * len(out.shape)
    for d, n in zip(broadcast_dimensions, np.shape(x)):
        shape[int(d)] = n
    return np.broadcast_to(np.reshape(x, shape), out.shape)


def _scatter(combine):
    def f(out, base, index, updates, dimension_numbers, **_):
        assert tuple(dimension_numbers.get("inserted_window_dims")) == (0,)
        res = base.copy()
        for i, u in zip(index[:, 0], updates):
            if 0 <= i < len(res):  # FILL_OR_DROP
                res[i] = combine(res[i], u)
        return res

    return f


def _iota(out, dimension, **_):
    shape = [1] * len(out.shape)
    shape[dimension] = out.shape[dimension]
    return np.broadcast_to(np.arange(out.shape[dimension]).reshape(shape), out.shape)


#: one device's numpy for the primitives of the programs under test: `f(out_type, *xs, **params)`
LOCAL = {
    "pvary": lambda out, x, **_: x,
    "broadcast_in_dim": _broadcast_in_dim,
    "convert_element_type": lambda out, x, **_: x,
    "lt": lambda out, x, y: np.less(x, y),
    "gt": lambda out, x, y: np.greater(x, y),
    "add": lambda out, x, y: np.add(x, y),
    "mul": lambda out, x, y: np.multiply(x, y),
    # XLA's select_n clamps `which` (JAX lowers it to a search comparing with the middle)
    "select_n": lambda out, p, *cases: np.choose(
        np.clip(np.asarray(p, int), 0, len(cases) - 1), cases
    ),
    "scatter": _scatter(lambda old, new: new),
    "scatter-add": _scatter(np.add),
    "cumsum": lambda out, x, axis, reverse: np.cumsum(x, axis=axis),
    "transpose": lambda out, x, permutation: np.transpose(x, permutation),
    "iota": _iota,
    "reshape": lambda out, x, new_sizes, **_: np.reshape(x, out.shape),
}


def run_body(body, per_device):
    """Interpret a shard_map body on every device in lock step: per_device[v][d]."""
    env = {id(v): xs for v, xs in zip(body.invars, per_device)}
    n = len(per_device[0])

    def read(x):
        return env[id(x)] if id(x) in env else [np.asarray(x.value, NP_DTYPES[x.type.dtype])] * n

    for e in body.eqns:
        ins = [read(x) for x in e.inputs]
        if e.prim == "ragged_all_to_all":
            outs = model_exchange(*ins)
        elif e.prim == "all_to_all":
            outs = model_all_to_all(*ins, **e.params)
        else:
            (o,) = e.outputs
            t = np.zeros(o.type.shape, NP_DTYPES[o.type.dtype])
            per = list(zip(*ins)) if ins else [()] * n  # iota: no operands
            outs = [LOCAL[e.prim](t, *xs, **e.params).astype(t.dtype) for xs in per]
        (o,) = e.outputs
        env[id(o)] = outs
    return [read(v) for v in body.outvars]


def run_program(j, *args):
    """Interpret a program of shard_maps over P('x')-style specs (one mesh axis)."""
    env = {id(v): a for v, a in zip(j.invars, args)}
    for e in j.eqns:
        assert e.prim == "shard_map", e.prim
        body = e.params["jaxpr"]
        axes = [spec_axis(s) for s in specs_of(e.params, "in", body.invars)]
        shards = [np.split(env[id(x)], DEV, axis=a) for x, a in zip(e.inputs, axes)]
        outs = run_body(body, shards)
        out_axes = [spec_axis(s) for s in specs_of(e.params, "out", body.outvars)]
        for o, xs, a in zip(e.outputs, outs, out_axes):
            env[id(o)] = np.concatenate(xs, axis=a)
    return [env[id(v)] for v in j.outvars]


def spec_axis(spec) -> int:
    return [e == ("x",) for e in spec.entries].index(True)


def ragged_indexes(rng):
    """Offsets and sizes (global, device s's row of each at s) of a valid exchange among
    DEV devices of ROWS rows each: slices of 0 or 1 rows, gaps of 0 or 1 rows between them
    on both sides (output rows no one writes keep `output`)."""
    sizes = rng.integers(0, 2, size=(DEV, DEV))  # sizes[s, d]: s sends to d
    input_offsets = np.cumsum(sizes + rng.integers(0, 2, size=(DEV, DEV)), axis=1) - sizes
    # receiver d lays out the slices of senders 0, 1, ... in order
    at_receiver = np.cumsum(sizes.T + rng.integers(0, 2, size=(DEV, DEV)), axis=1) - sizes.T
    return [a.astype(np.int32).reshape(-1) for a in (input_offsets, sizes, at_receiver.T, sizes.T)]


def dot(a, b) -> float:
    return float(np.vdot(np.asarray(a, np.float64), np.asarray(b, np.float64)))


@pytest.mark.parametrize("check", [True, False], ids=["check_vma", "no_check_vma"])
def test_transpose_and_vjp_pass_the_dot_product_test(check):
    """<w, L v> = <L^T w, v> for L = the exchange in (operand, output), L from the NumPy
    model, L^T the tool's transposed program (and its vjp's cotangents) interpreted with
    the same model for ragged_all_to_all and numpy for the rest, over 4 devices."""
    rng = np.random.default_rng(0)
    j = tool(flat_exchange(check), FLAT, FLAT, IDX, IDX, IDX, IDX)
    lt = transpose_jaxpr(j, [True, True, False, False, False, False])
    vjp = vjp_jaxpr(j, [0, 1])
    for _ in range(3):
        idx = ragged_indexes(rng)
        v_op, v_out, w = (rng.standard_normal(FLAT.shape).astype(np.float32) for _ in range(3))
        (lv,) = run_program(j, v_op, v_out, *idx)
        assert not np.array_equal(lv, v_out)  # something was received
        ct_op, ct_out = run_program(lt, *idx, w)
        assert np.count_nonzero(ct_out == 0) > 0 and np.count_nonzero(ct_out == w) > 0
        np.testing.assert_allclose(dot(w, lv), dot(ct_op, v_op) + dot(ct_out, v_out), rtol=1e-5)
        out, *cts = run_program(vjp, v_op, v_out, *idx, w)
        np.testing.assert_array_equal(out, lv)
        for got, want in zip(cts, (ct_op, ct_out)):
            np.testing.assert_array_equal(got, want)


#: batch dimensions of (operand, output, input_offsets, send_sizes, output_offsets,
#: recv_sizes): unbatched index vectors too, which JAX's own rule cannot take
LOOP_AXES = VMAP_AXES + [(0, 0, None, None, None, None), (None, 1, 0, 0, 1, 0)]


def examples_for(rng, axes, n):
    """n random examples of a valid exchange, and vmap's arguments for `axes` stacking them
    (an unbatched operand: example 0's, made every example's)."""
    examples = [
        [rng.standard_normal(FLAT.shape).astype(np.float32) for _ in range(2)] + ragged_indexes(rng)
        for _ in range(n)
    ]
    for k, d in enumerate(axes):
        if d is None:
            for ex in examples:
                ex[k] = examples[0][k]
    args = [
        examples[0][k] if d is None else np.stack([ex[k] for ex in examples], axis=d)
        for k, d in enumerate(axes)
    ]
    return examples, args


@pytest.mark.parametrize("check", [True, False], ids=["check_vma", "no_check_vma"])
def test_vmap_is_a_loop_over_the_examples(check):
    """The tool's vmap, interpreted, against the model run once per example."""
    rng = np.random.default_rng(1)
    j = tool(flat_exchange(check), FLAT, FLAT, IDX, IDX, IDX, IDX)
    n = 3
    for axes in LOOP_AXES:
        examples, args = examples_for(rng, axes, n)
        (got,) = run_program(vmap_jaxpr(j, list(axes), 0, axis_size=n), *args)
        want = np.stack([run_program(j, *ex)[0] for ex in examples])
        np.testing.assert_array_equal(got, want, err_msg=str(axes))


def empty_block_first():
    """Every device sends nothing to anyone from device 0 and one row from the others; each
    receiver lays them out packed: device 0's empty block starts where device 1's does."""
    sizes = np.array([[0] * DEV] + [[1] * DEV] * (DEV - 1))  # sizes[s, d]
    input_offsets = np.cumsum(sizes, axis=1) - sizes
    at_receiver = np.cumsum(sizes.T, axis=1) - sizes.T
    return [a.astype(np.int32).reshape(-1) for a in (input_offsets, sizes, at_receiver.T, sizes.T)]


def test_jax_mask_is_wrong_after_an_empty_block():
    """Why the tool's transpose adds its mask's +1s: before 0.12.1 JAX's program (its own
    rule, as JAX traces it) fails the dot-product test once an empty block starts where
    another one does (the output's cotangent is kept on rows the exchange overwrote); the
    tool's passes.  JAX 0.12.1 adds them too: there JAX's passes, and the tool's agrees."""
    rng = np.random.default_rng(2)
    f = flat_exchange(True)
    j = tool(f, FLAT, FLAT, IDX, IDX, IDX, IDX)
    jaxs = tool(transpose_of(f), FLAT, FLAT, IDX, IDX, IDX, IDX, FLAT)
    ours = transpose_jaxpr(j, [True, True, False, False, False, False])
    idx = empty_block_first()
    v_op, v_out, w = (rng.standard_normal(FLAT.shape).astype(np.float32) for _ in range(3))
    (lv,) = run_program(j, v_op, v_out, *idx)
    want = dot(w, lv)
    jax_op, jax_out = run_program(jaxs, v_op, v_out, *idx, w)
    our_op, our_out = run_program(ours, *idx, w)
    np.testing.assert_array_equal(jax_op, our_op)  # the operand's cotangent agrees
    if not JAX_0_12_1:
        np.testing.assert_array_equal(jax_out, w)  # JAX: as if nothing had been received
        assert abs(dot(jax_op, v_op) + dot(jax_out, v_out) - want) > 1e-2
    else:  # JAX's zeroes the received rows and passes; the tool's is the same
        assert not np.array_equal(jax_out, w)
        np.testing.assert_allclose(dot(jax_op, v_op) + dot(jax_out, v_out), want, rtol=1e-5)
        np.testing.assert_array_equal(our_out, jax_out)
    np.testing.assert_allclose(dot(our_op, v_op) + dot(our_out, v_out), want, rtol=1e-5)
