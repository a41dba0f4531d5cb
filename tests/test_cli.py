"""The `verify` command line: exit codes, JSON, dumps, model files and bad input."""

import json
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import run

import cli
import verifier
from verifier.constructions.index_lookup import build
from verifier.runs import specs

ROOT = Path(__file__).resolve().parents[1]
JSON_KEYS = {"verdict", "task", "construction", "params", "arithmetic", "engine", "inputs", "seconds", "min_margin",
             "counterexamples"}


def test_proved_exit_0_and_json_keys(capsys):
    code, out, _ = run(capsys, "idxl", "--N", "6", "--p", "10", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["verdict"] == "proved"
    assert JSON_KEYS <= set(doc)
    assert doc["inputs"]["covered"] == doc["inputs"]["total"] == 642
    for key in ("p", "f", "rounding", "overflow", "accumulate"):
        assert key in doc["arithmetic"]
    for key in ("d", "k", "eta", "heads", "layers", "size_bits"):
        assert key in doc["params"]


def test_summary_states_the_arithmetic(capsys):
    code, out, _ = run(capsys, "index_lookup", "--N", "5", "--p", "9", "--rounding", "nearest")
    assert code == 0
    assert "PROVED" in out and "FX(p=9, f=4)" in out and "rounding=nearest" in out and "accumulate=product" in out
    assert "258 of 258" in out and "min margin" in out


def test_a_long_input_of_the_smallest_margin_is_elided_in_the_summary_and_whole_in_json(capsys):
    code, out, _ = run(capsys, "equality", "--N", "64", "--p", "12")
    line = next(x for x in out.splitlines() if x.lstrip().startswith("min margin"))
    assert code == 0 and "... (64 tokens; the whole input: --json) ..." in line and len(line.split()) < 50
    code, out, _ = run(capsys, "equality", "--N", "64", "--p", "12", "--json")
    assert code == 0 and len(json.loads(out)["tightest"]["input"].split()) == 64


def test_refuted_exit_1_with_dump_that_never_overwrites(capsys, tmp_path):
    args = ("idxl", "--N", "8", "--p", "12", "--eta", "0.5", "--dump", str(tmp_path), "--max-counterexamples", "2")
    code, out, _ = run(capsys, *args)
    assert code == 1 and "REFUTED" in out and "counterexample #" in out
    files = sorted(tmp_path.iterdir())
    assert len(files) == 2
    doc = json.loads(files[0].read_text())
    assert {"counterexample", "trace", "arithmetic", "how_to_read"} <= set(doc)
    logits = doc["trace"]["L0.H0.logits"]
    assert {"codes", "values", "real"} <= set(logits)
    before = {f: f.read_text() for f in files}
    code, _, _ = run(capsys, *args)
    assert code == 1 and len(list(tmp_path.iterdir())) == 4
    assert all(f.read_text() == text for f, text in before.items())


def test_trace_flag(capsys):
    code, out, _ = run(capsys, "idxl", "--N", "4", "--p", "10", "--trace")
    assert code == 0 and "trace of the tightest input" in out and "L0.H0.exp" in out and "real" in out
    code, out, _ = run(capsys, "idxl", "--N", "4", "--p", "10", "--eta", "0.3", "--trace", "--json")
    assert code == 1 and "L0.H0.attn" in json.loads(out)["trace"]


@pytest.mark.slow
def test_unknown_exit_3_on_timeout(capsys):
    code, out, _ = run(capsys, "idxl", "--N", "16", "--p", "12", "--sigma", "3", "--engine", "exhaustive",
                       "--timeout", "1", "--json")
    doc = json.loads(out)
    # how much a second covers depends on the machine; that the count is reported does not
    assert code == 3 and doc["verdict"] == "unknown" and 0 <= doc["inputs"]["covered"] < doc["inputs"]["total"]
    assert "timeout" in doc["reason"] and f"inputs 0..{doc['inputs']['covered']}" in doc["reason"]


def _as_a_terminal_starts_it() -> None:
    """SIGINT at its default: a suite started in the background (`pytest &`) would pass on an
    ignored SIGINT, and a background job rightly keeps running on Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.slow
def test_ctrl_c_gives_unknown_with_count():
    proc = subprocess.Popen([sys.executable, str(ROOT / "cli.py"), "idxl", "--N", "16", "--p", "12", "--sigma", "3",
                             "--engine", "exhaustive", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=ROOT,
                            preexec_fn=_as_a_terminal_starts_it)
    time.sleep(5)  # past start-up (imports), well inside a run that would take hours
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 3, err
    doc = json.loads(out)
    assert doc["verdict"] == "unknown" and "interrupted" in doc["reason"]
    assert 0 <= doc["inputs"]["covered"] < doc["inputs"]["total"]


@pytest.mark.parametrize("args,message", [
    (("idxl", "--N", "0", "--p", "12"), "N must be"),
    (("idxl", "--N", "4", "--p", "1"), "p must be"),
    (("idxl", "--N", "4", "--p", "8", "--f", "9"), "f must be"),
    (("idxl", "--N", "4", "--p", "8", "--rounding", "up"), "--rounding"),
    (("idxl", "--N", "4", "--p", "8", "--bogus"), "--bogus"),
    (("nosuch", "--N", "4", "--p", "8"), "nosuch"),
    (("idxl", "--N", "4", "--p", "8", "--sigma", "1"), "sigma"),
    (("idxl", "--N", "4", "--p", "8", "--engine", "cvc9"), "--engine"),
    (("idxl", "--N", "4", "--p", "8", "--max-counterexamples", "0"), "max-counterexamples"),
    (("idxl", "--N", "4", "--p", "8", "--stop", "999999"), "range"),
    (("sweep", "idxl", "--N", "2..x", "--p", "3..5"), "--N"),
    (("check", "/nonexistent"), "does not exist"),
    (("idxl", "--N", "4", "--p", "8", "--workers", "0"), "--workers"),
    (("idxl", "--N", "4", "--p", "8", "--timeout", "-1"), "--timeout"),
    (("export", "idxl", "--N", "4", "-o", "/nonexistent/m.npz"), "the directory /nonexistent does not exist"),
    (("sweep", "idxl", "--N", "2..8:0", "--p", "3"), "--N '2..8:0': the step must be >= 1"),
    (("sweep", "idxl", "--N", "8..2", "--p", "3"), "the range 8..2 is empty"),
    (("sweep", "idxl", "--N", "2", "--p", "3:2"), "a step needs a range"),
    (("sweep", "idxl", "--N", "2", "--p", "1..100000"), "more than 10,000 values"),
    (("idxl", "--N", "4", "--p", "8", "--plot", "x.png"), "it is an option of verify separation, sweep"),
    (("certificate", "icqa", "--N", "2", "--seed", "1"), "no such option: --seed"),
    (("tracr", "lib:make_length", "--vocab", "a,b", "--max-len", "2", "--p", "4..6", "--start", "1"),
     "--start: a single run's options"),
    (("sweep", "idxl", "--N", "2", "--p", "3", "-o", "/nonexistent/x.csv"), "cannot create /nonexistent/x.csv"),
])
def test_bad_input_is_one_line_exit_2(capsys, args, message):
    code, out, err = run(capsys, *args)
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and message in err and "Traceback" not in err


def test_export_run_roundtrip_and_no_overwrite(capsys, tmp_path):
    path = tmp_path / "idxl6.npz"
    code, out, _ = run(capsys, "export", "idxl", "--N", "6", "-o", str(path))
    assert code == 0 and path.exists()
    code, out, _ = run(capsys, "run", "--model", str(path), "--task", "idxl", "--N", "6", "--p", "10", "--json")
    assert code == 0 and json.loads(out)["verdict"] == "proved"
    original = path.read_bytes()
    code, _, err = run(capsys, "export", "idxl", "--N", "4", "-o", str(path))
    assert code == 2 and "refusing to overwrite" in err and path.read_bytes() == original
    code, _, err = run(capsys, "run", "--model", str(path), "--task", "idxl", "--N", "7", "--p", "10")
    assert code == 2 and "tokens" in err
    rnn = tmp_path / "dyck-rec.npz"  # a recurrent construction (it has no int8 scales to mention)
    code, out, err = run(capsys, "export", "dyck22", "--N", "8", "--variant", "recurrent", "-o", str(rnn))
    assert code == 0 and out.startswith(f"wrote {rnn}: dyck22 construction (recurrent variant)"), err


def _write(path, **arrays):
    with open(path, "wb") as fh:
        np.savez(fh, **arrays)


def _arrays(model):
    arrays = dict(model.named_arrays())
    arrays["P_mask"] = model.P_mask
    return arrays


@pytest.mark.parametrize("corrupt,message", [
    ("shape", "array 'L0.H0.W_K' has shape (3, 9), expected (4, 9)"),
    ("missing", "array 'L0.W_O' is missing"),
    ("meta", "'meta' is not valid JSON"),
    ("nometa", "no 'meta' array"),
    ("nan", "non-finite"),
    ("text", "not a .npz"),
    ("pickle", "not a readable .npz"),
])
def test_malformed_model_files(capsys, tmp_path, corrupt, message):
    model = build(4)
    good = tmp_path / "good.npz"
    verifier.save_model(model, good)
    path = tmp_path / "bad.npz"
    with np.load(good) as z:
        arrays = {k: z[k] for k in z.files}
    if corrupt == "shape":  # the exact values too (index lookup's key map is rational)
        for name in ("L0.H0.W_K", "L0.H0.W_K.exact"):
            arrays[name] = arrays[name][:3]
    elif corrupt == "missing":
        del arrays["L0.W_O"]
    elif corrupt == "meta":
        arrays["meta"] = np.array("{not json")
    elif corrupt == "nometa":
        del arrays["meta"]
    elif corrupt == "nan":
        arrays.pop("E.exact", None)  # the float64 array alone
        arrays["E"] = arrays["E"].copy()
        arrays["E"][0, 0] = np.nan
    elif corrupt == "pickle":
        arrays["E"] = np.array([{"x": 1}], dtype=object)
    if corrupt == "text":
        path.write_text("hello")
    else:
        with open(path, "wb") as fh:
            np.savez(fh, **arrays)
    code, _, err = run(capsys, "run", "--model", str(path), "--task", "idxl", "--N", "4", "--p", "10")
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err


def test_check_specs_table_and_failure(capsys, tmp_path):
    (tmp_path / "good.toml").write_text('task = "idxl"\nN = 4\np = 10\nexpect = "proved"\n')
    code, out, _ = run(capsys, "check", str(tmp_path))
    assert code == 0 and "1 of 1 specs" in out
    (tmp_path / "wrong.toml").write_text('task = "idxl"\nN = 4\np = 10\neta = 0.3\nexpect = "proved"\n')
    code, out, _ = run(capsys, "check", str(tmp_path))
    assert code == 1 and "FAIL" in out and "wrong" in out
    (tmp_path / "bad.toml").write_text('task = "idxl"\nN = 4\nexpect = "proved"\n')
    code, _, err = run(capsys, "check", str(tmp_path))
    assert code == 2 and "missing key 'p'" in err


def test_sweep_writes_table_and_fit(capsys, tmp_path):
    out_file = tmp_path / "frontier.csv"
    code, out, _ = run(capsys, "sweep", "idxl", "--N", "2..4", "--p", "3..7", "-o", str(out_file))
    assert code == 0 and "Fit: p* =" in out
    rows = out_file.read_text().splitlines()
    assert rows[0].startswith("N,log2_N,p_star") and len(rows) == 4
    code, _, err = run(capsys, "sweep", "idxl", "--N", "2..4", "--p", "3..7", "-o", str(out_file))
    assert code == 2 and "refusing to overwrite" in err


def test_list(capsys):
    code, out, _ = run(capsys, "list")
    assert code == 0 and "index_lookup (idxl)" in out and "Theorem 1" in out


@pytest.mark.slow
def test_smt_engine_from_the_cli(capsys):
    code, out, _ = run(capsys, "idxl", "--N", "10", "--p", "12", "--sigma", "64", "--engine", "smt", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["verdict"] == "proved" and doc["engine"] == "smt"
    assert doc["engine_stats"]["cases"] == 55 and doc["inputs"]["covered"] == doc["inputs"]["total"]
    code, out, _ = run(capsys, "idxl", "--N", "6", "--p", "12", "--sigma", "64", "--eta", "1", "--engine", "smt")
    assert code == 1 and "counterexample" in out and "z3" in out
    code, _, err = run(capsys, "idxl", "--N", "6", "--p", "12", "--engine", "smt", "--start", "5")
    assert code == 2 and "smt engine decides whole cases" in err


# -- issue 24: one vocabulary -------------------------------------------------------------------------------
@pytest.mark.parametrize("text,values", [("5", [5]), ("4..8", [4, 5, 6, 7, 8]), ("4..64:20", [4, 24, 44, 64]),
                                         ("4,8,16", [4, 8, 16]), ("16,4,8,4", [4, 8, 16]), ("2..6:2,9", [2, 4, 6, 9]),
                                         (" 3 .. 5 ", [3, 4, 5])])
def test_a_range_is_a_value_a_stepped_range_or_a_list(text, values):
    from verifier.runs.sweep import parse_range
    assert parse_range(text, "--N") == values


def test_a_sweep_checks_every_N_before_any_run(capsys):
    code, out, err = run(capsys, "sweep", "equality", "--N", "4..64", "--p", "4..16", "--scheduler", "serial",
                         "--no-cache")  # before the fix: the N = 4 runs' lines, then this error
    assert code == 2 and out == "" and err.strip() == "verify: error: N = 5: equality needs an even N >= 2 (two " \
                                                       "halves), got 5"
    code, out, _ = run(capsys, "sweep", "equality", "--N", "4..8:4", "--p", "6,9", "--scheduler", "serial",
                       "--no-cache", "--json")
    assert code == 0 and [r["N"] for r in json.loads(out)["rows"]] == [4, 8]


def test_version_and_a_bare_verify(capsys):
    code, out, err = run(capsys, "--version")
    assert code == 0 and out.startswith("verify ") and out.split()[1][0].isdigit() and err == ""
    code, out, err = run(capsys)
    assert code == 0 and out.startswith("Usage: verify") and "sweep" in out and err == ""


def test_one_name_per_meaning():
    """The same option name means one thing on every command."""
    meanings = {}
    for command in cli.cli.commands.values():
        for p in command.params:
            for opt in p.opts:
                meanings.setdefault(opt, set()).add(p.name)
    # --k is T's width (a range on sweep); a task's size is --N (icqa and ictm too); a run's own cluster is --cluster
    assert meanings["--k"] == {"k", "k_range"} and meanings["--N"] == {"N", "N_range"}
    assert meanings["--seed"] == {"seed"} and "--seed" not in {o for p in cli.cli.commands["certificate"].params
                                                             for o in p.opts}
    assert not ({"--n", "--N"} <= {o for p in cli.cli.commands["composition"].params for o in p.opts})
    helps = {(o, p.help) for c in cli.cli.commands.values() for p in c.params for o in p.opts
             if o in ("--scheduler", "--timeout", "--run-timeout") and isinstance(p, cli.click.Option)}
    scheduler = {h for o, h in helps if o == "--scheduler"}
    assert len(scheduler) == 1 and "serial" in next(iter(scheduler))
    assert all("each run" not in h for o, h in helps if o == "--timeout")
    assert all("each run" in h for o, h in helps if o == "--run-timeout")


def test_force_replaces_what_the_user_names_and_nothing_by_default(capsys, tmp_path):
    model, page, verdict = tmp_path / "m.npz", tmp_path / "r.html", tmp_path / "v.json"
    assert run(capsys, "export", "idxl", "--N", "4", "-o", str(model))[0] == 0
    code, _, err = run(capsys, "export", "idxl", "--N", "6", "-o", str(model))
    assert code == 2 and err.strip() == f"verify: error: {model} exists; refusing to overwrite it (--force replaces it)"
    assert verifier.load_model(model).info["N"] == 4
    assert run(capsys, "export", "idxl", "--N", "6", "-o", str(model), "--force")[0] == 0
    assert verifier.load_model(model).info["N"] == 6 and [p.name for p in tmp_path.iterdir()] == ["m.npz"]
    verdict.write_text(run(capsys, "idxl", "--N", "4", "--p", "8", "--json")[1])
    page.write_text("mine")
    assert run(capsys, "report", str(verdict), "-o", str(page))[0] == 2 and page.read_text() == "mine"
    assert run(capsys, "report", str(verdict), "-o", str(page), "--force")[0] == 0 and "<html" in page.read_text()
    (tmp_path / "d.html").mkdir()  # a directory is never replaced
    code, _, err = run(capsys, "report", str(verdict), "-o", str(tmp_path / "d.html"), "--force")
    assert code == 2 and "d.html' is a directory" in err and (tmp_path / "d.html").is_dir()
    with pytest.raises(verifier.InputError, match="is a directory"):
        verifier.save_model(verifier.load_model(model), tmp_path / "d.html", force=True)


def test_check_and_sweep_say_k_of_n_and_keep_saying_it_when_not_on_a_terminal(capsys, tmp_path, monkeypatch):
    """Output redirected (stderr is no terminal under pytest): the overall line every HEARTBEAT
    seconds while a spec runs, not only when one finishes (check printed nothing for 400 s).  The
    first spec's build waits for a beat, so the test does not depend on how fast the machine is."""
    monkeypatch.setattr(cli, "HEARTBEAT", 0.2)
    beaten = threading.Event()
    write = cli.StatusLine.write
    monkeypatch.setattr(cli.StatusLine, "write", lambda self, text: (write(self, text), beaten.set()))
    build = specs._build
    monkeypatch.setattr(specs, "_build", lambda spec: (beaten.wait(30), build(spec))[1])
    spec = tmp_path / "slow.toml"
    spec.write_text('task = "idxl"\nN = 4\np = 12\nengine = "exhaustive"\nexpect = "proved"\n')
    fast = tmp_path / "fast.toml"
    fast.write_text('task = "idxl"\nN = 4\np = 12\nengine = "exhaustive"\nexpect = "proved"\n')
    code, out, err = run(capsys, "check", str(spec), str(fast), "--scheduler", "serial", "--no-cache")
    assert code == 0 and "2 of 2 specs got the expected verdict" in out
    beats = [line for line in err.splitlines() if " specs decided in " in line]
    assert beats and beats[0].startswith("0 of 2 specs decided in ")
    code, out, err = run(capsys, "sweep", "idxl", "--N", "2..3", "--p", "4,6", "--scheduler", "serial", "--no-cache")
    lines = [line for line in err.splitlines() if line.startswith("N=")]
    assert code == 0 and len(lines) == 4 and lines[-1].endswith("  [4 of 4]")
    assert re.search(r"  \[1 of 4, about \d+ s left\]$", lines[0])


def test_json_on_every_command_that_prints_a_result(capsys, tmp_path):
    code, out, _ = run(capsys, "list", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["index_lookup"]["aliases"] == ["idxl"] and doc["reference"]["construction"] is None
    assert doc["composition"]["options"] == ["--depth", "--coord-size"]
    cert = tmp_path / "c.json"
    assert run(capsys, "certificate", "icqa", "--N", "2", "-o", str(cert))[0] == 0
    code, out, _ = run(capsys, "check-certificate", str(cert), "--json")
    assert code == 0 and json.loads(out) == {"path": str(cert), "valid": True, "problems": []}
    printed = {n for n, c in cli.cli.commands.items() if n not in ("export", "import", "plot", "report", "schema")}
    assert all("--json" in {o for p in cli.cli.commands[n].params for o in p.opts} for n in printed)
