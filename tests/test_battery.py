"""The differential battery (tests/battery.py): every engine and the reference agree on random models.

A slice of every kind runs by default; ``python3 -m pytest -m long tests/test_battery.py -s`` runs
BATTERY_SIZE models (or $VERIFY_BATTERY_SIZE) on every core and prints the counts (README, "The
differential battery"), and GRID_BATTERY_SIZE models (or $VERIFY_GRID_BATTERY_SIZE) on grids of
rational step (tests/test_grid.py runs a slice of those), and FLOAT_BATTERY_SIZE models (or
$VERIFY_FLOAT_BATTERY_SIZE) in float recipes."""

import functools
import multiprocessing
import os
import time
import warnings
from collections import Counter

import pytest
from battery import KINDS, battery_problem, decide_all

from verifier.engines import ENGINES, EngineResult

BATTERY_SIZE = int(os.environ.get("VERIFY_BATTERY_SIZE", 10_000))
GRID_BATTERY_SIZE = int(os.environ.get("VERIFY_GRID_BATTERY_SIZE", 1_000))
FLOAT_BATTERY_SIZE = int(os.environ.get("VERIFY_FLOAT_BATTERY_SIZE", 1_000))
SLICE = list(range(3 * len(KINDS))) + [111, 153, 246, 252]  # three models of every kind, two averaging models,
# a prefix-shaped Dyck transformer and a lookup-shaped composition that fail
# of the two-layer kind (the aggregate engine's shape: `battery._averaging_problem`)


@pytest.mark.slow
@pytest.mark.parametrize("i", SLICE)
def test_battery_slice(i):
    decide_all(battery_problem(i))


FLOAT_KINDS = ("construction", "random-idxl", "lookup-argmax", "lookup-threshold", "two-layer")  # bounds runs them


@pytest.mark.slow
@pytest.mark.parametrize("i", [i for i in range(6 * len(KINDS)) if KINDS[i % len(KINDS)] in FLOAT_KINDS])
def test_float_battery_slice(i):
    """The bounds engine in float recipes, one-layer and two-layer models: it agrees with enumeration
    (and with the reference), or cannot run the model (a first layer that is not local)."""
    # the float SMT engine takes minutes a model (10 of this slice's 14 minutes): test_smt_floats.py has it
    outcome = decide_all(battery_problem(i, floats=True), skip=("encoding", "smt"))
    assert outcome["bounds"] in ("agree", "n/a"), outcome


class _Prover:
    """An engine that proves everything: registered, the battery must catch it with no edit."""

    name = "prover"
    symbolic = True

    def unsupported(self, problem, opts):
        return None

    def run(self, problem, opts):
        return EngineResult("complete", problem.task.total, [])


def test_a_registered_engine_is_cross_checked(monkeypatch):
    problem = battery_problem(1)  # a random index-lookup model over 10 inputs
    assert decide_all(problem, through_api=False)["verdict"] == "refuted"
    monkeypatch.setitem(ENGINES, "prover", _Prover())
    with pytest.raises(AssertionError, match="prover"):
        decide_all(problem, through_api=False)


def _decide(i: int, grid: bool = False, floats: bool = False) -> tuple[int, dict | str]:
    warnings.simplefilter("ignore")  # float64 reference values of extreme weights overflow; they are reports
    try:
        return i, decide_all(battery_problem(i, grid, floats))
    except Exception as exc:  # collected, so that the run reports every disagreement at the end
        return i, f"{type(exc).__name__}: {exc}"


@pytest.mark.slow
@pytest.mark.long
def test_full_battery():
    _full(BATTERY_SIZE, grid=False)


@pytest.mark.slow
@pytest.mark.long
def test_full_grid_battery():
    _full(GRID_BATTERY_SIZE, grid=True)


@pytest.mark.slow
@pytest.mark.long
def test_full_float_battery():
    _full(FLOAT_BATTERY_SIZE, floats=True)


def _full(size: int, grid: bool = False, floats: bool = False) -> None:
    t0 = time.monotonic()
    with multiprocessing.get_context("fork").Pool(os.cpu_count() or 1) as pool:
        results = dict(pool.imap_unordered(functools.partial(_decide, grid=grid, floats=floats), range(size),
                                           chunksize=8))
    failures = {i: r for i, r in results.items() if isinstance(r, str)}
    counts = Counter()
    for r in results.values():
        if isinstance(r, dict):
            counts.update({r["verdict"]: 1, f"bv {r['bv']}": 1, f"int {r['int']}": 1, f"bounds {r['bounds']}": 1})
    kind = "grid battery" if grid else "float battery" if floats else "battery"
    print(f"\n{kind}: {len(results)} models in {time.monotonic() - t0:.0f} s on "
          f"{os.cpu_count()} cores; {dict(sorted(counts.items()))}; {len(failures)} disagreements")
    assert not failures, sorted(failures.items())[:10]
    assert counts["proved"] and counts["refuted"]
