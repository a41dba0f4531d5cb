"""Equality with two layers (Bhattamishra et al. 2024, arXiv:2406.09347, Theorem 6, Appendix F.2).

Tokens are the bits; bit 0 embeds as -1 and bit 1 as +1 (F.2 remaps to {-1, 1}).  Slots:
c0 the bit, c1 the retrieved bit, B3 = T(i), B4 = T(pi(i)) with pi(i) = i for i <= N/2 and
i - N/2 after, cst = 1, g the XOR feature, m the mean of the features.

* Layer 1, one head: Q = eta [B4, cst], K = [B3, -1/2 cst], V = c0 written into c1 (so position
  i retrieves x_{pi(i)}); a ReLU FFN writes x_i XOR x_{pi(i)} into g.  Residual connections.
* Layer 2, one head: W_Q = 0, so every weight is R(1/N); V = g written into m.
* Readout: one threshold bit "EQ = 1 iff m is below the OR threshold", y = -m.

Variants (every difference from the paper, with its line):

``paper`` -- F.2 as printed.
  * T: Corollary 8.1's 1/4-orthogonal sign vectors (`sign_vectors.corollary_81`).
  * eta = ln N + Kc ln 2N, "Thus, for eta = log N + Kc log 2N, the softmax attention weight at
    j = i - N/2 will be rounded to 1", with the arithmetic's Kc (`Fixed.kc`: the grid's step is
    N^-Kc; Kc = f / log2 N for FX(p, f), the B.2 grid's own Kc).
  * XOR: "a simple ReLU FFN can compute the XOR of the first two values": the exact one on +-1,
    (ReLU(a - b) + ReLU(b - a)) / 2, which assumes the retrieved bit is exact.
  * Layer 2: "If Att(X)_N >= 1/N, then the FFN can output 1 and it can output 0 otherwise":
    INEQ = I[m >= 1/N], so EQ = I[-m > -1/N].
  * Typos fixed because nothing can be built otherwise: d = 3 + 2k,
    not 2 + 2k; Q = eta [T(pi(i)), 1] for i > N/2 too (printed without the 1); the 4th block is
    T(i - N/2) after retrieval (printed T(i)).
``corrected`` -- soft attention with a derived scale, and a robust FFN.
  * T: Hadamard rows for small N (exactly orthogonal), else random signs checked <= 1/4.
  * eta = 2 ln(3(N - 1)): the target weight is >= 3/4 under Cor 8.1 (with exact T, far more).
  * XOR = ReLU(a-b-1/2) - ReLU(a-b-3/2) + ReLU(b-a-1/2) - ReLU(b-a-3/2): exactly 0 or 1 as long as
    the retrieved bit is within 1/2 of +-1.
  * Layer 2 (our departure): position 1, whose feature is always 0, also carries the value -1/2 in
    a slot ref, and V = g + ref, so m = R(1/N) (sum of the features - 1/2) up to rounding, and
    EQ = I[-m > 0].  The threshold then scales with the computed weight R(1/N) instead of sitting at
    a fixed 1/N, which no rounding of R(1/N) can meet exactly (the paper's threshold has no slack).
Both add slots g and m because the layers are residual (the paper writes the XOR into the first
coordinate; the residual version is equivalent, docs/constructions.md, "Conventions").
"""

from __future__ import annotations

import math

import numpy as np

from ..budget import require_weights
from ..errors import InputError
from ..model import Head, Layer, Model, Readout
from ..papers import BHATTAMISHRA_2024
from .sign_vectors import corollary_81, sign_vectors

THEOREM = BHATTAMISHRA_2024.cite("Theorem 6, Appendix F.2")
VARIANTS = {
    "paper": "F.2 as printed: eta = ln N + Kc ln 2N, Cor 8.1 T, exact XOR FFN, OR threshold at 1/N",
    "corrected": "eta = 2 ln(3(N-1)), robust 4-unit XOR FFN, OR threshold at 1/2 feature",
}


def paper_eta(N: int, kc: float | None) -> float:
    """F.2's stated eta = ln N + Kc ln 2N (natural logs), with the arithmetic's Kc."""
    if kc is None:
        raise InputError("the paper's eta depends on the precision (Kc): give the arithmetic (--f, or --format b2:KC)")
    return math.log(N) + kc * math.log(2 * N)


def scale(eta: float | None, paper: bool, N: int, kc: float | None, corrected: float, corrected_rule: str,
          printed: str = "ln N + Kc ln 2N") -> tuple[float, str]:
    """The attention scale and its rule: the user's, F.2's printed one, or the corrected one."""
    if eta is not None:
        return float(eta), "user"
    if paper:
        return paper_eta(N, kc), f"{printed}, Kc = {kc:.4g} (the arithmetic's)"
    return corrected, corrected_rule


def retrieval_eta(N: int) -> float:
    """Target weight >= 3/4 under Cor 8.1 scores (+1/4 vs -1/4): eta >= 2 ln(3(N - 1))."""
    return 2 * math.log(3 * max(N - 1, 1))


def build(task, variant: str = "corrected", k: int | None = None, eta: float | None = None, seed: int = 0,
          kc: float | None = None) -> Model:
    N = task.N
    paper = variant == "paper"
    if k is not None:
        require_weights(f"equality with k={k}", 2 * k + 6, N + 2 * k + 16)
    sv = corollary_81(N, k, seed) if paper else sign_vectors(N, k, seed)
    T = sv.T
    k = T.shape[1]
    h = N // 2
    c0, c1, B3, B4, cst, g, m = 0, 1, slice(2, 2 + k), slice(2 + k, 2 + 2 * k), 2 + 2 * k, 3 + 2 * k, 4 + 2 * k
    ref = 5 + 2 * k
    d = ref + (0 if paper else 1)
    require_weights(f"equality at N={N}", d, N + 2 * k + 16)
    eta_value, rule = scale(eta, paper, N, kc, retrieval_eta(N), "2 ln(3(N-1))")

    E = np.zeros((2, d))
    E[0, c0], E[1, c0] = -1.0, 1.0
    P = np.zeros((N, d))
    for i in range(N):  # position i holds x_{i+1}
        P[i, B3] = T[i]
        P[i, B4] = T[i if i < h else i - h]
        P[i, cst] = 1.0
    if not paper:
        P[0, ref] = -0.5

    W_Q = np.zeros((k + 1, d)); W_Q[:k, B4] = eta_value * np.eye(k); W_Q[k, cst] = eta_value
    W_K = np.zeros((k + 1, d)); W_K[:k, B3] = np.eye(k); W_K[k, cst] = -0.5
    W_V = np.zeros((1, d)); W_V[0, c0] = 1.0
    W_O = np.zeros((d, 1)); W_O[c1, 0] = 1.0
    diff = np.zeros((2, d)); diff[0, c0], diff[0, c1], diff[1, c0], diff[1, c1] = 1, -1, -1, 1  # a-b, b-a
    if paper:
        W1, b1 = diff, np.zeros(2)
        W2 = np.zeros((d, 2)); W2[g, :] = 0.5
    else:
        W1, b1 = np.concatenate([diff[:1], diff[:1], diff[1:], diff[1:]]), np.array([-0.5, -1.5, -0.5, -1.5])
        W2 = np.zeros((d, 4)); W2[g, :] = [1, -1, 1, -1]
    layer1 = Layer([Head(W_Q, W_K, W_V)], W_O, "softmax", residual=True, causal=False,
                   W1=W1, b1=b1, W2=W2, b2=np.zeros(d))
    V2 = np.zeros((1, d)); V2[0, g] = 1.0
    if not paper:
        V2[0, ref] = 1.0
    O2 = np.zeros((d, 1)); O2[m, 0] = 1.0
    layer2 = Layer([Head(np.zeros((1, d)), np.zeros((1, d)), V2)], O2, "softmax", residual=True, causal=False)
    W_U = np.zeros((1, d)); W_U[0, m] = -1.0
    theta = -1.0 / N if paper else 0.0
    info = {"construction": "equality", "theorem": THEOREM, "variant": variant, "N": N, "k": k, "d": d,
            "eta": eta_value, "eta_rule": rule, "seed": seed, "heads": 1, "layers": 2,
            "readout": f"EQ = I[-m > {theta:.6g}]", **sv.describe()}
    model = Model(E=E, P=P, P_mask=np.ones(2, bool), layers=[layer1, layer2],
                  readout=Readout(W_U, np.zeros(1), "threshold", theta), vocab=["0", "1"], info=info)
    model.info["n_params"] = model.n_params()
    return model
