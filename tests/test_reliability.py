"""Never a wrong PROVED: the reproducers of the wrong proofs found by fuzzing, and the guards that
close their class (checked constants, the sample check of symbolic proofs, shape agreement,
checks that run nothing, deadlines, interruptions, resource bounds)."""

import json
import os
import signal
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import z3
from helpers import edit_model_file, run

import verifier
from verifier.arithmetic import FixedPoint
from verifier.engines.smt import Smt
from verifier.evaluator import Evaluator
from verifier.smt.encoding import encode, threshold_code
from verifier.smt.symbolic import SymFX
from verifier.support.budget import Deadline, TimedOut
from verifier.support.errors import InputError, InternalError

ROOT = Path(__file__).resolve().parents[1]


def export(capsys, tmp_path, name, *args) -> Path:
    path = tmp_path / name
    code, _, err = run(capsys, "export", *args, "-o", path)
    assert code == 0, err
    return path


def verdict(capsys, *args, engine):
    code, out, err = run(capsys, *args, "--engine", engine, "--json")
    assert code in (0, 1), err
    return json.loads(out)


# -- the three wrong proofs -----------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("N,theta,engines", [(24, 2 ** 29, ("auto", "smt", "smt-int")),
                                             (8, 1e300, ("smt", "smt-int", "exhaustive"))])
def test_threshold_beyond_the_bit_vector_width_is_refuted(capsys, tmp_path, N, theta, engines):
    """theta is compared exactly, never wrapped modulo 2^width: every engine refutes."""
    src = export(capsys, tmp_path, "eq.npz", "equality", "--N", N)
    def set_theta(meta):  # theta alone: the exported threshold 0 is an exact rational too
        meta["readout"].pop("theta_exact", None)
        meta["readout"].update(theta=theta)

    path = edit_model_file(src, tmp_path / "eq_theta.npz", meta=set_theta)
    args = ("run", "--model", path, "--task", "equality", "--N", N, "--p", 12)
    for engine in engines:
        doc = verdict(capsys, *args, engine=engine)
        assert doc["verdict"] == "refuted", engine
        assert doc["counterexamples"][0]["expected"] == "1 (equal)"
    stop = verdict(capsys, *args, "--stop", 10, engine="exhaustive")
    assert stop["counterexamples"][0]["input"] == " ".join(["0"] * N)


def test_instance_b_beyond_the_width_is_refuted(capsys, tmp_path):
    """b = 2^35 against a model built for b = 0: the sum of features can never exceed b."""
    features = [{"I": [1], "g": [0, 1]}, {"I": [2], "g": [0, 1]}]  # two bits: the formula reaches z3
    (tmp_path / "b0.json").write_text(json.dumps({"b": 0, "features": features}))
    (tmp_path / "big.json").write_text(json.dumps({"b": 2 ** 35, "features": features}))
    model = export(capsys, tmp_path, "st.npz", "sparse_threshold", "--N", 8, "--instance", tmp_path / "b0.json")
    args = ("run", "--model", model, "--task", "sparse_threshold", "--N", 8, "--p", 12,
            "--instance", tmp_path / "big.json")
    for engine in ("smt", "smt-int", "exhaustive"):
        doc = verdict(capsys, *args, engine=engine)
        assert doc["verdict"] == "refuted" and doc["counterexamples"][0]["expected"] == "0", engine


def test_empty_readout_is_an_input_error(capsys, tmp_path):
    src = export(capsys, tmp_path, "eq.npz", "equality", "--N", 8)

    def empty(a):
        a.pop("U.W.exact"), a.pop("U.b.exact")  # the exported readout is exact; the float64 arrays alone
        a["U.W"], a["U.b"] = np.zeros((0, a["E"].shape[1])), np.zeros(0)

    path = edit_model_file(src, tmp_path / "empty.npz", arrays=empty)
    for engine in ("auto", "smt", "smt-int", "exhaustive"):
        code, _, err = run(capsys, "run", "--model", path, "--task", "equality", "--N", 8, "--p", 12,
                           "--engine", engine)
        assert code == 2 and "'U.W' has no rows" in err and len(err.splitlines()) == 1
    model = verifier.load_model(src)
    model.readout.W_U, model.readout.b_U = np.zeros((0, model.d)), np.zeros(0)
    with pytest.raises(verifier.InputError, match="no rows"):
        verifier.build_problem("equality", N=8, p=12, model=model)


def test_readout_rows_must_match_the_task(capsys, tmp_path):
    src = export(capsys, tmp_path, "eq.npz", "equality", "--N", 8)
    path = edit_model_file(src, tmp_path / "wide.npz", arrays=lambda a: a.update({
        "U.W": np.vstack([a["U.W"], a["U.W"]]), "U.b": np.concatenate([a["U.b"], a["U.b"]]),
        "U.W.exact": np.vstack([a["U.W.exact"]] * 2), "U.b.exact": np.concatenate([a["U.b.exact"]] * 2)}))
    code, _, err = run(capsys, "run", "--model", path, "--task", "equality", "--N", 8, "--p", 12)
    assert code == 2 and "one per output bit (1)" in err


@pytest.mark.parametrize("profiles", ['"ci"', "[]", '["ci", "ci"]', '["nightly"]'])
def test_spec_profiles_are_checked(capsys, tmp_path, profiles):
    (tmp_path / "x.toml").write_text(f'task = "idxl"\nN = 4\np = 10\nexpect = "proved"\nprofiles = {profiles}\n')
    code, out, err = run(capsys, "check", tmp_path / "x.toml", "--profile", "ci")
    assert code == 2 and "profiles" in err and "0 of 0" not in out


def test_a_check_that_selects_nothing_fails_and_skips_are_reported(capsys, tmp_path):
    (tmp_path / "full.toml").write_text('task = "idxl"\nN = 4\np = 10\nexpect = "proved"\nprofiles = ["full"]\n')
    code, _, err = run(capsys, "check", tmp_path, "--profile", "ci")
    assert code == 2 and "no spec is in profile 'ci'" in err
    (tmp_path / "both.toml").write_text('task = "idxl"\nN = 4\np = 10\nexpect = "proved"\n')
    code, out, _ = run(capsys, "check", tmp_path, "--profile", "ci")
    assert code == 0 and "skipped (not in profile ci): full" in out and "1 of 1 specs" in out


# -- the guards ------------------------------------------------------------------------------------
def test_constants_that_do_not_fit_the_width_are_internal_errors():
    S = SymFX(FixedPoint(8), [np.arange(3)] * 2, width=12)
    assert S.num(2047).size() == 12 and S.num(-2048).as_signed_long() == -2048
    for v in (2048, -2049, 2 ** 40):
        with pytest.raises(InternalError, match="does not fit the 12-bit encoding"):
            S.num(v)
    assert SymFX(FixedPoint(8), [np.arange(3)], width=12, theory="int").num(2 ** 40).as_long() == 2 ** 40


def test_threshold_code_is_exact():
    """code > threshold_code(theta)  <=>  code 2^-f > theta, for every code and awkward thetas."""
    rng = np.random.default_rng(0)
    for p, f in [(4, 2), (8, 4), (12, 6), (12, 11), (31, 15)]:
        fx = FixedPoint(p, f)
        thetas = [0.0, -0.0, 1e300, -1e300, 2.0 ** 29, 5e-324, -5e-324, fx.hi / fx.one, fx.lo / fx.one,
                  (fx.lo - 1) / fx.one, 1 / 3] + list(rng.normal(0, 4, 20))
        near = [*range(fx.lo, fx.lo + 40), *range(fx.hi - 40, fx.hi + 1), *range(-40, 41)]
        codes = sorted({c for c in near if fx.lo <= c <= fx.hi})  # the codes a readout can hold
        for theta in thetas:
            c = threshold_code(theta, fx)
            assert fx.lo - 1 <= c <= fx.hi
            for code in codes:
                assert (code > c) == (Fraction(code, fx.one) > Fraction(theta)), (p, f, theta, code)


@pytest.mark.slow
def test_a_wrong_symbolic_proof_is_caught_by_the_sample_check(monkeypatch):
    """If the solver claimed UNSAT for a failing case, the sample check withdraws the proof."""
    problem = verifier.build_problem("idxl", N=6, p=12, sigma=64, eta=1.0)
    monkeypatch.setattr(Smt, "_solve", staticmethod(lambda enc, want, left, totals, *solver: ([], "unsat")))
    with pytest.raises(InternalError, match=r"the proof of case n=\d+, p=\d+ is contradicted by the evaluator"):
        verifier.run(problem, "smt")


@pytest.mark.parametrize("engine", ["smt", "bounds"])
def test_symbolic_proofs_report_their_sample_check(engine):
    result = verifier.prove("idxl", N=8, p=12, sigma=64, engine=engine)
    check = result.engine_stats["sample_check"]
    assert result.verdict == "proved" and result.engine == engine
    assert check["cases"] == check["of_cases"] == 36 and check["inputs"] >= 36 * 8
    assert "sampled inputs" in result.summary()
    assert "sample_check" not in verifier.prove("idxl", N=4, p=12).engine_stats  # enumeration checks itself


def test_the_deadline_bounds_an_encoding_and_the_build():
    problem = verifier.build_problem("equality", N=16, p=12)
    ev = Evaluator(problem.model, problem.arith)
    expired = Deadline(1e-9)
    time.sleep(0.01)
    with pytest.raises(TimedOut):
        encode(ev, next(problem.task.cases()), "bv", expired)
    result = verifier.prove("equality", N=16, p=12, engine="smt", timeout=1e-9)
    assert result.verdict == "unknown" and result.status == "timeout" and result.covered == 0
    assert "timeout after 1e-09 s" in result.reason


def test_a_solver_interruption_is_not_a_solver_unknown(monkeypatch):
    """z3 answers unknown when it catches Ctrl-C; that is an interruption, not the solver giving up."""
    monkeypatch.setattr(z3.Solver, "check", lambda self, *a: z3.unknown)
    monkeypatch.setattr(z3.Solver, "reason_unknown", lambda self: "interrupted from keyboard")
    result = verifier.prove("idxl", N=6, p=12, sigma=64, eta=1.0, engine="smt", solver="z3")  # z3's own Ctrl-C
    assert result.verdict == "unknown" and result.status == "interrupted" and "interrupted" in result.reason
    monkeypatch.setattr(z3.Solver, "reason_unknown", lambda self: "(incomplete (theory arithmetic))")
    # a correct model: the falsification pass before the unknown finds nothing (idxl at eta = 1 fails)
    result = verifier.prove("equality", N=8, p=12, engine="smt", solver="z3")
    assert result.verdict == "unknown" and result.status == "incomplete"
    assert "solver answered unknown ((incomplete" in result.reason


# -- signals: the verdict is unknown, exit 3, no traceback from any process ------------------------
def _signalled(args, sig, wait):
    """Run the CLI as a background job would (SIGINT ignored, as a shell starts it), signal it after
    `wait` seconds, and return (exit code, stdout, stderr)."""
    proc = subprocess.Popen([sys.executable, str(ROOT / "cli.py"), *map(str, args)], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    time.sleep(wait)  # past start-up, inside a run that would take far longer
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert "Traceback" not in err, err
    return proc.returncode, out, err


@pytest.mark.slow
@pytest.mark.parametrize("args", [
    ("idxl", "--N", 16, "--p", 12, "--sigma", 3, "--engine", "exhaustive", "--workers", 2),  # a worker pool
    ("idxl", "--N", 6, "--p", 24, "--sigma", 64, "--engine", "smt"),  # inside a z3 solve
])
def test_sigterm_gives_unknown(args):
    code, out, _ = _signalled(args, signal.SIGTERM, 5)
    assert code == 3 and "UNKNOWN" in out and "interrupted (SIGTERM)" in out


@pytest.mark.slow
def test_sigterm_stops_a_sweep_with_a_partial_table(tmp_path):
    out_file = tmp_path / "f.csv"
    code, out, _ = _signalled(("sweep", "idxl", "--N", "15..16", "--sigma", 3, "--p", "12..14", "--engine",
                               "exhaustive", "-o", out_file), signal.SIGTERM, 5)
    assert code == 3 and "PARTIAL: interrupted (SIGTERM) with " in out and " of 6 runs decided" in out
    assert out_file.read_text().splitlines()[-1].endswith(",no")


# -- input that used to block, crash or be coerced -------------------------------------------------
def test_fifo_model_is_refused_without_blocking(capsys, tmp_path):
    fifo = tmp_path / "m.npz"
    os.mkfifo(fifo)
    code, _, err = run(capsys, "run", "--model", fifo, "--task", "idxl", "--N", 4, "--p", 10)
    assert code == 2 and "is not a regular file" in err


def test_errors_name_the_file_once(capsys, tmp_path):
    (tmp_path / "dir.npz").mkdir()
    (tmp_path / "s.toml").write_text('task = "idxl"\nN = 4\np = 10\nexpect = "proved"\nmodel = "dir.npz"\n')
    code, _, err = run(capsys, "check", tmp_path / "s.toml")
    assert code == 2 and err.count("dir.npz") == 1 and "is a directory" in err


def test_dump_directory_is_checked_before_the_run_and_names_never_run_out(capsys, tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("x")
    code, out, err = run(capsys, "idxl", "--N", 8, "--p", 12, "--eta", 0.5, "--dump", blocked / "sub")
    assert code == 2 and out == "" and "cannot create the directory (Not a directory)" in err
    dump = tmp_path / "d"
    args = ("idxl", "--N", 8, "--p", 12, "--eta", 0.5, "--dump", dump)
    first = run(capsys, *args)
    assert first[0] == 1
    for _ in range(3):  # the same counterexample again and again: each dump gets a new name
        assert run(capsys, *args)[0] == 1
    files = sorted(dump.iterdir())
    assert len(files) == 4 and len({f.read_text() for f in files}) == 1


@pytest.mark.parametrize("args,message", [
    (("idxl", "--N", 4, "--p", 10, "--timeout", "nan"), "not a finite number"),
    (("idxl", "--N", 4, "--p", 10, "--timeout", "0"), "not positive"),
    (("idxl", "--N", 4, "--p", 10, "--eta", "inf"), "not a finite number"),
    (("nearest_neighbour", "--N", 4, "--p", 10, "--gamma", "nan"), "not a finite number"),
    (("idxl", "--N", 4, "--p", 10, "--k", 3, "--seed", -1), "--seed must be an integer >= 0"),
    (("idxl", "--N", 4, "--p", 10, "--workers", 10 ** 6), "--workers 1000000 is more than"),
    (("idxl", "--N", 4, "--p", 10, "--max-counterexamples", 10 ** 9), "--max-counterexamples must be in"),
    (("idxl", "--N", 10 ** 9, "--p", 12), "of memory; this machine has"),
    (("idxl", "--N", 16, "--p", 12, "--k", 100000), "index_lookup with k=100000 needs about"),
    (("idxl", "--N", 4, "--p", 12, "--sigma", 10 ** 11), "of memory"),
    (("mqar", "--N", 8, "--p", 12, "--sigma", 10 ** 7), "of memory"),
    (("sweep", "idxl", "--N", "1..1000000000", "--p", "3..5"), "more than 10,000 values"),
    (("sweep", "idxl", "--N", "2..3", "--p", "29..33"), "p=32 is too wide"),
    (("sweep", "idxl", "--N", "2,3,100000000", "--p", "5"), "has 100,000,002 tokens; the verifier takes at most"),
])
def test_bad_sizes_and_numbers_are_refused_before_work(capsys, args, message):
    code, out, err = run(capsys, *args)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1 and out == "", err


@pytest.mark.parametrize("args,message", [
    (("refute", "idxl", "--N", 3, "--p", 8, "--random-models", 1, "--certificates", -5),
     "Invalid value for '--certificates': -5 is not in the range x>=0"),
    (("tracr", "lib:make_length", "--vocab", "a,b", "--max-len", 3, "--p", 8, "--mlp-exactness", -5),
     "Invalid value for '--mlp-exactness': -5 is not in the range x>=1"),
    (("idxl", "--N", 3, "--p", 8, "--engine", "exhaustive", "--smtlib"),
     "--smtlib writes the SMT engine's cases: it needs --engine smt, smt-bv, smt-int (not exhaustive)"),
    (("idxl", "--N", 3, "--p", 8, "--smtlib"), "it needs --engine smt, smt-bv, smt-int (not auto)"),
])
def test_options_that_would_do_nothing_are_refused(capsys, tmp_path, args, message):
    """A negative count, and an SMT-LIB directory for an engine that writes none, were taken silently."""
    args = args + ((tmp_path / "smtlib",) if args[-1] == "--smtlib" else ())
    code, out, err = run(capsys, *args)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1 and out == "", err
    assert not (tmp_path / "smtlib").exists()


@pytest.mark.parametrize("engine", ["auto", "exhaustive", "bounds"])
def test_the_library_refuses_an_smtlib_directory_that_no_engine_would_write(tmp_path, engine):
    with pytest.raises(InputError, match=f"--smtlib writes the SMT engine's cases.*not {engine}"):
        verifier.prove("idxl", N=3, p=8, engine=engine, smtlib=str(tmp_path / "smtlib"))
    assert not (tmp_path / "smtlib").exists()


def test_a_proof_of_a_width_0_model_is_sample_checked():
    """Found by the battery once models got attention biases: a model with an empty residual stream
    (d = 0, valid) answers from its biases alone, and the sample check's budget divided by d."""
    from helpers import RandomLookupTask, add_biases, random_model

    from verifier.engines import Problem
    task = RandomLookupTask(2, 3, 2, seed=0)
    task.F[:] = 0
    rng = np.random.default_rng(0)
    model = add_biases(random_model(rng, task.vocab, task.max_len, C=2, readout="argmax", dims={"d": 0}), rng)
    model.readout.b_U[:] = [1.0, -1.0]
    result = verifier.run(Problem(task, model, FixedPoint(8)), "smt")
    assert model.d == 0 and result.verdict == "proved" and result.engine_stats["sample_check"]["inputs"] > 0


def test_a_partial_run_over_more_inputs_than_python_prints_gives_its_reason():
    """Dyck-(2,2) at N = 8000 has more than 10^4300 inputs, beyond what int -> str prints: the reason
    of an unknown over part of them was an internal error."""
    r = verifier.prove("dyck22", N=8000, p=8, variant="recurrent", engine="exhaustive", stop=2)
    assert r.verdict == "unknown" and r.covered == 2
    assert r.reason.startswith("the range 0..2 is part of the ") and "e+48" in r.reason


def test_a_signal_that_comes_during_a_finalizer_is_raised_after_it(monkeypatch):
    """Seen under load: SIGTERM arrived while z3 freed a term in AstRef.__del__; Python printed the
    KeyboardInterrupt and dropped it, and the run went on to its end.  The handler now raises nothing
    inside a finalizer and sends the signal again once it is over."""
    from verifier.support import interrupts
    monkeypatch.setitem(interrupts._state, "requested", False)
    monkeypatch.setitem(interrupts._state, "cause", None)
    previous = signal.signal(signal.SIGTERM, interrupts._on_signal)
    raised = []

    class Freed:
        def __del__(self):
            try:
                interrupts._on_signal(signal.SIGTERM, sys._getframe())
            except KeyboardInterrupt:
                raised.append("in the finalizer")

    try:
        with pytest.raises(KeyboardInterrupt):
            Freed()  # freed at once: its finalizer runs the handler
            assert interrupts.requested() and raised == []
            time.sleep(5)  # the signal comes again and raises here
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert interrupts.cause() == "SIGTERM" and raised == []
