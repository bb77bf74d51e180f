"""Token patterns of the jaxpr text, compiled once at import.

The parser (parser.py) is a hand-written recursive-descent parser that
matches these patterns at explicit positions; `grammars/jaxpr.lark` is the
reference grammar of the same language (documentation, and a check in the
tests that it is a valid LALR grammar).  Nothing here is built at run time
beyond `re.compile`, so `import jaxprtool.text.parser` is fast.
"""

from __future__ import annotations

import re
from pathlib import Path

#: the reference grammar (lark syntax)
GRAMMAR_PATH = Path(__file__).resolve().parent.parent / "grammars" / "jaxpr.lark"

ANSI = re.compile(r"\x1b\[[0-9;]*m")
NEWLINE = re.compile(r"\n")
#: whitespace, newlines and `# ...` comments (source_info / name_stack)
WS = re.compile(r"(?:[ \t\r\n]+|#[^\n]*)*")
#: spaces on the current line
SP = re.compile(r"[ \t\r]*")
#: names of all shared-jaxpr definitions in a text (pre-scan, for forward references)
SHARED_DEF_NAME = re.compile(r"(?:^|=)let (\S+) = \{ *lambda\b", re.M)
#: `let NAME = ` before `{ lambda`; the match ends at the `{`
SHARED_DEF = re.compile(r"let (\S+) = (?=\{ *lambda\b)")
IN_SHARED = re.compile(r"in(?![\w:])")
LAMBDA = re.compile(r"\{[ \t]*lambda(?=[\s;])")
LET = re.compile(r"let(?=\s)")
#: the keyword `in` before the output list; a variable `in` followed by a
#: complex or float0 literal operand is excluded
IN_KW = re.compile(r"in \((?!b'|[-+0-9.einfa]*j\):)")
VARNAME = re.compile(r"[a-z]+_?|_")
#: binders printed without types (`print_shapes=False`): `a b = prim`
UNTYPED_BINDERS = re.compile(r"(?:(?:[a-z]+_?|_) )+= ")
PRIM = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")
#: the common type form, matched and cached as one token
SIMPLE_TYPE = re.compile(r"([a-z][a-z0-9_]*)\[((?:[0-9]+(?:,[0-9]+)*)?)\](?!\{)")
#: the common equation head `name:f32[3,4] = prim` as one match
EQN_FAST = re.compile(
    r"([a-z]+_?|_):([a-z][a-z0-9_]*\[(?:[0-9]+(?:,[0-9]+)*)?\])(?![{]) = ([A-Za-z_][A-Za-z0-9_.\-]*)"
)
TYPE_HEAD = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(<[^<>\s]*>)?")
LITERAL = re.compile(
    r"-?inf|nan|True|False|\(b'',\)|\[\.\.\.\]"
    r"|\([^()\s:]*j\)"
    r"|-?(?:[0-9][0-9.]*(?:e[+-]?[0-9]+)?|inf|nan)j"
    r"|-?[0-9][0-9.]*(?:e[+-]?[0-9]+)?"
)
ATOM_END = re.compile(r"(?=[\s,);]|$)")
KEY = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=")
BARE_NAME = re.compile(r"[^\W\d]\w*")
JAXPR_TUPLE = re.compile(r"\(\s*(?:(\{\s*lambda\b)|([^\W\d]\w*)\s)")
RAW_END_FLAT = re.compile(r"(?= [A-Za-z_]\w*=)|(?=\])")
RAW_END_BROKEN = re.compile(r"(?=\n[ \t]*[A-Za-z_]\w*=|\n[ \t]*\])")
#: one indexing transform of a ref (`[c,1:]`, `{bitcast(f32)}`)
INDEX_PART = re.compile(r"\[[^\]]*\]|\{(?:[^{}]|\{[^{}]*\})*\}")
INDEX_VAR = re.compile(r"([0-9][\w.]*)|([a-z]+)")
SHOW_TOKEN = re.compile(r"[\w.\-]+|\S")


def load_lark():
    """The reference grammar as a lark LALR parser (used by tests only)."""
    from lark import Lark

    return Lark(GRAMMAR_PATH.read_text(), parser="lalr", lexer="contextual")
