"""An independent, slow reference of fixed-point.md: Python Fractions, mpmath, one input at a time.

It shares no code with `verifier.arithmetic` or `verifier.evaluator`: rounding is done on exact
Fractions, exp is evaluated by mpmath at 300 bits, and the forward pass is plain loops.
"""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath


class RefFX:
    def __init__(self, p, f=None, rounding="floor", overflow="saturate", accumulate="product"):
        self.p, self.f = p, (p // 2 if f is None else f)
        self.rounding, self.overflow, self.accumulate = rounding, overflow, accumulate
        self.lo, self.hi = -(2 ** (p - 1)), 2 ** (p - 1) - 1
        self.ovf = False

    def round_int(self, x: Fraction) -> int:
        if self.rounding == "floor":
            return math.floor(x)
        if self.rounding == "zero":
            return math.trunc(x)
        fl = math.floor(x)
        rem = x - fl
        if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and fl % 2 == 1):
            return fl + 1
        return fl

    def sat(self, c: int) -> int:
        if c < self.lo or c > self.hi:
            self.ovf = True
        return min(max(c, self.lo), self.hi)

    def R(self, x: Fraction) -> int:
        """A real number to a code: round x * 2^f, then saturate."""
        return self.sat(self.round_int(Fraction(x) * 2 ** self.f))

    def val(self, c: int) -> Fraction:
        return Fraction(c, 2 ** self.f)

    def dot(self, a: list[int], b: list[int], bias: int | None = None) -> int:
        if self.accumulate == "product":
            s = sum(self.R(self.val(x) * self.val(y)) for x, y in zip(a, b))
            return self.sat(s + (bias or 0))
        return self.R(sum(self.val(x) * self.val(y) for x, y in zip(a, b)) + self.val(bias or 0))

    def exp(self, d: int) -> int:
        if d == 0:
            return self.R(Fraction(1))
        with mpmath.workprec(300):
            y = mpmath.exp(mpmath.mpf(d) / 2 ** self.f) * 2 ** self.f
            fl = int(mpmath.floor(y))
            if self.rounding == "nearest" and y - fl > 0.5:
                fl += 1
        return self.sat(fl)

    def softmax(self, s: list[int]) -> list[int]:
        M = max(s)
        d = [self.sat(x - M) for x in s]
        e = [self.exp(x) for x in d]
        Z = sum(e)
        return [self.R(Fraction(x, Z)) for x in e]


def quantize(fx: RefFX, W) -> list:
    if hasattr(W, "ndim") and W.ndim == 2:
        return [[fx.R(Fraction(float(w))) for w in row] for row in W]
    return [fx.R(Fraction(float(w))) for w in W]


def ref_forward(model, fx: RefFX, tokens: list[int]) -> tuple[list[int], bool]:
    """Readout codes at the last position and whether anything saturated (overflow)."""
    fx.ovf = False
    E, P = quantize(fx, model.E), quantize(fx, model.P)
    L = len(tokens)
    X = []
    for i, t in enumerate(tokens):
        X.append([fx.sat(E[t][j] + (P[i][j] if model.P_mask[t] else 0)) for j in range(model.d)])
    for li, layer in enumerate(model.layers):
        final = li == len(model.layers) - 1
        qpos = [L - 1] if final else list(range(L))
        W_O = quantize(fx, layer.W_O)
        new_X = []
        for i in qpos:
            keys = [j for j in range(L) if not layer.causal or j <= i]
            outs = []
            for head in layer.heads:
                WQ, WK, WV = quantize(fx, head.W_Q), quantize(fx, head.W_K), quantize(fx, head.W_V)
                q = [fx.dot(row, X[i]) for row in WQ]
                ks = [[fx.dot(row, X[j]) for row in WK] for j in keys]
                vs = [[fx.dot(row, X[j]) for row in WV] for j in keys]
                s = [fx.dot(q, k) for k in ks]
                w = fx.softmax(s) if layer.attention == "softmax" else [max(0, x) for x in s]
                outs.append([fx.dot(w, [v[c] for v in vs]) for c in range(len(WV))])
            if layer.attention == "softmax":
                heads = [x for o in outs for x in o]
            else:
                H = len(outs)
                heads = [fx.R(Fraction(sum(o[c] for o in outs), H) / 2 ** fx.f) for c in range(len(outs[0]))]
            A = [fx.dot(row, heads) for row in W_O]
            x = [fx.sat(a + b) for a, b in zip(X[i], A)] if layer.residual else A
            if layer.has_ffn:
                W1, b1, W2, b2 = (quantize(fx, layer.W1), quantize(fx, layer.b1), quantize(fx, layer.W2),
                                  quantize(fx, layer.b2))
                h = [max(0, fx.dot(row, x, b)) for row, b in zip(W1, b1)]
                F = [fx.dot(row, h, b) for row, b in zip(W2, b2)]
                x = [fx.sat(a + b) for a, b in zip(x, F)] if layer.residual else F
            new_X.append(x)
        X = new_X
    WU, bU = quantize(fx, model.readout.W_U), quantize(fx, model.readout.b_U)
    y = [fx.dot(row, X[-1], b) for row, b in zip(WU, bU)]
    return y, fx.ovf


def ref_answer(model, fx: RefFX, y: list[int]) -> tuple[int, bool]:
    """(answer, tie) from readout codes."""
    if model.readout.kind == "argmax":
        top = max(y)
        return y.index(top), y.count(top) > 1
    theta = Fraction(model.readout.theta)
    return sum(1 << i for i, c in enumerate(y) if fx.val(c) > theta), False
