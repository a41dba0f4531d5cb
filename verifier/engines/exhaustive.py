"""The exhaustive engine: evaluate every input of the task, in the task's fixed order.

Inputs go in chunks (a range of the enumeration) through the batched FX evaluator.  Chunks are
handed to worker processes (fork; both cores for large spaces), or to the workers of a Dask cluster
(`verifier.runs.cluster`, which is sent the problem once), with a bounded number in flight,
so memory stays bounded whatever the input count, and results are taken in order, so that the
first counterexample reported is the first in enumeration order and ``covered`` is always a
prefix: a run that was stopped can be resumed from ``start = covered``.  The deadline is polled
before every batch (a few seconds of work at most, whatever the chunk), and the main process
stops waiting for a worker's chunk when it passes.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import time
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from ..evaluator import make_evaluator
from ..support import interrupts
from ..support.budget import Deadline, TimedOut, shielded
from ..tasks.base import Checked
from ..verdicts import Status
from .base import EngineResult, Found, Problem, RunOptions, Tick, in_order

CHUNK = 1 << 17
PARALLEL_ABOVE = 1 << 18
LIMIT = 1 << 36  # beyond this many inputs in one range, enumeration is hopeless on this machine


@dataclass
class _Chunk:
    covered: int
    found: list[Found]
    min_margin: Optional[float]
    tightest: Optional[int]
    start: int = 0
    upto: list[tuple[float, Optional[int], Checked]] = field(default_factory=list)  # (min margin, tightest,
    # inputs judged) up to found[i]
    checked: Checked = field(default_factory=Checked)
    timed_out: bool = False  # the deadline passed inside the chunk: `covered` is the batches before it

    def cut(self, keep: int) -> "_Chunk":
        """The chunk as if it had stopped at its keep-th counterexample: coverage and margin end there."""
        if keep >= len(self.found):
            return self
        best, tightest, checked = self.upto[keep - 1]
        return _Chunk(self.found[keep - 1].index + 1 - self.start, self.found[:keep], best, tightest, self.start,
                      self.upto[:keep], checked)


_STATE: dict = {}  # the worker's problem; set before forking, inherited by the workers


def _check(start: int, stop: int) -> _Chunk:
    return _check_range(_STATE["task"], _STATE["evaluator"], _STATE["limit"], start, stop)


_REMOTE: dict = {}  # on a cluster worker: id(problem) -> (problem, its evaluator), built once per problem


def _check_remote(problem: Problem, limit: int, start: int, stop: int) -> _Chunk:
    """A chunk on a Dask worker, which was sent the problem once (`Cluster.scatter`)."""
    if id(problem) not in _REMOTE:
        _REMOTE.clear()
        _REMOTE[id(problem)] = (problem, make_evaluator(problem.model, problem.arith))
    return _check_range(problem.task, _REMOTE[id(problem)][1], limit, start, stop)


def _check_range(task, ev, limit: int, start: int, stop: int, deadline: Optional[Deadline] = None) -> _Chunk:
    found: list[Found] = []
    upto: list[tuple[float, Optional[int], Checked]] = []
    best, tightest, checked = math.inf, None, Checked()
    done = start  # the inputs before the current batch are decided
    for batch in task.batches(start, stop, ev.batch_size):
        if not len(batch.tokens):  # every input of the range was filtered out (a margin filter)
            continue
        if deadline is not None and deadline.expired():
            return _Chunk(done - start, found, best if tightest is not None else None, tightest, start, upto,
                          checked, timed_out=True)
        judged = ev.judge(ev.forward(batch.tokens), batch.expected)
        failing = np.flatnonzero(judged.failed)[: max(0, limit - len(found))]
        if len(failing):
            # the smallest margin of the inputs up to each counterexample: a run that stops at one
            # has covered no input after it
            running = np.minimum.accumulate(judged.margin)
            at = np.searchsorted(-running, -running, side="left")  # where each running minimum was reached
            for j in failing:
                found.append(Found.of(judged, j, int(batch.index[j]), batch.tokens[j]))
                upto.append(((best, tightest) if running[j] >= best else (float(running[j]), int(batch.index[at[j]])))
                            + (checked + Checked.of(batch.expected[:j + 1]),))
            if len(found) >= limit:
                best, tightest, checked = upto[-1]
                return _Chunk(found[-1].index + 1 - start, found, best, tightest, start, upto, checked)
        checked = checked + Checked.of(batch.expected)
        i = int(np.argmin(judged.margin))
        if judged.margin[i] < best:
            best, tightest = float(judged.margin[i]), int(batch.index[i])
        done = int(batch.index[-1]) + 1
    return _Chunk(stop - start, found, best if tightest is not None else None, tightest, start, upto, checked)


class Exhaustive:
    name = "exhaustive"
    symbolic = False

    def unsupported(self, problem: Problem, opts: RunOptions) -> Optional[str]:
        size = opts.size(problem.task.total)
        if size > LIMIT:  # a range of a larger space is bounded, and allowed
            return (f"{size} inputs is beyond enumeration (limit 2^{int(math.log2(LIMIT))} in one run; "
                    f"--start/--stop select a part)")
        return None

    def run(self, problem: Problem, opts: RunOptions) -> EngineResult:
        t0 = time.monotonic()
        stop = problem.task.total if opts.stop is None else opts.stop
        start = opts.start
        chunks = [(a, min(a + CHUNK, stop)) for a in range(start, stop, CHUNK)]
        cluster = opts.cluster if opts.cluster is not None and not opts.cluster.serial else None
        workers = opts.workers or (min(2, os.cpu_count() or 1) if stop - start > PARALLEL_ABOVE else 1)
        result = EngineResult(Status.COMPLETE, 0, [], checked=Checked())

        def take(chunk: _Chunk) -> bool:
            """Merge one chunk; True when the run should stop (enough counterexamples)."""
            chunk = chunk.cut(opts.max_counterexamples - len(result.found))
            result.covered += chunk.covered
            result.checked = result.checked + chunk.checked
            result.found.extend(chunk.found)
            if chunk.tightest is not None and (result.min_margin is None or chunk.min_margin < result.min_margin):
                result.min_margin, result.tightest = chunk.min_margin, chunk.tightest
            if opts.progress:
                opts.progress(Tick(result.covered, stop - start))
            return len(result.found) >= opts.max_counterexamples

        ev = None
        try:
            opts.deadline.check()  # the tables are not worth building past it
            ev = make_evaluator(problem.model, problem.arith)
            limit = max(1, opts.max_counterexamples)
            _STATE.update(task=problem.task, evaluator=ev, limit=limit)
            if cluster is not None:
                shared = cluster.scatter(problem)
                in_order(chunks, 2 * cluster.slots, lambda ab: cluster.submit(_check_remote, shared, limit, *ab),
                         take, opts.deadline, result)
            elif workers == 1:
                for a, b in chunks:
                    chunk = _check_range(problem.task, ev, limit, a, b, opts.deadline)
                    if take(chunk):
                        break
                    if chunk.timed_out:
                        result.status = Status.TIMEOUT
                        break
            else:
                pool = multiprocessing.get_context("fork").Pool(workers, initializer=interrupts.worker_init)
                try:
                    in_order(chunks, 2 * workers, lambda ab: pool.apply_async(_check, ab), take, opts.deadline,
                             result)
                finally:
                    with shielded():  # no worker outlives the run
                        pool.terminate()
                        pool.join()
        except TimedOut:
            result.status = Status.TIMEOUT
        except KeyboardInterrupt:
            result.status = Status.INTERRUPTED
        result.stats = {"workers": workers, "chunks": len(chunks), "chunk_size": CHUNK,
                        "seconds": time.monotonic() - t0,
                        "layer0_logit_table": getattr(getattr(ev, "tables", None), "logits", None) is not None}
        if cluster is not None:
            result.stats["cluster"] = cluster.describe()
        return result
