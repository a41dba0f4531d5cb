"""`verify refute`, certificates and bounded synthesis (Chen and Zou 2024, Theorems 2 and 4;
Bhattamishra et al. 2024, Theorem 4): certificates found by the search and re-checked by separate
code, tampered ones rejected, models refuted with replayed counterexamples that are really wrong,
scopes stated, protocol summaries that determine the output."""

import json

import numpy as np
import pytest
from helpers import run
from training import Shape, train

import verifier
from verifier.arithmetic import FixedPoint
from verifier.constructions.blocks import Layout, ReluLayer, instructive
from verifier.evaluator import Evaluator
from verifier.model import Head, Layer, Model, Readout
from verifier.refute import fooling
from verifier.refute.certificate_check import check_certificate
from verifier.refute.certificates import Certificate, count_identity_holds, find_certificate, save
from verifier.refute.protocol import summaries
from verifier.refute.refute import random_model, refute
from verifier.refute.synthesis import certificate_lines, decide_certificate
from verifier.support.budget import Deadline
from verifier.support.errors import InputError
from verifier.tasks import make_task


def assert_really_wrong(task, refutation) -> None:
    assert refutation.verdict == "refuted" and refutation.counterexamples
    for cex in refutation.counterexamples:  # replayed by `refute`; here against the task's definition
        truth = task.answer(np.array(cex.tokens))
        assert cex.expected == task.answer_name(truth) and cex.produced != cex.expected


# -- certificates ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name,N,opts", [("icqa", 2, dict(nq=2, na=2)), ("icqa", 3, dict(nq=8, na=8)),
                                         ("template_matching", 2, {}), ("template_matching", 3, dict(alphabet=4)),
                                         ("ictm", 2, dict(length=2))])
def test_certificates_are_found_and_pass_the_independent_checker(tmp_path, name, N, opts):
    task = make_task(name, N, **opts)
    cert = find_certificate(task)
    assert cert is not None and count_identity_holds(np.array(cert.members), np.array(cert.lam))
    path = tmp_path / "c.json"
    save(cert, str(path))
    assert check_certificate(str(path)) == []
    assert Certificate.from_json(json.loads(path.read_text())).lam == cert.lam


def _tampered(tmp_path, doc, edit) -> str:
    bad = json.loads(json.dumps(doc))
    edit(bad)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(bad))
    return str(path)


@pytest.mark.parametrize("edit,problem", [
    (lambda d: d["members"][0].__setitem__("lambda", d["members"][0]["lambda"] * 2), "not dependent"),
    (lambda d: d["members"][0]["tokens"].__setitem__(0, (d["members"][0]["tokens"][0] + 1) % 8), "not dependent"),
    (lambda d: d["members"][1].__setitem__("label", (d["members"][1]["label"] + 1) % 8), "is labelled"),
    (lambda d: d["members"][0].__setitem__("mu", {k: "-" + v for k, v in d["members"][0]["mu"].items()}), "mu must be"),
    (lambda d: d.__setitem__("w", ["0"] * len(d["w"])), "Farkas identity fails"),
    (lambda d: [m.__setitem__("lambda", 0) for m in d["members"]], "lambda is all zero"),
])
def test_a_tampered_certificate_is_rejected(tmp_path, edit, problem):
    task = make_task("icqa", 3, nq=8, na=8)
    doc = find_certificate(task).to_json()
    problems = check_certificate(_tampered(tmp_path, doc, edit))
    assert problems and any(problem in p for p in problems), problems


@pytest.mark.slow
def test_no_certificate_where_the_theorem_does_not_apply(capsys):
    for name, N, opts in [("icqa", 1, dict(nq=3, na=3)), ("template_matching", 3, dict(substitutions=1)),
                          ("memorization", 2, {})]:
        assert find_certificate(make_task(name, N, **opts), tries=40) is None, name
    code, out, _ = run(capsys, "certificate", "icqa", "--N", 1, "--nq", 3, "--na", 3)
    assert code == 3 and "Theorem 2 needs k >= 2" in out


def test_one_layer_solves_icqa_with_one_pair():
    """k = 1 (the paper's gap): instructive attention from the last token to the answer, copied."""
    task = make_task("icqa", 1, nq=3, na=3)
    L = Layout(question=task.nq, flag=1, answer=task.na, P=5)
    alpha = np.zeros((5, 5))
    alpha[2, 4] = 1.0
    E = np.zeros((len(task.vocab), L.d))
    E[:task.nq, L["question"]] = np.eye(task.nq)
    E[task.r, L.row("flag")] = 1.0
    E[task.first_answer:, L["answer"]] = np.eye(task.na)
    P = np.zeros((5, L.d))
    P[:, L["P"]] = np.eye(5)
    W_U = np.zeros((task.na, L.d))
    W_U[:, L["answer"]] = np.eye(task.na)
    layer = ReluLayer([(instructive(L, alpha), L.copy("answer", "answer"))]).build()
    model = Model(E, P, np.ones(len(task.vocab), bool), [layer], Readout(W_U, np.zeros(task.na)), list(task.vocab))
    for engine in ("exhaustive", "smt"):
        assert verifier.run(verifier.build_problem("icqa", N=1, nq=3, na=3, p=6, model=model), engine).verdict == \
            "proved"


# -- refuting models ---------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_trained_icqa_model_is_refuted_by_a_certificate():
    task = make_task("icqa", 2, nq=3, na=3)
    model, accuracy = train(task, Shape("relu", 2))
    assert accuracy < 1  # as good as training gets; the theorem caps it at 3/4
    result = refute(verifier.build_problem("icqa", N=2, nq=3, na=3, p=12, model=model), max_counterexamples=2)
    assert result.method == "dependent" and result.certificate and result.bound["accuracy_at_most"] == 0.75
    assert_really_wrong(task, result)


@pytest.mark.slow
def test_a_trained_equality_model_is_refuted():
    task = make_task("equality", 6)
    model, accuracy = train(task, Shape("softmax", 1))
    result = refute(verifier.build_problem("equality", N=6, p=12, model=model))
    assert "no dependent-set theorem for equality" in " ".join(result.findings)
    assert_really_wrong(task, result)


@pytest.mark.parametrize("name,N,opts,heads,width,attention,p", [
    ("icqa", 3, dict(nq=8, na=8), 2, 3, "relu", 12), ("icqa", 2, {}, 1, 2, "softmax", 10),
    ("template_matching", 3, {}, 3, 2, "relu", 12), ("equality", 8, {}, 1, 2, "softmax", 4),
    ("disjointness", 6, {}, 2, 2, "softmax", 5), ("ictm", 2, dict(length=2), 1, 2, "relu", 10)])
def test_random_models_every_counterexample_replays(name, N, opts, heads, width, attention, p):
    task = make_task(name, N, **opts)
    for seed in range(3):
        model = random_model(task, heads, width, attention, np.random.default_rng(seed))
        result = refute(verifier.build_problem(name, N=N, p=p, model=model, **opts), seed=seed, max_counterexamples=3)
        if result.verdict == "refuted":
            assert_really_wrong(task, result)


def test_icqa_far_beyond_enumeration():
    """About 10^13 inputs: certificates are generated around random members, so it takes no enumeration."""
    task = make_task("icqa", 5, nq=20, na=20)
    model = random_model(task, 2, 4, "relu", np.random.default_rng(0))
    result = refute(verifier.build_problem("icqa", N=5, nq=20, na=20, p=12, model=model))
    assert task.total > 10 ** 13 and result.method == "dependent"
    assert_really_wrong(task, result)


def test_scopes_are_stated(capsys, tmp_path):
    task = make_task("icqa", 2)
    for heads, attention, why in [(2, "softmax", "several heads"), (1, "softmax", None)]:
        model = random_model(task, heads, 2, attention, np.random.default_rng(0))
        problem = verifier.build_problem("icqa", N=2, p=10, model=model)
        if why:
            with pytest.raises(InputError, match=why):
                refute(problem, "dependent")
            assert any(why in f for f in refute(problem).findings)
    model.layers[0].residual = True  # one softmax head with a residual: Proposition 9 omits a term
    with pytest.raises(InputError, match="residual"):
        refute(verifier.build_problem("icqa", N=2, p=10, model=model), "dependent")


# -- the protocol method ----------------------------------------------------------------------------
def test_equal_summaries_and_bob_parts_give_identical_outputs():
    """Theorem 4's observation in FX: the last position depends on Alice only through her summary."""
    rng = np.random.default_rng(5)
    task = make_task("equality", 8)
    fs = fooling.build(task)
    checked = 0
    for seed in range(20):
        model = random_model(task, int(rng.integers(1, 3)), 2, "softmax", np.random.default_rng(seed))
        for p in (4, 5):
            ev = Evaluator(model, FixedPoint(p))
            for i in range(len(fs.B)):
                s = summaries(ev, fs.alice, fs.A, fs.position, int(fs.B[i, -1]))
                same = np.flatnonzero(np.all(s == s[i], axis=1))
                out = ev.forward(fs.inputs(same, np.full(len(same), i)))
                assert (out.scores == out.scores[0]).all()
                checked += len(same) > 1
    assert checked > 10  # collisions happened and were compared


def _equality_solver(N: int) -> Model:
    """One layer that solves equality: N - 1 hard-attention heads fetch every other bit (the last
    one is the residual's), an FFN takes the XOR of each pair of halves into a fresh coordinate,
    and the readout says "equal" when their sum is 0."""
    d = 1 + N + (N - 1) + 1
    E = np.zeros((2, d))
    E[:, 0] = [-1, 1]
    P = np.zeros((N, d))
    P[np.arange(N), 1 + np.arange(N)] = 1
    heads = []
    for h in range(N - 1):
        W_Q, W_K, W_V = np.zeros((1, d)), np.zeros((1, d)), np.zeros((1, d))
        W_Q[0, N], W_K[0, 1 + h], W_V[0, 0] = 8.0, 1.0, 1.0
        heads.append(Head(W_Q, W_K, W_V))
    W_O = np.zeros((d, N - 1))
    W_O[1 + N + np.arange(N - 1), np.arange(N - 1)] = 1
    bit = [1 + N + i for i in range(N - 1)] + [0]  # where each bit is at the last position
    h = N // 2
    W1 = np.zeros((2 * h, d))
    for i in range(h):
        W1[2 * i, bit[i]], W1[2 * i, bit[i + h]] = 1, -1
        W1[2 * i + 1, bit[i]], W1[2 * i + 1, bit[i + h]] = -1, 1
    W2 = np.zeros((d, 2 * h))
    W2[d - 1, :] = 1  # sum of |x_i - x_{i+h}|: 0 exactly when the halves are equal
    layer = Layer(heads, W_O, "softmax", residual=True, W1=W1, b1=np.zeros(2 * h), W2=W2, b2=np.zeros(d))
    W_U = np.zeros((1, d))
    W_U[0, d - 1] = -1
    return Model(E, P, np.ones(2, bool), [layer], Readout(W_U, np.array([1.0]), "threshold", 0.0), ["0", "1"])


def test_a_model_that_solves_equality_has_no_collision():
    model = _equality_solver(4)
    result = refute(verifier.build_problem("equality", N=4, p=12, model=model))
    assert result.verdict == "proved"
    assert any("no collision on the fooling set" in f and "among 4 Alice parts" in f for f in result.findings)
    assert result.stats["protocol"]["distinct_summaries"] == {"multisets under the query 0": 4,
                                                             "multisets under the query 1": 4,
                                                             "message tuples under one Bob part (the fewest)": 4}


def test_a_low_precision_model_collides():
    task = make_task("equality", 8)
    found = 0
    for seed in range(10):
        model = random_model(task, 1, 2, "softmax", np.random.default_rng(seed))
        result = refute(verifier.build_problem("equality", N=8, p=4, model=model), "protocol")
        if result.verdict == "refuted":
            found += 1
            assert_really_wrong(task, result)
            assert "Bob part that tells them apart" in " ".join(result.argument)
    assert found >= 2


# -- bounded synthesis -----------------------------------------------------------------------------
@pytest.mark.slow
def test_bounded_synthesis_finds_a_model_that_escapes_one_certificate():
    task = make_task("icqa", 2, nq=2, na=2)
    cert = find_certificate(task)
    s = decide_certificate(task, cert, heads=1, width=1, fx=FixedPoint(5), deadline=Deadline(300))
    assert s.verdict == "escapes" and s.model is not None and s.exit_code == 1  # checked on the members inside
    whole = verifier.run(verifier.build_problem("icqa", N=2, nq=2, na=2, p=5, model=s.model))
    assert whole.verdict == "refuted"  # it escapes the certificate, not the theorem
    c = whole.counterexamples[0]
    assert s.whole_dataset == f"refuted: {c.input} -> {c.claim}"
    assert certificate_lines(s, FixedPoint(5))[-1] == f"  on the whole dataset it is {s.whole_dataset}"


# -- the command line -----------------------------------------------------------------------------
def test_cli_certificate_refute_and_check(capsys, tmp_path):
    path = tmp_path / "c.json"
    code, out, _ = run(capsys, "certificate", "icqa", "--N", 2, "-o", path)
    assert code == 0 and "u-argument" in out and path.exists()
    code, out, _ = run(capsys, "check-certificate", path)
    assert code == 0 and out.startswith("VALID")
    bad = _tampered(tmp_path, json.loads(path.read_text()),
                    lambda d: d["members"][0].__setitem__("lambda", 5))
    code, out, _ = run(capsys, "check-certificate", bad)
    assert code == 1 and out.startswith("INVALID")
    model = tmp_path / "m.npz"
    verifier.save_model(random_model(make_task("icqa", 3, nq=4, na=4), 2, 3, "relu", np.random.default_rng(1)), model)
    code, out, _ = run(capsys, "refute", "icqa", "--N", 3, "--nq", 4, "--na", 4, "--p", 12, "--model", model,
                       "--json", "--dump", tmp_path / "d")
    doc = json.loads(out)
    assert code == 1 and doc["method"] == "dependent" and doc["certificate"] and len(doc["dumps"]) == 1
    assert "argument" in json.loads(open(doc["dumps"][0]).read())
    code, out, _ = run(capsys, "refute", "icqa", "--N", 2, "--p", 12, "--random-models", 3, "--shape", "1,2,relu")
    assert code == 0 and "dependent" in out
    code, _, err = run(capsys, "refute", "icqa", "--N", 2, "--p", 12)
    assert code == 2 and "--model FILE is required" in err
