"""docs/PLUGINS.md's plugin example: a primitive unknown to the tool, differentiated and run."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
from click.testing import CliRunner

from jaxprtool.cli import main

README = Path(__file__).resolve().parents[1] / "docs" / "PLUGINS.md"
PROGRAM = """{ lambda ; a:f32[4]. let
    b:f32[4] = softsign a
    c:f32[4] = mul b a
    d:f32[] = reduce_sum[axes=(0,) out_sharding=None] c
  in (d,) }
"""


def test_readme_plugin_grad_matches_jax(tmp_path):
    import jax
    import jax.numpy as jnp

    code = re.search(r"```python\n(# softsign_rules.py.*?)```", README.read_text(), re.S).group(1)
    plugin = tmp_path / "softsign_rules.py"
    plugin.write_text(code)
    prog = tmp_path / "f.jaxpr"
    prog.write_text(PROGRAM)
    x = np.array([-2.0, -0.5, 0.3, 1.7], np.float32)
    np.savez(tmp_path / "x.npz", arg0=x)
    runner = CliRunner()
    r = runner.invoke(
        main, ["--plugin", str(plugin), "grad", str(prog), "-o", str(tmp_path / "g.jaxpr")]
    )
    assert r.exit_code == 0, r.output
    r = runner.invoke(
        main,
        [
            "--plugin",
            str(plugin),
            "run",
            str(tmp_path / "g.jaxpr"),
            "--args",
            str(tmp_path / "x.npz"),
            "-o",
            str(tmp_path / "out.npz"),
        ],
    )
    assert r.exit_code == 0, r.output
    got = np.load(tmp_path / "out.npz", allow_pickle=False)["out0"]
    expected = jax.jit(jax.grad(lambda a: jnp.sum(a / (1 + jnp.abs(a)) * a)))(x)  # (one compile)
    np.testing.assert_allclose(got, expected, rtol=2e-3, atol=2e-3)


def test_unknown_primitive_without_plugin_is_a_located_error(tmp_path):
    prog = tmp_path / "f.jaxpr"
    prog.write_text(PROGRAM.replace("softsign", "softsign2"))
    r = CliRunner().invoke(main, ["grad", str(prog)])
    assert r.exit_code == 1
    assert f"{prog}:2:5: error: Differentiation rule for 'softsign2' not implemented" in r.output
