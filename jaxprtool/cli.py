"""The `jaxprtool` command line: a thin layer that reads, calls and writes.

Commands live in `jaxprtool/commands/*.py` and are loaded lazily, so that a
command which does not run or compile never imports jax.
"""

from __future__ import annotations

import functools
import importlib
import sys

import click

from .core import JaxprError
from .io import report

#: command name -> "module:attribute" inside jaxprtool.commands
COMMANDS: dict[str, str] = {
    "jvp": "ad_cmds:jvp",
    "linearize": "ad_cmds:linearize",
    "transpose": "ad_cmds:transpose",
    "vjp": "ad_cmds:vjp",
    "grad": "ad_cmds:grad",
    "vmap": "batch_cmds:vmap",
    "jacfwd": "batch_cmds:jacfwd",
    "jacrev": "batch_cmds:jacrev",
    "hessian": "batch_cmds:hessian",
    "fmt": "text_cmds:fmt",
    "check": "check_cmd:check",
    "dce": "pass_cmds:dce",
    "cse": "pass_cmds:cse",
    "fold": "pass_cmds:fold",
    "simplify": "pass_cmds:simplify",
    "inline": "pass_cmds:inline",
    "canonicalize": "pass_cmds:canonicalize",
    "opt": "pass_cmds:opt",
    "diff": "pass_cmds:diff",
    "stats": "pass_cmds:stats",
    "graph": "graph_cmd:graph",
    "check-grad": "verify_cmds:check_grad",
    "run": "run_cmds:run",
    "compile": "run_cmds:compile_",
    "trace": "run_cmds:trace",
    "explain": "explain_cmd:explain",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx):
        return sorted(COMMANDS)

    def get_command(self, ctx, name):
        target = COMMANDS.get(name)
        if target is None:
            return None
        module, attr = target.split(":")
        return getattr(importlib.import_module(f"jaxprtool.commands.{module}"), attr)


class Options:
    """Global options shared by every command."""

    debug = False
    jax_style: str | None = None
    plugins: tuple[str, ...] = ()


OPTIONS = Options()


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show Python tracebacks for internal errors.")
@click.option(
    "--plugin",
    "plugins",
    multiple=True,
    metavar="RULES.py",
    help="Load a Python module that registers rules for extra primitives (repeatable).",
)
@click.option(
    "--jax-style",
    metavar="VERSION",
    help="Print in the style of this JAX version (e.g. 0.4.35, 0.12).",
)
@click.option("--no-color", is_flag=True, help="Never colour diagnostics.")
@click.version_option(package_name="jaxprtool")
def main(debug, plugins, jax_style, no_color):
    """jaxprtool: read, transform, check and run JAX jaxprs from text files.

    \b
    Example:
      jaxprtool fmt f.jaxpr
      jaxprtool linearize f.jaxpr | jaxprtool transpose
    """
    import os

    if no_color:
        os.environ["NO_COLOR"] = "1"
    OPTIONS.debug = debug
    OPTIONS.jax_style = jax_style
    OPTIONS.plugins = plugins
    if plugins:
        from .plugins import load_plugins

        guarded(load_plugins)(plugins)


def guarded(fn):
    """Run a command body: JaxprError -> located message and exit 1 (2 for usage problems);
    no traceback unless --debug."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except JaxprError as e:
            report(e)
            sys.exit(e.exit_code)
        except (click.exceptions.Exit, click.ClickException, SystemExit, KeyboardInterrupt):
            raise
        except RecursionError:
            report(JaxprError("input nests too deeply"))
            sys.exit(1)
        except Exception as e:  # an internal error: still no traceback by default
            if OPTIONS.debug:
                raise
            report(
                JaxprError(
                    f"internal error: {type(e).__name__}: {e} (run with --debug for a traceback)"
                )
            )
            sys.exit(1)

    return wrapper


if __name__ == "__main__":
    main()
