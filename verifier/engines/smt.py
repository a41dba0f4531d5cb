"""The SMT engine (z3; bit-vectors by default, or integers): a proof for every input, case by case.

For each case split of the task (an input length and a query token), `encoding.Encoder` builds
"the model fails on some input of this case" (the cases of a length share one forward pass where
that costs the solver nothing).  A formula that partial evaluation reduces to a constant or to a
table over one token is decided there and then, exactly; the rest goes to z3, in a context that
holds only that case's formula.  UNSAT proves every input of the case; a model is decoded into a
concrete input, evaluated by the batched evaluator (a disagreement is an InternalError, never a
verdict) and returned, to be replayed once more by `verifier.runs.api`.  Cases are decided in
several processes at once for a large space and merged in enumeration order, so ``covered`` (the
inputs of the cases decided) is a prefix, and the counterexamples are those one process finds.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Optional

import numpy as np
import z3

from ..evaluator import Evaluator, RecurrentEvaluator, make_evaluator
from ..floats import FloatArith
from ..smt import solvers
from ..smt.encoding import Encoder
from ..smt.floats import SymFloat, TableTooLarge, float_unsupported
from ..support import interrupts
from ..support.budget import Deadline, TimedOut, fresh_z3_context, shielded, solving
from ..support.errors import InputError, InternalError
from ..tasks import Case
from ..tasks.base import case_splits
from ..verdicts import Status
from .base import EngineResult, Found, Problem, RunOptions, Tick, codes_only, in_order
from .exhaustive import PARALLEL_ABOVE

STAT_KEYS = ("conflicts", "decisions", "propagations", "sat conflicts", "sat decisions")  # summed over solves
PEAKS = ("max memory",)  # z3's peak memory in MB: the largest over the solves
DECIDED = ("table", "sat", "unsat")  # how `solve_case` decides a case; anything else leaves it undecided
INTERRUPTED = "interrupted"  # a worker's case that z3 stopped for a signal


class Smt:
    """``theory``: "bv" (QF_BV, the default: it was the faster, see docs/smt-encoding.md) or "int"."""

    name = "smt"
    symbolic = True

    def __init__(self, theory: str = "bv"):
        self.theory = theory

    def unsupported(self, problem: Problem, opts: RunOptions) -> Optional[str]:
        if isinstance(problem.arith, FloatArith):  # z3's floating-point theory (verifier/smt/floats.py)
            if self.theory != "bv":
                return codes_only(problem)
            why = float_unsupported(problem.arith, problem.model, problem.task.max_len)
            if why:
                return why
        elif codes_only(problem):
            return codes_only(problem)
        if problem.task.cases is None:
            return f"task {problem.task.name} has no case splits"
        if not opts.whole(problem.task.total):
            return "--start/--stop select inputs by enumeration; the smt engine decides whole cases"
        return None

    def run(self, problem: Problem, opts: RunOptions) -> EngineResult:
        t0 = time.monotonic()
        opts.deadline.check()  # the tables are not worth building past it (`engines._run`)
        fresh_z3_context()  # the terms are built in it, and an earlier run's interrupt leaves it cancelled
        task = problem.task
        ev = make_evaluator(problem.model, problem.arith)
        workers = self._workers(problem, opts)
        result = EngineResult(Status.COMPLETE, 0, [])
        stats = {"solver": "z3 " + z3.get_version_string(), "cases": 0, "workers": workers,
                 "theory": "fp" if isinstance(problem.arith, FloatArith) else self.theory,
                 "decided_by_evaluation": 0, "decided_by_solver": 0, "shared_encodings": 0, "solver_seconds": 0.0,
                 "unfinished_case": None}
        totals: dict = {}
        exact_margin = True  # every case's readout margin was a table
        # counting the cases costs one more pass over them: only for a display that shows it
        n_cases = sum(1 for _ in case_splits(task)) if opts.progress else None
        ahead: dict[int, Case] = {}  # the cases handed out and not yet merged, by index

        def tick(case_name: Optional[str]) -> None:
            if opts.progress:
                opts.progress(Tick(result.covered, task.total, stats["cases"], n_cases, case_name))

        stream = _Cases(task)

        def indices() -> Iterator[int]:
            for k in itertools.count():
                try:
                    ahead[k] = stream[k][0]
                except StopIteration:
                    return
                yield k

        def take(decided: _Decided) -> bool:
            """Merge the next case in enumeration order; True when the run stops there."""
            nonlocal exact_margin
            case = ahead.pop(stats["cases"])
            if decided.status == INTERRUPTED:  # in a worker: the run stops as it would in one process
                stats["unfinished_case"] = case.name
                raise KeyboardInterrupt
            stats["cases"] += 1
            stats["decided_by_solver" if decided.by_solver else "decided_by_evaluation"] += 1
            stats["shared_encodings"] += decided.shared
            stats["solver_seconds"] += decided.solver_seconds
            _add_totals(totals, decided.totals)
            if decided.margin is None:
                exact_margin = False
            elif result.min_margin is None or decided.margin[0] < result.min_margin:
                result.min_margin, result.tightest = decided.margin[0], task.index_of(decided.margin[1])
            result.found.extend(decided.found[:opts.max_counterexamples - len(result.found)])
            if len(result.found) >= opts.max_counterexamples:  # refuted, whatever more the case was asked for
                return True
            if decided.status not in DECIDED:  # out of time, the solver gave up, or a table too large
                result.status = Status.TIMEOUT if decided.status == "timeout" else Status.INCOMPLETE
                stats["unfinished_case"], stats["solver_reason"] = case.name, decided.status
                return True
            result.covered += case.count
            tick(ahead[stats["cases"]].name if stats["cases"] in ahead else None)
            return False

        _STATE.update(engine=self, evaluator=ev, task=task, opts=opts)
        try:
            if workers == 1:  # this process's `_decide` reads the same stream
                _STATE.update(cases=stream, encoder=Encoder(ev, self.theory, opts.deadline))
                for k in indices():
                    tick(ahead[k].name)
                    if take(_decide(k, opts.max_counterexamples - len(result.found))):
                        break
            else:
                pool = multiprocessing.get_context("fork").Pool(workers, initializer=interrupts.worker_init)
                try:
                    # a worker cannot know how many counterexamples the cases before its own will find
                    in_order(indices(), 2 * workers, lambda k: pool.apply_async(_decide, (k, opts.max_counterexamples)),
                             take, opts.deadline, result)
                finally:
                    with shielded():  # no worker outlives the run
                        pool.terminate()
                        pool.join()
        except TimedOut:
            result.status = Status.TIMEOUT
        except KeyboardInterrupt:
            result.status = Status.INTERRUPTED
        finally:
            _STATE.clear()
        if result.status in (Status.TIMEOUT, Status.INTERRUPTED) and stats["unfinished_case"] is None:
            stats["unfinished_case"] = ahead[stats["cases"]].name if stats["cases"] in ahead else None
        if not exact_margin:  # a margin over some cases only would mislead
            result.min_margin = result.tightest = None
        elif result.min_margin is not None:
            result.min_margin = float(problem.arith.to_real(result.min_margin))
        stats["solver_seconds"] = round(stats["solver_seconds"], 3)
        stats.update(totals)
        stats["seconds"] = time.monotonic() - t0
        result.stats = stats
        return result

    @staticmethod
    def _workers(problem: Problem, opts: RunOptions) -> int:
        """Processes that decide cases at once: --workers, else both cores for a large space.  One
        for the portfolio, which already runs a solver per core, and for an --smtlib export, which
        writes the cases the run decided and no case past where it stopped."""
        if solvers.resolve(opts.solver) == "portfolio" or opts.smtlib is not None:
            return 1
        return opts.workers or (min(2, os.cpu_count() or 1) if problem.task.total > PARALLEL_ABOVE else 1)

    def decide(self, encoder: Encoder, case: Case, group: list[Case], number: int, want: int) -> "_Decided":
        """One case (of `group`, its length's), encoded by `encoder` and decided (up to `want`
        counterexamples), and its counterexamples replayed on the evaluator, in the process that
        decides it."""
        ev, task, opts = _STATE["evaluator"], _STATE["task"], _STATE["opts"]
        try:
            enc = encoder(case, group)
        except TableTooLarge as exc:  # exp's table in a float format: the case is left undecided
            return _Decided(str(exc))
        except TimedOut:
            return _Decided("timeout")
        found_margins = enc.margins()
        margin = None
        if found_margins is not None:
            margins, var = found_margins
            i = int(np.argmin(margins))
            margin = (float(margins[i]), self._input_at(enc, i, var))
        by_solver = enc.fail.expr is not None
        totals: dict = {}
        ts = time.monotonic()
        text = self._export(opts, number, case.name, enc) if by_solver else None
        inputs, status = self.solve_case(enc, want, opts.deadline, opts.solver, totals, text)
        return _Decided(status, self._found(ev, task, enc, inputs), by_solver, enc.shared, margin, totals,
                        time.monotonic() - ts if by_solver else 0.0)

    @staticmethod
    def _input_at(enc, i: int, var: Optional[int]) -> list[int]:
        """The input of the case with token `var` at its i-th domain value (the others at their first)."""
        doms = enc.case.domains
        tokens = [int(d[0]) for d in doms]
        if var is not None:
            tokens[var] = int(doms[var][i])
        return tokens

    @classmethod
    def _from_table(cls, enc, want: int) -> list[list[int]]:
        """Failing inputs of a formula that depends on at most one token, in domain order."""
        fail = enc.fail
        if fail.is_const:
            return [cls._input_at(enc, 0, None)] if fail.value() else []
        return [cls._input_at(enc, int(i), fail.var) for i in np.flatnonzero(fail.table)[:want]]

    @classmethod
    def _export(cls, opts: RunOptions, number: int, name: str, enc) -> Optional[str]:
        """The case's SMT-LIB 2 text, written to the --smtlib directory as case-NNNNN.smt2 when one
        is given (never over an existing file); None when neither the export nor a solver other
        than z3 needs it."""
        directory = opts.smtlib
        if directory is None and solvers.resolve(opts.solver) == "z3":
            return None
        text = solvers.smtlib(cls._assertions(enc), cls._logic(enc))
        if directory is not None:
            path = Path(directory) / f"case-{number:05d}.smt2"
            try:
                with open(path, "x") as fh:
                    fh.write(f"; {name}\n" + text)
            except FileExistsError:
                raise InputError(f"{path} exists; --smtlib never overwrites a file (give an empty directory)") from None
        return text

    @staticmethod
    def _logic(enc) -> str:
        """The SMT-LIB logic of a case: bit-vectors, with floating point for a float format."""
        return getattr(enc.sfx, "logic", "QF_BV" if enc.sfx.theory == "bv" else "ALL")

    @staticmethod
    def _assertions(enc) -> list:
        return [*enc.sfx.domain_constraints(), enc.fail.expr]

    @classmethod
    def solve_case(cls, enc, want: int, deadline: Deadline, solver: str = "z3", totals: Optional[dict] = None,
                   text: Optional[str] = None) -> tuple[list[list[int]], str]:
        """Up to `want` failing inputs of one encoded case (`smt.encoding.encode`, in enumeration order
        when a table decides it), and how the case was decided: "table" (partial evaluation left a
        constant or a table over one token), "unsat" (no more) or "sat" (`want` found) from the
        solver, else "timeout" or the solver's reason for answering unknown.  `totals` collects the
        solver's statistics; `text` is the case's SMT-LIB 2, for a solver other than z3.  `run`
        decides every case with it; the differential battery (tests/battery.py) one case at a time."""
        if enc.fail.expr is None:
            return cls._from_table(enc, want), "table"
        return cls._solve(enc, want, deadline, {} if totals is None else totals, solver, text)

    @classmethod
    def _solve(cls, enc, want: int, deadline: Deadline, totals: dict, solver_name: str = "z3",
               text: Optional[str] = None) -> tuple[list[list[int]], str]:
        """Up to `want` failing inputs of the case, and "unsat" (no more), "sat" (found `want`),
        "timeout", or the solver's reason for answering unknown.  Every solve gets the time left
        to the deadline as its own timeout.  z3 catches SIGINT itself and answers unknown; that is
        raised here as the KeyboardInterrupt it was.  Another solver (or the portfolio) decides the
        case from its SMT-LIB text; further counterexamples are z3's."""
        left = deadline.left()
        if left is not None and left <= 0:
            return [], "timeout"
        S = enc.sfx
        found = []
        if solvers.resolve(solver_name) != "z3" and S.theory == "bv":
            names = [str(tv) for tv in S.tokens if tv is not None]
            answer, values, who = solvers.solve(solver_name, text, names, left)
            totals["answered_by"] = totals.get("answered_by", {})
            totals["answered_by"][who] = totals["answered_by"].get(who, 0) + 1
            if answer != "sat":
                return [], answer
            found.append([int(d[0]) if tv is None else values[str(tv)] for tv, d in zip(S.tokens, enc.case.domains)])
            if len(found) >= want:
                return found, "sat"
        # in a context of its own, with nothing but the case's formula: its model does not depend on
        # what this process built before (the cases before it, or its length's shared pass)
        ctx = z3.Context()
        if isinstance(S, SymFloat):
            solver = S.z3_solver(ctx)
        else:
            solver = z3.SolverFor("QF_BV", ctx=ctx) if S.theory == "bv" else z3.Solver(ctx=ctx)
        solver.add(*[a.translate(ctx) for a in cls._assertions(enc)])
        token_vars = [None if tv is None else tv.translate(ctx) for tv in S.tokens]
        for tokens in found:  # another solver's answer: z3 looks for the next one
            cls._block(solver, token_vars, tokens)
        while len(found) < want:
            left = deadline.left()
            if left is not None:
                if left <= 0:
                    return found, "timeout"
                solver.set("timeout", max(1, int(left * 1000)))
            with solving(ctx):  # a deadline's alarm and SIGTERM cancel it (`budget.interrupt_z3`)
                answer = solver.check()
            st = solver.statistics()
            for key in st.keys():
                if key in PEAKS:  # a peak over the run, not a sum over its solver calls
                    totals[key] = max(totals.get(key, 0), st.get_key_value(key))
                elif key in STAT_KEYS:
                    totals[key] = totals.get(key, 0) + st.get_key_value(key)
            if answer == z3.unsat:
                return found, "unsat"
            if answer == z3.unknown:
                why = solver.reason_unknown()
                if "interrupted" in why or interrupts.requested():  # a signal's cancel, not a timeout
                    raise KeyboardInterrupt
                return found, "timeout" if why in ("timeout", "canceled") else why or "unknown"
            model = solver.model()
            tokens = [int(d[0]) if tv is None else model.eval(tv, model_completion=True).as_long()
                      for tv, d in zip(token_vars, enc.case.domains)]
            found.append(tokens)
            cls._block(solver, token_vars, tokens)
        return found, "sat"

    @staticmethod
    def _block(solver, token_vars: list, tokens: list[int]) -> None:
        """No more models at this input."""
        solver.add(z3.Or([tv != tokens[j] for j, tv in enumerate(token_vars) if tv is not None]
                         or [z3.BoolVal(False, solver.ctx)]))

    @staticmethod
    def _found(ev: Evaluator | RecurrentEvaluator, task, enc, inputs: list[list[int]]) -> list[Found]:
        """Evaluate each failing input on the batched evaluator; it must fail there too."""
        out = []
        for tokens in inputs:
            arr = np.array([tokens], dtype=np.int64)
            expected = np.array([task.answer(arr[0])])
            judged = ev.judge(ev.forward(arr), expected)
            if not judged.failed[0]:
                raise InternalError(
                    f"the SMT model {task.render(tokens)} is a failure for the solver but not for the evaluator "
                    f"(expected {task.answer_text(expected[0])}); {enc.compare(ev, tokens)}")
            out.append(Found.of(judged, 0, task.index_of(tokens), arr[0]))
        return out


@dataclass
class _Decided:
    """A case as `Smt.decide` leaves it (what a worker sends back: no z3 object)."""

    status: str  # one of DECIDED, "timeout", or why the case is undecided
    found: list[Found] = field(default_factory=list)
    by_solver: bool = False
    shared: bool = False  # its encoding shared its length's forward pass (`Encoder`)
    margin: Optional[tuple[float, list[int]]] = None  # the smallest readout margin (codes) and its input;
    # None: not a table
    totals: dict = field(default_factory=dict)  # the solver's statistics
    solver_seconds: float = 0.0


def _add_totals(into: dict, part: dict) -> None:
    """Solver statistics of one more case: summed, peaks as maxima, answering solvers counted."""
    for key, value in part.items():
        if key == "answered_by":
            counts = into.setdefault(key, {})
            for who, n in value.items():
                counts[who] = counts.get(who, 0) + n
        elif key in PEAKS:
            into[key] = max(into.get(key, 0), value)
        else:
            into[key] = into.get(key, 0) + value


_STATE: dict = {}  # the run's engine, evaluator, task and options: set before forking, inherited by the workers


class _Cases:
    """The task's cases in enumeration order, read lazily a length at a time (consecutive cases of
    one length: what an `Encoder` shares a forward pass among).  Asked for in increasing order."""

    def __init__(self, task):
        self._groups = itertools.groupby(case_splits(task), key=lambda c: c.length)
        self.first, self.group = 0, []  # the index of the group's first case, and the group

    def __getitem__(self, k: int) -> tuple[Case, list[Case]]:
        while k >= self.first + len(self.group):
            self.first += len(self.group)
            self.group = list(next(self._groups)[1])
        return self.group[k - self.first], self.group


def _decide(k: int, want: int) -> _Decided:
    """Case k of the run in `_STATE` (up to `want` counterexamples), from the process's case stream
    and encoder: the run's own in one process, a worker's made on its first case."""
    if "cases" not in _STATE:  # a worker's first case
        _STATE.update(cases=_Cases(_STATE["task"]), encoder=Encoder(_STATE["evaluator"], _STATE["engine"].theory,
                                                                    _STATE["opts"].deadline))
    case, group = _STATE["cases"][k]
    try:
        return _STATE["engine"].decide(_STATE["encoder"], case, group, k + 1, want)
    except (KeyboardInterrupt, TimedOut) as exc:  # a pool's worker that raised it would die, its case lost
        if multiprocessing.current_process().daemon:
            return _Decided(INTERRUPTED if isinstance(exc, KeyboardInterrupt) else "timeout")
        raise
