"""The library entry points: build a problem, run an engine, replay what it found, give a verdict.

``verifier.prove(task="index_lookup", N=16, p=12)`` is what ``verify idxl --N 16 --p 12`` calls.
Every counterexample an engine reports is replayed here, on the evaluator's generic path and
against the task's own definition of the answer, before it is reported; a replay that disagrees
is an `InternalError`, never a verdict.  A proof from a symbolic engine is sample-checked on the
evaluator (`sample_check`) before it is returned.  A run that is interrupted or runs out of time
(`--timeout` counts from before the problem is built) gets the verdict unknown.
"""

from __future__ import annotations

import inspect
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from .. import calibration
from ..arithmetic import Fixed, Format, make_format, parse_format
from ..constructions import CONSTRUCTIONS
from ..engines import ENGINES, EngineResult, Found, Problem, RunOptions, Tick, decide, plan
from ..evaluator import Evaluator, Outputs, RecurrentEvaluator, make_evaluator, read_from, reference, trace
from ..floats import FloatArith
from ..int8 import Int8Arith
from ..model import Model, Recurrent, weights_sha256
from ..result import Counterexample, Result, count_text
from ..smt import solvers
from ..support import interrupts, usercode
from ..support.budget import Deadline, TimedOut, check_workers
from ..support.errors import InputError, InternalError
from ..tasks import Task, canonical, make_task
from ..tasks.base import NO_ANSWER
from ..tasks.bos import WithBos
from ..verdicts import Status, Verdict
from .falsify import engine_deadline, falsify
from .sample_check import sample_check

MAX_COUNTEREXAMPLES = 10_000  # each one is replayed with its full trace


@dataclass
class Traced:
    """One input evaluated in the problem's format and in the real reference, with every intermediate value."""

    tokens: np.ndarray
    truth: int | np.ndarray  # the answer, or the answers at every position
    out: Outputs
    real_out: Outputs
    table: dict  # name -> {"codes", "values", "real"}
    margin: float
    real_margin: float


def build_problem(task: "str | Task" = "index_lookup", *, N: Optional[int] = None, p: Optional[int] = None,
                  f: Optional[int] = None, rounding: Optional[str] = None, overflow: Optional[str] = None,
                  accumulate: str = "product", arith: "str | Format | None" = None,
                  variant: Optional[str] = None, k: Optional[int] = None, eta: Optional[float] = None, seed: int = 0,
                  model: Optional[Model | Recurrent] = None, **task_options) -> Problem:
    """The task at size N (with its options, e.g. ``sigma=4``), the arithmetic, and the built-in
    construction in the given variant (default: corrected), or the given model.  `task` may also
    be a task object (a `ReferenceTask` built from a Python function, say); N is then its own.

    The arithmetic: FX(p, f) with the rounding, overflow and accumulation rules, or `arith`: a
    format (a `Fixed`, e.g. ``Grid.b2(6, 2)``), or its name as the CLI's --format takes it
    (``"fx"``, ``"b2:2"`` at the task's N, ``"grid:1/144:144"``; `verifier.arithmetic.make_format`).
    A construction gets the format's Kc at the task's N (`Fixed.kc`)."""
    if isinstance(task, str):
        if N is None:
            raise InputError("the task's size N is required")
        t = make_task(canonical(task), N=N, **task_options)
    elif N is not None and N != task.N or task_options:
        raise InputError("a task object has its size and options already; give neither N nor options")
    else:
        t = task
    fmt = _format(arith, getattr(t, "N", None), p, f, rounding, overflow, accumulate)
    built_in = model is None
    if built_in:
        if t.name not in CONSTRUCTIONS:
            raise InputError(f"{t.name} has no built-in construction; give a model (--model)")
        model = CONSTRUCTIONS[t.name].build(t, variant, k, eta, seed, fmt.kc(t.N))
    elif (k, eta, variant) != (None, None, None):
        raise InputError("--variant, --k and --eta set a built-in construction's parameters; "
                         "they do not apply to --model")
    fitted, t = check_compatible(model, t)
    if isinstance(fmt, Int8Arith) and not fmt.acts:
        fmt = calibration.bind(fmt, fitted, t)  # its scales: the model file's, or calibrated on the task's
    fmt.check_model(fitted)  # a format int64 cannot hold (or softmax cannot run in) fails now, not in the engine
    return Problem(t, fitted, fmt, built_in, None if fitted is model else weights_sha256(model))


def build_construction(task: str, *, N: int, arith: Optional[str] = None, f: Optional[int] = None,
                       variant: Optional[str] = None, k: Optional[int] = None, eta: Optional[float] = None,
                       seed: int = 0, **task_options) -> Model:
    """The built-in construction of `task` at size N, as `verify export` writes it: built for the Kc
    of FX's f (p does not enter Kc) or of another format `arith` at N; for neither, its default.
    With an int8 format it carries the activation scales calibrated on the task (`calibration.calibrate`)."""
    t = make_task(canonical(task), N=N, **task_options)
    if t.name not in CONSTRUCTIONS:
        raise InputError(f"{t.name} has no built-in construction to export")
    fmt = make_format(arith, N=t.N, f=f) if parse_format(arith)[0] != "fx" else None
    if fmt is not None:
        kc = fmt.kc(t.N)
    elif f is None:
        kc = None
    elif not 0 <= f <= 31:
        raise InputError(f"--f must be in 0..31, got {f}")
    else:
        kc = make_format(arith, N=t.N, p=31, f=f).kc(t.N)
    model = CONSTRUCTIONS[t.name].build(t, variant, k, eta, seed, kc)
    if isinstance(fmt, Int8Arith):
        model.quantization = calibration.bind(fmt, *check_compatible(model, t)).acts
    return model


def check_sizes(task: str, Ns: list[int], *, model: Optional[Model | Recurrent] = None, variant: Optional[str] = None,
                k: Optional[int] = None, **problem) -> None:
    """Every N of `Ns` is a size of the task (with its options) and, without a model, of the built-in
    construction, its cost admitted (`sizes.Cost.admit`): from the sizes alone, before any run, so
    that a range fails at once on its first bad N (InputError naming it) instead of after the
    others ran.  `problem` holds `build_problem`'s other arguments; those not its own are task
    options."""
    own = set(inspect.signature(build_problem).parameters)
    options = {key: v for key, v in problem.items() if key not in own}
    name = canonical(task)
    for N in Ns:
        try:
            t = make_task(name, N=N, **options)
            if model is None and t.name in CONSTRUCTIONS:
                CONSTRUCTIONS[t.name].cost(t, variant or CONSTRUCTIONS[t.name].default, k).admit()
        except InputError as exc:
            raise InputError(f"N = {N}: {exc}") from None


def _format(arith, N: int, p, f, rounding: Optional[str], overflow: Optional[str],
            accumulate: str) -> Format:
    """The problem's format: a format object as given (with no FX option beside it), or the one
    `make_format` reads from a name (None: FX(p, f))."""
    if isinstance(arith, (Fixed, FloatArith, Int8Arith)):
        given = {"p": p, "f": f, "rounding": rounding not in (None, "floor"),
                 "overflow": overflow not in (None, "saturate"),
                 "accumulate": accumulate != "product"}
        if any(v not in (None, False) for v in given.values()):
            raise InputError(f"arith={arith.label()} is a whole format; give no "
                             f"{', '.join(k for k, v in given.items() if v not in (None, False))} beside it")
        return arith
    if arith is not None and not isinstance(arith, str):
        raise InputError(f"arith must be a format (verifier.arithmetic.Fixed) or its name, got {arith!r}")
    return make_format(arith, N=N, p=p, f=f, rounding=rounding, overflow=overflow, accumulate=accumulate)


def check_compatible(model: Model | Recurrent, task) -> tuple[Model | Recurrent, "Task"]:
    """Check that the model reads the task's inputs and gives its answers; return the pair as the
    engines see it: the task behind the model's BOS token (`WithBos`), and the readout's rows in
    the task's class order (named rows: the task's classes first, the model's other rows after,
    where a prediction is a failure)."""
    model.validate()
    if model.bos is not None:
        task = WithBos(task, model.bos)
    if len(model.vocab) != len(task.vocab):
        raise InputError(f"the model has {len(model.vocab)} tokens ({_names(model.vocab)}) but {task.name} at "
                         f"this size has {len(task.vocab)} ({_names(task.vocab)})")
    if list(model.vocab) != list(task.vocab):
        wrong = next(i for i, (a, b) in enumerate(zip(model.vocab, task.vocab)) if a != b)
        raise InputError(f"the model's vocabulary is not {task.name}'s: token {wrong} is {model.vocab[wrong]!r} in "
                         f"the model, {task.vocab[wrong]!r} in the task (expected {_names(task.vocab)}"
                         + (", the BOS token last" if model.bos is not None else "") + ")")
    if model.max_len is not None and model.max_len < task.max_len:
        raise InputError(f"the model has position embeddings for {model.max_len} positions; "
                         f"{task.name} needs {task.max_len} (array 'P' rows)")
    every = model.readout.positions == "all"
    if every != task.per_position:
        raise InputError(f"{task.name} has an answer at {'every' if task.per_position else 'the last'} position; the "
                         f"model's readout reads {'every' if every else 'the last'} position (meta readout.positions)")
    if model.readout.kind != task.readout:
        raise InputError(f"{task.name} needs a readout of kind {task.readout}; the model's is {model.readout.kind}")
    if model.readout.rows is not None:
        return _rows_in_class_order(model, task), task
    rows = model.readout.W_U.shape[0]
    if rows != task.num_classes:
        unit = "class" if task.readout == "argmax" else "output bit"
        raise InputError(f"array 'U.W' has {rows} rows; {task.name} needs one per {unit} ({task.num_classes})")
    return model, task


def _names(names: list[str]) -> str:
    return " ".join(names[:8]) + (f" ... {len(names)} in all" if len(names) > 8 else "")


def _rows_in_class_order(model: Model | Recurrent, task) -> Model | Recurrent:
    """The model with its readout rows reordered: row c is the task's class c (found by name), the
    rows that name no class follow (and keep their names, `answer_name`).  Reordering rows of W_U
    and b_U changes no score."""
    ro = model.readout
    classes = [task.answer_name(c) for c in range(task.num_classes)]
    missing = [c for c in classes if c not in ro.rows]
    if missing:
        raise InputError(f"the model's readout rows ({_names(ro.rows)}) have no row for {task.name}'s "
                         f"answer{'s' if len(missing) > 1 else ''} {_names(missing)}")
    order = [ro.rows.index(c) for c in classes] + [r for r, name in enumerate(ro.rows) if name not in classes]
    readout = replace(ro, W_U=ro.W_U[order], b_U=ro.b_U[order], rows=[ro.rows[r] for r in order])
    return replace(model, readout=readout)


def answer_name(problem: Problem, answer: int) -> str:
    """An answer by name: the task's class, or a readout row beyond the task's classes by the name
    the model gives it (`readout.rows`)."""
    rows = problem.model.readout.rows
    if rows is not None and problem.task.num_classes <= answer < len(rows):
        return rows[answer]
    return problem.task.answer_name(answer)


def run(problem: Problem, engine: str = "auto", *, max_counterexamples: int = 1, timeout: Optional[float] = None,
        start: int = 0, stop: Optional[int] = None, workers: Optional[int] = None,
        progress: Optional[Callable[[Tick], None]] = None, deadline: Optional[Deadline] = None,
        cluster=None, solver: str = "auto", smtlib: Optional[str] = None) -> Result:
    """Decide the problem with an engine; replay every counterexample; sample-check a symbolic
    proof; return the verdict.  `deadline` (which `prove` and the CLI start before building the
    problem) takes the place of `timeout`.  `cluster` (a started `verifier.runs.cluster.Cluster`): the
    exhaustive engine splits its range over the cluster's workers.  `solver` and `smtlib` (a
    directory for each case's SMT-LIB 2 text) are the SMT engine's."""
    total = problem.task.total
    stop = total if stop is None else stop
    if not 0 <= start <= stop <= total:
        raise InputError(f"the range {_index(start)}..{_index(stop)} is not inside 0..{_index(total)}")
    if not 1 <= max_counterexamples <= MAX_COUNTEREXAMPLES:
        raise InputError(f"--max-counterexamples must be in 1..{MAX_COUNTEREXAMPLES:,} (each one is replayed "
                         f"with its trace), got {max_counterexamples}")
    check_workers(workers)
    deadline = deadline if deadline is not None else Deadline(timeout)
    solvers.check_choice(solver)
    if smtlib is not None:
        smt = [name for name in ENGINES if name.startswith("smt")]
        if engine not in smt:  # another engine would write nothing there
            raise InputError(f"--smtlib writes the SMT engine's cases: it needs --engine {', '.join(smt)} "
                             f"(not {engine})")
        Path(smtlib).mkdir(parents=True, exist_ok=True)
        earlier = sorted(Path(smtlib).glob("case-*.smt2"))
        if earlier:  # the engine never overwrites a case file: refused now, not after the cases before it
            raise InputError(f"--smtlib {smtlib} holds {earlier[0].name} from an earlier run; the export never "
                             f"overwrites a case: give an empty directory")
    # the engine stops a share of the time early: the falsification pass before an unknown has the rest
    opts = RunOptions(max_counterexamples, engine_deadline(deadline), start, stop, workers, progress, cluster, solver,
                      smtlib)
    whole = (start, stop) == (0, total)
    options = plan(engine, problem, opts)
    (chosen, why), er, quantized, cexs, audit, tried = options[0], None, None, [], None, None
    t0 = time.monotonic()
    try:
        with deadline.enforced():  # past it, TimedOut reaches a step that does not poll (`budget`)
            quantized = problem.generic()  # before the engine: nothing slow is left once it stops
            chosen, why, er = decide(options, problem, opts)
            status = er.status
            cexs = [replay(problem, found, quantized) for found in er.found]
            if not cexs and status in (Status.TIMEOUT, Status.INCOMPLETE):
                tried, found = falsify(problem, er, opts, deadline)
                cexs = [replay(problem, f, quantized) for f in found]
            if not cexs and status == Status.COMPLETE and whole and chosen.symbolic:
                audit = sample_check(problem, deadline)
    except TimedOut:
        status, cexs, audit = Status.TIMEOUT, [], None
    except KeyboardInterrupt:
        if er is None:
            raise
        status, cexs, audit = Status.INTERRUPTED, [], None
    er = er or EngineResult(Status.TIMEOUT, 0, [])  # the deadline passed while the model was quantized
    seconds = time.monotonic() - t0
    if status == Status.COMPLETE and not whole and not cexs:
        status = Status.PARTIAL
    checked = _checked(problem, er, status == Status.COMPLETE and whole and not er.found)
    if checked is not None and checked.inputs == 0 and status == Status.COMPLETE and not cexs:
        raise InputError(f"nothing was checked: none of the {stop - start:,} members of {problem.task.name}'s "
                         f"enumeration in {start}..{stop} is an input with an answer, so there is no verdict to give")
    verdict = Verdict.REFUTED if cexs else Verdict.PROVED if status == Status.COMPLETE else Verdict.UNKNOWN
    reason = "" if verdict != Verdict.UNKNOWN else _unknown_reason(status, er, deadline, start, stop, total,
                                                                    chosen.name)
    stats = dict(er.stats)
    if why is not None:
        stats["auto"] = why
    if audit is not None:
        stats["sample_check"] = audit.to_json()
    if tried is not None:
        stats["falsified"] = tried.to_json()
    construction, params, provenance = describe_problem(problem)
    arithmetic = {**problem.arith.describe(), "quantization_error": quantized and quantized.quant_error,
                  "saturated_parameters": quantized and quantized.saturated_params}
    tightest = None
    if er.tightest is not None:
        tightest = {"index": er.tightest, "input": problem.task.render(problem.task.decode(er.tightest))}
    return Result(verdict=verdict, task=problem.task.describe(), construction=construction, params=params,
                  arithmetic=arithmetic, engine=chosen.name + (" (auto)" if engine == "auto" else ""),
                  covered=er.covered, total=total, start=start, stop=stop, seconds=seconds,
                  min_margin=er.min_margin, counterexamples=cexs, tightest=tightest, reason=reason,
                  engine_stats=stats, status=status, provenance=provenance,
                  checked=None if checked is None else checked.to_json(),
                  quantized=quantized.q.named_arrays() if cexs else {}, residual_rows=problem.model.residual_rows)


def _checked(problem: Problem, er, complete: bool):
    """The inputs of the task the run judged (`tasks.base.Checked`): the engine's count, or when a
    complete run without a failure judged them all, the task's own count (which must agree)."""
    counted = er.checked
    if complete and problem.task.answered is not None:
        whole = problem.task.answered()
        if counted is not None and counted != whole:
            raise InternalError(f"the engine judged {counted} of {problem.task.name}'s inputs; the task has {whole}")
        return whole
    return counted


def describe_problem(problem: Problem) -> tuple[dict, dict, dict]:
    """What was verified: (construction and theorem, parameters, provenance).  A built-in
    construction's parameters are facts; what a model file's metadata says is only its claim."""
    model = problem.model
    info = dict(model.info)
    size_bits = problem.arith.bits * model.n_params()
    provenance = {"weights_sha256": problem.weights_sha256 or weights_sha256(model)}
    if problem.built_in:
        construction = {"construction": info.pop("construction", "?"), "theorem": info.pop("theorem", None)}
        provenance.update(source="built-in", construction=construction["construction"],
                          variant=info.get("variant", CONSTRUCTIONS[problem.task.name].default))
        return construction, {**info, "size_bits": size_bits}, provenance
    provenance.update(source="model file" if model.source else "model in memory", path=model.source,
                      claims=info)
    name = f"model file {model.source}" if model.source else "user model"
    return {"construction": name, "theorem": None}, {"d": model.d, "n_params": model.n_params(),
                                                       "size_bits": size_bits}, provenance


def _index(i: int) -> str:
    """An input index as --start and --stop take it, or its magnitude beyond what int -> str prints."""
    return str(i) if i < 10 ** 300 else count_text(i)


def _unknown_reason(status: Status, er: EngineResult, deadline: Deadline, start: int, stop: int, total: int,
                    engine: str) -> str:
    if status == Status.INTERRUPTED:
        reason = f"interrupted ({interrupts.cause()})"
    elif status == Status.TIMEOUT:
        reason = f"timeout after {deadline.seconds:g} s"
        if er.status == Status.COMPLETE:
            reason += " during the sample check of the proof"
    elif status == Status.INCOMPLETE:
        reason = f"the solver answered unknown ({er.stats.get('solver_reason') or 'no reason given'})"
    else:
        reason = f"the range {_index(start)}..{_index(stop)} is part of the {count_text(total)} inputs"
    if er.stats.get("unfinished_case"):
        reason += f"; unfinished case {er.stats['unfinished_case']}"
    reason += f"; covered inputs {start}..{start + er.covered}"
    if engine == "exhaustive":
        reason += f", resume with --start {start + er.covered}"
    return reason


def prove(task: str = "index_lookup", *, engine: str = "auto", max_counterexamples: int = 1,
          timeout: Optional[float] = None, start: int = 0, stop: Optional[int] = None,
          workers: Optional[int] = None, progress=None, solver: str = "auto", smtlib: Optional[str] = None,
          **problem) -> Result:
    """Build the problem (see `build_problem`) and decide it: ``prove("idxl", N=16, p=12)``.
    The timeout covers the building too (the command line also stops a building that outlasts it)."""
    deadline = Deadline(timeout)
    with usercode.time_limit(deadline):  # a reference function is the user's code: the timeout bounds it
        built = build_problem(task, **problem)
    return run(built, engine, max_counterexamples=max_counterexamples, start=start,
               stop=stop, workers=workers, progress=progress, deadline=deadline, solver=solver, smtlib=smtlib)


def explain(problem: Problem, tokens: np.ndarray, quantized: Optional[Evaluator | RecurrentEvaluator] = None) -> Traced:
    """Evaluate one input on the generic path in the problem's format and in the real reference,
    keeping every value ("values" = codes * step)."""
    quantized = quantized or problem.generic()
    tokens = np.asarray(tokens, dtype=np.int64)
    truth = problem.task.answer(tokens)
    out, values = trace(quantized, tokens)
    real_ev = reference(problem.model)
    with np.errstate(all="ignore"):  # the float64 reference of extreme weights overflows; it only reports
        real_out, real_values = trace(real_ev, tokens)
        real_margin = float(real_ev.margins(real_out, np.array([truth]))[0])
    table = {name: {"codes": v, "values": problem.arith.to_real(v), "real": real_values.get(name)}
             for name, v in values.items()}
    return Traced(tokens, truth, out, real_out, table, float(quantized.margins(out, np.array([truth]))[0]),
                  real_margin)


def replay(problem: Problem, found: Found,
           quantized: Optional[Evaluator | RecurrentEvaluator] = None) -> Counterexample:
    """Re-evaluate a reported failure on the generic path, against the task's own answer.

    A failure that does not reproduce exactly (same answer, same kind of failure, same position)
    is an InternalError: the engines and the evaluator disagree, and no verdict may be given.
    """
    task = problem.task
    quantized = quantized or problem.generic()
    t = explain(problem, found.tokens, quantized)
    got = quantized.judge(t.out, np.array([t.truth]))
    pos = int(got.position[0])
    mine = (int(got.expected[0]), int(got.produced[0]), got.reason[0], None if pos < 0 else pos)
    theirs = (found.expected, found.produced, found.reason, found.position)
    if mine != theirs:
        raise InternalError(
            f"counterexample #{found.index} ({task.render(t.tokens)}) does not replay: the engine reported "
            f"{_claim(problem, *theirs)}; the evaluator gives {_claim(problem, *mine)}")
    judged = np.atleast_1d(t.truth) != NO_ANSWER  # the answers judged: only saturations they depend on count
    shown = pos if pos >= 0 or not task.per_position else int(np.flatnonzero(judged)[-1])
    at = pos if pos >= 0 else None
    overflow_at = list(dict.fromkeys(w for w, feeds in zip(t.out.where, t.out.feeds) if feeds[judged].any()))
    return Counterexample(
        index=found.index, tokens=[int(x) for x in t.tokens], input=task.render(t.tokens),
        expected=answer_name(problem, mine[0]), produced=_produced_name(problem, t.out, shown), reason=mine[2],
        margin=t.margin, overflow_at=overflow_at, real_produced=_produced_name(problem, t.real_out, shown),
        real_margin=t.real_margin, trace=t.table,
        position=None if at is None else at + read_from(problem.model),  # in the input, BOS included
        saturated_at=list(t.out.saturated_at))


def failure_at(problem: Problem, index: int) -> Optional[Counterexample]:
    """The input at enumeration `index`, decided anew on the evaluator's generic path: its replayed
    counterexample when the model fails it; None when it is right or not an input of the task."""
    tokens = problem.task.decode(index)
    answers, valid = problem.task.evaluate(tokens[None, :])
    if not valid[0]:
        return None
    quantized = make_evaluator(problem.model, problem.arith, tables=False)
    judged = quantized.judge(quantized.forward(tokens[None, :]), answers)
    return replay(problem, Found.of(judged, 0, index, tokens), quantized) if judged.failed[0] else None


def _claim(problem: Problem, expected: int, produced: int, reason: Optional[str], position: Optional[int]) -> str:
    at = f"at position {position}: " if position is not None else ""
    return (f"{at}expected {answer_name(problem, expected)}, produced {answer_name(problem, produced)} "
            f"({reason or 'correct'})")


def _produced_name(problem: Problem, out: Outputs, position: int) -> str:
    """The answer by name (at `position` for a sequence output); for an argmax tie, every class that
    shares the maximum."""
    at = (0,) if out.pred.ndim == 1 else (0, position)
    if out.tie[at]:
        scores = out.scores[at]
        return "tie(" + ", ".join(answer_name(problem, int(c)) for c in np.flatnonzero(scores == scores.max())) + ")"
    return answer_name(problem, int(out.pred[at]))
