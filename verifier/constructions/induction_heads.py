"""Induction heads with two attention layers: at every position i, the token that followed the
rightmost earlier occurrence of s_i (Sanford, Hsu, Telgarsky 2024, arXiv:2408.14332: one layer
needs h m p = Omega(N), two layers do it with h = m = O(1) heads and width, p = O(log N)).

Inputs are ``<s> s_1 ... s_n`` with the start token at position 0; causal softmax attention, a
readout at every position.

``designed`` (the default): a previous-token head, a ReLU snap, then a matching head with a
recency ramp.  Residual stream (m = 4 sigma + 5 rows):

    TOK (sigma) | BOS | ONE | POS (i) | POS2 (i^2) | PREV (sigma) | PREVC (sigma) | OUT (sigma + 1)

* Layer 1, previous-token head (the quadratic score of Yang et al.'s Transformer Cookbook):
  q_i = gamma (2 (POS - ONE), -ONE), k_j = (POS, POS2), so score(i, j) = gamma (2 (i-1) j - j^2),
  largest at j = i - 1 with a gap of gamma to j = i - 2 and j = i.  The constant -gamma (i-1)^2
  of the completed square is left out: softmax does not see it, and it would only add products
  that must be held in the format.  V/O copies TOK into PREV.
* FFN 1 snaps PREV to 0/1: PREVC[a] = ReLU(2 PREV[a] - 1/2) - ReLU(2 PREV[a] - 3/2).
* Layer 2, matching head: q_i = (lambda TOK, beta ONE, lambda/2 ONE), k_j = (PREVC, POS, BOS),
  so score(i, j) = lambda [s_{j-1} = s_i] + beta j + (lambda/2) [j = 0]: the latest match wins by
  beta over the next match, by lambda/4 over non-matches; the start token wins when nothing
  matches.  V/O copies TOK into OUT and BOS into OUT[BOT].
* Readout: argmax over OUT.  gamma = 4, beta = 2 (``--eta`` sets beta: it must exceed ln 3 for
  the latest match to outweigh the others), lambda = 8 N.

``angles`` (B', for large alphabets; width 11 whatever sigma): tokens as angles c(a; sigma) in a
2-row TOK block; the previous-token head copies the angle into PREV, with no snap; layer 2
scores lambda <c(s_i), PREV_j> + beta j + lambda (1 - g/2) [j = 0], g = 1 - cos(2 pi / sigma), so
a match beats a mismatch by at least lambda g; beta = ln(8/g) + 2, lambda = 4 beta N / g,
gamma = ln(32.2 N / g) + 2.  The readout scores class a as <OUT, c(a; sigma)> and BOT as
2 OUT[BOT].

``sht`` and ``sht-printed``: Sanford, Hsu, Telgarsky 2024b (arXiv:2402.09268), Theorem 4.2 for
k = 1, Appendix D.1 and the embeddings of Lemmas D.1 and D.2 (Appendix F.4), which use
index-specific query and key functions.  In a model with linear maps the product of a token and
its position's angle is made by a ReLU gate in FFN 1, exact for a 0/1 gate and a value in
[-1, 1]: g c = ReLU(c + 2g - 2) - ReLU(-c + 2g - 2).

* Layer 1, lookUp (Lemma D.1): q_i = s1 c(i - 1; N1), k_j = c(j; N1), c(v; M) = (cos 2 pi v/M,
  sin 2 pi v/M), N1 = N + 1 positions; V/O copies TOK into PREV.
* FFN 1 writes QA = sum_a TOK[a] c(D a + i; N') and KA = sum_a PREV[a] c(D a + i; N'),
  N' = D sigma.
* Layer 2, lastOccurrence (Lemma D.2): q_i = s2 (QA, ONE), k_j = (KA, cos(2 pi (N - 1/2)/N') BOS):
  a key whose previous token matches s_i scores cos(2 pi (i - j)/N'), largest for the latest
  match; the start token is the default.  V/O as in ``designed``.

Both rest on a transcription of Appendix D's formulas that was never checked against the paper's
own text (the project has not read Appendices D and F of arXiv:2402.09268): they are *as
transcribed, unverified*, and so is every verdict on them.  ``sht-printed`` takes the spacing as
transcribed, D = N; ``sht`` the corrected D = 2 N, with
the start constant cos(2 pi (N - 1/2)/N') at the new N'.  With D = N a non-matching key whose
previous token is s_i + 1, at distance N - 1, is one angle unit away, as close as a match at
distance 1.  The scales s1, s2 follow Lemma A.2 (hardmax from a margin): each margin times its
scale is ln(8 N), and s1 also covers the gate error 2 eps that PREV's leak eps causes in layer 2.
"""

from __future__ import annotations

import math

import numpy as np

from ..model import Head, Layer, Model, Readout
from ..support.errors import InputError
from ..support.papers import SANFORD_HSU_TELGARSKY_2024, SANFORD_HSU_TELGARSKY_2024B
from ..support.sizes import Cost, model_cost
from .blocks import Layout, matrix, relu_units

THEOREM = SANFORD_HSU_TELGARSKY_2024.cite("Section 1 (two layers suffice)")
SHT_THEOREM = SANFORD_HSU_TELGARSKY_2024B.cite("Theorem 4.2, Lemmas D.1 and D.2, as transcribed, unverified")
VARIANTS = {
    "designed": "previous-token head (quadratic score), ReLU snap, matching head with a recency ramp; "
                "gamma = 4, beta = 2, lambda = 8N",
    "sht": SHT_THEOREM + "; angle spacing 2N (our correction of the transcription)",
    "sht-printed": SHT_THEOREM + "; angle spacing N as transcribed",
    "angles": "B' for large alphabets: tokens as angles c(a; sigma), width 11 for every sigma",
}
GAMMA, BETA = 4.0, 2.0


def cost(task, variant: str = "designed", k=None) -> Cost:
    """P (a row per position) and two layers of O(sigma) rows; d is 4 sigma + 5 (designed), 5 sigma + 9
    (SHT), 11 (angles)."""
    s = task.sigma
    d, rows = {"designed": (4 * s + 5, 6 * s + 8), "angles": (11, 24)}.get(variant, (5 * s + 9, 16 * s + 16))
    return model_cost(f"induction_heads at N={task.N}", d, task.N + 1 + len(task.vocab) + rows)


def build(task, variant: str = "designed", k=None, eta=None, seed: int = 0, kc=None) -> Model:
    if variant == "designed":
        return _designed(task, BETA if eta is None else eta)
    if eta is not None:
        raise InputError(f"--eta sets beta of the designed variant; {variant} has no beta")
    if variant == "angles":
        return _angles_variant(task)
    return _sht(task, spacing=2 * task.N if variant == "sht" else task.N, variant=variant)


def _copy_value(L: Layout, src: str, dst: str, extra: tuple[str, int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """W_V reading block src (and one more row), W_O writing them into block dst."""
    rows = [{(src, a): 1.0} for a in range(L.sizes[src])] + ([{extra: 1.0}] if extra else [])
    W_V = matrix(L, rows)
    W_O = np.zeros((L.d, len(rows)))
    W_O[L[dst], :] = np.eye(L.sizes[dst], len(rows))
    return W_V, W_O


def _stream(task, angles: bool = False, **blocks: int) -> tuple[Layout, np.ndarray]:
    """The layout with TOK | BOS | ONE first, and the token embeddings: TOK one-hot, or the angle
    c(a; sigma) with `angles`."""
    s = task.sigma
    L = Layout(TOK=2 if angles else s, BOS=1, ONE=1, **blocks)
    E = np.zeros((len(task.vocab), L.d))
    E[:s, L["TOK"]] = _angles(np.arange(s), s) if angles else np.eye(s)
    E[task.bos, L.row("BOS")] = 1.0
    E[:, L.row("ONE")] = 1.0
    return L, E


def _model(task, L: Layout, E, P, layers, info, W_U: np.ndarray | None = None, theorem: str = THEOREM) -> Model:
    """The model; the readout is argmax over OUT unless `W_U` is given."""
    s = task.sigma
    if W_U is None:
        W_U = matrix(L, [{("OUT", c): 1.0} for c in range(s + 1)])
    model = Model(E=E, P=P, P_mask=np.ones(len(task.vocab), bool), layers=layers,
                  readout=Readout(W_U, np.zeros(s + 1), "argmax", positions="all"), vocab=list(task.vocab),
                  info={"construction": "induction_heads", "theorem": theorem, "sigma": s, "d": L.d,
                        "layers": 2, "heads": 1, **info}, residual_rows=L.names())
    model.info["n_params"] = model.n_params()
    return model


def _match_layer(L: Layout, W_Q: np.ndarray, W_K: np.ndarray) -> Layer:
    """Layer 2: a head that copies the attended token into OUT (the start token into OUT[BOT])."""
    W_V, W_O = _copy_value(L, "TOK", "OUT", ("BOS", 0))
    return Layer([Head(W_Q, W_K, W_V)], W_O, "softmax", residual=True, causal=True)


def _designed(task, beta: float) -> Model:
    s, N = task.sigma, task.N
    if not beta > 0:
        raise InputError(f"beta (--eta) must be > 0, got {beta}")
    lam = 8.0 * N
    L, E = _stream(task, POS=1, POS2=1, PREV=s, PREVC=s, OUT=s + 1)
    P = np.zeros((N + 1, L.d))
    P[:, L.row("POS")] = np.arange(N + 1)
    P[:, L.row("POS2")] = np.arange(N + 1) ** 2

    layer1 = Layer([previous_token_head(L)], _copy_value(L, "TOK", "PREV")[1], "softmax", residual=True, causal=True)
    relu_units(L, layer1, snap(s))

    match_q = matrix(L, [{("TOK", a): lam} for a in range(s)] + [{("ONE", 0): beta}, {("ONE", 0): lam / 2}])
    match_k = matrix(L, [{("PREVC", a): 1.0} for a in range(s)] + [{("POS", 0): 1.0}, {("BOS", 0): 1.0}])
    return _model(task, L, E, P, [layer1, _match_layer(L, match_q, match_k)],
                  {"variant": "designed", "gamma": GAMMA, "beta": beta, "lambda": lam})


def previous_token_head(L: Layout, gamma: float = GAMMA) -> Head:
    """score(i, j) = gamma (2 (i - 1) j - j^2), largest at j = i - 1; the value is TOK."""
    W_Q = matrix(L, [{("POS", 0): 2 * gamma, ("ONE", 0): -2 * gamma}, {("ONE", 0): -gamma}])
    W_K = matrix(L, [{("POS", 0): 1.0}, {("POS2", 0): 1.0}])
    return Head(W_Q, W_K, _copy_value(L, "TOK", "PREV")[0])


def snap(s: int) -> list:
    """ReLU units for PREVC[a] = ReLU(2 PREV[a] - 1/2) - ReLU(2 PREV[a] - 3/2): 0 below 1/4, 1 above 3/4."""
    return ([({("PREV", a): 2.0}, -0.5, {("PREVC", a): 1.0}) for a in range(s)]
            + [({("PREV", a): 2.0}, -1.5, {("PREVC", a): -1.0}) for a in range(s)])


def _angles_variant(task) -> Model:
    s, N = task.sigma, task.N
    g = 1 - math.cos(2 * math.pi / s)
    beta = math.log(8 / g) + 2
    lam, gamma = 4 * beta * N / g, math.log(32.2 * N / g) + 2
    L, E = _stream(task, angles=True, POS=1, POS2=1, PREV=2, OUT=3)
    P = np.zeros((N + 1, L.d))
    P[:, L.row("POS")] = np.arange(N + 1)
    P[:, L.row("POS2")] = np.arange(N + 1) ** 2
    layer1 = Layer([previous_token_head(L, gamma)], _copy_value(L, "TOK", "PREV")[1], "softmax", residual=True,
                   causal=True)
    match_q = matrix(L, [{("TOK", 0): lam}, {("TOK", 1): lam}, {("ONE", 0): beta}, {("ONE", 0): lam * (1 - g / 2)}])
    match_k = matrix(L, [{("PREV", 0): 1.0}, {("PREV", 1): 1.0}, {("POS", 0): 1.0}, {("BOS", 0): 1.0}])
    W_U = matrix(L, [{("OUT", 0): float(c[0]), ("OUT", 1): float(c[1])} for c in _angles(np.arange(s), s)]
                 + [{("OUT", 2): 2.0}])
    return _model(task, L, E, P, [layer1, _match_layer(L, match_q, match_k)],
                  {"variant": "angles", "gamma": gamma, "beta": beta, "lambda": lam}, W_U)


def _angles(v, M: float) -> np.ndarray:
    v = np.asarray(v, dtype=np.float64)
    return np.stack([np.cos(2 * np.pi * v / M), np.sin(2 * np.pi * v / M)], axis=-1)


def _sht(task, spacing: int, variant: str) -> Model:
    s, N = task.sigma, task.N
    N1, Np = N + 1, spacing * s
    L, E = _stream(task, C1=2, ANG=2 * s, PREV=s, QA=2, KA=2, OUT=s + 1)
    pos = np.arange(N1)
    P = np.zeros((N1, L.d))
    P[:, L["C1"]] = _angles(pos, N1)
    for a in range(s):  # c(D a + i; N') for each symbol a: the angles the gates select from
        P[:, L.row("ANG", 2 * a):L.row("ANG", 2 * a) + 2] = _angles(spacing * a + pos, Np)

    # layer-2 margins: between adjacent match distances, and between the start constant and a match
    start = math.cos(2 * math.pi * (N - 0.5) / Np)
    levels = np.sort(np.unique(np.round(np.append(np.cos(2 * np.pi * np.arange(N) / Np), start), 12)))
    g2 = float(np.diff(levels).min())
    s2 = math.log(8 * N) / g2
    g1 = 1 - math.cos(2 * math.pi / N1)
    s1 = (math.log(8 * N) + math.log(max(8 * 2 * 2 * s2, 1.0))) / g1

    rot = np.array([[math.cos(2 * math.pi / N1), math.sin(2 * math.pi / N1)],
                    [-math.sin(2 * math.pi / N1), math.cos(2 * math.pi / N1)]])  # c(i) -> c(i - 1)
    look_q = matrix(L, [{("C1", c): s1 * rot[r, c] for c in range(2)} for r in range(2)])
    look_k = matrix(L, [{("C1", 0): 1.0}, {("C1", 1): 1.0}])
    W_V, W_O = _copy_value(L, "TOK", "PREV")
    layer1 = Layer([Head(look_q, look_k, W_V)], W_O, "softmax", residual=True, causal=True)

    # FFN 1: gate (TOK[a] or PREV[a]) times c(D a + i; N'), summed over a into QA or KA
    relu_units(L, layer1, [({("ANG", 2 * a + c): sign, (gate, a): 2.0}, -2.0, {(dst, c): sign})
                           for gate, dst in (("TOK", "QA"), ("PREV", "KA")) for a in range(s)
                           for c in range(2) for sign in (1.0, -1.0)])

    last_q = matrix(L, [{("QA", 0): s2}, {("QA", 1): s2}, {("ONE", 0): s2}])
    last_k = matrix(L, [{("KA", 0): 1.0}, {("KA", 1): 1.0}, {("BOS", 0): start}])
    return _model(task, L, E, P, [layer1, _match_layer(L, last_q, last_k)],
                  {"variant": variant, "spacing": spacing, "scale1": s1, "scale2": s2}, theorem=SHT_THEOREM)
