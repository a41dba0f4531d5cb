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
   products in the mix are 0: the head's output is the same on every completion.  It is computed
   by the evaluator's own softmax and mix over the fixed positions (the sums are exact, so terms
   of 0 left out change no code).  A branch that fails is split on the failing free position with
   the largest logit (one branch per token of its domain); the splits partition the branch.  A
   child's M is at least its parent's, and the certificate only gets easier as M rises, so a
   child is checked again only at its parent's other failing positions.
3. *The answer.*  Each branch carries the answer's chase (the task's `answer_needs`: composition
   chases z_0 -> z_1 -> ...; or the case's `answer_at`): the positions it has read, all fixed, and
   the next one it reads.  After the layers, branches are split on the chase's next position
   until it has read all it needs, so the answer too is the same on every member of a leaf.  The
   chase must be memoryless: from the position it reads next, the answer depends only on the
   tokens the chase reads from there on (composition's pointer chase is).
4. *Merging.*  After each layer, branches with the same stream on the columns that a later query
   or FFN, or the readout, reads (`_live`) and at the same point of the chase (its next position,
   or the answer) have the same output and answer on all their members, whatever the tokens they
   fixed before: they are made one.  The first is the representative (its tokens and whole
   stream), a position stays fixed where every member has its token, and `touched` marks the
   positions some member fixes; a position no member fixes is free on every member.  The later
   certificates read the merged branch's fixed positions and take the others at their whole
   domains, which is sound for every member.  A split must be on a position free on every member
   (its children then have 1/|domain| of the members each); when a certificate or the chase asks
   for another, the case is decided again without merging (`_Unmerge`).  Composition's branches
   after layer l are then one per pointer i_l, not one per path to it: at L = 4, N = 2 a case ends
   with 16 leaves instead of 1,024.

So every member of a leaf has the leaf's output and answer: all are right iff its representative
is, a failing leaf's members all fail, and the smallest margin over the leaves is the case's.  A
failing leaf's members that differ from its representative only at positions free on every member
are listed, up to max_counterexamples; where that lists fewer, the case is decided again without
merging and its failures listed from its leaves.  The first leaves of the first case, and one of
every other, are evaluated by the evaluator on another member (`_same`): their whole stream must be
the one carried.  The members of the leaves, counted exactly, must number the case's inputs.

It refuses float and int8 formats, overflow = error (the saturations of the positions that are not
read would count), a BOS, and tasks whose answer it cannot chase.  More than MAX_BRANCHES branches
alive in a case, or a split the available memory cannot hold, are refused (`TooLarge`: auto then
takes the next engine).
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, fields
from typing import Optional, cast

import numpy as np

from ..arithmetic import Fixed
from ..evaluator import Evaluator, Outputs, _Layer0Tables
from ..layer0 import keys_from_tokens
from ..model import Model
from ..support.budget import TimedOut, TooLarge, require_memory
from ..support.errors import InternalError
from ..tasks import Case
from ..tasks.base import case_splits
from ..verdicts import Status
from .base import EngineResult, Found, Problem, RunOptions, Tick, group_rows, last_position_codes

MAX_BRANCHES = 1 << 20  # branches alive at once (each holds its tokens and stream)
SPLIT_COPIES = 3  # a split's children are held about this many times at its peak (the children, the next
# split's `take`, the certificate's failing and score arrays): composition, depth 3, N = 64 reached 19.5 GB
# after a split into 2^20 branches of 8.8 KB (9.2 GB; its 450 positions); two such runs at once were killed
CHUNK = 1 << 22  # elements of the largest temporary (branches x candidate rows)
CHECKED = 8  # leaves of the first case also evaluated on another member (`_same`; one in each other case)


@dataclass
class Branches:
    """Sets of a case's inputs, each with the last position's stream that all its members have.

    A branch is the union of the partial assignments merged into it (module docstring, 4); its
    representative is a member.  Where `touched` is False every member's assignment is free, so the
    branch is a set of tokens at the touched positions times those positions' whole domains."""

    tokens: np.ndarray  # (B, L) the representative
    alt: np.ndarray  # (B, L) another member: the last merged into it (the representative if none was)
    fixed: np.ndarray  # (B, L) bool: every member has the representative's token here
    touched: np.ndarray  # (B, L) bool: some member's assignment fixes the position
    read: np.ndarray  # (B, L) bool: the positions the representative's answer chase has read
    need: np.ndarray  # (B,) the next position the chase reads (-1: it has read all it needs)
    count: np.ndarray  # (B,) object: the number of members (Python integers: a case can have 10^30)
    X: np.ndarray  # (B, d) the last position's stream after the layers so far
    code: np.ndarray  # (B,) which of the layer's distinct queries it has (`_Queries`)

    def take(self, rows: np.ndarray) -> "Branches":
        return Branches(*(getattr(self, f.name)[rows] for f in fields(self)))

    @staticmethod
    def join(parts: list["Branches"]) -> "Branches":
        return Branches(*(np.concatenate([getattr(p, f.name) for p in parts]) for f in fields(Branches)))


class _Unmerge(Exception):
    """A merged branch must be split on a position some of its members fix (module docstring, 4)."""

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

    def __init__(self, merge: bool = True) -> None:
        self.merge = merge  # False: no branch is merged (module docstring, 4): the benchmarks' baseline

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
        live = _live(ev.q)
        result = EngineResult(Status.COMPLETE, 0, [])
        cases = list(case_splits(task))
        tightest: Optional[np.ndarray] = None
        stats = {"lookup_leaves": 0, "lookup_branches": 0, "largest_case_leaves": 0, "certificate_splits": 0,
                 "unmerged_cases": 0}
        try:
            for n, case in enumerate(cases):
                why = _unchased(task, case)
                if why is not None:
                    raise InternalError(f"{why}: case {case.name} differs from the first case")
                if opts.progress:
                    opts.progress(Tick(result.covered, task.total, n, len(cases), case.name))
                room = opts.max_counterexamples - len(result.found)
                decide = functools.partial(_decide, ev, tables, task, case, opts, live, room, CHECKED if n == 0 else 1)
                try:
                    leaves, work, found, margin, tokens = decide(self.merge)
                    # the members of a merged leaf are not all listed: list them from the leaves unmerged
                    if self.merge and 0 < len(found) < room:
                        leaves, work, found, margin, tokens = decide(False)
                except _Unmerge:
                    stats["unmerged_cases"] += 1
                    leaves, work, found, margin, tokens = decide(False)
                stats["lookup_leaves"] += len(leaves.tokens)
                stats["largest_case_leaves"] = max(stats["largest_case_leaves"], len(leaves.tokens))
                stats["lookup_branches"] += work["branches"]
                stats["certificate_splits"] += work["splits"]
                if result.min_margin is None or margin < result.min_margin:
                    result.min_margin, tightest = margin, tokens
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
        if tightest is not None:
            result.tightest = task.index_of(tightest)
        result.stats = {**stats, "seconds": round(time.monotonic() - t0, 3)}
        return result


def _decide(ev: Evaluator, tables, task, case: Case, opts: RunOptions, live: list[np.ndarray], room: int,
            checked: int, merge: bool) -> tuple[Branches, dict[str, int], list[Found], float, np.ndarray]:
    """A case's leaves (merged or not), the work, and their judgement (`_judge`)."""
    leaves, dom, work = _leaves(ev, tables, task, case, opts, live if merge else None)
    return (leaves, work) + _judge(ev, task, case, leaves, dom, room, checked, live[-1])


def _unchased(task, case: Case) -> Optional[str]:
    """Why the engine cannot decide the case: its inputs are not every member of its box, or the
    answer's positions are not known from a partial assignment; or None."""
    if case.valid is not None:
        return f"task {task.name} has inputs that are not every member of its boxes"
    if getattr(task, "answer_needs", None) is None and case.answer_at is None:
        return f"task {task.name} does not say which positions its answer reads"
    return None


@dataclass
class _Table:
    """One head's keys and values at every (position, token) row, and its distinct keys."""

    K: np.ndarray  # (R, m)
    V: np.ndarray  # (R, m_v)
    keys: np.ndarray  # (distinct, m)
    key_of: np.ndarray  # (R,) the row's key among them


def _tables(ev: Evaluator) -> list[list[_Table]]:
    """Per layer, per head, its keys and values at every (position, token) row: its maps of the
    embedding (`keys_from_tokens`), by the evaluator's own linear maps."""
    t = ev.tables
    assert t is not None, "the evaluator was built with its layer-0 tables"
    out = []
    for li, layer in enumerate(ev.q.layers):
        heads = []
        for hi, h in enumerate(layer.heads):
            K, Vt = [ev._by_rows(len(t.x0), ev._plan(W)[0].size,
                                 lambda r, ctx, W=W, b=b, name=f"L{li}.H{hi}.{s}": ev._lin(W, t.x0[r], b, ctx, name))[0]
                     for W, b, s in ((h.W_K, h.b_K, "k"), (h.W_V, h.b_V, "v"))]
            key_of, first = group_rows([K])
            heads.append(_Table(K, Vt, K[first], key_of))
        out.append(heads)
    return out


def _live(q: Model) -> list[np.ndarray]:
    """Per layer, the columns of the last position's stream after it that a later layer's query or
    FFN, or the readout, reads (a map reads only its non-zero columns): branches that differ only
    in the others, and are at the same point of the answer's chase, have the same future."""
    def cols(W) -> set[int]:
        return set(np.flatnonzero(np.any(np.asarray(W) != 0, axis=0)).tolist())

    read = cols(q.readout.W_U)
    out: list[np.ndarray] = []
    for layer in q.layers[::-1]:
        out.append(np.array(sorted(read), np.int64))
        read |= set().union(*(cols(h.W_Q) for h in layer.heads)) | (cols(layer.W1) if layer.has_ffn else set())
    return out[::-1]


def _leaves(ev: Evaluator, tables, task, case: Case, opts: RunOptions,
            live: Optional[list[np.ndarray]]) -> tuple[Branches, Domains, dict[str, int]]:
    """The case's leaves (module docstring), with the last position's stream after every layer,
    merged after every layer on the `live` columns (None: not merged); its domains; and the work:
    branches through the layers, and splits the certificate asked for."""
    V, arith = len(ev.q.vocab), cast(Fixed, ev.arith)
    dom = Domains.of(case, V)
    L = len(dom.size)
    one = (dom.size == 1)[None, :]
    count = np.empty(1, object)
    count[0] = case.count
    first = dom.pad[None, :, 0]
    br = Branches(first.copy(), first.copy(), one.copy(), one.copy(), one.copy(), np.zeros(1, np.int64), count,
                  np.zeros((1, ev.q.d), np.int64), np.zeros(1, np.int64))
    if not one[0, -1]:
        br = _split(br, np.array([L - 1]), dom, 0)
    br = _chase(task, case, br)
    br.X = cast(_Layer0Tables, ev.tables).x0[(L - 1) * V + br.tokens[:, -1]]  # layer 0's input at the last position
    work = {"branches": 0, "splits": 0}
    for li in range(len(ev.q.layers)):
        done, pending = [], br
        logits = _Logits.of(ev, li, tables[li], br, dom)
        M = logits.fixed_max(br, dom, V)
        cols, open_, family = np.arange(L), ~br.fixed, np.arange(len(br.tokens))
        while len(pending.tokens):
            opts.deadline.check()
            # siblings with the same M (a key that does not depend on the token) fail alike
            kin, first = group_rows([family, M])
            bad, score = (a[kin] for a in logits.failing(arith, pending.code[first], M[first], cols, open_[first]))
            failing = bad.any(axis=1)
            done.append(pending.take(np.flatnonzero(~failing)))
            rows = np.flatnonzero(failing)
            if not len(rows):
                break
            pick = np.where(bad[rows], score[rows], np.iinfo(np.int64).min).argmax(axis=1)
            at = cols[pick]
            work["splits"] += len(at)
            pending = _chase(task, case, _split(pending.take(rows), at, dom, sum(len(p.tokens) for p in done)))
            parent = np.repeat(np.arange(len(at)), dom.size[at])
            # a child's M is its parent's or its new token's logit, and the certificate only gets
            # easier as M rises: only its parent's other failing positions are checked again
            M = np.maximum(M[rows][parent], logits.of_token(pending, at[parent], dom, V))
            open_, family = bad[rows][parent], parent
            open_[np.arange(len(parent)), pick[parent]] = False
            keep = open_.any(axis=0)
            cols, open_ = cols[keep], open_[:, keep]
        br = Branches.join(done)
        br.X = _apply(ev, tables[li], li, br, opts)
        work["branches"] += len(br.tokens)
        if live is not None:
            br = _merge(task, br, live[li])
    while (br.need >= 0).any():  # the positions the answer reads that no layer weighed
        opts.deadline.check()
        open_ = br.need >= 0
        rest = br.take(np.flatnonzero(open_))
        br = Branches.join([br.take(np.flatnonzero(~open_)),
                            _chase(task, case, _split(rest, rest.need, dom, int((~open_).sum())))])
    if live is not None:
        br = _merge(task, br, live[-1])
    if sum(br.count) != case.count:
        raise InternalError(f"the lookup engine's leaves cover {sum(br.count):,} inputs of case {case.name}, "
                            f"which has {case.count:,}")
    return br, dom, work


def _chase(task, case: Case, br: Branches) -> Branches:
    """Each branch's answer chase, taken through the positions every member fixes: its next
    position (`need`), and the positions read so far (`read`)."""
    rows = np.arange(len(br.tokens))
    while True:
        if getattr(task, "answer_needs", None) is not None:
            need = task.answer_needs(br.tokens, br.read)
        else:
            j = cast(tuple, case.answer_at)[0]  # `unsupported` saw it
            need = np.where(br.read[:, j], -1, j)
        step = (need >= 0) & br.fixed[rows, np.maximum(need, 0)]
        if not step.any():
            br.need = need
            return br
        br.read[rows[step], need[step]] = True


def _split(br: Branches, at: np.ndarray, dom: Domains, alive: int) -> Branches:
    """Every branch split on its position `at`: one branch per token of the position's domain.
    The position is free on every member (else _Unmerge), so each child has 1/|domain| of them.
    TooLarge, before allocating, when they and the `alive` others would pass MAX_BRANCHES, or when
    the machine's available memory cannot hold them (a run refused is an engine's refusal; a run the
    kernel kills is no verdict at all)."""
    if br.touched[np.arange(len(at)), at].any():
        raise _Unmerge()
    counts = dom.size[at]
    total = int(counts.sum())
    if total + alive > MAX_BRANCHES:
        raise TooLarge(f"more than {MAX_BRANCHES:,} branches of a case")
    row = sum(getattr(br, f.name)[:1].nbytes for f in fields(br)) + 32  # + a member count's Python integer
    require_memory(SPLIT_COPIES * total * row, f"the lookup engine's split into {total:,} branches of a case")
    parent = np.repeat(np.arange(len(at)), counts)
    k = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
    pos = at[parent]
    out = br.take(parent)
    rows = np.arange(total)
    out.tokens[rows, pos] = out.alt[rows, pos] = dom.pad[pos, k]
    out.fixed[rows, pos] = True
    out.touched[rows, pos] = True
    out.count = out.count // dom.size[pos]  # exact: the position is free on every member
    return out


def _merge(task, br: Branches, cols: np.ndarray) -> Branches:
    """Branches with the same stream on the columns the rest of the model reads (`_live`) and at the
    same point of the answer's chase (the position it reads next; or the answer) made one: the first
    is the representative, a position stays fixed where every member has its token, and the counts
    add (the branches are disjoint).  Its other columns are the representative's own."""
    answers = task.evaluate(br.tokens)[0]
    state = np.where(br.need >= 0, br.need, -1 - answers)
    inv, first = group_rows([br.X[:, cols], state])
    if len(first) == len(inv):
        return br
    order = np.argsort(inv, kind="stable")
    starts = np.searchsorted(inv[order], np.arange(len(first)))
    out = br.take(first)
    agree = br.fixed & (br.tokens == out.tokens[inv])
    out.fixed = np.logical_and.reduceat(agree[order], starts, axis=0)
    out.touched = np.logical_or.reduceat(br.touched[order], starts, axis=0)
    out.count = np.add.reduceat(br.count[order], starts)
    out.alt = br.alt[order[np.append(starts[1:], len(order)) - 1]]
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


@dataclass
class _Logits:
    """Layer li's logits in a case, per head: for each distinct query (the layer's input streams on
    the columns W_Q reads; a branch's `code` says which) and each distinct key (`_Table`), and each
    position's largest over its domain's keys."""

    S: list[np.ndarray]  # per head (codes, keys)
    smax: list[np.ndarray]  # per head (codes, L)
    key_of: list[np.ndarray]  # per head (candidates,) the candidate's key

    @classmethod
    def of(cls, ev: Evaluator, li: int, tables: list[_Table], br: Branches, dom: Domains) -> "_Logits":
        arith, layer = cast(Fixed, ev.arith), ev.q.layers[li]
        cols = np.flatnonzero(np.any(np.concatenate([h.W_Q for h in layer.heads]) != 0, axis=0))
        br.code, first = group_rows([br.X[:, cols]])
        if len(first) * max(len(t.keys) for t in tables) > CHUNK:
            raise TooLarge(f"more than {CHUNK:,} logits of distinct queries and keys in a layer")
        ctx = arith.context((len(first), 1))
        position = np.repeat(np.arange(len(dom.size)), dom.size)
        out = cls([], [], [])
        for hi, (head, table) in enumerate(zip(layer.heads, tables)):
            Q = ev._lin(head.W_Q, br.X[first, None, :], head.b_Q, ctx, f"L{li}.H{hi}.q")
            S = arith.scores(Q, table.keys[None], ctx, f"L{li}.H{hi}.logits")[:, 0]
            n = len(table.keys)
            key_of = table.key_of[dom.rows]
            pairs = np.unique(position * n + key_of)  # the distinct (position, key), by position
            out.S.append(S)
            out.smax.append(np.maximum.reduceat(S[:, pairs % n], np.searchsorted(pairs // n, np.arange(len(dom.size))),
                                                axis=1))
            out.key_of.append(key_of)
        return out

    def fixed_max(self, br: Branches, dom: Domains, V: int) -> np.ndarray:
        """(B, heads): M, the largest logit of a fixed position."""
        L = len(dom.size)
        own = dom.at[np.arange(L) * V + br.tokens]  # each position's token's candidate (-1 where free: masked)
        return np.stack([np.where(br.fixed, S[br.code[:, None], key_of[own]], np.iinfo(np.int64).min).max(axis=1)
                         for S, key_of in zip(self.S, self.key_of)], axis=1)

    def of_token(self, br: Branches, at: np.ndarray, dom: Domains, V: int) -> np.ndarray:
        """(B, heads): the logit of each branch's token at its position `at`."""
        cand = dom.at[at * V + br.tokens[np.arange(len(at)), at]]
        return np.stack([S[br.code, key_of[cand]] for S, key_of in zip(self.S, self.key_of)], axis=1)

    def failing(self, arith: Fixed, code: np.ndarray, M: np.ndarray, cols: np.ndarray,
                open_: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Of the positions `cols` still open (B, C): those some head may weigh (module docstring,
        2), and their largest logit less M (what the split picks by)."""
        bad = np.zeros(open_.shape, bool)
        score = np.full(open_.shape, np.iinfo(np.int64).min)
        for h, smax in enumerate(self.smax):
            s = smax[code[:, None], cols]
            bad |= ~certified(arith, s, M[:, h]) & open_
            score = np.maximum(score, s - M[:, h, None])
        return bad, score


def _apply(ev: Evaluator, heads: list[_Table], li: int, br: Branches, opts: RunOptions) -> np.ndarray:
    """Layer li at the last position of every branch's representative (evaluator's own softmax,
    mix, W_O, residual and FFN), its heads over the fixed positions only: the others' exp codes
    and terms are exactly 0 (`certified`), and the softmax's and the mix's sums are exact, so
    leaving them out changes no code (`_same` checks it on every case): (B, d)."""
    arith, layer = ev.arith, ev.q.layers[li]
    V = len(ev.q.vocab)
    out = np.empty_like(br.X)
    width = br.fixed.sum(axis=1)
    for k in np.unique(width):
        group = np.flatnonzero(width == k)
        at = np.nonzero(br.fixed[group])[1].reshape(len(group), k)  # each branch's fixed positions, in order
        rows = at * V + np.take_along_axis(br.tokens[group], at, axis=1)
        mask = np.ones((1, k), bool) if layer.causal else None  # the last position sees every position
        step = max(1, CHUNK // max(k * max(h.K.shape[1] + h.V.shape[1] for h in heads), 1))
        for a in range(0, len(group), step):
            opts.deadline.check()
            r = group[a:a + step]
            ctx = arith.context((len(r), 1))
            Xq = br.X[r, None, :]
            outs = []
            for hi, (head, table) in enumerate(zip(layer.heads, heads)):
                Q = ev._lin(head.W_Q, Xq, head.b_Q, ctx, f"L{li}.H{hi}.q")
                S = arith.scores(Q, table.K[rows[a:a + step]], ctx, f"L{li}.H{hi}.logits", mask)
                outs.append(ev._attend(layer, f"L{li}.H{hi}", S, table.V[rows[a:a + step]], mask, ctx))
            out[r] = ev.finish_layer(li, Xq, outs, ctx)[:, 0]
    return out


def _judge(ev: Evaluator, task, case: Case, br: Branches, dom: Domains, room: int, checked: int,
           live: np.ndarray) -> tuple[list[Found], float, np.ndarray]:
    """The leaves' outputs against the task's answers: the failing inputs (every completion of a
    failing leaf, up to `room`: the representative's member, over the positions free on every
    member), the smallest margin and its input."""
    B = len(br.tokens)
    ctx = ev.arith.context((B,))
    y = ev.scores(br.X, ctx)
    pred, tie = ev._decide(y)
    answers, valid = task.evaluate(br.tokens)
    if not valid.all():
        raise InternalError(f"a leaf's representative in case {case.name} is not an input of task {task.name}")
    first = np.arange(min(B, checked))
    _same(ev, br.take(first), dom, case, task, answers[first], live)
    judged = ev.judge(Outputs(y, pred, tie, np.zeros(B, bool)), answers)
    j = int(np.argmin(judged.margin))
    found: list[Found] = []
    for b in np.flatnonzero(judged.failed):
        for tokens in _completions(br.tokens[b], br.touched[b], case.domains, room - len(found)):
            found.append(Found.of(judged, int(b), task.index_of(tokens), tokens))
        if len(found) >= room:
            break
    return found, float(judged.margin[j]), br.tokens[j]


def _completions(tokens: np.ndarray, touched: np.ndarray, domains, most: int):
    """The first `most` members of a leaf that differ from its representative only where every
    member is free (those positions over their domains)."""
    free = np.flatnonzero(~touched)
    sizes = [len(domains[j]) for j in free]
    count = int(np.prod(np.array(sizes, dtype=object))) if len(free) else 1
    for k in range(min(most, count)):
        row = tokens.copy()
        for j, s in zip(free[::-1], sizes[::-1]):
            k, digit = divmod(k, s)
            row[j] = domains[j][digit]
        yield row


def _same(ev: Evaluator, br: Branches, dom: Domains, case: Case, task, answers: np.ndarray, read: np.ndarray) -> None:
    """Members of the first leaves, evaluated from their tokens: another member of the
    representative's own (every position free on every member at its domain's last token) has the
    whole stream carried layer by layer; the last member merged in has it on the columns the
    readout reads, and the representative's answer."""
    last = np.where(br.touched, br.tokens, dom.pad[np.arange(len(dom.size)), dom.size - 1])
    seen: dict[str, np.ndarray] = {}
    ev.forward(np.concatenate([last, br.alt]), rec=lambda name, value: seen.__setitem__(name, value))
    final = len(ev.q.layers) - 1
    stream = seen[f"L{final}.out" if ev.q.layers[final].has_ffn else f"L{final}.resid"][:, -1]
    B = len(br.tokens)
    if not np.array_equal(stream[:B], br.X):
        raise InternalError(f"the last position's stream carried by the lookup engine differs from the evaluator's "
                            f"in case {case.name}: a certificate is wrong")
    if not (np.array_equal(stream[B:, read], br.X[:, read]) and np.array_equal(task.evaluate(br.alt)[0], answers)):
        raise InternalError(f"a member merged into a leaf of the lookup engine in case {case.name} has another output "
                            f"or answer than the leaf: a merge is wrong")
