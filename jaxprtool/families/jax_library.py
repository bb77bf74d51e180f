"""JAX's own library functions with custom JVP rules, recognised by name and body.

`jax.nn.relu`, `jax.nn.relu6`, `jax.numpy.logaddexp`, `jax.scipy.special.xlogy`, `xlog1py`
and `logit` (`_logit` from JAX 0.12.1, with another body and the same rule), and
`jax.nn.softmax` (`_softmax`, by default from JAX 0.12.1) are `jax.custom_jvp` functions: the printed `custom_jvp_call` names the rule
(`jvp=jvp`, `jvp=_logaddexp_jvp`) but does not contain it, and differentiating the body
instead is wrong at the kinks (relu's body `max(x, 0)` gives 0.5 at 0, JAX's rule gives 0).

Each entry below is JAX's rule (jax/_src/nn/functions.py, numpy/ufuncs.py,
scipy/special.py of JAX 0.10-0.12.1), written with `ops`, and the body JAX prints for the
function.  A rule is used only when the equation's function name matches *and* its body is
the reference body up to variable names, shapes and dtypes (`same_body`), so a user's own
function that happens to be called `relu` never gets JAX's rule.
"""

from __future__ import annotations

from functools import cache

from ..ad import ops
from ..ad.ops import ty
from ..ad.registry import register_library_jvp
from ..core import Jaxpr, Literal
from ..frozen import Frozen, set_field
from ..shapes.util import ints

#: parameters that follow from the operand shapes, ignored when comparing bodies
_SHAPE_PARAMS = frozenset({"shape", "sharding", "out_sharding", "broadcast_dimensions"})


class LibraryRule(Frozen):
    """JAX's JVP rule of one library function: `rule(primals, tangents, ans, **free)`, where
    `free` holds the values of the parameters `free` names (a softmax's `axes`), which the
    body may hold at any value so long as every equation with one holds the same.  (A
    `Frozen` value, not a dataclass: loading this family, which every program with a
    `custom_jvp_call` does, compiles no methods and imports no `dataclasses`.)"""

    __slots__ = ("name", "jvp_name", "body_text", "rule", "free")
    name: str
    jvp_name: str
    body_text: str
    rule: object
    free: tuple[str, ...]

    def __init__(self, name, jvp_name, body_text, rule, free=()):
        set_field(self, "name", name)
        set_field(self, "jvp_name", jvp_name)
        set_field(self, "body_text", body_text)
        set_field(self, "rule", rule)
        set_field(self, "free", free)

    @property
    def body(self) -> Jaxpr:
        return _parse_body(self.body_text)

    def matches(self, params: dict, body: Jaxpr) -> bool:
        jvp_name = params.get("jvp")
        if jvp_name is not None and str(jvp_name) != self.jvp_name:
            return False
        if any(len({str(v) for v in _values(body, k)}) > 1 for k in self.free):
            return False
        return same_body(body, self.body, ignored=frozenset(self.free))

    def tangent(self, primals, tangents, ans, body: Jaxpr):
        free = {k: next(iter(_values(body, k))) for k in self.free}
        return self.rule(primals, tangents, ans, **free)


def _values(body: Jaxpr, key: str) -> list:
    """The values of parameter `key` on the body's equations that have it."""
    return [e.params[key] for e in body.eqns if key in e.params]


@cache
def _parse_body(text: str) -> Jaxpr:
    from ..text.parser import parse

    return parse(text, "<jax library>").jaxpr


def same_body(a: Jaxpr, b: Jaxpr, ignored: frozenset = frozenset()) -> bool:
    """`a` and `b` compute the same function up to variable names, shapes and dtypes:
    the same primitives (jit and pjit alike) on the same operands in the same order,
    the same literal values, and equal parameters other than shape-derived ones and
    `ignored`."""
    return _SameBody(_SHAPE_PARAMS | ignored).jaxpr(a, b)


class _SameBody:
    def __init__(self, ignored: frozenset) -> None:
        self.ignored = ignored

    def jaxpr(self, a: Jaxpr, b: Jaxpr) -> bool:
        if len(a.invars) != len(b.invars) or len(a.constvars) != len(b.constvars):
            return False
        if len(a.eqns) != len(b.eqns) or len(a.outvars) != len(b.outvars):
            return False
        # (keyed by the Vars themselves, which hash by identity: no int made per operand)
        env = dict(zip(a.constvars + a.invars, b.constvars + b.invars))
        for ea, eb in zip(a.eqns, b.eqns):
            if ea.prim != eb.prim and _call_name(ea.prim) != _call_name(eb.prim):
                return False
            if len(ea.inputs) != len(eb.inputs):
                return False
            if len(ea.outputs) != len(eb.outputs):
                return False
            if not self.atoms(ea.inputs, eb.inputs, env):
                return False
            if not self.params(ea.params, eb.params):
                return False
            env.update(zip(ea.outputs, eb.outputs))
        return self.atoms(a.outvars, b.outvars, env)

    @staticmethod
    def atoms(xs, ys, env) -> bool:
        """`xs` and `ys` pairwise the same: literals of the same value, or variables `env`
        pairs.  (Loops written out: a library call's body is compared at every call.)"""
        for x, y in zip(xs, ys):
            if x.__class__ is Literal or y.__class__ is Literal:
                if not (x.__class__ is y.__class__ and _same_value(x, y)):
                    return False
            elif env.get(x) is not y:
                return False
        return True

    def params(self, pa: dict, pb: dict) -> bool:
        """The parameters on both sides agree (but the `ignored`), and no jaxpr is on one
        side alone.  (One walk over each side, no sets made: a body of an older JAX
        prints other parameters than JAX's reference body, at every call.)"""
        ignored = self.ignored
        for k, x in pa.items():
            if k in pb:
                if k not in ignored and not self.value(x, pb[k]):
                    return False
            elif isinstance(x, Jaxpr):
                return False
        if pa.keys() != pb.keys():
            for k, y in pb.items():
                if k not in pa and isinstance(y, Jaxpr):
                    return False
        return True

    def value(self, x, y) -> bool:
        """Two values of one parameter agree: jaxprs the same function, others the same
        text."""
        if isinstance(x, Jaxpr) or isinstance(y, Jaxpr):
            return isinstance(x, Jaxpr) and isinstance(y, Jaxpr) and self.jaxpr(x, y)
        return x is y or str(x) == str(y)


def _call_name(prim: str) -> str:
    return "jit" if prim == "pjit" else prim


def _same_value(x: Literal, y: Literal) -> bool:
    try:
        return complex(x.value) == complex(y.value)
    except (TypeError, ValueError):
        return x.value == y.value


# ---------------------------------------------------------------- the rules


def _zeros_like(g):
    return ops.full(g.type, 0.0)


def _relu_tangent(primals, tangents, ans):
    (x,), (g,) = primals, tangents
    return [ops.select_n(ops.gt(x, ops.lit(0.0, x)), _zeros_like(g), g)]


def _relu6_tangent(primals, tangents, ans):
    (x,), (g,) = primals, tangents
    inside = ops.bind("and", ops.gt(x, ops.lit(0.0, x)), ops.lt(x, ops.lit(6.0, x)))
    return [ops.select_n(inside, _zeros_like(g), g)]


def _replace_inf(x):
    """JAX's `_replace_inf`: +inf -> 0."""
    return ops.select_n(ops.eq(x, ops.lit(float("inf"), x)), x, ops.full(x.type, 0.0))


def _logaddexp_tangent(primals, tangents, ans):
    (x1, x2), (t1, t2) = primals, tangents
    (out,) = ans
    terms = []
    for x, t in ((x1, t1), (x2, t2)):
        if t is not None:
            terms.append(ops.mul(t, ops.exp(ops.sub(_replace_inf(x), _replace_inf(out)))))
    return [terms[0] if len(terms) == 1 else ops.add(*terms)]


def _xlogy_tangent(plus_one: bool):
    """xlogy: `tx log(y) + ty x / y`; xlog1py: `tx log1p(y) + ty x / (1 + y)`."""

    def tangent(primals, tangents, ans):
        (x, y), (tx, ty) = primals, tangents
        terms = []
        if tx is not None:
            terms.append(ops.mul(tx, ops.log1p(y) if plus_one else ops.log(y)))
        if ty is not None:
            denominator = ops.add(ops.lit(1.0, y), y) if plus_one else y
            terms.append(ops.div(ops.mul(ty, x), denominator))
        return [terms[0] if len(terms) == 1 else ops.add(*terms)]

    return tangent


def _logit_tangent(primals, tangents, ans):
    (x,), (g,) = primals, tangents
    return [ops.div(g, ops.mul(x, ops.sub(ops.lit(1.0, x), x)))]


def _softmax_tangent(primals, tangents, ans, *, axes):
    """JAX's `_softmax_jvp`: y * (x_dot - sum(y * x_dot, axis, keepdims)); with `where`, the
    tangent and the sum are taken where it holds, and the result is zero elsewhere."""
    x, where = primals[0], (primals[1] if len(primals) > 1 else None)
    (g, *_), (y,) = tangents, ans

    def masked(v):
        return v if where is None else ops.select_n(where, ops.full(ty(v), 0.0), v)

    g = masked(g)
    kept = [d for d in range(len(ops.shape(x))) if d not in set(ints(axes))]
    total = ops.bind_reduce_sum(masked(ops.mul(y, g)), axes)
    return [masked(ops.mul(y, ops.sub(g, ops.bind_broadcast(total, ops.shape(x), kept))))]


_RELU = """{ lambda ; a:f32[3]. let
    b:f32[3] = jit[
      name=relu
      jaxpr={ lambda ; a:f32[3]. let b:f32[3] = max a 0.0:f32[] in (b,) }
    ] a
  in (b,) }"""
_RELU6 = """{ lambda ; a:f32[3]. let
    b:f32[3] = jit[
      name=relu6
      jaxpr={ lambda ; a:f32[3]. let
          c:f32[3] = max a 0.0:f32[]
          b:f32[3] = min c 6.0:f32[]
        in (b,) }
    ] a
  in (b,) }"""
_LOGADDEXP = """{ lambda ; a:f32[3] b:f32[3]. let
    c:f32[3] = max a b
    d:f32[3] = sub a b
    e:bool[3] = ne d d
    f:f32[3] = add a b
    g:f32[3] = abs d
    h:f32[3] = neg g
    i:f32[3] = exp h
    j:f32[3] = log1p i
    k:f32[3] = add c j
    l:f32[3] = select_n e k f
  in (l,) }"""
_XLOGY = """{ lambda ; a:f32[3] b:f32[3]. let
    c:bool[3] = ne a 0.0:f32[]
    d:bool[3] = ne b b
    e:bool[3] = or c d
    f:f32[3] = LOG b
    g:f32[3] = mul a f
    h:f32[3] = broadcast_in_dim 0.0:f32[]
    i:f32[3] = jit[
      name=_where
      jaxpr={ lambda ; e:bool[3] g:f32[3] h:f32[3]. let
          i:f32[3] = select_n e h g
        in (i,) }
    ] e g h
  in (i,) }"""
_LOGIT = """{ lambda ; a:f32[3]. let
    b:f32[3] = sub 1.0:f32[] a
    c:f32[3] = div a b
    d:f32[3] = log c
  in (d,) }"""

_WHERE = """jit[
      name=_where
      jaxpr={ lambda ; t:bool[3] u:f32[3] v:f32[3]. let
          w:f32[3] = select_n t v u
        in (w,) }
    ]"""
#: JAX 0.12.1's `_logit`: logit folded onto min(x, 1 - x), with log1p near 0.5
_LOGIT_0_12_1 = """{ lambda ; a:f32[3]. let
    b:bool[3] = lt a 0.5:f32[]
    c:f32[3] = sub 1.0:f32[] a
    d:f32[3] = WHERE b a c
    e:f32[3] = sub 0.5:f32[] a
    f:f32[3] = sub a 0.5:f32[]
    g:f32[3] = WHERE b e f
    h:bool[3] = le g 0.25:f32[]
    i:f32[3] = mul 2.0:f32[] g
    j:f32[3] = div i d
    k:f32[3] = neg d
    l:f32[3] = WHERE h j k
    m:f32[3] = log1p l
    n:f32[3] = neg m
    o:f32[3] = log d
    p:f32[3] = sub o m
    q:f32[3] = WHERE h n p
    r:f32[3] = neg q
    s:f32[3] = WHERE b q r
  in (s,) }""".replace("WHERE", _WHERE)

#: `jax.nn.softmax` as JAX 0.12.1 traces it by default (jax_softmax_custom_jvp;
#: before, only with that flag): the max is not stopped, the custom rule makes its
#: derivative vanish
_SOFTMAX = """{ lambda ; a:f32[3]. let
    b:f32[] = reduce_max[axes=(0,)] a
    c:f32[] = max -inf:f32[] b
    d:f32[1] = broadcast_in_dim[broadcast_dimensions=() shape=(1,) sharding=None] c
    e:f32[3] = sub a d
    f:f32[3] = exp e
    g:f32[] = reduce_sum[axes=(0,)] f
    h:f32[1] = broadcast_in_dim[broadcast_dimensions=() shape=(1,) sharding=None] g
    i:f32[3] = div f h
  in (i,) }"""

#: the same with `where=` (a boolean mask): masked max, sum and result
_SOFTMAX_WHERE = """{ lambda ; a:f32[3] b:bool[3]. let
    c:f32[3] = WHERE_SCALAR b a -inf:f32[]
    d:f32[] = reduce_max[axes=(0,)] c
    e:f32[] = max -inf:f32[] d
    f:f32[1] = broadcast_in_dim[broadcast_dimensions=() shape=(1,) sharding=None] e
    g:f32[3] = WHERE_CONVERTING(f32) b a -inf:f32[]
    k:f32[3] = sub g f
    l:f32[3] = exp k
    m:f32[3] = WHERE_SCALAR b l 0.0:f32[]
    n:f32[] = reduce_sum[axes=(0,)] m
    o:f32[1] = broadcast_in_dim[broadcast_dimensions=() shape=(1,) sharding=None] n
    p:f32[3] = div l o
    q:f32[3] = WHERE_CONVERTING(i32) b p 0:i32[]
  in (q,) }"""
#: jnp.where's jit, its scalar already of the array's type, or converted to it from `{}`
_WHERE_SCALAR = """jit[
      name=_where
      jaxpr={ lambda ; u:bool[3] v:f32[3] w:f32[]. let
          x:f32[3] = broadcast_in_dim[broadcast_dimensions=() shape=(3,) sharding=None] w
          y:f32[3] = select_n u x v
        in (y,) }
    ]"""
_WHERE_CONVERTING = """jit[
      name=_where
      jaxpr={{ lambda ; u:bool[3] v:f32[3] w:{}[]. let
          c:f32[] = convert_element_type[new_dtype=float32 weak_type=False] w
          x:f32[3] = broadcast_in_dim[broadcast_dimensions=() shape=(3,) sharding=None] c
          y:f32[3] = select_n u x v
        in (y,) }}
    ]"""
_SOFTMAX_WHERE = _SOFTMAX_WHERE.replace("WHERE_SCALAR", _WHERE_SCALAR)
for _scalar in ("f32", "i32"):
    _SOFTMAX_WHERE = _SOFTMAX_WHERE.replace(
        f"WHERE_CONVERTING({_scalar})", _WHERE_CONVERTING.format(_scalar)
    )

for _rule in (
    LibraryRule("relu", "jvp", _RELU, _relu_tangent),
    LibraryRule("relu6", "jvp", _RELU6, _relu6_tangent),
    LibraryRule("logaddexp", "_logaddexp_jvp", _LOGADDEXP, _logaddexp_tangent),
    LibraryRule("xlogy", "_xlogy_jvp", _XLOGY.replace("LOG", "log"), _xlogy_tangent(False)),
    LibraryRule("xlog1py", "_xlog1py_jvp", _XLOGY.replace("LOG", "log1p"), _xlogy_tangent(True)),
    LibraryRule("logit", "jvp", _LOGIT, _logit_tangent),
    LibraryRule("_logit", "jvp", _LOGIT_0_12_1, _logit_tangent),
    LibraryRule("_softmax", "_softmax_jvp", _SOFTMAX, _softmax_tangent, free=("axes",)),
    LibraryRule("_softmax", "_softmax_jvp", _SOFTMAX_WHERE, _softmax_tangent, free=("axes",)),
):
    register_library_jvp(_rule)

# (the rules above are found by `find_library_jvp`, which loads this module when first asked:
# `families/index.py` lists it under `registry.library_rules_key` of each function name)
