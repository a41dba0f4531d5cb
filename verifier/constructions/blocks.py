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


def lemma3_classifier(V: np.ndarray) -> np.ndarray:
    """Lemma 3: W (D, C) with argmax_j (V[i] W)[j] = i for pairwise linearly independent rows V[i].

    The paper's induction, in float64: w_0, w_1 solve x_i w_j = [i = j] for the first two vectors;
    vector k then gets w_k = w_{i_k} + Delta / M, where i_k is its best old class, x_{i_k} Delta = -1
    and x_k Delta = 1, and M shrinks Delta below the margin epsilon = min_i (o_ii - o_{i, i_k}) of
    the other vectors.  The paper leaves the solution and M open: we take the minimum-norm Delta and
    M = 2 max_j |x_j Delta| / epsilon.  Vectors that break the lemma's hypothesis (two parallel ones)
    make epsilon <= 0; then M = 1, and the classifier it builds is left for the verifier to refute."""
    C, D = V.shape
    W = np.zeros((D, C))
    first = min(C, 2)
    W[:, :first] = np.linalg.pinv(V[:first]) @ np.eye(first)
    for k in range(2, C):
        O = V[:k] @ W[:, :k]
        ik = int(np.argmax(V[k] @ W[:, :k]))
        others = [i for i in range(k) if i != ik]
        delta = np.linalg.pinv(V[[ik, k]]) @ np.array([-1.0, 1.0])
        M = 1.0
        eps = min((O[i, i] - O[i, ik] for i in others), default=0.0)
        if eps > 0:
            M = max(1.0, 2 * float(np.abs(V[others] @ delta).max()) / eps)
        W[:, k] = W[:, ik] + delta / M
    return W
