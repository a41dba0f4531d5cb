"""`verify refute`: inputs a model must get wrong, with the argument that forced them.

Three methods, each with its scope stated and checked; every counterexample is replayed on the
evaluator (`api.replay`) before it is reported.

* ``dependent`` (Chen and Zou 2024, arXiv:2404.01601, Propositions 7-10): certificates
  (`certificates`) generated around random members of the dataset, so that it works on datasets far
  too large to enumerate.  Every member of a certificate is evaluated; the theorem says a model in
  scope gets one wrong in exact arithmetic.  In scope: one layer, attention only (no FFN), a linear
  readout, and ReLU attention with any number of heads, or softmax with one head and no residual
  connection (`dependent_scope`).  In FX the identity sum_i lambda_i h_i = 0 can break (the 1/m head
  average and every rounded product are not linear): a certificate the model gets entirely right is
  a finding, reported with the value of sum_i lambda_i h_i at the readout's input.
* ``protocol`` (Bhattamishra et al. 2024, arXiv:2406.09347, Theorem 4, Appendix D): in FX, the last
  position of a 1-layer model depends on Alice's positions only through, per head, the multiset of
  (logit code, value codes, overflow) over her positions (`alice_summaries`).  Two members of a
  fooling set with the same summary under the same query give a crossed input that the model answers
  as it answers a member, which the task forbids.  Equality and disjointness split their halves.
* ``search``: the engines over the whole dataset (`api.run`).

``auto`` tries the structured methods that apply, then the search.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from .api import describe_problem, replay, run
from .budget import Deadline
from .certificates import SCOPE_NOTE, certificates, count_identity_holds, random_seeds
from .engines import Found, Problem
from .errors import InputError
from .evaluator import Evaluator, make_evaluator, trace
from .model import Head, Layer, Model, Readout, Recurrent
from .result import EXIT_CODES, Counterexample
from .tasks.combinatorics import falling

METHODS = ("auto", "dependent", "protocol", "search")


@dataclass
class Refutation:
    verdict: str  # refuted | proved (by the search) | unknown
    method: str  # the method that decided, or the last one tried
    task: dict
    model: dict
    arithmetic: dict
    counterexamples: list[Counterexample]
    argument: list[str] = field(default_factory=list)  # why the counterexamples are forced
    quantized: dict = field(default_factory=dict, repr=False)  # weight name -> codes, for the dumps
    provenance: dict = field(default_factory=dict)  # what was refuted: a file and its weights_sha256, ...
    certificate: Optional[dict] = None
    bound: Optional[dict] = None  # the certified error bound
    findings: list[str] = field(default_factory=list)  # scope, rounding that broke an identity, counts
    stats: dict = field(default_factory=dict)  # per method: what it tried and how long
    seconds: float = 0.0

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]

    # what a counterexample dump reads (`dump.write_dumps`)
    @property
    def construction(self) -> dict:
        return self.model

    @property
    def params(self) -> dict:
        return {}

    @property
    def engine(self) -> str:
        return f"refute ({self.method})"

    def to_json(self) -> dict:
        return {"verdict": self.verdict, "method": self.method, "task": self.task, "model": self.model,
                "arithmetic": self.arithmetic, "argument": self.argument, "certificate": self.certificate,
                "bound": self.bound, "findings": self.findings, "stats": self.stats, "seconds": round(self.seconds, 3),
                "counterexamples": [c.to_json() for c in self.counterexamples], "provenance": self.provenance}

    def summary(self) -> str:
        a = self.arithmetic
        lines = [f"{self.verdict.upper()} by {self.method}: {self.model.get('construction', 'user model')} on "
                 f"{self.task['name']} " + ", ".join(f"{k}={v}" for k, v in self.task.items() if k not in ("name", "inputs")),
                 f"  arithmetic  FX(p={a['p']}, f={a['f']}) rounding={a['rounding']} overflow={a['overflow']} "
                 f"accumulate={a['accumulate']}"]
        lines += [f"  {c.line()}" for c in self.counterexamples]
        lines += [f"  argument    {line}" if i == 0 else f"              {line}" for i, line in enumerate(self.argument)]
        if self.bound:
            lines.append(f"  bound       {self.bound['statement']}")
        lines += [f"  finding     {line}" for line in self.findings]
        for method, st in self.stats.items():
            lines.append(f"  {method:<11} " + ", ".join(f"{k}={v}" for k, v in st.items()))
        lines.append(f"  time        {self.seconds:.2f} s")
        return "\n".join(lines)


def _describe(model: Model | Recurrent) -> dict:
    """The model's shape, and its name: what a file's metadata says is shown as its claim."""
    claim = model.info.get("construction")
    name = claim or "user model"
    if model.source:
        name = f"model file {model.source}" + (f" (the file says: {claim})" if claim else "")
    if isinstance(model, Recurrent):
        return {"construction": name, "recurrent": model.d}
    return {"construction": name, "layers": len(model.layers), "heads": [len(l.heads) for l in model.layers],
            "attention": [l.attention for l in model.layers]}


# -- scopes -------------------------------------------------------------------------------------
def dependent_scope(problem: Problem) -> Optional[str]:
    """Why the dependent-set argument does not cover this model and task (None: it does)."""
    model, task = problem.model, problem.task
    if task.name not in SCOPE_NOTE or task.name == "memorization":
        return f"no dependent-set theorem for {task.name}"
    if isinstance(model, Recurrent):
        return "the model is recurrent; the theorem is about 1-layer transformers"
    if len(model.layers) != 1:
        return f"the model has {len(model.layers)} layers; the theorem is about one"
    layer = model.layers[0]
    if layer.has_ffn:
        return "the model has an FFN; the theorem is about attention-only layers"
    if layer.attention == "softmax" and len(layer.heads) > 1:
        return "softmax with several heads: each head has its own normalization (the paper leaves it open)"
    if layer.attention == "softmax" and layer.residual:
        return ("softmax with a residual connection: the identity gains (sum_i lambda_i Z_i) x_{n-1}, which does "
                "not vanish (Proposition 9 omits it)")
    return None


PROTOCOL_TASKS = ("equality", "disjointness")


def protocol_scope(problem: Problem) -> Optional[str]:
    if problem.task.name not in PROTOCOL_TASKS:
        return f"no fooling set is defined for {problem.task.name} (tasks with one: {', '.join(PROTOCOL_TASKS)})"
    if isinstance(problem.model, Recurrent):
        return "the model is recurrent; the protocol simulates a 1-layer transformer"
    if len(problem.model.layers) != 1:
        return f"the model has {len(problem.model.layers)} layers; the protocol simulates one"
    return None


# -- evaluation and replay ---------------------------------------------------------------------
class _Model:
    """The model set in the run's arithmetic once: the batched evaluator, and the generic path for
    replays and traces."""

    def __init__(self, problem: Problem):
        self.problem = problem
        self.fast = make_evaluator(problem.model, problem.arith)
        self.generic = make_evaluator(problem.model, problem.arith, tables=False)
        if isinstance(problem.model, Recurrent):
            self.readout_input = "h"
        else:
            last = problem.model.layers[-1]
            self.readout_input = f"L{len(problem.model.layers) - 1}.{'out' if last.has_ffn else 'resid'}"

    def counterexamples(self, tokens: np.ndarray, limit: int) -> list[Counterexample]:
        """The inputs among `tokens` the model gets wrong, replayed."""
        task, ev = self.problem.task, self.fast
        expected, valid = task.evaluate(tokens)
        tokens, expected = tokens[valid], expected[valid]
        judged = ev.judge(ev.forward(tokens), expected)
        return [replay(self.problem, Found.of(judged, i, task.index_of(tokens[i]), tokens[i]), self.generic)
                for i in np.flatnonzero(judged.failed)[:limit]]

    def readout_vector(self, tokens) -> np.ndarray:
        """What the readout reads at the last position (FX values)."""
        return self.problem.arith.to_real(trace(self.generic, tokens)[1][self.readout_input][-1])


# -- the dependent-set method ---------------------------------------------------------------------
def error_bound(task) -> Optional[dict]:
    """Disjoint certificates that cover the dataset: in exact arithmetic each holds an error."""
    if task.name == "icqa":
        pairs, per_query = task.k // 2, falling(task.nq, task.k) * falling(task.na, task.k)
        errors = pairs * per_query // 2  # blocks (2s, 2s+1): answers swapped or not x query either
        how = (f"the examples whose query is in block pair (2s, 2s+1), s < {pairs}, fall into groups of 4 (the two "
               f"answers of the pair in either order, the query either question): each group is a certificate")
    elif task.name == "template_matching" and task.substitutions is None:
        ts = sorted(range(task.num_classes), key=lambda t: task.widths[t])
        errors = sum(task.alphabet // max(task.widths[a], task.widths[b]) for a, b in zip(ts[0::2], ts[1::2]))
        how = ("templates paired in order of width; for each pair, the sequences of both over each of "
               "floor(|X| / w) disjoint sets of w symbols form a certificate (Lemmas 5-6)")
    else:
        return None
    if not errors:
        return None
    return {"errors": errors, "total": task.total, "accuracy_at_most": 1 - errors / task.total, "how": how,
            "statement": f"in exact arithmetic every model in scope errs on at least {errors:,} of the {task.total:,} "
                         f"inputs (accuracy <= {1 - errors / task.total:.6g}): {how}"}


def refute_dependent(model: _Model, out: Refutation, rng: random.Random, deadline: Deadline,
                     max_counterexamples: int, certificates_budget: int) -> bool:
    """True when it found a counterexample (filled into `out`)."""
    task = model.problem.task
    t0, tried, intact, broken = time.monotonic(), 0, 0, []
    for cert in certificates(task, random_seeds(task, rng), rng, stop=deadline.expired):
        tried += 1
        members = np.array(cert.members)
        assert count_identity_holds(members, np.array(cert.lam))  # the search's claim, before it is used
        found = model.counterexamples(members, max_counterexamples)
        if found:
            out.counterexamples = found
            out.certificate = cert.to_json()
            out.argument = cert.lines() + [f"so every 1-layer model in scope gets one of them wrong "
                                           f"({SCOPE_NOTE[task.name]}); this one gets {len(found)} wrong"]
            intact += 1
            break
        h = np.sum([l * model.readout_vector(m) for l, m in zip(cert.lam, members)], axis=0)
        broken.append(float(np.abs(h).max()))
        if tried >= certificates_budget or deadline.expired():
            break
    out.stats["dependent"] = {"certificates": tried, "seconds": round(time.monotonic() - t0, 3)}
    if broken:
        out.findings.append(f"{len(broken)} certificate(s) the model gets entirely right: FX rounding broke the "
                            f"identity sum_i lambda_i h_i = 0 at the readout's input (largest |entry| "
                            f"{max(broken):.4g}); in exact arithmetic it holds")
    return bool(out.counterexamples)


# -- the protocol method --------------------------------------------------------------------------
def partition(task) -> tuple[list[int], list[int], np.ndarray, np.ndarray]:
    """Alice's positions, Bob's positions, and the fooling set as (Alice parts, Bob parts).

    Equality: the halves, with F = {(x, x)}.  Disjointness: BOS and the first half against the
    second half, with F = {(x, not x)} (disjoint)."""
    h = task.N // 2
    if h > 20:
        raise InputError(f"the fooling set of {task.name} at N = {task.N} has 2^{h} members; at most 2^20")
    x = ((np.arange(1 << h)[:, None] >> np.arange(h - 1, -1, -1)) & 1).astype(np.int64)
    if task.name == "equality":
        return list(range(h)), list(range(h, 2 * h)), x, x
    bos = np.full((len(x), 1), 2)
    return list(range(h + 1)), list(range(h + 1, 2 * h + 1)), np.concatenate([bos, x], axis=1), 1 - x


def alice_summaries(ev: Evaluator, alice: list[int], parts: np.ndarray, last_row: int) -> np.ndarray:
    """Per Alice part (F, |A|): per head, the sorted ids of (logit code, value codes, overflow) over
    her positions, under the query of the last position's row (position, token) of the tables."""
    t, V = ev.tables, len(ev.q.vocab)
    rows = np.asarray(alice)[None, :] * V + parts  # (F, |A|) table rows
    ids = []
    for hi in range(len(ev.q.layers[0].heads)):
        ctx = ev.arith.context((1, len(t.k[hi])))
        logits = ev.arith.scores(t.q[hi][[last_row]], t.k[hi], ctx, "logits")[0]
        key = np.concatenate([logits[:, None], t.v[hi], (t.kv_ovf | ctx.ovf[0])[:, None]], axis=1)
        _, code = np.unique(key, axis=0, return_inverse=True)
        ids.append(np.sort(code.reshape(-1)[rows], axis=1))
    return np.concatenate(ids, axis=1)


def theorem4_bits(problem: Problem) -> dict:
    """The bits of Theorem 4's protocol for this model: as printed, and as its steps add up."""
    layer, p, N = problem.model.layers[0], problem.arith.p, problem.task.max_len
    H, m, mv, lg = len(layer.heads), layer.heads[0].W_Q.shape[0], layer.heads[0].W_V.shape[0], math.ceil(math.log2(N))
    return {"printed": 3 * m * (p + lg) * H, "steps": H * (2 * p + 2 * (p + lg) + mv * (2 * p + lg))}


def refute_protocol(model: _Model, out: Refutation, max_counterexamples: int) -> bool:
    problem = model.problem
    task = problem.task
    t0 = time.monotonic()
    alice, bob, a_parts, b_parts = partition(task)
    ev = model.fast
    V, last = len(task.vocab), task.max_len - 1
    fooled = task.evaluate(np.concatenate([a_parts, b_parts], axis=1))[0][0]
    crossed, distinct = [], {}  # crossed: (the crossed input, the member it collides with)
    for last_token in np.unique(b_parts[:, -1]):
        group = np.flatnonzero(b_parts[:, -1] == last_token)
        summaries = alice_summaries(ev, alice, a_parts, last * V + int(last_token))
        _, first, inverse = np.unique(summaries, axis=0, return_index=True, return_inverse=True)
        distinct[int(last_token)] = len(first)
        for i in group:  # (a_j, b_i) answers as (a_i, b_i) when a_j's summary equals a_i's
            same = np.flatnonzero((inverse == inverse[i]) & (np.arange(len(a_parts)) != i))
            crossed += [(np.concatenate([a_parts[j], b_parts[i]]), np.concatenate([a_parts[i], b_parts[i]]))
                        for j in same[:2]]
        if len(crossed) >= 64:
            break
    bits = theorem4_bits(problem)
    fewest = min(distinct.values())
    out.stats["protocol"] = {"fooling_set": len(a_parts), "distinct_summaries_per_query": sorted(distinct.values()),
                             "bits_printed": bits["printed"], "bits_steps": bits["steps"],
                             "seconds": round(time.monotonic() - t0, 3)}
    wrong = [(row, member) for row, member in crossed if task.evaluate(row[None])[0][0] != fooled]
    if not wrong:
        out.findings.append(f"no collision: the {len(a_parts):,} members of the fooling set have {fewest:,} or more "
                            f"distinct summaries under each of the {len(distinct)} queries (one per last token)")
        return False
    row, member = wrong[0]
    found = model.counterexamples(np.array([r for r, _ in wrong]), max_counterexamples)
    which = "the crossed input"
    if not found:  # the model answers the member wrong instead
        found, which = model.counterexamples(np.array([m for _, m in wrong]), max_counterexamples), "a member"
    out.counterexamples = found
    out.argument = [f"Alice holds positions {alice[0]}..{alice[-1]}, Bob {bob[0]}..{bob[-1]}; the fooling set "
                    f"(answer {task.answer_name(int(fooled))} on every member) has {len(a_parts):,} members but as "
                    f"few as {fewest:,} distinct summaries (per head, the multiset of logit and value codes over "
                    f"Alice's positions) under one query",
                    "two members with the same summary give a crossed input that the model answers as it answers "
                    "a member, although its true answer differs (Bhattamishra et al. 2024, Theorem 4): "
                    f"{task.render(member)} and the crossed {task.render(row)}; here the model gets {which} wrong",
                    f"Theorem 4's protocol for this model sends {bits['printed']} bits as printed, {bits['steps']} as "
                    f"its steps add up; the fooling set needs log2 {len(a_parts):,} = {math.log2(len(a_parts)):.0f}"]
    return bool(found)


# -- the driver ---------------------------------------------------------------------------------
def refute(problem: Problem, method: str = "auto", *, seed: int = 0, timeout: Optional[float] = None,
           max_counterexamples: int = 1, certificates_budget: int = 50,
           deadline: Optional[Deadline] = None) -> Refutation:
    """Find inputs the model must get wrong: `method` one of METHODS."""
    if method not in METHODS:
        raise InputError(f"unknown method {method!r}; methods: {', '.join(METHODS)}")
    deadline = deadline if deadline is not None else Deadline(timeout)
    t0 = time.monotonic()
    out = Refutation("unknown", method, problem.task.describe(), _describe(problem.model),
                     problem.arith.describe(), [], provenance=describe_problem(problem)[2])
    rng = random.Random(seed)
    model = _Model(problem)
    order = ["dependent", "protocol", "search"] if method == "auto" else [method]
    for m in order:
        out.method = m
        if m == "dependent":
            why = dependent_scope(problem)
            if why is None:
                out.bound = error_bound(problem.task)
                if refute_dependent(model, out, rng, deadline, max_counterexamples, certificates_budget):
                    break
            elif method == m:
                raise InputError(f"--method dependent does not apply: {why}")
            else:
                out.findings.append(f"dependent sets: {why}")
        elif m == "protocol":
            why = protocol_scope(problem)
            if why is None:
                if refute_protocol(model, out, max_counterexamples):
                    break
            elif method == m:
                raise InputError(f"--method protocol does not apply: {why}")
            else:
                out.findings.append(f"protocol: {why}")
        else:
            result = run(problem, "auto", max_counterexamples=max_counterexamples, deadline=deadline)
            out.counterexamples = result.counterexamples
            out.stats["search"] = {"engine": result.engine, "covered": result.covered, "total": result.total,
                                   "seconds": round(result.seconds, 3)}
            if result.verdict == "proved":
                out.verdict = "proved"
            elif result.verdict == "unknown":
                out.findings.append(f"search: {result.reason}")
    if out.counterexamples:
        out.verdict = "refuted"
        out.quantized = model.generic.q.named_arrays()
    out.seconds = time.monotonic() - t0
    return out


def random_model(task, heads: int, width: int, attention: str, rng: np.random.Generator) -> Model:
    """A random 1-layer model for the task: Gaussian embeddings and weights, `heads` heads of query,
    key and value width `width`, a residual connection (none for one-head softmax, which the
    dependent-set argument covers only without one), a readout of the task's kind."""
    V, n, d = len(task.vocab), task.max_len, 2 * width + 4
    heads_ = [Head(*(rng.normal(0, 1, (width, d)) for _ in range(3))) for _ in range(heads)]
    W_O = rng.normal(0, 1, (d, width if attention == "relu" else heads * width))
    residual = not (attention == "softmax" and heads == 1)
    layer = Layer(heads_, W_O, attention=attention, residual=residual, causal=False)
    C = task.num_classes
    return Model(E=rng.normal(0, 1, (V, d)), P=rng.normal(0, 1, (n, d)), P_mask=np.ones(V, bool), layers=[layer],
                 readout=Readout(rng.normal(0, 1, (C, d)), rng.normal(0, 1, C), task.readout),
                 vocab=list(task.vocab), info={"construction": f"random ({heads} {attention} head{'s' if heads > 1 else ''}, width {width})"})


def refute_random(task, problem_options: dict, count: int, heads: int, width: int, attention: str,
                  method: str = "auto", seed: int = 0, timeout: Optional[float] = None) -> dict:
    """`refute` over `count` random models of a shape: per method, how often it found a
    counterexample and how long it took (median seconds to the verdict)."""
    from .api import build_problem
    from .arithmetic import ATTENTION_KINDS
    if attention not in ATTENTION_KINDS or heads < 1 or width < 1 or count < 1:
        raise InputError(f"--shape needs HEADS,WIDTH,ATTENTION with positive sizes and attention one of "
                         f"{', '.join(ATTENTION_KINDS)}; --random-models a positive count")
    rows: dict[str, dict] = {}
    for i in range(count):
        model = random_model(task, heads, width, attention, np.random.default_rng(seed + i))
        problem = build_problem(task.name, model=model, **problem_options)
        r = refute(problem, method, seed=seed + i, timeout=timeout)
        row = rows.setdefault(r.method if r.verdict == "refuted" else "none", {"models": 0, "seconds": []})
        row["models"] += 1
        row["seconds"].append(r.seconds)
    return {m: {"models": r["models"], "median_seconds": float(np.median(r["seconds"]))} for m, r in rows.items()}
