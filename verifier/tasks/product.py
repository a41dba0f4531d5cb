"""Tasks whose input space is a list of cases, each a product of per-position token domains.

The enumeration goes case by case; within a case, the free positions (domains of more than one
token) form a mixed-radix number, the first position the most significant digit.  A task may
filter its space (Bhattamishra et al. 2024's margin assumption for nearest neighbour, distinct keys for MQAR):
filtered-out elements keep their index, are never evaluated, and are counted as dropped.
Subclasses set ``self.space`` (a list of (name, domains)) and implement `evaluate`,
`case_truth` and, when they filter, `case_valid`.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Callable, Iterator, Optional

import numpy as np

from ..support.errors import InputError
from .base import Batch, Case, Vocabulary

_INT64_LIMIT = 1 << 62


def product_rows(lists: Sequence[np.ndarray]) -> np.ndarray:
    """Every member of the product of token lists, a row each, the last list varying fastest (the
    order of np.meshgrid, which takes at most 32 lists)."""
    sizes = [len(x) for x in lists]
    out = np.empty((math.prod(sizes), len(lists)), dtype=np.int64)
    index = np.arange(len(out))
    for j in range(len(lists) - 1, -1, -1):
        index, digit = np.divmod(index, sizes[j])
        out[:, j] = np.asarray(lists[j])[digit]
    return out


def product_size(doms) -> int:
    """The number of elements of a product of domains (a power per domain size, not a product of
    N growing integers)."""
    return math.prod(size ** count for size, count in Counter(len(d) for d in doms).items() if size > 1)


class ProductTask(Vocabulary):
    name: str
    vocab: list[str]
    space: Sequence[tuple[str, Sequence[np.ndarray]]]  # a list, or made when asked for (`sequences._Lengths`)
    invalid_reason = "filtered out"  # what a filtered-out element violates

    # -- what a subclass provides -------------------------------------------------------------
    def evaluate(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(answers, valid) for a batch (B, L) of elements of one case's product."""
        raise NotImplementedError

    def case_truth(self, c: int) -> Callable:
        raise NotImplementedError

    def case_valid(self, c: int) -> Optional[Callable]:
        return None

    # -- the enumeration ----------------------------------------------------------------------
    def _layout(self, sizes: Optional[Iterable[int]] = None, max_len: Optional[int] = None) -> None:
        """The cases' sizes and offsets.  A task whose cases are regular gives their sizes and the
        longest case in closed form, so that N cases of up to N positions are laid out without
        visiting their N^2 domains."""
        if sizes is None:
            sizes = [product_size(doms) for _, doms in self.space]
        self._sizes = list(sizes)
        self._offsets = list(itertools.accumulate(self._sizes, initial=0))
        self.max_len = max(len(doms) for _, doms in self.space) if max_len is None else max_len

    def _free(self, c: int) -> list[int]:
        """The free positions of case c (domains of more than one token)."""
        return [j for j, d in enumerate(self.space[c][1]) if len(d) > 1]

    @property
    def total(self) -> int:
        return self._offsets[-1]

    def _tokens(self, c: int, r: np.ndarray) -> np.ndarray:
        """Elements r (indices within case c) of case c's product, as tokens (B, L).  r may be an
        object array of Python ints: spaces beyond int64 are indexed too (and decided by SMT)."""
        doms = self.space[c][1]
        tokens = np.empty((len(r), len(doms)), dtype=np.int64)
        for j, d in enumerate(doms):
            tokens[:, j] = d[0]
        rest = r.copy()
        for j in reversed(self._free(c)):  # the last free position is the least significant digit
            n = len(doms[j])
            tokens[:, j] = doms[j][(rest % n).astype(np.int64, copy=False)]
            rest //= n
        return tokens

    def batches(self, start: int, stop: int, batch_size: int | Callable[[int], int]) -> Iterator[Batch]:
        size_of = batch_size if callable(batch_size) else (lambda L: batch_size)
        for c in range(bisect.bisect_right(self._offsets, start) - 1, len(self._sizes)):
            lo, hi = max(start, self._offsets[c]), min(stop, self._offsets[c + 1])
            if lo >= hi:
                if self._offsets[c] >= stop:
                    return
                continue
            name, doms = self.space[c]
            if self._sizes[c] >= _INT64_LIMIT:
                raise InputError(f"{self.name}: case {name} has too many inputs to enumerate")
            size = size_of(len(doms))
            for a in range(lo, hi, size):
                r = np.arange(a, min(a + size, hi), dtype=np.int64) - self._offsets[c]
                tokens = self._tokens(c, r)
                answers, valid = self.evaluate(tokens)
                yield Batch(tokens[valid], answers[valid], (r + self._offsets[c])[valid])

    def cases(self) -> Iterator[Case]:
        for c, (name, doms) in enumerate(self.space):
            yield Case(name, doms, self.case_truth(c), self._offsets[c], self._sizes[c], self.case_valid(c))

    def _locate(self, tokens) -> tuple[int, int]:
        """(case, index within the case) of an element of the space; InputError if it is none."""
        tokens = [int(t) for t in tokens]
        for c, (_, doms) in enumerate(self.space):
            if len(doms) != len(tokens) or any(t not in d for t, d in zip(tokens, doms)):
                continue
            r = 0
            for j in self._free(c):
                r = r * len(doms[j]) + int(np.flatnonzero(doms[j] == tokens[j])[0])
            return c, r
        raise InputError(f"not a {self.name} input: {self.render(tokens)}")

    def index_of(self, tokens) -> int:
        c, r, _ = self._classify(tokens)
        return self._offsets[c] + r

    def decode(self, index: int) -> np.ndarray:
        if not 0 <= index < self.total:
            raise InputError(f"input index {index} is not in 0..{self.total - 1}")
        c = bisect.bisect_right(self._offsets, index) - 1
        return self._tokens(c, np.array([index - self._offsets[c]], dtype=object))[0]

    def answer(self, tokens):
        """The ground truth, from the tokens; InputError if they are not an input of the task."""
        return self._classify(tokens)[2]

    def _classify(self, tokens) -> tuple[int, int, object]:
        """(case, index within the case, answer) of an input; InputError if it is none."""
        c, r = self._locate(tokens)
        answers, valid = self.evaluate(np.asarray([tokens], dtype=np.int64))
        if not valid[0]:
            raise InputError(f"not a {self.name} input ({self.invalid_reason}): {self.render(tokens)}")
        return c, r, answers[0] if self.per_position else int(answers[0])
