"""How often is a model wrong: its FX errors over a task, counted (docs/count.md, `verify count`).

`count_errors` gives, each with its scope stated:

* **exact** (``method="exact"``; what ``auto`` does when the enumeration has at most `EXACT_LIMIT`
  members): every member evaluated on the batched evaluator, as the exhaustive engine evaluates
  them, and the failing inputs counted by kind (wrong, tie, overflow), a batch at a time: no
  replay per failure.  A uniform sample of the failures counted (the `replay` with the smallest
  hash of their index and the seed: a bottom-k sample, which chunks merge exactly) is replayed
  on the generic path (`api.replay`); one that does not reproduce is an InternalError.
* **sampled** (``method="sample"``; ``auto`` beyond `EXACT_LIMIT`): `samples` members drawn
  uniformly with replacement (``random.Random(seed)``) and evaluated; the number of failing
  members of the enumeration gets the Clopper-Pearson interval (the exact binomial one, which
  never covers less than its confidence) at `confidence`.  The failing draws are replayed too.
* **certified**: where the dependent-set argument of Chen and Zou 2024 (arXiv:2404.01601) applies
  (`refute.dependent_scope`), the disjoint certificates of `refute.error_bound` force at least that
  many errors.  That holds in exact arithmetic; FX rounding can break the identity a certificate
  rests on, so it bounds the unrounded model, not the FX count, and is reported beside it.

A member of the enumeration that is not an input of the task (filtered out, or with no answer
anywhere) is never an error: counts are of failing inputs.
"""

from __future__ import annotations

import math
import multiprocessing
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from ..engines import Found, Problem
from ..engines.exhaustive import CHUNK, LIMIT, PARALLEL_ABOVE
from ..evaluator import make_evaluator
from ..result import Counterexample, count_text, task_text
from ..runs.api import describe_problem, replay
from ..support import interrupts
from ..support.budget import Deadline, check_workers
from ..support.errors import InputError
from ..tasks.base import Checked
from ..verdicts import Reason, Status
from .refute import dependent_scope, error_bound

METHODS = ("auto", "exact", "sample")
EXACT_LIMIT = 1 << 24  # auto counts exactly up to this many members: a size rule, the same on every machine
SAMPLES = 10_000
MAX_SAMPLES = 10_000_000
REPLAY = 20  # failures replayed by default
REASONS = tuple(Reason)


@dataclass
class ErrorCount:
    """A model's errors over a task: an exact count or a sampled estimate, with its arithmetic."""

    method: str  # exact | sample
    task: dict
    construction: dict
    arithmetic: dict
    provenance: dict
    total: int  # members of the enumeration
    evaluated: int  # members evaluated: a prefix of the enumeration (exact), or the draws (sample)
    inputs: int  # inputs of the task among them
    errors: int  # failing inputs among them
    by_reason: dict  # wrong / tie / overflow -> failing inputs
    status: Status  # complete, timeout or interrupted
    seconds: float
    seed: int
    replayed: list[Counterexample] = field(default_factory=list)
    confidence: Optional[float] = None
    interval: Optional[tuple[int, int]] = None  # sample: failing members of the enumeration, Clopper-Pearson
    certified: Optional[dict] = None  # refute.error_bound, in exact arithmetic
    checked: Optional[dict] = None  # `Checked`: positions with an answer, for a per-position task

    @property
    def exit_code(self) -> int:
        """1: an error was found (and replayed); 0: an exact count over every input found none;
        3: a sample found none, or the count stopped early."""
        if self.errors:
            return 1
        return 0 if self.method == "exact" and self.status == Status.COMPLETE else 3

    def to_json(self) -> dict:
        return {"method": self.method, "task": self.task, "construction": self.construction,
                "arithmetic": self.arithmetic, "provenance": self.provenance, "total": self.total,
                "evaluated": self.evaluated, "inputs": self.inputs, "errors": self.errors, "by_reason": self.by_reason,
                "status": self.status, "seconds": round(self.seconds, 3), "seed": self.seed,
                "confidence": self.confidence, "interval": None if self.interval is None else list(self.interval),
                "interval_method": None if self.interval is None else "Clopper-Pearson",
                "replayed": [c.to_json() for c in self.replayed], "certified": self.certified,
                "checked": self.checked}

    def summary(self) -> str:
        a, c = self.arithmetic, self.construction
        kinds = ", ".join(f"{k} {count_text(v)}" for k, v in self.by_reason.items() if v) or "none"
        share = f", {100 * self.errors / self.inputs:.4g}%" if self.inputs else ""
        lines = [f"ERROR COUNT: {c.get('construction', '?')}" + (f" ({c['theorem']})" if c.get("theorem") else "")
                 + f" on {self.task['name']} "
                 + task_text(self.task),
                 f"  arithmetic  FX(p={a['p']}, f={a['f']}) rounding={a['rounding']} overflow={a['overflow']} "
                 f"accumulate={a['accumulate']}"]
        if self.method == "exact":
            every = self.evaluated == self.total
            lines.append(f"  count       exact: {count_text(self.errors)} of the {count_text(self.inputs)} inputs fail"
                         f"{share} ({kinds}); {'all' if every else 'the first'} {count_text(self.evaluated)} of "
                         f"the {count_text(self.total)} members of the enumeration evaluated in {self.seconds:.2f} s"
                         + ("" if every else f" ({self.status}: a prefix)"))
        else:
            lo, hi = self.interval
            lines.append(f"  count       sampled: {count_text(self.errors)} of {count_text(self.evaluated)} "
                         "uniform draws "
                         f"fail{share} of the {count_text(self.inputs)} that are inputs ({kinds}); drawn with "
                         f"replacement from the {count_text(self.total)} members, seed {self.seed}, in "
                         f"{self.seconds:.2f} s")
            lines.append(f"  interval    failing members: {count_text(lo)} .. {count_text(hi)} "
                         f"({self.confidence:.4g} Clopper-Pearson interval; estimate "
                         f"{count_text(round(self.errors * self.total / max(self.evaluated, 1)))})")
        ck = self.checked or {}
        if ck.get("positions") is not None and ck["positions"] < ck["of_positions"]:
            lines.append(f"  positions   {ck['positions']:,} of the {ck['of_positions']:,} positions of those inputs "
                         f"have an answer and were judged; the others need no answer")
        if self.errors:
            lines.append(f"  replayed    {len(self.replayed)} of the failures counted, drawn uniformly (seed "
                         f"{self.seed}), replayed on the evaluator's generic path: all reproduce")
        lines += [f"  {c.line()}" for c in self.replayed[:3]]
        if self.certified:
            lines.append(f"  certified   {self.certified['statement']} (a bound on the unrounded model: FX rounding "
                         f"can break the identity a certificate rests on, so the FX count may be lower)")
        return "\n".join(lines)


def count_errors(problem: Problem, method: str = "auto", *, samples: Optional[int] = None, seed: int = 0,
                 confidence: float = 0.95, replays: int = REPLAY, workers: Optional[int] = None,
                 timeout: Optional[float] = None, deadline: Optional[Deadline] = None) -> ErrorCount:
    """Count the model's FX errors over the task (module docstring): `method` one of METHODS."""
    if method not in METHODS:
        raise InputError(f"unknown count method {method!r}; methods: {', '.join(METHODS)}")
    total = problem.task.total
    if method == "auto":
        method = "sample" if total > EXACT_LIMIT or samples is not None else "exact"
    if method == "exact" and total > LIMIT:
        raise InputError(f"an exact count evaluates all {count_text(total)} members; beyond 2^{int(math.log2(LIMIT))} "
                         f"enumeration is out of reach: give --samples")
    if method == "exact" and samples is not None:
        raise InputError("--samples is for a sampled count, not an exact one")
    samples = SAMPLES if samples is None else samples
    if isinstance(samples, bool) or not isinstance(samples, int) or not 1 <= samples <= MAX_SAMPLES:
        raise InputError(f"--samples must be an integer in 1..{MAX_SAMPLES:,}, got {samples!r}")
    if not (isinstance(confidence, float) and 0 < confidence < 1):
        raise InputError(f"--confidence must be a number strictly between 0 and 1, got {confidence!r}")
    if isinstance(replays, bool) or not isinstance(replays, int) or replays < 1:
        raise InputError(f"--replay must be an integer >= 1, got {replays!r}")
    check_workers(workers)
    deadline = deadline if deadline is not None else Deadline(timeout)
    t0 = time.monotonic()
    construction, _, provenance = describe_problem(problem)
    out = ErrorCount(method, problem.task.describe(), construction, problem.arith.describe(), provenance, total,
                     0, 0, 0, {}, Status.COMPLETE, 0.0, seed)
    ev = make_evaluator(problem.model, problem.arith)
    if method == "exact":
        picked = _exact(problem, ev, replays, seed, workers, deadline, out)
        if out.status == Status.COMPLETE and not out.inputs:  # as for a verdict: counting nothing is no count
            raise InputError(f"nothing was counted: none of the {count_text(total)} members of {problem.task.name}'s "
                             f"enumeration is an input with an answer")
    else:
        picked = _sampled(problem, ev, samples, seed, confidence, deadline, out)[:replays]
    generic = make_evaluator(problem.model, problem.arith, tables=False)
    out.replayed = [replay(problem, f, generic) for f in _found(problem, ev, picked)]
    why = dependent_scope(problem)
    if why is None:
        out.certified = error_bound(problem.task)
    out.seconds = time.monotonic() - t0
    return out


# -- exact --------------------------------------------------------------------------------------
@dataclass
class _Tally:
    """Failures counted over a range, and the bottom-k sample of them (smallest hash first)."""

    errors: int = 0
    by_reason: Counter = field(default_factory=Counter)
    checked: Checked = field(default_factory=Checked)
    keys: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint64))
    kept: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # their indices

    def merge(self, other: "_Tally", k: int) -> None:
        self.errors += other.errors
        self.by_reason.update(other.by_reason)
        self.checked = self.checked + other.checked
        self._keep(other.keys, other.kept, k)

    def _keep(self, keys: np.ndarray, indices: np.ndarray, k: int) -> None:
        keys, indices = np.concatenate([self.keys, keys]), np.concatenate([self.kept, indices])
        order = np.argsort(keys, kind="stable")[:k]
        self.keys, self.kept = keys[order], indices[order]


def _hash(indices: np.ndarray, seed: int) -> np.ndarray:
    """splitmix64 of index and seed: a fixed pseudo-random key per index (bottom-k sampling)."""
    x = indices.astype(np.uint64) + np.uint64((seed * 0x9E3779B97F4A7C15) % (1 << 64))
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


_STATE: dict = {}  # the worker's problem; set before forking, inherited by the workers


def _tally(start: int, stop: int) -> _Tally:
    task, ev, k, seed = _STATE["task"], _STATE["evaluator"], _STATE["keep"], _STATE["seed"]
    t = _Tally()
    for batch in task.batches(start, stop, ev.batch_size):
        if not len(batch.tokens):
            continue
        judged = ev.judge(ev.forward(batch.tokens), batch.expected)
        t.checked = t.checked + Checked.of(batch.expected)
        bad = np.flatnonzero(judged.failed)
        if len(bad):
            t.errors += len(bad)
            t.by_reason.update(judged.reason[j] for j in bad)
            t._keep(_hash(batch.index[bad], seed), batch.index[bad].astype(np.int64), k)
    return t


def _exact(problem: Problem, ev, k: int, seed: int, workers: Optional[int], deadline: Deadline,
           out: ErrorCount) -> np.ndarray:
    """Count over the whole enumeration (a prefix when stopped); fill `out`; the failures to replay."""
    total = problem.task.total
    _STATE.update(task=problem.task, evaluator=ev, keep=k, seed=seed)
    chunks = [(a, min(a + CHUNK, total)) for a in range(0, total, CHUNK)]
    workers = workers or (min(2, multiprocessing.cpu_count()) if total > PARALLEL_ABOVE else 1)
    tally = _Tally()
    done = 0
    try:
        if workers == 1:
            for a, b in chunks:
                if deadline.expired():
                    out.status = Status.TIMEOUT
                    break
                tally.merge(_tally(a, b), k)
                done = b
        else:
            with multiprocessing.get_context("fork").Pool(workers, initializer=interrupts.worker_init) as pool:
                results = pool.imap(_star, chunks)  # in order: what is counted is a prefix
                for _, b in chunks:
                    left = deadline.left()
                    try:
                        tally.merge(results.next(timeout=left), k)
                    except multiprocessing.TimeoutError:
                        out.status = Status.TIMEOUT
                        break
                    done = b
    except KeyboardInterrupt:
        out.status = Status.INTERRUPTED
    out.evaluated, out.inputs, out.errors = done, tally.checked.inputs, tally.errors
    out.by_reason = {r: tally.by_reason.get(r, 0) for r in REASONS}
    out.checked = tally.checked.to_json()
    return tally.kept


def _star(chunk: tuple[int, int]) -> _Tally:
    return _tally(*chunk)


# -- sampled ------------------------------------------------------------------------------------
def _sampled(problem: Problem, ev, n: int, seed: int, confidence: float, deadline: Deadline,
             out: ErrorCount) -> list[int]:
    """Evaluate n uniform draws; fill `out`; the failing draws' indices (in draw order, once each)."""
    task = problem.task
    rng = random.Random(seed)  # indices beyond int64 (sigma^N) are drawn exactly
    draws = [rng.randrange(task.total) for _ in range(n)]
    by_length: dict[int, list[tuple[int, np.ndarray]]] = {}
    for i in draws:
        tokens = task.decode(i)
        by_length.setdefault(len(tokens), []).append((i, tokens))
    checked, reasons, failing = Checked(), Counter[str](), []
    for rows in by_length.values():
        deadline.check()
        tokens = np.array([t for _, t in rows], dtype=np.int64)
        index = [i for i, _ in rows]
        answers, valid = task.evaluate(tokens)
        keep = np.flatnonzero(valid)
        checked = checked + Checked.of(answers[keep])
        size = ev.batch_size(tokens.shape[1])
        for a in range(0, len(keep), size):
            sel = keep[a:a + size]
            judged = ev.judge(ev.forward(tokens[sel]), answers[sel])
            for j in np.flatnonzero(judged.failed):
                reasons[judged.reason[j]] += 1
                failing.append(index[sel[j]])
    k = len(failing)
    lo, hi = clopper_pearson(k, n, confidence)
    out.evaluated, out.inputs, out.errors = n, checked.inputs, k
    out.by_reason = {r: reasons.get(r, 0) for r in REASONS}
    out.checked = checked.to_json()
    out.confidence = confidence
    out.interval = (math.floor(lo * task.total), min(task.total, math.ceil(hi * task.total)))
    return list(dict.fromkeys(failing))


def clopper_pearson(k: int, n: int, confidence: float) -> tuple[float, float]:
    """The Clopper-Pearson interval of a binomial proportion: k successes in n trials.  Its ends
    solve P(X >= k; p_lo) = (1 - confidence) / 2 and P(X <= k; p_hi) = (1 - confidence) / 2; each
    is found by bisection on the binomial tail, summed in log space (to about 1e-12), and widened
    by 1e-9 so that rounding never narrows it."""
    if not 0 <= k <= n:
        raise InputError(f"{k} successes in {n} trials")
    alpha = (1 - confidence) / 2
    i = np.arange(n + 1)
    log_c = np.concatenate([[0.0], np.cumsum(np.log(n - i[1:] + 1.0) - np.log(i[1:].astype(float)))])

    def tail(p: float, upper: bool) -> float:  # P(X >= k) or P(X <= k)
        j = i[k:] if upper else i[:k + 1]
        logs = log_c[j] + j * math.log(p) + (n - j) * math.log1p(-p)
        top = logs.max()
        return math.exp(top) * float(np.exp(logs - top).sum())

    def solve(upper: bool) -> float:
        a, b = 0.0, 1.0  # tail(., upper) rises with p when upper, falls otherwise
        for _ in range(80):
            mid = (a + b) / 2
            if (tail(mid, upper) < alpha) == upper:
                a = mid
            else:
                b = mid
        return a if upper else b

    lo = 0.0 if k == 0 else max(0.0, solve(True) - 1e-9)
    hi = 1.0 if k == n else min(1.0, solve(False) + 1e-9)
    return lo, hi


# -- replays ------------------------------------------------------------------------------------
def _found(problem: Problem, ev, indices) -> list[Found]:
    """The failures at these indices, judged on the batched evaluator (to be replayed)."""
    task = problem.task
    found = []
    for i in indices:
        tokens = task.decode(int(i))
        answers, _ = task.evaluate(tokens[None, :])
        judged = ev.judge(ev.forward(tokens[None, :]), answers)
        found.append(Found.of(judged, 0, int(i), tokens))
    return found
