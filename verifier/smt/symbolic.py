"""Symbolic fixed-point values for the SMT engine (docs/smt-encoding.md).

A `Sym` is one of three things, and operations keep it in the cheapest form that is exact:

* a **constant** (a 0-d numpy array): it depends on no token;
* a **lookup** on one token variable t_j: a numpy table with one entry per value t_j may take;
* a z3 **term**: it mixes several tokens.  Terms are bit-vectors (``theory = "bv"``, QF_BV, the
  default) or mathematical integers (``theory = "int"``, linear integer arithmetic, non-linear
  only where two symbolic values are multiplied or divided).

Constants and lookups are computed with the very `Fixed` operations the evaluator uses
(partial evaluation: an operation on lookups of the same token is a table operation); only when
two different tokens meet does a value become a z3 term, whose operations are the bit-vector
transcription of docs/arithmetic.md: arithmetic shifts for rounding on a binary grid (FX), a
division by the constant den with floor rounding on any other grid, `If` for saturation, signed
division and remainder for R(e / Z), and a monotone step function for the exp table.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

import numpy as np
import z3

from ..arithmetic import Fixed
from ..support.errors import InternalError


class Sym:
    __slots__ = ("var", "table", "expr", "term")

    def __init__(self, var: Optional[int] = None, table: Optional[np.ndarray] = None, expr=None):
        self.var, self.table, self.expr = var, table, expr
        self.term = None  # the z3 form of a lookup, built once

    @property
    def is_term(self) -> bool:
        return self.expr is not None

    @property
    def is_const(self) -> bool:
        return self.expr is None and self.var is None

    def value(self):
        """The constant's value (only for constants)."""
        return self.table.item()


class SymFX:
    """Fixed-point operations on `Sym` values for one case split (one input length, given token
    domains), in the format `fx`."""

    def __init__(self, fx: Fixed, domains: Sequence[np.ndarray], width: int, theory: str = "bv"):
        self.fx = fx
        self.domains = [np.asarray(d, dtype=np.int64) for d in domains]
        self.width = width
        self.theory = theory
        tw = max(2, int(max(int(d.max()) for d in self.domains)).bit_length() + 1)
        make = (lambda name: z3.BitVec(name, tw)) if theory == "bv" else z3.Int
        self.tokens = [make(f"t{j}") if len(d) > 1 else None for j, d in enumerate(self.domains)]
        self.overflows: list[Sym] = []
        self.scopes: list = []  # per overflow: the `scope` it was noted in (`evaluator.Cone`)
        self.scope: Optional[tuple] = None  # where the values being built are computed

    def num(self, v: int, like=None):
        """A z3 integer constant in the theory (bit-vectors as wide as `like`, or `width`).

        Every constant of the encoding is made here.  z3 would take a bit-vector constant modulo
        2^width without a word, so one that does not fit is an internal error, never a wrapped
        value (docs/smt-encoding.md, "Widths")."""
        v = int(v)
        if self.theory == "int":
            return z3.IntVal(v)
        width = self.width if like is None else like.size()
        if not -(1 << (width - 1)) <= v < (1 << (width - 1)):
            raise InternalError(f"the constant {v} does not fit the {width}-bit encoding")
        return z3.BitVecVal(v, width)

    # -- constructors and conversion ----------------------------------------------------------
    def const(self, value) -> Sym:
        return Sym(None, np.asarray(value))

    def lookup(self, j: int, table) -> Sym:
        """A value that depends on token j only: table[i] when t_j = domains[j][i]."""
        table = np.asarray(table)
        if len(self.domains[j]) == 1 or np.all(table == table.flat[0]):
            return Sym(None, np.asarray(table.flat[0]))
        return Sym(j, table)

    def lookups(self, j: Optional[int], M: np.ndarray) -> list[Sym]:
        """The columns of M (n, k) as values of token j (row i: t_j = domains[j][i]; j None: one
        row, constants), as `lookup` makes them one by one, in one numpy pass."""
        M = np.asarray(M)
        if j is None or len(self.domains[j]) == 1:
            row = M[0]
            return [Sym(None, row[c, ...]) for c in range(len(row))]  # x[c, ...]: a 0-d view, quickly
        MT = np.ascontiguousarray(M.T)
        flat = (MT == MT[:, :1]).all(axis=1)
        return [Sym(None, row[0, ...]) if f else Sym(j, row) for row, f in zip(MT, flat)]

    def rows(self, j: Optional[int]) -> int:
        """Table rows of a value of token j (None: a constant, one row)."""
        return 1 if j is None else len(self.domains[j])

    dtype: type = np.int64  # of the tables `stack` makes

    def stack(self, values: list[Sym], n: int) -> np.ndarray:
        """Constants and lookups of one token, as the columns of an (n, len(values)) table: the
        constants in one assignment (broadcast over the rows), the lookups in another."""
        M: np.ndarray = np.empty((n, len(values)), dtype=self.dtype)
        tables: list = [v.table for v in values]
        flat = [c for c, t in enumerate(tables) if np.ndim(t) == 0]
        rows = [c for c, t in enumerate(tables) if np.ndim(t) != 0]
        if flat:
            M[:, flat] = np.array([tables[c] for c in flat], dtype=self.dtype)
        if rows:
            M[:, rows] = np.array([tables[c] for c in rows], dtype=self.dtype).T
        return M

    def pairs(self, i: int, keys: list[int], table: np.ndarray, bounds: np.ndarray) -> list[Sym]:
        """`pair(i, j, table[:, bounds[k]:bounds[k + 1]])` for every key j = keys[k], classified in
        one numpy pass when the keys' domains have one size (the common case: every position free)."""
        sizes = np.diff(bounds)
        if len(keys) == 0 or np.any(sizes != sizes[0]) or self.tokens[i] is None:
            return [self.pair(i, j, table[:, a:b]) for j, a, b in zip(keys, bounds, bounds[1:])]
        T = table.reshape(table.shape[0], len(keys), sizes[0])  # (query token, key, key token)
        only_j = (T == T[:1]).all(axis=(0, 2))  # the same for every query token
        only_i = (T == T[:, :, :1]).all(axis=(0, 2))  # the same for every key token
        flat = (T == T[:1, :, :1]).all(axis=(0, 2))  # a constant
        out = []
        for k, j in enumerate(keys):
            if flat[k]:
                out.append(Sym(None, T[0, k, 0, ...]))
            elif j == i or not (only_j[k] or only_i[k]):
                out.append(self.pair(i, j, T[:, k, :]))
            elif only_j[k]:
                out.append(Sym(j, T[0, k, :]))
            else:
                out.append(Sym(i, T[:, k, 0]))
        return out

    def token(self, j: int) -> Sym:
        """The token id at position j."""
        return self.lookup(j, self.domains[j])

    def func(self, positions: list[int], table: np.ndarray) -> Sym:
        """A value of the tokens at `positions`: table[a_1, ..., a_m] when t_{p_i} = domains[p_i][a_i]."""
        table = np.asarray(table)
        if not positions:
            return self.const(table)
        if len(positions) == 1:
            return self.lookup(positions[0], table)
        if len(positions) == 2 and positions[0] != positions[1]:
            return self.pair(positions[0], positions[1], table)
        first, rest = positions[0], positions[1:]
        branches = [self.func(rest, table[a]) for a in range(len(self.domains[first]))]
        if self.tokens[first] is None:
            return branches[0]
        expr = self.z(branches[-1])
        for a in range(len(branches) - 2, -1, -1):
            expr = z3.If(self.is_token(first, a), self.z(branches[a]), expr)
        return Sym(expr=expr)

    def pair(self, i: int, j: int, table: np.ndarray) -> Sym:
        """A value of tokens i and j: table[a, b] for t_i = domains[i][a], t_j = domains[j][b]."""
        if i == j:
            return self.lookup(i, np.diagonal(table))
        if np.all(table == table[:1, :]):
            return self.lookup(j, table[0])
        if np.all(table == table[:, :1]):
            return self.lookup(i, table[:, 0])
        rows = [self.z(self.lookup(j, row)) for row in table]
        expr = rows[-1]
        for a in range(len(rows) - 2, -1, -1):
            expr = z3.If(self.is_token(i, a), rows[a], expr)
        return Sym(expr=expr)

    def is_token(self, j: int, a: int):
        """z3: t_j is the a-th token of its domain."""
        return self.tokens[j] == self.num(self.domains[j][a], self.tokens[j])

    def member(self, j: int, values: np.ndarray):
        """z3: t_j is one of values (a contiguous range becomes two comparisons)."""
        t = self.tokens[j]
        values = np.sort(values)
        if len(values) > 2 and values[-1] - values[0] == len(values) - 1:
            lo, hi = self.num(values[0], t), self.num(values[-1], t)
            if self.theory == "int":
                return z3.And(t >= lo, t <= hi)
            return z3.And(z3.UGE(t, lo), z3.ULE(t, hi))
        eqs = [t == self.num(v, t) for v in values]
        return eqs[0] if len(eqs) == 1 else z3.Or(eqs)  # SMT-LIB's `or` takes two arguments or more

    def domain_constraints(self) -> list:
        return [self.member(j, d) for j, d in enumerate(self.domains) if self.tokens[j] is not None]

    def z(self, a: Sym):
        """The z3 term of a value (bit-vector of `width` bits, or Bool for boolean values)."""
        if a.expr is not None:
            return a.expr
        if a.var is None:
            v = a.value()
            return z3.BoolVal(bool(v)) if a.table.dtype == bool else self.num(v)
        if a.term is None:
            dom = self.domains[a.var]
            if a.table.dtype == bool:
                a.term = self.member(a.var, dom[a.table]) if a.table.sum() <= len(dom) / 2 else \
                    z3.Not(self.member(a.var, dom[~a.table]))
            else:
                vals, inv = np.unique(a.table, return_inverse=True)
                default = int(np.bincount(inv).argmax())
                expr = self.num(vals[default])
                for k in range(len(vals)):
                    if k != default:
                        expr = z3.If(self.member(a.var, dom[inv == k]), self.num(vals[k]), expr)
                a.term = expr
        return a.term

    # -- lifting ------------------------------------------------------------------------------
    def _make(self, var: Optional[int], table: np.ndarray) -> Sym:
        return self.lookup(var, table) if var is not None else Sym(None, np.asarray(table))

    def lift1(self, a: Sym, np_fn: Callable, z_fn: Callable) -> Sym:
        if a.expr is None:
            return self._make(a.var, np_fn(a.table))
        return Sym(expr=z_fn(a.expr))

    def lift2(self, a: Sym, b: Sym, np_fn: Callable, z_fn: Callable) -> Sym:
        if a.expr is None and b.expr is None and (a.var is None or b.var is None or a.var == b.var):
            return self._make(a.var if a.var is not None else b.var, np_fn(a.table, b.table))
        return Sym(expr=z_fn(self.z(a), self.z(b)))

    # -- integer operations -------------------------------------------------------------------
    def add(self, a: Sym, b: Sym) -> Sym:
        return self.lift2(a, b, np.add, lambda x, y: x + y)

    def sub(self, a: Sym, b: Sym) -> Sym:
        return self.lift2(a, b, np.subtract, lambda x, y: x - y)

    def mul(self, a: Sym, b: Sym) -> Sym:
        return self.lift2(a, b, np.multiply, lambda x, y: x * y)

    def shl(self, a: Sym, s: int) -> Sym:
        return self.lift1(a, lambda t: t << s, lambda x: x * self.num(1 << s, self._like(x)))

    def _like(self, x):
        """The sort to make a constant in, for an operation with term x."""
        return x if self.theory == "bv" else None

    def maximum(self, a: Sym, b: Sym) -> Sym:
        return self.lift2(a, b, np.maximum, lambda x, y: z3.If(x >= y, x, y))

    def relu(self, a: Sym) -> Sym:
        return self.maximum(a, self.const(0))

    def total(self, terms: list[Sym]) -> Sym:
        """A sum, adding constants and same-token lookups in numpy before anything goes to z3."""
        const = np.asarray(0, dtype=np.int64)
        by_var: dict[int, Sym] = {}
        exprs = []
        for t in terms:
            if t.expr is not None:
                exprs.append(t.expr)
            elif t.var is None:
                const = const + t.table
            else:
                by_var[t.var] = self.add(by_var[t.var], t) if t.var in by_var else t
        acc = self.const(const)
        for s in by_var.values():
            acc = self.add(acc, s)
        if exprs:
            acc = Sym(expr=z3.Sum([self.z(acc)] + exprs))
        return acc

    def round_shift(self, a: Sym, s: int) -> Sym:
        fx = self.fx
        if s == 0:
            return a
        return self.lift1(a, lambda t: fx.round_shift(t, s), lambda x: self._z_round_shift(x, s))

    def _z_round_shift(self, x, s: int):
        if self.theory == "int":
            return self._z_round_div(x, z3.IntVal(1 << s))
        mode = self.fx.rounding

        def c(v):
            return self.num(v, x)

        if mode == "floor":
            return x >> c(s)
        if mode == "zero":
            return z3.If(x < c(0), -((-x) >> c(s)), x >> c(s))
        q = x >> c(s)
        r = x & c((1 << s) - 1)
        half = c(1 << (s - 1))
        return q + self._one_if(z3.Or(r > half, z3.And(r == half, (q & c(1)) == c(1))), x)

    def scale_num(self, a: Sym) -> Sym:
        """a num (`Fixed.scale_num`)."""
        return a if self.fx.num == 1 else self.mul(a, self.const(self.fx.num))

    def times_den(self, a: Sym) -> Sym:
        """a den (`Fixed.times_den`): a shift on a binary grid."""
        fx = self.fx
        return self.shl(a, fx.shift) if fx.shift is not None else self.mul(a, self.const(fx.den))

    def round_den(self, a: Sym) -> Sym:
        """R(a / den) (`Fixed.round_den`): a rounding shift on a binary grid, else a division by a constant."""
        fx = self.fx
        return self.round_shift(a, fx.shift) if fx.shift is not None else self.round_div(a, self.const(fx.den))

    def rescale(self, a: Sym) -> Sym:
        """The code R(a step) of a product of codes a (`Fixed.rescale`)."""
        return self.round_den(self.scale_num(a))

    def round_div(self, num: Sym, den: Sym) -> Sym:
        """R-rounding of num / den for den > 0: signed division and remainder, exact."""
        fx = self.fx
        return self.lift2(num, den, fx.round_div, self._z_round_div)

    def _z_round_div(self, x, d):
        def c(v):
            return self.num(v, self._like(x))

        if self.theory == "int":
            fl, r = x / d, x % d  # SMT-LIB div/mod: for d > 0, fl = floor(x / d) and 0 <= r < d
            odd = fl % c(2) == c(1)
            if self.fx.rounding == "zero":
                return z3.If(z3.And(x < c(0), r != c(0)), fl + c(1), fl)
        else:
            qt, rt = x / d, z3.SRem(x, d)  # truncating division; rt has the sign of x
            fl = z3.If(z3.And(rt != c(0), x < c(0)), qt - c(1), qt)
            if self.fx.rounding == "zero":
                return qt
            r = x - fl * d  # in [0, d)
            odd = (fl & c(1)) == c(1)
        if self.fx.rounding == "floor":
            return fl
        return fl + self._one_if(z3.Or(c(2) * r > d, z3.And(c(2) * r == d, odd)), x)

    def _one_if(self, cond, like):
        """1 if cond else 0, in the sort of `like`."""
        like = self._like(like)
        return z3.If(cond, self.num(1, like), self.num(0, like))

    def sat(self, a: Sym) -> Sym:
        """Clamp to the code range; under overflow = error, record when it saturated."""
        fx = self.fx
        if fx.overflow == "error":
            self.note(self.lift1(a, lambda t: (t < fx.lo) | (t > fx.hi),
                                 lambda x: z3.Or(x < self.num(fx.lo, self._like(x)),
                                                 x > self.num(fx.hi, self._like(x)))))
        return self.lift1(a, lambda t: np.minimum(np.maximum(t, fx.lo), fx.hi), self._z_sat)  # np.clip is slower

    def _z_sat(self, x):
        lo, hi = self.num(self.fx.lo, self._like(x)), self.num(self.fx.hi, self._like(x))
        return z3.If(x < lo, lo, z3.If(x > hi, hi, x))

    def note(self, condition: Sym) -> None:
        if not (condition.is_const and not condition.value()):
            self.overflows.append(condition)
            self.scopes.append(self.scope)

    def note_table(self, j: Optional[int], ctx) -> None:
        """Under overflow = error, the saturations a table computation noted in `ctx` (its rows:
        token j's values; one row for constants)."""
        if self.fx.overflow == "error":
            self.note(self.const(ctx.ovf[0]) if j is None else self.lookup(j, ctx.ovf))

    def exp(self, d: Sym) -> Sym:
        """R(exp(d step)) for d <= 0, from the correctly rounded table (`Fixed.exp_table`)."""
        dmin, table = self.fx.exp_table()
        return self.lift1(d, lambda t: table[np.maximum(t, dmin) - dmin], lambda x: self._z_exp(x, dmin, table))

    def _z_exp(self, x, dmin: int, table: np.ndarray):
        # the table is a non-decreasing step function of d: one comparison per step
        like = self._like(x)
        expr = self.num(table[0], like)
        steps = np.flatnonzero(np.diff(table)) + 1  # table changes value at dmin + steps
        for i in steps:
            expr = z3.If(x >= self.num(dmin + i, like), self.num(table[i], like), expr)
        return expr

    # -- booleans -----------------------------------------------------------------------------
    def ge(self, a: Sym, b: Sym) -> Sym:
        return self.lift2(a, b, np.greater_equal, lambda x, y: x >= y)

    def gt(self, a: Sym, b: Sym) -> Sym:
        return self.lift2(a, b, np.greater, lambda x, y: x > y)

    def ne(self, a: Sym, b: Sym) -> Sym:
        return self.lift2(a, b, np.not_equal, lambda x, y: x != y)

    def eq(self, a: Sym, b: Sym) -> Sym:
        return self.lift2(a, b, np.equal, lambda x, y: x == y)

    def and_(self, a: Sym, b: Sym) -> Sym:
        return self.lift2(a, b, np.logical_and, lambda x, y: z3.And(x, y))

    def not_(self, a: Sym) -> Sym:
        return self.lift1(a, np.logical_not, z3.Not)

    def all(self, conds: list[Sym]) -> Sym:
        return self.not_(self.any([self.not_(c) for c in conds]))

    def as_int(self, a: Sym) -> Sym:
        """A boolean as the integer 0 or 1."""
        return self.lift1(a, lambda t: t.astype(np.int64),
                          lambda e: z3.If(e, self.num(1), self.num(0)))

    def any(self, conds: list[Sym]) -> Sym:
        acc = self.const(False)
        for c in conds:
            acc = self.lift2(acc, c, np.logical_or, lambda x, y: z3.Or(x, y))
        return acc

    def select(self, ys: list[Sym], idx: Sym) -> Sym:
        """ys[idx] for a symbolic class index."""
        if idx.is_const:
            return ys[int(idx.value())]
        if idx.expr is None and all(y.expr is None and y.var in (None, idx.var) for y in ys):
            table = np.array([ys[c].table if ys[c].var is None else ys[c].table[i]
                              for i, c in enumerate(idx.table)])
            return self.lookup(idx.var, table)
        zi = self.z(idx)
        expr = self.z(ys[-1])
        for c in range(len(ys) - 2, -1, -1):
            expr = z3.If(zi == self.num(c, self._like(zi)), self.z(ys[c]), expr)
        return Sym(expr=expr)
