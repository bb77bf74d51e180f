"""`jaxprtool vmap`, `jacfwd`, `jacrev` and `hessian`: batching a printed jaxpr (as `jax.vmap`),
and the Jacobians JAX defines with it (compositions of jvp / vjp and vmap)."""

from __future__ import annotations

import re

from .. import io
from ..cli import option
from ..declare import IntRange
from .ad_cmds import ad_command
from .common import int_list


def _axes(ctx, param, value):
    """click callback: `0,None,-1` -> [0, None, -1]; a single entry -> that entry (all)."""
    if value is None:
        return None
    parts = [p.strip() for p in value.split(",")]
    out = []
    for p in parts:
        if p.lower() == "none":
            out.append(None)
            continue
        try:
            out.append(int(p))
        except ValueError:
            import click

            raise click.BadParameter(
                f"expected integers or None separated by commas, e.g. 0,None,1 (got '{value}')"
            ) from None
    return out[0] if len(out) == 1 else out


def _input_locs(text: str, path: str, jaxpr, first_line: int = 1):
    """Where each input of the top-level jaxpr is bound in the text, which starts on line
    `first_line` of its file (for located errors)."""
    from ..core import Loc

    n = len(jaxpr.invars)
    m = re.search(r"^\{ lambda ", text, re.M)
    if m is None:
        return [None] * n
    line0 = text.count("\n", 0, m.start()) + first_line

    def loc(pos):
        line = text.count("\n", 0, pos) + first_line
        col = pos - (text.rfind("\n", 0, pos) + 1) + 1
        return Loc(path, line, col)

    semi = text.find(";", m.end())
    if semi < 0:
        return [Loc(path, line0, 1)] * n
    locs = []
    for t in re.finditer(r"\S+", text[semi + 1 :]):
        tok = t.group(0)
        if tok in ("let", "in") or len(locs) == n:
            break
        locs.append(loc(semi + 1 + t.start()))
        if tok.endswith("."):
            break
    if len(locs) != n:
        return [Loc(path, line0, 1)] * n
    return locs


# ---------------------------------------------------------------- vmap


def _vmap_usage(out, split_input, in_axes, axis_size, **_):
    """A batched input needs the batch size, which a per-example program does not hold:
    without --axis-size that is a usage error (exit 2).  (With every input unbatched, JAX's
    own message says that axis_size must be specified.)"""
    axes = in_axes if isinstance(in_axes, list) else [in_axes]
    if axis_size is None and any(a is not None for a in axes):
        raise io.UsageError(
            "vmap needs the batch size: give --axis-size N (a per-example program does not "
            "contain it)"
        )


@ad_command(
    "vmap",
    option(
        "--in-axes",
        "in_axes",
        callback=_axes,
        default="0",
        show_default=True,
        metavar="A,B,...",
        help="Batch axis of each input (None: not batched); one entry applies to every input.",
    ),
    option(
        "--out-axes",
        "out_axes",
        callback=_axes,
        default="0",
        show_default=True,
        metavar="A,B,...",
        help="Batch axis of each output (None: must not be batched); one entry applies to all.",
    ),
    option(
        "--axis-size",
        type=IntRange(min=0),
        metavar="N",
        help="The batch size (required: a per-example program does not contain it).",
    ),
    option(
        "--axis-name",
        metavar="NAME",
        help="Name the batch axis: collectives over NAME (psum, axis_index, ...) act on it.",
    ),
    usage=_vmap_usage,
)
def vmap(job, in_axes, out_axes, axis_size, axis_name):
    """Batch a program as jax.vmap: (x...) -> (y...) becomes the program on a batch.

    FILE is the per-example program.  Every input with an axis gets a batch dimension of
    size N (--axis-size: a per-example program does not contain it) there; None inputs stay
    as they are.  Every output gets the batch dimension at --out-axes; an output that does
    not depend on a batched input is broadcast.

    \b
    Example:
      jaxprtool vmap --in-axes 0,None --axis-size 8 f.jaxpr
      jaxprtool grad loss.jaxpr | jaxprtool vmap --in-axes None,0,0 --axis-size 32
      jaxprtool vmap --axis-size 4 f.jaxpr | jaxprtool vmap --in-axes 1 --axis-size 2
      jaxprtool vmap --axis-name i --axis-size 4 uses_psum_over_i.jaxpr
    """
    return _vmap(job, in_axes, out_axes, axis_size, axis_name)


def _vmap(job, in_axes, out_axes, axis_size, axis_name):
    from ..ad.batching import vmap_jaxpr

    locs = _input_locs(job.source_text, job.source_path, job.input, job.source_line)
    res = job.transform(
        lambda j: vmap_jaxpr(
            j, in_axes, out_axes, axis_size, job.style, in_locs=locs, axis_name=axis_name
        )
    )
    return job.text(job.optimize(res))


# ---------------------------------------------------------------- Jacobians


_argnums0 = option(
    "--argnums",
    callback=int_list,
    default="0",
    show_default=True,
    metavar="I,J",
    help="Inputs to differentiate.",
)


@ad_command("jacfwd", _argnums0)
def jacfwd(job, argnums):
    """Jacobian by forward mode, as jax.jacfwd: vmap of jvp over the standard basis.

    (x...) -> (J...): for each output y and each input x among --argnums, one result of
    shape y.shape + x.shape (the flattened layout of jax.jacfwd's result).

    \b
    Example:
      jaxprtool jacfwd f.jaxpr
      jaxprtool jacfwd --argnums 0,1 f.jaxpr
    """
    return _jac("jacfwd", job, argnums)


@ad_command("jacrev", _argnums0)
def jacrev(job, argnums):
    """Jacobian by reverse mode, as jax.jacrev: vmap of vjp over the standard basis of the
    outputs.

    (x...) -> (J...), laid out as jacfwd's (one result per output and input).

    \b
    Example:
      jaxprtool jacrev f.jaxpr
    """
    return _jac("jacrev", job, argnums)


@ad_command("hessian", _argnums0)
def hessian(job, argnums):
    """Hessian, as jax.hessian: jacfwd of jacrev.

    (x...) -> (H...): for each output y and inputs x_i, x_j among --argnums, one result of
    shape y.shape + x_i.shape + x_j.shape.

    \b
    Example:
      jaxprtool hessian loss.jaxpr
    """
    return _jac("hessian", job, argnums)


def _jac(kind, job, argnums):
    from ..ad import jacobians

    fn = {"jacfwd": jacobians.jacfwd, "jacrev": jacobians.jacrev, "hessian": jacobians.hessian}[
        kind
    ]
    res = job.transform(lambda j: fn(j, argnums, style=job.style))
    return job.text(job.optimize(res))
