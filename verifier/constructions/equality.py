"""Equality with two layers (Bhattamishra et al. 2024, arXiv:2406.09347, Theorem 6, Appendix F.2).

The paper computes INEQ(x) = OR_i (x_i XOR x_{i+N/2}) over x in {-1, 1}^N ("We will consider the
input domain to be {-1,1}^N"); the task's answer is EQ = 1 - INEQ.  The residual stream, as F.2
prints the embedding "x_i = [x_i, 0, T(i), T(i), 1] if i <= N/2, [x_i, 0, T(i), T(i - N/2), 1]
otherwise", with the slots our residual layers add:

``c0`` the bit (token 0 -> -1, 1 -> +1), ``c1`` the retrieved bit, ``B3`` = T(i), ``B4`` =
T(pi(i)) with pi(i) = i for i <= N/2 and i - N/2 after, ``cst`` = 1, ``g`` the XOR feature, ``m``
the mean of the features, and (``corrected`` only) ``ref``.

The printed maps:
* Layer 1: "Q(x_i) = [T(i), 1] for i <= N/2 and is T(i - N/2) for i > N/2", "K(x_i) = [T(i), -1/2]",
  "V(x_i) = [0, x_i, 0_k, 0_k]", and for softmax "Q~(x_i) = eta Q(x_i) = eta [T(i), 1]".  So
  Q = eta [B4, cst], K = [B3, -1/2 cst], and V copies c0 into c1.  "Then a simple ReLU FFN can
  compute the XOR of the first two values": it writes x_i XOR x_pi(i) into g.
* Layer 2: "Let the query vector Q(x_i^(1)) = 0", "V(x_i^(1)) = [(x_i XOR x_{i-N/2}), 0, ..., 0]",
  so every weight is 1/N (R(1/N) in the arithmetic) and m = the mean of g; "If Att(X)_N^(2) >=
  1/N, then the FFN can output 1 and it can output 0 otherwise".
* Readout: one threshold bit, EQ = I[-m > theta].

Variants (every difference from the paper, with its line):

``paper`` -- F.2 as printed.
  * T: "k = O(log N) is the dimension of vectors T(1), ..., T(N) described in Corollary 8.1":
    Corollary 8.1's random signs (`sign_vectors.corollary_81`), the worst case the proof covers.
  * eta = ln N + Kc ln 2N: "Thus, for eta = log N + Kc log 2N, the softmax attention weight at
    j = i - N/2 will be rounded to 1", with the arithmetic's Kc (Appendix B.2: the grid's step is
    N^-Kc; Kc = f / log2 N for FX(p, f), the B.2 grid's own Kc).
  * XOR: the exact one on +-1, (ReLU(c0 - c1) + ReLU(c1 - c0)) / 2: F.2 argues that the retrieved
    bit is exact ("the softmax attention will behave like hard attention").
  * Layer 2: INEQ = I[m >= 1/N] with 1/N exact (a Fraction), so EQ = I[-m > -1/N].
  * Typos read corrected, because the rest of F.2 uses them so: d = 3 + 2k (printed "d = 2 + 2k"
    for the five-part embedding it prints); Q = eta [T(pi(i)), 1] for i > N/2 too (printed without
    the 1, which "A_ij = <T(i - N/2), T(j)> - 1/2" needs).
``corrected`` -- soft attention with a derived scale, and a robust FFN.
  * T: Hadamard rows for small N (exactly orthogonal), else random signs checked <= 1/4.
  * eta = 2 ln(3(N - 1)): the target weight is >= 3/4 under Cor 8.1 (with exact T, far more).
  * XOR = ReLU(a-b-1/2) - ReLU(a-b-3/2) + ReLU(b-a-1/2) - ReLU(b-a-3/2): exactly 0 or 1 as long as
    the retrieved bit is within 1/2 of +-1.
  * Layer 2 (our departure): position 1, whose feature is always 0, also carries the value -1/2 in
    ``ref``, and V = g + ref, so m = R(1/N) (sum of the features - 1/2) up to rounding, and
    EQ = I[-m > 0].  The threshold then scales with the computed weight R(1/N) instead of sitting
    at a fixed 1/N.
Both add the slots g and m because the layers are residual (the paper writes the XOR into the
first coordinate; the residual version is equivalent, docs/constructions.md, "Conventions").
Every map but the layer-1 query (eta is irrational) is built in exact rationals, and T too where k is
a perfect square.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from ..model import Head, Layer, Model, Readout, exact_array
from ..support.errors import InputError
from ..support.papers import BHATTAMISHRA_2024
from ..support.sizes import Cost, model_cost
from .blocks import Layout, matrix, relu_units, zeros
from .sign_vectors import corollary_81, sign_vectors, vectors_cost, width

THEOREM = BHATTAMISHRA_2024.cite("Theorem 6, Appendix F.2")
VARIANTS = {
    "paper": "F.2 as printed: eta = ln N + Kc ln 2N, Cor 8.1 T, exact XOR FFN, OR threshold at exactly 1/N",
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


def retrieval_head(L: Layout, source: str, target: str, value: str, eta: float) -> Head:
    """F.2's retrieval head: Q = eta [target block, cst], K = [source block, -1/2 cst], V = the value
    row, so the query at i scores eta (<T(target_i), T(j)> - 1/2) against position j."""
    k = L.sizes[source]
    W_Q = eta * matrix(L, [{(target, j): 1} for j in range(k)] + [{("cst", 0): 1}])
    W_K = matrix(L, [{(source, j): 1} for j in range(k)] + [{("cst", 0): Fraction(-1, 2)}], exact=True)
    return Head(W_Q, W_K, matrix(L, [{(value, 0): 1}], exact=True))


def mean_head(L: Layout, values: dict[str, int]) -> Head:
    """A head with W_Q = W_K = 0: uniform weights R(1/n), the mean of the value combination."""
    return Head(zeros((1, L.d), True), zeros((1, L.d), True), matrix(L, [{(v, 0): w for v, w in values.items()}],
                                                                    exact=True))


def _layout(k: int, paper: bool) -> Layout:
    return Layout(c0=1, c1=1, B3=k, B4=k, cst=1, g=1, m=1, **({} if paper else {"ref": 1}))


def cost(task, variant: str = "corrected", k: int | None = None) -> Cost:
    """T (N vectors of width k); E, P (N rows), the two layers and the readout."""
    N, r = task.N, width(task.N, k, random=variant == "paper")
    what = f"equality at N={N}" if k is None else f"equality with k={k}"
    return model_cost(what, _layout(r, variant == "paper").d, N + 2 * r + 16) + vectors_cost(N, r)


def build(task, variant: str = "corrected", k: int | None = None, eta: float | None = None, seed: int = 0,
          kc: float | None = None) -> Model:
    N = task.N
    paper = variant == "paper"
    sv = corollary_81(N, k, seed) if paper else sign_vectors(N, k, seed)
    k = sv.T.shape[1]
    L = _layout(k, paper)
    eta_value, rule = scale(eta, paper, N, kc, retrieval_eta(N), "2 ln(3(N-1))")
    exact_T = sv.exact is not None
    T = sv.T if sv.exact is None else sv.exact
    h = N // 2

    E = np.stack([L.vector(exact=True, c0=-1), L.vector(exact=True, c0=1)])  # bits 0, 1 as -1, +1
    P = np.stack([L.vector(exact=exact_T, B3=T[i], B4=T[i if i < h else i - h], cst=1,  # position i holds x_{i+1}
                           **({"ref": Fraction(-1, 2)} if i == 0 and not paper else {})) for i in range(N)])

    layer1 = Layer([retrieval_head(L, "B3", "B4", "c0", eta_value)], matrix(L, [{("c1", 0): 1}], exact=True).T.copy(),
                   "softmax", residual=True, causal=False)
    a_b, b_a = {("c0", 0): 1, ("c1", 0): -1}, {("c0", 0): -1, ("c1", 0): 1}
    if paper:
        relu_units(L, layer1, [(a_b, 0, {("g", 0): Fraction(1, 2)}), (b_a, 0, {("g", 0): Fraction(1, 2)})], exact=True)
    else:
        relu_units(L, layer1, [(diff, bias, {("g", 0): sign}) for diff in (a_b, b_a)
                               for bias, sign in ((Fraction(-1, 2), 1), (Fraction(-3, 2), -1))], exact=True)
    layer2 = Layer([mean_head(L, {"g": 1} if paper else {"g": 1, "ref": 1})],
                   matrix(L, [{("m", 0): 1}], exact=True).T.copy(), "softmax", residual=True, causal=False)
    W_U = matrix(L, [{("m", 0): -1}], exact=True)
    theta = Fraction(-1, N) if paper else Fraction(0)
    info = {"construction": "equality", "theorem": THEOREM, "variant": variant, "N": N, "k": k, "d": L.d,
            "eta": eta_value, "eta_rule": rule, "seed": seed, "heads": 1, "layers": 2,
            "readout": f"EQ = I[-m > {theta}]", **sv.describe()}
    model = Model(E=E, P=P, P_mask=np.ones(2, bool), layers=[layer1, layer2],
                  readout=Readout(W_U, exact_array([0]), "threshold", theta), vocab=["0", "1"], info=info,
                  residual_rows=L.names())
    model.info["n_params"] = model.n_params()
    return model
