"""int8 quantization with scales, as integer inference kernels do it (TFLite, gemmlowp, ONNX QLinear*).

Normative text: ``docs/arithmetic.md``, "int8 with scales".  Every tensor between two operations is
int8 with a scale s (an fp32 value) and a zero point z: the code q means (q - z) s.  The evaluator
holds the float64 number (q - z) s, which is exact (9 bits times 24), so that margins, traces and
`to_real` read real values; every operation recovers its integers c = q - z = value / s exactly.

* weights: int8 in [-127, 127], zero point 0, scale fp32(max |w| / 127) per output channel (a row of
  W) or per tensor; embedding tables per tensor (a gather's output has one scale);
* biases: int32 at scale s_x s_w (per channel: s_x s_w[c]), round(b / (s_x s_w)) with ties away from 0;
* a linear map, the logits q.k and the value mix: the products summed exactly in int32 (an int32
  overflow cannot happen: `bind` bounds every accumulator from the weights and scales and refuses
  the model before any work when a bound reaches 2^31), then requantized to the output's scale
  by M = s_x s_w / s_y, as gemmlowp does it: M = M0 2^(shift - 31) with M0 an int32 in [2^30, 2^31),
  SaturatingRoundingDoublingHighMul, RoundingDivideByPOT, plus the zero point, saturated to
  [-128, 127];
* the residual add as TFLite's ADD (inputs shifted left by 20, each rescaled to twice the larger
  input scale, the sum requantized to the output scale);
* softmax: the int8 logits dequantized to fp32, softmax in fp32 (`floats.FloatArith`: s - max,
  correctly rounded exp, the sum in index order, e / Z, each rounded to fp32), the weights quantized
  to uint8 with scale 1/256 and zero point 0 (TFLite's convention; a weight of 1 saturates to 255/256);
* ReLU clamps at the zero point; the head mean of ReLU attention is the sum of the heads' integers
  requantized by s_h / (H s_out).

Activation scales and zero points come from the model file (its quantization member) or from a
calibration: min/max of the float64 model over the task's inputs, widened to include 0.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import ClassVar, Optional

import numpy as np

from .arithmetic import Ctx, Float64Values, Recorder
from .floats import FloatArith, div_odd, float_format, fraction_odd
from .support.errors import InputError

FP32 = float_format("fp32")
Q_LO, Q_HI = -128, 127  # an activation's codes
W_MAX = 127  # a weight's codes are symmetric: -127 .. 127
INT32_MAX = (1 << 31) - 1
ADD_LEFT_SHIFT = 20  # TFLite's ADD for int8
ATTN_SCALE = 1.0 / 256  # softmax's output: uint8, scale 1/256, zero point 0
INT8_HELP = "int8 (weights per output channel) or int8:tensor (one weight scale per tensor)"


# -- integer primitives of gemmlowp / TFLite -------------------------------------------------------
def round_away(x: np.ndarray) -> np.ndarray:
    """x (exact, or rounded to odd at 53 bits) to the nearest integer, ties away from zero (std::round,
    TFLite's TfLiteRound), as int64."""
    a = np.abs(np.asarray(x, dtype=np.float64))
    f = np.floor(a)
    return (np.sign(x) * (f + (a - f >= 0.5))).astype(np.int64)


def quantize_multiplier(M: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """TFLite's QuantizeMultiplier: M (float64, >= 0) = M0 2^(shift - 31), M0 = round(frac 2^31) in
    [2^30, 2^31] (2^31 renormalised to 2^30 with shift + 1); M = 0, or below 2^-32: M0 = 0."""
    M = np.asarray(M, dtype=np.float64)
    frac, shift = np.frexp(M)
    M0 = round_away(np.ldexp(frac, 31))
    top = M0 == 1 << 31
    M0, shift = np.where(top, 1 << 30, M0), np.where(top, shift + 1, shift)
    tiny = (M == 0) | (shift < -31)
    return np.where(tiny, 0, M0).astype(np.int64), np.where(tiny, 0, shift).astype(np.int64)


def srdhm(a: np.ndarray, M0: np.ndarray) -> np.ndarray:
    """gemmlowp's SaturatingRoundingDoublingHighMul(a, M0): (a M0 + nudge) / 2^31 truncated toward 0,
    nudge 2^30 (1 - 2^30 for a negative product).  M0 >= 0, so its saturating case never occurs."""
    ab = a * M0
    t = ab + np.where(ab >= 0, 1 << 30, 1 - (1 << 30))
    return np.where(t >= 0, t >> 31, -((-t) >> 31))


def rounding_divide_by_pot(x: np.ndarray, e: np.ndarray) -> np.ndarray:
    """gemmlowp's RoundingDivideByPOT(x, e): x / 2^e rounded to nearest, ties away from zero."""
    mask = (np.int64(1) << e) - 1
    rem = x & mask
    threshold = (mask >> 1) + (x < 0)
    return (x >> e) + (rem > threshold)


def multiply_by_quantized_multiplier(x: np.ndarray, M0: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """TFLite's MultiplyByQuantizedMultiplier: x M0 2^(shift - 31), the left part of the shift before
    the high multiply, the right part after it."""
    left, right = np.maximum(shift, 0), np.maximum(-shift, 0)
    return rounding_divide_by_pot(srdhm(x << left, M0), right)


# -- the quantization parameters -------------------------------------------------------------------
@dataclass(frozen=True)
class TensorQuant:
    """An int8 tensor's quantization: the code q means (q - zero_point) scale."""

    scale: float  # an fp32 value, > 0
    zero_point: int  # in [-128, 127]


def choose_params(lo: float, hi: float) -> TensorQuant:
    """Asymmetric int8 parameters for the range [lo, hi], widened to include 0 (so that 0 is exact):
    s = fp32((hi - lo) / 255), z = round(-128 - lo / s) (float64, ties away), clamped to the codes.
    A tensor that is 0 on every calibration input gets scale 1 and zero point 0."""
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    if hi == lo:
        return TensorQuant(1.0, 0)
    s = float(FP32.round(np.array([(hi - lo) / 255]), "nearest")[0][0])
    z = int(np.clip(round_away(np.array([Q_LO - lo / s]))[0], Q_LO, Q_HI))
    return TensorQuant(s, z)


def weight_scales(w: np.ndarray, per_channel: bool) -> np.ndarray:
    """fp32(max |w| / 127) per row (per_channel) or one for the whole array, as an array with one
    entry per row; a row (or array) of zeros gets scale 1."""
    w = np.asarray(w)
    if w.dtype == object:
        m = np.array([max((abs(Fraction(x)) for x in row), default=Fraction(0)) for row in w], dtype=object)
        m = m if per_channel else np.full(len(m), max(m, default=Fraction(0)), dtype=object)
        odd = np.array([fraction_odd(x / W_MAX) for x in m], dtype=np.float64)
    else:
        m = np.abs(w).max(axis=1, initial=0.0) if per_channel else np.full(w.shape[0], np.abs(w).max(initial=0.0))
        odd = div_odd(m.astype(np.float64), np.full(m.shape, float(W_MAX)))
    s = FP32.round(odd, "nearest")[0]
    return np.where(s == 0, 1.0, s)


def weight_codes(w: np.ndarray, s: np.ndarray) -> np.ndarray:
    """round(w / s) with ties away from zero, clamped to [-127, 127] (s per row), exactly."""
    w = np.asarray(w)
    if w.dtype == object:
        q = np.array([[_round_away_fraction(Fraction(x) / Fraction(float(si))) for x in row]
                      for row, si in zip(w, s)], dtype=np.int64).reshape(w.shape)
    else:
        q = round_away(div_odd(w.astype(np.float64), np.broadcast_to(s[:, None], w.shape)))
    return np.clip(q, -W_MAX, W_MAX)


def _round_away_fraction(x: Fraction) -> int:
    n = math.floor(abs(x) + Fraction(1, 2))
    return n if x >= 0 else -n


def bias_codes(b: np.ndarray, s: np.ndarray) -> np.ndarray:
    """An int32 bias at scale s (per entry): round(b / s), ties away from zero, exactly."""
    return np.array([_round_away_fraction(Fraction(x) / Fraction(float(si))) for x, si in zip(b, s)], dtype=object)


# -- the graph: which tensor each operation reads ----------------------------------------------------
@dataclass(frozen=True)
class Op:
    """One operation of the evaluator, by the name it is called with: the tensors it reads and the
    tensor it writes (names of `Int8Arith.acts`, or of weights)."""

    inputs: tuple[str, ...]
    output: str
    weight: Optional[str] = None  # a linear map's weight array
    bias: Optional[str] = None


def graph(model) -> dict[str, Op]:
    """Every operation the evaluator calls on the int8 arithmetic, by name.  The heads of a layer
    write one tensor ``L{l}.H*.out`` (their concatenation has one scale, as TFLite's CONCATENATION
    requires)."""
    ops = {"embed": Op(("E", "P"), "embed")}
    x = "embed"
    for li, layer in enumerate(model.layers):
        heads = f"L{li}.H*.out"
        for hi in range(len(layer.heads)):
            h = f"L{li}.H{hi}"
            for part, W in (("q", "W_Q"), ("k", "W_K"), ("v", "W_V")):
                ops[f"{h}.{part}"] = Op((x,), f"{h}.{part}", f"{h}.{W}",
                                        f"{h}.b_{W[-1]}" if layer.has_biases else None)
            ops[f"{h}.logits"] = Op((f"{h}.q", f"{h}.k"), f"{h}.logits")
            weights = "softmax" if layer.attention == "softmax" else f"{h}.logits"
            ops[f"{h}.out"] = Op((weights, f"{h}.v"), heads)
        if layer.attention != "softmax":
            ops[f"L{li}.heads"] = Op((heads,), f"L{li}.heads")
            heads = f"L{li}.heads"
        ops[f"L{li}.attn_out"] = Op((heads,), f"L{li}.attn_out", f"L{li}.W_O",
                                    f"L{li}.b_O" if layer.has_biases else None)
        y = f"L{li}.attn_out"
        if layer.residual:
            ops[f"L{li}.resid"] = Op((x, y), f"L{li}.resid")
            y = f"L{li}.resid"
        if layer.has_ffn:
            ops[f"L{li}.ffn_hidden"] = Op((y,), f"L{li}.ffn_hidden", f"L{li}.W1", f"L{li}.b1")
            ops[f"L{li}.ffn_out"] = Op((f"L{li}.ffn_hidden",), f"L{li}.ffn_out", f"L{li}.W2", f"L{li}.b2")
            if layer.residual:
                ops[f"L{li}.out"] = Op((y, f"L{li}.ffn_out"), f"L{li}.out")
                y = f"L{li}.out"
            else:
                y = f"L{li}.ffn_out"
        x = y
    ops["readout"] = Op((x,), "readout", "U.W", "U.b")
    return ops


def activation_names(model) -> list[str]:
    """The tensors that carry an activation scale and zero point, in the order of the computation."""
    return list(dict.fromkeys(op.output for op in graph(model).values()))


def check_params(acts: dict, model, where: str) -> dict[str, TensorQuant]:
    """Activation parameters (a TensorQuant or a pair (scale, zero point) by tensor), checked: every
    tensor of the model named, each scale a positive finite fp32 value, each zero point an integer
    in [-128, 127]."""
    names = activation_names(model)
    missing = [n for n in names if n not in acts]
    extra = [n for n in acts if n not in names]
    if missing or extra:
        raise InputError(f"{where}: " + (f"no scale for tensor {missing[0]!r}" if missing else
                                         f"tensor {extra[0]!r} is not one of the model's")
                         + f" (the model's tensors: {', '.join(names)})")
    out = {}
    for n in names:
        s, z = (acts[n].scale, acts[n].zero_point) if isinstance(acts[n], TensorQuant) else acts[n]
        if not (isinstance(s, (int, float)) and math.isfinite(s) and s > 0):
            raise InputError(f"{where}: tensor {n!r}: scale {s!r} is not a positive finite number")
        if float(np.float32(s)) != s:
            raise InputError(f"{where}: tensor {n!r}: scale {s!r} is not an fp32 value (kernels store scales in fp32)")
        if isinstance(z, bool) or not isinstance(z, (int, np.integer)) or not Q_LO <= z <= Q_HI:
            raise InputError(f"{where}: tensor {n!r}: zero point {z!r} is not an integer in [-128, 127]")
        out[n] = TensorQuant(float(s), int(z))
    return out


# -- the arithmetic --------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Lin:
    """A linear map (or dot product) bound to its scales: inputs' scales, requantization, int32 bias."""

    M0: np.ndarray  # per output channel
    shift: np.ndarray
    bias: Optional[np.ndarray]  # int32, per output channel
    out: TensorQuant


@dataclass(frozen=True)
class Int8Arith(Float64Values):
    """int8 with scales (module docstring; docs/arithmetic.md, "int8 with scales").  Unbound (no
    `acts`) as `--format int8` names it; `bind` sets its scales for one model."""

    rows_apart: ClassVar[bool] = False  # a map's requantization is per op (`lins`), for all its rows
    per_channel: bool = True
    overflow: str = "saturate"
    acts: dict = field(default_factory=dict, compare=False)  # tensor name -> TensorQuant; empty: unbound
    source: str = ""  # where the activation parameters come from
    ops: dict = field(default_factory=dict, compare=False, repr=False)
    wscale: dict = field(default_factory=dict, compare=False, repr=False)  # weight name -> scale per row
    lins: dict = field(default_factory=dict, compare=False, repr=False)  # op name -> _Lin

    def __post_init__(self) -> None:
        if self.overflow not in ("saturate", "error"):
            raise InputError(f"overflow must be saturate or error, got {self.overflow!r}")

    # -- binding to a model ----------------------------------------------------------------------
    def bind(self, model, acts: Optional[dict] = None, source: str = "given") -> "Int8Arith":
        """This arithmetic with the scales of `model` (a transformer): weight scales from its weights,
        activation parameters from `acts` (checked; `source` says where they come from, e.g.
        `calibration.calibrate`), else the model's own (a model file's quantization member).  Refuses,
        before any work, a model whose int32 accumulators could overflow."""
        if getattr(model, "layers", None) is None:
            raise InputError("int8 decides transformer models; a recurrent model has no int8 recipe here")
        if acts is not None:
            acts = check_params(acts, model, "activation scales")
        elif model.quantization is not None:
            acts = check_params(model.quantization, model, "the model's quantization")
            source = "from the model file's quantization member"
        else:
            raise InputError("int8 needs activation scales: a model file's quantization member, or a task to "
                             "calibrate on")
        arrays = model.named_arrays()
        ops = graph(model)
        weights = ["E", "P"] + [op.weight for op in ops.values() if op.weight]  # the tables: one scale each
        wscale = {n: weight_scales(arrays[n], self.per_channel and n not in ("E", "P")) for n in weights}
        bound = Int8Arith(self.per_channel, self.overflow, acts, source, ops, wscale, {})
        for name, op in ops.items():
            lin = bound._bind_op(name, op, arrays, model)
            if lin is not None:
                bound.lins[name] = lin
        return bound

    def _scale_in(self, key: str) -> TensorQuant:
        return TensorQuant(ATTN_SCALE, 0) if key == "softmax" else self.acts[key]

    def _bind_op(self, name: str, op: Op, arrays: dict, model) -> Optional[_Lin]:
        """The requantization of a linear map, dot product, value mix or head mean, and the int32
        bound of its accumulator (refused at 2^31)."""
        out = self.acts[op.output]
        if op.weight is not None:
            s_x, W = self.acts[op.inputs[0]].scale, arrays[op.weight]
            s_w = self.wscale[op.weight]
            q_w = weight_codes(W, s_w)
            terms = np.abs(q_w).sum(axis=1) * 255
            bias = None
            if op.bias is not None:
                bias = bias_codes(np.asarray(arrays[op.bias]).reshape(-1), s_x * s_w)
                terms = terms + np.abs(bias).astype(np.float64)
            M = s_x * s_w / out.scale
        elif name.endswith(".logits"):
            a, b = (self.acts[k] for k in op.inputs)
            m = arrays[name.replace(".logits", ".W_Q")].shape[0]
            terms, M, bias = np.array([m * 255.0 * 255.0]), np.array([a.scale * b.scale / out.scale]), None
        elif op.output.endswith(".H*.out"):
            w, v = (self._scale_in(k) for k in op.inputs)
            L = model.max_len
            terms, M, bias = np.array([L * 255.0 * 255.0]), np.array([w.scale * v.scale / out.scale]), None
        elif op.output.endswith(".heads"):
            H = len(model.layers[int(name[1:].split(".")[0])].heads)
            terms, M, bias = np.array([H * 255.0]), np.array([self.acts[op.inputs[0]].scale / (H * out.scale)]), None
        else:
            return None  # the adds: TFLite's ADD (`add`)
        M0, shift = quantize_multiplier(M)
        peak = float(np.max(terms * np.exp2(np.maximum(shift, 0)), initial=0.0))
        if peak >= 2.0 ** 31:
            raise InputError(f"int8: the int32 accumulator of {name} could overflow (|sum| up to {peak:.4g} >= 2^31 "
                             f"after its scales); the model is refused before any work")
        return _Lin(M0, shift, None if bias is None else bias.astype(np.int64), out)

    def _unbound(self) -> None:
        if not self.acts:
            raise InputError("int8 needs its scales: build the problem (verifier.build_problem) to set them")

    # -- the format, as the verdicts and the engines read it ---------------------------------
    @property
    def accumulate(self) -> str:
        return "int32"

    @property
    def bits(self) -> int:
        return 8

    def kc(self, N: int) -> Optional[float]:
        return None

    def scales_sha256(self) -> str:
        """A fingerprint of the activation parameters (the verdict cache keys runs by it)."""
        data = {k: [v.scale, v.zero_point] for k, v in self.acts.items()}
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()

    def describe(self) -> dict:
        return {"format": "int8", "weights": "per-channel" if self.per_channel else "per-tensor",
                "overflow": self.overflow, "accumulate": "int32", "softmax": "fp32", "scales": self.source,
                "scales_sha256": self.scales_sha256(), "bits": 8, "rounding": "nearest (ties away from zero)",
                "step": min((v.scale for v in self.acts.values()), default=1.0)}

    def label(self) -> str:
        return int8_text(self.describe())

    def context(self, batch_shape: tuple, locate: bool = False) -> Ctx:
        return Ctx(batch_shape, self.overflow == "error", locate)

    def check_model(self, model) -> None:
        """Bound, and to this model's tensors."""
        self._unbound()
        if getattr(model, "layers", None) is None or set(activation_names(model)) != set(self.acts):
            raise InputError("int8: these scales were set for another model (bind the format to this one)")

    # -- parameters ----------------------------------------------------------------------------
    def quantize(self, w: np.ndarray, name: str = "") -> tuple[np.ndarray, np.ndarray]:
        """A weight array as int8 values q s (per row); a bias as its int32 value at s_x s_w (the
        operation that reads it uses the integers `bind` computed)."""
        self._unbound()
        if name in self.wscale:
            s = self.wscale[name]
            q = weight_codes(w, s)
            return q * s[:, None], np.zeros(q.shape, dtype=bool)
        op = next((o for o in self.ops.values() if o.bias == name), None)
        if op is None:
            raise InputError(f"int8: parameter {name!r} has no quantization rule")
        s = self.acts[op.inputs[0]].scale * self.wscale[op.weight]
        b = self.lins[[k for k, o in self.ops.items() if o is op][0]].bias
        return np.asarray(b, dtype=np.float64) * s, np.zeros(len(s), dtype=bool)

    # -- operations ------------------------------------------------------------------------------
    def _requantize(self, acc: np.ndarray, lin: _Lin, ctx: Ctx, name: str,
                    present: Optional[np.ndarray] = None) -> np.ndarray:
        """int32 accumulators (per output channel on the last axis) to the output tensor's values."""
        y = multiply_by_quantized_multiplier(acc, lin.M0, lin.shift) + lin.out.zero_point
        if ctx.watch:
            sat = (y < Q_LO) | (y > Q_HI)
            ctx.note(name, sat if present is None else sat & present)
        return (np.clip(y, Q_LO, Q_HI) - lin.out.zero_point) * lin.out.scale

    def _ints(self, x: np.ndarray, key: str) -> np.ndarray:
        """The integers q - z of a tensor's values (exact: a value is (q - z) s)."""
        return x / self._scale_in(key).scale

    def _dense(self, Wq: np.ndarray, cx: np.ndarray, lin: _Lin, ctx: Ctx, name: str, gathered: bool) -> np.ndarray:
        # every partial sum is an integer below 2^31 (`_bind_op`): float64 sums them exactly
        acc = (cx * Wq).sum(-1) if gathered else cx @ Wq.T
        acc = np.rint(acc).astype(np.int64)
        if lin.bias is not None:
            acc = acc + lin.bias
        return self._requantize(acc, lin, ctx, name)

    def lin(self, W, x, b, ctx: Ctx, name: str) -> np.ndarray:
        op, lin = self.ops[name], self.lins[name]
        Wq = W / self.wscale[op.weight][:, None]
        return self._dense(Wq, self._ints(x, op.inputs[0]), lin, ctx, name, False)

    def lin_gathered(self, Wg, xg, b, ctx: Ctx, name: str) -> np.ndarray:
        op, lin = self.ops[name], self.lins[name]
        Wq = Wg / self.wscale[op.weight][:, None]
        return self._dense(Wq, self._ints(xg, op.inputs[0]), lin, ctx, name, True)

    def scores(self, q, k, ctx: Ctx, name: str, mask=None) -> np.ndarray:
        op = self.ops[name]
        acc = np.rint(self._ints(q, op.inputs[0]) @ np.swapaxes(self._ints(k, op.inputs[1]), -1, -2)).astype(np.int64)
        return self._requantize(acc, self.lins[name], ctx, name, mask)

    def mix(self, w, v, ctx: Ctx, name: str) -> np.ndarray:
        op = self.ops[name]
        acc = np.rint(self._ints(w, op.inputs[0]) @ self._ints(v, op.inputs[1])).astype(np.int64)
        return self._requantize(acc, self.lins[name], ctx, name)

    def mean_heads(self, outs, ctx: Ctx, name: str) -> np.ndarray:
        op = self.ops[name]
        acc = np.rint(self._ints(outs, op.inputs[0]).sum(-2)).astype(np.int64)
        return self._requantize(acc, self.lins[name], ctx, name)

    def add(self, x, y, ctx: Ctx, name: str) -> np.ndarray:
        """TFLite's int8 ADD: each input's integers shifted left by 20 and rescaled by s_i / (2 max s),
        the sum rescaled by 2 max s / (2^20 s_out), plus the zero point, saturated."""
        op = self.ops[name]
        out = self.acts[op.output]
        s = [self.wscale[k][0] if k in ("E", "P") else self.acts[k].scale for k in op.inputs]
        twice = 2.0 * max(s)
        acc = np.zeros((), dtype=np.int64)
        for v, si in zip((x, y), s):
            M0, shift = quantize_multiplier(np.array(si / twice))
            c = np.rint(np.asarray(v, dtype=np.float64) / si).astype(np.int64)
            acc = acc + multiply_by_quantized_multiplier(c << ADD_LEFT_SHIFT, M0, shift)
        M0, shift = quantize_multiplier(np.array(twice / (2.0 ** ADD_LEFT_SHIFT * out.scale)))
        return self._requantize(acc, _Lin(M0, shift, None, out), ctx, name)

    def softmax(self, s: np.ndarray, mask: Optional[np.ndarray], ctx: Ctx, name: str,
                rec: Recorder = None) -> np.ndarray:
        """The logits dequantized to fp32, softmax in fp32 (`FloatArith`), each weight quantized to
        uint8 at scale 1/256: round(256 a) with ties away from zero, at most 255."""
        a = _FP32_ARITH.softmax(FP32.round(s, "nearest")[0], mask, ctx, name, rec)
        return np.minimum(round_away(a * 256), 255) * ATTN_SCALE

    def above(self, y: np.ndarray, theta) -> np.ndarray:
        return _FP32_ARITH.above(y, theta)


_FP32_ARITH = FloatArith(FP32, FP32, "nearest", "error")


def int8_text(a: dict) -> str:
    """The arithmetic line of int8: every rounding point, the scale source and the requantization rule."""
    w = ("per output channel (embedding tables per tensor)" if a["weights"] == "per-channel" else "per tensor")
    over = ("overflow=saturate (int8 results clamped to [-128, 127], as kernels do)" if a["overflow"] == "saturate"
            else "overflow=error (a result clamped to [-128, 127] fails the answers it feeds)")
    return (f"int8 with scales (TFLite/gemmlowp recipe): weights int8 [-127, 127] zero point 0, scale "
            f"fp32(max|w|/127) {w}; activations int8 [-128, 127], one fp32 scale and zero point per tensor, "
            f"{a['scales']} (scales sha256 {a['scales_sha256'][:12]}); biases int32 at s_x s_w, round(b / (s_x s_w)) "
            f"ties away; products summed exactly in int32 (no overflow: bounded before work); requantized to the "
            f"output scale by M = s_x s_w / s_y = M0 2^(shift-31), M0 int32 in [2^30, 2^31): "
            f"SaturatingRoundingDoublingHighMul, RoundingDivideByPOT (ties away), + zero point, at: every linear "
            f"output, logits q.k, value mix, head mean (M = s/(H s_out)); residual add as TFLite's ADD (left shift "
            f"20, inputs rescaled to 2 max s, sum requantized); heads share one output scale; softmax: int8 logits "
            f"dequantized to fp32, s - max, exp (correctly rounded), each partial sum of Z, e / Z rounded to fp32 "
            f"(nearest), weights to uint8 scale 1/256 zero point 0 (round(256 a) ties away, 1 -> 255/256); ReLU "
            f"clamps at the zero point; {over}")
