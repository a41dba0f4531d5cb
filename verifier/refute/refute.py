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
* ``protocol`` (Bhattamishra et al. 2024, arXiv:2406.09347, Theorems 2 and 4, Appendix D): a
  fooling set of the task (`fooling`: the papers' reductions, or a greedy one for a user task) and
  a summary of Alice's part that determines the model's answer at Bob's position (`protocol`): the
  state codes after her prefix for a recurrent model; per head, the multiset of (logit code, value
  codes, overflow) over her positions under Bob's query for a 1-layer transformer.  Two Alice parts
  with one summary and a Bob part that tells them apart give two inputs the model answers alike
  there, though their answers differ.  A recurrent model on a task given by a DFA (Dyck-(2,2)):
  random prefixes hashed by their states, told apart by an automaton suffix.
* ``search``: the engines over the dataset (`api.run`): `engine` (auto by default) over the
  range `start`..`stop` (the whole dataset by default; a range of a dataset too large to
  enumerate is enumerated).

``auto`` tries the structured methods that apply, then the search.  The deadline covers them all;
a method it stops reports nothing (its finding says so).
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from ..arithmetic import format_text
from ..engines import Found, Problem
from ..evaluator import make_evaluator, read_from, trace
from ..model import Head, Layer, Model, Readout, Recurrent
from ..result import EXIT_CODES, Counterexample
from ..runs.api import answer_name, describe_problem, replay, run
from ..support.budget import Deadline, TimedOut
from ..support.errors import InputError, InternalError
from ..support.sizes import model_cost
from ..tasks.combinatorics import falling
from ..verdicts import Verdict
from . import fooling, protocol
from .certificates import SCOPE_NOTE, certificates, count_identity_holds, random_seeds
from .protocol import summaries

METHODS = ("auto", "dependent", "protocol", "search")


@dataclass
class Refutation:
    verdict: Verdict  # refuted, proved (by the search) or unknown
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
    residual_rows: Optional[list[str]] = None  # the model's names of its residual rows, for the dumps

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

    def inputs_json(self) -> None:
        """No coverage: the counterexamples are forced by an argument, not found by covering inputs."""
        return None

    def to_json(self) -> dict:
        return {"verdict": self.verdict, "method": self.method, "task": self.task, "model": self.model,
                "arithmetic": self.arithmetic, "argument": self.argument, "certificate": self.certificate,
                "bound": self.bound, "findings": self.findings, "stats": self.stats, "seconds": round(self.seconds, 3),
                "counterexamples": [c.to_json() for c in self.counterexamples], "provenance": self.provenance}

    def summary(self) -> str:
        a = self.arithmetic
        lines = [f"{self.verdict.upper()} by {self.method}: {self.model.get('construction', 'user model')} on "
                 f"{self.task['name']} "
                 + ", ".join(f"{k}={v}" for k, v in self.task.items() if k not in ("name", "inputs")),
                 "  arithmetic  " + (f"FX(p={a['p']}, f={a['f']}) rounding={a['rounding']} overflow={a['overflow']} "
                                     f"accumulate={a['accumulate']}" if "p" in a else format_text(a))]
        lines += [f"  {c.line()}" for c in self.counterexamples]
        lines += [f"  argument    {line}" if i == 0 else f"              {line}"
                  for i, line in enumerate(self.argument)]
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


def protocol_scope(problem: Problem) -> Optional[str]:
    why = protocol.scope(problem.model, problem.arith)
    if why is not None:
        return why
    task = getattr(problem.task, "inner", problem.task)
    if task.name not in fooling.BUILDERS and task.name not in ("reference", "dataset"):
        return (f"no fooling set is defined for {task.name} (tasks with one: {', '.join(fooling.BUILDERS)}, and "
                f"user tasks)")
    return None


# -- evaluation and replay ---------------------------------------------------------------------
class _Model:
    """The model set in the run's arithmetic once: the batched evaluator, and the generic path for
    replays and traces."""

    def __init__(self, problem: Problem):
        self.problem = problem
        self.fast = make_evaluator(problem.model, problem.arith)
        self.generic = problem.generic()
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

    def answered(self, tokens: np.ndarray, position: int) -> list[str]:
        """The model's answer at `position` (of the input) on each input, by name; a tie names its classes."""
        out = self.fast.forward(tokens)
        col = position - read_from(self.problem.model)
        pred, tie, scores = (out.pred, out.tie, out.scores) if out.pred.ndim == 1 else \
            (out.pred[:, col], out.tie[:, col], out.scores[:, col])
        name = lambda c: answer_name(self.problem, int(c))  # noqa: E731
        return [f"tie({', '.join(map(name, np.flatnonzero(s == s.max())))})" if t else name(p)
                for p, t, s in zip(pred, tie, scores)]

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
MAX_SCANNED = 4096  # Bob parts tried for a collision that its separator does not tell apart under its query


def theorem4_bits(problem: Problem) -> dict:
    """The bits of Theorem 4's protocol for this model: as printed, and as its steps add up (p: the
    bits of a code of the format)."""
    layer, p, N = problem.model.layers[0], problem.arith.bits, problem.task.max_len
    H, m, mv, lg = len(layer.heads), layer.heads[0].W_Q.shape[0], layer.heads[0].W_V.shape[0], math.ceil(math.log2(N))
    return {"printed": 3 * m * (p + lg) * H, "steps": H * (2 * p + 2 * (p + lg) + mv * (2 * p + lg))}


def _collisions(keys: np.ndarray, limit: int = 64) -> list[tuple[int, int]]:
    """Pairs of rows with equal keys: each group's first row with up to two others."""
    _, first, inverse = np.unique(keys, axis=0, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    pairs = []
    for j in np.flatnonzero(first[inverse] != np.arange(len(keys))):
        pairs.append((int(first[inverse[j]]), int(j)))
        if len(pairs) >= limit:
            break
    return pairs


def _told_apart(task, fs: fooling.FoolingSet, i: int, j: int, bobs: np.ndarray) -> Optional[int]:
    """A Bob part among `bobs` whose answer at the fooling set's position differs after A[i] and A[j]."""
    for lo in range(0, len(bobs), 512):
        g = bobs[lo:lo + 512]
        ans, valid = fooling.answers_at(task, fs.inputs(np.concatenate([np.full(len(g), i), np.full(len(g), j)]),
                                                        np.concatenate([g, g])), fs.position)
        x, y = np.split(np.where(valid, ans, -1), 2)
        hit = np.flatnonzero((x >= 0) & (y >= 0) & (x != y))
        if len(hit):
            return int(g[hit[0]])
    return None


STRING_TASKS = ("induction_heads", "dyck22")  # every string after the start token is an input
ROUNDS = (256, 1024, 4096, 16384, 1 << 16)  # Alice parts summarized in each round: the birthday bound makes a collision
# likely long before every part, and a recurrent model's states or a transformer's messages cost a pass each


def refute_protocol(model: _Model, out: Refutation, max_counterexamples: int, seed: int = 0,
                    members: int = fooling.MAX_MEMBERS) -> bool:
    """Collide what the model's answer at Bob's position needs from Alice's part, on the task's
    fooling set: the state codes after her prefix (recurrent, Theorem 2); for a 1-layer
    transformer, per head the multiset of her (logit, value) codes under the query of Bob's
    position (whatever else Bob holds), then Alice's messages in Theorem 4's protocol once one Bob
    part has spoken.  Two Alice parts with one summary and a Bob part that tells them apart give two
    inputs the model answers alike at that position, though their answers differ."""
    problem, t0 = model.problem, time.monotonic()
    task = problem.task
    recurrent = isinstance(problem.model, Recurrent)
    if recurrent and task.dfa is not None:
        return refute_states_strings(model, out, max_counterexamples, seed, t0)
    fs = fooling.build(task, members, seed)
    if recurrent and not fs.contiguous:
        if task.name in STRING_TASKS:
            return refute_states_strings(model, out, max_counterexamples, seed, t0)
        raise InputError(f"the fooling set of {task.name} splits the positions without giving Alice a prefix; a "
                         f"recurrent model's state summarizes a prefix")
    order = np.random.default_rng(seed).permutation(len(fs.A))
    distinct: dict[str, int] = {}
    found = None
    for n in sorted({min(r, len(fs.A)) for r in ROUNDS}):
        distinct.clear()
        found = _summary_collision(model, fs, order[:n], distinct)
        if found is None and not recurrent:
            found = _message_collision(model, fs, order[:n], distinct)
        if found is not None:
            break
    out.stats["protocol"] = {"fooling_set": fs.size, "alice_parts": n, "distinct_summaries": dict(distinct),
                             "seconds": round(time.monotonic() - t0, 3)}
    if found is None:
        out.findings.append(f"no collision on the fooling set ({fs.source}) among {n:,} Alice parts: " +
                            ", ".join(f"{d:,} distinct {what}" for what, d in distinct.items()))
        return False
    i, j, g, lines = found
    rows = fs.inputs(np.array([i, j]), np.array([g, g]))
    answers = fooling.answers_at(task, rows, fs.position)[0]
    produced = model.answered(rows, fs.position)
    if produced[0] != produced[1]:
        raise InternalError(f"the protocol says the model answers {task.render(rows[0])} and {task.render(rows[1])} "
                            f"alike at position {fs.position}; the evaluator answers {produced[0]} and {produced[1]}")
    out.counterexamples = model.counterexamples(_wrong_first(task, rows, answers, produced[0]), max_counterexamples)
    out.argument = [fs.describe()] + lines + [
        f"two Alice parts with one summary, completed by a Bob part that tells them apart: {task.render(rows[0])} "
        f"and {task.render(rows[1])}; the model's output at position {fs.position} is a function of the summary and "
        f"Bob's part (Bhattamishra et al. 2024, {'Theorem 2' if recurrent else 'Theorem 4, Appendix D'}), so it "
        f"answers both alike there, though their answers differ",
        f"at position {fs.position} the task answers {task.answer_name(int(answers[0]))} and "
        f"{task.answer_name(int(answers[1]))}; the model answers {produced[0]} on both"]
    if not recurrent:
        bits = theorem4_bits(problem)
        out.argument.append(f"Theorem 4's protocol for this model sends {bits['printed']} bits as printed, "
                            f"{bits['steps']} as its steps add up; the fooling set needs log2 {fs.size:,} = "
                            f"{math.log2(fs.size):.1f}")
    return True


def _wrong_first(task, rows: np.ndarray, answers: np.ndarray, produced: str) -> np.ndarray:
    """The two inputs, the one the model gets wrong at the position argued about first."""
    return rows[::-1] if task.answer_name(int(answers[0])) == produced else rows


def _summary_collision(model: _Model, fs: fooling.FoolingSet, a: np.ndarray, distinct: dict) -> Optional[tuple]:
    """Two Alice parts among A[a] with one summary that holds whatever Bob holds (state codes; the
    multisets of codes under one query), and a Bob part that tells them apart: (i, j, g, lines)."""
    task, ev = model.problem.task, model.fast
    recurrent = isinstance(model.problem.model, Recurrent)
    col = int(np.flatnonzero(fs.bob == fs.position)[0])
    queries = [None] if recurrent else [int(x) for x in np.unique(fs.B[:, col])]
    what = "state codes after Alice's prefix" if recurrent else \
        "multisets of (logit, value) codes per head under one query"
    for token in queries:
        keys = protocol.states(ev, fs.A[a]) if recurrent else summaries(ev, fs.alice, fs.A[a], fs.position, token)
        d = len(np.unique(keys, axis=0))
        distinct["state codes" if recurrent else f"multisets under the query {task.vocab[token]}"] = d
        bobs = np.arange(len(fs.B)) if recurrent else np.flatnonzero(fs.B[:, col] == token)
        for x, y in _collisions(keys):
            i, j = int(a[x]), int(a[y])
            hint = [fs.separator(i, j)] if fs.separator is not None else []
            hint += [i, j] if fs.two_way else []
            hint = [g for g in hint if recurrent or fs.B[g, col] == token]  # under this query only
            g = _told_apart(task, fs, i, j, np.array(hint, dtype=np.int64))
            if g is None:
                g = _told_apart(task, fs, i, j, bobs[:MAX_SCANNED])
            if g is not None:
                where = "" if recurrent else f" under the query {task.vocab[token]} at position {fs.position}"
                return i, j, g, [f"summary: {what}, whatever else Bob holds; {len(a):,} Alice parts have {d:,} "
                                 f"distinct summaries{where}"]
    return None


MESSAGE_BOBS = 64  # Bob parts under which Alice's messages are computed


def _message_collision(model: _Model, fs: fooling.FoolingSet, a: np.ndarray, distinct: dict) -> Optional[tuple]:
    """Alice's messages in Theorem 4's protocol once Bob has spoken (`protocol.alice_messages`: per
    head her max, normalizer and partial sums), for one Bob part g: Bob's output is a function of
    his part and these, so two Alice parts among A[a] with equal messages under g and different
    answers at the position give one wrong answer: (i, j, g, lines)."""
    task, ev = model.problem.task, model.fast
    what = ("Alice's messages (per head: max, normalizer, partial sums)"
            if model.problem.model.layers[0].attention == "softmax" else "Alice's messages (per head: partial sums)")
    for g in range(min(len(fs.B), MESSAGE_BOBS)):
        rows = fs.inputs(a, np.full(len(a), g))
        ans, valid = fooling.answers_at(task, rows, fs.position)
        keep = np.flatnonzero(valid)
        keys = protocol.alice_messages(ev, rows[keep], fs.alice, fs.position)
        _, first, group = np.unique(keys, axis=0, return_index=True, return_inverse=True)
        group = group.reshape(-1)
        label = "message tuples under one Bob part (the fewest)"
        distinct[label] = min(len(first), distinct.get(label, len(first)))
        other = np.flatnonzero(ans[keep] != ans[keep][first[group]])
        if len(other):
            i, j = int(a[keep[first[group[other[0]]]]]), int(a[keep[other[0]]])
            return i, j, g, [f"summary: {what} in Theorem 4's protocol once Bob (holding {task.render(fs.B[g])} at "
                             f"his positions) has sent his query, max and normalizer; {len(keep):,} Alice parts have "
                             f"{len(first):,} distinct message tuples under this Bob part"]
    return None


def refute_states_strings(model: _Model, out: Refutation, max_counterexamples: int, seed: int, t0: float,
                          prefixes: int = 1 << 12) -> bool:
    """A recurrent model on a task over every string after the start token (Dyck-(2,2), induction
    heads): the prefixes of every length of random strings, hashed by their state codes; two with
    one state and a suffix after which the task answers them differently at the end give two
    inputs the model answers alike there.  With an automaton (Dyck-(2,2)) the prefixes' automaton states must
    differ and the suffix is the shortest after which it accepts one only (Myhill-Nerode); without
    one, short suffixes are tried on the task's own answers."""
    problem = model.problem
    task, ev = problem.task, model.fast
    dfa = task.dfa
    rng = np.random.default_rng(seed)
    A = task.bos  # the symbols come before the start token
    found, n = None, 0
    words = rng.integers(0, A, (prefixes, task.N - 1))  # their prefixes of every length, in one pass
    q = np.zeros(prefixes, dtype=np.int64)
    steps = protocol.state_steps(ev, np.concatenate([np.full((prefixes, 1), task.bos), words], axis=1))
    next(steps)  # the start token alone
    for n, keys in enumerate(steps, start=1):
        if dfa is not None:
            q = dfa[q, words[:, n - 1]]
        for i, j in _collisions(keys, limit=1 << 12 if dfa is not None else 16):
            u, v = words[i, :n], words[j, :n]
            if (u == v).all() or (dfa is not None and q[i] == q[j]):
                continue
            suffix = (_distinguishing_suffix(dfa, np.array(task.accepting), int(q[i]), int(q[j]), task.N - n)
                      if dfa is not None else _separating_suffix(task, u, v, task.N - n, rng))
            if suffix is not None:
                found = (u, v, suffix, int(q[i]), int(q[j]))
                break
        if found:
            break
    out.stats["protocol"] = {"strings": prefixes, "prefix_lengths": n, "seconds": round(time.monotonic() - t0, 3)}
    hashed = f"the prefixes of lengths 1..{n} of {prefixes:,} random strings, hashed by their state codes"
    if not found:
        out.findings.append(f"no collision: {hashed} coincide only where " +
                            ("the automaton's states do (or no suffix within N tells them apart)" if dfa is not None
                             else "no short suffix tells them apart"))
        return False
    u, v, w, qu, qv = found
    rows = np.array([np.concatenate([[task.bos], u, w]), np.concatenate([[task.bos], v, w])])
    last = rows.shape[1] - 1
    answers, produced = fooling.answers_at(task, rows, last)[0], model.answered(rows, last)
    if produced[0] != produced[1]:
        raise InternalError(f"equal states after {task.render(rows[0][:len(u) + 1])} and "
                            f"{task.render(rows[1][:len(v) + 1])}, yet the evaluator answers {produced[0]} and "
                            f"{produced[1]} after the same suffix")
    out.counterexamples = model.counterexamples(_wrong_first(task, rows, answers, produced[0]), max_counterexamples)
    why = (f"automaton states {qu} and {qv}; the suffix {task.render(w) or '(empty)'} is the shortest after which "
           f"the automaton accepts one and not the other" if dfa is not None else
           f"the suffix {task.render(w)} gives them different answers at the end")
    out.argument = [f"{hashed}: {task.render(rows[0][:len(u) + 1])} "
                    f"and {task.render(rows[1][:len(v) + 1])} have the same state codes but {why}",
                    f"every later output of the model is a function of the state and the suffix (Bhattamishra et al. "
                    f"2024, Theorem 2), so it answers both alike at the end: at position {last} the task answers "
                    f"{task.answer_name(int(answers[0]))} and {task.answer_name(int(answers[1]))}; the model answers "
                    f"{produced[0]} on both"]
    return True


def _separating_suffix(task, u: np.ndarray, v: np.ndarray, room: int, rng: np.random.Generator,
                       tries: int = 256) -> Optional[np.ndarray]:
    """A suffix of at most `room` symbols after which the task's answers at the end differ for
    prefixes u and v: every suffix of each length, or `tries` random ones."""
    A = task.bos
    for r in range(1, room + 1):
        w = np.indices((A,) * r).reshape(r, -1).T if A ** r <= tries else rng.integers(0, A, (tries, r))
        rows = np.concatenate([np.concatenate([np.tile(np.concatenate([[task.bos], x]), (len(w), 1)), w], axis=1)
                               for x in (u, v)])
        ans = np.split(fooling.answers_at(task, rows, rows.shape[1] - 1)[0], 2)
        hit = np.flatnonzero(ans[0] != ans[1])
        if len(hit):
            return w[hit[0]]
    return None


def _distinguishing_suffix(dfa: np.ndarray, accepting: np.ndarray, a: int, b: int, room: int) -> Optional[np.ndarray]:
    """The shortest word (at most `room` symbols) after which exactly one of states a, b accepts."""
    from collections import deque
    acc = np.isin(np.arange(len(dfa)), accepting)
    seen: dict[tuple[int, int], list] = {(a, b): []}
    queue = deque([(a, b)])
    while queue:
        x, y = queue.popleft()
        word = seen[(x, y)]
        if acc[x] != acc[y]:
            return np.array(word, dtype=np.int64)
        if len(word) == room:
            continue
        for s in range(dfa.shape[1]):
            nxt = (int(dfa[x, s]), int(dfa[y, s]))
            if nxt not in seen:
                seen[nxt] = word + [s]
                queue.append(nxt)
    return None


# -- the driver ---------------------------------------------------------------------------------
def refute(problem: Problem, method: str = "auto", *, seed: int = 0, timeout: Optional[float] = None,
           max_counterexamples: int = 1, certificates_budget: int = 50,
           deadline: Optional[Deadline] = None, engine: str = "auto", start: int = 0,
           stop: Optional[int] = None) -> Refutation:
    """Find inputs the model must get wrong: `method` one of METHODS; `engine`, `start` and `stop`
    are the search's (`api.run`)."""
    if method not in METHODS:
        raise InputError(f"unknown method {method!r}; methods: {', '.join(METHODS)}")
    if method not in ("auto", "search") and (engine, start, stop) != ("auto", 0, None):
        raise InputError(f"--engine, --start and --stop are the search's; --method {method} does not search")
    deadline = deadline if deadline is not None else Deadline(timeout)
    t0 = time.monotonic()
    out = Refutation(Verdict.UNKNOWN, method, problem.task.describe(), _describe(problem.model),
                     problem.arith.describe(), [], provenance=describe_problem(problem)[2],
                     residual_rows=problem.model.residual_rows)
    rng = random.Random(seed)
    order = ["dependent", "protocol", "search"] if method == "auto" else [method]
    try:
        with deadline.enforced():
            model = _Model(problem)
            _methods(model, out, order, method, rng, seed, deadline, max_counterexamples, certificates_budget,
                     dict(engine=engine, start=start, stop=stop))
    except TimedOut:
        out.counterexamples, out.argument, out.certificate = [], [], None  # a method cut short proves nothing
        out.verdict = Verdict.UNKNOWN
        out.findings.append(f"timeout after {deadline.seconds:g} s during {out.method}")
    if out.counterexamples:
        out.verdict = Verdict.REFUTED
        out.quantized = model.generic.q.named_arrays()
    out.seconds = time.monotonic() - t0
    return out


def _methods(model: _Model, out: Refutation, order: list[str], method: str, rng: random.Random, seed: int,
             deadline: Deadline, max_counterexamples: int, certificates_budget: int, search: dict) -> None:
    """Try the methods in order until one finds a counterexample; fill `out`.  `search`: the
    search's engine, start and stop."""
    problem = model.problem
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
                if refute_protocol(model, out, max_counterexamples, seed):
                    break
            elif method == m:
                raise InputError(f"--method protocol does not apply: {why}")
            else:
                out.findings.append(f"protocol: {why}")
        else:
            result = run(problem, max_counterexamples=max_counterexamples, deadline=deadline, **search)
            out.counterexamples = result.counterexamples
            out.stats["search"] = {"engine": result.engine, "covered": result.covered, "total": result.total,
                                   "seconds": round(result.seconds, 3)}
            if "auto" in result.engine_stats:
                out.stats["search"]["chosen"] = result.engine_stats["auto"]
            if result.verdict == Verdict.PROVED:
                out.verdict = Verdict.PROVED
            elif result.verdict == Verdict.UNKNOWN:
                out.findings.append(f"search: {result.reason}")


def random_model(task, heads: int, width: int, attention: str, rng: np.random.Generator) -> Model:
    """A random 1-layer model for the task: Gaussian embeddings and weights, `heads` heads of query,
    key and value width `width`, a residual connection (none for one-head softmax, which the
    dependent-set argument covers only without one), a readout of the task's kind, read at every
    position for a task with an answer at every position (induction heads, Dyck-(2,2))."""
    V, n, d = len(task.vocab), task.max_len, 2 * width + 4
    W_O_width = width if attention == "relu" else heads * width
    model_cost(f"a random model of {heads} heads of width {width}", d,
               3 * heads * width + W_O_width + V + n + task.num_classes).admit()  # before a weight is drawn
    heads_ = [Head(*(rng.normal(0, 1, (width, d)) for _ in range(3))) for _ in range(heads)]
    W_O = rng.normal(0, 1, (d, W_O_width))
    residual = not (attention == "softmax" and heads == 1)
    layer = Layer(heads_, W_O, attention=attention, residual=residual, causal=False)
    C = task.num_classes
    return Model(E=rng.normal(0, 1, (V, d)), P=rng.normal(0, 1, (n, d)), P_mask=np.ones(V, bool), layers=[layer],
                 readout=Readout(rng.normal(0, 1, (C, d)), rng.normal(0, 1, C), task.readout,
                                 positions="all" if task.per_position else "last"),
                 vocab=list(task.vocab),
                 info={"construction": f"random ({heads} {attention} head{'s' if heads > 1 else ''}, width {width})"})


def refute_random(task, problem_options: dict, count: int, heads: int, width: int, attention: str,
                  method: str = "auto", seed: int = 0, timeout: Optional[float] = None) -> dict:
    """`refute` over `count` random models of a shape: per method, how often it found a
    counterexample and how long it took (median seconds to the verdict)."""
    from ..arithmetic import ATTENTION_KINDS
    from ..runs.api import build_problem
    if attention not in ATTENTION_KINDS or heads < 1 or width < 1 or count < 1:
        raise InputError(f"--shape needs HEADS,WIDTH,ATTENTION with positive sizes and attention one of "
                         f"{', '.join(ATTENTION_KINDS)}; --random-models a positive count")
    rows: dict[str, dict] = {}
    for i in range(count):
        model = random_model(task, heads, width, attention, np.random.default_rng(seed + i))
        problem = build_problem(task.name, model=model, **problem_options)
        r = refute(problem, method, seed=seed + i, timeout=timeout)
        row = rows.setdefault(r.method if r.verdict == Verdict.REFUTED else "none", {"models": 0, "seconds": []})
        row["models"] += 1
        row["seconds"].append(r.seconds)
    return {m: {"models": r["models"], "median_seconds": float(np.median(r["seconds"]))} for m, r in rows.items()}
