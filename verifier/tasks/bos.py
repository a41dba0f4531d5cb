"""A task as a model with a BOS token sees it: the same inputs with the BOS token before each.

A model file may name a BOS token (``meta.bos``, docs/model-format.md): most trained models and
every Tracr-compiled one read ``BOS s_1 .. s_n``, not ``s_1 .. s_n``.  `WithBos` is the task seen
through such a model: the BOS token is the vocabulary's last id (the task's own ids are kept), it
is fixed at position 0 of every input, every case gets a one-token domain in front, and the
answers are the task's own (a readout at every position reads positions 1 .. n, not BOS:
`evaluator.read_from`).  The enumeration order and indices are the task's.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Optional, Sequence, overload

import numpy as np

from ..support.errors import InputError
from .base import Batch, Case, Checked, Domains, Vocabulary


class _Shifted:
    """A `symbolic.SymFX` seen by the task's own truth and validity formulas: position j of the
    task is position j + 1 of the model's input."""

    def __init__(self, S):
        self._S = S

    def __getattr__(self, name: str):
        return getattr(self._S, name)

    @property
    def domains(self):
        return self._S.domains[1:]

    def token(self, j: int):
        return self._S.token(j + 1)

    def lookup(self, j: int, table):
        return self._S.lookup(j + 1, table)

    def func(self, positions: list[int], table: np.ndarray):
        return self._S.func([j + 1 for j in positions], table)

    def pair(self, i: int, j: int, table: np.ndarray):
        return self._S.pair(i + 1, j + 1, table)

    def is_token(self, j: int, a: int):
        return self._S.is_token(j + 1, a)

    def member(self, j: int, values: np.ndarray):
        return self._S.member(j + 1, values)


@overload
def _shifted(formula: Callable[..., Any]) -> Callable[[Any], Any]: ...
@overload
def _shifted(formula: Optional[Callable[..., Any]]) -> Optional[Callable[[Any], Any]]: ...
def _shifted(formula: Optional[Callable[..., Any]]) -> Optional[Callable[[Any], Any]]:
    return None if formula is None else (lambda S: formula(_Shifted(S)))


# A task's optional capabilities (the `Task` protocol): the wrapper has one only when it defines
# it itself, over the model's inputs; the task's own (over inputs without BOS) is never passed
# through, so an engine that reads one is told the truth.  `cases` and `answered` are wrapped (None
# exactly when the task has none); a DFA reads no BOS, so `dfa` keeps Vocabulary's None and its
# `accepting` states, which the protocol does not declare, are not forwarded either.
NOT_FORWARDED = ("accepting",)


class WithBos(Vocabulary):
    """`task` read by a model whose inputs start with the token `bos_name`."""

    def __init__(self, task, bos_name: str):
        self.inner = task
        self.per_position = task.per_position
        self.bos = len(task.vocab)
        self.vocab = list(task.vocab) + [bos_name]
        self.max_len = task.max_len + 1
        self._start = np.array([self.bos], dtype=np.int64)
        self._prefixes: dict[int, tuple[list, list]] = {}

    def __getattr__(self, name: str):  # name, num_classes, readout, answer_name, ...: the task's own
        if name.startswith("__") or name == "inner" or name in NOT_FORWARDED:  # unpickling looks up `__` names
            raise AttributeError(name)                                              # before `inner` is set
        return getattr(self.inner, name)

    @property
    def total(self) -> int:
        return self.inner.total

    def describe(self) -> dict:
        return {**self.inner.describe(), "bos": self.vocab[-1]}

    def _with_start(self, tokens: np.ndarray) -> np.ndarray:
        tokens = np.asarray(tokens, dtype=np.int64)
        return np.concatenate([np.full(tokens.shape[:-1] + (1,), self.bos, dtype=np.int64), tokens], axis=-1)

    def _strip(self, tokens) -> tuple[np.ndarray, np.ndarray]:
        """(the task's tokens, starts with BOS) of a batch (B, L) of model inputs."""
        tokens = np.atleast_2d(np.asarray(tokens, dtype=np.int64))
        return tokens[:, 1:], (tokens[:, 0] == self.bos) if tokens.shape[1] else np.zeros(len(tokens), bool)

    def batches(self, start: int, stop: int, batch_size) -> Iterator[Batch]:
        size_of = batch_size if callable(batch_size) else (lambda L: batch_size)
        for b in self.inner.batches(start, stop, lambda L: size_of(L + 1)):
            yield Batch(self._with_start(b.tokens), b.expected, b.index)

    def evaluate(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        inner, starts = self._strip(tokens)
        # a BOS anywhere else is not one of the task's tokens: the task must not see its id
        clean = starts & np.all(inner != self.bos, axis=1)
        answers, valid = self.inner.evaluate(np.where(inner == self.bos, 0, inner))
        return answers, valid & clean

    def decode(self, index: int) -> np.ndarray:
        return self._with_start(self.inner.decode(index))

    def index_of(self, tokens) -> int:
        inner, starts = self._strip(tokens)
        if not starts[0]:
            raise InputError(f"{self.name}: the input does not start with {self.vocab[-1]}")
        return self.inner.index_of(inner[0])

    @property  # the capabilities follow the task's: read-only here
    def cases(self) -> Optional[Callable[[], Iterator[Case]]]:  # type: ignore[override]
        """The task's cases with BOS in front; like the task, None when it has no case splits
        (memorization)."""
        inner = self.inner.cases
        return None if inner is None else lambda: self._cases(inner)

    @property
    def answered(self) -> Optional[Callable[[], Checked]]:  # type: ignore[override]
        return self.inner.answered

    def _cases(self, inner: Callable[[], Iterator[Case]]) -> Iterator[Case]:
        for c in inner():
            at = None
            if c.answer_at is not None:
                j, table = c.answer_at
                at = (j + 1, np.append(table, -1))
            yield Case(c.name, self._domains(c.domains), _shifted(c.truth), c.offset, c.count,
                       _shifted(c.valid), at)

    def _domains(self, domains: Sequence[np.ndarray]) -> Sequence[np.ndarray]:
        """One-token domain in front; a shared prefix (`Domains`) stays shared."""
        if not isinstance(domains, Domains):
            return [self._start] + list(domains)
        prefix = domains.prefix
        key = id(prefix)
        if key not in self._prefixes:
            self._prefixes[key] = (prefix, [self._start] + list(prefix))
        return Domains(self._prefixes[key][1], domains.last)
