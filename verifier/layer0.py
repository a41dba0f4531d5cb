"""Layer 0 as arrays, once per model: every (position, token) pair, factored by what each map reads.

A layer-0 vector depends on a (position, token) pair only through the embedding columns its map
reads: ``W x0`` with ``x0 = sat(E[t] + P_mask[t] P[i])`` reads the columns where W is non-zero,
so two pairs whose embeddings agree on those columns have the same image.  `ClassTable` groups
the pairs into classes (tokens by their embedding on the columns read and their P_mask, positions
by their position vector on those columns), computes each class's image once with the
evaluator's own fixed-point code, and keeps a (position, token) -> class table.  For index lookup
at N = 1024 the query map has 1025 classes and the key map 1026, where the pairs number 1.1
million; the logits of every (query class, key class) pair are then one exact matrix product
(`score_table`), not a dot product per input.

Everything here is exact partial evaluation: a class's codes are the codes the evaluator computes
for every pair of the class, and its saturation flag is the flag the evaluator would raise.
The tables are built in chunks, and a run's deadline is polled between them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from .arithmetic import Ctx, Fixed
from .floats import FloatArith
from .model import Model
from .support.budget import Deadline, require_memory

_EXACT_FLOAT = 1 << 53  # integers below this are exact in float64, and so are their sums
_CHUNK = 1 << 22  # elements of the largest temporary of a direct (non-matrix) product
_FEW_VALUES = 4  # a key column with at most this many distinct codes is summed through indicators


@dataclass
class ClassTable:
    """A layer-0 map over every (position, token) pair: ``values[rid[i, t]]`` is its image at
    position i, token t; ``ovf[rid[i, t]]`` says whether computing it saturated (the embedding's
    sum on the columns read, or the map).``W = None``: the embedding itself, every column."""

    rid: np.ndarray  # (L_max, V) int64
    values: np.ndarray  # (classes, out) codes
    ovf: np.ndarray  # (classes,) bool

    @property
    def classes(self) -> int:
        return len(self.values)


_ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth")


def keys_from_tokens(model: Model) -> Optional[str]:
    """Why some layer's keys or values are not a function of (position, token), or None: every
    layer before the last is residual, and each layer's key and value maps read only columns the
    layers before it leave as they are (zero rows of their W_O, b_O, W2, b2).  Adding a zero code
    changes no code, so such a layer's keys and values are its maps of the embedding: tables over
    (position, token) like layer 0's."""
    def name(li: int) -> str:
        return _ORDINALS[li] if li < len(_ORDINALS) else f"number {li + 1}"

    writes = np.zeros(model.d, dtype=bool)
    for li, layer in enumerate(model.layers):
        reads = np.zeros(model.d, dtype=bool)
        for h in layer.heads:
            reads |= np.any(h.W_K != 0, axis=0) | np.any(h.W_V != 0, axis=0)
        if (reads & writes).any():
            n = int((reads & writes).sum())
            earlier = "its first layer writes" if li == 1 else "the layers before it write"
            return f"its {name(li)} layer's keys or values read {n} column{'s' if n > 1 else ''} {earlier}"
        if not layer.residual and li < len(model.layers) - 1:
            return f"its {name(li)} layer is not residual"
        writes |= np.any(layer.W_O != 0, axis=1) | (layer.b_O is not None and layer.b_O != 0)
        if layer.has_ffn:
            writes |= np.any(layer.W2 != 0, axis=1) | (layer.b2 is not None and layer.b2 != 0)
    return None


def class_table(fx: "Fixed | FloatArith", E: np.ndarray, P: np.ndarray, P_mask: np.ndarray, W: np.ndarray,
                b: Optional[np.ndarray] = None, deadline: Optional[Deadline] = None) -> ClassTable:
    """The classes of ``W x0 + b`` over (position, token) pairs, from the quantized embedding E, P."""
    L, V = P.shape[0], E.shape[0]
    cols = np.flatnonzero(np.any(W != 0, axis=0))
    Ec, Pc = E[:, cols], P[:, cols]
    _, tok = np.unique(np.concatenate([Ec, P_mask[:, None].astype(np.int64)], axis=1), axis=0, return_inverse=True)
    _, pos = np.unique(Pc, axis=0, return_inverse=True)
    tok, pos = tok.reshape(-1), pos.reshape(-1)
    # a token without a position vector is the same at every position
    combo = np.where(P_mask[None, :], pos[:, None], -1) * (int(tok.max()) + 1) + tok[None, :]
    uniq, first, rid = np.unique(combo.reshape(-1), return_index=True, return_inverse=True)
    require_memory(8.0 * len(uniq) * (len(cols) + W.shape[0]), f"the layer-0 classes ({len(uniq):,})")
    at_pos, at_tok = np.divmod(first, V)
    ctx = fx.context((len(uniq),))
    x = fx.add(Ec[at_tok], np.where(P_mask[at_tok][:, None], Pc[at_pos], 0), ctx, "embed")
    values = _lin_chunked(fx, W[:, cols], x, b, ctx, deadline)
    return ClassTable(rid.reshape(L, V).astype(np.int64), values, ctx.ovf.copy())


def state_table(fx: "Fixed | FloatArith", X: np.ndarray, W: np.ndarray, b: Optional[np.ndarray] = None,
                deadline: Optional[Deadline] = None) -> ClassTable:
    """The classes of ``W x + b`` over a table of states X (L, C, d) (`verifier.locality`'s first
    layer's outputs per position and window of tokens): ``rid`` is (L, C)."""
    cols = np.flatnonzero(np.any(W != 0, axis=0))
    read = X[:, :, cols].reshape(X.shape[0] * X.shape[1], len(cols))
    if not len(cols):  # a map of zeros: one class, its bias
        uniq, rid = read[:1], np.zeros(len(read), dtype=np.int64)
    else:
        uniq, rid = np.unique(read, axis=0, return_inverse=True)
    require_memory(8.0 * len(uniq) * (len(cols) + W.shape[0]), f"the classes of a later layer ({len(uniq):,})")
    ctx = fx.context((len(uniq),))
    values = _lin_chunked(fx, W[:, cols], uniq, b, ctx, deadline)
    return ClassTable(rid.reshape(X.shape[:2]).astype(np.int64), values, ctx.ovf.copy())


def embedding_overflow(fx: "Fixed | FloatArith", E: np.ndarray, P: np.ndarray, P_mask: np.ndarray,
                       deadline: Optional[Deadline] = None) -> np.ndarray:
    """(L_max, V) bool: does the embedding E[t] + P[i] saturate (overflow) some coordinate of the pair (i, t)?"""
    L, V = P.shape[0], E.shape[0]
    out = np.zeros((L, V), dtype=bool)
    if np.abs(E).max(initial=0) + np.abs(P).max(initial=0) <= fx.largest:
        return out
    rows = max(1, _CHUNK // max(E.size, 1))
    for a in range(0, L, rows):
        _poll(deadline)
        ctx = Ctx((min(rows, L - a), V), True)
        fx.add(E[None, :, :], P[a:a + rows, None, :], ctx, "embed")
        out[a:a + rows] = ctx.ovf & P_mask[None, :]
    return out


def _lin_chunked(fx: "Fixed | FloatArith", W: np.ndarray, x: np.ndarray, b: Optional[np.ndarray], ctx,
                 deadline: Optional[Deadline] = None) -> np.ndarray:
    """fx.lin on row chunks, each temporary (rows x out x in) below _CHUNK elements."""
    rows = max(1, _CHUNK // max(W.size, 1))
    out = np.empty((len(x), W.shape[0]), dtype=fx.dtype)
    for a in range(0, len(x), rows):
        _poll(deadline)
        sub = fx.context((min(rows, len(x) - a),))
        out[a:a + rows] = fx.lin(W, x[a:a + rows], b, sub, "lin")
        ctx.ovf[a:a + rows] |= sub.ovf
    return out


def score_table(fx: "Fixed | FloatArith", Q: np.ndarray, K: np.ndarray,
                deadline: Optional[Deadline] = None) -> tuple[np.ndarray, np.ndarray]:
    """Every logit <q, k> of the rows of Q (nq, m) against the rows of K (nk, m), by the linear
    rule, and where computing it saturated: (nq, nk) codes and flags.

    Product accumulation rounds every product, so a plain matrix product is not the rule; but a
    column c whose key codes times the step are all integers (k_c num / den, for FX multiples of
    2^f) has exact products q_c (k_c num / den), which never round, and which cannot saturate when
    |q_c| |k_c num / den| <= hi.  Those columns are one
    float64 matrix product (exact: every partial sum stays below 2^53); columns with few distinct
    key codes go through indicators (`_by_indicators`); the rest are summed product by product.
    Wide accumulation is one exact matrix product when its sums fit 2^53, and product by product
    otherwise.  A float format's logits are its own dot products (`FloatArith.scores`), in chunks."""
    nq, nk = len(Q), len(K)
    require_memory(8.0 * 3 * nq * nk, f"the layer-0 logit table ({nq:,} x {nk:,})")
    if not isinstance(fx, Fixed):
        return _float_scores(fx, Q, K, deadline)
    m = Q.shape[1]
    qmax, kmax = np.abs(Q).max(0, initial=0), np.abs(K).max(0, initial=0)
    ovf = np.zeros((nq, nk), dtype=bool)
    if fx.accumulate == "product":
        scaled = fx.scale_num(K)
        whole = np.all(scaled % fx.den == 0, axis=0) & (qmax * (fx.scale_num(kmax) // fx.den) <= fx.hi)
        exact = np.flatnonzero(whole & (m * fx.hi < _EXACT_FLOAT))
        rest = np.setdiff1d(np.arange(m), exact)
        s = np.rint(Q[:, exact].astype(np.float64) @ (scaled[:, exact] // fx.den).T.astype(np.float64)).astype(np.int64)
        few = [c for c in rest if len(np.unique(K[:, c])) <= _FEW_VALUES]
        if few and m * fx.hi < _EXACT_FLOAT:
            s += _by_indicators(fx, Q[:, few], K[:, few], ovf)
            rest = np.setdiff1d(rest, few)
        if len(rest):
            s += _direct(fx, Q[:, rest], K[:, rest], ovf, rounded=True, deadline=deadline)
        return _saturate(fx, s, ovf)
    if m * int(qmax.max(initial=0)) * int(kmax.max(initial=0)) < _EXACT_FLOAT:
        raw = np.rint(Q.astype(np.float64) @ K.T.astype(np.float64)).astype(np.int64)
    else:
        raw = _direct(fx, Q, K, ovf, rounded=False, deadline=deadline)
    return _saturate(fx, fx.round_den(fx.scale_num(raw)), ovf)


def _float_scores(fx: FloatArith, Q: np.ndarray, K: np.ndarray,
                  deadline: Optional[Deadline] = None) -> tuple[np.ndarray, np.ndarray]:
    """Every logit <q, k> in a float format, with its overflow flags, in query-row chunks."""
    nq, nk = len(Q), len(K)
    s, ovf = np.empty((nq, nk)), np.zeros((nq, nk), dtype=bool)
    rows = max(1, _CHUNK // max(nk * Q.shape[1], 1))
    for a in range(0, nq, rows):
        _poll(deadline)
        ctx = Ctx((min(rows, nq - a), nk), True)
        s[a:a + rows] = fx.scores(Q[a:a + rows], K, ctx, "logits")
        ovf[a:a + rows] = ctx.ovf
    return s, ovf


def _by_indicators(fx: Fixed, Q: np.ndarray, K: np.ndarray, ovf: np.ndarray) -> np.ndarray:
    """Product-accumulated sums over columns whose key codes take few values u: R(q_c u), rounded
    and saturated once per (query row, column, value), summed against the indicator [k_c = u] by
    one float64 matrix product (exact: the partial sums stay below 2^53)."""
    tabs, marks = [], []
    for c in range(Q.shape[1]):
        for u in np.unique(K[:, c]):
            if u == 0:  # R(q 0) = 0
                continue
            r = fx.rescale(Q[:, c] * u)
            t = np.minimum(np.maximum(r, fx.lo), fx.hi)
            hit = K[:, c] == u
            ovf |= (t != r)[:, None] & hit[None, :]
            tabs.append(t)
            marks.append(hit)
    if not tabs:
        return np.zeros((len(Q), len(K)), dtype=np.int64)
    T = np.stack(tabs, axis=1).astype(np.float64)
    M = np.stack(marks, axis=1).astype(np.float64)
    return np.rint(T @ M.T).astype(np.int64)


def _direct(fx: Fixed, Q: np.ndarray, K: np.ndarray, ovf: np.ndarray, rounded: bool,
            deadline: Optional[Deadline] = None) -> np.ndarray:
    """Sums over the columns of Q x K products in query-row chunks: rounded and saturated one by
    one (product accumulation, flags into ovf), or exact."""
    nq, nk, m = len(Q), len(K), Q.shape[1]
    rows = max(1, _CHUNK // max(nk * m, 1))
    out = np.empty((nq, nk), dtype=np.int64)
    for a in range(0, nq, rows):
        _poll(deadline)
        prod = Q[a:a + rows, None, :] * K[None, :, :]
        if rounded:
            r = fx.rescale(prod)
            t = np.minimum(np.maximum(r, fx.lo), fx.hi)
            ovf[a:a + rows] |= (t != r).any(-1)
            prod = t
        out[a:a + rows] = prod.sum(-1)
    return out


def _poll(deadline: Optional[Deadline]) -> None:
    if deadline is not None:
        deadline.check()


def _saturate(fx: Fixed, s: np.ndarray, ovf: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    t = np.minimum(np.maximum(s, fx.lo), fx.hi)
    return t, ovf | (t != s)
