"""The exact evaluator (`verifier.exact`) against two independent references: the Fraction/mpmath
real path of `tests/reference.py` (exactly, for models without softmax; within 2^-400 otherwise)
and the float64 reference (the sign of every margin far from 0), on random models of every kind;
ties that are exact zeros; certified exp enclosures; and an undecidable tie left undecided."""

from __future__ import annotations

from fractions import Fraction

import mpmath
import numpy as np
import pytest
from helpers import add_biases, random_model
from reference import ref_real_forward

from verifier import exact
from verifier.evaluator import readout_margins, reference
from verifier.model import Head, Layer, Model, Readout, Recurrent

TOL = Fraction(1, 2 ** 400)  # the real path's softmax is mpmath at 600 bits, not exact


def _kinds(seed: int) -> Model:
    """A random model; by seed also biases, a BOS token, a readout at every position."""
    rng = np.random.default_rng(seed)
    V, L = 3, 4
    model = random_model(rng, V + 1, L)
    if seed % 3 == 0:
        add_biases(model, rng)
    if seed % 4 == 1:
        model.bos = model.vocab[-1]
    if seed % 5 == 2:
        model.readout.positions = "all"
    model.validate()
    return model


def _inputs(model, rng: np.random.Generator, count: int = 6) -> list[np.ndarray]:
    V = len(model.vocab)
    L = 4 if model.max_len is None else model.max_len
    out = []
    for _ in range(count):
        length = int(rng.integers(1, L + 1))
        toks = rng.integers(0, V - (model.bos is not None), size=length)
        if model.bos is not None:
            toks = np.concatenate([[V - 1], toks[: L - 1]])
        out.append(toks)
    return out


def _has_softmax(model) -> bool:
    return isinstance(model, Model) and any(l.attention == "softmax" for l in model.layers)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(40))
def test_scores_match_the_real_reference(seed):
    """Every readout score (every position read) encloses the reference's value; a model without
    softmax gets exactly it, with lo == hi."""
    model = _kinds(seed)
    rng = np.random.default_rng(1000 + seed)
    for toks in _inputs(model, rng):
        if model.bos is not None and model.readout.positions == "all" and len(toks) < 2:
            continue
        want = ref_real_forward(model, [int(t) for t in toks])
        got = exact.evaluate(model, toks, max_prec=128)  # enclosures, not decisions, are checked here
        assert len(got.decisions) == len(want)
        for d, ys in zip(got.decisions, want):
            for (lo, hi), y in zip(d.scores, ys):
                if not _has_softmax(model):
                    assert lo == hi == y
                else:
                    tol = TOL * (1 + abs(y))
                    assert lo - tol <= y <= hi + tol


@pytest.mark.parametrize("seed", range(6))
def test_recurrent_models_are_exact(seed):
    rng = np.random.default_rng(seed)
    h, V, C = 3, 3, 2
    w = lambda *shape: np.round(rng.normal(0, 1.5, size=shape) * 8) / 8 + rng.normal(0, 0.01, size=shape)
    model = Recurrent(w(V, h), w(h, h), w(h), w(h), Readout(w(C, h), w(C), "argmax", positions="all"),
                      ["a", "b", "c"])
    for toks in _inputs(model, rng):
        want = ref_real_forward(model, [int(t) for t in toks])
        got = exact.evaluate(model, toks)
        assert got.exact and got.prec is None
        assert [[lo for lo, _ in d.scores] for d in got.decisions] == want


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(40))
def test_agrees_with_float64_where_its_margin_is_far_from_zero(seed):
    """The float64 reference and exact arithmetic give the same answer wherever float64's margin
    is far from 0 (float64's own error is far below the gap)."""
    model = _kinds(seed)
    rng = np.random.default_rng(2000 + seed)
    real = reference(model)
    checked = 0
    for toks in _inputs(model, rng, 10):
        if model.bos is not None and model.readout.positions == "all" and len(toks) < 2:
            continue
        out = real.forward(toks[None, :])
        with np.errstate(all="ignore"):
            y = np.atleast_2d(np.asarray(out.scores[0], dtype=np.float64))
        if not np.all(np.isfinite(y)):
            continue
        pred = np.atleast_1d(out.pred[0])
        margins = readout_margins(y, pred, model.readout.kind, float(model.readout.theta))
        if np.any(margins < 1e-6 * (1 + np.abs(y).max())):
            continue
        o = exact.evaluate(model, toks, pred if model.readout.positions == "all" else int(pred[0]))
        assert o.verdict == "right", (toks, o.describe())
        checked += 1
    assert checked or seed % 7 == 0  # most seeds check something


def _tie_model(attention: str) -> Model:
    """Two tokens, one layer; readout rows 0 and 1 equal: every input is an exact tie of classes
    0 and 1 (class 2 reads something else, below them)."""
    E = np.array([[1.0, 0.5], [0.25, -1.0]])
    P = np.array([[0.0, 0.0], [0.5, 0.25], [-0.75, 1.0]])
    head = Head(np.array([[1.0, -0.5]]), np.array([[0.5, 1.0]]), np.array([[1.0, 1.0]]))
    layer = Layer([head], np.array([[1.0], [-2.0]]), attention, residual=True, causal=attention == "softmax")
    W_U = np.array([[1.0, 2.0], [1.0, 2.0], [1.0, 2.0]])
    b_U = np.array([0.0, 0.0, -1.0])
    return Model(E, P, np.ones(2, bool), [layer], Readout(W_U, b_U, "argmax"), ["x", "y"])


@pytest.mark.parametrize("attention", ["relu", "softmax"])
def test_a_tie_is_exactly_zero(attention):
    model = _tie_model(attention)
    for toks in ([0], [1, 0], [0, 1, 1], [1, 1, 0]):
        o = exact.evaluate(model, toks, 0)
        assert o.margin == (0, 0), o.describe()
        assert o.verdict == "wrong" and o.reason == "tie"
        assert o.decisions[0].tie == (0, 1) and o.answer is None
        if attention == "relu":
            assert o.exact


def test_a_threshold_equal_to_theta_is_bit_zero():
    """y = theta exactly: bit 0 (the comparison is strict), margin exactly 0."""
    E = np.array([[0.5, 0.0], [0.0, 0.25]])
    layer = Layer([Head(np.zeros((1, 2)), np.zeros((1, 2)), np.eye(2)[:1])], np.zeros((2, 1)), "relu")
    model = Model(E, np.zeros((2, 2)), np.zeros(2, bool), [layer],
                  Readout(np.array([[1.0, 1.0]]), np.array([0.0]), "threshold", Fraction(1, 2)), ["a", "b"])
    o = exact.evaluate(model, [0], 0)
    assert o.decisions[0].bits == (0,) and o.answer == 0 and o.verdict == "right"
    assert o.margin == (0, 0)
    assert exact.evaluate(model, [0], 1).verdict == "wrong"


def test_uniform_softmax_attention_is_exact():
    """Equal logits give weights 1/n exactly (exp(0) = 1): no enclosure is needed."""
    model = _tie_model("softmax")
    for h in model.layers[0].heads:
        h.W_Q[:] = 0.0
    model.readout.W_U[2] = [3.0, -1.0]
    o = exact.evaluate(model, [0, 1, 1])
    assert o.exact and o.decided


def test_an_irrational_tie_stays_undecided():
    """Logits (0, -1, -1): positions 1 and 2 get the same irrational weight e^-1 / (1 + 2 e^-1).
    Class 0 reads position 1's value, class 1 position 2's: their scores are equal, but only
    symbolically; interval arithmetic cannot decide it, and the outcome says so at the cap."""
    d = 4  # rows: onehot position (3), one
    E = np.zeros((1, d))
    E[0, 3] = 1.0
    P = np.zeros((3, d))
    P[:, :3] = np.eye(3)
    head = Head(np.array([[0.0, 0.0, 0.0, 1.0]]), np.array([[0.0, -1.0, -1.0, 0.0]]), np.eye(d)[:3])
    layer = Layer([head], np.vstack([np.eye(3), np.zeros((1, 3))]), "softmax", residual=False)
    W_U = np.array([[0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0]])
    model = Model(E, P, np.ones(1, bool), [layer], Readout(W_U, np.zeros(2), "argmax"), ["t"])
    o = exact.evaluate(model, [0, 0, 0], 0, max_prec=256)
    assert o.verdict == "undecided" and not o.decided and o.prec == 256
    lo, hi = o.margin
    assert lo < 0 < hi and hi - lo < Fraction(1, 2 ** 200)


def test_a_margin_near_zero_is_refined_until_decided():
    """A margin of about 2^-100 needs more than the first 64 bits: it is decided at a higher one."""
    d = 4
    E = np.zeros((1, d))
    E[0, 3] = 1.0
    P = np.zeros((3, d))
    P[:, :3] = np.eye(3)
    head = Head(np.array([[0.0, 0.0, 0.0, 1.0]]), np.array([[0.0, -1.0, -1.0, 0.0]]), np.eye(d)[:3])
    layer = Layer([head], np.vstack([np.eye(3), np.zeros((1, 3))]), "softmax", residual=False)
    from verifier.model import exact_array
    W_U = exact_array([[0, 1 + Fraction(1, 2 ** 100), 0, 0], [0, 0, 1, 0]])
    model = Model(E, P, np.ones(1, bool), [layer], Readout(W_U, np.zeros(2), "argmax"), ["t"])
    o = exact.evaluate(model, [0, 0, 0], 0)
    assert o.verdict == "right" and o.prec > 64 and o.margin[0] > 0


@pytest.mark.parametrize("x", [Fraction(-3, 7), Fraction(5, 2), Fraction(-50), Fraction(1, 10 ** 9),
                               Fraction(-123456789, 10 ** 7)])
@pytest.mark.parametrize("prec", [64, 200])
def test_exp_enclosure_contains_exp(x, prec):
    lo, hi = exact.exp_enclosure(x, x, prec)
    with mpmath.workprec(2000):
        e = mpmath.exp(mpmath.mpf(x.numerator) / x.denominator)
        assert mpmath.mpf(lo.numerator) / lo.denominator <= e <= mpmath.mpf(hi.numerator) / hi.denominator
    assert lo < hi and (hi - lo) / hi < (1 + abs(x)) * Fraction(8, 2 ** prec)
    assert exact.exp_enclosure(Fraction(0), Fraction(0), prec) == (1, 1)


def test_exp_enclosure_of_a_very_negative_argument_is_short():
    lo, hi = exact.exp_enclosure(Fraction(-10 ** 6), Fraction(-10 ** 6 + 1), 64)
    assert lo == 0 and 0 < hi <= Fraction(1, 2 ** 64)


def test_exact_weights_are_used_as_they_are():
    """An object array of Fractions (1/3) is not its float64 neighbour: 3 * (1/3) = 1 exactly."""
    from verifier.model import exact_array
    E = exact_array([[Fraction(1, 3)], [Fraction(2, 3)]])
    layer = Layer([Head(np.zeros((1, 1)), np.zeros((1, 1)), np.zeros((1, 1)))], np.zeros((1, 1)), "relu")
    model = Model(E, np.zeros((1, 1)), np.zeros(2, bool), [layer],
                  Readout(np.array([[3.0]]), np.array([-1.0]), "threshold", 0.0), ["a", "b"])
    assert exact.evaluate(model, [0]).decisions[0].scores == ((0, 0),)
    model.E = np.array([[1 / 3], [2 / 3]])
    assert exact.evaluate(model, [0]).decisions[0].scores[0][0] == 3 * Fraction(1 / 3) - 1 != 0


def test_weights_are_read_at_every_call():
    """A model changed after an evaluation (a construction that fits its readout on what its
    layers compute) is evaluated with its new weights."""
    model = _tie_model("relu")
    assert exact.evaluate(model, [0, 1], 0).verdict == "wrong"
    model.readout.b_U[0] = 1.0
    assert exact.evaluate(model, [0, 1], 0).verdict == "right"


@pytest.mark.parametrize("dims", [{"m": 0}, {"mv": 0}, {"h": 0}, {"d": 0, "m": 1}])
def test_degenerate_shapes(dims):
    """Zero-width maps (empty sums are exactly 0) give the reference's scores."""
    for seed in range(3):
        model = random_model(np.random.default_rng(seed), 3, 3, dims=dims)
        toks = np.array([0, 1, 2])
        want = ref_real_forward(model, [0, 1, 2])
        got = exact.evaluate(model, toks, max_prec=128)
        for d, ys in zip(got.decisions, want):
            for (lo, hi), y in zip(d.scores, ys):
                tol = TOL * (1 + abs(y))
                assert lo - tol <= y <= hi + tol


@pytest.mark.slow
def test_a_search_covers_the_members_that_are_no_inputs():
    """Nearest neighbour enumerates 288 sequences at N = 3, 192 of them inputs (the margin
    assumption holds): a search over all of them is complete, and counts the inputs it checked."""
    from verifier.runs.api import build_problem
    problem = build_problem("nearest_neighbour", N=3, p=12, variant="paper")
    found = exact.search(problem)
    assert (found.verdict, found.covered, found.total, found.checked) == ("proved", 288, 288, 192)
    assert found.exit_code == 0 and "(192 of them inputs with an answer)" in found.summary(problem)
    part = exact.search(problem, 10, 100)
    assert part.verdict == "unknown" and part.covered == 90 and part.checked < 90
