"""Lower bounds both ways (issue 23): fooling sets checked by brute force, Theorem 4's protocol in
FX equal to the evaluator bit for bit, its messages inside the ranges the counts use, the
refuter's collisions replayed and really wrong, and shape verdicts cross-checked by synthesis."""

import numpy as np
import pytest
from training import Shape, train

import cli
import verifier
from verifier.arithmetic import FixedPoint, exp_table
from verifier.evaluator import Evaluator, make_evaluator
from verifier.model import Head, Layer, Model, Readout, Recurrent
from verifier.refute import fooling, shapes
from verifier.refute.protocol import evaluator_scores, ranges, scope, simulate, window
from verifier.refute.refute import random_model, refute
from verifier.refute.synthesis import synthesize_recurrent
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


@pytest.mark.slow
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


@pytest.mark.slow
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
                low = n * (fx.lo if fx.accumulate == "product"
                           else fx.lo * (min(fx.one, fx.hi) if attention == "softmax" else fx.hi))
                assert ((P - low >= 0) & (P - low < size)).all(), trial
            if attention == "softmax":
                assert ((t.Z_A >= 0) & (t.Z_A < r.Z_A) & (t.Z_B >= 0) & (t.Z_B < r.Z_B)).all()
                assert ((t.M_A >= fx.lo) & (t.M_A <= fx.hi)).all()
        inputs += len(tokens)
    assert inputs == 6000


def test_the_counts_read_the_exp_table_without_building_it():
    """`window` and the largest exponential, in closed form (the counts reach p = 31, where the
    table has billions of entries), equal the table's at every format it can be built for."""
    for p in range(2, 12):
        for f in range(p + 1):
            for rounding in ("floor", "nearest", "zero"):
                dmin, table = exp_table(p, f, rounding)
                lo = FixedPoint(p, f).lo
                assert window(p, f, rounding) == int((table > 0).sum()) + int(dmin == lo and table[0] > 0)
                r = ranges(p, f, rounding, "product", "softmax", 3, 0)
                assert r.Z_A == 3 * int(table.max()) + 1
    assert window(31, 30, "floor") > 0  # no table of 2^30 entries is built


def test_the_protocol_refuses_what_it_does_not_describe():
    task = make_task("equality", 4)
    model = random_model(task, 1, 2, "softmax", np.random.default_rng(0))
    assert scope(model, FixedPoint(6)) is None
    assert "float64" in scope(model, verifier.arithmetic.Real())
    two = random_model(task, 1, 2, "softmax", np.random.default_rng(0))
    two.layers = two.layers * 2
    assert "2 layers" in scope(two, FixedPoint(6))
    assert "binary fixed point" in scope(model, verifier.arithmetic.Grid.b2(8, 1))
    running = FixedPoint(6)
    object.__setattr__(running, "accumulate", "running")  # a rule that saturated partial sums: not order-free
    assert "not order-free" in scope(model, running)


def test_the_cli_refuses_the_protocol_outside_its_conditions(tmp_path, capsys):
    path = tmp_path / "m.npz"
    verifier.save_model(random_model(make_task("equality", 8), 1, 2, "softmax", np.random.default_rng(0)), path)
    code = cli.main(["refute", "equality", "--N", "8", "--format", "b2:1", "--model", str(path),
                     "--method", "protocol"])
    assert code == 2 and "binary fixed point" in capsys.readouterr().err
    two = tmp_path / "two.npz"
    model = random_model(make_task("equality", 8), 1, 2, "softmax", np.random.default_rng(0))
    model.layers = model.layers * 2
    verifier.save_model(model, two)
    code = cli.main(["refute", "equality", "--N", "8", "--p", "6", "--model", str(two), "--method", "protocol"])
    assert code == 2 and "2 layers" in capsys.readouterr().err


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


@pytest.mark.slow
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
@pytest.mark.slow
def test_shape_counts_and_the_smallest_impossible_N():
    v = shapes.impossible("equality", 4, shapes.parse_shape("rnn:1,2"))
    assert v.verdict == "impossible" and v.count.value == 2 and v.members == 4 and v.smallest == 4
    v = shapes.impossible("index_lookup", 24, shapes.parse_shape("rnn:8,4"))
    assert v.verdict == "open" and v.count.value == 2 ** 24 and v.members == 2 ** 24 and v.smallest == 25
    v = shapes.impossible("dyck22", 128, shapes.parse_shape("tf1:1,2,8"))
    assert v.verdict == "impossible" and v.count.value < 2 ** 127
    assert shapes.impossible("dyck22", 8, shapes.parse_shape("rnn:1,2")).count is None  # Alice holds no prefix


@pytest.mark.slow
def test_the_smallest_N_is_where_the_count_crosses():
    for name, shape in [("equality", "tf1:1,1,4"), ("dyck22", "tf1:1,2,8"), ("mqar", "rnn:4,8")]:
        s = shapes.parse_shape(shape)
        n = shapes.smallest_impossible(name, s)
        below = next(m for m in range(n - 1, 1, -1) if fooling.size(name, m))
        assert shapes.impossible(name, n, s, smallest=False).verdict == "impossible"
        assert shapes.impossible(name, below, s, smallest=False).verdict == "open"


@pytest.mark.slow
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


@pytest.mark.slow
def test_cli_impossible_and_refute(capsys, tmp_path):
    code = cli.main(["impossible", "equality", "--N", "256", "--shape", "tf1:1,1,4"])
    out = capsys.readouterr().out
    assert code == 0 and out.startswith("IMPOSSIBLE") and "smallest N   90" in out
    code = cli.main(["impossible", "index_lookup", "--N", "64", "--shape", "tf1:1,1,3"])
    out = capsys.readouterr().out  # a 1-layer transformer solves index lookup: never excluded
    assert code == 3 and out.startswith("OPEN") and "smallest N   none up to 131,072" in out
    code = cli.main(["impossible", "equality", "--N", "8", "--shape", "tf1:x"])
    assert code == 2 and "--shape must be" in capsys.readouterr().err
    code = cli.main(["impossible", "equality", "--N", "8", "--shape", "rnn:2,4", "--p", "4"])
    assert code == 2
    path = tmp_path / "rnn.npz"
    verifier.save_model(_rnn(make_task("index_lookup", 6), 3, 0), path)
    code = cli.main(["refute", "idxl", "--N", "6", "--p", "4", "--model", str(path)])
    out = capsys.readouterr().out
    assert code == 1 and "REFUTED by protocol" in out and "INDEX" in out


# -- every task of issue 23 through `verify refute` -----------------------------------------------
REF_FIRST_IS_LAST = "def f(s):\n    return int(s[0] == s[-1])\n"
REF_PARITY = ("def f(s):\n    out, c = [], 0\n    for t in s:\n        c ^= t == 'b'\n        out.append(int(c))\n"
              "    return out\n")


def _user_task(tmp_path, which):
    """(task name, N, CLI options, make_task options) of a user task."""
    if which == "dataset":
        import itertools
        import json
        path = tmp_path / "data.jsonl"
        path.write_text("".join(json.dumps({"input": list(s), "answer": s[0]}) + "\n"
                                for n in range(1, 7) for s in itertools.product("ab", repeat=n)))
        return "dataset", 6, ["--dataset", str(path), "--vocab", "a,b"], dict(dataset=str(path), vocab="a,b")
    path = tmp_path / "ref.py"
    path.write_text(REF_FIRST_IS_LAST if which == "reference" else REF_PARITY)
    vocab = "a,b,c" if which == "reference" else "a,b"
    return "reference", 6, ["--reference", f"{path}:f", "--vocab", vocab], dict(reference=f"{path}:f", vocab=vocab)


CLI_CASES = [(name, N, kind) for name, N in [("induction_heads", 9), ("dyck22", 12), ("index_lookup", 8), ("mqar", 8),
                                            ("nearest_neighbour", 6)] for kind in ("softmax", "recurrent")]
CLI_CASES += [("reference", 6, "softmax"), ("reference", 6, "recurrent"), ("parity", 6, "recurrent"),
              ("parity", 6, "softmax"), ("dataset", 6, "recurrent")]


@pytest.mark.slow
@pytest.mark.parametrize("name,N,kind", CLI_CASES)
def test_every_task_is_refuted_through_the_cli(name, N, kind, tmp_path, capsys):
    """`verify refute --method protocol` on a random 1-layer model (a readout at every position for a
    task with an answer at every position) or a random recurrent model: exit 1, the argument
    printed, and the counterexample really wrong (the task's own answer against the model's)."""
    if name in ("reference", "parity", "dataset"):
        name, N, flags, opts = _user_task(tmp_path, name)
    else:
        flags, opts = [], {}
    task = make_task(name, N, **opts)
    model = random_model(task, 1, 2, "softmax", np.random.default_rng(0)) if kind == "softmax" else _rnn(task, 3, 0)
    path = tmp_path / "model.npz"
    verifier.save_model(model, path)
    code = cli.main(["refute", name, "--N", str(N), "--p", "4", "--model", str(path), "--method", "protocol", *flags])
    out = capsys.readouterr().out
    assert code == 1, out
    assert out.startswith("REFUTED by protocol") and "  argument    " in out and "the model answers" in out
    assert ("Theorem 2" if kind == "recurrent" else "Theorem 4") in out
    code = cli.main(["refute", name, "--N", str(N), "--p", "4", "--model", str(path), "--method", "protocol",
                     "--json", *flags])
    r = __import__("json").loads(capsys.readouterr().out)
    assert code == 1 and r["verdict"] == "refuted" and r["argument"]
    ev = make_evaluator(model, FixedPoint(4))
    for c in r["counterexamples"]:
        tokens = np.array([c["tokens"]])
        answers, valid = task.evaluate(tokens)
        assert valid.all()
        assert ev.judge(ev.forward(tokens), answers).failed.all()  # the model gets it wrong


@pytest.mark.slow
def test_the_recurrent_dyck_construction_is_not_refuted(tmp_path, capsys):
    """The 7-state automaton as 29 ReLUs solves Dyck-(2,2) at every length: no collision, no claim."""
    path = tmp_path / "dyck.npz"
    assert cli.main(["export", "dyck22", "--N", "16", "--variant", "recurrent", "-o", str(path)]) == 0
    capsys.readouterr()
    for N in (8, 16):
        code = cli.main(["refute", "dyck22", "--N", str(N), "--p", "4", "--f", "1", "--model", str(path),
                         "--method", "protocol"])
        out = capsys.readouterr().out
        assert code == 3 and out.startswith("UNKNOWN by protocol") and "no collision" in out
        assert "counterexample" not in out


def test_a_trained_one_layer_model_collides_on_induction_heads():
    """The test suite's trainer, at the last position of strings of length 16; read at every
    position: refuted by Alice's messages of Theorem 4's protocol on the INDEX set."""
    task = make_task("induction_heads", 16)
    rng = np.random.default_rng(0)
    T = np.concatenate([np.full((400, 1), task.bos), rng.integers(0, 3, (400, 16))], axis=1)
    model, _ = train(task, Shape("softmax", 1, d=8, m=4), steps=60, data=(T, task.evaluate(T)[0][:, -1]))
    model.readout.positions = "all"
    r = refute(verifier.build_problem("induction_heads", N=16, p=8, model=model), "protocol")
    assert_really_wrong(task, r)
    assert "INDEX through induction heads" in r.argument[0] and "Theorem 4" in " ".join(r.argument)


# -- bounded synthesis over whole datasets (Chen and Zou at finite precision) ----------------------
@pytest.mark.slow
@pytest.mark.parametrize("p,rounding,overflow", [(3, "floor", "saturate"), (3, "nearest", "error"),
                                                 (4, "zero", "saturate"), (2, "nearest", "saturate")])
def test_the_synthesis_formula_is_the_evaluator_on_random_weights(p, rounding, overflow):
    """The family's formula at its narrow bit width, with random weights (extreme codes included)
    substituted, holds exactly when the evaluator gets the member right: no wrap-around, no
    departure from the arithmetic, so an UNSAT is the arithmetic's."""
    import z3

    from verifier.refute.synthesis import family_formula, family_model, family_weights
    task = make_task("template_matching", 2)
    fx = FixedPoint(p, None, rounding, overflow)
    rng = np.random.default_rng(p)
    members = [b for b in task.batches(0, task.total, 64)][0]
    outcomes = set()
    for trial in range(24):
        codes = None
        for tokens, label in zip(members.tokens, members.expected):
            family = family_formula(task, [list(map(int, tokens))], [int(label)], 2, 1, fx)
            if codes is None:  # extreme codes, or small ones (that saturate nothing)
                pool = [fx.lo, fx.hi, 0, *rng.integers(fx.lo, fx.hi + 1, 3)] if trial % 2 else [-1, 0, 1]
                codes = {name: int(rng.choice(pool)) for name in family.variables}
                model = family_model(task, 2, 1, family_weights(task, 2, 1, fx, family, codes.__getitem__))
                ev = make_evaluator(model, fx)
            subs = [(v, z3.BitVecVal(codes[name], v.size())) for name, v in family.variables.items()]
            holds = z3.is_true(z3.simplify(z3.substitute(z3.And(*family.assertions), *subs)))
            right = not ev.judge(ev.forward(tokens[None]), np.array([label])).failed[0]
            assert holds == right, (trial, tokens)
            outcomes.add(right)
    assert outcomes == {True, False}  # both outcomes compared


@pytest.mark.slow
def test_whole_dataset_synthesis_decides_template_matching():
    """UNSAT at p = 3 and a model proved on every input at p = 4 (the benchmark's rows), with and
    without the symmetry order (z3 agrees in 75 s; not run here)."""
    from verifier.refute.synthesis import synthesize_dataset, synthesize_inputs
    task = make_task("template_matching", 2)
    assert synthesize_dataset(task, 1, 1, FixedPoint(3), timeout=300, solver="bitwuzla").verdict == "impossible"
    batches = list(task.batches(0, task.total, 64))
    tokens, labels = [t for b in batches for t in b.tokens.tolist()], [y for b in batches for y in b.expected.tolist()]
    assert len(tokens) == 9
    assert synthesize_inputs(task, tokens, labels, 1, 1, FixedPoint(3), 300, "bitwuzla",
                             symmetry=False).verdict == "impossible"
    s = synthesize_dataset(task, 1, 1, FixedPoint(4), timeout=300, solver="bitwuzla")
    assert s.verdict == "escapes" and s.whole_dataset.startswith("proved on all 9 inputs")


@pytest.mark.slow
def test_a_transformer_shape_impossible_by_count_has_no_model_by_synthesis(capsys):
    """tf1:1,1,2,relu on induction heads at N = 9: the count says IMPOSSIBLE (13 messages < 16 Alice
    parts); bounded synthesis on the fooling set's 64 inputs finds no model (UNSAT)."""
    code = cli.main(["impossible", "induction_heads", "--N", "9", "--shape", "tf1:1,1,2,relu",
                     "--synthesis-timeout", "300"])
    out = capsys.readouterr().out
    assert code == 0 and out.startswith("IMPOSSIBLE") and "13 < 16 members" in out
    assert "the fooling set's inputs" in out and "(UNSAT)" in out


# -- the frontier from both sides ----------------------------------------------------------------------
def test_the_largest_impossible_p_is_where_the_count_stops_excluding():
    from verifier.refute.separation import largest_impossible_p, parse_family
    for name, N, family in [("index_lookup", 256, "rnn:16"), ("dyck22", 128, "tf1:1,2"), ("equality", 128, "rnn:16")]:
        P = largest_impossible_p(name, N, parse_family(family))
        size = fooling.size(name, N)

        def impossible(p, family=family, size=size):  # the verdict's own test: the count below the set
            return shapes.count(shapes.parse_shape(f"{family},{p}"), size).value < size.members
        assert P >= 2 and all(impossible(p) for p in range(2, P + 1)) and not impossible(P + 1), (name, P)


@pytest.mark.slow
def test_the_separation_figure_is_drawn_from_a_sweep(tmp_path, capsys):
    out = tmp_path / "fig.png"
    code = cli.main(["separation", "dyck22", "--sweep", "docs/results/dyck22-recurrent.json", "--shapes",
                     "tf1:1,1;rnn:4", "--plot", str(out)])
    assert code == 0 and out.read_bytes()[:4] == b"\x89PNG"
    code = cli.main(["separation", "dyck22", "--sweep", "docs/results/dyck22-recurrent.json", "--plot", str(out)])
    assert code == 2 and "refusing to overwrite" in capsys.readouterr().err
    code = cli.main(["separation", "equality", "--sweep", "docs/results/dyck22-recurrent.json", "--plot",
                     str(tmp_path / "other.png")])
    assert code == 2 and "is not a sweep of equality" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text("{")  # read as the report reads a sweep: one line, no internal error
    code = cli.main(["separation", "dyck22", "--sweep", str(tmp_path / "bad.json"), "--plot", str(tmp_path / "4.png")])
    err = capsys.readouterr().err
    assert code == 2 and "internal error" not in err and len(err.strip().splitlines()) == 1
    code = cli.main(["separation", "dyck22", "--N", "8", "--sweep", "docs/results/dyck22-recurrent.json", "--plot",
                     str(tmp_path / "third.png")])
    assert code == 2


@pytest.mark.slow
def test_user_tasks_get_a_verdict_about_a_shape(tmp_path, capsys):
    """A greedy fooling set, built at every N up to the one asked: first token == last token needs
    3 states after a prefix (the first token), so no recurrent model with 2 state codes computes it."""
    path = tmp_path / "ref.py"
    path.write_text(REF_FIRST_IS_LAST)
    flags = ["--reference", f"{path}:f", "--vocab", "a,b,c", "--N", "6"]
    code = cli.main(["impossible", "reference", *flags, "--shape", "rnn:1,2"])
    out = capsys.readouterr().out
    assert code == 0 and out.startswith("IMPOSSIBLE") and "2 < 3 members" in out and "smallest N   2:" in out
    code = cli.main(["impossible", "reference", *flags, "--shape", "rnn:1,3"])
    out = capsys.readouterr().out
    assert code == 3 and "4 >= 3 members" in out and "none up to 6" in out


def test_separation_exits_with_the_constructions_verdict(capsys):
    """The recurrent Dyck construction is refuted at p = 2 (f = 1): the table is printed, exit 1."""
    assert cli.main(["separation", "dyck22", "--N", "8", "--p", "2", "--f", "1", "--shapes", "tf1:1,1,2"]) == 1
    assert "| construction | dyck22 (hidden=29, n_params=1104) | REFUTED at p = 2 |" in capsys.readouterr().out
    assert cli.main(["separation", "dyck22", "--N", "8", "--p", "3", "--f", "1", "--shapes", "tf1:1,1,2"]) == 0
