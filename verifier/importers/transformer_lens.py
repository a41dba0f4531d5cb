"""State dicts in TransformerLens naming, converted to the model format.

TransformerLens (Nanda and Bloom 2022) names a transformer's weights ``embed.W_E`` (d_vocab,
d_model), ``pos_embed.W_pos`` (n_ctx, d_model), per block ``blocks.L.attn.W_Q`` (n_heads,
d_model, d_head) with ``b_Q`` (n_heads, d_head), the same for K and V, ``W_O`` (n_heads, d_head,
d_model) with ``b_O`` (d_model,), ``blocks.L.mlp.W_in`` (d_model, d_mlp), ``b_in``, ``W_out``
(d_mlp, d_model), ``b_out``, and ``unembed.W_U`` (d_model, d_vocab_out), ``unembed.b_U``.  Row
vectors: ``q = x W_Q + b_Q``.  Attention scores are divided by ``attn_scale`` (sqrt(d_head) by
default) and masked causally unless the model is bidirectional; heads are summed through their
own ``W_O``, which is our concatenation followed by one ``W_O``.

`convert` reads those arrays (no TransformerLens needed) into a `Model`: each map transposed to
column form, ``1/attn_scale`` folded into ``W_Q`` and ``b_Q``, attention biases kept.  What the
state dict cannot say is given: the vocabulary's names, the MLP's activation (ReLU only: GELU has
no exact rounding rule here), causal or not, an optional BOS token, the readout's rows (the
unembedding's columns, named; by default the vocabulary when it has as many), and the positions
read.  LayerNorm weights (``ln1``, ``ln2``, ``ln_final``) are refused: the normalisation itself has
no counterpart in the format (TransformerLens's folded ``LNPre`` still divides by the norm, and a
state dict does not show it, so a model trained with it must not be imported).

Nothing in the file is coerced: a tensor is read as float64 weights only when that is exactly
what it holds (floats of any width, integers up to 2^53; a boolean tensor or a larger integer that
float64 would round is refused), and a name that is not TransformerLens's exactly (``blocks.00``) is
refused, as is a ``.pt`` archive with two members of one name.

Before the model is returned, its float64 forward pass is compared with this module's own
TransformerLens forward pass (`forward`, in the TransformerLens conventions, on the arrays as
read) on random inputs: a difference beyond 1e-9 times the largest activation (at least 1) is an
internal error, and a forward pass that is not finite (weights that overflow float64) is refused.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Optional

import numpy as np

from ..evaluator import read_from, reference
from ..model import Head, Layer, Model, Readout
from ..support.errors import InputError, InternalError
from .safetensors import read_tensors

LAYER_NUMBER = r"(0|[1-9]\d*)"  # as TransformerLens writes it: blocks.00 is not blocks.0
BLOCK = re.compile(rf"^blocks\.{LAYER_NUMBER}\.(attn|mlp)\.(W_Q|W_K|W_V|W_O|b_Q|b_K|b_V|b_O|W_in|b_in|W_out|b_out)$")
BUFFERS = re.compile(rf"^blocks\.{LAYER_NUMBER}\.attn\.(IGNORE|mask)$")  # TransformerLens's constant buffers
LAYER_NORM = re.compile(r"(^|\.)(ln\d*|ln_final)(\.|$)")
ROUND_TRIP_TOLERANCE = 1e-9  # relative to the largest activation of the forward pass
EXACT_INTEGERS = 2 ** 53  # every integer up to this is a float64


@dataclass
class Imported:
    model: Model
    round_trip_error: float  # the largest difference of a readout score
    round_trip_scale: float  # the largest activation of the forward pass: the tolerance is relative to it
    skipped: list[str]  # TransformerLens buffers not needed (IGNORE, mask)


def convert(path: str, vocab: list[str], *, activation: Optional[str] = None, causal: bool = True,
            bos: Optional[str] = None, rows: Optional[list[str]] = None, positions: str = "last",
            attn_scale: Optional[float] = None, seed: int = 0) -> Imported:
    source = f"weights file {path}"
    arrays = read_tensors(path)
    norms = sorted(k for k in arrays if LAYER_NORM.search(k))
    if norms:
        raise InputError(f"{source} has LayerNorm weights ({', '.join(norms[:3])}); LayerNorm is not supported: "
                         f"fold its scale and bias into the next weights (fold_ln) and use a model trained without "
                         f"the normalisation (normalization_type=None)")
    skipped = sorted(k for k in arrays if BUFFERS.match(k))
    known = {"embed.W_E", "pos_embed.W_pos", "unembed.W_U", "unembed.b_U"}
    unknown = sorted(k for k in arrays if k not in known and not BLOCK.match(k) and not BUFFERS.match(k))
    if unknown:
        raise InputError(f"{source}: {', '.join(unknown[:5])} {'is' if len(unknown) == 1 else 'are'} not "
                         f"TransformerLens names this importer knows (embed, pos_embed, blocks.L.attn, "
                         f"blocks.L.mlp, unembed)")
    arrays = {k: v if BUFFERS.match(k) else _weights(v, k, source) for k, v in arrays.items()}
    for name in ("embed.W_E", "pos_embed.W_pos", "unembed.W_U"):
        if name not in arrays:
            extra = " (only learned absolute positions are supported)" if name == "pos_embed.W_pos" else ""
            raise InputError(f"{source}: {name} is missing{extra}")
    blocks = sorted({int(m.group(1)) for k in arrays if (m := BLOCK.match(k))})
    if blocks != list(range(len(blocks))) or not blocks:
        raise InputError(f"{source}: blocks must be numbered 0..L-1 with at least one; found {blocks}")
    W_E, W_pos, W_U = arrays["embed.W_E"], arrays["pos_embed.W_pos"], arrays["unembed.W_U"]
    if len(vocab) != W_E.shape[0]:
        raise InputError(f"{source}: embed.W_E has {W_E.shape[0]} rows; --vocab names {len(vocab)} tokens")
    has_mlp = any(k.startswith(f"blocks.{b}.mlp.") for k in arrays for b in blocks)
    if has_mlp and activation != "relu":
        raise InputError(f"{source} has MLPs; give their activation (--act relu): a state dict does not say it, "
                         f"and GELU is refused (no exact fixed-point rule)" if activation is None else
                         f"--act {activation}: only relu is supported (GELU has no exact fixed-point rule)")
    layers = []
    for b in blocks:
        get = _getter(arrays, f"blocks.{b}", source)
        W_Q = get("attn.W_Q", 3)
        H, d_model, d_head = W_Q.shape
        scale = attn_scale if attn_scale is not None else math.sqrt(d_head)
        maps = {name: get(f"attn.{name}", 3, (H, d_model, d_head if name == "W_K" else None))
                for name in ("W_K", "W_V")}
        biases = {name: get(f"attn.{name}", 2, (H, None), required=False) for name in ("b_Q", "b_K", "b_V")}
        W_O = get("attn.W_O", 3, (H, None, d_model))
        b_O = get("attn.b_O", 1, (d_model,), required=False)
        with_biases = any(v is not None for v in biases.values()) or b_O is not None
        heads = []
        for h in range(H):
            head = dict(W_Q=W_Q[h].T / scale, W_K=maps["W_K"][h].T, W_V=maps["W_V"][h].T)
            if with_biases:
                zero = {"b_Q": d_head, "b_K": d_head, "b_V": maps["W_V"].shape[2]}
                head.update({k: (np.zeros(zero[k]) if v is None else v[h]) for k, v in biases.items()})
                head["b_Q"] = head["b_Q"] / scale
            heads.append(Head(**head))
        ffn = {}
        if any(k.startswith(f"blocks.{b}.mlp.") for k in arrays):
            W_in = get("mlp.W_in", 2, (d_model, None))
            ffn = dict(W1=W_in.T, b1=_or_zeros(get("mlp.b_in", 1, (W_in.shape[1],), required=False), W_in.shape[1]),
                       W2=get("mlp.W_out", 2, (W_in.shape[1], d_model)).T,
                       b2=_or_zeros(get("mlp.b_out", 1, (d_model,), required=False), d_model))
        layers.append(Layer(heads, np.concatenate([W_O[h].T for h in range(H)], axis=1), "softmax", residual=True,
                            causal=causal, b_O=(_or_zeros(b_O, d_model) if with_biases else None), **ffn))
    b_U = arrays.get("unembed.b_U", np.zeros(W_U.shape[1]))
    if rows is None and W_U.shape[1] == len(vocab):
        rows = list(vocab)
    if rows is not None and len(rows) != W_U.shape[1]:
        raise InputError(f"{source}: unembed.W_U has {W_U.shape[1]} columns; --rows names {len(rows)}")
    if bos is not None and bos not in vocab:
        raise InputError(f"--bos {bos} is not a token of --vocab")
    # the model format puts BOS last in the vocabulary (the task's tokens keep their order before
    # it); moving an embedding row changes no value
    order = [i for i, t in enumerate(vocab) if t != bos] + ([vocab.index(bos)] if bos is not None else [])
    model = Model(E=W_E[order], P=W_pos, P_mask=np.ones(len(vocab), dtype=bool), layers=layers,
                  readout=Readout(W_U.T.copy(), b_U, "argmax", positions=positions, rows=rows),
                  vocab=[vocab[i] for i in order], info={"imported_from": str(path), "naming": "TransformerLens",
                                                         "attn_scale": scale, "causal": causal}, bos=bos)
    try:
        model.validate()
    except InputError as exc:
        raise InputError(f"{source}: {exc}") from None
    return Imported(model, *_round_trip(arrays, model, np.array(order), causal, scale, seed, source), skipped)


def _weights(a: np.ndarray, name: str, source: str) -> np.ndarray:
    """A tensor as float64 weights, if that is exactly what it holds: floats (of any width) and
    integers up to 2^53 are; a boolean is not a weight, and an integer float64 would round is refused."""
    if a.dtype.kind == "b":
        raise InputError(f"{source}: tensor {name!r} is boolean; a weight is a number (save it as a float tensor)")
    if a.dtype.kind not in "fiu":
        raise InputError(f"{source}: tensor {name!r} has dtype {a.dtype}; a weight is a real number")
    out = np.asarray(a, dtype=np.float64)
    if a.dtype.kind in "iu":
        large = a[(a > EXACT_INTEGERS) | (a < -EXACT_INTEGERS)]
        inexact = next((int(x) for x in large if int(float(x)) != int(x)), None)
        if inexact is not None:
            raise InputError(f"{source}: tensor {name!r} holds the integer {inexact}, which float64 (the model "
                             f"format) cannot hold exactly: it would become {int(float(inexact))}")
    return out


def _getter(arrays: dict, prefix: str, source: str):
    def get(name: str, ndim: int, shape: tuple = (), required: bool = True):
        key = f"{prefix}.{name}"
        if key not in arrays:
            if required:
                raise InputError(f"{source}: {key} is missing")
            return None
        a = arrays[key]
        if a.ndim != ndim or any(s is not None and g != s for g, s in zip(a.shape, shape)):
            want = "(" + ", ".join("?" if s is None else str(s) for s in shape) + ")" if shape else f"{ndim} axes"
            raise InputError(f"{source}: {key} has shape {a.shape}, expected {want}")
        return a
    return get


def _or_zeros(a: Optional[np.ndarray], n: int) -> np.ndarray:
    return np.zeros(n) if a is None else a


def forward(arrays: dict, tokens: np.ndarray, causal: bool, attn_scale: float, with_scale: bool = False):
    """TransformerLens's forward pass, float64, without LayerNorm: the logits (n, d_vocab_out) of one
    input, in its own conventions (row vectors, heads summed through their W_O); `with_scale`: and
    the largest magnitude of an activation (residual stream, query, key, value, hidden unit, logit;
    not the attention scores, which enter the logits only through the softmax's weights)."""
    x = arrays["embed.W_E"][tokens] + arrays["pos_embed.W_pos"][: len(tokens)]
    n = len(tokens)
    seen = [x]
    b = 0
    while f"blocks.{b}.attn.W_Q" in arrays:
        g = lambda name: arrays.get(f"blocks.{b}.{name}", 0.0)
        per_head = lambda name: np.asarray(g(f"attn.b_{name}"))[..., None, :] if f"blocks.{b}.attn.b_{name}" \
            in arrays else 0.0
        q, k, v = (np.einsum("pd,hde->hpe", x, g(f"attn.W_{c}")) + per_head(c) for c in "QKV")
        scores = np.einsum("hqe,hke->hqk", q, k) / attn_scale
        seen += [q, k, v]
        if causal:
            scores = np.where(np.tril(np.ones((n, n), dtype=bool)), scores, -np.inf)
        weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
        weights /= weights.sum(axis=-1, keepdims=True)
        z = np.einsum("hqk,hke->hqe", weights, v)
        x = x + np.einsum("hqe,hed->qd", z, g("attn.W_O")) + g("attn.b_O")
        seen.append(x)
        if f"blocks.{b}.mlp.W_in" in arrays:
            hidden = np.maximum(x @ g("mlp.W_in") + g("mlp.b_in"), 0)
            x = x + hidden @ g("mlp.W_out") + g("mlp.b_out")
            seen += [hidden, x]
        b += 1
    logits = x @ arrays["unembed.W_U"] + arrays.get("unembed.b_U", 0.0)
    if not with_scale:
        return logits
    return logits, max(float(np.abs(a).max(initial=0.0)) for a in seen + [logits])


def _round_trip(arrays: dict, model: Model, order: np.ndarray, causal: bool, scale: float, seed: int,
                source: str) -> tuple[float, float]:
    """The largest difference between the converted model's float64 readout scores and `forward`'s,
    on random inputs of every length up to n_ctx (at most 8 lengths), and the largest activation of
    those forward passes.  Token t of the model is token order[t] of the state dict.  A difference
    beyond ROUND_TRIP_TOLERANCE times the largest activation (at least 1) is an internal error: two
    float64 forward passes of one model differ by roundings of their largest values, not more.  A
    forward pass that is not finite is the weights' fault: they overflow float64."""
    rng = np.random.default_rng(seed)
    ours = reference(model)
    V, n_ctx = len(model.vocab), model.max_len
    worst, largest = 0.0, 0.0
    for n in sorted({1, n_ctx, *rng.integers(1, n_ctx + 1, size=6).tolist()}):
        tokens = rng.integers(0, V, size=n)
        if model.bos is not None:  # the inputs the model will see: BOS first
            tokens[0] = V - 1
        with np.errstate(all="ignore"):
            theirs, activation = forward(arrays, order[tokens], causal, scale, with_scale=True)
            rows = theirs[read_from(model):] if model.readout.positions == "all" else theirs[-1:]
            mine = ours.arith.to_real(ours.forward(tokens[None, :]).scores).reshape(rows.shape)
        if not (np.isfinite(rows).all() and np.isfinite(activation)):
            raise InputError(f"{source}: the TransformerLens forward pass of these weights is not finite on the "
                             f"input {' '.join(model.vocab[t] for t in tokens)} (float64 overflows): weights this "
                             f"large cannot be verified")
        if not np.isfinite(mine).all():
            raise InternalError(f"the converted model's float64 forward pass is not finite where TransformerLens's "
                                f"is, on the input {' '.join(model.vocab[t] for t in tokens)}")
        worst = max(worst, float(np.abs(mine - rows).max(initial=0.0)))
        largest = max(largest, activation)
    if not worst <= ROUND_TRIP_TOLERANCE * max(1.0, largest):
        raise InternalError(f"the converted model differs from the TransformerLens forward pass by {worst:.3g} in "
                            f"float64, more than {ROUND_TRIP_TOLERANCE:g} x the largest activation ({largest:.3g})")
    return worst, largest
