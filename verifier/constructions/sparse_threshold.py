"""Thresholds of s-sparse features with two layers (Bhattamishra et al. 2024, arXiv:2406.09347,
Theorem 13, Appendix F.3).  Also builds disjointness, the instance I_i = {i, i + N/2}, g = AND, b = 0.

Input: BOS at position 0, then the bits x_1..x_N as -1/+1.  Slots: c0 the bit, A = T(i), blocks
B_1..B_s = T(I_i^1), ..., T(I_i^s) (padded with T(0), the BOS position), cst = 1, z_1..z_s the
retrieved bits, (corrected only) t the truth table of g_{I_i}, g the feature, m the mean.

* Layer 1, s heads: head h has Q = eta [B_h, cst], K = [A, -1/2 cst], V = c0 written into z_h;
  a ReLU FFN turns z into the feature g_{I_i}(x).  Residual connections.
* Layer 2, one head with W_Q = 0: weights R(1/(N+1)) over the N+1 tokens; V = g into m.
* Readout: one threshold bit on m.

Variants:

``paper`` -- F.3 as printed, with what it leaves open copied from F.2:
  * BOS carries the value 0 ("will contain 0 for the [BOS] token").
  * Query bias and scale: F.3 gives only "the query vector contains the j-th block"; we take
    F.2's [T, 1] / [T, -1/2] and F.2's printed eta = ln N + Kc ln 2N (Kc from the arithmetic: f / log2 N for FX).
  * T: Corollary 8.1's 1/4-orthogonal vectors.
  * FFN: "the feedforward network can then compute the function g_{I_i}(x) at every position" --
    but one FFN is shared by every position, so as printed it can
    only compute one g.  We build it when every non-empty feature has s bits and the same g (the
    pattern sum over u with g(u) = 1 of ReLU(<u, z> - (s - 1)), exact on +-1), and refuse other
    instances with an error.
  * Layer 2: "subtract b/(N+1) and implement a threshold": output 1 iff m > b/(N+1).
``corrected`` -- truth tables in the embedding, with one hidden layer:
  * BOS carries +1, so padded heads read +1; each position holds the truth table t_i of its g
    over {-1,1}^s with padded coordinates fixed at +1 (all 0 for BOS and empty features).
  * FFN: one unit per u in {-1,1}^s, ReLU(<u, z> + s t_i[u] - (2s - 1)): 1 when z = u and
    t_i[u] = 1, 0 otherwise, and within 2 s delta of that when each z_h is within 2 delta.
    (One could round z first with a second hidden layer; we instead make delta small.)
  * eta = (4/3) ln(8 s N (N+1)): the scores are >= 1/2 at the target and <= -1/4 elsewhere under
    Cor 8.1, so the target weight is >= 1 - delta with delta = 1/(8 s (N+1)), and the N features
    err by less than 1/4 in total.
  * T: Hadamard rows for small N, else random signs checked <= 1/4.
  * Layer 2 (our departure): BOS, whose feature is 0, also carries -(floor(b) + 1/2) in a slot
    ref, and V = g + ref, so m = R(1/(N+1)) (sum of the features - floor(b) - 1/2) up to rounding;
    output 1 iff m > 0.  The threshold scales with the computed weight R(1/(N+1)); a fixed
    threshold (the paper's b/(N+1), or any other) has no slack on one side under some rounding.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from ..budget import require_weights
from ..errors import UnbuildableError
from ..model import Head, Layer, Model, Readout
from ..papers import BHATTAMISHRA_2024
from .equality import scale
from .sign_vectors import corollary_81, sign_vectors

THEOREM = BHATTAMISHRA_2024.cite("Theorem 13, Appendix F.3")
VARIANTS = {
    "paper": "F.3 as printed: BOS value 0, F.2's printed eta, Cor 8.1 T, one shared exact g, threshold at b/(N+1)",
    "corrected": "BOS value +1, truth tables in the embedding, eta = (4/3) ln(8sN(N+1)), BOS-referenced threshold",
}


def corrected_eta(N: int, s: int) -> float:
    return 4.0 / 3.0 * math.log(8 * s * N * (N + 1))


def _patterns(s: int) -> np.ndarray:
    """u in {-1,1}^s in the order of g's truth table (first coordinate most significant, bit 1 = +1)."""
    return np.array(list(itertools.product([-1, 1], repeat=s)), dtype=np.float64)


def build(task, variant: str = "corrected", k: int | None = None, eta: float | None = None, seed: int = 0,
          kc: float | None = None) -> Model:
    N, inst = task.N, task.inst
    s = max(1, inst.s)
    paper = variant == "paper"
    shared = inst.shared_g()
    if paper and shared is None:
        raise UnbuildableError("sparse_threshold --variant paper: F.3 computes every feature with one FFN shared by "
                         "all positions, so as printed it can only compute one g of s bits; this instance has "
                         "features of different sizes or functions. Use "
                         "--variant corrected, or an instance with one g (--shared-g)")
    if k is not None:
        require_weights(f"{task.name} with k={k}", (s + 1) * k + 2 ** s + s + 4, N + 2 * s * k + 2 ** (s + 1) + 8)
    sv = corollary_81(N + 1, k, seed) if paper else sign_vectors(N + 1, k, seed)
    T = sv.T  # row i is T(i), i = 0..N
    r = T.shape[1]
    U = _patterns(s)
    n_t = 0 if paper else len(U)
    c0, A = 0, slice(1, 1 + r)
    B = [slice(1 + r + h * r, 1 + r + (h + 1) * r) for h in range(s)]
    cst = 1 + r + s * r
    z = cst + 1 + np.arange(s)
    t = slice(cst + 1 + s, cst + 1 + s + n_t)
    g, m, ref = cst + 1 + s + n_t, cst + 2 + s + n_t, cst + 3 + s + n_t
    d = ref + (0 if paper else 1)
    require_weights(f"{task.name} at N={N}", d, N + 2 * s * r + 2 ** (s + 1) + 8)
    eta_value, rule = scale(eta, paper, N, kc, corrected_eta(N, s), "(4/3) ln(8 s N (N+1))",
                            "F.2's ln N + Kc ln 2N")

    E = np.zeros((3, d))  # tokens 0, 1, BOS
    E[0, c0], E[1, c0], E[2, c0] = -1.0, 1.0, 0.0 if paper else 1.0
    P = np.zeros((N + 1, d))
    P[:, cst] = 1.0
    P[:, A] = T
    P[0, B[0].start:B[-1].stop] = np.tile(T[0], s)
    if not paper:
        P[0, ref] = -(math.floor(inst.b) + 0.5)
    for i, (I, gi) in enumerate(inst.features, start=1):
        for h in range(s):
            P[i, B[h]] = T[I[h]] if h < len(I) else T[0]
        if not paper and I:
            bits = (U[:, :len(I)] > 0).astype(np.int64)  # padded coordinates must read +1
            idx = bits @ (1 << np.arange(len(I) - 1, -1, -1))
            P[i, t] = np.where(np.all(U[:, len(I):] > 0, axis=1), gi[idx], 0)

    heads = []
    for h in range(s):
        W_Q = np.zeros((r + 1, d)); W_Q[:r, B[h]] = eta_value * np.eye(r); W_Q[r, cst] = eta_value
        W_K = np.zeros((r + 1, d)); W_K[:r, A] = np.eye(r); W_K[r, cst] = -0.5
        W_V = np.zeros((1, d)); W_V[0, c0] = 1.0
        heads.append(Head(W_Q, W_K, W_V))
    W_O = np.zeros((d, s)); W_O[z, np.arange(s)] = 1.0
    if paper:
        units = U[shared == 1]
        W1 = np.zeros((max(len(units), 1), d)); W1[:len(units), z[0]:z[-1] + 1] = units
        b1 = np.full(len(W1), -(s - 1.0))
    else:
        W1 = np.zeros((len(U), d)); W1[:, z[0]:z[-1] + 1] = U; W1[np.arange(len(U)), t.start + np.arange(len(U))] = s
        b1 = np.full(len(U), -(2 * s - 1.0))
    W2 = np.zeros((d, len(W1))); W2[g, :] = 1.0
    layer1 = Layer(heads, W_O, "softmax", residual=True, causal=False, W1=W1, b1=b1, W2=W2, b2=np.zeros(d))
    V2 = np.zeros((1, d)); V2[0, g] = 1.0
    if not paper:
        V2[0, ref] = 1.0
    O2 = np.zeros((d, 1)); O2[m, 0] = 1.0
    layer2 = Layer([Head(np.zeros((1, d)), np.zeros((1, d)), V2)], O2, "softmax", residual=True, causal=False)
    W_U = np.zeros((1, d)); W_U[0, m] = 1.0
    theta = inst.b / (N + 1) if paper else 0.0
    info = {"construction": "sparse_threshold", "theorem": THEOREM, "variant": variant, "N": N, "s": s,
            "r": r, "d": d, "eta": eta_value, "eta_rule": rule, "seed": seed, "heads": s, "layers": 2,
            "bos_value": 0 if paper else 1, "readout": f"I[m > {theta:.6g}]", **sv.describe()}
    model = Model(E=E, P=P, P_mask=np.ones(3, bool), layers=[layer1, layer2],
                  readout=Readout(W_U, np.zeros(1), "threshold", theta), vocab=["0", "1", "BOS"], info=info)
    model.info["n_params"] = model.n_params()
    return model
