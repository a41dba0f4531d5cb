"""The falsification pass before an unknown: an engine that stops without a verdict (its time limit
ran out, a solver answered unknown) may still leave a failure that a few evaluations find.

Before `verifier.runs.api` answers unknown, it evaluates on the batched evaluator, a batch of each
in turn (BATCH_ROWS rows; a source that runs out leaves the turn to the others):

* members of the boxes the engine left open (`EngineResult.open`: the bounds engine's undecided
  boxes, which hold the inputs it had not decided): the corners and OPEN_RANDOM random members of
  each, or for a task that draws its inputs (`Task.draw_inputs`: MQAR, nearest neighbour, whose
  boxes hold few inputs among many sequences that are not), the corners and OPEN_RANDOM inputs
  drawn uniformly from those in the box;
* UNIFORM inputs drawn uniformly from those of the range the engine did not cover (most of
  them of the longest lengths, which hold most inputs);
* over the whole enumeration, the sample of the task's cases that checks a symbolic proof
  (`sample_check.CaseSample`: corners, random members and random indices of every case, the
  short and rare ones too; inputs drawn by the task instead of the random ones where it draws them).

A failing input is replayed on the generic path like every engine's counterexample
(`api.replay`), and the verdict is then REFUTED.  Nothing is proved this way: with no failure the
verdict stays unknown, and says how many inputs were tried.  The draws are seeded (SEED), so the
same run tries the same inputs.

The pass has its own share of the run's time: the engine's deadline comes KEEP_SHARE of the
timeout sooner (between KEEP_LEAST and KEEP_MOST seconds, at most half the timeout:
`engine_deadline`), and the pass stops at the run's own.
"""

from __future__ import annotations

import random
import time
from dataclasses import asdict, dataclass
from typing import Iterator

import numpy as np

from ..engines.base import EngineResult, Found, Problem, RunOptions
from ..evaluator import fitting_evaluator
from ..support.budget import Deadline, TimedOut
from .sample_check import CaseSample, box_sample, judged_batches

KEEP_SHARE = 0.1  # of a run's timeout, kept for the pass
KEEP_LEAST = 2.0  # seconds kept at least (at most half the timeout): the evaluator's tables, a first batch of
# each source, on a loaded machine (1 s was not enough for induction heads at N = 16 in CI)
KEEP_MOST = 10.0  # seconds kept at most
OPEN_RANDOM = 12  # random members of an open box, besides its 4 corners
UNIFORM = 1024  # uniform draws from the inputs of the range not covered
BATCH_ROWS = 256  # rows of a batch of draws: the deadline is looked at between batches
SEED = 0


@dataclass
class Falsification:
    """What the pass tried: inputs of the task evaluated, by where they were drawn from."""

    tried: int
    open_boxes: int  # of the engine's open boxes, those sampled
    from_open: int
    uniform: int
    from_cases: int
    failed: int  # the failing inputs among them (at most the run's max_counterexamples are reported)
    seconds: float
    stopped: bool  # the run's deadline passed before every draw was tried
    seed: int = SEED

    def to_json(self) -> dict:
        return {**asdict(self), "seconds": round(self.seconds, 3)}


def engine_deadline(deadline: Deadline) -> Deadline:
    """The engine's deadline within a run's: the pass keeps the rest."""
    return deadline.keeping(KEEP_SHARE, KEEP_LEAST, KEEP_MOST)


def falsify(problem: Problem, er: EngineResult, opts: RunOptions,
            deadline: Deadline) -> tuple[Falsification, list[Found]]:
    """Evaluate the draws (module docstring) until the run's deadline or `opts.max_counterexamples`
    failures: what was tried, and the failures (to be replayed)."""
    t0 = time.monotonic()
    task = problem.task
    ev = fitting_evaluator(problem.model, problem.arith)
    counts = {"open": 0, "uniform": 0, "cases": 0}
    found: dict[int, Found] = {}  # by input: a draw may come twice
    boxes = er.open
    stop = task.total if opts.stop is None else opts.stop
    try:
        for source, tokens in _draws(problem, boxes, opts.start + er.covered, stop, opts.whole(task.total)):
            for rows, judged in judged_batches(ev, task, tokens, deadline, poll=True):
                counts[source] += len(rows)
                for j in np.flatnonzero(judged.failed):
                    index = task.index_of(tokens[rows[j]])
                    found.setdefault(index, Found.of(judged, int(j), index, tokens[rows[j]]))
            if len(found) >= opts.max_counterexamples or deadline.expired():
                break
    except TimedOut:  # the run's enforced deadline, inside a batch: what was tried so far stands
        pass
    return (Falsification(sum(counts.values()), len(boxes), counts["open"], counts["uniform"], counts["cases"],
                          len(found), time.monotonic() - t0, deadline.expired()),
            list(found.values())[:opts.max_counterexamples])


def _draws(problem: Problem, boxes: list, start: int, stop: int, whole: bool) -> Iterator[tuple[str, np.ndarray]]:
    """(source, tokens of one length) in the order they are tried: a batch of each source in turn,
    so that a pass the deadline stops has tried each (the open boxes of nearest neighbour at N = 32,
    p = 10, first in line, took the whole pass while half of the inputs its cases draw fail); each
    drawn when its turn comes (decoding an index is slow at large N: 2 ms for induction heads at
    N = 256)."""
    task = problem.task
    rng = np.random.default_rng(SEED)
    sources = [_by_length("open", (box_sample(box, rng, OPEN_RANDOM, task) for box in boxes))]
    if stop > start:
        sources.append(_by_length("uniform", (task.decode(i)[None, :] for i in _uniform(start, stop))))
    if whole and task.cases is not None:
        sources.append(("cases", tokens) for _, tokens in CaseSample(problem, SEED).batches(BATCH_ROWS))
    while sources:
        for source in list(sources):
            batch = next(source, None)
            if batch is None:
                sources.remove(source)
            else:
                yield batch


def _uniform(start: int, stop: int) -> Iterator[int]:
    """UNIFORM indices drawn from start..stop-1, in order (indices beyond int64, sigma^N, drawn
    exactly)."""
    pick = random.Random(SEED)
    yield from sorted({pick.randrange(start, stop) for _ in range(min(UNIFORM, stop - start))})


def _by_length(source: str, rows: Iterator[np.ndarray]) -> Iterator[tuple[str, np.ndarray]]:
    """Row blocks gathered by length, BATCH_ROWS rows a batch (a length's last ones at the end, or
    when the length changes: the draws come sorted by length)."""
    pending: dict[int, list[np.ndarray]] = {}
    for block in rows:
        L = block.shape[1]
        for other in [k for k in pending if k != L]:
            yield source, np.concatenate(pending.pop(other))
        pending.setdefault(L, []).append(block)
        if sum(len(b) for b in pending[L]) >= BATCH_ROWS:
            yield source, np.concatenate(pending.pop(L))
    for L in list(pending):
        yield source, np.concatenate(pending.pop(L))
