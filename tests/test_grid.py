"""Fixed point on a grid of any rational step (verifier.arithmetic.Grid), Bhattamishra et al.'s B.2 grid
among them: the operations against the independent Fraction reference (tests/reference.py, RefGrid),
random models decided by every engine and the reference (tests/battery.py), FX(p, f) as the grid of
step 2^-f, and the format on the command line, in specs and in verdicts."""

import json
import math
from fractions import Fraction

import numpy as np
import pytest
from battery import KINDS, battery_problem, decide_all
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import RefGrid

import verifier
from cli import main
from verifier.arithmetic import ACCUMULATES, ROUNDINGS, FixedPoint, Grid, make_format, parse_format
from verifier.engines import RunOptions
from verifier.engines.exhaustive import Exhaustive
from verifier.evaluator import make_evaluator, trace
from verifier.outputs.dump import write_dumps
from verifier.runs.cache import run_key
from verifier.runs.specs import load_spec
from verifier.support.errors import InputError

# steps p/q with small numerators and denominators, at most 4; codes lo..hi with lo < 0 < hi
steps = st.builds(Fraction, st.integers(1, 7), st.integers(1, 64)).filter(lambda s: s <= 4)
grids = st.tuples(steps, st.integers(1, 3000), st.integers(0, 1), st.sampled_from(ROUNDINGS),
                  st.sampled_from(ACCUMULATES))


def pair(g):
    step, hi, asym, rounding, accumulate = g
    return (Grid(step, -hi - asym, hi, rounding, accumulate=accumulate),
            RefGrid(step, -hi - asym, hi, rounding, accumulate=accumulate))


def codes(fmt):
    return st.integers(fmt.lo, fmt.hi)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(grids, st.data())
def test_product_is_the_code_of_the_rounded_value(g, data):
    """q1 q2 step^2 rounded to the grid: R(q1 q2 step) in codes, saturated."""
    fx, ref = pair(g)
    a, b = data.draw(codes(fx)), data.draw(codes(fx))
    got = fx.sat(fx.rescale(np.array([a * b])), fx.context((1,)), "t")[0]
    assert got == ref.R(ref.val(a) * ref.val(b))


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(grids, st.data())
def test_linear_rule(g, data):
    fx, ref = pair(g)
    n = data.draw(st.integers(1, 6))
    W = data.draw(st.lists(codes(fx), min_size=n, max_size=n))
    x = data.draw(st.lists(codes(fx), min_size=n, max_size=n))
    b = data.draw(codes(fx))
    got = fx.lin(np.array([W]), np.array(x), np.array([b]), fx.context(()), "t")[0]
    assert got == ref.dot(W, x, b)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(grids, st.data())
def test_head_mean(g, data):
    fx, ref = pair(g)
    outs = data.draw(st.lists(codes(fx), min_size=1, max_size=5))
    got = fx.mean_heads(np.array([outs])[..., None], fx.context(()), "t")[0]
    assert got == ref.R(ref.val(Fraction(sum(outs), len(outs))))


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(grids.filter(lambda g: g[0] <= 1), st.data())
def test_softmax(g, data):
    """exp correctly rounded onto the grid, Z exact, a = R(e / Z) from the exact quotient."""
    fx, ref = pair(g)
    s = data.draw(st.lists(codes(fx), min_size=1, max_size=7))
    got = fx.softmax(np.array([s]), None, fx.context((1,)), "t")[0]
    assert list(got) == ref.softmax(s)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(grids, st.data())
def test_quantize_floats_and_rationals_exactly(g, data):
    """A float64 weight is the binary rational it holds: on or one ulp either side of a rounding
    boundary (k step, or (k + 1/2) step for nearest) it is rounded as that rational is."""
    fx, ref = pair(g)
    k = data.draw(st.integers(-2 * fx.hi - 4, 2 * fx.hi + 4))
    base = float((k + Fraction(data.draw(st.sampled_from([0, 1])), 2)) * fx.step)
    w = data.draw(st.sampled_from([base, math.nextafter(base, math.inf), math.nextafter(base, -math.inf),
                                   data.draw(st.floats(-4.0 * fx.hi, 4.0 * fx.hi, allow_nan=False)), 1e-310, -1e-310]))
    got, sat = fx.quantize(np.array([w]))
    ref.ovf = False
    assert got[0] == ref.R(Fraction(w)) and bool(sat[0]) == ref.ovf
    x = Fraction(data.draw(st.integers(-10 ** 6, 10 ** 6)), data.draw(st.integers(1, 10 ** 4)))
    got, sat = fx.quantize(np.array([x], dtype=object))
    ref.ovf = False
    assert got.dtype == np.int64 and got[0] == ref.R(x) and bool(sat[0]) == ref.ovf


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(grids, st.data())
def test_thresholds_compare_exactly(g, data):
    fx, ref = pair(g)
    theta = Fraction(data.draw(st.integers(-10 ** 5, 10 ** 5)), data.draw(st.integers(1, 500)))
    y = data.draw(st.lists(codes(fx), min_size=1, max_size=4))
    assert list(fx.above(np.array(y), theta)) == [ref.val(c) > theta for c in y]


@pytest.mark.parametrize("step,hi,rounding", [(Fraction(1, 36), 1296, "floor"), (Fraction(1, 10), 100, "nearest"),
                                              (Fraction(2, 3), 30, "zero"), (Fraction(1, 144), 144 ** 2, "floor"),
                                              (Fraction(5, 7), 20, "nearest")])
def test_exp_table_is_correctly_rounded_everywhere(step, hi, rounding):
    """Every entry against mpmath at 300 bits, and zero below the table."""
    fx, ref = Grid(step, -hi, hi, rounding), RefGrid(step, -hi, hi, rounding)
    dmin, table = fx.exp_table()
    for d in range(dmin, 1):
        assert table[d - dmin] == ref.exp(d), d
    assert dmin == fx.lo or (table[0] == 0 and ref.exp(dmin - 1) == 0)


def test_exp_table_that_cannot_fit_is_refused_before_it_is_built(monkeypatch):
    monkeypatch.setattr("verifier.support.budget.available_memory", lambda: 2 ** 30)  # a machine with 1 GiB free
    with pytest.raises(InputError, match=r"exp table .*\(16,777,217 entries\) needs about"):
        Grid.symmetric(Fraction(1, 2 ** 24), 1).exp_table()


def test_fx_is_the_grid_of_step_two_to_the_minus_f():
    """FX(p, f) and the generic grid of step 2^-f and the same codes: the same codes everywhere."""
    rng = np.random.default_rng(3)
    for p, f in [(6, 3), (10, 5), (12, 6), (8, 0), (9, 9)]:
        for rounding in ROUNDINGS:
            for accumulate in ACCUMULATES:
                fx = FixedPoint(p, f, rounding, accumulate=accumulate)
                grid = Grid(Fraction(1, 2 ** f), fx.lo, fx.hi, rounding, accumulate=accumulate)
                W, x = rng.integers(fx.lo, fx.hi + 1, (5, 4)), rng.integers(fx.lo, fx.hi + 1, (7, 4))
                b = rng.integers(fx.lo, fx.hi + 1, 5)
                assert np.array_equal(fx.lin(W, x, b, fx.context((7,)), "t"),
                                      grid.lin(W, x, b, grid.context((7,)), "t"))
                s = rng.integers(fx.lo, fx.hi + 1, (7, 6))
                assert np.array_equal(fx.softmax(s, None, fx.context((7,)), "t"),
                                      grid.softmax(s, None, grid.context((7,)), "t"))
                w = rng.normal(0, 2.0 ** (p - f - 1), 50)
                assert all(np.array_equal(a, b) for a, b in zip(fx.quantize(w), grid.quantize(w)))
                assert fx.exp_table()[1].tolist() == grid.exp_table()[1].tolist()


@pytest.mark.slow
@pytest.mark.parametrize("i", range(0, 3 * len(KINDS), 3))
def test_fx_as_a_grid_gives_the_same_verdicts_and_traces(i):
    """A battery model in FX and on the grid of step 2^-f: the same failing inputs, the same trace
    (codes) at the first one, and the same SMT verdict."""
    problem = battery_problem(i)
    fx = problem.arith
    as_grid = Grid(Fraction(1, 2 ** fx.f), fx.lo, fx.hi, fx.rounding, fx.overflow, fx.accumulate)
    other = type(problem)(problem.task, problem.model, as_grid)
    opts = RunOptions(max_counterexamples=problem.task.total, workers=1)
    a, b = Exhaustive().run(problem, opts), Exhaustive().run(other, opts)
    assert [f.index for f in a.found] == [f.index for f in b.found] and a.min_margin == b.min_margin
    tokens = a.found[0].tokens if a.found else problem.task.decode(0)
    (out_a, ta), (out_b, tb) = (trace(make_evaluator(p.model, p.arith, tables=False), tokens) for p in (problem, other))
    assert ta.keys() == tb.keys() and all(np.array_equal(ta[k], tb[k]) for k in ta)
    assert out_a.where == out_b.where
    if problem.task.cases is not None:
        assert verifier.run(problem, "smt").verdict == verifier.run(other, "smt").verdict


@pytest.mark.parametrize("task,N,p,variant", [("equality", 6, 12, "paper"), ("idxl", 8, 8, None),
                                              ("equality", 8, 7, "corrected")])
def test_constructions_decide_alike_in_fx_and_as_the_grid(task, N, p, variant):
    problem = verifier.build_problem(task, N=N, p=p, variant=variant)
    fx = problem.arith
    as_grid = Grid(Fraction(1, 2 ** fx.f), fx.lo, fx.hi)
    other = verifier.build_problem(task, N=N, arith=as_grid, variant=variant)
    a, b = (verifier.run(x, "exhaustive", max_counterexamples=5) for x in (problem, other))
    assert (a.verdict, a.min_margin) == (b.verdict, b.min_margin)
    assert [c.input for c in a.counterexamples] == [c.input for c in b.counterexamples]
    for ca, cb in zip(a.counterexamples, b.counterexamples):
        assert all(np.array_equal(ca.trace[k]["codes"], cb.trace[k]["codes"]) for k in ca.trace)


@pytest.mark.slow
@pytest.mark.parametrize("i", range(2 * len(KINDS)))
def test_battery_on_grids(i):
    """Random models on random grids: enumeration, the reference, SMT (bv and int), bounds, agree."""
    decide_all(battery_problem(i, grid=True))


def test_b2_grid_is_the_papers():
    """Appendix B.2 at N = 6, Kc = 2: step 1/36, every multiple of it in [-36, 36], floor rounding;
    1/N is a grid point; a construction gets Kc = 2."""
    g = make_format("b2:2", N=6)
    assert (g.step, g.lo, g.hi, g.rounding, g.kc(6)) == (Fraction(1, 36), -1296, 1296, "floor", 2.0)
    assert g.quantize(np.array([Fraction(1, 6)], dtype=object))[0][0] == 6
    assert g.quantize(np.array([1 / 6]))[0][0] == 5  # float64's 1/6 is below 1/6: floor goes one step down
    assert g.quantize(np.array([40.0, -40.0]))[0].tolist() == [1296, -1296]
    d = g.describe()
    assert (d["format"], d["N"], d["Kc"], d["step_exact"], d["range_exact"]) == ("b2", 6, 2, "1/36", ["-36", "36"])
    problem = verifier.build_problem("equality", N=6, arith="b2:2", variant="paper")
    assert problem.model.info["eta"] == pytest.approx(math.log(6) + 2 * math.log(12))
    result = verifier.run(problem, "exhaustive")
    assert "B.2 grid" in result.summary() and "step N^-Kc = 1/36" in result.summary()
    doc = json.loads(json.dumps(result.to_json()))
    assert doc["arithmetic"]["Kc"] == 2 and doc["arithmetic"]["codes"] == [-1296, 1296]


def test_kc_follows_the_format():
    assert FixedPoint(12, 6).kc(8) == pytest.approx(2.0)
    assert make_format("grid:1/144:144", N=12).kc(12) == pytest.approx(2.0)
    assert make_format("b2:3", N=4).kc(4) == 3.0
    eta = {fmt: verifier.build_problem("equality", N=8, arith=fmt, variant="paper").model.info["eta"]
           for fmt in ("b2:1", "b2:2")}
    assert eta["b2:2"] - eta["b2:1"] == pytest.approx(math.log(16))


def test_the_cache_key_and_the_json_state_the_grid():
    a = verifier.build_problem("idxl", N=4, p=8)
    b = verifier.build_problem("idxl", N=4, arith="grid:1/16:8")
    assert run_key(a, "exhaustive")["arithmetic"] != run_key(b, "exhaustive")["arithmetic"]
    assert verifier.build_problem("idxl", N=4, arith="b2:2").arith.describe() != \
        verifier.build_problem("idxl", N=4, arith="grid:1/16:16").arith.describe()  # the same grid, named apart


def test_dump_values_are_codes_times_the_step(tmp_path):
    result = verifier.prove("equality", N=6, arith="grid:1/3:30", variant="paper", engine="exhaustive")
    assert result.verdict == "refuted"
    path, = write_dumps(result, tmp_path)
    assert "grid-1_3-30" in path.name
    doc = json.loads(path.read_text())
    for v in doc["trace"].values():
        assert np.allclose(np.asarray(v["codes"], float) / 3, np.asarray(v["values"], float))


def test_a_grid_that_int64_cannot_hold_is_refused():
    with pytest.raises(InputError, match="int64"):
        make_format("b2:4", N=64)
    with pytest.raises(InputError, match="int64"):  # codes to 10^9: sums of exact products (2^60 each)
        verifier.build_problem("idxl", N=8, arith="grid:1/1000000:1000", accumulate="wide")
    verifier.build_problem("idxl", N=8, arith="grid:1/1000000:1000")  # products rounded before the sum
    with pytest.raises(InputError, match="exp\\(0\\) = 1 to 0"):
        verifier.build_problem("idxl", N=4, arith="grid:2:8")


@pytest.mark.parametrize("argv,message", [
    (["--format", "x"], "is not a format"), (["--format", "b2:0"], "integer >= 1"),
    (["--format", "b2:x"], "integer >= 1"), (["--format", "grid:1/3"], "two rational numbers"),
    (["--format", "grid:0:1"], "positive"), (["--format", "grid:1/3:1/2"], "not a multiple of the step"),
    (["--format", "grid:a:b"], "two rational numbers"), (["--p", "12", "--format", "b2:2"], "give one or the other"),
    (["--f", "3", "--format", "grid:1/4:4"], "give one or the other"), ([], "--p is required"),
    (["--format", "fx"], "--p is required"), (["--format", "b2:9"], "int64")])
def test_bad_formats_are_one_line_errors(capsys, argv, message):
    assert main(["idxl", "--N", "4", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err


def test_every_command_with_an_arithmetic_takes_the_format(capsys, tmp_path):
    assert main(["equality", "--N", "4", "--format", "b2:2", "--variant", "paper"]) == 0
    assert "B.2 grid" in capsys.readouterr().out
    model = tmp_path / "m.npz"
    assert main(["export", "equality", "--N", "4", "--variant", "paper", "--format", "b2:3", "-o", str(model)]) == 0
    capsys.readouterr()
    assert main(["run", "--model", str(model), "--task", "equality", "--N", "4", "--format", "b2:3",
                 "--json"]) in (0, 1)
    assert json.loads(capsys.readouterr().out)["arithmetic"]["Kc"] == 3
    one_layer = tmp_path / "idxl.npz"
    assert main(["export", "idxl", "--N", "4", "-o", str(one_layer)]) == 0
    capsys.readouterr()
    assert main(["refute", "idxl", "--N", "4", "--model", str(one_layer), "--format", "grid:1/8:8"]) == 0
    assert "arithmetic  grid step 1/8, range [-8, 8]" in capsys.readouterr().out


def test_sweep_prints_its_table_with_json_or_csv(capsys):
    assert main(["sweep", "idxl", "--N", "2..3", "--p", "5..6", "--json", "--no-cache", "--scheduler", "serial"]) == 0
    assert [r["N"] for r in json.loads(capsys.readouterr().out)["rows"]] == [2, 3]
    assert main(["sweep", "idxl", "--N", "2..3", "--p", "5..6", "--csv", "--no-cache", "--scheduler", "serial"]) == 0
    assert capsys.readouterr().out.startswith("N,log2_N,p_star")
    assert main(["sweep", "idxl", "--N", "2", "--p", "5", "--csv", "--json", "--no-cache"]) == 2
    assert "not both" in capsys.readouterr().err


def test_specs_take_the_format(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text('task = "equality"\nN = 6\nformat = "b2:2"\nvariant = "paper"\nexpect = "proved"\n')
    assert load_spec(path).problem["format"] == "b2:2"
    for bad, message in [('format = "b2:2"\np = 12\n', "give one or the other"), ('format = "x"\n', "is not a format"),
                         ("", "missing key 'p'")]:
        path.write_text(f'task = "equality"\nN = 6\n{bad}expect = "proved"\n')
        with pytest.raises(InputError, match=message):
            load_spec(path)


def test_parse_format():
    assert parse_format(None) == ("fx", None) and parse_format("b2:2") == ("b2", 2)
    assert parse_format("grid:0.25:3") == ("grid", (Fraction(1, 4), Fraction(3)))
