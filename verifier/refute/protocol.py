"""What a model's answer on Bob's positions needs from Alice's: the summaries the refuter collides,
and Theorem 4's protocol in FX, as code.

* **Recurrent models** (Bhattamishra et al. 2024, arXiv:2406.09347, Theorem 2): the state codes
  after Alice's prefix (`states`).  Every later output is a function of them and Bob's suffix.
* **1-layer transformers**, output at Bob's position j with the query of (j, Bob's token there):
  per head, the multiset of (logit code, value codes, saturation flag) over Alice's positions that
  j sees (`summaries`).  In FX every sum over positions is an exact integer sum followed by one
  rounding and one saturation (docs/arithmetic.md), so the head's output is a function of the
  multiset: that is what makes two Alice parts with equal summaries interchangeable.
* **Theorem 4's protocol** (Appendix D), as the arithmetic does it (`simulate`): Bob sends his
  query token; each party sends the max of its logits; with M the larger, each sends
  Z_X = sum_{j in X} R(exp(sat(s_j - M))) exactly; each computes a_j = R(e_j 2^f / (Z_A + Z_B)) and
  sends P_X = sum_{j in X} of the rounded products a_j v_j (accumulate = product) or the exact
  products (accumulate = wide); Bob saturates (rounds) P_A + P_B and finishes the layer at his
  position.  ReLU heads need no max or normalizer: Alice sends P_A alone.  The tests check the
  simulation against the evaluator bit for bit; `message_counts` counts what it can send.

Conditions: FX arithmetic (the float64 reference sums in an order), one layer, and an accumulation
rule whose sums over positions are order-free (`ORDER_FREE`: both rules of docs/arithmetic.md sum
exactly and round once).  `scope` refuses the others with one line.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator, Optional

import mpmath
import numpy as np

from ..arithmetic import Fixed, FixedPoint, exp_table
from ..evaluator import Evaluator, RecurrentEvaluator, read_from
from ..model import Recurrent

ORDER_FREE = ("product", "wide")  # accumulation rules whose sums over positions are exact, then rounded once


def scope(model, arith) -> Optional[str]:
    """Why the summaries and the protocol do not describe this model (None: they do)."""
    if not isinstance(arith, Fixed):
        return "the protocol is about FX arithmetic; float64 sums depend on their order"
    if not isinstance(arith, FixedPoint):
        return (f"the protocol is simulated (and checked against the evaluator) in binary fixed point FX(p, f) only, "
                f"not on {arith.label()}")
    if arith.accumulate not in ORDER_FREE:
        return (f"accumulate={arith.accumulate}: its sums over positions are not order-free (the protocol needs "
                f"one of {', '.join(ORDER_FREE)})")
    if isinstance(model, Recurrent):
        return None
    if len(model.layers) != 1:
        return f"the model has {len(model.layers)} layers; the protocol simulates one"
    return None


# -- summaries -----------------------------------------------------------------------------------
def row_keys(ev: Evaluator, position: int, token: int, head: int) -> tuple[np.ndarray, np.ndarray]:
    """For every table row (position, token): an id of (logit code under the query of (position,
    token), value codes, saturation flag), and the logit codes.  Equal ids: interchangeable keys."""
    t, arith, V = ev.tables, ev.arith, len(ev.q.vocab)
    assert t is not None and isinstance(arith, FixedPoint)  # `scope`: binary FX, the tables built
    ctx = arith.context((1, len(t.k[head])))
    logits = arith.scores(t.q[head][[position * V + token]], t.k[head], ctx, "logits")[0]
    flag = t.kv_ovf | ctx.ovf[0]
    if ev.saturated_use is not None:  # a saturated embedding or position row is used by an input that holds it
        pos = np.repeat(np.arange(ev.q.max_len), V)
        flag = flag | ev.saturated_use.at(pos, np.tile(np.arange(V), ev.q.max_len), ev.q.P_mask)
    key = np.concatenate([logits[:, None], t.v[head], flag[:, None]], axis=1)
    return np.unique(key, axis=0, return_inverse=True)[1].reshape(-1), logits


def summaries(ev: Evaluator, alice: np.ndarray, parts: np.ndarray, position: int, token: int) -> np.ndarray:
    """Per Alice part (F, |alice|): per head, the sorted ids of `row_keys` over her positions that
    `position` sees (all, or those before it under a causal mask): (F, H * |visible|)."""
    V = len(ev.q.vocab)
    seen = alice <= position if ev.q.layers[0].causal else np.ones(len(alice), bool)
    rows = alice[seen][None, :] * V + parts[:, seen]
    ids = [np.sort(row_keys(ev, position, token, h)[0][rows], axis=1) for h in range(len(ev.q.layers[0].heads))]
    return np.concatenate(ids, axis=1) if ids else np.zeros((len(parts), 0), dtype=np.int64)


def states(ev: RecurrentEvaluator, prefixes: np.ndarray) -> np.ndarray:
    """The state codes after each prefix (F, L), with a last column: did anything saturate under
    overflow = error (an input that holds the prefix fails whatever follows)."""
    for keys in state_steps(ev, prefixes):
        pass
    return keys


def state_steps(ev: RecurrentEvaluator, tokens: np.ndarray) -> Iterator[np.ndarray]:
    """`states` after each prefix tokens[:, :t + 1] in turn, in one pass (t = 0, 1, ...)."""
    q = ev.q
    tokens, used = ev._start(tokens, False, np.zeros(len(q.vocab), bool))  # saturated parameters used
    ctx = ev.arith.context((len(tokens),))
    ctx.ovf |= used.base.ovf | used.ovf.any(1)
    h = np.broadcast_to(q.h0, (len(tokens), q.d))
    for t in range(tokens.shape[1]):
        h = ev.step(h, tokens[:, t], ctx, f"t{t}")[1]
        yield np.concatenate([h, ctx.ovf[:, None].astype(np.int64)], axis=1)


# -- Theorem 4's protocol ----------------------------------------------------------------------------
@dataclass
class Transcript:
    """The messages of one head, per input: Bob's query token, the maxima, the normalizers, the
    partial sums (softmax); the partial sums only (ReLU)."""

    query: np.ndarray  # (B,)
    M_A: Optional[np.ndarray]
    M_B: Optional[np.ndarray]
    Z_A: Optional[np.ndarray]
    Z_B: Optional[np.ndarray]
    P_A: np.ndarray  # (B, m_v)
    P_B: np.ndarray


def simulate(ev: Evaluator, tokens: np.ndarray, alice: np.ndarray, position: int
             ) -> tuple[np.ndarray, np.ndarray, list[Transcript]]:
    """Run the protocol on inputs (B, L): Alice holds `alice`, Bob the rest and `position`.
    Returns the readout scores at `position` that Bob reconstructs, the saturation flags, and
    each head's transcript."""
    q, arith, t = ev.q, ev.arith, ev.tables
    assert t is not None and isinstance(arith, FixedPoint)  # `scope`: binary FX, the tables built
    layer, V = q.layers[0], len(q.vocab)
    tokens, used = ev._start(tokens, False, q.P_mask)  # the saturated parameters the inputs use
    ctx = arith.context((len(tokens),))
    ctx.ovf |= used.base.ovf | used.ovf.any(1)
    B, L = tokens.shape
    positions = np.arange(L)
    rows = positions * V + tokens
    qrow = rows[:, position]
    ctx.ovf |= t.kv_ovf[rows].any(1) | t.q_ovf[qrow]
    seen = positions <= position if layer.causal else np.ones(L, bool)
    mine = np.zeros(L, bool)
    mine[alice] = True
    parties = (seen & mine, seen & ~mine)  # Alice's and Bob's positions that the query sees
    outs, transcripts = [], []
    for h in range(len(layer.heads)):
        s = arith.scores(t.q[h][qrow][:, None, :], t.k[h][rows], ctx, f"H{h}.logits", seen[None, None, :])[:, 0]
        v = t.v[h][rows]  # (B, L, m_v)
        if layer.attention == "softmax":
            M_A, M_B = (np.where(p, s, arith.lo).max(-1) for p in parties)  # an empty side sends lo
            M = np.maximum(M_A, M_B)[:, None]
            dmin, table = exp_table(arith.p, arith.f, arith.rounding)
            raw = s - M
            d = np.clip(raw, arith.lo, 0)
            ctx.note(f"H{h}.d", (raw < arith.lo) & seen)
            e = np.where(seen, table[np.maximum(d, dmin) - dmin], 0)
            if arith.one > arith.hi:
                ctx.note(f"H{h}.exp", (d == 0) & seen)
            Z_A, Z_B = ((e * p).sum(-1) for p in parties)  # exact integers: nothing saturates
            w = arith.sat(arith.round_div(e << arith.f, (Z_A + Z_B)[:, None]), ctx, f"H{h}.attn")
        else:
            M_A = M_B = Z_A = Z_B = None
            w = np.where(seen, arith.relu(s), 0)
        prod = w[:, :, None] * v
        if arith.accumulate == "product":
            prod = arith.sat(arith.round_shift(prod, arith.f), ctx, f"H{h}.out.product")
        P_A, P_B = ((prod * p[None, :, None]).sum(1) for p in parties)
        total = P_A + P_B
        out = arith.sat(total if arith.accumulate == "product" else arith.round_shift(total, arith.f), ctx,
                        f"H{h}.out")
        outs.append(out[:, None, :])
        transcripts.append(Transcript(tokens[:, position], M_A, M_B, Z_A, Z_B, P_A, P_B))
    X = ev.finish_layer(0, t.x0[qrow][:, None, :], outs, ctx)
    return ev.scores(X[:, 0], ctx), ctx.ovf, transcripts


def alice_messages(ev: Evaluator, tokens: np.ndarray, alice: np.ndarray, position: int) -> np.ndarray:
    """Per input (B, L): what Alice sends in Theorem 4's protocol once Bob has spoken, per head her
    max, normalizer and partial sums (softmax) or her partial sums (ReLU), with the input's
    saturation flag.  With Bob's part fixed, equal rows give equal readout scores at `position`
    (Bob's reconstruction is a function of his part and these): (B, K) int64."""
    _, ovf, transcripts = simulate(ev, tokens, alice, position)
    cols = [ovf[:, None].astype(np.int64)]
    for t in transcripts:
        cols += [t.M_A[:, None], t.Z_A[:, None]] if t.M_A is not None else []
        cols.append(t.P_A)
    return np.concatenate(cols, axis=1).astype(np.int64)


def evaluator_scores(ev: Evaluator, tokens: np.ndarray, position: int) -> np.ndarray:
    """The evaluator's readout scores at `position` (what `simulate` must reproduce)."""
    out = ev.forward(tokens)
    return out.scores[:, position - read_from(ev.q)] if out.scores.ndim == 3 else out.scores


# -- counting -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Ranges:
    """How many values each message of one head can take, at Alice and Bob part sizes nA, nB."""

    M: int  # each maximum: a logit code
    Z_A: int
    Z_B: int
    P_A: int  # each coordinate of a partial sum
    P_B: int


def ranges(p: int, f: int, rounding: str, accumulate: str, attention: str, nA: int, nB: int) -> Ranges:
    """Exact ranges of the messages `simulate` sends: a logit code is one of 2^p; an exponential
    lies in [0, e_max] (e_max the largest entry of the exp table), so Z_X in [0, n_X e_max]; a
    weight lies in [0, w_max] (softmax: R(e 2^f / Z) <= min(2^f, hi); ReLU: a logit code); a
    product term in [lo, hi] (rounded and saturated) or, accumulated wide, in
    [w_max lo, w_max hi]."""
    fx = FixedPoint(p, f, rounding)
    e_max = min(1 << f, fx.hi)  # R(exp(0) 2^f), the table's largest entry, without the table
    w_max = min(fx.one, fx.hi) if attention == "softmax" else fx.hi
    span = (fx.hi - fx.lo) if accumulate == "product" else w_max * (fx.hi - fx.lo)
    soft = attention == "softmax"
    return Ranges(1 << p, nA * e_max + 1 if soft else 1, nB * e_max + 1 if soft else 1, nA * span + 1, nB * span + 1)


def window(p: int, f: int, rounding: str) -> int:
    """How many values Alice's gap g = s - M_A to her own max can usefully take: those with a nonzero
    exponential (below them a position contributes nothing, as M >= M_A), and one more for every
    gap below lo when exp(lo) is not 0 (the gap s - M is clipped to lo, whatever M is).

    Without building the exp table (2^f entries and more): R(exp(d 2^-f) 2^f) > 0 exactly when
    exp(d 2^-f) 2^f >= 1 (floor, zero) or >= 1/2 (nearest), i.e. for d >= d0 = ceil(-(f + [nearest])
    ln 2 2^f), an irrational number unless it is 0, decided in 200-bit arithmetic."""
    lo = FixedPoint(p, f).lo
    with mpmath.workprec(200):
        d0 = int(mpmath.ceil(-(f + (rounding == "nearest")) * mpmath.log(2) * mpmath.mpf(2) ** f))
    return 1 - max(d0, lo) + (lo >= d0)


def log2_comb(n: int, k: int) -> float:
    return (math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)) / math.log(2)


def transcripts_two_way(r: Ranges, mv: int, heads: int, queries: int, attention: str) -> int:
    """Distinct transcripts of Theorem 4's protocol: Bob's query token, then per head the maxima,
    normalizers and partial sums of both parties (softmax), or Alice's and Bob's partial sums (ReLU)."""
    per_head = (r.M ** 2 * r.Z_A * r.Z_B if attention == "softmax" else 1) * (r.P_A * r.P_B) ** mv
    return queries * per_head ** heads


def log2_one_way(p: int, f: int, rounding: str, accumulate: str, attention: str, nA: int, mv: int, heads: int,
                 queries: int) -> float:
    """log2 of `messages_one_way`, in float64 (lgamma): for sizes where the integer has millions of bits."""
    if attention == "relu":
        per = mv * math.log2(ranges(p, f, rounding, accumulate, attention, nA, 0).P_A)
    else:
        per = min(log2_comb(nA + (1 << (p * (mv + 1))), nA),
                  p + log2_comb(nA + window(p, f, rounding) * (1 << (p * mv)), nA))
    return per * heads * queries


def messages_one_way(p: int, f: int, rounding: str, accumulate: str, attention: str, nA: int, mv: int, heads: int,
                     queries: int) -> int:
    """Distinct one-way messages from Alice when she does not hear Bob: per query token and head,
    for ReLU her partial sums; for softmax the multiset of (logit code, value codes) over her
    positions (Z and a_j depend on Bob's part), or her max with the multiset of (gap to it inside
    the exp table's window, value codes): the fewer of the two counts."""
    if attention == "relu":
        per = ranges(p, f, rounding, accumulate, attention, nA, 0).P_A ** mv
    else:
        values = 1 << (p * mv)
        per = min(math.comb(nA + (1 << p) * values, nA),
                  (1 << p) * math.comb(nA + window(p, f, rounding) * values, nA))
    return per ** (heads * queries)
