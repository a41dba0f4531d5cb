"""The lookup engine: models whose every layer looks up, at the last position, keys and values that
are tables over (position, token); L-fold function composition (Chen, Peng, Wu 2024,
arXiv:2412.02975, Corollary 1.2) and index lookup (Bhattamishra et al. 2024, arXiv:2406.09347,
Theorem 1) are built so.  It decides composition at sizes no enumeration or solver reaches.

The argument, for one case (a box of token domains of one length L), in fixed point with
overflow = saturate and a readout at the last position:

1. *Tables.*  When each layer's key and value maps read only columns the layers before it leave
   as they are (`layer0.keys_from_tokens`), its keys and values at position j are functions of the
   token at j.  Only the last position's stream is read (by the queries and the readout), so the
   model's output is a function of the last position's stream, carried layer by layer.
2. *Branches.*  A branch fixes some positions to tokens; the others keep the case's domains.  At
   layer l, the query is computed from the branch's stream code, and the logit of every (position,
   token of its domain) from the key tables.  Let M be the largest logit of a fixed position.  If
   every free position's largest logit over its domain is <= M and its exp(s - M) code (the
   softmax's own table and clamp, `Fixed.exp_of`) is 0, then, the table being monotone (checked),
   every token of the domain has code 0 too, and on every completion of the
   branch the softmax's maximum is M, the free positions' weights are R(0 / Z) = 0 and their
   products in the mix are 0: the head's output is the same on every completion, and it is
   computed exactly by the evaluator's own softmax and mix on one of them (the first).  A branch
   that fails is split on the failing free position with the largest logit (one branch per token
   of its domain); the splits partition the branch, so the leaves partition the case.
3. *The answer.*  Before the layers, branches are split until the positions the task's answer
   reads are fixed (the task's `answer_needs`: composition chases z_0 -> z_1 -> ...; or the case's
   `answer_at`), so the answer too is the same on every completion of a leaf.

So every input of a leaf has the leaf's output and answer: all are right iff the leaf's first
completion is, a failing leaf's completions all fail (they are listed, up to max_counterexamples),
and the smallest margin over the leaves is the case's.  The first leaves' streams are checked
against the evaluator run on another of their completions (`_same`), and the leaves are checked
to cover the case.

It refuses float and int8 formats, overflow = error (the saturations of the positions that are not
read would count), a BOS, and tasks whose answer it cannot chase.  Without merging branches, a
case's leaves number the product of the sizes of the blocks looked up; beyond MAX_BRANCHES the run
is refused (`TooLarge`: auto then takes the next engine).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Optional, cast

import numpy as np

from ..arithmetic import Fixed
from ..evaluator import Evaluator, Outputs, _Layer0Tables
from ..layer0 import keys_from_tokens
from ..model import Model
from ..support.budget import TimedOut, TooLarge
from ..support.errors import InternalError
from ..tasks import Case
from ..tasks.base import case_splits
from ..verdicts import Status
from .base import EngineResult, Found, Problem, RunOptions, Tick, last_position_codes

MAX_BRANCHES = 1 << 20  # branches alive at once (each holds its tokens and stream)
CHUNK = 1 << 22  # elements of the largest temporary (branches x candidate rows)
CHECKED = 8  # leaves also evaluated by the evaluator on another completion (`_same`)


@dataclass
class Branches:
    """Partial assignments of one case: the fixed positions' tokens, and at the free positions
    their domain's first token (so each row is also the branch's first completion)."""

    tokens: np.ndarray  # (B, L)
    fixed: np.ndarray  # (B, L) bool
    X: np.ndarray  # (B, d) the last position's stream after the layers so far

    def take(self, rows: np.ndarray) -> "Branches":
        return Branches(self.tokens[rows], self.fixed[rows], self.X[rows])

    @staticmethod
    def join(parts: list["Branches"]) -> "Branches":
        return Branches(*(np.concatenate([getattr(p, a) for p in parts]) for a in ("tokens", "fixed", "X")))


@dataclass
class Domains:
    """A case's domains: padded (L, most tokens), their sizes, and the candidate rows (position,
    token of its domain) sorted by position, with where each position's start."""

    pad: np.ndarray
    size: np.ndarray
    rows: np.ndarray  # (n,) position * V + token
    starts: np.ndarray  # (L,) the first candidate of each position
    at: np.ndarray  # (L * V,) a row's candidate (-1: not in its domain)

    @classmethod
    def of(cls, case: Case, V: int) -> "Domains":
        doms = [np.asarray(d, dtype=np.int64) for d in case.domains]
        size = np.array([len(d) for d in doms])
        pad = np.zeros((len(doms), int(size.max())), np.int64)
        for j, d in enumerate(doms):
            pad[j, :len(d)] = d
        rows = np.concatenate([j * V + d for j, d in enumerate(doms)])
        at = np.full(len(doms) * V, -1)
        at[rows] = np.arange(len(rows))
        return cls(pad, size, rows, np.concatenate([[0], np.cumsum(size)[:-1]]), at)


class Lookup:
    name = "lookup"
    symbolic = True  # PROVED is an argument over branches, not an evaluation of every input

    def unsupported(self, problem: Problem, opts: RunOptions) -> Optional[str]:
        task = problem.task
        why = last_position_codes(problem, opts, "lookup", "the saturations at positions no layer reads")
        if why is not None:
            return why
        why = keys_from_tokens(cast(Model, problem.model))
        if why is not None:
            return why + " (the lookup engine takes keys and values that are tables over (position, token))"
        if task.cases is None:
            return f"task {task.name} has no case splits"
        why = _unchased(task, next(iter(case_splits(task))))  # the first case (index lookup at N = 1024 has 524,800)
        if why is not None:
            return why
        return None

    def run(self, problem: Problem, opts: RunOptions) -> EngineResult:
        t0 = time.monotonic()
        task = problem.task
        ev = Evaluator(cast(Model, problem.model), problem.arith)
        _monotone(cast(Fixed, ev.arith))
        tables = _tables(ev)
        result = EngineResult(Status.COMPLETE, 0, [])
        cases = list(case_splits(task))
        stats = {"lookup_leaves": 0, "largest_case_leaves": 0, "certificate_splits": 0}
        try:
            for n, case in enumerate(cases):
                why = _unchased(task, case)
                if why is not None:
                    raise InternalError(f"{why}: case {case.name} differs from the first case")
                if opts.progress:
                    opts.progress(Tick(result.covered, task.total, n, len(cases), case.name))
                leaves, dom, splits = _leaves(ev, tables, task, case, opts)
                stats["lookup_leaves"] += len(leaves.tokens)
                stats["largest_case_leaves"] = max(stats["largest_case_leaves"], len(leaves.tokens))
                stats["certificate_splits"] += splits
                found, margin, index = _judge(ev, task, case, leaves, dom, opts.max_counterexamples - len(result.found))
                if result.min_margin is None or margin < result.min_margin:
                    result.min_margin, result.tightest = margin, index
                result.found += found
                if len(result.found) >= opts.max_counterexamples:  # its other failures may not be listed
                    result.found = sorted(result.found, key=lambda f: f.index)[:opts.max_counterexamples]
                    break
                result.covered += case.count
        except TimedOut:
            result.status = Status.TIMEOUT
        except KeyboardInterrupt:
            result.status = Status.INTERRUPTED
        result.found.sort(key=lambda f: f.index)
        result.stats = {**stats, "seconds": round(time.monotonic() - t0, 3)}
        return result


def _unchased(task, case: Case) -> Optional[str]:
    """Why the engine cannot decide the case: its inputs are not every member of its box, or the
    answer's positions are not known from a partial assignment; or None."""
    if case.valid is not None:
        return f"task {task.name} has inputs that are not every member of its boxes"
    if getattr(task, "answer_needs", None) is None and case.answer_at is None:
        return f"task {task.name} does not say which positions its answer reads"
    return None


def _tables(ev: Evaluator) -> list[list[tuple[np.ndarray, np.ndarray]]]:
    """Per layer, per head, its keys and values at every (position, token) row (R, m): its maps of
    the embedding (`keys_from_tokens`), by the evaluator's own linear maps."""
    t = ev.tables
    assert t is not None, "the evaluator was built with its layer-0 tables"
    out = []
    for li, layer in enumerate(ev.q.layers):
        heads = []
        for hi, h in enumerate(layer.heads):
            maps = [ev._by_rows(len(t.x0), ev._plan(W)[0].size,
                                lambda r, ctx, W=W, b=b, name=f"L{li}.H{hi}.{s}": ev._lin(W, t.x0[r], b, ctx, name))[0]
                    for W, b, s in ((h.W_K, h.b_K, "k"), (h.W_V, h.b_V, "v"))]
            heads.append((maps[0], maps[1]))
        out.append(heads)
    return out


def _leaves(ev: Evaluator, tables, task, case: Case, opts: RunOptions) -> tuple[Branches, Domains, int]:
    """The case's leaves (module docstring), with the last position's stream after every layer; its
    domains; and how many splits the certificate asked for."""
    V, d = len(ev.q.vocab), ev.q.d
    dom = Domains.of(case, V)
    L = len(dom.size)
    first = dom.pad[:, 0]
    fixed = dom.size == 1
    br = Branches(first[None, :].copy(), fixed[None, :].copy(), np.zeros((1, d), np.int64))
    if not fixed[-1]:
        br = _split(br, np.array([L - 1]), dom, 0)
    while True:  # the positions the answer reads
        need = _answer_needs(task, case, br)
        if (need < 0).all():
            break
        br = Branches.join([br.take(need < 0), _split(br.take(need >= 0), need[need >= 0], dom, int((need < 0).sum()))])
    br.X = cast(_Layer0Tables, ev.tables).x0[(L - 1) * V + br.tokens[:, -1]]  # layer 0's input at the last position
    splits = 0
    for li in range(len(ev.q.layers)):
        done, pending = [], br
        while len(pending.tokens):
            opts.deadline.check()
            bad, score = _certify(ev, tables[li], li, pending, dom)
            ok = ~bad.any(axis=1)
            done.append(pending.take(np.flatnonzero(ok)))
            rest = pending.take(np.flatnonzero(~ok))
            at = np.where(bad[~ok], score[~ok], -np.inf).argmax(axis=1)
            splits += len(at)
            pending = _split(rest, at, dom, sum(len(p.tokens) for p in done))
        br = Branches.join(done)
        br.X = _apply(ev, tables[li], li, br, opts)
    _covers(br, dom, case)
    return br, dom, splits


def _answer_needs(task, case: Case, br: Branches) -> np.ndarray:
    """(B,) per branch, a free position the answer reads (-1: it reads only fixed ones)."""
    if getattr(task, "answer_needs", None) is not None:
        return task.answer_needs(br.tokens, br.fixed)
    j = cast(tuple, case.answer_at)[0]  # `unsupported` saw it
    return np.where(br.fixed[:, j], -1, j)


def _split(br: Branches, at: np.ndarray, dom: Domains, alive: int) -> Branches:
    """Every branch split on its position `at`: one branch per token of the position's domain.
    TooLarge, before allocating, when they and the `alive` others would pass MAX_BRANCHES."""
    counts = dom.size[at]
    total = int(counts.sum())
    if total + alive > MAX_BRANCHES:
        raise TooLarge(f"more than {MAX_BRANCHES:,} branches of a case (the lookup engine does not merge them)")
    parent = np.repeat(np.arange(len(at)), counts)
    k = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
    pos = at[parent]
    out = br.take(parent)
    rows = np.arange(total)
    out.tokens[rows, pos] = dom.pad[pos, k]
    out.fixed[rows, pos] = True
    return out


def certified(arith: Fixed, smax: np.ndarray, M: np.ndarray) -> np.ndarray:
    """Per free position, from its largest logit over its domain smax (B, L) and the largest fixed
    logit M (B,): does it add exactly 0 on every completion (<= M, and the exp(s - M) code of 0)?
    The exp table is monotone (`_monotone`), so the largest logit's code bounds every token's."""
    return (smax <= M[:, None]) & (arith.exp_of(smax - M[:, None]) == 0)


def _monotone(arith: Fixed) -> None:
    """The exp table `certified` reads at a position's largest logit only rises with its argument."""
    if np.any(np.diff(arith.exp_table()[1]) < 0):
        raise InternalError(f"the exp table of {arith} is not monotone: the lookup engine's certificate "
                            f"does not hold")


def _certify(ev: Evaluator, heads, li: int, br: Branches, dom: Domains) -> tuple[np.ndarray, np.ndarray]:
    """(B, L): the free positions some head of layer li may weigh (module docstring, 2), and their
    largest logit less M (what the split picks by).  The logits are a function of the query, so
    they are computed once per distinct stream code (branches share them)."""
    arith = cast(Fixed, ev.arith)
    B, L = br.tokens.shape
    bad = np.zeros((B, L), bool)
    score = np.full((B, L), np.iinfo(np.int64).min)
    codes, inv = np.unique(br.X, axis=0, return_inverse=True)
    inv = inv.reshape(-1)
    step = max(1, CHUNK // max(len(dom.rows), 1))
    own = dom.at[np.arange(L) * len(ev.q.vocab) + br.tokens]  # (B, L) each position's token's candidate
    for hi, (head, (K, _)) in enumerate(zip(ev.q.layers[li].heads, heads)):
        keys, kinv = np.unique(K[dom.rows], axis=0, return_inverse=True)
        kinv = kinv.reshape(-1)
        for a in range(0, len(codes), step):
            c = slice(a, min(len(codes), a + step))
            ctx = arith.context((c.stop - a, 1))
            Q = ev._lin(head.W_Q, codes[c, None, :], head.b_Q, ctx, f"L{li}.H{hi}.q")
            S = arith.scores(Q, keys[None], ctx, f"L{li}.H{hi}.logits")[:, 0, kinv]  # (codes, candidates)
            smax = np.maximum.reduceat(S, dom.starts, axis=1)  # (codes, L) each position's largest logit
            sel = np.flatnonzero((inv >= a) & (inv < c.stop))
            row = inv[sel] - a
            M = np.where(br.fixed[sel], S[row[:, None], own[sel]], np.iinfo(np.int64).min).max(axis=1)
            bad[sel] |= ~certified(arith, smax[row], M) & ~br.fixed[sel]
            score[sel] = np.maximum(score[sel], smax[row] - M[:, None])
    return bad, score


def _apply(ev: Evaluator, heads, li: int, br: Branches, opts: RunOptions) -> np.ndarray:
    """Layer li at the last position of every branch's first completion (evaluator's own softmax,
    mix, W_O, residual and FFN): (B, d)."""
    arith, layer = ev.arith, ev.q.layers[li]
    B, L = br.tokens.shape
    rows = np.arange(L) * len(ev.q.vocab) + br.tokens
    mask = np.ones((1, L), bool) if layer.causal else None  # the last position sees every position
    out = np.empty_like(br.X)
    step = max(1, CHUNK // max(L * max(K.shape[1] + V.shape[1] for K, V in heads), 1))
    for a in range(0, B, step):
        opts.deadline.check()
        r = slice(a, min(B, a + step))
        ctx = arith.context((r.stop - a, 1))
        Xq = br.X[r, None, :]
        outs = []
        for hi, (head, (K, Vt)) in enumerate(zip(layer.heads, heads)):
            Q = ev._lin(head.W_Q, Xq, head.b_Q, ctx, f"L{li}.H{hi}.q")
            S = arith.scores(Q, K[rows[r]], ctx, f"L{li}.H{hi}.logits", mask)
            outs.append(ev._attend(layer, f"L{li}.H{hi}", S, Vt[rows[r]], mask, ctx))
        out[r] = ev.finish_layer(li, Xq, outs, ctx)[:, 0]
    return out


def _covers(br: Branches, dom: Domains, case: Case) -> None:
    """The leaves partition the case: their completions number its inputs."""
    patterns, counts = np.unique(br.fixed, axis=0, return_counts=True)
    total = sum(int(c) * int(np.prod(dom.size[~p].astype(object))) for p, c in zip(patterns, counts))
    if total != case.count:
        raise InternalError(f"the lookup engine's leaves cover {total:,} inputs of case {case.name}, which has "
                            f"{case.count:,}")


def _judge(ev: Evaluator, task, case: Case, br: Branches, dom: Domains, room: int) -> tuple[list[Found], float, int]:
    """The leaves' outputs against the task's answers: the failing inputs (every completion of a
    failing leaf, up to `room`), the smallest margin and its input's index."""
    B = len(br.tokens)
    _same(ev, br.take(np.arange(min(B, CHECKED))), dom, case)
    ctx = ev.arith.context((B,))
    y = ev.scores(br.X, ctx)
    pred, tie = ev._decide(y)
    answers, valid = task.evaluate(br.tokens)
    if not valid.all():
        raise InternalError(f"a leaf's first completion in case {case.name} is not an input of task {task.name}")
    judged = ev.judge(Outputs(y, pred, tie, np.zeros(B, bool)), answers)
    j = int(np.argmin(judged.margin))
    found: list[Found] = []
    for b in np.flatnonzero(judged.failed):
        for tokens in _completions(br.tokens[b], br.fixed[b], case.domains, room - len(found)):
            found.append(Found.of(judged, int(b), task.index_of(tokens), tokens))
        if len(found) >= room:
            break
    return found, float(judged.margin[j]), task.index_of(br.tokens[j])


def _completions(tokens: np.ndarray, fixed: np.ndarray, domains, most: int):
    """The first `most` completions of a leaf (its free positions over their domains)."""
    free = np.flatnonzero(~fixed)
    sizes = [len(domains[j]) for j in free]
    count = int(np.prod(np.array(sizes, dtype=object))) if len(free) else 1
    for k in range(min(most, count)):
        row = tokens.copy()
        for j, s in zip(free[::-1], sizes[::-1]):
            k, digit = divmod(k, s)
            row[j] = domains[j][digit]
        yield row


def _same(ev: Evaluator, br: Branches, dom: Domains, case: Case) -> None:
    """The last position's stream of the first leaves' last completions (every free position at its
    domain's last token: not the completion the stream was computed on), evaluated from their
    tokens, is the one carried layer by layer."""
    tokens = np.where(br.fixed, br.tokens, dom.pad[np.arange(len(dom.size)), dom.size - 1])
    seen: dict[str, np.ndarray] = {}
    ev.forward(tokens, rec=lambda name, value: seen.__setitem__(name, value))
    last = len(ev.q.layers) - 1
    stream = seen[f"L{last}.out" if ev.q.layers[last].has_ffn else f"L{last}.resid"][:, -1]
    if not np.array_equal(stream, br.X):
        raise InternalError(f"the last position's stream carried by the lookup engine differs from the evaluator's "
                            f"in case {case.name}: a certificate is wrong")
