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

import os
import re

from ..cachefs import cache_dir, read_entry, write_entry
from ..lazy import compile_pattern, declare_pattern

#: the grammar (lark syntax); a str, not a `pathlib.Path`: pathlib's import is ~3 ms of the
#: start-up, and no other module of `fmt` needs it.  The package's folder is found from this
#: file's, not from `jaxprtool.__file__`: importing the package from here would import the
#: whole API (and the parser) back (tests/test_layout.py)
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GRAMMAR_PATH = os.path.join(_PACKAGE, "grammars", "jaxpr.lark")

#: name -> (pattern, flags) of the regular expressions below, compiled on first use
_PATTERNS: dict[str, tuple[str, int]] = {}


def _lazy(name: str, pattern: str, flags: int = 0) -> None:
    """Declare the module attribute `name`: `pattern` compiled when first read (`G.NAME`).
    Compiling all of them costs ~5 ms of every start-up; a command reads a few."""
    _PATTERNS[name] = (pattern, flags)
    declare_pattern(pattern, flags)


def __getattr__(name: str):
    try:
        pattern, flags = _PATTERNS[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    compiled = globals()[name] = compile_pattern(pattern, flags)
    return compiled


_lazy("ANSI", r"\x1b\[[0-9;]*m")
_lazy("NEWLINE", r"\n")
#: whitespace, newlines and `# ...` comments (source_info / name_stack)
_lazy("WS", r"(?:[ \t\r\n]+|#[^\n]*)*")
#: spaces on the current line
_lazy("SP", r"[ \t\r]*")
#: names of all shared-jaxpr definitions in a text (pre-scan, for forward references)
_lazy("SHARED_DEF_NAME", r"(?:^|=)let (\S+) = \{ *lambda\b", re.M)
#: `let NAME = ` before `{ lambda`; the match ends at the `{`
_lazy("SHARED_DEF", r"let (\S+) = (?=\{ *lambda\b)")
#: `in` after a shared definition's `}`
_lazy("SHARED_IN", r"\s*in(?![\w:])")
_lazy("LAMBDA", r"\{[ \t]*lambda(?=[\s;])")
_lazy("LET", r"let(?=\s)")
#: the keyword `in` before the output list; a variable `in` followed by a
#: complex or float0 literal operand is excluded
_lazy("IN_KW", r"in \((?!b'|[-+0-9.einfa]*j\):)")
_lazy("VARNAME", r"[a-z]+_?|_")
#: binders printed without types (`print_shapes=False`): `a b = prim`
_lazy("UNTYPED_BINDERS", r"(?:(?:[a-z]+_?|_) )+= ")
#: the common type form
_lazy("SIMPLE_TYPE", r"([a-z][a-z0-9_]*)\[((?:[0-9]+(?:,[0-9]+)*)?)\](?!\{)")
_lazy("TYPE_HEAD", r"([A-Za-z_][A-Za-z0-9_]*)(<[^<>\s]*>)?")
_lazy(
    "LITERAL",
    r"-?inf|nan|True|False|\(b'',\)|\[\.\.\.\]"
    r"|\([^()\s:]*j\)"
    r"|-?(?:[0-9][0-9.]*(?:e[+-]?[0-9]+)?|inf|nan)j"
    r"|-?[0-9][0-9.]*(?:e[+-]?[0-9]+)?",
)
_lazy("ATOM_END", r"(?=[\s,);]|$)")
_lazy("KEY", r"([A-Za-z_][A-Za-z0-9_]*)=")
_lazy("BARE_NAME", r"[^\W\d]\w*")
_lazy("JAXPR_TUPLE", r"\(\s*(?:(\{\s*lambda\b)|([^\W\d]\w*)\s)")
_lazy("RAW_END_FLAT", r"(?= [A-Za-z_]\w*=)|(?=\])")
_lazy("RAW_END_BROKEN", r"(?=\n[ \t]*[A-Za-z_]\w*=|\n[ \t]*\])")
#: one indexing transform of a ref (`[c,1:]`, `{bitcast(f32)}`)
_lazy("INDEX_PART", r"\[[^\]]*\]|\{(?:[^{}]|\{[^{}]*\})*\}")
_lazy("INDEX_VAR", r"([0-9][\w.]*)|([a-z]+)")
_lazy("SHOW_TOKEN", r"[\w.\-]+|\S")
#: the first characters of a parameter value (before any delimiter): where the parser
#: looks for values it has read before
_lazy("VALUE_HEAD", r"[^\] \n]{0,8}")

_INT = r"-?(?:0|[1-9][0-9]*)"
#: a simple parameter value that ends at a delimiter (`]`, or space and `key=` or `]`)
_lazy(
    "SIMPLE_VALUE",
    rf"(?:({_INT})|(True|False|None)|\(({_INT}),\)|\(({_INT}(?:, {_INT})+)\)|\(\))"
    r"(?=\]|[ \t\n]+(?:\]|[A-Za-z_][A-Za-z0-9_]*=))",
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
#: a typed literal operand of the simplest kind (value, type), as the compiled twin's
#: `simple_literal` takes it: OPERAND reads such a token as this literal and nothing else
_lazy(
    "SIMPLE_LITERAL", r"(-?(?:[0-9][0-9.]*(?:e[+-]?[0-9]+)?|inf)|nan):([a-z][a-z0-9_]*\[[^\]]*\])"
)
#: one operand inside an OPERANDS token: (literal value, its type) | untyped literal | variable
_lazy("OPERAND", rf" ?(?:({_LITVAL}):({_ARRAY_TYPE})|({_ULITVAL})|({_VAR}))")

# the fast path (parser/fast.py, `FastPath.read_run`).  Each part matches what the grammar's
# terminals match there (HEAD_OPS, HEAD, BINDER, EQ_PRIM, KEY, RSQB, OPERANDS) or less,
# never more; the repetitions are possessive or atomic, so that a part matches where the
# terminal's regular expression first matches (lark takes that match).
_NAME = r"(?:[a-z]+_?|_)"
#: a binder's type: an array type with a lower-case dtype and no `{...}` suffix (the array
#: form of the grammar's _TYPE)
FAST_TYPE = r"[a-z][a-z0-9_]*+(?:<[^<>\s]*>)?\[[^\]\n]*\](?!\{)"
#: an equation's binders and primitive: groups (first binder's name, its type, the other
#: binders, primitive)
_lazy(
    "FAST_HEAD",
    rf"({_NAME}):({FAST_TYPE})((?: {_NAME}:{FAST_TYPE})*) = ([A-Za-z_][A-Za-z0-9_.\-]*+)",
)
#: one more binder of an equation (in FAST_HEAD's third group): name, type
_lazy("FAST_BINDER", rf" ({_NAME}):({FAST_TYPE})")
#: the operands of an equation on one line (the grammar's OPERANDS, but the line break)
_lazy("FAST_OPS", rf"(?>(?: {_OPND})*)")
#: the grammar's KEY terminal, the key as group 1
_lazy("KEY_TOKEN", r"[ \t\n]*([A-Za-z_][A-Za-z0-9_]*)=")
#: the grammar's RSQB terminal
_lazy("RSQB_TOKEN", r"[ \t\n]*\]")
#: the indentation of a line
_lazy("INDENT", r"[ \t]*")
#: spaces and line breaks between tokens (no comment)
_lazy("BLANK", r"[ \t\n]*")
#: a binder of a jaxpr (BINDER, with FAST_HEAD's types)
_lazy("FAST_BINDER_TOKEN", rf"{_NAME}:{FAST_TYPE}")
#: an output of a jaxpr as the grammar's terminals there read it, in lark's order of them
#: (by priority): LITERAL | ULITERAL | VAR
_lazy("OUTVAR_TOKEN", rf"({_LITVAL}:{_ARRAY_TYPE})|({_ULITVAL})|([a-z]+_?|_)")


#: 3: lark's tokens are tagged (`__token__`); a format-2 reader would take their tag for a name
CACHE_FORMAT = "jaxprtool-grammar-json-3"


def cache_file(grammar: str, version: str) -> str | None:
    """Where the analysed grammar is cached (one file per grammar and lark version)."""
    import hashlib  # here, as in the two below: ~2 ms of the start-up of the fast path

    d = cache_dir()
    if d is None:
        return None
    h = hashlib.sha256((CACHE_FORMAT + "\0" + version + "\0" + grammar).encode()).hexdigest()[:16]
    return os.path.join(d, f"jaxpr-grammar-{h}.json")


def _encode(x):
    """lark's serialized tables as JSON: dicts with non-string keys, tuples and lark's tokens
    are tagged.  A token (a `str` subclass) is there with lark 1.2, whose grammar loader names
    rules by the tokens it read (`Rule.origin.name`); lark 1.3 names them by plain strings."""
    if isinstance(x, dict):
        if all(type(k) is str for k in x):
            return {k: _encode(v) for k, v in x.items()}
        return {"__map__": [[_encode(k), _encode(v)] for k, v in x.items()]}
    if isinstance(x, tuple):
        return {"__tuple__": [_encode(v) for v in x]}
    if isinstance(x, list):
        return [_encode(v) for v in x]
    if type(x).__name__ == "Token" and type(x).__module__ == "lark.lexer":
        return {"__token__": [x.type, str(x)]}
    if x is None or type(x) in (bool, int, float, str):
        return x
    raise TypeError(f"cannot cache a {type(x).__name__}")


def _decode(x):
    if isinstance(x, dict):
        if len(x) == 1 and "__map__" in x:
            return {_decode(k): _decode(v) for k, v in x["__map__"]}
        if len(x) == 1 and "__tuple__" in x:
            return tuple(_decode(v) for v in x["__tuple__"])
        if len(x) == 1 and "__token__" in x:
            from lark.lexer import Token  # lark is imported: a parser is being built

            kind, value = x["__token__"]
            return Token(str(kind), str(value))
        return {k: _decode(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_decode(v) for v in x]
    return x


def _read_cache(path: str):
    """The cached tables, or None when the file is not one `cachefs.read_entry` trusts, or not
    what `_write_cache` wrote: its first line is the format and the SHA-256 of the rest, so a
    damaged or altered file is rebuilt instead of loading tables that mislead the parser.  The
    file is JSON: reading it can run no code, whoever wrote it."""
    import hashlib
    import json

    data = read_entry(path)
    if data is None:
        return None
    head, _, body = data.partition(b"\n")
    if head != f"{CACHE_FORMAT} {hashlib.sha256(body).hexdigest()}".encode():
        return None
    try:
        tables = _decode(json.loads(body.decode("utf-8")))
    except (ValueError, KeyError, TypeError, RecursionError):
        return None
    return tables if isinstance(tables, dict) and {"data", "memo"} <= tables.keys() else None


def _write_cache(path: str, tables: dict) -> None:
    """Write the tables atomically, 0600, never through a link planted at `path`."""
    import hashlib
    import json

    body = json.dumps(_encode(tables)).encode("utf-8")
    head = f"{CACHE_FORMAT} {hashlib.sha256(body).hexdigest()}\n".encode()
    write_entry(path, head + body)


def lark_plugins() -> dict:
    """lark-cython's lexer and LALR parser (the `fast` extra) when installed, unless
    JAXPRTOOL_PURE_PYTHON_PARSER is set; else {} (lark's own, pure Python)."""
    from ..env import flag

    if flag("JAXPRTOOL_PURE_PYTHON_PARSER"):
        return {}
    try:
        import lark_cython
    except ImportError:
        return {}
    return lark_cython.plugins


def build_lark(postlex, transformer, plugins: dict | None = None):
    """The LALR parser of the grammar; the transformer's callbacks run during the parse,
    so no parse tree is built.  The analysed tables are cached as JSON (never a pickle);
    `plugins` (lark-cython's) do not change them."""
    import lark
    from lark.lark import Rule, TerminalDef

    with open(GRAMMAR_PATH, encoding="utf-8") as f:
        grammar = f.read()
    path = cache_file(grammar, lark.__version__)
    tables = _read_cache(path) if path else None
    options = dict(postlex=postlex, transformer=transformer, _plugins=plugins or {})
    if tables is not None:
        try:
            return lark.Lark._load_from_dict(tables["data"], tables["memo"], **options)
        except Exception:  # a damaged or foreign cache: rebuild it
            pass
    parser = lark.Lark(
        grammar, parser="lalr", lexer="contextual", maybe_placeholders=False, **options
    )
    if path:
        data, memo = parser.memo_serialize([TerminalDef, Rule])
        data["options"] = {
            k: v
            for k, v in data["options"].items()
            if k not in ("postlex", "transformer", "_plugins")
        }
        _write_cache(path, {"data": data, "memo": memo})
    return parser
