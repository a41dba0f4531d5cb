"""In-context question answering, D_IC-QA^(k) (Chen and Zou 2024, arXiv:2404.01601, Section 4.2,
Theorems 2 and 3).

Questions q_0..q_{nq-1}, a response sign ``=``, answers a_0..a_{na-1}.  An example is k context
pairs with **distinct** questions and **distinct** answers, then the query, one of the context
questions, and the response sign:

    q_pi(0) = a_pi'(0)  ...  q_pi(k-1) = a_pi'(k-1)  q_pi(c) =        answer: a_pi'(c)

pi and pi' are arrangements (ordered choices without repetition), c in 0..k-1: the dataset has
k A(nq, k) A(na, k) examples, n = 3k + 2 tokens each.  N is k (`--N` on the CLI).

Order: by c, then pi (lexicographic arrangement index), then pi'.  Each c is one case split for
the SMT engine: every question and answer position free, the query equal to the question of block
c, questions and answers distinct.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np

from ..support.errors import InputError
from ..support.sizes import Cost
from .base import Batch, Case, TaskOption, Vocabulary, token_answers
from .combinatorics import arrangement_index, arrangements, distinct_rows, falling


@dataclass
class Icqa(Vocabulary):
    N: int
    nq: int = 4
    na: int = 4

    name = "icqa"
    SIZE_HELP = "the paper's k: question-answer pairs in the context"
    readout = "argmax"
    OPTIONS = (TaskOption("nq", int, 4, "Number of question tokens."),
               TaskOption("na", int, 4, "Number of answer tokens."))

    def __post_init__(self) -> None:
        for name in ("N", "nq", "na"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(f"{'k' if name == 'N' else name} must be an integer >= 1, got {value!r}")
        k = self.N
        if self.nq < k or self.na < k:
            raise InputError(f"k = {k} context pairs need k distinct questions and answers: nq = {self.nq} and "
                             f"na = {self.na} must be >= k")
        self.cost().admit()
        self.vocab = [f"q{i}" for i in range(self.nq)] + ["="] + [f"a{i}" for i in range(self.na)]
        self.r = self.nq
        self.first_answer = self.nq + 1
        self.max_len = 3 * k + 2
        self.num_classes = self.na
        self._per_c = falling(self.nq, k) * falling(self.na, k)

    def cost(self) -> Cost:
        """The token names, and the falling factorials of the counts."""
        k = self.N
        return Cost(f"icqa with k={k}", 100.0 * (self.nq + self.na) + 64.0 * k * k, self.nq + 1 + self.na)

    @property
    def k(self) -> int:
        return self.N

    @property
    def total(self) -> int:
        return self.k * self._per_c

    def describe(self) -> dict:
        return {"name": self.name, "k": self.k, "nq": self.nq, "na": self.na,
                "inputs": "k pairs q = a (distinct questions, distinct answers), then q_c =; answer a_c; "
                          "k A(nq,k) A(na,k) examples"}

    # -- examples -----------------------------------------------------------------------------
    def _tokens(self, c: np.ndarray, questions: np.ndarray, answers: np.ndarray) -> np.ndarray:
        """Examples (B, 3k + 2) from the queried block c (B,) and the arrangements (B, k)."""
        B, k = questions.shape
        tokens = np.empty((B, 3 * k + 2), dtype=np.int64)
        tokens[:, 0:3 * k:3] = questions
        tokens[:, 1:3 * k:3] = self.r
        tokens[:, 2:3 * k:3] = answers + self.first_answer
        tokens[:, 3 * k] = questions[np.arange(B), c]
        tokens[:, 3 * k + 1] = self.r
        return tokens

    def _decode(self, index: np.ndarray) -> np.ndarray:
        per_pi = falling(self.na, self.k)
        c, rest = index // self._per_c, index % self._per_c
        pi, pi2 = rest // per_pi, rest % per_pi
        return self._tokens(c.astype(np.int64), arrangements(pi, self.nq, self.k), arrangements(pi2, self.na, self.k))

    def batches(self, start: int, stop: int, batch_size: int | Callable[[int], int]) -> Iterator[Batch]:
        size = batch_size(self.max_len) if callable(batch_size) else batch_size
        for a in range(start, stop, size):
            index = np.arange(a, min(a + size, stop), dtype=np.int64)
            tokens = self._decode(index)
            yield Batch(tokens, tokens[np.arange(len(index)), 3 * (index // self._per_c) + 2] - self.first_answer,
                        index)

    def decode(self, index: int) -> np.ndarray:
        if not 0 <= index < self.total:
            raise InputError(f"input index {index} is not in 0..{self.total - 1}")
        return self._decode(np.array([index], dtype=object))[0]

    def evaluate(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(answers, valid): the answer of the context block whose question is the query."""
        tokens = np.asarray(tokens, dtype=np.int64)
        B, L = tokens.shape
        k = self.k
        if L != 3 * k + 2:
            return np.full(B, -1), np.zeros(B, bool)
        q, a = tokens[:, 0:3 * k:3], tokens[:, 2:3 * k:3] - self.first_answer
        valid = (np.all((q >= 0) & (q < self.nq), axis=1) & np.all((a >= 0) & (a < self.na), axis=1)
                 & np.all(tokens[:, 1::3] == self.r, axis=1) & distinct_rows(q) & distinct_rows(a))
        match = q == tokens[:, 3 * k:3 * k + 1]
        valid &= match.sum(axis=1) == 1
        answers = np.where(valid, a[np.arange(B), np.argmax(match, axis=1)], -1)
        return answers, valid

    def index_of(self, tokens) -> int:
        self.answer(tokens)  # validates
        k = self.k
        q, a = [int(t) for t in tokens[0:3 * k:3]], [int(t) - self.first_answer for t in tokens[2:3 * k:3]]
        c = q.index(int(tokens[3 * k]))
        return (c * falling(self.nq, k) + arrangement_index(q, self.nq)) * falling(self.na, k) + \
            arrangement_index(a, self.na)

    def cases(self) -> Iterator[Case]:
        k = self.k
        questions, answers = np.arange(self.nq), np.arange(self.na) + self.first_answer
        r = np.array([self.r])
        doms = [questions, r, answers] * k + [questions, r]
        table = token_answers(len(self.vocab), self.first_answer, self.na)
        for c in range(k):
            yield Case(f"c={c}", doms, lambda S, c=c: S.sub(S.token(3 * c + 2), S.const(self.first_answer)),
                       c * self._per_c, self._per_c, valid=lambda S, c=c: self._valid(S, c),
                       answer_at=(3 * c + 2, table))

    def _valid(self, S, c: int):
        k = self.k
        q, a = [S.token(3 * i) for i in range(k)], [S.token(3 * i + 2) for i in range(k)]
        conds = [S.ne(x[i], x[j]) for x in (q, a) for i in range(k) for j in range(i + 1, k)]
        return S.all(conds + [S.eq(S.token(3 * k), q[c])])

    def answer_name(self, answer: int) -> str:
        return self.vocab[self.first_answer + answer] if 0 <= answer < self.na else f"<{answer}>"
