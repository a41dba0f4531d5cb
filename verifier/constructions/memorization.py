"""Memorization with one layer and n heads (Chen and Zou 2024, arXiv:2404.01601, Theorem 1; Lemmas 3
and 4, Appendix 12).

The residual stream has d' = max(N |X|, |X| + 1 + n) rows for sequences of N tokens and n = N + 1
positions (CLS last).  Read on input as

    token (|X|, one-hot; 0 for CLS) | flag (1, CLS only) | P (n, one-hot positions) | pad

and, after the layer, as the concatenation of the tokens laid over the same rows:

    x_0 | x_1 | ... | x_{N-1}   (|X| rows each)

The layer (Lemma 4) has n ReLU heads, averaged with 1/n:

* head i < N: instructive attention alpha_i[i, n-1] = 1 (the last position reads position i) and
  W_V = n (token -> x_i), so that after the 1/n average the last column gains x_i in block i;
* head N: alpha = I and W_V = -n I: at the last position it cancels the residual.

So the last column is [x_0; ...; x_{N-1}]: distinct sequences of one-hot tokens give non-parallel
vectors.  The classifier maps them to their labels:

* ``corrected``: row y is v_y / ||v_y|| (v_y the concatenation of sequence y); by Cauchy-Schwarz
  <v_j / ||v_j||, v_y> < ||v_y|| for j != y when no two v are parallel.
* ``paper``: Lemma 3's inductive classifier (`blocks.lemma3_classifier`), built in exact rationals
  as the proof prescribes (the minimum-norm solutions and the rescaling M it leaves open are ours).

Also departing from the paper: the line "alpha_i[:, n-1] = n [0; x_i; 0]" mixes the attention map
and the value; we read alpha_i[:, n-1] = e_i with the factor n in W_V, as the next sentence of the
proof says.  The width counts the CLS flag: d' = max(N d, d + 1 + n) (the theorem prints
max{nd, d + n}).
"""

from __future__ import annotations

import numpy as np

from ..model import Model, Readout
from ..support.papers import CHEN_ZOU_2024
from ..support.sizes import Cost, model_cost
from .blocks import Layout, ReluLayer, instructive, lemma3_classifier

THEOREM = CHEN_ZOU_2024.cite("Theorem 1, Lemmas 3 and 4")
VARIANTS = {
    "paper": "Lemma 4's n heads and Lemma 3's inductive classifier",
    "corrected": "Lemma 4's n heads and the normalized-row classifier",
}


def layouts(X: int, N: int) -> tuple[Layout, Layout]:
    """The stream read on input, and the same rows read as the concatenation of the N tokens."""
    n = N + 1
    inputs = Layout(token=X, flag=1, P=n).padded(max(N * X, X + 1 + n))
    return inputs, inputs.overlay(**{f"x{i}": X for i in range(N)})


def cost(task, variant: str = "corrected", k=None) -> Cost:
    """N + 1 heads of d x d maps (and the cancelling one), the readout's C rows."""
    X, N = len(task.symbols), task.N
    d = layouts(X, N)[0].d
    return model_cost(f"memorization at N={N}, |X|={X}", d, (N + 3) * d + task.num_classes)


def build(task, variant: str = "corrected", k=None, eta=None, seed: int = 0, kc=None) -> Model:
    X, N = len(task.symbols), task.N
    n = N + 1
    inputs, out = layouts(X, N)
    d, C = inputs.d, task.num_classes

    E = np.zeros((X + 1, d))
    E[:X, inputs["token"]] = np.eye(X)
    E[X, inputs.row("flag")] = 1.0  # CLS
    P = np.zeros((n, d))
    P[:, inputs["P"]] = np.eye(n)

    heads = []
    for i in range(N):
        alpha = np.zeros((n, n))
        alpha[i, n - 1] = 1.0
        V = np.zeros((d, d))
        V[out[f"x{i}"], inputs["token"]] = n * np.eye(X)
        heads.append((instructive(inputs, alpha), V))
    heads.append((instructive(inputs, np.eye(n)), -n * np.eye(d)))  # cancels the residual
    layer = ReluLayer(heads).build()

    concat = np.zeros((C, d))  # v_y: what the layer leaves at the last position
    for i in range(N):
        concat[np.arange(C), out.row(f"x{i}", 0) + task.sequences[:, i]] = 1.0
    if variant == "paper":
        W_U, rule = lemma3_classifier(concat).T, "Lemma 3 (inductive)"
    else:
        W_U, rule = concat / np.linalg.norm(concat, axis=1, keepdims=True), "v_y / ||v_y||"
    info = {"construction": "memorization", "theorem": THEOREM, "variant": variant, "N": N, "alphabet": X,
            "size": C, "d": d, "heads": n, "layers": 1, "classifier": rule}
    model = Model(E=E, P=P, P_mask=np.ones(X + 1, bool), layers=[layer],
                  readout=Readout(W_U, np.zeros(C), "argmax"), vocab=list(task.vocab), info=info,
                  residual_rows=out.names())
    model.info["n_params"] = model.n_params()
    return model
