"""2022's pjit text: a device-id mesh in `resource_env=ResourceEnv(Mesh(device_ids=array(...),
axis_names=(...)), ())` (numpy's repr of the id array, over several lines for a 2-D mesh) and
`OpShardingSharding({devices=[4,2]0,1,...})` in_shardings/out_shardings (XLA HloShardings
numbered by device id).  fmt reprints it byte for byte and check passes; run places the
arguments as the text says (the NamedSharding of the mesh that JAX lays out as that
HloSharding: JAX is the oracle of the correspondence) and gives JAX's numbers; what cannot be
placed is refused at the pjit.  The printouts below follow the layout of JAX 0.4.1's pjit
(wild/021, the one such printout found, whose body is an xmap: run refuses it, at the
xmap, tests/test_older_text.py)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import CORPUS, needs_corpus
from jax_oracle import close, run

from jaxprtool.shardings import read_mesh

PJIT_2D = """\
{ lambda ; a:f32[8,4] b:f32[8,4]. let
    c:f32[8,4] = pjit[
      donated_invars=(False, False)
      in_positional_semantics=(<_PositionalSemantics.GLOBAL: 1>, <_PositionalSemantics.GLOBAL: 1>)
      in_shardings=(OpShardingSharding({IN}), OpShardingSharding({replicated}))
      jaxpr={ lambda ; d:f32[8,4] e:f32[8,4]. let
          f:f32[8,4] = mul d e
          g:f32[8,4] = sin f
        in (g,) }
      name=f
      out_positional_semantics=_PositionalSemantics.GLOBAL
      out_shardings=(OpShardingSharding({OUT}),)
      resource_env=ResourceEnv(Mesh(device_ids=array([[0, 1],
       [2, 3],
       [4, 5],
       [6, 7]]), axis_names=('x', 'y')), ())
    ] a b
  in (c,) }
"""
IN = "devices=[4,2]0,1,2,3,4,5,6,7"
OUT = "devices=[4,1,2]0,1,2,3,4,5,6,7 last_tile_dim_replicate"
XMAP = CORPUS.parent / "wild" / "021_docs-custom-gpu-op-pjit-xmap-named-shapes-2022.jaxpr"


def program(inp=IN, out=OUT, ids=None):
    text = PJIT_2D.replace("{IN}", "{" + inp + "}").replace("{OUT}", "{" + out + "}")
    if ids is not None:
        text = text.replace("[[0, 1],\n       [2, 3],\n       [4, 5],\n       [6, 7]]", ids)
    return text


def test_the_device_id_mesh_is_read():
    m = read_mesh(
        "ResourceEnv(Mesh(device_ids=array([[0, 1],\n       [2, 3],\n       [4, 5],\n"
        "       [6, 7]]), axis_names=('x', 'y')), ())"
    )
    assert (m.names, m.sizes, m.device_ids, m.complete) == (
        ("x", "y"),
        (4, 2),
        tuple(range(8)),
        True,
    )
    m = read_mesh("Mesh(device_ids=array([3, 2, 1, 0]), axis_names=('a',))")
    assert (m.names, m.sizes, m.device_ids) == (("a",), (4,), (3, 2, 1, 0))
    assert not read_mesh("Mesh(device_ids=[], axis_names=())").complete
    assert not read_mesh("Mesh(device_ids=array([[0, 1], [2]]), axis_names=('x', 'y'))").complete


@pytest.mark.parametrize("cmd", ["fmt", "check"])
def test_fmt_and_check_take_it(tmp_path, cmd):
    src = tmp_path / "p.jaxpr"
    src.write_text(program())
    r = run([cmd, str(src)])
    assert r.exit_code == 0, r.output
    if cmd == "fmt":
        assert r.stdout == program()


@needs_corpus
def test_the_xmap_printout_reprints_and_checks():
    r = run(["fmt", str(XMAP)])
    assert r.exit_code == 0 and r.stdout == XMAP.read_text()
    assert run(["check", str(XMAP)]).exit_code == 0


def _run(tmp_path, text, *extra):
    jax = pytest.importorskip("jax")
    if len(jax.devices("cpu")) < 8:
        pytest.skip("needs 8 host CPU devices (conftest sets XLA_FLAGS)")
    src = tmp_path / "p.jaxpr"
    src.write_text(text)
    rng = np.random.default_rng(0)
    a, b = (rng.uniform(-1, 1, (8, 4)).astype(np.float32) for _ in range(2))
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    out = tmp_path / "out.npz"
    args = ["--arg", str(tmp_path / "a.npy"), "--arg", str(tmp_path / "b.npy")]
    r = run(["run", str(src), *args, "-o", str(out), *extra])
    return r, (a, b), out


def lays_out_as(mesh_shape, names, ids, spec, op_text, ndim=2):
    """Whether JAX lays NamedSharding(mesh, spec) out as the text's HloSharding (its device
    numbers index the mesh's devices in mesh order, as a pjit's device assignment)."""
    import jax
    from jax._src.lib import xla_client as xc

    devs = np.array([jax.devices("cpu")[i] for i in ids], dtype=object).reshape(mesh_shape)
    sh = jax.sharding.NamedSharding(jax.sharding.Mesh(devs, names), spec)
    return sh._to_xla_hlo_sharding(ndim) == xc.HloSharding.from_string("{" + op_text + "}")


def test_run_places_the_arguments_on_the_mesh(tmp_path):
    from jax.sharding import PartitionSpec as P

    r, (a, b), out = _run(tmp_path, program(), "--show-sharding")
    assert r.exit_code == 0, r.output
    close(np.load(out)["out0"], np.sin(a * b))
    lines = r.stdout.splitlines()
    assert "arg0: P('x', 'y') over mesh x=4,y=2 (8 devices)" in lines
    assert "arg1: P() over mesh x=4,y=2 (8 devices)" in lines
    assert "out0: P('x',) over mesh x=4,y=2 (8 devices)" in lines
    assert lays_out_as((4, 2), ("x", "y"), range(8), P("x", "y"), IN)
    assert lays_out_as((4, 2), ("x", "y"), range(8), P("x"), OUT)


def test_run_follows_the_device_order(tmp_path):
    """Device ids out of order: the mesh holds the devices by id; the HloSharding numbers
    them by their place in the mesh."""
    from jax.sharding import PartitionSpec as P

    ids = "[[0, 4],\n       [1, 5],\n       [2, 6],\n       [3, 7]]"
    inp = "devices=[1,2,4]0,2,4,6,1,3,5,7 last_tile_dim_replicate"
    assert lays_out_as((4, 2), ("x", "y"), [0, 4, 1, 5, 2, 6, 3, 7], P(None, "y"), inp)
    text = program(inp=inp, out="replicated", ids=ids)
    r, (a, b), out = _run(tmp_path, text, "--show-sharding")
    assert r.exit_code == 0, r.output
    close(np.load(out)["out0"], np.sin(a * b))
    assert "arg0: P(None, 'y') over mesh x=4,y=2 (8 devices)" in r.stdout.splitlines()


@pytest.mark.parametrize(
    "inp,why",
    [
        ("devices=[8,1]7,6,5,4,3,2,1,0", "no partition spec of the pjit's mesh x=4,y=2"),
        ("devices=[2,1]8,9", "it numbers device 9 of a device assignment of 8"),
    ],
    ids=["unexpressible", "missing-devices"],
)
def test_run_refuses_what_it_cannot_place(tmp_path, inp, why):
    r, _, _ = _run(tmp_path, program(inp=inp))
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert (
        f"{tmp_path / 'p.jaxpr'}:2:5: error: cannot run OpShardingSharding({{{inp}}}): {why}"
        in r.output
    )
