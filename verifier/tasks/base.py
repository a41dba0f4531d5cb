"""The task interface: a finite input space in a fixed order, and its ground truth."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Iterator, Optional, Protocol

import numpy as np

from ..support.errors import InputError, InternalError

NO_ANSWER = -1  # a per-position answer that is not required: that position is not judged


@dataclass
class Checked:
    """What a run judged: the inputs of the task it evaluated and, for a task with an answer at
    every position, the positions with an answer among the positions of those inputs (the
    others need no answer and are not judged)."""

    inputs: int = 0
    positions: Optional[int] = None
    of_positions: Optional[int] = None

    def __add__(self, other: "Checked") -> "Checked":
        def plus(a, b):
            return None if a is None and b is None else (a or 0) + (b or 0)
        return Checked(self.inputs + other.inputs, plus(self.positions, other.positions),
                       plus(self.of_positions, other.of_positions))

    @classmethod
    def of(cls, expected: np.ndarray) -> "Checked":
        """The inputs of a batch by their expected answers, (B,) or per position (B, L)."""
        expected = np.asarray(expected)
        if expected.ndim < 2:
            return cls(len(expected))
        return cls(len(expected), int((expected != NO_ANSWER).sum()), int(expected.size))

    def to_json(self) -> dict:
        return {"inputs": self.inputs, "positions": self.positions, "of_positions": self.of_positions}


class Domains(Sequence):
    """Per-position token domains as a shared list for positions 0..L-2 and the last position's
    domain: cases that differ only in their last position (index lookup's queries) share the
    list instead of copying it, and an engine that batches them sees the sharing by identity."""

    __slots__ = ("prefix", "last")

    def __init__(self, prefix: list, last: np.ndarray):
        self.prefix, self.last = prefix, last

    def __len__(self) -> int:
        return len(self.prefix) + 1

    def __getitem__(self, i):
        if isinstance(i, slice):
            return list(self)[i]
        n = len(self.prefix)
        i = i + n + 1 if i < 0 else i
        if i == n:
            return self.last
        if not 0 <= i < n:
            raise IndexError(i)
        return self.prefix[i]

    def __iter__(self):
        yield from self.prefix
        yield self.last


@dataclass
class Case:
    """A case split for symbolic engines: inputs of one length with per-position token domains.

    ``domains[j]`` lists the token ids position j may hold (one id: the position is fixed).
    ``truth(S)`` builds the expected answer (a class index, or the bit pattern of a threshold
    readout) from the token variables of a `symbolic.SymFX` S; ``valid(S)``, when given, is the
    condition an element of the product of the domains must meet to be an input of the task (a
    margin, distinct keys); the engines only look for failures among valid inputs.  The case's
    inputs are enumeration indices ``offset .. offset + count - 1`` (invalid ones included).
    ``answer_at`` = (j, table), when given, says the answer is ``table[token at position j]`` (a
    table over the vocabulary) on every input of the case: what the bounds engine needs to know
    the answer on a box that fixes position j.
    """

    name: str
    domains: Sequence[np.ndarray]  # a list, or `Domains`
    truth: Callable[..., Any]  # called with S alone (a lambda may bind more by its defaults)
    offset: int
    count: int
    valid: Optional[Callable[..., Any]] = None
    answer_at: Optional[tuple[int, np.ndarray]] = None

    @property
    def length(self) -> int:
        return len(self.domains)


@dataclass
class FeatureSum:
    """The answer as a function of a sum of features, each a table over the tokens of a few
    positions: answer(base + sum_n table_n[tokens at positions_n]) on every input (equality counts
    the unequal pairs, a sparse threshold compares its features' sum with b).  What the aggregate
    engine needs to know the answer from the blocks of positions a model reads together."""

    features: list[tuple[tuple[int, ...], np.ndarray]]  # (sequence positions, table indexed by their tokens)
    answer: Callable[[np.ndarray], np.ndarray]  # sums -> answers
    base: int = 0


def membership(domains: Sequence[np.ndarray], vocab_size: int) -> np.ndarray:
    """A box's membership table, positions x vocabulary: may position j hold token t."""
    member = np.zeros((len(domains), vocab_size), bool)
    for j, d in enumerate(domains):
        member[j, d] = True
    return member


def case_splits(task: Task) -> Iterator[Case]:
    """The task's case splits, for an engine whose `unsupported` refused a task without them."""
    if task.cases is None:
        raise InternalError(f"task {task.name} has no case splits")
    return task.cases()


def token_answers(vocab_size: int, first: int, count: int) -> np.ndarray:
    """A `Case.answer_at` table: tokens first .. first + count - 1 are answers 0 .. count - 1."""
    table = np.full(vocab_size, -1, dtype=np.int64)
    table[first:first + count] = np.arange(count)
    return table


def flag(name: str) -> str:
    """The command-line spelling of an option name: shared_g -> --shared-g."""
    return "--" + name.replace("_", "-")


DATASET_HELP = "Dataset file: JSON lines of inputs and answers (dataset), JSON (memorization)."


def split_path(value: str) -> tuple[Optional[str], str]:
    """A path option's file and what follows it: ``m.py:fn`` -> (``m.py``, ``:fn``); a module
    reference ``pkg.mod:fn`` names no file: (None, the value)."""
    head, sep, tail = value.rpartition(":")
    if not sep or not tail.isidentifier():
        return value, ""
    return (head, sep + tail) if head.endswith(".py") else (None, value)


@dataclass(frozen=True)
class TaskOption:
    """A parameter of a task besides N (the CLI shows it as `flag`, or as `spelled` where its name
    would clash with another option's: composition's n beside --N).  A `path` option names a
    file, which a spec gives relative to itself."""

    name: str
    type: type
    default: Any
    help: str
    path: bool = False
    spelled: Optional[str] = None

    @property
    def flag(self) -> str:
        return self.spelled or flag(self.name)


class Vocabulary:
    """`render` by token name; `answer` from the batched ground truth, for tasks that have one.
    The base of every task: it gives the `Task` protocol's optional capabilities their defaults
    (none), which a task overrides where it has one."""

    # what a task gives (declared for the methods below; a wrapper may take them from its task)
    name: str
    N: int
    vocab: list[str]
    answer_name: Callable[[int], str]
    evaluate: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]

    per_position = False
    OPTIONS: ClassVar[tuple[TaskOption, ...]]  # not optional: every task class has its own (a wrapper, its task's)
    SIZE_FLAGS: ClassVar[tuple[str, ...]] = ()
    SIZE_HELP: ClassVar[str] = "largest input length"  # what --N is, in the paper's words
    cases: Optional[Callable[[], Iterator[Case]]] = None
    dfa: Optional[np.ndarray] = None
    answered: Optional[Callable[[], Checked]] = None
    draw_inputs: Optional[Callable[[Sequence[np.ndarray], np.random.Generator, int], np.ndarray]] = None

    def render(self, tokens) -> str:
        return " ".join(self.vocab[int(t)] if 0 <= int(t) < len(self.vocab) else f"<{int(t)}>" for t in tokens)

    def answer(self, tokens):
        answers, valid = self.evaluate(np.asarray([tokens]))
        if not valid[0]:
            raise InputError(f"not an input of {self.name}: {self.render(tokens)}")
        return answers[0] if self.per_position else int(answers[0])

    def answer_text(self, answer) -> str:
        """A whole answer by name: one class, or the answer at every position (``-`` where none is
        required)."""
        if self.per_position:
            return " ".join("-" if int(a) == NO_ANSWER else self.answer_name(int(a)) for a in answer)
        return self.answer_name(int(answer))


@dataclass
class Batch:
    """Inputs of one length: tokens (B, L), expected answers (B,) or, for a task with an answer at
    every position, (B, L) (`NO_ANSWER` where none is required), global indices (B,)."""

    tokens: np.ndarray
    expected: np.ndarray
    index: np.ndarray


class Task(Protocol):
    """A task enumerates its inputs in a fixed order, so that a range can be resumed or split.

    `answer` computes the ground truth from the tokens alone (not from the enumeration), so that
    a replay checks a counterexample against the definition of the task.

    Optional capabilities are declared below and read, never probed with ``hasattr``: None (or
    empty) when the task lacks one (`Vocabulary` gives these defaults).
    """

    name: str
    N: int  # the size
    vocab: list[str]
    max_len: int
    num_classes: int
    readout: str  # the readout kind the task's answers are for: argmax or threshold
    per_position: bool  # an answer at every position (a sequence output), not only the last

    @property
    def total(self) -> int: ...

    def batches(self, start: int, stop: int, batch_size: int | Callable[[int], int]) -> Iterator[Batch]:
        """Inputs start..stop-1 in order, in batches of one length; batch_size may depend on it."""

    def decode(self, index: int) -> np.ndarray: ...

    def answer(self, tokens: np.ndarray):
        """The answer (an int), or for a per-position task the answers (L,), `NO_ANSWER` at a position
        that needs none (an input has an answer at one position at least)."""

    def answer_text(self, answer) -> str: ...

    def evaluate(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Batched ground truth: (answers, valid) for token sequences (B, L) of one length; `valid`
        says which rows are inputs of the task (answers of the others are meaningless)."""

    def answer_name(self, answer: int) -> str: ...

    def describe(self) -> dict: ...

    def index_of(self, tokens) -> int:
        """The enumeration index of an input (inverse of decode)."""

    def render(self, tokens) -> str:
        """The input as readable token names."""

    @property
    def OPTIONS(self) -> tuple[TaskOption, ...]:
        """Its parameters besides N (the CLI's options); every task has this one."""

    @property
    def SIZE_FLAGS(self) -> tuple[str, ...]:
        """The paper's names for N, which the CLI accepts besides --N."""

    @property
    def cases(self) -> Optional[Callable[[], Iterator[Case]]]:
        """The input space as case splits, in enumeration order (symbolic engines); None: none."""

    @property
    def dfa(self) -> Optional[np.ndarray]:
        """A DFA (states x tokens) that accepts the inputs whose answer is 1, so that the `reach`
        engine decides every length; None: the task is not given by one."""

    @property
    def draw_inputs(self) -> Optional[Callable[[Sequence[np.ndarray], np.random.Generator, int], np.ndarray]]:
        """``draw_inputs(domains, rng, n)``: at most n inputs of the task drawn uniformly from those in
        a box of token domains (a case's, or a part of one), (n', L); for a task whose inputs are
        rare among the members of its boxes (MQAR, nearest neighbour), so that the sample check and
        the falsification pass evaluate inputs, not filtered-out members.  None: draw members."""

    @property
    def answered(self) -> Optional[Callable[[], Checked]]:
        """Counts its inputs (and their positions with an answer) without enumerating them: what a
        complete run judges, which a symbolic engine cannot count; None: it cannot."""

