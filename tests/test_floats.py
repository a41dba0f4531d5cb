"""Float formats (verifier/floats.py) against the independent reference of tests/reference.py
(`RefFloat`: Fractions, rounding by hand, mpmath at 400 bits): the rounding of each format in each
mode, the exact operations, the evaluator bit for bit on random models, and enumeration against the
reference on the differential battery's models (docs/arithmetic.md, "Floating-point formats")."""

from __future__ import annotations

from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from battery import battery_problem, decide_all, random_float, reference_format
from helpers import run
from reference import quantize_model, ref_forward

from verifier.arithmetic import make_format
from verifier.evaluator import Evaluator, make_evaluator
from verifier.floats import (
    FLOAT_ROUNDINGS,
    NAMED,
    FloatArith,
    FloatFormat,
    add_odd,
    div_odd,
    exp_round,
    float_format,
    fraction_odd,
)
from verifier.model import Recurrent

FORMATS = [*NAMED, "float:3:2", "float:2:1", "float:6:9"]


def _ref(fmt: FloatFormat, rounding: str):
    return reference_format(FloatArith(fmt, fmt, rounding))


def _probes(fmt: FloatFormat, rng: np.random.Generator, n: int = 400) -> np.ndarray:
    """Values that test a rounding: the format's own values, the midpoints between neighbours (ties),
    one float64 step either side of a midpoint, random magnitudes from below the smallest subnormal
    to beyond the largest value, and both signs."""
    ex = rng.integers(fmt.emin - 1, fmt.emax + 1, n)  # emin - 1: a subnormal
    ulp = np.ldexp(1.0, np.maximum(ex, fmt.emin) - fmt.M)
    mant = rng.integers(0, 2 ** (fmt.M + 1), n) % (2 ** fmt.M) + np.where(ex >= fmt.emin, 2 ** fmt.M, 0)
    pick = np.minimum(mant * ulp, fmt.max)
    mid = pick + ulp / 2  # exact in float64: a tie
    wide = np.ldexp(rng.uniform(0.5, 1, n), rng.integers(fmt.emin - fmt.M - 3, fmt.emax + 3, n))
    above_max = np.array([fmt.max, fmt.max * (1 + 2.0 ** -(fmt.M + 1)), fmt.max * 1.01, fmt.max * 2])
    x = np.concatenate([pick, mid, np.nextafter(mid, np.inf), np.nextafter(mid, -np.inf), wide, -wide, above_max,
                        -above_max, [0.0, fmt.tiny / 2, -fmt.tiny / 2, fmt.tiny * 0.75]])
    return x


@pytest.mark.parametrize("name", FORMATS)
def test_rounding_equals_rounding_by_hand(name):
    """Every format, every IEEE rounding mode: values and overflow flags equal `RefFloat.round_to`
    (exact rationals) on ties, near-ties, subnormals and beyond the largest value."""
    fmt = float_format(name)
    x = _probes(fmt, np.random.default_rng(len(name)))
    for rounding in FLOAT_ROUNDINGS:
        got, over = fmt.round(x, rounding)
        ref = _ref(fmt, rounding)
        for xi, gi, oi in zip(x, got, over):
            ref.ovf = False
            want = ref.round_to(Fraction(float(xi)), (fmt.E, fmt.M, fmt.ieee))
            assert (Fraction(float(gi)), bool(oi)) == (want, ref.ovf), (name, rounding, float(xi))


@pytest.mark.parametrize("name", [n for n in NAMED if n != "fp32"])
def test_finite_values_are_ml_dtypes(name):
    """The finite values of each named format are those of its ml_dtypes dtype, bit pattern by bit
    pattern (so E, M, the bias, the subnormals and E4M3's top exponent are the OCP and IEEE ones)."""
    fmt = float_format(name)
    dtype = np.dtype({"bf16": ml_dtypes.bfloat16, "fp16": np.float16, "e4m3": ml_dtypes.float8_e4m3fn,
                      "e5m2": ml_dtypes.float8_e5m2}[name])
    every = np.arange(2 ** (8 * dtype.itemsize), dtype=np.uint16 if dtype.itemsize == 2 else np.uint8)
    with np.errstate(invalid="ignore"):  # NaN patterns
        theirs = every.view(dtype).astype(np.float64)
    np.testing.assert_array_equal(fmt.finite_values(), np.unique(theirs[np.isfinite(theirs)]))


@pytest.mark.parametrize("name", [n for n in NAMED if n != "fp32"])
def test_ml_dtypes_float32_casts_round_to_nearest_even(name):
    """ml_dtypes' casts from float32 (within range) round as ours and as the reference do; its casts
    from float64 to bfloat16 go through float32 and round twice, which is why `FloatFormat.round`
    does the rounding (docs/arithmetic.md)."""
    fmt = float_format(name)
    dtype = {"bf16": ml_dtypes.bfloat16, "fp16": np.float16, "e4m3": ml_dtypes.float8_e4m3fn,
             "e5m2": ml_dtypes.float8_e5m2}[name]
    with np.errstate(over="ignore"):  # beyond float32: left out below
        x = _probes(fmt, np.random.default_rng(7)).astype(np.float32)
    x = x[np.abs(x.astype(np.float64)) < fmt.max]
    ours, _ = fmt.round(x.astype(np.float64), "nearest")
    np.testing.assert_array_equal(x.astype(dtype).astype(np.float64), ours)


@pytest.mark.parametrize("name", ["bf16", "fp16", "e4m3", "float:2:1", "fp32"])
def test_exact_operations_round_once(name):
    """A sum (TwoSum), a quotient (Dekker) and an exact rational, each rounded to odd in float64 and
    then to the format, equal the exact value rounded once; exp equals the reference's (mpmath at
    400 bits), in every mode."""
    fmt = float_format(name)
    rng = np.random.default_rng(3)
    vals = fmt.round(np.ldexp(rng.uniform(-1, 1, 300), rng.integers(fmt.emin - fmt.M, fmt.emax, 300)), "nearest")[0]
    a, b = vals[:150], vals[150:]
    b_pos = np.abs(b) + fmt.tiny
    d = -np.abs(fmt.round(np.ldexp(rng.uniform(0, 1, 200), rng.integers(-12, 8, 200)), "nearest")[0])
    d = np.concatenate([d, [0.0, -fmt.tiny, -fmt.max]])
    for rounding in FLOAT_ROUNDINGS:
        ref = _ref(fmt, rounding)
        spec = (fmt.E, fmt.M, fmt.ieee)
        s = fmt.round(add_odd(a, b), rounding)[0]
        q = fmt.round(div_odd(a, b_pos), rounding)[0]
        e = exp_round(d, fmt, rounding)
        for x, y, got_s in zip(a, b, s):
            X, Y = Fraction(float(x)), Fraction(float(y))
            assert Fraction(float(got_s)) == ref.round_to(X + Y, spec)
        for x, y, got_q in zip(a, b_pos, q):
            assert Fraction(float(got_q)) == ref.round_to(Fraction(float(x)) / Fraction(float(y)), spec)
        for di, ei in zip(d, e):
            assert Fraction(float(ei)) == ref.exp(Fraction(float(di))), (rounding, float(di))
        third = Fraction(1, 3) * Fraction(float(a[0]))
        assert Fraction(fmt.round(np.array([fraction_odd(third)]), rounding)[0][0]) == ref.round_to(third, spec)


@pytest.mark.parametrize("i", range(26))
def test_evaluator_equals_reference_bit_for_bit(i):
    """On the battery's random models in random float recipes, the readout scores of every input
    (generic path and layer-0 tables) are the reference's exactly, and so is each answer's overflow."""
    problem = battery_problem(i)
    if isinstance(problem.model, Recurrent):
        pytest.skip("a recurrent model: covered by the battery test below")
    arith = random_float(i)
    model, task = problem.model, problem.task
    ref = reference_format(arith)
    q = quantize_model(model, ref)
    evs = [make_evaluator(model, arith, tables=False), Evaluator(model, arith)]
    batch = next(iter(task.batches(0, min(task.total, 40), 40)))
    outs = [ev.forward(batch.tokens) for ev in evs]
    every = model.readout.positions == "all"
    for r, row in enumerate(batch.tokens):
        y, ovf = ref_forward(model, ref, [int(t) for t in row], q, per_answer=True)
        ys, flags = (y, ovf) if every else ([y], [ovf])
        for out in outs:
            got = out.scores[r] if every else out.scores[r][None]
            assert [[Fraction(float(v)) for v in pos] for pos in got] == ys
            if arith.overflow == "error":
                assert (list(out.ovf_at[r]) if every else [bool(out.ovf[r])]) == flags


@pytest.mark.slow
@pytest.mark.parametrize("i", range(0, 39, 3))
def test_enumeration_agrees_with_reference(i):
    """The differential battery in float recipes: enumeration and the reference fail on the same
    inputs, every engine that runs agrees (the bounds engine included), and `verifier.run` (replay
    included) gives the verdict; the engines that work on codes refuse (n/a)."""
    # the SMT engine in floats takes minutes a model: tests/test_smt_floats.py runs its battery
    outcome = decide_all(battery_problem(i, floats=True), skip=("encoding", "smt"))
    assert outcome["exhaustive"] == "agree"
    assert all(outcome[name] == "n/a" for name in ("smt-int", "reach") if name in outcome)


def test_cli_float_formats(capsys):
    """verify idxl --format NAME: the arithmetic line names the storage, the accumulation and the
    rounding points; a bad spelling is a one-line error, exit 2."""
    code, out, err = run(capsys, "idxl", "--N", "3", "--format", "bf16")
    assert code == 0, err
    line = next(x for x in out.splitlines() if x.strip().startswith("arithmetic"))
    assert "bf16 (E8M7" in line and "fp32 (E8M23" in line and "e / Z" in line and "rounding=nearest" in line
    code, out, err = run(capsys, "idxl", "--N", "3", "--format", "e4m3+e4m3acc", "--rounding", "zero")
    assert code in (0, 1) and "overflow=saturate" in out and "e4m3 (E4M3, finite-only, max 448) accumulation" in out
    for bad in ("bf15", "bf16+fp32", "float:9:2", "float:4:x", "bf16+fp99acc"):
        code, out, err = run(capsys, "idxl", "--N", "3", "--format", bad)
        assert code == 2 and len(err.strip().splitlines()) == 1, (bad, err)
    code, _, err = run(capsys, "idxl", "--N", "3", "--format", "bf16", "--p", "8")
    assert code == 2 and "float format" in err
    code, _, err = run(capsys, "idxl", "--N", "3", "--format", "fp16", "--engine", "smt-int")
    assert code == 2 and "float format" in err  # the integer theory has no floats; the bit-vector one has


def test_make_format_defaults():
    """A float format rounds to nearest by default and overflows as it is defined: E4M3 saturates
    (OCP), the IEEE-like formats fail the answers an overflow feeds."""
    assert (make_format("e4m3").rounding, make_format("e4m3").overflow) == ("nearest", "saturate")
    assert make_format("bf16").overflow == "error" and make_format("bf16").acc.name == "fp32"
    assert make_format("fp16+fp16acc").acc.name == "fp16"
    assert make_format("fx", p=8).rounding == "floor"


def test_sweep_over_formats(capsys):
    """verify sweep TASK --N ... --format A,B: one verdict per (N, format), each the verdict of that
    run on its own, and the counterexample of each format that fails; --json has every run."""
    import json

    import verifier

    code, out, err = run(capsys, "sweep", "dyck22", "--N", "2..3", "--format", "bf16,e5m2")
    assert code == 0, err
    rows = {int(line.split()[0]): line.split()[1:-1] for line in out.splitlines()[2:] if line.split()[0].isdigit()}
    for N in (2, 3):
        want = [verifier.run(verifier.build_problem("dyck22", N=N, arith=f)) for f in ("bf16", "e5m2")]
        assert rows[N] == [r.verdict for r in want]
        for f, r in zip(("bf16", "e5m2"), want):
            if r.counterexamples:  # e5m2 at N=3: on N's line, as the format just below the smallest
                line = f"N={N}: smallest bf16 (16 bits); just below it, {f} (8 bits): {r.counterexamples[0].line()}"
                assert line in out
    assert "refuted" in rows[3]  # the table shows a failure (e5m2 at N=3), not only proofs
    code, out, _ = run(capsys, "sweep", "dyck22", "--N", "2", "--format", "bf16,e5m2", "--json")
    doc = json.loads(out)
    assert code == 0 and [(r["N"], r["format"]) for r in doc["runs"]] == [(2, "bf16"), (2, "e5m2")]
    assert doc["runs"][0]["arithmetic"]["storage"] == "bf16"
    code, _, err = run(capsys, "sweep", "idxl", "--N", "2..3")
    assert code == 2 and "--p" in err and "--format" in err
    code, _, err = run(capsys, "sweep", "idxl", "--N", "2..3", "--format", "bf16,nope")
    assert code == 2 and len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_tracr_in_a_float_format(capsys):
    """verify tracr PROGRAM --format fp16: one run, whose arithmetic line is the float recipe; --p
    beside --format is refused."""
    pytest.importorskip("tracr")
    code, out, err = run(capsys, "tracr", "lib:make_length", "--vocab", "a,b", "--max-len", "2", "--format", "fp16")
    assert code == 0, err
    assert "float fp16 (E5M10" in out and "inputs      " in out
    code, _, err = run(capsys, "tracr", "lib:make_length", "--vocab", "a,b", "--max-len", "2", "--format", "fp16",
                       "--p", "8")
    assert code == 2 and "--format gives the whole format" in err


def test_trace_and_dump_of_a_float_counterexample(capsys, tmp_path):
    """--trace and --dump of a counterexample in a float format: every intermediate in the format
    beside the real one, and the first departure measured in the spacing at 1 (2^-M)."""
    code, out, err = run(capsys, "dyck22", "--N", "4", "--format", "e4m3", "--trace", "--dump", tmp_path / "d")
    assert code == 1, err
    assert "first departure (the format more than one step from real)" in out and "L0.H0.attn" in out
    dumped = list((tmp_path / "d").glob("*.json"))
    assert dumped and '"first_departure"' in dumped[0].read_text()
