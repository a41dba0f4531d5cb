"""Chen and Zou 2024 (arXiv:2404.01601) rows of the errata, recomputed: each printed construction
decided in exact arithmetic (`verifier.exact`) and by the engines in FX, so that a change that
turns one of these findings into a false claim fails here.

* Lemma 3 (memorization): built in rationals, every sequence right with margin exactly 1/64; the
  engines prove it at p = 12 and find it wrong at p = 11 only by rounding.
* Theorem 5 (template matching): under the most charitable reading (`charitable`: W_C fitted by
  Lemma 3 on the template vectors) right on every sequence in exact arithmetic, at l = 3 and 4;
  fitted on one sequence per template (`sequence-fit`), or with the maps taken literally
  (`paper`), wrong in exact arithmetic (an input found by enumeration, confirmed by the engines at
  a p where nothing saturates); the literal maps' first counterexample at p = 12 fails only by
  saturation, and the trace says where.
* Theorem 3 (in-context QA): right in exact arithmetic on every input, margin exactly 3.
* Theorem 6 (in-context template matching): built under the charitable readings the text allows,
  wrong in exact arithmetic on every input (ties at the last token).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from verifier import exact
from verifier.constructions.blocks import constrained, lemma3_classifier
from verifier.model import is_exact
from verifier.runs.api import build_problem, prove


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


@pytest.mark.slow
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


def _layer2(problem, text: str) -> np.ndarray:
    return exact.read_state(problem.model, [problem.model.vocab.index(w) for w in text.split()])[-1]


@pytest.mark.parametrize("l", [3, 4])
def test_template_matching_charitable_is_right_in_exact_arithmetic(l):
    """Lemma 3's W_C fitted on the template vectors: every sequence of length l over 4 symbols right
    in exact arithmetic (l = 3: 64, l = 4: 256)."""
    problem = build_problem("template_matching", N=l, p=12, alphabet=4, variant="charitable")
    found = exact.search(problem)
    assert found.verdict == "proved" and found.right == found.covered == 4 ** l
    assert found.min_margin[0] > 0


def test_template_matching_charitable_differs_from_its_template_only_on_the_token_rows():
    """The text's slip: -I leaves (1 - c_i) x_i on the token rows (b b b: -26 e_b), so sequences of
    one template differ there, and only there; Lemma 3's W_C, fitted on the template vectors (token
    rows 0), puts no weight on them.  The positions stay one-hot (p'_i is in the spare rows), so
    layer 2's attention is the printed alpha."""
    problem = build_problem("template_matching", N=3, p=12, alphabet=4, variant="charitable")
    model, rows = problem.model, problem.model.residual_rows
    token = [i for i, name in enumerate(rows) if name.startswith("token")]
    aaa, bbb, ccd = (_layer2(problem, t) for t in ("a a a CLS", "b b b CLS", "c c d CLS"))
    assert list(bbb[token]) == [0, -26, 0, 0] and list(aaa[token]) == [-26, 0, 0, 0]
    assert list(ccd[token]) == [0, 0, -12, 0]
    others = [i for i in range(len(rows)) if i not in token]
    assert all(aaa[i] == bbb[i] for i in others)
    assert not np.any(np.asarray(model.readout.W_U, dtype=object)[:, token])
    assert [rows.index(f"P[{i}]") for i in range(4)] == [int(np.flatnonzero(model.P[i])[0]) for i in range(4)]
    assert [aaa[rows.index(f"P[{i}]")] for i in range(4)] == [9, 3, 1, 1]  # alpha's 3^(l-1-i), CLS's own 1
    assert [aaa[rows.index(f"TB[{i}]")] for i in range(4)] == [13, 13, 13, 0]


def test_template_matching_answers_do_not_depend_on_where_p_prime_lands():
    """Written into the P rows, as the printed W_V^(1) does, p'_i changes layer 2's attention (the
    positions are no longer one-hot, so it is not the printed alpha) but not the answers: the
    attention stays token-invariant, and Lemma 3 fitted on the template vectors of that build is
    right on every sequence too."""
    problem = build_problem("template_matching", N=3, p=12, alphabet=4, variant="charitable")
    model, task, rows = problem.model, problem.task, problem.model.residual_rows
    W_O = model.layers[0].W_O
    for i in range(4):  # layer 1's p'_i into P[i] instead of TB[i]
        W_O[rows.index(f"P[{i}]")] += W_O[rows.index(f"TB[{i}]")]
        W_O[rows.index(f"TB[{i}]")] = 0
    vectors = [exact.read_state(model, task.decode(int(task._offsets[t])))[-1] for t in range(task.num_classes)]
    for v in vectors:
        v[:4] = 0  # the token rows
    model.readout.W_U = lemma3_classifier(vectors).T
    assert _layer2(problem, "a a a CLS")[rows.index("P[0]")] != 9  # not alpha's 3^2 any more
    assert exact.search(problem).verdict == "proved"


@pytest.mark.parametrize("variant", ["paper", "sequence-fit"])
def test_template_matching_is_wrong_in_exact_arithmetic(variant):
    """Fitted on one sequence per template, or with the maps as printed: enumerate the 27 inputs in
    exact arithmetic; the first wrong one, b b b CLS, is confirmed by the engines at p = 24, where
    no value saturates, and labelled as wrong in exact arithmetic."""
    found = exact.search(_template_problem(12, variant))
    assert found.verdict == "refuted"
    index, outcome = found.wrong[0]
    assert outcome.exact and outcome.margin[1] < 0
    assert _template_problem(12, variant).task.render(outcome.tokens) == "b b b CLS"
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


@pytest.mark.slow
def test_icqa_is_right_in_exact_arithmetic_with_margin_3():
    problem = build_problem("icqa", N=3, p=12, nq=4, na=4)
    found = exact.search(problem)
    assert found.verdict == "proved" and found.covered == problem.task.total == 1728
    assert found.min_margin == (3, 3)


@pytest.mark.slow
def test_ictm_printed_ties_on_every_input():
    """Appendix 15 built as printed (alpha^(2) n x n): layer 3 reads the last l rows, which nothing
    writes, so every answer logit at the last token is exactly 0 -- a tie on each of the 648 inputs.
    With layer 3 on the template rows (charitable) it is right with 2 answers for 2 blocks, and
    ties on each of the 1,944 inputs with 3: the last token holds -sum_{t != r} gamma_t a_t, no
    answer reached it, so a_r ties with the answer no block has.  The corrected plan is right."""
    task_problem = dict(N=2, p=12, length=2)
    printed = exact.search(build_problem("ictm", variant="paper", **task_problem))
    assert printed.verdict == "refuted" and len(printed.wrong) == printed.total == 648
    assert all(o.reason == "tie" and o.decisions[0].scores == ((0, 0), (0, 0)) for _, o in printed.wrong)
    assert exact.search(build_problem("ictm", variant="charitable", **task_problem)).verdict == "proved"
    problem = build_problem("ictm", variant="charitable", na=3, **task_problem)
    three = exact.search(problem)
    assert len(three.wrong) == three.total == 1944 and all(o.reason == "tie" for _, o in three.wrong)
    task = problem.task
    for _, o in three.wrong[::97]:
        used = {int(a) - task.first_answer for a in o.tokens[task.block - 1::task.block][:2]}
        unused, = set(range(3)) - used
        assert set(o.decisions[0].tie) == {int(task.answer(np.array(o.tokens))), unused}
    assert exact.search(build_problem("ictm", na=3, **task_problem)).verdict == "proved"


@pytest.mark.slow
def test_ictm_literal_rectangular_identity_changes_no_verdict(monkeypatch):
    """W_QK^(1)'s lower-left block I_{(d'-d1) x d1}, read as 0, taken literally instead (source row
    d1 + j against target token j): charitable is still right with 2 answers, ties on every input
    with 3."""
    from verifier.constructions import ictm

    def literal(layout, content, mask):
        W = constrained(layout, content, mask)
        d1 = layout.sizes["token"]
        W[d1 + np.arange(d1), np.arange(d1)] += 1.0
        return W

    monkeypatch.setattr(ictm, "constrained", literal)
    two = exact.search(build_problem("ictm", N=2, p=12, length=2, variant="charitable"))
    three = exact.search(build_problem("ictm", N=2, p=12, length=2, na=3, variant="charitable"))
    assert two.verdict == "proved"
    assert len(three.wrong) == three.total == 1944 and all(o.reason == "tie" for _, o in three.wrong)
    # the block is in effect: it reaches the rows layer 3 reads as printed, which then are not all 0
    printed = exact.search(build_problem("ictm", N=2, p=12, length=2, variant="paper"))
    assert {o.reason for _, o in printed.wrong} == {"tie", "wrong"}


def test_ictm_charitable_counterexample_replays():
    """The engine's counterexample (FX(12, 6)) is the exact-arithmetic tie, replayed."""
    result = prove("ictm", N=2, p=12, length=2, na=3, variant="charitable")
    assert result.verdict == "refuted"
    c = result.counterexamples[0]
    why = exact.cause(build_problem("ictm", N=2, p=12, length=2, na=3, variant="charitable"), c.tokens)
    assert why.kind == "exact" and why.exact.reason == "tie" and c.produced.startswith("tie")


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
