"""Parser for the text JAX prints for a jaxpr (`str(jaxpr)`, dump `.jaxpr.txt` files).

    from jaxprtool.text.parser import parse
    result = parse(text, path)      # ParseResult(jaxpr, warnings)

A hand-written recursive-descent parser over compiled regular expressions
(see `grammar.py` for the token patterns and `grammars/jaxpr.lark` for the
reference grammar).  The layout rule of FORMAT.md §5.5 is applied while
reading operands: a newline followed by a token *deeper* than the equation's
first column continues the equation, one at *exactly* that column starts the
next equation, a shallower one ends the block (its `in` follows).  `;`
separates equations in the single-line form.  `# ...` comments (source_info,
name_stack) are skipped wherever whitespace may occur outside parameter
values; ANSI colour escapes are removed first.

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
* Warnings (`ParseResult.warnings`, located): each *use* of `_` (read as the
  most recent `_` binding of that jaxpr; the text is ambiguous, FORMAT §2).
* `Eqn.loc` is the position of the equation's first token (1-based).
* 0.4.35 printed unused binders as `f_`: the hint keeps the underscore.
"""

from __future__ import annotations

import gc
from bisect import bisect_right
from dataclasses import dataclass, field

from .. import core, params
from ..core import Eqn, Jaxpr, JaxprError, Literal, Loc, ShapedArray, Var
from . import grammar as G
from .values import ValueError_, balanced_end, parse_value

__all__ = ["ParseResult", "parse"]


@dataclass
class ParseResult:
    jaxpr: Jaxpr
    warnings: list[JaxprError] = field(default_factory=list)


def parse(text: str, path: str = "<stdin>") -> ParseResult:
    """Parse printed jaxpr text into the typed IR.  Raises a located `JaxprError`."""
    if "\x1b" in text:
        text = G.ANSI.sub("", text)
    if "\r\n" in text:
        text = text.replace("\r\n", "\n")  # same lines and columns
    p = _Parser(text, path)
    # the IR has no reference cycles: pausing the cyclic GC saves its many passes over
    # the young objects built here
    gc_was_on = gc.isenabled()
    gc.disable()
    try:
        j = p.document()
    except RecursionError:
        raise JaxprError("input is nested too deeply", p.loc(p.deepest)) from None
    finally:
        if gc_was_on:
            gc.enable()
    return ParseResult(j, p.warnings)


def _jaxpr_key(key: str) -> bool:
    """Parameter keys whose value is a jaxpr (a bare name there is a shared-jaxpr reference)."""
    return "jaxpr" in key or key in ("call", "branches")


# parameter keys whose value is always an unquoted string (may contain anything, H3)
_STRING_KEYS = frozenset({"name", "fmt"})


class _SharedRef:
    __slots__ = ("name", "pos")

    def __init__(self, name: str, pos: int):
        self.name = name
        self.pos = pos


class _Scope:
    """Shared-jaxpr names of one toplevel (`let NAME = ... in` prefix + main jaxpr)."""

    __slots__ = ("defs", "pending")

    def __init__(self):
        self.defs: dict[str, Jaxpr] = {}
        self.pending: list[tuple[dict, str]] = []


class _Parser:
    def __init__(self, text: str, path: str):
        self.s = text
        self.n = len(text)
        self.path = path
        self.warnings: list[JaxprError] = []
        self.line_starts = [0] + [m.end() for m in G.NEWLINE.finditer(text)]
        self.shared_names = set(G.SHARED_DEF_NAME.findall(text))
        self.scopes: list[_Scope] = []
        self.deepest = 0
        self.types: dict[str, core.Type] = {}

    # ------------------------------------------------------------ positions and errors

    def loc(self, pos: int) -> Loc:
        line = bisect_right(self.line_starts, pos)
        return Loc(self.path, line, pos - self.line_starts[line - 1] + 1)

    def col(self, pos: int) -> int:
        return pos - self.s.rfind("\n", 0, pos)

    def fail(self, message: str, pos: int):
        raise JaxprError(message, self.loc(pos))

    def found(self, pos: int) -> str:
        if pos >= self.n:
            return "end of input"
        m = G.SHOW_TOKEN.match(self.s, pos)
        t = m.group() if m else self.s[pos]
        if t == "\n":
            return "end of line"
        return f"'{t}'"

    def expected(self, what: str, pos: int):
        if pos >= self.n:
            self.fail(f"unexpected end of input: expected {what}", pos)
        self.fail(f"expected {what}, found {self.found(pos)}", pos)

    def ws(self, i: int) -> int:
        return G.WS.match(self.s, i).end()

    # ------------------------------------------------------------ document and shared jaxprs

    def document(self) -> Jaxpr:
        i = self.ws(0)
        if i >= self.n:
            self.fail("empty input: expected a jaxpr ('{ lambda ...')", i)
        j, i = self.toplevel(i)
        i = self.ws(i)
        if i < self.n:
            self.fail(f"unexpected text after the jaxpr: {self.found(i)}", i)
        return j

    def toplevel(self, i: int) -> tuple[Jaxpr, int]:
        """`(let NAME = {..} in)* {..}` with its own scope of shared names."""
        scope = _Scope()
        self.scopes.append(scope)
        s = self.s
        while True:
            m = G.SHARED_DEF.match(s, i)
            if m is None:
                break
            name = m.group(1)
            j, i = self.jaxpr(m.end())
            for outer in self.scopes[:-1]:
                # H5: a str()-ed jaxpr re-prints a definition that JAX also hoisted to
                # the top (the same object): keep one object so printing can hoist it again
                o = outer.defs.get(name)
                if o is not None and core.alpha_equal(o, j):
                    j = o
            scope.defs[name] = j
            i = self.ws(i)
            if not G.IN_SHARED.match(s, i):
                self.expected(f"'in' after the definition of shared jaxpr '{name}'", i)
            i = self.ws(i + 2)
        if not s.startswith("{", i):
            self.expected("a jaxpr ('{ lambda ...')", i)
        j, i = self.jaxpr(i)
        self.scopes.pop()
        self.resolve(scope)
        return j, i

    def resolve(self, scope: _Scope):
        for d, key in scope.pending:
            d[key] = self.subst(d[key], scope)
            if self._has_ref(d[key]):
                # a forward reference to a definition of an enclosing toplevel
                self.scopes[-1].pending.append((d, key))

    def subst(self, v, scope: _Scope):
        if isinstance(v, _SharedRef):
            if v.name in scope.defs:
                return scope.defs[v.name]
            for outer in reversed(self.scopes):
                if v.name in outer.defs:
                    return outer.defs[v.name]
            if self.scopes:
                # defined later in an enclosing toplevel: resolve there
                return v
            self.fail(f"shared jaxpr '{v.name}' is referenced but never defined", v.pos)
        if isinstance(v, tuple):
            return tuple(self.subst(x, scope) for x in v)
        if isinstance(v, params.Record):
            return params.Record(v.cls, tuple((k, self.subst(x, scope)) for k, x in v.fields))
        return v

    def _has_ref(self, v) -> bool:
        if isinstance(v, _SharedRef):
            return True
        if isinstance(v, tuple):
            return any(self._has_ref(x) for x in v)
        if isinstance(v, params.Record):
            return any(self._has_ref(x) for _, x in v.fields)
        return False

    # ------------------------------------------------------------ jaxpr

    def jaxpr(self, i: int) -> tuple[Jaxpr, int]:
        s = self.s
        if i > self.deepest:
            self.deepest = i
        m = G.LAMBDA.match(s, i)
        if m is None:
            self.expected("'{ lambda'", i)
        i = m.end()
        table: dict[str, Var] = {}
        constvars, i = self.binders(i, ";", table)
        invars, i = self.binders(i + 1, ".", table)
        i = self.ws(i + 1)
        if not G.LET.match(s, i):
            self.expected("'let'", i)
        i = self.ws(i + 3)
        eqns = []
        if not G.IN_KW.match(s, i):
            eqcol = self.col(i)
            while True:
                e, i = self.eqn(i, eqcol, table)
                eqns.append(e)
                j = G.SP.match(s, i).end()
                c = s[j : j + 1]
                if c == ";":
                    i = self.ws(j + 1)
                    continue
                if c == "\n" or c == "#":
                    k = self.ws(j)
                    col = self.col(k)
                    if col == eqcol and not G.IN_KW.match(s, k):
                        i = k
                        continue
                    if col > eqcol:
                        self.expected("a new equation or 'in'", k)
                    i = k
                    break
                i = j
                break
        if not G.IN_KW.match(s, i):
            self.expected("'in (' followed by the output list", i)
        outvars, i = self.outvars(i + 3, table)
        i = G.SP.match(s, i).end()
        effects = None
        if s.startswith(":", i):
            effects, i = self.effects(i + 1)
        i = self.ws(i)
        if not s.startswith("}", i):
            self.expected("'}' closing the jaxpr", i)
        return Jaxpr(tuple(constvars), tuple(invars), tuple(eqns), tuple(outvars), effects), i + 1

    def binders(self, i: int, term: str, table: dict) -> tuple[list[Var], int]:
        s = self.s
        out = []
        while True:
            i = self.ws(i)
            if s.startswith(term, i):
                return out, i
            m = G.VARNAME.match(s, i)
            if m is None:
                what = (
                    "a binder 'name:type' or ';'" if term == ";" else "a binder 'name:type' or '.'"
                )
                self.expected(what, i)
            name = m.group()
            j = m.end()
            if not s.startswith(":", j):
                k = G.SP.match(s, j).end()
                if (
                    name == "let"
                    or s[k : k + 1] not in (".", ";", "_")
                    and not s[k : k + 1].islower()
                ):
                    self.expected(
                        "':' and a type after '" + name + "'"
                        if name != "let"
                        else "'.' before 'let'",
                        i,
                    )
                self.no_type(j)
            t, i = self.type(j + 1)
            v = Var(t, name)
            table[name] = v
            out.append(v)

    def no_type(self, pos: int):
        self.fail(
            "jaxpr has no types (printed with print_shapes=False); a typed IR cannot be built", pos
        )

    def outvars(self, i: int, table: dict) -> tuple[list, int]:
        s = self.s
        i = self.ws(i)
        if not s.startswith("(", i):
            self.expected("'(' starting the output list", i)
        i = self.ws(i + 1)
        out = []
        while not s.startswith(")", i):
            a, i = self.atom(i, table, None)
            if a is None:
                self.expected("an output variable or literal", i)
            out.append(a)
            i = self.ws(i)
            if s.startswith(",", i):
                i = self.ws(i + 1)
            elif not s.startswith(")", i):
                self.expected("',' or ')' in the output list", i)
        self.fix_untyped(out, [])
        return out, i + 1

    def effects(self, i: int) -> tuple[tuple[str, ...], int]:
        s = self.s
        i = self.ws(i)
        if not s.startswith("{", i):
            self.expected("'{' starting the effect list", i)
        try:
            e = balanced_end(s, i)
        except ValueError_ as err:
            self.fail(err.message, err.pos)
        inner = s[i + 1 : e - 1].strip()
        return tuple(x.strip() for x in inner.split(", ")) if inner else (), e

    # ------------------------------------------------------------ types

    def type(self, i: int) -> tuple[core.Type, int]:
        s = self.s
        m = G.SIMPLE_TYPE.match(s, i)
        if m is not None:
            text = m.group()
            t = self.types.get(text)
            if t is None:
                dt = m.group(1)
                if not core.is_known_dtype(dt):
                    self.fail(f"unknown dtype '{dt}'", i)
                dims = m.group(2)
                t = ShapedArray(tuple(int(d) for d in dims.split(",")) if dims else (), dt)
                self.types[text] = t
            return t, m.end()
        return self.slow_type(i)

    def slow_type(self, i: int) -> tuple[core.Type, int]:
        s = self.s
        m = G.TYPE_HEAD.match(s, i)
        if m is None:
            self.expected("a type such as 'f32[3]'", i)
        name, space = m.group(1), m.group(2)
        j = m.end()
        if name == "Ref":
            if not s.startswith("{", j):
                self.expected("'{' after 'Ref'", j)
            inner, k = self.type(j + 1)
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
        dims = self.dims(s[j + 1 : end])
        k = end + 1
        vma = None
        if s.startswith("{", k):
            e = self.balanced(k)
            vma = s[k + 1 : e - 1]
            k = e
        return ShapedArray(dims, dtype, memory_space=mspace, vma=vma), k

    def balanced(self, i: int) -> int:
        try:
            return balanced_end(self.s, i)
        except ValueError_ as err:
            self.fail(err.message.replace(" in parameter value", ""), err.pos)

    @staticmethod
    def dims(text: str) -> tuple:
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

    # ------------------------------------------------------------ atoms

    def atom(self, i: int, table: dict, eqn_vars) -> tuple[object, int]:
        """A variable use or a literal at s[i]; (None, i) when neither starts there."""
        s = self.s
        c = s[i : i + 1]
        if c.islower() or c == "_":
            m = G.VARNAME.match(s, i)
            if m is None:
                return None, i
            name = m.group()
            e = m.end()
            if name in ("inf", "nan") and s.startswith(":", e):
                return self.literal(i, float(name), e)
            v = table.get(name)
            if v is None:
                if name in ("inf", "nan"):
                    return Literal(float(name), _WEAK_F32, False), e
                self.fail(f"variable '{name}' used before definition", i)
            if name == "_":
                self.warnings.append(
                    JaxprError(
                        "use of '_' is ambiguous: it is read as the most recent '_' binding in this jaxpr, "
                        "which may not be the value JAX meant (FORMAT.md §2)",
                        self.loc(i),
                    )
                )
            return v, e
        m = G.LITERAL.match(s, i)
        if m is None:
            return None, i
        t = m.group()
        e = m.end()
        try:
            if t[0] == "(":
                val = "float0" if t.startswith("(b") else complex(t)
            elif t == "True" or t == "False":
                val = t == "True"
            elif t == "[...]":
                val = Ellipsis
            elif t.endswith("j"):
                val = complex(t)
            elif t.lstrip("-").isdigit():
                val = int(t)
            else:
                val = float(t)
        except ValueError:
            self.fail(f"malformed literal '{t}'", i)
        return self.literal(i, val, e)

    def literal(self, i: int, val, e: int):
        s = self.s
        if not s.startswith(":", e):
            if not G.ATOM_END.match(s, e):
                self.expected("':' and a type after the literal, or a separator", e)
            return Literal(val, _WEAK_F32, False), e
        t, k = self.type(e + 1)
        if not isinstance(t, ShapedArray):
            self.fail("a literal must have an array type", e + 1)
        if isinstance(val, float) and not isinstance(val, bool) and val.is_integer() is False:
            pass
        return Literal(val, t), k

    def fix_untyped(self, atoms: list, siblings: list):
        """Give 0.4.35 untyped literals a type: a sibling variable's dtype, else i32/f32/bool."""
        for n, a in enumerate(atoms):
            if isinstance(a, Literal) and not a.typed:
                atoms[n] = Literal(a.value, _infer(a.value, siblings), False)

    # ------------------------------------------------------------ equations

    def eqn(self, i: int, eqcol: int, table: dict) -> tuple[Eqn, int]:
        s = self.s
        start = i
        loc = self.loc(i)
        outs: list[Var] = []
        f = G.EQN_FAST.match(s, i)
        if f is not None:
            # fast path for the common `name:f32[3,4] = prim` head
            t = self.types.get(f.group(2))
            if t is not None:
                name = f.group(1)
                prim = f.group(3)
                i = f.end()
                prm = {}
                if s.startswith("[", i):
                    prm, i = self.params(i, eqcol, table)
                inputs, i = self.operands(i, eqcol, table)
                v = Var(t, name)
                table[name] = v
                return Eqn(prim, tuple(inputs), (v,), prm, loc), i
        m = G.VARNAME.match(s, i)
        if m is not None and s.startswith(":", m.end()):
            # binders
            while True:
                name = m.group()
                t, j = self.type(m.end() + 1)
                outs.append(Var(t, name))
                k = G.SP.match(s, j).end()
                if s.startswith("= ", k) or s.startswith("=\n", k):
                    i = self.ws(k + 1)
                    break
                if s.startswith("<-", k) or s.startswith(",", k):
                    return self.state_eqn(start, loc, outs, k, table)
                k = self.ws(k)
                m = G.VARNAME.match(s, k)
                if m is None or not s.startswith(":", m.end()):
                    self.expected("another binder or '=' after the equation's binders", k)
        elif (
            m is not None and s.startswith((" = ", " "), m.end()) and G.UNTYPED_BINDERS.match(s, i)
        ):
            self.no_type(m.end())
        elif m is not None and s.startswith(("[", "{"), m.end()) and self.is_ref_form(m.end()):
            return self.state_eqn(start, loc, outs, i, table)
        # primitive
        mp = G.PRIM.match(s, i)
        if mp is None:
            self.expected("a primitive name" if outs else "an equation", i)
        prim = mp.group()
        i = mp.end()
        prm: dict = {}
        if s.startswith("[", i):
            prm, i = self.params(i, eqcol, table)
        inputs, i = self.operands(i, eqcol, table)
        for v in outs:
            table[v.hint] = v
        return Eqn(prim, tuple(inputs), tuple(outs), prm, loc), i

    def operands(self, i: int, eqcol: int, table: dict) -> tuple[list, int]:
        s = self.s
        out = []
        untyped = False
        while True:
            j = G.SP.match(s, i).end()
            c = s[j : j + 1]
            if c == "\n" or c == "#":
                k = self.ws(j)
                if k < self.n and self.col(k) > eqcol:
                    j = k
                    c = s[j]
                else:
                    return self._done(out, untyped), i
            if c == "" or c == ";" or c == "}" or c == ")" or c == ",":
                return self._done(out, untyped), i
            if c == "i" and G.IN_KW.match(s, j):
                return self._done(out, untyped), i
            if j == i:
                self.expected("a space between operands", j)
            m = G.VARNAME.match(s, j)
            if m and s.startswith(":", m.end()) and m.group() not in ("inf", "nan"):
                self.fail(
                    f"a binder cannot appear among operands; a new equation must start at column {eqcol}, "
                    "the column of the first equation of this block",
                    j,
                )
            a, k = self.atom(j, table, out)
            if a is None:
                self.expected("an operand (a variable or a literal)", j)
            if isinstance(a, Literal) and not a.typed:
                untyped = True
            out.append(a)
            i = k

    def _done(self, out, untyped):
        if untyped:
            self.fix_untyped(out, [a for a in out if isinstance(a, Var)])
        return out

    def is_ref_form(self, j: int) -> bool:
        s = self.s
        try:
            while j < self.n and s[j] in "[{":
                j = balanced_end(s, j)
        except ValueError_:
            return False
        return s.startswith((" <- ", " += "), j)

    def ref(self, i: int, table: dict) -> tuple[Var, str, list, int]:
        """`x[IDX]{...}` -> (ref var, template, index vars, end)."""
        s = self.s
        m = G.VARNAME.match(s, i)
        if m is None:
            self.expected("a reference variable", i)
        x = self.var_use(m.group(), i, table)
        j = m.end()
        k = j
        while k < self.n and s[k] in "[{":
            k = self.balanced(k)
        if k == j:
            self.expected("'[' indexing the reference", j)
        text = s[j:k]
        ivars: list[Var] = []

        def sub(mm):
            if mm.group(1):
                return mm.group(0)
            ivars.append(self.var_use(mm.group(2), j + mm.start(2), table))
            return f"${len(ivars) - 1}"

        tpl = G.INDEX_PART.sub(
            lambda mm: G.INDEX_VAR.sub(sub, mm.group()) if mm.group()[0] == "[" else mm.group(),
            text,
        )
        return x, tpl, ivars, k

    def var_use(self, name: str, pos: int, table: dict) -> Var:
        v = table.get(name)
        if v is None:
            self.fail(f"variable '{name}' used before definition", pos)
        return v

    def state_eqn(self, start: int, loc: Loc, outs: list, k: int, table: dict) -> tuple[Eqn, int]:
        s = self.s
        if not outs:
            x, tpl, ivars, j = self.ref(start, table)
            op = s[j + 1 : j + 3]
            a, e = self.atom(j + 4, table, None)
            if a is None:
                self.expected("a value after '" + op + "'", j + 4)
            prm = {"indexer": params.Opaque(tpl)}
            if op == "+=":
                return Eqn("addupdate", (x, a, *ivars), (), prm, loc), e
            dummy = Var(a.type, "_")
            return Eqn("swap", (x, a, *ivars), (dummy,), prm, loc), e
        (y,) = outs if len(outs) == 1 else self.expected("one result in a ref equation", start)
        if s.startswith("<-", k):
            x, tpl, ivars, e = self.ref(self.ws(k + 2), table)
            table[y.hint] = y
            return Eqn("get", (x, *ivars), (y,), {"indexer": params.Opaque(tpl)}, loc), e
        # `y:T, x[IDX] <- x[IDX], v`
        x, tpl, ivars, j = self.ref(self.ws(k + 1), table)
        j = self.ws(j)
        if not s.startswith("<-", j):
            self.expected("'<-' in a swap equation", j)
        x2, tpl2, ivars2, j = self.ref(self.ws(j + 2), table)
        if x2 is not x or tpl2 != tpl or ivars2 != ivars:
            self.fail("the two sides of a swap equation index different references", start)
        j = self.ws(j)
        if not s.startswith(",", j):
            self.expected("',' and the stored value in a swap equation", j)
        j = self.ws(j + 1)
        a, e = self.atom(j, table, None)
        if a is None:
            self.expected("the stored value", j)
        table[y.hint] = y
        return Eqn("swap", (x, a, *ivars), (y,), {"indexer": params.Opaque(tpl)}, loc), e

    # ------------------------------------------------------------ parameters

    def params(self, i: int, eqcol: int, table: dict) -> tuple[dict, int]:
        s = self.s
        i += 1
        j = G.SP.match(s, i).end()
        broken = s[j : j + 1] in ("\n", "#")
        out: dict = {}
        while True:
            i = self.ws(i)
            if s.startswith("]", i):
                return out, i + 1
            m = G.KEY.match(s, i)
            if m is None:
                self.expected("a parameter 'name=value' or ']'", i)
            key = m.group(1)
            out[key], i = self.value(m.end(), key, broken, out)
            if s.startswith("]", i):
                continue
            j = G.SP.match(s, i).end()
            if j == i and s[i : i + 1] not in ("\n", "#"):
                self.expected("a space, a newline or ']' after the value of '" + key + "'", i)

    def value(self, i: int, key: str, broken: bool, out: dict):
        s = self.s
        c = s[i : i + 1]
        if c == "{" and G.LAMBDA.match(s, i):
            return self.jaxpr(i)
        if (
            c == "("
            and (m := G.JAXPR_TUPLE.match(s, i))
            and (m.group(1) or m.group(2) in self.shared_names)
        ):
            return self.jaxpr_tuple(i, key, out)
        if c == "l" and G.SHARED_DEF.match(s, i):
            return self.toplevel(i)
        if key in _STRING_KEYS:
            m = G.BARE_NAME.match(s, i)
            e = m.end() if m and self.at_delim(m.end()) else self.raw_end(i, broken)
            return (None if s[i:e] == "None" else s[i:e]), e
        m = G.BARE_NAME.match(s, i)
        if m and m.group() in self.shared_names and _jaxpr_key(key) and self.at_delim(m.end()):
            self.scopes[-1].pending.append((out, key))
            return _SharedRef(m.group(), i), m.end()
        if m and _jaxpr_key(key) and m.group() != "None" and self.at_delim(m.end()):
            self.fail(f"shared jaxpr '{m.group()}' is referenced but never defined", i)
        structured = c in "([{'\"" or c.isdigit() or c == "-"
        try:
            v, e = parse_value(s, i, True, self.hook)
            ok = self.at_delim(e)
        except ValueError_ as err:
            if structured:
                self.fail(err.message, err.pos)
            ok = False
        except RecursionError:
            self.fail(f"the value of '{key}' is nested too deeply", i)
        if not ok and structured:
            k = self.ws(e)
            if k > e:
                self.expected(
                    f"another parameter 'name=value' or ']' after the value of '{key}'", k
                )
            self.expected(f"a space, a newline or ']' after the value of '{key}'", e)
        if not ok:
            e = self.raw_end(i, broken)
            return s[i:e], e
        if self._has_ref(v):
            self.scopes[-1].pending.append((out, key))
        elif not _has_jaxpr(v):
            raw = s[i:e]
            if params.format_value(v) != raw:
                v = raw if isinstance(v, str) else params.Opaque(raw)
        return v, e

    def hook(self, i: int):
        s = self.s
        if G.LAMBDA.match(s, i):
            return self.jaxpr(i)
        if G.SHARED_DEF.match(s, i):
            return self.toplevel(i)
        return None

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
        s = self.s
        pat = G.RAW_END_BROKEN if broken else G.RAW_END_FLAT
        m = pat.search(s, i)
        if m is None:
            self.fail("unterminated parameter list: expected ']'", i)
        return m.start()

    def jaxpr_tuple(self, i: int, key: str, out: dict):
        s = self.s
        i = self.ws(i + 1)
        items = []
        has_ref = False
        while not s.startswith(")", i):
            if s.startswith("{", i):
                j, i = self.jaxpr(i)
            else:
                m = G.BARE_NAME.match(s, i)
                if m is None or m.group() not in self.shared_names:
                    self.expected("a jaxpr or a shared-jaxpr name in the tuple", i)
                j, i = _SharedRef(m.group(), i), m.end()
                has_ref = True
            items.append(j)
            i = self.ws(i)
            if i >= self.n:
                self.expected("')' closing the tuple of jaxprs", i)
        if has_ref:
            self.scopes[-1].pending.append((out, key))
        return tuple(items), i + 1


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
            or (kind is int and t.dtype != "bool" and t.dtype != "float0")
            or (kind is float and (core.is_float(t) or core.is_complex(t)))
            or (kind is complex and core.is_complex(t))
        )
        if ok:
            return ShapedArray((), t.dtype, weak_type=True)
    return _WEAK.get(kind, _WEAK_F32)


def _has_jaxpr(v) -> bool:
    if isinstance(v, Jaxpr):
        return True
    if isinstance(v, (tuple, list)):
        return any(_has_jaxpr(x) for x in v)
    if isinstance(v, params.Record):
        return any(_has_jaxpr(x) for _, x in v.fields)
    return False
