"""Whether JAX is there: the commands and the API that run or compile a program through
JAX ask `require_jax` first, so that a missing JAX is one line saying how to install it
(exit 1), never an ImportError's traceback.  JAX itself is imported only when asked."""

from __future__ import annotations

from .core import JaxprError

#: what to install for the commands that run programs through JAX
JAX_HINT = (
    "install it with `pip install 'jaxprtool[jax]'` (for NVIDIA GPUs also JAX's CUDA plugin: "
    "`pip install 'jax[cuda12]'`; see https://docs.jax.dev/en/latest/installation.html)"
)


def missing_jax(e: BaseException, without: str = "") -> JaxprError | None:
    """The message for an ImportError of jax or jaxlib (not installed), else None; `without`
    says what the command can do without JAX (e.g. "or leave out XLA's figures: --no-xla")."""
    if not isinstance(e, ImportError):
        return None
    name = (getattr(e, "name", None) or "").split(".")[0]
    if name not in ("jax", "jaxlib"):
        return None
    return JaxprError(
        f"this command runs the program through JAX, but {name} is not installed: {JAX_HINT}"
        + (f"; {without}" if without else "")
    )


def require_jax(without: str = "") -> None:
    """Import jax, or raise the JaxprError that says how to install it (exit 1), and
    `without`, what the command can do without it."""
    try:
        import jax  # noqa: F401
    except ImportError as e:
        missing = missing_jax(e, without)
        if missing is None:
            raise
        raise missing from None
