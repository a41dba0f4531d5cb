"""L-fold function composition with L + 1 decoder layers of one head each (Chen, Peng, Wu 2024,
arXiv:2412.02975, Corollary 1.2: L + 1 layers suffice with polylog(n) parameters, against the
lower bound for L layers of Theorem 1.1).  The weights are our own: the paper's corollary gives
no construction.

With c(v; M) = (cos 2 pi v/M, sin 2 pi v/M), the residual stream is

    blk (L + 2: z_L .. z_1, z_0, w) | ONE | VAL (2) | KA_1 (2) | KA_l, KB_l (2 + 2, l = 2..L)
        | W_l (2, l < L) | R_0 .. R_L (2 each)

A value token of block l carries VAL = c(v; N_{l-1}) (z_0: c(z_0; N_0)); the query token carries
W_l = c(w_l; n).  Positions carry the keys, private to their block: offset e of block 1 has
KA_1 = c(e; N_0); offset e = a N_{l-2} + b of block l >= 2 has KA_l = c(a; n), KB_l = c(b; N_{l-2}).
Only the last position is read, so only its queries matter; the junk the other positions write
into R is never read by a key or a value.

* Layer 1: q = lambda ONE, k = blk[z_0]: R_0 = c(i_0; N_0).
* Layer 2: q = lambda R_0, k = KA_1: R_1 = c(z_1(i_0); N_0) = c(i_1; N_0).
* Layer l + 1 (l = 2..L): q = lambda (W_{l-1}, R_{l-1}), k = (KA_l, KB_l): score
  lambda (cos 2 pi (w_{l-1} - a)/n + cos 2 pi (i_{l-1} - b)/N_{l-2}), largest at the entry
  (w_{l-1}, i_{l-1}); R_l = c(i_l; N_{l-1}).
* Readout: i_L = argmax_v <R_L, c(v; N_{L-1})>.

The target logit beats every other of its block by lambda g, g = 1 - cos(2 pi / M), M the largest
modulus of the keys; with lambda = (2/g) ln(8 T/g) (T the prompt length) the leak eps of a layer
stays below g/8, so the error 2 eps it adds to R does not compound (``--eta`` multiplies lambda).
"""

from __future__ import annotations

import math

import numpy as np

from ..model import Head, Layer, Model, Readout
from ..support.errors import InputError
from ..support.papers import CHEN_PENG_WU_2024
from ..support.sizes import Cost, model_cost
from .blocks import Layout, matrix

THEOREM = CHEN_PENG_WU_2024.cite("Corollary 1.2 (L + 1 layers suffice)")
VARIANTS = {"designed": "L + 1 decoder layers of one head: fetch z_0, then one lookup per function, keys as "
                        "angles c(v; M)"}


def _angle(v: int, M: int) -> np.ndarray:
    return np.array([math.cos(2 * math.pi * v / M), math.sin(2 * math.pi * v / M)])


def _layout(L: int) -> Layout:
    blocks = dict(blk=L + 2, ONE=1, VAL=2, KA1=2)
    for l in range(2, L + 1):
        blocks[f"KA{l}"], blocks[f"KB{l}"] = 2, 2
    for l in range(1, L):
        blocks[f"W{l}"] = 2
    for l in range(L + 1):
        blocks[f"R{l}"] = 2
    return Layout(**blocks)


def cost(task, variant: str = "designed", k=None) -> Cost:
    """E (a row per token), P (a row per position), L + 1 one-head layers of a few rows."""
    d = _layout(task.depth).d
    return model_cost(f"composition at depth {task.depth}", d, len(task.vocab) + task.max_len + 8 * (task.depth + 1))


def build(task, variant: str = "designed", k=None, eta=None, seed: int = 0, kc=None) -> Model:
    L, m, n, sizes = task.depth, task.N, task.n, task.sizes
    if eta is not None and not eta > 0:
        raise InputError(f"--eta (a factor on lambda) must be > 0, got {eta}")
    Lay = _layout(L)
    kind = {l: L - l for l in range(1, L + 1)} | {0: L, "w": L + 1}  # blk row of each block

    E = np.zeros((len(task.vocab), Lay.d))
    E[:, Lay.row("ONE")] = 1.0
    for l in range(L, -1, -1):
        M = sizes[max(l - 1, 0)]
        count = sizes[l - 1] if l else m
        for v in range(count):
            t = task.value_base[l] + v
            E[t, Lay.row("blk", kind[l])] = 1.0
            E[t, Lay["VAL"]] = _angle(v, M)
    for wi, w in enumerate(task.queries):
        t = task.first_query + wi
        E[t, Lay.row("blk", kind["w"])] = 1.0
        for l in range(1, L):
            E[t, Lay[f"W{l}"]] = _angle(w[l - 1], n)
    P = np.zeros((task.max_len, Lay.d))
    for e in range(sizes[0]):
        P[task.block_start[1] + e, Lay["KA1"]] = _angle(e, sizes[0])
    for l in range(2, L + 1):
        for e in range(sizes[l - 1]):
            a, b = divmod(e, sizes[l - 2])
            P[task.block_start[l] + e, Lay[f"KA{l}"]] = _angle(a, n)
            P[task.block_start[l] + e, Lay[f"KB{l}"]] = _angle(b, sizes[l - 2])

    M = max([sizes[0]] + [max(n, sizes[l - 2]) for l in range(2, L + 1)])
    g = 1 - math.cos(2 * math.pi / M) if M > 1 else 2.0
    lam = (2 / g) * math.log(8 * task.max_len / g) * (1.0 if eta is None else eta)

    def lookup(q_rows, k_rows, dst: str) -> Layer:
        W_V = matrix(Lay, [{("VAL", 0): 1.0}, {("VAL", 1): 1.0}])
        W_O = matrix(Lay, [{(dst, 0): 1.0}, {(dst, 1): 1.0}]).T.copy()
        width = max(len(q_rows), len(k_rows))
        return Layer([Head(matrix(Lay, q_rows + [{}] * (width - len(q_rows))),
                           matrix(Lay, k_rows + [{}] * (width - len(k_rows))), W_V)],
                     W_O, "softmax", residual=True, causal=True)

    layers = [lookup([{("ONE", 0): lam}], [{("blk", kind[0]): 1.0}], "R0"),
              lookup([{("R0", 0): lam}, {("R0", 1): lam}], [{("KA1", 0): 1.0}, {("KA1", 1): 1.0}], "R1")]
    for l in range(2, L + 1):
        q = [{(f"W{l - 1}", c): lam} for c in range(2)] + [{(f"R{l - 1}", c): lam} for c in range(2)]
        kk = [{(f"KA{l}", c): 1.0} for c in range(2)] + [{(f"KB{l}", c): 1.0} for c in range(2)]
        layers.append(lookup(q, kk, f"R{l}"))
    C = sizes[L - 1]
    W_U = matrix(Lay, [{(f"R{L}", 0): float(c[0]), (f"R{L}", 1): float(c[1])}
                       for c in (_angle(v, C) for v in range(C))])
    model = Model(E=E, P=P, P_mask=np.ones(len(task.vocab), bool), layers=layers,
                  readout=Readout(W_U, np.zeros(C), "argmax"), vocab=list(task.vocab),
                  info={"construction": "composition", "theorem": THEOREM, "variant": variant, "depth": L,
                        "layers": L + 1, "heads": 1, "d": Lay.d, "lambda": lam},
                  residual_rows=Lay.names())
    model.info["n_params"] = model.n_params()
    return model
