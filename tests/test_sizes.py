"""Sizes are stated before anything is built, and what cannot fit is refused at once (issue 21,
items 10 and 13).

Every task and every built-in construction states its cost from its sizes, in closed form
(`verifier.support.sizes.Cost`); a command whose size cannot fit this machine, or exceeds a documented
limit, exits 2 with one line before its builder runs.  No test here allocates: the sizes refused
are refused from closed forms, on a machine patched to have 16 GiB available, and the builders are
replaced by ones that fail the test if they are ever called.
"""

import dataclasses
import io
import types
from contextlib import redirect_stderr, redirect_stdout

import numpy as np
import pytest

import cli
from verifier.constructions import CONSTRUCTIONS
from verifier.support.errors import InputError
from verifier.support.sizes import MAX_TOKENS
from verifier.tasks import TASKS, make_task

GiB = 2 ** 30
BUILT_IN = [name for name in TASKS if name in CONSTRUCTIONS]
SIZES = {"icqa": (2, 3), "ictm": (1, 2), "memorization": (2, 3), "template_matching": (3, 4)}  # two N; else 4, 8


@pytest.fixture(autouse=True)
def machine(monkeypatch):
    """This machine, whatever it has, has 16 GiB available."""
    monkeypatch.setattr("verifier.support.budget.available_memory", lambda: 16 * GiB)


def run(*args) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = cli.main([str(a) for a in args])
    return code, out.getvalue(), err.getvalue()


def never(*args, **kwargs):
    raise AssertionError("built, although its size was to be refused first")


@pytest.fixture
def no_builders(monkeypatch):
    """Every construction's builder fails the test: a refusal must come from the stated cost."""
    for name, construction in CONSTRUCTIONS.items():
        monkeypatch.setitem(CONSTRUCTIONS, name, dataclasses.replace(construction, builder=never))


class Boom:
    """A random generator that must not be drawn from."""

    def __getattr__(self, name):
        return never


@pytest.mark.slow
@pytest.mark.parametrize("args,message", [
    (("idxl", "--N", 100000, "--p", 16), "index_lookup at N=100000, sigma=2 has 100,002 tokens; the verifier takes "
                                          "at most 65,536"),
    (("idxl", "--N", 8, "--sigma", 10 ** 6, "--p", 16), "has 1,000,008 tokens"),
    (("disjointness", "--N", 10 ** 6, "--p", 16), "disjointness at N=1000000 needs about"),
    (("dyck22", "--N", 10 ** 6, "--p", 16), "dyck22 at N=1000000 needs about"),
    (("induction_heads", "--N", 10 ** 6, "--p", 16), "induction_heads at N=1000000 needs about"),
    (("composition", "--N", 2, "--depth", 26, "--p", 16), "has more than 65,536 tokens"),
    (("composition", "--N", 2, "--depth", 15, "--p", 16), "has 81,920 tokens"),
    (("equality", "--N", 2 * 10 ** 5, "--p", 16), "equality at N=200000 needs about"),
    (("mqar", "--N", 8, "--sigma", 10 ** 7, "--p", 12), "mqar at N=8 needs about"),
])
def test_the_sizes_of_the_issue_are_refused_before_anything_is_built(no_builders, args, message):
    code, out, err = run(*args)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1 and out == "", err


def test_a_sweep_counts_its_runs_before_the_first(monkeypatch):
    monkeypatch.setattr("verifier.runs.sweep.build_problem", never)
    code, out, err = run("sweep", "idxl", "--N", "1..10000", "--p", "2..20", "--no-cache", "--scheduler", "serial")
    assert code == 2 and out == "" and "10,000 values of N and 19 of p, 190,000 runs; at most 10,000" in err, err


@pytest.mark.parametrize("outputs", [("--plot", "missing/f.png"), ("-o", "missing/t.json"), ("-o", "missing/t.csv"),
                                     ("-o", "t.json", "--plot", "missing/f.svg"), ("--plot", "exists.png")])
def test_a_sweeps_output_paths_are_checked_before_the_first_run(monkeypatch, tmp_path, outputs):
    pytest.importorskip("matplotlib")
    monkeypatch.setattr("cli.sweep", never)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "exists.png").write_bytes(b"mine")
    code, out, err = run("sweep", "idxl", "--N", "2..3", "--p", "4..5", "--no-cache", "--scheduler", "serial", *outputs)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert "cannot create" in err or "refusing to overwrite" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exists.png"]  # nothing left behind, nothing overwritten
    assert (tmp_path / "exists.png").read_bytes() == b"mine"


def test_a_random_model_states_its_size_before_a_weight_is_drawn():
    from verifier.refute.refute import random_model
    task = make_task("idxl", N=3)
    with pytest.raises(InputError, match="a random model of 40 heads of width 2000 needs about"):
        random_model(task, 40, 2000, "relu", Boom())
    assert random_model(task, 2, 3, "relu", np.random.default_rng(0)).d == 10


def test_refute_random_models_of_a_shape_too_large_is_refused(monkeypatch):
    monkeypatch.setattr(np.random, "default_rng", lambda *a: Boom())
    code, out, err = run("refute", "idxl", "--N", 3, "--p", 8, "--random-models", 2, "--shape", "40,2000,relu")
    assert code == 2 and out == "" and "a random model of 40 heads of width 2000 needs about" in err, err


@pytest.mark.parametrize("name", BUILT_IN)
def test_every_task_states_its_cost_before_its_tables(monkeypatch, name):
    N = SIZES.get(name, (4, 8))[0]
    task = make_task(name, N=N)
    cost = task.cost()
    assert cost.tokens == len(task.vocab) and cost.memory > 0 and cost.what.startswith(name)
    monkeypatch.setattr("verifier.support.budget.available_memory", lambda: 0)  # nothing fits: the cost refuses first
    monkeypatch.setattr("verifier.tasks.product.ProductTask._layout", never)
    with pytest.raises(InputError, match="needs about"):
        make_task(name, N=N)


def _variants():
    for name in BUILT_IN:
        construction = CONSTRUCTIONS[name]
        for variant in construction.variants:
            yield name, variant


@pytest.mark.slow
@pytest.mark.parametrize("name,variant", list(_variants()))
def test_every_construction_states_its_cost_before_it_builds(monkeypatch, name, variant):
    construction = CONSTRUCTIONS[name]
    for N in SIZES.get(name, (4, 8)):
        task = make_task(name, N=N)
        try:
            model = construction.build(task, variant, kc=1.0)
        except InputError:  # a printed variant this instance cannot have (docs/constructions.md)
            continue
        cost = construction.cost(task, variant, None)
        # the estimate may be coarse, but not much below what is built: a refusal must not be late
        assert model.n_params() <= 2 * cost.parameters, (N, model.n_params(), cost.parameters)
    monkeypatch.setattr("verifier.support.budget.available_memory", lambda: 1024)
    with pytest.raises(InputError, match="needs about"):
        dataclasses.replace(construction, builder=never).build(task, variant, kc=1.0)


def test_lengths_are_laid_out_without_their_square(monkeypatch):
    """dyck22 and induction_heads at N = 20000 held N^2 / 2 domains (6.4 GB): the lengths are now
    made when asked for, and their sizes are powers, not products of N growing integers."""
    monkeypatch.setattr("verifier.tasks.product.product_size", never)
    task = make_task("dyck22", N=20000)
    assert task.cost().memory < 200 * 2 ** 20
    assert task.total == (4 ** 20001 - 4) // 3 and task.max_len == 20001 and task.count_up_to(2) == 4 + 16
    name, domains = task.space[19999]
    assert name == "n=20000" and len(domains) == 20001
    index = task.count_up_to(3) + 5  # the 6th input of length 4
    assert task.index_of(task.decode(index)) == index and len(task.decode(index)) == 5
    assert task.answer([4, 0, 1]).tolist() == [1, 0, 1]  # found directly, not by making 20000 lengths
    first = next(task.batches(0, 6, 4))
    assert first.tokens.tolist() == [[4, 0], [4, 1], [4, 2], [4, 3]]
    assert make_task("induction_heads", N=20000).total == (3 ** 20001 - 3) // 2


def test_composition_counts_its_tokens_before_it_lists_its_queries(monkeypatch):
    """--depth 26 listed its 2^25 queries (7.6 GB) before the token limit was checked."""
    monkeypatch.setattr("verifier.tasks.composition.itertools", types.SimpleNamespace(product=never))
    for depth, message in [(26, "more than 65,536 tokens"), (10 ** 9, "more than 65,536 tokens"),
                           (15, "has 81,920 tokens")]:
        with pytest.raises(InputError, match=message):
            make_task("composition", N=2, depth=depth)


def test_the_token_limit_is_the_documented_one():
    assert MAX_TOKENS == 1 << 16
    with pytest.raises(InputError, match="has 65,537 tokens; the verifier takes at most 65,536"):
        make_task("idxl", N=1, sigma=65536)
    assert len(make_task("idxl", N=1, sigma=65535).vocab) == 65536
