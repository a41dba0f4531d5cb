"""Bhattamishra et al. 2024 (arXiv:2406.09347), C.2, F.2, F.3 and G.2, built on blocks.Layout: the
rebuilt constructions against their former builds, exact rational weights, the printed variants
under their charitable readings (each decided by an engine at small N), and the residual rows by
name in traces, dumps, reports and model files."""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from fractions import Fraction

import numpy as np
import pytest

import verifier
from cli import main
from verifier.arithmetic import threshold_code
from verifier.constructions.blocks import Layout
from verifier.constructions.nearest_neighbour import layer2_eta
from verifier.constructions.sign_vectors import sign_vectors
from verifier.constructions.sparse_threshold import printed_units
from verifier.model import is_exact
from verifier.modelfile import load_model, save_model
from verifier.outputs.dump import first_departure, format_trace, write_dumps
from verifier.outputs.report import render
from verifier.support.errors import InputError, UnbuildableError

# -- the rebuilt constructions compute what they did before the rebuild ------------------------------
# Fingerprints of the quantized codes (every weight array, the threshold's code, the structure) of
# the builds before they moved to blocks.Layout (commit 203820f), at p = 8, 12, 16 with f = p // 2.
# The variant 'unscaled' is the one called 'paper' then.
FORMER_BUILDS = [
    ("index_lookup", {"N": 8, "sigma": 4}, "corrected", ['05e5a1e587fd685c', '58842f98f74939c1', '3a908e46e15a38a5']),
    ("index_lookup", {"N": 16, "sigma": 3}, "corrected", ['4b2e98d01b59b67a', '742a4ff529f19a28', '53a8830214e7c077']),
    ("index_lookup", {"N": 12, "k": 5, "sigma": 2}, "corrected",
     ['7170cc426f7a8529', '610d0c488767a4c7', 'a3e0d8828d067094']),
    ("equality", {"N": 6}, "corrected", ['aa88805335863ec8', 'a7b5e79b069c0621', '60eab8058a9136bb']),
    ("equality", {"N": 12}, "corrected", ['0969997946fea626', '7b7edd9e9a7133ad', 'd2f510af918a664d']),
    ("equality", {"N": 16}, "corrected", ['37cd928fd44872d8', '89c609eae6d400ac', 'f7069240aa17ea57']),
    ("equality", {"N": 6}, "paper", ['af0e9533bf00d557', '43d449bebdc5406e', 'efea83dd664bfde1']),
    ("equality", {"N": 12}, "paper", ['9538b9b27b996367', '22101ecfd68654a6', 'a2fa0d9d098f634f']),
    ("equality", {"N": 16}, "paper", ['7b73cce2b5246af5', '0c6b1e6a6b599236', '68bf883baa1603c6']),
    ("equality", {"N": 8, "k": 5}, "corrected", ['2228086e379438ed', 'd55684a48745b1ca', '5a26ed2874a9bc57']),
    ("disjointness", {"N": 8}, "corrected", ['0626ce26afe27e72', 'b9c40e63ac2d406d', 'a07b4ffcfb261a53']),
    ("disjointness", {"N": 12}, "paper", ['e9666ed6afce242d', '61061e1a8a333b80', 'c7e4003ebddc3473']),
    ("disjointness", {"N": 12}, "corrected", ['74a1eb55a32e76e5', '483b47956729e9ec', '625d0aaabe245585']),
    ("sparse_threshold", {"N": 6}, "corrected", ['ef7680afac30e90e', '3f2522574322e4d3', '7489c1a0d8a2d64a']),
    ("sparse_threshold", {"N": 6, "s": 3}, "corrected", ['6d5f8c9c7671ef84', 'f476f38d90bd275c', 'c67c7373d9dd93f4']),
    ("sparse_threshold", {"N": 10, "shared_g": True}, "paper",
     ['af68cfaa82ea403a', '79d3b8061a9ad69a', 'f3643815cd61ec8f']),
    ("sparse_threshold", {"N": 10, "shared_g": True}, "corrected",
     ['071c0b3e856444b4', '6375f696011a561b', '45356abb459a20d4']),
    ("nearest_neighbour", {"N": 4}, "corrected", ['ba76c8b1250209d8', '42c61189ba548f6e', '39df210d118e8c70']),
    ("nearest_neighbour", {"N": 6}, "corrected", ['30ca9f9b8b75e3a7', 'b6e1f1434f4d5d49', '4f3dc82d0aeeb156']),
    ("nearest_neighbour", {"N": 4}, "unscaled", ['b017d0ec4a1d2adb', 'cf64feb882340a3f', '78042048ebadb0ca']),
    ("mqar", {"N": 6}, "corrected", ['16600cf3b6227649', 'f3adf4d5a712cfec', '55e23d211f152e52']),
    ("mqar", {"N": 6}, "unscaled", ['1537800a0ba162cf', 'c6e97e37c17c51d5', '875f967f4147d198']),
    ("mqar", {"N": 8}, "corrected", ['8a4cc9f6f9509381', '3362d3a857fd9b95', '33b097e3859dc186']),
    ("nearest_neighbour", {"N": 4, "k": 16}, "corrected", ['c4ba902b56ae4624', 'daaa9971455e6ac8', 'cbab5f3043cc17c1']),
]


def code_fingerprint(problem) -> str:
    m, arith = problem.model, problem.arith
    h = hashlib.sha256()
    for name, arr in sorted(m.named_arrays().items()):
        codes, _ = arith.quantize(arr)
        h.update(name.encode())
        h.update(np.ascontiguousarray(codes).tobytes())
        h.update(str(codes.shape).encode())
    h.update(str(threshold_code(m.readout.theta, arith)).encode())
    h.update(json.dumps([m.readout.kind, m.readout.positions, [bool(x) for x in m.P_mask],
                         [[l.attention, bool(l.residual), bool(l.causal)] for l in m.layers]]).encode())
    return h.hexdigest()[:16]


@pytest.mark.slow
@pytest.mark.parametrize("task,opts,variant,fingerprints", FORMER_BUILDS)
def test_the_rebuilt_constructions_have_their_former_codes(task, opts, variant, fingerprints):
    opts = dict(opts)
    k = opts.pop("k", None)
    got = [code_fingerprint(verifier.build_problem(task, p=p, variant=variant, k=k, **opts)) for p in (8, 12, 16)]
    assert got == fingerprints


# -- exact rational weights --------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("task,opts,variant,float_arrays", [
    ("index_lookup", {"N": 16, "sigma": 4}, "corrected", {"L0.H0.W_Q"}),  # k = 16: T = +-1/4 exactly
    ("index_lookup", {"N": 8}, "paper", {"E", "P", "L0.H0.W_Q"}),  # Cor 8.1: k = 13, 1/sqrt(13)
    ("equality", {"N": 16}, "corrected", {"L0.H0.W_Q"}),
    ("equality", {"N": 12}, "paper", {"P", "L0.H0.W_Q"}),
    ("sparse_threshold", {"N": 6, "s": 2}, "corrected", {"P", "L0.H0.W_Q", "L0.H1.W_Q"}),
    ("nearest_neighbour", {"N": 8, "dim": 4}, "paper", {"L0.H0.W_Q", "L1.H0.W_Q"}),  # k = 16, d' = 4
    ("nearest_neighbour", {"N": 4}, "paper", {"E", "P", "L0.H0.W_V", "L0.H0.W_Q", "L1.H0.W_Q"}),  # k = 8, d' = 2
    ("mqar", {"N": 6}, "unscaled", {"E", "P", "L0.H0.W_V", "L0.H0.W_Q"}),  # the printed 1/k is exact
])
def test_rational_recipes_are_built_exactly(task, opts, variant, float_arrays):
    model = verifier.build_problem(task, p=12, variant=variant, **opts).model
    assert {name for name, a in model.named_arrays().items() if not is_exact(a)} == float_arrays
    for name, a in model.named_arrays().items():
        if is_exact(a):
            assert all(isinstance(x, Fraction) for x in a.ravel()), name


def test_thresholds_are_exact_fractions():
    assert verifier.build_problem("equality", N=12, p=12, variant="paper").model.readout.theta == Fraction(-1, 12)
    inst = verifier.build_problem("sparse_threshold", N=10, p=12, variant="paper", shared_g=True)
    assert inst.model.readout.theta == Fraction(inst.task.inst.b) / 11
    nn = verifier.build_problem("nearest_neighbour", N=4, p=12, variant="paper").model
    assert nn.readout.theta == Fraction(1, 2)


# -- C.2, index lookup ----------------------------------------------------------------------------
def test_c2_printed_maps_in_row_vector_form():
    """W_Q = eta[O; I; O] is a (d, k) matrix in the row-vector form x W_Q; the model (column form)
    holds its transpose.  W_K = [O, O, I] and W_V = [I, O, O] are in Section 2's column form."""
    problem = verifier.build_problem("idxl", N=6, p=12, variant="paper", sigma=3)
    model, info = problem.model, problem.model.info
    b, k, eta = info["b"], info["k"], info["eta"]
    O, I = np.zeros, np.eye
    printed_W_Q = eta * np.vstack([O((b, k)), I(k), O((k, k))])
    printed_W_K = np.hstack([O((k, b)), O((k, k)), I(k)])
    printed_W_V = np.hstack([I(b), O((b, k)), O((b, k))])
    head = model.layers[0].heads[0]
    assert np.array_equal(head.W_Q, printed_W_Q.T)
    assert np.array_equal(np.asarray(head.W_K, dtype=float), printed_W_K)
    assert np.array_equal(np.asarray(head.W_V, dtype=float), printed_W_V)
    p = np.asarray(model.E[3 + 2], dtype=float)  # the index token #3: [0, T(3), 0]
    T3 = np.asarray(model.P[2], dtype=float)[b + k:]  # position 3 carries T(3) in the last part
    assert np.allclose(p @ printed_W_Q, eta * T3)  # "Q(p) = eta [T(p)]"
    assert np.allclose(printed_W_K @ p, 0)  # "<Q(p), K(p)> = 0"
    assert info["eta"] == pytest.approx(2 * math.log(18)) and info["T"] == "random"


@pytest.mark.parametrize("N,sigma,p", [(6, 3, 8), (8, 2, 8)])
def test_c2_as_printed_is_proved_at_small_N(N, sigma, p):
    result = verifier.prove("idxl", N=N, sigma=sigma, p=p, variant="paper", engine="exhaustive")
    assert result.verdict == "proved" and result.covered == result.total


def test_c2_paper_is_listed_as_buildable(capsys):
    main(["list"])
    lines = [line for line in capsys.readouterr().out.splitlines() if "--variant paper" in line]
    assert any("row-vector" in line and "cannot be built" not in line for line in lines)


# -- F.3, one g per feature size ------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(4))
def test_f3_printed_ffn_computes_one_g_per_size(seed):
    """On every z the printed embedding lets the FFN see (+-1 on the first t coordinates, 0 after),
    the units give g_t(z_1..t) exactly."""
    rng = np.random.default_rng(seed)
    s = 3
    tables = {t: rng.integers(0, 2, size=1 << t) for t in sorted(rng.choice([1, 2, 3], size=2, replace=False))}
    units = printed_units(tables, s)
    for t, g in tables.items():
        for idx, u in enumerate(itertools.product([-1, 1], repeat=t)):
            z = {("z", h): (u[h] if h < t else 0) for h in range(s)}
            out = sum(c[("g", 0)] * max(sum(w * z[key] for key, w in inp.items()) + bias, 0)
                      for inp, bias, c in units)
            assert out == g[idx], (t, u)


def test_f3_builds_features_of_different_sizes_and_refuses_two_gs_of_one_size(tmp_path, capsys):
    one_per_size = {"b": 1, "features": [{"I": [1], "g": [1, 0]}, {"I": [2, 5], "g": [0, 1, 1, 0]},
                                         {"I": [3], "g": [1, 0]}, {"I": [4, 6], "g": [0, 1, 1, 0]},
                                         {"I": [], "g": [0]}, {"I": [1, 6], "g": [0, 1, 1, 0]}]}
    path = tmp_path / "sizes.json"
    path.write_text(json.dumps(one_per_size))
    result = verifier.prove("sparse_threshold", N=6, p=12, variant="paper", instance=str(path), engine="exhaustive")
    assert result.verdict == "proved" and result.covered == 64
    one_per_size["features"][2]["g"] = [0, 1]  # a second g of size 1
    path.write_text(json.dumps(one_per_size))
    with pytest.raises(UnbuildableError, match="holds the positions of a feature's bits but nothing of its g"):
        verifier.build_problem("sparse_threshold", N=6, p=12, variant="paper", instance=str(path))
    assert main(["sparse_threshold", "--N", "6", "--p", "12", "--variant", "paper", "--instance", str(path)]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


# -- G.2, nearest neighbour and MQAR ------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("task,N", [("nearest_neighbour", 4), ("mqar", 6)])
def test_g2_paper_T_meets_the_stated_gram_bound(task, N):
    problem = verifier.build_problem(task, N=N, p=12, variant="paper")
    info, gamma = problem.model.info, problem.task.gamma
    assert info["gram_max_offdiag"] <= gamma / 100 and info["gram_ok"] and info["r"] >= 2 * N
    T = sign_vectors(2 * N).T
    assert np.abs(T @ T.T - np.eye(2 * N)).max() <= gamma / 100
    # the former reading's T (Corollary 8.1's random signs) breaks it: 0.2308 at N = 4
    unscaled = verifier.build_problem(task, N=N, p=12, variant="unscaled").model.info
    assert unscaled["gram_max_offdiag"] > gamma / 100


def test_g2_no_T_narrower_than_2N_meets_the_bound():
    """2N unit vectors with |<T(i), T(j)>| <= gamma/100 < 1/(2N - 1) have a strictly diagonally
    dominant Gram matrix, of rank 2N: random signs of any narrower width fail the check."""
    for k in (4, 6, 7):
        assert not sign_vectors(8, k, seed=0, thresh=1 / 100, two_sided=True).ok


@pytest.mark.parametrize("task,N", [("nearest_neighbour", 4), ("mqar", 6)])
def test_g2_layer2_query_is_scaled_by_layer_1s_rule(task, N):
    problem = verifier.build_problem(task, N=N, p=12, variant="paper")
    model, gamma = problem.model, problem.task.gamma
    eta2 = layer2_eta(N, gamma)
    assert eta2 == pytest.approx(math.log(18 * N) / (1 - gamma / 50))
    B6 = np.array(["B6" in name for name in model.residual_rows])
    Ts = np.where(np.arange(B6.sum()) % 3 == 0, 1.0, -1.0)  # any T_s(2j*) in {-1, 1}^k
    x = np.zeros(model.d)
    x[B6] = Ts
    k = int(B6.sum())
    printed = Ts / k  # "(1/k) T_s(2j*)"
    assert np.allclose(model.layers[1].heads[0].W_Q @ x, math.sqrt(k) * eta2 * printed)  # = eta2 T(2j*)
    unscaled = verifier.build_problem(task, N=N, p=12, variant="unscaled").model
    ku = unscaled.info["r"]
    xu = np.zeros(unscaled.d)
    xu[np.array(["B6" in n for n in unscaled.residual_rows])] = 1.0
    assert np.allclose(np.asarray(unscaled.layers[1].heads[0].W_Q, dtype=float) @ xu, np.full(ku, 1 / ku))


def test_g2_sigma_is_applied_to_the_layer_2_output():
    model = verifier.build_problem("nearest_neighbour", N=4, p=12, variant="paper").model
    layer = model.layers[1]
    Y = model.residual_rows.index("Y")
    W1, b1, W2, b2 = (np.asarray(getattr(layer, n), dtype=float) for n in ("W1", "b1", "W2", "b2"))
    for y in (-2.5, -1.0, -0.3, 0.0, 0.4, 0.95, 1.0, 3.0):
        x = np.zeros(model.d)
        x[Y] = y
        out = x + W2 @ np.maximum(W1 @ x + b1, 0) + b2  # residual FFN
        assert out[Y] == pytest.approx(min(max(y, -1.0), 1.0))  # sigma(y)
    assert not verifier.build_problem("nearest_neighbour", N=4, p=12, variant="corrected").model.layers[1].has_ffn


@pytest.mark.slow
@pytest.mark.parametrize("task,N,published", [("nearest_neighbour", 4, "++ 1 +- 0 ++"),
                                              ("mqar", 6, "++ 1 +- 0 -+ 0 ++")])
def test_g2_printed_with_its_scaling_is_proved_and_the_published_counterexamples_are_right(task, N, published):
    result = verifier.prove(task, N=N, p=12, variant="paper", engine="exhaustive")
    assert result.verdict == "proved" and result.covered == result.total
    for variant in ("paper", "literal"):
        problem = verifier.build_problem(task, N=N, p=12, variant=variant)
        tokens = np.array([problem.task.vocab.index(w) for w in published.split()])
        t = verifier.explain(problem, tokens)
        assert t.truth == 1 and t.margin > 0 and t.real_margin > 0  # FX and the unquantized model
    unscaled = verifier.build_problem(task, N=N, p=12, variant="unscaled")
    assert verifier.explain(unscaled, tokens).margin < 0  # what the former errata row found


def test_g2_literal_key_is_minus_2_3_on_labels():
    model = verifier.build_problem("nearest_neighbour", N=4, p=12, variant="literal", k=16).model  # exact T
    W_K = model.layers[0].heads[0].W_K
    assert is_exact(W_K)
    middle = W_K[model.info["dim"]]  # the key's row after x: its middle entry
    V = len(model.vocab) - 2
    for q in range(1, 2 * 4):
        tokens = [0, V, 0, V, 0, V, 0][q - 1]  # a vector at odd q, the label 0 at even q
        z = model.E[tokens] + model.P[q - 1]
        assert sum(w * Fraction(x) for w, x in zip(middle, z) if w) == (3 if q % 2 else Fraction(-23, 10))


@pytest.mark.slow
@pytest.mark.parametrize("task,N", [("nearest_neighbour", 4), ("mqar", 6)])
def test_g2_literal_changes_no_answer(task, N):
    from verifier.evaluator import make_evaluator
    answers = {}
    for variant in ("paper", "literal"):
        problem = verifier.build_problem(task, N=N, p=12, variant=variant)
        ev = make_evaluator(problem.model, problem.arith)
        answers[variant] = np.concatenate([ev.forward(b.tokens).pred
                                           for b in problem.task.batches(0, problem.task.total, 4096)])
    assert len(answers["paper"]) == problem.task.describe()["valid"]
    assert np.array_equal(answers["paper"], answers["literal"])
    assert verifier.prove(task, N=N, p=12, variant="literal", engine="exhaustive").verdict == "proved"


# -- residual rows by name ----------------------------------------------------------------------------
def test_layout_names_its_rows():
    L = Layout(c0=1, B3=3, m=1)
    assert L.names() == ["c0", "B3[0]", "B3[1]", "B3[2]", "m"]
    over = Layout(token=2, flag=1).padded(4).overlay(x0=2, x1=2)
    assert over.names() == ["token[0]/x0[0]", "token[1]/x0[1]", "flag/x1[0]", "pad/x1[1]"]


def test_first_departure_names_a_residual_row():
    real = np.zeros((2, 3))
    table = {"embed": {"values": real, "real": real, "codes": real},
             "L0.H0.q": {"values": real, "real": real, "codes": real},
             "L0.out": {"values": real + np.array([0, 0, 1.0]), "real": real, "codes": real}}
    dep = first_departure(table, 4, ["c0", "c1", "m"])
    assert dep["at"] == "L0.out[m]" and dep["row"] == "m" and dep["element"] == [0, 2]
    assert "at" not in first_departure(table, 4)  # a model without names keeps indices
    text = format_trace(table, ["c0", "c1", "m"], 2.0 ** -4)
    assert text.splitlines()[0].startswith("first departure (the format more than one step from real): L0.out[m]")
    lines = text.splitlines()
    after = {line.split()[0]: lines[i + 1].split()[0] for i, line in enumerate(lines) if "  shape " in line}
    assert after == {"embed": "rows", "L0.H0.q": "[0]", "L0.out": "rows"}


def test_dumps_reports_and_trace_name_the_rows(tmp_path, capsys):
    problem = verifier.build_problem("equality", N=6, p=12, variant="paper")
    result = verifier.run(problem, "exhaustive")
    assert result.verdict == "refuted" and result.residual_rows == problem.model.residual_rows
    path = write_dumps(result, tmp_path)[0]
    doc = json.loads(path.read_text())
    assert doc["residual_rows"][:3] == ["c0", "c1", "B3[0]"] and "m" in doc["residual_rows"]
    dep = doc["first_departure"]
    if "at" in dep:
        assert dep["at"] == f"{dep['name']}[{doc['residual_rows'][dep['element'][-1]]}]"
    page = render("dump", doc)
    assert '<tr class="names"><td>L1.resid rows</td>' in page and " m" in page.split("L1.resid rows")[1][:2000]
    assert '<tr class="names"><td>L0.H0.q rows</td>' not in page
    assert main(["equality", "--N", "6", "--p", "12", "--variant", "paper", "--trace"]) == 1
    out = capsys.readouterr().out
    assert "first departure" in out and any(line.split()[:2] == ["rows", "c0"] for line in out.splitlines())


def test_model_files_keep_the_row_names(tmp_path):
    model = verifier.build_problem("mqar", N=6, p=12, variant="paper").model
    path = save_model(model, tmp_path / "m.npz")
    back = load_model(path)
    assert back.residual_rows == model.residual_rows
    meta = json.loads(str(np.load(path)["meta"]))
    assert meta["version"] == 3 and meta["residual_rows"][:3] == ["X[0]", "X[1]", "Y"]
    arrays = dict(np.load(path))
    for change, message in ((dict(version=2), 'need.? "version": 3'),
                            (dict(residual_rows=["a"] * model.d), "residual_rows")):
        bad = tmp_path / f"bad{len(message)}.npz"
        np.savez(bad, **{**arrays, "meta": np.array(json.dumps({**meta, **change}))})
        with pytest.raises(InputError, match=message):
            load_model(bad)


@pytest.mark.slow
def test_the_attention_figure_names_the_first_departure(tmp_path):
    pytest.importorskip("matplotlib")
    from verifier.outputs.dump import departure_text
    from verifier.outputs.plots import attention_figure
    result = verifier.prove("equality", N=6, p=12, variant="paper", engine="exhaustive")
    doc = json.loads(write_dumps(result, tmp_path)[0].read_text())
    fig = attention_figure(doc)
    title = fig._suptitle.get_text()
    assert f"first departure of FX from real: {departure_text(doc['first_departure'])}" in title
    doc["first_departure"] = {"name": "L0.out", "element": [5, 12], "fx": 0.0, "real": 1.0, "gap_steps": 64.0,
                              "row": "m", "at": "L0.out[m]"}
    assert "L0.out[m] at element [5, 12]" in attention_figure(doc)._suptitle.get_text()
