"""Parser for the text JAX prints for a jaxpr (`str(jaxpr)`, dump `.jaxpr.txt` files).

    from jaxprtool.text.parser import parse
    result = parse(text, path)      # ParseResult(jaxpr, warnings)

The parser is the lark grammar `grammars/jaxpr.lark` (LALR(1), contextual
lexer; built and cached by `grammar.build_lark`).  Two pieces of Python go
with it:

* `_Layout`, the post-lexer.  It applies the layout rule of FORMAT.md §5.5:
  inside the equation block of the innermost `{ lambda`, outside brackets, a
  line break followed by *exactly* the column of the block's first equation
  becomes an EQSEP token (a deeper line continues the equation, a shallower
  one must be the block's `in`); `;` between equations becomes EQSEP too.
  It also reads parameter values (H3, H4): after `key=` it finds the end of
  the value as balanced text, interprets it with values.py and hands the
  parser one PARAM token.  A value that is a jaxpr, a tuple of jaxprs or
  `let NAME = {...} in {...}` is left to the grammar; a value with jaxprs
  inside (`_LinearSolveTuple(matvec={ lambda ...}, ...)`, H5) goes to the
  parser as VPIECE tokens (the raw text between the jaxprs) and the nested
  jaxprs themselves, so every nested jaxpr is parsed by the grammar, in
  place, with its own locations.
* `_Build`, the transformer, passed to `Lark(transformer=...)`: its rule
  callbacks build the IR directly while the LALR parser reduces (no parse
  tree).  Each `{ lambda` opens a symbol table when it is shifted; equation
  outputs enter the table after the equation's operands are resolved.

The fast path reads most equations without lark's lexer and LALR loop, and gives
exactly what the grammar gives (tests/test_parser_fast.py compares the two on the corpus,
generated programs and damaged texts):

* `_State.read_run`: where the post-lexer starts an equation (after an EQSEP, or on the
  line after `let`), it reads the run of *simple* equations from there with a few
  regular expressions (grammar.py `FAST_HEAD`, `FAST_OPS`, ...), each matching what the
  grammar's terminals match there or less, and hands the parser the whole run as ONE
  EQNS token (the lexer moved past it); the rule `eqn: EQNS` gives its equations.  A
  simple equation is `binders = prim[params] operands` with array types, all on its
  line but for its parameter list, whose parameters hold no jaxpr, followed by a line at
  the equation column or by the block's `in (`.  Its pieces are read by the grammar's
  own functions (`read_value`, `type_at`, `operand_atoms`), its results bound as the
  rules bind them.  The first equation that is not simple, or has an error, ends the run
  untouched (warnings it added are dropped) and is read by the grammar: every error is
  the grammar's, in its words.  A block all on the line of `let` (`let EQN; EQN in (`,
  how JAX prints small jaxprs) is read whole by `read_inline`, or not at all.  A
  parameter list of plain values is remembered with its text and reused, with fresh
  lists (`marshal` copies), where the text recurs.
* `_parse_plain`: a text of one jaxpr (one `lambda`) whose equations the fast path reads
  all (`read_run`, or `read_inline` for `let EQN; EQN in (...)` on one line) is read
  without building lark at all: the header, outputs and jaxpr are handed to `_Build`'s
  callbacks as lark would hand them.  At anything else (a nested or shared jaxpr, another
  layout, an error) the text is read by the grammar afresh.  So a small program costs no
  lark import and no grammar load (start-up), and a large flat one no LALR loop.
* `parse(..., fast=False)` reads every equation with the grammar (for tests).

Coarse tokens keep the grammar's own path fast: a binder `name:TYPE`, a literal
`VALUE:TYPE`, an equation head `name:TYPE = prim` and the operands of an
equation on one line (OPERANDS, split by `grammar.OPERAND`) are one token
each, and an equation without parameters, `name:TYPE = prim OPERANDS`, is a
single HEAD_OPS token; which terminal applies is decided by the parser state
(contextual lexer) and priorities, so that `nan:f32[]` is a binder at the
start of an equation and a literal among operands, and `in` is a variable
unless `(` follows (H1, H2).  `# ...` comments
(source_info, name_stack) are skipped with newlines; ANSI colour escapes are
removed first.  lark's syntax errors are reported as located `JaxprError`s in
the words of the format (`_diagnose`).

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
* Ref-state syntax becomes ordinary equations:
    - `y:T <- x[IDX]`            -> Eqn("get", (x, *ivars), (y,), {"indexer": Opaque(TPL)})
    - `x[IDX] <- v`              -> Eqn("swap", (x, v, *ivars), (Var(T_v, hint="_"),), {...})
                                    (the result is unused: the printer prints the
                                    set form when the output is printed as `_`)
    - `y:T, x[IDX] <- x[IDX], v` -> Eqn("swap", (x, v, *ivars), (y,), {...})
    - `x[IDX] += v`              -> Eqn("addupdate", (x, v, *ivars), (), {...})
  TPL is the printed transform text after the ref name (`[...]`, `[0,:]`,
  `[c,1:]`, `[0]{bitcast(f32)}`), with every *variable* inside it replaced by
  `$0`, `$1`, ... in order of appearance; `ivars` are those variables (integer
  indices stay in the text).  To print: substitute the names of `ivars` for
  `$k`, then `NAME(x) + TPL`.
* `print_effects=True`: `Jaxpr.effects` is the tuple of printed effect names.
* Shared definitions that nothing references are not kept (JAX prints one
  when its only use sits inside a str()-ed value, H5: such a definition and
  the identical one inside the str()-ed text become one object).
* Top-level `name=` and `fmt=` values are raw strings up to the next
  `key=`/`]`; in a broken parameter list the next key must start a line, so
  a `fmt` containing newlines and `]` is read whole (H3).
* Warnings (`ParseResult.warnings`, located): each *use* of `_` after `_` was bound
  twice in that jaxpr (read as the most recent `_` binding; the text is ambiguous,
  FORMAT §2).  A use of `_` bound once is unambiguous and read silently.
* `Eqn.loc` is the position of the equation's first token (1-based).
* 0.4.35 printed unused binders as `f_`: the hint keeps the underscore.
"""

from __future__ import annotations

import marshal
import re
import threading
from bisect import bisect_right
from dataclasses import dataclass, field

from .. import core, params
from ..core import Eqn, Jaxpr, JaxprError, Literal, Loc, ShapedArray, Var
from ..lazy import is_dtype
from ..record import prim as record_of
from . import grammar as G
from .style import walk_jaxprs
from .values import ValueError_, balanced_end, parse_value

__all__ = ["ParseResult", "parse"]


@dataclass
class ParseResult:
    jaxpr: Jaxpr
    warnings: list[JaxprError] = field(default_factory=list)


def _jaxpr_key(key: str) -> bool:
    """Parameter keys whose value is a jaxpr (a bare name there is a shared-jaxpr reference)."""
    return "jaxpr" in key or key in ("call", "branches")


# parameter keys whose value is always an unquoted string (may contain anything, H3)
_STRING_KEYS = frozenset({"name", "fmt"})

NO_TYPES = "jaxpr has no types (printed with print_shapes=False); a typed IR cannot be built"


_CONSTS = {"True": True, "False": False, "None": None}


class _SharedRef:
    __slots__ = ("name", "pos")

    def __init__(self, name: str, pos: int):
        self.name = name
        self.pos = pos


class _Nested(Exception):
    """Raised by the value scanner at a jaxpr nested inside a parameter value."""

    def __init__(self, pos: int):
        self.pos = pos


# ---------------------------------------------------------------- per-parse state


class _State:
    """Everything one parse needs: the text, symbol tables, shared-jaxpr scopes, layout frames."""

    def __init__(self, text: str, path: str, fast: bool = True):
        self.s = text
        self.fast = fast  # read simple equations without the grammar (`read_run`)
        self.n = len(text)
        self.path = path
        self.warnings: list[JaxprError] = []
        self._line_starts: list[int] | None = None
        self.frames: list = []
        # (the search needs its ` = {`: most texts have none)
        self.shared_names = set(G.SHARED_DEF_NAME.findall(text)) if " = {" in text else set()
        self.types: dict[str, core.Type] = {}
        self.tables: list[dict[str, Var]] = []
        # warnings of `_` outvars held back until the equation holding the jaxpr is read:
        # id(jaxpr) -> (jaxpr, [(outvar index, warning)])
        self.outvar_pending: dict[int, tuple[Jaxpr, list]] = {}
        self.last_outvar_pending: list = []
        # shared-jaxpr scopes
        self.pending: list[tuple[int, dict, str]] = []
        self.open_defs: dict[str, list[Jaxpr]] = {}
        # nested jaxprs by start position (for values that hold jaxprs, H5)
        self.jaxpr_at: dict[int, tuple[Jaxpr, int]] = {}
        self.last_end = 0
        # values read by the post-lexer, by start position
        self.values: dict[int, object] = {}
        self.value_memo: dict[tuple, tuple] = {}
        # parameter lists of plain values read by the fast path, by their text
        self.param_lists: dict[str, tuple[dict, list]] = {}
        # equations read by the fast path (EQNS tokens), by start position
        self.runs: dict[int, list[Eqn]] = {}
        self.first_hook = self.scan_hook({})
        # id(jaxpr) -> (name, position of `let NAME =`) of every shared definition
        self.shared_defs: dict[int, tuple[str, int]] = {}
        # post-lexer state (for error messages)
        self.eqn_start = -1
        self.block_end = -1  # where a line shallower than the equations ended the block
        self.last_shared_name = ""
        self.eqcol = 0
        self.nl_before_error = False

    # ------------------------------------------------------------ positions and errors

    def loc(self, pos: int) -> Loc:
        if self._line_starts is None:
            self._line_starts = [0] + [m.end() for m in G.NEWLINE.finditer(self.s)]
        ls = self._line_starts
        line = bisect_right(ls, pos)
        return Loc(self.path, line, pos - ls[line - 1] + 1)

    def fail(self, message: str, pos: int):
        raise JaxprError(message, self.loc(pos))

    def found(self, pos: int) -> str:
        if pos >= self.n:
            return "end of input"
        m = G.SHOW_TOKEN.match(self.s, pos, pos + _SHOWN + 1)
        t = m.group() if m else self.s[pos]
        if t == "\n":
            return "end of line"
        if len(t) > _SHOWN:
            t = t[:_SHOWN] + "..."
        if not t.isprintable():  # a NUL byte, a byte-order mark, a control character
            t = "".join(c if c.isprintable() else repr(c)[1:-1] for c in t)
        return f"'{t}'"

    def block_ended(self):
        """A line left of the block's equation column ended the block, and no `in (` follows:
        an equation there is mis-indented (the block's first one sits further right), else
        the output list is missing."""
        pos = self.block_end
        if _BINDER_START.match(self.s, pos) and self.frames:
            col = pos - (self.s.rfind("\n", 0, pos) + 1) + 1
            self.fail(
                f"an equation must start at column {self.frames[-1][2]}, the column of the first "
                f"equation of this block (this one starts at column {col})",
                pos,
            )
        self.expected("'in (' followed by the output list", pos)

    def expected(self, what: str, pos: int):
        if pos >= self.n:
            self.fail(f"unexpected end of input: expected {what}", pos)
        self.fail(f"expected {what}, found {self.found(pos)}", pos)

    def ws(self, i: int) -> int:
        return G.WS.match(self.s, i).end()

    def no_type(self, pos: int):
        self.fail(NO_TYPES, pos)

    # ------------------------------------------------------------ types

    def type_at(self, text: str, pos: int) -> core.Type:
        """The type printed as `text` (which starts at s[pos]); cached per parse."""
        t = self.types.get(text)
        if t is None:
            t, end = self.read_type(pos)
            if end != pos + len(text):
                self.fail("malformed type", pos)
            self.types[text] = t
        return t

    def read_type(self, i: int) -> tuple[core.Type, int]:
        s = self.s
        m = G.SIMPLE_TYPE.match(s, i)
        if m is not None:
            dt = m.group(1)
            if not core.is_known_dtype(dt):
                self.fail(f"unknown dtype '{dt}'", i)
            dims = tuple(int(d) for d in m.group(2).split(",")) if m.group(2) else ()
            if any(d > MAX_DIM for d in dims):
                self.fail(f"dimension too large in type (at most {MAX_DIM})", i)
            return ShapedArray(dims, dt), m.end()
        m = G.TYPE_HEAD.match(s, i)
        if m is None:
            self.expected("a type such as 'f32[3]'", i)
        name, space = m.group(1), m.group(2)
        j = m.end()
        if name == "Ref":
            if not s.startswith("{", j):
                self.expected("'{' after 'Ref'", j)
            inner, k = self.read_type(j + 1)
            if not s.startswith("}", k) or not isinstance(inner, ShapedArray):
                self.expected("'}' closing the Ref type", k)
            return core.RefType(inner, space[1:-1] if space else None), k + 1
        if not s.startswith("[", j):
            if name[:1].isupper():
                end = j
                if s.startswith(("{", "("), j):
                    end = self.balanced(j)
                return core.OpaqueType(s[i:end]), end
            if core.is_known_dtype(name):
                self.expected(f"'[' and the dimensions after '{name}'", j)
            self.fail(f"unknown dtype '{name}'", i)
        if name[:1].isupper():
            end = self.balanced(j)
            return core.OpaqueType(s[i:end]), end
        dtype = name
        mspace = None
        if space:
            if name == "key":
                dtype = name + space
            else:
                mspace = space[1:-1]
        if name != "key" and not core.is_known_dtype(name):
            self.fail(f"unknown dtype '{name}'", i)
        end = s.find("]", j)
        nl = s.find("\n", j)
        if end < 0 or (0 <= nl < end):
            self.fail("unterminated '[' in type", j)
        inside = s[j + 1 : end]
        named = None
        if ";" in inside:
            inside, named = inside.split(";", 1)
            if not _NAMED_SHAPE.fullmatch(named):
                at = j + 2 + len(inside)
                self.fail(f"invalid named axes '{named}' in type (expected e.g. 'a:8')", at)
        dims = _dims(inside)
        if any(isinstance(d, int) and d > MAX_DIM for d in dims):
            self.fail(f"dimension too large in type (at most {MAX_DIM})", j + 1)
        for d in dims:
            if isinstance(d, str) and not _valid_symbolic_dim(d):
                self.fail(f"invalid dimension '{d}' in type", j + 1)
        k = end + 1
        vma = None
        if s.startswith("{", k):
            e = self.balanced(k)
            vma = s[k + 1 : e - 1]
            k = e
        return ShapedArray(dims, dtype, memory_space=mspace, vma=vma, named_shape=named), k

    def balanced(self, i: int) -> int:
        try:
            return balanced_end(self.s, i)
        except ValueError_ as err:
            self.fail(err.message.replace(" in parameter value", ""), err.pos)

    # ------------------------------------------------------------ atoms

    def binder(self, t) -> Var:
        text = t.value
        k = text.index(":")
        return Var(self.type_at(text[k + 1 :], t.start_pos + k + 1), text[:k])

    def atom(self, t, table: dict):
        kind = t.type
        if kind == "VAR":
            name = t.value
            v = table.get(name)
            if v is None:
                if name == "inf" or name == "nan":
                    return Literal(float(name), _WEAK_F32, False)
                raise JaxprError(
                    f"variable '{name}' used before definition", Loc(self.path, t.line, t.column)
                )
            if name == "_" and _REBOUND in table:
                self.warnings.append(_underscore_warning(Loc(self.path, t.line, t.column)))
            return v
        text = t.value
        if kind == "LITERAL":
            k = text.rindex(":", 0, text.rindex("["))
            val = self.literal_value(text[:k], t.start_pos)
            ty = self.type_at(text[k + 1 :], t.start_pos + k + 1)
            if not isinstance(ty, ShapedArray):
                self.fail("a literal must have an array type", t.start_pos + k + 1)
            return Literal(val, ty)
        if text in _NAME_LIKE_LITERALS and text in table:
            return table[text]
        return Literal(self.literal_value(text, t.start_pos), _WEAK_F32, False)

    def operands(self, toks, table: dict, off: int = 0) -> tuple:
        """The atoms of OPERANDS tokens (the first one's from offset `off`)."""
        out = []
        untyped = False
        for t in toks:
            untyped |= self.operand_atoms(t.value, t.start_pos, off, table, out)
            off = 0
        if untyped:
            _fix_untyped(out, [a for a in out if type(a) is Var])
        return tuple(out)

    def operand_atoms(self, text: str, base: int, off: int, table: dict, out: list) -> bool:
        """Append the atoms of `text` (operands; it starts at s[base]) from offset `off`;
        whether an untyped (0.4.35) literal is among them."""
        untyped = False
        for m in G.OPERAND.finditer(text, off):
            name = m.group(4)
            if name is not None:
                v = table.get(name)
                if v is None or name == "_":
                    v = self.var_or_untyped(name, base + m.start(4), table)
                    if type(v) is Literal:
                        untyped = True
                out.append(v)
            elif m.group(1) is not None:
                p = base + m.start(2)
                ty = self.type_at(m.group(2), p)
                if not isinstance(ty, ShapedArray):
                    self.fail("a literal must have an array type", p)
                out.append(Literal(self.literal_value(m.group(1), base + m.start(1)), ty))
            else:
                p = base + m.start(3)
                text3 = m.group(3)
                if text3 in _NAME_LIKE_LITERALS and text3 in table:
                    out.append(table[text3])  # JAX names its 149,536th variable `infj`
                    continue
                out.append(Literal(self.literal_value(text3, p), _WEAK_F32, False))
                untyped = True
        return untyped

    def var_or_untyped(self, name: str, pos: int, table: dict):
        v = table.get(name)
        if v is None:
            if name == "inf" or name == "nan":
                return Literal(float(name), _WEAK_F32, False)
            self.fail(f"variable '{name}' used before definition", pos)
        if name == "_" and _REBOUND in table:
            self.warnings.append(_underscore_warning(self.loc(pos)))
        return v

    def literal_value(self, t: str, pos: int):
        try:
            if t[0] == "(":
                return "float0" if t.startswith("(b") else complex(t)
            if t == "True" or t == "False":
                return t == "True"
            if t == "[...]":
                return Ellipsis
            if t.endswith("j"):
                return complex(t)
            if t.lstrip("-").isdigit():
                return int(t)
            return float(t)
        except ValueError:
            self.fail(f"malformed literal '{t}'", pos)

    def var_use(self, name: str, pos: int, table: dict) -> Var:
        v = table.get(name)
        if v is None:
            self.fail(f"variable '{name}' used before definition", pos)
        return v

    def ref(self, t, table: dict) -> tuple[Var, str, list]:
        """`x[IDX]{...}` -> (ref var, template, index vars)."""
        text = t.value
        m = G.VARNAME.match(text)
        x = self.var_use(m.group(), t.start_pos, table)
        j = m.end()
        base = t.start_pos + j
        ivars: list[Var] = []

        def sub(mm, off):
            if mm.group(1):
                return mm.group(0)
            ivars.append(self.var_use(mm.group(2), base + off + mm.start(2), table))
            return f"${len(ivars) - 1}"

        tpl = G.INDEX_PART.sub(
            lambda mm: (
                G.INDEX_VAR.sub(lambda m2: sub(m2, mm.start()), mm.group())
                if mm.group()[0] == "["
                else mm.group()
            ),
            text[j:],
        )
        return x, tpl, ivars

    # ------------------------------------------------------------ parameter values (post-lexer)

    def at_delim(self, e: int) -> bool:
        s = self.s
        if s.startswith("]", e):
            return True
        j = self.ws(e)
        if j == e:
            return False
        return s.startswith("]", j) or G.KEY.match(s, j) is not None

    def raw_end(self, i: int, broken: bool) -> int:
        """End of an unquoted top-level string value (H3): up to the next `key=` or `]`."""
        pat = G.RAW_END_BROKEN if broken else G.RAW_END_FLAT
        m = pat.search(self.s, i)
        if m is None:
            self.fail("unterminated parameter list: expected ']'", i)
        return m.start()

    def scan_hook(self, done: dict | None):
        s = self.s

        def hook(i: int):
            r = done.get(i)
            if r is not None:
                return r
            if G.LAMBDA.match(s, i) or G.SHARED_DEF.match(s, i):
                raise _Nested(i)
            return None

        return hook

    def read_value(self, i: int, key: str, broken: bool):
        """`_read_value`, remembered: a program repeats the same parameter values
        (`dimension_numbers=...`) many times.  A value is remembered with the text that
        decided it (the value and the delimiter after it, `]` or the next `key=`, on the same
        line: `_read_value` looks no further) and reused where that text recurs; each reuse
        gets fresh lists."""
        s = self.s
        head = (key, broken, G.VALUE_HEAD.match(s, i).group())
        for window, v, length in self.value_memo.get(head, ()):
            if s.startswith(window, i):
                return _fresh(v), i + length
        r = self._read_value(i, key, broken)
        if r is not None and _memoizable(r[0]):
            w = self.delimiter_end(r[1])
            known = self.value_memo.setdefault(head, [])
            if w is not None and len(known) < 8:
                known.append((s[i:w], r[0], r[1] - i))
        return r

    def delimiter_end(self, e: int) -> int | None:
        """The end of the `]` or `key=` that follows a value ending at s[e], when it is on the
        value's line; else None."""
        s = self.s
        if s.startswith("]", e):
            return e + 1
        j = G.SP.match(s, e).end()
        if j == e:
            return None
        if s.startswith("]", j):
            return j + 1
        m = G.KEY.match(s, j)
        return m.end() if m is not None else None

    def _read_value(self, i: int, key: str, broken: bool):
        """The value after `key=` at s[i]: (value, end), or None when the grammar reads it
        (a jaxpr, a tuple of jaxprs, `let ... in {...}`).  Raises _Nested for a value with
        jaxprs inside."""
        s = self.s
        c = s[i : i + 1]
        if c == "{" and G.LAMBDA.match(s, i):
            return None
        if (
            c == "("
            and (m := G.JAXPR_TUPLE.match(s, i))
            and (m.group(1) or m.group(2) in self.shared_names)
        ):
            return None
        if c == "l" and G.SHARED_DEF.match(s, i):
            return None
        if key in _STRING_KEYS:
            m = G.BARE_NAME.match(s, i)
            e = m.end() if m and self.at_delim(m.end()) else self.raw_end(i, broken)
            return (None if s[i:e] == "None" else s[i:e]), e
        m = G.SIMPLE_VALUE.match(s, i)
        if m is not None:
            # the common simple values: an int, True/False/None, a tuple of ints
            if m.group(1) is not None:
                return int(m.group(1)), m.end()
            if m.group(2) is not None:
                return _CONSTS[m.group(2)], m.end()
            if m.group(3) is not None:
                return (int(m.group(3)),), m.end()
            if m.group(4) is not None:
                return tuple(int(x) for x in m.group(4).split(", ")), m.end()
            return (), m.end()
        m = G.BARE_NAME.match(s, i)
        if m and m.group() in self.shared_names and _jaxpr_key(key) and self.at_delim(m.end()):
            return _SharedRef(m.group(), i), m.end()
        if m and _jaxpr_key(key) and m.group() != "None" and self.at_delim(m.end()):
            self.fail(f"shared jaxpr '{m.group()}' is referenced but never defined", i)
        structured = c in "([{'\"" or c.isdigit() or c == "-"
        e = i
        try:
            v, e = parse_value(s, i, True, self.first_hook)
            ok = self.at_delim(e)
        except ValueError_ as err:
            if structured:
                self.fail(err.message, err.pos)
            ok = False
        except RecursionError:
            self.fail(f"the value of '{key}' is nested too deeply", i)
        if not ok and structured:
            self.not_at_delim(e, key)
        if (
            not ok
            and e > i
            and G.SP.match(s, e).end() < self.n
            and s[G.SP.match(s, e).end()] == "\n"
        ):
            # a whole value, then a line that is no `key=value` (`None` then a broken key)
            self.not_at_delim(e, key)
        if not ok:
            e = self.raw_end(i, broken)
            self.balanced_raw(i, e, key)
            return s[i:e], e
        raw = s[i:e]
        if params.format_value(v) != raw:
            v = raw if isinstance(v, str) else params.Opaque(raw)
        return v, e

    def balanced_raw(self, i: int, e: int, key: str) -> None:
        """An unquoted value kept as text (`jvp_jaxpr_fun=Wrapped function:...`) has
        balanced brackets; an unmatched one is a broken value (`jaxpr=f32 lambda ... }`)."""
        stack = []
        for k in range(i, e):
            c = self.s[k]
            if c in "([{":
                stack.append(k)
            elif c in ")]}":
                if not stack or "([{"[")]}".index(c)] != self.s[stack[-1]]:
                    self.fail(f"unmatched '{c}' in the value of '{key}'", k)
                stack.pop()
        if stack:
            self.fail(f"unclosed '{self.s[stack[-1]]}' in the value of '{key}'", stack[-1])

    def not_at_delim(self, e: int, key: str):
        k = self.ws(e)
        if k > e:
            self.expected(f"another parameter 'name=value' or ']' after the value of '{key}'", k)
        self.expected(f"a space, a newline or ']' after the value of '{key}'", e)

    def rescan(self, i: int, key: str, done: dict) -> int:
        """End of a value with nested jaxprs once all of them are read (else raises _Nested)."""
        try:
            _, e = parse_value(self.s, i, True, self.scan_hook(done))
        except ValueError_ as err:
            self.fail(err.message, err.pos)
        except RecursionError:
            self.fail(f"the value of '{key}' is nested too deeply", i)
        if not self.at_delim(e):
            self.not_at_delim(e, key)
        return e

    # ------------------------------------------------------------ the fast path

    def read_run(self, p: int, line: int, eqcol: int) -> tuple[list[Eqn], int] | None:
        """The simple equations from s[p] on, which starts an equation on line `line` at
        the block's equation column `eqcol`: (the equations, where the last one's line
        break is), or None when the first one is not simple.

        An equation is simple when it is all on its line, or its parameter list alone goes
        on over lines, its parameters hold no jaxpr, and the next line starts at the
        equation column (another equation) or is the block's `in (`.  It is read with the
        grammar's checks and values (`read_value`, `type_at`, `operand_atoms`) into the same
        `Eqn` as the grammar's rules build, and its results are bound.  The first equation
        that is not simple (or has an error) ends the run, untouched, for the grammar."""
        s = self.s
        n = self.n
        table = self.tables[-1]
        path = self.path
        warnings = self.warnings
        head = G.FAST_HEAD.match
        indent = s[p - eqcol + 1 : p]  # of the block's equations
        eqns = []
        end = -1
        while True:
            m = head(s, p)
            if m is None:
                break
            nw = len(warnings)
            try:
                r = self.fast_eqn(m, table)
            except (JaxprError, _Nested):
                r = None
            if r is not None:
                # the next line: another equation, the block's `in (`, or something else
                q = r[4]
                k = q + eqcol
                if k < n and s.startswith(indent, q + 1) and s[k] not in " \t":
                    c = s[k]
                    more = not (c == "i" and G.IN_KW.match(s, k))
                    if more and not ("a" <= c <= "z" or c == "_"):
                        r = None
                else:
                    k = G.INDENT.match(s, q + 1).end()
                    more = False
                    if not (k < n and k - q <= eqcol and G.IN_KW.match(s, k)):
                        r = None
            if r is None:
                del warnings[nw:]  # read again by the grammar
                break
            prim, inputs, outs, prm, q = r
            for v in outs:
                if v.hint == "_" and "_" in table:
                    table[_REBOUND] = v
                table[v.hint] = v
            eqns.append(Eqn(prim, inputs, outs, prm, Loc(path, line, eqcol)))
            self.eqn_start = p
            end = q
            if not more:
                break
            line += s.count("\n", p, k)
            p = k
        return (eqns, end) if eqns else None

    def read_inline(self, p: int, line: int) -> tuple[list[Eqn], int] | None:
        """The equations of a block on one line, `let EQN; EQN in (...)`, from s[p] on: (the
        equations, where the ` in (` after them is), or None (nothing bound) unless all are
        simple."""
        s = self.s
        table = self.tables[-1]
        bound = dict(table)
        nw = len(self.warnings)
        eqns = []
        while True:
            m = G.FAST_HEAD.match(s, p)
            try:
                r = self.fast_eqn(m, table, True) if m is not None else None
            except (JaxprError, _Nested):
                r = None
            if r is None:
                break
            prim, inputs, outs, prm, q = r
            for v in outs:
                _bind(table, v)
            col = p - s.rfind("\n", 0, p)
            eqns.append(Eqn(prim, inputs, outs, prm, Loc(self.path, line, col)))
            self.eqn_start = p
            if s.startswith("; ", q):
                line += s.count("\n", p, q)
                p = q + 2
            elif s.startswith(" in (", q) and G.IN_KW.match(s, q + 1):
                return eqns, q
            else:
                break
        # the grammar reads the block: as it was
        table.clear()
        table.update(bound)
        del self.warnings[nw:]
        return None

    def fast_eqn(self, m, table: dict, inline: bool = False):
        """The equation whose binders and primitive `G.FAST_HEAD` matched: (primitive,
        inputs, outputs, parameters, where it ends), or None where it is not simple after
        all.  It ends at its line break, or `inline` (`read_inline`) at the first `;`, ` in (`
        or line break."""
        s = self.s
        e = m.end()
        c = s[e : e + 1]
        prm = {}
        if c == "[":
            r = self.fast_params(e + 1)
            if r is None:
                return None
            prm, e = r
            c = s[e : e + 1]
        if c == "\n" and not inline:
            q = e
            inputs = ()
        elif c == " ":
            q = s.find("\n", e) if not inline else _inline_end(s, e)
            if q < 0:
                return None
            k = q
            while s[k - 1] in " \t":
                k -= 1  # blanks before the line break (skipped by the grammar)
            inputs = () if k <= e else self.fast_operands(e, k, table)
            if inputs is None:
                return None
        elif c == ";" and inline:
            q = e
            inputs = ()
        else:
            return None
        types = self.types
        name, text, more = m.group(1, 2, 3)
        t = types.get(text) or self.type_at(text, m.start(2))
        outs = [Var(t, name)]
        if more:
            base = m.start(3)
            for b in G.FAST_BINDER.finditer(more):
                text = b.group(2)
                t = types.get(text) or self.type_at(text, base + b.start(2))
                outs.append(Var(t, b.group(1)))
        return m.group(4), inputs, tuple(outs), prm, q

    def fast_params(self, j: int) -> tuple[dict, int] | None:
        """The parameters of the list whose `[` ends at s[j]: (dict, end of its `]`), or None
        where a value is left to the grammar (a jaxpr, a shared-jaxpr name).  A list of plain
        values is remembered with its text (the parse of a list depends on nothing else; the
        text goes up to the first `]` before a space or line break) and reused, with fresh
        lists, where that text recurs."""
        s = self.s
        a = s.find("] ", j)
        b = s.find("]\n", j)
        stop = a if b < 0 or 0 <= a < b else b
        text = s[j - 1 : stop + 1] if stop >= 0 else None
        known = self.param_lists.get(text) if text is not None else None
        if known is not None:
            d, lists = known
            d = d.copy()
            for k, blob, v in lists:
                d[k] = marshal.loads(blob) if blob is not None else _fresh(v)
            return d, stop + 1
        k = G.SP.match(s, j).end()
        broken = s[k : k + 1] in ("\n", "#")  # as the post-lexer decides at `[`
        d = {}
        while True:
            mk = G.KEY_TOKEN.match(s, j)
            if mk is None:
                break
            r = self.read_value(mk.end(), mk.group(1), broken)
            if r is None or type(r[0]) is _SharedRef:
                return None
            d[mk.group(1)], j = r
        mr = G.RSQB_TOKEN.match(s, j)
        if mr is None:
            return None
        if text is not None and mr.end() == stop + 1 and all(map(_memoizable, d.values())):
            self.param_lists[text] = _remembered(d)
        return d, mr.end()

    def fast_operands(self, e: int, q: int, table: dict) -> tuple | None:
        """The atoms of the operands s[e:q] (` a b 1.0:f32[]`) as the grammar's OPERANDS
        reads them; None where that token would end elsewhere."""
        s = self.s
        ops = s[e:q]
        if ":" not in ops and "(" not in ops:
            out = []
            for name in ops[1:].split(" "):
                v = table.get(name)
                if v is None or name == "_":
                    break  # a literal, `_`, an undefined name, or not an operand
                out.append(v)  # (the names in the table are variable names)
            else:
                return tuple(out)
        mo = G.FAST_OPS.match(s, e)
        if mo is None or mo.end() != q:
            return None
        out = []
        if self.operand_atoms(ops, e, 0, table, out):
            _fix_untyped(out, [a for a in out if type(a) is Var])
        return tuple(out)

    # ------------------------------------------------------------ shared-jaxpr scopes

    def close_scope(self, shareds: list, start: int, end: int, document: bool):
        own = {name: j for name, j, _ in shareds}
        for name, j, _ in shareds:
            lst = self.open_defs.get(name)
            if lst and lst[-1] is j:
                lst.pop()
        if not self.pending:
            return
        keep = []
        for entry in self.pending:
            pos, d, key = entry
            if not start <= pos < end:
                keep.append(entry)
                continue
            d[key] = self.subst(d[key], own, document)
            if _has_ref(d[key]):
                keep.append(entry)
        self.pending = keep

    def subst(self, v, own: dict, document: bool):
        if isinstance(v, _SharedRef):
            j = own.get(v.name)
            if j is not None:
                return j
            lst = self.open_defs.get(v.name)
            if lst:
                return lst[-1]
            if not document:
                return v
            self.fail(f"shared jaxpr '{v.name}' is referenced but never defined", v.pos)
        if isinstance(v, tuple):
            return tuple(self.subst(x, own, document) for x in v)
        if isinstance(v, params.Record):
            return params.Record(
                v.cls, tuple((k, self.subst(x, own, document)) for k, x in v.fields)
            )
        return v


#: symbol-table key (never a name) present once `_` has been bound twice in that jaxpr: from
#: then on a use of `_` may not mean the most recent `_` binding (FORMAT.md §2)
_REBOUND = " _"


#: a binder `name:` (an equation's start), for the mis-indented equation message
_BINDER_START = re.compile(r"(?:[a-z]+_?|_):")


def _bind(table: dict, v: Var) -> None:
    """Bind `v` under its printed name in the jaxpr's symbol table."""
    if v.hint == "_" and "_" in table:
        table[_REBOUND] = v
    table[v.hint] = v


#: untyped literals that are also variable names (`infj` = complex(0, inf)): a bound
#: variable of that name wins, as for `inf` and `nan`
_NAME_LIKE_LITERALS = frozenset({"infj", "nanj"})

#: the longest token quoted in a message (`found '...'`)
_SHOWN = 40

#: xmap's named axes after `;` in a type: `a:8`, `a:8,b:2`
_NAMED_SHAPE = re.compile(r"[^\W\d]\w*:[0-9]+(?:,[^\W\d]\w*:[0-9]+)*")

_SYMBOLIC_DIM = re.compile(r"(?=.*[A-Za-z_])[\w *+\-^(),@']+")


def _valid_symbolic_dim(d: str) -> bool:
    """A symbolic (`2*b + 1`, `floordiv(b, 2)`) or sharded (`8@x`) dim, brackets balanced."""
    if not _SYMBOLIC_DIM.fullmatch(d):
        return False
    depth = 0
    for c in d:
        depth += (c == "(") - (c == ")")
        if depth < 0:
            return False
    return depth == 0


def _dims(text: str) -> tuple:
    if not text:
        return ()
    out = []
    depth = 0
    start = 0
    for k, c in enumerate(text):
        if c in "([":
            depth += 1
        elif c in ")]":
            depth -= 1
        elif c == "," and depth == 0:
            out.append(text[start:k])
            start = k + 1
    out.append(text[start:])
    return tuple(int(d) if d.isdigit() else d for d in out)


_WEAK_F32 = ShapedArray((), "f32", weak_type=True)
_WEAK = {
    bool: ShapedArray((), "bool", weak_type=True),
    int: ShapedArray((), "i32", weak_type=True),
    float: _WEAK_F32,
    complex: ShapedArray((), "c64", weak_type=True),
}


def _infer(value, siblings) -> ShapedArray:
    kind = type(value)
    if kind is str:
        return ShapedArray((), "float0", weak_type=True)
    for v in siblings:
        t = v.type
        if not isinstance(t, ShapedArray):
            continue
        ok = (
            (kind is bool and t.dtype == "bool")
            # an integer-valued text is never a float: JAX printed str(np.asarray(v).item()), "2.0" for floats
            or (kind is int and t.dtype[:1] in ("i", "u"))
            or (kind is float and (core.is_float(t) or core.is_complex(t)))
            or (kind is complex and core.is_complex(t))
        )
        if ok:
            return ShapedArray((), t.dtype, weak_type=True)
    return _WEAK.get(kind, _WEAK_F32)


def _fix_untyped(atoms: list, siblings: list):
    """Give 0.4.35 untyped literals a type: a sibling variable's dtype, else i32/f32/bool."""
    for n, a in enumerate(atoms):
        if type(a) is Literal and not a.typed:
            atoms[n] = Literal(a.value, _infer(a.value, siblings), False)


def _bare_eq_at(s: str, e: int, col: int, eqcol: int) -> bool:
    """A line that starts one column right of the equation column with `= `: an equation
    without results printed by JAX < 0.4.22 (` = prim ...`, empty binders before the `=`)."""
    return col == eqcol + 1 and s.startswith("= ", e)


_PLAIN_VALUES = frozenset({int, float, complex, bool, str, type(None)})
_PLAIN_VALUES |= {params.EnumValue, params.NpScalar, params.SymExpr, params.Opaque}


def _memoizable(v) -> bool:
    """Built of immutable values (dtypes too), tuples, lists and frozensets (no jaxpr, no
    reference)."""
    t = type(v)
    if t in _PLAIN_VALUES:
        return True
    if t in (tuple, list, frozenset):
        return all(_memoizable(x) for x in v)
    return is_dtype(v)


def _inline_end(s: str, e: int) -> int:
    """Where the operands of an equation on one line may end: the first `;`, ` in (` or line
    break from s[e] on (`fast_operands` checks that they do), or -1."""
    ends = [k for k in (s.find(";", e), s.find(" in (", e), s.find("\n", e)) if k >= 0]
    return min(ends) if ends else -1


def _remembered(d: dict) -> tuple[dict, list]:
    """A parameter list of memoizable values, as `fast_params` remembers it: the dict, and
    for each value with lists inside, (key, its marshal bytes or None, the value) to make
    fresh copies from (`marshal` rebuilds plain data, lists included, in C)."""
    lists = []
    for k, v in d.items():
        if type(v) in (list, tuple) and _has_list(v):
            lists.append((k, marshal.dumps(v) if _marshalable(v) else None, _fresh(v)))
    return dict(d), lists


def _has_list(v) -> bool:
    t = type(v)
    return t is list or (t is tuple and any(map(_has_list, v)))


_MARSHALABLE = frozenset({int, float, complex, bool, str, type(None)})


def _marshalable(v) -> bool:
    """Plain data that `marshal` gives back with the same types: Python scalars, tuples and
    lists of them."""
    t = type(v)
    return t in _MARSHALABLE or (t in (tuple, list) and all(map(_marshalable, v)))


def _fresh(v):
    """A remembered parameter value with new lists (a pass may change one in place)."""
    t = type(v)
    if t is list:
        return [_fresh(x) for x in v]
    if t is tuple and any(type(x) in (list, tuple) for x in v):
        return tuple(_fresh(x) for x in v)
    return v


def _has_ref(v) -> bool:
    if isinstance(v, _SharedRef):
        return True
    if isinstance(v, tuple):
        return any(_has_ref(x) for x in v)
    if isinstance(v, params.Record):
        return any(_has_ref(x) for _, x in v.fields)
    return False


# ---------------------------------------------------------------- the post-lexer (layout, values)


class _Mixed:
    """A parameter value with jaxprs inside, being read (H5)."""

    __slots__ = ("start", "key", "depth", "done", "tl_start")

    def __init__(self, start: int, key: str, depth: int):
        self.start = start
        self.key = key
        self.depth = depth
        self.done: dict[int, tuple[None, int]] = {}
        self.tl_start: int | None = None


class _Layout:
    """Post-lexer: the §5.5 layout rule (`_EQSEP`), and parameter values as raw text."""

    always_accept = ("NL", "SEMICOLON")

    Token: type  # the lark token class of its parser (set by _build)

    def __init__(self):
        self.st: _State | None = None

    def process(self, stream, lexer_state):
        """The tokens of `stream` with the layout applied; `lexer_state` is the lexer's
        position (a value read here is skipped by advancing it)."""
        st = self.st
        s = st.s
        Token = self.Token
        line_ctr = lexer_state.line_ctr

        def emit(kind: str, a: int, b: int):
            text = s[a:b]
            t = Token(kind, text, a, line_ctr.line, line_ctr.column)
            line_ctr.feed(text, True)
            t.end_line, t.end_column, t.end_pos = line_ctr.line, line_ctr.column, b
            return t

        def run(e: int, line: int, col: int):
            """The simple equations from s[e] on as one EQNS token (the lexer moved past
            them), or None (`_State.read_run`)."""
            r = st.read_run(e, line, col)
            if r is None:
                return None
            st.runs[e] = r[0]
            return emit("EQNS", e, r[1])

        def inline(j: int):
            """The block after `let` (at s[j]) when it is all on that line (`read_inline`)
            as one EQNS token, or None."""
            e = G.INDENT.match(s, j).end()
            if e == j or G.IN_KW.match(s, e):
                return None
            r = st.read_inline(e, line_ctr.line)
            if r is None:
                return None
            line_ctr.feed(s[j:e], False)  # the blanks the grammar skips
            frames[-1][2] = line_ctr.column  # the first equation's column
            st.runs[e] = r[0]
            return emit("EQNS", e, r[1])

        fast = st.fast
        frames = st.frames  # per open `{ lambda`: [in_block, depth, eqcol, start]
        broken: list[bool] = []  # per open parameter list: broken over lines?
        mixed: list[_Mixed] = []
        n = len(s)
        head = False  # the next token starts an equation
        after_let = False
        for t in stream:
            tt = t.type
            if tt == "NL":
                # decided before the next token is lexed, so it is lexed in the right state
                if frames:
                    f = frames[-1]
                    e = t.end_pos
                    if f[0] and not f[1] and e < n and not G.IN_KW.match(s, e):
                        if (
                            after_let
                            and fast
                            and st.block_end < 0
                            and (r := run(e, t.end_line, t.end_column)) is not None
                        ):
                            # the block's first equation, on the line after `let`
                            after_let = False
                            f[2] = t.end_column
                            yield r
                        elif t.end_column == f[2] or _bare_eq_at(s, e, t.end_column, f[2]):
                            yield Token("EQSEP", "", e, t.end_line, t.end_column)
                            head = True
                            if fast and st.block_end < 0:
                                r = run(e, t.end_line, t.end_column)
                                if r is not None:
                                    head = False
                                    yield r
                        elif t.end_column < f[2]:
                            st.block_end = e
                continue
            if after_let:
                # the first token of the equation block: its column is the equation column
                after_let = False
                f = frames[-1]
                if tt != "IN_KW":
                    # ` = prim` (JAX < 0.4.22): the empty binder list sits one column left
                    f[2] = t.column - 1 if tt == "EQ_PRIM" and t.value[0] == "=" else t.column
                    st.eqn_start = t.start_pos
                else:
                    f[0] = False
            if st.block_end >= 0 and tt != "IN_KW":
                st.block_ended()
            if head:
                head = False
                st.eqn_start = t.start_pos
            if tt == "OPERANDS" or tt == "HEAD_OPS":
                yield t
                if frames and "\n" in t.value:
                    # the line break after the operands: as for NL
                    f = frames[-1]
                    e = t.end_pos
                    if f[0] and not f[1] and e < n and s[e] != "#" and not G.IN_KW.match(s, e):
                        if t.end_column == f[2] or _bare_eq_at(s, e, t.end_column, f[2]):
                            yield Token("EQSEP", "", e, t.end_line, t.end_column)
                            head = True
                            if fast and st.block_end < 0:
                                r = run(e, t.end_line, t.end_column)
                                if r is not None:
                                    head = False
                                    yield r
                        elif t.end_column < f[2]:
                            st.block_end = e
            elif tt == "HEAD" or tt == "BINDER" or tt == "EQ_PRIM":
                yield t
            elif tt == "KEY":
                i = t.end_pos
                key = t.value.lstrip()[:-1]
                try:
                    r = st.read_value(i, key, broken[-1] if broken else False)
                except _Nested as nested:
                    yield t
                    mixed.append(_Mixed(i, key, len(frames)))
                    yield emit("VPIECE", i, nested.pos)
                    continue
                if r is None:
                    yield t
                else:
                    # `key=value` as one token; the value read here
                    st.values[t.start_pos] = (key, r[0])
                    e = r[1]
                    text = s[i:e]
                    t.type = "PARAM"
                    t.value += text
                    if "\n" in text:
                        line_ctr.feed(text, True)
                    else:
                        line_ctr.char_pos = e
                        line_ctr.column += e - i
                    t.end_line, t.end_column, t.end_pos = line_ctr.line, line_ctr.column, e
                    yield t
            elif tt == "LAMBDA":
                frames.append([False, 0, 0, t.start_pos])
                if len(frames) > MAX_NESTING:
                    st.fail(_too_deep(), t.start_pos)
                yield t
            elif tt == "RBRACE":
                yield t
                if not frames:
                    continue  # (the parser rejects it)
                f = frames.pop()
                if mixed and len(frames) == mixed[-1].depth:
                    m = mixed[-1]
                    q = t.end_pos
                    if G.SHARED_IN.match(s, q):
                        continue  # a shared definition inside the value: its `in` follows
                    m.done[m.tl_start if m.tl_start is not None else f[3]] = (None, q)
                    m.tl_start = None
                    try:
                        e = st.rescan(m.start, m.key, m.done)
                    except _Nested as nested:
                        if nested.pos > q:
                            yield emit("VPIECE", q, nested.pos)
                        continue
                    mixed.pop()
                    if e > q:
                        yield emit("VPIECE", q, e)
            elif tt == "LET":
                yield t
                if frames:
                    frames[-1][0] = True
                    after_let = True
                    if fast and st.block_end < 0 and (r := inline(t.end_pos)) is not None:
                        after_let = False
                        yield r
            elif tt == "IN_KW":
                if frames and not frames[-1][1]:
                    frames[-1][0] = False
                    st.block_end = -1
                yield t
            elif tt == "LSQB":
                if frames:
                    frames[-1][1] += 1
                j = G.SP.match(s, t.end_pos).end()
                broken.append(s[j : j + 1] in ("\n", "#"))
                yield t
            elif tt == "RSQB":
                if frames:
                    frames[-1][1] -= 1
                if broken:
                    broken.pop()
                yield t
            elif tt == "LPAR":
                if frames:
                    frames[-1][1] += 1
                yield t
            elif tt == "RPAR":
                if frames:
                    frames[-1][1] -= 1
                yield t
            elif tt == "SEMICOLON":
                if frames and frames[-1][0] and not frames[-1][1]:
                    # `;` between equations (single-line form)
                    head = True
                    yield Token.new_borrow_pos("EQSEP", ";", t)
                else:
                    yield t
            elif tt == "LET_S":
                m = G.SHARED_DEF.match(s, t.start_pos)
                st.last_shared_name = m.group(1) if m else ""
                if mixed and len(frames) == mixed[-1].depth and mixed[-1].tl_start is None:
                    mixed[-1].tl_start = t.start_pos
                yield t
            else:
                yield t


# ---------------------------------------------------------------- the transformer (IR building)


class _Build:
    """Rule callbacks: each builds its piece of the IR from its children."""

    Token: type  # the lark token class of its parser (set by _build)

    def __init__(self):
        self.st: _State | None = None

    def start(self, c):
        st = self.st
        st.close_scope(c[:-1], 0, st.n + 1, True)
        if len(c) > 1:
            _share_unreferenced(c[-1], [j for _, j, _ in c[:-1]])
        return c[-1]

    def shared(self, c):
        st = self.st
        name = c[1].value
        j = c[2]
        for o in st.open_defs.get(name, ()):
            # H5: a str()-ed jaxpr re-prints a definition that JAX also hoisted to the
            # top (the same object): keep one object so printing can hoist it again
            if core.alpha_equal(o, j):
                j = o
        st.open_defs.setdefault(name, []).append(j)
        st.shared_defs.setdefault(id(j), (name, c[0].start_pos))
        return (name, j, c[0].start_pos)

    def vtoplevel(self, c):
        if len(c) == 1:
            return c[0]
        st = self.st
        start = c[0][2]
        st.close_scope(c[:-1], start, st.last_end, False)
        st.jaxpr_at[start] = (c[-1], st.last_end)
        return c[-1]

    def lam(self, c):
        self.st.tables.append({})
        return c[0]

    def constvars(self, c):
        if not c:
            return []
        st = self.st
        lst, t = c
        v = st.binder(t)
        _bind(st.tables[-1], v)
        lst.append(v)
        return lst

    invars = constvars

    def jaxpr(self, c):
        st = self.st
        st.tables.pop()
        lam = c[0]
        end = c[-1].end_pos
        effects = None
        if len(c) == 9:
            inner = c[7].value
            inner = inner[inner.index("{") + 1 : -1].strip()
            effects = tuple(x.strip() for x in inner.split(", ")) if inner else ()
        j = Jaxpr(tuple(c[1]), tuple(c[2]), c[4], c[6], effects)
        if st.last_outvar_pending:
            st.outvar_pending[id(j)] = (j, st.last_outvar_pending)
            st.last_outvar_pending = []
        st.jaxpr_at[lam.start_pos] = (j, end)
        st.last_end = end
        return j

    def eqns(self, c):
        return tuple(c[0]) if c else ()

    def eqn_list(self, c):
        # an item is an equation, or a list of them (EQNS)
        if len(c) == 1:
            return c[0] if type(c[0]) is list else c
        lst = c[0]
        x = c[2]
        if type(x) is list:
            lst.extend(x)
        else:
            lst.append(x)
        return lst

    def eqn_run(self, c):
        return self.st.runs.pop(c[0].start_pos)

    def more_operands(self, c):
        if len(c) == 1:
            return c
        lst = c[0]
        lst.append(c[1])
        return lst

    def outvars(self, c):
        st = self.st
        table = st.tables[-1]
        if _REBOUND in table:
            # `_` as an outvar after two `_` bindings: the jit equation holding this jaxpr
            # may tell which one from its result types (`_resolve_dropped_outvars`)
            pending = [(i, t) for i, t in enumerate(c) if t.type == "VAR" and t.value == "_"]
            st.last_outvar_pending = [
                (i, _underscore_warning(st.loc(t.start_pos))) for i, t in pending
            ]
            out = [
                table["_"] if t.type == "VAR" and t.value == "_" else st.atom(t, table) for t in c
            ]
        else:
            out = [st.atom(t, table) for t in c]
        if any(type(a) is Literal and not a.typed for a in out):
            _fix_untyped(out, [])
        return tuple(out)

    def eqn_plain(self, c):
        st = self.st
        table = st.tables[-1]
        first = c[0]
        n = len(c)
        k = 0
        outs = []
        while True:
            t = c[k]
            if t.type != "BINDER":
                break
            outs.append(st.binder(t))
            k += 1
        prim = t.value
        prim = prim[prim.index("=") + 1 :].lstrip()
        k += 1
        prm = {}
        if k < n and type(c[k]) is dict:
            prm = c[k]
            k += 1
            if st.outvar_pending:
                _resolve_dropped_outvars(st, prim, prm, outs)
        inputs = st.operands(c[k:], table) if k < n else ()
        for v in outs:
            _bind(table, v)
        return Eqn(prim, inputs, tuple(outs), prm, Loc(st.path, first.line, first.column))

    def eqn_head_ops(self, c):
        st = self.st
        t = c[0]
        text = t.value
        k = text.index(":")
        e = text.index(" = ", k)
        p = text.index(" ", e + 3)
        v = Var(st.type_at(text[k + 1 : e], t.start_pos + k + 1), text[:k])
        table = st.tables[-1]
        inputs = st.operands([t, *c[1]] if len(c) > 1 else c, table, p)
        _bind(table, v)
        return Eqn(text[e + 3 : p], inputs, (v,), {}, Loc(st.path, t.line, t.column))

    def eqn_head(self, c):
        st = self.st
        t = c[0]
        text = t.value
        k = text.index(":")
        e = text.rindex(" = ")
        v = Var(st.type_at(text[k + 1 : e], t.start_pos + k + 1), text[:k])
        prm = {}
        n = len(c)
        i = 1
        if n > 1 and type(c[1]) is dict:
            prm = c[1]
            i = 2
            if st.outvar_pending:
                _resolve_dropped_outvars(st, text[e + 3 :], prm, (v,))
        table = st.tables[-1]
        if i < n:
            ops = c[i:]
            if type(ops[-1]) is list:
                ops = ops[:-1] + ops[-1]
            inputs = st.operands(ops, table)
        else:
            inputs = ()
        _bind(table, v)
        return Eqn(text[e + 3 :], inputs, (v,), prm, Loc(st.path, t.line, t.column))

    def eqn_noout(self, c):
        st = self.st
        first = c[0]
        prm = {}
        k = 1
        if len(c) > 1 and type(c[1]) is dict:
            prm = c[1]
            k = 2
        inputs = st.operands(c[k:], st.tables[-1])
        return Eqn(first.value, inputs, (), prm, Loc(st.path, first.line, first.column))

    def eqn_bare(self, c):
        """` = prim[...] operands`: an equation without results as JAX < 0.4.22 printed it."""
        e = self.eqn_noout(c)
        return Eqn(c[0].value.lstrip(" =\t\n"), e.inputs, (), e.params, e.loc, bare_eq=True)

    def _loc(self, t) -> Loc:
        return Loc(self.st.path, t.line, t.column)

    def eqn_get(self, c):
        st = self.st
        table = st.tables[-1]
        y = st.binder(c[0])
        x, tpl, ivars = st.ref(c[1], table)
        _bind(table, y)
        return Eqn("get", (x, *ivars), (y,), {"indexer": params.Opaque(tpl)}, self._loc(c[0]))

    def eqn_set(self, c):
        st = self.st
        table = st.tables[-1]
        x, tpl, ivars = st.ref(c[0], table)
        a = st.atom(c[1], table)
        dummy = Var(a.type, "_")
        prm = {"indexer": params.Opaque(tpl)}
        return Eqn("swap", (x, a, *ivars), (dummy,), prm, self._loc(c[0]))

    def eqn_addupdate(self, c):
        st = self.st
        table = st.tables[-1]
        x, tpl, ivars = st.ref(c[0], table)
        a = st.atom(c[1], table)
        prm = {"indexer": params.Opaque(tpl)}
        return Eqn("addupdate", (x, a, *ivars), (), prm, self._loc(c[0]))

    def eqn_swap(self, c):
        st = self.st
        table = st.tables[-1]
        y = st.binder(c[0])
        x, tpl, ivars = st.ref(c[1], table)
        x2, tpl2, ivars2 = st.ref(c[2], table)
        if x2 is not x or tpl2 != tpl or ivars2 != ivars:
            st.fail("the two sides of a swap equation index different references", c[0].start_pos)
        a = st.atom(c[3], table)
        _bind(table, y)
        prm = {"indexer": params.Opaque(tpl)}
        return Eqn("swap", (x, a, *ivars), (y,), prm, self._loc(c[0]))

    def params(self, c):
        d = {}
        if len(c) == 3:
            st = self.st
            values = st.values
            pending = st.pending
            for x in c[1]:
                if type(x) is tuple:
                    key, v, pos = x
                else:
                    pos = x.start_pos
                    key, v = values[pos]
                d[key] = v
                if type(v) is _SharedRef or (type(v) is tuple and _has_ref(v)):
                    pending.append((pos, d, key))
        return d

    def plist(self, c):
        if len(c) == 1:
            return c
        lst = c[0]
        lst.append(c[1])
        return lst

    def param_items(self, c):
        st = self.st
        k = c[0]
        key = k.value.lstrip()[:-1]
        if len(c) == 2 and not isinstance(c[1], self.Token):
            return (key, c[1], k.start_pos)
        i = k.end_pos
        try:
            v, _ = parse_value(st.s, i, True, st.jaxpr_at.get)
        except ValueError_ as err:
            st.fail(err.message, err.pos)
        except RecursionError:
            st.fail(f"the value of '{key}' is nested too deeply", i)
        return (key, v, k.start_pos)

    def jtuple(self, c):
        st = self.st
        out = []
        for x in c:
            if isinstance(x, Jaxpr):
                out.append(x)
            elif x.value in st.shared_names:
                out.append(_SharedRef(x.value, x.start_pos))
            else:
                st.expected("a jaxpr or a shared-jaxpr name in the tuple", x.start_pos)
        return tuple(out)


# ---------------------------------------------------------------- building the parser

_PARSERS: dict[bool, object] = {}  # compiled (lark-cython)? -> the parser
_LOCK = threading.Lock()

#: shorter texts are parsed by the pure-Python parser even where lark-cython is installed:
#: importing it costs more time than it saves on them
COMPILED_MIN_CHARS = 128_000


def _connector(base: type):
    """A connector of the lexer to the post-lexer that hands the post-lexer the lexer's
    state with the token stream (lark's own passes only the stream); a subclass of the
    lexer class lark-cython's lexer thread requires."""

    class Connector(base):
        def __init__(self, lexer, postlex: _Layout):
            self.lexer = lexer
            self.postlex = postlex
            self._state = self._tokens = None

        def make_lexer_state(self, text):
            return self.lexer.make_lexer_state(text)

        def lex(self, lexer_state, parser_state):
            return self.postlex.process(self.lexer.lex(lexer_state, parser_state), lexer_state)

        def next_token(self, lexer_state, parser_state):
            # lark-cython's lexer thread pulls one token at a time
            if self._state is not lexer_state:
                self._state = lexer_state
                self._tokens = self.lex(lexer_state, parser_state)
            try:
                return next(self._tokens)
            except StopIteration:
                self._state = self._tokens = None
                raise EOFError from None

    return Connector


def _build(compiled: bool = False):
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
        frontend.lexer = _connector(Lexer)(frontend.lexer.lexer, frontend.lexer.postlexer)
        _PARSERS[compiled] = lk
    return lk


# ---------------------------------------------------------------- entry point


def parse(
    text: str, path: str = "<stdin>", *, compiled: bool | None = None, fast: bool = True
) -> ParseResult:
    """Parse printed jaxpr text into the typed IR.  Raises a located `JaxprError`.

    `compiled`: where the grammar reads the text, use lark-cython's parser (where installed)
    or lark's; by default the first for texts of `COMPILED_MIN_CHARS` or more.  Both give the
    same result.  `fast=False`: every equation is read by the grammar, and lark is used for
    every text (the fast path gives the same result; for tests)."""
    if "\x1b" in text:
        text = G.ANSI.sub("", text)
    if "\r" in text:
        if "\r\n" in text:
            text = text.replace("\r\n", "\n")  # same lines and columns
        elif "\n" not in text:
            text = text.replace("\r", "\n")  # old Mac line endings
    st = _State(text, path, fast)
    i = st.ws(0)
    if i >= st.n:
        st.fail("empty input: expected a jaxpr ('{ lambda ...')", i)
    if not text.startswith("{", i) and not G.SHARED_DEF.match(text, i):
        if text.startswith("let", i):
            st.expected("a shared jaxpr 'let NAME = { lambda ...' or a jaxpr '{ lambda ...'", i)
        st.expected("a jaxpr ('{ lambda ...')", i)
    m = _huge_number(text)
    if m is not None:
        st.fail(
            f"a number of {len(m.group())} digits is too long (at most {MAX_DIGITS})", m.start()
        )
    # the IR has no reference cycles: pausing the cyclic GC saves its many passes over
    # the young objects built here.
    with core.gc_paused():
        # a text of one jaxpr (one `lambda`) is first read without lark (`_parse_plain`)
        plain = fast and text.count("lambda") == 1
        j = _parse_plain(st) if plain else None
        if j is None:
            if plain:
                st = _State(text, path, fast)
            j = _parse_lark(st, compiled)
    if st.outvar_pending:
        for _, pend in st.outvar_pending.values():
            st.warnings.extend(w for _, w in pend)
        st.warnings.sort(key=lambda w: (w.loc.line, w.loc.col))
    return ParseResult(j, st.warnings)


# ---------------------------------------------------------------- texts read without lark


class _Tok:
    """A token as `_Build`'s callbacks read lark's: kind, text, position (line and column
    from the position)."""

    __slots__ = ("type", "value", "start_pos", "end_pos", "_st")

    def __init__(self, st: _State, kind: str, value: str, start_pos: int):
        self.type = kind
        self.value = value
        self.start_pos = start_pos
        self.end_pos = start_pos + len(value)
        self._st = st

    @property
    def line(self) -> int:
        return self._st.loc(self.start_pos).line

    @property
    def column(self) -> int:
        return self._st.loc(self.start_pos).col


def _parse_plain(st: _State) -> Jaxpr | None:
    """The jaxpr of a text that is one jaxpr whose equations the fast path reads all
    (`_State.read_run`, `read_inline`), read without building lark: the grammar's callbacks
    (`_Build`) are called as lark would call them, so the IR is the same.  None (with `st`
    spent) at anything else: another layout, a nested or shared jaxpr, an error; the
    grammar then reads the text afresh, and reports errors in its words."""
    try:
        return _plain(st)
    except (JaxprError, _Nested):
        return None


def _plain(st: _State) -> Jaxpr | None:
    s = st.s
    n = st.n
    b = _Build()
    b.st = st
    i = st.ws(0)
    m = G.LAMBDA.match(s, i)
    if m is None:
        return None
    lam = b.lam([_Tok(st, "LAMBDA", m.group(), i)])
    consts, j = _plain_binders(st, b, m.end())
    if not s.startswith(";", j):
        return None
    invars, j = _plain_binders(st, b, j + 1)
    if not s.startswith(".", j):
        return None
    j = G.BLANK.match(s, j + 1).end()
    if not G.LET.match(s, j):
        return None
    j += 3
    if s.startswith("\n", j):  # equations on their own lines
        e = G.BLANK.match(s, j).end()
        if G.IN_KW.match(s, e):
            eqns, k = [], e
        else:
            r = st.read_run(e, s.count("\n", 0, e) + 1, e - s.rfind("\n", 0, e))
            if r is None:
                return None
            eqns, q = r
            k = G.INDENT.match(s, q + 1).end()
            if not G.IN_KW.match(s, k):
                return None  # the run ended before an equation it does not read
    else:  # on the line of `let`
        e = G.INDENT.match(s, j).end()
        if e == j:
            return None
        if G.IN_KW.match(s, e):
            eqns, k = [], e
        else:
            r = st.read_inline(e, s.count("\n", 0, e) + 1)
            if r is None:
                return None
            eqns, k = r[0], r[1] + 1
    r = _plain_outvars(st, k + 4)  # after `in (`
    if r is None:
        return None
    outs, j = r
    j = G.BLANK.match(s, j).end()
    if not s.startswith("}", j) or st.ws(j + 1) != n:
        return None
    rbrace = _Tok(st, "RBRACE", "}", j)
    jaxpr = b.jaxpr([lam, consts, invars, None, tuple(eqns), None, b.outvars(outs), rbrace])
    return b.start([jaxpr])


def _plain_binders(st: _State, b: _Build, j: int) -> tuple[list[Var], int]:
    """The binders from s[j] on, bound as `_Build.constvars` binds them, and where the text
    after them is."""
    s = st.s
    lst = b.constvars([])
    while True:
        j = G.BLANK.match(s, j).end()
        m = G.FAST_BINDER_TOKEN.match(s, j)
        if m is None:
            return lst, j
        lst = b.constvars([lst, _Tok(st, "BINDER", m.group(), j)])
        j = m.end()


def _plain_outvars(st: _State, j: int) -> tuple[list[_Tok], int] | None:
    """The tokens of an output list from s[j] on (after its `(`), and where its `)` ends;
    None where the grammar would read other tokens there."""
    s = st.s
    toks = []
    j = G.BLANK.match(s, j).end()
    if s.startswith(")", j):
        return toks, j + 1
    while True:
        m = G.OUTVAR_TOKEN.match(s, j)
        if m is None:
            return None
        kind = "LITERAL" if m.group(1) else "ULITERAL" if m.group(2) else "VAR"
        toks.append(_Tok(st, kind, m.group(), j))
        j = G.BLANK.match(s, m.end()).end()
        if s.startswith(",", j):
            j = G.BLANK.match(s, j + 1).end()
        elif not s.startswith(")", j):
            return None
        if s.startswith(")", j):
            return toks, j + 1


def _parse_lark(st: _State, compiled: bool | None) -> Jaxpr:
    """The text of `st` read by the grammar (one parser object: its post-lexer and
    transformer hold this parse's state)."""
    lk = _build(st.n >= COMPILED_MIN_CHARS if compiled is None else compiled)
    with _LOCK:
        lk.options.postlex.st = st
        lk.options.transformer.st = st
        try:
            j = lk.parse(st.s)
        except _lark_errors() as e:
            raise _error(st, e) from None
        except RecursionError:
            raise JaxprError("input is nested too deeply", st.loc(st.last_end)) from None
        finally:
            lk.options.postlex.st = lk.options.transformer.st = None
        if st.shared_defs:
            _check_shared(st, j)
    return j


def _underscore_warning(loc: Loc) -> JaxprError:
    return JaxprError(
        "use of '_' is ambiguous: it is read as the most recent '_' binding in this jaxpr, "
        "which may not be the value JAX meant (FORMAT.md §2)",
        loc,
    )


def _resolve_dropped_outvars(st: _State, prim: str, prm: dict, outs) -> None:
    """`_:f32[3] b:f32[3] _:f32[] = jit[jaxpr={ ... in (_, b, _) }]`: JAX names the nested
    jaxpr's outvars after the equation's results, so an outvar `_` is one of the nested
    jaxpr's `_` binders of that result's type.  Read it as the most recent such binder
    (instead of the most recent `_`); warn only where several have that type and the
    result may be used (a top-level `_` result is not: JAX's `_dropvars`)."""
    key = record_of(prim).suggest_names
    inner = prm.get(key) if key is not None else None
    entry = st.outvar_pending.pop(id(inner), None) if isinstance(inner, Jaxpr) else None
    if entry is None:
        return
    pending = entry[1]
    if len(inner.outvars) != len(outs):
        st.warnings.extend(w for _, w in pending)
        return
    bound = [v for v in (*inner.constvars, *inner.invars) if v.hint == "_"]
    bound += [v for e in inner.eqns for v in e.outputs if v.hint == "_"]
    outvars = list(inner.outvars)
    top = len(st.tables) == 1  # a top-level `_` result is unused: any such binder will do
    for i, w in pending:
        same = [v for v in bound if v.type == outs[i].type]
        if same:
            outvars[i] = same[-1]
        if len(same) != 1 and not (top and same and outs[i].hint == "_"):
            st.warnings.append(w)
    prm[key] = inner.replace(outvars=tuple(outvars))


def _share_unreferenced(top: Jaxpr, defs: list[Jaxpr]) -> None:
    """H5: JAX hoists a jaxpr it finds twice inside `str()`-ed values (custom_linear_solve's
    `_LinearSolveTuple`: the forward and the transposed solve hold the same objects) and
    then prints it inline there, so its `let NAME = ... in` is referenced by nothing.  Such
    a definition is the same object as a jaxpr alpha-equal to it inside each of those
    values (a field, or a jaxpr nested in one): make them one object, so that the printer
    finds it shared and hoists it again.

    A value whose fields are all alpha-equal to the definitions an earlier value took holds
    those objects again (the transposed solve's roles are the forward one's, exchanged).
    Otherwise its fields take the definitions in the order JAX printed them: a field takes
    the next one not taken yet when it is alpha-equal to it, else one the value's earlier
    fields took (`sl.solve(assume_a='pos')`: matvec and vecmat are one object, `jaxpr`,
    while solve and transpose_solve are two, `jaxpr1` and `jaxpr2`)."""
    reached = {id(j) for j in walk_jaxprs(top, core.eqn_subjaxprs)}
    loose = [j for j in defs if id(j) not in reached]
    if not loose:
        return
    matcher = _LooseDefs(loose)
    for e in list(core.all_eqns(top)):
        for k, v in e.params.items():
            if isinstance(v, params.Record) and any(isinstance(x, Jaxpr) for _, x in v.fields):
                e.params[k] = params.Record(v.cls, matcher.fields(v.fields))


class _LooseDefs:
    """The unreferenced definitions, given out to the fields of `str()`-ed values."""

    def __init__(self, loose: list[Jaxpr]):
        self.order = loose  # in the text's order
        self.taken: set[int] = set()
        self.values: list[list[Jaxpr]] = []  # the definitions each earlier value took

    def fields(self, fields) -> tuple:
        for earlier in self.values:
            again = self._again(fields, earlier)
            if again is not None:
                return again
        took: list[Jaxpr] = []
        out = tuple((f, self._field(x, took)) for f, x in fields)
        if took:
            self.values.append(took)
        return out

    def _again(self, fields, earlier: list[Jaxpr]) -> tuple | None:
        """`fields` as the objects of `earlier`, each jaxpr field alpha-equal to one of them
        (distinct ones preferred, as the roles are exchanged), or None."""
        given: list[Jaxpr] = []
        out = []
        for f, x in fields:
            if not isinstance(x, Jaxpr):
                out.append((f, x))
                continue
            d = self._among(x, [d for d in earlier if all(g is not d for g in given)])
            if d is None:
                d = self._among(x, given)
            if d is None:
                return None
            given.append(d)
            out.append((f, d))
        return tuple(out)

    @staticmethod
    def _among(x, defs: list[Jaxpr]) -> Jaxpr | None:
        if not isinstance(x, Jaxpr):
            return None
        return next((d for d in defs if d is x or core.alpha_equal(d, x)), None)

    def _field(self, x, took: list[Jaxpr]):
        """`x` (a field value), or the definition it stands for; a jaxpr nested in it
        (itself not one) likewise."""
        if not isinstance(x, Jaxpr):
            return x
        free = [d for d in self.order if id(d) not in self.taken]
        d = self._among(x, free[:1])
        if d is None:
            d = self._among(x, took)
        if d is None:
            d = self._among(x, free)
        if d is not None:
            self.taken.add(id(d))
            if all(t is not d for t in took):
                took.append(d)
            return d
        for e in x.eqns:
            for k, v in e.params.items():
                if isinstance(v, Jaxpr):
                    e.params[k] = self._field(v, took)
                elif type(v) is tuple and any(isinstance(y, Jaxpr) for y in v):
                    e.params[k] = tuple(self._field(y, took) for y in v)
        return x


def _check_shared(st: _State, top: Jaxpr) -> None:
    """Shared jaxprs may not use themselves, directly or through other shared jaxprs
    (`let f = {... jaxpr=g ...} in let g = {... jaxpr=f ...} in`): JAX never prints such
    text, and every command would recurse forever.  Refused at the equation that closes the
    cycle.  A chain of shared jaxprs may not nest deeper than MAX_NESTING either (nesting
    written out in the text is limited by the post-lexer).  Depth first without recursion;
    each jaxpr once."""
    on_path: dict[int, int] = {}  # id(jaxpr) -> index in `path`
    path: list[Jaxpr] = []
    height: dict[int, int] = {}  # id(jaxpr) -> levels of jaxprs from it down (itself: 1)
    stack = []  # per jaxpr on the path: (jaxpr, iterator over (equation, nested jaxpr))

    def enter(j: Jaxpr) -> None:
        on_path[id(j)] = len(path)
        path.append(j)
        height[id(j)] = 1
        stack.append((j, ((e, sub) for e in j.eqns for sub in core.eqn_subjaxprs(e))))

    enter(top)
    while stack:
        j, it = stack[-1]
        nxt = next(it, None)
        if nxt is None:
            stack.pop()
            path.pop()
            del on_path[id(j)]
            if path:
                p = id(path[-1])
                height[p] = max(height[p], height[id(j)] + 1)
            continue
        e, sub = nxt
        k = id(sub)
        if k in on_path:
            cycle = path[on_path[k] :] + [sub]
            names = [st.shared_defs[id(x)][0] for x in cycle if id(x) in st.shared_defs]
            name = names[0] if names else "?"
            raise JaxprError(
                f"shared jaxpr '{name}' uses itself ({' -> '.join(names)}): "
                "shared jaxprs cannot be recursive",
                e.loc or st.loc(st.shared_defs.get(k, ("", 0))[1]),
            )
        if k in height:
            height[id(j)] = max(height[id(j)], height[k] + 1)
            continue
        enter(sub)
    if height[id(top)] > MAX_NESTING:
        # follow the deepest chain down to the equation that goes one level too deep
        j, level = top, 1
        while True:
            e, sub = max(
                ((e, sub) for e in j.eqns for sub in core.eqn_subjaxprs(e)),
                key=lambda es: height[id(es[1])],
            )
            level += 1
            if level > MAX_NESTING:
                raise JaxprError(_too_deep(), e.loc)
            j = sub


def _too_deep() -> str:
    return f"jaxprs nest too deeply (at most {MAX_NESTING} levels of nested jaxprs)"


#: the deepest nesting of jaxprs accepted (every command recurses once or more per level)
MAX_NESTING = 100

#: longer digit strings are refused before any int() (Python's limit is 4300 digits)
MAX_DIGITS = 400
_HUGE_NUMBER = re.compile(r"[0-9]{%d,}" % (MAX_DIGITS + 1))
_TWO_DIGITS = re.compile(r"(?=[0-9]{2})")
_STEP = (MAX_DIGITS + 1) // 2


def _huge_number(text: str):
    """The first run of more than MAX_DIGITS digits in `text`, or None.  Such a run holds two
    consecutive characters of those at multiples of `_STEP`, and all between them: the text
    is searched only where some two and all between them are digits."""
    for m in _TWO_DIGITS.finditer(text[::_STEP]):
        k = m.start() * _STEP
        if text[k : k + _STEP + 1].isdigit():
            return _HUGE_NUMBER.search(text)
    return None


#: a dimension must fit JAX's int64 shapes
MAX_DIM = 2**63 - 1


def _lark_errors():
    import lark.exceptions

    return lark.exceptions.UnexpectedInput


# names of terminals in messages
_SHOW = {
    "LAMBDA": "'{ lambda'",
    "RBRACE": "'}'",
    "LET": "'let'",
    "IN_KW": "'in ('",
    "IN_SHARED": "'in'",
    "BINDER": "a binder 'name:type'",
    "LITERAL": "a literal",
    "VAR": "a variable",
    "PRIM": "a primitive name",
    "KEY": "a parameter 'name=value'",
    "SEMICOLON": "';'",
    "DOT": "'.'",
    "COMMA": "','",
    "LPAR": "'('",
    "RPAR": "')'",
    "LSQB": "'['",
    "RSQB": "']'",
    "EQUAL": "'='",
    "NAME": "a name",
    "REF": "a reference 'x[...]'",
    "REF_HEAD": "a reference 'x[...]'",
    "EFFECTS": "': { effects }'",
    "HEAD": "an equation",
    "HEAD_OPS": "an equation",
    "EQNS": "an equation",
    "OPERANDS": "an operand",
    "ULITERAL": "a literal",
    "PARAM": "a parameter 'name=value'",
    "EQSEP": "a new equation",
    "EQ_PRIM": "'=' and a primitive name",
    "VPIECE": "a parameter value",
    "$END": "end of input",
}


def _error(st: _State, e) -> JaxprError:
    """A lark parse error as a located JaxprError in the words of the format."""
    tok = getattr(e, "token", None)
    if tok is not None:
        expected = set(e.expected)
        pos = st.n if tok.type == "$END" else tok.start_pos
    else:
        expected = set(e.allowed or ())
        pos = e.pos_in_stream
    ps = getattr(e, "state", None)
    if ps is not None:
        # what the parser accepts here (the lexer's set is wider: it is shared by states)
        expected = set(ps.parse_conf.parse_table.states[ps.position])
    expected.discard("NL")
    try:
        _diagnose(st, expected, pos)
    except JaxprError as err:
        return err
    return JaxprError("syntax error", st.loc(pos))


def _diagnose(st: _State, expected: set, pos: int):
    s = st.s
    n = st.n
    # binders without types (print_shapes=False) at the start of the current equation
    k = st.eqn_start
    if 0 <= k <= pos and "\n" not in s[k:pos] and G.UNTYPED_BINDERS.match(s, k):
        st.no_type(G.VARNAME.match(s, k).end())
    # a malformed type in a binder: read it to say what is wrong with it
    m = G.VARNAME.match(s, pos)
    name_at = pos if m is not None and s.startswith(":", m.end()) else -1
    if name_at < 0 and s.startswith(":", pos):
        k = pos
        while k > 0 and (s[k - 1].islower() or s[k - 1] == "_"):
            k -= 1
        if k < pos and k == st.eqn_start:
            name_at = k
    if name_at >= 0 and (name_at == st.eqn_start or "BINDER" in expected):
        st.read_type(G.VARNAME.match(s, name_at).end() + 1)
    if "BINDER" in expected and ("SEMICOLON" in expected or "DOT" in expected):
        m = G.VARNAME.match(s, pos)
        if m is not None:
            name = m.group()
            j = m.end()
            k = G.SP.match(s, j).end()
            if name == "let" or s[k : k + 1] not in (".", ";", "_") and not s[k : k + 1].islower():
                st.expected(
                    "':' and a type after '" + name + "'" if name != "let" else "'.' before 'let'",
                    pos,
                )
            st.no_type(j)
        st.expected(
            "a binder 'name:type' or ';'"
            if "SEMICOLON" in expected
            else "a binder 'name:type' or '.'",
            pos,
        )
    if "HEAD" in expected:
        st.expected("an equation", pos)
    if "IN_KW" in expected and "OPERANDS" in expected:
        # among operands
        if 0 <= st.block_end <= pos:
            st.block_ended()
        if (
            pos > 0
            and s[pos - 1] not in " \t\n"
            and (G.VARNAME.match(s, pos) or G.LITERAL.match(s, pos))
        ):
            st.expected("a space between operands", pos)
        m = G.LITERAL.match(s, pos)
        if m is not None and name_at < 0:
            e = m.end()
            if s.startswith(":", e):
                st.read_type(e + 1)
            elif not G.ATOM_END.match(s, e):
                st.expected("':' and a type after the literal, or a separator", e)
        if name_at >= 0:
            eqcol = st.frames[-1][2] if st.frames else 0
            st.fail(
                f"a binder cannot appear among operands; a new equation must start at column {eqcol}, "
                "the column of the first equation of this block",
                name_at,
            )
        if pos >= n or s[pos] in "),}" or s[:pos].rstrip(" \t\r").endswith("\n"):
            st.expected("'in (' followed by the output list", pos)
        st.expected("an operand (a variable or a literal)", pos)
    if "IN_KW" in expected:
        st.expected("'in (' followed by the output list", pos)
    if "RPAR" in expected and ("VAR" in expected or "COMMA" in expected):
        if "VAR" in expected:
            st.expected("an output variable or literal", pos)
        st.expected("',' or ')' in the output list", pos)
    if "RBRACE" in expected and "EFFECTS" in expected:
        st.expected("'}' closing the jaxpr", pos)
    if "$END" in expected and not st.frames:
        st.fail(f"unexpected text after the jaxpr: {st.found(pos)}", pos)
    if "KEY" in expected and "RSQB" in expected:
        st.expected("a parameter 'name=value' or ']'", pos)
    if "LAMBDA" in expected and "LET_S" in expected:
        if s.startswith("{", pos):
            st.expected("'{ lambda'", pos)
        st.expected("a jaxpr ('{ lambda ...')", pos)
    if "LAMBDA" in expected and "NAME" in expected:
        st.expected("a jaxpr or a shared-jaxpr name in the tuple", pos)
    if "IN_SHARED" in expected:
        st.expected(f"'in' after the definition of shared jaxpr '{st.last_shared_name}'", pos)
    if "LET" in expected:
        st.expected("'let'", pos)
    if "EQ_PRIM" in expected:
        k = G.SP.match(s, pos).end()
        if s.startswith("=", k):
            st.expected("a primitive name", st.ws(k + 1))
        st.expected("another binder or '=' after the equation's binders", pos)
    if "LAMBDA" in expected:
        st.expected("'{ lambda'", pos)
    names = sorted({_SHOW.get(x, x) for x in expected if not x.startswith("__")})
    st.expected(" or ".join(names) if len(names) < 4 else "one of " + ", ".join(names), pos)
