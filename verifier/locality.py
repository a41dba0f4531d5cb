"""Exact locality of a first layer, and its output as a table over windows of tokens.

In FX, with max-subtracted softmax, a key whose exp(s_j - M) rounds to code 0 adds exactly 0 to its
query's output (R(0 v) = 0, and 0 to Z).  If, at query position i, every key position j outside a
window W(i) = {i - w, ..., i} has, for every query token and every token at every position,
s(i, j) - s(i, k) <= T for some k in W(i) (T: the largest argument whose exp code is 0), then
s_j - M <= T and j's weight is exactly 0: the layer's output at i is a function of the tokens of
W(i) only.  In a float format the same holds with T the float64 predecessor of the largest
accumulator value whose exp rounds to 0 (`FloatArith.zero_exp_bound`): a float64 difference of
logits at most T is of an exact one below it.  `first_layer_window` decides this from the
layer-0 logit tables (`verifier.layer0`): with the logits' maximum over the tokens of j and, for
the window, the largest of its positions' minima (M is at least every one of them), one comparison
per (query token, key position).

Under ``overflow = error`` a saturation outside the window would still count (an answer depends on
every flag of its cone, docs/arithmetic.md), so the certificate also asks that no logit outside
the window saturates and that s_j - M cannot leave the range; a layer where either may happen is
not local here.

The output at every (position, window of tokens) is then one table (`window_states`), computed by
the evaluator's own layer (`Evaluator.first_layer`) on V^(w+1) inputs of the longest length, in
which position i holds digit i mod (w + 1) of the input's number: every window sees every
assignment of its tokens.  A causal layer's output at i does not depend on the length after i.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from .arithmetic import Fixed
from .evaluator import Evaluator
from .floats import FloatArith
from .layer0 import ClassTable
from .support.budget import require_memory

MAX_WINDOW_CODES = 1 << 10  # token windows per position at most: V^(w+1)


@dataclass
class Window:
    """The first layer's output at position i depends on the tokens at i - width .. i only; a window
    of tokens is the code sum_k t_{i-k} V^k (a position before 0 holds digit 0)."""

    width: int
    V: int

    @property
    def codes(self) -> int:
        return self.V ** (self.width + 1)

    def code(self, tokens: np.ndarray, i: int) -> np.ndarray:
        """The window codes at position i of token rows (n, >= i + 1)."""
        out = np.zeros(len(tokens), dtype=np.int64)
        for k in range(min(self.width, i) + 1):
            out += tokens[:, i - k] * self.V ** k
        return out


def first_layer_window(fx: "Fixed | FloatArith", queries: list[ClassTable], keys: list[ClassTable],
                       logits: list[np.ndarray], logit_ovf: list[np.ndarray],
                       length: int, max_codes: int = MAX_WINDOW_CODES) -> tuple[Optional[Window], str]:
    """The narrowest window of a causal softmax first layer (every head), over inputs of at most
    `length` positions with any token at any position, or None and why not (also when it holds
    more than `max_codes` token windows)."""
    T = fx.zero_exp_bound()  # None: no exp code is 0, and the window is every position up to i
    V = queries[0].rid.shape[1]
    width = 0
    for tq, tk, S, F in zip(queries, keys, logits, logit_ovf):
        for i in range(length):
            s = S[tq.rid[i][:, None, None], tk.rid[:i + 1][None, :, :]]  # (query token, key position, key token)
            smax, smin = s.max(axis=2), s.min(axis=2)
            outside = np.maximum.accumulate(smax, axis=1)  # [:, j]: max over positions <= j
            inside = np.maximum.accumulate(smin[:, ::-1], axis=1)[:, ::-1]  # [:, j]: max over positions >= j
            # a window starting at position a = i - w holds when every position < a stays T below it
            ok = np.ones(i + 1, dtype=bool)
            ok[1:] = T is not None and (outside[:, :-1] - inside[:, 1:] <= T).all(axis=0)
            if fx.overflow == "error":
                hit = np.logical_or.accumulate(F[tq.rid[i][:, None, None], tk.rid[:i + 1][None, :, :]].any(axis=(0, 2)))
                low = np.minimum.accumulate(smin.min(axis=0)) - smax.max()
                ok[1:] &= ~hit[:-1] & (low[:-1] >= fx.softmax_floor)
            a = int(np.flatnonzero(ok).max())
            width = max(width, i - a)
            if V ** (width + 1) > max_codes:
                zero = "" if T is not None else " (no exp code of the format is 0: every key weighs)"
                return None, (f"its first layer's window is {width + 1} positions wide at position {i}{zero}: "
                              f"{V}^{width + 1} token windows, more than {max_codes}")
    return Window(width, V), ""


def window_states(ev: Evaluator, window: Window) -> tuple[np.ndarray, np.ndarray]:
    """The first layer's output at every (position, window code): (L_max, codes, d), and whether
    computing it saturated there (its own embedding, key and value, its query side): (L_max, codes)."""
    L, C, w, V = ev.q.max_len, window.codes, window.width, window.V
    require_memory(8.0 * C * L * (L * max(h.W_Q.shape[0] for h in ev.q.layers[0].heads) + 4 * ev.q.d),
                   f"the first layer's window table ({C:,} windows x {L:,} positions)")
    b = np.arange(C)
    tokens = (b[:, None] // V ** (np.arange(L) % (w + 1))[None, :]) % V
    X, kovf, qovf = ev.first_layer(tokens)
    states = np.empty((L, C, X.shape[2]), dtype=X.dtype)
    flags = np.zeros((L, C), dtype=bool)
    for i in range(L):
        code = window.code(tokens, i)
        states[i, code], flags[i, code] = X[:, i], kovf[:, i] | qovf[:, i]
    return states, flags
