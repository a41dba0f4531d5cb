"""Nearest neighbour (and MQAR) with two layers (Bhattamishra et al. 2024, arXiv:2406.09347,
Theorem 7, Appendix G.2).

Positions q = 1..2k-1 (1-based); x_i sits at q = 2i - 1 and y_i at q = 2i.  The residual stream is
G.2's Eq. 9, "z_{2i-1} = [x_i, 0, 1, T(2i-1), T(2i), 0_k]" and "z_{2i} = [0_d', y_i, -2, T(2i),
T(2i), 0_k]", in blocks named by their part: ``X`` (d'), ``Y``, ``C`` (+1 on vectors, -2 on labels),
``B4`` = T(q), ``B5`` = T(2i) (T(q + 1) on vectors, T(q) on labels), ``B6`` (the retrieved
address, "the last slot").  The token gives X, Y, C; the position gives B4, B5.

The printed maps:
* Layer 1: "Q(z_{2k-1}) = [x_k, 1, -10 T(2k-1)]", "K(z_{2i-1}) = [x_i, 3, T(2i-1)]",
  "K(z_{2i}) = [0_d, -2.3, T(2i)]", "V(z_{2i-1}) = V(z_{2i}) = [0, ..., 0, 2 T_s(2i)]" with
  T_s = sqrt(k) T, scaled by "eta = 5/(4 gamma) log 18N" (natural log), then "sigma(a) ... is
  essentially ReLU(x + 1) - ReLU(x - 1) - 1" on the last slot, so B6 = T_s(2 j*).
* Layer 2: "the query vector Q(z^(1)_{2k-1}) = [(1/k) T_s(2j*)], and the key vectors contain the
  4th part of the input vector, K(z_i^(1)) = [T(i)], then the dot product will be greater than
  1 - gamma/100 with the desired input at 2j* and will be less than gamma/100 for the rest",
  "V(z^(1)_{2i}) = [0_d', y_i, 0, ..., 0]", "V(z^(1)_{2i-1}) = [0, ..., 0]", and "Using the
  techniques used for the first layer, it is straightforward to see that a scaling of the query
  vector and applying sigma(.) to the output will produce the desired label y_{j*}".
* T: "The vectors T(1), ..., T(2N) are such that <T(i), T(j)> = 1 +- gamma/100 if i = j, 0 +-
  gamma/100 otherwise", of width "k = O(log N)".
Causal attention: the paper evaluates every prefix; with the mask one pass gives them all.

Variants:

``paper`` -- G.2 as printed, under this reading:
  * The label key's middle entry is 3 C = -6: the paper's next line computes "<Q(z_{2k-1}),
    K(z_{2i})> = 0 - 6 +- gamma/10 <= -5", which corrects the printed -2.3 (a linear key with 3 on
    inputs, C = 1, gives -6 on labels, C = -2).  The printed "+ 2 - 10 <T, T>" is read "+ 3",
    as its own next line does.
  * T meets the stated bound |<T(i), T(j)>| <= gamma/100 (checked; `gram_max_offdiag`).  No T
    narrower than 2N can: when (2N - 1) gamma/100 < 1 the Gram matrix of the 2N unit vectors is
    strictly diagonally dominant, so of rank 2N.  We take Sylvester's Hadamard rows of order
    2^ceil(log2 2N) (exactly orthogonal; 2N itself when 2N is a power of two); a given --k takes
    random signs, checked and reported.  The claimed width O(log N) is the finding: at the sizes
    we can check, the bound needs k >= 2N.
  * Layer-2 query: the printed (1/k) T_s(2j*) scaled by sqrt(k) eta2, i.e. Q = eta2 T(2j*), with
    eta2 by the rule of layer 1 ("eta >= (1/tau) log (r - 1) 2N" at r = 10) at layer 2's margin
    tau2 = (1 - gamma/100) - gamma/100: eta2 = ln(18N) / (1 - gamma/50), so the weight on the label
    y_{j*} is above 9/10.  (The printed 1/k, for 1/sqrt(k) -- the score 1 - gamma/100 needs
    <Q, T(2j*)> ~ 1 -- is absorbed by the scale.)
  * "applying sigma(.) to the output": the layer-2 FFN replaces Y by sigma(Y), as layer 1 does B6.
    On the attention output Y in [0, 1] sigma is the identity; the paper does not say how sigma
    turns a weight >= 9/10 on y_{j*} in {0, 1} into a bit, so the readout is y_hat = I[Y > 1/2],
    which reads y_{j*} whenever sigma(Y) is within 1/2 of it.
``literal`` -- ``paper`` with the printed -2.3 itself: the key's middle row is
  (23/20) C + (37/20) sum_{odd q} <T(q), B4>, which is 3 on every vector (C = 1, B4 = T(q), q odd)
  and exactly -2.3 on every label (C = -2, B4 = T(q), q even) when T is orthogonal.
``unscaled`` -- what this project called ``paper`` before it read the sentence on scaling:
  ``paper`` without the layer-2 scale (Q = (1/k) T_s(2j*) as printed, so the target's score is
  1/sqrt(k)), without sigma at layer 2, and with Corollary 8.1's T of width O(log N), which breaks
  the gamma/100 bound.  It is not the printed construction; it shows what the scale is for.
``corrected``:
  * T: Hadamard rows of order 2^ceil(log2 2N) (exactly orthogonal), whatever gamma; a given --k
    gives random signs, with the gamma/100 Gram condition checked and reported.
  * Layer 2: Q = eta2 T(2j*), eta2 = ln(18N)/(1 - gamma/50); no sigma (the readout thresholds Y).
Maps with a rational recipe are built in exact rationals (the scales eta, eta2 are irrational; T,
2 T_s and the codebook are exact where their widths are perfect squares).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from ..model import Head, Layer, Model, Readout, exact_array
from ..support.papers import BHATTAMISHRA_2024
from ..support.sizes import Cost, model_cost
from .blocks import Layout, matrix, relu_units
from .sign_vectors import corollary_81, sign_vectors, vectors_cost, width

THEOREM = BHATTAMISHRA_2024.cite("Theorem 7, Appendix G.2")
VARIANTS = {
    "paper": "G.2 as printed: label key 3C = -6 (the paper's '0 - 6'), T with |<T(i),T(j)>| <= gamma/100, layer-2 "
             "query scaled (eta2 = ln(18N)/(1 - gamma/50)), sigma on the output",
    "literal": "paper with the printed label key -2.3 itself: a linear key reading C and T",
    "unscaled": "not the printed construction: paper without the layer-2 scale or sigma, Cor 8.1 T (breaks "
                "gamma/100)",
    "corrected": "Hadamard T, layer-2 Q = eta2 T(2j*), eta2 = ln(18N)/(1 - gamma/50)",
}
LABEL_KEY = Fraction(-23, 10)  # the printed middle entry of K(z_2i)


def layer1_eta(N: int, gamma: float) -> float:
    return 5.0 / (4.0 * gamma) * math.log(18 * N)


def layer2_eta(N: int, gamma: float) -> float:
    """Layer 1's rule eta = (1/tau) ln((r - 1) 2N), r = 10, at layer 2's margin tau = 1 - gamma/50."""
    return math.log(18 * N) / (1.0 - gamma / 50.0)


def sigma_units(block: str, width: int) -> list[tuple[dict, int, dict]]:
    """G.2's sigma(a) = ReLU(a + 1) - ReLU(a - 1) - 1 on every row of a block, in residual form: the
    units add sigma(h) - h = ReLU(h+1) - ReLU(h-1) - ReLU(h) + ReLU(-h) - 1 (the -1 is the bias b2)."""
    return [({(block, j): a}, bias, {(block, j): sign}) for a, bias, sign in ((1, 1, 1), (1, -1, -1), (1, 0, -1),
                                                                              (-1, 0, 1)) for j in range(width)]


def _width(count: int, variant: str, k: int | None) -> int:
    """T's width: Hadamard rows (|<T(i), T(j)>| = 0 <= gamma/100) but for the unscaled variant's Cor 8.1 T."""
    if variant == "unscaled":
        return width(count, k, random=True)
    return 1 << math.ceil(math.log2(count)) if k is None else k


def _layout(dx: int, r: int) -> Layout:
    return Layout(X=dx, Y=1, C=1, B4=r, B5=r, B6=r)


def cost(task, variant: str = "corrected", k: int | None = None) -> Cost:
    """T (2N vectors of width r); E (the codebook and two labels), P (2N rows), two layers, the readout."""
    N, count = task.N, 2 * task.N
    r = _width(count, variant, k)
    what = f"{task.name} at N={N}" if k is None else f"{task.name} with k={k}"
    return (model_cost(what, _layout(task.codebook.shape[1], r).d, len(task.codebook) + 2 * N + 14 * r)
            + vectors_cost(count, r))


def build(task, variant: str = "corrected", k: int | None = None, eta: float | None = None, seed: int = 0,
          kc: float | None = None) -> Model:
    N, gamma, codebook = task.N, task.gamma, task.codebook
    printed = variant in ("paper", "literal")  # the printed construction, read with its scale and sigma
    count = 2 * N
    if variant == "unscaled":
        sv = corollary_81(count, k, seed)
    else:
        sv = sign_vectors(count, _width(count, variant, k), seed, thresh=gamma / 100, two_sided=True)
    r, dx = sv.T.shape[1], codebook.shape[1]
    L = _layout(dx, r)
    V = len(codebook)
    eta1 = layer1_eta(N, gamma) if eta is None else float(eta)
    eta2 = layer2_eta(N, gamma)
    T, exact_T = (sv.T, False) if sv.exact is None else (sv.exact, True)  # row q-1 is T(q)
    root = math.isqrt(r)
    root_dx = math.isqrt(dx)
    exact_x = root_dx * root_dx == dx
    X = exact_array(task.codes) / root_dx if exact_x else codebook

    E = np.stack([L.vector(exact=exact_x, X=X[v], C=1) for v in range(V)]
                 + [L.vector(exact=exact_x, Y=y, C=-2) for y in (0, 1)])  # the vectors, then labels 0 and 1
    P = np.stack([L.vector(exact=exact_T, B4=T[q - 1], B5=T[q] if q % 2 else T[q - 1]) for q in range(1, 2 * N)])

    middle: dict = {("C", 0): 3}  # 3 on vectors, -6 on labels
    if variant == "literal":  # 3 on vectors, -2.3 on labels: 3 = a + c, -2.3 = -2a
        a = -LABEL_KEY / 2
        odd = T[0::2].sum(axis=0)  # sum over odd q of T(q): <odd, T(q)> = [q odd] for orthogonal T
        middle = {("C", 0): a, **{("B4", j): (3 - a) * odd[j] for j in range(r)}}
    key_exact = exact_T or variant != "literal"
    W_Q = eta1 * matrix(L, [{("X", j): 1} for j in range(dx)] + [{("C", 0): 1}]
                        + [{("B4", j): -10} for j in range(r)])
    W_K = matrix(L, [{("X", j): 1} for j in range(dx)] + [middle] + [{("B4", j): 1} for j in range(r)],
                 exact=key_exact)
    two_sqrt_k = 2 * root if root * root == r else 2 * math.sqrt(r)
    W_V = matrix(L, [{("B5", j): two_sqrt_k} for j in range(r)], exact=root * root == r)
    layer1 = Layer([Head(W_Q, W_K, W_V)], matrix(L, [{("B6", j): 1} for j in range(r)], exact=True).T.copy(),
                   "softmax", residual=True, causal=True)
    relu_units(L, layer1, sigma_units("B6", r), exact=True, b2={("B6", j): -1 for j in range(r)})

    if variant == "unscaled":  # the printed (1/k) T_s, read literally
        Q2 = matrix(L, [{("B6", j): Fraction(1, r)} for j in range(r)], exact=True)
    else:  # (1/k) T_s(2j*) scaled by sqrt(k) eta2: eta2 T(2j*)
        Q2 = (eta2 / math.sqrt(r)) * matrix(L, [{("B6", j): 1} for j in range(r)])
    K2 = matrix(L, [{("B4", j): 1} for j in range(r)], exact=True)
    V2 = matrix(L, [{("Y", 0): 1}], exact=True)
    layer2 = Layer([Head(Q2, K2, V2)], V2.T.copy(), "softmax", residual=True, causal=True)
    if printed:
        relu_units(L, layer2, sigma_units("Y", 1), exact=True, b2={("Y", 0): -1})
    W_U = matrix(L, [{("Y", 0): 1}], exact=True)

    info = {"construction": "nearest_neighbour", "theorem": THEOREM, "variant": variant, "N": N, "dim": dx,
            "gamma": round(gamma, 6), "r": r, "d": L.d, "eta": eta1,
            "eta_rule": "(5/(4 gamma)) ln 18N" if eta is None else "user", "gram_bound": round(gamma / 100, 12),
            "layer2_query": "(1/r) T_s (printed, unscaled)" if variant == "unscaled" else
            f"eta2 T(2j*), eta2 = ln(18N)/(1 - gamma/50) = {eta2:.6g}",
            "layer2_ffn": "sigma(Y)" if printed else "none", "K_label_entry": "-2.3 = (23/20) C + (37/20) sum_odd "
            "<T(q), B4>" if variant == "literal" else "3 C = -6", "seed": seed, "heads": 1, "layers": 2,
            **sv.describe()}
    model = Model(E=E, P=P, P_mask=np.ones(V + 2, bool), layers=[layer1, layer2],
                  readout=Readout(W_U, exact_array([0]), "threshold", Fraction(1, 2)), vocab=list(task.vocab),
                  info=info, residual_rows=L.names())
    model.info["n_params"] = model.n_params()
    return model
