"""The state of one parse: the readers' and scopes' state, and what the post-lexer and the
rule callbacks hand each other."""

from __future__ import annotations

from ...core import Eqn, Jaxpr
from .fast import FastPath
from .scopes import SharedScopes


class ParseState(FastPath, SharedScopes):
    """Everything one parse holds: the text and its positions (`diagnostics.Source`), the
    symbol tables and types (`readers.Readers`), the value reader (`param_values`), the
    fast path's memo (`fast.FastPath`), the shared-jaxpr scopes (`scopes.SharedScopes`),
    and the fields below, written by the post-lexer (`layout._Layout`) and read by the
    rule callbacks (`build._Build`) and the messages (`diagnostics.lark_error`)."""

    def __init__(self, text: str, path: str, fast: bool = True):
        super().__init__(text, path, fast)
        # per open `{ lambda`: where its equation block stands (`layout.Frame`)
        self.frames: list = []
        # values read by the post-lexer, by the position of their `key=`
        self.values: dict[int, object] = {}
        # equations read by the fast path (EQNS tokens), by start position
        self.runs: dict[int, list[Eqn]] = {}
        # jaxprs read so far by start position, with their ends (for values that hold
        # jaxprs, H5), and where the last one ended
        self.jaxpr_at: dict[int, tuple[Jaxpr, int]] = {}
        self.last_end = 0
        # for messages: where the current equation starts, where a line shallower than the
        # equations ended the block, the name of the last shared definition
        self.eqn_start = -1
        self.block_end = -1
        self.last_shared_name = ""
        # an equation was read away from its block's column (warned once: W004)
        self.misindented = False
