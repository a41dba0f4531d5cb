"""Floating-point formats (bf16, fp16, fp8 E4M3 and E5M2, fp32, any float:E:M) and the mixed-precision
recipe of real kernels: storage in one format, products, sums and softmax in a wider one.

Normative text: ``docs/arithmetic.md``, "Floating-point formats".  Every value of every format here is
a float64 (a format has at most 24 significant bits and 8 exponent bits), so the evaluator runs on
float64 arrays holding the format's values exactly.  Each operation is computed exactly, or to a
float64 *rounded to odd*, and then rounded once to its format: rounding to odd at 53 bits and then
to a format of p <= 51 bits equals rounding the exact value to that format directly (Boldo and
Melquiond 2008), in every rounding mode.  Exactness comes from error-free transformations: a product
of two values is exact in float64 (48 bits at most); a sum's error is TwoSum's; a quotient's
remainder sign is Dekker's.  exp is the correctly rounded exp of its input (Ziv's strategy: float64
first, mpmath when float64 cannot decide).

Overflow: a result whose magnitude, rounded with an unbounded exponent, exceeds the largest finite
value is an overflow.  Infinities and NaN are never carried: under ``overflow = error`` (the IEEE
formats' default: IEEE 754 would make the result +-inf, and NaN could follow) the overflow fails the
answers it feeds; under ``overflow = saturate`` (E4M3's default, the OCP spec's saturating
conversion; for the others the "satfinite" conversions of GPU kernels) it is clamped to the largest
finite value, and a trace names it.  ml_dtypes gives each named format's dtype; its constants are
checked against ours, and the tests check its casts (its float64 casts to bfloat16 round twice,
through float32, so we do not use them for rounding).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Optional

import ml_dtypes
import mpmath
import numpy as np

from .arithmetic import Ctx, Float64Values, Recorder, any_per_row, max_excluding
from .support.errors import InputError

FLOAT_ROUNDINGS = ("nearest", "floor", "zero", "ceil")  # IEEE 754's four: ties to even, toward -inf, 0, +inf
_ROUND = {"nearest": np.rint, "floor": np.floor, "zero": np.trunc, "ceil": np.ceil}
_DTYPES = {"bf16": ml_dtypes.bfloat16, "fp16": np.float16, "e4m3": ml_dtypes.float8_e4m3fn,
           "e5m2": ml_dtypes.float8_e5m2, "fp32": np.float32}
NAMED = {"bf16": (8, 7, True), "fp16": (5, 10, True), "e4m3": (4, 3, False), "e5m2": (5, 2, True),
         "fp32": (8, 23, True)}  # name -> (exponent bits, mantissa bits, IEEE-like with inf and NaN)
FLOAT_HELP = ("bf16, fp16, e4m3 (fp8, finite-only), e5m2 (fp8), fp32 or float:E:M (E exponent and M mantissa "
              "bits, IEEE-like), each with fp32 accumulation; ACC accumulation instead: e.g. bf16+bf16acc")


@dataclass(frozen=True)
class FloatFormat:
    """A binary floating-point format: 1 sign bit, E exponent bits, M mantissa bits, subnormals.

    IEEE-like (``ieee``): the top exponent is inf and NaN, so emax = 2^(E-1) - 1.  Finite-only (E4M3,
    "fn" in the OCP spec): the top exponent holds normal values except the all-ones mantissa (NaN),
    so emax = 2^(E-1) and the largest mantissa there is 1.11..10."""

    name: str
    E: int
    M: int
    ieee: bool = True

    def __post_init__(self) -> None:
        if not (2 <= self.E <= 8 and 1 <= self.M <= 23):
            raise InputError(f"float:{self.E}:{self.M}: a float format here has 2..8 exponent bits and 1..23 mantissa "
                             f"bits (its products must be exact in float64)")
        dtype = _DTYPES.get(self.name)
        if dtype is not None:  # our constants are the dtype's
            fi = ml_dtypes.finfo(dtype)
            assert (float(fi.max), float(fi.smallest_subnormal)) == (self.max, self.tiny), self.name

    @property
    def bias(self) -> int:
        return (1 << (self.E - 1)) - 1

    @property
    def emax(self) -> int:
        return self.bias if self.ieee else self.bias + 1

    @property
    def emin(self) -> int:
        return 1 - self.bias

    @property
    def max(self) -> float:
        top = 2.0 - 2.0 ** -self.M if self.ieee else 2.0 - 2.0 ** (1 - self.M)
        return math.ldexp(top, self.emax)

    @property
    def tiny(self) -> float:
        """The smallest positive (subnormal) value."""
        return math.ldexp(1.0, self.emin - self.M)

    @property
    def bits(self) -> int:
        return 1 + self.E + self.M

    def text(self) -> str:
        kind = "IEEE-like" if self.ieee else "finite-only"
        return f"{self.name} (E{self.E}M{self.M}, {kind}, max {self.max:.6g})"

    def round(self, x: np.ndarray, rounding: str) -> tuple[np.ndarray, np.ndarray]:
        """x (float64: exact, or rounded to odd) rounded to this format: (values, overflowed), the
        overflowed entries clamped to +-max."""
        x = np.asarray(x, dtype=np.float64)
        _, e = np.frexp(x)  # |x| in [2^(e-1), 2^e)
        e = np.maximum(e, self.emin + 1)  # below 2^emin: the subnormals' quantum
        v = np.ldexp(_ROUND[rounding](np.ldexp(x, self.M + 1 - e)), e - self.M - 1)
        over = np.abs(v) > self.max
        if over.any():
            v = np.where(over, np.copysign(self.max, v), v)
        return v, over

    def ordinal(self, x: np.ndarray) -> np.ndarray:
        """Values of this format -> consecutive integers in their order (0 at 0): a positive value's
        rank among the positive values is its exponent field and mantissa read as one integer."""
        x = np.asarray(x, dtype=np.float64)
        a = np.abs(x)
        _, e = np.frexp(a)  # a in [2^(e-1), 2^e)
        e = np.where(a < math.ldexp(1.0, self.emin), self.emin, e - 1)  # a subnormal: in the quantum of emin
        k = (e - self.emin) * (1 << self.M) + np.ldexp(a, self.M - e).astype(np.int64)
        return np.where(x < 0, -k, k)

    def from_ordinal(self, k: np.ndarray) -> np.ndarray:
        k = np.asarray(k, dtype=np.int64)
        a = np.abs(k)
        block, mant = a >> self.M, a & ((1 << self.M) - 1)
        v = np.where(block == 0, np.ldexp(mant.astype(np.float64), self.emin - self.M),
                     np.ldexp((mant + (1 << self.M)).astype(np.float64), self.emin + np.maximum(block, 1) - 1 - self.M))
        return np.where(k < 0, -v, v)

    def finite_values(self) -> np.ndarray:
        """Every finite value, ascending (for the tests)."""
        mags = [0.0] + [math.ldexp(m, self.emin - self.M) for m in range(1, 1 << self.M)]
        for ex in range(self.emin, self.emax + 1):
            mags += [math.ldexp((1 << self.M) + m, ex - self.M) for m in range(1 << self.M)]
        up = np.array([v for v in mags if v <= self.max])
        return np.concatenate([-up[:0:-1], up])


def float_format(name: str) -> FloatFormat:
    """A format by name: bf16, fp16, e4m3, e5m2, fp32 or float:E:M."""
    if name in NAMED:
        return FloatFormat(name, *NAMED[name])
    parts = name.split(":")
    if len(parts) == 3 and parts[0] == "float" and all(p.isdigit() and len(p) <= 3 for p in parts[1:]):
        return FloatFormat(name, int(parts[1]), int(parts[2]))
    raise InputError(f"--format {name}: not a float format ({FLOAT_HELP})")


# -- exact operations, to a float64 rounded to odd ---------------------------------------------------
def _odd(s: np.ndarray, err: np.ndarray) -> np.ndarray:
    """The exact value s + err (err: its sign is what counts) rounded to odd at 53 bits, from s, its
    float64 rounding: s if exact or odd, else its neighbour toward the exact value."""
    even = (s.view(np.int64) & 1) == 0
    fix = (err != 0) & even
    if fix.any():
        s = np.where(fix, np.nextafter(s, np.where(err > 0, np.inf, -np.inf)), s)
    return s


def add_odd(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a + b rounded to odd (TwoSum gives the exact error)."""
    s = a + b
    bb = s - a
    return _odd(s, (a - (s - bb)) + (b - bb))


def _split(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    c = 134217729.0 * a  # 2^27 + 1: Veltkamp's split into two 26-bit halves
    hi = c - (c - a)
    return hi, a - hi


def div_odd(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a / b (b > 0) rounded to odd: the sign of a - q b, q = fl(a / b), exactly (Dekker's product
    q b = p + t exactly; a - p is exact by Sterbenz's lemma; (a - p) - t has the exact sign)."""
    q = a / b
    p = q * b
    qh, ql = _split(q)
    bh, bl = _split(b)
    t = ((qh * bh - p) + qh * bl + ql * bh) + ql * bl
    return _odd(q, (a - p) - t)


def fraction_odd(x: Fraction) -> float:
    """An exact rational rounded to odd at 53 bits (beyond float64's range: +-2^1000, which overflows
    every format here the same way)."""
    if abs(x) > 2 ** 1000:
        return math.copysign(2.0 ** 1000, x)
    s = float(x)  # correctly rounded
    err = (x > Fraction(s)) - (x < Fraction(s))
    return float(_odd(np.array([s]), np.array([float(err)]))[0])


@dataclass(frozen=True)
class FloatArith(Float64Values):
    """The mixed-precision recipe (docs/arithmetic.md, "Floating-point formats"): weights and
    activations in `storage`; products, sums and the logits in `acc`, which also runs softmax;
    attention weights back to `storage` for the value mix.  Rounding points are named in `describe`."""

    storage: FloatFormat
    acc: FloatFormat
    rounding: str = "nearest"
    overflow: str = "error"

    def __post_init__(self) -> None:
        if self.rounding not in FLOAT_ROUNDINGS:
            raise InputError(f"rounding must be one of {', '.join(FLOAT_ROUNDINGS)} for a float format, got "
                             f"{self.rounding!r}")
        if self.overflow not in ("saturate", "error"):
            raise InputError(f"overflow must be saturate or error, got {self.overflow!r}")

    # -- the format, as the verdicts and the engines read it ---------------------------------
    @property
    def accumulate(self) -> str:
        return self.acc.name

    @property
    def bits(self) -> int:
        return self.storage.bits

    def kc(self, N: int) -> Optional[float]:
        """No Kc: a float format is not a grid of step N^-Kc (constructions take their default)."""
        return None

    def describe(self) -> dict:
        return {"format": "float", "storage": self.storage.name, "E": self.storage.E, "M": self.storage.M,
                "ieee": self.storage.ieee, "max": self.storage.max, "tiny": self.storage.tiny,
                "accumulate": self.acc.name, "accumulate_text": self.acc.text(), "storage_text": self.storage.text(),
                "softmax": self.acc.name, "rounding": self.rounding, "overflow": self.overflow,
                "bits": self.storage.bits,
                "step": 2.0 ** -self.storage.M}  # the spacing at 1: a trace's "first departure" is measured in it

    def label(self) -> str:
        return float_text(self.describe())

    def context(self, batch_shape: tuple, locate: bool = False) -> Ctx:
        return Ctx(batch_shape, self.overflow == "error", locate)

    # -- rounding ------------------------------------------------------------------------------
    def _to(self, fmt: FloatFormat, x: np.ndarray, ctx: Ctx, name: str,
            present: Optional[np.ndarray] = None) -> np.ndarray:
        v, over = fmt.round(x, self.rounding)
        if ctx.watch:
            ctx.note(name, over if present is None else over & present)
        return v

    def quantize(self, w: np.ndarray, name: str = "") -> tuple[np.ndarray, np.ndarray]:
        """The weights rounded to the storage format (exact rationals: through `fraction_odd`)."""
        w = np.asarray(w)
        if w.dtype == object:
            w = np.vectorize(lambda x: fraction_odd(Fraction(x)), otypes=[np.float64])(w)
        with np.errstate(over="ignore"):
            w = np.clip(np.asarray(w, dtype=np.float64), -2.0 ** 1000, 2.0 ** 1000)
        return self.storage.round(w, self.rounding)

    # -- operations ------------------------------------------------------------------------------
    def _sum(self, terms: np.ndarray, ctx: Ctx, name: str, present: Optional[np.ndarray] = None) -> np.ndarray:
        """The sum over the last axis in the accumulation format, in index order, each partial sum
        rounded (a first term of 0 + t is t)."""
        acc = terms[..., 0]
        over = np.zeros(acc.shape, dtype=bool)
        for j in range(1, terms.shape[-1]):
            acc, o = self.acc.round(add_odd(acc, terms[..., j]), self.rounding)
            over |= o
        if ctx.watch:
            ctx.note(f"{name}.sum", over if present is None else over & present)
        return acc

    def _dot(self, a: np.ndarray, b: np.ndarray, bias: Optional[np.ndarray], ctx: Ctx, name: str,
             present: Optional[np.ndarray] = None, out: Optional[FloatFormat] = None) -> np.ndarray:
        """sum_j a_j b_j (+ bias) in the accumulation format, then rounded to `out` (None: kept)."""
        sub = None if present is None else present[..., None]
        prod = self._to(self.acc, a * b, ctx, f"{name}.product", sub)  # a * b is exact in float64
        s = self._sum(prod, ctx, name, present) if prod.shape[-1] else np.zeros(prod.shape[:-1])
        if bias is not None:
            s = self._to(self.acc, add_odd(s, bias), ctx, f"{name}.bias", present)
        return s if out is None else self._to(out, s, ctx, name, present)

    def lin(self, W, x, b, ctx: Ctx, name: str) -> np.ndarray:
        return self._dot(x[..., None, :], W, b, ctx, name, out=self.storage)

    def lin_gathered(self, Wg, xg, b, ctx: Ctx, name: str) -> np.ndarray:
        return self._dot(xg, Wg, b, ctx, name, out=self.storage)

    def scores(self, q, k, ctx: Ctx, name: str, mask=None) -> np.ndarray:
        """The logits <q_i, k_j>, kept in the accumulation format (softmax reads them there)."""
        return self._dot(q[..., :, None, :], k[..., None, :, :], None, ctx, name, mask)

    def mix(self, w, v, ctx: Ctx, name: str) -> np.ndarray:
        """sum_j w_ij v_j with the weights first rounded to storage (softmax's are there already)."""
        w = self._to(self.storage, w, ctx, f"{name}.weights")
        return self._dot(w[..., :, None, :], np.swapaxes(v, -1, -2)[..., None, :, :], None, ctx, name,
                         out=self.storage)

    def add(self, x, y, ctx: Ctx, name: str) -> np.ndarray:
        return self._to(self.storage, add_odd(np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)),
                        ctx, name)

    def mean_heads(self, outs, ctx: Ctx, name: str) -> np.ndarray:
        """(sum_h out_h in the accumulation format) / H, rounded to storage."""
        s = self._sum(np.swapaxes(outs, -1, -2), ctx, name)
        return self._to(self.storage, div_odd(s, np.full(s.shape, float(outs.shape[-2]))), ctx, name)

    def above(self, y: np.ndarray, theta) -> np.ndarray:
        """y > theta exactly (`threshold_code`)."""
        return y > self.threshold_code(theta)

    def softmax(self, s: np.ndarray, mask: Optional[np.ndarray], ctx: Ctx, name: str,
                rec: Recorder = None) -> np.ndarray:
        """In the accumulation format X: d = R_X(s - max), e = R_X(exp d) correctly rounded, Z = the
        sum of e in index order, each partial sum rounded, a = R_X(e / Z).  Masked entries are absent."""
        X = self.acc
        allowed = np.ones(s.shape, dtype=bool) if mask is None else np.broadcast_to(mask, s.shape)
        M = np.where(allowed, s, -np.inf).max(-1, keepdims=True)
        d = self._to(X, add_odd(s, -np.where(np.isfinite(M), M, 0.0)), ctx, f"{name}.d", allowed)
        e = np.where(allowed, exp_round(np.minimum(d, 0.0), X, self.rounding), 0.0)
        Z = self._sum(e, ctx, f"{name}.Z")[..., None]
        a = self._to(X, div_odd(e, Z), ctx, f"{name}.attn")
        if rec is not None:
            rec(f"{name}.max", M[..., 0])
            rec(f"{name}.exp", e)
            rec(f"{name}.Z", Z[..., 0])
        return a


    # -- interval bounds (the bounds engine: docs/bounds-engine.md, "Floating-point formats") -----
    @property
    def largest(self) -> float:
        """A sum of two values of magnitude at most this much each cannot overflow."""
        return self.storage.max

    @property
    def softmax_floor(self) -> float:
        """Softmax's s - M cannot overflow when its float64 difference is at least this (just above
        -max: a float64 difference at or above it is of an exact difference above -max)."""
        return float(np.nextafter(-self.acc.max, 0.0))

    def zero_exp_bound(self) -> Optional[float]:
        """T with: an exact s - M whose float64 difference is at most T has exp weight exactly 0.  D,
        the largest accumulator value with R(exp D) = 0 (exp is monotone: found by bisection over the
        values in order); R(s - M) <= D when s - M <= D; T is D's float64 predecessor (a float64
        difference at most T is of an exact one below D).  None when no exp rounds to 0 (ceil)."""
        X = self.acc
        lo, hi = int(X.ordinal(np.array(-X.max))), 0  # exp(lo) rounds to 0 (if any does), exp(hi) = 1
        if exp_round(np.array([-X.max]), X, self.rounding)[0] != 0:
            return None
        while hi - lo > 1:
            mid = (lo + hi) // 2
            zero = exp_round(X.from_ordinal(np.array([mid])), X, self.rounding)[0] == 0
            lo, hi = (mid, hi) if zero else (lo, mid)
        return float(np.nextafter(X.from_ordinal(np.array([lo]))[0], -np.inf))

    def ordinal(self, x: np.ndarray) -> np.ndarray:
        """Storage values -> consecutive integers, in order (`FloatFormat.ordinal`)."""
        return self.storage.ordinal(x)

    def from_ordinal(self, k: np.ndarray) -> np.ndarray:
        return self.storage.from_ordinal(k)

    def threshold_code(self, theta) -> float:
        """c with  y > c  <=>  y > theta  for every float64 y: t = float(theta) is theta's neighbour, so
        y > theta iff y > t (t <= theta) or y >= t, that is y > t's predecessor (t > theta)."""
        t = float(theta)
        return t if Fraction(t) <= Fraction(theta) else float(np.nextafter(t, -np.inf))

    def _round_flag(self, fmt: FloatFormat, x: np.ndarray, ovf: np.ndarray) -> np.ndarray:
        """x rounded to fmt; a possible overflow of a row flagged in ovf (rows: x's first axis)."""
        v, over = fmt.round(x, self.rounding)
        ovf |= any_per_row(over)
        return v

    def softmax_bounds(self, slo: np.ndarray, shi: np.ndarray, ovf: np.ndarray):
        """(b, j, alo, ahi): the entries whose weight, rounded to storage for the value mix, may be
        positive, with its bounds; a possible overflow flagged in ovf (B,).

        d_j = R_A(s_j - M) = min(0, R_A(s_j - M_-j)) is bounded as on a grid (`Fixed.softmax_bounds`),
        and e = R_A(exp d) is monotone.  Z is a sum in index order with every partial sum rounded:
        monotone in each term, but not a sum from which a term can be taken out exactly, so Z is
        bounded by the sums of the e bounds themselves, Z_lo = sum(elo) (at least 1: exp(0) is one
        of its terms) and Z_hi = sum(ehi), and a_j = R_S(R_A(e_j / Z)) by R(ehi / Z_lo) above and
        R(elo / Z_hi) below (the quotient rises with e and falls with Z).  Exact logits give the
        exact weights."""
        A, S = self.acc, self.storage
        B, L = slo.shape
        exact = slo is shi
        if exact or L == 1:
            d_lo = d_hi = np.minimum(self._round_flag(A, add_odd(slo, -slo.max(axis=1, keepdims=True)), ovf), 0.0)
        else:
            d_lo = np.minimum(self._round_flag(A, add_odd(slo, -max_excluding(shi)), ovf), 0.0)
            d_hi = np.minimum(A.round(add_odd(shi, -max_excluding(slo)), self.rounding)[0], 0.0)
        e_lo = exp_round(d_lo, A, self.rounding)
        e_hi = e_lo if d_hi is d_lo else exp_round(d_hi, A, self.rounding)
        ctx = Ctx((B,), True)
        z_hi = self._sum(e_hi, ctx, "Z")
        ovf |= ctx.ovf if self.overflow == "error" else False
        z_lo = z_hi if e_lo is e_hi else np.maximum(self._sum(e_lo, Ctx((B,), False), "Z"), 1.0)
        b, j = np.nonzero(e_hi)
        elo, ehi = e_lo[b, j], e_hi[b, j]
        weight = lambda e, z: S.round(A.round(div_odd(e, z), self.rounding)[0], self.rounding)
        a_hi, over = weight(ehi, z_lo[b])
        a_lo = a_hi if e_lo is e_hi else weight(elo, z_hi[b])[0]
        ovf[b[over]] = True
        keep = np.flatnonzero(a_hi > 0)  # R_S(a) = 0 adds exactly 0
        return b[keep], j[keep], a_lo[keep], a_hi[keep]

    def relu_weight_bounds(self, slo: np.ndarray, shi: np.ndarray, ovf: np.ndarray):
        """ReLU attention: (b, j, alo, ahi) of the entries whose weight R_S(ReLU(s)) may be positive."""
        b, j = np.nonzero(shi > 0)
        over = np.zeros(len(b), bool)
        ahi = self._round_flag(self.storage, shi[b, j], over)
        alo = self.storage.round(np.maximum(slo[b, j], 0.0), self.rounding)[0]
        ovf[b[over]] = True
        keep = np.flatnonzero(ahi > 0)
        return b[keep], j[keep], alo[keep], ahi[keep]

    def term_bounds(self, alo: np.ndarray, ahi: np.ndarray, vlo: np.ndarray, vhi: np.ndarray,
                    ovf: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Bounds of R_A(a v) for a in [alo, ahi] (a >= 0) and v in [vlo, vhi]: the products are exact
        in float64, and R_A is monotone; a possible overflow is flagged in ovf, one flag per row."""
        corners = [alo * vlo, alo * vhi, ahi * vlo, ahi * vhi]
        lo = self._round_flag(self.acc, np.minimum.reduce(corners), ovf)
        return lo, self._round_flag(self.acc, np.maximum.reduce(corners), ovf)

    def sum_terms(self, b: np.ndarray, tlo: np.ndarray, thi: np.ndarray, B: int) -> tuple[np.ndarray, ...]:
        """A head's raw sums: (lo, hi, size, n), each (B, mv) but n (B,): the float64 sums of the term
        bounds, a bound of sum |t| (max(|tlo|, |thi|) summed) and the number of terms.  The format's
        own sum (index order, each partial sum rounded) is within gamma(n - 1) size of the exact sum
        (`head_output_bounds`); a term can be replaced in these sums (`replace_term`), which the
        format's sum does not allow."""
        raw = [np.zeros((B,) + tlo.shape[1:]) for _ in range(3)]
        for r, t in zip(raw, (tlo, thi, np.maximum(np.abs(tlo), np.abs(thi)))):
            np.add.at(r, b, t)
        return raw[0], raw[1], raw[2], np.bincount(b, minlength=B)

    def replace_term(self, raw: tuple, old: tuple, new: tuple) -> tuple[np.ndarray, ...]:
        """One position's term bounds `old` replaced by `new`: the size keeps |old| (a bound of the
        float64 errors of taking it out), so it still bounds sum |t| and every intermediate."""
        size = raw[2] + np.maximum(np.abs(new[0]), np.abs(new[1]))
        return raw[0] - old[0] + new[0], raw[1] - old[1] + new[1], size, raw[3]

    def head_output_bounds(self, raws: list, L: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(rows, H, mv) bounds of the heads' outputs R_S(s), s the sum of a head's terms in A in index
        order, and whether an overflow is possible (rows,).

        Sequential summation of n terms with unit roundoff u (2^-p rounding to nearest, 2^(1-p)
        directed, p = M + 1 bits: every rounding of a sum, subnormal or not, is within u of it) is
        within gamma(n - 1) = (n - 1) u / (1 - (n - 1) u) of sum |t| of the exact sum (Higham,
        Accuracy and Stability of Numerical Algorithms, 2002, eq. 4.4), when no partial sum
        overflows: none can while (1 + gamma) sum |t| <= max.  The float64 sums add (n + 8) 2^-52
        sum |t| at most.  One term (n <= 1) is exact."""
        A = self.acc
        lo = np.stack([r[0] for r in raws], axis=1)
        hi = np.stack([r[1] for r in raws], axis=1)
        size = np.stack([r[2] for r in raws], axis=1)
        n = np.stack([r[3] for r in raws], axis=1)[..., None].astype(np.float64)  # (rows, H, 1)
        u = 2.0 ** -(A.M + 1) if self.rounding == "nearest" else 2.0 ** -A.M
        nu = np.maximum(n - 1, 0) * u
        with np.errstate(divide="ignore"):
            gamma = np.where(nu < 0.5, nu / (1 - nu) * (1 + 2.0 ** -40), np.inf)
        slack = np.where(n > 1, gamma + (n + 8) * 2.0 ** -52, 0.0) * size
        wild = ~(size * (1 + gamma) <= A.max)  # a partial sum may overflow, or gamma is unbounded
        with np.errstate(invalid="ignore", over="ignore"):
            lo = np.where(wild, -A.max, np.maximum(lo - slack, -A.max))
            hi = np.where(wild, A.max, np.minimum(hi + slack, A.max))
        ovf = any_per_row(wild) if self.overflow == "error" else np.zeros(len(lo), bool)
        lo = self._round_flag(self.storage, lo, ovf)
        return lo, self._round_flag(self.storage, hi, ovf), ovf


def exp_round(d: np.ndarray, fmt: FloatFormat, rounding: str) -> np.ndarray:
    """exp(d) correctly rounded to `fmt`, for d <= 0 (so no overflow).  float64's exp is within
    2^-50 relatively (glibc and numpy: below 1 ulp); where rounding exp(d) (1 +- 2^-44) gives two
    results, mpmath decides (`_exp_mpmath`).  exp(0) = 1 exactly; exp of any other rational is
    irrational, never on a rounding boundary."""
    d = np.asarray(d, dtype=np.float64)
    with np.errstate(under="ignore"):
        y = np.maximum(np.exp(d), 5e-324)  # an underflow is still positive (it matters rounding up)
    lo, _ = fmt.round(y * (1 - 2.0 ** -44), rounding)
    hi, _ = fmt.round(y * (1 + 2.0 ** -44), rounding)
    out = np.where(d == 0, 1.0, lo)
    unsure = (lo != hi) & (d != 0)
    for i in zip(*np.nonzero(unsure)):
        out[i] = _exp_mpmath(float(d[i]), fmt, rounding)
    return out


def _exp_mpmath(d: float, fmt: FloatFormat, rounding: str) -> float:
    """exp(d) correctly rounded: at precision p mpmath is within 2^(2-p) relatively; more bits until
    both ends of exp(d) (1 +- 2^(4-p)) round alike."""
    prec = 80
    while True:
        with mpmath.workprec(prec):
            v = mpmath.exp(mpmath.mpf(d))
            m, ex = mpmath.frexp(v)
            exact = Fraction(int(mpmath.ldexp(m, prec)), 1) * Fraction(2) ** (int(ex) - prec)
        slack = exact * Fraction(1, 2 ** (prec - 4))
        ends = [fmt.round(np.array([fraction_odd(exact + k * slack)]), rounding)[0][0] for k in (-1, 1)]
        if ends[0] == ends[1]:
            return float(ends[0])
        prec *= 2


def float_text(a: dict) -> str:
    """The arithmetic line of a float format, every rounding point named."""
    S, A = a["storage"], a["accumulate"]
    over = ("overflow=error (a result beyond the largest finite value fails the answers it feeds; IEEE would give "
            "+-inf; no inf or NaN is carried)" if a["overflow"] == "error"
            else "overflow=saturate (beyond the largest finite value: clamped to it)")
    return (f"float {a['storage_text']} storage, {a['accumulate_text']} accumulation; rounding={a['rounding']}"
            f"{' (ties to even)' if a['rounding'] == 'nearest' else ''} {over}; rounded to {S}: weights, every "
            f"linear output, residual add, attention weights before the value mix, head mean; rounded to {A}: "
            f"each product, each partial sum (index order), bias add, logits (kept in {A}), softmax's s - max, "
            f"exp (correctly rounded), each partial sum of Z, e / Z")
