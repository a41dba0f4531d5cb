"""Thresholds of s-sparse features with two layers (Bhattamishra et al. 2024, arXiv:2406.09347,
Theorem 13, Appendix F.3).  Also builds disjointness, the instance I_i = {i, i + N/2}, g = AND, b = 0.

Input: BOS at position 0, then the bits x_1..x_N as -1/+1 ("we will also prepend the input ... with
an additional beginning of sequence token [BOS]").  The residual stream, as F.3 prints it ("input
embeddings of size 1 + (k+1) r ... the first coordinate will contain the input x_i ... and will
contain 0 for the [BOS] token x_0.  The next r indices will contain the positional vector T(i) ...
k blocks each of which will contain a positional vector ... T(I_i^1), ..., T(I_i^k).  If the set I_i
has less than k indices, then the last k - |I_i| blocks will have the positional vectors T(0)"),
with the slots our residual layers add:

``c0`` the bit, ``A`` = T(i), ``B1`` .. ``Bs`` = T(I_i^1) .. T(I_i^s), ``cst`` = 1, ``z`` the s
retrieved bits, (``corrected`` only) ``t`` the truth table of g_{I_i}, ``g`` the feature, ``m`` the
mean, (``corrected`` only) ``ref``.

* Layer 1, s heads: "the query vector contains j-th block", "K(x_i) = [T(i)]", "V_h(x_i) = x_i at
  the coordinate h": head h has Q = eta [B_h, cst], K = [A, -1/2 cst], V = c0 written into z_h;
  "the feedforward network can then compute the function g_{I_i}(x) at every position".
  Residual connections.
* Layer 2: "If the query transformation is a null matrix ... the output of the attention block
  will be 1/(N+1) sum_i g_{I_i}(x)": one head with W_Q = 0, V = g into m; "The ReLU-based
  feedforward network can then be used to subtract with a constant b/(N+1) and implement a
  threshold function".
* Readout: one threshold bit on m.

Variants:

``paper`` -- F.3 as printed, with what it leaves open copied from F.2:
  * BOS carries the value 0, so a padded block retrieves 0.
  * Query bias and scale: F.3 gives only "the query vector contains the j-th block" and "using the
    arguments described in Theorem 6"; we take F.2's [T, 1] / [T, -1/2] and F.2's printed
    eta = ln N + Kc ln 2N (Kc from the arithmetic: f / log2 N for FX).
  * T: Corollary 8.1's 1/4-orthogonal vectors.
  * FFN: one network "of constant size", the same at every position, reads the retrieved bits z:
    +-1 on the |I_i| first coordinates, 0 on the padded ones.  So it can compute one g for each
    feature size (the zeros mark the size) and no more: the embedding holds the positions of a
    feature's bits (T(i), T(I_i^j)) but nothing of g_{I_i}, and reading g off them would take a
    network that grows with N.  We build it when all features of a size share their g: units ReLU(<u, z_{1..t}> -
    (t - 1)) for u in {-1,1}^t fire on exactly the z that extend u, and their coefficients solve
    sum_{t' <= t} c(t', z_{1..t'}) = g_t(z) (for one size s: c = g, the pattern sum over g(u) = 1),
    exact on z in {-1, 0, 1}.  An instance with two features of one size and different g cannot
    be built as printed (an error says so).
  * Layer 2: output 1 iff m > b/(N+1), with b/(N+1) exact (a Fraction).
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
  * Layer 2 (our departure): BOS, whose feature is 0, also carries -(floor(b) + 1/2) in ``ref``,
    and V = g + ref, so m = R(1/(N+1)) (sum of the features - floor(b) - 1/2) up to rounding;
    output 1 iff m > 0.  The threshold scales with the computed weight R(1/(N+1)); a fixed
    threshold (the paper's b/(N+1), or any other) has no slack on one side under some rounding.
Every map but the queries (eta is irrational) is built in exact rationals, and T too where its width
is a perfect square.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np

from ..model import Layer, Model, Readout, exact_array
from ..support.errors import UnbuildableError
from ..support.papers import BHATTAMISHRA_2024
from ..support.sizes import Cost, model_cost
from .blocks import Layout, matrix, relu_units
from .equality import mean_head, retrieval_head, scale
from .sign_vectors import corollary_81, sign_vectors, vectors_cost, width

THEOREM = BHATTAMISHRA_2024.cite("Theorem 13, Appendix F.3")
VARIANTS = {
    "paper": "F.3 as printed: BOS value 0, F.2's printed eta, Cor 8.1 T, one g per feature size, threshold at "
             "b/(N+1)",
    "corrected": "BOS value +1, truth tables in the embedding, eta = (4/3) ln(8sN(N+1)), BOS-referenced threshold",
}
UNBUILDABLE = ("F.3's FFN is one network \"of constant size\", the same at every position, and its embedding "
               "[x_i, T(i), T(I_i^1), ..., T(I_i^k)] holds the positions of a feature's bits but nothing of its "
               "g_{I_i}: F.3 does not say how that network would compute different g at different positions, and "
               "from the retrieved bits (+-1, and 0 where a block is padded with T(0)) it computes one g for each "
               "feature size; this instance has two features of one size with different g. (Reading g off T(i) "
               "would take a network that grows with N: N free choices of g are N bits, and a constant number of "
               "units over O(log N) coordinates at O(log N) bits hold O(log^2 N).) Use --variant corrected, or an "
               "instance with one g per size (--shared-g)")


def corrected_eta(N: int, s: int) -> float:
    return 4.0 / 3.0 * math.log(8 * s * N * (N + 1))


def _patterns(s: int) -> np.ndarray:
    """u in {-1,1}^s in the order of g's truth table (first coordinate most significant, bit 1 = +1)."""
    return np.array(list(itertools.product([-1, 1], repeat=s)), dtype=np.int64)


def printed_units(tables: dict[int, np.ndarray], s: int) -> list[tuple[dict, int, dict]]:
    """The paper variant's feature FFN for one g per size t (`tables`): units ReLU(<u, z_{1..t}> - (t-1))
    with coefficient c(t, u) = g_t(u) - sum_{t' < t} c(t', u_{1..t'}), the units with c = 0 left out."""
    coef: dict[tuple[int, ...], int] = {}
    units = []
    for t in sorted(tables):
        for idx, u in enumerate(_patterns(t)):
            u = tuple(int(x) for x in u)
            c = int(tables[t][idx]) - sum(coef.get(u[:t2], 0) for t2 in tables if t2 < t)
            coef[u] = c
            if c:
                units.append(({("z", h): u[h] for h in range(t)}, -(t - 1), {("g", 0): c}))
    return units or [({}, -(s - 1), {("g", 0): 1})]  # no feature is ever 1: one unit that never fires


def _rational(b) -> Fraction:
    """The threshold b as the user wrote it (a JSON 0.1 is 1/10)."""
    return Fraction(repr(b)) if isinstance(b, float) else Fraction(b)


def _layout(r: int, s: int, paper: bool) -> Layout:
    return Layout(c0=1, A=r, **{f"B{h + 1}": r for h in range(s)}, cst=1, z=s,
                  **({} if paper else {"t": 2 ** s}), g=1, m=1, **({} if paper else {"ref": 1}))


def cost(task, variant: str = "corrected", k: int | None = None) -> Cost:
    """T (N + 1 vectors of width r); E, P (N + 1 rows), s heads, the feature FFN (2^s units) and layer 2."""
    N, s, r = task.N, max(1, task.inst.s), width(task.N + 1, k, random=variant == "paper")
    what = f"{task.name} at N={N}" if k is None else f"{task.name} with k={k}"
    return (model_cost(what, _layout(r, s, variant == "paper").d, N + 2 * s * r + 2 ** (s + 1) + 8)
            + vectors_cost(N + 1, r))


def build(task, variant: str = "corrected", k: int | None = None, eta: float | None = None, seed: int = 0,
          kc: float | None = None) -> Model:
    N, inst = task.N, task.inst
    s = max(1, inst.s)
    paper = variant == "paper"
    tables = inst.g_by_size()
    if paper and tables is None:
        raise UnbuildableError(f"{task.name} --variant paper: {UNBUILDABLE}")
    sv = corollary_81(N + 1, k, seed) if paper else sign_vectors(N + 1, k, seed)
    r = sv.T.shape[1]
    U = _patterns(s)
    L = _layout(r, s, paper)
    eta_value, rule = scale(eta, paper, N, kc, corrected_eta(N, s), "(4/3) ln(8 s N (N+1))",
                            "F.2's ln N + Kc ln 2N")
    exact_T = sv.exact is not None
    T = sv.T if sv.exact is None else sv.exact  # row i is T(i), i = 0..N
    b = _rational(inst.b)

    E = np.stack([L.vector(exact=True, c0=-1), L.vector(exact=True, c0=1),
                  L.vector(exact=True, c0=0 if paper else 1)])  # tokens 0, 1, BOS
    P = [L.vector(exact=exact_T, A=T[0], cst=1, **{f"B{h + 1}": T[0] for h in range(s)},
                  **({} if paper else {"ref": -(math.floor(b) + Fraction(1, 2))}))]
    for i, (I, gi) in enumerate(inst.features, start=1):
        blocks = {f"B{h + 1}": T[I[h]] if h < len(I) else T[0] for h in range(s)}
        if not paper and I:
            bits = (U[:, :len(I)] > 0).astype(np.int64)  # padded coordinates must read +1
            idx = bits @ (1 << np.arange(len(I) - 1, -1, -1))
            blocks["t"] = np.where(np.all(U[:, len(I):] > 0, axis=1), gi[idx], 0)
        P.append(L.vector(exact=exact_T, A=T[i], cst=1, **blocks))
    P = np.stack(P)

    heads = [retrieval_head(L, "A", f"B{h + 1}", "c0", eta_value) for h in range(s)]
    layer1 = Layer(heads, matrix(L, [{("z", h): 1} for h in range(s)], exact=True).T.copy(), "softmax",
                   residual=True, causal=False)
    if paper:
        relu_units(L, layer1, printed_units(tables, s), exact=True)
    else:
        relu_units(L, layer1, [({**{("z", h): int(u[h]) for h in range(s)}, ("t", j): s}, -(2 * s - 1), {("g", 0): 1})
                               for j, u in enumerate(U)], exact=True)
    layer2 = Layer([mean_head(L, {"g": 1} if paper else {"g": 1, "ref": 1})],
                   matrix(L, [{("m", 0): 1}], exact=True).T.copy(), "softmax", residual=True, causal=False)
    W_U = matrix(L, [{("m", 0): 1}], exact=True)
    theta = b / (N + 1) if paper else Fraction(0)
    info = {"construction": "sparse_threshold", "theorem": THEOREM, "variant": variant, "N": N, "s": s,
            "r": r, "d": L.d, "eta": eta_value, "eta_rule": rule, "seed": seed, "heads": s, "layers": 2,
            "bos_value": 0 if paper else 1, "readout": f"I[m > {theta}]", **sv.describe()}
    model = Model(E=E, P=P, P_mask=np.ones(3, bool), layers=[layer1, layer2],
                  readout=Readout(W_U, exact_array([0]), "threshold", theta), vocab=["0", "1", "BOS"], info=info,
                  residual_rows=L.names())
    model.info["n_params"] = model.n_params()
    return model
