"""The differential battery: random models of every kind, decided by every engine and by the reference.

Model i is built from seed 1000 + i: one of the KINDS below, at a random arithmetic (p 2..10, f
usually p // 2 and sometimes anywhere in 0..p, every rounding and accumulation mode, overflow =
error one time in five).  ``battery_problem(i, grid=True)`` puts the same kind of model on a random
grid of rational step instead (`random_grid`: steps such as 1/3, 2/5, 1/36, ranges symmetric or
not), ``battery_problem(i, floats=True)`` in a random float recipe (`random_float`: bf16, fp16, e4m3,
e5m2, fp32 and small float:E:M formats, accumulated in fp32, bf16, fp16, float:5:4 or their own
format, every IEEE rounding, either overflow rule).  `decide_all` then requires, with zero tolerance:

* enumeration (the exhaustive engine) and the independent reference of tests/reference.py
  (Fractions, mpmath, plain loops) fail on exactly the same inputs (for a task that is a list of
  examples, these two are the engines that can run it);
* the tasks include the user's own (a reference function, a dataset file), with answers at every
  position where some positions need none (not judged, and a saturation that feeds only them is
  no failure), and models with a BOS token read at every position;
* for every case split, the SMT formula (bit-vectors) holds at every input enumeration says fails,
  and z3 finds a failing input exactly when enumeration does, and only one that fails (a solve
  that takes more than SOLVE_SECONDS is counted as unknown, never as agreement);
* random two-layer models (`two-layer`: the first layer causal, sometimes with a recency ramp that
  makes it local) put the bounds engine's window tables against enumeration, read at the last
  position (lookup tasks) or at every position (induction heads); half the lookup ones have a
  second layer whose keys and values read only columns the first leaves as they are
  (`helpers.query_only`), which the engine bounds at the last position whether local or not;
* a third of the `construction` models are the composition construction (N = 1, L = 2) and a
  third of the `sequence` models the Dyck-(2,2) transformer (N = 2, 3), with noise that keeps the
  lookup and prefix engines' shapes (`helpers.lookup_shaped`, `helpers.prefix_shaped`), each in the
  random format those draw (on the random grid with ``grid``), so that those engines decide them;
* every engine of the registry (`verifier.engines.ENGINES`: a newly registered engine is checked
  with no edit here) that can run the problem finds a failure exactly when enumeration does, only
  inputs that fail, and no more decided inputs than leave out the failures it did not report;
  one that runs out of ENGINE_SECONDS or whose solver gives up (the integer theory on non-linear
  formulas) is counted unknown, never agreement.  `verifier.run` with it (replay and sample
  check included) gives enumeration's verdict, or unknown past the same time.
"""

from __future__ import annotations

import itertools
import json
import os
import tempfile
from collections.abc import Collection
from dataclasses import replace
from fractions import Fraction

import numpy as np
from helpers import (
    RandomLookupTask,
    add_biases,
    lookup_shaped,
    perturbed_dyck_rnn,
    prefix_shaped,
    query_only,
    random_model,
    two_layer,
)
from reference import RefFloat, RefFX, RefGrid, quantize_model, ref_answer, ref_forward, ref_recurrent

import verifier
from verifier.arithmetic import ACCUMULATES, ROUNDINGS, Fixed, FixedPoint, Grid
from verifier.constructions.index_lookup import build as build_idxl
from verifier.engines import ENGINES, Problem, RunOptions
from verifier.engines.exhaustive import Exhaustive
from verifier.engines.smt import DECIDED, Smt
from verifier.evaluator import make_evaluator
from verifier.floats import FLOAT_ROUNDINGS, NAMED, FloatArith, float_format
from verifier.model import Readout, Recurrent
from verifier.runs.api import build_problem
from verifier.smt.encoding import Encoder
from verifier.smt.floats import TableTooLarge
from verifier.support.budget import Deadline, fresh_z3_context
from verifier.tasks import DatasetTask, ReferenceTask, make_task
from verifier.tasks.base import NO_ANSWER
from verifier.tasks.bos import WithBos
from verifier.verdicts import Status

SOLVE_SECONDS = 15.0  # one case's solve in the encoding check
ENGINE_SECONDS = 5.0  # one engine's run; past it the engine's answer is counted unknown, never agreement
KINDS = ("construction", "random-idxl", "lookup-argmax", "lookup-threshold", "boolean", "retrieval", "extreme",
         "degenerate", "sequence", "recurrent", "user-reference", "user-dataset", "bos-sequence", "two-layer")


def _small_task(rng: np.random.Generator, i: int):
    """A task with at most about a hundred inputs (the reference decides each in pure Python)."""
    which = rng.integers(0, 10)
    if which == 0:
        return make_task("idxl", int(rng.integers(1, 4)), sigma=int(rng.integers(2, 4)))
    if which == 1:
        return RandomLookupTask(int(rng.integers(2, 4)), int(rng.integers(1, 5)), int(rng.integers(2, 4)), seed=i)
    if which == 2:
        return RandomLookupTask(int(rng.integers(2, 4)), int(rng.integers(1, 4)), int(rng.integers(1, 4)), seed=i,
                                readout="threshold")
    if which == 3:
        return make_task(str(rng.choice(["equality", "disjointness"])), int(rng.choice([2, 4])))
    if which == 4:
        return make_task("sparse_threshold", int(rng.integers(2, 5)), s=int(rng.integers(1, 3)),
                         instance_seed=int(rng.integers(0, 1000)))
    if which == 5:
        return make_task("mqar", 4) if rng.random() < 0.5 else make_task("nearest_neighbour", 2,
                                                                        dim=int(rng.integers(1, 3)))
    if which == 6:  # the datasets of Chen and Zou 2024: a list, and combinatorial sets with symbolic cases
        return make_task("memorization", int(rng.integers(1, 4)), alphabet=int(rng.integers(2, 4)))
    if which == 7:
        return make_task("icqa", int(rng.integers(1, 3)), nq=3, na=3)
    if which == 8:
        return make_task("template_matching", int(rng.integers(1, 4)), alphabet=3)
    return make_task("ictm", 1, length=2, alphabet=3, na=2)


GRID_STEPS = [Fraction(1, 2), Fraction(1, 3), Fraction(2, 5), Fraction(1, 6), Fraction(3, 4), Fraction(1, 10),
              Fraction(5, 7), Fraction(1, 36), Fraction(1), Fraction(1, 12)]


def random_grid(i: int, fx: FixedPoint) -> Grid:
    """A grid for model i with fx's rules: a step of GRID_STEPS (at most 1, so exp(0) is not 0) and
    codes -hi or -hi - 1 .. hi, hi 2..400 (from its own seed, so the FX battery keeps its models)."""
    rng = np.random.default_rng(7000 + i)
    hi = int(rng.integers(2, 401))
    lo = -hi - int(rng.integers(0, 2))
    return Grid(GRID_STEPS[int(rng.integers(0, len(GRID_STEPS)))], lo, hi, fx.rounding, fx.overflow, fx.accumulate)


def random_float(i: int) -> FloatArith:
    """A float recipe for model i: every named format and small float:E:M ones, accumulated in fp32,
    bf16, fp16, float:5:4 or (two times in five) the storage format itself, every IEEE rounding,
    overflow = error one time in two."""
    rng = np.random.default_rng(9000 + i)
    names = [*NAMED, "float:3:2", "float:2:1", "float:4:1"]
    storage = float_format(names[i % len(names)])
    acc = storage if rng.random() < 0.4 else float_format(["fp32", "bf16", "fp16", "float:5:4"][i % 4])
    return FloatArith(storage, acc, FLOAT_ROUNDINGS[(i // 2) % 4], "error" if rng.random() < 0.5 else "saturate")


def _edges(fx: Fixed) -> tuple:
    """Weights at the format's edges: the exact range ends, one step beyond, half steps."""
    step = float(fx.step)
    return (fx.hi * step, fx.lo * step, (fx.hi + 1) * step, (fx.lo - 1) * step, step / 2, -step / 2, 1.5 * step)


def battery_problem(i: int, grid: bool = False, floats: bool = False) -> Problem:
    """Model i of the battery, in a random FX format, on a random grid (`grid`), or in a random float
    recipe (`floats`, `random_float`: the same models as in FX)."""
    problem = _battery_problem(i, grid)
    return replace(problem, arith=random_float(i)) if floats else problem


def _battery_problem(i: int, grid: bool) -> Problem:
    rng = np.random.default_rng(1000 + i)
    p = int(rng.integers(2, 11))
    f = p // 2 if rng.random() < 0.75 else int(rng.integers(0, p + 1))
    fx = FixedPoint(p, f, ROUNDINGS[i % 3], "error" if rng.random() < 0.2 else "saturate", ACCUMULATES[(i // 3) % 2])
    if grid:
        fx = random_grid(i, fx)
    kind = KINDS[i % len(KINDS)]
    if kind in ("user-reference", "user-dataset", "bos-sequence"):
        return _user_problem(rng, i, kind, fx)
    if kind == "construction" and np.random.default_rng(9000 + i).random() < 1 / 3:  # drawn apart, as below
        shaped = lookup_shaped(build_problem("composition", N=1, depth=2, n=2, p=10),
                               np.random.default_rng(10000 + i))  # the lookup engine's shape, in its own format
        return replace(shaped, arith=fx) if grid else shaped
    if kind == "sequence" and np.random.default_rng(9000 + i).random() < 1 / 3:
        shaped = prefix_shaped(build_problem("dyck22", N=int(rng.integers(2, 4)), p=16, f=4),
                               np.random.default_rng(10000 + i))  # the prefix engine's shape, in its own format
        return replace(shaped, arith=fx) if grid else shaped
    if kind == "construction":  # a perturbed index-lookup construction: sometimes still correct
        N = int(rng.integers(1, 5))
        model = build_idxl(N, eta=float(rng.uniform(0.5, 8)))
        model.E = model.E + rng.normal(0, rng.choice([0, 0.05, 0.3]), size=model.E.shape)
        return Problem(make_task("idxl", N), model, fx)
    if kind in ("sequence", "recurrent"):  # an answer at every position
        task = (make_task("dyck22", int(rng.integers(1, 4))) if rng.random() < 0.5 else
                make_task("induction_heads", int(rng.integers(1, 4)), sigma=int(rng.integers(2, 4))))
        if kind == "recurrent":
            return Problem(task, _random_recurrent(rng, task, fx), fx)
        model = random_model(rng, task.vocab, task.max_len, C=task.num_classes, readout="argmax")
        model.readout.positions = "all"
        return Problem(task, model, fx)
    if kind == "two-layer":  # the bounds engine through two layers: first layers local or not
        if np.random.default_rng(7000 + i).random() < 1 / 3:  # drawn apart: the other models keep their draws
            return _averaging_problem(np.random.default_rng(8000 + i), fx)
        sharp = float(rng.choice([0.0, 2.0, 8.0]))
        if rng.random() < 0.5:  # induction heads, read at every position of a causal model
            task = make_task("induction_heads", int(rng.integers(1, 5)), sigma=int(rng.integers(2, 4)))
            model = two_layer(rng, task.vocab, task.max_len, task.num_classes, sharp=sharp)
            model.layers[1].causal = True
            model.readout.positions = "all"
        else:
            task = RandomLookupTask(int(rng.integers(2, 4)), int(rng.integers(2, 6)), 2, seed=i)
            model = two_layer(rng, task.vocab, task.max_len, task.num_classes, readout=task.readout, sharp=sharp)
            if rng.random() < 0.5:  # a constant answer it can get right
                model.readout.W_U[:] = 0
                model.readout.b_U[:] = [5.0, -5.0]
                task.F[:] = 0
            if rng.random() < 0.5:  # the second layer reads the first at the last position only
                model = query_only(model, rng)
                task.answer_cases = task.cases  # type: ignore[attr-defined]
        return Problem(task, model, fx)
    if kind == "random-idxl":
        task = make_task("idxl", int(rng.integers(1, 4)))
    elif kind == "lookup-argmax":
        task = RandomLookupTask(int(rng.integers(2, 4)), int(rng.integers(2, 5)), 2, seed=i)
    elif kind == "lookup-threshold":
        task = RandomLookupTask(int(rng.integers(2, 4)), int(rng.integers(2, 5)), 2, seed=i, readout="threshold")
    else:
        task = _small_task(rng, i)
    options = {}
    if kind == "extreme":
        options = dict(extreme=0.3, edges=_edges(fx))
    elif kind == "degenerate":
        options = dict(dims={key: 0 for key in ("d", "m", "mv", "h") if rng.random() < 0.5} or {"d": 0})
    model = random_model(rng, task.vocab, task.max_len, C=task.num_classes, readout=task.readout, **options)
    if np.random.default_rng(5000 + i).random() < 0.3:  # attention biases, drawn apart so the seeds keep their models
        add_biases(model, np.random.default_rng(6000 + i))
    if task.readout == "argmax" and kind != "extreme" and rng.random() < 0.3:  # a constant answer it can get right
        model.readout.W_U[:] = 0
        model.readout.b_U[:] = np.where(np.arange(task.num_classes) == 0, 5.0, -5.0)
        if isinstance(task, RandomLookupTask):
            task.F[:] = 0
    return Problem(task, model, fx)


def _averaging_problem(rng: np.random.Generator, fx: Fixed) -> Problem:
    """A Boolean task (equality, disjointness, a sparse threshold) read by two layers whose second
    averages the first at the readout (its query map 0, or its key map): the aggregate engine's
    shape, its first layer sharp (local) or not, causal or not."""
    name = str(rng.choice(["equality", "disjointness", "sparse_threshold"]))
    N = 2 * int(rng.integers(1, 4))
    task = make_task(name, N) if name != "sparse_threshold" else \
        make_task(name, N + 1, s=int(rng.integers(1, 4)), instance_seed=int(rng.integers(0, 100)))
    model = two_layer(rng, task.vocab, task.max_len, task.num_classes, readout=task.readout,
                      sharp=float(rng.choice([0.0, 2.0, 8.0])))
    model.layers[0].causal = bool(rng.random() < 0.5)
    for head in model.layers[1].heads:
        if rng.random() < 0.5:
            head.W_Q[:] = 0
            if head.b_Q is not None:
                head.b_Q[:] = 0
        else:
            head.W_K[:] = 0
    return Problem(task, model, fx)


def _user_problem(rng: np.random.Generator, i: int, kind: str, fx: Fixed) -> Problem:
    """A task of the user's own, or a built-in sequence task, read by a random model, often through
    a BOS token.  Answers at every position (most of the time) with some positions needing none;
    a sequence read after BOS under overflow = error one time in two."""
    bos = kind == "bos-sequence" or rng.random() < 0.5
    if kind == "bos-sequence":
        task = (make_task("dyck22", int(rng.integers(1, 3))) if rng.random() < 0.5 else
                make_task("induction_heads", int(rng.integers(1, 4)), sigma=2))
        if rng.random() < 0.5:
            fx = replace(fx, overflow="error")
    else:
        task = _user_task(rng, i, kind, per_position=rng.random() < 0.7)
    vocab = list(task.vocab) + (["<s>"] if bos else [])
    model = random_model(rng, vocab, task.max_len + bos, C=task.num_classes, readout="argmax")
    model.readout.positions = "all" if task.per_position else "last"
    model.bos = "<s>" if bos else None
    return Problem(WithBos(task, "<s>") if bos else task, model, fx)


def _user_task(rng: np.random.Generator, i: int, kind: str, per_position: bool):
    """A reference function or a dataset file over 2-3 tokens, up to length 3: the answer at position
    j is a table of the first token and the token at j, with none at random (lengths, positions,
    tokens) and, half the time, none at position 0 (as Tracr's shift_by)."""
    V, N = int(rng.integers(2, 4)), int(rng.integers(1, 4))
    vocab = [f"t{j}" for j in range(V)]
    classes = ["x", "y", "z"][:int(rng.integers(2, 4))]
    table = rng.integers(0, len(classes), size=(V, V))
    none = rng.random((N, N, V)) < rng.choice([0.0, 0.3, 0.6])
    none[:, 0, :] |= rng.random() < 0.5

    def reference(words: list[str]):
        ids = [vocab.index(w) for w in words]
        n = len(ids)
        answers = [None if none[n - 1, j, t] else classes[table[ids[0], t]] for j, t in enumerate(ids)]
        return answers if per_position else answers[-1]

    if kind == "user-reference":
        try:
            return ReferenceTask(N, reference, vocab)
        except verifier.InputError:  # no answer at all: a task with answers everywhere instead
            none[:] = False
            return ReferenceTask(N, reference, vocab)
    key = "answers" if per_position else "answer"
    lines = [{"input": [vocab[t] for t in ids], key: reference([vocab[t] for t in ids])}
             for n in range(1, N + 1) for ids in np.ndindex(*(V,) * n) if rng.random() < 0.6]
    lines = [line for line in lines if line[key] is not None]  # a file gives no null for a whole answer
    if not any(a is not None for line in lines for a in (line[key] if per_position else [line[key]])):
        lines = [{"input": [vocab[0]], key: [classes[0]] if per_position else classes[0]}]
    path = os.path.join(tempfile.gettempdir(), f"verify-battery-{os.getpid()}-{i}.jsonl")
    with open(path, "w") as fh:
        fh.write("".join(json.dumps(line) + "\n" for line in lines))
    try:
        return DatasetTask(N, path, ",".join(vocab))
    finally:
        os.remove(path)  # the task holds the file's inputs


def _random_recurrent(rng: np.random.Generator, task, fx: Fixed) -> Recurrent:
    """Random weights, or for Dyck-(2,2) sometimes the automaton network with a few weights moved."""
    if task.name == "dyck22" and rng.random() < 0.5:
        return perturbed_dyck_rnn(rng, 0.03, float(fx.step))
    h, C = int(rng.integers(1, 4)), task.num_classes
    w = lambda *shape: np.round(rng.normal(0, 1.5, size=shape) * 4) / 4
    return Recurrent(w(len(task.vocab), h), w(h, h), w(h), w(h), Readout(w(C, h), w(C), "argmax", positions="all"),
                     list(task.vocab))


def reference_format(fx: "Fixed | FloatArith") -> "RefFX | RefFloat":
    """The independent reference of a format (tests/reference.py)."""
    if isinstance(fx, FloatArith):
        return RefFloat(*((f.E, f.M, f.ieee) for f in (fx.storage, fx.acc)), fx.rounding, fx.overflow)
    if isinstance(fx, FixedPoint):
        return RefFX(fx.p, fx.f, fx.rounding, fx.overflow, fx.accumulate)
    return RefGrid(fx.step, fx.lo, fx.hi, fx.rounding, fx.overflow, fx.accumulate)


def reference_failures(problem: Problem) -> set:
    """The inputs the independent reference gets wrong (wrong, tie, or a saturation under error)."""
    model, fx, task = problem.model, problem.arith, problem.task
    ref = reference_format(fx)
    recurrent = isinstance(model, Recurrent)
    q = None if recurrent else quantize_model(model, ref)
    failing = set()
    for batch in task.batches(0, task.total, 512):
        for row, answer in zip(batch.tokens, batch.expected):
            tokens = [int(t) for t in row]
            y, ovf = (ref_recurrent(model, ref, tokens, per_answer=True) if recurrent else
                      ref_forward(model, ref, tokens, q, per_answer=True))
            ys, answers, ovfs = (y, answer, ovf) if task.per_position else ([y], [answer], [ovf])
            # an answer is judged where the task gives one (NO_ANSWER: none is required there)
            if any(a != NO_ANSWER and (pred != a or tie or (o and fx.overflow == "error"))
                   for (pred, tie), a, o in zip((ref_answer(model, ref, v) for v in ys), answers, ovfs)):
                failing.add(tuple(tokens))
    return failing


def distinct_engines() -> dict[str, object]:
    """The engine registry (`verifier.engines.ENGINES`), each engine once: a name that is another's
    alias (smt and smt-bv are the same engine) is left out.  A newly registered engine is in it."""
    out, seen = {}, set()
    for name, engine in ENGINES.items():
        config = sorted((k, v) for k, v in vars(engine).items() if not k.startswith("_"))  # _: a run's caches
        key = (type(engine), tuple(config))
        if key not in seen:
            seen.add(key)
            out[name] = engine
    return out


def decide_all(problem: Problem, engine_seconds: float = ENGINE_SECONDS, through_api: bool = True,
               skip: Collection[str] = ()) -> dict:
    """Decide the problem every way but `skip` ("encoding", engine names); assert that all of them
    agree; return what happened: the verdict, then for the SMT encoding and every engine of the
    registry agree, unknown (out of time, or the solver gave up) or n/a (it cannot run the problem)."""
    task = problem.task
    enum = Exhaustive().run(problem, RunOptions(max_counterexamples=max(1, task.total), workers=1))
    failing = {tuple(int(t) for t in f.tokens) for f in enum.found}
    assert reference_failures(problem) == failing, "enumeration and the reference disagree"
    verdict = "refuted" if failing else "proved"
    outcome = {"verdict": verdict}
    if "encoding" not in skip:
        outcome["encoding"] = _encoding_agrees(problem, failing)
    for name, engine in distinct_engines().items():
        if name in skip:
            continue
        opts = RunOptions(deadline=Deadline(engine_seconds), workers=1)
        if engine.unsupported(problem, opts) is not None:
            outcome[name] = "n/a"
            continue
        got = engine.run(problem, opts)  # decoded models are re-checked by the engine
        if name == "smt" and got.status == Status.COMPLETE:  # its cases in two processes: the very same answer
            both = engine.run(problem, RunOptions(deadline=Deadline(engine_seconds), workers=2))
            assert both.status != Status.COMPLETE or _answer(both) == _answer(got), "smt in two processes disagrees"
        reported = {tuple(int(t) for t in f.tokens) for f in got.found}
        assert reported <= failing, f"{name} reports a success"
        unreported = len(failing - reported)  # none of them can be among the inputs it says it decided
        assert got.covered <= task.total - unreported, f"{name} says it decided {got.covered} inputs"
        if got.status != Status.COMPLETE and not got.found:
            outcome[name] = "unknown"
            continue
        assert bool(got.found) == bool(failing), f"the {name} engine disagrees"
        assert failing or got.covered == task.total, f"{name} proved {got.covered} of {task.total} inputs"
        outcome[name] = "agree"
        if through_api:  # replay and sample check included; a run past its time is unknown, never a verdict
            assert verifier.run(problem, name, timeout=engine_seconds).verdict in (verdict, "unknown"), \
                f"verifier.run with the {name} engine disagrees"
    return outcome


def _answer(result) -> tuple:
    """What an engine's run says: coverage and its counterexamples, in order."""
    return result.covered, [f.tokens.tolist() for f in result.found]


def _encoding_agrees(problem: Problem, failing: set) -> str:
    """Case by case, the SMT formula (bit-vectors) holds at every input enumeration says fails, and
    it has a failing input exactly when the case has one, and only one that fails."""
    if problem.task.cases is None or Smt().unsupported(problem, RunOptions()) is not None:  # a list of examples,
        return "n/a"  # or a float recipe the encoding refuses: only enumeration can decide it
    ev = make_evaluator(problem.model, problem.arith)
    fresh_z3_context()  # as an SMT run does: a context an earlier SIGTERM interrupted simplifies nothing
    status = "agree"
    encoder = Encoder(ev)  # as the engine encodes: a length's cases may share its forward pass
    cases = [(case, group) for _, g in itertools.groupby(problem.task.cases(), key=lambda c: c.length)
             for group in [list(g)] for case in group]
    for case, group in cases:
        try:
            enc = encoder(case, group)
        except TableTooLarge:  # a float format's exp table: the case is undecided, never agreement
            status = "unknown"
            continue
        in_case = [t for t in failing if enc.contains(t)]
        for tokens in in_case:
            assert enc.holds_at(tokens), (case.name, tokens)
        found, how = Smt.solve_case(enc, 1, Deadline(SOLVE_SECONDS))
        if how not in DECIDED:
            status = "unknown"
            continue
        assert bool(found) == bool(in_case), (case.name, found, in_case)
        assert all(tuple(t) in failing for t in found), (case.name, found)
    return status
