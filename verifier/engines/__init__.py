"""Engines by name.  Adding an engine: one module with a class that has `name`, `unsupported`
and `run` (see `base.Engine`), and one entry in ENGINES."""

from __future__ import annotations

import math
import os
import time
from typing import Optional

from ..errors import InputError
from ..evaluator import make_evaluator
from ..result import count_text
from .base import Engine, EngineResult, Found, Problem, RunOptions, Tick
from .bounds import Bounds
from .exhaustive import Exhaustive
from .reach import Reach
from .smt import Smt

ENGINES: dict[str, Engine] = {"exhaustive": Exhaustive(), "smt": Smt(), "smt-bv": Smt("bv"), "smt-int": Smt("int"),
                              "reach": Reach(), "bounds": Bounds()}
AUTO_ENUMERATE_SECONDS = 120.0  # auto enumerates below this estimate: its cost is known, a solver's is not
ENUMERABLE = 1 << 36  # beyond this many inputs, enumeration is out of reach at any speed
TIMED_WINDOWS = 4
TIMED_BATCH = 4096


def enumeration_seconds(problem: Problem) -> float:
    """Enumeration's cost, estimated: the input count times the seconds per input
    measured on the evaluator over TIMED_WINDOWS batches of at most TIMED_BATCH, spread over the enumeration (the last one
    holds the longest inputs, in every task's order)."""
    task = problem.task
    if task.total > ENUMERABLE:
        return math.inf
    try:
        ev = make_evaluator(problem.model, problem.arith)
    except InputError:  # the layer-0 tables do not fit: nor does enumeration
        return math.inf
    size = min(task.total, ev.batch_size(task.max_len), TIMED_BATCH)  # as enumeration evaluates them
    starts = sorted({min(task.total - size, task.total * k // TIMED_WINDOWS) for k in range(1, TIMED_WINDOWS + 1)})
    t0 = time.perf_counter()
    for start in starts:  # a filter may drop inputs: the cost is per index
        for batch in task.batches(start, start + size, size):
            ev.judge(ev.forward(batch.tokens), batch.expected)
    per_index = (time.perf_counter() - t0) / max(size * len(starts), 1)
    return task.total * per_index / (os.cpu_count() or 1)  # enumeration splits large spaces over the cores


def auto(problem: Problem, opts: RunOptions) -> tuple[Engine, str]:
    """The engine `auto` runs, and why, by a cost model: the reach engine when a recurrent model
    meets a DFA task (every length at once); enumeration when its measured estimate
    (`enumeration_seconds`) is below AUTO_ENUMERATE_SECONDS; the bounds engine when every case says which position holds the answer
    (index lookup, in-context QA: the answer is then known on a box, and the branching stays
    small); the SMT engine otherwise; and enumeration as the last resort."""
    seconds = enumeration_seconds(problem)
    estimate = (f"enumerating {count_text(problem.task.total)} inputs "
                + (f"would take about {seconds:.2g} s" if math.isfinite(seconds) else "is out of reach"))
    order = [("reach", "a recurrent model and a DFA task: every length at once")]
    cases = problem.task.cases() if hasattr(problem.task, "cases") else iter(())
    first = next(cases, None)
    if seconds <= AUTO_ENUMERATE_SECONDS:
        order.append(("exhaustive", estimate))
    if first is not None and first.answer_at is not None:
        order.append(("bounds", estimate + "; the cases say which position holds the answer"))
    order += [("smt", estimate), ("exhaustive", estimate)]
    reasons = []
    for name, why in order:
        refused = ENGINES[name].unsupported(problem, opts)
        if refused is None:
            return ENGINES[name], why
        reasons.append(f"{name}: {refused}")
    raise InputError("no engine can decide this problem (" + "; ".join(reasons) + ")")


def choose(name: str, problem: Problem, opts: RunOptions) -> tuple[Engine, Optional[str]]:
    """The engine to run, and for `auto` why it was chosen."""
    if name == "auto":
        return auto(problem, opts)
    if name not in ENGINES:
        raise InputError(f"unknown engine {name!r}; known engines: auto, {', '.join(ENGINES)}")
    engine = ENGINES[name]
    why = engine.unsupported(problem, opts)
    if why is not None:
        raise InputError(f"engine {name} cannot decide this problem: {why}")
    return engine, None


__all__ = ["ENGINES", "Engine", "EngineResult", "Found", "Problem", "RunOptions", "auto", "choose"]
