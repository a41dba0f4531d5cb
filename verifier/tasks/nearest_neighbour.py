"""Nearest neighbour and MQAR (Bhattamishra et al. 2024, arXiv:2406.09347, Section 5.2, Theorem 7, Appendix G).

Input for one k with N/2 < k <= N: x_1 y_1 x_2 y_2 ... x_{k-1} y_{k-1} x_k (2k - 1 tokens); the
answer is y_{j*}, j* = argmax_{i<k} <x_k, x_i>, read at the last position.  The paper evaluates
every prefix ending in a query; we take each such prefix as one input.

The vectors come from a finite codebook: the sign vectors {+-1/sqrt(d')}^{d'} (token names like
``+-+``), so <x, x'> = (d' - 2 hamming(x, x')) / d'.  Labels are the tokens ``0`` and ``1``.

* `NearestNeighbour`: every sequence over the codebook that meets the paper's margin assumption
  <x_k, x_{j*}> >= <x_k, x_i> + gamma for all i != j* (default gamma = 2/d', the codebook's
  smallest gap: the nearest neighbour is unique).  The others are dropped, and counted.
* `Mqar`: the special case where the first N/2 vectors are distinct symbols (keys) and the
  second half is a permutation of them; sigma symbols embedded as the first sigma sign codes of
  d' = ceil(log2 sigma) bits, so gamma = 2/d'.  Labels after the keys are free (the answer
  never depends on them).

Enumeration: by k, then by the query x_k, then x_1 y_1 ... x_{k-1} y_{k-1} as a mixed-radix
number (x_1 most significant); filtered-out sequences keep their index.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator, Optional

import numpy as np

from ..support.errors import InputError
from ..support.sizes import Cost
from .base import Case, Domains, TaskOption, token_answers
from .combinatorics import distinct_rows
from .product import ProductTask, product_size


def sign_codes(dim: int, count: Optional[int] = None) -> np.ndarray:
    """The first `count` (default all 2^dim) sign vectors in {+-1}^dim: bit j of c (MSB first) set -> -1."""
    count = 1 << dim if count is None else count
    bits = (np.arange(count)[:, None] >> np.arange(dim - 1, -1, -1)[None, :]) & 1
    return 1 - 2 * bits


class _Retrieval(ProductTask):
    """The shared part: codebook, sequence layout, cases (k, query), ground truth by agreement."""

    readout = "threshold"
    num_classes = 1

    def _cost(self, V: int) -> Cost:
        """Of V codes: the agreement table (V x V); the (N/2) V cases, which share one list of 2k
        domains per k; their sizes, integers of up to N log2(2V) bits."""
        return Cost(f"{self.name} at N={self.N}", 8.0 * V ** 2 + 16.0 * self.N ** 2
                    + self.N * V * (200.0 + self.N * math.log2(2 * V) / 16), V + 2)

    def _setup(self, codes: np.ndarray, gamma: float) -> None:
        self.dim = codes.shape[1]
        self.codes = codes  # (V, d') in {+-1}
        self.codebook = codes / math.sqrt(self.dim)
        self.gamma = gamma
        V = len(codes)
        self.V = V
        self.agree = codes @ codes.T  # d' <x, x'>, exact integers
        self.need = math.ceil(gamma * self.dim - 1e-9)  # agreement gap the margin requires
        self.vocab = ["".join("+" if v > 0 else "-" for v in c) for c in codes] + ["0", "1"]
        self.labels = np.array([V, V + 1])
        vectors = np.arange(V)
        self.space, self._k, sizes = [], [], []
        for k in range(self.N // 2 + 1, self.N + 1):
            prefix = [vectors, self.labels] * (k - 1)  # shared by the V queries of this k
            size = product_size(prefix)
            for q in range(V):
                self.space.append((f"k={k}, query={self.vocab[q]}", Domains(prefix, np.array([q]))))
                self._k.append(k)
                sizes.append(size)
        self._layout(sizes, 2 * self.N - 1)

    def answer_name(self, answer: int) -> str:
        return str(answer) if answer in (0, 1) else f"<{answer}>"

    def nearest(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(j*, margin ok) per row: the argmax of <x_k, x_i> over i < k, and whether it is unique
        by at least gamma."""
        xs = tokens[:, 0::2]
        a = self.agree[xs[:, :-1], xs[:, -1:]]  # (B, k-1)
        j = np.argmax(a, axis=1)
        if a.shape[1] == 1:
            return j, np.ones(len(tokens), bool)
        best = a[np.arange(len(a)), j]
        others = a.copy()
        others[np.arange(len(a)), j] = np.iinfo(np.int64).min
        return j, best - others.max(axis=1) >= self.need

    def evaluate(self, tokens):
        j, ok = self.nearest(tokens)
        y = tokens[:, 1::2][np.arange(len(tokens)), j] - self.V
        return y, ok & self.extra_valid(tokens)

    def extra_valid(self, tokens: np.ndarray) -> np.ndarray:
        return np.ones(len(tokens), bool)

    def _near(self, S, k: int, q: int) -> list:
        """Symbolic "x_i is the nearest neighbour with margin gamma", i < k."""
        dots = [S.lookup(2 * i, self.agree[S.domains[2 * i], q]) for i in range(k - 1)]
        return [S.all([S.ge(S.sub(dots[i], dots[j]), S.const(self.need)) for j in range(k - 1) if j != i])
                for i in range(k - 1)]

    def case_truth(self, c):
        k, q = self._k[c], int(self.space[c][1][-1][0])

        def truth(S):
            near = self._near(S, k, q)
            return S.total([S.as_int(S.and_(near[i], S.eq(S.token(2 * i + 1), S.const(self.V + 1))))
                            for i in range(k - 1)])
        return truth

    def valid_count(self, c: int) -> int:
        raise NotImplementedError

    filtered_splits = False  # a box of `nearest_splits` also holds sequences that are not inputs

    def nearest_splits(self, k: int, q: int) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
        """Boxes of case (k, query q) that fix the nearest vector: (i, the codes x_i takes, the
        codes every other x takes); together they hold every input of the case."""
        raise NotImplementedError

    def answer_cases(self) -> Iterator[Case]:
        """Each case split by the position i of the nearest vector (`nearest_splits`), a box whose
        answer is the label y_i (`Case.answer_at`): what the bounds engine needs to know the
        answer on a box.  A sub-case shares its case's offset; it counts its case's inputs only
        when it is the case's last one, so a prefix of sub-cases covers a prefix of cases."""
        labels = token_answers(self.V + 2, self.V, 2)
        pair = self.labels
        for c, case in enumerate(self.cases()):
            k, q = self._k[c], case.domains[-1]
            parts = list(self.nearest_splits(k, int(q[0])))
            for n, (i, at, rest) in enumerate(parts):
                doms = [d for x in range(k - 1) for d in (at if x == i else rest, pair)]
                yield Case(f"{case.name}, nearest x_{i + 1} in {{{', '.join(self.vocab[t] for t in at)}}}",
                           Domains(doms, q), case.truth, case.offset, case.count if n == len(parts) - 1 else 0,
                           case.valid if self.filtered_splits else None, (2 * i + 1, labels))

    def _counts(self) -> dict:
        valid = sum(self.valid_count(c) for c in range(len(self.space)))
        return {"sequences": self.total, "valid": valid, "dropped": self.total - valid}


@dataclass
class NearestNeighbour(_Retrieval):
    N: int
    dim: int = 2
    gamma: Optional[float] = None

    name = "nearest_neighbour"
    invalid_reason = "violates the margin gamma"
    OPTIONS = (
        TaskOption("dim", int, 2, "d': the vectors are the sign vectors {+-1/sqrt(d')}^d'."),
        TaskOption("gamma", float, None, "Margin of the nearest neighbour (default 2/d')."),
    )

    def __post_init__(self) -> None:
        if not isinstance(self.N, int) or self.N < 2:
            raise InputError(f"nearest_neighbour needs N >= 2 (a query after at least one labelled vector), "
                             f"got {self.N!r}")
        if not isinstance(self.dim, int) or not 1 <= self.dim <= 8:
            raise InputError(f"dim (d') must be an integer in 1..8, got {self.dim!r}")
        gamma = 2 / self.dim if self.gamma is None else float(self.gamma)
        if not 0 < gamma <= 2:
            raise InputError(f"gamma must be in (0, 2], got {gamma}")
        self.cost().admit()
        self._setup(sign_codes(self.dim), gamma)

    def cost(self) -> Cost:
        return self._cost(1 << self.dim)

    def describe(self) -> dict:
        return {"name": self.name, "N": self.N, "dim": self.dim, "gamma": round(self.gamma, 6), **self._counts(),
                "inputs": "x_1 y_1 ... x_k-1 y_k-1 x_k, N/2 < k <= N, x in {+-1/sqrt(d')}^d' with margin gamma; "
                          "answer y_j*"}

    def case_valid(self, c):
        k, q = self._k[c], int(self.space[c][1][-1][0])
        return None if k == 2 else (lambda S: S.any(self._near(S, k, q)))

    def nearest_splits(self, k: int, q: int) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
        """x_i is a code c' and every other x a code at least gamma further from the query (the
        margin assumption): exactly the inputs whose nearest vector is x_i = c'."""
        a = self.agree[:, q]
        below = [np.flatnonzero(a <= a[c2] - self.need) for c2 in range(self.V)]
        for i in range(k - 1):
            for c2 in range(self.V):
                if k == 2 or len(below[c2]):
                    yield i, np.array([c2]), below[c2]

    def valid_count(self, c: int) -> int:
        """Closed form: one position holds the nearest code c', the k-2 others a code at least
        gamma further from the query; times the 2^(k-1) labels."""
        k, q = self._k[c], int(self.space[c][1][-1][0])
        a = self.agree[:, q]
        below = [(a <= a[c2] - self.need).sum() for c2 in range(self.V)]
        return (k - 1) * sum(int(b) ** (k - 2) for b in below) * 2 ** (k - 1)


@dataclass
class Mqar(_Retrieval):
    N: int
    sigma: Optional[int] = None

    name = "mqar"
    invalid_reason = "keys not distinct, or the queries are not a permutation of the keys"
    OPTIONS = (TaskOption("sigma", int, None, "Number of symbols (default N/2, at least N/2)."),)

    def __post_init__(self) -> None:
        if not isinstance(self.N, int) or self.N < 2 or self.N % 2:
            raise InputError(f"mqar needs an even N >= 2 (N/2 keys, then N/2 queries), got {self.N!r}")
        sigma = max(2, self.N // 2) if self.sigma is None else self.sigma
        if not isinstance(sigma, int) or sigma < max(2, self.N // 2):
            raise InputError(f"mqar needs sigma >= max(2, N/2) = {max(2, self.N // 2)} distinct keys, got {sigma!r}")
        self.sigma = sigma
        self.cost().admit()
        dim = max(1, math.ceil(math.log2(sigma)))
        self._setup(sign_codes(dim, sigma), 2 / dim)

    def cost(self) -> Cost:
        return self._cost(self.sigma)

    def describe(self) -> dict:
        return {"name": self.name, "N": self.N, "sigma": self.sigma, "dim": self.dim, **self._counts(),
                "inputs": "keys x_1..x_N/2 distinct with labels, then a prefix of a permutation of the keys; "
                          "answer the query's label"}

    def extra_valid(self, tokens):
        xs = tokens[:, 0::2]
        h = self.N // 2
        keys, queries = xs[:, :h], xs[:, h:]
        distinct = distinct_rows(keys) & distinct_rows(queries)
        in_keys = (queries[:, :, None] == keys[:, None, :]).any(axis=2).all(axis=1)
        return distinct & in_keys

    def case_valid(self, c):
        k = self._k[c]
        h = self.N // 2

        def valid(S):
            xs = [S.token(2 * i) for i in range(k)]
            conds = [S.ne(xs[i], xs[j]) for i in range(h) for j in range(i + 1, h)]
            conds += [S.ne(xs[i], xs[j]) for i in range(h, k) for j in range(i + 1, k)]
            conds += [S.any([S.eq(xs[i], xs[j]) for j in range(h)]) for i in range(h, k)]
            return S.all(conds)
        return valid

    filtered_splits = True  # a box of `nearest_splits` also holds repeated keys

    def nearest_splits(self, k: int, q: int) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
        """Key j is the query and every other x (key or earlier query) another symbol: the inputs
        whose answer is y_j, and sequences with repeated keys, which are not inputs."""
        one, others = np.array([q]), np.setdiff1d(np.arange(self.V), [q])
        for j in range(self.N // 2):
            yield j, one, others

    def valid_count(self, c: int) -> int:
        """Keys: an ordered choice of N/2 distinct symbols that contains the query; the earlier
        queries: distinct keys other than the query; times the 2^(k-1) labels."""
        k, h = self._k[c], self.N // 2
        keys = h * math.perm(self.sigma - 1, h - 1)
        return keys * math.perm(h - 1, k - 1 - h) * 2 ** (k - 1)
