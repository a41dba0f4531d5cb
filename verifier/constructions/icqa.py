"""In-context question answering with two layers and one head (Chen and Zou 2024, arXiv:2404.01601,
Theorem 3, Appendix 13.2).

Residual stream, d' = nq + 1 + na + n rows (n = 3k + 2 positions):

    question (nq, one-hot) | flag (1, the response sign) | answer (na, one-hot) | P (n, one-hot)

Positions 3i, 3i + 1, 3i + 2 hold q, ->, a of pair i; 3k the query question, 3k + 1 the last sign.

* Layer 1 (copy within each block): instructive attention alpha = blockdiag(A3, ..., A3, A2) with
  A3 = ones(3, 3) - I (k times) and A2 = ones(2, 2) - I, W_V = I.  Every column of block i becomes
  q_i + r + a_i (plus positional one-hots); both query-block columns become q_c + r.
* Layer 2 (match): W_QK = I on the question rows, W_V = I.  The last column scores 1 against the
  three columns of the block whose question is the query and the two query-block columns, 0
  elsewhere; its answer rows become 3 a_c (the paper's H^(2)[n-1] = [6 q_c; 6; 3 a_c; ...]).
* Classifier: the answer rows, so the answer wins by 3.

The printed construction is correct; its typos do not change it (the illustration's
"TF(H^(0)) = a_1" for c = 0 means a_0, and the classifier's transposes are garbled): `paper` is the
only variant.
"""

from __future__ import annotations

import numpy as np

from ..model import Model, Readout
from ..support.papers import CHEN_ZOU_2024
from ..support.sizes import Cost, model_cost
from .blocks import Layout, ReluLayer, instructive

THEOREM = CHEN_ZOU_2024.cite("Theorem 3, Appendix 13.2")
VARIANTS = {"paper": "the printed copy-and-match construction (it is correct)"}


def _layout(task) -> Layout:
    return Layout(question=task.nq, flag=1, answer=task.na, P=3 * task.k + 2)


def cost(task, variant: str = "paper", k=None) -> Cost:
    """Two layers of d x d maps, E, P and the readout."""
    d = _layout(task).d
    return model_cost(f"icqa at k={task.k}", d, 4 * d + len(task.vocab) + task.na)


def build(task, variant: str = "paper", k=None, eta=None, seed: int = 0, kc=None) -> Model:
    nq, na, kk = task.nq, task.na, task.k
    n = 3 * kk + 2
    L = _layout(task)

    E = np.zeros((len(task.vocab), L.d))
    E[:nq, L["question"]] = np.eye(nq)
    E[task.r, L.row("flag")] = 1.0
    E[task.first_answer:, L["answer"]] = np.eye(na)
    P = np.zeros((n, L.d))
    P[:, L["P"]] = np.eye(n)

    copy = np.zeros((n, n))
    for start, size in [(3 * i, 3) for i in range(kk)] + [(3 * kk, 2)]:
        copy[start:start + size, start:start + size] = 1.0 - np.eye(size)
    layer1 = ReluLayer([(instructive(L, copy), np.eye(L.d))]).build()
    layer2 = ReluLayer([(L.form(("question", "question", np.eye(nq))), np.eye(L.d))]).build()
    W_U = np.zeros((na, L.d))
    W_U[:, L["answer"]] = np.eye(na)
    info = {"construction": "icqa", "theorem": THEOREM, "variant": variant, "k": kk, "nq": nq, "na": na,
            "d": L.d, "heads": 1, "layers": 2}
    model = Model(E=E, P=P, P_mask=np.ones(len(task.vocab), bool), layers=[layer1, layer2],
                  readout=Readout(W_U, np.zeros(na), "argmax"), vocab=list(task.vocab), info=info,
                  residual_rows=L.names())
    model.info["n_params"] = model.n_params()
    return model
