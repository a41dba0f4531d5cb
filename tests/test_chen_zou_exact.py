"""Chen and Zou 2024 (arXiv:2404.01601) rows of the errata, recomputed: each printed construction
decided in exact arithmetic (`verifier.exact`) and by the engines in FX, so that a change that
turns one of these findings into a false claim fails here.

* Lemma 3 (memorization): built in rationals, every sequence right with margin exactly 1/64; the
  engines prove it at p = 12 and find it wrong at p = 11 only by rounding.
* Theorem 5 (template matching): the printed construction is wrong in exact arithmetic (an input
  found by enumeration, confirmed by the engines at a p where nothing saturates), also under the
  charitable reading; the engines' first counterexample at p = 12 fails only by saturation, and
  the trace says where.
* Theorem 3 (in-context QA): right in exact arithmetic on every input, margin exactly 3.
* Theorem 6 (in-context template matching): the printed construction cannot be built, for the
  reason quoted from the text.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from verifier import exact
from verifier.api import build_problem, prove
from verifier.constructions import CONSTRUCTIONS
from verifier.constructions.blocks import lemma3_classifier
from verifier.errors import UnbuildableError
from verifier.model import is_exact


def test_lemma3_is_built_in_rationals_and_labels_every_vector():
    rng = np.random.default_rng(0)
    V = rng.integers(-3, 4, size=(12, 5)).astype(float)
    W = lemma3_classifier(V)
    assert is_exact(W)
    scores = np.array([[sum((Fraction(v) * w for v, w in zip(row, col)), Fraction(0)) for col in W.T] for row in V],
                      dtype=object)
    for i, row in enumerate(scores):
        assert all(row[i] > row[j] for j in range(len(row)) if j != i)


def test_memorization_lemma3_margin_is_exactly_one_64th():
    """Lemma 3's classifier of the printed memorization construction, in exact arithmetic: all 64
    sequences of length 3 over 4 tokens right, the smallest margin exactly 1/64."""
    problem = build_problem("memorization", N=3, p=12, alphabet=4, variant="paper")
    assert is_exact(problem.model.readout.W_U)
    found = exact.search(problem)
    assert found.verdict == "proved" and found.right == found.covered == 64
    assert found.min_margin == (Fraction(1, 64), Fraction(1, 64))


def test_memorization_lemma3_needs_p12_and_fails_below_by_rounding_only():
    proved = prove("memorization", N=3, p=12, alphabet=4, variant="paper")
    assert proved.verdict == "proved"
    refuted = prove("memorization", N=3, p=11, alphabet=4, variant="paper")
    assert refuted.verdict == "refuted"
    problem = build_problem("memorization", N=3, p=11, alphabet=4, variant="paper")
    why = exact.cause(problem, refuted.counterexamples[0].tokens)
    assert why.kind == "rounding" and why.exact.verdict == "right"


def _template_problem(p: int, variant: str = "paper"):
    return build_problem("template_matching", N=3, p=p, variant=variant)


@pytest.mark.parametrize("variant", ["paper", "charitable"])
def test_template_matching_is_wrong_in_exact_arithmetic(variant):
    """Enumerate the 27 inputs in exact arithmetic; the first wrong one is confirmed by the engines
    at p = 24, where no value saturates, and labelled as wrong in exact arithmetic."""
    found = exact.search(_template_problem(12, variant))
    assert found.verdict == "refuted"
    index, outcome = found.wrong[0]
    assert outcome.exact and outcome.margin[1] < 0
    problem = _template_problem(24, variant)
    result = prove("template_matching", N=3, p=24, variant=variant, max_counterexamples=30)
    assert index in [c.index for c in result.counterexamples]
    why = exact.cause(problem, outcome.tokens)
    assert why.kind == "exact" and not why.saturated_at


def test_template_matching_counterexample_at_p12_is_a_saturation():
    """The engines' first counterexample at p = 12 is right in exact arithmetic: it fails only
    because values saturate, and the counterexample says where (under overflow = saturate)."""
    result = prove("template_matching", N=3, p=12, variant="paper")
    c = result.counterexamples[0]
    assert c.saturated_at and not c.overflow_at
    assert "values saturated at" in result.summary()
    why = exact.cause(_template_problem(12), c.tokens)
    assert why.kind == "saturation" and why.exact.verdict == "right"
    assert why.saturated_at == c.saturated_at


def test_icqa_is_right_in_exact_arithmetic_with_margin_3():
    problem = build_problem("icqa", N=3, p=12, nq=4, na=4)
    found = exact.search(problem)
    assert found.verdict == "proved" and found.covered == problem.task.total == 1728
    assert found.min_margin == (3, 3)


def test_ictm_printed_cannot_be_built_for_the_quoted_reason():
    task_problem = dict(N=2, p=12, length=2)
    with pytest.raises(UnbuildableError, match=r"alpha\^\(2\) is not n x n as printed"):
        build_problem("ictm", variant="paper", **task_problem)
    reason = CONSTRUCTIONS["ictm"].unbuildable["paper"]
    assert "d = d1 + d2 + 1" in reason and "infinity" not in reason
    assert exact.search(build_problem("ictm", **task_problem)).verdict == "proved"


def test_template_matching_charitable_layers_are_separable():
    """What fails is the proof's classifier step, not the two printed layers: under the charitable
    reading their outputs are linearly separable by template -- a perceptron in exact integers
    finds a readout, and exact arithmetic confirms it right on every input."""
    problem = _template_problem(12, "charitable")
    task = problem.task
    data = [(exact.read_state(problem.model, t)[-1], int(y))
            for b in task.batches(0, task.total, task.total) for t, y in zip(b.tokens, b.expected)]
    W = np.zeros((task.num_classes, len(data[0][0])), dtype=object)
    for _ in range(200):
        mistakes = 0
        for x, y in data:
            s = W @ x
            rival = max((j for j in range(task.num_classes) if j != y), key=lambda j: s[j])
            if s[y] <= s[rival]:
                W[y] += x
                W[rival] -= x
                mistakes += 1
        if not mistakes:
            break
    assert not mistakes
    problem.model.readout.W_U = W
    assert exact.search(problem).verdict == "proved"


def test_verify_exact_command(capsys):
    """`verify exact` prints the verdict in exact arithmetic and exits 1 when an input is wrong,
    0 when every input is right, 2 on bad input."""
    import json
    import cli
    code = cli.main(["exact", "template_matching", "--N", "3", "--variant", "paper", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 1 and doc["verdict"] == "refuted" and doc["covered"] == doc["total"] == 27
    assert doc["wrong"][0]["verdict"] == "wrong" and doc["wrong"][0]["exact"]
    code = cli.main(["exact", "memorization", "--N", "3", "--alphabet", "4", "--variant", "paper"])
    out = capsys.readouterr().out
    assert code == 0 and out.startswith("PROVED in exact arithmetic") and "min margin  1/64 (exact)" in out
    assert cli.main(["exact", "icqa", "--N", "3", "--stop", "5000"]) == 2
    assert "is not inside" in capsys.readouterr().err
