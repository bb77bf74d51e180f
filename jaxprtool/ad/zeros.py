"""Symbolic zeros, undefined primals and tangent types (JAX's `ad_util.Zero`, `UndefinedPrimal`)."""

from __future__ import annotations

from ..core import Atom, Literal, RefType, ShapedArray, Type, is_inexact


def tangent_type(t: Type) -> Type:
    """The type of a tangent of a value of type `t`: itself for float/complex, `float0` otherwise."""
    if t.__class__ is ShapedArray and not t.weak_type and _INEXACT.get(t.dtype):
        return t  # the common case (a dtype seen before)
    if t.__class__ is ShapedArray and not t.weak_type and is_inexact_dtype(t.dtype):
        return t
    if isinstance(t, ShapedArray) and not is_inexact(t):
        return ShapedArray(t.shape, "float0")
    if isinstance(t, ShapedArray) and t.weak_type:
        return t.update(weak_type=False)
    return t


def same_tangent_type(got: Type, t: Type) -> bool:
    """`got` has the dtype and shape of `t`, a float or complex array type: it passes
    `registry.check_rule_type` as a (co)tangent of a value of type `t` (a shortcut of it,
    answering False where it cannot tell)."""
    return (
        got.__class__ is ShapedArray
        and t.__class__ is ShapedArray
        and got.dtype == t.dtype
        and got.shape == t.shape
        and _INEXACT.get(t.dtype, False)
    )


#: dtype -> whether a ShapedArray of it is float or complex (filled in by `is_inexact_dtype`)
_INEXACT: dict[str, bool] = {}


def is_inexact_dtype(dtype: str) -> bool:
    """`core.is_inexact` of an array of `dtype`, remembered per dtype."""
    hit = _INEXACT.get(dtype)
    if hit is None:
        hit = _INEXACT[dtype] = is_inexact(ShapedArray((), dtype))
    return hit


class Zero:
    """A tangent (or cotangent) known to be zero: no array, only a type."""

    __slots__ = ("type",)

    def __init__(self, type: Type):
        self.type = type

    @staticmethod
    def from_primal_value(x: Atom) -> Zero:
        return Zero(tangent_type(x.type))

    def __repr__(self) -> str:
        return f"Zero({self.type})"


def is_zero(t) -> bool:
    return isinstance(t, Zero)


def zeros_like_type(t: Type) -> Zero:
    return Zero(tangent_type(t))


class UndefinedPrimal:
    """Stands for a linear input of an equation being transposed; for a differentiated Ref,
    `ct_ref` is its cotangent Ref (for the rules marked `transposes_refs`)."""

    __slots__ = ("type", "ct_ref")

    def __init__(self, type: Type, ct_ref: Atom | None = None):
        self.type = type
        self.ct_ref = ct_ref

    def __repr__(self) -> str:
        return f"UndefinedPrimal({self.type})"


def is_undefined_primal(x) -> bool:
    return isinstance(x, UndefinedPrimal)


def zero_literal_value(dtype: str):
    if dtype == "bool":
        return False
    if dtype.startswith("c"):
        return 0j
    if dtype.startswith(("f", "bf")) and dtype != "float0":
        return 0.0
    if dtype == "float0":
        return "float0"
    return 0


def is_literal(x) -> bool:
    return isinstance(x, Literal)


def carries_tangent(t) -> bool:
    """A float/complex value, or a Ref holding one (its tangent is a Ref of tangents)."""
    if t.__class__ is ShapedArray:
        return is_inexact_dtype(t.dtype)
    return is_inexact(t.inner if isinstance(t, RefType) else t)


def writes_tangent_ref(invars, nonzeros) -> bool:
    """A tangent Ref goes into a body: the body's derivative writes into it even when no
    tangent comes out, so the differentiated call, loop or branch must be emitted."""
    return any(m and isinstance(v.type, RefType) for v, m in zip(invars, nonzeros))


def nonzero_mask(invars, tangents) -> list[bool]:
    """Which inputs have a tangent: not symbolically zero and of a float/complex type (or a
    Ref holding one: its tangent is a Ref)."""
    return [not is_zero(t) and carries_tangent(v.type) for v, t in zip(invars, tangents)]


def zero_tangents(types) -> list[Zero]:
    return [Zero(tangent_type(t)) for t in types]
