"""Index lookup with one layer and one head (Bhattamishra et al. 2024, arXiv:2406.09347, Theorem 1,
Appendix C.2).

Embeddings, d = b + 2k with b = ceil(log2 sigma) and slots R = [0, b), I = [b, b+k), P = [b+k, d):
symbol s at position i is [rho(s), 0_k, T(i)]; the index token #p is [0_b, T(p), 0_k] and gets no
positional vector (P_mask).  One head: W_Q = eta [0, I, 0], W_K = [0, 0, I], W_V = [I_b, 0, 0], so
the logit of the query #p against position i is eta <T(p), T(i)> and 0 against itself.  W_O writes
the head output z_bar into slot R.  No residual: the layer is the paper's psi(M-Att(X)).

Where we depart from or complete the paper:
* W_Q is printed eta[O; I; O] (vertical) but must be horizontal blocks like W_K.
* rho is bit j of the symbol index (the paper leaves the binary code open).
* The FFN the paper only describes ("a ReLU-FFN can act as a threshold function") is, per bit,
  out_j = ReLU(2 z_j - 1/2) - ReLU(2 z_j - 3/2): 0 for z_j <= 1/4, 1 for z_j >= 3/4.
* The readout is an argmax over symbols: score_c = sum_j (2 rho_j(c) - 1) out_j - |rho(c)|, which is
  -||out - rho(c)||_1 on binary out, so the right symbol wins by 1.
* eta: the paper needs eta > 2 ln(3N); by default we take eta = 2 ln(3N) itself, and W_Q holds
  R(eta), which floor rounding puts below it.  The bound is loose (the true diagonal is 1, not 3/4),
  and whether this is enough at a given precision is what the verifier decides.
* T: Hadamard rows where they are no wider than random signs (see sign_vectors).
"""

from __future__ import annotations

import math

import numpy as np

from ..budget import require_weights
from ..errors import InputError
from ..model import Head, Layer, Model, Readout
from ..papers import BHATTAMISHRA_2024
from ..tasks.index_lookup import symbol_names
from .sign_vectors import sign_vectors

THEOREM = BHATTAMISHRA_2024.cite("Theorem 1, Appendix C.2")
UNBUILDABLE = ("C.2 prints W_Q = eta [O; I; O] (blocks stacked vertically) against W_K = [O, O, I]: the "
               "query map does not have the key map's shape, so <Q x, K x'> is undefined as printed. "
               "The only variant is 'corrected' (horizontal blocks).")


def paper_eta(N: int) -> float:
    """The paper's scale rule: weight on s_p > 3/4 iff eta > 2 ln(3N) (natural log)."""
    return 2.0 * math.log(3 * N)


def build(N: int, sigma: int = 2, k: int | None = None, eta: float | None = None, seed: int = 0) -> Model:
    if not isinstance(N, int) or N < 1:
        raise InputError(f"N must be an integer >= 1, got {N!r}")
    if k is not None and k < 1:
        raise InputError(f"k must be >= 1, got {k}")
    if eta is not None and not math.isfinite(eta):
        raise InputError(f"eta must be a finite number, got {eta}")
    b = max(1, math.ceil(math.log2(sigma)))
    if k is not None:  # the only size a user sets directly: refuse it before building T
        require_weights(f"index_lookup with k={k}", b + 2 * k, sigma + 2 * N + 4 * k + 6 * b)
    sv = sign_vectors(N, k, seed)
    T = sv.T
    k = T.shape[1]
    d = b + 2 * k
    require_weights(f"index_lookup at N={N}", d, sigma + 2 * N + 4 * k + 6 * b)
    R, I, P = slice(0, b), slice(b, b + k), slice(b + k, d)
    eta_value = paper_eta(N) if eta is None else float(eta)
    rho = (np.arange(sigma)[:, None] >> np.arange(b)[None, :]) & 1  # (sigma, b)

    V = sigma + N
    E = np.zeros((V, d))
    E[:sigma, R] = rho
    E[sigma:, I] = T
    Pos = np.zeros((N + 1, d))
    Pos[:N, P] = T  # position i (0-based) holds T(i+1); the index token takes no position
    P_mask = np.arange(V) < sigma

    eye_k = np.eye(k)
    W_Q = np.zeros((k, d)); W_Q[:, I] = eta_value * eye_k
    W_K = np.zeros((k, d)); W_K[:, P] = eye_k
    W_V = np.zeros((b, d)); W_V[:, R] = np.eye(b)
    W_O = np.zeros((d, b)); W_O[R, :] = np.eye(b)
    W1 = np.zeros((2 * b, d)); W1[:b, R] = 2 * np.eye(b); W1[b:, R] = 2 * np.eye(b)
    b1 = np.concatenate([np.full(b, -0.5), np.full(b, -1.5)])
    W2 = np.zeros((d, 2 * b)); W2[R, :b] = np.eye(b); W2[R, b:] = -np.eye(b)
    b2 = np.zeros(d)
    W_U = np.zeros((sigma, d)); W_U[:, R] = 2 * rho - 1
    b_U = -rho.sum(axis=1).astype(np.float64)

    layer = Layer(heads=[Head(W_Q, W_K, W_V)], W_O=W_O, attention="softmax", residual=False,
                  causal=False, W1=W1, b1=b1, W2=W2, b2=b2)
    info = {"construction": "index_lookup", "theorem": THEOREM, "N": N, "sigma": sigma, "b": b, "k": k,
            "d": d, "eta": eta_value, "eta_rule": "2 ln(3N)" if eta is None else "user", "seed": seed,
            "heads": 1, "layers": 1, **sv.describe()}
    model = Model(E=E, P=Pos, P_mask=P_mask, layers=[layer], readout=Readout(W_U, b_U, "argmax"),
                  vocab=symbol_names(sigma) + [f"#{i}" for i in range(1, N + 1)], info=info)
    model.info["n_params"] = model.n_params()
    return model
