"""Dyck-(2,2) at every prefix: a transformer whose precision grows with N, and a recurrent model
of constant size (Bhattamishra et al. 2024, arXiv:2406.09347, Section 4.3 and Theorem 5: one layer
needs m H >= (N - 1)/(3 (p + log N)); "two-layer Transformers can model bounded-depth Dyck
languages", after Yao et al. 2021, arXiv:2105.11115; a 7-state DFA recognises Dyck-(2,2)).

``transformer`` (the default).  Inputs ``<s> x_1 ... x_n``; causal softmax; a readout at every
position.  If the prefix is legal, the stack after x_i is fixed by the per-type counts
A_i = #( - #), B_i = #[ - #] and by x_i, x_{i-1} (depth 2 only: the top is x_i, and at depth 1
the counts name the element), so the legality of position i is local; a second attention layer
counts the illegal positions so far.  Residual stream:

    TOK (4) | BOS | ONE | POS | POS2 | UA | UB | UV | PREV (4) | PREVC (4) | GE (5) | EMPTY | LEGAL | AGG | ACC

* Layer 1, two heads: a uniform head (W_Q = W_K = 0) with values (oa, ob, bos) writes
  UA = A_i w, UB = B_i w, UV = w, where w = R(1/(i+1)) is one rounded weight shared by every
  position, so UA/UV = A_i exactly; the previous-token head of the induction-heads construction
  (gamma = 4) copies TOK into PREV.  FFN 1, clip gadgets clip01(z) = ReLU(z) - ReLU(z - 1):
  PREVC = clip01(2 PREV - 1/2) and GE[c] = clip01(K (Q - (c - 1/2) UV) + 1/2) = [q >= c] for
  Q = q w, with (Q, c) = (UA, 0), (UB, 0), (UA + UB, 1), (UA + UB, 2), (UA + UB, 3), K = 2 (N + 1).
* Layer 2 has an FFN and an attention that writes nothing (W_O = 0): the design needs two hidden
  ReLU layers before the second attention, and a layer of this model has one FFN.  Its FFN forms
  the ANDs, AND(x_1..x_r) = ReLU(x_1 + ... + x_r - (r - 1)), into EMPTY ([A = B = 0]) and LEGAL
  (an opener with both counts >= 0 and depth <= 2; a closer that empties a depth-1 stack; a
  closer at depth 2 whose partner is x_{i-1}).
* Layer 3: a uniform head averages illegal = is_open + is_close - LEGAL, AGG = w #illegal; FFN 3
  writes ACC = ReLU(EMPTY - K AGG): 1 iff x_1 .. x_i is in Dyck-(2,2).
* Readout: class 1 scores ACC, class 0 scores 1/2.

Exactness needs K w >= 1, i.e. R(1/(N+1)) >= 1/(2 (N + 1)): about log2(N + 1) + 1 fraction bits;
the previous-token head needs about 2 log2 N + 4 integer bits.

``recurrent``: the automaton as an Elman network h_t = ReLU(W h_{t-1} + U x_t + b) of 29 ReLUs
for every N: a unit per (state before x_t, x_t) over the 7 live states, active iff that is the
transition taken, and a start unit for ``<s>``; the state after x_t is the sum of the units whose
transition enters it, and the reject sink is "no unit active", which stays so.  Weights are 0, 1
and -1: exact at p = 4, f = 1 for every N.
"""

from __future__ import annotations

import numpy as np

from ..model import Head, Layer, Model, Readout, Recurrent
from ..support.papers import BHATTAMISHRA_2024
from ..support.sizes import Cost, model_cost
from ..tasks.sequences import DYCK22_ALPHABET, DYCK22_DFA, DYCK22_STATES
from .blocks import Layout, matrix, relu_units
from .induction_heads import GAMMA, previous_token_head, snap

THEOREM = BHATTAMISHRA_2024.cite("Section 4.3, Theorem 5 (the recognisers of the easy side)")
VARIANTS = {"transformer": "two attention layers (counts and previous token; count of illegal positions) "
                           "with ReLU clip and AND gadgets",
            "recurrent": "the 7-state automaton as an Elman network of 29 ReLUs, for every N"}
OPEN, CLOSE = {"(": 0, "[": 2}, {")": 1, "]": 3}
GE = [("UA", 0), ("UB", 0), ("S", 1), ("S", 2), ("S", 3)]  # GE[c] = [Q >= c]


def build(task, variant: str = "transformer", k=None, eta=None, seed: int = 0, kc=None):
    return _recurrent(task) if variant == "recurrent" else _transformer(task)


STREAM = Layout(TOK=4, BOS=1, ONE=1, POS=1, POS2=1, UA=1, UB=1, UV=1, PREV=4, PREVC=4, GE=len(GE),
                EMPTY=1, LEGAL=1, AGG=1, ACC=1)


def cost(task, variant: str = "transformer", k=None) -> Cost:
    """The transformer: P (a row per position) and three layers of a few dozen rows of width d; the
    automaton: 29 units for every N."""
    if variant == "recurrent":
        return model_cost("dyck22 (recurrent)", 29, 29 + 5 + 2)
    return model_cost(f"dyck22 at N={task.N}", STREAM.d, task.N + 1 + 60)


def _transformer(task) -> Model:
    N = task.N
    K = 2.0 * (N + 1)
    L = STREAM
    E = np.zeros((len(task.vocab), L.d))
    E[:4, L["TOK"]] = np.eye(4)
    E[task.bos, L.row("BOS")] = 1.0
    E[:, L.row("ONE")] = 1.0
    P = np.zeros((N + 1, L.d))
    P[:, L.row("POS")] = np.arange(N + 1)
    P[:, L.row("POS2")] = np.arange(N + 1) ** 2
    tok = {c: ("TOK", i) for i, c in enumerate(DYCK22_ALPHABET)}

    # layer 1: uniform counts (values padded to the previous-token head's 4 rows) and previous token
    prev = previous_token_head(L)
    count_v = matrix(L, [{tok["("]: 1.0, tok[")"]: -1.0}, {tok["["]: 1.0, tok["]"]: -1.0}, {("BOS", 0): 1.0}, {}])
    uniform = Head(np.zeros_like(prev.W_Q), np.zeros_like(prev.W_K), count_v)
    W_O1 = matrix(L, [{("UA", 0): 1.0}, {("UB", 0): 1.0}, {("UV", 0): 1.0}, {}]
                  + [{("PREV", a): 1.0} for a in range(4)]).T.copy()
    layer1 = Layer([uniform, prev], W_O1, "softmax", residual=True, causal=True)
    clips = []  # GE[c] = clip01(z) = ReLU(z) - ReLU(z - 1)
    for c, (q, at_least) in enumerate(GE):
        Q = {("UA", 0): K, ("UB", 0): K} if q == "S" else {(q, 0): K}
        z = {**Q, ("UV", 0): -K * (at_least - 0.5)}
        clips += [(z, 0.5, {("GE", c): 1.0}), (z, -0.5, {("GE", c): -1.0})]
    relu_units(L, layer1, snap(4) + clips)

    # layer 2: no attention; the ANDs
    silent = Head(np.zeros((1, L.d)), np.zeros((1, L.d)), np.zeros((1, L.d)))
    layer2 = Layer([silent], np.zeros((L.d, 1)), "softmax", residual=True, causal=True)
    ge = {name: ("GE", c) for c, name in enumerate(["A0", "B0", "S1", "S2", "S3"])}
    is_open = {tok["("]: 1.0, tok["["]: 1.0}
    is_close = {tok[")"]: 1.0, tok["]"]: 1.0}
    one_left = {ge["A0"]: 1.0, ge["B0"]: 1.0, ge["S1"]: 1.0, ge["S2"]: -1.0}  # A, B >= 0 and A + B = 1
    relu_units(L, layer2, [
        ({ge["A0"]: 1.0, ge["B0"]: 1.0, ge["S1"]: -1.0}, -1.0, {("EMPTY", 0): 1.0}),
        ({**is_open, ge["S3"]: -1.0, ge["A0"]: 1.0, ge["B0"]: 1.0}, -2.0, {("LEGAL", 0): 1.0}),
        ({**is_close, ge["A0"]: 1.0, ge["B0"]: 1.0, ge["S1"]: -1.0}, -2.0, {("LEGAL", 0): 1.0}),
        ({tok[")"]: 1.0, ("PREVC", 0): 1.0, **one_left}, -4.0, {("LEGAL", 0): 1.0}),
        ({tok["]"]: 1.0, ("PREVC", 2): 1.0, **one_left}, -4.0, {("LEGAL", 0): 1.0}),
    ])

    # layer 3: the share of illegal positions so far, then accept
    illegal_v = matrix(L, [{**is_open, **is_close, ("LEGAL", 0): -1.0}])
    count3 = Head(np.zeros((1, L.d)), np.zeros((1, L.d)), illegal_v)
    layer3 = Layer([count3], matrix(L, [{("AGG", 0): 1.0}]).T.copy(), "softmax", residual=True, causal=True)
    relu_units(L, layer3, [({("EMPTY", 0): 1.0, ("AGG", 0): -K}, 0.0, {("ACC", 0): 1.0})])

    W_U = matrix(L, [{}, {("ACC", 0): 1.0}])
    model = Model(E=E, P=P, P_mask=np.ones(len(task.vocab), bool), layers=[layer1, layer2, layer3],
                  readout=Readout(W_U, np.array([0.5, 0.0]), "argmax", positions="all"), vocab=list(task.vocab),
                  info={"construction": "dyck22", "theorem": THEOREM, "variant": "transformer", "K": K,
                        "gamma": GAMMA, "d": L.d, "attention_layers": 2, "layers": 3, "heads": [2, 1, 1]},
                  residual_rows=L.names())
    model.info["n_params"] = model.n_params()
    return model



def _recurrent(task) -> Recurrent:
    live = len(DYCK22_STATES)
    units = [(q, a) for q in range(live) for a in range(4)]  # then the start unit
    h = len(units) + 1
    start = h - 1
    enters = np.zeros((live, h))  # enters[q] . h_t = [the state after x_t is q]
    for u, (q, a) in enumerate(units):
        if DYCK22_DFA[q, a] < live:
            enters[DYCK22_DFA[q, a], u] = 1.0
    enters[0, start] = 1.0
    W = np.zeros((h, h))
    U = np.zeros((len(task.vocab), h))
    for u, (q, a) in enumerate(units):
        W[u] = enters[q]  # unit (q, a) = ReLU([state = q] + [x_t = a] - 1)
        U[a, u] = 1.0
    U[task.bos, start] = 1.0
    b = np.where(np.arange(h) == start, 0.0, -1.0)
    W_U = np.vstack([np.zeros(h), enters[0]])
    return Recurrent(U, W, b, np.zeros(h), Readout(W_U, np.array([0.5, 0.0]), "argmax", positions="all"),
                     list(task.vocab), {"construction": "dyck22", "theorem": THEOREM, "variant": "recurrent",
                                        "hidden": h, "states": live,
                                        "n_params": int(U.size + W.size + 2 * h + W_U.size + 2)})
