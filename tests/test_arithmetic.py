"""FX arithmetic against the independent Fraction/mpmath reference (tests/reference.py)."""

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import RefFX

from verifier.arithmetic import ACCUMULATES, ROUNDINGS, FixedPoint, exp_table
from verifier.support.errors import InputError

formats = st.tuples(st.integers(2, 16), st.integers(0, 16), st.sampled_from(ROUNDINGS)).filter(lambda t: t[1] <= t[0])


def codes(p):
    return st.integers(-(2 ** (p - 1)), 2 ** (p - 1) - 1)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(formats, st.data())
def test_round_shift_and_product(fmt, data):
    p, f, rounding = fmt
    fx, ref = FixedPoint(p, f, rounding), RefFX(p, f, rounding)
    a, b = data.draw(codes(p)), data.draw(codes(p))
    got = fx.sat(fx.round_shift(np.array([a * b]), f), fx.context((1,)), "t")[0]
    assert got == ref.R(ref.val(a) * ref.val(b))


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(formats, st.sampled_from(ACCUMULATES), st.data())
def test_linear_rule(fmt, accumulate, data):
    p, f, rounding = fmt
    fx, ref = FixedPoint(p, f, rounding, accumulate=accumulate), RefFX(p, f, rounding, accumulate=accumulate)
    n = data.draw(st.integers(1, 6))
    W = data.draw(st.lists(codes(p), min_size=n, max_size=n))
    x = data.draw(st.lists(codes(p), min_size=n, max_size=n))
    b = data.draw(codes(p))
    got = fx.lin(np.array([W]), np.array(x), np.array([b]), fx.context(()), "t")[0]
    assert got == ref.dot(W, x, b)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(formats, st.data())
def test_division(fmt, data):
    p, f, rounding = fmt
    fx, ref = FixedPoint(p, f, rounding), RefFX(p, f, rounding)
    num = data.draw(st.integers(-(2 ** 40), 2 ** 40))
    den = data.draw(st.integers(1, 2 ** 20))
    assert fx.round_div(np.array([num]), np.array([den]))[0] == ref.round_int(Fraction(num, den))


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(formats, st.data())
def test_saturation_and_quantize(fmt, data):
    p, f, rounding = fmt
    fx, ref = FixedPoint(p, f, rounding, overflow="error"), RefFX(p, f, rounding)
    w = data.draw(st.floats(-2.0 ** (p - f + 2), 2.0 ** (p - f + 2), allow_nan=False))
    got, sat = fx.quantize(np.array([w]))
    assert got[0] == ref.R(Fraction(w))
    assert bool(sat[0]) == ref.ovf
    ctx = fx.context((1,))
    x = data.draw(st.integers(-(2 ** p), 2 ** p))
    assert fx.add(np.array([x]), np.array([0]), ctx, "t")[0] == min(max(x, fx.lo), fx.hi)
    assert bool(ctx.ovf[0]) == (not fx.lo <= x <= fx.hi)


@pytest.mark.parametrize("p,f,rounding", [(8, 4, "floor"), (10, 5, "nearest"), (12, 6, "zero"), (6, 6, "floor"),
                                          (5, 4, "nearest"), (14, 7, "floor")])
def test_exp_table_is_correctly_rounded_everywhere(p, f, rounding):
    """Every entry against mpmath at 300 bits, and zero below the table."""
    dmin, table = exp_table(p, f, rounding)
    ref = RefFX(p, f, rounding)
    for d in range(dmin, 1):
        assert table[d - dmin] == ref.exp(d), d
    assert table[0] == 0 or dmin == -(2 ** (p - 1))
    assert ref.exp(dmin - 1) == 0 or dmin == -(2 ** (p - 1))


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(formats, st.data())
def test_softmax(fmt, data):
    p, f, rounding = fmt
    fx, ref = FixedPoint(p, f, rounding), RefFX(p, f, rounding)
    s = data.draw(st.lists(codes(p), min_size=1, max_size=7))
    got = fx.softmax(np.array([s]), None, fx.context((1,)), "t")[0]
    assert list(got) == ref.softmax(s)
    assert 1 <= sum(ref.exp(ref.sat(x - max(s))) for x in s) / 2 ** f * 2 ** f  # Z >= exp(0) code


def test_softmax_mask_makes_positions_absent():
    fx = FixedPoint(10)
    s = np.array([[3, 100, -5]])
    mask = np.array([True, False, True])
    got = fx.softmax(s, mask, fx.context((1,)), "t")[0]
    assert got[1] == 0
    assert list(got[[0, 2]]) == list(fx.softmax(np.array([[3, -5]]), None, fx.context((1,)), "t")[0])


def test_exp_near_boundary_is_decided_by_mpmath():
    """Entries whose scaled exp is within 1e-6 of a rounding boundary agree with 300-bit mpmath."""
    p, f = 20, 10
    dmin, table = exp_table(p, f, "floor")
    d = np.arange(dmin, 0)
    y = np.exp(d / 2.0 ** f) * 2.0 ** f
    close = d[np.abs(y - np.rint(y)) < 1e-4]
    assert len(close) > 0
    ref = RefFX(p, f, "floor")
    for x in close[:50]:
        assert table[x - dmin] == ref.exp(int(x))


@pytest.mark.parametrize("kwargs,message", [
    (dict(p=1), "p must be"), (dict(p=8, f=9), "f must be"), (dict(p=8, f=-1), "f must be"),
    (dict(p=8, rounding="up"), "rounding"), (dict(p=8, overflow="wrap"), "overflow"),
    (dict(p=8, accumulate="fma"), "accumulate"), (dict(p=40), "too wide")])
def test_bad_formats_are_refused(kwargs, message):
    with pytest.raises(InputError, match=message):
        FixedPoint(**kwargs)


def test_capacity_refuses_what_int64_cannot_hold():
    """Accumulated wide, a sum of exact products needs about 2p + log2(terms) bits; by product, each
    product is rounded first, so p = 31 holds sums of many terms (a product of two codes: 2p - 2)."""
    FixedPoint(24, accumulate="wide").check_capacity(1000)
    with pytest.raises(InputError, match="int64"):
        FixedPoint(31, accumulate="wide").check_capacity(100)
    with pytest.raises(InputError, match="needs 63 bits"):
        FixedPoint(28, 12, accumulate="wide").check_capacity(450)
    FixedPoint(31, 15).check_capacity(100_000)
    FixedPoint(31, 31).check_capacity(1000)  # e den of a softmax weight: 2^30 2^31
    with pytest.raises(InputError, match="int64"):
        FixedPoint(31, 15).check_capacity(1 << 32)  # Z, a sum of 2^32 codes


@pytest.mark.parametrize("f", [0, 15, 18])
@pytest.mark.parametrize("rounding", ROUNDINGS)
def test_the_widest_product_format_is_exact_at_its_extremes(f, rounding):
    """p = 31, accumulated by product, on sums of 600 products of extreme codes and a softmax over 600
    extreme logits: every operation against the reference (Python integers cannot wrap)."""
    fx, ref = FixedPoint(31, f, rounding), RefFX(31, f, rounding)
    fx.check_capacity(600)
    rng = np.random.default_rng(f)
    extremes = np.array([fx.lo, fx.lo + 1, -1, 0, 1, fx.hi - 1, fx.hi])
    W, x = rng.choice(extremes, (3, 600)), rng.choice(extremes, 600)
    W[0], x[:] = fx.lo, fx.lo  # every product 2^60, every rounded term saturated
    got = fx.lin(W, x, np.array([fx.hi, fx.lo, 0]), fx.context(()), "t")
    assert list(got) == [ref.dot(list(map(int, w)), list(map(int, x)), b) for w, b in zip(W, (fx.hi, fx.lo, 0))]
    s = rng.choice(extremes, 600)
    a = fx.softmax(s[None], None, fx.context((1,)), "t")[0]
    assert list(a) == ref.softmax(list(map(int, s)))
    v = rng.choice(extremes, (600, 2))
    mixed = fx.mix(a[None], v, fx.context(()), "t")[0]
    assert list(mixed) == [ref.dot(list(map(int, a)), list(map(int, v[:, c]))) for c in range(2)]


def test_int64_extremes_are_exact():
    """The widest accepted format at its extreme codes: no wrap-around."""
    fx = FixedPoint(30, accumulate="wide")
    fx.check_capacity(3)
    ref = RefFX(30, accumulate="wide")
    W = [fx.lo, fx.lo, fx.hi]
    x = [fx.lo, fx.lo, fx.lo]
    assert fx.lin(np.array([W]), np.array(x), None, fx.context(()), "t")[0] == ref.dot(W, x)


@settings(max_examples=200, deadline=None)
@given(formats, st.integers(-10**6, 10**6), st.integers(1, 10**4))
def test_exact_rationals_are_rounded_exactly(fmt, num, den):
    """An object array of Fractions (a construction's exact weights) is rounded as RefFX rounds."""
    p, f, rounding = fmt
    fx, ref = FixedPoint(p, f, rounding), RefFX(p, f, rounding)
    x = Fraction(num, den)
    codes, saturated = fx.quantize(np.array([x], dtype=object))
    assert codes.dtype == np.int64 and codes[0] == ref.R(x)
    assert saturated[0] == (ref.round_int(x * 2 ** f) != ref.R(x))


def test_exact_weights_are_not_float64_roundings():
    """Ten 0.1s add to 0.9999999999999999 in float64: floor puts it a whole step below the exact 1."""
    fx = FixedPoint(12, 6)
    float_sum = sum([0.1] * 10)
    exact_sum = sum([Fraction(1, 10)] * 10)
    assert fx.quantize(np.array([float_sum]))[0][0] == 63
    assert fx.quantize(np.array([exact_sum], dtype=object))[0][0] == 64


def test_thresholds_compare_exactly():
    """theta = 1/3 as a Fraction: the code 21/64 is below it and 22/64 above, as in exact arithmetic."""
    fx = FixedPoint(12, 6)
    assert list(fx.above(np.array([21, 22]), Fraction(1, 3))) == [False, True]
    assert list(fx.above(np.array([-22, -21]), Fraction(-1, 3))) == [False, True]


def _quantize_per_entry(fx: FixedPoint, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The former path: every entry of an exact array rounded on its own (the reference)."""
    exact = np.vectorize(fx.round_rational, otypes=[object])(w)
    saturated = (exact < fx.lo) | (exact > fx.hi)
    return np.clip(exact, fx.lo, fx.hi).astype(np.int64), saturated.astype(bool)


# ties (k + 1/2 steps) under f fractional bits, integers (numpy's too), floats (a battery model's), and
# values that saturate, repeated
_exact_entries = st.one_of(st.integers(-3, 3), st.fractions(max_denominator=8), st.sampled_from([0.5, -1.25, 0.1]),
                           st.integers(-3, 3).map(np.int64),
                           st.builds(lambda k, f: Fraction(2 * k + 1, 2 ** (f + 1)),
                                     st.integers(-40, 40), st.integers(0, 6)),
                           st.builds(lambda k: Fraction(k, 3) * 10 ** 6, st.integers(-3, 3)))


@settings(max_examples=200, deadline=None)
@given(formats, st.lists(_exact_entries, min_size=0, max_size=24), st.sampled_from([(-1,), (2, -1), (-1, 2)]))
def test_exact_quantize_matches_per_entry_rounding(fmt, entries, shape):
    """Rounding each distinct value once gives every entry the code (and saturation flag) the
    per-entry rounding gives it, ties under every rounding included."""
    p, f, rounding = fmt
    fx = FixedPoint(p, f, rounding)
    entries = entries if shape == (-1,) else entries[: len(entries) // 2 * 2]
    w = np.array(entries + [None], dtype=object)[:-1].reshape(shape)
    codes_, sat = fx.quantize(w)
    ref_codes, ref_sat = _quantize_per_entry(fx, w)
    assert codes_.dtype == np.int64 and codes_.shape == w.shape and sat.shape == w.shape
    assert np.array_equal(codes_, ref_codes) and np.array_equal(sat, ref_sat)


def test_exact_quantize_rounds_each_distinct_value_once(monkeypatch):
    """A construction's weights are mostly 0 and +-1: a d x d matrix costs three roundings, not d^2."""
    fx = FixedPoint(12, 6)
    rounded = []
    round_rational = FixedPoint.round_rational
    monkeypatch.setattr(FixedPoint, "round_rational", lambda self, x: rounded.append(x) or round_rational(self, x))
    w = np.array([[Fraction(0), Fraction(1), Fraction(-1)] * 100] * 50, dtype=object)
    codes_, _ = fx.quantize(w)
    assert sorted(rounded) == [-1, 0, 1]
    assert [codes_[0, 0], codes_[0, 1], codes_[49, 2]] == [0, 64, -64]
