"""Index lookup with one layer and one head (Bhattamishra et al. 2024, arXiv:2406.09347, Theorem 1,
Appendix C.2).

The residual stream is C.2's three parts, d = b + 2k (the paper: "log|Sigma| + 2k"):
``rho`` (b rows, the symbol's binary code), ``T_index`` (k rows, the index token's T(p)) and
``T_pos`` (k rows, the positional vector T(i)).  The paper prints:

* "x_i = [rho(s_i), 0_k, T(i)]" and "p = [0_{log|Sigma|}, T(p), 0_k]": the index token has no
  positional vector (P_mask), and T(i) of the symbol at position i comes with the position.
* "W_Q = eta[O; I; O], W_K = [O, O, I], W_V = [I, O, O]", so that "Q(p) = eta[T(p)] contains the
  middle part of the input embedding, the key vectors K(x_i) = [T(i)] contain the last part ... the
  value vectors V(x_i) = [rho(s_i)] contain the first part".  The logit of the query #p against
  position i is eta <T(p), T(i)>, and 0 against itself ("<Q(p), K(p)> = 0").
* "for any eta > 2 log(3N) ... the attention weight over input token x_p ... will be greater than
  3/4"; "a ReLU-FFN can transform the vector z_bar to the vector rho(s_p)".

How the maps are read.  W_Q = eta[O; I; O] stacks its blocks vertically: it is a (d, k) matrix, the
row-vector form Q(x) = x W_Q that F.2 writes ("Q(x_i) = x_i W_Q"), and in that form it selects the
middle part, as the sentence after it says.  W_K and W_V are printed in Section 2's column form
(W x, blocks side by side).  The printed layer is therefore the one every sentence of C.2
describes; we store every map in the column form of Section 2 (`verifier/model.py`), so the model's
W_Q is the transpose of the printed one.  No residual: the layer is the paper's psi(M-Att(X)).

Variants:

``paper`` -- C.2 as printed, in that reading.
  * T: "vectors of dimension k = O(log N) such that <T(i), T(j)> <= 1/4 for i != j", i.e.
    Corollary 8.1's random signs (`sign_vectors.corollary_81`), which meet 1/4 with equality at
    some pair: the worst case the proof covers.
  * eta = 2 ln(3N), the bound of "for any eta > 2 log(3N)" (natural log; at this eta the printed
    bound exp(3 eta/4) / (exp(3 eta/4) + N exp(eta/4)) is exactly 3/4).  The paper leaves the
    value in that range open; W_Q holds R(eta) in the arithmetic.
``corrected`` -- the same maps, with T of Hadamard rows where they are no wider than random signs
  (`sign_vectors.sign_vectors`: exactly orthogonal, so every off-diagonal logit is 0).

What both complete (the paper leaves it open):
* rho is bit j of the symbol index ("Suppose we use a binary encoding").
* The FFN, per bit: out_j = ReLU(2 z_j - 1/2) - ReLU(2 z_j - 3/2), which is 0 for z_j <= 1/4 and
  1 for z_j >= 3/4 (the two cases C.2 derives).
* The readout is an argmax over symbols: score_c = sum_j (2 rho_j(c) - 1) out_j - |rho(c)|, which
  is -||out - rho(c)||_1 on out in [0, 1], so the right symbol wins by 1 on a binary out.
Every map but W_Q (eta is irrational) is built in exact rationals; T too where k is a perfect
square (1/sqrt(k) rational).
"""

from __future__ import annotations

import math

import numpy as np

from ..model import Head, Layer, Model, Readout, exact_array
from ..support.errors import InputError
from ..support.papers import BHATTAMISHRA_2024
from ..support.sizes import Cost, model_cost
from ..tasks.index_lookup import symbol_names
from .blocks import Layout, matrix, relu_units
from .sign_vectors import corollary_81, sign_vectors, vectors_cost, width

THEOREM = BHATTAMISHRA_2024.cite("Theorem 1, Appendix C.2")
VARIANTS = {
    "paper": "C.2 as printed (W_Q = eta[O; I; O] in the row-vector form x W_Q), Cor 8.1 T, eta = 2 ln(3N)",
    "corrected": "the same maps with Hadamard T (exactly orthogonal) where no wider than random signs",
}


def paper_eta(N: int) -> float:
    """The paper's scale rule: weight on s_p > 3/4 iff eta > 2 ln(3N) (natural log)."""
    return 2.0 * math.log(3 * N)


def _bits(sigma: int) -> int:
    return max(1, math.ceil(math.log2(sigma)))


def cost(N: int, sigma: int = 2, k: int | None = None, variant: str = "corrected") -> Cost:
    """T (N vectors of width k), and d = b + 2k rows of E, P, the head, the FFN and the readout."""
    b, r = _bits(sigma), width(N, k, random=variant == "paper")
    what = f"index_lookup at N={N}" if k is None else f"index_lookup with k={k}"
    return model_cost(what, b + 2 * r, sigma + 2 * N + 4 * r + 6 * b) + vectors_cost(N, r)


def build(N: int, sigma: int = 2, k: int | None = None, eta: float | None = None, seed: int = 0,
          variant: str = "corrected") -> Model:
    if not isinstance(N, int) or N < 1:
        raise InputError(f"N must be an integer >= 1, got {N!r}")
    if k is not None and k < 1:
        raise InputError(f"k must be >= 1, got {k}")
    if eta is not None and not math.isfinite(eta):
        raise InputError(f"eta must be a finite number, got {eta}")
    b = _bits(sigma)
    sv = corollary_81(N, k, seed) if variant == "paper" else sign_vectors(N, k, seed)
    k = sv.T.shape[1]
    L = Layout(rho=b, T_index=k, T_pos=k)
    eta_value = paper_eta(N) if eta is None else float(eta)
    T = sv.T if sv.exact is None else sv.exact
    exact_T = sv.exact is not None
    rho = (np.arange(sigma)[:, None] >> np.arange(b)[None, :]) & 1  # (sigma, b): bit j of the index

    E = np.stack([L.vector(exact=exact_T, rho=rho[s]) for s in range(sigma)]
                 + [L.vector(exact=exact_T, T_index=T[p]) for p in range(N)])
    Pos = np.stack([L.vector(exact=exact_T, T_pos=T[i]) for i in range(N)]  # position i holds T(i+1)
                   + [L.vector(exact=exact_T)])  # the index token's position: never added (P_mask)
    P_mask = np.arange(sigma + N) < sigma

    W_Q = eta_value * matrix(L, [{("T_index", j): 1} for j in range(k)])
    W_K = matrix(L, [{("T_pos", j): 1} for j in range(k)], exact=True)
    W_V = matrix(L, [{("rho", j): 1} for j in range(b)], exact=True)
    W_O = W_V.T.copy()  # the head's output z_bar, written into rho
    layer = Layer(heads=[Head(W_Q, W_K, W_V)], W_O=W_O, attention="softmax", residual=False, causal=False)
    relu_units(L, layer, [({("rho", j): 2}, bias, {("rho", j): sign}) for bias, sign in ((-0.5, 1), (-1.5, -1))
                          for j in range(b)], exact=True)
    W_U = matrix(L, [{("rho", j): 2 * int(rho[c, j]) - 1 for j in range(b)} for c in range(sigma)], exact=True)
    b_U = -rho.sum(axis=1).astype(np.int64)

    info = {"construction": "index_lookup", "theorem": THEOREM, "variant": variant, "N": N, "sigma": sigma, "b": b,
            "k": k, "d": L.d, "eta": eta_value, "eta_rule": "2 ln(3N)" if eta is None else "user", "seed": seed,
            "heads": 1, "layers": 1, **sv.describe()}
    model = Model(E=E, P=Pos, P_mask=P_mask, layers=[layer], readout=Readout(W_U, exact_array(b_U), "argmax"),
                  vocab=symbol_names(sigma) + [f"#{i}" for i in range(1, N + 1)], info=info,
                  residual_rows=L.names())
    model.info["n_params"] = model.n_params()
    return model

