"""The arithmetic: exact fixed point on a grid of any rational step, and the float64 real reference.

Normative text: ``docs/arithmetic.md``, which follows Bhattamishra et al. 2024 (arXiv:2406.09347),
Appendix B.2 (a grid of step N^-Kc and range [-N^Kc, N^Kc], rounding down, saturation) and
Appendix D (max-subtracted softmax, exact sum Z).

A fixed-point format is a `Fixed`: integer codes q in lo..hi meaning q * step, with step = num / den
a positive rational.  Its operations (`lin`, `scores`, `mix`, `softmax`, `relu`, `add`,
`mean_heads`, `quantize`, `above`) are written once, in `Fixed`, as exact integer arithmetic on
numpy ``int64`` codes followed by the rounding and saturation the spec prescribes, in terms of
three primitives: ``scale_num`` (x num), ``times_den`` (x den) and ``round_den`` (R(x / den)).  A
product of codes q1 q2 step^2 is the code R(q1 q2 num / den); a softmax weight e / Z is the code
R(e den / (Z num)).  Two classes implement the primitives:

* `FixedPoint`, binary FX(p, f): step 2^-f (num = 1, den = 2^f), codes -2^(p-1) .. 2^(p-1)-1, by
  shifts;
* `Grid`, any step and range (Bhattamishra et al.'s B.2 grid is `Grid.b2`), by integer
  multiplication and floor division.

`Real` has the same operations in float64, so the evaluator is written once and runs in any of
them; the engines that work on codes (layer-0 tables, SMT, bounds) use `Fixed`'s primitives.
Where int64 could overflow, `check_capacity` refuses the format instead of letting it wrap.

Departures from the paper: it only rounds down and only clamps from above; we offer `nearest`
(ties to even) and `zero` as options and clamp from below too (docs/arithmetic.md).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Callable, ClassVar, Optional, Union, cast

import mpmath
import numpy as np

from .support.budget import require_memory
from .support.errors import InputError

ROUNDINGS = ("floor", "nearest", "zero")
ALL_ROUNDINGS = ROUNDINGS + ("ceil",)  # ceil (toward +inf): float formats only
ROUNDING_HELP = "Default floor for fx and grids; nearest (ties to even) for float formats (which also take ceil)."
OVERFLOW_HELP = "Default saturate for fx, grids and e4m3; error for the IEEE-like float formats."
ATTENTION_KINDS = ("softmax", "relu")
OVERFLOWS = ("saturate", "error")
ACCUMULATES = ("product", "wide")
_INT64_SAFE_BITS = 62  # every intermediate stays below 2^62 in magnitude
B2_SOURCE = "Bhattamishra et al. 2024, arXiv:2406.09347, Appendix B.2"
FORMAT_HELP = ("fx (binary FX(p, f) with --p and --f, the default), b2:KC (the grid of Bhattamishra et al. "
               "2024, Appendix B.2, at the task's N: step N^-KC, range [-N^KC, N^KC]), grid:STEP:MAX (step "
               "STEP, range [-MAX, MAX], e.g. grid:1/144:144), or a float format: bf16, fp16, e4m3, e5m2, fp32, "
               "float:E:M, with fp32 accumulation, or +ACCacc for another (e.g. bf16+bf16acc), or int8 with scales: "
               "int8 (weight scales per output channel) or int8:tensor")

Recorder = Optional[Callable[[str, np.ndarray], None]]


class Ctx:
    """Saturation bookkeeping for one evaluation.

    ``ovf`` has the batch shape: the leading axes that every tensor of the call shares (inputs
    for a batch, table rows for partial evaluation; the evaluator adds positions, so that a
    saturation fails only the answers that depend on it); it is set when ``overflow = error``
    (``track``).  With ``locate`` (traces), the first saturated coordinate of each event is kept
    as a readable location, under either overflow rule: ``saturated_at`` lists every saturation,
    ``where`` those that fail the input (``overflow = error``), over (inputs, positions) one for
    each position, whose index is kept in ``at``.
    """

    def __init__(self, batch_shape: tuple, track: bool, locate: bool = False):
        self.track = track
        self.locate = locate
        self.ovf = np.zeros(batch_shape, dtype=bool)
        self.where: list[str] = []
        self.at: list[Optional[int]] = []  # per `where` entry: its position (a context over positions)
        self.saturated_at: list[str] = []

    @property
    def watch(self) -> bool:
        """Are saturations noted at all (tracked, or located for a trace)?"""
        return self.track or self.locate

    def note(self, name: str, saturated: np.ndarray) -> None:
        if not self.watch:
            return
        nd = self.ovf.ndim
        hit = saturated.reshape(saturated.shape[:nd] + (-1,)).any(-1) if saturated.ndim > nd else saturated
        if self.track:
            self.ovf |= hit
        if self.locate and hit.any():
            if nd == 2:
                for i in np.flatnonzero(hit.any(0)):
                    b = np.flatnonzero(hit[:, i])[0]
                    first = np.argwhere(saturated[b, i])[0] if saturated.ndim > 2 else []
                    self._locate(f"{name}[{','.join(str(int(k)) for k in (i, *first))}]", int(i))
                return
            first = np.argwhere(saturated)[0][nd:]
            self._locate(f"{name}[{','.join(str(int(i)) for i in first)}]", None)

    def _locate(self, place: str, position: Optional[int]) -> None:
        self.saturated_at.append(place)
        if self.track:
            self.where.append(place)
            self.at.append(position)


def _round(y: Fraction, rounding: str) -> int:
    """An exact rational rounded to an integer by the rounding rule (nearest: ties to even)."""
    if rounding == "floor":
        return math.floor(y)
    return math.trunc(y) if rounding == "zero" else round(y)  # round(Fraction): ties to even


def _check_rules(fmt) -> None:
    for name, value, allowed in (("rounding", fmt.rounding, ROUNDINGS),
                                 ("overflow", fmt.overflow, OVERFLOWS),
                                 ("accumulate", fmt.accumulate, ACCUMULATES)):
        if value not in allowed:
            raise InputError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")


class Fixed:
    """A fixed-point format: codes q in lo..hi meaning q * num / den (docs/arithmetic.md).

    Subclasses give ``lo``, ``hi``, ``num``, ``den``, ``rounding``, ``overflow``, ``accumulate``,
    `smt_width`, `describe` and `label`; they may replace the three primitives
    by faster equivalents (`FixedPoint`: shifts)."""

    lo: int
    hi: int
    num: int
    den: int
    rounding: str
    overflow: str
    accumulate: str
    shift: Optional[int] = None  # den = 2^shift and num = 1: the primitives are shifts
    # `lin` of some of a map's rows is those rows of its `lin` (the evaluator skips zero rows)
    rows_apart: ClassVar[bool] = True

    narrower: ClassVar[str] = "use a coarser step or a smaller range"  # the advice when int64 cannot hold it

    # -- what a subclass gives ------------------------------------------------------------------
    def smt_width(self, max_terms: int) -> int:
        raise NotImplementedError

    def describe(self) -> dict:
        raise NotImplementedError

    def label(self) -> str:
        raise NotImplementedError

    # -- the format ---------------------------------------------------------------------------
    @property
    def step(self) -> Fraction:
        return Fraction(self.num, self.den)

    @property
    def bits(self) -> int:
        """Bits of a code: the smallest b with 2^b codes or more."""
        return (self.hi - self.lo).bit_length()

    @property
    def one_code(self) -> int:
        """R(1) before saturation: the code exp(0) rounds to."""
        return _round(Fraction(self.den, self.num), self.rounding)

    @property
    def exp0_saturates(self) -> bool:
        """exp(0) = 1 is beyond the range (a saturation under overflow = error)."""
        return self.one_code > self.hi

    def wide_bound(self, max_terms: int) -> int:
        """The largest magnitude of a sum of max_terms exact products of codes (times num) plus a bias
        (times den), with room for two more terms."""
        M = max(-self.lo, self.hi)
        return (max_terms + 2) * M * M * self.num + M * self.den

    def raw_bound(self, max_terms: int) -> int:
        """The largest magnitude of an integer the operations hold before rounding, in a model whose
        sums have at most max_terms summands.  Accumulated wide, a sum of exact products
        (`wide_bound`).  Accumulated by product, each product is rounded and saturated before the
        sum: a product of two codes (times num), a softmax weight's numerator e den, or a sum of
        codes (softmax's Z times num)."""
        if self.accumulate == "wide":
            return self.wide_bound(max_terms)
        M = max(-self.lo, self.hi)
        return max(M * M * self.num + M * self.den, (max_terms + 2) * M * self.num)

    def check_capacity(self, max_terms: int) -> None:
        """Refuse a format whose operations, on sums of up to ``max_terms`` summands, could leave int64."""
        bits = self.raw_bound(max_terms).bit_length()
        if bits > _INT64_SAFE_BITS:
            raise InputError(f"{self.label()} with sums of up to {max_terms} products needs {bits} bits, more than "
                             f"the {_INT64_SAFE_BITS} that int64 holds exactly; {self.narrower}")

    def value(self, code: int) -> Fraction:
        """The exact value of a code."""
        return Fraction(int(code) * self.num, self.den)

    def kc(self, N: int) -> float:
        """Bhattamishra et al.'s Kc for this format at size N: step = N^-Kc (Appendix B.2)."""
        ratio = Fraction(self.den, self.num)
        return math.log(ratio) / math.log(N) if N > 1 else math.log2(ratio)

    def context(self, batch_shape: tuple, locate: bool = False) -> Ctx:
        return Ctx(batch_shape, self.overflow == "error", locate)

    def to_real(self, codes: np.ndarray) -> np.ndarray:
        return np.asarray(codes, dtype=np.float64) * self.num / self.den

    def check_model(self, model) -> None:
        """Refuse, before any work, a format the model cannot run in: a sum of the model's widest
        sum of products that int64 cannot hold, or softmax where exp(0) = 1 rounds to 0 (Z could be
        0) or whose exp table cannot fit in memory (the table is built here, once)."""
        self.check_capacity(model.widest_sum())
        if any(layer.attention == "softmax" for layer in getattr(model, "layers", ())):
            if self.one_code <= 0:
                raise InputError(f"{self.label()} rounds exp(0) = 1 to 0, so softmax's sum Z can be 0; use a step "
                                 f"of at most 1")
            self.exp_table()

    # -- the primitives -----------------------------------------------------------------------
    def scale_num(self, x: np.ndarray) -> np.ndarray:
        return x if self.num == 1 else x * self.num

    def times_den(self, x: np.ndarray) -> np.ndarray:
        return x << self.shift if self.shift is not None else x * self.den

    def round_den(self, x: np.ndarray) -> np.ndarray:
        """R-rounding of the exact rational x / den to an integer (no saturation)."""
        return self.round_div(x, self.den)

    def rescale(self, x: np.ndarray) -> np.ndarray:
        """The code R(x step) of a product of codes x = q1 q2 (worth x step^2), before saturation."""
        return self.round_den(self.scale_num(x))

    # -- rounding and saturation --------------------------------------------------------------
    def round_div(self, num: np.ndarray, den: "np.ndarray | int | np.integer") -> np.ndarray:
        """R-rounding of the exact rational num / den, den > 0 (no saturation)."""
        q = num // den
        if self.rounding == "floor":
            return q
        r = num - q * den
        if self.rounding == "zero":
            return q + ((num < 0) & (r != 0))
        twice = 2 * r
        return q + ((twice > den) | ((twice == den) & ((q & 1) == 1)))

    def round_rational(self, x: Fraction | int) -> int:
        """R-rounding of the exact rational x / step to an integer (no saturation)."""
        return _round(Fraction(x) * self.den / self.num, self.rounding)

    def threshold_code(self, theta: float | Fraction) -> int:
        """The integer c with  code > c  <=>  code step > theta  for every code of the format:
        floor(theta / step) computed exactly, then clamped to lo - 1 .. hi (a readout code is
        always in lo..hi), so that it is a constant of the format whatever theta is (2^29, 1e300)."""
        return min(max(math.floor(Fraction(theta) * self.den / self.num), self.lo - 1), self.hi)

    def above(self, y: np.ndarray, theta: float | Fraction) -> np.ndarray:
        """y_i > theta for readout codes y, decided exactly (see `threshold_code`)."""
        return y > self.threshold_code(theta)

    def sat(self, x: np.ndarray, ctx: Ctx, name: str, present: Optional[np.ndarray] = None) -> np.ndarray:
        """Clamp to the code range; under overflow = error, note saturations (of present entries)."""
        y = np.minimum(np.maximum(x, self.lo), self.hi)  # np.clip is several times slower on int64
        if ctx.watch:
            ctx.note(name, (y != x) if present is None else (y != x) & present)
        return y

    def quantize(self, w: np.ndarray, name: str = "") -> tuple[np.ndarray, np.ndarray]:
        """R(w) for a real parameter array: codes and a mask of saturated entries.  An object array
        holds exact rationals (`model.is_exact`), rounded exactly."""
        if np.asarray(w).dtype == object:
            # a construction's weights take few distinct values (mostly 0 and +-1): round each once,
            # found by (numerator, denominator) (Fractions, ints, floats), which hashes ~6x faster
            # than a Fraction; by value if a numpy scalar (no as_integer_ratio) is among them
            w = np.asarray(w)
            distinct: dict = {}
            try:
                where = np.fromiter((distinct.setdefault(v.as_integer_ratio(), len(distinct)) for v in w.flat),
                                    dtype=np.intp, count=w.size)
                values = [Fraction(*k) for k in distinct]
            except AttributeError:
                distinct = {}
                where = np.fromiter((distinct.setdefault(v, len(distinct)) for v in w.flat),
                                    dtype=np.intp, count=w.size)
                values = list(distinct)
            where = where.reshape(w.shape)
            exact = [self.round_rational(v) for v in values]
            codes = np.array([min(max(c, self.lo), self.hi) for c in exact], dtype=np.int64)
            saturated = np.array([c < self.lo or c > self.hi for c in exact], dtype=bool)
            return codes[where], saturated[where]
        return self._quantize_float(np.asarray(w, dtype=np.float64))

    def _quantize_float(self, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """R(w) of float64 weights, each the binary rational it holds.  float64 computes w / step
        within 2^-52 relatively; an entry that close to a rounding boundary (an integer; a
        half-integer for nearest), or underflowed, is decided on its exact rational instead."""
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            y = w * (self.den / self.num)
            rounded = {"floor": np.floor, "nearest": np.rint, "zero": np.trunc}[self.rounding](y)
            edge = y - 0.5 if self.rounding == "nearest" else y
            near = (np.abs(edge - np.rint(edge)) <= np.abs(y) * 2.0 ** -46) | (np.abs(y) < 2.0 ** -900)
            reach = 2.0 * max(-self.lo, self.hi) + 2  # beyond it the entry saturates either way
            close = (w != 0) & (np.abs(y) <= reach) & (near | (np.abs(y) >= 2.0 ** 50))
        if close.any():
            values, where = np.unique(w[close], return_inverse=True)
            codes = [min(max(self.round_rational(Fraction(float(v))), self.lo - 1), self.hi + 1) for v in values]
            rounded[close] = np.array(codes, dtype=np.float64)[where.reshape(-1)]
        saturated = (rounded < self.lo) | (rounded > self.hi)
        return np.clip(rounded, self.lo, self.hi).astype(np.int64), saturated

    # -- operations ---------------------------------------------------------------------------
    def _dot(self, a: np.ndarray, b: np.ndarray, bias: Optional[np.ndarray], ctx: Ctx, name: str,
             present: Optional[np.ndarray] = None) -> np.ndarray:
        """sum over the last axis of a * b, by the accumulate rule, plus bias, saturated."""
        s = self.terms(a * b, ctx, name, None if present is None else present[..., None]).sum(-1)
        return self.total(s, bias, ctx, name, present)

    def total(self, s: np.ndarray, bias: Optional[np.ndarray], ctx: Ctx, name: str,
              present: Optional[np.ndarray] = None) -> np.ndarray:
        """A dot product from the exact sum s of its `terms`: plus the bias, rounded, saturated."""
        if self.accumulate == "product":
            if bias is not None:
                s = s + bias
        else:  # R(step (sum of products) + bias) = R((num sum + den bias) / den)
            if bias is not None:
                s = s + self.times_den(bias)
            s = self.round_den(s)
        return self.sat(s, ctx, name, present)

    def terms(self, prod: np.ndarray, ctx: Ctx, name: str, present: Optional[np.ndarray] = None) -> np.ndarray:
        """The summands of a dot product whose products of codes are `prod`: an exact sum of them,
        whatever its order, is what `_dot` rounds and saturates (with `accumulate = product` each
        product is an intermediate on the grid, rounded and saturated; with `wide`, the exact
        product's numerator over the grid's step)."""
        if self.accumulate == "product":
            return self.sat(self.rescale(prod), ctx, f"{name}.product", present)
        return self.scale_num(prod)

    def lin(self, W: np.ndarray, x: np.ndarray, b: Optional[np.ndarray], ctx: Ctx, name: str) -> np.ndarray:
        """y = W x + b by the linear rule; W (out, in), x (..., in) -> (..., out)."""
        return self._dot(x[..., None, :], W, b, ctx, name)

    def lin_gathered(self, Wg: np.ndarray, xg: np.ndarray, b: Optional[np.ndarray], ctx: Ctx, name: str) -> np.ndarray:
        """`lin` for a sparse W given row by row: y_r = sum_j Wg[r, j] xg[..., r, j] (padding has Wg = 0)."""
        return self._dot(xg, Wg, b, ctx, name)

    def scores(self, q: np.ndarray, k: np.ndarray, ctx: Ctx, name: str,
               mask: Optional[np.ndarray] = None) -> np.ndarray:
        """<q_i, k_j> by the linear rule; (..., Lq, m) x (..., Lk, m) -> (..., Lq, Lk).

        Masked pairs are absent: their saturation is not an overflow."""
        return self._dot(q[..., :, None, :], k[..., None, :, :], None, ctx, name, mask)

    def mix(self, w: np.ndarray, v: np.ndarray, ctx: Ctx, name: str) -> np.ndarray:
        """sum_j w_ij v_j by the linear rule; (..., Lq, Lk) x (..., Lk, mv) -> (..., Lq, mv)."""
        return self._dot(w[..., :, None, :], np.swapaxes(v, -1, -2)[..., None, :, :], None, ctx, name)

    def relu(self, x: np.ndarray) -> np.ndarray:
        return np.maximum(x, 0)

    def add(self, x: np.ndarray, y: np.ndarray, ctx: Ctx, name: str) -> np.ndarray:
        return self.sat(x + y, ctx, name)

    def mean_heads(self, outs: np.ndarray, ctx: Ctx, name: str) -> np.ndarray:
        """R(sum_h out_h / H) over axis -2 (Chen and Zou 2024's 1/m head average)."""
        H = outs.shape[-2]
        return self.sat(self.round_div(outs.sum(-2), np.int64(H)), ctx, name)

    def exp_table(self) -> tuple[int, np.ndarray]:
        """The correctly rounded codes R(exp(d step)) for d = dmin .. 0 (`exp_codes`)."""
        return exp_codes(self.num, self.den, self.lo, self.hi, self.rounding)

    def exp_of(self, raw: np.ndarray) -> np.ndarray:
        """The exp code softmax gives a logit s with s - M = raw (raw <= 0 where s takes part in M)."""
        dmin, table = self.exp_table()
        # d = sat(raw) in lo .. 0 (allowed entries are <= 0; masked ones may be anything), read in the
        # table at max(d, dmin): one clamp to max(lo, dmin) .. 0 (np.clip is slower on int64)
        return table[np.minimum(np.maximum(raw, max(self.lo, dmin)), 0) - dmin]

    # -- interval bounds (the bounds engine: docs/bounds-engine.md) ----------------------------
    dtype = np.int64  # of a value array

    @property
    def largest(self) -> int:
        """A sum of two values of magnitude at most this much each cannot saturate (below: none can)."""
        return self.hi

    @property
    def softmax_floor(self) -> int:
        """Softmax's s - M does not saturate when it is at least this (compared exactly)."""
        return self.lo

    def zero_exp_bound(self) -> Optional[int]:
        """T: the largest softmax argument d (a code <= 0) whose exp code is 0; every d <= T has code 0
        (the table is monotone, and the softmax reads d < dmin as dmin).  None if no code is 0."""
        dmin, table = self.exp_table()
        zeros = np.flatnonzero(table == 0)
        if not len(zeros) or zeros[0] != 0:
            return None
        return dmin + int(zeros[-1])

    def ordinal(self, x: np.ndarray) -> np.ndarray:
        """Values -> consecutive integers, in order (a code is its own)."""
        return x

    def from_ordinal(self, k: np.ndarray) -> np.ndarray:
        return k

    def softmax_bounds(self, slo: np.ndarray, shi: np.ndarray, ovf: np.ndarray):
        """The entries (box, position) whose softmax weight may be positive, with the weight's bounds:
        (b, j, alo, ahi); a possible saturation is flagged in ovf (B,).  docs/bounds-engine.md, "Softmax".

        d_j = sat(s_j - M) = sat(min(0, s_j - M_-j)) with M_-j the max over the other positions, so d_j
        lies in [sat(min(0, slo_j - max_-j shi)), sat(min(0, shi_j - max_-j slo))], and e = R(exp d) is
        monotone.  With r_j = Z - e_j, a_j = R(e_j / (e_j + r_j)) rises with e_j and falls with r_j:
        it is bounded by one end of e_j and the other end of r_j (a sum of the other positions' e
        bounds); and Z is at least exp(0)'s code, which the maximum takes.  Exact logits (slo is shi)
        give the exact weights, computed once."""
        dmin, table = self.exp_table()
        B, L = slo.shape
        exact = slo is shi
        if exact:
            raw = slo - slo.max(axis=1, keepdims=True)
            ovf |= (raw < self.lo).any(axis=1)
            e_lo = e_hi = table[np.maximum(raw, dmin) - dmin]
            d_hi = raw
        elif L == 1:
            e_lo = e_hi = table[np.zeros((B, 1), np.int64) - dmin]
            d_hi = np.zeros((B, 1), np.int64)
        else:
            d_lo = np.minimum(0, slo - max_excluding(shi))
            d_hi = np.minimum(0, shi - max_excluding(slo))
            ovf |= (d_lo < self.lo).any(axis=1)
            e_lo = table[np.maximum(d_lo, dmin) - dmin]
            e_hi = table[np.maximum(d_hi, dmin) - dmin]
        if self.exp0_saturates:
            ovf |= (d_hi == 0).any(axis=1)  # exp(0) = 1 is not representable
        z_lo, z_hi = e_lo.sum(axis=1), e_hi.sum(axis=1)
        b, j = np.nonzero(e_hi)  # e = 0 gives a = 0 exactly
        elo, ehi = e_lo[b, j], e_hi[b, j]
        z0 = max(int(table[-dmin]), 1)
        a_hi = self.round_div(self.times_den(ehi), self.scale_num(np.maximum(z_lo[b] - elo + ehi, z0)))
        a_lo = a_hi if exact else self.round_div(self.times_den(elo),
                                                 self.scale_num(np.maximum(z_hi[b] - ehi + elo, 1)))
        over = a_hi > self.hi
        ovf[b[over]] = True
        return b, j, np.minimum(a_lo, self.hi), np.minimum(a_hi, self.hi)

    def relu_weight_bounds(self, slo: np.ndarray, shi: np.ndarray, ovf: np.ndarray):
        """ReLU attention: (b, j, alo, ahi) of the entries whose weight ReLU(s) may be positive."""
        b, j = np.nonzero(shi > 0)
        return b, j, np.maximum(slo[b, j], 0), shi[b, j]

    def term_bounds(self, alo: np.ndarray, ahi: np.ndarray, vlo: np.ndarray, vhi: np.ndarray,
                    ovf: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Bounds of one position's term a v in a head's output, for a in [alo, ahi] (a >= 0) and v in
        [vlo, vhi]: R(a v) saturated (product accumulation; a possible saturation is flagged in ovf,
        one flag per row) or the exact product (wide accumulation, rounded after the sum)."""
        corners = [alo * vlo, alo * vhi, ahi * vlo, ahi * vhi]
        lo, hi = np.minimum.reduce(corners), np.maximum.reduce(corners)
        if self.accumulate == "product":
            lo, hi = self.rescale(lo), self.rescale(hi)
            ovf |= any_per_row((lo < self.lo) | (hi > self.hi))
            lo, hi = np.clip(lo, self.lo, self.hi), np.clip(hi, self.lo, self.hi)
        return lo, hi

    def sum_terms(self, b: np.ndarray, tlo: np.ndarray, thi: np.ndarray, B: int) -> tuple[np.ndarray, ...]:
        """A head's raw sums over positions (before the final rounding and saturation) from the term
        bounds of its entries (box b): (lo, hi), each (B, mv).  Integer sums are exact."""
        raw_lo, raw_hi = np.zeros((B,) + tlo.shape[1:], tlo.dtype), np.zeros((B,) + thi.shape[1:], thi.dtype)
        np.add.at(raw_lo, b, tlo)
        np.add.at(raw_hi, b, thi)
        return raw_lo, raw_hi

    def replace_term(self, raw: tuple, old: tuple, new: tuple) -> tuple[np.ndarray, ...]:
        """Raw sums with one position's term bounds `old` (lo, hi) replaced by `new`."""
        return raw[0] - old[0] + new[0], raw[1] - old[1] + new[1]

    def head_output_bounds(self, raws: list, L: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(rows, H, mv) bounds of the heads' outputs from their raw sums (`sum_terms`, over at most L
        positions), and whether a saturation is possible (rows,)."""
        lo, hi = np.stack([r[0] for r in raws], axis=1), np.stack([r[1] for r in raws], axis=1)
        if self.accumulate == "wide":
            lo, hi = self.rescale(lo), self.rescale(hi)
        ovf = any_per_row((lo < self.lo) | (hi > self.hi))
        return np.clip(lo, self.lo, self.hi), np.clip(hi, self.lo, self.hi), ovf

    def softmax(self, s: np.ndarray, mask: Optional[np.ndarray], ctx: Ctx, name: str,
                rec: Recorder = None) -> np.ndarray:
        """Max-subtracted softmax (Bhattamishra et al. 2024, Appendix D) over the last axis.

        d = sat(s - M), e = R(exp d) correctly rounded, Z = sum e exactly (not saturated),
        a = R(e / Z) from the exact quotient.  Masked positions are absent, not -inf.
        """
        allowed = None if mask is None else np.broadcast_to(mask, s.shape)
        M = (s if allowed is None else np.where(allowed, s, self.lo)).max(-1, keepdims=True)
        raw = s - M
        if ctx.watch:
            under = raw < self.lo
            ctx.note(f"{name}.d", under if allowed is None else under & allowed)
        e = self.exp_of(raw)
        if allowed is not None:
            e = np.where(allowed, e, 0)
        if ctx.watch and self.exp0_saturates:
            top = raw == 0  # d = 0: the allowed entries are <= 0
            ctx.note(f"{name}.exp", top if allowed is None else top & allowed)  # exp(0) = 1 is not representable
        Z = e.sum(-1, keepdims=True)
        a = self.sat(self.round_div(self.times_den(e), self.scale_num(Z)), ctx, f"{name}.attn")
        if rec is not None:
            rec(f"{name}.max", M[..., 0])
            rec(f"{name}.exp", e)
            rec(f"{name}.Z", Z[..., 0])
        return a


@dataclass(frozen=True)
class FixedPoint(Fixed):
    """FX(p, f): signed p-bit codes, f fractional bits: the grid of step 2^-f with codes
    -2^(p-1) .. 2^(p-1) - 1, whose primitives are shifts."""

    p: int
    f: Optional[int] = None
    rounding: str = "floor"
    overflow: str = "saturate"
    accumulate: str = "product"
    narrower: ClassVar[str] = "use a smaller p"

    def __post_init__(self) -> None:
        if not isinstance(self.p, int) or self.p < 2:
            raise InputError(f"p must be an integer >= 2, got {self.p!r}")
        if self.p > 31:
            raise InputError(f"p={self.p} is too wide: products need 2p bits and int64 holds 63; use p <= 31")
        if self.f is None:
            object.__setattr__(self, "f", self.p // 2)
        if not isinstance(self.f, int) or not 0 <= self.f <= self.p:
            raise InputError(f"f must be an integer with 0 <= f <= p (p={self.p}), got {self.f!r}")
        _check_rules(self)

    # -- the format ---------------------------------------------------------------------------
    @property
    def lo(self) -> int:
        return -(1 << (self.p - 1))

    @property
    def hi(self) -> int:
        return (1 << (self.p - 1)) - 1

    @property
    def one(self) -> int:
        return 1 << self.f

    @property
    def num(self) -> int:
        return 1

    @property
    def den(self) -> int:
        return 1 << self.f

    @property
    def shift(self) -> int:
        return self.f

    @property
    def bits(self) -> int:
        return self.p

    def kc(self, N: int) -> float:
        """N^-Kc = 2^-f: Kc = f / log2 N (for N = 1, f)."""
        return self.f / math.log2(N) if N > 1 else float(self.f)

    def describe(self) -> dict:
        return {"format": "fx", "p": self.p, "f": self.f, "rounding": self.rounding, "overflow": self.overflow,
                "accumulate": self.accumulate, "step": 2.0 ** -self.f,
                "range": [self.lo / self.one, self.hi / self.one]}

    def label(self) -> str:
        return (f"FX(p={self.p}, f={self.f}) rounding={self.rounding} overflow={self.overflow} "
                f"accumulate={self.accumulate}")

    def smt_width(self, max_terms: int) -> int:
        """Bits that hold a sum of ``max_terms`` products of codes plus a shifted bias, with slack:
        below (T + 2) 2^(2p-2), so 2p - 1 + ceil(log2(T + 2)) bits, and 5 more."""
        return 2 * self.p + math.ceil(math.log2(max_terms + 2)) + 4

    # -- the primitives, by shifts ------------------------------------------------------------
    def scale_num(self, x: np.ndarray) -> np.ndarray:
        return x

    def round_den(self, x: np.ndarray) -> np.ndarray:
        return self.round_shift(x, self.f)

    def round_shift(self, x: np.ndarray, s: int) -> np.ndarray:
        """R-rounding of the exact rational x / 2^s to an integer (no saturation)."""
        if s == 0:
            return x
        if self.rounding == "floor":
            return x >> s
        if self.rounding == "zero":
            return np.where(x < 0, -((-x) >> s), x >> s)
        q = x >> s
        r = x & ((1 << s) - 1)
        half = 1 << (s - 1)
        return q + ((r > half) | ((r == half) & ((q & 1) == 1)))

    def _quantize_float(self, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        with np.errstate(over="ignore"):  # beyond float64 is beyond the range too: it saturates below
            scaled = w * float(self.one)  # exact: a power-of-two scaling of a float64
        rounded = {"floor": np.floor, "nearest": np.rint, "zero": np.trunc}[self.rounding](scaled)
        saturated = (rounded < self.lo) | (rounded > self.hi)
        return np.clip(rounded, self.lo, self.hi).astype(np.int64), saturated


@dataclass(frozen=True)
class Grid(Fixed):
    """Fixed point with any positive rational step: codes lo .. hi (lo < 0 < hi) meaning q * step.

    `Grid.b2` is Bhattamishra et al.'s B.2 grid (step N^-Kc, codes -N^(2Kc) .. N^(2Kc)), and
    `Grid.symmetric` the grid of a step and a range [-MAX, MAX].  ``b2_of`` records (N, Kc) for the
    verdict's arithmetic line."""

    step_value: Fraction
    lo: int
    hi: int
    rounding: str = "floor"
    overflow: str = "saturate"
    accumulate: str = "product"
    b2_of: Optional[tuple[int, int]] = None  # (N, Kc) of a B.2 grid

    def __post_init__(self) -> None:
        try:
            step = Fraction(self.step_value)
        except (TypeError, ValueError):
            raise InputError(f"a grid's step must be a rational number, got {self.step_value!r}") from None
        if step <= 0:
            raise InputError(f"a grid's step must be positive, got {step}")
        object.__setattr__(self, "step_value", step)
        for name in ("lo", "hi"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise InputError(f"a grid's {name} code must be an integer, got {v!r}")
            object.__setattr__(self, name, int(v))
        if not self.lo < 0 < self.hi:
            raise InputError(f"a grid's codes must run from a negative lo to a positive hi, got {self.lo} .. {self.hi}")
        _check_rules(self)
        bits = self.raw_bound(1).bit_length()
        if bits > _INT64_SAFE_BITS:
            raise InputError(f"{self.label()}: a product of two codes needs {bits} bits, more than the "
                             f"{_INT64_SAFE_BITS} that int64 holds exactly; use a coarser step or a smaller range")

    @classmethod
    def b2(cls, N: int, Kc: int, rounding: str = "floor", overflow: str = "saturate",
           accumulate: str = "product") -> "Grid":
        """Bhattamishra et al. 2024, Appendix B.2, at size N: step N^-Kc, range [-N^Kc, N^Kc]."""
        if isinstance(N, bool) or not isinstance(N, int) or N < 1:
            raise InputError(f"the B.2 grid is at a size N >= 1, got {N!r}")
        if isinstance(Kc, bool) or not isinstance(Kc, int) or Kc < 1:
            raise InputError(f"the B.2 grid's Kc must be an integer >= 1, got {Kc!r}")
        if 3 * Kc * N.bit_length() > 4 * _INT64_SAFE_BITS:  # refused before N^Kc is computed
            raise InputError(f"the B.2 grid at N={N}, Kc={Kc} has codes up to N^(2 Kc), far beyond what int64 "
                             f"holds; use a smaller Kc")
        return cls(Fraction(1, N ** Kc), -N ** (2 * Kc), N ** (2 * Kc), rounding, overflow, accumulate, (N, Kc))

    @classmethod
    def symmetric(cls, step: Fraction, top: Fraction, rounding: str = "floor", overflow: str = "saturate",
                  accumulate: str = "product") -> "Grid":
        """The grid of step `step` and range [-top, top] (top a multiple of the step)."""
        step, top = Fraction(step), Fraction(top)
        if step <= 0 or top <= 0:
            raise InputError(f"a grid's step and range end must be positive, got step {step} and range end {top}")
        codes = top / step
        if codes.denominator != 1:
            raise InputError(f"the range end {top} is not a multiple of the step {step}: the range [-MAX, MAX] "
                             f"must be on the grid")
        if codes.numerator.bit_length() > 2 * _INT64_SAFE_BITS:  # refused before the bound is computed
            raise InputError(f"the grid of step {step} and range [-{top}, {top}] has {codes} codes on each side, "
                             f"far beyond what int64 holds")
        return cls(step, -codes.numerator, codes.numerator, rounding, overflow, accumulate)

    @property
    def num(self) -> int:
        return self.step_value.numerator

    @property
    def den(self) -> int:
        return self.step_value.denominator

    def kc(self, N: int) -> float:
        if self.b2_of is not None and self.b2_of[0] == N:
            return float(self.b2_of[1])
        return super().kc(N)

    def smt_width(self, max_terms: int) -> int:
        return self.wide_bound(max_terms).bit_length() + 5

    def describe(self) -> dict:
        step = self.step_value
        out = {"format": "b2" if self.b2_of is not None else "grid", "step": float(step), "step_exact": str(step),
               "range": [float(self.lo * step), float(self.hi * step)],
               "range_exact": [str(self.lo * step), str(self.hi * step)], "codes": [self.lo, self.hi],
               "code_count": self.hi - self.lo + 1, "bits": self.bits, "rounding": self.rounding,
               "overflow": self.overflow, "accumulate": self.accumulate}
        if self.b2_of is not None:
            out.update(N=self.b2_of[0], Kc=self.b2_of[1], source=B2_SOURCE)
        return out

    def label(self) -> str:
        return format_text(self.describe())


def format_text(a: dict) -> str:
    """The arithmetic of a verdict in words, from `describe()` (a verdict's JSON keeps that dict)."""
    rules = f"rounding={a['rounding']} overflow={a['overflow']} accumulate={a['accumulate']}"
    kind = a.get("format", "fx")
    if kind == "float":
        from .floats import float_text
        return float_text(a)
    if kind == "int8":
        from .int8 import int8_text
        return int8_text(a)
    if kind == "fx":
        return (f"FX(p={a['p']}, f={a['f']}) step 2^-{a['f']}, range [{a['range'][0]:g}, {a['range'][1]:g}]; "
                + rules)
    lo, hi = a["range_exact"]
    b2 = kind == "b2"
    codes = f"codes {a['codes'][0]}..{a['codes'][1]} ({a['code_count']:,} codes, {a['bits']} bits)"
    grid = (f"step {'N^-Kc = ' if b2 else ''}{a['step_exact']}, range {'[-N^Kc, N^Kc] = ' if b2 else ''}"
            f"[{lo}, {hi}], {codes}")
    if b2:
        return f"B.2 grid ({a['source']}) at N={a['N']}, Kc={a['Kc']}: {grid}; {rules}"
    return f"grid {grid}; {rules}"


def parse_format(spec: Optional[str]) -> tuple[str, object]:
    """``fx`` -> ("fx", None); ``b2:KC`` -> ("b2", Kc); ``grid:STEP:MAX`` -> ("grid", (step, max));
    a float format ``S`` or ``S+Aacc`` -> ("float", (S, A)) (`verifier.floats`; A default fp32);
    ``int8[:channel|:tensor]`` -> ("int8", per_channel) (`verifier.int8`)."""
    from .floats import NAMED, float_format
    text = "fx" if spec is None else str(spec).strip()
    kind, _, rest = text.partition(":")
    if text == "fx":
        return "fx", None
    storage, plus, acc = text.partition("+")
    if storage in NAMED or kind == "float":
        if plus and not (acc.endswith("acc") and len(acc) > 3):
            raise InputError(f"--format {text}: the accumulation format is spelled +ACCacc, e.g. bf16+fp32acc")
        return "float", (float_format(storage), float_format(acc[:-3] if plus else "fp32"))
    if kind == "int8":
        if rest not in ("", "channel", "tensor"):
            raise InputError(f"--format {text}: int8 takes :channel (the default) or :tensor (its weight scales)")
        return "int8", rest != "tensor"
    if kind == "b2":
        if not rest.isdigit() or int(rest) < 1 or len(rest) > 6:
            raise InputError(f"--format {text}: b2:KC takes Bhattamishra et al.'s Kc, an integer >= 1 (e.g. b2:2)")
        return "b2", int(rest)
    if kind == "grid":
        parts = rest.split(":")
        try:
            if len(parts) != 2 or any(len(x) > 64 for x in parts):
                raise ValueError
            step, top = Fraction(parts[0]), Fraction(parts[1])
        except (ValueError, ZeroDivisionError):
            raise InputError(f"--format {text}: grid:STEP:MAX takes two rational numbers "
                             "(e.g. grid:1/144:144)") from None
        return "grid", (step, top)
    raise InputError(f"--format {text!r} is not a format: use {FORMAT_HELP}")


def make_format(spec: Optional[str] = None, *, N: Optional[int] = None, p: Optional[int] = None,
                f: Optional[int] = None, rounding: Optional[str] = None, overflow: Optional[str] = None,
                accumulate: str = "product") -> "Format":
    """The format a command line or a spec names (`FORMAT_HELP`); b2 is at the task's size N.
    --p and --f belong to fx: with another format they are a conflict, refused here.  Rounding and
    overflow default to floor and saturate for fixed point; for a float format to nearest (ties to
    even) and the format's own overflow (E4M3: saturate; the IEEE-like: error)."""
    kind, args = parse_format(spec)
    if kind == "float":
        from .floats import FloatArith
        if p is not None or f is not None or accumulate != "product":
            raise InputError(f"--p, --f and --accumulate are fixed point's; --format {spec} is a float format (its "
                             f"accumulation format is spelled in it: +ACCacc)")
        storage, acc = cast(tuple, args)
        return FloatArith(storage, acc, rounding or "nearest", overflow or ("error" if storage.ieee else "saturate"))
    if kind == "int8":
        from .int8 import Int8Arith
        if p is not None or f is not None or accumulate != "product" or rounding is not None:
            raise InputError(f"--p, --f, --accumulate and --rounding are fixed point's; --format {spec} is int8, whose "
                             f"roundings and int32 accumulation are fixed by its recipe")
        return Int8Arith(bool(args), overflow or "saturate")
    rules = dict(rounding=rounding or "floor", overflow=overflow or "saturate", accumulate=accumulate)
    if kind == "fx":
        if p is None:
            raise InputError("--p is required with --format fx (the default); or give another --format: " + FORMAT_HELP)
        return FixedPoint(p, f, **rules)
    if p is not None or f is not None:
        raise InputError(f"--p and --f set the bits of FX(p, f); --format {spec} is a grid of its own: give one or "
                         f"the other")
    if kind == "b2":
        if N is None:
            raise InputError(f"--format {spec} is at the task's size: give N")
        return Grid.b2(N, args, **rules)
    return Grid.symmetric(*args, **rules)


class Float64Values:
    """What the arithmetics whose values are float64 arrays share (`Real`, `floats.FloatArith`): no
    integer capacity to check, a value is its own real number, ReLU is exact."""

    dtype = np.float64  # of a value array
    rows_apart: ClassVar[bool] = True  # as `Fixed.rows_apart`

    def check_capacity(self, max_terms: int) -> None:
        return None

    def check_model(self, model) -> None:
        return None

    def to_real(self, x: "np.ndarray | float") -> np.ndarray:
        return np.asarray(x, dtype=np.float64)

    def relu(self, x: np.ndarray) -> np.ndarray:
        return np.maximum(x, 0.0)


@dataclass(frozen=True)
class Real(Float64Values):
    """The float64 reference arithmetic ("exact-real" in fixed-point.md, "Reference arithmetic").

    Used for margins and for showing what rounding changed; it never decides a verdict.
    """

    def describe(self) -> dict:
        return {"kind": "real", "representation": "float64"}

    def label(self) -> str:
        return "real (float64 reference)"

    def context(self, batch_shape: tuple, locate: bool = False) -> Ctx:
        return Ctx(batch_shape, False, locate)

    def quantize(self, w: np.ndarray, name: str = "") -> tuple[np.ndarray, np.ndarray]:
        w = np.asarray(w, dtype=np.float64)
        return w, np.zeros(w.shape, dtype=bool)

    def lin(self, W, x, b, ctx, name):
        y = x @ W.T
        return y if b is None else y + b

    def lin_gathered(self, Wg, xg, b, ctx, name):
        y = (xg * Wg).sum(-1)
        return y if b is None else y + b

    def scores(self, q, k, ctx, name, mask=None):
        return q @ np.swapaxes(k, -1, -2)

    def mix(self, w, v, ctx, name):
        return w @ v

    def above(self, y: np.ndarray, theta: float | Fraction) -> np.ndarray:
        return y > float(theta)

    def add(self, x, y, ctx, name):
        return x + y

    def mean_heads(self, outs, ctx, name):
        return outs.mean(-2)

    def softmax(self, s, mask, ctx, name, rec: Recorder = None):
        allowed = np.ones(s.shape, dtype=bool) if mask is None else np.broadcast_to(mask, s.shape)
        M = np.where(allowed, s, -np.inf).max(-1, keepdims=True)
        e = np.where(allowed, np.exp(np.minimum(s - M, 0.0)), 0.0)
        Z = e.sum(-1, keepdims=True)
        if rec is not None:
            rec(f"{name}.max", M[..., 0])
            rec(f"{name}.exp", e)
            rec(f"{name}.Z", Z[..., 0])
        return e / Z


if TYPE_CHECKING:
    from .floats import FloatArith
    from .int8 import Int8Arith
Arithmetic = Union[Fixed, Real, "FloatArith", "Int8Arith"]
Format = Union[Fixed, "FloatArith", "Int8Arith"]  # what a verdict is decided in (`make_format`)


def any_per_row(x: np.ndarray) -> np.ndarray:
    return np.asarray(x.reshape(x.shape[0], -1).any(axis=1)) if x.size else np.zeros(x.shape[0], dtype=bool)


def max_excluding(x: np.ndarray) -> np.ndarray:
    """(B, L): per position, the max over the other positions (L >= 2)."""
    rows = np.arange(len(x))
    i1 = x.argmax(axis=1)
    m1 = x[rows, i1]
    y = x.copy()
    y[rows, i1] = lowest(x.dtype)
    out = np.repeat(m1[:, None], x.shape[1], axis=1)
    out[rows, i1] = y.max(axis=1)
    return out


def lowest(dtype) -> "int | float":
    """Below every value of an array of this dtype."""
    return -np.inf if np.issubdtype(dtype, np.floating) else np.iinfo(np.int64).min // 4


def threshold_code(theta: float | Fraction, fx: Fixed) -> int:
    """`Fixed.threshold_code`: the code c with  code > c  <=>  code step > theta."""
    return fx.threshold_code(theta)


def exp_table(p: int, f: int, rounding: str) -> tuple[int, np.ndarray]:
    """FX(p, f)'s exp table (`exp_codes` for step 2^-f)."""
    return FixedPoint(p, f, rounding).exp_table()


@functools.lru_cache(maxsize=64)
def exp_codes(num: int, den: int, lo: int, hi: int, rounding: str) -> tuple[int, np.ndarray]:
    """Correctly rounded R(exp(d step)), step = num / den, for every code d in [dmin, 0]; below dmin
    it is 0.

    Ziv's strategy: float64 decides every entry whose scaled value lies farther than 2^-40 / step
    from a rounding boundary (float64 computes exp(d step) / step to within about 2^-45 / step);
    the rest are decided by mpmath at increasing precision.  exp of a nonzero rational is
    irrational, so it is never on a boundary and the loop ends.  Entries saturate at hi.  A table
    that does not fit in memory is refused before it is built.
    """
    ratio = den / num  # 1 / step
    # below exp(x) / step < 1/2 every rounding mode gives 0
    cutoff = math.floor(-math.log2(2 * ratio) * math.log(2) * ratio) - 2
    dmin = max(lo, cutoff)
    require_memory(8 * 8.0 * (1 - dmin), f"the exp table of step {Fraction(num, den)} ({1 - dmin:,} entries)")
    d = np.arange(dmin, 1, dtype=np.int64)
    y = np.exp(d * (num / den)) * ratio
    offset = 0.5 if rounding == "nearest" else 0.0
    codes = np.floor(y + offset)
    dist = np.abs(y + offset - np.rint(y + offset))
    tol = ratio * 2.0 ** -40
    for i in np.nonzero((dist < tol) & (d != 0))[0]:
        codes[i] = _exp_code_mpmath(int(d[i]), num, den, offset)
    codes[d == 0] = _round(Fraction(den, num), rounding)
    return dmin, np.minimum(codes.astype(np.int64), hi)


def _exp_code_mpmath(d: int, num: int, den: int, offset: float) -> int:
    prec = 128
    while True:
        with mpmath.workprec(prec):
            y = mpmath.exp(mpmath.mpf(d * num) / den) * den / num + offset
            fl = mpmath.floor(y)
            frac = y - fl
            eps = mpmath.mpf(den) / num * mpmath.mpf(2) ** (8 - prec)
            if eps < frac < 1 - eps:
                return int(fl)
        prec *= 2
