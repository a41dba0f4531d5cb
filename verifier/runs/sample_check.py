"""The sample check: a PROVED from a symbolic engine is never taken on trust alone.

Before `verifier.runs.api` returns a symbolic proof, every case split of the task contributes inputs
(when that would cost more than `CHECK_WORK`, as for index lookup at N = 1024 with its 524,800
cases and width 2054, the first case, the last, and as many cases drawn at random as the work
allows, at least `MIN_CASES`):
the corners of the case's box of token domains (every position at its smallest token, at its
largest, and the two alternations of the two), random members of the box, and inputs at random
enumeration indices of the case (decoded by the task: members of a dataset with constraints,
which random members of the box rarely are).  A task whose inputs are rare among its boxes'
members (MQAR: distinct keys, the queries a prefix of a permutation of them; nearest neighbour:
the margin assumption; of MQAR's sequences at N = 16, 9 in a million are inputs) draws
them itself instead (`Task.draw_inputs`: uniformly from the inputs in the box, exactly): the
corners, and as many inputs drawn by the task as the two random kinds would give.  The batched
evaluator (the enumeration engine's path, itself checked against the generic path and the
independent reference in the tests) decides them against the task's own ground truth, with nothing from the encoding.
A failure is an `InternalError` naming the case: the proof and the evaluator disagree, and no
verdict may be given.  Members that are not inputs of the task (a margin or distinct-keys filter)
are skipped.  The draws are seeded: the same run checks the same inputs.

The check costs a few evaluations per case; it would have caught every wrong proof found so far
(a threshold wrapped modulo 2^width, an instance's b wrapped, an empty readout).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Iterator, Optional

import numpy as np

from ..engines.base import Problem
from ..evaluator import Judged, fitting_evaluator
from ..support.budget import Deadline
from ..support.errors import InternalError
from ..tasks.base import Task, case_splits

RANDOM_PER_CASE = 2  # at least this many random members of every case, of the box and by index ...
RANDOM_TOTAL = 1024  # ... and this many of each in all, spread over the cases
FLUSH_ROWS = 1 << 14
CHECK_WORK = 1 << 27  # sampled inputs x length x model width: what the check may cost
PER_CASE = 4 + 2 * RANDOM_PER_CASE  # the fewest inputs a case contributes
MIN_CASES = 16  # cases sampled however large the model


@dataclass
class SampleCheck:
    inputs: int  # inputs of the task evaluated
    cases: int  # the cases they were drawn from
    of_cases: int  # the task's cases
    seed: int
    seconds: float

    def to_json(self) -> dict:
        return {"inputs": self.inputs, "cases": self.cases, "of_cases": self.of_cases, "seed": self.seed,
                "seconds": round(self.seconds, 3)}


def box_sample(domains, rng: np.random.Generator, n_random: int, task: Optional[Task] = None) -> np.ndarray:
    """The corners and random members of a box of token domains (per position, its tokens),
    (4 + n_random, L); for a task that draws its inputs (`Task.draw_inputs`), the corners and at
    most n_random inputs it draws from the box.

    Positions that share a domain array (most do) are drawn together."""
    L = len(domains)
    if task is not None and task.draw_inputs is not None:
        return np.concatenate([box_sample(domains, rng, 0), task.draw_inputs(domains, rng, n_random)])
    groups: dict[int, tuple[np.ndarray, list[int]]] = {}
    for j, d in enumerate(domains):
        groups.setdefault(id(d), (d, []))[1].append(j)
    lo, hi = np.empty(L, np.int64), np.empty(L, np.int64)
    members = np.empty((n_random, L), np.int64)
    for d, positions in groups.values():
        lo[positions], hi[positions] = d.min(), d.max()
        members[:, positions] = d[rng.integers(len(d), size=(n_random, len(positions)))]
    even = np.arange(L) % 2 == 0
    corners = np.stack([lo, hi, np.where(even, lo, hi), np.where(even, hi, lo)])
    return np.concatenate([corners, members])


class CaseSample:
    """The inputs the check draws from the task's cases (module docstring), in batches of one
    length: what `sample_check` judges, and what a falsification pass tries (`runs.falsify`)."""

    def __init__(self, problem: Problem, seed: int = 0):
        task = self.task = problem.task
        self.seed = seed
        self.n_cases = sum(1 for _ in case_splits(task))
        width = max(1, getattr(problem.model, "d", 1))  # a model of width 0 (degenerate, still valid) costs its length
        budget = max(MIN_CASES * PER_CASE, CHECK_WORK // (task.max_len * width))
        self.pick = random.Random(seed)  # draws indices beyond int64
        self.chosen = _chosen_cases(self.n_cases, budget, self.pick)
        self.n_random = max(RANDOM_PER_CASE, min(RANDOM_TOTAL, budget // 2) // len(self.chosen))

    def batches(self, size: int = FLUSH_ROWS) -> Iterator[tuple[list[str], np.ndarray]]:
        """(the case of each row, tokens) of one length, `size` rows or more, or a length's last ones."""
        rng, pick, task = np.random.default_rng(self.seed), self.pick, self.task
        pending: dict[int, list[tuple[str, np.ndarray]]] = {}

        def flush(length: int) -> tuple[list[str], np.ndarray]:
            names = [name for name, rows in pending[length] for _ in range(len(rows))]
            return names, np.concatenate([rows for _, rows in pending.pop(length)])

        for ci, case in enumerate(case_splits(task)):
            if ci not in self.chosen:
                continue
            if task.draw_inputs is not None:  # inputs drawn by the task stand for both random kinds
                rows = box_sample(case.domains, rng, 2 * self.n_random, task)
            else:
                indexed = [task.decode(case.offset + pick.randrange(case.count)) for _ in range(self.n_random)]
                rows = np.concatenate([box_sample(case.domains, rng, self.n_random),
                                       np.array(indexed, dtype=np.int64)])
            pending.setdefault(case.length, []).append((case.name, rows))
            if sum(len(rows) for _, rows in pending[case.length]) >= size:
                yield flush(case.length)
        for length in list(pending):
            yield flush(length)


def judged_batches(ev, task, tokens: np.ndarray, deadline: Optional[Deadline] = None, *,
                   poll: bool = False) -> Iterator[tuple[np.ndarray, Judged]]:
    """The inputs of the task among the rows of `tokens` (one length), judged on the batched
    evaluator a batch at a time: (their rows, the judgment).  The deadline is checked before each
    batch (`TimedOut`), or with `poll` only looked at: past it, no more batches."""
    answers, valid = task.evaluate(tokens)
    keep = np.flatnonzero(valid)
    size = ev.batch_size(tokens.shape[1])
    for a in range(0, len(keep), size):
        if deadline is not None:
            if poll and deadline.expired():
                return
            deadline.check()
        rows = keep[a:a + size]
        yield rows, ev.judge(ev.forward(tokens[rows]), answers[rows])


def sample_check(problem: Problem, deadline: Optional[Deadline] = None, seed: int = 0) -> SampleCheck:
    """Evaluate a sample of every case on the batched evaluator; InternalError at the first failure."""
    t0 = time.monotonic()
    task = problem.task
    ev = fitting_evaluator(problem.model, problem.arith)
    sample = CaseSample(problem, seed)
    checked = 0
    for names, tokens in sample.batches():
        for rows, judged in judged_batches(ev, task, tokens, deadline):
            bad = np.flatnonzero(judged.failed)
            if len(bad):
                j, r = bad[0], rows[bad[0]]
                at = f" at position {judged.position[j]}" if judged.position[j] >= 0 else ""
                raise InternalError(
                    f"the proof of case {names[r]} is contradicted by the evaluator: {task.render(tokens[r])} ->{at} "
                    f"expected {task.answer_name(int(judged.expected[j]))}, the model gives "
                    f"{task.answer_name(int(judged.produced[j]))} ({judged.reason[j]}); no verdict can be given")
            checked += len(rows)
    return SampleCheck(checked, len(sample.chosen), sample.n_cases, seed, time.monotonic() - t0)


def _chosen_cases(n_cases: int, budget: int, pick: random.Random) -> set[int]:
    """Every case, or when `budget` inputs cannot sample them all, the first, the last, and cases
    drawn at random, as many as the budget allows."""
    most = max(MIN_CASES, budget // PER_CASE)
    if n_cases <= most:
        return set(range(n_cases))
    return {0, n_cases - 1} | set(pick.sample(range(n_cases), most - 2))
