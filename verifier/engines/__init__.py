"""Engines by name.  Adding an engine: one module with a class that has `name`, `unsupported`
and `run` (see `base.Engine`), and one entry in ENGINES."""

from __future__ import annotations

import math
from typing import Optional

from ..result import count_text
from ..support.budget import TimedOut, TooLarge
from ..support.errors import InputError
from ..verdicts import Status
from .aggregate import Aggregate
from .base import Engine, EngineResult, Found, Problem, RunOptions, Tick
from .bounds import Bounds
from .cost import enumeration_seconds
from .exhaustive import Exhaustive
from .lookup import Lookup
from .prefix import Prefix
from .reach import Reach
from .smt import Smt

ENGINES: dict[str, Engine] = {"exhaustive": Exhaustive(), "smt": Smt(), "smt-bv": Smt("bv"), "smt-int": Smt("int"),
                              "reach": Reach(), "bounds": Bounds(), "aggregate": Aggregate(),
                              "lookup": Lookup(), "prefix": Prefix()}
AUTO_ENUMERATE_SECONDS = 120.0  # auto enumerates below this estimate: its cost is known, a solver's is not


def candidates(problem: Problem, opts: RunOptions) -> list[tuple[Engine, str]]:
    """The engines `auto` tries, in order, each with why: the reach engine when a recurrent model
    meets a DFA task (every length at once); enumeration when its estimate from the sizes
    (`cost.enumeration_seconds`, the same on any load) is below AUTO_ENUMERATE_SECONDS; the bounds
    engine when every case says which position holds the answer (index lookup, in-context QA: the
    answer is then known on a box, and the branching stays small), or the task splits its cases
    so (`answer_cases`: MQAR, nearest neighbour), or a readout at every position
    has cases of the last position that do (induction heads); the aggregate engine when the task's
    answer is a sum of features (equality, disjointness: it declines a model it does not fit); the
    prefix engine for a DFA task (the Dyck-(2,2) transformer: heads that average, write nothing or
    are local); the lookup engine when every layer's keys and values are tables over (position, token) and the task
    says which positions its answer reads (composition; it declines other models); the SMT engine;
    and enumeration as the last resort.  An engine that cannot decide the problem is left out;
    InputError when none can."""
    seconds = enumeration_seconds(problem, opts)
    estimate = (f"enumerating {count_text(opts.size(problem.task.total))} inputs "
                + (f"would take about {seconds:.2g} s" if math.isfinite(seconds) else "is out of reach"))
    order = [("reach", "a recurrent model and a DFA task: every length at once")]
    cases = problem.task.cases() if problem.task.cases is not None else iter(())
    first = next(cases, None)
    if seconds <= AUTO_ENUMERATE_SECONDS:
        order.append(("exhaustive", estimate))
    if first is not None and first.answer_at is not None:
        order.append(("bounds", estimate + "; the cases say which position holds the answer"))
    elif getattr(problem.task, "answer_cases", None) is not None and problem.model.readout.positions == "last":
        order.append(("bounds", estimate + "; the cases split by the position that holds the answer"))
    elif getattr(type(problem.task), "last_position_cases", None) is not None and \
            getattr(problem.model.readout, "positions", "last") == "all":
        order.append(("bounds", estimate + "; the cases of the last position say which position holds the answer"))
    if problem.task.dfa is not None:
        order.append(("prefix", estimate + "; a DFA task, and a transformer whose heads average, write nothing or "
                                          "are local: every prefix at once"))
    if getattr(problem.task, "feature_sum", None) is not None:
        order.append(("aggregate", estimate + "; the answer is a sum of features of blocks the first layer reads"))
    order.append(("lookup", estimate + "; every layer's keys and values are tables over (position, token), looked "
                                       "up at the last position"))
    order += [("smt", estimate), ("exhaustive", estimate)]
    chosen: list[tuple[Engine, str]] = []
    reasons: list[str] = []
    for name, why in order:
        if any(engine is ENGINES[name] for engine, _ in chosen):
            continue
        refused = ENGINES[name].unsupported(problem, opts)
        if refused is None:
            chosen.append((ENGINES[name], why))
        else:
            reasons.append(f"{name}: {refused}")
    if not chosen:
        raise InputError("no engine can decide this problem (" + "; ".join(reasons) + ")")
    return chosen


def auto(problem: Problem, opts: RunOptions) -> tuple[Engine, str]:
    """The engine `auto` runs first, and why (`candidates`)."""
    return candidates(problem, opts)[0]


def choose(name: str, problem: Problem, opts: RunOptions) -> tuple[Engine, Optional[str]]:
    """The engine to run, and for `auto` why it was chosen."""
    return plan(name, problem, opts)[0]


def plan(name: str, problem: Problem, opts: RunOptions) -> list[tuple[Engine, Optional[str]]]:
    """The engines to try in turn, each with why auto chose it (None for an engine named): the one
    named, or `auto`'s candidates."""
    if name == "auto":
        return list(candidates(problem, opts))
    if name not in ENGINES:
        raise InputError(f"unknown engine {name!r}; known engines: auto, {', '.join(ENGINES)}")
    engine = ENGINES[name]
    why = engine.unsupported(problem, opts)
    if why is not None:
        raise InputError(f"engine {name} cannot decide this problem: {why}")
    return [(engine, None)]


def decide(options: list[tuple[Engine, Optional[str]]], problem: Problem,
           opts: RunOptions) -> tuple[Engine, Optional[str], EngineResult]:
    """Run the first engine of `plan`: the engine, why auto chose it, its result.  One that refuses
    the problem's size as it starts (`TooLarge`: a table or its boxes would not fit) gives way to
    the next, and the reason says so."""
    tried: list[str] = []
    for engine, why in options[:-1]:
        try:
            return engine, "; ".join([why] + tried), _run(engine, problem, opts)
        except TooLarge as exc:
            tried.append(f"{engine.name} refused: {exc}")
    engine, why = options[-1]
    return engine, None if why is None else "; ".join([why] + tried), _run(engine, problem, opts)


def _run(engine: Engine, problem: Problem, opts: RunOptions) -> EngineResult:
    """The engine's result; a deadline that passes before the engine's own handling (while it
    quantizes the model or builds its tables) ends the run with nothing covered."""
    try:
        return engine.run(problem, opts)
    except TimedOut:
        return EngineResult(Status.TIMEOUT, 0, [])


__all__ = ["ENGINES", "Engine", "EngineResult", "Found", "Problem", "RunOptions", "Tick", "auto", "candidates",
           "choose", "decide", "plan"]
