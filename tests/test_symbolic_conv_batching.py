"""Batching grouped convolutions whose feature or batch dims are symbolic, and batching a
grouped conv's kernel over a Jacobian's symbolic basis (issue 25 leftovers).

JAX's `_conv_general_dilated_batch_rule` splits a dim into groups with `_reshape_axis_out_of`,
dividing symbolic sizes exactly (`9*b` by 3 is `3*b`); the tool does the same.  JAX is the
oracle: the result types of `jax.make_jaxpr(jax.vmap(f))` / `jax.make_jaxpr(jax.jacfwd(f))`
on the same symbolic shapes, and `jax.vmap(f)` / `jax.jacfwd(f)` on concrete inputs at
b = 2 (`run --dim b=2`)."""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from click.testing import CliRunner  # noqa: E402
from jax import export, lax  # noqa: E402

from jaxprtool import api  # noqa: E402
from jaxprtool.ad.jacobians import jacfwd  # noqa: E402
from jaxprtool.cli import main  # noqa: E402
from jaxprtool.core import all_eqns  # noqa: E402
from tests.test_symbolic_ad import close, reread, run_at  # noqa: E402

(B,) = export.symbolic_shape("b")
SIZE = 2  # the size b takes when the programs run
BATCH = 4  # vmap's batch size
F32 = jnp.float32


def _conv1d(**groups):
    return lambda x, w: lax.conv_general_dilated(x, w, (1,), "VALID", **groups)


def _nhwc(x, w):
    dn = lax.conv_dimension_numbers(x.shape, w.shape, ("NHWC", "HWIO", "NHWC"))
    return lax.conv_general_dilated(x, w, (1, 1), "VALID", dimension_numbers=dn,
                                    feature_group_count=3)  # fmt: skip


#: name -> (f, per-example shapes as functions of the size b)
VMAP = {
    # rhs out features 3*b split into the 3 groups: (3, b)
    "feature_groups": (_conv1d(feature_group_count=3), lambda b: [(2, 3 * b, 4), (3 * b, b, 2)]),
    "batch_groups": (_conv1d(batch_group_count=3), lambda b: [(6, 3 * b, 4), (3 * b, 3 * b, 2)]),
    # lhs batch 3*b split into the 3 batch groups
    "batch_groups_lhs_batch": (_conv1d(batch_group_count=3), lambda b: [(3 * b, 2, 4), (3, 2, 2)]),
    "nhwc_feature_groups": (_nhwc, lambda b: [(2, 4, 3, 3 * b), (2, 2, b, 3 * b)]),
}
#: (case, in_axes): both batched, the kernel only, the input only; what each splits exactly
VMAP_AXES = [
    ("feature_groups", (0, 0)),  # the result's features 3*b*4 by the batch 4
    ("feature_groups", (None, 0)),  # the kernel's out features 3*b into the 3 groups
    ("batch_groups", (0, 0)),
    ("batch_groups", (None, 0)),
    ("batch_groups_lhs_batch", (0, None)),  # the lhs batch 3*b into the 3 batch groups
    ("batch_groups_lhs_batch", (2, 1)),
    ("nhwc_feature_groups", (2, 1)),
    ("nhwc_feature_groups", (None, 3)),
]


def _shapes(name, b):
    return VMAP[name][1](b)


def _traced(f, shapes):
    closed = jax.make_jaxpr(f)(*[jax.ShapeDtypeStruct(s, F32) for s in shapes])
    return api.parse(str(closed), "<traced>")


def _batched_shape(shape, axis):
    return shape if axis is None else (*shape[:axis], BATCH, *shape[axis:])


@pytest.mark.parametrize(("name", "axes"), VMAP_AXES)
def test_vmap_of_grouped_conv_with_symbolic_features_matches_jax(name, axes):
    f = VMAP[name][0]
    got = reread(api.vmap(_traced(f, _shapes(name, B)), list(axes), 0, BATCH))
    sym = [_batched_shape(s, a) for s, a in zip(_shapes(name, B), axes)]
    want = _traced(jax.vmap(f, axes), sym).jaxpr
    assert [str(v.type) for v in got.jaxpr.outvars] == [str(v.type) for v in want.outvars]
    assert len(list(all_eqns(got.jaxpr))) <= len(list(all_eqns(want)))
    r = np.random.RandomState(0)
    args = [
        r.randn(*_batched_shape(s, a)).astype(np.float32) for s, a in zip(_shapes(name, SIZE), axes)
    ]
    close(run_at(got, *args, sizes={"b": SIZE}), [jax.jit(jax.vmap(f, axes))(*args)])


#: jacfwd in the kernel (rhs batched over the basis 3*b or 9*b) of a grouped conv
JAC = {
    "feature_groups": (
        lambda w: _conv1d(feature_group_count=3)(jnp.ones((1, 3, 4)), w),
        lambda b: (3, 1, b),
    ),
    "batch_groups": (
        lambda w: _conv1d(batch_group_count=3)(jnp.ones((6, 3, 4)), w),
        lambda b: (3, 3, b),
    ),
    "feature_groups_out_features": (
        lambda w: _conv1d(feature_group_count=3)(jnp.ones((2, 3, 4)), w),
        lambda b: (3, 1, b + 1),
    ),
}


@pytest.mark.parametrize("name", JAC)
def test_jacfwd_of_grouped_kernel_over_a_symbolic_basis_matches_jax(name):
    """JAX's standard basis has a symbolic number of rows; the batch size is then divided
    out of the result's features exactly (`9*b` by `3*b`)."""
    f, shape = JAC[name]
    program = _traced(f, [shape(B)])
    got = reread(api.Program(jacfwd(program.jaxpr), program.style))
    want = _traced(jax.jacfwd(f), [shape(B)]).jaxpr
    assert [str(v.type) for v in got.jaxpr.outvars] == [str(v.type) for v in want.outvars]
    w = np.random.RandomState(1).randn(*shape(SIZE)).astype(np.float32)
    close(run_at(got, w, sizes={"b": SIZE}), [jax.jit(jax.jacfwd(f))(w)])


def test_linearize_of_a_symbolic_window_keeps_jaxs_result_size():
    """A kernel window of size b: the result's spatial size is `max(- b + 5, 0)` (JAX's
    `stride_dim`), in the linear program too, never `- b + 5`."""
    f = JAC["feature_groups"][0]
    lin = reread(api.linearize(_traced(f, [(3, 1, B)])))
    sizes = {str(v.type) for e in all_eqns(lin.jaxpr) for v in e.outputs if "b" in str(v.type)}
    assert "f32[1,3,max(- b + 5, 0)]" in sizes and not any("- b + 5]" in s for s in sizes)


def test_unprovable_group_split_is_refused_at_the_conv(tmp_path):
    """Out features `b` split into 3 feature groups (a text JAX would not print for an
    arbitrary b): no exact quotient, refused at the equation saying how to proceed."""
    src = tmp_path / "p.jaxpr"
    src.write_text(
        "{ lambda ; a:f32[2,3,4] b:f32[b,1,2]. let\n"
        "    c:f32[2,b,3] = conv_general_dilated[\n"
        "      batch_group_count=1\n"
        "      dimension_numbers=ConvDimensionNumbers(lhs_spec=(0, 1, 2), "
        "rhs_spec=(0, 1, 2), out_spec=(0, 1, 2))\n"
        "      feature_group_count=3\n      lhs_dilation=(1,)\n      out_sharding=None\n"
        "      padding=((0, 0),)\n      precision=None\n      preferred_element_type=None\n"
        "      rhs_dilation=(1,)\n      window_strides=(1,)\n    ] a b\n  in (c,) }\n"
    )
    argv = ["--no-color", "vmap", "--in-axes", "None,0", "--axis-size", "4", str(src)]
    r = CliRunner().invoke(main, argv)
    assert r.exit_code == 1, r.output
    assert f"{src}:2:5: error: 'conv_general_dilated': splitting the dimension b" in r.output
    assert "give the dimensions sizes" in r.output and "Traceback" not in r.output
