"""The errata (`verify errata`, `verifier.errata`): every row's class, recomputed.

Each row is decided by the report (exact arithmetic, the paper's precision model, binary fixed
point); this file checks the class it gives against the audited one, and recomputes the evidence
the class rests on apart from the report -- the engine runs in the paper's grid and in FX, and each
counterexample the row shows, judged again in exact arithmetic (`exact.check`, `exact.cause`) --
so that a change that turns a row into a false claim fails here.  The row f2-n16 enumerates
65,536 inputs twice and is marked slow; the spec equality-paper-N16-b2-Kc1-proved and
equality-paper-N16-p12-proved decide the same runs in CI.
"""

from __future__ import annotations

import json
from fractions import Fraction

import pytest

import verifier
from cli import main
from verifier import errata, exact
from verifier.errata import CLAIMS, Finding

F = Finding
AUDITED = {  # the class each row must get
    "f2-n6": F.QUANTIZATION, "f2-n12": F.QUANTIZATION, "f2-n16": F.UNDERSPECIFIED,
    "f3-disjointness": F.UNDERSPECIFIED, "f3-shared-g": F.UNDERSPECIFIED, "f3-g-by-position": F.CANNOT_BE_BUILT,
    "g2-nearest-neighbour": F.UNDERSPECIFIED, "g2-key-2.3": F.TYPO_CORRECTED, "g2-mqar": F.UNDERSPECIFIED,
    "c2-index-lookup": F.TYPO_CORRECTED, "lemma3-memorization": F.UNDERSPECIFIED, "icqa": F.TYPO_CORRECTED,
    "template-matching": F.UNDERSPECIFIED, "ictm": F.WRONG_IN_EXACT, "sht-d2-spacing": F.UNVERIFIED,
}
SLOW = {"f2-n16"}
RUNNER = errata.Runner()
_ROWS: dict = {}


def row(key: str) -> errata.Row:
    if key not in _ROWS:
        _ROWS[key] = errata.decide(errata.select([key])[0], 12, RUNNER)
    return _ROWS[key]


def keys():
    return [pytest.param(c.key, marks=pytest.mark.slow) if c.key in SLOW else c.key for c in CLAIMS]


def _problem(claim, variant=None, **arith):
    return verifier.build_problem(claim.task, N=claim.N, variant=variant or claim.variant, **arith, **claim.options)


def _arith(spec: str) -> dict:
    kind, _, value = spec.partition(":")
    return {"p": int(value)} if kind == "fx" else {"arith": spec}


def test_every_row_quotes_the_paper_and_says_its_reading():
    assert [c.key for c in CLAIMS] == list(AUDITED)
    for c in CLAIMS:
        assert c.quote and c.reading and c.where
        if c.transcribed:
            assert c.quote.startswith("not the paper's text") and c.paper.arxiv == "2402.09268"


@pytest.mark.slow
@pytest.mark.parametrize("key", keys())
def test_the_class_is_the_audited_one_and_follows_from_the_evidence(key):
    r = row(key)
    assert r.finding is AUDITED[key]
    assert errata.classify(r.claim, r.unbuildable, r.exact[0] if r.exact else None, r.paper_model,
                           r.binary) is r.finding
    says = " ".join([r.verdict, *r.notes])
    assert ("fails as printed" in says) == r.finding.fails_as_printed
    if r.finding.fails_as_printed:  # only where the exact or the paper-grid evidence holds
        ex = r.exact[0]
        assert ex.wrong is not None or (ex.right_everywhere and r.paper_model.verdict == "fails")
    if r.finding is F.QUANTIZATION:
        assert r.paper_model.verdict == "right" and r.binary[0].failure.cause in ("rounding", "saturation")
    if r.finding in (F.UNDERSPECIFIED, F.TYPO_CORRECTED):  # right in every check at the report's p
        assert r.exact[0].wrong is None and r.binary[0].verdict == "proved"
        assert r.paper_model.verdict in ("right", "none stated")


@pytest.mark.slow
@pytest.mark.parametrize("key", keys())
def test_the_engine_runs_are_recomputed(key):
    """The paper-grid and FX verdicts of the row, decided again by `verifier.prove`."""
    r = row(key)
    claim = r.claim
    runs = [] if r.paper_model is None else r.paper_model.runs
    for run in runs + [b for b in r.binary if b.note == ""]:
        result = verifier.run(_problem(claim, **_arith(run.spec)), "exhaustive")
        assert result.verdict == run.verdict, run.name
        if result.counterexamples:
            assert result.counterexamples[0].input == run.failure.input


@pytest.mark.slow
@pytest.mark.parametrize("key", keys())
def test_the_counterexamples_fail_for_the_stated_reason(key):
    r = row(key)
    claim = r.claim
    p = claim.p or 12
    for ex in r.exact:
        fx = _problem(claim, ex.variant, p=p)
        for d in ex.decided + ([ex.wrong] if ex.wrong else []):
            assert exact.check(fx, d.tokens).verdict == d.exact
    runs = ([] if r.paper_model is None else r.paper_model.runs) + [b for b in r.binary if b.note == ""]
    for run in runs:
        if run.failure is not None:
            why = exact.cause(_problem(claim, **_arith(run.spec)), run.failure.tokens)
            assert why.kind == run.failure.cause, run.name
    if r.shown is not None:
        assert r.shown.exact == "wrong" or r.shown.cause in ("rounding", "saturation")


def test_f2_fails_only_in_binary_fixed_point_with_an_unrounded_threshold():
    """F.2 at N = 6: right on all 64 inputs in exact arithmetic and on the B.2 grid (1/N a grid
    point); FX(12, 6) fails by rounding alone, and is right with 1/N rounded like the weights."""
    r = row("f2-n6")
    assert r.exact[0].right_everywhere and r.exact[0].checked == 64
    assert r.paper_model.kc == 1 and r.paper_model.runs[-1].verdict == "proved"
    fx, rounded = r.binary
    assert fx.failure.input == "0 0 0 0 0 1" and fx.failure.cause == "rounding" and fx.failure.exact == "right"
    assert rounded.verdict == "proved" and "rounded like every parameter (to 5/32)" in rounded.note


@pytest.mark.slow
def test_g2_with_its_scaling_is_right_and_its_former_counterexamples_too():
    r = row("g2-nearest-neighbour")
    assert r.exact[0].right_everywhere and r.exact[0].checked == 1216
    former, = r.exact[0].decided
    assert former.input == "++ 1 +- 0 ++" and former.exact == "right"
    assert [x.verdict for x in r.paper_model.runs] == ["refuted", "refuted", "proved"]  # Kc = 3
    assert all(x.failure.cause == "saturation" for x in r.paper_model.runs[:2])
    mqar = row("g2-mqar")
    assert mqar.exact[0].decided[0].input == "++ 1 +- 0 -+ 0 ++" and mqar.exact[0].decided[0].exact == "right"


@pytest.mark.slow
def test_the_key_minus_2_3_changes_no_answer():
    """Both readings are right on every input in exact arithmetic: the printed -2.3 changes no
    answer; and the literal build does reach -2.3 (tests/test_printed.py checks the key)."""
    r = row("g2-key-2.3")
    literal, paper = r.exact
    assert (literal.variant, paper.variant) == ("literal", "paper")
    assert literal.right_everywhere and paper.right_everywhere and literal.checked == paper.checked == 1216
    assert r.binary[0].verdict == "proved"


@pytest.mark.slow
def test_lemma3_is_right_in_exact_arithmetic_and_needs_p12():
    r = row("lemma3-memorization")
    ex = r.exact[0]
    assert ex.right_everywhere and ex.checked == 64 and ex.min_margin == "1/64 (exact)"
    former, = ex.decided
    assert former.input == "d b b CLS" and former.exact == "right"
    at12, at11 = r.binary
    assert at12.verdict == "proved" and at11.verdict == "refuted" and at11.failure.cause == "rounding"
    assert r.paper_model.verdict == "none stated"


def test_template_matching_is_right_under_the_charitable_reading_and_wrong_fitted_on_one_sequence():
    """W_C fitted on the template vectors: right on all 64 sequences in exact arithmetic and proved
    in FX(12, 6); fitted on one sequence per template, or with the maps taken literally, wrong in
    exact arithmetic from b b b CLS -- readings the row shows beside it, not its class."""
    r = row("template-matching")
    charitable, fitted, literal = r.exact
    assert charitable.variant == "charitable" and charitable.right_everywhere and charitable.checked == 64
    assert r.binary[0].verdict == "proved" and r.shown is None
    assert (fitted.variant, fitted.wrong.input, fitted.wrong_count) == ("sequence-fit", "b b b CLS", 21)
    assert (literal.variant, literal.wrong.input, literal.wrong_count) == ("paper", "b b b CLS", 44)
    assert "b b b CLS" in r.claim.slip and "changes no answer" in " ".join(r.notes)


def test_template_matching_literal_fx_failure_at_p12_is_a_saturation():
    """The former table's counterexample, a a a CLS, with the maps taken literally: right in exact
    arithmetic, fails in FX(12, 6) because values saturate."""
    problem = _problem(row("template-matching").claim, "paper", p=12)
    result = verifier.run(problem, "exhaustive")
    c = result.counterexamples[0]
    assert problem.task.render(c.tokens) == "a a a CLS"
    why = exact.cause(problem, c.tokens)
    assert why.kind == "saturation" and why.exact.verdict == "right" and why.saturated_at


@pytest.mark.slow
def test_ictm_is_wrong_in_exact_arithmetic_on_every_input():
    """Built under the charitable readings, with layer 3 on the template rows: all 1,944 inputs
    (3 answers, 2 blocks) tie in exact arithmetic; as printed (the last l rows) too; the FX
    counterexample is the same tie, wrong in exact arithmetic."""
    r = row("ictm")
    charitable, printed = r.exact
    assert charitable.variant == "charitable" and printed.variant == "paper"
    assert charitable.wrong_count == charitable.checked == printed.wrong_count == 1944
    assert "tie(a0, a2)" in charitable.wrong.text and r.unbuildable is None
    assert r.binary[0].failure.cause == "exact" and r.shown.exact == "wrong"
    assert "R^{n x n}" in r.claim.typo and "sufficiently large negative value" in r.claim.open[0]


def test_the_transcribed_row_says_so_and_cites_its_paper():
    r = row("sht-d2-spacing")
    assert r.verdict.startswith("as transcribed, unverified") and "was not read" in r.verdict
    assert r.paper_model.verdict == "not read" and r.exact[0].wrong is not None
    assert "2402.09268" in r.claim.paper.cite(r.claim.where) and "2408.14332" not in json.dumps(errata.to_json([r]))


def test_the_unbuildable_row_gives_the_reason_the_text_supports():
    f3 = row("f3-g-by-position").unbuildable
    assert "does not say how that network would compute different g" in f3 and "identity" not in f3


def _evidence(exact_verdict="proved", every=True, wrong=None, model="right", binary="proved", cause=None):
    ex = errata.Exact("paper", "FX(12, 6)", every, exact_verdict, 4, 4, wrong=wrong)
    runs = {"right": [errata.Run("b2:1", "Kc = 1", "", "proved", 4, 4)],
            "fails": [errata.Run(f"b2:{k}", f"Kc = {k}", "", "refuted", 1, 4) for k in errata.KCS],
            "none stated": []}[model]
    failure = cause and errata.Decided("x", [0], "right", "", "1", cause, "FX(12, 6)", "y")
    return ex, errata.PaperModel("", True, runs), [errata.Run("fx:12", "FX(12, 6)", "", binary, 1, 4, failure)]


def test_classify_takes_the_strongest_finding_the_evidence_supports():
    claim = CLAIMS[0]  # open constants and a typo
    plain = errata.Claim("k", "c", "w", "q", "r", "equality", 6)
    wrong = errata.Decided("x", [0], "wrong", "")
    assert errata.classify(claim, None, *_evidence(exact_verdict="refuted", wrong=wrong)) is F.WRONG_IN_EXACT
    assert errata.classify(claim, None, *_evidence(model="fails")) is F.FAILS_IN_PAPER_PRECISION
    assert errata.classify(claim, None, *_evidence(binary="refuted", cause="rounding")) is F.QUANTIZATION
    assert errata.classify(claim, None, *_evidence()) is F.UNDERSPECIFIED
    # right on the inputs shown only: no claim on the paper's model, so an FX failure is no finding
    assert errata.classify(claim, None, *_evidence(every=False, exact_verdict="unknown", model="none stated",
                                                   binary="refuted", cause="rounding")) is F.UNDERSPECIFIED
    # a grid failure at every Kc tried, but exact arithmetic undecided: not "fails as printed"
    assert errata.classify(claim, None, *_evidence(exact_verdict="unknown", model="fails")) is F.UNDERSPECIFIED
    assert errata.classify(errata.Claim("k", "c", "w", "q", "r", "equality", 6, typo="t"), None,
                           *_evidence()) is F.TYPO_CORRECTED
    assert errata.classify(plain, "why", None, None, []) is F.CANNOT_BE_BUILT
    transcribed = errata.Claim("k", "c", "w", "q", "r", "equality", 6, transcribed=True)
    assert errata.classify(transcribed, None, *_evidence(exact_verdict="refuted", wrong=wrong)) is F.UNVERIFIED
    with pytest.raises(verifier.InternalError, match="supports no finding"):
        errata.classify(plain, None, *_evidence())


@pytest.mark.slow
def test_verify_errata_prints_the_class_quote_and_reading(capsys, tmp_path):
    assert main(["errata", "--row", "f2-n6", "--row", "f3-g-by-position", "--json", "--dump", str(tmp_path)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [d["row"] for d in doc] == ["f2-n6", "f3-g-by-position"]
    f2, f3 = doc
    assert f2["class"] == F.QUANTIZATION.value and not f2["fails_as_printed"]
    assert f2["quote"].startswith("\"If Att(X)_N^(2) >= 1/N") and "1/N exact" in f2["reading"]
    assert f2["binary"][0]["counterexample"]["cause"] == "rounding" and f2["binary"][0]["dump"]
    assert f2["paper_precision"]["Kc"] == 1 and f3["class"] == F.CANNOT_BE_BUILT.value and f3["unbuildable"]
    assert main(["errata", "--row", "f2-n6", "--dump", str(tmp_path)]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].startswith("| row | paper | printed | class |") and "| f2-n6 |" in table[2]
    assert F.QUANTIZATION.value in table[2] and "`0 0 0 0 0 1`: rounding in FX(12, 6)" in table[2]
    assert main(["errata", "--row", "icqa", "--details", "--dump", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "  printed   \"H^(2)[n-1]" in out and "  class     typo corrected by the paper itself" in out


@pytest.mark.parametrize("argv,message", [(["--row", "f9"], "no errata row f9"),
                                          (["--details", "--json"], "give one")])
def test_verify_errata_bad_input_is_one_line(capsys, argv, message):
    assert main(["errata", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err


def test_rounded_threshold_is_the_printed_one_rounded_like_the_weights():
    problem = verifier.build_problem("equality", N=12, p=12, variant="paper")
    rounded, theta = errata._rounded_threshold(problem)
    assert theta == Fraction(5, 64) and rounded.model.readout.theta == Fraction(-5, 64)
    assert problem.model.readout.theta == Fraction(-1, 12)  # the problem itself is left alone
