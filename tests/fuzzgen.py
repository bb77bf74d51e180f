"""Grammar-aware fuzzing of jaxprtool: a generator of well-typed programs, mutators of real
programs, the pathological texts, and a supervised runner that runs every command on them.

    from fuzzgen import Rand, ProgramGen, mutate, make_case, Campaign
    text = ProgramGen(Rand(7)).program()          # a well-typed jaxpr, printed as JAX 0.10.2 would

* `ProgramGen` writes programs as JAX prints them (typed literals, `jit`, the layout rule of
  FORMAT §5.5): elementwise, comparison, reduction and shape primitives, `jit`, `cond`,
  `scan` and `while` bodies, shared (`let NAME = ... in`) jaxprs, constvars and literals.
  Shapes and dtypes are tracked, so every program is well typed by construction (the
  tests check that with `check` and, through the evaluator, with JAX).  `safe=True` keeps
  to smooth float primitives with bounded values, for the AD properties.
* `mutate(text, ch)` applies one mutation that knows the syntax: swap operands, rename
  binders, change a dtype or shape everywhere (consistently) or once (inconsistently),
  delete, duplicate or move an equation (with its continuation lines), change a parameter
  or a literal, nest the program into a `jit`, `cond` or `scan` body, and byte-level edits
  (NUL, CR, invalid characters, truncation).
* `Campaign` runs cases in worker processes, in process per case (`click.testing.CliRunner`),
  with a time limit (SIGALRM in the worker; the supervisor kills a worker stuck in C code)
  and a memory limit (the supervisor watches the worker's resident size), and classifies
  what it sees (see `FINDINGS`).

Choices come from a chooser: `Rand` (random.Random, for long runs) or `Drawn` (hypothesis
data, so that hypothesis can shrink).
"""

from __future__ import annotations

import os
import random
import re
import signal
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

# ---------------------------------------------------------------- choosers


class Rand:
    """Choices from random.Random (fast; a case is reproduced from its seed)."""

    def __init__(self, seed):
        self.r = random.Random(seed)

    def int(self, lo: int, hi: int) -> int:
        return self.r.randint(lo, hi)

    def pick(self, seq):
        return seq[self.r.randrange(len(seq))]

    def coin(self, p: float = 0.5) -> bool:
        return self.r.random() < p

    def weighted(self, table: dict):
        keys = list(table)
        return self.r.choices(keys, weights=[table[k] for k in keys])[0]


class Drawn:
    """Choices drawn from hypothesis `data` (shrinkable)."""

    def __init__(self, data):
        from hypothesis import strategies as st

        self.data = data
        self.st = st

    def int(self, lo: int, hi: int) -> int:
        return self.data.draw(self.st.integers(lo, hi))

    def pick(self, seq):
        return seq[self.int(0, len(seq) - 1)]

    def coin(self, p: float = 0.5) -> bool:
        return self.int(0, 999) < int(p * 1000)

    def weighted(self, table: dict):
        keys = list(table)
        total = sum(table.values())
        x = self.int(0, total - 1)
        for k in keys:
            x -= table[k]
            if x < 0:
                return k
        return keys[-1]


# ---------------------------------------------------------------- types


@dataclass(frozen=True)
class T:
    dtype: str
    shape: tuple = ()

    def __str__(self) -> str:
        return f"{self.dtype}[{','.join(map(str, self.shape))}]"

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    def with_shape(self, shape) -> T:
        return T(self.dtype, tuple(shape))

    def with_dtype(self, dtype) -> T:
        return T(dtype, self.shape)


FLOATS = ("f32", "f16")
LONG = {"f32": "float32", "i32": "int32", "bool": "bool", "f16": "float16", "u32": "uint32"}


def jax_name(n: int) -> str:
    """JAX's variable names: a, b, ..., z, ba, bb, ... (`_encode_digits_alphabetic`)."""
    s = ""
    while not s or n:
        n, i = divmod(n, 26)
        s = chr(97 + i) + s
    return s


def tup(xs) -> str:
    xs = list(xs)
    if len(xs) == 1:
        return f"({xs[0]},)"
    return "(" + ", ".join(map(str, xs)) + ")"


def lit(t: T, ch) -> str:
    """A scalar literal of dtype t.dtype, as JAX prints it."""
    if t.dtype == "bool":
        return f"{ch.pick(['True', 'False'])}:bool[]"
    if t.dtype in ("i32", "u32"):
        lo = 0 if t.dtype == "u32" else -3
        return f"{ch.int(lo, 4)}:{t.dtype}[]"
    return f"{ch.pick(['0.0', '1.0', '2.0', '0.5', '-1.0', '3.0', '0.25'])}:{t.dtype}[]"


# ---------------------------------------------------------------- the program generator

UNARY_F = ["sin", "cos", "tanh", "exp", "log", "neg", "abs", "sqrt", "logistic", "square",
           "floor", "sign", "erf", "atan", "exp2", "log1p", "expm1", "rsqrt", "tan",
           "stop_gradient", "integer_pow", "round", "ceil", "is_finite", "cbrt", "sinh",
           "cosh", "asinh", "reduce_precision"]  # fmt: skip
UNARY_F_SAFE = ["sin", "cos", "tanh", "neg", "logistic", "square", "integer_pow", "erf", "atan"]
UNARY_I = ["neg", "abs", "sign", "not", "population_count", "clz"]
BINARY_F = ["add", "sub", "mul", "div", "max", "min", "pow", "atan2", "rem", "nextafter"]
BINARY_F_SAFE = ["add", "sub", "mul", "max", "min"]
BINARY_I = ["add", "sub", "mul", "max", "min", "and", "or", "xor", "rem", "div",
            "shift_left", "shift_right_logical"]  # fmt: skip
BINARY_B = ["and", "or", "xor", "eq", "ne"]
COMPARE = ["eq", "ne", "lt", "le", "gt", "ge"]
REDUCE = ["reduce_sum", "reduce_max", "reduce_min", "reduce_prod", "argmax", "argmin"]
CUMULATIVE = ["cumsum", "cumprod", "cummax", "cummin", "cumlogsumexp"]
SHAPES = [(), (3,), (2, 3), (4,), (1, 4), (2, 1, 3), (5,), (2, 2)]
SAFE_SHAPES = [(), (3,), (2, 3), (4,), (1, 3), (2, 1, 2)]
CALL_NAMES = ["f", "g", "body", "_where", "remainder", "<lambda>", "inner", "fünf"]


class ProgramGen:
    """Writes well-typed programs as text (JAX 0.10.2's printing)."""

    def __init__(self, ch, *, safe: bool = False, max_depth: int = 2, max_eqns: int = 8,
                 ints: bool = True, floats_out: bool = False,
                 scalar_out: bool = False):  # fmt: skip
        self.ch = ch
        self.safe = safe
        self.max_depth = max_depth
        self.max_eqns = max_eqns
        self.ints = ints
        self.floats_out = floats_out
        self.scalar_out = scalar_out
        self.count = 0
        self.shared: list[tuple[str, str]] = []  # (name, text of `{ lambda ... }`)
        self.pool: dict[tuple, list[tuple[str, list[T]]]] = {}  # in types -> (name, out types)

    # ------------------------------------------------------------ helpers

    def fresh(self) -> str:
        n = jax_name(self.count)
        self.count += 1
        return n

    def rtype(self, dtypes=None) -> T:
        if dtypes is None:
            dtypes = ["f32"] if self.safe or not self.ints else ["f32", "f32", "i32"]
        shapes = SAFE_SHAPES if self.safe else SHAPES
        return T(self.ch.pick(dtypes), self.ch.pick(shapes))

    def program(self, in_types: list[T] | None = None) -> str:
        ch = self.ch
        if in_types is None:
            n_in = ch.int(1, 3)
            in_types = [self.rtype() for _ in range(n_in)]
            if self.safe:
                in_types[0] = in_types[0].with_dtype("f32")
        n_const = 0 if self.safe or not ch.coin(0.15) else 1
        const_types = [self.rtype() for _ in range(n_const)]
        body = self.jaxpr(in_types, 0, 0, const_types=const_types)
        shared = "".join(f"let {n} = {txt} in\n" for n, txt in self.shared)
        return shared + body + "\n"

    # ------------------------------------------------------------ jaxprs

    def jaxpr(self, in_types, base: int, depth: int, out_types=None, const_types=(),
              n_eqns=None, pre=None) -> str:  # fmt: skip
        """`{ lambda consts ; ins . let ... in (outs) }`; the first line unindented, the
        others at absolute columns (equations at base+4, `in` at base+2)."""
        ch = self.ch
        consts = [(self.fresh(), t) for t in const_types]
        ins = [(self.fresh(), t) for t in in_types]
        env = list(consts) + list(ins)
        eqn_lines: list[str] = []
        col = base + 4
        if pre is not None:  # equations the caller needs first (a while loop's counter)
            eqn_lines += pre(env, col)
        if n_eqns is None:
            n_eqns = ch.int(0 if depth else 1, self.max_eqns if depth == 0 else 4)
        for _ in range(n_eqns):
            self.eqn(env, col, depth, eqn_lines)
        if out_types is None and self.scalar_out and depth == 0:
            # one f32[] output (for grad): the sum of a float value
            fl = [(n, t) for n, t in env if t.dtype == "f32"]
            if fl:
                n, t = ch.pick(fl)
                if t.shape:
                    axes = tup(range(len(t.shape)))
                    n = self.emit(env, col, eqn_lines, T("f32"),
                                  f"reduce_sum[axes={axes} out_sharding=None] {n}")  # fmt: skip
                outs = [n]
            else:
                outs = [lit(T("f32"), ch)]
        elif out_types is None:
            n_out = ch.int(1, 3)
            cands = [v for v in env if v[1].dtype == "f32"] if self.floats_out else env
            outs = [ch.pick(cands)[0] if cands else lit(T("f32"), ch) for _ in range(n_out)]
            if not self.safe and ch.coin(0.05):
                outs.append(lit(T("f32"), ch))
        else:
            outs = [self.produce(env, t, col, eqn_lines) for t in out_types]
        head = "{ lambda " + " ".join(f"{n}:{t}" for n, t in consts)
        head += "; " + " ".join(f"{n}:{t}" for n, t in ins) + ". let"
        out = "(" + ", ".join(outs) + ("," if len(outs) == 1 else "") + ")"
        if not eqn_lines:
            return head + f"  in {out} }}"
        return "\n".join([head, *eqn_lines, " " * (base + 2) + f"in {out} }}"])

    def produce(self, env, t: T, col: int, lines: list[str]) -> str:
        """A variable (or literal) of type t: one of env, else made from a literal."""
        ch = self.ch
        same = [n for n, u in env if u == t]
        if same and ch.coin(0.85):
            return ch.pick(same)
        if t.shape == ():
            return lit(t, ch)
        name = self.fresh()
        lines.append(" " * col + f"{name}:{t} = broadcast_in_dim {lit(t.with_shape(()), ch)}")
        env.append((name, t))
        return name

    # ------------------------------------------------------------ equations

    def eqn(self, env, col, depth, lines) -> None:
        ch = self.ch
        kinds = {"unary": 6, "binary": 8, "reduce": 3, "shape": 6, "dot": 2, "cumulative": 1,
                 "compare_select": 2, "convert": 1, "iota": 1}  # fmt: skip
        if depth < self.max_depth:
            kinds.update({"jit": 2, "cond": 1, "scan": 1, "while": 0 if self.safe else 1})
        if not self.safe:
            kinds.update({"clamp": 1, "multi": 1})
        kind = ch.weighted(kinds)
        getattr(self, "e_" + kind)(env, col, depth, lines)

    def bind(self, env, t: T) -> str:
        name = self.fresh()
        env.append((name, t))
        return name

    def pick_var(self, env, pred=lambda t: True):
        cands = [(n, t) for n, t in env if pred(t)]
        return self.ch.pick(cands) if cands else None

    def emit(self, env, col, lines, t: T, rhs: str) -> str:
        name = self.bind(env, t)
        lines.append(" " * col + f"{name}:{t} = {rhs}")
        return name

    def e_unary(self, env, col, depth, lines):
        ch = self.ch
        v = self.pick_var(env, lambda t: t.dtype != "bool" or not self.safe)
        if v is None:
            return
        n, t = v
        if t.dtype in FLOATS:
            prim = ch.pick(UNARY_F_SAFE if self.safe else UNARY_F)
        elif t.dtype == "bool":
            prim = "not"
        else:
            prim = ch.pick([p for p in UNARY_I if p != "abs" or t.dtype[0] == "i"])
        out = t
        if prim == "integer_pow":
            prim = f"integer_pow[y={ch.pick([2, 3, -1, 0] if not self.safe else [2, 3])}]"
        elif prim == "round":
            prim = f"round[rounding_method={ch.int(0, 1)}]"
        elif prim == "is_finite":
            out = t.with_dtype("bool")
        elif prim == "reduce_precision":
            prim = "reduce_precision[exponent_bits=5 mantissa_bits=10]"
        self.emit(env, col, lines, out, f"{prim} {n}")

    def operand_like(self, env, t: T) -> str:
        """Another operand of type t: a variable, or a scalar literal."""
        ch = self.ch
        same = [n for n, u in env if u == t]
        if same and ch.coin(0.7):
            return ch.pick(same)
        return lit(t.with_shape(()), ch)

    def e_binary(self, env, col, depth, lines):
        ch = self.ch
        v = self.pick_var(env, lambda t: t.dtype != "bool" or not self.safe)
        if v is None:
            return
        n, t = v
        if t.dtype in FLOATS:
            prim = ch.pick(BINARY_F_SAFE if self.safe else BINARY_F)
        elif t.dtype == "bool":
            prim = ch.pick(BINARY_B)
        else:
            prim = ch.pick(BINARY_I)
        other = self.operand_like(env, t)
        args = [n, other] if ch.coin() else [other, n]
        out = t.with_dtype("bool") if prim in ("eq", "ne") else t
        self.emit(env, col, lines, out, f"{prim} {' '.join(args)}")

    def e_compare_select(self, env, col, depth, lines):
        ch = self.ch
        v = self.pick_var(env, lambda t: t.dtype in ("f32", "i32"))
        if v is None:
            return
        n, t = v
        other = self.operand_like(env, t)
        p = self.emit(env, col, lines, t.with_dtype("bool"), f"{ch.pick(COMPARE)} {n} {other}")
        a, b = self.operand_like(env, t), self.operand_like(env, t)
        if t.shape and (a.endswith("[]") or b.endswith("[]")):  # select_n wants arrays
            a = b = n
        self.emit(env, col, lines, t, f"select_n {p} {a} {b}")

    def e_clamp(self, env, col, depth, lines):
        v = self.pick_var(env, lambda t: t.dtype in ("f32", "i32"))
        if v is None:
            return
        n, t = v
        lo, hi = lit(t.with_shape(()), self.ch), lit(t.with_shape(()), self.ch)
        self.emit(env, col, lines, t, f"clamp {lo} {n} {hi}")

    def e_convert(self, env, col, depth, lines):
        ch = self.ch
        v = self.pick_var(env)
        if v is None:
            return
        n, t = v
        to = "f32" if self.safe else ch.pick(["f32", "i32", "bool", "f16"])
        if self.safe and t.dtype != "f32":
            return
        self.emit(
            env,
            col,
            lines,
            t.with_dtype(to),
            f"convert_element_type[new_dtype={LONG[to]} weak_type=False] {n}",
        )

    def e_iota(self, env, col, depth, lines):
        k = self.ch.int(1, 5)
        dt = "f32" if self.safe else self.ch.pick(["i32", "u32", "f32"])
        self.emit(
            env,
            col,
            lines,
            T(dt, (k,)),
            f"iota[dimension=0 dtype={LONG[dt]} shape=({k},) sharding=None] ",
        )

    def e_reduce(self, env, col, depth, lines):
        ch = self.ch
        v = self.pick_var(env, lambda t: t.shape != () and t.dtype != "bool")
        if v is None:
            return
        n, t = v
        prims = ["reduce_sum", "reduce_max"] if self.safe else REDUCE
        prim = ch.pick(prims)
        if prim in ("argmax", "argmin"):
            ax = ch.int(0, len(t.shape) - 1)
            if t.shape[ax] == 0:  # no index of an empty axis
                return
            out = T("i32", t.shape[:ax] + t.shape[ax + 1 :])
            self.emit(env, col, lines, out, f"{prim}[axes=({ax},) index_dtype=int32] {n}")
            return
        axes = sorted({ch.int(0, len(t.shape) - 1) for _ in range(ch.int(1, len(t.shape)))})
        out = t.with_shape([d for i, d in enumerate(t.shape) if i not in axes])
        extra = " out_sharding=None" if prim == "reduce_sum" else ""
        self.emit(env, col, lines, out, f"{prim}[axes={tup(axes)}{extra}] {n}")

    def e_cumulative(self, env, col, depth, lines):
        ch = self.ch
        v = self.pick_var(env, lambda t: t.shape != () and t.dtype == "f32")
        if v is None:
            return
        n, t = v
        prim = "cumsum" if self.safe else ch.pick(CUMULATIVE)
        ax = ch.int(0, len(t.shape) - 1)
        self.emit(env, col, lines, t, f"{prim}[axis={ax} reverse={ch.pick(['False', 'True'])}] {n}")

    def e_shape(self, env, col, depth, lines):
        ch = self.ch
        v = self.pick_var(env, lambda t: t.dtype != "bool" or not self.safe)
        if v is None:
            return
        n, t = v
        r = len(t.shape)
        ops = ["broadcast", "reshape", "concatenate"]
        if r >= 1:
            ops += ["slice", "rev", "pad", "squeeze_expand"]
        if r >= 2:
            ops += ["transpose"]
        op = ch.pick(ops)
        if op == "broadcast":
            new = list(t.shape)
            dims = list(range(r))
            for _ in range(ch.int(1, 2)):
                if len(new) >= 3:
                    break
                k = ch.int(0, len(new))
                new.insert(k, ch.int(1, 3))
                dims = [d + 1 if d >= k else d for d in dims]
            if r:
                rhs = f"broadcast_in_dim[broadcast_dimensions={tup(dims)}] {n}"
            else:
                rhs = f"broadcast_in_dim {n}"
            self.emit(env, col, lines, t.with_shape(new), rhs)
        elif op == "reshape":
            size = t.size
            cands = [(size,), (1, size), (size, 1)]
            cands += [(a, size // a) for a in (2, 3) if size % a == 0 and size > a]
            if size == 1:
                cands.append(())
            new = ch.pick(cands)
            self.emit(
                env,
                col,
                lines,
                t.with_shape(new),
                f"reshape[dimensions=None new_sizes={tup(new)} sharding=None] {n}",
            )
        elif op == "concatenate":
            if r == 0:
                return
            ax = ch.int(0, r - 1)
            same = [m for m, u in env if u == t]
            k = ch.int(2, 3)
            args = [ch.pick(same) for _ in range(k)]
            new = list(t.shape)
            new[ax] *= k
            self.emit(
                env, col, lines, t.with_shape(new), f"concatenate[dimension={ax}] {' '.join(args)}"
            )
        elif op == "slice":
            starts, limits = [], []
            for d in t.shape:
                a = ch.int(0, d - 1) if d > 1 else 0
                b = ch.int(a + 1, d) if d else 0  # (split makes zero-sized dims)
                starts.append(a)
                limits.append(b)
            new = [b - a for a, b in zip(starts, limits)]
            self.emit(
                env,
                col,
                lines,
                t.with_shape(new),
                f"slice[limit_indices={tup(limits)} start_indices={tup(starts)} strides=None] {n}",
            )
        elif op == "rev":
            dims = sorted({ch.int(0, r - 1) for _ in range(ch.int(1, r))})
            self.emit(env, col, lines, t, f"rev[dimensions={tup(dims)}] {n}")
        elif op == "pad":
            cfg, new = [], []
            for d in t.shape:
                lo, hi, it = ch.int(0, 2), ch.int(0, 1), ch.int(0, 1)
                if not self.safe and ch.coin(0.1):
                    lo = -1 if d > 1 else 0
                cfg.append(f"({lo}, {hi}, {it})")
                new.append(lo + hi + d + max(0, d - 1) * it)
            pv = lit(t.with_shape(()), ch)
            self.emit(
                env, col, lines, t.with_shape(new), f"pad[padding_config={tup(cfg)}] {n} {pv}"
            )
        elif op == "squeeze_expand":
            ones = [i for i, d in enumerate(t.shape) if d == 1]
            if ones:
                ax = ch.pick(ones)
                new = t.shape[:ax] + t.shape[ax + 1 :]
                self.emit(env, col, lines, t.with_shape(new), f"squeeze[dimensions=({ax},)] {n}")
            else:
                new = (1, *t.shape)
                self.emit(
                    env,
                    col,
                    lines,
                    t.with_shape(new),
                    f"broadcast_in_dim[broadcast_dimensions={tup(range(1, r + 1))}] {n}",
                )
        elif op == "transpose":
            perm = list(range(r))
            while perm == list(range(r)):
                perm = [perm[i] for i in self._perm(r)]
            new = [t.shape[p] for p in perm]
            self.emit(env, col, lines, t.with_shape(new), f"transpose[permutation={tup(perm)}] {n}")

    def _perm(self, r):
        idx = list(range(r))
        for i in range(r - 1, 0, -1):
            j = self.ch.int(0, i)
            idx[i], idx[j] = idx[j], idx[i]
        return idx

    def e_dot(self, env, col, depth, lines):
        ch = self.ch
        v = self.pick_var(env, lambda t: t.shape != () and t.dtype == "f32")
        if v is None:
            return
        a, ta = v
        i = ch.int(0, len(ta.shape) - 1)
        cands = [
            (m, u, j)
            for m, u in env
            if u.dtype == "f32" and len(u.shape) <= 2
            for j, d in enumerate(u.shape)
            if d == ta.shape[i]
        ]
        if not cands:
            return
        b, tb, j = ch.pick(cands)
        out = [d for k, d in enumerate(ta.shape) if k != i] + [
            d for k, d in enumerate(tb.shape) if k != j
        ]
        if len(out) > 3:
            return
        self.emit(
            env,
            col,
            lines,
            T("f32", tuple(out)),
            f"dot_general[dimension_numbers=(([{i}], [{j}]), ([], [])) "
            f"preferred_element_type=float32] {a} {b}",
        )

    def e_multi(self, env, col, depth, lines):
        """An equation with several results: split, or sort with an index."""
        ch = self.ch
        v = self.pick_var(env, lambda t: t.shape != () and t.dtype in ("f32", "i32"))
        if v is None:
            return
        n, t = v
        if ch.coin():
            ax = ch.int(0, len(t.shape) - 1)
            d = t.shape[ax]
            cut = ch.int(0, d)
            sizes = [cut, d - cut]
            for s in sizes:
                self.bind(env, t.with_shape(t.shape[:ax] + (s,) + t.shape[ax + 1 :]))
            binders = " ".join(f"{m}:{u}" for m, u in env[-2:])
            lines.append(" " * col + f"{binders} = split[axis={ax} sizes={tup(sizes)}] {n}")
        else:
            ax = len(t.shape) - 1
            a = self.bind(env, t)
            b = self.bind(env, t)
            lines.append(
                " " * col
                + f"{a}:{t} {b}:{t} = sort[dimension={ax} is_stable=True num_keys=1] {n} {n}"
            )

    # ------------------------------------------------------------ nested jaxprs

    def args(self, env, lo=0, hi=3):
        ch = self.ch
        if not env:
            return []
        k = ch.int(lo, hi)
        out = []
        for _ in range(k):
            n, t = ch.pick(env)
            if not self.safe and ch.coin(0.1) and t.shape == ():
                out.append((lit(t, ch), t))
            else:
                out.append((n, t))
        return out

    def e_jit(self, env, col, depth, lines):
        ch = self.ch
        args = self.args(env, 1 if self.safe else 0)
        in_types = [t for _, t in args]
        key = tuple(in_types)
        pool = self.pool.get(key)
        if pool and ch.coin(0.5):  # call a shared jaxpr again
            name, out_types = ch.pick(pool)
            ref = name
        else:
            shared = ch.coin(0.25)
            p = col + 2
            text = self.jaxpr(in_types, 0 if shared else p, depth + 1)
            out_types = self._out_types(text)
            if shared:
                name = f"{ch.pick(['f', 'g', 'h', 'body'])}{len(self.shared)}"
                self.shared.append((name, text))
                self.pool.setdefault(key, []).append((name, out_types))
                ref = name
            else:
                ref = text
                name = ch.pick(CALL_NAMES)
        if not out_types:
            return
        outs = [self.bind(env, t) for t in out_types]
        binders = " ".join(f"{n}:{t}" for n, t in zip(outs, out_types))
        ops = "".join(" " + a for a, _ in args)
        if "\n" in ref:
            lines.append(" " * col + f"{binders} = jit[")
            lines.append(" " * (col + 2) + f"name={name}")
            lines.append(" " * (col + 2) + f"jaxpr={ref}")
            lines.append(" " * col + f"]{ops}")
        else:
            lines.append(" " * col + f"{binders} = jit[name={name} jaxpr={ref}]{ops}")

    def _out_types(self, text: str) -> list[T]:
        """The output types of a generated jaxpr (from the binders and literals it prints)."""
        types = dict(
            (m.group(1), T(m.group(2), _shape(m.group(3))))
            for m in re.finditer(r"(?<![\w.])([a-z]+_?):([a-z0-9]+)\[([^\]]*)\]", text)
        )
        outs = text[text.rindex(" in (") + 5 : text.rindex(")")]
        result = []
        for a in filter(None, (x.strip() for x in outs.split(","))):
            m = re.fullmatch(r"(.+):([a-z0-9]+)\[\]", a)
            result.append(T(m.group(2), ()) if m else types[a])
        return result

    def e_cond(self, env, col, depth, lines):
        ch = self.ch
        ints = [n for n, t in env if t == T("i32")]
        if ints and ch.coin(0.8):
            idx = ch.pick(ints)
        elif self.safe:
            p = self.pick_var(env, lambda t: t.dtype == "f32")
            if p is None:
                return
            pb = self.emit(env, col, lines, T("bool", p[1].shape), f"gt {p[0]} 0.0:f32[]")
            if p[1].shape:
                pb = self.emit(
                    env,
                    col,
                    lines,
                    T("bool"),
                    f"reduce_or[axes={tup(range(len(p[1].shape)))}] {pb}",
                )
            idx = self.emit(
                env,
                col,
                lines,
                T("i32"),
                f"convert_element_type[new_dtype=int32 weak_type=False] {pb}",
            )
        else:
            idx = lit(T("i32"), ch)
        args = self.args(env, 1 if self.safe else 0)
        in_types = [t for _, t in args]
        p = col + 4
        b0 = self.jaxpr(in_types, p, depth + 1)
        outs_t = self._out_types(b0)
        branches = [b0] + [
            self.jaxpr(in_types, p, depth + 1, out_types=outs_t) for _ in range(ch.int(1, 2))
        ]
        outs = [self.bind(env, t) for t in outs_t]
        binders = " ".join(f"{n}:{t}" for n, t in zip(outs, outs_t))
        ops = " ".join([idx] + [a for a, _ in args])
        lines.append(" " * col + f"{binders} = cond[")
        lines.append(" " * (col + 2) + "branches=(")
        for b in branches:
            lines.append(" " * p + b)
        lines.append(" " * (col + 2) + ")")
        lines.append(" " * col + f"] {ops}")

    def e_scan(self, env, col, depth, lines):
        ch = self.ch
        xs_c = [(n, t) for n, t in env if t.shape]
        if not xs_c:
            return
        x0, tx0 = ch.pick(xs_c)
        length = tx0.shape[0]
        xs = [(x0, tx0)] + [(n, t) for n, t in xs_c if t.shape[0] == length and ch.coin(0.3)]
        consts = self.args(env, 0, 2)
        carry = self.args(env, 0 if not self.safe else 1, 2)
        in_types = (
            [t for _, t in consts]
            + [t for _, t in carry]
            + [t.with_shape(t.shape[1:]) for _, t in xs]
        )
        carry_t = [t for _, t in carry]
        p = col + 2
        n_ys = ch.int(0, 2)
        # the body returns the carry, then some ys of its own choosing
        body_outs = carry_t + [self.rtype() for _ in range(n_ys)]
        body = self.jaxpr(in_types, p, depth + 1, out_types=body_outs)
        out_t = carry_t + [t.with_shape((length, *t.shape)) for t in body_outs[len(carry_t) :]]
        if not out_t:
            return
        outs = [self.bind(env, t) for t in out_t]
        binders = " ".join(f"{n}:{t}" for n, t in zip(outs, out_t))
        ops = " ".join(a for a, _ in consts + carry + xs)
        lines.append(" " * col + f"{binders} = scan[")
        lines.append(" " * p + f"jaxpr={body}")
        lines.append(" " * p + f"length={length}")
        lines.append(" " * p + f"num_carry={len(carry)}")
        lines.append(" " * p + f"num_consts={len(consts)}")
        lines.append(" " * p + f"reverse={ch.pick(['False', 'True'])}")
        lines.append(" " * p + f"unroll={ch.pick([1, 1, 2])}")
        lines.append(" " * col + f"] {ops}")

    def e_while(self, env, col, depth, lines):
        """A counted loop: `i < N`, the body adds one to i (so `run` terminates)."""
        ch = self.ch
        carry = self.args(env, 0, 2)
        bound = ch.int(0, 4)
        p = col + 2
        ctypes = [t for _, t in carry]
        names = {}

        def pre(benv, c):
            i = benv[0][0]
            j = self.fresh()
            names["next"] = j
            return [" " * c + f"{j}:i32[] = add {i} 1:i32[]"]

        body_text = self._while_body(ctypes, p, depth, pre, names)
        cn = [self.fresh() for _ in range(len(ctypes) + 1)]
        res = self.fresh()
        cond_text = (
            "{ lambda ; "
            + " ".join(f"{n}:{t}" for n, t in zip(cn, [T("i32"), *ctypes]))
            + f". let {res}:bool[] = lt {cn[0]} {bound}:i32[] in ({res},) }}"
        )
        out_t = [T("i32"), *ctypes]
        outs = [self.bind(env, t) for t in out_t]
        binders = " ".join(f"{n}:{t}" for n, t in zip(outs, out_t))
        start = ch.pick(["0:i32[]", "1:i32[]", "-2:i32[]"])
        ops = " ".join([start] + [a for a, _ in carry])
        lines.append(" " * col + f"{binders} = while[")
        lines.append(" " * p + f"body_jaxpr={body_text}")
        lines.append(" " * p + "body_nconsts=0")
        lines.append(" " * p + f"cond_jaxpr={cond_text}")
        lines.append(" " * p + "cond_nconsts=0")
        lines.append(" " * col + f"] {ops}")

    def _while_body(self, ctypes, p, depth, pre, names):
        text = self.jaxpr([T("i32"), *ctypes], p, depth + 1, out_types=ctypes, pre=pre)
        # the counter output goes first
        k = text.rindex(" in (")
        return text[:k] + f" in ({names['next']}, " + text[k + 5 :].replace("(,", "(", 1)


def _shape(text: str) -> tuple:
    return tuple(int(d) for d in text.split(",")) if text else ()


# ---------------------------------------------------------------- mutators

TOKEN = re.compile(
    r"(?P<binder>[a-z]+_?:[a-z0-9]+\[[^\]\n]*\])"
    r"|(?P<lit>-?[0-9][0-9.e+-]*:[a-z0-9]+\[\]|(?:True|False|nan|-?inf):[a-z0-9]+\[\])"
    r"|(?P<key>[a-z_]+=)"
    r"|(?P<name>[a-z]+_?)"
    r"|(?P<num>[0-9]+)"
    r"|(?P<punct>[{}()\[\];.,=:])"
)
EQN_START = re.compile(r"^( *)(?:[a-z]+_?:\S+ )+= ")
DTYPES = ["f32", "i32", "bool", "f16", "bf16", "f64", "i8", "u32", "c64", "f33", "int", "key<fry>"]
SPECIAL_LITERALS = ["nan:f32[]", "inf:f32[]", "-inf:f32[]", "-0.0:f32[]", "1e38:f32[]",
                    "3.4028234663852886e+38:f32[]", "2147483648:i32[]", "-2147483649:i32[]",
                    "True:bool[]", "(1+2j):c64[]", "1.0:f32[3]", "0:u32[]", "1.0:i32[]",
                    "7:i8[]", "(b'',):float0[]", "0.5:bf16[]", "1e-45:f32[]"]  # fmt: skip
INSERTS = ["{ lambda ", " let ", " in ", "(", ")", "[", "]", "{", "}", "=", ";", ".", ",",
           ":", "_", " ", "\n", "\n    ", "\t", "\r", "\x00", "é", "\ufeff", "#", "<-",
           " jaxpr=", " x=", "\\", "'", '"', "let f = ", "f32[", "[...]", "\u2028",
           "\x1b[31m"]  # fmt: skip
PARAM_VALUES = ["(0,)", "(5,)", "()", "(-1,)", "(0, 0)", "None", "True", "-1", "0", "99",
                "99999999999999999999", "float32", "int32", "((0, 0, 0),)", "(([1], [0]), ([], []))",
                "(([7], [0]), ([], []))", "'x'", "{ lambda ; . let  in () }"]  # fmt: skip

MUTATIONS = {
    "swap_operands": 6,
    "rename": 3,
    "dtype_all": 3,
    "dtype_one": 4,
    "shape_all": 3,
    "shape_one": 4,
    "delete_eqn": 5,
    "duplicate_eqn": 3,
    "move_eqn": 3,
    "param": 5,
    "literal": 4,
    "outvars": 3,
    "nest_jit": 3,
    "nest_cond": 2,
    "nest_scan": 2,
    "token_delete": 3,
    "token_dup": 2,
    "token_insert": 3,
    "token_replace": 3,
    "line_delete": 2,
    "line_dup": 1,
    "indent": 2,
    "byte": 3,
    "truncate": 1,
}


def _eqn_spans(lines: list[str]) -> list[tuple[int, int]]:
    """(first, end) line ranges of equations: an equation line and its deeper continuation."""
    spans = []
    for i, line in enumerate(lines):
        m = EQN_START.match(line)
        if not m:
            continue
        ind = len(m.group(1))
        j = i + 1
        while j < len(lines) and (len(lines[j]) - len(lines[j].lstrip(" "))) > ind:
            j += 1
        if j < len(lines) and lines[j].lstrip(" ").startswith("]"):
            j += 1  # the closing bracket of broken parameters sits at the equation's column
        spans.append((i, j))
    return spans


def mutate(text: str, ch, kind: str | None = None) -> str:
    """One mutation of `text` (falls back to a byte edit when the chosen one does not apply)."""
    kind = kind or ch.weighted(MUTATIONS)
    try:
        out = _MUTATORS[kind](text, ch)
    except (ValueError, IndexError, KeyError):
        out = None
    if out is None or out == text:
        out = _m_byte(text, ch)
    return out


def _toks(text, group):
    return [m for m in TOKEN.finditer(text) if m.lastgroup == group]


def _m_swap_operands(text, ch):
    lines = text.split("\n")
    idx = [
        i for i, ln in enumerate(lines) if " = " in ln and len(ln.split(" = ", 1)[1].split()) >= 2
    ]
    if not idx:
        return None
    i = ch.pick(idx)
    head, rhs = lines[i].split(" = ", 1)
    parts = rhs.split(" ")
    ops = [k for k, p in enumerate(parts) if k > 0 and p and not p.endswith("[")]
    if len(ops) < 1:
        return None
    a = ch.pick(ops)
    if ch.coin() and len(ops) >= 2:
        b = ch.pick(ops)
        parts[a], parts[b] = parts[b], parts[a]
    else:  # an operand replaced by another variable of the text
        names = [m.group().split(":")[0] for m in _toks(text, "binder")]
        if not names:
            return None
        parts[a] = ch.pick(names)
    lines[i] = head + " = " + " ".join(parts)
    return "\n".join(lines)


def _m_rename(text, ch):
    names = sorted({m.group().split(":")[0] for m in _toks(text, "binder")})
    if not names:
        return None
    a = ch.pick(names)
    b = ch.pick(names + ["in", "let", "lambda", "_", "nan", "inf", "zz", "a_"])
    pat = re.compile(r"(?<![\w.=])" + re.escape(a) + r"(?![\w\[(])")
    if ch.coin():
        return pat.sub(b, text)
    ms = list(pat.finditer(text))
    if not ms:
        return None
    m = ch.pick(ms)
    return text[: m.start()] + b + text[m.end() :]


def _m_dtype(text, ch, everywhere):
    found = sorted(set(re.findall(r":([a-z]+[0-9]*)\[", text)))
    if not found:
        return None
    a = ch.pick(found)
    b = ch.pick(DTYPES)
    if everywhere:
        return text.replace(f":{a}[", f":{b}[")
    ms = [m for m in re.finditer(re.escape(f":{a}["), text)]
    m = ch.pick(ms)
    return text[: m.start()] + f":{b}[" + text[m.end() :]


def _m_shape(text, ch, everywhere):
    found = sorted(set(re.findall(r"(?<=[a-z0-9]\[)([0-9,]*)(?=\])", text)))
    if not found:
        return None
    a = ch.pick(found)
    dims = [int(d) for d in a.split(",")] if a else []
    op = ch.int(0, 3)
    if op == 0 and dims:
        k = ch.int(0, len(dims) - 1)
        dims[k] = ch.pick([0, 1, dims[k] + 1, dims[k] * 2, 7])
    elif op == 1:
        dims.insert(ch.int(0, len(dims)), ch.int(1, 3))
    elif op == 2 and dims:
        dims.pop(ch.int(0, len(dims) - 1))
    else:
        dims = dims[::-1]
    b = ",".join(map(str, dims))
    pat = re.compile(r"(?<=[a-z0-9]\[)" + re.escape(a) + r"(?=\])")
    if everywhere:
        return pat.sub(b, text)
    ms = list(pat.finditer(text))
    m = ch.pick(ms)
    return text[: m.start()] + b + text[m.end() :]


def _m_delete_eqn(text, ch):
    lines = text.split("\n")
    spans = _eqn_spans(lines)
    if not spans:
        return None
    i, j = ch.pick(spans)
    return "\n".join(lines[:i] + lines[j:])


def _m_duplicate_eqn(text, ch):
    lines = text.split("\n")
    spans = _eqn_spans(lines)
    if not spans:
        return None
    i, j = ch.pick(spans)
    return "\n".join(lines[:j] + lines[i:j] + lines[j:])


def _m_move_eqn(text, ch):
    lines = text.split("\n")
    spans = _eqn_spans(lines)
    if len(spans) < 2:
        return None
    i, j = ch.pick(spans)
    k, l = ch.pick(spans)
    if k == i:
        return None
    block = lines[i:j]
    rest = lines[:i] + lines[j:]
    at = k if k < i else k - (j - i)
    return "\n".join(rest[:at] + block + rest[at:])


def _m_param(text, ch):
    ms = [m for m in re.finditer(r"([a-z_]+)=([^\s\]]+)", text)]
    if not ms:
        return None
    m = ch.pick(ms)
    v = m.group(2)
    if re.fullmatch(r"\(?[0-9, ()\[\]]*\)?", v) and ch.coin():
        nums = list(re.finditer(r"[0-9]+", v))
        if nums:
            n = ch.pick(nums)
            v = v[: n.start()] + str(ch.pick([0, 1, 2, 3, 5, 9, -1])) + v[n.end() :]
        else:
            v = ch.pick(PARAM_VALUES)
    else:
        v = ch.pick(PARAM_VALUES)
    if ch.coin(0.15):  # drop the parameter altogether
        return text[: m.start()] + text[m.end() :]
    return text[: m.start(2)] + v + text[m.end(2) :]


def _m_literal(text, ch):
    ms = _toks(text, "lit")
    new = ch.pick(SPECIAL_LITERALS)
    if not ms:
        ms = [m for m in _toks(text, "name") if text[m.end() : m.end() + 1] in " \n)"]
        if not ms:
            return None
    m = ch.pick(ms)
    return text[: m.start()] + new + text[m.end() :]


def _m_outvars(text, ch):
    k = text.rfind(" in (")
    if k < 0:
        return None
    e = text.find(")", k)
    outs = [x.strip() for x in text[k + 5 : e].split(",") if x.strip()]
    names = [m.group().split(":")[0] for m in _toks(text, "binder")]
    op = ch.int(0, 3)
    if op == 0 and outs:
        outs.pop(ch.int(0, len(outs) - 1))
    elif op == 1 and names:
        outs.append(ch.pick(names))
    elif op == 2:
        outs.append(ch.pick(SPECIAL_LITERALS))
    else:
        outs = outs[::-1]
    new = ", ".join(outs) + ("," if len(outs) == 1 else "")
    return text[: k + 5] + new + text[e:]


def split_top(text: str) -> tuple[str, str]:
    """(shared definitions, the top-level jaxpr) of a printed program."""
    lines = text.rstrip("\n").split("\n")
    starts = [i for i, ln in enumerate(lines) if ln.startswith("{ lambda")]
    if not starts:
        raise ValueError("no top-level jaxpr")
    k = starts[-1]
    return "\n".join(lines[:k]) + ("\n" if k else ""), "\n".join(lines[k:])


def _signature(top: str):
    """(input types, output types) of the top-level jaxpr (with the tool's parser)."""
    from jaxprtool.core import ShapedArray
    from jaxprtool.text.parser import parse

    j = parse(top, "<seed>").jaxpr
    if j.constvars:
        raise ValueError("constvars")
    if not all(isinstance(t, ShapedArray) for t in j.in_types + j.out_types):
        raise ValueError("not arrays")
    return [str(t) for t in j.in_types], [str(t) for t in j.out_types]


def _indent(body: str, by: int) -> str:
    first, *rest = body.split("\n")
    return "\n".join([first] + [" " * by + ln if ln else ln for ln in rest])


def nest(text: str, ch, how: str) -> str | None:
    """The program as the body of a `jit`, `cond` or `scan` in a new top-level jaxpr."""
    shared, top = split_top(text)
    try:
        ins, outs = _signature(shared + top)
    except Exception:  # noqa: BLE001 - an input that does not parse is not nested
        return None
    names = iter(f"z{jax_name(k)}" for k in range(10_000))
    xs = [(next(names), t) for t in ins]
    ops = " ".join(n for n, _ in xs)
    if how == "jit":
        ys = [(next(names), t) for t in outs]
        eqn = (
            f"    {' '.join(f'{n}:{t}' for n, t in ys)} = jit[\n      name=nested\n"
            f"      jaxpr={_indent(top, 6)}\n    ] {ops}"
        )
        head = f"{{ lambda ; {' '.join(f'{n}:{t}' for n, t in xs)}. let"
    elif how == "cond":
        p = next(names)
        ys = [(next(names), t) for t in outs]
        body = _indent(top, 8)
        eqn = (
            f"    {' '.join(f'{n}:{t}' for n, t in ys)} = cond[\n      branches=(\n"
            f"        {body}\n        {body}\n      )\n    ] {p} {ops}"
        )
        head = f"{{ lambda ; {p}:i32[] {' '.join(f'{n}:{t}' for n, t in xs)}. let"
    else:  # scan: the inputs are constants, each output gets a leading axis
        length = ch.int(1, 3)
        ys = [
            (next(names), re.sub(r"\[", f"[{length},", t, count=1).replace(",]", "]")) for t in outs
        ]
        eqn = (
            f"    {' '.join(f'{n}:{t}' for n, t in ys)} = scan[\n      jaxpr={_indent(top, 6)}\n"
            f"      length={length}\n      num_carry=0\n      num_consts={len(xs)}\n"
            f"      reverse=False\n      unroll=1\n    ] {ops}"
        )
        head = f"{{ lambda ; {' '.join(f'{n}:{t}' for n, t in xs)}. let"
    if not ys:
        return None
    return f"{shared}{head}\n{eqn}\n  in ({', '.join(n for n, _ in ys)}{',' if len(ys) == 1 else ''}) }}\n"


def scalarize(text: str) -> str | None:
    """The program with its outputs replaced by the sum of its first float output (a
    function `grad` accepts)."""
    shared, top = split_top(text)
    try:
        ins, outs = _signature(shared + top)
    except Exception:  # noqa: BLE001 - an input that does not parse is left alone
        return None
    k = next(
        (i for i, t in enumerate(outs) if t.startswith(("f32[", "f64[", "f16[", "bf16["))), None
    )
    if k is None:
        return None
    names = iter(f"z{jax_name(i)}" for i in range(10_000))
    xs = [(next(names), t) for t in ins]
    ys = [(next(names), t) for t in outs]
    dt = outs[k].split("[")[0]
    rank = len(_shape(outs[k].split("[")[1].rstrip("]")))
    s = next(names)
    sum_eqn = (
        f"    {s}:{dt}[] = reduce_sum[axes={tup(range(rank))} out_sharding=None] {ys[k][0]}\n"
        if rank
        else ""
    )
    return (
        f"{shared}{{ lambda ; {' '.join(f'{n}:{t}' for n, t in xs)}. let\n"
        f"    {' '.join(f'{n}:{t}' for n, t in ys)} = jit[\n      name=scalarized\n"
        f"      jaxpr={_indent(top, 6)}\n    ] {' '.join(n for n, _ in xs)}\n"
        f"{sum_eqn}  in ({s if rank else ys[k][0]},) }}\n"
    )


def _m_token(text, ch, op):
    ms = list(TOKEN.finditer(text))
    if not ms:
        return None
    m = ch.pick(ms)
    if op == "delete":
        return text[: m.start()] + text[m.end() :]
    if op == "dup":
        return text[: m.end()] + " " + m.group() + text[m.end() :]
    if op == "insert":
        return text[: m.start()] + ch.pick(INSERTS) + text[m.start() :]
    same = [x.group() for x in ms if x.lastgroup == m.lastgroup]
    return text[: m.start()] + ch.pick(same) + text[m.end() :]


def _m_line(text, ch, op):
    lines = text.split("\n")
    i = ch.int(0, len(lines) - 1)
    if op == "delete":
        return "\n".join(lines[:i] + lines[i + 1 :])
    if op == "dup":
        return "\n".join(lines[: i + 1] + lines[i:])
    d = ch.pick([-2, -1, 1, 2])
    lines[i] = " " * d + lines[i] if d > 0 else lines[i][-d:]
    return "\n".join(lines)


def _m_byte(text, ch):
    if not text:
        return ch.pick(INSERTS)
    i = ch.int(0, len(text) - 1)
    c = ch.pick(INSERTS + list("{}[]()=:;., \n_a1-") + ["\x00", "\r\n", "\x7f", "\ud7ff"])
    if ch.coin():
        return text[:i] + c + text[i + 1 :]
    return text[:i] + c + text[i:]


def _m_truncate(text, ch):
    return text[: ch.int(0, max(0, len(text) - 1))]


_MUTATORS = {
    "swap_operands": _m_swap_operands,
    "rename": _m_rename,
    "dtype_all": lambda t, ch: _m_dtype(t, ch, True),
    "dtype_one": lambda t, ch: _m_dtype(t, ch, False),
    "shape_all": lambda t, ch: _m_shape(t, ch, True),
    "shape_one": lambda t, ch: _m_shape(t, ch, False),
    "delete_eqn": _m_delete_eqn,
    "duplicate_eqn": _m_duplicate_eqn,
    "move_eqn": _m_move_eqn,
    "param": _m_param,
    "literal": _m_literal,
    "outvars": _m_outvars,
    "nest_jit": lambda t, ch: nest(t, ch, "jit"),
    "nest_cond": lambda t, ch: nest(t, ch, "cond"),
    "nest_scan": lambda t, ch: nest(t, ch, "scan"),
    "token_delete": lambda t, ch: _m_token(t, ch, "delete"),
    "token_dup": lambda t, ch: _m_token(t, ch, "dup"),
    "token_insert": lambda t, ch: _m_token(t, ch, "insert"),
    "token_replace": lambda t, ch: _m_token(t, ch, "replace"),
    "line_delete": lambda t, ch: _m_line(t, ch, "delete"),
    "line_dup": lambda t, ch: _m_line(t, ch, "dup"),
    "indent": lambda t, ch: _m_line(t, ch, "indent"),
    "byte": _m_byte,
    "truncate": _m_truncate,
}


# ---------------------------------------------------------------- pathological texts


def deep_lambda(n: int) -> str:
    """n jit bodies nested inside each other, written out (one line)."""
    s = "{ lambda ; a:f32[]. let b:f32[] = sin a in (b,) }"
    for _ in range(n):
        s = "{ lambda ; a:f32[]. let b:f32[] = jit[name=f jaxpr=" + s + "] a in (b,) }"
    return s + "\n"


def deep_shared(n: int) -> str:
    """n shared jaxprs, each calling the previous one."""
    out = ["let f0 = { lambda ; a:f32[]. let b:f32[] = sin a in (b,) } in"]
    for i in range(1, n):
        out.append(
            f"let f{i} = {{ lambda ; a:f32[]. let b:f32[] = jit[name=f jaxpr=f{i - 1}] a in (b,) }} in"
        )
    out.append(f"{{ lambda ; a:f32[]. let b:f32[] = jit[name=f jaxpr=f{n - 1}] a in (b,) }}")
    return "\n".join(out) + "\n"


def doubling_shared(n: int) -> str:
    """n shared jaxprs, each calling the previous one twice: a text of O(n) bytes whose
    program, inlined, has O(2**n) equations (issue 37's exponential input)."""
    out = ["let f0 = { lambda ; a:f32[]. let b:f32[] = sin a in (b,) } in"]
    for i in range(1, n):
        out.append(
            f"let f{i} = {{ lambda ; a:f32[]. let\n    b:f32[] = jit[name=f{i - 1} jaxpr=f{i - 1}] a\n"
            f"    c:f32[] = jit[name=f{i - 1} jaxpr=f{i - 1}] b\n  in (c,) }} in"
        )
    out.append(
        f"{{ lambda ; a:f32[]. let\n    b:f32[] = jit[name=f{n - 1} jaxpr=f{n - 1}] a\n  in (b,) }}"
    )
    return "\n".join(out) + "\n"


def chain(n: int, dtype: str = "f32", bad_every: int = 0) -> str:
    """`{ lambda ; a:f32[3]. let b = sin a; c = sin b; ... }` with n equations; with
    bad_every=k every k-th binder has a wrong type (i32)."""
    lines = [f"{{ lambda ; a:{dtype}[3]. let"]
    prev = "a"
    for i in range(1, n + 1):
        name = jax_name(i)
        t = "i32" if bad_every and i % bad_every == 0 else dtype
        lines.append(f"    {name}:{t}[3] = sin {prev}")
        prev = name
    lines.append(f"  in ({prev},) }}")
    return "\n".join(lines) + "\n"


def one_line(n: int) -> str:
    """n equations on one line (`;` separated)."""
    eqs = "; ".join(f"{jax_name(i)}:f32[3] = sin {jax_name(i - 1)}" for i in range(1, n + 1))
    return f"{{ lambda ; a:f32[3]. let {eqs} in ({jax_name(n)},) }}\n"


SMALL = "{ lambda ; a:f32[3]. let\n    b:f32[3] = sin a\n    c:f32[3] = mul b a\n  in (c,) }\n"


def pathological(scale: float = 1.0) -> dict[str, bytes]:
    """The pathological inputs by class (bytes; `scale` shrinks them for quick tests).
    Each must get a located error or the right output in bounded time and memory."""
    mb = int(10_000_000 * scale)
    k = 1000  # deep texts are small: always full size
    rnd = random.Random(0)
    out = {
        "long line: 10 MB name parameter": (
            "{ lambda ; a:f32[3]. let\n    b:f32[3] = jit[name="
            + "x" * mb
            + " jaxpr={ lambda ; c:f32[3]. let  in (c,) }] a\n  in (b,) }\n"
        ),
        "long line: 10 MB of one token": "a" * mb,
        "long line: 10 MB variable name": (
            "{ lambda ; a:f32[3]. let\n    b:f32[3] = sin " + "x" * mb + "\n  in (b,) }\n"
        ),
        "long line: 10 MB comment": "# " + "x" * mb + "\n" + SMALL,
        "long line: 10 MB number": SMALL.replace("in (c,)", "in (" + "1" * mb + ".0:f32[],)"),
        "long line: equations on one 10 MB line": one_line(max(10, mb // 18)),
        "long line: 1 M operands": (
            "{ lambda ; a:f32[3]. let\n    b:f32[3] = add" + " a" * (mb // 10) + "\n  in (b,) }\n"
        ),
        "deep: 1000 nested { lambda": deep_lambda(k),
        "deep: 1000 chained shared jaxprs": deep_shared(k),
        "deep: 1000 [ in a parameter": SMALL.replace("sin a", "foo[x=" + "[" * k + "]" * k + "] a"),
        "deep: 1000 ( in the outputs": SMALL.replace("in (c,)", "in " + "(" * k + "c" + ")" * k),
        "deep: 1000 {": "{" * k + "}" * k,
        "deep: 1000 unclosed { lambda": "{ lambda ; a:f32[]. let b:f32[] = jit[name=f jaxpr=" * k,
        "size: 100k equations": chain(int(100_000 * scale)),
        "size: 20k type errors": chain(int(20_000 * scale), bad_every=1),
        "bytes: binary data": bytes(rnd.randrange(256) for _ in range(max(1000, mb // 100))),
        "bytes: NUL bytes": SMALL.replace("sin a", "sin\x00a"),
        "bytes: NUL at the start": "\x00" + SMALL,
        "bytes: CRLF line endings": SMALL.replace("\n", "\r\n"),
        "bytes: CR line endings": SMALL.replace("\n", "\r"),
        "bytes: byte-order mark": "\ufeff" + SMALL,
        "bytes: invalid UTF-8": SMALL.encode()[:30] + b"\xff\xfe" + SMALL.encode()[30:],
        "bytes: UTF-16": SMALL.encode("utf-16"),
        "bytes: ANSI colours": SMALL.replace("sin", "\x1b[31msin\x1b[0m"),
        "size: 40 shared jaxprs, each using the previous twice": doubling_shared(40),
        "cycle: mutually recursive shared jaxprs": (
            "let f = { lambda ; a:f32[3]. let b:f32[3] = jit[name=g jaxpr=g] a in (b,) } in\n"
            "let g = { lambda ; a:f32[3]. let b:f32[3] = jit[name=f jaxpr=f] a in (b,) } in\n"
            "{ lambda ; a:f32[3]. let b:f32[3] = jit[name=f jaxpr=f] a in (b,) }\n"
        ),
    }
    return {
        k: v if isinstance(v, bytes) else v.encode("utf-8", "surrogatepass") for k, v in out.items()
    }


# ---------------------------------------------------------------- cases

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
FORMAT_DIR = Path(os.environ.get("JAXPR_FORMAT_DIR", ROOT.parent / "shared" / "jaxpr-format"))


def corpus_seeds(max_chars: int = 6000) -> list[str]:
    """Texts of the reference corpus (all versions) small enough to mutate quickly."""
    d = FORMAT_DIR / "corpus"
    if not d.is_dir():
        return []
    out = []
    for p in sorted(d.rglob("*.jaxpr")):
        if p.stat().st_size <= max_chars:
            out.append(p.read_text(encoding="utf-8", errors="replace"))
    return out


#: command -> (argv before FILE, weight, takes -o, prints a jaxpr)
COMMANDS = {
    "fmt": (["fmt"], 10, True, True),
    "check": (["check"], 10, False, False),
    "jvp": (["jvp"], 9, True, True),
    "linearize": (["linearize"], 8, True, True),
    "vjp": (["vjp"], 9, True, True),
    "grad": (["grad"], 6, True, True),
    "transpose": (["transpose"], 2, True, True),
    "dce": (["dce"], 6, True, True),
    "cse": (["cse"], 5, True, True),
    "opt": (["opt", "-p", "inline,simplify,cse,dce"], 5, True, True),
    "fold": (["fold"], 1, True, True),
    "canonicalize": (["canonicalize"], 1, True, True),
    "stats": (["stats"], 3, True, False),
    "stats --json": (["stats", "--json"], 3, True, False),
    "diff": (["diff"], 4, False, False),
    "run": (["run", "--random", "0"], 3, False, False),
}

#: what the runner looks for (the issue's list, then consistency of the results)
FINDINGS = {
    "crash": "a traceback, an internal error, or an exit status other than 0/1/2",
    "hang": "the run exceeded its time limit",
    "memory": "the run's resident memory grew beyond the limit",
    "unlocated": "an `error:` line without FILE:LINE:COL",
    "partial -o": "with -o: a failed run changed OUT or left a temporary file; a good one "
    "wrote something else than the run without -o printed",
    "nondeterministic": "the same command twice (in one process, or under two "
    "PYTHONHASHSEED values in fresh processes) gave different output",
    "bad output": "a command that succeeded printed a program that does not parse or "
    "check, fmt that is not a fixed point, `diff A A` that is not 0, stats --json that is not JSON",
}


@dataclass
class Case:
    index: int
    source: str  # how the text was made
    data: bytes
    command: str
    data_b: bytes | None = None  # diff's second file
    stdin: bool = False
    options: list = field(default_factory=list)  # after the command's own arguments
    global_options: list = field(default_factory=list)  # before the command

    def argv(self, file: str) -> list[str]:
        """The command line, with FILE (and diff's second file `FILE.b`)."""
        base = COMMANDS[self.command][0]
        files = [file, file + ".b"] if self.command == "diff" else [file]
        return [*self.global_options, *base, *self.options, *files]


#: options each command is also tried with
OPTIONS = {
    "fmt": [["--width", "40"], ["--width", "1"], ["--width", "200"]],
    "jvp": [["--no-instantiate"], ["--opt", "none"], ["--argnums", "0"], ["--custom-rules", "body"]],
    "linearize": [["--opt", "none"], ["--argnums", "0"], ["--stats"]],
    "vjp": [["--argnums", "0"], ["--opt", "none"], ["--custom-rules", "body"]],
    "grad": [["--with-value"], ["--has-aux"], ["--opt", "none"]],
    "transpose": [["--residuals", "1"], ["--linear", "0"]],
    "opt": [["-p", "canonicalize,dce"], ["-p", "fold,simplify"], ["-p", "inline{names=relu},cse"],
            ["-p", "canonicalize{max-iterations=2},cse,dce", "--print-after-all"]],
    "dce": [["--diff"]],
    "stats": [],
    "run": [["--eager"]],
}  # fmt: skip
STYLES = ["0.4.35", "0.6.2", "0.7.2", "0.10.2", "0.12"]


def _safely(fn, *args):
    """fn(*args), or None when a generator step does not apply to this text."""
    try:
        return fn(*args)
    except Exception:  # noqa: BLE001 - a mutation of odd text may fail: keep the text
        return None


def _gen(ch, **kw) -> str:
    opts = dict(max_depth=ch.pick([0, 1, 2, 2]), max_eqns=ch.pick([3, 6, 8, 12]))
    opts.update(kw)
    return ProgramGen(ch, **opts).program()


def make_case(index: int, seed: int, seeds: list[str]) -> Case:
    """Case `index` of campaign `seed` (reproducible from the two numbers alone)."""
    ch = Rand(seed * 1_000_003 + index)
    names = list(COMMANDS)
    command = ch.weighted({c: COMMANDS[c][1] for c in names})
    src = ch.weighted({"corpus": 30, "corpus+mutate": 35, "gen": 20, "gen+mutate": 15})
    if src.startswith("corpus") and not seeds:
        src = src.replace("corpus", "gen")
    if src.startswith("corpus"):
        k = ch.int(0, len(seeds) - 1)
        text = seeds[k]
        label = f"corpus[{k}]"
    else:
        text = _gen(ch, scalar_out=command == "grad" and ch.coin(0.8), safe=ch.coin(0.2))
        label = "gen"
    if src.startswith("corpus") and command == "grad" and ch.coin(0.8):
        text = _safely(scalarize, text) or text
        label += "+scalarize"
    if src == "corpus" and ch.coin(0.5):  # a valid nesting of a real program
        how = ch.pick(["jit", "cond", "scan"])
        text = _safely(nest, text, ch, how) or text
        label += f"+nest_{how}"
    if src.endswith("mutate"):
        for _ in range(ch.pick([1, 1, 1, 2, 3])):
            kind = ch.weighted(MUTATIONS)
            text = _safely(mutate, text, ch, kind) or text
            label += f"+{kind}"
    data = text.encode("utf-8", "surrogatepass")
    if src.endswith("mutate") and ch.coin(0.03):  # bytes that are not UTF-8
        i = ch.int(0, len(data))
        data = data[:i] + ch.pick([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x80"]) + data[i:]
        label += "+bad_utf8"
    data_b = None
    if command == "diff":
        r = ch.int(0, 2)
        b = text if r == 0 else _safely(mutate, text, ch) or text
        data_b = b.encode("utf-8", "surrogatepass")
    case = Case(index, label, data, command, data_b, stdin=ch.coin(0.1) and command != "diff")
    if OPTIONS.get(command) and ch.coin(0.3):
        case.options = list(ch.pick(OPTIONS[command]))
    if COMMANDS[command][3] and ch.coin(0.1):
        case.global_options = ["--jax-style", ch.pick(STYLES)]
    if command == "run" and not runnable(case):
        case.command, case.options = "check", []
    return case


def runnable(case: Case) -> bool:
    """`run` only on tiny inputs without loops (a mutated loop may never end)."""
    t = case.data.decode("utf-8", "replace")
    if len(t) > 3000 or "while[" in t or "scan[" in t and "length=" not in t:
        return False
    top = t[t.rfind("{ lambda") :]
    header = top.split(". let", 1)[0]
    size = 0
    for m in re.finditer(r":[a-z0-9]+\[([0-9,]*)\]", header):
        n = 1
        for d in filter(None, m.group(1).split(",")):
            n *= int(d)
        size += n
    return size <= 256


# ---------------------------------------------------------------- running one case


class Hang(BaseException):
    """Raised by SIGALRM in the worker (a BaseException: the tool's handlers let it through)."""


def _alarm(signum, frame):
    raise Hang()


LOCATED = re.compile(r"^\S.*?:\d+:\d+: (error|warning): ")
ERROR_LINE = re.compile(r"^(?:\x1b\[[0-9;]*m)*(error|warning):", re.M)


@dataclass
class Result:
    exit_code: int | None
    stdout: bytes
    stderr: str
    exc: str | None = None  # traceback text of an exception that escaped
    seconds: float = 0.0


def invoke(argv: list[str], stdin: bytes | None, time_limit: float) -> Result:
    from click.testing import CliRunner

    from jaxprtool.cli import main

    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, time_limit)
    t0 = time.perf_counter()
    try:
        r = CliRunner().invoke(main, argv, input=stdin)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    exc = None
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        exc = "".join(traceback.format_exception(r.exception))
    return Result(r.exit_code, r.stdout_bytes, r.stderr, exc, time.perf_counter() - t0)


def _peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _checked(text: str, path: str):
    """(parse error, first check error, jaxpr) of a text; the errors as messages or None."""
    from jaxprtool.check import check
    from jaxprtool.core import JaxprError
    from jaxprtool.text.parser import parse

    try:
        j = parse(text, path).jaxpr
    except JaxprError as e:
        return str(e), None, None
    except RecursionError:
        return None, None, None
    try:
        errs = [d for d in check(j, path, check_names=True) if d.kind == "error"]
    except RecursionError:
        return None, None, None
    return None, (str(errs[0]) if errs else None), j


def _first_difference(a: str, b: str) -> str:
    la, lb = a.splitlines(), b.splitlines()
    for k, (x, y) in enumerate(zip(la, lb)):
        if x != y:
            return f"line {k + 1}: {x[:150]!r} / {y[:150]!r}"
    k = min(len(la), len(lb))
    extra = (la if len(la) > k else lb)[k] if len(la) != len(lb) else ""
    return f"{len(la)} / {len(lb)} lines; first extra line {extra[:200]!r}"


class Runner:
    """Runs cases in this process and returns what it found."""

    def __init__(self, workdir: str, time_limit: float = 20.0, mem_limit_mb: float = 2048,
                 hashseed_every: int = 0):  # fmt: skip
        self.dir = Path(workdir)
        self.time_limit = time_limit
        self.mem_limit_mb = mem_limit_mb
        self.hashseed_every = hashseed_every

    def paths(self, case: Case):
        inp = self.dir / "in.jaxpr"
        inp.write_bytes(case.data)
        b = self.dir / "in.jaxpr.b"
        if case.data_b is not None:
            b.write_bytes(case.data_b)
        return inp, b

    def run(self, case: Case) -> tuple[list[tuple[str, str]], dict]:
        """[(finding category, detail)], info (exit code, seconds, peak memory growth)."""
        found: list[tuple[str, str]] = []
        argv0, _w, takes_o, prints_jaxpr = COMMANDS[case.command]
        inp, b = self.paths(case)
        if case.stdin:
            argv, stdin = case.argv("-"), case.data
        else:
            argv, stdin = case.argv(str(inp)), None
        peak0 = _peak_rss_mb()
        t_case = time.perf_counter()
        try:
            r1 = invoke(argv, stdin, self.time_limit)
        except Hang:
            return [("hang", f"over {self.time_limit:.0f} s")], {"exit": None}
        found += self.judge(case, r1)
        if takes_o:
            # OUT is a new name, an existing file, or (a fifth of the time) the input itself,
            # which must be refused
            into_input = not case.stdin and case.command != "diff" and case.index % 5 == 0
            out = inp if into_input else self.dir / "out.jaxpr"
            sentinel = case.data if into_input else b"sentinel: the old contents of OUT\n"
            out.write_bytes(sentinel)
            try:
                r2 = invoke([*argv, "-o", str(out)], stdin, self.time_limit)
            except Hang:
                return found + [("hang", f"with -o, over {self.time_limit:.0f} s")], {"exit": None}
            if into_input:  # refused before anything runs (exit 2), the input untouched
                if r2.exit_code != 2 or out.read_bytes() != sentinel:
                    found.append(("partial -o", f"-o onto the input: exit {r2.exit_code}"))
            else:
                found += self.judge(case, r2)
                leftovers = [p.name for p in self.dir.iterdir() if p.name.startswith(".jaxprtool-")]
                got = out.read_bytes() if out.exists() else None
                for p in leftovers:
                    (self.dir / p).unlink()
                if leftovers:
                    found.append(("partial -o", f"temporary files left: {leftovers}"))
                if r2.exit_code != 0 and got != sentinel:
                    found.append(("partial -o", f"exit {r2.exit_code} but OUT changed"))
                same = (r1.exit_code, r1.stderr, r1.stdout) == (r2.exit_code, r2.stderr, got)
                if r2.exit_code == 0 and r2.stdout:
                    found.append(("partial -o", "with -o, the result also went to stdout"))
                if not same and r1.exit_code == 0 == r2.exit_code and r1.stderr == r2.stderr:
                    found.append(("partial -o", "OUT differs from the output without -o"))
                elif not same and (r1.exit_code, r1.stderr) != (r2.exit_code, r2.stderr):
                    why = f"exit {r1.exit_code} / {r2.exit_code}; {_first_difference(r1.stderr, r2.stderr)}"
                    found.append(
                        ("nondeterministic", f"the run with -o said something else: {why}")
                    )
        else:
            try:
                r2 = invoke(argv, stdin, self.time_limit)
            except Hang:
                return found + [("hang", "second run")], {"exit": None}
            if (r1.exit_code, r1.stderr, r1.stdout) != (r2.exit_code, r2.stderr, r2.stdout):
                why = _first_difference(r1.stderr + r1.stdout.decode("utf-8", "replace"),
                                        r2.stderr + r2.stdout.decode("utf-8", "replace"))  # fmt: skip
                found.append(
                    ("nondeterministic", f"the second run in this process differed: {why}")
                )
            if case.command == "diff" and case.data_b == case.data and r1.exit_code == 1:
                first = (r1.stderr.splitlines() or [""])[0]
                found.append(("bad output", f"diff A A exits 1 ('they differ'): {first[:200]}"))
        grow = _peak_rss_mb() - peak0
        if grow > self.mem_limit_mb:
            found.append(("memory", f"peak resident size grew {grow:.0f} MB"))
        if r1.exit_code == 0 and not found:
            found += self.consistency(case, r1, prints_jaxpr)
        if self.hashseed_every and case.index % self.hashseed_every == 0:
            self.paths(case)  # the -o run may have replaced the input
            found += self.hashseeds(case, argv, stdin, r1)
        total = time.perf_counter() - t_case
        return found, {"exit": r1.exit_code, "seconds": r1.seconds, "grow_mb": grow, "total": total}

    def judge(self, case: Case, r: Result) -> list[tuple[str, str]]:
        out = []
        if r.exc is not None:
            out.append(("crash", r.exc.strip().splitlines()[-1] + "\n" + r.exc))
        elif r.exit_code not in (0, 1, 2):
            out.append(("crash", f"exit status {r.exit_code}"))
        text = r.stderr
        if "Traceback (most recent call last)" in text or "internal error" in text:
            line = next((ln for ln in text.splitlines() if "internal error" in ln), text[:300])
            out.append(("crash", line))
        if r.exit_code == 2 and case.command != "diff":
            out.append(("crash", "exit status 2 (usage) for a well-formed command line"))
        for m in ERROR_LINE.finditer(text):
            if m.group(1) == "error" and "internal error" not in text[m.start() : m.start() + 40]:
                line = text[m.start() : text.find("\n", m.start())]
                out.append(("unlocated", line[:300]))
                break
        return out

    def consistency(self, case: Case, r: Result, prints_jaxpr: bool) -> list[tuple[str, str]]:
        """A successful run's output: a program that parses (and checks, when the input
        did), fmt a fixed point of itself, JSON from stats --json."""
        text = r.stdout.decode("utf-8", "replace")
        if prints_jaxpr:
            perr, cerr, _j = _checked(text, "<output>")
            if perr is not None:
                return [
                    ("bad output", f"{case.command} printed a program that does not parse: {perr}")
                ]
            if cerr is not None:
                in_err = (
                    case.command != "fmt"
                    or _checked(case.data.decode("utf-8", "replace"), "<input>")[1]
                )
                if case.command != "fmt" or in_err is None:
                    return [("bad output", f"{case.command} printed a program that fails: {cerr}")]
            if case.command == "fmt":
                again = invoke(case.argv("-"), r.stdout, self.time_limit)
                if again.exit_code != 0 or again.stdout != r.stdout:
                    detail = _first_difference(text, again.stdout.decode("utf-8", "replace"))
                    return [("bad output", f"fmt is not a fixed point on its own output: {detail}")]
        if case.command == "stats --json":
            import json

            try:
                json.loads(text)
            except ValueError as e:
                return [("bad output", f"stats --json printed no JSON: {e}")]
        return []

    def hashseeds(self, case, argv, stdin, r1) -> list[tuple[str, str]]:
        """The command in two fresh processes under different PYTHONHASHSEED values."""
        import subprocess

        if case.command == "run":
            return []
        res = []
        for hs in ("0", "4242"):
            env = dict(os.environ, PYTHONHASHSEED=hs, NO_COLOR="1")
            env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
            try:
                p = subprocess.run(
                    [sys.executable, "-m", "jaxprtool", *argv],
                    input=stdin or b"",
                    capture_output=True,
                    timeout=self.time_limit * 3 + 30,
                    env=env,
                    cwd=self.dir,
                )
            except subprocess.TimeoutExpired:
                return [("hang", "in a fresh process")]
            res.append((p.returncode, p.stdout, p.stderr))
        if res[0] != res[1]:
            why = _first_difference(
                (res[0][2] + res[0][1]).decode("utf-8", "replace"),
                (res[1][2] + res[1][1]).decode("utf-8", "replace"),
            )
            return [
                ("nondeterministic", f"different output under PYTHONHASHSEED=0 and 4242: {why}")
            ]
        code, so, se = res[0]
        if (code, so) != (r1.exit_code, r1.stdout) or se.decode("utf-8", "replace") != r1.stderr:
            why = _first_difference(
                (se + so).decode("utf-8", "replace"),
                r1.stderr + r1.stdout.decode("utf-8", "replace"),
            )
            return [
                (
                    "nondeterministic",
                    f"a fresh process printed something else than in-process: {why}",
                )
            ]
        return []


# ---------------------------------------------------------------- the campaign (supervised workers)


@dataclass
class Report:
    tried: dict = field(default_factory=dict)  # command -> inputs tried
    exits: dict = field(default_factory=dict)  # command -> {exit code: count}
    findings: dict = field(default_factory=dict)  # category -> [(index, command, source, detail)]
    seconds: float = 0.0
    slowest: tuple = (0.0, None)  # (seconds, case index)
    max_grow_mb: float = 0.0
    hashseed_samples: int = 0
    time: dict = field(default_factory=dict)  # command -> seconds in its cases

    @property
    def total(self) -> int:
        return sum(self.tried.values())

    def add(self, case: Case, found, info) -> None:
        self.tried[case.command] = self.tried.get(case.command, 0) + 1
        ex = self.exits.setdefault(case.command, {})
        ex[info.get("exit")] = ex.get(info.get("exit"), 0) + 1
        seen = set()
        for cat, detail in found:  # one finding per category and case
            if cat not in seen:
                seen.add(cat)
                self.findings.setdefault(cat, []).append(
                    (case.index, case.command, case.source, detail)
                )
        self.time[case.command] = self.time.get(case.command, 0.0) + (info.get("total") or 0.0)
        s = info.get("seconds") or 0.0
        if s > self.slowest[0]:
            self.slowest = (s, case.index)
        self.max_grow_mb = max(self.max_grow_mb, info.get("grow_mb") or 0.0)

    def text(self) -> str:
        lines = [f"fuzz: {self.total} inputs in {self.seconds:.0f} s "
                 f"({self.total / max(self.seconds, 1e-9):.1f}/s)"]  # fmt: skip
        lines.append("  inputs tried per command (exit 0 / 1 / 2; ms per input):")
        for c in COMMANDS:
            if c in self.tried:
                ex = self.exits.get(c, {})
                ms = 1000 * self.time.get(c, 0.0) / self.tried[c]
                lines.append(
                    f"    {c:14s} {self.tried[c]:7d}   ({ex.get(0, 0)} / {ex.get(1, 0)} / "
                    f"{ex.get(2, 0)}; {ms:.0f} ms)"
                )
        for cat in FINDINGS:
            n = len(self.findings.get(cat, []))
            lines.append(f"  {cat:17s} {n}")
        lines.append(f"  PYTHONHASHSEED samples: {self.hashseed_samples}")
        lines.append(f"  slowest run: {self.slowest[0]:.2f} s (case {self.slowest[1]}); "
                     f"largest peak-memory growth: {self.max_grow_mb:.0f} MB")  # fmt: skip
        for cat, items in self.findings.items():
            for index, command, source, detail in items[:5]:
                first = detail.strip().splitlines()[0] if detail.strip() else ""
                lines.append(f"  - {cat}: case {index} ({command}, {source}): {first[:240]}")
        return "\n".join(lines)


def _worker(conn, seed, workdir, opts):
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    os.environ["NO_COLOR"] = "1"
    sys.setrecursionlimit(1000)
    seeds = corpus_seeds()
    runner = Runner(workdir, **opts)
    while True:
        msg = conn.recv()
        if msg is None:
            return
        index = msg
        try:
            case = make_case(index, seed, seeds)
        except Exception:  # noqa: BLE001 - a harness error is reported as a crash of the case
            conn.send(("start", index, "?", "?"))
            conn.send(
                ("done", index, "?", "?", [("crash", "harness: " + traceback.format_exc())], {})
            )
            continue
        conn.send(("start", index, case.command, case.source))
        try:
            found, info = runner.run(case)
        except Exception:  # noqa: BLE001 - a harness error is reported as a crash of the case
            found, info = [("crash", "harness: " + traceback.format_exc())], {"exit": None}
        if opts.get("hashseed_every") and index % opts["hashseed_every"] == 0:
            info["hashseed"] = case.command != "run"
        conn.send(("done", index, case.command, case.source, found, info))


def _rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return 0.0


class Campaign:
    """Cases `start..start+n` of campaign `seed`, on `workers` processes; each worker runs
    cases in process; the supervisor kills one stuck past the hard time limit or over the
    memory limit and records the case, then starts a new worker."""

    def __init__(self, n: int, seed: int = 0, workers: int = 2, time_limit: float = 20.0,
                 mem_limit_mb: float = 2048, hashseed_every: int = 0, budget_s: float | None = None,
                 save_dir: str | None = None, start: int = 0, restart_every: int = 3000,
                 progress=None):  # fmt: skip
        self.n, self.seed, self.workers, self.start = n, seed, workers, start
        self.opts = dict(
            time_limit=time_limit, mem_limit_mb=mem_limit_mb, hashseed_every=hashseed_every
        )
        self.budget_s = budget_s
        self.save_dir = save_dir
        self.restart_every = restart_every
        self.progress = progress

    def run(self) -> Report:
        import multiprocessing as mp

        ctx = mp.get_context("spawn")
        report = Report()
        seeds = None
        t0 = time.perf_counter()
        todo = iter(range(self.start, self.start + self.n))
        tmp = tempfile.TemporaryDirectory(prefix="jaxprtool-fuzz-")
        slots = []

        def spawn(k):
            parent, child = ctx.Pipe()
            wd = Path(tmp.name) / f"w{k}-{time.monotonic_ns()}"
            wd.mkdir()
            p = ctx.Process(
                target=_worker, args=(child, self.seed, str(wd), self.opts), daemon=True
            )
            p.start()
            child.close()
            return {"p": p, "conn": parent, "cur": None, "t": 0.0, "rss0": 0.0, "done": 0}

        def feed(s) -> bool:
            if self.budget_s is not None and time.perf_counter() - t0 > self.budget_s:
                return False
            i = next(todo, None)
            if i is None:
                return False
            s["conn"].send(i)
            s["cur"] = (i, None, None)
            s["t"] = time.perf_counter()
            return True

        hard = self.opts["time_limit"] * 3 + 30
        try:
            for k in range(self.workers):
                s = spawn(k)
                slots.append(s)
                if not feed(s):
                    s["cur"] = None
            from multiprocessing.connection import wait

            while any(s["cur"] is not None for s in slots):
                ready = wait([s["conn"] for s in slots if s["cur"] is not None], timeout=0.05)
                now = time.perf_counter()
                for k, s in enumerate(slots):
                    if s["cur"] is None:
                        continue
                    if s["conn"] in ready:
                        try:
                            msg = s["conn"].recv()
                        except EOFError:
                            msg = ("died",)
                        if msg[0] == "start":
                            s["cur"] = (msg[1], msg[2], msg[3])
                            s["t"] = now
                            s["rss0"] = _rss_mb(s["p"].pid)
                            continue
                        if msg[0] == "done":
                            _, i, cmd, src, found, info = msg
                            case = Case(i, src, b"", cmd)
                            report.add(case, found, info)
                            report.hashseed_samples += bool(info.get("hashseed"))
                            if found and self.save_dir:
                                self.save(i, found)
                            s["done"] += 1
                            if self.progress and report.total % 1000 == 0:
                                self.progress(report.total, now - t0)
                            if s["done"] >= self.restart_every:
                                s["conn"].send(None)
                                s["p"].join(10)
                                slots[k] = s = spawn(k)
                            if not feed(s):
                                s["cur"] = None
                            continue
                    died = not s["p"].is_alive()
                    over_t = now - s["t"] > hard
                    over_m = _rss_mb(s["p"].pid) - s["rss0"] > self.opts["mem_limit_mb"]
                    if died or over_t or over_m:
                        i, cmd, src = s["cur"]
                        s["p"].kill()
                        s["p"].join(10)
                        cat = "memory" if over_m else "hang" if over_t else "crash"
                        why = {"memory": "killed over the memory limit",
                               "hang": f"killed after {hard:.0f} s",
                               "crash": f"the worker died (exit {s['p'].exitcode})"}[cat]  # fmt: skip
                        report.add(Case(i, src or "?", b"", cmd or "?"), [(cat, why)], {})
                        if self.save_dir:
                            self.save(i, [(cat, why)])
                        slots[k] = s = spawn(k)
                        if not feed(s):
                            s["cur"] = None
        finally:
            for s in slots:
                try:
                    s["conn"].send(None)
                except OSError:
                    pass
                s["p"].join(5)
                if s["p"].is_alive():
                    s["p"].kill()
            tmp.cleanup()
        report.seconds = time.perf_counter() - t0
        _ = seeds
        return report

    def save(self, index: int, found) -> None:
        """Write a failing case's input(s) and what was found, to reproduce it."""
        d = Path(self.save_dir)
        d.mkdir(parents=True, exist_ok=True)
        try:
            case = make_case(index, self.seed, corpus_seeds())
        except Exception:  # noqa: BLE001 - the harness failed on this case: say so
            (d / f"case{index}.txt").write_text(f"case {index}: {found}\n")
            return
        name = f"case{index}.jaxpr"
        (d / name).write_bytes(case.data)
        if case.data_b is not None:
            (d / f"{name}.b").write_bytes(case.data_b)
        cmd = " ".join(case.argv("-" if case.stdin else name))
        notes = [f"command: jaxprtool {cmd}" + (f" < {name}" if case.stdin else "")]
        notes += [f"source: {case.source}"] + [f"{cat}: {detail}" for cat, detail in found]
        (d / f"case{index}.txt").write_text("\n".join(notes) + "\n")


def main(argv=None) -> int:
    """`python tests/fuzzgen.py [N] [--seed S] [--workers W] [--save DIR]`."""
    import argparse

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("n", type=int, nargs="?", default=int(os.environ.get("FUZZ_EXAMPLES", "1000")))
    ap.add_argument("--seed", type=int, default=int(os.environ.get("FUZZ_SEED", "0")))
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--workers", type=int, default=int(os.environ.get("FUZZ_WORKERS", "2")))
    ap.add_argument("--save", default=os.environ.get("FUZZ_SAVE"))
    ap.add_argument("--hashseed-every", type=int, default=500)
    ap.add_argument("--case", type=int, help="run this one case here and show it")
    a = ap.parse_args(argv)
    if a.case is not None:
        case = make_case(a.case, a.seed, corpus_seeds())
        print(f"case {a.case}: jaxprtool {' '.join(case.argv('FILE'))}  ({case.source})")
        print(case.data.decode("utf-8", "replace"))
        with tempfile.TemporaryDirectory() as d:
            found, info = Runner(d, hashseed_every=1).run(case)
        print(info)
        for cat, detail in found:
            print(f"{cat}: {detail}")
        return 1 if found else 0
    camp = Campaign(a.n, a.seed, a.workers, hashseed_every=a.hashseed_every, save_dir=a.save,
                    start=a.start,
                    progress=lambda n, s: print(f"  {n} inputs, {s:.0f} s", flush=True))  # fmt: skip
    rep = camp.run()
    print(rep.text())
    return 1 if rep.findings else 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
