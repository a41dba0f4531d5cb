"""Index lookup (Bhattamishra et al. 2024, arXiv:2406.09347, Section 3 and Theorem 1).

Input: symbols s_1 ... s_n over an alphabet of size sigma (n = 1..N, repeats allowed), then one
index token p in [n]; the answer is s_p, read at the last position.  Vocabulary: the symbols
(ids 0..sigma-1), then the index tokens #1..#N (ids sigma..sigma+N-1).

Order of enumeration: by length n ascending; within a length by p ascending; within (n, p) by
s_1 ... s_n as a base-sigma number with s_1 the most significant digit.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np

from ..support.errors import InputError
from ..support.sizes import Cost
from .base import Batch, Case, Domains, TaskOption, Vocabulary, token_answers

_INT64_LIMIT = 1 << 62


def symbol_names(sigma: int) -> list[str]:
    if sigma <= 26:
        return list(string.ascii_lowercase[:sigma])
    return [f"s{i}" for i in range(sigma)]


@dataclass
class IndexLookup(Vocabulary):
    N: int
    sigma: int = 2

    name = "index_lookup"
    readout = "argmax"
    OPTIONS = (TaskOption("sigma", int, 2, "Alphabet size."),)

    def __post_init__(self) -> None:
        if not isinstance(self.N, int) or self.N < 1:
            raise InputError(f"N must be an integer >= 1, got {self.N!r}")
        if not isinstance(self.sigma, int) or self.sigma < 2:
            raise InputError(f"sigma (alphabet size) must be an integer >= 2, got {self.sigma!r}")
        self.cost().admit()
        self.vocab = symbol_names(self.sigma) + [f"#{i}" for i in range(1, self.N + 1)]
        self.max_len = self.N + 1
        self.num_classes = self.sigma
        self.total = self._offset(self.N)

    def cost(self) -> Cost:
        """The token names; the input counts are closed forms, computed when asked for."""
        return Cost(f"index_lookup at N={self.N}, sigma={self.sigma}", 100.0 * (self.sigma + self.N),
                    self.sigma + self.N)

    def _offset(self, n: int) -> int:
        """The inputs of lengths 1..n: sum_{m <= n} m sigma^m, in closed form (an exact integer)."""
        s = self.sigma
        return s * (1 - (n + 1) * s ** n + n * s ** (n + 1)) // (s - 1) ** 2

    def describe(self) -> dict:
        return {"name": self.name, "N": self.N, "sigma": self.sigma,
                "inputs": "s_1..s_n #p for n = 1..N, p = 1..n; answer s_p"}

    def batches(self, start: int, stop: int, batch_size: int | Callable[[int], int]) -> Iterator[Batch]:
        sigma = self.sigma
        size_of = batch_size if callable(batch_size) else (lambda L: batch_size)
        for n in range(1, self.N + 1):
            base = self._offset(n - 1)
            if base >= stop:
                return
            lo, hi = max(start, base), min(stop, base + n * sigma ** n)
            if lo >= hi:
                continue
            if n * sigma ** n >= _INT64_LIMIT:
                raise InputError(f"index_lookup with sigma={sigma}, n={n} has too many inputs to enumerate")
            weights = sigma ** np.arange(n - 1, -1, -1, dtype=np.int64)
            size = size_of(n + 1)
            for a in range(lo, hi, size):
                r = np.arange(a - base, min(a + size, hi) - base, dtype=np.int64)
                p = r // sigma ** n
                s = r % sigma ** n
                tokens = np.empty((len(r), n + 1), dtype=np.int64)
                tokens[:, :n] = (s[:, None] // weights[None, :]) % sigma
                tokens[:, n] = sigma + p
                yield Batch(tokens, tokens[np.arange(len(r)), p], r + base)

    def cases(self) -> Iterator[Case]:
        """One case per (n, p): n free symbols, the index token #p fixed; answer = s_p."""
        symbols = np.arange(self.sigma)
        answers = token_answers(len(self.vocab), 0, self.sigma)  # the symbol ids are the class ids
        for n in range(1, self.N + 1):
            count, prefix = self.sigma ** n, [symbols] * n
            for p in range(1, n + 1):
                yield Case(f"n={n}, p={p}", Domains(prefix, np.array([self.sigma + p - 1])),
                           lambda S, j=p - 1: S.token(j), self._offset(n - 1) + (p - 1) * count, count,
                           answer_at=(p - 1, answers))

    def index_of(self, tokens) -> int:
        tokens = [int(t) for t in tokens]
        self.answer(tokens)  # validates
        n, p = len(tokens) - 1, tokens[-1] - self.sigma + 1
        s = 0
        for t in tokens[:-1]:
            s = s * self.sigma + t
        return self._offset(n - 1) + (p - 1) * self.sigma ** n + s

    def decode(self, index: int) -> np.ndarray:
        """The input at an enumeration index (Python integers: any size of space)."""
        if not 0 <= index < self.total:
            raise InputError(f"input index {index} is not in 0..{self.total - 1}")
        n = next(n for n in range(1, self.N + 1) if index < self._offset(n))
        p, s = divmod(index - self._offset(n - 1), self.sigma ** n)
        symbols = [(s // self.sigma ** (n - 1 - j)) % self.sigma for j in range(n)]
        return np.array(symbols + [self.sigma + p], dtype=np.int64)

    def evaluate(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(answers, valid) for a batch (B, L) of token sequences: s_p, and whether the row is an input."""
        tokens = np.asarray(tokens, dtype=np.int64)
        n = tokens.shape[1] - 1
        p = tokens[:, -1] - self.sigma + 1
        symbols = tokens[:, :-1]
        valid = np.all((symbols >= 0) & (symbols < self.sigma), axis=1) & (p >= 1) & (p <= n) & (n <= self.N)
        answers = np.full(len(tokens), -1, dtype=np.int64)
        rows = np.flatnonzero(valid)
        answers[rows] = tokens[rows, p[rows] - 1]
        return answers, valid

    def answer(self, tokens: np.ndarray) -> int:
        """s_p, from the tokens; InputError if the tokens are not a well-formed input."""
        tokens = [int(t) for t in tokens]
        n = len(tokens) - 1
        if not 1 <= n <= self.N or any(not 0 <= t < self.sigma for t in tokens[:-1]):
            raise InputError(f"not an index_lookup input: {self.render(tokens)}")
        p = tokens[-1] - self.sigma + 1
        if not 1 <= p <= n:
            raise InputError(f"not an index_lookup input (index out of range): {self.render(tokens)}")
        return tokens[p - 1]

    def answer_name(self, answer: int) -> str:
        return self.vocab[answer] if 0 <= answer < self.sigma else f"<{answer}>"
