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
from .base import Case, Domains, TaskOption, membership, token_answers
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

    def _labels(self, member: np.ndarray, rng: np.random.Generator, n: int) -> np.ndarray:
        """n rows of a box with its labels drawn (uniform and independent: no label makes a
        sequence an input or not), the vectors left 0."""
        rows = np.zeros((n, len(member)), np.int64)
        labels = member[1::2, self.V:]
        rows[:, 1::2] = self.V + np.argmax(np.where(labels, rng.random((n, *labels.shape)), -1.0), axis=2)
        return rows

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

    def draw_inputs(self, domains, rng: np.random.Generator, n: int) -> np.ndarray:
        """n inputs drawn uniformly from those in a box, exactly (up to the float rounding of the
        weights): the inputs with query q whose nearest vector is x_i = c' are the product of
        {c'} at i and, at every other vector position, its codes at least gamma further from q
        (`valid_count`'s closed form, per position); a triple (q, i, c') is drawn by its count of
        inputs, then each other position uniformly from its codes.  Empty when the box holds none."""
        member = membership(domains, len(self.vocab))
        rows = self._labels(member, rng, n)
        xs = member[0::2, :self.V]  # (k, V): the vectors' codes, the query's last
        queries = np.flatnonzero(xs[-1])
        a = self.agree[:, queries].T  # (Q, V): agreement of each code with each query
        below = a[:, None, :] <= a[:, :, None] - self.need  # (Q, c', c): c is gamma further from q than c'
        sizes = np.einsum("qcv,iv->qci", below.astype(np.int64), xs[:-1].astype(np.int64))  # (Q, c', i)
        # inputs of (q, c', i): [c' at i] times the product of the other positions' sizes, in logs
        logs = np.log(np.where(sizes > 0, sizes, 1))
        zeros = (sizes == 0).sum(axis=2, keepdims=True) - (sizes == 0)
        ok = (zeros == 0) & xs[:-1].T[None, :, :]
        if not ok.any() or n == 0:
            return rows[:0]
        log_count = np.where(ok, logs.sum(axis=2, keepdims=True) - logs, -np.inf)
        weight = np.exp(log_count - log_count.max()).ravel()
        qi, c1, i = np.unravel_index(rng.choice(weight.size, size=n, p=weight / weight.sum()), log_count.shape)
        allowed = below[qi, c1][:, None, :] & xs[None, :-1, :]  # (n, k-1, V)
        x = np.argmax(np.where(allowed, rng.random(allowed.shape), -1.0), axis=2)
        x[np.arange(n), i] = c1
        rows[:, 0:-1:2], rows[:, -1] = x, queries[qi]
        return rows

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

    DRAW_ROUNDS = 8  # rounds of proposals `draw_inputs` makes at most

    def draw_inputs(self, domains, rng: np.random.Generator, n: int) -> np.ndarray:
        """At most n inputs drawn uniformly from those in a box, exactly, by rejection: the free
        keys are a uniform arrangement of distinct symbols from their domains' union (less the
        fixed keys), kept if each lies in its own domain; the free queries likewise from the
        keys in their domains' union (less the fixed queries), the row kept with probability
        A(m, f) / A(m_max, f) (A(m, f) the arrangements of f of the m keys available, m_max its
        bound over every key set), so that every input is as likely.  On a case, or a box whose
        free keys share a domain and whose free queries do (every box the bounds engine makes),
        only the fixed query's being a key is rejected; fewer than n rows when the box's inputs
        are rare among the proposals after DRAW_ROUNDS rounds."""
        h, V = self.N // 2, self.V
        member = membership(domains, len(self.vocab))
        keys, queries = _Arrangements(member[0:2 * h:2, :V], V), _Arrangements(member[2 * h::2, :V], h)
        out, missing = [np.zeros((0, len(domains)), np.int64)], n
        if not (keys.possible and queries.possible and member[0:2 * h:2, queries.given].any(axis=0).all()):
            return out[0]  # the box holds no input: no proposal would be kept
        for _ in range(self.DRAW_ROUNDS):
            if missing <= 0:
                break
            B = 4 * missing + 16
            rows = self._labels(member, rng, B)
            rows[:, 0:2 * h:2], kept = keys.draw(rng, np.ones((B, V), bool))
            key_set = np.zeros((B, V), bool)
            key_set[np.arange(B)[:, None], rows[:, 0:2 * h:2]] = True
            rows[:, 2 * h::2], ok = queries.draw(rng, key_set)
            out.append(rows[kept & ok][:missing])
            missing -= len(out[-1])
        return np.concatenate(out)

    def valid_count(self, c: int) -> int:
        """Keys: an ordered choice of N/2 distinct symbols that contains the query; the earlier
        queries: distinct keys other than the query; times the 2^(k-1) labels."""
        k, h = self._k[c], self.N // 2
        keys = h * math.perm(self.sigma - 1, h - 1)
        return keys * math.perm(h - 1, k - 1 - h) * 2 ** (k - 1)


class _Arrangements:
    """Distinct symbols at positions with these domains (member: positions x symbols), drawn from
    each row's pool (at most `most` symbols a row): the fixed positions' symbols, and at the f free
    ones a uniform arrangement of the m symbols of the pool in their domains' union (less the fixed
    ones).  A row is kept when its symbols are distinct, in the pool and each in its own domain,
    and with probability A(m, f) / A(m_max, f), m_max the bound of m over every pool, so that every
    kept arrangement is as likely whatever the row's pool."""

    def __init__(self, member: np.ndarray, most: int):
        sizes = member.sum(axis=1)
        self.member, self.fixed, self.free = member, np.flatnonzero(sizes == 1), np.flatnonzero(sizes > 1)
        self.given = np.argmax(member[self.fixed], axis=1)
        self.union = member[self.free].any(axis=0) & (np.bincount(self.given, minlength=member.shape[1]) == 0)
        self.m_max = min(int(self.union.sum()), most - len(self.given))
        self.possible = len(np.unique(self.given)) == len(self.given) and self.m_max >= len(self.free)

    def draw(self, rng: np.random.Generator, pool: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(symbols, kept) of each row of the pool (rows x symbols)."""
        B, f, free = len(pool), len(self.free), self.free
        symbols = np.zeros((B, len(self.member)), np.int64)
        if not self.possible:
            return symbols, np.zeros(B, bool)
        symbols[:, self.fixed] = self.given
        avail = pool & self.union
        symbols[:, free] = np.argsort(np.where(avail, rng.random(avail.shape), 2.0), axis=1)[:, :f]
        m = avail.sum(axis=1)
        ratio = np.prod((m[:, None] - np.arange(f)) / (self.m_max - np.arange(f)), axis=1)
        kept = pool[:, self.given].all(axis=1) & (m >= f) & self.member[free, symbols[:, free]].all(axis=1)
        return symbols, kept & (rng.random(B) < ratio)
