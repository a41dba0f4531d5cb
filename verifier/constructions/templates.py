"""Template matching with two layers and one head (Chen and Zou 2024, arXiv:2404.01601, Theorem 5,
Appendix 14.2).

Sequences of l = N symbols from X, CLS last (n = l + 1 positions).  The first layer parses a
sequence into its template: every position attends to the positions that hold the same token, and
writes their positional one-hots (a token-invariant pattern).  The second layer encodes the pattern
of every row as a base-3 number at the last position (instructive attention, alpha[i, n-1] =
3^(l-1-i)).  A linear classifier then maps each template's vector to its label.

``corrected`` -- the clean version: the residual stream is

    token (|X|, one-hot) | flag (1, CLS) | P (n, one-hot) | TB (n, the template block)

* Layer 1: W_QK = I on token + flag (so CLS attends to itself and no symbol attends to CLS);
  W_V copies P -> TB.  Then TB_i = sum of p_a over the positions a holding x_i (1 on equal tokens),
  TB of CLS = p_{n-1}, and the P rows stay one-hot.
* Layer 2: instructive alpha[i, n-1] = 3^(l-1-i) (i < l), W_V copies TB -> TB.  The last column's TB
  coordinate j < l is sum_i 3^(l-1-i) 1[x_i = x_j]; coordinate l is 1 (a constant, so that parallel
  vectors are equal).
* Classifier: row t = v_t / ||v_t||, v_t template t's TB vector.

``paper`` -- the printed maps, literally, on the stream token | flag | P:

* Layer 1: "W_QK^(1) = [I_{d x d} 0; 0 0]" (the token rows only); "W_V^(1) = -I_{(d+1) x (d+1)} ... +
  [0_{(d+1) x n} 0; I_{n x n} 0; 0 0]", whose identity block takes the first n input coordinates
  (token rows first) into the P rows.
* Layer 2: "a inductive head with alpha = [0 ... 0; 3^{k-1} 3^{k-2} ... 3^0 0]^T" (the last column),
  by Lemma 1 on the P rows, and "W_V^(2) = I".
* Classifier: "utilizing 3, we can construct a W_C ... map each vector to their distinct label":
  Lemma 3 (exact rationals) on the final vectors of one sequence per template (the first
  substitution).

``charitable`` -- the most charitable reading the text allows; it departs from ``paper`` in three
places, each where the text says what the printed map must do:

* W_V^(1)'s identity block reads the P rows: the text's own H^(1) has "p'_i + p_i" in the position
  rows, p'_i the sum of the positions holding x_i (a typo the paper corrects itself).
* p'_i goes into the spare zero rows the stream has ("0 -> (d' - (n + 1 + d)) x n"), a block TB of
  n rows, not into P.  The text gives layer 2 only its attention map alpha, which Lemma 1 builds on
  one-hot positions ("Note that P = [p_0, ..., p_{n-1}] = I"); with p'_i + p_i in the P rows no
  W_QK gives alpha on every input (the CLS column is the same for every sequence, so the score of
  source i is linear in h_i, and ααα against αβγ asks w_P0 - w_P1 = 6 and = 3).  So where p'_i lands
  is left open, and only this place builds the printed layer 2.  (Written into P, layer 2's
  attention is another token-invariant map, and the answers are the same.)
* W_C is fitted by Lemma 3 on the template representations the text derives ("Sequence from the
  same template have the same representation"; "for each row of H^(1), we can encode it into a
  unique ternary number"): the layer-2 vectors with the token rows 0, as the text's H^(1) displays
  them.  Lemma 3's minimum-norm solutions lie in the span of those vectors, so W_C has no weight on
  the token rows.

What the text gets wrong under this reading changes no answer: -I on the token rows subtracts
c_i x_i when c_i positions share the token, not "-x_i" as its H^(1) shows, so the token rows keep
(1 - c_i) x_i (`b b b CLS`: -26 e_b at layer 2) and sequences of one template differ there -- where
W_C reads nothing.  CLS scores 0 with itself under the printed W_QK^(1) (its token rows are 0), so
its flag stays 1 and it gets no p'_k, while the displayed H^(1) shows "-1" and "p_k": a constant of
every vector, which changes no answer either; W_QK^(1) is kept as printed.

``sequence-fit`` -- ``charitable``'s layers, with W_C fitted on the layer-2 vectors of one sequence
per template (the first substitution) as the model computes them, token rows included: wrong in
exact arithmetic (`b b b CLS` is read as alpha beta beta; `a a a CLS`, the sequence fitted on, is
right), because of the text's slip above.
"""

from __future__ import annotations

import numpy as np

from .. import exact
from ..model import Model, Readout
from ..support.papers import CHEN_ZOU_2024
from ..support.sizes import Cost, model_cost
from .blocks import Layout, ReluLayer, instructive, lemma3_classifier

THEOREM = CHEN_ZOU_2024.cite("Theorem 5, Appendix 14.2")
VARIANTS = {
    "paper": "the printed maps literally (token-only W_QK, W_V's identity block on the first n coordinates), "
             "Lemma 3 fitted on one sequence per template",
    "charitable": "the most charitable reading: W_V's identity block P -> spare rows (the text's p'_i), Lemma 1 on "
                  "one-hot P, Lemma 3 fitted on the template vectors (token rows 0, as the text's H^(1) shows)",
    "sequence-fit": "charitable's layers, Lemma 3 fitted on one sequence per template (token rows included)",
    "corrected": "W_QK on token and flag, P copied into a separate template block, normalized rows",
}
PRINTED = ("paper", "charitable", "sequence-fit")  # the variants with the printed classifier, Lemma 3


def base3(l: int) -> np.ndarray:
    """The instructive map of layer 2: alpha[i, n-1] = 3^(l-1-i) for i < l."""
    alpha = np.zeros((l + 1, l + 1))
    alpha[:l, l] = 3.0 ** np.arange(l - 1, -1, -1)
    return alpha


def _layout(task, literal: bool) -> Layout:
    """The literal maps write p' into the P rows; every other reading keeps a template block TB."""
    X, n = task.alphabet, task.N + 1
    return Layout(token=X, flag=1, P=n) if literal else Layout(token=X, flag=1, P=n, TB=n)


def cost(task, variant: str = "corrected", k=None) -> Cost:
    """Two layers of d x d maps, E, P and the readout's C rows."""
    d = _layout(task, variant == "paper").d
    return model_cost(f"template_matching at l={task.N}", d, 4 * d + task.alphabet + task.N + 2 + task.num_classes)


def build(task, variant: str = "corrected", k=None, eta=None, seed: int = 0, kc=None) -> Model:
    X, l, C = task.alphabet, task.N, task.num_classes
    n = l + 1
    printed = variant in PRINTED
    L = _layout(task, variant == "paper")

    E = np.zeros((X + 1, L.d))
    E[:X, L["token"]] = np.eye(X)
    E[X, L.row("flag")] = 1.0
    P = np.zeros((n, L.d))
    P[:, L["P"]] = np.eye(n)

    if printed:
        QK1 = L.form(("token", "token", np.eye(X)))  # "[I_{d x d} 0; 0 0]"
        V1 = -L.copy("token", "token") - L.copy("flag", "flag")  # "-I_{(d+1) x (d+1)}"
        if variant == "paper":
            V1[L["P"], :n] += np.eye(n)  # the printed block: input coordinates 0..n-1 (token rows first) -> P
        else:
            V1 += L.copy("P", "TB")  # p'_i, into the spare rows
        V2 = np.eye(L.d)
    else:
        QK1 = L.form(("token", "token", np.eye(X)), ("flag", "flag", np.ones((1, 1))))
        V1, V2 = L.copy("P", "TB"), L.copy("TB", "TB")
    layers = [ReluLayer([(QK1, V1)]).build(), ReluLayer([(instructive(L, base3(l)), V2)]).build()]
    info = {"construction": "template_matching", "theorem": THEOREM, "variant": variant, "length": l,
            "alphabet": X, "templates": C, "d": L.d, "heads": 1, "layers": 2}
    model = Model(E=E, P=P, P_mask=np.ones(X + 1, bool), layers=layers,
                  readout=Readout(np.zeros((C, L.d)), np.zeros(C), "argmax"), vocab=list(task.vocab), info=info,
                  residual_rows=L.names())
    if printed:  # Lemma 3 on what the printed layers compute (exactly) for one sequence of each template
        vectors = [exact.read_state(model, task.decode(int(task._offsets[t])))[-1] for t in range(C)]
        if variant == "charitable":  # the template vectors: token rows 0, as the text's H^(1) shows them
            for v in vectors:
                v[L["token"]] = 0
        model.readout.W_U, info["classifier"] = lemma3_classifier(vectors).T, "Lemma 3 (inductive)"
    else:
        t = np.array(task.template_list)
        vectors = np.zeros((C, L.d))
        vectors[:, L["TB"].start:L["TB"].start + l] = np.einsum("i,cij->cj", 3.0 ** np.arange(l - 1, -1, -1),
                                                                 t[:, :, None] == t[:, None, :])
        vectors[:, L.row("TB", l)] = 1.0
        model.readout.W_U, info["classifier"] = vectors / np.linalg.norm(vectors, axis=1, keepdims=True), \
            "v_t / ||v_t||"
    model.info["n_params"] = model.n_params()
    return model
