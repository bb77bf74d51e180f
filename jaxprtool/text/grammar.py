"""The lark grammar of printed jaxpr text, how it is loaded, and regular expressions.

`grammars/jaxpr.lark` (installed as `jaxprtool/grammars/jaxpr.lark`) is the
grammar; `build_lark` builds the LALR parser from it with lark's contextual
lexer, the parser's post-lexer and transformer, and a cache of the analysed
grammar in the user's cache directory (so start-up does not redo the LALR
analysis).  lark is imported only when a parser is built.

The regular expressions below serve the post-lexer (parameter values, §5.5),
the transformer (splitting an OPERANDS token, index templates) and error
messages; `OPERANDS_PATTERN` is the grammar's OPERANDS terminal (a test checks
that they agree).
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

import jaxprtool

#: the grammar (lark syntax)
GRAMMAR_PATH = Path(jaxprtool.__file__).parent / "grammars" / "jaxpr.lark"

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
#: `in` after a shared definition's `}`
SHARED_IN = re.compile(r"\s*in(?![\w:])")
LAMBDA = re.compile(r"\{[ \t]*lambda(?=[\s;])")
#: the keyword `in` before the output list; a variable `in` followed by a
#: complex or float0 literal operand is excluded
IN_KW = re.compile(r"in \((?!b'|[-+0-9.einfa]*j\):)")
VARNAME = re.compile(r"[a-z]+_?|_")
#: binders printed without types (`print_shapes=False`): `a b = prim`
UNTYPED_BINDERS = re.compile(r"(?:(?:[a-z]+_?|_) )+= ")
#: the common type form
SIMPLE_TYPE = re.compile(r"([a-z][a-z0-9_]*)\[((?:[0-9]+(?:,[0-9]+)*)?)\](?!\{)")
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

_INT = r"-?(?:0|[1-9][0-9]*)"
#: a simple parameter value that ends at a delimiter (`]`, or space and `key=` or `]`)
SIMPLE_VALUE = re.compile(
    rf"(?:({_INT})|(True|False|None)|\(({_INT}),\)|\(({_INT}(?:, {_INT})+)\)|\(\))"
    r"(?=\]|[ \t\n]+(?:\]|[A-Za-z_][A-Za-z0-9_]*=))"
)

# the parts of an operand (as in the grammar's _LITVAL, _ARRAY_TYPE, _ULITVAL)
_LITVAL = (
    r"(?:-?inf|nan|True|False|\(b'',\)|\[\.\.\.\]|\([^()\s:]*j\)"
    r"|-?(?:[0-9][0-9.]*(?:e[+-]?[0-9]+)?|inf|nan)j|-?[0-9][0-9.]*(?:e[+-]?[0-9]+)?)"
)
_ARRAY_TYPE = r"[A-Za-z_]\w*(?:<[^<>\s]*>)?\[[^\]\n]*\](?:\{(?:[^{}\n]|\{[^{}\n]*\})*\})?"
_ULITVAL = (
    r"(?:-inf|True|False|\(b'',\)|\([^()\s:]*j\)"
    r"|-?(?:[0-9][0-9.]*(?:e[+-]?[0-9]+)?|inf|nan)j|-?[0-9][0-9.]*(?:e[+-]?[0-9]+)?)"
    r"(?=[\s,);\]}]|$)"
)
_VAR = r"(?!in \((?!b'|[-+0-9.einfa]*j\):))(?:[a-z]+_?|_)(?![\w:])"
_OPND = rf"(?:{_LITVAL}:{_ARRAY_TYPE}|{_ULITVAL}|{_VAR})"
#: the grammar's OPERANDS terminal: the operands of an equation on one line
OPERANDS_PATTERN = rf"(?: |(?<=[ \t\n])){_OPND}(?: {_OPND})*(?:[ \t]*\n[ \t]*)*"
#: one operand inside an OPERANDS token: (literal value, its type) | untyped literal | variable
OPERAND = re.compile(rf" ?(?:({_LITVAL}):({_ARRAY_TYPE})|({_ULITVAL})|({_VAR}))")


def cache_file(grammar: str, version: str) -> str | bool:
    """Where lark caches the analysed grammar (one file per grammar and lark version)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    d = os.path.join(base, "jaxprtool")
    try:
        os.makedirs(d, exist_ok=True)
    except OSError:
        return False
    if not os.access(d, os.W_OK):
        return False
    h = hashlib.sha256((version + "\0" + grammar).encode()).hexdigest()[:16]
    return os.path.join(d, f"jaxpr-grammar-{h}.lark-cache")


def build_lark(postlex, transformer):
    """The LALR parser of the grammar; the transformer's callbacks run during the parse,
    so no parse tree is built."""
    import lark

    grammar = GRAMMAR_PATH.read_text(encoding="utf-8")
    return lark.Lark(
        grammar,
        parser="lalr",
        lexer="contextual",
        postlex=postlex,
        transformer=transformer,
        maybe_placeholders=False,
        cache=cache_file(grammar, lark.__version__),
    )
