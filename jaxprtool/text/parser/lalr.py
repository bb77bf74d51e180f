"""The grammar path: lark's LALR parser of `grammars/jaxpr.lark` with the post-lexer
(`layout._Layout`) and the rule callbacks (`build._Build`), built once per process (pure
Python, or lark-cython's where installed) and cached on disk by `grammar.build_lark`.
lark is imported only here, and only when a text needs the grammar."""

from __future__ import annotations

import threading

from ...core import Jaxpr, JaxprError
from .. import grammar as G
from .build import _Build
from .diagnostics import NOT_READ, lark_error, lark_errors
from .layout import _Layout, connector
from .scopes import check_shared
from .state import ParseState

_PARSERS: dict[bool, object] = {}  # compiled (lark-cython)? -> the parser
_LOCK = threading.Lock()

#: shorter texts are parsed by the pure-Python parser even where lark-cython is installed:
#: importing it costs more time than it saves on them
COMPILED_MIN_CHARS = 128_000


def build_parser(compiled: bool = False):
    """The parser: lark-cython's when `compiled` and it is installed, else lark's."""
    plugins = G.lark_plugins() if compiled else {}
    compiled = bool(plugins)
    lk = _PARSERS.get(compiled)
    if lk is None:
        if compiled:
            from lark_cython import Token
            from lark_cython.lark_cython import Lexer
        else:
            from lark import Token

            Lexer = object
        layout, build = _Layout(), _Build()
        layout.Token = build.Token = Token
        lk = G.build_lark(layout, build, plugins)
        frontend = lk.parser
        frontend.lexer = connector(Lexer)(frontend.lexer.lexer, frontend.lexer.postlexer)
        _PARSERS[compiled] = lk
    return lk


def parse_lark(st: ParseState, compiled: bool | None) -> Jaxpr:
    """The text of `st` read by the grammar (one parser object: its post-lexer and
    transformer hold this parse's state)."""
    lk = build_parser(st.n >= COMPILED_MIN_CHARS if compiled is None else compiled)
    with _LOCK:
        lk.options.postlex.st = st
        lk.options.transformer.st = st
        try:
            j = lk.parse(st.s)
        except lark_errors() as e:
            raise lark_error(st, e) from None
        except RecursionError:
            raise JaxprError("input is nested too deeply", st.loc(st.last_end), NOT_READ) from None
        finally:
            lk.options.postlex.st = lk.options.transformer.st = None
        if st.shared_defs:
            check_shared(st, j)
    return j
