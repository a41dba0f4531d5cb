"""The prefix engine (verifier/engines/prefix.py) against enumeration: the Dyck-(2,2) transformer
(Bhattamishra et al. 2024, arXiv:2406.09347, Section 4.3) on both sides of its frontier and
random perturbations of it, in every rounding and accumulation; a merge that forgets a column of
the future terms caught; a wrong composition an internal error; the models it declines."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from helpers import declines_formats, prefix_shaped

from verifier.engines import ENGINES, RunOptions, candidates, prefix
from verifier.engines.exhaustive import Exhaustive
from verifier.engines.prefix import Prefix, basis_columns
from verifier.evaluator import Evaluator
from verifier.runs.api import build_problem
from verifier.support.budget import Deadline, TimedOut
from verifier.support.errors import InternalError
from verifier.verdicts import Status

ALL = RunOptions(max_counterexamples=1 << 30)


def _agree(problem) -> str:
    """Both engines on the problem: the same verdict; refuted, the same failing inputs at the shortest
    failing length (the prefix engine stops there; longer inputs are not covered); proved, the same
    smallest margin.  Returns the verdict."""
    mine, theirs = Prefix().run(problem, ALL), Exhaustive().run(problem, ALL)
    assert bool(mine.found) == bool(theirs.found), (len(mine.found), len(theirs.found))
    if not theirs.found:
        assert mine.covered == problem.task.total
        assert mine.min_margin == pytest.approx(theirs.min_margin)
        return "proved"
    length = min(len(f.tokens) for f in theirs.found)
    assert {f.index for f in mine.found} == {f.index for f in theirs.found if len(f.tokens) == length}
    assert mine.covered == problem.task.count_up_to(length - 2)
    return "refuted"


@pytest.mark.parametrize("N,f,ps", [(4, 3, (8, 9, 11)), (4, 4, (9, 10)), (5, 3, (8, 9, 12)), (6, 4, (11, 12)),
                                    (6, 3, (10, 12))])
def test_the_construction_agrees_with_enumeration(N, f, ps):
    verdicts = {_agree(build_problem("dyck22", N=N, p=p, f=f)) for p in ps}
    assert verdicts == {"proved", "refuted"}  # p crosses the frontier: both kinds are compared


def test_at_N_8_on_both_sides_of_the_frontier():
    """p* = 14 at N = 8, f = 4: p = 13 fails at length 8 (a previous-token logit saturates)."""
    assert [_agree(build_problem("dyck22", N=8, p=p, f=4)) for p in (13, 14)] == ["refuted", "proved"]


@pytest.mark.parametrize("seed", range(10))
def test_random_models_of_the_shape_agree_with_enumeration(seed):
    rng = np.random.default_rng(seed)
    problem = prefix_shaped(build_problem("dyck22", N=int(rng.integers(4, 7)), p=16, f=4), rng)
    assert Prefix().unsupported(problem, ALL) is None
    _agree(problem)


def test_the_counts_merge():
    """At N = 16 the first layer's four bracket counts become A and B: far fewer pairs than prefixes."""
    result = Prefix().run(build_problem("dyck22", N=16, p=17, f=5), RunOptions())
    assert result.covered == build_problem("dyck22", N=16, p=17, f=5).task.total and not result.found
    assert result.stats["largest_length_pairs"] < 20_000  # 4^16 prefixes of length 16


def _rows(problem, monkeypatch) -> tuple[set, set]:
    """The last layer's output rows the engine reads out, every column of them computed (`_live`
    says every column is read), and those at every position of every input (enumeration)."""
    seen: set[tuple] = set()
    scores = Evaluator.scores

    def spy(ev, X, ctx, rec=None):
        seen.update(map(tuple, X.reshape(-1, X.shape[-1]).tolist()))
        return scores(ev, X, ctx, rec)

    with monkeypatch.context() as m:
        m.setattr(Evaluator, "scores", spy)
        m.setattr(prefix, "_live", lambda q, kinds: [np.arange(q.d)] * len(q.layers))
        assert not Prefix().run(problem, RunOptions()).found
    task, ev = problem.task, Evaluator(problem.model, problem.arith)
    every: set[tuple] = set()
    for n in range(1, task.N + 1):
        tokens = np.array([task.decode(i) for i in range(task.count_up_to(n - 1), task.count_up_to(n))])
        values: dict = {}
        ev.forward(tokens, rec=values.__setitem__)
        every.update(map(tuple, values[f"L{len(problem.model.layers) - 1}.out"].reshape(-1, ev.q.d).tolist()))
    return seen, every


@pytest.mark.parametrize("N,p,f", [(5, 9, 3), (6, 12, 4)])
def test_every_prefix_is_read_out_as_enumeration_reads_it(N, p, f, monkeypatch):
    """Beyond the verdict: the last layer's rows at the candidates are those at every position of
    every input (each prefix has the summary of a kept pair, and each pair is a prefix's)."""
    seen, every = _rows(build_problem("dyck22", N=N, p=p, f=f), monkeypatch)
    assert seen == every


@pytest.mark.parametrize("drop", [0, 1])
def test_a_merge_that_forgets_a_column_is_caught(drop, monkeypatch):
    """Keyed on h T_J with the column of A (or of B) dropped, prefixes whose counts differ merge, and
    rows that enumeration reaches are never computed.  (The third column, the start token's count,
    is 1 in every prefix: dropping it merges nothing.)"""
    monkeypatch.setattr(prefix, "basis_columns", lambda T: [c for i, c in enumerate(basis_columns(T)) if i != drop])
    seen, every = _rows(build_problem("dyck22", N=6, p=12, f=4), monkeypatch)
    assert seen < every


def test_basis_columns_are_exact():
    T = np.array([[1, 2, 3, 1 << 40], [2, 4, 6, (1 << 41) + 1]])  # a float rank would call it 1
    assert basis_columns(T) == [0, 3]
    assert basis_columns(np.zeros((3, 4), np.int64)) == []


def test_a_wrong_composition_is_an_internal_error(monkeypatch):
    layer = prefix._Walk._layer

    def off_by_one(self, li, *args):
        out = layer(self, li, *args)
        return out + 1 if li == len(self.kinds) - 1 else out

    monkeypatch.setattr(prefix._Walk, "_layer", off_by_one)
    with pytest.raises(InternalError, match="composed readout"):
        Prefix().run(build_problem("dyck22", N=4, p=12, f=3), RunOptions())


def test_auto_takes_it_for_the_dyck_transformer_out_of_enumeration_reach():
    problem = build_problem("dyck22", N=16, p=17, f=5)
    engine, why = candidates(problem, RunOptions())[0]
    assert engine is ENGINES["prefix"] and "DFA" in why


def test_what_it_declines():
    problem = build_problem("dyck22", N=4, p=12, f=3)
    engine = Prefix()
    declines_formats(engine, problem)
    model = problem.model
    third = model.layers[2]
    reading = replace(third, heads=[replace(third.heads[0], W_Q=np.ones_like(third.heads[0].W_Q),
                                            W_K=np.ones_like(third.heads[0].W_K))])
    assert "layer 2's head 0" in engine.unsupported(replace(problem, model=replace(model, layers=[
        *model.layers[:2], reading])), RunOptions())
    open_mask = replace(model, layers=[replace(model.layers[0], causal=False), *model.layers[1:]])
    assert "causal" in engine.unsupported(replace(problem, model=open_mask), RunOptions())
    recurrent = build_problem("dyck22", N=4, p=8, f=1, variant="recurrent")
    assert "recurrent" in engine.unsupported(recurrent, RunOptions())
    assert "--start/--stop" in engine.unsupported(problem, RunOptions(start=1))
    assert "not given by a DFA" in engine.unsupported(build_problem("induction_heads", N=4, p=12), RunOptions())
    wide = build_problem("dyck22", N=8, p=12, f=4)  # the previous-token head is 7 positions wide
    assert "token windows" in engine.unsupported(wide, RunOptions())


def test_a_deadline_covers_the_lengths_explored():
    """Stopped in the middle, the lengths whose every pair was checked are covered, and the status
    says the time ran out."""
    problem = build_problem("dyck22", N=8, p=14, f=4)

    class Passes(Deadline):
        polls = 0

        def check(self) -> None:
            self.polls += 1
            if self.polls > 25:
                raise TimedOut()

    result = Prefix().run(problem, RunOptions(deadline=Passes()))
    explored = result.stats["lengths_explored"]
    assert result.status == Status.TIMEOUT and not result.found and 0 < explored < 8
    assert result.covered == problem.task.count_up_to(explored)
