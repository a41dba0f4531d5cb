"""The frontier's fitted forms (c log2 N + b against c (log2 N)^2 + b, and whether the data tell them
apart), the scanning frontier `descend`, and the sweep over T's width k."""

import json
import math

import pytest

from cli import main
from verifier.runs import sweep
from verifier.runs.fit import fit, minimax
from verifier.runs.sweep import Frontier, FrontierRow, descend, frontier, p_star
from verifier.support.errors import InputError

DOUBLINGS = [2 ** e for e in range(1, 9)]  # N = 2 .. 256


def frontier_of(curve, Ns=DOUBLINGS) -> list[tuple[int, int]]:
    """The p* a construction whose real precision need is curve(log2 N) shows: its ceiling."""
    return [(N, math.ceil(curve(math.log2(N)) - 1e-12)) for N in Ns]


def test_a_log_frontier_is_told_from_a_log_squared_one():
    found = fit(frontier_of(lambda x: 1.5 * x + 3.2))
    assert found.decided == "log" and found.better == "log"
    log, square = found.form("log"), found.form("log^2")
    assert log.consistent and not square.consistent
    assert log.slope == pytest.approx(1.5, abs=0.1) and log.intercept == pytest.approx(3.2 + 0.5, abs=0.4)
    assert max(map(abs, log.residuals)) < 1 and len(log.residuals) == len(DOUBLINGS)
    assert "rule out the log^2 form" in found.summary


def test_a_log_squared_frontier_is_told_from_a_log_one():
    found = fit(frontier_of(lambda x: 0.4 * x * x + 2.3))
    assert found.decided == "log^2" and found.better == "log^2"
    assert found.form("log^2").slope == pytest.approx(0.4, abs=0.05)
    assert not found.form("log").consistent


@pytest.mark.parametrize("points", [
    frontier_of(lambda x: 2 * x + 1, [4, 8]),  # two points: a line of either form through both
    frontier_of(lambda x: 0.5 * x + 6, [2, 4, 8]),  # few doublings of a slow growth
    [(4, 7), (8, 7), (16, 7), (32, 7)],  # flat
])
def test_few_doublings_cannot_tell_the_forms_apart(points):
    found = fit(points)
    assert found.decided is None and all(f.consistent for f in found.forms)
    assert "cannot tell" in found.summary


def test_scattered_points_fit_neither_form_and_it_says_so():
    found = fit([(2, 5), (4, 4), (8, 7), (16, 6), (32, 8), (64, 8), (128, 10), (256, 10), (512, 10), (1024, 9)])
    assert found.decided is None and not any(f.consistent for f in found.forms)
    assert found.better == min(found.forms, key=lambda f: f.rss).form == "log"
    assert found.summary.startswith("neither form fits")


def test_minimax_is_the_chebyshev_fit():
    assert minimax([0, 1, 2], [0, 1, 0]) == pytest.approx(0.5)  # the line y = 1/2 misses each by 1/2
    assert minimax([0, 1, 2, 3], [1, 3, 5, 7]) == pytest.approx(0)
    assert minimax([1, 2], [5, 9]) == 0


def test_fewer_than_two_points_have_no_fit():
    assert fit([(4, 7)]) is None and fit([]) is None


def test_the_table_prints_both_forms_and_the_fraction_bits():
    rows = [FrontierRow(N, p, {p - 1: "refuted", p: "proved"}) for N, p in frontier_of(lambda x: 2 * x, DOUBLINGS)]
    table = Frontier("equality", rows, {"f": "f = p - 3"}, int_bits=3)
    text = table.to_markdown()
    assert "Fit: p* = 2.000 log2 N + 0.000; f* = 2.000 log2 N - 3.000" in text
    assert "(log2 N)^2" in text and "Form: only the log form" in text
    again = Frontier.from_json(json.loads(json.dumps(table.to_json())))
    assert again.to_markdown() == text and again.to_json()["fit"]["decided"] == "log"


def test_an_unknown_just_below_leaves_p_star_undecided():
    assert p_star({5: "refuted", 6: "proved", 7: "proved"}) == 6
    assert p_star({5: "unknown", 6: "proved", 7: "proved"}) is None  # p* might be 5 or lower
    assert p_star({4: "unknown", 6: "refuted", 8: "proved"}) == 8  # the p of the range below is 6
    assert p_star({6: "proved", 7: "unknown"}) is None


def test_descend_finds_the_grid_sweeps_p_star_with_fewer_runs():
    Ns = [2, 4, 8]
    grid = frontier("equality", Ns, list(range(2, 11)), scheduler="serial")
    scan = descend("equality", Ns, 6, scheduler="serial")
    assert [r.p_star for r in scan.rows] == [r.p_star for r in grid.rows] and scan.partial is None
    for r, g in zip(scan.rows, grid.rows):
        assert set(r.verdicts) < set(g.verdicts) and all(g.verdicts[p] == v for p, v in r.verdicts.items())
        assert r.ruled_out_by == g.ruled_out_by
    assert scan.fit.to_json() == grid.fit.to_json()


def test_descend_goes_up_while_refuted_and_stops_when_its_budget_is_spent():
    scan = descend("equality", [8], 2, step=3, scheduler="serial")
    assert scan.rows[0].p_star == 6 and scan.rows[0].verdicts == {2: "refuted", 5: "refuted", 6: "proved",
                                                                  7: "proved", 8: "proved"}
    spent = descend("equality", [2, 4], 6, budget=1e-6, scheduler="serial")
    assert spent.rows == [] and spent.partial.startswith("the budget of")


def test_descend_steps_up_by_less_where_the_format_cannot_hold_p(monkeypatch):
    """A p whose sums int64 cannot hold is refused before any work (an input error): going up while
    refuted, the scan tries the smaller steps, and where none fits the frontier stops there, saying
    why, instead of failing."""
    built = sweep.build_problem

    def capped(task, **kw):
        if kw["p"] >= 5:
            raise InputError(f"p={kw['p']} does not fit")
        return built(task, **kw)

    monkeypatch.setattr(sweep, "build_problem", capped)
    scan = descend("equality", [8, 16], 2, step=3, scheduler="serial")
    assert scan.rows[0].verdicts == {2: "refuted", 4: "refuted"} and len(scan.rows) == 1
    assert scan.partial == "stopped at N = 8: p = 4 refuted, the largest p tried; p = 5 refused: p=5 does not fit"


def test_a_sweep_over_the_width_of_T_gives_k_star(capsys, tmp_path):
    out = tmp_path / "width.json"
    assert main(["sweep", "mqar", "--N", "2", "--p", "12", "--k", "1..3", "--scheduler", "serial", "--no-cache",
                 "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "| N | log2 N | k* | ruled out at k*-1 by | verdicts by k" in text
    saved = json.loads(out.read_text())
    assert saved["over"] == "k" and saved["rows"][0]["p_star"] == 2
    assert saved["rows"][0]["verdicts"] == {"1": "refuted", "2": "proved", "3": "proved"}


@pytest.mark.parametrize("args", [["--p", "12..13", "--k", "2..3"], ["--p", "12", "--k", "2..3", "--int-bits", "4"]])
def test_a_width_sweep_refuses_what_it_cannot_mean(capsys, args):
    assert main(["sweep", "mqar", "--N", "2", *args, "--scheduler", "serial", "--no-cache"]) == 2
    assert "a range of --k (the width of T) takes one --p and no --int-bits" in capsys.readouterr().err


def test_the_frontiers_tool_scans_p_and_sweeps_every_width_to_2N():
    from tools.frontiers import SPECS, Spec, run
    assert len({s.name for s in SPECS}) == len(SPECS)
    scan = run(Spec("t", "equality", "equality", 2, 6, 60), timeout=10, budget_scale=1, max_N=4, cache=None)
    assert [r.N for r in scan.rows] == [2, 4] and all(r.p_star for r in scan.rows)
    widths = run(Spec("w", "MQAR", "mqar", 2, 16, None, widths=True), timeout=10, budget_scale=1, max_N=2, cache=None)
    assert widths.over == "k" and list(widths.rows[0].verdicts) == [1, 2, 3, 4]


def test_a_width_sweep_decides_again_at_the_full_timeout_only_what_its_quick_pass_left(tmp_path, monkeypatch):
    """The quick pass's verdicts are read from the cache by the pass at the full timeout."""
    import tools.frontiers as tool
    from verifier.runs.cache import Cache
    passes = []

    def spy(*args, timeout, cache, **options):
        before = cache.hits
        found = frontier(*args, timeout=timeout, cache=cache, **options)
        passes.append((timeout, cache.hits - before, found))
        return found

    monkeypatch.setattr(tool, "frontier", spy)
    monkeypatch.setattr(tool, "QUICK_TIMEOUT", 5.0)
    widths = tool.run(tool.Spec("w", "MQAR", "mqar", 2, 16, None, widths=True), timeout=10, budget_scale=1, max_N=2,
                      cache=Cache(tmp_path / "verdicts.sqlite"))
    assert [(t, hits) for t, hits, _ in passes] == [(5.0, 0), (10, 4)]
    assert passes[0][2].rows[0].verdicts == widths.rows[0].verdicts == {1: "refuted", 2: "proved", 3: "proved",
                                                                        4: "proved"}
