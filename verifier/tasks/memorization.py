"""Sequence classification, D_SC (Chen and Zou 2024, arXiv:2404.01601, Section 4.1 and Theorem 1).

A dataset of sequences of N tokens over an alphabet X, each followed by CLS, with **distinct
labels**: the model must memorize it.  The input space is the dataset itself, in its order:
example i is the i-th sequence, and its label is i.

* From a seed: `--alphabet` |X| (default 3) and `--size` (default every sequence, |X|^N of them);
  `--size` below that takes that many sequences chosen by `--data-seed`, in lexicographic order.
* From a file (`--dataset`, DATASET_SCHEMA): ``{"alphabet": ["a", "b"], "sequences": [["a", "b"], ...]}``;
  label i for sequence i.

A list of examples has no symbolic case split: the SMT engine says so, and `auto` enumerates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterator, Optional

import numpy as np

from ..support.errors import InputError
from ..support.schema import TEXT_LIMIT, load_json_file
from ..support.sizes import Cost
from .base import DATASET_HELP, Batch, TaskOption, Vocabulary
from .index_lookup import symbol_names

DATASET_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "a sequence-classification dataset (memorization --dataset): label i for sequence i",
    "type": "object",
    "additionalProperties": False,
    "required": ["alphabet", "sequences"],
    "properties": {
        "alphabet": {"type": "array", "minItems": 1, "uniqueItems": True,
                     "items": {"type": "string", "minLength": 1}},
        "sequences": {"type": "array", "minItems": 1, "uniqueItems": True,
                      "items": {"type": "array", "minItems": 1, "items": {"type": "string"}}},
    },
}
CLS = "CLS"


def _count(X: int, N: int) -> int:
    """|X|^N, the sequences in all; 2^64 stands for more (no table of them fits), before the power is taken."""
    return X ** N if N * math.log2(max(X, 2)) <= 64 else 1 << 64


@dataclass
class Memorization(Vocabulary):
    N: int
    alphabet: int = 3
    size: Optional[int] = None
    data_seed: int = 0
    dataset: Optional[str] = None

    name = "memorization"
    readout = "argmax"
    OPTIONS = (
        TaskOption("alphabet", int, 3, "|X|, the number of tokens (seeded datasets)."),
        TaskOption("size", int, None, "Number of sequences (default: all |X|^N)."),
        TaskOption("data_seed", int, 0, "Seed that picks the sequences when --size is below |X|^N."),
        TaskOption("dataset", str, None, DATASET_HELP, path=True),
    )
    SIZE_FLAGS = ("--length",)  # the paper's name for N: the tokens before CLS

    def __post_init__(self) -> None:
        if isinstance(self.N, bool) or not isinstance(self.N, int) or self.N < 1:
            raise InputError(f"N (the sequence length) must be an integer >= 1, got {self.N!r}")
        if self.dataset is not None:
            self.cost().admit()
            names, rows = self._load()
        else:
            names, rows = self._seeded()
        self.symbols = names
        self.vocab = names + [CLS]
        self.sequences = rows  # (size, N) token ids
        self.max_len = self.N + 1
        self.num_classes = len(rows)
        radix = len(names) ** np.arange(self.N - 1, -1, -1, dtype=object)
        self._codes = {int(c): i for i, c in enumerate(rows.astype(object) @ radix)}
        self._radix = radix

    def cost(self) -> Cost:
        """The sequences' table: of a dataset, its names (read first: a file of at most 64 MiB); else
        |X|^N rows, or --size."""
        if self.dataset is not None:  # a file of at most TEXT_LIMIT bytes; its tokens are counted as it is read
            return Cost(f"memorization of the dataset {self.dataset}", 16.0 * TEXT_LIMIT)
        X = self.alphabet
        size = _count(X, self.N) if self.size is None else self.size
        return Cost(f"memorization of {'|X|^N' if self.size is None else f'{size:,}'} sequences (N={self.N}, "
                    f"|X|={X})", 16.0 * size * (self.N + 1), X + 1)

    def _seeded(self) -> tuple[list[str], np.ndarray]:
        X = self.alphabet
        if isinstance(X, bool) or not isinstance(X, int) or X < 1:
            raise InputError(f"--alphabet must be an integer >= 1, got {X!r}")
        if self.size is not None and (isinstance(self.size, bool) or not isinstance(self.size, int) or self.size < 1):
            raise InputError(f"--size must be an integer >= 1, got {self.size!r}")
        if isinstance(self.data_seed, bool) or not isinstance(self.data_seed, int) or self.data_seed < 0:
            raise InputError(f"--data-seed must be an integer >= 0, got {self.data_seed!r}")
        self.cost().admit()
        everything = _count(X, self.N)
        size = everything if self.size is None else self.size
        if everything >= 1 << 63:  # the sequences are drawn by index, an int64
            raise InputError(f"memorization draws its sequences among |X|^N = {X}^{self.N} by an int64 index: "
                             f"|X|^N must be below 2^63 (give the sequences with --dataset)")
        if not size <= everything:
            raise InputError(f"--size must be an integer in 1..{everything:,} (|X|^N), got {size!r}")
        if size == everything:
            index = np.arange(size, dtype=np.int64)
        else:
            rng = np.random.default_rng(self.data_seed)
            index = np.sort(rng.choice(everything, size=size, replace=False))
        rows = (index[:, None] // X ** np.arange(self.N - 1, -1, -1, dtype=np.int64)) % X
        return symbol_names(X), rows.astype(np.int64)

    def _load(self) -> tuple[list[str], np.ndarray]:
        if self.size is not None or self.alphabet != 3 or self.data_seed != 0:
            raise InputError("--dataset gives the sequences: --alphabet, --size and --data-seed do not apply")
        data, self.dataset_sha256 = load_json_file(self.dataset, DATASET_SCHEMA, "dataset")
        names = data["alphabet"]
        Cost(f"memorization of the dataset {self.dataset}", tokens=len(names) + 1).admit()
        if CLS in names:
            raise InputError(f"dataset {self.dataset}: alphabet: {CLS!r} is the appended token, not a symbol")
        ids = {n: i for i, n in enumerate(names)}
        rows = []
        for i, seq in enumerate(data["sequences"]):
            if len(seq) != self.N:
                raise InputError(f"dataset {self.dataset}: sequences[{i}]: has {len(seq)} tokens, N = {self.N}")
            unknown = [t for t in seq if t not in ids]
            if unknown:
                raise InputError(f"dataset {self.dataset}: sequences[{i}]: {unknown[0]!r} is not in the alphabet")
            rows.append([ids[t] for t in seq])
        return list(names), np.array(rows, dtype=np.int64)

    # -- the task interface -------------------------------------------------------------------
    @property
    def total(self) -> int:
        return len(self.sequences)

    def describe(self) -> dict:
        return {"name": self.name, "N": self.N, "alphabet": len(self.symbols), "size": self.total,
                "dataset": self.dataset or f"seed {self.data_seed}",
                "inputs": "x_1..x_N CLS, each sequence of the dataset; answer its own label"} | \
            ({"dataset_sha256": self.dataset_sha256} if self.dataset else {})  # the bytes read: a cache keys on them

    def _tokens(self, rows: np.ndarray) -> np.ndarray:
        return np.concatenate([rows, np.full((len(rows), 1), len(self.symbols))], axis=1)

    def batches(self, start: int, stop: int, batch_size: int | Callable[[int], int]) -> Iterator[Batch]:
        size = batch_size(self.max_len) if callable(batch_size) else batch_size
        for a in range(start, stop, size):
            index = np.arange(a, min(a + size, stop), dtype=np.int64)
            yield Batch(self._tokens(self.sequences[index]), index, index)

    def evaluate(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        answers = np.array([self._lookup(row) for row in np.asarray(tokens)], dtype=np.int64)
        return answers, answers >= 0

    def _lookup(self, row) -> int:
        """The label of a token row, or -1 if it is not an input of the dataset."""
        row = [int(t) for t in row]
        if len(row) != self.N + 1 or row[-1] != len(self.symbols) or any(not 0 <= t < len(self.symbols)
                                                                      for t in row[:-1]):
            return -1
        return self._codes.get(int(np.dot(np.array(row[:-1], dtype=object), self._radix)), -1)

    def answer(self, tokens) -> int:
        label = self._lookup(tokens)
        if label < 0:
            raise InputError(f"not an example of the {self.name} dataset: {self.render(tokens)}")
        return label

    def index_of(self, tokens) -> int:
        return self.answer(tokens)

    def decode(self, index: int) -> np.ndarray:
        if not 0 <= index < self.total:
            raise InputError(f"input index {index} is not in 0..{self.total - 1}")
        return self._tokens(self.sequences[[index]])[0]

    def answer_name(self, answer: int) -> str:
        return f"class {answer}" if 0 <= answer < self.total else f"<{answer}>"
