"""The aggregate engine: two layers, the second averaging at the readout what a first layer local in
blocks of positions computed, on a task whose answer is a function of a sum of features of those
blocks.  Equality (Bhattamishra et al. 2024, arXiv:2406.09347, Theorem 6, Appendix F.2) and
disjointness and sparse thresholds (Theorem 13, Appendix F.3) are built so; every input is decided
at once, at sizes no enumeration or solver reaches.

The argument, for one case (a box of token domains of one length L), in fixed point:

1. *Blocks.*  At query position i, a key j whose exp(s_j - M) code is 0 on every input of the box
   (its largest logit minus the largest of the keys' smallest logits at most T: `locality`'s certificate,
   for any set of keys rather than a window) adds exactly 0 to i's output.  The first layer's output
   at i is then a function of the tokens at G(i) = {i} and the keys that may weigh, less the
   positions the box fixes.  Positions whose G meet are joined into blocks (equality: the pairs
   {i, i + N/2}); position i's output belongs to the block of G(i) (to none when G(i) is empty).
2. *An average.*  Every head of the second layer has, at the readout position, one logit for every
   key (its query map is 0, or its key map is, so the keys are its bias): every key gets the one
   weight a, and the head's output is the saturated rounding of an exact sum over the positions of
   a term of each position's first-layer output (`Fixed.terms`; exact sums do not depend on the
   order).  The terms of a block are a function of the block's tokens.
3. *The answer* is answer(base + a sum of features) (`tasks.base.FeatureSum`); the positions of a
   feature are joined into one block too.

So the model's output is a function of (the sum of the terms, the tokens of the readout position's
block) and the answer a function of the sum of the features.  The engine enumerates every block's
token assignments and adds the blocks one after another, keeping the reachable states (sum of terms,
sum of features, assignment of the readout's block) and one input that reaches each (a dynamic
program).  The inputs kept for the last states are evaluated on the evaluator: every input of the
case has the output and the answer of one of them, so all are right iff these are, a failing one is
a counterexample, and the smallest margin among them is the case's.  A case with a failure is not
counted as covered (its other failing inputs are not listed), and the run ends there.

It takes fixed-point codes with overflow = saturate (under error, a saturation in a term that the
state forgets would still count), softmax layers, a readout at the last position, no model BOS, and
cases without a validity condition.  A block of more than MAX_ASSIGNMENTS assignments, or more than
MAX_STATES states, is refused (`TooLarge`: auto then takes the next engine).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Optional, cast

import numpy as np

from ..arithmetic import Fixed
from ..evaluator import Evaluator, _Layer0Tables
from ..model import Model
from ..support.budget import TimedOut, TooLarge
from ..support.errors import InternalError
from ..tasks import Case
from ..tasks.base import FeatureSum, case_splits, membership
from ..tasks.product import product_rows
from ..verdicts import Status
from .base import EngineResult, Found, Problem, RunOptions, Tick, last_position_codes

MAX_ASSIGNMENTS = 1 << 12  # token assignments of one block
MAX_STATES = 1 << 20  # reachable states after a block (rows of the dynamic program)
QUERY_CHUNK = 256  # query positions whose logit slab is compared at once
CHECKED = 8  # witnesses also evaluated from their tokens alone


@dataclass
class Blocks:
    """A case's positions in blocks: what the first layer reads together."""

    positions: list[np.ndarray]  # per block, its positions
    assignments: list[np.ndarray]  # per block, (count, len(positions)) every assignment of its tokens
    owner: np.ndarray  # (L,) the block of position i's output (-1: a constant of the box)
    last: int  # the block of the readout position's output (-1: none)


class Aggregate:
    name = "aggregate"
    symbolic = True  # PROVED is an argument over blocks, not an evaluation of every input

    def unsupported(self, problem: Problem, opts: RunOptions) -> Optional[str]:
        model, task = problem.model, problem.task
        why = last_position_codes(problem, opts, "aggregate", "a saturation in a term the sums forget")
        if why is not None:
            return why
        if len(cast(Model, model).layers) != 2:
            return "it decides two softmax layers, the second averaging the first at the readout"
        why = _not_average(cast(Model, model))
        if why is not None:
            return why
        if getattr(task, "feature_sum", None) is None or task.cases is None:
            return f"task {task.name} does not give its answer as a sum of features"
        if any(case.valid is not None for case in case_splits(task)):
            return f"task {task.name} has inputs that are not every member of its boxes"
        return None

    def run(self, problem: Problem, opts: RunOptions) -> EngineResult:
        t0 = time.monotonic()
        task = problem.task
        ev = Evaluator(cast(Model, problem.model), problem.arith)
        if ev.tables is None or ev.tables.logits is None:
            raise TooLarge("the first layer's logit table does not fit")
        features: FeatureSum = cast(Any, task).feature_sum()  # `unsupported` saw it
        result = EngineResult(Status.COMPLETE, 0, [])
        cases = list(case_splits(task))
        stats = {"blocks": 0, "largest_block": 0, "states": 0}
        try:
            for n, case in enumerate(cases):
                if opts.progress:
                    opts.progress(Tick(result.covered, task.total, n, len(cases), case.name))
                found, margin, index, blocks, states = _decide(ev, task, case, features, opts)
                if result.min_margin is None or margin < result.min_margin:
                    result.min_margin, result.tightest = margin, index
                stats["blocks"] = max(stats["blocks"], len(blocks.positions))
                stats["largest_block"] = max([stats["largest_block"]] + [len(p) for p in blocks.positions])
                stats["states"] += states
                if found:  # the case's other failures are not listed: it is not covered, and the run ends
                    result.found = sorted(found, key=lambda f: f.index)[:opts.max_counterexamples]
                    break
                result.covered += case.count
        except TimedOut:
            result.status = Status.TIMEOUT
        result.stats = {**stats, "seconds": round(time.monotonic() - t0, 3)}
        return result


def _not_average(model: Model) -> Optional[str]:
    """Why some head of the second layer may give the keys different logits at the readout, or None.
    Zero weights quantize to zero codes, so the unquantized model decides it."""
    for hi, head in enumerate(model.layers[1].heads):
        if not uniform(head):
            return (f"its second layer's head {hi} has a query and keys that read the residual stream (the engine "
                    f"takes a second layer whose logits are the same for every key)")
    return None


def uniform(head) -> bool:
    """The head gives every key the same logit at every query: its query map is 0 (weights and
    bias), or its key map reads nothing (the keys are its bias).  Zero weights quantize to zero
    codes, so the unquantized head decides it."""
    zero_query = not np.any(head.W_Q) and (head.b_Q is None or not np.any(head.b_Q))
    return zero_query or not np.any(head.W_K)


def _decide(ev: Evaluator, task, case: Case, features: FeatureSum,
            opts: RunOptions) -> tuple[list[Found], float, int, Blocks, int]:
    """One case: (failures, smallest margin, its input's index, the blocks, states evaluated)."""
    domains = [np.asarray(d) for d in case.domains]
    blocks = _blocks(ev, domains, features, opts)
    X1, terms = _terms(ev, domains, blocks)  # per block (count, K); last: the constant positions'
    feats, base = _features(features, domains, blocks)
    last = blocks.last
    # the readout's block first: its assignment stays in the state (it is read beside the sums)
    if last >= 0:
        key, feat, first = terms[last] + terms[-1], feats[last] + base, np.arange(len(terms[last]))
    else:
        key, feat, first = terms[-1][:1], np.array([base]), np.zeros(1, np.int64)
    steps: list[tuple[int, np.ndarray, np.ndarray]] = []  # (block, parent state, its assignment)
    for b in range(len(blocks.positions)):
        if b == last:
            continue
        opts.deadline.check()
        effects, pick = np.unique(np.column_stack([terms[b], feats[b]]), axis=0, return_index=True)
        n = len(key) * len(effects)
        if n > MAX_STATES:
            raise TooLarge(f"more than {MAX_STATES:,} states of the sums at block {b} of {len(blocks.positions)}")
        cand = np.column_stack([(key[:, None, :] + effects[None, :, :-1]).reshape(n, -1),
                                (feat[:, None] + effects[None, :, -1]).reshape(n),
                                np.repeat(first, len(effects))])
        cand, keep = np.unique(cand, axis=0, return_index=True)
        steps.append((b, keep // len(effects), pick[keep % len(effects)]))
        key, feat, first = cand[:, :-2], cand[:, -2], cand[:, -1]
    tokens, row_of = _witnesses(domains, blocks, steps, first)
    answers, valid = task.evaluate(tokens)
    if not valid.all() or not np.array_equal(answers, features.answer(feat)):
        raise InternalError(f"task {task.name}'s feature sum disagrees with its ground truth in case {case.name}")
    found: list[Found] = []
    margin, tightest = np.inf, 0
    size = ev.batch_size(tokens.shape[1])
    at = np.arange(tokens.shape[1])
    for a in range(0, len(tokens), size):
        opts.deadline.check()
        rows = tokens[a:a + size]
        composed = X1[row_of[a:a + size], at]  # the first layer's output from its blocks'
        if a == 0:
            _same(ev, rows[:CHECKED], composed[:CHECKED], case)
        judged = ev.judge(ev.forward(rows, first=composed), answers[a:a + size])
        found += [Found.of(judged, int(j), task.index_of(rows[j]), rows[j]) for j in np.flatnonzero(judged.failed)]
        j = int(np.argmin(judged.margin))
        if judged.margin[j] < margin:
            margin, tightest = float(judged.margin[j]), task.index_of(rows[j])
    return found, margin, tightest, blocks, len(tokens)


def _same(ev: Evaluator, tokens: np.ndarray, composed: np.ndarray, case: Case) -> None:
    """The first layer's output on the first witnesses, evaluated from their tokens, is the one
    composed from their blocks'."""
    if not np.array_equal(_first_layer_output(ev, tokens), composed):
        raise InternalError(f"the first layer's output composed from its blocks differs from the evaluator's in "
                            f"case {case.name}: the blocks are wrong")


def _blocks(ev: Evaluator, domains: list[np.ndarray], features: FeatureSum, opts: RunOptions) -> Blocks:
    """The positions the first layer reads together on the box (module docstring, 1), joined also
    where a feature of the task reads them together."""
    L = len(domains)
    free = np.array([len(d) > 1 for d in domains])
    may = _may_weigh(ev, domains, opts) | np.eye(L, dtype=bool)
    parent = np.arange(L)

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    groups = [np.flatnonzero(may[i] & free) for i in range(L)]
    read = [np.array([i for i in positions if free[i]], dtype=np.int64) for positions, _ in features.features]
    for g in groups + read:
        for j in g[1:]:
            parent[root(int(j))] = root(int(g[0]))
    roots = sorted({root(int(i)) for i in np.flatnonzero(free)})
    number = {r: b for b, r in enumerate(roots)}
    of = np.array([number[root(i)] if free[i] else -1 for i in range(L)])
    positions = [np.flatnonzero(of == b) for b in range(len(roots))]
    assignments = []
    for P in positions:
        count = int(np.prod([len(domains[i]) for i in P], dtype=object))
        if count > MAX_ASSIGNMENTS:
            raise TooLarge(f"the first layer reads {len(P)} positions together ({count:,} token assignments; the "
                           f"engine takes at most {MAX_ASSIGNMENTS:,})")
        assignments.append(product_rows([domains[i] for i in P]))
    owner = np.array([of[g[0]] if len(g) else -1 for g in groups])
    return Blocks(positions, assignments, owner, int(owner[L - 1]))


def _may_weigh(ev: Evaluator, domains: list[np.ndarray], opts: RunOptions) -> np.ndarray:
    """(L, L): key j may have a nonzero weight at query i on some input of the box (some head of the
    first layer); the others' exp codes are 0 (`locality`'s certificate)."""
    L, V = len(domains), len(ev.model.vocab)
    T = cast(Fixed, ev.arith).zero_exp_bound()
    logits = cast(_Layer0Tables, ev.tables).logits or []
    allowed = np.tril(np.ones((L, L), bool)) if ev.q.layers[0].causal else np.ones((L, L), bool)
    if T is None:  # no exp code is 0: every key may weigh
        return allowed
    inside = membership(domains, V)
    rows = np.arange(L)[:, None] * V + np.arange(V)[None, :]  # (position, token) rows of the tables
    may = np.zeros((L, L), bool)
    for table in logits:
        k = table.k_row[rows]
        for a in range(0, L, QUERY_CHUNK):
            opts.deadline.check()
            qi = np.arange(a, min(L, a + QUERY_CHUNK))
            S = table.values[table.q_row[rows[qi]][:, :, None, None], k[None, None, :, :]]  # (q, q token, key, k token)
            smax = np.where(inside[None, None], S, np.iinfo(np.int64).min).max(axis=3)
            smin = np.where(inside[None, None], S, np.iinfo(np.int64).max).min(axis=3)
            low = np.where(allowed[qi][:, None, :], smin, np.iinfo(np.int64).min).max(axis=2)  # M is at least this
            weigh = (smax - low[:, :, None] > T) & inside[qi][:, :, None]  # for some query token of the box
            may[qi] |= weigh.any(axis=1) & allowed[qi]
    return may


def _terms(ev: Evaluator, domains: list[np.ndarray], blocks: Blocks) -> tuple[np.ndarray, list[np.ndarray]]:
    """The first layer's output on inputs where every block takes its r-th assignment (r beyond a
    block's count: r modulo it), (reps, L, d); and per block, for every assignment, the sum of its
    positions' terms of the second layer's head outputs at the readout (module docstring, 2):
    (count, K), and last, the constant positions' (1, K)."""
    arith = cast(Fixed, ev.arith)
    L = len(domains)
    reps = max([len(a) for a in blocks.assignments] + [1])
    tokens = _firsts(domains, reps)
    for P, A in zip(blocks.positions, blocks.assignments):
        tokens[:, P] = A[np.arange(reps) % len(A)]
    X1 = _first_layer_output(ev, tokens)  # position i's output depends on its block's assignment only
    ctx = arith.context((reps, L))
    layer = ev.q.layers[1]
    a = arith.softmax(np.zeros((1, 1, L), np.int64), None, arith.context((1, 1)), "L1.attn")[0, 0]  # one logit
    per_head = [arith.terms(a[None, :, None] * arith.lin(h.W_V, X1, h.b_V, ctx, "L1.v"), ctx, "L1.out")
                for h in layer.heads]
    terms = np.concatenate(per_head, axis=-1)  # (reps, L, K)
    out = [terms[:len(A)][:, blocks.owner == b].sum(axis=1) for b, A in enumerate(blocks.assignments)]
    return X1, out + [terms[:1][:, blocks.owner == -1].sum(axis=1)]


def _firsts(domains: list[np.ndarray], n: int) -> np.ndarray:
    """n rows of every position's first token (what a position the box fixes holds)."""
    return np.tile(np.array([d[0] for d in domains], dtype=np.int64), (n, 1))


def _first_layer_output(ev: Evaluator, tokens: np.ndarray) -> np.ndarray:
    """The first layer's output at every position of a batch, as the evaluator's forward pass
    computes it (on its layer-0 tables)."""
    seen: dict[str, np.ndarray] = {}

    def rec(name: str, value: np.ndarray) -> None:
        if name.startswith("L0."):
            seen[name] = value

    ev.forward(tokens, rec=rec)
    return seen["L0.out" if ev.q.layers[0].has_ffn else "L0.resid"]


def _features(features: FeatureSum, domains: list[np.ndarray], blocks: Blocks) -> tuple[list[np.ndarray], int]:
    """Per block, for every assignment, the sum of its features; and the base plus the features of
    positions the box fixes."""
    of = np.full(len(domains), -1)
    for b, P in enumerate(blocks.positions):
        of[P] = b
    sums = [np.zeros(len(A), np.int64) for A in blocks.assignments]
    base = features.base
    for positions, table in features.features:
        owners = {int(of[i]) for i in positions} - {-1}
        if len(owners) > 1:
            raise InternalError(f"a feature of positions {positions} spans {len(owners)} blocks, which join them")
        if not owners:
            base += int(table[tuple(int(domains[i][0]) for i in positions)])
            continue
        b = owners.pop()
        at = {int(p): c for c, p in enumerate(blocks.positions[b])}
        cols = [blocks.assignments[b][:, at[i]] if i in at else np.full(len(sums[b]), domains[i][0]) for i in positions]
        sums[b] += table[tuple(cols)]
    return sums, base


def _witnesses(domains: list[np.ndarray], blocks: Blocks, steps: list[tuple[int, np.ndarray, np.ndarray]],
               first: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One input per final state, back along the steps: its tokens (n, L), and at every position
    the row of `_terms`'s first-layer output that holds its output (the assignment of its block)."""
    n = len(first)
    tokens = _firsts(domains, n)
    chosen = np.zeros((n, len(blocks.positions) + 1), np.int64)  # per block; last column: no block
    if blocks.last >= 0:  # the state keeps it
        chosen[:, blocks.last] = first
    state = np.arange(n)
    for b, parent, choice in reversed(steps):
        chosen[:, b] = choice[state]
        state = parent[state]
    for b, P in enumerate(blocks.positions):
        tokens[:, P] = blocks.assignments[b][chosen[:, b]]
    return tokens, chosen[:, blocks.owner]
