"""The smallest format (`FormatTable.smallest` on the ladder of bits), and `python3 -m tools.formats`:
its rows, where a row stops, the cost against FX(p*), and the regions it renders."""

import dataclasses
import json

import pytest
from helpers import run as verify

import tools.formats as tool
from tools.generated import render_regions
from verifier.arithmetic import FixedPoint
from verifier.runs.formats import format_table


def test_the_smallest_format_is_the_cheapest_that_proves_and_the_one_below_holds_the_counterexample():
    table = format_table("dyck22", [4], ["fp16", "e5m2", "bf16", "e4m3"])
    assert table.bits == {"fp16": 16, "e5m2": 8, "bf16": 16, "e4m3": 8}
    assert table.ladder == ["e5m2", "e4m3", "fp16", "bf16"]  # fewer bits first, ties in the order given
    smallest, below = table.smallest(4)
    assert table.results[4, "e4m3"].verdict == table.results[4, "e5m2"].verdict == "refuted"
    assert (smallest, below) == ("fp16", "e4m3") and table.results[4, below].counterexamples
    assert table.smallest(4, among=["bf16", "e4m3"]) == ("bf16", "e4m3")
    assert table.smallest(4, among=["e4m3", "e5m2"]) == (None, "e4m3")  # none proves: the top of the ladder
    table.results[4, "e4m3"] = dataclasses.replace(table.results[4, "e4m3"], verdict="unknown")
    assert table.smallest(4) == (None, "e4m3")  # undecided: e4m3 might prove


def test_fixed_point_sits_on_the_ladder_by_its_bits():
    table = format_table("dyck22", [2], {"FX(16,8)": FixedPoint(16, 8), "e4m3": "e4m3", "FX(3,1)": FixedPoint(3, 1)})
    assert table.bits == {"FX(16,8)": 16, "e4m3": 8, "FX(3,1)": 3}
    assert table.ladder == ["FX(3,1)", "e4m3", "FX(16,8)"]
    assert table.results[2, "FX(3,1)"].verdict == "refuted"
    assert table.smallest(2) == ("e4m3", "FX(3,1)")
    assert table.results[2, "FX(16,8)"].arithmetic["p"] == 16


def _smallest_lines(out: str) -> dict[int, str]:
    return {int(line[2:line.index(":")]): line for line in out.splitlines() if line.startswith("N=") and ": " in line
            and line[2:line.index(":")].isdigit()}


@pytest.mark.slow
def test_the_sweep_prints_the_smallest_format_at_each_N_and_the_counterexample_just_below_it(capsys, tmp_path):
    """verify sweep --format, for a construction and a model file: at each N the smallest format (a
    column, and a line with the counterexample of the format just below it), in the text and --json."""
    table = format_table("dyck22", [3, 4], ["bf16", "e4m3", "e5m2"])
    assert table.results[4, "e4m3"].verdict == table.results[4, "e5m2"].verdict == "refuted"
    below = table.results[4, "e5m2"].counterexamples[0].line()  # e5m2: after e4m3 on the ladder (8 bits each)
    code, out, err = verify(capsys, "sweep", "dyck22", "--N", "3..4", "--format", "bf16,e4m3,e5m2")
    assert code == 0, err
    assert [line.split()[-1] for line in out.splitlines()[2:4]] == ["e4m3", "bf16"]  # the smallest column
    lines = _smallest_lines(out)
    assert lines == {3: "N=3: smallest e4m3 (8 bits), the cheapest format given",
                     4: f"N=4: smallest bf16 (16 bits); just below it, e5m2 (8 bits): {below}"}
    assert f"N=4 e4m3: {table.results[4, 'e4m3'].counterexamples[0].line()}" in out  # the other failure
    code, out, _ = verify(capsys, "sweep", "dyck22", "--N", "3..4", "--format", "bf16,e4m3,e5m2", "--json")
    assert json.loads(out)["smallest"] == [
        {"N": 3, "smallest": "e4m3", "label": "e4m3", "below": None, "counterexample": None},
        {"N": 4, "smallest": "bf16", "label": "bf16", "below": "e5m2", "counterexample": below}]
    model = tmp_path / "dyck4.npz"
    assert verify(capsys, "export", "dyck22", "--N", "4", "-o", model)[0] == 0
    code, out, err = verify(capsys, "sweep", "--task", "dyck22", "--model", model, "--N", "4", "--format",
                            "e5m2,fp16")
    assert code == 0, err
    assert _smallest_lines(out) == {4: f"N=4: smallest fp16 (16 bits); just below it, e5m2 (8 bits): {below}"}


def test_the_smallest_line_when_no_format_proves_and_when_a_cheaper_run_is_unknown():
    table = format_table("dyck22", [4], ["e4m3", "e5m2"])
    assert table.smallest_line(4) == ("N=4: none of the formats given proves; the largest, e5m2 (8 bits): "
                                      + table.results[4, "e5m2"].counterexamples[0].line())
    assert table.label(4) == "none"
    table.results[4, "e4m3"] = dataclasses.replace(table.results[4, "e4m3"], verdict="unknown", counterexamples=[],
                                                   covered=7, reason="timeout")
    assert table.smallest_line(4) == (f"N=4: smallest undecided: a cheaper run ended unknown, e4m3 (8 bits): unknown "
                                      f"(7 of {table.results[4, 'e4m3'].total:,} inputs covered; timeout)")
    assert table.label(4) == "?"


@pytest.mark.slow
def test_the_sweep_of_a_tracr_program_prints_its_smallest_format(capsys):
    pytest.importorskip("tracr")
    code, out, err = verify(capsys, "sweep", "tracr", "--program", "lib:make_length", "--vocab", "a,b,c",
                            "--max-len", "3", "--format", "fp16,e4m3")
    assert code == 0, err
    table = json.loads(verify(capsys, "sweep", "tracr", "--program", "lib:make_length", "--vocab", "a,b,c",
                              "--max-len", "3", "--format", "fp16,e4m3", "--json")[1])
    e4m3 = next(r for r in table["runs"] if r["format"] == "e4m3")
    assert e4m3["verdict"] == "refuted" and table["smallest"][0]["below"] == "e4m3"
    assert _smallest_lines(out)[3].startswith("N=3: smallest fp16 (16 bits); just below it, e4m3 (8 bits): "
                                              f"counterexample #{e4m3['counterexamples'][0]['index']}: ")


@pytest.fixture
def two_formats(monkeypatch):
    """The tool with two fixed formats beside FX(p*), so its code paths run in a few runs."""
    monkeypatch.setattr(tool, "FORMATS", {"e5m2": "e5m2", "FX(8,4)": FixedPoint(8, 4), tool.P_STAR: None})


def test_a_row_runs_every_format_at_each_N_with_the_construction_p_star(two_formats, monkeypatch, tmp_path):
    group = tool.run(tool.Spec("t", "Dyck", "dyck22", [2, 4], start=5), timeout=30, cache=None)
    assert [r["N"] for r in group["rows"]] == [2, 4] and group["stop"] is None
    two, four = group["rows"]
    assert two["p_star"] == 5 and four["p_star"] > 5  # docs/results/frontier-dyck22.json: 5, 11
    fx_p_star = four["cells"][tool.P_STAR]
    assert fx_p_star["verdict"] == "proved" and fx_p_star["format"]["p"] == four["p_star"]
    assert four["cells"]["e5m2"]["verdict"] == "refuted" and four["cells"]["e5m2"]["counterexample"]
    assert (two["smallest"], two["below"]) == ("e5m2", None)
    # no fixed format proves: the top one's counterexample
    assert (four["smallest"], four["below"]) == (None, "FX(8,4)")
    data = {"formats": list(tool.FORMATS), "groups": [group], "cost": tool.cost([group]),
            "made_by": {"command": "test", "timeout": 30, "seconds": 1}}
    ratios = data["cost"]["by_row"]["Dyck"]
    assert ratios["N"] == 4 and "e5m2" not in ratios  # refuted: it stopped at its counterexample
    line = tool.summary(data).splitlines()[2]
    assert line == f"| Dyck | 2, 4 | P R | P R | P P | e5m2, none | FX(8,4): {four['cells']['FX(8,4)']['short']} |"
    assert four["cells"]["FX(8,4)"]["counterexample"] in tool.page(data)
    monkeypatch.setattr(tool, "ROOT", tmp_path)
    (tmp_path / tool.PATH).parent.mkdir(parents=True)
    tool.save(data)
    kept = json.loads((tmp_path / tool.PATH).read_text())
    assert kept == tool.saved(data)
    assert tool.summary(kept) == tool.summary(data) and tool.page(kept) == tool.page(data)  # what the tables show
    column = kept["formats"]["e5m2"]  # the column's description, once: what its cells share
    assert column["storage"] == "e5m2" and column.items() <= four["cells"]["e5m2"]["format"].items()
    assert column.items() <= two["cells"]["e5m2"]["format"].items()
    saved_four = kept["groups"][0]["rows"][1]
    assert {**kept["formats"][tool.P_STAR], **saved_four["cells"][tool.P_STAR]["format"]}["p"] == four["p_star"]
    assert {**kept["groups"][0]["params"], **saved_four["params"]} == four["params"]
    assert {k for r in kept["groups"][0]["rows"] for c in r["cells"].values() for k in c} == {
        *tool.KEPT, "format", "counterexample", "short"}
    assert [(r["N"], f) for r in kept["groups"][0]["rows"] for f, c in r["cells"].items() if "short" in c] == [
        (4, "FX(8,4)")]  # only the README's cell


@pytest.mark.slow
def test_a_row_stops_after_the_first_unknown_and_when_its_budget_is_spent(two_formats):
    stopped = tool.run(tool.Spec("t", "equality", "equality", [2, 16, 32], start=3), timeout=0.5, cache=None)
    assert [r["N"] for r in stopped["rows"]] == [2, 16]
    assert stopped["stop"] == "a run at N = 16 ended unknown within 0.5 s"
    unknown = stopped["rows"][1]["cells"]["e5m2"]
    assert unknown["verdict"] == "unknown" and unknown["covered"] < unknown["total"] == 2 ** 16
    assert "U " in tool.page({"groups": [stopped], "cost": tool.cost([stopped]),
                              "made_by": {"command": "test", "timeout": 0.5, "seconds": 1}})
    spent = tool.run(tool.Spec("t", "equality", "equality", [2], budget=1e-6), timeout=5, cache=None)
    assert spent["rows"] == [] and spent["stop"] == "the budget of 1e-06 s ran out before N = 2"


def test_the_cost_is_each_proved_runs_time_over_fx_p_star_and_the_median():
    def cells(**seconds):
        return {f: {"verdict": "refuted" if s is None else "proved", "seconds": s or 0.01} for f, s in seconds.items()}
    groups = [{"label": "a", "rows": [{"N": 2, "cells": cells(**{tool.P_STAR: 1.0, "bf16": 9.0})},
                                      {"N": 4, "cells": cells(**{tool.P_STAR: 2.0, "bf16": 6.0, "e4m3": None})}]},
              {"label": "b", "rows": [{"N": 2, "cells": cells(**{tool.P_STAR: 1.0, "bf16": 2.0, "e4m3": 5.0})}]}]
    found = tool.cost(groups)
    assert found["by_row"] == {"a": {"N": 4, "bf16": 3.0}, "b": {"N": 2, "bf16": 2.0, "e4m3": 5.0}}
    assert found["median"] == {"e4m3": 5.0, "bf16": 2.5}


def test_the_saved_run_renders_the_readme_region_and_the_full_page():
    saved = json.loads((tool.ROOT / tool.PATH).read_text())
    region = render_regions(f"<!-- generated: formats {tool.PATH} -->\nstale\n<!-- end generated -->")
    assert region.splitlines()[2:-2] == tool.summary(saved).splitlines()
    assert len(tool.summary(saved).splitlines()) == 2 + len(saved["groups"]) + 2
    full = render_regions(f"<!-- generated: format_cells {tool.PATH} -->\n<!-- end generated -->")
    for g in saved["groups"]:
        assert f"### {g['label']}" in full
        assert all(c["counterexample"] in full for r in g["rows"] for c in r["cells"].values() if "counterexample" in c)
    assert {s.name for s in tool.SPECS} == {g["name"] for g in saved["groups"]}


def test_the_tool_refuses_an_unknown_row(capsys):
    with pytest.raises(SystemExit) as exit_:
        tool.main(["--only", "nope"])
    assert exit_.value.code == 2 and "unknown row nope" in capsys.readouterr().err
