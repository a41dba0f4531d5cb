"""What a verdict judged: positions that need no answer, saturations that feed no answer, runs that
check nothing, names in counterexamples, and counting a model's errors (issue 21, items 1, 4, 5
and 6; a memorization model with BOS under auto, issue 24)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import RandomLookupTask, random_model, run
from reference import RefFX, quantize_model, ref_forward

import verifier
from verifier.engines import Problem
from verifier.evaluator import make_evaluator
from verifier.model import Head, Layer, Model, Readout, Recurrent
from verifier.modelfile import save_model
from verifier.refute.count import clopper_pearson, count_errors
from verifier.refute.refute import random_model as refute_model
from verifier.refute.refute import refute
from verifier.support.errors import InputError
from verifier.tasks import Batch, make_task
from verifier.tasks.base import NO_ANSWER
from verifier.tasks.bos import WithBos
from verifier.tasks.user import DatasetTask, ReferenceTask

AB = ["a", "b"]


def shift(words):
    """Tracr's shift_by(1, tokens) in Python: no answer at position 0."""
    return [None] + list(words[:-1])


def constant_model(vocab, max_len, answer=0, bos=None, positions="all") -> Model:
    """A model that answers class `answer` everywhere (its readout ignores the stream)."""
    model = random_model(np.random.default_rng(0), vocab, max_len, C=2, readout="argmax", dims={"attention": "softmax"})
    model.layers = model.layers[:1]
    model.readout.W_U[:] = 0
    model.readout.b_U[:] = np.where(np.arange(2) == answer, 1.0, -1.0)
    model.readout.positions, model.bos = positions, bos
    return model


def loop_failures(problem: Problem) -> set[int]:
    """The failing indices by a Python loop over the evaluator, one input at a time (the reference
    for the engines' and the count's vectorised paths)."""
    task, ev = problem.task, make_evaluator(problem.model, problem.arith)
    failing = set()
    for index in range(task.total):
        tokens = task.decode(index)
        answers, valid = task.evaluate(tokens[None, :])
        if valid[0] and ev.judge(ev.forward(tokens[None, :]), answers).failed[0]:
            failing.add(index)
    return failing


# -- item 1: no answer required at a position ---------------------------------------------------------
def test_a_position_without_an_answer_is_not_judged_and_a_string_without_any_is_not_an_input():
    task = ReferenceTask(3, shift, AB)
    answers, valid = task.evaluate(np.array([[0, 1, 1], [1, 0, 0]]))
    assert valid.all() and answers.tolist() == [[NO_ANSWER, 0, 1], [NO_ANSWER, 1, 0]]
    assert not task.evaluate(np.array([[0]]))[1][0]  # length 1: no answer anywhere
    assert task.answer_text(task.answer([0, 1])) == "- a"
    inputs = 4 + 8  # every string of length 2 and 3
    assert (task.answered().inputs, task.answered().positions, task.answered().of_positions) == (inputs, 4 + 16, 8 + 24)
    # a model that answers a everywhere fails exactly where a judged position expects b
    problem = verifier.build_problem(task, p=8, model=constant_model(AB, 3))
    expected = {i for i in range(task.total) if len(task.decode(i)) > 1 and 1 in task.decode(i)[:-1]}
    assert {c.index for c in verifier.run(problem, "exhaustive", max_counterexamples=100).counterexamples} == \
        expected == loop_failures(problem)
    for engine in ("exhaustive", "smt", "smt-int"):  # the symbolic engines list some failures, not all
        result = verifier.run(problem, engine, max_counterexamples=100)
        assert result.verdict == "refuted" and {c.index for c in result.counterexamples} <= expected
        assert all(c.position >= 1 and c.expected == "b" for c in result.counterexamples)
    # the judge: a wrong answer, a tie or a saturation at a position without an answer fails nothing
    ev = make_evaluator(problem.model, problem.arith)
    out = ev.forward(np.array([[0, 1]]))
    out.pred[:] = [[1, 0]]
    out.tie[:] = [[True, False]]
    out.ovf_at = np.array([[True, False]])
    assert not ev.judge(out, np.array([[NO_ANSWER, 0]])).failed[0]
    assert ev.judge(out, np.array([[0, 0]])).failed[0]
    right = verifier.run(verifier.build_problem(ReferenceTask(3, lambda w: [None] + ["a"] * (len(w) - 1), AB,
                                                              classes="a,b"), p=8, model=constant_model(AB, 3)))
    assert right.verdict == "proved" and right.checked == {"inputs": 12, "positions": 20, "of_positions": 32}
    assert "positions   20 of the 32 positions read have an answer" in right.summary()


def test_a_dataset_may_leave_positions_without_an_answer(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text('{"input": ["a", "b"], "answers": [null, "a"]}\n{"input": ["b"], "answers": [null]}\n'
                    '{"input": ["b", "b", "a"], "answers": ["b", null, "b"]}\n')
    task = DatasetTask(3, str(path), "a,b")
    assert task.total == 2 and task.class_names == ["a", "b"]  # the line without any answer is not an input
    assert task.evaluate(np.array([[0, 1]]))[0].tolist() == [[NO_ANSWER, 0]]
    problem = verifier.build_problem(task, p=8, model=constant_model(AB, 3))
    for engine in ("exhaustive", "smt"):
        result = verifier.run(problem, engine, max_counterexamples=10)
        assert {c.index for c in result.counterexamples} == {1} == loop_failures(problem)  # b b a
        assert result.counterexamples[0].position == 0  # b expected at position 0; position 1 needs none
    with pytest.raises(InputError, match="no input of length <= 3 with an answer"):
        (tmp_path / "e.jsonl").write_text('{"input": ["a"], "answers": [null]}\n')
        DatasetTask(3, str(tmp_path / "e.jsonl"), "a,b", classes="a,b")


class _NoInputs(RandomLookupTask):
    """Every member of the enumeration filtered out."""

    def batches(self, start, stop, batch_size):
        for b in super().batches(start, stop, batch_size):
            yield Batch(b.tokens[:0], b.expected[:0], b.index[:0])

    def evaluate(self, tokens):
        answers, valid = super().evaluate(tokens)
        return answers, np.zeros_like(valid)


@pytest.mark.slow
def test_a_run_that_checked_nothing_is_never_proved(capsys, tmp_path):
    task = _NoInputs(2, 2, 2, seed=0)
    model = random_model(np.random.default_rng(1), task.vocab, task.max_len, C=2, readout="argmax")
    with pytest.raises(InputError, match="nothing was checked"):
        verifier.run(Problem(task, model, verifier.FixedPoint(8)), "exhaustive")
    with pytest.raises(InputError, match="nothing was counted"):
        count_errors(Problem(task, model, verifier.FixedPoint(8)), "exact")
    with pytest.raises(InputError, match="gives no answer on any string"):
        ReferenceTask(2, lambda w: None, AB, classes="a,b")
    with pytest.raises(InputError, match="gives no answer on any string"):
        ReferenceTask(2, lambda w: [None] * len(w), AB, classes="a,b")
    ref = tmp_path / "r.py"
    ref.write_text("def nothing(tokens):\n    return [None] * len(tokens)\n")
    path = save_model(constant_model(AB, 2), tmp_path / "m.npz")
    code, out, err = run(capsys, "run", "--model", str(path), "--task", "reference", "--reference", f"{ref}:nothing",
                         "--vocab", "a,b", "--classes", "a,b", "--N", "2", "--p", "8")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "no input to check" in err


@pytest.mark.slow
def test_tracr_shift_by_is_refuted_where_rasp_gives_a_value(capsys, tmp_path):
    pytest.importorskip("tracr")
    program = tmp_path / "shift.py"
    program.write_text("from tracr.compiler import lib\nfrom tracr.rasp import rasp\n\n"
                       "program = lib.shift_by(1, rasp.tokens)\n")
    code, out, err = run(capsys, "tracr", str(program), "--vocab", "a,b,c", "--max-len", "4", "--p", "2", "--f", "0",
                         "--no-cache", "--json")
    doc = json.loads(out)
    assert code == 1 and doc["verdict"] == "refuted"
    cex = doc["counterexamples"][0]
    assert cex["position"] >= 2  # after BOS at 0 and the first token, which shift_by gives no value
    tokens = cex["input"].split()[1:]
    assert cex["expected"] == tokens[cex["position"] - 2]  # RASP's value there: the token before


# -- item 4: a saturation fails only the answers that depend on it ---------------------------------------
def _flag_model(flag_at: str | int) -> Model:
    """Copies the token at every position after BOS; the FFN pushes a flag coordinate past the range
    (p = 8, f = 4: 1 + 7 > 7.9375) at the BOS position ("bos") or at a position (its P row)."""
    E = np.array([[1.0, 0, 0], [0, 1, 0], [0, 0, float(flag_at == "bos")]])
    P = np.zeros((4, 3))
    if flag_at != "bos":
        P[flag_at, 2] = 1.0
    z = np.zeros((1, 3))
    layer = Layer([Head(z, z, z)], np.zeros((3, 1)), "softmax", residual=True, W1=np.array([[0.0, 0, 1]]),
                  b1=np.zeros(1), W2=np.array([[0.0], [0], [7]]), b2=np.zeros(3))
    return Model(E=E, P=P, P_mask=np.array([True, True, False]), layers=[layer],
                 readout=Readout(np.eye(3)[:2], np.zeros(2), "argmax", positions="all"), vocab=AB + ["<s>"], bos="<s>")


@pytest.mark.parametrize("flag_at, task_fn, verdict", [
    ("bos", lambda w: list(w), "proved"),  # the BOS position's own output: no answer reads it
    (1, lambda w: list(w), "refuted"),  # position 1 (the first token) is judged
    (1, lambda w: [None] + list(w[1:]), "proved"),  # ... and here needs no answer
])
def test_overflow_error_counts_only_what_the_answers_read(flag_at, task_fn, verdict):
    task = ReferenceTask(3, task_fn, AB)
    problem = verifier.build_problem(task, p=8, f=4, overflow="error", model=_flag_model(flag_at))
    verdicts = {engine: verifier.run(problem, engine) for engine in ("exhaustive", "smt", "smt-int")}
    assert {r.verdict for r in verdicts.values()} == {verdict}
    # the independent reference (tests/reference.py: a value's flag is its own saturations or its inputs')
    ref = RefFX(8, 4, overflow="error")
    q = quantize_model(problem.model, ref)
    for index in range(problem.task.total):
        tokens = problem.task.decode(index)
        answers, valid = problem.task.evaluate(tokens[None, :])
        if not valid[0]:
            continue
        _, flags = ref_forward(problem.model, ref, [int(t) for t in tokens], q, per_answer=True)
        assert any(o for o, a in zip(flags, answers[0]) if a != NO_ANSWER) == (verdict == "refuted")
    if verdict == "refuted":
        cex = verdicts["exhaustive"].counterexamples[0]
        assert cex.reason == "overflow" and cex.overflow_at == ["L0.out[1,2]"]


# -- issue 24: a task without case splits through the BOS wrapper ---------------------------------------
def test_auto_runs_a_memorization_model_with_bos(capsys, tmp_path):
    task = make_task("memorization", 2, alphabet=2)
    assert WithBos(task, "<s>").cases is None and WithBos(make_task("idxl", 2), "<s>").cases is not None
    model = random_model(np.random.default_rng(0), list(task.vocab) + ["<s>"], task.max_len + 1, C=task.num_classes,
                         readout="argmax")
    model.bos = "<s>"
    path = save_model(model, tmp_path / "m.npz")
    code, out, err = run(capsys, "run", "--model", str(path), "--task", "memorization", "--N", "2", "--alphabet", "2",
                         "--p", "8")
    assert code == 1 and "REFUTED" in out and "by engine exhaustive (auto)" in out and err == ""


@pytest.mark.parametrize("task", [make_task("memorization", 2, alphabet=2), make_task("idxl", 2),
                                  make_task("dyck22", 4), ReferenceTask(2, lambda w: w[-1], AB)],
                         ids=lambda t: t.name)
def test_the_bos_wrapper_has_no_capability_it_cannot_give(task):
    """An optional capability is present on `WithBos` only when it is over the model's inputs: the
    task's cases and count, wrapped (none when the task has none), and never its DFA (over inputs
    without BOS: the reach engine would run it on the wrong words)."""
    wrapped = WithBos(task, "<s>")
    for name in ("cases", "answered"):
        assert (getattr(wrapped, name) is None) == (getattr(task, name) is None)
    assert wrapped.dfa is None and not hasattr(wrapped, "accepting")
    if task.answered is not None:
        assert wrapped.answered() == task.answered()


# -- item 5: names ----------------------------------------------------------------------------------------
def test_a_saturated_recurrent_input_row_is_named():
    task = ReferenceTask(2, lambda w: w[-1], AB)
    U = np.array([[1.0, 0.0], [100.0, 1.0]])  # R.U[1, 0] saturates at p = 8
    model = Recurrent(U, np.zeros((2, 2)), np.zeros(2), np.zeros(2), Readout(np.eye(2), np.zeros(2), "argmax"), AB)
    result = verifier.run(verifier.build_problem(task, p=8, overflow="error", model=model), "exhaustive",
                          max_counterexamples=10)
    assert result.counterexamples and all(c.reason == "overflow" and "parameter R.U[1,0]" in c.overflow_at
                                          for c in result.counterexamples)
    assert "parameter R.U[1,0]" in result.summary()


def test_the_bounds_summary_says_what_it_certified():
    refuted = verifier.run(verifier.build_problem("idxl", N=8, p=6), "bounds")
    proved = verifier.run(verifier.build_problem("idxl", N=8, p=8), "bounds")
    line = next(x for x in refuted.summary().splitlines() if x.lstrip().startswith("bounds"))
    assert refuted.verdict == "refuted" and "; every margin >=" not in line
    assert "certified" not in line or "on the boxes decided correct, every margin >=" in line
    assert proved.verdict == "proved" and "; every margin >= " in proved.summary()


def test_refute_prints_what_the_unquantized_model_answers():
    result = refute(verifier.build_problem("idxl", N=8, p=6), "search")
    assert result.verdict == "refuted" and "the unquantized model answers" in result.summary()
    assert result.counterexamples[0].line() in result.summary()


# -- item 6: how often is the model wrong -----------------------------------------------------------------
@pytest.mark.slow
def test_the_exact_count_is_the_loop_over_the_evaluator():
    for problem in (verifier.build_problem("idxl", N=6, p=5),
                    verifier.build_problem(ReferenceTask(3, shift, AB), p=8, model=constant_model(AB, 3)),
                    verifier.build_problem(ReferenceTask(3, lambda w: list(w), AB), p=8, f=4, overflow="error",
                                           model=_flag_model(2))):
        counted = count_errors(problem, "exact", replays=5)
        failing = loop_failures(problem)
        assert counted.errors == len(failing) and counted.status == "complete"
        assert counted.evaluated == problem.task.total
        assert sum(counted.by_reason.values()) == counted.errors
        assert len(counted.replayed) == min(5, len(failing)) and {c.index for c in counted.replayed} <= failing
    parallel = count_errors(verifier.build_problem("idxl", N=6, p=5), "exact", workers=2, replays=5)
    serial = count_errors(verifier.build_problem("idxl", N=6, p=5), "exact", workers=1, replays=5)
    assert (parallel.errors, parallel.by_reason, [c.index for c in parallel.replayed]) == \
        (serial.errors, serial.by_reason, [c.index for c in serial.replayed])


def test_the_sampled_interval_contains_the_exact_count():
    problem = verifier.build_problem("idxl", N=8, p=6)
    exact = count_errors(problem, "exact").errors
    for seed in range(3):
        sampled = count_errors(problem, "sample", samples=1500, seed=seed)
        lo, hi = sampled.interval
        assert lo <= exact <= hi and sampled.method == "sample" and sampled.evaluated == 1500
    assert exact == 248


def test_clopper_pearson_against_known_values():
    lo, hi = clopper_pearson(0, 10, 0.95)
    assert lo == 0 and abs(hi - (1 - 0.025 ** 0.1)) < 1e-8
    lo, hi = clopper_pearson(5, 10, 0.95)  # the textbook interval of 5 in 10
    assert abs(lo - 0.18708602) < 1e-7 and abs(hi - 0.81291398) < 1e-7
    lo, hi = clopper_pearson(10, 10, 0.95)
    assert hi == 1 and abs(lo - 0.025 ** 0.1) < 1e-8


def test_certificates_give_a_certified_bound_in_exact_arithmetic():
    task = make_task("icqa", 2, nq=3, na=3)
    model = refute_model(task, 2, 3, "relu", np.random.default_rng(1))
    counted = count_errors(verifier.build_problem("icqa", N=2, nq=3, na=3, p=10, model=model))
    assert counted.certified["errors"] == 18 and "in exact arithmetic" in counted.summary()
    assert counted.method == "exact" and counted.errors == len(loop_failures(verifier.build_problem(
        "icqa", N=2, nq=3, na=3, p=10, model=model)))


def test_verify_count(capsys):
    code, out, _ = run(capsys, "count", "idxl", "--N", "8", "--p", "6")
    assert code == 1 and "exact: 248 of the 3,586 inputs fail" in out and "replayed    20 of the failures" in out
    code, out, _ = run(capsys, "count", "idxl", "--N", "8", "--p", "8")
    assert code == 0 and "exact: 0 of the 3,586 inputs fail" in out
    code, out, _ = run(capsys, "count", "idxl", "--N", "8", "--p", "6", "--samples", "1000", "--json")
    doc = json.loads(out)
    assert code == 1 and doc["method"] == "sample" and doc["interval_method"] == "Clopper-Pearson"
    assert doc["interval"][0] <= 248 <= doc["interval"][1]
    code, _, err = run(capsys, "count", "idxl", "--N", "8", "--p", "6", "--samples", "0")
    assert code == 2 and "--samples must be" in err
