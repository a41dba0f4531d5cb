"""Inputs drawn by the task (`Task.draw_inputs`: MQAR, nearest neighbour), and the sample check and
case sample that use them: every drawn row is an input in its box, the draws are uniform over the
inputs of a box, and the check of a proof evaluates inputs of every case, so a wrong proof of a
failing MQAR model is caught (before, at N >= 16 it evaluated none: issue 25)."""

import itertools
from collections import Counter

import numpy as np
import pytest

import verifier
from verifier.engines.base import EngineResult
from verifier.engines.bounds import Bounds
from verifier.runs.sample_check import CaseSample
from verifier.support.errors import InternalError
from verifier.tasks import make_task
from verifier.verdicts import Status

TASKS = [("mqar", 8, {"sigma": 6}), ("mqar", 16, {}), ("mqar", 32, {}), ("mqar", 64, {}),
         ("nearest_neighbour", 8, {"dim": 3}), ("nearest_neighbour", 32, {}), ("nearest_neighbour", 64, {})]


def _in_box(rows: np.ndarray, domains) -> bool:
    return rows.shape[1] == len(domains) and all(np.isin(rows[:, j], d).all() for j, d in enumerate(domains))


def _boxes(task, rng: np.random.Generator, most: int = 12):
    """Some of the task's cases, of its cases split by the nearest vector's position (boxes that fix
    a key to the query), and of those with random positions fixed to a token of an input of the box
    (as the bounds engine's branching fixes them) or to any token of their domain (boxes that may
    hold no input)."""
    cases, parts = list(task.cases()), list(task.answer_cases())
    picked = [cases[i].domains for i in rng.choice(len(cases), size=min(most, len(cases)), replace=False)]
    picked += [parts[i].domains for i in rng.choice(len(parts), size=min(most, len(parts)), replace=False)]
    out = list(picked)
    for doms in picked:
        doms = list(doms)
        member = task.draw_inputs(doms, rng, 1)[0]
        fixed = rng.choice(len(doms), size=len(doms) // 3, replace=False)
        out.append([np.array([member[j]]) if j in fixed else d for j, d in enumerate(doms)])
        out.append([d[rng.integers(len(d), size=1)] if j in fixed else d for j, d in enumerate(doms)])
    return out


@pytest.mark.parametrize("name, N, options", TASKS)
def test_every_drawn_row_is_an_input_in_its_box(name, N, options):
    task = make_task(name, N, **options)
    rng = np.random.default_rng(N)
    nonempty = 0
    for doms in _boxes(task, rng):
        rows = task.draw_inputs(doms, rng, 40)
        assert _in_box(rows, doms) and task.evaluate(rows)[1].all() and len(rows) <= 40
        nonempty += len(rows) == 40
    assert nonempty >= 24 + 12  # the cases, their parts and the boxes fixed to an input's tokens: all of them


def _uniformity(task, domains, n: int = 100_000) -> tuple[set, set, float]:
    """(the rows drawn, the inputs of the box by enumeration, chi-square per degree of freedom)."""
    grid = np.array(list(itertools.product(*domains)))
    inputs = {tuple(r) for r in grid[task.evaluate(grid)[1]].tolist()}
    rows = task.draw_inputs(domains, np.random.default_rng(1), n)
    seen = Counter(map(tuple, rows.tolist()))
    expected = len(rows) / len(inputs)
    chi2 = sum((seen.get(r, 0) - expected) ** 2 / expected for r in inputs)
    return set(seen), inputs, chi2 / (len(inputs) - 1)


A, LABELS = np.arange, np.arange(4, 6)


@pytest.mark.parametrize("name, N, options, domains", [
    ("mqar", 6, {"sigma": 4}, [A(4), LABELS] * 3 + [A(4)]),
    ("mqar", 6, {"sigma": 4}, [np.array([0, 1]), LABELS, np.array([1, 2, 3]), np.array([5]), A(4), LABELS,
                              A(4), LABELS, np.array([2])]),  # keys and queries of different domains
    ("mqar", 6, {"sigma": 4}, [np.array([0]), LABELS, A(4), LABELS, np.array([0, 1, 3]), LABELS,
                              np.array([0, 1, 2]), LABELS, np.array([1, 3])]),
    ("nearest_neighbour", 6, {}, [A(4), LABELS] * 3 + [A(4)]),  # the query free too
    ("nearest_neighbour", 6, {}, [np.array([0, 1]), LABELS, np.array([1, 2, 3]), np.array([5]), A(4), LABELS,
                                  A(4), LABELS, np.array([2])]),
    ("nearest_neighbour", 4, {"dim": 3}, [A(8), A(8, 10), A(8), np.array([9]), np.array([0, 5])]),
])
def test_the_draws_are_uniform_over_the_inputs_of_a_box(name, N, options, domains):
    """Against enumeration: the draws reach every input of the box and nothing else, each about
    as often: a chi-square per degree of freedom near 1 (a bias of 10% on half the inputs would add
    about 1 at these 100 to 1,000 draws an input)."""
    drawn, inputs, chi2 = _uniformity(make_task(name, N, **options), domains)
    assert drawn == inputs and 0.8 < chi2 < 1.2


def test_the_sample_check_of_a_proof_of_mqar_at_16_evaluates_inputs_of_every_case():
    result = verifier.prove("mqar", N=16, p=16)
    check = result.engine_stats["sample_check"]
    assert result.verdict == "proved" and check["cases"] == check["of_cases"] == 64 and check["inputs"] >= 64 * 8
    problem = verifier.build_problem("mqar", N=16, p=16)
    cases = set()
    for names, tokens in CaseSample(problem).batches():
        valid = problem.task.evaluate(tokens)[1]
        cases |= {names[r] for r in np.flatnonzero(valid)}
    assert cases == {case.name for case in problem.task.cases()}


@pytest.mark.slow
def test_a_wrong_proof_of_a_failing_mqar_model_is_caught(monkeypatch):
    """MQAR at N = 16 and p = 10 fails (the bounds engine finds it in a longer run); an engine that
    claimed a proof of it is contradicted by the sample check."""
    problem = verifier.build_problem("mqar", N=16, p=10)
    monkeypatch.setattr(Bounds, "run", lambda self, problem, opts: EngineResult(Status.COMPLETE, problem.task.total,
                                                                                []))
    with pytest.raises(InternalError, match=r"the proof of case k=\d+, query=[+-]+ is contradicted by the evaluator"):
        verifier.run(problem, "bounds")
