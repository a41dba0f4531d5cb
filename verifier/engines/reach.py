"""The reach engine: a recurrent model against a task given by a DFA, for every length at once.

A recurrent model's state after x_1 .. x_t is a vector of codes, and the task's answer at t is a
function of the DFA's state.  So the pairs (model state, DFA state) reachable at step t determine
every input's outputs at t: the engine explores them breadth first, one length per round,
vectorised over the frontier and the alphabet, and checks the readout of each new pair against the
DFA.  It is exact (the same arithmetic as the evaluator, on the same codes) and complete: a wrong
pair is reached by a shortest input, rebuilt from the pairs' parents, which `api` replays.  When a
round adds no new pair, every longer input only revisits checked pairs: the model is correct at
every length, not only up to N (``stats["every_length"]``).
"""

from __future__ import annotations

import time
from typing import Optional

import numpy as np

from ..evaluator import RecurrentEvaluator, make_evaluator
from ..model import Recurrent
from ..support.budget import TimedOut
from ..verdicts import Status
from .base import EngineResult, Found, Problem, RunOptions, Tick, codes_only


class Reach:
    name = "reach"
    symbolic = True  # it never evaluates most inputs one by one: `api` sample-checks its proofs

    def unsupported(self, problem: Problem, opts: RunOptions) -> Optional[str]:
        if codes_only(problem):
            return codes_only(problem)
        if not isinstance(problem.model, Recurrent):
            return "it decides recurrent models (the model is a transformer)"
        if problem.task.dfa is None:
            return f"task {problem.task.name} is not given by a DFA"
        if not opts.whole(problem.task.total):
            return "--start/--stop select inputs by enumeration; the reach engine decides whole lengths"
        return None

    def run(self, problem: Problem, opts: RunOptions) -> EngineResult:
        t0 = time.monotonic()
        task = problem.task
        ev: RecurrentEvaluator = make_evaluator(problem.model, problem.arith)
        q = ev.q
        dfa, accepting = task.dfa, np.array(task.accepting)
        A = dfa.shape[1]
        result = EngineResult(Status.COMPLETE, 0, [])
        # the pairs seen: model state codes | DFA state; parent pair and token, to rebuild an input
        start, start_ovf = self._step(ev, np.asarray(q.h0)[None, :], np.array([task.bos]))
        seen = np.hstack([start, np.zeros((1, 1), dtype=np.int64)])
        parent, token = [-1], [task.bos]
        frontier = np.array([0])
        bad = self._check(ev, seen[frontier], start_ovf, accepting)
        t, fixpoint = 0, None
        try:
            while not len(bad):
                opts.deadline.check()
                if not len(frontier):
                    fixpoint = t
                    break
                if t == task.N:
                    break
                t += 1
                states = np.repeat(seen[frontier, :-1], A, axis=0)
                symbols = np.tile(np.arange(A), len(frontier))
                h, ovf = self._step(ev, states, symbols)
                d = dfa[np.repeat(seen[frontier, -1], A), symbols]
                new = np.hstack([h, d[:, None]])
                fails = self._check(ev, new, ovf, accepting)
                rows, first = np.unique(new, axis=0, return_index=True)
                known = _rows_in(rows, seen)
                keep = np.sort(first[~known])
                if len(fails):
                    keep, bad = fails[:1], np.array([len(seen)])
                parent += [int(frontier[i // A]) for i in keep]
                token += [int(symbols[i]) for i in keep]
                frontier = np.arange(len(seen), len(seen) + len(keep))
                seen = np.vstack([seen, new[keep]])
                if opts.progress:
                    opts.progress(Tick(task.count_up_to(t), task.total, case=f"length {t}, {len(seen)} state pairs"))
        except KeyboardInterrupt:
            result.status = Status.INTERRUPTED
        except TimedOut:
            result.status = Status.TIMEOUT
        covered_len = t - 1 if len(bad) or result.status != Status.COMPLETE else task.N
        result.covered = task.count_up_to(max(covered_len, 0))
        if len(bad):
            result.found = [self._found(ev, task, parent, token, int(bad[0]))]
        result.stats = {"reachable_pairs": len(seen), "lengths_explored": t, "every_length": fixpoint is not None,
                        "fixpoint_at_length": fixpoint, "seconds": time.monotonic() - t0}
        return result

    @staticmethod
    def _step(ev: RecurrentEvaluator, h: np.ndarray, symbols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """One step of the model from states h (F, d) on tokens (F,): the new states and overflow flags."""
        ctx = ev.arith.context((len(h),))
        if ev.saturated_use is not None:
            ctx.ovf |= bool(ev.saturated_use.always) | ev.saturated_use.at(0, symbols, None)
        return ev.step(h, symbols, ctx, "step")[1], ctx.ovf

    @staticmethod
    def _check(ev: RecurrentEvaluator, pairs: np.ndarray, ovf: np.ndarray, accepting: np.ndarray) -> np.ndarray:
        """Indices of the pairs whose readout is wrong (or saturated) for their DFA state."""
        ctx = ev.arith.context((len(pairs),))
        _, pred, tie = ev.read(pairs[:, :-1], ctx)
        want = np.isin(pairs[:, -1], accepting).astype(np.int64)
        return np.flatnonzero((pred != want) | tie | ovf | ctx.ovf)

    @staticmethod
    def _found(ev, task, parent: list[int], token: list[int], pair: int) -> Found:
        tokens = []
        while pair >= 0:
            tokens.append(token[pair])
            pair = parent[pair]
        if len(tokens) == 1:  # the start token alone is not an input: its output is part of every input
            tokens.insert(0, 0)
        tokens = np.array(tokens[::-1], dtype=np.int64)
        judged = ev.judge(ev.forward(tokens[None, :]), task.answer(tokens)[None, :])
        return Found.of(judged, 0, task.index_of(tokens), tokens)


def _rows_in(rows: np.ndarray, table: np.ndarray) -> np.ndarray:
    """For each row of `rows`, is it a row of `table`? (both int64, same width)"""
    view = np.dtype((np.void, rows.dtype.itemsize * rows.shape[1]))
    return np.isin(np.ascontiguousarray(rows).view(view).ravel(), np.ascontiguousarray(table).view(view).ravel())
