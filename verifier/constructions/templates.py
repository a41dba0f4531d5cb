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

* Layer 1: W_QK = I on the token rows only; W_V = -I on the token and flag rows plus the printed
  block "[0_{(d+1) x n}; I_{n x n}; 0]", which maps the first n input coordinates (token rows first)
  into the P rows.
* Layer 2: alpha with last column (3^(l-1), ..., 3^0, 0), W_V = I.
* Classifier: Lemma 3 on the final vectors of one sequence per template (the first substitution),
  in exact rationals.

``charitable`` -- the printed maps read as the text's own H^(1) says they act ("H^(1) = H^(0) +
W_V^(1) H^(0) alpha^(1)" with P rows p'_i + p_i and the CLS column p_k + p_k, flag cancelled): the
identity block maps the P rows into the P rows, and W_QK^(1) also pairs the flag with itself, so
that CLS attends to itself.  Same classifier.

What is wrong as printed: CLS scores 0 with itself (no token rows), so it never gets its own 2 p_k
and its flag is not cancelled; -I on the token rows subtracts c_i x_i when c_i positions share the
token, not "-x_i" as the text's H^(1) says, so the token rows keep (1 - c_i) x_i, which layer 2
copies into the last column (the vector is not token-invariant); the printed identity block maps
token rows, not P rows, into the P rows; and layer 1 writes into the P rows, so layer 2's
instructive attention no longer reads one-hot positions.  The charitable reading repairs the
first and third, not the second: both variants are wrong in exact arithmetic (`verifier.exact`):
`b b b CLS` is read as alpha beta beta, while the sequence Lemma 3 was fitted on, `a a a CLS`, is
right.
"""

from __future__ import annotations

import numpy as np

from .. import exact
from ..model import Model, Readout
from ..papers import CHEN_ZOU_2024
from ..sizes import Cost, model_cost
from .blocks import Layout, ReluLayer, instructive, lemma3_classifier

THEOREM = CHEN_ZOU_2024.cite("Theorem 5, Appendix 14.2")
VARIANTS = {
    "paper": "the printed maps (token-only W_QK, the printed W_V), Lemma 3's classifier",
    "charitable": "the printed maps read as the text's own H^(1) implies (W_V's identity block P -> P, CLS "
                  "attends to itself), Lemma 3's classifier",
    "corrected": "W_QK on token and flag, P copied into a separate template block, normalized rows",
}


def base3(l: int) -> np.ndarray:
    """The instructive map of layer 2: alpha[i, n-1] = 3^(l-1-i) for i < l."""
    alpha = np.zeros((l + 1, l + 1))
    alpha[:l, l] = 3.0 ** np.arange(l - 1, -1, -1)
    return alpha


def _layout(task, paper: bool) -> Layout:
    X, n = task.alphabet, task.N + 1
    return Layout(token=X, flag=1, P=n) if paper else Layout(token=X, flag=1, P=n, TB=n)


def cost(task, variant: str = "corrected", k=None) -> Cost:
    """Two layers of d x d maps, E, P and the readout's C rows."""
    d = _layout(task, variant in ("paper", "charitable")).d
    return model_cost(f"template_matching at l={task.N}", d, 4 * d + task.alphabet + task.N + 2 + task.num_classes)


def build(task, variant: str = "corrected", k=None, eta=None, seed: int = 0, kc=None) -> Model:
    X, l, C = task.alphabet, task.N, task.num_classes
    n = l + 1
    paper = variant in ("paper", "charitable")
    L = _layout(task, paper)

    E = np.zeros((X + 1, L.d))
    E[:X, L["token"]] = np.eye(X)
    E[X, L.row("flag")] = 1.0
    P = np.zeros((n, L.d))
    P[:, L["P"]] = np.eye(n)

    if paper:
        charitable = variant == "charitable"
        QK1 = L.form(("token", "token", np.eye(X)), *([("flag", "flag", np.ones((1, 1)))] if charitable else []))
        V1 = np.zeros((L.d, L.d))
        V1[:X + 1, :X + 1] = -np.eye(X + 1)
        if charitable:
            V1 += L.copy("P", "P")
        else:
            V1[L["P"], :n] += np.eye(n)  # the printed block: input coordinates 0..n-1 (token rows first) -> P
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
    if paper:  # Lemma 3 on what the printed layers compute (exactly) for one sequence of each template
        vectors = [exact.read_state(model, task.decode(int(task._offsets[t])))[-1] for t in range(C)]
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
