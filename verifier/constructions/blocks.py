"""Building maps by name: the residual stream's row blocks, attention scores as bilinear forms, and
the two attention lemmas of Chen and Zou 2024 (arXiv:2404.01601, Appendix 10).

As Tracr's `craft` builds a map by its action on named basis directions, a `Layout` names the row
blocks of the residual stream (token | flag | answer | P | TB ...) and every vector and matrix is
built from those names: `layout.copy("P", "TB")` is the value map that copies the positional rows
into the template block, not a slice of indices.  `Layout.names()` gives each row its name
("m", "B3[2]"), which the model carries (`Model.residual_rows`) for traces and reports.  Every
builder takes ``exact=True`` for a map whose recipe is rational: its entries are then Fractions
(`model.is_exact`), so no float64 rounding happens on the way to the weights.

Attention scores follow the paper's convention (Eq. 4): with H = [h_0 ... h_{n-1}] and
S = ReLU(H^T W_QK H), S[a, b] = ReLU(h_a^T W_QK h_b) is how much the target position b reads the
source position a; the output at b adds sum_a S[a, b] W_V h_a.  `heads_for` factors W_QK exactly
into the model's W_Q, W_K (score(b <- a) = <W_Q h_b, W_K h_a>), using only the coordinates the form
reads.

* Lemma 1 (instructive attention): with W_QK zero but on the positional rows, W_QK[P, P] = alpha,
  every input gets the attention map alpha (one-hot positions make P^T alpha P = alpha).
* Lemma 2 (constrained attention): a content term plus W_QK[P, P] = mask, where a mask entry at or
  below minus the largest content score zeroes that pair exactly under ReLU.  (The paper writes
  "W_pp(i, j) -> infinity or some sufficiently large negative value"; the sign is a typo.)
* Lemma 3 (a linear classifier for pairwise independent vectors with distinct labels, Appendix 12):
  `lemma3_classifier`, the paper's inductive construction.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from ..model import Head, Layer, exact_array


def zeros(shape, exact: bool = False) -> np.ndarray:
    """Zeros in float64, or as exact rationals (`model.is_exact`) for a map whose recipe is rational:
    the entries then take Fractions (and ints, or dyadic floats taken exactly) without rounding."""
    return exact_array(np.zeros(shape, dtype=np.int64)) if exact else np.zeros(shape)


def _entry(w, exact: bool):
    """A weight as stored: exact (a Fraction; a float is taken exactly) in an exact map."""
    return Fraction(w) if exact else w


class Layout:
    """Named row blocks of the residual stream, in order: ``Layout(token=3, flag=1, P=8)``."""

    def __init__(self, **blocks: int):
        self.sizes = dict(blocks)
        self.offsets, start = {}, 0
        for name, size in blocks.items():
            self.offsets[name] = start
            start += size
        self.d = start

    def padded(self, d: int) -> "Layout":
        """The same blocks, with a `pad` block of zero rows up to width d."""
        return Layout(**self.sizes, pad=max(d - self.d, 0))

    def overlay(self, **blocks: int) -> "Layout":
        """More named blocks laid over the same rows from row 0 (a construction that rewrites the
        stream reads it under new names: the paper's memorization layer turns the rows of the input
        into the concatenation of the tokens)."""
        out = Layout(**self.sizes)
        start = 0
        for name, size in blocks.items():
            if name in out.sizes or start + size > self.d:
                raise ValueError(f"overlay block {name} does not fit the {self.d} rows")
            out.sizes[name], out.offsets[name] = size, start
            start += size
        return out

    def names(self) -> list[str]:
        """A name per residual row: the block's name ('m'), with the coordinate for a block of more
        than one row ('B3[2]'); a row under several blocks (an overlay) has every name, joined by '/'."""
        names: list[list[str]] = [[] for _ in range(self.d)]
        for block, size in self.sizes.items():
            for i in range(size):
                names[self.offsets[block] + i].append(block if size == 1 else f"{block}[{i}]")
        return ["/".join(n) for n in names]

    def __getitem__(self, name: str) -> slice:
        return slice(self.offsets[name], self.offsets[name] + self.sizes[name])

    def row(self, name: str, i: int = 0) -> int:
        """The residual row of coordinate i of a block."""
        if not 0 <= i < self.sizes[name]:
            raise IndexError(f"block {name} has {self.sizes[name]} rows, not {i + 1}")
        return self.offsets[name] + i

    def vector(self, exact: bool = False, **parts) -> np.ndarray:
        """A residual vector from block values: ``vector(token=onehot, flag=1.0)``."""
        v = zeros(self.d, exact)
        for name, value in parts.items():
            v[self[name]] = exact_array(value) if exact else value
        return v

    def copy(self, src: str, dst: str, scale=1.0, rows: dict[int, int] | None = None,
             exact: bool = False) -> np.ndarray:
        """The (d, d) map that adds scale * block src into block dst: row i to row i (equal sizes), or
        by `rows` (src coordinate -> dst coordinate)."""
        M = zeros((self.d, self.d), exact)
        if rows is None:
            if self.sizes[src] != self.sizes[dst]:
                raise ValueError(f"copy {src} -> {dst}: blocks of {self.sizes[src]} and {self.sizes[dst]} rows")
            rows = {i: i for i in range(self.sizes[src])}
        for i, j in rows.items():
            M[self.row(dst, j), self.row(src, i)] += _entry(scale, exact)
        return M

    def form(self, *terms: tuple[str, str, np.ndarray]) -> np.ndarray:
        """W_QK from block terms (source block, target block, M): h_a^T W_QK h_b gains
        h_a[source]^T M h_b[target]."""
        QK = np.zeros((self.d, self.d))
        for source, target, M in terms:
            QK[self[source], self[target]] += M
        return QK


Row = dict[tuple[str, int], float]  # a combination of named residual rows {(block, i): weight}


def matrix(layout: Layout, rows: list[Row], exact: bool = False) -> np.ndarray:
    """The (len(rows), d) map whose row r reads the combination rows[r]: a query, key or value map."""
    W = zeros((len(rows), layout.d), exact)
    for r, terms in enumerate(rows):
        for (block, i), w in terms.items():
            W[r, layout.row(block, i)] += _entry(w, exact)
    return W


def relu_units(layout: Layout, layer: Layer, units: list[tuple[Row, float, Row]], exact: bool = False,
               b2: Row | None = None) -> None:
    """Give `layer` the FFN of ReLU units, each (input combination, bias, what it adds to which rows),
    and the output bias b2 (a combination of rows, default none)."""
    layer.W1 = matrix(layout, [terms for terms, _, _ in units], exact)
    layer.b1 = exact_array([bias for _, bias, _ in units]) if exact else \
        np.array([bias for _, bias, _ in units], dtype=np.float64)
    layer.W2 = matrix(layout, [out for _, _, out in units], exact).T.copy()
    layer.b2 = matrix(layout, [b2 or {}], exact)[0]


def instructive(layout: Layout, alpha: np.ndarray) -> np.ndarray:
    """Lemma 1: the W_QK whose attention map is alpha[a, b] (source a, target b) for every input."""
    if np.any(alpha < 0):
        raise ValueError("an instructive attention map must be >= 0 (it passes through ReLU)")
    return layout.form(("P", "P", alpha))


def constrained(layout: Layout, content: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Lemma 2: a content form plus a positional term mask[a, b] (0 keeps the pair, a large negative
    value removes it)."""
    return content + layout.form(("P", "P", mask))


def heads_for(QK: np.ndarray, W_V: np.ndarray) -> Head:
    """The head with score(b <- a) = h_a^T QK h_b, factored exactly on the source coordinates QK reads:
    W_K selects them, W_Q = QK[those rows]."""
    reads = np.flatnonzero(np.any(QK != 0, axis=1))
    W_K = np.zeros((max(len(reads), 1), QK.shape[0]))
    W_K[np.arange(len(reads)), reads] = 1.0
    W_Q = np.zeros_like(W_K)
    W_Q[:len(reads)] = QK[reads]
    return Head(W_Q, W_K, W_V)


@dataclass
class ReluLayer:
    """One attention-only layer of Chen and Zou 2024 (Section 3.1, Eq. 1-2): H + (1/m) sum_i V_i ReLU(Q_i^T K_i)."""

    heads: list[tuple[np.ndarray, np.ndarray]]  # (W_QK, W_V) per head, both (d, d)

    def build(self) -> Layer:
        """The layer in the model's form.  The heads' values keep only the rows some head writes
        (W_O, a 0/1 selector, puts them back): the same codes as the paper's d' x d' value maps, since
        R(1 x) = x and the other rows are zero, with far fewer products."""
        d = self.heads[0][1].shape[0]
        written = np.flatnonzero(np.any([W_V != 0 for _, W_V in self.heads], axis=(0, 2)))
        heads = [heads_for(QK, W_V[written]) for QK, W_V in self.heads]
        m = max(h.W_Q.shape[0] for h in heads)  # one query width per layer: pad with zero rows
        for h in heads:
            pad = np.zeros((m - h.W_Q.shape[0], h.W_Q.shape[1]))
            h.W_Q, h.W_K = np.vstack([h.W_Q, pad]), np.vstack([h.W_K, pad])
        return Layer(heads, np.eye(d)[:, written], attention="relu", residual=True, causal=False)


def lemma3_classifier(V) -> np.ndarray:
    """Lemma 3 (Chen and Zou 2024, Appendix 12), the paper's induction, in exact rationals: W (D, C)
    with argmax_j (V[i] W)[j] = i for pairwise linearly independent rows V[i].

    The lemma: "there exists a linear projector W such that (x_i W)[y_i] > (x_i W)[j] for all
    j != y_i".  The proof: for the first two vectors "let a = [1, 0], b = [0, 1] and solve"
    [x_0; x_1][w_0 w_1] = [a; b]; vector k then gets w_k = w_{i_k} + Delta w_k, where
    "i_k = argmax_i o^(k)_{:k}" (its best old class), Delta w_k solves "x_{i_k} Delta w_k = -1,
    x_k Delta w_k = 1", and is rescaled "Delta w_k = (1/M) Delta w_k to ensure that the vibration
    for any other rows is less than epsilon", epsilon = min over the other old rows i of
    (o_ii - o_{i,i_k}) (the paper writes p_ii for o_ii).

    The paper leaves two choices open, which we fill: the solution of each system is the
    minimum-norm one (the pseudo-inverse, exact), and M = max(1, 2 max_i |x_i Delta w_k| / epsilon)
    over the other old rows i, so that each vibration is at most epsilon / 2 (< epsilon, as the
    proof asks; Delta is never enlarged).  Every step is exact: V's entries are taken as the
    rationals they hold, and W is an object array of Fractions (`model.exact_array`), so that a
    p-bit grid rounds the lemma's W and not a float64 neighbour of it.  Vectors that break the
    hypothesis (two parallel ones) make epsilon <= 0; then M = 1, and the classifier it builds
    is left for the verifier to refute."""
    X = [[Fraction(v) for v in row] for row in np.asarray(V, dtype=object)]
    C = len(X)
    cols: list[list[Fraction]] = [[] for _ in range(C)]  # w_j, one column per class
    first = min(C, 2)
    for j in range(first):
        cols[j] = _min_norm(X[:first], [Fraction(int(i == j)) for i in range(first)])
    o = {}  # o[i, j] = x_i w_j, computed once (a column never changes after it is set)

    def out(i: int, j: int) -> Fraction:
        if (i, j) not in o:
            o[i, j] = _dot(X[i], cols[j])
        return o[i, j]

    for k in range(first, C):
        scores = [out(k, j) for j in range(k)]
        ik = scores.index(max(scores))
        others = [i for i in range(k) if i != ik]
        delta = _min_norm([X[ik], X[k]], [Fraction(-1), Fraction(1)])
        eps = min((out(i, i) - out(i, ik) for i in others), default=Fraction(0))
        M = Fraction(1)
        if eps > 0:
            M = max(M, 2 * max(abs(_dot(X[i], delta)) for i in others) / eps)
        cols[k] = [w + dw / M for w, dw in zip(cols[ik], delta)]
    return exact_array([[cols[j][r] for j in range(C)] for r in range(len(X[0]))])


def _dot(a: list[Fraction], b: list[Fraction]) -> Fraction:
    return sum((x * y for x, y in zip(a, b)), Fraction(0))


def _min_norm(A: list[list[Fraction]], b: list[Fraction]) -> list[Fraction]:
    """The minimum-norm least-squares solution pinv(A) b of A w = b, exactly, for one or two rows:
    A^T (A A^T)^-1 b at full row rank, A^T b / ||A||_F^2 at rank one (parallel rows), 0 at rank 0."""
    G = [[_dot(r, s) for s in A] for r in A]
    if len(A) == 1 or G[0][0] * G[1][1] - G[0][1] * G[1][0] == 0:
        norm = sum(G[i][i] for i in range(len(A)))
        if norm == 0:
            return [Fraction(0)] * len(A[0])
        y = [bi / norm for bi in b]
    else:
        det = G[0][0] * G[1][1] - G[0][1] * G[1][0]
        y = [(G[1][1] * b[0] - G[0][1] * b[1]) / det, (G[0][0] * b[1] - G[1][0] * b[0]) / det]
    return [sum((A[i][c] * y[i] for i in range(len(A))), Fraction(0)) for c in range(len(A[0]))]
