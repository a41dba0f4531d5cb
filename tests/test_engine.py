"""The exhaustive engine: ranges, parallelism, limits, and agreement with the reference loop."""

import numpy as np
import pytest
from helpers import random_model
from reference import RefFX, ref_answer, ref_forward

import verifier
from verifier.tasks import IndexLookup


def test_split_ranges_cover_the_same_inputs():
    problem = verifier.build_problem("idxl", N=8, p=12)
    total = problem.task.total
    a = verifier.run(problem, start=0, stop=1000)
    b = verifier.run(problem, start=1000, stop=total)
    assert (a.verdict, b.verdict) == ("unknown", "unknown")  # a part is not a proof
    assert a.covered + b.covered == total
    assert "resume with --start" in a.reason


def test_resume_finds_the_later_counterexamples():
    problem = verifier.build_problem("idxl", N=8, p=12, eta=0.5)
    first = verifier.run(problem, max_counterexamples=4)
    resumed = verifier.run(problem, start=first.counterexamples[1].index + 1, max_counterexamples=2)
    assert [c.index for c in resumed.counterexamples] == [c.index for c in first.counterexamples[2:4]]


@pytest.mark.slow
@pytest.mark.parametrize("eta", [None, 1.0])
def test_parallel_and_serial_agree(eta):
    problem = verifier.build_problem("idxl", N=14, p=9, eta=eta)
    serial = verifier.run(problem, workers=1, max_counterexamples=3)
    parallel = verifier.run(problem, workers=2, max_counterexamples=3)
    assert serial.verdict == parallel.verdict
    assert [c.index for c in serial.counterexamples] == [c.index for c in parallel.counterexamples]
    assert serial.min_margin == parallel.min_margin and serial.covered == parallel.covered


@pytest.mark.slow
def test_timeout_gives_unknown_with_coverage():
    problem = verifier.build_problem("idxl", N=16, p=12, sigma=3)
    result = verifier.run(problem, "exhaustive", timeout=1.0)
    assert result.verdict == "unknown" and result.exit_code == 3
    assert 0 <= result.covered < result.total and "timeout" in result.reason


@pytest.mark.slow
def test_engine_matches_reference_loop_on_random_models():
    """Every failure the reference loop sees, the engine reports, and nothing else."""
    rng = np.random.default_rng(11)
    for trial in range(15):
        task = IndexLookup(3, 2)
        model = random_model(rng, task.vocab, task.max_len, C=2, readout="argmax", scale=2.0)
        p = int(rng.integers(4, 9))
        problem = verifier.build_problem("idxl", N=3, p=p, model=model)
        result = verifier.run(problem, max_counterexamples=task.total)
        ref = RefFX(p)
        want = []
        for batch in task.batches(0, task.total, 100):
            for idx, row, ans in zip(batch.index, batch.tokens, batch.expected):
                pred, tie = ref_answer(model, ref, ref_forward(model, ref, list(row))[0])
                if pred != ans or tie:
                    want.append(int(idx))
        assert [c.index for c in result.counterexamples] == want, trial
        assert result.verdict == ("refuted" if want else "proved")
