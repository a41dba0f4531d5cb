"""The lookup engine (verifier/engines/lookup.py) against enumeration: L-fold composition (Chen,
Peng, Wu 2024, arXiv:2412.02975) at depths 2 and 3 and index lookup (Bhattamishra et al. 2024,
arXiv:2406.09347), at p on both sides of the failures, every rounding and accumulation, and random
perturbations of the weights that keep the shape; a loosened certificate caught; the models and
problems it refuses."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

import numpy as np
import pytest
from battery import reference_failures
from helpers import lookup_shaped, random_saturating_format

import verifier
from verifier.arithmetic import ACCUMULATES, ROUNDINGS, FixedPoint, Grid
from verifier.engines import ENGINES, RunOptions, candidates, lookup, plan
from verifier.engines.exhaustive import Exhaustive
from verifier.engines.lookup import Lookup
from verifier.floats import FloatArith, float_format
from verifier.model import Head, Layer, Model, Readout
from verifier.runs.api import build_problem
from verifier.support.budget import Deadline, TimedOut
from verifier.support.errors import InputError, InternalError
from verifier.tasks import make_task
from verifier.verdicts import Status

ALL = RunOptions(max_counterexamples=1 << 30)


def _agree(problem) -> str:
    """Both engines on the problem: the same failing inputs (as a set) and smallest margin."""
    mine, theirs = Lookup().run(problem, ALL), Exhaustive().run(problem, ALL)
    assert {f.index for f in mine.found} == {f.index for f in theirs.found}
    assert mine.covered == problem.task.total
    assert mine.min_margin == pytest.approx(theirs.min_margin)
    return "refuted" if theirs.found else "proved"


def _format(problem, p: int, f: int, rounding: str = "floor", accumulate: str = "product"):
    return replace(problem, arith=FixedPoint(p, f, rounding, "saturate", accumulate))


@pytest.mark.parametrize("N,depth", [(2, 2), (1, 3)])
@pytest.mark.parametrize("rounding", ROUNDINGS)
@pytest.mark.parametrize("accumulate", ACCUMULATES)
def test_composition_agrees_with_enumeration(N, depth, rounding, accumulate):
    """p = 4, 8, 12 at f = p / 2 and at f = p - 1 (too small a range for lambda: it fails), both
    verdicts compared."""
    verdicts = set()
    for p in (4, 8, 12):
        base = build_problem("composition", N=N, depth=depth, n=2, p=p)
        for f in (p // 2, p - 1):
            verdicts.add(_agree(_format(base, p, f, rounding, accumulate)))
    assert verdicts == {"proved", "refuted"}


@pytest.mark.parametrize("N,depth", [(1, 2), (2, 2), (1, 3)])
@pytest.mark.parametrize("f", [15, 18])
def test_the_widest_format_agrees_with_enumeration(N, depth, f):
    """FX(31, f) accumulated by product, the widest format int64 holds (products of codes reach 2^60):
    the lookup engine and enumeration fail the same inputs, and on the 8 inputs of N = 1, depth 2
    so does the independent reference (Python integers; it takes minutes on the 4,096 of the others)."""
    problem = _format(build_problem("composition", N=N, depth=depth, n=2, p=12), 31, f)
    problem.arith.check_model(problem.model)
    assert _agree(problem) == "proved"
    if problem.task.total <= 8:
        assert reference_failures(problem) == set()


@pytest.mark.parametrize("k,top", [(3, 2), (5, 8), (3, 64)])
def test_grids_agree_with_enumeration(k, top):
    """A grid of step 1/(4k) (not a power of 2) up to top: (3, 2) fails, (3, 64) proves without
    splitting, (5, 8) splits every position the layers read."""
    step = Fraction(1, 4 * k)
    problem = build_problem("composition", N=2, depth=2, n=2, p=10)
    _agree(replace(problem, arith=Grid.symmetric(step, Fraction(top), "nearest", "saturate", "product")))


@pytest.mark.parametrize("N,sigma,ps", [(4, 2, (3, 4, 6, 8)), (5, 3, (3, 5, 8))])
def test_index_lookup_agrees_with_enumeration(N, sigma, ps):
    assert {_agree(build_problem("index_lookup", N=N, sigma=sigma, p=p)) for p in ps} == {"proved", "refuted"}


@pytest.mark.parametrize("seed", range(12))
def test_random_models_of_the_shape_agree_with_enumeration(seed):
    rng = np.random.default_rng(seed)
    N, depth = [(2, 2), (1, 3)][seed % 2]
    problem = lookup_shaped(build_problem("composition", N=N, depth=depth, n=2, p=10), rng)
    assert Lookup().unsupported(problem, ALL) is None
    _agree(problem)


def _random_model(rng: np.random.Generator, like: Model) -> Model:
    """A random model of the shape the lookup engine takes, with `like`'s vocabulary, positions and
    classes: the stream's columns split at random into those the keys and values read and those the
    layers write (W_O, b_O, W2, b2); 1-3 layers of 1-2 heads, queries of scale 1 to 16 (so that far
    keys get exp codes of 0), attention biases and FFNs at random, causal or not, the last layer
    with or without residual; an argmax or a threshold readout."""
    V, L, C, d = len(like.vocab), like.max_len, like.readout.W_U.shape[0], int(rng.integers(4, 10))
    reads = rng.random(d) < 0.5
    reads[0], reads[-1] = True, False
    layers, n = [], int(rng.integers(1, 4))
    for li in range(n):
        biases, H, m, mv = rng.random() < 0.4, int(rng.integers(1, 3)), int(rng.integers(1, 3)), int(rng.integers(1, 3))
        heads = [Head(rng.normal(0, float(rng.choice([1, 4, 16])), (m, d)), rng.normal(0, 1, (m, d)) * reads,
                      rng.normal(0, 1, (mv, d)) * reads,
                      *([rng.normal(0, 1, m), rng.normal(0, 1, m), rng.normal(0, 1, mv)] if biases else [None] * 3))
                 for _ in range(H)]
        h = int(rng.integers(1, 4))
        ffn = dict(W1=rng.normal(0, 1, (h, d)), b1=rng.normal(0, 1, h), W2=rng.normal(0, 1, (d, h)) * ~reads[:, None],
                   b2=rng.normal(0, 1, d) * ~reads) if rng.random() < 0.4 else {}
        layers.append(Layer(heads, rng.normal(0, 1, (d, H * mv)) * ~reads[:, None], "softmax",
                            residual=bool(li < n - 1 or rng.random() < 0.7), causal=bool(rng.random() < 0.5),
                            b_O=rng.normal(0, 1, d) * ~reads if biases else None, **ffn))
    kind = "argmax" if rng.random() < 0.8 else "threshold"
    readout = Readout(rng.normal(0, 1, (C, d)), rng.normal(0, 1, C), kind, float(rng.normal(0, 0.5)))
    E, P = rng.normal(0, 1, (V, d)) * (rng.random((V, d)) < 0.7), rng.normal(0, 1, (L, d)) * (rng.random((L, d)) < 0.5)
    return Model(E, P, rng.random(V) < 0.8, layers, readout, list(like.vocab))


def _random_problem(seed: int):
    """A random model (`_random_model`) of composition or index lookup, in a random fixed-point
    format or grid of step 1/k."""
    rng = np.random.default_rng(seed)
    base = build_problem(**[dict(task="composition", N=2, depth=2, n=2), dict(task="composition", N=1, depth=3, n=2),
                            dict(task="index_lookup", N=4, sigma=2), dict(task="index_lookup", N=5, sigma=3)][seed % 4],
                         p=10)
    arith = random_saturating_format(rng, (5, 14), 1)
    return replace(base, model=_random_model(rng, base.model), arith=arith, built_in=False)


@pytest.mark.parametrize("seed", range(16))
def test_random_models_of_every_accepted_shape_agree_with_enumeration(seed):
    """Beyond the constructions' shapes."""
    problem = _random_problem(seed)
    assert Lookup().unsupported(problem, ALL) is None
    _agree(problem)


def test_a_loosened_certificate_is_caught(monkeypatch):
    """Not requiring exp codes of 0 (only logits <= M) takes a position that weighs as one that adds
    nothing: the streams checked on other completions disagree, and no verdict is given."""
    problem = build_problem("composition", N=2, depth=2, n=2, p=12)  # f = 6: the far keys' exp codes are not 0
    assert Lookup().run(problem, ALL).stats["certificate_splits"] > 0
    monkeypatch.setattr(lookup, "certified", lambda arith, smax, M: smax <= M[:, None])
    with pytest.raises(InternalError, match="a certificate is wrong"):
        Lookup().run(problem, ALL)


def test_the_answer_chase_is_the_ground_truth():
    """On every input of depth 3, with random positions fixed: where the chase says the answer reads
    only fixed positions, changing every free one leaves the answer as it was."""
    t = make_task("composition", 1, depth=3, n=2)
    rng = np.random.default_rng(0)
    tokens = np.array([t.decode(i) for i in range(t.total)])
    fixed = rng.random(tokens.shape) < 0.6
    need = t.answer_needs(tokens, fixed)
    other = np.array([t.decode(i) for i in rng.integers(0, t.total, len(tokens))])
    mixed = np.where(fixed, tokens, other)
    assert (need < 0).any() and (need >= 0).any()
    assert np.array_equal(t.evaluate(mixed)[0][need < 0], t.evaluate(tokens)[0][need < 0])
    assert not fixed[np.flatnonzero(need >= 0), need[need >= 0]].any()


def _chase(t, tokens: np.ndarray) -> list[int]:
    """The positions composition's answer reads, in the order its chase reads them (after z_0, w)."""
    read = np.zeros(len(tokens), bool)
    read[-2:] = True
    path = []
    while (need := int(t.answer_needs(tokens[None], read[None])[0])) >= 0:
        path.append(need)
        read[need] = True
    return path


def test_the_chase_is_memoryless():
    """What merging at the same point of the chase needs: two inputs of one case whose chases read
    the same position next have the same answer when they agree at the positions the chase reads
    from there on (whatever they hold before, and wherever their chases went before)."""
    t = make_task("composition", 2, depth=3, n=2)
    rng = np.random.default_rng(1)
    met = 0
    for _ in range(400):
        x, y = (t.decode(int(i)) for i in rng.integers(0, t.total, 2))
        y[-2:] = x[-2:]  # one case: z_0 and w
        path = _chase(t, x)
        k = int(rng.integers(1, len(path)))
        y[path[k:]] = x[path[k:]]
        if _chase(t, y)[k] == path[k]:
            met += 1
            assert t.answer(x) == t.answer(y)
    assert met > 50


def test_a_merge_that_ignores_the_chase_is_caught(monkeypatch):
    """Branches merged on their streams alone, not at the same point of the answer's chase: a
    random model's leaf holds members with another answer, and the member merged last, evaluated,
    shows it (no verdict)."""
    problem = _random_problem(12)
    Lookup().run(problem, RunOptions())
    group = lookup.group_rows
    monkeypatch.setattr(lookup, "group_rows", lambda columns: group(columns[:1]))
    with pytest.raises(InternalError, match="a merge is wrong"):
        Lookup().run(problem, RunOptions())


def test_random_models_are_decided_merged_and_unmerged():
    """The random models of the agreement test reach both: cases whose branches merge, and cases
    where a later certificate or the chase asks for a position some merged member fixed, which are
    decided again without merging."""
    paths = set()
    for seed in range(16):
        stats = Lookup().run(_random_problem(seed), RunOptions()).stats
        paths.add("unmerged" if stats["unmerged_cases"] else
                  "merged" if stats["lookup_branches"] > stats["lookup_leaves"] else "none")
    assert {"merged", "unmerged"} <= paths


def test_the_target_size_is_decided():
    """Composition L = 4 at N = 2 (5.07e30 inputs, 16 cases): proved at p = 16.  Merged, each case
    ends with one leaf per answer i_4 (16), where without merging it had 2 x 4 x 8 x 16 = 1,024."""
    problem = build_problem("composition", N=2, depth=4, n=2, p=16)
    result = Lookup().run(problem, RunOptions())
    assert result.covered == problem.task.total and not result.found
    assert result.stats["lookup_leaves"] == 16 * 16 and result.stats["unmerged_cases"] == 0


@pytest.mark.parametrize("p,f", [(8, 4), (10, 5)])
def test_merging_changes_the_leaves_not_the_verdict(p, f):
    """Composition L = 3 at N = 2 on both sides of its failures (refuted at FX(8, 4), with more than
    10^5 failing inputs in the first case: each engine lists 100 of them, not the same 100): the same
    verdict and smallest margin merged and unmerged (the benchmarks' baseline), on fewer leaves.
    Where it proves, a case ends merged with one leaf per answer i_3 (8), unmerged with one per path
    (2 x 4 x 8 = 64)."""
    problem = _format(build_problem("composition", N=2, depth=3, n=2, p=p), p, f)
    opts = RunOptions(max_counterexamples=100)
    merged, unmerged = Lookup().run(problem, opts), Lookup(merge=False).run(problem, opts)
    assert len(merged.found) == len(unmerged.found) == (100 if p == 8 else 0)
    assert merged.min_margin == unmerged.min_margin and merged.covered == unmerged.covered
    assert merged.stats["lookup_leaves"] < unmerged.stats["lookup_leaves"]
    if not merged.found:
        cases = len(list(verifier.tasks.base.case_splits(problem.task)))
        assert (merged.stats["lookup_leaves"], unmerged.stats["lookup_leaves"]) == (8 * cases, 64 * cases)


def test_a_key_reading_a_written_column_is_refused():
    problem = build_problem("composition", N=2, depth=2, n=2, p=10)
    model = problem.model
    layer = model.layers[1]
    written = int(np.flatnonzero(np.any(model.layers[0].W_O != 0, axis=1))[0])  # R_0, which layer 0 writes
    W_K = layer.heads[0].W_K.copy()
    W_K[0, written] = 1.0
    bent = replace(model, layers=[model.layers[0], replace(layer, heads=[replace(layer.heads[0], W_K=W_K)]),
                                  *model.layers[2:]])
    problem = replace(problem, model=bent)
    why = Lookup().unsupported(problem, ALL)
    assert why is not None and "second layer's keys or values read 1 column its first layer writes" in why
    with pytest.raises(InputError, match="engine lookup cannot decide"):
        plan("lookup", problem, ALL)


def test_what_it_refuses():
    problem = build_problem("composition", N=2, depth=2, n=2, p=10)
    engine = Lookup()
    assert engine.unsupported(problem, ALL) is None
    assert "overflow = saturate" in engine.unsupported(replace(problem, arith=FixedPoint(10, 5, "floor", "error")), ALL)
    bf16 = FloatArith(float_format("bf16"), float_format("fp32"), "nearest", "saturate")
    assert "float format" in engine.unsupported(replace(problem, arith=bf16), ALL)
    assert "--start/--stop" in engine.unsupported(problem, RunOptions(start=1))
    assert "first layer writes" in engine.unsupported(build_problem("equality", N=4, p=8), ALL)
    unchased = build_problem("composition", N=2, depth=2, n=2, p=10)
    unchased.task.answer_needs = None  # the task no longer says which positions its answer reads
    assert "does not say which positions its answer reads" in engine.unsupported(unchased, ALL)


def test_too_many_branches_is_refused_before_allocating(monkeypatch):
    """A case of N = 2, depth 3 splits its 4 merged branches (one per i_2) into 8 each at the last
    layer: 32 branches."""
    monkeypatch.setattr(lookup, "MAX_BRANCHES", 31)
    with pytest.raises(lookup.TooLarge, match="more than 31 branches"):
        Lookup().run(build_problem("composition", N=2, depth=3, n=2, p=12), RunOptions())


def test_a_split_the_available_memory_cannot_hold_is_refused_before_allocating(monkeypatch):
    """Two composition runs at N = 64 at once: one was killed by the kernel.  A split is refused
    when its children do not fit in the memory available."""
    problem = build_problem("composition", N=2, depth=3, n=2, p=12)
    monkeypatch.setattr(lookup, "SPLIT_COPIES", 1 << 40)  # as if each branch took a terabyte
    with pytest.raises(lookup.TooLarge, match="the lookup engine's split into .* branches of a case needs about"):
        Lookup().run(problem, RunOptions())
    with pytest.raises(InputError, match="needs about .* of memory; this machine has"):
        verifier.run(problem, "lookup")  # an input error (exit 2), not a verdict; auto goes on to its next engine


def test_auto_takes_it_for_composition_beyond_enumeration():
    problem = build_problem("composition", N=2, depth=4, n=2, p=16)
    engine, why = candidates(problem, RunOptions())[0]
    assert engine is ENGINES["lookup"] and "tables over (position, token)" in why


def test_a_refutation_is_replayed_and_the_unquantized_model_answers_right():
    """f = 7 of p = 8 leaves a range of [-1, 1): lambda saturates; api replays the counterexample."""
    r = verifier.prove("composition", N=2, depth=2, n=2, p=8, f=7, engine="lookup", max_counterexamples=5)
    assert r.verdict == "refuted" and len(r.counterexamples) == 5
    t = make_task("composition", 2, depth=2, n=2)
    for c in r.counterexamples:
        assert c.expected == t.answer_name(t.answer(np.array(c.tokens))) != c.produced


class _PassesAfter(Deadline):
    """A deadline that passes at its n-th check (or where Ctrl-C is pressed: `stop`)."""

    def __init__(self, n: int, stop: type[BaseException] = TimedOut):
        super().__init__(None)
        self.n, self.stop = n, stop

    def check(self) -> None:
        self.n -= 1
        if self.n < 0:
            raise self.stop()


@pytest.mark.parametrize("stop,status", [(TimedOut, Status.TIMEOUT), (KeyboardInterrupt, Status.INTERRUPTED)])
def test_a_stop_covers_the_cases_decided(stop, status):
    """Composition depth 2 at N = 2 has 4 cases; each checks the deadline once per layer (3) at least.
    Stopped by the deadline or by Ctrl-C in the third case, the first two are covered (unknown, with
    how much was covered: an interrupt is not an exception that loses them)."""
    problem = build_problem("composition", N=2, depth=2, n=2, p=8)
    whole = Lookup().run(problem, RunOptions())
    checks = [0]
    counting = Deadline()
    counting.check = lambda: checks.__setitem__(0, checks[0] + 1)  # type: ignore[method-assign]
    Lookup().run(problem, RunOptions(deadline=counting))
    per_case = checks[0] // 4
    try:
        stopped = Lookup().run(problem, RunOptions(deadline=_PassesAfter(2 * per_case + 1, stop)))
    except KeyboardInterrupt:  # not raised past the test: it would end the whole session
        pytest.fail("Ctrl-C escaped the lookup engine: the cases it decided were lost")
    assert whole.status == Status.COMPLETE and whole.covered == problem.task.total
    assert stopped.status == status and stopped.covered == 2 * problem.task.total // 4
