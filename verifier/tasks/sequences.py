"""Tasks with an answer at every position, over every string up to length N after a start token.

* `InductionHeads` (Sanford, Hsu, Telgarsky 2024, arXiv:2408.14332, Section 1): at position i,
  the token that followed the rightmost earlier occurrence of s_i, or BOT if s_i did not occur
  before:  tau_i = s_{j*+1} with j* = max{ j < i : s_j = s_i }.
* `Dyck22` (Bhattamishra et al. 2024, arXiv:2406.09347, Section 4.3 and Theorem 5): at position i,
  whether s_1 ... s_i is in Dyck-(2,2), the balanced strings over ( ) [ ] whose prefixes never
  hold more than 2 unclosed brackets.  It is regular: the 7 stacks of depth <= 2 and a reject
  sink (`DYCK22_DFA`).

Inputs are ``<s> s_1 ... s_n`` for n = 1..N; the start token sits at position 0 and has an answer
too (BOT; the empty string is in Dyck-(2,2)).  Order of enumeration: by n, then s_1 ... s_n as a
base-|alphabet| number, s_1 the most significant digit.  One SMT case per length.
"""

from __future__ import annotations

import itertools
import math
import operator
import string
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..support.errors import InputError
from ..support.sizes import Cost
from .base import Case, TaskOption, token_answers
from .product import ProductTask

BOS = "<s>"


class _Lengths(Sequence):
    """The cases n = 1..N, each ``<s>`` then n symbols, made when asked for: held at once they
    would be N^2 / 2 domains."""

    def __init__(self, start: np.ndarray, symbols: np.ndarray, N: int):
        self.start, self.symbols, self.N = start, symbols, N

    def __len__(self) -> int:
        return self.N

    def __getitem__(self, c: int) -> tuple[str, list[np.ndarray]]:
        if not -self.N <= c < self.N:
            raise IndexError(c)
        n = c % self.N + 1
        return f"n={n}", [self.start] + [self.symbols] * n


class _Strings(ProductTask):
    """Strings over an alphabet after a start token, lengths 1..N, an answer per position."""

    per_position = True
    readout = "argmax"

    def _strings(self) -> None:
        if isinstance(self.N, bool) or not isinstance(self.N, int) or self.N < 1:
            raise InputError(f"N must be an integer >= 1, got {self.N!r}")
        self.cost().admit()
        alphabet = self.alphabet()
        A = len(alphabet)
        self.vocab = alphabet + [BOS]
        self.bos = A
        self.space = _Lengths(np.array([self.bos]), np.arange(A), self.N)
        self._layout(itertools.accumulate(itertools.repeat(A, self.N), operator.mul), self.N + 1)  # A^n

    def alphabet(self) -> list[str]:
        raise NotImplementedError

    def cost(self) -> Cost:
        """The sizes and offsets of the N lengths: integers of up to N log2 A bits each."""
        A = len(self.alphabet())
        return Cost(f"{self.name} at N={self.N}", 64.0 * self.N + self.N ** 2 * math.log2(A) / 8, A + 1)

    def _locate(self, tokens) -> tuple[int, int]:
        """(case, index within it) of ``<s> s_1 .. s_n``: case n - 1, s_1 .. s_n in base |alphabet|
        (found directly: the generic search makes the domains of every length before it)."""
        tokens = [int(t) for t in tokens]
        if not 1 <= len(tokens) - 1 <= self.N or tokens[0] != self.bos or any(not 0 <= t < self.bos
                                                                               for t in tokens[1:]):
            raise InputError(f"not a {self.name} input: {self.render(tokens)}")
        r = 0
        for t in tokens[1:]:
            r = r * self.bos + t
        return len(tokens) - 2, r

    def count_up_to(self, n: int) -> int:
        """How many inputs have length at most n (they come first in the enumeration)."""
        return self._offsets[n]

    def _split(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(the symbols s_1..s_n, valid) of a batch (B, n + 1)."""
        tokens = np.asarray(tokens, dtype=np.int64)
        s = tokens[:, 1:]
        valid = (tokens[:, 0] == self.bos) & np.all((s >= 0) & (s < self.bos), axis=1) & (s.shape[1] <= self.N)
        return np.where(valid[:, None], s, 0), valid & (s.shape[1] >= 1)


@dataclass
class InductionHeads(_Strings):
    N: int
    sigma: int = 3

    name = "induction_heads"
    OPTIONS = (TaskOption("sigma", int, 3, "Alphabet size."),)

    def __post_init__(self) -> None:
        if isinstance(self.sigma, bool) or not isinstance(self.sigma, int) or not 2 <= self.sigma <= 26:
            raise InputError(f"sigma (alphabet size) must be an integer in 2..26, got {self.sigma!r}")
        self._strings()
        self.bot = self.sigma  # the answer "no earlier occurrence"
        self.num_classes = self.sigma + 1

    def alphabet(self) -> list[str]:
        return list(string.ascii_lowercase[:self.sigma])

    def describe(self) -> dict:
        return {"name": self.name, "N": self.N, "sigma": self.sigma, "inputs": "<s> s_1..s_n for n = 1..N",
                "answer": "at every position i: the token after the rightmost earlier occurrence of s_i, or BOT"}

    def evaluate(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        s, valid = self._split(tokens)
        B, n = s.shape
        rows = np.arange(B)
        follower = np.full((B, self.sigma), self.bot)  # the token after the latest occurrence so far
        answers = np.full((B, n + 1), self.bot)
        for i in range(n):
            if i:
                follower[rows, s[:, i - 1]] = s[:, i]
            answers[:, i + 1] = follower[rows, s[:, i]]
        return answers, valid

    def case_truth(self, c: int) -> Callable:
        n = c + 1

        def truth(S):
            tau = [S.const(self.bot), S.const(self.bot)]
            for i in range(2, n + 1):  # positions of s_2 .. s_n (position 0 is the start token)
                t = S.const(self.bot)
                for j in range(2, i + 1):  # later matches overwrite earlier ones
                    t = S.select([t, S.token(j)], S.as_int(S.eq(S.token(j - 1), S.token(i))))
                tau.append(t)
            return tau

        return truth

    def answer_name(self, answer: int) -> str:
        return self.vocab[answer] if 0 <= answer < self.sigma else "BOT" if answer == self.bot else f"<{answer}>"

    def last_position_cases(self) -> Iterator[Case]:
        """The answer at the last position only, as cases that fix it (`Case.answer_at`): for each
        length n, query token a = s_n and position k of its latest earlier occurrence, the box
        ``<s>, any ... any (positions 1..k-1), a, not a ... not a (k+1..n-1), a`` whose answer is
        the token at k + 1; and k = none (answer BOT).  Per length they partition the strings, so
        with a causal model, whose output at position i depends on positions <= i only, they
        cover the answer at every position of every input (`Bounds`: every-position readouts)."""
        sigma = self.sigma
        start, free = np.array([self.bos]), np.arange(sigma)
        other = [np.setdiff1d(free, [a]) for a in range(sigma)]
        symbols = token_answers(len(self.vocab), 0, sigma)
        for n in range(1, self.N + 1):
            for a in range(sigma):
                one = np.array([a])
                bot = np.full(len(self.vocab), -1)
                bot[a] = self.bot
                yield Case(f"n={n} s_n={self.vocab[a]} none", [start] + [other[a]] * (n - 1) + [one],
                           lambda S: None, self._offsets[n - 1], (sigma - 1) ** (n - 1), None, (n, bot))
                for k in range(n - 1, 0, -1):
                    doms = [start] + [free] * (k - 1) + [one] + [other[a]] * (n - 1 - k) + [one]
                    yield Case(f"n={n} s_n={self.vocab[a]} k={k}", doms, lambda S: None, self._offsets[n - 1],
                               sigma ** (k - 1) * (sigma - 1) ** (n - 1 - k), None, (k + 1, symbols))


# The Dyck-(2,2) automaton: states are the stacks of depth <= 2, then the reject sink.
DYCK22_STATES = ["", "(", "[", "((", "([", "[(", "[["]
DYCK22_ALPHABET = ["(", ")", "[", "]"]
REJECT = len(DYCK22_STATES)


def _dyck22_dfa() -> np.ndarray:
    """delta[state, token] for the 7 stacks and the sink (Bhattamishra et al. 2024, Section 4.3:
    "Dyck-(2,2) ... with just 7 states"; the sink is the 8th, which the paper does not count)."""
    delta = np.full((REJECT + 1, 4), REJECT, dtype=np.int64)
    index = {stack: q for q, stack in enumerate(DYCK22_STATES)}
    for q, stack in enumerate(DYCK22_STATES):
        for a, c in enumerate(DYCK22_ALPHABET):
            if c in "([" and len(stack) < 2:
                delta[q, a] = index[stack + c]
            elif c in ")]" and stack and stack[-1] == {")": "(", "]": "["}[c]:
                delta[q, a] = index[stack[:-1]]
    return delta


DYCK22_DFA = _dyck22_dfa()


@dataclass
class Dyck22(_Strings):
    N: int

    name = "dyck22"
    OPTIONS = ()
    num_classes = 2
    dfa = DYCK22_DFA  # a task with a DFA can be decided for every length by the `reach` engine
    accepting = (0,)

    def __post_init__(self) -> None:
        self._strings()

    def alphabet(self) -> list[str]:
        return list(DYCK22_ALPHABET)

    def describe(self) -> dict:
        return {"name": self.name, "N": self.N, "inputs": "<s> s_1..s_n over ( ) [ ] for n = 1..N",
                "answer": "at every position i: 1 iff s_1..s_i is in Dyck-(2,2)"}

    def evaluate(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        s, valid = self._split(tokens)
        B, n = s.shape
        state = np.zeros(B, dtype=np.int64)
        answers = np.ones((B, n + 1), dtype=np.int64)  # the empty prefix is in the language
        for i in range(n):
            state = self.dfa[state, s[:, i]]
            answers[:, i + 1] = state == 0
        return answers, valid

    def case_truth(self, c: int) -> Callable:
        n = c + 1

        def truth(S):
            state, out = S.const(0), [S.const(1)]
            for i in range(1, n + 1):
                state = S.select([S.select([S.const(int(x)) for x in row], S.token(i)) for row in self.dfa], state)
                out.append(S.as_int(S.eq(state, S.const(0))))
            return out

        return truth

    def answer_name(self, answer: int) -> str:
        return {0: "0 (not in Dyck-(2,2))", 1: "1 (in Dyck-(2,2))"}.get(answer, f"<{answer}>")
