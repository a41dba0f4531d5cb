"""Dumps with the first FX departure and the quantized weights; the HTML report, rendered in a real
headless Chromium; figures; the progress display."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess

import numpy as np
import pytest
from helpers import run

import cli
import verifier
from verifier.engines.base import Tick
from verifier.outputs.dump import first_departure
from verifier.runs.progress import line

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
needs_matplotlib = pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None,
                                      reason="matplotlib is not installed (pip install -e '.[plot]')")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A counterexample dump, a verdict with its trace, and a sweep, as the commands write them."""
    d = tmp_path_factory.mktemp("docs")
    assert cli.main(["idxl", "--N", "4", "--p", "12", "--eta", "0.5", "--dump", str(d / "dumps")]) == 1
    verdict = subprocess.run(["verify", "idxl", "--N", "3", "--p", "4", "--json", "--trace"], capture_output=True,
                             text=True)
    (d / "verdict.json").write_text(verdict.stdout)
    assert cli.main(["sweep", "idxl", "--N", "2..5", "--p", "4..8", "--no-cache", "-o", str(d / "sweep.json")]) == 0
    return {"dump": next((d / "dumps").glob("*.json")), "verdict": d / "verdict.json", "sweep": d / "sweep.json"}


# -- the dump -----------------------------------------------------------------------------------------
def test_first_departure_is_the_first_gap_beyond_one_step():
    step = 2.0 ** -4
    table = {"a": {"values": np.array([1.0, 2.0]), "real": np.array([1.0 + step, 2.0 - 0.5 * step])},
             "b": {"values": np.array([[0.0, 1.0]]), "real": None},
             "c": {"values": np.array([[0.5, 0.25], [0.0, 1.0]]), "real": np.array([[0.5, 0.25], [0.3, 1.0]])},
             "d": {"values": np.array([9.0]), "real": np.array([np.inf])}}
    assert first_departure(table, 4) == {"name": "c", "element": [1, 0], "fx": 0.0, "real": 0.3,
                                         "gap_steps": pytest.approx(0.3 / step)}
    del table["c"]
    assert first_departure(table, 4)["name"] == "d"
    del table["d"]
    assert first_departure(table, 4) is None


@pytest.mark.slow
def test_the_dump_has_the_departure_and_the_weights_the_run_used(files):
    doc = json.loads(files["dump"].read_text())
    f = doc["arithmetic"]["f"]
    dep = doc["first_departure"]
    assert dep is not None and dep["name"] in doc["trace"] and dep["gap_steps"] > 1
    names = list(doc["trace"])
    trace = {k: {"values": v["values"], "real": v["real"]} for k, v in doc["trace"].items()}
    assert first_departure({k: trace[k] for k in names[:names.index(dep["name"])]}, f) is None
    model = verifier.build_problem("idxl", N=4, p=12, eta=0.5).model
    weights = doc["quantized_weights"]
    assert set(weights) == set(model.named_arrays())
    for name, w in model.named_arrays().items():
        codes = np.array(weights[name]["codes"])
        assert codes.shape == w.shape and codes.dtype.kind == "i"
        assert np.all(np.abs(codes * 2.0 ** -f - w) <= doc["arithmetic"]["quantization_error"] + 1e-12)


# -- the report -----------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("kind", ["dump", "verdict", "sweep"])
def test_report_is_one_self_contained_page(capsys, tmp_path, files, kind):
    out = tmp_path / "r.html"
    code, text, _ = run(capsys, "report", files[kind], "-o", out)
    assert code == 0 and f"({kind} report)" in text
    page = out.read_text()
    refs = re.findall(r'\b(?:src|href|xlink:href)\s*=\s*["\']([^"\']*)', page)
    assert all(r.startswith("#") for r in refs), refs  # nothing is loaded from outside the file
    assert "<script" not in page and "@import" not in page
    assert all(u.startswith("#") for u in re.findall(r"url\(([^)]*)\)", page))  # SVG clip paths, in the page
    verdict = {"dump": "REFUTED", "verdict": "PROVED", "sweep": None}[kind]
    if verdict:
        assert re.search(rf'id="verdict"[^>]*>{verdict}<', page) and "<h2>Trace</h2>" in page
        assert "<h2>Attention weights</h2>" in page and "L0.H0" in page
        doc = json.loads(files[kind].read_text())
        departs = first_departure(doc["trace"], doc["arithmetic"]["f"]) is not None
        assert departs == ('id="first-departure"' in page) == ("FX stays within one step" not in page)
    else:
        assert "Fit: p* =" in page and "<svg" in page or importlib.util.find_spec("matplotlib") is None
    assert run(capsys, "report", files[kind], "-o", out)[0] == 2  # never overwritten


def test_the_report_of_a_dump_has_its_parameters_and_coverage(capsys, tmp_path, files):
    """eta, d and k of the construction, and the inputs the run covered before it stopped (issue 24)."""
    doc = json.loads(files["dump"].read_text())
    total = doc["inputs"]["total"]
    assert 1 <= doc["inputs"]["covered"] <= total == verifier.build_problem("idxl", N=4, p=12).task.total
    out = tmp_path / "r.html"
    assert run(capsys, "report", files["dump"], "-o", out)[0] == 0
    page = out.read_text()
    assert f"{doc['inputs']['covered']:,} of {total:,}" in page and "inputs covered" in page
    for key in ("eta", "d", "k"):
        assert f"{key}={doc['params'][key]}" in page


def test_the_departure_is_marked_on_its_row_for_vectors_and_matrices():
    from verifier.outputs.report import _trace
    vector = {"x": {"values": [1.0, 2.0, 3.0], "real": [1.0, 2.0, 9.0]}}
    page = _trace(vector, first_departure(vector, 4))
    assert re.search(r'<tr class="departure" id="first-departure"><td>x</td>', page)
    matrix = {"m": {"values": [[0.0, 0.0], [1.0, 1.0]], "real": [[0.0, 0.0], [1.0, 5.0]]}}
    page = _trace(matrix, first_departure(matrix, 4))
    assert '<tr class="departure" id="first-departure"><td>m [1]</td>' in page
    assert '<tr class="departure"><td>m [0]</td>' in page


def test_report_refuses_what_it_cannot_read(capsys, tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text('{"hello": 1}')
    code, _, err = run(capsys, "report", bad, "-o", tmp_path / "r.html")
    assert code == 2 and "not a verdict" in err and not (tmp_path / "r.html").exists()
    bad.write_text("{")
    assert run(capsys, "report", bad, "-o", tmp_path / "r.html")[0] == 2


def edit_document(doc, place: tuple, value=None, delete: bool = False):
    """The document with what is at `place` (keys from the root) set to `value`, or deleted; at the
    root, `value`."""
    if not place:
        return value
    parent = doc
    for key in place[:-1]:
        parent = parent[key]
    if delete:
        del parent[place[-1]]
    else:
        parent[place[-1]] = value
    return doc


def _edit(place: tuple, value=None, delete: bool = False):
    return lambda doc: edit_document(doc, place, value, delete)


@pytest.mark.slow
@pytest.mark.parametrize("kind,edit,message", [
    ("verdict", _edit(("verdict",), []), 'verdict: expected one of "proved", "refuted", "unknown", got an array'),
    ("verdict", _edit(("task",), delete=True), "missing key 'task'"),
    ("verdict", _edit(("task",), None), "task: expected an object (a table of keys), got null"),
    ("verdict", _edit(("arithmetic", "step"), "x"), 'arithmetic.step: expected a finite number, got the string "x"'),
    ("verdict", _edit(("inputs",), {}), "inputs: missing key 'covered'"),
    ("verdict", _edit(("inputs", "checked", "positions"), 1),
     "inputs.checked.of_positions: expected an integer, got null"),
    ("dump", _edit(("counterexample", "margin"), delete=True), "counterexample: missing key 'margin'"),
    ("dump", _edit(("first_departure", "gap_steps"), "x"),
     'first_departure.gap_steps: expected a finite number or null, got the string "x"'),
    ("dump", _edit(("trace", "embed", "real"), [1.0]), "trace.embed: 'real' and 'values' have different shapes"),
    ("dump", _edit(("trace", "embed", "values"), [["x"]]), "trace.embed.values: expected a (nested) array of numbers"),
    ("dump", _edit(("trace",), None), "trace: expected an object"),
    ("sweep", _edit(("rows", 0, "N"), "x"), 'rows[0].N: expected an integer, got the string "x"'),
    ("sweep", _edit(("rows", 0, "verdicts"), {"4": 1}), 'rows[0].verdicts.4: expected one of "proved"'),
    ("sweep", _edit(("fit", "intercept"), delete=True), "fit: missing key 'intercept'"),
    ("sweep", _edit(("arithmetic", "f"), []), "arithmetic.f: expected a string, got an array"),
    ("sweep", lambda doc: [doc], "not a verdict (--json), a counterexample dump (--dump) or a sweep"),
])
def test_report_and_plot_refuse_malformed_documents_with_one_line(capsys, tmp_path, files, kind, edit, message):
    """Wrong types, missing keys, a list for an object: an input error naming the field, never an
    internal error while the page or the figure is drawn."""
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(edit(json.loads(files[kind].read_text()))))
    commands = [("report", "r.html")] + ([("plot", "f.svg")] if kind != "verdict" else [])
    for command, name in commands:
        code, out, err = run(capsys, command, bad, "-o", tmp_path / name)
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1, (command, err)
        assert not (tmp_path / name).exists()


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium (Debian package chromium)")
def test_report_renders_in_headless_chromium(capsys, tmp_path, files):
    out = tmp_path / "r.html"
    assert run(capsys, "report", files["dump"], "-o", out)[0] == 0
    flags = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([*flags, "--dump-dom", out.as_uri()], capture_output=True, text=True, timeout=120).stdout
    assert re.search(r'id="verdict"[^>]*>REFUTED</span>', dom) and 'id="first-departure"' in dom
    shot = tmp_path / "shot.png"
    subprocess.run([*flags, f"--screenshot={shot}", "--window-size=1000,700", out.as_uri()], capture_output=True,
                   timeout=120)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    if importlib.util.find_spec("PIL") is not None:  # the red verdict badge is drawn on the page
        from PIL import Image
        pixels = np.asarray(Image.open(shot).convert("RGB")).reshape(-1, 3).astype(int)
        badge = np.all(np.abs(pixels - [0xcf, 0x22, 0x2e]) <= 8, axis=1)
        assert badge.sum() > 200


# -- figures -------------------------------------------------------------------------------------------
@pytest.mark.slow
@needs_matplotlib
def test_sweep_plot_and_attention_plot(capsys, tmp_path, files):
    png = tmp_path / "f.png"
    code, _, err = run(capsys, "sweep", "idxl", "--N", "2..4", "--p", "4..7", "--no-cache", "--plot", png)
    assert code == 0 and f"wrote {png}" in err and png.read_bytes()[:4] == b"\x89PNG"
    svg = tmp_path / "two.svg"
    assert run(capsys, "plot", files["sweep"], files["sweep"], "-o", svg)[0] == 0
    assert "index_lookup: p* = " in svg.read_text() and "Precision frontier (f = p // 2)" in svg.read_text()
    att = tmp_path / "att.svg"
    assert run(capsys, "plot", files["dump"], "-o", att)[0] == 0
    text = att.read_text()
    assert "L0.H0 FX" in text and "L0.H0 real" in text and "L0.H0 FX - real" in text
    assert run(capsys, "plot", files["dump"], "-o", att)[0] == 2  # never overwritten
    assert run(capsys, "plot", files["dump"], files["sweep"], "-o", tmp_path / "mixed.png")[0] == 2
    assert run(capsys, "plot", files["verdict"], "-o", tmp_path / "v.png")[0] == 2


@pytest.mark.slow
def test_figures_need_a_figure_format_and_matplotlib(capsys, tmp_path, files, monkeypatch):
    code, _, err = run(capsys, "sweep", "idxl", "--N", "2", "--p", "4", "--plot", tmp_path / "f.pdf")
    assert code == 2 and ".png or .svg" in err
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a))
    code, out, err = run(capsys, "sweep", "idxl", "--N", "2", "--p", "4", "--plot", tmp_path / "f.png")
    assert code == 2 and "pip install 'verify[plot]'" in err and out == ""  # refused before any run


# -- progress -------------------------------------------------------------------------------------------
def test_progress_ticks_from_each_engine():
    ticks = []
    verifier.prove("idxl", N=8, p=12, engine="exhaustive", progress=ticks.append)
    assert ticks and ticks[-1].covered == ticks[-1].total and ticks[-1].cases_done is None
    ticks.clear()
    verifier.prove("idxl", N=8, p=12, engine="smt", progress=ticks.append)
    total = ticks[0].cases_total
    assert total is not None and all(t.cases_total == total for t in ticks)
    done = [t.cases_done for t in ticks]
    assert done == sorted(done) and done[-1] == total and ticks[0].case is not None
    ticks.clear()
    verifier.prove("dyck22", N=8, p=4, f=1, variant="recurrent", engine="reach", progress=ticks.append)
    assert ticks and "state pairs" in ticks[-1].case


def test_progress_line_has_an_estimate_for_enumeration_and_the_case_for_symbolic_engines():
    assert line(Tick(5_000, 20_000), 2.5) == \
        "[#######                       ] 5,000/20,000 inputs, 2,000/s, about 8 s left"
    assert line(Tick(20_000, 20_000), 2.5).endswith("inputs, 8,000/s")
    text = line(Tick(300, 1000, 12, 528, "length 7, query 3"), 4)
    assert text.endswith("300/1,000 inputs; case 12/528 (length 7, query 3)")
    assert "left" in line(Tick(1, 3600 * 100), 1.0) and "h" in line(Tick(1, 3600 * 100), 1.0)
