"""Lower bounds both ways (issue 23): fooling sets checked by brute force, Theorem 4's protocol in
FX equal to the evaluator bit for bit, its messages inside the ranges the counts use, the
refuter's collisions replayed and really wrong, and shape verdicts cross-checked by synthesis."""

import numpy as np
import pytest

import cli
import verifier
from verifier import fooling, shapes
from verifier.arithmetic import FixedPoint
from verifier.evaluator import Evaluator
from verifier.model import Head, Layer, Model, Readout, Recurrent
from verifier.protocol import evaluator_scores, ranges, scope, simulate
from verifier.refute import random_model, refute
from verifier.synthesis import synthesize_recurrent
from verifier.tasks import make_task

SETS = [("equality", 8, {}), ("disjointness", 8, {}), ("index_lookup", 6, {}), ("index_lookup", 4, dict(sigma=3)),
        ("induction_heads", 9, {}), ("induction_heads", 8, dict(sigma=4)), ("dyck22", 8, {}), ("dyck22", 10, {}),
        ("mqar", 8, {}), ("nearest_neighbour", 6, {}), ("nearest_neighbour", 8, dict(dim=3))]


@pytest.mark.parametrize("name,N,opts", SETS)
def test_fooling_sets_by_brute_force(name, N, opts):
    """Every member and every crossing evaluated on the task; the closed-form size is the built one."""
    task = make_task(name, N, **opts)
    fs = fooling.build(task)
    assert len(fs.A) == fs.size and fooling.check(task, fs) == []
    assert fooling.size_of(fs) == fooling.size(name, N, **opts)


def test_a_broken_fooling_set_is_caught():
    task = make_task("equality", 6)
    fs = fooling.build(task)
    fs.A[1], fs.B[1] = fs.A[0], fs.B[0]  # two equal members: neither crossing answers otherwise
    assert any("both crossings" in p for p in fooling.check(task, fs))
    fs.B[2] = fs.B[3]
    assert any("one answer" in p for p in fooling.check(task, fs))
    one = fooling.build(make_task("index_lookup", 4))
    one.A[3] = one.A[2]
    assert any("no Bob part tells them apart" in p for p in fooling.check(make_task("index_lookup", 4), one))


def test_dyck_words_are_counted_as_lemma_1_says():
    assert [len(fooling.dyck_words(n)) for n in (2, 4, 6, 8, 10, 12)] == [2 ** (n - 1) for n in (2, 4, 6, 8, 10, 12)]


def test_fooling_sets_at_sizes_beyond_enumeration_are_sample_checked():
    rng = np.random.default_rng(0)
    for name, N in [("dyck22", 64), ("equality", 128), ("induction_heads", 65), ("index_lookup", 40)]:
        task = make_task(name, N)
        assert fooling.sample_check(task, fooling.build(task, limit=300), 200, rng) == 200


def test_greedy_fooling_set_for_a_user_task(tmp_path):
    path = tmp_path / "ref.py"
    path.write_text("def f(s):\n    return s[0]\n")  # the first token, read at the end: a prefix of length 1
    task = make_task("reference", 4, reference=f"{path}:f", vocab="a,b,c")
    fs = fooling.build(task, split=2)
    assert fs.size == 3 and fooling.check(task, fs) == []


# -- Theorem 4's protocol, bit for bit ------------------------------------------------------------
def _model(rng, V, L, H, mv, attention, causal, ffn, every, scale):
    d = int(rng.integers(2, 6))
    m = int(rng.integers(1, 4))
    heads = [Head(rng.normal(0, scale, (m, d)), rng.normal(0, scale, (m, d)), rng.normal(0, scale, (mv, d)))
             for _ in range(H)]
    extra = dict(W1=rng.normal(0, 1, (3, d)), b1=rng.normal(0, 1, 3), W2=rng.normal(0, 1, (d, 3)),
                 b2=rng.normal(0, 1, d)) if ffn else {}
    layer = Layer(heads, rng.normal(0, 1, (d, mv if attention == "relu" else H * mv)), attention,
                  bool(rng.integers(0, 2)), causal, **extra)
    return Model(rng.normal(0, scale, (V, d)), rng.normal(0, scale, (L, d)), np.ones(V, bool), [layer],
                 Readout(rng.normal(0, 1, (3, d)), rng.normal(0, 1, 3), "argmax", positions="all" if every else "last"),
                 [str(i) for i in range(V)])


@pytest.mark.parametrize("attention", ["softmax", "relu"])
def test_the_protocol_equals_the_evaluator_bit_for_bit(attention):
    """Thousands of random models and inputs: every head count, width, p, f, rounding, accumulation,
    overflow rule, causal or not, a readout at the last or any position, any split; the simulated
    messages inside the ranges that the counts use."""
    rng = np.random.default_rng(1 if attention == "softmax" else 2)
    inputs = 0
    for trial in range(150):
        V, L, H, mv, p = (int(rng.integers(a, b)) for a, b in ((2, 5), (2, 9), (1, 4), (1, 4), (3, 10)))
        fx = FixedPoint(p, int(rng.integers(0, p + 1)), ("floor", "nearest", "zero")[trial % 3],
                        ("saturate", "error")[trial % 4 == 0], ("product", "wide")[(trial // 3) % 2])
        every = bool(rng.integers(0, 2))
        model = _model(rng, V, L, H, mv, attention, bool(rng.integers(0, 2)), bool(rng.integers(0, 2)), every,
                       float(rng.choice([0.5, 2, 8])))
        ev = Evaluator(model, fx)
        tokens = rng.integers(0, V, (40, L))
        position = int(rng.integers(0, L)) if every else L - 1
        others = [i for i in range(L) if i != position]
        alice = np.sort(rng.choice(others, size=int(rng.integers(0, L)), replace=False)).astype(int)
        scores, ovf, transcripts = simulate(ev, tokens, alice, position)
        assert (scores == evaluator_scores(ev, tokens, position)).all(), trial
        if not every:
            assert (ovf == ev.forward(tokens).ovf).all(), trial
        r = ranges(fx.p, fx.f, fx.rounding, fx.accumulate, attention, len(alice), L - len(alice))
        for t in transcripts:  # every message inside its counted range (lo of each party's sum is n * min)
            for P, n, size in ((t.P_A, len(alice), r.P_A), (t.P_B, L - len(alice), r.P_B)):
                low = n * (fx.lo if fx.accumulate == "product" else fx.lo * (min(fx.one, fx.hi) if attention == "softmax" else fx.hi))
                assert ((P - low >= 0) & (P - low < size)).all(), trial
            if attention == "softmax":
                assert ((t.Z_A >= 0) & (t.Z_A < r.Z_A) & (t.Z_B >= 0) & (t.Z_B < r.Z_B)).all()
                assert ((t.M_A >= fx.lo) & (t.M_A <= fx.hi)).all()
        inputs += len(tokens)
    assert inputs == 6000


def test_the_protocol_refuses_what_it_does_not_describe():
    task = make_task("equality", 4)
    model = random_model(task, 1, 2, "softmax", np.random.default_rng(0))
    assert scope(model, FixedPoint(6)) is None
    assert "float64" in scope(model, verifier.arithmetic.Real())
    two = random_model(task, 1, 2, "softmax", np.random.default_rng(0))
    two.layers = two.layers * 2
    assert "2 layers" in scope(two, FixedPoint(6))


# -- the refuter ----------------------------------------------------------------------------------
def _rnn(task, hidden, seed, scale=1.0):
    rng = np.random.default_rng(seed)
    V, C = len(task.vocab), task.num_classes
    return Recurrent(rng.normal(0, scale, (V, hidden)), rng.normal(0, scale, (hidden, hidden)),
                     rng.normal(0, scale, hidden), rng.normal(0, scale, hidden),
                     Readout(rng.normal(0, 1, (C, hidden)), rng.normal(0, 1, C), task.readout,
                             positions="all" if task.per_position else "last"), list(task.vocab))


def assert_really_wrong(task, r):
    assert r.verdict == "refuted" and r.counterexamples
    for c in r.counterexamples:
        truth = task.answer(np.array(c.tokens))
        name = task.answer_text(truth) if task.per_position else task.answer_name(truth)
        assert c.produced != c.expected and (c.expected in name)


@pytest.mark.parametrize("name,N,opts,p", [("equality", 8, {}, 4), ("index_lookup", 6, {}, 4), ("mqar", 8, {}, 5),
                                           ("disjointness", 8, {}, 4), ("nearest_neighbour", 6, {}, 5),
                                           ("dyck22", 8, {}, 4)])
def test_recurrent_models_are_refuted_by_state_collisions(name, N, opts, p):
    task = make_task(name, N, **opts)
    for seed in range(3):
        r = refute(verifier.build_problem(name, N=N, p=p, model=_rnn(task, 3, seed), **opts), "protocol", seed=seed)
        assert_really_wrong(task, r)
        assert "Theorem 2" in " ".join(r.argument)


def test_a_recurrent_model_that_solves_dyck_has_no_collision():
    problem = verifier.build_problem("dyck22", N=8, p=4, f=1, variant="recurrent")
    model = refute.__globals__["_Model"](problem)
    out = refute(verifier.build_problem("dyck22", N=8, p=4, f=1, model=problem.model), "protocol")
    assert out.verdict == "unknown" and "no collision" in out.findings[0] and model


def test_a_one_layer_model_collides_on_induction_heads():
    task = make_task("induction_heads", 17)
    found = 0
    for seed in range(6):
        model = random_model(task, 1, 1, "softmax", np.random.default_rng(seed))
        model.readout.positions = "all"
        r = refute(verifier.build_problem("induction_heads", N=17, p=3, model=model), "protocol", seed=seed)
        if r.verdict == "refuted":
            found += 1
            assert_really_wrong(task, r)
            assert "INDEX through induction heads" in r.argument[0]
    assert found >= 2


def test_low_precision_transformers_collide_on_equality_and_dyck():
    for name, N, p in [("equality", 8, 4), ("dyck22", 12, 3)]:
        task = make_task(name, N)
        found = 0
        for seed in range(8):
            model = random_model(task, 1, 2, "softmax", np.random.default_rng(seed))
            model.readout.positions = "all" if task.per_position else "last"
            r = refute(verifier.build_problem(name, N=N, p=p, model=model), "protocol", seed=seed)
            if r.verdict == "refuted":
                found += 1
                assert_really_wrong(task, r)
        assert found >= 1, name


# -- shapes ---------------------------------------------------------------------------------------
def test_shape_counts_and_the_smallest_impossible_N():
    v = shapes.impossible("equality", 4, shapes.parse_shape("rnn:1,2"))
    assert v.verdict == "impossible" and v.count.value == 2 and v.members == 4 and v.smallest == 4
    v = shapes.impossible("index_lookup", 24, shapes.parse_shape("rnn:8,4"))
    assert v.verdict == "open" and v.count.value == 2 ** 24 and v.members == 2 ** 24 and v.smallest == 25
    v = shapes.impossible("dyck22", 128, shapes.parse_shape("tf1:1,2,8"))
    assert v.verdict == "impossible" and v.count.value < 2 ** 127
    assert shapes.impossible("dyck22", 8, shapes.parse_shape("rnn:1,2")).count is None  # Alice holds no prefix


def test_the_smallest_N_is_where_the_count_crosses():
    for name, shape in [("equality", "tf1:1,1,4"), ("dyck22", "tf1:1,2,8"), ("mqar", "rnn:4,8")]:
        s = shapes.parse_shape(shape)
        n = shapes.smallest_impossible(name, s)
        below = next(m for m in range(n - 1, 1, -1) if fooling.size(name, m))
        assert shapes.impossible(name, n, s, smallest=False).verdict == "impossible"
        assert shapes.impossible(name, below, s, smallest=False).verdict == "open"


@pytest.mark.parametrize("name,N,width,p", [("equality", 4, 1, 2), ("equality", 6, 1, 3), ("index_lookup", 3, 1, 3)])
def test_impossible_shapes_have_no_model_by_synthesis(name, N, width, p):
    """The count says impossible; bounded synthesis over the whole dataset finds no model (UNSAT)."""
    assert shapes.impossible(name, N, shapes.parse_shape(f"rnn:{width},{p}"), smallest=False).verdict == "impossible"
    assert synthesize_recurrent(make_task(name, N), width, FixedPoint(p), timeout=120).verdict == "impossible"


def test_synthesis_finds_a_model_where_one_exists():
    task = make_task("index_lookup", 1)
    s = synthesize_recurrent(task, 1, FixedPoint(4), timeout=120)
    assert s.verdict == "escapes"
    assert verifier.run(verifier.build_problem("index_lookup", N=1, p=4, model=s.model)).verdict == "proved"


def test_cli_impossible_and_refute(capsys, tmp_path):
    code = cli.main(["impossible", "equality", "--N", "256", "--shape", "tf1:1,1,4"])
    out = capsys.readouterr().out
    assert code == 0 and out.startswith("IMPOSSIBLE") and "smallest N   90" in out
    code = cli.main(["impossible", "equality", "--N", "8", "--shape", "tf1:x"])
    assert code == 2 and "--shape must be" in capsys.readouterr().err
    code = cli.main(["impossible", "equality", "--N", "8", "--shape", "rnn:2,4", "--p", "4"])
    assert code == 2
    path = tmp_path / "rnn.npz"
    verifier.save_model(_rnn(make_task("index_lookup", 6), 3, 0), path)
    code = cli.main(["refute", "idxl", "--N", "6", "--p", "4", "--model", str(path)])
    out = capsys.readouterr().out
    assert code == 1 and "REFUTED by protocol" in out and "INDEX" in out
