"""The aggregate engine (verifier/engines/aggregate.py) against enumeration: the constructions of
equality and disjointness (Bhattamishra et al. 2024, arXiv:2406.09347, Theorems 6 and 13) and
random perturbations of them, in every rounding and accumulation; the feature sums against the
tasks' ground truth; a wrong block structure caught; the models it declines."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from verifier.arithmetic import ACCUMULATES, ROUNDINGS, FixedPoint
from verifier.engines import ENGINES, RunOptions, aggregate, candidates
from verifier.engines.aggregate import Aggregate
from verifier.engines.exhaustive import Exhaustive
from verifier.floats import FloatArith, float_format
from verifier.runs.api import build_problem
from verifier.support.errors import InternalError
from verifier.tasks import make_task

ALL = RunOptions(max_counterexamples=1 << 30)


def _agree(problem) -> str:
    """Both engines on the problem: the same verdict and smallest margin; every failure the
    aggregate engine reports is one enumeration found.  Returns the verdict."""
    mine, theirs = Aggregate().run(problem, ALL), Exhaustive().run(problem, ALL)
    assert mine.covered == theirs.covered == problem.task.total
    assert bool(mine.found) == bool(theirs.found), (len(mine.found), len(theirs.found))
    assert {f.index for f in mine.found} <= {f.index for f in theirs.found}
    assert mine.min_margin == pytest.approx(theirs.min_margin)
    return "refuted" if theirs.found else "proved"


@pytest.mark.parametrize("task,N,ps", [("equality", 8, (4, 5, 6, 8)), ("equality", 12, (6, 7, 8)),
                                       ("disjointness", 8, (8, 9, 10)), ("disjointness", 10, (6, 8, 10, 12))])
def test_the_constructions_agree_with_enumeration(task, N, ps):
    verdicts = {_agree(build_problem(task, N=N, p=p)) for p in ps}
    assert verdicts == {"proved", "refuted"}  # the p range crosses the frontier: both kinds are compared


def _perturbed(problem, rng: np.random.Generator):
    """The construction with noise on every map but the second layer's query (zero: it stays an
    average), in a random fixed-point format: the first layer local or not, the sums varied."""
    scale = float(rng.choice([0.02, 0.2, 1.0]))

    def noise(name: str, w: np.ndarray) -> np.ndarray:
        if name.startswith("L1.H") and (name.endswith("W_Q") or name.endswith("b_Q")):
            return w
        w = np.asarray(w, dtype=np.float64)
        return w + rng.normal(0, scale * (np.abs(w).max(initial=0) + 0.1), size=w.shape) * (rng.random(w.shape) < 0.3)

    p = int(rng.integers(5, 11))
    arith = FixedPoint(p, int(rng.integers(1, p)), str(rng.choice(ROUNDINGS)), "saturate", str(rng.choice(ACCUMULATES)))
    return replace(problem, model=problem.model.map_arrays(noise), arith=arith)


@pytest.mark.parametrize("seed", range(12))
def test_random_models_of_the_shape_agree_with_enumeration(seed):
    rng = np.random.default_rng(seed)
    task, N = [("equality", 6), ("equality", 8), ("disjointness", 6), ("disjointness", 8)][seed % 4]
    _agree(_perturbed(build_problem(task, N=N, p=10), rng))


@pytest.mark.parametrize("task,N,options", [("equality", 10, {}), ("disjointness", 10, {}),
                                            ("sparse_threshold", 9, {"s": 3, "instance_seed": 4}),
                                            ("sparse_threshold", 8, {"s": 2, "shared_g": True})])
def test_the_feature_sum_is_the_ground_truth(task, N, options):
    t = make_task(task, N, **options)
    fs = t.feature_sum()
    tokens = np.array([t.decode(i) for i in range(t.total)])
    total = np.full(len(tokens), fs.base)
    for positions, table in fs.features:
        total += table[tuple(tokens[:, list(positions)].T)]
    answers, valid = t.evaluate(tokens)
    assert valid.all() and np.array_equal(fs.answer(total), answers)


def test_wrong_blocks_are_an_internal_error(monkeypatch):
    """Blocks that leave out a key the first layer reads compose a wrong first-layer output: the
    witnesses evaluated from their tokens alone disagree, and no verdict is given."""
    problem = build_problem("equality", N=8, p=8)
    first = problem.model.layers[0]
    uniform = replace(first, heads=[replace(h, W_Q=np.zeros_like(h.W_Q), b_Q=None) for h in first.heads])
    problem = replace(problem, model=replace(problem.model, layers=[uniform, problem.model.layers[1]]))
    assert Aggregate().run(problem, ALL).stats["blocks"] == 1  # the first layer averages every bit
    pairs = np.eye(8, k=4, dtype=bool) | np.eye(8, k=-4, dtype=bool)  # the construction's blocks {i, i + N/2}
    monkeypatch.setattr(aggregate, "_may_weigh", lambda ev, domains, opts: pairs)
    with pytest.raises(InternalError, match="blocks are wrong"):
        Aggregate().run(problem, ALL)


def test_auto_takes_it_for_equality_out_of_enumeration_reach():
    problem = build_problem("equality", N=64, p=12)
    engine, why = candidates(problem, RunOptions())[0]
    assert engine is ENGINES["aggregate"] and "sum of features" in why
    result = engine.run(problem, RunOptions())
    assert result.covered == problem.task.total and not result.found


def test_what_it_declines():
    problem = build_problem("equality", N=8, p=8)
    engine = Aggregate()
    assert engine.unsupported(problem, RunOptions()) is None
    assert "overflow = saturate" in engine.unsupported(replace(problem, arith=FixedPoint(8, 4, "floor", "error")),
                                                       RunOptions())
    bf16 = FloatArith(float_format("bf16"), float_format("fp32"), "nearest", "saturate")
    assert "float format" in engine.unsupported(replace(problem, arith=bf16), RunOptions())
    layer = problem.model.layers[1]
    reads = replace(layer, heads=[replace(h, W_Q=np.ones_like(h.W_Q), W_K=np.ones_like(h.W_K)) for h in layer.heads])
    model = replace(problem.model, layers=[problem.model.layers[0], reads])
    assert "same for every key" in engine.unsupported(replace(problem, model=model), RunOptions())
    assert "two softmax layers" in engine.unsupported(build_problem("index_lookup", N=4, p=8), RunOptions())
    assert "--start/--stop" in engine.unsupported(problem, RunOptions(start=3))
