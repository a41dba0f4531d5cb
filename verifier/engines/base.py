"""The engine interface: every engine takes a `Problem` and `RunOptions`, returns an `EngineResult`.

Engines only search; the verdict, the replay of every counterexample and the report are made in
one place (`verifier.runs.api`), whatever the engine.
"""

from __future__ import annotations

import itertools
import math
import multiprocessing
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Protocol

import numpy as np

from ..arithmetic import Fixed, Format
from ..evaluator import Judged, make_evaluator
from ..int8 import Int8Arith
from ..model import Model, Recurrent
from ..support.budget import Deadline
from ..tasks import Task
from ..tasks.base import Checked
from ..verdicts import Reason, Status

COUNTED = 4  # `group_rows` numbers rows by a table when their packed range is at most this many per row


@dataclass
class Problem:
    """A model, a task, and the arithmetic to decide it in."""

    task: Task
    model: Model | Recurrent
    arith: Format  # FX(p, f), another grid (`verifier.arithmetic`), a float format (`verifier.floats`) or int8
    built_in: bool = False  # the model is a built-in construction, built for this problem
    weights_sha256: Optional[str] = None  # of the model as given, when its readout rows were put in class order
    _generic: Any = field(default=None, init=False, repr=False, compare=False)

    def generic(self):
        """The evaluator on the generic path (no tables), quantized once for the problem: the
        replays and the traces share it (quantizing exact weights is slow).  Its plans are cached
        by array id: give it only the model's own arrays."""
        if self._generic is None:
            self._generic = make_evaluator(self.model, self.arith, tables=False)
        return self._generic

    def __getstate__(self) -> dict:  # sent to a cluster's workers without it: they quantize for themselves
        return {**self.__dict__, "_generic": None}


@dataclass
class RunOptions:
    max_counterexamples: int = 1
    deadline: Deadline = field(default_factory=Deadline)  # past it the verdict is unknown
    start: int = 0  # the range of the task's enumeration to cover
    stop: Optional[int] = None
    workers: Optional[int] = None  # None: both cores for large spaces
    progress: Optional[Callable[["Tick"], None]] = None
    cluster: Optional[Any] = None  # a `verifier.runs.cluster.Cluster`: exhaustive chunks run as its tasks
    solver: str = "z3"  # the SMT engine's solver: z3, bitwuzla, cvc5 or portfolio (`verifier.smt.solvers`)
    smtlib: Optional[str] = None  # a directory: the SMT engine writes each solver case there as SMT-LIB 2

    def size(self, total: int) -> int:
        """How many inputs the range holds."""
        return (total if self.stop is None else self.stop) - self.start

    def whole(self, total: int) -> bool:
        """The range is every input (what an engine that decides whole cases or lengths needs)."""
        return (self.start, self.stop) in ((0, None), (0, total))


@dataclass
class Tick:
    """What a progress display shows: inputs covered of those to cover, and for the engines that
    decide case by case, the cases decided of their total and the case being decided."""

    covered: int
    total: int
    cases_done: Optional[int] = None
    cases_total: Optional[int] = None
    case: Optional[str] = None


@dataclass
class Found:
    """A failing input as an engine reports it (before the replay)."""

    index: int
    tokens: np.ndarray
    expected: int
    produced: int
    reason: Reason
    margin: float
    position: Optional[int] = None  # the failing position of a sequence output (expected/produced are there)

    @classmethod
    def of(cls, judged: Judged, j: int, index: int, tokens: np.ndarray) -> "Found":
        """Input j of a judged batch, as a failure to report."""
        pos, reason = int(judged.position[j]), judged.reason[j]
        assert reason is not None, "a failing input has a reason"
        return cls(index, np.array(tokens, dtype=np.int64), int(judged.expected[j]), int(judged.produced[j]),
                   reason, float(judged.margin[j]), None if pos < 0 else pos)


@dataclass
class EngineResult:
    status: Status  # complete, interrupted, timeout or incomplete (a solver answered unknown)
    covered: int  # inputs decided, a prefix of the range in enumeration order
    found: list[Found]
    min_margin: Optional[float] = None
    tightest: Optional[int] = None  # index of an input with the smallest margin
    stats: dict = field(default_factory=dict)
    checked: Optional[Checked] = None  # the inputs of the task judged among those covered (None: not counted)
    open: list[list[np.ndarray]] = field(default_factory=list)  # boxes (per position, its tokens) left undecided
    # when the run stopped: where a falsification pass looks first (`runs.falsify`)


def codes_only(problem: Problem) -> Optional[str]:
    """Why an engine that works on fixed-point codes cannot run a float format, or None."""
    if isinstance(problem.arith, Fixed):
        return None
    if isinstance(problem.arith, Int8Arith):
        return "it works on fixed-point codes; int8 with scales is not a grid (the exhaustive engine decides int8)"
    return (f"it works on fixed-point codes; {problem.arith.storage.name} is a float format (the exhaustive, bounds "
            f"and smt engines decide float formats)")


def saturating_codes(problem: Problem, saturations: str) -> Optional[str]:
    """Why an engine that keeps exact sums of fixed-point terms, and forgets which terms made them,
    cannot run the problem, or None: it needs codes, and overflow = saturate (under error,
    `saturations`, which it does not see, would count)."""
    why = codes_only(problem)
    if why is None and problem.arith.overflow != "saturate":
        why = f"it takes overflow = saturate (under error, {saturations} would count)"
    return why


def last_position_codes(problem: Problem, opts: RunOptions, name: str, saturations: str) -> Optional[str]:
    """Why engine `name`, of fixed-point codes under overflow = saturate (`saturating_codes`), for
    softmax attention models read at their last position without their own BOS, deciding whole
    cases, cannot run the problem, or None."""
    model = problem.model
    if isinstance(model, Recurrent):
        return "it reads attention layers; a recurrent model has none"
    why = saturating_codes(problem, saturations)
    if why is not None:
        return why
    if any(layer.attention != "softmax" for layer in model.layers):
        return "it decides softmax attention layers"
    if model.bos is not None or model.readout.positions != "last":
        return "it decides a readout at the last position of a model without its own BOS"
    if not opts.whole(problem.task.total):
        return f"--start/--stop select inputs by enumeration; the {name} engine decides whole cases"
    return None


class Engine(Protocol):
    name: str
    symbolic: bool  # its proofs are not evaluations of every input: `api` sample-checks them

    def unsupported(self, problem: Problem, opts: RunOptions) -> Optional[str]:
        """Why this engine cannot run the problem, or None."""

    def run(self, problem: Problem, opts: RunOptions) -> EngineResult: ...


def group_rows(columns: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Rows of the integer columns side by side (each (P,) or (P, k)): each row's group, groups
    numbered in the rows' lexicographic order, and the first row of each group.  Rows are packed
    into one int64 by their columns' ranges (the first column most significant), then numbered by
    a table over the packed range when it is within a few times P, else sorted with the row's index
    below them when that fits (a sort of numbers, not an argsort: several times faster)."""
    cols = [c for a in columns for c in (a.T if a.ndim == 2 else [a])]
    P = len(columns[0]) if columns else 0  # of the arrays, not the columns: a (P, 0) block has rows
    bits = max(P - 1, 1).bit_length()
    lo = [int(c.min()) if P else 0 for c in cols]
    size = [int(c.max()) - m + 1 if P else 1 for c, m in zip(cols, lo)]
    step = [1] * len(cols)
    if math.prod(size) >= 1 << (62 - bits):  # a column of multiples of a weight: its multipliers
        step = [int(np.gcd.reduce(c - m)) or 1 if s < 1 << 62 else 1 for c, m, s in zip(cols, lo, size)]
        size = [(s - 1) // g + 1 for s, g in zip(size, step)]
    span = math.prod(size)
    if span >= 1 << 62:
        _, rep, group = np.unique(np.column_stack(cols), axis=0, return_index=True, return_inverse=True)
        return group.reshape(-1), rep
    packed = np.zeros(P, np.int64)
    for c, m, s, g in zip(cols, lo, size, step):  # in place: no temporaries of P rows
        packed *= s
        packed += c if g == 1 else c // g
        packed -= m // g
    if span <= max(COUNTED * P, 1 << 16):
        seen = np.zeros(span, bool)
        seen[packed] = True
        number = np.cumsum(seen) - 1
        group = number[packed]
        rep = np.full(int(number[-1]) + 1, P, np.int64)
        np.minimum.at(rep, group, np.arange(P))
        return group, rep
    if span >= 1 << (62 - bits):
        _, rep, group = np.unique(packed, return_index=True, return_inverse=True)
        return group.reshape(-1), rep
    order = np.sort((packed << bits) | np.arange(P))
    at = order & ((1 << bits) - 1)
    new = np.ones(P, bool)
    new[1:] = (order[1:] >> bits) != (order[:-1] >> bits)
    group = np.empty(P, np.int64)
    group[at] = np.cumsum(new) - 1
    return group, at[new]


def in_order(items, in_flight: int, submit: Callable, take: Callable, deadline: Deadline, result: EngineResult) -> None:
    """Keep `in_flight` items submitted (`submit(item)` returns a handle with `get(timeout)`: a
    pool's or a cluster's) and take their results in the items' order, so that ``covered`` stays
    a prefix; `take(r)` returns True to stop.  Past the deadline, the result's status is TIMEOUT."""
    it = iter(items)
    pending = [submit(x) for x in itertools.islice(it, in_flight)]
    while pending:
        left = deadline.left()
        if left is not None and left <= 0:
            result.status = Status.TIMEOUT
            return
        try:
            r = pending[0].get(timeout=left)
        except (multiprocessing.TimeoutError, TimeoutError):
            result.status = Status.TIMEOUT
            return
        pending.pop(0)
        if take(r):
            return
        nxt = next(it, None)
        if nxt is not None:
            pending.append(submit(nxt))
