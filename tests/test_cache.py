"""The verdict cache keys a run by the bytes it read and checks every row it uses; a cache that is
read-only, or another program's database, loses no work and is never changed; every file verify
writes appears whole or not at all (issue 21, items 11 and 14)."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import run
from test_answers import constant_model

import verifier
from verifier.runs.cache import FORMAT_1, Cache, run_key
from verifier.runs.cluster import Cluster, Job
from verifier.support import files as files_mod
from verifier.support.errors import InputError

ROOT = Path(__file__).resolve().parent.parent
RIGHT = [{"input": ["a"], "answer": "a"}, {"input": ["b"], "answer": "a"}]  # a model that always says a is right
WRONG = [{"input": ["a"], "answer": "a"}, {"input": ["b"], "answer": "b"}]  # and wrong on b


def write_rows(path: Path, rows: list) -> None:
    path.write_text("\n".join(map(json.dumps, rows)) + "\n")


def dataset_problem(path: Path):
    return verifier.build_problem("dataset", N=1, p=8, dataset=str(path), vocab="a,b", classes="a,b",
                                  model=constant_model(["a", "b"], 1, positions="last"))


# -- item 11: the key is what the run read ------------------------------------------------------------
def test_a_file_replaced_while_a_sweep_reads_it_never_gives_a_cached_verdict_for_the_new_bytes(tmp_path):
    data = tmp_path / "d.jsonl"
    write_rows(data, RIGHT)

    def build_then_replaced():
        problem = dataset_problem(data)
        write_rows(data, WRONG)  # replaced after the run read it, before its verdict is stored
        return problem

    db = tmp_path / "c.sqlite"
    with Cluster("serial") as cluster:
        assert [v.verdict for _, v in cluster.decide([Job(build_then_replaced, "exhaustive")], Cache(db))] == ["proved"]
    with Cluster("serial") as cluster:
        again = [v for _, v in cluster.decide([Job(functools.partial(dataset_problem, data), "exhaustive")], Cache(db))]
    assert [(v.verdict, v.cached) for v in again] == [("refuted", False)]


@pytest.mark.parametrize("task,option,before,after", [
    ("dataset", "dataset", "\n".join(map(json.dumps, RIGHT)), "\n".join(map(json.dumps, WRONG))),
    ("memorization", "dataset", '{"alphabet": ["a", "b"], "sequences": [["a", "b"], ["b", "b"]]}',
     '{"alphabet": ["a", "b"], "sequences": [["b", "b"], ["a", "b"]]}'),
    ("sparse_threshold", "instance", '{"b": 0, "features": [{"I": [1], "g": [0, 1]}]}',
     '{"b": 0, "features": [{"I": [1], "g": [1, 0]}]}')])
def test_a_task_read_from_a_file_is_keyed_by_the_bytes_it_read(tmp_path, task, option, before, after):
    path = tmp_path / "f.json"
    path.write_text(before)
    opts = dict(N=1 if task == "dataset" else 2, vocab="a,b", classes="a,b") if task == "dataset" else dict(N=2)
    task_obj = verifier.tasks.make_task(task, **opts, **{option: str(path)})
    described = task_obj.describe()
    path.write_text(after)  # the object holds what it read: its description does not change
    assert task_obj.describe() == described
    assert described[f"{option}_sha256"] == hashlib.sha256(before.encode()).hexdigest()
    assert verifier.tasks.make_task(task, **opts, **{option: str(path)}).describe() != described


# -- item 11: a row is checked before it is used ----------------------------------------------------------
def _edit(db: Path, change, recompute_digest: bool = False) -> None:
    """Apply `change` to the JSON result of every row; optionally store a matching digest (a forger's edit)."""
    con = sqlite3.connect(db)
    for key, what, text in con.execute("SELECT key, what, result FROM runs").fetchall():
        doc = json.loads(text)
        change(doc)
        new = json.dumps(doc)
        digest = hashlib.sha256("\n".join((key, what, new)).encode()).hexdigest() if recompute_digest else None
        con.execute("UPDATE runs SET result = ?" + (", digest = ?" if digest else "") + " WHERE key = ?",
                    (new, digest, key) if digest else (new, key))
    con.commit()


def _prove_to_proved(doc):
    doc["verdict"], doc["counterexamples"] = "proved", []


def _to_a_right_input(doc):  # the counterexample moved to an input the model gets right (index 0: 'a')
    doc["counterexamples"][0].update(index=0, tokens=[0], input="a")


@pytest.mark.parametrize("change,forged,why", [
    (_prove_to_proved, False, "does not match its digest"),
    (lambda doc: doc.update(verdict="proved"), True, "says proved beside counterexamples"),
    (_to_a_right_input, True, "which the model does not fail"),
    (lambda doc: doc["counterexamples"][0].update(produced="b"), True, "fails otherwise"),
    (lambda doc: doc["counterexamples"][0].update(index=7), True, "outside the range"),
    (lambda doc: doc.pop("inputs"), True, "cannot be read (KeyError"),
])
def test_an_edited_row_is_never_trusted(tmp_path, change, forged, why):
    data, db = tmp_path / "d.jsonl", tmp_path / "c.sqlite"
    write_rows(data, WRONG)
    problem = dataset_problem(data)
    key = run_key(problem, "exhaustive")
    Cache(db).put(key, verifier.run(problem, "exhaustive"))
    back = Cache(db).get(key, problem)
    assert back.verdict == "refuted" and back.cached and back.summary().startswith("REFUTED (cached): ")
    _edit(db, change, forged)
    warnings = []
    cache = Cache(db, warn=warnings.append)
    assert cache.get(key, problem) is None and cache.rejected == 1 and cache.hits == 0
    assert len(warnings) == 1 and why in warnings[0] and "not used, deciding the run again" in warnings[0]


def test_an_edited_row_is_decided_again_and_replaced(tmp_path, capsys):
    db = tmp_path / "c.sqlite"
    sweep = ["sweep", "idxl", "--N", "6", "--p", "12", "--eta", "0.5", "--cache", db, "--scheduler", "serial"]
    code, _, err = run(capsys, *sweep)
    assert code == 0 and "N=6 p=12: refuted (" in err
    _edit(db, _prove_to_proved)
    code, _, err = run(capsys, *sweep)
    assert "does not match its digest: not used" in err and "N=6 p=12: refuted (" in err and "cached" not in err
    code, _, err = run(capsys, *sweep)  # the row was replaced by the verdict decided again
    assert "N=6 p=12: refuted (cached)" in err and "warning" not in err


# -- item 14: a cache that cannot be written, another program's database --------------------------------
@pytest.fixture
def read_only(tmp_path):
    """Make a file read-only, as root too (chattr +i); skip where neither works."""
    made = []

    def make(path: Path) -> None:
        if os.geteuid() != 0:
            path.chmod(0o444)
            path.parent.chmod(0o555)  # no journal beside it either
        elif subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode != 0:
            pytest.skip("cannot make a file read-only for root here (chattr +i)")
        made.append(path)

    yield make
    for path in made:
        if os.geteuid() == 0:
            subprocess.run(["chattr", "-i", str(path)], capture_output=True)
        else:
            path.parent.chmod(0o755)
            path.chmod(0o644)


def test_a_read_only_cache_warns_once_and_the_sweep_keeps_its_table(tmp_path, capsys, read_only):
    db = tmp_path / "c.sqlite"
    sweep = ["sweep", "idxl", "--N", "2..3", "--p", "4..5", "--scheduler", "serial", "--cache", db]
    assert run(capsys, *sweep[:-4], "--p", "4", "--scheduler", "serial", "--cache", db)[0] == 0  # one row
    read_only(db)
    code, out, err = run(capsys, *sweep)
    assert code == 0 and "| 2 | 1.00 | 5 |" in out and "| 3 | 1.58 | 4 |" in out, err
    assert err.count("warning") == 1 and "cannot be written" in err and "verdicts are not stored" in err
    assert "N=2 p=4: refuted (cached)" in err  # and what it holds is still read


def test_another_programs_database_is_refused_and_left_alone(tmp_path, capsys):
    db = tmp_path / "notes.sqlite"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE notes (id INTEGER, body TEXT)")
    con.execute("INSERT INTO notes VALUES (1, 'mine')")
    con.commit()
    con.close()
    before = db.read_bytes()
    code, out, err = run(capsys, "sweep", "idxl", "--N", "2", "--p", "4", "--scheduler", "serial", "--cache", db)
    assert code == 2 and out == "" and err.strip() == (
        f"verify: error: cache {db} is not a verdict cache of this verify (it holds the tables notes): refusing to "
        f"change another program's database")
    assert db.read_bytes() == before


def test_a_cache_of_the_earlier_format_is_emptied_and_upgraded(tmp_path):
    db = tmp_path / "c.sqlite"
    con = sqlite3.connect(db)
    con.execute(f"CREATE TABLE runs ({', '.join(c + ' TEXT' for c in FORMAT_1['runs'])})")
    con.execute("INSERT INTO runs VALUES ('k', '{}', '{}', '0')")
    con.commit()
    con.close()
    problem = verifier.build_problem("idxl", N=4, p=8)
    cache = Cache(db)
    cache.put(run_key(problem, "auto"), verifier.run(problem))
    assert cache.stored == 1 and Cache(db).get(run_key(problem, "auto"), problem).cached


# -- item 14: every file appears whole or not at all ------------------------------------------------------
def _writers(tmp_path: Path) -> dict:
    from verifier.importers.safetensors import write_safetensors
    from verifier.outputs.dump import write_dumps
    from verifier.outputs.plots import frontier_figure
    from verifier.outputs.plots import save as save_figure
    from verifier.refute.certificates import find_certificate
    from verifier.refute.certificates import save as save_certificate
    problem = verifier.build_problem("idxl", N=4, p=12, eta=0.5)
    refuted = verifier.run(problem)
    sweep = verifier.runs.sweep.frontier("idxl", [2, 3], [4, 5], scheduler="serial").to_json()
    cert = find_certificate(verifier.tasks.make_task("icqa", 2, nq=2, na=2))
    return {"model": lambda p: verifier.save_model(problem.model, p),
            "certificate": lambda p: save_certificate(cert, str(p)),
            "figure": lambda p: save_figure(frontier_figure([sweep]), p.with_suffix(".png")),
            "safetensors": lambda p: write_safetensors(p, {"w": np.ones(3)}),
            "dump": lambda p: write_dumps(refuted, p.parent),
            "sweep table": lambda p: run_cli("sweep", "idxl", "--N", "2", "--p", "4", "--scheduler", "serial",
                                             "--no-cache", "-o", p.with_suffix(".json")),
            "report": lambda p: run_cli("report", _verdict_file(tmp_path, refuted), "-o", p.with_suffix(".html"))}


def run_cli(*args):
    import cli
    return cli.main([str(a) for a in args])


def _verdict_file(tmp_path: Path, result) -> Path:
    path = tmp_path / "verdict.json"
    if not path.exists():
        path.write_text(json.dumps(result.to_json()))
    return path


@pytest.mark.slow
@pytest.mark.parametrize("writer", ["model", "certificate", "figure", "safetensors", "dump", "sweep table", "report"])
def test_a_write_that_is_interrupted_leaves_nothing_and_the_rerun_writes_it(tmp_path, monkeypatch, writer):
    pytest.importorskip("matplotlib")
    write = _writers(tmp_path)[writer]
    out = tmp_path / "out" / "x.npz"
    out.parent.mkdir()

    def interrupted(fd):
        raise KeyboardInterrupt  # Ctrl-C once the bytes are written, before the file has its name

    with monkeypatch.context() as m:
        m.setattr(files_mod.os, "fsync", interrupted)
        try:
            code = write(out)
        except KeyboardInterrupt:
            code = "interrupted"
    assert code in ("interrupted", 3) and list(out.parent.iterdir()) == []
    write(out)
    made = list(out.parent.iterdir())
    assert len(made) == 1 and not made[0].name.startswith(".") and made[0].stat().st_size > 0


@pytest.mark.slow
def test_ctrl_c_during_export_leaves_no_truncated_model(tmp_path):
    """A model large enough to take a while to write (31 MB): Ctrl-C once its bytes start to appear."""
    out = tmp_path / "big.npz"
    cmd = [sys.executable, str(ROOT / "cli.py"), "export", "idxl", "--N", "1500", "-o", str(out)]
    proc = subprocess.Popen(cmd, cwd=tmp_path, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    while not any(p.suffix in (".npz", ".part") and p.stat().st_size > 0 for p in tmp_path.iterdir()):
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.002)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 3 and "interrupted (Ctrl-C)" in err, err
    assert list(tmp_path.iterdir()) == []
    again = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and out.exists()
    assert verifier.load_model(out).d == 939


def test_new_file_never_overwrites_and_checks_the_name_before_the_work(tmp_path):
    path = tmp_path / "x.txt"
    path.write_text("mine")
    with pytest.raises(InputError, match="exists; refusing to overwrite it"):
        with files_mod.new_file(path):
            raise AssertionError("the block must not run")
    with pytest.raises(InputError, match="cannot create"):
        with files_mod.new_file(tmp_path / "missing" / "x.txt"):
            raise AssertionError("the block must not run")
    with pytest.raises(InputError, match="exists; refusing to overwrite it"):
        with files_mod.new_file(tmp_path / "y.txt") as fh:
            fh.write("late")
            (tmp_path / "y.txt").write_text("someone else's")  # the name taken while it was written
    assert path.read_text() == "mine" and (tmp_path / "y.txt").read_text() == "someone else's"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.txt", "y.txt"]
