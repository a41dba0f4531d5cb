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

``paper`` -- the printed maps, with the three slips the text corrects itself read corrected, on the
stream of Theorem 6's width d' = d + n + l + 2 (d = d1 + d2 + 1):

    token (d1) | flag (1, the sign) | answer (d2) | P (n) | TB (l + 2, the last rows)

* Layer 1 (Lemma 2): "W_QK^(1) = [I_{d1 x d1} 0; I_{(d'-d1) x d1} 0] + [0 0 0; 0 W_pp 0; 0 0 0]", W_pp
  0 inside a block and "-infinity" across.  The lower-left block is read as 0: the text says the
  layer is "the parsing process in the template generalization task", whose W_QK is
  "[I_{d x d} 0; 0 0]" (taken literally, the rectangular identity would pair the source's flag and
  answer rows with the target's token rows).  -infinity is Lemma 2's "some sufficiently large
  negative value": -1, as content scores are 0 or 1 (ReLU(1 - 1) = 0 exactly).  "W_V^(1)" =
  "[0 0 ... 0; 0_{(l+2) x d} I_{(l+2) x (l+2)} ... I_{(l+2) x (l+1)}]" (k blocks, then the query's):
  position a's one-hot into TB row a mod (l + 2).
* Layer 2 (Lemma 1): "an instructive attention alpha^(2) in R^{n x n}" = (block diagonal of
  A_{(l+2) x (l+2)} and A_{(l+1) x (l+1)})^T + (k row blocks [0_{(l+2) x (d-(l+1))}, B_{(l+2) x (l+1)}],
  then [0_{(l+1) x (d-(l+1))}, 0_{(l+1) x (l+1)}])^T, A_{(l+2) x (l+2)} = [0_{(l+2) x (l+1)}, 1_{(l+2) x 1}],
  A_{(l+1) x (l+1)} = [0_{l x (l+1)}; 1_{1 x (l+1)}], B = [I_{(l+1) x (l+1)}; 0_{1 x (l+1)}].  The second
  term is n x d as printed; the text declares alpha^(2) n x n, so d is read as n (B on the query
  block's columns).  The block diagonal has k blocks A_{(l+2) x (l+2)} (the display says "(k - 1)
  times" after the first; n x n needs k).  So each answer reaches every position of its block, the
  last token reads the query block, and query position j reaches position j of every block.
  "W_V^(2) = [I_{d x d} 0; 0 -I]".
* Layer 3: 2l heads, "W^(3)_{QK_i} = [0_{(d'-l) x (d'-l)} 0; 0 M_i]" (the last l rows of the stream),
  M_i = +e_i e_i^T (i < l) or -e_{i-l} e_{i-l}^T, "W^(3)_{V_i} = -I"; the heads averaged (1/m, Eq. 2).
* Classifier: "W_O = [0_{(d1+1) x d2}, I_{d2 x d2}, 0]", the answer rows.

The last l rows are TB rows 2 .. l + 1, the offsets of the sign and the answer for l = 2, which
nothing writes (layer 1 writes the offsets of the symbols a position attends to, and the sign and
answer positions attend to nothing): layer 3 attends to nothing, and every answer logit at the last
token is 0, a tie on every input.

``charitable`` -- ``paper`` with layer 3 on the template rows (TB rows 0 .. l - 1), as the text's
words say: "If any row of the template representation is not zero, there exist at least one
attention head that subtracts the corresponding answer from the last token".  Still wrong in exact
arithmetic when there are more answers than blocks: alpha^(2) sends no answer to the last token (its
block-diagonal term keeps each answer inside its block, and A_{(l+1) x (l+1)} makes the last token
read the query block only), so the last token ends with -sum_{t != r} gamma_t a_t, a_r at 0 ties
with every answer not in the context.  The text's worked example shows "a_0 + a_1" at the last
token after layer 2, and its conclusion "TF_3(H^(3))[n-1] = sum_{i=0}^{k-1} a_i - sum_{i != r}
gamma_i a_i" starts from that sum; no printed map puts it there.  ``corrected`` adds
alpha^(2)[answer of block t, n - 1] = 1.
"""

from __future__ import annotations

import numpy as np

from ..model import Model, Readout
from ..support.papers import CHEN_ZOU_2024
from ..support.sizes import Cost, model_cost
from .blocks import Layout, ReluLayer, constrained, instructive

THEOREM = CHEN_ZOU_2024.cite("Theorem 6, Appendix 15")
VARIANTS = {"paper": "the printed maps (alpha^(2) n x n, W_QK^(1)'s rectangular identity read as 0, -infinity as -1); "
                     "layer 3 on the last l rows, as printed",
            "charitable": "paper with layer 3 on the template rows, as the text's words say",
            "corrected": "parse (constrained attention into a template block), copy answers and compare with "
                         "the query, match (2l heads subtract the non-matching answers)"}


def _layout(task, printed: bool) -> Layout:
    """The printed maps keep a template block of l + 2 rows (the text's layer 1 writes that many); the
    corrected one l."""
    return Layout(token=task.alphabet, flag=1, answer=task.na, P=task.max_len,
                  TB=task.length + 2 if printed else task.length)


def cost(task, variant: str = "corrected", k=None) -> Cost:
    """Three layers of d x d maps (2 l + 4 of them), E, P and the readout."""
    d, l = _layout(task, variant in ("paper", "charitable")).d, task.length
    return model_cost(f"ictm at k={task.k}, l={l}", d, (2 * l + 4) * d + len(task.vocab) + task.na)


def build(task, variant: str = "corrected", k=None, eta=None, seed: int = 0, kc=None) -> Model:
    X, l, kk, na = task.alphabet, task.length, task.k, task.na
    n, B = task.max_len, task.block
    printed = variant in ("paper", "charitable")
    L = _layout(task, printed)
    block = np.arange(n) // B  # the query block is block k
    off = np.arange(n) % B
    q = kk * B  # the query block's first position

    E = np.zeros((len(task.vocab), L.d))
    E[:X, L["token"]] = np.eye(X)
    E[task.r, L.row("flag")] = 1.0
    E[task.first_answer:, L["answer"]] = np.eye(na)
    P = np.zeros((n, L.d))
    P[:, L["P"]] = np.eye(n)

    mask = np.where(block[:, None] == block[None, :], 0.0, -1.0)  # content scores are 0 or 1
    parse = constrained(L, L.form(("token", "token", np.eye(X))), mask)
    to_template = L.copy("P", "TB", rows={a: int(off[a]) for a in range(n) if off[a] < L.sizes["TB"]})

    alpha = np.zeros((n, n))
    for t in range(kk):
        answer = t * B + l + 1
        if printed:
            alpha[answer, t * B:(t + 1) * B] = 1.0  # A_{(l+2) x (l+2)}^T: the answer into its block
            alpha[q + np.arange(l + 1), t * B + np.arange(l + 1)] = 1.0  # B^T: query position j into position j
        else:
            alpha[answer, t * B:t * B + l] = 1.0  # the answer into its block's symbol positions
            alpha[answer, n - 1] = 1.0  # and into the final token
            alpha[q + np.arange(l), t * B + np.arange(l)] = 1.0  # query position j into position j
    if printed:
        alpha[q:, n - 1] = 1.0  # A_{(l+1) x (l+1)}^T: the final token reads the query block
        compare = sum(L.copy(b, b) for b in ("token", "flag", "answer")) - L.copy("P", "P") - L.copy("TB", "TB")
    else:
        compare = L.copy("answer", "answer") - L.copy("TB", "TB")

    match = []
    for i in range(l):
        for s in (1.0, -1.0):
            QK = np.zeros((L.d, L.d))
            if printed:  # M_i on the last l rows (paper) or on the template rows (charitable)
                r = L.row("TB", i + 2 if variant == "paper" else i)
                QK[r, r] = s
                match.append((QK, -np.eye(L.d)))
            else:
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
