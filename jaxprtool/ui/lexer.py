"""A Pygments lexer for jaxpr text (what `jax.make_jaxpr` prints).

Registered as the `pygments.lexers` entry point `jaxpr` (pyproject.toml), so that
`pygmentize -l jaxpr f.jaxpr`, Sphinx (`.. code-block:: jaxpr`) and Jupyter find it;
the tool's own rich output (programs on a terminal, diffs, pass dumps) uses it too.

Token kinds: `lambda`/`let`/`in` keywords, the primitive of each equation (the name after
a binding ` = `, or at the start of an equation without results) as a function name,
parameter names as attributes, types (`f32[3,4]`, `bool[]`, `key<fry>[]`) as types,
numeric literals, quoted strings, and `#` comments (source_info, `# jaxprtool:` notes,
the `# -----` separators of split input files and dumps).
"""

from __future__ import annotations

from pygments.lexer import RegexLexer, bygroups
from pygments.token import (
    Comment,
    Keyword,
    Name,
    Number,
    Operator,
    Punctuation,
    String,
    Text,
    Whitespace,
)

__all__ = ["JaxprLexer"]

_DTYPE = (
    r"(?:bool|float0|bf16|f8_e[0-9a-z]+|f4_e2m1fn|f16|f32|f64|c64|c128|"
    r"i1|i2|i4|i8|i16|i32|i64|u1|u2|u4|u8|u16|u32|u64|key<[^>]*>)"
)


class JaxprLexer(RegexLexer):
    """Lexer for printed jaxprs."""

    name = "Jaxpr"
    aliases = ["jaxpr"]
    filenames = ["*.jaxpr", "*.jaxpr.txt"]
    mimetypes = ["text/x-jaxpr"]
    url = "https://docs.jax.dev/en/latest/jaxpr.html"

    tokens = {
        "root": [
            (r"[ \t]*#[^\n]*", Comment.Single),
            (r"//[^\n]*", Comment.Single),
            # a binding: `b:f32[3] = sin a` -> the primitive after ` = `
            (r"([ \t]+=[ \t]+)([A-Za-z_][\w.\-]*)", bygroups(Operator, Name.Function)),
            (r"\n", Whitespace),
            (r"[ \t]+", Whitespace),
            (r"\b(lambda|let|in)\b", Keyword),
            # a parameter: `axes=(0,)`
            (r"([A-Za-z_]\w*)(=)", bygroups(Name.Attribute, Operator)),
            # a type: `f32[3,4]`, `bool[]`, `key<fry>[]`, with a sharding/weak suffix
            (_DTYPE + r"\[[^\]\n]*\](?:\{[^}\n]*\})?", Keyword.Type),
            (r"'(?:[^'\\\n]|\\.)*'", String.Single),
            (r'"(?:[^"\\\n]|\\.)*"', String.Double),
            (r"-?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?j?", Number),
            (r"-?(?:inf|nan)\b", Number),
            (r"\b(?:True|False|None)\b", Keyword.Constant),
            (r"np\.\w+", Name.Builtin),
            (r"[A-Z]\w*(?:\.\w+)*", Name.Class),
            (r"[A-Za-z_]\w*", Name.Variable),
            (r"[{}()\[\],;.:]", Punctuation),
            (r"[=*+\-/<>|&@!~%^?]", Operator),
            (r".", Text),
        ]
    }

    @staticmethod
    def analyse_text(text: str) -> float:
        return 0.9 if text.lstrip().startswith("{ lambda") else 0.0
