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

Before the model is returned, its float64 forward pass is compared with this module's own
TransformerLens forward pass (`forward`, in the TransformerLens conventions, on the arrays as
read) on random inputs; a difference beyond 1e-6 is an internal error.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Optional

import numpy as np

from ..errors import InputError, InternalError
from ..evaluator import read_from, reference
from ..model import Head, Layer, Model, Readout
from .safetensors import read_tensors

BLOCK = re.compile(r"^blocks\.(\d+)\.(attn|mlp)\.(W_Q|W_K|W_V|W_O|b_Q|b_K|b_V|b_O|W_in|b_in|W_out|b_out)$")
BUFFERS = re.compile(r"^blocks\.\d+\.attn\.(IGNORE|mask)$")  # TransformerLens's constant buffers
LAYER_NORM = re.compile(r"(^|\.)(ln\d*|ln_final)(\.|$)")
ROUND_TRIP_TOLERANCE = 1e-6


@dataclass
class Imported:
    model: Model
    round_trip_error: float
    skipped: list[str]  # TransformerLens buffers not needed (IGNORE, mask)


def convert(path: str, vocab: list[str], *, activation: Optional[str] = None, causal: bool = True,
            bos: Optional[str] = None, rows: Optional[list[str]] = None, positions: str = "last",
            attn_scale: Optional[float] = None, seed: int = 0) -> Imported:
    arrays = {k: np.asarray(v, dtype=np.float64) if v.dtype.kind in "fiu" else v
              for k, v in read_tensors(path).items()}
    source = f"weights file {path}"
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
    for name in ("embed.W_E", "pos_embed.W_pos", "unembed.W_U"):
        if name not in arrays:
            extra = " (only learned absolute positions are supported)" if name == "pos_embed.W_pos" else ""
            raise InputError(f"{source}: {name} is missing{extra}")
    blocks = sorted({int(BLOCK.match(k).group(1)) for k in arrays if BLOCK.match(k)})
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
    return Imported(model, _round_trip(arrays, model, np.array(order), causal, scale, seed), skipped)


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


def forward(arrays: dict, tokens: np.ndarray, causal: bool, attn_scale: float) -> np.ndarray:
    """TransformerLens's forward pass, float64, without LayerNorm: the logits (n, d_vocab_out) of one
    input, in its own conventions (row vectors, heads summed through their W_O)."""
    x = arrays["embed.W_E"][tokens] + arrays["pos_embed.W_pos"][: len(tokens)]
    n = len(tokens)
    b = 0
    while f"blocks.{b}.attn.W_Q" in arrays:
        g = lambda name: arrays.get(f"blocks.{b}.{name}", 0.0)
        per_head = lambda name: np.asarray(g(f"attn.b_{name}"))[..., None, :] if f"blocks.{b}.attn.b_{name}" \
            in arrays else 0.0
        q, k, v = (np.einsum("pd,hde->hpe", x, g(f"attn.W_{c}")) + per_head(c) for c in "QKV")
        scores = np.einsum("hqe,hke->hqk", q, k) / attn_scale
        if causal:
            scores = np.where(np.tril(np.ones((n, n), dtype=bool)), scores, -np.inf)
        weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
        weights /= weights.sum(axis=-1, keepdims=True)
        z = np.einsum("hqk,hke->hqe", weights, v)
        x = x + np.einsum("hqe,hed->qd", z, g("attn.W_O")) + g("attn.b_O")
        if f"blocks.{b}.mlp.W_in" in arrays:
            hidden = np.maximum(x @ g("mlp.W_in") + g("mlp.b_in"), 0)
            x = x + hidden @ g("mlp.W_out") + g("mlp.b_out")
        b += 1
    return x @ arrays["unembed.W_U"] + arrays.get("unembed.b_U", 0.0)


def _round_trip(arrays: dict, model: Model, order: np.ndarray, causal: bool, scale: float, seed: int) -> float:
    """The largest difference between the converted model's float64 readout scores and `forward`'s,
    on random inputs of every length up to n_ctx (at most 8 lengths).  Token t of the model is
    token order[t] of the state dict."""
    rng = np.random.default_rng(seed)
    ours = reference(model)
    V, n_ctx = len(model.vocab), model.max_len
    worst = 0.0
    for n in sorted({1, n_ctx, *rng.integers(1, n_ctx + 1, size=6).tolist()}):
        tokens = rng.integers(0, V, size=n)
        if model.bos is not None:  # the inputs the model will see: BOS first
            tokens[0] = V - 1
        theirs = forward(arrays, order[tokens], causal, scale)
        rows = theirs[read_from(model):] if model.readout.positions == "all" else theirs[-1:]
        mine = ours.arith.to_real(ours.forward(tokens[None, :]).scores).reshape(rows.shape)
        worst = max(worst, float(np.abs(mine - rows).max(initial=0.0)))
    if not worst <= ROUND_TRIP_TOLERANCE:
        raise InternalError(f"the converted model differs from the TransformerLens forward pass by {worst:.3g} "
                            f"(more than {ROUND_TRIP_TOLERANCE:g}) in float64")
    return worst
