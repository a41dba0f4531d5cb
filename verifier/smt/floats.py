"""Symbolic float values for the SMT engine: the float recipe of `verifier.floats` in z3's
floating-point theory (QF_BVFP), bit-precise (docs/smt-encoding.md, "Float formats").

Constants and lookups of one token stay numpy tables computed by the evaluator's own `FloatArith`
(as for FX); terms are z3 floating-point terms of one *carrier* sort, with the accumulation
format's precision and one more exponent bit than either format, so that every storage and
accumulation value is exact in it.  A rounding to a format F is done at F's precision in a sort
with the carrier's exponent range (no overflow, no subnormals there), then:

* below 2^emin(F), F's subnormal grid: a conversion to the IEEE sort of F's exponent bits (same
  bias, same subnormals; E4M3 too), whose result is the one taken there;
* beyond F's largest finite value (E4M3: 448): an overflow, clamped to +-max and, under
  ``overflow = error``, noted to fail the answers it feeds, exactly as `Ctx.note` does.

A sum of two values of F that lands below 2^emin(F) is exact, so sums need no subnormal branch;
a product of storage values is formed exactly first (in a sort of twice the precision when the
carrier cannot hold it); a quotient e / Z takes its subnormal branch in the IEEE sort.  exp has no
counterpart in the theory: it is a table over the values its input d = R(s - max) can take (`exp`).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Optional, Sequence

import numpy as np
import z3

from ..floats import FloatArith, FloatFormat, add_odd, exp_round
from .symbolic import Sym, SymFX

EXP_TABLE_CAP = 4096  # steps of one exp table: beyond it the case is left undecided (`TableTooLarge`)
_MODES = {"nearest": z3.RNE, "floor": z3.RTN, "zero": z3.RTZ, "ceil": z3.RTP}


class TableTooLarge(Exception):
    """An exp table over the reachable softmax inputs would exceed EXP_TABLE_CAP steps."""


def float_unsupported(fa: FloatArith, model, length: int) -> Optional[str]:
    """Why the float recipe `fa` cannot be encoded bit-precisely for `model`, or None."""
    S, A = fa.storage, fa.acc
    if min(S.M, A.M) < 2:
        return f"{S.name if S.M < 2 else A.name} has 1 mantissa bit; z3's floating-point sorts need at least 2"
    if S.M > A.M or S.max > A.max or S.tiny < A.tiny:
        return (f"{S.name} values are not all {A.name} values (the encoding carries both in one sort, exactly); "
                f"use an accumulation format at least as wide")
    layers = getattr(model, "layers", None)
    if layers is None:
        return "a recurrent model in a float format (only transformers are encoded)"
    for li, layer in enumerate(layers):
        H = len(layer.heads)
        if layer.attention != "softmax" and H & (H - 1):
            return (f"layer {li} averages {H} heads: R(sum / {H}) to {S.name} from an {A.name} sum is not one "
                    f"rounding in the theory (a power of two heads is)")
        if layer.attention == "softmax" and li > 0 and _nonpositive(A) > EXP_TABLE_CAP:
            return (f"softmax in layer {li}: its logits are not tables, so exp would be a table over every "
                    f"{A.name} value <= 0 ({_nonpositive(A):,} of them, more than {EXP_TABLE_CAP:,})")
    if not A.ieee and length > 240:  # Z <= L is divided in A's IEEE sort (`SymFloat._div`), whose max is 240
        return (f"{A.name} accumulation at length {length}: softmax's Z can exceed 240, the largest value of "
                f"the IEEE sort its e / Z is divided in below 2^-6")
    return None


def _nonpositive(F: FloatFormat) -> int:
    """How many values of F are <= 0 (zero once)."""
    per_binade = 1 << F.M
    return per_binade * (F.emax - F.emin + 1) + per_binade - (0 if F.ieee else 1)


class SymFloat(SymFX):
    """`SymFX` for a float recipe: integer values (tokens, answers, counts) stay bit-vectors; the
    model's values are float64 tables or floating-point terms of the carrier sort."""

    dtype = np.float64

    def __init__(self, fa: FloatArith, domains: Sequence[np.ndarray], width: int):
        # SymFX's FX operations are overridden here; it keeps the integer parts (tokens, answers)
        super().__init__(fa, domains, width, "bv")  # type: ignore[arg-type]
        self.fa, self.rm = fa, _MODES[fa.rounding]()
        S, A = fa.storage, fa.acc
        self.ebits = max(S.E, A.E) + 1
        self.carrier = z3.FPSort(self.ebits, A.M + 1)
        self.track = fa.overflow == "error"
        # products of storage values exact in the carrier, and already values of the accumulation format
        self.exact_products = 2 * S.M + 2 <= A.M + 1 and S.tiny ** 2 >= A.tiny and S.max ** 2 <= A.max
        self.values: dict[int, tuple] = {}  # a pair term's id -> (the term, the values it can take)

    logic = "QF_BVFP"

    @staticmethod
    def z3_solver(ctx: z3.Context | None = None) -> z3.Solver:
        """z3 on the case: floating point to bit-vectors, bit-blasted, SAT (its default strategy for
        QF_BVFP gave up after 75 s on a 3-token index-lookup case this decides in 11 s)."""
        return z3.Then("simplify", "fpa2bv", "simplify", "bit-blast", "sat", ctx=ctx).solver()

    # -- constants and tables -------------------------------------------------------------------
    def num(self, v, like=None):
        if isinstance(v, (float, np.floating)):
            return z3.FPVal(float(v), self.carrier)
        return super().num(v, like)

    def pair(self, i: int, j: int, table: np.ndarray) -> Sym:
        out = super().pair(i, j, table)
        if out.is_term:
            self.values[out.expr.get_id()] = (out.expr, np.unique(table))
        return out

    def relu(self, a: Sym) -> Sym:
        return self.maximum(a, self.const(0.0))

    def above(self, y: Sym, theta) -> Sym:
        """y > theta exactly (`FloatArith.above`)."""
        t = float(theta)
        strict = Fraction(t) <= Fraction(theta)
        return self.lift1(y, lambda a: self.fa.above(a, theta),
                          lambda x: x > self.num(t) if strict else x >= self.num(t))

    def value_of(self, v) -> float:
        """A concrete floating-point term's value (after substitution and simplification)."""
        return float(z3.simplify(z3.fpToReal(v)).as_fraction())

    # -- rounding ---------------------------------------------------------------------------------
    def _wide(self, F: FloatFormat):
        return z3.FPSort(self.ebits, F.M + 1)

    def _finish(self, F: FloatFormat, r):
        """r (in `_wide(F)`, F's grid with an unbounded exponent) clamped to F's range, an overflow
        noted; as a carrier term."""
        mx = z3.FPVal(F.max, r.sort())
        over = z3.fpGT(z3.fpAbs(r), mx)
        if self.track:
            self.note(Sym(expr=over))
        v = z3.If(over, z3.If(z3.fpIsNegative(r), z3.fpNeg(mx), mx), r)
        return z3.fpToFP(z3.RNE(), v, self.carrier)

    def _subnormal(self, F: FloatFormat, rw, sub):
        """rw where it is at least 2^emin(F), else sub (the rounding to F's subnormal grid): where
        the exact value is below 2^emin, rw is below or at it, and at it exactly when sub is."""
        edge = z3.FPVal(2.0 ** F.emin, rw.sort())
        return z3.If(z3.fpLT(z3.fpAbs(rw), edge), z3.fpToFP(z3.RNE(), sub, rw.sort()), rw)

    def _convert(self, F: FloatFormat, x):
        """R_F(x) for an exact value x."""
        rw = z3.fpToFP(self.rm, x, self._wide(F))
        sub = z3.fpToFP(self.rm, x, z3.FPSort(F.E, F.M + 1))
        return self._finish(F, self._subnormal(F, rw, sub))

    def _add(self, F: FloatFormat, x, y):
        """R_F(x + y) for values x, y of F (a sum below 2^emin(F) is exact: no subnormal branch).

        z3 adds only in sorts with no more exponent than significand bits; with fewer significand
        bits (bf16, fp8) the sum is rounded to odd at F's precision + 2 first, from its roundings
        down and up (one of two neighbours is odd), and then to F: one correct rounding (Boldo and
        Melquiond 2008, as `floats.add_odd`)."""
        W = self._wide(F)
        if self.ebits <= F.M + 1:
            return self._finish(F, z3.fpAdd(self.rm, z3.fpToFP(z3.RNE(), x, W), z3.fpToFP(z3.RNE(), y, W)))
        Q = z3.FPSort(self.ebits, max(F.M + 3, self.ebits))
        xq, yq = z3.fpToFP(z3.RNE(), x, Q), z3.fpToFP(z3.RNE(), y, Q)
        lo, hi = z3.fpAdd(z3.RTN(), xq, yq), z3.fpAdd(z3.RTP(), xq, yq)
        # lo is odd iff it is not a value of one bit less (SMT-LIB has no fp.to_ieee_bv; z3 alone does)
        even = z3.fpEQ(z3.fpToFP(z3.RNE(), z3.fpToFP(z3.RTZ(), lo, z3.FPSort(Q.ebits(), Q.sbits() - 1)), Q), lo)
        odd = z3.If(even, hi, lo)  # lo == hi when the sum is exact
        return self._finish(F, z3.fpToFP(self.rm, odd, W))

    def _mul(self, x, y):
        """R_acc(x y) for storage values x, y."""
        if self.exact_products:
            return z3.fpMul(z3.RNE(), x, y)
        P = z3.FPSort(self.ebits + 1, 2 * self.fa.storage.M + 2)  # the exact product
        return self._convert(self.fa.acc, z3.fpMul(z3.RNE(), z3.fpToFP(z3.RNE(), x, P), z3.fpToFP(z3.RNE(), y, P)))

    def _div(self, e, Z):
        """R_acc(e / Z) for 0 < e <= Z (Z is a sum of at most L values of exp, within the IEEE sort's range)."""
        A = self.fa.acc
        rw = z3.fpDiv(self.rm, e, Z)
        I = z3.FPSort(A.E, A.M + 1)
        sub = z3.fpDiv(self.rm, z3.fpToFP(z3.RNE(), e, I), z3.fpToFP(z3.RNE(), Z, I))
        return self._finish(A, self._subnormal(A, rw, sub))

    def _on_tables(self, values: list[Sym]) -> Optional[Optional[int]]:
        """The one token all values depend on (None: none) when none is a term; else -1."""
        tokens = {v.var for v in values if v.var is not None}
        if any(v.is_term for v in values) or len(tokens) > 1:
            return -1
        return tokens.pop() if tokens else None

    # -- the recipe's operations on `Sym` values --------------------------------------------------
    def dot(self, a: list[Sym], b: list[Sym], bias=None, out: str = "storage") -> Sym:
        """sum_j a_j b_j (+ bias) as `FloatArith._dot`: each product rounded to the accumulation
        format, partial sums in index order, each rounded; then rounded to storage, or kept
        ("acc": the logits).  "mix": the weights a are first rounded to storage."""
        fa = self.fa
        if out == "mix":
            a = [self.to_storage(x) for x in a]
        j = self._on_tables(a + b)
        if j != -1:
            n = self.rows(j)
            ctx = fa.context((n,))
            A, B = self.stack(a, n), self.stack(b, n)
            bb = None if bias is None else np.array([bias], dtype=np.float64)
            y = fa._dot(A[:, None, :], B[:, None, :], bb, ctx, "dot", out=None if out == "acc" else fa.storage)
            self.note_table(j, ctx)
            return self._make(j, y[:, 0]) if j is not None else Sym(None, y[0, 0])
        terms = [self._mul(self.z(x), self.z(y)) for x, y in zip(a, b)]
        s = terms[0] if terms else self.num(0.0)
        for t in terms[1:]:
            s = self._add(fa.acc, s, t)
        if bias is not None:
            s = self._add(fa.acc, s, self.num(float(bias)))
        return Sym(expr=s if out == "acc" else self._convert(fa.storage, s))

    def to_storage(self, x: Sym) -> Sym:
        if x.is_term:
            return Sym(expr=self._convert(self.fa.storage, x.expr))
        ctx = self.fa.context((self.rows(x.var),))
        assert x.table is not None  # not a term: a table
        y = self.fa._to(self.fa.storage, np.broadcast_to(x.table, (self.rows(x.var),)).copy(), ctx, "weights")
        self.note_table(x.var, ctx)
        return self._make(x.var, y) if x.var is not None else Sym(None, np.asarray(y[0]))

    def add_values(self, x: list[Sym], y: list[Sym]) -> list[Sym]:
        """R_storage(x + y), coordinate by coordinate (the residual add of terms)."""
        return [Sym(expr=self._add(self.fa.storage, self.z(u), self.z(v))) for u, v in zip(x, y)]

    def mean_heads(self, outs: list[Sym]) -> Sym:
        """(sum_h out_h in acc) / H to storage; H a power of two (`float_unsupported`), so the
        quotient is exact in the carrier and rounded once."""
        fa = self.fa
        s = self.z(outs[0])
        for o in outs[1:]:
            s = self._add(fa.acc, s, self.z(o))
        q = z3.fpMul(z3.RNE(), s, z3.FPVal(1.0 / len(outs), self.carrier))
        return Sym(expr=self._convert(fa.storage, q))

    def softmax(self, s: list[Sym]) -> list[Sym]:
        """`FloatArith.softmax` on terms: M = max s, d = R(s - M), e = exp_round(d) by table,
        Z in index order, a = R(e / Z), all in the accumulation format."""
        A = self.fa.acc
        zs = [self.z(x) for x in s]
        M = zs[0]
        for x in zs[1:]:
            M = z3.If(z3.fpGEQ(M, x), M, x)
        sets = [self._possible(x) for x in s]
        known = [v for v in sets if v is not None]
        union = np.unique(np.concatenate(known)) if len(known) == len(sets) else None
        e = []
        for x, vals in zip(zs, sets):
            d = self._add(A, x, z3.fpNeg(M))
            e.append(self._exp(d, None if union is None or vals is None else self._differences(vals, union)))
        Z = e[0]
        for x in e[1:]:
            Z = self._add(A, Z, x)
        return [Sym(expr=self._div(x, Z)) for x in e]

    def _possible(self, x: Sym) -> Optional[np.ndarray]:
        """The values a logit can take: its table, or the table of the pair term it is; None if unknown."""
        if x.table is not None:  # not a term
            return np.unique(x.table)
        known = self.values.get(x.expr.get_id())
        return None if known is None else known[1]

    def _differences(self, vals: np.ndarray, union: np.ndarray) -> np.ndarray:
        """Every R_acc(a - m), a a value of the logit, m >= a a value of some logit (the max)."""
        a, m = np.meshgrid(vals, union, indexing="ij")
        keep = m >= a
        d, _ = self.fa.acc.round(add_odd(a[keep], -m[keep]), self.fa.rounding)  # clamped as the evaluator does
        return np.unique(d)

    def _exp(self, d, D: Optional[np.ndarray]):
        """exp_round(d) for d in D (every value d can take; None: every value <= 0 of the
        accumulation format), as a step function: exp_round is non-decreasing."""
        A = self.fa.acc
        if D is None:
            D = A.finite_values()
            D = D[D <= 0]
        y = exp_round(D, A, self.fa.rounding)
        steps = np.flatnonzero(np.diff(y)) + 1
        if len(steps) > EXP_TABLE_CAP:
            raise TableTooLarge(f"exp over the {len(D):,} values softmax's d = R(s - max) can take has "
                                f"{len(steps) + 1:,} steps in {A.name}, more than {EXP_TABLE_CAP:,}")
        expr = self.num(float(y[0]))
        for k in steps:
            expr = z3.If(z3.fpGEQ(d, self.num(float(D[k]))), self.num(float(y[k])), expr)
        return expr
