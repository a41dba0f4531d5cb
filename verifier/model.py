"""The transformer model: explicit weights, as dataclasses (the ``.npz`` file format is `modelfile`).

Conventions follow Bhattamishra et al. 2024 (arXiv:2406.09347), Section 2, with column vectors:
``Q(x) = W_Q x``, ``K(x) = W_K x``, ``V(x) = W_V x``; multi-head output ``W_O [Att_1; ...; Att_H]``.
A layer is ``x <- x + W_O heads(x); x <- x + FFN(x)`` with residual, or Bhattamishra et al.'s
formal ``psi(M-Att(X))`` without it.  ReLU attention is Chen and Zou 2024's variant (arXiv:2404.01601,
Section 3.1, Eq. 1-3): scores ``ReLU(<q, k>)``, no normalisation, heads averaged with 1/m before
``W_O``.

The same dataclasses hold real weights and quantized ones (int64 codes): quantizing is
`Model.map_arrays`.  A real weight array is float64, or an object array of `fractions.Fraction`
(`is_exact`) where a construction's recipe gives exact rationals that float64 would round (1/3,
1/N): the arithmetic then rounds the exact value.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Callable, Optional

import numpy as np

from .arithmetic import ATTENTION_KINDS
from .support.errors import InputError
from .support.schema import show

ATTENTIONS = ATTENTION_KINDS
READOUTS = ("argmax", "threshold")
READ_POSITIONS = ("last", "all")
MAX_THRESHOLD_BITS = 62  # a threshold readout's answer is a bit pattern in an int64


@dataclass
class Head:
    W_Q: np.ndarray  # (m, d)
    W_K: np.ndarray  # (m, d)
    W_V: np.ndarray  # (m_v, d)
    b_Q: Optional[np.ndarray] = None  # (m,)   q = W_Q x + b_Q
    b_K: Optional[np.ndarray] = None  # (m,)
    b_V: Optional[np.ndarray] = None  # (m_v,)

    MAPS = (("W_Q", "b_Q"), ("W_K", "b_K"), ("W_V", "b_V"))

    @property
    def has_biases(self) -> bool:
        return self.b_Q is not None


@dataclass
class Layer:
    heads: list[Head]
    W_O: np.ndarray  # (d, H*m_v) for softmax heads (concatenated); (d, m_v) for relu (averaged)
    attention: str = "softmax"
    residual: bool = True
    causal: bool = False
    W1: Optional[np.ndarray] = None  # (h, d)   FFN: W2 ReLU(W1 x + b1) + b2
    b1: Optional[np.ndarray] = None  # (h,)
    W2: Optional[np.ndarray] = None  # (d, h)
    b2: Optional[np.ndarray] = None  # (d,)
    b_O: Optional[np.ndarray] = None  # (d,) with attention biases: W_O heads + b_O

    @property
    def has_ffn(self) -> bool:
        return self.W1 is not None

    @property
    def has_biases(self) -> bool:
        return self.b_O is not None


@dataclass
class Readout:
    """``y = W_U x + b_U``; argmax (strict, a tie fails) or threshold (bit i is 1 iff y_i > theta,
    strict).  Read at the last position, or at every position (``positions = "all"``: a sequence
    output, as induction heads and per-prefix Dyck membership need)."""

    W_U: np.ndarray  # (C, d)
    b_U: np.ndarray  # (C,)
    kind: str = "argmax"
    theta: float | Fraction = 0.0  # a Fraction where the exact threshold is not a float64 (1/N)
    positions: str = "last"
    rows: Optional[list[str]] = None  # a name per row: the task's answers are read by name


@dataclass
class Model:
    E: np.ndarray  # (V, d) token embeddings
    P: np.ndarray  # (L_max, d) position embeddings, position 0 first
    P_mask: np.ndarray  # (V,) bool: token v receives P[pos] iff P_mask[v]
    layers: list[Layer]
    readout: Readout
    vocab: list[str]
    info: dict = field(default_factory=dict)  # construction name and parameters
    source: Optional[str] = None  # the file it was read from
    bos: Optional[str] = None  # a token fixed at position 0; the task's input follows it
    residual_rows: Optional[list[str]] = None  # a name per residual row ("m", "B3[2]"), from a Layout
    quantization: Optional[dict] = None  # int8 activation parameters by tensor name (`int8.TensorQuant`)

    @property
    def d(self) -> int:
        return self.E.shape[1]

    @property
    def max_len(self) -> int:
        return self.P.shape[0]

    def named_arrays(self) -> dict[str, np.ndarray]:
        """Every weight array under its file name (docs/model-format.md)."""
        out = {"E": self.E, "P": self.P}
        for li, layer in enumerate(self.layers):
            for hi, head in enumerate(layer.heads):
                for key in head_arrays(layer.has_biases):
                    out[f"L{li}.H{hi}.{key}"] = getattr(head, key)
            out[f"L{li}.W_O"] = layer.W_O
            if layer.has_biases:
                out[f"L{li}.b_O"] = layer.b_O
            if layer.has_ffn:
                for key in ("W1", "b1", "W2", "b2"):
                    out[f"L{li}.{key}"] = getattr(layer, key)
        out["U.W"] = self.readout.W_U
        out["U.b"] = self.readout.b_U
        return out

    def map_arrays(self, fn: Callable[[str, np.ndarray], np.ndarray]) -> "Model":
        """A copy with fn(name, array) applied to every weight array (not to P_mask)."""
        layers = []
        for li, layer in enumerate(self.layers):
            heads = [Head(**{k: fn(f"L{li}.H{hi}.{k}", getattr(h, k)) for k in head_arrays(layer.has_biases)})
                     for hi, h in enumerate(layer.heads)]
            ffn = {k: fn(f"L{li}.{k}", getattr(layer, k)) for k in ("W1", "b1", "W2", "b2")} if layer.has_ffn else {}
            if layer.has_biases:
                ffn["b_O"] = fn(f"L{li}.b_O", layer.b_O)
            layers.append(replace(layer, heads=heads, W_O=fn(f"L{li}.W_O", layer.W_O), **ffn))
        readout = replace(self.readout, W_U=fn("U.W", self.readout.W_U), b_U=fn("U.b", self.readout.b_U))
        return replace(self, E=fn("E", self.E), P=fn("P", self.P), layers=layers, readout=readout)

    def n_params(self) -> int:
        return int(sum(a.size for a in self.named_arrays().values()))

    def widest_sum(self) -> int:
        """The largest number of products in one sum: the bound int64 capacity is checked on."""
        sizes = [self.d, self.max_len, self.readout.W_U.shape[1]]
        for layer in self.layers:
            sizes += [h.W_Q.shape[0] for h in layer.heads]
            sizes += [layer.W_O.shape[1], len(layer.heads)]
            if layer.has_ffn:
                sizes.append(layer.W2.shape[1])
        return max(sizes)

    def validate(self) -> None:
        """Check every shape and option; raise InputError naming the array and expected shape."""
        V, d = _shape2(self.E, "E", ("V", "d"))
        _expect(self.P, "P", (None, d), f"(L_max, {d})")
        if self.P.shape[0] < 1:
            raise InputError("array 'P' has no rows: expected shape (L_max, d) with L_max >= 1")
        _expect(self.P_mask, "P_mask", (V,), f"({V},)")
        if len(self.vocab) != V:
            raise InputError(f"metadata 'vocab' has {len(self.vocab)} names, expected {V} (rows of E)")
        if not all(isinstance(v, str) for v in self.vocab):
            raise InputError("metadata 'vocab' must be a list of strings")
        if not self.layers:
            raise InputError("the model has no layers")
        for li, layer in enumerate(self.layers):
            if layer.attention not in ATTENTIONS:
                raise InputError(f"layer {li}: attention must be one of {ATTENTIONS}, got {layer.attention!r}")
            for flag in ("residual", "causal"):
                if not isinstance(getattr(layer, flag), (bool, np.bool_)):
                    raise InputError(f"layer {li}: {flag} must be a boolean, got {show(getattr(layer, flag))}")
            if not layer.heads:
                raise InputError(f"layer {li} has no heads")
            m = _shape2(layer.heads[0].W_Q, f"L{li}.H0.W_Q", ("m", str(d)))[0]
            mv = _shape2(layer.heads[0].W_V, f"L{li}.H0.W_V", ("m_v", str(d)))[0]
            for hi, head in enumerate(layer.heads):
                for (key, bias), rows in zip(Head.MAPS, (m, m, mv)):
                    _expect(getattr(head, key), f"L{li}.H{hi}.{key}", (rows, d), f"({rows}, {d})")
                    if layer.has_biases:
                        _expect(getattr(head, bias), f"L{li}.H{hi}.{bias}", (rows,), f"({rows},)")
                if head.has_biases != layer.has_biases:
                    raise InputError(f"layer {li}: head {hi} {'has' if head.has_biases else 'lacks'} attention "
                                     f"biases, layer {li}'s b_O {'does not' if head.has_biases else 'does'}")
            cols = mv if layer.attention == "relu" else mv * len(layer.heads)
            _expect(layer.W_O, f"L{li}.W_O", (d, cols), f"({d}, {cols})")
            if layer.has_biases:
                _expect(layer.b_O, f"L{li}.b_O", (d,), f"({d},)")
            if layer.has_ffn:
                h = _shape2(layer.W1, f"L{li}.W1", ("h", str(d)))[0]
                for key, shape in (("b1", (h,)), ("W2", (d, h)), ("b2", (d,))):
                    arr = getattr(layer, key)
                    if arr is None:
                        raise InputError(f"array 'L{li}.{key}' is missing: expected shape {_fmt(shape)}")
                    _expect(arr, f"L{li}.{key}", shape, _fmt(shape))
        if self.bos is not None and self.bos not in self.vocab:
            raise InputError(f"metadata 'bos' names {self.bos!r}, which is not in the vocabulary")
        rows = self.residual_rows
        if rows is not None and (len(rows) != d or len(set(rows)) != d
                                 or not all(isinstance(r, str) and r for r in rows)):
            raise InputError(f"metadata 'residual_rows' must be {d} distinct names, one per residual row; got "
                             f"{len(rows)} ({len(set(rows))} distinct)")
        _check_readout(self.readout, d)
        _check_finite(self)


def head_arrays(biases: bool) -> tuple[str, ...]:
    """The array names of each head of a layer: the maps, and their biases when it has them."""
    return tuple(k for pair in Head.MAPS for k in (pair if biases else pair[:1]))


@dataclass
class Recurrent:
    """An Elman network read at every step (or the last): h_t = ReLU(W h_{t-1} + b + U[x_t]),
    from h_{-1} = h0, with the readout ``y_t = W_U h_t + b_U``.  ``U[v]`` is the input map's column
    for the one-hot token v.  It takes inputs of any length (``max_len`` is None)."""

    U: np.ndarray  # (V, h)
    W: np.ndarray  # (h, h)
    b: np.ndarray  # (h,)
    h0: np.ndarray  # (h,)
    readout: Readout
    vocab: list[str]
    info: dict = field(default_factory=dict)
    source: Optional[str] = None  # the file it was read from
    max_len = None
    bos = None
    residual_rows = None

    @property
    def d(self) -> int:
        return self.W.shape[0]

    def named_arrays(self) -> dict[str, np.ndarray]:
        return {"R.U": self.U, "R.W": self.W, "R.b": self.b, "R.h0": self.h0,
                "U.W": self.readout.W_U, "U.b": self.readout.b_U}

    def map_arrays(self, fn: Callable[[str, np.ndarray], np.ndarray]) -> "Recurrent":
        a = {name: fn(name, arr) for name, arr in self.named_arrays().items()}
        return replace(self, U=a["R.U"], W=a["R.W"], b=a["R.b"], h0=a["R.h0"],
                       readout=replace(self.readout, W_U=a["U.W"], b_U=a["U.b"]))

    def n_params(self) -> int:
        return int(sum(a.size for a in self.named_arrays().values()))

    def widest_sum(self) -> int:
        return max(self.d, self.readout.W_U.shape[1]) + 2

    def validate(self) -> None:
        V, h = _shape2(self.U, "R.U", ("V", "h"))
        if h < 1:
            raise InputError("array 'R.U' has no columns: the hidden state needs h >= 1 units")
        if len(self.vocab) != V:
            raise InputError(f"metadata 'vocab' has {len(self.vocab)} names, expected {V} (rows of R.U)")
        for name, shape in (("R.W", (h, h)), ("R.b", (h,)), ("R.h0", (h,))):
            _expect(self.named_arrays()[name], name, shape, _fmt(shape))
        _check_readout(self.readout, h)
        _check_finite(self)


def weights_sha256(model: Model | Recurrent) -> str:
    """A fingerprint of everything that decides the computation: every weight array (name, shape,
    float64 bytes), which tokens take positions, the layers' options, the readout's kind, theta and
    positions, and the vocabulary.  The free-form `info` is not part of it."""
    h = hashlib.sha256()
    theta = model.readout.theta
    structure = {"vocab": list(model.vocab), "readout": [model.readout.kind, str(theta) if isinstance(theta, Fraction)
                                                         else float(theta), model.readout.positions]}
    if model.readout.rows is not None or model.bos is not None:  # version 1 fingerprints stay as they were
        structure.update(rows=model.readout.rows, bos=model.bos)
    if isinstance(model, Model):
        structure["layers"] = [[l.attention, bool(l.residual), bool(l.causal), len(l.heads)] for l in model.layers]
        structure["P_mask"] = [bool(x) for x in model.P_mask]
    h.update(json.dumps(structure, sort_keys=True).encode())
    for name, arr in sorted(model.named_arrays().items()):
        if is_exact(arr):  # exact rationals hash by their text, so 1/3 and float64(1/3) differ
            h.update(f"{name}{arr.shape}exact".encode())
            h.update(" ".join(map(str, arr.ravel())).encode())
            continue
        a = np.ascontiguousarray(arr, dtype=np.float64)
        h.update(f"{name}{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def is_exact(arr: np.ndarray) -> bool:
    """A weight array of exact rationals (an object array of Fraction and int)."""
    return isinstance(arr, np.ndarray) and arr.dtype == object


def exact_array(values) -> np.ndarray:
    """An object array of Fractions from numbers or nested lists of them (floats taken exactly)."""
    arr = np.array(values, dtype=object)
    return np.vectorize(Fraction, otypes=[object])(arr) if arr.size else arr


def _check_readout(ro: Readout, d: int) -> None:
    if ro.kind not in READOUTS:
        raise InputError(f"readout kind must be one of {READOUTS}, got {ro.kind!r}")
    if ro.positions not in READ_POSITIONS:
        raise InputError(f"readout positions must be one of {READ_POSITIONS}, got {show(ro.positions)}")
    if isinstance(ro.theta, bool) or not isinstance(ro.theta, (int, float, Fraction)) or not math.isfinite(ro.theta):
        raise InputError(f"readout theta must be a finite number, got {show(ro.theta)}")
    C = _shape2(ro.W_U, "U.W", ("C", str(d)))[0]
    if C < 1:
        raise InputError(f"array 'U.W' has no rows: the readout needs one row per class (argmax) or per "
                         f"output bit (threshold), expected shape (C, {d}) with C >= 1")
    if ro.kind == "threshold" and C > MAX_THRESHOLD_BITS:
        raise InputError(f"array 'U.W' has {C} rows; a threshold readout has at most {MAX_THRESHOLD_BITS} "
                         f"output bits")
    _expect(ro.W_U, "U.W", (C, d), f"({C}, {d})")
    _expect(ro.b_U, "U.b", (C,), f"({C},)")
    if ro.rows is not None:
        if ro.kind != "argmax":
            raise InputError("readout rows name argmax classes; a threshold readout's rows are output bits")
        if len(ro.rows) != C or len(set(ro.rows)) != C:
            raise InputError(f"readout rows has {len(ro.rows)} names ({len(set(ro.rows))} distinct), expected "
                             f"{C} distinct names, one per row of 'U.W'")


def _check_finite(model) -> None:
    for name, arr in model.named_arrays().items():
        if is_exact(arr):
            bad = [x for x in arr.ravel() if isinstance(x, bool) or not isinstance(x, (int, Fraction))]
            if bad:
                raise InputError(f"array '{name}' holds exact rationals, but also {show(bad[0])}")
        elif not np.all(np.isfinite(arr)):
            raise InputError(f"array '{name}' has non-finite entries")


def _fmt(shape) -> str:
    return "(" + ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"


def _shape2(arr, name: str, dims: tuple[str, str]) -> tuple[int, int]:
    if not isinstance(arr, np.ndarray) or arr.ndim != 2:
        got = getattr(arr, "shape", None)
        raise InputError(f"array '{name}' has shape {got}, expected a matrix of shape ({dims[0]}, {dims[1]})")
    return arr.shape


def _expect(arr, name: str, shape: tuple, text: str) -> None:
    got = getattr(arr, "shape", None)
    if got is None or len(got) != len(shape) or any(s is not None and g != s for g, s in zip(got, shape)):
        raise InputError(f"array '{name}' has shape {got}, expected {text}")

