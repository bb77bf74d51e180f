"""What both paths read the same way: types, binders, operands and literals, and the scope
rules of variables (one symbol table per jaxpr, `_` bound twice).

The grammar's rule callbacks (`build._Build`) hand these readers lark's tokens; the fast path
(`fast.FastPath`) hands them the text its regular expressions matched.  Either way the
`Var`s, `Literal`s, types, warnings and error messages come from the functions here, so the
two paths cannot disagree on what a binder or an operand means; they differ only in how
they find the tokens.
"""

from __future__ import annotations

import math

from ... import core
from ...core import Eqn, JaxprError, Literal, Loc, ShapedArray, Var
from ...lazy import LazyPattern
from .. import grammar as G
from ..values import ValueError_, balanced_end
from .diagnostics import MAX_DIM, Source, underscore_warning

#: symbol-table key (never a name) present once `_` has been bound twice in that jaxpr: from
#: then on a use of `_` may not mean the most recent `_` binding (FORMAT.md §2)
REBOUND = " _"


def bind(table: dict, v: Var) -> None:
    """Bind `v` under its printed name in the jaxpr's symbol table (the scope rule: a later
    binding of a name hides an earlier one; a second `_` marks the table `REBOUND`)."""
    if v.hint == "_" and "_" in table:
        table[REBOUND] = v
    table[v.hint] = v


def define(table: dict, prim: str, inputs: tuple, outs, prm: dict, loc: Loc) -> Eqn:
    """The equation `outs = prim[prm] inputs`, its results bound in its jaxpr's `table`
    after its operands were read (an equation's operands cannot be its own results)."""
    for v in outs:
        bind(table, v)
    return Eqn(prim, inputs, tuple(outs), prm, loc)


#: untyped literals that are also variable names (`infj` = complex(0, inf)): a bound
#: variable of that name wins, as for `inf` and `nan`
_NAME_LIKE_LITERALS = frozenset({"infj", "nanj"})

#: xmap's named axes after `;` in a type: `a:8`, `a:8,b:2`
_NAMED_SHAPE = LazyPattern(r"[^\W\d]\w*:[0-9]+(?:,[^\W\d]\w*:[0-9]+)*")

_SYMBOLIC_DIM = LazyPattern(r"(?=.*[A-Za-z_])[\w *+\-^(),@']+")

WEAK_F32 = ShapedArray((), "f32", weak_type=True)
_WEAK = {
    bool: ShapedArray((), "bool", weak_type=True),
    int: ShapedArray((), "i32", weak_type=True),
    float: WEAK_F32,
    complex: ShapedArray((), "c64", weak_type=True),
}


class Readers(Source):
    """Types, binders and atoms of one parse, with its symbol tables (`tables`, innermost
    jaxpr last), its type cache (`types`, by printed text) and its `warnings`."""

    def __init__(self, text: str, path: str):
        super().__init__(text, path)
        self.warnings: list[JaxprError] = []
        self.types: dict[str, core.Type] = {}
        self.tables: list[dict[str, Var]] = []
        # a typed literal's value by its text, read once per parse (`typed_literal`; the
        # values are immutable: literals of equal texts may share them)
        self.literal_values: dict[str, object] = {}

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
                self.over_limit(f"dimension too large in type (at most {MAX_DIM})", i)
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
            self.over_limit(f"dimension too large in type (at most {MAX_DIM})", j + 1)
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

    # ------------------------------------------------------------ binders

    def new_var(self, name: str, type_text: str, type_pos: int) -> Var:
        """The variable a binder `name:TYPE` makes (its type printed at s[type_pos])."""
        return Var(self.type_at(type_text, type_pos), name)

    def binder(self, t) -> Var:
        """The variable of a BINDER token `name:TYPE`."""
        text = t.value
        k = text.index(":")
        return self.new_var(text[:k], text[k + 1 :], t.start_pos + k + 1)

    # ------------------------------------------------------------ atoms

    def use(self, name: str, pos: int, table: dict):
        """A variable used at s[pos]: the binding of `name` in `table` (the most recent one;
        a use of `_` bound twice is warned about), or the literal `inf`/`nan` JAX 0.4.35
        printed untyped."""
        v = table.get(name)
        if v is None:
            if name == "inf" or name == "nan":
                return Literal(float(name), WEAK_F32, False)
            self.fail(f"variable '{name}' used before definition", pos, "E101")
        if name == "_" and REBOUND in table:
            self.warnings.append(underscore_warning(self.loc(pos)))
        return v

    def typed_literal(self, value: str, value_pos: int, type_text: str, type_pos: int):
        """The literal `VALUE:TYPE`, its parts printed at s[value_pos] and s[type_pos]."""
        ty = self.type_at(type_text, type_pos)
        if not isinstance(ty, ShapedArray):
            self.fail("a literal must have an array type", type_pos)
        v = self.literal_values.get(value)
        if v is None:
            v = self.literal_values[value] = self.literal_value(value, value_pos)
        return Literal(v, ty)

    def untyped(self, text: str, pos: int, table: dict):
        """An untyped (0.4.35) literal at s[pos], with a weak f32 type until `fix_untyped`
        gives it its siblings'; a bound variable named like it (`infj`) wins."""
        if text in _NAME_LIKE_LITERALS and text in table:
            return table[text]  # JAX names its 149,536th variable `infj`
        return Literal(self.literal_value(text, pos), WEAK_F32, False)

    def atom(self, t, table: dict):
        """The atom of a VAR, LITERAL or ULITERAL token."""
        kind = t.type
        if kind == "VAR":
            return self.use(t.value, t.start_pos, table)
        text = t.value
        if kind == "LITERAL":
            k = text.rindex(":", 0, text.rindex("["))
            return self.typed_literal(text[:k], t.start_pos, text[k + 1 :], t.start_pos + k + 1)
        return self.untyped(text, t.start_pos, table)

    def operands(self, toks, table: dict, off: int = 0) -> tuple:
        """The atoms of OPERANDS tokens (the first one's from offset `off`)."""
        out = []
        untyped = False
        for t in toks:
            untyped |= self.operand_atoms(t.value, t.start_pos, off, table, out)
            off = 0
        if untyped:
            fix_untyped_operands(out)
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
                    v = self.use(name, base + m.start(4), table)
                    if type(v) is Literal:
                        untyped = True
                out.append(v)
            elif m.group(1) is not None:
                lit = self.typed_literal(
                    m.group(1), base + m.start(1), m.group(2), base + m.start(2)
                )
                out.append(lit)
            else:
                a = self.untyped(m.group(3), base + m.start(3), table)
                out.append(a)
                untyped |= type(a) is Literal
        return untyped

    def literal_value(self, t: str, pos: int):
        try:
            if t[0] == "(":
                return "float0" if t.startswith("(b") else self._finite(complex(t), t, pos)
            if t == "True" or t == "False":
                return t == "True"
            if t == "[...]":
                return Ellipsis
            if t.endswith("j"):
                return self._finite(complex(t), t, pos)
            if t.lstrip("-").isdigit():
                return int(t)
            return self._finite(float(t), t, pos)
        except ValueError:
            self.fail(f"malformed literal '{t}'", pos)

    def _finite(self, v, t: str, pos: int):
        """`v`, read from `t`; a number too large for any float (`1e400`, which Python reads
        as inf) is refused: JAX prints an infinity as `inf`."""
        if "inf" not in t and (math.isinf(v.real) or math.isinf(v.imag)):
            self.fail(f"literal '{t}' is too large for a float (an infinity prints as inf)", pos)
        return v

    # ------------------------------------------------------------ references (state syntax)

    def ref_var(self, name: str, pos: int, table: dict) -> Var:
        """A variable named in a reference `x[IDX]` (no literal can stand there)."""
        v = table.get(name)
        if v is None:
            self.fail(f"variable '{name}' used before definition", pos, "E101")
        return v

    def ref(self, t, table: dict) -> tuple[Var, str, list]:
        """`x[IDX]{...}` -> (ref var, template, index vars)."""
        text = t.value
        m = G.VARNAME.match(text)
        x = self.ref_var(m.group(), t.start_pos, table)
        j = m.end()
        base = t.start_pos + j
        ivars: list[Var] = []

        def sub(mm, off):
            if mm.group(1):
                return mm.group(0)
            ivars.append(self.ref_var(mm.group(2), base + off + mm.start(2), table))
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


#: two operands without an operator between them: no dimension expression
_ADJACENT_OPERANDS = LazyPattern(r"[\w)]\s+[\w(]")


def _valid_symbolic_dim(d: str) -> bool:
    """A symbolic (`2*b + 1`, `floordiv(b, 2)`) or sharded (`8@x`) dim, brackets balanced,
    no two operands side by side (`let 2`)."""
    if not _SYMBOLIC_DIM.fullmatch(d) or _ADJACENT_OPERANDS.search(d):
        return False
    return core.parens_balanced(d)


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
    return _WEAK.get(kind, WEAK_F32)


def fix_untyped(atoms: list, siblings: list):
    """Give 0.4.35 untyped literals a type: a sibling variable's dtype, else i32/f32/bool."""
    for n, a in enumerate(atoms):
        if type(a) is Literal and not a.typed:
            atoms[n] = Literal(a.value, _infer(a.value, siblings), False)


def fix_untyped_operands(atoms: list):
    """`fix_untyped` for an equation's operands: the siblings are its variable operands."""
    fix_untyped(atoms, [a for a in atoms if type(a) is Var])
