"""The SMT engine in float formats (verifier/smt/floats.py, docs/smt-encoding.md "Float formats"):
each rounding of the encoding equals the evaluator's on the format's values, bit for bit; the
whole encoding equals the evaluator on concrete inputs of the battery's models; the engine agrees
with enumeration on the differential battery; what it cannot encode it refuses with the reason."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import z3
from battery import battery_problem, decide_all

from verifier.engines import RunOptions
from verifier.engines.smt import Smt
from verifier.evaluator import make_evaluator
from verifier.floats import FLOAT_ROUNDINGS, FloatArith, add_odd, div_odd, exp_round, float_format
from verifier.smt.encoding import encode
from verifier.smt.floats import SymFloat

RECIPES = [("bf16", "bf16"), ("fp16", "fp32"), ("e5m2", "e5m2"), ("e4m3", "e4m3"), ("e4m3", "fp16"),
           ("bf16", "fp32"), ("float:3:2", "float:3:2")]


def _sym(storage: str, acc: str, rounding: str, overflow: str = "error") -> SymFloat:
    return SymFloat(FloatArith(float_format(storage), float_format(acc), rounding, overflow), [np.arange(2)], 8)


def _pairs(values: np.ndarray, rng: np.random.Generator, n: int = 150) -> tuple[np.ndarray, np.ndarray]:
    """Random pairs of values, the extremes and the subnormals among them."""
    small = values[np.abs(values) <= 4 * np.min(np.abs(values[values != 0]))]
    edge = np.concatenate([values[:3], values[-3:], small])
    x = np.concatenate([rng.choice(values, n), rng.choice(edge, n // 3), rng.choice(values, n // 3)])
    y = np.concatenate([rng.choice(values, n), rng.choice(values, n // 3), rng.choice(edge, n // 3)])
    return x, y


def _values(F, rng: np.random.Generator) -> np.ndarray:
    """The format's values (fp32's: 2,000 of them at random magnitudes, its extremes and subnormals)."""
    if F.M <= 10:
        return F.finite_values()
    x = np.ldexp(rng.uniform(1, 2, 2000), rng.integers(F.emin - F.M - 1, F.emax + 1, 2000))
    x = np.concatenate([x, [F.max, F.tiny, 2 * F.tiny, 2.0 ** F.emin, 2.0 ** F.emin - F.tiny, 0.0]])
    v, _ = F.round(np.concatenate([x, -x]), "nearest")
    return np.unique(v)


def _value(S: SymFloat, term) -> float:
    return S.value_of(z3.simplify(term))


def _overflowed(S: SymFloat) -> bool:
    """Did the last operation note an overflow (a constant condition once simplified)?"""
    if not S.overflows:
        return False
    return any(z3.is_true(z3.simplify(S.z(o))) for o in S.overflows)


@pytest.mark.slow  # 28 recipes x roundings, z3 simplifying each operation: about 20 s in all
@pytest.mark.parametrize("rounding", FLOAT_ROUNDINGS)
@pytest.mark.parametrize("storage,acc", RECIPES)
def test_each_rounding_equals_the_evaluators(storage, acc, rounding):
    """R(x + y), R(x y), R(x) to storage and R(e / Z) of the encoding are the evaluator's values
    (`FloatFormat.round` of the exact results) and overflow exactly where it does, on random and
    extreme values of the format (subnormals, the largest values, E4M3's 448)."""
    S = _sym(storage, acc, rounding)
    fa = S.fa
    rng = np.random.default_rng(hash((storage, acc, rounding)) % 2 ** 32)
    A, St = _values(fa.acc, rng), _values(fa.storage, rng)
    cases = []
    x, y = _pairs(A, rng)
    cases += [("add", a, b, fa.acc, add_odd(np.array([a]), np.array([b]))[0], lambda u, v: S._add(fa.acc, u, v))
              for a, b in zip(x, y)]
    x, y = _pairs(St, rng)
    cases += [("mul", a, b, fa.acc, a * b, S._mul) for a, b in zip(x, y)]  # exact in float64
    cases += [("add storage", a, b, fa.storage, add_odd(np.array([a]), np.array([b]))[0],
               lambda u, v: S._add(fa.storage, u, v)) for a, b in zip(x, y)]
    x = rng.choice(A, 200)
    cases += [("to storage", a, 0.0, fa.storage, a, lambda u, v: S._convert(fa.storage, u)) for a in x]
    e = rng.choice(A[(A > 0) & (A <= 1)], 150)
    Z = e + np.abs(rng.choice(A[(A >= 0) & (A <= 3)], 150))
    Z, _ = fa.acc.round(Z, "nearest")
    Z = np.maximum(Z, e)
    cases += [("div", a, b, fa.acc, div_odd(np.array([a]), np.array([b]))[0], S._div) for a, b in zip(e, Z)]
    for name, a, b, F, exact, op in cases:
        want, over = F.round(np.array([exact]), rounding)
        S.overflows.clear()
        got = _value(S, op(S.num(float(a)), S.num(float(b))))
        assert (got, _overflowed(S)) == (want[0], bool(over[0])), (name, a, b, got, want[0])


@pytest.mark.parametrize("rounding", FLOAT_ROUNDINGS)
def test_exp_table_is_exp_round_on_its_inputs(rounding):
    S = _sym("bf16", "bf16", rounding)
    D = np.unique(-np.abs(S.fa.acc.finite_values()[::97]))
    term = S._exp(z3.FP("d", S.carrier), D)
    for d, want in zip(D, exp_round(D, S.fa.acc, rounding)):
        assert _value(S, z3.substitute(term, (z3.FP("d", S.carrier), S.num(float(d))))) == want


def _float_problem(i: int, storage: str, acc: str):
    fa = FloatArith(float_format(storage), float_format(acc), FLOAT_ROUNDINGS[i % 4],
                    "error" if i % 2 else "saturate")
    return replace(battery_problem(i), arith=fa)


@pytest.mark.slow
@pytest.mark.parametrize("i", [0, 1, 2, 3, 5])
@pytest.mark.parametrize("storage,acc", RECIPES[:5])
def test_encoding_equals_the_evaluator_on_inputs(i, storage, acc):
    """Fix the tokens: every readout score of the encoding is the evaluator's, bit for bit (+0 and
    -0 are one value), and the failure formula holds exactly where the evaluator fails the input
    (a wrong answer, a tie or an overflow under overflow = error)."""
    problem = _float_problem(i, storage, acc)
    if Smt().unsupported(problem, RunOptions()):
        pytest.skip(Smt().unsupported(problem, RunOptions()))
    ev = make_evaluator(problem.model, problem.arith)
    task = problem.task
    inputs = [tuple(int(t) for t in row) for b in task.batches(0, task.total, 4096) for row in b.tokens]
    terms = 0
    for case in task.cases():
        enc = encode(ev, case)
        scores = [s for r in enc.scores for s in (r if isinstance(r, list) else [r])]
        terms += sum(s.is_term for s in scores)
        for tokens in [t for t in inputs if enc.contains(t)][:3]:
            arr = np.array([tokens])
            out = ev.forward(arr)
            assert [enc.at(s, tokens) for s in scores] == np.asarray(out.scores[0]).reshape(-1).tolist()
            assert enc.holds_at(tokens) == bool(ev.judge(out, np.array([task.answer(arr[0])])).failed[0])
    assert terms  # the formulas reached z3's floating-point terms, not only tables


# Two quick models where every engine must decide and agree (3 s and 30 s); the whole grid is `long`
# (23 min): there the SMT engine may also run out of time, never disagree.
AGREE = [(1, "e5m2", "e5m2"), (2, "e4m3", "e4m3")]
GRID = [(i, s, a) for s, a in [("bf16", "bf16"), ("fp16", "fp32"), ("e5m2", "e5m2"), ("e4m3", "e4m3")]
        for i in [0, 1, 2, 3, 5] if (i, s, a) not in AGREE]


@pytest.mark.parametrize("i,storage,acc", [pytest.param(*c, marks=pytest.mark.slow) for c in AGREE]
                         + [pytest.param(*c, marks=[pytest.mark.slow, pytest.mark.long]) for c in GRID])
def test_smt_agrees_with_enumeration(i, storage, acc):
    """The differential battery in float formats: the SMT formula of every case holds at every input
    enumeration fails and z3 finds a failure exactly when enumeration does; the engine (replay and
    sample check through `verifier.run`) agrees (on the AGREE models, which it decides in time) or
    runs out of time, never disagrees."""
    outcome = decide_all(_float_problem(i, storage, acc), engine_seconds=60)
    assert outcome["exhaustive"] == "agree"
    allowed = ("agree",) if (i, storage, acc) in AGREE else ("agree", "unknown")
    assert outcome["encoding"] in allowed and outcome["smt"] in allowed, outcome
    assert outcome["smt-int"] == "n/a"


@pytest.mark.parametrize("storage,acc,why", [
    ("fp32", "bf16", "fp32 values are not all bf16 values"),
    ("e4m3", "e5m2", "e4m3 values are not all e5m2 values"),
    ("float:4:1", "fp32", "float:4:1 has 1 mantissa bit"),
])
def test_recipes_it_cannot_encode_are_refused(storage, acc, why):
    problem = _float_problem(0, storage, acc)
    assert why in Smt().unsupported(problem, RunOptions())


def test_deeper_softmax_over_a_wide_accumulation_is_refused_with_its_size():
    problem = _float_problem(4, "bf16", "fp32")  # two softmax layers
    assert "every fp32 value <= 0 (2,139,095,040 of them" in Smt().unsupported(problem, RunOptions())
