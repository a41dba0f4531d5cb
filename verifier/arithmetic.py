"""The arithmetic: exact p-bit fixed point FX(p, f), and the float64 real reference.

Normative text: ``docs/arithmetic.md``, which follows Bhattamishra et al. 2024 (arXiv:2406.09347),
Appendix B.2 (p-bit
grid, rounding down, saturation) and Appendix D (max-subtracted softmax, exact sum Z).

Both classes expose the same operations (`lin`, `scores`, `mix`, `softmax`, `relu`, `add`,
`mean_heads`), so the evaluator is written once and runs in either arithmetic.  FX values are
numpy ``int64`` arrays of integer codes ``q`` meaning ``q * 2^-f``; every operation is exact
integer arithmetic followed by the rounding and saturation the spec prescribes.  Where int64
could overflow, `FixedPoint.check_capacity` refuses the format instead of letting it wrap.

Departures from the paper: it only rounds down and only clamps from above; we offer `nearest`
(ties to even) and `zero` as options and clamp from below too (docs/arithmetic.md).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Callable, Optional

import mpmath
import numpy as np

from .errors import InputError

ROUNDINGS = ("floor", "nearest", "zero")
ATTENTION_KINDS = ("softmax", "relu")
OVERFLOWS = ("saturate", "error")
ACCUMULATES = ("product", "wide")
_INT64_SAFE_BITS = 62  # every intermediate stays below 2^62 in magnitude

Recorder = Optional[Callable[[str, np.ndarray], None]]


class Ctx:
    """Saturation bookkeeping for one evaluation (used when ``overflow = error``).

    ``ovf`` has the batch shape: the leading axes that every tensor of the call shares (inputs
    for a batch, table rows for partial evaluation; the evaluator adds positions, so that a
    saturation fails only the answers that depend on it).  With ``locate``, the first saturated
    coordinate of each event is kept as a readable location, for traces; over (inputs, positions),
    one for each position, whose index is kept in ``at``.
    """

    def __init__(self, batch_shape: tuple, track: bool, locate: bool = False):
        self.track = track
        self.locate = locate
        self.ovf = np.zeros(batch_shape, dtype=bool)
        self.where: list[str] = []
        self.at: list[Optional[int]] = []  # per `where` entry: its position (a context over positions)

    def note(self, name: str, saturated: np.ndarray) -> None:
        if not self.track:
            return
        nd = self.ovf.ndim
        hit = saturated.reshape(saturated.shape[:nd] + (-1,)).any(-1) if saturated.ndim > nd else saturated
        self.ovf |= hit
        if self.locate and hit.any():
            if nd == 2:
                for i in np.flatnonzero(hit.any(0)):
                    b = np.flatnonzero(hit[:, i])[0]
                    first = np.argwhere(saturated[b, i])[0] if saturated.ndim > 2 else []
                    self.where.append(f"{name}[{','.join(str(int(k)) for k in (i, *first))}]")
                    self.at.append(int(i))
                return
            first = np.argwhere(saturated)[0][nd:]
            self.where.append(f"{name}[{','.join(str(int(i)) for i in first)}]")
            self.at.append(None)


@dataclass(frozen=True)
class FixedPoint:
    """FX(p, f): signed p-bit codes, f fractional bits (fixed-point.md, "The number format")."""

    p: int
    f: Optional[int] = None
    rounding: str = "floor"
    overflow: str = "saturate"
    accumulate: str = "product"

    def __post_init__(self) -> None:
        if not isinstance(self.p, int) or self.p < 2:
            raise InputError(f"p must be an integer >= 2, got {self.p!r}")
        if self.p > 31:
            raise InputError(f"p={self.p} is too wide: products need 2p bits and int64 holds 63; use p <= 31")
        if self.f is None:
            object.__setattr__(self, "f", self.p // 2)
        if not isinstance(self.f, int) or not 0 <= self.f <= self.p:
            raise InputError(f"f must be an integer with 0 <= f <= p (p={self.p}), got {self.f!r}")
        for name, value, allowed in (("rounding", self.rounding, ROUNDINGS),
                                     ("overflow", self.overflow, OVERFLOWS),
                                     ("accumulate", self.accumulate, ACCUMULATES)):
            if value not in allowed:
                raise InputError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")

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

    def describe(self) -> dict:
        return {"p": self.p, "f": self.f, "rounding": self.rounding, "overflow": self.overflow,
                "accumulate": self.accumulate, "step": 2.0 ** -self.f,
                "range": [self.lo / self.one, self.hi / self.one]}

    def label(self) -> str:
        return (f"FX(p={self.p}, f={self.f}) rounding={self.rounding} overflow={self.overflow} "
                f"accumulate={self.accumulate}")

    def check_capacity(self, max_terms: int) -> None:
        """Refuse formats where a sum of ``max_terms`` products of codes could leave int64."""
        bits = 2 * (self.p - 1) + math.ceil(math.log2(max_terms + 2))
        if bits > _INT64_SAFE_BITS:
            raise InputError(
                f"p={self.p} with sums of up to {max_terms} products needs {bits} bits, more than the "
                f"{_INT64_SAFE_BITS} that int64 holds exactly; use a smaller p")

    def context(self, batch_shape: tuple, locate: bool = False) -> Ctx:
        return Ctx(batch_shape, self.overflow == "error", locate)

    def to_real(self, codes: np.ndarray) -> np.ndarray:
        return np.asarray(codes, dtype=np.float64) / self.one

    # -- rounding and saturation --------------------------------------------------------------
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

    def round_div(self, num: np.ndarray, den: np.ndarray) -> np.ndarray:
        """R-rounding of the exact rational num / den, den > 0 (no saturation)."""
        q = num // den
        if self.rounding == "floor":
            return q
        r = num - q * den
        if self.rounding == "zero":
            return q + ((num < 0) & (r != 0))
        twice = 2 * r
        return q + ((twice > den) | ((twice == den) & ((q & 1) == 1)))

    def sat(self, x: np.ndarray, ctx: Ctx, name: str, present: Optional[np.ndarray] = None) -> np.ndarray:
        """Clamp to the code range; under overflow = error, note saturations (of present entries)."""
        y = np.minimum(np.maximum(x, self.lo), self.hi)  # np.clip is several times slower on int64
        if ctx.track:
            ctx.note(name, (y != x) if present is None else (y != x) & present)
        return y

    def quantize(self, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """R(w) for a real parameter array: codes and a mask of saturated entries."""
        w = np.asarray(w, dtype=np.float64)
        with np.errstate(over="ignore"):  # beyond float64 is beyond the range too: it saturates below
            scaled = w * float(self.one)  # exact: a power-of-two scaling of a float64
        rounded = {"floor": np.floor, "nearest": np.rint, "zero": np.trunc}[self.rounding](scaled)
        saturated = (rounded < self.lo) | (rounded > self.hi)
        return np.clip(rounded, self.lo, self.hi).astype(np.int64), saturated

    # -- operations ---------------------------------------------------------------------------
    def _dot(self, a: np.ndarray, b: np.ndarray, bias: Optional[np.ndarray], ctx: Ctx, name: str,
             present: Optional[np.ndarray] = None) -> np.ndarray:
        """sum over the last axis of a * b, by the accumulate rule, plus bias, saturated."""
        prod = a * b
        if self.accumulate == "product":
            # every product is a p-bit intermediate: R rounds and saturates it
            terms = self.sat(self.round_shift(prod, self.f), ctx, f"{name}.product",
                             None if present is None else present[..., None])
            s = terms.sum(-1)
            if bias is not None:
                s = s + bias
        else:
            s = prod.sum(-1)
            if bias is not None:
                s = s + (bias << self.f)
            s = self.round_shift(s, self.f)
        return self.sat(s, ctx, name, present)

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

    def softmax(self, s: np.ndarray, mask: Optional[np.ndarray], ctx: Ctx, name: str,
                rec: Recorder = None) -> np.ndarray:
        """Max-subtracted softmax (Bhattamishra et al. 2024, Appendix D) over the last axis.

        d = sat(s - M), e = R(exp d) correctly rounded, Z = sum e exactly (not saturated),
        a = R(e / Z) from the exact quotient.  Masked positions are absent, not -inf.
        """
        allowed = np.ones(s.shape, dtype=bool) if mask is None else np.broadcast_to(mask, s.shape)
        M = np.where(allowed, s, self.lo).max(-1, keepdims=True)
        raw = s - M
        d = np.clip(raw, self.lo, 0)  # allowed entries are <= 0; masked ones may be anything
        if ctx.track:
            ctx.note(f"{name}.d", (raw < self.lo) & allowed)
        dmin, table = exp_table(self.p, self.f, self.rounding)
        e = np.where(allowed, table[np.maximum(d, dmin) - dmin], 0)
        if ctx.track and self.one > self.hi:
            ctx.note(f"{name}.exp", (d == 0) & allowed)  # exp(0) = 1 is not representable
        Z = e.sum(-1, keepdims=True)
        a = self.sat(self.round_div(e << self.f, Z), ctx, f"{name}.attn")
        if rec is not None:
            rec(f"{name}.max", M[..., 0])
            rec(f"{name}.exp", e)
            rec(f"{name}.Z", Z[..., 0])
        return a


@dataclass(frozen=True)
class Real:
    """The float64 reference arithmetic ("exact-real" in fixed-point.md, "Reference arithmetic").

    Used for margins and for showing what rounding changed; it never decides a verdict.
    """

    def describe(self) -> dict:
        return {"kind": "real", "representation": "float64"}

    def label(self) -> str:
        return "real (float64 reference)"

    def context(self, batch_shape: tuple, locate: bool = False) -> Ctx:
        return Ctx(batch_shape, False, locate)

    def check_capacity(self, max_terms: int) -> None:
        return None

    def to_real(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(x, dtype=np.float64)

    def quantize(self, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
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

    def relu(self, x):
        return np.maximum(x, 0.0)

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


Arithmetic = FixedPoint | Real


@functools.lru_cache(maxsize=64)
def exp_table(p: int, f: int, rounding: str) -> tuple[int, np.ndarray]:
    """Correctly rounded R(exp(d 2^-f)) for every code d in [dmin, 0]; below dmin it is 0.

    Ziv's strategy: float64 decides every entry whose scaled value lies farther than 2^(f-40)
    from a rounding boundary (float64 exp is accurate to a few ulps, i.e. about 2^(f-52)); the
    rest are decided by mpmath at increasing precision.  exp of a nonzero rational is
    irrational, so it is never on a boundary and the loop ends.  Entries saturate at 2^(p-1)-1.
    """
    fx = FixedPoint(p, f, rounding)
    one = float(fx.one)
    # below exp(x) * 2^f < 1/2 every rounding mode gives 0
    cutoff = math.floor(-(f + 1) * math.log(2) * one) - 2
    dmin = max(fx.lo, cutoff)
    d = np.arange(dmin, 1, dtype=np.int64)
    y = np.exp(d / one) * one
    offset = 0.5 if rounding == "nearest" else 0.0
    codes = np.floor(y + offset)
    dist = np.abs(y + offset - np.rint(y + offset))
    tol = 2.0 ** (f - 40)
    for i in np.nonzero((dist < tol) & (d != 0))[0]:
        codes[i] = _exp_code_mpmath(int(d[i]), f, offset)
    codes[d == 0] = fx.one
    return dmin, np.minimum(codes.astype(np.int64), fx.hi)


def _exp_code_mpmath(d: int, f: int, offset: float) -> int:
    prec = 128
    while True:
        with mpmath.workprec(prec):
            y = mpmath.exp(mpmath.mpf(d) / (1 << f)) * (1 << f) + offset
            fl = mpmath.floor(y)
            frac = y - fl
            eps = mpmath.mpf(2) ** (f + 8 - prec)
            if eps < frac < 1 - eps:
                return int(fl)
        prec *= 2
