"""An independent, slow reference of docs/arithmetic.md: Python Fractions, mpmath, one input at a time.

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

    def logit(self, q: list[int], k: list[int]) -> int:
        return self.dot(q, k)

    def mix(self, w: list[int], v: list[int]) -> int:
        return self.dot(w, v)

    def mean(self, xs: list[int]) -> int:
        return self.R(self.val(Fraction(sum(xs), len(xs))))

    def softmax(self, s: list[int]) -> list[int]:
        M = max(s)
        d = [self.sat(x - M) for x in s]
        e = [self.exp(x) for x in d]
        Z = sum(e)
        return [self.R(Fraction(x, Z)) for x in e]


class RefGrid(RefFX):
    """The grid of any rational step: codes lo..hi meaning code * step (docs/arithmetic.md).  Only
    the number format differs from RefFX; the operations (dot, softmax, sat) are RefFX's, which
    work on values through `R` and `val`."""

    def __init__(self, step, lo, hi, rounding="floor", overflow="saturate", accumulate="product"):
        self.step = Fraction(step)
        self.rounding, self.overflow, self.accumulate = rounding, overflow, accumulate
        self.lo, self.hi = lo, hi
        self.ovf = False

    def R(self, x: Fraction) -> int:
        """A real number to a code: round x / step, then saturate."""
        return self.sat(self.round_int(Fraction(x) / self.step))

    def val(self, c) -> Fraction:
        return Fraction(c) * self.step

    def exp(self, d: int) -> int:
        if d == 0:
            return self.R(Fraction(1))
        with mpmath.workprec(300):
            step = mpmath.mpf(self.step.numerator) / self.step.denominator
            y = mpmath.exp(d * step) / step
            fl = int(mpmath.floor(y))
            if self.rounding == "nearest" and y - fl > 0.5:
                fl += 1
        return self.sat(fl)


class RefFloat:
    """The float recipe (docs/arithmetic.md, "Floating-point formats") on exact Fractions: a value is
    its own "code"; every rounding is done by hand (`round_to`), exp by mpmath at 400 bits.  A format
    is (E, M, ieee)."""

    def __init__(self, storage, acc, rounding="nearest", overflow="error"):
        self.S, self.A, self.rounding, self.overflow = storage, acc, rounding, overflow
        self.ovf = False

    def round_to(self, x: Fraction, fmt) -> Fraction:
        E, M, ieee = fmt
        bias = 2 ** (E - 1) - 1
        emax, emin = (bias if ieee else bias + 1), 1 - bias
        top = (2 - Fraction(1, 2 ** M) * (1 if ieee else 2)) * Fraction(2) ** emax
        x = Fraction(x)
        if x == 0:
            return x
        e = abs(x).numerator.bit_length() - abs(x).denominator.bit_length()
        while Fraction(2) ** e > abs(x):
            e -= 1
        while Fraction(2) ** (e + 1) <= abs(x):
            e += 1
        q = Fraction(2) ** (max(e, emin) - M)
        y = x / q
        fl = math.floor(y)
        if self.rounding == "floor":
            n = fl
        elif self.rounding == "ceil":
            n = math.ceil(y)
        elif self.rounding == "zero":
            n = math.trunc(y)
        else:
            rem = y - fl
            n = fl + (rem > Fraction(1, 2) or (rem == Fraction(1, 2) and fl % 2 == 1))
        v = n * q
        if abs(v) > top:
            self.ovf = True
            v = top if v > 0 else -top
        return v

    def R(self, x: Fraction) -> Fraction:
        return self.round_to(x, self.S)

    sat = R  # ref_forward's "sat(a + b)": the exact sum rounded to storage

    def val(self, c: Fraction) -> Fraction:
        return c

    def _acc_sum(self, terms: list) -> Fraction:
        total = None
        for t in terms:
            total = t if total is None else self.round_to(total + t, self.A)
        return Fraction(0) if total is None else total

    def logit(self, a: list, b: list) -> Fraction:
        return self._acc_sum([self.round_to(x * y, self.A) for x, y in zip(a, b)])

    def dot(self, a: list, b: list, bias=None) -> Fraction:
        s = self.logit(a, b)
        if bias is not None:
            s = self.round_to(s + bias, self.A)
        return self.R(s)

    def mix(self, w: list, v: list) -> Fraction:
        return self.dot([self.R(x) for x in w], v)

    def mean(self, xs: list) -> Fraction:
        return self.R(self._acc_sum(xs) / len(xs))

    def exp(self, d: Fraction) -> Fraction:
        if d == 0:
            return Fraction(1)
        if d < -800:  # exp(d) < 2^-1150, far below every format's half smallest value: it rounds as 2^-2000 does
            return self.round_to(Fraction(1, 2 ** 2000), self.A)
        with mpmath.workprec(400):
            m, ex = mpmath.frexp(mpmath.exp(mpmath.mpf(d.numerator) / d.denominator))
            return self.round_to(Fraction(int(mpmath.ldexp(m, 400))) * Fraction(2) ** (int(ex) - 400), self.A)

    def softmax(self, s: list) -> list:
        M = max(s)
        e = [self.exp(self.round_to(x - M, self.A)) for x in s]
        Z = self._acc_sum(e)
        return [self.round_to(x / Z, self.A) for x in e]


def quantize(fx: RefFX, W) -> tuple[list, bool]:
    """Codes of a weight array (nested lists of ints) and whether any entry saturated."""
    before, fx.ovf = fx.ovf, False
    if hasattr(W, "ndim") and W.ndim == 2:
        codes = [[fx.R(_exact(w)) for w in row] for row in W]
    else:
        codes = [fx.R(_exact(w)) for w in W]
    saturated, fx.ovf = fx.ovf, before
    return codes, saturated


def _exact(w) -> Fraction:
    """A weight's exact value: a Fraction as it is, a float64 as the binary rational it holds."""
    return w if isinstance(w, Fraction) else Fraction(float(w))


def quantize_model(model, fx: RefFX) -> dict:
    """Every weight quantized once.  Saturation is kept per row of E and P (an input uses the rows of
    its tokens and positions) and as one flag for the rest (every input uses every other weight)."""
    q = {"E": [], "E_sat": [], "P": [], "P_sat": []}
    for name in ("E", "P"):
        for row in getattr(model, name):
            codes, sat = quantize(fx, row)
            q[name].append(codes)
            q[name + "_sat"].append(sat)
    other = False

    def take(W):
        nonlocal other
        codes, sat = quantize(fx, W)
        other |= sat
        return codes

    q["layers"] = []
    for layer in model.layers:
        maybe = lambda b: None if b is None else take(b)
        ql = {"W_O": take(layer.W_O), "b_O": maybe(layer.b_O),
              "heads": [(take(h.W_Q), take(h.W_K), take(h.W_V), maybe(h.b_Q), maybe(h.b_K), maybe(h.b_V))
                        for h in layer.heads]}
        if layer.has_ffn:
            ql["ffn"] = (take(layer.W1), take(layer.b1), take(layer.W2), take(layer.b2))
        q["layers"].append(ql)
    q["U"] = (take(model.readout.W_U), take(model.readout.b_U))
    q["other_sat"] = other
    return q


def ref_forward(model, fx: RefFX, tokens: list[int], q: dict | None = None,
                per_answer: bool = False) -> tuple[list, bool | list[bool]]:
    """Readout codes at the last position (at every position, a list per position, for a readout
    at every position) and whether anything the answers depend on saturated (overflow); with
    `per_answer`, that flag for each answer.  A value's flag is its own saturations or its
    inputs' (dataflow, one value at a time): the BOS position's own output, read by no answer,
    fails none.  `q`: the model quantized by `quantize_model` (computed here when not given)."""
    q = q or quantize_model(model, fx)
    E, P = q["E"], q["P"]
    L = len(tokens)
    X = []  # (vector, did anything it depends on saturate)
    for i, t in enumerate(tokens):
        takes_position = bool(model.P_mask[t])
        fx.ovf = q["E_sat"][t] or (takes_position and q["P_sat"][i])
        X.append(([fx.sat(E[t][j] + (P[i][j] if takes_position else 0)) for j in range(model.d)], fx.ovf))
    every = model.readout.positions == "all"
    for li, layer in enumerate(model.layers):
        final = li == len(model.layers) - 1
        qpos = [L - 1] if final and not every else list(range(L))
        ql = q["layers"][li]
        new_X = []
        for i in qpos:
            keys = [j for j in range(L) if not layer.causal or j <= i]
            fx.ovf = X[i][1] or any(X[j][1] for j in keys)
            outs = []
            for WQ, WK, WV, bQ, bK, bV in ql["heads"]:
                qv = [fx.dot(row, X[i][0], b) for row, b in zip(WQ, bQ or [None] * len(WQ))]
                ks = [[fx.dot(row, X[j][0], b) for row, b in zip(WK, bK or [None] * len(WK))] for j in keys]
                vs = [[fx.dot(row, X[j][0], b) for row, b in zip(WV, bV or [None] * len(WV))] for j in keys]
                s = [fx.logit(qv, k) for k in ks]
                w = fx.softmax(s) if layer.attention == "softmax" else [max(0, x) for x in s]
                outs.append([fx.mix(w, [v[c] for v in vs]) for c in range(len(WV))])
            if layer.attention == "softmax":
                heads = [x for o in outs for x in o]
            else:
                heads = [fx.mean([o[c] for o in outs]) for c in range(len(outs[0]))]
            A = [fx.dot(row, heads, b) for row, b in zip(ql["W_O"], ql["b_O"] or [None] * len(ql["W_O"]))]
            x = [fx.sat(a + b) for a, b in zip(X[i][0], A)] if layer.residual else A
            if layer.has_ffn:
                W1, b1, W2, b2 = ql["ffn"]
                h = [max(0, fx.dot(row, x, b)) for row, b in zip(W1, b1)]
                F = [fx.dot(row, h, b) for row, b in zip(W2, b2)]
                x = [fx.sat(a + b) for a, b in zip(x, F)] if layer.residual else F
            new_X.append((x, fx.ovf))
        X = new_X
    WU, bU = q["U"]
    if every and model.bos is not None:  # the BOS position's own output is not read
        X = X[1:]
    ys, flags = [], []
    for x, sat in X:
        fx.ovf = sat or q["other_sat"]
        ys.append([fx.dot(row, x, b) for row, b in zip(WU, bU)])
        flags.append(fx.ovf)
    return (ys if every else ys[-1]), (flags if every else flags[-1]) if per_answer else any(flags)


def ref_recurrent(model, fx: RefFX, tokens: list[int], per_answer: bool = False) -> tuple[list, bool | list[bool]]:
    """A `Recurrent` model, step by step: readout codes per step (or at the last) and overflow (as
    `ref_forward`: with `per_answer`, per answer; a step feeds the answers at it and after it)."""
    Q, other = {}, False
    for name, arr in model.named_arrays().items():
        codes, sat = quantize(fx, arr)
        Q[name] = codes
        other |= sat and name != "R.U"
    every = model.readout.positions == "all"
    h, ys, flags, state = Q["R.h0"], [], [], other
    for i, t in enumerate(tokens):
        _, row_sat = quantize(fx, model.U[t])
        fx.ovf = state or row_sat
        a = [fx.dot(row, h, b) for row, b in zip(Q["R.W"], Q["R.b"])]
        h = [max(0, fx.sat(x + u)) for x, u in zip(a, Q["R.U"][t])]
        state = fx.ovf
        if every or i == len(tokens) - 1:  # the readout is computed only where it is read
            ys.append([fx.dot(row, h, b) for row, b in zip(Q["U.W"], Q["U.b"])])
            flags.append(fx.ovf)
    return (ys if every else ys[-1]), (flags if every else flags[-1]) if per_answer else any(flags)


def ref_answer(model, fx: RefFX, y: list[int]) -> tuple[int, bool]:
    """(answer, tie) from readout codes."""
    if model.readout.kind == "argmax":
        top = max(y)
        return y.index(top), y.count(top) > 1
    theta = Fraction(model.readout.theta)
    return sum(1 << i for i, c in enumerate(y) if fx.val(c) > theta), False


# -- the real path: the unquantized model in exact arithmetic ------------------------------------

def _q(x) -> Fraction:
    return x if isinstance(x, Fraction) else Fraction(x) if isinstance(x, int) else Fraction(float(x))


def _mat(W) -> list:
    return [[_q(w) for w in row] for row in W]


def _vec(b) -> list | None:
    return None if b is None else [_q(x) for x in b]


def _affine(W: list, x: list, b: list | None) -> list:
    return [sum((w * v for w, v in zip(row, x)), Fraction(0)) + (b[i] if b else 0) for i, row in enumerate(W)]


def ref_real_forward(model, tokens: list[int], prec: int = 600) -> list:
    """Readout scores of the unquantized model, one list per position read (the last only, or every
    position after a BOS token): every linear operation in Fractions; softmax with exp from mpmath
    at `prec` bits, so that a softmax model's scores are within about 2^-(prec - 50) of the real
    values and a model without softmax gets them exactly.  Plain loops, one input."""
    if not hasattr(model, "layers"):  # an Elman network
        U, W, b, h = _mat(model.U), _mat(model.W), _vec(model.b), _vec(model.h0)
        states = []
        for t in tokens:
            h = [max(Fraction(0), a + u) for a, u in zip(_affine(W, h, b), U[t])]
            states.append(h)
        read = states if model.readout.positions == "all" else states[-1:]
    else:
        E, P = _mat(model.E), _mat(model.P)
        L = len(tokens)
        X = [[e + (p if model.P_mask[t] else 0) for e, p in zip(E[t], P[i])] for i, t in enumerate(tokens)]
        every = model.readout.positions == "all"
        for li, layer in enumerate(model.layers):
            final = li == len(model.layers) - 1
            qpos = [L - 1] if final and not every else list(range(L))
            heads = [(_mat(h.W_Q), _mat(h.W_K), _mat(h.W_V), _vec(h.b_Q), _vec(h.b_K), _vec(h.b_V))
                     for h in layer.heads]
            WO, bO = _mat(layer.W_O), _vec(layer.b_O)
            new_X = []
            for i in qpos:
                keys = [j for j in range(L) if not layer.causal or j <= i]
                outs = []
                for WQ, WK, WV, bQ, bK, bV in heads:
                    q = _affine(WQ, X[i], bQ)
                    s = [sum((a * c for a, c in zip(q, _affine(WK, X[j], bK))), Fraction(0)) for j in keys]
                    if layer.attention == "softmax":
                        with mpmath.workprec(prec):
                            M = max(s)
                            # below e^-500 a weight is 0 here: 2^-720 off, far below the tests' tolerance
                            e = [mpmath.exp(mpmath.mpf(x.numerator) / x.denominator) if x > -500 else mpmath.mpf(0)
                                 for x in (v - M for v in s)]
                            Z = mpmath.fsum(e)
                            w = [Fraction(*mpmath.libmp.to_rational((x / Z)._mpf_)) for x in e]
                    else:
                        w = [max(Fraction(0), x) for x in s]
                    vs = [_affine(WV, X[j], bV) for j in keys]
                    outs.append([sum((a * v[c] for a, v in zip(w, vs)), Fraction(0)) for c in range(len(WV))])
                if layer.attention == "softmax":
                    mixed = [x for o in outs for x in o]
                else:
                    mixed = [sum(o[c] for o in outs) / len(outs) for c in range(len(outs[0]))]
                x = _affine(WO, mixed, bO)
                x = [a + c for a, c in zip(X[i], x)] if layer.residual else x
                if layer.has_ffn:
                    hidden = [max(Fraction(0), a) for a in _affine(_mat(layer.W1), x, _vec(layer.b1))]
                    F = _affine(_mat(layer.W2), hidden, _vec(layer.b2))
                    x = [a + c for a, c in zip(x, F)] if layer.residual else F
                new_X.append(x)
            X = new_X
        read = X[1:] if every and model.bos is not None else X
    WU, bU = _mat(model.readout.W_U), _vec(model.readout.b_U)
    return [_affine(WU, x, bU) for x in read]


# -- int8 with scales (docs/arithmetic.md, "int8 with scales"): Python ints and Fractions, by hand ----
FP32_SPEC, FP64_SPEC = (8, 23, True), (11, 52, True)


def _away(x: Fraction) -> int:
    """x to the nearest integer, ties away from zero."""
    n = math.floor(abs(x) + Fraction(1, 2))
    return n if x >= 0 else -n


class RefInt8:
    """The int8 recipe one value at a time.  `acts`: tensor name -> (scale, zero point), the
    arithmetic's activation parameters (a choice, like a model file's); everything else (weight
    scales and codes, int32 biases, multipliers, the integer pipeline, softmax) is computed here.
    `seen` records every intermediate as Fractions, `saturated` the tensors clamped."""

    def __init__(self, acts: dict, per_channel: bool):
        self.acts = {k: (Fraction(v.scale), v.zero_point) for k, v in acts.items()}
        self.per_channel = per_channel
        self.f32 = RefFloat(FP32_SPEC, FP32_SPEC, "nearest")
        self.saturated: set = set()

    # weights
    def wscale(self, W, per_row: bool) -> list:
        rows = [[_exact(w) for w in row] for row in W]
        tops = [max([abs(w) for w in row], default=Fraction(0)) for row in rows]
        if not per_row:
            tops = [max(tops, default=Fraction(0))] * len(rows)
        out = []
        for t in tops:
            s = self.f32.round_to(t / 127, FP32_SPEC)
            out.append(s if s != 0 else Fraction(1))
        return out

    def wcodes(self, W, s: list) -> list:
        return [[max(-127, min(127, _away(_exact(w) / si))) for w in row] for row, si in zip(W, s)]

    # gemmlowp / TFLite integer arithmetic
    @staticmethod
    def multiplier(M: Fraction) -> tuple[int, int]:
        """M rounded to float64, then M0 = round(frac 2^31) (ties away), M = M0 2^(shift - 31)."""
        M = RefFloat(FP64_SPEC, FP64_SPEC).round_to(M, FP64_SPEC)
        if M == 0:
            return 0, 0
        e = 0
        while M * Fraction(2) ** -e >= 1:
            e += 1
        while M * Fraction(2) ** -e < Fraction(1, 2):
            e -= 1
        M0 = _away(M * Fraction(2) ** (31 - e))
        if M0 == 2 ** 31:
            M0, e = 2 ** 30, e + 1
        if e < -31:
            return 0, 0
        return M0, e

    @staticmethod
    def high_mul(a: int, b: int) -> int:
        ab = a * b
        nudge = 2 ** 30 if ab >= 0 else 1 - 2 ** 30
        t = ab + nudge
        q = abs(t) // 2 ** 31  # C's division truncates toward zero
        return q if t >= 0 else -q

    @staticmethod
    def div_pot(x: int, e: int) -> int:
        """x / 2^e to nearest, ties away from zero."""
        if e == 0:
            return x
        return _away(Fraction(x, 2 ** e))

    def mbqm(self, x: int, M0: int, shift: int) -> int:
        left, right = max(shift, 0), max(-shift, 0)
        assert -2 ** 31 <= x * 2 ** left < 2 ** 31, "int32 overflow"
        return self.div_pot(self.high_mul(x * 2 ** left, M0), right)

    def out(self, acc: int, M: Fraction, key: str, name: str, count: bool = True) -> int:
        """The centered integer q - z of the output tensor `key`."""
        assert -2 ** 31 <= acc < 2 ** 31, "int32 overflow"
        s, z = self.acts[key]
        y = self.mbqm(acc, *self.multiplier(M)) + z
        if (y < -128 or y > 127) and count:
            self.saturated.add(name)
        return max(-128, min(127, y)) - z

    def add(self, a: int, sa: Fraction, b: int, sb: Fraction, key: str, name: str) -> int:
        twice = 2 * max(sa, sb)
        acc = sum(self.mbqm(c * 2 ** 20, *self.multiplier(si / twice)) for c, si in ((a, sa), (b, sb)))
        return self.out(acc, twice / (2 ** 20 * self.acts[key][0]), key, name)

    def softmax(self, cs: list, key: str) -> tuple[Fraction, list, Fraction, list]:
        """Of the logits' centered integers: the fp32 max, exponentials and Z, and the uint8 codes of
        the attention weights."""
        f = self.f32
        xs = [f.round_to(c * self.acts[key][0], FP32_SPEC) for c in cs]
        M = max(xs)
        e = [f.exp(f.round_to(x - M, FP32_SPEC)) for x in xs]
        Z = f._acc_sum(e)
        return M, e, Z, [min(255, _away(f.round_to(x / Z, FP32_SPEC) * 256)) for x in e]


def ref_int8_forward(model, acts: dict, per_channel: bool, tokens: list[int]) -> tuple[dict, set]:
    """Every intermediate of one input in int8, by the evaluator's trace names (the last layer at the
    positions the readout reads): {name: nested lists of Fractions}, and the tensors that saturated."""
    R = RefInt8(acts, per_channel)
    val = lambda c, key: c * R.acts[key][0]
    seen = {}
    sE, sP = R.wscale(model.E, False), R.wscale(model.P, False)
    qE, qP = R.wcodes(model.E, sE), R.wcodes(model.P, sP)
    L = len(tokens)
    X = [R.add(qE[t][j], sE[0], qP[i][j] if model.P_mask[t] else 0, sP[0], "embed", "embed")
         for i, t in enumerate(tokens) for j in range(model.d)]
    X = [X[i * model.d:(i + 1) * model.d] for i in range(L)]
    xkey = "embed"
    seen["embed"] = [[val(c, "embed") for c in row] for row in X]
    every = model.readout.positions == "all"

    def dense(W, b, x: list, xkey: str, name: str, wname: str) -> list:
        s = R.wscale(W, per_channel)
        q = R.wcodes(W, s)
        sx = R.acts[xkey][0]
        out = []
        for r, row in enumerate(q):
            acc = sum(c * w for c, w in zip(x, row))
            if b is not None:
                acc += _away(_exact(b[r]) / (sx * s[r]))
            out.append(R.out(acc, sx * s[r] / R.acts[name][0], name, name))
        return out

    for li, layer in enumerate(model.layers):
        final = li == len(model.layers) - 1
        qpos = [L - 1] if final and not every else list(range(L))
        hkey = f"L{li}.H*.out"
        outs = {i: [] for i in qpos}
        for hi, h in enumerate(layer.heads):
            n = f"L{li}.H{hi}"
            Q = {i: dense(h.W_Q, h.b_Q, X[i], xkey, f"{n}.q", "W_Q") for i in qpos}
            K = [dense(h.W_K, h.b_K, X[j], xkey, f"{n}.k", "W_K") for j in range(L)]
            V = [dense(h.W_V, h.b_V, X[j], xkey, f"{n}.v", "W_V") for j in range(L)]
            seen[f"{n}.q"] = [[val(c, f"{n}.q") for c in Q[i]] for i in qpos]
            seen[f"{n}.k"] = [[val(c, f"{n}.k") for c in row] for row in K]
            seen[f"{n}.v"] = [[val(c, f"{n}.v") for c in row] for row in V]
            sq, sk, sv = (R.acts[f"{n}.{p}"][0] for p in "qkv")
            sS = R.acts[f"{n}.logits"][0]
            logits, attn = [], []
            for i in qpos:
                keys = [j for j in range(L) if not layer.causal or j <= i]
                S = {j: R.out(sum(a * b for a, b in zip(Q[i], K[j])), sq * sk / sS, f"{n}.logits", f"{n}.logits")
                     for j in keys}
                logits.append([val(S[j], f"{n}.logits") if j in S else None for j in range(L)])
                if layer.attention == "softmax":
                    M, e, Z, codes = R.softmax([S[j] for j in keys], f"{n}.logits")
                    seen.setdefault(f"{n}.max", []).append(M)
                    seen.setdefault(f"{n}.Z", []).append(Z)
                    seen.setdefault(f"{n}.exp", []).append([dict(zip(keys, e)).get(j, 0) for j in range(L)])
                    w, sw = dict(zip(keys, codes)), Fraction(1, 256)
                    attn.append([Fraction(w[j], 256) if j in w else 0 for j in range(L)])
                else:
                    w, sw = {j: max(S[j], 0) for j in keys}, sS
                    attn.append([val(w[j], f"{n}.logits") if j in w else 0 for j in range(L)])
                outs[i].append([R.out(sum(w[j] * V[j][c] for j in keys), sw * sv / R.acts[hkey][0], hkey, f"{n}.out")
                                for c in range(len(h.W_V))])
            seen[f"{n}.logits"], seen[f"{n}.attn"] = logits, attn
            seen[f"{n}.out"] = [[val(c, hkey) for c in outs[i][-1]] for i in qpos]
        new_X = []
        for i in qpos:
            if layer.attention == "softmax":
                heads, key = [c for o in outs[i] for c in o], hkey
            else:
                key, H = f"L{li}.heads", len(outs[i])
                heads = [R.out(sum(o[c] for o in outs[i]), R.acts[hkey][0] / (H * R.acts[key][0]), key, key)
                         for c in range(len(outs[i][0]))]
            seen.setdefault(f"L{li}.heads", []).append([val(c, key) for c in heads])
            A = dense(layer.W_O, layer.b_O, heads, key, f"L{li}.attn_out", "W_O")
            seen.setdefault(f"L{li}.attn_out", []).append([val(c, f"L{li}.attn_out") for c in A])
            x, k = A, f"L{li}.attn_out"
            if layer.residual:
                k = f"L{li}.resid"
                x = [R.add(a, R.acts[xkey][0], b, R.acts[f"L{li}.attn_out"][0], k, k) for a, b in zip(X[i], A)]
                seen.setdefault(k, []).append([val(c, k) for c in x])
            if layer.has_ffn:
                hk = f"L{li}.ffn_hidden"
                hid = [max(c, 0) for c in dense(layer.W1, layer.b1, x, k, hk, "W1")]  # ReLU: at the zero point
                seen.setdefault(hk, []).append([val(c, hk) for c in hid])
                F = dense(layer.W2, layer.b2, hid, hk, f"L{li}.ffn_out", "W2")
                seen.setdefault(f"L{li}.ffn_out", []).append([val(c, f"L{li}.ffn_out") for c in F])
                if layer.residual:
                    x = [R.add(a, R.acts[k][0], b, R.acts[f"L{li}.ffn_out"][0], f"L{li}.out", f"L{li}.out")
                         for a, b in zip(x, F)]
                    k = f"L{li}.out"
                    seen.setdefault(k, []).append([val(c, k) for c in x])
                else:
                    x, k = F, f"L{li}.ffn_out"
            new_X.append(x)
            nk = k
        X, xkey = new_X, nk
    if every and model.bos is not None:
        X = X[1:]
    ro = model.readout
    ys = [[val(c, "readout") for c in dense(ro.W_U, ro.b_U, x, xkey, "readout", "U")] for x in X]
    seen["readout.scores"] = ys if every else ys[-1]
    return seen, R.saturated
