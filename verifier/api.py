"""The library entry points: build a problem, run an engine, replay what it found, give a verdict.

``verifier.prove(task="index_lookup", N=16, p=12)`` is what ``verify idxl --N 16 --p 12`` calls.
Every counterexample an engine reports is replayed here, on the evaluator's generic path and
against the task's own definition of the answer, before it is reported; a replay that disagrees
is an `InternalError`, never a verdict.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from .arithmetic import FixedPoint
from .constructions import CONSTRUCTIONS
from .engines import Found, Problem, RunOptions, choose
from .errors import InputError, InternalError
from .evaluator import Evaluator, Outputs, reference, trace
from .model import Model
from .result import Counterexample, Result
from .tasks import canonical, make_task


@dataclass
class Traced:
    """One input evaluated in FX and in the real reference, with every intermediate value."""

    tokens: np.ndarray
    truth: int
    out: Outputs
    real_out: Outputs
    table: dict  # name -> {"codes", "values", "real"}
    margin: float
    real_margin: float


def build_problem(task: str = "index_lookup", *, N: int, p: int, f: Optional[int] = None,
                  rounding: str = "floor", overflow: str = "saturate", accumulate: str = "product",
                  variant: Optional[str] = None, k: Optional[int] = None, eta: Optional[float] = None,
                  seed: int = 0, model: Optional[Model] = None, **task_options) -> Problem:
    """The task at size N (with its options, e.g. ``sigma=4``), the arithmetic, and the built-in
    construction in the given variant (default: corrected), or the given model."""
    name = canonical(task)
    t = make_task(name, N=N, **task_options)
    arith = FixedPoint(p, f, rounding, overflow, accumulate)
    if model is None:
        model = CONSTRUCTIONS[name].build(t, variant, k, eta, seed, arith.f)
    elif (k, eta, variant) != (None, None, None):
        raise InputError("--variant, --k and --eta set a built-in construction's parameters; "
                         "they do not apply to --model")
    check_compatible(model, t)
    return Problem(t, model, arith)


def check_compatible(model: Model, task) -> None:
    model.validate()
    if len(model.vocab) != len(task.vocab):
        raise InputError(f"the model has {len(model.vocab)} tokens but {task.name} at this size has "
                         f"{len(task.vocab)} ({' '.join(task.vocab[:6])}{' ...' if len(task.vocab) > 6 else ''})")
    if model.max_len < task.max_len:
        raise InputError(f"the model has position embeddings for {model.max_len} positions; "
                         f"{task.name} needs {task.max_len} (array 'P' rows)")
    if model.readout.kind != task.readout:
        raise InputError(f"{task.name} needs an {task.readout} readout, the model has {model.readout.kind}")
    if task.readout == "argmax" and model.readout.W_U.shape[0] != task.num_classes:
        raise InputError(f"array 'U.W' has {model.readout.W_U.shape[0]} rows, expected one per class "
                         f"({task.num_classes})")


def run(problem: Problem, engine: str = "auto", *, max_counterexamples: int = 1, timeout: Optional[float] = None,
        start: int = 0, stop: Optional[int] = None, workers: Optional[int] = None,
        progress: Optional[Callable[[int, int], None]] = None) -> Result:
    """Decide the problem with an engine; replay every counterexample; return the verdict."""
    total = problem.task.total
    stop = total if stop is None else stop
    if not 0 <= start <= stop <= total:
        raise InputError(f"the range {start}..{stop} is not inside 0..{total}")
    if max_counterexamples < 1:
        raise InputError(f"--max-counterexamples must be >= 1, got {max_counterexamples}")
    if timeout is not None and timeout <= 0:
        raise InputError(f"--timeout must be positive, got {timeout}")
    if workers is not None and workers < 1:
        raise InputError(f"--workers must be >= 1, got {workers}")
    opts = RunOptions(max_counterexamples, timeout, start, stop, workers, progress)
    chosen = choose(engine, problem, opts)
    t0 = time.monotonic()
    er = chosen.run(problem, opts)
    seconds = time.monotonic() - t0
    quantized = Evaluator(problem.model, problem.arith, tables=False)
    cexs = [replay(problem, found, quantized) for found in er.found]
    if cexs:
        verdict, reason = "refuted", ""
    elif er.status == "complete" and (start, stop) == (0, total):
        verdict, reason = "proved", ""
    else:
        verdict = "unknown"
        if er.status == "interrupted":
            reason = "interrupted (Ctrl-C)"
        elif er.status == "timeout":
            reason = f"timeout after {timeout:g} s"
        elif er.status == "incomplete":
            reason = "the solver answered unknown"
        else:
            reason = f"the range {start}..{stop} is part of the {total} inputs"
        if er.stats.get("unfinished_case"):
            reason += f"; unfinished case {er.stats['unfinished_case']}"
        reason += f"; covered inputs {start}..{start + er.covered}"
        if chosen.name == "exhaustive":
            reason += f", resume with --start {start + er.covered}"
    info = dict(problem.model.info)
    construction = {"construction": info.pop("construction", "user model"), "theorem": info.pop("theorem", None)}
    params = {**info, "size_bits": problem.arith.p * problem.model.n_params()}
    arithmetic = {**problem.arith.describe(), "quantization_error": quantized.quant_error,
                  "saturated_parameters": quantized.saturated_params}
    tightest = None
    if er.tightest is not None:
        tightest = {"index": er.tightest, "input": problem.task.render(problem.task.decode(er.tightest))}
    return Result(verdict, problem.task.describe(), construction, params, arithmetic,
                  chosen.name + (" (auto)" if engine == "auto" else ""), er.covered, total, start, stop, seconds,
                  er.min_margin, cexs, tightest, reason, er.stats)


def prove(task: str = "index_lookup", *, engine: str = "auto", max_counterexamples: int = 1,
          timeout: Optional[float] = None, start: int = 0, stop: Optional[int] = None,
          workers: Optional[int] = None, progress=None, **problem) -> Result:
    """Build the problem (see `build_problem`) and decide it: ``prove("idxl", N=16, p=12)``."""
    return run(build_problem(task, **problem), engine, max_counterexamples=max_counterexamples, timeout=timeout,
               start=start, stop=stop, workers=workers, progress=progress)


def explain(problem: Problem, tokens: np.ndarray, quantized: Optional[Evaluator] = None) -> Traced:
    """Evaluate one input on the generic path in FX and in the real reference, keeping every value."""
    quantized = quantized or Evaluator(problem.model, problem.arith, tables=False)
    tokens = np.asarray(tokens, dtype=np.int64)
    truth = problem.task.answer(tokens)
    out, values = trace(quantized, tokens)
    real_ev = reference(problem.model)
    real_out, real_values = trace(real_ev, tokens)
    table = {name: {"codes": v, "values": problem.arith.to_real(v), "real": real_values.get(name)}
             for name, v in values.items()}
    return Traced(tokens, truth, out, real_out, table, float(quantized.margins(out, np.array([truth]))[0]),
                  float(real_ev.margins(real_out, np.array([truth]))[0]))


def replay(problem: Problem, found: Found, quantized: Optional[Evaluator] = None) -> Counterexample:
    """Re-evaluate a reported failure on the generic path, against the task's own answer.

    A failure that does not reproduce exactly (same answer, same kind of failure) is an
    InternalError: the engines and the evaluator disagree, and no verdict may be given.
    """
    task = problem.task
    t = explain(problem, found.tokens, quantized)
    out = t.out
    produced = int(out.pred[0])
    reason = "overflow" if out.ovf[0] else "tie" if out.tie[0] else "wrong" if produced != t.truth else None
    if (t.truth, produced, reason) != (found.expected, found.produced, found.reason):
        raise InternalError(
            f"counterexample #{found.index} ({task.render(t.tokens)}) does not replay: the engine reported "
            f"expected {found.expected}, produced {found.produced} ({found.reason}); the evaluator gives "
            f"expected {t.truth}, produced {produced} ({reason or 'correct'})")
    return Counterexample(
        index=found.index, tokens=[int(x) for x in t.tokens], input=task.render(t.tokens),
        expected=task.answer_name(t.truth), produced=_produced_name(task, out), reason=reason, margin=t.margin,
        overflow_at=list(out.where), real_produced=_produced_name(task, t.real_out),
        real_margin=t.real_margin, trace=t.table)


def _produced_name(task, out: Outputs) -> str:
    """The answer by name; for an argmax tie, every class that shares the maximum."""
    if out.tie[0]:
        scores = out.scores[0]
        return "tie(" + ", ".join(task.answer_name(int(c)) for c in np.flatnonzero(scores == scores.max())) + ")"
    return task.answer_name(int(out.pred[0]))
