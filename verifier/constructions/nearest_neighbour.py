"""Nearest neighbour (and MQAR) with two layers (Bhattamishra et al. 2024, arXiv:2406.09347,
Theorem 7, Appendix G.2).

Positions q = 1..2k-1 (1-based); x_i sits at q = 2i - 1 and y_i at q = 2i.  Slots: X (d'), Y,
C (+1 on vectors, -2 on labels), B4 = T(q), B5 = T(q + 1) on vectors and T(q) on labels, B6
(r, the retrieved address).  Embedding z_{2i-1} = [x_i, 0, 1, T(2i-1), T(2i), 0] and
z_{2i} = [0, y_i, -2, T(2i), T(2i), 0]: the token gives X, Y, C; the position gives B4, B5.

* Layer 1 (find the nearest neighbour, fetch the address of its label):
  Q = eta [X, C, -10 B4], K = [X, 3 C, B4], V = 2 sqrt(r) B5 written into B6; the FFN clips B6 to
  [-1, 1] (sigma(a) = ReLU(a + 1) - ReLU(a - 1) - 1, in residual form), giving T_s(2 j*).
  eta = (5 / (4 gamma)) ln(18 N), as printed (correct with the natural log).
* Layer 2 (fetch the label): K = B4, V = Y written into Y (0 at the query), Q from B6.
* Readout: one threshold bit, y_hat = I[Y > 1/2].
Causal attention: the paper evaluates every prefix; with the mask one pass gives them all.

Variants:

``literal`` -- cannot be built: see UNBUILDABLE.
``paper`` -- the closest buildable reading of G.2:
  * K's middle entry is 3 C, so labels get -6 (the paper's own computation "0 - 6 +- gamma/10"),
    not the printed -2.3.
  * Layer 2 query as printed, Q = (1/r) T_s(2 j*) = T(2 j*)/sqrt(r) ("(1/k) T_s", k = our r), with
    no scale, so the target's score is 1/sqrt(r), not "greater than 1 - gamma/100".
  * T: width O(log N) as the size claim needs, i.e. Corollary 8.1's 1/4-orthogonal vectors; the
    proof's |<T(i), T(j)>| <= gamma/100 does not hold at that width.
  * The paper's final "apply sigma" does not turn a label in [0, 1] into a bit; we threshold at 1/2.
``corrected``:
  * T: Hadamard rows of order 2^ceil(log2 2N) (exactly orthogonal), whatever gamma; a given --k
    gives random signs, with the gamma/100 Gram condition checked and reported.
  * Layer 2: Q = eta2 T(2 j*) (read B6, scale eta2 / sqrt(r)), eta2 = ln(18 N) / (1 - gamma/50):
    weight >= 9/10 on the label.
"""

from __future__ import annotations

import math

import numpy as np

from ..budget import require_weights
from ..model import Head, Layer, Model, Readout
from ..papers import BHATTAMISHRA_2024
from .sign_vectors import corollary_81, sign_vectors

THEOREM = BHATTAMISHRA_2024.cite("Theorem 7, Appendix G.2")
VARIANTS = {
    "paper": "G.2 as printed where linear: K label entry 3C = -6, layer-2 Q = (1/r) T_s, Cor 8.1 T",
    "corrected": "A.4: Hadamard T, layer-2 Q = eta2 T(2j*), eta2 = ln(18N)/(1 - gamma/50)",
}
UNBUILDABLE = ("G.2 prints the keys K(z_{2i-1}) = [x_i, 3, T(2i-1)] and K(z_{2i}) = [0, -2.3, T(2i)]. A key map "
               "is linear in z, so its middle entry is a C + b Y: 3 on inputs (C = 1, Y = 0) forces a = 3, and "
               "then a label with y_i = 0 (C = -2) gets -6, never -2.3. The closest "
               "buildable reading is --variant paper (middle entry 3 C).")


def layer1_eta(N: int, gamma: float) -> float:
    return 5.0 / (4.0 * gamma) * math.log(18 * N)


def layer2_eta(N: int, gamma: float) -> float:
    return math.log(18 * N) / (1.0 - gamma / 50.0)


def build(task, variant: str = "corrected", k: int | None = None, eta: float | None = None, seed: int = 0,
          kc: float | None = None) -> Model:
    N, gamma, codebook = task.N, task.gamma, task.codebook
    paper = variant == "paper"
    count = 2 * N
    if k is not None:
        require_weights(f"{task.name} with k={k}", codebook.shape[1] + 2 + 3 * k, len(codebook) + 2 * N + 14 * k)
    if paper:
        sv = corollary_81(count, k, seed)
    else:
        k = (1 << math.ceil(math.log2(count))) if k is None else k
        sv = sign_vectors(count, k, seed, thresh=gamma / 100, two_sided=True)
    T = sv.T  # row q-1 is T(q)
    r = T.shape[1]
    dx = codebook.shape[1]
    X, Y, C = slice(0, dx), dx, dx + 1
    B4, B5, B6 = (slice(dx + 2 + j * r, dx + 2 + (j + 1) * r) for j in range(3))
    d = dx + 2 + 3 * r
    V = len(codebook)
    require_weights(f"{task.name} at N={N}", d, V + 2 * N + 14 * r)
    eta1 = layer1_eta(N, gamma) if eta is None else float(eta)
    eta2 = layer2_eta(N, gamma)

    E = np.zeros((V + 2, d))
    E[:V, X] = codebook
    E[:V, C] = 1.0
    E[V + 1, Y] = 1.0
    E[V:, C] = -2.0
    L = 2 * N - 1
    P = np.zeros((L, d))
    for q in range(1, L + 1):
        P[q - 1, B4] = T[q - 1]
        P[q - 1, B5] = T[q] if q % 2 else T[q - 1]

    eye = np.eye(r)
    W_Q = np.zeros((dx + 1 + r, d)); W_Q[:dx, X] = eta1 * np.eye(dx); W_Q[dx, C] = eta1; W_Q[dx + 1:, B4] = -10 * eta1 * eye
    W_K = np.zeros((dx + 1 + r, d)); W_K[:dx, X] = np.eye(dx); W_K[dx, C] = 3.0; W_K[dx + 1:, B4] = eye
    W_V = np.zeros((r, d)); W_V[:, B5] = 2 * math.sqrt(r) * eye
    W_O = np.zeros((d, r)); W_O[B6, :] = eye
    W1 = np.zeros((4 * r, d))
    for j, sign in enumerate([1, 1, 1, -1]):
        W1[j * r:(j + 1) * r, B6] = sign * eye
    b1 = np.concatenate([np.ones(r), -np.ones(r), np.zeros(r), np.zeros(r)])
    W2 = np.zeros((d, 4 * r))
    for j, sign in enumerate([1, -1, -1, 1]):  # sigma(h) - h = ReLU(h+1) - ReLU(h-1) - ReLU(h) + ReLU(-h) - 1
        W2[B6, j * r:(j + 1) * r] = sign * eye
    b2 = np.zeros(d); b2[B6] = -1.0
    layer1 = Layer([Head(W_Q, W_K, W_V)], W_O, "softmax", residual=True, causal=True, W1=W1, b1=b1, W2=W2, b2=b2)
    scale = 1.0 / r if paper else eta2 / math.sqrt(r)
    Q2 = np.zeros((r, d)); Q2[:, B6] = scale * eye
    K2 = np.zeros((r, d)); K2[:, B4] = eye
    V2 = np.zeros((1, d)); V2[0, Y] = 1.0
    O2 = np.zeros((d, 1)); O2[Y, 0] = 1.0
    layer2 = Layer([Head(Q2, K2, V2)], O2, "softmax", residual=True, causal=True)
    W_U = np.zeros((1, d)); W_U[0, Y] = 1.0
    info = {"construction": "nearest_neighbour", "theorem": THEOREM, "variant": variant, "N": N, "dim": dx,
            "gamma": round(gamma, 6), "r": r, "d": d, "eta": eta1, "eta_rule": "(5/(4 gamma)) ln 18N"
            if eta is None else "user", "layer2_query": "(1/r) T_s (printed)" if paper else
            f"eta2 T, eta2 = ln(18N)/(1 - gamma/50) = {eta2:.6g}", "seed": seed, "heads": 1, "layers": 2,
            **sv.describe()}
    if paper:
        info["K_label_entry"] = "3 C = -6 (printed -2.3: not linear)"
    model = Model(E=E, P=P, P_mask=np.ones(V + 2, bool), layers=[layer1, layer2],
                  readout=Readout(W_U, np.zeros(1), "threshold", 0.5), vocab=list(task.vocab), info=info)
    model.info["n_params"] = model.n_params()
    return model
