"""The checker: scoping, operand counts and types against the shape rules, nested jaxprs.

    from jaxprtool.check import check
    diags = check(jaxpr, path)          # list[Diagnostic], each with .kind "error" or "warning"

A `Diagnostic` is a `core.JaxprError` with a `kind`, so `io.report(d, d.kind)`
prints it as `FILE:LINE:COL: error: message`.  Checks:

* every variable is bound once (a `Var` object is bound at most once anywhere
  in its jaxpr; with `check_names=True`, as for text read from a file, two
  binders of one jaxpr may not share a printed name other than `_`) and is
  defined before it is used; outvars are defined;
* each equation of a known primitive: its shape rule accepts the operands and
  parameters (a `ShapeError` becomes an error at the equation), it returns as
  many results as the equation binds, and each declared result type agrees
  with the inferred one (symbolic dims are compared leniently);
* nested jaxprs (branches, bodies, called jaxprs) are checked recursively;
  their agreement with the equation's operands and results is part of the
  call/control-flow shape rules;
* an unknown primitive is a warning (once per primitive name): its result types
  are taken from the binders;
* a shape rule that fails on an equation (a parameter of the wrong kind) is an error.
"""

from __future__ import annotations

from operator import attrgetter

from .core import (
    Eqn,
    Jaxpr,
    JaxprError,
    Literal,
    Loc,
    OpaqueType,
    RefType,
    ShapedArray,
    Var,
    eqn_subjaxprs,
)
from .record import did_you_mean
from .shapes import ShapeError, equation_key, infer_types, is_known, params_key
from .shapes.util import types_agree


class Diagnostic(JaxprError):
    """A located finding of the checker: kind is "error" or "warning"."""

    def __init__(
        self,
        kind: str,
        message: str,
        loc: Loc | None = None,
        where: str | None = None,
        code: str | None = None,
    ):
        super().__init__(message, loc)
        self.kind = kind
        self.code = code  # `diagnostics.CODES`: E1xx, W001
        # without a location: "inputs" or "outputs" of the top-level jaxpr (a jaxpr without
        # equations has no position of its own); `io.report` finds them in the source
        self.where = where

    def __repr__(self) -> str:
        return f"Diagnostic({self.kind!r}, {self.message!r}, {self.loc!r}, code={self.code!r})"


def check(jaxpr: Jaxpr, path: str | None = None, *, check_names: bool = False) -> list[Diagnostic]:
    """All diagnostics for `jaxpr` (errors and warnings), in source order."""
    c = _Checker(path, check_names)
    c.jaxpr(jaxpr, None)
    # source order (diagnostics without a location last), stable for equal locations
    return sorted(c.diags, key=lambda d: (d.loc is None, d.loc or ("", 0, 0)))


def errors(diags: list[Diagnostic]) -> list[Diagnostic]:
    return [d for d in diags if d.kind == "error"]


def _name(v: Var) -> str:
    return v.hint if v.hint else f"<var {id(v):x}>"


def _fmt_types(ts) -> str:
    return "(" + ", ".join(str(t) for t in ts) + ")"


#: the most equation keys either table of equations that passed holds before it starts
#: again (a program whose equations are all unlike would otherwise keep one per equation)
PASSED_LIMIT = 100_000
#: the classes of the literal values an equation's cheap key holds (`_Checker.jaxpr`)
_KEYED_VALUES = frozenset({bool, int, float, complex})
#: the types a binder may have (`_Checker.jaxpr`'s `bind`)
_BINDER_TYPES = (ShapedArray, RefType, OpaqueType)
_type = attrgetter("type")


class _Checker:
    def __init__(self, path, check_names):
        self.path = path
        self.check_names = check_names
        self.diags: list[Diagnostic] = []
        self.seen: set[int] = set()
        self.warned_unknown: set[str] = set()
        self.passed: set[tuple] = set()  # `equation_key`s of equations that passed
        #: keys of equations that passed, by their primitive, their parameters' frozen key
        #: (`shapes.params_key`; () for none), their typed literal operands' values and the
        #: identities of their operand and result types (the parser makes one type object
        #: per type text, so most equations of a large program share a key with one checked
        #: before, at a fraction of `equation_key`'s cost) -> the atoms whose types they name
        self.passed_alike: dict[tuple, tuple] = {}

    def err(self, code, message, loc, where=None):
        where = where if loc is None else None
        self.diags.append(Diagnostic("error", message, loc, where, code))

    def warn(self, code, message, loc):
        self.diags.append(Diagnostic("warning", message, loc, code=code))

    def jaxpr(self, j: Jaxpr, where: Loc | None) -> None:
        if id(j) in self.seen:
            return
        self.seen.add(id(j))
        defined: set[Var] = set()  # (a Var hashes by identity)
        names: dict[str, int] = {}
        check_names = self.check_names and not _names_unique(j)
        first_loc = next((e.loc for e in j.eqns if e.loc is not None), where)

        def bind(v: Var, loc, where=None):
            if not isinstance(v, Var):
                self.err("E104", f"binder {v!r} is not a variable", loc, where)
                return
            if not isinstance(v.type, _BINDER_TYPES):
                self.err("E104", f"variable '{_name(v)}' has no type", loc, where)
            if v in defined:
                self.err("E102", f"variable '{_name(v)}' is bound more than once", loc, where)
            defined.add(v)
            if check_names and v.hint and v.hint != "_":
                if v.hint in names:
                    self.err(
                        "E102",
                        f"variable '{v.hint}' is bound more than once in this jaxpr",
                        loc,
                        where,
                    )
                names[v.hint] = 1

        for v in (*j.constvars, *j.invars):
            bind(v, first_loc, "inputs")
        passed = self.passed_alike
        for e in j.eqns:
            # (a million equations run this)
            frozen = params_key(e.params) if e.params else ()
            key = None if frozen is None else [e.prim, frozen]
            if key is not None:
                for a in e.inputs:
                    cls = a.__class__
                    if cls is Var and a in defined:
                        key.append(id(a.type))
                    elif cls is Literal and a.typed and a.value.__class__ in _KEYED_VALUES:
                        # (what `_literal_problem` reads: the value, its class, its type)
                        key.append((a.value.__class__, a.value, id(a.type)))
                    else:
                        key = None
                        break
            if key is not None:
                key.append(None)
                for o in e.outputs:
                    key.append(id(o.type))
                key = tuple(key)
            if key is None or key not in passed:
                found = len(self.diags)
                self.eqn(e, defined)
                if key is not None and len(self.diags) == found:
                    if len(passed) > PASSED_LIMIT:
                        passed.clear()
                    passed[key] = (e.inputs, e.outputs)  # keeps the keyed types alive
                if not e.no_subjaxprs:  # (`eqn_subjaxprs`' first answer, without the call)
                    for sub in eqn_subjaxprs(e):
                        self.jaxpr(sub, e.loc)
            for o in e.outputs:
                # `bind` inline where it finds nothing wrong (a million equations run this)
                if (
                    o.__class__ is Var
                    and o.type.__class__ in _BINDER_TYPES
                    and o not in defined
                    and not (check_names and o.hint in names)
                ):
                    defined.add(o)
                    if check_names and o.hint and o.hint != "_":
                        names[o.hint] = 1
                else:
                    bind(o, e.loc)
        last_loc = next((e.loc for e in reversed(j.eqns) if e.loc is not None), where)
        for a in j.outvars:
            if isinstance(a, Literal):
                bad = _literal_problem(a)
                if bad:
                    self.err("E105", bad, last_loc, "outputs")
            if isinstance(a, Var) and a not in defined:
                self.err(
                    "E103", f"output variable '{_name(a)}' is not defined", last_loc, "outputs"
                )

    def eqn(self, e: Eqn, defined: set[Var]) -> None:
        ok = True
        plain = True  # no untyped literal: the check depends on types and parameters alone
        for a in e.inputs:
            if isinstance(a, Literal):
                bad = _literal_problem(a)
                if bad:
                    self.err("E105", bad, e.loc)
                plain = plain and a.typed
            elif isinstance(a, Var) and a not in defined:
                self.err("E101", f"variable '{_name(a)}' used before definition", e.loc)
                ok = False
        if not ok:
            return
        declared = [o.type for o in e.outputs]
        in_types = [a.type for a in e.inputs]
        # a program repeats the same few typed equations many times: one that passed is
        # not checked again (a failing one is, so that each reports its own error)
        key = equation_key(e.prim, in_types, e.params, declared) if plain else None
        if key is not None and key in self.passed:
            return
        found = len(self.diags)
        self.types(e, in_types, declared)
        if key is not None and len(self.diags) == found:
            if len(self.passed) > PASSED_LIMIT:
                self.passed.clear()
            self.passed.add(key)

    def types(self, e: Eqn, in_types: list, declared: list) -> None:
        """The shape rule's result types against the declared ones."""
        if not is_known(e.prim):
            if e.prim not in self.warned_unknown:
                self.warned_unknown.add(e.prim)
                self.warn(
                    "W001",
                    f"unknown primitive '{e.prim}': result types taken from the binders"
                    + did_you_mean(e.prim)
                    + " (check passes it; run and differentiation (jvp, grad, ...) will fail"
                    " on it)",
                    e.loc,
                )
            return
        try:
            inferred = self._infer(e, in_types, declared)
        except ShapeError as ex:
            msg = str(ex)
            if not msg.startswith(e.prim):
                msg = f"{e.prim}: {msg}"
            self.err("E110", msg, e.loc)
            return
        except Exception as ex:  # noqa: BLE001 - an odd parameter must not crash the checker
            # a parameter of the wrong kind (`integer_pow[y=(5,)]`): the rule fails where JAX
            # would too; an error, so that no command transforms what could not be checked
            self.err(
                "E113",
                f"{e.prim}: the equation cannot be checked ({type(ex).__name__}: {ex}); "
                "a parameter is probably malformed",
                e.loc,
            )
            return
        if len(inferred) != len(declared):
            self.err(
                "E112",
                f"{e.prim}: the equation binds {len(declared)} result{'s' if len(declared) != 1 else ''}, "
                f"but the primitive returns {len(inferred)} {_fmt_types(inferred)}",
                e.loc,
            )
            return
        for i, (d, t) in enumerate(zip(declared, inferred)):
            if not types_agree(d, t):
                which = "result" if len(declared) == 1 else f"result {i}"
                self.err("E111", f"{e.prim}: {which} type {d} does not match inferred {t}", e.loc)

    def _infer(self, e: Eqn, in_types, declared):
        untyped = [i for i, a in enumerate(e.inputs) if isinstance(a, Literal) and not a.typed]
        if not untyped:
            return infer_types(e.prim, in_types, e.params, declared)
        # 0.4.35 printed literals without a type: their dtype is a guess, so accept any
        # plausible one (their natural type, the operands', the results', the callee's)
        first_exc = None
        for cand in _literal_candidates(e, in_types, untyped, declared):
            try:
                out = infer_types(e.prim, cand, e.params, declared)
            except ShapeError as ex:
                first_exc = first_exc or ex
                continue
            if len(out) == len(declared) and all(types_agree(d, t) for d, t in zip(declared, out)):
                return out
        if first_exc is not None:
            raise first_exc
        return infer_types(e.prim, in_types, e.params, declared)


def _names_unique(j: Jaxpr) -> bool:
    """Whether no printed name other than `_` names two of j's binders (its inputs and its
    equations' results): then `check_names` finds nothing in j and is skipped.  Asked of
    every name at once, in C, where the per-binder dict of a million names costs 0.4 s."""
    try:
        hints = [v.hint for v in (*j.constvars, *j.invars)]
        hints += [o.hint for e in j.eqns for o in e.outputs]
    except AttributeError:  # a binder that is no variable: the checker reports it
        return False
    distinct = set(hints)
    unnamed = [h for h in ("_", None, "") if h in distinct]
    return len(distinct) - len(unnamed) == len(hints) - sum(map(hints.count, unnamed))


def _literal_problem(lit: Literal) -> str | None:
    """Why a typed literal's value cannot have its printed type, or None."""
    t, v = lit.type, lit.value
    if not lit.typed or not isinstance(t, ShapedArray) or v is Ellipsis or v == "float0":
        return None
    if t.shape != ():
        return f"literal {v!r} must have a scalar type, not {t}"
    d = t.dtype
    if isinstance(v, bool):
        ok = d == "bool"
    elif isinstance(v, int):
        ok = d.startswith(("i", "u")) and d[1:2].isdigit()
        if ok:
            bits = int("".join(ch for ch in d[1:3] if ch.isdigit()) or 0)
            lo, hi = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if d[0] == "i" else (0, 2**bits - 1)
            if bits in (2, 4, 8, 16, 32, 64) and not lo <= v <= hi:
                return f"literal {v} is out of range for {t}"
    elif isinstance(v, float):
        ok = d.startswith(("f", "bf")) and d != "float0"
    elif isinstance(v, complex):
        ok = d.startswith("c")
    else:
        ok = True
    return None if ok else f"literal {v!r} cannot have type {t}"


def _natural(value) -> str | None:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "i32"
    if isinstance(value, float):
        return "f32"
    if isinstance(value, complex):
        return "c64"
    return None


def _literal_candidates(e: Eqn, in_types, untyped, declared):
    """Operand type lists with the untyped literals retyped in each plausible way."""

    def retype(dtype_of):
        out = list(in_types)
        for i in untyped:
            t = in_types[i]
            d = dtype_of(i)
            if isinstance(t, ShapedArray) and d:
                out[i] = t.update(dtype=d)
        return out

    yield list(in_types)
    yield retype(lambda i: _natural(e.inputs[i].value))
    arrays = [
        t
        for a, t in zip(e.inputs, in_types)
        if not isinstance(a, Literal) and isinstance(t, ShapedArray)
    ]
    for t in arrays[:1]:
        yield retype(lambda i, d=t.dtype: d)
    for d in dict.fromkeys(t.dtype for t in declared if isinstance(t, ShapedArray)):
        yield retype(lambda i, d=d: d)
    for sub in eqn_subjaxprs(e):
        if len(sub.invars) == len(in_types):
            inv = sub.in_types
            yield retype(
                lambda i, inv=inv: inv[i].dtype if isinstance(inv[i], ShapedArray) else None
            )
