"""int8 with scales (verifier/int8.py) against the independent reference of tests/reference.py
(`RefInt8`: Python ints and Fractions, gemmlowp's integer steps and the fp32 softmax by hand): the
evaluator bit for bit on random models, every intermediate; enumeration against the reference;
per-channel against per-tensor scales; model-file scales; the CLI (docs/arithmetic.md, "int8 with
scales")."""

from __future__ import annotations

import functools
import json
from dataclasses import replace
from fractions import Fraction

import numpy as np
import pytest
from battery import battery_problem
from helpers import edit_model_file, random_model, run
from reference import RefInt8, ref_int8_forward

import verifier
from verifier import calibration
from verifier.arithmetic import make_format
from verifier.engines import ENGINES, RunOptions
from verifier.engines.exhaustive import Exhaustive
from verifier.evaluator import Evaluator, make_evaluator, trace
from verifier.int8 import (
    Int8Arith,
    TensorQuant,
    activation_names,
    multiply_by_quantized_multiplier,
    quantize_multiplier,
)
from verifier.model import Recurrent
from verifier.modelfile import load_model, save_model
from verifier.support.errors import InputError
from verifier.tasks import make_task


@functools.lru_cache(maxsize=None)
def _bound(i: int, per_channel: bool):
    """Battery problem i in int8, calibrated on its task; None for a recurrent model (no int8 recipe)
    or one refused (a float64 value beyond range, an int32 accumulator that could overflow)."""
    problem = battery_problem(i)
    if isinstance(problem.model, Recurrent):
        return None
    try:
        return replace(problem, arith=calibration.bind(Int8Arith(per_channel), problem.model, problem.task))
    except InputError as exc:
        assert "not finite" in str(exc) or "could overflow" in str(exc)
        return None


def _problems(n: int) -> list[int]:
    """The first n battery problems int8 takes."""
    return [i for i in range(80) if _bound(i, True) is not None][:n]


def _first_batch(task, n: int):
    """The first batch of at most n inputs that holds any (a task may filter a batch out)."""
    return next(b for b in task.batches(0, task.total, n) if len(b.tokens))


def _compare(got, want, name):
    if want is None:
        return
    if isinstance(want, list):
        assert len(got) == len(want), name
        for g, w in zip(got, want):
            _compare(g, w, name)
    else:
        assert Fraction(float(got)) == want, (name, float(got), want)


@pytest.mark.parametrize("i", _problems(24))
def test_every_intermediate_equals_reference(i):
    """Random models, per-channel and per-tensor weight scales, scales calibrated on the task: every
    intermediate of the trace (embedding, q, k, v, logits, softmax's fp32 max, exp and Z, uint8
    attention, head outputs, W_O, residual adds, FFN, readout) is the reference's exactly, and the
    tensors that saturated are the same."""
    per_channel = i % 2 == 0
    problem = _bound(i, per_channel)
    arith = problem.arith
    ev = make_evaluator(problem.model, arith, tables=False)
    batch = _first_batch(problem.task, 12)
    for row in batch.tokens:
        out, values = trace(ev, row)
        want, saturated = ref_int8_forward(problem.model, arith.acts, per_channel, [int(t) for t in row])
        compared = [name for name in want if name in values]
        assert set(want) - {n for n in want if n.endswith(".attn") and n not in values} <= set(values)
        for name in compared:
            _compare(values[name], want[name], name)
        assert {s.split("[")[0] for s in out.saturated_at} == saturated


@pytest.mark.parametrize("i", _problems(10))
def test_tables_and_generic_path_agree(i):
    """The layer-0 tables (the engines' fast path) give the generic path's readout values."""
    problem = _bound(i, i % 2 == 1)
    arith = problem.arith
    batch = _first_batch(problem.task, 64)
    a = make_evaluator(problem.model, arith, tables=False).forward(batch.tokens).scores
    b = Evaluator(problem.model, arith).forward(batch.tokens).scores
    np.testing.assert_array_equal(a, b)


def _ref_answer(model, y: list, theta) -> tuple[int, bool]:
    if model.readout.kind == "argmax":
        top = max(y)
        return y.index(top), y.count(top) > 1
    return sum(1 << c for c, v in enumerate(y) if v > Fraction(theta)), False


@pytest.mark.slow
@pytest.mark.parametrize("i", _problems(36)[::3])
def test_enumeration_agrees_with_reference(i):
    """The exhaustive engine in int8 fails on exactly the inputs where the reference's answer is
    wrong (or a tie); the engines on codes refuse int8."""
    problem = _bound(i, i % 2 == 0)
    arith = problem.arith
    task, model = problem.task, problem.model
    enum = Exhaustive().run(problem, RunOptions(max_counterexamples=max(1, task.total), workers=1))
    found = {tuple(int(t) for t in f.tokens) for f in enum.found}
    failing = set()
    for batch in task.batches(0, task.total, 256):
        for row, expected in zip(batch.tokens, batch.expected):
            ys = ref_int8_forward(model, arith.acts, arith.per_channel, [int(t) for t in row])[0]["readout.scores"]
            every = model.readout.positions == "all"
            for y, e in zip(ys if every else [ys], expected if every else [expected]):
                if e < 0:
                    continue  # no answer required
                got, tie = _ref_answer(model, y, model.readout.theta)
                if tie or got != e:
                    failing.add(tuple(int(t) for t in row))
    assert found == failing
    for name in ("smt", "bounds", "reach"):
        assert "int8" in ENGINES[name].unsupported(problem, RunOptions())


def test_gemmlowp_primitives_by_hand():
    """quantize_multiplier, SaturatingRoundingDoublingHighMul and RoundingDivideByPOT (through
    MultiplyByQuantizedMultiplier) equal the reference's, on multipliers below and above 1 and on
    ties of both signs."""
    rng = np.random.default_rng(5)
    Ms = np.concatenate([np.ldexp(rng.uniform(0.5, 1, 60), rng.integers(-34, 4, 60)), [0.5, 1.0, 2.0 ** -33,
                                                                                        1 - 2.0 ** -40]])
    M0, shift = quantize_multiplier(Ms)
    xs = np.concatenate([rng.integers(-2 ** 20, 2 ** 20, 40), [0, 1, -1, 3, -3, 2 ** 20, -2 ** 20]])
    for M, m0, sh in zip(Ms, M0, shift):
        assert (int(m0), int(sh)) == RefInt8.multiplier(Fraction(float(M))), M
        x = xs if sh <= 8 else xs >> 12
        got = multiply_by_quantized_multiplier(x.astype(np.int64), m0, sh)
        ref = RefInt8({}, True)
        assert [int(g) for g in got] == [ref.mbqm(int(v), int(m0), int(sh)) for v in x], M
    assert RefInt8.multiplier(Fraction(1)) == (2 ** 30, 1)  # 1 = 2^30 2^(1 - 31)


def _lopsided(per_channel: bool):
    """A model whose readout rows differ in size by 40: one weight scale for the whole of U.W leaves
    the small row a few codes (its outputs, about 6 steps of the output scale, move); per row, 127."""
    rng = np.random.default_rng(12)
    task = make_task("idxl", 3)
    model = random_model(rng, task.vocab, task.max_len, C=task.num_classes, readout="argmax")
    model.readout.W_U[1] *= 40
    problem = verifier.build_problem(task, model=model, arith=Int8Arith(per_channel))
    return problem


@pytest.mark.slow
def test_per_channel_and_per_tensor_differ_where_they_should():
    """Per tensor, the small row of U.W keeps a few codes (at most 4 = 127/40, rounded), per channel
    127 at its largest; the large row has the same codes either way; the small row's scores differ on
    some input, and each mode's scores are the reference's on every input."""
    scores, codes = {}, {}
    for per_channel in (True, False):
        problem = _lopsided(per_channel)
        ev = make_evaluator(problem.model, problem.arith, tables=False)
        rows = [row for b in problem.task.batches(0, problem.task.total, 512) for row in b.tokens]
        scores[per_channel] = np.array([ev.forward(row[None, :]).scores[0] for row in rows])
        codes[per_channel] = np.rint(ev.q.readout.W_U / problem.arith.wscale["U.W"][:, None]).astype(int)
        for row, got in zip(rows, scores[per_channel]):
            want = ref_int8_forward(problem.model, problem.arith.acts, per_channel, [int(t) for t in row])[0]
            assert [Fraction(float(v)) for v in got] == want["readout.scores"]
    assert np.abs(codes[False][0]).max() <= 4 and np.abs(codes[True][0]).max() == 127
    np.testing.assert_array_equal(codes[False][1], codes[True][1])
    assert not np.array_equal(scores[False][:, 0], scores[True][:, 0])


def test_model_file_scales_round_trip_and_are_used(tmp_path):
    """A model file carries the calibrated scales; read back, they are the same parameters, the
    verdict says where they came from, and different scales in the file change the computation."""
    problem = verifier.build_problem("dyck22", N=3, arith="int8")
    model = replace(problem.model, quantization=problem.arith.acts)
    path = save_model(model, tmp_path / "q.npz")
    back = load_model(path)
    assert back.quantization == problem.arith.acts
    from_file = verifier.build_problem("dyck22", N=3, arith="int8", model=back)
    assert from_file.arith.acts == problem.arith.acts and "model file" in from_file.arith.label()
    halved = {k: TensorQuant(v.scale * 2, v.zero_point) for k, v in problem.arith.acts.items()}
    other = verifier.build_problem("dyck22", N=3, arith="int8", model=replace(back, quantization=halved))
    batch = next(iter(problem.task.batches(0, problem.task.total, 512)))
    a = make_evaluator(from_file.model, from_file.arith).forward(batch.tokens).scores
    b = make_evaluator(other.model, other.arith).forward(batch.tokens).scores
    assert not np.array_equal(a, b)


@pytest.mark.parametrize("edit, words", [
    (lambda q: q["activations"]["embed"].update(scale=0), "scale"),
    (lambda q: q["activations"]["embed"].update(scale=float("nan")), "scale"),
    (lambda q: q["activations"]["embed"].update(scale=0.1), "fp32"),
    (lambda q: q["activations"]["embed"].update(zero_point=128), "zero_point"),
    (lambda q: q["activations"]["embed"].update(zero_point=1.5), "zero_point"),
    (lambda q: q["activations"].pop("readout"), "readout"),
    (lambda q: q["activations"].update(nope={"scale": 1.0, "zero_point": 0}), "nope"),
])
def test_model_file_scales_refused(tmp_path, capsys, edit, words):
    """Bad scales in a model file: a one-line error naming what is wrong, exit 2."""
    problem = verifier.build_problem("idxl", N=2, arith="int8")
    src = save_model(replace(problem.model, quantization=problem.arith.acts), tmp_path / "ok.npz")

    def meta(m):
        edit(m["quantization"])

    dst = tmp_path / "bad.npz"
    edit_model_file(src, dst, meta=meta)
    code, out, err = run(capsys, "run", "--model", str(dst), "--task", "idxl", "--N", "2", "--format", "int8")
    assert code == 2 and len(err.strip().splitlines()) == 1 and words in err, err


def test_int32_overflow_is_refused_before_work():
    """A weight scale that makes an accumulator's bound reach 2^31 (a tiny output scale: M > 1, a
    left shift) is refused with one line before any input is evaluated."""
    problem = verifier.build_problem("idxl", N=3, arith="int8")
    acts = dict(problem.arith.acts)
    acts["readout"] = TensorQuant(2.0 ** -60, 0)
    with pytest.raises(InputError, match="int32 accumulator of readout could overflow"):
        Int8Arith().bind(problem.model, acts=acts)


@pytest.mark.slow
def test_a_refutation_in_int8_replays(capsys):
    """Dyck-(2,2) at N = 6 fails in int8 (it holds at N = 5): the counterexample, replayed on the
    evaluator, is wrong in the reference too, and the arithmetic line names the recipe."""
    code, out, err = run(capsys, "dyck22", "--N", "6", "--format", "int8")
    assert code == 1, err
    line = next(x for x in out.splitlines() if x.strip().startswith("arithmetic"))
    for words in ("per output channel", "calibrated", "SaturatingRoundingDoublingHighMul", "RoundingDivideByPOT",
                  "uint8 scale 1/256", "TFLite's ADD", "int32"):
        assert words in line, words
    problem = verifier.build_problem("dyck22", N=6, arith="int8")
    cx = verifier.run(problem).counterexamples[0]
    batch = next(iter(problem.task.batches(cx.index, cx.index + 1, 1)))
    assert list(batch.tokens[0]) == cx.tokens
    ys = ref_int8_forward(problem.model, problem.arith.acts, True, cx.tokens)[0]["readout.scores"]
    answers = [_ref_answer(problem.model, y, 0) for y in ys]
    assert any(tie or got != e for (got, tie), e in zip(answers, batch.expected[0]) if e >= 0)
    code, out, err = run(capsys, "dyck22", "--N", "5", "--format", "int8")
    assert code == 0, err


def test_cli_spelling_and_refusals(capsys):
    """int8, int8:channel, int8:tensor are formats; FX's options, other roundings and the engines on
    codes are refused with one line, exit 2; verify sweep takes int8 beside the others."""
    assert make_format("int8").per_channel and not make_format("int8:tensor").per_channel
    assert make_format("int8:channel").overflow == "saturate"
    for args, words in ((["--format", "int8:row"], "int8 takes"), (["--format", "int8", "--p", "8"], "int8"),
                        (["--format", "int8", "--rounding", "floor"], "int8"),
                        (["--format", "int8", "--engine", "smt"], "int8 with scales is not a grid"),
                        (["--format", "int8", "--engine", "bounds"], "int8 with scales has no interval bounds")):
        code, _, err = run(capsys, "idxl", "--N", "3", *args)
        assert code == 2 and len(err.strip().splitlines()) == 1 and words in err, (args, err)
    code, out, err = run(capsys, "sweep", "dyck22", "--N", "5..6", "--format", "bf16,int8,int8:tensor", "--json")
    assert code == 0, err
    runs = {(r["N"], r["format"]): r for r in json.loads(out)["runs"]}
    assert runs[5, "int8"]["verdict"] == "proved" and runs[6, "int8"]["verdict"] == "refuted"
    assert runs[6, "int8:tensor"]["arithmetic"]["weights"] == "per-tensor"
    code, out, err = run(capsys, "sweep", "dyck22", "--N", "4", "--format", "fx,int8", "--p", "12", "--json")
    assert code == 0 and [r["arithmetic"]["format"] for r in json.loads(out)["runs"]] == ["fx", "int8"], err


def test_activation_tensors_are_the_evaluators():
    """The tensors that carry scales are those the evaluator writes, heads of a layer sharing one."""
    model = verifier.build_problem("dyck22", N=3, arith="int8").model
    names = activation_names(model)
    assert names[0] == "embed" and names[-1] == "readout" and "L0.H*.out" in names
    assert not any(n.startswith("L0.H0.out") for n in names)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(3))
def test_add_is_tflites_on_every_pair(seed):
    """The residual add of two int8 tensors of different scales equals the reference's TFLite ADD
    (left shift 20, each input rescaled to twice the larger scale, the sum requantized) on every
    pair of codes (a fifth of them, and a 23rd for two more scale sets), saturations included."""
    from verifier.arithmetic import Ctx
    rng = np.random.default_rng(seed)
    arith = verifier.build_problem("dyck22", N=2, arith="int8").arith
    fp32 = lambda x: float(np.float32(x))
    params = {k: TensorQuant(fp32(np.exp(rng.uniform(-6, 1))), int(rng.integers(-128, 128)))
              for k in ("embed", "L0.attn_out", "L0.resid")}
    arith = replace(arith, acts={**arith.acts, **params})
    (s1, z1), (s2, z2) = ((params[k].scale, params[k].zero_point) for k in ("embed", "L0.attn_out"))
    c1 = np.repeat(np.arange(-128, 128) - z1, 256)
    c2 = np.tile(np.arange(-128, 128) - z2, 256)
    got = arith.add(c1 * s1, c2 * s2, Ctx((len(c1),), False), "L0.resid")
    ref = RefInt8(arith.acts, True)
    pick = range(seed, len(c1), 5 if seed == 0 else 23)
    for i in pick:
        want = ref.add(int(c1[i]), Fraction(s1), int(c2[i]), Fraction(s2), "L0.resid", "L0.resid")
        assert Fraction(float(got[i])) == want * Fraction(params["L0.resid"].scale), (int(c1[i]), int(c2[i]))


def test_weight_codes_round_ties_away_from_zero():
    """A weight exactly halfway between two codes rounds away from zero (TFLite's std::round), in
    float64 and in exact rationals alike; the largest |w| of a row is code 127 exactly."""
    from verifier.int8 import weight_codes, weight_scales
    s = weight_scales(np.array([[127.0, 1.0]]), True)
    assert s[0] == 1.0
    w = np.array([[0.5, -0.5, 1.5, -2.5, 126.5, 127.0]])
    want = [[1, -1, 2, -3, 127, 127]]
    assert weight_codes(w, np.ones(1)).tolist() == want
    exact = np.array([[Fraction(x) for x in w[0]]], dtype=object)
    assert weight_codes(exact, np.ones(1)).tolist() == want
    assert RefInt8({}, True).wcodes(w, [Fraction(1)]) == want


def test_calibrated_parameters_cover_the_range():
    """choose_params: 0 is a code exactly (an integer zero point), the codes span [lo, hi] widened to
    0 to within half a step, and the scale is an fp32 value; every tensor of a calibrated problem
    covers the float64 model's values on the task's inputs."""
    from verifier.int8 import choose_params
    rng = np.random.default_rng(2)
    for lo, hi in [(-1.0, 3.0), (0.5, 7.0), (-9.0, -0.25), (0.0, 0.0), *rng.normal(0, 5, (30, 2))]:
        lo, hi = min(lo, hi), max(lo, hi)
        p = choose_params(lo, hi)
        assert float(np.float32(p.scale)) == p.scale and -128 <= p.zero_point <= 127
        assert (-128 - p.zero_point) * p.scale <= min(lo, 0) + p.scale / 2
        assert (127 - p.zero_point) * p.scale >= max(hi, 0) - p.scale / 2
    problem = verifier.build_problem("induction_heads", N=3, arith="int8")
    acts, source = calibration.calibrate(problem.model, problem.task)
    assert acts == problem.arith.acts and "all 39 inputs" in source


@pytest.mark.parametrize("i", _problems(24)[::4])
def test_overflow_error_fails_the_inputs_that_saturate(i):
    """Under overflow = error a clamp to [-128, 127] fails the answers it feeds: with a readout at
    the last position every value feeds the one answer, so an input fails for overflow exactly when
    the reference clamped some tensor on it (the same scales, saturate or error)."""
    problem = _bound(i, True)
    if problem.model.readout.positions == "all":
        pytest.skip("a readout at every position: the cone of each answer (as for grids)")
    arith = replace(problem.arith, overflow="error")
    ev = Evaluator(problem.model, arith)
    batch = _first_batch(problem.task, 64)
    ovf = ev.forward(batch.tokens).ovf
    want = [bool(ref_int8_forward(problem.model, arith.acts, True, [int(t) for t in row])[1]) for row in batch.tokens]
    assert list(ovf) == want
    assert "overflow=error" in arith.label()


def test_a_recurrent_model_file_with_scales_is_an_input_error(tmp_path, capsys):
    """A recurrent model has no int8 recipe: scales in its file are refused in one line, exit 2, before
    they could reach the transformer's tensor graph."""
    src = save_model(verifier.build_problem("dyck22", N=4, p=8, variant="recurrent").model, tmp_path / "rnn.npz")
    dst = edit_model_file(src, tmp_path / "bad.npz",
                          meta=lambda m: m.update(version=3, quantization={"activations": {
                              "embed": {"scale": 0.5, "zero_point": 0}}}))
    code, out, err = run(capsys, "run", "--model", str(dst), "--task", "dyck22", "--N", "4", "--p", "8")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "recurrent" in err, err
