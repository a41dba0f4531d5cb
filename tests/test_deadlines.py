"""Issue 21, items 2, 3 and 8: the bounds engine bounds its memory and auto falls back when an
engine refuses a size; auto's choice does not depend on the machine's load; --timeout bounds the
whole command, inside enumeration chunks, SMT solves, tables, constructions and syntheses.

No test here times anything for speed: deadlines are either counted polls (a `Deadline` that
passes after n of them) or a bound on how late a stop may come, and memory is measured with
tracemalloc under a small budget, never by allocating gigabytes."""

import dataclasses
import time
import tracemalloc

import numpy as np
import pytest
import z3

import cli
import verifier
from verifier.arithmetic import make_format
from verifier.constructions import CONSTRUCTIONS
from verifier.engines import ENGINES, RunOptions, auto, bounds
from verifier.engines.exhaustive import CHUNK, Exhaustive
from verifier.layer0 import class_table
from verifier.refute.certificates import find_certificate
from verifier.refute.refute import random_model
from verifier.refute.synthesis import synthesize
from verifier.support import budget
from verifier.support.budget import Deadline, TimedOut
from verifier.support.errors import InputError
from verifier.tasks import make_task


class After(Deadline):
    """A deadline that passes at its n-th poll: no clock, so the test does not depend on speed."""

    def __init__(self, polls: int):
        super().__init__(1.0)
        self.polls = polls

    def expired(self) -> bool:
        self.polls -= 1
        return self.polls < 0

    def left(self) -> float:
        return 1e9 if self.polls >= 0 else 0.0

    def check(self) -> None:
        if self.expired():
            raise TimedOut(self.seconds)


def random_icqa(k: int, n: int, seed: int = 0):
    task = make_task("icqa", k, nq=n, na=n)
    model = random_model(task, 2, 4, "relu", np.random.default_rng(seed))
    return verifier.build_problem("icqa", N=k, nq=n, na=n, p=12, model=model)


# -- item 2: the bounds engine's memory, auto's fallback, refute's engine and range --------------
def test_the_bounds_engine_works_within_its_memory(monkeypatch):
    """Breadth first, this problem's rounds took 1.3 GB (tracemalloc); the open boxes are now kept
    depth first and a round takes as many as fit in MEMORY."""
    problem = random_icqa(3, 5)
    monkeypatch.setattr(bounds, "MEMORY", 8 << 20)
    tracemalloc.start()
    try:
        result = verifier.run(problem, "bounds")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert result.verdict == "refuted"  # as enumeration finds
    assert verifier.run(problem, "exhaustive").verdict == "refuted"
    assert peak < 2 * bounds.MEMORY


@pytest.mark.parametrize("name, N, k", [("mqar", 4, 8), ("mqar", 4, 5), ("nearest_neighbour", 4, 6)])
def test_a_round_takes_one_box_when_the_open_boxes_fill_the_memory(monkeypatch, name, N, k):
    """At N = 64 the open boxes held 97 of the 128 MiB and a box needed 32: the run was refused mid-way.
    Open boxes that claim the whole MEMORY leave every round one box, decided beside them; the
    verdict and the counterexample are enumeration's."""
    problem = verifier.build_problem(name, N=N, p=16, k=k)
    expected = verifier.run(problem, "exhaustive")
    monkeypatch.setattr(bounds._Open, "nbytes", property(lambda self: bounds.MEMORY))
    result = verifier.run(problem, "bounds")
    assert result.engine_stats["beyond_memory"] > 0 and result.engine_stats["largest_round"] == 1
    assert result.verdict == expected.verdict
    assert [c.tokens for c in result.counterexamples[:1]] == [c.tokens for c in expected.counterexamples[:1]]


def test_a_box_that_does_not_fit_is_refused_and_auto_takes_the_next_engine(monkeypatch):
    problem = verifier.build_problem("idxl", N=6, p=12, sigma=64)
    assert auto(problem, RunOptions())[0].name == "bounds"
    monkeypatch.setattr(bounds, "MEMORY", 1024)
    why = ENGINES["bounds"].unsupported(problem, RunOptions())
    assert why is not None and why.startswith("one box of length 7 needs about") and "the engine works within" in why
    with pytest.raises(InputError, match="engine bounds cannot decide this problem: one box"):
        verifier.run(problem, "bounds")
    assert verifier.run(problem, "auto").engine == "lookup (auto)"  # the next candidate: one layer of lookups


def test_auto_falls_back_when_an_engine_refuses_its_memory_as_it_starts(monkeypatch):
    """The machine cannot spare the bounds engine's working set: it refuses (TooLarge) before it
    allocates, and auto runs the next engine, saying why."""
    problem = verifier.build_problem("idxl", N=6, p=12, sigma=64)
    monkeypatch.setattr(budget, "available_memory", lambda: int(1.2 * bounds.MEMORY))
    result = verifier.run(problem, "auto")
    assert result.verdict == "proved" and result.engine == "lookup (auto)"
    assert "bounds refused: the bounds engine's working set needs about" in result.engine_stats["auto"]
    assert "chosen by auto" in result.summary()


@pytest.mark.slow
def test_a_range_of_a_space_beyond_enumeration_is_enumerated(capsys):
    problem = verifier.build_problem("idxl", N=64, p=12)
    assert problem.task.total > 1 << 36
    engine, why = auto(problem, RunOptions(stop=4000))
    assert engine.name == "exhaustive" and "enumerating 4,000 inputs would take about" in why
    code = cli.main(["idxl", "--N", "64", "--p", "12", "--engine", "exhaustive", "--start", "1000", "--stop", "3000"])
    out = capsys.readouterr().out
    assert code == 3 and "2,000 of" in out and "the range 1000..3000 is part of" in out


def test_refute_searches_with_the_engine_and_range_given(capsys, tmp_path):
    path = tmp_path / "random.npz"
    task = make_task("icqa", 4, nq=30, na=30)
    assert task.total > 1 << 36
    verifier.save_model(random_model(task, 2, 4, "relu", np.random.default_rng(0)), path)
    args = ["refute", "icqa", "--N", "4", "--nq", "30", "--na", "30", "--p", "12", "--model", str(path)]
    code = cli.main(args + ["--method", "search", "--engine", "exhaustive", "--stop", "5000"])
    out = capsys.readouterr().out
    assert code == 1 and "REFUTED by search" in out and "engine=exhaustive," in out
    assert cli.main(args + ["--method", "dependent", "--engine", "smt"]) == 2
    assert "--engine, --start and --stop are the search's" in capsys.readouterr().err


# -- item 3: auto's choice, and deadlines inside enumeration chunks and SMT solves -------------
@pytest.mark.parametrize("N", [16, 18, 20])
def test_auto_chooses_the_same_engine_on_a_slower_machine(monkeypatch, N):
    """Every clock running 5 and 50 times slower (a loaded machine) changes no choice."""
    problem = verifier.build_problem("idxl", N=N, p=12)
    chosen = []
    for factor in (1, 5, 50):
        for name in ("perf_counter", "monotonic", "process_time", "time"):
            real = getattr(time, name)
            t0 = real()
            monkeypatch.setattr(time, name, lambda real=real, t0=t0, k=factor: t0 + k * (real() - t0))
        engine, why = auto(problem, RunOptions())
        monkeypatch.undo()
        chosen.append((engine.name, why))
    assert [name for name, _ in chosen] == [chosen[0][0]] * 3
    assert chosen == [chosen[0]] * 3  # and the estimate it prints


def test_enumeration_stops_inside_a_chunk_at_the_deadline():
    """One process (a range below PARALLEL_ABOVE): the deadline is polled before every batch, so a
    deadline that passes at the second poll stops the first chunk after one batch."""
    problem = verifier.build_problem("idxl", N=16, p=12)
    result = Exhaustive().run(problem, RunOptions(deadline=After(2), stop=200_000))
    assert result.status == "timeout" and 0 < result.covered < CHUNK
    resumed = Exhaustive().run(problem, RunOptions(start=result.covered, stop=result.covered + 10))
    assert resumed.status == "complete" and resumed.covered == 10


@pytest.mark.slow
def test_every_solve_gets_the_time_left(monkeypatch):
    """z3's timeout is set before each solve of a case, not once per case."""
    calls = []
    real_set, real_check = z3.Solver.set, z3.Solver.check
    monkeypatch.setattr(z3.Solver, "set", lambda self, *a, **k: (calls.append("set"), real_set(self, *a, **k))[1])
    monkeypatch.setattr(z3.Solver, "check", lambda self, *a: (calls.append("check"), real_check(self, *a))[1])
    result = verifier.prove("idxl", N=6, p=12, sigma=64, eta=1.0, engine="smt", max_counterexamples=3, timeout=600,
                            workers=1)  # the solves in this process, where `calls` sees them
    assert result.verdict == "refuted" and len(result.counterexamples) == 3
    assert calls.count("check") > 1
    assert all(calls[i - 1] == "set" for i, c in enumerate(calls) if c == "check")


# -- item 8: the deadline reaches what does not poll it ----------------------------------------
@pytest.mark.slow
def test_an_enforced_deadline_stops_a_python_loop_and_a_z3_solve():
    for work in (_busy, _hard_solve):
        t0 = time.monotonic()
        with pytest.raises(TimedOut):
            with Deadline(0.3).enforced():
                work(t0)
        assert time.monotonic() - t0 < 0.3 + budget.GRACE + 3  # not the 30 s the work would take


def test_a_deadline_that_fired_leaves_z3_usable():
    """The deadline interrupts z3's context, and z3 keeps an interrupt for good: before the fix every
    simplification after a timed-out run in the same process (a library user's next call, a check's
    next spec, the battery after a bounds timeout) came back unsimplified, so a formula's value at
    an input was no value."""
    with pytest.raises(TimedOut):
        with Deadline(0.05).enforced():
            _busy(time.monotonic())
    x = z3.BitVec("x", 8)
    assert z3.is_bv_value(z3.simplify(z3.substitute(3 * x + 1, (x, z3.BitVecVal(5, 8)))))


def _busy(t0: float) -> None:
    while time.monotonic() - t0 < 30:
        pass


def _hard_solve(t0: float) -> None:
    """Factor an 80-bit number by bit-vector multiplication, with no timeout (z3 takes minutes)."""
    x, y = z3.BitVecs("x y", 48)
    s = z3.SolverFor("QF_BV")
    s.add(z3.ZeroExt(48, x) * z3.ZeroExt(48, y) == 1099511627791 * 1099511627817, z3.UGT(x, 1), z3.UGT(y, 1))
    s.check()


@pytest.mark.slow
def test_a_construction_that_outlasts_the_timeout_gives_unknown(monkeypatch, capsys):
    def hang(*args, **kwargs):
        _busy(time.monotonic())
        raise AssertionError("the deadline did not stop the construction")
    monkeypatch.setitem(CONSTRUCTIONS, "index_lookup", dataclasses.replace(CONSTRUCTIONS["index_lookup"],
                                                                          builder=hang))
    t0 = time.monotonic()
    code = cli.main(["idxl", "--N", "8", "--p", "12", "--timeout", "0.5"])
    assert code == 3 and "timeout after 0.5 s before a verdict: unknown" in capsys.readouterr().err
    assert time.monotonic() - t0 < 0.5 + budget.GRACE + 5


def test_the_layer0_tables_and_the_bounds_engine_poll_the_deadline():
    problem = verifier.build_problem("idxl", N=64, p=12)
    q, fx = problem.generic().q, problem.arith
    head = q.layers[0].heads[0]
    with pytest.raises(TimedOut):
        class_table(fx, q.E, q.P, q.P_mask, head.W_Q, head.b_Q, After(0))
    result = ENGINES["bounds"].run(problem, RunOptions(deadline=After(1)))
    assert result.status == "timeout" and result.covered == 0


def test_a_synthesis_keeps_the_deadline(monkeypatch):
    task = make_task("icqa", 2)
    cert = find_certificate(task, 0)
    fx = make_format(None, N=2, p=8)
    monkeypatch.setattr(z3.Solver, "check", lambda self, *a: pytest.fail("a solve after the deadline"))
    s = synthesize(task, cert, 1, 1, fx, deadline=After(1))
    assert s.verdict == "unknown" and s.stats["reason"] == "timeout"


def test_a_size_in_a_message_is_never_zero():
    from verifier.support.budget import fmt_bytes
    assert [fmt_bytes(n) for n in (10, 300_000, 3 * 2 ** 20, 2 ** 29, 3 * 2 ** 30)] == \
        ["10 bytes", "293 KiB", "3 MiB", "0.5 GiB", "3.0 GiB"]
