"""The falsification pass before an unknown (`verifier.runs.falsify`): every failure it reports is a
failure of the task on the evaluator, it never proves, it finds the failures an engine that stopped
left behind, and in the boxes the bounds engine left open, ones that blind draws miss."""

import numpy as np
import pytest

import verifier
from tests.helpers import random_model
from verifier.arithmetic import FixedPoint
from verifier.engines.base import EngineResult, Problem, RunOptions
from verifier.engines.bounds import Bounds
from verifier.engines.exhaustive import Exhaustive
from verifier.runs.api import build_problem, failure_at, replay
from verifier.runs.falsify import falsify
from verifier.support.budget import Deadline, TimedOut
from verifier.tasks import make_task
from verifier.verdicts import Status


class _AfterPolls(Deadline):
    """A deadline that passes at its n-th poll: an engine stopped at the same step on any load."""

    def __init__(self, n: int):
        super().__init__()
        self.n = n

    def expired(self) -> bool:
        self.n -= 1
        return self.n < 0

    def check(self) -> None:
        if self.expired():
            raise TimedOut(None)


def _tokens(found) -> set:
    return {tuple(int(t) for t in f.tokens) for f in found}


@pytest.mark.parametrize("seed", range(6))
def test_every_failure_the_pass_reports_is_one_enumeration_finds(seed):
    """Against enumeration on random models: each reported input fails, replays on the generic
    path, and with no failing input the pass reports none."""
    rng = np.random.default_rng(seed)
    task = make_task("idxl", 3, sigma=2)
    problem = Problem(task, random_model(rng, task.vocab, task.max_len, C=task.num_classes, readout="argmax"),
                      FixedPoint(int(rng.integers(4, 9))))
    failing = _tokens(Exhaustive().run(problem, RunOptions(max_counterexamples=task.total, workers=1)).found)
    opts = RunOptions(max_counterexamples=task.total)
    tried, found = falsify(problem, EngineResult(Status.TIMEOUT, 0, []), opts, Deadline())
    assert tried.tried > 0 and tried.failed == len(found) and _tokens(found) <= failing
    assert bool(found) == bool(failing)  # 3 * 2^3 inputs: the draws reach every one
    for f in found:
        assert replay(problem, f).expected != replay(problem, f).produced


@pytest.mark.slow
def test_a_correct_model_that_times_out_stays_unknown_with_what_was_tried():
    result = verifier.prove("idxl", N=16, p=12, sigma=3, engine="exhaustive", timeout=3)
    tried = result.engine_stats["falsified"]
    assert result.verdict == "unknown" and result.status == "timeout"
    assert tried["tried"] > 0 and tried["failed"] == 0 and tried["uniform"] > 0
    assert "none fails (which proves nothing)" in result.summary()


@pytest.mark.slow
def test_a_point_below_the_frontier_that_times_out_is_refuted():
    """Induction heads at N = 16, p = 15: the first layer is not exactly local (the bounds engine
    refuses), the SMT engine runs out of time; most long inputs fail, and the pass finds one."""
    result = verifier.prove("induction_heads", N=16, p=15, f=4, sigma=3, timeout=20)
    assert result.verdict == "refuted" and result.status == "timeout" and result.engine == "smt (auto)"
    assert result.engine_stats["falsified"]["failed"] >= 1 and "replayed on the generic path" in result.summary()
    cex = result.counterexamples[0]
    again = failure_at(build_problem("induction_heads", N=16, p=15, f=4, sigma=3), cex.index)
    assert again is not None and again.input == cex.input and again.reason == cex.reason


@pytest.mark.slow
def test_the_boxes_a_stopped_bounds_run_left_open_hold_a_failure_blind_draws_miss():
    """Index lookup with eta = 2.5 at N = 14 fails on few inputs, deep in its branching: stopped at
    its last poll, the bounds engine has found nothing; the members of its open boxes fail, while
    the uniform draws and the cases' sample (the same pass without the boxes) find nothing."""
    problem = build_problem("idxl", N=14, p=16, eta=2.5)
    n = 1
    while (er := Bounds().run(problem, RunOptions(deadline=_AfterPolls(n)))).status == Status.TIMEOUT:
        last, n = er, n + 1
    assert er.found and not last.found and last.open  # the run one poll shorter stopped short of the failure
    tried, found = falsify(problem, last, RunOptions(), Deadline())
    assert found and tried.from_open > 0 and tried.failed <= tried.from_open
    assert replay(problem, found[0]).reason in ("wrong", "tie")
    blind = EngineResult(last.status, last.covered, last.found)
    tried, found = falsify(problem, blind, RunOptions(), Deadline())
    assert not found and tried.tried > 1000


def _repeated_key_boxes(task, count: int) -> list[list[np.ndarray]]:
    """Open boxes of MQAR's first answer case with keys x_1 and x_2 fixed to one symbol: boxes that
    hold no input, as a stopped bounds run's are (the engine's probes now refute these models before
    a run stops, so the stopped run is built here)."""
    case = next(task.answer_cases())
    box = list(case.domains)
    box[0] = box[2] = np.array([int(case.domains[-1][0])])
    return [box] * count


@pytest.mark.slow
def test_a_failing_mqar_model_a_stopped_bounds_run_leaves_is_refuted_by_inputs_the_task_draws():
    """MQAR at N = 32, p = 12 (the frontier's point below p*): open boxes that repeat a key hold no
    input, and random members of the cases are not inputs either (distinct keys, the queries a
    permutation of them: 9 sequences in a million at N = 16), so the pass used to evaluate none.
    The inputs MQAR draws itself from its cases fail, and replay."""
    problem = build_problem("mqar", N=32, p=12)
    er = EngineResult(Status.TIMEOUT, 0, [], open=_repeated_key_boxes(problem.task, 64))
    tried, found = falsify(problem, er, RunOptions(), Deadline())
    assert found and tried.from_cases > 0 and tried.failed >= 1
    again = replay(problem, found[0])
    assert again.expected != again.produced


@pytest.mark.slow
def test_a_pass_stopped_early_has_tried_every_source():
    """MQAR at N = 32, p = 12: the inputs drawn from its cases fail, and the open boxes hold none.
    A pass whose deadline passes at its 60th poll still reaches the cases' draws behind 1,024 open
    boxes: it takes the sources in turn, a batch each."""
    problem = build_problem("mqar", N=32, p=12)
    er = EngineResult(Status.TIMEOUT, 0, [], open=_repeated_key_boxes(problem.task, 1024))
    tried, found = falsify(problem, er, RunOptions(), _AfterPolls(60))
    assert found and tried.from_cases > 0
    again = replay(problem, found[0])
    assert again.expected != again.produced
