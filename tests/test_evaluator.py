"""The batched evaluator (fast and generic paths) against the per-input reference loop."""

import numpy as np
import pytest
from helpers import add_biases, random_model
from reference import RefFX, ref_answer, ref_forward

from verifier.arithmetic import ACCUMULATES, ROUNDINGS, FixedPoint
from verifier.evaluator import Evaluator, reference, trace

MODES = [(r, a, o) for r in ROUNDINGS for a in ACCUMULATES for o in ("saturate", "error")]


def assert_matches_reference(model, fx: FixedPoint, tokens: np.ndarray) -> None:
    """Both batched paths give the reference loop's readout codes, overflow flags and answers."""
    fast, generic = Evaluator(model, fx), Evaluator(model, fx, tables=False)
    a, b = fast.forward(tokens), generic.forward(tokens)
    np.testing.assert_array_equal(a.scores, b.scores)
    np.testing.assert_array_equal(a.ovf, b.ovf)
    for i, row in enumerate(tokens):
        ref = RefFX(fx.p, fx.f, fx.rounding, fx.overflow, fx.accumulate)
        y, ovf = ref_forward(model, ref, list(row))
        assert list(a.scores[i]) == y, list(row)
        if fx.overflow == "error":
            assert bool(a.ovf[i]) == ovf, list(row)
        pred, tie = ref_answer(model, ref, y)
        assert (int(a.pred[i]), bool(a.tie[i])) == (pred, tie)


@pytest.mark.slow
@pytest.mark.parametrize("rounding,accumulate,overflow", MODES)
def test_batched_paths_match_reference_loop(rounding, accumulate, overflow):
    rng = np.random.default_rng(hash((rounding, accumulate, overflow)) % 2 ** 32)
    kinds = set()
    for trial in range(12):
        V, L = int(rng.integers(2, 5)), int(rng.integers(2, 5))
        model = random_model(rng, V, L, C=int(rng.integers(1, 4)))
        kinds |= {(l.attention, l.causal, l.residual, l.has_ffn) for l in model.layers}
        p = int(rng.integers(4, 11))
        fx = FixedPoint(p, int(rng.integers(0, p + 1)) if trial % 3 == 0 else None, rounding, overflow, accumulate)
        for length in range(1, L + 1):
            assert_matches_reference(model, fx, rng.integers(0, V, size=(20, length)))
    assert len(kinds) >= 4  # several architectures were covered


@pytest.mark.slow
@pytest.mark.parametrize("heads", [1, 2, 3, 4])
def test_relu_attention_with_averaged_heads_matches_reference(heads):
    """ReLU attention with the 1/m head average (Chen and Zou 2024), R(sum / m) rounded exactly."""
    rng = np.random.default_rng(heads)
    for rounding, accumulate, overflow in MODES:
        V, L = int(rng.integers(2, 5)), int(rng.integers(2, 5))
        model = random_model(rng, V, L, C=2, dims={"H": heads, "attention": "relu"})
        fx = FixedPoint(int(rng.integers(4, 11)), None, rounding, overflow, accumulate)
        assert_matches_reference(model, fx, rng.integers(0, V, size=(16, L)))


def test_every_attention_kind_is_exercised():
    rng = np.random.default_rng(7)
    seen = set()
    for _ in range(60):
        m = random_model(rng, 3, 3)
        seen |= {(l.attention, l.causal) for l in m.layers}
    assert seen == {("softmax", False), ("softmax", True), ("relu", False), ("relu", True)}


def test_real_reference_matches_a_float_forward_pass():
    """The float64 reference path against a direct numpy transcription of the layer equations."""
    rng = np.random.default_rng(3)
    for _ in range(20):
        model = random_model(rng, 3, 4)
        tokens = rng.integers(0, 3, size=(5, 4))
        got = reference(model).forward(tokens).scores
        for i, row in enumerate(tokens):
            X = model.E[row] + model.P[:4] * model.P_mask[row][:, None]
            for layer in model.layers:
                outs = []
                for h in layer.heads:
                    S = (X @ h.W_Q.T) @ (X @ h.W_K.T).T
                    allowed = np.tril(np.ones((4, 4), bool)) if layer.causal else np.ones((4, 4), bool)
                    if layer.attention == "softmax":
                        M = np.where(allowed, S, -np.inf).max(1, keepdims=True)
                        e = np.where(allowed, np.exp(np.where(allowed, S - M, 0)), 0)
                        A = e / e.sum(1, keepdims=True)
                    else:
                        A = np.where(allowed, np.maximum(S, 0), 0)
                    outs.append(A @ (X @ h.W_V.T))
                heads = np.concatenate(outs, 1) if layer.attention == "softmax" else np.mean(outs, 0)
                Y = heads @ layer.W_O.T
                X = X + Y if layer.residual else Y
                if layer.has_ffn:
                    F = np.maximum(X @ layer.W1.T + layer.b1, 0) @ layer.W2.T + layer.b2
                    X = X + F if layer.residual else F
            want = model.readout.W_U @ X[-1] + model.readout.b_U
            np.testing.assert_allclose(got[i], want, rtol=1e-9, atol=1e-9)


def test_trace_records_every_intermediate():
    from verifier.constructions.index_lookup import build
    model = build(4)
    out, values = trace(Evaluator(model, FixedPoint(10), tables=False), np.array([0, 1, 1, 4]))
    for name in ("embed", "L0.H0.q", "L0.H0.k", "L0.H0.v", "L0.H0.logits", "L0.H0.max", "L0.H0.exp", "L0.H0.Z",
                 "L0.H0.attn", "L0.H0.out", "L0.heads", "L0.attn_out", "L0.ffn_hidden", "L0.ffn_out", "L0.out",
                 "readout.scores"):
        assert name in values, name
    assert values["L0.H0.logits"].shape == (1, 4)
    assert int(values["L0.H0.Z"][0]) == int(values["L0.H0.exp"].sum())


def test_overflow_location_is_reported():
    from verifier.constructions.index_lookup import build
    ev = Evaluator(build(16), FixedPoint(5, overflow="error"), tables=False)
    out, _ = trace(ev, np.array([0, 2]))
    assert out.ovf[0] and any("W_Q" in w for w in out.where)


def test_a_sample_evaluator_builds_layer0_tables_only_under_its_cap(monkeypatch):
    """The sample check of a proof evaluates a few hundred inputs: at index lookup N = 512 the layer-0
    tables took 8 GB for them.  Above SAMPLE_TABLES bytes the sample evaluator reads the weights
    instead, with the same codes."""
    import verifier.evaluator as evaluator
    rng = np.random.default_rng(0)
    model = random_model(rng, 3, 5)
    fx = FixedPoint(8, 4)
    tokens = rng.integers(0, 3, (64, 5))
    with_tables = evaluator.fitting_evaluator(model, fx)
    assert with_tables.tables is not None
    monkeypatch.setattr(evaluator, "SAMPLE_TABLES", 8)
    without = evaluator.fitting_evaluator(model, fx)
    assert without.tables is None
    a, b = with_tables.forward(tokens), without.forward(tokens)
    assert np.array_equal(a.scores, b.scores) and np.array_equal(a.ovf, b.ovf)


@pytest.mark.parametrize("rounding,accumulate,overflow", MODES)
def test_zero_rows_repeated_rows_and_chunked_tables_match_reference(rounding, accumulate, overflow, monkeypatch):
    """The fast path computes only the rows of a map that have a non-zero weight (a zero row is its
    bias), builds the layer-0 tables a few rows at a time, and its logit table over distinct query
    and key rows: the same codes and flags as the reference loop, on models made to have all three."""
    import verifier.evaluator as evaluator
    monkeypatch.setattr(evaluator, "_TABLE_CHUNK", 7)  # several chunks, one of them partial
    rng = np.random.default_rng(hash((rounding, accumulate, overflow)) % 2 ** 32)
    distinct = []
    for _ in range(2):
        V, L = int(rng.integers(2, 5)), int(rng.integers(3, 6))
        model = add_biases(random_model(rng, V, L, C=2, dims={"d": 6, "attention": "softmax"}), rng)
        model.E[:, :3] = 0.0  # the first three slots are positional: heads that read only them ...
        for layer in model.layers:
            for M in (layer.W_O, *([layer.W2] if layer.has_ffn else [])):
                M[rng.permutation(M.shape[0])[:M.shape[0] - 2]] = 0.0  # ... and maps that write two slots
        for head in model.layers[0].heads:
            head.W_Q[:, 3:], head.W_K[:, 3:] = 0.0, 0.0  # ... whose rows repeat over the tokens
        fx = FixedPoint(int(rng.integers(5, 11)), None, rounding, overflow, accumulate)
        t = Evaluator(model, fx).tables
        distinct += [len(table.values) < V * L for table in t.logits]
        for length in (1, L):
            assert_matches_reference(model, fx, rng.integers(0, V, size=(12, length)))
    assert all(distinct)


def test_a_positional_head_at_n_256_is_evaluated_on_tables():
    """Equality at N = 256: its first head reads positions only, so its logit table is over 129 x 256
    distinct rows (it was over 512 x 512 (position, token) rows, too large, and the tables were not
    built: the proof's sample check then took 220 s on the weights)."""
    import verifier
    from verifier.evaluator import fitting_evaluator
    problem = verifier.build_problem("equality", N=256, p=17)
    ev = fitting_evaluator(problem.model, problem.arith)
    assert ev.tables is not None and ev.tables.logits is not None
    table = ev.tables.logits[0]
    assert table.values.shape[0] <= 256 + 1 and table.values.shape[1] <= 256
