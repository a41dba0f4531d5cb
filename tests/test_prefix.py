"""The prefix engine (verifier/engines/prefix.py) against enumeration: the Dyck-(2,2) transformer
(Bhattamishra et al. 2024, arXiv:2406.09347, Section 4.3) on both sides of its frontier and
random perturbations of it, in every rounding and accumulation; a merge that forgets a column of
the future terms caught; a wrong composition an internal error; the models it declines."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from helpers import declines_formats, prefix_shaped, random_saturating_format

from verifier.engines import ENGINES, RunOptions, candidates, prefix
from verifier.engines.base import Problem, group_rows
from verifier.engines.exhaustive import Exhaustive
from verifier.engines.prefix import Prefix, basis_columns
from verifier.evaluator import Evaluator
from verifier.model import Head, Layer, Model, Readout
from verifier.runs.api import build_problem
from verifier.support.budget import Deadline, TimedOut
from verifier.support.errors import InternalError
from verifier.tasks.sequences import Dyck22
from verifier.verdicts import Status

ALL = RunOptions(max_counterexamples=1 << 30)


def _agree(problem) -> str:
    """Both engines on the problem: the same verdict; refuted, the same failing inputs at the shortest
    failing length (the prefix engine stops there; longer inputs are not covered); proved, the same
    smallest margin.  Returns the verdict."""
    mine, theirs = Prefix().run(problem, ALL), Exhaustive().run(problem, ALL)
    assert bool(mine.found) == bool(theirs.found), (len(mine.found), len(theirs.found))
    if not theirs.found:
        assert mine.covered == problem.task.total
        assert mine.min_margin == pytest.approx(theirs.min_margin)
        return "proved"
    length = min(len(f.tokens) for f in theirs.found)
    assert {f.index for f in mine.found} == {f.index for f in theirs.found if len(f.tokens) == length}
    assert mine.covered == problem.task.count_up_to(length - 2)
    return "refuted"


@pytest.mark.parametrize("N,f,ps", [(4, 3, (8, 9, 11)), (4, 4, (9, 10)), (5, 3, (8, 9, 12)), (6, 4, (11, 12)),
                                    (6, 3, (10, 12))])
def test_the_construction_agrees_with_enumeration(N, f, ps):
    verdicts = {_agree(build_problem("dyck22", N=N, p=p, f=f)) for p in ps}
    assert verdicts == {"proved", "refuted"}  # p crosses the frontier: both kinds are compared


def test_at_N_8_on_both_sides_of_the_frontier():
    """p* = 14 at N = 8, f = 4: p = 13 fails at length 8 (a previous-token logit saturates)."""
    assert [_agree(build_problem("dyck22", N=8, p=p, f=4)) for p in (13, 14)] == ["refuted", "proved"]


@pytest.mark.parametrize("seed", range(10))
def test_random_models_of_the_shape_agree_with_enumeration(seed):
    rng = np.random.default_rng(seed)
    problem = prefix_shaped(build_problem("dyck22", N=int(rng.integers(4, 7)), p=16, f=4), rng)
    assert Prefix().unsupported(problem, ALL) is None
    _agree(problem)


def test_the_counts_merge():
    """At N = 16 the first layer's four bracket counts become A and B: far fewer pairs than prefixes."""
    result = Prefix().run(build_problem("dyck22", N=16, p=17, f=5), RunOptions())
    assert result.covered == build_problem("dyck22", N=16, p=17, f=5).task.total and not result.found
    assert result.stats["largest_length_pairs"] < 20_000  # 4^16 prefixes of length 16


def _rows(problem, monkeypatch) -> tuple[set, set]:
    """The last layer's output rows the engine reads out, every column of them computed (`_live`
    says every column is read), and those at every position of every input (enumeration)."""
    seen: set[tuple] = set()
    scores = Evaluator.scores

    def spy(ev, X, ctx, rec=None):
        seen.update(map(tuple, X.reshape(-1, X.shape[-1]).tolist()))
        return scores(ev, X, ctx, rec)

    with monkeypatch.context() as m:
        m.setattr(Evaluator, "scores", spy)
        m.setattr(prefix, "_live", lambda q, kinds: [np.arange(q.d)] * len(q.layers))
        assert not Prefix().run(problem, RunOptions()).found
    task, ev = problem.task, Evaluator(problem.model, problem.arith)
    every: set[tuple] = set()
    for n in range(1, task.N + 1):
        tokens = np.array([task.decode(i) for i in range(task.count_up_to(n - 1), task.count_up_to(n))])
        values: dict = {}
        ev.forward(tokens, rec=values.__setitem__)
        every.update(map(tuple, values[f"L{len(problem.model.layers) - 1}.out"].reshape(-1, ev.q.d).tolist()))
    return seen, every


@pytest.mark.parametrize("N,p,f", [(5, 9, 3), (6, 12, 4)])
def test_every_prefix_is_read_out_as_enumeration_reads_it(N, p, f, monkeypatch):
    """Beyond the verdict: the last layer's rows at the candidates are those at every position of
    every input (each prefix has the summary of a kept pair, and each pair is a prefix's)."""
    seen, every = _rows(build_problem("dyck22", N=N, p=p, f=f), monkeypatch)
    assert seen == every


class _Accepting(Dyck22):
    """Every prefix is accepted (a one-state DFA): a random model is then judged by its margins alone,
    and with its readout's offset set (`_offset`) it passes many lengths, so its merges are compared
    deep."""

    dfa = np.zeros((1, 4), np.int64)


def _random_model(rng: np.random.Generator, N: int) -> Model:
    """A random causal model of the shape the prefix engine takes: 1-3 layers of 1-3 heads, each
    uniform (its query map or its key map 0), silent (its columns of W_O 0) or, in the first layer,
    local (a query of ONE against a key of POS: the latest keys weigh most); attention biases, FFNs
    and layers without residual at random; value maps of -1, 0, 1 on embeddings of -1, 0, 1 (so
    that histograms merge); an argmax or a threshold readout."""
    V, d = 5, int(rng.integers(3, 8))
    E = rng.choice([-1.0, 0.0, 1.0], size=(V, d))
    P = np.zeros((N + 1, d))
    E[:, 0], E[:, 1], P[:, 1] = 1.0, 0.0, np.arange(N + 1)  # ONE, POS
    layers = []
    for li in range(int(rng.integers(1, 4))):
        biases, H, m, mv = rng.random() < 0.4, int(rng.integers(1, 4)), int(rng.integers(1, 3)), int(rng.integers(1, 3))
        heads, W_O = [], rng.normal(0, 1, (d, H * mv)) * (rng.random((d, H * mv)) < 0.6)
        for hi in range(H):
            kind = rng.choice(["uniform", "silent", "local"] if li == 0 else ["uniform", "uniform", "silent"])
            W_Q, W_K = rng.normal(0, 1, (m, d)), rng.normal(0, 1, (m, d))
            W_V = rng.choice([-1.0, 0.0, 0.0, 1.0], size=(mv, d)) * (np.arange(d) != 1)
            b = [rng.normal(0, 1, m), rng.normal(0, 1, m), rng.choice([0.0, 0.5], size=mv)] if biases else [None] * 3
            if kind == "uniform" and rng.random() < 0.5:
                W_Q *= 0
                b[0] = None if b[0] is None else 0 * b[0]
            elif kind == "uniform":
                W_K *= 0
            elif kind == "local":
                W_Q, W_K = 0.1 * W_Q, 0.1 * W_K
                W_Q[0, 0], W_K[0, 1] = float(rng.choice([4, 8, 16])), 1.0
            else:
                W_O[:, hi * mv:(hi + 1) * mv] = 0
            heads.append(Head(W_Q, W_K, W_V, *b))
        h = int(rng.integers(1, 4))
        ffn = dict(W1=rng.normal(0, 1, (h, d)), b1=rng.normal(0, 1, h), W2=rng.normal(0, 1, (d, h)),
                   b2=rng.normal(0, 1, d)) if rng.random() < 0.5 else {}
        layers.append(Layer(heads, W_O, "softmax", residual=bool(rng.random() < 0.8), causal=True,
                            b_O=rng.normal(0, 1, d) if biases else None, **ffn))
    C = 2 if rng.random() < 0.7 else 1
    readout = Readout(rng.normal(0, 1, (C, d)), rng.normal(0, 1, C), "argmax" if C == 2 else "threshold",
                      float(rng.normal(0, 0.5)), positions="all")
    return Model(E, P, np.ones(V, bool), layers, readout, ["(", ")", "[", "]", "<s>"])


def _offset(problem, rng: np.random.Generator):
    """The problem with its readout's bias moved so that the positions before a random t > N / 2 pass with
    two steps to spare (enumeration says where): the later ones pass or fail as they will."""
    model, arith, task = problem.model, problem.arith, problem.task
    tokens = np.array([task.decode(i) for i in range(task.count_up_to(task.N - 1), task.total)])
    y = arith.to_real(Evaluator(model, arith).forward(tokens).scores)
    ro = model.readout
    gap = (y[..., 1] - y[..., 0] if ro.kind == "argmax" else y[..., 0] - ro.theta).min(axis=0)
    shift = float(gap[:int(rng.integers(task.N // 2 + 1, task.N + 2))].min()) - 2 * float(arith.step)
    b_U = ro.b_U - (np.array([0.0, shift]) if ro.kind == "argmax" else shift)
    return replace(problem, model=replace(model, readout=replace(ro, b_U=b_U)))


@pytest.mark.parametrize("seed", range(16))
def test_random_models_of_every_accepted_shape_agree_with_enumeration(seed):
    """Beyond the construction's shape: random models (`_random_model`) in a random fixed-point format
    or grid of step 1/k, against enumeration (the first model the engine takes, of a few drawn)."""
    rng = np.random.default_rng(seed)
    while True:
        N = int(rng.integers(2, 7))
        arith = random_saturating_format(rng, (6, 15), 2)
        problem = Problem(_Accepting(N), _random_model(rng, N), arith)
        if Prefix().unsupported(problem, ALL) is None:
            break
    _agree(_offset(problem, rng))


@pytest.mark.parametrize("drop", [0, 1])
def test_a_merge_that_forgets_a_column_is_caught(drop, monkeypatch):
    """Keyed on h T_J with the column of A (or of B) dropped, prefixes whose counts differ merge, and
    rows that enumeration reaches are never computed.  (The third column, the start token's count,
    is 1 in every prefix: dropping it merges nothing.)"""
    monkeypatch.setattr(prefix, "basis_columns", lambda T: [c for i, c in enumerate(basis_columns(T)) if i != drop])
    seen, every = _rows(build_problem("dyck22", N=6, p=12, f=4), monkeypatch)
    assert seen < every


def test_basis_columns_are_exact():
    T = np.array([[1, 2, 3, 1 << 40], [2, 4, 6, (1 << 41) + 1]])  # a float rank would call it 1
    assert basis_columns(T) == [0, 3]
    assert basis_columns(np.zeros((3, 4), np.int64)) == []


def _unique_rows(columns: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    cols = [c for a in columns for c in (a.T if a.ndim == 2 else [a])]
    _, first, group = np.unique(np.column_stack(cols), axis=0, return_index=True, return_inverse=True)
    return group.reshape(-1), first


@pytest.mark.parametrize("seed", range(6))
def test_group_is_a_sorted_unique_of_the_rows(seed):
    """`group_rows` against np.unique on the rows: groups numbered in the rows' order, each one's first
    row; on every path (a table over a small packed range, a sort with the row index packed below,
    columns of multiples of a weight, a packed range beyond int64, no rows, (P, k) blocks, (P, 0) blocks)."""
    rng = np.random.default_rng(seed)
    for P in (0, 1, 7, 3000, 40_000):
        for width, offset, weight in [(3, 0, 1), (200, -50, 1), (1 << 20, 1 << 40, 1), (1 << 12, -(1 << 50), 1 << 30),
                                      (1 << 30, -(1 << 61), 1), (P + 2, 5, 3)]:
            k = int(rng.integers(1, 5))
            cols = [rng.integers(0, width, P) * weight + offset + int(rng.integers(-3, 4)) for _ in range(k)]
            if k > 1 and rng.random() < 0.5:
                cols = [np.column_stack(cols[:2]), *cols[2:]]
            group, first = group_rows(cols)
            expected = _unique_rows(cols)
            assert np.array_equal(group, expected[0]) and np.array_equal(first, expected[1]), (P, width, k)
        # a (P, 0) block (a head whose keys read no column) has P rows, all one group
        for cols in ([np.zeros((P, 0), np.int64)], [np.zeros((P, 0), np.int64), np.full(P, 7)]):
            group, first = group_rows(cols)
            assert np.array_equal(group, np.zeros(P)) and np.array_equal(first, [0] * min(P, 1)), P


def test_a_wrong_composition_is_an_internal_error(monkeypatch):
    layer = prefix._Walk._layer

    def off_by_one(self, li, *args):
        out = layer(self, li, *args)
        return out + 1 if li == len(self.kinds) - 1 else out

    monkeypatch.setattr(prefix._Walk, "_layer", off_by_one)
    with pytest.raises(InternalError, match="composed readout"):
        Prefix().run(build_problem("dyck22", N=4, p=12, f=3), RunOptions())


def test_auto_takes_it_for_the_dyck_transformer_out_of_enumeration_reach():
    problem = build_problem("dyck22", N=16, p=17, f=5)
    engine, why = candidates(problem, RunOptions())[0]
    assert engine is ENGINES["prefix"] and "DFA" in why


def test_what_it_declines():
    problem = build_problem("dyck22", N=4, p=12, f=3)
    engine = Prefix()
    declines_formats(engine, problem)
    model = problem.model
    third = model.layers[2]
    reading = replace(third, heads=[replace(third.heads[0], W_Q=np.ones_like(third.heads[0].W_Q),
                                            W_K=np.ones_like(third.heads[0].W_K))])
    assert "layer 2's head 0" in engine.unsupported(replace(problem, model=replace(model, layers=[
        *model.layers[:2], reading])), RunOptions())
    open_mask = replace(model, layers=[replace(model.layers[0], causal=False), *model.layers[1:]])
    assert "causal" in engine.unsupported(replace(problem, model=open_mask), RunOptions())
    recurrent = build_problem("dyck22", N=4, p=8, f=1, variant="recurrent")
    assert "recurrent" in engine.unsupported(recurrent, RunOptions())
    assert "--start/--stop" in engine.unsupported(problem, RunOptions(start=1))
    assert "not given by a DFA" in engine.unsupported(build_problem("induction_heads", N=4, p=12), RunOptions())
    wide = build_problem("dyck22", N=8, p=12, f=4)  # the previous-token head is 7 positions wide
    assert "token windows" in engine.unsupported(wide, RunOptions())


def test_a_deadline_covers_the_lengths_explored():
    """Stopped in the middle, the lengths whose every pair was checked are covered, and the status
    says the time ran out."""
    problem = build_problem("dyck22", N=8, p=14, f=4)

    class Passes(Deadline):
        polls = 0

        def check(self) -> None:
            self.polls += 1
            if self.polls > 25:
                raise TimedOut()

    result = Prefix().run(problem, RunOptions(deadline=Passes()))
    explored = result.stats["lengths_explored"]
    assert result.status == Status.TIMEOUT and not result.found and 0 < explored < 8
    assert result.covered == problem.task.count_up_to(explored)
