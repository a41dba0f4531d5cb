"""Induction heads, Dyck-(2,2), function composition; answers at every position; recurrent models."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from helpers import perturbed_dyck_rnn, random_model
from reference import RefFX, ref_answer, ref_forward, ref_recurrent

import verifier
from verifier.arithmetic import FixedPoint
from verifier.constructions import CONSTRUCTIONS
from verifier.engines import ENGINES, Problem, RunOptions
from verifier.evaluator import make_evaluator
from verifier.model import Readout, Recurrent
from verifier.modelfile import load_model, save_model
from verifier.support.errors import InputError
from verifier.tasks import make_task


# -- ground truths against the definitions ----------------------------------------------------------
def brute_induction(s: list[int], bot: int) -> list[int]:
    out = [bot]  # the start token
    for i in range(len(s)):
        earlier = [j for j in range(i) if s[j] == s[i]]
        out.append(s[max(earlier) + 1] if earlier else bot)
    return out


def brute_dyck(s: list[int]) -> list[int]:
    out, stack, dead = [1], [], False
    for c in s:
        if c in (0, 2):
            stack.append(c)
            dead |= len(stack) > 2
        elif not stack or stack.pop() != c - 1:
            dead = True
        out.append(int(not dead and not stack))
    return out


def every_input(task):
    return [task.decode(i) for i in range(task.total)]


@pytest.mark.parametrize("sigma,N", [(2, 6), (3, 5)])
def test_induction_heads_answers_match_the_definition(sigma, N):
    task = make_task("induction_heads", N=N, sigma=sigma)
    xs = every_input(task)
    assert len(xs) == sum(sigma ** n for n in range(1, N + 1))
    for x in xs:
        assert task.answer(x).tolist() == brute_induction(list(x[1:]), task.bot)


@pytest.mark.slow
def test_dyck22_answers_match_the_definition():
    task = make_task("dyck22", N=6)
    for x in every_input(task):
        assert task.answer(x).tolist() == brute_dyck(list(x[1:]))
    members = sum(int(task.answer(x)[-1]) for x in every_input(task) if len(x) == 7)
    assert members == 2 ** 3 * 4  # ()()() (())() ()(()) (()()), 2 types per pair; ((())) is too deep


@pytest.mark.parametrize("opts", [dict(N=3, depth=1), dict(N=2, depth=2, n=2), dict(N=2, depth=3, n=1)])
def test_composition_answers_match_the_definition(opts):
    task = make_task("composition", **opts)
    rng = np.random.default_rng(0)
    for i in rng.integers(0, task.total, size=300):
        x = task.decode(int(i))
        z = {l: [int(t) - task.value_base[l] for t in x[task.block_start[l]:task.block_start[l] + task.sizes[l - 1]]]
             for l in range(1, task.depth + 1)}
        w = task.queries[int(x[-1]) - task.first_query]
        v = z[1][int(x[-2]) - task.value_base[0]]
        for l in range(2, task.depth + 1):
            v = z[l][w[l - 2] * task.sizes[l - 2] + v]
        assert task.answer(x) == v
        assert task.index_of(x) == i


# -- the constructions ------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("task,opts,engine", [
    ("induction_heads", dict(N=5, sigma=3, p=16, f=4), "exhaustive"),
    ("induction_heads", dict(N=4, sigma=3, p=16, f=4), "smt"),
    ("induction_heads", dict(N=5, sigma=4, p=24, f=12, variant="sht"), "exhaustive"),
    ("dyck22", dict(N=5, p=12, f=4), "exhaustive"),
    ("dyck22", dict(N=40, p=4, f=1, variant="recurrent"), "reach"),
    ("composition", dict(N=3, depth=1, p=12, f=6), "exhaustive"),
    ("composition", dict(N=2, depth=2, n=2, p=12, f=6), "smt"),
])
def test_constructions_are_proved(task, opts, engine):
    r = verifier.prove(task, engine=engine, **opts)
    assert r.verdict == "proved", r.summary()
    assert r.covered == r.total


@pytest.mark.slow
@pytest.mark.parametrize("task,opts,engine", [
    ("induction_heads", dict(N=6, sigma=3, p=16, f=4, eta=0.5), "exhaustive"),  # beta below ln 3
    ("induction_heads", dict(N=6, sigma=3, p=16, f=4, eta=0.5), "smt"),
    ("induction_heads", dict(N=5, sigma=4, p=24, f=12, variant="sht-printed"), "exhaustive"),
    ("dyck22", dict(N=8, p=12, f=3), "exhaustive"),  # K w < 1: too few fraction bits
    ("dyck22", dict(N=8, p=3, f=0, variant="recurrent"), "reach"),  # 1/2 is not a code
    ("composition", dict(N=2, depth=2, n=2, p=16, f=8, eta=0.1), "exhaustive"),  # lambda too small
])
def test_weakened_constructions_are_refuted_with_a_replayed_counterexample(task, opts, engine):
    r = verifier.prove(task, engine=engine, **opts)
    assert r.verdict == "refuted", r.summary()
    c = r.counterexamples[0]
    t = make_task(task, **{k: v for k, v in opts.items() if k in ("N", "sigma", "depth", "n")})
    truth = t.answer(np.array(c.tokens))
    if t.per_position:
        assert c.position is not None and c.expected == t.answer_name(int(truth[c.position]))
        assert c.produced != c.expected or c.reason == "tie"
    else:
        assert c.position is None and c.expected == t.answer_name(truth)


def test_the_printed_sht_spacing_confuses_a_mismatch_with_the_start_token():
    """Spacing N as transcribed: with sigma = 4 a key whose previous token is not s_i, N - 1 angle
    units away, outscores the start token, so a position with no earlier occurrence gets a token."""
    r = verifier.prove("induction_heads", N=6, sigma=4, p=24, f=12, variant="sht-printed", max_counterexamples=50)
    assert r.verdict == "refuted"
    assert any(c.expected == "BOT" and c.produced != "BOT" for c in r.counterexamples)
    fixed = verifier.prove("induction_heads", N=6, sigma=4, p=24, f=12, variant="sht")
    assert fixed.verdict == "proved"
    # the formulas are Sanford, Hsu, Telgarsky's arXiv:2402.09268, read from a transcription only
    for result in (r, fixed):
        theorem = result.construction["theorem"]
        assert "arXiv:2402.09268" in theorem and "as transcribed, unverified" in theorem
        assert "2408.14332" not in result.summary()
    from verifier.constructions import CONSTRUCTIONS
    variants = CONSTRUCTIONS["induction_heads"].variants  # what `verify list` prints
    assert all("2402.09268" in variants[v] and "as transcribed, unverified" in variants[v]
               for v in ("sht", "sht-printed"))
    from verifier import exact
    problem = verifier.build_problem("induction_heads", N=6, sigma=4, p=24, f=12, variant="sht-printed")
    first = next(c for c in r.counterexamples if c.expected == "BOT")
    assert exact.cause(problem, first.tokens).kind == "exact"  # not a rounding artefact


@pytest.mark.slow
def test_recurrent_dyck_model_is_proved_for_every_length_at_constant_size():
    sizes = set()
    for N in (4, 64, 512):
        r = verifier.prove("dyck22", N=N, p=4, f=1, variant="recurrent", engine="reach")
        assert r.verdict == "proved" and r.engine_stats["every_length"]
        sizes.add(r.params["n_params"])
    assert len(sizes) == 1


# -- engines agree on sequence outputs ----------------------------------------------------------------
def test_exhaustive_and_smt_agree_on_random_per_position_models():
    task = make_task("induction_heads", N=3, sigma=2)
    rng = np.random.default_rng(3)
    verdicts = []
    for seed in range(12):
        model = random_model(rng, task.vocab, task.max_len, C=task.num_classes, readout="argmax",
                             dims={"attention": "softmax"})
        model.readout.positions = "all"
        problem = Problem(task, model, FixedPoint(8, 3))
        got = [verifier.run(problem, engine).verdict for engine in ("exhaustive", "smt")]
        assert got[0] == got[1], seed
        verdicts.append(got[0])
    assert "refuted" in verdicts


@pytest.mark.slow
def test_reach_smt_and_exhaustive_agree_on_perturbed_recurrent_models():
    task = make_task("dyck22", N=5)
    rng = np.random.default_rng(5)
    seen = set()
    for trial in range(16):
        model = perturbed_dyck_rnn(rng, 0.02)
        problem = Problem(task, model, FixedPoint(6, 2))
        reach, exhaustive = verifier.run(problem, "reach"), verifier.run(problem, "exhaustive")
        assert reach.verdict == exhaustive.verdict == verifier.run(problem, "smt").verdict, trial
        if reach.verdict == "refuted":  # reach finds a shortest failing input
            assert len(reach.counterexamples[0].tokens) <= len(exhaustive.counterexamples[0].tokens)
        seen.add(reach.verdict)
    assert seen == {"proved", "refuted"}


# -- the evaluators against the reference -------------------------------------------------------------
@pytest.mark.parametrize("overflow", ["saturate", "error"])
def test_recurrent_evaluator_matches_a_per_step_reference(overflow):
    rng = np.random.default_rng(7)
    for trial in range(10):
        V, h, C = 3, int(rng.integers(1, 5)), int(rng.integers(2, 4))
        w = lambda *shape: np.round(rng.normal(0, 1.5, size=shape) * 8) / 8
        every = bool(trial % 2)
        model = Recurrent(w(V, h), w(h, h), w(h), w(h), Readout(w(C, h), w(C), "argmax",
                                                                positions="all" if every else "last"),
                          ["a", "b", "c"])
        fx = FixedPoint(6, 2, overflow=overflow)
        ev = make_evaluator(model, fx)
        tokens = np.array(list(itertools.product(range(V), repeat=4)))
        out = ev.forward(tokens)
        for b in range(0, len(tokens), 7):
            y, ovf = ref_recurrent(model, RefFX(6, 2, overflow=overflow), tokens[b].tolist())
            assert out.scores[b].tolist() == y
            assert bool(out.ovf[b]) == (ovf and overflow == "error")


@pytest.mark.slow
def test_per_position_readout_matches_the_reference():
    rng = np.random.default_rng(11)
    for _ in range(8):
        model = random_model(rng, 3, 4, C=3, readout="argmax")
        model.readout.positions = "all"
        ev = make_evaluator(model, FixedPoint(8, 3))
        tokens = np.array(list(itertools.product(range(3), repeat=4)))
        out = ev.forward(tokens)
        for b in range(0, len(tokens), 5):
            ys, _ = ref_forward(model, RefFX(8, 3), tokens[b].tolist())
            assert out.scores[b].tolist() == ys
            assert out.pred[b].tolist() == [ref_answer(model, RefFX(8, 3), y)[0] for y in ys]


# -- the model format ---------------------------------------------------------------------------------
def test_recurrent_and_per_position_models_round_trip(tmp_path):
    for task, variant in (("dyck22", "recurrent"), ("dyck22", "transformer"), ("induction_heads", "designed")):
        t = make_task(task, N=4)
        model = CONSTRUCTIONS[task].build(t, variant)
        path = save_model(model, tmp_path / f"{task}-{variant}.npz")
        loaded = load_model(path)
        assert type(loaded) is type(model) and loaded.readout.positions == "all"
        for name, arr in model.named_arrays().items():
            assert np.array_equal(loaded.named_arrays()[name], arr)
        assert verifier.prove(task, N=4, p=16, f=4, model=loaded).verdict == "proved"


def test_a_last_position_model_is_refused_for_a_sequence_task():
    model = CONSTRUCTIONS["dyck22"].build(make_task("dyck22", N=4), "transformer")
    model.readout.positions = "last"
    with pytest.raises(InputError, match="every position"):
        verifier.prove("dyck22", N=4, p=12, model=model)


def test_engines_that_cannot_decide_say_why():
    problem = verifier.build_problem("dyck22", N=4, p=12, f=4)
    assert "recurrent" in ENGINES["reach"].unsupported(problem, RunOptions())
    with pytest.raises(InputError, match="reach"):
        verifier.prove("induction_heads", N=3, p=16, f=4, engine="reach")


def test_a_sweep_with_fixed_integer_bits_measures_fraction_bits():
    from verifier.runs.sweep import frontier
    fr = frontier("dyck22", [4], [8, 9, 10, 11], int_bits=7)
    assert fr.arithmetic["f"] == "f = p - 7"
    row = fr.rows[0]
    assert row.verdicts[8] == "refuted" and row.p_star is not None and row.p_star > 8
    assert row.ruled_out_by is not None  # the counterexample one bit below the frontier
    with pytest.raises(InputError, match="int-bits"):
        frontier("dyck22", [4], [8], int_bits=7, f=2)


def test_the_errata_row_of_the_sht_spacing_runs_at_its_own_precision(tmp_path):
    from verifier.errata import CLAIMS, Finding, run_errata
    claim = next(c for c in CLAIMS if c.task == "induction_heads")
    (row,) = run_errata(12, str(tmp_path), claims=[claim])
    fx, = row.binary
    assert fx.name == "FX(24, 12)" and fx.verdict == "refuted" and row.finding is Finding.UNVERIFIED
    assert "at position" in fx.failure.text and (tmp_path / fx.dump.split("/")[-1]).exists()


def test_refute_takes_a_recurrent_model_by_state_collision_and_not_by_dependent_sets():
    from verifier.refute.refute import dependent_scope, protocol_scope, refute
    rnn = CONSTRUCTIONS["dyck22"].build(make_task("dyck22", N=4), "recurrent")
    out = refute(verifier.build_problem("dyck22", N=4, p=2, f=1, model=rnn))
    assert out.verdict == "refuted" and out.method == "protocol" and out.model["recurrent"] == 29
    problem = verifier.build_problem("equality", N=4, p=8, model=Recurrent(
        np.zeros((2, 1)), np.zeros((1, 1)), np.zeros(1), np.zeros(1),
        Readout(np.zeros((1, 1)), np.zeros(1), "threshold"), ["0", "1"]))
    assert protocol_scope(problem) is None  # Theorem 2: the state after Alice's prefix is her message
    assert "no dependent-set theorem" in dependent_scope(problem)
