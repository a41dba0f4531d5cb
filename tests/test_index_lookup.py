"""Index lookup (Bhattamishra et al. 2024, Theorem 1): the task's ground truth, proofs, and weakened constructions."""

import itertools

import numpy as np
import pytest
from reference import RefFX, ref_answer, ref_forward

import verifier
from verifier.constructions.index_lookup import build, paper_eta
from verifier.constructions.sign_vectors import hadamard, max_offdiag, sign_vectors
from verifier.tasks import IndexLookup


@pytest.mark.parametrize("N,sigma", [(1, 2), (3, 2), (4, 3), (5, 2)])
def test_enumeration_is_every_input_once_in_order(N, sigma):
    task = IndexLookup(N, sigma)
    brute = [list(s) + [sigma + p - 1] for n in range(1, N + 1) for p in range(1, n + 1)
             for s in itertools.product(range(sigma), repeat=n)]
    got = [list(row) for b in task.batches(0, task.total, 7) for row in b.tokens]
    assert got == brute and task.total == len(brute)
    answers = [int(a) for b in task.batches(0, task.total, 5) for a in b.expected]
    assert answers == [row[row[-1] - sigma] for row in brute]
    for i in (0, task.total // 2, task.total - 1):
        assert list(task.decode(i)) == brute[i]
        assert task.answer(task.decode(i)) == brute[i][brute[i][-1] - sigma]


def test_answer_rejects_malformed_inputs():
    task = IndexLookup(3)
    with pytest.raises(verifier.InputError):
        task.answer(np.array([0, 1, 2 + 3]))  # index 3 > n = 2


def test_sign_vectors():
    assert (hadamard(8) @ hadamard(8).T == 8 * np.eye(8)).all()
    sv = sign_vectors(16)
    assert sv.kind == "hadamard" and sv.T.shape == (16, 16) and sv.ok
    big = sign_vectors(600, seed=1)  # random signs are narrower than Hadamard (1024) here
    assert big.kind == "random" and big.T.shape[1] < 600 and big.ok
    assert max_offdiag(big.T) <= 0.25
    narrow = sign_vectors(64, k=10)
    assert not narrow.ok  # too narrow: reported, not hidden


@pytest.mark.parametrize("N,p,sigma,kw", [(4, 8, 2, {}), (6, 10, 3, {}), (5, 12, 2, {"rounding": "nearest"}),
                                          (5, 9, 4, {"accumulate": "wide"}), (6, 10, 2, {"rounding": "zero"}),
                                          (8, 12, 2, {"overflow": "error"})])
def test_construction_is_proved(N, p, sigma, kw):
    result = verifier.prove("idxl", N=N, p=p, sigma=sigma, **kw)
    assert result.verdict == "proved", result.summary()
    assert result.covered == result.total == IndexLookup(N, sigma).total
    assert result.min_margin is not None and result.min_margin > 0


@pytest.mark.slow
def test_proof_agrees_with_reference_loop_on_every_input():
    model, fx = build(4, sigma=3), RefFX(8)
    assert verifier.prove("idxl", N=4, p=8, sigma=3).verdict == "proved"
    task = IndexLookup(4, 3)
    for batch in task.batches(0, task.total, 1000):
        for row, want in zip(batch.tokens, batch.expected):
            assert ref_answer(model, fx, ref_forward(model, fx, list(row))[0]) == (want, False)


def _really_fails(problem, cex) -> bool:
    """Independent check: the reference loop gets this input wrong (or ties, or overflows)."""
    fx = problem.arith
    ref = RefFX(fx.p, fx.f, fx.rounding, fx.overflow, fx.accumulate)
    y, ovf = ref_forward(problem.model, ref, cex.tokens)
    pred, tie = ref_answer(problem.model, ref, y)
    truth = cex.tokens[cex.tokens[-1] - problem.task.sigma]
    return pred != truth or tie or (ovf and fx.overflow == "error")


@pytest.mark.parametrize("weaken", ["small_p", "small_eta", "corrupt_T", "narrow_k"])
def test_weakened_constructions_are_refuted_by_replayed_counterexamples(weaken):
    N = 8
    if weaken == "small_p":
        problem = verifier.build_problem("idxl", N=N, p=4)
    elif weaken == "small_eta":
        problem = verifier.build_problem("idxl", N=N, p=12, eta=0.5)
    elif weaken == "narrow_k":
        problem = verifier.build_problem("idxl", N=N, p=12, k=2)
    else:
        model = build(N)
        model.P[[0, 1]] = model.P[[1, 0]]  # positions 1 and 2 swap their T vectors
        problem = verifier.build_problem("idxl", N=N, p=12, model=model)
    result = verifier.run(problem, max_counterexamples=3)
    assert result.verdict == "refuted" and result.exit_code == 1
    assert 1 <= len(result.counterexamples) <= 3
    for cex in result.counterexamples:
        assert _really_fails(problem, cex), cex
        assert cex.trace and "readout.scores" in cex.trace
    indices = [c.index for c in result.counterexamples]
    assert indices == sorted(set(indices))


def test_default_eta_is_the_paper_rule():
    assert build(16).info["eta"] == pytest.approx(2 * np.log(48))
    assert paper_eta(16) == pytest.approx(7.7424, abs=1e-4)


def test_precision_frontier_small():
    from verifier.runs.sweep import frontier
    fr = frontier("idxl", [2, 4, 8], [3, 4, 5, 6, 7, 8])
    for row in fr.rows:
        assert row.p_star is not None
        assert all(row.verdicts[p] == "proved" for p in row.verdicts if p >= row.p_star)
        if row.p_star > 3:
            assert row.verdicts[row.p_star - 1] != "proved" and row.ruled_out_by
    assert fr.slope is not None
