"""Parser for the text JAX prints for a jaxpr (`str(jaxpr)`, dump `.jaxpr.txt` files).

    from jaxprtool.text.parser import parse
    result = parse(text, path)      # ParseResult(jaxpr, warnings)

The lark grammar `grammars/jaxpr.lark` (LALR(1), contextual lexer) is the definition of the
language; a fast path reads the texts and equations it can without lark, giving exactly
what the grammar gives.  The package's modules, in the order a text meets them:

* `layout`: the post-lexer (`_Layout`): the layout rule of FORMAT.md §5.5 (EQSEP tokens),
  parameter values as PARAM/VPIECE tokens, and the fast path's runs as EQNS tokens.
* `fast`: the fast path: runs of simple equations (`FastPath.read_run`, `read_inline`).
* `plain`: whole texts of JAX's common forms (shared definitions, nested jaxprs as
  parameter values, `jaxpr=NAME`) read by the fast path's readers and the builder
  (`parse_plain`, no lark import at all); the grammar reads what it leaves.
* `build`: the IR builder (`_Build`), the grammar's rule callbacks, run by lark while the
  LALR parser reduces (no parse tree) and by `parse_plain` as lark would.
* What the two paths share, so that they cannot disagree: `readers` (types, binders,
  operands and literals, the symbol tables' scope rule `bind`), `param_values` (the values
  after `key=`), `scopes` (shared jaxprs, `_` outvars of nested jaxprs, the checks made
  once the text is read), `diagnostics` (positions, limits, warnings, and lark's syntax
  errors in the words of the format).  The fast path never words an error: the first
  equation it refuses is read by the grammar, errors included.
* `lalr`: lark's parser built with the post-lexer and the builder; `state`: the state of
  one parse (`ParseState`, the readers' classes together).  The drivers (`plain`, `lalr`)
  import the builder and the state, the state imports the readers, and none imports back
  (tests/test_layout.py).

tests/test_parser_fast.py checks the two paths against each other on the corpus, generated
programs and damaged texts.  `parse(..., fast=False)` reads every equation with the grammar.

Coarse tokens keep the grammar's own path fast: a binder `name:TYPE`, a literal
`VALUE:TYPE`, an equation head `name:TYPE = prim` and the operands of an equation on one
line (OPERANDS, split by `grammar.OPERAND`) are one token each, and an equation without
parameters, `name:TYPE = prim OPERANDS`, is a single HEAD_OPS token; which terminal applies
is decided by the parser state (contextual lexer) and priorities, so that `nan:f32[]` is a
binder at the start of an equation and a literal among operands, and `in` is a variable
unless `(` follows (H1, H2).  `# ...` comments (source_info, name_stack) are skipped with
newlines; ANSI colour escapes are removed first.

Representation choices the printer relies on
--------------------------------------------
* `Var.hint` is the printed name (`"_"` for dropped binders).
* Literals: `Literal(value, type, typed)`; `repr(value)` is the printed value
  text, except `(b'',)` (float0) -> value `"float0"` and the array literal
  `[...]` -> value `Ellipsis`.  Untyped (0.4.35) literals have `typed=False`
  and an inferred, weak type.
* Shared jaxprs (`let NAME = {...} in`): every reference to NAME is the same
  `Jaxpr` object, so the printer can hoist by identity.
* Parameter values: see values.py.  A nested jaxpr is a `Jaxpr`; `branches=(
  {..} name )` is a tuple of `Jaxpr`.  A value whose typed form would not
  print back exactly is kept as `params.Opaque(text)`.
* H5 (`custom_linear_solve`'s `jaxprs=_LinearSolveTuple(matvec={ lambda ...},
  ..., solve=let _lu_solve = {...} in⏎{ lambda ...})`): a `params.Record`
  whose fields hold `Jaxpr` objects.  Each such field was printed with
  `str(jaxpr)`: its own naming (restarting at `a`), indentation restarting at
  column 0, and its own `let NAME = ... in⏎` prefix for jaxprs shared
  *within* it (a jaxpr reused inside the field, or one with more than 10
  equations).  Names of those local shared jaxprs resolve inside the field
  first.
* Ref-state syntax (`y:T <- x[IDX]`, `x[IDX] <- v`, `x[IDX] += v`) becomes ordinary
  equations: see build.py.
* `print_effects=True`: `Jaxpr.effects` is the tuple of printed effect names.
* Shared definitions that nothing references are not kept (JAX prints one
  when its only use sits inside a str()-ed value, H5: such a definition and
  the identical one inside the str()-ed text become one object).
* Top-level `name=` and `fmt=` values are raw strings up to the next
  `key=`/`]`; in a broken parameter list the next key must start a line, so
  a `fmt` containing newlines and `]` is read whole (H3).
* Warnings (`ParseResult.warnings`, located): each *use* of `_` after `_` was bound
  twice in that jaxpr (read as the most recent `_` binding; the text is ambiguous,
  FORMAT §2).  A use of `_` bound once is unambiguous and read silently.  The first equation of a text not where JAX prints it (W004: a block's equations at
  another column than JAX's, or one off its block's column that only an equation can
  start, read as one: layout.py), once per text.
* `Eqn.loc` is the position of the equation's first token (1-based).
* 0.4.35 printed unused binders as `f_`: the hint keeps the underscore.
"""

from __future__ import annotations

from ... import core
from ...core import Jaxpr, JaxprError
from .. import grammar as G
from .build import _Build as _Build  # (tests build lark with it)
from .diagnostics import MAX_DIGITS, MAX_DIM, MAX_NESTING, NO_TYPES, huge_number
from .plain import parse_plain
from .state import ParseState

#: the internals tests reach (tests/test_parser.py, test_parser_fast.py)
_State, _parse_plain = ParseState, parse_plain

__all__ = ["COMPILED_MIN_CHARS", "MAX_DIGITS", "MAX_DIM", "MAX_NESTING", "NO_TYPES"]
__all__ += ["ParseResult", "parse"]

#: names of the grammar's path (`lalr`, `layout`), imported when first asked: a text of
#: JAX's common forms is read without them (`plain`), and `fmt` of it never imports them
_GRAMMAR_PATH = {
    "COMPILED_MIN_CHARS": ("lalr", "COMPILED_MIN_CHARS"),
    "_build": ("lalr", "build_parser"),  # (tests build lark with these two)
    "_Layout": ("layout", "_Layout"),
}


def __getattr__(name: str):
    try:
        module, attr = _GRAMMAR_PATH[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{module}"), attr)
    globals()[name] = value
    return value


class ParseResult:
    """The program read and the warnings its text gave."""

    def __init__(self, jaxpr: Jaxpr, warnings: list[JaxprError] | None = None) -> None:
        self.jaxpr = jaxpr
        self.warnings = [] if warnings is None else warnings

    def __repr__(self) -> str:
        return f"ParseResult(jaxpr={self.jaxpr!r}, warnings={self.warnings!r})"


def parse(
    text: str, path: str = "<stdin>", *, compiled: bool | None = None, fast: bool = True
) -> ParseResult:
    """Parse printed jaxpr text into the typed IR.  Raises a located `JaxprError`.

    `compiled`: where the grammar reads the text, use lark-cython's parser (where installed)
    or lark's; by default the first for texts of `COMPILED_MIN_CHARS` or more.  Both give the
    same result.  `fast=False`: every equation is read by the grammar, and lark is used for
    every text (the fast path gives the same result; for tests).  Each error has its code
    from the start: E001, the text does not read as a jaxpr; E003 (`OverLimit`), it is over
    a limit (`diagnostics.CODES`)."""
    if "\x1b" in text:
        text = G.ANSI.sub("", text)
    if "\r" in text:
        if "\r\n" in text:
            text = text.replace("\r\n", "\n")  # same lines and columns
        elif "\n" not in text:
            text = text.replace("\r", "\n")  # old Mac line endings
    st = ParseState(text, path, fast)
    i = st.ws(0)
    if i >= st.n:
        st.fail("empty input: expected a jaxpr ('{ lambda ...')", i)
    if not text.startswith("{", i) and not G.SHARED_DEF.match(text, i):
        if text.startswith("let", i):
            st.expected("a shared jaxpr 'let NAME = { lambda ...' or a jaxpr '{ lambda ...'", i)
        st.expected("a jaxpr ('{ lambda ...')", i)
    m = huge_number(text)
    if m is not None:
        st.over_limit(
            f"a number of {len(m.group())} digits is too long (at most {MAX_DIGITS})", m.start()
        )
    # the IR has no reference cycles: pausing the cyclic GC saves its many passes over
    # the young objects built here.
    with core.gc_paused():
        # a text is first read without lark (`parse_plain`), the grammar reading what that
        # leaves
        j = parse_plain(st) if fast else None
        if j is None:
            from .lalr import parse_lark

            if fast:
                st = ParseState(text, path, fast)
            j = parse_lark(st, compiled)
    if st.outvar_pending:
        for _, pend in st.outvar_pending.values():
            st.warnings.extend(w for _, w in pend)
        st.warnings.sort(key=lambda w: (w.loc.line, w.loc.col))
    return ParseResult(j, st.warnings)
