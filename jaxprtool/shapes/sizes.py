"""Sizes that compare, multiply and divide as JAX's symbolic dimensions do.

JAX's sharding rules (a reshape's, `_reshape_sharding_rule`) run their integer algorithms on
symbolic sizes too: `==` is structural (`2*b == 2*b`, `b != 1`), `>` and `<` are decided
from the symbols' bounds (every symbol is at least 1) and raise
`InconclusiveDimensionOperation` when the bounds do not decide (`b > 1`), `divmod` by a mesh
axis size divides every coefficient or leaves a non-zero remainder.  `Size` gives a linear
size (`2*b + 2`, a `shapes.util` polynomial) those operators, so that the rules' integer
code runs unchanged on them; what JAX finds inconclusive raises `ShapeError` in its words.
A product of symbols (`b^2`, `b*c`) counts as one more symbol of at least 1 (so `b^2 > b`,
which JAX decides, is inconclusive here: refused, never wrong)."""

from __future__ import annotations

from . import ShapeError
from .util import _poly, _poly_str, linear_bounds


class Size:
    """A polynomial size: {monomial: coefficient, "": constant}."""

    __slots__ = ("poly",)

    def __init__(self, poly: dict[str, int]) -> None:
        self.poly = {k: c for k, c in poly.items() if c or k == ""}
        self.poly.setdefault("", 0)

    @staticmethod
    def of(d) -> Size:
        """`d` (an int or a dim's text) as a Size; ShapeError for a size outside the
        polynomials of dims (`floordiv(b, 2)`), which the tool's rules do not compare."""
        p = _poly(d)
        if p is None:
            raise ShapeError(
                f"the size {d} is not a polynomial of the symbols, which the tool "
                "compares only as such: give the dimension a size"
            )
        return Size(p)

    def _other(self, o) -> Size:
        return o if isinstance(o, Size) else Size.of(o)

    def __eq__(self, o) -> bool:
        return isinstance(o, (Size, int, str)) and self.poly == self._other(o).poly

    def __ne__(self, o) -> bool:
        return not self == o

    __hash__ = None  # type: ignore[assignment]

    def __sub__(self, o) -> Size:
        p = dict(self.poly)
        for k, c in self._other(o).poly.items():
            p[k] = p.get(k, 0) - c
        return Size(p)

    def __mul__(self, o) -> Size:
        a, b = self, self._other(o)
        if len(a.poly) > 1 and len(b.poly) > 1:
            raise ShapeError(
                f"symbolic dimension product '{a}' * '{b}' is not linear: the tool's "
                "sharding rules compare linear sizes only (JAX finds comparisons of such "
                "products inconclusive)"
            )
        if len(a.poly) > 1:
            a, b = b, a
        k = a.poly[""]
        return Size({s: k * c for s, c in b.poly.items()})

    __rmul__ = __mul__

    def __gt__(self, o) -> bool:
        return not _geq(self._other(o), self, f"'{self}' > '{o}'")

    def __lt__(self, o) -> bool:
        return not _geq(self, self._other(o), f"'{self}' < '{o}'")

    def __divmod__(self, k: int):
        """By a mesh axis size: (quotient, 0) when `k` divides every coefficient, else a
        non-zero remainder (JAX's `mod(b, 2)` is no zero either)."""
        if all(c % k == 0 for c in self.poly.values()):
            return Size({s: c // k for s, c in self.poly.items()}), 0
        if len(self.poly) == 1:
            q, r = divmod(self.poly[""], k)
            return Size({"": q}), r
        return self, 1

    def __str__(self) -> str:
        return str(_poly_str(self.poly))

    __repr__ = __str__


def _geq(a: Size, b: Size, what: str) -> bool:
    """`a >= b`, decided by the bounds of `a - b` with every symbol at least 1."""
    rising, falling, at_one = linear_bounds((a - b).poly)
    if rising and at_one >= 0:
        return True
    if falling and at_one < 0:
        return False
    raise ShapeError(
        f"symbolic dimension comparison {what} is inconclusive (as JAX finds it: "
        "InconclusiveDimensionOperation)"
    )


def jax_ge(a, b) -> bool | None:
    """JAX's `a >= b` on two sizes (ints, or linear symbolic sizes with every symbol at least
    1), raising ShapeError in its words where it is inconclusive (`2*b >= 3`); None where a
    size is outside the linear ones (`floordiv(b, 2)`), which the tool does not compare."""
    if isinstance(a, int) and isinstance(b, int):
        return a >= b
    try:
        sa, sb = Size.of(a), Size.of(b)
    except ShapeError:
        return None
    return _geq(sa, sb, f"'{sa}' >= '{sb}'")


def check_all_ge(pairs, message: str) -> None:
    """JAX's `all(map(operator.ge, ...))` check of a shape rule: `message` (JAX's) where a
    pair is decidedly smaller; where JAX cannot decide, its inconclusive comparison, which
    it raises too."""
    for a, b in pairs:
        try:
            ok = jax_ge(a, b)
        except ShapeError as e:
            raise ShapeError(
                f"{e}: JAX refuses this too ({message.split(',')[0]}); give the symbol a "
                "size, or bound the index by a size JAX can compare (a multiple of the "
                "dimension's symbols)"
            ) from None
        if ok is False:
            raise ShapeError(message)
