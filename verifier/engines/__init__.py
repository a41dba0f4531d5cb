"""Engines by name.  Adding an engine: one module with a class that has `name`, `unsupported`
and `run` (see `base.Engine`), and one entry in ENGINES."""

from __future__ import annotations

from ..errors import InputError
from .base import Engine, EngineResult, Found, Problem, RunOptions, Tick
from .exhaustive import Exhaustive
from .reach import Reach
from .smt import Smt

ENGINES: dict[str, Engine] = {"exhaustive": Exhaustive(), "smt": Smt(), "smt-bv": Smt("bv"), "smt-int": Smt("int"),
                              "reach": Reach()}
AUTO_EXHAUSTIVE_BELOW = 1 << 22  # auto enumerates spaces smaller than this, and encodes the rest


def choose(name: str, problem: Problem, opts: RunOptions) -> Engine:
    if name == "auto":
        reasons = []
        order = ["exhaustive", "smt"] if problem.task.total < AUTO_EXHAUSTIVE_BELOW else ["smt", "exhaustive"]
        order.insert(0, "reach")  # a recurrent model and a DFA task: every length at once
        for candidate in order:
            why = ENGINES[candidate].unsupported(problem, opts)
            if why is None:
                return ENGINES[candidate]
            reasons.append(f"{candidate}: {why}")
        raise InputError("no engine can decide this problem (" + "; ".join(reasons) + ")")
    if name not in ENGINES:
        raise InputError(f"unknown engine {name!r}; known engines: auto, {', '.join(ENGINES)}")
    engine = ENGINES[name]
    why = engine.unsupported(problem, opts)
    if why is not None:
        raise InputError(f"engine {name} cannot decide this problem: {why}")
    return engine


__all__ = ["ENGINES", "Engine", "EngineResult", "Found", "Problem", "RunOptions", "choose"]
