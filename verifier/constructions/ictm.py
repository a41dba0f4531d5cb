"""In-context template matching with three layers and 2l heads (Chen and Zou 2024, arXiv:2404.01601,
Theorem 6, Appendix 15): parse each block into its template, copy, then match.

``corrected`` -- a consistent reconstruction of the printed proof.  The residual stream is

    token (|X|, one-hot) | flag (1, the sign =) | answer (na, one-hot) | P (n, one-hot) | TB (l)

Block t occupies positions s_t .. s_t + l + 1 (s_t = t (l + 2)): l symbols, the sign, the answer;
the query block s_k = k (l + 2) holds l symbols and the last sign.  off(a) = a mod (l + 2).

* Layer 1 (1 head, constrained attention, Lemma 2): W_QK = I on the token rows, and on the
  positions 0 within a block and -1 across blocks (the query block counts as block k); W_V copies
  position a of P into row off(a) of TB.  A symbol position s_t + j ends with TB = R_t[:, j],
  R_t[i, j] = 1[x_i = x_j] inside block t: its template's pattern.  Signs and answers: TB = 0.
* Layer 2 (1 head, instructive, Lemma 1): each answer writes into its block's symbol positions and
  into the final token; each query position j writes into position j of every context block;
  W_V = +I on the answer rows, -I on TB.  A context symbol position then holds its block's answer
  a_t and TB = D_t[:, j] = R_t[:, j] - R'[:, j] (R' the query's pattern); the final token holds
  sum_t a_t.
* Layer 3 (2l heads): head (i, s), s = +1 or -1, scores ReLU(s TB_a[i] flag_b) (the final token's
  flag is 1); W_V = -2l (answer rows), the 2l cancelling the 1/m average.  The final token's answer
  rows become sum_t (1 - gamma_t) a_t with gamma_t = sum |D_t|: 0 for the block whose template the
  query follows, at least 2 for the others.
* Classifier: the answer rows; the right answer scores 1, every other at most 0.

``paper`` cannot be built as printed (UNBUILDABLE, quoting Appendix 15).  Besides that reason, read
against the text: W_QK^(1)'s lower-left block I_{(d'-d1) x d1} is a rectangular identity, as the
paper writes elsewhere (W_V^(1)'s last block I_{(l+2) x (l+1)}), so it is defined, but it pairs the
source's flag and answer rows with the target's token rows, which the parse needs to be 0; W_pp's
"-infinity" is Lemma 2's "sufficiently large negative value" (we use -1: content scores are 0 or 1);
layer 2 does write the template rows (W_V^(2) = -I on every row after the first d); and layer 3's
M_i sits on "the last l rows" of the stream, while W_V^(1) wrote the template into the last l + 2,
so it reads template rows 2..l+1 rather than 0..l-1.
"""

from __future__ import annotations

import numpy as np

from ..model import Model, Readout
from ..papers import CHEN_ZOU_2024
from ..sizes import Cost, model_cost
from .blocks import Layout, ReluLayer, constrained, instructive

THEOREM = CHEN_ZOU_2024.cite("Theorem 6, Appendix 15")
VARIANTS = {"corrected": "parse (constrained attention into a template block), copy answers and compare with "
                         "the query, match (2l heads subtract the non-matching answers)"}
UNBUILDABLE = ("Appendix 15's layer-2 attention map alpha^(2) is not n x n as printed: its second term stacks the row "
               "blocks [0_{(l+2) x (d-(l+1))}, B_{(l+2) x (l+1)}] (and [0_{(l+1) x (d-(l+1))}, 0_{(l+1) x (l+1)}]) of "
               "width d = d1 + d2 + 1, the token embedding's, so it is n x d before its transpose and cannot be added to "
               "the n x n first term. Read with n for d, alpha^(2) still sends no answer to the final token: its first "
               "term (A_{(l+2) x (l+2)} = [0_{(l+2) x (l+1)}, 1_{(l+2) x 1}] per block, transposed) copies each answer "
               "within its own block, and A_{(l+1) x (l+1)} = [0_{l x (l+1)}; 1_{1 x (l+1)}] makes the final token read "
               "the query block only, while layer 3 and the classifier need the answers there "
               "('TF_3(H^(3))[n-1] = sum_{i=0}^{k-1} a_i - sum_{i != r} gamma_i a_i'). --variant corrected is a "
               "consistent reconstruction of the same parse-copy-match plan.")


def _layout(task) -> Layout:
    return Layout(token=task.alphabet, flag=1, answer=task.na, P=task.max_len, TB=task.length)


def cost(task, variant: str = "corrected", k=None) -> Cost:
    """Three layers of d x d maps (2 l + 4 of them), E, P and the readout."""
    d, l = _layout(task).d, task.length
    return model_cost(f"ictm at k={task.k}, l={l}", d, (2 * l + 4) * d + len(task.vocab) + task.na)


def build(task, variant: str = "corrected", k=None, eta=None, seed: int = 0, kc=None) -> Model:
    X, l, kk, na = task.alphabet, task.length, task.k, task.na
    n, B = task.max_len, task.block
    L = _layout(task)
    block = np.arange(n) // B  # the query block is block k
    off = np.arange(n) % B

    E = np.zeros((len(task.vocab), L.d))
    E[:X, L["token"]] = np.eye(X)
    E[task.r, L.row("flag")] = 1.0
    E[task.first_answer:, L["answer"]] = np.eye(na)
    P = np.zeros((n, L.d))
    P[:, L["P"]] = np.eye(n)

    mask = np.where(block[:, None] == block[None, :], 0.0, -1.0)  # content scores are 0 or 1
    parse = constrained(L, L.form(("token", "token", np.eye(X))), mask)
    to_template = L.copy("P", "TB", rows={a: int(off[a]) for a in range(n) if off[a] < l})

    alpha = np.zeros((n, n))
    for t in range(kk):
        answer = t * B + l + 1
        alpha[answer, t * B:t * B + l] = 1.0  # the answer into its block's symbol positions
        alpha[answer, n - 1] = 1.0  # and into the final token
        alpha[kk * B + np.arange(l), t * B + np.arange(l)] = 1.0  # query position j into position j
    compare = L.copy("answer", "answer") - L.copy("TB", "TB")

    match = []
    for i in range(l):
        for s in (1.0, -1.0):
            QK = np.zeros((L.d, L.d))
            QK[L.row("TB", i), L.row("flag")] = s
            match.append((QK, -2 * l * L.copy("answer", "answer")))
    layers = [ReluLayer([(parse, to_template)]).build(), ReluLayer([(instructive(L, alpha), compare)]).build(),
              ReluLayer(match).build()]
    W_U = np.zeros((na, L.d))
    W_U[:, L["answer"]] = np.eye(na)
    info = {"construction": "ictm", "theorem": THEOREM, "variant": variant, "k": kk, "length": l, "alphabet": X,
            "na": na, "d": L.d, "heads": f"1, 1, {2 * l}", "layers": 3}
    model = Model(E=E, P=P, P_mask=np.ones(len(task.vocab), bool), layers=layers,
                  readout=Readout(W_U, np.zeros(na), "argmax"), vocab=list(task.vocab), info=info,
                  residual_rows=L.names())
    model.info["n_params"] = model.n_params()
    return model
