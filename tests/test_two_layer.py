"""The two-layer constructions of Bhattamishra et al. 2024 (arXiv:2406.09347): the tasks' ground truths, the
corrected variants proved, the failing variants refuted by an engine, and the errata report (issue 4).  The
printed variants read charitably are in test_printed.py."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

import verifier
from cli import main
from verifier.constructions import CONSTRUCTIONS
from verifier.errata import CLAIMS, run_errata, to_markdown
from verifier.support.errors import InputError, UnbuildableError
from verifier.tasks import make_task


def all_inputs(task):
    return [tok for b in task.batches(0, task.total, 4096) for tok in b.tokens]


# -- ground truths against brute-force definitions ------------------------------------------------
@pytest.mark.parametrize("N", [2, 4, 6])
def test_equality_and_disjointness_truth(N):
    eq, dj = make_task("equality", N), make_task("disjointness", N)
    seen = set()
    for bits in itertools.product([0, 1], repeat=N):
        x, y = bits[:N // 2], bits[N // 2:]
        assert eq.answer(list(bits)) == int(x == y)
        assert dj.answer([2, *bits]) == int(any(a and b for a, b in zip(x, y)))
        seen.add(eq.index_of(list(bits)))
    assert seen == set(range(eq.total)) == set(range(2 ** N))


def test_sparse_threshold_truth_from_its_definition(tmp_path):
    task = make_task("sparse_threshold", 6, s=3, instance_seed=5)
    assert task.describe()["feature_sizes"] != "000000"
    for tok in all_inputs(task):
        x = [int(t) for t in tok[1:]]
        total = 0
        for I, g in task.inst.features:  # g's index: the bits x_I read MSB first
            total += int(g[int("".join(str(x[i - 1]) for i in I) or "0", 2)]) if I else 0
        assert task.answer(tok) == int(total - task.inst.b > 0)
    path = tmp_path / "inst.json"
    path.write_text(json.dumps(task.inst.to_json()))
    again = make_task("sparse_threshold", 6, instance=str(path))
    assert [again.answer(t) for t in all_inputs(again)] == [task.answer(t) for t in all_inputs(task)]


@pytest.mark.parametrize("text", ['{"b": 0}', '{"b": 0, "features": [{"I": [1, 9], "g": [0, 1, 1, 0]}]}',
                                  '{"b": 0, "features": [{"I": [1], "g": [0, 1, 1]}]}', 'not json'])
def test_bad_instance_is_one_line_error(tmp_path, text, capsys):
    path = tmp_path / "inst.json"
    path.write_text(text)
    with pytest.raises(InputError):
        make_task("sparse_threshold", 4, instance=str(path))
    assert main(["sparse_threshold", "--N", "4", "--p", "8", "--instance", str(path)]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def brute_nearest(codebook, xs, ys, gamma):
    """The definition: j* = argmax <x_k, x_i>, None unless it wins by gamma over every other i."""
    dots = [float(codebook[xs[-1]] @ codebook[x]) for x in xs[:-1]]
    j = int(np.argmax(dots))
    if any(dots[j] < d + gamma - 1e-9 for i, d in enumerate(dots) if i != j):
        return None
    return ys[j]


@pytest.mark.slow
@pytest.mark.parametrize("dim,gamma", [(2, None), (2, 0.5), (3, None), (3, 4 / 3)])
def test_nearest_neighbour_margin_filter(dim, gamma):
    task = make_task("nearest_neighbour", 4, dim=dim, gamma=gamma)
    kept = 0
    for c in range(len(task.space)):
        start, stop = task._offsets[c], task._offsets[c + 1]
        for i in range(start, stop, max(1, (stop - start) // 200)):  # a spread sample of every case
            tok = task.decode(i)
            xs, ys = [int(t) for t in tok[0::2]], [int(t) - task.V for t in tok[1::2]]
            want = brute_nearest(task.codebook, xs, ys, task.gamma)
            if want is None:
                with pytest.raises(InputError, match="margin"):
                    task.answer(tok)
            else:
                assert task.answer(tok) == want and task.index_of(tok) == i
        kept += sum(len(b.tokens) for b in task.batches(start, stop, 4096))
        assert kept == sum(task.valid_count(cc) for cc in range(c + 1))  # the closed form counts the filter
    d = task.describe()
    assert d["valid"] + d["dropped"] == d["sequences"] == task.total and d["dropped"] > 0


@pytest.mark.slow
def test_mqar_inputs_are_permutations():
    task = make_task("mqar", 6)
    inputs = all_inputs(task)
    assert len(inputs) == task.describe()["valid"]
    for tok in inputs:
        xs, ys = [int(t) for t in tok[0::2]], [int(t) - task.V for t in tok[1::2]]
        keys, queries = xs[:3], xs[3:]
        assert len(set(keys)) == 3 and len(set(queries)) == len(queries) and set(queries) <= set(keys)
        assert task.answer(tok) == ys[keys.index(xs[-1])]
    with pytest.raises(InputError):
        task.answer([0, 3, 0, 3, 1, 3, 0])  # repeated key
    with pytest.raises(InputError):
        make_task("mqar", 6, sigma=2)


# -- corrected variants proved; printed variants refuted by an engine ----------------------------
ARITHMETICS = [dict(rounding="floor"), dict(rounding="nearest", accumulate="wide"), dict(rounding="zero")]


@pytest.mark.slow
@pytest.mark.parametrize("arith", ARITHMETICS)
@pytest.mark.parametrize("task,N,opts", [("equality", 8, {}), ("disjointness", 8, {}),
                                         ("sparse_threshold", 6, {}), ("sparse_threshold", 6, {"s": 3}),
                                         ("nearest_neighbour", 4, {}), ("mqar", 6, {})])
def test_corrected_variants_are_proved(task, N, opts, arith):
    result = verifier.prove(task, N=N, p=14, engine="exhaustive", **opts, **arith)
    assert result.verdict == "proved", result.summary()
    assert result.params["variant"] == "corrected" and result.covered == result.total


@pytest.mark.slow
@pytest.mark.parametrize("task,N,opts", [("equality", 12, {}), ("disjointness", 16, {}),
                                         ("sparse_threshold", 8, {"shared_g": True}), ("sparse_threshold", 8, {})])
def test_smt_agrees_with_enumeration(task, N, opts):
    variants = ["corrected"] if opts == {} and task == "sparse_threshold" else ["corrected", "paper"]
    for variant in variants:
        for p in (7, 8, 12):
            a = verifier.prove(task, N=N, p=p, variant=variant, engine="exhaustive", **opts)
            b = verifier.prove(task, N=N, p=p, variant=variant, engine="smt", **opts)
            assert a.verdict == b.verdict, (task, variant, p)


@pytest.mark.slow
@pytest.mark.parametrize("task,N,engine,variant", [("equality", 6, "exhaustive", "paper"),
                                                   ("equality", 12, "smt", "paper"),
                                                   ("nearest_neighbour", 4, "exhaustive", "unscaled"),
                                                   ("mqar", 6, "exhaustive", "unscaled")])
def test_failing_variants_are_refuted_by_an_engine(task, N, engine, variant, tmp_path):
    problem = verifier.build_problem(task, N=N, p=12, variant=variant)
    result = verifier.run(problem, engine, max_counterexamples=3)
    assert result.verdict == "refuted" and result.exit_code == 1
    for c in result.counterexamples:
        truth = problem.task.answer(c.tokens)  # the task's own definition, not the engine's claim
        assert problem.task.answer_name(truth) == c.expected != c.produced
        again = verifier.replay(problem, verifier.engines.Found(c.index, np.array(c.tokens), truth, 1 - truth,
                                                                 c.reason, c.margin))
        assert again.produced == c.produced
    assert main([task, "--N", str(N), "--p", "12", "--variant", variant, "--engine", engine,
                 "--dump", str(tmp_path)]) == 1
    doc = json.loads(next(tmp_path.iterdir()).read_text())
    assert doc["params"]["variant"] == variant and "L1.H0.attn" in doc["trace"]


def test_unbuildable_variants_are_clear_errors(capsys):
    with pytest.raises(UnbuildableError, match="nothing of its g"):
        verifier.build_problem("sparse_threshold", N=10, p=12, variant="paper")  # g differs by position
    for argv in (["sparse_threshold", "--N", "10", "--p", "12", "--variant", "paper"],
                 ["equality", "--N", "4", "--p", "12", "--variant", "nonsense"],
                 ["equality", "--N", "5", "--p", "12"], ["equality", "--N", "4", "--p", "12", "--sigma", "3"]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and err.startswith("verify")


@pytest.mark.slow
def test_paper_eta_follows_the_precision():
    low = verifier.build_problem("equality", N=16, p=8, variant="paper").model.info["eta"]
    high = verifier.build_problem("equality", N=16, p=20, variant="paper").model.info["eta"]
    assert high == pytest.approx(np.log(16) + 10 / 4 * np.log(32)) and low < high


def test_list_shows_every_variant(capsys):
    assert main(["list"]) == 0
    sections = {}
    for line in capsys.readouterr().out.splitlines():
        if not line.startswith(" "):
            name = line.split(":")[0].split(" (")[0]
            sections[name] = []
        else:
            sections[name].append(line)
    for name, c in CONSTRUCTIONS.items():
        lines = sections[name]
        for v in c.variants:
            assert any(f"--variant {v} " in line and "cannot be built" not in line for line in lines), (name, v)
        for v in c.unbuildable:
            assert any(f"--variant {v} " in line and "cannot be built" in line for line in lines), (name, v)


def test_errata_rows_come_from_engine_runs(tmp_path):
    claims = [c for c in CLAIMS if c.key in ("f2-n6", "f3-g-by-position")]
    eq, f3 = run_errata(12, str(tmp_path), claims=claims)
    assert eq.binary[0].verdict == "refuted" and eq.paper_model.runs[-1].verdict == "proved"
    assert json.loads(open(eq.binary[0].dump).read())["params"]["variant"] == "paper"
    assert f3.unbuildable is not None and not f3.binary
    table = to_markdown([eq, f3])
    assert table.count("\n") == 3 and "`0 0 0 0 0 1`: rounding in FX(12, 6)" in table
