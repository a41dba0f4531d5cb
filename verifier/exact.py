"""A model evaluated in exact real arithmetic: the unquantized model's own answer, certified.

This is what "wrong in exact arithmetic" means in this project, so it is written apart from the FX
evaluator (`verifier.evaluator`) and shares no evaluation code with it:

* every weight is the exact rational it holds: a float64 weight is the binary rational it stores,
  an exact array (`model.is_exact`, Fractions such as 1/3) is used as it is, and the readout
  threshold is `Fraction(theta)`;
* every linear map, dot product, residual sum, ReLU, head mean (ReLU attention's 1/m) and masked
  attention is computed in rationals (integer numerators over one denominator per array): a model
  without softmax (Chen and Zou's ReLU attention, recurrent models) is evaluated exactly, and a
  margin of 0 comes out as exactly 0;
* softmax needs exp, whose value at a non-zero rational is irrational: it is enclosed by mpmath's
  interval arithmetic (an `mpmath.iv` context, each endpoint rounded outward by the
  directed-rounding mpf functions) at a working precision of `prec` bits, and everything downstream
  carries certified rational enclosures [lo, hi] (the attention weights rounded outward to the
  dyadic grid 2^-(prec + 32), to keep the rationals short).  exp(0) = 1 is exact, so uniform
  attention stays exact.

An input is evaluated at increasing precision (64, 128, ... bits) until every decision it needs is
certain: the sign of each margin, each threshold bit, the winning class.  At the precision cap
the outcome is *undecided*, never a guess.  A margin is the certified interval of
``score(expected) - max other score`` (argmax; computed from the differences of readout rows, so
that equal rows give exactly 0) or the smallest signed distance to the threshold (threshold
readout), as `evaluator.readout_margins` defines it.

Library use: ``evaluate(model, tokens)`` (one input), ``evaluate_batch`` (a batch of one length),
``check(problem, tokens)`` (against the task's answer), ``search(problem)`` (every input of a task,
or a range, with the failures), and ``cause(problem, tokens)``: why an FX counterexample fails --
in exact arithmetic too, or only through saturation or rounding in FX.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Optional

import numpy as np
from mpmath import libmp
from mpmath.ctx_iv import MPIntervalContext

from .model import Model, Recurrent
from .result import task_text
from .verdicts import Verdict

START_PREC = 64  # bits of the first exp enclosures
MAX_PREC = 4096  # the cap: an input still undecided there is reported undecided
GUARD_BITS = 32  # the dyadic grid of inexact values is 2^-(prec + GUARD_BITS)


# -- rationals and enclosures ---------------------------------------------------------------------

class Enc:
    """Certified enclosures of an array of reals: lo / den <= value <= hi / den elementwise, where
    lo and hi are object arrays of Python integers and den > 0 one integer for the whole array
    (integer arithmetic is far faster than a Fraction per entry).  An exact array has ``hi is lo``:
    every value known exactly; elsewhere an entry with lo == hi is exact too."""

    __slots__ = ("lo", "hi", "den")

    def __init__(self, lo: np.ndarray, hi: Optional[np.ndarray] = None, den: int = 1):
        self.lo, self.hi, self.den = lo, (lo if hi is None else hi), den

    @classmethod
    def rational(cls, arr) -> "Enc":
        """The exact rationals a weight array holds: a float64 weight is the binary rational it
        stores, an object array of Fractions (`model.is_exact`) is taken as it is."""
        arr = np.asarray(arr)
        fr = [Fraction(x) for x in arr.ravel()]
        den = math.lcm(1, *(f.denominator for f in fr))
        num = np.empty(arr.shape, dtype=object)
        num.ravel()[:] = [f.numerator * (den // f.denominator) for f in fr] if fr else []
        return cls(num, None, den)

    @property
    def exact(self) -> bool:
        return self.lo is self.hi

    def values(self) -> np.ndarray:
        """The lower bounds (the values, for an exact array) as an object array of Fractions."""
        out = np.empty(self.lo.shape, dtype=object)
        out.ravel()[:] = [Fraction(int(n), self.den) for n in self.lo.ravel()]
        return out

    def map(self, fn, den: Optional[int] = None) -> "Enc":
        """fn on both bounds (an index operation, or a scaling of the numerators with the new `den`)."""
        den = self.den if den is None else den
        return Enc(fn(self.lo), None, den) if self.exact else Enc(fn(self.lo), fn(self.hi), den)

    def over(self, den: int) -> "Enc":
        """The same values over a multiple of the denominator."""
        f = den // self.den
        return self if f == 1 else self.map(lambda a: a * f, den)

    def __add__(self, other: "Enc") -> "Enc":
        den = math.lcm(self.den, other.den)
        a, b = self.over(den), other.over(den)
        if a.exact and b.exact:
            return Enc(a.lo + b.lo, None, den)
        return Enc(a.lo + b.lo, a.hi + b.hi, den)

    def plus(self, b: Optional["Enc"]) -> "Enc":
        """Plus an exact bias (None: nothing)."""
        return self if b is None else self + b

    def relu(self) -> "Enc":
        lo = np.maximum(self.lo, 0)
        return Enc(lo, None, self.den) if self.exact else Enc(lo, np.maximum(self.hi, 0), self.den)

    def where(self, keep: np.ndarray) -> "Enc":
        """Entries outside `keep` set to exactly 0 (masked attention pairs are absent)."""
        return self.map(lambda a: np.where(keep, a, 0))

    def scale(self, c: Fraction) -> "Enc":
        """Times a rational c > 0."""
        return self.map(lambda a: a * c.numerator, self.den * c.denominator)

    def reduced(self) -> "Enc":
        """Divided through by the gcd of the denominator and every numerator."""
        g = math.gcd(self.den, *self.lo.ravel(), *(() if self.exact else self.hi.ravel()))
        return self if g == 1 else self.map(lambda a: a // g, self.den // g)


def lin(W: Enc, x: Enc, b: Optional[Enc] = None) -> Enc:
    """W x + b for exact W (out, in) and enclosures x (..., in): the lower bound takes x.lo where W
    is positive and x.hi where it is negative."""
    den = x.den * W.den
    if x.exact:
        return Enc(x.lo @ W.lo.T, None, den).plus(b)
    pos, neg = np.where(W.lo > 0, W.lo, 0).T, np.where(W.lo < 0, W.lo, 0).T
    return Enc(x.lo @ pos + x.hi @ neg, x.hi @ pos + x.lo @ neg, den).plus(b)


def matmul(a: Enc, b: Enc) -> Enc:
    """a @ b for enclosures (..., n, k) @ (..., k, m): the interval of each product, summed."""
    den = a.den * b.den
    if a.exact and b.exact:
        return Enc(a.lo @ b.lo, None, den)
    A = (a.lo[..., :, :, None], a.hi[..., :, :, None])
    B = (b.lo[..., None, :, :], b.hi[..., None, :, :])
    p = [x * y for x in A for y in B]
    lo = np.minimum(np.minimum(p[0], p[1]), np.minimum(p[2], p[3])).sum(axis=-2)
    hi = np.maximum(np.maximum(p[0], p[1]), np.maximum(p[2], p[3])).sum(axis=-2)
    return Enc(lo, hi, den)


@functools.lru_cache(maxsize=16)
def _iv(prec: int) -> MPIntervalContext:
    """An mpmath interval context of its own precision (the global `mpmath.iv` is left alone)."""
    ctx = MPIntervalContext()
    ctx.prec = prec
    return ctx


def exp_enclosure(lo: Fraction, hi: Fraction, prec: int) -> tuple[Fraction, Fraction]:
    """Rationals L <= exp(lo) and exp(hi) <= U: the endpoints go to mpmath rounded outward, and
    mpmath's interval exp rounds its own endpoints outward (directed rounding)."""
    if lo == hi == 0:
        return Fraction(1), Fraction(1)
    if hi <= Fraction(-7, 10) * (prec + GUARD_BITS):  # exp(hi) <= 2^-(prec + GUARD_BITS), as 0.7 > ln 2:
        return Fraction(0), Fraction(1, 1 << (prec + GUARD_BITS))  # no million-bit rationals for exp(-1e6)
    ctx = _iv(prec)
    a = libmp.from_rational(lo.numerator, lo.denominator, prec, libmp.round_floor)
    b = libmp.from_rational(hi.numerator, hi.denominator, prec, libmp.round_ceiling)
    e = ctx.exp(ctx.make_mpf((a, b)))._mpi_
    return Fraction(*libmp.to_rational(e[0])), Fraction(*libmp.to_rational(e[1]))


def softmax(s: Enc, allowed: Optional[np.ndarray], prec: int) -> Enc:
    """Softmax over the last axis, masked pairs absent (weight exactly 0).

    Shift-invariance lets every row subtract c = the largest lower bound of its allowed logits, so
    e_j = exp(s_j - c) is exactly 1 where s_j = c exactly.  Each weight a_j = e_j / (e_j + sum of
    the others) is increasing in e_j and decreasing in the others: its lower bound takes e_j's
    lower bound with the others' upper bounds, its upper bound the reverse.  Inexact weights are
    rounded outward to the grid 2^-(prec + GUARD_BITS); a row whose weights are exact (equal
    logits: each 1/count) stays exact."""
    shape = s.lo.shape
    keep = np.ones(shape, dtype=bool) if allowed is None else np.broadcast_to(allowed, shape)
    rows = []
    counts = set()
    for row in np.ndindex(shape[:-1]):
        cols = np.flatnonzero(keep[row])
        if not len(cols):
            continue
        slo = [Fraction(int(n), s.den) for n in s.lo[row][cols]]
        shi = slo if s.exact else [Fraction(int(n), s.den) for n in s.hi[row][cols]]
        c = max(slo)
        e = [exp_enclosure(a - c, b - c, prec) for a, b in zip(slo, shi)]
        if all(a == b for a, b in e):  # equal logits: exp(0) = 1 for each
            counts.add(len(cols))
            rows.append((row, cols, None, None))
            continue
        elo, ehi = [a for a, _ in e], [b for _, b in e]
        tlo, thi = sum(elo), sum(ehi)
        rows.append((row, cols, [a / (a + thi - b) for a, b in zip(elo, ehi)],
                     [b / (b + tlo - a) for a, b in zip(elo, ehi)]))
    inexact = any(r[2] is not None for r in rows)
    grid = 1 << (prec + GUARD_BITS)
    den = math.lcm(grid if inexact else 1, *counts)
    lo = np.zeros(shape, dtype=object)
    hi = np.zeros(shape, dtype=object) if inexact else lo
    for row, cols, alo, ahi in rows:
        if alo is None:
            lo[row + (cols,)] = den // len(cols)
            if inexact:
                hi[row + (cols,)] = den // len(cols)
        else:
            lo[row + (cols,)] = [math.floor(a * den) for a in alo]
            hi[row + (cols,)] = [math.ceil(b * den) for b in ahi]
    return Enc(lo, hi if inexact else None, den)


# -- the forward pass -----------------------------------------------------------------------------

@dataclass
class _Exact:
    """A model's weights as exact rationals (`named` under the model file's names), its threshold."""

    model: Model | Recurrent
    w: dict[str, Enc]
    theta: Fraction

    @classmethod
    def of(cls, model: Model | Recurrent) -> "_Exact":
        w = {name: Enc.rational(arr) for name, arr in model.named_arrays().items()}
        return cls(model, w, Fraction(model.readout.theta))

    @property
    def softmax_layers(self) -> bool:
        return isinstance(self.model, Model) and any(l.attention == "softmax" for l in self.model.layers)


def _read_state(ex: _Exact, tokens: np.ndarray, prec: int) -> Enc:
    """The residual stream (or recurrent state) at the positions the readout reads: (B, R, d)."""
    model, w = ex.model, ex.w
    every = model.readout.positions == "all"
    if isinstance(model, Recurrent):
        B, L = tokens.shape
        h = w["R.h0"].map(lambda a: np.broadcast_to(a, (B, model.d)))
        states = []
        for t in range(L):
            h = (lin(w["R.W"], h, w["R.b"]) + w["R.U"].map(lambda a, t=t: a[tokens[:, t]])).relu().reduced()
            states.append(h)
        den = math.lcm(*(st.den for st in states))
        H = Enc(np.stack([st.over(den).lo for st in states], axis=1), None, den)
        return H if every else H.map(lambda a: a[:, -1:])
    B, L = tokens.shape
    pos = np.arange(L)
    P = w["P"].map(lambda a: np.where(model.P_mask[tokens][..., None], a[pos], 0))
    X = (w["E"].map(lambda a: a[tokens]) + P).reduced()
    for li, layer in enumerate(model.layers):
        last = li == len(model.layers) - 1
        qpos = pos[-1:] if last and not every else pos
        Xq = X.map(lambda a, qpos=qpos: a[:, qpos])
        allowed = (qpos[:, None] >= pos[None, :]) if layer.causal else None
        outs = []
        for hi, _ in enumerate(layer.heads):
            name = f"L{li}.H{hi}"
            q = lin(w[f"{name}.W_Q"], Xq, w.get(f"{name}.b_Q"))
            k = lin(w[f"{name}.W_K"], X, w.get(f"{name}.b_K"))
            v = lin(w[f"{name}.W_V"], X, w.get(f"{name}.b_V"))
            S = matmul(q, k.map(lambda a: np.swapaxes(a, -1, -2)))
            if layer.attention == "softmax":
                A = softmax(S, allowed, prec)
            else:
                A = S.relu() if allowed is None else S.relu().where(allowed)
            outs.append(matmul(A, v))
        if layer.attention == "softmax":
            heads = outs[0] if len(outs) == 1 else _concat(outs)
        else:  # Chen and Zou's (1/m) sum over the heads
            total = outs[0]
            for o in outs[1:]:
                total = total + o
            heads = total.scale(Fraction(1, len(outs)))
        A = lin(w[f"L{li}.W_O"], heads, w.get(f"L{li}.b_O"))
        Xq = Xq + A if layer.residual else A
        if layer.has_ffn:
            hidden = lin(w[f"L{li}.W1"], Xq, w[f"L{li}.b1"]).relu()
            F = lin(w[f"L{li}.W2"], hidden, w[f"L{li}.b2"])
            Xq = Xq + F if layer.residual else F
        X = Xq.reduced()
    start = 0 if model.bos is None else 1  # a BOS position's own output is not an answer
    return X.map(lambda a: a[:, start:]) if every else X


def _concat(parts: list[Enc]) -> Enc:
    den = math.lcm(*(p.den for p in parts))
    parts = [p.over(den) for p in parts]
    lo = np.concatenate([p.lo for p in parts], axis=-1)
    return Enc(lo, None if all(p.exact for p in parts) else np.concatenate([p.hi for p in parts], axis=-1), den)


# -- decisions ------------------------------------------------------------------------------------

Interval = tuple[Fraction, Fraction]


@dataclass
class Decision:
    """The readout at one position, decided in exact arithmetic."""

    answer: Optional[int]  # the class (argmax) or bit pattern (threshold); None: undecided or a tie
    margin: Optional[Interval]  # certified [lo, hi]; None: an argmax over one class has no margin
    tie: tuple[int, ...] = ()  # argmax: the classes that share the exact maximum (then answer is None)
    bits: Optional[tuple[Optional[int], ...]] = None  # threshold: each bit, None where undecided
    verdict: Optional[str] = None  # against the expected answer: right | wrong | undecided
    scores: tuple[Interval, ...] = ()  # the readout scores y = W_U x + b_U, certified

    @property
    def decided(self) -> bool:
        return self.answer is not None or bool(self.tie)


class _Readout:
    """Decides readout states x (d,) exactly: argmax margins from differences of readout rows."""

    def __init__(self, ex: _Exact):
        self.W, self.b = ex.w["U.W"], ex.w["U.b"]
        self.C = self.W.lo.shape[0]
        self.kind, self.theta = ex.model.readout.kind, ex.theta
        self._diff: dict[int, tuple[Enc, Enc]] = {}

    def gaps(self, c: int, x: Enc) -> tuple[list[Fraction], list[Fraction]]:
        """score(c) - score(j) for every j != c, from the rows W_c - W_j (equal rows: exactly 0)."""
        if c not in self._diff:
            others = np.arange(self.C) != c
            self._diff[c] = (self.W.map(lambda a: a[c] - a[others]), self.b.map(lambda a: a[c] - a[others]))
        W, b = self._diff[c]
        return _bounds(lin(W, x, b))

    def decide(self, x: Enc, expected) -> Decision:
        ylo, yhi = _bounds(lin(self.W, x, self.b))
        d = self._threshold(ylo, yhi, expected) if self.kind == "threshold" else self._argmax(ylo, yhi, x, expected)
        d.scores = tuple(zip(ylo, yhi))
        return d

    def _argmax(self, ylo: list[Fraction], yhi: list[Fraction], x: Enc, expected) -> Decision:
        if self.C == 1:
            return Decision(0, None, verdict=None if expected is None else ("right" if expected == 0 else "wrong"))
        c = max(range(self.C), key=lambda j: ylo[j] + yhi[j])  # the candidate: the largest midpoint
        lo, hi = self.gaps(c, x)
        others = [j for j in range(self.C) if j != c]
        answer, tie = None, ()
        if all(a > 0 for a in lo):
            answer = c
        elif all(a > 0 or a == b == 0 for a, b in zip(lo, hi)):
            tie = tuple(sorted([c] + [j for j, a, b in zip(others, lo, hi) if a == b == 0]))
        verdict = None
        if expected is not None:
            if int(expected) != c:
                lo, hi = self.gaps(int(expected), x)
            verdict = "right" if min(lo) > 0 else "wrong" if min(hi) <= 0 else "undecided"
        return Decision(answer, (min(lo), min(hi)), tie, None, verdict)

    def _threshold(self, ylo: list[Fraction], yhi: list[Fraction], expected) -> Decision:
        theta = self.theta
        bits = tuple(1 if a > theta else 0 if b <= theta else None for a, b in zip(ylo, yhi))
        answer = None if None in bits else sum(bit << i for i, bit in enumerate(bits))
        want = [((int(expected) >> i) & 1) if expected is not None else (1 if bit is None else bit)
                for i, bit in enumerate(bits)]
        lo = min(a - theta if w else theta - b for a, b, w in zip(ylo, yhi, want))
        hi = min(b - theta if w else theta - a for a, b, w in zip(ylo, yhi, want))
        verdict = None
        if expected is not None:
            verdict = ("wrong" if any(bit is not None and bit != w for bit, w in zip(bits, want)) else
                       "right" if answer is not None else "undecided")
        return Decision(answer, (lo, hi), (), bits, verdict)


def _bounds(y: Enc) -> tuple[list[Fraction], list[Fraction]]:
    lo = [Fraction(int(n), y.den) for n in y.lo]
    return lo, (lo if y.exact else [Fraction(int(n), y.den) for n in y.hi])


@dataclass
class ExactOutcome:
    """One input in exact arithmetic: the decision at each position read (one, for a readout at
    the last position), the precision of the exp enclosures that decided it (None: the model has no
    softmax, every value is exact), and whether every value was computed exactly."""

    tokens: list[int]
    decisions: list[Decision]
    per_position: bool
    expected: Optional[object] = None
    prec: Optional[int] = None
    exact: bool = True

    @property
    def answer(self):
        """The answer (an int, None if undecided or a tie), or the answers at every position."""
        answers = [d.answer for d in self.decisions]
        return answers if self.per_position else answers[0]

    @property
    def margin(self) -> Optional[Interval]:
        """The smallest margin over the positions read, as a certified interval."""
        ms = [d.margin for d in self.decisions if d.margin is not None]
        return (min(m[0] for m in ms), min(m[1] for m in ms)) if ms else None

    @property
    def verdict(self) -> Optional[str]:
        """right | wrong | undecided against the expected answer (None when none was given)."""
        vs = [d.verdict for d in self.decisions]
        if vs[0] is None:
            return None
        return "wrong" if "wrong" in vs else "undecided" if "undecided" in vs else "right"

    @property
    def position(self) -> Optional[int]:
        """For a readout at every position: the first position read that is wrong."""
        wrong = [i for i, d in enumerate(self.decisions) if d.verdict == "wrong"]
        return wrong[0] if wrong and self.per_position else None

    @property
    def reason(self) -> Optional[str]:
        """Why it is wrong: tie (no strict maximum, or the margin is exactly 0) or wrong."""
        if self.verdict != "wrong":
            return None
        d = self.decisions[self.position or 0]
        return "tie" if d.tie or (d.margin is not None and d.margin[0] == d.margin[1] == 0) else "wrong"

    @property
    def decided(self) -> bool:
        return self.verdict != "undecided" if self.expected is not None else all(d.decided for d in self.decisions)

    def produced(self, task=None) -> str:
        """The answer by name (at the failing position of a sequence output); a tie names every class
        that shares the maximum."""
        d = self.decisions[self.position or (len(self.decisions) - 1 if self.per_position else 0)]
        name = (lambda c: str(c)) if task is None else task.answer_name
        if d.tie:
            return "tie(" + ", ".join(name(c) for c in d.tie) + ")"
        return "undecided" if d.answer is None else name(d.answer)

    def describe(self, task=None) -> str:
        """One line: the verdict, the answer and the margin, with the arithmetic that decided it."""
        how = "exact rationals" if self.exact else f"rationals, exp enclosed at {self.prec} bits"
        head = self.verdict or ("decided" if self.decided else "undecided")
        at = f"at position {self.position}: " if self.position is not None else ""
        expected = ""
        if self.expected is not None and task is not None:
            e = self.expected[self.position] if self.position is not None else self.expected
            answer = (task.answer_name(int(e)) if not self.per_position or self.position is not None
                      else task.answer_text(e))
            expected = f"expected {answer}, "
        return (f"{head} in exact arithmetic ({how}): {at}{expected}got {self.produced(task)}, "
                f"margin {interval_text(self.margin)}")


def interval_text(m: Optional[Interval]) -> str:
    """A certified margin: the exact rational where lo == hi, else the interval in decimals."""
    if m is None:
        return "none (one class)"
    lo, hi = m
    if lo == hi:
        return f"{lo} (exact)" if lo.denominator == 1 or lo.denominator < 10 ** 6 else f"{float(lo):.6g} (exact)"
    return f"{float((lo + hi) / 2):.9g} +- {float((hi - lo) / 2):.1e} (certified)"


# -- the API --------------------------------------------------------------------------------------

def evaluate_batch(model: Model | Recurrent, tokens: np.ndarray, expected=None,
                   max_prec: int = MAX_PREC) -> list[ExactOutcome]:
    """Inputs (B, L) of one length in exact arithmetic; `expected` (B,) or (B, L'), the answers to
    judge against (optional).  Each input is refined until it is decided or reaches `max_prec`."""
    return _evaluate(_Exact.of(model), tokens, expected, max_prec)


def _evaluate(ex: _Exact, tokens: np.ndarray, expected, max_prec: int) -> list[ExactOutcome]:
    model = ex.model
    tokens = np.atleast_2d(np.asarray(tokens, dtype=np.int64))
    B = len(tokens)
    readout = _Readout(ex)
    per_position = model.readout.positions == "all"
    out: list[Optional[ExactOutcome]] = [None] * B
    pending = np.arange(B)
    prec = START_PREC
    while len(pending):
        X = _read_state(ex, tokens[pending], prec)
        still = []
        for row, i in enumerate(pending):
            exp_i = None if expected is None else expected[i]
            decisions = []
            for r in range(X.lo.shape[1]):
                x = X.map(lambda a, row=row, r=r: a[row, r])
                want = None if exp_i is None else (exp_i[r] if per_position else exp_i)
                decisions.append(readout.decide(x, want))
            o = ExactOutcome([int(t) for t in tokens[i]], decisions, per_position, exp_i,
                             prec if ex.softmax_layers else None, X.exact or _all_points(X, row))
            out[i] = o
            if not o.decided and ex.softmax_layers and prec < max_prec:
                still.append(i)
        pending = np.array(still, dtype=np.int64)
        prec *= 2
    return out


def _all_points(X: Enc, row: int) -> bool:
    return bool(np.all(np.equal(X.lo[row], X.hi[row]).astype(bool)))


def read_state(model: Model | Recurrent, tokens) -> np.ndarray:
    """The exact residual stream (the state, for a recurrent model) at the positions the readout
    reads, (R, d) Fractions, of one input of a model without softmax (where it is exact)."""
    ex = _Exact.of(model)
    if ex.softmax_layers:
        raise ValueError("read_state is exact only for a model without softmax attention")
    X = _read_state(ex, np.atleast_2d(np.asarray(tokens, dtype=np.int64)), START_PREC)
    return X.map(lambda a: a[0]).values()


def evaluate(model: Model | Recurrent, tokens, expected=None, max_prec: int = MAX_PREC) -> ExactOutcome:
    """One input (its tokens as the model reads them, a BOS token included) in exact arithmetic."""
    return evaluate_batch(model, np.asarray(tokens, dtype=np.int64)[None, :],
                          None if expected is None else [expected], max_prec)[0]


def check(problem, tokens, max_prec: int = MAX_PREC) -> ExactOutcome:
    """Does the unquantized model get this input of the problem's task right, in exact arithmetic?
    (`problem`: a `verifier.engines.Problem`; its arithmetic is not used.)"""
    tokens = np.asarray(tokens, dtype=np.int64)
    return evaluate(problem.model, tokens, problem.task.answer(tokens), max_prec)


@dataclass
class ExactSearch:
    """Inputs start..stop of a task, each decided in exact arithmetic.  `covered` counts the members
    of the task's enumeration gone through (as an engine's coverage does), `checked` the inputs among
    them, the members with an answer (a task such as nearest neighbour enumerates sequences that
    are not inputs)."""

    covered: int
    right: int
    wrong: list[tuple[int, ExactOutcome]] = field(default_factory=list)  # (index, outcome)
    undecided: list[tuple[int, ExactOutcome]] = field(default_factory=list)
    min_margin: Optional[Interval] = None  # the smallest margin over the inputs covered
    tightest: Optional[int] = None  # the index of an input with that margin

    total: int = 0  # the task's input count (the search may cover a range of it)
    max_prec: int = MAX_PREC

    @property
    def verdict(self) -> Verdict:
        """refuted (an input is wrong), unknown (some undecided, or only a range covered) or proved."""
        if self.wrong:
            return Verdict.REFUTED
        return Verdict.UNKNOWN if self.undecided or self.covered < self.total else Verdict.PROVED

    @property
    def checked(self) -> int:
        """The inputs decided: right, wrong or undecided."""
        return self.right + len(self.wrong) + len(self.undecided)

    @property
    def exit_code(self) -> int:
        return self.verdict.exit_code

    def summary(self, problem, shown: int = 1) -> str:
        """What `verify exact` prints: the verdict in exact arithmetic, the counts, the tightest
        input, and the first `shown` wrong (and undecided) inputs."""
        task, model = problem.task, problem.model
        info = model.info
        what = info.get("construction", "model") + (f" ({info['theorem']})" if info.get("theorem") else "")
        lines = [f"{self.verdict.upper()} in exact arithmetic: {what}"
                 + (f", variant {info['variant']}" if info.get("variant") else "") + f" on {task.name} "
                 + task_text(task.describe()),
                 f"  arithmetic  exact: the weights as the rationals they hold, every linear operation in rationals, "
                 f"exp enclosed by mpmath interval arithmetic (refined up to {self.max_prec} bits); "
                 "no rounding, no range",
                 f"  inputs      {self.covered:,} of {self.total:,} covered"
                 + (f" ({self.checked:,} of them inputs with an answer)" if self.checked != self.covered else "")
                 + f": {self.right:,} right, {len(self.wrong):,} wrong, {len(self.undecided):,} undecided"]
        if self.min_margin is not None:
            lines.append(f"  min margin  {interval_text(self.min_margin)} at {task.render(task.decode(self.tightest))}")
        for label, found in (("wrong", self.wrong), ("undecided", self.undecided)):
            for index, o in found[:shown]:
                lines.append(f"  {label} #{index}: {task.render(o.tokens)} -> {o.describe(task)}")
        return "\n".join(lines)

    def to_json(self, problem) -> dict:
        task = problem.task

        def one(index: int, o: ExactOutcome) -> dict:
            return {"index": index, "input": task.render(o.tokens), "tokens": o.tokens, "verdict": o.verdict,
                    "reason": o.reason, "position": o.position, "produced": o.produced(task),
                    "margin": None if o.margin is None else [str(o.margin[0]), str(o.margin[1])],
                    "exact": o.exact, "prec": o.prec, "text": o.describe(task)}

        return {"verdict": self.verdict, "arithmetic": {"kind": "exact", "max_prec": self.max_prec},
                "task": task.describe(), "construction": problem.model.info, "covered": self.covered,
                "total": self.total, "checked": self.checked, "right": self.right,
                "min_margin": None if self.min_margin is None else [str(x) for x in self.min_margin],
                "tightest": None if self.tightest is None else task.render(task.decode(self.tightest)),
                "wrong": [one(i, o) for i, o in self.wrong], "undecided": [one(i, o) for i, o in self.undecided]}


def search(problem, start: int = 0, stop: Optional[int] = None, max_wrong: Optional[int] = None,
           batch: int = 256, max_prec: int = MAX_PREC) -> ExactSearch:
    """Enumerate inputs start..stop of the problem's task in exact arithmetic and collect the wrong
    (and undecided) ones; stop after `max_wrong` wrong inputs when given."""
    task = problem.task
    stop = task.total if stop is None else stop
    found = ExactSearch(0, 0, total=task.total, max_prec=max_prec)
    ex = _Exact.of(problem.model)
    for b in task.batches(start, stop, batch):
        for index, o in zip(b.index, _evaluate(ex, b.tokens, b.expected, max_prec)):
            found.covered = int(index) + 1 - start  # the members before it that are no inputs count too
            v = o.verdict
            if v == "right":
                found.right += 1
            else:
                (found.wrong if v == "wrong" else found.undecided).append((int(index), o))
            m = o.margin
            if m is not None and (found.min_margin is None or m[0] < found.min_margin[0]):
                found.min_margin, found.tightest = m, int(index)
            if max_wrong is not None and len(found.wrong) >= max_wrong:
                return found
    found.covered = stop - start
    return found


# -- why an FX counterexample fails ---------------------------------------------------------------

CAUSES = ("exact", "saturation", "rounding", "undecided", "none")


@dataclass
class Cause:
    """Why an input fails in FX: ``exact`` -- the unquantized model gets it wrong in exact
    arithmetic too; ``saturation`` -- right in exact arithmetic, and values saturated in FX (a
    finding about the format's range); ``rounding`` -- right in exact arithmetic, nothing
    saturated (rounding alone); ``undecided`` -- exact arithmetic did not decide it at the
    precision cap; ``none`` -- FX gets it right."""

    kind: str
    exact: ExactOutcome
    saturated_at: list[str]

    def text(self, task=None) -> str:
        if self.kind in ("exact", "undecided"):
            return self.exact.describe(task)
        if self.kind == "none":
            return "FX gets it right; " + self.exact.describe(task)
        why = (f"a saturation counterexample (values saturated at {', '.join(self.saturated_at[:3])}"
               + (f" and {len(self.saturated_at) - 3} more" if len(self.saturated_at) > 3 else "") + ")"
               if self.kind == "saturation" else "a rounding counterexample (nothing saturated)")
        return f"{why}: {self.exact.describe(task)}"


def cause(problem, tokens, max_prec: int = MAX_PREC) -> Cause:
    """Label an input of `problem` by why it fails in the problem's FX arithmetic: decided in
    exact arithmetic here; whether FX fails it, and where its values saturated, from the FX
    evaluator's trace (`evaluator.trace`, the generic path, as `api.replay` judges a counterexample)."""
    from .evaluator import make_evaluator, trace  # the FX side, only to judge the input and read its saturations
    tokens = np.asarray(tokens, dtype=np.int64)
    o = check(problem, tokens, max_prec)
    quantized = make_evaluator(problem.model, problem.arith, tables=False)
    out, _ = trace(quantized, tokens)
    sat = list(out.saturated_at)
    if not quantized.judge(out, np.array([problem.task.answer(tokens)])).failed[0]:
        return Cause("none", o, sat)
    kind = {"wrong": "exact", "undecided": "undecided"}.get(o.verdict) or ("saturation" if sat else "rounding")
    return Cause(kind, o, sat)
